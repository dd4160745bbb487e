/* Declarations shared between op implementations and the planner. */
#ifndef NNC_OPS_H
#define NNC_OPS_H
#include "nnc.h"

#include <math.h>

enum { AP_NOTSET = 0, AP_SAME_UPPER, AP_SAME_LOWER, AP_VALID };

typedef struct nnc_window {
    int nsp, auto_pad;
    int64_t k[NNC_MAXDIM], s[NNC_MAXDIM], d[NNC_MAXDIM], p[2 * NNC_MAXDIM];
} nnc_window;

int nnc_parse_auto_pad(const nnc_node *n, int *out, nnc_err *e);
int nnc_parse_window(const nnc_node *n, int nsp, const int64_t *kernel_from_w, nnc_window *w,
                     nnc_err *e);
int nnc_window_out(int auto_pad, int ceil_mode, int64_t in, int64_t k, int64_t s, int64_t d,
                   int64_t pb, int64_t pe, int64_t *out, int64_t *pb_used, int64_t *pe_used);

/* Planner hooks into Conv / Gemm. */
int nnc_conv_can_fold(const nnc_node *n);
int64_t nnc_conv_out_channels(const nnc_node *n);
void nnc_conv_fold_affine(nnc_node *n, const float *scale, const float *shift);
int nnc_gemm_can_fuse(const nnc_node *n);
/* MatMul with a packed constant 2-D B: its column count (else -1), and the bias the planner
 * folds in from a following Add (1 when taken). */
int nnc_matmul_packed(const nnc_node *n);
int64_t nnc_matmul_cols(const nnc_node *n);
int nnc_matmul_set_bias(nnc_node *n, const float *bias);

/* Per-channel affine + activation: the planner's replacement for BN/Mul/Add chains that
 * cannot fold into a Conv (DenseNet's BN after Concat). */
extern const nnc_op nnc_op_channel_affine;
int nnc_channel_affine_init(nnc_node *n, int64_t C, const float *scale, const float *shift);
void nnc_channel_affine_fold(nnc_node *n, const float *scale, const float *shift);

/* RMS normalization: the planner's replacement for an exported RMSNorm chain (T5, Llama):
 * inputs x and an optional weight; init makes node n one (its old op's state destroyed), or
 * returns 0, out of memory, with n as it was. */
extern const nnc_op nnc_op_rms_norm;
int nnc_rms_norm_init(nnc_node *n, float eps);
/* Whether n is a ReduceMean over exactly the last axis of a rank-`rank` input, with keepdims. */
int nnc_reduce_mean_last(const nnc_node *n, int rank);

/* Attention: the planner's replacement for MatMul -> [scale] -> [Add mask] -> Softmax ->
 * [Where(IsNaN)] -> MatMul (op_attention.c): inputs Q, K^T (k_rows: K), V and the mask or
 * none; the scores times or divided by `scale` (ATT_SCALE_*), NaN probabilities made `c` when
 * nanrep. Init makes node n one (its old op's state destroyed), or returns 0, out of memory,
 * with n as it was. */
enum { ATT_SCALE_NONE, ATT_SCALE_MUL, ATT_SCALE_DIV };
extern const nnc_op nnc_op_attention;
int nnc_attention_init(nnc_node *n, int scale_kind, float scale, int k_rows, int nanrep, float c);
/* Whether n is a Softmax (not LogSoftmax) over the last axis of a rank-`rank` input. */
int nnc_softmax_last_axis(const nnc_node *n, int rank);
/* Whether n is a Transpose of a rank-`rank` input swapping its last two axes alone. */
int nnc_transpose_swaps_last_two(const nnc_node *n, int rank);
/* A contiguous row's softmax in place, as the Softmax node computes it. */
void nnc_softmax_row(float *x, int64_t len);

/* Per-channel affine of a BatchNormalization in inference mode, or NULL when it cannot be
 * computed at load time (non-constant statistics). */
int nnc_bn_affine(const nnc_node *n, int64_t C, float *scale, float *shift);

/* Binary ops: whether node is Mul/Add/Sub/Div with one constant per-channel operand
 * (broadcast over N,C,H,W with C channels); fills scale/shift of y = x*scale + shift. */
int nnc_per_channel_affine(const nnc_node *n, int xin, int64_t C, int rank, float *scale,
                           float *shift);

extern const nnc_op nnc_op_conv;

/* Concat's axis for an output of this rank, or -1 (the planner writes inputs in place). */
int nnc_concat_axis(const nnc_node *n, int rank);


int nnc_unary_as_act(const nnc_node *n, nnc_act *act);

/* Multidirectional broadcasting of up to 3 inputs against an output shape (op_eltwise.c):
 * the inner function gets n elements, input pointers and their inner strides (0 or 1). */
typedef struct nnc_bcast {
    int nd, nin;
    int64_t dims[NNC_MAXDIM];
    int64_t str[3][NNC_MAXDIM]; /* element strides per input, 0 where broadcast */
} nnc_bcast;
typedef void (*nnc_inner_fn)(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *o);
int nnc_bcast_setup(nnc_bcast *b, const nnc_tensor *out, nnc_tensor *const *ins, int nin);
void nnc_bcast_run(const nnc_bcast *b, nnc_tensor *const *ins, nnc_tensor *out, nnc_inner_fn fn,
                   void *ctx);

/* Binary ops: codes shared by op_eltwise.c (float32 fast paths) and op_arith.c (every type). */
enum {
    B_ADD,
    B_SUB,
    B_MUL,
    B_DIV,
    B_POW,
    B_MAX,
    B_MIN,
    B_EQ,
    B_GT,
    B_LT,
    B_MOD,
    B_GE,
    B_LE,
    B_AND,
    B_OR,
    B_XOR,
    B_BAND,
    B_BOR,
    B_BXOR,
    B_SHL,
    B_SHR,
    B_PRELU,
    B_PYMOD = B_MOD + 100
};
/* Context of the typed kernel: op, input types, output type. */
typedef struct {
    int op, dta, dtb, dto;
} nnc_arith_ctx;
void nnc_arith_typed(void *ctx, int64_t n, const char *const *p, const int64_t *s, char *o);
/* Whether an integer divisor tensor holds a zero (Div/Mod must not run). */
int nnc_has_zero(const nnc_tensor *t);

/* Unary ops on types other than float32 (op_unary.c): a code for op_type, or -1. */
int nnc_unary_typed_code(const char *op_type, int dt);
int nnc_unary_typed_run(const nnc_node *n, int code, float alpha, float beta, nnc_tensor *const *in,
                        nnc_tensor *out, nnc_err *e);

/* Reductions on types other than float32 (op_reduce_typed.c); kinds as op_reduce.c's. */
enum {
    NNC_R_SUM,
    NNC_R_MEAN,
    NNC_R_MAX,
    NNC_R_MIN,
    NNC_R_PROD,
    NNC_R_L2,
    NNC_R_SUMSQ,
    NNC_R_L1,
    NNC_R_LOGSUMEXP,
    NNC_R_LOGSUM
};
int nnc_reduce_typed_ok(int kind, int dt);
/* ReduceLogSumExp over a row of maximum mx, as max + log(sum(exp(v - max))): a term, and the
 * result from the sum of the terms (count: the row's length). A row with +inf (and no NaN)
 * gives +inf and a row of -inf gives -inf, not inf - inf = NaN. */
static inline double nnc_lse_term(double v, double mx)
{
    return isinf(mx) ? (v != v ? v : 0.0) : exp(v - mx);
}
static inline double nnc_lse_result(double mx, double sum, int64_t count)
{
    return !count ? -INFINITY : isinf(mx) && sum == sum ? mx : mx + log(sum);
}
int nnc_reduce_typed_run(const nnc_node *n, int kind, const int *mask, const nnc_tensor *x,
                         nnc_tensor *out, nnc_err *e);

/* Ops on string tensors (op_string.c): the only ops graph.c gives a node that reads or writes
 * one. NULL when none of them is op_type of that domain. */
const nnc_op *nnc_find_string_op(const char *domain, const char *type);
#endif
