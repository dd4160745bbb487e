/* RNN, GRU and LSTM (float32): forward, reverse and bidirectional, sequence_lens, initial
 * states, peepholes, clip, input_forget, linear_before_reset, layout 0 and 1, and the ONNX
 * activation functions with their alpha/beta. The input projection of every time step is one
 * sgemm; each step then multiplies the hidden state by R (rnn_product for a few batch rows).
 * Directions run in parallel. */
#include "nnc.h"
#include "ops.h"

#include <ctype.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_RNN_AVX512 1
#endif

enum { K_RNN, K_GRU, K_LSTM };
enum {
    A_RELU,
    A_TANH,
    A_SIGMOID,
    A_AFFINE,
    A_LEAKYRELU,
    A_THRESHOLDEDRELU,
    A_SCALEDTANH,
    A_HARDSIGMOID,
    A_ELU,
    A_SOFTSIGN,
    A_SOFTPLUS
};

typedef struct {
    int kind;
    float a, b;
} rnn_act;

/* R transposed for the step product (see rnn_product), in panels of RNN_COLS gate rows: panel
 * b holds, for kk in [0, k), R[g][kk] for g in [b * RNN_COLS, (b + 1) * RNN_COLS), so a task
 * streams one contiguous panel (rows past m and up to ld, a multiple of RNN_COLS, are zero). */
typedef struct {
    float *rt;
    int64_t m, k, ld;
} rnn_packed;

typedef struct {
    int kind, ndir, reverse_only, layout, lbr, input_forget, gates, nact;
    int64_t hidden;
    float clip; /* 0: none */
    rnn_act act[6]; /* per direction: nact of them (RNN 1, GRU 2, LSTM 3) */
    /* a constant R, packed at load: per direction, the rows multiplied by h, and a GRU's
     * (linear_before_reset = 0) last H rows, multiplied by r . h */
    rnn_packed rp[2], rph[2];
    /* a constant W, packed at load as the B of the input projection (W^T, in[ I x gates*H ])
     * per direction: the product MatMul runs for a constant weight */
    float *pw[2];
    int64_t pw_in, pw_cols;
    /* a constant R packed the same way (R^T, [H x rows]) for batches of more than RNN_ROWS
     * rows: made by the first such run (racing first runs each pack; one copy is kept), as
     * rp's panels serve the usual few rows */
    float *_Atomic pr_b[2];
    float *_Atomic pr_bh[2]; /* a GRU's last H rows (split, as rph) */
} rnn_state;

static void rnn_destroy(nnc_node *n)
{
    rnn_state *s = n->state;
    if (s)
        for (int d = 0; d < 2; d++) {
            nnc_free(s->rp[d].rt);
            nnc_free(s->rph[d].rt);
            nnc_free(s->pw[d]);
            nnc_free(atomic_load(&s->pr_b[d]));
            nnc_free(atomic_load(&s->pr_bh[d]));
        }
    free(n->state);
    n->state = NULL;
}

/* ---- the step product: y[r] = R h[r] for a few batch rows r ------------------------------
 * nnc_sgemm would repack the whole of R (4H x H for an LSTM) on every step and pad one row to
 * a tile of six. Here R is transposed once (at load when it is a constant, else once per run)
 * and each step streams it once for all rows, 64 gate outputs per task on the pool's threads.
 * Every output sums its H products in order with fused multiply-adds at every ISA level
 * (fmaf in the portable loop), so the bits do not depend on the CPU or the thread count. */
#define RNN_ROWS 4  /* batches of at most this many rows take the step product */
#define RNN_COLS 64 /* gate outputs per task */

static int rnn_pack(rnn_packed *p, const float *R, int64_t m, int64_t k)
{
    p->m = m;
    p->k = k;
    p->ld = (m + RNN_COLS - 1) / RNN_COLS * RNN_COLS;
    p->rt = nnc_alloc((size_t)(k * p->ld) * sizeof(float));
    if (!p->rt) return 0;
    for (int64_t g0 = 0; g0 < p->ld; g0 += 16) /* 16 x 16 tiles: both sides stay in cache */
        for (int64_t k0 = 0; k0 < k; k0 += 16)
            for (int64_t kk = k0; kk < k0 + 16 && kk < k; kk++)
                for (int64_t g = g0; g < g0 + 16; g++)
                    p->rt[(g / RNN_COLS * k + kk) * RNN_COLS + g % RNN_COLS] =
                        g < m ? R[g * k + kk] : 0.f;
    return 1;
}

/* W (rows of `in` floats, `cols` of them) transposed into the packed B of a product by rows of
 * `in` inputs. 0 when out of memory. */
static int rnn_pack_w(float **pb, const float *W, int64_t cols, int64_t in)
{
    float *row = malloc((size_t)(cols ? cols : 1) * sizeof(float));
    *pb = nnc_alloc((size_t)nnc_sgemm_packed_b_floats(in, cols) * sizeof(float));
    if (!row || !*pb) {
        free(row);
        return 0;
    }
    for (int64_t kk = 0; kk < in; kk++) {
        for (int64_t g = 0; g < cols; g++) row[g] = W[g * in + kk];
        nnc_sgemm_pack_b_row(in, kk, cols, row, *pb);
    }
    free(row);
    return 1;
}

/* The constant R's packed copy in *slot (rows x H of R from Rrows), packed on first use. NULL
 * when out of memory. */
static const float *rnn_shared_pack(float *_Atomic *slot, const float *Rrows, int64_t rows,
                                    int64_t H)
{
    float *have = atomic_load(slot);
    if (have) return have;
    float *mine;
    if (!rnn_pack_w(&mine, Rrows, rows, H)) return NULL;
    if (atomic_compare_exchange_strong(slot, &have, mine)) return mine;
    nnc_free(mine); /* another run packed it first */
    return have;
}

/* Direction d's R (gates * H rows of H) packed for the step product: the rows multiplied by h
 * into *p, and, for a GRU without linear_before_reset (split), its last H rows into *ph. 0 when
 * out of memory (what was packed is freed with the state or the run). */
static int rnn_pack_dir(rnn_packed *p, rnn_packed *ph, const float *Rd, int64_t gates, int64_t H,
                        int split)
{
    int64_t GH = gates * H;
    return rnn_pack(p, Rd, split ? GH - H : GH, H) &&
           (!split || rnn_pack(ph, Rd + (GH - H) * H, H, H));
}

typedef struct {
    const rnn_packed *p;
    const float *h;
    float *y;
    int64_t ldh, ldy, rows, parts;
} rnn_product_job;

static void rnn_cols_portable(const rnn_product_job *j, int64_t j0)
{
    const rnn_packed *p = j->p;
    float acc[RNN_ROWS][RNN_COLS];
    memset(acc, 0, sizeof acc);
    for (int64_t kk = 0; kk < p->k; kk++) {
        const float *r = p->rt + (j0 * p->k + kk * RNN_COLS);
        for (int64_t row = 0; row < j->rows; row++) {
            float hv = j->h[row * j->ldh + kk];
            for (int c = 0; c < RNN_COLS; c++) acc[row][c] = fmaf(hv, r[c], acc[row][c]);
        }
    }
    int64_t w = p->m - j0 < RNN_COLS ? p->m - j0 : RNN_COLS;
    for (int64_t row = 0; row < j->rows; row++)
        memcpy(j->y + row * j->ldy + j0, acc[row], (size_t)w * sizeof(float));
}

#ifdef HAVE_RNN_AVX512
/* ROWS rows at once: each 64-float row segment of R^T is loaded once for all of them */
#define RNN_COLS_AVX512(ROWS)                                                                  \
    __attribute__((target("avx512f"))) static void rnn_cols_avx512_##ROWS(                     \
        const rnn_product_job *j, int64_t j0)                                                  \
    {                                                                                          \
        const rnn_packed *p = j->p;                                                            \
        __m512 acc[ROWS][4];                                                                   \
        for (int r = 0; r < ROWS; r++)                                                         \
            for (int q = 0; q < 4; q++) acc[r][q] = _mm512_setzero_ps();                       \
        for (int64_t kk = 0; kk < p->k; kk++) {                                                \
            const float *rt = p->rt + (j0 * p->k + kk * RNN_COLS);                             \
            __m512 v[4];                                                                       \
            for (int q = 0; q < 4; q++) v[q] = _mm512_loadu_ps(rt + 16 * q);                   \
            for (int r = 0; r < ROWS; r++) {                                                   \
                __m512 hv = _mm512_set1_ps(j->h[r * j->ldh + kk]);                             \
                for (int q = 0; q < 4; q++) acc[r][q] = _mm512_fmadd_ps(hv, v[q], acc[r][q]);  \
            }                                                                                  \
        }                                                                                      \
        int64_t w = p->m - j0 < RNN_COLS ? p->m - j0 : RNN_COLS;                               \
        for (int r = 0; r < ROWS; r++)                                                         \
            for (int q = 0; q < 4 && 16 * q < w; q++) {                                        \
                int64_t left = w - 16 * q;                                                     \
                __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u); \
                _mm512_mask_storeu_ps(j->y + r * j->ldy + j0 + 16 * q, m, acc[r][q]);          \
            }                                                                                  \
    }
RNN_COLS_AVX512(1)
RNN_COLS_AVX512(2)
RNN_COLS_AVX512(3)
RNN_COLS_AVX512(4)
#endif

static void rnn_product_block(void *arg, int64_t p0, int64_t p1, int tid)
{
    (void)tid;
    const rnn_product_job *j = arg;
    int64_t nb = j->p->ld / RNN_COLS, b0 = p0 * nb / j->parts, b1 = p1 * nb / j->parts;
#ifdef HAVE_RNN_AVX512
    static void (*const fns[RNN_ROWS])(const rnn_product_job *, int64_t) = {
        rnn_cols_avx512_1, rnn_cols_avx512_2, rnn_cols_avx512_3, rnn_cols_avx512_4};
    int wide = nnc_isa_level() >= 2;
#endif
    for (int64_t b = b0; b < b1; b++) {
#ifdef HAVE_RNN_AVX512
        if (wide) {
            fns[j->rows - 1](j, b * RNN_COLS);
            continue;
        }
#endif
        rnn_cols_portable(j, b * RNN_COLS);
    }
}

/* y[r * ldy + g] = sum over kk of R[g][kk] * h[r * ldh + kk], for rows r < rows <= RNN_ROWS */
static void rnn_product(const rnn_packed *p, const float *h, int64_t ldh, float *y, int64_t ldy,
                        int64_t rows)
{
    /* one contiguous share of R per thread, the same share every step: a thread's part of R
     * (R is 1 MB for an LSTM of 256) stays in its core's cache between steps */
    int64_t nb = p->ld / RNN_COLS, parts = nnc_num_threads();
    if (parts > nb) parts = nb;
    if (parts < 1) parts = 1;
    rnn_product_job j = {p, h, y, ldh, ldy, rows, parts};
    nnc_parallel_for(parts, 1, rnn_product_block, &j);
}

static int act_parse(const char *name, int *kind, int *na, int *nb, float *da, float *db)
{
    static const struct {
        const char *n;
        int k, na, nb;
        float a, b;
    } T[] = {{"relu", A_RELU, 0, 0, 0, 0},
             {"tanh", A_TANH, 0, 0, 0, 0},
             {"sigmoid", A_SIGMOID, 0, 0, 0, 0},
             {"affine", A_AFFINE, 1, 1, 1.f, 0.f},
             {"leakyrelu", A_LEAKYRELU, 1, 0, 0.01f, 0},
             {"thresholdedrelu", A_THRESHOLDEDRELU, 1, 0, 1.f, 0},
             {"scaledtanh", A_SCALEDTANH, 1, 1, 1.f, 1.f},
             {"hardsigmoid", A_HARDSIGMOID, 1, 1, 0.2f, 0.5f},
             {"elu", A_ELU, 1, 0, 1.f, 0},
             {"softsign", A_SOFTSIGN, 0, 0, 0, 0},
             {"softplus", A_SOFTPLUS, 0, 0, 0, 0}};
    char low[32];
    size_t i = 0;
    for (; name[i] && i < sizeof low - 1; i++) low[i] = (char)tolower((unsigned char)name[i]);
    low[i] = 0;
    for (size_t k = 0; k < sizeof T / sizeof T[0]; k++)
        if (!strcmp(low, T[k].n)) {
            *kind = T[k].k;
            *na = T[k].na;
            *nb = T[k].nb;
            *da = T[k].a;
            *db = T[k].b;
            return 1;
        }
    return 0;
}

static inline float act_apply(const rnn_act *a, float x)
{
    switch (a->kind) {
    case A_RELU: return x > 0.f ? x : 0.f;
    case A_TANH: return tanhf(x);
    case A_SIGMOID: return 1.f / (1.f + expf(-x));
    case A_AFFINE: return a->a * x + a->b;
    case A_LEAKYRELU: return x >= 0.f ? x : a->a * x;
    case A_THRESHOLDEDRELU: return x > a->a ? x : 0.f;
    case A_SCALEDTANH: return a->a * tanhf(a->b * x);
    case A_HARDSIGMOID: {
        float v = a->a * x + a->b;
        return v < 0.f ? 0.f : v > 1.f ? 1.f : v;
    }
    case A_ELU: return x >= 0.f ? x : a->a * (expf(x) - 1.f);
    case A_SOFTSIGN: return x / (1.f + fabsf(x));
    default: return x > 20.f ? x : log1pf(expf(x));
    }
}

static int rnn_create(nnc_node *n, nnc_err *e)
{
    rnn_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->kind = !strcmp(n->op_type, "LSTM") ? K_LSTM : !strcmp(n->op_type, "GRU") ? K_GRU : K_RNN;
    s->gates = s->kind == K_LSTM ? 4 : s->kind == K_GRU ? 3 : 1;
    s->nact = s->kind == K_LSTM ? 3 : s->kind == K_GRU ? 2 : 1;
    static const int f32[] = {DT_F32, 0}, i32[] = {DT_I32, 0};
    for (int i = 0; i < n->nin; i++)
        if (i != 4) TRY(nnc_check_dtype(n, i, f32, e));
    TRY(nnc_check_dtype(n, 4, i32, e));
    char buf[32];
    TRY(nnc_attr_str(n, "direction", "forward", buf, sizeof buf, e));
    if (!strcmp(buf, "forward")) s->ndir = 1;
    else if (!strcmp(buf, "reverse")) {
        s->ndir = 1;
        s->reverse_only = 1;
    } else if (!strcmp(buf, "bidirectional")) s->ndir = 2;
    else
        return nnc_node_fail(
            e, n, "attribute 'direction' = '%s' is not forward, reverse or bidirectional", buf);
    int64_t v;
    TRY(nnc_attr_int(n, "hidden_size", -1, &s->hidden, e));
    TRY(nnc_attr_int(n, "layout", 0, &v, e));
    if (v != 0 && v != 1) return nnc_node_fail(e, n, "attribute 'layout' must be 0 or 1");
    s->layout = (int)v;
    TRY(nnc_attr_int(n, "linear_before_reset", 0, &v, e));
    s->lbr = v != 0;
    TRY(nnc_attr_int(n, "input_forget", 0, &v, e));
    s->input_forget = v != 0;
    TRY(nnc_attr_float(n, "clip", 0.f, &s->clip, e));
    if (nnc_attr_find(n, "clip") && !(s->clip > 0.f))
        return nnc_node_fail(e, n, "attribute 'clip' must be positive");
    /* activations: defaults, or the list (nact per direction) */
    static const int defs[3][3] = {{A_TANH}, {A_SIGMOID, A_TANH}, {A_SIGMOID, A_TANH, A_TANH}};
    int want = s->nact * s->ndir;
    for (int i = 0; i < want; i++) {
        s->act[i].kind = defs[s->kind][i % s->nact];
        s->act[i].a = s->act[i].b = 0.f;
    }
    const nnc_attr *acts = nnc_attr_find(n, "activations");
    if (acts) {
        if (acts->kind != AK_STRINGS)
            return nnc_node_fail(e, n, "attribute 'activations' must be a list of strings");
        if (acts->count != want && !(acts->count == s->nact && s->ndir == 2))
            return nnc_node_fail(e, n, "attribute 'activations' has %lld names, %d expected",
                                 (long long)acts->count, want);
        float al[16], be[16];
        int nal, nbe;
        TRY(nnc_attr_floats(n, "activation_alpha", al, 16, &nal, e));
        TRY(nnc_attr_floats(n, "activation_beta", be, 16, &nbe, e));
        int ia = 0, ib = 0; /* alphas and betas go, in order, to the activations that take them */
        for (int i = 0; i < acts->count; i++) {
            const char *nm = ((const char *const *)acts->data)[i];
            int kind, na, nb;
            float da, db;
            if (!nm || !act_parse(nm, &kind, &na, &nb, &da, &db))
                return nnc_node_unsup(e, n, "activation '%s' is not supported", nm ? nm : "?");
            s->act[i].kind = kind;
            s->act[i].a = na ? (ia < nal ? al[ia++] : da) : 0.f;
            s->act[i].b = nb ? (ib < nbe ? be[ib++] : db) : 0.f;
        }
        if (acts->count != want) /* one set given for both directions */
            for (int i = s->nact; i < want; i++) s->act[i] = s->act[i - s->nact];
    }
    /* a constant R of the expected shape is transposed once here for the step product */
    const nnc_valinfo *rv = n->nin > 2 ? n->vin[2] : NULL;
    if (!n->probing && nnc_in_const(n, 2) && nnc_in_static(n, 2) && rv->ndim == 3 &&
        rv->dims[0] == s->ndir && rv->dims[1] == s->gates * rv->dims[2]) {
        int64_t H = rv->dims[2];
        const float *R = rv->const_data;
        for (int d = 0; d < s->ndir; d++)
            if (!rnn_pack_dir(&s->rp[d], &s->rph[d], R + d * s->gates * H * H, s->gates, H,
                              s->kind == K_GRU && !s->lbr))
                return nnc_node_fail(e, n, "out of memory");
    }
    /* and a constant W as the input projection's packed weight */
    const nnc_valinfo *wv = n->nin > 1 ? n->vin[1] : NULL;
    if (!n->probing && nnc_in_const(n, 1) && nnc_in_static(n, 1) && wv->ndim == 3 &&
        wv->dims[0] == s->ndir && wv->dims[1] % s->gates == 0 && wv->dims[1] > 0 &&
        wv->dims[2] > 0) {
        s->pw_cols = wv->dims[1];
        s->pw_in = wv->dims[2];
        for (int d = 0; d < s->ndir; d++)
            if (!rnn_pack_w(&s->pw[d], (const float *)wv->const_data + d * s->pw_cols * s->pw_in,
                            s->pw_cols, s->pw_in))
                return nnc_node_fail(e, n, "out of memory");
    }
    return NNC_OK;
}

typedef struct {
    int64_t seq, batch, in, H;
} rnn_dims;

static int rnn_geometry(nnc_node *n, nnc_tensor *const *in, rnn_dims *g, nnc_err *e)
{
    const rnn_state *s = n->state;
    const nnc_tensor *x = in[0], *w = in[1], *r = in[2];
    for (int i = 0; i < n->nin; i++)
        if (in[i] && in[i]->dtype != (i == 4 ? DT_I32 : DT_F32))
            return nnc_node_fail(e, n, "input %d must be %s", i, i == 4 ? "int32" : "float32");
    if (x->ndim != 3 || w->ndim != 3 || r->ndim != 3)
        return nnc_node_fail(e, n, "X, W and R must have rank 3");
    g->seq = s->layout ? x->dims[1] : x->dims[0];
    g->batch = s->layout ? x->dims[0] : x->dims[1];
    g->in = x->dims[2];
    g->H = r->dims[2];
    int64_t GH = s->gates * g->H, D = s->ndir;
    if (s->hidden >= 0 && s->hidden != g->H)
        return nnc_node_fail(e, n, "attribute 'hidden_size' = %lld does not match R",
                             (long long)s->hidden);
    if (w->dims[0] != D || w->dims[1] != GH || w->dims[2] != g->in)
        return nnc_node_fail(e, n, "W must have shape [%lld, %lld, %lld]", (long long)D,
                             (long long)GH, (long long)g->in);
    if (r->dims[0] != D || r->dims[1] != GH)
        return nnc_node_fail(e, n, "R must have shape [%lld, %lld, %lld]", (long long)D,
                             (long long)GH, (long long)g->H);
    const nnc_tensor *b = n->nin > 3 ? in[3] : NULL;
    if (b && (b->ndim != 2 || b->dims[0] != D || b->dims[1] != 2 * GH))
        return nnc_node_fail(e, n, "B must have shape [%lld, %lld]", (long long)D,
                             (long long)(2 * GH));
    const nnc_tensor *sl = n->nin > 4 ? in[4] : NULL;
    if (sl) {
        if (sl->ndim != 1 || sl->dims[0] != g->batch)
            return nnc_node_fail(e, n, "sequence_lens must have %lld values", (long long)g->batch);
        for (int64_t i = 0; i < g->batch; i++) {
            int32_t L = ((const int32_t *)sl->data)[i];
            if (L < 0 || L > g->seq)
                return nnc_node_fail(e, n, "sequence_lens[%lld] = %d is outside [0, %lld]",
                                     (long long)i, L, (long long)g->seq);
        }
    }
    for (int i = 5; i < 7 && i < n->nin; i++) {
        const nnc_tensor *h = in[i];
        if (!h) continue;
        if (i == 6 && s->kind != K_LSTM) break;
        int64_t d0 = s->layout ? g->batch : D, d1 = s->layout ? D : g->batch;
        if (h->ndim != 3 || h->dims[0] != d0 || h->dims[1] != d1 || h->dims[2] != g->H)
            return nnc_node_fail(e, n, "initial state input %d must have shape [%lld, %lld, %lld]",
                                 i, (long long)d0, (long long)d1, (long long)g->H);
    }
    if (s->kind == K_LSTM && n->nin > 7 && in[7] &&
        (in[7]->ndim != 2 || in[7]->dims[0] != D || in[7]->dims[1] != 3 * g->H))
        return nnc_node_fail(e, n, "P must have shape [%lld, %lld]", (long long)D,
                             (long long)(3 * g->H));
    return NNC_OK;
}

static int rnn_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const rnn_state *s = n->state;
    rnn_dims g;
    TRY(rnn_geometry(n, in, &g, e));
    int64_t D = s->ndir;
    for (int k = 0; k < n->nout; k++) {
        out[k].dtype = DT_F32;
        if (k == 0) {
            out[k].ndim = 4;
            int64_t d[4] = {g.seq, D, g.batch, g.H}, d1[4] = {g.batch, g.seq, D, g.H};
            memcpy(out[k].dims, s->layout ? d1 : d, sizeof d);
        } else {
            out[k].ndim = 3;
            int64_t d[3] = {D, g.batch, g.H}, d1[3] = {g.batch, D, g.H};
            memcpy(out[k].dims, s->layout ? d1 : d, sizeof d);
        }
    }
    return NNC_OK;
}

typedef struct {
    const rnn_state *s;
    rnn_dims g;
    const float *x, *w, *r, *b, *h0, *c0, *p;
    const int32_t *lens;
    float *y, *yh, *yc;
    int fail;
} rnn_job;

static inline float clipv(float v, float c)
{
    return c > 0.f ? (v < -c ? -c : v > c ? c : v) : v;
}

/* v = act(clip(v)) over n values */
static void act_vec(const rnn_act *a, float clip, float *v, int64_t n)
{
    if (clip > 0.f)
        for (int64_t i = 0; i < n; i++) v[i] = clipv(v[i], clip);
    if (a->kind == A_SIGMOID) nnc_vsigmoid(v, v, n);
    else if (a->kind == A_TANH) nnc_vtanh(v, v, n);
    else
        for (int64_t i = 0; i < n; i++) v[i] = act_apply(a, v[i]);
}

/* One step's gates, new hidden state (and cell) of batch row bi: rows are independent, so a
 * batch's rows run on the pool's threads. */
typedef struct {
    const rnn_job *j;
    const rnn_act *act;
    const float *xw, *hr, *Wb, *Rb, *P;
    float *h, *c, *hnew, *rh, *z;
    int64_t step, T, B, H, GH, D, d;
    int rev;
} rnn_rows_job;

static void rnn_row(const rnn_rows_job *q, int64_t bi)
{
    const rnn_job *j = q->j;
    const rnn_state *s = j->s;
    const rnn_act *act = q->act;
    const float *xw = q->xw, *hr = q->hr, *Wb = q->Wb, *Rb = q->Rb, *P = q->P;
    float *h = q->h, *c = q->c, *hnew = q->hnew, *rh = q->rh, *z = q->z + bi * q->GH;
    int64_t step = q->step, T = q->T, B = q->B, H = q->H, GH = q->GH, D = q->D, d = q->d;
    int rev = q->rev;
    int64_t L = j->lens ? j->lens[bi] : T;
    if (step >= L) return;
    int64_t t = rev ? L - 1 - step : step;
    const float *xr = xw + (s->layout ? bi * T + t : t * B + bi) * GH;
    const float *hh = hr + bi * GH;
    float *hb = h + bi * H, *cb = c + bi * H, *out = hnew + bi * H;
    float *yrow =
        j->y ? j->y + (s->layout ? ((bi * T + t) * D + d) * H : ((t * D + d) * B + bi) * H) : NULL;
    /* each gate's pre-activations for the whole row, then its activation over the
     * row (nnc_vsigmoid / nnc_vtanh for the usual ones) */
    if (s->kind == K_RNN) {
        for (int64_t k = 0; k < H; k++) out[k] = xr[k] + hh[k] + (Wb ? Wb[k] + Rb[k] : 0.f);
        act_vec(&act[0], s->clip, out, H);
    } else if (s->kind == K_GRU) {
        float *zg = z, *vh = z + H;
        for (int64_t k = 0; k < H; k++) zg[k] = xr[k] + hh[k] + (Wb ? Wb[k] + Rb[k] : 0.f);
        act_vec(&act[0], s->clip, zg, H);
        if (s->lbr) {
            float *rg = z + 2 * H;
            for (int64_t k = 0; k < H; k++)
                rg[k] = xr[H + k] + hh[H + k] + (Wb ? Wb[H + k] + Rb[H + k] : 0.f);
            act_vec(&act[0], s->clip, rg, H);
            for (int64_t k = 0; k < H; k++)
                vh[k] = xr[2 * H + k] + (Wb ? Wb[2 * H + k] : 0.f) +
                        rg[k] * (hh[2 * H + k] + (Rb ? Rb[2 * H + k] : 0.f));
        } else {
            for (int64_t k = 0; k < H; k++)
                vh[k] = xr[2 * H + k] + out[k] + /* out holds (r . h) R_h^T */
                        (Wb ? Wb[2 * H + k] + Rb[2 * H + k] : 0.f);
        }
        act_vec(&act[1], s->clip, vh, H);
        for (int64_t k = 0; k < H; k++) out[k] = (1.f - zg[k]) * vh[k] + zg[k] * hb[k];
    } else if (!P && !(s->clip > 0.f) && !s->input_forget && act[0].kind == A_SIGMOID &&
               act[1].kind == A_TANH && act[2].kind == A_TANH) { /* the usual LSTM: one pass */
        nnc_lstm_cell(xr, hh, Wb, Rb, cb, rh + bi * H, out, H);
    } else { /* LSTM gates i, o, f, c */
        float *ig = z, *og = z + H, *fg = z + 2 * H, *cg = z + 3 * H, *cn = rh + bi * H;
        for (int64_t k = 0; k < GH; k++) {
            z[k] = xr[k] + hh[k];
            if (Wb) z[k] += Wb[k] + Rb[k];
        }
        if (P)
            for (int64_t k = 0; k < H; k++) {
                ig[k] += P[k] * cb[k];
                fg[k] += P[2 * H + k] * cb[k];
            }
        act_vec(&act[0], s->clip, ig, H);
        if (s->input_forget)
            for (int64_t k = 0; k < H; k++) fg[k] = 1.f - ig[k];
        else act_vec(&act[0], s->clip, fg, H);
        act_vec(&act[1], s->clip, cg, H);
        for (int64_t k = 0; k < H; k++) cn[k] = fg[k] * cb[k] + ig[k] * cg[k];
        if (P)
            for (int64_t k = 0; k < H; k++) og[k] += P[H + k] * cn[k];
        act_vec(&act[0], s->clip, og, H);
        memcpy(out, cn, (size_t)H * sizeof(float)); /* the cell's activation, unclipped */
        act_vec(&act[2], 0.f, out, H);
        for (int64_t k = 0; k < H; k++) out[k] *= og[k];
    }
    if (yrow) memcpy(yrow, out, (size_t)H * sizeof(float));
    memcpy(hb, out, (size_t)H * sizeof(float));
    if (s->kind == K_LSTM) memcpy(cb, rh + bi * H, (size_t)H * sizeof(float));
}

static void rnn_rows(void *arg, int64_t b0, int64_t b1, int tid)
{
    (void)tid;
    for (int64_t bi = b0; bi < b1; bi++) rnn_row(arg, bi);
}

static void rnn_dir(void *arg, int64_t b0, int64_t b1, int tid)
{
    (void)tid;
    rnn_job *j = arg;
    const rnn_state *s = j->s;
    int64_t T = j->g.seq, B = j->g.batch, I = j->g.in, H = j->g.H, G = s->gates, GH = G * H,
            D = s->ndir;
    for (int64_t d = b0; d < b1; d++) {
        int rev = s->reverse_only || d == 1;
        const rnn_act *act = s->act + d * s->nact;
        const float *W = j->w + d * GH * I, *R = j->r + d * GH * H;
        const float *Wb = j->b ? j->b + d * 2 * GH : NULL, *Rb = Wb ? Wb + GH : NULL;
        const float *P = j->p ? j->p + d * 3 * H : NULL;
        size_t nxw = (size_t)(T * B * GH), nst = (size_t)(B * H);
        float *xw =
            nnc_alloc((nxw + (size_t)(B * GH) + 4 * nst + (size_t)(B * GH) + 1) * sizeof(float));
        if (!xw) {
            j->fail = 1;
            return;
        }
        float *hr = xw + nxw, *h = hr + B * GH, *c = h + nst, *rh = c + nst, *hnew = rh + nst;
        float *z = hnew + nst; /* each row's gates (B rows of GH) */
        /* a GRU without linear_before_reset multiplies (r . h) by R's last H rows apart */
        int split = s->kind == K_GRU && !s->lbr;
        const rnn_packed *pr = NULL, *prh = NULL;
        rnn_packed own = {0}, ownh = {0}; /* R packed for this run when it is no constant */
        if (B <= RNN_ROWS && s->rp[d].rt && s->rp[d].k == H) {
            pr = &s->rp[d];
            prh = split ? &s->rph[d] : NULL;
        } else if (B <= RNN_ROWS && T > 1 && rnn_pack_dir(&own, &ownh, R, G, H, split)) {
            pr = &own;
            prh = split ? &ownh : NULL;
        }
        /* more rows: R^T packed once as the B of the packed product (MatMul's way), never
         * repacked per step as nnc_sgemm would (a batch of 5 ran 5x onnxruntime's time) */
        const float *pbr = NULL, *pbrh = NULL;
        float *ownb = NULL, *ownbh = NULL;
        if (B > RNN_ROWS && s->rp[d].rt && s->rp[d].k == H) { /* a constant R */
            rnn_state *ms = (rnn_state *)s;
            pbr = rnn_shared_pack(&ms->pr_b[d], R, GH, H);
            pbrh = split ? rnn_shared_pack(&ms->pr_bh[d], R + (GH - H) * H, H, H) : NULL;
        } else if (B > RNN_ROWS && T > 1 && rnn_pack_w(&ownb, R, GH, H) &&
                   (!split || rnn_pack_w(&ownbh, R + (GH - H) * H, H, H))) {
            pbr = ownb;
            pbrh = ownbh;
        }
        if (pbr && split && !pbrh) pbr = NULL; /* out of memory: nnc_sgemm for both */
        /* input projection of all steps: rows in X order */
        if (T * B > 0) {
            if (s->pw[d] && s->pw_in == I && s->pw_cols == GH) {
                if (!nnc_sgemm_packed_b_product(T * B, I, GH, j->x, s->pw[d], xw)) {
                    j->fail = 1;
                    goto done;
                }
            } else nnc_sgemm_mt(0, 1, T * B, GH, I, 1.f, j->x, I, W, I, xw, GH);
        }
        for (int64_t bi = 0; bi < B; bi++)
            for (int64_t k = 0; k < H; k++) {
                int64_t so = s->layout ? (bi * D + d) * H + k : (d * B + bi) * H + k;
                h[bi * H + k] = j->h0 ? j->h0[so] : 0.f;
                c[bi * H + k] = j->c0 ? j->c0[so] : 0.f;
            }
        for (int64_t step = 0; step < T; step++) {
            if (pr) rnn_product(pr, h, H, hr, GH, B);
            else if (pbr) {
                if (!nnc_sgemm_packed_b_product(B, H, GH, h, pbr, hr)) {
                    j->fail = 1;
                    goto done;
                }
            } else nnc_sgemm(0, 1, B, GH, H, 1.f, h, H, R, H, 0.f, hr, GH);
            if (s->kind == K_GRU && !s->lbr) { /* (r . h) R_h^T needs r first */
                for (int64_t bi = 0; bi < B; bi++) {
                    int64_t L = j->lens ? j->lens[bi] : T;
                    if (step >= L) continue;
                    int64_t t = rev ? L - 1 - step : step;
                    const float *xr = xw + (s->layout ? bi * T + t : t * B + bi) * GH;
                    for (int64_t k = 0; k < H; k++) {
                        z[k] = xr[H + k] + hr[bi * GH + H + k];
                        if (Wb) z[k] += Wb[H + k] + Rb[H + k];
                    }
                    act_vec(&act[0], s->clip, z, H);
                    for (int64_t k = 0; k < H; k++) rh[bi * H + k] = z[k] * h[bi * H + k];
                }
                if (prh) rnn_product(prh, rh, H, hnew, H, B);
                else if (pbrh) {
                    if (!nnc_sgemm_packed_b_product(B, H, H, rh, pbrh, hnew)) {
                        j->fail = 1;
                        goto done;
                    }
                } else nnc_sgemm(0, 1, B, H, H, 1.f, rh, H, R + 2 * H * H, H, 0.f, hnew, H);
            }
            rnn_rows_job rows = {j,  act, xw,   hr, Wb, Rb, P,  h, c, hnew,
                                 rh, z,   step, T,  B,  H,  GH, D, d, rev};
            /* a row's gates cost about as much as its share of the step product: a batch
             * spreads them over the threads, in chunks of at least ~2,000 gate values (a few
             * microseconds: the pool's hand-off costs about one) */
            nnc_parallel_for(B, GH > 0 ? 1 + 2048 / GH : B, rnn_rows, &rows);
        }
        for (int64_t bi = 0; bi < B; bi++) {
            int64_t so = s->layout ? (bi * D + d) * H : (d * B + bi) * H;
            /* a sequence of length 0 has no last state: 0, as onnxruntime (not the initial one) */
            int empty = j->lens && j->lens[bi] == 0;
            if (j->yh) {
                if (empty) memset(j->yh + so, 0, (size_t)H * sizeof(float));
                else memcpy(j->yh + so, h + bi * H, (size_t)H * sizeof(float));
            }
            if (j->yc) {
                if (empty) memset(j->yc + so, 0, (size_t)H * sizeof(float));
                else memcpy(j->yc + so, c + bi * H, (size_t)H * sizeof(float));
            }
        }
    done:
        nnc_free(own.rt);
        nnc_free(ownh.rt);
        nnc_free(ownb);
        nnc_free(ownbh);
        nnc_free(xw);
        if (j->fail) return;
    }
}

static int rnn_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    const rnn_state *s = n->state;
    rnn_job j;
    memset(&j, 0, sizeof j);
    TRY(rnn_geometry(n, in, &j.g, e));
    j.s = s;
    j.x = in[0]->data;
    j.w = in[1]->data;
    j.r = in[2]->data;
#define OPT(i) (n->nin > (i) && in[i] ? in[i]->data : NULL)
    j.b = OPT(3);
    j.lens = OPT(4);
    j.h0 = OPT(5);
    if (s->kind == K_LSTM) {
        j.c0 = OPT(6);
        j.p = OPT(7);
    }
#undef OPT
    j.y = n->nout > 0 && n->out[0] >= 0 ? out[0].data : NULL;
    j.yh = n->nout > 1 && n->out[1] >= 0 ? out[1].data : NULL;
    j.yc = n->nout > 2 && n->out[2] >= 0 ? out[2].data : NULL;
    if (j.y) memset(j.y, 0, nnc_nbytes(&out[0])); /* steps past a sequence's length stay 0 */
    nnc_parallel_for(s->ndir, 1, rnn_dir, &j);
    if (j.fail) return nnc_node_fail(e, n, "out of memory");
    return NNC_OK;
}

const nnc_op nnc_op_rnn = {"RNN", 3, 6, 0, 2, rnn_create, rnn_infer, rnn_run, rnn_destroy, 0};
const nnc_op nnc_op_gru = {"GRU", 3, 6, 0, 2, rnn_create, rnn_infer, rnn_run, rnn_destroy, 0};
const nnc_op nnc_op_lstm = {"LSTM", 3, 8, 0, 3, rnn_create, rnn_infer, rnn_run, rnn_destroy, 0};
