/* What every op's builder makes its steps from: memory descriptors, buffers, steps and their
 * arguments, the layouts (views) a value has and reorders between them, packed weights,
 * primitive attributes with post-ops, and the finishing of an op's primitive step. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

__thread packed_t t_packed;

/* Plain row-major of type dt (rank 0 becomes {1}); dims right-aligned to rank r when r > ndim. */
static dnnl_memory_desc_t row_major_md(int ndim, const int64_t *shape, int r, dnnl_data_type_t dt)
{
    dnnl_dims_t dims, strides;
    if (r < ndim) r = ndim;
    if (r == 0) {
        r = 1;
        dims[0] = 1;
    } else
        for (int i = 0; i < r; i++) dims[i] = i < r - ndim ? 1 : shape[i - (r - ndim)];
    int64_t s = 1;
    for (int i = r - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
    dnnl_memory_desc_t md = NULL;
    return D(dnnl_memory_desc_create_with_strides)(&md, r, dims, dt, strides) == dnnl_success
               ? md
               : NULL;
}

dnnl_memory_desc_t plain_md(int ndim, const int64_t *shape, int r)
{
    return row_major_md(ndim, shape, r, dnnl_f32);
}

dnnl_memory_desc_t plain_typed_md(int ndim, const int64_t *shape, dnnl_data_type_t dt)
{
    return row_major_md(ndim, shape, ndim, dt);
}

/* dims of type dt in layout tag (format_tag::any: the one a primitive picks). */
dnnl_memory_desc_t typed_md(int ndim, const int64_t *dims, dnnl_data_type_t dt,
                            dnnl_format_tag_t tag)
{
    dnnl_dims_t d;
    for (int i = 0; i < ndim; i++) d[i] = dims[i];
    dnnl_memory_desc_t md = NULL;
    return D(dnnl_memory_desc_create_with_tag)(&md, ndim, d, dt, tag) == dnnl_success ? md : NULL;
}

dnnl_memory_desc_t strided_typed_md(int ndim, const int64_t *dims, const int64_t *strides,
                                    dnnl_data_type_t dt)
{
    dnnl_dims_t d, st;
    for (int i = 0; i < ndim; i++) {
        d[i] = dims[i];
        st[i] = strides[i];
    }
    dnnl_memory_desc_t md = NULL;
    return D(dnnl_memory_desc_create_with_strides)(&md, ndim, d, dt, st) == dnnl_success ? md
                                                                                         : NULL;
}

dnnl_memory_desc_t any_md(int ndim, const int64_t *dims)
{
    return typed_md(ndim, dims, dnnl_f32, dnnl_format_tag_any);
}

dnnl_memory_desc_t tag_md(int ndim, const int64_t *dims, dnnl_format_tag_t tag)
{
    return typed_md(ndim, dims, dnnl_f32, tag);
}

/* Whether oneDNN picked one of its optimised kernels (jit, brgemm) rather than a reference
 * or gemm-based one. */
int fast_impl(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (D(dnnl_primitive_desc_query)(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
        !impl)
        return 0;
    return !strncmp(impl, "jit", 3) || !strncmp(impl, "brg", 3) || !strncmp(impl, "brdgmm", 6);
}

/* Whether oneDNN fell back to its reference kernel (a layout its jit kernels do not take, such
 * as a Transpose's permuted view): then plain data and a reorder are faster. */
int ref_impl(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    return D(dnnl_primitive_desc_query)(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
           impl && !strncmp(impl, "ref", 3);
}

/* A row-major (rows, cols) matrix read transposed or not, right-aligned to rank r. */
dnnl_memory_desc_t matrix_md(const int64_t *shape, int r, int trans)
{
    dnnl_dims_t d, s;
    for (int i = 0; i < r; i++) d[i] = 1;
    d[r - 2] = trans ? shape[1] : shape[0];
    d[r - 1] = trans ? shape[0] : shape[1];
    for (int i = 0; i < r - 2; i++) s[i] = shape[0] * shape[1];
    s[r - 2] = trans ? 1 : shape[1];
    s[r - 1] = trans ? shape[1] : 1;
    dnnl_memory_desc_t md = NULL;
    return D(dnnl_memory_desc_create_with_strides)(&md, r, d, dnnl_f32, s) == dnnl_success ? md
                                                                                           : NULL;
}

dnnl_memory_desc_t clone_md(const_dnnl_memory_desc_t md)
{
    dnnl_memory_desc_t c = NULL;
    return md && D(dnnl_memory_desc_clone)(&c, md) == dnnl_success ? c : NULL;
}

void md_free(dnnl_memory_desc_t md)
{
    if (md) D(dnnl_memory_desc_destroy)(md);
}

const_dnnl_memory_desc_t query(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int i)
{
    return D(dnnl_primitive_desc_query_md)(pd, what, i);
}

dnnl_memory_desc_t value_plain(pb *b, int v, int r)
{
    return plain_md(VAL(v)->ndim, DIMS(v), r);
}

/* ---- buffers, steps, views ---------------------------------------------------------------- */

static int grow(void **arr, int *cap, int n, size_t elem)
{
    if (n < *cap) return 0;
    int c = *cap ? 2 * *cap : 16;
    void *na = realloc(*arr, (size_t)c * elem);
    if (!na) return 1;
    memset((char *)na + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
    *arr = na;
    *cap = c;
    return 0;
}

int new_buf(pb *b, int where, int index, const void *ptr, uint64_t size)
{
    ox_plan *p = b->p;
    if (grow((void **)&p->bufs, &p->cap_buf, p->nbuf, sizeof *p->bufs)) return -1;
    p->bufs[p->nbuf] = (ox_buf){where, index, ptr, size ? size : 64, 0, -1, -1, 0};
    return p->nbuf++;
}

int arena_buf(pb *b, const_dnnl_memory_desc_t md)
{
    return new_buf(b, B_ARENA, 0, NULL, D(dnnl_memory_desc_get_size)(md));
}


/* "name (OpType)" of the node being built, owned by the plan ("" when out of memory). */
static const char *step_node(pb *b)
{
    if (b->cur < 0 || b->cur >= b->g->norder) return "";
    const ox_op *op = &b->g->ops[b->g->order[b->cur]];
    size_t n = strlen(op->name) + strlen(op->op_type) + 4;
    char *t = owned_cfg(b, n);
    if (!t) return "";
    snprintf(t, n, "%s (%s)", op->name, op->op_type);
    return t;
}

/* A step running pd's primitive; its arguments come with add_arg. -1 on failure. */
int new_step(pb *b, const_dnnl_primitive_desc_t pd)
{
    ox_plan *p = b->p;
    if (grow((void **)&p->steps, &p->cap_step, p->nstep, sizeof *p->steps))
        return ox_fail(b->e, "out of memory") ? -1 : -1;
    ox_step *s = &p->steps[p->nstep];
    memset(s, 0, sizeof *s);
    s->node = step_node(b);
    if (D(dnnl_primitive_create)(&s->prim, pd) != dnnl_success) {
        ox_fail(b->e, "oneDNN could not create a primitive");
        return -1;
    }
    p->nstep++;
    const_dnnl_memory_desc_t smd = query(pd, dnnl_query_scratchpad_md, 0);
    uint64_t ss = smd ? D(dnnl_memory_desc_get_size)(smd) : 0;
    if (ss) {
        if (ss > p->scratch) p->scratch = ss;
        s->args[s->nargs++] = (ox_arg){DNNL_ARG_SCRATCHPAD, -1, clone_md(smd), NULL};
    }
    return p->nstep - 1;
}

/* Argument `arg` of step s: buffer buf read or written with layout md (cloned). */
int add_arg(pb *b, int s, int arg, int buf, const_dnnl_memory_desc_t md)
{
    ox_step *st = &b->p->steps[s];
    if (buf < 0 || st->nargs >= MAXARGS) return ox_fail(b->e, "internal: too many arguments");
    ox_arg *a = &st->args[st->nargs];
    a->arg = arg;
    a->buf = buf;
    a->md = clone_md(md);
    if (!a->md) return ox_fail(b->e, "oneDNN could not copy a memory descriptor");
    st->nargs++;
    ox_buf *bf = &b->p->bufs[buf];
    if (bf->first < 0) bf->first = s;
    bf->last = s;
    if (bf->where == B_CONST &&
        D(dnnl_memory_create)(&a->fixed, a->md, ox_engine(), (void *)bf->ptr) != dnnl_success)
        return ox_fail(b->e, "oneDNN could not wrap a constant");
    return 0;
}

dnnl_primitive_attr_t plain_attr(void)
{
    dnnl_primitive_attr_t a = NULL;
    if (D(dnnl_primitive_attr_create)(&a) != dnnl_success) return NULL;
    D(dnnl_primitive_attr_set_scratchpad_mode)(a, dnnl_scratchpad_mode_user);
    return a;
}

/* A step reordering buffer `from` (layout fmd) into buffer `to` (layout tmd). */
int add_reorder(pb *b, int from, const_dnnl_memory_desc_t fmd, int to, const_dnnl_memory_desc_t tmd)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t a = plain_attr();
    dnnl_status_t st =
        D(dnnl_reorder_primitive_desc_create)(&pd, fmd, ox_engine(), tmd, ox_engine(), a);
    if (a) D(dnnl_primitive_attr_destroy)(a);
    if (st != dnnl_success)
        return ox_fail(b->e, "oneDNN has no reorder between two layouts of a value");
    int s = new_step(b, pd);
    D(dnnl_primitive_desc_destroy)(pd);
    if (s < 0) return 1;
    return add_arg(b, s, DNNL_ARG_FROM, from, fmd) || add_arg(b, s, DNNL_ARG_TO, to, tmd);
}

int add_view(pb *b, int v, const_dnnl_memory_desc_t md, int buf)
{
    if (b->nviews[v] >= MAXVIEWS) return 0; /* not remembered: a later reader reorders again */
    dnnl_memory_desc_t c = clone_md(md);
    if (!c) return ox_fail(b->e, "oneDNN could not copy a memory descriptor");
    b->views[v][b->nviews[v]++] = (ox_view){c, buf};
    return 0;
}

/* The buffer holding value v in layout md: a view it has, else a reorder into a new one. */
/* The buffer of v's view in layout md, or -1 when it has none. */
static int find_view(const pb *b, int v, const_dnnl_memory_desc_t md)
{
    for (int i = 0; i < b->nviews[v]; i++)
        if (D(dnnl_memory_desc_equal)(b->views[v][i].md, md)) return b->views[v][i].buf;
    return -1;
}

int get_view(pb *b, int v, const_dnnl_memory_desc_t md, int *buf)
{
    if ((*buf = find_view(b, v, md)) >= 0) return 0;
    if (!b->nviews[v])
        return ox_fail(b->e, "internal: value '%s' read before it is computed", VAL(v)->name);
    if (b->dry) {
        *buf = 0;
        return 0;
    }
    int from = b->views[v][0].buf;
    const_dnnl_memory_desc_t fmd = b->views[v][0].md;
    dnnl_data_type_t want = dnnl_f32, have = dnnl_f32;
    D(dnnl_memory_desc_query)(md, dnnl_query_data_type, &want);
    D(dnnl_memory_desc_query)(fmd, dnnl_query_data_type, &have);
    if (VAL(v)->grid && want == dnnl_f32 && have != dnnl_f32) { /* integers: dequantized first */
        if (grid_float_view(b, v, &from, &fmd)) return 1;
        if (D(dnnl_memory_desc_equal)(fmd, md)) {
            *buf = from;
            return 0;
        }
    }
    int nb = arena_buf(b, md);
    if (nb < 0 || add_reorder(b, from, fmd, nb, md)) return 1;
    *buf = nb;
    return add_view(b, v, md, nb);
}

/* The buffer of v in plain row-major layout (any rank-r md of the same bytes reads it). */
int plain_buf(pb *b, int v, int *buf)
{
    dnnl_memory_desc_t md = value_plain(b, v, VAL(v)->ndim);
    if (!md) return ox_fail(b->e, "oneDNN could not create a memory descriptor");
    int rc = get_view(b, v, md, buf);
    md_free(md);
    return rc;
}

const_dnnl_memory_desc_t home(pb *b, int v)
{
    return b->views[v][0].md;
}

int is_plain(pb *b, int v, const_dnnl_memory_desc_t md)
{
    dnnl_memory_desc_t pm = value_plain(b, v, VAL(v)->ndim);
    int eq = pm && D(dnnl_memory_desc_equal)(pm, md);
    md_free(pm);
    return eq;
}

/* Where op's result goes for layout md: the kernel's output buffer when it is the output and
 * md is plain, else a new arena buffer (*reorder_out: the output then needs a reorder). */
int dst_buf(pb *b, const ox_op *op, const_dnnl_memory_desc_t md, int *reorder_out)
{
    *reorder_out = 0;
    if (op->out == b->g->out) {
        if (is_plain(b, op->out, md)) return new_buf(b, B_OUT, 0, NULL, 0);
        *reorder_out = 1;
    }
    return arena_buf(b, md);
}

/* Record op's result (buffer buf, layout md) and reorder it into the output if needed. */
int set_result(pb *b, const ox_op *op, int buf, const_dnnl_memory_desc_t md, int reorder_out)
{
    if (add_view(b, op->out, md, buf)) return 1;
    if (!reorder_out) return 0;
    dnnl_memory_desc_t pm = value_plain(b, op->out, VAL(op->out)->ndim);
    int ob = new_buf(b, B_OUT, 0, NULL, 0);
    int rc = !pm || ob < 0 || add_reorder(b, buf, md, ob, pm);
    md_free(pm);
    return rc;
}

/* Constant data (layout src, freed here) reordered into layout dst (owned by the plan): a
 * B_CONST buffer. */
int pack(pb *b, const float *data, dnnl_memory_desc_t src, const_dnnl_memory_desc_t dst, int *buf)
{
    ox_plan *p = b->p;
    size_t size = D(dnnl_memory_desc_get_size)(dst);
    void *mem = NULL;
    int rc = 1;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t rp = NULL;
    dnnl_memory_t ms = NULL, md = NULL;
    if (!src || grow((void **)&p->owned, &p->cap_owned, p->nowned, sizeof *p->owned) ||
        posix_memalign(&mem, 64, size ? size : 64)) {
        ox_fail(b->e, "out of memory packing weights");
        goto done;
    }
    p->owned[p->nowned++] = mem;
    if (D(dnnl_reorder_primitive_desc_create)(&rpd, src, ox_engine(), dst, ox_engine(), NULL) !=
            dnnl_success ||
        D(dnnl_primitive_create)(&rp, rpd) != dnnl_success ||
        D(dnnl_memory_create)(&ms, src, ox_engine(), (void *)data) != dnnl_success ||
        D(dnnl_memory_create)(&md, dst, ox_engine(), mem) != dnnl_success) {
        ox_fail(b->e, "oneDNN could not reorder the weights");
        goto done;
    }
    dnnl_stream_t s = ox_thread_stream();
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
    if (!s || D(dnnl_primitive_execute)(rp, s, 2, args) != dnnl_success ||
        D(dnnl_stream_wait)(s) != dnnl_success) {
        ox_fail(b->e, "oneDNN failed to reorder the weights");
        goto done;
    }
    *buf = new_buf(b, B_CONST, 0, mem, size);
    rc = *buf < 0;
done:
    if (ms) D(dnnl_memory_destroy)(ms);
    if (md) D(dnnl_memory_destroy)(md);
    if (rp) D(dnnl_primitive_destroy)(rp);
    if (rpd) D(dnnl_primitive_desc_destroy)(rpd);
    md_free(src);
    return rc;
}

/* Relu in a strict graph (see ox_graph.guarded): oneDNN's relu is max(x, 0) with the NaN as
 * the operand that loses (NaN -> 0; onnxruntime keeps it), so Relu runs as elu with alpha 0
 * (x > 0 ? x : 0 * (exp(x) - 1), NaN for NaN and -0 for the rest) and then linear 1 * y + 0,
 * which turns -0 into +0: the same bits as relu for every other value, but its exp is measured
 * 5-25 % slower on whole models (MobileNetV3 +15-25 %), so only strict graphs take it. */
int strict_relu(const pb *b, dnnl_alg_kind_t alg, float alpha)
{
    return b->g->strict && ox_is_relu(alg, alpha);
}

static int append_eltwise(const pb *b, dnnl_post_ops_t po, dnnl_alg_kind_t alg, float alpha,
                          float beta)
{
    if (!strict_relu(b, alg, alpha))
        return D(dnnl_post_ops_append_eltwise)(po, alg, alpha, beta) == dnnl_success;
    return D(dnnl_post_ops_append_eltwise)(po, dnnl_eltwise_elu, 0.f, 0.f) == dnnl_success &&
           D(dnnl_post_ops_append_eltwise)(po, dnnl_eltwise_linear, 1.f, 0.f) == dnnl_success;
}

/* The precision the Target asks of op's products: with "bf16", convolutions, matmuls and
 * inner products of float32 operands may compute in bf16, accumulating in f32 (oneDNN's
 * fpmath mode; fast where the CPU has avx512_bf16 or AMX). Operands already bf16 need no such
 * permission, and some kernels refuse it (oneDNN's brgemm depthwise convolution, which ran
 * MobileNetV2's depthwise layers a third faster than the kernel left without it). 0, or 1 when
 * oneDNN refuses. */
static int precision_attr(const pb *b, const ox_op *op, dnnl_data_type_t operands,
                          dnnl_primitive_attr_t a)
{
    if (!b->g->bf16 || operands != dnnl_f32 ||
        (op->kind != OP_CONV && op->kind != OP_MATMUL && op->kind != OP_DECONV))
        return 0;
    return D(dnnl_primitive_attr_set_fpmath_mode)(a, dnnl_fpmath_mode_bf16) != dnnl_success;
}

/* Whether the Target's "bf16" makes oneDNN compute in bf16 here: on AMX (oneDNN 3.2 keeps
 * its f32 kernels without it, so operands stay f32 there). Convolutions and matmuls then take
 * bf16 operands (their weights packed in bf16 once) rather than f32 ones to be converted. */
int bf16_operands(const pb *b)
{
    return b->g->bf16 && dl_amx();
}

/* The attribute of op: user scratchpad, its post-ops; first the add of a per-channel operand
 * of layout `add` when given (the shift of a BatchNormalization run as a multiply-add, see
 * bn_affine; a bf16 depthwise convolution's bias, see plan_conv.c conv_pd). A strict Relu's
 * own primitive is an elu whose first post-op is the linear. */
dnnl_primitive_attr_t op_attr_for(const pb *b, const ox_op *op, const_dnnl_memory_desc_t add,
                                  dnnl_data_type_t operands)
{
    dnnl_primitive_attr_t a = plain_attr();
    if (a && precision_attr(b, op, operands, a)) {
        D(dnnl_primitive_attr_destroy)(a);
        return NULL;
    }
    int relu = op->kind == OP_ELTWISE && strict_relu(b, op->alg, op->alpha);
    if (!a || (!op->npost && !add && !relu)) return a;
    dnnl_post_ops_t po;
    if (D(dnnl_post_ops_create)(&po) != dnnl_success) {
        D(dnnl_primitive_attr_destroy)(a);
        return NULL;
    }
    int ok = !add || D(dnnl_post_ops_append_binary)(po, dnnl_binary_add, add) == dnnl_success;
    if (ok && relu)
        ok = D(dnnl_post_ops_append_eltwise)(po, dnnl_eltwise_linear, 1.f, 0.f) == dnnl_success;
    for (int i = 0; i < op->npost && ok; i++) {
        const ox_post *q = &op->post[i];
        ok = q->kind == POST_SUM
                 ? D(dnnl_post_ops_append_sum)(po, 1.f, 0, dnnl_data_type_undef) == dnnl_success
                 : append_eltwise(b, po, q->alg, q->alpha, q->beta);
    }
    ok = ok && D(dnnl_primitive_attr_set_post_ops)(a, po) == dnnl_success;
    D(dnnl_post_ops_destroy)(po);
    if (!ok) {
        D(dnnl_primitive_attr_destroy)(a);
        return NULL;
    }
    return a;
}

dnnl_primitive_attr_t op_attr(const pb *b, const ox_op *op)
{
    return op_attr_for(b, op, NULL, dnnl_f32);
}
/* ---- ops ------------------------------------------------------------------------------------ */

static const ox_post *sum_post(const ox_op *op)
{
    for (int i = 0; i < op->npost; i++)
        if (op->post[i].kind == POST_SUM) return &op->post[i];
    return NULL;
}

/* The destination buffer of op for layout dmd (see dst_buf) holding, when op has a `sum`
 * post-op, the value it adds: that value's own buffer when nothing reads it later, else a
 * copy reordered into a new one. */
int sum_dst(pb *b, const ox_op *op, const_dnnl_memory_desc_t dmd, int *dbuf, int *reorder_out)
{
    const ox_post *sum = sum_post(op);
    *reorder_out = 0;
    if (sum) {
        int ob = -1, v = sum->val;
        for (int i = 0; i < b->nviews[v]; i++)
            if (D(dnnl_memory_desc_equal)(b->views[v][i].md, dmd)) ob = b->views[v][i].buf;
        int read = 0; /* the primitive must not write what it reads */
        for (int j = 0; j < op->nin; j++) read |= op->in[j] == v;
        if (ob >= 0 && !read && b->p->bufs[ob].where == B_ARENA && !b->p->bufs[ob].shared &&
            b->last_use[v] == b->cur && op->out != b->g->out) {
            *dbuf = ob; /* accumulate in place: nothing reads v after this op */
            return 0;
        }
        *dbuf = dst_buf(b, op, dmd, reorder_out);
        return *dbuf < 0 || add_reorder(b, b->views[v][0].buf, b->views[v][0].md, *dbuf, dmd);
    }
    *dbuf = dst_buf(b, op, dmd, reorder_out);
    return *dbuf < 0;
}

/* The step of op's primitive: inputs, destination (with the operand of a `sum` post-op placed
 * in it first), the result's view, and its reorder into the kernel's output if needed. `as`:
 * the layout the result is recorded in when the primitive's destination descriptor names the
 * same bytes differently (a MatMul run as a 1x1 convolution, a LayerNormalization over a
 * flattened view), else NULL. */
int finish_as(pb *b, const ox_op *op, dnnl_primitive_desc_t pd, inputs_fn inputs,
              const_dnnl_memory_desc_t as)
{
    int rc = 1, reorder_out = 0, dbuf = -1;
    const_dnnl_memory_desc_t pmd = query(pd, dnnl_query_dst_md, 0), dmd = as ? as : pmd;
    if (b->dry) {
        rc = inputs(b, op, pd, -1) || add_view(b, op->out, dmd, 0);
        goto done;
    }
    if (inputs(b, op, pd, -2) || sum_dst(b, op, dmd, &dbuf, &reorder_out)) goto done;
    int s = new_step(b, pd);
    if (s < 0 || inputs(b, op, pd, s) || add_arg(b, s, DNNL_ARG_DST, dbuf, pmd)) goto done;
    rc = set_result(b, op, dbuf, dmd, reorder_out);
done:
    D(dnnl_primitive_desc_destroy)(pd);
    return rc;
}

/* The step of op's primitive whose result is recorded as its own destination layout. */
int finish(pb *b, const ox_op *op, dnnl_primitive_desc_t pd, inputs_fn inputs)
{
    return finish_as(b, op, pd, inputs, NULL);
}

/* Value v in the layout pd has for its input (query what, index i). */
int input_arg_any(pb *b, int s, int arg, int v, const_dnnl_primitive_desc_t pd, dnnl_query_t what,
                  int i)
{
    if (s == -1) return 0;
    const_dnnl_memory_desc_t md = query(pd, what, i);
    int buf;
    if (!md) return ox_fail(b->e, "internal: oneDNN gave no layout");
    if (get_view(b, v, md, &buf)) return 1;
    return s >= 0 ? add_arg(b, s, arg, buf, md) : 0;
}

/* Whether md (no blocks, no offset) reads v's plain row-major bytes: its axes of more than one
 * element, outermost first, are v's, each dense inside the next (a dense layer's rows read as
 * the nhwc image 1 x K x 1 x M). */
static int reads_plain_bytes(pb *b, int v, const_dnnl_memory_desc_t md)
{
    int nd, n = 0, m = 0;
    int64_t d[MAXR], st[MAXR], ad[MAXR], as[MAXR];
    if (strided_of(md, &nd, d, st)) return 0;
    for (int i = 0; i < nd; i++)
        if (d[i] != 1) ad[n] = d[i], as[n++] = st[i];
    for (int i = 1; i < n; i++) /* by stride, outermost first (a few axes: insertion) */
        for (int k = i; k > 0 && as[k] > as[k - 1]; k--) {
            int64_t t = as[k];
            as[k] = as[k - 1], as[k - 1] = t;
            t = ad[k], ad[k] = ad[k - 1], ad[k - 1] = t;
        }
    int64_t dense = 1;
    for (int i = n - 1; i >= 0; i--) {
        if (as[i] != dense) return 0;
        dense *= ad[i];
    }
    for (int i = 0; i < VAL(v)->ndim; i++)
        if (DIMS(v)[i] != 1 && (m >= n || DIMS(v)[i] != ad[m++])) return 0;
    return m == n;
}

/* The buffer of v's plain view in md's data type when md reads those bytes, else -1. */
static int plain_typed_view(pb *b, int v, const_dnnl_memory_desc_t md)
{
    dnnl_memory_desc_t typed = plain_typed_md(VAL(v)->ndim, DIMS(v), md_type(md));
    int buf = typed ? find_view(b, v, typed) : -1;
    md_free(typed);
    return buf >= 0 && reads_plain_bytes(b, v, md) ? buf : -1;
}

/* An argument in layout md (another data type, bf16) converted from the plain f32 bytes of v
 * read with layout fmd (owned here, same dims as md): the conversion is a reorder before the
 * step (s == -2), remembered as a view of v that other readers asking for md share. Where v
 * is already plain in md's type (a LayerNormalization writing bf16 for dense layers) and md
 * reads those bytes, they are read as they are. */
int converted_arg(pb *b, int s, int arg, int v, dnnl_memory_desc_t fmd, const_dnnl_memory_desc_t md)
{
    int buf = -1, from, rc = 1;
    if (!fmd) return ox_fail(b->e, "oneDNN could not create a memory descriptor");
    if (s == -1 || (buf = find_view(b, v, md)) >= 0) rc = 0;
    else if ((buf = plain_typed_view(b, v, md)) >= 0) rc = add_view(b, v, md, buf);
    else if (!plain_buf(b, v, &from) && (buf = arena_buf(b, md)) >= 0)
        rc = add_reorder(b, from, fmd, buf, md) || add_view(b, v, md, buf);
    if (!rc && s >= 0) rc = add_arg(b, s, arg, buf, md);
    md_free(fmd);
    return rc;
}

/* An argument read from the plain bytes of v with layout md (owned here). */
int plain_arg(pb *b, int s, int arg, int v, dnnl_memory_desc_t md)
{
    int buf, rc = 1;
    if (!md) return ox_fail(b->e, "oneDNN could not create a memory descriptor");
    if (s != -1 && !plain_buf(b, v, &buf)) rc = s >= 0 ? add_arg(b, s, arg, buf, md) : 0;
    else rc = s == -1 ? 0 : 1;
    md_free(md);
    return rc;
}


/* A step of the backend's own: fn on cfg, doing `what`. -1 on failure. */
int fn_step(pb *b, ox_fn fn, const void *cfg, int when, const char *what)
{
    ox_plan *p = b->p;
    const char *node = step_node(b);
    if (grow((void **)&p->steps, &p->cap_step, p->nstep, sizeof *p->steps))
        return ox_fail(b->e, "out of memory") ? -1 : -1;
    ox_step *st = &p->steps[p->nstep];
    memset(st, 0, sizeof *st);
    st->fn = fn;
    st->cfg = cfg;
    st->when = when;
    st->node = node;
    st->what = what;
    return p->nstep++;
}

/* n zeroed bytes owned by the plan (a step's settings), or NULL. */
void *owned_cfg(pb *b, size_t n)
{
    ox_plan *p = b->p;
    void *c = calloc(1, n);
    if (!c || grow((void **)&p->owned, &p->cap_owned, p->nowned, sizeof *p->owned)) {
        free(c);
        ox_fail(b->e, "out of memory");
        return NULL;
    }
    p->owned[p->nowned++] = c;
    return c;
}

dnnl_primitive_t owned_prim(pb *b, const_dnnl_primitive_desc_t pd)
{
    ox_plan *p = b->p;
    dnnl_primitive_t prim = NULL;
    if (grow((void **)&p->prims, &p->cap_prim, p->nprim, sizeof *p->prims) ||
        D(dnnl_primitive_create)(&prim, pd) != dnnl_success) {
        ox_fail(b->e, "oneDNN could not create a primitive");
        return NULL;
    }
    p->prims[p->nprim++] = prim;
    return prim;
}
