/* Indexing, generation and data-dependent ops on every element type: Size, Range, Trilu,
 * CumSum, CumProd, Tile, GatherElements, ScatterElements (and Scatter), GatherND, ScatterND, OneHot, NonZero, TopK,
 * Compress, ReverseSequence, Hardmax, Unique. Data moves by element size; arithmetic (CumSum,
 * scatter reductions) runs in double or int64 as op_arith.c does. Every index is checked
 * against its dimension before memory is touched. */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <stdlib.h>

#define MAX_OUT ((int64_t)1 << 40) /* elements: larger requests are malformed, not allocations */

static void free_state(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static inline void cp(char *d, const char *s, size_t sz)
{
    switch (sz) {
    case 1: *d = *s; break;
    case 2: memcpy(d, s, 2); break;
    case 4: memcpy(d, s, 4); break;
    case 8: memcpy(d, s, 8); break;
    default: memcpy(d, s, sz); break;
    }
}

static int is_index_dt(int dt)
{
    return dt == DT_I64 || dt == DT_I32;
}

static int64_t idx_at(const nnc_tensor *t, int64_t i)
{
    return t->dtype == DT_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

static int any_type_in(nnc_node *n, int i, nnc_err *e)
{
    if (n->vin[i] && n->vin[i]->dtype && !nnc_dtsize(n->vin[i]->dtype))
        return nnc_node_unsup(e, n, "input %d has element type %s, which is not supported", i,
                              nnc_dtname(n->vin[i]->dtype));
    return NNC_OK;
}

static int index_in(nnc_node *n, int i, nnc_err *e)
{
    static const int ints[] = {DT_I64, DT_I32, 0};
    return nnc_check_dtype(n, i, ints, e);
}

static int norm_axis(const nnc_node *n, int64_t axis, int rank, int64_t *out, nnc_err *e)
{
    if (axis < -rank || axis >= rank)
        return nnc_node_fail(e, n, "axis %lld is out of range for rank %d", (long long)axis, rank);
    *out = axis < 0 ? axis + rank : axis;
    return NNC_OK;
}

static void strides_of(const nnc_tensor *t, int64_t *st)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= t->dims[d];
    }
}

static int check_size(const nnc_node *n, const nnc_tensor *out, nnc_err *e)
{
    int64_t k = 1;
    for (int d = 0; d < out->ndim; d++) {
        if (out->dims[d] < 0) return nnc_node_fail(e, n, "output dim %d is negative", d);
        if (out->dims[d] && k > MAX_OUT / out->dims[d])
            return nnc_node_fail(e, n, "output is too large");
        k *= out->dims[d];
    }
    return NNC_OK;
}

/* ---- Size ------------------------------------------------------------------------------ */

static int size_create(nnc_node *n, nnc_err *e)
{
    return any_type_in(n, 0, e);
}
static int size_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    (void)n;
    (void)in;
    (void)e;
    out->dtype = DT_I64;
    out->ndim = 0;
    return NNC_OK;
}
static int size_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)n;
    (void)x;
    (void)e;
    *(int64_t *)out->data = nnc_numel(in[0]);
    return NNC_OK;
}
const nnc_op nnc_op_size = {"Size", 1, 1, 1, 1, size_create, size_infer, size_run, NULL, 0};

/* ---- Range ----------------------------------------------------------------------------- */

static int range_create(nnc_node *n, nnc_err *e)
{
    static const int ok[] = {DT_F32, DT_F64, DT_F16, DT_BF16, DT_I16, DT_I32, DT_I64, 0};
    for (int i = 0; i < 3; i++) TRY(nnc_check_dtype(n, i, ok, e));
    for (int i = 1; i < 3; i++)
        if (n->vin[i] && n->vin[0] && n->vin[i]->dtype != n->vin[0]->dtype)
            return nnc_node_fail(e, n, "start, limit and delta must have one element type");
    return NNC_OK;
}

static int range_count(nnc_node *n, nnc_tensor *const *in, int64_t *cnt, nnc_err *e)
{
    for (int i = 0; i < 3; i++)
        if (nnc_numel(in[i]) != 1 || in[i]->dtype != in[0]->dtype)
            return nnc_node_fail(e, n, "input %d must be a scalar of the start's type", i);
    int dt = in[0]->dtype;
    if (nnc_dt_float(dt)) {
        double s = nnc_get_d(in[0]->data, dt, 0), l = nnc_get_d(in[1]->data, dt, 0),
               d = nnc_get_d(in[2]->data, dt, 0);
        if (d == 0 || d != d || s != s || l != l)
            return nnc_node_fail(e, n, "delta must be non-zero and the inputs not NaN");
        double c = ceil((l - s) / d);
        if (!(c < (double)MAX_OUT)) return nnc_node_fail(e, n, "the range has too many elements");
        *cnt = c > 0 ? (int64_t)c : 0;
    } else {
        int64_t s = nnc_get_i(in[0]->data, dt, 0), l = nnc_get_i(in[1]->data, dt, 0),
                d = nnc_get_i(in[2]->data, dt, 0);
        if (d == 0) return nnc_node_fail(e, n, "delta must not be 0");
        /* exact: int64 differences need 65 bits */
        __extension__ __int128 diff = (__int128)l - s, dd = d, c = 0;
        if (d > 0 && diff > 0) c = (diff + dd - 1) / dd;
        if (d < 0 && diff < 0) c = (-diff + (-dd) - 1) / (-dd);
        if (c >= MAX_OUT) return nnc_node_fail(e, n, "the range has too many elements");
        *cnt = (int64_t)c;
    }
    return NNC_OK;
}

static int range_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int64_t k;
    TRY(range_count(n, in, &k, e));
    out->dtype = in[0]->dtype;
    out->ndim = 1;
    out->dims[0] = k;
    return NNC_OK;
}

static int range_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    int64_t k;
    TRY(range_count(n, in, &k, e));
    int dt = out->dtype;
    if (nnc_dt_float(dt)) {
        /* onnxruntime accumulates: value += delta (in the element type) */
        if (dt == DT_F32) {
            float v = *(const float *)in[0]->data, d = *(const float *)in[2]->data;
            for (int64_t i = 0; i < k; i++) {
                ((float *)out->data)[i] = v;
                v += d;
            }
        } else if (dt == DT_F64) {
            double v = *(const double *)in[0]->data, d = *(const double *)in[2]->data;
            for (int64_t i = 0; i < k; i++) {
                ((double *)out->data)[i] = v;
                v += d;
            }
        } else { /* float16/bfloat16: each sum rounded to the type, as T += delta does */
            double v = nnc_get_d(in[0]->data, dt, 0), d = nnc_get_d(in[2]->data, dt, 0);
            for (int64_t i = 0; i < k; i++) {
                nnc_store_d(out->data, dt, i, 1, &v);
                v = nnc_get_d(out->data, dt, i) + d;
            }
        }
    } else {
        int64_t v = nnc_get_i(in[0]->data, dt, 0), d = nnc_get_i(in[2]->data, dt, 0), buf[1];
        for (int64_t i = 0; i < k; i++) {
            buf[0] = v;
            nnc_store_i(out->data, dt, i, 1, buf);
            v = (int64_t)((uint64_t)v + (uint64_t)d);
        }
    }
    return NNC_OK;
}
const nnc_op nnc_op_range = {"Range", 3, 3, 1, 1, range_create, range_infer, range_run, NULL, 0};

/* ---- Trilu ----------------------------------------------------------------------------- */

static int trilu_create(nnc_node *n, nnc_err *e)
{
    TRY(any_type_in(n, 0, e));
    static const int i64[] = {DT_I64, 0};
    TRY(nnc_check_dtype(n, 1, i64, e));
    int64_t up;
    TRY(nnc_attr_int(n, "upper", 1, &up, e));
    if (up != 0 && up != 1)
        return nnc_node_fail(e, n, "attribute 'upper' = %lld is not 0 or 1", (long long)up);
    int *s = malloc(sizeof(int));
    if (!s) return nnc_node_fail(e, n, "out of memory");
    *s = (int)up;
    n->state = s;
    return NNC_OK;
}

static int trilu_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    if (in[0]->ndim < 2)
        return nnc_node_fail(e, n, "input must have rank 2 or more, got %d", in[0]->ndim);
    if (n->nin > 1 && in[1] && (in[1]->dtype != DT_I64 || nnc_numel(in[1]) != 1))
        return nnc_node_fail(e, n, "k must be an int64 scalar");
    *out = *in[0];
    out->data = NULL;
    return NNC_OK;
}

static int trilu_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    (void)e;
    int upper = *(int *)n->state;
    int64_t k = n->nin > 1 && in[1] ? *(const int64_t *)in[1]->data : 0;
    int r = in[0]->ndim;
    int64_t R = in[0]->dims[r - 2], C = in[0]->dims[r - 1],
            mats = nnc_numel(in[0]) / (R * C != 0 ? R * C : 1);
    size_t sz = nnc_dtsize(out->dtype);
    memcpy(out->data, in[0]->data, nnc_nbytes(out));
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < R; i++) {
            char *row = (char *)out->data + ((m * R + i) * C) * (int64_t)sz;
            for (int64_t j = 0; j < C; j++) {
                int keep = upper ? (j - i >= k) : (j - i <= k); /* j - i is small: no overflow */
                if (!keep) memset(row + j * (int64_t)sz, 0, sz);
            }
        }
    return NNC_OK;
}
const nnc_op nnc_op_trilu = {"Trilu",      1,           2,         1,          1,
                             trilu_create, trilu_infer, trilu_run, free_state, 0};

/* ---- CumSum, CumProd ---------------------------------------------------------------------------- */

typedef struct {
    int exclusive, reverse, prod;
} cumsum_state;

static int cumsum_create(nnc_node *n, nnc_err *e)
{
    static const int ok[] = {DT_F32, DT_F64, DT_F16, DT_BF16, DT_I32, DT_I64, DT_U32, DT_U64, 0};
    TRY(nnc_check_dtype(n, 0, ok, e));
    TRY(index_in(n, 1, e));
    cumsum_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int64_t ex, rv;
    TRY(nnc_attr_int(n, "exclusive", 0, &ex, e));
    TRY(nnc_attr_int(n, "reverse", 0, &rv, e));
    if ((ex != 0 && ex != 1) || (rv != 0 && rv != 1))
        return nnc_node_fail(e, n, "attributes 'exclusive' and 'reverse' must be 0 or 1");
    s->exclusive = (int)ex;
    s->reverse = (int)rv;
    s->prod = !strcmp(n->op_type, "CumProd");
    return NNC_OK;
}

static int cumsum_axis(nnc_node *n, nnc_tensor *const *in, int64_t *axis, nnc_err *e)
{
    if (!is_index_dt(in[1]->dtype) || nnc_numel(in[1]) != 1 || in[1]->ndim > 1)
        return nnc_node_fail(e, n, "axis must be an int32/int64 scalar");
    return norm_axis(n, idx_at(in[1], 0), in[0]->ndim, axis, e);
}

static int cumsum_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int64_t axis = 0;
    if (in[0]->ndim == 0) return nnc_node_fail(e, n, "input must have rank 1 or more");
    TRY(cumsum_axis(n, in, &axis, e));
    *out = *in[0];
    out->data = NULL;
    return NNC_OK;
}

static int cumsum_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const cumsum_state *s = n->state;
    int64_t axis = 0, st[NNC_MAXDIM];
    TRY(cumsum_axis(n, in, &axis, e));
    strides_of(in[0], st);
    int64_t L = in[0]->dims[axis], inner = st[axis],
            outer = nnc_numel(in[0]) / (L * inner != 0 ? L * inner : 1);
    int dt = out->dtype, fl = nnc_dt_float(dt);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            /* -0.0 + x is x, so an inclusive sum keeps a leading -0.0 (numpy, onnxruntime);
             * an exclusive one starts from +0.0, its first output, as onnxruntime */
            double ad = s->prod ? 1 : s->exclusive ? 0.0 : -0.0;
            int64_t ai = s->prod ? 1 : 0;
            for (int64_t t = 0; t < L; t++) {
                int64_t tt = s->reverse ? L - 1 - t : t, off = (o * L + tt) * inner + i;
                if (fl) {
                    double v = nnc_get_d(in[0]->data, dt, off);
                    if (s->exclusive) nnc_store_d(out->data, dt, off, 1, &ad);
                    ad = s->prod ? ad * v : ad + v;
                    if (!s->exclusive) nnc_store_d(out->data, dt, off, 1, &ad);
                } else {
                    int64_t v;
                    nnc_load_i(in[0]->data, dt, off, 0, 1, &v);
                    if (s->exclusive) nnc_store_i(out->data, dt, off, 1, &ai);
                    ai = (int64_t)(s->prod ? (uint64_t)ai * (uint64_t)v
                                           : (uint64_t)ai + (uint64_t)v);
                    if (!s->exclusive) nnc_store_i(out->data, dt, off, 1, &ai);
                }
            }
        }
    return NNC_OK;
}
const nnc_op nnc_op_cumsum = {"CumSum",     2,          2,          1, 1, cumsum_create,
                              cumsum_infer, cumsum_run, free_state, 0};
const nnc_op nnc_op_cumprod = {"CumProd",    2,          2,          1, 1, cumsum_create,
                               cumsum_infer, cumsum_run, free_state, 0};

/* ---- Tile ------------------------------------------------------------------------------ */

static int tile_create(nnc_node *n, nnc_err *e)
{
    static const int i64[] = {DT_I64, 0};
    TRY(any_type_in(n, 0, e));
    return nnc_check_dtype(n, 1, i64, e);
}

static int tile_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int64_t rep[NNC_MAXDIM];
    int k;
    TRY(nnc_read_ints(n, in[1], "repeats", rep, NNC_MAXDIM, &k, e));
    if (k != in[0]->ndim)
        return nnc_node_fail(e, n, "repeats has %d values, the input has rank %d", k, in[0]->ndim);
    *out = *in[0];
    out->data = NULL;
    for (int d = 0; d < k; d++) {
        if (rep[d] < 0)
            return nnc_node_fail(e, n, "repeats[%d] = %lld is negative", d, (long long)rep[d]);
        if (in[0]->dims[d] && rep[d] > MAX_OUT / in[0]->dims[d])
            return nnc_node_fail(e, n, "output is too large");
        out->dims[d] = in[0]->dims[d] * rep[d];
    }
    return check_size(n, out, e);
}

static int tile_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)n;
    (void)x;
    (void)e;
    int r = out->ndim;
    size_t sz = nnc_dtsize(out->dtype);
    if (r == 0) {
        memcpy(out->data, in[0]->data, sz);
        return NNC_OK;
    }
    int64_t ist[NNC_MAXDIM], idx[NNC_MAXDIM] = {0};
    strides_of(in[0], ist);
    int64_t W = out->dims[r - 1], w = in[0]->dims[r - 1], rows = nnc_numel(out) / (W ? W : 1);
    char *o = out->data;
    for (int64_t row = 0; row < rows; row++) {
        int64_t off = 0;
        for (int d = 0; d < r - 1; d++) off += (idx[d] % in[0]->dims[d]) * ist[d];
        const char *src = (const char *)in[0]->data + off * (int64_t)sz;
        for (int64_t c = 0; c < W; c += w) memcpy(o + c * (int64_t)sz, src, (size_t)w * sz);
        o += W * (int64_t)sz;
        for (int d = r - 2; d >= 0; d--) {
            if (++idx[d] < out->dims[d]) break;
            idx[d] = 0;
        }
    }
    return NNC_OK;
}
const nnc_op nnc_op_tile = {"Tile", 2, 2, 1, 1, tile_create, tile_infer, tile_run, NULL, 0};

/* ---- GatherElements / ScatterElements ------------------------------------------------- */

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };
typedef struct {
    int64_t axis;
    int red;
    int64_t batch_dims;
} gs_state;

static int parse_reduction(nnc_node *n, gs_state *s, nnc_err *e)
{
    char r[16];
    TRY(nnc_attr_str(n, "reduction", "none", r, sizeof r, e));
    if (!strcmp(r, "none")) s->red = RED_NONE;
    else if (!strcmp(r, "add")) s->red = RED_ADD;
    else if (!strcmp(r, "mul")) s->red = RED_MUL;
    else if (!strcmp(r, "max")) s->red = RED_MAX;
    else if (!strcmp(r, "min")) s->red = RED_MIN;
    else
        return nnc_node_fail(e, n, "attribute 'reduction' = '%s' is not none, add, mul, max or min",
                             r);
    if (s->red != RED_NONE && n->vin[0] && n->vin[0]->dtype && !nnc_dt_numeric(n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "reduction '%s' on %s is not supported", r,
                              nnc_dtname(n->vin[0]->dtype));
    return NNC_OK;
}

static int gs_create(nnc_node *n, nnc_err *e)
{
    gs_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(any_type_in(n, 0, e));
    TRY(index_in(n, 1, e));
    int scatter = !strncmp(n->op_type, "Scatter", 7);
    if (scatter) {
        TRY(any_type_in(n, 2, e));
        if (n->vin[0] && n->vin[2] && n->vin[0]->dtype != n->vin[2]->dtype)
            return nnc_node_fail(e, n, "data and updates have different element types");
        TRY(parse_reduction(n, s, e));
    }
    if (!strcmp(n->op_type, "GatherND") || !strcmp(n->op_type, "ScatterND")) {
        TRY(nnc_attr_int(n, "batch_dims", 0, &s->batch_dims, e));
        if (s->batch_dims < 0)
            return nnc_node_fail(e, n, "attribute 'batch_dims' must not be negative");
        static const int i64[] = {DT_I64, 0};
        TRY(nnc_check_dtype(n, 1, i64, e));
    } else {
        TRY(nnc_attr_int(n, "axis", 0, &s->axis, e));
    }
    return NNC_OK;
}

static int ge_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const gs_state *s = n->state;
    int64_t axis = 0;
    if (!is_index_dt(in[1]->dtype)) return nnc_node_fail(e, n, "indices must be int32 or int64");
    if (in[0]->ndim < 1 || in[1]->ndim != in[0]->ndim)
        return nnc_node_fail(e, n, "data and indices must have the same rank (>= 1), got %d and %d",
                             in[0]->ndim, in[1]->ndim);
    TRY(norm_axis(n, s->axis, in[0]->ndim, &axis, e));
    *out = *in[1];
    out->dtype = in[0]->dtype;
    out->data = NULL;
    return NNC_OK;
}

static int ge_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const gs_state *s = n->state;
    int64_t axis = 0, dst[NNC_MAXDIM], ist[NNC_MAXDIM], idx[NNC_MAXDIM] = {0};
    TRY(norm_axis(n, s->axis, in[0]->ndim, &axis, e));
    strides_of(in[0], dst);
    strides_of(in[1], ist);
    int r = in[0]->ndim;
    size_t sz = nnc_dtsize(out->dtype);
    int64_t dim = in[0]->dims[axis], k = nnc_numel(in[1]);
    for (int d = 0; d < r; d++)
        if (d != (int)axis && in[1]->dims[d] > in[0]->dims[d])
            return nnc_node_fail(e, n, "indices dim %d (%lld) is larger than the data's (%lld)", d,
                                 (long long)in[1]->dims[d], (long long)in[0]->dims[d]);
    for (int64_t i = 0; i < k; i++) {
        int64_t v = idx_at(in[1], i);
        if (v < -dim || v >= dim)
            return nnc_node_fail(e, n, "index %lld is out of range for axis size %lld",
                                 (long long)v, (long long)dim);
        if (v < 0) v += dim;
        int64_t off = 0;
        for (int d = 0; d < r; d++) off += (d == (int)axis ? v : idx[d]) * dst[d];
        cp((char *)out->data + i * (int64_t)sz, (const char *)in[0]->data + off * (int64_t)sz, sz);
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < in[1]->dims[d]) break;
            idx[d] = 0;
        }
    }
    return NNC_OK;
}
const nnc_op nnc_op_gatherelements = {"GatherElements", 2,        2,      1,          1,
                                      gs_create,        ge_infer, ge_run, free_state, 0};

/* dst[off] = red(dst[off], src[i]) in the element type. */
static void reduce_into(int red, int dt, void *dst, int64_t off, const void *src, int64_t i)
{
    size_t sz = nnc_dtsize(dt);
    if (red == RED_NONE) {
        cp((char *)dst + off * (int64_t)sz, (const char *)src + i * (int64_t)sz, sz);
        return;
    }
    if (nnc_dt_float(dt)) {
        double a = nnc_get_d(dst, dt, off), b = nnc_get_d(src, dt, i);
        double r = red == RED_ADD   ? a + b
                   : red == RED_MUL ? a * b
                   : red == RED_MAX ? (a > b ? a : b)
                                    : (a < b ? a : b);
        nnc_store_d(dst, dt, off, 1, &r);
    } else {
        int64_t a, b, r;
        nnc_load_i(dst, dt, off, 0, 1, &a);
        nnc_load_i(src, dt, i, 0, 1, &b);
        int uns = nnc_dt_unsigned(dt) || dt == DT_BOOL;
        if (red == RED_ADD) r = (int64_t)((uint64_t)a + (uint64_t)b);
        else if (red == RED_MUL) r = (int64_t)((uint64_t)a * (uint64_t)b);
        else if (uns) r = (red == RED_MAX) == ((uint64_t)a > (uint64_t)b) ? a : b;
        else r = (red == RED_MAX) == (a > b) ? a : b;
        nnc_store_i(dst, dt, off, 1, &r);
    }
}

static int se_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const gs_state *s = n->state;
    int64_t axis = 0;
    if (!is_index_dt(in[1]->dtype)) return nnc_node_fail(e, n, "indices must be int32 or int64");
    if (in[2]->dtype != in[0]->dtype)
        return nnc_node_fail(e, n, "data and updates have different element types");
    if (in[0]->ndim < 1 || in[1]->ndim != in[0]->ndim || !nnc_same_shape(in[1], in[2]))
        return nnc_node_fail(e, n, "indices and updates must have one shape, of the data's rank");
    TRY(norm_axis(n, s->axis, in[0]->ndim, &axis, e));
    for (int d = 0; d < in[0]->ndim; d++)
        if (d != (int)axis && in[1]->dims[d] > in[0]->dims[d])
            return nnc_node_fail(e, n, "indices dim %d is larger than the data's", d);
    *out = *in[0];
    out->data = NULL;
    return NNC_OK;
}

static int se_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const gs_state *s = n->state;
    int64_t axis = 0, dst[NNC_MAXDIM], idx[NNC_MAXDIM] = {0};
    TRY(norm_axis(n, s->axis, in[0]->ndim, &axis, e));
    strides_of(in[0], dst);
    int r = in[0]->ndim;
    int64_t dim = in[0]->dims[axis], k = nnc_numel(in[1]);
    for (int64_t i = 0; i < k; i++) {
        int64_t v = idx_at(in[1], i);
        if (v < -dim || v >= dim)
            return nnc_node_fail(e, n, "index %lld is out of range for axis size %lld",
                                 (long long)v, (long long)dim);
    }
    memcpy(out->data, in[0]->data, nnc_nbytes(out));
    for (int64_t i = 0; i < k; i++) {
        int64_t v = idx_at(in[1], i);
        if (v < 0) v += dim;
        int64_t off = 0;
        for (int d = 0; d < r; d++) off += (d == (int)axis ? v : idx[d]) * dst[d];
        reduce_into(s->red, out->dtype, out->data, off, in[2]->data, i);
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < in[1]->dims[d]) break;
            idx[d] = 0;
        }
    }
    return NNC_OK;
}
const nnc_op nnc_op_scatterelements = {"ScatterElements", 3,        3,      1,          1,
                                       gs_create,         se_infer, se_run, free_state, 0};
/* Scatter (opsets 9 and 10, deprecated): ScatterElements without reduction. */
const nnc_op nnc_op_scatter = {"Scatter", 3, 3, 1, 1, gs_create, se_infer, se_run, free_state, 0};

/* ---- GatherND / ScatterND -------------------------------------------------------------- */

/* Shapes of GatherND: q = indices rank, last = indices.shape[-1]. */
static int gnd_check(nnc_node *n, const nnc_tensor *data, const nnc_tensor *ind, int64_t b,
                     nnc_err *e)
{
    int q = ind->ndim, r = data->ndim;
    if (ind->dtype != DT_I64) return nnc_node_fail(e, n, "indices must be int64");
    if (q < 1 || r < 1) return nnc_node_fail(e, n, "data and indices must have rank 1 or more");
    if (b >= q || b >= r)
        return nnc_node_fail(e, n, "batch_dims %lld must be less than both ranks", (long long)b);
    int64_t last = ind->dims[q - 1];
    if (last < 1 || last > r - b)
        return nnc_node_fail(e, n,
                             "indices.shape[-1] = %lld must be between 1 and rank - batch_dims",
                             (long long)last);
    for (int d = 0; d < b; d++)
        if (ind->dims[d] != data->dims[d])
            return nnc_node_fail(e, n, "batch dim %d differs between data and indices", d);
    return NNC_OK;
}

static int gnd_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const gs_state *s = n->state;
    TRY(gnd_check(n, in[0], in[1], s->batch_dims, e));
    int q = in[1]->ndim, r = in[0]->ndim;
    int64_t last = in[1]->dims[q - 1];
    out->dtype = in[0]->dtype;
    out->ndim = 0;
    for (int d = 0; d < q - 1; d++) out->dims[out->ndim++] = in[1]->dims[d];
    for (int d = (int)(s->batch_dims + last); d < r; d++) {
        if (out->ndim >= NNC_MAXDIM) return nnc_node_unsup(e, n, "output rank is too large");
        out->dims[out->ndim++] = in[0]->dims[d];
    }
    out->data = NULL;
    return NNC_OK;
}

/* Offsets (in elements of data) of each index tuple and the slice length they select. */
static int nd_offsets(nnc_node *n, const nnc_tensor *data, const nnc_tensor *ind, int64_t b,
                      int64_t *tuples, int64_t *slice, int64_t **offs, nnc_err *e)
{
    int q = ind->ndim, r = data->ndim;
    int64_t last = ind->dims[q - 1], dst[NNC_MAXDIM];
    strides_of(data, dst);
    *tuples = nnc_numel(ind) / last;
    *slice = 1;
    for (int d = (int)(b + last); d < r; d++) *slice *= data->dims[d];
    int64_t per_batch = 1;
    for (int d = (int)b; d < q - 1; d++) per_batch *= ind->dims[d];
    int64_t *o = malloc((size_t)(*tuples ? *tuples : 1) * sizeof(int64_t));
    if (!o) return nnc_node_fail(e, n, "out of memory");
    const int64_t *iv = ind->data;
    for (int64_t t = 0; t < *tuples; t++) {
        int64_t bi = per_batch ? t / per_batch : 0, off = 0;
        /* batch index -> data offset of that batch */
        int64_t rem = bi;
        for (int d = (int)b - 1; d >= 0; d--) {
            off += (rem % data->dims[d]) * dst[d];
            rem /= data->dims[d];
        }
        for (int64_t j = 0; j < last; j++) {
            int64_t dim = data->dims[b + j], v = iv[t * last + j];
            if (v < -dim || v >= dim) {
                free(o);
                return nnc_node_fail(e, n, "index %lld is out of range for dim size %lld",
                                     (long long)v, (long long)dim);
            }
            off += (v < 0 ? v + dim : v) * dst[b + j];
        }
        o[t] = off;
    }
    *offs = o;
    return NNC_OK;
}

static int gnd_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const gs_state *s = n->state;
    int64_t tuples = 0, slice = 0, *offs = NULL;
    TRY(nd_offsets(n, in[0], in[1], s->batch_dims, &tuples, &slice, &offs, e));
    size_t sz = nnc_dtsize(out->dtype);
    for (int64_t t = 0; t < tuples; t++)
        memcpy((char *)out->data + t * slice * (int64_t)sz,
               (const char *)in[0]->data + offs[t] * (int64_t)sz, (size_t)slice * sz);
    free(offs);
    return NNC_OK;
}
const nnc_op nnc_op_gathernd = {"GatherND", 2,         2,       1,          1,
                                gs_create,  gnd_infer, gnd_run, free_state, 0};

static int snd_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const gs_state *s = n->state;
    if (s->batch_dims) return nnc_node_fail(e, n, "ScatterND has no batch_dims");
    TRY(gnd_check(n, in[0], in[1], 0, e));
    if (in[2]->dtype != in[0]->dtype)
        return nnc_node_fail(e, n, "data and updates have different element types");
    /* updates.shape == indices.shape[:-1] + data.shape[last:] */
    nnc_tensor want;
    TRY(gnd_infer(n, in, &want, e));
    if (!nnc_same_shape(&want, in[2])) {
        char a[128], b[128];
        nnc_shape_str(in[2], a, sizeof a);
        nnc_shape_str(&want, b, sizeof b);
        return nnc_node_fail(e, n, "updates have shape %s, the indices need %s", a, b);
    }
    *out = *in[0];
    out->data = NULL;
    return NNC_OK;
}

static int snd_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const gs_state *s = n->state;
    int64_t tuples = 0, slice = 0, *offs = NULL;
    TRY(nd_offsets(n, in[0], in[1], 0, &tuples, &slice, &offs, e));
    memcpy(out->data, in[0]->data, nnc_nbytes(out));
    for (int64_t t = 0; t < tuples; t++)
        for (int64_t i = 0; i < slice; i++)
            reduce_into(s->red, out->dtype, out->data, offs[t] + i, in[2]->data, t * slice + i);
    free(offs);
    return NNC_OK;
}
const nnc_op nnc_op_scatternd = {"ScatterND", 3,         3,       1,          1,
                                 gs_create,   snd_infer, snd_run, free_state, 0};

/* ---- OneHot ---------------------------------------------------------------------------- */

static int onehot_create(nnc_node *n, nnc_err *e)
{
    for (int i = 0; i < 2; i++)
        if (n->vin[i] && n->vin[i]->dtype && !nnc_dt_numeric(n->vin[i]->dtype))
            return nnc_node_unsup(e, n, "input %d has element type %s, which is not supported", i,
                                  nnc_dtname(n->vin[i]->dtype));
    TRY(any_type_in(n, 2, e));
    int64_t *axis = malloc(sizeof(int64_t));
    if (!axis) return nnc_node_fail(e, n, "out of memory");
    n->state = axis;
    return nnc_attr_int(n, "axis", -1, axis, e);
}

static int onehot_shape(nnc_node *n, nnc_tensor *const *in, int64_t *depth, int64_t *axis,
                        nnc_err *e)
{
    if (nnc_numel(in[1]) != 1 || in[1]->ndim > 1)
        return nnc_node_fail(e, n, "depth must be a scalar");
    if (nnc_numel(in[2]) != 2 || in[2]->ndim != 1)
        return nnc_node_fail(e, n, "values must hold 2 elements");
    double d = nnc_get_d(in[1]->data, in[1]->dtype, 0);
    if (!(d >= 1 && d < (double)MAX_OUT)) return nnc_node_fail(e, n, "depth must be positive");
    *depth = (int64_t)d;
    if (in[0]->ndim + 1 > NNC_MAXDIM) return nnc_node_unsup(e, n, "output rank is too large");
    return norm_axis(n, *(int64_t *)n->state, in[0]->ndim + 1, axis, e);
}

static int onehot_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int64_t depth = 0, axis = 0;
    TRY(onehot_shape(n, in, &depth, &axis, e));
    out->dtype = in[2]->dtype;
    out->ndim = in[0]->ndim + 1;
    for (int d = 0, s = 0; d < out->ndim; d++) out->dims[d] = d == axis ? depth : in[0]->dims[s++];
    out->data = NULL;
    return check_size(n, out, e);
}

static int onehot_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    int64_t depth = 0, axis = 0;
    TRY(onehot_shape(n, in, &depth, &axis, e));
    size_t sz = nnc_dtsize(out->dtype);
    const char *off = in[2]->data, *on = (const char *)in[2]->data + sz;
    int64_t inner = 1, outer = 1;
    for (int d = 0; d < in[0]->ndim; d++) {
        if (d < axis) outer *= in[0]->dims[d];
        else inner *= in[0]->dims[d];
    }
    char *o = out->data;
    for (int64_t i = 0; i < outer * depth * inner; i++) cp(o + i * (int64_t)sz, off, sz);
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < inner; c++) {
            double v = nnc_get_d(in[0]->data, in[0]->dtype, a * inner + c);
            if (v != v) continue;
            int64_t k = v >= (double)MAX_OUT || v <= -(double)MAX_OUT ? depth : (int64_t)v;
            if (k < 0) k += depth;
            if (k < 0 || k >= depth) continue;
            cp(o + ((a * depth + k) * inner + c) * (int64_t)sz, on, sz);
        }
    return NNC_OK;
}
const nnc_op nnc_op_onehot = {"OneHot",     3,          3,          1, 1, onehot_create,
                              onehot_infer, onehot_run, free_state, 0};

/* ---- NonZero --------------------------------------------------------------------------- */

static int elem_nonzero(const nnc_tensor *t, int64_t i)
{
    if (nnc_dt_float(t->dtype) || nnc_dt_minifloat(t->dtype))
        return nnc_get_d(t->data, t->dtype, i) != 0; /* -0 */
    size_t sz = nnc_dtsize(t->dtype);
    const unsigned char *p = (const unsigned char *)t->data + i * (int64_t)sz;
    for (size_t b = 0; b < sz; b++)
        if (p[b]) return 1;
    return 0;
}

static int nonzero_create(nnc_node *n, nnc_err *e)
{
    TRY(any_type_in(n, 0, e));
    if (n->vin[0] && n->vin[0]->ndim == 0)
        return nnc_node_unsup(e, n, "a scalar input is not supported");
    return NNC_OK;
}

static int nonzero_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    if (in[0]->ndim == 0) return nnc_node_fail(e, n, "a scalar input is not supported");
    int64_t k = nnc_numel(in[0]), c = 0;
    if (in[0]->data)
        for (int64_t i = 0; i < k; i++) c += elem_nonzero(in[0], i);
    out->dtype = DT_I64;
    out->ndim = 2;
    out->dims[0] = in[0]->ndim;
    out->dims[1] = c;
    out->data = NULL;
    return NNC_OK;
}

static int nonzero_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)n;
    (void)x;
    (void)e;
    int r = in[0]->ndim;
    int64_t k = nnc_numel(in[0]), c = 0, nnz = out->dims[1], idx[NNC_MAXDIM] = {0};
    int64_t *o = out->data;
    for (int64_t i = 0; i < k && c < nnz; i++) {
        if (elem_nonzero(in[0], i)) {
            for (int d = 0; d < r; d++) o[d * nnz + c] = idx[d];
            c++;
        }
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < in[0]->dims[d]) break;
            idx[d] = 0;
        }
    }
    return NNC_OK;
}
const nnc_op nnc_op_nonzero = {"NonZero",     1,           1,    1, 1, nonzero_create,
                               nonzero_infer, nonzero_run, NULL, 0};

/* ---- TopK ------------------------------------------------------------------------------ */

typedef struct {
    int64_t axis;
    int largest, sorted;
} topk_state;

static int topk_create(nnc_node *n, nnc_err *e)
{
    topk_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    if (n->vin[0] && n->vin[0]->dtype && !nnc_dt_numeric(n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "element type %s is not supported",
                              nnc_dtname(n->vin[0]->dtype));
    int64_t a, l = 1, so = 1;
    TRY(nnc_attr_int(n, "axis", -1, &a, e));
    if (n->opset >= 11) {
        TRY(nnc_attr_int(n, "largest", 1, &l, e));
        TRY(nnc_attr_int(n, "sorted", 1, &so, e));
    }
    if (n->opset < 10)
        return nnc_node_unsup(e, n, "TopK before opset 10 (k as an attribute) is not supported");
    static const int i64[] = {DT_I64, 0};
    TRY(nnc_check_dtype(n, 1, i64, e));
    if (!so) return nnc_node_unsup(e, n, "sorted=0 is not supported");
    s->axis = a;
    s->largest = l != 0;
    s->sorted = so != 0;
    return NNC_OK;
}

static int topk_k(nnc_node *n, nnc_tensor *const *in, int64_t *axis, int64_t *k, nnc_err *e)
{
    const topk_state *s = n->state;
    if (in[0]->ndim < 1) return nnc_node_fail(e, n, "input must have rank 1 or more");
    TRY(norm_axis(n, s->axis, in[0]->ndim, axis, e));
    if (in[1]->dtype != DT_I64 || nnc_numel(in[1]) != 1)
        return nnc_node_fail(e, n, "K must be one int64");
    *k = *(const int64_t *)in[1]->data;
    if (*k < 0 || *k > in[0]->dims[*axis])
        return nnc_node_fail(e, n, "K = %lld is outside [0, %lld]", (long long)*k,
                             (long long)in[0]->dims[*axis]);
    return NNC_OK;
}

static int topk_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int64_t axis = 0, k = 0;
    TRY(topk_k(n, in, &axis, &k, e));
    out[0] = *in[0];
    out[0].dims[axis] = k;
    out[0].data = NULL;
    out[1] = out[0];
    out[1].dtype = DT_I64;
    return NNC_OK;
}

/* Sort keys: float types by double (NaN as the largest, as onnxruntime's), integers by
 * int64 or uint64. Merge sort keeps equal values in index order. */
typedef struct {
    double d;
    int64_t i;
    uint64_t u;
} key;
typedef struct {
    int kind, largest;
} keyctx; /* kind: 0 double, 1 int64, 2 uint64 */

static int before(const keyctx *c, const key *a, int64_t ia, const key *b, int64_t ib)
{
    int gt, lt;
    if (c->kind == 0) {
        int na = a->d != a->d, nb = b->d != b->d;
        gt = (na && !nb) || (!na && !nb && a->d > b->d);
        lt = (nb && !na) || (!na && !nb && a->d < b->d);
    } else if (c->kind == 1) {
        gt = a->i > b->i;
        lt = a->i < b->i;
    } else {
        gt = a->u > b->u;
        lt = a->u < b->u;
    }
    if (c->largest ? gt : lt) return 1;
    if (c->largest ? lt : gt) return 0;
    return ia < ib;
}

static void msort(const keyctx *c, const key *keys, int64_t *v, int64_t *tmp, int64_t n)
{
    if (n < 2) return;
    int64_t h = n / 2;
    msort(c, keys, v, tmp, h);
    msort(c, keys, v + h, tmp, n - h);
    int64_t i = 0, j = h, o = 0;
    while (i < h && j < n)
        tmp[o++] = before(c, &keys[v[j]], v[j], &keys[v[i]], v[i]) ? v[j++] : v[i++];
    while (i < h) tmp[o++] = v[i++];
    while (j < n) tmp[o++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof(int64_t));
}

static int topk_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const topk_state *s = n->state;
    int64_t axis = 0, k = 0, st[NNC_MAXDIM];
    TRY(topk_k(n, in, &axis, &k, e));
    strides_of(in[0], st);
    int dt = in[0]->dtype;
    int64_t L = in[0]->dims[axis], inner = st[axis],
            outer = nnc_numel(in[0]) / (L * inner != 0 ? L * inner : 1);
    size_t sz = nnc_dtsize(dt);
    key *keys = malloc((size_t)(L ? L : 1) * sizeof(key));
    int64_t *v = malloc((size_t)(L ? L : 1) * sizeof(int64_t)),
            *tmp = malloc((size_t)(L ? L : 1) * sizeof(int64_t));
    if (!keys || !v || !tmp) {
        free(keys);
        free(v);
        free(tmp);
        return nnc_node_fail(e, n, "out of memory");
    }
    keyctx c = {nnc_dt_float(dt) ? 0 : (dt == DT_U64 ? 2 : 1), s->largest};
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            for (int64_t t = 0; t < L; t++) {
                int64_t off = (o * L + t) * inner + i;
                if (c.kind == 0) keys[t].d = nnc_get_d(in[0]->data, dt, off);
                else {
                    nnc_load_i(in[0]->data, dt, off, 0, 1, &keys[t].i);
                    keys[t].u = (uint64_t)keys[t].i;
                }
                v[t] = t;
            }
            msort(&c, keys, v, tmp, L);
            for (int64_t t = 0; t < k; t++) {
                int64_t src = (o * L + v[t]) * inner + i, dst = (o * k + t) * inner + i;
                cp((char *)out[0].data + dst * (int64_t)sz,
                   (const char *)in[0]->data + src * (int64_t)sz, sz);
                ((int64_t *)out[1].data)[dst] = v[t];
            }
        }
    free(keys);
    free(v);
    free(tmp);
    return NNC_OK;
}
const nnc_op nnc_op_topk = {"TopK", 2, 2, 2, 2, topk_create, topk_infer, topk_run, free_state, 0};

/* ---- Compress -------------------------------------------------------------------------- */

typedef struct {
    int has_axis;
    int64_t axis;
} compress_state;

static int compress_create(nnc_node *n, nnc_err *e)
{
    compress_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(any_type_in(n, 0, e));
    static const int b[] = {DT_BOOL, 0};
    TRY(nnc_check_dtype(n, 1, b, e));
    s->has_axis = nnc_attr_find(n, "axis") != NULL;
    return nnc_attr_int(n, "axis", 0, &s->axis, e);
}

static int compress_plan(nnc_node *n, nnc_tensor *const *in, int64_t *axis, int64_t *kept,
                         nnc_err *e)
{
    const compress_state *s = n->state;
    if (in[1]->dtype != DT_BOOL || in[1]->ndim != 1)
        return nnc_node_fail(e, n, "condition must be a 1-D bool tensor");
    int64_t len;
    if (s->has_axis) {
        TRY(norm_axis(n, s->axis, in[0]->ndim, axis, e));
        len = in[0]->dims[*axis];
    } else {
        *axis = -1;
        len = nnc_numel(in[0]);
    }
    const uint8_t *c = in[1]->data;
    int64_t cl = in[1]->dims[0], k = 0;
    for (int64_t i = 0; i < cl; i++) {
        if (!c[i]) continue;
        if (i >= len)
            return nnc_node_fail(e, n, "condition selects index %lld, the axis has %lld",
                                 (long long)i, (long long)len);
        k++;
    }
    *kept = k;
    return NNC_OK;
}

static int compress_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int64_t axis = 0, k = 0;
    TRY(compress_plan(n, in, &axis, &k, e));
    *out = *in[0];
    out->data = NULL;
    if (axis < 0) {
        out->ndim = 1;
        out->dims[0] = k;
    } else out->dims[axis] = k;
    return NNC_OK;
}

static int compress_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x,
                        nnc_err *e)
{
    (void)x;
    int64_t axis = 0, k = 0;
    TRY(compress_plan(n, in, &axis, &k, e));
    size_t sz = nnc_dtsize(out->dtype);
    const uint8_t *c = in[1]->data;
    int64_t cl = in[1]->dims[0];
    char *o = out->data;
    if (axis < 0) {
        for (int64_t i = 0; i < cl; i++)
            if (c[i]) {
                cp(o, (const char *)in[0]->data + i * (int64_t)sz, sz);
                o += sz;
            }
        return NNC_OK;
    }
    int64_t st[NNC_MAXDIM];
    strides_of(in[0], st);
    int64_t L = in[0]->dims[axis], inner = st[axis],
            outer = nnc_numel(in[0]) / (L * inner != 0 ? L * inner : 1);
    for (int64_t a = 0; a < outer; a++)
        for (int64_t i = 0; i < cl && i < L; i++)
            if (c[i]) {
                memcpy(o, (const char *)in[0]->data + (a * L + i) * inner * (int64_t)sz,
                       (size_t)inner * sz);
                o += inner * (int64_t)sz;
            }
    return NNC_OK;
}
const nnc_op nnc_op_compress = {"Compress",   2,          2, 1, 1, compress_create, compress_infer,
                                compress_run, free_state, 0};

/* ---- ReverseSequence ------------------------------------------------------------------- */

typedef struct {
    int64_t batch, time;
} revseq_state;

static int revseq_create(nnc_node *n, nnc_err *e)
{
    revseq_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(any_type_in(n, 0, e));
    static const int i64[] = {DT_I64, 0};
    TRY(nnc_check_dtype(n, 1, i64, e));
    TRY(nnc_attr_int(n, "batch_axis", 1, &s->batch, e));
    TRY(nnc_attr_int(n, "time_axis", 0, &s->time, e));
    if (!((s->batch == 0 && s->time == 1) || (s->batch == 1 && s->time == 0)))
        return nnc_node_fail(e, n, "batch_axis and time_axis must be 0 and 1 (either order)");
    return NNC_OK;
}

static int revseq_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const revseq_state *s = n->state;
    if (in[0]->ndim < 2) return nnc_node_fail(e, n, "input must have rank 2 or more");
    if (in[1]->dtype != DT_I64 || in[1]->ndim != 1 || in[1]->dims[0] != in[0]->dims[s->batch])
        return nnc_node_fail(e, n, "sequence_lens must be int64 of the batch size");
    *out = *in[0];
    out->data = NULL;
    return NNC_OK;
}

static int revseq_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const revseq_state *s = n->state;
    int64_t st[NNC_MAXDIM];
    strides_of(in[0], st);
    int64_t B = in[0]->dims[s->batch], T = in[0]->dims[s->time], inner = st[1];
    size_t sz = nnc_dtsize(out->dtype);
    const int64_t *lens = in[1]->data;
    for (int64_t b = 0; b < B; b++)
        if (lens[b] < 0 || lens[b] > T)
            return nnc_node_fail(e, n, "sequence_lens[%lld] = %lld is outside [0, %lld]",
                                 (long long)b, (long long)lens[b], (long long)T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t src_t = t < lens[b] ? lens[b] - 1 - t : t;
            int64_t dst = (s->batch == 0 ? b * st[0] + t * st[1] : t * st[0] + b * st[1]);
            int64_t src = (s->batch == 0 ? b * st[0] + src_t * st[1] : src_t * st[0] + b * st[1]);
            memcpy((char *)out->data + dst * (int64_t)sz,
                   (const char *)in[0]->data + src * (int64_t)sz, (size_t)inner * sz);
        }
    return NNC_OK;
}
const nnc_op nnc_op_reversesequence = {
    "ReverseSequence", 2, 2, 1, 1, revseq_create, revseq_infer, revseq_run, free_state, 0};

/* ---- Hardmax --------------------------------------------------------------------------- */

static int hardmax_create(nnc_node *n, nnc_err *e)
{
    if (n->vin[0] && n->vin[0]->dtype && !nnc_dt_float(n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "element type %s is not supported",
                              nnc_dtname(n->vin[0]->dtype));
    int64_t *axis = malloc(sizeof(int64_t));
    if (!axis) return nnc_node_fail(e, n, "out of memory");
    n->state = axis;
    return nnc_attr_int(n, "axis", n->opset >= 13 ? -1 : 1, axis, e);
}

static int hardmax_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int64_t axis = 0;
    if (in[0]->ndim < 1) return nnc_node_fail(e, n, "input must have rank 1 or more");
    TRY(norm_axis(n, *(int64_t *)n->state, in[0]->ndim, &axis, e));
    *out = *in[0];
    out->data = NULL;
    return NNC_OK;
}

static int hardmax_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    int64_t axis = 0, st[NNC_MAXDIM];
    TRY(norm_axis(n, *(int64_t *)n->state, in[0]->ndim, &axis, e));
    strides_of(in[0], st);
    int64_t L, inner, outer;
    if (n->opset >= 13) {
        L = in[0]->dims[axis];
        inner = st[axis];
    } else { /* before 13: the input is coerced to 2-D at axis */
        inner = 1;
        int64_t rows = 1;
        for (int d = 0; d < axis; d++) rows *= in[0]->dims[d];
        L = rows ? nnc_numel(in[0]) / rows : 0;
    }
    outer = nnc_numel(in[0]) / (L * inner != 0 ? L * inner : 1);
    int dt = out->dtype;
    double zero = 0, one = 1;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t best = 0;
            double bv = 0;
            for (int64_t t = 0; t < L; t++) {
                double v = nnc_get_d(in[0]->data, dt, (o * L + t) * inner + i);
                if (t == 0 || v > bv || (v != v && bv == bv)) {
                    bv = v;
                    best = t;
                } /* the first NaN, as numpy */
            }
            for (int64_t t = 0; t < L; t++)
                nnc_store_d(out->data, dt, (o * L + t) * inner + i, 1, t == best ? &one : &zero);
        }
    return NNC_OK;
}
const nnc_op nnc_op_hardmax = {"Hardmax",     1,           1,          1, 1, hardmax_create,
                               hardmax_infer, hardmax_run, free_state, 0};

/* ---- Unique ---------------------------------------------------------------------------- */

typedef struct {
    int has_axis, sorted;
    int64_t axis;
} unique_state;

static int unique_create(nnc_node *n, nnc_err *e)
{
    unique_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    if (n->vin[0] && n->vin[0]->dtype && !nnc_dt_numeric(n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "element type %s is not supported",
                              nnc_dtname(n->vin[0]->dtype));
    int64_t so;
    TRY(nnc_attr_int(n, "sorted", 1, &so, e));
    if (so != 0 && so != 1)
        return nnc_node_fail(e, n, "attribute 'sorted' = %lld is not 0 or 1", (long long)so);
    s->sorted = (int)so;
    s->has_axis = nnc_attr_find(n, "axis") != NULL;
    return nnc_attr_int(n, "axis", 0, &s->axis, e);
}

/* The items Unique compares: elements, or slices along an axis. */
typedef struct {
    const nnc_tensor *x;
    int64_t items, outer, inner; /* item i = x[o][i][j] for o < outer, j < inner */
    int kind;                    /* 0 double, 1 int64, 2 uint64 */
} items_t;

static int item_cmp(const items_t *t, int64_t a, int64_t b)
{
    for (int64_t o = 0; o < t->outer; o++)
        for (int64_t j = 0; j < t->inner; j++) {
            int64_t pa = (o * t->items + a) * t->inner + j, pb = (o * t->items + b) * t->inner + j;
            int c;
            if (t->kind == 0) {
                double x = nnc_get_d(t->x->data, t->x->dtype, pa),
                       y = nnc_get_d(t->x->data, t->x->dtype, pb);
                int nx = x != x, ny = y != y; /* NaN sorts last and equals NaN, as numpy */
                c = nx || ny ? nx - ny : (x > y) - (x < y);
            } else {
                int64_t x, y;
                nnc_load_i(t->x->data, t->x->dtype, pa, 0, 1, &x);
                nnc_load_i(t->x->data, t->x->dtype, pb, 0, 1, &y);
                c = t->kind == 2 ? ((uint64_t)x > (uint64_t)y) - ((uint64_t)x < (uint64_t)y)
                                 : (x > y) - (x < y);
            }
            if (c) return c;
        }
    return 0;
}

static void item_sort(const items_t *t, int64_t *v, int64_t *tmp, int64_t n)
{
    if (n < 2) return;
    int64_t h = n / 2;
    item_sort(t, v, tmp, h);
    item_sort(t, v + h, tmp, n - h);
    int64_t i = 0, j = h, o = 0;
    while (i < h && j < n) tmp[o++] = item_cmp(t, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[o++] = v[i++];
    while (j < n) tmp[o++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof(int64_t));
}

/* first[g] (item of each unique group, in output order), count[g], inverse[item]; *ng groups. */
typedef struct {
    int64_t *first, *count, *inverse, ng;
} unique_res;

static int unique_compute(nnc_node *n, nnc_tensor *const *in, items_t *t, unique_res *r, nnc_err *e)
{
    const unique_state *s = n->state;
    const nnc_tensor *x = in[0];
    t->x = x;
    t->kind = nnc_dt_float(x->dtype) ? 0 : (x->dtype == DT_U64 ? 2 : 1);
    if (s->has_axis) {
        int64_t axis = 0, st[NNC_MAXDIM];
        TRY(norm_axis(n, s->axis, x->ndim, &axis, e));
        strides_of(x, st);
        t->items = x->dims[axis];
        t->inner = st[axis];
        t->outer = nnc_numel(x) / (t->items * t->inner != 0 ? t->items * t->inner : 1);
        if (t->items * t->inner == 0) t->outer = 0;
    } else {
        t->items = nnc_numel(x);
        t->inner = t->outer = 1;
    }
    int64_t k = t->items, m = k ? k : 1;
    int64_t *v = malloc((size_t)m * sizeof(int64_t)), *tmp = malloc((size_t)m * sizeof(int64_t));
    r->first = malloc((size_t)m * sizeof(int64_t));
    r->count = malloc((size_t)m * sizeof(int64_t));
    r->inverse = malloc((size_t)m * sizeof(int64_t));
    int64_t *gpos = malloc((size_t)m * sizeof(int64_t));
    if (!v || !tmp || !r->first || !r->count || !r->inverse || !gpos) {
        free(v);
        free(tmp);
        free(gpos);
        free(r->first);
        free(r->count);
        free(r->inverse);
        return nnc_node_fail(e, n, "out of memory");
    }
    for (int64_t i = 0; i < k; i++) v[i] = i;
    item_sort(t, v, tmp, k); /* stable: a group's first item is its first occurrence */
    int64_t ng = 0;
    for (int64_t i = 0; i < k; i++) {
        if (i == 0 || item_cmp(t, v[i - 1], v[i]) != 0) {
            r->first[ng] = v[i];
            r->count[ng] = 0;
            ng++;
        }
        r->count[ng - 1]++;
        r->inverse[v[i]] = ng - 1;
    }
    if (!s->sorted) {
        /* groups in order of first occurrence: sort group ids by their first item */
        for (int64_t i = 0; i < k; i++) tmp[i] = -1;
        for (int64_t g = 0; g < ng; g++) tmp[r->first[g]] = g;
        for (int64_t i = 0, g = 0; i < k; i++)
            if (tmp[i] >= 0) gpos[g++] = tmp[i]; /* gpos[new position] = old group */
        for (int64_t g = 0; g < ng; g++) tmp[gpos[g]] = g; /* old group -> new position */
        for (int64_t i = 0; i < k; i++) r->inverse[i] = tmp[r->inverse[i]];
        for (int64_t g = 0; g < ng; g++) {
            v[g] = r->first[gpos[g]];
            gpos[g] = r->count[gpos[g]];
        }
        memcpy(r->first, v, (size_t)ng * sizeof(int64_t));
        memcpy(r->count, gpos, (size_t)ng * sizeof(int64_t));
    }
    free(v);
    free(tmp);
    free(gpos);
    r->ng = ng;
    return NNC_OK;
}

static void unique_free(unique_res *r)
{
    free(r->first);
    free(r->count);
    free(r->inverse);
}

static int unique_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const unique_state *s = n->state;
    items_t t;
    unique_res r;
    if (!in[0]->data && nnc_numel(in[0]))
        return nnc_node_fail(e, n, "the input's data is needed for the output shape");
    TRY(unique_compute(n, in, &t, &r, e));
    unique_free(&r);
    out[0] = *in[0];
    out[0].data = NULL;
    if (s->has_axis) {
        int64_t axis = 0;
        TRY(norm_axis(n, s->axis, in[0]->ndim, &axis, e));
        out[0].dims[axis] = r.ng;
    } else {
        out[0].ndim = 1;
        out[0].dims[0] = r.ng;
    }
    for (int j = 1; j < n->nout && j < 4; j++) {
        out[j].dtype = DT_I64;
        out[j].ndim = 1;
        out[j].dims[0] = j == 2 ? t.items : r.ng;
        out[j].data = NULL;
    }
    return NNC_OK;
}

static int unique_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    items_t t;
    unique_res r;
    TRY(unique_compute(n, in, &t, &r, e));
    size_t sz = nnc_dtsize(in[0]->dtype);
    for (int64_t o = 0; o < t.outer; o++)
        for (int64_t g = 0; g < r.ng; g++)
            memcpy((char *)out[0].data + ((o * r.ng + g) * t.inner) * (int64_t)sz,
                   (const char *)in[0]->data + ((o * t.items + r.first[g]) * t.inner) * (int64_t)sz,
                   (size_t)t.inner * sz);
    if (n->nout > 1 && out[1].data) memcpy(out[1].data, r.first, (size_t)r.ng * sizeof(int64_t));
    if (n->nout > 2 && out[2].data)
        memcpy(out[2].data, r.inverse, (size_t)t.items * sizeof(int64_t));
    if (n->nout > 3 && out[3].data) memcpy(out[3].data, r.count, (size_t)r.ng * sizeof(int64_t));
    unique_free(&r);
    return NNC_OK;
}
const nnc_op nnc_op_unique = {"Unique",     1,          1,          1, 4, unique_create,
                              unique_infer, unique_run, free_state, 0};
