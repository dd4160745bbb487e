/* Kernels over oneDNN primitives (see kernels.h). Every node is checked here before oneDNN
 * sees it; what is not handled exactly is declined (supports() = 0) so another backend runs
 * it. Activations are plain row-major at kernel edges; constant weights are reordered once
 * into the layout the primitive picks. */
#define _GNU_SOURCE
#include "kernels.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dl.h"

#define MAXR 6     /* largest rank handled */
#define MAXARGS 12 /* primitive arguments of one kernel */

enum { FROM_INPUT, FROM_OUTPUT, FROM_OWNED, FROM_SCRATCH };

typedef struct {
    int arg;    /* DNNL_ARG_* */
    int from;   /* FROM_* */
    int index;  /* kernel input/output index, or owned buffer index */
    int64_t numel; /* elements the tensor must have (FROM_INPUT / FROM_OUTPUT) */
    dnnl_memory_desc_t md;
} karg;

struct nnp_kernel {
    dnnl_primitive_t prim;
    int nargs;
    karg args[MAXARGS];
    void *owned[2];
    uint64_t scratch;
    int nin, nout;
};

static dnnl_engine_t g_engine;
static int g_threads = 1;
static pthread_key_t g_stream_key;
static int g_key_made;

static int fail(ox_err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return 1;
}

/* ---- engine, streams, threads -------------------------------------------------------- */

static void stream_free(void *s) { if (s) D(dnnl_stream_destroy)((dnnl_stream_t)s); }

static int default_threads(void)
{
    const char *env = getenv("NNPLUG_CPU_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int ox_init(int num_threads, ox_err *e)
{
    if (dl_load(e->msg, sizeof e->msg)) return 1;
    g_threads = num_threads > 0 ? num_threads : default_threads();
    if (D(dnnl_engine_create)(&g_engine, dnnl_cpu, 0) != dnnl_success)
        return fail(e, "oneDNN could not create its CPU engine");
    if (pthread_key_create(&g_stream_key, stream_free)) return fail(e, "pthread_key_create failed");
    g_key_made = 1;
    return 0;
}

void ox_shutdown(void)
{
    if (g_key_made) {
        stream_free(pthread_getspecific(g_stream_key));
        pthread_key_delete(g_stream_key); /* other threads' streams leak: no destructor may
                                             run after this library is unloaded */
        g_key_made = 0;
    }
    if (g_engine) D(dnnl_engine_destroy)(g_engine);
    g_engine = NULL;
    dl_unload();
}

void ox_set_num_threads(int n) { __atomic_store_n(&g_threads, n > 0 ? n : default_threads(), __ATOMIC_RELAXED); }
int ox_num_threads(void) { return __atomic_load_n(&g_threads, __ATOMIC_RELAXED); }

/* A stream per host thread: oneDNN streams are not meant to be shared between threads. */
static dnnl_stream_t thread_stream(void)
{
    dnnl_stream_t s = pthread_getspecific(g_stream_key);
    if (!s) {
        if (D(dnnl_stream_create)(&s, g_engine, dnnl_stream_default_flags) != dnnl_success) return NULL;
        pthread_setspecific(g_stream_key, s);
    }
    return s;
}

/* ---- node descriptor helpers --------------------------------------------------------- */

static const nnp_attr *attr(const nnp_node_desc *n, const char *name)
{
    return n->attrs ? nnp_find_attr(n->attrs, n->num_attrs, name) : NULL;
}

static int64_t attr_int(const nnp_node_desc *n, const char *name, int64_t def)
{
    const nnp_attr *a = attr(n, name);
    return a && a->type == NNP_ATTR_INT && a->data ? *(const int64_t *)a->data : def;
}

static float attr_float(const nnp_node_desc *n, const char *name, float def)
{
    const nnp_attr *a = attr(n, name);
    return a && a->type == NNP_ATTR_FLOAT && a->data ? *(const float *)a->data : def;
}

/* Copies an INTS attribute; returns its count, 0 when absent, -1 when malformed/too long. */
static int attr_ints(const nnp_node_desc *n, const char *name, int64_t *out, int max)
{
    const nnp_attr *a = attr(n, name);
    if (!a) return 0;
    if (a->type != NNP_ATTR_INTS || a->count > max || (a->count && !a->data)) return -1;
    memcpy(out, a->data, (size_t)a->count * sizeof(int64_t));
    return (int)a->count;
}

static const char *attr_str(const nnp_node_desc *n, const char *name, const char *def)
{
    const nnp_attr *a = attr(n, name);
    return a && a->type == NNP_ATTR_STRING && a->data ? (const char *)a->data : def;
}

static int present(const nnp_node_desc *n, int i)
{
    return i < n->num_inputs && n->inputs[i].name && n->inputs[i].name[0];
}

/* A float32 value with a known shape of rank 0..MAXR and no zero dimension. */
static int f32_static(const nnp_value_desc *v)
{
    if (v->dtype.code != NNP_DTYPE_FLOAT || v->dtype.bits != 32 || v->dtype.lanes > 1) return 0;
    if (v->ndim < 0 || v->ndim > MAXR || (v->ndim && !v->shape)) return 0;
    for (int i = 0; i < v->ndim; i++)
        if (v->shape[i] <= 0) return 0;
    if (v->const_data) {
        int64_t k = 1;
        for (int i = 0; i < v->ndim; i++) k *= v->shape[i];
        if ((uint64_t)k * 4 != v->const_nbytes) return 0;
    }
    return 1;
}

static int64_t numel(const nnp_value_desc *v)
{
    int64_t k = 1;
    for (int i = 0; i < v->ndim; i++) k *= v->shape[i];
    return k;
}

static int same_shape(const nnp_value_desc *a, const nnp_value_desc *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

/* A plain row-major descriptor (rank 0 becomes {1}); dims right-aligned to rank r when r > ndim. */
static dnnl_memory_desc_t plain_md(int ndim, const int64_t *shape, int r)
{
    dnnl_dims_t dims, strides;
    if (r < ndim) r = ndim;
    if (r == 0) { r = 1; dims[0] = 1; }
    else
        for (int i = 0; i < r; i++) dims[i] = i < r - ndim ? 1 : shape[i - (r - ndim)];
    int64_t s = 1;
    for (int i = r - 1; i >= 0; i--) { strides[i] = s; s *= dims[i]; }
    dnnl_memory_desc_t md = NULL;
    if (D(dnnl_memory_desc_create_with_strides)(&md, r, dims, dnnl_f32, strides) != dnnl_success) return NULL;
    return md;
}

static dnnl_memory_desc_t any_md(int ndim, const int64_t *dims)
{
    dnnl_dims_t d;
    for (int i = 0; i < ndim; i++) d[i] = dims[i];
    dnnl_memory_desc_t md = NULL;
    if (D(dnnl_memory_desc_create_with_tag)(&md, ndim, d, dnnl_f32, dnnl_format_tag_any) != dnnl_success) return NULL;
    return md;
}

/* ---- element-wise ops (standalone or as post-ops) ------------------------------------- */

/* The oneDNN eltwise algorithm of a unary node, with its alpha/beta. 0 when not one. */
static int eltwise_of(const nnp_node_desc *n, dnnl_alg_kind_t *alg, float *alpha, float *beta)
{
    const char *op = n->op_type;
    *alpha = 0.f;
    *beta = 0.f;
    if (n->num_outputs != 1 || n->num_inputs < 1) return 0;
    if (!strcmp(op, "Relu")) *alg = dnnl_eltwise_relu;
    else if (!strcmp(op, "LeakyRelu")) { *alg = dnnl_eltwise_relu; *alpha = attr_float(n, "alpha", 0.01f); }
    else if (!strcmp(op, "Sigmoid")) *alg = dnnl_eltwise_logistic;
    else if (!strcmp(op, "Tanh")) *alg = dnnl_eltwise_tanh;
    else if (!strcmp(op, "Elu")) { *alg = dnnl_eltwise_elu; *alpha = attr_float(n, "alpha", 1.f); }
    else if (!strcmp(op, "Abs")) *alg = dnnl_eltwise_abs;
    else if (!strcmp(op, "Sqrt")) *alg = dnnl_eltwise_sqrt;
    else if (!strcmp(op, "Exp")) *alg = dnnl_eltwise_exp;
    else if (!strcmp(op, "Log")) *alg = dnnl_eltwise_log;
    else if (!strcmp(op, "Neg")) { *alg = dnnl_eltwise_linear; *alpha = -1.f; }
    else if (!strcmp(op, "HardSigmoid")) {
        *alg = dnnl_eltwise_hardsigmoid;
        *alpha = attr_float(n, "alpha", 0.2f);
        *beta = attr_float(n, "beta", 0.5f);
    } else if (!strcmp(op, "HardSwish")) { *alg = dnnl_eltwise_hardswish; *alpha = 1.f / 6.f; *beta = 0.5f; }
    else if (!strcmp(op, "Clip")) {
        *alg = dnnl_eltwise_clip;
        *alpha = -INFINITY;
        *beta = INFINITY;
        if (n->opset > 0 && n->opset < 11) {
            *alpha = attr_float(n, "min", -INFINITY);
            *beta = attr_float(n, "max", INFINITY);
        } else {
            /* min and max are inputs: only constant scalars can become eltwise parameters */
            for (int i = 1; i < 3; i++) {
                if (!present(n, i)) continue;
                const nnp_value_desc *v = &n->inputs[i];
                if (!f32_static(v) || !v->const_data || numel(v) != 1) return 0;
                float x = *(const float *)v->const_data;
                if (isnan(x)) return 0;
                if (i == 1) *alpha = x;
                else *beta = x;
            }
        }
        if (*alpha > *beta) return 0; /* ONNX then gives max everywhere; keep that to the cpu backend */
    } else return 0;
    if (n->num_inputs > (strcmp(op, "Clip") ? 1 : 3)) return 0;
    if (!f32_static(&n->inputs[0]) || !f32_static(&n->outputs[0]) || !same_shape(&n->inputs[0], &n->outputs[0]))
        return 0;
    return 1;
}

/* ---- the kernel under construction --------------------------------------------------- */

typedef struct {
    struct nnp_kernel *k;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd;
    int dry;
    int unsupported; /* set by decline() */
    ox_err *e;
} build;

static int decline(build *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->e->msg, sizeof b->e->msg, fmt, ap);
    va_end(ap);
    b->unsupported = 1;
    return 1;
}

static int add_arg(build *b, int arg, int from, int index, int64_t n, dnnl_memory_desc_t md)
{
    if (!md) return fail(b->e, "oneDNN could not create a memory descriptor");
    if (b->k->nargs >= MAXARGS) { D(dnnl_memory_desc_destroy)(md); return fail(b->e, "too many arguments"); }
    karg *a = &b->k->args[b->k->nargs++];
    a->arg = arg;
    a->from = from;
    a->index = index;
    a->numel = n;
    a->md = md;
    return 0;
}

static int add_input(build *b, int arg, const nnp_node_desc *n, int i, int r)
{
    const nnp_value_desc *v = &n->inputs[i];
    return add_arg(b, arg, FROM_INPUT, i, numel(v), plain_md(v->ndim, v->shape, r));
}

static dnnl_memory_desc_t clone_md(const_dnnl_memory_desc_t md)
{
    dnnl_memory_desc_t c = NULL;
    return md && D(dnnl_memory_desc_clone)(&c, md) == dnnl_success ? c : NULL;
}

/* Run a one-off primitive now (weight reorders at load time). */
static int run_now(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args, ox_err *e)
{
    dnnl_stream_t s = thread_stream();
    if (!s) return fail(e, "oneDNN could not create a stream");
    dl_omp_set_num_threads(ox_num_threads());
    if (D(dnnl_primitive_execute)(p, s, nargs, args) != dnnl_success || D(dnnl_stream_wait)(s) != dnnl_success)
        return fail(e, "oneDNN failed to execute a primitive");
    return 0;
}

/* Reorder constant data (plain layout src_md) into an owned buffer of layout dst_md, which
 * becomes argument `arg`. */
static int add_packed(build *b, int arg, const void *data, dnnl_memory_desc_t src_md, const_dnnl_memory_desc_t dst_md)
{
    struct nnp_kernel *k = b->k;
    int slot = k->owned[0] ? 1 : 0;
    dnnl_memory_desc_t md = clone_md(dst_md);
    if (!md || !src_md) {
        if (src_md) D(dnnl_memory_desc_destroy)(src_md);
        return fail(b->e, "oneDNN could not create a memory descriptor");
    }
    if (add_arg(b, arg, FROM_OWNED, slot, 0, md)) { D(dnnl_memory_desc_destroy)(src_md); return 1; }
    size_t size = D(dnnl_memory_desc_get_size)(md);
    int rc = 1;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t rp = NULL;
    dnnl_memory_t ms = NULL, md_mem = NULL;
    if (posix_memalign(&k->owned[slot], 64, size ? size : 64)) {
        k->owned[slot] = NULL;
        fail(b->e, "cannot allocate %zu bytes for packed weights", size);
        goto done;
    }
    if (D(dnnl_reorder_primitive_desc_create)(&rpd, src_md, g_engine, md, g_engine, NULL) != dnnl_success ||
        D(dnnl_primitive_create)(&rp, rpd) != dnnl_success ||
        D(dnnl_memory_create)(&ms, src_md, g_engine, (void *)data) != dnnl_success ||
        D(dnnl_memory_create)(&md_mem, md, g_engine, k->owned[slot]) != dnnl_success) {
        fail(b->e, "oneDNN could not reorder the weights");
        goto done;
    }
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md_mem}};
    rc = run_now(rp, 2, args, b->e);
done:
    if (ms) D(dnnl_memory_destroy)(ms);
    if (md_mem) D(dnnl_memory_destroy)(md_mem);
    if (rp) D(dnnl_primitive_destroy)(rp);
    if (rpd) D(dnnl_primitive_desc_destroy)(rpd);
    D(dnnl_memory_desc_destroy)(src_md);
    return rc;
}

static int binary_alg(const char *op, dnnl_alg_kind_t *alg, int *commutes)
{
    *commutes = 1;
    if (!strcmp(op, "Add")) *alg = dnnl_binary_add;
    else if (!strcmp(op, "Mul")) *alg = dnnl_binary_mul;
    else if (!strcmp(op, "Max")) *alg = dnnl_binary_max;
    else if (!strcmp(op, "Min")) *alg = dnnl_binary_min;
    else if (!strcmp(op, "Sub")) { *alg = dnnl_binary_sub; *commutes = 0; }
    else if (!strcmp(op, "Div")) { *alg = dnnl_binary_div; *commutes = 0; }
    else return 0;
    return 1;
}

static int fits(const nnp_value_desc *v, const nnp_value_desc *y);

/* Post-ops from nodes[1..n): each an element-wise node on the previous output, or a binary
 * node combining it with another value (a residual Add), read as an extra argument. kin: the
 * kernel inputs before nodes[1] (their indices come first). */
static int make_attr(build *b, const nnp_node_desc *nodes, int n, int kin)
{
    if (D(dnnl_primitive_attr_create)(&b->attr) != dnnl_success) return fail(b->e, "oneDNN attr failed");
    D(dnnl_primitive_attr_set_scratchpad_mode)(b->attr, dnnl_scratchpad_mode_user);
    if (n <= 1) return 0;
    dnnl_post_ops_t po;
    if (D(dnnl_post_ops_create)(&po) != dnnl_success) return fail(b->e, "oneDNN post-ops failed");
    for (int i = 1; i < n; i++) {
        dnnl_alg_kind_t alg;
        float alpha, beta;
        int commutes, ok = 0;
        const nnp_node_desc *p = &nodes[i], *q = &nodes[i - 1];
        const char *prev = q->num_outputs >= 1 && q->outputs[0].name ? q->outputs[0].name : "";
        if (eltwise_of(p, &alg, &alpha, &beta) && !strcmp(p->inputs[0].name, prev) &&
            same_shape(&p->inputs[0], &q->outputs[0])) {
            for (int j = 1; j < p->num_inputs; j++)
                if (!strcmp(p->inputs[j].name, prev)) goto refuse;
            ok = D(dnnl_post_ops_append_eltwise)(po, alg, alpha, beta) == dnnl_success;
            kin += p->num_inputs - 1;
        } else if (binary_alg(p->op_type, &alg, &commutes) && p->num_inputs == 2 && p->num_outputs == 1) {
            int self = !strcmp(p->inputs[0].name, prev) ? 0 : !strcmp(p->inputs[1].name, prev) ? 1 : -1;
            const nnp_value_desc *other = &p->inputs[1 - (self < 0 ? 0 : self)];
            if (self < 0 || (self == 1 && !commutes) || !strcmp(other->name, prev) || !f32_static(other) ||
                !f32_static(&p->outputs[0]) || !same_shape(&p->outputs[0], &q->outputs[0]) ||
                fits(other, &p->outputs[0]) < 0)
                goto refuse;
            /* the other operand must come from outside the group */
            for (int k = 0; k < i; k++)
                if (nodes[k].num_outputs && nodes[k].outputs[0].name && !strcmp(nodes[k].outputs[0].name, other->name))
                    goto refuse;
            const nnp_value_desc *y = &p->outputs[0];
            dnnl_memory_desc_t md = plain_md(other->ndim, other->shape, y->ndim);
            if (!md) goto refuse;
            int index = D(dnnl_post_ops_len)(po);
            /* the kernel owns md from here; the other operand is the node's one outside input */
            if (add_arg(b, DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, FROM_INPUT, kin, numel(other), md)) {
                D(dnnl_post_ops_destroy)(po);
                return 1;
            }
            ok = D(dnnl_post_ops_append_binary)(po, alg, md) == dnnl_success;
            kin += 1;
        }
        if (!ok) goto refuse;
    }
    dnnl_status_t st = D(dnnl_primitive_attr_set_post_ops)(b->attr, po);
    D(dnnl_post_ops_destroy)(po);
    return st == dnnl_success ? 0 : decline(b, "oneDNN refuses these post-ops");
refuse:
    D(dnnl_post_ops_destroy)(po);
    return decline(b, "nodes after the first cannot be fused");
}

/* Spatial padding: pads/auto_pad of a 2-D window op, with the right padding that gives the
 * output size the model says (ceil_mode, SAME_*). 0, or decline. */
static int window(build *b, const nnp_node_desc *n, const int64_t *in, const int64_t *out, const int64_t *ker,
                  const int64_t *st, const int64_t *dil, int64_t *pl, int64_t *pr, int exact_pads)
{
    int64_t pads[4] = {0, 0, 0, 0};
    const char *ap = attr_str(n, "auto_pad", "NOTSET");
    int np = attr_ints(n, "pads", pads, 4);
    if (np != 0 && np != 4) return decline(b, "pads");
    for (int i = 0; i < 2; i++) {
        int64_t span = (ker[i] - 1) * dil[i] + 1;
        int64_t total = (out[i] - 1) * st[i] + span - in[i];
        if (!strcmp(ap, "NOTSET")) {
            pl[i] = pads[i];
            pr[i] = pads[i + 2];
        } else if (!strcmp(ap, "VALID")) {
            pl[i] = pr[i] = 0;
        } else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
            if (total < 0) total = 0;
            pl[i] = !strcmp(ap, "SAME_UPPER") ? total / 2 : total - total / 2;
            pr[i] = total - pl[i];
        } else return decline(b, "auto_pad %s", ap);
        if (pl[i] < 0 || pr[i] < 0 || pl[i] >= span || pr[i] >= span) return decline(b, "pads");
        if ((in[i] + pl[i] + pr[i] - span) / st[i] + 1 != out[i]) {
            /* ceil_mode: oneDNN needs the extra right padding spelled out */
            int64_t need = total - pl[i];
            if (exact_pads || need < pr[i] || (in[i] + pl[i] + need - span) / st[i] + 1 != out[i])
                return decline(b, "output size");
            pr[i] = need;
        }
        if (in[i] + pl[i] + pr[i] < span) return decline(b, "window larger than input");
    }
    return 0;
}

/* ---- ops ----------------------------------------------------------------------------- */

/* An inference BatchNormalization on the Conv's output with constant parameters: folded into
 * the Conv's weights and bias at load. */
static int bn_foldable(const nnp_node_desc *conv, const nnp_node_desc *bn)
{
    if (strcmp(bn->op_type, "BatchNormalization") || bn->num_inputs != 5 || bn->num_outputs != 1 ||
        attr_int(bn, "training_mode", 0) != 0 || (bn->opset > 0 && bn->opset < 9) || conv->num_outputs != 1 ||
        !conv->outputs[0].name || strcmp(bn->inputs[0].name, conv->outputs[0].name) ||
        !same_shape(&bn->inputs[0], &conv->outputs[0]) || !same_shape(&bn->outputs[0], &conv->outputs[0]) ||
        conv->outputs[0].ndim != 4)
        return 0;
    for (int i = 1; i < 5; i++) {
        const nnp_value_desc *v = &bn->inputs[i];
        if (!f32_static(v) || !v->const_data || v->ndim != 1 || v->shape[0] != conv->outputs[0].shape[1]) return 0;
    }
    return 1;
}

static int build_conv(build *b, const nnp_node_desc *n, const nnp_node_desc *nodes, int nn)
{
    if (n->num_inputs < 2 || n->num_inputs > 3 || n->num_outputs != 1) return decline(b, "Conv arity");
    const nnp_value_desc *x = &n->inputs[0], *w = &n->inputs[1], *y = &n->outputs[0];
    const nnp_value_desc *bias = present(n, 2) ? &n->inputs[2] : NULL;
    if (!f32_static(x) || !f32_static(w) || !f32_static(y) || x->ndim != 4 || w->ndim != 4 || y->ndim != 4)
        return decline(b, "Conv: only 2-D float32 with static shapes");
    if (!w->const_data) return decline(b, "Conv: weights must be constant");
    if (bias && (!f32_static(bias) || bias->ndim != 1 || bias->shape[0] != w->shape[0])) return decline(b, "Conv bias");
    int64_t g = attr_int(n, "group", 1), ker[2] = {w->shape[2], w->shape[3]}, st[2] = {1, 1}, dil[2] = {1, 1}, ks[2];
    int nk = attr_ints(n, "kernel_shape", ks, 2);
    if (nk < 0 || (nk && (nk != 2 || ks[0] != ker[0] || ks[1] != ker[1]))) return decline(b, "kernel_shape");
    int ns = attr_ints(n, "strides", st, 2), nd = attr_ints(n, "dilations", dil, 2);
    if ((ns && ns != 2) || (nd && nd != 2) || st[0] < 1 || st[1] < 1 || dil[0] < 1 || dil[1] < 1) return decline(b, "strides/dilations");
    int64_t N = x->shape[0], C = x->shape[1], OC = w->shape[0];
    if (g < 1 || C % g || OC % g || w->shape[1] != C / g || y->shape[0] != N || y->shape[1] != OC)
        return decline(b, "Conv channels");
    int64_t pl[2], pr[2];
    if (window(b, n, x->shape + 2, y->shape + 2, ker, st, dil, pl, pr, 1)) return 1;
    const nnp_node_desc *bn = nn > 1 && bn_foldable(n, &nodes[1]) && (!bias || bias->const_data) ? &nodes[1] : NULL;
    if (bn ? make_attr(b, nodes + 1, nn - 1, n->num_inputs + 4) : make_attr(b, nodes, nn, n->num_inputs)) return 1;
    int64_t wd[5] = {g, OC / g, C / g, ker[0], ker[1]};
    dnnl_memory_desc_t wany = g > 1 ? any_md(5, wd) : any_md(4, w->shape);
    dnnl_memory_desc_t xmd = plain_md(4, x->shape, 4), ymd = plain_md(4, y->shape, 4);
    dnnl_memory_desc_t bmd = bias || bn ? plain_md(1, &OC, 1) : NULL;
    dnnl_dims_t S = {st[0], st[1]}, DL = {dil[0] - 1, dil[1] - 1}, PL = {pl[0], pl[1]}, PR = {pr[0], pr[1]};
    dnnl_status_t rc = D(dnnl_convolution_forward_primitive_desc_create)(
        &b->pd, g_engine, dnnl_forward_inference, dnnl_convolution_direct, xmd, wany, bmd, ymd, S, DL, PL, PR, b->attr);
    D(dnnl_memory_desc_destroy)(wany);
    if (rc != dnnl_success) {
        D(dnnl_memory_desc_destroy)(xmd);
        D(dnnl_memory_desc_destroy)(ymd);
        if (bmd) D(dnnl_memory_desc_destroy)(bmd);
        return decline(b, "oneDNN has no convolution for this node");
    }
    if (add_arg(b, DNNL_ARG_SRC, FROM_INPUT, 0, numel(x), xmd) || add_arg(b, DNNL_ARG_DST, FROM_OUTPUT, 0, numel(y), ymd))
        return 1;
    if (!bn) {
        if (bmd && add_arg(b, DNNL_ARG_BIAS, FROM_INPUT, 2, OC, bmd)) return 1;
        if (b->dry) return 0;
        return add_packed(b, DNNL_ARG_WEIGHTS, w->const_data, g > 1 ? plain_md(5, wd, 5) : plain_md(4, w->shape, 4),
                          D(dnnl_primitive_desc_query_md)(b->pd, dnnl_query_weights_md, 0));
    }
    if (b->dry) { D(dnnl_memory_desc_destroy)(bmd); return 0; }
    /* y = (conv(x) + bias - mean) * s + shift with s = scale / sqrt(var + eps), per channel */
    int64_t per = numel(w) / OC;
    float *fw = malloc((size_t)numel(w) * sizeof(float)), *fb = NULL;
    if (!fw || posix_memalign((void **)&fb, 64, (size_t)OC * sizeof(float))) {
        free(fw);
        D(dnnl_memory_desc_destroy)(bmd);
        return fail(b->e, "out of memory folding BatchNormalization");
    }
    const float *W = w->const_data, *B = bias ? bias->const_data : NULL;
    const float *sc = bn->inputs[1].const_data, *sh = bn->inputs[2].const_data, *mu = bn->inputs[3].const_data,
                *var = bn->inputs[4].const_data;
    double eps = attr_float(bn, "epsilon", 1e-5f);
    for (int64_t o = 0; o < OC; o++) {
        double f = sc[o] / sqrt((double)var[o] + eps);
        for (int64_t i = 0; i < per; i++) fw[o * per + i] = (float)(W[o * per + i] * f);
        fb[o] = (float)(((B ? B[o] : 0.0) - mu[o]) * f + sh[o]);
    }
    if (bias && !B) {
        /* a bias computed at run time cannot be folded at load */
        free(fw);
        free(fb);
        D(dnnl_memory_desc_destroy)(bmd);
        return decline(b, "Conv bias is not constant");
    }
    int packed = add_packed(b, DNNL_ARG_WEIGHTS, fw, g > 1 ? plain_md(5, wd, 5) : plain_md(4, w->shape, 4),
                        D(dnnl_primitive_desc_query_md)(b->pd, dnnl_query_weights_md, 0));
    free(fw);
    if (packed) { free(fb); D(dnnl_memory_desc_destroy)(bmd); return 1; }
    b->k->owned[1] = fb;
    return add_arg(b, DNNL_ARG_BIAS, FROM_OWNED, 1, 0, bmd);
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
    return D(dnnl_memory_desc_create_with_strides)(&md, r, d, dnnl_f32, s) == dnnl_success ? md : NULL;
}

static int build_matmul(build *b, const nnp_node_desc *n, const nnp_node_desc *nodes, int nn, int gemm)
{
    if (n->num_outputs != 1 || n->num_inputs < 2 || n->num_inputs > (gemm ? 3 : 2)) return decline(b, "arity");
    const nnp_value_desc *a = &n->inputs[0], *w = &n->inputs[1], *y = &n->outputs[0];
    const nnp_value_desc *c = gemm && present(n, 2) ? &n->inputs[2] : NULL;
    if (!f32_static(a) || !f32_static(w) || !f32_static(y) || (c && !f32_static(c))) return decline(b, "float32, static shapes");
    int r = y->ndim, ta = 0, tb = 0;
    if (gemm) {
        ta = attr_int(n, "transA", 0) != 0;
        tb = attr_int(n, "transB", 0) != 0;
        if (a->ndim != 2 || w->ndim != 2 || r != 2) return decline(b, "Gemm ranks");
        if (attr_float(n, "alpha", 1.f) != 1.f || (c && attr_float(n, "beta", 1.f) != 1.f)) return decline(b, "Gemm alpha/beta");
        if (c && c->ndim > 2) return decline(b, "Gemm C rank");
    } else if (a->ndim < 2 || w->ndim < 2 || r < 2) {
        return decline(b, "MatMul: rank-1 operands");
    }
    int64_t M = ta ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2], K = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t K2 = tb ? w->shape[w->ndim - 1] : w->shape[w->ndim - 2], N = tb ? w->shape[w->ndim - 2] : w->shape[w->ndim - 1];
    if (K != K2 || y->shape[r - 2] != M || y->shape[r - 1] != N) return decline(b, "shapes");
    for (int i = 0; i < r - 2; i++) {
        int64_t da = i < r - a->ndim ? 1 : a->shape[i - (r - a->ndim)], dw = i < r - w->ndim ? 1 : w->shape[i - (r - w->ndim)];
        if (y->shape[i] != (da > dw ? da : dw) || (da != 1 && da != y->shape[i]) || (dw != 1 && dw != y->shape[i]))
            return decline(b, "batch broadcast");
    }
    if (c)
        for (int i = 0; i < c->ndim; i++) {
            int64_t want = y->shape[2 - c->ndim + i];
            if (c->shape[i] != 1 && c->shape[i] != want) return decline(b, "Gemm C shape");
        }
    if (make_attr(b, nodes, nn, n->num_inputs)) return 1;
    dnnl_memory_desc_t amd = gemm ? matrix_md(a->shape, 2, ta) : plain_md(a->ndim, a->shape, r);
    int packed = w->const_data != NULL;
    dnnl_memory_desc_t wmd;
    if (packed) {
        dnnl_dims_t d;
        for (int i = 0; i < r; i++) d[i] = i < r - w->ndim ? 1 : w->shape[i - (r - w->ndim)];
        d[r - 2] = K;
        d[r - 1] = N;
        wmd = any_md(r, d);
    } else {
        wmd = gemm ? matrix_md(w->shape, 2, tb) : plain_md(w->ndim, w->shape, r);
    }
    dnnl_memory_desc_t ymd = plain_md(r, y->shape, r), cmd = c ? plain_md(c->ndim, c->shape, 2) : NULL;
    dnnl_status_t rc = D(dnnl_matmul_primitive_desc_create)(&b->pd, g_engine, amd, wmd, cmd, ymd, b->attr);
    if (rc != dnnl_success) {
        D(dnnl_memory_desc_destroy)(amd);
        D(dnnl_memory_desc_destroy)(wmd);
        D(dnnl_memory_desc_destroy)(ymd);
        if (cmd) D(dnnl_memory_desc_destroy)(cmd);
        return decline(b, "oneDNN has no matmul for this node");
    }
    if (add_arg(b, DNNL_ARG_SRC, FROM_INPUT, 0, numel(a), amd) || add_arg(b, DNNL_ARG_DST, FROM_OUTPUT, 0, numel(y), ymd))
        return 1;
    if (cmd && add_arg(b, DNNL_ARG_BIAS, FROM_INPUT, 2, numel(c), cmd)) return 1;
    if (!packed) return add_arg(b, DNNL_ARG_WEIGHTS, FROM_INPUT, 1, numel(w), wmd);
    D(dnnl_memory_desc_destroy)(wmd);
    if (b->dry) return 0;
    return add_packed(b, DNNL_ARG_WEIGHTS, w->const_data, gemm ? matrix_md(w->shape, 2, tb) : plain_md(w->ndim, w->shape, r),
                      D(dnnl_primitive_desc_query_md)(b->pd, dnnl_query_weights_md, 0));
}

static int build_pool(build *b, const nnp_node_desc *n, const nnp_node_desc *nodes, int nn)
{
    const char *op = n->op_type;
    int global = !strncmp(op, "Global", 6), maxp = strstr(op, "Max") != NULL;
    if (n->num_inputs != 1 || n->num_outputs != 1) return decline(b, "%s: one input, one output", op);
    const nnp_value_desc *x = &n->inputs[0], *y = &n->outputs[0];
    if (!f32_static(x) || !f32_static(y) || x->ndim != 4 || y->ndim != 4 || y->shape[0] != x->shape[0] || y->shape[1] != x->shape[1])
        return decline(b, "%s: 2-D float32 with static shapes", op);
    int64_t ker[2], st[2] = {1, 1}, dil[2] = {1, 1}, pl[2] = {0, 0}, pr[2] = {0, 0};
    dnnl_alg_kind_t alg = maxp ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
    if (global) {
        ker[0] = x->shape[2];
        ker[1] = x->shape[3];
        if (y->shape[2] != 1 || y->shape[3] != 1) return decline(b, "output size");
    } else {
        if (attr_ints(n, "kernel_shape", ker, 2) != 2 || ker[0] < 1 || ker[1] < 1) return decline(b, "kernel_shape");
        int ns = attr_ints(n, "strides", st, 2), nd = attr_ints(n, "dilations", dil, 2);
        if ((ns && ns != 2) || (nd && nd != 2) || st[0] < 1 || st[1] < 1 || dil[0] < 1 || dil[1] < 1) return decline(b, "strides");
        if (attr_int(n, "storage_order", 0) != 0) return decline(b, "storage_order");
        int incl = !maxp && attr_int(n, "count_include_pad", 0) != 0;
        if (!maxp && (dil[0] != 1 || dil[1] != 1)) return decline(b, "dilated AveragePool");
        if (incl) alg = dnnl_pooling_avg_include_padding;
        /* with count_include_pad the ceil_mode overhang must not count: exact pads only */
        if (window(b, n, x->shape + 2, y->shape + 2, ker, st, dil, pl, pr, incl)) return 1;
    }
    if (make_attr(b, nodes, nn, n->num_inputs)) return 1;
    dnnl_memory_desc_t xmd = plain_md(4, x->shape, 4), ymd = plain_md(4, y->shape, 4);
    dnnl_dims_t S = {st[0], st[1]}, K = {ker[0], ker[1]}, DL = {dil[0] - 1, dil[1] - 1}, PL = {pl[0], pl[1]}, PR = {pr[0], pr[1]};
    if (D(dnnl_pooling_forward_primitive_desc_create)(&b->pd, g_engine, dnnl_forward_inference, alg, xmd, ymd, S, K, DL, PL, PR,
                                                      b->attr) != dnnl_success) {
        D(dnnl_memory_desc_destroy)(xmd);
        D(dnnl_memory_desc_destroy)(ymd);
        return decline(b, "oneDNN has no pooling for this node");
    }
    return add_arg(b, DNNL_ARG_SRC, FROM_INPUT, 0, numel(x), xmd) || add_arg(b, DNNL_ARG_DST, FROM_OUTPUT, 0, numel(y), ymd);
}

static int build_eltwise(build *b, const nnp_node_desc *n, const nnp_node_desc *nodes, int nn)
{
    dnnl_alg_kind_t alg;
    float alpha, beta;
    if (!eltwise_of(n, &alg, &alpha, &beta)) return decline(b, "%s: not handled", n->op_type);
    if (make_attr(b, nodes, nn, n->num_inputs)) return 1;
    const nnp_value_desc *x = &n->inputs[0], *y = &n->outputs[0];
    dnnl_memory_desc_t xmd = plain_md(x->ndim, x->shape, x->ndim), ymd = plain_md(y->ndim, y->shape, y->ndim);
    if (D(dnnl_eltwise_forward_primitive_desc_create)(&b->pd, g_engine, dnnl_forward_inference, alg, xmd, ymd, alpha, beta,
                                                      b->attr) != dnnl_success) {
        D(dnnl_memory_desc_destroy)(xmd);
        D(dnnl_memory_desc_destroy)(ymd);
        return decline(b, "oneDNN has no eltwise for this node");
    }
    return add_arg(b, DNNL_ARG_SRC, FROM_INPUT, 0, numel(x), xmd) || add_arg(b, DNNL_ARG_DST, FROM_OUTPUT, 0, numel(y), ymd);
}

static int build_softmax(build *b, const nnp_node_desc *n)
{
    int logsm = !strcmp(n->op_type, "LogSoftmax");
    if (n->num_inputs != 1 || n->num_outputs != 1) return decline(b, "arity");
    const nnp_value_desc *x = &n->inputs[0], *y = &n->outputs[0];
    if (!f32_static(x) || !f32_static(y) || x->ndim < 1 || !same_shape(x, y)) return decline(b, "float32, static shapes");
    int64_t axis = attr_int(n, "axis", n->opset > 0 && n->opset < 13 ? 1 : -1);
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim) return decline(b, "axis");
    /* before opset 13 the input is flattened to 2-D at axis: one axis only when it is the last */
    if (n->opset > 0 && n->opset < 13 && axis != x->ndim - 1) return decline(b, "opset < 13 axis");
    if (make_attr(b, n, 1, 0)) return 1;
    dnnl_memory_desc_t xmd = plain_md(x->ndim, x->shape, x->ndim), ymd = plain_md(y->ndim, y->shape, y->ndim);
    if (D(dnnl_softmax_forward_primitive_desc_create)(&b->pd, g_engine, dnnl_forward_inference,
                                                      logsm ? dnnl_softmax_log : dnnl_softmax_accurate, xmd, ymd, (int)axis,
                                                      b->attr) != dnnl_success) {
        D(dnnl_memory_desc_destroy)(xmd);
        D(dnnl_memory_desc_destroy)(ymd);
        return decline(b, "oneDNN has no softmax for this node");
    }
    return add_arg(b, DNNL_ARG_SRC, FROM_INPUT, 0, numel(x), xmd) || add_arg(b, DNNL_ARG_DST, FROM_OUTPUT, 0, numel(y), ymd);
}

/* 1 when v, right-aligned to y's rank, has y's shape; 0 when it broadcasts to it; -1 neither. */
static int fits(const nnp_value_desc *v, const nnp_value_desc *y)
{
    if (v->ndim > y->ndim) return -1;
    int full = v->ndim == y->ndim;
    for (int i = 0; i < v->ndim; i++) {
        int64_t d = v->shape[i], want = y->shape[i + y->ndim - v->ndim];
        if (d != want && d != 1) return -1;
        if (d != want) full = 0;
    }
    return full;
}

static int build_binary(build *b, const nnp_node_desc *n, const nnp_node_desc *nodes, int nn)
{
    const char *op = n->op_type;
    dnnl_alg_kind_t alg;
    int comm = 1;
    if (!strcmp(op, "Add")) alg = dnnl_binary_add;
    else if (!strcmp(op, "Mul")) alg = dnnl_binary_mul;
    else if (!strcmp(op, "Max")) alg = dnnl_binary_max;
    else if (!strcmp(op, "Min")) alg = dnnl_binary_min;
    else if (!strcmp(op, "Sub")) { alg = dnnl_binary_sub; comm = 0; }
    else if (!strcmp(op, "Div")) { alg = dnnl_binary_div; comm = 0; }
    else return decline(b, "not a binary op");
    if (n->num_inputs != 2 || n->num_outputs != 1) return decline(b, "%s: two inputs", op);
    const nnp_value_desc *y = &n->outputs[0];
    if (!f32_static(&n->inputs[0]) || !f32_static(&n->inputs[1]) || !f32_static(y) || y->ndim < 1)
        return decline(b, "float32, static shapes");
    int f0 = fits(&n->inputs[0], y), f1 = fits(&n->inputs[1], y), i0 = 0, i1 = 1;
    if (f0 < 0 || f1 < 0) return decline(b, "broadcast");
    if (f0 != 1) {
        if (!comm || f1 != 1) return decline(b, "%s: the first input must have the output's shape", op);
        i0 = 1; /* commutative: the full-shaped operand goes first */
        i1 = 0;
    }
    if (make_attr(b, nodes, nn, n->num_inputs)) return 1;
    const nnp_value_desc *a = &n->inputs[i0], *c = &n->inputs[i1];
    int r = y->ndim;
    dnnl_memory_desc_t amd = plain_md(a->ndim, a->shape, r), cmd = plain_md(c->ndim, c->shape, r), ymd = plain_md(r, y->shape, r);
    if (D(dnnl_binary_primitive_desc_create)(&b->pd, g_engine, alg, amd, cmd, ymd, b->attr) != dnnl_success) {
        D(dnnl_memory_desc_destroy)(amd);
        D(dnnl_memory_desc_destroy)(cmd);
        D(dnnl_memory_desc_destroy)(ymd);
        return decline(b, "oneDNN has no binary primitive for this node");
    }
    return add_arg(b, DNNL_ARG_SRC_0, FROM_INPUT, i0, numel(a), amd) || add_arg(b, DNNL_ARG_SRC_1, FROM_INPUT, i1, numel(c), cmd) ||
           add_arg(b, DNNL_ARG_DST, FROM_OUTPUT, 0, numel(y), ymd);
}

static int build_concat(build *b, const nnp_node_desc *n)
{
    const nnp_value_desc *y = &n->outputs[0];
    int m = n->num_inputs;
    if (m < 1 || m > MAXARGS - 2 || n->num_outputs != 1 || !f32_static(y) || y->ndim < 1) return decline(b, "Concat");
    int64_t axis = attr_int(n, "axis", 1);
    if (axis < 0) axis += y->ndim;
    if (axis < 0 || axis >= y->ndim) return decline(b, "axis");
    dnnl_memory_desc_t srcs[MAXARGS];
    int64_t sum = 0;
    for (int i = 0; i < m; i++) {
        const nnp_value_desc *v = &n->inputs[i];
        if (!f32_static(v) || v->ndim != y->ndim) return decline(b, "Concat inputs");
        for (int d = 0; d < y->ndim; d++)
            if (d != axis && v->shape[d] != y->shape[d]) return decline(b, "Concat shapes");
        sum += v->shape[axis];
    }
    if (sum != y->shape[axis]) return decline(b, "Concat shapes");
    if (make_attr(b, n, 1, 0)) return 1;
    for (int i = 0; i < m; i++) {
        if (add_input(b, DNNL_ARG_MULTIPLE_SRC + i, n, i, y->ndim)) return 1;
        srcs[i] = b->k->args[b->k->nargs - 1].md;
    }
    dnnl_memory_desc_t ymd = plain_md(y->ndim, y->shape, y->ndim);
    if (D(dnnl_concat_primitive_desc_create)(&b->pd, g_engine, ymd, m, (int)axis, (const_dnnl_memory_desc_t *)srcs, b->attr) !=
        dnnl_success) {
        D(dnnl_memory_desc_destroy)(ymd);
        return decline(b, "oneDNN has no concat for this node");
    }
    return add_arg(b, DNNL_ARG_DST, FROM_OUTPUT, 0, numel(y), ymd);
}

static int build_lrn(build *b, const nnp_node_desc *n)
{
    if (n->num_inputs != 1 || n->num_outputs != 1) return decline(b, "arity");
    const nnp_value_desc *x = &n->inputs[0], *y = &n->outputs[0];
    int64_t size = attr_int(n, "size", 0);
    if (!f32_static(x) || x->ndim != 4 || !same_shape(x, y) || size < 1 || size % 2 == 0) return decline(b, "LRN");
    if (make_attr(b, n, 1, 0)) return 1;
    dnnl_memory_desc_t xmd = plain_md(4, x->shape, 4), ymd = plain_md(4, y->shape, 4);
    if (D(dnnl_lrn_forward_primitive_desc_create)(&b->pd, g_engine, dnnl_forward_inference, dnnl_lrn_across_channels, xmd, ymd, size,
                                                  attr_float(n, "alpha", 1e-4f), attr_float(n, "beta", 0.75f),
                                                  attr_float(n, "bias", 1.f), b->attr) != dnnl_success) {
        D(dnnl_memory_desc_destroy)(xmd);
        D(dnnl_memory_desc_destroy)(ymd);
        return decline(b, "oneDNN has no LRN for this node");
    }
    return add_arg(b, DNNL_ARG_SRC, FROM_INPUT, 0, numel(x), xmd) || add_arg(b, DNNL_ARG_DST, FROM_OUTPUT, 0, numel(y), ymd);
}

static int build_batchnorm(build *b, const nnp_node_desc *n, const nnp_node_desc *nodes, int nn)
{
    if (n->num_inputs != 5 || n->num_outputs != 1 || attr_int(n, "training_mode", 0) != 0) return decline(b, "inference only");
    if (n->opset > 0 && n->opset < 9) return decline(b, "opset < 9");
    const nnp_value_desc *x = &n->inputs[0], *y = &n->outputs[0];
    if (!f32_static(x) || x->ndim < 2 || x->ndim > 5 || !same_shape(x, y)) return decline(b, "BatchNormalization shapes");
    for (int i = 1; i < 5; i++)
        if (!f32_static(&n->inputs[i]) || n->inputs[i].ndim != 1 || n->inputs[i].shape[0] != x->shape[1])
            return decline(b, "BatchNormalization parameters");
    if (make_attr(b, nodes, nn, n->num_inputs)) return 1;
    dnnl_memory_desc_t xmd = plain_md(x->ndim, x->shape, x->ndim), ymd = plain_md(y->ndim, y->shape, y->ndim);
    unsigned flags = dnnl_use_global_stats | dnnl_use_scale | dnnl_use_shift;
    if (D(dnnl_batch_normalization_forward_primitive_desc_create)(&b->pd, g_engine, dnnl_forward_inference, xmd, ymd,
                                                                  attr_float(n, "epsilon", 1e-5f), flags,
                                                                  b->attr) != dnnl_success) {
        D(dnnl_memory_desc_destroy)(xmd);
        D(dnnl_memory_desc_destroy)(ymd);
        return decline(b, "oneDNN has no batch normalization for this node");
    }
    static const int args[4] = {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
    if (add_arg(b, DNNL_ARG_SRC, FROM_INPUT, 0, numel(x), xmd) || add_arg(b, DNNL_ARG_DST, FROM_OUTPUT, 0, numel(y), ymd))
        return 1;
    for (int i = 0; i < 4; i++)
        if (add_input(b, args[i], n, i + 1, 1)) return 1;
    return 0;
}

/* Ops that take element-wise post-ops (what fuse() groups). */
static int takes_post_ops(const char *op)
{
    static const char *const ops[] = {"Conv", "Gemm", "MatMul", "Add", "Mul", "Sub", "Div", "Max", "Min",
                                      "BatchNormalization", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (!strcmp(op, ops[i])) return 1;
    return 0;
}

void ox_destroy(nnp_kernel *k)
{
    if (!k) return;
    for (int i = 0; i < k->nargs; i++)
        if (k->args[i].md) D(dnnl_memory_desc_destroy)(k->args[i].md);
    if (k->prim) D(dnnl_primitive_destroy)(k->prim);
    free(k->owned[0]);
    free(k->owned[1]);
    free(k);
}

int ox_build(const nnp_node_desc *nodes, int nn, int dry, nnp_kernel **out, int *unsupported, ox_err *e)
{
    *unsupported = 0;
    if (out) *out = NULL;
    if (!nodes || nn < 1) return fail(e, "no nodes given");
    for (int i = 0; i < nn; i++) {
        const nnp_node_desc *d = &nodes[i];
        if (!d->op_type || d->num_inputs < 0 || d->num_outputs < 1 || (d->num_inputs && !d->inputs) || !d->outputs ||
            d->num_attrs < 0 || (d->num_attrs && !d->attrs))
            return fail(e, "node %d: malformed descriptor", i);
        for (int j = 0; j < d->num_inputs; j++)
            if (!d->inputs[j].name) return fail(e, "node %d: malformed descriptor", i);
        if (d->domain && d->domain[0] && strcmp(d->domain, "ai.onnx")) {
            *unsupported = 1;
            return fail(e, "node '%s': domain %s is not handled by the onednn backend", d->name, d->domain);
        }
    }
    const nnp_node_desc *n = &nodes[0];
    build b = {0};
    b.e = e;
    b.dry = dry;
    b.k = calloc(1, sizeof *b.k);
    if (!b.k) return fail(e, "out of memory");
    if (nn > 1 && !takes_post_ops(n->op_type)) {
        b.unsupported = 1;
        fail(e, "%s takes no fused nodes", n->op_type);
    } else {
        const char *op = n->op_type;
        int rc;
        if (!strcmp(op, "Conv")) rc = build_conv(&b, n, nodes, nn);
        else if (!strcmp(op, "Gemm") || !strcmp(op, "MatMul")) rc = build_matmul(&b, n, nodes, nn, op[0] == 'G');
        else if (!strcmp(op, "MaxPool") || !strcmp(op, "AveragePool") || !strcmp(op, "GlobalAveragePool") ||
                 !strcmp(op, "GlobalMaxPool"))
            rc = build_pool(&b, n, nodes, nn);
        else if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax")) rc = build_softmax(&b, n);
        else if (!strcmp(op, "Concat")) rc = build_concat(&b, n);
        else if (!strcmp(op, "LRN")) rc = build_lrn(&b, n);
        else if (!strcmp(op, "BatchNormalization")) rc = build_batchnorm(&b, n, nodes, nn);
        else if (!strcmp(op, "Add") || !strcmp(op, "Mul") || !strcmp(op, "Sub") || !strcmp(op, "Div") || !strcmp(op, "Max") ||
                 !strcmp(op, "Min"))
            rc = build_binary(&b, n, nodes, nn);
        else rc = build_eltwise(&b, n, nodes, nn);
        if (!rc && !dry) {
            b.k->scratch = D(dnnl_memory_desc_get_size)(D(dnnl_primitive_desc_query_md)(b.pd, dnnl_query_scratchpad_md, 0));
            if (b.k->scratch && add_arg(&b, DNNL_ARG_SCRATCHPAD, FROM_SCRATCH, 0, 0,
                                        clone_md(D(dnnl_primitive_desc_query_md)(b.pd, dnnl_query_scratchpad_md, 0))))
                rc = 1;
            else if (D(dnnl_primitive_create)(&b.k->prim, b.pd) != dnnl_success)
                rc = fail(e, "oneDNN could not create the primitive");
        }
        if (rc && b.unsupported) {
            char why[1024];
            snprintf(why, sizeof why, "%s", e->msg);
            fail(e, "node '%s' (%s) is not handled by the onednn backend: %s", n->name ? n->name : "", op, why);
        }
        *unsupported = b.unsupported;
        if (b.pd) D(dnnl_primitive_desc_destroy)(b.pd);
        if (b.attr) D(dnnl_primitive_attr_destroy)(b.attr);
        b.k->nin = 0;
        for (int i = 0; i < nn; i++) b.k->nin += nodes[i].num_inputs - (i > 0); /* the fused value is internal */
        b.k->nout = nodes[nn - 1].num_outputs;
        if (rc || dry) { ox_destroy(b.k); return rc; }
        *out = b.k;
        return 0;
    }
    *unsupported = b.unsupported;
    ox_destroy(b.k);
    return 1;
}

int ox_fuse_count(const nnp_node_desc *nodes, int n)
{
    if (n < 2 || !takes_post_ops(nodes[0].op_type)) return 1;
    int taken = 1;
    for (int m = 2; m <= n; m++) {
        dnnl_alg_kind_t alg;
        float a, b;
        int commutes;
        if (!eltwise_of(&nodes[m - 1], &alg, &a, &b) && !binary_alg(nodes[m - 1].op_type, &alg, &commutes) &&
            !(m == 2 && !strcmp(nodes[0].op_type, "Conv") && bn_foldable(&nodes[0], &nodes[1])))
            break;
        ox_err e;
        int unsup;
        if (ox_build(nodes, m, 1, NULL, &unsup, &e)) break;
        taken = m;
    }
    return taken;
}

uint64_t ox_workspace_size(const nnp_kernel *k) { return k ? k->scratch : 0; }

int ox_run(const nnp_kernel *k, const nnp_tensor *in, int nin, const nnp_tensor *out, int nout, void *ws, uint64_t wsn,
           ox_err *e)
{
    if (!k) return fail(e, "kernel is NULL");
    if (nin != k->nin || nout != k->nout || (nin && !in) || !out)
        return fail(e, "the kernel has %d inputs and %d outputs; called with %d and %d", k->nin, k->nout, nin, nout);
    if (k->scratch && (!ws || wsn < k->scratch))
        return fail(e, "workspace of %llu bytes; the kernel needs %llu", (unsigned long long)wsn, (unsigned long long)k->scratch);
    dnnl_exec_arg_t args[MAXARGS];
    int made = 0, rc = 0;
    for (int i = 0; i < k->nargs; i++) {
        const karg *a = &k->args[i];
        void *p = NULL;
        if (a->from == FROM_INPUT || a->from == FROM_OUTPUT) {
            if (a->index >= (a->from == FROM_INPUT ? nin : nout)) { rc = fail(e, "internal: argument index"); break; }
            const nnp_tensor *t = a->from == FROM_INPUT ? &in[a->index] : &out[a->index];
            const char *what = a->from == FROM_INPUT ? "input" : "output";
            if (!t->data) { rc = fail(e, "%s %d has no data", what, a->index); break; }
            if (t->dtype.code != NNP_DTYPE_FLOAT || t->dtype.bits != 32 || t->strides || t->ndim < 0 || (t->ndim && !t->shape)) {
                rc = fail(e, "%s %d must be a compact float32 tensor", what, a->index);
                break;
            }
            if (nnp_tensor_numel(t) != a->numel) {
                rc = fail(e, "%s %d has %lld elements; the kernel was built for %lld (static shapes)", what, a->index,
                          (long long)nnp_tensor_numel(t), (long long)a->numel);
                break;
            }
            p = nnp_tensor_ptr(t);
        } else if (a->from == FROM_OWNED) p = k->owned[a->index];
        else p = ws;
        args[i].arg = a->arg;
        if (D(dnnl_memory_create)(&args[i].memory, a->md, g_engine, p) != dnnl_success) {
            rc = fail(e, "oneDNN could not wrap a tensor");
            break;
        }
        made++;
    }
    if (!rc) {
        dnnl_stream_t s = thread_stream();
        dl_omp_set_num_threads(ox_num_threads());
        if (!s) rc = fail(e, "oneDNN could not create a stream");
        else if (D(dnnl_primitive_execute)(k->prim, s, k->nargs, args) != dnnl_success || D(dnnl_stream_wait)(s) != dnnl_success)
            rc = fail(e, "oneDNN failed to execute the primitive");
    }
    for (int i = 0; i < made; i++) D(dnnl_memory_destroy)(args[i].memory);
    return rc;
}
