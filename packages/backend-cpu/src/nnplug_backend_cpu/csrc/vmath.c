/* Vectorised exp, sigmoid, tanh, erf and the exact Gelu over float arrays, and the sums of the
 * normalisations' statistics.
 *
 * libm's expf/tanhf are scalar calls: on EfficientNet, Sigmoid alone took over half the run.
 * These are branch-free C loops of plain arithmetic the compiler vectorises (cloned for AVX2 and
 * AVX-512 on x86-64, NEON elsewhere); accuracy is within 2 ulp of libm over the float range. NaN
 * propagates; beyond the float range exp saturates to 0 and +inf as expf does. */
#include "nnc.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MULTIVERSION
#endif

static inline float bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* e^x for x in [-104, 89] (callers clamp): x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6
 * polynomial (Cephes' expf coefficients), times 2^n built in the exponent bits as two halves,
 * so that n = 128 overflows to inf and n down to -150 rounds once into the subnormals. */
static inline float exp_core(float x)
{
    const float log2e = 1.44269504088896341f, ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    /* round to nearest by adding 1.5 * 2^23 (no branch, so the loop vectorises) */
    float fn = (x * log2e + 12582912.f) - 12582912.f;
    float r = x - fn * ln2_hi;
    r = r - fn * ln2_lo;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.f;
    int32_t n = (int32_t)fn, n1 = n / 2, n2 = n - n1;
    return p * bits_to_float((uint32_t)(n1 + 127) << 23) *
           bits_to_float((uint32_t)(n2 + 127) << 23);
}

/* NaN becomes -104 (every comparison with it is false), so no NaN reaches the float-to-int
 * conversion; callers put NaN back. */
static inline float clamp_exp_arg(float x)
{
    float c = x > -104.f ? x : -104.f;
    return c < 89.f ? c : 89.f;
}

MULTIVERSION
void nnc_vexp(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float v = x[i], r = exp_core(clamp_exp_arg(v));
        y[i] = v != v ? v : r;
    }
}

static inline float sigmoid_core(float v)
{
    /* e^-|v| never overflows; sigmoid(-v) = 1 - sigmoid(v) keeps the small side exact.
     * Below ln(FLT_MIN) the answer is subnormal: 0 there, and the clamp keeps the
     * arithmetic out of the subnormals, which cost a hundred cycles an element. */
    float a = v < 0.f ? v : -v;
    float e = exp_core(a > -87.33654f ? a : -87.33654f);
    float s = 1.f / (1.f + e); /* sigmoid(|v|) */
    float r = v >= 0.f ? s : e * s;
    r = v < -87.33654f ? 0.f : r; /* below FLT_MIN: 0, as expf(v) rounds there */
    return v != v ? v : r;
}

static inline float tanh_core(float v)
{
    float a = v < 0.f ? -v : v;
    /* small |v|: odd polynomial (Cephes' tanhf); larger: 1 - 2 / (e^2|v| + 1) */
    float z = v * v;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = v + v * z * p;
    float t = 2.f * (a < 9.1f ? a : 9.1f); /* NaN: 9.1 */
    float big = 1.f - 2.f / (exp_core(t) + 1.f);
    big = v < 0.f ? -big : big;
    float r = a < 0.625f ? small : big;
    return v != v ? v : r;
}

MULTIVERSION
void nnc_vsigmoid(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = sigmoid_core(x[i]);
}

MULTIVERSION
void nnc_vtanh(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = tanh_core(x[i]);
}

/* One LSTM row's gates, a chunk of each gate at a time: a batch's step made ten passes over
 * each row (the sums, each gate's activation, the cell, its tanh, the product) through
 * memory, a fifth of a batch-64 LSTM's time; a chunk's gates stay in registers and L1. Each
 * element's arithmetic is that of the passes, in their order (sums as (x + h) + (wb + rb),
 * sigmoid_core and tanh_core as nnc_vsigmoid and nnc_vtanh): the same bits. Each loop is
 * one simple step, so each vectorises (one loop of all of it does not, with GCC 12). */
#define LSTM_CHUNK 64
MULTIVERSION
void nnc_lstm_cell(const float *xr, const float *hh, const float *wb, const float *rb,
                   const float *c, float *c_new, float *h, int64_t H)
{
    float zi[LSTM_CHUNK], zo[LSTM_CHUNK], zf[LSTM_CHUNK], zc[LSTM_CHUNK];
    for (int64_t k0 = 0; k0 < H; k0 += LSTM_CHUNK) {
        int64_t n = H - k0 < LSTM_CHUNK ? H - k0 : LSTM_CHUNK;
        const float *x = xr + k0, *r = hh + k0;
        for (int64_t t = 0; t < n; t++) {
            zi[t] = x[t] + r[t];
            zo[t] = x[H + t] + r[H + t];
            zf[t] = x[2 * H + t] + r[2 * H + t];
            zc[t] = x[3 * H + t] + r[3 * H + t];
        }
        if (wb) {
            const float *w = wb + k0, *b = rb + k0;
            for (int64_t t = 0; t < n; t++) {
                zi[t] += w[t] + b[t];
                zo[t] += w[H + t] + b[H + t];
                zf[t] += w[2 * H + t] + b[2 * H + t];
                zc[t] += w[3 * H + t] + b[3 * H + t];
            }
        }
        for (int64_t t = 0; t < n; t++) zi[t] = sigmoid_core(zi[t]);
        for (int64_t t = 0; t < n; t++) zf[t] = sigmoid_core(zf[t]);
        for (int64_t t = 0; t < n; t++) zo[t] = sigmoid_core(zo[t]);
        for (int64_t t = 0; t < n; t++) zc[t] = tanh_core(zc[t]);
        for (int64_t t = 0; t < n; t++) zc[t] = zf[t] * c[k0 + t] + zi[t] * zc[t];
        for (int64_t t = 0; t < n; t++) c_new[k0 + t] = zc[t];
        for (int64_t t = 0; t < n; t++) h[k0 + t] = tanh_core(zc[t]) * zo[t];
    }
}

/* erf(v), branch-free: below 0.921875 in magnitude v * P(v^2); above, 1 - e^Q(|v|) with Q a
 * polynomial for log(erfc) up to 3.925 (erf rounds to 1 beyond), the sign put back. Both are
 * least-squares fits of our own on Chebyshev nodes, checked over every float in range:
 * within 3 ulp (small side) and 1.2 ulp of 1 (large side) of the double-precision erf. */
static inline float erf_core(float v)
{
    float a = v < 0.f ? -v : v, z = v * v;
    float p = 8.4109335e-05f;
    p = p * z - 8.1537582e-04f;
    p = p * z + 5.2021737e-03f;
    p = p * z - 2.6859956e-02f;
    p = p * z + 1.1283708e-01f;
    p = p * z - 3.7612635e-01f;
    p = p * z + 1.1283792e+00f;
    float small = v * p;
    float t = a < 3.925f ? a : 3.925f; /* NaN: 3.925 (callers put NaN back) */
    float q = 1.6355378e-06f;
    q = q * t - 4.5992550e-05f;
    q = q * t + 5.9596746e-04f;
    q = q * t - 4.7543203e-03f;
    q = q * t + 2.6402298e-02f;
    q = q * t - 1.1004016e-01f;
    q = q * t - 6.3187563e-01f;
    q = q * t - 1.1302003e+00f;
    q = q * t + 3.1093467e-04f;
    float big = 1.f - exp_core(q);
    big = a >= 3.925f ? 1.f : big;
    big = v < 0.f ? -big : big;
    return a < 0.921875f ? small : big;
}

MULTIVERSION
void nnc_verf(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float v = x[i], r = erf_core(v);
        y[i] = v != v ? v : r;
    }
}

/* The exact (erf) Gelu in the operations of its ONNX decomposition, (v * (erf(v / d) + 1)) * 0.5,
 * or with halve_first v * ((erf(v / d) + 1) * 0.5) (torch's dynamo exporter), so a fused pattern
 * rounds as the separate nodes do (they differ where v * 2 overflows); d is the pattern's
 * divisor (sqrt 2). */
MULTIVERSION
void nnc_vgelu_erf(const float *x, float *y, int64_t n, float d, int halve_first)
{
    if (halve_first) {
        for (int64_t i = 0; i < n; i++) {
            float v = x[i], u = v / d, r = erf_core(u);
            r = u != u ? u : r;
            y[i] = v * ((r + 1.f) * 0.5f);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float v = x[i], u = v / d, r = erf_core(u);
        r = u != u ? u : r;
        y[i] = (v * (r + 1.f)) * 0.5f;
    }
}

/* Sum of x[0..n) in double, over 8 lanes (a fixed order for a given n). */
MULTIVERSION
double nnc_row_sum(const float *x, int64_t n)
{
    double acc[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[k + l];
    double s = 0;
    for (; k < n; k++) s += x[k];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s;
}

/* Sum of (x - mu)^2 over x[0..n) in double, over 8 lanes. */
MULTIVERSION
double nnc_row_sq_dev(const float *x, int64_t n, double mu)
{
    double acc[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) {
            double d = x[k + l] - mu;
            acc[l] += d * d;
        }
    double s = 0;
    for (; k < n; k++) {
        double d = x[k] - mu;
        s += d * d;
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s;
}
