/* TensorScatter (opset 24): a key/value cache update. present = past with, for each batch b,
 * the rows of `update` along `axis` written from position write_indices[b] on (linear mode:
 * they must fit; circular mode: positions wrap around the cache length). Any element type. */
#include "nnc.h"

#include <stdlib.h>

typedef struct {
    int64_t axis;
    int circular;
} ts_state;

static void free_state(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int ts_create(nnc_node *n, nnc_err *e)
{
    ts_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    static const int i64[] = {DT_I64, 0};
    TRY(nnc_check_dtype(n, 2, i64, e));
    const nnc_valinfo *p = n->vin[0], *u = n->vin[1];
    if (p && p->dtype != DT_UNDEF && (p->dtype == DT_STR || !nnc_dtsize(p->dtype)))
        return nnc_node_unsup(e, n, "element type %s is not supported", nnc_dtname(p->dtype));
    if (p && u && p->dtype != DT_UNDEF && u->dtype != DT_UNDEF && p->dtype != u->dtype)
        return nnc_node_fail(e, n, "past_cache is %s but update is %s; they must have one type",
                             nnc_dtname(p->dtype), nnc_dtname(u->dtype));
    TRY(nnc_attr_int(n, "axis", -2, &s->axis, e));
    char mode[16];
    TRY(nnc_attr_str(n, "mode", "linear", mode, sizeof mode, e));
    if (!strcmp(mode, "circular")) s->circular = 1;
    else if (strcmp(mode, "linear"))
        return nnc_node_fail(e, n, "attribute 'mode' is '%s'; expected 'linear' or 'circular'",
                             mode);
    return NNC_OK;
}

static int ts_axis(const nnc_node *n, const nnc_tensor *p, int64_t *axis, nnc_err *e)
{
    const ts_state *s = n->state;
    int64_t a = s->axis < 0 ? s->axis + p->ndim : s->axis;
    if (p->ndim < 2 || a < 1 || a >= p->ndim)
        return nnc_node_fail(
            e, n, "attribute 'axis' = %lld must name a non-batch axis of the rank-%d cache",
            (long long)s->axis, p->ndim);
    *axis = a;
    return NNC_OK;
}

static int ts_check(const nnc_node *n, nnc_tensor *const *in, int64_t *axis, nnc_err *e)
{
    const nnc_tensor *p = in[0], *u = in[1], *w = n->nin > 2 ? in[2] : NULL;
    TRY(ts_axis(n, p, axis, e));
    if (u->dtype != p->dtype)
        return nnc_node_fail(e, n, "past_cache and update have different element types");
    if (u->ndim != p->ndim)
        return nnc_node_fail(e, n, "update has rank %d, past_cache %d", u->ndim, p->ndim);
    for (int d = 0; d < p->ndim; d++) {
        int ok = d == *axis ? u->dims[d] <= p->dims[d] : u->dims[d] == p->dims[d];
        if (!ok)
            return nnc_node_fail(
                e, n,
                "update dim %d is %lld, past_cache's is %lld (equal except along axis, "
                "where update may not be longer)",
                d, (long long)u->dims[d], (long long)p->dims[d]);
    }
    if (w) {
        if (w->dtype != DT_I64 || w->ndim != 1 || w->dims[0] != p->dims[0])
            return nnc_node_fail(e, n,
                                 "write_indices must be int64 of shape [%lld] (the batch size)",
                                 (long long)p->dims[0]);
        const int64_t *wi = w->data;
        for (int64_t b = 0; b < w->dims[0]; b++) {
            int64_t max = p->dims[*axis], len = u->dims[*axis];
            if (wi[b] < 0 || (!((const ts_state *)n->state)->circular && wi[b] > max - len))
                return nnc_node_fail(
                    e, n, "write_indices[%lld] = %lld does not fit %lld rows into a cache of %lld",
                    (long long)b, (long long)wi[b], (long long)len, (long long)max);
        }
    }
    return NNC_OK;
}

static int ts_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int64_t axis;
    TRY(ts_check(n, in, &axis, e));
    *out = *in[0];
    out->data = NULL;
    return NNC_OK;
}

static int ts_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    int64_t axis;
    TRY(ts_check(n, in, &axis, e));
    const nnc_tensor *p = in[0], *u = in[1], *w = n->nin > 2 ? in[2] : NULL;
    size_t sz = nnc_dtsize(p->dtype);
    memcpy(out->data, p->data, nnc_nbytes(p));
    int64_t inner = 1, mid = 1; /* elements after axis; prefix rows per batch before axis */
    for (int d = (int)axis + 1; d < p->ndim; d++) inner *= p->dims[d];
    for (int d = 1; d < (int)axis; d++) mid *= p->dims[d];
    int64_t max = p->dims[axis], len = u->dims[axis], B = p->dims[0];
    size_t row = (size_t)inner * sz;
    for (int64_t b = 0; b < B; b++) {
        int64_t start = w ? ((const int64_t *)w->data)[b] : 0;
        for (int64_t m = 0; m < mid; m++) {
            char *dst = (char *)out->data + (size_t)((b * mid + m) * max) * row;
            const char *src = (const char *)u->data + (size_t)((b * mid + m) * len) * row;
            for (int64_t s = 0; s < len; s++) {
                int64_t at = start + s; /* linear: checked to fit; circular: wraps */
                if (at >= max) at %= max;
                memcpy(dst + (size_t)at * row, src + (size_t)s * row, row);
            }
        }
    }
    return NNC_OK;
}

const nnc_op nnc_op_tensorscatter = {"TensorScatter", 2,        3,      1,          1,
                                     ts_create,       ts_infer, ts_run, free_state, 0};
