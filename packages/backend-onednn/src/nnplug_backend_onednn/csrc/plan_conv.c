/* Conv: oneDNN's convolution in the layout that runs fastest (nhwc, blocked, or a first
 * convolution's plain input), with Winograd (plan_winograd.c) where it fits; an int8
 * convolution where its input is quantized and its weights are int8 (below). */
#define _GNU_SOURCE

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dl.h"
#include "plan.h"

/* md (4-D, of a 1-D convolution) as the same bytes under the 3-D dims of value v: a new
 * descriptor, or NULL with a message. */
static dnnl_memory_desc_t line_md(pb *b, int v, const_dnnl_memory_desc_t md)
{
    dnnl_memory_desc_t r = NULL;
    if (D(dnnl_memory_desc_reshape)(&r, md, 3, DIMS(v)) != dnnl_success) {
        ox_fail(b->e, "oneDNN cannot read the layout of '%s' as 3-D", VAL(v)->name);
        return NULL;
    }
    return r;
}

/* A 1-D convolution's input: the value's view in the layout the primitive reads (its 4-D
 * descriptor), found or made under the value's own 3-D dims. */
static int line_input(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    if (s == -1) return 0;
    const_dnnl_memory_desc_t md = query(pd, dnnl_query_src_md, 0);
    dnnl_memory_desc_t md3 = md ? line_md(b, op->in[0], md) : NULL;
    int buf, rc = !md3 || get_view(b, op->in[0], md3, &buf);
    md_free(md3);
    return rc || (s >= 0 && add_arg(b, s, DNNL_ARG_SRC, buf, md));
}

int conv_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    if (op->line ? line_input(b, op, pd, s)
                 : input_arg_any(b, s, DNNL_ARG_SRC, op->in[0], pd, dnnl_query_src_md, 0))
        return 1;
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
    const_dnnl_memory_desc_t bmd = query(pd, dnnl_query_weights_md, 1);
    if (t_packed.bbuf >= 0 && D(dnnl_memory_desc_get_size)(bmd))
        return add_arg(b, s, DNNL_ARG_BIAS, t_packed.bbuf, bmd);
    if (t_packed.bbuf >= 0) { /* the bias as the first post-op (conv_pd) */
        int arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1;
        return add_arg(b, s, arg, t_packed.bbuf, query(pd, dnnl_query_exec_arg_md, arg));
    }
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

/* op's convolution (deconv: its deconvolution) of these layouts (freed here) with op's
 * attribute; NULL with *st set when oneDNN has none. */
static dnnl_primitive_desc_t
conv_like_pd(pb *b, const ox_op *op, int deconv, dnnl_memory_desc_t src, dnnl_memory_desc_t w,
             dnnl_memory_desc_t bias, dnnl_memory_desc_t dst, const int64_t *S, const int64_t *DL,
             const int64_t *PL, const int64_t *PR, dnnl_memory_desc_t add, dnnl_status_t *st)
{
    dnnl_primitive_attr_t a = src ? op_attr_for(b, op, add, md_type(src)) : NULL;
    dnnl_primitive_desc_t pd = NULL;
    *st = !(a && src && w && dst) ? dnnl_out_of_memory
          : deconv ? D(dnnl_deconvolution_forward_primitive_desc_create)(
                         &pd, ox_engine(), dnnl_forward_inference, dnnl_deconvolution_direct, src,
                         w, bias, dst, S, DL, PL, PR, a)
                   : D(dnnl_convolution_forward_primitive_desc_create)(
                         &pd, ox_engine(), dnnl_forward_inference, dnnl_convolution_direct, src, w,
                         bias, dst, S, DL, PL, PR, a);
    md_free(src);
    md_free(w);
    md_free(dst);
    md_free(bias);
    md_free(add);
    if (a) D(dnnl_primitive_attr_destroy)(a);
    return *st == dnnl_success ? pd : NULL;
}

/* The convolution of op (padding pl, pr) with nhwc data (attempt 0), the layouts oneDNN
 * picks (1), or plain nchw input and the output layout oneDNN picks (2); NULL with *st set
 * when oneDNN has none. */
static dnnl_primitive_desc_t conv_pd(pb *b, const ox_op *op, int attempt, const int64_t *pl,
                                     const int64_t *pr, dnnl_status_t *st)
{
    int64_t xd[4], yd[4];
    ox_dims4(op, DIMS(op->in[0]), xd);
    ox_dims4(op, DIMS(op->out), yd);
    int64_t g = op->group, wd[5] = {g, op->oc / g, op->wdims[1], op->wdims[2], op->wdims[3]};
    int has_bias = op->b || (op->nin == 3 && op->in[2] >= 0);
    dnnl_dims_t S = {op->st[0], op->st[1]}, DL = {op->dil[0] - 1, op->dil[1] - 1},
                PL = {pl[0], pl[1]}, PR = {pr[0], pr[1]};
    /* operands in bf16 (the input reordered to it, the weights packed in it once) where the
     * products are bf16 anyway: f32 weights would be converted again on every run. Not for a
     * plain input (a network's first convolution, 3 channels: no AMX kernel takes it), whose
     * result is float32 then */
    dnnl_data_type_t dt = bf16_operands(b) && attempt != 2 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t src = typed_md(4, xd, dt,
                                      attempt == 2 ? dnnl_abcd
                                      : attempt    ? dnnl_format_tag_any
                                                   : dnnl_acdb);
    dnnl_memory_desc_t dst =
        typed_md(4, yd, dt == dnnl_bf16 && bf16_result(b, op) ? dnnl_bf16 : dnnl_f32,
                 attempt ? dnnl_format_tag_any : dnnl_acdb);
    dnnl_memory_desc_t w = g > 1 ? typed_md(5, wd, dt, dnnl_format_tag_any)
                                 : typed_md(4, op->wdims, dt, dnnl_format_tag_any);
    /* a depthwise convolution from and to bf16 takes its constant float32 bias as its first
     * post-op (the same f32 add): oneDNN's brgemm depthwise kernel takes only a bias of the
     * data's type and, refused, leaves it to one a quarter slower (MobileNetV2) */
    int64_t cd[4] = {1, op->oc, 1, 1};
    int bias_post = op->b && g > 1 && g == op->oc && op->wdims[1] == 1 && dt == dnnl_bf16 &&
                    md_type(dst) == dnnl_bf16;
    dnnl_memory_desc_t bias = has_bias && !bias_post ? plain_md(1, &op->oc, 1) : NULL,
                       add = bias_post ? plain_md(4, cd, 4) : NULL;
    return conv_like_pd(b, op, 0, src, w, bias, dst, S, DL, PL, PR, add, st);
}

/* ---- int8 convolutions ------------------------------------------------------------------------
 * A QDQ model's Conv, DequantizeLinear(QuantizeLinear(x)) * DequantizeLinear(w int8), reads a
 * value on an integer grid, (q - z) * s, and weights w * sw (graph.c const_dequant). It runs on
 * oneDNN's int8 convolution: the products of the integers are summed exactly in int32 (VNNI)
 * and scaled by s * sw, plus the bias and the post-ops. Its input's integers are the ones the
 * int8 Conv before it wrote, as they are; else (the model's first Conv, one after a float op)
 * taken back from the grid, q = round(v / s) + z (v / s is within 2^-15 of an integer). Where
 * a QuantizeLinear -> DequantizeLinear follows (graph.c requantize), the convolution rounds its
 * result to that grid itself and writes the integers; a float view, (q - z) * s, is made for
 * readers that are not int8 convolutions. onnxruntime requantizes the int32 sum in one
 * multiply instead, so a result within a rounding of a half step may land one step away. */

typedef struct {
    int64_t n;
    float s, z, lo, hi;
    int threads;
} q8cfg;

typedef struct {
    const q8cfg *q;
    void *x, *y;
} q8job;

/* x on the grid (an OP_QDQ's result, or a grid value's float view) back to its integers: x / s
 * is within 2^-15 of an integer, so multiplying by 1 / s finds the same one. */
WIDE_LOOP static void quantize_part(void *arg)
{
    const q8job *j = arg;
    const q8cfg *q = j->q;
    const float *x = j->x;
    const float inv = 1.f / q->s, z = q->z, lo = q->lo, hi = q->hi;
    int64_t t0, t1;
    dl_share(q->n, &t0, &t1);
    /* by blocks: the rounding into int32 first, then the narrowing, two loops gcc vectorises
     * (one loop from float to bytes it keeps scalar) */
    int32_t q8[256];
    int8_t *ys = j->y;
    uint8_t *yu = j->y;
    for (int64_t i0 = t0; i0 < t1; i0 += 256) {
        int64_t m = t1 - i0 < 256 ? t1 - i0 : 256;
        for (int64_t i = 0; i < m; i++) { /* rounded as plan_loops.c's OP_QDQ rounds */
            float v = x[i0 + i] * inv;
            v = v < -1024.f ? -1024.f : v > 1024.f ? 1024.f : v;
            float r = (v + 12582912.f) - 12582912.f + z;
            q8[i] = (int32_t)(r < lo ? lo : r > hi ? hi : r);
        }
        if (lo < 0.f)
            for (int64_t i = 0; i < m; i++) ys[i0 + i] = (int8_t)q8[i];
        else
            for (int64_t i = 0; i < m; i++) yu[i0 + i] = (uint8_t)q8[i];
    }
}

WIDE_LOOP static void dequantize_part(void *arg)
{
    const q8job *j = arg;
    const q8cfg *q = j->q;
    float *y = j->y;
    const float s = q->s;
    const int32_t z = (int32_t)q->z;
    int64_t t0, t1;
    dl_share(q->n, &t0, &t1);
    const int8_t *xs = j->x;
    const uint8_t *xu = j->x;
    if (q->lo < 0.f)
        for (int64_t i = t0; i < t1; i++) y[i] = (float)((int32_t)xs[i] - z) * s;
    else
        for (int64_t i = t0; i < t1; i++) y[i] = (float)((int32_t)xu[i] - z) * s;
}

/* y = (saturate(round(x / s) + z) - z) * s in place: a Conv that writes its QuantizeLinear's
 * grid run in float (a blocked layout's padding stays 0). */
WIDE_LOOP static void fake_part(void *arg)
{
    const q8job *j = arg;
    const q8cfg *q = j->q;
    float *y = j->y;
    const float s = q->s, z = q->z, lo = q->lo, hi = q->hi;
    int64_t t0, t1;
    dl_share(q->n, &t0, &t1);
    for (int64_t i = t0; i < t1; i++) {
        float v = y[i] / s;
        v = v < -1024.f ? -1024.f : v > 1024.f ? 1024.f : v;
        float r = (v + 12582912.f) - 12582912.f + z;
        r = r != r ? lo : r < lo ? lo : r > hi ? hi : r;
        y[i] = (r - z) * s;
    }
}

static int quantize_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const q8cfg *q = cfg;
    q8job j = {q, ptrs[0], ptrs[1]};
    dl_parallel(quantize_part, &j, dl_threads_for(q->n, q->threads));
    return -1;
}

static int dequantize_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const q8cfg *q = cfg;
    q8job j = {q, ptrs[0], ptrs[1]};
    dl_parallel(dequantize_part, &j, dl_threads_for(q->n, q->threads));
    return -1;
}

static int fake_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const q8cfg *q = cfg;
    q8job j = {q, ptrs[0], ptrs[0]};
    dl_parallel(fake_part, &j, dl_threads_for(q->n, q->threads));
    return -1;
}

/* An integer grid: scale, zero point, int8 or uint8. */
typedef struct {
    float s;
    int32_t z;
    int s8;
} grid;

/* A step of fn over n elements on grid gr reading buffer `from` (layout fmd) and writing `to`
 * (tmd; the same buffer for fake_fn). */
static int grid_step(pb *b, ox_fn fn, const char *what, const grid *gr, uint64_t n, int from,
                     const_dnnl_memory_desc_t fmd, int to, const_dnnl_memory_desc_t tmd)
{
    q8cfg *q = owned_cfg(b, sizeof *q);
    if (!q) return 1;
    *q = (q8cfg){(int64_t)n,   gr->s, (float)gr->z, gr->s8 ? -128.f : 0.f, gr->s8 ? 127.f : 255.f,
                 b->p->threads};
    int s = fn_step(b, fn, q, RUN_ALWAYS, what);
    return s < 0 || add_arg(b, s, DNNL_ARG_SRC, from, fmd) ||
           (fn != fake_fn && add_arg(b, s, DNNL_ARG_DST, to, tmd));
}

/* The float32 nhwc view of v, a value whose home view holds its integers (a Conv's written by
 * conv8_finish): found, or made by a dequantize step. */
int grid_float_view(pb *b, int v, int *buf, const_dnnl_memory_desc_t *md)
{
    for (int i = 0; i < b->nviews[v]; i++)
        if (md_type(b->views[v][i].md) == dnnl_f32) {
            *buf = b->views[v][i].buf;
            *md = b->views[v][i].md;
            return 0;
        }
    const ox_value *val = VAL(v);
    grid gr = {val->gscale, val->gzp, val->gs8};
    if (b->nviews[v] >= MAXVIEWS)
        return ox_fail(b->e, "internal: value '%s' has no room for a float32 view", val->name);
    dnnl_memory_desc_t fmd = tag_md(4, DIMS(v), dnnl_acdb);
    int fb = fmd ? arena_buf(b, fmd) : -1;
    int rc = fb < 0 ||
             grid_step(b, dequantize_fn, "dequantize from int8", &gr,
                       D(dnnl_memory_desc_get_size)(fmd) / 4, b->views[v][0].buf, b->views[v][0].md,
                       fb, fmd) ||
             add_view(b, v, fmd, fb);
    md_free(fmd);
    if (rc) return 1;
    *buf = fb;
    *md = b->views[v][b->nviews[v] - 1].md;
    return 0;
}

/* The grid op's input is on, when op runs as an int8 convolution: made by a QuantizeLinear ->
 * DequantizeLinear (OP_QDQ) in the group, or an int8 Conv's integers. */
static int int8_input(pb *b, const ox_op *op, grid *gr)
{
    if (!ox_int8_conv(op)) return 0;
    const ox_value *x = VAL(op->in[0]);
    if (x->grid) {
        *gr = (grid){x->gscale, x->gzp, x->gs8};
        return 1;
    }
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
    int qbuf, wbuf, bbuf, ssbuf, wsbuf, zbuf, dsbuf, dzbuf;
} t_q8;

/* The integers of op's input in layout smd: the view holding them, else quantized from its
 * float32 nhwc view. */
static int int8_source(pb *b, const ox_op *op, const_dnnl_memory_desc_t smd)
{
    int x = op->in[0], xbuf;
    for (int i = 0; i < b->nviews[x]; i++)
        if (D(dnnl_memory_desc_equal)(b->views[x][i].md, smd)) {
            t_q8.qbuf = b->views[x][i].buf;
            return 0;
        }
    dnnl_memory_desc_t xmd = tag_md(4, DIMS(x), dnnl_acdb);
    int rc = !xmd || get_view(b, x, xmd, &xbuf) || (t_q8.qbuf = arena_buf(b, smd)) < 0 ||
             grid_step(b, quantize_fn, "quantize to int8", &t_q8.gr,
                       D(dnnl_memory_desc_get_size)(xmd) / 4, xbuf, xmd, t_q8.qbuf, smd);
    md_free(xmd);
    return rc;
}

/* A copy of n 4-byte values (scales, zero points) owned by the plan: a B_CONST buffer. */
static int const_buf(pb *b, const void *data, int64_t n)
{
    void *c = owned_cfg(b, (size_t)n * 4);
    if (!c) return -1;
    memcpy(c, data, (size_t)n * 4);
    return new_buf(b, B_CONST, 0, c, (uint64_t)n * 4);
}

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
        if (int8_source(b, op, smd)) goto done;
        int64_t g = op->group, wd[5] = {g, op->oc / g, op->wdims[1], op->wdims[2], op->wdims[3]};
        dnnl_memory_desc_t wplain = g > 1 ? typed_md(5, wd, dnnl_s8, dnnl_abcde)
                                          : typed_md(4, op->wdims, dnnl_s8, dnnl_abcd);
        if (pack(b, (const float *)op->w8, wplain, wmd, &t_q8.wbuf)) goto done;
        float dscale = op->qscale[0];
        int32_t dzp = op->qzp[0];
        t_q8.bbuf = op->b ? new_buf(b, B_CONST, 0, op->b, 0) : -1;
        t_q8.ssbuf = const_buf(b, &t_q8.gr.s, 1);
        t_q8.wsbuf = const_buf(b, op->wscale, ns);
        t_q8.zbuf = const_buf(b, &t_q8.gr.z, 1);
        t_q8.dsbuf = const_buf(b, &dscale, 1);
        t_q8.dzbuf = const_buf(b, &dzp, 1);
        rc = t_q8.ssbuf < 0 || t_q8.wsbuf < 0 || t_q8.zbuf < 0 || t_q8.dsbuf < 0 || t_q8.dzbuf < 0;
        goto done;
    }
    rc = add_arg(b, s, DNNL_ARG_SRC, t_q8.qbuf, smd) ||
         add_arg(b, s, DNNL_ARG_WEIGHTS, t_q8.wbuf, wmd) ||
         (t_q8.bbuf >= 0 &&
          add_arg(b, s, DNNL_ARG_BIAS, t_q8.bbuf, query(pd, dnnl_query_weights_md, 1))) ||
         add_arg(b, s, DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, t_q8.ssbuf, s1) ||
         add_arg(b, s, DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, t_q8.wsbuf, sw) ||
         (t_q8.gr.z && add_arg(b, s, DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, t_q8.zbuf, z1)) ||
         (op->qout && add_arg(b, s, DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, t_q8.dsbuf, s1)) ||
         (op->qout && op->qzp[0] &&
          add_arg(b, s, DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, t_q8.dzbuf, z1));
done:
    md_free(s1);
    md_free(sw);
    md_free(z1);
    return rc;
}

/* The int8 convolution of op with nhwc data, or NULL when oneDNN has no fast one for it (then
 * the float one runs). Its result is float32, or the integers of op's output grid (op->qout). */
static dnnl_primitive_desc_t conv8_pd(pb *b, const ox_op *op, const grid *gr, const int64_t *pl,
                                      const int64_t *pr)
{
    const int64_t *xd = DIMS(op->in[0]), *yd = DIMS(op->out);
    int64_t g = op->group, wd[5] = {g, op->oc / g, op->wdims[1], op->wdims[2], op->wdims[3]};
    dnnl_dims_t S = {op->st[0], op->st[1]}, DL = {op->dil[0] - 1, op->dil[1] - 1},
                PL = {pl[0], pl[1]}, PR = {pr[0], pr[1]};
    dnnl_data_type_t ydt = !op->qout ? dnnl_f32 : op->qs8 ? dnnl_s8 : dnnl_u8;
    dnnl_memory_desc_t src = typed_md(4, xd, gr->s8 ? dnnl_s8 : dnnl_u8, dnnl_acdb),
                       w = g > 1 ? typed_md(5, wd, dnnl_s8, dnnl_format_tag_any)
                                 : typed_md(4, op->wdims, dnnl_s8, dnnl_format_tag_any),
                       dst = typed_md(4, yd, ydt, dnnl_acdb),
                       bias = op->b ? plain_md(1, &op->oc, 1) : NULL;
    dnnl_primitive_attr_t a = op_attr(b, op);
    int wmask = op->nwscale > 1 ? (g > 1 ? 3 : 1) : 0;
    dnnl_primitive_desc_t pd = NULL;
    int ok =
        a && src && w && dst && (!op->b || bias) &&
        D(dnnl_primitive_attr_set_scales_mask)(a, DNNL_ARG_SRC, 0) == dnnl_success &&
        D(dnnl_primitive_attr_set_scales_mask)(a, DNNL_ARG_WEIGHTS, wmask) == dnnl_success &&
        (!gr->z ||
         D(dnnl_primitive_attr_set_zero_points_mask)(a, DNNL_ARG_SRC, 0) == dnnl_success) &&
        (!op->qout || D(dnnl_primitive_attr_set_scales_mask)(a, DNNL_ARG_DST, 0) == dnnl_success) &&
        (!op->qout || !op->qzp[0] ||
         D(dnnl_primitive_attr_set_zero_points_mask)(a, DNNL_ARG_DST, 0) == dnnl_success) &&
        D(dnnl_convolution_forward_primitive_desc_create)(&pd, ox_engine(), dnnl_forward_inference,
                                                          dnnl_convolution_direct, src, w, bias,
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

/* Whether a live op other than an int8 Conv reads value v (then v needs a float32 view). */
static int float_readers(pb *b, int v)
{
    for (int i = 0; i < b->g->nop; i++) {
        const ox_op *o = &b->g->ops[i];
        if (o->dead) continue;
        for (int j = 0; j < o->nin; j++)
            if (o->in[j] == v && (j || !ox_int8_conv(o))) return 1;
    }
    return 0;
}

/* The step of an int8 Conv writing its output grid's integers (op->qout): their view, after a
 * float32 one made from them when another op reads the result, so that every reorder of the
 * value starts from float32 (its home view). */
static int conv8_finish(pb *b, const ox_op *op, dnnl_primitive_desc_t pd)
{
    int rc = 1, v = op->out, dbuf, fbuf, s;
    const_dnnl_memory_desc_t dmd = query(pd, dnnl_query_dst_md, 0);
    dnnl_memory_desc_t fmd = tag_md(4, DIMS(v), dnnl_acdb);
    grid gr = {op->qscale[0], op->qzp[0], op->qs8};
    int floats = float_readers(b, v);
    if (!fmd) goto done;
    if (b->dry) {
        rc = (floats && add_view(b, v, fmd, 0)) || add_view(b, v, dmd, 0);
        goto done;
    }
    if (conv8_inputs(b, op, pd, -2) || (dbuf = arena_buf(b, dmd)) < 0 ||
        (s = new_step(b, pd)) < 0 || conv8_inputs(b, op, pd, s) ||
        add_arg(b, s, DNNL_ARG_DST, dbuf, dmd))
        goto done;
    if (floats && ((fbuf = arena_buf(b, fmd)) < 0 ||
                   grid_step(b, dequantize_fn, "dequantize from int8", &gr,
                             D(dnnl_memory_desc_get_size)(fmd) / 4, dbuf, dmd, fbuf, fmd) ||
                   add_view(b, v, fmd, fbuf)))
        goto done;
    rc = add_view(b, v, dmd, dbuf);
done:
    md_free(fmd);
    D(dnnl_primitive_desc_destroy)(pd);
    return rc;
}

/* A Conv that writes its output grid (op->qout) run in float: its result rounded to the grid
 * in place. */
static int conv_to_grid(pb *b, const ox_op *op, int rc)
{
    if (rc || !op->qout || b->dry) return rc;
    grid gr = {op->qscale[0], op->qzp[0], op->qs8};
    const ox_view *h = &b->views[op->out][0];
    return grid_step(b, fake_fn, "quantize-dequantize", &gr,
                     D(dnnl_memory_desc_get_size)(h->md) / 4, h->buf, h->md, h->buf, h->md);
}

/* Under bf16 operands on AMX oneDNN 3.2 runs a grouped convolution on AMX only with 16 or more
 * channels a group; with fewer (RegNetY's 8) it takes its avx512 bf16 kernel, 2-4x slower
 * than AMX on k groups merged into one of block-diagonal weights, the zeros k times the
 * products (RegNetY-400MF's 104 channels in 13 groups at 28 x 28: 135 us, 53 as one group).
 * k: the fewest groups merged for which oneDNN's pick is an AMX kernel, at most 128 input
 * channels a merged group; 1 where it needs none or none is. */
static int64_t amx_merge(pb *b, const ox_op *op, const int64_t *pl, const int64_t *pr)
{
    int64_t g = op->group, icg = op->wdims[1];
    if (!bf16_operands(b) || g < 2 || icg < 2 || !op->w || op->line) return 1;
    for (int64_t k = 1; k <= g && k * icg <= 128; k++) {
        if (g % k) continue;
        ox_op m = *op;
        m.group = g / k;
        m.wdims[1] = k * icg;
        dnnl_status_t st;
        const char *impl = NULL;
        dnnl_primitive_desc_t pd = conv_pd(b, &m, 0, pl, pr, &st);
        int amx =
            pd &&
            D(dnnl_primitive_desc_query)(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
            impl && strstr(impl, "amx");
        if (pd) D(dnnl_primitive_desc_destroy)(pd);
        if (amx) return k;
    }
    return 1;
}

/* op's weights (oc, icg, kh, kw) with k groups merged: (oc, k * icg, kh, kw), each output
 * channel's own group's icg inputs in place among zeros. The caller frees it. */
static float *merged_weights(const ox_op *op, int64_t k)
{
    int64_t ocg = op->oc / op->group, icg = op->wdims[1], ks = op->wdims[2] * op->wdims[3];
    float *w = calloc((size_t)(op->oc * k * icg * ks), sizeof(float));
    for (int64_t o = 0; w && o < op->oc; o++)
        memcpy(w + (o * k + o / ocg % k) * icg * ks, op->w + o * icg * ks,
               sizeof(float) * (size_t)(icg * ks));
    return w;
}

static int float_conv(pb *b, const ox_op *op, const int64_t *pl, const int64_t *pr);

int build_conv(pb *b, const ox_op *op)
{
    int64_t pl[2], pr[2], xd[4], yd[4];
    ox_dims4(op, DIMS(op->in[0]), xd);
    ox_dims4(op, DIMS(op->out), yd);
    if (ox_window(op, xd + 2, yd + 2, pl, pr, b->e)) return 1;
    dnnl_primitive_desc_t pd8 =
        int8_input(b, op, &t_q8.gr) ? conv8_pd(b, op, &t_q8.gr, pl, pr) : NULL;
    if (pd8) return op->qout ? conv8_finish(b, op, pd8) : finish(b, op, pd8, conv8_inputs);
    int64_t k = amx_merge(b, op, pl, pr);
    if (k == 1) return float_conv(b, op, pl, pr);
    ox_op m = *op; /* the merged groups' convolution */
    float *w = merged_weights(op, k);
    if (!w) return ox_fail(b->e, "out of memory merging the groups of node '%s'", op->name);
    m.group = op->group / k;
    m.wdims[1] = k * op->wdims[1];
    m.w = w;
    int rc = float_conv(b, &m, pl, pr); /* packs the weights from w */
    free(w);
    return rc;
}

/* op's convolution in float32 or bf16 (pl, pr: its padding) */
static int float_conv(pb *b, const ox_op *op, const int64_t *pl, const int64_t *pr)
{
    dnnl_status_t st = dnnl_unimplemented;
    /* A network's first convolution (up to 4 input channels, an image) reads its plain nchw
     * input as it is, into a blocked layout: oneDNN's kernel for that splits its rows between
     * threads (SqueezeNet's 3 -> 64 at 224x224, 2 threads: 0.14 ms, against 0.35 from nhwc)
     * and the input needs no reorder. Not with bf16 operands on AMX, where oneDNN's AMX kernel
     * from nhwc bf16 is 2.3x faster (ResNet-50's 3 -> 64 7x7: 0.58 ms, 0.25 with the input's
     * reorder).
     * Else nhwc: one layout for every convolution keeps the nodes between them (pools,
     * binary ops, concats) in it too; kept when oneDNN runs it on a jit or brgemm kernel.
     * Else the layouts oneDNN picks (format_tag::any). */
    static const int order[3] = {
        2, 0, 1}; /* conv_pd's attempts, the first one only for a first convolution */
    int x = op->in[0], first = DIMS(x)[1] <= 4 && b->nviews[x] && is_plain(b, x, home(b, x)) &&
                               pool_reads_only(b, op->out) && !bf16_operands(b);
    for (int i = first ? 0 : 1; i < 3; i++) {
        int attempt = order[i];
        dnnl_primitive_desc_t pd = conv_pd(b, op, attempt, pl, pr, &st);
        if (!pd) continue;
        if (attempt != 1 && !fast_impl(pd)) {
            D(dnnl_primitive_desc_destroy)(pd);
            continue;
        }
        if (attempt == 0 && !b->dry && !op->qout && winograd_fits(b, op))
            return build_winograd(b, op, pd, pl);
        if (op->line) { /* the result recorded under its own 3-D dims */
            dnnl_memory_desc_t as = line_md(b, op->out, query(pd, dnnl_query_dst_md, 0));
            int rc = !as || finish_as(b, op, pd, conv_inputs, as);
            if (!as) D(dnnl_primitive_desc_destroy)(pd);
            md_free(as);
            return conv_to_grid(b, op, rc);
        }
        return conv_to_grid(b, op, finish(b, op, pd, conv_inputs));
    }
    return ox_fail(b->e, "node '%s' (Conv): oneDNN has no convolution for it (status %d)", op->name,
                   (int)st);
}

/* ---- ConvTranspose ----------------------------------------------------------------------------
 * oneDNN's deconvolution over nhwc data (else the layouts it picks), its weights packed once from
 * ONNX's (C, OC / group, kh, kw), read through strides as oneDNN's (group,) OC, IC, kh, kw; the
 * bias and element-wise post-ops fused. ONNX's pads crop the result as oneDNN's padding does;
 * the output padding extends its end (graph.c parse_deconv). */

static int deconv_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    if (input_arg_any(b, s, DNNL_ARG_SRC, op->in[0], pd, dnnl_query_src_md, 0)) return 1;
    if (s == -1) return 0;
    const ox_value *wv = VAL(op->in[1]);
    if (s == -2) {
        int64_t g = op->group, ic = op->wdims[0] / g, ocg = op->wdims[1], kh = op->wdims[2],
                kw = op->wdims[3];
        dnnl_dims_t d5 = {g, ocg, ic, kh, kw},
                    s5 = {ic * ocg * kh * kw, kh * kw, ocg * kh * kw, kw, 1};
        int nd = g > 1 ? 5 : 4;
        dnnl_memory_desc_t src = NULL;
        if (D(dnnl_memory_desc_create_with_strides)(&src, nd, g > 1 ? d5 : d5 + 1, dnnl_f32,
                                                    g > 1 ? s5 : s5 + 1) != dnnl_success)
            return ox_fail(b->e, "oneDNN could not create a memory descriptor");
        return pack(b, wv->cdata, src, query(pd, dnnl_query_weights_md, 0), &t_packed.wbuf);
    }
    if (add_arg(b, s, DNNL_ARG_WEIGHTS, t_packed.wbuf, query(pd, dnnl_query_weights_md, 0)))
        return 1;
    if (op->nin < 3 || op->in[2] < 0) return 0;
    return plain_arg(b, s, DNNL_ARG_BIAS, op->in[2], clone_md(query(pd, dnnl_query_weights_md, 1)));
}

static dnnl_primitive_desc_t deconv_pd(pb *b, const ox_op *op, int nhwc)
{
    const int64_t *xd = DIMS(op->in[0]), *yd = DIMS(op->out);
    int64_t g = op->group, ic = op->wdims[0] / g,
            wd[5] = {g, op->oc / g, ic, op->ker[0], op->ker[1]};
    dnnl_dims_t S = {op->st[0], op->st[1]}, DL = {op->dil[0] - 1, op->dil[1] - 1},
                PL = {op->pads[0], op->pads[1]},
                PR = {op->pads[2] - op->outpad[0], op->pads[3] - op->outpad[1]};
    dnnl_data_type_t dt = bf16_operands(b) ? dnnl_bf16 : dnnl_f32;
    dnnl_format_tag_t tag = nhwc ? dnnl_acdb : dnnl_format_tag_any;
    dnnl_data_type_t yt = dt == dnnl_bf16 && bf16_result(b, op) ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t src = typed_md(4, xd, dt, tag), dst = typed_md(4, yd, yt, tag),
                       w = g > 1 ? typed_md(5, wd, dt, dnnl_format_tag_any)
                                 : typed_md(4, wd + 1, dt, dnnl_format_tag_any),
                       bias = op->nin == 3 && op->in[2] >= 0 ? plain_md(1, &op->oc, 1) : NULL;
    dnnl_status_t st;
    dnnl_primitive_desc_t pd = conv_like_pd(b, op, 1, src, w, bias, dst, S, DL, PL, PR, NULL, &st);
    if (!pd) return NULL;
    if (!fast_impl(pd)) { /* oneDNN's reference kernel: the cpu backend is faster */
        D(dnnl_primitive_desc_destroy)(pd);
        return NULL;
    }
    return pd;
}

int build_deconv(pb *b, const ox_op *op)
{
    dnnl_primitive_desc_t pd = deconv_pd(b, op, 1);
    if (!pd) pd = deconv_pd(b, op, 0);
    if (!pd)
        return ox_fail(b->e, "node '%s' (ConvTranspose): oneDNN has no fast deconvolution for it",
                       op->name);
    return finish(b, op, pd, deconv_inputs);
}
