/* Running a plan: each run takes a context of memory objects, executes the steps in order and
 * (NNPLUG_ONEDNN_PROFILE=1) prints each step's time. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "plan.h"

void ctx_free(const ox_plan *p, ox_ctx *c)
{
    for (int i = 0; i < p->nmem; i++)
        if (c->mem[i]) D(dnnl_memory_destroy)(c->mem[i]);
    free(c->mem);
    free(c->ptr);
    free(c);
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
    case dnnl_resampling: return "resampling";
    case dnnl_lrn: return "lrn";
    case dnnl_batch_normalization: return "batch_normalization";
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

/* A run at least this long keeps its threads apart (dl_apart). */
#define APART_MIN_US 200

/* The plan's one mutable part is its pool of contexts, under its mutex. */
int ox_plan_run(const ox_plan *cp, const nnp_tensor *in, const nnp_tensor *out, void *ws, ox_err *e)
{
    ox_plan *p = (ox_plan *)cp;
    dnnl_stream_t s = ox_thread_stream();
    if (!s) return ox_fail(e, "oneDNN could not create a stream");
    ox_ctx *c = ctx_take(p);
    if (!c) return ox_fail(e, "out of memory");
    dl_omp_set_num_threads(p->threads);
    /* Kept apart (dl_apart) where that costs little beside the run: about 5 us against the
     * last run's time (the first run is always long enough, it makes oneDNN's kernels). A plan
     * of one thread has no team to keep apart and is not timed. */
    int team = p->threads > 1;
    double start = team ? now_ms() : 0;
    int apart = team && __atomic_load_n(&p->last_run_us, __ATOMIC_RELAXED) >= APART_MIN_US &&
                dl_apart(p->threads);
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
    if (apart) dl_together();
    if (team)
        __atomic_store_n(&p->last_run_us, (int64_t)((now_ms() - start) * 1e3), __ATOMIC_RELAXED);
    ctx_give(p, c);
    return rc;
}
