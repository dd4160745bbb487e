// 2-D convolution (also 1-D with H = 1) as an implicit GEMM.
//
// Each work-item computes OC_TILE (8) output channels of one output pixel: one input load
// feeds 8 multiply-adds, and neighbouring work-items (dimension 0 = output pixel) read
// neighbouring inputs, which is what both a GPU and PoCL's work-group vectoriser want.
// Weights come repacked as [groups][tiles][Cg*KH*KW][8] (zero rows past the last channel),
// so the 8 weights of one step are one contiguous vector load and never out of bounds.

#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_LEAKY 2
#define ACT_SIGMOID 3
#define ACT_CLIP 4

// Relu and Clip by compares, which a NaN fails, so that it comes through (fmax and fmin
// return the other operand: a NaN would vanish)
float8 activate8(float8 v, int act, float a, float b)
{
    switch (act) {
    case ACT_RELU: return select(v, (float8)0.0f, v < (float8)0.0f);
    case ACT_LEAKY: return select(v * a, v, v >= (float8)0.0f);
    case ACT_SIGMOID: return 1.0f / (1.0f + exp(-v));
    case ACT_CLIP: {  // the max of the two bounds last: min > max gives max, as ONNX says
        const float8 r = select(v, (float8)a, v < (float8)a);
        return select(r, (float8)b, r > (float8)b);
    }
    default: return v;
    }
}

__kernel void conv2d(__global const float* restrict x,      // [N, C, H, W]
                     __global const float* restrict wpack,  // see above
                     __global const float* restrict bias,   // [groups * tiles * 8], zero padded
                     __global float* restrict y,            // [N, M, OH, OW]
                     int C, int H, int W, int M, int OH, int OW,
                     int KH, int KW, int SH, int SW, int PT, int PL, int DH, int DW,
                     int groups, int act, float act_a, float act_b)
{
    const int p = get_global_id(0);
    const int tile = get_global_id(1);
    const int n = get_global_id(2);
    if (p >= OH * OW) return;
    const int Mg = M / groups, Cg = C / groups;
    const int tiles = (Mg + 7) / 8;
    const int g = tile / tiles;
    const int m0 = g * Mg + (tile % tiles) * 8;
    const int oh = p / OW, ow = p % OW;
    const int K = Cg * KH * KW;
    const int HW = H * W;

    __global const float* xg = x + ((size_t)n * C + (size_t)g * Cg) * HW;
    __global const float* wt = wpack + (size_t)tile * K * 8;
    float8 acc = (float8)0.0f;
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * SH - PT + kh * DH;
        if (ih < 0 || ih >= H) continue;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = ow * SW - PL + kw * DW;
            if (iw < 0 || iw >= W) continue;
            __global const float* xp = xg + ih * W + iw;
            __global const float* wp = wt + (kh * KW + kw) * 8;
            for (int c = 0; c < Cg; ++c) {
                acc += xp[(size_t)c * HW] * vload8(0, wp + (size_t)c * KH * KW * 8);
            }
        }
    }
    const int mend = min(m0 + 8, (g + 1) * Mg);
    acc += vload8(tile, bias);
    acc = activate8(acc, act, act_a, act_b);
    __global float* yp = y + ((size_t)n * M + m0) * OH * OW + p;
    const size_t plane = (size_t)OH * OW;
    float r[8];
    vstore8(acc, 0, r);
    for (int i = 0; i < mend - m0; ++i) yp[i * plane] = r[i];
}

// The same repacking for weights and biases that are runtime values (constant ones are
// repacked once on the host): w [M][K] -> [groups][tiles][K][8], bias [M] -> [groups][tiles*8].
__kernel void pack_weights(__global const float* restrict w, __global float* restrict out,
                           int M, int groups, int K)
{
    const int i = get_global_id(0);
    const int Mg = M / groups, tiles = (Mg + 7) / 8;
    if (i >= groups * tiles * K * 8) return;
    const int j = i % 8, k = (i / 8) % K, tile = i / (8 * K);
    const int mg = (tile % tiles) * 8 + j;
    const int m = (tile / tiles) * Mg + mg;
    out[i] = mg < Mg ? w[(size_t)m * K + k] : 0.0f;
}

__kernel void pack_bias(__global const float* restrict b, __global float* restrict out,
                        int M, int groups)
{
    const int i = get_global_id(0);
    const int Mg = M / groups, tiles = (Mg + 7) / 8;
    if (i >= groups * tiles * 8) return;
    const int mg = i % (tiles * 8), g = i / (tiles * 8);
    out[i] = mg < Mg ? b[g * Mg + mg] : 0.0f;
}
