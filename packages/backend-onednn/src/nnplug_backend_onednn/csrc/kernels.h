/* Kernels: a group of ONNX nodes (up to a whole partition) parsed once into ops (graph.c),
 * then planned per concrete input shape and thread count into a sequence of oneDNN
 * primitives whose activations stay in the layouts oneDNN picks, with reorders only where
 * a layout changes and at the kernel's edges (plan*.c). */
#ifndef NNPLUG_ONEDNN_KERNELS_H_
#define NNPLUG_ONEDNN_KERNELS_H_

#include <pthread.h>

#include "dl.h"
#include "nnplug/backend.h"

#define MAXR 6      /* largest rank handled */
#define MAXIN 64    /* inputs of one op (Concat: DenseNet concatenates up to 49) */
#define MAXSPLIT 16 /* outputs of a Split (graph.c parse_split) */
#define MAXPOST 8   /* post-ops of one op */
#define MAXPLANS 8  /* plans (shape x thread count) a kernel keeps */

typedef struct {
    char msg[1024];
} ox_err;

int ox_fail(ox_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the parsed group (graph.c) --------------------------------------------------------- */

/* The element-wise ops the backend runs as loops of its own, not as oneDNN's eltwise: oneDNN's
 * clip and hardsigmoid take max/min with the NaN as the operand that loses, its exp clamps its
 * input first (both turn a NaN into a number), and its log gives -87.3 for every denormal;
 * onnxruntime keeps the NaN and takes the denormal's log. pow stands for a division of a
 * constant by the value, alpha / x (an exported rsqrt's Div(1, Sqrt(...))), divided exactly
 * where oneDNN's pow would raise to -1, and with beta 3 for Pow(x, 3), x * x * x as
 * onnxruntime multiplies it; soft_relu is Softplus as onnxruntime computes it (ONNX's
 * function body, log(exp(x) + 1), overflows to inf from x = 89). None is fused as a post-op,
 * except Clip in a graph that is not strict (see ox_graph.guarded). */
static inline int ox_own_eltwise(dnnl_alg_kind_t alg)
{
    return alg == dnnl_eltwise_clip || alg == dnnl_eltwise_hardsigmoid || alg == dnnl_eltwise_exp ||
           alg == dnnl_eltwise_log || alg == dnnl_eltwise_pow || alg == dnnl_eltwise_soft_relu;
}

/* Relu itself (LeakyRelu is relu with a slope): oneDNN's form, max(x, 0), drops a NaN, so a
 * strict graph runs it otherwise (plan_steps.c strict_relu). */
static inline int ox_is_relu(dnnl_alg_kind_t alg, float alpha)
{
    return alg == dnnl_eltwise_relu && alpha == 0.f;
}

enum {
    OP_CONV,
    OP_MATMUL,
    OP_POOL,
    OP_ELTWISE,
    OP_SOFTMAX,
    OP_BINARY,
    OP_CONCAT,
    OP_LRN,
    OP_BN,
    OP_IN, /* InstanceNormalization (graph.c parse_in, plan_norm.c build_in) */
    OP_LN,
    OP_ERF,
    OP_RESHAPE,
    OP_TRANSPOSE,
    OP_SLICE, /* along one axis, step 1: a view (graph.c parse_slice, plan_view.c) */
    OP_ISNAN,
    OP_WHERE, /* only while parsing: Where(IsNaN(x), C, x) becomes one OP_NANREP */
    OP_NANREP,
    OP_QUANT,   /* only while parsing: QuantizeLinear -> DequantizeLinear becomes one OP_QDQ */
    OP_DEQUANT, /* (graph.c fake_quant) */
    OP_QDQ,
    OP_DECONV,  /* ConvTranspose (graph.c parse_deconv, plan_conv.c build_deconv) */
    OP_REDMEAN, /* ReduceMean over the last axis (an RMS normalization's; plan_loops.c) */
    OP_ATTENTION, /* MatMul, [Add mask], Softmax, [NaN replacement], MatMul as one op (graph.c
                     attention, plan_attention.c) */
    OP_GN, /* GroupNorm as exported: Reshape, InstanceNormalization, Reshape, [Mul], [Add] as
              one op on the input's own layout (graph.c group_norm, plan_norm.c build_gn) */
    OP_RESIZE, /* Resize over the spatial axes of a 4-D value as oneDNN's resampling (alg:
                  nearest or linear; graph.c parse_resize) */
    OP_RMS     /* an exported RMS normalization over the last axis as one op (in: x, the
                  weight or -1; eps; alpha: the c of c / sqrt, beta 1: x / sqrt instead;
                  graph.c rms_norms, plan_norm.c build_rms) */
};
enum { ATT_SCORES, ATT_MASK, ATT_SOFTMAX, ATT_NANREP, ATT_VALUES, ATT_NSUB };
/* Images x channels (padded to a block of 16) an OP_GN takes: its statistics are on the stack
 * of the thread that runs the kernel (64 KB) */
#define OX_GN_MAX_CHANNELS 2048
enum { BORROW_NONE, BORROW_CALL, BORROW_KERNEL };

/* Whether a float of x[0..n) is a NaN. */
static inline int ox_any_nan(const float *x, int64_t n)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (u & 0x7fffffffu) > 0x7f800000u;
    }
    return bad != 0;
}

/* Whether no float of x[0..n) is an infinity or a NaN (its exponent bits all ones): a loop that
 * vectorises, where isfinite's early exit did not. */
static inline int ox_all_finite(const float *x, int64_t n)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}

/* A Slice bound (start or end) as an index in [0, dim]: a negative one counts from the end,
 * then it is clamped (ONNX's rule for step 1). */
static inline int64_t ox_slice_bound(int64_t v, int64_t dim)
{
    if (v < 0) v += dim;
    return v < 0 ? 0 : v > dim ? dim : v;
}
enum { PAD_NOTSET, PAD_VALID, PAD_SAME_UPPER, PAD_SAME_LOWER };
enum { POST_ELTWISE, POST_SUM };

typedef struct {
    char *name;
    int ndim;
    int64_t dims[MAXR]; /* -1: known at run time only */
    int konst;          /* a constant (its floats in cdata while the graph is parsed) */
    /* a constant's floats: borrowed (BORROW_CALL) from the host's const_data, which lives as
     * long as the call that parses; after a parse that keeps them (graph.c keep_constants),
     * where a plan reads them: still the host's when it keeps its constants for the kernel's
     * life (BORROW_KERNEL, NNP_HOST_KEEPS_CONSTANTS), else a copy of the graph's own; NULL
     * where no plan reads them. A kernel's strict graph borrows (BORROW_KERNEL) what its first
     * graph kept. */
    float *cdata;
    int borrowed;
    int kin;            /* first kernel input index holding it, or -1 */
    int consumers;      /* live ops reading it */
    /* read by attention ops alone, as their mask (graph.c masks_only): an infinity in it ends
     * in their softmax, which turns it into a 0 exactly or a NaN it raises FE_INVALID for (the
     * watch of a guarded plan then reruns strict), so it asks for no strict plan; a NaN does */
    int masks_scores;
    int boolean;        /* an IsNaN's bool result: never leaves the parse (see nan_replace) */
    int q8; /* a QuantizeLinear's uint8 / int8 result: never leaves the parse (see fake_quant) */
    /* a DequantizeLinear of int8 weights (graph.c const_dequant): cdata holds the float32
     * weights, i8 the integers, i8scale the scale, one or one per output channel (zero points
     * are 0) */
    int8_t *i8;
    float *i8scale;
    int64_t ni8scale;
    /* (q - gzp) * gscale of the integers q an int8 Conv writes (graph.c requantize): a plan
     * may hold it as those integers only (gs8: int8, else uint8; plan_conv.c) */
    int grid, gs8;
    float gscale;
    int32_t gzp;
} ox_value;

typedef struct {
    int kind; /* POST_* */
    dnnl_alg_kind_t alg;
    float alpha, beta;
    int val; /* POST_SUM: the value added */
} ox_post;

typedef struct {
    int kind; /* OP_* */
    char *name, *op_type;
    int nin, in[MAXIN]; /* value indices, -1 for an omitted input */
    int out;
    int pos; /* execution order: the position of the last node fused into it */
    int dead;
    /* attributes (the ones of its kind) */
    int64_t group, st[2], dil[2], pads[4], ker[2];
    int autopad, ceil, incl, global, maxpool;
    dnnl_alg_kind_t alg;
    float alpha, beta, eps, lrn_bias;
    int64_t size, axis;
    int ta, tb, gemm, logsm, commutes;
    /* Conv: its weights and bias (BatchNormalization folded in; w is its weight value's cdata,
     * not owned, until a fold writes to it, wshared); MatMul: a folded bias */
    float *w, *b;
    int wshared;
    int64_t wdims[4], oc;
    int npost;
    ox_post post[MAXPOST];
    int64_t perm[MAXR]; /* Transpose */
    int64_t start, end; /* Slice along `axis`, as the model gives them (ox_slice_bound) */
    /* QuantizeLinear [0] and DequantizeLinear [1] (OP_QDQ: both): scale, zero point; qs8: the
     * integer type is int8, else uint8 */
    float qscale[2];
    int32_t qzp[2];
    int qs8;
    /* Conv: its weights as int8 and their scales (1 or oc), from a DequantizeLinear in the
     * group, or NULL: with a quantized input it runs as an int8 convolution (plan_conv.c) */
    int8_t *w8;
    float *wscale;
    int64_t nwscale;
    int qout; /* Conv: it writes the integers of the QuantizeLinear after it (graph.c requantize),
                 whose grid is its result's (ox_value.grid) */
    int64_t outpad[2]; /* ConvTranspose's output_padding */
    /* Resize: the output's spatial dims (from its sizes), else 0 and each one's integer factor
     * (from its scales) */
    int64_t rsize[2], rscale[2];
    int line; /* Conv: 1-D (3-D values), run as a 2-D convolution of height 1 (ox_dims4) */
    /* OP_ATTENTION: the ops it stands for (ATT_*; -1 for an absent Add or NaN replacement),
     * dead but whole, so a plan can also run them one by one; its inputs are Q, K^T, V and
     * the mask, if any */
    int sub[ATT_NSUB];
} ox_op;

/* A Conv's value dims as the 2-D convolution runs them: a 1-D one's (N, C, W) as (N, C, 1, W),
 * the same bytes in a plain or channels-last layout. */
static inline void ox_dims4(const ox_op *op, const int64_t *dims, int64_t *d4)
{
    if (op->line) {
        d4[0] = dims[0];
        d4[1] = dims[1];
        d4[2] = 1;
        d4[3] = dims[2];
    } else
        for (int i = 0; i < 4; i++) d4[i] = dims[i];
}

/* Whether a Conv can run as an int8 convolution when its input is on an integer grid: int8
 * weights, a constant bias or none, element-wise post-ops only, on a CPU with VNNI (without it
 * oneDNN's int8 sums go through saturating 16-bit pairs). */
static inline int ox_int8_conv(const ox_op *op)
{
    if (op->kind != OP_CONV || !op->w8 || (op->nin == 3 && op->in[2] >= 0 && !op->b)) return 0;
    for (int i = 0; i < op->npost; i++)
        if (op->post[i].kind != POST_ELTWISE) return 0;
    return __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
}

/* A convolution a plan may run as Winograd F(2x2, 3x3), by its attributes (winograd_fits also
 * asks for channel counts, plane size and post-ops). Its transforms add and subtract inputs
 * before the products: on finite inputs within about a tenth of FLT_MAX they overflow where the
 * direct sum does not, so a strict graph runs it direct (see ox_graph.guarded). */
static inline int ox_winograd_shape(const ox_op *op)
{
    return op->kind == OP_CONV && op->w && op->group == 1 && op->wdims[2] == 3 &&
           op->wdims[3] == 3 && op->st[0] == 1 && op->st[1] == 1 && op->dil[0] == 1 &&
           op->dil[1] == 1;
}

typedef struct {
    int nval, nop, nkin, out;
    ox_value *vals;
    ox_op *ops;
    int *kin_val; /* [nkin] value of each kernel input */
    int *order; /* live ops in execution order */
    int norder;
    int dynamic; /* a dimension is known at run time only */
    int strict; /* parsed for inputs holding a NaN or an infinity: no op turns a NaN into a number */
    int guarded; /* not strict, and an op here mishandles a NaN or an infinity (oneDNN's relu, a
                    fused Clip, a fused GELU, max pooling, LRN, a Winograd convolution: fast,
                    exact on finite values; graph.c strict_differs): a run with one in an
                    input, or that made one, takes the strict graph of the same nodes */
    int bf16; /* the Target's precision is "bf16": products (conv, matmul, inner product) in
                 bf16 with f32 accumulation, f32 in and out (plan_steps.c precision_attr) */
} ox_graph;

/* Parse and check nodes[0..n), for use within the call that has them (supports: constants stay
 * the host's). Returns NULL with a message; *unsupported when the nodes are
 * valid ONNX the backend does not run (then it declines them). strict: no Clip or GELU fused,
 * and its plans run Relu, max pooling and LRN in forms that keep NaN and convolutions direct
 * (see ox_graph.guarded). */
ox_graph *ox_graph_parse(const nnp_node_desc *nodes, int n, int strict, int *unsupported,
                         ox_err *e);
/* The same for a kernel: the constants its plans read are kept past the call (keep_constants);
 * `from` (or NULL): a graph of the same nodes, parsed before and freed after this one, whose
 * kept constants this one borrows. */
ox_graph *ox_graph_parse_kept(const nnp_node_desc *nodes, int n, int strict, const ox_graph *from,
                              int *unsupported, ox_err *e);
void ox_graph_free(ox_graph *g);
/* Whether the host keeps its constants for each kernel's life (init options' host_flags): set
 * at init, before any kernel. */
void ox_graph_host_keeps_constants(int keeps);
/* Value dims for concrete kernel input shapes (dims[v * MAXR ...]; in NULL: the declared,
 * static ones); 0, or 1 with a message. */
int ox_graph_shapes(const ox_graph *g, const nnp_tensor *in, int nin, int64_t *dims, ox_err *e);
/* Whether value v holds no element for these dims (a dimension of size 0): no op computes it
 * (plan.c skips it; a Concat leaves it out), and a kernel whose output is empty runs nothing. */
static inline int ox_value_empty(const ox_graph *g, const int64_t *dims, int v)
{
    for (int i = 0; i < g->vals[v].ndim; i++)
        if (dims[(size_t)v * MAXR + i] == 0) return 1;
    return 0;
}
/* Spatial padding of a window op for concrete shapes; 0, or 1 with a message. */
int ox_window(const ox_op *op, const int64_t *in, const int64_t *out, int64_t *pl, int64_t *pr,
              ox_err *e);

/* ---- plans (plan*.c, plan.h) ------------------------------------------------------------- */

typedef struct ox_plan ox_plan;
ox_plan *ox_plan_build(const ox_graph *g, const int64_t *dims, int threads, ox_err *e);
/* Only whether oneDNN has primitives for it (no primitives made, no weights packed). */
int ox_plan_check(const ox_graph *g, const int64_t *dims, int threads, ox_err *e);
void ox_plan_free(ox_plan *p);
uint64_t ox_plan_workspace(const ox_plan *p);
int ox_plan_threads(const ox_plan *p);
int ox_plan_run(const ox_plan *p, const nnp_tensor *in, const nnp_tensor *out, void *ws, ox_err *e);

/* ---- engine and kernels (kernels.c) ----------------------------------------------------- */

int ox_init(int num_threads, ox_err *e);
void ox_shutdown(void);
void ox_set_num_threads(int n);
int ox_num_threads(void);
dnnl_engine_t ox_engine(void);
dnnl_stream_t ox_thread_stream(void);

int ox_supported(const nnp_node_desc *nodes, int n);
/* bf16: products in bf16 (the Target's "precision": "bf16", see ox_graph.bf16). */
int ox_build(const nnp_node_desc *nodes, int n, int bf16, nnp_kernel **out, int *unsupported,
             ox_err *e);
void ox_destroy(nnp_kernel *k);
int ox_output_shapes(const nnp_kernel *k, const nnp_tensor *in, int nin, int nout, int32_t *ndims,
                     int64_t *shapes, ox_err *e);
int ox_workspace_size(const nnp_kernel *k, const nnp_tensor *in, int nin, uint64_t *nbytes,
                      ox_err *e);
int ox_run(const nnp_kernel *k, const nnp_tensor *in, int nin, const nnp_tensor *out, int nout,
           void *ws, uint64_t wsn, ox_err *e);

#endif
