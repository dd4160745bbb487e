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
