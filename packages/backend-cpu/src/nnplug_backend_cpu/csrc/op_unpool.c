/* MaxUnpool (scatter of the pooled values to the recorded flat indices; any element size),
 * Col2Im (sum of column blocks back into N-D images, float32) and Det (LU with partial
 * pivoting in double, float32 and float64). */
#include "nnc.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>

/* ---- MaxUnpool ----------------------------------------------------------------------- */

typedef struct {
    int nsp;
    int64_t k[NNC_MAXDIM], s[NNC_MAXDIM], p[2 * NNC_MAXDIM];
} mu_state;

static void free_state(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int ints_attr(const nnc_node *n, const char *name, int want, int64_t *out, int64_t def,
                     int required, nnc_err *e)
{
    int c;
    int64_t buf[2 * NNC_MAXDIM];
    TRY(nnc_attr_ints(n, name, buf, 2 * NNC_MAXDIM, &c, e));
    if (c < 0 && required) return nnc_node_fail(e, n, "attribute '%s' is required", name);
    if (c >= 0 && c != want)
        return nnc_node_fail(e, n, "attribute '%s' has %d values, %d expected", name, c, want);
    for (int i = 0; i < want; i++) out[i] = c >= 0 ? buf[i] : def;
    return NNC_OK;
}

static int mu_create(nnc_node *n, nnc_err *e)
{
    static const int idx[] = {DT_I64, 0}, fl[] = {DT_F32, DT_F64, 0};
    TRY(nnc_check_dtype(n, 0, fl, e));
    TRY(nnc_check_dtype(n, 1, idx, e));
    TRY(nnc_check_dtype(n, 2, idx, e));
    mu_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    const nnc_attr *ks = nnc_attr_find(n, "kernel_shape");
    if (!ks) return nnc_node_fail(e, n, "attribute 'kernel_shape' is required");
    s->nsp = (int)ks->count;
    if (s->nsp < 1 || s->nsp > NNC_MAXDIM - 2)
        return nnc_node_fail(e, n, "attribute 'kernel_shape' has %d values", s->nsp);
    TRY(ints_attr(n, "kernel_shape", s->nsp, s->k, 1, 1, e));
    TRY(ints_attr(n, "strides", s->nsp, s->s, 1, 0, e));
    TRY(ints_attr(n, "pads", 2 * s->nsp, s->p, 0, 0, e));
    for (int i = 0; i < s->nsp; i++)
        if (s->k[i] < 1 || s->s[i] < 1 || s->p[i] < 0 || s->p[s->nsp + i] < 0)
            return nnc_node_fail(e, n,
                                 "kernel_shape and strides must be positive, pads not negative");
    if (nnc_in_present(n, 2)) {
        /* A different output_shape: onnxruntime scatters into it, ONNX's reference into the
         * inferred shape then pads. Run only the case where both agree. */
        const nnc_valinfo *x = n->vin[0], *os = n->vin[2];
        int ok = nnc_in_static(n, 0) && nnc_in_const(n, 2) && os->dtype == DT_I64 &&
                 nnc_info_numel(os) == x->ndim && x->ndim == s->nsp + 2;
        const int64_t *v = ok ? os->const_data : NULL;
        for (int d = 0; ok && d < x->ndim; d++) {
            int64_t want = d < 2 ? x->dims[d]
                                 : (x->dims[d] - 1) * s->s[d - 2] + s->k[d - 2] - s->p[d - 2] -
                                       s->p[s->nsp + d - 2];
            ok = v[d] == want;
        }
        if (!ok)
            return nnc_node_unsup(e, n,
                                  "an output_shape other than the inferred one is not supported");
    }
    return NNC_OK;
}

static int mu_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const mu_state *s = n->state;
    const nnc_tensor *x = in[0], *ix = in[1];
    if (x->dtype != DT_F32 && x->dtype != DT_F64)
        return nnc_node_fail(e, n, "X must be float32 or float64");
    if (ix->dtype != DT_I64 || !nnc_same_shape(x, ix))
        return nnc_node_fail(e, n, "I must be int64 with X's shape");
    if (x->ndim != s->nsp + 2) return nnc_node_fail(e, n, "X must have rank %d", s->nsp + 2);
    *out = *x;
    const nnc_tensor *os = n->nin > 2 ? in[2] : NULL;
    if (os) {
        int64_t v[NNC_MAXDIM];
        int c;
        TRY(nnc_read_ints(n, os, "output_shape", v, NNC_MAXDIM, &c, e));
        if (c != x->ndim) return nnc_node_fail(e, n, "output_shape must have %d values", x->ndim);
        for (int d = 0; d < c; d++) {
            if (v[d] < 0) return nnc_node_fail(e, n, "output_shape has a negative value");
            out->dims[d] = v[d];
        }
        if (out->dims[0] != x->dims[0] || out->dims[1] != x->dims[1])
            return nnc_node_fail(e, n, "output_shape must keep X's batch and channels");
    } else {
        for (int i = 0; i < s->nsp; i++)
            out->dims[2 + i] =
                (x->dims[2 + i] - 1) * s->s[i] + s->k[i] - s->p[i] - s->p[s->nsp + i];
        for (int d = 2; d < x->ndim; d++)
            if (out->dims[d] < 0) return nnc_node_fail(e, n, "the pads are larger than the output");
    }
    /* every index must land inside the output (validated before any write) */
    int64_t total = nnc_numel(out), cnt = nnc_numel(ix);
    const int64_t *iv = ix->data;
    for (int64_t i = 0; i < cnt; i++)
        if (iv[i] < 0 || iv[i] >= total)
            return nnc_node_fail(e, n, "index %lld is outside the output (%lld elements)",
                                 (long long)iv[i], (long long)total);
    return NNC_OK;
}

static int mu_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    (void)n;
    (void)e;
    size_t sz = nnc_dtsize(out->dtype);
    int64_t total = nnc_numel(out), cnt = nnc_numel(in[0]);
    memset(out->data, 0, (size_t)total * sz);
    const int64_t *iv = in[1]->data;
    for (int64_t i = 0; i < cnt; i++)
        if (iv[i] >= 0 && iv[i] < total)
            memcpy((char *)out->data + iv[i] * (int64_t)sz,
                   (const char *)in[0]->data + i * (int64_t)sz, sz);
    return NNC_OK;
}

const nnc_op nnc_op_maxunpool = {"MaxUnpool", 2,        3,      1,          1,
                                 mu_create,   mu_infer, mu_run, free_state, 0};

/* ---- Col2Im -------------------------------------------------------------------------- */

typedef struct {
    int nsp;
    int64_t d[NNC_MAXDIM], s[NNC_MAXDIM], p[2 * NNC_MAXDIM];
    int has_d, has_s, has_p;
} c2_state;

static int c2_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0}, i64[] = {DT_I64, 0};
    TRY(nnc_check_dtype(n, 0, f32, e));
    TRY(nnc_check_dtype(n, 1, i64, e));
    TRY(nnc_check_dtype(n, 2, i64, e));
    c2_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    const nnc_valinfo *im = n->vin[1];
    int64_t k = nnc_info_numel(im);
    if (k < 1 || k > NNC_MAXDIM - 2)
        return nnc_node_unsup(e, n, "the image_shape input's length must be known (1 to %d)",
                              NNC_MAXDIM - 2);
    s->nsp = (int)k;
    TRY(ints_attr(n, "dilations", s->nsp, s->d, 1, 0, e));
    TRY(ints_attr(n, "strides", s->nsp, s->s, 1, 0, e));
    TRY(ints_attr(n, "pads", 2 * s->nsp, s->p, 0, 0, e));
    for (int i = 0; i < s->nsp; i++)
        if (s->d[i] < 1 || s->s[i] < 1 || s->p[i] < 0 || s->p[s->nsp + i] < 0)
            return nnc_node_fail(e, n, "dilations and strides must be positive, pads not negative");
    return NNC_OK;
}

typedef struct {
    int64_t img[NNC_MAXDIM], blk[NNC_MAXDIM], nb[NNC_MAXDIM], kprod, L, C;
} c2_geom;

static int c2_geometry(nnc_node *n, nnc_tensor *const *in, c2_geom *g, nnc_err *e)
{
    const c2_state *s = n->state;
    const nnc_tensor *x = in[0];
    int c1, c2;
    if (x->dtype != DT_F32 || x->ndim != 3)
        return nnc_node_fail(e, n, "the input must be float32 [N, C*prod(block_shape), L]");
    TRY(nnc_read_ints(n, in[1], "image_shape", g->img, NNC_MAXDIM, &c1, e));
    TRY(nnc_read_ints(n, in[2], "block_shape", g->blk, NNC_MAXDIM, &c2, e));
    if (c1 != s->nsp || c2 != s->nsp)
        return nnc_node_fail(e, n, "image_shape and block_shape must have %d values", s->nsp);
    g->kprod = 1;
    g->L = 1;
    for (int i = 0; i < s->nsp; i++) {
        if (g->img[i] < 0 || g->blk[i] < 1)
            return nnc_node_fail(e, n, "image_shape and block_shape must be positive");
        int64_t span = g->img[i] + s->p[i] + s->p[s->nsp + i] - (s->d[i] * (g->blk[i] - 1) + 1);
        if (span < 0) return nnc_node_fail(e, n, "the block is larger than the padded image");
        g->nb[i] = span / s->s[i] + 1;
        g->kprod *= g->blk[i];
        g->L *= g->nb[i];
    }
    if (x->dims[1] % g->kprod || x->dims[2] != g->L)
        return nnc_node_fail(e, n, "the input must be [N, C*%lld, %lld]", (long long)g->kprod,
                             (long long)g->L);
    g->C = x->dims[1] / g->kprod;
    return NNC_OK;
}

static int c2_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const c2_state *s = n->state;
    c2_geom g;
    TRY(c2_geometry(n, in, &g, e));
    out->dtype = DT_F32;
    out->ndim = 2 + s->nsp;
    out->dims[0] = in[0]->dims[0];
    out->dims[1] = g.C;
    for (int i = 0; i < s->nsp; i++) out->dims[2 + i] = g.img[i];
    return NNC_OK;
}

typedef struct {
    const c2_state *s;
    c2_geom g;
    const float *x;
    float *y;
} c2_job;

static void c2_planes(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const c2_job *j = arg;
    const c2_state *s = j->s;
    const c2_geom *g = &j->g;
    int nsp = s->nsp;
    int64_t isz = 1;
    for (int i = 0; i < nsp; i++) isz *= g->img[i];
    for (int64_t t = b; t < e; t++) {
        float *y = j->y + t * isz;
        memset(y, 0, (size_t)isz * sizeof(float));
        for (int64_t kb = 0; kb < g->kprod; kb++) {
            int64_t kidx[NNC_MAXDIM], rem = kb;
            for (int i = nsp - 1; i >= 0; i--) {
                kidx[i] = rem % g->blk[i];
                rem /= g->blk[i];
            }
            const float *row = j->x + (t * g->kprod + kb) * g->L;
            for (int64_t l = 0; l < g->L; l++) {
                int64_t off = 0, r = l, ok = 1, mul = 1;
                int64_t pos[NNC_MAXDIM];
                for (int i = nsp - 1; i >= 0; i--) {
                    int64_t li = r % g->nb[i];
                    r /= g->nb[i];
                    pos[i] = li * s->s[i] - s->p[i] + kidx[i] * s->d[i];
                    if (pos[i] < 0 || pos[i] >= g->img[i]) {
                        ok = 0;
                        break;
                    }
                }
                if (!ok) continue;
                for (int i = nsp - 1; i >= 0; i--) {
                    off += pos[i] * mul;
                    mul *= g->img[i];
                }
                y[off] += row[l];
            }
        }
    }
}

static int c2_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    c2_job j;
    j.s = n->state;
    TRY(c2_geometry(n, in, &j.g, e));
    j.x = in[0]->data;
    j.y = out->data;
    nnc_parallel_for(in[0]->dims[0] * j.g.C, 1, c2_planes, &j);
    return NNC_OK;
}

const nnc_op nnc_op_col2im = {"Col2Im", 3, 3, 1, 1, c2_create, c2_infer, c2_run, free_state, 0};

/* ---- Det ----------------------------------------------------------------------------- */

static int det_create(nnc_node *n, nnc_err *e)
{
    static const int fl[] = {DT_F32, DT_F64, 0};
    return nnc_check_dtype(n, 0, fl, e);
}

static int det_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const nnc_tensor *x = in[0];
    if (x->dtype != DT_F32 && x->dtype != DT_F64)
        return nnc_node_fail(e, n, "the input must be float32 or float64");
    if (x->ndim < 2 || x->dims[x->ndim - 1] != x->dims[x->ndim - 2])
        return nnc_node_fail(e, n, "the input must be [..., M, M]");
    *out = *x;
    out->ndim = x->ndim - 2;
    return NNC_OK;
}

typedef struct {
    const void *x;
    void *y;
    int64_t M;
    int f64;
} det_job;

static void det_mats(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const det_job *j = arg;
    int64_t M = j->M;
    double *a = malloc((size_t)(M > 0 ? M * M : 1) * sizeof(double));
    for (int64_t t = b; t < e; t++) {
        double det = 1.0;
        if (!a) det = NAN;
        else {
            for (int64_t i = 0; i < M * M; i++)
                a[i] = j->f64 ? ((const double *)j->x)[t * M * M + i]
                              : ((const float *)j->x)[t * M * M + i];
            for (int64_t c = 0; c < M && det != 0.0; c++) {
                int64_t piv = c;
                for (int64_t r = c + 1; r < M; r++)
                    if (fabs(a[r * M + c]) > fabs(a[piv * M + c])) piv = r;
                if (a[piv * M + c] == 0.0) {
                    det = 0.0;
                    break;
                }
                if (piv != c) {
                    for (int64_t k = 0; k < M; k++) {
                        double tmp = a[c * M + k];
                        a[c * M + k] = a[piv * M + k];
                        a[piv * M + k] = tmp;
                    }
                    det = -det;
                }
                det *= a[c * M + c];
                for (int64_t r = c + 1; r < M; r++) {
                    double f = a[r * M + c] / a[c * M + c];
                    for (int64_t k = c; k < M; k++) a[r * M + k] -= f * a[c * M + k];
                }
            }
        }
        if (j->f64) ((double *)j->y)[t] = det;
        else ((float *)j->y)[t] = (float)det;
    }
    free(a);
}

static int det_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    (void)n;
    (void)e;
    const nnc_tensor *x = in[0];
    det_job j = {x->data, out->data, x->dims[x->ndim - 1], x->dtype == DT_F64};
    nnc_parallel_for(nnc_numel(out), 1 + 4096 / (j.M * j.M * j.M + 1), det_mats, &j);
    return NNC_OK;
}

const nnc_op nnc_op_det = {"Det", 1, 1, 1, 1, det_create, det_infer, det_run, NULL, 0};
