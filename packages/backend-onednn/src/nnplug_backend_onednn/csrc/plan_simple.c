/* The layout-keeping ops run as one oneDNN primitive each: pools, Resize, element-wise,
 * Softmax, LRN, BatchNormalization, binary ops and Concat; and LRN over nhwc
 * values of the backend's own. */
#define _GNU_SOURCE
#include <string.h>

#include "plan.h"
#include "nhwc.h"

static int src_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    return input_arg_any(b, s, DNNL_ARG_SRC, op->in[0], pd, dnnl_query_src_md, 0);
}

static int bn_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    static const int args[4] = {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
    if (src_inputs(b, op, pd, s)) return 1;
    for (int i = 0; i < 4; i++)
        if (plain_arg(b, s, args[i], op->in[i + 1], plain_md(1, DIMS(op->in[i + 1]), 1))) return 1;
    return 0;
}

/* A per-channel multiply-add: x, the scales (op->w) and, for the post-op, the shifts (op->b). */
static int affine_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    if (input_arg_any(b, s, DNNL_ARG_SRC_0, op->in[0], pd, dnnl_query_src_md, 0)) return 1;
    if (s < 0) return 0;
    const_dnnl_memory_desc_t cmd = query(pd, dnnl_query_src_md, 1);
    int sb = new_buf(b, B_CONST, 0, op->w, 0), tb = new_buf(b, B_CONST, 0, op->b, 0);
    return sb < 0 || tb < 0 || add_arg(b, s, DNNL_ARG_SRC_1, sb, cmd) ||
           add_arg(b, s, DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, tb, cmd);
}

/* The full-shaped operand is src0 (the other one first when the op commutes and only it is);
 * src1 has src0's layout when it has the same shape, else it is read plain (broadcast). */
static int binary_operands(pb *b, const ox_op *op, int *i0, int *ofull)
{
    int r = VAL(op->out)->ndim;
    const int64_t *yd = DIMS(op->out);
    int full0 =
        VAL(op->in[0])->ndim == r && !memcmp(DIMS(op->in[0]), yd, (size_t)r * sizeof(int64_t));
    *i0 = !full0 && op->commutes ? 1 : 0;
    int o = op->in[1 - *i0];
    *ofull = VAL(o)->ndim == r && !memcmp(DIMS(o), yd, (size_t)r * sizeof(int64_t));
    return o;
}

static int binary_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    int i0, ofull, o = binary_operands(b, op, &i0, &ofull);
    if (input_arg_any(b, s, DNNL_ARG_SRC_0, op->in[i0], pd, dnnl_query_src_md, 0)) return 1;
    if (ofull) return input_arg_any(b, s, DNNL_ARG_SRC_1, o, pd, dnnl_query_src_md, 1);
    return plain_arg(b, s, DNNL_ARG_SRC_1, o, clone_md(query(pd, dnnl_query_src_md, 1)));
}

/* The inputs of a Concat that hold elements (a KV cache's first step concatenates an empty
 * past): the ones its primitive takes. Returns their count, at least 1 when the result is not
 * empty. */
static int concat_sources(pb *b, const ox_op *op, int *vals)
{
    int n = 0;
    for (int i = 0; i < op->nin; i++)
        if (!ox_value_empty(b->g, b->dims, op->in[i])) vals[n++] = op->in[i];
    return n;
}

static int concat_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    int vals[MAXIN], n = concat_sources(b, op, vals);
    for (int i = 0; i < n; i++)
        if (input_arg_any(b, s, DNNL_ARG_MULTIPLE_SRC + i, vals[i], pd, dnnl_query_src_md, i))
            return 1;
    return 0;
}


/* The layout of value v an op is tried with: 0 where it is, 1 nhwc (4-D only) in v's data
 * type, 2 plain float32 (a bf16 value converted: oneDNN has no jit binary op from bf16 to
 * float32). */
static dnnl_memory_desc_t layout(pb *b, int v, int r, int attempt)
{
    if (attempt == 0) return clone_md(home(b, v));
    if (attempt == 1) return typed_md(4, DIMS(v), md_type(home(b, v)), dnnl_acdb);
    return value_plain(b, v, r);
}

/* op's result in data type dt, in the layout its primitive picks (a binary op's: its first
 * input's). */
static dnnl_memory_desc_t result_md(pb *b, const ox_op *op, dnnl_data_type_t dt)
{
    return typed_md(VAL(op->out)->ndim, DIMS(op->out), dt, dnnl_format_tag_any);
}

static int blocked(const_dnnl_memory_desc_t md)
{
    int nblks = 0;
    return D(dnnl_memory_desc_query)(md, dnnl_query_inner_nblks_s32, &nblks) == dnnl_success &&
           nblks > 0;
}

/* Value v (rank 4) reordered into nhwc, which becomes the layout its readers keep: the pool
 * after a network's first convolution (see build_conv) runs in that convolution's blocked
 * layout, and the ops after it go back to the one layout of the rest. */
static int home_nhwc(pb *b, int v)
{
    dnnl_memory_desc_t md = typed_md(4, DIMS(v), md_type(home(b, v)), dnnl_acdb);
    int buf, rc = !md || get_view(b, v, md, &buf);
    md_free(md);
    if (rc) return 1;
    ox_view t = b->views[v][0];
    for (int i = 1; i < b->nviews[v]; i++)
        if (b->views[v][i].buf == buf) {
            b->views[v][0] = b->views[v][i];
            b->views[v][i] = t;
        }
    return 0;
}

/* ---- LRN on nhwc values (nhwc.h) ------------------------------------------------------------ */

static int is_nhwc(pb *b, int v)
{
    if (VAL(v)->ndim != 4 || !b->nviews[v]) return 0;
    dnnl_memory_desc_t md = tag_md(4, DIMS(v), dnnl_acdb);
    int eq = md && D(dnnl_memory_desc_equal)(md, home(b, v));
    md_free(md);
    return eq;
}

static int lrn_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    ox_lrn_nhwc_run(cfg, ptrs[0], ptrs[1]);
    return -1;
}

/* Whether op is an LRN the backend runs itself: of an nhwc value, with beta 0.75. oneDNN's fast
 * LRN is nchw only, which cost a reorder there and one back (ZFNet's first LRN, 96 x 109 x 109,
 * 0.9 ms each way at 2 threads; ZFNet and Inception v1 run 5-10% faster without them). */
static int nhwc_lrn_fits(pb *b, const ox_op *op)
{
    return !b->dry && op->kind == OP_LRN && !op->npost && op->beta == 0.75f &&
           DIMS(op->in[0])[1] <= LRN_MAXC && (op->size - 1) / 2 <= 56 && is_nhwc(b, op->in[0]) &&
           dl_avx2_fma();
}

static int build_nhwc_lrn(pb *b, const ox_op *op)
{
    const int64_t *yd = DIMS(op->out);
    int x = op->in[0], dbuf, reorder_out, s;
    ox_lrn_nhwc *l = owned_cfg(b, sizeof *l);
    if (!l) return 1;
    *l = (ox_lrn_nhwc){.pixels = yd[0] * yd[2] * yd[3],
                       .c = yd[1],
                       .half = (int)((op->size - 1) / 2),
                       .alpha_n = op->alpha / (float)op->size,
                       .bias = op->lrn_bias,
                       .threads = b->p->threads};
    const_dnnl_memory_desc_t md = home(b, x); /* nhwc: the result's layout too */
    return (dbuf = dst_buf(b, op, md, &reorder_out)) < 0 ||
           (s = fn_step(b, lrn_fn, l, RUN_ALWAYS, "nhwc lrn")) < 0 ||
           add_arg(b, s, DNNL_ARG_SRC, b->views[x][0].buf, md) ||
           add_arg(b, s, DNNL_ARG_DST, dbuf, md) || set_result(b, op, dbuf, md, reorder_out);
}

/* A layout-keeping op: with its input's layout; for pools, LRN and Resize, whose plain-layout
 * kernels are slow, then nhwc unless a jit kernel takes the first; last plain (if oneDNN
 * refuses the others or has only its reference kernel for them). */
int build_simple(pb *b, const ox_op *op)
{
    int x = op->in[0];
    int r = VAL(op->out)->ndim;
    const int64_t *yd = DIMS(op->out);
    int picky = (op->kind == OP_POOL || op->kind == OP_LRN || op->kind == OP_RESIZE) && r == 4;
    if (nhwc_lrn_fits(b, op)) return build_nhwc_lrn(b, op);
    if (op->kind == OP_SOFTMAX && !op->logsm && op->axis == r - 1 && op->npost == 0)
        return build_own_softmax(b, op);
    for (int attempt = 0; attempt < 3; attempt++) {
        if (attempt == 1 && !picky) continue;
        if (op->kind == OP_SOFTMAX && attempt < 2) continue; /* plain: see add_softmax_nan_rows */
        dnnl_memory_desc_t src = layout(b, x, r, attempt), dst = NULL;
        dnnl_memory_desc_t src1 = NULL, srcs[MAXIN] = {0};
        dnnl_primitive_attr_t a = op_attr(b, op);
        dnnl_primitive_desc_t pd = NULL;
        dnnl_status_t st = dnnl_out_of_memory;
        inputs_fn fn = src_inputs;
        if (!a || !src) goto next;
        switch (op->kind) {
        case OP_POOL: {
            const int64_t *xd = DIMS(x);
            int64_t ker[2], pl[2] = {0, 0}, pr[2] = {0, 0};
            ox_op tmp = *op;
            if (op->global) {
                ker[0] = tmp.ker[0] = xd[2];
                ker[1] = tmp.ker[1] = xd[3];
                tmp.st[0] = tmp.st[1] = 1;
                tmp.dil[0] = tmp.dil[1] = 1;
            } else if (ox_window(op, xd + 2, yd + 2, pl, pr, b->e)) {
                D(dnnl_primitive_attr_destroy)(a);
                md_free(src);
                return 1;
            } else {
                ker[0] = op->ker[0];
                ker[1] = op->ker[1];
            }
            dnnl_alg_kind_t alg = op->maxpool ? dnnl_pooling_max
                                  : op->incl  ? dnnl_pooling_avg_include_padding
                                              : dnnl_pooling_avg_exclude_padding;
            dnnl_dims_t S = {tmp.st[0], tmp.st[1]}, K = {ker[0], ker[1]},
                        DL = {tmp.dil[0] - 1, tmp.dil[1] - 1}, PL = {pl[0], pl[1]},
                        PR = {pr[0], pr[1]};
            dst = result_md(b, op, md_type(src)); /* its input's type (plan_bf16.c) */
            if (dst)
                st = D(dnnl_pooling_forward_primitive_desc_create)(
                    &pd, ox_engine(), dnnl_forward_inference, alg, src, dst, S, K, DL, PL, PR, a);
            break;
        }
        case OP_RESIZE:
            dst = result_md(b, op, md_type(src));
            if (dst)
                st = D(dnnl_resampling_forward_primitive_desc_create)(
                    &pd, ox_engine(), dnnl_forward_inference, op->alg, NULL, src, dst, a);
            break;
        case OP_ELTWISE:
            st = D(dnnl_eltwise_forward_primitive_desc_create)(
                &pd, ox_engine(), dnnl_forward_inference,
                strict_relu(b, op->alg, op->alpha) ? dnnl_eltwise_elu : op->alg, src, src,
                op->alpha, op->beta, a);
            break;
        case OP_SOFTMAX:
            st = D(dnnl_softmax_forward_primitive_desc_create)(
                &pd, ox_engine(), dnnl_forward_inference,
                op->logsm ? dnnl_softmax_log : dnnl_softmax_accurate, src, src, (int)op->axis, a);
            break;
        case OP_LRN:
            st = D(dnnl_lrn_forward_primitive_desc_create)(
                &pd, ox_engine(), dnnl_forward_inference, dnnl_lrn_across_channels, src, src,
                op->size, op->alpha, op->beta, op->lrn_bias, a);
            break;
        case OP_BN: {
            if (op->w) { /* per-channel multiply-add (see bn_affine): x * s, then + t as a post-op */
                int64_t cd[MAXR];
                for (int i = 0; i < r; i++) cd[i] = i == 1 ? op->oc : 1;
                src1 = plain_md(r, cd, r);
                dst = result_md(b, op, md_type(src)); /* its input's type (plan_bf16.c) */
                D(dnnl_primitive_attr_destroy)(a);
                a = src1 ? op_attr_for(b, op, src1, dnnl_f32) : NULL;
                if (a && dst)
                    st = D(dnnl_binary_primitive_desc_create)(&pd, ox_engine(), dnnl_binary_mul,
                                                              src, src1, dst, a);
                fn = affine_inputs;
                break;
            }
            unsigned flags = dnnl_use_global_stats | dnnl_use_scale | dnnl_use_shift;
            st = D(dnnl_batch_normalization_forward_primitive_desc_create)(
                &pd, ox_engine(), dnnl_forward_inference, src, src, op->eps, flags, a);
            fn = bn_inputs;
            break;
        }
        case OP_BINARY: {
            int i0, ofull, o = binary_operands(b, op, &i0, &ofull);
            md_free(src);
            src = layout(b, op->in[i0], r, attempt);
            src1 = ofull ? clone_md(src) : value_plain(b, o, r);
            if (src && src1)
                st = D(dnnl_binary_primitive_desc_create)(&pd, ox_engine(), op->alg, src, src1, src,
                                                          a);
            fn = binary_inputs;
            break;
        }
        case OP_CONCAT: {
            /* its inputs converted to its result's type where they have another */
            dnnl_data_type_t dt = bf16_result(b, op) ? dnnl_bf16 : dnnl_f32;
            int ok = 1, vals[MAXIN], n = concat_sources(b, op, vals);
            for (int i = 0; i < n && ok; i++) {
                dnnl_memory_desc_t md = layout(b, vals[i], r, attempt);
                ok = md && (srcs[i] = retyped_md(b, vals[i], md, dt));
                md_free(md);
            }
            dst = result_md(b, op, dt);
            if (ok && dst)
                st = D(dnnl_concat_primitive_desc_create)(&pd, ox_engine(), dst, n, (int)op->axis,
                                                          (const_dnnl_memory_desc_t *)srcs, a);
            fn = concat_inputs;
            break;
        }
        default: break;
        }
    next:
        md_free(src);
        md_free(dst);
        md_free(src1);
        for (int i = 0; i < MAXIN; i++) md_free(srcs[i]);
        if (a) D(dnnl_primitive_attr_destroy)(a);
        if (st == dnnl_success && attempt < 2 && ((picky && !fast_impl(pd)) || ref_impl(pd))) {
            D(dnnl_primitive_desc_destroy)(pd);
            continue;
        }
        if (st == dnnl_success) {
            if (op->kind == OP_SOFTMAX) return finish(b, op, pd, fn) || add_softmax_nan_rows(b, op);
            if (op->kind == OP_POOL && r == 4 && !b->dry && op->out != b->g->out &&
                blocked(home(b, x)))
                return finish(b, op, pd, fn) || home_nhwc(b, op->out);
            return finish(b, op, pd, fn);
        }
    }
    return ox_fail(b->e, "node '%s' (%s): oneDNN has no primitive for it", op->name, op->op_type);
}
