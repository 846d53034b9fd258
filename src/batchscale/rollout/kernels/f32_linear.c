/* y = x W^T + b in float32, for decode steps of a few sequences of a float32 model.
 *
 * Such a step reads every weight once per token, so it is bound by how fast the cores pull weights from memory.
 * Torch's float32 matrix-vector product reads them at 17-19 GB/s on one or two threads of the AVX-512 machine in
 * BENCHMARKS.md; this kernel reads 26 GB/s per core with AVX2 and 35-39 GB/s with AVX-512, and splits the output
 * columns over the OpenMP threads, so every core streams its share. Results equal F.linear(x, W, b) up to float32
 * summation order.
 *
 * One source, two widths: built into the "avx2" library (-mavx2 -mfma) it defines f32_linear with 8-lane vectors;
 * built into the "avx512_bf16" library (__AVX512F__) it defines f32_linear_avx512 with 16 lanes and twice the
 * columns per tile. weights.resolve_kernel picks the widest the CPU has.
 *
 * Layout: x (M, K), W (N, K), y (M, N), b (N,) or NULL: float32, row-major, contiguous. Tiles of up to MR rows x NR
 * columns keep MR * NR accumulators in registers; each step loads NR weight vectors and MR activation vectors, so a
 * tile's weight rows are read from memory once for all M rows (they stay in L1 across row tiles). Full steps use
 * plain loads (a masked load in the main loop halves AVX2's read rate); the K tail is one masked step (masked-off
 * lanes read as zero). How a tile walks its weight rows (`order`: 0 all NR rows step by step, 1 one row after
 * another; `prefetch`: bytes ahead of each line read, 0 none) is the caller's choice, timed per CPU
 * (bf16_linear_avx512.c says why); neither changes the arithmetic.
 */
#include <immintrin.h>
#include <stdint.h>

#define MR 2
#define UNROLL _Pragma("GCC unroll 8")

#ifdef __AVX512F__
#define NAME f32_linear_avx512
#define NR 8
#define LANES 16
typedef __m512 vec;
typedef __mmask16 tail_mask;
#define ZERO() _mm512_setzero_ps()
#define LOAD(p) _mm512_loadu_ps(p)
#define LOAD_TAIL(p, mask) _mm512_maskz_loadu_ps(mask, p)
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define HSUM(v) _mm512_reduce_add_ps(v)
static inline tail_mask make_tail(int64_t left) { return (tail_mask)((1u << left) - 1u); }
#else
#include "avx2_common.h"
#define NAME f32_linear
#define NR 4
#define LANES 8
typedef __m256 vec;
typedef __m256i tail_mask;
#define ZERO() _mm256_setzero_ps()
#define LOAD(p) _mm256_loadu_ps(p)
#define LOAD_TAIL(p, mask) _mm256_maskload_ps(p, mask)
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define HSUM(v) sum8(v)
static inline tail_mask make_tail(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

/* A cache line per weight row every 16 floats, `prefetch` bytes ahead: one AVX2 core's demand loads alone read the
 * weights from memory at ~14 GB/s on the machine of BENCHMARKS.md's AVX2-emulation section (~18 GB/s with a
 * prefetch of the next column tile). */
#define PREFETCH(p, k)                                                                                           \
    if (prefetch && !((k) & 15)) _mm_prefetch((const char *)(p) + prefetch, _MM_HINT_T0)

static inline __attribute__((always_inline)) void tile(const float *x, const float *w, const float *b, float *y,
                                                       int64_t m0, int64_t n0, int64_t N, int64_t K, const int M,
                                                       const int C, int order, int64_t prefetch) {
    vec acc[MR][NR];
    UNROLL for (int m = 0; m < M; m++)
        UNROLL for (int c = 0; c < C; c++) acc[m][c] = ZERO();
    const float *xr = x + m0 * K, *wr = w + n0 * K;
    int64_t k = 0, body = K - K % LANES;
    if (order == 0) {
        for (; k < body; k += LANES) {
            UNROLL for (int c = 0; c < C; c++) { PREFETCH(wr + c * K + k, k); }
            vec wk[NR];
            UNROLL for (int c = 0; c < C; c++) wk[c] = LOAD(wr + c * K + k);
            UNROLL for (int m = 0; m < M; m++) {
                vec xk = LOAD(xr + m * K + k);
                UNROLL for (int c = 0; c < C; c++) acc[m][c] = FMA(wk[c], xk, acc[m][c]);
            }
        }
    } else {  /* one row after another: the same products in the same order per accumulator */
        UNROLL for (int c = 0; c < C; c++) {
            const float *wc = wr + c * K;
            for (k = 0; k < body; k += LANES) {
                PREFETCH(wc + k, k);
                vec wk = LOAD(wc + k);
                UNROLL for (int m = 0; m < M; m++) acc[m][c] = FMA(wk, LOAD(xr + m * K + k), acc[m][c]);
            }
        }
    }
    if (body < K) {
        tail_mask mask = make_tail(K - body);
        vec wk[NR];
        UNROLL for (int c = 0; c < C; c++) wk[c] = LOAD_TAIL(wr + c * K + body, mask);
        UNROLL for (int m = 0; m < M; m++) {
            vec xk = LOAD_TAIL(xr + m * K + body, mask);
            UNROLL for (int c = 0; c < C; c++) acc[m][c] = FMA(wk[c], xk, acc[m][c]);
        }
    }
    UNROLL for (int m = 0; m < M; m++)
        UNROLL for (int c = 0; c < C; c++) y[(m0 + m) * N + n0 + c] = HSUM(acc[m][c]) + (b ? b[n0 + c] : 0.0f);
}

/* All rows for columns n0..n0+C-1, MR rows at a time. */
static inline __attribute__((always_inline)) void column_tile(const float *x, const float *w, const float *b,
                                                              float *y, int64_t n0, int64_t M, int64_t N, int64_t K,
                                                              const int C, int order, int64_t prefetch) {
    int64_t m0 = 0;
    for (; m0 + MR <= M; m0 += MR) tile(x, w, b, y, m0, n0, N, K, MR, C, order, prefetch);
    if (m0 < M) tile(x, w, b, y, m0, n0, N, K, 1, C, order, prefetch);
}

void NAME(const float *x, const float *w, const float *b, float *y, int64_t M, int64_t N, int64_t K, int threads,
          int order, int64_t prefetch) {
    int64_t tiles = N / NR;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t t = 0; t < tiles; t++) column_tile(x, w, b, y, t * NR, M, N, K, NR, order, prefetch);
    for (int64_t n0 = tiles * NR; n0 < N; n0++)  /* the last < NR columns */
        column_tile(x, w, b, y, n0, M, N, K, 1, order, prefetch);
}
