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
#include <nnplug/op_library.h>

#include <stdlib.h>
#include <string.h>

#include "argmax_cl.h" /* generated from argmax.cl by the build hook (embed) */

#define MIN_PARALLEL_ELEMS (1 << 16)

typedef struct {
    int64_t axis, keepdims, last;
} argmax_priv;

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

static int32_t argmax_shape_infer(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                                  nnp_op_tensor *out, uint32_t n_out)
{
    int rc = nnp_op_check_io(ctx, in, n_in, n_out, 1, 1);
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
    int rc = nnp_op_check_io(ctx, in, n_in, n_out, 1, 1);
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

static int view(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                const nnp_op_tensor *out, uint32_t n_out, nnp_op_axis_view *l)
{
    int rc = nnp_op_check_io(ctx, in, n_in, n_out, 1, 1);
    if (rc) return rc;
    argmax_priv *p = ctx->priv_data;
    if (!p) return NNP_STATUS_INTERNAL;
    argmax_priv tmp;
    uint32_t axis;
    rc = read_attrs(ctx, in[0].attr.n_dims, &tmp, &axis);
    if (rc) return rc;
    *l = nnp_op_view_at_axis(&in[0], axis);
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

/* The outer slices of one compute, shared by its threads. */
typedef struct {
    const float *x;
    int64_t *y;
    nnp_op_axis_view l;
    int last;
} job;

static void run_slices(void *arg, uint64_t begin, uint64_t end, void *scratch)
{
    const job *j = arg;
    const uint64_t A = j->l.axis_len, I = j->l.inner;
    float *best = scratch; /* I floats, when I > 1 */
    for (uint64_t o = begin; o < end; ++o) {
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
}

static int32_t argmax_compute(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                              const nnp_op_tensor *out, uint32_t n_out)
{
    nnp_op_axis_view l;
    int rc = view(ctx, in, n_in, out, n_out, &l);
    if (rc || l.outer * l.inner == 0) return rc;
    const argmax_priv *p = ctx->priv_data;
    job j = {nnp_op_tensor_data(&in[0]), nnp_op_tensor_data(&out[0]), l, (int)p->last};
    size_t scratch = l.inner > 1 ? l.inner * sizeof(float) : 0; /* the running best */
    return nnp_op_parallel_for(ctx, l.outer, l.outer * l.axis_len * l.inner, MIN_PARALLEL_ELEMS,
                               scratch, run_slices, &j);
}

/* ---- GPU ------------------------------------------------------------------------------------ */
static int32_t argmax_gpu_compute(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                                  const nnp_op_tensor *out, uint32_t n_out)
{
    nnp_op_axis_view l;
    int rc = view(ctx, in, n_in, out, n_out, &l);
    if (rc || l.outer * l.inner == 0) return rc;
    int32_t last = (int32_t)((const argmax_priv *)ctx->priv_data)->last;
    const nnp_op_cl_arg select_last[] = {{sizeof last, &last}};
    return nnp_op_cl_run_axis(ctx, &in[0], &out[0], &l, select_last, 1);
}

/* ---- the library ---------------------------------------------------------------------------- */
/* ArgMax is a standard op: NNP_OP_OVERRIDES_STANDARD says that replacing it is meant */
static const nnp_custom_op argmax_cpu = {NNP_CUSTOM_OP_HEAD(NNP_OP_TARGET_CPU, "ArgMax"),
                                         .init = argmax_init,
                                         .compute = argmax_compute,
                                         .destroy = nnp_op_destroy_priv,
                                         .shape_infer = argmax_shape_infer,
                                         .flags = NNP_OP_OVERRIDES_STANDARD};
static const nnp_custom_op argmax_gpu = {NNP_CUSTOM_OP_HEAD(NNP_OP_TARGET_GPU, "ArgMax"),
                                         NNP_OP_EMBEDDED_CL("argmax_f32", argmax_cl),
                                         .init = argmax_init,
                                         .compute = argmax_gpu_compute,
                                         .destroy = nnp_op_destroy_priv,
                                         .shape_infer = argmax_shape_infer,
                                         .flags = NNP_OP_OVERRIDES_STANDARD};

static const nnp_custom_op *const ops[] = {&argmax_cpu, &argmax_gpu};
NNP_OP_LIBRARY_ENTRY("nnplug-ops-argmax", ops)
