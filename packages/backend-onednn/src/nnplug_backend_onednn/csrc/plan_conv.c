/* Conv: oneDNN's convolution in the layout that runs fastest (nhwc, blocked, or a first
 * convolution's plain input), with Winograd (plan_winograd.c) where it fits. */
#define _GNU_SOURCE

#include "plan.h"

int conv_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    if (input_arg_any(b, s, DNNL_ARG_SRC, op->in[0], pd, dnnl_query_src_md, 0)) return 1;
    if (s == -1) return 0;
    if (s == -2) {
        int64_t g = op->group, wd[5] = {g, op->oc / g, op->wdims[1], op->wdims[2], op->wdims[3]};
        t_packed.bbuf = -1;
        if (pack(b, op->w, g > 1 ? plain_md(5, wd, 5) : plain_md(4, op->wdims, 4),
                 query(pd, dnnl_query_weights_md, 0), &t_packed.wbuf))
            return 1;
        if (op->b) t_packed.bbuf = new_buf(b, B_CONST, 0, op->b, 0);
        return 0;
    }
    if (add_arg(b, s, DNNL_ARG_WEIGHTS, t_packed.wbuf, query(pd, dnnl_query_weights_md, 0)))
        return 1;
    if (t_packed.bbuf >= 0)
        return add_arg(b, s, DNNL_ARG_BIAS, t_packed.bbuf, query(pd, dnnl_query_weights_md, 1));
    if (op->nin == 3 && op->in[2] >= 0)
        return plain_arg(b, s, DNNL_ARG_BIAS, op->in[2],
                         clone_md(query(pd, dnnl_query_weights_md, 1)));
    return 0;
}

/* Whether value v is read by one op only, a pool (which keeps a blocked layout, see
 * build_simple), and is not the kernel's output. */
static int pool_reads_only(pb *b, int v)
{
    if (v == b->g->out || VAL(v)->consumers != 1) return 0;
    for (int i = 0; i < b->g->norder; i++) {
        const ox_op *o = &b->g->ops[b->g->order[i]];
        for (int j = 0; j < o->nin; j++)
            if (o->in[j] == v) return o->kind == OP_POOL && j == 0;
    }
    return 0;
}

/* The convolution of op (padding pl, pr) with nhwc data (attempt 0), the layouts oneDNN
 * picks (1), or plain nchw input and the output layout oneDNN picks (2); NULL with *st set
 * when oneDNN has none. */
static dnnl_primitive_desc_t conv_pd(pb *b, const ox_op *op, int attempt, const int64_t *pl,
                                     const int64_t *pr, dnnl_status_t *st)
{
    const int64_t *xd = DIMS(op->in[0]), *yd = DIMS(op->out);
    int64_t g = op->group, wd[5] = {g, op->oc / g, op->wdims[1], op->wdims[2], op->wdims[3]};
    int has_bias = op->b || (op->nin == 3 && op->in[2] >= 0);
    dnnl_dims_t S = {op->st[0], op->st[1]}, DL = {op->dil[0] - 1, op->dil[1] - 1},
                PL = {pl[0], pl[1]}, PR = {pr[0], pr[1]};
    dnnl_memory_desc_t src = attempt == 2 ? tag_md(4, xd, dnnl_abcd)
                             : attempt    ? any_md(4, xd)
                                          : tag_md(4, xd, dnnl_acdb);
    dnnl_memory_desc_t dst = attempt ? any_md(4, yd) : tag_md(4, yd, dnnl_acdb);
    dnnl_memory_desc_t w = g > 1 ? any_md(5, wd) : any_md(4, op->wdims);
    dnnl_memory_desc_t bias = has_bias ? plain_md(1, &op->oc, 1) : NULL;
    dnnl_primitive_attr_t a = op_attr(b, op);
    dnnl_primitive_desc_t pd = NULL;
    *st = a && src && w && dst ? D(dnnl_convolution_forward_primitive_desc_create)(
                                     &pd, ox_engine(), dnnl_forward_inference,
                                     dnnl_convolution_direct, src, w, bias, dst, S, DL, PL, PR, a)
                               : dnnl_out_of_memory;
    md_free(src);
    md_free(w);
    md_free(dst);
    md_free(bias);
    if (a) D(dnnl_primitive_attr_destroy)(a);
    return *st == dnnl_success ? pd : NULL;
}


int build_conv(pb *b, const ox_op *op)
{
    dnnl_status_t st = dnnl_unimplemented;
    int64_t pl[2], pr[2];
    if (ox_window(op, DIMS(op->in[0]) + 2, DIMS(op->out) + 2, pl, pr, b->e)) return 1;
    /* A network's first convolution (up to 4 input channels, an image) reads its plain nchw
     * input as it is, into a blocked layout: oneDNN's kernel for that splits its rows between
     * threads (SqueezeNet's 3 -> 64 at 224x224, 2 threads: 0.14 ms, against 0.35 from nhwc)
     * and the input needs no reorder.
     * Else nhwc: one layout for every convolution keeps the nodes between them (pools,
     * binary ops, concats) in it too; kept when oneDNN runs it on a jit or brgemm kernel.
     * Else the layouts oneDNN picks (format_tag::any). */
    static const int order[3] = {
        2, 0, 1}; /* conv_pd's attempts, the first one only for a first convolution */
    int x = op->in[0], first = DIMS(x)[1] <= 4 && b->nviews[x] && is_plain(b, x, home(b, x)) &&
                               pool_reads_only(b, op->out);
    for (int i = first ? 0 : 1; i < 3; i++) {
        int attempt = order[i];
        dnnl_primitive_desc_t pd = conv_pd(b, op, attempt, pl, pr, &st);
        if (!pd) continue;
        if (attempt != 1 && !fast_impl(pd)) {
            D(dnnl_primitive_desc_destroy)(pd);
            continue;
        }
        if (attempt == 0 && !b->dry && winograd_fits(b, op)) return build_winograd(b, op, pd, pl);
        return finish(b, op, pd, conv_inputs);
    }
    return ox_fail(b->e, "node '%s' (Conv): oneDNN has no convolution for it (status %d)", op->name,
                   (int)st);
}
