/* Attention as one node (graph.c fuse_attention): MatMul(Q, K^T) -> [Mul or Div by a constant]
 * -> [Add(mask)] -> Softmax(last axis) -> [Where(IsNaN(p), C, p)] -> MatMul(p, V). For each
 * batch entry (a head) and block of query rows: the scores, scaled, masked, each row's softmax
 * (the Softmax node's own row loop), the NaN replacement, then the weighted sum of V, in a
 * block of scores per thread that stays in the cache; a decoding step's one query row is two
 * passes over the cache. K may be given as K (Tk x D) rather than K^T, when the Transpose
 * making K^T was read by the product alone (graph.c takes it in). Batch axes and the mask
 * broadcast as the nodes would broadcast them. Inputs: Q, K^T (or K), V, the mask or none. */
#include "nnc.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int scale_kind; /* ATT_SCALE_* */
    float scale;
    int k_rows; /* input 1 is K, (Tk x D), not K^T */
    int nanrep;
    float c;
} att_state;

int nnc_attention_init(nnc_node *n, int scale_kind, float scale, int k_rows, int nanrep, float c)
{
    att_state *s = calloc(1, sizeof *s);
    if (!s) return 0;
    if (n->op && n->op->destroy) n->op->destroy(n);
    n->state = s;
    n->op = &nnc_op_attention;
    *s = (att_state){scale_kind, scale, k_rows, nanrep, c};
    return 1;
}

/* The shapes of one run: every operand right-aligned to the result's rank r. */
typedef struct {
    int r;
    int64_t y[NNC_MAXDIM];    /* the result */
    int64_t tq, tk, d, dv;    /* the scores' rows and columns (after the mask), Q's depth */
    int64_t qb[NNC_MAXDIM], kb[NNC_MAXDIM], vb[NNC_MAXDIM], mb[NNC_MAXDIM]; /* batch strides */
    int64_t qrs, krs, kcs, vrs, mrs, mcs; /* Q's row, K^T's row / column, V's row, the mask's */
} att_dims;

/* t's dim i of rank r right-aligned (1 where it has none). */
static int64_t dim_at(const nnc_tensor *t, int r, int i)
{
    int k = i - (r - t->ndim);
    return k < 0 ? 1 : t->dims[k];
}

/* Broadcast a into b (both a dim): 0 when they do not. */
static int bcast(int64_t *a, int64_t b)
{
    if (*a == b || b == 1) return 1;
    if (*a != 1) return 0;
    *a = b;
    return 1;
}

/* t's element strides right-aligned to rank r, 0 along an axis of one element. */
static void strides_at(const nnc_tensor *t, int r, int64_t *st)
{
    int64_t s = 1;
    for (int i = r - 1; i >= 0; i--) {
        int64_t d = dim_at(t, r, i);
        st[i] = d == 1 ? 0 : s;
        s *= d;
    }
}

static int att_shapes(const nnc_node *n, nnc_tensor *const *in, att_dims *a, nnc_err *e)
{
    const att_state *s = n->state;
    const nnc_tensor *q = in[0], *k = in[1], *v = in[2], *m = n->nin > 3 ? in[3] : NULL;
    for (int i = 0; i < 4; i++)
        if (i < n->nin && in[i] && in[i]->dtype != DT_F32)
            return nnc_node_fail(e, n, "attention: input %d must be float32", i);
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2)
        return nnc_node_fail(e, n, "attention: Q, K and V must have rank 2 or more");
    int64_t kd = k->dims[k->ndim - (s->k_rows ? 1 : 2)],
            tk = k->dims[k->ndim - (s->k_rows ? 2 : 1)];
    a->d = q->dims[q->ndim - 1];
    if (a->d != kd)
        return nnc_node_fail(e, n, "the first MatMul's inner dimensions differ: %lld and %lld",
                             (long long)a->d, (long long)kd);
    int r = q->ndim > k->ndim ? q->ndim : k->ndim;
    if (m && m->ndim > r) r = m->ndim;
    if (v->ndim > r) r = v->ndim;
    if (r > NNC_MAXDIM) return nnc_node_fail(e, n, "attention: rank %d is too large", r);
    a->r = r;
    /* the scores: Q K^T's batch, then the mask's broadcast over them (it may widen them) */
    int64_t sd[NNC_MAXDIM];
    for (int i = 0; i < r - 2; i++) {
        sd[i] = dim_at(q, r, i);
        if (!bcast(&sd[i], dim_at(k, r, i)))
            return nnc_node_fail(e, n, "the first MatMul's batch dims do not broadcast");
    }
    sd[r - 2] = q->dims[q->ndim - 2];
    sd[r - 1] = tk;
    for (int i = 0; m && i < r; i++)
        if (!bcast(&sd[i], dim_at(m, r, i)))
            return nnc_node_fail(e, n, "the mask's dim %d (%lld) does not broadcast to the scores'",
                                 i, (long long)dim_at(m, r, i));
    a->tq = sd[r - 2];
    a->tk = sd[r - 1];
    if (v->dims[v->ndim - 2] != a->tk)
        return nnc_node_fail(e, n, "the second MatMul's inner dimensions differ: %lld and %lld",
                             (long long)a->tk, (long long)v->dims[v->ndim - 2]);
    a->dv = v->dims[v->ndim - 1];
    for (int i = 0; i < r - 2; i++) {
        a->y[i] = sd[i];
        if (!bcast(&a->y[i], dim_at(v, r, i)))
            return nnc_node_fail(e, n, "the second MatMul's batch dims do not broadcast");
    }
    a->y[r - 2] = a->tq;
    a->y[r - 1] = a->dv;
    int64_t st[NNC_MAXDIM];
    strides_at(q, r, st);
    memcpy(a->qb, st, sizeof st);
    a->qrs = st[r - 2];
    strides_at(k, r, st);
    memcpy(a->kb, st, sizeof st);
    a->krs = s->k_rows ? st[r - 1] : st[r - 2]; /* along the depth */
    a->kcs = s->k_rows ? st[r - 2] : st[r - 1]; /* along the keys */
    strides_at(v, r, st);
    memcpy(a->vb, st, sizeof st);
    a->vrs = st[r - 2];
    if (m) {
        strides_at(m, r, st);
        memcpy(a->mb, st, sizeof st);
        a->mrs = st[r - 2];
        a->mcs = st[r - 1];
    }
    return NNC_OK;
}

static int att_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    att_dims a;
    TRY(att_shapes(n, in, &a, e));
    out->dtype = DT_F32;
    out->ndim = a.r;
    memcpy(out->dims, a.y, sizeof(int64_t) * (size_t)a.r);
    return NNC_OK;
}

typedef struct {
    const att_state *s;
    const att_dims *a;
    const float *q, *k, *v, *m;
    float *y;
    int64_t rows;
    int failed; /* a thread had no memory for its scores */
} att_job;

/* y[0..n) += a * x[0..n) */
MULTIVERSION
static void axpy(float a, const float *x, float *y, int64_t n)
{
    for (int64_t j = 0; j < n; j++) y[j] += a * x[j];
}

MULTIVERSION
static float dot(const float *x, const float *y, int64_t n)
{
    float l[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int i = 0; i < 8; i++) l[i] += x[j + i] * y[j + i];
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; j < n; j++) s += x[j] * y[j];
    return s;
}

/* One query row's scores into s: dot products of its depth with K's rows, or sums of K^T's
 * rows scaled by it (a decoding step: one pass over the cache, nothing packed); a key or a
 * depth of one broadcast, element by element. */
static void one_row_scores(const att_dims *a, const float *q, const float *k, float *s)
{
    if (a->krs == 1 && a->kcs != 0) { /* K's rows contiguous */
        for (int64_t j = 0; j < a->tk; j++) s[j] = dot(q, k + j * a->kcs, a->d);
    } else if (a->kcs == 1) { /* K^T's rows contiguous */
        memset(s, 0, sizeof(float) * (size_t)a->tk);
        for (int64_t i = 0; i < a->d; i++) axpy(q[i], k + i * a->krs, s, a->tk);
    } else {
        for (int64_t j = 0; j < a->tk; j++) {
            float acc = 0.f;
            for (int64_t i = 0; i < a->d; i++) acc += q[i] * k[i * a->krs + j * a->kcs];
            s[j] = acc;
        }
    }
}

/* K^T (d x tk) packed as the product's B: by rows when its keys are contiguous, else each
 * row gathered first (K's columns, or one key broadcast). */
static void pack_kt(const att_dims *a, const float *k, float *row, float *pb)
{
    if (a->kcs == 1) {
        nnc_sgemm_pack_b(a->d, a->tk, k, a->krs, pb);
        return;
    }
    for (int64_t i = 0; i < a->d; i++) {
        for (int64_t j = 0; j < a->tk; j++) row[j] = k[i * a->krs + j * a->kcs];
        nnc_sgemm_pack_b_row(a->d, i, a->tk, row, pb);
    }
}

/* The probabilities of m score rows, in place: scaled, masked, softmax, NaN replaced. */
static void probabilities(const att_state *st, const att_dims *a, const float *mask, int64_t m,
                          float *s)
{
    for (int64_t r = 0; r < m; r++) {
        float *sr = s + r * a->tk;
        if (st->scale_kind == ATT_SCALE_MUL)
            for (int64_t i = 0; i < a->tk; i++) sr[i] = sr[i] * st->scale;
        else if (st->scale_kind == ATT_SCALE_DIV)
            for (int64_t i = 0; i < a->tk; i++) sr[i] = sr[i] / st->scale;
        if (mask) {
            const float *mr = mask + r * a->mrs;
            for (int64_t i = 0; i < a->tk; i++) sr[i] = sr[i] + mr[i * a->mcs];
        }
        nnc_softmax_row(sr, a->tk);
        if (st->nanrep)
            for (int64_t i = 0; i < a->tk; i++)
                if (sr[i] != sr[i]) sr[i] = st->c;
    }
}

/* Thread-local memory of a head's job: packed K^T and V, a block's packed rows and scores. */
static _Thread_local nnc_tbuf t_kt, t_v, t_pa, t_s;

/* Batch entries (heads) [b, e): with more than one query row, K^T and V packed once each,
 * then each block of query rows through both products. */
static void att_heads(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    att_job *j = arg;
    const att_dims *a = j->a;
    int64_t d = a->d, tk = a->tk, dv = a->dv, rows = j->rows;
    int packed = a->tq > 1;
    float *s = nnc_tbuf_get(&t_s, sizeof(float) * (size_t)(rows * tk + tk + 16)), *pk = NULL,
          *pvb = NULL, *pa = NULL;
    if (packed) {
        int64_t widest = d > tk ? d : tk;
        pk = nnc_tbuf_get(&t_kt, sizeof(float) * (size_t)nnc_sgemm_packed_b_floats(d, tk));
        pvb = nnc_tbuf_get(&t_v, sizeof(float) * (size_t)nnc_sgemm_packed_b_floats(tk, dv));
        pa = nnc_tbuf_get(&t_pa, sizeof(float) * (size_t)nnc_sgemm_packed_a_floats(rows, widest));
    }
    if (!s || (packed && (!pk || !pvb || !pa))) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t bi = b; bi < e; bi++) {
        int64_t qo = 0, ko = 0, vo = 0, mo = 0, rest = bi;
        for (int dd = a->r - 3; dd >= 0; dd--) { /* bi's batch index, the last axis fastest */
            int64_t idx = rest % a->y[dd];
            rest /= a->y[dd];
            qo += idx * a->qb[dd];
            ko += idx * a->kb[dd];
            vo += idx * a->vb[dd];
            mo += idx * a->mb[dd];
        }
        const float *q = j->q + qo, *k = j->k + ko, *v = j->v + vo;
        const float *mask = j->m ? j->m + mo : NULL;
        float *y = j->y + bi * a->tq * dv;
        if (tk == 0) { /* no keys: the weighted sum of nothing */
            memset(y, 0, sizeof(float) * (size_t)(a->tq * dv));
            continue;
        }
        if (!packed) { /* one query row */
            one_row_scores(a, q, k, s);
            probabilities(j->s, a, mask, 1, s);
            memset(y, 0, sizeof(float) * (size_t)dv);
            for (int64_t t = 0; t < tk; t++) axpy(s[t], v + t * a->vrs, y, dv);
            continue;
        }
        pack_kt(a, k, s, pk);
        nnc_sgemm_pack_b(tk, dv, v, a->vrs, pvb);
        for (int64_t i0 = 0; i0 < a->tq; i0 += rows) {
            int64_t m = a->tq - i0 < rows ? a->tq - i0 : rows;
            nnc_sgemm_pack_a(m, d, q + i0 * a->qrs, a->qrs, pa);
            nnc_sgemm_packed(m, tk, d, pa, pk, s, tk, NULL);
            probabilities(j->s, a, mask ? mask + i0 * a->mrs : NULL, m, s);
            nnc_sgemm_pack_a(m, tk, s, tk, pa);
            nnc_sgemm_packed(m, dv, tk, pa, pvb, y + i0 * dv, dv, NULL);
        }
    }
}

static int att_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    att_dims a;
    TRY(att_shapes(n, in, &a, e));
    int64_t nbatch = 1;
    for (int d = 0; d < a.r - 2; d++) nbatch *= a.y[d];
    /* a block of query rows holds up to 64 rows and about 256 KB of scores */
    int64_t rows = a.tk > 0 ? 65536 / a.tk : 64;
    rows = rows < 1 ? 1 : rows > 64 ? 64 : rows;
    if (rows > a.tq) rows = a.tq;
    att_job j = {n->state,    &a,          in[0]->data,
                 in[1]->data, in[2]->data, n->nin > 3 && in[3] ? in[3]->data : NULL,
                 out->data,   rows,        0};
    int64_t per = a.tq * a.tk * (a.d + a.dv) + 1; /* multiply-adds of a head */
    nnc_parallel_for(nbatch, 1 + 65536 / per, att_heads, &j);
    if (j.failed) return nnc_node_fail(e, n, "out of memory for the attention's scores");
    return NNC_OK;
}

static void att_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

const nnc_op nnc_op_attention = {"AttentionChain", 3,       4,           1, 1, NULL,
                                 att_infer,        att_run, att_destroy, 0};
