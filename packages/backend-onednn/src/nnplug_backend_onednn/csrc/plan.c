/* A plan for a group's ops at concrete shapes and a thread count: each op handed to the
 * builder of its kind, then the arena placed by the values' lifetimes (overview: plan.h). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "plan.h"

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
    for (int i = 0; i < p->nprim; i++) D(dnnl_primitive_destroy)(p->prims[i]);
    free(p->prims);
    free(p->steps);
    free(p->bufs);
    free(p);
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

int build_op(pb *b, const ox_op *op)
{
    const ox_graph *g = b->g;
    if (ox_value_empty(g, b->dims, op->out)) return empty_result(b, op); /* nothing to compute */
    return op->kind == OP_CONV                                 ? build_conv(b, op)
           : op->kind == OP_DECONV                             ? build_deconv(b, op)
           : op->kind == OP_MATMUL                             ? build_matmul(b, op)
           : op->kind == OP_ATTENTION                          ? build_attention(b, op)
           : op->kind == OP_LN                                 ? build_ln(b, op)
           : op->kind == OP_IN                                 ? build_in(b, op)
           : op->kind == OP_GN                                 ? build_gn(b, op)
           : op->kind == OP_RMS                                ? build_rms(b, op)
           : op->kind == OP_ERF || op->kind == OP_NANREP       ? build_loop(b, op)
           : op->kind == OP_REDMEAN                            ? build_reduce_mean(b, op)
           : op->kind == OP_ELTWISE && ox_own_eltwise(op->alg) ? build_own_eltwise(b, op)
           : op->kind == OP_QDQ                                ? build_qdq(b, op)
           : op->kind == OP_POOL && op->maxpool && g->strict   ? build_strict_maxpool(b, op)
           : op->kind == OP_LRN && g->strict                   ? build_strict_lrn(b, op)
           : op->kind == OP_RESIZE && op->alg == dnnl_resampling_linear && g->strict
               ? build_strict_resize(b, op)
           : op->kind == OP_RESHAPE || op->kind == OP_TRANSPOSE || op->kind == OP_SLICE
               ? build_view(b, op)
               : build_simple(b, op);
}

/* Whether every value of the graph, constants included, holds fewer than DL_MIN_PARALLEL
 * elements: a partition of small data movement or arithmetic (a transpose between two LSTMs
 * the CPU backend runs), which one thread runs sooner than it can wake a second. */
static int all_values_small(const ox_graph *g, const int64_t *dims)
{
    for (int v = 0; v < g->nval; v++) {
        int64_t n = 1;
        for (int d = 0; d < g->vals[v].ndim; d++) n *= dims[(size_t)v * MAXR + d];
        if (n >= DL_MIN_PARALLEL) return 0;
    }
    return 1;
}

static ox_plan *build_ex(const ox_graph *g, const int64_t *dims, int threads, int dry, ox_err *e)
{
    ox_plan *p = calloc(1, sizeof *p);
    if (p) p->last_run_us = INT64_MAX;
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
    b.bf16v = bf16_values(&b);
    if (!p || !b.nviews || !b.last_use || !b.views || !b.bf16v) {
        ox_fail(e, "out of memory");
        goto done;
    }
    p->threads = all_values_small(g, dims) ? 1 : threads;
    threads = p->threads;
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
        if (build_op(&b, op)) goto done;
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
    free(b.bf16v);
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
