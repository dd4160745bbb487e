/*
 * nnplug/op_library.h -- what every native custom-op library (nnplug/custom_op.h) writes the
 * same way, written once: the library table and the entry symbol, the members every op struct
 * starts with, embedded OpenCL source, the destroy callback that frees priv_data, failing with
 * a message, the input/output count check, the outer x axis x inner view of a tensor, splitting
 * a CPU kernel's work (with scratch memory per share) across threads, and running a 1-D or an
 * axis OpenCL kernel.
 *
 *     #include <nnplug/op_library.h>
 *
 *     static const nnp_custom_op my_cpu = {NNP_CUSTOM_OP_HEAD(NNP_OP_TARGET_CPU, "MyOp"),
 *                                          .init = my_init, .compute = my_compute,
 *                                          .destroy = nnp_op_destroy_priv};
 *     static const nnp_custom_op *const ops[] = {&my_cpu};
 *     NNP_OP_LIBRARY_ENTRY("my-ops", ops)
 *
 * Everything here is static to the file that includes it; NNP_OP_LIBRARY_ENTRY goes in one file
 * of the library. Threads: link with -pthread (nnplug's build does).
 *
 * VERSIONING: NNP_OP_LIBRARY_VERSION grows by one when a function or macro is added here; none is
 * removed or changed in meaning within custom-op ABI major 1.
 */
#ifndef NNPLUG_OP_LIBRARY_H_
#define NNPLUG_OP_LIBRARY_H_

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "nnplug/custom_op.h"

#if NNP_CUSTOM_OP_ABI_MAJOR != 1
#error "nnplug/op_library.h is written for custom-op ABI major 1"
#endif

#define NNP_OP_LIBRARY_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version as compiled, for nnp_custom_op.version and nnp_op_library.abi_version. */
#define NNP_CUSTOM_OP_ABI_VERSION \
    {NNP_CUSTOM_OP_ABI_MAJOR, NNP_CUSTOM_OP_ABI_MINOR, NNP_CUSTOM_OP_ABI_PATCH}

/* The members every nnp_custom_op starts with, in its designated initializer:
 *     static const nnp_custom_op my_cpu = {NNP_CUSTOM_OP_HEAD(NNP_OP_TARGET_CPU, "MyOp"), ...}; */
#define NNP_CUSTOM_OP_HEAD(op_target, type)                                     \
    .version = NNP_CUSTOM_OP_ABI_VERSION, .struct_size = sizeof(nnp_custom_op), \
    .target = (op_target), .op_type = (type)

/* A GPU op's OpenCL kernel `kernel_name` from source text compiled in as a char array (the
 * build hook's `embed`), in the op's designated initializer. */
#define NNP_OP_EMBEDDED_CL(kernel_name, source_array)                    \
    .cl_kernel_name = (kernel_name), .cl_kernel_source = (source_array), \
    .cl_source_size = sizeof(source_array) - 1

/* The library table listing the static array `op_list` (of const nnp_custom_op pointers) and
 * the exported entry symbol returning it; it refuses a host of another ABI major. */
#define NNP_OP_LIBRARY_ENTRY(library_name, op_list)                                   \
    static const nnp_op_library nnp_op_library_table = {                              \
        NNP_CUSTOM_OP_ABI_VERSION, sizeof(nnp_op_library), library_name,              \
        (int32_t)(sizeof(op_list) / sizeof((op_list)[0])), op_list};                  \
    NNP_EXPORT const nnp_op_library *nnp_custom_op_entry(const nnp_version *host_abi) \
    {                                                                                 \
        if (host_abi && host_abi->major != NNP_CUSTOM_OP_ABI_MAJOR) return NULL;      \
        return &nnp_op_library_table;                                                 \
    }

/* Record `message` for the CustomOpError and return `status`. */
static inline int32_t nnp_op_fail(nnp_op_context *ctx, int32_t status, const char *message)
{
    ctx->set_error(ctx, message);
    return status;
}

/* 0 when the node has `want_in` inputs and `want_out` outputs and no input's rank is above
 * NNP_OP_MAX_DIMS; else NNP_STATUS_INVALID_ARGUMENT with a message naming the op type. */
static inline int32_t nnp_op_check_io(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                                      uint32_t n_out, uint32_t want_in, uint32_t want_out)
{
    char msg[256];
    const char *op = ctx->op_type ? ctx->op_type : "the op";
    if (n_in != want_in || n_out != want_out || (n_in && !in)) {
        snprintf(msg, sizeof msg, "%s takes %u input(s) and gives %u output(s), not %u and %u", op,
                 want_in, want_out, n_in, n_out);
        return nnp_op_fail(ctx, NNP_STATUS_INVALID_ARGUMENT, msg);
    }
    for (uint32_t i = 0; i < n_in; ++i)
        if (in[i].attr.n_dims > NNP_OP_MAX_DIMS) {
            snprintf(msg, sizeof msg, "%s: input %u has rank %u, above NNP_OP_MAX_DIMS (%d)", op, i,
                     in[i].attr.n_dims, NNP_OP_MAX_DIMS);
            return nnp_op_fail(ctx, NNP_STATUS_INVALID_ARGUMENT, msg);
        }
    return 0;
}

/* A destroy callback for ops whose priv_data is one malloc'd block (or NULL). */
static inline int32_t nnp_op_destroy_priv(nnp_op_context *ctx)
{
    free(ctx->priv_data);
    ctx->priv_data = NULL;
    return 0;
}

/* A tensor seen as outer x axis_len x inner around one axis (compact, row-major). */
typedef struct nnp_op_axis_view {
    uint64_t outer, axis_len, inner;
} nnp_op_axis_view;

/* The view of `t`'s dims around `axis` (0 <= axis < t->attr.n_dims, checked by the caller). */
static inline nnp_op_axis_view nnp_op_view_at_axis(const nnp_op_tensor *t, uint32_t axis)
{
    nnp_op_axis_view v = {1, (uint64_t)t->attr.dims[axis], 1};
    for (uint32_t d = 0; d < axis; ++d) v.outer *= (uint64_t)t->attr.dims[d];
    for (uint32_t d = axis + 1; d < t->attr.n_dims; ++d) v.inner *= (uint64_t)t->attr.dims[d];
    return v;
}

/* ---- CPU: work across threads --------------------------------------------------------------- */

/* Most threads nnp_op_parallel_for starts. */
#define NNP_OP_MAX_THREADS 64

/* Run items [begin, end) of the work with `scratch`, this share's own scratch memory. */
typedef void (*nnp_op_range_fn)(void *arg, uint64_t begin, uint64_t end, void *scratch);

typedef struct nnp_op_range_job {
    nnp_op_range_fn fn;
    void *arg;
    uint64_t begin, end;
    void *scratch;
} nnp_op_range_job;

static inline void *nnp_op_run_range_job(void *job)
{
    nnp_op_range_job *j = (nnp_op_range_job *)job;
    j->fn(j->arg, j->begin, j->end, j->scratch);
    return NULL;
}

/* fn(arg, begin, end, scratch) over items [0, count) in contiguous shares, one per thread: at
 * most ctx->num_threads threads (and NNP_OP_MAX_THREADS, and count), one thread when the whole
 * work is below min_parallel_work (threads cost more than they save), the calling thread
 * taking the first share. Each share gets scratch_bytes of its own (NULL for 0). A share whose
 * thread cannot start runs on the calling thread. 0, or NNP_STATUS_OUT_OF_MEMORY with a
 * message (before any share ran) when the scratch memory cannot be allocated. */
static inline int32_t nnp_op_parallel_for(nnp_op_context *ctx, uint64_t count, uint64_t work,
                                          uint64_t min_parallel_work, size_t scratch_bytes,
                                          nnp_op_range_fn fn, void *arg)
{
    uint64_t threads = ctx->num_threads > 0 ? (uint64_t)ctx->num_threads : 1;
    if (threads > NNP_OP_MAX_THREADS) threads = NNP_OP_MAX_THREADS;
    if (threads > count) threads = count;
    if (work < min_parallel_work || threads < 1) threads = 1;
    nnp_op_range_job jobs[NNP_OP_MAX_THREADS];
    pthread_t tids[NNP_OP_MAX_THREADS];
    int started[NNP_OP_MAX_THREADS] = {0}, out_of_memory = 0;
    for (uint64_t t = 0; t < threads; ++t) {
        jobs[t].fn = fn;
        jobs[t].arg = arg;
        jobs[t].begin = count * t / threads;
        jobs[t].end = count * (t + 1) / threads;
        jobs[t].scratch = scratch_bytes ? malloc(scratch_bytes) : NULL;
        out_of_memory |= scratch_bytes && !jobs[t].scratch;
    }
    if (!out_of_memory) {
        for (uint64_t t = 1; t < threads; ++t)
            started[t] = pthread_create(&tids[t], NULL, nnp_op_run_range_job, &jobs[t]) == 0;
        nnp_op_run_range_job(&jobs[0]);
        for (uint64_t t = 1; t < threads; ++t) {
            if (started[t]) pthread_join(tids[t], NULL);
            else nnp_op_run_range_job(&jobs[t]);
        }
    }
    for (uint64_t t = 0; t < threads; ++t) free(jobs[t].scratch);
    if (out_of_memory)
        return nnp_op_fail(ctx, NNP_STATUS_OUT_OF_MEMORY, "out of memory for scratch space");
    return 0;
}

/* ---- GPU: a 1-D OpenCL kernel ---------------------------------------------------------------- */

/* One kernel argument: its size and where its value is (clSetKernelArg's). */
typedef struct nnp_op_cl_arg {
    size_t size;
    const void *value;
} nnp_op_cl_arg;

/* Set ctx->cl_kernel's arguments 0..n_args-1 and queue it over `global` work items on the
 * node's queue (the host waits for it after compute). 0, or NNP_STATUS_INVALID_ARGUMENT (no
 * OpenCL kernel in the context) / NNP_STATUS_DEVICE_ERROR with a message. */
static inline int32_t nnp_op_cl_run_1d(nnp_op_context *ctx, const nnp_op_cl_arg *args,
                                       uint32_t n_args, uint64_t global)
{
    const nnp_cl_api *cl = ctx->cl;
    if (!cl || !ctx->cl_kernel)
        return nnp_op_fail(ctx, NNP_STATUS_INVALID_ARGUMENT, "no OpenCL kernel in the context");
    int32_t err = 0;
    for (uint32_t i = 0; i < n_args; ++i)
        err |= cl->clSetKernelArg(ctx->cl_kernel, i, args[i].size, args[i].value);
    if (err) return nnp_op_fail(ctx, NNP_STATUS_DEVICE_ERROR, "clSetKernelArg failed");
    size_t size = (size_t)global;
    err = cl->clEnqueueNDRangeKernel(ctx->cl_command_queue, ctx->cl_kernel, 1, NULL, &size, NULL, 0,
                                     NULL, NULL);
    if (err) return nnp_op_fail(ctx, NNP_STATUS_DEVICE_ERROR, "clEnqueueNDRangeKernel failed");
    return 0;
}

/* Most `extra` arguments nnp_op_cl_run_axis passes. */
#define NNP_OP_CL_MAX_EXTRA_ARGS 8

/* Queue ctx->cl_kernel as an axis kernel over v->outer * v->inner work items, with the
 * arguments (global x, ulong x_offset, global y, ulong y_offset, ulong outer, ulong axis_len,
 * ulong inner) followed by `extra`: the offsets are the tensors' byte offsets in their
 * buffers. As nnp_op_cl_run_1d otherwise. */
static inline int32_t nnp_op_cl_run_axis(nnp_op_context *ctx, const nnp_op_tensor *x,
                                         const nnp_op_tensor *y, const nnp_op_axis_view *v,
                                         const nnp_op_cl_arg *extra, uint32_t n_extra)
{
    if (n_extra > NNP_OP_CL_MAX_EXTRA_ARGS)
        return nnp_op_fail(ctx, NNP_STATUS_INVALID_ARGUMENT, "too many OpenCL kernel arguments");
    nnp_op_cl_arg args[7 + NNP_OP_CL_MAX_EXTRA_ARGS] = {
        {sizeof x->mem.base, &x->mem.base}, {sizeof x->mem.offset, &x->mem.offset},
        {sizeof y->mem.base, &y->mem.base}, {sizeof y->mem.offset, &y->mem.offset},
        {sizeof v->outer, &v->outer},       {sizeof v->axis_len, &v->axis_len},
        {sizeof v->inner, &v->inner}};
    for (uint32_t i = 0; i < n_extra; ++i) args[7 + i] = extra[i];
    return nnp_op_cl_run_1d(ctx, args, 7 + n_extra, v->outer * v->inner);
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NNPLUG_OP_LIBRARY_H_ */
