/* The small ops of a float32 decode step, fused, for CPUs with AVX2 + FMA (built with bf16_linear.c and f32_linear.c;
 * and into the AVX-512 library, where decode_layer_f32 multiplies float32 matrices with 16 lanes: see `linear`).
 *
 * decode_avx512.c's design in float32 and 8 lanes: on an AVX2-only CPU the engine decodes a bf16 model in float32
 * arithmetic (bf16 weights widened in registers by bf16_linear) and a float32 model in float32 (f32_linear), and
 * torch's ~20 small ops per layer cost ~10 ms per token over SmolLM2-135M's 30 layers (BENCHMARKS.md). Each function
 * here is one call instead:
 * - add_rms_norm: x += delta, then y = x * rsqrt(mean(x^2) + eps) * g;
 * - rope: rotary embedding in place on the q and k heads of the fused projection's output, for each row's position
 *   (x * cos + rotate_half(x) * sin, the model's own cos/sin tables);
 * - attention: one query per row over its own cached keys and values (rows 0..B-1, lengths[b] positions each), with
 *   grouped KV heads; no mask, no positions past a row's own length;
 * - silu_mul: silu(gate) * up over the fused gate/up output;
 * - decode_layer_f32: a whole layer in one call, the ops above and the layer's four matrices.
 * Everything is float32 (activations, KV cache, cos/sin, norms, biases), so results equal torch's float32 decode up
 * to float32 summation order and exp256, a polynomial exp with relative error ~2e-7 (torch's vectorised exp is of
 * the same kind).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "avx2_common.h"

/* exp(x) for 8 lanes: x = n ln2 + r with |r| <= ln2 / 2, a degree-6 Taylor polynomial in r (relative error
 * < 2e-7), times 2^n built in the exponent bits. x is clamped to [-87, 88], where 2^n stays a normal float: exp of
 * anything below -87 comes out ~1.6e-38 instead of 0, which no sum of softmax weights or silu can tell apart. */
static inline __m256 exp256(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

/* x (M, D) float32 in place; delta (M, D) or NULL; g (D,); y (M, D). */
void add_rms_norm_f32(float *x, const float *delta, const float *g, float *y, int64_t M, int64_t D, float eps) {
    for (int64_t m = 0; m < M; m++) {
        float *xm = x + m * D;
        __m256 squares = _mm256_setzero_ps();
        for (int64_t i = 0; i < D; i += 8) {
            __m256i mask = tail8(D - i);
            __m256 v = _mm256_maskload_ps(xm + i, mask);
            if (delta) {
                v = _mm256_add_ps(v, _mm256_maskload_ps(delta + m * D + i, mask));
                _mm256_maskstore_ps(xm + i, mask, v);
            }
            squares = _mm256_fmadd_ps(v, v, squares);
        }
        __m256 inv = _mm256_set1_ps(1.0f / sqrtf(sum8(squares) / (float)D + eps));
        for (int64_t i = 0; i < D; i += 8) {
            __m256i mask = tail8(D - i);
            __m256 v = _mm256_mul_ps(_mm256_maskload_ps(xm + i, mask), inv);
            _mm256_maskstore_ps(y + m * D + i, mask, _mm256_mul_ps(v, _mm256_maskload_ps(g + i, mask)));
        }
    }
}

/* qkv (M, width) float32: heads 0..heads-1 of D values each from column 0 get RoPE at position positions[m]; cos,
 * sin (length, D) tables. */
void rope_f32(float *qkv, const float *cos, const float *sin, const int64_t *positions, int64_t M, int64_t width,
              int64_t heads, int64_t D) {
    int64_t half = D / 2;
    for (int64_t m = 0; m < M; m++) {
        const float *c = cos + positions[m] * D, *s = sin + positions[m] * D;
        for (int64_t h = 0; h < heads; h++) {
            float *x = qkv + m * width + h * D;
            for (int64_t i = 0; i < half; i += 8) {
                __m256i mask = tail8(half - i);
                __m256 a = _mm256_maskload_ps(x + i, mask), b = _mm256_maskload_ps(x + half + i, mask);
                __m256 lo = _mm256_fmsub_ps(a, _mm256_maskload_ps(c + i, mask),
                                            _mm256_mul_ps(b, _mm256_maskload_ps(s + i, mask)));
                __m256 hi = _mm256_fmadd_ps(b, _mm256_maskload_ps(c + half + i, mask),
                                            _mm256_mul_ps(a, _mm256_maskload_ps(s + half + i, mask)));
                _mm256_maskstore_ps(x + i, mask, lo);
                _mm256_maskstore_ps(x + half + i, mask, hi);
            }
        }
    }
}

/* q: row m's head h at q + m * q_row + h * D; keys, values: cache (slots, H_kv, L, D) float32; out (M, H, D). */
void attention_f32(const float *q, int64_t q_row, const float *keys, const float *values, const int64_t *lengths,
                   float *out, int64_t M, int64_t H, int64_t H_kv, int64_t L, int64_t D, float scale, int threads) {
    int64_t group = H / H_kv;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t t = 0; t < M * H; t++) {
        int64_t m = t / H, h = t % H, n = lengths[m];
        const float *qh = q + m * q_row + h * D;
        const float *kh = keys + ((m * H_kv + h / group) * L) * D, *vh = values + ((m * H_kv + h / group) * L) * D;
        float scores[n];
        float top = -INFINITY;
        for (int64_t j = 0; j < n; j++) {  /* q . k_j, 8 lanes at a time */
            __m256 dot = _mm256_setzero_ps();
            for (int64_t i = 0; i < D; i += 8) {
                __m256i mask = tail8(D - i);
                dot = _mm256_fmadd_ps(_mm256_maskload_ps(qh + i, mask), _mm256_maskload_ps(kh + j * D + i, mask), dot);
            }
            scores[j] = sum8(dot) * scale;
            if (scores[j] > top) top = scores[j];
        }
        __m256 sum = _mm256_setzero_ps();
        for (int64_t j = 0; j < n; j += 8) {
            __m256i mask = tail8(n - j);
            __m256 e = exp256(_mm256_sub_ps(_mm256_maskload_ps(scores + j, mask), _mm256_set1_ps(top)));
            e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));
            _mm256_maskstore_ps(scores + j, mask, e);
            sum = _mm256_add_ps(sum, e);
        }
        __m256 inv = _mm256_set1_ps(1.0f / sum8(sum));
        float *o = out + (m * H + h) * D;
        for (int64_t i0 = 0; i0 < D; i0 += 64) {  /* the weighted sum of values, 64 columns in 8 registers */
            __m256 a[8];
            for (int c = 0; c < 8; c++) a[c] = _mm256_setzero_ps();
            for (int64_t j = 0; j < n; j++) {
                __m256 p = _mm256_set1_ps(scores[j]);
                const float *vj = vh + j * D + i0;
                for (int c = 0; c < 8; c++)
                    if (i0 + 8 * c < D) a[c] = _mm256_fmadd_ps(p, _mm256_maskload_ps(vj + 8 * c, tail8(D - i0 - 8 * c)),
                                                               a[c]);
            }
            for (int c = 0; c < 8; c++)
                if (i0 + 8 * c < D)
                    _mm256_maskstore_ps(o + i0 + 8 * c, tail8(D - i0 - 8 * c), _mm256_mul_ps(a[c], inv));
        }
    }
}

/* gate_up (M, 2F) float32: [gate | up]; y (M, F) = silu(gate) * up = gate / (1 + exp(-gate)) * up. */
void silu_mul_f32(const float *gate_up, float *y, int64_t M, int64_t F) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t i = 0; i < F; i += 8) {
            __m256i mask = tail8(F - i);
            __m256 g = _mm256_maskload_ps(gate_up + m * 2 * F + i, mask);
            __m256 u = _mm256_maskload_ps(gate_up + m * 2 * F + F + i, mask);
            __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
            __m256 sig = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
            _mm256_maskstore_ps(y + m * F + i, mask, _mm256_mul_ps(sig, u));
        }
}

#ifdef __AVX512F__
/* Built into the "avx512_bf16" library too (native.py), for a float32 model's one-call layers on an AVX-512 CPU:
 * there the matrices are float32 only and go through the 16-lane f32_linear_avx512 (bf16_weights must be 0). */
void f32_linear_avx512(const float *x, const float *w, const float *b, float *y, int64_t M, int64_t N, int64_t K,
                       int threads, int order, int64_t prefetch);

static void linear(const float *x, const void *w, const float *b, float *y, int64_t M, int64_t N, int64_t K,
                   int bf16_weights, int threads, int order, int64_t prefetch) {
    (void)bf16_weights;
    f32_linear_avx512(x, (const float *)w, b, y, M, N, K, threads, order, prefetch);
}
#else
void bf16_linear(const float *x, const uint16_t *w, const float *b, float *y, int64_t M, int64_t N, int64_t K,
                 int threads, int order, int64_t prefetch);
void f32_linear(const float *x, const float *w, const float *b, float *y, int64_t M, int64_t N, int64_t K,
                int threads, int order, int64_t prefetch);

/* y = x W^T + b with W bf16 (bf16_weights) or float32. */
static void linear(const float *x, const void *w, const float *b, float *y, int64_t M, int64_t N, int64_t K,
                   int bf16_weights, int threads, int order, int64_t prefetch) {
    if (bf16_weights) bf16_linear(x, (const uint16_t *)w, b, y, M, N, K, threads, order, prefetch);
    else f32_linear(x, (const float *)w, b, y, M, N, K, threads, order, prefetch);
}
#endif

/* One whole decoder layer for rows 0..M-1, in the order decoder._decode_fused_f32 documents: x += delta (the
 * previous layer's MLP output) and norm; qkv; RoPE on q and k; k and v written to the cache at each row's position;
 * attention; o; x += o and norm; gate/up; silu * up; down into delta_out. w: input_norm, qkv, qkv_bias, o, o_bias,
 * post_norm, gate_up, gate_up_bias, down, down_bias (biases may be NULL); the four matrices bf16 if bf16_weights,
 * else float32; the rest float32. shape: d, H, H_kv, D, F, L. scratch holds M * (2 d + (2 H + 2 H_kv) D + 3 F)
 * floats. order and prefetch: how the matrices are walked (bf16_linear.c, f32_linear.c). */
void decode_layer_f32(float *x, const float *delta, const void *const *w, float *key_cache, float *value_cache,
                      const float *cos, const float *sin, const int64_t *positions, const int64_t *lengths,
                      float *scratch, float *delta_out, int64_t M, const int64_t *shape, float eps, float scale,
                      int bf16_weights, int threads, int order, int64_t prefetch) {
    int64_t d = shape[0], H = shape[1], H_kv = shape[2], D = shape[3], F = shape[4], L = shape[5];
    int64_t width = (H + 2 * H_kv) * D;
    float *h = scratch, *qkv = h + M * d, *attn = qkv + M * width, *o = attn + M * H * D, *gate_up = o + M * d;
    float *act = gate_up + M * 2 * F;
    add_rms_norm_f32(x, delta, (const float *)w[0], h, M, d, eps);
    linear(h, w[1], (const float *)w[2], qkv, M, width, d, bf16_weights, threads, order, prefetch);
    rope_f32(qkv, cos, sin, positions, M, width, H + H_kv, D);
    for (int64_t m = 0; m < M; m++)
        for (int64_t kh = 0; kh < H_kv; kh++) {
            int64_t at = ((m * H_kv + kh) * L + positions[m]) * D;
            memcpy(key_cache + at, qkv + m * width + (H + kh) * D, D * sizeof(float));
            memcpy(value_cache + at, qkv + m * width + (H + H_kv + kh) * D, D * sizeof(float));
        }
    attention_f32(qkv, width, key_cache, value_cache, lengths, attn, M, H, H_kv, L, D, scale, threads);
    linear(attn, w[3], (const float *)w[4], o, M, d, H * D, bf16_weights, threads, order, prefetch);
    add_rms_norm_f32(x, o, (const float *)w[5], h, M, d, eps);
    linear(h, w[6], (const float *)w[7], gate_up, M, 2 * F, d, bf16_weights, threads, order, prefetch);
    silu_mul_f32(gate_up, act, M, F);
    linear(act, w[8], (const float *)w[9], delta_out, M, d, F, bf16_weights, threads, order, prefetch);
}
