/* Per-channel affine (BatchNormalization in inference, and the planner's merged BN/Mul/Add
 * chains), BatchNormalization in training mode (batch statistics, updated running mean and
 * variance), Softmax, LogSoftmax and LayerNormalization. */
#include "nnc.h"
#include "ops.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

typedef struct {
    int64_t C;
    float *scale, *shift; /* NULL until known (BN with statistics given at run time) */
    float eps;
    int training;         /* BN training_mode = 1: statistics of the batch */
    float momentum;
} affine_state;

/* The destroy of an op whose state is one allocation (RMS, Softmax, LayerNormalization). */
static void free_state(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static void affine_destroy(nnc_node *n)
{
    affine_state *s = n->state;
    if (!s) return;
    nnc_free(s->scale);
    nnc_free(s->shift);
    free(s);
    n->state = NULL;
}

int nnc_channel_affine_init(nnc_node *n, int64_t C, const float *scale, const float *shift)
{
    affine_state *s = calloc(1, sizeof *s);
    if (!s) return NNC_ERR;
    s->C = C;
    s->scale = nnc_alloc((size_t)C * sizeof(float));
    s->shift = nnc_alloc((size_t)C * sizeof(float));
    if (!s->scale || !s->shift) {
        n->state = s;
        affine_destroy(n);
        return NNC_ERR;
    }
    for (int64_t c = 0; c < C; c++) {
        s->scale[c] = scale ? scale[c] : 1.f;
        s->shift[c] = shift ? shift[c] : 0.f;
    }
    n->state = s;
    return NNC_OK;
}

void nnc_channel_affine_fold(nnc_node *n, const float *scale, const float *shift)
{
    affine_state *s = n->state;
    for (int64_t c = 0; c < s->C; c++) {
        float a = scale ? scale[c] : 1.f, b = shift ? shift[c] : 0.f;
        s->scale[c] *= a;
        s->shift[c] = s->shift[c] * a + b;
    }
}

int nnc_bn_affine(const nnc_node *n, int64_t C, float *scale, float *shift)
{
    const affine_state *s = n->state;
    if (!s || !s->scale || s->C != C || s->training) return 0;
    memcpy(scale, s->scale, (size_t)C * sizeof(float));
    memcpy(shift, s->shift, (size_t)C * sizeof(float));
    return 1;
}

static void bn_params(int64_t C, float eps, const float *g, const float *b, const float *m,
                      const float *v, float *scale, float *shift)
{
    for (int64_t c = 0; c < C; c++) {
        float sc = g[c] / sqrtf(v[c] + eps);
        scale[c] = sc;
        shift[c] = b[c] - m[c] * sc;
    }
}

static int bn_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    for (int i = 0; i < 5; i++) TRY(nnc_check_dtype(n, i, f32, e));
    if (n->nin != 5) return nnc_node_fail(e, n, "needs 5 inputs, got %d", n->nin);
    int64_t tm = 0;
    TRY(nnc_attr_int(n, "training_mode", 0, &tm, e));
    if (tm && n->opset < 14)
        return nnc_node_fail(e, n, "attribute 'training_mode' exists from opset 14 on");
    if (tm && n->nout > 3)
        return nnc_node_fail(e, n,
                             "has %d outputs; in training mode BatchNormalization-%d has at most 3 "
                             "(Y, running_mean, running_var)",
                             n->nout, n->opset);
    if (!tm)
        for (int i = 1; i < n->nout; i++)
            if (n->out[i] >= 0)
                return nnc_node_unsup(
                    e, n,
                    "outputs beyond Y are given only in training mode (opset 14 on: "
                    "training_mode = 1); before opset 14 they are not supported");
    if (n->opset < 9) {
        int64_t spatial;
        TRY(nnc_attr_int(n, "spatial", 1, &spatial, e));
        if (!spatial) return nnc_node_unsup(e, n, "spatial = 0 is not supported");
    }
    affine_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(nnc_attr_float(n, "epsilon", 1e-5f, &s->eps, e));
    TRY(nnc_attr_float(n, "momentum", 0.9f, &s->momentum, e));
    s->training = tm != 0;
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0 && x->ndim < 2)
        return nnc_node_fail(e, n, "input must have rank 2 or more");
    int64_t C = x && x->ndim >= 2 ? x->dims[1] : -1;
    for (int i = 1; i < 5; i++) {
        const nnc_valinfo *p = n->vin[i];
        int64_t k = nnc_info_numel(p);
        if (p && p->ndim >= 0 && p->ndim != 1)
            return nnc_node_fail(e, n, "input %d must be 1-D, got rank %d", i, p->ndim);
        if (C >= 0 && k >= 0 && k != C)
            return nnc_node_fail(e, n, "input %d has %lld values for %lld channels", i,
                                 (long long)k, (long long)C);
    }
    int all_const = !s->training;
    for (int i = 1; i < 5; i++) all_const &= nnc_in_const(n, i) && nnc_in_static(n, i);
    if (all_const) {
        s->C = nnc_info_numel(n->vin[1]);
        for (int i = 2; i < 5; i++)
            if (nnc_info_numel(n->vin[i]) != s->C)
                return nnc_node_fail(e, n, "parameter sizes differ");
        s->scale = nnc_alloc((size_t)s->C * sizeof(float));
        s->shift = nnc_alloc((size_t)s->C * sizeof(float));
        if (!s->scale || !s->shift) return nnc_node_fail(e, n, "out of memory");
        bn_params(s->C, s->eps, n->vin[1]->const_data, n->vin[2]->const_data, n->vin[3]->const_data,
                  n->vin[4]->const_data, s->scale, s->shift);
    }
    return NNC_OK;
}

static int affine_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const affine_state *s = n->state;
    const nnc_tensor *x = in[0];
    if (x->dtype != DT_F32) return nnc_node_fail(e, n, "input must be float32");
    if (x->ndim < 2) return nnc_node_fail(e, n, "input must have rank 2 or more");
    int64_t C = x->dims[1];
    if (s->scale && s->C != C)
        return nnc_node_fail(e, n, "input has %lld channels, parameters have %lld", (long long)C,
                             (long long)s->C);
    if (!s->scale)
        for (int i = 1; i < 5 && i < n->nin; i++)
            if (in[i]->dtype != DT_F32 || nnc_numel(in[i]) != C)
                return nnc_node_fail(e, n, "input %d must have %lld float32 values", i,
                                     (long long)C);
    *out = *x;
    for (int j = 1; j < n->nout; j++) { /* training mode: running mean and variance, [C] */
        out[j].dtype = DT_F32;
        out[j].ndim = 1;
        out[j].dims[0] = C;
        out[j].data = NULL;
    }
    return NNC_OK;
}

typedef struct {
    const float *x;
    float *y;
    const float *sc, *sh;
    int64_t C, sp;
    const nnc_act *act;
} aff_job;

static void aff_planes(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    aff_job *j = arg;
    for (int64_t p = b; p < e; p++) {
        int64_t c = p % j->C;
        const float *x = j->x + p * j->sp;
        float *y = j->y + p * j->sp;
        float a = j->sc[c], bb = j->sh[c];
        switch (j->act->kind) {
        case ACT_RELU:
            for (int64_t i = 0; i < j->sp; i++) {
                float v = x[i] * a + bb;
                y[i] = v > 0.f ? v : 0.f;
            }
            break;
        default:
            for (int64_t i = 0; i < j->sp; i++) y[i] = x[i] * a + bb;
            nnc_apply_act(y, j->sp, j->act);
        }
    }
}

static int affine_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    const affine_state *s = n->state;
    const nnc_tensor *x = in[0];
    aff_job j = {x->data, out->data, s->scale, s->shift, x->dims[1], 1, &n->act};
    for (int i = 2; i < x->ndim; i++) j.sp *= x->dims[i];
    float *tmp = NULL;
    if (s->training) {
        /* batch mean and (biased) variance per channel in double; Y uses them, the running
         * statistics blend them with the inputs' by momentum, as the ONNX reference does */
        int64_t N = x->dims[0], C = j.C, sp = j.sp;
        tmp = nnc_alloc((size_t)(2 * C) * sizeof(float));
        if (!tmp) return nnc_node_fail(e, n, "out of memory");
        const float *xd = x->data, *g = in[1]->data, *b = in[2]->data, *rm = in[3]->data,
                    *rv = in[4]->data;
        for (int64_t c = 0; c < C; c++) {
            double sum = 0, sq = 0, cnt = (double)(N * sp);
            for (int64_t i = 0; i < N; i++) {
                const float *p = xd + (i * C + c) * sp;
                for (int64_t k = 0; k < sp; k++) sum += p[k];
            }
            double mean = cnt > 0 ? sum / cnt : 0;
            for (int64_t i = 0; i < N; i++) {
                const float *p = xd + (i * C + c) * sp;
                for (int64_t k = 0; k < sp; k++) {
                    double d = p[k] - mean;
                    sq += d * d;
                }
            }
            double var = cnt > 0 ? sq / cnt : 0;
            double sc = g[c] / sqrt(var + (double)s->eps);
            tmp[c] = (float)sc;
            tmp[C + c] = (float)(b[c] - mean * sc);
            if (n->nout > 1 && out[1].data)
                ((float *)out[1].data)[c] =
                    (float)(rm[c] * (double)s->momentum + mean * (1.0 - (double)s->momentum));
            if (n->nout > 2 && out[2].data)
                ((float *)out[2].data)[c] =
                    (float)(rv[c] * (double)s->momentum + var * (1.0 - (double)s->momentum));
        }
        j.sc = tmp;
        j.sh = tmp + C;
    } else if (!s->scale) {
        tmp = nnc_alloc((size_t)(2 * j.C) * sizeof(float));
        if (!tmp) return nnc_node_fail(e, n, "out of memory");
        bn_params(j.C, s->eps, in[1]->data, in[2]->data, in[3]->data, in[4]->data, tmp, tmp + j.C);
        j.sc = tmp;
        j.sh = tmp + j.C;
    }
    nnc_parallel_for(x->dims[0] * j.C, 1 + 16384 / (j.sp ? j.sp : 1), aff_planes, &j);
    nnc_free(tmp);
    return NNC_OK;
}

static int bn_owns(const nnc_node *n, int i)
{
    const affine_state *s = n->state;
    return s && s->scale && i >= 1;
}

const nnc_op nnc_op_batchnorm = {
    "BatchNormalization", 5, 5,    1,      5, bn_create, affine_infer, affine_run,
    affine_destroy,       0, NULL, bn_owns};
const nnc_op nnc_op_channel_affine = {"ChannelAffine", 1, 1, 1, 1, NULL, affine_infer, affine_run,
                                      affine_destroy,  0};

/* ---- RMS normalization: the planner's replacement for the exported chain ---------------
 * T5's and Llama's Pow(x, 2) -> ReduceMean(last axis) -> Add(eps) -> Sqrt -> Div(1, .) ->
 * Mul(x, .) [-> Mul(weight, .)] (graph.c fuse_rms_norm) as one pass over each row: the mean of
 * the squares summed in double, then eps added, the square root and the reciprocal taken in
 * float32, x times it, then the weight times that, as the nodes compute them. Inputs: x, and
 * the weight (1-D, the row's length) or none. */
typedef struct {
    float eps;
} rms_state;

int nnc_rms_norm_init(nnc_node *n, float eps)
{
    rms_state *s = calloc(1, sizeof *s);
    if (!s) return 0;
    if (n->op && n->op->destroy) n->op->destroy(n);
    n->state = s;
    n->op = &nnc_op_rms_norm;
    s->eps = eps;
    return 1;
}

static int rms_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const nnc_tensor *x = in[0];
    if (x->dtype != DT_F32 || x->ndim < 1)
        return nnc_node_fail(e, n, "the normalized input must be float32 of rank 1 or more");
    if (n->nin > 1 && in[1] && (in[1]->dtype != DT_F32 || nnc_numel(in[1]) != x->dims[x->ndim - 1]))
        return nnc_node_fail(e, n,
                             "the weight must be float32 with one value per element of a row");
    *out = *x;
    return NNC_OK;
}

typedef struct {
    const float *x, *w;
    float *y;
    int64_t len;
    float eps;
} rms_job;

MULTIVERSION
static void scale_row(const float *x, const float *w, float inv, float *y, int64_t n)
{
    if (w)
        for (int64_t k = 0; k < n; k++) y[k] = w[k] * (x[k] * inv);
    else
        for (int64_t k = 0; k < n; k++) y[k] = x[k] * inv;
}

static void rms_rows(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const rms_job *j = arg;
    for (int64_t r = b; r < e; r++) {
        const float *x = j->x + r * j->len;
        float ms = (float)(nnc_row_sq_dev(x, j->len, 0.0) / (double)j->len);
        float inv = 1.f / sqrtf(ms + j->eps);
        scale_row(x, j->w, inv, j->y + r * j->len, j->len);
    }
}

static int rms_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    (void)e;
    const rms_state *s = n->state;
    int64_t len = in[0]->dims[in[0]->ndim - 1], rows = len ? nnc_numel(in[0]) / len : 0;
    rms_job j = {in[0]->data, n->nin > 1 && in[1] ? in[1]->data : NULL, out->data, len, s->eps};
    nnc_parallel_for(rows, 1 + 4096 / (len ? len : 1), rms_rows, &j);
    return NNC_OK;
}

const nnc_op nnc_op_rms_norm = {"RMSNormChain", 1,         2,       1,          1,
                                NULL,           rms_infer, rms_run, free_state, 0};

/* ---- Softmax / LogSoftmax ------------------------------------------------------------ */

typedef struct {
    int64_t axis;
    int legacy;
    int log;
} sm_state;

static int sm_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    TRY(nnc_check_dtype(n, 0, f32, e));
    sm_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->legacy = n->opset > 0 && n->opset < 13;
    s->log = !strcmp(n->op_type, "LogSoftmax");
    TRY(nnc_attr_int(n, "axis", s->legacy ? 1 : -1, &s->axis, e));
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0) {
        int r = x->ndim;
        if (s->axis < -r || s->axis >= (r ? r : 1))
            return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                                 (long long)s->axis, r);
    }
    return NNC_OK;
}

int nnc_softmax_last_axis(const nnc_node *n, int rank)
{
    const sm_state *s = n->state;
    if (!s || s->log || rank < 1) return 0;
    /* before opset 13 the axes from `axis` on are one: the last alone when it is the last */
    return s->axis == -1 || s->axis == rank - 1;
}

static int sm_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const sm_state *s = n->state;
    if (in[0]->dtype != DT_F32) return nnc_node_fail(e, n, "input must be float32");
    int r = in[0]->ndim;
    if (s->axis < -r || s->axis >= (r ? r : 1))
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)s->axis, r);
    *out = *in[0];
    return NNC_OK;
}

typedef struct {
    const float *x;
    float *y;
    int64_t len, inner;
    int log;
} sm_job;

/* The largest of x[0..n) (NaN skipped, as x > m is false for it), over 16 lanes of GCC's
 * vector type: gcc kept the lanes of a float[8] in eight scalar registers (a fifth of a
 * softmax's time). A maximum is exact, so the lanes' order does not change the answer. */
typedef float v16sf __attribute__((vector_size(64)));
typedef int32_t v16si __attribute__((vector_size(64)));

MULTIVERSION
static float row_max(const float *x, int64_t n)
{
    v16sf lm;
    for (int l = 0; l < 16; l++) lm[l] = -INFINITY;
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        v16sf v;
        memcpy(&v, x + k, sizeof v);
        v16si gt = v > lm;
        lm = (v16sf)(((v16si)v & gt) | ((v16si)lm & ~gt));
    }
    float m = -INFINITY;
    for (int l = 0; l < 16; l++) m = lm[l] > m ? lm[l] : m;
    for (; k < n; k++) m = x[k] > m ? x[k] : m;
    return m;
}

MULTIVERSION
static void sub_scalar(const float *x, float m, float *y, int64_t n)
{
    for (int64_t k = 0; k < n; k++) y[k] = x[k] - m;
}

MULTIVERSION
static void mul_scalar(float *y, float s, int64_t n)
{
    for (int64_t k = 0; k < n; k++) y[k] *= s;
}

/* A contiguous row's softmax with its max m: exp(x - m) by the vectorised exp, the sum in
 * double, times its reciprocal; y may be x. */
static void softmax_row(const float *x, float m, float *y, int64_t len)
{
    sub_scalar(x, m, y, len);
    nnc_vexp(y, y, len);
    mul_scalar(y, (float)(1.0 / nnc_row_sum(y, len)), len);
}

void nnc_softmax_row(float *x, int64_t len)
{
    softmax_row(x, row_max(x, len), x, len);
}

static void sm_rows(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    sm_job *j = arg;
    for (int64_t r = b; r < e; r++) {
        int64_t o = r / j->inner, i = r % j->inner;
        const float *x = j->x + o * j->len * j->inner + i;
        float *y = j->y + o * j->len * j->inner + i;
        int64_t st = j->inner;
        float m = -INFINITY;
        if (st == 1) m = row_max(x, j->len);
        else
            for (int64_t k = 0; k < j->len; k++) m = x[k * st] > m ? x[k * st] : m;
        double sum = 0;
        if (st == 1 && !j->log) { /* contiguous rows (the usual last-axis softmax) */
            softmax_row(x, m, y, j->len);
        } else if (st == 1) { /* LogSoftmax of a contiguous row: vectorised exp */
            sub_scalar(x, m, y, j->len);
            nnc_vexp(y, y, j->len);
            sum = nnc_row_sum(y, j->len);
            float ls = (float)log(sum);
            for (int64_t k = 0; k < j->len; k++) y[k] = x[k] - m - ls;
        } else if (j->log) {
            for (int64_t k = 0; k < j->len; k++) sum += expf(x[k * st] - m);
            float ls = (float)log(sum);
            for (int64_t k = 0; k < j->len; k++) y[k * st] = x[k * st] - m - ls;
        } else {
            for (int64_t k = 0; k < j->len; k++) {
                float v = expf(x[k * st] - m);
                y[k * st] = v;
                sum += v;
            }
            float inv = (float)(1.0 / sum);
            for (int64_t k = 0; k < j->len; k++) y[k * st] *= inv;
        }
    }
}

static int sm_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    (void)e;
    const sm_state *s = n->state;
    const nnc_tensor *x = in[0];
    int r = x->ndim;
    int axis = (int)(s->axis < 0 ? s->axis + r : s->axis);
    int64_t outer = 1, len = 1, inner = 1;
    for (int d = 0; d < r; d++) {
        if (d < axis) outer *= x->dims[d];
        else if (d == axis || s->legacy) len *= x->dims[d];
        else inner *= x->dims[d];
    }
    sm_job j = {x->data, out->data, len, inner, s->log};
    nnc_parallel_for(outer * inner, 1 + 4096 / (len ? len : 1), sm_rows, &j);
    return NNC_OK;
}

const nnc_op nnc_op_softmax = {"Softmax", 1, 1, 1, 1, sm_create, sm_infer, sm_run, free_state, 0};
const nnc_op nnc_op_logsoftmax = {"LogSoftmax", 1,        1,      1,          1,
                                  sm_create,    sm_infer, sm_run, free_state, 0};

/* ---- LayerNormalization -------------------------------------------------------------- */

typedef struct {
    int64_t axis;
    float eps;
} ln_state;

static int ln_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    for (int i = 0; i < n->nin; i++) TRY(nnc_check_dtype(n, i, f32, e));
    ln_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(nnc_attr_int(n, "axis", -1, &s->axis, e));
    TRY(nnc_attr_float(n, "epsilon", 1e-5f, &s->eps, e));
    int64_t st;
    TRY(nnc_attr_int(n, "stash_type", 1, &st, e));
    if (st != 1)
        return nnc_node_unsup(e, n, "stash_type %lld is not supported (only 1, float32)",
                              (long long)st);
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0 && (s->axis < -x->ndim || s->axis >= x->ndim))
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)s->axis, x->ndim);
    return NNC_OK;
}

static int ln_axis(const ln_state *s, const nnc_tensor *x)
{
    return (int)(s->axis < 0 ? s->axis + x->ndim : s->axis);
}

/* Scale/B must broadcast (unidirectionally) to the normalized shape x.dims[axis:]. */
static int ln_param_ok(const nnc_tensor *p, const nnc_tensor *x, int axis)
{
    int nn = x->ndim - axis;
    if (p->ndim > nn) return 0;
    for (int d = 0; d < p->ndim; d++) {
        int64_t want = x->dims[x->ndim - p->ndim + d];
        if (p->dims[d] != want && p->dims[d] != 1) return 0;
    }
    return 1;
}

static int ln_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const ln_state *s = n->state;
    const nnc_tensor *x = in[0];
    if (x->dtype != DT_F32) return nnc_node_fail(e, n, "input must be float32");
    if (s->axis < -x->ndim || s->axis >= x->ndim)
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)s->axis, x->ndim);
    int axis = ln_axis(s, x);
    for (int i = 1; i < n->nin; i++)
        if (in[i] && (in[i]->dtype != DT_F32 || !ln_param_ok(in[i], x, axis)))
            return nnc_node_fail(e, n, "input %d does not broadcast to the normalized shape", i);
    out[0] = *x;
    for (int k = 1; k < n->nout && k < 3; k++) {
        out[k] = *x;
        for (int d = axis; d < x->ndim; d++) out[k].dims[d] = 1;
    }
    return NNC_OK;
}

typedef struct {
    const float *x, *g, *b;
    float *y, *mean, *inv;
    int64_t len, eps_dummy;
    float eps;
    const nnc_tensor *gt, *bt;
    int64_t glen, blen;
} ln_job;

MULTIVERSION
static void ln_affine(const float *x, float m, float inv, const float *g, const float *bb, float *y,
                      int64_t n)
{
    if (bb)
        for (int64_t k = 0; k < n; k++) y[k] = (x[k] - m) * inv * g[k] + bb[k];
    else
        for (int64_t k = 0; k < n; k++) y[k] = (x[k] - m) * inv * g[k];
}

static void ln_rows(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ln_job *j = arg;
    for (int64_t r = b; r < e; r++) {
        const float *x = j->x + r * j->len;
        float *y = j->y + r * j->len;
        double mu = nnc_row_sum(x, j->len) / (double)j->len;
        double sq = nnc_row_sq_dev(x, j->len, mu);
        /* stash_type 1 makes stage one float32: its sum of squared deviations overflows to
         * inf past FLT_MAX, and InvStdDev is then 0 (as in onnxruntime and the reference) */
        float inv = sq > FLT_MAX ? 0.f : (float)(1.0 / sqrt(sq / (double)j->len + j->eps));
        float m = (float)mu;
        if (j->glen == j->len && (!j->b || j->blen == j->len)) { /* the usual case: no modulo */
            ln_affine(x, m, inv, j->g, j->b, y, j->len);
        } else {
            for (int64_t k = 0; k < j->len; k++) {
                float v = (x[k] - m) * inv * j->g[k % j->glen];
                y[k] = j->b ? v + j->b[k % j->blen] : v;
            }
        }
        if (j->mean) j->mean[r] = m;
        if (j->inv) j->inv[r] = inv;
    }
}

static int ln_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    const ln_state *s = n->state;
    const nnc_tensor *x = in[0];
    int axis = ln_axis(s, x);
    ln_job j;
    memset(&j, 0, sizeof j);
    j.x = x->data;
    j.y = out[0].data;
    j.len = 1;
    for (int d = axis; d < x->ndim; d++) j.len *= x->dims[d];
    int64_t rows = nnc_numel(x) / (j.len ? j.len : 1);
    j.eps = s->eps;
    /* Expand Scale/B to the normalized length only when they broadcast inside it. */
    float *tmp = NULL;
    const nnc_tensor *params[2] = {in[1], n->nin > 2 ? in[2] : NULL};
    const float *pp[2] = {NULL, NULL};
    int64_t plen[2] = {1, 1};
    for (int k = 0; k < 2; k++) {
        if (!params[k]) continue;
        int64_t pk = nnc_numel(params[k]);
        if (pk == j.len || pk == 1) {
            pp[k] = params[k]->data;
            plen[k] = pk;
            continue;
        }
        if (!tmp) tmp = nnc_alloc((size_t)(2 * j.len) * sizeof(float));
        if (!tmp) return nnc_node_fail(e, n, "out of memory");
        float *dst = tmp + k * j.len;
        /* broadcast: index each normalized element into the parameter */
        for (int64_t i = 0; i < j.len; i++) {
            int64_t rem = i, off = 0, st = 1;
            for (int d = x->ndim - 1; d >= axis; d--) {
                int64_t idx = rem % x->dims[d];
                rem /= x->dims[d];
                int pd = d - (x->ndim - params[k]->ndim);
                if (pd >= 0) {
                    if (params[k]->dims[pd] != 1) off += idx * st;
                    st *= params[k]->dims[pd];
                }
            }
            dst[i] = ((const float *)params[k]->data)[off];
        }
        pp[k] = dst;
        plen[k] = j.len;
    }
    j.g = pp[0];
    j.glen = plen[0];
    j.b = pp[1];
    j.blen = plen[1];
    j.mean = n->nout > 1 && n->out[1] >= 0 ? out[1].data : NULL;
    j.inv = n->nout > 2 && n->out[2] >= 0 ? out[2].data : NULL;
    nnc_parallel_for(rows, 1 + 4096 / (j.len ? j.len : 1), ln_rows, &j);
    nnc_free(tmp);
    return NNC_OK;
}

const nnc_op nnc_op_layernorm = {"LayerNormalization", 2, 3, 1, 3, ln_create, ln_infer, ln_run,
                                 free_state,           0};
