/* Integer matrix products and convolutions: MatMulInteger and ConvInteger (int32 results),
 * QLinearMatMul and QLinearConv (requantized as onnxruntime does: float(acc) * (sa * sb / sy),
 * rounded to nearest even, plus the output zero point, saturated; float32, float16 or bfloat16
 * scales). 8-bit inputs; exact int32
 * accumulation; parallel over output rows or channel planes. */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <math.h>
#include <stdlib.h>

static inline int32_t q8(const void *p, int dt, int64_t i)
{
    return dt == DT_U8 ? ((const uint8_t *)p)[i] : ((const int8_t *)p)[i];
}

static inline int is_q8_dt(int dt)
{
    return dt == DT_U8 || dt == DT_I8;
}

static inline void q8put(void *p, int dt, int64_t i, float v, int32_t zp)
{
    float lo = dt == DT_U8 ? 0.f : -128.f, hi = dt == DT_U8 ? 255.f : 127.f;
    float r = nearbyintf(v) + (float)zp;
    r = r < lo ? lo : r > hi ? hi : r;
    if (r != r) r = (float)zp;
    if (dt == DT_U8) ((uint8_t *)p)[i] = (uint8_t)r;
    else ((int8_t *)p)[i] = (int8_t)r;
}

/* Operand roles of each op's inputs. */
typedef struct {
    int qlinear, conv;
    int ia, ib, iaz, ibz, ias, ibs, iys, iyz, ibias;
    nnc_window w; /* conv */
    int64_t group;
} qg_state;

static void qg_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int qg_create(nnc_node *n, nnc_err *e)
{
    qg_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->qlinear = !strncmp(n->op_type, "QLinear", 7);
    s->conv = strstr(n->op_type, "Conv") != NULL;
    s->ias = s->ibs = s->iys = s->iyz = s->ibias = -1;
    if (s->qlinear) {
        s->ia = 0;
        s->ias = 1;
        s->iaz = 2;
        s->ib = 3;
        s->ibs = 4;
        s->ibz = 5;
        s->iys = 6;
        s->iyz = 7;
        if (s->conv) s->ibias = 8;
    } else {
        s->ia = 0;
        s->ib = 1;
        s->iaz = 2;
        s->ibz = 3;
    }
    static const int q[] = {DT_U8, DT_I8, 0}, f32[] = {DT_F32, DT_F16, DT_BF16, 0},
                     i32[] = {DT_I32, 0};
    int ints[] = {s->ia, s->ib, s->iaz, s->ibz, s->iyz};
    for (int k = 0; k < 5; k++)
        if (ints[k] >= 0) TRY(nnc_check_dtype(n, ints[k], q, e));
    int fls[] = {s->ias, s->ibs, s->iys};
    for (int k = 0; k < 3; k++)
        if (fls[k] >= 0) TRY(nnc_check_dtype(n, fls[k], f32, e));
    if (s->ibias >= 0) TRY(nnc_check_dtype(n, s->ibias, i32, e));
    if (s->qlinear) {
        /* a's and y's scale and zero point are per tensor; b's may be per column/channel */
        int per_tensor[] = {s->ias, s->iaz, s->iys, s->iyz};
        for (int k = 0; k < 4; k++) {
            int i = per_tensor[k];
            if (!nnc_in_present(n, i)) continue;
            int64_t c = nnc_info_numel(n->vin[i]);
            if (c != 1)
                return nnc_node_unsup(
                    e, n, "input %d must be a known single value (per-tensor quantization)", i);
        }
    }
    if (s->conv) {
        const nnc_valinfo *wi = n->vin[s->ib];
        if (!wi || wi->ndim < 0)
            return nnc_node_unsup(e, n, "the weight's rank must be known when the model is loaded");
        if (wi->ndim != 3 && wi->ndim != 4)
            return nnc_node_unsup(e, n, "only 1-D and 2-D convolutions are supported");
        TRY(nnc_attr_int(n, "group", 1, &s->group, e));
        if (s->group < 1) return nnc_node_fail(e, n, "attribute 'group' must be positive");
        int64_t k[2] = {wi->dims[2], wi->ndim == 4 ? wi->dims[3] : 0};
        if (k[0] < 0 || (wi->ndim == 4 && k[1] < 0))
            return nnc_node_unsup(e, n, "the weight's shape must be known");
        TRY(nnc_parse_window(n, wi->ndim - 2, k, &s->w, e));
    }
    return NNC_OK;
}

/* Value of an optional zero point: scalar or per-index (row/column/channel); 0 when absent. */
typedef struct {
    const void *p;
    int dt;
    int64_t n;
} zp_t;
static inline int32_t zp_at(const zp_t *z, int64_t i)
{
    return z->p ? q8(z->p, z->dt, z->n == 1 ? 0 : i) : 0;
}

static int get_zp(nnc_node *n, nnc_tensor *const *in, int i, int want_dt, int64_t per, zp_t *z,
                  nnc_err *e)
{
    z->p = NULL;
    z->dt = DT_U8;
    z->n = 1;
    if (i < 0 || i >= n->nin || !in[i]) return NNC_OK;
    const nnc_tensor *t = in[i];
    int64_t c = nnc_numel(t);
    if (want_dt && t->dtype != want_dt)
        return nnc_node_fail(e, n, "input %d must have the element type of its tensor", i);
    if (t->ndim > 1 || (c != 1 && c != per))
        return nnc_node_fail(e, n, "input %d must be a scalar or have %lld values", i,
                             (long long)per);
    z->p = t->data;
    z->dt = t->dtype;
    z->n = c;
    return NNC_OK;
}

static int is_scale_dt(int dt)
{
    return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16;
}

/* A scale input as float32 values: its own data, or (float16, bfloat16) converted into *own,
 * which the caller frees. */
static int get_scale(nnc_node *n, nnc_tensor *const *in, int i, int64_t per, const float **p,
                     int64_t *cnt, float **own, nnc_err *e)
{
    const nnc_tensor *t = in[i];
    int64_t c = nnc_numel(t);
    *own = NULL;
    if (!is_scale_dt(t->dtype) || t->ndim > 1 || (c != 1 && c != per))
        return nnc_node_fail(
            e, n, "input %d must be a float32, float16 or bfloat16 scalar or have %lld values", i,
            (long long)per);
    *cnt = c;
    if (t->dtype == DT_F32) {
        *p = t->data;
        return NNC_OK;
    }
    *own = malloc((size_t)(c ? c : 1) * sizeof(float));
    if (!*own) return nnc_node_fail(e, n, "out of memory");
    for (int64_t k = 0; k < c; k++) (*own)[k] = (float)nnc_get_d(t->data, t->dtype, k);
    *p = *own;
    return NNC_OK;
}

/* ---- shapes -------------------------------------------------------------------------- */

typedef struct {
    int64_t M, K, N, batch;
    nnc_tensor out;
    int64_t aoff_mul[NNC_MAXDIM], boff_mul[NNC_MAXDIM]; /* batch strides (0 broadcast) */
    int nb;
    int64_t bdims[NNC_MAXDIM];
    /* conv */
    int64_t C, H, W, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl, Mo, Cg;
} qg_geom;

static int mm_geom(nnc_node *n, const nnc_tensor *a, const nnc_tensor *b, qg_geom *g, nnc_err *e)
{
    if (a->ndim < 1 || b->ndim < 1) return nnc_node_fail(e, n, "inputs must have rank 1 or more");
    nnc_tensor ab = *a, bb = *b;
    int a1 = a->ndim == 1, b1 = b->ndim == 1;
    if (a1) {
        ab.ndim = 2;
        ab.dims[0] = 1;
        ab.dims[1] = a->dims[0];
    }
    if (b1) {
        bb.ndim = 2;
        bb.dims[0] = b->dims[0];
        bb.dims[1] = 1;
    }
    g->M = ab.dims[ab.ndim - 2];
    g->K = ab.dims[ab.ndim - 1];
    g->N = bb.dims[bb.ndim - 1];
    if (bb.dims[bb.ndim - 2] != g->K)
        return nnc_node_fail(e, n, "inner dimensions differ (%lld and %lld)", (long long)g->K,
                             (long long)bb.dims[bb.ndim - 2]);
    nnc_tensor ta = ab, tb = bb, tr;
    ta.ndim -= 2;
    tb.ndim -= 2;
    if (nnc_broadcast_shape(&ta, &tb, &tr))
        return nnc_node_fail(e, n, "batch dimensions do not broadcast");
    g->nb = tr.ndim;
    g->batch = 1;
    int64_t sa = g->M * g->K, sb = g->K * g->N;
    for (int d = tr.ndim - 1; d >= 0; d--) {
        int ia = d - (tr.ndim - ta.ndim), ib = d - (tr.ndim - tb.ndim);
        int64_t da = ia >= 0 ? ta.dims[ia] : 1, db = ib >= 0 ? tb.dims[ib] : 1;
        g->bdims[d] = tr.dims[d];
        g->aoff_mul[d] = da == 1 ? 0 : sa;
        g->boff_mul[d] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
        g->batch *= tr.dims[d];
    }
    g->out.ndim = 0;
    for (int d = 0; d < tr.ndim; d++) g->out.dims[g->out.ndim++] = tr.dims[d];
    if (!a1) g->out.dims[g->out.ndim++] = g->M;
    if (!b1) g->out.dims[g->out.ndim++] = g->N;
    return NNC_OK;
}

static int conv_geom(nnc_node *n, const nnc_tensor *x, const nnc_tensor *w, qg_geom *g, nnc_err *e)
{
    const qg_state *s = n->state;
    int nsp = s->w.nsp;
    if (x->ndim != nsp + 2 || w->ndim != nsp + 2)
        return nnc_node_fail(e, n, "input and weight must have rank %d", nsp + 2);
    g->Mo = w->dims[0];
    g->Cg = w->dims[1];
    g->C = x->dims[1];
    if (g->Cg * s->group != g->C || g->Mo % s->group)
        return nnc_node_fail(e, n, "channels (%lld) and weight (%lld x %lld) do not fit group %lld",
                             (long long)g->C, (long long)g->Mo, (long long)g->Cg,
                             (long long)s->group);
    int64_t pb;
    if (nsp == 1) {
        g->H = 1;
        g->OH = 1;
        g->kh = 1;
        g->sh = 1;
        g->dh = 1;
        g->pt = 0;
        g->W = x->dims[2];
        g->kw = w->dims[2];
        g->sw = s->w.s[0];
        g->dw = s->w.d[0];
        if (g->kw != s->w.k[0])
            return nnc_node_fail(e, n, "the weight's shape changed after loading");
        if (nnc_window_out(s->w.auto_pad, 0, g->W, g->kw, g->sw, g->dw, s->w.p[0], s->w.p[1],
                           &g->OW, &g->pl, &pb))
            return nnc_node_fail(e, n, "the kernel window is larger than the padded input");
    } else {
        g->H = x->dims[2];
        g->W = x->dims[3];
        g->kh = w->dims[2];
        g->kw = w->dims[3];
        g->sh = s->w.s[0];
        g->sw = s->w.s[1];
        g->dh = s->w.d[0];
        g->dw = s->w.d[1];
        if (g->kh != s->w.k[0] || g->kw != s->w.k[1])
            return nnc_node_fail(e, n, "the weight's shape changed after loading");
        if (nnc_window_out(s->w.auto_pad, 0, g->H, g->kh, g->sh, g->dh, s->w.p[0], s->w.p[2],
                           &g->OH, &g->pt, &pb) ||
            nnc_window_out(s->w.auto_pad, 0, g->W, g->kw, g->sw, g->dw, s->w.p[1], s->w.p[3],
                           &g->OW, &g->pl, &pb))
            return nnc_node_fail(e, n, "the kernel window is larger than the padded input");
    }
    g->out.ndim = x->ndim;
    g->out.dims[0] = x->dims[0];
    g->out.dims[1] = g->Mo;
    if (nsp == 1) g->out.dims[2] = g->OW;
    else {
        g->out.dims[2] = g->OH;
        g->out.dims[3] = g->OW;
    }
    return NNC_OK;
}

static int qg_geometry(nnc_node *n, nnc_tensor *const *in, qg_geom *g, nnc_err *e)
{
    const qg_state *s = n->state;
    const nnc_tensor *a = in[s->ia], *b = in[s->ib];
    if (!is_q8_dt(a->dtype) || !is_q8_dt(b->dtype))
        return nnc_node_fail(e, n, "inputs must be uint8 or int8");
    memset(g, 0, sizeof *g);
    if (s->conv) TRY(conv_geom(n, a, b, g, e));
    else TRY(mm_geom(n, a, b, g, e));
    if (s->qlinear) {
        const nnc_tensor *yz = s->iyz < n->nin ? in[s->iyz] : NULL;
        g->out.dtype = yz ? yz->dtype : a->dtype;
        if (!is_q8_dt(g->out.dtype))
            return nnc_node_fail(e, n, "the output zero point must be uint8 or int8");
        int per_tensor[] = {s->ias, s->iaz, s->iys, s->iyz};
        for (int k = 0; k < 4; k++)
            if (per_tensor[k] < n->nin && in[per_tensor[k]] && nnc_numel(in[per_tensor[k]]) != 1)
                return nnc_node_fail(e, n, "input %d must be a single value", per_tensor[k]);
        if (!is_scale_dt(in[s->ias]->dtype) || !is_scale_dt(in[s->iys]->dtype))
            return nnc_node_fail(e, n, "scales must be float32, float16 or bfloat16");
        if (s->ibias >= 0 && s->ibias < n->nin && in[s->ibias]) {
            const nnc_tensor *bi = in[s->ibias];
            if (bi->dtype != DT_I32 || bi->ndim != 1 || bi->dims[0] != g->Mo)
                return nnc_node_fail(e, n, "bias must be 1-D int32 with %lld values",
                                     (long long)g->Mo);
        }
    } else {
        g->out.dtype = DT_I32;
    }
    return NNC_OK;
}

static int qg_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    qg_geom g;
    TRY(qg_geometry(n, in, &g, e));
    *out = g.out;
    out->data = NULL;
    return NNC_OK;
}

/* ---- run ----------------------------------------------------------------------------- */

typedef struct {
    const qg_state *s;
    qg_geom g;
    const void *a, *b;
    int adt, bdt, ydt;
    zp_t az, bz;
    int32_t yz;
    const float *mult; /* requantization multiplier per column/channel (qlinear) */
    int64_t nmult;
    const int32_t *bias;
    void *y;
} qg_job;

static inline void emit(const qg_job *j, int64_t i, int32_t acc, int64_t col)
{
    if (!j->s->qlinear) ((int32_t *)j->y)[i] = acc;
    else q8put(j->y, j->ydt, i, (float)acc * j->mult[j->nmult == 1 ? 0 : col], j->yz);
}

static void mm_rows(void *arg, int64_t b0, int64_t b1, int tid)
{
    (void)tid;
    const qg_job *j = arg;
    const qg_geom *g = &j->g;
    int64_t M = g->M, K = g->K, N = g->N;
    for (int64_t r = b0; r < b1; r++) {
        int64_t bt = r / M, m = r % M, rem = bt, ao = 0, bo = 0;
        for (int d = g->nb - 1; d >= 0; d--) {
            int64_t i = rem % g->bdims[d];
            rem /= g->bdims[d];
            ao += i * g->aoff_mul[d];
            bo += i * g->boff_mul[d];
        }
        int32_t azv = zp_at(&j->az, m);
        for (int64_t c = 0; c < N; c++) {
            int32_t bzv = zp_at(&j->bz, c), acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += (q8(j->a, j->adt, ao + m * K + k) - azv) *
                       (q8(j->b, j->bdt, bo + k * N + c) - bzv);
            emit(j, r * N + c, acc, c);
        }
    }
}

static void conv_planes(void *arg, int64_t b0, int64_t b1, int tid)
{
    (void)tid;
    const qg_job *j = arg;
    const qg_geom *g = &j->g;
    int64_t Mg = g->Mo / j->s->group, OHW = g->OH * g->OW, HW = g->H * g->W,
            K = g->Cg * g->kh * g->kw;
    int32_t azv = zp_at(&j->az, 0);
    for (int64_t p = b0; p < b1; p++) {
        int64_t img = p / g->Mo, m = p % g->Mo, grp = m / Mg;
        int32_t bzv = zp_at(&j->bz, m);
        int64_t xo = (img * g->C + grp * g->Cg) * HW, wo = m * K;
        for (int64_t oh = 0; oh < g->OH; oh++)
            for (int64_t ow = 0; ow < g->OW; ow++) {
                int32_t acc = j->bias ? j->bias[m] : 0;
                for (int64_t c = 0; c < g->Cg; c++)
                    for (int64_t ky = 0; ky < g->kh; ky++) {
                        int64_t ih = oh * g->sh - g->pt + ky * g->dh;
                        if (ih < 0 || ih >= g->H) continue; /* padding holds the zero point */
                        for (int64_t kx = 0; kx < g->kw; kx++) {
                            int64_t iw = ow * g->sw - g->pl + kx * g->dw;
                            if (iw < 0 || iw >= g->W) continue;
                            acc += (q8(j->a, j->adt, xo + c * HW + ih * g->W + iw) - azv) *
                                   (q8(j->b, j->bdt, wo + (c * g->kh + ky) * g->kw + kx) - bzv);
                        }
                    }
                emit(j, p * OHW + oh * g->OW + ow, acc, m);
            }
    }
}

static int qg_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    const qg_state *s = n->state;
    qg_job j;
    memset(&j, 0, sizeof j);
    j.s = s;
    TRY(qg_geometry(n, in, &j.g, e));
    j.a = in[s->ia]->data;
    j.b = in[s->ib]->data;
    j.adt = in[s->ia]->dtype;
    j.bdt = in[s->ib]->dtype;
    j.y = out->data;
    j.ydt = out->dtype;
    int64_t per_b = s->conv ? j.g.Mo : j.g.N;
    TRY(get_zp(n, in, s->iaz, j.adt, s->conv ? 1 : j.g.M, &j.az, e));
    TRY(get_zp(n, in, s->ibz, j.bdt, per_b, &j.bz, e));
    float *mult = NULL;
    if (s->qlinear) {
        zp_t yz;
        TRY(get_zp(n, in, s->iyz, 0, 1, &yz, e));
        j.yz = zp_at(&yz, 0);
        const float *as, *bs, *ys;
        float *own[3] = {NULL, NULL, NULL};
        int64_t na, nbs = 0, ny;
        int rc = get_scale(n, in, s->ias, 1, &as, &na, &own[0], e);
        if (!rc) rc = get_scale(n, in, s->ibs, per_b, &bs, &nbs, &own[1], e);
        if (!rc) rc = get_scale(n, in, s->iys, 1, &ys, &ny, &own[2], e);
        if (!rc && !(mult = malloc((size_t)(nbs ? nbs : 1) * sizeof(float))))
            rc = nnc_node_fail(e, n, "out of memory");
        if (!rc)
            for (int64_t i = 0; i < nbs; i++) mult[i] = as[0] * bs[i] / ys[0];
        for (int k = 0; k < 3; k++) free(own[k]);
        if (rc) return rc;
        j.mult = mult;
        j.nmult = nbs;
        if (s->ibias >= 0 && s->ibias < n->nin && in[s->ibias]) j.bias = in[s->ibias]->data;
    }
    if (s->conv) nnc_parallel_for(j.g.out.dims[0] * j.g.Mo, 1, conv_planes, &j);
    else nnc_parallel_for(j.g.batch * j.g.M, 1 + 4096 / (j.g.N * j.g.K + 1), mm_rows, &j);
    free(mult);
    return NNC_OK;
}

const nnc_op nnc_op_matmulinteger = {"MatMulInteger", 2,        4,      1,          1,
                                     qg_create,       qg_infer, qg_run, qg_destroy, 0};
const nnc_op nnc_op_convinteger = {"ConvInteger", 2,        4,      1,          1,
                                   qg_create,     qg_infer, qg_run, qg_destroy, 0};
const nnc_op nnc_op_qlinearmatmul = {"QLinearMatMul", 8,        8,      1,          1,
                                     qg_create,       qg_infer, qg_run, qg_destroy, 0};
const nnc_op nnc_op_qlinearconv = {"QLinearConv", 8,        9,      1,          1,
                                   qg_create,     qg_infer, qg_run, qg_destroy, 0};
