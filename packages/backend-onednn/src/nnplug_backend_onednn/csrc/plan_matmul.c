/* MatMul and Gemm: a packed-weights 1x1 convolution or inner product where the weights are a
 * constant matrix, else oneDNN's matmul (reading a Transpose's strided view in place). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* The operands of a batched MatMul read in the layout they have (a Transpose's strided view:
 * Q, K^T and V of attention) rather than reordered to row-major first; see build_matmul. */
static __thread int t_mm_strided[2];

/* Value v's own layout when a matmul of rank r can read it: the same rank and plain strides
 * (no blocking; a permuted row-major tensor) from its buffer's start, else NULL. A part of a
 * Split or Slice (a submemory, its offset in the descriptor) is not read in place: oneDNN's
 * gemm matmul read V's part of GPT-2-style Q, K, V from the buffer's start. */
static dnnl_memory_desc_t strided_operand_md(pb *b, int v, int r)
{
    if (VAL(v)->ndim != r || !b->nviews[v]) return NULL;
    const_dnnl_memory_desc_t md = home(b, v);
    int nd;
    int64_t dims[MAXR], strides[MAXR];
    if (strided_of(md, &nd, dims, strides) || is_plain(b, v, md)) return NULL;
    return clone_md(md);
}

static int matmul_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    const ox_value *av = VAL(op->in[0]), *wv = VAL(op->in[1]);
    int r = VAL(op->out)->ndim;
    const int64_t *ad = DIMS(op->in[0]), *wd = DIMS(op->in[1]);
    if (s == -1) return 0;
    if (t_mm_strided[0]
            ? input_arg_any(b, s, DNNL_ARG_SRC, op->in[0], pd, dnnl_query_src_md, 0)
            : plain_arg(b, s, DNNL_ARG_SRC, op->in[0],
                        op->gemm ? matrix_md(ad, 2, op->ta) : plain_md(av->ndim, ad, r)))
        return 1;
    if (wv->cdata) {
        if (s == -2) {
            if (pack(b, wv->cdata, op->gemm ? matrix_md(wd, 2, op->tb) : plain_md(wv->ndim, wd, r),
                     query(pd, dnnl_query_weights_md, 0), &t_packed.wbuf))
                return 1;
        } else if (add_arg(b, s, DNNL_ARG_WEIGHTS, t_packed.wbuf,
                           query(pd, dnnl_query_weights_md, 0)))
            return 1;
    } else if (t_mm_strided[1]
                   ? input_arg_any(b, s, DNNL_ARG_WEIGHTS, op->in[1], pd, dnnl_query_weights_md, 0)
                   : plain_arg(b, s, DNNL_ARG_WEIGHTS, op->in[1],
                               op->gemm ? matrix_md(wd, 2, op->tb) : plain_md(wv->ndim, wd, r)))
        return 1;
    if (op->gemm && op->nin == 3 && op->in[2] >= 0)
        return plain_arg(b, s, DNNL_ARG_BIAS, op->in[2],
                         plain_md(VAL(op->in[2])->ndim, DIMS(op->in[2]), 2));
    if (op->b && s >= 0) { /* a folded bias Add */
        int bb = new_buf(b, B_CONST, 0, op->b, 0);
        return bb < 0 || add_arg(b, s, DNNL_ARG_BIAS, bb, query(pd, dnnl_query_weights_md, 1));
    }
    return 0;
}

/* A MatMul / Gemm whose weights are a constant matrix runs as a 1x1 convolution over nhwc data
 * or as an inner product: the activations (M rows of K, M the product of the leading dims) are
 * an nhwc image of 1 x K x 1 x M (or an M x K matrix), the result an nhwc 1 x N x 1 x M (M x N),
 * both the row-major bytes they are. oneDNN's brgemm kernels for these keep the weights packed
 * and take the bias, element-wise post-ops and the residual `sum`; its gemm-based matmul
 * repacks the weights on every call. */
static int conv_matmul_dims(pb *b, const ox_op *op, int64_t *M, int64_t *K, int64_t *N)
{
    const ox_value *av = VAL(op->in[0]), *wv = VAL(op->in[1]);
    const int64_t *ad = DIMS(op->in[0]), *wd = DIMS(op->in[1]);
    if (!wv->cdata || wv->ndim != 2 || op->ta || (op->gemm && op->nin == 3 && op->in[2] >= 0))
        return 0;
    *M = 1;
    for (int i = 0; i < av->ndim - 1; i++) *M *= ad[i];
    *K = ad[av->ndim - 1];
    *N = op->tb ? wd[0] : wd[1];
    return 1;
}

static __thread int
    t_ip; /* the primitive being built is an inner product (else a 1x1 convolution) */

static int conv_matmul_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    int64_t M, K, N;
    if (!conv_matmul_dims(b, op, &M, &K, &N))
        return ox_fail(b->e, "internal: node '%s' is not a packed matmul", op->name);
    int64_t xd[4] = {1, K, 1, M}, x2[2] = {M, K};
    int nd = t_ip ? 2 : 4;
    if (s == -1) return 0;
    dnnl_memory_desc_t xmd = t_ip ? plain_md(2, x2, 2) : tag_md(4, xd, dnnl_acdb);
    if (bf16_operands(b)
            ? converted_arg(b, s, DNNL_ARG_SRC, op->in[0], xmd, query(pd, dnnl_query_src_md, 0))
            : plain_arg(b, s, DNNL_ARG_SRC, op->in[0], xmd))
        return 1;
    if (s == -2) {
        /* the (K, N) matrix (transB: (N, K)) as oihw weights N x K x 1 x 1 (or N x K) */
        dnnl_dims_t wd = {N, K, 1, 1}, ws = {op->tb ? K : 1, op->tb ? 1 : N, 1, 1};
        dnnl_memory_desc_t src = NULL;
        if (D(dnnl_memory_desc_create_with_strides)(&src, nd, wd, dnnl_f32, ws) != dnnl_success)
            return ox_fail(b->e, "oneDNN could not create a memory descriptor");
        t_packed.bbuf = -1;
        if (pack(b, VAL(op->in[1])->cdata, src, query(pd, dnnl_query_weights_md, 0),
                 &t_packed.wbuf))
            return 1;
        if (op->b) t_packed.bbuf = new_buf(b, B_CONST, 0, op->b, 0);
        return 0;
    }
    if (add_arg(b, s, DNNL_ARG_WEIGHTS, t_packed.wbuf, query(pd, dnnl_query_weights_md, 0)))
        return 1;
    if (t_packed.bbuf >= 0)
        return add_arg(b, s, DNNL_ARG_BIAS, t_packed.bbuf, query(pd, dnnl_query_weights_md, 1));
    return 0;
}

int packed_dense(pb *b, const ox_op *op)
{
    int64_t M, K, N;
    return conv_matmul_dims(b, op, &M, &K, &N);
}

/* One attempt: the inner product (ip) or the 1x1 convolution, when oneDNN has a jit / brgemm
 * kernel for it; NULL else. With bf16 operands the result is bf16 where plan_bf16.c says so. */
static dnnl_primitive_desc_t packed_matmul_pd(pb *b, const ox_op *op, int64_t M, int64_t K,
                                              int64_t N, int ip)
{
    int64_t xd[4] = {1, K, 1, M}, yd[4] = {1, N, 1, M}, wd[4] = {N, K, 1, 1}, x2[2] = {M, K},
            y2[2] = {M, N};
    dnnl_dims_t S = {1, 1}, DL = {0, 0}, P0 = {0, 0};
    /* bf16 operands (the activations reordered to them, the weights packed in bf16 once)
     * where the products are bf16 anyway; see plan_conv.c conv_pd */
    dnnl_data_type_t dt = bf16_operands(b) ? dnnl_bf16 : dnnl_f32;
    dnnl_data_type_t yt = bf16_result(b, op) ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t src = ip ? typed_md(2, x2, dt, dnnl_ab) : typed_md(4, xd, dt, dnnl_acdb),
                       dst = ip ? typed_md(2, y2, yt, dnnl_ab) : typed_md(4, yd, yt, dnnl_acdb),
                       w = typed_md(ip ? 2 : 4, wd, dt, dnnl_format_tag_any);
    dnnl_memory_desc_t bias = op->b ? plain_md(1, &N, 1) : NULL;
    dnnl_primitive_attr_t a = op_attr_for(b, op, NULL, dt);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = !(a && src && dst && w && (bias || !op->b)) ? dnnl_out_of_memory
                       : ip ? D(dnnl_inner_product_forward_primitive_desc_create)(
                                  &pd, ox_engine(), dnnl_forward_inference, src, w, bias, dst, a)
                            : D(dnnl_convolution_forward_primitive_desc_create)(
                                  &pd, ox_engine(), dnnl_forward_inference, dnnl_convolution_direct,
                                  src, w, bias, dst, S, DL, P0, P0, a);
    md_free(src);
    md_free(dst);
    md_free(w);
    md_free(bias);
    if (a) D(dnnl_primitive_attr_destroy)(a);
    if (st != dnnl_success) return NULL;
    if (!fast_impl(pd)) {
        D(dnnl_primitive_desc_destroy)(pd);
        return NULL;
    }
    return pd;
}

#define IP_MIN_ROWS 128 /* see build_conv_matmul */
#define IP_ROW_BLOCK 64 /* the rows of oneDNN 3.2's AMX inner product's blocks */

/* Whether the inner product is the faster under the bf16 hint for M rows: 128 or more, in
 * blocks of 64 rows of which the last is not mostly empty. A partial last block costs a
 * whole one (197 x 768 -> 3072 at 2 threads: 6.4-7.2 ms for eight layers, 256 rows 5.8), and
 * the convolution does not pay it (ViT-B/16's 197 rows: the whole model 17% faster as
 * convolutions); up to a sixteenth more rows than M (Whisper's 1500 in 1536) is still the
 * faster as an inner product. */
static int ip_rows(int64_t M)
{
    int64_t blocked = (M + IP_ROW_BLOCK - 1) / IP_ROW_BLOCK * IP_ROW_BLOCK;
    return M >= IP_MIN_ROWS && blocked * 16 <= M * 17;
}

/* 1 when built as a packed-weights primitive, 0 when oneDNN has none fast for it (then its
 * matmul), -1 on error. In float32 the 1x1 convolution is the faster, except on AMD CPUs where
 * the inner dimension is much longer than the output rows: BERT's 3072 -> 768 ran at a third
 * of the speed as a convolution on a Zen CPU, not as an inner product. On an Intel Xeon the
 * convolution was the faster there too (1 thread: BERT-base's 3072 -> 768 49 ms against 55,
 * ViT-B/16's 70 against 83; level at 2 threads). With bf16 operands on AMX the inner product
 * is, from about 128 rows: 5-20% on the transformers' shapes (see docs/backends/onednn.md,
 * Dense layers), unless the rows leave its last block of 64 mostly empty (ip_rows). With fewer rows a layer streams its weights more than it multiplies (AMX does
 * ~2 TFLOP/s, memory ~20 GB/s: 2 flops per weight byte and row), and the convolution's weight
 * layout streamed faster: wav2vec2-base's 49 rows 3072 -> 768 0.20 ms against 0.35. */
static int build_conv_matmul(pb *b, const ox_op *op)
{
    int64_t M, K, N;
    if (!conv_matmul_dims(b, op, &M, &K, &N)) return 0;
    /* NNPLUG_ONEDNN_DENSE=convolution / inner_product (read when a plan is made) picks one */
    const char *pick = getenv("NNPLUG_ONEDNN_DENSE");
    int first_ip = pick && !strcmp(pick, "inner_product") ? 1
                   : pick && !strcmp(pick, "convolution")
                       ? 0
                       : (bf16_operands(b) && ip_rows(M)) || (K > 2 * N && dl_cpu_amd());
    dnnl_primitive_desc_t pd = NULL;
    for (int attempt = 0; attempt < 2 && !pd; attempt++) {
        t_ip = attempt ? !first_ip : first_ip;
        pd = packed_matmul_pd(b, op, M, K, N, t_ip);
    }
    if (!pd) return 0;
    /* the result's bytes read as the value's plain layout, in the primitive's data type; a
     * bf16 result also as the primitive wrote it, the layout a packed reader asks for */
    const_dnnl_memory_desc_t pmd = query(pd, dnnl_query_dst_md, 0);
    dnnl_data_type_t yt = dnnl_f32;
    D(dnnl_memory_desc_query)(pmd, dnnl_query_data_type, &yt);
    dnnl_memory_desc_t as = plain_typed_md(VAL(op->out)->ndim, DIMS(op->out), yt),
                       wrote = yt == dnnl_bf16 ? clone_md(pmd) : NULL;
    int rc = !as || (yt == dnnl_bf16 && !wrote);
    if (rc) {
        D(dnnl_primitive_desc_destroy)(pd);
        ox_fail(b->e, "oneDNN could not create a memory descriptor");
    } else {
        rc = finish_as(b, op, pd, conv_matmul_inputs, as) ||
             (wrote && add_view(b, op->out, wrote, b->dry ? 0 : b->views[op->out][0].buf));
    }
    md_free(as);
    md_free(wrote);
    return rc ? -1 : 1;
}

int build_matmul(pb *b, const ox_op *op)
{
    int viaconv = build_conv_matmul(b, op);
    if (viaconv) return viaconv < 0;

    const ox_value *av = VAL(op->in[0]), *wv = VAL(op->in[1]);
    int r = VAL(op->out)->ndim;
    const int64_t *ad = DIMS(op->in[0]), *wd = DIMS(op->in[1]), *yd = DIMS(op->out);
    int64_t K = op->ta ? ad[av->ndim - 2] : ad[av->ndim - 1], N = yd[r - 1];
    dnnl_memory_desc_t amd = op->gemm ? matrix_md(ad, 2, op->ta) : plain_md(av->ndim, ad, r), wmd;
    if (wv->cdata) {
        dnnl_dims_t d;
        for (int i = 0; i < r; i++) d[i] = i < r - wv->ndim ? 1 : wd[i - (r - wv->ndim)];
        d[r - 2] = K;
        d[r - 1] = N;
        wmd = any_md(r, d);
    } else {
        wmd = op->gemm ? matrix_md(wd, 2, op->tb) : plain_md(wv->ndim, wd, r);
    }
    int c = op->gemm && op->nin == 3 && op->in[2] >= 0;
    dnnl_memory_desc_t ymd = plain_md(r, yd, r),
                       cmd = c       ? plain_md(VAL(op->in[2])->ndim, DIMS(op->in[2]), 2)
                             : op->b ? plain_md(1, &N, r)
                                     : NULL;
    dnnl_primitive_attr_t a = op_attr(b, op);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_out_of_memory;
    /* A permuted activation (a Transpose's view) is read in place when oneDNN has a gemm or
     * brgemm kernel for its strides: the reorder it saves costs as much as the product. */
    t_mm_strided[0] = t_mm_strided[1] = 0;
    if (!op->gemm) {
        dnnl_memory_desc_t sa = strided_operand_md(b, op->in[0], r),
                           sw = wv->cdata ? NULL : strided_operand_md(b, op->in[1], r);
        if ((sa || sw) && a && ymd &&
            D(dnnl_matmul_primitive_desc_create)(&pd, ox_engine(), sa ? sa : amd, sw ? sw : wmd,
                                                 cmd, ymd, a) == dnnl_success) {
            if (ref_impl(pd)) {
                D(dnnl_primitive_desc_destroy)(pd);
                pd = NULL;
            } else {
                st = dnnl_success;
                t_mm_strided[0] = sa != NULL;
                t_mm_strided[1] = sw != NULL;
            }
        }
        md_free(sa);
        md_free(sw);
    }
    if (!pd)
        st = a && amd && wmd && ymd
                 ? D(dnnl_matmul_primitive_desc_create)(&pd, ox_engine(), amd, wmd, cmd, ymd, a)
                 : dnnl_out_of_memory;
    md_free(amd);
    md_free(wmd);
    md_free(ymd);
    md_free(cmd);
    if (a) D(dnnl_primitive_attr_destroy)(a);
    if (st != dnnl_success)
        return ox_fail(b->e, "node '%s' (%s): oneDNN has no matmul for it", op->name, op->op_type);
    return finish(b, op, pd, matmul_inputs);
}
