/* cstSoftmax: y = exp(x - max) / sum(exp(x - max)) along `axis` (default -1, any rank,
 * negative axes count from the end). float32 in and out.
 *
 * CPU: numerically stable (max first), loops written so the compiler vectorises them (8-lane
 * partial accumulators, a branch-free polynomial exp), slices split across pthreads when the
 * tensor is large enough to pay for them. GPU: softmax.cl, embedded as a string at build time.
 *
 * NaN and infinity (same as numpy / onnx.reference): a NaN anywhere in a slice, a +inf in it,
 * or a slice of only -inf gives NaN for the whole slice; -inf elements of other slices give 0.
 */
#include <nnplug/op_library.h>

#include <stdlib.h>
#include <string.h>

#include "softmax_cl.h" /* generated from softmax.cl by the build hook (embed) */

#define LANES 8
#define MIN_PARALLEL_ELEMS (1 << 16) /* below this, threads cost more than they save */

typedef struct {
    int64_t axis; /* as given (may be negative) */
} softmax_priv;

/* ---- shapes ------------------------------------------------------------------------------ */
static int resolve_axis(nnp_op_context *ctx, int64_t axis, uint32_t rank, uint32_t *out)
{
    int64_t a = axis < 0 ? axis + (int64_t)rank : axis;
    if (rank == 0 || a < 0 || a >= (int64_t)rank) {
        ctx->set_error(ctx, "attribute axis is out of range for the input's rank "
                            "(use -rank..rank-1; rank must be >= 1)");
        return NNP_STATUS_INVALID_ARGUMENT;
    }
    *out = (uint32_t)a;
    return 0;
}

/* One float32 input, one output. */
static int check_io(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in, uint32_t n_out)
{
    int rc = nnp_op_check_io(ctx, in, n_in, n_out, 1, 1);
    if (!rc && !nnp_op_is_f32(in[0].attr.dtype))
        return nnp_op_fail(ctx, NNP_STATUS_UNSUPPORTED, "cstSoftmax supports float32 only");
    return rc;
}

static int32_t softmax_shape_infer(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                                   nnp_op_tensor *out, uint32_t n_out)
{
    int rc = check_io(ctx, in, n_in, n_out);
    if (rc) return rc;
    uint32_t axis;
    rc = resolve_axis(ctx, nnp_op_attr_int(ctx, "axis", -1), in[0].attr.n_dims, &axis);
    if (rc) return rc;
    out[0].attr.n_dims = in[0].attr.n_dims;
    memcpy(out[0].attr.dims, in[0].attr.dims, sizeof in[0].attr.dims);
    out[0].attr.dtype = in[0].attr.dtype;
    return 0;
}

static int32_t softmax_init(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                            const nnp_op_tensor *out, uint32_t n_out)
{
    (void)out;
    int rc = check_io(ctx, in, n_in, n_out);
    if (rc) return rc;
    nnp_attr a;
    int64_t axis = -1;
    if (ctx->get_attr(ctx, "axis", &a) == NNP_OK) {
        if (a.type != NNP_ATTR_INT || a.count != 1) {
            ctx->set_error(ctx, "attribute axis must be an int");
            return NNP_STATUS_INVALID_ARGUMENT;
        }
        axis = *(const int64_t *)a.data;
    }
    uint32_t resolved;
    rc = resolve_axis(ctx, axis, in[0].attr.n_dims, &resolved);
    if (rc) return rc;
    softmax_priv *p = malloc(sizeof *p);
    if (!p) return NNP_STATUS_OUT_OF_MEMORY;
    p->axis = axis;
    ctx->priv_data = p;
    return 0;
}

/* outer x axis_len x inner view of the actual input; checks the output matches. */
static int view(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                const nnp_op_tensor *out, uint32_t n_out, nnp_op_axis_view *l)
{
    int rc = check_io(ctx, in, n_in, n_out);
    if (rc) return rc;
    const softmax_priv *p = ctx->priv_data;
    uint32_t axis;
    rc = resolve_axis(ctx, p ? p->axis : -1, in[0].attr.n_dims, &axis);
    if (rc) return rc;
    *l = nnp_op_view_at_axis(&in[0], axis);
    uint64_t n = l->outer * l->axis_len * l->inner;
    if (in[0].attr.n_elems != n || out[0].attr.n_elems != n || in[0].mem.size < n * 4 ||
        out[0].mem.size < n * 4 || !nnp_op_is_f32(out[0].attr.dtype)) {
        ctx->set_error(ctx, "input/output sizes do not match");
        return NNP_STATUS_SHAPE_ERROR;
    }
    if (n && (!in[0].mem.base || !out[0].mem.base)) {
        ctx->set_error(ctx, "missing tensor memory");
        return NNP_STATUS_INVALID_ARGUMENT;
    }
    return 0;
}

/* ---- CPU kernel ---------------------------------------------------------------------------- */
/* exp for t <= 0 (NaN passes through, t > 0 is taken as 0), branch-free so loops over it vectorise. Cephes' expf
 * polynomial after range reduction; below -87.3 the result is flushed to 0. */
static inline float exp_nonpos(float t)
{
    const float lo = -87.3f;
    const int nan = t != t;
    float x = t < lo ? lo : (t > 0.0f || nan ? 0.0f : t); /* keep the int conversion defined */
    float fx = x * 1.44269504088896341f + 0.5f;
    int n = (int)fx;
    n -= (float)n > fx; /* floor */
    float fn = (float)n;
    x = x - fn * 0.693359375f + fn * 2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * x + 1.3981999507e-3f;
    y = y * x + 8.3334519073e-3f;
    y = y * x + 4.1665795894e-2f;
    y = y * x + 1.6666665459e-1f;
    y = y * x + 5.0000001201e-1f;
    y = y * x * x + x + 1.0f;
    union {
        uint32_t u;
        float f;
    } scale;
    scale.u = (uint32_t)(n + 127) << 23;
    float r = y * scale.f;
    return nan ? t : (t < lo ? 0.0f : r);
}

/* One contiguous slice (inner == 1). */
static void softmax_row(const float *restrict x, float *restrict y, uint64_t n)
{
    float acc[LANES];
    for (int j = 0; j < LANES; ++j) acc[j] = x[0];
    uint64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    float m = acc[0];
    for (int j = 1; j < LANES; ++j) m = acc[j] > m ? acc[j] : m;
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    float sums[LANES] = {0};
    for (i = 0; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; ++j) {
            float e = exp_nonpos(x[i + j] - m);
            y[i + j] = e;
            sums[j] += e;
        }
    float s = 0.0f;
    for (int j = 0; j < LANES; ++j) s += sums[j];
    for (; i < n; ++i) {
        float e = exp_nonpos(x[i] - m);
        y[i] = e;
        s += e;
    }
    float r = 1.0f / s;
    for (i = 0; i < n; ++i) y[i] *= r;
}

/* One outer index with inner > 1: vectorise across the inner (contiguous) dimension.
 * scratch: 2 * inner floats. */
static void softmax_strided(const float *restrict x, float *restrict y, uint64_t axis_len,
                            uint64_t inner, float *restrict scratch)
{
    float *restrict m = scratch;
    float *restrict s = scratch + inner;
    memcpy(m, x, inner * sizeof(float));
    for (uint64_t k = 1; k < axis_len; ++k) {
        const float *xk = x + k * inner;
        for (uint64_t i = 0; i < inner; ++i) m[i] = xk[i] > m[i] ? xk[i] : m[i];
    }
    for (uint64_t i = 0; i < inner; ++i) s[i] = 0.0f;
    for (uint64_t k = 0; k < axis_len; ++k) {
        const float *xk = x + k * inner;
        float *yk = y + k * inner;
        for (uint64_t i = 0; i < inner; ++i) {
            float e = exp_nonpos(xk[i] - m[i]);
            yk[i] = e;
            s[i] += e;
        }
    }
    for (uint64_t i = 0; i < inner; ++i) s[i] = 1.0f / s[i];
    for (uint64_t k = 0; k < axis_len; ++k) {
        float *yk = y + k * inner;
        for (uint64_t i = 0; i < inner; ++i) yk[i] *= s[i];
    }
}

/* The outer slices of one compute, shared by its threads. */
typedef struct {
    const float *x;
    float *y;
    nnp_op_axis_view l;
} job;

static void run_slices(void *arg, uint64_t begin, uint64_t end, void *scratch)
{
    const job *j = arg;
    const uint64_t slice = j->l.axis_len * j->l.inner;
    for (uint64_t o = begin; o < end; ++o) {
        if (j->l.inner == 1) softmax_row(j->x + o * slice, j->y + o * slice, j->l.axis_len);
        else
            softmax_strided(j->x + o * slice, j->y + o * slice, j->l.axis_len, j->l.inner, scratch);
    }
}

static int32_t softmax_compute(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                               const nnp_op_tensor *out, uint32_t n_out)
{
    nnp_op_axis_view l;
    int rc = view(ctx, in, n_in, out, n_out, &l);
    if (rc) return rc;
    uint64_t n = l.outer * l.axis_len * l.inner;
    if (n == 0) return 0;
    job j = {nnp_op_tensor_data(&in[0]), nnp_op_tensor_data(&out[0]), l};
    size_t scratch = l.inner > 1 ? 2 * l.inner * sizeof(float) : 0; /* softmax_strided's */
    return nnp_op_parallel_for(ctx, l.outer, n, MIN_PARALLEL_ELEMS, scratch, run_slices, &j);
}

/* ---- GPU ------------------------------------------------------------------------------------ */
static int32_t softmax_gpu_compute(nnp_op_context *ctx, const nnp_op_tensor *in, uint32_t n_in,
                                   const nnp_op_tensor *out, uint32_t n_out)
{
    nnp_op_axis_view l;
    int rc = view(ctx, in, n_in, out, n_out, &l);
    if (rc || l.outer * l.inner == 0 || l.axis_len == 0) return rc;
    return nnp_op_cl_run_axis(ctx, &in[0], &out[0], &l, NULL, 0);
}

/* ---- the library ---------------------------------------------------------------------------- */
static const nnp_custom_op softmax_cpu = {
    NNP_CUSTOM_OP_HEAD(NNP_OP_TARGET_CPU, "cstSoftmax"), .init = softmax_init,
    .compute = softmax_compute, .destroy = nnp_op_destroy_priv, .shape_infer = softmax_shape_infer};
static const nnp_custom_op softmax_gpu = {NNP_CUSTOM_OP_HEAD(NNP_OP_TARGET_GPU, "cstSoftmax"),
                                          NNP_OP_EMBEDDED_CL("cst_softmax", softmax_cl),
                                          .init = softmax_init,
                                          .compute = softmax_gpu_compute,
                                          .destroy = nnp_op_destroy_priv,
                                          .shape_infer = softmax_shape_infer};

static const nnp_custom_op *const ops[] = {&softmax_cpu, &softmax_gpu};
NNP_OP_LIBRARY_ENTRY("nnplug-ops-softmax", ops)
