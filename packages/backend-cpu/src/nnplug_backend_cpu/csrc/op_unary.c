/* Unary elementwise ops on every element type: the activations and math functions that
 * op_eltwise.c runs for float32 (here for float64/float16/bfloat16 and integers), and the
 * ops only this file runs (Sign, Round, IsNaN, IsInf, Not, BitwiseNot, trigonometry,
 * HardSigmoid, HardSwish, Elu, Selu, Celu, Mish, Softsign, ThresholdedRelu, Shrink, Swish).
 * Float types compute in double, integers in int64 (unsigned values by bit pattern). */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <math.h>
#include <stdlib.h>

enum {
    T_RELU,
    T_LEAKY,
    T_SIGMOID,
    T_TANH,
    T_CLIP,
    T_ERF,
    T_GELU,
    T_SQRT,
    T_EXP,
    T_LOG,
    T_NEG,
    T_ABS,
    T_RECIP,
    T_FLOOR,
    T_CEIL,
    T_SOFTPLUS,
    T_SIGN,
    T_ROUND,
    T_ISNAN,
    T_ISINF,
    T_NOT,
    T_BNOT,
    T_SIN,
    T_COS,
    T_TAN,
    T_ASIN,
    T_ACOS,
    T_ATAN,
    T_SINH,
    T_COSH,
    T_ASINH,
    T_ACOSH,
    T_ATANH,
    T_HSIGMOID,
    T_HSWISH,
    T_ELU,
    T_SELU,
    T_CELU,
    T_MISH,
    T_SOFTSIGN,
    T_THRELU,
    T_SHRINK,
    T_GELU_TANH,
    T_SWISH
};

/* Type classes: F float types, N every numeric type, S float and signed integers,
 * FI float and signed integers of Relu (int8..int64), B bool, I integers. */
enum { C_F, C_N, C_S, C_B, C_I };
static const struct {
    const char *name;
    int code, cls;
} TU_OPS[] = {
    {"Relu", T_RELU, C_S},
    {"LeakyRelu", T_LEAKY, C_F},
    {"Sigmoid", T_SIGMOID, C_F},
    {"Tanh", T_TANH, C_F},
    {"Clip", T_CLIP, C_N},
    {"Erf", T_ERF, C_F},
    {"Gelu", T_GELU, C_F},
    {"Sqrt", T_SQRT, C_F},
    {"Exp", T_EXP, C_F},
    {"Log", T_LOG, C_F},
    {"Neg", T_NEG, C_S},
    {"Abs", T_ABS, C_N},
    {"Reciprocal", T_RECIP, C_F},
    {"Floor", T_FLOOR, C_F},
    {"Ceil", T_CEIL, C_F},
    {"Softplus", T_SOFTPLUS, C_F},
    {"Sign", T_SIGN, C_N},
    {"Round", T_ROUND, C_F},
    {"IsNaN", T_ISNAN, C_F},
    {"IsInf", T_ISINF, C_F},
    {"Not", T_NOT, C_B},
    {"BitwiseNot", T_BNOT, C_I},
    {"Sin", T_SIN, C_F},
    {"Cos", T_COS, C_F},
    {"Tan", T_TAN, C_F},
    {"Asin", T_ASIN, C_F},
    {"Acos", T_ACOS, C_F},
    {"Atan", T_ATAN, C_F},
    {"Sinh", T_SINH, C_F},
    {"Cosh", T_COSH, C_F},
    {"Asinh", T_ASINH, C_F},
    {"Acosh", T_ACOSH, C_F},
    {"Atanh", T_ATANH, C_F},
    {"HardSigmoid", T_HSIGMOID, C_F},
    {"HardSwish", T_HSWISH, C_F},
    {"Elu", T_ELU, C_F},
    {"Selu", T_SELU, C_F},
    {"Celu", T_CELU, C_F},
    {"Mish", T_MISH, C_F},
    {"Softsign", T_SOFTSIGN, C_F},
    {"ThresholdedRelu", T_THRELU, C_F},
    {"Shrink", T_SHRINK, C_N},
    {"Swish", T_SWISH, C_F},
    {"Gelu:tanh", T_GELU_TANH, C_F}, /* Gelu with approximate='tanh' (op_eltwise.c asks so) */
};

static int cls_allows(int cls, int dt)
{
    switch (cls) {
    case C_F: return nnc_dt_float(dt);
    case C_N: return nnc_dt_numeric(dt);
    case C_S: return nnc_dt_float(dt) || nnc_dt_signed(dt);
    case C_B: return dt == DT_BOOL;
    case C_I: return nnc_dt_int(dt);
    }
    return 0;
}

int nnc_unary_typed_code(const char *op_type, int dt)
{
    for (size_t i = 0; i < sizeof TU_OPS / sizeof TU_OPS[0]; i++)
        if (!strcmp(TU_OPS[i].name, op_type))
            return cls_allows(TU_OPS[i].cls, dt) ? TU_OPS[i].code : -1;
    return -1;
}

typedef struct {
    int code, dt, odt;
    double a, b, c; /* alpha, beta/bias/lambda, gamma */
    double lo, hi;  /* Clip bounds (float types) */
    int64_t ilo, ihi;
    const void *x;
    void *y;
} tu_job;

static double sigm(double v)
{
    return v >= 0 ? 1.0 / (1.0 + exp(-v)) : exp(v) / (1.0 + exp(v));
}
static double softplus(double v)
{
    return v > 0 ? v + log1p(exp(-v)) : log1p(exp(v));
}
/* by compares, which a NaN fails: it stays NaN (fmax and fmin would return the other operand) */
static double clamp01d(double v)
{
    return v < 0 ? 0 : (v > 1 ? 1 : v);
}

static void fop(const tu_job *j, int64_t n, double *x)
{
    double a = j->a, b = j->b, c = j->c;
    switch (j->code) {
#define L(EXPR)                       \
    for (int64_t i = 0; i < n; i++) { \
        double v = x[i];              \
        x[i] = (EXPR);                \
    }                                 \
    break;
    case T_RELU: L(v < 0 ? 0.0 : v)
    case T_LEAKY: L(v >= 0 ? v : a * v)
    case T_SIGMOID: L(sigm(v))
    case T_TANH: L(tanh(v))
    case T_CLIP: {
        double lo = j->lo, hi = j->hi;
        L(v < lo ? lo : (v > hi ? hi : v))
    }
    case T_ERF: L(erf(v))
    case T_GELU: L(0.5 * v * (1.0 + erf(v * 0.70710678118654752440)))
    case T_GELU_TANH: L(0.5 * v * (1.0 + tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v))))
    case T_SQRT: L(sqrt(v))
    case T_EXP: L(exp(v))
    case T_LOG: L(log(v))
    case T_NEG: L(-v)
    case T_ABS: L(fabs(v))
    case T_RECIP: L(1.0 / v)
    case T_FLOOR: L(floor(v))
    case T_CEIL: L(ceil(v))
    case T_SOFTPLUS: L(softplus(v))
    case T_SIGN: L(v > 0 ? 1.0 : (v < 0 ? -1.0 : v))
    case T_ROUND: L(nearbyint(v))
    case T_ISNAN: L(v != v)
    case T_ISINF: L((v == INFINITY && a != 0) || (v == -INFINITY && b != 0))
    case T_SIN: L(sin(v))
    case T_COS: L(cos(v))
    case T_TAN: L(tan(v))
    case T_ASIN: L(asin(v))
    case T_ACOS: L(acos(v))
    case T_ATAN: L(atan(v))
    case T_SINH: L(sinh(v))
    case T_COSH: L(cosh(v))
    case T_ASINH: L(asinh(v))
    case T_ACOSH: L(acosh(v))
    case T_ATANH: L(atanh(v))
    case T_HSIGMOID: L(clamp01d(a * v + b))
    case T_HSWISH: L(v * clamp01d(v / 6.0 + 0.5))
    case T_ELU: L(v < 0 ? a * expm1(v) : v)
    case T_SELU: L(v > 0 ? c * v : c * (a * exp(v) - a))
    case T_CELU:
        L(v > 0 ? v : a * expm1(v / a)) /* max(0, v) + min(0, a * expm1(v / a)), keeping NaN */
    case T_MISH: L(v * tanh(softplus(v)))
    case T_SOFTSIGN: L(v / (1.0 + fabs(v)))
    case T_THRELU: L(v > a ? v : 0.0)
    case T_SHRINK: L(v < -b ? v + a : (v > b ? v - a : 0.0))
    case T_SWISH: L(v * sigm(a * v))
#undef L
    default: break;
    }
}

/* float32 in float32 arithmetic for the activations of CNNs and transformers (HardSwish,
 * HardSigmoid, ... in MobileNetV3): no double round trip. 0 when the op has no such path. */
static inline float clamp01(float v)
{
    return v < 0.f ? 0.f : (v > 1.f ? 1.f : v);
}

static int fop32(const tu_job *j, int64_t n, const float *x, float *y)
{
    float a = (float)j->a, b = (float)j->b, c = (float)j->c;
    switch (j->code) {
#define L(EXPR)                       \
    for (int64_t i = 0; i < n; i++) { \
        float v = x[i];               \
        y[i] = (EXPR);                \
    }                                 \
    return 1;
    /* clamps by comparison (vectorises; fminf/fmaxf are calls here), NaN stays NaN */
    case T_HSIGMOID: L(clamp01(a * v + b))
    case T_HSWISH: /* two passes: GCC does not if-convert the clamp feeding a multiply */
        for (int64_t i = 0; i < n; i++) y[i] = clamp01(x[i] * (1.f / 6.f) + 0.5f);
        for (int64_t i = 0; i < n; i++) y[i] *= x[i];
        return 1;
    case T_ELU: L(v < 0 ? a * expm1f(v) : v)
    case T_SELU: L(v > 0 ? c * v : c * (a * expf(v) - a))
    case T_SOFTSIGN: L(v / (1.f + fabsf(v)))
    case T_THRELU: L(v > a ? v : 0.f)
    case T_SWISH: L(v / (1.f + expf(-a * v)))
#undef L
    default: return 0;
    }
}

static void iop(const tu_job *j, int64_t n, int64_t *x)
{
    int uns = nnc_dt_unsigned(j->dt);
    switch (j->code) {
#define L(EXPR)                       \
    for (int64_t i = 0; i < n; i++) { \
        int64_t v = x[i];             \
        x[i] = (EXPR);                \
    }                                 \
    break;
#define LU(EXPR)                      \
    for (int64_t i = 0; i < n; i++) { \
        uint64_t v = (uint64_t)x[i];  \
        x[i] = (int64_t)(EXPR);       \
    }                                 \
    break;
    case T_RELU: L(v < 0 ? 0 : v)
    case T_NEG: LU(0 - v)
    case T_ABS:
        if (uns) break;
        LU((int64_t)v < 0 ? 0 - v : v)
    case T_SIGN:
        if (uns) {
            LU(v != 0)
        }
        L(v > 0 ? 1 : (v < 0 ? -1 : 0))
    case T_NOT: L(!v)
    case T_BNOT: LU(~v)
    case T_CLIP:
        if (uns) {
            uint64_t lo = (uint64_t)j->ilo, hi = (uint64_t)j->ihi;
            LU(v < lo ? lo : (v > hi ? hi : v))
        }
        {
            int64_t lo = j->ilo, hi = j->ihi;
            L(v < lo ? lo : (v > hi ? hi : v))
        }
    case T_SHRINK: {
        /* bias and lambd are floats: compare and shift in double, store truncated */
        for (int64_t i = 0; i < n; i++) {
            double v = uns ? (double)(uint64_t)x[i] : (double)x[i],
                   r = v < -j->b ? v + j->a : (v > j->b ? v - j->a : 0.0);
            x[i] = r != r ? 0 : (r >= 9.2e18 ? INT64_MAX : (r <= -9.2e18 ? INT64_MIN : (int64_t)r));
        }
        break;
    }
#undef L
#undef LU
    default: break;
    }
}

static void tu_range(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const tu_job *j = arg;
    if (j->dt == DT_F32 && j->odt == DT_F32 &&
        fop32(j, e - b, (const float *)j->x + b, (float *)j->y + b))
        return;
    for (int64_t i0 = b; i0 < e; i0 += NNC_CHUNK) {
        int64_t m = e - i0 < NNC_CHUNK ? e - i0 : NNC_CHUNK;
        if (nnc_dt_float(j->dt)) {
            double buf[NNC_CHUNK];
            nnc_load_d(j->x, j->dt, i0, 1, m, buf);
            fop(j, m, buf);
            nnc_store_d(j->y, j->odt, i0, m, buf);
        } else {
            int64_t buf[NNC_CHUNK];
            nnc_load_i(j->x, j->dt, i0, 1, m, buf);
            iop(j, m, buf);
            nnc_store_i(j->y, j->odt, i0, m, buf);
        }
    }
}

static int run_code(const nnc_node *n, tu_job *j, nnc_tensor *const *in, nnc_tensor *out,
                    nnc_err *e)
{
    j->dt = in[0]->dtype;
    j->odt = out->dtype;
    j->x = in[0]->data;
    j->y = out->data;
    if (j->code == T_CLIP) {
        for (int i = 1; i < 3; i++) {
            if (i >= n->nin || !in[i]) continue;
            if (in[i]->dtype != in[0]->dtype || nnc_numel(in[i]) != 1)
                return nnc_node_fail(e, n, "input %d must be a %s scalar", i,
                                     nnc_dtname(in[0]->dtype));
            if (nnc_dt_float(j->dt)) {
                double v = nnc_get_d(in[i]->data, in[i]->dtype, 0);
                if (i == 1) j->lo = v;
                else j->hi = v;
            } else {
                int64_t v;
                nnc_load_i(in[i]->data, in[i]->dtype, 0, 0, 1, &v);
                if (i == 1) j->ilo = v;
                else j->ihi = v;
            }
        }
    }
    nnc_parallel_for(nnc_numel(out), 16384, tu_range, j);
    return NNC_OK;
}

/* Integer Clip defaults: the type's range. */
static void int_range(int dt, int64_t *lo, int64_t *hi)
{
    switch (dt) {
    case DT_I8:
        *lo = INT8_MIN;
        *hi = INT8_MAX;
        break;
    case DT_I16:
        *lo = INT16_MIN;
        *hi = INT16_MAX;
        break;
    case DT_I32:
        *lo = INT32_MIN;
        *hi = INT32_MAX;
        break;
    case DT_U8:
        *lo = 0;
        *hi = UINT8_MAX;
        break;
    case DT_U16:
        *lo = 0;
        *hi = UINT16_MAX;
        break;
    case DT_U32:
        *lo = 0;
        *hi = UINT32_MAX;
        break;
    case DT_U64:
        *lo = 0;
        *hi = -1;
        break; /* UINT64_MAX as bits */
    default:
        *lo = INT64_MIN;
        *hi = INT64_MAX;
        break;
    }
}

int nnc_unary_typed_run(const nnc_node *n, int code, float alpha, float beta, nnc_tensor *const *in,
                        nnc_tensor *out, nnc_err *e)
{
    tu_job j = {0};
    j.code = code;
    j.a = alpha;
    j.b = beta;
    j.lo = -INFINITY;
    j.hi = INFINITY;
    if (code == T_CLIP) {
        j.lo = alpha;
        j.hi = beta;
    }
    int_range(in[0]->dtype, &j.ilo, &j.ihi);
    return run_code(n, &j, in, out, e);
}

/* ---- the ops only this file runs ------------------------------------------------------ */

typedef struct {
    int code;
    double a, b, c;
} tu_state;

static int tu_create(nnc_node *n, nnc_err *e)
{
    tu_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->code = -1;
    int cls = -1;
    for (size_t i = 0; i < sizeof TU_OPS / sizeof TU_OPS[0]; i++)
        if (!strcmp(TU_OPS[i].name, n->op_type)) {
            s->code = TU_OPS[i].code;
            cls = TU_OPS[i].cls;
        }
    if (s->code < 0) return nnc_node_fail(e, n, "not a unary op");
    if (n->vin[0] && n->vin[0]->dtype && !cls_allows(cls, n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "element type %s is not supported",
                              nnc_dtname(n->vin[0]->dtype));
    float a = 0, b = 0, c = 0;
    int64_t p = 1, q = 1;
    switch (s->code) {
    case T_HSIGMOID:
        TRY(nnc_attr_float(n, "alpha", 0.2f, &a, e));
        TRY(nnc_attr_float(n, "beta", 0.5f, &b, e));
        break;
    case T_ELU: TRY(nnc_attr_float(n, "alpha", 1.f, &a, e)); break;
    case T_THRELU:
    case T_SWISH: TRY(nnc_attr_float(n, "alpha", 1.f, &a, e)); break;
    case T_CELU:
        TRY(nnc_attr_float(n, "alpha", 1.f, &a, e));
        if (a == 0.f) return nnc_node_fail(e, n, "attribute 'alpha' must not be 0");
        break;
    case T_SELU:
        TRY(nnc_attr_float(n, "alpha", 1.67326319217681884765625f, &a, e));
        TRY(nnc_attr_float(n, "gamma", 1.05070102214813232421875f, &c, e));
        break;
    case T_SHRINK:
        TRY(nnc_attr_float(n, "bias", 0.f, &a, e));
        TRY(nnc_attr_float(n, "lambd", 0.5f, &b, e));
        break;
    case T_ISINF:
        TRY(nnc_attr_int(n, "detect_positive", 1, &p, e));
        TRY(nnc_attr_int(n, "detect_negative", 1, &q, e));
        a = p != 0;
        b = q != 0;
        break;
    default: break;
    }
    s->a = a;
    s->b = b;
    s->c = c;
    return NNC_OK;
}

static int tu_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const tu_state *s = n->state;
    if (nnc_unary_typed_code(n->op_type, in[0]->dtype) < 0)
        return nnc_node_fail(e, n, "element type %s is not supported", nnc_dtname(in[0]->dtype));
    *out = *in[0];
    if (s->code == T_ISNAN || s->code == T_ISINF) out->dtype = DT_BOOL;
    out->data = NULL;
    return NNC_OK;
}

static int tu_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const tu_state *s = n->state;
    tu_job j = {0};
    j.code = s->code;
    j.a = s->a;
    j.b = s->b;
    j.c = s->c;
    return run_code(n, &j, in, out, e);
}

static void tu_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

#define TUOP(VAR, NAME) \
    const nnc_op VAR = {NAME, 1, 1, 1, 1, tu_create, tu_infer, tu_run, tu_destroy, 0};
TUOP(nnc_op_sign, "Sign")
TUOP(nnc_op_round, "Round")
TUOP(nnc_op_isnan, "IsNaN")
TUOP(nnc_op_isinf, "IsInf")
TUOP(nnc_op_not, "Not")
TUOP(nnc_op_bitwisenot, "BitwiseNot")
TUOP(nnc_op_sin, "Sin")
TUOP(nnc_op_cos, "Cos")
TUOP(nnc_op_tan, "Tan")
TUOP(nnc_op_asin, "Asin")
TUOP(nnc_op_acos, "Acos")
TUOP(nnc_op_atan, "Atan")
TUOP(nnc_op_sinh, "Sinh")
TUOP(nnc_op_cosh, "Cosh")
TUOP(nnc_op_asinh, "Asinh")
TUOP(nnc_op_acosh, "Acosh")
TUOP(nnc_op_atanh, "Atanh")
TUOP(nnc_op_hardsigmoid, "HardSigmoid")
TUOP(nnc_op_hardswish, "HardSwish")
TUOP(nnc_op_elu, "Elu")
TUOP(nnc_op_selu, "Selu")
TUOP(nnc_op_celu, "Celu")
TUOP(nnc_op_mish, "Mish")
TUOP(nnc_op_softsign, "Softsign")
TUOP(nnc_op_thresholdedrelu, "ThresholdedRelu")
TUOP(nnc_op_shrink, "Shrink")
TUOP(nnc_op_swish, "Swish")
