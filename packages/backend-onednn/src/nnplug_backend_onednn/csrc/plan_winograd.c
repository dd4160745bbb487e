/* Winograd convolutions (winograd.h): F(2x2, 3x3) with a batched matmul for the products and a
 * direct convolution for inputs holding a NaN or an infinity. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "winograd.h"

/* Whether op runs as Winograd F(2x2, 3x3): a 3x3, stride-1, ungrouped convolution of 64 or
 * more input and output channels (multiples of 8) with an output plane of 100 pixels or more,
 * whose post-ops are Relu, LeakyRelu, Clip or a residual sum, on a CPU with AVX2 and FMA.
 * Measured against oneDNN's brgemm convolution on the layers of the zoo's models (1 and 2
 * threads): 1.4-1.7x faster from 64 channels on planes of 13x13 and more; at 7x7 (the 2x2
 * tiles cover 8x8) or with fewer channels, where the transforms' memory traffic weighs more,
 * it gains under 10% or loses. NNPLUG_ONEDNN_WINOGRAD=0 turns it off; a strict plan never
 * takes it. */
int winograd_fits(pb *b, const ox_op *op)
{
    const char *env = getenv("NNPLUG_ONEDNN_WINOGRAD");
    if ((env && !strcmp(env, "0")) || !dl_avx2_fma() || b->g->strict)
        return 0; /* strict: see ox_winograd_shape */
    if (bf16_operands(b)) return 0; /* oneDNN's bf16 convolution on AMX is faster */
    const int64_t *xd = DIMS(op->in[0]), *yd = DIMS(op->out);
    if (VAL(op->in[0])->ndim != 4 || !ox_winograd_shape(op)) return 0;
    if (xd[1] % 8 || op->oc % 8 || xd[1] < 64 || op->oc < 64 || yd[2] * yd[3] < 100 ||
        op->npost > WINO_MAXPOST)
        return 0;
    for (int i = 0; i < op->npost; i++) {
        const ox_post *q = &op->post[i];
        if (q->kind != POST_SUM && q->alg != dnnl_eltwise_relu && q->alg != dnnl_eltwise_clip)
            return 0;
    }
    return 1;
}

static int wino_input_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    return ox_wino_input(cfg, ptrs[0], ptrs[1]);
}

static int wino_output_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    ox_wino_output(cfg, ptrs[0], nptrs > 2 ? ptrs[2] : NULL, ptrs[1]);
    return -1;
}

/* op as Winograd F(2x2, 3x3): the input transform of its nhwc input, the 16 products as one
 * batched matmul (the transformed weights packed once in the layout it picks), the output
 * transform with the bias and post-ops into its nhwc result; and `direct`, the nhwc
 * convolution, run instead of the product and output transform when the input transform
 * finds a NaN or an infinity. When oneDNN has no fast batched matmul, `direct` alone. */
int build_winograd(pb *b, const ox_op *op, dnnl_primitive_desc_t direct, const int64_t *pl)
{
    ox_plan *p = b->p;
    const int64_t *xd = DIMS(op->in[0]), *yd = DIMS(op->out);
    ox_wino *w = owned_cfg(b, sizeof *w);
    if (!w) {
        D(dnnl_primitive_desc_destroy)(direct);
        return 1;
    }
    *w = (ox_wino){.n = xd[0],
                   .h = xd[2],
                   .w = xd[3],
                   .ic = xd[1],
                   .oh = yd[2],
                   .ow = yd[3],
                   .oc = op->oc,
                   .pt = pl[0],
                   .pl = pl[1],
                   .threads = p->threads};
    for (int i = 0; i < op->npost; i++) {
        const ox_post *q = &op->post[i];
        w->post[w->npost++] = q->kind == POST_SUM ? (ox_wpost){WPOST_SUM, 0.f, 0.f}
                              : q->alg == dnnl_eltwise_relu
                                  ? (ox_wpost){WPOST_RELU, q->alpha, 0.f}
                                  : (ox_wpost){WPOST_CLIP, q->alpha, q->beta};
    }
    ox_wino_init(w);
    int64_t T = ox_wino_tiles(w), vd[3] = {16, T, w->ic}, ud[3] = {16, w->ic, w->oc},
            md3[3] = {16, T, w->oc};
    dnnl_memory_desc_t xmd = tag_md(4, xd, dnnl_acdb), ymd = tag_md(4, yd, dnnl_acdb),
                       vmd = plain_md(3, vd, 3), mmd = plain_md(3, md3, 3), uany = any_md(3, ud),
                       bmd = plain_md(1, &w->oc, 1);
    dnnl_primitive_attr_t a = plain_attr();
    dnnl_primitive_desc_t mpd = NULL;
    float *u = NULL;
    int rc = 1, xbuf, vbuf, mbuf, ubuf, dbuf, reorder_out, s;
    if (!xmd || !ymd || !vmd || !mmd || !uany || !bmd || !a) {
        ox_fail(b->e, "out of memory");
        goto done;
    }
    if (D(dnnl_matmul_primitive_desc_create)(&mpd, ox_engine(), vmd, uany, NULL, mmd, a) !=
            dnnl_success ||
        !fast_impl(mpd)) {
        rc = finish(b, op, direct, conv_inputs);
        direct = NULL;
        goto done;
    }
    /* V = B^T d B */
    if (get_view(b, op->in[0], xmd, &xbuf) || (vbuf = arena_buf(b, vmd)) < 0 ||
        (mbuf = arena_buf(b, mmd)) < 0)
        goto done;
    if ((s = fn_step(b, wino_input_fn, w, RUN_ALWAYS, "winograd input transform")) < 0 ||
        add_arg(b, s, DNNL_ARG_SRC, xbuf, xmd) || add_arg(b, s, DNNL_ARG_DST, vbuf, vmd))
        goto done;
    /* M = V . U */
    u = malloc((size_t)(16 * w->ic * w->oc) * sizeof *u);
    if (!u) {
        ox_fail(b->e, "out of memory");
        goto done;
    }
    ox_wino_weights(op->w, w->oc, w->ic, u, w->threads);
    const_dnnl_memory_desc_t umd = query(mpd, dnnl_query_weights_md, 0);
    if (pack(b, u, plain_md(3, ud, 3), umd, &ubuf) || (s = new_step(b, mpd)) < 0) goto done;
    p->steps[s].when = RUN_FINITE;
    if (add_arg(b, s, DNNL_ARG_SRC, vbuf, vmd) || add_arg(b, s, DNNL_ARG_WEIGHTS, ubuf, umd) ||
        add_arg(b, s, DNNL_ARG_DST, mbuf, mmd))
        goto done;
    /* y = A^T M A with the bias and post-ops; or the direct convolution */
    if (conv_inputs(b, op, direct, -2) || sum_dst(b, op, ymd, &dbuf, &reorder_out)) goto done;
    if ((s = fn_step(b, wino_output_fn, w, RUN_FINITE, "winograd output transform")) < 0 ||
        add_arg(b, s, DNNL_ARG_SRC, mbuf, mmd) || add_arg(b, s, DNNL_ARG_DST, dbuf, ymd))
        goto done;
    if (op->b || (op->nin == 3 && op->in[2] >= 0)) {
        int bb;
        if (op->b) bb = new_buf(b, B_CONST, 0, op->b, 0);
        else if (plain_buf(b, op->in[2], &bb)) goto done;
        if (add_arg(b, s, DNNL_ARG_BIAS, bb, bmd)) goto done;
    }
    if ((s = new_step(b, direct)) < 0) goto done;
    p->steps[s].when = RUN_NONFINITE;
    if (conv_inputs(b, op, direct, s) ||
        add_arg(b, s, DNNL_ARG_DST, dbuf, query(direct, dnnl_query_dst_md, 0)))
        goto done;
    rc = set_result(b, op, dbuf, ymd, reorder_out);
done:
    free(u);
    md_free(xmd);
    md_free(ymd);
    md_free(vmd);
    md_free(mmd);
    md_free(uany);
    md_free(bmd);
    if (a) D(dnnl_primitive_attr_destroy)(a);
    if (mpd) D(dnnl_primitive_desc_destroy)(mpd);
    if (direct) D(dnnl_primitive_desc_destroy)(direct);
    return rc;
}
