// Element-wise operators: activations and other functions of one value, broadcasting binary
// arithmetic, per-channel affine (BatchNormalization at inference).

#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_LEAKY 2
#define ACT_SIGMOID 3
#define ACT_CLIP 4
// the functions below run only here (ops/common.py UNARY_CODES)
#define F_TANH 5
#define F_EXP 6
#define F_LOG 7
#define F_SQRT 8
#define F_ABS 9
#define F_NEG 10
#define F_RECIP 11
#define F_ERF 12
#define F_GELU 13
#define F_GELU_TANH 14
#define F_HARDSIGMOID 15
#define F_HARDSWISH 16
#define F_ELU 17
#define F_SELU 18
#define F_SOFTPLUS 19
#define F_SOFTSIGN 20
#define F_SIN 21
#define F_COS 22
#define F_FLOOR 23
#define F_CEIL 24
#define F_ROUND 25
#define F_SIGN 26
#define F_MISH 27
#define F_CELU 28
#define F_THRESHOLDED_RELU 29

#define OP_ADD 0
#define OP_SUB 1
#define OP_MUL 2
#define OP_DIV 3
#define OP_POW 4
#define OP_MAX 5
#define OP_MIN 6
#define OP_PRELU 7

#define MAX_RANK 6

// v clamped to [lo, hi] by compares, which a NaN fails, so that it comes through (fmax and
// fmin return the other operand: a NaN would vanish); hi last: lo > hi gives hi, as ONNX's Clip
float clamp_keeping_nan(float v, float lo, float hi)
{
    const float r = v < lo ? lo : v;
    return r > hi ? hi : r;
}

// tanh that reaches +-1: PoCL's tanh stops at +-0.99999994, and then 1 + tanh in the tanh Gelu
// is 6e-8, not 0, for very negative x (x * 6e-8 instead of -0, -inf instead of NaN). For
// |x| > 13 * ln 2 = 9.0109, 1 - tanh|x| ~ 2e^(-2|x|) is under 2^-25 (half the ulp below 1), so
// the true value rounds to exactly 1 in float32; 9.011f is just above that. A NaN fails the
// compare and stays NaN.
float tanh_saturating(float v)
{
    return fabs(v) > 9.011f ? copysign(1.0f, v) : tanh(v);
}

__kernel void unary(__global const float* restrict x, __global float* restrict y, int n,
                    int act, float a, float b)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    const float v = x[i];
    float r;
    switch (act) {
    case ACT_RELU: r = clamp_keeping_nan(v, 0.0f, INFINITY); break;
    case ACT_LEAKY: r = v >= 0.0f ? v : v * a; break;
    case ACT_SIGMOID: r = 1.0f / (1.0f + exp(-v)); break;
    case ACT_CLIP: r = clamp_keeping_nan(v, a, b); break;
    case F_TANH: r = tanh_saturating(v); break;
    case F_EXP: r = exp(v); break;
    case F_LOG: r = log(v); break;
    case F_SQRT: r = sqrt(v); break;
    case F_ABS: r = fabs(v); break;
    case F_NEG: r = -v; break;
    case F_RECIP: r = 1.0f / v; break;
    case F_ERF: r = erf(v); break;
    case F_GELU: r = 0.5f * v * (1.0f + erf(v * M_SQRT1_2_F)); break;
    case F_GELU_TANH:
        r = 0.5f * v
            * (1.0f + tanh_saturating(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        break;
    case F_HARDSIGMOID: r = clamp_keeping_nan(a * v + b, 0.0f, 1.0f); break;
    case F_HARDSWISH: r = v * clamp_keeping_nan(v * (1.0f / 6.0f) + 0.5f, 0.0f, 1.0f); break;
    case F_ELU: r = v >= 0.0f ? v : a * (exp(v) - 1.0f); break;
    case F_SELU: r = v > 0.0f ? b * v : b * (a * exp(v) - a); break;
    // log(1 + e^v) without overflow for large v
    case F_SOFTPLUS: r = v > 0.0f ? v + log1p(exp(-v)) : log1p(exp(v)); break;
    case F_SOFTSIGN: r = v / (1.0f + fabs(v)); break;
    case F_SIN: r = sin(v); break;
    case F_COS: r = cos(v); break;
    case F_FLOOR: r = floor(v); break;
    case F_CEIL: r = ceil(v); break;
    case F_ROUND: r = rint(v); break;  // halves to even, as ONNX rounds
    case F_SIGN: r = v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : v); break;
    case F_MISH: {
        const float sp = v > 0.0f ? v + log1p(exp(-v)) : log1p(exp(v));
        r = v * tanh_saturating(sp);
        break;
    }
    case F_CELU: r = clamp_keeping_nan(v, 0.0f, INFINITY) + clamp_keeping_nan(a * (exp(v / a) - 1.0f), -INFINITY, 0.0f); break;
    case F_THRESHOLDED_RELU: r = v > a ? v : 0.0f; break;
    default: r = v;
    }
    y[i] = r;
}

float apply_op(float p, float q, int op)
{
    switch (op) {
    case OP_ADD: return p + q;
    case OP_SUB: return p - q;
    case OP_MUL: return p * q;
    case OP_POW: return pow(p, q);
    // NaN in, NaN out, as numpy's maximum/minimum (fmax/fmin would drop it)
    case OP_MAX: return isnan(p) || isnan(q) ? p + q : (p > q ? p : q);
    case OP_MIN: return isnan(p) || isnan(q) ? p + q : (p < q ? p : q);
    case OP_PRELU: return p < 0.0f ? p * q : p;
    default: return p / q;
    }
}

// Same shapes on both sides: the common case, without index arithmetic.
__kernel void binary_same(__global const float* restrict a, __global const float* restrict b,
                          __global float* restrict y, int n, int op)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    y[i] = apply_op(a[i], b[i], op);
}

// General broadcasting. meta = [dims[rank], a_strides[rank], b_strides[rank]] in elements,
// with stride 0 on broadcast dimensions; the host merges dimensions first so rank is small.
__kernel void binary_bcast(__global const float* restrict a, __global const float* restrict b,
                           __global float* restrict y, int n, int op, int rank,
                           __global const int* restrict meta)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    int rem = i, ia = 0, ib = 0;
    for (int d = rank - 1; d >= 0; --d) {
        const int dim = meta[d];
        const int idx = rem % dim;
        rem /= dim;
        ia += idx * meta[rank + d];
        ib += idx * meta[2 * rank + d];
    }
    y[i] = apply_op(a[ia], b[ib], op);
}

// y = x * scale[c] + shift[c] with c = (i / inner) % C: BatchNormalization folded to an affine map
// on the device (the parameters may be runtime values).
__kernel void batchnorm(__global const float* restrict x, __global float* restrict y,
                        __global const float* restrict scale, __global const float* restrict bias,
                        __global const float* restrict mean, __global const float* restrict var,
                        float epsilon, int C, int inner, int n)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    const int c = (i / inner) % C;
    const float s = scale[c] * rsqrt(var[c] + epsilon);
    y[i] = (x[i] - mean[c]) * s + bias[c];
}
