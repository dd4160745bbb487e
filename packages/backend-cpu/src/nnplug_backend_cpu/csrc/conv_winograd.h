/* Winograd F(2x2, 3x3) convolutions (conv_winograd.c), for op_conv.c: 3x3, stride 1, dilation
 * 1, one group, float32, constant weights. */
#ifndef NNPLUG_CPU_CONV_WINOGRAD_H_
#define NNPLUG_CPU_CONV_WINOGRAD_H_

#include "nnc.h"

typedef struct {
    int64_t ic, oc, h, w, oh, ow, pt, pl; /* one image: ic x h x w in, oc x oh x ow out */
    float xmax;                           /* the largest |x| taken (nnc_wino_input_limit) */
} nnc_wino_shape;

/* The transformed weights of w (oc x ic x 3 x 3): nnc_wino_packed_floats(oc, ic) floats in
 * pu; nnc_wino_scale_row multiplies output channel `row` of them by s (a folded
 * BatchNormalization). */
int64_t nnc_wino_packed_floats(int64_t oc, int64_t ic);
void nnc_wino_pack(const float *w, int64_t oc, int64_t ic, float *pu);
void nnc_wino_scale_row(float *pu, int64_t oc, int64_t ic, int64_t row, float s);

/* Whether any of x[0, n) is a NaN or an infinity. */
int nnc_any_nonfinite(const float *x, int64_t n);
/* The largest |x| for which no step of the transform can overflow with these packed weights:
 * |V| <= 4 |x|, |M| <= ic |V| max|U|, |Y| <= 9 |M|, so 36 ic max|U| |x| must stay finite. The
 * direct sum's bound is 9 ic max|g| |x|: near float32's limit Winograd alone would overflow. */
float nnc_wino_input_limit(const float *pu, int64_t oc, int64_t ic);

/* Whether the shape pays: 32 or more input channels, 64 or more output channels and 36 or
 * more output pixels. Measured per layer (1 / 2 threads, against the packed-column GEMM):
 * 128 -> 128 at 28x28 1.60 / 0.94 ms -> 1.14 / 0.75; 512 -> 512 at 7x7 1.94 / 1.17 -> 1.36 /
 * 0.93; with 32 output channels (DenseNet's 128 -> 32) it lost: 0.19 -> 0.32 ms at 14x14. */
int nnc_wino_fits(int64_t ic, int64_t oc, int64_t oh, int64_t ow);
/* Each thread's scratch for nnc_wino_run. */
size_t nnc_wino_scratch(const nnc_wino_shape *g);
/* y = act(conv(x) + bias (+ res)) for one image; NNC_OK, NNC_ERR (scratch too small), or 1
 * when x holds a NaN, an infinity or a value above g->xmax under a tile: then y is not written
 * in full, and the caller runs the direct convolution (a non-finite value would reach every
 * output of its tiles through the transform's zero coefficients, where the direct sum gives it
 * to its windows only). */
int nnc_wino_run(const nnc_wino_shape *g, const float *pu, const float *x, const float *bias,
                 const float *res, const nnc_act *act, float *y, nnc_exec *xc, int threads);

#endif
