/* DeformConv (opset 19), 2-D, float32: each kernel tap samples the input at its regular
 * position plus a learned offset, bilinearly (zero outside the image, as GridSample with
 * align_corners = 1 and zeros padding, which the ONNX reference uses), scaled by the optional
 * mask. Per batch and group the samples form a column matrix [C/group * kH * kW][oH * oW]
 * (a deformable im2col) and one sgemm with the group's weights gives the output. */
#include "nnc.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    int64_t group, offset_group;
    int64_t k[2], s[2], d[2], p[4];
    int has_kernel;
} dc_state;

static void free_state(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int ints2(const nnc_node *n, const char *name, int want, int64_t *out, int64_t def,
                 nnc_err *e)
{
    int64_t v[4];
    int c;
    TRY(nnc_attr_ints(n, name, v, 4, &c, e));
    if (c >= 0 && c != want)
        return nnc_node_fail(e, n, "attribute '%s' has %d values, %d expected", name, c, want);
    for (int i = 0; i < want; i++) out[i] = c >= 0 ? v[i] : def;
    return NNC_OK;
}

static int dc_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    for (int i = 0; i < n->nin; i++) TRY(nnc_check_dtype(n, i, f32, e));
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0 && x->ndim != 4)
        return nnc_node_unsup(
            e, n, "a %d-D input is not supported (2-D deformable convolution, rank 4, is)",
            x->ndim - 2);
    dc_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(nnc_attr_int(n, "group", 1, &s->group, e));
    TRY(nnc_attr_int(n, "offset_group", 1, &s->offset_group, e));
    if (s->group < 1 || s->offset_group < 1)
        return nnc_node_fail(e, n, "attributes 'group' and 'offset_group' must be positive");
    s->has_kernel = nnc_attr_find(n, "kernel_shape") != NULL;
    TRY(ints2(n, "kernel_shape", 2, s->k, 0, e));
    TRY(ints2(n, "strides", 2, s->s, 1, e));
    TRY(ints2(n, "dilations", 2, s->d, 1, e));
    TRY(ints2(n, "pads", 4, s->p, 0, e));
    for (int i = 0; i < 2; i++)
        if (s->s[i] < 1 || s->d[i] < 1 || (s->has_kernel && s->k[i] < 1))
            return nnc_node_fail(e, n, "kernel_shape, strides and dilations must be positive");
    for (int i = 0; i < 4; i++)
        if (s->p[i] < 0) return nnc_node_fail(e, n, "attribute 'pads' must not be negative");
    return NNC_OK;
}

typedef struct {
    int64_t N, C, H, W, M, kh, kw, oh, ow;
} dc_geom;

static int dc_shapes(const nnc_node *n, nnc_tensor *const *in, dc_geom *g, nnc_err *e)
{
    const dc_state *s = n->state;
    const nnc_tensor *x = in[0], *w = in[1], *off = in[2];
    const nnc_tensor *b = n->nin > 3 ? in[3] : NULL, *mask = n->nin > 4 ? in[4] : NULL;
    for (int i = 0; i < n->nin; i++)
        if (in[i] && in[i]->dtype != DT_F32)
            return nnc_node_fail(e, n, "input %d must be float32", i);
    if (x->ndim != 4 || w->ndim != 4 || off->ndim != 4)
        return nnc_node_fail(e, n, "X, W and offset must have rank 4 (2-D deformable convolution)");
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->H = x->dims[2];
    g->W = x->dims[3];
    g->M = w->dims[0];
    g->kh = s->has_kernel ? s->k[0] : w->dims[2];
    g->kw = s->has_kernel ? s->k[1] : w->dims[3];
    if (w->dims[2] != g->kh || w->dims[3] != g->kw)
        return nnc_node_fail(
            e, n, "W's kernel is %lldx%lld, attribute 'kernel_shape' says %lldx%lld",
            (long long)w->dims[2], (long long)w->dims[3], (long long)g->kh, (long long)g->kw);
    if (g->C != w->dims[1] * s->group || g->M % s->group)
        return nnc_node_fail(
            e, n,
            "X has %lld channels and W is %lldx%lld: group = %lld must divide both "
            "(W's dim 1 = channels / group)",
            (long long)g->C, (long long)g->M, (long long)w->dims[1], (long long)s->group);
    if (g->C % s->offset_group)
        return nnc_node_fail(e, n, "offset_group = %lld does not divide the %lld channels",
                             (long long)s->offset_group, (long long)g->C);
    int64_t eh = (g->kh - 1) * s->d[0] + 1, ew = (g->kw - 1) * s->d[1] + 1;
    int64_t ph = g->H + s->p[0] + s->p[2] - eh, pw = g->W + s->p[1] + s->p[3] - ew;
    if (ph < 0 || pw < 0)
        return nnc_node_fail(e, n, "the dilated kernel is larger than the padded input");
    g->oh = ph / s->s[0] + 1;
    g->ow = pw / s->s[1] + 1;
    int64_t taps = s->offset_group * g->kh * g->kw;
    if (off->dims[0] != g->N || off->dims[1] != 2 * taps || off->dims[2] != g->oh ||
        off->dims[3] != g->ow)
        return nnc_node_fail(
            e, n,
            "offset must be [%lld, %lld, %lld, %lld] (batch, offset_group*kH*kW*2, output "
            "height, width)",
            (long long)g->N, (long long)(2 * taps), (long long)g->oh, (long long)g->ow);
    if (mask && (mask->ndim != 4 || mask->dims[0] != g->N || mask->dims[1] != taps ||
                 mask->dims[2] != g->oh || mask->dims[3] != g->ow))
        return nnc_node_fail(e, n, "mask must be [%lld, %lld, %lld, %lld]", (long long)g->N,
                             (long long)taps, (long long)g->oh, (long long)g->ow);
    if (b && nnc_numel(b) != g->M)
        return nnc_node_fail(e, n, "B must have %lld values", (long long)g->M);
    return NNC_OK;
}

static int dc_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    dc_geom g;
    TRY(dc_shapes(n, in, &g, e));
    out->dtype = DT_F32;
    out->ndim = 4;
    out->dims[0] = g.N;
    out->dims[1] = g.M;
    out->dims[2] = g.oh;
    out->dims[3] = g.ow;
    return NNC_OK;
}

/* Bilinear sample of plane x (H x W) at (y, xx), zero outside. */
static float sample(const float *x, int64_t H, int64_t W, double y, double xx)
{
    if (!(y > -1.0 && y < (double)H && xx > -1.0 && xx < (double)W)) return 0.f;
    double y0f = floor(y), x0f = floor(xx), dy = y - y0f, dx = xx - x0f;
    int64_t y0 = (int64_t)y0f, x0 = (int64_t)x0f;
    double v = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int64_t yy = y0 + a, xc = x0 + b;
            if (yy < 0 || yy >= H || xc < 0 || xc >= W) continue;
            v += (a ? dy : 1 - dy) * (b ? dx : 1 - dx) * x[yy * W + xc];
        }
    return (float)v;
}

static int dc_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    const dc_state *s = n->state;
    dc_geom g;
    TRY(dc_shapes(n, in, &g, e));
    const float *x = in[0]->data, *w = in[1]->data, *off = in[2]->data;
    const float *b = n->nin > 3 && in[3] ? in[3]->data : NULL,
                *mask = n->nin > 4 && in[4] ? in[4]->data : NULL;
    float *y = out->data;
    int64_t Cg = g.C / s->group, Mg = g.M / s->group, Cog = g.C / s->offset_group, P = g.oh * g.ow;
    int64_t K = Cg * g.kh * g.kw, taps = s->offset_group * g.kh * g.kw;
    float *col = nnc_alloc((size_t)(K * P) * sizeof(float));
    if (!col)
        return nnc_node_fail(e, n, "out of memory (%lld x %lld sample matrix)", (long long)K,
                             (long long)P);
    for (int64_t bn = 0; bn < g.N; bn++) {
        const float *ob = off + bn * 2 * taps * P, *mb = mask ? mask + bn * taps * P : NULL;
        for (int64_t gr = 0; gr < s->group; gr++) {
            for (int64_t c = 0; c < Cg; c++) {
                int64_t ic = gr * Cg + c, og = ic / Cog;
                const float *xp = x + (bn * g.C + ic) * g.H * g.W;
                for (int64_t i = 0; i < g.kh; i++)
                    for (int64_t j = 0; j < g.kw; j++) {
                        int64_t tap = (og * g.kh + i) * g.kw + j;
                        const float *oy = ob + (2 * tap) * P, *ox = ob + (2 * tap + 1) * P;
                        const float *mk = mb ? mb + tap * P : NULL;
                        float *cr = col + ((c * g.kh + i) * g.kw + j) * P;
                        for (int64_t p = 0; p < P; p++) {
                            int64_t oi = p / g.ow, oj = p % g.ow;
                            double py = (double)(oi * s->s[0] - s->p[0] + i * s->d[0]) + oy[p];
                            double px = (double)(oj * s->s[1] - s->p[1] + j * s->d[1]) + ox[p];
                            float v = sample(xp, g.H, g.W, py, px);
                            cr[p] = mk ? v * mk[p] : v;
                        }
                    }
            }
            float *yg = y + (bn * g.M + gr * Mg) * P;
            for (int64_t m = 0; m < Mg; m++)
                for (int64_t p = 0; p < P; p++) yg[m * P + p] = b ? b[gr * Mg + m] : 0.f;
            nnc_sgemm(0, 0, Mg, P, K, 1.f, w + gr * Mg * K, K, col, P, 1.f, yg, P);
        }
    }
    nnc_free(col);
    return NNC_OK;
}

const nnc_op nnc_op_deformconv = {"DeformConv", 3,        5,      1,          1,
                                  dc_create,    dc_infer, dc_run, free_state, 0};
