/* y = x W^T + b in float32 (AVX2 + FMA), for decode steps of a few sequences of a float32 model.
 *
 * Such a step reads every weight once per token, so it is bound by how fast the cores pull weights from memory.
 * Torch's float32 matrix-vector product reads them at one core's rate however many threads it is given (17-19 GB/s
 * on one and two threads of the AVX-512 machine in BENCHMARKS.md); this kernel splits the output columns over the
 * OpenMP threads, so every core streams its share. Results equal F.linear(x, W, b) up to float32 summation order.
 *
 * Layout: x (M, K), W (N, K), y (M, N), b (N,) or NULL: float32, row-major, contiguous. Tiles of up to MR rows x NR
 * columns keep MR * NR accumulators in registers; each 8-wide step loads NR weight vectors and MR activation vectors,
 * so a tile's weight rows are read from memory once for all M rows (they stay in L1 across row tiles). The K tail is
 * a masked load (masked-off lanes read as zero).
 */
#include <immintrin.h>
#include <stdint.h>

#define MR 2
#define NR 4
#define UNROLL _Pragma("GCC unroll 4")

static inline float sum8(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

static inline __attribute__((always_inline)) void step(const float *xr, const float *wr, __m256 acc[MR][NR],
                                                       int64_t k, int64_t K, __m256i mask, const int M,
                                                       const int C) {
    __m256 wk[NR];
    UNROLL for (int c = 0; c < C; c++) wk[c] = _mm256_maskload_ps(wr + c * K + k, mask);
    UNROLL for (int m = 0; m < M; m++) {
        __m256 xk = _mm256_maskload_ps(xr + m * K + k, mask);
        UNROLL for (int c = 0; c < C; c++) acc[m][c] = _mm256_fmadd_ps(wk[c], xk, acc[m][c]);
    }
}

static inline __attribute__((always_inline)) void tile(const float *x, const float *w, const float *b, float *y,
                                                       int64_t m0, int64_t n0, int64_t N, int64_t K, const int M,
                                                       const int C) {
    __m256 acc[MR][NR];
    UNROLL for (int m = 0; m < M; m++)
        UNROLL for (int c = 0; c < C; c++) acc[m][c] = _mm256_setzero_ps();
    const float *xr = x + m0 * K, *wr = w + n0 * K;
    const __m256i all = _mm256_set1_epi32(-1);
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) step(xr, wr, acc, k, K, all, M, C);
    if (k < K) {
        const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        step(xr, wr, acc, k, K, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(K - k)), lanes), M, C);
    }
    UNROLL for (int m = 0; m < M; m++)
        UNROLL for (int c = 0; c < C; c++) y[(m0 + m) * N + n0 + c] = sum8(acc[m][c]) + (b ? b[n0 + c] : 0.0f);
}

/* All rows for columns n0..n0+C-1, MR rows at a time. */
static inline __attribute__((always_inline)) void column_tile(const float *x, const float *w, const float *b,
                                                              float *y, int64_t n0, int64_t M, int64_t N, int64_t K,
                                                              const int C) {
    int64_t m0 = 0;
    for (; m0 + MR <= M; m0 += MR) tile(x, w, b, y, m0, n0, N, K, MR, C);
    if (m0 < M) tile(x, w, b, y, m0, n0, N, K, 1, C);
}

void f32_linear(const float *x, const float *w, const float *b, float *y, int64_t M, int64_t N, int64_t K,
                int threads) {
    int64_t tiles = (N + NR - 1) / NR;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t n0 = t * NR;
        switch (N - n0 < NR ? N - n0 : NR) {
        case 1: column_tile(x, w, b, y, n0, M, N, K, 1); break;
        case 2: column_tile(x, w, b, y, n0, M, N, K, 2); break;
        case 3: column_tile(x, w, b, y, n0, M, N, K, 3); break;
        default: column_tile(x, w, b, y, n0, M, N, K, NR); break;
        }
    }
}
