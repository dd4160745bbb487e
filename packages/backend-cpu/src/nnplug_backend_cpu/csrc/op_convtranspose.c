/* ConvTranspose (1-D, 2-D and 3-D, float32): groups, dilations, pads, output_padding, output_shape
 * and auto_pad. Per (image, group, block of output channels): sgemm of the transposed weight
 * block with a tile of input pixels gives the columns, col2im adds them into the block's
 * output planes (each task owns its planes, so tasks never write the same memory). */
#include "nnc.h"
#include "ops.h"

#include <stdlib.h>

typedef struct {
    int nsp, auto_pad;
    int64_t group;
    int64_t k[3], s[3], d[3], pads[6], opad[3], oshape[3];
    int has_oshape, has_pads;
} ct_state;

static void ct_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int ct_list(const nnc_node *n, const char *name, int want, int64_t *out, int64_t def,
                   int *present, nnc_err *e)
{
    int64_t buf[2 * NNC_MAXDIM];
    int c;
    TRY(nnc_attr_ints(n, name, buf, 2 * NNC_MAXDIM, &c, e));
    if (present) *present = c >= 0;
    if (c >= 0 && c != want)
        return nnc_node_fail(e, n, "attribute '%s' has %d values, %d expected", name, c, want);
    for (int i = 0; i < want; i++) out[i] = c >= 0 ? buf[i] : def;
    return NNC_OK;
}

static int ct_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    TRY(nnc_check_dtype(n, 0, f32, e));
    TRY(nnc_check_dtype(n, 1, f32, e));
    if (nnc_in_present(n, 2)) TRY(nnc_check_dtype(n, 2, f32, e));
    ct_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    const nnc_valinfo *w = n->vin[1], *x = n->vin[0];
    int rank = w && w->ndim >= 0 ? w->ndim : x && x->ndim >= 0 ? x->ndim : -1;
    if (rank < 0)
        return nnc_node_unsup(e, n, "the rank of the input must be known when the model is loaded");
    if (rank < 3 || rank > 5)
        return nnc_node_unsup(
            e, n, "only 1-D to 3-D transposed convolutions are supported (rank %d)", rank);
    if ((w && w->ndim >= 0 && w->ndim != rank) || (x && x->ndim >= 0 && x->ndim != rank))
        return nnc_node_fail(e, n, "input and weight ranks differ");
    int nsp = s->nsp = rank - 2;
    TRY(nnc_parse_auto_pad(n, &s->auto_pad, e));
    TRY(nnc_attr_int(n, "group", 1, &s->group, e));
    if (s->group < 1) return nnc_node_fail(e, n, "attribute 'group' must be positive");
    TRY(ct_list(n, "kernel_shape", nsp, s->k, 0, NULL, e));
    TRY(ct_list(n, "strides", nsp, s->s, 1, NULL, e));
    TRY(ct_list(n, "dilations", nsp, s->d, 1, NULL, e));
    TRY(ct_list(n, "output_padding", nsp, s->opad, 0, NULL, e));
    TRY(ct_list(n, "pads", 2 * nsp, s->pads, 0, &s->has_pads, e));
    TRY(ct_list(n, "output_shape", nsp, s->oshape, -1, &s->has_oshape, e));
    for (int i = 0; i < nsp; i++) {
        if (s->s[i] < 1 || s->d[i] < 1)
            return nnc_node_fail(e, n, "strides and dilations must be positive");
        if (s->opad[i] < 0)
            return nnc_node_fail(e, n, "attribute 'output_padding' must not be negative");
        if (s->k[i] < 0) return nnc_node_fail(e, n, "attribute 'kernel_shape' must be positive");
        if (s->has_oshape && s->oshape[i] < 0)
            return nnc_node_fail(e, n, "attribute 'output_shape' must not be negative");
    }
    /* onnxruntime and ONNX's reference disagree on which wins: run neither combination */
    if (s->has_pads &&
        (s->has_oshape || s->auto_pad == AP_SAME_UPPER || s->auto_pad == AP_SAME_LOWER))
        return nnc_node_unsup(
            e, n,
            "explicit 'pads' together with 'output_shape' or auto_pad SAME_* is not supported");
    for (int i = 0; i < 2 * nsp; i++)
        if (s->pads[i] < 0) return nnc_node_fail(e, n, "attribute 'pads' must not be negative");
    if (w && w->ndim == rank) {
        for (int i = 0; i < nsp; i++)
            if (s->k[i] && w->dims[2 + i] >= 0 && w->dims[2 + i] != s->k[i])
                return nnc_node_fail(e, n,
                                     "attribute 'kernel_shape' does not match the weight shape");
        if (x && x->ndim == rank && x->dims[1] >= 0 && w->dims[0] >= 0 && x->dims[1] != w->dims[0])
            return nnc_node_fail(e, n, "input has %lld channels, the weight %lld",
                                 (long long)x->dims[1], (long long)w->dims[0]);
        if (w->dims[0] >= 0 && w->dims[0] % s->group)
            return nnc_node_fail(e, n, "attribute 'group' does not divide the %lld input channels",
                                 (long long)w->dims[0]);
    }
    return NNC_OK;
}

typedef struct {
    int64_t N, C, M, Cg, Mg, D, H, W, OD, OH, OW, kd, kh, kw, sd, sh, sw, dd, dh, dw, pf, pt, pl;
} ct_geom;

static int ct_geometry(nnc_node *n, nnc_tensor *const *in, ct_geom *g, nnc_err *e)
{
    const ct_state *s = n->state;
    const nnc_tensor *x = in[0], *w = in[1];
    int rank = s->nsp + 2;
    if (x->dtype != DT_F32 || w->dtype != DT_F32)
        return nnc_node_fail(e, n, "inputs must be float32");
    if (x->ndim != rank || w->ndim != rank)
        return nnc_node_fail(e, n, "input and weight must have rank %d", rank);
    if (x->dims[1] != w->dims[0])
        return nnc_node_fail(e, n, "input has %lld channels, the weight %lld",
                             (long long)x->dims[1], (long long)w->dims[0]);
    if (w->dims[0] % s->group)
        return nnc_node_fail(e, n, "attribute 'group' does not divide the input channels");
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->Cg = g->C / s->group;
    g->Mg = w->dims[1];
    g->M = g->Mg * s->group;
    if (n->nin > 2 && in[2] &&
        (in[2]->dtype != DT_F32 || in[2]->ndim != 1 || in[2]->dims[0] != g->M))
        return nnc_node_fail(e, n, "bias must be 1-D float32 with %lld values", (long long)g->M);
    int64_t insz[3], ksz[3], out[3], ph[3];
    for (int i = 0; i < s->nsp; i++) {
        insz[i] = x->dims[2 + i];
        ksz[i] = w->dims[2 + i];
        if (s->k[i] && s->k[i] != ksz[i])
            return nnc_node_fail(e, n, "attribute 'kernel_shape' does not match the weight shape");
        int64_t full = s->s[i] * (insz[i] - 1) + s->opad[i] + (ksz[i] - 1) * s->d[i] + 1;
        if (s->has_oshape ||
            (!s->has_pads && (s->auto_pad == AP_SAME_UPPER || s->auto_pad == AP_SAME_LOWER))) {
            int64_t want = s->has_oshape ? s->oshape[i] : insz[i] * s->s[i];
            int64_t total = full - want;
            if (total < 0)
                total = 0; /* a larger output_shape extends the end, as output_padding does */
            ph[i] = s->auto_pad == AP_SAME_UPPER ? total / 2 : total - total / 2;
            out[i] = want;
        } else {
            int64_t b = s->auto_pad == AP_VALID ? 0 : s->pads[i],
                    en = s->auto_pad == AP_VALID ? 0 : s->pads[s->nsp + i];
            ph[i] = b;
            out[i] = full - b - en;
        }
        if (out[i] < 0) return nnc_node_fail(e, n, "the pads are larger than the output");
    }
    /* spatial axes as (depth, height, width), missing leading ones of size 1 */
    int64_t I3[3] = {1, 1, 1}, O3[3] = {1, 1, 1}, K3[3] = {1, 1, 1}, S3[3] = {1, 1, 1},
            D3[3] = {1, 1, 1}, P3[3] = {0, 0, 0};
    for (int i = 0; i < s->nsp; i++) {
        int a = 3 - s->nsp + i;
        I3[a] = insz[i];
        O3[a] = out[i];
        K3[a] = ksz[i];
        S3[a] = s->s[i];
        D3[a] = s->d[i];
        P3[a] = ph[i];
    }
    g->D = I3[0];
    g->H = I3[1];
    g->W = I3[2];
    g->OD = O3[0];
    g->OH = O3[1];
    g->OW = O3[2];
    g->kd = K3[0];
    g->kh = K3[1];
    g->kw = K3[2];
    g->sd = S3[0];
    g->sh = S3[1];
    g->sw = S3[2];
    g->dd = D3[0];
    g->dh = D3[1];
    g->dw = D3[2];
    g->pf = P3[0];
    g->pt = P3[1];
    g->pl = P3[2];
    return NNC_OK;
}

static int ct_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const ct_state *s = n->state;
    ct_geom g;
    TRY(ct_geometry(n, in, &g, e));
    out->dtype = DT_F32;
    out->ndim = s->nsp + 2;
    out->dims[0] = g.N;
    out->dims[1] = g.M;
    int64_t o3[3] = {g.OD, g.OH, g.OW};
    for (int i = 0; i < s->nsp; i++) out->dims[2 + i] = o3[3 - s->nsp + i];
    return NNC_OK;
}

typedef struct {
    ct_geom g;
    const float *x, *w, *b;
    float *y;
    int64_t mblk, nmb, tn;
    int fail;
} ct_job;

static void ct_tasks(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ct_job *j = arg;
    const ct_geom *g = &j->g;
    int64_t K = g->kd * g->kh * g->kw, HW = g->D * g->H * g->W, OHW = g->OD * g->OH * g->OW,
            group = g->M / g->Mg;
    float *col = nnc_alloc((size_t)(j->mblk * K * j->tn) * sizeof(float));
    if (!col) {
        j->fail = 1;
        return;
    }
    for (int64_t t = b; t < e; t++) {
        int64_t mb = t % j->nmb, rest = t / j->nmb, gi = rest % group, img = rest / group;
        int64_t m0 = mb * j->mblk, m1 = m0 + j->mblk < g->Mg ? m0 + j->mblk : g->Mg;
        const float *xg = j->x + (img * g->C + gi * g->Cg) * HW;
        const float *wg = j->w + gi * g->Cg * g->Mg * K; /* [Cg][Mg*K] */
        float *yb = j->y + (img * g->M + gi * g->Mg + m0) * OHW;
        for (int64_t m = m0; m < m1; m++) {
            float bias = j->b ? j->b[gi * g->Mg + m] : 0.f;
            float *yp = yb + (m - m0) * OHW;
            for (int64_t i = 0; i < OHW; i++) yp[i] = bias;
        }
        for (int64_t p0 = 0; p0 < HW; p0 += j->tn) {
            int64_t p1 = p0 + j->tn < HW ? p0 + j->tn : HW, tn = p1 - p0;
            nnc_sgemm(1, 0, (m1 - m0) * K, tn, g->Cg, 1.f, wg + m0 * K, g->Mg * K, xg + p0, HW, 0.f,
                      col, tn);
            for (int64_t m = m0; m < m1; m++) {
                float *yp = yb + (m - m0) * OHW;
                for (int64_t kz = 0; kz < g->kd; kz++)
                    for (int64_t ky = 0; ky < g->kh; ky++)
                        for (int64_t kx = 0; kx < g->kw; kx++) {
                            const float *row =
                                col + ((((m - m0) * g->kd + kz) * g->kh + ky) * g->kw + kx) * tn;
                            int64_t p = p0;
                            while (p < p1) {
                                int64_t iz = p / (g->H * g->W), ih = (p / g->W) % g->H,
                                        iw = p % g->W;
                                int64_t seg = g->W - iw < p1 - p ? g->W - iw : p1 - p;
                                int64_t oz = iz * g->sd - g->pf + kz * g->dd;
                                int64_t oh = ih * g->sh - g->pt + ky * g->dh;
                                if (oz >= 0 && oz < g->OD && oh >= 0 && oh < g->OH) {
                                    float *yr = yp + (oz * g->OH + oh) * g->OW;
                                    const float *src = row + (p - p0);
                                    int64_t ow = iw * g->sw - g->pl + kx * g->dw;
                                    for (int64_t i = 0; i < seg; i++, ow += g->sw)
                                        if (ow >= 0 && ow < g->OW) yr[ow] += src[i];
                                }
                                p += seg;
                            }
                        }
            }
        }
    }
    nnc_free(col);
}

static int ct_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    ct_job j;
    memset(&j, 0, sizeof j);
    TRY(ct_geometry(n, in, &j.g, e));
    const ct_geom *g = &j.g;
    j.x = in[0]->data;
    j.w = in[1]->data;
    j.b = n->nin > 2 && in[2] ? in[2]->data : NULL;
    j.y = out->data;
    int64_t K = g->kd * g->kh * g->kw, HW = g->D * g->H * g->W, group = g->M / (g->Mg ? g->Mg : 1);
    if (g->M == 0 || g->N == 0) return NNC_OK;
    if (HW == 0 || g->Cg == 0 || K == 0) { /* no input taps: the output is the bias */
        for (int64_t i = 0, OHW = g->OD * g->OH * g->OW; i < g->N * g->M; i++)
            for (int64_t k = 0; k < OHW; k++) j.y[i * OHW + k] = j.b ? j.b[i % g->M] : 0.f;
        return NNC_OK;
    }
    /* Blocks of output channels: enough tasks for the threads, columns of about 1 MiB. */
    int64_t tasks_per = g->N * group;
    j.mblk = g->Mg;
    while (j.mblk > 1 && tasks_per * ((g->Mg + j.mblk - 1) / j.mblk) < 4 * nnc_num_threads())
        j.mblk = (j.mblk + 1) / 2;
    j.nmb = (g->Mg + j.mblk - 1) / j.mblk;
    j.tn = (256 * 1024) / (j.mblk * K);
    if (j.tn < 16) j.tn = 16;
    if (j.tn > HW) j.tn = HW;
    nnc_parallel_for(tasks_per * j.nmb, 1, ct_tasks, &j);
    if (j.fail) return nnc_node_fail(e, n, "out of memory");
    return NNC_OK;
}

const nnc_op nnc_op_convtranspose = {"ConvTranspose", 2,        3,      1,          1,
                                     ct_create,       ct_infer, ct_run, ct_destroy, 0};
