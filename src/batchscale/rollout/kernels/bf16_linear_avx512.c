/* y = x W^T + b with bfloat16 activations, weights and output, for CPUs with native bf16 dot products (AVX512-BF16).
 *
 * The sibling bf16_linear.c is for CPUs without native bf16 (float32 activations, bf16 weights widened in registers).
 * Here the whole decode runs in bf16 (weights.resolve_generation_dtype keeps a bf16 model in bf16 on such a CPU), and
 * `vdpbf16ps` multiplies 32 bf16 pairs and adds them into 16 float32 lanes per instruction. A bf16 product is exact in
 * float32 (8-bit mantissas), so the result equals F.linear(x.float(), W.float(), b.float()) rounded once to bf16
 * (round to nearest even, as torch rounds), up to float32 summation order. vdpbf16ps flushes denormal inputs and
 * outputs to zero, which bf16 activations of a trained model do not reach in practice.
 *
 * Why not torch: at a few rows a decode step is bound by reading the weights once from memory, and torch's bf16
 * F.linear (oneDNN) at one row reads them at about half this kernel's rate, with more per-call overhead.
 *
 * Layout: x (M, K), y (M, N): bf16 bits, row-major, contiguous; W (N, K) bf16 bits, row-major; b (N,) bf16 or NULL.
 * Tiles of up to MR rows x NR columns keep MR * NR float32 accumulators in registers (16 of the 32 zmm registers):
 * each 32-wide step loads NR weight vectors and MR activation vectors for MR * NR dot products, so a weight row is
 * read from memory once for all M rows (the tile's weights stay in L1 across row tiles). The K tail is a masked
 * load (masked-off lanes read as zero, so they add nothing). Column tiles are split across `threads` OpenMP threads.
 *
 * How a tile walks its NR weight rows is the caller's choice (`order`, `prefetch`: native.KernelPlan, picked by timing
 * in rollout/tuning.py), since the fastest walk depends on the CPU's prefetchers, not on its flags:
 * - order 0 ("tiles"): step k of all NR rows together, NR interleaved streams through memory; Sapphire Rapids and
 *   Zen 5 read those at full speed;
 * - order 1 ("rows"): one row's steps, then the next row's: a single sequential stream. Zen 4 read 4 interleaved
 *   streams at about half the rate of one (docs/LOG.md, issue 47).
 * - prefetch: every weight line loaded also asks for the line `prefetch` bytes further on (0: none).
 * Each accumulator sums the same products in the same order whatever the walk, so every plan gives the same bits.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define MR 4
#define NR 4

static inline uint16_t f32_to_bf16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40);  /* NaN stays a (quiet) NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u);  /* round to nearest, ties to even */
    return (uint16_t)(bits >> 16);
}

static inline float bf16_to_f32(uint16_t bits) {
    uint32_t widened = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &widened, sizeof value);
    return value;
}

static inline __m512bh load32(const uint16_t *p, __mmask32 mask) {
    return (__m512bh)_mm512_maskz_loadu_epi16(mask, p);
}

/* Rows m0..m0+M-1 by columns n0..n0+C-1, with M <= MR and C <= NR compile-time constants after inlining; the loops
 * over them are unrolled so the accumulators stay in registers. */
#define UNROLL _Pragma("GCC unroll 4")

static inline __attribute__((always_inline)) void step(const uint16_t *xr, const uint16_t *wr, __m512 acc[MR][NR],
                                                       int64_t k, int64_t K, __mmask32 mask, const int M,
                                                       const int C) {
    __m512bh wk[NR];
    UNROLL for (int c = 0; c < C; c++) wk[c] = load32(wr + c * K + k, mask);
    UNROLL for (int m = 0; m < M; m++) {
        __m512bh xk = load32(xr + m * K + k, mask);
        UNROLL for (int c = 0; c < C; c++) acc[m][c] = _mm512_dpbf16_ps(acc[m][c], xk, wk[c]);
    }
}

/* step() for one column c only: the walk of order 1 (the products and their order per accumulator are step()'s). */
static inline __attribute__((always_inline)) void column_step(const uint16_t *xr, const uint16_t *wc,
                                                              __m512 acc[MR][NR], int64_t k, int64_t K,
                                                              __mmask32 mask, const int M, const int c) {
    __m512bh wk = load32(wc + k, mask);
    UNROLL for (int m = 0; m < M; m++) acc[m][c] = _mm512_dpbf16_ps(acc[m][c], load32(xr + m * K + k, mask), wk);
}

static inline void prefetch_line(const uint16_t *p, int64_t bytes) {
    _mm_prefetch((const char *)p + bytes, _MM_HINT_T0);
}

/* The horizontal sums of 16 vectors v[m][c], as lane m * 4 + c of one vector: pairs of vectors fold their 512-bit
 * halves together, then quarters, then lanes within each 128-bit block, and one permute puts the sums in order
 * (~45 instructions for 16 sums, where 16 _mm512_reduce_add_ps take ~160). */
__m512 reduce16(__m512 v[MR][NR]);  /* also used by decode_avx512.c's attention */

__m512 reduce16(__m512 v[MR][NR]) {
    __m512 t[8], u[4];
    for (int i = 0; i < 8; i++) {
        __m512 a = v[(2 * i) / NR][(2 * i) % NR], b = v[(2 * i + 1) / NR][(2 * i + 1) % NR];
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xDD));
    /* u[i]'s 128-bit block j holds 4 partial sums of vector 4 i + j */
    __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
    __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
    __m512 r = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23))),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23))));
    /* r's block j, lane l: the sum of vector 4 l + j */
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

static inline __attribute__((always_inline)) void tile(const uint16_t *x, const uint16_t *w, const uint16_t *b,
                                                       uint16_t *y, int64_t m0, int64_t n0, int64_t N, int64_t K,
                                                       const int M, const int C, int order, int64_t prefetch) {
    __m512 acc[MR][NR];
    UNROLL for (int m = 0; m < M; m++)
        UNROLL for (int c = 0; c < C; c++) acc[m][c] = _mm512_setzero_ps();
    const uint16_t *xr = x + m0 * K, *wr = w + n0 * K;
    const __mmask32 full = (__mmask32)0xffffffffu, tail = (__mmask32)((1u << (K % 32)) - 1u);
    int64_t k = 0;
    if (order == 0) {
        for (; k + 32 <= K; k += 32) {
            if (prefetch) UNROLL for (int c = 0; c < C; c++) prefetch_line(wr + c * K + k, prefetch);
            step(xr, wr, acc, k, K, full, M, C);
        }
        if (k < K) step(xr, wr, acc, k, K, tail, M, C);
    } else {
        UNROLL for (int c = 0; c < C; c++) {
            const uint16_t *wc = wr + c * K;
            for (k = 0; k + 32 <= K; k += 32) {
                if (prefetch) prefetch_line(wc + k, prefetch);
                column_step(xr, wc, acc, k, K, full, M, c);
            }
            if (k < K) column_step(xr, wc, acc, k, K, tail, M, c);
        }
    }
    if (M == MR && C == NR) {  /* a full tile: its 16 sums in one vector (sums[m * NR + c]), one rounding pass */
        __m512 sums = reduce16(acc);
        if (b) {
            float bias[NR];
            for (int c = 0; c < NR; c++) bias[c] = bf16_to_f32(b[n0 + c]);
            __m128 quad = _mm_loadu_ps(bias);
            sums = _mm512_add_ps(sums, _mm512_broadcast_f32x4(quad));
        }
        uint16_t out[MR * NR];
        _mm256_storeu_si256((__m256i *)out, (__m256i)_mm512_cvtneps_pbh(sums));
        for (int m = 0; m < MR; m++) memcpy(y + (m0 + m) * N + n0, out + m * NR, NR * sizeof(uint16_t));
        return;
    }
    UNROLL for (int m = 0; m < M; m++)
        UNROLL for (int c = 0; c < C; c++) {
            float s = _mm512_reduce_add_ps(acc[m][c]);
            if (b) s += bf16_to_f32(b[n0 + c]);
            y[(m0 + m) * N + n0 + c] = f32_to_bf16(s);
        }
}

/* All rows for columns n0..n0+C-1, MR rows at a time. */
static inline __attribute__((always_inline)) void column_tile(const uint16_t *x, const uint16_t *w, const uint16_t *b,
                                                              uint16_t *y, int64_t n0, int64_t M, int64_t N,
                                                              int64_t K, const int C, int order, int64_t prefetch) {
    int64_t m0 = 0;
    for (; m0 + MR <= M; m0 += MR) tile(x, w, b, y, m0, n0, N, K, MR, C, order, prefetch);
    switch (M - m0) {
    case 1: tile(x, w, b, y, m0, n0, N, K, 1, C, order, prefetch); break;
    case 2: tile(x, w, b, y, m0, n0, N, K, 2, C, order, prefetch); break;
    case 3: tile(x, w, b, y, m0, n0, N, K, 3, C, order, prefetch); break;
    default: break;
    }
}

void bf16_linear_bf16(const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y, int64_t M, int64_t N,
                      int64_t K, int threads, int order, int64_t prefetch) {
    int64_t tiles = (N + NR - 1) / NR;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t n0 = t * NR;
        switch (N - n0 < NR ? N - n0 : NR) {
        case 1: column_tile(x, w, b, y, n0, M, N, K, 1, order, prefetch); break;
        case 2: column_tile(x, w, b, y, n0, M, N, K, 2, order, prefetch); break;
        case 3: column_tile(x, w, b, y, n0, M, N, K, 3, order, prefetch); break;
        default: column_tile(x, w, b, y, n0, M, N, K, NR, order, prefetch); break;
        }
    }
}
