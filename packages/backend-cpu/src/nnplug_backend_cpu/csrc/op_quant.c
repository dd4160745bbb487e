/* Quantized ops with onnxruntime's integer arithmetic: QuantizeLinear and DequantizeLinear
 * (per-tensor, per-axis, blocked; 16-, 8-, 4- and 2-bit integers, 8- and 4-bit floats; float32,
 * float16 and bfloat16 scales), DynamicQuantizeLinear, MatMulInteger,
 * ConvInteger, QLinearMatMul and QLinearConv. Rounding is to nearest, ties to even
 * (nearbyintf), then saturation to the output type; accumulation is exact in int32. */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <math.h>
#include <stdlib.h>

static void q_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int is_q8(int dt)
{
    return dt == DT_U8 || dt == DT_I8;
}
static int is_q16(int dt)
{
    return dt == DT_U16 || dt == DT_I16;
}
/* The integer types QuantizeLinear produces, the 4- and 2-bit ones padded (typed.h). */
static int is_qint(int dt)
{
    return is_q8(dt) || is_q16(dt) || nnc_dt_subbyte_int(dt);
}
/* Scales, quantizer inputs and dequantizer outputs. */
static int is_qscale(int dt)
{
    return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16;
}

static inline int32_t qget(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case DT_U8: return ((const uint8_t *)p)[i];
    case DT_I8: return ((const int8_t *)p)[i];
    case DT_U16: return ((const uint16_t *)p)[i];
    case DT_I16: return ((const int16_t *)p)[i];
    case DT_I4:
    case DT_U4:
    case DT_I2:
    case DT_U2: return (int32_t)nnc_subbyte_get(dt, ((const uint8_t *)p)[i]);
    default: return ((const int32_t *)p)[i];
    }
}

static void qrange(int dt, float *lo, float *hi)
{
    switch (dt) {
    case DT_U8:
        *lo = 0;
        *hi = 255;
        break;
    case DT_I8:
        *lo = -128;
        *hi = 127;
        break;
    case DT_U16:
        *lo = 0;
        *hi = 65535;
        break;
    case DT_U4:
        *lo = 0;
        *hi = 15;
        break;
    case DT_I4:
        *lo = -8;
        *hi = 7;
        break;
    case DT_U2:
        *lo = 0;
        *hi = 3;
        break;
    case DT_I2:
        *lo = -2;
        *hi = 1;
        break;
    default:
        *lo = -32768;
        *hi = 32767;
        break;
    }
}

/* round(v) + zp, saturated; v already divided by the scale */
static inline void qput(void *p, int dt, int64_t i, float v, int32_t zp, float lo, float hi)
{
    float r = nearbyintf(v) + (float)zp;
    /* NaN (x or scale NaN, 0/0, inf/inf; undefined in the spec): the lowest value, as onnxruntime */
    r = r != r ? lo : r < lo ? lo : r > hi ? hi : r;
    switch (dt) {
    case DT_U8: ((uint8_t *)p)[i] = (uint8_t)r; break;
    case DT_I8: ((int8_t *)p)[i] = (int8_t)r; break;
    case DT_U16: ((uint16_t *)p)[i] = (uint16_t)r; break;
    case DT_I4:
    case DT_U4:
    case DT_I2:
    case DT_U2: ((uint8_t *)p)[i] = nnc_subbyte_put(dt, (int64_t)r); break;
    default: ((int16_t *)p)[i] = (int16_t)r; break;
    }
}

/* A float32 value rounded to nearest even as float16 or bfloat16 holds it (else unchanged). */
static inline float round_to(int dt, float v)
{
    if (dt == DT_F16) return nnc_h2f(nnc_f2h(v));
    if (dt == DT_BF16) return nnc_bf2f(nnc_f2bf(v));
    return v;
}

static inline float fget(const void *p, int dt, int64_t i)
{
    if (dt == DT_F32) return ((const float *)p)[i];
    return (float)nnc_get_d(p, dt, i);
}

/* ---- 8-bit loops without per-element dispatch ---------------------------------------- */

/* round(x / sc) + z saturated to [lo, hi], as qput does, without nearbyintf (a library call
 * where the baseline x86-64 has no roundss): v is first clamped to [-1024, 1024], which changes
 * no saturated result (|zp| <= 255) and lets (v + 1.5 * 2^23) - 1.5 * 2^23 round it to an
 * integer, ties to even, in the current (nearest) mode; a NaN fails every compare and comes
 * out as lo, as in qput. Branch-free, so the loops below vectorise. */
static inline float q8_value(float x, float sc, float z, float lo, float hi)
{
    float v = x / sc;
    v = v < -1024.f ? -1024.f : v > 1024.f ? 1024.f : v;
    float r = (v + 12582912.f) - 12582912.f + z;
    return r != r ? lo : r < lo ? lo : r > hi ? hi : r;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define Q8_AVX512 1

/* quant8's arithmetic 16 floats at a time, the same operations in the same order (so the
 * same bits): a NaN quotient, which the clamps would turn into a number, is set to lo after. */
__attribute__((target("avx512f"))) static int64_t
quant8_avx512(const float *x, float sc, float z, float lo, float hi, int8_t *y, int64_t n)
{
    const __m512 s = _mm512_set1_ps(sc), zz = _mm512_set1_ps(z), vlo = _mm512_set1_ps(lo),
                 vhi = _mm512_set1_ps(hi), big = _mm512_set1_ps(1024.f),
                 nbig = _mm512_set1_ps(-1024.f), magic = _mm512_set1_ps(12582912.f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i), s);
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        v = _mm512_max_ps(_mm512_min_ps(v, big), nbig);
        __m512 r = _mm512_add_ps(_mm512_sub_ps(_mm512_add_ps(v, magic), magic), zz);
        r = _mm512_mask_blend_ps(nan, _mm512_min_ps(_mm512_max_ps(r, vlo), vhi), vlo);
        _mm_storeu_si128((__m128i *)(y + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
    }
    return i;
}

/* DynamicQuantizeLinear's range of n floats: min and max with 0, and whether one is NaN
 * (min_ps(v, lo) is v < lo ? v : lo, the scalar loop's compare). */
__attribute__((target("avx512f"))) static int64_t range_avx512(const float *x, int64_t n, float *mn,
                                                               float *mx, int *nan)
{
    __m512 lo = _mm512_setzero_ps(), hi = lo;
    __mmask16 bad = 0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        lo = _mm512_min_ps(v, lo);
        hi = _mm512_max_ps(v, hi);
        bad |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    }
    *mn = _mm512_reduce_min_ps(lo);
    *mx = _mm512_reduce_max_ps(hi);
    *nan = bad != 0;
    return i;
}
#endif

/* y[i] = saturate(round(x[i] / sc) + zp) into uint8 or int8 for n floats sharing one scale and
 * zero point. */
static void quant8(const float *x, float sc, int32_t zp, int dt, void *y, int64_t n)
{
    const float z = (float)zp;
#ifdef Q8_AVX512
    if (nnc_isa_level() >= 2) { /* AVX-512 present, not capped by NNPLUG_CPU_ISA */
        int64_t done = dt == DT_U8 ? quant8_avx512(x, sc, z, 0.f, 255.f, y, n)
                                   : quant8_avx512(x, sc, z, -128.f, 127.f, y, n);
        x += done;
        y = (int8_t *)y + done;
        n -= done;
    }
#endif
    if (dt == DT_U8) {
        uint8_t *o = y;
        for (int64_t i = 0; i < n; i++) o[i] = (uint8_t)(int32_t)q8_value(x[i], sc, z, 0.f, 255.f);
    } else {
        int8_t *o = y;
        for (int64_t i = 0; i < n; i++)
            o[i] = (int8_t)(int32_t)q8_value(x[i], sc, z, -128.f, 127.f);
    }
}

/* y[i] = (x[i] - zp) * sc from uint8 or int8, as the generic loop computes it. */
static void dequant8(const void *x, int dt, float sc, int32_t zp, float *y, int64_t n)
{
    if (dt == DT_U8)
        for (int64_t i = 0; i < n; i++) y[i] = (float)((int32_t)((const uint8_t *)x)[i] - zp) * sc;
    else
        for (int64_t i = 0; i < n; i++) y[i] = (float)((int32_t)((const int8_t *)x)[i] - zp) * sc;
}

/* ---- QuantizeLinear / DequantizeLinear ------------------------------------------------ */

/* out_dt: the output type; prec: the type x and the scale are divided in (QuantizeLinear's
 * `precision`, else what numpy's promotion of the two gives: float16 or bfloat16 only when
 * both are, else float32); saturate: 8-bit float outputs only. */
typedef struct {
    int quant;
    int64_t axis, block;
    int out_dt, prec, saturate;
} ql_state;

static int ql_create(nnc_node *n, nnc_err *e)
{
    ql_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->quant = !strcmp(n->op_type, "QuantizeLinear");
    TRY(nnc_attr_int(n, "axis", 1, &s->axis, e));
    TRY(nnc_attr_int(n, "block_size", 0, &s->block, e));
    if (s->block < 0) return nnc_node_fail(e, n, "attribute 'block_size' must not be negative");
    int64_t od, prec, sat;
    TRY(nnc_attr_int(n, "output_dtype", 0, &od, e));
    TRY(nnc_attr_int(n, "precision", 0, &prec, e));
    TRY(nnc_attr_int(n, "saturate", 1, &sat, e));
    s->saturate = sat != 0;
    static const int fl[] = {DT_F32, DT_F16, DT_BF16, 0};
    const nnc_valinfo *x = n->vin[0], *sc = n->vin[1],
                      *zp = nnc_in_present(n, 2) ? n->vin[2] : NULL;
    TRY(nnc_check_dtype(n, 1, fl, e));
    if (s->quant) {
        TRY(nnc_check_dtype(n, 0, fl, e));
        if (prec && !is_qscale((int)prec))
            return nnc_node_unsup(
                e, n,
                "attribute 'precision' = %lld is not supported (float32, float16, bfloat16 are)",
                (long long)prec);
        if (!x || !x->dtype || !sc || !sc->dtype)
            return nnc_node_unsup(e, n, "the input and scale types must be known");
        s->prec = prec ? (int)prec : (x->dtype == sc->dtype ? x->dtype : DT_F32);
        int zdt = zp ? zp->dtype : DT_UNDEF;
        if (zp && zdt == DT_UNDEF)
            return nnc_node_unsup(e, n, "the zero point's element type must be known");
        s->out_dt = zdt ? zdt : od ? (int)od : DT_U8;
        if (od && zdt && od != zdt)
            return nnc_node_fail(e, n,
                                 "attribute 'output_dtype' differs from the zero point's type");
        if (!is_qint(s->out_dt) && !nnc_dt_minifloat(s->out_dt))
            return nnc_node_unsup(e, n, "quantizing to %s is not supported", nnc_dtname(s->out_dt));
    } else {
        static const int xs[] = {DT_U8,         DT_I8,     DT_U16,        DT_I16,    DT_I32,
                                 DT_U4,         DT_I4,     DT_U2,         DT_I2,     DT_F8E4M3FN,
                                 DT_F8E4M3FNUZ, DT_F8E5M2, DT_F8E5M2FNUZ, DT_F4E2M1, 0};
        TRY(nnc_check_dtype(n, 0, xs, e));
        if (od && !is_qscale((int)od))
            return nnc_node_unsup(e, n, "output_dtype %s is not supported", nnc_dtname((int)od));
        if (zp && x && zp->dtype && x->dtype && zp->dtype != x->dtype)
            return nnc_node_fail(e, n, "the zero point's type differs from the input's");
        if (x && x->dtype == DT_UNDEF)
            return nnc_node_unsup(e, n, "the input's element type must be known");
        if (!sc || !sc->dtype)
            return nnc_node_unsup(e, n, "the scale's element type must be known");
        s->out_dt = od ? (int)od : sc->dtype;
    }
    return NNC_OK;
}

typedef struct {
    int64_t axis, dimA, inner, nb, bs;
    int mode;
} qmap; /* mode 0 tensor, 1 axis, 2 block */

static int ql_map(nnc_node *n, nnc_tensor *const *in, qmap *m, nnc_err *e)
{
    const ql_state *s = n->state;
    const nnc_tensor *x = in[0], *sc = in[1], *zp = n->nin > 2 ? in[2] : NULL;
    memset(m, 0, sizeof *m);
    if (!is_qscale(sc->dtype))
        return nnc_node_fail(e, n, "the scale must be float32, float16 or bfloat16");
    if (s->quant ? !is_qscale(x->dtype)
                 : (!is_qint(x->dtype) && x->dtype != DT_I32 && !nnc_dt_minifloat(x->dtype)))
        return nnc_node_fail(e, n, "input has element type %s", nnc_dtname(x->dtype));
    if (zp) {
        if (zp->dtype != (s->quant ? s->out_dt : x->dtype))
            return nnc_node_fail(e, n, "the zero point has the wrong element type");
        if (!nnc_same_shape(zp, sc) &&
            !(nnc_numel(zp) == 1 && nnc_numel(sc) == 1)) /* [1] and () alike */
            return nnc_node_fail(e, n, "the zero point's shape differs from the scale's");
        if (!s->quant && x->dtype == DT_I32)
            for (int64_t i = 0; i < nnc_numel(zp); i++)
                if (((const int32_t *)zp->data)[i])
                    return nnc_node_fail(e, n, "an int32 input needs a zero point of 0");
        if (nnc_dt_minifloat(zp->dtype) &&
            zp->dtype != DT_F4E2M1) /* ONNX: 8-bit float zero points are 0 */
            for (int64_t i = 0; i < nnc_numel(zp); i++)
                if (nnc_get_d(zp->data, zp->dtype, i) != 0)
                    return nnc_node_fail(e, n, "a %s zero point must be 0", nnc_dtname(zp->dtype));
    }
    int r = x->ndim;
    int64_t k = nnc_numel(sc);
    if (s->block == 0 && (sc->ndim == 0 || (sc->ndim == 1 && k == 1))) return NNC_OK;
    if (s->axis < -r || s->axis >= r)
        return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d",
                             (long long)s->axis, r);
    int a = (int)(s->axis < 0 ? s->axis + r : s->axis);
    m->axis = a;
    m->dimA = x->dims[a];
    m->inner = 1;
    for (int d = a + 1; d < r; d++) m->inner *= x->dims[d];
    if (s->block == 0) {
        if (sc->ndim != 1 || k != m->dimA)
            return nnc_node_fail(e, n, "a per-axis scale must be 1-D with %lld values",
                                 (long long)m->dimA);
        m->mode = 1;
        return NNC_OK;
    }
    if (sc->ndim != r) return nnc_node_fail(e, n, "a blocked scale must have the input's rank");
    m->nb = (m->dimA + s->block - 1) / s->block;
    for (int d = 0; d < r; d++)
        if (sc->dims[d] != (d == a ? m->nb : x->dims[d]))
            return nnc_node_fail(
                e, n, "the blocked scale's shape does not match the input and block_size");
    m->bs = s->block;
    m->mode = 2;
    return NNC_OK;
}

static int ql_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const ql_state *s = n->state;
    qmap m;
    TRY(ql_map(n, in, &m, e));
    *out = *in[0];
    out->dtype = s->out_dt;
    return NNC_OK;
}

static inline int64_t qidx(const qmap *m, int64_t i)
{
    if (m->mode == 0) return 0;
    int64_t a = (i / m->inner) % m->dimA;
    if (m->mode == 1) return a;
    int64_t outer = i / (m->inner * m->dimA);
    return (outer * m->nb + a / m->bs) * m->inner + i % m->inner;
}

typedef struct {
    const ql_state *s;
    qmap m;
    const void *x, *zp, *sc;
    void *y;
    int xdt, zdt, sdt;
} ql_job;

/* The 8-bit, float32, per-tensor or per-axis case (QDQ models' activations and weights), by
 * runs of elements sharing a scale: quant8 / dequant8. 0 when it is another case. */
static int ql_range8(const ql_job *j, int64_t b, int64_t e)
{
    const ql_state *s = j->s;
    int qdt = s->quant ? s->out_dt : j->xdt;
    if (j->m.mode == 2 || j->sdt != DT_F32 || !is_q8(qdt) ||
        (s->quant ? j->xdt != DT_F32 || s->prec != DT_F32 : s->out_dt != DT_F32))
        return 0;
    for (int64_t i = b; i < e;) {
        int64_t q = qidx(&j->m, i), end = e;
        if (j->m.mode == 1) { /* to the end of this run of the axis' index */
            int64_t next = (i / j->m.inner + 1) * j->m.inner;
            end = next < e ? next : e;
        }
        float sc = ((const float *)j->sc)[q];
        int32_t zp = j->zp ? qget(j->zp, j->zdt, q) : 0;
        if (s->quant) quant8((const float *)j->x + i, sc, zp, qdt, (uint8_t *)j->y + i, end - i);
        else dequant8((const uint8_t *)j->x + i, qdt, sc, zp, (float *)j->y + i, end - i);
        i = end;
    }
    return 1;
}

static void ql_range(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const ql_job *j = arg;
    const ql_state *s = j->s;
    if (ql_range8(j, b, e)) return;
    if (s->quant) {
        float lo, hi;
        qrange(s->out_dt, &lo, &hi);
        const nnc_minifloat *f = nnc_minifloat_of(s->out_dt);
        int wide = j->xdt == DT_F32 && j->sdt == DT_F32 && s->prec == DT_F32;
        for (int64_t i = b; i < e; i++) {
            int64_t q = qidx(&j->m, i);
            float v;
            if (wide) v = ((const float *)j->x)[i] / ((const float *)j->sc)[q];
            else
                v = round_to(s->prec, round_to(s->prec, fget(j->x, j->xdt, i)) /
                                          round_to(s->prec, fget(j->sc, j->sdt, q)));
            if (!f) {
                qput(j->y, s->out_dt, i, v, j->zp ? qget(j->zp, j->zdt, q) : 0, lo, hi);
            } else { /* 8-bit floats ignore their (zero) zero point; float4 adds it, saturating */
                double d = v;
                if (s->out_dt == DT_F4E2M1 && j->zp)
                    d = (double)(v + (float)nnc_get_d(j->zp, j->zdt, q));
                ((uint8_t *)j->y)[i] =
                    nnc_mf_encode(f, d, s->out_dt == DT_F4E2M1 ? 1 : s->saturate);
            }
        }
    } else {
        int fx = nnc_dt_minifloat(j->xdt); /* zero point ignored (0 for 8-bit floats) */
        float o[NNC_CHUNK];
        double od[NNC_CHUNK];
        for (int64_t i0 = b; i0 < e; i0 += NNC_CHUNK) {
            int64_t m = e - i0 < NNC_CHUNK ? e - i0 : NNC_CHUNK;
            for (int64_t t = 0; t < m; t++) {
                int64_t i = i0 + t, q = qidx(&j->m, i);
                float dx;
                if (fx) dx = (float)nnc_get_d(j->x, j->xdt, i);
                else dx = (float)(qget(j->x, j->xdt, i) - (j->zp ? qget(j->zp, j->zdt, q) : 0));
                o[t] = dx * fget(j->sc, j->sdt, q);
            }
            if (s->out_dt == DT_F32) memcpy((float *)j->y + i0, o, (size_t)m * sizeof(float));
            else {
                for (int64_t t = 0; t < m; t++) od[t] = o[t];
                nnc_store_d(j->y, s->out_dt, i0, m, od);
            }
        }
    }
}

static int ql_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    ql_job j;
    j.s = n->state;
    TRY(ql_map(n, in, &j.m, e));
    const nnc_tensor *zp = n->nin > 2 ? in[2] : NULL;
    j.x = in[0]->data;
    j.sc = in[1]->data;
    j.sdt = in[1]->dtype;
    j.zp = zp ? zp->data : NULL;
    j.zdt = zp ? zp->dtype : DT_U8;
    j.xdt = in[0]->dtype;
    j.y = out->data;
    nnc_parallel_for(nnc_numel(in[0]), 16384, ql_range, &j);
    return NNC_OK;
}

const nnc_op nnc_op_quantizelinear = {"QuantizeLinear", 2,        3,      1,         1,
                                      ql_create,        ql_infer, ql_run, q_destroy, 0};
const nnc_op nnc_op_dequantizelinear = {"DequantizeLinear", 2,        3,      1,         1,
                                        ql_create,          ql_infer, ql_run, q_destroy, 0};

/* ---- DynamicQuantizeLinear ----------------------------------------------------------- */

static int dq_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    return nnc_check_dtype(n, 0, f32, e);
}

static int dq_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    if (in[0]->dtype != DT_F32) return nnc_node_fail(e, n, "the input must be float32");
    out[0] = *in[0];
    out[0].dtype = DT_U8;
    for (int k = 1; k < n->nout && k < 3; k++) {
        out[k].dtype = k == 1 ? DT_F32 : DT_U8;
        out[k].ndim = 0;
    }
    return NNC_OK;
}

/* DynamicQuantizeLinear's range over chunks of DQ_CHUNK elements, a chunk per job: each
 * chunk's min and max (0 included) and whether it holds a NaN, combined after in any order
 * (min and max are exact; a NaN fails every compare, so it only sets the flag). */
#define DQ_CHUNK 16384
typedef struct {
    const float *x;
    int64_t n;
    float *mn, *mx;
    int *nan;
    float sc;
    int32_t zp;
    uint8_t *y;
} dq_job;

static void dq_range(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const dq_job *j = arg;
    for (int64_t c = b; c < e; c++) {
        const float *x = j->x + c * DQ_CHUNK;
        int64_t m = j->n - c * DQ_CHUNK < DQ_CHUNK ? j->n - c * DQ_CHUNK : DQ_CHUNK, i = 0;
        float lo = 0.f, hi = 0.f;
        int bad = 0;
#ifdef Q8_AVX512
        if (nnc_isa_level() >= 2) i = range_avx512(x, m, &lo, &hi, &bad);
#endif
        for (; i < m; i++) {
            lo = x[i] < lo ? x[i] : lo;
            hi = x[i] > hi ? x[i] : hi;
            bad |= x[i] != x[i];
        }
        j->mn[c] = lo;
        j->mx[c] = hi;
        j->nan[c] = bad;
    }
}

static void dq_quant_range(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const dq_job *j = arg;
    quant8(j->x + b, j->sc, j->zp, DT_U8, j->y + b, e - b);
}

static int dq_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    dq_job j = {.x = in[0]->data, .n = nnc_numel(in[0])};
    int64_t chunks = (j.n + DQ_CHUNK - 1) / DQ_CHUNK;
    float one[2];
    int one_nan;
    j.mn = chunks > 1 ? malloc((size_t)chunks * 2 * sizeof(float)) : one;
    j.nan = chunks > 1 ? malloc((size_t)chunks * sizeof(int)) : &one_nan;
    if (!j.mn || !j.nan) {
        if (chunks > 1) free(j.mn), free(j.nan);
        return nnc_node_fail(e, n, "out of memory");
    }
    j.mx = j.mn + (chunks > 1 ? chunks : 1);
    nnc_parallel_for(chunks, 1, dq_range, &j);
    float mn = 0.f, mx = 0.f;
    int nan = 0;
    for (int64_t c = 0; c < chunks; c++) {
        mn = j.mn[c] < mn ? j.mn[c] : mn;
        mx = j.mx[c] > mx ? j.mx[c] : mx;
        nan |= j.nan[c];
    }
    if (chunks > 1) free(j.mn), free(j.nan);
    /* A NaN makes the range NaN wherever it is (onnx.reference's numpy max; onnxruntime's
     * vector min/max keeps or drops it by position), so the scale is NaN. */
    if (nan) mn = mx = NAN;
    /* onnxruntime's formulas: scale 1 for an all-zero range; the zero point clamped as
     * min(255, max(0, z)) with std::min, so a NaN z (from -inf or a NaN scale) gives 255 */
    float scale = mx == mn ? 1.f : (mx - mn) / 255.f;
    float zpf = 0.f - mn / scale;
    zpf = !(zpf <= 255.f) ? 255.f : zpf < 0.f ? 0.f : zpf;
    int32_t zp = (int32_t)nearbyintf(zpf);
    if (n->nout > 1 && n->out[1] >= 0) *(float *)out[1].data = scale;
    if (n->nout > 2 && n->out[2] >= 0) *(uint8_t *)out[2].data = (uint8_t)zp;
    if (n->out[0] < 0) return NNC_OK;
    j.sc = scale;
    j.zp = zp;
    j.y = out[0].data;
    nnc_parallel_for(j.n, DQ_CHUNK, dq_quant_range, &j);
    return NNC_OK;
}

const nnc_op nnc_op_dynamicquantizelinear = {
    "DynamicQuantizeLinear", 1, 1, 1, 3, dq_create, dq_infer, dq_run, NULL, 0};
