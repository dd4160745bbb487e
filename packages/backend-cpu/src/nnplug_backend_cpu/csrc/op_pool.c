/* MaxPool, AveragePool, LpPool (1-3 spatial dims, pads, dilations, ceil_mode,
 * count_include_pad), GlobalAveragePool, GlobalMaxPool and LRN; parallel over (batch, channel)
 * planes. MaxPool also runs float64, float16, bfloat16, int8 and uint8 and gives its Indices output
 * (flat positions in the input, row- or column-major per storage_order) on a direct path. */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

enum { POOL_AVG, POOL_MAX, POOL_LP };

typedef struct {
    int is_max, ceil_mode, include_pad;
    int lp, storage_order; /* lp: LpPool with exponent p */
    float p;
    nnc_window w;
} pool_state;

static void free_state(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static const int MAXPOOL_TYPES[] = {DT_F32, DT_F64, DT_F16, DT_BF16, DT_I8, DT_U8, 0};

static int pool_create_common(nnc_node *n, int kind, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    int is_max = kind == POOL_MAX;
    TRY(nnc_check_dtype(n, 0, is_max ? MAXPOOL_TYPES : f32, e));
    pool_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->is_max = is_max;
    s->lp = kind == POOL_LP;
    int64_t v;
    TRY(nnc_attr_int(n, "ceil_mode", 0, &v, e));
    s->ceil_mode = v != 0;
    TRY(nnc_attr_int(n, "count_include_pad", 0, &v, e));
    s->include_pad = v != 0;
    if (is_max) {
        TRY(nnc_attr_int(n, "storage_order", 0, &v, e));
        if (v != 0 && v != 1)
            return nnc_node_fail(e, n, "attribute 'storage_order' must be 0 or 1, got %lld",
                                 (long long)v);
        s->storage_order = (int)v;
    }
    if (s->lp) {
        /* p: a float in LpPool-1, an int from opset 2 on */
        const nnc_attr *pa = nnc_attr_find(n, "p");
        if (pa && pa->kind == AK_FLOAT) TRY(nnc_attr_float(n, "p", 2.f, &s->p, e));
        else {
            TRY(nnc_attr_int(n, "p", 2, &v, e));
            s->p = (float)v;
        }
        if (!(s->p > 0.f) || isinf(s->p))
            return nnc_node_fail(e, n, "attribute 'p' must be positive, got %g", (double)s->p);
    }
    const nnc_attr *ks = nnc_attr_find(n, "kernel_shape");
    if (!ks) return nnc_node_fail(e, n, "attribute 'kernel_shape' is required");
    int nsp = (int)ks->count;
    if (nsp < 1 || nsp > 3)
        return nnc_node_unsup(e, n, "%d spatial dims are not supported (1 to 3 are)", nsp);
    if (n->vin[0] && n->vin[0]->ndim >= 0 && n->vin[0]->ndim != nsp + 2)
        return nnc_node_fail(e, n, "input rank %d does not fit a %d-D kernel", n->vin[0]->ndim,
                             nsp);
    TRY(nnc_parse_window(n, nsp, NULL, &s->w, e));
    return NNC_OK;
}

static int maxpool_create(nnc_node *n, nnc_err *e)
{
    return pool_create_common(n, POOL_MAX, e);
}
static int avgpool_create(nnc_node *n, nnc_err *e)
{
    return pool_create_common(n, POOL_AVG, e);
}
static int lppool_create(nnc_node *n, nnc_err *e)
{
    return pool_create_common(n, POOL_LP, e);
}

/* Per-axis geometry in D, H, W order (missing leading axes have size 1). */
typedef struct {
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
} geom3;

static int pool_geom(const pool_state *s, const nnc_tensor *x, geom3 *g)
{
    int off = 3 - s->w.nsp;
    for (int i = 0; i < 3; i++) {
        g->in[i] = g->out[i] = g->k[i] = g->s[i] = g->d[i] = 1;
        g->pb[i] = g->pe[i] = 0;
    }
    for (int i = 0; i < s->w.nsp; i++) {
        int a = off + i;
        g->in[a] = x->dims[2 + i];
        g->k[a] = s->w.k[i];
        g->s[a] = s->w.s[i];
        g->d[a] = s->w.d[i];
        if (nnc_window_out(s->w.auto_pad, s->ceil_mode && s->w.auto_pad == AP_NOTSET, g->in[a],
                           g->k[a], g->s[a], g->d[a], s->w.p[i], s->w.p[s->w.nsp + i], &g->out[a],
                           &g->pb[a], &g->pe[a]))
            return NNC_ERR;
        if (g->out[a] < 1) return NNC_ERR;
    }
    return NNC_OK;
}

/* onnxruntime's rule for every pool: only the batch dim may be 0 (a mean or max over an empty
 * channel or window has no value; a 0x0 GlobalAveragePool would give 0/0). */
static int nonempty_pool_input(nnc_node *n, const nnc_tensor *x, nnc_err *e)
{
    if (x->ndim < 1 || x->dims[0] == 0) return NNC_OK;
    for (int i = 1; i < x->ndim; i++)
        if (x->dims[i] == 0) {
            char sh[128];
            nnc_shape_str(x, sh, sizeof sh);
            return nnc_node_fail(
                e, n,
                "the input has shape %s; pooling over an empty channel or spatial axis has no value "
                "(only the batch dim may be 0)",
                sh);
        }
    return NNC_OK;
}

static int pool_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const pool_state *s = n->state;
    const nnc_tensor *x = in[0];
    int typed_ok = 0;
    for (const int *t = MAXPOOL_TYPES; s->is_max && *t; t++) typed_ok |= *t == x->dtype;
    if (x->dtype != DT_F32 && !typed_ok)
        return nnc_node_fail(e, n, "input must be float32, got %s", nnc_dtname(x->dtype));
    if (x->ndim != s->w.nsp + 2)
        return nnc_node_fail(e, n, "input must have rank %d, got %d", s->w.nsp + 2, x->ndim);
    TRY(nonempty_pool_input(n, x, e));
    geom3 g;
    if (pool_geom(s, x, &g))
        return nnc_node_fail(e, n, "the kernel window is larger than the padded input");
    out->dtype = x->dtype;
    out->ndim = x->ndim;
    out->dims[0] = x->dims[0];
    out->dims[1] = x->dims[1];
    for (int i = 0; i < s->w.nsp; i++) out->dims[2 + i] = g.out[3 - s->w.nsp + i];
    if (n->nout > 1) {
        out[1] = out[0];
        out[1].dtype = DT_I64;
    }
    return NNC_OK;
}

typedef struct {
    const pool_state *s;
    geom3 g;
    const float *x;
    float *y;
    nnc_exec *xc;
    int fail;
} pool_job;

/* Valid kernel taps [k0, k1) for a window starting at `start` on an axis of size `in`. */
static inline void tap_range(int64_t start, int64_t in, int64_t k, int64_t d, int64_t *k0,
                             int64_t *k1)
{
    int64_t lo = start < 0 ? (-start + d - 1) / d : 0;
    int64_t hi = in - start <= 0 ? 0 : (in - start - 1) / d + 1;
    if (hi > k) hi = k;
    if (lo > hi) lo = hi;
    *k0 = lo;
    *k1 = hi;
}

/* Taps inside the padded extent [-pb, in + pe), for count_include_pad. */
static inline int64_t padded_taps(int64_t start, int64_t in, int64_t pb, int64_t pe, int64_t k,
                                  int64_t d)
{
    int64_t k0, k1;
    tap_range(start + pb, in + pb + pe, k, d, &k0, &k1);
    return k1 - k0;
}

/* Scratch of pool_plane_2d: H x OW floats, rounded up to 8 bytes, then 3 int64 per column. */
static size_t pool_tmp_bytes(const geom3 *g)
{
    return (size_t)((g->in[1] * g->out[2] + 1) & ~(int64_t)1) * sizeof(float) +
           (size_t)(3 * g->out[2]) * sizeof(int64_t);
}

/* 2-D (and 1-D) pooling as two 1-D passes: along W into tmp[H][OW], then along H with the
 * inner loop over OW (vectorisable). Same taps as the direct form. */
/* max that keeps a NaN once seen (NaN in a window gives NaN, as numpy and torch) */
#define MAXN(acc, v) ((v) > (acc) || (v) != (v) ? (v) : (acc))

MULTIVERSION
static void pool_plane_2d(const pool_job *j, const float *x, float *y, float *tmp)
{
    const geom3 *g = &j->g;
    int is_max = j->s->is_max, incl = j->s->include_pad;
    int64_t H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    int64_t kw = g->k[2], sw = g->s[2], dw = g->d[2], kh = g->k[1], sh = g->s[1], dh = g->d[1];
    float init = is_max ? -INFINITY : 0.f;
    /* per output column: first tap, tap count, divisor; after the H*OW floats, 8-byte aligned */
    int64_t *wr = (int64_t *)(tmp + ((H * OW + 1) & ~(int64_t)1));
    for (int64_t ow = 0; ow < OW; ow++) {
        int64_t st = ow * sw - g->pb[2], w0, w1;
        tap_range(st, W, kw, dw, &w0, &w1);
        wr[3 * ow] = st + w0 * dw;
        wr[3 * ow + 1] = w1 - w0;
        wr[3 * ow + 2] = incl ? padded_taps(st, W, g->pb[2], g->pe[2], kw, dw) : w1 - w0;
    }
    /* columns whose three taps are all inside the row: [in0, in1) */
    int64_t in0 = (g->pb[2] + sw - 1) / sw,
            in1 = W - 3 + g->pb[2] < 0 ? 0 : (W - 3 + g->pb[2]) / sw + 1;
    if (in0 > OW) in0 = OW;
    if (in1 > OW) in1 = OW;
    if (in1 < in0) in1 = in0;
    for (int64_t h = 0; h < H; h++) {
        const float *row = x + h * W;
        float *t = tmp + h * OW;
        if (is_max && dw == 1 && kw == 3) {
            /* no tap count to test there: branch-free, so it vectorises (random data made
             * each comparison a mispredicted branch, the 3x3 stride-2 pool of ResNet slow) */
            const float *r0 = row - g->pb[2];
            for (int64_t ow = in0; ow < in1; ow++) {
                const float *r = r0 + ow * sw;
                float acc = r[0];
                acc = MAXN(acc, r[1]);
                acc = MAXN(acc, r[2]);
                t[ow] = acc;
            }
            for (int64_t ow = 0; ow < OW; ow++) {
                if (ow == in0) ow = in1;
                if (ow >= OW) break;
                const float *r = row + wr[3 * ow];
                int64_t c = wr[3 * ow + 1];
                float acc = c > 0 ? r[0] : init;
                if (c > 1) acc = MAXN(acc, r[1]);
                if (c > 2) acc = MAXN(acc, r[2]);
                t[ow] = acc;
            }
            continue;
        }
        for (int64_t ow = 0; ow < OW; ow++) {
            const float *r = row + wr[3 * ow];
            int64_t c = wr[3 * ow + 1];
            float acc = init;
            if (is_max)
                for (int64_t k = 0; k < c; k++) acc = MAXN(acc, r[k * dw]);
            else
                for (int64_t k = 0; k < c; k++) acc += r[k * dw];
            t[ow] = acc;
        }
    }
    for (int64_t oh = 0; oh < OH; oh++) {
        int64_t st = oh * sh - g->pb[1], h0, h1;
        tap_range(st, H, kh, dh, &h0, &h1);
        float *yr = y + oh * OW;
        for (int64_t ow = 0; ow < OW; ow++) yr[ow] = init;
        for (int64_t k = h0; k < h1; k++) {
            const float *t = tmp + (st + k * dh) * OW;
            if (is_max)
                for (int64_t ow = 0; ow < OW; ow++) yr[ow] = MAXN(yr[ow], t[ow]);
            else
                for (int64_t ow = 0; ow < OW; ow++) yr[ow] += t[ow];
        }
        if (!is_max) {
            int64_t ch = incl ? padded_taps(st, H, g->pb[1], g->pe[1], kh, dh) : h1 - h0;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t cnt = ch * wr[3 * ow + 2];
                yr[ow] = cnt > 0 ? yr[ow] / (float)cnt : 0.f;
            }
        }
    }
}

static void pool_planes(void *arg, int64_t b, int64_t e, int tid)
{
    pool_job *j = arg;
    if (j->g.in[0] == 1 && j->g.out[0] == 1 && j->g.k[0] == 1 && !j->s->lp) {
        float *tmp = nnc_scratch(j->xc, tid, pool_tmp_bytes(&j->g));
        if (tmp) {
            int64_t isz = j->g.in[1] * j->g.in[2], osz = j->g.out[1] * j->g.out[2];
            for (int64_t p = b; p < e; p++) pool_plane_2d(j, j->x + p * isz, j->y + p * osz, tmp);
            return;
        }
    }
    const geom3 *g = &j->g;
    int is_max = j->s->is_max, incl = j->s->include_pad, lp = j->s->lp;
    float pw = j->s->p, inv_p = 1.f / j->s->p;
    int64_t isz = g->in[0] * g->in[1] * g->in[2], osz = g->out[0] * g->out[1] * g->out[2];
    for (int64_t p = b; p < e; p++) {
        const float *x = j->x + p * isz;
        float *y = j->y + p * osz;
        for (int64_t od = 0; od < g->out[0]; od++) {
            int64_t sd = od * g->s[0] - g->pb[0], d0, d1;
            tap_range(sd, g->in[0], g->k[0], g->d[0], &d0, &d1);
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                int64_t shh = oh * g->s[1] - g->pb[1], h0, h1;
                tap_range(shh, g->in[1], g->k[1], g->d[1], &h0, &h1);
                float *yr = y + (od * g->out[1] + oh) * g->out[2];
                for (int64_t ow = 0; ow < g->out[2]; ow++) {
                    int64_t sw = ow * g->s[2] - g->pb[2], w0, w1;
                    tap_range(sw, g->in[2], g->k[2], g->d[2], &w0, &w1);
                    float acc = is_max ? -INFINITY : 0.f;
                    for (int64_t kd = d0; kd < d1; kd++) {
                        const float *xd = x + (sd + kd * g->d[0]) * g->in[1] * g->in[2];
                        for (int64_t kh = h0; kh < h1; kh++) {
                            const float *xr = xd + (shh + kh * g->d[1]) * g->in[2] + sw;
                            if (is_max) {
                                for (int64_t kw = w0; kw < w1; kw++) {
                                    float v = xr[kw * g->d[2]];
                                    acc = v > acc || v != v ? v : acc;
                                }
                            } else if (lp) {
                                for (int64_t kw = w0; kw < w1; kw++) {
                                    float v = fabsf(xr[kw * g->d[2]]);
                                    acc += pw == 2.f ? v * v : pw == 1.f ? v : powf(v, pw);
                                }
                            } else {
                                for (int64_t kw = w0; kw < w1; kw++) acc += xr[kw * g->d[2]];
                            }
                        }
                    }
                    if (lp) {
                        acc = pw == 2.f ? sqrtf(acc) : pw == 1.f ? acc : powf(acc, inv_p);
                    } else if (!is_max) {
                        int64_t cnt;
                        if (incl)
                            cnt = padded_taps(sd, g->in[0], g->pb[0], g->pe[0], g->k[0], g->d[0]) *
                                  padded_taps(shh, g->in[1], g->pb[1], g->pe[1], g->k[1], g->d[1]) *
                                  padded_taps(sw, g->in[2], g->pb[2], g->pe[2], g->k[2], g->d[2]);
                        else cnt = (d1 - d0) * (h1 - h0) * (w1 - w0);
                        acc = cnt > 0 ? acc / (float)cnt : 0.f;
                    }
                    yr[ow] = acc;
                }
            }
        }
    }
}

static size_t pool_scratch(const nnc_node *n, nnc_tensor *const *in, const nnc_tensor *out)
{
    geom3 g;
    (void)out;
    if (pool_geom(n->state, in[0], &g) || g.in[0] != 1) return 0;
    return pool_tmp_bytes(&g);
}

/* ---- MaxPool with Indices, or on types other than float32: one direct loop ------------ */

typedef struct {
    const pool_state *s;
    geom3 g;
    const nnc_tensor *x;
    const nnc_tensor *y, *idx; /* idx: NULL when the Indices output is not wanted */
} maxi_job;

static void maxi_planes(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    maxi_job *j = arg;
    const geom3 *g = &j->g;
    int dt = j->x->dtype, colmajor = j->s->storage_order == 1;
    int64_t isz = g->in[0] * g->in[1] * g->in[2], osz = g->out[0] * g->out[1] * g->out[2];
    for (int64_t p = b; p < e; p++) {
        int64_t o = p * osz;
        for (int64_t od = 0; od < g->out[0]; od++) {
            int64_t sd = od * g->s[0] - g->pb[0], d0, d1;
            tap_range(sd, g->in[0], g->k[0], g->d[0], &d0, &d1);
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                int64_t sh = oh * g->s[1] - g->pb[1], h0, h1;
                tap_range(sh, g->in[1], g->k[1], g->d[1], &h0, &h1);
                for (int64_t ow = 0; ow < g->out[2]; ow++, o++) {
                    int64_t sw = ow * g->s[2] - g->pb[2], w0, w1;
                    tap_range(sw, g->in[2], g->k[2], g->d[2], &w0, &w1);
                    double best = -INFINITY;
                    int64_t bd = -1, bh = -1, bw = -1;
                    for (int64_t kd = d0; kd < d1; kd++)
                        for (int64_t kh = h0; kh < h1; kh++)
                            for (int64_t kw = w0; kw < w1; kw++) {
                                int64_t a0 = sd + kd * g->d[0], a1 = sh + kh * g->d[1],
                                        a2 = sw + kw * g->d[2];
                                double v = nnc_get_d(
                                    j->x->data, dt, p * isz + (a0 * g->in[1] + a1) * g->in[2] + a2);
                                /* the first largest; a NaN wins and stays (as the float path) */
                                if (bd < 0 || (v > best && best == best) ||
                                    (v != v && best == best)) {
                                    best = v;
                                    bd = a0;
                                    bh = a1;
                                    bw = a2;
                                }
                            }
                    if (nnc_dt_float(dt)) nnc_store_d(j->y->data, dt, o, 1, &best);
                    else {
                        int64_t iv = bd < 0 ? 0 : (int64_t)best;
                        nnc_store_i(j->y->data, dt, o, 1, &iv);
                    }
                    if (j->idx) {
                        int64_t at = bd < 0     ? -1
                                     : colmajor ? bd + bh * g->in[0] + bw * g->in[0] * g->in[1]
                                                : (bd * g->in[1] + bh) * g->in[2] + bw;
                        ((int64_t *)j->idx->data)[o] = at < 0 ? -1 : p * isz + at;
                    }
                }
            }
        }
    }
}

static int pool_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)e;
    const pool_state *ps = n->state;
    int want_idx = n->nout > 1 && out[1].data;
    if (ps->is_max && (want_idx || in[0]->dtype != DT_F32)) {
        maxi_job mj = {ps, {{0}}, in[0], &out[0], want_idx ? &out[1] : NULL};
        pool_geom(ps, in[0], &mj.g);
        int64_t work = mj.g.out[0] * mj.g.out[1] * mj.g.out[2] * mj.g.k[0] * mj.g.k[1] * mj.g.k[2];
        nnc_parallel_for(in[0]->dims[0] * in[0]->dims[1], work > 0 ? 1 + 20000 / work : 1,
                         maxi_planes, &mj);
        if (out[0].dtype == DT_F32) nnc_apply_act(out[0].data, nnc_numel(&out[0]), &n->act);
        return NNC_OK;
    }
    pool_job j;
    j.xc = x;
    j.fail = 0;
    j.s = n->state;
    pool_geom(j.s, in[0], &j.g);
    j.x = in[0]->data;
    j.y = out->data;
    int64_t planes = in[0]->dims[0] * in[0]->dims[1];
    int64_t work = j.g.out[0] * j.g.out[1] * j.g.out[2] * j.g.k[0] * j.g.k[1] * j.g.k[2];
    int64_t grain = work > 0 ? 1 + 20000 / work : 1;
    nnc_parallel_for(planes, grain, pool_planes, &j);
    nnc_apply_act(out->data, nnc_numel(out), &n->act);
    return NNC_OK;
}

const nnc_op nnc_op_maxpool = {"MaxPool",  1,        1,          1, 2,           maxpool_create,
                               pool_infer, pool_run, free_state, 0, pool_scratch};
const nnc_op nnc_op_averagepool = {
    "AveragePool", 1, 1, 1, 1, avgpool_create, pool_infer, pool_run, free_state, 0, pool_scratch};
const nnc_op nnc_op_lppool = {"LpPool",   1,        1,          1, 1,           lppool_create,
                              pool_infer, pool_run, free_state, 0, pool_scratch};

/* ---- global pools -------------------------------------------------------------------- */

static int global_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    TRY(nnc_check_dtype(n, 0, f32, e));
    if (n->vin[0] && n->vin[0]->ndim >= 0 && n->vin[0]->ndim < 3)
        return nnc_node_fail(e, n, "input must have rank 3 or more, got %d", n->vin[0]->ndim);
    return NNC_OK;
}

static int global_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const nnc_tensor *x = in[0];
    if (x->dtype != DT_F32) return nnc_node_fail(e, n, "input must be float32");
    if (x->ndim < 3) return nnc_node_fail(e, n, "input must have rank 3 or more, got %d", x->ndim);
    TRY(nonempty_pool_input(n, x, e));
    *out = *x;
    for (int i = 2; i < x->ndim; i++) out->dims[i] = 1;
    return NNC_OK;
}

typedef struct {
    const float *x;
    float *y;
    int64_t sp;
    int is_max;
} gpool_job;

/* The mean sums in double over eight interleaved lanes (element i in lane i % 8) added in a
 * fixed tree: one dependent add chain an element was latency-bound (EfficientNet's and
 * MobileNetV3's squeeze-excite pools); the order is the same for every plane and thread. */
MULTIVERSION
static void gpool_planes(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    gpool_job *j = arg;
    for (int64_t p = b; p < e; p++) {
        const float *x = j->x + p * j->sp;
        if (j->is_max) {
            float m = -INFINITY;
            for (int64_t i = 0; i < j->sp; i++) m = x[i] > m || x[i] != x[i] ? x[i] : m;
            j->y[p] = m;
        } else {
            double acc[8] = {0};
            int64_t i = 0;
            for (; i + 8 <= j->sp; i += 8)
                for (int k = 0; k < 8; k++) acc[k] += x[i + k];
            for (int k = 0; i < j->sp; i++, k++) acc[k] += x[i];
            double sum =
                ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            j->y[p] = (float)(sum / (double)j->sp);
        }
    }
}

static int global_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e,
                      int is_max)
{
    (void)x;
    (void)e;
    gpool_job j = {in[0]->data, out->data, 1, is_max};
    for (int i = 2; i < in[0]->ndim; i++) j.sp *= in[0]->dims[i];
    nnc_parallel_for(in[0]->dims[0] * in[0]->dims[1], 1 + 16384 / (j.sp ? j.sp : 1), gpool_planes,
                     &j);
    nnc_apply_act(out->data, nnc_numel(out), &n->act);
    return NNC_OK;
}
static int gavg_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    return global_run(n, in, out, x, e, 0);
}
static int gmax_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    return global_run(n, in, out, x, e, 1);
}

const nnc_op nnc_op_globalaveragepool = {"GlobalAveragePool", 1,        1,    1, 1, global_create,
                                         global_infer,        gavg_run, NULL, 0};
const nnc_op nnc_op_globalmaxpool = {"GlobalMaxPool", 1,        1,    1, 1, global_create,
                                     global_infer,    gmax_run, NULL, 0};

/* ---- LRN ----------------------------------------------------------------------------- */

typedef struct {
    int64_t size;
    float alpha, beta, bias;
} lrn_state;

static int lrn_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    TRY(nnc_check_dtype(n, 0, f32, e));
    lrn_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    if (!nnc_attr_find(n, "size")) return nnc_node_fail(e, n, "attribute 'size' is required");
    TRY(nnc_attr_int(n, "size", 1, &s->size, e));
    if (s->size < 1) return nnc_node_fail(e, n, "attribute 'size' must be positive");
    TRY(nnc_attr_float(n, "alpha", 1e-4f, &s->alpha, e));
    TRY(nnc_attr_float(n, "beta", 0.75f, &s->beta, e));
    TRY(nnc_attr_float(n, "bias", 1.f, &s->bias, e));
    if (n->vin[0] && n->vin[0]->ndim >= 0 && n->vin[0]->ndim < 3)
        return nnc_node_fail(e, n, "input must have rank 3 or more, got %d", n->vin[0]->ndim);
    return NNC_OK;
}

static int same_infer_f32(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    if (in[0]->dtype != DT_F32) return nnc_node_fail(e, n, "input must be float32");
    *out = *in[0];
    return NNC_OK;
}

typedef struct {
    const lrn_state *s;
    const float *x;
    float *y;
    int64_t C, sp;
    int64_t chunk;
} lrn_job;

static void lrn_tasks(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    lrn_job *j = arg;
    const lrn_state *s = j->s;
    int64_t lo = (s->size - 1) / 2, hi = s->size - 1 - lo;
    float coef = s->alpha / (float)s->size;
    int64_t nchunks = (j->sp + j->chunk - 1) / j->chunk;
    float acc[256];
    for (int64_t t = b; t < e; t++) {
        int64_t bn = t / nchunks, p0 = (t % nchunks) * j->chunk;
        int64_t len = p0 + j->chunk < j->sp ? j->chunk : j->sp - p0;
        const float *x = j->x + bn * j->C * j->sp + p0;
        float *y = j->y + bn * j->C * j->sp + p0;
        for (int64_t c = 0; c < j->C; c++) {
            int64_t c0 = c - lo < 0 ? 0 : c - lo, c1 = c + hi >= j->C ? j->C - 1 : c + hi;
            for (int64_t i = 0; i < len; i++) acc[i] = 0.f;
            for (int64_t cc = c0; cc <= c1; cc++) {
                const float *xr = x + cc * j->sp;
                for (int64_t i = 0; i < len; i++) acc[i] += xr[i] * xr[i];
            }
            const float *xr = x + c * j->sp;
            float *yr = y + c * j->sp;
            if (s->beta == 0.75f) {
                for (int64_t i = 0; i < len; i++) {
                    float t2 = s->bias + coef * acc[i];
                    float r = sqrtf(t2);
                    yr[i] = xr[i] / (r * sqrtf(r)); /* t^0.75 = sqrt(t) * t^0.25 */
                }
            } else {
                for (int64_t i = 0; i < len; i++)
                    yr[i] = xr[i] * powf(s->bias + coef * acc[i], -s->beta);
            }
        }
    }
}

static int lrn_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    (void)e;
    lrn_job j;
    j.s = n->state;
    j.x = in[0]->data;
    j.y = out->data;
    j.C = in[0]->dims[1];
    j.sp = 1;
    for (int i = 2; i < in[0]->ndim; i++) j.sp *= in[0]->dims[i];
    j.chunk = 256;
    int64_t tasks = in[0]->dims[0] * ((j.sp + j.chunk - 1) / j.chunk);
    nnc_parallel_for(tasks, 1, lrn_tasks, &j);
    nnc_apply_act(out->data, nnc_numel(out), &n->act);
    return NNC_OK;
}

const nnc_op nnc_op_lrn = {"LRN", 1, 1, 1, 1, lrn_create, same_infer_f32, lrn_run, free_state, 0};
