/* Winograd F(2x2, 3x3) convolution: the transforms around one batched oneDNN matmul (see
 * plan_winograd.c, build_winograd). A 3x3, stride-1 convolution computes each 2x2 block of outputs
 * from a 4x4 block of inputs with 16 products per input and output channel instead of 36:
 *   V = B^T d B (input, per tile), U = G g G^T (weights, once), M = V . U (summed over input
 *   channels: for each of the 16 positions a matrix product, tiles x IC times IC x OC), and
 *   Y = A^T M A (output, per tile), to which the bias and the fused post-ops are applied.
 * The input and output are nhwc; V is [16][tiles][IC], U [16][IC][OC], M [16][tiles][OC].
 * F(2x2, 3x3)'s transforms have coefficients 0, +-1 and 1/2 only: its rounding error is that
 * of the direct sum (measured: 2-6e-7 of the largest output for 64-512 input channels, the
 * direct sum 4e-7-1e-6). A non-finite input would spread through a whole tile (inf - inf),
 * where the direct sum keeps it to the outputs that read it; the input transform reports any,
 * and the plan then runs the direct convolution instead. The transforms need AVX2 with FMA
 * (dl_avx2_fma). */
#ifndef NNPLUG_ONEDNN_WINOGRAD_H_
#define NNPLUG_ONEDNN_WINOGRAD_H_

#include <stdint.h>

enum { WPOST_RELU, WPOST_CLIP, WPOST_SUM };

typedef struct {
    int kind;   /* WPOST_* */
    float a, b; /* RELU: the negative slope a; CLIP: [a, b] */
} ox_wpost;

#define WINO_MAXPOST 8

typedef struct {
    int64_t n, h, w, ic;  /* input, nhwc */
    int64_t oh, ow, oc;   /* output, nhwc */
    int64_t pt, pl;       /* top and left padding */
    int64_t th, tw;       /* 2x2 tiles along h and w: ceil(oh / 2), ceil(ow / 2) */
    int threads;
    int npost;
    ox_wpost post[WINO_MAXPOST];
} ox_wino;

/* Fill in the tiles from the shape fields; the channel counts must be multiples of 8. */
void ox_wino_init(ox_wino *w);
static inline int64_t ox_wino_tiles(const ox_wino *w)
{
    return w->n * w->th * w->tw;
}
/* U = G g G^T for weights oihw (oc x ic x 3 x 3) into u [16][ic][oc], on up to `threads`
 * threads of the pool. */
void ox_wino_weights(const float *g, int64_t oc, int64_t ic, float *u, int threads);
/* V from input x; 1 when x holds a NaN or an infinity (V is then not to be used). */
int ox_wino_input(const ox_wino *w, const float *x, float *v);
/* y from M, the bias (or NULL) and the post-ops (a sum adds what y holds). */
void ox_wino_output(const ox_wino *w, const float *m, const float *bias, float *y);

#endif
