/* ArgMax override (standard ONNX op): axis (default 0), keepdims (default 1),
 * select_last_index (default 0); float32 input, int64 output. Other input types are declined
 * in init (NNP_OP_SKIP) so a backend's own kernel runs them.
 *
 * NaN follows onnxruntime's rule: the running best starts at the slice's first element and a
 * value replaces it only when it compares greater (or equal, with select_last_index), which a NaN
 * never does; so a NaN is picked only when it comes first. Ties (-inf included): the first
 * index, or the last.
 * CPU: contiguous slices scan linearly; for inner axes the running best is kept per inner
 * element so the loop walks memory in order (and vectorises); threads for large tensors.
 * GPU: argmax.cl, embedded at build time.
 */
#include <nnplug/custom_op.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "argmax_cl.h" /* generated from argmax.cl by the build hook (embed) */

#define MIN_PARALLEL_ELEMS (1 << 16)
#define MAX_THREADS 64

typedef struct {
    int64_t axis, keepdims, last;
} argmax_priv;

typedef struct {
    uint64_t outer, axis_len, inner;
} layout3;

static int read_attrs(nnp_op_context *ctx, uint32_t rank, argmax_priv *p, uint32_t *axis)
{
    p->axis = nnp_op_attr_int(ctx, "axis", 0);
    p->keepdims = nnp_op_attr_int(ctx, "keepdims", 1);
    p->last = nnp_op_attr_int(ctx, "select_last_index", 0);
    int64_t a = p->axis < 0 ? p->axis + (int64_t)rank : p->axis;
    if (rank == 0 || a < 0 || a >= (int64_t)rank) {
        ctx->set_error(ctx, "attribute axis is out of range for the input's rank");
        return NNP_STATUS_INVALID_ARGUMENT;
    }
    *axis = (uint32_t)a;
    return 0;
}

static int check_io(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in, uint32_t n_out)
{
    if (n_in != 1 || n_out != 1) {
        ctx->set_error(ctx, "ArgMax takes one input and gives one output");
        return NNP_STATUS_INVALID_ARGUMENT;
    }
    if (in[0].attr.n_dims > NNP_OP_MAX_DIMS) return NNP_STATUS_INVALID_ARGUMENT;
    return 0;
}

static int32_t argmax_shape_infer(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                                  nnp_op_tensor *out, uint32_t n_out)
{
    int rc = check_io(ctx, in, n_in, n_out);
    if (rc) return rc;
    argmax_priv p;
    uint32_t axis;
    rc = read_attrs(ctx, in[0].attr.n_dims, &p, &axis);
    if (rc) return rc;
    uint32_t r = 0;
    for (uint32_t d = 0; d < in[0].attr.n_dims; ++d) {
        if (d == axis) {
            if (p.keepdims) out[0].attr.dims[r++] = 1;
        } else {
            out[0].attr.dims[r++] = in[0].attr.dims[d];
        }
    }
    out[0].attr.n_dims = r;
    out[0].attr.dtype = (nnp_dtype){NNP_DTYPE_INT, 64, 1};
    return 0;
}

static int32_t argmax_init(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                           const nnp_op_tensor *out, uint32_t n_out)
{
    int rc = check_io(ctx, in, n_in, n_out);
    if (rc) return rc;
    if (!nnp_op_is_f32(in[0].attr.dtype) || !nnp_op_is_i64(out[0].attr.dtype))
        return NNP_OP_SKIP; /* not ours: the backend's ArgMax handles other types */
    argmax_priv *p = malloc(sizeof *p);
    if (!p) return NNP_STATUS_OUT_OF_MEMORY;
    uint32_t axis;
    rc = read_attrs(ctx, in[0].attr.n_dims, p, &axis);
    if (rc) {
        free(p);
        return rc;
    }
    ctx->priv_data = p;
    return 0;
}

static int32_t argmax_destroy(nnp_op_context *ctx)
{
    free(ctx->priv_data);
    ctx->priv_data = NULL;
    return 0;
}

static int view(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                const nnp_op_tensor *out, uint32_t n_out, layout3 *l)
{
    int rc = check_io(ctx, in, n_in, n_out);
    if (rc) return rc;
    argmax_priv *p = ctx->priv_data;
    if (!p) return NNP_STATUS_INTERNAL;
    argmax_priv tmp;
    uint32_t axis;
    rc = read_attrs(ctx, in[0].attr.n_dims, &tmp, &axis);
    if (rc) return rc;
    l->outer = l->inner = 1;
    l->axis_len = (uint64_t)in[0].attr.dims[axis];
    for (uint32_t d = 0; d < axis; ++d) l->outer *= (uint64_t)in[0].attr.dims[d];
    for (uint32_t d = axis + 1; d < in[0].attr.n_dims; ++d)
        l->inner *= (uint64_t)in[0].attr.dims[d];
    uint64_t n = l->outer * l->axis_len * l->inner, m = l->outer * l->inner;
    if (!nnp_op_is_f32(in[0].attr.dtype) || !nnp_op_is_i64(out[0].attr.dtype) ||
        in[0].attr.n_elems != n || out[0].attr.n_elems != m || in[0].mem.size < n * 4 ||
        out[0].mem.size < m * 8) {
        ctx->set_error(ctx, "input/output shapes or types do not match");
        return NNP_STATUS_SHAPE_ERROR;
    }
    if (l->axis_len == 0 && m) {
        ctx->set_error(ctx, "ArgMax over an empty axis has no answer");
        return NNP_STATUS_SHAPE_ERROR;
    }
    if (n && (!in[0].mem.base || !out[0].mem.base)) return NNP_STATUS_INVALID_ARGUMENT;
    return 0;
}

/* ---- CPU ------------------------------------------------------------------------------------ */
static inline int take(float v, float best, int last)
{
    return last ? v >= best : v > best;
}

typedef struct {
    const float *x;
    int64_t *y;
    layout3 l;
    int last;
    uint64_t begin, end;
    int failed;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    const uint64_t A = j->l.axis_len, I = j->l.inner;
    float *best = NULL;
    if (I > 1 && !(best = malloc(I * sizeof(float)))) {
        j->failed = 1;
        return NULL;
    }
    for (uint64_t o = j->begin; o < j->end; ++o) {
        const float *xs = j->x + o * A * I;
        int64_t *ys = j->y + o * I;
        if (I == 1) {
            float b = xs[0];
            int64_t at = 0;
            for (uint64_t k = 1; k < A; ++k)
                if (take(xs[k], b, j->last)) {
                    b = xs[k];
                    at = (int64_t)k;
                }
            ys[0] = at;
            continue;
        }
        memcpy(best, xs, I * sizeof(float));
        for (uint64_t i = 0; i < I; ++i) ys[i] = 0;
        for (uint64_t k = 1; k < A; ++k) {
            const float *xk = xs + k * I;
            for (uint64_t i = 0; i < I; ++i) {
                int t = take(xk[i], best[i], j->last);
                best[i] = t ? xk[i] : best[i];
                ys[i] = t ? (int64_t)k : ys[i];
            }
        }
    }
    free(best);
    return NULL;
}

static int32_t argmax_compute(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                              const nnp_op_tensor *out, uint32_t n_out)
{
    layout3 l;
    int rc = view(ctx, in, n_in, out, n_out, &l);
    if (rc) return rc;
    if (l.outer * l.inner == 0) return 0;
    const argmax_priv *p = ctx->priv_data;
    uint64_t n = l.outer * l.axis_len * l.inner;
    uint64_t threads = ctx->num_threads > 0 ? (uint64_t)ctx->num_threads : 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > l.outer) threads = l.outer;
    if (n < MIN_PARALLEL_ELEMS) threads = 1;
    job jobs[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (uint64_t t = 0; t < threads; ++t)
        jobs[t] = (job){nnp_op_tensor_data(&in[0]), nnp_op_tensor_data(&out[0]), l, (int)p->last,
                        l.outer * t / threads,      l.outer * (t + 1) / threads, 0};
    for (uint64_t t = 1; t < threads; ++t)
        started[t] = pthread_create(&tids[t], NULL, run_job, &jobs[t]) == 0;
    run_job(&jobs[0]);
    for (uint64_t t = 1; t < threads; ++t) {
        if (started[t]) pthread_join(tids[t], NULL);
        else run_job(&jobs[t]);
    }
    for (uint64_t t = 0; t < threads; ++t)
        if (jobs[t].failed) {
            ctx->set_error(ctx, "out of memory for scratch space");
            return NNP_STATUS_OUT_OF_MEMORY;
        }
    return 0;
}

/* ---- GPU ------------------------------------------------------------------------------------ */
static int32_t argmax_gpu_compute(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                                  const nnp_op_tensor *out, uint32_t n_out)
{
    layout3 l;
    int rc = view(ctx, in, n_in, out, n_out, &l);
    if (rc) return rc;
    uint64_t work = l.outer * l.inner;
    if (work == 0) return 0;
    const nnp_cl_api *cl = ctx->cl;
    if (!cl || !ctx->cl_kernel) {
        ctx->set_error(ctx, "no OpenCL kernel in the context");
        return NNP_STATUS_INVALID_ARGUMENT;
    }
    const argmax_priv *p = ctx->priv_data;
    void *xm = in[0].mem.base;
    void *ym = out[0].mem.base;
    uint64_t xoff = in[0].mem.offset, yoff = out[0].mem.offset;
    int32_t last = (int32_t)p->last;
    int32_t err = 0;
    err |= cl->clSetKernelArg(ctx->cl_kernel, 0, sizeof xm, &xm);
    err |= cl->clSetKernelArg(ctx->cl_kernel, 1, sizeof xoff, &xoff);
    err |= cl->clSetKernelArg(ctx->cl_kernel, 2, sizeof ym, &ym);
    err |= cl->clSetKernelArg(ctx->cl_kernel, 3, sizeof yoff, &yoff);
    err |= cl->clSetKernelArg(ctx->cl_kernel, 4, sizeof l.outer, &l.outer);
    err |= cl->clSetKernelArg(ctx->cl_kernel, 5, sizeof l.axis_len, &l.axis_len);
    err |= cl->clSetKernelArg(ctx->cl_kernel, 6, sizeof l.inner, &l.inner);
    err |= cl->clSetKernelArg(ctx->cl_kernel, 7, sizeof last, &last);
    if (err) {
        ctx->set_error(ctx, "clSetKernelArg failed");
        return NNP_STATUS_DEVICE_ERROR;
    }
    size_t global = (size_t)work;
    err = cl->clEnqueueNDRangeKernel(ctx->cl_command_queue, ctx->cl_kernel, 1, NULL, &global, NULL,
                                     0, NULL, NULL);
    if (err) {
        ctx->set_error(ctx, "clEnqueueNDRangeKernel failed");
        return NNP_STATUS_DEVICE_ERROR;
    }
    return 0;
}

#define VERSION {NNP_CUSTOM_OP_ABI_MAJOR, NNP_CUSTOM_OP_ABI_MINOR, NNP_CUSTOM_OP_ABI_PATCH}

static const nnp_custom_op argmax_cpu = {
    VERSION,
    sizeof(nnp_custom_op),
    NNP_OP_TARGET_CPU,
    "ArgMax",
    NULL,
    NULL,
    0,
    NULL,
    argmax_init,
    NULL,
    argmax_compute,
    NULL,
    argmax_destroy,
    argmax_shape_infer,
    NNP_OP_OVERRIDES_STANDARD /* ArgMax is a standard op: say that replacing it is meant */};
static const nnp_custom_op argmax_gpu = {VERSION,
                                         sizeof(nnp_custom_op),
                                         NNP_OP_TARGET_GPU,
                                         "ArgMax",
                                         "argmax_f32",
                                         argmax_cl,
                                         sizeof argmax_cl - 1,
                                         NULL,
                                         argmax_init,
                                         NULL,
                                         argmax_gpu_compute,
                                         NULL,
                                         argmax_destroy,
                                         argmax_shape_infer,
                                         NNP_OP_OVERRIDES_STANDARD};

static const nnp_custom_op *const ops[] = {&argmax_cpu, &argmax_gpu};
static const nnp_op_library library = {VERSION, sizeof(nnp_op_library), "nnplug-ops-argmax", 2,
                                       ops};

NNP_EXPORT const nnp_op_library *nnp_custom_op_entry(const nnp_version *host_abi)
{
    (void)host_abi;
    return &library;
}
