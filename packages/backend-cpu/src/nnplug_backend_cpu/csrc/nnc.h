/* Internal interface of the CPU backend's engine: tensors, attributes, ops, plans.
 * Nothing here is part of the public ABI; abi.c translates between the two. */
#ifndef NNC_H
#define NNC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define NNC_MAXDIM 8
#define NNC_MAXIO 64 /* most inputs/outputs of one node (Concat, Sum, Split) */

/* Element types use ONNX TensorProto.DataType numbers. */
enum {
    DT_UNDEF = 0,
    DT_F32 = 1,
    DT_U8 = 2,
    DT_I8 = 3,
    DT_U16 = 4,
    DT_I16 = 5,
    DT_I32 = 6,
    DT_I64 = 7,
    DT_STR = 8,
    DT_BOOL = 9,
    DT_F16 = 10,
    DT_F64 = 11,
    DT_U32 = 12,
    DT_U64 = 13,
    DT_BF16 = 16,
    /* 8-, 4- and 2-bit types, one element per byte (the value in the low bits) */
    DT_F8E4M3FN = 17,
    DT_F8E4M3FNUZ = 18,
    DT_F8E5M2 = 19,
    DT_F8E5M2FNUZ = 20,
    DT_U4 = 21,
    DT_I4 = 22,
    DT_F4E2M1 = 23,
    DT_F8E8M0 = 24,
    DT_U2 = 25,
    DT_I2 = 26
};
size_t nnc_dtsize(int dt); /* 0 for unsupported types */
const char *nnc_dtname(int dt);

typedef struct nnc_tensor {
    int dtype;
    int ndim;
    int64_t dims[NNC_MAXDIM];
    void *data;
} nnc_tensor;

int64_t nnc_numel(const nnc_tensor *t);
/* The monotonic clock in nanoseconds. */
int64_t nnc_now_ns(void);
static inline size_t nnc_nbytes(const nnc_tensor *t)
{
    return (size_t)nnc_numel(t) * nnc_dtsize(t->dtype);
}
int nnc_same_shape(const nnc_tensor *a, const nnc_tensor *b);
void nnc_shape_str(const nnc_tensor *t, char *buf, size_t n);

/* Errors: a message buffer filled by the first failure. */
typedef struct nnc_err {
    char msg[1024];
    int unsupported; /* the failure is a missing feature, not a malformed node */
} nnc_err;
int nnc_fail(nnc_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Attributes (ONNX AttributeProto, already decoded). */
enum {
    AK_UNDEF = 0,
    AK_FLOAT = 1,
    AK_INT = 2,
    AK_STRING = 3,
    AK_TENSOR = 4,
    AK_FLOATS = 6,
    AK_INTS = 7,
    AK_STRINGS = 8
};
typedef struct nnc_attr {
    const char *name;
    int kind;
    int64_t count;     /* elements for lists/tensors, bytes for strings, 1 for scalars */
    const void *data;  /* float*, int64_t*, char* (not terminated), tensor data,
                          const char *const * (strings, each terminated) */
    int tdtype;        /* AK_TENSOR: element type */
    int tndim;
    int64_t tdims[NNC_MAXDIM];
} nnc_attr;

/* What a value is known to be when the plan is built. */
typedef struct nnc_valinfo {
    int dtype;         /* DT_UNDEF when unknown */
    int ndim;          /* -1 when the rank is unknown */
    int64_t dims[NNC_MAXDIM]; /* -1 for unknown dims */
    const void *const_data; /* non-NULL for constants (weights) */
} nnc_valinfo;

struct nnc_node;
struct nnc_exec;
struct nnc_plan;

/* One op implementation. */
typedef struct nnc_op {
    const char *type;
    int min_in, max_in, min_out, max_out;
    /* Validate attributes and what is known of the inputs; parse attributes into n->state;
     * pre-pack constant inputs. Never reads input data except constants. */
    int (*create)(struct nnc_node *n, nnc_err *e);
    /* Output dtypes and shapes from the actual inputs (data of small int inputs may be read). */
    int (*infer)(struct nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e);
    int (*run)(struct nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, struct nnc_exec *x,
               nnc_err *e);
    void (*destroy)(struct nnc_node *n);
    unsigned flags;
    /* Optional: scratch bytes one worker thread needs in run (shapes only, data may be NULL). */
    size_t (*scratch)(const struct nnc_node *n, nnc_tensor *const *in, const nnc_tensor *out);
    /* Optional: whether create kept what it needs of constant input i (no raw copy needed). */
    int (*owns_const)(const struct nnc_node *n, int i);
    /* Operator set domain; NULL for the default ONNX domain ("" / "ai.onnx"). */
    const char *domain;
} nnc_op;
#define OPF_ALIAS 1u /* output 0 is input 0's data with another shape (no copy) */

/* Activation fused into a producer's epilogue. */
/* ACT_HARDSWISH and ACT_SILU (x * sigmoid(x)) are fused into Conv only; the GEMM epilogue
 * leaves them to the caller (nnc_apply_act). ACT_GELU_ERF: MatMul's fused exact Gelu. */
enum { ACT_NONE = 0, ACT_RELU, ACT_CLIP, ACT_LEAKY, ACT_GELU_ERF, ACT_HARDSWISH, ACT_SILU };
typedef struct nnc_act {
    int kind;
    float a, b; /* CLIP: min, max; LEAKY: alpha; GELU_ERF: the divisor, b != 0: halved first
                 * (nnc_vgelu_erf) */
} nnc_act;

typedef struct nnc_node {
    const nnc_op *op;
    const char *name;
    const char *op_type;
    int opset;
    int nin, nout;
    int in[NNC_MAXIO];  /* value ids, -1 = omitted optional input */
    int out[NNC_MAXIO];
    int nattr;
    nnc_attr *attrs;
    const nnc_valinfo *vin[NNC_MAXIO]; /* infos of inputs (NULL when omitted) */
    const nnc_valinfo *vout[NNC_MAXIO];
    void *state;
    /* Epilogue fused in by the planner (ops that support it read these). */
    nnc_act act;
    int residual; /* input index of a tensor added before the activation, or -1 */
    int dead;     /* folded into another node */
    int probing;  /* created only to answer the capability query: validate, do not pack */
    int fused_into; /* when dead: the node that took it over, else -1 */
    int nfused;     /* live nodes: how many nodes were folded or fused into this one */
    const char **fused_names, **fused_types; /* [nfused], pointing at those nodes' strings */
} nnc_node;

/* Attribute access; all validate kind and report errors naming node and attribute. */
const nnc_attr *nnc_attr_find(const nnc_node *n, const char *name);
int nnc_attr_int(const nnc_node *n, const char *name, int64_t def, int64_t *out, nnc_err *e);
int nnc_attr_float(const nnc_node *n, const char *name, float def, float *out, nnc_err *e);
/* Lists: *count = -1 when absent. */
int nnc_attr_ints(const nnc_node *n, const char *name, int64_t *out, int maxn, int *count,
                  nnc_err *e);
int nnc_attr_floats(const nnc_node *n, const char *name, float *out, int maxn, int *count,
                    nnc_err *e);
/* String into buf (terminated); returns def when absent. */
int nnc_attr_str(const nnc_node *n, const char *name, const char *def, char *buf, size_t n_,
                 nnc_err *e);
int nnc_node_fail(nnc_err *e, const nnc_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* As nnc_node_fail, for a valid node using a feature this backend lacks (so the capability
 * query answers "no" and another backend may take the node). */
int nnc_node_unsup(nnc_err *e, const nnc_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Helpers on input infos at create time. */
static inline int nnc_in_const(const nnc_node *n, int i)
{
    return i < n->nin && n->vin[i] && n->vin[i]->const_data != NULL;
}
static inline int nnc_in_present(const nnc_node *n, int i)
{
    return i < n->nin && n->in[i] >= 0;
}
int nnc_in_static(const nnc_node *n, int i); /* rank and dims all known */
int64_t nnc_info_numel(const nnc_valinfo *v); /* -1 when unknown */
int nnc_check_dtype(const nnc_node *n, int i, const int *allowed, nnc_err *e);
/* Read an int64/int32 tensor's values (shape-like inputs) into out; error naming node. */
int nnc_read_ints(const nnc_node *n, const nnc_tensor *t, const char *what, int64_t *out, int maxn,
                  int *count, nnc_err *e);

/* Execution context of one run: scratch memory per worker thread, inside the workspace the
 * host passed to this call. */
typedef struct nnc_exec {
    char *scratch;
    size_t per_thread;
    int nthreads;
} nnc_exec;
/* Scratch buffer of worker tid, at least nbytes (64-byte aligned); NULL if too small. */
void *nnc_scratch(nnc_exec *x, int tid, size_t nbytes);

/* Thread pool. fn(arg, begin, end, tid) over [0, n) in chunks of at least grain. */
typedef void (*nnc_range_fn)(void *arg, int64_t begin, int64_t end, int tid);
void nnc_parallel_for(int64_t n, int64_t grain, nnc_range_fn fn, void *arg);
/* Most threads (tids 0..limit-1) parallel_for may use on the calling thread; 0: no limit. */
void nnc_set_thread_limit(int limit);
int nnc_num_threads(void);
void nnc_set_num_threads(int n);
void nnc_threads_shutdown(void);
/* Around one run (concurrent runs counted; a thread's nested holds count once): idle workers
 * wait awake meanwhile. */
void nnc_pool_hold(void);
void nnc_pool_release(void);

/* Row-major sgemm C = alpha*op(A)*op(B) + beta*C (gemm.c): every element summed in the same
 * order wherever it sits, so results do not depend on tiling or thread count. */
void nnc_sgemm(int transa, int transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
const char *nnc_gemm_info(void); /* which micro-kernel runs */
/* The same product (beta 0) on the pool's threads (op_gemm.c): rows or columns split by the
 * product's shape, each block through nnc_sgemm, one row as a matrix-vector product; the bits
 * do not depend on the thread count. */
void nnc_sgemm_mt(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc);
/* The widest hand-vectorised kernels to run: 2 AVX-512 (avx512f), 1 AVX2+FMA, 0 portable C;
 * what the CPU has, capped by NNPLUG_CPU_ISA ("avx2" or "portable") so that every path can be
 * tested on one machine. Kernels of different levels give the same bits wherever both use FMA. */
int nnc_isa_level(void);

/* Products with both operands packed ahead (gemm.c): Conv packs its weights (A) once at load
 * and its columns (B) per pixel tile, straight from im2col. Same per-element arithmetic as
 * nnc_sgemm. Packed A: panels of NNC_GEMM_MR rows over the whole K, so rows [r, m) with r a
 * multiple of NNC_GEMM_MR start at pa + r * k. Packed B: filled row by row (k rows of n). */
#define NNC_GEMM_MR 6
/* Rows [0, m) of a product in blocks of *blk rows (a multiple of NNC_GEMM_MR), *nblk of them,
 * when `tasks` other tasks are too few for `threads` threads (fewer than two each) and m is
 * 32 or more; else one block of m. */
void nnc_gemm_row_blocks(int64_t m, int64_t tasks, int threads, int64_t *blk, int64_t *nblk);
int64_t nnc_sgemm_packed_a_floats(int64_t m, int64_t k);
void nnc_sgemm_pack_a(int64_t m, int64_t k, const float *a, int64_t lda, float *pa);
/* The grain for nnc_parallel_for over items of floats_per_item floats each when packing. */
int64_t nnc_pack_grain(int64_t floats_per_item);
/* All k rows of row-major B (row stride ldb) packed at once, rows on the pool's threads. */
void nnc_sgemm_pack_b(int64_t k, int64_t n, const float *b, int64_t ldb, float *pb);
void nnc_sgemm_packed_a_scale_row(float *pa, int64_t k, int64_t row, float s); /* row *= s */
int64_t nnc_sgemm_packed_b_floats(int64_t k, int64_t n);
void nnc_sgemm_pack_b_row(int64_t k, int64_t kk, int64_t n, const float *row, float *pb);
/* Where row kk of packed B starts: columns [0, NR) of it there, each next NR columns *panel
 * floats further on (for callers that write the row in place instead of passing it whole). */
float *nnc_sgemm_packed_b_row_at(int64_t k, int64_t kk, int64_t n, float *pb, int64_t *panel);
/* Applied to each tile of C once its sum is complete: c = act(c + bias[row] (+ res)). */
typedef struct nnc_gemm_epi {
    const float *bias; /* per row, or NULL */
    const float *res;  /* added with the bias, row stride ldr, or NULL */
    int64_t ldr;
    const nnc_act *act; /* or NULL */
    const float *col_bias; /* per column, added first (MatMul's bias), or NULL */
} nnc_gemm_epi;
/* C[m x n] (row stride ldc) = packed A [m x k] * packed B [k x n], then the epilogue. pb must
 * be 64-byte aligned. */
void nnc_sgemm_packed(int64_t m, int64_t n, int64_t k, const float *pa, const float *pb, float *c,
                      int64_t ldc, const nnc_gemm_epi *ep);
/* Columns [j0, j1) of the same product (j0 a multiple of NNC_GEMM_NR; c, pb and the epilogue's
 * columns still indexed from column 0), so threads can share one packed A and B. */
#define NNC_GEMM_NR 16
void nnc_sgemm_packed_cols(int64_t m, int64_t n, int64_t k, const float *pa, const float *pb,
                           float *c, int64_t ldc, const nnc_gemm_epi *ep, int64_t j0, int64_t j1);
/* C[m x n] (row stride n) = A[m x k] (row-major, row stride k) * B packed ahead (nnc_sgemm_pack_b
 * or nnc_sgemm_pack_b_row), on the pool's threads, the way MatMul and Gemm run a constant
 * weight (op_gemm.c). 0 when out of memory for packing A. */
int nnc_sgemm_packed_b_product(int64_t m, int64_t k, int64_t n, const float *a, const float *pb,
                               float *c);
/* The same product with B read in place, on CPUs with AVX-512 (NNC_ERR elsewhere, computing
 * nothing): row kk of B is brow[kk] (k pointers), its columns given as slots of 16 lanes, slot s
 * at brow[kk] + slots[s].boff with its valid lanes in slots[s].mask, which are stored in order
 * at columns slots[s].coff, coff + 1, ... of C; so a convolution reads its taps straight from a
 * zero-padded input (a slot may cross the padding between output rows) instead of packing
 * im2col columns. The same bits as nnc_sgemm_packed on those columns. Epilogue columns (res,
 * col_bias) are C's. */
typedef struct {
    int64_t boff, coff;
    uint32_t mask;
} nnc_slot;
int nnc_sgemm_rows(int64_t m, int64_t k, const float *pa, const float *const *brow,
                   const nnc_slot *slots, int64_t nslots, float *c, int64_t ldc,
                   const nnc_gemm_epi *ep);
/* Column c0 of the same product when B is that one column x (k floats): y[i * ldy] for rows
 * [0, m), the same bits as nnc_sgemm_packed gives it, without padding B to NNC_GEMM_NR columns
 * (1-pixel convolutions: the squeeze-excitation layers). */
void nnc_sgemv_packed(int64_t m, int64_t k, const float *pa, const float *x, float *y, int64_t ldy,
                      const nnc_gemm_epi *ep, int64_t c0);

/* Compiled for several x86-64 levels, picked at load time. Elementwise loops only: C11 mode
 * contracts no a*b+c into an FMA, so each element's value is the same at every level. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MULTIVERSION
#endif

/* Vectorised elementwise math (vmath.c), within 2 ulp of libm; y may alias x. */
void nnc_vexp(const float *x, float *y, int64_t n);
/* Sums in double over 8 lanes, in a fixed order for a given n (vmath.c): of x[0..n), and of
 * (x - mu)^2. The statistics of the normalisations. */
double nnc_row_sum(const float *x, int64_t n);
double nnc_row_sq_dev(const float *x, int64_t n, double mu);
void nnc_vsigmoid(const float *x, float *y, int64_t n);
void nnc_vtanh(const float *x, float *y, int64_t n);
/* One LSTM row (gates i, o, f, c of H each; default activations, no clip or peepholes): the
 * pre-activations xr + hh (+ wb + rb when wb) -> c_new = f * c + i * g, h = o * tanh(c_new). */
void nnc_lstm_cell(const float *xr, const float *hh, const float *wb, const float *rb,
                   const float *c, float *c_new, float *h, int64_t H);
void nnc_verf(const float *x, float *y, int64_t n);
/* (x * (erf(x / d) + 1)) * 0.5: the exact Gelu as ONNX exports decompose it */
void nnc_vgelu_erf(const float *x, float *y, int64_t n, float d, int halve_first);

/* Memory. */
void *nnc_alloc(size_t nbytes); /* 64-byte aligned, NULL on failure */
static inline size_t nnc_align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}
void nnc_free(void *p);
/* Memory a thread keeps between calls (a _Thread_local nnc_tbuf of the caller's: the pool's
 * threads live as long as the library): at least nbytes, grown when asked for more; NULL when
 * it cannot be had. */
typedef struct {
    void *p;
    size_t nbytes;
} nnc_tbuf;
void *nnc_tbuf_get(nnc_tbuf *b, size_t nbytes);

/* Epilogue helpers. */
void nnc_apply_act(float *x, int64_t n, const nnc_act *a);

/* Op table. nnc_find_op: the default ONNX domain; nnc_find_op_in: any domain ("" or NULL is
 * the default one). */
const nnc_op *nnc_find_op(const char *type);
const nnc_op *nnc_find_op_in(const char *domain, const char *type);
extern const nnc_op *const nnc_all_ops[];

/* Broadcasting (multidirectional) of two shapes into out; 0 or error. */
int nnc_broadcast_shape(const nnc_tensor *a, const nnc_tensor *b, nnc_tensor *out);

#define NNC_OK 0
#define NNC_ERR (-1)
#define TRY(x)                        \
    do {                              \
        if ((x) != 0) return NNC_ERR; \
    } while (0)

#endif
