/* Resize (opsets 10-19) and Upsample (7-9): nearest (every nearest_mode, any element type),
 * linear and cubic (float32), every coordinate_transformation_mode, scales or sizes, axes and
 * keep_aspect_ratio_policy, antialias. Coordinates are computed in float32 as onnxruntime does.
 *
 * The resize is separable: one pass per axis whose mapping is not the identity, each pass a
 * table of (input index, weight) taps per output index, parallel over output rows. */
#include "nnc.h"
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_RESIZE_AVX512 1
#endif

enum { RM_NEAREST, RM_LINEAR, RM_CUBIC };
enum {
    CT_HALF_PIXEL,
    CT_HALF_PIXEL_SYM,
    CT_PYTORCH_HALF_PIXEL,
    CT_ALIGN_CORNERS,
    CT_ASYMMETRIC,
    CT_TF_HALF_PIXEL_NN,
    CT_TF_CROP
};
enum { NM_ROUND_PREFER_FLOOR, NM_ROUND_PREFER_CEIL, NM_FLOOR, NM_CEIL, NM_SIMPLE };
enum { KP_STRETCH, KP_NOT_LARGER, KP_NOT_SMALLER };

typedef struct {
    int mode, ctm, nearest, keep, exclude_outside, antialias;
    float cubic_a, extrapolation;
    int upsample7;                 /* scales from the attribute */
    float attr_scales[NNC_MAXDIM];
    int n_attr_scales;
    int i_roi, i_scales, i_sizes;  /* input indices, -1 when the opset has none */
    int64_t axes[NNC_MAXDIM];
    int naxes;                     /* -1: all axes */
} rs_state;

typedef struct {
    int rank;
    int64_t in[NNC_MAXDIM], out[NNC_MAXDIM];
    float scale[NNC_MAXDIM], roi0[NNC_MAXDIM], roi1[NNC_MAXDIM];
    /* Resized length in the coordinate formulas: scale * input length when scales are given
     * (ONNX's reference; onnxruntime uses the truncated output length), else the size. */
    float lenf[NNC_MAXDIM];
} rs_geom;

static void rs_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int pick(const nnc_node *n, const char *attr, const char *val, const char *const *names,
                int count, int *out, nnc_err *e)
{
    for (int i = 0; i < count; i++)
        if (!strcmp(val, names[i])) {
            *out = i;
            return NNC_OK;
        }
    return nnc_node_fail(e, n, "attribute '%s' = '%s' is not a valid value", attr, val);
}

static int rs_create(nnc_node *n, nnc_err *e)
{
    rs_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int upsample = !strcmp(n->op_type, "Upsample");
    int legacy =
        upsample || n->opset < 11; /* Upsample and Resize-10: asymmetric, no nearest_mode */
    char buf[64];
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    TRY(nnc_attr_str(n, "mode", "nearest", buf, sizeof buf, e));
    if (upsample && !strcmp(buf, "bilinear"))
        snprintf(buf, sizeof buf, "linear"); /* Upsample-7 spelling */
    TRY(pick(n, "mode", buf, modes, legacy ? 2 : 3, &s->mode, e));
    s->i_roi = s->i_scales = s->i_sizes = -1;
    if (upsample && n->opset < 9) {
        s->upsample7 = 1;
        TRY(nnc_attr_floats(n, "scales", s->attr_scales, NNC_MAXDIM, &s->n_attr_scales, e));
        if (s->n_attr_scales < 0) return nnc_node_fail(e, n, "attribute 'scales' is required");
    } else if (legacy) {
        s->i_scales = 1;
        if (!nnc_in_present(n, 1)) return nnc_node_fail(e, n, "input 1 (scales) is required");
    } else {
        s->i_roi = 1;
        s->i_scales = 2;
        s->i_sizes = 3;
    }
    s->naxes = -1;
    s->nearest = NM_SIMPLE;
    s->ctm = CT_ASYMMETRIC;
    s->cubic_a = -0.75f;
    if (!legacy) {
        static const char *const ctms[] = {
            "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
            "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
        static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"};
        static const char *const kps[] = {"stretch", "not_larger", "not_smaller"};
        TRY(nnc_attr_str(n, "coordinate_transformation_mode", "half_pixel", buf, sizeof buf, e));
        TRY(pick(n, "coordinate_transformation_mode", buf, ctms, 7, &s->ctm, e));
        TRY(nnc_attr_str(n, "nearest_mode", "round_prefer_floor", buf, sizeof buf, e));
        TRY(pick(n, "nearest_mode", buf, nms, 4, &s->nearest, e));
        TRY(nnc_attr_str(n, "keep_aspect_ratio_policy", "stretch", buf, sizeof buf, e));
        TRY(pick(n, "keep_aspect_ratio_policy", buf, kps, 3, &s->keep, e));
        TRY(nnc_attr_float(n, "cubic_coeff_a", -0.75f, &s->cubic_a, e));
        TRY(nnc_attr_float(n, "extrapolation_value", 0.f, &s->extrapolation, e));
        int64_t v;
        TRY(nnc_attr_int(n, "exclude_outside", 0, &v, e));
        s->exclude_outside = v != 0;
        TRY(nnc_attr_int(n, "antialias", 0, &v, e));
        s->antialias = v != 0;
        TRY(nnc_attr_ints(n, "axes", s->axes, NNC_MAXDIM, &s->naxes, e));
    }
    /* Element types: nearest copies elements of any size; linear and cubic compute in float32. */
    const nnc_valinfo *x = n->vin[0];
    if (x && x->dtype != DT_UNDEF) {
        if (!nnc_dtsize(x->dtype))
            return nnc_node_unsup(e, n, "element type %s is not supported", nnc_dtname(x->dtype));
        if (s->mode != RM_NEAREST && x->dtype != DT_F32)
            return nnc_node_unsup(e, n, "%s mode supports float32 only, got %s", modes[s->mode],
                                  nnc_dtname(x->dtype));
    }
    static const int f32[] = {DT_F32, 0}, i64[] = {DT_I64, 0};
    if (s->i_scales >= 0) TRY(nnc_check_dtype(n, s->i_scales, f32, e));
    if (s->i_sizes >= 0) TRY(nnc_check_dtype(n, s->i_sizes, i64, e));
    if (s->i_roi >= 0 && s->ctm == CT_TF_CROP) TRY(nnc_check_dtype(n, s->i_roi, f32, e));
    if (x && x->ndim == 0) return nnc_node_fail(e, n, "the input must have rank 1 or more");
    for (int i = 0; i < s->naxes; i++)
        for (int k = 0; k < i; k++)
            if (s->axes[i] == s->axes[k])
                return nnc_node_fail(e, n, "attribute 'axes' repeats axis %lld",
                                     (long long)s->axes[i]);
    return NNC_OK;
}

static const nnc_tensor *opt_in(nnc_node *n, nnc_tensor *const *in, int i)
{
    if (i < 0 || i >= n->nin || !in[i] || nnc_numel(in[i]) == 0) return NULL;
    return in[i];
}

static int rs_geometry(nnc_node *n, nnc_tensor *const *in, rs_geom *g, nnc_err *e)
{
    const rs_state *s = n->state;
    const nnc_tensor *x = in[0];
    int r = x->ndim;
    if (r < 1) return nnc_node_fail(e, n, "the input must have rank 1 or more");
    if (!nnc_dtsize(x->dtype))
        return nnc_node_fail(e, n, "element type %s is not supported", nnc_dtname(x->dtype));
    if (s->mode != RM_NEAREST && x->dtype != DT_F32)
        return nnc_node_fail(e, n, "linear and cubic modes need float32 input");
    g->rank = r;
    int axes[NNC_MAXDIM], na = s->naxes < 0 ? r : s->naxes;
    for (int i = 0; i < na; i++) {
        int64_t a = s->naxes < 0 ? i : s->axes[i];
        if (a < -r || a >= r)
            return nnc_node_fail(e, n, "attribute 'axes' has axis %lld, out of range for rank %d",
                                 (long long)a, r);
        axes[i] = (int)(a < 0 ? a + r : a);
        for (int k = 0; k < i; k++)
            if (axes[k] == axes[i])
                return nnc_node_fail(e, n, "attribute 'axes' repeats axis %d", axes[i]);
    }
    for (int d = 0; d < r; d++) {
        g->in[d] = g->out[d] = x->dims[d];
        g->scale[d] = 1.f;
        g->roi0[d] = 0.f;
        g->roi1[d] = 1.f;
    }
    int from_scales = 0;
    const nnc_tensor *sc = opt_in(n, in, s->i_scales), *sz = opt_in(n, in, s->i_sizes);
    if (sc && sz) return nnc_node_fail(e, n, "only one of 'scales' and 'sizes' may be given");
    float scales[NNC_MAXDIM];
    int nsc = -1;
    if (s->upsample7) {
        nsc = s->n_attr_scales;
        memcpy(scales, s->attr_scales, sizeof scales);
    } else if (sc) {
        if (sc->dtype != DT_F32) return nnc_node_fail(e, n, "'scales' must be float32");
        if (sc->ndim != 1) return nnc_node_fail(e, n, "'scales' must be 1-D");
        nsc = (int)sc->dims[0];
        if (nsc > NNC_MAXDIM || !sc->data)
            return nnc_node_fail(e, n, "'scales' has %d values for rank %d", nsc, r);
        memcpy(scales, sc->data, (size_t)nsc * sizeof(float));
    }
    if (nsc >= 0) {
        from_scales = 1;
        if (nsc != na)
            return nnc_node_fail(e, n, "'scales' has %d values, the input needs %d", nsc, na);
        for (int i = 0; i < na; i++) {
            if (!(scales[i] > 0.f) || isinf(scales[i]))
                return nnc_node_fail(e, n, "'scales' must be positive, got %g", (double)scales[i]);
            int d = axes[i];
            g->scale[d] = scales[i];
            double o = (double)(scales[i] * (float)x->dims[d]);
            if (o > 1e12) return nnc_node_fail(e, n, "the output is too large");
            g->out[d] = (int64_t)o;
        }
    } else if (sz) {
        if (sz->dtype != DT_I64 || sz->ndim != 1 || !sz->data)
            return nnc_node_fail(e, n, "'sizes' must be 1-D int64");
        if (sz->dims[0] != na)
            return nnc_node_fail(e, n, "'sizes' has %lld values, the input needs %d",
                                 (long long)sz->dims[0], na);
        const int64_t *sv = sz->data;
        for (int i = 0; i < na; i++) {
            if (sv[i] < 0 || sv[i] > ((int64_t)1 << 40))
                return nnc_node_fail(e, n, "'sizes' has an invalid value %lld", (long long)sv[i]);
            if (x->dims[axes[i]] == 0 && sv[i] != 0)
                return nnc_node_fail(e, n, "cannot resize an empty axis to %lld", (long long)sv[i]);
        }
        if (s->keep == KP_STRETCH) {
            for (int i = 0; i < na; i++) {
                int d = axes[i];
                g->out[d] = sv[i];
                g->scale[d] = x->dims[d] ? (float)sv[i] / (float)x->dims[d] : 1.f;
            }
        } else {
            float k = 0.f;
            for (int i = 0; i < na; i++) {
                float q = x->dims[axes[i]] ? (float)sv[i] / (float)x->dims[axes[i]] : 1.f;
                if (i == 0 || (s->keep == KP_NOT_LARGER ? q < k : q > k)) k = q;
            }
            for (int i = 0; i < na; i++) {
                int d = axes[i];
                g->scale[d] = k;
                g->out[d] = (int64_t)roundf(k * (float)x->dims[d]);
            }
        }
    } else {
        return nnc_node_fail(e, n, "one of 'scales' and 'sizes' is required");
    }
    for (int i = 0; i < na; i++)
        if (!(g->scale[axes[i]] > 0.f)) return nnc_node_fail(e, n, "a scale of 0 is not valid");
    for (int d = 0; d < r; d++)
        g->lenf[d] = from_scales ? g->scale[d] * (float)g->in[d] : (float)g->out[d];
    if (s->ctm == CT_TF_CROP) {
        const nnc_tensor *roi = opt_in(n, in, s->i_roi);
        if (!roi) return nnc_node_fail(e, n, "tf_crop_and_resize needs the 'roi' input");
        if (roi->dtype != DT_F32 || roi->ndim != 1 || roi->dims[0] != 2 * na || !roi->data)
            return nnc_node_fail(e, n, "'roi' must be 1-D float32 with %d values", 2 * na);
        const float *rv = roi->data;
        for (int i = 0; i < na; i++) {
            g->roi0[axes[i]] = rv[i];
            g->roi1[axes[i]] = rv[na + i];
        }
    }
    return NNC_OK;
}

static int rs_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    rs_geom g;
    TRY(rs_geometry(n, in, &g, e));
    out->dtype = in[0]->dtype;
    out->ndim = g.rank;
    memcpy(out->dims, g.out, sizeof g.out);
    return NNC_OK;
}

/* Source coordinate of output index x along one axis (onnxruntime's formulas, in float). */
static float rs_coord(int ctm, float x, float scale, float len_out, float out_int, float len_in,
                      float r0, float r1)
{
    switch (ctm) {
    case CT_ASYMMETRIC: return x / scale;
    case CT_PYTORCH_HALF_PIXEL: return len_out > 1 ? (x + 0.5f) / scale - 0.5f : 0.f;
    case CT_TF_HALF_PIXEL_NN: return (x + 0.5f) / scale;
    case CT_ALIGN_CORNERS: return len_out == 1 ? 0.f : x * (len_in - 1) / (len_out - 1);
    case CT_TF_CROP:
        return len_out > 1 ? r0 * (len_in - 1) + (x * (r1 - r0) * (len_in - 1)) / (len_out - 1)
                           : 0.5f * (r0 + r1) * (len_in - 1);
    case CT_HALF_PIXEL_SYM: {
        float ow = scale * len_in, adj = out_int / ow, center = len_in / 2,
              off = center * (1 - adj);
        return off + (x + 0.5f) / scale - 0.5f;
    }
    default: return (x + 0.5f) / scale - 0.5f;
    }
}

static int64_t rs_nearest(int nm, float x, int down)
{
    switch (nm) {
    case NM_ROUND_PREFER_FLOOR:
        return x == (float)(int64_t)x + 0.5f ? (int64_t)floorf(x) : (int64_t)roundf(x);
    case NM_ROUND_PREFER_CEIL: return (int64_t)roundf(x);
    case NM_FLOOR: return (int64_t)floorf(x);
    case NM_CEIL: return (int64_t)ceilf(x);
    default: return down ? (int64_t)ceilf(x) : (int64_t)x;
    }
}

static void cubic_coeffs(float t, float A, float *c)
{
    c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
    c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    c[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
    c[3] = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;
}

/* Taps per output along axis d: 1 (nearest), 2 (linear), 4 (cubic); with antialias the
 * filter widens by 1/scale when downscaling (ONNX's reference: linear start = floor(-1/s)+1,
 * cubic floor(-2/s)+1, 2 - 2*start taps). */
static int rs_taps(const rs_state *s, float scale)
{
    if (s->mode == RM_NEAREST) return 1;
    int support = s->mode == RM_LINEAR ? 1 : 2;
    if (!s->antialias || scale >= 1.f) return 2 * support;
    int start = (int)floor(-(double)support / (double)scale) + 1;
    return 2 - 2 * start;
}

static float cubic_kernel(float x, float A)
{
    x = fabsf(x);
    if (x <= 1.f) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2.f) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0.f;
}

/* Taps of one axis: idx[o*nt+k], w[o*nt+k]; ext[o] = 1 where the output is extrapolated.
 * Returns whether the mapping is the identity. */
static int rs_table(const rs_state *s, const rs_geom *g, int d, int nt, int64_t *idx, float *w,
                    char *ext)
{
    int64_t L = g->in[d], O = g->out[d];
    int ident = L == O;
    for (int64_t o = 0; o < O; o++) {
        float xo = rs_coord(s->ctm, (float)o, g->scale[d], g->lenf[d], (float)O, (float)L,
                            g->roi0[d], g->roi1[d]);
        int64_t *ix = idx + o * nt;
        float *wt = w + o * nt;
        ext[o] = s->ctm == CT_TF_CROP && (xo < 0 || xo > (float)(L - 1));
        if (ext[o]) {
            for (int k = 0; k < nt; k++) {
                ix[k] = 0;
                wt[k] = 0.f;
            }
            ident = 0;
            continue;
        }
        if (s->mode != RM_NEAREST && s->antialias && g->scale[d] < 1.f) {
            float sc = g->scale[d], fl = floorf(xo);
            int64_t base = (int64_t)fl;
            float ratio = xo - fl;
            if (ratio == 0.f) {
                ratio = 1.f;
                base -= 1;
            }
            int start = 1 - nt / 2;
            float sum = 0.f;
            for (int k = 0; k < nt; k++) {
                float arg = ((float)(start + k) - ratio) * sc, c;
                if (s->mode == RM_LINEAR) {
                    c = 1.f - fabsf(arg);
                    c = c < 0.f ? 0.f : c;
                } else c = cubic_kernel(arg, s->cubic_a);
                wt[k] = c;
                sum += c;
            }
            float sum2 = 0.f;
            for (int k = 0; k < nt; k++) {
                int64_t i = base + start + k;
                wt[k] = sum != 0.f ? wt[k] / sum : 0.f;
                if (s->exclude_outside && (i < 0 || i >= L)) wt[k] = 0.f;
                sum2 += wt[k];
                ix[k] = i < 0 ? 0 : i >= L ? L - 1 : i;
            }
            if (s->exclude_outside)
                for (int k = 0; k < nt; k++) wt[k] = sum2 != 0.f ? wt[k] / sum2 : 0.f;
        } else if (s->mode == RM_NEAREST) {
            int64_t i = rs_nearest(s->nearest, xo, g->scale[d] < 1.f);
            ix[0] = i < 0 ? 0 : i >= L ? L - 1 : i;
            wt[0] = 1.f;
        } else if (s->mode == RM_LINEAR) {
            float cx = xo<0 ? 0.f : xo>(float)(L - 1) ? (float)(L - 1) : xo;
            int64_t i1 = (int64_t)cx;
            if (i1 > L - 1) i1 = L - 1;
            int64_t i2 = i1 + 1 < L ? i1 + 1 : L - 1;
            float d1 = fabsf(cx - (float)i1), d2 = fabsf(cx - (float)i2);
            if (i1 == i2) d1 = d2 = 0.5f;
            ix[0] = i1;
            wt[0] = d2;
            ix[1] = i2;
            wt[1] = d1;
        } else {
            float fl = floorf(xo);
            int64_t base = (int64_t)fl;
            float c[4], sum = 0.f;
            cubic_coeffs(xo - fl, s->cubic_a, c);
            for (int k = 0; k < 4; k++) {
                int64_t i = base + k - 1;
                if (s->exclude_outside && (i < 0 || i >= L)) c[k] = 0.f;
                sum += c[k];
                ix[k] = i < 0 ? 0 : i >= L ? L - 1 : i;
            }
            for (int k = 0; k < 4; k++)
                wt[k] = s->exclude_outside ? (sum != 0.f ? c[k] / sum : 0.f) : c[k];
        }
        /* identity: the output takes input o whole */
        float tot = 0.f;
        for (int k = 0; k < nt; k++) {
            if (ix[k] == o) tot += wt[k];
            else if (wt[k] != 0.f) ident = 0;
        }
        if (tot != 1.f) ident = 0;
    }
    return ident;
}

typedef struct {
    const char *x;
    char *y;
    size_t sz;
    int64_t in_len, out_len, inner;
    int nt, nearest;
    const int64_t *idx;
    const float *w;
    const char *ext;
    float extrap;
    char extrap_bytes[8];
    /* two taps along the last axis, no extrapolation (linear): the taps' input indices and
     * weights as four arrays, so the loop gathers in vectors */
    const int32_t *i0, *i1;
    const float *w0, *w1;
} rs_pass;

/* n elements of sz bytes, each the extrapolation value's bytes */
static void fill_elems(char *dst, const char *value, size_t sz, int64_t n)
{
    for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * sz, value, sz);
}

/* dst[o] = src[idx[o]], or the extrapolation value where ext[o]: elements of sz bytes */
static void gather_elems(const char *src, char *dst, const int64_t *idx, const char *ext,
                         const char *value, size_t sz, int64_t n)
{
    for (int64_t o = 0; o < n; o++) {
        const char *v = ext[o] ? value : src + (size_t)idx[o] * sz;
        switch (sz) {
        case 4: ((uint32_t *)dst)[o] = *(const uint32_t *)v; break;
        case 8: ((uint64_t *)dst)[o] = *(const uint64_t *)v; break;
        case 2: ((uint16_t *)dst)[o] = *(const uint16_t *)v; break;
        default: dst[o] = *v; break;
        }
    }
}

/* dst[i] = the taps' weighted sum of their rows at i, for n elements, in tap order (two taps,
 * linear's, in one pass over dst) */
MULTIVERSION static void blend_rows(float *dst, const float *src, const int64_t *ix,
                                    const float *wt, int nt, int64_t inner)
{
    const float *s0 = src + ix[0] * inner, w0 = wt[0];
    if (nt == 2) {
        const float *s1 = src + ix[1] * inner, w1 = wt[1];
        for (int64_t i = 0; i < inner; i++) dst[i] = w0 * s0[i] + w1 * s1[i];
        return;
    }
    for (int64_t i = 0; i < inner; i++) dst[i] = w0 * s0[i];
    for (int k = 1; k < nt; k++) {
        const float *sk = src + ix[k] * inner;
        float wk = wt[k];
        for (int64_t i = 0; i < inner; i++) dst[i] += wk * sk[i];
    }
}

static void rs_rows(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const rs_pass *p = arg;
    int64_t inner = p->inner;
    for (int64_t r = b; r < e; r++) {
        int64_t outer = r / p->out_len, o = r % p->out_len;
        const int64_t *ix = p->idx + o * p->nt;
        const float *wt = p->w + o * p->nt;
        if (p->nearest) {
            size_t row = (size_t)inner * p->sz;
            char *dst = p->y + (size_t)r * row;
            if (p->ext[o]) {
                fill_elems(dst, p->extrap_bytes, p->sz, inner);
            } else {
                memcpy(dst, p->x + (size_t)(outer * p->in_len + ix[0]) * row, row);
            }
            continue;
        }
        float *dst = (float *)p->y + r * inner;
        const float *src = (const float *)p->x + outer * p->in_len * inner;
        if (p->ext[o]) {
            for (int64_t i = 0; i < inner; i++) dst[i] = p->extrap;
        } else { /* inner > 1: rs_run gives rows of one element to rs_rows_last */
            blend_rows(dst, src, ix, wt, p->nt, inner);
        }
    }
}

/* One row of rs_rows_last's two-tap case: the same sums, in the same order. */
MULTIVERSION static void gather_blend(float *dst, const float *src, const int32_t *i0,
                                      const int32_t *i1, const float *w0, const float *w1,
                                      int64_t n)
{
    for (int64_t o = 0; o < n; o++) dst[o] = (0.f + w0[o] * src[i0[o]]) + w1[o] * src[i1[o]];
}

/* Inner-axis linear or cubic: whole rows of the last axis, so the output index needs no
 * division per element (the same sums, in the same order, as rs_rows with inner == 1). */
static void rs_rows_last(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const rs_pass *p = arg;
    int nt = p->nt;
    for (int64_t r = b; r < e; r++) {
        const float *src = (const float *)p->x + r * p->in_len;
        float *dst = (float *)p->y + r * p->out_len;
        if (p->i0) {
            gather_blend(dst, src, p->i0, p->i1, p->w0, p->w1, p->out_len);
            continue;
        }
        for (int64_t o = 0; o < p->out_len; o++) {
            if (p->ext[o]) {
                dst[o] = p->extrap;
                continue;
            }
            const int64_t *ix = p->idx + o * nt;
            const float *wt = p->w + o * nt;
            float acc = 0.f;
            for (int k = 0; k < nt; k++) acc += wt[k] * src[ix[k]];
            dst[o] = acc;
        }
    }
}

/* Inner-axis nearest: gather elements one by one (rows of the last axis). */
static void rs_gather_last(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const rs_pass *p = arg;
    size_t sz = p->sz;
    for (int64_t r = b; r < e; r++)
        gather_elems(p->x + (size_t)(r * p->in_len) * sz, p->y + (size_t)(r * p->out_len) * sz,
                     p->idx, p->ext, p->extrap_bytes, sz, p->out_len);
}

/* Nearest over the last two axes at once (an image's height and width: the 2x and 4x
 * upsamplings of U-Nets, FPNs and YOLO heads; elements of 1, 2 or 4 bytes): each output row
 * gathers from its input row straight, with no intermediate tensor, and repeats the row before
 * it when both take the same input row. The same elements as the two passes. */
typedef struct {
    const char *x;
    char *y;
    size_t sz;
    int64_t in_h, in_w, out_h, out_w;
    const int64_t *ih, *iw;
    const char *eh, *ew, *extrap;
    int any_ew; /* some output column is extrapolated */
    int twice;  /* column ow takes input column ow / 2, for every one of 2 * in_w */
} rs_nearest2d;

MULTIVERSION static void gather_u32(const uint32_t *src, const int64_t *idx, uint32_t *dst,
                                    int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = src[idx[i]];
}

#ifdef HAVE_RESIZE_AVX512
/* dst[2i] = dst[2i + 1] = src[i] for i < n: a 2x nearest upsampling of a row, 16 inputs to
 * 32 outputs per two permutes */
__attribute__((target("avx512f"))) static void twice_u32(const uint32_t *src, uint32_t *dst,
                                                         int64_t n)
{
    const __m512i lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                  hi =
                      _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_loadu_si512(src + i);
        _mm512_storeu_si512(dst + 2 * i, _mm512_permutexvar_epi32(lo, v));
        _mm512_storeu_si512(dst + 2 * i + 16, _mm512_permutexvar_epi32(hi, v));
    }
    for (; i < n; i++) dst[2 * i] = dst[2 * i + 1] = src[i];
}
#endif

static void rs_nearest_rows(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const rs_nearest2d *p = arg;
    size_t sz = p->sz, row = (size_t)p->out_w * sz;
    for (int64_t r = b; r < e; r++) {
        int64_t outer = r / p->out_h, oh = r % p->out_h;
        char *dst = p->y + (size_t)r * row;
        if (r > b && oh > 0 && !p->eh[oh] && !p->eh[oh - 1] && p->ih[oh] == p->ih[oh - 1]) {
            memcpy(dst, dst - row, row);
            continue;
        }
        if (p->eh[oh]) {
            fill_elems(dst, p->extrap, sz, p->out_w);
            continue;
        }
        const char *src = p->x + (size_t)(outer * p->in_h + p->ih[oh]) * (size_t)p->in_w * sz;
        if (!p->any_ew && sz == 4) { /* the usual case: float32, no extrapolation */
#ifdef HAVE_RESIZE_AVX512
            if (p->twice && nnc_isa_level() >= 2) {
                twice_u32((const uint32_t *)src, (uint32_t *)dst, p->in_w);
                continue;
            }
#endif
            gather_u32((const uint32_t *)src, p->iw, (uint32_t *)dst, p->out_w);
            continue;
        }
        gather_elems(src, dst, p->iw, p->ew, p->extrap, sz, p->out_w);
    }
}

static void extrap_bytes(int dt, float v, char *out)
{
    memset(out, 0, 8);
    switch (dt) {
    case DT_F32: memcpy(out, &v, 4); break;
    case DT_F64: {
        double d = v;
        memcpy(out, &d, 8);
        break;
    }
    case DT_I64: {
        int64_t k = (int64_t)v;
        memcpy(out, &k, 8);
        break;
    }
    case DT_U64: {
        uint64_t k = (uint64_t)v;
        memcpy(out, &k, 8);
        break;
    }
    case DT_I32: {
        int32_t k = (int32_t)v;
        memcpy(out, &k, 4);
        break;
    }
    case DT_U32: {
        uint32_t k = (uint32_t)v;
        memcpy(out, &k, 4);
        break;
    }
    case DT_I16: {
        int16_t k = (int16_t)v;
        memcpy(out, &k, 2);
        break;
    }
    case DT_U16: {
        uint16_t k = (uint16_t)v;
        memcpy(out, &k, 2);
        break;
    }
    case DT_I8: {
        int8_t k = (int8_t)v;
        memcpy(out, &k, 1);
        break;
    }
    case DT_U8: {
        uint8_t k = (uint8_t)v;
        memcpy(out, &k, 1);
        break;
    }
    case DT_BOOL: out[0] = v != 0.f; break;
    default: break; /* float16: extrapolated values are 0 */
    }
}

static int rs_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    const rs_state *s = n->state;
    rs_geom g;
    TRY(rs_geometry(n, in, &g, e));
    const nnc_tensor *x = in[0];
    size_t sz = nnc_dtsize(x->dtype);
    int nts[NNC_MAXDIM], nt = 1;
    int64_t maxo = 1, total_in = nnc_numel(x);
    for (int d = 0; d < g.rank; d++) {
        maxo = g.out[d] > maxo ? g.out[d] : maxo;
        nts[d] = rs_taps(s, g.scale[d]);
        nt = nts[d] > nt ? nts[d] : nt;
    }
    if (nt > 4096) return nnc_node_fail(e, n, "the antialias filter is too wide (scale too small)");
    int64_t *idx = malloc((size_t)(maxo * nt) * sizeof(int64_t));
    float *w = malloc((size_t)(maxo * nt) * sizeof(float));
    char *ext = malloc((size_t)maxo);
    char *tmp[2] = {NULL, NULL};
    int rc = NNC_OK;
    if (!idx || !w || !ext) {
        rc = nnc_node_fail(e, n, "out of memory");
        goto done;
    }
    /* Which axes need a pass, in the order they run; the last of them writes the output. */
    int need[NNC_MAXDIM], order[NNC_MAXDIM], npass = 0, last = -1, grows = 0;
    for (int d = 0; d < g.rank; d++) {
        need[d] = !rs_table(s, &g, d, nts[d], idx, w, ext);
        if (need[d]) order[npass++] = d;
        if (need[d] && d < g.rank - 1 && g.out[d] > g.in[d]) grows = 1;
    }
    /* Upsampling an image: the last axis first, on the small input, so the pass that writes
     * the most elements is one over whole rows (vector loops) rather than the last axis's
     * gather of taps per element (a segmentation head's 21 x 20 x 20 -> 21 x 320 x 320,
     * linear, 2 threads: 4.3 -> 0.8 ms with blend_rows and gather_blend) */
    if (npass > 1 && order[npass - 1] == g.rank - 1 && grows) {
        memmove(order + 1, order, (size_t)(npass - 1) * sizeof order[0]);
        order[0] = g.rank - 1;
    }
    if (npass) last = order[npass - 1];
    if (last < 0) {
        if (total_in) memcpy(out->data, x->data, (size_t)total_in * sz);
        goto done;
    }
    int only_hw = g.rank >= 2 && need[g.rank - 1] && need[g.rank - 2];
    for (int d = 0; d < g.rank - 2; d++) only_hw = only_hw && !need[d];
    if (s->mode == RM_NEAREST && only_hw && sz <= 4) {
        int h = g.rank - 2, wd = g.rank - 1;
        int64_t *ih = malloc((size_t)g.out[h] * sizeof(int64_t));
        float *wh = malloc((size_t)g.out[h] * sizeof(float));
        char *eh = malloc((size_t)g.out[h]);
        if (!ih || !wh || !eh) {
            free(ih);
            free(wh);
            free(eh);
            rc = nnc_node_fail(e, n, "out of memory");
            goto done;
        }
        rs_table(s, &g, h, 1, ih, wh, eh);
        rs_table(s, &g, wd, 1, idx, w, ext);
        int64_t outer = 1;
        for (int d = 0; d < h; d++) outer *= g.in[d];
        char xb[8] = {0};
        extrap_bytes(x->dtype, s->extrapolation, xb);
        int any_ew = 0, twice = g.out[wd] == 2 * g.in[wd];
        for (int64_t o = 0; o < g.out[wd]; o++) {
            any_ew |= ext[o];
            twice = twice && idx[o] == o / 2;
        }
        rs_nearest2d p = {x->data, out->data, sz, g.in[h], g.in[wd], g.out[h], g.out[wd],
                          ih,      idx,       eh, ext,     xb,       any_ew,   twice};
        if (outer * g.out[h] * g.out[wd] > 0)
            nnc_parallel_for(outer * g.out[h], 1 + 4096 / (g.out[wd] ? g.out[wd] : 1),
                             rs_nearest_rows, &p);
        free(ih);
        free(wh);
        free(eh);
        goto done;
    }
    int64_t cur[NNC_MAXDIM];
    memcpy(cur, g.in, sizeof cur);
    const char *src = x->data;
    int which = 0;
    for (int q = 0; q < npass; q++) {
        int d = order[q];
        rs_table(s, &g, d, nts[d], idx, w, ext);
        int64_t outer = 1, inner = 1;
        for (int k = 0; k < d; k++) outer *= cur[k];
        for (int k = d + 1; k < g.rank; k++) inner *= cur[k];
        cur[d] = g.out[d];
        char *dst;
        if (d == last) {
            dst = out->data;
        } else {
            int64_t cnt = outer * cur[d] * inner;
            nnc_free(tmp[which]);
            tmp[which] = nnc_alloc((size_t)(cnt ? cnt : 1) * sz);
            if (!tmp[which]) {
                rc = nnc_node_fail(e, n, "out of memory");
                goto done;
            }
            dst = tmp[which];
        }
        rs_pass p = {
            src, dst, sz,  g.in[d],          g.out[d], inner, nts[d], s->mode == RM_NEAREST,
            idx, w,   ext, s->extrapolation, {0},      NULL,  NULL,   NULL,
            NULL};
        extrap_bytes(x->dtype, s->extrapolation, p.extrap_bytes);
        int32_t *planes = NULL; /* i0, i1, w0, w1 of the two-tap last axis */
        int planar = inner == 1 && !p.nearest && nts[d] == 2 && g.in[d] <= INT32_MAX;
        for (int64_t o = 0; planar && o < g.out[d]; o++) planar = !ext[o];
        if (planar && (planes = malloc((size_t)g.out[d] * 4 * sizeof(int32_t))) != NULL) {
            int64_t O = g.out[d];
            int32_t *i0 = planes, *i1 = planes + O;
            float *w0 = (float *)(planes + 2 * O), *w1 = (float *)(planes + 3 * O);
            for (int64_t o = 0; o < O; o++) {
                i0[o] = (int32_t)idx[2 * o];
                i1[o] = (int32_t)idx[2 * o + 1];
                w0[o] = w[2 * o];
                w1[o] = w[2 * o + 1];
            }
            p.i0 = i0;
            p.i1 = i1;
            p.w0 = w0;
            p.w1 = w1;
        }
        if (outer * g.out[d] * inner > 0) {
            if (p.nearest && inner == 1)
                nnc_parallel_for(outer, 1 + 4096 / (g.out[d] ? g.out[d] : 1), rs_gather_last, &p);
            else if (inner == 1)
                nnc_parallel_for(outer, 1 + 4096 / (g.out[d] * nts[d] ? g.out[d] * nts[d] : 1),
                                 rs_rows_last, &p);
            else nnc_parallel_for(outer * g.out[d], 1 + 4096 / (inner * nts[d]), rs_rows, &p);
        }
        free(planes);
        src = dst;
        which ^= 1;
    }
    /* tf_crop_and_resize: a later pass blends extrapolated rows through its weights (5 gives
     * 4.999999, -inf NaN), so set every output extrapolated along some axis to the value
     * exactly, as the spec and onnxruntime. Nearest copies it exactly already. */
    if (s->ctm == CT_TF_CROP && s->mode != RM_NEAREST) {
        float *y = out->data;
        for (int d = 0; d < g.rank; d++) {
            if (!need[d]) continue;
            rs_table(s, &g, d, nts[d], idx, w, ext);
            int64_t outer = 1, inner = 1;
            for (int k = 0; k < d; k++) outer *= g.out[k];
            for (int k = d + 1; k < g.rank; k++) inner *= g.out[k];
            for (int64_t b = 0; b < outer; b++)
                for (int64_t o = 0; o < g.out[d]; o++)
                    if (ext[o])
                        for (int64_t i = 0; i < inner; i++)
                            y[(b * g.out[d] + o) * inner + i] = s->extrapolation;
        }
    }
done:
    free(idx);
    free(w);
    free(ext);
    nnc_free(tmp[0]);
    nnc_free(tmp[1]);
    return rc;
}

const nnc_op nnc_op_resize = {"Resize", 1, 4, 1, 1, rs_create, rs_infer, rs_run, rs_destroy, 0};
const nnc_op nnc_op_upsample = {"Upsample", 1, 2, 1, 1, rs_create, rs_infer, rs_run, rs_destroy, 0};
