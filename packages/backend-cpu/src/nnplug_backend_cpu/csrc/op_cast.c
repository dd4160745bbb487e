/* Cast and CastLike between every numeric type and bool, the 8- and 4-bit floats and the 4-
 * and 2-bit integers (to and from strings: the section at the end). Conversions follow onnxruntime's CPU provider on x86-64: float to
 * integer truncates toward zero, and NaN or values out of range give what cvttss2si/cvttsd2si
 * give there (the "integer indefinite" value, then truncated to narrow types); integer to
 * integer wraps (to 4 and 2 bits too, as ml_dtypes does; a float out of a 4- or 2-bit type's
 * range gives 0 there, as ml_dtypes does); float16/bfloat16 round to nearest
 * even; anything to bool is "!= 0". The 8- and 4-bit floats follow the ONNX spec (typed.h):
 * one rounding to nearest even, `saturate` (default 1) clamping to the largest finite value. */
#define _GNU_SOURCE /* strtod_l, strtoll_l, uselocale */
#include "nnc.h"
#include "ops.h"
#include "typed.h"
#include "nnplug/common.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* Types computed through double: the wide floats, the 8- and 4-bit floats. */
static int floaty(int dt)
{
    return nnc_dt_float(dt) || nnc_dt_minifloat(dt) || dt == DT_F8E8M0;
}
static int castable_from(int dt)
{
    return floaty(dt) || nnc_dt_numeric(dt) || dt == DT_BOOL || nnc_dt_subbyte_int(dt);
}
static int castable_to(int dt)
{
    return castable_from(dt);
}

/* round_mode of casts to FLOAT8E8M0 (opset 25) */
enum { RM_UP, RM_DOWN, RM_NEAREST };
typedef struct {
    int to, saturate, round_mode;
} cast_state;

/* FLOAT8E8M0 (a biased power of two; 0xff is NaN) from the value as float32, as the ONNX spec
 * and onnx.numpy_helper.to_float8e8m0 give it: the sign is dropped, NaN and infinities give
 * 0xff, a mantissa rounds the exponent up, down or to nearest, and saturate stops at 0xfe. */
static uint8_t e8m0_encode(double v, int saturate, int mode)
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t ex = (u >> 23) & 0xffu, frac = u & 0x7fffffu;
    if (ex == 0xffu) return 0xff;
    int up = 0;
    if (mode == RM_UP) up = frac != 0;
    else if (mode == RM_NEAREST)
        up = (u & 0x400000u) && ((u & 0x200000u) || (u & 0x1fffffu) || ex > 0);
    if (saturate && ex == 0xfeu) up = 0;
    return (uint8_t)(ex + (uint32_t)up);
}

/* x86 truncating conversions without undefined behaviour. */
static int64_t cvt32(double v)
{
    if (!(v > -2147483649.0 && v < 2147483648.0)) return INT32_MIN;
    return (int64_t)v;
}
static int64_t cvt64(double v)
{
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return INT64_MIN;
    return (int64_t)v;
}
/* Unsigned 32/64-bit targets as compilers vectorise them on x86-64 (what onnxruntime's
 * loops run): values from 2^(w-1) up are converted less 2^(w-1), then the top bit set. */
static int64_t cvtu32(double v)
{
    if (v >= 2147483648.0) return (int64_t)(((uint32_t)cvt32(v - 2147483648.0)) ^ 0x80000000u);
    return (int64_t)(uint32_t)cvt32(v);
}
static int64_t cvtu64(double v)
{
    if (v >= 9223372036854775808.0)
        return (int64_t)((uint64_t)cvt64(v - 9223372036854775808.0) ^ 0x8000000000000000ull);
    return cvt64(v);
}

static int64_t float_to_int(double v, int to)
{
    switch (to) {
    case DT_I64: return cvt64(v);
    case DT_U64: return cvtu64(v);
    case DT_U32: return cvtu32(v);
    default: return cvt32(v); /* int8..int32, uint8, uint16 */
    }
}

typedef struct {
    int from, to, saturate, round_mode;
    const void *x;
    void *y;
} cast_job;

/* Store m doubles as `to` (a float type or bool); 8-bit floats honour `saturate`. */
static void store_floaty(const cast_job *j, int64_t i0, int64_t m, const double *d)
{
    void *y = j->y;
    int to = j->to, saturate = j->saturate;
    if (to == DT_F8E8M0) {
        for (int64_t i = 0; i < m; i++)
            ((uint8_t *)y)[i0 + i] = e8m0_encode(d[i], saturate, j->round_mode);
        return;
    }
    const nnc_minifloat *f = nnc_minifloat_of(to);
    if (!f) {
        nnc_store_d(y, to, i0, m, d);
        return;
    }
    uint8_t *q = (uint8_t *)y + i0;
    for (int64_t i = 0; i < m; i++) q[i] = nnc_mf_encode(f, d[i], saturate);
}

static void cast_range(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const cast_job *j = arg;
    int from = j->from, to = j->to;
    for (int64_t i0 = b; i0 < e; i0 += NNC_CHUNK) {
        int64_t m = e - i0 < NNC_CHUNK ? e - i0 : NNC_CHUNK;
        double d[NNC_CHUNK];
        int64_t k[NNC_CHUNK];
        if (floaty(from)) {
            nnc_load_d(j->x, from, i0, 1, m, d);
            if (floaty(to) || to == DT_BOOL) {
                store_floaty(j, i0, m, d);
            } else if (nnc_dt_subbyte_int(to)) { /* truncated; out of range or NaN: 0 (ml_dtypes) */
                int64_t lo, hi;
                nnc_subbyte_range(to, &lo, &hi);
                for (int64_t i = 0; i < m; i++) {
                    double t = trunc(d[i]);
                    k[i] = t >= (double)lo && t <= (double)hi ? (int64_t)t : 0;
                }
                nnc_store_i(j->y, to, i0, m, k);
            } else {
                for (int64_t i = 0; i < m; i++) k[i] = float_to_int(d[i], to);
                nnc_store_i(j->y, to, i0, m, k);
            }
        } else {
            nnc_load_i(j->x, from, i0, 1, m, k);
            if (!floaty(to)) {
                nnc_store_i(j->y, to, i0, m, k);
            } else if (nnc_dt_minifloat(to) ||
                       to == DT_F8E8M0) { /* exact in double to 2^53, past max */
                if (from == DT_U64)
                    for (int64_t i = 0; i < m; i++) d[i] = (double)(uint64_t)k[i];
                else
                    for (int64_t i = 0; i < m; i++) d[i] = (double)k[i];
                store_floaty(j, i0, m, d);
            } else if (to == DT_F64) {
                double *o = (double *)j->y + i0;
                if (from == DT_U64)
                    for (int64_t i = 0; i < m; i++) o[i] = (double)(uint64_t)k[i];
                else
                    for (int64_t i = 0; i < m; i++) o[i] = (double)k[i];
            } else {
                /* one rounding, integer -> float32 (then to 16 bits as onnxruntime does) */
                float f[NNC_CHUNK];
                if (from == DT_U64)
                    for (int64_t i = 0; i < m; i++) f[i] = (float)(uint64_t)k[i];
                else
                    for (int64_t i = 0; i < m; i++) f[i] = (float)k[i];
                if (to == DT_F32) memcpy((float *)j->y + i0, f, (size_t)m * sizeof(float));
                else if (to == DT_F16)
                    for (int64_t i = 0; i < m; i++) ((uint16_t *)j->y)[i0 + i] = nnc_f2h(f[i]);
                else
                    for (int64_t i = 0; i < m; i++) ((uint16_t *)j->y)[i0 + i] = nnc_f2bf(f[i]);
            }
        }
    }
}

/* Attributes into n->state; `strings`: the string cast (op_string.c's table) checks types. */
static int cast_setup(nnc_node *n, int strings, nnc_err *e)
{
    int to;
    int like = !strcmp(n->op_type, "CastLike");
    if (like) {
        to = n->vin[1] ? n->vin[1]->dtype : DT_UNDEF;
    } else {
        int64_t v;
        if (!nnc_attr_find(n, "to")) return nnc_node_fail(e, n, "attribute 'to' is required");
        TRY(nnc_attr_int(n, "to", 0, &v, e));
        if (v < 0 || v > 1000)
            return nnc_node_fail(e, n, "attribute 'to' = %lld is not an element type",
                                 (long long)v);
        to = (int)v;
    }
    if (!strings && !castable_to(to))
        return nnc_node_unsup(e, n, "casting to %s is not supported", nnc_dtname(to));
    if (!strings && n->vin[0] && n->vin[0]->dtype && !castable_from(n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "casting from %s is not supported",
                              nnc_dtname(n->vin[0]->dtype));
    int64_t sat = 1;
    if (n->opset >= 19 || n->opset == 0) TRY(nnc_attr_int(n, "saturate", 1, &sat, e));
    char rm[16];
    TRY(nnc_attr_str(n, "round_mode", "up", rm, sizeof rm, e));
    int mode = !strcmp(rm, "up")        ? RM_UP
               : !strcmp(rm, "down")    ? RM_DOWN
               : !strcmp(rm, "nearest") ? RM_NEAREST
                                        : -1;
    if (mode < 0)
        return nnc_node_fail(e, n, "attribute 'round_mode' = '%s' is not one of up, down, nearest",
                             rm);
    cast_state *s = malloc(sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    s->to = to;
    s->saturate = sat != 0;
    s->round_mode = mode;
    n->state = s;
    return NNC_OK;
}

static int cast_create(nnc_node *n, nnc_err *e)
{
    return cast_setup(n, 0, e);
}

/* The output: the input's shape as `to`. */
static int cast_shape(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int to = ((const cast_state *)n->state)->to;
    if (n->nin > 1 && in[1] && in[1]->dtype != to)
        return nnc_node_fail(e, n, "target_type input is %s, the model declared %s",
                             nnc_dtname(in[1]->dtype), nnc_dtname(to));
    *out = *in[0];
    out->dtype = to;
    out->data = NULL;
    return NNC_OK;
}

static int cast_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    if (!castable_from(in[0]->dtype))
        return nnc_node_fail(e, n, "casting from %s is not supported", nnc_dtname(in[0]->dtype));
    return cast_shape(n, in, out, e);
}

static int cast_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    (void)e;
    if (in[0]->dtype == out->dtype) {
        memcpy(out->data, in[0]->data, nnc_nbytes(out));
        return NNC_OK;
    }
    const cast_state *s = n->state;
    cast_job j = {in[0]->dtype, out->dtype, s->saturate, s->round_mode, in[0]->data, out->data};
    nnc_parallel_for(nnc_numel(out), 16384, cast_range, &j);
    return NNC_OK;
}

static void cast_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}
const nnc_op nnc_op_cast = {"Cast", 1, 1, 1, 1, cast_create, cast_infer, cast_run, cast_destroy, 0};
const nnc_op nnc_op_castlike = {"CastLike",   2, 2, 1, 1, cast_create, cast_infer, cast_run,
                                cast_destroy, 0};

/* ---- BitCast (opset 26): the same bits read as another type of the same width ---------- */

/* Bits per element: 4 and 2 for the padded sub-byte types, 0 for types BitCast cannot take. */
static int bit_width(int dt)
{
    if (dt == DT_I4 || dt == DT_U4 || dt == DT_F4E2M1) return 4;
    if (dt == DT_I2 || dt == DT_U2) return 2;
    return (int)nnc_dtsize(dt) * 8;
}

static int bitcast_create(nnc_node *n, nnc_err *e)
{
    int64_t v;
    if (!nnc_attr_find(n, "to")) return nnc_node_fail(e, n, "attribute 'to' is required");
    TRY(nnc_attr_int(n, "to", 0, &v, e));
    if (v <= 0 || v > 1000 || !bit_width((int)v))
        return nnc_node_unsup(e, n, "bit-casting to %s is not supported", nnc_dtname((int)v));
    int from = n->vin[0] ? n->vin[0]->dtype : DT_UNDEF;
    if (from && !bit_width(from))
        return nnc_node_unsup(e, n, "bit-casting from %s is not supported", nnc_dtname(from));
    if (v == DT_BOOL && from && from != DT_BOOL) /* bytes other than 0 and 1 are no bools */
        return nnc_node_unsup(e, n, "bit-casting %s to bool is not supported", nnc_dtname(from));
    if (from && bit_width(from) != bit_width((int)v))
        return nnc_node_fail(
            e, n, "input is %s (%d bits), 'to' is %s (%d bits): BitCast needs one bit width",
            nnc_dtname(from), bit_width(from), nnc_dtname((int)v), bit_width((int)v));
    cast_state *s = malloc(sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    s->to = (int)v;
    s->saturate = 0;
    s->round_mode = RM_UP;
    n->state = s;
    return NNC_OK;
}

static int bitcast_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int to = ((const cast_state *)n->state)->to;
    if (!bit_width(in[0]->dtype) || bit_width(in[0]->dtype) != bit_width(to))
        return nnc_node_fail(e, n, "input is %s; it cannot be bit-cast to %s",
                             nnc_dtname(in[0]->dtype), nnc_dtname(to));
    *out = *in[0];
    out->dtype = to;
    out->data = NULL;
    return NNC_OK;
}

static int bitcast_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)n;
    (void)x;
    (void)e;
    int w = bit_width(out->dtype);
    if (w >= 8) {
        memcpy(out->data, in[0]->data, nnc_nbytes(out));
        return NNC_OK;
    }
    /* padded sub-byte values: the low bits, re-extended as the target type holds them */
    const uint8_t *p = in[0]->data;
    uint8_t *q = out->data, mask = (uint8_t)((1u << w) - 1);
    int64_t k = nnc_numel(out);
    for (int64_t i = 0; i < k; i++)
        q[i] = nnc_dt_subbyte_int(out->dtype) ? nnc_subbyte_put(out->dtype, p[i] & mask)
                                              : (uint8_t)(p[i] & mask);
    return NNC_OK;
}

const nnc_op nnc_op_bitcast = {"BitCast",    1, 1, 1, 1, bitcast_create, bitcast_infer, bitcast_run,
                               cast_destroy, 0};

/* ---- Cast and CastLike to and from strings ---------------------------------------------- */

/* As onnxruntime's CPU provider (cast_op.cc), checked over a wide grid of inputs:
 *  - to string: floats of every width as printf("%.8g") of the value (float16, bfloat16 and
 *    the 8-bit floats widened first), NaN as "NaN", infinities as "INF" / "-INF"; integers in
 *    decimal; bool as "1" / "0".
 *  - from string: floats by strtod (leading space, a prefix such as "1.5abc", hex, "nan",
 *    "inf" all parse), then narrowed to float for every type but double, then to the target;
 *    signed integers by strtoll, unsigned ones and bool by strtoull (base 10, so "-1" is the
 *    largest uint64), then wrapped to the width (bool: != 0). Where std::stod / stoll / stoull
 *    throw there (nothing parsed; out of range, which includes strtod's underflow) the node
 *    fails naming the element and its text.
 * Parsing and printing run in the "C" locale of this thread only (uselocale / strtod_l), so a
 * host process's setlocale never changes a result. */

typedef nnp_string cstr;

static locale_t g_c_locale;
static pthread_once_t g_c_once = PTHREAD_ONCE_INIT;
static void c_locale_init(void)
{
    g_c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}
static locale_t c_locale(void)
{
    pthread_once(&g_c_once, c_locale_init);
    return g_c_locale;
}

/* Types a string casts to and from: the numeric types, bool, the 8-bit floats. */
static int str_castable(int dt)
{
    return nnc_dt_numeric(dt) || dt == DT_BOOL || dt == DT_STR ||
           (nnc_dt_minifloat(dt) && dt != DT_F4E2M1);
}

static int scast_create(nnc_node *n, nnc_err *e)
{
    TRY(cast_setup(n, 1, e));
    int to = ((const cast_state *)n->state)->to;
    int from = n->vin[0] ? n->vin[0]->dtype : DT_UNDEF;
    if (to != DT_STR && from != DT_UNDEF && from != DT_STR)
        return nnc_node_fail(e, n, "internal: a cast without strings came to the string cast");
    if (!str_castable(to) || (from != DT_UNDEF && !str_castable(from)))
        return nnc_node_unsup(
            e, n,
            "casting %s to %s is not supported (strings cast to and from the numeric types, "
            "bool and the 8-bit floats)",
            nnc_dtname(from), nnc_dtname(to));
    if (!c_locale()) return nnc_node_unsup(e, n, "the C locale could not be created");
    return NNC_OK;
}

static int scast_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int to = ((const cast_state *)n->state)->to;
    if (!str_castable(in[0]->dtype) || (to != DT_STR && in[0]->dtype != DT_STR))
        return nnc_node_unsup(e, n, "casting %s to %s is not supported", nnc_dtname(in[0]->dtype),
                              nnc_dtname(to));
    return cast_shape(n, in, out, e);
}

/* One output string: its own bytes (NULL for ""). */
static int str_put(const nnc_node *n, cstr *o, const char *p, size_t len, nnc_err *e)
{
    o->data = NULL;
    o->size = 0;
    if (!len) return NNC_OK;
    char *m = malloc(len);
    if (!m) return nnc_node_fail(e, n, "out of memory for a string of %zu bytes", len);
    memcpy(m, p, len);
    o->data = m;
    o->size = len;
    return NNC_OK;
}

/* Text of element i of a number tensor (the C locale is this thread's). */
static int num_text(const nnc_tensor *t, int64_t i, char *buf, size_t cap)
{
    int dt = t->dtype;
    if (nnc_dt_int(dt) || dt == DT_BOOL) {
        int64_t k;
        nnc_load_i(t->data, dt, i, 1, 1, &k);
        return dt == DT_U64 ? snprintf(buf, cap, "%llu", (unsigned long long)(uint64_t)k)
                            : snprintf(buf, cap, "%lld", (long long)k);
    }
    double d;
    nnc_load_d(t->data, dt, i, 1, 1, &d);
    if (isnan(d)) return snprintf(buf, cap, "NaN");
    if (isinf(d)) return snprintf(buf, cap, d < 0 ? "-INF" : "INF");
    return snprintf(buf, cap, "%.8g", d);
}

static int to_strings(nnc_node *n, const nnc_tensor *x, nnc_tensor *out, nnc_err *e)
{
    cstr *y = out->data;
    int64_t k = nnc_numel(out), i = 0;
    int rc = NNC_OK;
    locale_t old = uselocale(c_locale());
    for (; i < k; i++) {
        char buf[64];
        int len = num_text(x, i, buf, sizeof buf);
        if (len < 0 || (size_t)len >= sizeof buf) {
            rc = nnc_node_fail(e, n, "element %lld could not be printed", (long long)i);
            break;
        }
        if ((rc = str_put(n, &y[i], buf, (size_t)len, e))) break;
    }
    uselocale(old);
    for (; i < k; i++) y[i].data = NULL, y[i].size = 0;
    return rc;
}

/* The parse of one string as `to`: a double for the float types, else an integer's bits. */
static int parse_one(const nnc_node *n, const cstr *s, int64_t i, int to, double *d, int64_t *k,
                     nnc_err *e)
{
    char small[128], *buf = small;
    if (s->size && !s->data)
        return nnc_node_fail(e, n, "string element %lld has %llu bytes at NULL", (long long)i,
                             (unsigned long long)s->size);
    if (s->size >= sizeof small && !(buf = malloc((size_t)s->size + 1)))
        return nnc_node_fail(e, n, "out of memory");
    if (s->size) memcpy(buf, s->data, (size_t)s->size);
    buf[s->size] = 0; /* as std::string's c_str(): an embedded NUL ends the text */
    char *end = NULL;
    const char *what;
    locale_t loc = c_locale();
    errno = 0;
    if (!nnc_dt_int(to) && to != DT_BOOL) {
        *d = strtod_l(buf, &end, loc);
        what = "a double (std::stod)";
    } else if (nnc_dt_signed(to)) {
        *k = (int64_t)strtoll_l(buf, &end, 10, loc);
        what = "an int64 (std::stoll)";
    } else {
        *k = (int64_t)strtoull_l(buf, &end, 10, loc);
        what = "a uint64 (std::stoull)";
    }
    int bad = end == buf, range = errno == ERANGE;
    int rc = NNC_OK;
    if (bad || range) {
        int shown = s->size > 60 ? 60 : (int)s->size;
        rc = nnc_node_fail(e, n,
                           "string element %lld, \"%.*s\"%s, %s %s, as onnxruntime refuses it too; "
                           "clean the input or map it with LabelEncoder first",
                           (long long)i, shown, buf, s->size > 60 ? "..." : "",
                           bad ? "does not start with" : "is out of the range of", what);
    }
    if (buf != small) free(buf);
    return rc;
}

static int from_strings(nnc_node *n, const nnc_tensor *x, nnc_tensor *out, int saturate, nnc_err *e)
{
    const cstr *s = x->data;
    int to = out->dtype;
    int64_t total = nnc_numel(out);
    const nnc_minifloat *mf = nnc_minifloat_of(to);
    for (int64_t i = 0; i < total; i++) {
        double d = 0;
        int64_t k = 0;
        TRY(parse_one(n, &s[i], i, to, &d, &k, e));
        if (nnc_dt_int(to)) {
            nnc_store_i(out->data, to, i, 1, &k);
            continue;
        }
        if (to == DT_BOOL) {
            ((uint8_t *)out->data)[i] = k != 0;
            continue;
        }
        if (to != DT_F64) d = (double)(float)d; /* narrowed to float first, as onnxruntime */
        if (to == DT_BF16 && isnan(d)) d = fabs(d); /* its bfloat16 NaN is positive */
        if (mf) ((uint8_t *)out->data)[i] = nnc_mf_encode(mf, d, saturate);
        else nnc_store_d(out->data, to, i, 1, &d);
    }
    return NNC_OK;
}

static int scast_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const cast_state *st = n->state;
    if (in[0]->dtype == DT_STR && out->dtype == DT_STR) {
        const cstr *s = in[0]->data;
        cstr *y = out->data;
        int64_t k = nnc_numel(out), i = 0;
        int rc = NNC_OK;
        for (; i < k && rc == NNC_OK; i++) rc = str_put(n, &y[i], s[i].data, (size_t)s[i].size, e);
        for (; i < k; i++) y[i].data = NULL, y[i].size = 0;
        return rc;
    }
    if (out->dtype == DT_STR) return to_strings(n, in[0], out, e);
    return from_strings(n, in[0], out, st->saturate, e);
}

const nnc_op nnc_op_cast_str = {"Cast",       1, 1, 1, 1, scast_create, scast_infer, scast_run,
                                cast_destroy, 0};
const nnc_op nnc_op_castlike_str = {"CastLike",   2, 2, 1, 1, scast_create, scast_infer, scast_run,
                                    cast_destroy, 0};
