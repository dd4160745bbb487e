/* Conv: per (group, pixel tile, row block) task, im2col straight into the GEMM's packed column
 * panels (1x1 stride-1 convolutions pack the input rows themselves), one product against the
 * weights packed once at create, and the epilogue (bias, residual add, activation) applied to
 * each tile of the product while it is in L1; a direct kernel for depthwise convolution. The
 * planner folds BatchNormalization and per-channel Mul/Add into the packed weights
 * (nnc_conv_fold_affine). Weights given at run time go through nnc_sgemm. */
#include "conv_winograd.h"
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    int nsp;                         /* 1 or 2 spatial dims (1-D runs as H = 1) */
    int64_t M, Cg, group, kh, kw, sh, sw, dh, dw;
    int64_t pads[4];                 /* top, left, bottom, right (explicit pads) */
    int auto_pad;                    /* AP_* */
    float *w;                        /* depthwise: constant weights [M][kh*kw] */
    float *pw;                       /* otherwise: constant weights, each group packed */
    float *pu; /* and Winograd's transformed ones (conv_winograd.h), or NULL */
    float wino_xmax; /* the largest |x| Winograd takes with pu (nnc_wino_input_limit) */
    int64_t pw_group; /* floats per group in pw */
    float *bias; /* [M] when weights are constant */
    int dt; /* element type: float32, or float16/bfloat16/float64 on
               the plain loop (conv_typed_planes) */
} conv_state;

int nnc_parse_auto_pad(const nnc_node *n, int *out, nnc_err *e)
{
    char s[32];
    TRY(nnc_attr_str(n, "auto_pad", "NOTSET", s, sizeof s, e));
    if (!strcmp(s, "NOTSET") || !s[0]) *out = AP_NOTSET;
    else if (!strcmp(s, "SAME_UPPER")) *out = AP_SAME_UPPER;
    else if (!strcmp(s, "SAME_LOWER")) *out = AP_SAME_LOWER;
    else if (!strcmp(s, "VALID")) *out = AP_VALID;
    else
        return nnc_node_fail(e, n,
                             "attribute 'auto_pad' = '%s' is not one of NOTSET, SAME_UPPER, "
                             "SAME_LOWER, VALID",
                             s);
    return NNC_OK;
}

/* Output size and the begin/end pads actually used along one axis. */
int nnc_window_out(int auto_pad, int ceil_mode, int64_t in, int64_t k, int64_t s, int64_t d,
                   int64_t pb, int64_t pe, int64_t *out, int64_t *pb_used, int64_t *pe_used)
{
    int64_t ext = (k - 1) * d + 1;
    if (auto_pad == AP_SAME_UPPER || auto_pad == AP_SAME_LOWER) {
        int64_t o = (in + s - 1) / s;
        int64_t total = (o - 1) * s + ext - in;
        if (total < 0) total = 0;
        *out = o;
        *pb_used = auto_pad == AP_SAME_UPPER ? total / 2 : total - total / 2;
        *pe_used = total - *pb_used;
        return o > 0 ? NNC_OK : NNC_ERR;
    }
    if (auto_pad == AP_VALID) pb = pe = 0;
    int64_t span = in + pb + pe - ext;
    if (span < 0) return NNC_ERR;
    int64_t o = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
    if (ceil_mode && (o - 1) * s >= in + pb) o--; /* last window must start inside */
    *out = o;
    *pb_used = pb;
    *pe_used = pe;
    return NNC_OK;
}

/* Reads kernel window attributes shared by Conv and the pools. */
int nnc_parse_window(const nnc_node *n, int nsp, const int64_t *kernel_from_w, nnc_window *w,
                     nnc_err *e)
{
    int c;
    int64_t buf[2 * NNC_MAXDIM];
    w->nsp = nsp;
    TRY(nnc_parse_auto_pad(n, &w->auto_pad, e));
    TRY(nnc_attr_ints(n, "kernel_shape", buf, NNC_MAXDIM, &c, e));
    if (c < 0 && !kernel_from_w) return nnc_node_fail(e, n, "attribute 'kernel_shape' is required");
    if (c >= 0 && c != nsp)
        return nnc_node_fail(e, n, "attribute 'kernel_shape' has %d values for %d spatial dims", c,
                             nsp);
    for (int i = 0; i < nsp; i++) {
        w->k[i] = c >= 0 ? buf[i] : kernel_from_w[i];
        if (kernel_from_w && w->k[i] != kernel_from_w[i])
            return nnc_node_fail(e, n,
                                 "attribute 'kernel_shape' (%lld) does not match the weight "
                                 "shape (%lld)",
                                 (long long)w->k[i], (long long)kernel_from_w[i]);
        if (w->k[i] < 1) return nnc_node_fail(e, n, "attribute 'kernel_shape' must be positive");
    }
    TRY(nnc_attr_ints(n, "strides", buf, NNC_MAXDIM, &c, e));
    if (c >= 0 && c != nsp)
        return nnc_node_fail(e, n, "attribute 'strides' has %d values for %d spatial dims", c, nsp);
    for (int i = 0; i < nsp; i++) {
        w->s[i] = c >= 0 ? buf[i] : 1;
        if (w->s[i] < 1) return nnc_node_fail(e, n, "attribute 'strides' must be positive");
    }
    TRY(nnc_attr_ints(n, "dilations", buf, NNC_MAXDIM, &c, e));
    if (c >= 0 && c != nsp)
        return nnc_node_fail(e, n, "attribute 'dilations' has %d values for %d spatial dims", c,
                             nsp);
    for (int i = 0; i < nsp; i++) {
        w->d[i] = c >= 0 ? buf[i] : 1;
        if (w->d[i] < 1) return nnc_node_fail(e, n, "attribute 'dilations' must be positive");
    }
    TRY(nnc_attr_ints(n, "pads", buf, 2 * NNC_MAXDIM, &c, e));
    if (c >= 0 && c != 2 * nsp)
        return nnc_node_fail(e, n, "attribute 'pads' has %d values; %d spatial dims need %d", c,
                             nsp, 2 * nsp);
    for (int i = 0; i < 2 * nsp; i++) {
        w->p[i] = c >= 0 ? buf[i] : 0;
        if (w->p[i] < 0) return nnc_node_fail(e, n, "attribute 'pads' must not be negative");
    }
    return NNC_OK;
}

static void conv_destroy(nnc_node *n)
{
    conv_state *s = n->state;
    if (!s) return;
    nnc_free(s->w);
    nnc_free(s->pw);
    nnc_free(s->pu);
    nnc_free(s->bias);
    free(s);
    n->state = NULL;
}

/* 3x3, stride 1, dilation 1, one group, with constant float32 weights that are all finite
 * (a non-finite weight would spread over its tiles as a non-finite input does), unless
 * NNPLUG_CPU_WINOGRAD=0: such a convolution runs as Winograd F(2x2, 3x3) where the shape
 * pays (nnc_wino_fits). */
static int winograd_kernel(const conv_state *s)
{
    const char *env = getenv("NNPLUG_CPU_WINOGRAD");
    if ((env && !strcmp(env, "0")) || !s->pw || s->nsp != 2 || s->group != 1 || s->kh != 3 ||
        s->kw != 3 || s->sh != 1 || s->sw != 1 || s->dh != 1 || s->dw != 1)
        return 0;
    return 1;
}

/* The taps [*t0, *t1] of an axis (k taps, stride st, dilation d, begin pad pb, out outputs)
 * that read inside an input of n for some output; *t1 < *t0 when none does. */
static void live_taps(int64_t n, int64_t k, int64_t st, int64_t d, int64_t pb, int64_t out,
                      int64_t *t0, int64_t *t1)
{
    *t0 = k;
    *t1 = -1;
    for (int64_t t = 0; t < k; t++) {
        int64_t lo = t * d - pb;                           /* what output 0 reads */
        int64_t y = lo >= 0 ? 0 : (-lo + st - 1) / st;     /* the first output reading >= 0 */
        if (y < out && lo + y * st < n) {
            if (t < *t0) *t0 = t;
            *t1 = t;
        }
    }
}

/* A dilated convolution whose outer taps read only padding for every output (DeepLabV3's
 * atrous convolutions of dilation 24 and 36 over a 20 x 20 map: only the centre tap reads the
 * input) runs with the taps that read it: the same sums, since each dropped tap adds w * 0.
 * Only with explicit pads, static spatial dims and finite weights (an infinite or NaN weight
 * times a padded zero is NaN, which ONNX keeps). Returns the trimmed weights (the caller frees
 * them) and updates s's window, or NULL when nothing is dropped. */
static float *trim_dead_taps(conv_state *s, const nnc_valinfo *xi, const float *w)
{
    if (s->auto_pad != AP_NOTSET || !xi || xi->ndim != s->nsp + 2) return NULL;
    int64_t in[2] = {s->nsp == 1 ? 1 : xi->dims[2], xi->dims[s->nsp == 1 ? 2 : 3]};
    int64_t k[2] = {s->kh, s->kw}, st[2] = {s->sh, s->sw}, d[2] = {s->dh, s->dw};
    int64_t pb[2] = {s->pads[0], s->pads[1]}, pe[2] = {s->pads[2], s->pads[3]};
    int64_t t0[2], t1[2];
    int drop = 0;
    for (int a = 0; a < 2; a++) {
        int64_t out, ub, ue;
        if (in[a] < 1 ||
            nnc_window_out(AP_NOTSET, 0, in[a], k[a], st[a], d[a], pb[a], pe[a], &out, &ub, &ue) ||
            out < 1)
            return NULL;
        live_taps(in[a], k[a], st[a], d[a], pb[a], out, &t0[a], &t1[a]);
        if (t1[a] < t0[a]) return NULL; /* no tap reads the input: left as it is */
        /* the window then starts at tap t0 and ends at t1: pads shrink by what they covered */
        if (pb[a] - t0[a] * d[a] < 0 || pe[a] - (k[a] - 1 - t1[a]) * d[a] < 0) {
            t0[a] = 0;
            t1[a] = k[a] - 1;
        }
        drop |= t0[a] > 0 || t1[a] < k[a] - 1;
    }
    int64_t K = s->Cg * k[0] * k[1];
    if (!drop || nnc_any_nonfinite(w, s->M * K)) return NULL;
    int64_t nk[2] = {t1[0] - t0[0] + 1, t1[1] - t0[1] + 1};
    float *tw = malloc((size_t)(s->M * s->Cg * nk[0] * nk[1]) * sizeof(float));
    if (!tw) return NULL; /* the full kernel runs: slower, the same sums */
    float *o = tw;
    for (int64_t mc = 0; mc < s->M * s->Cg; mc++)
        for (int64_t y = t0[0]; y <= t1[0]; y++)
            for (int64_t x = t0[1]; x <= t1[1]; x++) *o++ = w[(mc * k[0] + y) * k[1] + x];
    s->kh = nk[0];
    s->kw = nk[1];
    s->pads[0] -= t0[0] * d[0];
    s->pads[1] -= t0[1] * d[1];
    s->pads[2] -= (k[0] - 1 - t1[0]) * d[0];
    s->pads[3] -= (k[1] - 1 - t1[1]) * d[1];
    if (nk[0] == 1) s->dh = 1; /* one tap: its dilation means nothing */
    if (nk[1] == 1) s->dw = 1;
    return tw;
}

static int conv_create(nnc_node *n, nnc_err *e)
{
    static const int fl[] = {DT_F32, DT_F16, DT_BF16, DT_F64, 0};
    TRY(nnc_check_dtype(n, 0, fl, e));
    TRY(nnc_check_dtype(n, 1, fl, e));
    if (nnc_in_present(n, 2)) TRY(nnc_check_dtype(n, 2, fl, e));
    int dt = n->vin[0] && n->vin[0]->dtype ? n->vin[0]->dtype : DT_F32;
    for (int i = 1; i < 3; i++)
        if (nnc_in_present(n, i) && n->vin[i]->dtype && n->vin[i]->dtype != dt)
            return nnc_node_fail(e, n, "input %d is %s, X is %s: Conv needs one element type", i,
                                 nnc_dtname(n->vin[i]->dtype), nnc_dtname(dt));
    const nnc_valinfo *wi = n->vin[1];
    if (!nnc_in_static(n, 1))
        return nnc_node_fail(e, n,
                             "the weight input's shape must be known when the model is loaded");
    int wr = wi->ndim;
    if (wr != 3 && wr != 4)
        return nnc_node_unsup(e, n, "only 1-D and 2-D convolutions are supported (weight rank %d)",
                              wr);
    const nnc_valinfo *xi = n->vin[0];
    if (xi && xi->ndim >= 0 && xi->ndim != wr)
        return nnc_node_fail(e, n, "input rank %d does not match weight rank %d", xi->ndim, wr);
    conv_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->nsp = wr - 2;
    s->dt = dt;
    int64_t group;
    TRY(nnc_attr_int(n, "group", 1, &group, e));
    if (group < 1)
        return nnc_node_fail(e, n, "attribute 'group' must be positive, got %lld",
                             (long long)group);
    s->group = group;
    s->M = wi->dims[0];
    s->Cg = wi->dims[1];
    if (s->M < 1 || s->Cg < 1) return nnc_node_fail(e, n, "the weight has an empty dimension");
    if (s->M % group)
        return nnc_node_fail(e, n,
                             "attribute 'group' = %lld does not divide the %lld output channels",
                             (long long)group, (long long)s->M);
    if (xi && xi->ndim >= 2 && xi->dims[1] >= 0 && xi->dims[1] != s->Cg * group)
        return nnc_node_fail(e, n, "input has %lld channels but weight expects %lld x group %lld",
                             (long long)xi->dims[1], (long long)s->Cg, (long long)group);
    nnc_window w;
    int64_t kdims[2] = {wi->dims[2], wr == 4 ? wi->dims[3] : 0};
    TRY(nnc_parse_window(n, s->nsp, kdims, &w, e));
    if (s->nsp == 1) {
        s->kh = 1;
        s->kw = w.k[0];
        s->sh = 1;
        s->sw = w.s[0];
        s->dh = 1;
        s->dw = w.d[0];
        s->pads[0] = 0;
        s->pads[1] = w.p[0];
        s->pads[2] = 0;
        s->pads[3] = w.p[1];
    } else {
        s->kh = w.k[0];
        s->kw = w.k[1];
        s->sh = w.s[0];
        s->sw = w.s[1];
        s->dh = w.d[0];
        s->dw = w.d[1];
        s->pads[0] = w.p[0];
        s->pads[1] = w.p[1];
        s->pads[2] = w.p[2];
        s->pads[3] = w.p[3];
    }
    s->auto_pad = w.auto_pad;
    if (s->M * s->Cg * s->kh * s->kw > INT32_MAX)
        return nnc_node_fail(e, n, "the weight is too large (over 2^31 elements)");
    if (nnc_in_present(n, 2)) {
        const nnc_valinfo *bi = n->vin[2];
        int64_t bn = nnc_info_numel(bi);
        if (bi && bi->ndim >= 0 && (bi->ndim != 1 || (bn >= 0 && bn != s->M)))
            return nnc_node_fail(e, n, "bias must be 1-D with %lld values", (long long)s->M);
    }
    /* Pack constant weights (and bias) once. */
    if (dt == DT_F32 && !n->probing && nnc_in_const(n, 1) &&
        (!nnc_in_present(n, 2) || nnc_in_const(n, 2))) {
        float *trimmed = trim_dead_taps(s, xi, wi->const_data);
        int64_t Mg = s->M / s->group, K = s->Cg * s->kh * s->kw;
        const float *src = trimmed ? trimmed : wi->const_data;
        s->bias = nnc_alloc((size_t)s->M * sizeof(float));
        if (s->Cg == 1 && Mg == 1) {
            s->w = nnc_alloc((size_t)(s->M * K) * sizeof(float));
            if (s->w) memcpy(s->w, src, (size_t)(s->M * K) * sizeof(float));
        } else {
            s->pw_group = nnc_sgemm_packed_a_floats(Mg, K);
            s->pw = nnc_alloc((size_t)(s->group * s->pw_group) * sizeof(float));
            for (int64_t g = 0; s->pw && g < s->group; g++)
                nnc_sgemm_pack_a(Mg, K, src + g * Mg * K, K, s->pw + g * s->pw_group);
        }
        if ((!s->w && !s->pw) || !s->bias) {
            free(trimmed);
            return nnc_node_fail(e, n, "out of memory packing weights");
        }
        int wino = winograd_kernel(s) && !nnc_any_nonfinite(src, s->M * K);
        if (wino &&
            (s->pu = nnc_alloc((size_t)nnc_wino_packed_floats(s->M, s->Cg) * sizeof(float)))) {
            nnc_wino_pack(src, s->M, s->Cg, s->pu);
            s->wino_xmax = nnc_wino_input_limit(s->pu, s->M, s->Cg);
        }
        free(trimmed);
        if (wino && !s->pu) return nnc_node_fail(e, n, "out of memory packing weights");
        if (nnc_in_present(n, 2))
            memcpy(s->bias, n->vin[2]->const_data, (size_t)s->M * sizeof(float));
        else memset(s->bias, 0, (size_t)s->M * sizeof(float));
    }
    return NNC_OK;
}

int nnc_conv_can_fold(const nnc_node *n)
{
    const conv_state *s = n->state;
    return s && (s->w || s->pw) && n->residual < 0 && n->act.kind == ACT_NONE;
}

int64_t nnc_conv_out_channels(const nnc_node *n)
{
    return ((const conv_state *)n->state)->M;
}

void nnc_conv_fold_affine(nnc_node *n, const float *scale, const float *shift)
{
    conv_state *s = n->state;
    int64_t K = s->Cg * s->kh * s->kw, Mg = s->M / s->group;
    if (scale && s->pu && nnc_any_nonfinite(scale, s->M)) { /* see winograd_kernel */
        nnc_free(s->pu);
        s->pu = NULL;
    }
    for (int64_t m = 0; m < s->M; m++) {
        float a = scale ? scale[m] : 1.f, b = shift ? shift[m] : 0.f;
        if (scale && s->w)
            for (int64_t k = 0; k < K; k++) s->w[m * K + k] *= a;
        else if (scale) nnc_sgemm_packed_a_scale_row(s->pw + m / Mg * s->pw_group, K, m % Mg, a);
        if (scale && s->pu) nnc_wino_scale_row(s->pu, s->M, s->Cg, m, a);
        s->bias[m] = s->bias[m] * a + b;
    }
    if (scale && s->pu) s->wino_xmax = nnc_wino_input_limit(s->pu, s->M, s->Cg);
}

static int conv_geometry(const conv_state *s, const nnc_tensor *x, int64_t *H, int64_t *W,
                         int64_t *OH, int64_t *OW, int64_t *pt, int64_t *pl)
{
    int64_t pb, pr;
    *H = s->nsp == 1 ? 1 : x->dims[2];
    *W = s->nsp == 1 ? x->dims[2] : x->dims[3];
    if (s->nsp == 1) {
        *OH = 1;
        *pt = 0;
    } else if (nnc_window_out(s->auto_pad, 0, *H, s->kh, s->sh, s->dh, s->pads[0], s->pads[2], OH,
                              pt, &pb))
        return NNC_ERR;
    if (nnc_window_out(s->auto_pad, 0, *W, s->kw, s->sw, s->dw, s->pads[1], s->pads[3], OW, pl,
                       &pr))
        return NNC_ERR;
    return NNC_OK;
}

static int conv_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const conv_state *s = n->state;
    const nnc_tensor *x = in[0];
    if (x->dtype != s->dt || in[1]->dtype != s->dt ||
        (n->nin > 2 && in[2] && in[2]->dtype != s->dt))
        return nnc_node_fail(e, n, "inputs must be %s", nnc_dtname(s->dt));
    if (x->ndim != s->nsp + 2)
        return nnc_node_fail(e, n, "input must have rank %d, got %d", s->nsp + 2, x->ndim);
    if (x->dims[1] != s->Cg * s->group)
        return nnc_node_fail(e, n, "input has %lld channels, expected %lld", (long long)x->dims[1],
                             (long long)(s->Cg * s->group));
    if (!s->w && !s->pw) { /* weights given at run time: check them */
        const nnc_tensor *w = in[1];
        if (w->ndim != s->nsp + 2 || w->dims[0] != s->M || w->dims[1] != s->Cg ||
            w->dims[2] != (s->nsp == 1 ? s->kw : s->kh) || (s->nsp == 2 && w->dims[3] != s->kw))
            return nnc_node_fail(e, n, "the weight's shape changed after loading");
        if (n->nin > 2 && in[2] && (in[2]->ndim != 1 || in[2]->dims[0] != s->M))
            return nnc_node_fail(e, n, "bias must be 1-D with %lld values", (long long)s->M);
    }
    int64_t H, W, OH, OW, pt, pl;
    if (conv_geometry(s, x, &H, &W, &OH, &OW, &pt, &pl))
        return nnc_node_fail(e, n, "the kernel window is larger than the padded input");
    out->dtype = s->dt;
    out->ndim = x->ndim;
    out->dims[0] = x->dims[0];
    out->dims[1] = s->M;
    if (s->nsp == 1) out->dims[2] = OW;
    else {
        out->dims[2] = OH;
        out->dims[3] = OW;
    }
    if (n->residual >= 0) {
        const nnc_tensor *r = in[n->residual];
        if (!nnc_same_shape(r, out) || r->dtype != DT_F32)
            return nnc_node_fail(e, n, "fused residual input has the wrong shape");
    }
    return NNC_OK;
}

typedef struct {
    const conv_state *s;
    const float *x, *w, *bias, *res;
    float *y;
    int64_t H, W, OH, OW, pt, pl, K, Mg;
    int64_t tn, ntiles, mblk, nmb;
    int direct; /* 1x1, stride 1, no pads: the input is the column matrix */
    nnc_exec *xc;
    const nnc_act *act;
    int fail;
} conv_job;

/* One im2col row: tap (ky, kx) of channel plane xc over output pixels [p0, p1). */
static void im2col_row(const conv_job *j, const float *xc, int64_t ky, int64_t kx, int64_t p0,
                       int64_t p1, float *row)
{
    const conv_state *s = j->s;
    int64_t H = j->H, W = j->W, OW = j->OW;
    int64_t p = p0, oh = p0 / OW, ow = p0 % OW;
    while (p < p1) {
        int64_t seg = OW - ow < p1 - p ? OW - ow : p1 - p;
        int64_t ih = oh * s->sh - j->pt + ky * s->dh;
        if (ih < 0 || ih >= H) {
            memset(row, 0, (size_t)seg * sizeof(float));
        } else {
            const float *src = xc + ih * W;
            int64_t iw0 = ow * s->sw - j->pl + kx * s->dw;
            if (s->sw == 1) {
                int64_t lo = iw0 < 0 ? -iw0 : 0; /* first valid i */
                int64_t hi = W - iw0 < seg ? W - iw0 : seg; /* one past last valid */
                if (lo > seg) lo = seg;
                if (hi < lo) hi = lo;
                if (lo) memset(row, 0, (size_t)lo * sizeof(float));
                if (hi > lo) memcpy(row + lo, src + iw0 + lo, (size_t)(hi - lo) * sizeof(float));
                if (seg > hi) memset(row + hi, 0, (size_t)(seg - hi) * sizeof(float));
            } else { /* the taps inside the row [lo, hi) found once, not tested per pixel */
                int64_t sw = s->sw;
                int64_t lo = iw0 < 0 ? (-iw0 + sw - 1) / sw : 0;
                int64_t hi = iw0 >= W ? 0 : (W - iw0 + sw - 1) / sw;
                if (lo > seg) lo = seg;
                if (hi > seg) hi = seg;
                if (hi < lo) hi = lo;
                for (int64_t i = 0; i < lo; i++) row[i] = 0.f;
                for (int64_t i = lo; i < hi; i++) row[i] = src[iw0 + i * sw];
                for (int64_t i = hi; i < seg; i++) row[i] = 0.f;
            }
        }
        row += seg;
        p += seg;
        ow = 0;
        oh++;
    }
}

/* n floats of src (zeros when src is NULL) into a packed B row at columns [pos, pos + n): the
 * row's columns lie in NNC_GEMM_NR-wide pieces, each next piece `panel` floats on. */
static inline void packed_put(float *dst, int64_t panel, int64_t pos, const float *src, int64_t n)
{
    while (n > 0) {
        int64_t q = (int64_t)((uint64_t)pos % NNC_GEMM_NR),
                c = NNC_GEMM_NR - q < n ? NNC_GEMM_NR - q : n;
        float *d = dst + (int64_t)((uint64_t)pos / NNC_GEMM_NR) * panel + q;
        if (c == NNC_GEMM_NR) { /* fixed size: inlined vector moves */
            if (src) memcpy(d, src, NNC_GEMM_NR * sizeof(float));
            else memset(d, 0, NNC_GEMM_NR * sizeof(float));
        } else if (src) {
            memcpy(d, src, (size_t)c * sizeof(float));
        } else {
            memset(d, 0, (size_t)c * sizeof(float));
        }
        pos += c;
        n -= c;
        if (src) src += c;
    }
}

/* The same values as im2col_row for stride 1 along W, written straight into the packed B row
 * (dst, panel: nnc_sgemm_packed_b_row_at) instead of through a row buffer: each output row's
 * run of pixels is a shifted contiguous slice of one input row, copied in NR-wide pieces.
 * The row's padding columns [p1 - p0, npad) are zeroed too. */
static void im2col_row_packed(const conv_job *j, const float *xc, int64_t ky, int64_t kx,
                              int64_t p0, int64_t p1, int64_t npad, float *dst, int64_t panel)
{
    const conv_state *s = j->s;
    int64_t H = j->H, W = j->W, OW = j->OW;
    int64_t p = p0, oh = p0 / OW, ow = p0 % OW;
    while (p < p1) {
        int64_t seg = OW - ow < p1 - p ? OW - ow : p1 - p, pos = p - p0;
        int64_t ih = oh * s->sh - j->pt + ky * s->dh;
        if (ih < 0 || ih >= H) {
            packed_put(dst, panel, pos, NULL, seg);
        } else {
            const float *src = xc + ih * W;
            int64_t iw0 = ow - j->pl + kx * s->dw;
            int64_t lo = iw0 < 0 ? -iw0 : 0; /* first valid i */
            int64_t hi = W - iw0 < seg ? W - iw0 : seg; /* one past last valid */
            if (lo > seg) lo = seg;
            if (hi < lo) hi = lo;
            if (lo) packed_put(dst, panel, pos, NULL, lo);
            if (hi > lo) packed_put(dst, panel, pos + lo, src + iw0 + lo, hi - lo);
            if (seg > hi) packed_put(dst, panel, pos + hi, NULL, seg - hi);
        }
        p += seg;
        ow = 0;
        oh++;
    }
    if (npad > p1 - p0) packed_put(dst, panel, p1 - p0, NULL, npad - (p1 - p0));
}

static void im2col_tile(const conv_job *j, const float *xg, float *col, int64_t p0, int64_t p1)
{
    const conv_state *s = j->s;
    int64_t tn = p1 - p0;
    for (int64_t c = 0; c < s->Cg; c++)
        for (int64_t ky = 0; ky < s->kh; ky++)
            for (int64_t kx = 0; kx < s->kw; kx++)
                im2col_row(j, xg + c * j->H * j->W, ky, kx, p0, p1,
                           col + ((c * s->kh + ky) * s->kw + kx) * tn);
}

static void epilogue(const conv_job *j, float *y, const float *res, int64_t m0, int64_t m1,
                     int64_t len, int64_t ld)
{
    for (int64_t m = m0; m < m1; m++) {
        float *row = y + (m - m0) * ld;
        const float b = j->bias ? j->bias[m] : 0.f;
        if (res) {
            const float *r = res + (m - m0) * ld;
            for (int64_t i = 0; i < len; i++) row[i] += b + r[i];
        } else if (b != 0.f) {
            for (int64_t i = 0; i < len; i++) row[i] += b;
        }
        nnc_apply_act(row, len, j->act);
    }
}

static void conv_tasks(void *arg, int64_t b, int64_t e, int tid)
{
    conv_job *j = arg;
    const conv_state *s = j->s;
    int64_t OHW = j->OH * j->OW;
    for (int64_t t = b; t < e; t++) {
        int64_t mb = t % j->nmb, rest = t / j->nmb;
        int64_t tile = rest % j->ntiles, g = rest / j->ntiles;
        int64_t p0 = tile * j->tn, p1 = p0 + j->tn < OHW ? p0 + j->tn : OHW;
        int64_t m0 = mb * j->mblk, m1 = m0 + j->mblk < j->Mg ? m0 + j->mblk : j->Mg;
        if (m0 >= m1) continue;
        const float *xg = j->x + g * s->Cg * j->H * j->W;
        const float *col;
        int64_t ldb;
        if (j->direct) {
            col = xg + p0;
            ldb = OHW;
        } else {
            float *buf = nnc_scratch(j->xc, tid, (size_t)(j->K * (p1 - p0)) * sizeof(float));
            if (!buf) {
                j->fail = 1;
                return;
            }
            im2col_tile(j, xg, buf, p0, p1);
            col = buf;
            ldb = p1 - p0;
        }
        int64_t mg0 = g * j->Mg + m0;
        float *y = j->y + mg0 * OHW + p0;
        nnc_sgemm(0, 0, m1 - m0, p1 - p0, j->K, 1.f, j->w + mg0 * j->K, j->K, col, ldb, 0.f, y,
                  OHW);
        epilogue(j, y, j->res ? j->res + mg0 * OHW + p0 : NULL, mg0, mg0 + (m1 - m0), p1 - p0, OHW);
    }
}

/* Output channels in row blocks (a multiple of NNC_GEMM_MR rows each) when `tasks` pixel
 * tasks are too few for the threads (late layers, few pixels); one block otherwise. */
static void split_channels(conv_job *j, int64_t tasks, int T)
{
    nnc_gemm_row_blocks(j->Mg, tasks, T, &j->mblk, &j->nmb);
}

/* The GEMM epilogue of output channels from mg0 on, columns from p0 on: bias, residual and the
 * activations the epilogue applies; *after says the caller applies the activation itself. */
static nnc_gemm_epi product_epilogue(const conv_job *j, int64_t mg0, int64_t p0, int *after)
{
    int64_t OHW = j->OH * j->OW;
    *after =
        j->act->kind == ACT_HARDSWISH || j->act->kind == ACT_SILU; /* not in the GEMM's epilogue */
    return (nnc_gemm_epi){j->bias + mg0, j->res ? j->res + mg0 * OHW + p0 : NULL, OHW,
                          *after ? NULL : j->act, NULL};
}

/* Rows [k0, k1) of the packed columns of pixels [p0, p1) of group plane xg into pb (row: a
 * row buffer of the caller's for the taps that go through im2col_row first). */
static void pack_columns(const conv_job *j, const float *xg, int64_t p0, int64_t p1, int64_t k0,
                         int64_t k1, float *pb, float *row)
{
    const conv_state *s = j->s;
    int64_t OHW = j->OH * j->OW, K = j->K, tn = p1 - p0, taps = s->kh * s->kw;
    int64_t npad = (tn + NNC_GEMM_NR - 1) / NNC_GEMM_NR * NNC_GEMM_NR, panel;
    int piecewise = s->sw == 1 && j->OW >= NNC_GEMM_NR; /* narrower rows: pieces too short to pay */
    for (int64_t kk = k0; kk < k1; kk++) {
        if (j->direct) {
            nnc_sgemm_pack_b_row(K, kk, tn, xg + kk * OHW + p0, pb);
            continue;
        }
        int64_t c = kk / taps, ky = kk % taps / s->kw, kx = kk % s->kw;
        const float *xc = xg + c * j->H * j->W;
        if (piecewise) {
            float *dst = nnc_sgemm_packed_b_row_at(K, kk, tn, pb, &panel);
            im2col_row_packed(j, xc, ky, kx, p0, p1, npad, dst, panel);
        } else {
            im2col_row(j, xc, ky, kx, p0, p1, row);
            nnc_sgemm_pack_b_row(K, kk, tn, row, pb);
        }
    }
}

/* Output channels [m0, m1) of group g over pixels [p0, p1) from the packed columns pb, with the
 * epilogue; or, for one pixel of a 1x1 convolution, from the input column itself. */
static void columns_product(const conv_job *j, int64_t g, int64_t p0, int64_t p1, int64_t m0,
                            int64_t m1, const float *pb)
{
    const conv_state *s = j->s;
    int64_t OHW = j->OH * j->OW, mg0 = g * j->Mg + m0;
    int after;
    nnc_gemm_epi ep = product_epilogue(j, mg0, p0, &after);
    float *y = j->y + mg0 * OHW + p0;
    const float *pa = s->pw + g * s->pw_group + m0 * j->K;
    if (!pb)
        nnc_sgemv_packed(m1 - m0, j->K, pa, j->x + g * s->Cg * j->H * j->W + p0, y, OHW, &ep, 0);
    else nnc_sgemm_packed(m1 - m0, p1 - p0, j->K, pa, pb, y, OHW, &ep);
    for (int64_t m = 0; after && m < m1 - m0; m++) nnc_apply_act(y + m * OHW, p1 - p0, j->act);
}

/* One pixel tile's columns packed, then one row block of the product; for each task. */
static void conv_tasks_packed(void *arg, int64_t b, int64_t e, int tid)
{
    conv_job *j = arg;
    const conv_state *s = j->s;
    int64_t OHW = j->OH * j->OW, K = j->K;
    for (int64_t t = b; t < e; t++) {
        int64_t mb = t % j->nmb, rest = t / j->nmb;
        int64_t tile = rest % j->ntiles, g = rest / j->ntiles;
        int64_t p0 = tile * j->tn, p1 = p0 + j->tn < OHW ? p0 + j->tn : OHW;
        int64_t m0 = mb * j->mblk, m1 = m0 + j->mblk < j->Mg ? m0 + j->mblk : j->Mg;
        if (m0 >= m1) continue;
        if (j->direct && OHW == 1) { /* one pixel (squeeze-excitation): the input is the column */
            columns_product(j, g, p0, p1, m0, m1, NULL);
            continue;
        }
        int64_t pbn = nnc_sgemm_packed_b_floats(K, j->tn);
        float *pb = nnc_scratch(j->xc, tid, (size_t)(pbn + j->tn) * sizeof(float));
        if (!pb) {
            j->fail = 1;
            return;
        }
        pack_columns(j, j->x + g * s->Cg * j->H * j->W, p0, p1, 0, K, pb, pb + pbn);
        columns_product(j, g, p0, p1, m0, m1, pb);
    }
}

/* Few pixel tiles, output channels split into row blocks: each tile's columns are packed once,
 * the threads sharing the rows of it (shared_pack), then the row blocks multiply it
 * (shared_product), instead of every row block packing the same columns again. */
typedef struct {
    conv_job *j;
    int64_t g, p0, p1;
    float *pb;
} shared_job;

static void shared_pack(void *arg, int64_t b, int64_t e, int tid)
{
    shared_job *sj = arg;
    conv_job *j = sj->j;
    int64_t pbn = nnc_sgemm_packed_b_floats(j->K, j->tn);
    /* the row buffer of each thread lies past the packed columns in its scratch (thread 0's
     * scratch holds the shared columns themselves, at its start) */
    float *own = nnc_scratch(j->xc, tid, (size_t)(pbn + j->tn) * sizeof(float));
    if (!own) {
        j->fail = 1;
        return;
    }
    pack_columns(j, j->x + sj->g * j->s->Cg * j->H * j->W, sj->p0, sj->p1, b, e, sj->pb, own + pbn);
}

static void shared_product(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    shared_job *sj = arg;
    conv_job *j = sj->j;
    for (int64_t mb = b; mb < e; mb++) {
        int64_t m0 = mb * j->mblk, m1 = m0 + j->mblk < j->Mg ? m0 + j->mblk : j->Mg;
        if (m0 < m1) columns_product(j, sj->g, sj->p0, sj->p1, m0, m1, sj->pb);
    }
}

static void conv_shared_columns(conv_job *j)
{
    int64_t OHW = j->OH * j->OW, pbn = nnc_sgemm_packed_b_floats(j->K, j->tn);
    float *pb = nnc_scratch(j->xc, 0, (size_t)(pbn + j->tn) * sizeof(float));
    if (!pb) {
        j->fail = 1;
        return;
    }
    for (int64_t g = 0; g < j->s->group; g++)
        for (int64_t tile = 0; tile < j->ntiles; tile++) {
            int64_t p0 = tile * j->tn, p1 = p0 + j->tn < OHW ? p0 + j->tn : OHW;
            shared_job sj = {j, g, p0, p1, pb};
            nnc_parallel_for(j->K, 8, shared_pack, &sj);
            if (j->fail) return;
            nnc_parallel_for(j->nmb, 1, shared_product, &sj);
        }
}

/* ---- stride-1 convolutions read in place (AVX-512) ----------------------------------- *
 * Instead of im2col columns, the input of a group is copied once into zero-padded planes
 * (Cg x PH x PWp: every tap of every output pixel lies inside) and the GEMM reads each column
 * row (channel, tap) straight from them: row kk of B for output row oh is the padded plane's
 * row oh + ky*dh from column kx*dw on, so the pixels of one output row are contiguous there.
 * The output is cut into slots of 16 consecutive positions of the padded grid (OH x PWp, the
 * columns past OW padding): a slot may take the end of one output row and the start of the
 * next, its lanes on padding masked. The same products, in the same order, as the packed
 * columns give: the same bits, without writing K x pixels of columns every run. */
typedef struct {
    conv_job *j;
    const float *xg; /* the group's input */
    float *xp; /* its padded planes */
    const float **brow;
    int64_t PH, PWp, g, nslots, per, ngroups;
} rows_job;

enum { ROWS_MAX_SLOTS = 64 };

static int64_t max_tile(int64_t K, int64_t OHW);

static void rows_geometry(const conv_state *s, int64_t OH, int64_t OW, int64_t *PH, int64_t *PWp)
{
    *PH = OH + (s->kh - 1) * s->dh;
    *PWp = OW + (s->kw - 1) * s->dw;
}

/* 1x1 stride-1 unpadded convolutions read the input itself (it is its own padded planes),
 * except over fewer than 24 input channels, where packing the few column rows cost less than
 * reading them in place (16 -> 96 channels at 112x112: 0.36 against 0.42 ms); one pixel stays
 * a matrix-vector product. A padded convolution computes every position of the padded grid,
 * the pad columns included: on small planes those are too many, and packed columns win
 * (ResNet-18's 3x3 convolutions, 1 thread: at 7x7, 49 of 81 positions, 4.6 ms in place against
 * 2.9 packed; at 14x14, 196 of 256, 2.4 against 2.1; at 28x28, 784 of 900, the same). */
#define ROWS_MIN_USED 0.85 /* the least share of the padded grid that is output */

static int rows_path(const conv_state *s, int64_t OH, int64_t OW, int direct)
{
    int64_t PH, PWp;
    rows_geometry(s, OH, OW, &PH, &PWp);
    if (direct && (OH * OW == 1 || s->Cg < 24)) return 0;
    if (!direct && (double)(OH * OW) < ROWS_MIN_USED * (double)(PH * PWp)) return 0;
    return s->pw && s->sh == 1 && s->sw == 1 && nnc_isa_level() == 2;
}

static size_t rows_scratch(const conv_state *s, int64_t OH, int64_t OW, int direct)
{
    int64_t PH, PWp;
    rows_geometry(s, OH, OW, &PH, &PWp);
    size_t planes = direct ? 0 : (size_t)(s->Cg * PH * PWp) * sizeof(float);
    return planes + (size_t)(s->Cg * s->kh * s->kw) * sizeof(float *) + 64;
}

static void rows_pad(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    rows_job *r = arg;
    const conv_job *j = r->j;
    for (int64_t c = b; c < e; c++) {
        const float *xc = r->xg + c * j->H * j->W;
        float *pc = r->xp + c * r->PH * r->PWp;
        for (int64_t row = 0; row < r->PH; row++) {
            float *d = pc + row * r->PWp;
            int64_t ih = row - j->pt;
            if (ih < 0 || ih >= j->H) {
                memset(d, 0, (size_t)r->PWp * sizeof(float));
                continue;
            }
            memset(d, 0, (size_t)j->pl * sizeof(float));
            memcpy(d + j->pl, xc + ih * j->W, (size_t)j->W * sizeof(float));
            memset(d + j->pl + j->W, 0, (size_t)(r->PWp - j->pl - j->W) * sizeof(float));
        }
    }
}

static void rows_tasks(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    rows_job *r = arg;
    conv_job *j = r->j;
    const conv_state *s = j->s;
    int64_t OHW = j->OH * j->OW, end = (j->OH - 1) * r->PWp + j->OW; /* past the last pixel */
    for (int64_t t = b; t < e; t++) {
        int64_t mb = t % j->nmb, sg = t / j->nmb;
        int64_t m0 = mb * j->mblk, m1 = m0 + j->mblk < j->Mg ? m0 + j->mblk : j->Mg;
        int64_t s0 = sg * r->per, s1 = s0 + r->per < r->nslots ? s0 + r->per : r->nslots;
        if (m0 >= m1 || s0 >= s1) continue;
        nnc_slot sl[ROWS_MAX_SLOTS];
        int64_t ns = 0, p1 = 0;
        for (int64_t q = s0; q < s1; q++) { /* 16 positions of the padded grid: its pixels' lanes */
            uint32_t mask = 0;
            int64_t first = -1;
            for (int l = 0; l < 16; l++) {
                int64_t pos = q * 16 + l;
                if (pos < end && pos % r->PWp < j->OW) {
                    mask |= 1u << l;
                    if (first < 0) first = pos / r->PWp * j->OW + pos % r->PWp;
                }
            }
            if (!mask) continue; /* all padding (kernels wider than 16) */
            sl[ns++] = (nnc_slot){q * 16, first, mask};
            p1 = first + __builtin_popcount(mask);
        }
        if (!ns) continue;
        int64_t mg0 = r->g * j->Mg + m0;
        int after;
        nnc_gemm_epi ep = product_epilogue(j, mg0, 0, &after); /* the slots give C's columns */
        float *y = j->y + mg0 * OHW;
        nnc_sgemm_rows(m1 - m0, j->K, s->pw + r->g * s->pw_group + m0 * j->K, r->brow, sl, ns, y,
                       OHW, &ep);
        int64_t p0 = sl[0].coff;
        for (int64_t m = 0; after && m < m1 - m0; m++)
            nnc_apply_act(y + m * OHW + p0, p1 - p0, j->act);
    }
}

/* Tasks: groups of slots (about a pixel tile's worth, at most ROWS_MAX_SLOTS), times row
 * blocks of the output channels where there are too few groups for the threads. */
static int conv_rows(conv_job *j, int T)
{
    const conv_state *s = j->s;
    rows_job r = {j, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0};
    rows_geometry(s, j->OH, j->OW, &r.PH, &r.PWp);
    char *mem = nnc_scratch(j->xc, 0, rows_scratch(s, j->OH, j->OW, j->direct));
    if (!mem) return NNC_ERR;
    r.xp = (float *)mem;
    r.brow = (const float **)(((uintptr_t)(mem + (j->direct ? 0
                                                            : (size_t)(s->Cg * r.PH * r.PWp) *
                                                                  sizeof(float))) +
                               63) &
                              ~(uintptr_t)63);
    r.nslots = ((j->OH - 1) * r.PWp + j->OW + 15) / 16;
    int64_t per = max_tile(j->K, j->OH * j->OW) / 16;
    if (per < 2) per = 2;
    if (per > ROWS_MAX_SLOTS) per = ROWS_MAX_SLOTS;
    r.ngroups = (r.nslots + per - 1) / per;
    r.per = (r.nslots + r.ngroups - 1) / r.ngroups; /* groups of about one size */
    split_channels(j, r.ngroups, T);
    for (int64_t g = 0; g < s->group; g++) {
        r.g = g;
        r.xg = j->x + g * s->Cg * j->H * j->W;
        const float *planes = r.xg;
        if (!j->direct) {
            nnc_parallel_for(s->Cg, 4, rows_pad, &r);
            planes = r.xp;
        }
        int64_t kk = 0;
        for (int64_t c = 0; c < s->Cg; c++)
            for (int64_t ky = 0; ky < s->kh; ky++)
                for (int64_t kx = 0; kx < s->kw; kx++)
                    r.brow[kk++] = planes + c * r.PH * r.PWp + ky * s->dh * r.PWp + kx * s->dw;
        nnc_parallel_for(r.ngroups * j->nmb, 1, rows_tasks, &r);
    }
    return NNC_OK;
}

/* ---- depthwise convolution (group == C == M) ------------------------------------------ */

/* Each channel is copied into a zero-bordered plane (PH x PW, the same for every channel) and
 * every output row is summed straight from it: for each output pixel the bias, then the taps
 * in row-major kernel order, then the residual and the activation, with no per-pixel bound
 * checks. The plane is wide enough for whole 8-pixel vectors (stride 1 or 2) past the last
 * output pixel, so the vector kernel never reads out of it. The sum of one pixel depends only
 * on its channel's data, not on the thread count. */
static void dw_plane_size(const conv_state *s, int64_t H, int64_t W, int64_t OH, int64_t OW,
                          int64_t pt, int64_t pl, int64_t *PH, int64_t *PW)
{
    int64_t owv = (OW + 15) / 16 * 16;
    int64_t pw = s->sw * owv + (s->kw - 1) * s->dw + 32;
    int64_t ph = (OH - 1) * s->sh + (s->kh - 1) * s->dh + 1;
    if (pw < W + pl) pw = W + pl;
    if (ph < H + pt) ph = H + pt;
    *PH = ph;
    *PW = pw;
}

/* Portable row: the taps of each kernel row added in order over the whole output row. */
MULTIVERSION
static void dw_row_c(float *yr, const float *pr, int64_t PW, const float *wc, const conv_state *s,
                     int64_t OW, float bias)
{
    for (int64_t ow = 0; ow < OW; ow++) yr[ow] = bias;
    for (int64_t ky = 0; ky < s->kh; ky++)
        for (int64_t kx = 0; kx < s->kw; kx++) {
            const float wv = wc[ky * s->kw + kx], *src = pr + ky * s->dh * PW + kx * s->dw;
            if (s->sw == 1)
                for (int64_t ow = 0; ow < OW; ow++) yr[ow] += wv * src[ow];
            else if (s->sw == 2)
                for (int64_t ow = 0; ow < OW; ow++) yr[ow] += wv * src[2 * ow];
            else
                for (int64_t ow = 0; ow < OW; ow++) yr[ow] += wv * src[ow * s->sw];
        }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_DW_AVX2 1

/* Pixels ow, ow + 1, ... ow + 7 of a stride-2 row: the even floats of p[0, 16). */
__attribute__((target("avx2,fma"))) static inline __m256 dw_load_s2(const float *p)
{
    __m256 e =
        _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* Where the plane's next vectors of `width` pixels start, row by row (the last of a row
 * partial): eight at a time, each with its source, destination and pixel count; past the
 * plane's last vector the last is repeated with no pixels to store. */
typedef struct {
    const float *prow;
    float *yrow;
    int64_t oh, ow, OH, OW, sw, row_step;
} dw_walk;

static inline void dw_next_vectors(dw_walk *w, int64_t width, const float **src, float **dst,
                                   int64_t *len)
{
    for (int q = 0; q < 8; q++) {
        if (w->oh >= w->OH) {
            src[q] = src[q - 1];
            dst[q] = dst[q - 1];
            len[q] = 0;
            continue;
        }
        src[q] = w->prow + w->ow * w->sw;
        dst[q] = w->yrow + w->ow;
        len[q] = w->OW - w->ow < width ? w->OW - w->ow : width;
        w->ow += width;
        if (w->ow >= w->OW) {
            w->ow = 0;
            w->oh++;
            w->prow += w->row_step;
            w->yrow += w->OW;
        }
    }
}

/* Stride 1 or 2, the whole output plane: its 8-pixel vectors (row by row, the last of a row
 * partial) taken 8 at a time, each with its own accumulator, so eight FMA chains are in flight
 * (one chain is bound by the FMA's latency: rows of 7 or 14 pixels ran at a tenth of the
 * peak). A partial vector is summed in full (the plane is wide enough) and stored in part.
 * Each pixel is still its bias, then its taps in row-major kernel order. */
__attribute__((target("avx2,fma"))) static void dw_plane_avx2(float *yc, const float *pad,
                                                              int64_t PW, const float *wc,
                                                              const conv_state *s, int64_t OH,
                                                              int64_t OW, float bias)
{
    const int64_t kh = s->kh, kw = s->kw, rs = s->dh * PW, cs = s->dw;
    const int s2 = s->sw == 2;
    const __m256 b = _mm256_set1_ps(bias);
    dw_walk walk = {pad, yc, 0, 0, OH, OW, s->sw, s->sh * PW};
    while (walk.oh < OH) {
        const float *src[8];
        float *dst[8];
        int64_t len[8];
        dw_next_vectors(&walk, 8, src, dst, len);
        __m256 a[8];
        for (int q = 0; q < 8; q++) a[q] = b;
        for (int64_t ky = 0; ky < kh; ky++)
            for (int64_t kx = 0; kx < kw; kx++) {
                const __m256 wv = _mm256_broadcast_ss(wc + ky * kw + kx);
                const int64_t off = ky * rs + kx * cs;
                if (s2)
                    for (int q = 0; q < 8; q++)
                        a[q] = _mm256_fmadd_ps(wv, dw_load_s2(src[q] + off), a[q]);
                else
                    for (int q = 0; q < 8; q++)
                        a[q] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src[q] + off), a[q]);
            }
        for (int q = 0; q < 8; q++) {
            if (len[q] == 8) {
                _mm256_storeu_ps(dst[q], a[q]);
            } else if (len[q] > 0) {
                _Alignas(32) float t[8];
                _mm256_store_ps(t, a[q]);
                memcpy(dst[q], t, (size_t)len[q] * sizeof(float));
            }
        }
    }
}
/* The same with 16-pixel vectors, for CPUs with AVX-512: the same FMA per pixel in the same
 * order, so the same bits as dw_plane_avx2. */
__attribute__((target("avx512f"))) static inline __m512
dw_load_s2_16(const float *p) /* the even floats of p[0, 32) */
{
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(_mm512_loadu_ps(p), even, _mm512_loadu_ps(p + 16));
}

__attribute__((target("avx512f"))) static void dw_plane_avx512(float *yc, const float *pad,
                                                               int64_t PW, const float *wc,
                                                               const conv_state *s, int64_t OH,
                                                               int64_t OW, float bias)
{
    const int64_t kh = s->kh, kw = s->kw, rs = s->dh * PW, cs = s->dw;
    const int s2 = s->sw == 2;
    const __m512 b = _mm512_set1_ps(bias);
    dw_walk walk = {pad, yc, 0, 0, OH, OW, s->sw, s->sh * PW};
    while (walk.oh < OH) {
        const float *src[8];
        float *dst[8];
        int64_t len[8];
        dw_next_vectors(&walk, 16, src, dst, len);
        __m512 a[8];
        for (int q = 0; q < 8; q++) a[q] = b;
        for (int64_t ky = 0; ky < kh; ky++)
            for (int64_t kx = 0; kx < kw; kx++) {
                const __m512 wv = _mm512_set1_ps(wc[ky * kw + kx]);
                const int64_t off = ky * rs + kx * cs;
                if (s2)
                    for (int q = 0; q < 8; q++)
                        a[q] = _mm512_fmadd_ps(wv, dw_load_s2_16(src[q] + off), a[q]);
                else
                    for (int q = 0; q < 8; q++)
                        a[q] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(src[q] + off), a[q]);
            }
        for (int q = 0; q < 8; q++)
            if (len[q] > 0) _mm512_mask_storeu_ps(dst[q], (__mmask16)((1u << len[q]) - 1), a[q]);
    }
}
#endif

/* Planes [b, e) of the batch (plane = image * C + channel). */
static void dw_tasks(void *arg, int64_t b, int64_t e, int tid)
{
    conv_job *j = arg;
    const conv_state *s = j->s;
    int64_t H = j->H, W = j->W, OH = j->OH, OW = j->OW, PH, PW, C = s->group;
    dw_plane_size(s, H, W, OH, OW, j->pt, j->pl, &PH, &PW);
    float *pad = nnc_scratch(j->xc, tid, (size_t)(PH * PW) * sizeof(float));
    if (!pad) {
        j->fail = 1;
        return;
    }
    memset(pad, 0, (size_t)(PH * PW) * sizeof(float)); /* the border stays zero for every plane */
    int level = s->sw == 1 || s->sw == 2 ? nnc_isa_level() : 0;
    if (level == 2 && (OW + 15) / 16 == (OW + 7) / 8)
        level = 1; /* rows of 8 or fewer: as many 8-wide vectors */
    for (int64_t p = b; p < e; p++) {
        int64_t c = p % C;
        const float *xc = j->x + p * H * W;
        for (int64_t h = 0; h < H; h++)
            memcpy(pad + (h + j->pt) * PW + j->pl, xc + h * W, (size_t)W * sizeof(float));
        const float *wc = j->w + c * s->kh * s->kw;
        float *yc = j->y + p * OH * OW;
        float bias = j->bias ? j->bias[c] : 0.f;
#ifdef HAVE_DW_AVX2
        if (level == 2) dw_plane_avx512(yc, pad, PW, wc, s, OH, OW, bias);
        else if (level == 1) dw_plane_avx2(yc, pad, PW, wc, s, OH, OW, bias);
#else
        level = 0;
#endif
        for (int64_t oh = 0; !level && oh < OH; oh++)
            dw_row_c(yc + oh * OW, pad + oh * s->sh * PW, PW, wc, s, OW, bias);
        if (j->res) { /* then the residual and the activation, over the whole plane */
            const float *r = j->res + p * OH * OW;
            for (int64_t i = 0; i < OH * OW; i++) yc[i] += r[i];
        }
        nnc_apply_act(yc, OH * OW, j->act);
    }
}

/* Most pixels one task takes: one KC-deep block of its packed columns about 256 KiB, so it
 * stays in L2 while every row block of the weights passes over it; 64 to 4096 pixels. */
static int64_t max_tile(int64_t K, int64_t OHW)
{
    int64_t kc = K < 256 ? (K > 0 ? K : 1) : 256;
    int64_t tn = (65536 / kc + 15) / 16 * 16;
    if (tn < 64) tn = 64;
    if (tn > 4096) tn = 4096;
    return tn > OHW ? OHW : tn;
}

typedef struct {
    const conv_state *s;
    int64_t H, W, OH, OW, pt, pl;
    const void *x, *w, *b;
    void *y;
} convt_job;

/* Output planes [b, e) (plane = batch * M + channel) of a convolution on float16, bfloat16 or
 * float64: each output summed over its window in float32 (float64 in double) and rounded once
 * to the element type. */
static void conv_typed_planes(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const convt_job *j = arg;
    const conv_state *s = j->s;
    int dt = s->dt;
    int64_t Mg = s->M / s->group, C = s->Cg * s->group, K = s->Cg * s->kh * s->kw;
    double row[NNC_CHUNK];
    for (int64_t p = b; p < e; p++) {
        int64_t bi = p / s->M, m = p % s->M, g = m / Mg;
        double bias = j->b ? nnc_get_d(j->b, dt, m) : 0;
        for (int64_t oh = 0; oh < j->OH; oh++)
            for (int64_t ow0 = 0; ow0 < j->OW; ow0 += NNC_CHUNK) {
                int64_t nw = j->OW - ow0 < NNC_CHUNK ? j->OW - ow0 : NNC_CHUNK;
                for (int64_t t = 0; t < nw; t++) {
                    int64_t ow = ow0 + t;
                    float accf = 0.f;
                    double accd = 0;
                    for (int64_t c = 0; c < s->Cg; c++)
                        for (int64_t kh = 0; kh < s->kh; kh++) {
                            int64_t ih = oh * s->sh - j->pt + kh * s->dh;
                            if (ih < 0 || ih >= j->H) continue;
                            for (int64_t kw = 0; kw < s->kw; kw++) {
                                int64_t iw = ow * s->sw - j->pl + kw * s->dw;
                                if (iw < 0 || iw >= j->W) continue;
                                int64_t xi = ((bi * C + g * s->Cg + c) * j->H + ih) * j->W + iw;
                                int64_t wi = m * K + (c * s->kh + kh) * s->kw + kw;
                                double xv = nnc_get_d(j->x, dt, xi), wv = nnc_get_d(j->w, dt, wi);
                                if (dt == DT_F64) accd += xv * wv;
                                else accf += (float)xv * (float)wv;
                            }
                        }
                    row[t] = (dt == DT_F64 ? accd : (double)accf) + bias;
                    if (dt != DT_F64) row[t] = (double)(float)row[t];
                }
                nnc_store_d(j->y, dt, (p * j->OH + oh) * j->OW + ow0, nw, row);
            }
    }
}

static size_t conv_scratch(const nnc_node *n, nnc_tensor *const *in, const nnc_tensor *out)
{
    const conv_state *s = n->state;
    int64_t H, W, OH, OW, pt, pl;
    if (s->dt != DT_F32) return 0;
    if (conv_geometry(s, in[0], &H, &W, &OH, &OW, &pt, &pl)) return 0;
    (void)out;
    int64_t Mg = s->M / s->group, K = s->Cg * s->kh * s->kw;
    if (s->Cg == 1 && Mg == 1) { /* depthwise: one padded channel */
        int64_t PH, PW;
        dw_plane_size(s, H, W, OH, OW, pt, pl, &PH, &PW);
        return (size_t)(PH * PW) * sizeof(float);
    }
    int direct = s->kh == 1 && s->kw == 1 && s->sh == 1 && s->sw == 1 && pt == 0 && pl == 0 &&
                 OH == H && OW == W;
    int64_t tn = max_tile(K, OH * OW);
    if (s->pw) {
        size_t packed = (size_t)(nnc_sgemm_packed_b_floats(K, tn) + tn) * sizeof(float);
        size_t rows = rows_path(s, OH, OW, direct) ? rows_scratch(s, OH, OW, direct) : 0;
        size_t most = rows > packed ? rows : packed;
        if (s->pu && nnc_wino_fits(s->Cg, s->M, OH, OW)) {
            nnc_wino_shape g = {s->Cg, s->M, H, W, OH, OW, pt, pl, 0.f};
            size_t wino = nnc_wino_scratch(&g);
            if (wino > most) most = wino;
        }
        return most;
    }
    return direct ? 0 : (size_t)(K * tn) * sizeof(float);
}

static int conv_owns(const nnc_node *n, int i)
{
    const conv_state *s = n->state;
    return s && (s->w || s->pw) && (i == 1 || i == 2);
}

static int conv_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    const conv_state *s = n->state;
    const nnc_tensor *x = in[0];
    conv_job j;
    memset(&j, 0, sizeof j);
    j.s = s;
    j.xc = xc;
    j.act = &n->act;
    conv_geometry(s, x, &j.H, &j.W, &j.OH, &j.OW, &j.pt, &j.pl);
    if (s->dt != DT_F32) {
        convt_job t = {
            s,        j.H,  j.W,     j.OH,        j.OW,
            j.pt,     j.pl, x->data, in[1]->data, n->nin > 2 && in[2] ? in[2]->data : NULL,
            out->data};
        nnc_parallel_for(x->dims[0] * s->M, 1, conv_typed_planes, &t);
        return NNC_OK;
    }
    int packed = s->pw != NULL, constant = s->w || s->pw;
    j.w = constant ? s->w : in[1]->data;
    j.bias = constant ? s->bias : (n->nin > 2 && in[2] ? in[2]->data : NULL);
    j.K = s->Cg * s->kh * s->kw;
    j.Mg = s->M / s->group;
    int64_t OHW = j.OH * j.OW, N = x->dims[0];
    int T = nnc_num_threads();
    j.direct = s->kh == 1 && s->kw == 1 && s->sh == 1 && s->sw == 1 && j.pt == 0 && j.pl == 0 &&
               j.OH == j.H && j.OW == j.W;
    int depthwise = s->Cg == 1 && j.Mg == 1;
    /* Pixel tiles (max_tile), enough tasks for all threads, and a tile count the threads
     * share evenly. The tiling changes no value: each element is summed the same way. */
    int64_t tn = j.direct && !packed ? OHW : max_tile(j.K, OHW);
    int64_t tasks = s->group * ((OHW + tn - 1) / tn);
    if (tasks < 2 * T && OHW >= 128 * T && !depthwise) {
        int64_t want = (2 * T + s->group - 1) / s->group;
        int64_t t2 = (OHW + want - 1) / want;
        t2 = (t2 + 15) / 16 * 16;
        if (t2 < tn) tn = t2 < 32 ? 32 : t2;
    }
    int64_t nt = (OHW + tn - 1) / tn;
    if (packed && s->group == 1 && T > 1 && nt > 1 && nt % T) nt = (nt + T - 1) / T * T;
    if (packed && nt > 1) { /* nt tiles of about one size (784 pixels: 4 x 208, not 3 x 256 + 16) */
        int64_t t2 = ((OHW + nt - 1) / nt + 15) / 16 * 16;
        if (t2 >= 32 && t2 < tn) tn = t2;
    }
    j.tn = tn;
    j.ntiles = (OHW + tn - 1) / tn;
    tasks = s->group * j.ntiles;
    split_channels(&j, tasks, T);
    if (depthwise) { /* every plane of the batch at once */
        j.x = x->data;
        j.y = out->data;
        j.res = n->residual >= 0 ? in[n->residual]->data : NULL;
        nnc_parallel_for(N * s->group, 1, dw_tasks, &j);
        if (j.fail) return nnc_node_fail(e, n, "out of memory for convolution scratch");
        return NNC_OK;
    }
    int wino = s->pu && nnc_wino_fits(s->Cg, s->M, j.OH, j.OW);
    nnc_wino_shape g = {s->Cg, s->M, j.H, j.W, j.OH, j.OW, j.pt, j.pl, s->wino_xmax};
    for (int64_t b = 0; b < N; b++) {
        j.x = (const float *)x->data + b * x->dims[1] * j.H * j.W;
        j.y = (float *)out->data + b * s->M * OHW;
        j.res = n->residual >= 0 ? (const float *)in[n->residual]->data + b * s->M * OHW : NULL;
        int rc = wino ? nnc_wino_run(&g, s->pu, j.x, j.bias, j.res, j.act, j.y, xc, T) : 1;
        if (rc == NNC_ERR) return nnc_node_fail(e, n, "out of memory for convolution scratch");
        if (rc == NNC_OK)
            continue; /* else the direct convolution: not Winograd, or x not finite or too large */
        if (rows_path(s, j.OH, j.OW, j.direct)) {
            if (conv_rows(&j, T))
                return nnc_node_fail(e, n, "out of memory for convolution scratch");
        } else if (packed && j.nmb > 1 && !(j.direct && OHW == 1)) conv_shared_columns(&j);
        else
            nnc_parallel_for(s->group * j.ntiles * j.nmb, 1,
                             packed ? conv_tasks_packed : conv_tasks, &j);
        if (j.fail) return nnc_node_fail(e, n, "out of memory for convolution scratch");
    }
    return NNC_OK;
}

const nnc_op nnc_op_conv = {
    "Conv",       2,        3, 1, 1, conv_create, conv_infer, conv_run, conv_destroy, 0,
    conv_scratch, conv_owns};
