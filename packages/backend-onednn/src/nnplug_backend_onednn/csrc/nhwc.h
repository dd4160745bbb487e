/* The backend's own LRN across channels of an nhwc value, with beta 0.75 (see plan_simple.c):
 * oneDNN has no fast nhwc LRN, and its nchw one costs a reorder there and one back. It splits
 * the pixels between the threads of oneDNN's OpenMP pool (dl_parallel). */
#ifndef NNPLUG_ONEDNN_NHWC_H_
#define NNPLUG_ONEDNN_NHWC_H_

#include <stdint.h>

#define LRN_MAXC 4096 /* channels of an LRN run here (a buffer of one pixel's squares) */

typedef struct {
    int64_t pixels, c;
    int half;              /* (size - 1) / 2 */
    float alpha_n, bias;   /* alpha / size, bias; beta is 0.75 */
    int threads;
} ox_lrn_nhwc;

/* y = x / (bias + alpha / size * the sum of x^2 over the channel window) ^ 0.75, with
 * c <= LRN_MAXC and half <= 56; only where dl_avx2_fma. */
void ox_lrn_nhwc_run(const ox_lrn_nhwc *cfg, const float *x, float *y);

#endif
