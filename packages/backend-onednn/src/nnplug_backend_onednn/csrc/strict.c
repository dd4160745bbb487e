/* See strict.h. */
#include "strict.h"

#include <math.h>

void ox_maxpool_run(const ox_maxpool *p, const float *x, float *y)
{
    for (int64_t c = 0; c < p->planes; c++) {
        const float *xp = x + c * p->h * p->w;
        float *yp = y + c * p->oh * p->ow;
        for (int64_t i = 0; i < p->oh; i++)
            for (int64_t j = 0; j < p->ow; j++) {
                float m = -INFINITY;
                for (int64_t a = 0; a < p->kh; a++) {
                    int64_t r = i * p->sh - p->pt + a * p->dh;
                    if (r < 0 || r >= p->h) continue;
                    for (int64_t b = 0; b < p->kw; b++) {
                        int64_t s = j * p->sw - p->pl + b * p->dw;
                        if (s < 0 || s >= p->w) continue;
                        float v = xp[r * p->w + s];
                        if (v != v) {
                            m = v;
                            goto done;
                        }
                        if (v > m) m = v;
                    }
                }
            done:
                yp[i * p->ow + j] = m;
            }
    }
}

void ox_lrn_run(const ox_lrn *p, const float *x, float *y)
{
    const int64_t lo = (p->size - 1) / 2, hi = p->size - 1 - lo, P = p->pixels;
    const float an = p->alpha / (float)p->size;
    for (int64_t n = 0; n < p->n; n++)
        for (int64_t c = 0; c < p->c; c++) {
            const int64_t c0 = c - lo < 0 ? 0 : c - lo, c1 = c + hi >= p->c ? p->c - 1 : c + hi;
            const float *xn = x + n * p->c * P;
            float *yc = y + (n * p->c + c) * P;
            for (int64_t q = 0; q < P; q++) {
                float s = 0.f;
                for (int64_t k = c0; k <= c1; k++) s += xn[k * P + q] * xn[k * P + q];
                yc[q] = xn[c * P + q] / powf(p->bias + an * s, p->beta);
            }
        }
}

/* Axis coordinate y of n outputs from n_in inputs (scale n / n_in): its neighbours and
 * weights, as onnxruntime's SetupUpsampleBilinear. */
static void linear_axis(int64_t y, float scale, int64_t n_in, int64_t *i1, int64_t *i2, float *d1,
                        float *d2)
{
    float v = scale == 1.f ? (float)y : ((float)y + 0.5f) / scale - 0.5f;
    v = fmaxf(0.f, fminf(v, (float)(n_in - 1)));
    *i1 = (int64_t)v < n_in - 1 ? (int64_t)v : n_in - 1;
    *i2 = *i1 + 1 < n_in - 1 ? *i1 + 1 : n_in - 1;
    *d1 = fabsf(v - (float)*i1);
    *d2 = fabsf(v - (float)*i2);
    if (*i1 == *i2) *d1 = *d2 = 0.5f;
}

void ox_resize_linear_run(const ox_resize *p, const float *x, float *y)
{
    for (int64_t c = 0; c < p->planes; c++) {
        const float *xp = x + c * p->h * p->w;
        float *yp = y + c * p->oh * p->ow;
        for (int64_t i = 0; i < p->oh; i++) {
            int64_t y1, y2;
            float dy1, dy2;
            linear_axis(i, p->sh, p->h, &y1, &y2, &dy1, &dy2);
            for (int64_t j = 0; j < p->ow; j++) {
                int64_t x1, x2;
                float dx1, dx2;
                linear_axis(j, p->sw, p->w, &x1, &x2, &dx1, &dx2);
                yp[i * p->ow + j] = dx2 * dy2 * xp[y1 * p->w + x1] +
                                    dx1 * dy2 * xp[y1 * p->w + x2] +
                                    dx2 * dy1 * xp[y2 * p->w + x1] + dx1 * dy1 * xp[y2 * p->w + x2];
            }
        }
    }
}
