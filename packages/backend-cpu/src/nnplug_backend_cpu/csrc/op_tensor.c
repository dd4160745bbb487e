/* Shape and data-movement ops: Reshape, Flatten, Squeeze, Unsqueeze (views, no copy),
 * Transpose, Expand, Slice (one strided-copy routine), Concat, Split, Gather, Shape,
 * ConstantOfShape, Constant, Pad. Element types are handled by size. */
#include "nnc.h"
#include "ops.h"

#include <stdlib.h>

#define MAXVALS 4096 /* largest shape-like int list these ops read */

/* ---- strided copy -------------------------------------------------------------------- */

/* out[i...] = in[base + sum(i_d * st_d)] over dims (elements of size sz). */
typedef struct {
    int nd;
    int64_t dims[NNC_MAXDIM], st[NNC_MAXDIM];
    const char *in;
    char *out;
    size_t sz;
    int64_t rowlen;
} scopy_job;

static void scopy_rows(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    scopy_job *j = arg;
    int nd = j->nd;
    int64_t inner = j->dims[nd - 1], ist = j->st[nd - 1];
    size_t sz = j->sz;
    for (int64_t r = b; r < e; r++) {
        int64_t rem = r, off = 0;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % j->dims[d];
            rem /= j->dims[d];
            off += i * j->st[d];
        }
        const char *src = j->in + off * (int64_t)sz;
        char *dst = j->out + r * inner * (int64_t)sz;
        if (ist == 1) memcpy(dst, src, (size_t)inner * sz);
        else if (sz == 4)
            for (int64_t i = 0; i < inner; i++)
                ((uint32_t *)dst)[i] = *(const uint32_t *)(src + i * ist * 4);
        else if (sz == 8)
            for (int64_t i = 0; i < inner; i++)
                ((uint64_t *)dst)[i] = *(const uint64_t *)(src + i * ist * 8);
        else
            for (int64_t i = 0; i < inner; i++)
                memcpy(dst + i * (int64_t)sz, src + i * ist * (int64_t)sz, sz);
    }
}

static void strided_copy(const void *in, void *out, size_t sz, int nd, const int64_t *dims,
                         const int64_t *st)
{
    scopy_job j;
    int m = 0;
    for (int d = 0; d < nd; d++) {
        if (dims[d] == 0) return;
        if (dims[d] == 1) continue;
        if (m > 0 && j.st[m - 1] == st[d] * dims[d]) {
            j.dims[m - 1] *= dims[d];
            j.st[m - 1] = st[d];
            continue;
        }
        j.dims[m] = dims[d];
        j.st[m] = st[d];
        m++;
    }
    if (m == 0) {
        memcpy(out, in, sz);
        return;
    }
    j.nd = m;
    j.in = in;
    j.out = out;
    j.sz = sz;
    int64_t rows = 1;
    for (int d = 0; d < m - 1; d++) rows *= j.dims[d];
    nnc_parallel_for(rows, 1 + 16384 / j.dims[m - 1], scopy_rows, &j);
}

static int any_dtype(nnc_node *n, nnc_tensor *const *in, nnc_err *e)
{
    if (!nnc_dtsize(in[0]->dtype))
        return nnc_node_unsup(e, n, "element type %s is not supported", nnc_dtname(in[0]->dtype));
    return NNC_OK;
}

static int create_any(nnc_node *n, nnc_err *e)
{
    if (n->vin[0] && n->vin[0]->dtype && !nnc_dtsize(n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "element type %s is not supported",
                              nnc_dtname(n->vin[0]->dtype));
    return NNC_OK;
}

static void free_state(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int run_nothing(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)n;
    (void)in;
    (void)out;
    (void)x;
    (void)e;
    return NNC_OK; /* views: the planner points the output at the input */
}

/* ---- Reshape ------------------------------------------------------------------------- */

typedef struct {
    int allowzero, from_attr, nshape;
    int64_t shape[NNC_MAXDIM];
} reshape_state;

static int reshape_create(nnc_node *n, nnc_err *e)
{
    TRY(create_any(n, e));
    reshape_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int64_t az;
    TRY(nnc_attr_int(n, "allowzero", 0, &az, e));
    s->allowzero = az != 0;
    if (n->opset > 0 && n->opset < 5) {
        s->from_attr = 1;
        TRY(nnc_attr_ints(n, "shape", s->shape, NNC_MAXDIM, &s->nshape, e));
        if (s->nshape < 0) return nnc_node_fail(e, n, "attribute 'shape' is required");
    } else {
        if (n->nin < 2) return nnc_node_fail(e, n, "the shape input is required");
        static const int i64[] = {DT_I64, 0};
        TRY(nnc_check_dtype(n, 1, i64, e));
    }
    return NNC_OK;
}

static int reshape_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const reshape_state *s = n->state;
    TRY(any_dtype(n, in, e));
    int64_t shape[NNC_MAXDIM];
    int k;
    if (s->from_attr) {
        k = s->nshape;
        memcpy(shape, s->shape, sizeof shape);
    } else TRY(nnc_read_ints(n, in[1], "the shape input", shape, NNC_MAXDIM, &k, e));
    int64_t total = nnc_numel(in[0]), known = 1;
    int neg = -1;
    for (int i = 0; i < k; i++) {
        if (shape[i] == 0 && !s->allowzero) {
            if (i >= in[0]->ndim)
                return nnc_node_fail(e, n,
                                     "shape[%d] = 0 copies a dimension the input does not have", i);
            shape[i] = in[0]->dims[i];
        }
        if (shape[i] == -1) {
            if (neg >= 0) return nnc_node_fail(e, n, "the shape has more than one -1");
            neg = i;
        } else if (shape[i] < 0) {
            return nnc_node_fail(e, n, "shape[%d] = %lld is negative", i, (long long)shape[i]);
        } else {
            known *= shape[i];
        }
    }
    if (neg >= 0) {
        if (known == 0 || total % known)
            return nnc_node_fail(e, n,
                                 "cannot infer the -1 dimension: %lld elements into blocks of %lld",
                                 (long long)total, (long long)known);
        shape[neg] = total / known;
        known *= shape[neg];
    }
    if (known != total) {
        char a[128];
        nnc_shape_str(in[0], a, sizeof a);
        return nnc_node_fail(e, n, "cannot reshape %s (%lld elements) to %lld elements", a,
                             (long long)total, (long long)known);
    }
    out->dtype = in[0]->dtype;
    out->ndim = k;
    memcpy(out->dims, shape, (size_t)k * sizeof(int64_t));
    return NNC_OK;
}

const nnc_op nnc_op_reshape = {
    "Reshape",     1,           2,          1,         1,    reshape_create,
    reshape_infer, run_nothing, free_state, OPF_ALIAS, NULL, NULL};

/* ---- Flatten ------------------------------------------------------------------------- */

static int flatten_create(nnc_node *n, nnc_err *e)
{
    TRY(create_any(n, e));
    int64_t *axis = malloc(sizeof *axis);
    if (!axis) return nnc_node_fail(e, n, "out of memory");
    n->state = axis;
    TRY(nnc_attr_int(n, "axis", 1, axis, e));
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0 && (*axis < -x->ndim || *axis > x->ndim))
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)*axis, x->ndim);
    return NNC_OK;
}

static int flatten_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(any_dtype(n, in, e));
    int64_t axis = *(int64_t *)n->state;
    int r = in[0]->ndim;
    if (axis < -r || axis > r)
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)axis, r);
    if (axis < 0) axis += r;
    int64_t a = 1, b = 1;
    for (int d = 0; d < r; d++) {
        if (d < axis) a *= in[0]->dims[d];
        else b *= in[0]->dims[d];
    }
    out->dtype = in[0]->dtype;
    out->ndim = 2;
    out->dims[0] = a;
    out->dims[1] = b;
    return NNC_OK;
}

const nnc_op nnc_op_flatten = {
    "Flatten",     1,           1,          1,         1,    flatten_create,
    flatten_infer, run_nothing, free_state, OPF_ALIAS, NULL, NULL};

/* ---- Squeeze / Unsqueeze ------------------------------------------------------------- */

typedef struct {
    int from_input, naxes;
    int64_t axes[NNC_MAXDIM];
} axes_state;

static int axes_create(nnc_node *n, nnc_err *e)
{
    TRY(create_any(n, e));
    axes_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->from_input = n->opset >= 13;
    s->naxes = -1;
    if (!s->from_input) TRY(nnc_attr_ints(n, "axes", s->axes, NNC_MAXDIM, &s->naxes, e));
    else if (nnc_in_present(n, 1)) {
        static const int i64[] = {DT_I64, 0};
        TRY(nnc_check_dtype(n, 1, i64, e));
    }
    if (!strcmp(n->op_type, "Unsqueeze") && !s->from_input && s->naxes < 0)
        return nnc_node_fail(e, n, "attribute 'axes' is required");
    return NNC_OK;
}

static int get_axes(nnc_node *n, nnc_tensor *const *in, int64_t *axes, int *na, nnc_err *e)
{
    const axes_state *s = n->state;
    if (!s->from_input) {
        *na = s->naxes;
        memcpy(axes, s->axes, sizeof s->axes);
        return NNC_OK;
    }
    *na = -1;
    if (n->nin > 1 && in[1]) TRY(nnc_read_ints(n, in[1], "axes", axes, NNC_MAXDIM, na, e));
    return NNC_OK;
}

static int squeeze_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(any_dtype(n, in, e));
    int64_t axes[NNC_MAXDIM];
    int na, r = in[0]->ndim, drop[NNC_MAXDIM] = {0};
    TRY(get_axes(n, in, axes, &na, e));
    if (na < 0) {
        for (int d = 0; d < r; d++) drop[d] = in[0]->dims[d] == 1;
    } else {
        for (int i = 0; i < na; i++) {
            int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
            if (a < 0 || a >= r)
                return nnc_node_fail(e, n, "axis %lld is out of range for rank %d",
                                     (long long)axes[i], r);
            if (in[0]->dims[a] != 1)
                return nnc_node_fail(e, n, "cannot squeeze axis %lld of size %lld",
                                     (long long)axes[i], (long long)in[0]->dims[a]);
            drop[a] = 1;
        }
    }
    out->dtype = in[0]->dtype;
    out->ndim = 0;
    for (int d = 0; d < r; d++)
        if (!drop[d]) out->dims[out->ndim++] = in[0]->dims[d];
    return NNC_OK;
}

static int unsqueeze_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(any_dtype(n, in, e));
    int64_t axes[NNC_MAXDIM];
    int na, r;
    TRY(get_axes(n, in, axes, &na, e));
    if (na < 0) return nnc_node_fail(e, n, "axes are required");
    r = in[0]->ndim + na;
    if (r > NNC_MAXDIM)
        return nnc_node_unsup(e, n, "rank %d is not supported (at most %d)", r, NNC_MAXDIM);
    int ins[NNC_MAXDIM] = {0};
    for (int i = 0; i < na; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a < 0 || a >= r)
            return nnc_node_fail(e, n, "axis %lld is out of range for output rank %d",
                                 (long long)axes[i], r);
        if (ins[a]) return nnc_node_fail(e, n, "axis %lld is repeated", (long long)axes[i]);
        ins[a] = 1;
    }
    out->dtype = in[0]->dtype;
    out->ndim = r;
    for (int d = 0, k = 0; d < r; d++) out->dims[d] = ins[d] ? 1 : in[0]->dims[k++];
    return NNC_OK;
}

const nnc_op nnc_op_squeeze = {"Squeeze",     1,           2,          1,         1,    axes_create,
                               squeeze_infer, run_nothing, free_state, OPF_ALIAS, NULL, NULL};
const nnc_op nnc_op_unsqueeze = {
    "Unsqueeze",     1,           2,          1,         1,    axes_create,
    unsqueeze_infer, run_nothing, free_state, OPF_ALIAS, NULL, NULL};

/* ---- Transpose ----------------------------------------------------------------------- */

typedef struct {
    int nperm;
    int64_t perm[NNC_MAXDIM];
} perm_state;

static int transpose_create(nnc_node *n, nnc_err *e)
{
    TRY(create_any(n, e));
    perm_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(nnc_attr_ints(n, "perm", s->perm, NNC_MAXDIM, &s->nperm, e));
    const nnc_valinfo *x = n->vin[0];
    if (s->nperm >= 0 && x && x->ndim >= 0 && s->nperm != x->ndim)
        return nnc_node_fail(e, n, "attribute 'perm' has %d values for rank %d", s->nperm, x->ndim);
    int seen[NNC_MAXDIM] = {0};
    for (int i = 0; i < s->nperm; i++) {
        if (s->perm[i] < 0 || s->perm[i] >= s->nperm || seen[s->perm[i]])
            return nnc_node_fail(e, n, "attribute 'perm' is not a permutation of 0..%d",
                                 s->nperm - 1);
        seen[s->perm[i]] = 1;
    }
    return NNC_OK;
}

static void get_perm(const perm_state *s, int r, int64_t *perm)
{
    for (int i = 0; i < r; i++) perm[i] = s->nperm >= 0 ? s->perm[i] : r - 1 - i;
}

int nnc_transpose_swaps_last_two(const nnc_node *n, int rank)
{
    const perm_state *s = n->state;
    if (!s || rank < 2) return 0;
    int64_t perm[NNC_MAXDIM];
    if (s->nperm >= 0 && s->nperm != rank) return 0;
    get_perm(s, rank, perm);
    for (int i = 0; i < rank - 2; i++)
        if (perm[i] != i) return 0;
    return perm[rank - 2] == rank - 1 && perm[rank - 1] == rank - 2;
}

static int transpose_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const perm_state *s = n->state;
    TRY(any_dtype(n, in, e));
    int r = in[0]->ndim;
    if (s->nperm >= 0 && s->nperm != r)
        return nnc_node_fail(e, n, "attribute 'perm' has %d values for rank %d", s->nperm, r);
    int64_t perm[NNC_MAXDIM];
    get_perm(s, r, perm);
    out->dtype = in[0]->dtype;
    out->ndim = r;
    for (int i = 0; i < r; i++) out->dims[i] = in[0]->dims[perm[i]];
    return NNC_OK;
}

static int transpose_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x,
                         nnc_err *e)
{
    (void)x;
    (void)e;
    int r = in[0]->ndim;
    int64_t perm[NNC_MAXDIM], ist[NNC_MAXDIM], st[NNC_MAXDIM];
    get_perm(n->state, r, perm);
    int64_t s = 1;
    for (int d = r - 1; d >= 0; d--) {
        ist[d] = s;
        s *= in[0]->dims[d];
    }
    for (int i = 0; i < r; i++) st[i] = ist[perm[i]];
    if (nnc_numel(out) == 0) return NNC_OK;
    strided_copy(in[0]->data, out->data, nnc_dtsize(out->dtype), r, out->dims, st);
    return NNC_OK;
}

const nnc_op nnc_op_transpose = {
    "Transpose",   1,          1, 1,    1,   transpose_create, transpose_infer,
    transpose_run, free_state, 0, NULL, NULL};

/* ---- Expand -------------------------------------------------------------------------- */

static int expand_create(nnc_node *n, nnc_err *e)
{
    static const int i64[] = {DT_I64, 0};
    TRY(create_any(n, e));
    return nnc_check_dtype(n, 1, i64, e);
}

static int expand_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(any_dtype(n, in, e));
    nnc_tensor want;
    int k;
    TRY(nnc_read_ints(n, in[1], "the shape input", want.dims, NNC_MAXDIM, &k, e));
    want.ndim = k;
    for (int i = 0; i < k; i++)
        if (want.dims[i] < 0) return nnc_node_fail(e, n, "shape[%d] is negative", i);
    if (nnc_broadcast_shape(in[0], &want, out))
        return nnc_node_fail(e, n, "the input does not broadcast to the shape");
    out->dtype = in[0]->dtype;
    return NNC_OK;
}

static int expand_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)n;
    (void)x;
    (void)e;
    int64_t st[NNC_MAXDIM], s = 1;
    const nnc_tensor *t = in[0];
    for (int d = out->ndim - 1; d >= 0; d--) {
        int td = d - (out->ndim - t->ndim);
        int64_t dim = td >= 0 ? t->dims[td] : 1;
        st[d] = dim == 1 ? 0 : s;
        s *= dim;
    }
    if (nnc_numel(out) == 0) return NNC_OK;
    strided_copy(t->data, out->data, nnc_dtsize(out->dtype), out->ndim, out->dims, st);
    return NNC_OK;
}

const nnc_op nnc_op_expand = {"Expand",     2,          2,    1, 1,    expand_create,
                              expand_infer, expand_run, NULL, 0, NULL, NULL};

/* ---- Slice --------------------------------------------------------------------------- */

typedef struct {
    int from_attr, n;
    int64_t starts[NNC_MAXDIM], ends[NNC_MAXDIM], axes[NNC_MAXDIM];
    int naxes;
} slice_state;

static int slice_create(nnc_node *n, nnc_err *e)
{
    TRY(create_any(n, e));
    slice_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    if (n->opset > 0 && n->opset < 10) {
        int ns, ne;
        s->from_attr = 1;
        TRY(nnc_attr_ints(n, "starts", s->starts, NNC_MAXDIM, &ns, e));
        TRY(nnc_attr_ints(n, "ends", s->ends, NNC_MAXDIM, &ne, e));
        TRY(nnc_attr_ints(n, "axes", s->axes, NNC_MAXDIM, &s->naxes, e));
        if (ns < 0 || ne < 0)
            return nnc_node_fail(e, n, "attributes 'starts' and 'ends' are required");
        if (ns != ne || (s->naxes >= 0 && s->naxes != ns))
            return nnc_node_fail(e, n, "'starts', 'ends' and 'axes' must have the same length");
        s->n = ns;
    } else {
        if (n->nin < 3) return nnc_node_fail(e, n, "inputs 'starts' and 'ends' are required");
        static const int ints[] = {DT_I64, DT_I32, 0};
        for (int i = 1; i < n->nin; i++) TRY(nnc_check_dtype(n, i, ints, e));
    }
    return NNC_OK;
}

/* Output dims, start offsets and steps per axis. */
static int slice_plan(nnc_node *n, nnc_tensor *const *in, int64_t *odims, int64_t *start,
                      int64_t *step, nnc_err *e)
{
    const slice_state *s = n->state;
    const nnc_tensor *x = in[0];
    int r = x->ndim;
    int64_t st[NNC_MAXDIM], en[NNC_MAXDIM], ax[NNC_MAXDIM], sp[NNC_MAXDIM];
    int k, ke, ka = -1, ks = -1;
    if (s->from_attr) {
        k = ke = s->n;
        memcpy(st, s->starts, sizeof st);
        memcpy(en, s->ends, sizeof en);
        if (s->naxes >= 0) {
            ka = s->naxes;
            memcpy(ax, s->axes, sizeof ax);
        }
    } else {
        TRY(nnc_read_ints(n, in[1], "starts", st, NNC_MAXDIM, &k, e));
        TRY(nnc_read_ints(n, in[2], "ends", en, NNC_MAXDIM, &ke, e));
        if (n->nin > 3 && in[3]) TRY(nnc_read_ints(n, in[3], "axes", ax, NNC_MAXDIM, &ka, e));
        if (n->nin > 4 && in[4]) TRY(nnc_read_ints(n, in[4], "steps", sp, NNC_MAXDIM, &ks, e));
    }
    if (k != ke || (ka >= 0 && ka != k) || (ks >= 0 && ks != k))
        return nnc_node_fail(e, n, "starts, ends, axes and steps must have the same length");
    int done[NNC_MAXDIM] = {0};
    for (int d = 0; d < r; d++) {
        odims[d] = x->dims[d];
        start[d] = 0;
        step[d] = 1;
    }
    for (int i = 0; i < k; i++) {
        int64_t a = ka >= 0 ? ax[i] : i;
        if (a < 0) a += r;
        if (a < 0 || a >= r)
            return nnc_node_fail(e, n, "axis %lld is out of range for rank %d",
                                 (long long)(ka >= 0 ? ax[i] : i), r);
        if (done[a]) return nnc_node_fail(e, n, "axis %lld is repeated", (long long)a);
        done[a] = 1;
        int64_t dim = x->dims[a], stp = ks >= 0 ? sp[i] : 1;
        if (stp == 0) return nnc_node_fail(e, n, "steps must not be 0");
        int64_t b = st[i], f = en[i];
        if (b < 0) b += dim;
        if (f < 0) f += dim;
        int64_t cnt;
        if (stp > 0) {
            b = b < 0 ? 0 : (b > dim ? dim : b);
            f = f < 0 ? 0 : (f > dim ? dim : f);
            cnt = f > b ? (f - b - 1) / stp + 1 : 0; /* no overflow for huge steps */
        } else {
            b = b < 0 ? -1 : (b > dim - 1 ? dim - 1 : b);
            f = f < -1 ? -1 : (f > dim - 1 ? dim - 1 : f);
            /* -stp overflows for INT64_MIN: any step below -dim takes one element */
            cnt = b > f ? (stp < -dim ? 1 : (b - f - 1) / (-stp) + 1) : 0;
        }
        if (cnt <= 1) stp = 1; /* one element: the step is never applied (and cannot overflow) */
        odims[a] = cnt;
        start[a] = b;
        step[a] = stp;
    }
    return NNC_OK;
}

static int slice_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(any_dtype(n, in, e));
    int64_t start[NNC_MAXDIM], step[NNC_MAXDIM];
    TRY(slice_plan(n, in, out->dims, start, step, e));
    out->dtype = in[0]->dtype;
    out->ndim = in[0]->ndim;
    return NNC_OK;
}

static int slice_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    int64_t odims[NNC_MAXDIM], start[NNC_MAXDIM], step[NNC_MAXDIM], st[NNC_MAXDIM];
    TRY(slice_plan(n, in, odims, start, step, e));
    if (nnc_numel(out) == 0) return NNC_OK;
    int r = in[0]->ndim;
    int64_t s = 1, base = 0;
    for (int d = r - 1; d >= 0; d--) {
        st[d] = s * step[d];
        base += start[d] * s;
        s *= in[0]->dims[d];
    }
    size_t sz = nnc_dtsize(out->dtype);
    if (r == 0) {
        memcpy(out->data, in[0]->data, sz);
        return NNC_OK;
    }
    strided_copy((const char *)in[0]->data + base * (int64_t)sz, out->data, sz, r, odims, st);
    return NNC_OK;
}

const nnc_op nnc_op_slice = {"Slice",     1,         5,          1, 1,    slice_create,
                             slice_infer, slice_run, free_state, 0, NULL, NULL};

/* ---- Concat -------------------------------------------------------------------------- */

static int concat_create(nnc_node *n, nnc_err *e)
{
    TRY(create_any(n, e));
    int64_t *axis = malloc(sizeof *axis);
    if (!axis) return nnc_node_fail(e, n, "out of memory");
    n->state = axis;
    if (!nnc_attr_find(n, "axis") && n->opset >= 4)
        return nnc_node_fail(e, n, "attribute 'axis' is required");
    TRY(nnc_attr_int(n, "axis", 1, axis, e));
    for (int i = 1; i < n->nin; i++)
        if (n->vin[0] && n->vin[i] && n->vin[0]->dtype && n->vin[i]->dtype &&
            n->vin[i]->dtype != n->vin[0]->dtype)
            return nnc_node_fail(e, n, "inputs have different element types");
    return NNC_OK;
}

static int concat_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(any_dtype(n, in, e));
    int64_t axis = *(int64_t *)n->state;
    int r = in[0]->ndim;
    if (axis < -r || axis >= r)
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)axis, r);
    if (axis < 0) axis += r;
    *out = *in[0];
    out->dims[axis] = 0;
    for (int i = 0; i < n->nin; i++) {
        const nnc_tensor *t = in[i];
        if (t->ndim != r || t->dtype != in[0]->dtype)
            return nnc_node_fail(e, n,
                                 "input %d has rank %d / type %s, input 0 has rank %d / type %s", i,
                                 t->ndim, nnc_dtname(t->dtype), r, nnc_dtname(in[0]->dtype));
        for (int d = 0; d < r; d++)
            if (d != axis && t->dims[d] != in[0]->dims[d])
                return nnc_node_fail(e, n, "input %d has size %lld on axis %d, input 0 has %lld", i,
                                     (long long)t->dims[d], d, (long long)in[0]->dims[d]);
        out->dims[axis] += t->dims[axis];
    }
    return NNC_OK;
}

typedef struct {
    nnc_tensor *const *in;
    int nin;
    char *out;
    int64_t outer, obytes;
    int64_t ib[NNC_MAXIO], off[NNC_MAXIO];
} cat_job;

static void cat_tasks(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    cat_job *j = arg;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / j->nin;
        int i = (int)(t % j->nin);
        const char *src = (const char *)j->in[i]->data + o * j->ib[i];
        char *dst = j->out + o * j->obytes + j->off[i];
        if (j->ib[i] && src != dst) memcpy(dst, src, (size_t)j->ib[i]); /* else made in place */
    }
}

int nnc_concat_axis(const nnc_node *n, int rank)
{
    int64_t axis = *(const int64_t *)n->state;
    if (axis < 0) axis += rank;
    return axis >= 0 && axis < rank ? (int)axis : -1;
}

static int concat_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    (void)e;
    int64_t axis = *(int64_t *)n->state;
    if (axis < 0) axis += out->ndim;
    size_t sz = nnc_dtsize(out->dtype);
    cat_job j;
    j.in = in;
    j.nin = n->nin - (n->residual >= 0 ? 1 : 0);
    j.out = out->data;
    j.outer = 1;
    for (int d = 0; d < axis; d++) j.outer *= out->dims[d];
    int64_t inner = 1;
    for (int d = (int)axis + 1; d < out->ndim; d++) inner *= out->dims[d];
    j.obytes = out->dims[axis] * inner * (int64_t)sz;
    int64_t off = 0;
    for (int i = 0; i < j.nin; i++) {
        j.ib[i] = in[i]->dims[axis] * inner * (int64_t)sz;
        j.off[i] = off;
        off += j.ib[i];
    }
    int64_t tasks = j.outer * j.nin;
    nnc_parallel_for(tasks, 1 + (65536 * tasks) / (j.obytes * j.outer + 1), cat_tasks, &j);
    if (out->dtype == DT_F32) nnc_apply_act(out->data, nnc_numel(out), &n->act);
    return NNC_OK;
}

const nnc_op nnc_op_concat = {"Concat",     1,          NNC_MAXIO,  1, 1,    concat_create,
                              concat_infer, concat_run, free_state, 0, NULL, NULL};

/* ---- Split --------------------------------------------------------------------------- */

typedef struct {
    int64_t axis;
    int nsplit, from_input;
    int64_t split[NNC_MAXIO];
    int64_t num_outputs;
} split_state;

static int split_create(nnc_node *n, nnc_err *e)
{
    TRY(create_any(n, e));
    split_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(nnc_attr_int(n, "axis", 0, &s->axis, e));
    TRY(nnc_attr_int(n, "num_outputs", 0, &s->num_outputs, e));
    s->from_input = n->opset >= 13;
    s->nsplit = -1;
    if (!s->from_input) TRY(nnc_attr_ints(n, "split", s->split, NNC_MAXIO, &s->nsplit, e));
    if (s->nsplit >= 0 && s->nsplit != n->nout)
        return nnc_node_fail(e, n, "attribute 'split' has %d values for %d outputs", s->nsplit,
                             n->nout);
    if (s->num_outputs && s->num_outputs != n->nout)
        return nnc_node_fail(e, n, "attribute 'num_outputs' = %lld but the node has %d outputs",
                             (long long)s->num_outputs, n->nout);
    return NNC_OK;
}

static int split_sizes(nnc_node *n, nnc_tensor *const *in, int64_t *sizes, int *axis_out,
                       nnc_err *e)
{
    const split_state *s = n->state;
    int r = in[0]->ndim;
    if (s->axis < -r || s->axis >= r)
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)s->axis, r);
    int axis = (int)(s->axis < 0 ? s->axis + r : s->axis);
    int64_t dim = in[0]->dims[axis];
    int k = s->nsplit;
    if (k >= 0) memcpy(sizes, s->split, (size_t)k * sizeof(int64_t));
    else if (s->from_input && n->nin > 1 && in[1])
        TRY(nnc_read_ints(n, in[1], "split", sizes, NNC_MAXIO, &k, e));
    if (k >= 0) {
        if (k != n->nout)
            return nnc_node_fail(e, n, "split has %d values for %d outputs", k, n->nout);
        int64_t t = 0;
        for (int i = 0; i < k; i++) {
            if (sizes[i] < 0) return nnc_node_fail(e, n, "split sizes must not be negative");
            t += sizes[i];
        }
        if (t != dim)
            return nnc_node_fail(e, n, "split sizes add up to %lld, axis %d has %lld", (long long)t,
                                 axis, (long long)dim);
    } else {
        int64_t chunk = (dim + n->nout - 1) / n->nout;
        if (!s->num_outputs && dim % n->nout)
            return nnc_node_fail(e, n, "axis %d of size %lld does not split evenly into %d outputs",
                                 axis, (long long)dim, n->nout);
        for (int i = 0; i < n->nout; i++) {
            int64_t left = dim - i * chunk;
            sizes[i] = left < 0 ? 0 : (left < chunk ? left : chunk);
        }
    }
    *axis_out = axis;
    return NNC_OK;
}

static int split_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(any_dtype(n, in, e));
    int64_t sizes[NNC_MAXIO];
    int axis;
    TRY(split_sizes(n, in, sizes, &axis, e));
    for (int i = 0; i < n->nout; i++) {
        out[i] = *in[0];
        out[i].dims[axis] = sizes[i];
    }
    return NNC_OK;
}

static int split_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    int64_t sizes[NNC_MAXIO];
    int axis;
    TRY(split_sizes(n, in, sizes, &axis, e));
    size_t sz = nnc_dtsize(in[0]->dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= in[0]->dims[d];
    for (int d = axis + 1; d < in[0]->ndim; d++) inner *= in[0]->dims[d];
    int64_t ib = in[0]->dims[axis] * inner * (int64_t)sz, off = 0;
    for (int i = 0; i < n->nout; i++) {
        int64_t ob = sizes[i] * inner * (int64_t)sz;
        if (n->out[i] >= 0 && ob)
            for (int64_t o = 0; o < outer; o++)
                memcpy((char *)out[i].data + o * ob, (const char *)in[0]->data + o * ib + off,
                       (size_t)ob);
        off += ob;
    }
    return NNC_OK;
}

const nnc_op nnc_op_split = {"Split",     1,         2,          1, NNC_MAXIO, split_create,
                             split_infer, split_run, free_state, 0, NULL,      NULL};

/* ---- Gather -------------------------------------------------------------------------- */

static int gather_create(nnc_node *n, nnc_err *e)
{
    static const int ints[] = {DT_I64, DT_I32, 0};
    TRY(create_any(n, e));
    TRY(nnc_check_dtype(n, 1, ints, e));
    int64_t *axis = malloc(sizeof *axis);
    if (!axis) return nnc_node_fail(e, n, "out of memory");
    n->state = axis;
    TRY(nnc_attr_int(n, "axis", 0, axis, e));
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0 && (*axis < -x->ndim || *axis >= (x->ndim ? x->ndim : 1)))
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)*axis, x->ndim);
    return NNC_OK;
}

static int gather_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(any_dtype(n, in, e));
    int64_t axis = *(int64_t *)n->state;
    int r = in[0]->ndim;
    if (axis < -r || axis >= r)
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)axis, r);
    if (axis < 0) axis += r;
    if (in[1]->dtype != DT_I64 && in[1]->dtype != DT_I32)
        return nnc_node_fail(e, n, "indices must be int64 or int32");
    if (r - 1 + in[1]->ndim > NNC_MAXDIM)
        return nnc_node_unsup(e, n, "output rank over %d is not supported", NNC_MAXDIM);
    out->dtype = in[0]->dtype;
    out->ndim = 0;
    for (int d = 0; d < axis; d++) out->dims[out->ndim++] = in[0]->dims[d];
    for (int d = 0; d < in[1]->ndim; d++) out->dims[out->ndim++] = in[1]->dims[d];
    for (int d = (int)axis + 1; d < r; d++) out->dims[out->ndim++] = in[0]->dims[d];
    return NNC_OK;
}

static int gather_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    int64_t axis = *(int64_t *)n->state;
    if (axis < 0) axis += in[0]->ndim;
    size_t sz = nnc_dtsize(in[0]->dtype);
    int64_t outer = 1, inner = 1, dim = in[0]->dims[axis], ni = nnc_numel(in[1]);
    for (int d = 0; d < axis; d++) outer *= in[0]->dims[d];
    for (int d = (int)axis + 1; d < in[0]->ndim; d++) inner *= in[0]->dims[d];
    size_t blk = (size_t)inner * sz;
    for (int64_t i = 0; i < ni; i++) {
        int64_t idx = in[1]->dtype == DT_I64 ? ((const int64_t *)in[1]->data)[i]
                                             : ((const int32_t *)in[1]->data)[i];
        if (idx < -dim || idx >= dim)
            return nnc_node_fail(e, n, "index %lld is out of range for axis %lld of size %lld",
                                 (long long)idx, (long long)axis, (long long)dim);
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < ni; i++) {
            int64_t idx = in[1]->dtype == DT_I64 ? ((const int64_t *)in[1]->data)[i]
                                                 : ((const int32_t *)in[1]->data)[i];
            if (idx < 0) idx += dim;
            memcpy((char *)out->data + (o * ni + i) * (int64_t)blk,
                   (const char *)in[0]->data + (o * dim + idx) * (int64_t)blk, blk);
        }
    return NNC_OK;
}

const nnc_op nnc_op_gather = {"Gather",     2,          2,          1, 1,    gather_create,
                              gather_infer, gather_run, free_state, 0, NULL, NULL};

/* ---- Shape --------------------------------------------------------------------------- */

typedef struct {
    int64_t start, end;
    int has_end;
} shape_state;

static int shape_create(nnc_node *n, nnc_err *e)
{
    shape_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(nnc_attr_int(n, "start", 0, &s->start, e));
    s->has_end = nnc_attr_find(n, "end") != NULL;
    TRY(nnc_attr_int(n, "end", 0, &s->end, e));
    return NNC_OK;
}

static void shape_range(const shape_state *s, int r, int64_t *b, int64_t *f)
{
    int64_t st = s->start, en = s->has_end ? s->end : r;
    if (st < 0) st += r;
    if (en < 0) en += r;
    st = st < 0 ? 0 : (st > r ? r : st);
    en = en < 0 ? 0 : (en > r ? r : en);
    *b = st;
    *f = en > st ? en : st;
}

static int shape_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    (void)e;
    int64_t b, f;
    shape_range(n->state, in[0]->ndim, &b, &f);
    out->dtype = DT_I64;
    out->ndim = 1;
    out->dims[0] = f - b;
    return NNC_OK;
}

static int shape_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    (void)e;
    int64_t b, f;
    shape_range(n->state, in[0]->ndim, &b, &f);
    for (int64_t i = b; i < f; i++) ((int64_t *)out->data)[i - b] = in[0]->dims[i];
    return NNC_OK;
}

const nnc_op nnc_op_shape = {"Shape",     1,         1,          1, 1,    shape_create,
                             shape_infer, shape_run, free_state, 0, NULL, NULL};

/* ---- ConstantOfShape / Constant ------------------------------------------------------ */

typedef struct {
    int dtype;
    char value[8]; /* ConstantOfShape */
    nnc_tensor t;
    void *data; /* Constant */
} const_state;

static void const_destroy(nnc_node *n)
{
    const_state *s = n->state;
    if (!s) return;
    free(s->data);
    free(s);
    n->state = NULL;
}

static int cos_create(nnc_node *n, nnc_err *e)
{
    static const int i64[] = {DT_I64, 0};
    TRY(nnc_check_dtype(n, 0, i64, e));
    const_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->dtype = DT_F32;
    const nnc_attr *a = nnc_attr_find(n, "value");
    if (a) {
        if (a->kind != AK_TENSOR || a->count != 1 || !a->data)
            return nnc_node_fail(e, n, "attribute 'value' must be a one-element tensor");
        size_t sz = nnc_dtsize(a->tdtype);
        if (!sz)
            return nnc_node_unsup(e, n, "value type %s is not supported", nnc_dtname(a->tdtype));
        s->dtype = a->tdtype;
        memcpy(s->value, a->data, sz);
    }
    return NNC_OK;
}

static int cos_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const const_state *s = n->state;
    int k;
    TRY(nnc_read_ints(n, in[0], "the shape input", out->dims, NNC_MAXDIM, &k, e));
    for (int i = 0; i < k; i++)
        if (out->dims[i] < 0)
            return nnc_node_fail(e, n, "shape[%d] = %lld is negative", i, (long long)out->dims[i]);
    out->ndim = k;
    out->dtype = s->dtype;
    return NNC_OK;
}

static int cos_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)in;
    (void)x;
    (void)e;
    const const_state *s = n->state;
    size_t sz = nnc_dtsize(s->dtype);
    int64_t k = nnc_numel(out);
    char *o = out->data;
    int zero = 1;
    for (size_t i = 0; i < sz; i++) zero &= s->value[i] == 0;
    if (zero) memset(o, 0, (size_t)k * sz);
    else if (sz == 4) {
        uint32_t v;
        memcpy(&v, s->value, 4);
        for (int64_t i = 0; i < k; i++) ((uint32_t *)o)[i] = v;
    } else
        for (int64_t i = 0; i < k; i++) memcpy(o + i * (int64_t)sz, s->value, sz);
    return NNC_OK;
}

const nnc_op nnc_op_constantofshape = {
    "ConstantOfShape", 1, 1, 1, 1, cos_create, cos_infer, cos_run, const_destroy, 0, NULL, NULL};

static int constant_create(nnc_node *n, nnc_err *e)
{
    const_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    const nnc_attr *a = NULL;
    static const char *names[] = {"value", "value_float", "value_floats", "value_int",
                                  "value_ints"};
    for (int i = 0; i < 5 && !a; i++) a = nnc_attr_find(n, names[i]);
    if (!a) {
        if (nnc_attr_find(n, "sparse_value") || nnc_attr_find(n, "value_string") ||
            nnc_attr_find(n, "value_strings"))
            return nnc_node_unsup(e, n, "sparse and string constants are not supported");
        return nnc_node_fail(e, n,
                             "needs one of the attributes value, value_float(s), value_int(s)");
    }
    nnc_tensor *t = &s->t;
    switch (a->kind) {
    case AK_TENSOR:
        t->dtype = a->tdtype;
        t->ndim = a->tndim;
        if (t->ndim > NNC_MAXDIM) return nnc_node_unsup(e, n, "rank %d is not supported", t->ndim);
        memcpy(t->dims, a->tdims, sizeof t->dims);
        if (!nnc_dtsize(t->dtype))
            return nnc_node_unsup(e, n, "element type %s is not supported", nnc_dtname(t->dtype));
        if (nnc_numel(t) != a->count || (a->count && !a->data))
            return nnc_node_unsup(
                e, n, "the value tensor has no data (tensors stored externally are not supported)");
        break;
    case AK_FLOAT:
        t->dtype = DT_F32;
        t->ndim = 0;
        break;
    case AK_INT:
        t->dtype = DT_I64;
        t->ndim = 0;
        break;
    case AK_FLOATS:
        t->dtype = DT_F32;
        t->ndim = 1;
        t->dims[0] = a->count;
        break;
    case AK_INTS:
        t->dtype = DT_I64;
        t->ndim = 1;
        t->dims[0] = a->count;
        break;
    default: return nnc_node_fail(e, n, "attribute '%s' has the wrong type", a->name);
    }
    size_t nb = nnc_nbytes(t);
    s->data = malloc(nb ? nb : 1);
    if (!s->data) return nnc_node_fail(e, n, "out of memory");
    if (nb) memcpy(s->data, a->data, nb);
    return NNC_OK;
}

static int constant_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    (void)in;
    (void)e;
    const const_state *s = n->state;
    *out = s->t;
    out->data = NULL;
    return NNC_OK;
}

static int constant_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x,
                        nnc_err *e)
{
    (void)in;
    (void)x;
    (void)e;
    const const_state *s = n->state;
    memcpy(out->data, s->data, nnc_nbytes(&s->t));
    return NNC_OK;
}

const nnc_op nnc_op_constant = {
    "Constant",    0, 0,    1,   1, constant_create, constant_infer, constant_run,
    const_destroy, 0, NULL, NULL};

/* ---- Pad ----------------------------------------------------------------------------- */

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };
typedef struct {
    int mode, legacy, npads;
    int64_t pads[2 * NNC_MAXDIM];
    float value;
} pad_state;

static int pad_create(nnc_node *n, nnc_err *e)
{
    TRY(create_any(n, e));
    pad_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    char mode[16];
    TRY(nnc_attr_str(n, "mode", "constant", mode, sizeof mode, e));
    if (!strcmp(mode, "constant")) s->mode = PAD_CONSTANT;
    else if (!strcmp(mode, "reflect")) s->mode = PAD_REFLECT;
    else if (!strcmp(mode, "edge")) s->mode = PAD_EDGE;
    else if (!strcmp(mode, "wrap")) s->mode = PAD_WRAP;
    else
        return nnc_node_fail(e, n, "attribute 'mode' = '%s' is not constant, reflect, edge or wrap",
                             mode);
    s->legacy = n->opset > 0 && n->opset < 11;
    if (s->legacy) {
        TRY(nnc_attr_ints(n, "pads", s->pads, 2 * NNC_MAXDIM, &s->npads, e));
        if (s->npads < 0) return nnc_node_fail(e, n, "attribute 'pads' is required");
        TRY(nnc_attr_float(n, "value", 0.f, &s->value, e));
        static const int f32[] = {DT_F32, 0};
        TRY(nnc_check_dtype(n, 0, f32, e));
    } else {
        static const int i64[] = {DT_I64, 0};
        if (n->nin < 2) return nnc_node_fail(e, n, "the pads input is required");
        TRY(nnc_check_dtype(n, 1, i64, e));
        if (nnc_in_present(n, 3)) {
            static const int ax[] = {DT_I64, DT_I32, 0};
            TRY(nnc_check_dtype(n, 3, ax, e));
        }
    }
    return NNC_OK;
}

/* Full begin/end pads per axis of x. */
static int pad_get(nnc_node *n, nnc_tensor *const *in, int64_t *pb, int64_t *pe, nnc_err *e)
{
    const pad_state *s = n->state;
    int r = in[0]->ndim;
    int64_t pads[2 * NNC_MAXDIM], axes[NNC_MAXDIM];
    int np, na = -1;
    if (s->legacy) {
        np = s->npads;
        memcpy(pads, s->pads, sizeof pads);
    } else TRY(nnc_read_ints(n, in[1], "pads", pads, 2 * NNC_MAXDIM, &np, e));
    if (!s->legacy && n->nin > 3 && in[3])
        TRY(nnc_read_ints(n, in[3], "axes", axes, NNC_MAXDIM, &na, e));
    int k = na >= 0 ? na : r;
    if (np != 2 * k)
        return nnc_node_fail(e, n, "pads has %d values; %d axes need %d", np, k, 2 * k);
    for (int d = 0; d < r; d++) pb[d] = pe[d] = 0;
    for (int i = 0; i < k; i++) {
        int64_t a = na >= 0 ? axes[i] : i;
        if (a < 0) a += r;
        if (a < 0 || a >= r) return nnc_node_fail(e, n, "axis out of range for rank %d", r);
        pb[a] = pads[i];
        pe[a] = pads[k + i];
    }
    for (int d = 0; d < r; d++) {
        if (in[0]->dims[d] + pb[d] + pe[d] < 0)
            return nnc_node_fail(e, n, "negative pads remove more than axis %d has", d);
        if (s->mode != PAD_CONSTANT && in[0]->dims[d] == 0 && pb[d] + pe[d] > 0)
            return nnc_node_fail(e, n, "cannot pad an empty axis in mode reflect/edge/wrap");
    }
    return NNC_OK;
}

static int pad_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(any_dtype(n, in, e));
    int64_t pb[NNC_MAXDIM], pe[NNC_MAXDIM];
    TRY(pad_get(n, in, pb, pe, e));
    *out = *in[0];
    for (int d = 0; d < in[0]->ndim; d++) out->dims[d] = in[0]->dims[d] + pb[d] + pe[d];
    if (n->nin > 2 && in[2] && in[2]->dtype != in[0]->dtype)
        return nnc_node_fail(e, n, "constant_value must have the input's element type");
    return NNC_OK;
}

/* Source index along an axis for output index o, or -1 for the constant value. */
static int64_t pad_src(int mode, int64_t o, int64_t pb, int64_t dim)
{
    int64_t i = o - pb;
    if (i >= 0 && i < dim) return i;
    if (mode == PAD_CONSTANT) return -1;
    if (mode == PAD_EDGE) return i < 0 ? 0 : dim - 1;
    if (mode == PAD_WRAP) {
        i %= dim;
        return i < 0 ? i + dim : i;
    }
    if (dim == 1) return 0;
    int64_t period = 2 * (dim - 1);
    i %= period;
    if (i < 0) i += period;
    return i < dim ? i : period - i;
}

static int pad_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const pad_state *s = n->state;
    int64_t pb[NNC_MAXDIM], pe[NNC_MAXDIM];
    TRY(pad_get(n, in, pb, pe, e));
    size_t sz = nnc_dtsize(out->dtype);
    char cval[8] = {0};
    if (s->legacy) memcpy(cval, &s->value, 4);
    else if (n->nin > 2 && in[2] && nnc_numel(in[2]) >= 1) memcpy(cval, in[2]->data, sz);
    int r = out->ndim;
    int64_t total = nnc_numel(out);
    if (total == 0) return NNC_OK;
    if (r == 0) {
        memcpy(out->data, in[0]->data, sz);
        return NNC_OK;
    }
    int64_t ist[NNC_MAXDIM], stv = 1;
    for (int d = r - 1; d >= 0; d--) {
        ist[d] = stv;
        stv *= in[0]->dims[d];
    }
    int64_t W = out->dims[r - 1], rows = total / W;
    int64_t *map = malloc((size_t)W * sizeof(int64_t));
    if (!map) return nnc_node_fail(e, n, "out of memory");
    for (int64_t o = 0; o < W; o++) map[o] = pad_src(s->mode, o, pb[r - 1], in[0]->dims[r - 1]);
    for (int64_t row = 0; row < rows; row++) {
        int64_t rem = row, off = 0;
        int constant = 0;
        for (int d = r - 2; d >= 0; d--) {
            int64_t o = rem % out->dims[d];
            rem /= out->dims[d];
            int64_t i = pad_src(s->mode, o, pb[d], in[0]->dims[d]);
            if (i < 0) {
                constant = 1;
                break;
            }
            off += i * ist[d];
        }
        char *dst = (char *)out->data + row * W * (int64_t)sz;
        const char *src = (const char *)in[0]->data + off * (int64_t)sz;
        for (int64_t o = 0; o < W; o++) {
            if (constant || map[o] < 0) memcpy(dst + o * (int64_t)sz, cval, sz);
            else memcpy(dst + o * (int64_t)sz, src + map[o] * (int64_t)sz, sz);
        }
    }
    free(map);
    return NNC_OK;
}

const nnc_op nnc_op_pad = {"Pad",     1,       4,          1, 1,    pad_create,
                           pad_infer, pad_run, free_state, 0, NULL, NULL};
