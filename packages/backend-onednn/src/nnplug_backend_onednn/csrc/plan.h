/* Plans: the ops of a group for concrete shapes and a thread count, as a sequence of oneDNN
 * primitives (see kernels.h). Activations get the layout the primitive producing them picks
 * (format_tag::any for convolutions and pools; element-wise, binary, normalisation and
 * softmax ops keep their input's layout); a value is reordered only when a reader needs
 * another layout, at the kernel's inputs and at its output. Weights are reordered into the
 * layout their primitive picks once, when the plan is built. Intermediate values live in an
 * arena inside the run's workspace, placed by lifetime; a residual Add is a `sum` post-op
 * writing into the buffer of the value it adds when that value is read by nothing later.
 *
 * What the plan files share: plan.c builds a plan, handing each op to the builder of its family
 * (plan_conv.c, plan_matmul.c, ...) which makes its steps with plan_steps.c; plan_run.c runs it. */
#ifndef NNPLUG_ONEDNN_PLAN_H_
#define NNPLUG_ONEDNN_PLAN_H_

#include <string.h>

#include "kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* The 16 lanes of v added by halves (lane i and i + 8, then i + 4, i + 2, i + 1: the order of
 * the portable loops' lane sums), in registers: read back from memory a float at a time they
 * cost a store-forwarding stall each. */
__attribute__((target("avx512f"))) static inline float ox_lanes_sum16(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q)); /* lanes 0 + 2, 1 + 3 */
    q = _mm_add_ss(q, _mm_movehdup_ps(q));  /* 0 + 1 */
    return _mm_cvtss_f32(q);
}

/* The largest of v's 16 lanes, by the same halves. */
__attribute__((target("avx512f"))) static inline float ox_lanes_max16(__m512 v)
{
    __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
#endif

#define MAXVIEWS 4
#define MAXARGS (MAXIN + 8)

enum { B_IN, B_OUT, B_ARENA, B_CONST, B_SCRATCH };

typedef struct {
    int where; /* B_* */
    int index; /* B_IN: kernel input */
    const void *ptr; /* B_CONST */
    uint64_t size, off;
    int first, last; /* steps that use it (B_ARENA) */
    int shared; /* also the bytes of a Reshape's or Transpose's result: never written in place */
} ox_buf;

typedef struct {
    int arg, buf;
    dnnl_memory_desc_t md;
    dnnl_memory_t fixed; /* B_CONST: made once */
} ox_arg;

/* A step of the backend's own on the pointers of its args (in order) and its settings cfg,
 * owned by the plan; a step that checks its input for NaNs and infinities returns whether it
 * found any (0 or 1), any other -1. */
typedef int (*ox_fn)(const void *cfg, void *const *ptrs, int nptrs);

/* When a step runs: always, or only after a Winograd input transform that found every value
 * finite (its product and output transform), or one that did not (the direct convolution). */
enum { RUN_ALWAYS, RUN_FINITE, RUN_NONFINITE };

typedef struct {
    dnnl_primitive_t prim; /* or NULL with fn set */
    ox_fn fn;
    const void *cfg;
    int when; /* RUN_* */
    int nargs;
    ox_arg args[MAXARGS];
    const char *node; /* "name (OpType)" of the node it is for (NNPLUG_ONEDNN_PROFILE) */
    const char *what; /* a step of the backend's own: what it does */
} ox_step;

/* The memory objects of one run: a run takes a context for itself, so handles can be reset
 * (only where a pointer changed) without locking. */
typedef struct ox_ctx {
    struct ox_ctx *next, *next_idle;
    dnnl_memory_t *mem;
    void **ptr;
} ox_ctx;

struct ox_plan {
    int nstep, cap_step, nbuf, cap_buf, nowned, cap_owned, threads, nmem;
    int profile; /* NNPLUG_ONEDNN_PROFILE=1 when it was made: each step's time to stderr */
    int64_t last_run_us; /* how long the latest run took (INT64_MAX before the first) */
    ox_step *steps;
    ox_buf *bufs;
    void **owned; /* packed weights */
    int nprim, cap_prim;
    dnnl_primitive_t *prims; /* primitives a step of the backend's own runs itself */
    uint64_t arena, scratch;
    pthread_mutex_t mu; /* guards the context lists */
    ox_ctx *idle, *all;
};

typedef struct {
    dnnl_memory_desc_t md;
    int buf;
} ox_view;

typedef struct {
    const ox_graph *g;
    const int64_t *dims;
    ox_plan *p;
    ox_err *e;
    int dry; /* primitive descriptors only (supports) */
    int *nviews, *last_use;
    ox_view (*views)[MAXVIEWS];
    int cur;
    char *bf16v; /* per value: stored in bf16 (plan_bf16.c bf16_values) */
} pb;

/* The backend's own loops over many values (the 8-bit grid's quantize, dequantize and QDQ; an
 * InstanceNormalization's), built twice: for AVX-512 and the baseline, the one to run picked when the library loads (an ifunc). The same IEEE
 * operations in the same order at every width (the build contracts nothing: -std=c11), so
 * the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WIDE_LOOP __attribute__((target_clones("avx512f", "default")))
#else
#define WIDE_LOOP
#endif

#define DIMS(v) (b->dims + (size_t)(v) * MAXR)
#define VAL(v) (&b->g->vals[v])

/* The inputs of op's primitive pd. Called with s == -1 (dry: nothing), s == -2 (make the
 * views the primitive reads, i.e. the reorders that must run before it, and pack weights),
 * then s >= 0 (add the arguments to step s; the views exist by then, so no step is added). */
typedef int (*inputs_fn)(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s);

/* Per plan, the packed weights and the bias of a conv / matmul (made when s == -2). */
typedef struct {
    int wbuf, bbuf;
} packed_t;
extern __thread packed_t t_packed;

static inline uint64_t align64(uint64_t n)
{
    return (n + 63) & ~(uint64_t)63;
}

/* ---- descriptors, buffers, steps, views, attributes (plan_steps.c) --------------------------- */

dnnl_memory_desc_t plain_md(int ndim, const int64_t *shape, int r);
/* shape row-major, of type dt (plain_md's layout in another data type) */
dnnl_memory_desc_t plain_typed_md(int ndim, const int64_t *shape, dnnl_data_type_t dt);
dnnl_memory_desc_t typed_md(int ndim, const int64_t *dims, dnnl_data_type_t dt,
                            dnnl_format_tag_t tag);
dnnl_memory_desc_t strided_typed_md(int ndim, const int64_t *dims, const int64_t *strides,
                                    dnnl_data_type_t dt);
dnnl_memory_desc_t any_md(int ndim, const int64_t *dims);
int bf16_operands(const pb *b);
dnnl_memory_desc_t tag_md(int ndim, const int64_t *dims, dnnl_format_tag_t tag);
int fast_impl(const_dnnl_primitive_desc_t pd);
int ref_impl(const_dnnl_primitive_desc_t pd);
dnnl_memory_desc_t matrix_md(const int64_t *shape, int r, int trans);
dnnl_memory_desc_t clone_md(const_dnnl_memory_desc_t md);
void md_free(dnnl_memory_desc_t md);
const_dnnl_memory_desc_t query(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int i);
dnnl_memory_desc_t value_plain(pb *b, int v, int r);
int new_buf(pb *b, int where, int index, const void *ptr, uint64_t size);
int arena_buf(pb *b, const_dnnl_memory_desc_t md);
int new_step(pb *b, const_dnnl_primitive_desc_t pd);
int add_arg(pb *b, int s, int arg, int buf, const_dnnl_memory_desc_t md);
dnnl_primitive_attr_t plain_attr(void);
int add_reorder(pb *b, int from, const_dnnl_memory_desc_t fmd, int to,
                const_dnnl_memory_desc_t tmd);
int add_view(pb *b, int v, const_dnnl_memory_desc_t md, int buf);
int get_view(pb *b, int v, const_dnnl_memory_desc_t md, int *buf);
int plain_buf(pb *b, int v, int *buf);
const_dnnl_memory_desc_t home(pb *b, int v);
int is_plain(pb *b, int v, const_dnnl_memory_desc_t md);
int dst_buf(pb *b, const ox_op *op, const_dnnl_memory_desc_t md, int *reorder_out);
int set_result(pb *b, const ox_op *op, int buf, const_dnnl_memory_desc_t md, int reorder_out);
int pack(pb *b, const float *data, dnnl_memory_desc_t src, const_dnnl_memory_desc_t dst, int *buf);
int strict_relu(const pb *b, dnnl_alg_kind_t alg, float alpha);
/* op's attribute, its post-ops first adding `add` (or none: NULL), for operands of type
 * `operands` (a product's bf16 operands take no fpmath mode); op_attr: none added, float32 */
dnnl_primitive_attr_t op_attr_for(const pb *b, const ox_op *op, const_dnnl_memory_desc_t add,
                                  dnnl_data_type_t operands);
dnnl_primitive_attr_t op_attr(const pb *b, const ox_op *op);
int sum_dst(pb *b, const ox_op *op, const_dnnl_memory_desc_t dmd, int *dbuf, int *reorder_out);
int finish_as(pb *b, const ox_op *op, dnnl_primitive_desc_t pd, inputs_fn inputs,
              const_dnnl_memory_desc_t as);
int finish(pb *b, const ox_op *op, dnnl_primitive_desc_t pd, inputs_fn inputs);
int input_arg_any(pb *b, int s, int arg, int v, const_dnnl_primitive_desc_t pd, dnnl_query_t what,
                  int i);
int converted_arg(pb *b, int s, int arg, int v, dnnl_memory_desc_t fmd,
                  const_dnnl_memory_desc_t md);
int plain_arg(pb *b, int s, int arg, int v, dnnl_memory_desc_t md);
int fn_step(pb *b, ox_fn fn, const void *cfg, int when, const char *what);
void *owned_cfg(pb *b, size_t n);
/* A primitive of pd owned by the plan, for a step of the backend's own to run; NULL when
 * oneDNN cannot make it. */
dnnl_primitive_t owned_prim(pb *b, const_dnnl_primitive_desc_t pd);

/* ---- values stored in bf16 (plan_bf16.c) ---------------------------------------------------- */

/* Per value of b's graph, whether the plan stores it in bf16 (all 0 but under the bf16 hint on
 * AMX); NULL when out of memory. */
char *bf16_values(pb *b);
/* Whether op writes its result in bf16 (bf16_values). */
int bf16_result(const pb *b, const ox_op *op);
dnnl_data_type_t md_type(const_dnnl_memory_desc_t md);
/* md (a layout of value v) in data type dt: the same strides where it has plain ones, else
 * nhwc (4-D) or row-major. */
dnnl_memory_desc_t retyped_md(pb *b, int v, const_dnnl_memory_desc_t md, dnnl_data_type_t dt);

/* ---- Conv (plan_conv.c) ---------------------------------------------------------------------- */

int conv_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s);
int build_conv(pb *b, const ox_op *op);
int build_deconv(pb *b, const ox_op *op);
/* The float32 view of a value on a grid whose home view holds its integers (ox_value.grid). */
int grid_float_view(pb *b, int v, int *buf, const_dnnl_memory_desc_t *md);

/* ---- Winograd convolutions (plan_winograd.c) ------------------------------------------------- */

int winograd_fits(pb *b, const ox_op *op);
int build_winograd(pb *b, const ox_op *op, dnnl_primitive_desc_t direct, const int64_t *pl);

/* ---- MatMul and Gemm (plan_matmul.c) --------------------------------------------------------- */

int build_matmul(pb *b, const ox_op *op);
/* Whether op is a MatMul / Gemm run as a packed-weights dense layer (constant weights). */
int packed_dense(pb *b, const ox_op *op);

/* ---- the backend's own element-wise loops (plan_loops.c) ------------------------------------- */

int add_softmax_nan_rows(pb *b, const ox_op *op);
int build_own_softmax(pb *b, const ox_op *op);
/* Softmax of rows r0..r1 of `len` contiguous floats, x into y (may be x): the loop
 * build_own_softmax runs, AVX-512 or portable, the same bits. */
void softmax_rows(const float *x, float *y, int64_t r0, int64_t r1, int64_t len);
/* The softmax of m rows of tk scores held chunk by chunk as attention's bf16 products write
 * them (keys [j cw, j cw + w) of the m rows at s + j m cw, rows w apart; cw a multiple of 64
 * or tk), left unnormalized: each exp rounded to bf16 into y (m rows of tk), each row's
 * 1 / sum into inv, for the caller to scale the rows of the product with V. A row whose sum
 * is NaN (every probability NaN) gets, when nanrep, c for each and 1 in inv. exp within
 * 2.7e-6 (plan_loops.c); the AVX-512 and portable loops give the same bits. s is only read. */
void softmax_chunks_bf16(const float *s, int64_t m, int64_t tk, int64_t cw, uint16_t *y, float *inv,
                         int nanrep, float c);
/* x rounded to bf16: nearest, ties to even, a NaN kept a NaN. */
static inline uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)(u >> 16 | 0x40)
                                           : (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}
/* The float32 a bf16 value is. */
static inline float bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
/* x (rows x cols, rows rs and columns cs floats apart) rounded to bf16 (nearest, ties to even;
 * a NaN stays a NaN) into y, rows x cols contiguous. */
void round_bf16(const float *x, int64_t rs, int64_t cs, uint16_t *y, int64_t rows, int64_t cols);
/* The mean of a row of len floats (of their squares, each rounded to float, when squares),
 * summed in double in four chains: ReduceMean's loop, and the RMS normalization's
 * (plan_norm.c), which must give its bits. */
float row_mean(const float *x, int64_t len, int squares);
/* Where(IsNaN(x), c, x) in place over n floats (OP_NANREP's loop). */
void nan_replace(float *x, int64_t n, float c);
/* op's result from its input, both plain (build_step_in with no layout). */
int build_plain_step(pb *b, const ox_op *op, ox_fn fn, const void *cfg, size_t size,
                     const char *what, int nparams);
/* op's result from its input by a step of the backend's own (fn on a copy of cfg), reading
 * the input and writing the result in `layout` (the input's home view), else plain. */
int build_step_in(pb *b, const ox_op *op, const_dnnl_memory_desc_t layout, ox_fn fn,
                  const void *cfg, size_t size, const char *what, int nparams);
/* build_step_in with the result in type yt (dnnl_data_type_undef: the input's). */
int build_step_to(pb *b, const ox_op *op, const_dnnl_memory_desc_t layout, dnnl_data_type_t yt,
                  ox_fn fn, const void *cfg, size_t size, const char *what, int nparams);
int build_loop(pb *b, const ox_op *op);
int build_reduce_mean(pb *b, const ox_op *op);
int build_own_eltwise(pb *b, const ox_op *op);
int build_qdq(pb *b, const ox_op *op);

/* ---- a strict plan's pooling, LRN and linear Resize (plan_strict.c) ----------------------------------------- */

int build_strict_maxpool(pb *b, const ox_op *op);
int build_strict_lrn(pb *b, const ox_op *op);
int build_strict_resize(pb *b, const ox_op *op);

/* ---- Reshape and Transpose views (plan_view.c) ----------------------------------------------- */

int build_view(pb *b, const ox_op *op);
/* md's dims and strides when it is a strided layout without blocking, offset 0: 0 if so. */
int strided_of(const_dnnl_memory_desc_t md, int *nd, int64_t *dims, int64_t *strides);

/* ---- Layer- and InstanceNormalization (plan_norm.c) -------------------------------------------------------- */

int build_ln(pb *b, const ox_op *op);
/* InstanceNormalization: build_gn's loop with one channel a group, else (more channels than its
 * arrays hold) a loop of the backend's own on the plain layout. */
int build_in(pb *b, const ox_op *op);
int build_gn(pb *b, const ox_op *op);
int build_rms(pb *b, const ox_op *op);

/* ---- layout-keeping ops (plan_simple.c) ------------------------------------------------------ */

int build_simple(pb *b, const ox_op *op);

/* ---- attention (plan_attention.c) ------------------------------------------------------------ */

int build_attention(pb *b, const ox_op *op);

/* ---- any op (plan.c): the builder of its kind ------------------------------------------------ */

int build_op(pb *b, const ox_op *op);

/* ---- running (plan_run.c) -------------------------------------------------------------------- */

void ctx_free(const ox_plan *p, ox_ctx *c);

#endif
