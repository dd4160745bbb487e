/* Elementwise ops with ONNX (numpy) broadcasting: unary float math, binary arithmetic and
 * comparisons, variadic Sum/Max/Min/Mean, Where, Cast, and the aliasing Identity/Dropout.
 * Broadcast shapes are coalesced so the inner loop runs over contiguous or scalar data. */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#define PAR_MIN 32768 /* elements below which threads cost more than they give */

/* ---- broadcast iteration ------------------------------------------------------------- */

typedef nnc_bcast bcast;
typedef nnc_inner_fn inner_fn;

/* Strides of inputs against an output shape each input broadcasts to; 0 or error. */
int nnc_bcast_setup(bcast *b, const nnc_tensor *out, nnc_tensor *const *ins, int nin)
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
                if (b->str[k][m - 1] != st[k][d] * out->dims[d]) {
                    ok = 0;
                    break;
                }
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
    if (m == 0) {
        b->dims[0] = 1;
        for (int k = 0; k < nin; k++) b->str[k][0] = 0;
        m = 1;
    }
    b->nd = m;
    return NNC_OK;
}


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

void nnc_bcast_run(const bcast *b, nnc_tensor *const *ins, nnc_tensor *out, inner_fn fn, void *ctx)
{
    bjob j;
    j.b = b;
    for (int k = 0; k < b->nin; k++) {
        j.in[k] = ins[k]->data;
        j.isz[k] = nnc_dtsize(ins[k]->dtype);
    }
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
            for (int k = 0; k < b->nin; k++) {
                b2.str[k][0] = b->str[k][0] * len;
                b2.str[k][1] = b->str[k][0];
            }
            j.b = &b2;
            nnc_parallel_for(b2.dims[0], 1, bcast_rows, &j);
            return;
        }
    }
    int64_t grain = 1 + PAR_MIN / (inner ? inner : 1);
    nnc_parallel_for(rows, grain, bcast_rows, &j);
}

/* ---- binary ops ---------------------------------------------------------------------- */
#define bcast_setup nnc_bcast_setup
#define bcast_run nnc_bcast_run


#define BIN_LOOP(T, TO, EXPR)                               \
    {                                                       \
        const T *a = (const T *)p[0], *b = (const T *)p[1]; \
        TO *o = (TO *)out;                                  \
        if (s[0] && s[1])                                   \
            for (int64_t i = 0; i < n; i++) {               \
                T x = a[i], y = b[i];                       \
                o[i] = (TO)(EXPR);                          \
            }                                               \
        else if (s[1]) {                                    \
            T x = a[0];                                     \
            for (int64_t i = 0; i < n; i++) {               \
                T y = b[i];                                 \
                o[i] = (TO)(EXPR);                          \
            }                                               \
        } else if (s[0]) {                                  \
            T y = b[0];                                     \
            for (int64_t i = 0; i < n; i++) {               \
                T x = a[i];                                 \
                o[i] = (TO)(EXPR);                          \
            }                                               \
        } else {                                            \
            T x = a[0], y = b[0];                           \
            TO v = (TO)(EXPR);                              \
            for (int64_t i = 0; i < n; i++) o[i] = v;       \
        }                                                   \
    }

static inline float pymodf(float x, float y)
{
    float r = fmodf(x, y);
    if (r == 0.f) return copysignf(0.f, y); /* as numpy: a zero takes the divisor's sign */
    return (r < 0.f) != (y < 0.f) ? r + y : r;
}

/* float32 fast paths; every other type goes through nnc_arith_typed (op_arith.c). */
static void bin_f32(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *out)
{
    int op = *(int *)ctx;
    // clang-format off: BIN_LOOP's last argument is an expression (x * y is no declaration)
    switch (op) {
    case B_ADD: BIN_LOOP(float, float, x + y) break;
    case B_SUB: BIN_LOOP(float, float, x - y) break;
    case B_MUL: BIN_LOOP(float, float, x * y) break;
    case B_DIV: BIN_LOOP(float, float, x / y) break;
    /* x^2 and x^3 as products (onnxruntime's answers to the bit; GPT-2's GELU cubes, and powf
     * took 0.14 ms for its 16K values), x^0.5 as sqrt, but pow's answers at -inf (+inf) and -0
     * (+0), which onnxruntime gives */
    case B_POW:
        BIN_LOOP(float, float,
                 y == 2.f   ? x * x
                 : y == 3.f ? x * x * x
                            : (y == 0.5f ? (x == -INFINITY ? INFINITY : sqrtf(x) + 0.f) : powf(x, y)))
        break;
    case B_MAX: BIN_LOOP(float, float, (x != x || x > y) ? x : y) break;
    case B_MIN: BIN_LOOP(float, float, (x != x || x < y) ? x : y) break;
    case B_EQ: BIN_LOOP(float, uint8_t, x == y) break;
    case B_GT: BIN_LOOP(float, uint8_t, x > y) break;
    case B_LT: BIN_LOOP(float, uint8_t, x < y) break;
    case B_GE: BIN_LOOP(float, uint8_t, x >= y) break;
    case B_LE: BIN_LOOP(float, uint8_t, x <= y) break;
    case B_MOD: BIN_LOOP(float, float, fmodf(x, y)) break;
    case B_PYMOD: BIN_LOOP(float, float, pymodf(x, y)) break; /* fmod=0: sign of divisor */
    case B_PRELU: BIN_LOOP(float, float, x < 0.f ? x * y : x) break;
    default: break;
    }
    // clang-format on
}

typedef struct {
    int op;
    int variadic;
} bin_state;

/* Element types per op family (ONNX's type constraints, as onnxruntime's CPU provider). */
enum { K_NUM, K_FLOAT, K_CMP, K_EQ, K_BOOL, K_INT, K_UINT, K_POW, K_PRELU };
static const struct {
    const char *name;
    int op;
    int variadic;
    int kind;
} BIN_OPS[] = {
    {"Add", B_ADD, 0, K_NUM},
    {"Sub", B_SUB, 0, K_NUM},
    {"Mul", B_MUL, 0, K_NUM},
    {"Div", B_DIV, 0, K_NUM},
    {"Pow", B_POW, 0, K_POW},
    {"Equal", B_EQ, 0, K_EQ},
    {"Greater", B_GT, 0, K_CMP},
    {"Less", B_LT, 0, K_CMP},
    {"GreaterOrEqual", B_GE, 0, K_CMP},
    {"LessOrEqual", B_LE, 0, K_CMP},
    {"Mod", B_MOD, 0, K_NUM},
    {"And", B_AND, 0, K_BOOL},
    {"Or", B_OR, 0, K_BOOL},
    {"Xor", B_XOR, 0, K_BOOL},
    {"BitwiseAnd", B_BAND, 0, K_INT},
    {"BitwiseOr", B_BOR, 0, K_INT},
    {"BitwiseXor", B_BXOR, 0, K_INT},
    {"BitShift", B_SHL, 0, K_INT}, /* signed types from opset 28 */
    {"PRelu", B_PRELU, 0, K_PRELU},
    {"Sum", B_ADD, 1, K_FLOAT},
    {"Max", B_MAX, 1, K_NUM},
    {"Min", B_MIN, 1, K_NUM},
    {"Mean", B_ADD, 2, K_FLOAT},
};

static int bin_kind(const nnc_node *n)
{
    for (size_t i = 0; i < sizeof BIN_OPS / sizeof BIN_OPS[0]; i++)
        if (!strcmp(BIN_OPS[i].name, n->op_type)) return BIN_OPS[i].kind;
    return -1;
}

static int is_cmp(int op)
{
    return op == B_EQ || op == B_GT || op == B_LT || op == B_GE || op == B_LE;
}

static int kind_allows(int kind, int dt)
{
    switch (kind) {
    case K_NUM:
    case K_POW: return nnc_dt_numeric(dt);
    case K_FLOAT: return nnc_dt_float(dt);
    case K_CMP: return nnc_dt_numeric(dt);
    case K_EQ: return nnc_dt_numeric(dt) || dt == DT_BOOL;
    case K_BOOL: return dt == DT_BOOL;
    case K_INT: return nnc_dt_int(dt);
    case K_UINT: return nnc_dt_unsigned(dt);
    case K_PRELU:
        return nnc_dt_float(dt) || dt == DT_I32 || dt == DT_I64 || dt == DT_U32 || dt == DT_U64;
    }
    return 0;
}

static int bin_create(nnc_node *n, nnc_err *e)
{
    bin_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->op = -1;
    int kind = bin_kind(n);
    for (size_t i = 0; i < sizeof BIN_OPS / sizeof BIN_OPS[0]; i++)
        if (!strcmp(BIN_OPS[i].name, n->op_type)) {
            s->op = BIN_OPS[i].op;
            s->variadic = BIN_OPS[i].variadic;
        }
    if (s->op < 0) return nnc_node_fail(e, n, "not an elementwise op");
    if (!s->variadic && n->nin != 2)
        return nnc_node_fail(e, n, "needs exactly 2 inputs, got %d", n->nin);
    if (s->op == B_MOD) {
        int64_t fm;
        TRY(nnc_attr_int(n, "fmod", 0, &fm, e));
        if (fm != 0 && fm != 1)
            return nnc_node_fail(e, n, "attribute 'fmod' = %lld is not 0 or 1", (long long)fm);
        if (!fm) s->op = B_PYMOD; /* the divisor's sign, as Python and numpy */
    }
    if (s->op == B_SHL) {
        char dir[16];
        if (!nnc_attr_find(n, "direction"))
            return nnc_node_fail(e, n, "attribute 'direction' is required");
        TRY(nnc_attr_str(n, "direction", "", dir, sizeof dir, e));
        if (!strcmp(dir, "RIGHT")) s->op = B_SHR;
        else if (strcmp(dir, "LEFT"))
            return nnc_node_fail(e, n, "attribute 'direction' = '%s' is not 'LEFT' or 'RIGHT'",
                                 dir);
    }
    for (int i = 0; i < n->nin; i++) {
        if (!n->vin[i] || !n->vin[i]->dtype) continue;
        int dt = n->vin[i]->dtype;
        if (!kind_allows(kind, dt))
            return nnc_node_unsup(e, n, "input %d has element type %s, which this op does not run",
                                  i, nnc_dtname(dt));
        /* Mean of float16 would round each partial sum. */
        if (s->variadic == 2 && dt != DT_F32 && dt != DT_F64)
            return nnc_node_unsup(e, n, "element type %s is not supported", nnc_dtname(dt));
    }
    for (int i = 1; i < n->nin; i++)
        if (s->op != B_POW && n->vin[0] && n->vin[i] && n->vin[0]->dtype && n->vin[i]->dtype &&
            n->vin[0]->dtype != n->vin[i]->dtype)
            return nnc_node_fail(e, n, "inputs have different element types (%s and %s)",
                                 nnc_dtname(n->vin[0]->dtype), nnc_dtname(n->vin[i]->dtype));
    return NNC_OK;
}

/* PRelu before opset 7 had no broadcasting rule; its exporters (PyTorch's converted models,
 * onnx's test_PReLU_*_multiparam) give a slope of shape [C] for x [N, C, ...]: one slope per
 * channel. That slope is read as [C, 1, ...] (a view: the same data). */
static const nnc_tensor *legacy_prelu_slope(const nnc_node *n, const nnc_tensor *x,
                                            const nnc_tensor *slope, nnc_tensor *view)
{
    const bin_state *s = n->state;
    if (s->op != B_PRELU || n->opset < 1 || n->opset >= 7 || slope->ndim != 1 || x->ndim < 3 ||
        slope->dims[0] != x->dims[1] || slope->dims[0] == 1)
        return slope;
    *view = *slope;
    view->ndim = x->ndim - 1;
    for (int i = 1; i < view->ndim; i++) view->dims[i] = 1;
    return view;
}

static int bin_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const bin_state *s = n->state;
    int nin = n->nin;
    nnc_tensor slope_view, *args[2];
    if (s->op == B_PRELU && nin == 2) {
        args[0] = in[0];
        args[1] = (nnc_tensor *)legacy_prelu_slope(n, in[0], in[1], &slope_view);
        in = args;
    }
    int kind = bin_kind(n);
    nnc_tensor acc = *in[0];
    for (int i = 0; i < nin; i++)
        if (!kind_allows(kind, in[i]->dtype))
            return nnc_node_fail(e, n, "input %d has element type %s, which this op does not run",
                                 i, nnc_dtname(in[i]->dtype));
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
    if (s->op == B_PRELU && !nnc_same_shape(&acc, in[0]))
        return nnc_node_fail(e, n, "slope does not broadcast to the input's shape");
    *out = acc;
    out->dtype = is_cmp(s->op) ? DT_BOOL : in[0]->dtype;
    out->data = NULL;
    return NNC_OK;
}

static void fold_fn(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *out)
{
    /* out (=p[0]) op= p[1] ; used for inputs 2.. of variadic ops */
    bin_f32(ctx, n, p, s, out);
}

/* Run one pair (a may be the output itself, for the inputs 2.. of variadic ops). */
static int bin_pair(const nnc_node *n, int op, nnc_tensor *a, nnc_tensor *b, nnc_tensor *out,
                    nnc_err *e)
{
    bcast bc;
    nnc_tensor *pair[2] = {a, b};
    if (bcast_setup(&bc, out, pair, 2)) return nnc_node_fail(e, n, "broadcast failed");
    if (a->dtype == DT_F32 && b->dtype == DT_F32 &&
        (op < B_AND || op == B_PRELU || op == B_PYMOD)) {
        bcast_run(&bc, pair, out, a == out ? fold_fn : bin_f32, &op);
    } else {
        nnc_arith_ctx c = {op, a->dtype, b->dtype, out->dtype};
        bcast_run(&bc, pair, out, nnc_arith_typed, &c);
    }
    return NNC_OK;
}

static int bin_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const bin_state *s = n->state;
    int op = s->op;
    int nin = n->nin;
    if ((op == B_DIV || op == B_MOD || op == B_PYMOD) && nnc_dt_int(in[1]->dtype) &&
        nnc_has_zero(in[1]))
        return nnc_node_fail(e, n, "integer division by zero (the divisor input holds a 0)");
    if (nin == 1) { /* variadic with one input: a copy */
        memcpy(out->data, in[0]->data, nnc_nbytes(in[0]));
    } else {
        nnc_tensor slope_view;
        TRY(bin_pair(n, op, in[0], (nnc_tensor *)legacy_prelu_slope(n, in[0], in[1], &slope_view),
                     out, e));
        for (int i = 2; i < nin; i++) TRY(bin_pair(n, op, out, in[i], out, e));
    }
    if (s->variadic == 2) {
        if (out->dtype == DT_F32) {
            float *o = out->data, k = 1.f / (float)nin;
            for (int64_t i = 0, m = nnc_numel(out); i < m; i++) o[i] *= k;
        } else {
            double *o = out->data;
            for (int64_t i = 0, m = nnc_numel(out); i < m; i++) o[i] /= nin;
        }
    }
    if (out->dtype == DT_F32) nnc_apply_act(out->data, nnc_numel(out), &n->act);
    return NNC_OK;
}

static void bin_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}
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
BINOP(nnc_op_greaterorequal, "GreaterOrEqual", 2, 2)
BINOP(nnc_op_lessorequal, "LessOrEqual", 2, 2)
BINOP(nnc_op_mod, "Mod", 2, 2)
BINOP(nnc_op_and, "And", 2, 2)
BINOP(nnc_op_or, "Or", 2, 2)
BINOP(nnc_op_xor, "Xor", 2, 2)
BINOP(nnc_op_bitwiseand, "BitwiseAnd", 2, 2)
BINOP(nnc_op_bitwiseor, "BitwiseOr", 2, 2)
BINOP(nnc_op_bitwisexor, "BitwiseXor", 2, 2)
BINOP(nnc_op_bitshift, "BitShift", 2, 2)
BINOP(nnc_op_prelu, "PRelu", 2, 2)
BINOP(nnc_op_sum, "Sum", 1, NNC_MAXIO)
BINOP(nnc_op_max, "Max", 1, NNC_MAXIO)
BINOP(nnc_op_min, "Min", 1, NNC_MAXIO)
BINOP(nnc_op_mean, "Mean", 1, NNC_MAXIO)

int nnc_per_channel_affine(const nnc_node *n, int xin, int64_t C, int rank, float *scale,
                           float *shift)
{
    const bin_state *s = n->state;
    if (!s || n->nin != 2 ||
        (s->op != B_ADD && s->op != B_MUL && s->op != B_SUB && s->op != B_DIV) || s->variadic)
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
        case B_ADD:
            scale[i] = 1.f;
            shift[i] = val;
            break;
        case B_SUB:
            scale[i] = 1.f;
            shift[i] = -val;
            break;
        case B_MUL:
            scale[i] = val;
            shift[i] = 0.f;
            break;
        case B_DIV:
            scale[i] = 1.f / val;
            shift[i] = 0.f;
            break;
        }
    }
    return 1;
}

/* ---- Where --------------------------------------------------------------------------- */

static int where_create(nnc_node *n, nnc_err *e)
{
    static const int b[] = {DT_BOOL, 0};
    TRY(nnc_check_dtype(n, 0, b, e));
    if (n->vin[1] && n->vin[2] && n->vin[1]->dtype && n->vin[2]->dtype &&
        n->vin[1]->dtype != n->vin[2]->dtype)
        return nnc_node_fail(e, n, "X and Y have different element types");
    if (n->vin[1] && n->vin[1]->dtype && !nnc_dtsize(n->vin[1]->dtype))
        return nnc_node_unsup(e, n, "element type %s is not supported",
                              nnc_dtname(n->vin[1]->dtype));
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
        const char *src = c[s[0] ? i : 0] ? p[1] + (s[1] ? i : 0) * (int64_t)sz
                                          : p[2] + (s[2] ? i : 0) * (int64_t)sz;
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

enum {
    U_RELU,
    U_LEAKY,
    U_SIGMOID,
    U_TANH,
    U_CLIP,
    U_ERF,
    U_GELU,
    U_GELU_TANH,
    U_SQRT,
    U_EXP,
    U_LOG,
    U_NEG,
    U_ABS,
    U_RECIP,
    U_FLOOR,
    U_CEIL,
    U_SOFTPLUS
};
typedef struct {
    int op;
    float a, b;
    int tcode; /* op_unary.c's code, other types; -1 float32 */
} un_state;

static const struct {
    const char *name;
    int op;
} UN_OPS[] = {
    {"Relu", U_RELU},         {"LeakyRelu", U_LEAKY}, {"Sigmoid", U_SIGMOID},
    {"Tanh", U_TANH},         {"Clip", U_CLIP},       {"Erf", U_ERF},
    {"Gelu", U_GELU},         {"Sqrt", U_SQRT},       {"Exp", U_EXP},
    {"Log", U_LOG},           {"Neg", U_NEG},         {"Abs", U_ABS},
    {"Reciprocal", U_RECIP},  {"Floor", U_FLOOR},     {"Ceil", U_CEIL},
    {"Softplus", U_SOFTPLUS},
};

static int un_create(nnc_node *n, nnc_err *e)
{
    un_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->op = -1;
    s->tcode = -1;
    for (size_t i = 0; i < sizeof UN_OPS / sizeof UN_OPS[0]; i++)
        if (!strcmp(UN_OPS[i].name, n->op_type)) s->op = UN_OPS[i].op;
    if (s->op < 0) return nnc_node_fail(e, n, "not a unary op");
    int dt = n->vin[0] ? n->vin[0]->dtype : DT_UNDEF;
    if (dt != DT_F32 && dt != DT_UNDEF) {
        s->tcode = nnc_unary_typed_code(n->op_type, dt);
        if (s->tcode < 0)
            return nnc_node_unsup(e, n, "element type %s is not supported", nnc_dtname(dt));
    }
    const int same[] = {dt ? dt : DT_F32, 0};
    if (s->op == U_LEAKY) TRY(nnc_attr_float(n, "alpha", 0.01f, &s->a, e));
    if (s->op == U_GELU) {
        char ap[16];
        TRY(nnc_attr_str(n, "approximate", "none", ap, sizeof ap, e));
        if (!strcmp(ap, "tanh")) {
            s->op = U_GELU_TANH;
            if (s->tcode >= 0) s->tcode = nnc_unary_typed_code("Gelu:tanh", dt);
        } else if (strcmp(ap, "none"))
            return nnc_node_fail(e, n, "attribute 'approximate' = '%s' is not 'none' or 'tanh'",
                                 ap);
    }
    if (s->op == U_CLIP) {
        /* an omitted bound is the type's lowest / largest value (ONNX; onnxruntime), so +-inf
         * clips to it (float32 here; the typed kernels keep +-inf for other types) */
        float big = dt == DT_F32 ? FLT_MAX : INFINITY;
        s->a = -big;
        s->b = big;
        if (n->opset < 11) {
            TRY(nnc_attr_float(n, "min", -big, &s->a, e));
            TRY(nnc_attr_float(n, "max", big, &s->b, e));
        } else {
            for (int i = 1; i < n->nin && i < 3; i++) {
                if (!nnc_in_present(n, i)) continue;
                TRY(nnc_check_dtype(n, i, same, e));
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
    const un_state *s = n->state;
    if (s->tcode >= 0 && in[0]->dtype != DT_F32) {
        if (nnc_unary_typed_code(s->op == U_GELU_TANH ? "Gelu:tanh" : n->op_type, in[0]->dtype) !=
            s->tcode)
            return nnc_node_fail(e, n, "element type %s is not supported",
                                 nnc_dtname(in[0]->dtype));
        *out = *in[0];
        out->data = NULL;
        return NNC_OK;
    }
    if (in[0]->dtype != DT_F32)
        return nnc_node_fail(e, n, "input must be float32, got %s", nnc_dtname(in[0]->dtype));
    for (int i = 1; i < n->nin; i++)
        if (in[i] && (in[i]->dtype != DT_F32 || nnc_numel(in[i]) != 1))
            return nnc_node_fail(e, n, "input %d must be a float32 scalar", i);
    *out = *in[0];
    return NNC_OK;
}

typedef struct {
    const un_state *s;
    const float *x;
    float *y;
    float lo, hi;
} un_job;

static void un_range(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    un_job *j = arg;
    const float *x = j->x;
    float *y = j->y;
    switch (j->s->op) {
    case U_RELU:
        for (int64_t i = b; i < e; i++) y[i] = x[i] < 0.f ? 0.f : x[i];
        break; /* NaN stays NaN */
    case U_LEAKY: {
        float a = j->s->a;
        for (int64_t i = b; i < e; i++) y[i] = x[i] >= 0.f ? x[i] : a * x[i];
    } break;
    case U_SIGMOID: nnc_vsigmoid(x + b, y + b, e - b); break;
    case U_TANH: nnc_vtanh(x + b, y + b, e - b); break;
    case U_CLIP: {
        float lo = j->lo, hi = j->hi;
        for (int64_t i = b; i < e; i++) {
            float v = x[i];
            v = v < lo ? lo : v;
            y[i] = v > hi ? hi : v;
        }
    } break;
    case U_ERF: nnc_verf(x + b, y + b, e - b); break;
    case U_GELU:
        for (int64_t i = b; i < e; i++)
            y[i] = 0.5f * x[i] * (1.f + erff(x[i] * 0.70710678118654752f));
        break;
    case U_GELU_TANH:
        for (int64_t i = b; i < e; i++) {
            float v = x[i];
            y[i] = 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        }
        break;
    case U_SQRT:
        for (int64_t i = b; i < e; i++) y[i] = sqrtf(x[i]);
        break;
    case U_EXP: nnc_vexp(x + b, y + b, e - b); break;
    case U_LOG:
        for (int64_t i = b; i < e; i++) y[i] = logf(x[i]);
        break;
    case U_NEG:
        for (int64_t i = b; i < e; i++) y[i] = -x[i];
        break;
    case U_ABS:
        for (int64_t i = b; i < e; i++) y[i] = fabsf(x[i]);
        break;
    case U_RECIP:
        for (int64_t i = b; i < e; i++) y[i] = 1.f / x[i];
        break;
    case U_FLOOR:
        for (int64_t i = b; i < e; i++) y[i] = floorf(x[i]);
        break;
    case U_CEIL:
        for (int64_t i = b; i < e; i++) y[i] = ceilf(x[i]);
        break;
    case U_SOFTPLUS:
        for (int64_t i = b; i < e; i++) {
            float v = x[i];
            y[i] = v > 0 ? v + log1pf(expf(-v)) : log1pf(expf(v));
        }
        break;
    }
}

static int un_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const un_state *s = n->state;
    if (in[0]->dtype != DT_F32)
        return nnc_unary_typed_run(n, s->tcode, s->op == U_CLIP ? s->a : s->a,
                                   s->op == U_CLIP ? s->b : 0.f, in, out, e);
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

static void un_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

/* Activation parameters for the planner's fusion of Relu/Clip/LeakyRelu into producers;
 * 0 when the node's activation cannot be fused (e.g. Clip bounds computed at run time). */
int nnc_unary_as_act(const nnc_node *n, nnc_act *act)
{
    const un_state *s = n->state;
    if (!s || s->tcode >= 0) return 0;
    if (s->op == U_RELU) {
        act->kind = ACT_RELU;
        return 1;
    }
    if (s->op == U_LEAKY) {
        act->kind = ACT_LEAKY;
        act->a = s->a;
        return 1;
    }
    if (s->op == U_CLIP) {
        float lo = s->a, hi = s->b;
        if (n->opset >= 11) {
            for (int i = 1; i < n->nin && i < 3; i++) {
                if (!nnc_in_present(n, i)) continue;
                if (!nnc_in_const(n, i)) return 0;
                float v = *(const float *)n->vin[i]->const_data;
                if (i == 1) lo = v;
                else hi = v;
            }
        }
        act->kind = ACT_CLIP;
        act->a = lo;
        act->b = hi;
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
        return nnc_node_unsup(e, n, "element type %s is not supported",
                              nnc_dtname(n->vin[0]->dtype));
    if (!strcmp(n->op_type, "Dropout")) {
        if (n->opset >= 12 && nnc_in_present(n, 2)) {
            if (!nnc_in_const(n, 2))
                return nnc_node_unsup(e, n,
                                      "training_mode must be a constant false (inference only)");
            if (*(const uint8_t *)n->vin[2]->const_data)
                return nnc_node_unsup(e, n,
                                      "training_mode = true is not supported (inference only)");
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
    (void)in;
    (void)x;
    (void)e;
    if (n->nout > 1 && n->out[1] >= 0) {
        int64_t k = nnc_numel(&out[1]);
        if (out[1].dtype == DT_F32)
            for (int64_t i = 0; i < k; i++) ((float *)out[1].data)[i] = 1.f;
        else if (out[1].dtype == DT_BOOL) memset(out[1].data, 1, (size_t)k);
        else memset(out[1].data, 0, nnc_nbytes(&out[1]));
    }
    return NNC_OK;
}

const nnc_op nnc_op_identity = {"Identity",   1,           1,         1,    1,
                                ident_create, ident_infer, ident_run, NULL, OPF_ALIAS};
const nnc_op nnc_op_dropout = {"Dropout",    1,           3,         1,    2,
                               ident_create, ident_infer, ident_run, NULL, OPF_ALIAS};
