/* y = x W^T + b with float32 activations and bfloat16 weights, for CPUs without native bf16 arithmetic (AVX2 + FMA).
 *
 * A decode step at a few active sequences reads every weight once per token: it is bound by memory bandwidth, so the
 * weights should cross the memory bus as the 2-byte bf16 the model holds. Torch on such a CPU either emulates bf16
 * matmuls (slow arithmetic) or needs float32 copies (twice the bytes). This kernel streams bf16 rows and widens them
 * in registers (a bf16 is the top half of a float32, so the widening is exact: zero-extend and shift left by 16),
 * then accumulates in float32 with FMA. Results equal F.linear(x, W.float(), b) up to float32 summation order.
 *
 * Layout: x (M, K), y (M, N), b (N,) or NULL: float32, row-major, contiguous. W (N, K): bf16 bits, row-major.
 * Any M: rows go 8 at a time (MAX_ROWS accumulators fit the 16 AVX registers), and for each output column n the
 * weight row is read from memory once for all M rows. Columns n are split across `threads` OpenMP threads.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define MAX_ROWS 8

static inline __m256 load_bf16x8(const uint16_t *p) {
    __m128i half = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

static inline float sum8(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

static inline float bf16_to_f32(uint16_t bits) {
    uint32_t widened = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &widened, sizeof value);
    return value;
}

/* One output column n for all M rows. Inlined with M a compile-time constant (see bf16_linear's switch), so the M
 * accumulators live in registers. */
static inline __attribute__((always_inline)) void column(const float *x, const uint16_t *row, const float *b,
                                                         float *y, int64_t n, int64_t N, int64_t K, const int M) {
    __m256 acc[MAX_ROWS];
    for (int m = 0; m < M; m++) acc[m] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 wk = load_bf16x8(row + k);
        for (int m = 0; m < M; m++) acc[m] = _mm256_fmadd_ps(wk, _mm256_loadu_ps(x + m * K + k), acc[m]);
    }
    for (int m = 0; m < M; m++) {
        float s = sum8(acc[m]);
        for (int64_t j = k; j < K; j++) s += bf16_to_f32(row[j]) * x[m * K + j];
        y[m * N + n] = b ? s + b[n] : s;
    }
}

/* Column n for all M rows, 8 rows at a time: the weight row is read from memory once, then from L1 for each chunk. */
static void column_all_rows(const float *x, const uint16_t *row, const float *b, float *y, int64_t n, int64_t M,
                            int64_t N, int64_t K) {
    for (int64_t m0 = 0; m0 < M; m0 += MAX_ROWS) {
        const float *xm = x + m0 * K;
        float *ym = y + m0 * N;
        switch (M - m0 < MAX_ROWS ? M - m0 : MAX_ROWS) {
        case 1: column(xm, row, b, ym, n, N, K, 1); break;
        case 2: column(xm, row, b, ym, n, N, K, 2); break;
        case 3: column(xm, row, b, ym, n, N, K, 3); break;
        case 4: column(xm, row, b, ym, n, N, K, 4); break;
        case 5: column(xm, row, b, ym, n, N, K, 5); break;
        case 6: column(xm, row, b, ym, n, N, K, 6); break;
        case 7: column(xm, row, b, ym, n, N, K, 7); break;
        default: column(xm, row, b, ym, n, N, K, 8); break;
        }
    }
}

void bf16_linear(const float *x, const uint16_t *w, const float *b, float *y, int64_t M, int64_t N, int64_t K,
                 int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t n = 0; n < N; n++) column_all_rows(x, w + n * K, b, y, n, M, N, K);
}
