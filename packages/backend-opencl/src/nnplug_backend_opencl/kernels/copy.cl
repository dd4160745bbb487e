// Data movement for any element type: built with -DT=<unsigned type of the element size>.

#ifndef T
#define T uint
#endif
#define MAX_RANK 6

// Concat: copy `outer` slabs of `slab` elements into a destination whose slabs are
// `dst_slab` long, starting `dst_offset` elements in.
__kernel void concat_copy(__global const T* restrict x, __global T* restrict y,
                          int slab, int dst_slab, int dst_offset, int n)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    const int o = i / slab, j = i % slab;
    y[(size_t)o * dst_slab + dst_offset + j] = x[i];
}

// Transpose: meta = [out_dims[rank], in_strides_permuted[rank]] in elements.
__kernel void transpose(__global const T* restrict x, __global T* restrict y, int n, int rank,
                        __global const int* restrict meta)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    int rem = i, src = 0;
    for (int d = rank - 1; d >= 0; --d) {
        const int idx = rem % meta[d];
        rem /= meta[d];
        src += idx * meta[rank + d];
    }
    y[i] = x[src];
}

// Broadcast X to the output (Expand): meta = [dims[rank], x_strides[rank]], stride 0 where
// X is broadcast.
__kernel void broadcast_copy(__global const T* restrict x, __global T* restrict y, int n,
                             int rank, __global const int* restrict meta)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    int rem = i, src = 0;
    for (int d = rank - 1; d >= 0; --d) {
        const int idx = rem % meta[d];
        rem /= meta[d];
        src += idx * meta[rank + d];
    }
    y[i] = x[src];
}

// Where: out = c ? a : b, all three broadcast; meta = [dims, c_strides, a_strides, b_strides].
__kernel void where_bcast(__global const uchar* restrict c, __global const T* restrict a,
                          __global const T* restrict b, __global T* restrict y, int n, int rank,
                          __global const int* restrict meta)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    int rem = i, ic = 0, ia = 0, ib = 0;
    for (int d = rank - 1; d >= 0; --d) {
        const int idx = rem % meta[d];
        rem /= meta[d];
        ic += idx * meta[rank + d];
        ia += idx * meta[2 * rank + d];
        ib += idx * meta[3 * rank + d];
    }
    y[i] = c[ic] ? a[ia] : b[ib];
}
