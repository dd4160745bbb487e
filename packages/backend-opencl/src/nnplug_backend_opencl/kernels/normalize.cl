// Normalisations: Softmax, LRN, LayerNormalization and InstanceNormalization.

// Softmax over `len` elements spaced `inner` apart; one work-item per (outer, inner) row.
__kernel void softmax(__global const float* restrict x, __global float* restrict y,
                      int len, int inner, int rows)
{
    const int r = get_global_id(0);
    if (r >= rows) return;
    const size_t base = (size_t)(r / inner) * len * inner + (r % inner);
    float m = -INFINITY;
    for (int i = 0; i < len; ++i) m = fmax(m, x[base + (size_t)i * inner]);
    float s = 0.0f;
    for (int i = 0; i < len; ++i) s += exp(x[base + (size_t)i * inner] - m);
    const float inv = 1.0f / s;
    for (int i = 0; i < len; ++i) y[base + (size_t)i * inner] = exp(x[base + (size_t)i * inner] - m) * inv;
}

// Local response normalisation across channels (ONNX LRN); dimension 0 = position in the plane.
__kernel void lrn(__global const float* restrict x, __global float* restrict y,
                  int C, int inner, int size, float alpha, float beta, float bias)
{
    const int p = get_global_id(0);
    const int c = get_global_id(1);
    const int n = get_global_id(2);
    if (p >= inner) return;
    const int lo = max(0, c - (size - 1) / 2);
    const int hi = min(C - 1, c + (size - 1) - (size - 1) / 2);
    __global const float* xp = x + (size_t)n * C * inner + p;
    float s = 0.0f;
    for (int i = lo; i <= hi; ++i) {
        const float v = xp[(size_t)i * inner];
        s += v * v;
    }
    const float v = xp[(size_t)c * inner];
    y[((size_t)n * C + c) * inner + p] = v / pow(bias + alpha / (float)size * s, beta);
}

// LayerNormalization over the last `len` elements of each row (the axes from `axis` on,
// flattened), one work-item per row; mean and variance in two passes for accuracy, on the row
// shifted by its first element: a float32 sum of large equal values lands ulps off their mean,
// and a constant row must give 0 deviations (the bias), not +-1.
// per_row = 0: scale[i] and bias[i] per element of the row (LayerNormalization);
// per_row = C: scale[c] and bias[c] with c = row % C (InstanceNormalization, rows = N * C).
__kernel void layernorm(__global const float* restrict x, __global const float* restrict scale,
                        __global const float* restrict bias, __global float* restrict y,
                        int len, int rows, float epsilon, int has_bias, int per_row)
{
    const int r = get_global_id(0);
    if (r >= rows) return;
    const int c = per_row ? r % per_row : 0;
    const int step = per_row ? 0 : 1;
    __global const float* xr = x + (size_t)r * len;
    __global float* yr = y + (size_t)r * len;
    const float x0 = xr[0];  // len >= 1: the host launches no empty rows
    float s = 0.0f;
    for (int i = 0; i < len; ++i) s += xr[i] - x0;
    const float mean = s / (float)len;  // of the shifted row
    float v = 0.0f;
    for (int i = 0; i < len; ++i) {
        const float d = (xr[i] - x0) - mean;
        v += d * d;
    }
    const float inv = rsqrt(v / (float)len + epsilon);
    for (int i = 0; i < len; ++i) {
        const int k = per_row ? c : i * step;
        const float o = ((xr[i] - x0) - mean) * inv * scale[k];
        yr[i] = has_bias ? o + bias[k] : o;
    }
}
