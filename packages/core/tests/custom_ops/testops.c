/* Test op library for the core's custom-op host tests (compiled by the tests with cc).
 *
 *   cstScale (CPU and GPU): y = x * scale (float attr, default 1), float32, any shape;
 *            logs every callback as "<callback>:<node>" (testops_events()).
 *   cstFail  (CPU): y = x, but compute fails with a message when x[0] < 0.
 *   Relu     (CPU, override): y = max(x, 0) for rank-2 inputs; init declines others (NNP_OP_SKIP).
 *
 * -DBAD_MAJOR / -DBAD_MINOR / -DBAD_NATIVE / -DBAD_NO_COMPUTE / -DNO_ENTRY build broken variants;
 * -DBAD_SHAPE one whose shape_infer reports one row too many.
 * -DCRASH_OPS: cstFail's compute writes to address 0 when x[0] is 1001 and calls exit(3) when
 * it is 1003 (test_isolated_op_libraries.py); cstScale's GPU compute, once it has set its
 * kernel's arguments, writes to address 0 when scale is 1001 and calls abort() when it is 1006
 * (test_isolated_opencl_ops.py); -DCTOR_ABORT: a constructor calls abort().
 * -DGPU_ONLY: cstScale with its GPU implementation only.
 * -DHOSTILE_OP_TYPE: one op whose op_type is the hostile string of kind $TB_HOSTILE_KIND
 * (../native/csrc/hostile_string.h); with $TB_HOSTILE_CL_SIZE, a GPU op whose source text
 * has that cl_source_size but only 8 readable bytes.
 */
#define _DEFAULT_SOURCE
#include <nnplug/custom_op.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char events[1 << 16];
static size_t events_len;
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;

static void event(const char *what, const nnp_op_context *ctx)
{
    pthread_mutex_lock(&events_lock);
    int n =
        snprintf(events + events_len, sizeof events - events_len, "%s:%s\n", what, ctx->node_name);
    if (n > 0 && events_len + (size_t)n < sizeof events) events_len += (size_t)n;
    pthread_mutex_unlock(&events_lock);
}

NNP_EXPORT const char *testops_events(void)
{
    return events;
}
NNP_EXPORT void testops_reset(void)
{
    pthread_mutex_lock(&events_lock);
    events_len = 0;
    events[0] = 0;
    pthread_mutex_unlock(&events_lock);
}

typedef struct {
    float scale;
    int runs;
} scale_priv;

static int32_t same_shape(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                          nnp_op_tensor *out, uint32_t n_out)
{
    if (n_in != 1 || n_out != 1) {
        ctx->set_error(ctx, "expects one input and one output");
        return NNP_STATUS_INVALID_ARGUMENT;
    }
    out[0].attr.n_dims = in[0].attr.n_dims;
    memcpy(out[0].attr.dims, in[0].attr.dims, sizeof in[0].attr.dims);
    out[0].attr.dtype = in[0].attr.dtype;
#ifdef BAD_SHAPE
    /* a broken shape function: one more row than the input has */
    if (out[0].attr.n_dims > 0 && out[0].attr.dims[0] >= 0) out[0].attr.dims[0] += 1;
#endif
    return 0;
}

static int32_t scale_init(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                          const nnp_op_tensor *out, uint32_t n_out)
{
    (void)out;
    (void)n_out;
    event("init", ctx);
    if (n_in != 1 || !nnp_op_is_f32(in[0].attr.dtype)) {
        ctx->set_error(ctx, "cstScale takes one float32 input");
        return NNP_STATUS_INVALID_ARGUMENT;
    }
    nnp_attr a;
    float scale = 1.0f;
    if (ctx->get_attr(ctx, "scale", &a) == NNP_OK) {
        if (a.type != NNP_ATTR_FLOAT || a.count != 1) {
            ctx->set_error(ctx, "attribute scale must be a float");
            return NNP_STATUS_INVALID_ARGUMENT;
        }
        scale = *(const float *)a.data;
    }
    scale_priv *p = calloc(1, sizeof *p);
    if (!p) return NNP_STATUS_OUT_OF_MEMORY;
    p->scale = scale;
    ctx->priv_data = p;
    return 0;
}

static int32_t scale_prepare(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                             const nnp_op_tensor *out, uint32_t n_out)
{
    (void)in;
    (void)n_in;
    (void)out;
    (void)n_out;
    event("prepare", ctx);
    return 0;
}

static int32_t scale_compute(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                             const nnp_op_tensor *out, uint32_t n_out)
{
    event("compute", ctx);
    if (n_in != 1 || n_out != 1 || in[0].attr.n_elems != out[0].attr.n_elems) {
        ctx->set_error(ctx, "shape mismatch");
        return NNP_STATUS_SHAPE_ERROR;
    }
    scale_priv *p = ctx->priv_data;
    const float *x = nnp_op_tensor_data(&in[0]);
    float *y = nnp_op_tensor_data(&out[0]);
    for (uint64_t i = 0; i < in[0].attr.n_elems; ++i) y[i] = x[i] * p->scale;
    p->runs++;
    return 0;
}

static int32_t scale_destroy(nnp_op_context *ctx)
{
    event("destroy", ctx);
    free(ctx->priv_data);
    ctx->priv_data = NULL;
    return 0;
}

/* GPU: same op as an OpenCL kernel; the host built ctx->cl_kernel from this source. */
static const char scale_cl[] =
    "__kernel void scale(__global const float* x, ulong xoff, __global float* y, ulong yoff,\n"
    "                    float s, ulong n) {\n"
    "  size_t i = get_global_id(0);\n"
    "  if (i < n) y[yoff / 4 + i] = x[xoff / 4 + i] * s;\n"
    "}\n";

static int32_t scale_gpu_compute(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                                 const nnp_op_tensor *out, uint32_t n_out)
{
    event("compute", ctx);
    if (n_in != 1 || n_out != 1) return NNP_STATUS_INVALID_ARGUMENT;
    scale_priv *p = ctx->priv_data;
    const nnp_cl_api *cl = ctx->cl;
    uint64_t xoff = in[0].mem.offset, yoff = out[0].mem.offset, n = in[0].attr.n_elems;
    void *xm = in[0].mem.base;
    void *ym = out[0].mem.base;
    int32_t rc = 0;
    rc |= cl->clSetKernelArg(ctx->cl_kernel, 0, sizeof(void *), &xm);
    rc |= cl->clSetKernelArg(ctx->cl_kernel, 1, sizeof xoff, &xoff);
    rc |= cl->clSetKernelArg(ctx->cl_kernel, 2, sizeof(void *), &ym);
    rc |= cl->clSetKernelArg(ctx->cl_kernel, 3, sizeof yoff, &yoff);
    rc |= cl->clSetKernelArg(ctx->cl_kernel, 4, sizeof p->scale, &p->scale);
    rc |= cl->clSetKernelArg(ctx->cl_kernel, 5, sizeof n, &n);
    if (rc) {
        ctx->set_error(ctx, "clSetKernelArg failed");
        return NNP_STATUS_DEVICE_ERROR;
    }
#ifdef CRASH_OPS
    static volatile uintptr_t null_address; /* read at run time: the store below is not elided */
    if (p->scale == 1001.0f) *(volatile float *)null_address = 1.0f;
    if (p->scale == 1006.0f) abort();
#endif
    if (n == 0) return 0;
    size_t global = (size_t)n;
    rc = cl->clEnqueueNDRangeKernel(ctx->cl_command_queue, ctx->cl_kernel, 1, NULL, &global, NULL,
                                    0, NULL, NULL);
    if (rc) {
        ctx->set_error(ctx, "clEnqueueNDRangeKernel failed");
        return NNP_STATUS_DEVICE_ERROR;
    }
    p->runs++;
    return 0;
}

static int32_t fail_compute(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                            const nnp_op_tensor *out, uint32_t n_out)
{
    (void)n_in;
    (void)n_out;
    const float *x = nnp_op_tensor_data(&in[0]);
    float *y = nnp_op_tensor_data(&out[0]);
#ifdef CRASH_OPS
    static volatile uintptr_t address_zero; /* read at run time: the store below is not elided */
    if (in[0].attr.n_elems && x[0] == 1001.0f) *(volatile float *)address_zero = 1.0f;
    if (in[0].attr.n_elems && x[0] == 1003.0f) exit(3);
#endif
    if (in[0].attr.n_elems && x[0] < 0) {
        ctx->set_error(ctx, "negative first element");
        return NNP_STATUS_ERROR;
    }
    memcpy(y, x, in[0].attr.size);
    return 0;
}

static int32_t relu_init(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                         const nnp_op_tensor *out, uint32_t n_out)
{
    (void)out;
    (void)n_out;
    event("init", ctx);
    if (n_in != 1 || in[0].attr.n_dims != 2 || !nnp_op_is_f32(in[0].attr.dtype)) return NNP_OP_SKIP;
    return 0;
}

static int32_t relu_compute(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                            const nnp_op_tensor *out, uint32_t n_out)
{
    (void)ctx;
    (void)n_in;
    (void)n_out;
    const float *x = nnp_op_tensor_data(&in[0]);
    float *y = nnp_op_tensor_data(&out[0]);
    for (uint64_t i = 0; i < in[0].attr.n_elems; ++i) y[i] = x[i] > 0 ? x[i] : 0;
    return 0;
}

#ifdef BAD_MAJOR
#define OP_MAJOR 2
#else
#define OP_MAJOR NNP_CUSTOM_OP_ABI_MAJOR
#endif
#ifdef BAD_MINOR
#define OP_MINOR (NNP_CUSTOM_OP_ABI_MINOR + 1)
#else
#define OP_MINOR NNP_CUSTOM_OP_ABI_MINOR
#endif
#define VERSION {OP_MAJOR, OP_MINOR, NNP_CUSTOM_OP_ABI_PATCH}

static int dummy_native;

static const nnp_custom_op scale_cpu = {VERSION,
                                        sizeof(nnp_custom_op),
                                        NNP_OP_TARGET_CPU,
                                        "cstScale",
                                        NULL,
                                        NULL,
                                        0,
                                        NULL,
                                        scale_init,
                                        scale_prepare,
#ifdef BAD_NO_COMPUTE
                                        NULL,
#else
                                        scale_compute,
#endif
#ifdef BAD_NATIVE
                                        &dummy_native,
#else
                                        NULL,
#endif
                                        scale_destroy,
                                        same_shape};
static const nnp_custom_op scale_gpu = {VERSION,
                                        sizeof(nnp_custom_op),
                                        NNP_OP_TARGET_GPU,
                                        "cstScale",
                                        "scale",
                                        scale_cl,
                                        sizeof scale_cl - 1,
                                        "-cl-std=CL1.2",
                                        scale_init,
                                        scale_prepare,
                                        scale_gpu_compute,
                                        NULL,
                                        scale_destroy,
                                        same_shape};
static const nnp_custom_op fail_cpu = {VERSION,
                                       sizeof(nnp_custom_op),
                                       NNP_OP_TARGET_CPU,
                                       "cstFail",
                                       NULL,
                                       NULL,
                                       0,
                                       NULL,
                                       NULL,
                                       NULL,
                                       fail_compute,
                                       NULL,
                                       NULL,
                                       same_shape};
static const nnp_custom_op relu_cpu = {VERSION,
                                       sizeof(nnp_custom_op),
                                       NNP_OP_TARGET_CPU,
                                       "Relu",
                                       NULL,
                                       NULL,
                                       0,
                                       NULL,
                                       relu_init,
                                       NULL,
                                       relu_compute,
                                       NULL,
                                       NULL,
                                       NULL,
                                       NNP_OP_OVERRIDES_STANDARD};

#ifdef GPU_ONLY
static const nnp_custom_op *const ops[] = {&scale_gpu};
#else
static const nnp_custom_op *const ops[] = {&scale_cpu, &scale_gpu, &fail_cpu, &relu_cpu};
#endif
static const nnp_op_library library = {VERSION, sizeof(nnp_op_library), "testops",
                                       (int32_t)(sizeof ops / sizeof ops[0]), ops};

#ifdef HOSTILE_OP_TYPE
#include "../native/csrc/hostile_string.h"

static nnp_custom_op hostile_op;
static const nnp_custom_op *hostile_ops[1];
static nnp_op_library hostile_library;
#endif

#ifdef CTOR_ABORT
__attribute__((constructor)) static void testops_ctor_abort(void)
{
    abort();
}
#endif

#ifndef NO_ENTRY
NNP_EXPORT const nnp_op_library *nnp_custom_op_entry(const nnp_version *host_abi)
{
    (void)host_abi;
    (void)dummy_native;
#ifdef HOSTILE_OP_TYPE
    const char *kind = getenv("TB_HOSTILE_KIND");
    const char *cl_size = getenv("TB_HOSTILE_CL_SIZE");
    hostile_op = fail_cpu;
    hostile_op.op_type = hostile_string(kind ? atoi(kind) : 0);
    if (cl_size) { /* a GPU op whose source text is 8 bytes before a guard page */
        hostile_op = scale_gpu;
        hostile_op.cl_kernel_source = hostile_string(1);
        hostile_op.cl_source_size = strtoull(cl_size, NULL, 10);
    }
    hostile_ops[0] = &hostile_op;
    hostile_library = library;
    hostile_library.num_ops = 1;
    hostile_library.ops = hostile_ops;
    return &hostile_library;
#endif
    return &library;
}
#else
NNP_EXPORT int not_an_op_library(void)
{
    return dummy_native;
}
#endif
