/* GridSample (float32): 4-D input with nearest, (bi)linear and (bi)cubic; 5-D (volumetric)
 * with nearest and linear; padding zeros, border or reflection, align_corners; onnxruntime's
 * formulas. Parallel over (image, channel). */
#include "nnc.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>

enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum { GP_ZEROS, GP_BORDER, GP_REFLECTION };

typedef struct {
    int mode, pad, align;
} gs_state;

static void gs_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int gs_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    TRY(nnc_check_dtype(n, 0, f32, e));
    TRY(nnc_check_dtype(n, 1, f32, e));
    gs_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    char buf[32];
    TRY(nnc_attr_str(n, "mode", n->opset >= 20 ? "linear" : "bilinear", buf, sizeof buf, e));
    if (!strcmp(buf, "nearest")) s->mode = GS_NEAREST;
    else if (!strcmp(buf, "linear") || !strcmp(buf, "bilinear")) s->mode = GS_LINEAR;
    else if (!strcmp(buf, "cubic") || !strcmp(buf, "bicubic")) s->mode = GS_CUBIC;
    else return nnc_node_fail(e, n, "attribute 'mode' = '%s' is not valid", buf);
    TRY(nnc_attr_str(n, "padding_mode", "zeros", buf, sizeof buf, e));
    if (!strcmp(buf, "zeros")) s->pad = GP_ZEROS;
    else if (!strcmp(buf, "border")) s->pad = GP_BORDER;
    else if (!strcmp(buf, "reflection")) s->pad = GP_REFLECTION;
    else return nnc_node_fail(e, n, "attribute 'padding_mode' = '%s' is not valid", buf);
    int64_t a;
    TRY(nnc_attr_int(n, "align_corners", 0, &a, e));
    s->align = a != 0;
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0 && x->ndim != 4 && x->ndim != 5)
        return nnc_node_unsup(e, n, "only 4-D and 5-D inputs are supported");
    if (x && x->ndim == 5 && s->mode == GS_CUBIC)
        return nnc_node_fail(e, n, "cubic mode needs a 4-D input");
    if (!x || x->ndim < 0)
        return nnc_node_unsup(e, n, "the input's rank must be known when the model is loaded");
    return NNC_OK;
}

static int gs_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const nnc_tensor *x = in[0], *g = in[1];
    if (x->dtype != DT_F32 || g->dtype != DT_F32)
        return nnc_node_fail(e, n, "inputs must be float32");
    int r = x->ndim;
    if ((r != 4 && r != 5) || g->ndim != r || g->dims[0] != x->dims[0] || g->dims[r - 1] != r - 2)
        return nnc_node_fail(
            e, n,
            "X must be [N, C, H, W] with grid [N, H_out, W_out, 2] (or 3-D: [N, C, D, H, W], [N, D_out, H_out, W_out, 3])");
    out->dtype = DT_F32;
    out->ndim = r;
    out->dims[0] = x->dims[0];
    out->dims[1] = x->dims[1];
    for (int d = 2; d < r; d++) out->dims[d] = g->dims[d - 1];
    return NNC_OK;
}

/* x reflected into [lo, hi] by the near border until it lies inside; in double with fmod,
 * so that a huge coordinate needs no integer conversion (undefined beyond int64). */
static float gs_reflect(float x, float lo, float hi)
{
    double range = (double)hi - lo;
    if (!(range > 0.0)) return lo;
    if (x >= lo && x <= hi) return x;
    double d = x < lo ? (double)lo - x : (double)x - hi, t = fmod(d, 2.0 * range);
    double r = t <= range ? t : 2.0 * range - t; /* distance from the border it started at */
    return (float)(x < lo ? lo + r : hi - r);
}

/* A coordinate placed where every tap reads the same as at the original one: taps are at most
 * 2 pixels from it (cubic), so beyond [-4, size + 3] each one is padding (zeros) or the edge
 * (border) already. Keeps the integer conversions below defined for +-inf and huge values. */
static inline float gs_bound(float v, float size)
{
    return v < -4.f ? -4.f : v > size + 3.f ? size + 3.f : v;
}

typedef struct {
    const gs_state *s;
    const float *x, *g;
    float *y;
    int64_t C, H, W, OH, OW;
    float bx0, bx1, by0, by1;
} gs_job;

static inline float pixel(const gs_job *j, const float *p, int64_t r, int64_t c)
{
    if (j->s->pad == GP_ZEROS)
        return (r >= 0 && r < j->H && c >= 0 && c < j->W) ? p[r * j->W + c] : 0.f;
    if (j->s->pad == GP_BORDER) {
        r = r < 0 ? 0 : r >= j->H ? j->H - 1 : r;
        c = c < 0 ? 0 : c >= j->W ? j->W - 1 : c;
        return p[r * j->W + c];
    }
    r = (int64_t)gs_reflect((float)r, j->by0, j->by1);
    c = (int64_t)gs_reflect((float)c, j->bx0, j->bx1);
    r = r < 0 ? 0 : r >= j->H ? j->H - 1 : r; /* guards against rounding at the ends */
    c = c < 0 ? 0 : c >= j->W ? j->W - 1 : c;
    return p[r * j->W + c];
}

static void cubic_c(float t, float *c)
{
    const float A = -0.75f;
    c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
    c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    c[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
    c[3] = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;
}

static void gs_planes(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const gs_job *j = arg;
    const gs_state *s = j->s;
    float W = (float)j->W, H = (float)j->H;
    for (int64_t t = b; t < e; t++) {
        int64_t img = t / j->C;
        const float *p = j->x + t * j->H * j->W, *grid = j->g + img * j->OH * j->OW * 2;
        float *y = j->y + t * j->OH * j->OW;
        for (int64_t o = 0; o < j->OH * j->OW; o++) {
            float gx = grid[2 * o], gy = grid[2 * o + 1];
            float x = s->align ? (gx + 1) / 2.f * (W - 1) : ((gx + 1) * W - 1) / 2.f;
            float yy = s->align ? (gy + 1) / 2.f * (H - 1) : ((gy + 1) * H - 1) / 2.f;
            if (s->mode == GS_NEAREST) {
                x = nearbyintf(x);
                yy = nearbyintf(yy);
            }
            /* Each axis on its own. Reflection moves the coordinate inside; zeros and border
             * pad each tap (pixel), as onnxruntime does: for cubic, clamping the coordinate to
             * the border instead would weight the taps differently. */
            if (s->pad == GP_REFLECTION) {
                x = gs_reflect(x, j->bx0, j->bx1);
                yy = gs_reflect(yy, j->by0, j->by1);
            } else {
                x = gs_bound(x, W);
                yy = gs_bound(yy, H);
            }
            if (x != x || yy != yy) {
                y[o] = 0.f;
                continue;
            } /* a NaN in the grid, or an infinity reflected */
            if (s->mode == GS_NEAREST) {
                y[o] = pixel(j, p, (int64_t)yy, (int64_t)x);
            } else if (s->mode == GS_LINEAR) {
                float fx = floorf(x), fy = floorf(yy);
                int64_t x1 = (int64_t)fx, y1 = (int64_t)fy;
                float dx1 = x - fx, dx2 = fx + 1 - x, dy1 = yy - fy, dy2 = fy + 1 - yy;
                float p11 = pixel(j, p, y1, x1), p12 = pixel(j, p, y1, x1 + 1);
                float p21 = pixel(j, p, y1 + 1, x1), p22 = pixel(j, p, y1 + 1, x1 + 1);
                y[o] = dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (dx2 * p21 + dx1 * p22);
            } else {
                float fx = floorf(x), fy = floorf(yy), cx[4], cy[4], v[4];
                int64_t x0 = (int64_t)fx - 1, y0 = (int64_t)fy - 1;
                cubic_c(x - fx, cx);
                cubic_c(yy - fy, cy);
                for (int h = 0; h < 4; h++) {
                    v[h] = 0.f;
                    for (int w = 0; w < 4; w++) v[h] += cx[w] * pixel(j, p, y0 + h, x0 + w);
                }
                y[o] = cy[0] * v[0] + cy[1] * v[1] + cy[2] * v[2] + cy[3] * v[3];
            }
        }
    }
}

typedef struct {
    const gs_state *s;
    const float *x, *g;
    float *y;
    int64_t C, D, H, W, OS;
    float b0[3], b1[3];
} gs3_job;

static inline float pixel3(const gs3_job *j, const float *p, int64_t z, int64_t r, int64_t c)
{
    int64_t v[3] = {z, r, c}, L[3] = {j->D, j->H, j->W};
    for (int a = 0; a < 3; a++) {
        if (j->s->pad == GP_ZEROS) {
            if (v[a] < 0 || v[a] >= L[a]) return 0.f;
            continue;
        }
        if (j->s->pad == GP_REFLECTION) v[a] = (int64_t)gs_reflect((float)v[a], j->b0[a], j->b1[a]);
        v[a] = v[a] < 0 ? 0 : v[a] >= L[a] ? L[a] - 1 : v[a];
    }
    return p[(v[0] * j->H + v[1]) * j->W + v[2]];
}

static void gs_planes3(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const gs3_job *j = arg;
    const gs_state *s = j->s;
    float L[3] = {(float)j->D, (float)j->H, (float)j->W};
    for (int64_t t = b; t < e; t++) {
        int64_t img = t / j->C;
        const float *p = j->x + t * j->D * j->H * j->W, *grid = j->g + img * j->OS * 3;
        float *y = j->y + t * j->OS;
        for (int64_t o = 0; o < j->OS; o++) {
            float c[3]; /* z, y, x from the grid's (x, y, z) */
            int bad = 0;
            for (int a = 0; a < 3; a++) {
                float gv = grid[3 * o + 2 - a];
                c[a] = s->align ? (gv + 1) / 2.f * (L[a] - 1) : ((gv + 1) * L[a] - 1) / 2.f;
                if (s->mode == GS_NEAREST) c[a] = nearbyintf(c[a]);
            }
            for (int a = 0; a < 3; a++) { /* each axis on its own, as in gs_planes */
                c[a] = s->pad == GP_REFLECTION ? gs_reflect(c[a], j->b0[a], j->b1[a])
                                               : gs_bound(c[a], L[a]);
                bad |= c[a] != c[a];
            }
            if (bad) {
                y[o] = 0.f;
                continue;
            } /* a NaN in the grid, or an infinity reflected */
            if (s->mode == GS_NEAREST) {
                y[o] = pixel3(j, p, (int64_t)c[0], (int64_t)c[1], (int64_t)c[2]);
                continue;
            }
            float f[3], d1[3];
            int64_t i0[3];
            for (int a = 0; a < 3; a++) {
                f[a] = floorf(c[a]);
                i0[a] = (int64_t)f[a];
                d1[a] = c[a] - f[a];
            }
            float acc = 0.f;
            for (int q = 0; q < 8; q++) {
                float wgt = 1.f;
                for (int a = 0; a < 3; a++) wgt *= (q >> (2 - a)) & 1 ? d1[a] : 1.f - d1[a];
                acc += wgt * pixel3(j, p, i0[0] + ((q >> 2) & 1), i0[1] + ((q >> 1) & 1),
                                    i0[2] + (q & 1));
            }
            y[o] = acc;
        }
    }
}

static int gs_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    (void)e;
    const gs_state *s = n->state;
    const nnc_tensor *x = in[0];
    if (x->ndim == 5) {
        gs3_job k = {s,          x->data,    in[1]->data,
                     out->data,  x->dims[1], x->dims[2],
                     x->dims[3], x->dims[4], out->dims[2] * out->dims[3] * out->dims[4],
                     {0, 0, 0},  {0, 0, 0}};
        if (k.D == 0 || k.H == 0 || k.W == 0) {
            memset(out->data, 0, nnc_nbytes(out));
            return NNC_OK;
        }
        int64_t L[3] = {k.D, k.H, k.W};
        for (int a = 0; a < 3; a++) {
            k.b0[a] = s->align ? 0.f : -0.5f;
            k.b1[a] = s->align ? (float)L[a] - 1 : (float)L[a] - 0.5f;
        }
        nnc_parallel_for(x->dims[0] * k.C, 1, gs_planes3, &k);
        return NNC_OK;
    }
    gs_job j = {s,          x->data,      in[1]->data,  out->data, x->dims[1], x->dims[2],
                x->dims[3], out->dims[2], out->dims[3], 0,         0,          0,
                0};
    if (j.H == 0 || j.W == 0) {
        memset(out->data, 0, nnc_nbytes(out));
        return NNC_OK;
    }
    j.bx0 = s->align ? 0.f : -0.5f;
    j.bx1 = s->align ? (float)j.W - 1 : (float)j.W - 0.5f;
    j.by0 = s->align ? 0.f : -0.5f;
    j.by1 = s->align ? (float)j.H - 1 : (float)j.H - 0.5f;
    nnc_parallel_for(x->dims[0] * j.C, 1, gs_planes, &j);
    return NNC_OK;
}

const nnc_op nnc_op_gridsample = {"GridSample", 2,        2,      1,          1,
                                  gs_create,    gs_infer, gs_run, gs_destroy, 0};
