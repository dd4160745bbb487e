/* Conv: oneDNN's convolution in the layout that runs fastest (nhwc, blocked, or a first
 * convolution's plain input), with Winograd (plan_winograd.c) where it fits; an int8
 * convolution where its input is quantized and its weights are int8 (below). */
#define _GNU_SOURCE

#include <math.h>
#include <string.h>

#include "dl.h"
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

/* ---- int8 convolutions ------------------------------------------------------------------------
 * A QDQ model's Conv, DequantizeLinear(QuantizeLinear(x)) * DequantizeLinear(w int8), reads a
 * value on an integer grid, (q - z) * s (an OP_QDQ's result, graph.c fake_quant), and weights
 * w * sw (graph.c const_dequant). It runs on oneDNN's int8 convolution: q is taken back from
 * the grid (q = round(v / s) + z: v / s is within 2^-15 of an integer), the products are summed
 * exactly in int32 (VNNI), and the sum comes out as float32, sum * s * sw + bias, then the
 * post-ops, as the float convolution gives it without its rounding; the QuantizeLinear after
 * it requantizes that as before. onnxruntime requantizes the int32 sum in one multiply instead,
 * so a result that falls within a rounding of a half step may land one step away. */

typedef struct {
    int64_t n;
    float s, z, lo, hi;
    int threads;
} q8cfg;

typedef struct {
    const q8cfg *q;
    const float *x;
    void *y;
    int s8;
} q8job;

static void quantize_part(void *arg)
{
    const q8job *j = arg;
    const q8cfg *q = j->q;
    int64_t t0, t1;
    dl_share(q->n, &t0, &t1);
    for (int64_t i = t0; i < t1; i++) { /* as plan_loops.c's OP_QDQ rounds */
        float v = j->x[i] / q->s;
        v = v < -1024.f ? -1024.f : v > 1024.f ? 1024.f : v;
        float r = (v + 12582912.f) - 12582912.f + q->z;
        r = r != r ? q->lo : r < q->lo ? q->lo : r > q->hi ? q->hi : r;
        if (j->s8) ((int8_t *)j->y)[i] = (int8_t)r;
        else ((uint8_t *)j->y)[i] = (uint8_t)r;
    }
}

static int quantize_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const q8cfg *q = cfg;
    q8job j = {q, ptrs[0], ptrs[1], q->lo < 0.f};
    dl_parallel(quantize_part, &j, q->n >= 32768 ? q->threads : 1);
    return -1;
}

/* What an int8 convolution of op reads: its input's grid (scale, zero point, type). */
typedef struct {
    float s;
    int32_t z;
    int s8;
} grid;

/* Whether op runs as an int8 convolution: int8 weights, its input made by an OP_QDQ in the
 * group, element-wise post-ops only, a constant bias or none, on a CPU with VNNI (without it
 * oneDNN's int8 sums go through saturating 16-bit pairs). */
static int int8_input(pb *b, const ox_op *op, grid *gr)
{
    if (!op->w8 || (op->nin == 3 && op->in[2] >= 0 && !op->b) ||
        (!__builtin_cpu_supports("avx512vnni") && !__builtin_cpu_supports("avxvnni")))
        return 0;
    for (int i = 0; i < op->npost; i++)
        if (op->post[i].kind != POST_ELTWISE) return 0;
    for (int i = 0; i < b->g->nop; i++) {
        const ox_op *o = &b->g->ops[i];
        if (!o->dead && o->kind == OP_QDQ && o->out == op->in[0]) {
            *gr = (grid){o->qscale[1], o->qzp[1], o->qs8};
            return gr->s > 0.f && isfinite(gr->s);
        }
    }
    return 0;
}

static __thread struct {
    grid gr;
    int qbuf, wbuf, bbuf, ssbuf, wsbuf, zbuf;
} t_q8;

static int conv8_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    if (s == -1) return 0;
    const_dnnl_memory_desc_t smd = query(pd, dnnl_query_src_md, 0),
                             wmd = query(pd, dnnl_query_weights_md, 0);
    int64_t one = 1, ns = op->nwscale;
    dnnl_memory_desc_t s1 = typed_md(1, &one, dnnl_f32, dnnl_a),
                       sw = typed_md(1, &ns, dnnl_f32, dnnl_a),
                       z1 = typed_md(1, &one, dnnl_s32, dnnl_a);
    int rc = 1;
    if (!s1 || !sw || !z1) goto done;
    if (s == -2) {
        int x = op->in[0], xbuf, qs;
        dnnl_memory_desc_t xmd = tag_md(4, DIMS(x), dnnl_acdb);
        q8cfg *q = owned_cfg(b, sizeof *q);
        float *ss = owned_cfg(b, sizeof(float)), *ws = owned_cfg(b, (size_t)ns * sizeof(float));
        int32_t *zp = owned_cfg(b, sizeof(int32_t));
        int bad = !xmd || !q || !ss || !ws || !zp || get_view(b, x, xmd, &xbuf);
        if (!bad) {
            *q = (q8cfg){(int64_t)(D(dnnl_memory_desc_get_size)(xmd) / 4), t_q8.gr.s,
                         (float)t_q8.gr.z, t_q8.gr.s8 ? -128.f : 0.f, t_q8.gr.s8 ? 127.f : 255.f,
                         b->p->threads};
            *ss = t_q8.gr.s;
            *zp = t_q8.gr.z;
            memcpy(ws, op->wscale, (size_t)ns * sizeof(float));
            t_q8.qbuf = arena_buf(b, smd);
            bad = t_q8.qbuf < 0 ||
                  (qs = fn_step(b, quantize_fn, q, RUN_ALWAYS, "quantize to int8")) < 0 ||
                  add_arg(b, qs, DNNL_ARG_SRC, xbuf, xmd) ||
                  add_arg(b, qs, DNNL_ARG_DST, t_q8.qbuf, smd);
        }
        md_free(xmd);
        if (bad) goto done;
        int64_t g = op->group, wd[5] = {g, op->oc / g, op->wdims[1], op->wdims[2], op->wdims[3]};
        dnnl_memory_desc_t wplain = g > 1 ? typed_md(5, wd, dnnl_s8, dnnl_abcde)
                                          : typed_md(4, op->wdims, dnnl_s8, dnnl_abcd);
        if (pack(b, (const float *)op->w8, wplain, wmd, &t_q8.wbuf)) goto done;
        t_q8.bbuf = op->b ? new_buf(b, B_CONST, 0, op->b, 0) : -1;
        t_q8.ssbuf = new_buf(b, B_CONST, 0, ss, 4);
        t_q8.wsbuf = new_buf(b, B_CONST, 0, ws, (uint64_t)ns * 4);
        t_q8.zbuf = new_buf(b, B_CONST, 0, zp, 4);
        rc = t_q8.ssbuf < 0 || t_q8.wsbuf < 0 || t_q8.zbuf < 0;
        goto done;
    }
    rc = add_arg(b, s, DNNL_ARG_SRC, t_q8.qbuf, smd) ||
         add_arg(b, s, DNNL_ARG_WEIGHTS, t_q8.wbuf, wmd) ||
         (t_q8.bbuf >= 0 &&
          add_arg(b, s, DNNL_ARG_BIAS, t_q8.bbuf, query(pd, dnnl_query_weights_md, 1))) ||
         add_arg(b, s, DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, t_q8.ssbuf, s1) ||
         add_arg(b, s, DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, t_q8.wsbuf, sw) ||
         (t_q8.gr.z && add_arg(b, s, DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, t_q8.zbuf, z1));
done:
    md_free(s1);
    md_free(sw);
    md_free(z1);
    return rc;
}

/* The int8 convolution of op with nhwc data, or NULL when oneDNN has no fast one for it (then
 * the float one runs). */
static dnnl_primitive_desc_t conv8_pd(pb *b, const ox_op *op, const grid *gr, const int64_t *pl,
                                      const int64_t *pr)
{
    const int64_t *xd = DIMS(op->in[0]), *yd = DIMS(op->out);
    int64_t g = op->group, wd[5] = {g, op->oc / g, op->wdims[1], op->wdims[2], op->wdims[3]};
    dnnl_dims_t S = {op->st[0], op->st[1]}, DL = {op->dil[0] - 1, op->dil[1] - 1},
                PL = {pl[0], pl[1]}, PR = {pr[0], pr[1]};
    dnnl_memory_desc_t src = typed_md(4, xd, gr->s8 ? dnnl_s8 : dnnl_u8, dnnl_acdb),
                       w = g > 1 ? typed_md(5, wd, dnnl_s8, dnnl_format_tag_any)
                                 : typed_md(4, op->wdims, dnnl_s8, dnnl_format_tag_any),
                       dst = tag_md(4, yd, dnnl_acdb),
                       bias = op->b ? plain_md(1, &op->oc, 1) : NULL;
    dnnl_primitive_attr_t a = op_attr(b, op);
    int wmask = op->nwscale > 1 ? (g > 1 ? 3 : 1) : 0;
    dnnl_primitive_desc_t pd = NULL;
    int ok = a && src && w && dst && (!op->b || bias) &&
             D(dnnl_primitive_attr_set_scales_mask)(a, DNNL_ARG_SRC, 0) == dnnl_success &&
             D(dnnl_primitive_attr_set_scales_mask)(a, DNNL_ARG_WEIGHTS, wmask) == dnnl_success &&
             (!gr->z || D(dnnl_primitive_attr_set_zero_points_mask)(a, DNNL_ARG_SRC, 0) ==
                            dnnl_success) &&
             D(dnnl_convolution_forward_primitive_desc_create)(
                 &pd, ox_engine(), dnnl_forward_inference, dnnl_convolution_direct, src, w, bias,
                 dst, S, DL, PL, PR, a) == dnnl_success;
    md_free(src);
    md_free(w);
    md_free(dst);
    md_free(bias);
    if (a) D(dnnl_primitive_attr_destroy)(a);
    if (ok && fast_impl(pd)) return pd;
    if (pd) D(dnnl_primitive_desc_destroy)(pd);
    return NULL;
}

int build_conv(pb *b, const ox_op *op)
{
    dnnl_status_t st = dnnl_unimplemented;
    int64_t pl[2], pr[2];
    if (ox_window(op, DIMS(op->in[0]) + 2, DIMS(op->out) + 2, pl, pr, b->e)) return 1;
    dnnl_primitive_desc_t pd8 = int8_input(b, op, &t_q8.gr) ? conv8_pd(b, op, &t_q8.gr, pl, pr)
                                                            : NULL;
    if (pd8) return finish(b, op, pd8, conv8_inputs);
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
