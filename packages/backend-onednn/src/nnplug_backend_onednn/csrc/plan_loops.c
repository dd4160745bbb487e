/* Element-wise loops of the backend's own (Erf, Clip, HardSigmoid, Exp, Log, NaN replacement,
 * and the NaN rows of a Softmax): exact where oneDNN's eltwise is not. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_SM_AVX512 1
#endif

#include "plan.h"

/* A loop of the backend's own over n plain floats (its step's args: src, dst), seen as rows
 * of `row` elements `inner` apart (a row-major axis of that length with that inner size); c, d:
 * scalar parameters (nan_replace_loop's replacement, Clip's bounds). It runs as a step
 * (loop_fn) with its parameters as the settings. */
typedef void (*ox_loop)(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                        float d);

typedef struct {
    ox_loop loop;
    int64_t n, row, inner;
    float c, d;
    int threads;
} ox_loop_cfg;

typedef struct {
    const ox_loop_cfg *l;
    const float *x;
    float *y;
} loop_job;

/* The loops are element-wise: each thread takes one contiguous share of the elements */
static void loop_part(void *arg)
{
    const loop_job *j = arg;
    const ox_loop_cfg *l = j->l;
    int64_t t0, t1;
    dl_share(l->n, &t0, &t1);
    if (t1 > t0) l->loop(j->x + t0, j->y + t0, t1 - t0, l->row, l->inner, l->c, l->d);
}

static int loop_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const ox_loop_cfg *l = cfg;
    loop_job j = {l, ptrs[0], ptrs[1]};
    dl_parallel(loop_part, &j, dl_threads_for(l->n, l->threads));
    return -1;
}

/* A step running loop over the n floats of its args src and dst (added by the caller). */
static int loop_step(pb *b, ox_loop loop, int64_t n, int64_t row, int64_t inner, float c, float d,
                     const char *what)
{
    ox_loop_cfg *l = owned_cfg(b, sizeof *l);
    if (!l) return -1;
    *l = (ox_loop_cfg){loop, n, row, inner, c, d, b->p->threads};
    return fn_step(b, loop_fn, l, RUN_ALWAYS, what);
}

static void erf_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                     float d)
{
    (void)row, (void)inner, (void)c, (void)d;
    for (int64_t i = 0; i < n; i++) y[i] = erff(x[i]);
}

/* The ox_own_eltwise ops (kernels.h). Written so that a NaN fails every compare and comes
 * through: onnxruntime keeps it in all four. */
static void clip_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float lo,
                      float hi)
{
    (void)row, (void)inner;
    for (int64_t i = 0; i < n; i++) { /* hi last: lo > hi gives hi, as ONNX says */
        float v = x[i] < lo ? lo : x[i];
        y[i] = v > hi ? hi : v;
    }
}

static void hardsigmoid_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner,
                             float alpha, float beta)
{
    (void)row, (void)inner;
    for (int64_t i = 0; i < n; i++) {
        float v = alpha * x[i] + beta;
        v = v < 0.f ? 0.f : v;
        y[i] = v > 1.f ? 1.f : v;
    }
}

static void exp_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                     float d)
{
    (void)row, (void)inner, (void)c, (void)d;
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

static void log_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                     float d)
{
    (void)row, (void)inner, (void)c, (void)d;
    for (int64_t i = 0; i < n; i++) y[i] = logf(x[i]);
}

/* alpha / x (ox_own_eltwise's pow): IEEE division, so 1 / 0 is inf and a NaN comes through */
static void reciprocal_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner,
                            float alpha, float d)
{
    (void)row, (void)inner, (void)d;
    for (int64_t i = 0; i < n; i++) y[i] = alpha / x[i];
}

/* x ** 3 (ox_own_eltwise's pow of exponent 3) as onnxruntime computes it: x * x * x */
static void cube_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                      float d)
{
    (void)row, (void)inner, (void)c, (void)d;
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i] * x[i];
}

/* Softplus as onnxruntime computes it: x + log1p(exp(-x)) above 0 (x itself for large x), so
 * only an infinite x gives an infinity; a NaN fails the compare and comes through */
static void softplus_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                          float d)
{
    (void)row, (void)inner, (void)c, (void)d;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = v > 0 ? v + log1pf(expf(-v)) : log1pf(expf(v));
    }
}

/* Where(IsNaN(x), C, x): every NaN (any payload, either sign) becomes c; everything else
 * (infinities, -0.0, denormals) is copied bit for bit. On the bits, so that no float compare
 * or move can touch a value. */
static void nan_replace_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner,
                             float c, float d)
{
    (void)row, (void)inner, (void)d;
    uint32_t cb;
    memcpy(&cb, &c, 4);
    const uint32_t *xs = (const uint32_t *)x;
    uint32_t *ys = (uint32_t *)y;
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = xs[i];
        ys[i] = (v & 0x7fffffffu) > 0x7f800000u ? cb : v;
    }
}

void nan_replace(float *x, int64_t n, float c)
{
    nan_replace_loop(x, x, n, 1, 1, c, 0.f);
}

/* oneDNN's (Log)Softmax gives NaN only where a row holds NaN or +inf (0 elsewhere); onnxruntime
 * and the ONNX reference give the whole row NaN (max - max is NaN, and so is every sum). In place,
 * on the plain result: a row with a NaN becomes all NaN. The result is read once more whole
 * (attention's scores: 54 MB a layer in Whisper's encoder), so the rows are shared between
 * the pool's threads and a contiguous row is checked on its bits, which vectorises. */
typedef struct {
    float *y;
    int64_t n, row, inner;
} nan_rows_job;

WIDE_LOOP static int row_has_nan(const float *r, int64_t len)
{
    const uint32_t *bits = (const uint32_t *)r;
    uint32_t worst = 0; /* the largest magnitude's bits: above +inf's only for a NaN */
    for (int64_t i = 0; i < len; i++) {
        uint32_t m = bits[i] & 0x7fffffffu;
        worst = m > worst ? m : worst;
    }
    return worst > 0x7f800000u;
}

static void nan_rows_part(void *arg)
{
    const nan_rows_job *j = arg;
    int64_t rows = j->n / (j->row * j->inner) * j->inner, t0, t1; /* (outer, inner) pairs */
    dl_share(rows, &t0, &t1);
    for (int64_t q = t0; q < t1; q++) {
        float *r = j->y + q / j->inner * j->row * j->inner + q % j->inner;
        int nan = 0;
        if (j->inner == 1) nan = row_has_nan(r, j->row);
        else
            for (int64_t i = 0; i < j->row; i++) nan |= r[i * j->inner] != r[i * j->inner];
        if (nan)
            for (int64_t i = 0; i < j->row; i++) r[i * j->inner] = NAN;
    }
}

typedef struct {
    int64_t n, row, inner;
    int threads;
} nan_rows_cfg;

static int nan_rows_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const nan_rows_cfg *c = cfg;
    nan_rows_job j = {ptrs[1], c->n, c->row, c->inner};
    dl_parallel(nan_rows_part, &j, dl_threads_for(c->n, c->threads));
    return -1;
}

/* The NaN rule above as a step after op's (Log)Softmax, on its plain row-major result (rows along
 * the op's axis). */
int add_softmax_nan_rows(pb *b, const ox_op *op)
{
    if (b->dry) return 0;
    int v = op->out, r = VAL(v)->ndim;
    const ox_view *vw = &b->views[v][b->nviews[v] - 1];
    if (!is_plain(b, v, vw->md))
        return ox_fail(b->e, "internal: node '%s' (%s): its result is not plain", op->name,
                       op->op_type);
    int64_t row = 1, inner = 1;
    for (int d = 0; d < r; d++) {
        if (d == op->axis) row = DIMS(v)[d];
        else if (d > op->axis) inner *= DIMS(v)[d];
    }
    nan_rows_cfg *c = owned_cfg(b, sizeof *c);
    if (!c) return 1;
    *c = (nan_rows_cfg){(int64_t)(D(dnnl_memory_desc_get_size)(vw->md) / sizeof(float)),
                        row > 0 ? row : 1, inner > 0 ? inner : 1, b->p->threads};
    int s = fn_step(b, nan_rows_fn, c, RUN_ALWAYS, "softmax nan rows");
    if (s < 0) return 1;
    return add_arg(b, s, DNNL_ARG_SRC, vw->buf, vw->md) ||
           add_arg(b, s, DNNL_ARG_DST, vw->buf, vw->md);
}

/* ---- Softmax along the last axis of a plain value, the backend's own ---------------------
 * oneDNN's softmax kept to one thread here (7.7 ms for attention's [1, 6, 1500, 1500] scores at
 * 1 thread, 9.8 at 2), then needed the NaN-row pass above. Here rows are shared between the
 * pool's threads; a row is read for its max, exp(x - max) written with its sum, then scaled by
 * 1 / sum, as onnxruntime computes it. A row holding a NaN or +inf, or all -inf, comes out all
 * NaN with no pass of its own (x - max or the sum is NaN). exp is Cephes' expf polynomial
 * (within 2 ulp; 0 below -87.3), every multiply-add fused, and each row's max and sum are kept
 * in 16 lanes reduced in one fixed order, so the AVX-512 and portable loops give the same
 * bits. */
#define SM_LANES 16

/* A loop over rows of `len` floats (Softmax's, ReduceMean's), the rows shared between the
 * threads: its settings, and one thread's job. */
typedef struct {
    int64_t rows, len;
    int threads;
    int rounded; /* Softmax: every reader rounds its results to bf16 (softmax_rows_rounded) */
} rows_cfg;

typedef struct {
    const rows_cfg *c;
    const float *x;
    float *y;
} rows_job;

static const float SM_LO = -87.33654475f, SM_HI = 88.72283905f, SM_LOG2E = 1.44269504088896341f,
                   SM_C1 = 0.693359375f, SM_C2 = -2.12194440e-4f;
static const float SM_P[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                              4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

static float sm_lanes_sum(const float *l)
{
    float t[SM_LANES];
    memcpy(t, l, sizeof t);
    for (int w = SM_LANES / 2; w > 0; w /= 2)
        for (int i = 0; i < w; i++) t[i] = t[i] + t[i + w];
    return t[0];
}

static float sm_lanes_max(const float *l)
{
    float m = l[0];
    for (int i = 1; i < SM_LANES; i++) m = l[i] > m ? l[i] : m;
    return m;
}

static float sm_exp(float x)
{
    if (x != x) return x;
    if (x < SM_LO) return 0.f; /* -inf and what underflows */
    float v = x > SM_HI ? SM_HI : x;
    float fx = floorf(fmaf(v, SM_LOG2E, 0.5f));
    float r = fmaf(-fx, SM_C2, fmaf(-fx, SM_C1, v));
    float p = SM_P[0];
    for (int i = 1; i < 6; i++) p = fmaf(p, r, SM_P[i]);
    float y = fmaf(p, r * r, r) + 1.f;
    uint32_t e = (uint32_t)((int32_t)fx + 127) << 23;
    float scale;
    memcpy(&scale, &e, 4);
    return y * scale;
}

static void softmax_rows_portable(const float *x, float *y, int64_t r0, int64_t r1, int64_t len)
{
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * len;
        float *yr = y + r * len, lane[SM_LANES];
        for (int i = 0; i < SM_LANES; i++) lane[i] = -INFINITY;
        for (int64_t i = 0; i < len; i++) /* as max_ps(lane, x): a NaN x is not taken */
            lane[i % SM_LANES] = lane[i % SM_LANES] > xr[i] ? lane[i % SM_LANES] : xr[i];
        float m = sm_lanes_max(lane);
        for (int i = 0; i < SM_LANES; i++) lane[i] = 0.f;
        for (int64_t i = 0; i < len; i++) {
            yr[i] = sm_exp(xr[i] - m);
            lane[i % SM_LANES] += yr[i];
        }
        float inv = 1.f / sm_lanes_sum(lane);
        for (int64_t i = 0; i < len; i++) yr[i] *= inv;
    }
}

#ifdef HAVE_SM_AVX512
__attribute__((target("avx512f"))) static __m512 sm_exp16(__m512 x)
{
    __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(SM_LO), _CMP_LT_OQ);
    /* clamped on both sides: a lane far below SM_LO (its result is 0 anyway) would overflow
     * the polynomial and the integer conversion, raising the floating-point flags that make
     * a guarded plan rerun strict (kernels.c run_plan); a NaN x stays NaN */
    __m512 v = _mm512_min_ps(_mm512_set1_ps(SM_HI), _mm512_max_ps(_mm512_set1_ps(SM_LO), x));
    __m512 fx = _mm512_roundscale_ps(
        _mm512_fmadd_ps(v, _mm512_set1_ps(SM_LOG2E), _mm512_set1_ps(0.5f)), _MM_FROUND_TO_NEG_INF);
    __m512 r =
        _mm512_fnmadd_ps(fx, _mm512_set1_ps(SM_C2), _mm512_fnmadd_ps(fx, _mm512_set1_ps(SM_C1), v));
    __m512 p = _mm512_set1_ps(SM_P[0]);
    for (int i = 1; i < 6; i++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(SM_P[i]));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.f));
    __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(fx), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~under, y, _mm512_castsi512_ps(e));
}

/* A row's first two softmax passes: e = exp(x - max(x)) into er (may be xr); returns
 * 1 / sum(e). */
__attribute__((target("avx512f"))) static float sm_exp_row(const float *xr, float *er, int64_t len)
{
    int64_t full = len / SM_LANES * SM_LANES;
    __mmask16 tail = (__mmask16)((1u << (len - full)) - 1u);
    float lane[SM_LANES];
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < full; i += SM_LANES) m = _mm512_max_ps(m, _mm512_loadu_ps(xr + i));
    if (tail) m = _mm512_mask_max_ps(m, tail, m, _mm512_maskz_loadu_ps(tail, xr + full));
    _mm512_storeu_ps(lane, m);
    __m512 mv = _mm512_set1_ps(sm_lanes_max(lane)), sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < full; i += SM_LANES) {
        __m512 e = sm_exp16(_mm512_sub_ps(_mm512_loadu_ps(xr + i), mv));
        _mm512_storeu_ps(er + i, e);
        sum = _mm512_add_ps(sum, e);
    }
    if (tail) {
        __m512 e = sm_exp16(_mm512_maskz_sub_ps(tail, _mm512_maskz_loadu_ps(tail, xr + full), mv));
        _mm512_mask_storeu_ps(er + full, tail, e);
        sum = _mm512_mask_add_ps(sum, tail, sum, e);
    }
    _mm512_storeu_ps(lane, sum);
    return 1.f / sm_lanes_sum(lane);
}

__attribute__((target("avx512f"))) static void
softmax_rows_avx512(const float *x, float *y, int64_t r0, int64_t r1, int64_t len)
{
    int64_t full = len / SM_LANES * SM_LANES;
    __mmask16 tail = (__mmask16)((1u << (len - full)) - 1u);
    for (int64_t r = r0; r < r1; r++) {
        float *yr = y + r * len;
        __m512 inv = _mm512_set1_ps(sm_exp_row(x + r * len, yr, len));
        for (int64_t i = 0; i < full; i += SM_LANES)
            _mm512_storeu_ps(yr + i, _mm512_mul_ps(_mm512_loadu_ps(yr + i), inv));
        if (tail)
            _mm512_mask_storeu_ps(yr + full, tail,
                                  _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, yr + full), inv));
    }
}
#endif

#ifdef HAVE_SM_AVX512
/* The AVX-512 loop where the CPU has it and oneDNN's own ISA cap (ONEDNN_MAX_CPU_ISA, read as
 * oneDNN reads it, once) allows AVX-512: a cap below it runs the portable loop, the same bits. */
static int sm_wide(void)
{
    static int wide = -1; /* a race writes the same value */
    if (wide < 0) {
        const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
        wide = __builtin_cpu_supports("avx512f") &&
               (!cap || !*cap || !strncasecmp(cap, "AVX512", 6) || !strcasecmp(cap, "ALL"));
    }
    return wide;
}
#endif

void softmax_rows(const float *x, float *y, int64_t r0, int64_t r1, int64_t len)
{
#ifdef HAVE_SM_AVX512
    if (sm_wide()) {
        softmax_rows_avx512(x, y, r0, r1, len);
        return;
    }
#endif
    softmax_rows_portable(x, y, r0, r1, len);
}

#ifdef HAVE_SM_AVX512
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* Whether the loops below may take their AVX-512 BF16 forms (sm_wide's cap applies). */
static int bf16_wide(void)
{
    static int wide = -1; /* a race writes the same value */
    if (wide < 0) wide = sm_wide() && __builtin_cpu_supports("avx512bf16");
    return wide;
}

BF16_TARGET static void round_rows_avx512(const float *x, int64_t rs, uint16_t *y, int64_t rows,
                                          int64_t cols)
{
    int64_t full = cols / SM_LANES * SM_LANES;
    __mmask16 tail = (__mmask16)((1u << (cols - full)) - 1u);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * rs;
        uint16_t *yr = y + r * cols;
        for (int64_t i = 0; i < cols; i += SM_LANES) {
            __mmask16 k = i < full ? (__mmask16)0xffff : tail;
            _mm256_mask_storeu_epi16(yr + i, k,
                                     (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, xr + i)));
        }
    }
}
#endif

void round_bf16(const float *x, int64_t rs, int64_t cs, uint16_t *y, int64_t rows, int64_t cols)
{
#ifdef HAVE_SM_AVX512
    if (cs == 1 && bf16_wide()) { /* the same rounding as bf16_bits, 16 at a time */
        round_rows_avx512(x, rs, y, rows, cols);
        return;
    }
#endif
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < cols; i++) y[r * cols + i] = bf16_bits(x[r * rs + i * cs]);
}

/* ---- attention's softmax under the bf16 hint ------------------------------------------------
 * Its results are rounded to bf16 for the product with V, so exp need not be Cephes' (2 ulp):
 * here 2^f on [-1/2, 1/2] by a degree-4 polynomial (relative error 2.7e-6, a thousandth of
 * bf16's rounding step) and the exponent applied by scalef: 0 below SMB_LO, a NaN kept. The
 * scores come chunk by chunk as the bf16 products write them (keys [j cw, j cw + w) of a
 * block's m rows at s + j m cw, rows w apart), and two passes read them: the max, then exp
 * with the sum, each exp rounded to bf16 straight into the product's operand; the caller
 * scales the product's rows by 1 / sum (the rows of Y are dv wide, the scores tk), which
 * spares a third pass and the float32 store of every exp. Max and sum are kept in four
 * vectors (key g in vector g / 16 % 4, lane g % 16: the chains of dependent adds were the
 * loop's bound), reduced in one fixed order. */
#define SMB_ACC 4
static const float SMB_LOG2E = 1.44269504088896341f;
/* Below -125 ln 2 the result is 0: p times 2^-126 could be a denormal, and a denormal costs
 * the loops that write and read it a microcode assist each (ViT's scores, whose rows spread
 * far, ran this softmax at half the speed of Cephes'); the values dropped are under 2e-38,
 * beside a row's largest, which is 1. */
static const float SMB_LO = -86.643397569993164f;
static const float SMB_P[5] = {0.9999992847442627f, 0.6931217908859253f, 0.240247443318367f,
                               0.05591785907745361f, 0.009570101276040077f};

static float smb_exp(float x)
{
    if (x != x) return x;
    if (x < SMB_LO) return 0.f;
    float t = x * SMB_LOG2E, n = nearbyintf(t), f = t - n, p = SMB_P[4];
    for (int i = 3; i >= 0; i--) p = fmaf(p, f, SMB_P[i]);
    return scalbnf(p, (int)n);
}

/* Chunk j of row r: its first score, its width. */
static const float *chunk_row(const float *s, int64_t m, int64_t r, int64_t tk, int64_t cw,
                              int64_t j, int64_t *w)
{
    *w = tk - j * cw < cw ? tk - j * cw : cw;
    return s + j * m * cw + r * *w;
}

/* The four vectors' lanes (v-th vector's lane i at l[v * 16 + i]) reduced: the vectors
 * pairwise, then the lanes. */
static float smb_sum(const float *l)
{
    float t[SM_LANES];
    for (int i = 0; i < SM_LANES; i++)
        t[i] = (l[i] + l[SM_LANES + i]) + (l[2 * SM_LANES + i] + l[3 * SM_LANES + i]);
    return sm_lanes_sum(t);
}

/* A row's 1 / sum, or (its sum NaN: every probability NaN) 1 with the row's operand all c
 * when nanrep. */
static float smb_inv(float sum, uint16_t *yr, int64_t tk, int nanrep, float c)
{
    if (sum == sum || !nanrep) return 1.f / sum;
    uint16_t cb = bf16_bits(c);
    for (int64_t i = 0; i < tk; i++) yr[i] = cb;
    return 1.f;
}

static void softmax_chunks_portable(const float *s, int64_t m, int64_t tk, int64_t cw, uint16_t *y,
                                    float *inv, float *yf, int nanrep, float c)
{
    int64_t nch = (tk + cw - 1) / cw, w;
    for (int64_t r = 0; r < m; r++) {
        float lane[SMB_ACC * SM_LANES];
        for (int i = 0; i < SMB_ACC * SM_LANES; i++) lane[i] = -INFINITY;
        for (int64_t j = 0; j < nch; j++) { /* chunks start at multiples of 64 keys */
            const float *x = chunk_row(s, m, r, tk, cw, j, &w);
            for (int64_t i = 0; i < w; i++) {
                float *l = &lane[i % (SMB_ACC * SM_LANES)];
                *l = *l > x[i] ? *l : x[i]; /* as max_ps(lane, x) */
            }
        }
        float mx = sm_lanes_max(lane);
        for (int v = 1; v < SMB_ACC; v++) {
            float t = sm_lanes_max(lane + v * SM_LANES);
            mx = mx > t ? mx : t;
        }
        for (int i = 0; i < SMB_ACC * SM_LANES; i++) lane[i] = 0.f;
        for (int64_t j = 0; j < nch; j++) {
            const float *x = chunk_row(s, m, r, tk, cw, j, &w);
            for (int64_t i = 0; i < w; i++) {
                float e = smb_exp(x[i] - mx);
                lane[i % (SMB_ACC * SM_LANES)] += e;
                if (yf) yf[r * tk + j * cw + i] = e;
                else y[r * tk + j * cw + i] = bf16_bits(e);
            }
        }
        if (yf) { /* normalized in place */
            float v = 1.f / smb_sum(lane);
            for (int64_t i = 0; i < tk; i++) yf[r * tk + i] *= v;
        } else {
            inv[r] = smb_inv(smb_sum(lane), y + r * tk, tk, nanrep, c);
        }
    }
}

#ifdef HAVE_SM_AVX512
BF16_TARGET static __m512 smb_exp16(__m512 x)
{
    __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(SMB_LO), _CMP_LT_OQ);
    /* clamped below, as sm_exp16 is (no flag raised for a lane whose result is 0 anyway) */
    __m512 t = _mm512_mul_ps(_mm512_max_ps(_mm512_set1_ps(SMB_LO), x), _mm512_set1_ps(SMB_LOG2E));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n), p = _mm512_set1_ps(SMB_P[4]);
    for (int i = 3; i >= 0; i--) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(SMB_P[i]));
    return _mm512_maskz_scalef_ps((__mmask16)~under, p, n);
}

static __mmask16 smb_mask(int64_t left)
{
    return left >= SM_LANES ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

/* One vector of keys [i, i + 16) of a chunk's row (k: those in it) into the accumulator of
 * its lane group, by name so that the four stay in registers. */
#define SMB_TO_ACC(i, op)                   \
    do {                                    \
        switch ((i) / SM_LANES % SMB_ACC) { \
        case 0: a0 = op(a0); break;         \
        case 1: a1 = op(a1); break;         \
        case 2: a2 = op(a2); break;         \
        default: a3 = op(a3);               \
        }                                   \
    } while (0)

BF16_TARGET static void softmax_chunks_avx512(const float *s, int64_t m, int64_t tk, int64_t cw,
                                              uint16_t *y, float *inv, float *yf, int nanrep,
                                              float c)
{
    int64_t nch = (tk + cw - 1) / cw, w;
    for (int64_t r = 0; r < m; r++) {
        __m512 a0 = _mm512_set1_ps(-INFINITY), a1 = a0, a2 = a0, a3 = a0, x0, e;
        __mmask16 k;
        for (int64_t j = 0; j < nch; j++) {
            const float *x = chunk_row(s, m, r, tk, cw, j, &w);
            int64_t i = 0;
            for (; i + SMB_ACC * SM_LANES <= w; i += SMB_ACC * SM_LANES) {
                a0 = _mm512_max_ps(a0, _mm512_loadu_ps(x + i));
                a1 = _mm512_max_ps(a1, _mm512_loadu_ps(x + i + 16));
                a2 = _mm512_max_ps(a2, _mm512_loadu_ps(x + i + 32));
                a3 = _mm512_max_ps(a3, _mm512_loadu_ps(x + i + 48));
            }
            for (; i < w; i += SM_LANES) {
                k = smb_mask(w - i);
                x0 = _mm512_maskz_loadu_ps(k, x + i);
#define SMB_MAX(a) _mm512_mask_max_ps(a, k, a, x0)
                SMB_TO_ACC(i, SMB_MAX);
            }
        }
        /* which NaN a row of NaN results carries is all the order could change here */
        __m512 mv = _mm512_set1_ps(
            ox_lanes_max16(_mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3))));
        a0 = a1 = a2 = a3 = _mm512_setzero_ps();
        for (int64_t j = 0; j < nch; j++) {
            const float *x = chunk_row(s, m, r, tk, cw, j, &w);
            uint16_t *yr = yf ? NULL : y + r * tk + j * cw;
            float *fr = yf ? yf + r * tk + j * cw : NULL;
            int64_t i = 0;
#define SMB_EXP_TO(a, o)                                          \
    e = smb_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + o), mv)); \
    a = _mm512_add_ps(a, e);                                      \
    if (fr) _mm512_storeu_ps(fr + i + o, e);                      \
    else _mm256_storeu_si256((__m256i *)(yr + i + o), (__m256i)_mm512_cvtneps_pbh(e))
            for (; i + SMB_ACC * SM_LANES <= w; i += SMB_ACC * SM_LANES) {
                SMB_EXP_TO(a0, 0);
                SMB_EXP_TO(a1, 16);
                SMB_EXP_TO(a2, 32);
                SMB_EXP_TO(a3, 48);
            }
            for (; i < w; i += SM_LANES) {
                k = smb_mask(w - i);
                e = smb_exp16(_mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + i), mv));
                if (fr) _mm512_mask_storeu_ps(fr + i, k, e);
                else _mm256_mask_storeu_epi16(yr + i, k, (__m256i)_mm512_cvtneps_pbh(e));
#define SMB_ADD(a) _mm512_mask_add_ps(a, k, a, e)
                SMB_TO_ACC(i, SMB_ADD);
            }
        }
        /* smb_sum's order, in registers */
        float sum = ox_lanes_sum16(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
        if (!yf) {
            inv[r] = smb_inv(sum, y + r * tk, tk, nanrep, c);
            continue;
        }
        __m512 v = _mm512_set1_ps(1.f / sum); /* normalized in place */
        float *fr = yf + r * tk;
        for (int64_t i = 0; i < tk; i += SM_LANES) {
            __mmask16 k = smb_mask(tk - i);
            _mm512_mask_storeu_ps(fr + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, fr + i), v));
        }
    }
}
#undef SMB_TO_ACC
#undef SMB_MAX
#undef SMB_EXP_TO
#undef SMB_ADD
#endif

void softmax_chunks_bf16(const float *s, int64_t m, int64_t tk, int64_t cw, uint16_t *y, float *inv,
                         int nanrep, float c)
{
#ifdef HAVE_SM_AVX512
    if (bf16_wide()) {
        softmax_chunks_avx512(s, m, tk, cw, y, inv, NULL, nanrep, c);
        return;
    }
#endif
    softmax_chunks_portable(s, m, tk, cw, y, inv, NULL, nanrep, c);
}

/* Softmax rows r0..r1 of len floats whose results every reader rounds to bf16 (the
 * probabilities of attention run op by op under the hint, read by a product of two
 * activations): the passes above on one chunk, float32 results, normalized in place. */
static void softmax_rows_rounded(const float *x, float *y, int64_t r0, int64_t r1, int64_t len)
{
    const float *s = x + r0 * len;
    float *yf = y + r0 * len;
#ifdef HAVE_SM_AVX512
    if (bf16_wide()) {
        softmax_chunks_avx512(s, r1 - r0, len, len, NULL, NULL, yf, 0, 0.f);
        return;
    }
#endif
    softmax_chunks_portable(s, r1 - r0, len, len, NULL, NULL, yf, 0, 0.f);
}

static void softmax_part(void *arg)
{
    const rows_job *j = arg;
    int64_t t0, t1;
    dl_share(j->c->rows, &t0, &t1);
    if (j->c->rounded) softmax_rows_rounded(j->x, j->y, t0, t1, j->c->len);
    else softmax_rows(j->x, j->y, t0, t1, j->c->len);
}

/* part (softmax_part, mean_part) over the rows of a step's args src and dst, on the threads */
static int rows_run(const rows_cfg *c, void *const *ptrs, void (*part)(void *))
{
    rows_job j = {c, ptrs[0], ptrs[1]};
    dl_parallel(part, &j, dl_threads_for(c->rows * c->len, c->threads));
    return -1;
}

static int softmax_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    return rows_run(cfg, ptrs, softmax_part);
}

/* op's result from its input by a step of the backend's own: fn on cfg (size bytes, copied
 * into memory the plan owns), with the input as src, then op's inputs 1 to nparams (plain: a
 * normalisation's scale and shift), then the result as dst. The input is read, and the result
 * written, in `layout` (the input's home layout) when given, else plain. */
int build_step_in(pb *b, const ox_op *op, const_dnnl_memory_desc_t layout, ox_fn fn,
                  const void *cfg, size_t size, const char *what, int nparams)
{
    return build_step_to(b, op, layout, dnnl_data_type_undef, fn, cfg, size, what, nparams);
}

int build_step_to(pb *b, const ox_op *op, const_dnnl_memory_desc_t layout, dnnl_data_type_t yt,
                  ox_fn fn, const void *cfg, size_t size, const char *what, int nparams)
{
    int x = op->in[0], xbuf, reorder_out, pbuf[2];
    dnnl_memory_desc_t md = layout ? clone_md(layout) : value_plain(b, op->out, VAL(op->out)->ndim);
    /* the result's layout in type yt, where it is not the input's */
    dnnl_memory_desc_t ymd = yt == dnnl_data_type_undef || !md || md_type(md) == yt
                                 ? clone_md(md)
                                 : retyped_md(b, op->out, md, yt);
    int rc = 1;
    if (nparams > 2) {
        ox_fail(b->e, "node '%s': a step of the backend's own takes at most 2 parameters",
                op->name);
        goto done;
    }
    if (!md || !ymd) {
        ox_fail(b->e, "oneDNN could not create a memory descriptor");
        goto done;
    }
    if (b->dry) {
        rc = add_view(b, op->out, ymd, 0);
        goto done;
    }
    if (layout ? get_view(b, x, layout, &xbuf) : plain_buf(b, x, &xbuf)) goto done;
    for (int i = 0; i < nparams; i++)
        if (plain_buf(b, op->in[1 + i], &pbuf[i])) goto done;
    int dbuf = dst_buf(b, op, ymd, &reorder_out), s;
    void *owned = dbuf < 0 ? NULL : owned_cfg(b, size);
    if (!owned) goto done;
    memcpy(owned, cfg, size);
    if ((s = fn_step(b, fn, owned, RUN_ALWAYS, what)) < 0 || add_arg(b, s, DNNL_ARG_SRC, xbuf, md))
        goto done;
    for (int i = 0; i < nparams; i++) {
        int v = op->in[1 + i];
        dnnl_memory_desc_t pm = value_plain(b, v, VAL(v)->ndim);
        int bad = !pm || add_arg(b, s, DNNL_ARG_SRC_1 + i, pbuf[i], pm);
        md_free(pm);
        if (bad) goto done;
    }
    rc = add_arg(b, s, DNNL_ARG_DST, dbuf, ymd) || set_result(b, op, dbuf, ymd, reorder_out);
done:
    md_free(md);
    md_free(ymd);
    return rc;
}

int build_plain_step(pb *b, const ox_op *op, ox_fn fn, const void *cfg, size_t size,
                     const char *what, int nparams)
{
    return build_step_in(b, op, NULL, fn, cfg, size, what, nparams);
}

static int64_t numel(pb *b, int v)
{
    int64_t n = 1;
    for (int d = 0; d < VAL(v)->ndim; d++) n *= DIMS(v)[d];
    return n;
}

/* How op o reads v: 0 not at all, 1 only as a MatMul's operand (which rounds it to bf16 under
 * the hint on AMX: oneDNN's bf16 fpmath mode, or the packed layer's bf16 input), -1 else. */
static int reads_to_round(const ox_op *o, int v)
{
    int r = 0;
    for (int k = 0; k < o->npost; k++)
        if (o->post[k].kind == POST_SUM && o->post[k].val == v) return -1;
    for (int k = 0; k < o->nin; k++)
        if (o->in[k] == v) {
            if (o->kind != OP_MATMUL || k > 1) return -1;
            r = 1;
        }
    return r;
}

/* Whether every reader of v rounds it to bf16 (the ops an attention op holds, which run one
 * by one when it is short, included), v not the kernel's output. */
static int read_rounded(pb *b, int v)
{
    if (!bf16_operands(b) || v == b->g->out) return 0;
    int readers = 0;
    for (int i = 0; i < b->g->norder; i++) {
        const ox_op *o = &b->g->ops[b->g->order[i]];
        int r = reads_to_round(o, v);
        for (int k = 0; o->kind == OP_ATTENTION && k < ATT_NSUB && r >= 0; k++) {
            int h = o->sub[k] >= 0 ? reads_to_round(&b->g->ops[o->sub[k]], v) : 0;
            r = h < 0 ? -1 : r + h;
        }
        if (r < 0) return 0;
        readers += r;
    }
    return readers > 0;
}

/* Softmax (not LogSoftmax) along the last axis, with nothing fused after it: the loop above
 * over the plain values, or with the cheaper exp where its results are rounded to bf16. */
int build_own_softmax(pb *b, const ox_op *op)
{
    int64_t len = DIMS(op->out)[VAL(op->out)->ndim - 1], n = numel(b, op->out);
    rows_cfg c = {len > 0 ? n / len : 0, len, b->p->threads, read_rounded(b, op->out)};
    return build_plain_step(b, op, softmax_fn, &c, sizeof c,
                            c.rounded ? "softmax, read as bf16" : "softmax", 0);
}

/* ReduceMean over the last axis (OP_REDMEAN): each row's mean, summed in double (within half
 * an ulp of the exact mean; onnxruntime's float sums are within a few), the rows shared
 * between the threads as Softmax's are. */
float row_mean(const float *x, int64_t len, int squares)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0; /* four chains: the loop is not one add's latency */
    int64_t i = 0;
#define TERM(v) (squares ? (double)((v) * (v)) : (double)(v)) /* a square rounded to float */
    for (; i + 4 <= len; i += 4) {
        s0 += TERM(x[i]);
        s1 += TERM(x[i + 1]);
        s2 += TERM(x[i + 2]);
        s3 += TERM(x[i + 3]);
    }
    for (; i < len; i++) s0 += TERM(x[i]);
#undef TERM
    return (float)((s0 + s1 + s2 + s3) / (double)len);
}

static void mean_part(void *arg)
{
    const rows_job *j = arg;
    int64_t t0, t1, len = j->c->len;
    dl_share(j->c->rows, &t0, &t1);
    for (int64_t r = t0; r < t1; r++) j->y[r] = row_mean(j->x + r * len, len, 0);
}

static int mean_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    return rows_run(cfg, ptrs, mean_part);
}

int build_reduce_mean(pb *b, const ox_op *op)
{
    int64_t len = DIMS(op->in[0])[VAL(op->in[0])->ndim - 1], n = numel(b, op->in[0]);
    rows_cfg c = {len > 0 ? n / len : 0, len, b->p->threads};
    return build_plain_step(b, op, mean_fn, &c, sizeof c, "reduce mean", 0);
}

/* Erf outside a GELU: the C library's erff over the plain values (oneDNN has no erf of its own);
 * Where(IsNaN(x), C, x) (OP_NANREP): nan_replace_loop over them. */
int build_loop(pb *b, const ox_op *op)
{
    int nan = op->kind == OP_NANREP;
    ox_loop_cfg l = {
        nan ? nan_replace_loop : erf_loop, numel(b, op->out), 1, 1, op->alpha, 0.f, b->p->threads};
    return build_plain_step(b, op, loop_fn, &l, sizeof l, nan ? "nan replacement" : "erf", 0);
}

/* The layout an element-for-element loop reads value x in: the one x has when it is dense, else
 * plain (a blocked layout's padding would not hold f(0)), made into *pm, which the caller
 * destroys; *n: x's element count. NULL, with a message, when oneDNN cannot make it. */
static const_dnnl_memory_desc_t loop_layout(pb *b, int x, dnnl_memory_desc_t *pm, size_t *n)
{
    const_dnnl_memory_desc_t md = home(b, x);
    *n = 1;
    for (int d = 0; d < VAL(x)->ndim; d++) *n *= (size_t)DIMS(x)[d];
    if ((size_t)D(dnnl_memory_desc_get_size)(md) == *n * sizeof(float)) return md;
    if (!(*pm = value_plain(b, x, VAL(x)->ndim)))
        ox_fail(b->e, "oneDNN could not create a memory descriptor");
    return *pm;
}

/* An ox_own_eltwise op: its loop element for element over its input in the layout that input
 * has (the result takes it too), when that layout is dense; a blocked one whose padding would
 * no longer hold zeros (f(0) != 0: log(0) is -inf) is read in plain layout instead. */
int build_own_eltwise(pb *b, const ox_op *op)
{
    int x = op->in[0], xbuf, reorder_out;
    dnnl_memory_desc_t pm = NULL;
    size_t n;
    const_dnnl_memory_desc_t md = loop_layout(b, x, &pm, &n);
    if (!md) return 1;
    int rc = 1;
    if (b->dry) {
        rc = add_view(b, op->out, md, 0);
        goto done;
    }
    if (get_view(b, x, md, &xbuf)) goto done;
    ox_loop loop = op->alg == dnnl_eltwise_clip          ? clip_loop
                   : op->alg == dnnl_eltwise_hardsigmoid ? hardsigmoid_loop
                   : op->alg == dnnl_eltwise_exp         ? exp_loop
                   : op->alg == dnnl_eltwise_pow ? op->beta == 3.f ? cube_loop : reciprocal_loop
                   : op->alg == dnnl_eltwise_soft_relu ? softplus_loop
                                                       : log_loop;
    int dbuf = dst_buf(b, op, md, &reorder_out), s;
    if (dbuf < 0 ||
        (s = loop_step(b, loop, (int64_t)n, 1, 1, op->alpha, op->beta, op->op_type)) < 0)
        goto done;
    rc = add_arg(b, s, DNNL_ARG_SRC, xbuf, md) || add_arg(b, s, DNNL_ARG_DST, dbuf, md) ||
         set_result(b, op, dbuf, md, reorder_out);
done:
    md_free(pm);
    return rc;
}

/* OP_QDQ (graph.c fake_quant), y = (saturate(round(x / s0) + z0) - z1) * s1: the cpu backend's
 * QuantizeLinear and DequantizeLinear in one pass, with their arithmetic (the same bits),
 * rounding as its quant8 does: x / s0 clamped to [-1024, 1024] (no saturated result changes)
 * and rounded to even by adding and subtracting 1.5 * 2^23; a NaN gives the lowest integer. */
typedef struct {
    int64_t n;
    float s0, z0, s1, lo, hi;
    int32_t z1;
    int threads;
} ox_qdq;

typedef struct {
    const ox_qdq *q;
    const float *x;
    float *y;
} qdq_job;

WIDE_LOOP static void qdq_part(void *arg)
{
    const qdq_job *j = arg;
    const ox_qdq *q = j->q;
    const float *x = j->x;
    float *y = j->y;
    const float s0 = q->s0, z0 = q->z0, s1 = q->s1, lo = q->lo, hi = q->hi;
    const int32_t z1 = q->z1;
    int64_t t0, t1;
    dl_share(q->n, &t0, &t1);
    for (int64_t i = t0; i < t1; i++) {
        float v = x[i] / s0;
        v = v < -1024.f ? -1024.f : v > 1024.f ? 1024.f : v;
        float r = (v + 12582912.f) - 12582912.f + z0;
        r = r != r ? lo : r < lo ? lo : r > hi ? hi : r;
        y[i] = (float)((int32_t)r - z1) * s1;
    }
}

static int qdq_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const ox_qdq *q = cfg;
    qdq_job j = {q, ptrs[0], ptrs[1]};
    dl_parallel(qdq_part, &j, dl_threads_for(q->n, q->threads));
    return -1;
}

/* OP_QDQ element for element over its input in the layout that input has (the result takes it
 * too) when that layout is dense, else plain (a blocked layout's padding: f(0) need not be 0). */
int build_qdq(pb *b, const ox_op *op)
{
    int x = op->in[0], xbuf, reorder_out, s;
    dnnl_memory_desc_t pm = NULL;
    size_t n;
    const_dnnl_memory_desc_t md = loop_layout(b, x, &pm, &n);
    if (!md) return 1;
    int rc = 1;
    if (b->dry) {
        rc = add_view(b, op->out, md, 0);
        goto done;
    }
    ox_qdq *q = owned_cfg(b, sizeof *q);
    if (!q || get_view(b, x, md, &xbuf)) goto done;
    *q = (ox_qdq){.n = (int64_t)n,
                  .s0 = op->qscale[0],
                  .z0 = (float)op->qzp[0],
                  .s1 = op->qscale[1],
                  .lo = op->qs8 ? -128.f : 0.f,
                  .hi = op->qs8 ? 127.f : 255.f,
                  .z1 = op->qzp[1],
                  .threads = b->p->threads};
    int dbuf = dst_buf(b, op, md, &reorder_out);
    if (dbuf < 0 || (s = fn_step(b, qdq_fn, q, RUN_ALWAYS, "quantize-dequantize")) < 0) goto done;
    rc = add_arg(b, s, DNNL_ARG_SRC, xbuf, md) || add_arg(b, s, DNNL_ARG_DST, dbuf, md) ||
         set_result(b, op, dbuf, md, reorder_out);
done:
    md_free(pm);
    return rc;
}
