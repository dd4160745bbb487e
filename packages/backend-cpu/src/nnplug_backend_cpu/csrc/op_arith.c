/* Binary elementwise arithmetic, comparisons and logic on every element type other than the
 * float32 fast paths of op_eltwise.c. Values are loaded in chunks into double (float types)
 * or int64 (integer types and bool, bit patterns kept) buffers, computed, and stored back:
 * integer results wrap to the element width as onnxruntime's do, float16/bfloat16 round to
 * nearest even. */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <math.h>

int nnc_has_zero(const nnc_tensor *t)
{
    int64_t k = nnc_numel(t);
    size_t sz = nnc_dtsize(t->dtype);
    const unsigned char *p = t->data;
    for (int64_t i = 0; i < k; i++) {
        int z = 1;
        for (size_t b = 0; b < sz; b++)
            if (p[i * (int64_t)sz + (int64_t)b]) {
                z = 0;
                break;
            }
        if (z) return 1;
    }
    return 0;
}

/* Integer power by squaring (wrapping); negative exponents truncate 1/b^-e toward zero. */
static int64_t ipow(int64_t b, int64_t e)
{
    if (e < 0) return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0);
    uint64_t r = 1, x = (uint64_t)b;
    while (e) {
        if (e & 1) r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}

/* double -> int64 for a float result stored in an integer type: NaN and out of range as
 * x86's cvttsd2si (INT64_MIN), without undefined behaviour. */
static int64_t d2i(double v)
{
    if (!(v > -9.2233720368547758e18 && v < 9.2233720368547758e18)) return INT64_MIN;
    return (int64_t)v;
}

/* Mod with fmod=0 on floats: the sign of the divisor, as numpy (and Python) */
static double pymod(double x, double y)
{
    double r = fmod(x, y);
    if (r == 0) return copysign(0.0, y);
    return (r < 0) != (y < 0) ? r + y : r;
}

static void float_op(int op, int64_t n, const double *a, const double *b, double *o)
{
    switch (op) {
    case B_ADD:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i];
        break;
    case B_SUB:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i];
        break;
    case B_MUL:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i];
        break;
    case B_DIV:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] / b[i];
        break;
    case B_POW:
        for (int64_t i = 0; i < n; i++) o[i] = pow(a[i], b[i]);
        break;
    case B_MAX:
        for (int64_t i = 0; i < n; i++) o[i] = (a[i] != a[i] || a[i] > b[i]) ? a[i] : b[i];
        break;
    case B_MIN:
        for (int64_t i = 0; i < n; i++) o[i] = (a[i] != a[i] || a[i] < b[i]) ? a[i] : b[i];
        break;
    case B_EQ:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] == b[i];
        break;
    case B_GT:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] > b[i];
        break;
    case B_LT:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] < b[i];
        break;
    case B_GE:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] >= b[i];
        break;
    case B_LE:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] <= b[i];
        break;
    case B_MOD:
        for (int64_t i = 0; i < n; i++) o[i] = fmod(a[i], b[i]);
        break;
    case B_PYMOD:
        for (int64_t i = 0; i < n; i++) o[i] = pymod(a[i], b[i]);
        break;
    case B_PRELU:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] < 0 ? a[i] * b[i] : a[i];
        break;
    default:
        for (int64_t i = 0; i < n; i++) o[i] = 0;
        break;
    }
}

#define ILOOP(EXPR)                   \
    for (int64_t i = 0; i < n; i++) { \
        int64_t x = a[i], y = b[i];   \
        o[i] = (EXPR);                \
    }                                 \
    break;
#define ULOOP(EXPR)                                      \
    for (int64_t i = 0; i < n; i++) {                    \
        uint64_t x = (uint64_t)a[i], y = (uint64_t)b[i]; \
        o[i] = (int64_t)(EXPR);                          \
    }                                                    \
    break;

static void int_op(int op, int uns, int width, int64_t n, const int64_t *a, const int64_t *b,
                   int64_t *o)
{
    if (uns) {
        switch (op) {
        case B_DIV: ULOOP(y ? x / y : 0)
        case B_MOD:
        case B_PYMOD: ULOOP(y ? x % y : 0)
        case B_MAX: ULOOP(x > y ? x : y)
        case B_MIN: ULOOP(x < y ? x : y)
        case B_EQ: ULOOP(x == y)
        case B_GT: ULOOP(x > y)
        case B_LT: ULOOP(x < y)
        case B_GE: ULOOP(x >= y)
        case B_LE: ULOOP(x <= y)
        case B_SHL: ULOOP(y < (uint64_t)width ? x << y : 0)
        case B_SHR: ULOOP(y < (uint64_t)width ? x >> y : 0)
        case B_PRELU: ULOOP(x + 0 * y) /* never negative */
        default: break;
        }
    }
    switch (op) {
    case B_ADD: ULOOP(x + y)
    case B_SUB: ULOOP(x - y)
    case B_MUL: ULOOP(x * y)
    case B_BAND:
    case B_AND: ULOOP(x & y)
    case B_BOR:
    case B_OR: ULOOP(x | y)
    case B_BXOR:
    case B_XOR: ULOOP(x ^ y)
    case B_POW: ILOOP(ipow(x, y))
    default: break;
    }
    if (uns) return;
    switch (op) {
    case B_DIV: ILOOP(y == 0 ? 0 : (y == -1 ? (int64_t)(0 - (uint64_t)x) : x / y))
    case B_MOD: ILOOP(y == 0 || y == -1 ? 0 : x % y)
    case B_PYMOD:
        ILOOP(y == 0 || y == -1 ? 0
                                : ((x % y != 0 && ((x % y < 0) != (y < 0))) ? x % y + y : x % y))
    case B_MAX: ILOOP(x > y ? x : y)
    case B_MIN: ILOOP(x < y ? x : y)
    case B_EQ: ILOOP(x == y)
    case B_GT: ILOOP(x > y)
    case B_LT: ILOOP(x < y)
    case B_GE: ILOOP(x >= y)
    case B_LE: ILOOP(x <= y)
    /* signed shifts (BitShift-28): left drops bits past the width (the store truncates);
     * right is arithmetic; a negative or too large amount leaves only the sign fill */
    case B_PRELU: ILOOP(x < 0 ? (int64_t)((uint64_t)x * (uint64_t)y) : x)
    case B_SHL: ILOOP(y >= 0 && y < width ? (int64_t)((uint64_t)x << y) : 0)
    case B_SHR: ILOOP(y >= 0 && y < width ? (x < 0 ? ~(~x >> y) : x >> y) : (x < 0 ? -1 : 0))
    default: break;
    }
}

void nnc_arith_typed(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *out)
{
    const nnc_arith_ctx *c = ctx;
    int op = c->op, fa = nnc_dt_float(c->dta), fb = nnc_dt_float(c->dtb);
    int width = (int)nnc_dtsize(c->dta) * 8;
    int64_t sa = s[0] ? 1 : 0, sb = s[1] ? 1 : 0;
    for (int64_t i0 = 0; i0 < n; i0 += NNC_CHUNK) {
        int64_t m = n - i0 < NNC_CHUNK ? n - i0 : NNC_CHUNK;
        if (fa || fb) {
            /* float operands (Pow may mix an integer base or exponent with a float one) */
            double a[NNC_CHUNK], b[NNC_CHUNK], o[NNC_CHUNK];
            nnc_load_d(p[0], c->dta, i0 * sa, sa, m, a);
            nnc_load_d(p[1], c->dtb, i0 * sb, sb, m, b);
            float_op(op, m, a, b, o);
            if (nnc_dt_float(c->dto) || c->dto == DT_BOOL) {
                nnc_store_d(out, c->dto, i0, m, o);
            } else {
                int64_t r[NNC_CHUNK];
                for (int64_t i = 0; i < m; i++) r[i] = d2i(o[i]);
                nnc_store_i(out, c->dto, i0, m, r);
            }
        } else {
            int64_t a[NNC_CHUNK], b[NNC_CHUNK], o[NNC_CHUNK];
            nnc_load_i(p[0], c->dta, i0 * sa, sa, m, a);
            nnc_load_i(p[1], c->dtb, i0 * sb, sb, m, b);
            int_op(op, nnc_dt_unsigned(c->dta), width, m, a, b, o);
            nnc_store_i(out, c->dto, i0, m, o);
        }
    }
}
