/* LRN on nhwc values (see nhwc.h). */
#include "nhwc.h"

#include <immintrin.h>
#include <string.h>

#include "dl.h"

typedef float v8 __attribute__((vector_size(32), aligned(4)));

typedef struct {
    const ox_lrn_nhwc *cfg;
    const float *x;
    float *y;
} job;

__attribute__((target("avx2,fma"))) static void lrn_part(void *arg)
{
    const job *jb = arg;
    const ox_lrn_nhwc *l = jb->cfg;
    float sq[LRN_MAXC + 2 * 64 + 8]; /* one pixel's squares, zero on both sides of the window */
    const int64_t C = l->c, H = l->half, C8 = C & ~(int64_t)7;
    float *s = sq + 64;
    memset(sq, 0, sizeof sq);
    int64_t p0, p1;
    dl_share(l->pixels, &p0, &p1);
    const v8 an = (v8){0} + l->alpha_n, bias = (v8){0} + l->bias;
    for (int64_t p = p0; p < p1; p++) {
        const float *x = jb->x + p * C;
        float *y = jb->y + p * C;
        for (int64_t c = 0; c < C; c++) s[c] = x[c] * x[c];
        int64_t c = 0;
        for (; c < C8; c += 8) {
            v8 sum = {0};
            for (int64_t k = -H; k <= H; k++) sum += *(const v8 *)(s + c + k);
            v8 d = bias + an * sum, r = _mm256_sqrt_ps(d);
            *(v8 *)(y + c) = *(const v8 *)(x + c) / (r * _mm256_sqrt_ps(r));
        }
        for (; c < C; c++) {
            float sum = 0.f;
            for (int64_t k = -H; k <= H; k++) sum += s[c + k];
            float d = l->bias + l->alpha_n * sum, r = __builtin_sqrtf(d);
            y[c] = x[c] / (r * __builtin_sqrtf(r));
        }
    }
}

void ox_lrn_nhwc_run(const ox_lrn_nhwc *cfg, const float *x, float *y)
{
    job jb = {cfg, x, y};
    dl_parallel(lrn_part, &jb, cfg->threads);
}
