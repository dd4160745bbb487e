/* The nnplug native backend ABI (nnplug/backend.h) over the oneDNN kernels: entry symbol,
 * function table, capability and fuse queries, kernels. The host-memory device API and the
 * error text are nnplug/host_device.h's. */
#define _GNU_SOURCE
#include "nnplug/backend.h"
#include "nnplug/host_device.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dl.h"
#include "int8.h"
#include "kernels.h"

#ifdef NNPLUG_PLUGIN_VERSION /* the package version, from nnplug's native build */
#define OX_VERSION NNPLUG_PLUGIN_VERSION
#else
#define OX_VERSION "0.0.0"
#endif

/* The kernels' message of the calling thread's latest failure (kernels.h takes an ox_err). */
static __thread ox_err t_err;

/* A kernel call failed with t_err's message: make it last_error()'s. */
static nnp_status kernel_failed(nnp_status st)
{
    snprintf(nnp_host_error_text(), NNP_HOST_ERROR_BYTES, "%s", t_err.msg);
    return st;
}

static nnp_status ox_abi_init(const nnp_init_options *o)
{
    int threads = 0;
    if (o && NNP_INIT_HAS(o, num_threads)) threads = o->num_threads;
    /* NNPLUG_ONEDNN_COPY_CONSTANTS=1: copy them anyway, as for a host before ABI 1.8 (tests) */
    const char *copy = getenv("NNPLUG_ONEDNN_COPY_CONSTANTS");
    ox_graph_host_keeps_constants(o && NNP_INIT_HAS(o, host_flags) &&
                                  (o->host_flags & NNP_HOST_KEEPS_CONSTANTS) &&
                                  !(copy && !strcmp(copy, "1")));
    return ox_init(threads, &t_err) ? kernel_failed(NNP_STATUS_ERROR) : NNP_OK;
}

static void ox_abi_shutdown(void)
{
    ox_shutdown();
}

static nnp_status ox_abi_set_num_threads(int32_t n)
{
    if (n < 0)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "set_num_threads: %d is negative", n);
    ox_set_num_threads(n);
    return NNP_OK;
}

static nnp_status ox_get_attr(nnp_device dev, int32_t kind, nnp_attr_value *out)
{
    nnp_status rc = nnp_host_get_attr(dev, kind, out);
    if (rc != NNP_OK || kind == NNP_DEVICE_ATTR_EXIST || !nnp_host_is_device(dev)) return rc;
    if (kind == NNP_DEVICE_ATTR_MULTI_PROCESSOR_COUNT) {
        out->type = NNP_ATTR_VALUE_INT;
        out->i = ox_num_threads();
    } else if (kind == NNP_DEVICE_ATTR_API_VERSION) {
        const dnnl_version_t *v = D(dnnl_version)();
        out->type = NNP_ATTR_VALUE_STRING;
        snprintf(out->s, sizeof out->s, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch,
                 v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime");
    } else if (kind == NNP_DEVICE_ATTR_DEVICE_NAME) {
        out->type = NNP_ATTR_VALUE_STRING;
        snprintf(out->s, sizeof out->s, "cpu (oneDNN)");
    }
    return NNP_OK;
}

static nnp_status ox_supports(const nnp_node_desc *node, int32_t *out)
{
    if (!node || !out) return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "supports: NULL argument");
    *out = ox_supported(node, 1);
    return NNP_OK;
}

/* Nodes claimed only together (ABI 1.4): IsNaN, whose bool result this float32 backend never
 * holds, is claimed with the Where after it when the two are Where(IsNaN(x), C, x), one
 * float->float step (graph.c, nan_replace). */
static nnp_status ox_supports_fused(const nnp_node_desc *nodes, int32_t n, int32_t *out)
{
    if (!nodes || !out || n < 1)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "supports_fused: bad arguments");
    *out = ox_supported(nodes, n);
    return NNP_OK;
}

/* One kernel runs any run of supported nodes: its activations then stay in oneDNN's
 * layouts from the first node to the last (the host ends a group where a value is needed
 * outside it). */
static nnp_status ox_fuse(const nnp_node_desc *nodes, int32_t n, int32_t *taken)
{
    if (!nodes || !taken || n < 1)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "fuse: bad arguments");
    *taken = n;
    /* an integer op is a group of its own (with the Cast of a MatMulInteger's sums after it):
     * it ends the float32 run before it */
    for (int32_t i = 0; i < n; i++)
        if (ox_int8_op(&nodes[i])) {
            *taken = i ? i : n > 1 && ox_int8_cast_of(&nodes[0], &nodes[1]) ? 2 : 1;
            return NNP_OK;
        }
    /* an IsNaN is claimed only with the Where after it: a group never ends at one */
    if (n > 1 && nodes[n - 1].op_type && !strcmp(nodes[n - 1].op_type, "IsNaN")) *taken = n - 1;
    return NNP_OK;
}

static nnp_status create_kernel(const nnp_node_desc *nodes, int32_t n, nnp_device dev, int bf16,
                                nnp_kernel **out)
{
    if (!out) return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "kernel_create: out is NULL");
    *out = NULL;
    nnp_status rc = nnp_host_check_device(dev, "kernel_create");
    if (rc != NNP_OK) return rc;
    int unsupported;
    if (ox_build(nodes, n, bf16, out, &unsupported, &t_err))
        return kernel_failed(unsupported ? NNP_STATUS_UNSUPPORTED : NNP_STATUS_INVALID_ARGUMENT);
    return NNP_OK;
}

static nnp_status ox_kernel_create(const nnp_node_desc *nodes, int32_t n, nnp_device dev,
                                   nnp_kernel **out)
{
    return create_kernel(nodes, n, dev, 0, out);
}

/* The Target attribute this backend declares: "precision", "f32" (exact, the default) or
 * "bf16" (products in bf16, see ox_graph.bf16), OpenVINO's INFERENCE_PRECISION_HINT. */
#define PRECISION_ATTR "{\"precision\": {\"type\": \"str\", \"default\": \"f32\"}}"

/* The value of "precision" in the host's Target JSON (keys sorted, strings quoted, no escapes
 * in these values): 0 for "f32", 1 for "bf16", -1 with a message for any other. */
static int target_bf16(const char *target)
{
    const char *p = target ? strstr(target, "\"precision\"") : NULL;
    if (!p) return 0;
    p += strlen("\"precision\"");
    while (*p == ' ' || *p == ':') p++;
    if (!strncmp(p, "\"f32\"", 5)) return 0;
    if (!strncmp(p, "\"bf16\"", 6)) return 1;
    const char *end = *p == '"' ? strchr(p + 1, '"') : NULL;
    nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT,
                  "target attribute precision=%.*s: the onednn backend runs \"f32\" (exact) or "
                  "\"bf16\" (products in bfloat16)",
                  end ? (int)(end - p + 1) : 16, p);
    return -1;
}

static nnp_status ox_kernel_create_for_target(const nnp_node_desc *nodes, int32_t n, nnp_device dev,
                                              const char *target, nnp_kernel **out)
{
    int bf16 = target_bf16(target);
    if (bf16 < 0) return NNP_STATUS_INVALID_ARGUMENT;
    return create_kernel(nodes, n, dev, bf16, out);
}

static nnp_status ox_kernel_destroy(nnp_kernel *k)
{
    ox_destroy(k);
    return NNP_OK;
}

static nnp_status ox_kernel_output_shapes(const nnp_kernel *k, const nnp_tensor *in, int32_t nin,
                                          int32_t nout, int32_t *ndims, int64_t *shapes)
{
    if (!k || !ndims || !shapes || nin < 0 || (nin && !in))
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "kernel_output_shapes: bad arguments");
    if (ox_output_shapes(k, in, nin, nout, ndims, shapes, &t_err))
        return kernel_failed(NNP_STATUS_SHAPE_ERROR);
    return NNP_OK;
}

static nnp_status ox_workspace(const nnp_kernel *k, const nnp_tensor *in, int32_t nin,
                               const nnp_tensor *outs, int32_t nout, uint64_t *nbytes)
{
    (void)outs;
    (void)nout;
    if (!k || !nbytes || nin < 0 || (nin && !in))
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "kernel_workspace_size: bad arguments");
    if (ox_workspace_size(k, in, nin, nbytes, &t_err))
        return kernel_failed(NNP_STATUS_INVALID_ARGUMENT);
    return NNP_OK;
}

static nnp_status ox_kernel_run(const nnp_kernel *k, const nnp_tensor *in, int32_t nin,
                                const nnp_tensor *outs, int32_t nout, void *ws, uint64_t wsn,
                                nnp_stream stream)
{
    (void)stream;
    if (ox_run(k, in, nin, outs, nout, ws, wsn, &t_err))
        return kernel_failed(NNP_STATUS_INVALID_ARGUMENT);
    return NNP_OK;
}

static nnp_status ox_run_steps(const nnp_step *steps, int32_t n, void *const *slots, int32_t ns,
                               void *ws, uint64_t wsn, nnp_stream st, int32_t *failed)
{
    return nnp_run_steps_default(ox_kernel_run, steps, n, slots, ns, ws, wsn, st, failed);
}

static nnp_status ox_run_dynamic(const nnp_dynamic_plan *plan, nnp_dynamic_run *run)
{
    return nnp_run_dynamic_default(ox_kernel_run, ox_kernel_output_shapes, ox_workspace, plan, run);
}

static const nnp_backend_v1 TABLE = {
    .abi_version = {NNP_BACKEND_ABI_MAJOR, NNP_BACKEND_ABI_MINOR, NNP_BACKEND_ABI_PATCH},
    .struct_size = sizeof(nnp_backend_v1),
    .flags = NNP_BACKEND_HOST_VISIBLE |
             NNP_BACKEND_KERNELS_OWN_CONSTANTS, /* kernels copy the constants they read */
    .id = "onednn",
    .version = OX_VERSION,
    .device_type = NNP_DEVICE_CPU,
    .init = ox_abi_init,
    .shutdown = ox_abi_shutdown,
    .last_error = nnp_host_last_error,
    .set_num_threads = ox_abi_set_num_threads,
    .get_attr = ox_get_attr,
    NNP_HOST_DEVICE_MEMORY,
    .supports = ox_supports,
    .fuse = ox_fuse,
    .kernel_create = ox_kernel_create,
    .kernel_destroy = ox_kernel_destroy,
    .kernel_output_shapes = ox_kernel_output_shapes,
    .kernel_workspace_size = ox_workspace,
    .kernel_run = ox_kernel_run,
    .run_steps = ox_run_steps,
    .supports_fused = ox_supports_fused,
    /* above the portable backends: it claims only what it runs faster and declines the rest */
    .priority = 200,
    .provider_names = "DnnlExecutionProvider",
    .target_attrs = PRECISION_ATTR,
    .kernel_create_for_target = ox_kernel_create_for_target,
    .run_dynamic = ox_run_dynamic,
};

NNP_EXPORT const nnp_backend_v1 *nnp_backend_entry(const nnp_version *host_abi)
{
    if (host_abi && host_abi->major != NNP_BACKEND_ABI_MAJOR) return NULL;
    return &TABLE;
}
