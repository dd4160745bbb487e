/* Elementwise ops with ONNX (numpy) broadcasting: unary float math, binary arithmetic and
 * comparisons, variadic Sum/Max/Min/Mean, Where, Cast, and the aliasing Identity/Dropout.
 * Broadcast shapes are coalesced so the inner loop runs over contiguous or scalar data. */
#include "nnc.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>

#define PAR_MIN 32768 /* elements below which threads cost more than they give */

/* ---- broadcast iteration ------------------------------------------------------------- */

typedef struct {
    int nd, nin;
    int64_t dims[NNC_MAXDIM];
    int64_t str[3][NNC_MAXDIM]; /* element strides per input, 0 where broadcast */
} bcast;

/* Strides of inputs against an output shape each input broadcasts to; 0 or error. */
static int bcast_setup(bcast *b, const nnc_tensor *out, nnc_tensor *const *ins, int nin)
{
    b->nin = nin;
    int nd = out->ndim;
    int64_t st[3][NNC_MAXDIM];
    for (int k = 0; k < nin; k++) {
        const nnc_tensor *t = ins[k];
        if (t->ndim > nd) return NNC_ERR;
        int64_t s = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int td = d - (nd - t->ndim);
            int64_t dim = td >= 0 ? t->dims[td] : 1;
            if (dim != 1 && dim != out->dims[d]) return NNC_ERR;
            st[k][d] = dim == 1 ? 0 : s;
            s *= dim;
        }
    }
    /* Coalesce: drop size-1 dims, merge neighbours that are contiguous for every input. */
    int m = 0;
    for (int d = 0; d < nd; d++) {
        if (out->dims[d] == 1) continue;
        if (m > 0) {
            int ok = 1;
            for (int k = 0; k < nin; k++)
                if (b->str[k][m - 1] != st[k][d] * out->dims[d]) { ok = 0; break; }
            if (ok) {
                b->dims[m - 1] *= out->dims[d];
                for (int k = 0; k < nin; k++) b->str[k][m - 1] = st[k][d];
                continue;
            }
        }
        b->dims[m] = out->dims[d];
        for (int k = 0; k < nin; k++) b->str[k][m] = st[k][d];
        m++;
    }
    if (m == 0) { b->dims[0] = 1; for (int k = 0; k < nin; k++) b->str[k][0] = 0; m = 1; }
    b->nd = m;
    return NNC_OK;
}

typedef void (*inner_fn)(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *o);

typedef struct {
    const bcast *b;
    const char *in[3];
    size_t isz[3], osz;
    char *out;
    inner_fn fn;
    void *ctx;
} bjob;

static void bcast_rows(void *arg, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    bjob *j = arg;
    const bcast *b = j->b;
    int nd = b->nd;
    int64_t inner = b->dims[nd - 1];
    int64_t is[3];
    for (int k = 0; k < b->nin; k++) is[k] = b->str[k][nd - 1];
    for (int64_t r = r0; r < r1; r++) {
        /* row r of the outer index space */
        int64_t rem = r, off[3] = {0, 0, 0};
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % b->dims[d];
            rem /= b->dims[d];
            for (int k = 0; k < b->nin; k++) off[k] += i * b->str[k][d];
        }
        const char *p[3];
        for (int k = 0; k < b->nin; k++) p[k] = j->in[k] + off[k] * (int64_t)j->isz[k];
        j->fn(j->ctx, inner, p, is, j->out + r * inner * (int64_t)j->osz);
    }
}

static void bcast_run(const bcast *b, nnc_tensor *const *ins, nnc_tensor *out, inner_fn fn, void *ctx)
{
    bjob j;
    j.b = b;
    for (int k = 0; k < b->nin; k++) { j.in[k] = ins[k]->data; j.isz[k] = nnc_dtsize(ins[k]->dtype); }
    j.out = out->data;
    j.osz = nnc_dtsize(out->dtype);
    j.fn = fn;
    j.ctx = ctx;
    int64_t inner = b->dims[b->nd - 1], rows = 1;
    for (int d = 0; d < b->nd - 1; d++) rows *= b->dims[d];
    if (rows == 1 && inner >= 2 * PAR_MIN) {
        /* one long row: split it into pieces */
        int64_t pieces = nnc_num_threads() * 4, len = (inner + pieces - 1) / pieces;
        bcast b2 = *b;
        b2.nd = 2;
        b2.dims[0] = (inner + len - 1) / len;
        b2.dims[1] = len;
        if (b2.dims[0] * len == inner) {
            for (int k = 0; k < b->nin; k++) { b2.str[k][0] = b->str[k][0] * len; b2.str[k][1] = b->str[k][0]; }
            j.b = &b2;
            nnc_parallel_for(b2.dims[0], 1, bcast_rows, &j);
            return;
        }
    }
    int64_t grain = 1 + PAR_MIN / (inner ? inner : 1);
    nnc_parallel_for(rows, grain, bcast_rows, &j);
}

/* ---- binary ops ---------------------------------------------------------------------- */

enum { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_EQ, B_GT, B_LT, B_MOD };

#define BIN_LOOP(T, TO, EXPR)                                                                \
    {                                                                                        \
        const T *a = (const T *)p[0], *b = (const T *)p[1];                                  \
        TO *o = (TO *)out;                                                                   \
        if (s[0] && s[1]) for (int64_t i = 0; i < n; i++) { T x = a[i], y = b[i]; o[i] = (TO)(EXPR); } \
        else if (s[1]) { T x = a[0]; for (int64_t i = 0; i < n; i++) { T y = b[i]; o[i] = (TO)(EXPR); } } \
        else if (s[0]) { T y = b[0]; for (int64_t i = 0; i < n; i++) { T x = a[i]; o[i] = (TO)(EXPR); } } \
        else { T x = a[0], y = b[0]; TO v = (TO)(EXPR); for (int64_t i = 0; i < n; i++) o[i] = v; } \
    }

static inline float pymodf(float x, float y)
{
    float r = fmodf(x, y);
    return (r != 0.f && ((r < 0.f) != (y < 0.f))) ? r + y : r;
}

/* Integer Mod: fmod=1 truncates like C; fmod=0 takes the divisor's sign. y == 0 gives 0. */
static inline int64_t imod(int64_t x, int64_t y, int fmod)
{
    if (y == 0) return 0;
    if (y == -1) return 0; /* INT64_MIN % -1 overflows */
    int64_t r = x % y;
    return (!fmod && r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}

static inline int64_t ipow64(int64_t b, int64_t e)
{
    if (e < 0) return b == 1 ? 1 : (b == -1 ? (e & 1 ? -1 : 1) : 0);
    int64_t r = 1;
    while (e) { if (e & 1) r *= b; b *= b; e >>= 1; }
    return r;
}

#define DEF_BIN(NAME, T)                                                                    \
    static void NAME(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *out) \
    {                                                                                       \
        int op = *(int *)ctx;                                                               \
        switch (op) {                                                                       \
        case B_ADD: BIN_LOOP(T, T, x + y) break;                                            \
        case B_SUB: BIN_LOOP(T, T, x - y) break;                                            \
        case B_MUL: BIN_LOOP(T, T, x * y) break;                                            \
        case B_MAX: BIN_LOOP(T, T, x > y ? x : y) break;                                    \
        case B_MIN: BIN_LOOP(T, T, x < y ? x : y) break;                                    \
        case B_EQ: BIN_LOOP(T, uint8_t, x == y) break;                                      \
        case B_GT: BIN_LOOP(T, uint8_t, x > y) break;                                       \
        case B_LT: BIN_LOOP(T, uint8_t, x < y) break;                                       \
        default: break;                                                                     \
        }                                                                                   \
    }

static void bin_f32(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *out)
{
    int op = *(int *)ctx;
    switch (op) {
    case B_ADD: BIN_LOOP(float, float, x + y) break;
    case B_SUB: BIN_LOOP(float, float, x - y) break;
    case B_MUL: BIN_LOOP(float, float, x * y) break;
    case B_DIV: BIN_LOOP(float, float, x / y) break;
    case B_POW: BIN_LOOP(float, float, y == 2.f ? x * x : (y == 0.5f ? sqrtf(x) : powf(x, y))) break;
    case B_MAX: BIN_LOOP(float, float, (x != x || x > y) ? x : y) break;
    case B_MIN: BIN_LOOP(float, float, (x != x || x < y) ? x : y) break;
    case B_EQ: BIN_LOOP(float, uint8_t, x == y) break;
    case B_GT: BIN_LOOP(float, uint8_t, x > y) break;
    case B_LT: BIN_LOOP(float, uint8_t, x < y) break;
    case B_MOD: BIN_LOOP(float, float, fmodf(x, y)) break;
    case B_MOD + 100: BIN_LOOP(float, float, pymodf(x, y)) break; /* fmod=0: sign of divisor */
    default: break;
    }
}
DEF_BIN(bin_i64_common, int64_t)
DEF_BIN(bin_i32_common, int32_t)
DEF_BIN(bin_u8_common, uint8_t)

static void bin_i64(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *out)
{
    int op = *(int *)ctx;
    if (op == B_DIV) BIN_LOOP(int64_t, int64_t, y == 0 || (y == -1 && x == INT64_MIN) ? 0 : x / y)
    else if (op == B_POW) BIN_LOOP(int64_t, int64_t, ipow64(x, y))
    else if (op == B_MOD) BIN_LOOP(int64_t, int64_t, imod(x, y, 1))
    else if (op == B_MOD + 100) BIN_LOOP(int64_t, int64_t, imod(x, y, 0))
    else bin_i64_common(ctx, n, p, s, out);
}
static void bin_i32(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *out)
{
    int op = *(int *)ctx;
    if (op == B_DIV) BIN_LOOP(int32_t, int32_t, y == 0 || (y == -1 && x == INT32_MIN) ? 0 : x / y)
    else if (op == B_POW) BIN_LOOP(int32_t, int32_t, (int32_t)ipow64(x, y))
    else if (op == B_MOD) BIN_LOOP(int32_t, int32_t, (int32_t)imod(x, y, 1))
    else if (op == B_MOD + 100) BIN_LOOP(int32_t, int32_t, (int32_t)imod(x, y, 0))
    else bin_i32_common(ctx, n, p, s, out);
}

/* Pow with a base and exponent of different types: computed in double, stored as the base. */
static double ld_num(const char *p, int dt, int64_t i)
{
    switch (dt) {
    case DT_F32: return ((const float *)p)[i];
    case DT_I64: return (double)((const int64_t *)p)[i];
    case DT_I32: return ((const int32_t *)p)[i];
    default: return 0;
    }
}

static void pow_mixed(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *out)
{
    const int *dts = ctx; /* {op, base type, exponent type} */
    for (int64_t i = 0; i < n; i++) {
        double v = pow(ld_num(p[0], dts[1], s[0] ? i : 0), ld_num(p[1], dts[2], s[1] ? i : 0));
        if (dts[1] == DT_F32) ((float *)out)[i] = (float)v;
        else if (dts[1] == DT_I64) ((int64_t *)out)[i] = v != v ? 0 : (int64_t)v;
        else ((int32_t *)out)[i] = v != v ? 0 : (int32_t)v;
    }
}

typedef struct { int op; int variadic; } bin_state;

static const struct { const char *name; int op; int variadic; } BIN_OPS[] = {
    {"Add", B_ADD, 0}, {"Sub", B_SUB, 0}, {"Mul", B_MUL, 0}, {"Div", B_DIV, 0}, {"Pow", B_POW, 0},
    {"Equal", B_EQ, 0}, {"Greater", B_GT, 0}, {"Less", B_LT, 0}, {"Mod", B_MOD, 0},
    {"Sum", B_ADD, 1}, {"Max", B_MAX, 1}, {"Min", B_MIN, 1}, {"Mean", B_ADD, 2},
};

static int is_cmp(int op) { return op == B_EQ || op == B_GT || op == B_LT; }

static int bin_create(nnc_node *n, nnc_err *e)
{
    bin_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->op = -1;
    for (size_t i = 0; i < sizeof BIN_OPS / sizeof BIN_OPS[0]; i++)
        if (!strcmp(BIN_OPS[i].name, n->op_type)) { s->op = BIN_OPS[i].op; s->variadic = BIN_OPS[i].variadic; }
    if (s->op < 0) return nnc_node_fail(e, n, "not an elementwise op");
    if (!s->variadic && n->nin != 2) return nnc_node_fail(e, n, "needs exactly 2 inputs, got %d", n->nin);
    if (s->op == B_MOD) {
        int64_t fm;
        TRY(nnc_attr_int(n, "fmod", 0, &fm, e));
        if (!fm) s->op = B_MOD + 100; /* the divisor's sign, as Python and numpy */
    }
    static const int num[] = {DT_F32, DT_I64, DT_I32, 0};
    static const int eq[] = {DT_F32, DT_I64, DT_I32, DT_BOOL, 0};
    static const int f32[] = {DT_F32, 0};
    static const int powexp[] = {DT_F32, DT_I64, DT_I32, 0};
    for (int i = 0; i < n->nin; i++) {
        if (s->op == B_POW) TRY(nnc_check_dtype(n, i, i == 0 ? num : powexp, e));
        else if (s->op == B_EQ) TRY(nnc_check_dtype(n, i, eq, e));
        else if (s->variadic == 2) TRY(nnc_check_dtype(n, i, f32, e));
        else TRY(nnc_check_dtype(n, i, num, e));
    }
    for (int i = 1; i < n->nin; i++)
        if (s->op != B_POW && n->vin[0] && n->vin[i] && n->vin[0]->dtype && n->vin[i]->dtype &&
            n->vin[0]->dtype != n->vin[i]->dtype)
            return nnc_node_fail(e, n, "inputs have different element types (%s and %s)",
                                 nnc_dtname(n->vin[0]->dtype), nnc_dtname(n->vin[i]->dtype));
    return NNC_OK;
}

static int bin_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const bin_state *s = n->state;
    int nin = n->nin;
    if (n->residual >= 0) nin = n->residual; /* not used for binary ops; kept for symmetry */
    nnc_tensor acc = *in[0];
    for (int i = 1; i < nin; i++) {
        nnc_tensor t;
        if (nnc_broadcast_shape(&acc, in[i], &t)) {
            char a[128], b[128];
            nnc_shape_str(&acc, a, sizeof a);
            nnc_shape_str(in[i], b, sizeof b);
            return nnc_node_fail(e, n, "shapes %s and %s do not broadcast", a, b);
        }
        if (s->op != B_POW && in[i]->dtype != in[0]->dtype)
            return nnc_node_fail(e, n, "inputs have different element types (%s and %s)",
                                 nnc_dtname(in[0]->dtype), nnc_dtname(in[i]->dtype));
        acc.ndim = t.ndim;
        memcpy(acc.dims, t.dims, sizeof t.dims);
    }
    int dt = in[0]->dtype;
    if (dt != DT_F32 && dt != DT_I64 && dt != DT_I32 && !(s->op == B_EQ && dt == DT_BOOL))
        return nnc_node_unsup(e, n, "element type %s is not supported", nnc_dtname(dt));
    if (s->op == B_POW && in[1]->dtype != DT_F32 && !(dt == DT_F32 && (in[1]->dtype == DT_I64 || in[1]->dtype == DT_I32)) && in[1]->dtype != dt)
        return nnc_node_unsup(e, n, "exponent type %s is not supported", nnc_dtname(in[1]->dtype));
    *out = acc;
    out->dtype = is_cmp(s->op) ? DT_BOOL : dt;
    out->data = NULL;
    return NNC_OK;
}

static inner_fn bin_kernel(int dt, int dt2, int op)
{
    (void)dt2; (void)op;
    switch (dt) {
    case DT_F32: return bin_f32;
    case DT_I64: return bin_i64;
    case DT_I32: return bin_i32;
    case DT_BOOL: return bin_u8_common;
    default: return NULL;
    }
}

static void fold_fn(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *out)
{
    /* out (=p[0]) op= p[1] ; used for inputs 2.. of variadic ops */
    bin_f32(ctx, n, p, s, out);
}

static int bin_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const bin_state *s = n->state;
    int op = s->op;
    int nin = n->nin;
    if (nin == 1) { /* variadic with one input: a copy */
        memcpy(out->data, in[0]->data, nnc_nbytes(in[0]));
    } else {
        bcast b;
        nnc_tensor *pair[2] = {in[0], in[1]};
        if (bcast_setup(&b, out, pair, 2)) return nnc_node_fail(e, n, "broadcast failed");
        inner_fn fn = bin_kernel(in[0]->dtype, in[1]->dtype, op);
        if (!fn) return nnc_node_fail(e, n, "unsupported element type");
        if (op == B_POW && in[0]->dtype != in[1]->dtype) {
            int ctx[3] = {op, in[0]->dtype, in[1]->dtype};
            bcast_run(&b, pair, out, pow_mixed, ctx);
        } else {
            bcast_run(&b, pair, out, fn, &op);
        }
        for (int i = 2; i < nin; i++) {
            nnc_tensor *p2[2] = {out, in[i]};
            if (bcast_setup(&b, out, p2, 2)) return nnc_node_fail(e, n, "broadcast failed");
            fn = bin_kernel(out->dtype, in[i]->dtype, op);
            bcast_run(&b, p2, out, out->dtype == DT_F32 ? fold_fn : fn, &op);
        }
    }
    if (s->variadic == 2) {
        float *o = out->data, k = 1.f / (float)nin;
        for (int64_t i = 0, m = nnc_numel(out); i < m; i++) o[i] *= k;
    }
    if (out->dtype == DT_F32) nnc_apply_act(out->data, nnc_numel(out), &n->act);
    return NNC_OK;
}

#define BINOP(VAR, NAME, MINI, MAXI) \
    const nnc_op VAR = {NAME, MINI, MAXI, 1, 1, bin_create, bin_infer, bin_run, NULL, 0};
static void bin_destroy(nnc_node *n) { free(n->state); n->state = NULL; }
#undef BINOP
#define BINOP(VAR, NAME, MINI, MAXI) \
    const nnc_op VAR = {NAME, MINI, MAXI, 1, 1, bin_create, bin_infer, bin_run, bin_destroy, 0};
BINOP(nnc_op_add, "Add", 2, 2)
BINOP(nnc_op_sub, "Sub", 2, 2)
BINOP(nnc_op_mul, "Mul", 2, 2)
BINOP(nnc_op_div, "Div", 2, 2)
BINOP(nnc_op_pow, "Pow", 2, 2)
BINOP(nnc_op_equal, "Equal", 2, 2)
BINOP(nnc_op_greater, "Greater", 2, 2)
BINOP(nnc_op_less, "Less", 2, 2)
BINOP(nnc_op_mod, "Mod", 2, 2)
BINOP(nnc_op_sum, "Sum", 1, NNC_MAXIO)
BINOP(nnc_op_max, "Max", 1, NNC_MAXIO)
BINOP(nnc_op_min, "Min", 1, NNC_MAXIO)
BINOP(nnc_op_mean, "Mean", 1, NNC_MAXIO)

int nnc_per_channel_affine(const nnc_node *n, int xin, int64_t C, int rank, float *scale,
                           float *shift)
{
    const bin_state *s = n->state;
    if (!s || n->nin != 2 || (s->op != B_ADD && s->op != B_MUL && s->op != B_SUB && s->op != B_DIV) || s->variadic)
        return 0;
    int cin = 1 - xin;
    if (!nnc_in_const(n, cin) || !nnc_in_static(n, cin)) return 0;
    const nnc_valinfo *c = n->vin[cin];
    if (c->dtype != DT_F32 || c->ndim > rank) return 0;
    if ((s->op == B_SUB || s->op == B_DIV) && cin != 1) return 0;
    int64_t k = nnc_info_numel(c);
    if (k != 1 && k != C) return 0;
    if (k == C && C != 1) {
        /* the non-1 dim must line up with axis 1 of x */
        for (int d = 0; d < c->ndim; d++) {
            int axis = d + (rank - c->ndim);
            if (c->dims[d] != 1 && axis != 1) return 0;
        }
    }
    const float *v = c->const_data;
    for (int64_t i = 0; i < C; i++) {
        float val = v[k == 1 ? 0 : i];
        switch (s->op) {
        case B_ADD: scale[i] = 1.f; shift[i] = val; break;
        case B_SUB: scale[i] = 1.f; shift[i] = -val; break;
        case B_MUL: scale[i] = val; shift[i] = 0.f; break;
        case B_DIV: scale[i] = 1.f / val; shift[i] = 0.f; break;
        }
    }
    return 1;
}

/* ---- Where --------------------------------------------------------------------------- */

static int where_create(nnc_node *n, nnc_err *e)
{
    static const int b[] = {DT_BOOL, 0};
    TRY(nnc_check_dtype(n, 0, b, e));
    if (n->vin[1] && n->vin[2] && n->vin[1]->dtype && n->vin[2]->dtype && n->vin[1]->dtype != n->vin[2]->dtype)
        return nnc_node_fail(e, n, "X and Y have different element types");
    if (n->vin[1] && n->vin[1]->dtype && !nnc_dtsize(n->vin[1]->dtype))
        return nnc_node_unsup(e, n, "element type %s is not supported", nnc_dtname(n->vin[1]->dtype));
    return NNC_OK;
}

static int where_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    if (in[0]->dtype != DT_BOOL) return nnc_node_fail(e, n, "condition must be bool");
    if (in[1]->dtype != in[2]->dtype || !nnc_dtsize(in[1]->dtype))
        return nnc_node_fail(e, n, "X and Y must have the same supported element type");
    nnc_tensor t, u;
    if (nnc_broadcast_shape(in[0], in[1], &t) || nnc_broadcast_shape(&t, in[2], &u))
        return nnc_node_fail(e, n, "condition, X and Y shapes do not broadcast");
    *out = u;
    out->dtype = in[1]->dtype;
    return NNC_OK;
}

static void where_fn(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *out)
{
    size_t sz = *(size_t *)ctx;
    const uint8_t *c = (const uint8_t *)p[0];
    for (int64_t i = 0; i < n; i++) {
        const char *src = c[s[0] ? i : 0] ? p[1] + (s[1] ? i : 0) * (int64_t)sz : p[2] + (s[2] ? i : 0) * (int64_t)sz;
        if (sz == 4) ((uint32_t *)out)[i] = *(const uint32_t *)src;
        else if (sz == 8) ((uint64_t *)out)[i] = *(const uint64_t *)src;
        else memcpy(out + i * (int64_t)sz, src, sz);
    }
}

static int where_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    bcast b;
    nnc_tensor *ins[3] = {in[0], in[1], in[2]};
    if (bcast_setup(&b, out, ins, 3)) return nnc_node_fail(e, n, "broadcast failed");
    size_t sz = nnc_dtsize(out->dtype);
    bcast_run(&b, ins, out, where_fn, &sz);
    return NNC_OK;
}

const nnc_op nnc_op_where = {"Where", 3, 3, 1, 1, where_create, where_infer, where_run, NULL, 0};

/* ---- unary float ops ----------------------------------------------------------------- */

enum { U_RELU, U_LEAKY, U_SIGMOID, U_TANH, U_CLIP, U_ERF, U_GELU, U_GELU_TANH, U_SQRT, U_EXP,
       U_LOG, U_NEG, U_ABS, U_RECIP, U_FLOOR, U_CEIL, U_SOFTPLUS };
typedef struct { int op; float a, b; } un_state;

static const struct { const char *name; int op; } UN_OPS[] = {
    {"Relu", U_RELU}, {"LeakyRelu", U_LEAKY}, {"Sigmoid", U_SIGMOID}, {"Tanh", U_TANH},
    {"Clip", U_CLIP}, {"Erf", U_ERF}, {"Gelu", U_GELU}, {"Sqrt", U_SQRT}, {"Exp", U_EXP},
    {"Log", U_LOG}, {"Neg", U_NEG}, {"Abs", U_ABS}, {"Reciprocal", U_RECIP}, {"Floor", U_FLOOR},
    {"Ceil", U_CEIL}, {"Softplus", U_SOFTPLUS},
};

static int un_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    un_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->op = -1;
    for (size_t i = 0; i < sizeof UN_OPS / sizeof UN_OPS[0]; i++)
        if (!strcmp(UN_OPS[i].name, n->op_type)) s->op = UN_OPS[i].op;
    if (s->op < 0) return nnc_node_fail(e, n, "not a unary op");
    TRY(nnc_check_dtype(n, 0, f32, e));
    if (s->op == U_LEAKY) TRY(nnc_attr_float(n, "alpha", 0.01f, &s->a, e));
    if (s->op == U_GELU) {
        char ap[16];
        TRY(nnc_attr_str(n, "approximate", "none", ap, sizeof ap, e));
        if (!strcmp(ap, "tanh")) s->op = U_GELU_TANH;
        else if (strcmp(ap, "none")) return nnc_node_fail(e, n, "attribute 'approximate' = '%s' is not 'none' or 'tanh'", ap);
    }
    if (s->op == U_CLIP) {
        s->a = -INFINITY;
        s->b = INFINITY;
        if (n->opset < 11) {
            TRY(nnc_attr_float(n, "min", -INFINITY, &s->a, e));
            TRY(nnc_attr_float(n, "max", INFINITY, &s->b, e));
        } else {
            for (int i = 1; i < n->nin && i < 3; i++) {
                if (!nnc_in_present(n, i)) continue;
                TRY(nnc_check_dtype(n, i, f32, e));
                int64_t k = nnc_info_numel(n->vin[i]);
                if (n->vin[i]->ndim > 0 && k != 1)
                    return nnc_node_fail(e, n, "'%s' must be a scalar", i == 1 ? "min" : "max");
            }
        }
    }
    return NNC_OK;
}

static int un_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    if (in[0]->dtype != DT_F32) return nnc_node_fail(e, n, "input must be float32, got %s", nnc_dtname(in[0]->dtype));
    for (int i = 1; i < n->nin; i++)
        if (in[i] && (in[i]->dtype != DT_F32 || nnc_numel(in[i]) != 1))
            return nnc_node_fail(e, n, "input %d must be a float32 scalar", i);
    *out = *in[0];
    return NNC_OK;
}

typedef struct { const un_state *s; const float *x; float *y; float lo, hi; } un_job;

static void un_range(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    un_job *j = arg;
    const float *x = j->x;
    float *y = j->y;
    switch (j->s->op) {
    case U_RELU: for (int64_t i = b; i < e; i++) y[i] = x[i] > 0.f ? x[i] : 0.f; break;
    case U_LEAKY: { float a = j->s->a; for (int64_t i = b; i < e; i++) y[i] = x[i] >= 0.f ? x[i] : a * x[i]; } break;
    case U_SIGMOID: nnc_vsigmoid(x + b, y + b, e - b); break;
    case U_TANH: nnc_vtanh(x + b, y + b, e - b); break;
    case U_CLIP: {
        float lo = j->lo, hi = j->hi;
        for (int64_t i = b; i < e; i++) { float v = x[i]; v = v < lo ? lo : v; y[i] = v > hi ? hi : v; }
    } break;
    case U_ERF: for (int64_t i = b; i < e; i++) y[i] = erff(x[i]); break;
    case U_GELU: for (int64_t i = b; i < e; i++) y[i] = 0.5f * x[i] * (1.f + erff(x[i] * 0.70710678118654752f)); break;
    case U_GELU_TANH:
        for (int64_t i = b; i < e; i++) {
            float v = x[i];
            y[i] = 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        }
        break;
    case U_SQRT: for (int64_t i = b; i < e; i++) y[i] = sqrtf(x[i]); break;
    case U_EXP: nnc_vexp(x + b, y + b, e - b); break;
    case U_LOG: for (int64_t i = b; i < e; i++) y[i] = logf(x[i]); break;
    case U_NEG: for (int64_t i = b; i < e; i++) y[i] = -x[i]; break;
    case U_ABS: for (int64_t i = b; i < e; i++) y[i] = fabsf(x[i]); break;
    case U_RECIP: for (int64_t i = b; i < e; i++) y[i] = 1.f / x[i]; break;
    case U_FLOOR: for (int64_t i = b; i < e; i++) y[i] = floorf(x[i]); break;
    case U_CEIL: for (int64_t i = b; i < e; i++) y[i] = ceilf(x[i]); break;
    case U_SOFTPLUS:
        for (int64_t i = b; i < e; i++) { float v = x[i]; y[i] = v > 0 ? v + log1pf(expf(-v)) : log1pf(expf(v)); }
        break;
    }
}

static int un_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x; (void)e;
    un_job j = {n->state, in[0]->data, out->data, -INFINITY, INFINITY};
    if (j.s->op == U_CLIP) {
        j.lo = j.s->a;
        j.hi = j.s->b;
        if (n->opset >= 11) {
            if (n->nin > 1 && in[1]) j.lo = *(const float *)in[1]->data;
            if (n->nin > 2 && in[2]) j.hi = *(const float *)in[2]->data;
        }
    }
    int64_t k = nnc_numel(out);
    int heavy = j.s->op != U_RELU && j.s->op != U_CLIP && j.s->op != U_LEAKY && j.s->op != U_NEG &&
                j.s->op != U_ABS;
    nnc_parallel_for(k, heavy ? PAR_MIN / 8 : PAR_MIN, un_range, &j);
    nnc_apply_act(out->data, k, &n->act);
    return NNC_OK;
}

static void un_destroy(nnc_node *n) { free(n->state); n->state = NULL; }

/* Activation parameters for the planner's fusion of Relu/Clip/LeakyRelu into producers;
 * 0 when the node's activation cannot be fused (e.g. Clip bounds computed at run time). */
int nnc_unary_as_act(const nnc_node *n, nnc_act *act)
{
    const un_state *s = n->state;
    if (!s) return 0;
    if (s->op == U_RELU) { act->kind = ACT_RELU; return 1; }
    if (s->op == U_LEAKY) { act->kind = ACT_LEAKY; act->a = s->a; return 1; }
    if (s->op == U_CLIP) {
        float lo = s->a, hi = s->b;
        if (n->opset >= 11) {
            for (int i = 1; i < n->nin && i < 3; i++) {
                if (!nnc_in_present(n, i)) continue;
                if (!nnc_in_const(n, i)) return 0;
                float v = *(const float *)n->vin[i]->const_data;
                if (i == 1) lo = v; else hi = v;
            }
        }
        act->kind = ACT_CLIP; act->a = lo; act->b = hi;
        return 1;
    }
    return 0;
}

#define UNOP(VAR, NAME, MAXI) \
    const nnc_op VAR = {NAME, 1, MAXI, 1, 1, un_create, un_infer, un_run, un_destroy, 0};
UNOP(nnc_op_relu, "Relu", 1)
UNOP(nnc_op_leakyrelu, "LeakyRelu", 1)
UNOP(nnc_op_sigmoid, "Sigmoid", 1)
UNOP(nnc_op_tanh, "Tanh", 1)
UNOP(nnc_op_clip, "Clip", 3)
UNOP(nnc_op_erf, "Erf", 1)
UNOP(nnc_op_gelu, "Gelu", 1)
UNOP(nnc_op_sqrt, "Sqrt", 1)
UNOP(nnc_op_exp, "Exp", 1)
UNOP(nnc_op_log, "Log", 1)
UNOP(nnc_op_neg, "Neg", 1)
UNOP(nnc_op_abs, "Abs", 1)
UNOP(nnc_op_reciprocal, "Reciprocal", 1)
UNOP(nnc_op_floor, "Floor", 1)
UNOP(nnc_op_ceil, "Ceil", 1)
UNOP(nnc_op_softplus, "Softplus", 1)

/* ---- Identity / Dropout (aliases) ---------------------------------------------------- */

static int ident_create(nnc_node *n, nnc_err *e)
{
    if (n->vin[0] && n->vin[0]->dtype && !nnc_dtsize(n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "element type %s is not supported", nnc_dtname(n->vin[0]->dtype));
    if (!strcmp(n->op_type, "Dropout")) {
        if (n->opset >= 12 && nnc_in_present(n, 2)) {
            if (!nnc_in_const(n, 2))
                return nnc_node_unsup(e, n, "training_mode must be a constant false (inference only)");
            if (*(const uint8_t *)n->vin[2]->const_data)
                return nnc_node_unsup(e, n, "training_mode = true is not supported (inference only)");
        }
        if (n->opset < 7) {
            int64_t test;
            TRY(nnc_attr_int(n, "is_test", 1, &test, e));
        }
    }
    return NNC_OK;
}

static int ident_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    if (!nnc_dtsize(in[0]->dtype)) return nnc_node_fail(e, n, "unsupported element type");
    out[0] = *in[0];
    if (n->nout > 1 && n->out[1] >= 0) {
        out[1] = *in[0];
        out[1].dtype = n->opset >= 10 ? DT_BOOL : in[0]->dtype; /* the mask: all kept */
    }
    return NNC_OK;
}

static int ident_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)in; (void)x; (void)e;
    if (n->nout > 1 && n->out[1] >= 0) {
        int64_t k = nnc_numel(&out[1]);
        if (out[1].dtype == DT_F32) for (int64_t i = 0; i < k; i++) ((float *)out[1].data)[i] = 1.f;
        else if (out[1].dtype == DT_BOOL) memset(out[1].data, 1, (size_t)k);
        else memset(out[1].data, 0, nnc_nbytes(&out[1]));
    }
    return NNC_OK;
}

const nnc_op nnc_op_identity = {"Identity", 1, 1, 1, 1, ident_create, ident_infer, ident_run, NULL, OPF_ALIAS};
const nnc_op nnc_op_dropout = {"Dropout", 1, 3, 1, 2, ident_create, ident_infer, ident_run, NULL, OPF_ALIAS};

/* ---- Cast ---------------------------------------------------------------------------- */

static int cast_ok(int dt)
{
    return dt == DT_F32 || dt == DT_F64 || dt == DT_I32 || dt == DT_I64 || dt == DT_BOOL ||
           dt == DT_U8 || dt == DT_I8 || dt == DT_I16 || dt == DT_U16 || dt == DT_U32 || dt == DT_U64;
}

static int cast_create(nnc_node *n, nnc_err *e)
{
    int64_t to;
    if (!nnc_attr_find(n, "to")) return nnc_node_fail(e, n, "attribute 'to' is required");
    TRY(nnc_attr_int(n, "to", 0, &to, e));
    if (!cast_ok((int)to)) return nnc_node_unsup(e, n, "casting to %s is not supported", nnc_dtname((int)to));
    if (n->vin[0] && n->vin[0]->dtype && !cast_ok(n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "casting from %s is not supported", nnc_dtname(n->vin[0]->dtype));
    int *s = malloc(sizeof(int));
    if (!s) return nnc_node_fail(e, n, "out of memory");
    *s = (int)to;
    n->state = s;
    return NNC_OK;
}

static int cast_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    if (!cast_ok(in[0]->dtype)) return nnc_node_unsup(e, n, "casting from %s is not supported", nnc_dtname(in[0]->dtype));
    *out = *in[0];
    out->dtype = *(int *)n->state;
    return NNC_OK;
}

static double load_d(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case DT_F32: return ((const float *)p)[i];
    case DT_F64: return ((const double *)p)[i];
    case DT_I32: return ((const int32_t *)p)[i];
    case DT_I64: return (double)((const int64_t *)p)[i];
    case DT_BOOL: case DT_U8: return ((const uint8_t *)p)[i];
    case DT_I8: return ((const int8_t *)p)[i];
    case DT_I16: return ((const int16_t *)p)[i];
    case DT_U16: return ((const uint16_t *)p)[i];
    case DT_U32: return ((const uint32_t *)p)[i];
    case DT_U64: return (double)((const uint64_t *)p)[i];
    }
    return 0;
}

static int64_t load_i(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case DT_I64: return ((const int64_t *)p)[i];
    case DT_U64: return (int64_t)((const uint64_t *)p)[i];
    case DT_I32: return ((const int32_t *)p)[i];
    case DT_U32: return ((const uint32_t *)p)[i];
    case DT_BOOL: case DT_U8: return ((const uint8_t *)p)[i];
    case DT_I8: return ((const int8_t *)p)[i];
    case DT_I16: return ((const int16_t *)p)[i];
    case DT_U16: return ((const uint16_t *)p)[i];
    }
    return 0;
}

/* float -> int without undefined behaviour for NaN and out-of-range values */
static int64_t f2i(double v)
{
    if (v != v) return INT64_MIN;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

static int cast_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)n; (void)x; (void)e;
    int from = in[0]->dtype, to = out->dtype;
    int64_t k = nnc_numel(out);
    const void *src = in[0]->data;
    void *dst = out->data;
    if (from == to) { memcpy(dst, src, nnc_nbytes(out)); return NNC_OK; }
    int ffloat = from == DT_F32 || from == DT_F64;
    for (int64_t i = 0; i < k; i++) {
        if (to == DT_F32) ((float *)dst)[i] = (float)load_d(src, from, i);
        else if (to == DT_F64) ((double *)dst)[i] = load_d(src, from, i);
        else if (to == DT_BOOL) ((uint8_t *)dst)[i] = ffloat ? load_d(src, from, i) != 0 : load_i(src, from, i) != 0;
        else {
            int64_t v = ffloat ? f2i(load_d(src, from, i)) : load_i(src, from, i);
            switch (to) {
            case DT_I64: ((int64_t *)dst)[i] = v; break;
            case DT_U64: ((uint64_t *)dst)[i] = (uint64_t)v; break;
            case DT_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
            case DT_U32: ((uint32_t *)dst)[i] = (uint32_t)v; break;
            case DT_I16: ((int16_t *)dst)[i] = (int16_t)v; break;
            case DT_U16: ((uint16_t *)dst)[i] = (uint16_t)v; break;
            case DT_I8: ((int8_t *)dst)[i] = (int8_t)v; break;
            case DT_U8: ((uint8_t *)dst)[i] = (uint8_t)v; break;
            }
        }
    }
    return NNC_OK;
}

static void cast_destroy(nnc_node *n) { free(n->state); n->state = NULL; }
const nnc_op nnc_op_cast = {"Cast", 1, 1, 1, 1, cast_create, cast_infer, cast_run, cast_destroy, 0};
