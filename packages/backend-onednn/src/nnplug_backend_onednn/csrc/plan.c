/* Plans: the ops of a group for concrete shapes and a thread count, as a sequence of oneDNN
 * primitives (see kernels.h). Activations get the layout the primitive producing them picks
 * (format_tag::any for convolutions and pools; element-wise, binary, normalisation and
 * softmax ops keep their input's layout); a value is reordered only when a reader needs
 * another layout, at the kernel's inputs and at its output. Weights are reordered into the
 * layout their primitive picks once, when the plan is built. Intermediate values live in an
 * arena inside the run's workspace, placed by lifetime; a residual Add is a `sum` post-op
 * writing into the buffer of the value it adds when that value is read by nothing later. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "strict.h"
#include "nhwc.h"
#include "winograd.h"

#define MAXVIEWS 4
#define MAXARGS (MAXIN + 8)

enum { B_IN, B_OUT, B_ARENA, B_CONST, B_SCRATCH };

typedef struct {
    int where;       /* B_* */
    int index;       /* B_IN: kernel input */
    const void *ptr; /* B_CONST */
    uint64_t size, off;
    int first, last; /* steps that use it (B_ARENA) */
    int shared; /* also the bytes of a Reshape's or Transpose's result: never written in place */
} ox_buf;

typedef struct {
    int arg, buf;
    dnnl_memory_desc_t md;
    dnnl_memory_t fixed; /* B_CONST: made once */
} ox_arg;

/* A step of the backend's own on the pointers of its args (in order) and its settings cfg,
 * owned by the plan; a step that checks its input for NaNs and infinities returns whether it
 * found any (0 or 1), any other -1. */
typedef int (*ox_fn)(const void *cfg, void *const *ptrs, int nptrs);

/* When a step runs: always, or only after a Winograd input transform that found every value
 * finite (its product and output transform), or one that did not (the direct convolution). */
enum { RUN_ALWAYS, RUN_FINITE, RUN_NONFINITE };

typedef struct {
    dnnl_primitive_t prim; /* or NULL with fn set */
    ox_fn fn;
    const void *cfg;
    int when; /* RUN_* */
    int nargs;
    ox_arg args[MAXARGS];
    const char *node; /* "name (OpType)" of the node it is for (NNPLUG_ONEDNN_PROFILE) */
    const char *what; /* a step of the backend's own: what it does */
} ox_step;

/* The memory objects of one run: a run takes a context for itself, so handles can be reset
 * (only where a pointer changed) without locking. */
typedef struct ox_ctx {
    struct ox_ctx *next, *next_idle;
    dnnl_memory_t *mem;
    void **ptr;
} ox_ctx;

struct ox_plan {
    int nstep, cap_step, nbuf, cap_buf, nowned, cap_owned, threads, nmem;
    int profile; /* NNPLUG_ONEDNN_PROFILE=1 when it was made: each step's time to stderr */
    ox_step *steps;
    ox_buf *bufs;
    void **owned; /* packed weights */
    uint64_t arena, scratch;
    pthread_mutex_t mu; /* guards the context lists */
    ox_ctx *idle, *all;
};

typedef struct {
    dnnl_memory_desc_t md;
    int buf;
} ox_view;

typedef struct {
    const ox_graph *g;
    const int64_t *dims;
    ox_plan *p;
    ox_err *e;
    int dry; /* primitive descriptors only (supports) */
    int *nviews, *last_use;
    ox_view (*views)[MAXVIEWS];
    int cur;
} pb;

#define DIMS(v) (b->dims + (size_t)(v) * MAXR)
#define VAL(v) (&b->g->vals[v])

/* ---- descriptors -------------------------------------------------------------------------- */

/* Plain row-major (rank 0 becomes {1}); dims right-aligned to rank r when r > ndim. */
static dnnl_memory_desc_t plain_md(int ndim, const int64_t *shape, int r)
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
    return D(dnnl_memory_desc_create_with_strides)(&md, r, dims, dnnl_f32, strides) == dnnl_success
               ? md
               : NULL;
}

static dnnl_memory_desc_t any_md(int ndim, const int64_t *dims)
{
    dnnl_dims_t d;
    for (int i = 0; i < ndim; i++) d[i] = dims[i];
    dnnl_memory_desc_t md = NULL;
    return D(dnnl_memory_desc_create_with_tag)(&md, ndim, d, dnnl_f32, dnnl_format_tag_any) ==
                   dnnl_success
               ? md
               : NULL;
}

static dnnl_memory_desc_t tag_md(int ndim, const int64_t *dims, dnnl_format_tag_t tag)
{
    dnnl_dims_t d;
    for (int i = 0; i < ndim; i++) d[i] = dims[i];
    dnnl_memory_desc_t md = NULL;
    return D(dnnl_memory_desc_create_with_tag)(&md, ndim, d, dnnl_f32, tag) == dnnl_success ? md
                                                                                            : NULL;
}

/* Whether oneDNN picked one of its optimised kernels (jit, brgemm) rather than a reference
 * or gemm-based one. */
static int fast_impl(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (D(dnnl_primitive_desc_query)(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
        !impl)
        return 0;
    return !strncmp(impl, "jit", 3) || !strncmp(impl, "brg", 3) || !strncmp(impl, "brdgmm", 6);
}

/* Whether oneDNN fell back to its reference kernel (a layout its jit kernels do not take, such
 * as a Transpose's permuted view): then plain data and a reorder are faster. */
static int ref_impl(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    return D(dnnl_primitive_desc_query)(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
           impl && !strncmp(impl, "ref", 3);
}

/* A row-major (rows, cols) matrix read transposed or not, right-aligned to rank r. */
static dnnl_memory_desc_t matrix_md(const int64_t *shape, int r, int trans)
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

static dnnl_memory_desc_t clone_md(const_dnnl_memory_desc_t md)
{
    dnnl_memory_desc_t c = NULL;
    return md && D(dnnl_memory_desc_clone)(&c, md) == dnnl_success ? c : NULL;
}

static void md_free(dnnl_memory_desc_t md)
{
    if (md) D(dnnl_memory_desc_destroy)(md);
}

static const_dnnl_memory_desc_t query(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int i)
{
    return D(dnnl_primitive_desc_query_md)(pd, what, i);
}

static dnnl_memory_desc_t value_plain(pb *b, int v, int r)
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

static int new_buf(pb *b, int where, int index, const void *ptr, uint64_t size)
{
    ox_plan *p = b->p;
    if (grow((void **)&p->bufs, &p->cap_buf, p->nbuf, sizeof *p->bufs)) return -1;
    p->bufs[p->nbuf] = (ox_buf){where, index, ptr, size ? size : 64, 0, -1, -1, 0};
    return p->nbuf++;
}

static int arena_buf(pb *b, const_dnnl_memory_desc_t md)
{
    return new_buf(b, B_ARENA, 0, NULL, D(dnnl_memory_desc_get_size)(md));
}

static void *owned_cfg(pb *b, size_t n);

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
static int new_step(pb *b, const_dnnl_primitive_desc_t pd)
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
static int add_arg(pb *b, int s, int arg, int buf, const_dnnl_memory_desc_t md)
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

static dnnl_primitive_attr_t plain_attr(void)
{
    dnnl_primitive_attr_t a = NULL;
    if (D(dnnl_primitive_attr_create)(&a) != dnnl_success) return NULL;
    D(dnnl_primitive_attr_set_scratchpad_mode)(a, dnnl_scratchpad_mode_user);
    return a;
}

/* A step reordering buffer `from` (layout fmd) into buffer `to` (layout tmd). */
static int add_reorder(pb *b, int from, const_dnnl_memory_desc_t fmd, int to,
                       const_dnnl_memory_desc_t tmd)
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

static int add_view(pb *b, int v, const_dnnl_memory_desc_t md, int buf)
{
    if (b->nviews[v] >= MAXVIEWS) return 0; /* not remembered: a later reader reorders again */
    dnnl_memory_desc_t c = clone_md(md);
    if (!c) return ox_fail(b->e, "oneDNN could not copy a memory descriptor");
    b->views[v][b->nviews[v]++] = (ox_view){c, buf};
    return 0;
}

/* The buffer holding value v in layout md: a view it has, else a reorder into a new one. */
static int get_view(pb *b, int v, const_dnnl_memory_desc_t md, int *buf)
{
    for (int i = 0; i < b->nviews[v]; i++)
        if (D(dnnl_memory_desc_equal)(b->views[v][i].md, md)) {
            *buf = b->views[v][i].buf;
            return 0;
        }
    if (!b->nviews[v])
        return ox_fail(b->e, "internal: value '%s' read before it is computed", VAL(v)->name);
    if (b->dry) {
        *buf = 0;
        return 0;
    }
    int nb = arena_buf(b, md);
    if (nb < 0 || add_reorder(b, b->views[v][0].buf, b->views[v][0].md, nb, md)) return 1;
    *buf = nb;
    return add_view(b, v, md, nb);
}

/* The buffer of v in plain row-major layout (any rank-r md of the same bytes reads it). */
static int plain_buf(pb *b, int v, int *buf)
{
    dnnl_memory_desc_t md = value_plain(b, v, VAL(v)->ndim);
    if (!md) return ox_fail(b->e, "oneDNN could not create a memory descriptor");
    int rc = get_view(b, v, md, buf);
    md_free(md);
    return rc;
}

static const_dnnl_memory_desc_t home(pb *b, int v)
{
    return b->views[v][0].md;
}

static int is_plain(pb *b, int v, const_dnnl_memory_desc_t md)
{
    dnnl_memory_desc_t pm = value_plain(b, v, VAL(v)->ndim);
    int eq = pm && D(dnnl_memory_desc_equal)(pm, md);
    md_free(pm);
    return eq;
}

/* Where op's result goes for layout md: the kernel's output buffer when it is the output and
 * md is plain, else a new arena buffer (*reorder_out: the output then needs a reorder). */
static int dst_buf(pb *b, const ox_op *op, const_dnnl_memory_desc_t md, int *reorder_out)
{
    *reorder_out = 0;
    if (op->out == b->g->out) {
        if (is_plain(b, op->out, md)) return new_buf(b, B_OUT, 0, NULL, 0);
        *reorder_out = 1;
    }
    return arena_buf(b, md);
}

/* Record op's result (buffer buf, layout md) and reorder it into the output if needed. */
static int set_result(pb *b, const ox_op *op, int buf, const_dnnl_memory_desc_t md, int reorder_out)
{
    if (add_view(b, op->out, md, buf)) return 1;
    if (!reorder_out) return 0;
    dnnl_memory_desc_t pm = value_plain(b, op->out, VAL(op->out)->ndim);
    int ob = new_buf(b, B_OUT, 0, NULL, 0);
    int rc = !pm || ob < 0 || add_reorder(b, buf, md, ob, pm);
    md_free(pm);
    return rc;
}

/* Constant data reordered into layout dst (owned by the plan): a B_CONST buffer. */
static int pack(pb *b, const float *data, dnnl_memory_desc_t src, const_dnnl_memory_desc_t dst,
                int *buf)
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
static int strict_relu(const pb *b, dnnl_alg_kind_t alg, float alpha)
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

/* The attribute of op: user scratchpad, its post-ops; first the add of a per-channel operand
 * of layout `add` when given (the shift of a BatchNormalization run as a multiply-add, see
 * bn_affine). A strict Relu's own primitive is an elu whose first post-op is the linear. */
/* The precision the Target asks of op's products: with "bf16", convolutions, matmuls and
 * inner products take bf16 operands and accumulate in f32, their inputs and outputs f32
 * (oneDNN's fpmath mode; fast where the CPU has avx512_bf16 or AMX). 0, or 1 when oneDNN
 * refuses. */
static int precision_attr(const pb *b, const ox_op *op, dnnl_primitive_attr_t a)
{
    if (!b->g->bf16 || (op->kind != OP_CONV && op->kind != OP_MATMUL)) return 0;
    return D(dnnl_primitive_attr_set_fpmath_mode)(a, dnnl_fpmath_mode_bf16) != dnnl_success;
}

static dnnl_primitive_attr_t op_attr_adding(const pb *b, const ox_op *op,
                                            const_dnnl_memory_desc_t add)
{
    dnnl_primitive_attr_t a = plain_attr();
    if (a && precision_attr(b, op, a)) {
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

static dnnl_primitive_attr_t op_attr(const pb *b, const ox_op *op)
{
    return op_attr_adding(b, op, NULL);
}

/* ---- ops ------------------------------------------------------------------------------------ */

static const ox_post *sum_post(const ox_op *op)
{
    for (int i = 0; i < op->npost; i++)
        if (op->post[i].kind == POST_SUM) return &op->post[i];
    return NULL;
}

/* The inputs of op's primitive pd. Called with s == -1 (dry: nothing), s == -2 (make the
 * views the primitive reads, i.e. the reorders that must run before it, and pack weights),
 * then s >= 0 (add the arguments to step s; the views exist by then, so no step is added). */
typedef int (*inputs_fn)(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s);

/* The destination buffer of op for layout dmd (see dst_buf) holding, when op has a `sum`
 * post-op, the value it adds: that value's own buffer when nothing reads it later, else a
 * copy reordered into a new one. */
static int sum_dst(pb *b, const ox_op *op, const_dnnl_memory_desc_t dmd, int *dbuf,
                   int *reorder_out)
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
static int finish_as(pb *b, const ox_op *op, dnnl_primitive_desc_t pd, inputs_fn inputs,
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
static int finish(pb *b, const ox_op *op, dnnl_primitive_desc_t pd, inputs_fn inputs)
{
    return finish_as(b, op, pd, inputs, NULL);
}

/* Value v in the layout pd has for its input (query what, index i). */
static int input_arg_any(pb *b, int s, int arg, int v, const_dnnl_primitive_desc_t pd,
                         dnnl_query_t what, int i)
{
    if (s == -1) return 0;
    const_dnnl_memory_desc_t md = query(pd, what, i);
    int buf;
    if (!md) return ox_fail(b->e, "internal: oneDNN gave no layout");
    if (get_view(b, v, md, &buf)) return 1;
    return s >= 0 ? add_arg(b, s, arg, buf, md) : 0;
}

/* An argument read from the plain bytes of v with layout md (owned here). */
static int plain_arg(pb *b, int s, int arg, int v, dnnl_memory_desc_t md)
{
    int buf, rc = 1;
    if (!md) return ox_fail(b->e, "oneDNN could not create a memory descriptor");
    if (s != -1 && !plain_buf(b, v, &buf)) rc = s >= 0 ? add_arg(b, s, arg, buf, md) : 0;
    else rc = s == -1 ? 0 : 1;
    md_free(md);
    return rc;
}

/* Per plan, the packed weights and the bias of a conv / matmul (made when s == -2). */
typedef struct {
    int wbuf, bbuf;
} packed_t;
static __thread packed_t t_packed;

static int conv_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
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

static int winograd_fits(pb *b, const ox_op *op);
static int build_winograd(pb *b, const ox_op *op, dnnl_primitive_desc_t direct, const int64_t *pl);

static int build_conv(pb *b, const ox_op *op)
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

/* A step of the backend's own: fn on cfg, doing `what`. -1 on failure. */
static int fn_step(pb *b, ox_fn fn, const void *cfg, int when, const char *what)
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
static void *owned_cfg(pb *b, size_t n)
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

/* ---- Winograd convolutions (winograd.h) ------------------------------------------------- */

/* Whether op runs as Winograd F(2x2, 3x3): a 3x3, stride-1, ungrouped convolution of 64 or
 * more input and output channels (multiples of 8) with an output plane of 100 pixels or more,
 * whose post-ops are Relu, LeakyRelu, Clip or a residual sum, on a CPU with AVX2 and FMA.
 * Measured against oneDNN's brgemm convolution on the layers of the zoo's models (1 and 2
 * threads): 1.4-1.7x faster from 64 channels on planes of 13x13 and more; at 7x7 (the 2x2
 * tiles cover 8x8) or with fewer channels, where the transforms' memory traffic weighs more,
 * it gains under 10% or loses. NNPLUG_ONEDNN_WINOGRAD=0 turns it off; a strict plan never
 * takes it. */
static int winograd_fits(pb *b, const ox_op *op)
{
    const char *env = getenv("NNPLUG_ONEDNN_WINOGRAD");
    if ((env && !strcmp(env, "0")) || !dl_avx2_fma() || b->g->strict)
        return 0; /* strict: see ox_winograd_shape */
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
static int build_winograd(pb *b, const ox_op *op, dnnl_primitive_desc_t direct, const int64_t *pl)
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
    ox_wino_weights(op->w, w->oc, w->ic, u);
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

/* The operands of a batched MatMul read in the layout they have (a Transpose's strided view:
 * Q, K^T and V of attention) rather than reordered to row-major first; see build_matmul. */
static __thread int t_mm_strided[2];

/* Value v's own layout when a matmul of rank r can read it: the same rank and plain strides
 * (no blocking; a permuted row-major tensor), else NULL. */
static dnnl_memory_desc_t strided_operand_md(pb *b, int v, int r)
{
    if (VAL(v)->ndim != r || !b->nviews[v]) return NULL;
    const_dnnl_memory_desc_t md = home(b, v);
    int nblks = -1;
    dnnl_format_kind_t fk = dnnl_format_kind_undef;
    if (D(dnnl_memory_desc_query)(md, dnnl_query_format_kind, &fk) != dnnl_success ||
        fk != dnnl_blocked)
        return NULL;
    if (D(dnnl_memory_desc_query)(md, dnnl_query_inner_nblks_s32, &nblks) != dnnl_success ||
        nblks != 0)
        return NULL;
    if (is_plain(b, v, md)) return NULL;
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
    if (plain_arg(b, s, DNNL_ARG_SRC, op->in[0],
                  t_ip ? plain_md(2, x2, 2) : tag_md(4, xd, dnnl_acdb)))
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

/* One attempt: the inner product (ip) or the 1x1 convolution, when oneDNN has a jit / brgemm
 * kernel for it; NULL else. */
static dnnl_primitive_desc_t packed_matmul_pd(const pb *b, const ox_op *op, int64_t M, int64_t K,
                                              int64_t N, int ip)
{
    int64_t xd[4] = {1, K, 1, M}, yd[4] = {1, N, 1, M}, wd[4] = {N, K, 1, 1}, x2[2] = {M, K},
            y2[2] = {M, N};
    dnnl_dims_t S = {1, 1}, DL = {0, 0}, P0 = {0, 0};
    dnnl_memory_desc_t src = ip ? plain_md(2, x2, 2) : tag_md(4, xd, dnnl_acdb),
                       dst = ip ? plain_md(2, y2, 2) : tag_md(4, yd, dnnl_acdb),
                       w = any_md(ip ? 2 : 4, wd);
    dnnl_memory_desc_t bias = op->b ? plain_md(1, &N, 1) : NULL;
    dnnl_primitive_attr_t a = op_attr(b, op);
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

/* 1 when built as a packed-weights primitive, 0 when oneDNN has none fast for it (then its
 * matmul), -1 on error. The 1x1 convolution is the faster, except on AMD CPUs where the inner
 * dimension is much longer than the output rows: BERT's 3072 -> 768 ran at a third of the
 * speed as a convolution on a Zen CPU, not as an inner product. On an Intel Xeon the
 * convolution was the faster there too (1 thread: BERT-base's 3072 -> 768 49 ms against 55,
 * ViT-B/16's 70 against 83; level at 2 threads). */
static int build_conv_matmul(pb *b, const ox_op *op)
{
    int64_t M, K, N;
    if (!conv_matmul_dims(b, op, &M, &K, &N)) return 0;
    /* NNPLUG_ONEDNN_DENSE=convolution / inner_product (read when a plan is made) picks one */
    const char *pick = getenv("NNPLUG_ONEDNN_DENSE");
    int first_ip = pick && !strcmp(pick, "inner_product") ? 1
                   : pick && !strcmp(pick, "convolution") ? 0
                                                          : K > 2 * N && dl_cpu_amd();
    dnnl_primitive_desc_t pd = NULL;
    for (int attempt = 0; attempt < 2 && !pd; attempt++) {
        t_ip = attempt ? !first_ip : first_ip;
        pd = packed_matmul_pd(b, op, M, K, N, t_ip);
    }
    if (!pd) return 0;
    dnnl_memory_desc_t as = value_plain(b, op->out, VAL(op->out)->ndim);
    if (!as) {
        D(dnnl_primitive_desc_destroy)(pd);
        ox_fail(b->e, "oneDNN could not create a memory descriptor");
        return -1;
    }
    int rc = finish_as(b, op, pd, conv_matmul_inputs, as);
    md_free(as);
    return rc ? -1 : 1;
}

static int build_matmul(pb *b, const ox_op *op)
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

/* A loop of the backend's own over n plain floats (its step's args: src, dst), seen as rows
 * of `row` elements `inner` apart (a row-major axis of that length with that inner size); c, d:
 * scalar parameters (nan_replace_loop's replacement, Clip's bounds). It runs as a step
 * (loop_fn) with its parameters as the settings. */
typedef void (*ox_loop)(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                        float d);

typedef struct {
    ox_loop loop;
    int64_t n, row, inner;
    float c, d;
} ox_loop_cfg;

static int loop_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const ox_loop_cfg *l = cfg;
    l->loop(ptrs[0], ptrs[1], l->n, l->row, l->inner, l->c, l->d);
    return -1;
}

/* A step running loop over the n floats of its args src and dst (added by the caller). */
static int loop_step(pb *b, ox_loop loop, int64_t n, int64_t row, int64_t inner, float c, float d,
                     const char *what)
{
    ox_loop_cfg *l = owned_cfg(b, sizeof *l);
    if (!l) return -1;
    *l = (ox_loop_cfg){loop, n, row, inner, c, d};
    return fn_step(b, loop_fn, l, RUN_ALWAYS, what);
}

static void erf_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                     float d)
{
    (void)row, (void)inner, (void)c, (void)d;
    for (int64_t i = 0; i < n; i++) y[i] = erff(x[i]);
}

/* The ox_own_eltwise ops (kernels.h). Written so that a NaN fails every compare and comes
 * through: onnxruntime keeps it in all four. */
static void clip_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float lo,
                      float hi)
{
    (void)row, (void)inner;
    for (int64_t i = 0; i < n; i++) { /* hi last: lo > hi gives hi, as ONNX says */
        float v = x[i] < lo ? lo : x[i];
        y[i] = v > hi ? hi : v;
    }
}

static void hardsigmoid_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner,
                             float alpha, float beta)
{
    (void)row, (void)inner;
    for (int64_t i = 0; i < n; i++) {
        float v = alpha * x[i] + beta;
        v = v < 0.f ? 0.f : v;
        y[i] = v > 1.f ? 1.f : v;
    }
}

static void exp_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                     float d)
{
    (void)row, (void)inner, (void)c, (void)d;
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

static void log_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                     float d)
{
    (void)row, (void)inner, (void)c, (void)d;
    for (int64_t i = 0; i < n; i++) y[i] = logf(x[i]);
}

/* Where(IsNaN(x), C, x): every NaN (any payload, either sign) becomes c; everything else
 * (infinities, -0.0, denormals) is copied bit for bit. On the bits, so that no float compare
 * or move can touch a value. */
static void nan_replace_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner,
                             float c, float d)
{
    (void)row, (void)inner, (void)d;
    uint32_t cb;
    memcpy(&cb, &c, 4);
    const uint32_t *xs = (const uint32_t *)x;
    uint32_t *ys = (uint32_t *)y;
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = xs[i];
        ys[i] = (v & 0x7fffffffu) > 0x7f800000u ? cb : v;
    }
}

/* oneDNN's (Log)Softmax gives NaN only where a row holds NaN or +inf (0 elsewhere); onnxruntime
 * and the ONNX reference give the whole row NaN (max - max is NaN, and so is every sum). In place,
 * on the plain result (x == y): a row with a NaN becomes all NaN. */
static void softmax_nan_rows(const float *x, float *y, int64_t n, int64_t row, int64_t inner,
                             float c, float d)
{
    (void)x, (void)c, (void)d;
    for (int64_t o = 0; o + row * inner <= n; o += row * inner)
        for (int64_t j = 0; j < inner; j++) {
            float *r = y + o + j;
            int nan = 0;
            for (int64_t i = 0; i < row; i++) nan |= r[i * inner] != r[i * inner];
            if (nan)
                for (int64_t i = 0; i < row; i++) r[i * inner] = NAN;
        }
}

/* The NaN rule above as a step after op's (Log)Softmax, on its plain row-major result (rows along
 * the op's axis). */
static int add_softmax_nan_rows(pb *b, const ox_op *op)
{
    if (b->dry) return 0;
    int v = op->out, r = VAL(v)->ndim;
    const ox_view *vw = &b->views[v][b->nviews[v] - 1];
    if (!is_plain(b, v, vw->md))
        return ox_fail(b->e, "internal: node '%s' (%s): its result is not plain", op->name,
                       op->op_type);
    int64_t row = 1, inner = 1;
    for (int d = 0; d < r; d++) {
        if (d == op->axis) row = DIMS(v)[d];
        else if (d > op->axis) inner *= DIMS(v)[d];
    }
    int s = loop_step(b, softmax_nan_rows,
                      (int64_t)(D(dnnl_memory_desc_get_size)(vw->md) / sizeof(float)),
                      row > 0 ? row : 1, inner > 0 ? inner : 1, 0.f, 0.f, "softmax nan rows");
    if (s < 0) return 1;
    return add_arg(b, s, DNNL_ARG_SRC, vw->buf, vw->md) ||
           add_arg(b, s, DNNL_ARG_DST, vw->buf, vw->md);
}

/* Erf outside a GELU: the C library's erff over the plain values (oneDNN has no erf of its own);
 * Where(IsNaN(x), C, x) (OP_NANREP): nan_replace_loop over them. */
static int build_loop(pb *b, const ox_op *op)
{
    int x = op->in[0], xbuf, reorder_out;
    dnnl_memory_desc_t md = value_plain(b, op->out, VAL(op->out)->ndim);
    int rc = 1;
    if (!md) {
        ox_fail(b->e, "oneDNN could not create a memory descriptor");
        goto done;
    }
    if (b->dry) {
        rc = add_view(b, op->out, md, 0);
        goto done;
    }
    if (plain_buf(b, x, &xbuf)) goto done;
    int dbuf = dst_buf(b, op, md, &reorder_out), s;
    if (dbuf < 0 ||
        (s = loop_step(b, op->kind == OP_NANREP ? nan_replace_loop : erf_loop,
                       (int64_t)(D(dnnl_memory_desc_get_size)(md) / sizeof(float)), 1, 1, op->alpha,
                       0.f, op->kind == OP_NANREP ? "nan replacement" : "erf")) < 0)
        goto done;
    rc = add_arg(b, s, DNNL_ARG_SRC, xbuf, md) || add_arg(b, s, DNNL_ARG_DST, dbuf, md) ||
         set_result(b, op, dbuf, md, reorder_out);
done:
    md_free(md);
    return rc;
}

/* An ox_own_eltwise op: its loop element for element over its input in the layout that input
 * has (the result takes it too), when that layout is dense; a blocked one whose padding would
 * no longer hold zeros (f(0) != 0: log(0) is -inf) is read in plain layout instead. */
static int build_own_eltwise(pb *b, const ox_op *op)
{
    int x = op->in[0], xbuf, reorder_out;
    const_dnnl_memory_desc_t md = home(b, x);
    dnnl_memory_desc_t pm = NULL;
    int rc = 1;
    size_t n = 1;
    for (int d = 0; d < VAL(x)->ndim; d++) n *= (size_t)DIMS(x)[d];
    if ((size_t)D(dnnl_memory_desc_get_size)(md) != n * sizeof(float)) {
        if (!(pm = value_plain(b, x, VAL(x)->ndim)))
            return ox_fail(b->e, "oneDNN could not create a memory descriptor");
        md = pm;
    }
    if (b->dry) {
        rc = add_view(b, op->out, md, 0);
        goto done;
    }
    if (get_view(b, x, md, &xbuf)) goto done;
    ox_loop loop = op->alg == dnnl_eltwise_clip          ? clip_loop
                   : op->alg == dnnl_eltwise_hardsigmoid ? hardsigmoid_loop
                   : op->alg == dnnl_eltwise_exp         ? exp_loop
                                                         : log_loop;
    int dbuf = dst_buf(b, op, md, &reorder_out), s;
    if (dbuf < 0 ||
        (s = loop_step(b, loop, (int64_t)n, 1, 1, op->alpha, op->beta, op->op_type)) < 0)
        goto done;
    rc = add_arg(b, s, DNNL_ARG_SRC, xbuf, md) || add_arg(b, s, DNNL_ARG_DST, dbuf, md) ||
         set_result(b, op, dbuf, md, reorder_out);
done:
    md_free(pm);
    return rc;
}

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
 * plain NCHW (a strict plan's max pooling and LRN). */
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

/* MaxPool or GlobalMaxPool in a strict graph: ox_maxpool_run (strict.h). */
static int build_strict_maxpool(pb *b, const ox_op *op)
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
static int build_strict_lrn(pb *b, const ox_op *op)
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

/* The strides of dims `nd` (rank nr) over the bytes of a tensor of dims `od`, strides `os`
 * (rank or), element for element in row-major order, when some exist (numpy's no-copy reshape:
 * each run of old dims merged into new ones must be contiguous in memory); 0 if found. */
static int reshape_strides(int or, const int64_t *od, const int64_t *os, int nr, const int64_t *nd,
                           int64_t *ns)
{
    int64_t d[MAXR], st[MAXR];
    int n = 0;
    for (int i = 0; i < or ; i++) {
        if (od[i] <= 0) return 1;
        if (od[i] != 1) {
            d[n] = od[i];
            st[n] = os[i];
            n++;
        }
    }
    int64_t nn[MAXR];
    int m = 0, map[MAXR];
    for (int i = 0; i < nr; i++) {
        if (nd[i] <= 0) return 1;
        if (nd[i] != 1) {
            map[m] = i;
            nn[m++] = nd[i];
        }
    }
    int64_t out[MAXR];
    int oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < m && oi < n) {
        int64_t np = nn[ni], op = d[oi];
        while (np != op) {
            if (np < op) {
                if (nj >= m) return 1;
                np *= nn[nj++];
            } else {
                if (oj >= n) return 1;
                op *= d[oj++];
            }
        }
        for (int k = oi; k < oj - 1; k++)
            if (st[k] != d[k + 1] * st[k + 1]) return 1;
        out[nj - 1] = st[oj - 1];
        for (int k = nj - 1; k > ni; k--) out[k - 1] = out[k] * nn[k];
        ni = nj++;
        oi = oj++;
    }
    if (ni != m || oi != n) return 1;
    int64_t last = 1; /* size-1 dims: any stride; the next one out keeps descriptors tidy */
    for (int i = nr - 1, k = m - 1; i >= 0; i--) {
        if (k >= 0 && map[k] == i) {
            ns[i] = out[k];
            last = out[k] * nn[k];
            k--;
        } else ns[i] = last;
    }
    return 0;
}

/* md (dims, strides) when it is a strided layout without blocking, offset 0; 0 if so. */
static int strided_of(const_dnnl_memory_desc_t md, int *nd, int64_t *dims, int64_t *strides)
{
    dnnl_format_kind_t fk = dnnl_format_kind_undef;
    int nblks = -1;
    const dnnl_dims_t *dd = NULL, *ss = NULL;
    dnnl_dim_t off = -1;
    if (D(dnnl_memory_desc_query)(md, dnnl_query_format_kind, &fk) != dnnl_success ||
        fk != dnnl_blocked ||
        D(dnnl_memory_desc_query)(md, dnnl_query_inner_nblks_s32, &nblks) != dnnl_success ||
        nblks != 0 || D(dnnl_memory_desc_query)(md, dnnl_query_ndims_s32, nd) != dnnl_success ||
        D(dnnl_memory_desc_query)(md, dnnl_query_dims, &dd) != dnnl_success ||
        D(dnnl_memory_desc_query)(md, dnnl_query_strides, &ss) != dnnl_success ||
        D(dnnl_memory_desc_query)(md, dnnl_query_submemory_offset_s64, &off) != dnnl_success ||
        off != 0 || !dd || !ss)
        return 1;
    for (int i = 0; i < *nd; i++) {
        dims[i] = (*dd)[i];
        strides[i] = (*ss)[i];
    }
    return 0;
}

static dnnl_memory_desc_t strided_md(int r, const int64_t *dims, const int64_t *strides)
{
    dnnl_dims_t d, st;
    for (int i = 0; i < r; i++) {
        d[i] = dims[i];
        st[i] = strides[i];
    }
    dnnl_memory_desc_t md = NULL;
    return D(dnnl_memory_desc_create_with_strides)(&md, r, d, dnnl_f32, st) == dnnl_success ? md
                                                                                            : NULL;
}

/* A Reshape of value x (rank-r result dims yd) as a view of bytes x already has: one of its
 * strided layouts the new dims can be read through (a channel split of an nhwc conv output);
 * else, for a 4-D result of a value in a strided, non-plain layout (a channel shuffle's
 * transposed view), one reorder of x into the bytes of an nhwc result, so the convolution after
 * it reads them as they are; else -1 (its row-major bytes then). *md and *buf: the result's. */
static int reshape_view(pb *b, int x, int r, const int64_t *yd, int is_out, dnnl_memory_desc_t *md,
                        int *buf)
{
    int64_t xd[MAXR], xs[MAXR], ys[MAXR];
    int nd;
    for (int i = 0; i < b->nviews[x]; i++) {
        if (strided_of(b->views[x][i].md, &nd, xd, xs) || reshape_strides(nd, xd, xs, r, yd, ys))
            continue;
        if (!(*md = strided_md(r, yd, ys))) return -1;
        *buf = b->views[x][i].buf;
        return 0;
    }
    if (r != 4 || is_out || !b->nviews[x] || is_plain(b, x, home(b, x)) ||
        strided_of(home(b, x), &nd, xd, xs))
        return -1;
    const int64_t *xdims = DIMS(x);
    int xr = VAL(x)->ndim;
    int64_t nhwc[4] = {yd[1] * yd[2] * yd[3], 1, yd[3] * yd[1], yd[1]}; /* acdb strides of yd */
    if (reshape_strides(4, yd, nhwc, xr, xdims, xs)) return -1;
    dnnl_memory_desc_t xmd = strided_md(xr, xdims, xs);
    *md = strided_md(4, yd, nhwc);
    if (!xmd || !*md) {
        md_free(xmd);
        md_free(*md);
        *md = NULL;
        return -1;
    }
    int nb = b->dry ? 0 : arena_buf(b, *md);
    int rc = nb < 0 || (!b->dry && add_reorder(b, b->views[x][0].buf, home(b, x), nb, xmd)) ||
             add_view(b, x, xmd, nb);
    md_free(xmd);
    if (rc) {
        md_free(*md);
        *md = NULL;
        return 1;
    }
    *buf = nb;
    return 0;
}

/* Reshape and Transpose copy nothing where they can: the result is a view of the input's bytes
 * (a Reshape through strides the input's layout allows, see reshape_view, else of its
 * row-major bytes; a Transpose of the layout it is in, axes permuted). A reader needing another
 * layout reorders it, as for any value; the kernel's output is reordered into place. */
static int build_view(pb *b, const ox_op *op)
{
    int x = op->in[0], buf = 0, r = VAL(op->out)->ndim;
    dnnl_memory_desc_t md = NULL;
    if (op->kind == OP_RESHAPE) {
        int got = reshape_view(b, x, r, DIMS(op->out), op->out == b->g->out, &md, &buf);
        if (got > 0) return 1;
        if (got < 0) {
            md = value_plain(b, op->out, r);
            if (!md || (!b->dry && plain_buf(b, x, &buf))) {
                md_free(md);
                return ox_fail(b->e, "node '%s' (%s): no view of its input", op->name, op->op_type);
            }
        }
    } else {
        int inv[MAXR];
        for (int i = 0; i < r; i++)
            inv[op->perm[i]] = i; /* oneDNN: input axis i becomes output axis inv[i] */
        const_dnnl_memory_desc_t from = home(b, x);
        if (D(dnnl_memory_desc_permute_axes)(&md, from, inv) != dnnl_success) {
            md = NULL;
            dnnl_memory_desc_t pm = value_plain(b, x, VAL(x)->ndim);
            if (!pm || D(dnnl_memory_desc_permute_axes)(&md, pm, inv) != dnnl_success ||
                (!b->dry && plain_buf(b, x, &buf))) {
                md_free(pm);
                return ox_fail(b->e, "node '%s' (Transpose): oneDNN cannot permute its layout",
                               op->name);
            }
            md_free(pm);
        } else buf = b->views[x][0].buf;
    }
    int rc;
    if (b->dry) rc = add_view(b, op->out, md, 0);
    else {
        b->p->bufs[buf].shared = 1; /* its readers' arguments extend the buffer's life */
        rc = op->out == b->g->out ? set_result(b, op, buf, md, 1) : add_view(b, op->out, md, buf);
    }
    md_free(md);
    return rc;
}

/* LayerNormalization: the input's plain bytes as (outer, inner) rows. */
static void ln_rows(pb *b, const ox_op *op, int64_t *rows)
{
    const int64_t *xd = DIMS(op->in[0]);
    rows[0] = 1;
    for (int i = 0; i < op->axis; i++) rows[0] *= xd[i];
    rows[1] = op->size;
}

static int ln_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    int64_t rows[2];
    ln_rows(b, op, rows);
    if (s == -1) return 0;
    if (plain_arg(b, s, DNNL_ARG_SRC, op->in[0], plain_md(2, rows, 2))) return 1;
    if (plain_arg(b, s, DNNL_ARG_SCALE, op->in[1], plain_md(1, &op->size, 1))) return 1;
    if (op->nin == 3 && op->in[2] >= 0 &&
        plain_arg(b, s, DNNL_ARG_SHIFT, op->in[2], plain_md(1, &op->size, 1)))
        return 1;
    if (s < 0) return 0;
    /* the statistics, where this oneDNN wants them as outputs: scratch in the arena */
    static const int stats[2] = {DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
    for (int i = 0; i < 2; i++) {
        const_dnnl_memory_desc_t md = query(pd, dnnl_query_dst_md, 1 + i);
        if (!md || !D(dnnl_memory_desc_get_size)(md)) continue;
        int sb = arena_buf(b, md);
        if (sb < 0 || add_arg(b, s, stats[i], sb, md)) return 1;
    }
    return 0;
}

static int build_ln(pb *b, const ox_op *op)
{
    int64_t rows[2];
    ln_rows(b, op, rows);
    unsigned flags = dnnl_use_scale | (op->nin == 3 && op->in[2] >= 0 ? dnnl_use_shift : 0);
    dnnl_memory_desc_t md = plain_md(2, rows, 2), as = value_plain(b, op->out, VAL(op->out)->ndim);
    dnnl_primitive_attr_t a = op_attr(b, op);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = a && md && as ? D(dnnl_layer_normalization_forward_primitive_desc_create)(
                                           &pd, ox_engine(), dnnl_forward_inference, md, md, NULL,
                                           op->eps, flags, a)
                                     : dnnl_out_of_memory;
    md_free(md);
    if (a) D(dnnl_primitive_attr_destroy)(a);
    int rc = st == dnnl_success
                 ? finish_as(b, op, pd, ln_inputs, as)
                 : ox_fail(b->e, "node '%s' (LayerNormalization): oneDNN has no primitive for it",
                           op->name);
    md_free(as);
    return rc;
}

/* The layout of value v an op is tried with: 0 where it is, 1 nhwc (4-D only), 2 plain. */
static dnnl_memory_desc_t layout(pb *b, int v, int r, int attempt)
{
    if (attempt == 0) return clone_md(home(b, v));
    if (attempt == 1) return tag_md(4, DIMS(v), dnnl_acdb);
    return value_plain(b, v, r);
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
    dnnl_memory_desc_t md = tag_md(4, DIMS(v), dnnl_acdb);
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

/* A layout-keeping op: with its input's layout; for pools and LRN, whose plain-layout kernels
 * are slow, then nhwc unless a jit kernel takes the first; last plain (if oneDNN refuses the
 * others or has only its reference kernel for them). */
static int build_simple(pb *b, const ox_op *op)
{
    int x = op->in[0];
    int r = VAL(op->out)->ndim;
    const int64_t *yd = DIMS(op->out);
    int picky = (op->kind == OP_POOL || op->kind == OP_LRN) && r == 4;
    if (nhwc_lrn_fits(b, op)) return build_nhwc_lrn(b, op);
    for (int attempt = 0; attempt < 3; attempt++) {
        if (attempt == 1 && !picky) continue;
        if (op->kind == OP_SOFTMAX && attempt < 2) continue; /* plain: see softmax_nan_rows */
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
            dst = any_md(4, yd);
            if (dst)
                st = D(dnnl_pooling_forward_primitive_desc_create)(
                    &pd, ox_engine(), dnnl_forward_inference, alg, src, dst, S, K, DL, PL, PR, a);
            break;
        }
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
                D(dnnl_primitive_attr_destroy)(a);
                a = src1 ? op_attr_adding(b, op, src1) : NULL;
                if (a)
                    st = D(dnnl_binary_primitive_desc_create)(&pd, ox_engine(), dnnl_binary_mul,
                                                              src, src1, src, a);
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
            int ok = 1, vals[MAXIN], n = concat_sources(b, op, vals);
            for (int i = 0; i < n; i++) ok = ok && (srcs[i] = layout(b, vals[i], r, attempt));
            dst = any_md(r, yd);
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

/* ---- plans ------------------------------------------------------------------------------- */

static void ctx_free(const ox_plan *p, ox_ctx *c)
{
    for (int i = 0; i < p->nmem; i++)
        if (c->mem[i]) D(dnnl_memory_destroy)(c->mem[i]);
    free(c->mem);
    free(c->ptr);
    free(c);
}

void ox_plan_free(ox_plan *p)
{
    if (!p) return;
    while (p->all) {
        ox_ctx *c = p->all;
        p->all = c->next;
        ctx_free(p, c);
    }
    pthread_mutex_destroy(&p->mu);
    for (int i = 0; i < p->nstep; i++) {
        ox_step *s = &p->steps[i];
        for (int j = 0; j < s->nargs; j++) {
            md_free(s->args[j].md);
            if (s->args[j].fixed) D(dnnl_memory_destroy)(s->args[j].fixed);
        }
        if (s->prim) D(dnnl_primitive_destroy)(s->prim);
    }
    for (int i = 0; i < p->nowned; i++) free(p->owned[i]);
    free(p->owned);
    free(p->steps);
    free(p->bufs);
    free(p);
}

static uint64_t align64(uint64_t n)
{
    return (n + 63) & ~(uint64_t)63;
}

/* Greedy by size: each arena buffer takes the lowest offset clear of every placed buffer whose
 * steps overlap its own. */
static int place_arena(ox_plan *p)
{
    int n = 0;
    int *idx = malloc((size_t)(p->nbuf + 1) * sizeof *idx);
    if (!idx) return 1;
    for (int i = 0; i < p->nbuf; i++)
        if (p->bufs[i].where == B_ARENA && p->bufs[i].first >= 0) idx[n++] = i;
    for (int i = 1; i < n; i++) /* insertion sort, largest first */
        for (int j = i; j > 0 && p->bufs[idx[j]].size > p->bufs[idx[j - 1]].size; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        ox_buf *bf = &p->bufs[idx[i]];
        uint64_t size = align64(bf->size), off = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int j = 0; j < i; j++) {
                const ox_buf *o = &p->bufs[idx[j]];
                if (o->last < bf->first || bf->last < o->first) continue;
                if (off < o->off + align64(o->size) && o->off < off + size) {
                    off = o->off + align64(o->size);
                    moved = 1;
                }
            }
        }
        bf->off = off;
        if (off + size > total) total = off + size;
    }
    free(idx);
    p->arena = total;
    return 0;
}

/* An op whose result holds no element runs no step: its result is a plain view of no bytes,
 * for readers whose own result is not empty (a MatMul over K = 0; a Concat leaves it out). */
static int empty_result(pb *b, const ox_op *op)
{
    dnnl_memory_desc_t md = value_plain(b, op->out, VAL(op->out)->ndim);
    int buf = !md ? -1 : op->out == b->g->out ? new_buf(b, B_OUT, 0, NULL, 0) : arena_buf(b, md);
    int rc = buf < 0 || add_view(b, op->out, md, buf);
    md_free(md);
    return rc ? ox_fail(b->e, "out of memory") : 0;
}

static ox_plan *build_ex(const ox_graph *g, const int64_t *dims, int threads, int dry, ox_err *e)
{
    ox_plan *p = calloc(1, sizeof *p);
    pb b = {g,
            dims,
            p,
            e,
            dry,
            calloc((size_t)g->nval, sizeof(int)),
            calloc((size_t)g->nval, sizeof(int)),
            calloc((size_t)g->nval, sizeof(ox_view[MAXVIEWS])),
            0};
    int rc = 1;
    if (!p || !b.nviews || !b.last_use || !b.views) {
        ox_fail(e, "out of memory");
        goto done;
    }
    p->threads = threads;
    pthread_mutex_init(&p->mu, NULL);
    dl_omp_set_num_threads(
        threads); /* oneDNN sizes its kernels for the threads of the creating thread */
    for (int oi = 0; oi < g->norder; oi++) {
        const ox_op *op = &g->ops[g->order[oi]];
        for (int j = 0; j < op->nin; j++)
            if (op->in[j] >= 0) b.last_use[op->in[j]] = oi;
        for (int j = 0; j < op->npost; j++)
            if (op->post[j].kind == POST_SUM) b.last_use[op->post[j].val] = oi;
    }
    /* kernel inputs and constants: plain, where they are */
    for (int v = 0; v < g->nval; v++) {
        const ox_value *val = &g->vals[v];
        if (val->kin < 0 && !val->cdata) continue;
        int buf = val->cdata ? new_buf(&b, B_CONST, 0, val->cdata, 0)
                             : new_buf(&b, B_IN, val->kin, NULL, 0);
        dnnl_memory_desc_t md = plain_md(val->ndim, dims + (size_t)v * MAXR, val->ndim);
        int bad = buf < 0 || !md || add_view(&b, v, md, buf);
        md_free(md);
        if (bad) {
            ox_fail(e, "out of memory");
            goto done;
        }
    }
    for (int oi = 0; oi < g->norder; oi++) {
        const ox_op *op = &g->ops[g->order[oi]];
        b.cur = oi;
        if (ox_value_empty(g, dims, op->out)) { /* nothing to compute */
            if (empty_result(&b, op)) goto done;
            continue;
        }
        int r = op->kind == OP_CONV                                  ? build_conv(&b, op)
                : op->kind == OP_MATMUL                              ? build_matmul(&b, op)
                : op->kind == OP_LN                                  ? build_ln(&b, op)
                : op->kind == OP_ERF || op->kind == OP_NANREP        ? build_loop(&b, op)
                : op->kind == OP_ELTWISE && ox_own_eltwise(op->alg)  ? build_own_eltwise(&b, op)
                : op->kind == OP_POOL && op->maxpool && g->strict    ? build_strict_maxpool(&b, op)
                : op->kind == OP_LRN && g->strict                    ? build_strict_lrn(&b, op)
                : op->kind == OP_RESHAPE || op->kind == OP_TRANSPOSE ? build_view(&b, op)
                                                                     : build_simple(&b, op);
        if (r) goto done;
    }
    rc = dry ? 0 : place_arena(p);
    const char *prof = getenv("NNPLUG_ONEDNN_PROFILE");
    p->profile = prof && !strcmp(prof, "1");
    for (int i = 0; i < p->nstep; i++) p->nmem += p->steps[i].nargs;
done:
    if (b.views)
        for (int v = 0; v < g->nval; v++)
            for (int i = 0; i < b.nviews[v]; i++) md_free(b.views[v][i].md);
    free(b.views);
    free(b.nviews);
    free(b.last_use);
    if (rc || dry) {
        ox_plan_free(p);
        return dry && !rc ? (ox_plan *)1 : NULL;
    }
    return p;
}

ox_plan *ox_plan_build(const ox_graph *g, const int64_t *dims, int threads, ox_err *e)
{
    return build_ex(g, dims, threads, 0, e);
}

int ox_plan_check(const ox_graph *g, const int64_t *dims, int threads, ox_err *e)
{
    return build_ex(g, dims, threads, 1, e) == NULL;
}

uint64_t ox_plan_workspace(const ox_plan *p)
{
    return align64(p->arena) + p->scratch;
}
int ox_plan_threads(const ox_plan *p)
{
    return p->threads;
}

/* A context for one run: an idle one, else a new one (kept with the plan). */
static ox_ctx *ctx_take(ox_plan *p)
{
    pthread_mutex_lock(&p->mu);
    ox_ctx *c = p->idle;
    if (c) p->idle = c->next_idle;
    pthread_mutex_unlock(&p->mu);
    if (c) return c;
    c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->mem = calloc((size_t)p->nmem + 1, sizeof *c->mem);
    c->ptr = calloc((size_t)p->nmem + 1, sizeof *c->ptr);
    if (!c->mem || !c->ptr) {
        free(c->mem);
        free(c->ptr);
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    c->next = p->all;
    p->all = c;
    pthread_mutex_unlock(&p->mu);
    return c;
}

static void ctx_give(ox_plan *p, ox_ctx *c)
{
    pthread_mutex_lock(&p->mu);
    c->next_idle = p->idle;
    p->idle = c;
    pthread_mutex_unlock(&p->mu);
}

/* ---- NNPLUG_ONEDNN_PROFILE=1 -------------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static const char *kind_name(dnnl_primitive_kind_t k)
{
    switch (k) {
    case dnnl_reorder: return "reorder";
    case dnnl_concat: return "concat";
    case dnnl_convolution: return "convolution";
    case dnnl_eltwise: return "eltwise";
    case dnnl_softmax: return "softmax";
    case dnnl_pooling: return "pooling";
    case dnnl_lrn: return "lrn";
    case dnnl_batch_normalization: return "batch_normalization";
    case dnnl_layer_normalization: return "layer_normalization";
    case dnnl_inner_product: return "inner_product";
    case dnnl_binary: return "binary";
    case dnnl_matmul: return "matmul";
    default: return "primitive";
    }
}

/* One line on stderr for step i, its fields between " | ": its node, what ran (oneDNN's
 * primitive kind and implementation, or the backend's own step) and its time. */
static void profile_line(int i, const ox_step *st, double ms)
{
    const char *kind = st->what ? st->what : "primitive", *impl = "own";
    if (st->prim) {
        const_dnnl_primitive_desc_t pd = NULL;
        dnnl_primitive_kind_t k = dnnl_undefined_primitive;
        if (D(dnnl_primitive_get_primitive_desc)(st->prim, &pd) == dnnl_success && pd) {
            if (D(dnnl_primitive_desc_query)(pd, dnnl_query_primitive_kind, 0, &k) == dnnl_success)
                kind = kind_name(k);
            if (D(dnnl_primitive_desc_query)(pd, dnnl_query_impl_info_str, 0, &impl) !=
                    dnnl_success ||
                !impl)
                impl = "?";
        }
    }
    fprintf(stderr, "nnplug-onednn: step %4d | %-40s | %-26s | %-28s | %9.3f ms\n", i,
            st->node ? st->node : "", kind, impl, ms);
}

/* The plan's one mutable part is its pool of contexts, under its mutex. */
int ox_plan_run(const ox_plan *cp, const nnp_tensor *in, const nnp_tensor *out, void *ws, ox_err *e)
{
    ox_plan *p = (ox_plan *)cp;
    dnnl_stream_t s = ox_thread_stream();
    if (!s) return ox_fail(e, "oneDNN could not create a stream");
    ox_ctx *c = ctx_take(p);
    if (!c) return ox_fail(e, "out of memory");
    dl_omp_set_num_threads(p->threads);
    char *arena = ws, *scratch = (char *)ws + align64(p->arena);
    int rc = 0;
    int nonfinite = 0; /* what the last Winograd input transform found */
    for (int i = 0, k = 0; i < p->nstep && !rc; i++) {
        const ox_step *st = &p->steps[i];
        double t0 = p->profile ? now_ms() : 0;
        if (st->when != RUN_ALWAYS && (st->when == RUN_NONFINITE) != nonfinite) {
            k += st->nargs;
            continue;
        }
        dnnl_exec_arg_t args[MAXARGS];
        void *ptrs[MAXARGS];
        for (int j = 0; j < st->nargs; j++, k++) {
            const ox_arg *a = &st->args[j];
            args[j].arg = a->arg;
            void *ptr;
            if (a->buf < 0) ptr = scratch;
            else {
                const ox_buf *bf = &p->bufs[a->buf];
                ptr = bf->where == B_IN      ? nnp_tensor_ptr(&in[bf->index])
                      : bf->where == B_OUT   ? nnp_tensor_ptr(&out[0])
                      : bf->where == B_ARENA ? arena + bf->off
                                             : (void *)bf->ptr;
            }
            ptrs[j] = ptr;
            if (a->fixed) {
                args[j].memory = a->fixed;
                continue;
            }
            if (st->fn) continue;
            if (!c->mem[k]) {
                if (D(dnnl_memory_create)(&c->mem[k], a->md, ox_engine(), ptr) != dnnl_success) {
                    c->mem[k] = NULL;
                    rc = ox_fail(e, "oneDNN could not wrap a tensor");
                    break;
                }
            } else if (c->ptr[k] != ptr &&
                       D(dnnl_memory_set_data_handle)(c->mem[k], ptr) != dnnl_success) {
                rc = ox_fail(e, "oneDNN could not wrap a tensor");
                break;
            }
            c->ptr[k] = ptr;
            args[j].memory = c->mem[k];
        }
        if (!rc && st->fn) {
            /* oneDNN's CPU stream runs primitives as they are submitted: the ones before are done */
            if (D(dnnl_stream_wait)(s) != dnnl_success)
                rc = ox_fail(e, "oneDNN failed to finish a step");
            else {
                int found = st->fn(st->cfg, ptrs, st->nargs);
                if (found >= 0) nonfinite = found;
            }
            if (p->profile) profile_line(i, st, now_ms() - t0);
            continue;
        }
        if (!rc && D(dnnl_primitive_execute)(st->prim, s, st->nargs, args) != dnnl_success)
            rc = ox_fail(e, "oneDNN failed to execute a primitive");
        if (p->profile) profile_line(i, st, now_ms() - t0);
    }
    if (!rc && D(dnnl_stream_wait)(s) != dnnl_success)
        rc = ox_fail(e, "oneDNN failed to finish a run");
    ctx_give(p, c);
    return rc;
}
