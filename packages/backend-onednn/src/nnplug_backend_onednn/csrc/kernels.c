/* The engine, per-thread streams and the thread count; kernels: a parsed group and its plans,
 * one per concrete input shape and thread count, made when first needed (at kernel_create
 * for static shapes) and kept (see kernels.h). */
#define _GNU_SOURCE
#include "kernels.h"
#include "int8.h"
#include "split.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dnnl_engine_t g_engine;
static int g_threads = 1;
static pthread_key_t g_stream_key;
static int g_key_made;

/* ---- engine, streams, threads ------------------------------------------------------------ */

static void stream_free(void *s)
{
    if (s) D(dnnl_stream_destroy)((dnnl_stream_t)s);
}

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
        return ox_fail(e, "oneDNN could not create its CPU engine");
    if (pthread_key_create(&g_stream_key, stream_free))
        return ox_fail(e, "pthread_key_create failed");
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

void ox_set_num_threads(int n)
{
    __atomic_store_n(&g_threads, n > 0 ? n : default_threads(), __ATOMIC_RELAXED);
}
int ox_num_threads(void)
{
    return __atomic_load_n(&g_threads, __ATOMIC_RELAXED);
}
dnnl_engine_t ox_engine(void)
{
    return g_engine;
}

/* A stream per host thread: oneDNN streams are not meant to be shared between threads. */
dnnl_stream_t ox_thread_stream(void)
{
    dnnl_stream_t s = pthread_getspecific(g_stream_key);
    if (!s) {
        if (D(dnnl_stream_create)(&s, g_engine, dnnl_stream_default_flags) != dnnl_success)
            return NULL;
        pthread_setspecific(g_stream_key, s);
    }
    return s;
}

/* ---- kernels ------------------------------------------------------------------------------ */

typedef struct {
    int threads, strict;
    int64_t *dims; /* every value's dims, [nval * MAXR] */
    ox_plan *plan;
} cached;

/* g, and when g is guarded (see ox_graph.guarded) the same nodes parsed strict, for runs with a
 * NaN or an infinity in an input; its plans are made only then. Or q, an integer op (int8.h),
 * and no graph. */
struct nnp_kernel {
    ox_graph *g, *strict;
    ox_qmm *q;
    ox_split *split; /* a Split whose parts are the outputs (split.h): alone (no graph), or
                      * the tail after g, reading g's result (kept at the workspace's end) */
    int nkin;        /* with a tail Split: g's inputs, then the Split's after its first */
    int nout; /* the last node's outputs: the first made, the others omitted (data NULL) */
    pthread_mutex_t mu;
    int nplans;
    cached plans[MAXPLANS];
};

static size_t dims_bytes(const ox_graph *g)
{
    return (size_t)g->nval * MAXR * sizeof(int64_t);
}

/* oneDNN plans per concrete shape, and a plan costs about 0.1 ms to make. A node with a dim
 * unknown beyond its first (a decoder's growing cache, a transformer's sequence length) may
 * meet a new shape at every run; the portable backends run a light node (elementwise, data
 * movement, softmax, normalization, a product of two activations) at once, so such a node is
 * left to them. So is a MatMul or Gemm of a constant weight whose rows are such a dim: a
 * decoder's step multiplies one row, where a call here costs several times the portable
 * backend's, and the products alone between light nodes on the other backend split the model
 * into a partition per product (measured: a 2-layer Llama step 2.7 ms here and 1.1 ms on cpu
 * alone; BERT-base at sequence 128 no faster with the products here). The rows of a matrix
 * (rank 2) count as such a dim even first: GPT-2's projections read [batch x sequence, hidden].
 * Claimed whatever their shapes: convolutions and pools, whose unknown dims are spatial, fixed
 * per deployment. A batch dim (the first) alone is unknown in models served at a few batch
 * sizes, whose plans are kept. */
static int changing_shape_not_worth_a_plan(const nnp_node_desc *node)
{
    int unknown = 0;
    for (int io = 0; io < 2 && !unknown; io++) {
        const nnp_value_desc *v = io ? node->outputs : node->inputs;
        int32_t count = io ? node->num_outputs : node->num_inputs;
        for (int32_t i = 0; i < count && !unknown; i++) {
            if (!v[i].name || !v[i].name[0]) continue; /* an omitted optional value */
            if (v[i].ndim < 0) unknown = 1;
            for (int32_t d = 1; d < v[i].ndim && !unknown; d++)
                if (!v[i].shape || v[i].shape[d] < 0) unknown = 1;
        }
    }
    int gemm = !strcmp(node->op_type, "MatMul") || !strcmp(node->op_type, "Gemm");
    if (!unknown && gemm && node->num_inputs >= 1 && node->inputs[0].ndim == 2 &&
        node->inputs[0].shape && node->inputs[0].shape[0] < 0)
        unknown = 1; /* a matrix's rows: a batch, or a batch times a sequence flattened */
    if (!unknown) return 0;
    static const char *const heavy[] = {"Conv",        "ConvTranspose",     "MaxPool",
                                        "AveragePool", "GlobalAveragePool", "GlobalMaxPool"};
    for (size_t i = 0; i < sizeof heavy / sizeof heavy[0]; i++)
        if (!strcmp(node->op_type, heavy[i])) return 0;
    return 1;
}

static int is_split(const nnp_node_desc *node)
{
    return node->op_type && !strcmp(node->op_type, "Split");
}

/* Whether the Split after g's nodes (its parts a kernel's outputs) reads g's result. */
static int tail_reads_result(const ox_graph *g, const nnp_node_desc *split)
{
    return !strcmp(g->vals[g->out].name, split->inputs[0].name);
}

int ox_supported(const nnp_node_desc *nodes, int n)
{
    ox_err e;
    int unsupported, ok = 0, nall = n;
    if (n == 1 && ox_int8_op(&nodes[0])) return ox_qmm_supported(&nodes[0]);
    if (n == 2 && ox_int8_cast_of(&nodes[0], &nodes[1])) return ox_qmm_supported(&nodes[0]);
    for (int i = 0; i < n; i++)
        if (changing_shape_not_worth_a_plan(&nodes[i])) return 0;
    if (is_split(&nodes[n - 1])) { /* its parts the outputs: split.h */
        ox_split *sp = ox_split_build(&nodes[n - 1], &unsupported, &e);
        ox_split_free(sp);
        if (!sp) return 0;
        if (n == 1) return 1;
        n--;
    }
    ox_graph *g = ox_graph_parse(nodes, n, 0, &unsupported, &e);
    if (!g) return 0;
    if (n < nall && !tail_reads_result(g, &nodes[n])) {
        ox_graph_free(g); /* a tail Split reads the graph's result */
        return 0;
    }
    if (g->dynamic) ok = 1; /* primitives are made per shape at run time */
    else {
        int64_t *dims = malloc(dims_bytes(g));
        ok = dims && !ox_graph_shapes(g, NULL, 0, dims, &e) &&
             !ox_plan_check(g, dims, ox_num_threads(), &e);
        free(dims);
    }
    ox_graph_free(g);
    return ok;
}

void ox_destroy(nnp_kernel *k)
{
    if (!k) return;
    ox_qmm_free(k->q);
    ox_split_free(k->split);
    for (int i = 0; i < k->nplans; i++) {
        ox_plan_free(k->plans[i].plan);
        free(k->plans[i].dims);
    }
    ox_graph_free(k->strict); /* before the graph whose constants it borrows */
    ox_graph_free(k->g);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* The plan of k->g (k->strict when strict) for these dims and the current thread count: a
 * kept one, else a new one (kept while there is room; else *temp is set and the caller frees
 * it). */
static ox_plan *get_plan(nnp_kernel *k, int strict, int64_t *dims, int *temp, ox_err *e)
{
    int threads = ox_num_threads();
    *temp = 0;
    pthread_mutex_lock(&k->mu);
    ox_plan *p = NULL;
    for (int i = 0; i < k->nplans && !p; i++)
        if (k->plans[i].threads == threads && k->plans[i].strict == strict &&
            !memcmp(k->plans[i].dims, dims, dims_bytes(k->g)))
            p = k->plans[i].plan;
    if (!p) {
        p = ox_plan_build(strict ? k->strict : k->g, dims, threads, e);
        if (p && k->nplans < MAXPLANS && (k->plans[k->nplans].dims = malloc(dims_bytes(k->g)))) {
            memcpy(k->plans[k->nplans].dims, dims, dims_bytes(k->g));
            k->plans[k->nplans].threads = threads;
            k->plans[k->nplans].strict = strict;
            k->plans[k->nplans++].plan = p;
        } else if (p) *temp = 1;
    }
    pthread_mutex_unlock(&k->mu);
    return p;
}

/* An integer op is a group of its own (abi.c ox_fuse): alone, or a MatMulInteger with the Cast
 * of its sums to float32 after it (then the kernel writes the floats). */
static int build_int8(const nnp_node_desc *nodes, int n, nnp_kernel **out, int *unsupported,
                      ox_err *e)
{
    int f32out = n == 2 && ox_int8_cast_of(&nodes[0], &nodes[1]);
    if (n != 1 && !f32out)
        return ox_fail(e,
                       "node '%s' (%s): the onednn backend runs it only in a kernel of its own "
                       "(or a MatMulInteger with the Cast of its result to float after it)",
                       nodes[0].name ? nodes[0].name : "", nodes[0].op_type);
    nnp_kernel *k = calloc(1, sizeof *k);
    if (!k) return ox_fail(e, "out of memory");
    pthread_mutex_init(&k->mu, NULL);
    if (!(k->q = ox_qmm_build(&nodes[0], 0, nodes[0].num_inputs, f32out, unsupported, e))) {
        ox_destroy(k);
        return 1;
    }
    *out = k;
    return 0;
}

int ox_build(const nnp_node_desc *nodes, int n, int bf16, nnp_kernel **out, int *unsupported,
             ox_err *e)
{
    *out = NULL;
    *unsupported = 0;
    if (!nodes || n < 1) return ox_fail(e, "kernel_create: no nodes (NULL or a count below 1)");
    for (int i = 0; i < n; i++)
        if (ox_int8_op(&nodes[i])) return build_int8(nodes, n, out, unsupported, e);
    nnp_kernel *k = calloc(1, sizeof *k);
    if (!k) return ox_fail(e, "out of memory");
    pthread_mutex_init(&k->mu, NULL);
    k->nout = nodes[n - 1].num_outputs > 1 ? nodes[n - 1].num_outputs : 1;
    if (is_split(&nodes[n - 1])) { /* its parts the outputs: split.h */
        if (!(k->split = ox_split_build(&nodes[n - 1], unsupported, e))) {
            ox_destroy(k);
            return 1;
        }
        if (n-- == 1) {
            *out = k;
            return 0;
        }
    }
    ox_graph *g = k->g = ox_graph_parse_kept(nodes, n, 0, NULL, unsupported, e);
    if (!g) {
        ox_destroy(k);
        return 1;
    }
    g->bf16 = bf16;
    if (k->split && !tail_reads_result(g, &nodes[n])) {
        *unsupported = 1;
        ox_destroy(k);
        return ox_fail(e,
                       "node '%s' (Split): a group's last Split must read its other nodes' result",
                       nodes[n].name ? nodes[n].name : "");
    }
    k->nkin = k->split ? g->nkin + nodes[n].num_inputs - 1 : g->nkin; /* the Split's data: g's */
    if (g->guarded && !(k->strict = ox_graph_parse_kept(nodes, n, 1, g, unsupported, e))) {
        ox_destroy(k);
        return 1;
    }
    if (k->strict) k->strict->bf16 = bf16;
    if (!g->dynamic) { /* static shapes: the plan now, so that errors show at load */
        int64_t *dims = malloc(dims_bytes(g));
        int temp = 0;
        ox_plan *p =
            dims && !ox_graph_shapes(g, NULL, 0, dims, e) ? get_plan(k, 0, dims, &temp, e) : NULL;
        free(dims);
        if (!p) {
            ox_destroy(k);
            return 1;
        }
        if (temp) ox_plan_free(p);
    }
    *out = k;
    return 0;
}

int ox_output_shapes(const nnp_kernel *k, const nnp_tensor *in, int nin, int nout, int32_t *ndims,
                     int64_t *shapes, ox_err *e)
{
    if (!k || nout != (k->q ? 1 : k->nout))
        return ox_fail(e, "kernel_output_shapes: the kernel has %d output(s); asked for %d",
                       k ? (k->q ? 1 : k->nout) : 1, nout);
    if (k->q) return ox_qmm_output_shape(k->q, in, nin, ndims, shapes, e);
    if (k->split && !k->g) return ox_split_output_shapes(k->split, in, nin, ndims, shapes, e);
    if (nin != k->nkin)
        return ox_fail(e, "kernel_output_shapes: the kernel has %d inputs; given %d", k->nkin, nin);
    for (int i = 1; i < nout; i++) ndims[i] = 0; /* omitted outputs */
    int64_t *dims = malloc(dims_bytes(k->g));
    if (!dims) return ox_fail(e, "out of memory");
    int rc = ox_graph_shapes(k->g, in, k->g->nkin, dims, e);
    if (!rc && k->split)
        rc = ox_split_shapes(k->split, dims + (size_t)k->g->out * MAXR, ndims, shapes, e);
    else if (!rc) {
        const ox_value *y = &k->g->vals[k->g->out];
        ndims[0] = y->ndim;
        memcpy(shapes, dims + (size_t)k->g->out * MAXR, (size_t)y->ndim * sizeof(int64_t));
    }
    free(dims);
    return rc;
}

/* The bytes a tail Split's input (g's result) takes at the workspace's end, 64 to align it. */
static uint64_t tail_bytes(const ox_graph *g, const int64_t *dims)
{
    uint64_t n = 1;
    for (int d = 0; d < g->vals[g->out].ndim; d++) n *= (uint64_t)dims[(size_t)g->out * MAXR + d];
    return n * sizeof(float) + 64;
}

int ox_workspace_size(const nnp_kernel *kc, const nnp_tensor *in, int nin, uint64_t *nbytes,
                      ox_err *e)
{
    nnp_kernel *k = (nnp_kernel *)kc; /* the plan cache is the kernel's one mutable part, locked */
    if (k->q) return ox_qmm_workspace(k->q, in, nin, nbytes, e);
    *nbytes = 0;
    if (k->split && !k->g) return 0;
    int64_t *dims = malloc(dims_bytes(k->g));
    if (!dims) return ox_fail(e, "out of memory");
    int temp = 0;
    if (ox_graph_shapes(k->g, in, k->g->nkin, dims, e)) {
        free(dims);
        return 1;
    }
    if (ox_value_empty(k->g, dims, k->g->out)) { /* an empty output: the run computes nothing */
        free(dims);
        return 0;
    }
    uint64_t mid = k->split ? tail_bytes(k->g, dims) : 0;
    ox_plan *p = get_plan(k, 0, dims, &temp, e);
    free(dims);
    if (!p) return 1;
    /* a strict plan's, when larger, is allocated by its run; a tail Split's input after it */
    *nbytes = ox_plan_workspace(p) + mid;
    if (temp) ox_plan_free(p);
    return 0;
}

/* Whether every float of the kernel's inputs given at run time is finite, an infinity in an
 * attention's mask aside (ox_value.masks_scores); constants are not looked at: a Conv's
 * weights are checked at load, see parse_conv. */
static int inputs_finite(const ox_graph *g, const nnp_tensor *in, int nin, const int64_t *dims)
{
    for (int i = 0; i < nin; i++) {
        int v = g->kin_val[i];
        if (v < 0 || g->vals[v].konst) continue;
        size_t n = 1;
        for (int d = 0; d < g->vals[v].ndim; d++) n *= (size_t)dims[(size_t)v * MAXR + d];
        if (!ox_all_finite(in[i].data, (int64_t)n) &&
            (!g->vals[v].masks_scores || ox_any_nan(in[i].data, (int64_t)n)))
            return 0;
    }
    return 1;
}

/* Run k's plan (strict: its strict graph's) for these inputs; dims holds k->g's value dims for
 * them (strict: overwritten with the strict graph's, since the values a fused op holds inside
 * have dims there only). watch (a guarded graph's fast plan): *made is set when the run made a
 * NaN or an infinity from finite values (see dl_fp_raised), which the fast plan's relu, fused
 * Clip or max pooling may have turned into a number. */
static int run_plan(nnp_kernel *k, int strict, const nnp_tensor *in, int nin, int64_t *dims,
                    const nnp_tensor *out, void *ws, uint64_t wsn, int watch, int *made, ox_err *e)
{
    int temp = 0;
    ox_plan *p = strict && ox_graph_shapes(k->strict, in, nin, dims, e)
                     ? NULL
                     : get_plan(k, strict, dims, &temp, e);
    if (!p) return 1;
    uint64_t need = ox_plan_workspace(p);
    void *own = NULL;
    if (need && (!ws || wsn < need)) {
        /* the thread count changed since the workspace was sized, or a strict plan runs: a
         * scratch of our own */
        if (posix_memalign(&own, 64, (size_t)need)) {
            if (temp) ox_plan_free(p);
            return ox_fail(e, "cannot allocate a workspace of %llu bytes",
                           (unsigned long long)need);
        }
        ws = own;
    }
    if (watch) dl_fp_clear(ox_plan_threads(p));
    int rc = ox_plan_run(p, in, out, ws, e);
    if (watch) *made = dl_fp_raised(ox_plan_threads(p));
    free(own);
    if (temp) ox_plan_free(p);
    return rc;
}

int ox_run(const nnp_kernel *kc, const nnp_tensor *in, int nin, const nnp_tensor *out, int nout,
           void *ws, uint64_t wsn, ox_err *e)
{
    nnp_kernel *k = (nnp_kernel *)kc;
    if (!k) return ox_fail(e, "kernel is NULL");
    if (k->q) {
        if (nout != 1) return ox_fail(e, "the kernel has 1 output; called with %d", nout);
        return ox_qmm_run(k->q, in, nin, out, ws, wsn, e);
    }
    if (k->split && !k->g) return ox_split_run(k->split, in, nin, out, nout, e);
    const ox_graph *g = k->g;
    if (nin != k->nkin || nout != k->nout || (nin && !in) || !out)
        return ox_fail(e, "the kernel has %d inputs and %d output(s); called with %d and %d",
                       k->nkin, k->nout, nin, nout);
    for (int i = 1; i < nout && !k->split; i++) /* a node's omitted optional outputs */
        if (out[i].data) return ox_fail(e, "output %d is omitted, yet has data", i);
    nin = g->nkin; /* a tail Split's inputs after g's: its parts' sizes, read at load */
    int64_t *dims = malloc(dims_bytes(g));
    if (!dims) return ox_fail(e, "out of memory");
    int rc = ox_graph_shapes(g, in, nin, dims, e);
    for (int i = 0; !rc && i < nin; i++) {
        int v = g->kin_val[i];
        if (v < 0 || g->vals[v].konst) continue;
        if (!in[i].data && !ox_value_empty(g, dims, v))
            rc = ox_fail(e, "input %d ('%s') has no data", i, g->vals[v].name);
        else if (in[i].strides)
            rc = ox_fail(e, "input %d ('%s') is strided; compact tensors only", i, g->vals[v].name);
    }
    const ox_value *y = &g->vals[g->out];
    int64_t *yd = dims + (size_t)g->out * MAXR;
    /* An empty output: nothing to compute (the kernel has no other effect), whatever its
     * inputs hold; a run whose empty values are inside skips the ops making them (plan.c). */
    int empty = !rc && ox_value_empty(g, dims, g->out);
    /* with a tail Split, g's result goes to the workspace's end (or memory of its own), and
     * the Split copies its parts out of it */
    nnp_tensor mid = {0};
    const nnp_tensor *gout = out;
    void *own = NULL;
    if (!rc && k->split && !empty) {
        uint64_t need = tail_bytes(g, dims); /* 64 more than it takes: room to align it */
        if (ws && wsn >= need) {
            uintptr_t at = ((uintptr_t)ws + (uintptr_t)(wsn - need) + 63) & ~(uintptr_t)63;
            mid.data = (void *)at;
            wsn -= need; /* the plan's part */
        } else if (posix_memalign(&own, 64, (size_t)need)) {
            rc = ox_fail(e, "cannot allocate %llu bytes", (unsigned long long)need);
        } else mid.data = own;
        mid.ndim = y->ndim;
        mid.shape = yd;
        mid.dtype = (nnp_dtype){NNP_DTYPE_FLOAT, 32, 1};
        gout = &mid;
    }
    if (!rc && !k->split) {
        const nnp_tensor *t = &out[0];
        int ok = (t->data || empty) && !t->strides && t->dtype.code == NNP_DTYPE_FLOAT &&
                 t->dtype.bits == 32 && t->ndim == y->ndim && (!t->ndim || t->shape);
        for (int i = 0; ok && i < t->ndim; i++) ok = t->shape[i] == yd[i];
        if (!ok)
            rc = ox_fail(
                e, "output '%s' must be a compact float32 tensor of the shape the inputs give",
                y->name);
    }
    if (!rc && empty) {
        rc = k->split ? ox_split_copy(k->split, NULL, yd, out, nout, e) : 0;
        free(dims);
        return rc;
    }
    int strict = !rc && k->strict && !inputs_finite(g, in, nin, dims);
    /* A guarded graph's fast plan runs watched: when it made a NaN or an infinity from finite
     * inputs (an overflow, then inf - inf), the strict plan runs the same inputs again. The
     * kernel never writes its inputs, and the rerun writes the whole output. */
    int made = 0;
    if (!rc) rc = run_plan(k, strict, in, nin, dims, gout, ws, wsn, k->strict && !strict, &made, e);
    if (!rc && made) {
        const char *prof = getenv("NNPLUG_ONEDNN_PROFILE");
        if (prof && !strcmp(prof, "1"))
            fprintf(
                stderr,
                "nnplug-onednn: rerun | %s | the fast plan made a NaN or an infinity: the strict plan runs\n",
                g->vals[g->out].name);
        rc = run_plan(k, 1, in, nin, dims, gout, ws, wsn, 0, NULL, e);
    }
    if (!rc && k->split) rc = ox_split_copy(k->split, mid.data, yd, out, nout, e);
    free(own);
    free(dims);
    return rc;
}
