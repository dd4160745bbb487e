/* A strict plan's max pooling, LRN and linear Resize: steps of the backend's own over plain
 * NCHW that keep a NaN where onnxruntime does (strict.h). */
#define _GNU_SOURCE

#include "plan.h"
#include "strict.h"

static int maxpool_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    ox_maxpool_run(cfg, ptrs[0], ptrs[1]);
    return -1;
}

static int strict_lrn_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    ox_lrn_run(cfg, ptrs[0], ptrs[1]);
    return -1;
}

/* A step of the backend's own, fn on cfg, from op's 4-D input in plain NCHW to its result in
 * plain NCHW (a strict plan's max pooling, LRN and linear Resize). */
static int nchw_step(pb *b, const ox_op *op, ox_fn fn, const void *cfg, const char *what)
{
    int x = op->in[0], xbuf, dbuf, reorder_out, s;
    dnnl_memory_desc_t md = value_plain(b, op->out, 4), xmd = value_plain(b, x, 4);
    int rc = 1;
    if (!md || !xmd) ox_fail(b->e, "oneDNN could not create a memory descriptor");
    else if (b->dry) rc = add_view(b, op->out, md, 0);
    else if (cfg && !plain_buf(b, x, &xbuf) && (dbuf = dst_buf(b, op, md, &reorder_out)) >= 0 &&
             (s = fn_step(b, fn, cfg, RUN_ALWAYS, what)) >= 0)
        rc = add_arg(b, s, DNNL_ARG_SRC, xbuf, xmd) || add_arg(b, s, DNNL_ARG_DST, dbuf, md) ||
             set_result(b, op, dbuf, md, reorder_out);
    md_free(md);
    md_free(xmd);
    return rc;
}

static int strict_resize_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    ox_resize_linear_run(cfg, ptrs[0], ptrs[1]);
    return -1;
}

/* MaxPool or GlobalMaxPool in a strict graph: ox_maxpool_run (strict.h). */
int build_strict_maxpool(pb *b, const ox_op *op)
{
    const int64_t *xd = DIMS(op->in[0]), *yd = DIMS(op->out);
    int64_t pl[2] = {0, 0}, pr[2] = {0, 0};
    if (!op->global && ox_window(op, xd + 2, yd + 2, pl, pr, b->e)) return 1;
    ox_maxpool *m = owned_cfg(b, sizeof *m);
    if (m)
        *m = (ox_maxpool){.planes = xd[0] * xd[1],
                          .h = xd[2],
                          .w = xd[3],
                          .oh = yd[2],
                          .ow = yd[3],
                          .kh = op->global ? xd[2] : op->ker[0],
                          .kw = op->global ? xd[3] : op->ker[1],
                          .sh = op->global ? 1 : op->st[0],
                          .sw = op->global ? 1 : op->st[1],
                          .dh = op->global ? 1 : op->dil[0],
                          .dw = op->global ? 1 : op->dil[1],
                          .pt = pl[0],
                          .pl = pl[1]};
    return nchw_step(b, op, maxpool_fn, m, "maxpool keeping nan");
}

/* LRN in a strict graph: ox_lrn_run (strict.h). */
int build_strict_lrn(pb *b, const ox_op *op)
{
    const int64_t *xd = DIMS(op->in[0]);
    ox_lrn *l = owned_cfg(b, sizeof *l);
    if (l)
        *l = (ox_lrn){.n = xd[0],
                      .c = xd[1],
                      .pixels = xd[2] * xd[3],
                      .size = op->size,
                      .alpha = op->alpha,
                      .beta = op->beta,
                      .bias = op->lrn_bias};
    return nchw_step(b, op, strict_lrn_fn, l, "lrn keeping the formula");
}

/* A linear Resize in a strict graph: ox_resize_linear_run (strict.h), its scales those
 * onnxruntime takes (the given whole factors, else output / input). */
int build_strict_resize(pb *b, const ox_op *op)
{
    const int64_t *xd = DIMS(op->in[0]), *yd = DIMS(op->out);
    ox_resize *r = owned_cfg(b, sizeof *r);
    if (r)
        *r = (ox_resize){.planes = xd[0] * xd[1],
                         .h = xd[2],
                         .w = xd[3],
                         .oh = yd[2],
                         .ow = yd[3],
                         .sh = op->rscale[0] ? (float)op->rscale[0] : (float)yd[2] / (float)xd[2],
                         .sw = op->rscale[1] ? (float)op->rscale[1] : (float)yd[3] / (float)xd[3]};
    return nchw_step(b, op, strict_resize_fn, r, "linear resize keeping nan");
}
