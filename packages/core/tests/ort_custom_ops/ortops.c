/* A small library for onnxruntime's custom-op C API, written without onnxruntime's headers:
 * the OrtApi slots it calls are given as -DSLOT_<name>=<index> (the test takes them from
 * nnplug.onnxruntime._ort_api_slots), the OrtCustomOp struct is spelled out below.
 *
 *   test.ortops:AddOffset          (OrtCustomOp version 1: CreateKernel/KernelCompute)
 *       y = x + offset  (float tensors, float attribute "offset")
 *   test.ortops:CallsUnimplemented (version 16: CreateKernelV2/KernelComputeV2)
 *       returns the status of OrtApi slot SLOT_UNIMPLEMENTED (CreateSessionOptions)
 * Built with -DFAIL_REGISTER, RegisterCustomOps returns an ORT_FAIL status instead. */
#include <stddef.h>
#include <stdint.h>

typedef struct OrtStatus OrtStatus;
typedef struct OrtApiBase {
    const void *(*GetApi)(uint32_t version);
    const char *(*GetVersionString)(void);
} OrtApiBase;

static void *const *api;
#define API(name, ret, ...) ((ret (*)(__VA_ARGS__))api[SLOT_##name])

typedef struct OrtCustomOp OrtCustomOp;
struct OrtCustomOp {
    uint32_t version;
    void *(*CreateKernel)(const OrtCustomOp *, const void *api, const void *info);
    const char *(*GetName)(const OrtCustomOp *);
    const char *(*GetExecutionProviderType)(const OrtCustomOp *);
    int (*GetInputType)(const OrtCustomOp *, size_t);
    size_t (*GetInputTypeCount)(const OrtCustomOp *);
    int (*GetOutputType)(const OrtCustomOp *, size_t);
    size_t (*GetOutputTypeCount)(const OrtCustomOp *);
    void (*KernelCompute)(void *kernel, void *context);
    void (*KernelDestroy)(void *kernel);
    int (*GetInputCharacteristic)(const OrtCustomOp *, size_t);
    int (*GetOutputCharacteristic)(const OrtCustomOp *, size_t);
    int (*GetInputMemoryType)(const OrtCustomOp *, size_t);
    int (*GetVariadicInputMinArity)(const OrtCustomOp *);
    int (*GetVariadicInputHomogeneity)(const OrtCustomOp *);
    int (*GetVariadicOutputMinArity)(const OrtCustomOp *);
    int (*GetVariadicOutputHomogeneity)(const OrtCustomOp *);
    OrtStatus *(*CreateKernelV2)(const OrtCustomOp *, const void *api, const void *info,
                                 void **kernel);
    OrtStatus *(*KernelComputeV2)(void *kernel, void *context);
};

enum { FLOAT = 1 };

typedef struct {
    float offset;
} AddOffset;
static AddOffset kernels[8];
static int n_kernels;

static const char *add_name(const OrtCustomOp *op)
{
    return "AddOffset";
}
static const char *cpu(const OrtCustomOp *op)
{
    return "CPUExecutionProvider";
}
static int float_type(const OrtCustomOp *op, size_t i)
{
    return FLOAT;
}
static size_t one(const OrtCustomOp *op)
{
    return 1;
}

static void *add_create(const OrtCustomOp *op, const void *ort, const void *info)
{
    AddOffset *k = &kernels[n_kernels++ % 8];
    OrtStatus *st = API(KernelInfoGetAttribute_float, OrtStatus *, const void *, const char *,
                        float *)(info, "offset", &k->offset);
    if (st) {  /* no attribute: 0 */
        k->offset = 0.f;
        API(ReleaseStatus, void, OrtStatus *)(st);
    }
    return k;
}

static void add_compute(void *kernel, void *ctx)
{
    AddOffset *k = kernel;
    const void *x = 0;
    void *y = 0;
    void *info = 0;
    size_t rank = 0, n = 0;
    int64_t dims[16];
    float *in = 0, *out = 0;
    if (API(KernelContext_GetInput, OrtStatus *, void *, size_t, const void **)(ctx, 0, &x)) return;
    if (API(GetTensorTypeAndShape, OrtStatus *, const void *, void **)(x, &info)) return;
    API(GetDimensionsCount, OrtStatus *, const void *, size_t *)(info, &rank);
    if (rank > 16) rank = 16;
    API(GetDimensions, OrtStatus *, const void *, int64_t *, size_t)(info, dims, rank);
    API(GetTensorShapeElementCount, OrtStatus *, const void *, size_t *)(info, &n);
    API(ReleaseTensorTypeAndShapeInfo, void, void *)(info);
    API(GetTensorMutableData, OrtStatus *, const void *, void **)(x, (void **)&in);
    if (API(KernelContext_GetOutput, OrtStatus *, void *, size_t, const int64_t *, size_t,
            void **)(ctx, 0, dims, rank, &y))
        return;
    API(GetTensorMutableData, OrtStatus *, const void *, void **)(y, (void **)&out);
    for (size_t i = 0; i < n; i++) out[i] = in[i] + k->offset;
}

static void destroy(void *kernel)
{
}

static const char *unimplemented_name(const OrtCustomOp *op)
{
    return "CallsUnimplemented";
}
static OrtStatus *create_v2(const OrtCustomOp *op, const void *ort, const void *info, void **k)
{
    *k = (void *)op;
    return 0;
}
static OrtStatus *calls_unimplemented(void *kernel, void *ctx)
{
    void *options = 0;
    return API(UNIMPLEMENTED, OrtStatus *, void **)(&options);
}

static int required(const OrtCustomOp *op, size_t i)
{
    return 0;
}
static int default_memory(const OrtCustomOp *op, size_t i)
{
    return 0;
}
static int arity(const OrtCustomOp *op)
{
    return 1;
}
static int homogeneous(const OrtCustomOp *op)
{
    return 1;
}

/* onnxruntime 1.2x calls the characteristic members of a version 1 op too: set them. */
static OrtCustomOp add_op = {
    1,           add_create, add_name, cpu,      float_type,     one,   float_type,  one,
    add_compute, destroy,    required, required, default_memory, arity, homogeneous, arity,
    homogeneous};
static OrtCustomOp unimplemented_op = {
    16,          0,         unimplemented_name, cpu,      float_type,     one,   float_type,  one,
    0,           destroy,   required,           required, default_memory, arity, homogeneous, arity,
    homogeneous, create_v2, calls_unimplemented};

__attribute__((visibility("default"))) OrtStatus *RegisterCustomOps(void *options,
                                                                    const OrtApiBase *base)
{
    void *domain = 0;
    OrtStatus *st;
    api = base->GetApi(16);
    if (!api) return 0;
#ifdef FAIL_REGISTER
    return API(CreateStatus, OrtStatus *, int, const char *)(1, "test.ortops refuses to register");
#endif
    if ((st =
             API(CreateCustomOpDomain, OrtStatus *, const char *, void **)("test.ortops", &domain)))
        return st;
    if ((st = API(CustomOpDomain_Add, OrtStatus *, void *, const OrtCustomOp *)(domain, &add_op)))
        return st;
    if ((st = API(CustomOpDomain_Add, OrtStatus *, void *, const OrtCustomOp *)(domain,
                                                                                &unimplemented_op)))
        return st;
    return API(AddCustomOpDomain, OrtStatus *, void *, void *)(options, domain);
}
