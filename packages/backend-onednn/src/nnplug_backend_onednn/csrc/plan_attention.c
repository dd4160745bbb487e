/* Attention (OP_ATTENTION, graph.c attention) as one step of the backend's own: for each batch
 * entry (a head) and block of query rows, the scores S = Q K^T (oneDNN's sgemm), S += mask,
 * each row's softmax, the NaN replacement, then Y = S V, in a block of scores per thread small
 * enough to stay in its core's cache. The threads share the blocks; each sgemm runs on its
 * caller's thread. Q, K^T and V are read where they are when their last two axes can be read
 * as a matrix (a Transpose's strided view of the projections), else in plain layout. The step
 * computes in float32; with bf16 products on AMX short sequences run op by op as oneDNN's bf16
 * matmuls instead (see build_attention). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "plan.h"

#define ATT_BF16_FUSED (1 << 18) /* scores of a head (floats) from which bf16 runs fused */

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
    int64_t per;     /* floats of scores per thread */
    int threads;
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

static void att_part(void *arg)
{
    const att_job *j = arg;
    const att_cfg *c = j->c;
    int me, n;
    dl_team(&me, &n);
    int64_t nbatch = 1, nblk = (c->tq + c->rows - 1) / c->rows, t0, t1;
    for (int d = 0; d < c->nb; d++) nbatch *= c->bdims[d];
    dl_share(nbatch * nblk, &t0, &t1);
    float *s = j->scratch + (size_t)me * (size_t)c->per;
    for (int64_t job = t0; job < t1; job++) {
        int64_t bi = job / nblk, i0 = job % nblk * c->rows, m = c->tq - i0;
        if (m > c->rows) m = c->rows;
        int64_t qo = i0 * c->q.rs, ko = 0, vo = 0, mo = i0 * c->m.rs,
                yo = (bi * c->tq + i0) * c->dv;
        for (int d = c->nb - 1; d >= 0; d--) { /* bi's batch index, the last axis fastest */
            int64_t idx = bi % c->bdims[d];
            bi /= c->bdims[d];
            qo += idx * c->q.b[d];
            ko += idx * c->k.b[d];
            vo += idx * c->v.b[d];
            mo += idx * c->m.b[d];
        }
        float *y = j->y + yo;
        if (c->tk == 0) { /* no keys: the weighted sum of nothing */
            memset(y, 0, sizeof(float) * (size_t)(m * c->dv));
            continue;
        }
        D(dnnl_sgemm)(c->q.t, c->k.t, m, c->tk, c->d, 1.f, j->q + qo, c->q.ld, j->k + ko, c->k.ld,
                      0.f, s, c->tk);
        if (c->masked)
            for (int64_t r = 0; r < m; r++) {
                float *sr = s + r * c->tk;
                const float *mr = j->m + mo + r * c->m.rs;
                if (c->m.cs == 1)
                    for (int64_t i = 0; i < c->tk; i++) sr[i] += mr[i];
                else
                    for (int64_t i = 0; i < c->tk; i++) sr[i] += mr[i * c->m.cs];
            }
        softmax_rows(s, s, 0, m, c->tk);
        if (c->nanrep) nan_replace(s, m * c->tk, c->c);
        D(dnnl_sgemm)('N', c->v.t, m, c->dv, c->tk, 1.f, s, c->tk, j->v + vo, c->v.ld, 0.f, y,
                      c->dv);
    }
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
    /* With bf16 products on AMX, oneDNN's bf16 matmuls win while a head's scores stay in the
     * cache (ViT-B/16's 197 x 197: 34.8 ms against 36.1 fused); past a megabyte of them the
     * memory traffic the fused step saves wins (Whisper's 1500 x 1500: 63.6 ms against 80.4) */
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
    c.rows = c.tk > 0 ? 65536 / c.tk : 64;
    c.rows = c.rows < 4 ? 4 : c.rows > 64 ? 64 : c.rows;
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
