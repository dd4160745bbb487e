/* Single-precision GEMM: C = alpha * op(A) * op(B) + beta * C, row-major.
 *
 * Our own kernel rather than a BLAS call because the answer must not depend on where an element
 * sits. Optimised BLAS kernels (OpenBLAS's among them) sum edge tiles and interior tiles in
 * different orders, and pick kernels by CPU (OPENBLAS_CORETYPE): equal weight rows then give
 * outputs a few ulps apart, a thread count that moves tile edges moves results, and a model
 * whose huge, equal logits feed a softmax flips from uniform to one-hot. Here every element of
 * C is computed by the same instructions: one micro-kernel for every tile (edges are packed
 * with zeros into full tiles), K summed in order within fixed KC blocks that depend only on K.
 * So results are identical whatever the row, the tiling or the thread count.
 *
 * Structure (after BLIS / Goto): for each NC column block, for each KC depth block, pack
 * op(B) into NR-wide panels; for each MC row block pack op(A) into MR-tall panels; run the
 * MR x NR micro-kernel over the tiles. One x86-64 kernel with AVX2+FMA, chosen at run time,
 * and a portable C kernel (vectorised by the compiler) for everything else. */
#include "nnc.h"

#include <stdlib.h>

#define MR NNC_GEMM_MR
#define NR NNC_GEMM_NR
#define KC 256
/* B rows the tiles ask for ahead of their loads: a panel's rows cross a 4 KB page every 64
 * steps, where the hardware's prefetcher stops and starts again (a decoder's projection onto
 * its vocabulary, 16 rows x 512 x 32000 on 2 threads: 2.16 -> 1.6 ms; one row 1.16 -> 1.01) */
#define BPF 16
#define TPF 48 /* B rows ahead for tile_tall_avx512 */
#define MC 96  /* multiple of MR */
#define NC 1024 /* multiple of NR */

typedef void (*ukernel_fn)(int64_t kc, const float *a, const float *b, float *c);

/* c[MR][NR] = sum over k of a[k][0..MR) x b[k][0..NR), k in order, from zero. */
static void ukernel_c(int64_t kc, const float *a, const float *b, float *c)
{
    float acc[MR][NR] = {{0}};
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR)
        for (int i = 0; i < MR; i++) {
            const float av = a[i];
            for (int j = 0; j < NR; j++) acc[i][j] += av * b[j];
        }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) c[i * NR + j] = acc[i][j];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_KERNEL 1

/* The 6x16 product of one packed A panel and one packed B panel over kc steps, into the
 * twelve accumulators it declares (c<r>0, c<r>1: row r, columns 0-7 and 8-15). A macro, not a
 * function, so both kernels below keep the accumulators in registers. */
#define UKERNEL_6X16_PRODUCT(kc, a, b)                                     \
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();           \
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();           \
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();           \
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();           \
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();           \
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();           \
    for (int64_t k = 0; k < (kc); k++, (a) += MR, (b) += NR) {             \
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps((b) + 8); \
        __m256 av;                                                         \
        av = _mm256_broadcast_ss((a) + 0);                                 \
        c00 = _mm256_fmadd_ps(av, b0, c00);                                \
        c01 = _mm256_fmadd_ps(av, b1, c01);                                \
        av = _mm256_broadcast_ss((a) + 1);                                 \
        c10 = _mm256_fmadd_ps(av, b0, c10);                                \
        c11 = _mm256_fmadd_ps(av, b1, c11);                                \
        av = _mm256_broadcast_ss((a) + 2);                                 \
        c20 = _mm256_fmadd_ps(av, b0, c20);                                \
        c21 = _mm256_fmadd_ps(av, b1, c21);                                \
        av = _mm256_broadcast_ss((a) + 3);                                 \
        c30 = _mm256_fmadd_ps(av, b0, c30);                                \
        c31 = _mm256_fmadd_ps(av, b1, c31);                                \
        av = _mm256_broadcast_ss((a) + 4);                                 \
        c40 = _mm256_fmadd_ps(av, b0, c40);                                \
        c41 = _mm256_fmadd_ps(av, b1, c41);                                \
        av = _mm256_broadcast_ss((a) + 5);                                 \
        c50 = _mm256_fmadd_ps(av, b0, c50);                                \
        c51 = _mm256_fmadd_ps(av, b1, c51);                                \
    }

__attribute__((target("avx2,fma"))) static void ukernel_avx2(int64_t kc, const float *a,
                                                             const float *b, float *c)
{
    UKERNEL_6X16_PRODUCT(kc, a, b)
    _mm256_store_ps(c + 0 * NR, c00);
    _mm256_store_ps(c + 0 * NR + 8, c01);
    _mm256_store_ps(c + 1 * NR, c10);
    _mm256_store_ps(c + 1 * NR + 8, c11);
    _mm256_store_ps(c + 2 * NR, c20);
    _mm256_store_ps(c + 2 * NR + 8, c21);
    _mm256_store_ps(c + 3 * NR, c30);
    _mm256_store_ps(c + 3 * NR + 8, c31);
    _mm256_store_ps(c + 4 * NR, c40);
    _mm256_store_ps(c + 4 * NR + 8, c41);
    _mm256_store_ps(c + 5 * NR, c50);
    _mm256_store_ps(c + 5 * NR + 8, c51);
}

/* The same products as ukernel_avx2, stored straight into a full MR x NR tile of C (row stride
 * ldc): added to what C holds unless first, then, when ep is given, the epilogue with the same
 * operations store_tile does (max(0, v) keeps a NaN and -0 as v < 0 ? 0 : v does). */
__attribute__((target("avx2,fma"))) static void
ukernel_avx2_c(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int first,
               const nnc_gemm_epi *ep, int64_t r0, int64_t c0)
{
    UKERNEL_6X16_PRODUCT(kc, a, b)
    const __m256 v[2 * MR] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    const int kind = ep && ep->act ? ep->act->kind : ACT_NONE;
    const __m256 zero = _mm256_setzero_ps();
    const __m256 lo = _mm256_set1_ps(ep && ep->act ? ep->act->a : 0.f);
    const __m256 hi = _mm256_set1_ps(ep && ep->act ? ep->act->b : 0.f);
    _Alignas(32) float g[MR * NR];
    for (int i = 0; i < MR; i++) {
        float *row = c + i * ldc;
        __m256 x[2] = {v[2 * i], v[2 * i + 1]};
        for (int h = 0; h < 2; h++) {
            if (!first) x[h] = _mm256_add_ps(_mm256_loadu_ps(row + 8 * h), x[h]);
            if (ep) {
                const __m256 bb = _mm256_set1_ps(ep->bias ? ep->bias[r0 + i] : 0.f);
                if (ep->col_bias)
                    x[h] = _mm256_add_ps(x[h], _mm256_loadu_ps(ep->col_bias + c0 + 8 * h));
                if (ep->res)
                    x[h] = _mm256_add_ps(
                        x[h], _mm256_add_ps(
                                  bb, _mm256_loadu_ps(ep->res + (r0 + i) * ep->ldr + c0 + 8 * h)));
                else if (ep->bias) x[h] = _mm256_add_ps(x[h], bb);
                if (kind == ACT_RELU) {
                    x[h] = _mm256_max_ps(zero, x[h]);
                } else if (kind == ACT_CLIP) {
                    x[h] = _mm256_blendv_ps(x[h], lo, _mm256_cmp_ps(x[h], lo, _CMP_LT_OQ));
                    x[h] = _mm256_blendv_ps(x[h], hi, _mm256_cmp_ps(x[h], hi, _CMP_GT_OQ));
                } else if (kind == ACT_LEAKY) {
                    x[h] = _mm256_blendv_ps(_mm256_mul_ps(x[h], lo), x[h],
                                            _mm256_cmp_ps(x[h], zero, _CMP_GE_OQ));
                }
            }
            if (kind == ACT_GELU_ERF) _mm256_store_ps(g + i * NR + 8 * h, x[h]);
            else _mm256_storeu_ps(row + 8 * h, x[h]);
        }
    }
    if (kind ==
        ACT_GELU_ERF) { /* the whole tile in one call: the vectorised loop runs long enough */
        nnc_vgelu_erf(g, g, MR * NR, ep->act->a, ep->act->b != 0.f);
        for (int i = 0; i < MR; i++) {
            _mm256_storeu_ps(c + i * ldc, _mm256_load_ps(g + i * NR));
            _mm256_storeu_ps(c + i * ldc + 8, _mm256_load_ps(g + i * NR + 8));
        }
    }
}

/* ---- AVX-512: up to 12 x 32 of C per call ---------------------------------------------- *
 * Two packed A panels (12 rows) by two packed B panels (32 columns) in 24 zmm accumulators,
 * so each B load and A broadcast feeds more FMAs than the 6x16 kernel's. Each element is still
 * fma(a[k], b[k], acc) for k in order from zero, the same instruction per lane as the AVX2
 * kernel, so the two kernels give bit-identical results; rows and columns past the tile's
 * edge (zero padding in the packed panels) are summed and not stored, columns by mask. */
#define HAVE_AVX512_KERNEL 1

/* store_tile's epilogue on one vector: x (the block's sum) plus what C held unless first, then
 * the column bias, the row bias with the residual, the activation; prev, cb and res are what
 * the caller loaded from C and the epilogue's operands for these lanes. */
__attribute__((target("avx512f"), always_inline)) static inline __m512
epi_values(__m512 x, int first, __m512 prev, const nnc_gemm_epi *ep, int kind, __m512 lo, __m512 hi,
           float bias, const __m512 *cb, const __m512 *res)
{
    const __m512 zero = _mm512_setzero_ps();
    if (!first) x = _mm512_add_ps(prev, x);
    if (!ep) return x;
    const __m512 bb = _mm512_set1_ps(bias);
    if (cb) x = _mm512_add_ps(x, *cb);
    if (res) x = _mm512_add_ps(x, _mm512_add_ps(bb, *res));
    else if (ep->bias) x = _mm512_add_ps(x, bb);
    if (kind == ACT_RELU) {
        x = _mm512_max_ps(zero, x);
    } else if (kind == ACT_CLIP) {
        x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), x, lo);
        x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), x, hi);
    } else if (kind == ACT_LEAKY) {
        x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GE_OQ), _mm512_mul_ps(x, lo), x);
    }
    return x;
}

/* The same for lanes mk of C at row (contiguous), its operands at res and cb. */
__attribute__((target("avx512f"), always_inline)) static inline __m512
epi_avx512(__m512 x, const float *row, __mmask16 mk, int first, const nnc_gemm_epi *ep, int kind,
           __m512 lo, __m512 hi, float bias, const float *res, const float *cb)
{
    const __m512 prev = first ? x : _mm512_maskz_loadu_ps(mk, row);
    const __m512 r = res ? _mm512_maskz_loadu_ps(mk, res) : x,
                 c = cb ? _mm512_maskz_loadu_ps(mk, cb) : x;
    return epi_values(x, first, prev, ep, kind, lo, hi, bias, cb ? &c : NULL, res ? &r : NULL);
}

/* Row r0 of a tile into C (row): the sums of NB 16-column slots from column c0, w of them
 * valid, with store_tile's epilogue. */
__attribute__((target("avx512f"), always_inline)) static inline void
store_row_avx512(const __m512 *acc, const int NB, float *row, int64_t w, int first,
                 const nnc_gemm_epi *ep, int64_t r0, int64_t c0)
{
    const int kind = ep && ep->act ? ep->act->kind : ACT_NONE;
    const __m512 lo = _mm512_set1_ps(ep && ep->act ? ep->act->a : 0.f);
    const __m512 hi = _mm512_set1_ps(ep && ep->act ? ep->act->b : 0.f);
    const float bias = ep && ep->bias ? ep->bias[r0] : 0.f;
    for (int q = 0; q < NB; q++) {
        int64_t wq = w - 16 * q;
        if (wq <= 0) break;
        const __mmask16 mk = wq >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << wq) - 1);
        const float *res = ep && ep->res ? ep->res + r0 * ep->ldr + c0 + 16 * q : NULL;
        const float *cb = ep && ep->col_bias ? ep->col_bias + c0 + 16 * q : NULL;
        __m512 x = epi_avx512(acc[q], row + 16 * q, mk, first, ep, kind, lo, hi, bias, res, cb);
        if (kind == ACT_GELU_ERF) { /* the vectorised erf over the row's valid columns */
            _Alignas(64) float g[16];
            _mm512_store_ps(g, x);
            nnc_vgelu_erf(g, g, wq < 16 ? wq : 16, ep->act->a, ep->act->b != 0.f);
            x = _mm512_load_ps(g);
        }
        _mm512_mask_storeu_ps(row + 16 * q, mk, x);
    }
}

/* A whole row of NB 16-column slots into C (row) from column c0, with store_row_avx512's
 * arithmetic unmasked: the common tile, unrolled so that its accumulators stay in registers
 * (store_row_avx512's loops kept them on the stack, an eighth of a 256-deep tile's time). */
__attribute__((target("avx512f"), always_inline)) static inline void
store_full_row_avx512(const __m512 *acc, const int NB, float *row, int first,
                      const nnc_gemm_epi *ep, int kind, __m512 lo, __m512 hi, int64_t r0,
                      int64_t c0)
{
    const float bias = ep && ep->bias ? ep->bias[r0] : 0.f;
#pragma GCC unroll 4
    for (int q = 0; q < NB; q++) {
        const __m512 prev = first ? acc[q] : _mm512_loadu_ps(row + 16 * q);
        const __m512 r =
            ep && ep->res ? _mm512_loadu_ps(ep->res + r0 * ep->ldr + c0 + 16 * q) : prev;
        const __m512 cb = ep && ep->col_bias ? _mm512_loadu_ps(ep->col_bias + c0 + 16 * q) : prev;
        _mm512_storeu_ps(row + 16 * q,
                         epi_values(acc[q], first, prev, ep, kind, lo, hi, bias,
                                    ep && ep->col_bias ? &cb : NULL, ep && ep->res ? &r : NULL));
    }
}

/* Rows [0, h) of a tile's sums (row i's NB slots at acc + i * ld) into C from (r0, c0), the
 * tile H rows tall: unmasked and unrolled where the tile is whole (H rows, 16 NB columns),
 * store_row_avx512 otherwise (an edge, or GELU's erf over a row's valid columns). */
__attribute__((target("avx512f"), always_inline)) static inline void
store_tile_avx512(const __m512 *acc, const int ld, const int NB, const int H, int64_t h, float *c,
                  int64_t ldc, int64_t w, int first, const nnc_gemm_epi *ep, int64_t r0, int64_t c0)
{
    const int kind = ep && ep->act ? ep->act->kind : ACT_NONE;
    if (h == H && w == 16 * NB && kind != ACT_GELU_ERF) {
        const __m512 lo = _mm512_set1_ps(ep && ep->act ? ep->act->a : 0.f);
        const __m512 hi = _mm512_set1_ps(ep && ep->act ? ep->act->b : 0.f);
#pragma GCC unroll 18
        for (int i = 0; i < H; i++)
            store_full_row_avx512(acc + i * ld, NB, c + i * ldc, first, ep, kind, lo, hi, r0 + i,
                                  c0);
        return;
    }
    for (int i = 0; i < H && i < h; i++)
        store_row_avx512(acc + i * ld, NB, c + i * ldc, w, first, ep, r0 + i, c0);
}

/* The product of NA (1 or 2) A panels and NB (1 or 2) B panels over kc steps, into the h x w
 * corner of C at (r0, c0) (h <= 6 NA, w <= 16 NB), with store_tile's arithmetic. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile_avx512(const int NA, const int NB, int64_t kc, const float *a, int64_t astride, const float *b,
            int64_t bstride, float *c, int64_t ldc, int64_t h, int64_t w, int first,
            const nnc_gemm_epi *ep, int64_t r0, int64_t c0)
{
    __m512 acc[2 * MR][2];
    for (int i = 0; i < NA * MR; i++)
        for (int q = 0; q < NB; q++) acc[i][q] = _mm512_setzero_ps();
    /* C's lines asked for now, written after the kc steps: with a short depth (attention's
     * Q K^T, 64) the stores' misses were half the tile's time */
    for (int i = 0; i < NA * MR && i < h; i++)
        for (int q = 0; q < NB; q++) __builtin_prefetch(c + i * ldc + 16 * q, 1, 3);
    const float *a1 = a + astride, *b1 = b + bstride;
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        __builtin_prefetch(b + (k + BPF) * NR, 0, 3);
        if (NB > 1) __builtin_prefetch(b1 + (k + BPF) * NR, 0, 3);
        const __m512 bv0 = _mm512_loadu_ps(b + k * NR);
        const __m512 bv1 = NB > 1 ? _mm512_loadu_ps(b1 + k * NR) : bv0;
        for (int i = 0; i < NA * MR; i++) {
            const __m512 av = _mm512_set1_ps(i < MR ? a[k * MR + i] : a1[k * MR + i - MR]);
            acc[i][0] = _mm512_fmadd_ps(av, bv0, acc[i][0]);
            if (NB > 1) acc[i][1] = _mm512_fmadd_ps(av, bv1, acc[i][1]);
        }
    }
    store_tile_avx512((const __m512 *)acc, 2, NB, NA * MR, h, c, ldc, w, first, ep, r0, c0);
}

#define TILE_PACKED(NA, NB)                                                                        \
    __attribute__((target("avx512f"), noinline)) static void tile_avx512_##NA##NB(                 \
        int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, float *c, int64_t ldc, \
        int64_t h, int64_t w, int first, const nnc_gemm_epi *ep, int64_t r0, int64_t c0)           \
    {                                                                                              \
        tile_avx512(NA, NB, kc, a, as, b, bs, c, ldc, h, w, first, ep, r0, c0);                    \
    }
TILE_PACKED(2, 2)
TILE_PACKED(2, 1)
TILE_PACKED(1, 2)
TILE_PACKED(1, 1)

/* The first H (1..4) rows of one A panel times NB (1..4) B panels, into the h = H by w corner
 * of C at (r0, c0). A product of a few rows (a decoder's one new token) reads each B element
 * once: this tile spends its work on B's loads, where the 6-row tile would also sum the A
 * panel's padding rows. The same fma chain per element as tile_avx512: the same bits. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile_few_avx512(const int H, const int NB, int64_t kc, const float *a, const float *b,
                int64_t bstride, float *c, int64_t ldc, int64_t w, int first,
                const nnc_gemm_epi *ep, int64_t r0, int64_t c0)
{
    __m512 acc[4][4];
    for (int i = 0; i < H; i++)
        for (int q = 0; q < NB; q++) acc[i][q] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m512 bv[4];
        for (int q = 0; q < NB; q++) __builtin_prefetch(b + q * bstride + (k + BPF) * NR, 0, 3);
        for (int q = 0; q < NB; q++) bv[q] = _mm512_loadu_ps(b + q * bstride + k * NR);
        for (int i = 0; i < H; i++) {
            const __m512 av = _mm512_set1_ps(a[k * MR + i]);
            for (int q = 0; q < NB; q++) acc[i][q] = _mm512_fmadd_ps(av, bv[q], acc[i][q]);
        }
    }
    store_tile_avx512((const __m512 *)acc, 4, NB, H, H, c, ldc, w, first, ep, r0, c0);
}

#define TILE_FEW(H, NB)                                                                           \
    __attribute__((target("avx512f"), noinline)) static void tile_few_avx512_##H##NB(             \
        int64_t kc, const float *a, const float *b, int64_t bs, float *c, int64_t ldc, int64_t w, \
        int first, const nnc_gemm_epi *ep, int64_t r0, int64_t c0)                                \
    {                                                                                             \
        tile_few_avx512(H, NB, kc, a, b, bs, c, ldc, w, first, ep, r0, c0);                       \
    }
#define TILE_FEW_ROWS(H) TILE_FEW(H, 1) TILE_FEW(H, 2) TILE_FEW(H, 3) TILE_FEW(H, 4)
TILE_FEW_ROWS(1)
TILE_FEW_ROWS(2)
TILE_FEW_ROWS(3)
TILE_FEW_ROWS(4)

typedef void (*tile_few_fn)(int64_t, const float *, const float *, int64_t, float *, int64_t,
                            int64_t, int, const nnc_gemm_epi *, int64_t, int64_t);
static const tile_few_fn TILES_FEW[4][4] = {
    {tile_few_avx512_11, tile_few_avx512_12, tile_few_avx512_13, tile_few_avx512_14},
    {tile_few_avx512_21, tile_few_avx512_22, tile_few_avx512_23, tile_few_avx512_24},
    {tile_few_avx512_31, tile_few_avx512_32, tile_few_avx512_33, tile_few_avx512_34},
    {tile_few_avx512_41, tile_few_avx512_42, tile_few_avx512_43, tile_few_avx512_44}};
#define FEW_ROWS 4 /* at most this many rows take tile_few_avx512 */

/* The first H (7..18) rows of two or three A panels times one B panel, into the H x w corner
 * of C at (r0, c0): a product of 7 to 18 rows (a short prompt's) in one pass over B. The 12 + 4
 * row tiles read B twice, the 12-row tile summed its padding rows for 7 to 11, and its two B
 * streams, at two threads, asked for more bytes per cycle than memory gives; here one B load
 * feeds H FMAs (H fixed per instance: 16 rows summing 18 cost 7%). 16 x 256 x 50257 on two
 * threads: 1.8 -> 1.65 ms; 8 rows 1.38 -> 1.11. The same fma chain per element as
 * tile_avx512: the same bits. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile_tall_avx512(const int H, int64_t kc, const float *a, int64_t astride, const float *b, float *c,
                 int64_t ldc, int64_t w, int first, const nnc_gemm_epi *ep, int64_t r0, int64_t c0)
{
    __m512 acc[3 * MR];
#pragma GCC unroll 18
    for (int i = 0; i < 3 * MR; i++) acc[i] = _mm512_setzero_ps();
    for (int i = 0; i < H; i++) __builtin_prefetch(c + i * ldc, 1, 3);
    const float *a1 = a + astride, *a2 = a + 2 * astride;
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; k++) {
        /* further ahead than BPF: a step here is 9 cycles where the 12-row tile's is 12
         * (past the panel's end is the next panel's start; 16 x 256 x 50257: ~5% faster) */
        __builtin_prefetch(b + (k + TPF) * NR, 0, 3);
        const __m512 bv = _mm512_loadu_ps(b + k * NR);
#pragma GCC unroll 18
        for (int i = 0; i < H; i++) {
            const float *ai = i < MR ? a : i < 2 * MR ? a1 : a2;
            acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(ai[k * MR + i % MR]), bv, acc[i]);
        }
    }
    store_tile_avx512(acc, 1, 1, H, H, c, ldc, w, first, ep, r0, c0);
}

#define TILE_TALL(H)                                                                              \
    __attribute__((target("avx512f"), noinline)) static void tile_tall_avx512_##H(                \
        int64_t kc, const float *a, int64_t as, const float *b, float *c, int64_t ldc, int64_t w, \
        int first, const nnc_gemm_epi *ep, int64_t r0, int64_t c0)                                \
    {                                                                                             \
        tile_tall_avx512(H, kc, a, as, b, c, ldc, w, first, ep, r0, c0);                          \
    }
TILE_TALL(7)
TILE_TALL(8)
TILE_TALL(9)
TILE_TALL(10)
TILE_TALL(11)
TILE_TALL(12)
TILE_TALL(13)
TILE_TALL(14)
TILE_TALL(15)
TILE_TALL(16)
TILE_TALL(17)
TILE_TALL(18)
typedef void (*tile_tall_fn)(int64_t, const float *, int64_t, const float *, float *, int64_t,
                             int64_t, int, const nnc_gemm_epi *, int64_t, int64_t);
static const tile_tall_fn TILES_TALL[2 * MR] = {
    /* 7 .. 18 rows */
    tile_tall_avx512_7,  tile_tall_avx512_8,  tile_tall_avx512_9,  tile_tall_avx512_10,
    tile_tall_avx512_11, tile_tall_avx512_12, tile_tall_avx512_13, tile_tall_avx512_14,
    tile_tall_avx512_15, tile_tall_avx512_16, tile_tall_avx512_17, tile_tall_avx512_18};

/* The AVX-512 tile with B read in place: row k of slot q at brow[k] + boff[q], its valid lanes
 * in mask[q] (any set: a slot may cross the padding between two output rows), stored in order
 * at C's columns from coff[q] on (compressed; the epilogue's C and residual expanded alike).
 * The same sums as tile_avx512 gives the same B packed. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile_rows_avx512(const int NA, const int NB, int64_t kc, const float *a, int64_t astride,
                 const float *const *brow, const nnc_slot *sl, float *c, int64_t ldc, int64_t h,
                 int first, const nnc_gemm_epi *ep, int64_t r0)
{
    __mmask16 mk[2] = {(__mmask16)sl[0].mask, 0}, cm[2] = {0, 0}; /* lanes; as many from lane 0 */
    if (NB > 1) mk[1] = (__mmask16)sl[1].mask;
    for (int q = 0; q < NB; q++) cm[q] = (__mmask16)((1u << __builtin_popcount(mk[q])) - 1);
    const int64_t o0 = sl[0].boff, o1 = NB > 1 ? sl[1].boff : 0;
    const float *a1 = a + astride;
    /* named accumulators, not an array: with B's rows behind loaded pointers gcc kept an array
     * in memory and stored it every step */
#define ROW_ACC(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
    ROW_ACC(0)
    ROW_ACC(1)
    ROW_ACC(2)
    ROW_ACC(3)
    ROW_ACC(4)
    ROW_ACC(5)
    ROW_ACC(6)
    ROW_ACC(7)
    ROW_ACC(8)
    ROW_ACC(9)
    ROW_ACC(10)
    ROW_ACC(11)
#undef ROW_ACC
    for (int64_t k = 0; k < kc; k++) {
        const float *b = brow[k];
        const __m512 bv0 = _mm512_maskz_loadu_ps(mk[0], b + o0);
        const __m512 bv1 = NB > 1 ? _mm512_maskz_loadu_ps(mk[1], b + o1) : bv0;
#define ROW_STEP(i, src)                                         \
    {                                                            \
        const __m512 av = _mm512_set1_ps(src);                   \
        c##i##0 = _mm512_fmadd_ps(av, bv0, c##i##0);             \
        if (NB > 1) c##i##1 = _mm512_fmadd_ps(av, bv1, c##i##1); \
    }
        ROW_STEP(0, a[k * MR])
        ROW_STEP(1, a[k * MR + 1])
        ROW_STEP(2, a[k * MR + 2])
        ROW_STEP(3, a[k * MR + 3])
        ROW_STEP(4, a[k * MR + 4])
        ROW_STEP(5, a[k * MR + 5])
        if (NA > 1) {
            ROW_STEP(6, a1[k * MR])
            ROW_STEP(7, a1[k * MR + 1])
            ROW_STEP(8, a1[k * MR + 2])
            ROW_STEP(9, a1[k * MR + 3])
            ROW_STEP(10, a1[k * MR + 4])
            ROW_STEP(11, a1[k * MR + 5])
        }
#undef ROW_STEP
    }
    const __m512 acc[2 * MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},   {c30, c31},
                                   {c40, c41}, {c50, c51}, {c60, c61},   {c70, c71},
                                   {c80, c81}, {c90, c91}, {c100, c101}, {c110, c111}};
    const int kind = ep && ep->act ? ep->act->kind : ACT_NONE;
    const __m512 lo = _mm512_set1_ps(ep && ep->act ? ep->act->a : 0.f);
    const __m512 hi = _mm512_set1_ps(ep && ep->act ? ep->act->b : 0.f);
    for (int i = 0; i < NA * MR; i++) {
        if (i >= h) break;
        const float bias = ep && ep->bias ? ep->bias[r0 + i] : 0.f;
        for (int q = 0; q < NB; q++) {
            float *row = c + i * ldc + sl[q].coff;
            /* C and the operands gathered into the slot's lanes (expanded), the sum back compressed */
#define GATHER(p) _mm512_maskz_expand_ps(mk[q], _mm512_maskz_loadu_ps(cm[q], (p)))
            const __m512 prev = first ? acc[i][q] : GATHER(row);
            const __m512 r =
                ep && ep->res ? GATHER(ep->res + (r0 + i) * ep->ldr + sl[q].coff) : prev;
            const __m512 cbv = ep && ep->col_bias ? GATHER(ep->col_bias + sl[q].coff) : prev;
#undef GATHER
            __m512 x = epi_values(acc[i][q], first, prev, ep, kind, lo, hi, bias,
                                  ep && ep->col_bias ? &cbv : NULL, ep && ep->res ? &r : NULL);
            if (kind == ACT_GELU_ERF) {
                _Alignas(64) float g[16];
                _mm512_store_ps(g, x);
                nnc_vgelu_erf(g, g, 16, ep->act->a, ep->act->b != 0.f);
                x = _mm512_load_ps(g);
            }
            _mm512_mask_storeu_ps(row, cm[q], _mm512_maskz_compress_ps(mk[q], x));
        }
    }
}

#define TILE_ROWS(NA, NB)                                                                     \
    __attribute__((target("avx512f"), noinline)) static void tile_rows_##NA##NB(              \
        int64_t kc, const float *a, int64_t as, const float *const *brow, const nnc_slot *sl, \
        float *c, int64_t ldc, int64_t h, int first, const nnc_gemm_epi *ep, int64_t r0)      \
    {                                                                                         \
        tile_rows_avx512(NA, NB, kc, a, as, brow, sl, c, ldc, h, first, ep, r0);              \
    }
TILE_ROWS(2, 2)
TILE_ROWS(2, 1)
TILE_ROWS(1, 2)
TILE_ROWS(1, 1)

int nnc_sgemm_rows(int64_t m, int64_t k, const float *pa, const float *const *brow,
                   const nnc_slot *slots, int64_t nslots, float *c, int64_t ldc,
                   const nnc_gemm_epi *ep)
{
    if (nnc_isa_level() < 2) return NNC_ERR;
    for (int64_t p0 = 0; p0 < k; p0 += KC) {
        int64_t kc = k - p0 < KC ? k - p0 : KC;
        int first = p0 == 0;
        const nnc_gemm_epi *e = p0 + kc >= k ? ep : NULL;
        for (int64_t q = 0; q < nslots; q += 2) {
            int two = q + 1 < nslots;
            for (int64_t ir = 0; ir < m; ir += 2 * MR) {
                int64_t h = m - ir < 2 * MR ? m - ir : 2 * MR;
                const float *a = pa + ir * k + p0 * MR;
                float *cc = c + ir * ldc;
                if (h > MR && two)
                    tile_rows_22(kc, a, MR * k, brow + p0, slots + q, cc, ldc, h, first, e, ir);
                else if (h > MR)
                    tile_rows_21(kc, a, MR * k, brow + p0, slots + q, cc, ldc, h, first, e, ir);
                else if (two)
                    tile_rows_12(kc, a, MR * k, brow + p0, slots + q, cc, ldc, h, first, e, ir);
                else tile_rows_11(kc, a, MR * k, brow + p0, slots + q, cc, ldc, h, first, e, ir);
            }
        }
    }
    return NNC_OK;
}

/* nnc_sgemm_packed_cols with the AVX-512 tiles: for each KC block and MC row block, pairs of B
 * panels (32 columns, in L1 across the block's A panels) by pairs of A panels. */
static void packed_cols_avx512(int64_t m, int64_t n, int64_t k, const float *pa, const float *pb,
                               float *c, int64_t ldc, const nnc_gemm_epi *ep, int64_t j0,
                               int64_t j1)
{
    int64_t npad = (n + NR - 1) / NR * NR;
    for (int64_t p0 = 0; p0 < k; p0 += KC) {
        int64_t kc = k - p0 < KC ? k - p0 : KC;
        int first = p0 == 0, last = p0 + kc >= k;
        const float *bp = pb + p0 * npad;
        const nnc_gemm_epi *e = last ? ep : NULL;
        if (m <= FEW_ROWS) { /* one A panel, its first m rows: B streams through once */
            for (int64_t jr = j0; jr < j1; jr += 4 * NR) {
                int64_t w = j1 - jr < 4 * NR ? j1 - jr : 4 * NR;
                TILES_FEW[m - 1][(w + NR - 1) / NR - 1](kc, pa + p0 * MR, bp + jr * kc, NR * kc,
                                                        c + jr, ldc, w, first, e, 0, jr);
            }
            continue;
        }
        /* up to three A panels, B streams through once */
        if (m > MR && m <= 3 * MR) {
            for (int64_t jr = j0; jr < j1; jr += NR) {
                int64_t w = j1 - jr < NR ? j1 - jr : NR;
                TILES_TALL[m - MR - 1](kc, pa + p0 * MR, MR * k, bp + jr * kc, c + jr, ldc, w,
                                       first, e, 0, jr);
            }
            continue;
        }
        for (int64_t i0 = 0; i0 < m; i0 += MC) {
            int64_t mc = m - i0 < MC ? m - i0 : MC;
            for (int64_t jr = j0; jr < j1; jr += 2 * NR) {
                int64_t w = j1 - jr < 2 * NR ? j1 - jr : 2 * NR;
                for (int64_t ir = 0; ir < mc; ir += 2 * MR) {
                    int64_t h = mc - ir < 2 * MR ? mc - ir : 2 * MR, r = i0 + ir;
                    const float *a = pa + r * k + p0 * MR, *b = bp + jr * kc;
                    float *cc = c + r * ldc + jr;
                    /* the last rows: no FMAs on a panel's padding rows (a 6-row tile, then
                     * the rest of its rows, where fewer than 11 are left) */
                    if (h > MR && h - MR <= FEW_ROWS) {
                        if (w > NR)
                            tile_avx512_12(kc, a, MR * k, b, NR * kc, cc, ldc, MR, w, first, e, r,
                                           jr);
                        else
                            tile_avx512_11(kc, a, MR * k, b, NR * kc, cc, ldc, MR, w, first, e, r,
                                           jr);
                        a += MR * k;
                        cc += MR * ldc;
                        h -= MR;
                        r += MR;
                    }
                    if (h <= FEW_ROWS)
                        TILES_FEW[h - 1][w > NR](kc, a, b, NR * kc, cc, ldc, w, first, e, r, jr);
                    else if (h > MR && w > NR)
                        tile_avx512_22(kc, a, MR * k, b, NR * kc, cc, ldc, h, w, first, e, r, jr);
                    else if (h > MR)
                        tile_avx512_21(kc, a, MR * k, b, NR * kc, cc, ldc, h, w, first, e, r, jr);
                    else if (w > NR)
                        tile_avx512_12(kc, a, MR * k, b, NR * kc, cc, ldc, h, w, first, e, r, jr);
                    else tile_avx512_11(kc, a, MR * k, b, NR * kc, cc, ldc, h, w, first, e, r, jr);
                }
            }
        }
    }
}
#endif

#ifndef HAVE_AVX512_KERNEL
int nnc_sgemm_rows(int64_t m, int64_t k, const float *pa, const float *const *brow,
                   const nnc_slot *slots, int64_t nslots, float *c, int64_t ldc,
                   const nnc_gemm_epi *ep)
{
    (void)m;
    (void)k;
    (void)pa;
    (void)brow;
    (void)slots;
    (void)nslots;
    (void)c;
    (void)ldc;
    (void)ep;
    return NNC_ERR;
}
#endif

/* The widest vector kernels the CPU runs (nnc.h), capped by NNPLUG_CPU_ISA. */
int nnc_isa_level(void)
{
    static int level = -1;
    if (level >= 0) return level; /* idempotent: a race writes the same value */
    int l = 0;
#ifdef HAVE_AVX2_KERNEL
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) l = 1;
    if (l && __builtin_cpu_supports("avx512f")) l = 2;
#endif
    const char *cap = getenv("NNPLUG_CPU_ISA");
    if (cap && !strcmp(cap, "avx2") && l > 1) l = 1;
    if (cap && !strcmp(cap, "portable")) l = 0;
    level = l;
    return l;
}

static ukernel_fn pick_kernel(void)
{
#ifdef HAVE_AVX2_KERNEL
    if (nnc_isa_level() >= 1) return ukernel_avx2;
#endif
    return ukernel_c;
}

const char *nnc_gemm_info(void)
{
    switch (nnc_isa_level()) {
    case 2: return "nnc sgemm 12x32 avx512f (6x16 avx2+fma unpacked)";
    case 1: return "nnc sgemm 6x16 avx2+fma";
    default: return "nnc sgemm 6x16 portable C";
    }
}

/* op(B)[p0:p0+kc, j0:j0+nc] into NR-wide panels, k-major inside each, zero-padded columns. */
static void pack_b(int transb, const float *b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
                   int64_t nc, float *dst)
{
    for (int64_t jp = 0; jp < nc; jp += NR) {
        int64_t w = nc - jp < NR ? nc - jp : NR;
        for (int64_t k = 0; k < kc; k++, dst += NR) {
            int64_t j = 0;
            if (!transb) {
                const float *src = b + (p0 + k) * ldb + j0 + jp;
                for (; j < w; j++) dst[j] = src[j];
            } else {
                const float *src = b + (j0 + jp) * ldb + p0 + k;
                for (; j < w; j++) dst[j] = src[j * ldb];
            }
            for (; j < NR; j++) dst[j] = 0.f;
        }
    }
}

/* op(A)[i0:i0+mc, p0:p0+kc] into MR-tall panels, k-major inside each, zero-padded rows. */
static void pack_a(int transa, const float *a, int64_t lda, int64_t i0, int64_t mc, int64_t p0,
                   int64_t kc, float *dst)
{
    for (int64_t ip = 0; ip < mc; ip += MR) {
        int64_t h = mc - ip < MR ? mc - ip : MR;
        for (int64_t k = 0; k < kc; k++, dst += MR) {
            int64_t i = 0;
            if (!transa) {
                const float *src = a + (i0 + ip) * lda + p0 + k;
                for (; i < h; i++) dst[i] = src[i * lda];
            } else {
                const float *src = a + (p0 + k) * lda + i0 + ip;
                for (; i < h; i++) dst[i] = src[i];
            }
            for (; i < MR; i++) dst[i] = 0.f;
        }
    }
}

/* Packing memory of the calling thread, kept between calls (the backend's pool threads call
 * this for every tile). NULL when it cannot be had: the caller falls back to one-tile blocks
 * on the stack, which computes the same values (blocking in M and N does not change them). */
static _Thread_local nnc_tbuf t_pack;

static float *pack_memory(size_t floats)
{
    return nnc_tbuf_get(&t_pack, floats * sizeof(float));
}

void nnc_sgemm(int transa, int transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0) return;
    if (k <= 0) { /* C = beta*C */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
        return;
    }
    static ukernel_fn kernel;
    if (!kernel) kernel = pick_kernel(); /* idempotent: a race writes the same pointer */
    int64_t kcmax = k < KC ? k : KC;
    int64_t nc_blk = (n + NR - 1) / NR * NR, mc_blk = (m + MR - 1) / MR * MR;
    if (nc_blk > NC) nc_blk = NC;
    if (mc_blk > MC) mc_blk = MC;
    float *bp, *ap;
    _Alignas(64) float small_b[KC * NR], small_a[KC * MR];
    float *mem = pack_memory((size_t)(kcmax * (nc_blk + mc_blk)));
    if (mem) {
        bp = mem;
        ap = mem + kcmax * nc_blk;
    } else {
        bp = small_b;
        ap = small_a;
        nc_blk = NR;
        mc_blk = MR;
    }
    _Alignas(64) float tile[MR * NR];
    for (int64_t j0 = 0; j0 < n; j0 += nc_blk) {
        int64_t nc = n - j0 < nc_blk ? n - j0 : nc_blk;
        for (int64_t p0 = 0; p0 < k; p0 += KC) {
            int64_t kc = k - p0 < KC ? k - p0 : KC;
            int first = p0 == 0;
            pack_b(transb, b, ldb, p0, kc, j0, nc, bp);
            for (int64_t i0 = 0; i0 < m; i0 += mc_blk) {
                int64_t mc = m - i0 < mc_blk ? m - i0 : mc_blk;
                pack_a(transa, a, lda, i0, mc, p0, kc, ap);
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    int64_t w = nc - jr < NR ? nc - jr : NR;
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        int64_t h = mc - ir < MR ? mc - ir : MR;
                        kernel(kc, ap + ir * kc, bp + jr * kc, tile);
                        float *cb = c + (i0 + ir) * ldc + j0 + jr;
                        for (int64_t i = 0; i < h; i++) {
                            float *row = cb + i * ldc;
                            const float *t = tile + i * NR;
                            if (!first)
                                for (int64_t j = 0; j < w; j++) row[j] += alpha * t[j];
                            else if (beta == 0.f)
                                for (int64_t j = 0; j < w; j++) row[j] = alpha * t[j];
                            else
                                for (int64_t j = 0; j < w; j++)
                                    row[j] = alpha * t[j] + beta * row[j];
                        }
                    }
                }
            }
        }
    }
}

/* ---- both operands packed ahead -------------------------------------------------------- */

int64_t nnc_sgemm_packed_a_floats(int64_t m, int64_t k)
{
    return (m + MR - 1) / MR * MR * k;
}

int64_t nnc_pack_grain(int64_t floats_per_item)
{
    const int64_t piece = 1 << 16; /* floats: smaller pieces cost more to hand out than to do */
    return floats_per_item >= piece ? 1 : piece / (floats_per_item > 0 ? floats_per_item : 1);
}

/* A row-major matrix (rows x cols, row stride ld) being packed on the pool's threads (each
 * writes its own panels or rows): a session's weights are packed at create, so packing is
 * part of how long a model takes to load. */
typedef struct {
    int64_t rows, cols, ld;
    const float *src;
    float *dst;
} pack_job;

#if defined(HAVE_AVX512_KERNEL) && MR == 6
/* How a 6 x 16 block of A becomes 96 packed floats: output vector o, lane l is element
 * e = 16 o + l, row e % 6, column e / 6, taken by one of three two-row permutes (rows 0-1, 2-3,
 * 4-5) and kept by its mask. Built once per packing, not per panel. */
typedef struct {
    _Alignas(64) int32_t ix[MR][3][16];
    __mmask16 pair[MR][3];
} a_perm;

static void a_perm_init(a_perm *pm)
{
    for (int o = 0; o < MR; o++) {
        pm->pair[o][0] = pm->pair[o][1] = pm->pair[o][2] = 0;
        for (int l = 0; l < 16; l++) {
            int e = 16 * o + l, i = e % MR;
            pm->ix[o][0][l] = pm->ix[o][1][l] = pm->ix[o][2][l] = 0;
            pm->ix[o][i / 2][l] = (i % 2 ? 16 : 0) + e / MR;
            pm->pair[o][i / 2] |= (__mmask16)(1u << l);
        }
    }
}

/* The first columns of one A panel (h <= 6 rows from src, row stride ld) in 16-column blocks,
 * rows past h zero. The scalar loop took a tenth of a 16-row prompt's products on 2 threads,
 * alone on the calling thread. Returns the columns packed. */
__attribute__((target("avx512f"))) static int64_t pack_a_panel_avx512(const a_perm *pm,
                                                                      const float *src, int64_t ld,
                                                                      int64_t h, int64_t cols,
                                                                      float *pa)
{
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m512 r[MR];
        for (int i = 0; i < MR; i++)
            r[i] = i < h ? _mm512_loadu_ps(src + i * ld + k) : _mm512_setzero_ps();
        for (int o = 0; o < MR; o++) {
            __m512 x = _mm512_permutex2var_ps(r[0], _mm512_load_si512(pm->ix[o][0]), r[1]);
            x = _mm512_mask_blend_ps(
                pm->pair[o][1], x,
                _mm512_permutex2var_ps(r[2], _mm512_load_si512(pm->ix[o][1]), r[3]));
            x = _mm512_mask_blend_ps(
                pm->pair[o][2], x,
                _mm512_permutex2var_ps(r[4], _mm512_load_si512(pm->ix[o][2]), r[5]));
            _mm512_storeu_ps(pa + k * MR + 16 * o, x);
        }
    }
    return k;
}
#endif

static void pack_a_panels(void *arg, int64_t p0, int64_t p1, int tid)
{
    (void)tid;
    const pack_job *j = arg;
#if defined(HAVE_AVX512_KERNEL) && MR == 6
    a_perm pm;
    int vec = nnc_isa_level() == 2;
    if (vec) a_perm_init(&pm);
#endif
    for (int64_t ip = p0 * MR; ip < j->rows && ip < p1 * MR; ip += MR) {
        int64_t h = j->rows - ip < MR ? j->rows - ip : MR;
        float *pa = j->dst + ip * j->cols;
        int64_t kk = 0;
#if defined(HAVE_AVX512_KERNEL) && MR == 6
        if (vec) {
            kk = pack_a_panel_avx512(&pm, j->src + ip * j->ld, j->ld, h, j->cols, pa);
            pa += kk * MR;
        }
#endif
        for (; kk < j->cols; kk++, pa += MR) {
            int64_t i = 0;
            for (; i < h; i++) pa[i] = j->src[(ip + i) * j->ld + kk];
            for (; i < MR; i++) pa[i] = 0.f;
        }
    }
}

void nnc_sgemm_pack_a(int64_t m, int64_t k, const float *a, int64_t lda, float *pa)
{
    pack_job j = {m, k, lda, a, pa};
    nnc_parallel_for((m + MR - 1) / MR, nnc_pack_grain(MR * k), pack_a_panels, &j);
}

void nnc_sgemm_packed_a_scale_row(float *pa, int64_t k, int64_t row, float s)
{
    float *p = pa + row / MR * MR * k + row % MR;
    for (int64_t kk = 0; kk < k; kk++) p[kk * MR] *= s;
}

/* Packed B: per KC block (in order), NR-wide panels of kc rows each, columns zero-padded to
 * a multiple of NR; the block of row p0 starts at p0 * npad. */
int64_t nnc_sgemm_packed_b_floats(int64_t k, int64_t n)
{
    return k * ((n + NR - 1) / NR * NR);
}

void nnc_sgemm_pack_b_row(int64_t k, int64_t kk, int64_t n, const float *row, float *pb)
{
    int64_t npad = (n + NR - 1) / NR * NR, p0 = kk / KC * KC;
    int64_t kc = k - p0 < KC ? k - p0 : KC;
    float *dst = pb + p0 * npad + (kk - p0) * NR;
    int64_t j = 0;
    for (; j + NR <= n; j += NR, dst += kc * NR)
        for (int q = 0; q < NR; q++)
            dst[q] = row[j + q]; /* inline: a call per 64 bytes costs more */
    if (j < n) {
        memcpy(dst, row + j, (size_t)(n - j) * sizeof(float));
        memset(dst + (n - j), 0, (size_t)(NR - (n - j)) * sizeof(float));
    }
}

static void pack_b_rows(void *arg, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    const pack_job *j = arg;
    for (int64_t kk = r0; kk < r1; kk++)
        nnc_sgemm_pack_b_row(j->rows, kk, j->cols, j->src + kk * j->ld, j->dst);
}

void nnc_sgemm_pack_b(int64_t k, int64_t n, const float *b, int64_t ldb, float *pb)
{
    pack_job j = {k, n, ldb, b, pb};
    nnc_parallel_for(k, nnc_pack_grain(n), pack_b_rows, &j);
}

float *nnc_sgemm_packed_b_row_at(int64_t k, int64_t kk, int64_t n, float *pb, int64_t *panel)
{
    int64_t npad = (n + NR - 1) / NR * NR, p0 = kk / KC * KC;
    *panel = (k - p0 < KC ? k - p0 : KC) * NR;
    return pb + p0 * npad + (kk - p0) * NR;
}

/* One tile of the product into C: the KC block's sums added to what C holds (or stored, for the
 * first block), and after the last block the epilogue, in one pass while the tile is in L1. */
MULTIVERSION
static void store_tile(float *c, int64_t ldc, const float *tile, int64_t h, int64_t w, int first,
                       const nnc_gemm_epi *ep, int64_t r0, int64_t c0)
{
    int kind = ep && ep->act ? ep->act->kind : ACT_NONE;
    float lo = ep && ep->act ? ep->act->a : 0.f, hi = ep && ep->act ? ep->act->b : 0.f;
    for (int64_t i = 0; i < h; i++) {
        float *row = c + i * ldc;
        const float *t = tile + i * NR;
        if (!ep) {
            if (first)
                for (int64_t j = 0; j < w; j++) row[j] = t[j];
            else
                for (int64_t j = 0; j < w; j++) row[j] += t[j];
            continue;
        }
        const float b = ep->bias ? ep->bias[r0 + i] : 0.f;
        const float *r = ep->res ? ep->res + (r0 + i) * ep->ldr + c0 : NULL;
        float v[NR];
        for (int64_t j = 0; j < w; j++) v[j] = first ? t[j] : row[j] + t[j];
        if (ep->col_bias)
            for (int64_t j = 0; j < w; j++) v[j] += ep->col_bias[c0 + j];
        if (r)
            for (int64_t j = 0; j < w; j++) v[j] += b + r[j];
        else if (ep->bias)
            for (int64_t j = 0; j < w; j++) v[j] += b;
        switch (kind) {
        case ACT_RELU:
            for (int64_t j = 0; j < w; j++) row[j] = v[j] < 0.f ? 0.f : v[j];
            break; /* NaN stays */
        case ACT_CLIP:
            for (int64_t j = 0; j < w; j++) {
                float x = v[j] < lo ? lo : v[j];
                row[j] = x > hi ? hi : x;
            }
            break;
        case ACT_LEAKY:
            for (int64_t j = 0; j < w; j++) row[j] = v[j] >= 0.f ? v[j] : v[j] * lo;
            break;
        case ACT_GELU_ERF: nnc_vgelu_erf(v, row, w, lo, hi != 0.f); break;
        default:
            for (int64_t j = 0; j < w; j++) row[j] = v[j];
        }
    }
}

void nnc_sgemm_packed(int64_t m, int64_t n, int64_t k, const float *pa, const float *pb, float *c,
                      int64_t ldc, const nnc_gemm_epi *ep)
{
    nnc_sgemm_packed_cols(m, n, k, pa, pb, c, ldc, ep, 0, n);
}

void nnc_sgemm_packed_cols(int64_t m, int64_t n, int64_t k, const float *pa, const float *pb,
                           float *c, int64_t ldc, const nnc_gemm_epi *ep, int64_t j0, int64_t j1)
{
    if (j1 > n) j1 = n;
    if (m <= 0 || j1 <= j0 || k <= 0 || j0 % NR) return;
#ifdef HAVE_AVX512_KERNEL
    if (nnc_isa_level() == 2) {
        packed_cols_avx512(m, n, k, pa, pb, c, ldc, ep, j0, j1);
        return;
    }
#endif
    static ukernel_fn kernel;
    if (!kernel) kernel = pick_kernel(); /* idempotent: a race writes the same pointer */
    int64_t npad = (n + NR - 1) / NR * NR;
    _Alignas(64) float tile[MR * NR];
    for (int64_t p0 = 0; p0 < k; p0 += KC) {
        int64_t kc = k - p0 < KC ? k - p0 : KC;
        int first = p0 == 0, last = p0 + kc >= k;
        const float *bp = pb + p0 * npad;
        for (int64_t i0 = 0; i0 < m; i0 += MC) {
            int64_t mc = m - i0 < MC ? m - i0 : MC;
            /* a B micro-panel stays in L1 across the A panels of the block (in L2) */
            for (int64_t jr = j0; jr < j1; jr += NR) {
                int64_t w = j1 - jr < NR ? j1 - jr : NR;
                for (int64_t ir = 0; ir < mc; ir += MR) {
                    int64_t h = mc - ir < MR ? mc - ir : MR;
#ifdef HAVE_AVX2_KERNEL
                    if (kernel == ukernel_avx2 && h == MR &&
                        w == NR) { /* full tile: straight into C */
                        ukernel_avx2_c(kc, pa + (i0 + ir) * k + p0 * MR, bp + jr * kc,
                                       c + (i0 + ir) * ldc + jr, ldc, first, last ? ep : NULL,
                                       i0 + ir, jr);
                        continue;
                    }
#endif
                    kernel(kc, pa + (i0 + ir) * k + p0 * MR, bp + jr * kc, tile);
                    store_tile(c + (i0 + ir) * ldc + jr, ldc, tile, h, w, first, last ? ep : NULL,
                               i0 + ir, jr);
                }
            }
        }
    }
}

/* ---- one column: packed A times a vector ----------------------------------------------- */

/* The epilogue of store_tile for one element whose sum is v. */
static float epi_one(float v, const nnc_gemm_epi *ep, int64_t i, int64_t c0)
{
    if (!ep) return v;
    const float b = ep->bias ? ep->bias[i] : 0.f;
    if (ep->col_bias) v += ep->col_bias[c0];
    if (ep->res) v += b + ep->res[i * ep->ldr + c0];
    else if (ep->bias) v += b;
    switch (ep->act ? ep->act->kind : ACT_NONE) {
    case ACT_RELU: return v < 0.f ? 0.f : v;
    case ACT_CLIP: {
        float x = v < ep->act->a ? ep->act->a : v;
        return x > ep->act->b ? ep->act->b : x;
    }
    case ACT_LEAKY: return v >= 0.f ? v : v * ep->act->a;
    case ACT_GELU_ERF: nnc_vgelu_erf(&v, &v, 1, ep->act->a, ep->act->b != 0.f); return v;
    default: return v;
    }
}

#ifdef HAVE_AVX2_KERNEL
/* Sums of rows [p * MR, ...) of packed A against x over one KC block, eight panels at a time
 * (eight FMA chains; panels past the last repeat it and are not stored). */
__attribute__((target("avx2,fma"))) static void gemv_block_avx2(int64_t npanels, int64_t k,
                                                                int64_t p0, int64_t kc,
                                                                const float *pa, const float *x,
                                                                float *t)
{
    const __m256i m6 = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
    for (int64_t p = 0; p < npanels; p += 8) {
        const float *a[8];
        for (int q = 0; q < 8; q++)
            a[q] = pa + (p + q < npanels ? p + q : npanels - 1) * MR * k + p0 * MR;
        __m256 acc[8];
        for (int q = 0; q < 8; q++) acc[q] = _mm256_setzero_ps();
        for (int64_t kk = 0; kk < kc; kk++) {
            const __m256 xv = _mm256_broadcast_ss(x + p0 + kk);
            for (int q = 0; q < 8; q++)
                acc[q] = _mm256_fmadd_ps(_mm256_maskload_ps(a[q] + kk * MR, m6), xv, acc[q]);
        }
        for (int q = 0; q < 8 && p + q < npanels; q++) {
            _Alignas(32) float v[8];
            _mm256_store_ps(v, acc[q]);
            memcpy(t + (p + q) * MR, v, MR * sizeof(float));
        }
    }
}
#endif

void nnc_sgemv_packed(int64_t m, int64_t k, const float *pa, const float *x, float *y, int64_t ldy,
                      const nnc_gemm_epi *ep, int64_t c0)
{
    if (m <= 0 || k <= 0) return;
    enum { CHUNK = 64 }; /* panels whose block sums are held at once */
    float t[CHUNK * MR];
    int level = nnc_isa_level();
    for (int64_t pc = 0; pc * MR < m; pc += CHUNK) {
        int64_t np = (m - pc * MR + MR - 1) / MR < CHUNK ? (m - pc * MR + MR - 1) / MR : CHUNK;
        int64_t r0 = pc * MR, r1 = r0 + np * MR < m ? r0 + np * MR : m;
        const float *pc_a = pa + r0 * k;
        for (int64_t p0 = 0; p0 < k; p0 += KC) {
            int64_t kc = k - p0 < KC ? k - p0 : KC;
#ifdef HAVE_AVX2_KERNEL
            if (level) gemv_block_avx2(np, k, p0, kc, pc_a, x, t);
#endif
            for (int64_t i = 0; !level && i < np * MR; i++) { /* as ukernel_c: multiply, then add */
                const float *a = pc_a + i / MR * MR * k + p0 * MR + i % MR;
                float acc = 0.f;
                for (int64_t kk = 0; kk < kc; kk++) acc += a[kk * MR] * x[p0 + kk];
                t[i] = acc;
            }
            for (int64_t i = r0; i < r1; i++)
                y[i * ldy] = p0 == 0 ? t[i - r0] : y[i * ldy] + t[i - r0];
        }
    }
    for (int64_t i = 0; i < m; i++) y[i * ldy] = epi_one(y[i * ldy], ep, i, c0);
}

void nnc_gemm_row_blocks(int64_t m, int64_t tasks, int threads, int64_t *blk, int64_t *nblk)
{
    *blk = m;
    *nblk = 1;
    if (tasks >= 2 * threads || m < 32) return;
    int64_t want = (2 * threads + tasks - 1) / tasks;
    *blk = ((m + want - 1) / want + NNC_GEMM_MR - 1) / NNC_GEMM_MR * NNC_GEMM_MR;
    *nblk = (m + *blk - 1) / *blk;
}
