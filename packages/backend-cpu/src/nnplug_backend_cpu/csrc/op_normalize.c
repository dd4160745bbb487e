/* InstanceNormalization, GroupNormalization (per-group parameters before opset 21, per-channel
 * from 21) and LpNormalization (p = 1 or 2, float32 and float64). Statistics are accumulated
 * in double; parallel over the normalized groups. */
#include "nnc.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    float eps;
    int64_t groups;   /* GroupNormalization; InstanceNormalization: 0 (one group per channel) */
    int per_channel;  /* scale/bias have C values (else `groups` values) */
    int64_t axis, p;  /* LpNormalization */
} nm_state;

static void nm_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int in_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    for (int i = 0; i < 3; i++) TRY(nnc_check_dtype(n, i, f32, e));
    nm_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(nnc_attr_float(n, "epsilon", 1e-5f, &s->eps, e));
    s->per_channel = 1;
    if (!strcmp(n->op_type, "GroupNormalization")) {
        TRY(nnc_attr_int(n, "num_groups", -1, &s->groups, e));
        if (s->groups < 1)
            return nnc_node_fail(e, n, "attribute 'num_groups' is required and must be positive");
        int64_t st;
        TRY(nnc_attr_int(n, "stash_type", 1, &st, e));
        if (st != 1)
            return nnc_node_unsup(e, n, "stash_type %lld is not supported (only 1, float32)",
                                  (long long)st);
        s->per_channel = n->opset >= 21;
    }
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0 && x->ndim < 2)
        return nnc_node_fail(e, n, "the input must have rank 2 or more");
    if (x && x->ndim >= 2 && x->dims[1] >= 0 && s->groups && x->dims[1] % s->groups)
        return nnc_node_fail(e, n,
                             "attribute 'num_groups' = %lld does not divide the %lld channels",
                             (long long)s->groups, (long long)x->dims[1]);
    return NNC_OK;
}

static int in_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const nm_state *s = n->state;
    const nnc_tensor *x = in[0];
    if (x->dtype != DT_F32) return nnc_node_fail(e, n, "the input must be float32");
    if (x->ndim < 2) return nnc_node_fail(e, n, "the input must have rank 2 or more");
    int64_t C = x->dims[1];
    if (s->groups && C % s->groups)
        return nnc_node_fail(e, n,
                             "attribute 'num_groups' = %lld does not divide the %lld channels",
                             (long long)s->groups, (long long)C);
    int64_t want = s->per_channel ? C : s->groups;
    for (int i = 1; i < 3; i++)
        if (!in[i] || in[i]->dtype != DT_F32 || in[i]->ndim != 1 || in[i]->dims[0] != want)
            return nnc_node_fail(e, n, "input %d must be 1-D float32 with %lld values", i,
                                 (long long)want);
    *out = *x;
    return NNC_OK;
}

typedef struct {
    const float *x, *scale, *bias;
    float *y;
    int64_t C, cpg, sp; /* channels, channels per group, spatial size */
    int per_channel;
    float eps;
} in_job;

/* (x - mean) first, then the scale: folded into x * a + (bias - mean * a), a large mean cancels
 * in float32 (a constant channel of 1e4 gave 0, not the bias). x - mean is exact where x is
 * near the mean (Sterbenz). */
MULTIVERSION
static void in_affine(const float *x, float m, float a, float b, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) * a + b;
}

static void in_groups(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const in_job *j = arg;
    int64_t G = j->C / j->cpg, len = j->cpg * j->sp;
    for (int64_t t = b; t < e; t++) {
        int64_t g = t % G;
        const float *x = j->x + t * len;
        float *y = j->y + t * len;
        double mu = len ? nnc_row_sum(x, len) / (double)len : 0;
        double sq = nnc_row_sq_dev(x, len, mu);
        double inv = 1.0 / sqrt((len ? sq / (double)len : 0) + (double)j->eps);
        float muf = (float)mu;
        for (int64_t c = 0; c < j->cpg; c++) {
            int64_t pi = j->per_channel ? g * j->cpg + c : g;
            in_affine(x + c * j->sp, muf, (float)(inv * j->scale[pi]), j->bias[pi], y + c * j->sp,
                      j->sp);
        }
    }
}

static int in_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    (void)e;
    const nm_state *s = n->state;
    const nnc_tensor *x = in[0];
    in_job j = {x->data, in[1]->data, in[2]->data,    out->data, x->dims[1],
                1,       1,           s->per_channel, s->eps};
    for (int d = 2; d < x->ndim; d++) j.sp *= x->dims[d];
    if (s->groups) j.cpg = j.C / s->groups;
    if (j.C == 0) return NNC_OK;
    int64_t ngroups = x->dims[0] * (j.C / j.cpg), len = j.cpg * j.sp;
    nnc_parallel_for(ngroups, 1 + 8192 / (len ? len : 1), in_groups, &j);
    return NNC_OK;
}

const nnc_op nnc_op_instancenorm = {
    "InstanceNormalization", 3, 3, 1, 1, in_create, in_infer, in_run, nm_destroy, 0};
const nnc_op nnc_op_groupnorm = {"GroupNormalization", 3, 3, 1, 1, in_create, in_infer, in_run,
                                 nm_destroy,           0};

/* ---- LpNormalization ----------------------------------------------------------------- */

static int lp_create(nnc_node *n, nnc_err *e)
{
    static const int fl[] = {DT_F32, DT_F64, 0};
    TRY(nnc_check_dtype(n, 0, fl, e));
    nm_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(nnc_attr_int(n, "axis", -1, &s->axis, e));
    TRY(nnc_attr_int(n, "p", 2, &s->p, e));
    if (s->p != 1 && s->p != 2)
        return nnc_node_fail(e, n, "attribute 'p' must be 1 or 2, got %lld", (long long)s->p);
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0 && (s->axis < -x->ndim || s->axis >= (x->ndim ? x->ndim : 1)))
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)s->axis, x->ndim);
    return NNC_OK;
}

static int lp_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const nm_state *s = n->state;
    const nnc_tensor *x = in[0];
    if (x->dtype != DT_F32 && x->dtype != DT_F64)
        return nnc_node_fail(e, n, "the input must be float32 or float64");
    if (x->ndim < 1 || s->axis < -x->ndim || s->axis >= x->ndim)
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)s->axis, x->ndim);
    *out = *x;
    return NNC_OK;
}

typedef struct {
    const void *x;
    void *y;
    int64_t len, inner;
    int p, f64;
} lp_job;

static void lp_rows(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const lp_job *j = arg;
    for (int64_t r = b; r < e; r++) {
        int64_t o = r / j->inner, i = r % j->inner, base = o * j->len * j->inner + i;
        double acc = 0;
        for (int64_t k = 0; k < j->len; k++) {
            double v = j->f64 ? ((const double *)j->x)[base + k * j->inner]
                              : ((const float *)j->x)[base + k * j->inner];
            acc += j->p == 1 ? fabs(v) : v * v;
        }
        double norm = j->p == 1 ? acc : sqrt(acc);
        for (int64_t k = 0; k < j->len; k++) {
            int64_t q = base + k * j->inner;
            /* onnxruntime writes 0 where the norm is 0 */
            if (j->f64) ((double *)j->y)[q] = norm != 0 ? ((const double *)j->x)[q] / norm : 0.0;
            else ((float *)j->y)[q] = norm != 0 ? (float)(((const float *)j->x)[q] / norm) : 0.f;
        }
    }
}

static int lp_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    (void)e;
    const nm_state *s = n->state;
    const nnc_tensor *x = in[0];
    int axis = (int)(s->axis < 0 ? s->axis + x->ndim : s->axis);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    lp_job j = {x->data, out->data, x->dims[axis], inner, (int)s->p, x->dtype == DT_F64};
    nnc_parallel_for(outer * inner, 1 + 4096 / (j.len ? j.len : 1), lp_rows, &j);
    return NNC_OK;
}

const nnc_op nnc_op_lpnorm = {"LpNormalization", 1,        1,      1,          1,
                              lp_create,         lp_infer, lp_run, nm_destroy, 0};

/* ---- MeanVarianceNormalization ------------------------------------------------------- */

/* (x - mean) / (std + 1e-9) over `axes` (default 0, 2, 3): the ONNX function's formula, with the
 * variance taken as the mean squared deviation, two passes in double, where the function body's
 * E[x^2] - E[x]^2 cancels in float32 (a channel of mean 1 and spread 1e-3 came out 17% off). */

#define MVN_MAXAXES NNC_MAXDIM

typedef struct {
    int naxes;
    int64_t axes[MVN_MAXAXES];
} mvn_state;

static void mvn_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

/* Bit d set for each reduced dimension of a rank-r input; -1 with a message when an axis is
 * out of range or repeated. */
static int mvn_mask(const nnc_node *n, const mvn_state *s, int r, nnc_err *e)
{
    int mask = 0;
    for (int i = 0; i < s->naxes; i++) {
        int64_t a = s->axes[i] < 0 ? s->axes[i] + r : s->axes[i];
        if (a < 0 || a >= r) {
            nnc_node_fail(e, n,
                          "attribute 'axes' value %lld is out of range for an input of rank %d",
                          (long long)s->axes[i], r);
            return -1;
        }
        if (mask >> a & 1) {
            nnc_node_fail(e, n, "attribute 'axes' names axis %lld twice", (long long)a);
            return -1;
        }
        mask |= 1 << a;
    }
    return mask;
}

static int mvn_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    TRY(nnc_check_dtype(n, 0, f32, e));
    mvn_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(nnc_attr_ints(n, "axes", s->axes, MVN_MAXAXES, &s->naxes, e));
    if (s->naxes < 0) { /* the default */
        s->naxes = 3;
        s->axes[0] = 0, s->axes[1] = 2, s->axes[2] = 3;
    }
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0 && mvn_mask(n, s, x->ndim, e) < 0) return NNC_ERR;
    return NNC_OK;
}

static int mvn_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const nnc_tensor *x = in[0];
    if (x->dtype != DT_F32) return nnc_node_fail(e, n, "the input must be float32");
    if (mvn_mask(n, n->state, x->ndim, e) < 0) return NNC_ERR;
    *out = *x;
    return NNC_OK;
}

static int mvn_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    const nnc_tensor *x = in[0];
    int r = x->ndim, mask = mvn_mask(n, n->state, r, e);
    if (mask < 0) return NNC_ERR;
    /* an element's group: its index over the kept dimensions (gstride 0 on reduced ones) */
    int64_t gstride[NNC_MAXDIM], groups = 1, count = 1, total = nnc_numel(x);
    for (int d = r - 1; d >= 0; d--) {
        gstride[d] = mask >> d & 1 ? 0 : groups;
        if (mask >> d & 1) count *= x->dims[d];
        else groups *= x->dims[d];
    }
    if (!total) return NNC_OK;
    double *mean = calloc((size_t)groups * 2, sizeof *mean), *var = mean + groups;
    int64_t *gi = malloc((size_t)total * sizeof *gi);
    if (!mean || !gi) {
        free(mean);
        free(gi);
        return nnc_node_fail(e, n, "out of memory");
    }
    int64_t idx[NNC_MAXDIM] = {0}, g = 0;
    for (int64_t k = 0; k < total; k++) { /* an odometer over x's indices, row-major */
        gi[k] = g;
        for (int d = r - 1; d >= 0; d--) {
            g += gstride[d];
            if (++idx[d] < x->dims[d]) break;
            g -= gstride[d] * x->dims[d];
            idx[d] = 0;
        }
    }
    const float *xs = x->data;
    float *y = out->data;
    for (int64_t k = 0; k < total; k++) mean[gi[k]] += xs[k];
    for (int64_t q = 0; q < groups; q++) mean[q] /= (double)count;
    for (int64_t k = 0; k < total; k++) {
        double dv = xs[k] - mean[gi[k]];
        var[gi[k]] += dv * dv;
    }
    for (int64_t q = 0; q < groups; q++)
        var[q] = sqrt(var[q] / (double)count) + 1e-9; /* std + epsilon */
    for (int64_t k = 0; k < total; k++) y[k] = (float)((xs[k] - mean[gi[k]]) / var[gi[k]]);
    free(mean);
    free(gi);
    return NNC_OK;
}

const nnc_op nnc_op_meanvariancenormalization = {
    "MeanVarianceNormalization", 1, 1, 1, 1, mvn_create, mvn_infer, mvn_run, mvn_destroy, 0};
