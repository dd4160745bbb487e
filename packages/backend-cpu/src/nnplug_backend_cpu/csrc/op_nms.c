/* NonMaxSuppression (float32 boxes and scores, both box encodings). Greedy per (batch,
 * class): candidates above score_threshold by score (ties: lower box index first), a box kept
 * unless its IoU with a kept box exceeds iou_threshold; as onnxruntime. NaN scores (undefined
 * in the spec) sort after every finite score, so the finite boxes keep their order. The output
 * count depends on the data, so infer runs the selection to size the output and run repeats it. */
#include "nnc.h"
#include "ops.h"

#include <stdlib.h>

typedef struct {
    int center;
} nms_state;

static void nms_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int nms_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0}, i64[] = {DT_I64, 0};
    TRY(nnc_check_dtype(n, 0, f32, e));
    TRY(nnc_check_dtype(n, 1, f32, e));
    TRY(nnc_check_dtype(n, 2, i64, e));
    TRY(nnc_check_dtype(n, 3, f32, e));
    TRY(nnc_check_dtype(n, 4, f32, e));
    nms_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int64_t c;
    TRY(nnc_attr_int(n, "center_point_box", 0, &c, e));
    if (c != 0 && c != 1) return nnc_node_fail(e, n, "attribute 'center_point_box' must be 0 or 1");
    s->center = (int)c;
    return NNC_OK;
}

typedef struct {
    float score;
    int64_t idx;
} cand;

/* A total order (qsort needs one): descending score, NaN last, then box index. */
static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    int xn = isnan(x->score), yn = isnan(y->score);
    if (xn != yn) return xn - yn;
    if (!xn && x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static void corners(const float *b, int center, float *y0, float *x0, float *y1, float *x1)
{
    if (center) {
        float hw = b[2] / 2, hh = b[3] / 2;
        *x0 = b[0] - hw;
        *x1 = b[0] + hw;
        *y0 = b[1] - hh;
        *y1 = b[1] + hh;
    } else {
        *y0 = b[0] < b[2] ? b[0] : b[2];
        *y1 = b[0] < b[2] ? b[2] : b[0];
        *x0 = b[1] < b[3] ? b[1] : b[3];
        *x1 = b[1] < b[3] ? b[3] : b[1];
    }
}

static int suppress(const float *a, const float *b, int center, float thr)
{
    float ay0, ax0, ay1, ax1, by0, bx0, by1, bx1;
    corners(a, center, &ay0, &ax0, &ay1, &ax1);
    corners(b, center, &by0, &bx0, &by1, &bx1);
    float ix0 = ax0 > bx0 ? ax0 : bx0, ix1 = ax1 < bx1 ? ax1 : bx1;
    if (ix1 <= ix0) return 0;
    float iy0 = ay0 > by0 ? ay0 : by0, iy1 = ay1 < by1 ? ay1 : by1;
    if (iy1 <= iy0) return 0;
    float inter = (ix1 - ix0) * (iy1 - iy0);
    if (inter <= 0) return 0;
    float a1 = (ax1 - ax0) * (ay1 - ay0), a2 = (bx1 - bx0) * (by1 - by0), uni = a1 + a2 - inter;
    if (a1 <= 0 || a2 <= 0 || uni <= 0) return 0;
    return inter / uni > thr;
}

static int scalar_in(nnc_node *n, nnc_tensor *const *in, int i, int dt, void *out, nnc_err *e)
{
    if (i >= n->nin || !in[i] || nnc_numel(in[i]) == 0) return 0;
    if (in[i]->dtype != dt || nnc_numel(in[i]) != 1 || in[i]->ndim > 1)
        return nnc_node_fail(e, n, "input %d must be a single %s value", i, nnc_dtname(dt)) ? -1
                                                                                            : -1;
    memcpy(out, in[i]->data, nnc_dtsize(dt));
    return 1;
}

/* Runs the selection; writes rows into sel (may be NULL) and returns the count in *count. */
static int nms_select(nnc_node *n, nnc_tensor *const *in, int64_t *sel, int64_t *count, nnc_err *e)
{
    const nms_state *s = n->state;
    const nnc_tensor *bx = in[0], *sc = in[1];
    if (bx->dtype != DT_F32 || sc->dtype != DT_F32)
        return nnc_node_fail(e, n, "boxes and scores must be float32");
    if (bx->ndim != 3 || bx->dims[2] != 4)
        return nnc_node_fail(e, n, "boxes must have shape [batch, boxes, 4]");
    if (sc->ndim != 3 || sc->dims[0] != bx->dims[0] || sc->dims[2] != bx->dims[1])
        return nnc_node_fail(e, n,
                             "scores must have shape [batch, classes, boxes] matching the boxes");
    int64_t maxout = 0;
    float iou = 0.f, sthr = 0.f;
    int has_s;
    if (scalar_in(n, in, 2, DT_I64, &maxout, e) < 0) return NNC_ERR;
    if (scalar_in(n, in, 3, DT_F32, &iou, e) < 0) return NNC_ERR;
    if ((has_s = scalar_in(n, in, 4, DT_F32, &sthr, e)) < 0) return NNC_ERR;
    /* written so that NaN fails too */
    if (!(iou >= 0.f && iou <= 1.f))
        return nnc_node_fail(e, n, "input 3 'iou_threshold' must be in [0, 1], got %g",
                             (double)iou);
    if (maxout < 0) maxout = 0;
    int64_t B = bx->dims[0], C = sc->dims[1], N = bx->dims[1], k = 0;
    cand *cs = malloc((size_t)(N ? N : 1) * sizeof(cand));
    int64_t *kept = malloc((size_t)(N ? N : 1) * sizeof(int64_t));
    if (!cs || !kept) {
        free(cs);
        free(kept);
        return nnc_node_fail(e, n, "out of memory");
    }
    const float *boxes = bx->data, *scores = sc->data;
    for (int64_t b = 0; b < B && maxout > 0; b++)
        for (int64_t c = 0; c < C; c++) {
            const float *cls = scores + (b * C + c) * N, *bb = boxes + b * N * 4;
            int64_t nc = 0, nk = 0;
            for (int64_t i = 0; i < N; i++)
                if (!has_s || cls[i] > sthr) {
                    cs[nc].score = cls[i];
                    cs[nc].idx = i;
                    nc++;
                }
            qsort(cs, (size_t)nc, sizeof(cand), cand_cmp);
            for (int64_t i = 0; i < nc && nk < maxout; i++) {
                int keep = 1;
                for (int64_t q = 0; q < nk && keep; q++)
                    if (suppress(bb + cs[i].idx * 4, bb + kept[q] * 4, s->center, iou)) keep = 0;
                if (!keep) continue;
                kept[nk++] = cs[i].idx;
                if (sel) {
                    sel[3 * k] = b;
                    sel[3 * k + 1] = c;
                    sel[3 * k + 2] = cs[i].idx;
                }
                k++;
            }
        }
    free(cs);
    free(kept);
    *count = k;
    return NNC_OK;
}

static int nms_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int64_t k;
    TRY(nms_select(n, in, NULL, &k, e));
    out->dtype = DT_I64;
    out->ndim = 2;
    out->dims[0] = k;
    out->dims[1] = 3;
    return NNC_OK;
}

static int nms_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    int64_t k;
    /* the output was sized by infer from the same inputs */
    int64_t *tmp = malloc((size_t)(out->dims[0] * 3 + 3) * sizeof(int64_t));
    if (!tmp) return nnc_node_fail(e, n, "out of memory");
    int rc = nms_select(n, in, NULL, &k, e);
    if (rc == NNC_OK && k != out->dims[0])
        rc = nnc_node_fail(e, n, "the selection changed between sizing and running");
    if (rc == NNC_OK) rc = nms_select(n, in, tmp, &k, e);
    if (rc == NNC_OK) memcpy(out->data, tmp, (size_t)(k * 3) * sizeof(int64_t));
    free(tmp);
    return rc;
}

const nnc_op nnc_op_nonmaxsuppression = {"NonMaxSuppression", 2,         5,       1,           1,
                                         nms_create,          nms_infer, nms_run, nms_destroy, 0};
