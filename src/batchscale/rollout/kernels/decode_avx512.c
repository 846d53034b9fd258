/* The small ops of a bf16 decode step, fused, for CPUs with native bf16 (built with bf16_linear_avx512.c).
 *
 * At a few sequences a decode step's matrices take ~10 ms on one core (SmolLM2-135M); the rest of a layer in torch
 * is ~20 small ops, and in bf16 torch decomposes RMSNorm into ~8 of them and runs attention through its flash kernel
 * (~70 us a call), several ms per step in all. Each function here is one call per layer instead:
 * - add_rms_norm: x += delta (rounded to bf16, as torch adds bf16), then y = x * rsqrt(mean(x^2) + eps) * g;
 * - rope: rotary embedding in place on the q and k heads of the fused projection's output, for each row's position
 *   (x * cos + rotate_half(x) * sin, the model's own cos/sin tables);
 * - attention: one query per row over its own cached keys and values (rows 0..B-1, lengths[b] positions each), with
 *   grouped KV heads; no mask, no positions past a row's own length;
 * - silu_mul: silu(gate) * up over the fused gate/up output.
 * Arithmetic is float32 and each output is rounded once to bf16 (round to nearest even), where torch's bf16 ops
 * round after each op: results agree with torch's bf16 decode to bf16 precision, not bit for bit. Attention and
 * silu_mul are vectorized (16 float32 lanes; q.k with vdpbf16ps) with exp512, a polynomial exp accurate to a few
 * float32 ulps, far below the bf16 rounding of the outputs.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float to_f32(uint16_t bits) {
    uint32_t widened = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &widened, sizeof value);
    return value;
}

static inline uint16_t to_bf16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

/* qkv (M, width) bf16: heads 0..heads-1 of D values each from column 0 get RoPE at position positions[m]; cos, sin
 * (length, D) bf16 tables. */
void rope_bf16(uint16_t *qkv, const uint16_t *cos, const uint16_t *sin, const int64_t *positions, int64_t M,
               int64_t width, int64_t heads, int64_t D) {
    int64_t half = D / 2;
    for (int64_t m = 0; m < M; m++) {
        const uint16_t *c = cos + positions[m] * D, *s = sin + positions[m] * D;
        for (int64_t h = 0; h < heads; h++) {
            uint16_t *x = qkv + m * width + h * D;
            for (int64_t i = 0; i < half; i++) {
                float a = to_f32(x[i]), b = to_f32(x[i + half]);
                x[i] = to_bf16(a * to_f32(c[i]) - b * to_f32(s[i]));
                x[i + half] = to_bf16(b * to_f32(c[i + half]) + a * to_f32(s[i + half]));
            }
        }
    }
}

/* exp(x) for 16 lanes: x = n ln2 + r with |r| <= ln2 / 2, a degree-6 Taylor polynomial in r (relative error
 * < 2e-7), scaled by 2^n with scalef (which saturates to 0 and inf). */
static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

__m512 reduce16(__m512 v[4][4]);  /* bf16_linear_avx512.c: lane 4 m + c = the sum of v[m][c] */

static inline __mmask16 tail16(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u); }

static inline __m512 widen16(const uint16_t *p, __mmask16 mask) {  /* 16 bf16 -> float32, exact */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
}

static inline void store16(uint16_t *p, __m512 v, __mmask16 mask) {  /* float32 -> bf16, round to nearest even */
    _mm256_mask_storeu_epi16(p, mask, (__m256i)_mm512_cvtneps_pbh(v));
}

/* x (M, D) bf16 in place; delta (M, D) or NULL; g (D,); y (M, D). */
void add_rms_norm_bf16(uint16_t *x, const uint16_t *delta, const uint16_t *g, uint16_t *y, int64_t M, int64_t D,
                       float eps) {
    for (int64_t m = 0; m < M; m++) {
        uint16_t *xm = x + m * D;
        __m512 squares = _mm512_setzero_ps();
        for (int64_t i = 0; i < D; i += 16) {
            __mmask16 mask = tail16(D - i);
            __m512 v = widen16(xm + i, mask);
            if (delta) {  /* the residual add, rounded to bf16 as torch's bf16 add rounds */
                store16(xm + i, _mm512_add_ps(v, widen16(delta + m * D + i, mask)), mask);
                v = widen16(xm + i, mask);
            }
            squares = _mm512_fmadd_ps(v, v, squares);
        }
        __m512 inv = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(squares) / (float)D + eps));
        for (int64_t i = 0; i < D; i += 16) {
            __mmask16 mask = tail16(D - i);
            store16(y + m * D + i, _mm512_mul_ps(_mm512_mul_ps(widen16(xm + i, mask), inv), widen16(g + i, mask)),
                    mask);
        }
    }
}

/* q: row m's head h at q + m * q_row + h * D; keys, values: cache (slots, H_kv, L, D) bf16; out (M, H, D) bf16. */
void attention_bf16(const uint16_t *q, int64_t q_row, const uint16_t *keys, const uint16_t *values,
                    const int64_t *lengths, uint16_t *out, int64_t M, int64_t H, int64_t H_kv, int64_t L, int64_t D,
                    float scale, int threads) {
    int64_t group = H / H_kv;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t t = 0; t < M * H; t++) {
        int64_t m = t / H, h = t % H, n = lengths[m];
        const uint16_t *qh = q + m * q_row + h * D;
        const uint16_t *kh = keys + ((m * H_kv + h / group) * L) * D, *vh = values + ((m * H_kv + h / group) * L) * D;
        float acc[D], scores[n];
        float top = -INFINITY;
        for (int64_t j0 = 0; j0 < n; j0 += 16) {  /* 16 scores at a time, summed by one shuffle tree */
            int64_t count = n - j0 < 16 ? n - j0 : 16;
            __m512 dots[4][4];
            for (int64_t l = 0; l < 16; l++) {
                __m512 dot = _mm512_setzero_ps();
                for (int64_t i = 0; l < count && i < D; i += 32) {
                    __mmask32 mask = D - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (D - i)) - 1u);
                    dot = _mm512_dpbf16_ps(dot, (__m512bh)_mm512_maskz_loadu_epi16(mask, qh + i),
                                           (__m512bh)_mm512_maskz_loadu_epi16(mask, kh + (j0 + l) * D + i));
                }
                dots[l / 4][l % 4] = dot;
            }
            __m512 block = _mm512_mul_ps(reduce16(dots), _mm512_set1_ps(scale));
            _mm512_mask_storeu_ps(scores + j0, tail16(count), block);
            float most = _mm512_mask_reduce_max_ps(tail16(count), block);
            if (most > top) top = most;
        }
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; j += 16) {
            __mmask16 mask = tail16(n - j);
            __m512 e = _mm512_maskz_mov_ps(mask, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, scores + j),
                                                                      _mm512_set1_ps(top))));
            _mm512_mask_storeu_ps(scores + j, mask, e);
            sum = _mm512_add_ps(sum, e);
        }
        float total = _mm512_reduce_add_ps(sum);
        if (D <= 64) {  /* the usual head sizes: the weighted sum of values in 4 registers */
            __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (int64_t j = 0; j < n; j++) {
                __m512 p = _mm512_set1_ps(scores[j]);
                for (int c = 0; c < 4; c++)
                    if (16 * c < D) a[c] = _mm512_fmadd_ps(p, widen16(vh + j * D + 16 * c, tail16(D - 16 * c)), a[c]);
            }
            for (int c = 0; c < 4; c++)
                if (16 * c < D) _mm512_mask_storeu_ps(acc + 16 * c, tail16(D - 16 * c), a[c]);
        } else {
            for (int64_t i = 0; i < D; i += 16) _mm512_mask_storeu_ps(acc + i, tail16(D - i), _mm512_setzero_ps());
            for (int64_t j = 0; j < n; j++) {
                __m512 p = _mm512_set1_ps(scores[j]);
                for (int64_t i = 0; i < D; i += 16) {
                    __mmask16 mask = tail16(D - i);
                    __m512 a = _mm512_maskz_loadu_ps(mask, acc + i);
                    _mm512_mask_storeu_ps(acc + i, mask, _mm512_fmadd_ps(p, widen16(vh + j * D + i, mask), a));
                }
            }
        }
        uint16_t *o = out + (m * H + h) * D;
        __m512 inv = _mm512_set1_ps(1.0f / total);
        for (int64_t i = 0; i < D; i += 16) {
            __mmask16 mask = tail16(D - i);
            store16(o + i, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, acc + i), inv), mask);
        }
    }
}

/* gate_up (M, 2F) bf16: [gate | up]; y (M, F) = silu(gate) * up. */
void silu_mul_bf16(const uint16_t *gate_up, uint16_t *y, int64_t M, int64_t F) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t i = 0; i < F; i += 16) {
            __mmask16 mask = tail16(F - i);
            __m512 g = widen16(gate_up + m * 2 * F + i, mask), u = widen16(gate_up + m * 2 * F + F + i, mask);
            __m512 sig = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
            store16(y + m * F + i, _mm512_mul_ps(sig, u), mask);
        }
}

void bf16_linear_bf16(const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y, int64_t M, int64_t N,
                      int64_t K, int threads, int order, int64_t prefetch);

/* One whole decoder layer for rows 0..M-1 (small M: the matrices go through bf16_linear_bf16), the ops above in the
 * order decoder._decode_fused calls them: x += delta (the previous layer's MLP output) and norm; qkv; RoPE on q and
 * k; k and v written to the cache at each row's position; attention; o; x += o and norm; gate/up; silu * up; down
 * into delta_out. w: input_norm, qkv, qkv_bias, o, o_bias, post_norm, gate_up, gate_up_bias, down, down_bias (biases
 * may be NULL). shape: d, H, H_kv, D, F, L. scratch holds M * (d + (H + 2 H_kv) D + H D + d + 3 F) bf16. order and
 * prefetch: how the matrices are walked (bf16_linear_avx512.c). */
void decode_layer_bf16(uint16_t *x, const uint16_t *delta, const uint16_t *const *w, uint16_t *key_cache,
                       uint16_t *value_cache, const uint16_t *cos, const uint16_t *sin, const int64_t *positions,
                       const int64_t *lengths, uint16_t *scratch, uint16_t *delta_out, int64_t M,
                       const int64_t *shape, float eps, float scale, int threads, int order, int64_t prefetch) {
    int64_t d = shape[0], H = shape[1], H_kv = shape[2], D = shape[3], F = shape[4], L = shape[5];
    int64_t width = (H + 2 * H_kv) * D;
    uint16_t *h = scratch, *qkv = h + M * d, *attn = qkv + M * width, *o = attn + M * H * D, *gate_up = o + M * d;
    uint16_t *act = gate_up + M * 2 * F;
    add_rms_norm_bf16(x, delta, w[0], h, M, d, eps);
    bf16_linear_bf16(h, w[1], w[2], qkv, M, width, d, threads, order, prefetch);
    rope_bf16(qkv, cos, sin, positions, M, width, H + H_kv, D);
    for (int64_t m = 0; m < M; m++)
        for (int64_t kh = 0; kh < H_kv; kh++) {
            int64_t at = ((m * H_kv + kh) * L + positions[m]) * D;
            memcpy(key_cache + at, qkv + m * width + (H + kh) * D, D * sizeof(uint16_t));
            memcpy(value_cache + at, qkv + m * width + (H + H_kv + kh) * D, D * sizeof(uint16_t));
        }
    attention_bf16(qkv, width, key_cache, value_cache, lengths, attn, M, H, H_kv, L, D, scale, threads);
    bf16_linear_bf16(attn, w[3], w[4], o, M, d, H * D, threads, order, prefetch);
    add_rms_norm_bf16(x, o, w[5], h, M, d, eps);
    bf16_linear_bf16(h, w[6], w[7], gate_up, M, 2 * F, d, threads, order, prefetch);
    silu_mul_bf16(gate_up, act, M, F);
    bf16_linear_bf16(act, w[8], w[9], delta_out, M, d, F, threads, order, prefetch);
}
