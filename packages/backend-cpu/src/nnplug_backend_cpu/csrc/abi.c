/* The nnplug native backend ABI (nnplug/backend.h) over the engine: entry symbol, function
 * table, capability and fuse queries, kernels. The device API for host memory and the error
 * text are nnplug/host_device.h's. */
#define _GNU_SOURCE
#include "nnplug/backend.h"
#include "nnplug/host_device.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "graph.h"
#include "nnc.h"

#ifdef NNPLUG_PLUGIN_VERSION /* the package version, from nnplug's native build */
#define NNC_VERSION NNPLUG_PLUGIN_VERSION
#else
#define NNC_VERSION "0.0.0"
#endif

static nnp_status from_err(const nnc_err *e, nnp_status fallback)
{
    snprintf(nnp_host_error_text(), NNP_HOST_ERROR_BYTES, "%s",
             e->msg[0] ? e->msg : "unknown error in the cpu backend");
    return e->unsupported ? NNP_STATUS_UNSUPPORTED : fallback;
}

/* ---- conversions --------------------------------------------------------------------- */

static int dt_from(nnp_dtype t)
{
    if (t.code == 0 && t.bits == 0) return DT_UNDEF;
    if (t.lanes > 1) return -1;
    switch (t.code) {
    case NNP_DTYPE_FLOAT:
        return t.bits == 32 ? DT_F32 : t.bits == 64 ? DT_F64 : t.bits == 16 ? DT_F16 : -1;
    case NNP_DTYPE_INT:
        return t.bits == 8    ? DT_I8
               : t.bits == 16 ? DT_I16
               : t.bits == 32 ? DT_I32
               : t.bits == 64 ? DT_I64
               : t.bits == 4  ? DT_I4
               : t.bits == 2  ? DT_I2
                              : -1;
    case NNP_DTYPE_UINT:
        return t.bits == 8    ? DT_U8
               : t.bits == 16 ? DT_U16
               : t.bits == 32 ? DT_U32
               : t.bits == 64 ? DT_U64
               : t.bits == 4  ? DT_U4
               : t.bits == 2  ? DT_U2
                              : -1;
    case NNP_DTYPE_BOOL: return t.bits == 8 ? DT_BOOL : -1;
    case NNP_DTYPE_BFLOAT: return t.bits == 16 ? DT_BF16 : -1;
    case NNP_DTYPE_FLOAT8_E4M3FN: return t.bits == 8 ? DT_F8E4M3FN : -1;
    case NNP_DTYPE_FLOAT8_E4M3FNUZ: return t.bits == 8 ? DT_F8E4M3FNUZ : -1;
    case NNP_DTYPE_FLOAT8_E5M2: return t.bits == 8 ? DT_F8E5M2 : -1;
    case NNP_DTYPE_FLOAT8_E5M2FNUZ: return t.bits == 8 ? DT_F8E5M2FNUZ : -1;
    case NNP_DTYPE_FLOAT8_E8M0FNU: return t.bits == 8 ? DT_F8E8M0 : -1;
    case NNP_DTYPE_FLOAT4_E2M1FN: return t.bits == 4 ? DT_F4E2M1 : -1;
    case NNP_DTYPE_STRING: return t.bits == 128 ? DT_STR : -1;
    default: return -1;
    }
}

/* Converted descriptors of a group, owning their arrays. */
typedef struct {
    nnc_desc_node *nodes;
    nnc_desc_value *vals;
    nnc_attr *attrs;
} descs;

static void descs_free(descs *d)
{
    free(d->nodes);
    free(d->vals);
    free(d->attrs);
}

static int conv_value(const nnp_value_desc *s, nnc_desc_value *d, const char *node, nnc_err *e)
{
    memset(d, 0, sizeof *d);
    d->name = s->name ? s->name : "";
    if (!d->name[0]) {
        d->info.ndim = 0;
        return NNC_OK;
    }
    int dt = dt_from(s->dtype);
    if (dt < 0 || (dt != DT_UNDEF && !nnc_dtsize(dt))) {
        e->unsupported = 1;
        return nnc_fail(
            e, "node '%s': value '%s' has an element type the cpu backend does not support", node,
            d->name);
    }
    d->info.dtype = dt;
    d->info.ndim = s->ndim;
    if (s->ndim > NNC_MAXDIM) {
        e->unsupported = 1;
        return nnc_fail(e, "node '%s': value '%s' has rank %d; the cpu backend supports up to %d",
                        node, d->name, s->ndim, NNC_MAXDIM);
    }
    if (s->ndim > 0 && !s->shape)
        return nnc_fail(e, "node '%s': value '%s' has no shape array", node, d->name);
    for (int i = 0; i < s->ndim && i < NNC_MAXDIM; i++)
        d->info.dims[i] = s->shape[i] < 0 ? -1 : s->shape[i];
    if (s->const_data) {
        int64_t k = nnc_info_numel(&d->info);
        if (k < 0 || dt == DT_UNDEF || (uint64_t)k * nnc_dtsize(dt) != s->const_nbytes)
            return nnc_fail(e,
                            "node '%s': constant '%s' has %llu bytes, its shape and type need %lld",
                            node, d->name, (unsigned long long)s->const_nbytes,
                            (long long)(k < 0 ? -1 : k * (int64_t)nnc_dtsize(dt)));
        d->info.const_data = s->const_data;
        d->const_nbytes = s->const_nbytes;
    }
    return NNC_OK;
}

static void conv_attr(const nnp_attr *s, nnc_attr *d)
{
    memset(d, 0, sizeof *d);
    d->name = s->name ? s->name : "";
    d->count = s->count;
    d->data = s->data;
    switch (s->type) {
    case NNP_ATTR_FLOAT:
    case NNP_ATTR_FLOATS:
        d->kind = dt_from(s->dtype) == DT_F32 && (s->data || !s->count) ? s->type : AK_UNDEF;
        break;
    case NNP_ATTR_INT:
    case NNP_ATTR_INTS:
        d->kind = dt_from(s->dtype) == DT_I64 && (s->data || !s->count) ? s->type : AK_UNDEF;
        break;
    case NNP_ATTR_STRING: d->kind = s->data || !s->count ? AK_STRING : AK_UNDEF; break;
    case NNP_ATTR_STRINGS: /* data: const char *const *, each terminated */
        d->kind = s->data || !s->count ? AK_STRINGS : AK_UNDEF;
        break;
    case NNP_ATTR_TENSOR:
        d->kind = AK_TENSOR;
        d->tdtype = dt_from(s->dtype);
        if (d->tdtype < 0) d->tdtype = DT_UNDEF;
        d->tndim = s->ndim;
        for (int i = 0; i < s->ndim && i < NNC_MAXDIM && s->shape; i++) d->tdims[i] = s->shape[i];
        break;
    default: d->kind = AK_UNDEF;
    }
}

static int build_descs(const nnp_node_desc *nodes, int32_t n, descs *d, nnc_err *e)
{
    memset(d, 0, sizeof *d);
    if (!nodes || n < 1) return nnc_fail(e, "no nodes given");
    size_t nv = 0, na = 0;
    for (int i = 0; i < n; i++) {
        if (nodes[i].num_inputs < 0 || nodes[i].num_outputs < 0 || nodes[i].num_attrs < 0 ||
            (nodes[i].num_inputs && !nodes[i].inputs) ||
            (nodes[i].num_outputs && !nodes[i].outputs) ||
            (nodes[i].num_attrs && !nodes[i].attrs) || !nodes[i].op_type)
            return nnc_fail(e, "node %d: malformed descriptor", i);
        nv += (size_t)nodes[i].num_inputs + (size_t)nodes[i].num_outputs;
        na += (size_t)nodes[i].num_attrs;
    }
    d->nodes = calloc((size_t)n, sizeof *d->nodes);
    d->vals = calloc(nv + 1, sizeof *d->vals);
    d->attrs = calloc(na + 1, sizeof *d->attrs);
    if (!d->nodes || !d->vals || !d->attrs) return nnc_fail(e, "out of memory");
    nnc_desc_value *v = d->vals;
    nnc_attr *a = d->attrs;
    for (int i = 0; i < n; i++) {
        const nnp_node_desc *s = &nodes[i];
        nnc_desc_node *t = &d->nodes[i];
        t->name = s->name ? s->name : "";
        t->op_type = s->op_type;
        t->domain = s->domain ? s->domain : "";
        t->opset = s->opset > 0 && s->opset < 1000 ? (int)s->opset : 0;
        t->nattr = s->num_attrs;
        t->attrs = a;
        for (int j = 0; j < s->num_attrs; j++) conv_attr(&s->attrs[j], a++);
        t->nin = s->num_inputs;
        t->in = v;
        for (int j = 0; j < s->num_inputs; j++) TRY(conv_value(&s->inputs[j], v++, t->name, e));
        t->nout = s->num_outputs;
        t->out = v;
        for (int j = 0; j < s->num_outputs; j++) TRY(conv_value(&s->outputs[j], v++, t->name, e));
    }
    return NNC_OK;
}

static int conv_tensors(const nnp_tensor *src, int32_t n, nnc_tensor *dst, const char *what,
                        nnc_err *e)
{
    if (n < 0 || (n && !src)) return nnc_fail(e, "%s: bad tensor list", what);
    for (int i = 0; i < n; i++) {
        const nnp_tensor *s = &src[i];
        nnc_tensor *d = &dst[i];
        memset(d, 0, sizeof *d);
        if (s->ndim < 0 || s->ndim > NNC_MAXDIM)
            return nnc_fail(e, "%s %d has rank %d; at most %d is supported", what, i, s->ndim,
                            NNC_MAXDIM);
        if (s->ndim > 0 && !s->shape) return nnc_fail(e, "%s %d has no shape", what, i);
        if (s->strides)
            return nnc_fail(e, "%s %d is strided; the cpu backend needs compact tensors", what, i);
        if (s->data && s->device.device_type != NNP_DEVICE_CPU)
            return nnc_fail(e, "%s %d is not in host memory", what, i);
        int dt = dt_from(s->dtype);
        if (dt < 0) return nnc_fail(e, "%s %d has an unsupported element type", what, i);
        d->dtype = dt;
        d->ndim = s->ndim;
        for (int k = 0; k < s->ndim; k++) {
            if (s->shape[k] < 0) return nnc_fail(e, "%s %d has a negative dimension", what, i);
            d->dims[k] = s->shape[k];
        }
        d->data = nnp_tensor_ptr(s);
    }
    return NNC_OK;
}

/* ---- lifecycle ----------------------------------------------------------------------- */

static nnp_status cpu_init(const nnp_init_options *o)
{
    if (o && NNP_INIT_HAS(o, num_threads) && o->num_threads > 0)
        nnc_set_num_threads(o->num_threads);
    return NNP_OK;
}

static void cpu_shutdown(void)
{
    nnc_threads_shutdown();
}

static nnp_status cpu_set_num_threads(int32_t n)
{
    if (n < 0)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "set_num_threads: %d is negative", n);
    nnc_set_num_threads(n);
    return NNP_OK;
}

/* Profile hook (ABI 1.1): node events of this thread's runs, in the ABI's terms. */
static _Thread_local nnp_profile_hook t_profile_hook;
static _Thread_local void *t_profile_user;

static int shape_rows(const nnc_tensor *const *ts, int count, int32_t *ndims, int64_t *shapes)
{
    if (count > NNC_MAXIO) count = NNC_MAXIO;
    for (int j = 0; j < count; j++) {
        int nd = ts[j] ? ts[j]->ndim : 0;
        if (nd < 0 || nd > NNP_MAX_NDIM) nd = 0;
        ndims[j] = nd;
        for (int d = 0; d < nd; d++) shapes[j * NNP_MAX_NDIM + d] = ts[j]->dims[d];
    }
    return count;
}

static void report_node(void *user, const nnc_node *n, nnc_tensor *const *in,
                        const nnc_tensor *outs, int64_t t0, int64_t t1)
{
    (void)user;
    int32_t in_nd[NNC_MAXIO], out_nd[NNC_MAXIO];
    int64_t in_sh[NNC_MAXIO * NNP_MAX_NDIM], out_sh[NNC_MAXIO * NNP_MAX_NDIM];
    const nnc_tensor *op[NNC_MAXIO];
    for (int j = 0; j < n->nout && j < NNC_MAXIO; j++) op[j] = n->out[j] >= 0 ? &outs[j] : NULL;
    int nin = shape_rows((const nnc_tensor *const *)in, n->nin, in_nd, in_sh);
    int nout = shape_rows(op, n->nout, out_nd, out_sh);
    nnp_profile_event ev = {sizeof ev,      n->name, n->op_type, n->nfused, n->fused_names,
                            n->fused_types, t0,      t1 - t0,    nin,       in_nd,
                            in_sh,          nout,    out_nd,     out_sh};
    if (t_profile_hook) t_profile_hook(t_profile_user, &ev);
}

static nnp_status cpu_set_profile_hook(nnp_profile_hook hook, void *user)
{
    t_profile_hook = hook;
    t_profile_user = hook ? user : NULL;
    nnc_set_node_hook(hook ? report_node : NULL, NULL);
    return NNP_OK;
}

/* ---- device API: nnplug/host_device.h's, with what this backend knows better ----------- */

static nnp_status cpu_get_attr(nnp_device dev, int32_t kind, nnp_attr_value *out)
{
    nnp_status rc = nnp_host_get_attr(dev, kind, out);
    if (rc != NNP_OK || kind == NNP_DEVICE_ATTR_EXIST || !nnp_host_is_device(dev)) return rc;
    switch (kind) {
    case NNP_DEVICE_ATTR_MULTI_PROCESSOR_COUNT:
        out->type = NNP_ATTR_VALUE_INT;
        out->i = nnc_num_threads();
        break;
    case NNP_DEVICE_ATTR_DEVICE_NAME: {
        FILE *f = fopen("/proc/cpuinfo", "r");
        char line[512];
        if (f) {
            while (fgets(line, sizeof line, f)) {
                if (!strncmp(line, "model name", 10)) {
                    char *c = strchr(line, ':');
                    if (c) {
                        c++;
                        while (*c == ' ') c++;
                        c[strcspn(c, "\n")] = 0;
                        out->type = NNP_ATTR_VALUE_STRING;
                        snprintf(out->s, sizeof out->s, "%s", c);
                    }
                    break;
                }
            }
            fclose(f);
        }
        break;
    }
    case NNP_DEVICE_ATTR_API_VERSION:
        out->type = NNP_ATTR_VALUE_STRING;
        snprintf(out->s, sizeof out->s, "%s", nnc_gemm_info());
        break;
    case NNP_DEVICE_ATTR_L2_CACHE_SIZE_BYTES: {
        long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
        if (v > 0) {
            out->type = NNP_ATTR_VALUE_INT;
            out->i = v;
        }
        break;
    }
    default: break;
    }
    return NNP_OK;
}

/* ---- capabilities -------------------------------------------------------------------- */

static nnp_status cpu_supports(const nnp_node_desc *node, int32_t *out)
{
    if (!node || !out) return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "supports: NULL argument");
    *out = 0;
    nnc_err e = {{0}, 0};
    descs d;
    if (build_descs(node, 1, &d, &e)) {
        descs_free(&d);
        return NNP_OK;
    }
    /* Inputs of unknown type (strings, sequences, optionals) are not ours. */
    for (int j = 0; j < d.nodes[0].nin; j++)
        if (d.nodes[0].in[j].name[0] && d.nodes[0].in[j].info.dtype == DT_UNDEF) {
            descs_free(&d);
            return NNP_OK;
        }
    nnc_plan *p = nnc_plan_build(d.nodes, 1, 1, &e);
    /* A node we know but whose attributes are wrong is still ours: kernel_create then
     * reports exactly what is wrong instead of "no backend runs this node". */
    *out = p != NULL || (!e.unsupported && nnc_find_op_in(node->domain, node->op_type));
    nnc_plan_free(p);
    descs_free(&d);
    return NNP_OK;
}

static nnp_status cpu_fuse(const nnp_node_desc *nodes, int32_t n, int32_t *taken)
{
    if (!nodes || !taken || n < 1)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "fuse: bad arguments");
    nnc_err e = {{0}, 0};
    descs d;
    if (build_descs(nodes, n, &d, &e)) {
        descs_free(&d);
        *taken = 1;
        return NNP_OK;
    }
    *taken = nnc_fuse_count(d.nodes, n);
    descs_free(&d);
    return NNP_OK;
}

/* ---- kernels ------------------------------------------------------------------------- */

static nnp_status cpu_kernel_create(const nnp_node_desc *nodes, int32_t n, nnp_device dev,
                                    nnp_kernel **out)
{
    if (!out) return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "kernel_create: out is NULL");
    *out = NULL;
    nnp_status rc = nnp_host_check_device(dev, "kernel_create");
    if (rc != NNP_OK) return rc;
    nnc_err e = {{0}, 0};
    descs d;
    if (build_descs(nodes, n, &d, &e)) {
        descs_free(&d);
        return from_err(&e, NNP_STATUS_INVALID_ARGUMENT);
    }
    nnc_plan *p = nnc_plan_build(d.nodes, n, 0, &e);
    descs_free(&d);
    if (!p) return from_err(&e, NNP_STATUS_INVALID_ARGUMENT);
    *out = (nnp_kernel *)p;
    return NNP_OK;
}

static nnp_status cpu_kernel_destroy(nnp_kernel *k)
{
    nnc_plan_free((nnc_plan *)k);
    return NNP_OK;
}

/* Tensor lists: on the stack when small, else on the heap (a fused group of many nodes has
 * one kernel input per node input). */
#define STACKT 64
typedef struct {
    nnc_tensor stack[STACKT];
    nnc_tensor *t;
} tlist;

static int tlist_init(tlist *l, int32_t n, nnc_err *e)
{
    l->t = n <= STACKT ? l->stack : malloc((size_t)n * sizeof(nnc_tensor));
    return l->t ? NNC_OK : nnc_fail(e, "out of memory");
}

static void tlist_free(tlist *l)
{
    if (l->t != l->stack) free(l->t);
}

static nnp_status cpu_output_shapes(const nnp_kernel *k, const nnp_tensor *inputs, int32_t nin,
                                    int32_t nout, int32_t *ndims, int64_t *shapes)
{
    const nnc_plan *p = (const nnc_plan *)k;
    nnc_err e = {{0}, 0};
    tlist in, out;
    if (!p || !ndims || !shapes || nin < 0)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "kernel_output_shapes: bad arguments");
    if (nout != p->nkout)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT,
                             "kernel_output_shapes: %d outputs, the kernel has %d", nout, p->nkout);
    if (tlist_init(&in, nin, &e)) return from_err(&e, NNP_STATUS_OUT_OF_MEMORY);
    if (tlist_init(&out, nout, &e)) {
        tlist_free(&in);
        return from_err(&e, NNP_STATUS_OUT_OF_MEMORY);
    }
    int rc = conv_tensors(inputs, nin, in.t, "input", &e) ||
             nnc_plan_output_shapes(p, in.t, nin, out.t, &e);
    if (!rc)
        for (int j = 0; j < nout; j++) {
            ndims[j] = out.t[j].ndim;
            for (int d = 0; d < out.t[j].ndim; d++) shapes[j * NNP_MAX_NDIM + d] = out.t[j].dims[d];
        }
    tlist_free(&in);
    tlist_free(&out);
    return rc ? from_err(&e, NNP_STATUS_SHAPE_ERROR) : NNP_OK;
}

static nnp_status cpu_workspace_size(const nnp_kernel *k, const nnp_tensor *inputs, int32_t nin,
                                     const nnp_tensor *outputs, int32_t nout, uint64_t *nbytes)
{
    (void)outputs;
    (void)nout;
    const nnc_plan *p = (const nnc_plan *)k;
    nnc_err e = {{0}, 0};
    tlist in;
    size_t n = 0;
    if (!p || !nbytes || nin < 0)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "kernel_workspace_size: bad arguments");
    if (!nnc_plan_workspace_reads_inputs(p)) { /* most kernels: a size known at creation */
        if (nnc_plan_workspace(p, NULL, 0, &n, &e))
            return from_err(&e, NNP_STATUS_INVALID_ARGUMENT);
        *nbytes = n;
        return NNP_OK;
    }
    if (tlist_init(&in, nin, &e)) return from_err(&e, NNP_STATUS_OUT_OF_MEMORY);
    int rc =
        conv_tensors(inputs, nin, in.t, "input", &e) || nnc_plan_workspace(p, in.t, nin, &n, &e);
    tlist_free(&in);
    if (rc) return from_err(&e, NNP_STATUS_INVALID_ARGUMENT);
    *nbytes = n;
    return NNP_OK;
}

static nnp_status cpu_kernel_run(const nnp_kernel *k, const nnp_tensor *inputs, int32_t nin,
                                 const nnp_tensor *outputs, int32_t nout, void *ws, uint64_t wsn,
                                 nnp_stream stream)
{
    (void)stream;
    const nnc_plan *p = (const nnc_plan *)k;
    nnc_err e = {{0}, 0};
    tlist in, out;
    if (!p || nin < 0 || nout < 0)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "kernel_run: bad arguments");
    if (tlist_init(&in, nin, &e)) return from_err(&e, NNP_STATUS_OUT_OF_MEMORY);
    if (tlist_init(&out, nout, &e)) {
        tlist_free(&in);
        return from_err(&e, NNP_STATUS_OUT_OF_MEMORY);
    }
    nnc_pool_hold();
    int rc = conv_tensors(inputs, nin, in.t, "input", &e) ||
             conv_tensors(outputs, nout, out.t, "output", &e) ||
             nnc_plan_run(p, in.t, nin, out.t, nout, ws, (size_t)wsn, &e);
    nnc_pool_release();
    tlist_free(&in);
    tlist_free(&out);
    return rc ? from_err(&e, NNP_STATUS_INVALID_ARGUMENT) : NNP_OK;
}

/* Like nnp_run_steps_default, without its limit on tensors per step. */
static nnp_status resolve(const nnp_tensor *src, const int32_t *slot_ids, int32_t n,
                          void *const *slots, int32_t ns, nnp_tensor *dst)
{
    for (int32_t i = 0; i < n; i++) {
        int32_t s = slot_ids ? slot_ids[i] : -1;
        dst[i] = src[i];
        if (s >= 0) {
            if (s >= ns || !slots)
                return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT,
                                     "run_steps: slot %d out of range (%d slots)", s, ns);
            dst[i].data = slots[s];
        }
    }
    return NNP_OK;
}

static nnp_status run_step_list(const nnp_step *steps, int32_t n, void *const *slots, int32_t ns,
                                void *ws, uint64_t wsn, nnp_stream stream, int32_t *failed,
                                nnp_tensor *sin, nnp_tensor *sout)
{
    for (int32_t i = 0; i < n; i++) {
        const nnp_step *st = &steps[i];
        if (failed) *failed = i;
        if (st->num_inputs < 0 || st->num_outputs < 0 || (st->num_inputs && !st->inputs) ||
            (st->num_outputs && !st->outputs))
            return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "run_steps: step %d is malformed", i);
        nnp_tensor *tin =
            st->num_inputs <= STACKT ? sin : malloc((size_t)st->num_inputs * sizeof(nnp_tensor));
        nnp_tensor *tout =
            st->num_outputs <= STACKT ? sout : malloc((size_t)st->num_outputs * sizeof(nnp_tensor));
        nnp_status rc = (!tin || !tout)
                            ? nnp_host_fail(NNP_STATUS_OUT_OF_MEMORY, "run_steps: out of memory")
                            : NNP_OK;
        if (rc == NNP_OK) rc = resolve(st->inputs, st->input_slots, st->num_inputs, slots, ns, tin);
        if (rc == NNP_OK)
            rc = resolve(st->outputs, st->output_slots, st->num_outputs, slots, ns, tout);
        if (rc == NNP_OK)
            rc = cpu_kernel_run(st->kernel, tin, st->num_inputs, tout, st->num_outputs, ws, wsn,
                                stream);
        if (tin && tin != sin) free(tin);
        if (tout && tout != sout) free(tout);
        if (rc != NNP_OK) return rc;
    }
    if (failed) *failed = -1;
    return NNP_OK;
}

static nnp_status cpu_run_steps(const nnp_step *steps, int32_t n, void *const *slots, int32_t ns,
                                void *ws, uint64_t wsn, nnp_stream stream, int32_t *failed)
{
    nnp_tensor sin[STACKT], sout[STACKT]; /* each step's tensors, when they fit */
    if (n < 0 || (n && !steps))
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "run_steps: bad step list");
    nnc_pool_hold(); /* the pool's workers stay awake across the steps */
    nnp_status rc = run_step_list(steps, n, slots, ns, ws, wsn, stream, failed, sin, sout);
    nnc_pool_release();
    return rc;
}

/* ABI 1.6: a dynamic partition in one call, the pool's workers awake across its kernels. */
static nnp_status cpu_run_dynamic(const nnp_dynamic_plan *plan, nnp_dynamic_run *run)
{
    nnc_pool_hold();
    nnp_status rc =
        nnp_run_dynamic_default(cpu_kernel_run, cpu_output_shapes, cpu_workspace_size, plan, run);
    nnc_pool_release();
    return rc;
}

/* ABI 1.3: the bytes op_string.c's kernels allocated for string outputs. */
static void cpu_release_strings(nnp_string *items, uint64_t count)
{
    if (!items) return;
    for (uint64_t i = 0; i < count; i++) {
        free((void *)items[i].data);
        items[i].data = NULL;
        items[i].size = 0;
    }
}

static const nnp_backend_v1 TABLE = {
    .abi_version = {NNP_BACKEND_ABI_MAJOR, NNP_BACKEND_ABI_MINOR, NNP_BACKEND_ABI_PATCH},
    .struct_size = sizeof(nnp_backend_v1),
    .flags = NNP_BACKEND_HOST_VISIBLE | NNP_BACKEND_KERNELS_OWN_CONSTANTS,
    .id = "cpu",
    .version = NNC_VERSION,
    .device_type = NNP_DEVICE_CPU,
    .device_type_name = NULL,
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .last_error = nnp_host_last_error,
    .set_num_threads = cpu_set_num_threads,
    .get_attr = cpu_get_attr,
    NNP_HOST_DEVICE_MEMORY,
    .supports = cpu_supports,
    .fuse = cpu_fuse,
    .kernel_create = cpu_kernel_create,
    .kernel_destroy = cpu_kernel_destroy,
    .kernel_output_shapes = cpu_output_shapes,
    .kernel_workspace_size = cpu_workspace_size,
    .kernel_run = cpu_kernel_run,
    .run_steps = cpu_run_steps,
    .set_profile_hook = cpu_set_profile_hook,
    .release_strings = cpu_release_strings,
    /* the portable backend: runs nearly every op; faster specialised ones rank above it */
    .priority = 100,
    .run_dynamic = cpu_run_dynamic,
};

NNP_EXPORT const nnp_backend_v1 *nnp_backend_entry(const nnp_version *host_abi)
{
    (void)host_abi; /* the host checks versions and reports a mismatch */
    return &TABLE;
}
