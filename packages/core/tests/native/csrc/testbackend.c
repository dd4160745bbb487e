/*
 * A small but complete nnplug native backend used by the tests.
 *
 * Ops (float32): Add (numpy broadcasting), Relu, MatMul (A[..., M, K] x B[K, N]); Reshape (any
 * dtype, shape input int64, read at run time); TbFail (domain "test.nnplug", always fails at
 * run time with a message). fuse() takes Add followed by the Relu of its result.
 *
 * Two flavours from this one file:
 * - default: an extension device "testdev" (type 100) whose memory is reachable only through
 *   handles (a checked header in front of malloc'ed bytes), so every byte the host moves goes
 *   through copy_data_from_to; it has streams and workspaces.
 * - TB_HOST_VISIBLE=1: a CPU backend (device type 1, host pointers, no streams).
 * Other macros build the broken variants the loader tests need (see test_loader.py), and
 * TB_RUN_DYNAMIC=0 leaves out run_dynamic (default: as TB_RUN_STEPS), and
 * TB_BAD_OUTPUT_SHAPES=1 one whose kernel_output_shapes reports twice the real dims.
 * TB_UNCHECKED_RUN_DYNAMIC=1 a run_dynamic that does not check shapes against the plan.
 * TB_ASK_EVERY_OUTPUT=1 a run_dynamic built before ABI 1.8.1: it drops the memory the host
 * preset for its outputs and asks the host's alloc for every one.
 * TB_NULL_NODE_CRASH=1: supports() dereferences a NULL node (the conformance-report tests).
 * TB_RELU_LETS_THROUGH=v: Relu passes the value v (a negative float) unchanged, a wrong answer
 * only an input of exactly v shows (the edge-value conformance tests).
 * TB_TARGET_ATTRS="<JSON>" declares Target attributes and TB_FOR_TARGET=1 provides
 * kernel_create_for_target, recording the Target it gets (tb_last_target(); ABI 1.2); TB_DEVICE_TYPE=N and
 * TB_DEVICE_NAME="x" pick another extension device (the device-type clash tests).
 * TB_HOSTILE=1 builds the hostile backend of test_hostile_plugins.py, steered at load time by
 * the environment (one build serves every case):
 * - TB_HOSTILE_FIELD=id|version|device_type_name and TB_HOSTILE_KIND=1|2|3: that string has no
 *   NUL before a PROT_NONE guard page (1), is not UTF-8 (2) or is 16 MB long (3);
 * - TB_CRASH=entry_segv|entry_abort: the entry point dereferences NULL / calls abort();
 *   TB_CRASH=ctor_abort: a constructor aborts while dlopen runs it.
 * The crashing plugins of test_isolated_backends.py, fixed at build time (a worker process
 * inherits the environment, so these do not read it):
 * - TB_CTOR_ABORT=1: a constructor calls abort() while dlopen runs it;
 * - TB_ENTRY_SEGV=1: nnp_backend_entry writes to address 0;
 * - TB_MISBEHAVE=1: Relu misbehaves when its first input element is 1001 (writes 1 TiB past
 *   its output), 1002 (hangs), 1003 (calls exit(3)) or 1004 (calls abort()); other inputs run.
 */
#define _DEFAULT_SOURCE /* mmap, MAP_ANONYMOUS under -std=c99 */
#include <nnplug/backend.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TB_ID
#define TB_ID "testdev"
#endif
#ifndef TB_HOST_VISIBLE
#define TB_HOST_VISIBLE 0
#endif
#ifndef TB_ABI_MAJOR
#define TB_ABI_MAJOR NNP_BACKEND_ABI_MAJOR
#endif
#ifndef TB_ABI_MINOR
#define TB_ABI_MINOR NNP_BACKEND_ABI_MINOR
#endif
#ifndef TB_INIT_FAIL
#define TB_INIT_FAIL 0
#endif
#ifndef TB_RUN_STEPS
#define TB_RUN_STEPS 1
#endif
#ifndef TB_RUN_DYNAMIC
#define TB_RUN_DYNAMIC TB_RUN_STEPS
#endif
#ifndef TB_OWN_CONSTANTS
#define TB_OWN_CONSTANTS 0
#endif
#ifndef TB_UNCHECKED_RUN_DYNAMIC
#define TB_UNCHECKED_RUN_DYNAMIC 0
#endif
#ifndef TB_ASK_EVERY_OUTPUT
#define TB_ASK_EVERY_OUTPUT 0
#endif
#ifndef TB_BAD_OUTPUT_SHAPES
#define TB_BAD_OUTPUT_SHAPES 0
#endif
#ifndef TB_STRUCT_SIZE
#define TB_STRUCT_SIZE sizeof(nnp_backend_v1)
#endif
#ifndef TB_PRIORITY
#define TB_PRIORITY 0
#endif
#ifndef TB_PROVIDER_NAMES
#define TB_PROVIDER_NAMES NULL
#endif

/* ABI 1.3 string tensors: Identity on strings, with release_strings when TB_STRINGS is 1;
 * TB_STRINGS 2: the table has no release_strings (the host must not offer string nodes);
 * TB_BAD_STRINGS: Identity writes bytes that are not UTF-8. */
#ifndef TB_STRINGS
#define TB_STRINGS 0
#endif
#ifndef TB_BAD_STRINGS
#define TB_BAD_STRINGS 0
#endif

#ifndef TB_NULL_NODE_CRASH
#define TB_NULL_NODE_CRASH 0
#endif
#ifndef TB_FOR_TARGET
#define TB_FOR_TARGET 0
#endif
#ifndef TB_TARGET_ATTRS
#define TB_TARGET_ATTRS NULL /* ABI 1.2: no Target attributes of its own */
#endif

#if TB_HOST_VISIBLE
#define TB_DEVICE_TYPE NNP_DEVICE_CPU
#elif !defined(TB_DEVICE_TYPE)
#define TB_DEVICE_TYPE 100
#endif
#ifndef TB_DEVICE_NAME
#define TB_DEVICE_NAME "testdev"
#endif

/* ---- errors ------------------------------------------------------------------------------ */
static __thread char tb_err[512];

static nnp_status fail(nnp_status rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tb_err, sizeof tb_err, fmt, ap);
    va_end(ap);
    return rc;
}

static const char *tb_last_error(void)
{
    return tb_err;
}

/* ---- counters the tests read through tb_stats() ------------------------------------------- */
enum {
    ST_ALLOC,
    ST_FREE,
    ST_LIVE,
    ST_WS_ALLOC,
    ST_WS_FREE,
    ST_H2D,
    ST_D2H,
    ST_D2D,
    ST_KERNEL_RUN,
    ST_RUN_STEPS,
    ST_STREAMS,
    ST_STREAM_SYNC,
    ST_SET_STREAM,
    ST_SYNC_FROM_TO,
    ST_KERNELS_LIVE,
    ST_INIT,
    ST_SHUTDOWN,
    ST_THREADS,
    ST_SET_DEVICE,
    ST_GET_ATTR,
    ST_STRINGS_LIVE,
    ST_RUN_DYNAMIC,
    ST_HOST_FLAGS,      /* the host_flags init() was given (ABI 1.8) */
    ST_KEPT_CONSTANTS,  /* constants kernels read from the host's memory (TB_OWN_CONSTANTS) */
    ST_CHANGED_AT_DESTROY, /* of those, ones whose bytes differed when the kernel was destroyed */
    ST_OUTPUT_ALLOC,    /* run_dynamic's calls of the host's alloc (an OUTPUT not preset) */
    ST_COUNT
};
static long long tb_counters[ST_COUNT];
#define BUMP(i, n) __atomic_add_fetch(&tb_counters[i], (n), __ATOMIC_RELAXED)

NNP_EXPORT void tb_stats(long long *out, int n)
{
    for (int i = 0; i < n && i < ST_COUNT; ++i)
        out[i] = __atomic_load_n(&tb_counters[i], __ATOMIC_RELAXED);
}

/* ---- device memory ------------------------------------------------------------------------ */
#define TB_MAGIC 0x6e6e706c75674d42ull
typedef struct tb_block {
    unsigned long long magic;
    uint64_t nbytes;
    void *raw;
    unsigned char *data;
} tb_block;

static nnp_status tb_alloc(uint64_t nbytes, uint64_t alignment, void **out)
{
    if (!out) return fail(NNP_STATUS_INVALID_ARGUMENT, "alloc: out is NULL");
    if (nbytes == 0) return fail(NNP_STATUS_INVALID_ARGUMENT, "alloc: nbytes is 0");
    if (alignment == 0 || (alignment & (alignment - 1)))
        return fail(NNP_STATUS_INVALID_ARGUMENT, "alloc: alignment %llu",
                    (unsigned long long)alignment);
    if (alignment < 16) alignment = 16;
    void *raw = malloc(nbytes + alignment + sizeof(tb_block));
    if (!raw)
        return fail(NNP_STATUS_OUT_OF_MEMORY, "alloc: out of memory (%llu bytes)",
                    (unsigned long long)nbytes);
    unsigned char *p = (unsigned char *)raw + sizeof(tb_block);
    p += (alignment - ((uintptr_t)p % alignment)) % alignment;
    BUMP(ST_ALLOC, 1);
    BUMP(ST_LIVE, 1);
#if TB_HOST_VISIBLE
    memcpy(p - sizeof(void *), &raw, sizeof(void *)); /* the block start, just before the data */
    *out = p;
#else
    tb_block *b = (tb_block *)raw;
    b->magic = TB_MAGIC;
    b->nbytes = nbytes;
    b->raw = raw;
    b->data = p;
    *out = b;
#endif
    return NNP_OK;
}

static nnp_status tb_free(void *handle)
{
    if (!handle) return NNP_OK;
#if TB_HOST_VISIBLE
    void *raw;
    memcpy(&raw, (unsigned char *)handle - sizeof(void *), sizeof(void *));
    free(raw);
#else
    tb_block *b = (tb_block *)handle;
    if (b->magic != TB_MAGIC)
        return fail(NNP_STATUS_INVALID_ARGUMENT, "free: not a testdev handle");
    b->magic = 0;
    free(b->raw);
#endif
    BUMP(ST_FREE, 1);
    BUMP(ST_LIVE, -1);
    return NNP_OK;
}

/* Host address of [handle + offset, + need). NULL (with a message) when out of range. */
static unsigned char *tb_addr(void *handle, uint64_t offset, uint64_t need)
{
    if (!handle) {
        fail(NNP_STATUS_INVALID_ARGUMENT, "NULL data handle");
        return NULL;
    }
#if TB_HOST_VISIBLE
    (void)need;
    return (unsigned char *)handle + offset;
#else
    tb_block *b = (tb_block *)handle;
    if (b->magic != TB_MAGIC) {
        fail(NNP_STATUS_INVALID_ARGUMENT, "not a testdev handle");
        return NULL;
    }
    if (offset > b->nbytes || need > b->nbytes - offset) {
        fail(NNP_STATUS_INVALID_ARGUMENT, "access of %llu bytes at %llu outside a %llu-byte buffer",
             (unsigned long long)need, (unsigned long long)offset, (unsigned long long)b->nbytes);
        return NULL;
    }
    return b->data + offset;
#endif
}

static nnp_status tb_alloc_data_space(nnp_device dev, uint64_t nbytes, uint64_t alignment,
                                      nnp_dtype hint, void **out)
{
    (void)hint;
    if (dev.device_type != TB_DEVICE_TYPE || dev.device_id != 0)
        return fail(NNP_STATUS_INVALID_ARGUMENT, "no device %d:%d", dev.device_type, dev.device_id);
    return tb_alloc(nbytes, alignment, out);
}

static nnp_status tb_free_data_space(nnp_device dev, void *handle)
{
    (void)dev;
    return tb_free(handle);
}

static nnp_status tb_alloc_workspace(nnp_device dev, uint64_t nbytes, nnp_dtype hint, void **out)
{
    nnp_status rc = tb_alloc_data_space(dev, nbytes, 64, hint, out);
    if (rc == NNP_OK) BUMP(ST_WS_ALLOC, 1);
    return rc;
}

static nnp_status tb_free_workspace(nnp_device dev, void *handle)
{
    BUMP(ST_WS_FREE, 1);
    return tb_free_data_space(dev, handle);
}

static nnp_status tb_copy(const void *from, uint64_t from_offset, void *to, uint64_t to_offset,
                          uint64_t nbytes, nnp_device dev_from, nnp_device dev_to, int32_t kind,
                          nnp_stream stream)
{
    (void)dev_from;
    (void)dev_to;
    (void)stream;
    const unsigned char *src;
    unsigned char *dst;
    switch (kind) {
    case NNP_COPY_HOST_TO_DEVICE:
        src = (const unsigned char *)from + from_offset;
        dst = tb_addr(to, to_offset, nbytes);
        BUMP(ST_H2D, 1);
        break;
    case NNP_COPY_DEVICE_TO_HOST:
        src = tb_addr((void *)from, from_offset, nbytes);
        dst = (unsigned char *)to + to_offset;
        BUMP(ST_D2H, 1);
        break;
    case NNP_COPY_DEVICE_TO_DEVICE:
        src = tb_addr((void *)from, from_offset, nbytes);
        dst = tb_addr(to, to_offset, nbytes);
        BUMP(ST_D2D, 1);
        break;
    default: return fail(NNP_STATUS_INVALID_ARGUMENT, "copy: unknown kind %d", kind);
    }
    if (!from || !to || !src || !dst) {
        if (!from || !to) fail(NNP_STATUS_INVALID_ARGUMENT, "copy: NULL pointer");
        return NNP_STATUS_INVALID_ARGUMENT;
    }
    memmove(dst, src, nbytes);
    return NNP_OK;
}

static nnp_status tb_get_attr(nnp_device dev, int32_t kind, nnp_attr_value *out)
{
    if (!out) return fail(NNP_STATUS_INVALID_ARGUMENT, "get_attr: out is NULL");
    BUMP(ST_GET_ATTR, 1);
    int exists = dev.device_type == TB_DEVICE_TYPE && dev.device_id == 0;
    switch (kind) {
    case NNP_DEVICE_ATTR_EXIST:
        out->type = NNP_ATTR_VALUE_INT;
        out->i = exists;
        break;
    case NNP_DEVICE_ATTR_DEVICE_NAME:
        if (!exists) break;
        out->type = NNP_ATTR_VALUE_STRING;
        snprintf(out->s, sizeof out->s, "nnplug test device");
        break;
    case NNP_DEVICE_ATTR_MULTI_PROCESSOR_COUNT:
        if (!exists) break;
        out->type = NNP_ATTR_VALUE_INT;
        out->i = tb_counters[ST_THREADS] ? tb_counters[ST_THREADS] : 1;
        break;
    case NNP_DEVICE_ATTR_TOTAL_GLOBAL_MEMORY:
        if (!exists) break;
        out->type = NNP_ATTR_VALUE_INT;
        out->i = 1ll << 30;
        break;
    default: break; /* unknown: NONE */
    }
    return NNP_OK;
}

static nnp_status tb_set_device(nnp_device dev)
{
    if (dev.device_type != TB_DEVICE_TYPE || dev.device_id != 0)
        return fail(NNP_STATUS_INVALID_ARGUMENT, "set_device: no device %d:%d", dev.device_type,
                    dev.device_id);
    BUMP(ST_SET_DEVICE, 1);
    return NNP_OK;
}

/* Streams: work runs synchronously; a stream is a counter so the tests can see the calls. */
static nnp_status tb_create_stream(nnp_device dev, nnp_stream *out)
{
    (void)dev;
    if (!out) return fail(NNP_STATUS_INVALID_ARGUMENT, "create_stream: out is NULL");
    int *s = (int *)malloc(sizeof(int));
    if (!s) return fail(NNP_STATUS_OUT_OF_MEMORY, "create_stream: out of memory");
    *s = 0x5757;
    BUMP(ST_STREAMS, 1);
    *out = s;
    return NNP_OK;
}
static nnp_status tb_check_stream(nnp_stream s)
{
    if (s && *(int *)s != 0x5757) return fail(NNP_STATUS_INVALID_ARGUMENT, "not a testdev stream");
    return NNP_OK;
}
static nnp_status tb_free_stream(nnp_device dev, nnp_stream s)
{
    (void)dev;
    if (tb_check_stream(s)) return NNP_STATUS_INVALID_ARGUMENT;
    if (s) {
        *(int *)s = 0;
        free(s);
        BUMP(ST_STREAMS, -1);
    }
    return NNP_OK;
}
static nnp_status tb_set_stream(nnp_device dev, nnp_stream s)
{
    (void)dev;
    BUMP(ST_SET_STREAM, 1);
    return tb_check_stream(s);
}
static nnp_status tb_stream_sync(nnp_device dev, nnp_stream s)
{
    (void)dev;
    BUMP(ST_STREAM_SYNC, 1);
    return tb_check_stream(s);
}
static nnp_status tb_sync_from_to(nnp_device dev, nnp_stream a, nnp_stream b)
{
    (void)dev;
    BUMP(ST_SYNC_FROM_TO, 1);
    if (tb_check_stream(a) || tb_check_stream(b)) return NNP_STATUS_INVALID_ARGUMENT;
    return NNP_OK;
}

/* ---- ops ------------------------------------------------------------------------------------ */
enum { OP_NONE, OP_ADD, OP_RELU, OP_MATMUL, OP_RESHAPE, OP_FAIL, OP_SIDENTITY };

static int streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static int is_f32(nnp_dtype t)
{
    return t.code == NNP_DTYPE_FLOAT && t.bits == 32 && t.lanes == 1;
}

static int op_of(const nnp_node_desc *n)
{
    if (streq(n->domain, "test.nnplug") && streq(n->op_type, "TbFail")) return OP_FAIL;
    if (!streq(n->domain, "")) return OP_NONE;
    if (streq(n->op_type, "Add")) return OP_ADD;
    if (streq(n->op_type, "Relu")) return OP_RELU;
    if (streq(n->op_type, "MatMul")) return OP_MATMUL;
    if (streq(n->op_type, "Reshape")) return OP_RESHAPE;
    if (TB_STRINGS && streq(n->op_type, "Identity")) return OP_SIDENTITY;
    return OP_NONE;
}

static nnp_status tb_supports(const nnp_node_desc *n, int32_t *out)
{
#if TB_NULL_NODE_CRASH /* the mistake of a backend that trusts its caller: NULL node crashes */
    if (!out) return fail(NNP_STATUS_INVALID_ARGUMENT, "supports: NULL argument");
    if (n->num_inputs < 0) return fail(NNP_STATUS_INVALID_ARGUMENT, "supports: bad node");
#else
    if (!n || !out) return fail(NNP_STATUS_INVALID_ARGUMENT, "supports: NULL argument");
#endif
    *out = 0;
    int op = op_of(n);
    switch (op) {
    case OP_ADD:
        *out = n->num_inputs == 2 && is_f32(n->inputs[0].dtype) && is_f32(n->inputs[1].dtype);
        break;
    case OP_RELU: *out = n->num_inputs == 1 && is_f32(n->inputs[0].dtype); break;
    case OP_MATMUL:
        *out = n->num_inputs == 2 && is_f32(n->inputs[0].dtype) && is_f32(n->inputs[1].dtype) &&
               n->inputs[1].ndim == 2 && n->inputs[0].ndim >= 1;
        break;
    case OP_RESHAPE: {
        const nnp_attr *az = nnp_find_attr(n->attrs, n->num_attrs, "allowzero");
        *out = n->num_inputs == 2 && n->inputs[1].dtype.code == NNP_DTYPE_INT &&
               n->inputs[1].dtype.bits == 64 &&
               !(az && az->type == NNP_ATTR_INT && *(const int64_t *)az->data != 0);
        break;
    }
    case OP_FAIL: *out = 1; break;
    case OP_SIDENTITY:
        *out = n->num_inputs == 1 && n->inputs[0].dtype.code == NNP_DTYPE_STRING;
        break;
    default: break;
    }
    return NNP_OK;
}

static nnp_status tb_fuse(const nnp_node_desc *nodes, int32_t num, int32_t *out)
{
    if (!nodes || !out || num < 1) return fail(NNP_STATUS_INVALID_ARGUMENT, "fuse: bad arguments");
    *out = 1;
    if (num >= 2 && op_of(&nodes[0]) == OP_ADD && op_of(&nodes[1]) == OP_RELU &&
        nodes[1].num_inputs == 1 && nodes[0].num_outputs == 1 &&
        streq(nodes[1].inputs[0].name, nodes[0].outputs[0].name))
        *out = 2;
    return NNP_OK;
}

#define TB_MAX_IO 8
typedef struct tb_kernel {
    int op;
    int relu_after; /* Add fused with Relu */
    int num_inputs, num_outputs;
    void *consts[TB_MAX_IO]; /* copies of constant inputs (TB_OWN_CONSTANTS), or the host's
                                own bytes where it keeps them (kept, their checksum in sum) */
    int kept[TB_MAX_IO];
    uint64_t sum[TB_MAX_IO], nbytes[TB_MAX_IO];
    char name[128];
} tb_kernel;

static uint32_t tb_host_flags;

/* FNV-1a over n bytes: whether a kept constant changed under the kernel. */
static uint64_t tb_checksum(const void *p, uint64_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static nnp_status tb_kernel_create(const nnp_node_desc *nodes, int32_t num, nnp_device dev,
                                   nnp_kernel **out)
{
    if (!nodes || !out || num < 1 || num > 2)
        return fail(NNP_STATUS_INVALID_ARGUMENT, "kernel_create: bad arguments");
    if (dev.device_type != TB_DEVICE_TYPE)
        return fail(NNP_STATUS_INVALID_ARGUMENT, "kernel_create: wrong device");
    int32_t ok = 0;
    tb_supports(&nodes[0], &ok);
    if (!ok)
        return fail(NNP_STATUS_UNSUPPORTED, "node %s (%s) is not supported", nodes[0].name,
                    nodes[0].op_type);
    tb_kernel *k = (tb_kernel *)calloc(1, sizeof(tb_kernel));
    if (!k) return fail(NNP_STATUS_OUT_OF_MEMORY, "kernel_create: out of memory");
    k->op = op_of(&nodes[0]);
    k->relu_after = num == 2;
    k->num_inputs = nodes[0].num_inputs;
    k->num_outputs = nodes[num - 1].num_outputs;
    snprintf(k->name, sizeof k->name, "%s", nodes[0].name);
    if (k->num_inputs > TB_MAX_IO) {
        free(k);
        return fail(NNP_STATUS_UNSUPPORTED, "too many inputs");
    }
#if TB_OWN_CONSTANTS
    for (int i = 0; i < k->num_inputs; ++i) {
        const nnp_value_desc *v = &nodes[0].inputs[i];
        if (v->const_data && (tb_host_flags & NNP_HOST_KEEPS_CONSTANTS) &&
            v->dtype.code != NNP_DTYPE_STRING) { /* the host keeps them: read them there */
            k->consts[i] = (void *)v->const_data;
            k->kept[i] = 1;
            k->nbytes[i] = v->const_nbytes;
            k->sum[i] = tb_checksum(v->const_data, v->const_nbytes);
            BUMP(ST_KEPT_CONSTANTS, 1);
        } else if (v->const_data) {
            k->consts[i] = malloc(v->const_nbytes ? v->const_nbytes : 1);
            if (!k->consts[i])
                return fail(NNP_STATUS_OUT_OF_MEMORY, "kernel_create: out of memory");
            memcpy(k->consts[i], v->const_data, v->const_nbytes);
        }
    }
#endif
    BUMP(ST_KERNELS_LIVE, 1);
    *out = (nnp_kernel *)k;
    return NNP_OK;
}

#if TB_FOR_TARGET
/* ABI 1.2: kernel_create with the network's Target; the last one is kept for the tests. */
static char tb_target[4096];

NNP_EXPORT const char *tb_last_target(void)
{
    return tb_target;
}

static nnp_status tb_kernel_create_for_target(const nnp_node_desc *nodes, int32_t num,
                                              nnp_device dev, const char *target, nnp_kernel **out)
{
    snprintf(tb_target, sizeof tb_target, "%s", target ? target : "(NULL)");
    return tb_kernel_create(nodes, num, dev, out);
}
#endif

static nnp_status tb_kernel_destroy(nnp_kernel *kernel)
{
    tb_kernel *k = (tb_kernel *)kernel;
    if (!k) return NNP_OK;
    for (int i = 0; i < TB_MAX_IO; ++i) {
        if (!k->kept[i]) free(k->consts[i]);
        else if (tb_checksum(k->consts[i], k->nbytes[i]) != k->sum[i])
            BUMP(ST_CHANGED_AT_DESTROY, 1);
    }
    free(k);
    BUMP(ST_KERNELS_LIVE, -1);
    return NNP_OK;
}

/* Input i as a host pointer: the kernel's own copy of a constant, or the tensor's memory. */
static const void *in_ptr(const tb_kernel *k, const nnp_tensor *t, int i)
{
    if (!t->data && k->consts[i]) return k->consts[i];
    uint64_t need = (uint64_t)nnp_tensor_numel(t) * nnp_dtype_nbytes(t->dtype);
    return tb_addr(t->data, t->byte_offset, need);
}

static nnp_status broadcast_shape(const nnp_tensor *a, const nnp_tensor *b, int32_t *nd,
                                  int64_t *dims)
{
    int32_t n = a->ndim > b->ndim ? a->ndim : b->ndim;
    if (n > NNP_MAX_NDIM) return fail(NNP_STATUS_UNSUPPORTED, "rank %d too large", n);
    for (int32_t i = 0; i < n; ++i) {
        int64_t da = i < n - a->ndim ? 1 : a->shape[i - (n - a->ndim)];
        int64_t db = i < n - b->ndim ? 1 : b->shape[i - (n - b->ndim)];
        if (da != db && da != 1 && db != 1)
            return fail(NNP_STATUS_SHAPE_ERROR,
                        "Add: shapes do not broadcast (dim %d: %lld vs %lld)", i, (long long)da,
                        (long long)db);
        dims[i] = da == 1 ? db : da;
    }
    *nd = n;
    return NNP_OK;
}

static nnp_status output_shape(const tb_kernel *k, const nnp_tensor *in, int32_t *nd, int64_t *dims)
{
    switch (k->op) {
    case OP_ADD: return broadcast_shape(&in[0], &in[1], nd, dims);
    case OP_RELU:
    case OP_FAIL:
    case OP_SIDENTITY:
        *nd = in[0].ndim;
        for (int32_t i = 0; i < in[0].ndim; ++i) dims[i] = in[0].shape[i];
        return NNP_OK;
    case OP_MATMUL: {
        const nnp_tensor *a = &in[0], *b = &in[1];
        if (b->ndim != 2 || a->ndim < 1)
            return fail(NNP_STATUS_SHAPE_ERROR, "MatMul: B must be 2-D");
        if (a->shape[a->ndim - 1] != b->shape[0])
            return fail(NNP_STATUS_SHAPE_ERROR, "MatMul: inner dimensions %lld and %lld differ",
                        (long long)a->shape[a->ndim - 1], (long long)b->shape[0]);
        *nd = a->ndim;
        for (int32_t i = 0; i < a->ndim - 1; ++i) dims[i] = a->shape[i];
        dims[a->ndim - 1] = b->shape[1];
        return NNP_OK;
    }
    case OP_RESHAPE: {
        const nnp_tensor *s = &in[1];
        if (s->ndim != 1 || s->shape[0] > NNP_MAX_NDIM)
            return fail(NNP_STATUS_SHAPE_ERROR, "Reshape: bad shape input");
        const int64_t *want = (const int64_t *)in_ptr(k, s, 1);
        if (!want) return NNP_STATUS_INVALID_ARGUMENT;
        int64_t total = nnp_tensor_numel(&in[0]), known = 1;
        int32_t infer = -1;
        for (int32_t i = 0; i < (int32_t)s->shape[0]; ++i) {
            int64_t d = want[i];
            if (d == 0) d = i < in[0].ndim ? in[0].shape[i] : 0;
            if (d == -1) {
                if (infer >= 0) return fail(NNP_STATUS_SHAPE_ERROR, "Reshape: two -1 dims");
                infer = i;
                d = 1;
            } else if (d < 0) {
                return fail(NNP_STATUS_SHAPE_ERROR, "Reshape: dim %lld", (long long)d);
            }
            dims[i] = d;
            known *= d;
        }
        if (infer >= 0) {
            if (known == 0 || total % known)
                return fail(NNP_STATUS_SHAPE_ERROR, "Reshape: cannot infer -1");
            dims[infer] = total / known;
            known *= dims[infer];
        }
        if (known != total)
            return fail(NNP_STATUS_SHAPE_ERROR,
                        "Reshape: %lld elements cannot take shape with %lld", (long long)total,
                        (long long)known);
        *nd = (int32_t)s->shape[0];
        return NNP_OK;
    }
    default: return fail(NNP_STATUS_INTERNAL, "unknown op");
    }
}

static nnp_status tb_output_shapes(const nnp_kernel *kernel, const nnp_tensor *inputs,
                                   int32_t num_inputs, int32_t num_outputs, int32_t *out_ndims,
                                   int64_t *out_shapes)
{
    const tb_kernel *k = (const tb_kernel *)kernel;
    if (!k || !inputs || !out_ndims || !out_shapes || num_inputs != k->num_inputs ||
        num_outputs != 1)
        return fail(NNP_STATUS_INVALID_ARGUMENT, "kernel_output_shapes: bad arguments");
    nnp_status rc = output_shape(k, inputs, &out_ndims[0], out_shapes);
#if TB_BAD_OUTPUT_SHAPES
    /* a broken shape function: reports twice the real dims */
    for (int32_t i = 0; rc == NNP_OK && i < out_ndims[0]; ++i) out_shapes[i] *= 2;
#endif
    return rc;
}

static nnp_status tb_workspace_size(const nnp_kernel *kernel, const nnp_tensor *inputs,
                                    int32_t num_inputs, const nnp_tensor *outputs,
                                    int32_t num_outputs, uint64_t *out)
{
    const tb_kernel *k = (const tb_kernel *)kernel;
    (void)outputs;
    (void)num_outputs;
    if (!k || !out || num_inputs != k->num_inputs)
        return fail(NNP_STATUS_INVALID_ARGUMENT, "workspace_size: bad arguments");
    /* MatMul accumulates one output row in scratch memory (exercises the workspace path). */
    *out = k->op == OP_MATMUL ? (uint64_t)inputs[1].shape[1] * sizeof(float) : 0;
    return NNP_OK;
}

static nnp_status tb_kernel_run(const nnp_kernel *kernel, const nnp_tensor *inputs,
                                int32_t num_inputs, const nnp_tensor *outputs, int32_t num_outputs,
                                void *workspace, uint64_t workspace_nbytes, nnp_stream stream)
{
    const tb_kernel *k = (const tb_kernel *)kernel;
    if (!k || !inputs || !outputs || num_inputs != k->num_inputs || num_outputs != k->num_outputs)
        return fail(NNP_STATUS_INVALID_ARGUMENT, "kernel_run: bad arguments");
    if (tb_check_stream(stream)) return NNP_STATUS_INVALID_ARGUMENT;
    BUMP(ST_KERNEL_RUN, 1);
    if (k->op == OP_FAIL)
        return fail(NNP_STATUS_ERROR, "TbFail node %s refuses to run (it always fails)", k->name);
    int32_t nd;
    int64_t dims[NNP_MAX_NDIM];
    nnp_status rc = output_shape(k, inputs, &nd, dims);
    if (rc) return rc;
    const nnp_tensor *o = &outputs[0];
    if (o->ndim != nd)
        return fail(NNP_STATUS_SHAPE_ERROR, "output rank %d, expected %d", o->ndim, nd);
    for (int32_t i = 0; i < nd; ++i)
        if (o->shape[i] != dims[i])
            return fail(NNP_STATUS_SHAPE_ERROR, "output dim %d is %lld, expected %lld", i,
                        (long long)o->shape[i], (long long)dims[i]);
    int64_t n = nnp_tensor_numel(o);
    uint64_t esize = nnp_dtype_nbytes(o->dtype);
    unsigned char *out = tb_addr(o->data, o->byte_offset, (uint64_t)n * esize);
    if (!out) return NNP_STATUS_INVALID_ARGUMENT;
    const void *a = in_ptr(k, &inputs[0], 0);
    const void *b = k->num_inputs > 1 ? in_ptr(k, &inputs[1], 1) : NULL;
    if (!a || (k->num_inputs > 1 && !b)) return NNP_STATUS_INVALID_ARGUMENT;
    if (k->op == OP_SIDENTITY) { /* every output element gets its own bytes */
        const nnp_string *x = (const nnp_string *)a;
        nnp_string *s = (nnp_string *)out;
        for (int64_t i = 0; i < n; ++i) {
            s[i].size = x[i].size + (TB_BAD_STRINGS ? 1 : 0);
            if (!s[i].size) continue;
            char *m = (char *)malloc(s[i].size);
            if (!m) return fail(NNP_STATUS_OUT_OF_MEMORY, "Identity: out of memory");
            if (x[i].size) memcpy(m, x[i].data, x[i].size);
            if (TB_BAD_STRINGS) m[x[i].size] = (char)0xff;
            s[i].data = m;
            BUMP(ST_STRINGS_LIVE, 1);
        }
        return NNP_OK;
    }
    float *y = (float *)out;
    switch (k->op) {
    case OP_ADD: {
        const float *x0 = (const float *)a, *x1 = (const float *)b;
        int64_t sa[NNP_MAX_NDIM], sb[NNP_MAX_NDIM], idx[NNP_MAX_NDIM];
        int64_t st = 1, su = 1;
        for (int32_t i = nd - 1; i >= 0; --i) {
            int32_t ia = i - (nd - inputs[0].ndim), ib = i - (nd - inputs[1].ndim);
            int64_t da = ia >= 0 ? inputs[0].shape[ia] : 1, db = ib >= 0 ? inputs[1].shape[ib] : 1;
            sa[i] = da == 1 ? 0 : st;
            sb[i] = db == 1 ? 0 : su;
            st *= da;
            su *= db;
            idx[i] = 0;
        }
        for (int64_t e = 0; e < n; ++e) {
            int64_t pa = 0, pb = 0;
            for (int32_t i = 0; i < nd; ++i) {
                pa += idx[i] * sa[i];
                pb += idx[i] * sb[i];
            }
            float v = x0[pa] + x1[pb];
            y[e] = k->relu_after && v < 0 ? 0.0f : v;
            for (int32_t i = nd - 1; i >= 0; --i) {
                if (++idx[i] < dims[i]) break;
                idx[i] = 0;
            }
        }
        break;
    }
    case OP_RELU: {
        const float *x = (const float *)a;
#ifdef TB_MISBEHAVE
        if (n > 0 && x[0] == 1001.0f)
            y[n + (1ll << 40) / (int64_t)sizeof(float)] = 1.0f; /* unmapped */
        if (n > 0 && x[0] == 1002.0f)
            for (;;) sleep(1);
        if (n > 0 && x[0] == 1003.0f) exit(3);
        if (n > 0 && x[0] == 1004.0f) abort();
#endif
        for (int64_t e = 0; e < n; ++e) y[e] = x[e] < 0 ? 0.0f : x[e]; /* a NaN stays NaN */
#ifdef TB_RELU_LETS_THROUGH
        /* planted bug (the edge-value conformance tests): this negative value passes unchanged */
        for (int64_t e = 0; e < n; ++e)
            if (x[e] == (float)(TB_RELU_LETS_THROUGH)) y[e] = x[e];
#endif
        break;
    }
    case OP_MATMUL: {
        int64_t K = inputs[1].shape[0], N = inputs[1].shape[1], rows = N ? n / N : 0;
        if ((uint64_t)N * sizeof(float) > workspace_nbytes || (N && !workspace))
            return fail(NNP_STATUS_INVALID_ARGUMENT, "MatMul: workspace of %llu bytes is too small",
                        (unsigned long long)workspace_nbytes);
        float *acc = (float *)tb_addr(workspace, 0, (uint64_t)N * sizeof(float));
        if (!acc) return NNP_STATUS_INVALID_ARGUMENT;
        const float *A = (const float *)a, *B = (const float *)b;
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < N; ++j) acc[j] = 0.0f;
            for (int64_t kk = 0; kk < K; ++kk) {
                float av = A[r * K + kk];
                for (int64_t j = 0; j < N; ++j) acc[j] += av * B[kk * N + j];
            }
            memcpy(y + r * N, acc, (size_t)N * sizeof(float));
        }
        break;
    }
    case OP_RESHAPE: memcpy(out, a, (size_t)((uint64_t)n * esize)); break;
    default: return fail(NNP_STATUS_INTERNAL, "unknown op");
    }
    return NNP_OK;
}

static nnp_status tb_run_steps(const nnp_step *steps, int32_t num_steps, void *const *slots,
                               int32_t num_slots, void *ws, uint64_t wsn, nnp_stream stream,
                               int32_t *failed)
{
    BUMP(ST_RUN_STEPS, 1);
    return nnp_run_steps_default(tb_kernel_run, steps, num_steps, slots, num_slots, ws, wsn, stream,
                                 failed);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */
static nnp_status tb_init(const nnp_init_options *opts)
{
    if (TB_INIT_FAIL)
        return fail(NNP_STATUS_DEVICE_ERROR,
                    "testdev device /dev/nnptest0 is missing; load the nnptest driver");
    if (!opts || opts->struct_size < sizeof(nnp_init_options))
        return fail(NNP_STATUS_INVALID_ARGUMENT, "init: options too small");
    BUMP(ST_INIT, 1);
    tb_counters[ST_THREADS] = opts->num_threads;
    tb_host_flags = NNP_INIT_HAS(opts, host_flags) ? opts->host_flags : 0;
    tb_counters[ST_HOST_FLAGS] = tb_host_flags;
    return NNP_OK;
}

static void tb_shutdown(void)
{
    BUMP(ST_SHUTDOWN, 1);
}

static nnp_status tb_set_num_threads(int32_t n)
{
    if (n < 0) return fail(NNP_STATUS_INVALID_ARGUMENT, "set_num_threads: %d < 0", n);
    tb_counters[ST_THREADS] = n;
    return NNP_OK;
}

#if TB_STRINGS == 1
static void tb_release_strings(nnp_string *items, uint64_t count)
{
    for (uint64_t i = 0; items && i < count; ++i)
        if (items[i].data) {
            free((void *)items[i].data);
            items[i].data = NULL;
            BUMP(ST_STRINGS_LIVE, -1);
        }
}
#endif

/* The host's alloc, counted: tb_run_dynamic passes it with the host's own in `user`. */
typedef struct tb_counted_alloc {
    nnp_output_alloc alloc;
    void *user;
} tb_counted_alloc;

static nnp_status tb_count_alloc(void *user, int32_t value, nnp_tensor *tensor)
{
    const tb_counted_alloc *host = (const tb_counted_alloc *)user;
    BUMP(ST_OUTPUT_ALLOC, 1);
    return host->alloc ? host->alloc(host->user, value, tensor) : NNP_STATUS_OUT_OF_MEMORY;
}

static nnp_status tb_run_dynamic_counted(const nnp_dynamic_plan *plan, nnp_dynamic_run *run);

static nnp_status tb_run_dynamic(const nnp_dynamic_plan *plan, nnp_dynamic_run *run)
{
    /* every call of the host's alloc counted, the rest of the run as the host gave it */
    tb_counted_alloc host = {run->alloc, run->user};
    nnp_dynamic_run counted = *run;
    counted.alloc = tb_count_alloc;
    counted.user = &host;
    nnp_status rc = tb_run_dynamic_counted(plan, &counted);
    run->failed_step = counted.failed_step;
    run->failed_value = counted.failed_value;
    run->failure = counted.failure;
    return rc;
}

static nnp_status tb_run_dynamic_counted(const nnp_dynamic_plan *plan, nnp_dynamic_run *run)
{
    BUMP(ST_RUN_DYNAMIC, 1);
#if TB_ASK_EVERY_OUTPUT
    for (int32_t v = 0; v < plan->num_values; ++v)
        if (plan->value_kinds[v] == NNP_VALUE_OUTPUT) run->values[v].data = NULL;
#endif
#if TB_UNCHECKED_RUN_DYNAMIC
    /* a run_dynamic that breaks its contract: the plan's expected shapes left out, so what the
     * kernels report goes unchecked to the host's allocator */
    int32_t *unknown = malloc((size_t)(plan->num_values ? plan->num_values : 1) * sizeof *unknown);
    if (!unknown) return fail(NNP_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int32_t v = 0; v < plan->num_values; ++v) unknown[v] = -1;
    nnp_dynamic_plan blind = *plan;
    blind.expect_ndims = unknown;
    nnp_status rc =
        nnp_run_dynamic_default(tb_kernel_run, tb_output_shapes, tb_workspace_size, &blind, run);
    free(unknown);
    return rc;
#else
    return nnp_run_dynamic_default(tb_kernel_run, tb_output_shapes, tb_workspace_size, plan, run);
#endif
}

static const nnp_backend_v1 tb_table = {
    {TB_ABI_MAJOR, TB_ABI_MINOR, NNP_BACKEND_ABI_PATCH},
    (uint32_t)TB_STRUCT_SIZE,
    (TB_HOST_VISIBLE ? NNP_BACKEND_HOST_VISIBLE : 0) |
        (TB_OWN_CONSTANTS ? NNP_BACKEND_KERNELS_OWN_CONSTANTS : 0),
    TB_ID,
    "0.1.0",
    TB_DEVICE_TYPE,
    TB_HOST_VISIBLE ? NULL : TB_DEVICE_NAME,
    tb_init,
    tb_shutdown,
    tb_last_error,
    tb_set_num_threads,
    tb_get_attr,
    tb_set_device,
    tb_alloc_data_space,
    tb_free_data_space,
    TB_HOST_VISIBLE ? NULL : tb_alloc_workspace,
    TB_HOST_VISIBLE ? NULL : tb_free_workspace,
    tb_copy,
    TB_HOST_VISIBLE ? NULL : tb_create_stream,
    TB_HOST_VISIBLE ? NULL : tb_free_stream,
    TB_HOST_VISIBLE ? NULL : tb_set_stream,
    TB_HOST_VISIBLE ? NULL : tb_stream_sync,
    TB_HOST_VISIBLE ? NULL : tb_sync_from_to,
    tb_supports,
    tb_fuse,
    tb_kernel_create,
    tb_kernel_destroy,
    tb_output_shapes,
    tb_workspace_size,
    tb_kernel_run,
    TB_RUN_STEPS ? tb_run_steps : NULL,
    NULL, /* set_profile_hook (ABI 1.1): the host times whole kernels */
    TB_TARGET_ATTRS, /* target_attrs (ABI 1.2) */
#if TB_FOR_TARGET
    tb_kernel_create_for_target,
#else
    NULL, /* kernel_create_for_target (ABI 1.2) */
#endif
#if TB_STRINGS == 1
    tb_release_strings, /* release_strings (ABI 1.3) */
#else
    NULL, /* release_strings (ABI 1.3): no string tensors */
#endif
    NULL, /* supports_fused (ABI 1.4): nodes are claimed one by one */
    TB_PRIORITY,       /* priority (ABI 1.5) */
    TB_PROVIDER_NAMES, /* provider_names (ABI 1.5) */
    TB_RUN_DYNAMIC ? tb_run_dynamic : NULL, /* run_dynamic (ABI 1.6) */
};

#ifdef TB_HOSTILE
#include "hostile_string.h"

static nnp_backend_v1 tb_hostile_table;

static int tb_env_is(const char *name, const char *value)
{
    const char *v = getenv(name);
    return v && strcmp(v, value) == 0;
}

__attribute__((constructor)) static void tb_constructor(void)
{
    if (tb_env_is("TB_CRASH", "ctor_abort")) abort();
}

static const nnp_backend_v1 *tb_hostile_entry(const nnp_version *host_abi)
{
    if (tb_env_is("TB_CRASH", "entry_segv"))
        *(volatile int *)(uintptr_t)host_abi->patch = 1; /* patch is 0: a write to address 0 */
    if (tb_env_is("TB_CRASH", "entry_abort")) abort();
    const char *kind = getenv("TB_HOSTILE_KIND");
    const char *s = hostile_string(kind ? atoi(kind) : 0);
    tb_hostile_table = tb_table;
    if (tb_env_is("TB_HOSTILE_FIELD", "id")) tb_hostile_table.id = s;
    if (tb_env_is("TB_HOSTILE_FIELD", "version")) tb_hostile_table.version = s;
    if (tb_env_is("TB_HOSTILE_FIELD", "device_type_name")) tb_hostile_table.device_type_name = s;
    return &tb_hostile_table;
}
#endif

#ifdef TB_CTOR_ABORT
__attribute__((constructor)) static void tb_ctor_abort(void)
{
    abort();
}
#endif

NNP_EXPORT const nnp_backend_v1 *nnp_backend_entry(const nnp_version *host_abi)
{
    if (!host_abi) return NULL;
#ifdef TB_ENTRY_SEGV
    *(volatile int *)(uintptr_t)host_abi->patch = 1; /* patch is 0: a write to address 0 */
#endif
#ifdef TB_HOSTILE
    return tb_hostile_entry(host_abi);
#else
    return &tb_table;
#endif
}