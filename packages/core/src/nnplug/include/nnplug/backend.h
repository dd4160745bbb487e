/*
 * nnplug/backend.h -- the ABI of native (dynamic) nnplug backends.
 *
 * A backend is a shared object exporting ONE C symbol:
 *
 *     NNP_EXPORT const nnp_backend_v1* nnp_backend_entry(const nnp_version* host_abi);
 *
 * returning a pointer to a static, constant function table (nnp_backend_v1) that lives as long
 * as the library is loaded. The host passes its own ABI version; the entry may return NULL to
 * refuse a host it cannot work with (reported as an "abi version" failure). The entry must not
 * allocate or start threads: do that in init().
 *
 * Build (Linux):
 *     cc -O2 -fPIC -shared -fvisibility=hidden \
 *        -I"$(python -c 'import nnplug; print(nnplug.get_include())')" \
 *        my_backend.c -o libnnplug_mybackend.so
 * and put the .so in a folder on NNPLUG_BACKEND_PATH (or in the `backends/` folder beside the
 * installed nnplug package), or advertise it through a `nnplug.backends` entry point.
 * Check with `nnplug doctor`.
 *
 * VERSIONING (see also nnplug/common.h)
 * - The table starts with abi_version = {NNP_BACKEND_ABI_MAJOR, NNP_BACKEND_ABI_MINOR,
 *   NNP_BACKEND_ABI_PATCH} as the backend was compiled, then struct_size =
 *   sizeof(nnp_backend_v1) as the backend was compiled.
 * - The host loads the backend iff abi_version.major == host major and abi_version.minor <=
 *   host minor. Newer minors only append members at the end of nnp_backend_v1 (and of the
 *   other structs); the host reads the table only up to struct_size and treats entries beyond
 *   it as NULL.
 * - A backend may leave any entry marked OPTIONAL as NULL; the host then uses the documented
 *   fallback. REQUIRED entries left NULL make the backend fail to load ("invalid table").
 *
 * LIFECYCLE AND THREADS
 * - The host dlopen()s the library (RTLD_LOCAL) once per process however many Runtimes use it,
 *   calls the entry, checks the table, then calls init() once. After the last Runtime and the
 *   last network using the backend are closed it calls shutdown() once and dlclose()s it.
 * - init() and shutdown() are never called concurrently with anything else.
 * - Every other entry may be called from many threads at once and must be thread-safe.
 *   In particular kernel_run()/run_steps() on the SAME kernel run concurrently with distinct
 *   inputs, outputs and workspaces: kernels must be immutable after kernel_create (keep
 *   per-call scratch in the workspace or on the stack, not in the kernel).
 *
 * ERRORS
 * - Every call returns nnp_status. On failure the backend records a message for the calling
 *   thread (thread-local) that last_error() returns until the next failing call on that thread.
 *   Messages should say what was wrong and, where possible, how to fix it. The host raises
 *   nnplug.BackendError carrying this text and the node name.
 *
 * HOW THE HOST RUNS A PARTITION
 * - At load time, for each node: supports(). Consecutive supported nodes form a partition.
 *   Within a partition the host offers each run of consecutive nodes to fuse() (64 nodes first;
 *   twice as many while fuse() takes all it is offered) and creates one kernel per group with
 *   kernel_create(), which sees the constant inputs (const_data) so it can pre-pack weights
 *   once. A group ends where a value made in it is needed after it.
 * - Static shapes (every value shape known at load): the host plans once. All intermediate
 *   values get fixed byte offsets in one arena; each kernel call becomes an nnp_step whose
 *   tensors refer to "slots" (arena, partition inputs, partition outputs) by index. Each run
 *   then is ONE call: run_steps(steps, slots) with fresh slot pointers. Backends without
 *   run_steps get one kernel_run() call per step.
 * - Dynamic shapes (a dimension unknown at load, e.g. a symbolic batch or a Reshape whose shape
 *   is computed at run time): per run and per kernel the host calls kernel_output_shapes() with
 *   the actual inputs, allocates the outputs and calls kernel_run(). A backend with
 *   run_dynamic (ABI 1.6) gets the whole sequence in ONE call instead: it asks the shapes,
 *   allocates the values made and read inside the partition itself and the partition's
 *   outputs through a host callback (nnp_dynamic_run), so a run costs no host work per kernel.
 * - Kernel inputs: for a group of nodes, every input of every node in order (node order, then
 *   input order) except values produced inside the group; duplicates are kept, so for a single
 *   node the kernel inputs are exactly the node's inputs. An omitted optional input is passed
 *   as a tensor with data == NULL, ndim == 0 and dtype {0,0,0}. Kernel outputs: the outputs of
 *   the LAST node of the group, in order (an omitted optional output has data == NULL). Values
 *   produced inside a group are never needed outside it (the host ensures that).
 * - Constant inputs are passed at run time too (data points to device memory holding the
 *   constant), unless the backend sets NNP_BACKEND_KERNELS_OWN_CONSTANTS: then their data is
 *   NULL at run time and the host keeps no device copy.
 * - Outputs never alias inputs. All tensors passed are compact (strides == NULL).
 *
 * STRING TENSORS (ABI 1.3)
 * - ONNX string tensors have dtype {NNP_DTYPE_STRING, 128, 1}: arrays of nnp_string
 *   (nnplug/common.h) in host memory. The host offers a node that reads or writes strings only
 *   to backends with NNP_BACKEND_HOST_VISIBLE, an ABI >= 1.3 table and release_strings; other
 *   backends never see one (their supports() is not asked).
 * - Such a node is a partition of its own, run through kernel_output_shapes (when an output
 *   shape is not known at load) and kernel_run, never through run_steps; a string value is
 *   never an intermediate inside a kernel group or an arena. A backend of ABI >= 1.7 with
 *   run_dynamic gets such a partition (one step) in run_dynamic: its string values are INPUT
 *   and OUTPUT values only, a string OUTPUT's alloc gives the zeroed elements, and the rest is
 *   as below.
 * - Input and constant strings belong to the host (valid during the call). For a string OUTPUT
 *   the host passes an array of zeroed nnp_string elements; kernel_run sets each one to bytes
 *   the backend allocated (data NULL is allowed for size 0). After the call, successful or
 *   not, the host copies the text and calls release_strings on that array, so a failing
 *   kernel may leave elements it filled. The host checks every element (readable memory, at
 *   most NNP_MAX_STRING_BYTES, UTF-8) and fails the run naming the node otherwise.
 */
#ifndef NNPLUG_BACKEND_H_
#define NNPLUG_BACKEND_H_

#include <stdlib.h> /* malloc, free: nnp_run_steps_default, nnp_run_dynamic_default */
#include <string.h> /* memset, memcmp: nnp_run_dynamic_default */

#include "nnplug/common.h"

#ifdef __cplusplus
extern "C" {
#endif

// clang-format off: one line per number (nnplug_conformance reads them)
#define NNP_BACKEND_ABI_MAJOR 1
#define NNP_BACKEND_ABI_MINOR 8 /* 1.1: set_profile_hook; 1.2: target_attrs, kernel_create_for_target;
                                   1.3: string tensors, release_strings; 1.4: supports_fused;
                                   1.5: priority, provider_names; 1.6: run_dynamic;
                                   1.7: run_dynamic also runs string partitions;
                                   1.8: init options' host_flags */
#define NNP_BACKEND_ABI_PATCH 1 /* 1.8.1: the host may preset an OUTPUT's memory (nnp_dynamic_run) */
// clang-format on

/* The one symbol the host looks up. */
#define NNP_BACKEND_ENTRY_SYMBOL "nnp_backend_entry"

/* Longest element of a string output the host accepts (bytes). */
#define NNP_MAX_STRING_BYTES (1u << 30)

/* Largest rank kernel_output_shapes() can report. */
#define NNP_MAX_NDIM 16

/* Ids a backend cannot take (they mean something else to the host). Besides these, an id must
 * be 1-32 characters of [a-z0-9_] starting with a letter. */
#define NNP_RESERVED_BACKEND_IDS \
    "auto", "all", "none", "default", "host", "python", "custom", "op", "nnplug"

/* An opaque kernel: whatever the backend allocates in kernel_create. */
typedef struct nnp_kernel nnp_kernel;

/* A backend-defined stream handle (a queue of device work). NULL is the default stream. */
typedef void *nnp_stream;

/* nnp_backend_v1.flags */
enum {
    /* Data-space handles ARE host pointers to host-readable/writable memory (CPU backends).
     * The host may then use its own host memory as device memory (passing plain pointers),
     * read results without copies and export tensors through DLPack without copying.
     * Backends with device_type NNP_DEVICE_CPU must set it. */
    NNP_BACKEND_HOST_VISIBLE = 1u << 0,
    /* Kernels keep what they need of their constant inputs at kernel_create; at run time
     * constant inputs are passed with data == NULL and the host keeps no device copy. */
    NNP_BACKEND_KERNELS_OWN_CONSTANTS = 1u << 1
};

/* What the host promises (nnp_init_options.host_flags, ABI 1.8). */
enum {
    /* The const_data of each constant input that is not a string tensor, as given to
     * kernel_create or kernel_create_for_target, stays valid and unchanged until that kernel
     * is destroyed: a kernel may keep the pointer (to read at its first run, or to plan again
     * for another shape or thread count) instead of copying the bytes. No alignment beyond the
     * element's is promised. Descriptors given to supports(), supports_fused() and fuse() are
     * still valid during the call only. */
    NNP_HOST_KEEPS_CONSTANTS = 1u << 0
};

/* Options passed to init(). The host fills struct_size = sizeof as it compiled it; a backend
 * reads only members within struct_size (NNP_INIT_HAS(o, member)). */
typedef struct nnp_init_options {
    uint32_t struct_size;
    nnp_version host_abi;  /* the host's backend ABI version */
    int32_t num_threads;   /* worker threads the backend may use for one run; 0: backend's choice
                              (typically the number of usable cores). Several runs may be in
                              flight at once from different host threads. */
    const char *config;    /* backend-specific settings as a JSON object text, or NULL */
    uint32_t host_flags;   /* NNP_HOST_* (ABI 1.8); a host before it sets no such member */
} nnp_init_options;

/* Whether init options o (non-NULL) hold `member`: the host's struct reaches past it. */
#define NNP_INIT_HAS(o, member) \
    ((o)->struct_size >= offsetof(nnp_init_options, member) + sizeof((o)->member))

/* Device attribute kinds for get_attr (TVM's DeviceAttrKind numbers). */
enum {
    NNP_DEVICE_ATTR_EXIST = 0,                       /* int: 1 if the device exists */
    NNP_DEVICE_ATTR_MAX_THREADS_PER_BLOCK = 1,       /* int */
    NNP_DEVICE_ATTR_WARP_SIZE = 2,                   /* int */
    NNP_DEVICE_ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 3, /* int, bytes */
    NNP_DEVICE_ATTR_COMPUTE_VERSION = 4,             /* string, e.g. "3.0" */
    NNP_DEVICE_ATTR_DEVICE_NAME = 5,                 /* string */
    NNP_DEVICE_ATTR_MAX_CLOCK_RATE = 6,              /* int, kHz */
    NNP_DEVICE_ATTR_MULTI_PROCESSOR_COUNT = 7,       /* int (cores for a CPU) */
    NNP_DEVICE_ATTR_MAX_THREAD_DIMENSIONS = 8,       /* string, JSON list e.g. "[1024,1024,64]" */
    NNP_DEVICE_ATTR_API_VERSION = 11,                /* int or string */
    NNP_DEVICE_ATTR_DRIVER_VERSION = 12,             /* string */
    NNP_DEVICE_ATTR_L2_CACHE_SIZE_BYTES = 13,        /* int, bytes */
    NNP_DEVICE_ATTR_TOTAL_GLOBAL_MEMORY = 14,        /* int, bytes */
    NNP_DEVICE_ATTR_AVAILABLE_GLOBAL_MEMORY = 15,    /* int, bytes */
    NNP_DEVICE_ATTR_VENDOR = 16,                     /* string, e.g. "GenuineIntel" (ABI 1.5) */
    NNP_DEVICE_ATTR_DEVICE_CLASS = 17                /* string: "cpu", "gpu", "npu" or
                                                        "accelerator" (ABI 1.5) */
};

/* nnp_attr_value.type */
enum {
    NNP_ATTR_VALUE_NONE = 0,   /* the device cannot tell (not an error) */
    NNP_ATTR_VALUE_INT = 1,    /* in `i` */
    NNP_ATTR_VALUE_STRING = 2  /* in `s`, NUL-terminated, truncated to fit */
};

/* A device attribute's value, filled by get_attr (the host zeroes it before the call). */
typedef struct nnp_attr_value {
    int32_t type; /* NNP_ATTR_VALUE_* */
    int64_t i;
    char s[256];
} nnp_attr_value;

/* copy_data_from_to direction. */
enum {
    NNP_COPY_HOST_TO_DEVICE = 1,  /* from: host pointer; to: data-space handle */
    NNP_COPY_DEVICE_TO_HOST = 2,  /* from: data-space handle; to: host pointer */
    NNP_COPY_DEVICE_TO_DEVICE = 3 /* both data-space handles of this backend */
};

/* One kernel call of a planned sequence (see run_steps). Built once by the host at load time
 * and reused by every run: read-only for the backend. */
typedef struct nnp_step {
    const nnp_kernel *kernel;
    int32_t num_inputs;
    const nnp_tensor *inputs;     /* shapes, dtypes, devices, byte offsets: complete */
    const int32_t *input_slots;   /* per input: slot index, or -1. With a slot s >= 0 the input is
                                     inputs[i] with data replaced by slots[s] (byte_offset is the
                                     offset inside that slot's buffer). With -1 inputs[i] is used
                                     as is (constants; data NULL for omitted inputs and for
                                     constants under NNP_BACKEND_KERNELS_OWN_CONSTANTS). */
    int32_t num_outputs;
    const nnp_tensor *outputs;
    const int32_t *output_slots;  /* as input_slots */
} nnp_step;

/* One node a kernel ran, as reported to a profile hook (see set_profile_hook, ABI 1.1). Valid
 * only during the hook call. */
typedef struct nnp_profile_event {
    uint32_t struct_size;             /* sizeof(nnp_profile_event) as the backend compiled it */
    const char *node_name;            /* the node that ran */
    const char *op_type;              /* its op type */
    int32_t num_fused;                /* nodes folded or fused into it (they ran as part of it) */
    const char *const *fused_names;   /* [num_fused] their names */
    const char *const *fused_op_types; /* [num_fused] their op types */
    int64_t start_ns;                 /* when it started, CLOCK_MONOTONIC nanoseconds */
    int64_t duration_ns;
    int32_t num_inputs;               /* the node's inputs (an omitted one has rank 0) */
    const int32_t *input_ndims;       /* [num_inputs] */
    const int64_t *input_shapes;      /* [num_inputs * NNP_MAX_NDIM]: row i at i * NNP_MAX_NDIM */
    int32_t num_outputs;
    const int32_t *output_ndims;      /* [num_outputs] */
    const int64_t *output_shapes; /* [num_outputs * NNP_MAX_NDIM]: row o at o * NNP_MAX_NDIM */
} nnp_profile_event;

/* ---- dynamic sequences (run_dynamic, ABI 1.6) ----------------------------------------- */
/* What a value of a dynamic sequence is (nnp_dynamic_plan.value_kinds). */
enum {
    NNP_VALUE_INPUT = 0,  /* a partition input: the host sets it before the call */
    NNP_VALUE_TEMP = 1,   /* made and read inside the partition: run_dynamic allocates it (host
                             memory) and frees it after its last reader */
    NNP_VALUE_OUTPUT = 2  /* a partition output: host memory (preset or from alloc), kept */
};

/* One kernel call of a dynamic sequence. Built once by the host at load time and reused by
 * every run: read-only for the backend. Values are numbered; a run holds one nnp_tensor per
 * value (nnp_dynamic_run.values). */
typedef struct nnp_dynamic_step {
    const nnp_kernel *kernel;
    int32_t num_inputs;
    const nnp_tensor *inputs;     /* the tensor of each input whose value index is -1: constants
                                     (as in nnp_step) and omitted inputs; ignored for the others */
    const int32_t *input_values;  /* per input: value index, or -1 */
    int32_t num_outputs;
    const int32_t *output_values; /* per output: value index, or -1 for an omitted output */
    int32_t ask_shapes;           /* 1: call kernel_output_shapes (an output shape is unknown at
                                     load); 0: the run's values hold every output's shape */
    int32_t num_released;
    const int32_t *released;      /* TEMP values whose last reader is this step (or that no step
                                     reads): freed once it has run */
} nnp_dynamic_step;

/* A dynamic sequence and what the model says of its values' shapes. */
typedef struct nnp_dynamic_plan {
    int32_t num_steps;
    const nnp_dynamic_step *steps;
    int32_t num_values;
    const int32_t *value_kinds;  /* [num_values] NNP_VALUE_* */
    const int32_t *expect_ndims; /* [num_values] the rank the model gives, or -1 (unknown) */
    const int64_t *expect_dims;  /* [num_values * NNP_MAX_NDIM] per dim: >= 0 that size, -1 any,
                                    <= -2 the symbol (-2 - dim) of nnp_dynamic_run.symbols */
} nnp_dynamic_plan;

/* Allocates an OUTPUT value: sets tensor->data (host memory) for the shape and dtype given.
 * Returns NNP_OK, or non-zero when it could not (the host knows why). Asked for an OUTPUT the
 * host preset too (its memory is given again when the shape is the preset one). */
typedef nnp_status (*nnp_output_alloc)(void *user, int32_t value, nnp_tensor *tensor);

/* One run of a dynamic sequence: its values and what went wrong. */
typedef struct nnp_dynamic_run {
    nnp_tensor *values;   /* [num_values]: dtype and device of every value; data, ndim and shape
                             row of each INPUT; ndim and row of values whose shape is known at
                             load. run_dynamic fills the rest, and points values[v].shape at
                             row v of `shapes`. An OUTPUT's data is NULL, or (since 1.8.1) host
                             memory the host preset for the ndim and row it gave: run_dynamic
                             writes there, without asking alloc, when the step's shape is that
                             one (the host presets an output whose shape the inputs decide:
                             a decoder's logits and caches); otherwise it asks alloc. A
                             backend that always asks alloc is correct too */
    int64_t *shapes;      /* [num_values * NNP_MAX_NDIM] */
    int64_t *symbols;     /* the size of each symbolic dim in this run, -1 while not known */
    nnp_output_alloc alloc;
    void *user;           /* alloc's first argument */
    nnp_stream stream;
    int32_t failed_step;  /* out: the failing step, or -1 */
    int32_t failed_value; /* out: the value of NNP_DYNAMIC_BAD_SHAPE, NNP_DYNAMIC_NO_MEMORY and
                             NNP_DYNAMIC_ALLOC_FAILED, or -1 */
    int32_t failure;      /* out: NNP_DYNAMIC_* */
} nnp_dynamic_run;

/* nnp_dynamic_run.failure */
enum {
    NNP_DYNAMIC_OK = 0,
    NNP_DYNAMIC_KERNEL = 1,       /* a backend entry failed and recorded its message */
    NNP_DYNAMIC_BAD_SHAPE = 2,    /* kernel_output_shapes gave values[failed_value] a rank or dim
                                     out of range (ndim as given, at most NNP_MAX_NDIM dims in its
                                     row) or a shape that is not the model's */
    NNP_DYNAMIC_NO_MEMORY = 3,    /* allocating failed_value (or a workspace: -1) failed */
    NNP_DYNAMIC_ALLOC_FAILED = 4, /* the host's alloc refused failed_value */
    NNP_DYNAMIC_MALFORMED = 5     /* a step or value index out of range, a dtype of no size */
};

typedef void (*nnp_profile_hook)(void *user, const nnp_profile_event *event);

typedef nnp_status (*nnp_kernel_run_fn)(const nnp_kernel *kernel, const nnp_tensor *inputs,
                                        int32_t num_inputs, const nnp_tensor *outputs,
                                        int32_t num_outputs, void *workspace,
                                        uint64_t workspace_nbytes, nnp_stream stream);

/* The function table. Static, constant, valid while the library is loaded. */
typedef struct nnp_backend_v1 {
    /* ---- identity (read before init) -------------------------------------------------- */
    nnp_version abi_version; /* FIRST: {NNP_BACKEND_ABI_MAJOR, _MINOR, _PATCH} as compiled */
    uint32_t struct_size; /* sizeof(nnp_backend_v1) as compiled */
    uint32_t flags; /* NNP_BACKEND_* bits */
    const char *id; /* REQUIRED. Short unique name, [a-z][a-z0-9_]{0,31}, not one of
                       NNP_RESERVED_BACKEND_IDS. Used in backend preference lists.
                       At most NNP_MAX_ID_BYTES bytes (see common.h). */
    const char *version; /* the backend's own version text, e.g. "0.3.1"; may be NULL.
                            At most NNP_MAX_VERSION_BYTES bytes. */
    int32_t device_type; /* DLPack device type number of the device it runs on, or an
                            extension number >= NNP_DEVICE_EXTENSION_BASE (64) */
    const char *device_type_name; /* name for an extension device type (>= 64), e.g. "mynpu";
                                     NULL for DLPack's own types. At most NNP_MAX_NAME_BYTES.
                                     Backends of one device share the number and the name; a
                                     number or name another plugin registered with a different
                                     partner fails the load ("device type clash"). Choosing a
                                     number: docs/dynamic-backends.md, Extension device types. */

    /* ---- lifecycle --------------------------------------------------------------------- */
    /* OPTIONAL. Called once after loading, before any call below. May fail with a message
     * (e.g. "no OpenCL platform found; install pocl-opencl-icd"): the backend is then not
     * registered and the library is unloaded. */
    nnp_status (*init)(const nnp_init_options *options);
    /* OPTIONAL. Called once before unloading; must release everything. */
    void (*shutdown)(void);
    /* REQUIRED. The calling thread's last error message, or NULL/"" when none. The string is
     * owned by the backend and stays valid until the next call on the same thread. */
    const char *(*last_error)(void);
    /* OPTIONAL. Change the worker thread count for later runs (0: backend's choice). */
    nnp_status (*set_num_threads)(int32_t num_threads);

    /* ---- device API (TVM's DeviceAPI) -------------------------------------------------- */
    /* REQUIRED. Fill *out (zeroed by the host) for attribute `kind` (NNP_DEVICE_ATTR_*).
     * Unknown kinds: leave type NNP_ATTR_VALUE_NONE and return NNP_OK. */
    nnp_status (*get_attr)(nnp_device dev, int32_t kind, nnp_attr_value *out);
    /* OPTIONAL. Make `dev` current for the calling thread. NULL: no-op. */
    nnp_status (*set_device)(nnp_device dev);
    /* REQUIRED. Allocate nbytes (> 0) of device memory aligned to `alignment` bytes (a power of
     * two >= 1). *out receives the handle: a host pointer under NNP_BACKEND_HOST_VISIBLE,
     * otherwise an opaque handle (e.g. cl_mem). type_hint is the element type, or {0,0,0}. */
    nnp_status (*alloc_data_space)(nnp_device dev, uint64_t nbytes, uint64_t alignment,
                                   nnp_dtype type_hint, void **out);
    /* REQUIRED. Free a handle from alloc_data_space. NULL: no-op. */
    nnp_status (*free_data_space)(nnp_device dev, void *handle);
    /* OPTIONAL (both or neither). Scratch memory for kernel workspaces, typically pooled.
     * NULL: the host pools alloc_data_space blocks itself. */
    nnp_status (*alloc_workspace)(nnp_device dev, uint64_t nbytes, nnp_dtype type_hint, void **out);
    nnp_status (*free_workspace)(nnp_device dev, void *handle);
    /* REQUIRED. Copy nbytes from (from + from_offset) to (to + to_offset). `kind` says which
     * side is host memory (NNP_COPY_*); dev_from/dev_to are the devices of each side (host
     * memory is {NNP_DEVICE_CPU, 0}). With stream == NULL the copy is complete on return;
     * otherwise it is queued on `stream` and complete after stream_sync. */
    nnp_status (*copy_data_from_to)(const void *from, uint64_t from_offset, void *to,
                                    uint64_t to_offset, uint64_t nbytes, nnp_device dev_from,
                                    nnp_device dev_to, int32_t kind, nnp_stream stream);
    /* OPTIONAL (all five or none). NULL: the device has one queue and every call completes
     * before it returns. */
    nnp_status (*create_stream)(nnp_device dev, nnp_stream *out);
    nnp_status (*free_stream)(nnp_device dev, nnp_stream stream);
    nnp_status (*set_stream)(nnp_device dev, nnp_stream stream); /* current stream of thread */
    nnp_status (*stream_sync)(nnp_device dev, nnp_stream stream); /* wait for all queued work */
    /* Work queued on `dst` after this call waits for the work queued on `src` before it. */
    nnp_status (*sync_stream_from_to)(nnp_device dev, nnp_stream src, nnp_stream dst);

    /* ---- capabilities ------------------------------------------------------------------ */
    /* REQUIRED. *out_supported = 1 if the backend can run `node` as described (op, domain,
     * opset, attributes, dtypes, ranks; shapes may contain -1), else 0. Must be cheap and must
     * not fail for nodes it does not know: answer 0 (return an error only for a broken call). */
    nnp_status (*supports)(const nnp_node_desc *node, int32_t *out_supported);
    /* OPTIONAL. Given num_nodes >= 1 consecutive supported nodes (in topological order, each
     * consuming only graph values or outputs of earlier nodes), set *out_taken to how many
     * leading nodes (1..num_nodes) ONE kernel created from them would run, e.g. 2 for
     * Conv followed by Relu. NULL: every node is its own kernel. */
    nnp_status (*fuse)(const nnp_node_desc *nodes, int32_t num_nodes, int32_t *out_taken);

    /* ---- kernels ----------------------------------------------------------------------- */
    /* REQUIRED. Create a kernel for `num_nodes` consecutive nodes (1, or what fuse() took)
     * running on `dev`. Constant inputs carry const_data (valid during this call only). The
     * kernel must be immutable afterwards (see threads). */
    nnp_status (*kernel_create)(const nnp_node_desc *nodes, int32_t num_nodes, nnp_device dev,
                                nnp_kernel **out);
    /* REQUIRED. Destroy a kernel; never called while it runs. NULL kernel: no-op. */
    nnp_status (*kernel_destroy)(nnp_kernel *kernel);
    /* OPTIONAL (required to run nodes whose output shapes are not all known at load time).
     * From the actual inputs (data valid, on the device), fill out_ndims[num_outputs] and
     * out_shapes[num_outputs * NNP_MAX_NDIM] (row o starts at o * NNP_MAX_NDIM). Output
     * dtypes are those of the node descriptors. NULL: a node with an output shape unknown at load
     * time (a symbolic batch "N") is declined, even where supports() says 1: it goes to the next
     * backend, with a warning at load naming this backend and the node (nnplug doctor MODEL
     * reports it as a problem). */
    nnp_status (*kernel_output_shapes)(const nnp_kernel *kernel, const nnp_tensor *inputs,
                                       int32_t num_inputs, int32_t num_outputs, int32_t *out_ndims,
                                       int64_t *out_shapes);
    /* OPTIONAL. Scratch bytes kernel_run needs for these tensors (data may be NULL: only shapes
     * and dtypes count). NULL: 0. */
    nnp_status (*kernel_workspace_size)(const nnp_kernel *kernel, const nnp_tensor *inputs,
                                        int32_t num_inputs, const nnp_tensor *outputs,
                                        int32_t num_outputs, uint64_t *out_nbytes);
    /* REQUIRED. Compute the outputs (allocated by the host with the shapes given) from the
     * inputs. workspace: at least the bytes kernel_workspace_size asked for (NULL if 0),
     * exclusive to this call. stream: where to queue the work (NULL: default; with streams the
     * call may return before the work completes). Reentrant. */
    nnp_status (*kernel_run)(const nnp_kernel *kernel, const nnp_tensor *inputs, int32_t num_inputs,
                             const nnp_tensor *outputs, int32_t num_outputs, void *workspace,
                             uint64_t workspace_nbytes, nnp_stream stream);
    /* OPTIONAL. Run a planned sequence of kernel calls, in order, in ONE call: slots[s] is the
     * data pointer (or handle) for tensors whose slot index is s (see nnp_step). The workspace
     * is at least the largest kernel_workspace_size of the steps. NULL: the host calls
     * kernel_run once per step. On failure *out_failed_step (when not NULL) receives the index
     * of the failing step, so the host can name its node. nnp_run_steps_default() below is a
     * correct implementation. */
    nnp_status (*run_steps)(const nnp_step *steps, int32_t num_steps, void *const *slots,
                            int32_t num_slots, void *workspace, uint64_t workspace_nbytes,
                            nnp_stream stream, int32_t *out_failed_step);

    /* ---- since ABI 1.1 ----------------------------------------------------------------- */
    /* OPTIONAL. Per-node timing inside kernels, for profilers. While a hook is set on the
     * calling thread, the kernel_run() and run_steps() calls made on that thread call
     * hook(user, &event) once for every node they ran (fused nodes reported inside the node
     * that ran them), right after it ran. hook == NULL removes it. Thread-local: runs on other
     * threads are not affected. NULL entry: the host times whole kernels only. */
    nnp_status (*set_profile_hook)(nnp_profile_hook hook, void *user);

    /* ---- since ABI 1.2 ----------------------------------------------------------------- */
    /* OPTIONAL. The Target attributes of the backend's target kind (TVM's TargetKind attrs),
     * as the text of a JSON object: one member per attribute, its type and its default, e.g.
     *     "{\"max_num_threads\": {\"type\": \"int\", \"default\": 256},"
     *     " \"fast_math\": {\"type\": \"bool\", \"default\": false}}"
     * "type" is one of "int", "float", "str", "bool", "list", "dict"; "default" must have that
     * type (an int is a float). Names are [a-z][a-z0-9_]{0,63} and not device_id, keys or tag
     * (every kind has those). The host registers them on the kind named after the backend's id,
     * so nnplug.Target('{"kind": "<id>", "max_num_threads": 8}') parses and unknown attributes
     * or wrong types are refused. At most NNP_MAX_TARGET_ATTRS_BYTES bytes. NULL: no attributes
     * of its own. Text that is not such an object fails the load ("invalid table"). The host
     * reads it only from tables of ABI >= 1.2 whose struct_size covers it. */
    const char *target_attrs;
    /* OPTIONAL. kernel_create for the Target the network is loaded for: `target` is that
     * Target's JSON text with every attribute of the backend's kind filled, keys sorted, e.g.
     *     {"device_id": 0, "fast_math": false, "keys": [], "kind": "mynpu",
     *      "max_num_threads": 8, "tag": ""}
     * (valid during the call: copy what the kernel keeps). When set, the host calls it instead
     * of kernel_create (which stays REQUIRED), so kernels see the attributes declared in
     * target_attrs as the user set them. */
    nnp_status (*kernel_create_for_target)(const nnp_node_desc *nodes, int32_t num_nodes,
                                           nnp_device dev, const char *target, nnp_kernel **out);

    /* ---- since ABI 1.3 ----------------------------------------------------------------- */
    /* OPTIONAL. Free the bytes of `count` elements of a string output that kernel_run filled
     * (see STRING TENSORS above); elements with data == NULL are skipped. The host calls it
     * once per string output of every kernel_run, after copying the text. NULL: the backend
     * gets no node that reads or writes string tensors. */
    void (*release_strings)(nnp_string *items, uint64_t count);

    /* ---- since ABI 1.4 ----------------------------------------------------------------- */
    /* OPTIONAL. Nodes the backend runs only together, in one kernel (a node whose output dtype
     * it never holds, folded into the node that reads it). Asked at load time for a node that
     * supports() declined, with `nodes` = that node and the next one in topological order, when
     * that next node is the only reader of the first one's outputs and none of them is a graph
     * output. *out_supported = 1: both nodes are placed on this backend (before any later backend
     * in the preference order is asked), and the host never puts them in different kernels:
     * fuse() must not end a group between them (with optimization below "all" the pair is still
     * one kernel). Also asked before constants are folded, for a DequantizeLinear of constants
     * (a QDQ model's integer weights) and the one node reading it: 1 keeps it unfolded, just
     * before that node, so the kernel sees the integers (with optimization "all" only).
     * NULL: nodes are only ever claimed one by one. */
    nnp_status (*supports_fused)(const nnp_node_desc *nodes, int32_t num_nodes,
                                 int32_t *out_supported);

    /* ---- since ABI 1.5 ----------------------------------------------------------------- */
    /* What the host needs to know to rank this backend among the installed ones; the host
     * itself names no backend. */
    /* Rank in the default backend order (a load or session given no backends): higher first,
     * ties in registration order. 0 (or a table older than 1.5): below every backend that
     * declares one. Guide: 100 for a portable backend that runs nearly every op; above it for
     * one that claims only what it runs faster than those (it then declines the rest to
     * them); below it for one that is slower than the portable backends on the same host. */
    int32_t priority;
    /* onnxruntime execution provider names this backend can stand for, comma-separated, e.g.
     * "DnnlExecutionProvider". A session given one of them uses the backends that declare it
     * (and, for a name of a device type, such as "CPUExecutionProvider", every backend of that
     * device type) in the default order. NULL: none beyond its device type's.
     * At most NNP_MAX_PROVIDER_NAMES_BYTES bytes. */
    const char *provider_names;

    /* ---- since ABI 1.6 ----------------------------------------------------------------- */
    /* OPTIONAL. Run a dynamic sequence (some shape unknown at load) in ONE call: per step, the
     * output shapes (kernel_output_shapes when ask_shapes, checked against the plan's expected
     * ranks, sizes and symbols), the outputs' memory (TEMP: the backend's; OUTPUT: run->alloc),
     * the workspace, kernel_run; TEMP values freed after their last reader, and every TEMP
     * value freed on failure. The host uses it only for backends with NNP_BACKEND_HOST_VISIBLE
     * on the CPU device, for partitions without string values (ABI 1.6; since 1.7 also a
     * string node's partition, see STRING TENSORS above), and when it does not observe each
     * kernel (profiling, a run that may be terminated): then it calls kernels one by one.
     * nnp_run_dynamic_default() below is a correct implementation. NULL: the host calls
     * kernel_output_shapes and kernel_run per kernel, from Python. */
    nnp_status (*run_dynamic)(const nnp_dynamic_plan *plan, nnp_dynamic_run *run);
} nnp_backend_v1;

/* The entry symbol every backend defines (with NNP_EXPORT). */
NNP_EXPORT const nnp_backend_v1 *nnp_backend_entry(const nnp_version *host_abi);

/* Inputs or outputs of one step nnp_run_steps_default resolves on the stack; a larger step's
 * tensors are resolved in memory from malloc (a kernel of many fused nodes has one input per
 * node input). */
#define NNP_RUN_STEPS_MAX_IO 64

/* A run_steps implementation over a kernel_run function: resolves the slots of each step into
 * tensors and calls `run` in order, stopping at the first failure (whose message `run`
 * recorded). Backends may wrap it:
 *   static nnp_status my_run_steps(const nnp_step* s, int32_t n, void* const* slots,
 *                                  int32_t ns, void* ws, uint64_t wsn, nnp_stream st,
 *                                  int32_t* failed)
 *   { return nnp_run_steps_default(my_kernel_run, s, n, slots, ns, ws, wsn, st, failed); }
 * Returns NNP_STATUS_INVALID_ARGUMENT without running anything further when a step is
 * malformed (negative counts, NULL lists) or has a slot index out of range, and
 * NNP_STATUS_OUT_OF_MEMORY when a large step's tensors cannot be allocated (no message is
 * recorded for those: the host checks steps before calling). */
static inline nnp_status nnp_run_steps_default(nnp_kernel_run_fn run, const nnp_step *steps,
                                               int32_t num_steps, void *const *slots,
                                               int32_t num_slots, void *workspace,
                                               uint64_t workspace_nbytes, nnp_stream stream,
                                               int32_t *out_failed_step)
{
    nnp_tensor stack[2 * NNP_RUN_STEPS_MAX_IO];
    for (int32_t s = 0; s < num_steps; ++s) {
        const nnp_step *st = &steps[s];
        if (out_failed_step) *out_failed_step = s;
        if (st->num_inputs < 0 || st->num_outputs < 0 || (st->num_inputs && !st->inputs) ||
            (st->num_outputs && !st->outputs))
            return NNP_STATUS_INVALID_ARGUMENT;
        int32_t total = st->num_inputs + st->num_outputs;
        nnp_tensor *t = total <= 2 * NNP_RUN_STEPS_MAX_IO
                            ? stack
                            : (nnp_tensor *)malloc((size_t)total * sizeof(nnp_tensor));
        if (!t) return NNP_STATUS_OUT_OF_MEMORY;
        nnp_status rc = NNP_STATUS_OK;
        for (int32_t i = 0; i < total && rc == NNP_STATUS_OK; ++i) {
            int is_in = i < st->num_inputs;
            int32_t k = is_in ? i : i - st->num_inputs;
            const int32_t *ids = is_in ? st->input_slots : st->output_slots;
            int32_t slot = ids ? ids[k] : -1;
            t[i] = is_in ? st->inputs[k] : st->outputs[k];
            if (slot >= 0) {
                if (slot >= num_slots || !slots) rc = NNP_STATUS_INVALID_ARGUMENT;
                else t[i].data = slots[slot];
            }
        }
        if (rc == NNP_STATUS_OK)
            rc = run(st->kernel, t, st->num_inputs, t + st->num_inputs, st->num_outputs, workspace,
                     workspace_nbytes, stream);
        if (t != stack) free(t);
        if (rc != NNP_STATUS_OK) return rc;
    }
    if (out_failed_step) *out_failed_step = -1;
    return NNP_STATUS_OK;
}

typedef nnp_status (*nnp_kernel_output_shapes_fn)(const nnp_kernel *kernel,
                                                  const nnp_tensor *inputs, int32_t num_inputs,
                                                  int32_t num_outputs, int32_t *out_ndims,
                                                  int64_t *out_shapes);
typedef nnp_status (*nnp_kernel_workspace_size_fn)(const nnp_kernel *kernel,
                                                   const nnp_tensor *inputs, int32_t num_inputs,
                                                   const nnp_tensor *outputs, int32_t num_outputs,
                                                   uint64_t *out_nbytes);

/* Records what failed in a run and returns `status`. */
static inline nnp_status nnp_dynamic_fail_(nnp_dynamic_run *run, int32_t failure, nnp_status status)
{
    run->failure = failure;
    return status;
}

/* Whether `nd` dims in `dims` fit what the plan expects of value v; binds the symbols they
 * give a size to (after the whole shape fits). */
static inline int nnp_dynamic_shape_fits_(const nnp_dynamic_plan *plan, int64_t *symbols, int32_t v,
                                          int32_t nd, const int64_t *dims)
{
    if (nd < 0 || nd > NNP_MAX_NDIM) return 0;
    for (int32_t d = 0; d < nd; ++d)
        if (dims[d] < 0) return 0;
    int32_t want = plan->expect_ndims ? plan->expect_ndims[v] : -1;
    if (want < 0) return 1;
    if (want != nd) return 0;
    const int64_t *e = plan->expect_dims + (int64_t)v * NNP_MAX_NDIM;
    for (int32_t d = 0; d < nd; ++d) {
        if (e[d] >= 0 && e[d] != dims[d]) return 0;
        if (e[d] <= -2 && symbols[-2 - e[d]] >= 0 && symbols[-2 - e[d]] != dims[d]) return 0;
    }
    for (int32_t d = 0; d < nd; ++d)
        if (e[d] <= -2) symbols[-2 - e[d]] = dims[d];
    return 1;
}

/* Frees every TEMP value of a run still holding memory. */
static inline void nnp_dynamic_free_temps_(const nnp_dynamic_plan *plan, nnp_dynamic_run *run)
{
    for (int32_t v = 0; v < plan->num_values; ++v)
        if (plan->value_kinds[v] == NNP_VALUE_TEMP && run->values[v].data) {
            free(run->values[v].data);
            run->values[v].data = NULL;
        }
}

/* One step of nnp_run_dynamic_default; t holds num_inputs + num_outputs tensors and nd, dims
 * room for num_outputs shapes. */
static inline nnp_status nnp_dynamic_step_(nnp_kernel_run_fn run_fn,
                                           nnp_kernel_output_shapes_fn shapes_fn,
                                           nnp_kernel_workspace_size_fn ws_fn,
                                           const nnp_dynamic_plan *plan, nnp_dynamic_run *run,
                                           const nnp_dynamic_step *st, nnp_tensor *t, int32_t *nd,
                                           int64_t *dims, void **ws, uint64_t *ws_nbytes)
{
    nnp_tensor *tin = t, *tout = t + st->num_inputs;
    for (int32_t i = 0; i < st->num_inputs; ++i) {
        int32_t v = st->input_values ? st->input_values[i] : -1;
        if (v >= plan->num_values)
            return nnp_dynamic_fail_(run, NNP_DYNAMIC_MALFORMED, NNP_STATUS_INVALID_ARGUMENT);
        tin[i] = v < 0 ? st->inputs[i] : run->values[v];
    }
    if (st->ask_shapes) {
        if (!shapes_fn)
            return nnp_dynamic_fail_(run, NNP_DYNAMIC_MALFORMED, NNP_STATUS_INVALID_ARGUMENT);
        nnp_status rc = shapes_fn(st->kernel, tin, st->num_inputs, st->num_outputs, nd, dims);
        if (rc != NNP_STATUS_OK) return nnp_dynamic_fail_(run, NNP_DYNAMIC_KERNEL, rc);
    }
    for (int32_t o = 0; o < st->num_outputs; ++o) {
        int32_t v = st->output_values ? st->output_values[o] : -1;
        if (v >= plan->num_values)
            return nnp_dynamic_fail_(run, NNP_DYNAMIC_MALFORMED, NNP_STATUS_INVALID_ARGUMENT);
        if (v < 0) {
            memset(&tout[o], 0, sizeof tout[o]);
            continue;
        }
        nnp_tensor *val = &run->values[v];
        if (st->ask_shapes) {
            const int64_t *row = dims + (int64_t)o * NNP_MAX_NDIM;
            int32_t n = nd[o] < 0 ? 0 : nd[o] > NNP_MAX_NDIM ? NNP_MAX_NDIM : nd[o];
            /* memory the host preset holds the shape it was preset for, and no other */
            if (val->data &&
                (val->ndim != nd[o] || memcmp(val->shape, row, (size_t)n * sizeof *row)))
                val->data = NULL;
            val->ndim = nd[o];
            for (int32_t d = 0; d < n; ++d) val->shape[d] = row[d];
            if (!nnp_dynamic_shape_fits_(plan, run->symbols, v, nd[o], row)) {
                run->failed_value = v;
                return nnp_dynamic_fail_(run, NNP_DYNAMIC_BAD_SHAPE, NNP_STATUS_SHAPE_ERROR);
            }
        }
        uint64_t item = nnp_dtype_nbytes(val->dtype);
        /* a string value is an OUTPUT (ABI 1.7: the host's zeroed elements) or an INPUT */
        if (!item ||
            (val->dtype.code == NNP_DTYPE_STRING && plan->value_kinds[v] != NNP_VALUE_OUTPUT))
            return nnp_dynamic_fail_(run, NNP_DYNAMIC_MALFORMED, NNP_STATUS_INVALID_ARGUMENT);
        if (plan->value_kinds[v] == NNP_VALUE_OUTPUT) {
            /* the memory the host preset for this shape (ABI 1.8.1), else the host's alloc */
            if (!val->data &&
                (!run->alloc || run->alloc(run->user, v, val) != NNP_STATUS_OK || !val->data)) {
                run->failed_value = v;
                return nnp_dynamic_fail_(run, NNP_DYNAMIC_ALLOC_FAILED, NNP_STATUS_OUT_OF_MEMORY);
            }
        } else {
            uint64_t nbytes = item; /* an overflowing size is refused, never wrapped */
            for (int32_t d = 0; d < val->ndim && nbytes; ++d)
                nbytes = (uint64_t)val->shape[d] > (uint64_t)SIZE_MAX / nbytes
                             ? (uint64_t)SIZE_MAX
                             : nbytes * (uint64_t)val->shape[d];
            val->data = nbytes == (uint64_t)SIZE_MAX ? NULL : malloc(nbytes ? (size_t)nbytes : 1);
            if (!val->data) {
                run->failed_value = v;
                return nnp_dynamic_fail_(run, NNP_DYNAMIC_NO_MEMORY, NNP_STATUS_OUT_OF_MEMORY);
            }
        }
        tout[o] = *val;
    }
    uint64_t need = 0;
    if (ws_fn) {
        nnp_status rc = ws_fn(st->kernel, tin, st->num_inputs, tout, st->num_outputs, &need);
        if (rc != NNP_STATUS_OK) return nnp_dynamic_fail_(run, NNP_DYNAMIC_KERNEL, rc);
    }
    if (need > *ws_nbytes) {
        free(*ws);
        *ws_nbytes = 0;
        *ws = malloc((size_t)need);
        if (!*ws) return nnp_dynamic_fail_(run, NNP_DYNAMIC_NO_MEMORY, NNP_STATUS_OUT_OF_MEMORY);
        *ws_nbytes = need;
    }
    nnp_status rc = run_fn(st->kernel, tin, st->num_inputs, tout, st->num_outputs,
                           need ? *ws : NULL, need, run->stream);
    if (rc != NNP_STATUS_OK) return nnp_dynamic_fail_(run, NNP_DYNAMIC_KERNEL, rc);
    for (int32_t r = 0; r < st->num_released; ++r) {
        int32_t v = st->released[r];
        if (v >= 0 && v < plan->num_values && plan->value_kinds[v] == NNP_VALUE_TEMP) {
            free(run->values[v].data);
            run->values[v].data = NULL;
        }
    }
    return NNP_STATUS_OK;
}

/* A run_dynamic implementation over a backend's kernel entries (shapes_fn is needed by steps
 * with ask_shapes; ws_fn may be NULL). Host memory only. Backends may wrap it:
 *   static nnp_status my_run_dynamic(const nnp_dynamic_plan* p, nnp_dynamic_run* r)
 *   { return nnp_run_dynamic_default(my_kernel_run, my_output_shapes, my_workspace_size, p, r); }
 * On failure run->failure says what failed (no message is recorded beyond the backend
 * entry's own: the host names the node from run->failed_step). */
static inline nnp_status nnp_run_dynamic_default(nnp_kernel_run_fn run_fn,
                                                 nnp_kernel_output_shapes_fn shapes_fn,
                                                 nnp_kernel_workspace_size_fn ws_fn,
                                                 const nnp_dynamic_plan *plan, nnp_dynamic_run *run)
{
    nnp_tensor stack[2 * NNP_RUN_STEPS_MAX_IO];
    int32_t nd_stack[NNP_RUN_STEPS_MAX_IO];
    int64_t dims_stack[NNP_RUN_STEPS_MAX_IO * NNP_MAX_NDIM];
    void *ws = NULL;
    uint64_t ws_nbytes = 0;
    if (!plan || !run || plan->num_steps < 0 || plan->num_values < 0 ||
        (plan->num_steps && !plan->steps) || !plan->value_kinds || !run->values || !run->shapes)
        return NNP_STATUS_INVALID_ARGUMENT;
    run->failed_step = -1;
    run->failed_value = -1;
    run->failure = NNP_DYNAMIC_OK;
    for (int32_t v = 0; v < plan->num_values; ++v) {
        run->values[v].shape = run->shapes + (int64_t)v * NNP_MAX_NDIM;
        if (plan->value_kinds[v] == NNP_VALUE_TEMP) run->values[v].data = NULL;
    }
    nnp_status rc = NNP_STATUS_OK;
    for (int32_t s = 0; s < plan->num_steps && rc == NNP_STATUS_OK; ++s) {
        const nnp_dynamic_step *st = &plan->steps[s];
        run->failed_step = s;
        if (st->num_inputs < 0 || st->num_outputs < 0 || (st->num_inputs && !st->inputs)) {
            run->failure = NNP_DYNAMIC_MALFORMED;
            rc = NNP_STATUS_INVALID_ARGUMENT;
            break;
        }
        int32_t total = st->num_inputs + st->num_outputs;
        int small = total <= 2 * NNP_RUN_STEPS_MAX_IO && st->num_outputs <= NNP_RUN_STEPS_MAX_IO;
        nnp_tensor *t = small ? stack : (nnp_tensor *)malloc((size_t)total * sizeof(nnp_tensor));
        int32_t *nd =
            small ? nd_stack : (int32_t *)malloc((size_t)st->num_outputs * sizeof(int32_t) + 1);
        int64_t *dims =
            small ? dims_stack
                  : (int64_t *)malloc((size_t)st->num_outputs * NNP_MAX_NDIM * sizeof(int64_t) + 1);
        if (!t || !nd || !dims) {
            run->failure = NNP_DYNAMIC_NO_MEMORY;
            rc = NNP_STATUS_OUT_OF_MEMORY;
        } else {
            rc = nnp_dynamic_step_(run_fn, shapes_fn, ws_fn, plan, run, st, t, nd, dims, &ws,
                                   &ws_nbytes);
        }
        if (!small) {
            free(t);
            free(nd);
            free(dims);
        }
    }
    free(ws);
    if (rc != NNP_STATUS_OK) {
        nnp_dynamic_free_temps_(plan, run);
        return rc;
    }
    run->failed_step = -1;
    nnp_dynamic_free_temps_(plan, run); /* TEMP values no step reads after their maker */
    return NNP_STATUS_OK;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NNPLUG_BACKEND_H_ */
