/* Cast and CastLike between every numeric type and bool. Conversions follow onnxruntime's
 * CPU provider on x86-64: float to integer truncates toward zero, and NaN or values out of
 * range give what cvttss2si/cvttsd2si give there (the "integer indefinite" value, then
 * truncated to narrow types); integer to integer wraps; float16/bfloat16 round to nearest
 * even; anything to bool is "!= 0". */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <stdlib.h>

static int castable(int dt) { return nnc_dt_numeric(dt) || dt == DT_BOOL; }

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

typedef struct { int from, to; const void *x; void *y; } cast_job;

static void cast_range(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const cast_job *j = arg;
    int from = j->from, to = j->to;
    for (int64_t i0 = b; i0 < e; i0 += NNC_CHUNK) {
        int64_t m = e - i0 < NNC_CHUNK ? e - i0 : NNC_CHUNK;
        double d[NNC_CHUNK];
        int64_t k[NNC_CHUNK];
        if (nnc_dt_float(from)) {
            nnc_load_d(j->x, from, i0, 1, m, d);
            if (nnc_dt_float(to) || to == DT_BOOL) {
                nnc_store_d(j->y, to, i0, m, d);
            } else {
                for (int64_t i = 0; i < m; i++) k[i] = float_to_int(d[i], to);
                nnc_store_i(j->y, to, i0, m, k);
            }
        } else {
            nnc_load_i(j->x, from, i0, 1, m, k);
            if (!nnc_dt_float(to)) {
                nnc_store_i(j->y, to, i0, m, k);
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
    if (!castable(to))
        return nnc_node_unsup(e, n, "casting to %s is not supported", nnc_dtname(to));
    if (n->vin[0] && n->vin[0]->dtype && !castable(n->vin[0]->dtype))
        return nnc_node_unsup(e, n, "casting from %s is not supported", nnc_dtname(n->vin[0]->dtype));
    int *s = malloc(sizeof(int));
    if (!s) return nnc_node_fail(e, n, "out of memory");
    *s = to;
    n->state = s;
    return NNC_OK;
}

static int cast_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int to = *(int *)n->state;
    if (!castable(in[0]->dtype)) return nnc_node_fail(e, n, "casting from %s is not supported", nnc_dtname(in[0]->dtype));
    if (n->nin > 1 && in[1] && in[1]->dtype != to)
        return nnc_node_fail(e, n, "target_type input is %s, the model declared %s", nnc_dtname(in[1]->dtype), nnc_dtname(to));
    *out = *in[0];
    out->dtype = to;
    out->data = NULL;
    return NNC_OK;
}

static int cast_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)n; (void)x; (void)e;
    if (in[0]->dtype == out->dtype) {
        memcpy(out->data, in[0]->data, nnc_nbytes(out));
        return NNC_OK;
    }
    cast_job j = {in[0]->dtype, out->dtype, in[0]->data, out->data};
    nnc_parallel_for(nnc_numel(out), 16384, cast_range, &j);
    return NNC_OK;
}

static void cast_destroy(nnc_node *n) { free(n->state); n->state = NULL; }
const nnc_op nnc_op_cast = {"Cast", 1, 1, 1, 1, cast_create, cast_infer, cast_run, cast_destroy, 0};
const nnc_op nnc_op_castlike = {"CastLike", 2, 2, 1, 1, cast_create, cast_infer, cast_run, cast_destroy, 0};
