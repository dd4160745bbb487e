/*
 * nnplug/custom_op.h -- the ABI of native nnplug custom operators (after RKNN's rknn_custom_op).
 *
 * A custom-op library is a shared object exporting ONE C symbol:
 *
 *     NNP_EXPORT const nnp_op_library* nnp_custom_op_entry(const nnp_version* host_abi);
 *
 * returning a pointer to a static, constant nnp_op_library that lists one or more nnp_custom_op
 * structs (one per op type and target: a CPU and a GPU implementation of the same op type are
 * two structs). It may return NULL to refuse a host it cannot work with. The entry must not
 * allocate or start threads.
 *
 * Build (Linux):
 *     cc -O2 -fPIC -shared -fvisibility=hidden -pthread \
 *        -I"$(python -c 'import nnplug; print(nnplug.get_include())')" \
 *        my_op.c -o libnnplug_op_myop.so
 * then either put the file in a folder on NNPLUG_CUSTOM_OP_PATH (or in the `ops/` folder beside
 * the installed nnplug package; only files named libnnplug_op_*.so are loaded), call
 * rt.register_custom_ops_library(path), or advertise it through a `nnplug.ops` entry point.
 * Op libraries need no OpenCL headers or libraries: OpenCL handles are plain pointers here and
 * the host hands GPU ops the few OpenCL entry points they need (nnp_cl_api).
 *
 * VERSIONING (see nnplug/common.h)
 * - nnp_op_library and every nnp_custom_op start with their ABI version {NNP_CUSTOM_OP_ABI_MAJOR,
 *   _MINOR, _PATCH} as compiled, then struct_size = sizeof(...) as compiled. The host loads an op
 *   iff major == host major and minor <= host minor, and reads each struct only up to its
 *   struct_size (later members count as NULL / 0).
 * - nnp_op_context grows only at the end; its struct_size tells the op how much the host filled.
 * - nnp_op_tensor is passed in arrays, so it never changes within a major version.
 *
 * LIFECYCLE (per node of a loaded network that the op runs)
 * - shape_infer (OPTIONAL) : output shapes and dtypes from the input shapes and the attributes.
 *                            Called when the model is loaded, and at run time when an input
 *                            shape differs from the one seen at load (symbolic dimensions).
 *                            A pure function: no priv_data, no device work.
 * - init    : once, when the op is bound to the node while the network is loaded. Tensor attrs
 *             are the load-time shapes (-1 for a dimension unknown until run time); mem is
 *             empty. Return NNP_OP_SKIP to decline the node: the host then uses a backend's own
 *             kernel (or another target), and calls nothing else for this node; free anything
 *             allocated before returning it. Any other non-zero value fails the load.
 * - prepare : before every compute, with the actual tensors (e.g. to set OpenCL kernel args or
 *             size scratch memory).
 * - compute : every run, with the actual tensors: read the inputs, write the outputs.
 * - compute_native : RESERVED, must be NULL (the host refuses ops that set it).
 * - destroy : once, when the network is closed or garbage-collected (also at interpreter
 *             exit); free priv_data here. Not called after init failed or returned NNP_OP_SKIP.
 * Every callback returns 0 on success. Any other value (except NNP_OP_SKIP from init) makes the
 * host raise nnplug.CustomOpError naming the op, the node and the callback, with the message set
 * by ctx->set_error; the runtime and the network stay usable.
 *
 * THREADS: a network may run from many threads. The host never runs two callbacks of the SAME
 * node at once (it holds a per-node lock from prepare through compute), so priv_data needs no
 * lock; different nodes of the same op type may run concurrently. A CPU op may start its own
 * worker threads inside compute (ctx->num_threads says how many cores to use).
 *
 * TENSORS: float32 (and int64 where the model's types are int64), compact row-major in the
 * model's own layout ("NCHW" for 4-D images). For the CPU target mem.base is a host pointer and
 * the data starts at (char*)mem.base + mem.offset. For the GPU target mem.base is the cl_mem
 * buffer and mem.offset the byte offset of the data inside it (pass it to the kernel).
 * Outputs are allocated by the host with the shapes from shape_infer (or from the model) and
 * never alias inputs.
 */
#ifndef NNPLUG_CUSTOM_OP_H_
#define NNPLUG_CUSTOM_OP_H_

#include "nnplug/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NNP_CUSTOM_OP_ABI_MAJOR 1
#define NNP_CUSTOM_OP_ABI_MINOR 1 /* 1.1: nnp_custom_op.flags (NNP_OP_OVERRIDES_STANDARD) */
#define NNP_CUSTOM_OP_ABI_PATCH 0

/* The one symbol the host looks up. */
#define NNP_CUSTOM_OP_ENTRY_SYMBOL "nnp_custom_op_entry"

/* Largest tensor rank passed to an op. */
#define NNP_OP_MAX_DIMS 16

/* Returned by init to decline a node (RKNN's "skip custom op" code): not an error. */
#define NNP_OP_SKIP (-1)

/* nnp_custom_op.flags (ABI 1.1) */
enum {
    /* op_type is a standard ONNX op (e.g. "ArgMax") and this op replaces the backends' kernel
     * for its nodes, ai.onnx ones included (unless the Runtime disables op overrides). Without
     * it a library whose op_type names a standard op fails to load ("invalid op"), as a Python
     * op needs override=True: an op must not take standard nodes by accident of its name. */
    NNP_OP_OVERRIDES_STANDARD = 1u << 0
};

/* nnp_custom_op.target / nnp_op_context.target */
enum {
    NNP_OP_TARGET_CPU = 1, /* runs on the host, on backends whose device is the CPU (or alone) */
    NNP_OP_TARGET_GPU = 2  /* an OpenCL kernel, on the backend whose device type is OpenCL */
};

/* nnp_op_tensor_attr.layout */
enum {
    NNP_OP_LAYOUT_UNDEFINED = 0,
    NNP_OP_LAYOUT_NCHW = 1 /* compact row-major as in the ONNX model (NCHW for 4-D) */
};

/* OpenCL handles, as plain pointers (cast them to cl_context etc. when using CL/cl.h). */
typedef void *nnp_cl_platform_id;
typedef void *nnp_cl_device_id;
typedef void *nnp_cl_context;
typedef void *nnp_cl_command_queue;
typedef void *nnp_cl_kernel;
typedef void *nnp_cl_mem;
typedef void *nnp_cl_event;

/* The OpenCL entry points the host resolved (from libOpenCL.so.1), with OpenCL's own
 * signatures (cl_int = int32_t, cl_uint = uint32_t). GPU ops may call these instead of linking
 * libOpenCL themselves. */
typedef struct nnp_cl_api {
    uint32_t struct_size;
    int32_t (*clSetKernelArg)(nnp_cl_kernel kernel, uint32_t arg_index, size_t arg_size,
                              const void *arg_value);
    int32_t (*clEnqueueNDRangeKernel)(nnp_cl_command_queue queue, nnp_cl_kernel kernel,
                                      uint32_t work_dim, const size_t *global_work_offset,
                                      const size_t *global_work_size, const size_t *local_work_size,
                                      uint32_t num_events_in_wait_list,
                                      const nnp_cl_event *event_wait_list, nnp_cl_event *event);
    int32_t (*clFinish)(nnp_cl_command_queue queue);
    int32_t (*clGetKernelWorkGroupInfo)(nnp_cl_kernel kernel, nnp_cl_device_id device,
                                        uint32_t param_name, size_t param_value_size,
                                        void *param_value, size_t *param_value_size_ret);
    int32_t (*clGetDeviceInfo)(nnp_cl_device_id device, uint32_t param_name,
                               size_t param_value_size, void *param_value,
                               size_t *param_value_size_ret);
} nnp_cl_api;

/* A tensor's description (as RKNN's rknn_tensor_attr). */
typedef struct nnp_op_tensor_attr {
    const char *name;               /* the ONNX value name */
    uint32_t n_dims;                /* rank, <= NNP_OP_MAX_DIMS (0 for scalars) */
    int64_t dims[NNP_OP_MAX_DIMS];  /* n_dims entries; -1 for a dimension unknown at load time */
    uint64_t n_elems;               /* product of dims (0 when a dimension is unknown) */
    uint64_t size;                  /* bytes: n_elems * element size */
    nnp_dtype dtype;                /* {NNP_DTYPE_FLOAT, 32, 1}, {NNP_DTYPE_INT, 64, 1}, ... */
    int32_t layout;                 /* NNP_OP_LAYOUT_* */
} nnp_op_tensor_attr;

/* Where a tensor's data is. Effective address = base + offset (see TENSORS above). */
typedef struct nnp_op_mem {
    void *base;      /* host pointer (CPU target) or cl_mem (GPU target); NULL during init */
    uint64_t offset; /* bytes from base to the first element */
    uint64_t size;   /* bytes of tensor data from base + offset */
} nnp_op_mem;

typedef struct nnp_op_tensor {
    nnp_op_tensor_attr attr;
    nnp_op_mem mem;
} nnp_op_tensor;

typedef struct nnp_op_context nnp_op_context;

/* What every callback receives. Filled by the host; the op may only write priv_data. */
struct nnp_op_context {
    uint32_t struct_size; /* bytes the host filled (>= the size the op was compiled with) */
    int32_t target;       /* NNP_OP_TARGET_* this node runs on */
    const char *op_type;  /* the op type as registered */
    const char *node_name;
    int32_t num_threads;  /* CPU cores the op may use in one compute (>= 1) */

  /* GPU target only (NULL for CPU): the backend's OpenCL objects. The queue is the one the
     * backend's own kernels use; the host waits for it after compute. `cl_kernel` is built from
     * the op's cl_kernel_source / cl_kernel_name, one per node (so its args are this node's). */
    nnp_cl_platform_id cl_platform;
    nnp_cl_device_id cl_device;
    nnp_cl_context cl_context;
    nnp_cl_command_queue cl_command_queue;
    nnp_cl_kernel cl_kernel;
    const nnp_cl_api *cl; /* OpenCL entry points (NULL for CPU) */

    void *priv_data; /* owned by the op: set it in init, free it in destroy */

  /* Read the node attribute `name` (RKNN's rknn_custom_op_get_op_attr). Fills *out (type,
     * dtype, count, data, ...; see nnp_attr in common.h) and returns NNP_OK, or
     * NNP_STATUS_INVALID_ARGUMENT when the node has no such attribute (*out then has type
     * NNP_ATTR_UNDEFINED, count 0, data NULL). The data stays valid until destroy. */
    nnp_status (*get_attr)(const nnp_op_context *ctx, const char *name, nnp_attr *out);
    /* Record the message the host puts in the CustomOpError when this callback fails. */
    void (*set_error)(const nnp_op_context *ctx, const char *message);

    void *host_data; /* the host's; do not touch */
};

typedef int32_t (*nnp_op_callback)(nnp_op_context *ctx, const nnp_op_tensor *inputs,
                                   uint32_t n_inputs, const nnp_op_tensor *outputs,
                                   uint32_t n_outputs);

/* One op type on one target (as RKNN's rknn_custom_op). Static, constant. */
typedef struct nnp_custom_op {
    nnp_version version;  /* FIRST: {NNP_CUSTOM_OP_ABI_MAJOR, _MINOR, _PATCH} as compiled */
    uint32_t struct_size; /* sizeof(nnp_custom_op) as compiled */
    int32_t target;       /* NNP_OP_TARGET_CPU or NNP_OP_TARGET_GPU */
    const char *
        op_type;  /* matched whatever (custom) domain the model's node uses. A standard
                   ONNX op type (e.g. "ArgMax") needs NNP_OP_OVERRIDES_STANDARD in
                   flags, and then overrides the backends' kernel for it. At most NNP_MAX_NAME_BYTES bytes (see common.h), as is cl_kernel_name */

  /* GPU target only. */
    const char *cl_kernel_name;   /* the __kernel function to create */
    const char *cl_kernel_source; /* the OpenCL C source text when cl_source_size > 0; when 0, the
                                     path of a .cl file (relative: to the library's folder) */
    uint64_t cl_source_size;      /* bytes of source text, or 0 (see above); at most
                                     NNP_MAX_CL_SOURCE_BYTES */
    const char
        *cl_build_options; /* clBuildProgram options, e.g. "-cl-fast-relaxed-math"; or NULL */

  /* Callbacks (see LIFECYCLE). compute is REQUIRED; init, prepare, destroy OPTIONAL. */
    nnp_op_callback init;
    nnp_op_callback prepare;
    nnp_op_callback compute;
    void *compute_native; /* RESERVED: must be NULL */
    int32_t (*destroy)(nnp_op_context *ctx);

    /* OPTIONAL. Fill each output's attr.n_dims, attr.dims and attr.dtype from the inputs' attrs
     * (the host computes n_elems, size and layout). mem is empty. NULL: the op keeps the output
     * shapes of the standard ONNX op it overrides, or those the model declares. */
    int32_t (*shape_infer)(nnp_op_context *ctx, const nnp_op_tensor *inputs, uint32_t n_inputs,
                           nnp_op_tensor *outputs, uint32_t n_outputs);

    /* ---- since ABI 1.1 ----------------------------------------------------------------- */
    uint32_t
        flags; /* NNP_OP_* bits; read only from ops of ABI >= 1.1 whose struct_size covers it */
} nnp_custom_op;

/* What the entry returns. Static, constant, valid while the library is loaded. */
typedef struct nnp_op_library {
    nnp_version abi_version;         /* FIRST: as nnp_custom_op.version */
    uint32_t struct_size;            /* sizeof(nnp_op_library) as compiled */
    const char *name;                /* the library's name for messages (e.g. "softmax"); or NULL;
                                        at most NNP_MAX_NAME_BYTES bytes */
    int32_t num_ops;                 /* >= 1 */
    const nnp_custom_op *const *ops; /* num_ops pointers */
} nnp_op_library;

/* The entry symbol every op library defines (with NNP_EXPORT). */
NNP_EXPORT const nnp_op_library *nnp_custom_op_entry(const nnp_version *host_abi);

/* Helpers. */

/* The effective host address of a CPU tensor's data. */
static inline void *nnp_op_tensor_data(const nnp_op_tensor *t)
{
    return t->mem.base ? (void *)((char *)t->mem.base + t->mem.offset) : NULL;
}

/* 1 when a dtype is float32 / int64. */
static inline int nnp_op_is_f32(nnp_dtype t)
{
    return t.code == NNP_DTYPE_FLOAT && t.bits == 32 && t.lanes <= 1;
}
static inline int nnp_op_is_i64(nnp_dtype t)
{
    return t.code == NNP_DTYPE_INT && t.bits == 64 && t.lanes <= 1;
}

/* An INT attribute, or `fallback` when the node does not have it (or it is not an int). */
static inline int64_t nnp_op_attr_int(const nnp_op_context *ctx, const char *name, int64_t fallback)
{
    nnp_attr a;
    if (ctx->get_attr(ctx, name, &a) != NNP_OK || a.type != NNP_ATTR_INT || a.count != 1 || !a.data)
        return fallback;
    return *(const int64_t *)a.data;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NNPLUG_CUSTOM_OP_H_ */
