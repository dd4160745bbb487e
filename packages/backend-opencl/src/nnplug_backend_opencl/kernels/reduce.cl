// Reductions over any set of axes, one work-item per output element.
// meta = [nk, kept dims[nk], kept strides[nk], nr, reduced dims[nr], reduced strides[nr]].

#define R_SUM 0
#define R_MEAN 1
#define R_MAX 2
#define R_MIN 3
#define R_SUMSQ 4
#define R_L1 5
#define R_L2 6

__kernel void reduce(__global const float* restrict x, __global float* restrict y, int n,
                     int count, int op, __global const int* restrict meta)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    const int nk = meta[0];
    __global const int* kd = meta + 1;
    __global const int* ks = meta + 1 + nk;
    const int nr = meta[1 + 2 * nk];
    __global const int* rd = meta + 2 + 2 * nk;
    __global const int* rs = meta + 2 + 2 * nk + nr;
    int rem = i, base = 0;
    for (int d = nk - 1; d >= 0; --d) {
        base += (rem % kd[d]) * ks[d];
        rem /= kd[d];
    }
    float acc = op == R_MAX ? -INFINITY : (op == R_MIN ? INFINITY : 0.0f);
    for (int j = 0; j < count; ++j) {
        int r2 = j, off = base;
        for (int d = nr - 1; d >= 0; --d) {
            off += (r2 % rd[d]) * rs[d];
            r2 /= rd[d];
        }
        const float v = x[off];
        switch (op) {
        case R_MAX: acc = isnan(v) || v > acc ? v : acc; break;
        case R_MIN: acc = isnan(v) || v < acc ? v : acc; break;
        case R_SUMSQ: case R_L2: acc += v * v; break;
        case R_L1: acc += fabs(v); break;
        default: acc += v;
        }
        if (isnan(acc) && (op == R_MAX || op == R_MIN)) break;
    }
    if (op == R_MEAN) acc /= (float)count;
    if (op == R_L2) acc = sqrt(acc);
    y[i] = acc;
}
