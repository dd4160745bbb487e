// ConvTranspose as a gather, one work-item per output element (n, m, oy, ox):
// y[oy] receives x[iy] * w[ky] where oy = iy * stride - pad + ky * dilation.
// Weights are [C, M / groups, KH, KW].

__kernel void conv_transpose(__global const float* restrict x, __global const float* restrict w,
                             __global const float* restrict bias, __global float* restrict y,
                             int C, int H, int W, int M, int OH, int OW, int groups,
                             int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                             int has_bias, int total)
{
    const int i = get_global_id(0);
    if (i >= total) return;
    const int ox = i % OW;
    int t = i / OW;
    const int oy = t % OH;
    t /= OH;
    const int m = t % M;
    const int n = t / M;
    const int mg = M / groups, cg = C / groups;
    const int g = m / mg, mo = m % mg;
    float acc = has_bias ? bias[m] : 0.0f;
    for (int cc = 0; cc < cg; ++cc) {
        const int c = g * cg + cc;
        __global const float* xc = x + ((size_t)n * C + c) * H * W;
        __global const float* wc = w + ((size_t)c * mg + mo) * KH * KW;
        for (int ky = 0; ky < KH; ++ky) {
            const int ny = oy + ph - ky * dh;
            if (ny < 0 || ny % sh) continue;
            const int iy = ny / sh;
            if (iy >= H) continue;
            for (int kx = 0; kx < KW; ++kx) {
                const int nx = ox + pw - kx * dw;
                if (nx < 0 || nx % sw) continue;
                const int ix = nx / sw;
                if (ix >= W) continue;
                acc += xc[(size_t)iy * W + ix] * wc[ky * KW + kx];
            }
        }
    }
    y[i] = acc;
}
