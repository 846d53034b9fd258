/* One token per row from float32 logits, and its log-prob, with AVX2 + FMA: sample_avx512.c's three passes (see there
 * for the rule) in 8 lanes, for the float32 logits of the AVX2 decode path. What rollout/sampling.py's sample_tokens
 * computes with top_p = 1, without its five full-size float32 tensors per step:
 *   e_i = exp((l_i - m) / T); the token is the first i whose running sum e_0 + ... + e_i exceeds u * (e_0 + ... +
 *   e_{V-1}), clamped to V - 1; greedy (uniforms NULL) is the first maximum, as torch.argmax.
 *   log-prob = l_token - (m + log sum_i exp(l_i - m)) (log_softmax at temperature 1, the model's own).
 * Sums accumulate in float32 lanes and are added in double, so the token agrees with torch's except where u * total
 * lands within rounding of a boundary. A NaN or infinite logit gives token V - 1 and log-prob NaN, as in
 * sample_avx512.c. exp: sample_avx512.c's polynomial (relative error ~2e-7), 2^n built in the exponent bits; 0
 * below -87 (where 2^n would leave the normal floats), so a -inf logit is never drawn.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>

#include "avx2_common.h"

static inline __m256 exp8(__m256 x) {
    __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);  /* exp(-inf) and kin: exactly 0 */
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(scale)));
}

static void sample_row(const float *l, int64_t V, const float *uniform, float inv_temperature, float *scratch,
                       int64_t *token, float *logprob) {
    int64_t v;
    /* pass 1: the maximum, and whether any logit is NaN (unordered with itself) */
    __m256 vmax = _mm256_set1_ps(-INFINITY), nan = _mm256_setzero_ps();
    for (v = 0; v < V; v += 8) {
        __m256i mask = tail8(V - v);
        __m256 x = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(l + v, mask),
                                    _mm256_castsi256_ps(mask));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        vmax = _mm256_max_ps(vmax, x);
    }
    const float m = max8(vmax);
    if (_mm256_movemask_ps(nan) || !isfinite(m)) {  /* report NaN, as torch's softmax would, never hide it */
        *token = V - 1;
        *logprob = NAN;
        return;
    }
    const __m256 vm = _mm256_set1_ps(m), scale = _mm256_set1_ps(inv_temperature);
    /* pass 2: e = exp((l - m) / T) into scratch, its sum, and sum exp(l - m) for the log-prob */
    __m256 sum_e = _mm256_setzero_ps(), sum_1 = _mm256_setzero_ps();
    const int tempered = inv_temperature != 1.0f;
    for (v = 0; v < V; v += 8) {
        __m256 mask = _mm256_castsi256_ps(tail8(V - v));
        __m256 x = _mm256_sub_ps(_mm256_maskload_ps(l + v, _mm256_castps_si256(mask)), vm);
        __m256 e = _mm256_and_ps(exp8(_mm256_mul_ps(x, scale)), mask);
        if (uniform) _mm256_storeu_ps(scratch + v, e);
        sum_e = _mm256_add_ps(sum_e, e);
        if (tempered) sum_1 = _mm256_add_ps(sum_1, _mm256_and_ps(exp8(x), mask));
    }
    const double total = sum8(sum_e);
    const double lse = m + log(tempered ? (double)sum8(sum_1) : total);
    int64_t chosen = V - 1;
    if (uniform) {  /* pass 3: the first running sum above u * total, block by block, then lane by lane */
        const double target = (double)*uniform * total;
        double running = 0.0;
        for (v = 0; v < V; v += 8) {
            int64_t width = V - v >= 8 ? 8 : V - v;
            double block = sum8(_mm256_loadu_ps(scratch + v));
            if (running + block > target) {
                for (int64_t i = 0; i < width; i++) {
                    running += scratch[v + i];
                    if (running > target) { chosen = v + i; break; }
                }
                break;
            }
            running += block;
        }
    } else {  /* greedy: the first index holding the maximum */
        for (v = 0; v < V; v++)
            if (l[v] == m) { chosen = v; break; }
    }
    *token = chosen;
    *logprob = (float)(l[chosen] - lse);
}

/* logits (B, V) float32, row-major; uniforms (B,) float32 or NULL (greedy); tokens (B,) int64; logprobs (B,);
 * scratch: float32, threads * (V + 16). */
void sample_f32(const float *logits, const float *uniforms, int64_t B, int64_t V, float temperature, int64_t *tokens,
                float *logprobs, float *scratch, int threads) {
    const float inv_temperature = 1.0f / temperature;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < B; b++)
        sample_row(logits + b * V, V, uniforms ? uniforms + b : NULL, inv_temperature,
                   scratch + (int64_t)omp_get_thread_num() * (V + 16), tokens + b, logprobs + b);
}
