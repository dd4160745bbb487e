/* RoiAlign (float32; avg and max modes, half_pixel and output_half_pixel, sampling_ratio 0 =
 * adaptive): bilinear samples per output bin as onnxruntime takes them (its max mode keeps the
 * largest weighted corner). Parallel over (roi, channel) planes. */
#include "nnc.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    int max_mode, half_pixel;
    int64_t oh, ow, sampling;
    float scale;
} ra_state;

static void ra_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int ra_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0}, idx[] = {DT_I64, 0};
    TRY(nnc_check_dtype(n, 0, f32, e));
    TRY(nnc_check_dtype(n, 1, f32, e));
    TRY(nnc_check_dtype(n, 2, idx, e));
    ra_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    char buf[32];
    TRY(nnc_attr_str(n, "mode", "avg", buf, sizeof buf, e));
    if (!strcmp(buf, "max")) s->max_mode = 1;
    else if (strcmp(buf, "avg"))
        return nnc_node_fail(e, n, "attribute 'mode' = '%s' is not avg or max", buf);
    TRY(nnc_attr_str(n, "coordinate_transformation_mode",
                     n->opset >= 16 ? "half_pixel" : "output_half_pixel", buf, sizeof buf, e));
    if (!strcmp(buf, "half_pixel")) s->half_pixel = 1;
    else if (strcmp(buf, "output_half_pixel"))
        return nnc_node_fail(e, n, "attribute 'coordinate_transformation_mode' = '%s' is not valid",
                             buf);
    TRY(nnc_attr_int(n, "output_height", 1, &s->oh, e));
    TRY(nnc_attr_int(n, "output_width", 1, &s->ow, e));
    TRY(nnc_attr_int(n, "sampling_ratio", 0, &s->sampling, e));
    TRY(nnc_attr_float(n, "spatial_scale", 1.f, &s->scale, e));
    if (s->oh < 1 || s->ow < 1)
        return nnc_node_fail(e, n, "output_height and output_width must be positive");
    if (s->sampling < 0)
        return nnc_node_fail(e, n, "attribute 'sampling_ratio' must not be negative");
    return NNC_OK;
}

static int ra_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const ra_state *s = n->state;
    const nnc_tensor *x = in[0], *r = in[1], *bi = in[2];
    if (x->dtype != DT_F32 || r->dtype != DT_F32 || bi->dtype != DT_I64)
        return nnc_node_fail(e, n, "X and rois must be float32, batch_indices int64");
    if (x->ndim != 4) return nnc_node_fail(e, n, "X must have rank 4");
    if (r->ndim != 2 || r->dims[1] != 4)
        return nnc_node_fail(e, n, "rois must have shape [num_rois, 4]");
    if (bi->ndim != 1 || bi->dims[0] != r->dims[0])
        return nnc_node_fail(e, n, "batch_indices must have one value per roi");
    for (int64_t i = 0; i < bi->dims[0]; i++) {
        int64_t b = ((const int64_t *)bi->data)[i];
        if (b < 0 || b >= x->dims[0])
            return nnc_node_fail(e, n, "batch_indices[%lld] = %lld is out of range", (long long)i,
                                 (long long)b);
    }
    out->dtype = DT_F32;
    out->ndim = 4;
    out->dims[0] = r->dims[0];
    out->dims[1] = x->dims[1];
    out->dims[2] = s->oh;
    out->dims[3] = s->ow;
    return NNC_OK;
}

typedef struct {
    const ra_state *s;
    const float *x, *rois;
    const int64_t *bi;
    float *y;
    int64_t C, H, W;
    int fail;
} ra_job;

typedef struct {
    int64_t p[4];
    float w[4];
} ra_tap;

static void ra_planes(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ra_job *j = arg;
    const ra_state *s = j->s;
    int64_t H = j->H, W = j->W, PH = s->oh, PW = s->ow;
    for (int64_t t = b; t < e; t++) {
        int64_t r = t / j->C, c = t % j->C;
        const float *roi = j->rois + r * 4;
        float off = s->half_pixel ? 0.5f : 0.f;
        float x0 = roi[0] * s->scale - off, y0 = roi[1] * s->scale - off;
        float x1 = roi[2] * s->scale - off, y1 = roi[3] * s->scale - off;
        float rw = x1 - x0, rh = y1 - y0;
        if (!s->half_pixel) {
            rw = rw > 1.f ? rw : 1.f;
            rh = rh > 1.f ? rh : 1.f;
        }
        float bh = rh / (float)PH, bw = rw / (float)PW;
        int64_t gh = s->sampling > 0 ? s->sampling : (int64_t)ceilf(rh / (float)PH);
        int64_t gw = s->sampling > 0 ? s->sampling : (int64_t)ceilf(rw / (float)PW);
        if (gh < 0) gh = 0;
        if (gw < 0) gw = 0;
        float count = (float)(gh * gw > 1 ? gh * gw : 1);
        const float *xp = j->x + (j->bi[r] * j->C + c) * H * W;
        float *yp = j->y + t * PH * PW;
        for (int64_t ph = 0; ph < PH; ph++)
            for (int64_t pw = 0; pw < PW; pw++) {
                float acc = 0.f;
                int have = 0;
                for (int64_t iy = 0; iy < gh; iy++) {
                    float yy = y0 + ph * bh + ((float)iy + 0.5f) * bh / (float)gh;
                    for (int64_t ix = 0; ix < gw; ix++) {
                        float xx = x0 + pw * bw + ((float)ix + 0.5f) * bw / (float)gw;
                        ra_tap tp = {{0, 0, 0, 0}, {0, 0, 0, 0}};
                        if (!(yy < -1.f || yy > (float)H || xx < -1.f || xx > (float)W)) {
                            float y = yy > 0 ? yy : 0, x = xx > 0 ? xx : 0;
                            int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;
                            if (yl >= H - 1) {
                                yh = yl = H - 1;
                                y = (float)yl;
                            } else yh = yl + 1;
                            if (xl >= W - 1) {
                                xh = xl = W - 1;
                                x = (float)xl;
                            } else xh = xl + 1;
                            float ly = y - (float)yl, lx = x - (float)xl, hy = 1.f - ly,
                                  hx = 1.f - lx;
                            tp.p[0] = yl * W + xl;
                            tp.p[1] = yl * W + xh;
                            tp.p[2] = yh * W + xl;
                            tp.p[3] = yh * W + xh;
                            tp.w[0] = hy * hx;
                            tp.w[1] = hy * lx;
                            tp.w[2] = ly * hx;
                            tp.w[3] = ly * lx;
                        }
                        if (s->max_mode) {
                            float v = tp.w[0] * xp[tp.p[0]];
                            for (int q = 1; q < 4; q++) {
                                float u = tp.w[q] * xp[tp.p[q]];
                                v = u > v ? u : v;
                            }
                            acc = have ? (v > acc ? v : acc) : v;
                            have = 1;
                        } else {
                            acc += tp.w[0] * xp[tp.p[0]] + tp.w[1] * xp[tp.p[1]] +
                                   tp.w[2] * xp[tp.p[2]] + tp.w[3] * xp[tp.p[3]];
                        }
                    }
                }
                yp[ph * PW + pw] = s->max_mode ? acc : acc / count;
            }
    }
}

static int ra_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    const nnc_tensor *x = in[0];
    /* a NaN or infinite corner has no bins (its sample counts overflow): reject it, as onnxruntime */
    const float *rv = in[1]->data;
    for (int64_t i = 0; i < nnc_numel(in[1]); i++)
        if (!isfinite(rv[i]))
            return nnc_node_fail(
                e, n,
                "input 'rois' box %lld has the non-finite value %g; all 'rois' values must be "
                "finite: fix or drop that box before this node",
                (long long)(i / 4), (double)rv[i]);
    ra_job j = {n->state,   x->data, in[1]->data, in[2]->data, out->data, x->dims[1], x->dims[2],
                x->dims[3], 0};
    if (j.H == 0 || j.W == 0) {
        memset(out->data, 0, nnc_nbytes(out));
        return NNC_OK;
    }
    nnc_parallel_for(out->dims[0] * j.C, 1, ra_planes, &j);
    return NNC_OK;
}

const nnc_op nnc_op_roialign = {"RoiAlign", 3, 3, 1, 1, ra_create, ra_infer, ra_run, ra_destroy, 0};

/* ---- MaxRoiPool ---------------------------------------------------------------------- */

typedef struct {
    int64_t ph, pw;
    float scale;
} mrp_state;

static int mrp_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    TRY(nnc_check_dtype(n, 0, f32, e));
    TRY(nnc_check_dtype(n, 1, f32, e));
    mrp_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int64_t ps[2];
    int c;
    TRY(nnc_attr_ints(n, "pooled_shape", ps, 2, &c, e));
    if (c != 2 || ps[0] < 1 || ps[1] < 1)
        return nnc_node_fail(e, n, "attribute 'pooled_shape' must have 2 positive values");
    s->ph = ps[0];
    s->pw = ps[1];
    TRY(nnc_attr_float(n, "spatial_scale", 1.f, &s->scale, e));
    return NNC_OK;
}

static int mrp_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const mrp_state *s = n->state;
    const nnc_tensor *x = in[0], *r = in[1];
    if (x->dtype != DT_F32 || r->dtype != DT_F32)
        return nnc_node_fail(e, n, "inputs must be float32");
    if (x->ndim != 4 || r->ndim != 2 || r->dims[1] != 5)
        return nnc_node_fail(e, n, "X must be [N, C, H, W] and rois [num_rois, 5]");
    for (int64_t i = 0; i < r->dims[0]; i++) {
        float b = ((const float *)r->data)[i * 5];
        if (!(b >= 0.f) || b >= (float)x->dims[0])
            return nnc_node_fail(e, n, "roi %lld has batch index %g, out of range", (long long)i,
                                 (double)b);
    }
    out->dtype = DT_F32;
    out->ndim = 4;
    out->dims[0] = r->dims[0];
    out->dims[1] = x->dims[1];
    out->dims[2] = s->ph;
    out->dims[3] = s->pw;
    return NNC_OK;
}

typedef struct {
    const mrp_state *s;
    const float *x, *rois;
    float *y;
    int64_t C, H, W;
} mrp_job;

static void mrp_planes(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const mrp_job *j = arg;
    const mrp_state *s = j->s;
    for (int64_t t = b; t < e; t++) {
        int64_t r = t / j->C, c = t % j->C;
        const float *roi = j->rois + r * 5;
        int64_t bi = (int64_t)roi[0];
        int64_t sw = (int64_t)roundf(roi[1] * s->scale), sh = (int64_t)roundf(roi[2] * s->scale);
        int64_t ew = (int64_t)roundf(roi[3] * s->scale), eh = (int64_t)roundf(roi[4] * s->scale);
        int64_t rh = eh - sh + 1 > 1 ? eh - sh + 1 : 1, rw = ew - sw + 1 > 1 ? ew - sw + 1 : 1;
        float bh = (float)rh / (float)s->ph, bw = (float)rw / (float)s->pw;
        const float *xp = j->x + (bi * j->C + c) * j->H * j->W;
        float *yp = j->y + t * s->ph * s->pw;
        for (int64_t ph = 0; ph < s->ph; ph++)
            for (int64_t pw = 0; pw < s->pw; pw++) {
                int64_t h0 = (int64_t)floorf((float)ph * bh) + sh,
                        h1 = (int64_t)ceilf((float)(ph + 1) * bh) + sh;
                int64_t w0 = (int64_t)floorf((float)pw * bw) + sw,
                        w1 = (int64_t)ceilf((float)(pw + 1) * bw) + sw;
                h0 = h0 < 0 ? 0 : h0 > j->H ? j->H : h0;
                h1 = h1 < 0 ? 0 : h1 > j->H ? j->H : h1;
                w0 = w0 < 0 ? 0 : w0 > j->W ? j->W : w0;
                w1 = w1 < 0 ? 0 : w1 > j->W ? j->W : w1;
                float m = -INFINITY;
                if (h1 <= h0 || w1 <= w0) m = 0.f;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++)
                        m = xp[h * j->W + w] > m ? xp[h * j->W + w] : m;
                yp[ph * s->pw + pw] = m;
            }
    }
}

static int mrp_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    (void)e;
    const nnc_tensor *x = in[0];
    mrp_job j = {n->state, x->data, in[1]->data, out->data, x->dims[1], x->dims[2], x->dims[3]};
    nnc_parallel_for(out->dims[0] * j.C, 1, mrp_planes, &j);
    return NNC_OK;
}

const nnc_op nnc_op_maxroipool = {"MaxRoiPool", 2,         2,       1,          1,
                                  mrp_create,   mrp_infer, mrp_run, ra_destroy, 0};
