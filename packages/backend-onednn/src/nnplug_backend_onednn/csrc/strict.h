/* Kernels of strict plans (see kernels.h ox_graph.strict), which run when an input holds a NaN
 * or an infinity: oneDNN's max pooling takes the max with the NaN as the operand that loses,
 * so a NaN vanishes, its LRN gives NaN around an infinity where the formula gives 0, and its
 * linear resampling skips a neighbour of weight 0 that onnxruntime multiplies. Plain NCHW,
 * 2-D, one thread: only inputs that are not finite come here. */
#ifndef NNPLUG_ONEDNN_STRICT_H_
#define NNPLUG_ONEDNN_STRICT_H_

#include <stdint.h>

typedef struct {
    int64_t planes, h, w, oh, ow; /* planes: N * C */
    int64_t kh, kw, sh, sw, dh, dw, pt, pl;
} ox_maxpool;

/* A window holding a NaN gives NaN (that NaN); padding is no candidate. */
void ox_maxpool_run(const ox_maxpool *p, const float *x, float *y);

typedef struct {
    int64_t n, c, pixels; /* pixels: H * W */
    int64_t size;
    float alpha, beta, bias;
} ox_lrn;

/* y = x / (bias + alpha / size * the sum of x^2 over the channels max(0, c - (size - 1) / 2) to
 * min(C - 1, c + size / 2)) ^ beta, each element's own window summed afresh. */
void ox_lrn_run(const ox_lrn *p, const float *x, float *y);

typedef struct {
    int64_t planes, h, w, oh, ow; /* planes: N * C */
    float sh, sw;                 /* output / input along each axis */
} ox_resize;

/* Linear Resize with half_pixel as onnxruntime computes it: each axis's source coordinate
 * clamped into the input, its two neighbours (the second at most the last) weighted by their
 * distances (0.5 each where they are one), all four products summed, so a NaN or an infinity
 * in a neighbour of weight 0 still reaches the result (oneDNN's resampling reads only one
 * neighbour there). */
void ox_resize_linear_run(const ox_resize *p, const float *x, float *y);

#endif
