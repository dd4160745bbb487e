// Element-wise operators: activations, broadcasting binary arithmetic, per-channel affine
// (BatchNormalization at inference), and N-ary accumulation for Sum.

#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_LEAKY 2
#define ACT_SIGMOID 3
#define ACT_CLIP 4

#define OP_ADD 0
#define OP_SUB 1
#define OP_MUL 2
#define OP_DIV 3

#define MAX_RANK 6

__kernel void unary(__global const float* restrict x, __global float* restrict y, int n,
                    int act, float a, float b)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    const float v = x[i];
    float r;
    switch (act) {
    case ACT_RELU: r = fmax(v, 0.0f); break;
    case ACT_LEAKY: r = v >= 0.0f ? v : v * a; break;
    case ACT_SIGMOID: r = 1.0f / (1.0f + exp(-v)); break;
    case ACT_CLIP: r = fmin(fmax(v, a), b); break;
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
