/* Helpers every AVX2 kernel of the "avx2" library shares (bf16_linear.c, f32_linear.c, decode_avx2.c, sample_avx2.c):
 * horizontal sum and max of 8 float lanes, and the mask of a tail's lanes. rollout/native.py copies this header beside
 * the sources it compiles; pyproject.toml ships it with them. */
#ifndef BATCHSCALE_AVX2_COMMON_H
#define BATCHSCALE_AVX2_COMMON_H

#include <immintrin.h>
#include <stdint.h>

static inline float sum8(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

static inline float max8(__m256 v) {
    __m128 lo = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_max_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

/* Lanes 0..left-1 set (left clamped to 8), for masked loads and stores of a tail. */
static inline __m256i tail8(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left < 8 ? (int)left : 8), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#endif
