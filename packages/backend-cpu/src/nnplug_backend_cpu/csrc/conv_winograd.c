/* Winograd F(2x2, 3x3) for Conv (conv_winograd.h): each 2x2 block of output pixels (a tile)
 * from the 4x4 input patch under it, as 16 products of IC input channels by OC output
 * channels instead of 36 (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks"):
 *   U = G g G^T per (output, input) channel pair, once when the weights are packed;
 *   V = B^T d B per tile and input channel, M_xi = U_xi V_xi for each of the 16 points xi (the
 *   GEMM of gemm.c over packed operands), Y = A^T M A, then the bias, residual and activation.
 * F(2x2)'s coefficients are 0, +-1 and 1/2, so its rounding error is that of the direct sum's
 * order of magnitude; F(4x4) would save more products at about 10x the error. */
#include "conv_winograd.h"

#include <float.h>
#include <string.h>

/* U_xi = (G g G^T)_xi of each output channel's 3x3 kernel for input channel c, packed as 16
 * A matrices (OC x IC), each nnc_sgemm_packed_a_floats(oc, ic) floats. */
int64_t nnc_wino_packed_floats(int64_t oc, int64_t ic)
{
    return 16 * nnc_sgemm_packed_a_floats(oc, ic);
}

typedef struct {
    const float *w;
    int64_t oc, ic;
    float *pu;
} wino_pack_job;

static void wino_pack_panels(void *arg, int64_t p0, int64_t p1, int tid)
{
    (void)tid;
    const wino_pack_job *j = arg;
    const int64_t mr = NNC_GEMM_MR, oc = j->oc, ic = j->ic;
    const int64_t per = nnc_sgemm_packed_a_floats(oc, ic);
    for (int64_t o0 = p0 * mr; o0 < oc && o0 < p1 * mr; o0 += mr)
        for (int64_t c = 0; c < ic; c++) {
            float *dst = j->pu + o0 * ic + c * mr;
            for (int64_t i = 0; i < mr; i++) {
                if (o0 + i >= oc) { /* the last panel's padding rows */
                    for (int xi = 0; xi < 16; xi++) dst[xi * per + i] = 0.f;
                    continue;
                }
                const float *g = j->w + ((o0 + i) * ic + c) * 9;
                float t[4][3]; /* G g: rows g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2 */
                for (int k = 0; k < 3; k++) {
                    t[0][k] = g[k];
                    t[1][k] = 0.5f * (g[k] + g[3 + k] + g[6 + k]);
                    t[2][k] = 0.5f * (g[k] - g[3 + k] + g[6 + k]);
                    t[3][k] = g[6 + k];
                }
                for (int r = 0; r < 4; r++) { /* (G g) G^T: the same on each row */
                    float v[4] = {t[r][0], 0.5f * (t[r][0] + t[r][1] + t[r][2]),
                                  0.5f * (t[r][0] - t[r][1] + t[r][2]), t[r][2]};
                    for (int k = 0; k < 4; k++) dst[(r * 4 + k) * per + i] = v[k];
                }
            }
        }
}

void nnc_wino_pack(const float *w, int64_t oc, int64_t ic, float *pu)
{
    /* Straight into the packed layout of nnc_sgemm_pack_a (panels of MR output channels from
     * pu + o0 * ic, each input channel's MR values side by side), so each of the 16 matrices
     * is written in order once, with no [xi][o][c] array in between; panels on the pool's
     * threads (each writes its own). */
    wino_pack_job j = {w, oc, ic, pu};
    nnc_parallel_for((oc + NNC_GEMM_MR - 1) / NNC_GEMM_MR, nnc_pack_grain(16 * NNC_GEMM_MR * ic),
                     wino_pack_panels, &j);
}

void nnc_wino_scale_row(float *pu, int64_t oc, int64_t ic, int64_t row, float s)
{
    int64_t per = nnc_sgemm_packed_a_floats(oc, ic);
    for (int xi = 0; xi < 16; xi++) nnc_sgemm_packed_a_scale_row(pu + xi * per, ic, row, s);
}

/* Tiles in blocks of whole tile rows, about WINO_BLOCK_BYTES of transformed input and product
 * per block (each thread's scratch), at least one row. */
#define WINO_BLOCK_BYTES (1 << 20)

static int64_t block_rows(const nnc_wino_shape *g)
{
    int64_t TW = (g->ow + 1) / 2, TH = (g->oh + 1) / 2;
    int64_t tiles = WINO_BLOCK_BYTES / (16 * (g->ic + g->oc) * (int64_t)sizeof(float));
    int64_t rows = tiles / TW;
    if (rows < 1) rows = 1;
    return rows > TH ? TH : rows;
}

/* One task's scratch: V (16 packed B of ic x tiles), M (16 of rows x tiles), the 16 rows of one
 * channel's transformed tiles, and four zero-padded input rows. */
static size_t task_bytes(const nnc_wino_shape *g, int64_t tiles, int64_t rows)
{
    int64_t TW = (g->ow + 1) / 2;
    return 16 * nnc_align64((size_t)nnc_sgemm_packed_b_floats(g->ic, tiles) * sizeof(float)) +
           16 * nnc_align64((size_t)(rows * tiles) * sizeof(float)) +
           16 * nnc_align64((size_t)tiles * sizeof(float)) +
           4 * nnc_align64((size_t)(2 * TW + 2) * sizeof(float));
}

size_t nnc_wino_scratch(const nnc_wino_shape *g)
{
    int64_t TW = (g->ow + 1) / 2;
    return task_bytes(g, block_rows(g) * TW, g->oc);
}

int nnc_wino_fits(int64_t ic, int64_t oc, int64_t oh, int64_t ow)
{
    return ic >= 32 && oc >= 64 && oh * ow >= 36;
}

typedef struct {
    const nnc_wino_shape *g;
    const float *x, *pu, *bias, *res;
    float *y;
    const nnc_act *act;
    nnc_exec *xc;
    int64_t rows_per_blk, nblk, mblk, nmb;
    int fail, nonfinite;
} wino_job;

/* The largest |x| of x[0, n) as its bits: a non-negative float's bits order as the float does,
 * and NaN and infinity lie above every finite value. An integer max, which vectorises where a
 * running float comparison would not. */
MULTIVERSION
static uint32_t abs_max_bits(const float *x, int64_t n)
{
    uint32_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        u &= 0x7fffffffu;
        m = u > m ? u : m;
    }
    return m;
}

int nnc_any_nonfinite(const float *x, int64_t n)
{
    return abs_max_bits(x, n) >= 0x7f800000u;
}

float nnc_wino_input_limit(const float *pu, int64_t oc, int64_t ic)
{
    int64_t n = nnc_wino_packed_floats(oc, ic);
    uint32_t ub = abs_max_bits(pu, n);
    float umax;
    memcpy(&umax, &ub, sizeof umax);
    double lim = umax > 0.f ? 0x1p127 / (36.0 * (double)ic * umax) : FLT_MAX;
    return lim < FLT_MAX ? (float)lim : FLT_MAX;
}

/* The four input rows under tile row th of channel plane xc, zero outside the input, into
 * pr[0..3] (2 * TW + 2 floats each); 1 when any value they take is not finite or above
 * g->xmax. */
static int padded_rows(const wino_job *j, const float *xc, int64_t th, float *const *pr)
{
    const nnc_wino_shape *g = j->g;
    int64_t TW = (g->ow + 1) / 2, PW = 2 * TW + 2;
    int bad = 0;
    uint32_t lim; /* compared as abs_max_bits' bits */
    memcpy(&lim, &g->xmax, sizeof lim);
    for (int r = 0; r < 4; r++) {
        float *d = pr[r];
        int64_t ih = 2 * th - g->pt + r;
        int64_t lo = g->pl, n = g->w; /* input column iw lands at iw + pl */
        if (lo + n > PW) n = PW - lo;
        if (ih < 0 || ih >= g->h || n <= 0) {
            memset(d, 0, (size_t)PW * sizeof(float));
            continue;
        }
        const float *s = xc + ih * g->w;
        memset(d, 0, (size_t)lo * sizeof(float));
        memcpy(d + lo, s, (size_t)n * sizeof(float));
        memset(d + lo + n, 0, (size_t)(PW - lo - n) * sizeof(float));
        bad |= abs_max_bits(s, n) > lim;
    }
    return bad;
}

/* V = B^T d B for the tiles of one tile row, from its four padded input rows: vrow[xi][t0 + tw].
 * First d B along each input row (q[r][k][tw], a stride-2 read), then B^T down the columns;
 * both loops run over the tiles, so they vectorise. */
#define WINO_MAXTW 128 /* tiles along a row that one pass takes */

MULTIVERSION
static void input_transform(float *const *pr, int64_t TW, float *const *vrow, int64_t t0)
{
    float q[4][4][WINO_MAXTW];
    for (int64_t c0 = 0; c0 < TW; c0 += WINO_MAXTW) {
        int64_t n = TW - c0 < WINO_MAXTW ? TW - c0 : WINO_MAXTW;
        for (int r = 0; r < 4; r++) {
            const float *d = pr[r] + 2 * c0;
            for (int64_t i = 0; i < n; i++) { /* columns d0 - d2, d1 + d2, d2 - d1, d1 - d3 */
                float d0 = d[2 * i], d1 = d[2 * i + 1], d2 = d[2 * i + 2], d3 = d[2 * i + 3];
                q[r][0][i] = d0 - d2;
                q[r][1][i] = d1 + d2;
                q[r][2][i] = d2 - d1;
                q[r][3][i] = d1 - d3;
            }
        }
        for (int k = 0; k < 4; k++) { /* the same down the rows */
            float *v0 = vrow[k] + t0 + c0, *v1 = vrow[4 + k] + t0 + c0, *v2 = vrow[8 + k] + t0 + c0,
                  *v3 = vrow[12 + k] + t0 + c0;
            for (int64_t i = 0; i < n; i++) {
                v0[i] = q[0][k][i] - q[2][k][i];
                v1[i] = q[1][k][i] + q[2][k][i];
                v2[i] = q[2][k][i] - q[1][k][i];
                v3[i] = q[1][k][i] - q[3][k][i];
            }
        }
    }
}

/* Y = A^T m A (A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]) for the tiles of one tile row of output
 * channel o (m: mx[xi] + off, TW tiles), plus the bias, into output rows 2 th and 2 th + 1. */
MULTIVERSION
static void output_row(float *const *mx, int64_t off, int64_t TW, float b, float *y0, float *y1,
                       int64_t OW)
{
    float s[2][4][WINO_MAXTW], o[2][2][WINO_MAXTW];
    for (int64_t c0 = 0; c0 < TW; c0 += WINO_MAXTW) {
        int64_t n = TW - c0 < WINO_MAXTW ? TW - c0 : WINO_MAXTW;
        for (int k = 0; k < 4; k++) {
            const float *m0 = mx[k] + off + c0, *m1 = mx[4 + k] + off + c0,
                        *m2 = mx[8 + k] + off + c0, *m3 = mx[12 + k] + off + c0;
            for (int64_t i = 0; i < n; i++) {
                s[0][k][i] = m0[i] + m1[i] + m2[i];
                s[1][k][i] = m1[i] - m2[i] - m3[i];
            }
        }
        for (int r = 0; r < 2; r++)
            for (int64_t i = 0; i < n; i++) {
                o[r][0][i] = s[r][0][i] + s[r][1][i] + s[r][2][i] + b;
                o[r][1][i] = s[r][1][i] - s[r][2][i] - s[r][3][i] + b;
            }
        int64_t w = OW - 2 * c0 < 2 * n ? OW - 2 * c0 : 2 * n; /* output pixels of these tiles */
        for (int r = 0; r < 2; r++) {
            float *y = r ? y1 : y0;
            if (!y) continue;
            y += 2 * c0;
            for (int64_t i = 0; i < w / 2; i++) {
                y[2 * i] = o[r][0][i];
                y[2 * i + 1] = o[r][1][i];
            }
            if (w & 1) y[w - 1] = o[r][0][w / 2];
        }
    }
}

/* The block's tiles (tile rows th0..th1) for its output channels o0.., then the residual and
 * the activation over its output rows, which are contiguous. */
static void output_transform(const wino_job *j, float *const *mx, int64_t rows, int64_t o0,
                             int64_t th0, int64_t th1)
{
    const nnc_wino_shape *g = j->g;
    int64_t TW = (g->ow + 1) / 2, tiles = (th1 - th0) * TW;
    for (int64_t o = 0; o < rows; o++) {
        float *yo = j->y + (o0 + o) * g->oh * g->ow;
        const float b = j->bias ? j->bias[o0 + o] : 0.f;
        for (int64_t th = th0; th < th1; th++) {
            float *y0 = yo + 2 * th * g->ow, *y1 = 2 * th + 1 < g->oh ? y0 + g->ow : NULL;
            output_row(mx, o * tiles + (th - th0) * TW, TW, b, y0, y1, g->ow);
        }
        int64_t p0 = 2 * th0 * g->ow, p1 = (2 * th1 < g->oh ? 2 * th1 : g->oh) * g->ow;
        if (j->res) {
            const float *r = j->res + (o0 + o) * g->oh * g->ow;
            for (int64_t p = p0; p < p1; p++) yo[p] += r[p];
        }
        nnc_apply_act(yo + p0, p1 - p0, j->act);
    }
}

static void wino_tasks(void *arg, int64_t b, int64_t e, int tid)
{
    wino_job *j = arg;
    const nnc_wino_shape *g = j->g;
    int64_t TW = (g->ow + 1) / 2, TH = (g->oh + 1) / 2, PW = 2 * TW + 2;
    for (int64_t task = b; task < e; task++) {
        int64_t blk = task / j->nmb, mb = task % j->nmb;
        int64_t th0 = blk * j->rows_per_blk,
                th1 = th0 + j->rows_per_blk < TH ? th0 + j->rows_per_blk : TH;
        int64_t o0 = mb * j->mblk, o1 = o0 + j->mblk < g->oc ? o0 + j->mblk : g->oc, rows = o1 - o0;
        int64_t tiles = (th1 - th0) * TW;
        char *mem = nnc_scratch(j->xc, tid, task_bytes(g, tiles, rows));
        if (!mem) {
            __atomic_store_n(&j->fail, 1, __ATOMIC_RELAXED);
            return;
        }
        size_t vsz = nnc_align64((size_t)nnc_sgemm_packed_b_floats(g->ic, tiles) * sizeof(float));
        size_t msz = nnc_align64((size_t)(rows * tiles) * sizeof(float)),
               rsz = nnc_align64((size_t)tiles * sizeof(float));
        float *v[16], *mx[16], *vrow[16], *pr[4]; /* mem is 64-byte aligned (nnc_scratch) */
        for (int xi = 0; xi < 16; xi++) v[xi] = (float *)(mem + xi * vsz);
        mem += 16 * vsz;
        for (int xi = 0; xi < 16; xi++) mx[xi] = (float *)(mem + xi * msz);
        mem += 16 * msz;
        for (int xi = 0; xi < 16; xi++) vrow[xi] = (float *)(mem + xi * rsz);
        mem += 16 * rsz;
        for (int r = 0; r < 4; r++)
            pr[r] = (float *)(mem + r * nnc_align64((size_t)PW * sizeof(float)));
        for (int64_t c = 0; c < g->ic; c++) {
            const float *xc = j->x + c * g->h * g->w;
            for (int64_t th = th0; th < th1; th++) {
                if (padded_rows(j, xc, th, pr))
                    __atomic_store_n(&j->nonfinite, 1, __ATOMIC_RELAXED);
                input_transform(pr, TW, vrow, (th - th0) * TW);
            }
            for (int xi = 0; xi < 16; xi++) nnc_sgemm_pack_b_row(g->ic, c, tiles, vrow[xi], v[xi]);
        }
        if (__atomic_load_n(&j->nonfinite, __ATOMIC_RELAXED))
            return; /* the caller runs the direct one */
        int64_t per = nnc_sgemm_packed_a_floats(g->oc, g->ic);
        for (int xi = 0; xi < 16; xi++)
            nnc_sgemm_packed(rows, tiles, g->ic, j->pu + xi * per + o0 * g->ic, v[xi], mx[xi],
                             tiles, NULL);
        output_transform(j, mx, rows, o0, th0, th1);
    }
}

int nnc_wino_run(const nnc_wino_shape *g, const float *pu, const float *x, const float *bias,
                 const float *res, const nnc_act *act, float *y, nnc_exec *xc, int threads)
{
    wino_job j = {g, x, pu, bias, res, y, act, xc, block_rows(g), 0, 0, 0, 0, 0};
    int64_t TH = (g->oh + 1) / 2;
    j.nblk = (TH + j.rows_per_blk - 1) / j.rows_per_blk;
    nnc_gemm_row_blocks(g->oc, j.nblk, threads, &j.mblk,
                        &j.nmb); /* few blocks: channels split too */
    nnc_parallel_for(j.nblk * j.nmb, 1, wino_tasks, &j);
    if (j.fail) return NNC_ERR;
    return j.nonfinite ? 1 : NNC_OK;
}
