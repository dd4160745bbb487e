/* Quantized ops with onnxruntime's integer arithmetic: QuantizeLinear and DequantizeLinear
 * (per-tensor, per-axis, blocked; 8- and 16-bit), DynamicQuantizeLinear, MatMulInteger,
 * ConvInteger, QLinearMatMul and QLinearConv. Rounding is to nearest, ties to even
 * (nearbyintf), then saturation to the output type; accumulation is exact in int32. */
#include "nnc.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>

static void q_destroy(nnc_node *n) { free(n->state); n->state = NULL; }

static int is_q8(int dt) { return dt == DT_U8 || dt == DT_I8; }
static int is_q16(int dt) { return dt == DT_U16 || dt == DT_I16; }

static inline int32_t qget(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case DT_U8: return ((const uint8_t *)p)[i];
    case DT_I8: return ((const int8_t *)p)[i];
    case DT_U16: return ((const uint16_t *)p)[i];
    case DT_I16: return ((const int16_t *)p)[i];
    default: return ((const int32_t *)p)[i];
    }
}

static void qrange(int dt, float *lo, float *hi)
{
    switch (dt) {
    case DT_U8: *lo = 0; *hi = 255; break;
    case DT_I8: *lo = -128; *hi = 127; break;
    case DT_U16: *lo = 0; *hi = 65535; break;
    default: *lo = -32768; *hi = 32767; break;
    }
}

/* round(v) + zp, saturated; v already divided by the scale */
static inline void qput(void *p, int dt, int64_t i, float v, int32_t zp, float lo, float hi)
{
    float r = nearbyintf(v) + (float)zp;
    r = r < lo ? lo : r > hi ? hi : r;
    if (r != r) r = (float)zp; /* NaN */
    switch (dt) {
    case DT_U8: ((uint8_t *)p)[i] = (uint8_t)r; break;
    case DT_I8: ((int8_t *)p)[i] = (int8_t)r; break;
    case DT_U16: ((uint16_t *)p)[i] = (uint16_t)r; break;
    default: ((int16_t *)p)[i] = (int16_t)r; break;
    }
}

/* ---- QuantizeLinear / DequantizeLinear ------------------------------------------------ */

typedef struct { int quant; int64_t axis, block; int out_dt; } ql_state;

static int ql_create(nnc_node *n, nnc_err *e)
{
    ql_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->quant = !strcmp(n->op_type, "QuantizeLinear");
    TRY(nnc_attr_int(n, "axis", 1, &s->axis, e));
    TRY(nnc_attr_int(n, "block_size", 0, &s->block, e));
    if (s->block < 0) return nnc_node_fail(e, n, "attribute 'block_size' must not be negative");
    int64_t od;
    TRY(nnc_attr_int(n, "output_dtype", 0, &od, e));
    int64_t prec;
    TRY(nnc_attr_int(n, "precision", 0, &prec, e));
    if (prec) return nnc_node_unsup(e, n, "attribute 'precision' is not supported");
    static const int f32[] = {DT_F32, 0};
    const nnc_valinfo *x = n->vin[0], *zp = nnc_in_present(n, 2) ? n->vin[2] : NULL;
    if (s->quant) {
        TRY(nnc_check_dtype(n, 0, f32, e));
        TRY(nnc_check_dtype(n, 1, f32, e));
        int zdt = zp ? zp->dtype : DT_UNDEF;
        if (zp && zdt == DT_UNDEF) return nnc_node_unsup(e, n, "the zero point's element type must be known");
        s->out_dt = zdt ? zdt : od ? (int)od : DT_U8;
        if (od && zdt && od != zdt) return nnc_node_fail(e, n, "attribute 'output_dtype' differs from the zero point's type");
        if (!is_q8(s->out_dt) && !is_q16(s->out_dt))
            return nnc_node_unsup(e, n, "quantizing to %s is not supported (uint8, int8, uint16, int16 are)", nnc_dtname(s->out_dt));
    } else {
        static const int xs[] = {DT_U8, DT_I8, DT_U16, DT_I16, DT_I32, 0};
        TRY(nnc_check_dtype(n, 0, xs, e));
        TRY(nnc_check_dtype(n, 1, f32, e));
        if (od && od != DT_F32) return nnc_node_unsup(e, n, "output_dtype %lld is not supported", (long long)od);
        if (zp && x && zp->dtype && x->dtype && zp->dtype != x->dtype)
            return nnc_node_fail(e, n, "the zero point's type differs from the input's");
        if (x && x->dtype == DT_UNDEF) return nnc_node_unsup(e, n, "the input's element type must be known");
        s->out_dt = DT_F32;
    }
    return NNC_OK;
}

typedef struct { int64_t axis, dimA, inner, nb, bs; int mode; } qmap; /* mode 0 tensor, 1 axis, 2 block */

static int ql_map(nnc_node *n, nnc_tensor *const *in, qmap *m, nnc_err *e)
{
    const ql_state *s = n->state;
    const nnc_tensor *x = in[0], *sc = in[1], *zp = n->nin > 2 ? in[2] : NULL;
    memset(m, 0, sizeof *m);
    if (sc->dtype != DT_F32) return nnc_node_fail(e, n, "the scale must be float32");
    if (s->quant ? x->dtype != DT_F32 : (!is_q8(x->dtype) && !is_q16(x->dtype) && x->dtype != DT_I32))
        return nnc_node_fail(e, n, "input has element type %s", nnc_dtname(x->dtype));
    if (zp) {
        if (zp->dtype != (s->quant ? s->out_dt : x->dtype)) return nnc_node_fail(e, n, "the zero point has the wrong element type");
        if (!nnc_same_shape(zp, sc)) return nnc_node_fail(e, n, "the zero point's shape differs from the scale's");
        if (!s->quant && x->dtype == DT_I32)
            for (int64_t i = 0; i < nnc_numel(zp); i++)
                if (((const int32_t *)zp->data)[i]) return nnc_node_fail(e, n, "an int32 input needs a zero point of 0");
    }
    int r = x->ndim;
    int64_t k = nnc_numel(sc);
    if (s->block == 0 && (sc->ndim == 0 || (sc->ndim == 1 && k == 1))) return NNC_OK;
    if (s->axis < -r || s->axis >= r) return nnc_node_fail(e, n, "attribute 'axis' = %lld is out of range for rank %d", (long long)s->axis, r);
    int a = (int)(s->axis < 0 ? s->axis + r : s->axis);
    m->axis = a;
    m->dimA = x->dims[a];
    m->inner = 1;
    for (int d = a + 1; d < r; d++) m->inner *= x->dims[d];
    if (s->block == 0) {
        if (sc->ndim != 1 || k != m->dimA)
            return nnc_node_fail(e, n, "a per-axis scale must be 1-D with %lld values", (long long)m->dimA);
        m->mode = 1;
        return NNC_OK;
    }
    if (sc->ndim != r) return nnc_node_fail(e, n, "a blocked scale must have the input's rank");
    m->nb = (m->dimA + s->block - 1) / s->block;
    for (int d = 0; d < r; d++)
        if (sc->dims[d] != (d == a ? m->nb : x->dims[d]))
            return nnc_node_fail(e, n, "the blocked scale's shape does not match the input and block_size");
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

typedef struct { const ql_state *s; qmap m; const void *x, *zp; const float *sc; void *y; int xdt, zdt; } ql_job;

static void ql_range(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const ql_job *j = arg;
    if (j->s->quant) {
        float lo, hi;
        qrange(j->s->out_dt, &lo, &hi);
        const float *x = j->x;
        for (int64_t i = b; i < e; i++) {
            int64_t q = qidx(&j->m, i);
            qput(j->y, j->s->out_dt, i, x[i] / j->sc[q], j->zp ? qget(j->zp, j->zdt, q) : 0, lo, hi);
        }
    } else {
        float *y = j->y;
        for (int64_t i = b; i < e; i++) {
            int64_t q = qidx(&j->m, i);
            int32_t v = qget(j->x, j->xdt, i) - (j->zp ? qget(j->zp, j->zdt, q) : 0);
            y[i] = (float)v * j->sc[q];
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
    j.zp = zp ? zp->data : NULL;
    j.zdt = zp ? zp->dtype : DT_U8;
    j.xdt = in[0]->dtype;
    j.y = out->data;
    nnc_parallel_for(nnc_numel(in[0]), 16384, ql_range, &j);
    return NNC_OK;
}

const nnc_op nnc_op_quantizelinear = {"QuantizeLinear", 2, 3, 1, 1, ql_create, ql_infer, ql_run, q_destroy, 0};
const nnc_op nnc_op_dequantizelinear = {"DequantizeLinear", 2, 3, 1, 1, ql_create, ql_infer, ql_run, q_destroy, 0};

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
    for (int k = 1; k < n->nout && k < 3; k++) { out[k].dtype = k == 1 ? DT_F32 : DT_U8; out[k].ndim = 0; }
    return NNC_OK;
}

static int dq_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc; (void)e;
    const float *x = in[0]->data;
    int64_t cnt = nnc_numel(in[0]);
    float mn = 0.f, mx = 0.f;
    for (int64_t i = 0; i < cnt; i++) { mn = x[i] < mn ? x[i] : mn; mx = x[i] > mx ? x[i] : mx; }
    float scale = (mx - mn) / 255.f;
    float zpf = scale != 0.f ? 0.f - mn / scale : 0.f;
    zpf = zpf < 0.f ? 0.f : zpf > 255.f ? 255.f : zpf;
    int32_t zp = (int32_t)nearbyintf(zpf);
    if (n->nout > 1 && n->out[1] >= 0) *(float *)out[1].data = scale;
    if (n->nout > 2 && n->out[2] >= 0) *(uint8_t *)out[2].data = (uint8_t)zp;
    uint8_t *y = out[0].data;
    if (n->out[0] < 0) return NNC_OK;
    for (int64_t i = 0; i < cnt; i++) {
        if (scale == 0.f) { y[i] = (uint8_t)zp; continue; }
        qput(y, DT_U8, i, x[i] / scale, zp, 0.f, 255.f);
    }
    return NNC_OK;
}

const nnc_op nnc_op_dynamicquantizelinear = {"DynamicQuantizeLinear", 1, 1, 1, 3, dq_create, dq_infer, dq_run, NULL, 0};
