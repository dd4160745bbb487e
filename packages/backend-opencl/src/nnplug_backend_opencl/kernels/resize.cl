// Resize by per-axis tables (ops/resize.py): for axis d and output index o,
// t = table_off[d] + o; idx[2t], idx[2t+1] are the two source indices and w[t] the weight of
// the second. Only the `k` active axes (listed in meta) interpolate: 2^k taps per output.

#define MAX_RANK 6

__kernel void resize(__global const float* restrict x, __global float* restrict y, int n,
                     int rank, int k,
                     __global const int* restrict meta,  // out_dims, in_strides, table_off, active
                     __global const int* restrict idx, __global const float* restrict w)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    int t[MAX_RANK];
    int rem = i, base = 0;
    for (int d = rank - 1; d >= 0; --d) {
        const int o = rem % meta[d];
        rem /= meta[d];
        t[d] = meta[2 * rank + d] + o;
        base += idx[2 * t[d]] * meta[rank + d];
    }
    if (k == 0) {
        y[i] = x[base];
        return;
    }
    float acc = 0.0f;
    for (int c = 0; c < (1 << k); ++c) {
        int off = base;
        float wt = 1.0f;
        for (int j = 0; j < k; ++j) {
            const int d = meta[3 * rank + j];
            const int tj = t[d];
            if ((c >> j) & 1) {
                off += (idx[2 * tj + 1] - idx[2 * tj]) * meta[rank + d];
                wt *= w[tj];
            } else {
                wt *= 1.0f - w[tj];
            }
        }
        acc += wt * x[off];
    }
    y[i] = acc;
}
