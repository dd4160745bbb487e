/*
 * nnplug/common.h -- types shared by every nnplug native plugin ABI
 * (backends: nnplug/backend.h; custom operators: nnplug/custom_op.h).
 *
 * Self-contained: needs only <stdint.h> and <stddef.h>. Find this folder with
 *     python -c "import nnplug; print(nnplug.get_include())"
 * and compile with  cc -I"$(that folder)" ...
 *
 * VERSIONING RULES (apply to every nnplug ABI header)
 * ---------------------------------------------------
 * - Each ABI has a version {major, minor, patch} (nnp_version), and the struct a plugin hands
 *   to the host starts with that version, so the host can read it before anything else.
 * - The host loads a plugin only if   plugin.major == host.major   and
 *   plugin.minor <= host.minor.  The patch number never affects loading.
 * - A minor release only ADDS: new fields at the END of structs, new enum values, new
 *   status codes. Nothing is removed, reordered or retyped. So a plugin built against an older
 *   minor keeps working with a newer host; the host reads a plugin's function table only up to
 *   the table's struct_size and treats missing trailing entries as NULL (not provided).
 * - Structs the host passes to the plugin (node descriptors, tensors, options) are always
 *   at least as large as the plugin's headers describe, because the plugin's minor is never
 *   newer than the host's.
 * - Anything else (a field removed or changed, a calling convention changed) is a new major:
 *   a new struct name (nnp_backend_v2, ...) and old plugins are refused with a clear message.
 *
 * CONVENTIONS
 * -----------
 * - Every call returns an nnp_status (NNP_OK == 0 on success). On failure the plugin stores a
 *   human-readable message retrievable from the same thread (see last_error in the tables).
 * - Strings are UTF-8, NUL-terminated (the elements of string TENSORS are not: nnp_string).
 *   Pointers handed to a plugin call are valid only during
 *   that call unless stated otherwise: copy what you keep.
 * - Sizes and offsets are in bytes unless stated otherwise; counts are element counts.
 * - A plugin must validate every argument before touching memory and fail with
 *   NNP_STATUS_INVALID_ARGUMENT (plus a message) instead of crashing.
 */
#ifndef NNPLUG_COMMON_H_
#define NNPLUG_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Mark the symbols the host looks up (entry points). Plugins are loaded with RTLD_LOCAL, so
 * building with -fvisibility=hidden and exporting only these is recommended. */
#if defined(_WIN32) || defined(__CYGWIN__)
#define NNP_EXPORT __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define NNP_EXPORT __attribute__((visibility("default")))
#else
#define NNP_EXPORT
#endif

/* ------------------------------------------------------------------------------------------ */
/* String limits                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* The host reads a plugin's strings up to these many bytes before the terminating NUL, and never
 * past the first unreadable byte. An identifying string (id, version, names) that is longer, or
 * that has no NUL before unreadable memory, makes the plugin fail to load ("invalid table",
 * "invalid library", "invalid op"); a longer message (last_error, set_error) is cut. Bytes that
 * are not UTF-8 are shown as U+FFFD, and an id or name with them is refused as not a name. */
// clang-format off: the limits and their comments, aligned
#define NNP_MAX_ID_BYTES 32        /* nnp_backend_v1.id ([a-z][a-z0-9_]{0,31}) */
#define NNP_MAX_VERSION_BYTES 64   /* nnp_backend_v1.version */
#define NNP_MAX_NAME_BYTES 128     /* device_type_name, op_type, cl_kernel_name, library name,
                                      the name given to get_attr */
#define NNP_MAX_MESSAGE_BYTES 4096 /* last_error, set_error messages; cl_build_options */
#define NNP_MAX_PATH_BYTES 4096    /* cl_kernel_source given as a path */
#define NNP_MAX_CL_SOURCE_BYTES (16u << 20) /* cl_kernel_source given as text (cl_source_size) */
#define NNP_MAX_TARGET_ATTRS_BYTES 16384 /* nnp_backend_v1.target_attrs (ABI 1.2) */
#define NNP_MAX_PROVIDER_NAMES_BYTES 1024 /* nnp_backend_v1.provider_names (ABI 1.5) */
// clang-format on

/* ------------------------------------------------------------------------------------------ */
/* Versions                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* An ABI (or plugin) version. Always the FIRST member of a struct handed to the host. */
typedef struct nnp_version {
    uint32_t major; /* incompatible changes; must equal the host's */
    uint32_t minor; /* additions at the end; must be <= the host's */
    uint32_t patch; /* fixes; ignored when loading */
} nnp_version;

/* ------------------------------------------------------------------------------------------ */
/* Status codes                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef int32_t nnp_status;

enum {
    NNP_STATUS_OK = 0,
    NNP_STATUS_ERROR = 1,            /* anything not covered below */
    NNP_STATUS_INVALID_ARGUMENT = 2, /* a NULL/out-of-range argument, a wrong dtype/shape/rank */
    NNP_STATUS_UNSUPPORTED = 3,      /* the plugin cannot do this (op, attribute, dtype, call) */
    NNP_STATUS_OUT_OF_MEMORY = 4,    /* host or device allocation failed */
    NNP_STATUS_DEVICE_ERROR = 5,     /* the device/driver reported an error */
    NNP_STATUS_SHAPE_ERROR = 6,      /* input shapes inconsistent with the node */
    NNP_STATUS_INTERNAL = 7          /* a bug in the plugin */
};
#define NNP_OK NNP_STATUS_OK

/* ------------------------------------------------------------------------------------------ */
/* DLPack-compatible tensors (same layout as dlpack.h's DLDevice, DLDataType, DLTensor)        */
/* ------------------------------------------------------------------------------------------ */

/* Device type numbers are DLPack's DLDeviceType values (kDLCPU = 1, kDLCUDA = 2,
 * kDLOpenCL = 4, kDLVulkan = 7, ...); numbers >= 64 are nnplug extension devices, each with a
 * name (nnp_backend_v1.device_type_name): one number per device, the same for every plugin of
 * that device; two plugins giving one number different names (or one name different numbers)
 * are a load error naming both. */
enum {
    NNP_DEVICE_CPU = 1,
    NNP_DEVICE_CUDA = 2,
    NNP_DEVICE_CUDA_HOST = 3,
    NNP_DEVICE_OPENCL = 4,
    NNP_DEVICE_VULKAN = 7,
    NNP_DEVICE_METAL = 8,
    NNP_DEVICE_ROCM = 10,
    NNP_DEVICE_EXTENSION_BASE = 64
};

/* == DLDevice. 8 bytes. */
typedef struct nnp_device {
    int32_t device_type; /* DLPack device type number (see above) */
    int32_t device_id;   /* index of the device of that type, 0-based */
} nnp_device;

/* Type codes of nnp_dtype.code == DLDataTypeCode. */
enum {
    NNP_DTYPE_INT = 0,
    NNP_DTYPE_UINT = 1,
    NNP_DTYPE_FLOAT = 2,
    NNP_DTYPE_OPAQUE_HANDLE = 3, /* pointers (e.g. the elements of a STRINGS attribute) */
    NNP_DTYPE_BFLOAT = 4,
    NNP_DTYPE_COMPLEX = 5,
    NNP_DTYPE_BOOL = 6, /* one byte per element, 0 or 1 */
  /* DLPack 1.1's codes for 8- and 4-bit floats (bits 8, or 4 for FLOAT4_E2M1FN); ONNX's
     * FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT8E8M0, FLOAT4E2M1. */
    NNP_DTYPE_FLOAT8_E4M3FN = 10,
    NNP_DTYPE_FLOAT8_E4M3FNUZ = 11,
    NNP_DTYPE_FLOAT8_E5M2 = 12,
    NNP_DTYPE_FLOAT8_E5M2FNUZ = 13,
    NNP_DTYPE_FLOAT8_E8M0FNU = 14,
    NNP_DTYPE_FLOAT4_E2M1FN = 17,
    /* nnplug's own code (>= 64, outside DLPack's): ONNX STRING tensors, backend ABI 1.3. Bits 128:
     * each element is an nnp_string (below). Host memory only: the host passes string tensors
     * only to backends with NNP_BACKEND_HOST_VISIBLE and release_strings (nnplug/backend.h). */
    NNP_DTYPE_STRING = 64
};

/* One element of a string tensor ({NNP_DTYPE_STRING, 128, 1}): `size` bytes of UTF-8 text at
 * `data`, NOT NUL-terminated (a string may hold NUL bytes); data may be NULL when size == 0.
 * 16 bytes. Who owns the bytes: for inputs and constants the host (valid during the call, as
 * the tensor); for kernel outputs the backend, which allocates them in kernel_run and frees
 * them in release_strings once the host has copied them. */
typedef struct nnp_string {
    const char *data;
    uint64_t size;
} nnp_string;

/* == DLDataType. 4 bytes. float32 is {NNP_DTYPE_FLOAT, 32, 1}; bool is {NNP_DTYPE_BOOL, 8, 1}.
 * {0, 0, 0} means "unknown" in descriptors (never in tensors passed to a kernel). */
typedef struct nnp_dtype {
    uint8_t code;   /* NNP_DTYPE_* */
    uint8_t bits;   /* bits per lane: 8, 16, 32, 64; 4 or 2 for the sub-byte types below;
                       128 for NNP_DTYPE_STRING (one nnp_string) */
    uint16_t lanes; /* 1 for scalars (nnplug only uses 1) */
} nnp_dtype;

/* Sub-byte types: ONNX's INT4/UINT4 are {NNP_DTYPE_INT/UINT, 4, 1}, INT2/UINT2 {.., 2, 1},
 * FLOAT4E2M1 {NNP_DTYPE_FLOAT4_E2M1FN, 4, 1}. In nnplug's tensors and constants they are
 * PADDED, one element per byte, the value in the low bits and the high bits 0 (as ml_dtypes
 * and onnx.numpy_helper hold them; DLPack's "subbyte type padded" layout): ONNX
 * packs them two or four to a byte only inside TensorProto, and nnplug unpacks them when it
 * reads a model. nnp_dtype_nbytes() is 1 for them. */

/* == DLTensor. The host always passes compact row-major tensors: strides == NULL.
 * The first element is at (char*)data + byte_offset. For host (CPU) memory `data` is a plain
 * pointer; for other devices it is the device's data-space handle (e.g. a cl_mem) and
 * byte_offset is an offset inside that buffer. The tensor struct, shape and strides belong to
 * the caller and are valid during the call only; the memory behind `data` belongs to whoever
 * allocated it (for kernel inputs/outputs: the host). */
typedef struct nnp_tensor {
    void *data;
    nnp_device device;
    int32_t ndim;        /* 0 for scalars */
    nnp_dtype dtype;
    int64_t *shape;      /* ndim entries, each >= 0 (NULL allowed when ndim == 0) */
    int64_t *strides;    /* NULL: compact row-major. Counted in elements, as in DLPack */
    uint64_t byte_offset;
} nnp_tensor;

/* Bytes per element of a dtype: 1 for the padded sub-byte types (bits 4 and 2), 0 for other
 * bit counts that are not whole bytes. */
static inline uint64_t nnp_dtype_nbytes(nnp_dtype t)
{
    if ((t.bits == 4 || t.bits == 2) && t.lanes <= 1) return 1;
    return (t.bits % 8 == 0) ? (uint64_t)(t.bits / 8) * (uint64_t)(t.lanes ? t.lanes : 1) : 0;
}

/* Number of elements of a tensor (1 for scalars). */
static inline int64_t nnp_tensor_numel(const nnp_tensor *t)
{
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
    return n;
}

/* Pointer to the first element of a host tensor. */
static inline void *nnp_tensor_ptr(const nnp_tensor *t)
{
    return t->data ? (void *)((char *)t->data + t->byte_offset) : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Typed attribute records (node attributes, as RKNN's rknn_custom_op_attr)                   */
/* ------------------------------------------------------------------------------------------ */

/* nnp_attr.type: the ONNX AttributeProto.AttributeType numbers. */
enum {
    NNP_ATTR_UNDEFINED = 0,
    NNP_ATTR_FLOAT = 1,   /* data: const float*    (1 element), dtype float32 */
    NNP_ATTR_INT = 2,     /* data: const int64_t*  (1 element), dtype int64 */
    NNP_ATTR_STRING = 3,  /* data: const char*, NUL-terminated; count = bytes without the NUL;
                             dtype uint8 */
    NNP_ATTR_TENSOR = 4,  /* data: the tensor's elements, host memory, row-major; dtype, ndim and
                             shape describe it; count = number of elements. A tensor of strings
                             (ABI 1.3) is an array of nnp_string, dtype NNP_DTYPE_STRING */
    NNP_ATTR_GRAPH = 5,   /* subgraphs are not passed: data NULL, count 0 */
    NNP_ATTR_FLOATS = 6,  /* data: const float*   [count] */
    NNP_ATTR_INTS = 7,    /* data: const int64_t* [count] */
    NNP_ATTR_STRINGS = 8, /* data: const char* const* [count], each NUL-terminated;
                             dtype {NNP_DTYPE_OPAQUE_HANDLE, 64, 1} */
    NNP_ATTR_TENSORS = 9, /* not passed: data NULL, count 0 */
    NNP_ATTR_GRAPHS = 10  /* not passed: data NULL, count 0 */
};

/* One node attribute. Owned by the host, valid during the call that receives it. */
typedef struct nnp_attr {
    const char *name;     /* the ONNX attribute name, e.g. "kernel_shape" */
    int32_t type;         /* NNP_ATTR_* */
    nnp_dtype dtype;      /* element type of `data` (see NNP_ATTR_*) */
    int64_t count;        /* number of elements behind `data` (1 for FLOAT/INT) */
    const void *data;     /* host memory; NULL only when count == 0 */
    int32_t ndim;         /* TENSOR: rank; scalars: 0; lists and strings: 1 */
    const int64_t *shape; /* TENSOR: ndim entries; lists/strings: {count}; scalars: NULL */
} nnp_attr;

/* Look up an attribute by name; NULL when the node does not have it. */
static inline const nnp_attr *nnp_find_attr(const nnp_attr *attrs, int32_t num_attrs,
                                            const char *name)
{
    for (int32_t i = 0; i < num_attrs; ++i) {
        const char *a = attrs[i].name, *b = name;
        while (*a && *a == *b) {
            ++a;
            ++b;
        }
        if (*a == *b) return &attrs[i];
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Graph descriptors (what a plugin sees of a node)                                           */
/* ------------------------------------------------------------------------------------------ */

/* A value (an input or output of a node) as known when the model is loaded. */
typedef struct nnp_value_desc {
    const char *name;       /* the ONNX value name; "" for an omitted optional input/output */
    nnp_dtype dtype;        /* {0,0,0} when unknown */
    int32_t ndim;           /* -1 when the rank is unknown (shape is then NULL) */
    const int64_t *shape;   /* ndim entries; -1 for a dimension not known at load time
                               (symbolic, e.g. a batch size) */
    const void *const_data; /* non-NULL for constant inputs (weights, folded constants): the
                               values, host memory, row-major, with the full static shape. Valid
                               only during the call: copy or pre-pack what you keep. NULL for
                               values computed at run time. */
    uint64_t const_nbytes;  /* bytes behind const_data (0 when const_data is NULL) */
} nnp_value_desc;

/* One ONNX node. */
typedef struct nnp_node_desc {
    const char *name;    /* node name (unique in the model; generated when the model has none) */
    const char *op_type; /* e.g. "Conv" */
    const char *domain;  /* "" for the default ONNX domain ("ai.onnx") */
    int64_t opset;       /* opset version of `domain` imported by the model */
    int32_t num_attrs;
    const nnp_attr *attrs;
    int32_t num_inputs; /* including omitted optional inputs in the middle (name "") */
    const nnp_value_desc *inputs;
    int32_t num_outputs;
    const nnp_value_desc *outputs;
} nnp_node_desc;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NNPLUG_COMMON_H_ */
