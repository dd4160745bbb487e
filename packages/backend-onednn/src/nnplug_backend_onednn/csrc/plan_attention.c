/* Attention (OP_ATTENTION, graph.c attention) as one step of the backend's own: for each batch
 * entry (a head) and block of query rows, the scores S = Q K^T, S += mask, each row's softmax,
 * the NaN replacement, then Y = S V, in a block of scores per thread small enough to stay in
 * its core's cache. The threads share the blocks. Q, K^T and V are read where they are when
 * their last two axes can be read as a matrix (a Transpose's strided view of the projections),
 * else in plain layout. The products are oneDNN's sgemm in float32; with bf16 products on AMX
 * they are oneDNN's bf16 matmuls on each thread (K^T and V of a head packed in bf16 once by the
 * thread that reads them, a block's Q and softmaxed scores rounded to bf16), the softmax still
 * in float32, on the scores where the products wrote them, chunk by chunk. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "plan.h"

#define ATT_BF16_FUSED (1 << 18) /* scores of a head (floats) from which bf16 runs fused */
#define ATT_BF16_ROWS 16          /* query rows from which the bf16 products run fused */
#define ATT_BF16_MAX_ROWS 128     /* query rows of a block at most, with bf16 products */

/* The primitives of the bf16 products: a block's Q K^T by chunks of keys (a full block's, the
 * last one's rows; a full chunk's, the last one's keys) and its S V, and the packing of K^T's
 * chunks and of V for them. oneDNN 3.2 takes Q K^T's products with more than eight times as
 * many keys as the depth to be too small for AMX (amx_xf16_is_small_shape) and runs them
 * without it, five times slower here: chunks of keys keep them on AMX. */
enum {
    AB_QK,
    AB_QK_LAST,
    AB_QK_TAIL,
    AB_QK_TAIL_LAST,
    AB_SV,
    AB_SV_TAIL,
    AB_PACK_K,
    AB_PACK_K_LAST,
    AB_PACK_V,
    AB_NPRIM
};

typedef struct {
    dnnl_primitive_t prim[AB_NPRIM]; /* NULL: no bf16 products (a tail's when there is none) */
    uint64_t pad[AB_NPRIM];          /* each one's scratchpad bytes */
    int64_t cw, nch;                 /* keys per chunk, chunks */
    uint64_t kch;                    /* bytes of a full chunk of K^T packed */
    /* byte offsets in a thread's share (the block's scores first, chunk by chunk): the
     * probabilities and the block's Q rounded, K^T's chunks and V packed, the scratchpad */
    uint64_t at_sb, at_q, at_k, at_v, at_pad;
} att_bf16;

/* An operand right-aligned to the result's rank r: its element (batch..., i, j) lies at
 * sum(b[d] * batch[d]) + i * rs + j * cs floats from its start; 0 for a broadcast axis. */
typedef struct {
    int64_t rs, cs, b[MAXR];
    char t;     /* as sgemm reads it: 'N' (rows rs apart) or 'T' (columns cs apart) */
    int64_t ld; /* sgemm's leading dimension */
} att_operand;

typedef struct {
    int nb;                 /* batch axes: rank - 2 */
    int64_t bdims[MAXR];    /* the result's batch dims */
    int64_t tq, tk, d, dv;  /* query rows, key columns, Q's depth, V's columns */
    att_operand q, k, v, m; /* Q (tq x d), K^T (d x tk), V (tk x dv), the mask (tq x tk) */
    int masked, nanrep;
    float c;         /* the NaN replacement */
    int64_t rows;    /* query rows per block */
    int64_t per;     /* floats per thread: the scores, then (bf16) att_bf16's */
    int threads;
    att_bf16 h;
} att_cfg;

/* How sgemm reads a rows x cols operand with row stride rs and column stride cs: 0 if it can. */
static int gemm_layout(att_operand *o, int64_t rows, int64_t cols)
{
    int64_t r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;
    if ((cols <= 1 || o->cs == 1) && (rows <= 1 || o->rs >= c1)) {
        o->t = 'N';
        o->ld = rows <= 1 ? c1 : o->rs;
        return 0;
    }
    if ((rows <= 1 || o->rs == 1) && (cols <= 1 || o->cs >= r1)) {
        o->t = 'T';
        o->ld = cols <= 1 ? r1 : o->cs;
        return 0;
    }
    return 1;
}

/* o from a layout of value v (rank nd, dims vd, strides vs) against the result's rank r. */
static void operand_strides(att_operand *o, int nd, const int64_t *vd, const int64_t *vs, int r)
{
    int64_t s[MAXR];
    for (int i = 0; i < r; i++) {
        int k = i - (r - nd);
        s[i] = k < 0 || vd[k] == 1 ? 0 : vs[k];
    }
    memcpy(o->b, s, sizeof(int64_t) * (size_t)(r - 2));
    o->rs = s[r - 2];
    o->cs = s[r - 1];
}

/* Value v's buffer and layout as the step reads it: the layout it has when sgemm can read it
 * there (matrix: rows x cols), else its plain bytes. *md is the caller's to free. */
static int operand(pb *b, int v, int r, int matrix, int64_t rows, int64_t cols, att_operand *o,
                   int *buf, dnnl_memory_desc_t *md)
{
    int nd;
    int64_t vd[MAXR], vs[MAXR];
    if (matrix && VAL(v)->ndim == r && !strided_of(home(b, v), &nd, vd, vs)) {
        operand_strides(o, nd, vd, vs, r);
        if (!gemm_layout(o, rows, cols)) {
            *buf = b->views[v][0].buf;
            *md = clone_md(home(b, v));
            return *md ? 0 : ox_fail(b->e, "oneDNN could not copy a memory descriptor");
        }
    }
    if (!(*md = value_plain(b, v, VAL(v)->ndim)) || strided_of(*md, &nd, vd, vs))
        return ox_fail(b->e, "oneDNN could not create a memory descriptor");
    operand_strides(o, nd, vd, vs, r);
    if (matrix && gemm_layout(o, rows, cols))
        return ox_fail(b->e, "internal: node '%s': a plain operand sgemm cannot read",
                       VAL(v)->name);
    return plain_buf(b, v, buf);
}

typedef struct {
    const att_cfg *c;
    const float *q, *k, *v, *m;
    float *y, *scratch;
} att_job;

/* A thread's memory objects for the bf16 primitives (made on first use, then re-pointed). */
typedef struct {
    dnnl_memory_t m[AB_NPRIM][4];
} att_mems;

/* Runs bf16 primitive k on src, wei (NULL for a packing), dst: 0, or 1 when oneDNN fails. */
static int run_bf16(const att_bf16 *h, att_mems *mm, int k, const void *src, const void *wei,
                    void *dst, void *pad)
{
    static const int args[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
    static const dnnl_query_t what[4] = {dnnl_query_src_md, dnnl_query_weights_md,
                                         dnnl_query_dst_md, dnnl_query_scratchpad_md};
    const void *ptr[4] = {src, wei, dst, h->pad[k] ? pad : NULL};
    const_dnnl_primitive_desc_t pd;
    dnnl_exec_arg_t ea[4];
    int n = 0;
    if (D(dnnl_primitive_get_primitive_desc)(h->prim[k], &pd) != dnnl_success) return 1;
    for (int i = 0; i < 4; i++) {
        if (!ptr[i]) continue;
        dnnl_memory_t *m = &mm->m[k][i];
        if (!*m ? D(dnnl_memory_create)(m, query(pd, what[i], 0), ox_engine(), (void *)ptr[i])
                : D(dnnl_memory_set_data_handle)(*m, (void *)ptr[i]))
            return 1;
        ea[n++] = (dnnl_exec_arg_t){args[i], *m};
    }
    dnnl_stream_t st = ox_thread_stream();
    return !st || D(dnnl_primitive_execute)(h->prim[k], st, n, ea) != dnnl_success;
}

/* The scores of a block (m rows of Q at q) as bf16 products into s, chunk by chunk of keys
 * (chunk j's m rows at s + j m cw: oneDNN 3.2's matmuls write dense rows): 0, or 1 when
 * oneDNN failed (nothing written that the float32 products would not write again). */
static int scores_bf16(const att_cfg *c, att_mems *mm, char *mine, const float *q, int64_t m,
                       float *s)
{
    const att_bf16 *h = &c->h;
    uint16_t *qb = (uint16_t *)(mine + h->at_q);
    round_bf16(q, c->q.t == 'N' ? c->q.ld : 1, c->q.t == 'N' ? 1 : c->q.ld, qb, m, c->d);
    for (int64_t j = 0; j < h->nch; j++) {
        int k = (m == c->rows ? AB_QK : AB_QK_TAIL) + (j == h->nch - 1);
        if (run_bf16(h, mm, k, qb, mine + h->at_k + (uint64_t)j * h->kch, s + j * m * h->cw,
                     mine + h->at_pad))
            return 1;
    }
    return 0;
}

/* K^T's chunks and V of a head (at k and v) packed for its blocks: 0, or 1 when oneDNN failed. */
static int pack_bf16(const att_cfg *c, att_mems *mm, char *mine, const float *k, const float *v)
{
    const att_bf16 *h = &c->h;
    for (int64_t j = 0; j < h->nch; j++)
        if (run_bf16(h, mm, AB_PACK_K + (j == h->nch - 1), k + j * h->cw * c->k.cs, NULL,
                     mine + h->at_k + (uint64_t)j * h->kch, mine + h->at_pad))
            return 1;
    return run_bf16(h, mm, AB_PACK_V, v, NULL, mine + h->at_v, mine + h->at_pad);
}

/* The position of a block in Q, K^T, V, the mask and Y. */
typedef struct {
    int64_t m, q, k, v, mask, y;
} att_at;

/* The scores of block `at` plus the mask, in s, chunks of cw keys (tk: rows) as
 * scores_bf16 writes them. */
static void add_mask(const att_cfg *c, const att_job *j, const att_at *at, float *s, int64_t cw)
{
    if (c->masked)
        for (int64_t k0 = 0; k0 < c->tk; k0 += cw) {
            int64_t w = c->tk - k0 < cw ? c->tk - k0 : cw;
            for (int64_t r = 0; r < at->m; r++) {
                float *sr = s + k0 * at->m + r * w;
                const float *mr = j->m + at->mask + r * c->m.rs + k0 * c->m.cs;
                if (c->m.cs == 1)
                    for (int64_t i = 0; i < w; i++) sr[i] += mr[i];
                else
                    for (int64_t i = 0; i < w; i++) sr[i] += mr[i * c->m.cs];
            }
        }
}

/* Block `at` in float32, on sgemm. */
static void block_f32(const att_cfg *c, const att_job *j, const att_at *at, float *s)
{
    D(dnnl_sgemm)(c->q.t, c->k.t, at->m, c->tk, c->d, 1.f, j->q + at->q, c->q.ld, j->k + at->k,
                  c->k.ld, 0.f, s, c->tk);
    add_mask(c, j, at, s, c->tk);
    softmax_rows(s, s, 0, at->m, c->tk);
    if (c->nanrep) nan_replace(s, at->m * c->tk, c->c);
    D(dnnl_sgemm)('N', c->v.t, at->m, c->dv, c->tk, 1.f, s, c->tk, j->v + at->v, c->v.ld, 0.f,
                  j->y + at->y, c->dv);
}

/* Block `at` with bf16 products (its head's K^T and V packed in the thread's share `mine`):
 * 0, or 1 when oneDNN failed (then block_f32 writes the whole block again). */
static int block_bf16(const att_cfg *c, const att_job *j, const att_at *at, att_mems *mm,
                      char *mine)
{
    const att_bf16 *h = &c->h;
    float *s = (float *)mine, inv[ATT_BF16_MAX_ROWS], *y = j->y + at->y;
    uint16_t *sb = (uint16_t *)(mine + h->at_sb);
    if (scores_bf16(c, mm, mine, j->q + at->q, at->m, s)) return 1;
    add_mask(c, j, at, s, h->cw);
    softmax_chunks_bf16(s, at->m, c->tk, h->cw, sb, inv, c->nanrep, c->c);
    if (run_bf16(h, mm, at->m == c->rows ? AB_SV : AB_SV_TAIL, sb, mine + h->at_v, y,
                 mine + h->at_pad))
        return 1;
    for (int64_t r = 0; r < at->m; r++) /* the softmax's 1 / sum, on dv columns, not tk */
        for (int64_t i = 0; i < c->dv; i++) y[r * c->dv + i] *= inv[r];
    return 0;
}

static void att_part(void *arg)
{
    const att_job *j = arg;
    const att_cfg *c = j->c;
    int me, n;
    dl_team(&me, &n);
    int64_t nbatch = 1, nblk = (c->tq + c->rows - 1) / c->rows, t0, t1, packed = -1;
    for (int d = 0; d < c->nb; d++) nbatch *= c->bdims[d];
    dl_share(nbatch * nblk, &t0, &t1);
    float *s = j->scratch + (size_t)me * (size_t)c->per;
    att_mems mm = {0};
    int bf16 = c->h.prim[AB_QK] != NULL;
    for (int64_t job = t0; job < t1; job++) {
        int64_t bi = job / nblk, i0 = job % nblk * c->rows, head = bi;
        att_at at = {c->tq - i0, i0 * c->q.rs, 0, 0, i0 * c->m.rs, (bi * c->tq + i0) * c->dv};
        if (at.m > c->rows) at.m = c->rows;
        for (int d = c->nb - 1; d >= 0; d--) { /* bi's batch index, the last axis fastest */
            int64_t idx = bi % c->bdims[d];
            bi /= c->bdims[d];
            at.q += idx * c->q.b[d];
            at.k += idx * c->k.b[d];
            at.v += idx * c->v.b[d];
            at.mask += idx * c->m.b[d];
        }
        if (c->tk == 0) { /* no keys: the weighted sum of nothing */
            memset(j->y + at.y, 0, sizeof(float) * (size_t)(at.m * c->dv));
            continue;
        }
        if (bf16 && packed != head) { /* this head's K^T and V, packed for the thread's blocks */
            bf16 = !pack_bf16(c, &mm, (char *)s, j->k + at.k, j->v + at.v);
            packed = head;
        }
        /* a failed bf16 product (oneDNN out of memory) leaves the thread's blocks to sgemm */
        if (!bf16 || (bf16 = !block_bf16(c, j, &at, &mm, (char *)s)) == 0) block_f32(c, j, &at, s);
    }
    for (int k = 0; k < AB_NPRIM; k++)
        for (int i = 0; i < 4; i++)
            if (mm.m[k][i]) D(dnnl_memory_destroy)(mm.m[k][i]);
}

static int att_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    const att_cfg *c = cfg;
    att_job j = {
        c, ptrs[0], ptrs[1], ptrs[2], c->masked ? ptrs[3] : NULL, ptrs[nptrs - 2], ptrs[nptrs - 1]};
    int64_t work = c->tq * c->tk * (c->d + c->dv);
    for (int d = 0; d < c->nb; d++) work *= c->bdims[d];
    dl_parallel(att_part, &j, dl_threads_for(work, c->threads));
    return -1;
}

/* The bf16 matmul of an m x kk bf16 block by a kk x nn weight (layout wmd, or oneDNN's pick
 * when NULL) into m x nn floats, as primitive k of c->h; 0, or 1 when oneDNN has no fast one. */
static int bf16_matmul(pb *b, att_cfg *c, int k, int64_t m, int64_t kk, int64_t nn,
                       const_dnnl_memory_desc_t wmd)
{
    int64_t ad[2] = {m, kk}, wd[2] = {kk, nn}, yd[2] = {m, nn};
    dnnl_memory_desc_t amd = typed_md(2, ad, dnnl_bf16, dnnl_ab),
                       anyw = wmd ? NULL : typed_md(2, wd, dnnl_bf16, dnnl_format_tag_any),
                       ymd = typed_md(2, yd, dnnl_f32, dnnl_ab);
    dnnl_primitive_attr_t a = plain_attr();
    dnnl_primitive_desc_t pd = NULL;
    int rc = 1;
    if (amd && (wmd || anyw) && ymd && a &&
        D(dnnl_matmul_primitive_desc_create)(&pd, ox_engine(), amd, wmd ? wmd : anyw, NULL, ymd,
                                             a) == dnnl_success &&
        fast_impl(pd) && (c->h.prim[k] = owned_prim(b, pd))) {
        c->h.pad[k] = D(dnnl_memory_desc_get_size)(query(pd, dnnl_query_scratchpad_md, 0));
        rc = 0;
    }
    if (pd) D(dnnl_primitive_desc_destroy)(pd);
    if (a) D(dnnl_primitive_attr_destroy)(a);
    md_free(amd);
    md_free(anyw);
    md_free(ymd);
    return rc;
}

/* The packing of a head's rows x cols float32 operand o into layout to, as primitive k. */
static int bf16_packing(pb *b, att_cfg *c, int k, const att_operand *o, int64_t rows, int64_t cols,
                        const_dnnl_memory_desc_t to)
{
    /* rows rs and columns cs floats apart (0: a broadcast axis of size 1) */
    int64_t d[2] = {rows, cols}, st[2] = {o->rs ? o->rs : cols, o->cs ? o->cs : 1};
    dnnl_memory_desc_t from = strided_typed_md(2, d, st, dnnl_f32);
    dnnl_primitive_attr_t a = plain_attr();
    dnnl_primitive_desc_t pd = NULL;
    int rc = 1;
    if (from && a &&
        D(dnnl_reorder_primitive_desc_create)(&pd, from, ox_engine(), to, ox_engine(), a) ==
            dnnl_success &&
        (c->h.prim[k] = owned_prim(b, pd))) {
        c->h.pad[k] = D(dnnl_memory_desc_get_size)(query(pd, dnnl_query_scratchpad_md, 0));
        rc = 0;
    }
    if (pd) D(dnnl_primitive_desc_destroy)(pd);
    if (a) D(dnnl_primitive_attr_destroy)(a);
    md_free(from);
    return rc;
}

/* The weight layout primitive k picked, or NULL. */
static const_dnnl_memory_desc_t weights_of(const att_cfg *c, int k)
{
    const_dnnl_primitive_desc_t pd;
    return c->h.prim[k] && D(dnnl_primitive_get_primitive_desc)(c->h.prim[k], &pd) == dnnl_success
               ? query(pd, dnnl_query_weights_md, 0)
               : NULL;
}

/* The bf16 products of c (its operands' layouts known): the primitives and each thread's
 * share of the scratch. 0 when they are made; 1 leaves c to sgemm (c->h cleared). */
static int bf16_products(pb *b, att_cfg *c)
{
    att_bf16 *h = &c->h;
    int64_t tail = c->tq % c->rows, cw = c->d * 8 / 64 * 64;
    h->cw = cw < 64 ? 64 : cw > c->tk ? c->tk : cw;
    h->nch = (c->tk + h->cw - 1) / h->cw;
    int64_t last = c->tk - (h->nch - 1) * h->cw;
    const_dnnl_memory_desc_t kmd = NULL, klmd = NULL, vmd = NULL;
    int ok = !bf16_matmul(b, c, AB_QK, c->rows, c->d, h->cw, NULL) &&
             !bf16_matmul(b, c, AB_QK_LAST, c->rows, c->d, last, NULL) &&
             !bf16_matmul(b, c, AB_SV, c->rows, c->tk, c->dv, NULL);
    ok = ok && (kmd = weights_of(c, AB_QK)) && (klmd = weights_of(c, AB_QK_LAST)) &&
         (vmd = weights_of(c, AB_SV));
    ok = ok && (!tail || (!bf16_matmul(b, c, AB_QK_TAIL, tail, c->d, h->cw, kmd) &&
                          !bf16_matmul(b, c, AB_QK_TAIL_LAST, tail, c->d, last, klmd) &&
                          !bf16_matmul(b, c, AB_SV_TAIL, tail, c->tk, c->dv, vmd)));
    ok = ok && !bf16_packing(b, c, AB_PACK_K, &c->k, c->d, h->cw, kmd) &&
         !bf16_packing(b, c, AB_PACK_K_LAST, &c->k, c->d, last, klmd) &&
         !bf16_packing(b, c, AB_PACK_V, &c->v, c->tk, c->dv, vmd);
    if (!ok) {
        memset(h, 0, sizeof *h); /* the primitives made stay the plan's, unused */
        return 1;
    }
    uint64_t at = align64((uint64_t)c->rows * (uint64_t)c->tk * sizeof(float)), pad = 0;
    h->kch = align64(D(dnnl_memory_desc_get_size)(kmd));
    h->at_sb = at;
    at += align64((uint64_t)c->rows * (uint64_t)c->tk * 2);
    h->at_q = at;
    at += align64((uint64_t)c->rows * (uint64_t)c->d * 2);
    h->at_k = at;
    at += h->kch * (uint64_t)(h->nch - 1) + align64(D(dnnl_memory_desc_get_size)(klmd));
    h->at_v = at;
    at += align64(D(dnnl_memory_desc_get_size)(vmd));
    h->at_pad = at;
    for (int k = 0; k < AB_NPRIM; k++)
        if (h->pad[k] > pad) pad = h->pad[k];
    c->per = (int64_t)((at + align64(pad)) / sizeof(float));
    return 0;
}

/* The ops it holds, one by one. */
static int build_each(pb *b, const ox_op *op)
{
    for (int k = 0; k < ATT_NSUB; k++)
        if (op->sub[k] >= 0 && build_op(b, &b->g->ops[op->sub[k]])) return 1;
    return 0;
}

int build_attention(pb *b, const ox_op *op)
{
    const ox_op *qk = &b->g->ops[op->sub[ATT_SCORES]];
    int r = VAL(op->out)->ndim;
    /* a mask that widens the scores (the Add's result larger than Q K^T) is left to the ops */
    int widened = op->sub[ATT_MASK] >= 0 && memcmp(DIMS(b->g->ops[op->sub[ATT_MASK]].out),
                                                   DIMS(qk->out), sizeof(int64_t) * (size_t)r);
    const int64_t *y = DIMS(op->out), *sd = DIMS(qk->out);
    /* With bf16 products on AMX, oneDNN's bf16 matmuls op by op win while a head's scores stay
     * in the cache (ViT-B/16's 197 x 197: 0.44 ms a layer against 0.79 fused, each fused
     * primitive call costing some microseconds); past a megabyte of them the memory traffic the
     * fused step saves wins, with bf16 products (Whisper's 1500 x 1500 at 2 threads: 8.1 ms a
     * layer against 14 in float32) unless a few query rows make them vectors (a decoder's
     * step: float32) */
    int bf16 = bf16_operands(b) && y[r - 2] >= ATT_BF16_ROWS;
    if (widened || (bf16_operands(b) && sd[r - 2] * sd[r - 1] < ATT_BF16_FUSED))
        return build_each(b, op);
    att_cfg c = {0};
    c.nb = r - 2;
    memcpy(c.bdims, y, sizeof(int64_t) * (size_t)c.nb);
    c.tq = y[r - 2];
    c.tk = sd[r - 1];
    c.dv = y[r - 1];
    c.d = DIMS(op->in[0])[VAL(op->in[0])->ndim - 1];
    c.masked = op->nin > 3;
    c.nanrep = op->sub[ATT_NANREP] >= 0;
    if (c.nanrep) c.c = b->g->ops[op->sub[ATT_NANREP]].alpha;
    if (bf16) { /* AMX's tiles are 16 rows; 512 kB of scores (a block of 64 rows of Whisper's
                 * 1500 keys ran its attention about a tenth faster than one of 32) */
        c.rows = c.tk > 0 ? 131072 / c.tk / 16 * 16 : 64;
        c.rows = c.rows < 16 ? 16 : c.rows > ATT_BF16_MAX_ROWS ? ATT_BF16_MAX_ROWS : c.rows;
    } else {
        c.rows = c.tk > 0 ? 65536 / c.tk : 64;
        c.rows = c.rows < 4 ? 4 : c.rows > 64 ? 64 : c.rows;
    }
    c.per = (c.rows * c.tk + 15) / 16 * 16; /* 64-byte apart */
    c.threads = b->p->threads;
    dnnl_memory_desc_t ymd = value_plain(b, op->out, r), md[4] = {0};
    int buf[4], rc = 1, reorder_out;
    if (!ymd) return ox_fail(b->e, "oneDNN could not create a memory descriptor");
    if (b->dry) {
        rc = add_view(b, op->out, ymd, 0);
        goto done;
    }
    att_operand *ops[4] = {&c.q, &c.k, &c.v, &c.m};
    int64_t rows[4] = {c.tq, c.d, c.tk, c.tq}, cols[4] = {c.d, c.tk, c.dv, c.tk};
    for (int i = 0; i < op->nin; i++)
        if (operand(b, op->in[i], r, i < 3, rows[i], cols[i], ops[i], &buf[i], &md[i])) goto done;
    if (bf16 && c.tk > 0) bf16_products(b, &c); /* else (oneDNN has none) sgemm's */
    int ybuf = dst_buf(b, op, ymd, &reorder_out), s;
    att_cfg *owned = ybuf < 0 ? NULL : owned_cfg(b, sizeof c);
    if (!owned) goto done;
    *owned = c;
    if ((s = fn_step(b, att_fn, owned, RUN_ALWAYS, "attention")) < 0) goto done;
    for (int i = 0; i < op->nin; i++)
        if (add_arg(b, s, DNNL_ARG_MULTIPLE_SRC + i, buf[i], md[i])) goto done;
    if (add_arg(b, s, DNNL_ARG_DST, ybuf, ymd)) goto done;
    /* the blocks of scores: the plan's scratch, one share per thread */
    uint64_t need = (uint64_t)c.per * sizeof(float) * (uint64_t)c.threads;
    if (need > b->p->scratch) b->p->scratch = need;
    ox_step *st = &b->p->steps[s];
    st->args[st->nargs++] = (ox_arg){DNNL_ARG_SCRATCHPAD, -1, NULL, NULL};
    rc = set_result(b, op, ybuf, ymd, reorder_out);
done:
    md_free(ymd);
    for (int i = 0; i < 4; i++) md_free(md[i]);
    return rc;
}
