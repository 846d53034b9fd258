/* One token per row from bf16 logits, and its log-prob: what rollout/sampling.py's sample_tokens computes with
 * top_p = 1 on the same logits upcast to float32, in three passes over each row instead of five full-size tensors.
 *
 * For row r with logits l (V,), maximum m, temperature T and uniform u:
 *   e_i = exp((l_i - m) / T); the token is the first i whose running sum e_0 + ... + e_i exceeds u * (e_0 + ... +
 *   e_{V-1}) (inverse CDF: torch.searchsorted(cumsum(softmax(l / T)), u * total, right=True), normalisation
 *   cancelled), clamped to V - 1; greedy (uniforms NULL) is the first maximum, as torch.argmax.
 *   log-prob = l_token - (m + log sum_i exp(l_i - m)) (log_softmax at temperature 1, the model's own).
 * Pass 1 finds m; pass 2 writes e into a per-thread scratch row and sums it (and exp(l - m) when T != 1); pass 3
 * walks 16-wide block sums of e, then the lanes of the block where the target falls. Sums accumulate in float32 lanes
 * and are added in double; torch's cumsum runs in double too, so the two agree except where u * total lands within
 * rounding of a boundary, which the draw hits with probability ~1e-7 per token.
 *
 * A row holding a NaN or an infinite logit gets token V - 1 and log-prob NaN (torch's softmax gives NaN there too),
 * so the NaN reaches the trainer's checks instead of vanishing into a clamped exp.
 *
 * exp: x = n ln 2 + r with |r| <= ln 2 / 2, exp(r) by a degree-6 polynomial (relative error ~2e-7, like torch's
 * vectorised exp), times 2^n by vscalefps (which also flushes x below -87 to 0).
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>

static inline __m512 widen16(const uint16_t *p, __mmask16 mask) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
}

static inline __m512 exp16(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f), ln2_hi = _mm512_set1_ps(0.693359375f),
                 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
    r = _mm512_fnmadd_ps(n, ln2_lo, r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

static inline float bf16_value(uint16_t bits) {
    union { uint32_t u; float f; } v = {(uint32_t)bits << 16};
    return v.f;
}

static void sample_row(const uint16_t *l, int64_t V, const float *uniform, float inv_temperature, float *scratch,
                       int64_t *token, float *logprob) {
    int64_t v;
    /* pass 1: the maximum (and, for greedy, its first index) */
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    for (v = 0; v < V; v += 16) {
        __mmask16 mask = V - v >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (V - v)) - 1u);
        __m512 x = widen16(l + v, mask);
        nan |= _mm512_mask_cmp_ps_mask(mask, x, x, _CMP_UNORD_Q);
        vmax = _mm512_mask_max_ps(vmax, mask, vmax, x);
    }
    const float m = _mm512_reduce_max_ps(vmax);
    if (nan || !isfinite(m)) {  /* a NaN or infinite logit: report NaN, as torch's softmax would, never hide it */
        *token = V - 1;
        *logprob = NAN;
        return;
    }
    const __m512 vm = _mm512_set1_ps(m), scale = _mm512_set1_ps(inv_temperature);
    /* pass 2: e = exp((l - m) / T) into scratch, its sum, and sum exp(l - m) for the log-prob */
    __m512 sum_e = _mm512_setzero_ps(), sum_1 = _mm512_setzero_ps();
    const int tempered = inv_temperature != 1.0f;
    for (v = 0; v < V; v += 16) {
        __mmask16 mask = V - v >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (V - v)) - 1u);
        __m512 x = _mm512_sub_ps(widen16(l + v, mask), vm);
        __m512 e = _mm512_maskz_mov_ps(mask, exp16(_mm512_mul_ps(x, scale)));
        if (uniform) _mm512_storeu_ps(scratch + v, e);
        sum_e = _mm512_add_ps(sum_e, e);
        if (tempered) sum_1 = _mm512_add_ps(sum_1, _mm512_maskz_mov_ps(mask, exp16(x)));
    }
    const double total = _mm512_reduce_add_ps(sum_e);
    const double lse = m + log(tempered ? (double)_mm512_reduce_add_ps(sum_1) : total);
    int64_t chosen = V - 1;
    if (uniform) {  /* pass 3: the first running sum above u * total, block by block, then lane by lane */
        const double target = (double)*uniform * total;
        double running = 0.0;
        for (v = 0; v < V; v += 16) {
            int64_t width = V - v >= 16 ? 16 : V - v;
            double block = _mm512_reduce_add_ps(_mm512_loadu_ps(scratch + v));
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
            if (bf16_value(l[v]) == m) { chosen = v; break; }
    }
    *token = chosen;
    *logprob = (float)(bf16_value(l[chosen]) - lse);
}

/* logits (B, V) bf16 bits, row-major; uniforms (B,) float32 or NULL (greedy); tokens (B,) int64; logprobs (B,);
 * scratch: float32, threads * (V + 16). */
void sample_bf16(const uint16_t *logits, const float *uniforms, int64_t B, int64_t V, float temperature,
                 int64_t *tokens, float *logprobs, float *scratch, int threads) {
    const float inv_temperature = 1.0f / temperature;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < B; b++)
        sample_row(logits + b * V, V, uniforms ? uniforms + b : NULL, inv_temperature,
                   scratch + (int64_t)omp_get_thread_num() * (V + 16), tokens + b, logprobs + b);
}
