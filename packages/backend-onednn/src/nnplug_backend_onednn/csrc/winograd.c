/* Winograd F(2x2, 3x3): the weight, input and output transforms (see winograd.h). The
 * transforms run on 8 channels at a time (AVX2 vectors) on the threads of oneDNN's OpenMP
 * pool (dl_parallel), each thread taking a contiguous run of tiles. */
#include "winograd.h"

#include <immintrin.h>
#include <string.h>

#include "dl.h"

typedef float v8 __attribute__((vector_size(32), aligned(4))); /* unaligned loads and stores */

void ox_wino_init(ox_wino *w)
{
    w->th = (w->oh + 1) / 2;
    w->tw = (w->ow + 1) / 2;
    if (w->threads < 1) w->threads = 1;
}

/* G's rows are (1 0 0), (1/2 1/2 1/2), (1/2 -1/2 1/2), (0 0 1): every product is exact in
 * double (a float times 0, 1/2 or 1), so the sums below give the bits of G g G^T computed
 * term by term, rounded once to float (the "* 0." terms keep the sign a zero gets there).
 * Eight output channels at a time, so that the 16 stores of each are contiguous runs of u
 * (the transform ran at a store per cache line before). */
typedef double vd8 __attribute__((vector_size(64)));

typedef struct {
    const float *g;
    float *u;
    int64_t oc, ic;
} weights_job;

static void weights_part(void *arg)
{
    const weights_job *jb = arg;
    const int64_t oc = jb->oc, ic = jb->ic;
    int64_t c0, c1;
    dl_share(ic, &c0, &c1);
    for (int64_t c = c0; c < c1; c++)
        for (int64_t o0 = 0; o0 < oc; o0 += 8) {
            int lanes = oc - o0 < 8 ? (int)(oc - o0) : 8;
            vd8 k[9] = {{0}};
            for (int l = 0; l < lanes; l++) {
                const float *src = jb->g + ((o0 + l) * ic + c) * 9;
                for (int q = 0; q < 9; q++) k[q][l] = src[q];
            }
            vd8 t[4][3];
            for (int j = 0; j < 3; j++) {
                t[0][j] = k[j] + k[3 + j] * 0. + k[6 + j] * 0.;
                t[1][j] = (k[j] + k[3 + j] + k[6 + j]) * .5;
                t[2][j] = (k[j] - k[3 + j] + k[6 + j]) * .5;
                t[3][j] = k[j] * 0. + k[3 + j] * 0. + k[6 + j];
            }
            for (int i = 0; i < 4; i++) {
                vd8 r[4] = {t[i][0] + t[i][1] * 0. + t[i][2] * 0.,
                            (t[i][0] + t[i][1] + t[i][2]) * .5, (t[i][0] - t[i][1] + t[i][2]) * .5,
                            t[i][0] * 0. + t[i][1] * 0. + t[i][2]};
                for (int j = 0; j < 4; j++) {
                    float *dst = jb->u + ((int64_t)(i * 4 + j) * ic + c) * oc + o0;
                    for (int l = 0; l < lanes; l++) dst[l] = (float)r[j][l];
                }
            }
        }
}

void ox_wino_weights(const float *g, int64_t oc, int64_t ic, float *u, int threads)
{
    weights_job jb = {g, u, oc, ic};
    dl_parallel(weights_part, &jb, dl_threads_for(9 * oc * ic, threads));
}

typedef struct {
    const ox_wino *w;
    const float *src; /* the input x, or M */
    float *dst;       /* V, or the output y */
    const float *bias;
    int bad;
} job;

__attribute__((target("avx2,fma"))) static void input_part(void *arg)
{
    job *jb = arg;
    const ox_wino *w = jb->w;
    const int64_t C = w->ic, T = ox_wino_tiles(w), P = T * C; /* P: one position's plane in V */
    int64_t t0, t1;
    dl_share(T, &t0, &t1);
    v8 acc = {0};
    const v8 zero = {0};
    for (int64_t t = t0; t < t1; t++) {
        int64_t n = t / (w->th * w->tw), r = t % (w->th * w->tw), y0 = (r / w->tw) * 2 - w->pt,
                x0 = (r % w->tw) * 2 - w->pl;
        const float *row[4];
        int xok[4];
        for (int i = 0; i < 4; i++) {
            int64_t y = y0 + i;
            row[i] = y >= 0 && y < w->h ? jb->src + ((n * w->h + y) * w->w) * C : NULL;
            xok[i] = x0 + i >= 0 && x0 + i < w->w;
        }
        float *out = jb->dst + t * C;
        for (int64_t c = 0; c < C; c += 8) {
            v8 d[4][4], s[4][4];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    d[i][j] = row[i] && xok[j] ? *(const v8 *)(row[i] + (x0 + j) * C + c) : zero;
            for (int j = 0; j < 4; j++) { /* B^T d */
                s[0][j] = d[0][j] - d[2][j];
                s[1][j] = d[1][j] + d[2][j];
                s[2][j] = d[2][j] - d[1][j];
                s[3][j] = d[1][j] - d[3][j];
            }
            for (int i = 0; i < 4; i++) { /* (B^T d) B */
                v8 e[4] = {s[i][0] - s[i][2], s[i][1] + s[i][2], s[i][2] - s[i][1],
                           s[i][1] - s[i][3]};
                for (int j = 0; j < 4; j++) {
                    acc += e[j] * zero; /* stays 0 unless a value is inf or NaN */
                    *(v8 *)(out + (i * 4 + j) * P + c) = e[j];
                }
            }
        }
    }
    int bad = 0;
    for (int i = 0; i < 8; i++) bad |= acc[i] != 0.f;
    if (bad) __atomic_store_n(&jb->bad, 1, __ATOMIC_RELAXED);
}

int ox_wino_input(const ox_wino *w, const float *x, float *v)
{
    job jb = {w, x, v, NULL, 0};
    dl_parallel(input_part, &jb, w->threads);
    return jb.bad;
}

__attribute__((target("avx2,fma"))) static void output_part(void *arg)
{
    job *jb = arg;
    const ox_wino *w = jb->w;
    const int64_t K = w->oc, T = ox_wino_tiles(w), P = T * K;
    int64_t t0, t1;
    dl_share(T, &t0, &t1);
    const v8 zero = {0};
    for (int64_t t = t0; t < t1; t++) {
        int64_t n = t / (w->th * w->tw), r = t % (w->th * w->tw), y0 = (r / w->tw) * 2,
                x0 = (r % w->tw) * 2;
        int ny = y0 + 1 < w->oh ? 2 : 1, nx = x0 + 1 < w->ow ? 2 : 1;
        const float *in = jb->src + t * K;
        float *out = jb->dst + ((n * w->oh + y0) * w->ow + x0) * K;
        for (int64_t c = 0; c < K; c += 8) {
            v8 m[4][4], s[2][4], o[2][2];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) m[i][j] = *(const v8 *)(in + (i * 4 + j) * P + c);
            for (int j = 0; j < 4; j++) { /* A^T m */
                s[0][j] = m[0][j] + m[1][j] + m[2][j];
                s[1][j] = m[1][j] - m[2][j] - m[3][j];
            }
            v8 bv = jb->bias ? *(const v8 *)(jb->bias + c) : zero;
            for (int i = 0; i < 2; i++) { /* (A^T m) A */
                o[i][0] = s[i][0] + s[i][1] + s[i][2] + bv;
                o[i][1] = s[i][1] - s[i][2] - s[i][3] + bv;
            }
            for (int i = 0; i < ny; i++)
                for (int j = 0; j < nx; j++) {
                    float *dst = out + (i * w->ow + j) * K + c;
                    v8 y = o[i][j];
                    for (int q = 0; q < w->npost; q++) {
                        const ox_wpost *p = &w->post[q];
                        if (p->kind == WPOST_SUM) y += *(const v8 *)dst;
                        else if (p->kind == WPOST_RELU)
                            y = _mm256_blendv_ps(y * p->a, y, _mm256_cmp_ps(y, zero, _CMP_GT_OQ));
                        else y = _mm256_min_ps(_mm256_max_ps(y, zero + p->a), zero + p->b);
                    }
                    *(v8 *)dst = y;
                }
        }
    }
}

void ox_wino_output(const ox_wino *w, const float *m, const float *bias, float *y)
{
    job jb = {w, m, y, bias, 0};
    dl_parallel(output_part, &jb, w->threads);
}
