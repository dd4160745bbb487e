/* oneDNN and GNU OpenMP, loaded at init with dlopen (never linked by path): the oneDNN C API
 * functions the backend calls, as pointers resolved with dlsym. Call them as D(name)(...). */
#ifndef NNPLUG_ONEDNN_DL_H_
#define NNPLUG_ONEDNN_DL_H_

#include <dnnl.h>

#define DNNL_FUNCS(X)                                         \
    X(dnnl_engine_create)                                     \
    X(dnnl_get_effective_cpu_isa)                             \
    X(dnnl_engine_destroy)                                    \
    X(dnnl_stream_create)                                     \
    X(dnnl_stream_destroy)                                    \
    X(dnnl_stream_wait)                                       \
    X(dnnl_memory_desc_create_with_strides)                   \
    X(dnnl_memory_desc_create_submemory)                      \
    X(dnnl_memory_desc_create_with_tag)                       \
    X(dnnl_memory_desc_destroy)                               \
    X(dnnl_memory_desc_clone)                                 \
    X(dnnl_memory_desc_get_size)                              \
    X(dnnl_memory_desc_equal)                                 \
    X(dnnl_memory_desc_permute_axes)                          \
    X(dnnl_memory_desc_reshape)                               \
    X(dnnl_memory_desc_query)                                 \
    X(dnnl_memory_create)                                     \
    X(dnnl_memory_destroy)                                    \
    X(dnnl_memory_set_data_handle)                            \
    X(dnnl_primitive_desc_query_md)                           \
    X(dnnl_primitive_desc_query)                              \
    X(dnnl_primitive_desc_destroy)                            \
    X(dnnl_primitive_create)                                  \
    X(dnnl_primitive_destroy)                                 \
    X(dnnl_primitive_execute)                                 \
    X(dnnl_primitive_get_primitive_desc)                      \
    X(dnnl_primitive_attr_create)                             \
    X(dnnl_primitive_attr_destroy)                            \
    X(dnnl_primitive_attr_set_post_ops)                       \
    X(dnnl_primitive_attr_set_scratchpad_mode)                \
    X(dnnl_primitive_attr_set_fpmath_mode)                    \
    X(dnnl_primitive_attr_set_scales_mask)                    \
    X(dnnl_primitive_attr_set_zero_points_mask)               \
    X(dnnl_post_ops_create)                                   \
    X(dnnl_post_ops_destroy)                                  \
    X(dnnl_post_ops_append_eltwise)                           \
    X(dnnl_post_ops_append_sum)                               \
    X(dnnl_post_ops_append_binary)                            \
    X(dnnl_reorder_primitive_desc_create)                     \
    X(dnnl_convolution_forward_primitive_desc_create)         \
    X(dnnl_deconvolution_forward_primitive_desc_create)       \
    X(dnnl_matmul_primitive_desc_create)                      \
    X(dnnl_pooling_forward_primitive_desc_create)             \
    X(dnnl_resampling_forward_primitive_desc_create)          \
    X(dnnl_eltwise_forward_primitive_desc_create)             \
    X(dnnl_softmax_forward_primitive_desc_create)             \
    X(dnnl_binary_primitive_desc_create)                      \
    X(dnnl_concat_primitive_desc_create)                      \
    X(dnnl_lrn_forward_primitive_desc_create)                 \
    X(dnnl_batch_normalization_forward_primitive_desc_create) \
    X(dnnl_inner_product_forward_primitive_desc_create)       \
    X(dnnl_sgemm)                                             \
    X(dnnl_version)

#define DNNL_DECLARE_PTR(name) extern __typeof__(&name) dl_##name;
DNNL_FUNCS(DNNL_DECLARE_PTR)
#undef DNNL_DECLARE_PTR

#define D(name) dl_##name

/* Load libgomp.so.1 (passive waiting) and oneDNN. 0 on success; else a message in err. */
int dl_load(char *err, size_t errlen);
void dl_unload(void);
/* omp_set_num_threads of the calling thread (a no-op when libgomp has none). */
void dl_omp_set_num_threads(int n);
/* fn(arg) on up to n threads of the OpenMP pool oneDNN's primitives run on (on the caller
 * alone when n is 1 or libgomp has no GOMP_parallel). Inside, dl_team gives the thread's index
 * and the team's size, which is what work must be split by: libgomp gives fewer threads than
 * asked when the caller is itself inside a parallel region. */
void dl_parallel(void (*fn)(void *), void *arg, int n);
/* The threads worth waking for `items` of the backend's own loop work: all `threads` from
 * DL_MIN_PARALLEL items on, else 1 (waking the pool costs more than a small loop). */
#define DL_MIN_PARALLEL 32768
static inline int dl_threads_for(int64_t items, int threads)
{
    return items >= DL_MIN_PARALLEL ? threads : 1;
}
void dl_team(int *me, int *n);
/* The calling team member's share [*t0, *t1) of `total` items (dl_team's split). */
void dl_share(int64_t total, int64_t *t0, int64_t *t1);
/* dl_apart(n): the n threads of the pool (the caller among them) kept off each other's CPUs,
 * each within its own affinity, until dl_together gives every one its affinity back. On a
 * virtual machine the kernel can wake a sleeping pool thread onto its waker's CPU and leave
 * both there for tens of milliseconds, each waiting for the other at every barrier: the runs
 * in the first 50 ms after a pause took three times as long. 1 when the caller must call
 * dl_together; 0 (nothing done) for one thread, without GOMP_parallel, or when already apart. */
int dl_apart(int n);
void dl_together(void);
/* The floating-point flags that say a NaN or an infinity was made from finite operands
 * (FE_INVALID: inf - inf, 0 * inf, sqrt(-1)...; FE_OVERFLOW, FE_DIVBYZERO: an infinity), on the
 * caller and the n threads of the pool oneDNN runs on: each thread keeps its own.
 * dl_fp_clear lowers them; dl_fp_raised says whether one was raised since, and lowers them.
 * Where the pool's threads cannot be reached (n > 1 without GOMP_parallel) dl_fp_raised says
 * 1: a caller that reruns on it is slow there, never wrong. */
void dl_fp_clear(int n);
int dl_fp_raised(int n);
/* Whether the CPU has AVX2 and FMA, which the backend's own loops are built for. */
int dl_avx2_fma(void);
/* Whether the CPU is AMD's (oneDNN's kernels rank differently there for some shapes). */
int dl_cpu_amd(void);
/* Whether oneDNN runs its AMX kernels here (the CPU has AMX and the kernel lets the process
 * use it): where its bf16 products are fast enough to beat the backend's Winograd in f32. */
int dl_amx(void);

#endif
