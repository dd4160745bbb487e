/* Declarations shared between op implementations and the planner. */
#ifndef NNC_OPS_H
#define NNC_OPS_H
#include "nnc.h"

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

/* Per-channel affine + activation: the planner's replacement for BN/Mul/Add chains that
 * cannot fold into a Conv (DenseNet's BN after Concat). */
extern const nnc_op nnc_op_channel_affine;
int nnc_channel_affine_init(nnc_node *n, int64_t C, const float *scale, const float *shift);
void nnc_channel_affine_fold(nnc_node *n, const float *scale, const float *shift);

/* Per-channel affine of a BatchNormalization in inference mode, or NULL when it cannot be
 * computed at load time (non-constant statistics). */
int nnc_bn_affine(const nnc_node *n, int64_t C, float *scale, float *shift);

/* Binary ops: whether node is Mul/Add/Sub/Div with one constant per-channel operand
 * (broadcast over N,C,H,W with C channels); fills scale/shift of y = x*scale + shift. */
int nnc_per_channel_affine(const nnc_node *n, int xin, int64_t C, int rank, float *scale,
                           float *shift);

extern const nnc_op nnc_op_conv;


int nnc_unary_as_act(const nnc_node *n, nnc_act *act);
#endif
