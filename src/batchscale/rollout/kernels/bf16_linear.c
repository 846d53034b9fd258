/* y = x W^T + b with float32 activations and bfloat16 weights, for CPUs without native bf16 arithmetic (AVX2 + FMA).
 *
 * A decode step at a few active sequences reads every weight once per token: it is bound by memory bandwidth, so the
 * weights should cross the memory bus as the 2-byte bf16 the model holds. Torch on such a CPU either emulates bf16
 * matmuls (slow arithmetic) or needs float32 copies (twice the bytes). This kernel streams bf16 rows and widens them
 * in registers (a bf16 is the top half of a float32, so the widening is exact: zero-extend and shift left by 16),
 * then accumulates in float32 with FMA. Results equal F.linear(x, W.float(), b) up to float32 summation order.
 *
 * Layout: x (M, K), y (M, N), b (N,) or NULL: float32, row-major, contiguous. W (N, K): bf16 bits, row-major.
 * Register tiles as in f32_linear.c: up to MR rows x NR columns of accumulators, each 8-wide step widening NR weight
 * vectors once for all MR rows, so a tile's weight rows are read from memory once for all M rows (they stay in L1
 * across row tiles). NR independent accumulator chains per row keep the FMA latency (4 cycles) off the critical
 * path: the previous version (one column at a time, one chain per row) read the weights at 11-12 GB/s on one AVX2
 * core. The K tail is scalar (model widths are multiples of 8). Column tiles are split across `threads` OpenMP threads.
 * How a tile walks its weight rows (`order`: 0 all rows step by step, 1 one row after another; `prefetch`: bytes
 * ahead of each line read) is the caller's choice, timed per CPU (bf16_linear_avx512.c says why); neither changes
 * the arithmetic.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "avx2_common.h"

/* Two tile shapes: steps of a few rows (M < 4) take 2 x 4 tiles, so at one row four independent accumulator chains
 * stream four weight rows; larger steps take 4 x 3 tiles (12 accumulators, 3 widened weight vectors, the activations
 * as FMA memory operands: 15 of the 16 registers), where each widening (a shift on the FMA ports) serves 4 rows. */
#define MR_MAX 4
#define NR_MAX 4
#define UNROLL _Pragma("GCC unroll 8")

static inline __m256 load_bf16x8(const uint16_t *p) {
    __m128i half = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

static inline float bf16_to_f32(uint16_t bits) {
    uint32_t widened = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &widened, sizeof value);
    return value;
}

static inline void prefetch_line(const uint16_t *p, int64_t bytes) {
    _mm_prefetch((const char *)p + bytes, _MM_HINT_T0);
}

/* Rows m0..m0+M-1 by columns n0..n0+C-1, M <= MR_MAX and C <= NR_MAX compile-time constants after inlining. With
 * `prefetch`, a cache line per row every 32 weights: on the Sapphire Rapids VM demand loads alone read the weights
 * from memory at about half the rate (BENCHMARKS.md, AVX2 emulation; there the prefetch reached the next tile). */
static inline __attribute__((always_inline)) void tile(const float *x, const uint16_t *w, const float *b, float *y,
                                                       int64_t m0, int64_t n0, int64_t N, int64_t K, const int M,
                                                       const int C, int order, int64_t prefetch) {
    __m256 acc[MR_MAX][NR_MAX];
    UNROLL for (int m = 0; m < M; m++)
        UNROLL for (int c = 0; c < C; c++) acc[m][c] = _mm256_setzero_ps();
    const float *xr = x + m0 * K;
    const uint16_t *wr = w + n0 * K;
    int64_t k = 0;
    if (order == 0) {
        for (; k + 8 <= K; k += 8) {
            if (prefetch && !(k & 31)) UNROLL for (int c = 0; c < C; c++) prefetch_line(wr + c * K + k, prefetch);
            __m256 wk[NR_MAX];
            UNROLL for (int c = 0; c < C; c++) wk[c] = load_bf16x8(wr + c * K + k);
            UNROLL for (int m = 0; m < M; m++) {
                __m256 xk = _mm256_loadu_ps(xr + m * K + k);
                UNROLL for (int c = 0; c < C; c++) acc[m][c] = _mm256_fmadd_ps(wk[c], xk, acc[m][c]);
            }
        }
    } else {  /* one row after another: the same products in the same order per accumulator */
        UNROLL for (int c = 0; c < C; c++) {
            const uint16_t *wc = wr + c * K;
            for (k = 0; k + 8 <= K; k += 8) {
                if (prefetch && !(k & 31)) prefetch_line(wc + k, prefetch);
                __m256 wk = load_bf16x8(wc + k);
                UNROLL for (int m = 0; m < M; m++)
                    acc[m][c] = _mm256_fmadd_ps(wk, _mm256_loadu_ps(xr + m * K + k), acc[m][c]);
            }
        }
    }
    UNROLL for (int m = 0; m < M; m++)
        UNROLL for (int c = 0; c < C; c++) {
            float s = sum8(acc[m][c]);
            for (int64_t j = k; j < K; j++) s += bf16_to_f32(wr[c * K + j]) * xr[m * K + j];
            y[(m0 + m) * N + n0 + c] = b ? s + b[n0 + c] : s;
        }
}

/* All rows for columns n0..n0+C-1, MR rows at a time, then the rest. */
static inline __attribute__((always_inline)) void column_tile(const float *x, const uint16_t *w, const float *b,
                                                              float *y, int64_t n0, int64_t M, int64_t N, int64_t K,
                                                              const int MR, const int C, int order, int64_t prefetch) {
    int64_t m0 = 0;
    for (; m0 + MR <= M; m0 += MR) tile(x, w, b, y, m0, n0, N, K, MR, C, order, prefetch);
    switch (M - m0) {
    case 1: tile(x, w, b, y, m0, n0, N, K, 1, C, order, prefetch); break;
    case 2: tile(x, w, b, y, m0, n0, N, K, 2, C, order, prefetch); break;
    case 3: tile(x, w, b, y, m0, n0, N, K, 3, C, order, prefetch); break;
    default: break;
    }
}

/* Columns in tiles of NR over the threads, then the last < NR one by one. */
#define COLUMNS(MR, NR)                                                                                          \
    do {                                                                                                         \
        int64_t tiles = N / (NR);                                                                                \
        _Pragma("omp parallel for schedule(static) num_threads(threads)")                                        \
        for (int64_t t = 0; t < tiles; t++)                                                                      \
            column_tile(x, w, b, y, t * (NR), M, N, K, (MR), (NR), order, prefetch);                             \
        for (int64_t n0 = tiles * (NR); n0 < N; n0++) column_tile(x, w, b, y, n0, M, N, K, (MR), 1, order, prefetch); \
    } while (0)

void bf16_linear(const float *x, const uint16_t *w, const float *b, float *y, int64_t M, int64_t N, int64_t K,
                 int threads, int order, int64_t prefetch) {
    if (M < 4) COLUMNS(2, 4);
    else COLUMNS(4, 3);
}
