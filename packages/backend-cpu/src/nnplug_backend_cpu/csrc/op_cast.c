/* Cast and CastLike between every numeric type and bool, the 8- and 4-bit floats and the 4-
 * and 2-bit integers. Conversions follow onnxruntime's CPU provider on x86-64: float to
 * integer truncates toward zero, and NaN or values out of range give what cvttss2si/cvttsd2si
 * give there (the "integer indefinite" value, then truncated to narrow types); integer to
 * integer wraps (to 4 and 2 bits too, as ml_dtypes does; a float out of a 4- or 2-bit type's
 * range gives 0 there, as ml_dtypes does); float16/bfloat16 round to nearest
 * even; anything to bool is "!= 0". The 8- and 4-bit floats follow the ONNX spec (typed.h):
 * one rounding to nearest even, `saturate` (default 1) clamping to the largest finite value. */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <math.h>
#include <stdlib.h>

/* Types computed through double: the wide floats, the 8- and 4-bit floats. */
static int floaty(int dt) { return nnc_dt_float(dt) || nnc_dt_minifloat(dt) || dt == DT_F8E8M0; }
static int castable_from(int dt) { return floaty(dt) || nnc_dt_numeric(dt) || dt == DT_BOOL || nnc_dt_subbyte_int(dt); }
static int castable_to(int dt) { return castable_from(dt); }

/* round_mode of casts to FLOAT8E8M0 (opset 25) */
enum { RM_UP, RM_DOWN, RM_NEAREST };
typedef struct { int to, saturate, round_mode; } cast_state;

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
    else if (mode == RM_NEAREST) up = (u & 0x400000u) && ((u & 0x200000u) || (u & 0x1fffffu) || ex > 0);
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

typedef struct { int from, to, saturate, round_mode; const void *x; void *y; } cast_job;

/* Store m doubles as `to` (a float type or bool); 8-bit floats honour `saturate`. */
static void store_floaty(const cast_job *j, int64_t i0, int64_t m, const double *d)
{
    void *y = j->y;
    int to = j->to, saturate = j->saturate;
    if (to == DT_F8E8M0) {
        for (int64_t i = 0; i < m; i++) ((uint8_t *)y)[i0 + i] = e8m0_encode(d[i], saturate, j->round_mode);
        return;
    }
    const nnc_minifloat *f = nnc_minifloat_of(to);
    if (!f) { nnc_store_d(y, to, i0, m, d); return; }
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
            } else if (nnc_dt_minifloat(to) || to == DT_F8E8M0) { /* exact in double to 2^53, past max */
                if (from == DT_U64) for (int64_t i = 0; i < m; i++) d[i] = (double)(uint64_t)k[i];
                else for (int64_t i = 0; i < m; i++) d[i] = (double)k[i];
                store_floaty(j, i0, m, d);
            } else if (to == DT_F64) {
                double *o = (double *)j->y + i0;
                if (from == DT_U64) for (int64_t i = 0; i < m; i++) o[i] = (double)(uint64_t)k[i];
                else for (int64_t i = 0; i < m; i++) o[i] = (double)k[i];
            } else {
                /* one rounding, integer -> float32 (then to 16 bits as onnxruntime does) */
                float f[NNC_CHUNK];
                if (from == DT_U64) for (int64_t i = 0; i < m; i++) f[i] = (float)(uint64_t)k[i];
                else for (int64_t i = 0; i < m; i++) f[i] = (float)k[i];
                if (to == DT_F32) memcpy((float *)j->y + i0, f, (size_t)m * sizeof(float));
                else if (to == DT_F16) for (int64_t i = 0; i < m; i++) ((uint16_t *)j->y)[i0 + i] = nnc_f2h(f[i]);
                else for (int64_t i = 0; i < m; i++) ((uint16_t *)j->y)[i0 + i] = nnc_f2bf(f[i]);
            }
        }
    }
}

static int cast_create(nnc_node *n, nnc_err *e)
{
    int to;
    int like = !strcmp(n->op_type, "CastLike");
    if (like) {
        to = n->vin[1] ? n->vin[1]->dtype : DT_UNDEF;
    } else {
        int64_t v;
        if (!nnc_attr_find(n, "to")) return nnc_node_fail(e, n, "attribute 'to' is required");
        TRY(nnc_attr_int(n, "to", 0, &v, e));
        if (v < 0 || v > 1000) return nnc_node_fail(e, n, "attribute 'to' = %lld is not an element type", (long long)v);
        to = (int)v;
    }
    if (!castable_to(to))
        return nnc_node_unsup(e, n, "casting to %s is not supported", nnc_dtname(to));
    if (n->vin[0] && n->vin[0]->dtype && !castable_from(n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "casting from %s is not supported", nnc_dtname(n->vin[0]->dtype));
    int64_t sat = 1;
    if (n->opset >= 19 || n->opset == 0) TRY(nnc_attr_int(n, "saturate", 1, &sat, e));
    char rm[16];
    TRY(nnc_attr_str(n, "round_mode", "up", rm, sizeof rm, e));
    int mode = !strcmp(rm, "up") ? RM_UP : !strcmp(rm, "down") ? RM_DOWN : !strcmp(rm, "nearest") ? RM_NEAREST : -1;
    if (mode < 0) return nnc_node_fail(e, n, "attribute 'round_mode' = '%s' is not one of up, down, nearest", rm);
    cast_state *s = malloc(sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    s->to = to;
    s->saturate = sat != 0;
    s->round_mode = mode;
    n->state = s;
    return NNC_OK;
}

static int cast_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int to = ((const cast_state *)n->state)->to;
    if (!castable_from(in[0]->dtype)) return nnc_node_fail(e, n, "casting from %s is not supported", nnc_dtname(in[0]->dtype));
    if (n->nin > 1 && in[1] && in[1]->dtype != to)
        return nnc_node_fail(e, n, "target_type input is %s, the model declared %s", nnc_dtname(in[1]->dtype), nnc_dtname(to));
    *out = *in[0];
    out->dtype = to;
    out->data = NULL;
    return NNC_OK;
}

static int cast_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x; (void)e;
    if (in[0]->dtype == out->dtype) {
        memcpy(out->data, in[0]->data, nnc_nbytes(out));
        return NNC_OK;
    }
    const cast_state *s = n->state;
    cast_job j = {in[0]->dtype, out->dtype, s->saturate, s->round_mode, in[0]->data, out->data};
    nnc_parallel_for(nnc_numel(out), 16384, cast_range, &j);
    return NNC_OK;
}

static void cast_destroy(nnc_node *n) { free(n->state); n->state = NULL; }
const nnc_op nnc_op_cast = {"Cast", 1, 1, 1, 1, cast_create, cast_infer, cast_run, cast_destroy, 0};
const nnc_op nnc_op_castlike = {"CastLike", 2, 2, 1, 1, cast_create, cast_infer, cast_run, cast_destroy, 0};

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
        return nnc_node_fail(e, n, "input is %s (%d bits), 'to' is %s (%d bits): BitCast needs one bit width",
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
        return nnc_node_fail(e, n, "input is %s; it cannot be bit-cast to %s", nnc_dtname(in[0]->dtype), nnc_dtname(to));
    *out = *in[0];
    out->dtype = to;
    out->data = NULL;
    return NNC_OK;
}

static int bitcast_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)n; (void)x; (void)e;
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
        q[i] = nnc_dt_subbyte_int(out->dtype) ? nnc_subbyte_put(out->dtype, p[i] & mask) : (uint8_t)(p[i] & mask);
    return NNC_OK;
}

const nnc_op nnc_op_bitcast = {"BitCast", 1, 1, 1, 1, bitcast_create, bitcast_infer, bitcast_run, cast_destroy, 0};
