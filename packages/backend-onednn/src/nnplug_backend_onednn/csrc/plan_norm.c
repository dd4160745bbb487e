/* LayerNormalization: the backend's own loop over the input's plain bytes as rows.
 * InstanceNormalization and GroupNorm: the backend's own loops, on the input's own layout.
 * An exported RMS normalization (OP_RMS): a loop of the backend's own over plain rows. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_GN_AVX512 1
#endif

#include "plan.h"

/* LayerNormalization: the input's plain bytes as (outer, inner) rows. */
static void ln_rows(pb *b, const ox_op *op, int64_t *rows)
{
    const int64_t *xd = DIMS(op->in[0]);
    rows[0] = 1;
    for (int i = 0; i < op->axis; i++) rows[0] *= xd[i];
    rows[1] = op->size;
}

/* ---- InstanceNormalization ------------------------------------------------------------------- */

typedef struct {
    int64_t rows, len, channels; /* rows: images x channels, each of len values */
    float eps;
    int threads;
    int relu; /* a Relu after it, fused (graph.c norm_relu) */
} in_cfg;

typedef struct {
    const in_cfg *c;
    const float *x, *scale, *shift;
    float *y;
} in_job;

/* Sums in double over 8 lanes (a fixed order for a given n): of x, and of (x - mu)^2. */
WIDE_LOOP static double lanes_sum(const float *x, int64_t n)
{
    double acc[8] = {0}, s = 0;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[k + l];
    for (; k < n; k++) s += x[k];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s;
}

WIDE_LOOP static double lanes_sq_dev(const float *x, int64_t n, double mu)
{
    double acc[8] = {0}, s = 0;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) {
            double d = x[k + l] - mu;
            acc[l] += d * d;
        }
    for (; k < n; k++) {
        double d = x[k] - mu;
        s += d * d;
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s;
}

/* (x - mean) first, then the scale: x * a + (shift - mean * a) would cancel a large mean in
 * float32. */
WIDE_LOOP static void in_affine(const float *x, float m, float a, float t, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) * a + t;
}

/* A fused Relu: y < 0 gives 0, a NaN stays one. */
static inline float gn_relu(float v)
{
    return v < 0.f ? 0.f : v; /* not v > 0 ? v : 0, which would make a NaN 0 */
}

WIDE_LOOP static void gn_relu_row(float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = gn_relu(y[i]);
}

static void in_part(void *arg)
{
    const in_job *j = arg;
    const in_cfg *c = j->c;
    int64_t t0, t1;
    dl_share(c->rows, &t0, &t1);
    for (int64_t r = t0; r < t1; r++) {
        const float *x = j->x + r * c->len;
        int64_t ch = r % c->channels;
        double mu = c->len ? lanes_sum(x, c->len) / (double)c->len : 0;
        double var = c->len ? lanes_sq_dev(x, c->len, mu) / (double)c->len : 0;
        double inv = 1.0 / sqrt(var + (double)c->eps);
        in_affine(x, (float)mu, (float)(inv * j->scale[ch]), j->shift[ch], j->y + r * c->len,
                  c->len);
        if (c->relu) gn_relu_row(j->y + r * c->len, c->len);
    }
}

static int in_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const in_cfg *c = cfg;
    in_job j = {c, ptrs[0], ptrs[1], ptrs[2], ptrs[3]};
    dl_parallel(in_part, &j, c->rows > 1 ? dl_threads_for(c->rows * c->len, c->threads) : 1);
    return -1;
}

static int gn_step(pb *b, const ox_op *op, int64_t groups);

/* As a group normalization of one channel a group (on the input's own layout, a Relu fused)
 * where its channels fit gn_fn's arrays, else the loop above on the plain layout. */
int build_in(pb *b, const ox_op *op)
{
    int x = op->in[0], r = VAL(x)->ndim;
    const int64_t *xd = DIMS(x);
    if (xd[0] * (xd[1] + 15) <= OX_GN_MAX_CHANNELS) return gn_step(b, op, xd[1]);
    in_cfg c = {xd[0] * xd[1], 1, xd[1], op->eps, b->p->threads, op->npost > 0};
    for (int d = 2; d < r; d++) c.len *= xd[d];
    return build_plain_step(b, op, in_fn, &c, sizeof c, "instance normalization", 2);
}

/* ---- GroupNorm (graph.c group_norm) ------------------------------------------------------- */

/* x [n, c, l] (spatial dims flattened) in a layout of channel blocks of bw lanes: element
 * (i, ch, s) at i * cpad * l + (ch / bw) * l * bw + s * bw + ch % bw. bw = 1: plain (nchw);
 * 16: oneDNN's aBcd16b; c: channels last (nhwc). cpad: c rounded up to bw (padding lanes of a
 * blocked layout are written 0). x and y are float32, or bf16 in a blocked or channels-last
 * layout (a value stored so under the bf16 hint, plan_bf16.c): read as the float32 it is, the
 * result rounded to bf16 as it is written. */
typedef struct {
    int64_t n, c, l, groups, bw, cpad;
    float eps;
    int threads;
    int relu; /* a Relu after it, fused: y < 0 gives 0 (a NaN stays one) */
    int bf16; /* x and y are bf16 */
    int64_t ranges; /* pixel ranges a block is split into (gn_ranges) */
} gn_cfg;

typedef struct {
    const gn_cfg *c;
    const void *x;
    const float *gamma, *beta;
    void *y;
    double *sum, *sq;       /* [n * cpad]: each channel's sums of (x - pivot) and its square */
    double *psum, *psq;     /* [ranges][n * cpad]: those of each pixel range (ranges > 1) */
    float *pivot, *mean, *a, *t; /* [n * cpad] */
    int64_t ranges;              /* c->ranges, or 1 where its partial sums found no memory */
    int apply;                   /* gn_pass: 0 the sums, 1 the values */
} gn_job;

#define GN_LANES 16 /* lanes a task takes of a channel block */

static inline float gn_load(const void *x, int64_t i, int bf16)
{
    return bf16 ? bf16_value(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

static inline void gn_store(void *y, int64_t i, float v, int bf16)
{
    if (bf16) ((uint16_t *)y)[i] = bf16_bits(v);
    else ((float *)y)[i] = v;
}

/* Pixel ranges a block of a channels-last layout wider than GN_LANES is split into, so that a
 * task reads contiguous bytes (a range of whole pixels, each chunk of lanes in turn while the
 * range is in cache) rather than one chunk of lanes of every pixel: with 32 bf16 channels
 * two such tasks each read every cache line. About 64 KiB a range, at most 64 a block;
 * fixed by the shape, not the threads, so the sums add in one order at any thread count. */
static int64_t gn_ranges(const gn_cfg *c)
{
    if (c->bw <= GN_LANES || c->l < 2) return 1;
    int64_t bytes = c->l * c->bw * (c->bf16 ? 2 : 4), r = (bytes + 65535) / 65536;
    return r < 1 ? 1 : r > 64 ? 64 : r > c->l ? c->l : r;
}

/* Tasks: (image, block, pixel range); each takes its chunks of up to GN_LANES lanes in turn. */
static int64_t gn_tasks(const gn_job *j)
{
    return j->c->n * (j->c->cpad / j->c->bw) * j->ranges;
}

/* Task t's image i, first channel (of the image's cpad) and first pixel p0 and its count. */
static void gn_task(const gn_job *j, int64_t t, int64_t *i, int64_t *ch, int64_t *p0, int64_t *np,
                    int64_t *r)
{
    const gn_cfg *c = j->c;
    int64_t blocks = c->cpad / c->bw;
    *i = t / (blocks * j->ranges);
    *ch = t / j->ranges % blocks * c->bw;
    *r = t % j->ranges;
    *p0 = c->l * *r / j->ranges;
    *np = c->l * (*r + 1) / j->ranges - *p0;
}

/* Sums of a channel's run of l contiguous float32 values less a pivot (the plain layout), in
 * double. */
WIDE_LOOP static void gn_sums_row(const float *x, int64_t l, float p, double *s, double *q)
{
    double as[8] = {0}, aq[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= l; k += 8)
        for (int j = 0; j < 8; j++) {
            double d = (double)x[k + j] - p;
            as[j] += d;
            aq[j] += d * d;
        }
    double ts = 0, tq = 0;
    for (; k < l; k++) {
        double d = (double)x[k] - p;
        ts += d;
        tq += d * d;
    }
    for (int j = 0; j < 8; j++) {
        ts += as[j];
        tq += aq[j];
    }
    *s = ts;
    *q = tq;
}

/* The same for w lanes at stride bw (blocked and channels-last layouts) from element x0 of x:
 * the scalar loop for a chunk of fewer than GN_LANES lanes, or a CPU without AVX-512
 * (gn_sums16 takes the others). */
static void gn_sums_lanes(const void *x, int64_t x0, int64_t l, int64_t bw, int64_t w,
                          const float *p, double *s, double *q, int bf16)
{
    double as[GN_LANES] = {0}, aq[GN_LANES] = {0};
    for (int64_t k = 0; k < l; k++)
        for (int64_t j = 0; j < w; j++) {
            double d = (double)gn_load(x, x0 + k * bw + j, bf16) - p[j];
            as[j] += d;
            aq[j] += d * d;
        }
    for (int64_t j = 0; j < w; j++) {
        s[j] = as[j];
        q[j] = aq[j];
    }
}

#ifdef HAVE_GN_AVX512
#define GN_TARGET __attribute__((target("avx512f")))

/* 16 lanes from x (float32, or bf16 widened: its bits are a float32's upper half) */
GN_TARGET static inline __m512 gn_load16(const void *x, int bf16)
{
    if (!bf16) return _mm512_loadu_ps(x);
    __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)x));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

/* 16 lanes into y, rounded to bf16 as bf16_bits does (nearest, ties to even, a NaN kept) */
GN_TARGET static inline void gn_store16(void *y, __m512 v, int bf16)
{
    if (!bf16) {
        _mm512_storeu_ps(y, v);
        return;
    }
    __m512i u = _mm512_castps_si512(v), one = _mm512_set1_epi32(1);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan,
                              _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256((__m256i *)y, _mm512_cvtepi32_epi16(r));
}

/* A full chunk of 16 lanes in vectors along the lanes (the compiler vectorised the scalar
 * loops along the strided pixels instead: 3 ms for a 32 x 256 x 256 group norm) */
GN_TARGET static void gn_sums16(const void *x, int64_t x0, int64_t l, int64_t bw, const float *p,
                                double *s, double *q, int bf16)
{
    const __m512d p0 = _mm512_cvtps_pd(_mm256_loadu_ps(p)),
                  p1 = _mm512_cvtps_pd(_mm256_loadu_ps(p + 8));
    __m512d s0 = _mm512_setzero_pd(), s1 = s0, q0 = s0, q1 = s0;
    size_t es = bf16 ? 2 : 4;
    const char *r = (const char *)x + (size_t)x0 * es;
    for (int64_t k = 0; k < l; k++, r += (size_t)bw * es) {
        __m512 v = gn_load16(r, bf16);
        __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
        __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), p0);
        __m512d d1 = _mm512_sub_pd(_mm512_cvtps_pd(hi), p1);
        s0 = _mm512_add_pd(s0, d0);
        s1 = _mm512_add_pd(s1, d1);
        q0 = _mm512_fmadd_pd(d0, d0, q0);
        q1 = _mm512_fmadd_pd(d1, d1, q1);
    }
    _mm512_storeu_pd(s, s0);
    _mm512_storeu_pd(s + 8, s1);
    _mm512_storeu_pd(q, q0);
    _mm512_storeu_pd(q + 8, q1);
}

/* y = (x - m) * a + t, each rounded (the scalar loop's bits), then max(0, y) for a fused Relu
 * (a NaN y is kept: vmaxps returns its second operand when one is a NaN) */
GN_TARGET static void gn_apply16(const void *x, void *y, int64_t x0, int64_t l, int64_t bw,
                                 const float *m, const float *a, const float *t, int relu, int bf16)
{
    const __m512 mv = _mm512_loadu_ps(m), av = _mm512_loadu_ps(a), tv = _mm512_loadu_ps(t),
                 zero = _mm512_setzero_ps();
    size_t es = bf16 ? 2 : 4, step = (size_t)bw * es;
    const char *r = (const char *)x + (size_t)x0 * es;
    char *o = (char *)y + (size_t)x0 * es;
    for (int64_t k = 0; k < l; k++, r += step, o += step) {
        __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(gn_load16(r, bf16), mv), av), tv);
        gn_store16(o, relu ? _mm512_max_ps(zero, v) : v, bf16);
    }
}

static int gn_wide(void)
{
    static int wide = -1;
    if (wide < 0) wide = __builtin_cpu_supports("avx512f"); /* idempotent: a race writes the same */
    return wide;
}
#endif

/* y = (x - mean) * a + t per channel (lanes of padding: 0), then the fused Relu if any */
static void gn_apply_lanes(const void *x, void *y, int64_t x0, int64_t l, int64_t bw, int64_t w,
                           const float *m, const float *a, const float *t, int relu, int bf16)
{
    for (int64_t k = 0; k < l; k++)
        for (int64_t q = 0; q < w; q++) {
            int64_t i = x0 + k * bw + q;
            float v = (gn_load(x, i, bf16) - m[q]) * a[q] + t[q];
            gn_store(y, i, relu ? gn_relu(v) : v, bf16);
        }
}

/* One of gn_fn's two passes over the tasks: each channel's sums (j->apply 0), then the values
 * written (1). */
static void gn_pass(void *arg)
{
    const gn_job *j = arg;
    const gn_cfg *c = j->c;
    int64_t t0, t1, nc = c->n * c->cpad;
    dl_share(gn_tasks(j), &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        int64_t i, blk0, p0, np, r;
        gn_task(j, t, &i, &blk0, &p0, &np, &r);
        for (int64_t k = 0; k < c->bw; k += GN_LANES) {
            int64_t w = c->bw - k < GN_LANES ? c->bw - k : GN_LANES, ch0 = i * c->cpad + blk0 + k;
            int64_t base = i * c->cpad * c->l + blk0 * c->l + p0 * c->bw + k;
            if (!j->apply) {
                double *s = j->ranges > 1 ? j->psum + r * nc : j->sum,
                       *q = j->ranges > 1 ? j->psq + r * nc : j->sq;
                if (c->bw == 1)
                    gn_sums_row((const float *)j->x + base, np, j->pivot[ch0], s + ch0, q + ch0);
#ifdef HAVE_GN_AVX512
                else if (w == GN_LANES && gn_wide())
                    gn_sums16(j->x, base, np, c->bw, j->pivot + ch0, s + ch0, q + ch0, c->bf16);
#endif
                else
                    gn_sums_lanes(j->x, base, np, c->bw, w, j->pivot + ch0, s + ch0, q + ch0,
                                  c->bf16);
            } else if (c->bw == 1) {
                float *y = (float *)j->y + base;
                in_affine((const float *)j->x + base, j->mean[ch0], j->a[ch0], j->t[ch0], y, np);
                if (c->relu) gn_relu_row(y, np);
            }
#ifdef HAVE_GN_AVX512
            else if (w == GN_LANES && gn_wide())
                gn_apply16(j->x, j->y, base, np, c->bw, j->mean + ch0, j->a + ch0, j->t + ch0,
                           c->relu, c->bf16);
#endif
            else
                gn_apply_lanes(j->x, j->y, base, np, c->bw, w, j->mean + ch0, j->a + ch0,
                               j->t + ch0, c->relu, c->bf16);
        }
    }
}

static int gn_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    const gn_cfg *c = cfg;
    gn_job j = {c, ptrs[0], NULL, NULL, ptrs[nptrs - 1]};
    int k = 1;
    if (nptrs > 2) j.gamma = ptrs[k++];
    if (nptrs > 3) j.beta = ptrs[k++];
    size_t nc = (size_t)(c->n * c->cpad); /* <= OX_GN_MAX_CHANNELS (graph.c group_norm) */
    double d[2 * OX_GN_MAX_CHANNELS];
    float f[4 * OX_GN_MAX_CHANNELS];
    j.sum = d;
    j.sq = d + nc;
    j.pivot = f;
    j.mean = f + nc;
    j.a = f + 2 * nc;
    j.t = f + 3 * nc;
    /* a value of each channel, its first: sums of deviations from it are small */
    for (size_t ch = 0; ch < nc; ch++) {
        int64_t i = (int64_t)ch / c->cpad, cc = (int64_t)ch % c->cpad;
        int64_t at = i * c->cpad * c->l + cc / c->bw * c->bw * c->l + cc % c->bw;
        j.pivot[ch] = c->l ? gn_load(j.x, at, c->bf16) : 0.f;
    }
    j.ranges = c->ranges;
    if (j.ranges > 1 && !(j.psum = malloc(sizeof(double) * 2 * (size_t)j.ranges * nc)))
        j.ranges = 1; /* the tasks then read every pixel of their lanes */
    j.psq = j.psum ? j.psum + (size_t)j.ranges * nc : NULL;
    int threads = dl_threads_for(c->n * c->cpad * c->l, c->threads);
    dl_parallel(gn_pass, &j, threads);
    for (size_t ch = 0; ch < nc && j.ranges > 1; ch++) { /* the ranges' sums, in their order */
        j.sum[ch] = j.sq[ch] = 0;
        for (int64_t r = 0; r < j.ranges; r++) {
            j.sum[ch] += j.psum[r * (int64_t)nc + (int64_t)ch];
            j.sq[ch] += j.psq[r * (int64_t)nc + (int64_t)ch];
        }
    }
    free(j.psum);
    /* each group's mean and variance from its channels' sums about their pivots */
    int64_t per = c->c / c->groups;
    for (int64_t i = 0; i < c->n; i++)
        for (int64_t g = 0; g < c->groups; g++) {
            int64_t c0 = i * c->cpad + g * per;
            double len = (double)(per * c->l), tot = 0;
            for (int64_t q = 0; q < per; q++) tot += j.sum[c0 + q] + (double)c->l * j.pivot[c0 + q];
            double mu = len > 0 ? tot / len : 0, dev = 0;
            for (int64_t q = 0; q < per; q++) { /* sum (x - mu)^2 = sum (x - p - e)^2, e = mu - p */
                double e = mu - j.pivot[c0 + q];
                dev += j.sq[c0 + q] - 2 * e * j.sum[c0 + q] + (double)c->l * e * e;
            }
            double var = len > 0 ? dev / len : 0; /* a NaN stays one (an infinity in x) */
            if (var < 0) var = 0; /* rounding below 0 */
            double inv = 1.0 / sqrt(var + (double)c->eps);
            for (int64_t q = 0; q < per; q++) {
                int64_t ch = g * per + q;
                j.mean[c0 + q] = (float)mu;
                j.a[c0 + q] = (float)(inv * (j.gamma ? j.gamma[ch] : 1.f));
                j.t[c0 + q] = j.beta ? j.beta[ch] : 0.f;
            }
        }
    for (int64_t i = 0; i < c->n; i++) /* padding lanes: 0 */
        for (int64_t ch = c->c; ch < c->cpad; ch++) {
            j.mean[i * c->cpad + ch] = 0.f;
            j.a[i * c->cpad + ch] = 0.f;
            j.t[i * c->cpad + ch] = 0.f;
        }
    j.apply = 1;
    dl_parallel(gn_pass, &j, threads);
    return -1;
}

/* The layout of x the loops take as it is (its block width; 0: none of theirs). */
static int64_t gn_block_width(pb *b, int x)
{
    int r = VAL(x)->ndim;
    const int64_t *xd = DIMS(x);
    /* per rank 3 to 5: blocked by 16 channels, channels last */
    static const dnnl_format_tag_t tags[2][3] = {{dnnl_aBc16b, dnnl_aBcd16b, dnnl_aBcde16b},
                                                 {dnnl_acb, dnnl_acdb, dnnl_acdeb}};
    if (r < 3 || r > 5 || !b->nviews[x]) return 0;
    if (is_plain(b, x, home(b, x))) return 1;
    for (int k = 0; k < 2; k++) { /* of either type: bf16 under the hint (gn_cfg) */
        dnnl_memory_desc_t md = typed_md(r, xd, md_type(home(b, x)), tags[k][r - 3]);
        int eq = md && D(dnnl_memory_desc_equal)(md, home(b, x));
        md_free(md);
        if (eq) return k ? xd[1] : 16;
    }
    return 0;
}

/* The group normalization of op's input in `groups` groups of channels; op->in[1] and [2] (or
 * -1) the per-channel scale and shift. */
static int gn_step(pb *b, const ox_op *op, int64_t groups)
{
    int x = op->in[0], r = VAL(x)->ndim;
    const int64_t *xd = DIMS(x);
    gn_cfg c = {xd[0], xd[1], 1, groups, 1, xd[1], op->eps, b->p->threads, op->npost > 0, 0, 1};
    for (int d = 2; d < r; d++) c.l *= xd[d];
    int64_t bw = b->dry ? 0 : gn_block_width(b, x);
    int nparams = (op->in[1] >= 0) + (op->in[2] >= 0);
    if (bw > 1) { /* on the input's own blocked or channels-last layout, the result's too */
        c.bw = bw;
        c.cpad = (c.c + bw - 1) / bw * bw;
        c.bf16 = md_type(home(b, x)) == dnnl_bf16;
        c.ranges = gn_ranges(&c);
    }
    /* plain: the input reordered there when it is in another layout */
    return build_step_in(b, op, bw > 1 ? home(b, x) : NULL, gn_fn, &c, sizeof c,
                         groups == xd[1] ? "instance normalization" : "group normalization",
                         nparams);
}

int build_gn(pb *b, const ox_op *op)
{
    return gn_step(b, op, op->size);
}

/* ---- LayerNormalization: a loop of the backend's own over plain rows ------------------------
 * (oneDNN's layer normalization took 35-150 us a call on ViT-B/16's 197 x 768 at 2 threads,
 * and a reorder after it made the bf16 its dense layers read.) Here each row's mean, then the mean
 * of (x - mean)^2 (two passes: no cancellation), are summed in float in 64 lanes (four AVX-512
 * vectors) over pieces of 512 values, each piece's lanes reduced in one fixed order and the
 * pieces added in double: a lane adds at most 8 terms, and the double sums the InstanceNorm
 * loop keeps cost twice this loop's time. Then (x - mean) * (1 / sqrt(var + eps)) * scale +
 * shift in float32, written as float32 or, where every reader rounds it to bf16 anyway
 * (plan_bf16.c), rounded to bf16 straight away. The AVX-512 and portable loops give the same
 * bits. */
typedef struct {
    int64_t rows, len;
    float eps;
    int shifted, bf16, threads;
} ln_cfg;

typedef struct {
    const ln_cfg *c;
    const float *x, *g, *sh;
    void *y;
} ln_job;

#define LN_PIECE 512
#define LN_LANES 64

/* The 64 lanes reduced: the vectors pairwise (l + 32, then l + 16), then 16 lanes halving. */
static float ln_lanes(float *acc)
{
    for (int w = LN_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

/* Sum of x over n (of (x - mu)^2 when dev). */
static double ln_sum_portable(const float *x, int64_t n, float mu, int dev)
{
    double total = 0;
    for (int64_t p = 0; p < n; p += LN_PIECE) {
        int64_t m = n - p < LN_PIECE ? n - p : LN_PIECE, k = 0;
        const float *xp = x + p;
        float acc[LN_LANES] = {0}, s = 0;
        for (; k + LN_LANES <= m; k += LN_LANES)
            for (int l = 0; l < LN_LANES; l++) {
                float d = xp[k + l] - mu;
                acc[l] = dev ? fmaf(d, d, acc[l]) : acc[l] + xp[k + l];
            }
        for (; k < m; k++) {
            float d = xp[k] - mu;
            s = dev ? fmaf(d, d, s) : s + xp[k];
        }
        total += (double)ln_lanes(acc) + (double)s;
    }
    return total;
}

static void ln_row_portable(const float *x, float m, float rs, const float *g, const float *sh,
                            void *y, int64_t n, int bf16)
{
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - m) * rs;
        v = sh ? fmaf(v, g[i], sh[i]) : v * g[i];
        if (bf16) ((uint16_t *)y)[i] = bf16_bits(v);
        else ((float *)y)[i] = v;
    }
}

#ifdef HAVE_GN_AVX512
GN_TARGET static double ln_sum_avx512(const float *x, int64_t n, float mu, int dev)
{
    double total = 0;
    __m512 mv = _mm512_set1_ps(mu);
    for (int64_t p = 0; p < n; p += LN_PIECE) {
        int64_t m = n - p < LN_PIECE ? n - p : LN_PIECE, k = 0;
        const float *xp = x + p;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, v0;
        float s = 0;
#define LN_ADD(a, o)                            \
    {                                           \
        __m512 v = _mm512_loadu_ps(xp + k + o); \
        if (dev) {                              \
            v = _mm512_sub_ps(v, mv);           \
            a = _mm512_fmadd_ps(v, v, a);       \
        } else {                                \
            a = _mm512_add_ps(a, v);            \
        }                                       \
    }
        for (; k + LN_LANES <= m; k += LN_LANES) {
            LN_ADD(a0, 0)
            LN_ADD(a1, 16)
            LN_ADD(a2, 32)
            LN_ADD(a3, 48)
        }
#undef LN_ADD
        for (; k < m; k++) {
            float d = xp[k] - mu;
            s = dev ? fmaf(d, d, s) : s + xp[k];
        }
        /* ln_lanes' order, in registers */
        v0 = _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
        total += (double)ox_lanes_sum16(v0) + (double)s;
    }
    return total;
}

GN_TARGET static void ln_row_avx512(const float *x, float m, float rs, const float *g,
                                    const float *sh, void *y, int64_t n, int bf16)
{
    __m512 mv = _mm512_set1_ps(m), rv = _mm512_set1_ps(rs);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv), rv);
        v = sh ? _mm512_fmadd_ps(v, _mm512_loadu_ps(g + i), _mm512_loadu_ps(sh + i))
               : _mm512_mul_ps(v, _mm512_loadu_ps(g + i));
        gn_store16(bf16 ? (void *)((uint16_t *)y + i) : (void *)((float *)y + i), v, bf16);
    }
    if (i < n)
        ln_row_portable(x + i, m, rs, g + i, sh ? sh + i : NULL,
                        bf16 ? (void *)((uint16_t *)y + i) : (void *)((float *)y + i), n - i, bf16);
}
#endif

static void ln_part(void *arg)
{
    const ln_job *j = arg;
    const ln_cfg *c = j->c;
    int64_t t0, t1, len = c->len;
    dl_share(c->rows, &t0, &t1);
#ifdef HAVE_GN_AVX512
    int wide = gn_wide();
#endif
    for (int64_t r = t0; r < t1; r++) {
        const float *x = j->x + r * len;
        void *y =
            c->bf16 ? (void *)((uint16_t *)j->y + r * len) : (void *)((float *)j->y + r * len);
#ifdef HAVE_GN_AVX512
        if (wide) {
            float m = (float)(ln_sum_avx512(x, len, 0.f, 0) / (double)len);
            float rs = 1.f / sqrtf((float)(ln_sum_avx512(x, len, m, 1) / (double)len) + c->eps);
            ln_row_avx512(x, m, rs, j->g, j->sh, y, len, c->bf16);
            continue;
        }
#endif
        float m = (float)(ln_sum_portable(x, len, 0.f, 0) / (double)len);
        float rs = 1.f / sqrtf((float)(ln_sum_portable(x, len, m, 1) / (double)len) + c->eps);
        ln_row_portable(x, m, rs, j->g, j->sh, y, len, c->bf16);
    }
}

static int ln_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    const ln_cfg *c = cfg;
    ln_job j = {c, ptrs[0], ptrs[1], c->shifted ? ptrs[2] : NULL, ptrs[nptrs - 1]};
    dl_parallel(ln_part, &j, dl_threads_for(c->rows * c->len, c->threads));
    return -1;
}

int build_ln(pb *b, const ox_op *op)
{
    int64_t rows[2];
    ln_rows(b, op, rows);
    int shifted = op->nin == 3 && op->in[2] >= 0;
    ln_cfg c = {rows[0], rows[1], op->eps, shifted, bf16_result(b, op), b->p->threads};
    return build_step_to(b, op, NULL, c.bf16 ? dnnl_bf16 : dnnl_f32, ln_fn, &c, sizeof c,
                         "layer normalization", 1 + shifted);
}

/* ---- RMS normalization (graph.c rms_norms) ------------------------------------------------- */

typedef struct {
    int64_t rows, len;
    float eps, c;
    int divide, weighted, threads;
} rms_cfg;

typedef struct {
    const rms_cfg *c;
    const float *x, *w;
    float *y;
} rms_job;

/* y = x * f (or x / f), then * w when given: float32, element by element. */
WIDE_LOOP static void rms_row(const float *x, float *y, int64_t n, float f, int divide,
                              const float *w)
{
    if (divide)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] / f;
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * f;
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = w[i] * y[i];
}

/* Each row as the exported ops compute it, float32 step by step: the squares' mean (the
 * ReduceMean loop's, row_mean), + eps, sqrt, then x * (c / s) or x / s, then * w. */
static void rms_part(void *arg)
{
    const rms_job *j = arg;
    const rms_cfg *c = j->c;
    int64_t t0, t1, len = c->len;
    dl_share(c->rows, &t0, &t1);
    for (int64_t r = t0; r < t1; r++) {
        const float *x = j->x + r * len;
        float *y = j->y + r * len;
        float s = sqrtf(row_mean(x, len, 1) + c->eps);
        rms_row(x, y, len, c->divide ? s : c->c / s, c->divide, j->w);
    }
}

static int rms_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    const rms_cfg *c = cfg;
    rms_job j = {c, ptrs[0], c->weighted ? ptrs[1] : NULL, ptrs[nptrs - 1]};
    dl_parallel(rms_part, &j, dl_threads_for(c->rows * c->len, c->threads));
    return -1;
}

int build_rms(pb *b, const ox_op *op)
{
    int x = op->in[0], r = VAL(x)->ndim;
    int64_t len = DIMS(x)[r - 1], n = 1;
    for (int d = 0; d < r; d++) n *= DIMS(x)[d];
    rms_cfg c = {len ? n / len : 0, len,          op->eps, op->alpha, op->beta != 0.f,
                 op->in[1] >= 0,    b->p->threads};
    return build_plain_step(b, op, rms_fn, &c, sizeof c, "rms normalization", c.weighted);
}
