/* ReduceSum/Mean/Max/Min/Prod/L2/SumSquare/L1/LogSumExp (float32; other types and ReduceLogSum
 * in op_reduce_typed.c) over any axes (attribute or input form), ArgMax
 * and ArgMin. The input is viewed as (outer, reduced, inner) runs after merging neighbours. */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

enum {
    R_SUM = NNC_R_SUM,
    R_MEAN = NNC_R_MEAN,
    R_MAX = NNC_R_MAX,
    R_MIN = NNC_R_MIN,
    R_PROD = NNC_R_PROD,
    R_L2 = NNC_R_L2,
    R_SUMSQ = NNC_R_SUMSQ,
    R_L1 = NNC_R_L1,
    R_LOGSUMEXP = NNC_R_LOGSUMEXP,
    R_LOGSUM = NNC_R_LOGSUM /* other types' path only */
};
typedef struct {
    int kind, keepdims, noop_empty, axes_input;
    int naxes; /* -1: all */
    int64_t axes[NNC_MAXDIM];
} red_state;

static const struct {
    const char *name;
    int kind;
    int input_since;
} RED_OPS[] = {
    {"ReduceSum", R_SUM, 13},
    {"ReduceMean", R_MEAN, 18},
    {"ReduceMax", R_MAX, 18},
    {"ReduceMin", R_MIN, 18},
    {"ReduceProd", R_PROD, 18},
    {"ReduceL2", R_L2, 18},
    {"ReduceSumSquare", R_SUMSQ, 18},
    {"ReduceL1", R_L1, 18},
    {"ReduceLogSumExp", R_LOGSUMEXP, 18},
    {"ReduceLogSum", R_LOGSUM, 18},
};

static int red_create(nnc_node *n, nnc_err *e)
{
    red_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int since = 0;
    s->kind = -1;
    for (size_t i = 0; i < sizeof RED_OPS / sizeof RED_OPS[0]; i++)
        if (!strcmp(RED_OPS[i].name, n->op_type)) {
            s->kind = RED_OPS[i].kind;
            since = RED_OPS[i].input_since;
        }
    if (s->kind < 0) return nnc_node_fail(e, n, "not a reduction");
    int dt = n->vin[0] ? n->vin[0]->dtype : DT_UNDEF;
    if (dt != DT_UNDEF && dt != DT_F32 && !nnc_reduce_typed_ok(s->kind, dt))
        return nnc_node_unsup(e, n, "element type %s is not supported", nnc_dtname(dt));
    int64_t v;
    TRY(nnc_attr_int(n, "keepdims", 1, &v, e));
    if (v != 0 && v != 1)
        return nnc_node_fail(e, n, "attribute 'keepdims' = %lld is not 0 or 1", (long long)v);
    s->keepdims = v != 0;
    TRY(nnc_attr_int(n, "noop_with_empty_axes", 0, &v, e));
    s->noop_empty = v != 0;
    s->axes_input = n->opset >= since;
    s->naxes = -1;
    if (!s->axes_input) {
        int c;
        TRY(nnc_attr_ints(n, "axes", s->axes, NNC_MAXDIM, &c, e));
        s->naxes = c;
    } else if (nnc_in_present(n, 1)) {
        static const int i64[] = {DT_I64, 0};
        TRY(nnc_check_dtype(n, 1, i64, e));
    }
    return NNC_OK;
}

/* Reduced-axis mask for x, or error. */
static int red_mask(nnc_node *n, nnc_tensor *const *in, int *mask, int *noop, nnc_err *e)
{
    const red_state *s = n->state;
    const nnc_tensor *x = in[0];
    int64_t axes[NNC_MAXDIM];
    int na = s->naxes;
    if (s->axes_input) {
        na = -1;
        if (n->nin > 1 && in[1]) TRY(nnc_read_ints(n, in[1], "axes", axes, NNC_MAXDIM, &na, e));
        if (na == 0) na = -1;
    } else if (na > 0) {
        memcpy(axes, s->axes, sizeof axes);
    }
    *noop = 0;
    if (na < 0 && s->noop_empty && s->axes_input) {
        *noop = 1;
        for (int d = 0; d < x->ndim; d++) mask[d] = 0;
        return NNC_OK;
    }
    if (na == 0 && !s->axes_input) na = -1;
    for (int d = 0; d < x->ndim; d++) mask[d] = na < 0;
    for (int i = 0; i < na; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + x->ndim : axes[i];
        if (a < 0 || a >= x->ndim)
            return nnc_node_fail(e, n, "axis %lld is out of range for rank %d", (long long)axes[i],
                                 x->ndim);
        mask[a] = 1;
    }
    return NNC_OK;
}

int nnc_reduce_mean_last(const nnc_node *n, int rank)
{
    const red_state *s = n->state;
    if (!s || s->kind != R_MEAN || !s->keepdims || rank < 1) return 0;
    int64_t axis;
    if (s->axes_input) {
        const nnc_valinfo *a = n->nin > 1 ? n->vin[1] : NULL;
        if (!a || !a->const_data || a->dtype != DT_I64 || nnc_info_numel(a) != 1) return 0;
        axis = *(const int64_t *)a->const_data;
    } else if (s->naxes == 1) {
        axis = s->axes[0];
    } else {
        return 0;
    }
    return axis == rank - 1 || axis == -1;
}

static int red_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const red_state *s = n->state;
    const nnc_tensor *x = in[0];
    if (x->dtype != DT_F32 && !nnc_reduce_typed_ok(s->kind, x->dtype))
        return nnc_node_fail(e, n, "element type %s is not supported", nnc_dtname(x->dtype));
    int mask[NNC_MAXDIM], noop;
    TRY(red_mask(n, in, mask, &noop, e));
    out->dtype = x->dtype;
    out->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!mask[d]) out->dims[out->ndim++] = x->dims[d];
        else if (s->keepdims) out->dims[out->ndim++] = 1;
    }
    return NNC_OK;
}

typedef struct {
    const float *x;
    float *y;
    int64_t R, I;
    int kind;
} red_job;

static void red_rows(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    red_job *j = arg;
    /* row = one (outer, inner) output element */
    for (int64_t r = b; r < e; r++) {
        int64_t o = r / j->I, i = r % j->I;
        const float *x = j->x + o * j->R * j->I + i;
        double acc;
        int k = j->kind;
        if (k == R_MAX) acc = -INFINITY;
        else if (k == R_MIN) acc = INFINITY;
        else if (k == R_PROD) acc = 1;
        else acc = 0;
        double mx = -INFINITY;
        if (k == R_LOGSUMEXP)
            for (int64_t t = 0; t < j->R; t++) mx = x[t * j->I] > mx ? x[t * j->I] : mx;
        for (int64_t t = 0; t < j->R; t++) {
            double v = x[t * j->I];
            switch (k) {
            case R_SUM:
            case R_MEAN: acc += v; break;
            case R_MAX: acc = v > acc || v != v ? v : acc; break;
            case R_MIN: acc = v < acc || v != v ? v : acc; break;
            case R_PROD: acc *= v; break;
            case R_L2:
            case R_SUMSQ: acc += v * v; break;
            case R_L1: acc += fabs(v); break;
            case R_LOGSUMEXP: acc += nnc_lse_term(v, mx); break;
            }
        }
        if (k == R_MEAN) acc = j->R ? acc / (double)j->R : NAN;
        /* the squares' sum past float32's range is inf in float32, as onnxruntime computes it */
        if (k == R_L2) acc = acc > FLT_MAX ? INFINITY : sqrt(acc);
        if (k == R_LOGSUMEXP) acc = nnc_lse_result(mx, acc, j->R);
        j->y[r] = (float)acc;
    }
}

/* Reduce over one block of consecutive axes [a0, a1) of a tensor viewed as dims. */
static void reduce_block(const float *x, float *y, const int64_t *dims, int nd, int a0, int a1,
                         int kind)
{
    red_job j;
    int64_t O = 1, R = 1, I = 1;
    for (int d = 0; d < nd; d++) {
        if (d < a0) O *= dims[d];
        else if (d < a1) R *= dims[d];
        else I *= dims[d];
    }
    j.x = x;
    j.y = y;
    j.R = R;
    j.I = I;
    j.kind = kind;
    nnc_parallel_for(O * I, 1 + 4096 / (R ? R : 1), red_rows, &j);
}

static int red_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    const red_state *s = n->state;
    const nnc_tensor *x = in[0];
    int mask[NNC_MAXDIM], noop;
    TRY(red_mask(n, in, mask, &noop, e));
    if (noop) {
        memcpy(out->data, x->data, nnc_nbytes(x));
        return NNC_OK;
    }
    if (x->dtype != DT_F32 || s->kind == R_LOGSUM)
        return nnc_reduce_typed_run(n, s->kind, mask, x, out, e);
    /* Merge neighbouring axes with the same mask into runs. */
    int64_t dims[NNC_MAXDIM];
    int rm[NNC_MAXDIM], nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (x->dims[d] == 1 && x->ndim > 1) continue;
        if (nd && rm[nd - 1] == mask[d]) dims[nd - 1] *= x->dims[d];
        else {
            dims[nd] = x->dims[d];
            rm[nd] = mask[d];
            nd++;
        }
    }
    int nred = 0;
    for (int d = 0; d < nd; d++) nred += rm[d];
    if (nd == 0 || nred == 0) {
        /* nothing left to reduce: copy, or apply the per-element part (L2/SumSquare/...) */
        int64_t k = nnc_numel(x);
        reduce_block(x->data, out->data, &k, 1, 1, 1, s->kind);
        return NNC_OK;
    }
    if (nred == 1) {
        int a = 0;
        while (!rm[a]) a++;
        reduce_block(x->data, out->data, dims, nd, a, a + 1, s->kind);
        return NNC_OK;
    }
    /* Several separated reduced runs: reduce one run at a time into scratch. Sum-like kinds
     * compose; Mean/L2/LogSumExp are expressed through their composable part. */
    int first = s->kind, last = s->kind;
    if (s->kind == R_MEAN) first = last = R_SUM;
    if (s->kind == R_L2) {
        first = R_SUMSQ;
        last = R_SUM;
    }
    if (s->kind == R_SUMSQ) {
        first = R_SUMSQ;
        last = R_SUM;
    }
    if (s->kind == R_L1) {
        first = R_L1;
        last = R_SUM;
    }
    if (s->kind == R_LOGSUMEXP)
        return nnc_reduce_typed_run(n, s->kind, mask, x, out, e); /* in double */
    int64_t total = nnc_numel(x), count = 1;
    for (int d = 0; d < nd; d++)
        if (rm[d]) count *= dims[d];
    float *buf[2] = {nnc_alloc((size_t)total * sizeof(float)),
                     nnc_alloc((size_t)total * sizeof(float))};
    if (!buf[0] || !buf[1]) {
        nnc_free(buf[0]);
        nnc_free(buf[1]);
        return nnc_node_fail(e, n, "out of memory");
    }
    const float *src = x->data;
    int cur = 0, kind = first;
    for (int d = nd - 1; d >= 0; d--) {
        if (!rm[d]) continue;
        reduce_block(src, buf[cur], dims, nd, d, d + 1, kind);
        dims[d] = 1;
        src = buf[cur];
        cur ^= 1;
        kind = last;
    }
    int64_t k = nnc_numel(out);
    float *y = out->data;
    for (int64_t i = 0; i < k; i++) {
        float v = src[i];
        if (s->kind == R_MEAN) v /= (float)count;
        if (s->kind == R_L2) v = sqrtf(v);
        y[i] = v;
    }
    nnc_free(buf[0]);
    nnc_free(buf[1]);
    return NNC_OK;
}

static void red_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}
#define REDOP(VAR, NAME) \
    const nnc_op VAR = {NAME, 1, 2, 1, 1, red_create, red_infer, red_run, red_destroy, 0};
REDOP(nnc_op_reducesum, "ReduceSum")
REDOP(nnc_op_reducemean, "ReduceMean")
REDOP(nnc_op_reducemax, "ReduceMax")
REDOP(nnc_op_reducemin, "ReduceMin")
REDOP(nnc_op_reduceprod, "ReduceProd")
REDOP(nnc_op_reducel2, "ReduceL2")
REDOP(nnc_op_reducesumsquare, "ReduceSumSquare")
REDOP(nnc_op_reducel1, "ReduceL1")
REDOP(nnc_op_reducelogsumexp, "ReduceLogSumExp")
REDOP(nnc_op_reducelogsum, "ReduceLogSum")

/* ---- ArgMax / ArgMin ----------------------------------------------------------------- */

typedef struct {
    int64_t axis;
    int keepdims, last, is_min;
} arg_state;

static int arg_create(nnc_node *n, nnc_err *e)
{
    if (n->vin[0] && n->vin[0]->dtype && !nnc_dt_numeric(n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "element type %s is not supported",
                              nnc_dtname(n->vin[0]->dtype));
    arg_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int64_t v;
    TRY(nnc_attr_int(n, "axis", 0, &s->axis, e));
    TRY(nnc_attr_int(n, "keepdims", 1, &v, e));
    if (v != 0 && v != 1)
        return nnc_node_fail(e, n, "attribute 'keepdims' = %lld is not 0 or 1", (long long)v);
    s->keepdims = v != 0;
    TRY(nnc_attr_int(n, "select_last_index", 0, &v, e));
    s->last = v != 0;
    s->is_min = !strcmp(n->op_type, "ArgMin");
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0 && (s->axis < -x->ndim || s->axis >= (x->ndim ? x->ndim : 1)))
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)s->axis, x->ndim);
    return NNC_OK;
}

static int arg_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const arg_state *s = n->state;
    const nnc_tensor *x = in[0];
    if (!nnc_dt_numeric(x->dtype))
        return nnc_node_fail(e, n, "element type %s is not supported", nnc_dtname(x->dtype));
    if (x->ndim < 1 || s->axis < -x->ndim || s->axis >= x->ndim)
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)s->axis, x->ndim);
    int axis = (int)(s->axis < 0 ? s->axis + x->ndim : s->axis);
    if (x->dims[axis] == 0) return nnc_node_fail(e, n, "cannot take the arg of an empty axis");
    out->dtype = DT_I64;
    out->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d != axis) out->dims[out->ndim++] = x->dims[d];
        else if (s->keepdims) out->dims[out->ndim++] = 1;
    }
    return NNC_OK;
}

static inline double argload(const void *p, int dt, int64_t i)
{
    return dt == DT_F32 ? ((const float *)p)[i] : nnc_get_d(p, dt, i);
}

/* Integers compare exactly (int64 values past 2^53 do not round). */
static int64_t arg_int(const nnc_tensor *x, const arg_state *s, int64_t base, int64_t R, int64_t I)
{
    int uns = nnc_dt_unsigned(x->dtype);
    int64_t best = 0, bv, v;
    nnc_load_i(x->data, x->dtype, base, 0, 1, &bv);
    for (int64_t t = 1; t < R; t++) {
        nnc_load_i(x->data, x->dtype, base + t * I, 0, 1, &v);
        int gt = uns ? (uint64_t)v > (uint64_t)bv : v > bv,
            lt = uns ? (uint64_t)v < (uint64_t)bv : v < bv;
        int better = s->is_min ? (lt || (s->last && v == bv)) : (gt || (s->last && v == bv));
        if (better) {
            bv = v;
            best = t;
        }
    }
    return best;
}

static int arg_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    (void)e;
    const arg_state *s = n->state;
    const nnc_tensor *x = in[0];
    int axis = (int)(s->axis < 0 ? s->axis + x->ndim : s->axis);
    int64_t O = 1, R = x->dims[axis], I = 1;
    for (int d = 0; d < axis; d++) O *= x->dims[d];
    for (int d = axis + 1; d < x->ndim; d++) I *= x->dims[d];
    int64_t *y = out->data;
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < I; i++) {
            int64_t base = o * R * I + i, best = 0;
            if (!nnc_dt_float(x->dtype)) {
                y[o * I + i] = arg_int(x, s, base, R, I);
                continue;
            }
            double bv = argload(x->data, x->dtype, base);
            for (int64_t t = 1; t < R; t++) {
                double v = argload(x->data, x->dtype, base + t * I);
                /* onnxruntime's rule: a running comparison from the first element, which a
                 * NaN never wins (it compares false) unless it is that first element. */
                int better =
                    s->is_min ? (s->last ? v <= bv : v < bv) : (s->last ? v >= bv : v > bv);
                if (better) {
                    bv = v;
                    best = t;
                }
            }
            y[o * I + i] = best;
        }
    return NNC_OK;
}

static void arg_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}
const nnc_op nnc_op_argmax = {"ArgMax", 1, 1, 1, 1, arg_create, arg_infer, arg_run, arg_destroy, 0};
const nnc_op nnc_op_argmin = {"ArgMin", 1, 1, 1, 1, arg_create, arg_infer, arg_run, arg_destroy, 0};
