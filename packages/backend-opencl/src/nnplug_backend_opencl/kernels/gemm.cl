// Batched matrix product with strides: Y[b] = act(alpha * A[b] @ B[b] + beta * C).
//
// Strides make transposes and broadcasting free: A(m, k) = a[a_off[b] + m*sam + k*sak],
// B(k, n) = b[b_off[b] + k*sbk + n*sbn], C(m, n) = c[m*scm + n*scn] (0 strides broadcast).
// Each work-item computes TM (4) rows of one column; dimension 0 runs along n so that with
// sbn == 1 neighbouring work-items read neighbouring elements of B.

#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_LEAKY 2
#define ACT_SIGMOID 3
#define ACT_CLIP 4
#define TM 4

// Relu and Clip by compares, which a NaN fails, so that it comes through (fmax and fmin
// return the other operand: a NaN would vanish)
float activate(float v, int act, float a, float b)
{
    switch (act) {
    case ACT_RELU: return v < 0.0f ? 0.0f : v;
    case ACT_LEAKY: return v >= 0.0f ? v : v * a;
    case ACT_SIGMOID: return 1.0f / (1.0f + exp(-v));
    case ACT_CLIP: {  // the max of the two bounds last: min > max gives max, as ONNX says
        const float r = v < a ? a : v;
        return r > b ? b : r;
    }
    default: return v;
    }
}

__kernel void gemm(__global const float* restrict a, __global const float* restrict b,
                   __global const float* restrict c, __global float* restrict y,
                   __global const int* restrict batch_offsets,  // [batch][2]: a_off, b_off
                   int M, int N, int K,
                   int sam, int sak, int sbk, int sbn, int scm, int scn,
                   float alpha, float beta, int act, float act_a, float act_b)
{
    const int n = get_global_id(0);
    const int m0 = get_global_id(1) * TM;
    const int bi = get_global_id(2);
    if (n >= N || m0 >= M) return;
    __global const float* ab = a + batch_offsets[2 * bi];
    __global const float* bb = b + batch_offsets[2 * bi + 1] + (size_t)n * sbn;
    const int rows = min(TM, M - m0);
    float acc[TM] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (rows == TM) {
        __global const float* a0 = ab + (size_t)m0 * sam;
        for (int k = 0; k < K; ++k) {
            const float bv = bb[(size_t)k * sbk];
            const size_t ak = (size_t)k * sak;
            acc[0] += a0[ak] * bv;
            acc[1] += a0[ak + sam] * bv;
            acc[2] += a0[ak + 2 * sam] * bv;
            acc[3] += a0[ak + 3 * sam] * bv;
        }
    } else {
        for (int k = 0; k < K; ++k) {
            const float bv = bb[(size_t)k * sbk];
            for (int i = 0; i < rows; ++i) acc[i] += ab[(size_t)(m0 + i) * sam + (size_t)k * sak] * bv;
        }
    }
    __global float* yb = y + (size_t)bi * M * N;
    for (int i = 0; i < rows; ++i) {
        float v = alpha * acc[i];
        if (beta != 0.0f) v += beta * c[(size_t)(m0 + i) * scm + (size_t)n * scn];
        yb[(size_t)(m0 + i) * N + n] = activate(v, act, act_a, act_b);
    }
}

// The same product one row per work-item, for M < TM (a fully connected layer on batch 1):
// a straight loop the compiler can vectorise across work-items.
__kernel void gemm_row(__global const float* restrict a, __global const float* restrict b,
                       __global const float* restrict c, __global float* restrict y,
                       __global const int* restrict batch_offsets,
                       int M, int N, int K,
                       int sam, int sak, int sbk, int sbn, int scm, int scn,
                       float alpha, float beta, int act, float act_a, float act_b)
{
    const int n = get_global_id(0);
    const int m = get_global_id(1);
    const int bi = get_global_id(2);
    if (n >= N || m >= M) return;
    __global const float* ar = a + batch_offsets[2 * bi] + (size_t)m * sam;
    __global const float* bb = b + batch_offsets[2 * bi + 1] + (size_t)n * sbn;
    float acc = 0.0f;
    int k = 0;
    if (sak == 1 && sbk == 1) {  // both rows contiguous (B stored [N, K]): stream them in vectors
        float8 acc8 = (float8)0.0f;
        for (; k + 8 <= K; k += 8) acc8 += vload8(0, ar + k) * vload8(0, bb + k);
        float4 acc4 = acc8.lo + acc8.hi;
        acc = acc4.x + acc4.y + acc4.z + acc4.w;
    }
    for (; k < K; ++k) acc += ar[(size_t)k * sak] * bb[(size_t)k * sbk];
    float v = alpha * acc;
    if (beta != 0.0f) v += beta * c[(size_t)m * scm + (size_t)n * scn];
    y[(size_t)bi * M * N + (size_t)m * N + n] = activate(v, act, act_a, act_b);
}
