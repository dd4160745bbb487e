// 2-D pooling (1-D uses H = 1). One work-item per output element; dimension 0 = output pixel.

__kernel void maxpool2d(__global const float* restrict x, __global float* restrict y,
                        int H, int W, int OH, int OW, int KH, int KW, int SH, int SW,
                        int PT, int PL, int DH, int DW)
{
    const int p = get_global_id(0);
    const int nc = get_global_id(1);
    if (p >= OH * OW) return;
    const int oh = p / OW, ow = p % OW;
    __global const float* xp = x + (size_t)nc * H * W;
    float m = -INFINITY;
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * SH - PT + kh * DH;
        if (ih < 0 || ih >= H) continue;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = ow * SW - PL + kw * DW;
            if (iw < 0 || iw >= W) continue;
            const float v = xp[ih * W + iw];
            if (isnan(v)) { m = v; kh = KH; break; }  // a window holding a NaN gives NaN
            m = v > m ? v : m;
        }
    }
    y[(size_t)nc * OH * OW + p] = m;
}

// count_include_pad: divide by the window clipped to the padded input (H + PT + PB), as ONNX
// does; otherwise by the number of real input elements under the window.
__kernel void avgpool2d(__global const float* restrict x, __global float* restrict y,
                        int H, int W, int OH, int OW, int KH, int KW, int SH, int SW,
                        int PT, int PL, int PB, int PR, int DH, int DW, int count_include_pad)
{
    const int p = get_global_id(0);
    const int nc = get_global_id(1);
    if (p >= OH * OW) return;
    const int oh = p / OW, ow = p % OW;
    __global const float* xp = x + (size_t)nc * H * W;
    float s = 0.0f;
    int count = 0, padded = 0;
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * SH - PT + kh * DH;
        const bool in_pad_h = ih >= -PT && ih < H + PB;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = ow * SW - PL + kw * DW;
            const bool in_pad_w = iw >= -PL && iw < W + PR;
            if (in_pad_h && in_pad_w) ++padded;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            s += xp[ih * W + iw];
            ++count;
        }
    }
    const int div = count_include_pad ? padded : count;
    y[(size_t)nc * OH * OW + p] = div > 0 ? s / (float)div : 0.0f;
}

__kernel void global_avgpool(__global const float* restrict x, __global float* restrict y,
                             int inner, int rows)
{
    const int r = get_global_id(0);
    if (r >= rows) return;
    __global const float* xp = x + (size_t)r * inner;
    float s = 0.0f;
    for (int i = 0; i < inner; ++i) s += xp[i];
    y[r] = s / (float)inner;
}
