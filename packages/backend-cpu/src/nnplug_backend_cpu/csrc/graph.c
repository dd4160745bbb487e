/* Building and running plans. See graph.h. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_MONOTONIC under -std=c11 */
#include "graph.h"
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>


static char *dup_str(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    char *d = malloc(n + 1);
    if (d) {
        if (n) memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static int info_static(const nnc_valinfo *v)
{
    if (v->dtype == DT_UNDEF || !nnc_dtsize(v->dtype) || v->ndim < 0) return 0;
    for (int d = 0; d < v->ndim; d++)
        if (v->dims[d] < 0) return 0;
    return 1;
}

static size_t info_nbytes(const nnc_valinfo *v)
{
    int64_t k = nnc_info_numel(v);
    return k < 0 ? 0 : (size_t)k * nnc_dtsize(v->dtype);
}

static void info_tensor(const nnc_valinfo *v, void *data, nnc_tensor *t)
{
    t->dtype = v->dtype;
    t->ndim = v->ndim < 0 ? 0 : v->ndim;
    memcpy(t->dims, v->dims, sizeof t->dims);
    t->data = data;
}

void nnc_plan_free(nnc_plan *p)
{
    if (!p) return;
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *n = &p->nodes[i];
        if (n->op && n->op->destroy) n->op->destroy(n);
        else free(n->state);
        free((char *)n->name);
        free((char *)n->op_type);
        free(n->fused_names);
        free(n->fused_types);
    }
    for (int v = 0; v < p->nvals; v++) {
        free(p->vals[v].name);
        nnc_free(p->vals[v].owned);
    }
    free(p->nodes);
    free(p->vals);
    free(p->kin_val);
    free(p->kout_val);
    free(p);
}

/* ---- value table --------------------------------------------------------------------- */

static int find_value(const nnc_plan *p, const char *name)
{
    for (int v = p->nvals - 1; v >= 0; v--)
        if (!strcmp(p->vals[v].name, name)) return v;
    return -1;
}

static int add_value(nnc_plan *p, const nnc_desc_value *d, int producer)
{
    nnc_value *v = &p->vals[p->nvals];
    memset(v, 0, sizeof *v);
    v->name = dup_str(d->name);
    if (!v->name) return -1;
    v->info = d->info;
    if (v->info.ndim > NNC_MAXDIM) v->info.ndim = -1;
    v->is_const = d->info.const_data != NULL && producer < 0;
    v->producer = producer;
    v->ext_out = -1;
    v->root = p->nvals;
    v->offset = -1;
    return p->nvals++;
}

/* ---- fusion -------------------------------------------------------------------------- */

static int consumers(const nnc_plan *p, int v, int *only)
{
    int c = 0;
    for (int i = 0; i < p->nnodes; i++) {
        const nnc_node *n = &p->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] == v) {
                c++;
                *only = i;
                break;
            }
    }
    return c;
}

/* The single live consumer of v inside the plan, when v is not needed elsewhere. */
static nnc_node *sole_consumer(nnc_plan *p, int v)
{
    int only = -1;
    if (v < 0 || p->vals[v].ext_out >= 0) return NULL;
    if (consumers(p, v, &only) != 1) return NULL;
    return &p->nodes[only];
}

static int is_op(const nnc_node *n, const char *t)
{
    return n && n->op && !strcmp(n->op->type, t);
}

/* from is done by into from now on */
static void fuse_into(nnc_plan *p, nnc_node *into, nnc_node *from)
{
    from->dead = 1;
    from->fused_into = (int)(into - p->nodes);
}

static void take_output(nnc_plan *p, nnc_node *into, nnc_node *from)
{
    into->out[0] = from->out[0];
    if (into->out[0] >= 0) p->vals[into->out[0]].producer = (int)(into - p->nodes);
    fuse_into(p, into, from);
}

static void fold_affines(nnc_plan *p)
{
    float *scale = NULL, *shift = NULL;
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *c = &p->nodes[i];
        if (c->dead) continue;
        int conv = is_op(c, "Conv"), bn = is_op(c, "BatchNormalization");
        if (!conv && !bn) continue;
        int64_t C;
        if (conv) {
            if (!nnc_conv_can_fold(c)) continue;
            C = nnc_conv_out_channels(c);
        } else {
            const nnc_valinfo *x = c->vin[0];
            if (!x || x->ndim < 2 || x->dims[1] < 1 || c->act.kind != ACT_NONE) continue;
            C = x->dims[1];
        }
        free(scale);
        free(shift);
        scale = malloc((size_t)C * sizeof(float));
        shift = malloc((size_t)C * sizeof(float));
        if (!scale || !shift) break;
        if (bn && !nnc_bn_affine(c, C, scale, shift))
            continue; /* statistics only known at run time */
        for (;;) {
            int v = c->out[0];
            if (v < 0) break;
            int rank = p->vals[v].info.ndim;
            if (rank < 2) break;
            nnc_node *u = sole_consumer(p, v);
            if (!u) break;
            if (conv && is_op(u, "BatchNormalization") && u->in[0] == v &&
                nnc_bn_affine(u, C, scale, shift)) {
                nnc_conv_fold_affine(c, scale, shift);
            } else if (u->nin == 2 &&
                       nnc_per_channel_affine(u, u->in[0] == v ? 0 : 1, C, rank, scale, shift) &&
                       (u->in[0] == v) != (u->in[1] == v)) {
                if (conv) nnc_conv_fold_affine(c, scale, shift);
                else nnc_channel_affine_fold(c, scale, shift);
            } else {
                break;
            }
            take_output(p, c, u);
        }
    }
    free(scale);
    free(shift);
}

static int same_static_shape(const nnc_valinfo *a, const nnc_valinfo *b)
{
    if (!info_static(a) || !info_static(b) || a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return 1;
}

static void fuse_residuals(nnc_plan *p)
{
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *a = &p->nodes[i];
        if (a->dead || a->nin != 2 || !(is_op(a, "Add") || is_op(a, "Sum"))) continue;
        if (a->in[0] < 0 || a->in[1] < 0 || a->in[0] == a->in[1] || a->out[0] < 0) continue;
        const nnc_valinfo *o = &p->vals[a->out[0]].info;
        int best = -1, bestk = -1;
        for (int k = 0; k < 2; k++) {
            int v = a->in[k], other = a->in[1 - k];
            int pi = p->vals[v].producer;
            if (pi < 0) continue;
            nnc_node *c = &p->nodes[pi];
            if (!(is_op(c, "Conv") || nnc_matmul_packed(c)) || c->dead || c->residual >= 0 ||
                c->act.kind != ACT_NONE || c->nin >= NNC_MAXIO)
                continue;
            if (sole_consumer(p, v) != a) continue;
            if (!same_static_shape(&p->vals[v].info, o) ||
                !same_static_shape(&p->vals[other].info, o))
                continue;
            if (p->vals[other].info.dtype != DT_F32) continue;
            int op = p->vals[other].producer;
            if (op >= pi) continue; /* the other operand must exist before the conv runs */
            if (pi > best) {
                best = pi;
                bestk = k;
            }
        }
        if (best < 0) continue;
        nnc_node *c = &p->nodes[best];
        c->in[c->nin] = a->in[1 - bestk];
        c->vin[c->nin] = &p->vals[a->in[1 - bestk]].info;
        c->residual = c->nin++;
        take_output(p, c, a);
    }
}

/* A constant c added to (or multiplying) a value of rank `rank` whose last dim is `last` (-1:
 * any) leaves its shape as it is: c has no more dims, all 1 but a last one of 1 or `last`.
 * Shapes need not be known for that, so these fusions also run where ONNX's inference leaves
 * dims unknown (BERT's batch dim, lost in its attention mask). */
static int bias_keeps_shape(const nnc_valinfo *c, int rank, int64_t last)
{
    if (!c || rank < 1 || c->ndim > rank) return 0;
    for (int d = 0; d + 1 < c->ndim; d++)
        if (c->dims[d] != 1) return 0;
    if (c->ndim == 0) return last < 0;
    int64_t l = c->dims[c->ndim - 1];
    return last < 0 ? l == 1 : l == last;
}

/* The constant (float32) operand of a two-input node whose other input is v, or NULL. */
static const nnc_valinfo *const_other(const nnc_plan *p, const nnc_node *n, int v)
{
    if (n->nin != 2 || n->in[0] < 0 || n->in[1] < 0 || (n->in[0] == v) == (n->in[1] == v))
        return NULL;
    const nnc_value *o = &p->vals[n->in[n->in[0] == v ? 1 : 0]];
    if (!o->is_const || !o->info.const_data || o->info.dtype != DT_F32 || !info_static(&o->info))
        return NULL;
    return &o->info;
}

static int const_scalar(const nnc_valinfo *c, float want, int rank)
{
    return c && nnc_info_numel(c) == 1 && bias_keeps_shape(c, rank, -1) &&
           *(const float *)c->const_data == want;
}

/* MatMul (packed constant B) then Add of a constant [N] (or [1, ..., N]) bias: the bias is added
 * in the GEMM's epilogue. */
static void fuse_matmul_bias(nnc_plan *p)
{
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *c = &p->nodes[i];
        if (c->dead || !nnc_matmul_packed(c) || c->out[0] < 0) continue;
        int v = c->out[0];
        nnc_node *u = sole_consumer(p, v);
        if (!is_op(u, "Add")) continue;
        const nnc_valinfo *b = const_other(p, u, v);
        if (!b || u->out[0] < 0 || !bias_keeps_shape(b, p->vals[v].info.ndim, nnc_matmul_cols(c)))
            continue;
        if (!nnc_matmul_set_bias(c, b->const_data)) continue;
        take_output(p, c, u);
    }
}

/* The exact Gelu as exporters decompose it, after a packed MatMul: torch's TorchScript
 * exporter writes (x * (Erf(x / d) + 1)) * 0.5 (Div, Erf, Add, Mul x, Mul 0.5), its dynamo
 * exporter x * ((Erf(x / d) + 1) * 0.5) (Div, Erf, Add, Mul 0.5, Mul x); either runs as one
 * epilogue activation (nnc_vgelu_erf, the same operations in the same order with a vectorised
 * erf). */
static void fuse_gelu_erf(nnc_plan *p)
{
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *c = &p->nodes[i];
        if (c->dead || !nnc_matmul_packed(c) || c->act.kind != ACT_NONE || c->residual >= 0 ||
            c->out[0] < 0)
            continue;
        int x = c->out[0], only = -1;
        if (p->vals[x].ext_out >= 0 || consumers(p, x, &only) != 2) continue;
        nnc_node *dv = NULL, *mx = NULL;
        for (int k = 0; k < p->nnodes; k++) {
            nnc_node *q = &p->nodes[k];
            if (q->dead || q->nin != 2 || (q->in[0] != x && q->in[1] != x)) continue;
            if (is_op(q, "Div") && q->in[0] == x) dv = q;
            else if (is_op(q, "Mul")) mx = q;
        }
        if (!dv || !mx || dv->in[1] < 0 || mx->in[0] == mx->in[1]) continue;
        const nnc_value *dc = &p->vals[dv->in[1]];
        int rank = p->vals[x].info.ndim;
        if (!dc->is_const || dc->info.dtype != DT_F32 || nnc_info_numel(&dc->info) != 1 ||
            !dc->info.const_data || !bias_keeps_shape(&dc->info, rank, -1))
            continue;
        float d = *(const float *)dc->info.const_data;
        nnc_node *ef = sole_consumer(p, dv->out[0]);
        if (!is_op(ef, "Erf") || ef->in[0] != dv->out[0]) continue;
        nnc_node *ad = sole_consumer(p, ef->out[0]);
        if (!is_op(ad, "Add") || !const_scalar(const_other(p, ad, ef->out[0]), 1.f, rank)) continue;
        int other = mx->in[mx->in[0] == x ? 1 : 0]; /* what mx multiplies x by */
        nnc_node *after = sole_consumer(p, ad->out[0]), *m1, *m2;
        int halve_first = !(after == mx && other == ad->out[0]);
        if (!halve_first) { /* x * (erf + 1), then * 0.5 */
            m1 = mx;
            m2 = sole_consumer(p, mx->out[0]);
            if (!is_op(m2, "Mul") || !const_scalar(const_other(p, m2, mx->out[0]), 0.5f, rank))
                continue;
        } else { /* (erf + 1) * 0.5, then x * that */
            m1 = after;
            if (!is_op(m1, "Mul") || !const_scalar(const_other(p, m1, ad->out[0]), 0.5f, rank) ||
                other != m1->out[0] || sole_consumer(p, m1->out[0]) != mx)
                continue;
            m2 = mx;
        }
        if (m2->out[0] < 0) continue;
        if (p->vals[dv->out[0]].ext_out >= 0 || p->vals[ef->out[0]].ext_out >= 0 ||
            p->vals[ad->out[0]].ext_out >= 0 || p->vals[m1->out[0]].ext_out >= 0)
            continue;
        c->act.kind = ACT_GELU_ERF;
        c->act.a = d;
        c->act.b = halve_first ? 1.f : 0.f;
        nnc_node *chain[5] = {dv, ef, ad, m1, m2};
        for (int k = 0; k < 5; k++) take_output(p, c, chain[k]);
    }
}

/* Whether n is a Cast of float32 to float32 (T5 and Llama write them around the RMS
 * normalization): the value itself. */
static int same_type_cast(const nnc_plan *p, const nnc_node *n)
{
    return is_op(n, "Cast") && n->in[0] >= 0 && n->out[0] >= 0 &&
           p->vals[n->in[0]].info.dtype == DT_F32 && p->vals[n->out[0]].info.dtype == DT_F32;
}

/* An RMS normalization as T5 and Llama export it, [Cast] -> Pow(x, 2) -> ReduceMean(last axis)
 * -> Add(eps) -> Sqrt -> Div(1, .) or Reciprocal -> Mul(x, .) [-> Cast -> Mul(weight, .)], with
 * float32-to-float32 Casts, becomes one RMSNormChain node (op_norm.c) in the place of its last
 * node: a decoding step's nine nodes per normalization are one. */
static void fuse_rms_norm(nnc_plan *p)
{
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *pw = &p->nodes[i];
        if (pw->dead || !is_op(pw, "Pow") || pw->in[0] < 0 || pw->out[0] < 0) continue;
        int x = pw->in[0], rank = p->vals[x].info.ndim;
        if (p->vals[x].info.dtype != DT_F32 || rank < 1 ||
            !const_scalar(const_other(p, pw, x), 2.f, rank))
            continue;
        nnc_node *rm = sole_consumer(p, pw->out[0]);
        if (!is_op(rm, "ReduceMean") || rm->in[0] != pw->out[0] || !nnc_reduce_mean_last(rm, rank))
            continue;
        nnc_node *ad = sole_consumer(p, rm->out[0]);
        const nnc_valinfo *eps = ad && is_op(ad, "Add") ? const_other(p, ad, rm->out[0]) : NULL;
        if (!eps || nnc_info_numel(eps) != 1 || !bias_keeps_shape(eps, rank, -1)) continue;
        nnc_node *sq = sole_consumer(p, ad->out[0]);
        if (!is_op(sq, "Sqrt")) continue;
        nnc_node *rc = sole_consumer(p, sq->out[0]);
        if (!(is_op(rc, "Reciprocal") || (is_op(rc, "Div") && rc->in[1] == sq->out[0] &&
                                          const_scalar(const_other(p, rc, sq->out[0]), 1.f, rank))))
            continue;
        nnc_node *mx = sole_consumer(p, rc->out[0]);
        if (!is_op(mx, "Mul") || mx->nin != 2 || mx->in[mx->in[0] == rc->out[0] ? 1 : 0] != x ||
            mx->out[0] < 0)
            continue;
        nnc_node *last = mx, *cast = NULL;
        int w = -1;
        if (p->vals[x].producer >= 0 && same_type_cast(p, &p->nodes[p->vals[x].producer])) {
            int only = -1;
            nnc_node *c0 = &p->nodes[p->vals[x].producer];
            if (p->vals[x].ext_out < 0 && consumers(p, x, &only) == 2) cast = c0;
        }
        nnc_node *after = sole_consumer(p, mx->out[0]), *c1 = NULL;
        if (after && same_type_cast(p, after)) {
            c1 = after;
            after = sole_consumer(p, c1->out[0]);
        }
        int y = (c1 ? c1 : mx)->out[0];
        const nnc_valinfo *wi = after && is_op(after, "Mul") ? const_other(p, after, y) : NULL;
        if (wi && wi->ndim == 1 &&
            (p->vals[x].info.dims[rank - 1] < 0 || wi->dims[0] == p->vals[x].info.dims[rank - 1])) {
            w = after->in[after->in[0] == y ? 1 : 0];
            last = after;
        } else if (c1) {
            last = c1;
        }
        if (last->out[0] < 0) continue;
        if (!nnc_rms_norm_init(last, *(const float *)eps->const_data)) continue;
        last->in[0] = cast ? cast->in[0] : x;
        last->vin[0] = &p->vals[last->in[0]].info;
        last->in[1] = w;
        last->vin[1] = w >= 0 ? &p->vals[w].info : NULL;
        last->nin = w >= 0 ? 2 : 1;
        last->act.kind = ACT_NONE;
        last->residual = -1;
        nnc_node *chain[] = {cast, pw, rm, ad, sq, rc, mx, c1, w >= 0 ? after : NULL};
        for (int k = 0; k < 9; k++)
            if (chain[k] && chain[k] != last) fuse_into(p, last, chain[k]);
    }
}

/* A float32 value of known rank 2 or more. */
static int f32_matrices(const nnc_plan *p, int v)
{
    return v >= 0 && p->vals[v].info.dtype == DT_F32 && p->vals[v].info.ndim >= 2;
}

/* Attention as exported: MatMul(Q, K^T) -> [Mul or Div by a constant scalar] -> [Add(mask)] ->
 * Softmax(last axis) -> [Where(IsNaN(p), C, p)] -> MatMul(p, V), each result read by the next
 * node alone, becomes one AttentionChain node (op_attention.c) in the place of the second
 * MatMul (V is often made after the first); a Transpose making K^T from K that the first
 * MatMul alone reads goes in too (a decoder's cache is then not copied every step). */
static void fuse_attention(nnc_plan *p)
{
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *qk = &p->nodes[i];
        if (qk->dead || !is_op(qk, "MatMul") || nnc_matmul_packed(qk) || qk->nin != 2 ||
            !f32_matrices(p, qk->in[0]) || !f32_matrices(p, qk->in[1]) || qk->out[0] < 0 ||
            qk->act.kind != ACT_NONE || qk->residual >= 0)
            continue;
        int v = qk->out[0], rank = p->vals[v].info.ndim, kind = ATT_SCALE_NONE, mask = -1;
        if (rank < 2) continue;
        nnc_node *u = sole_consumer(p, v), *chain[8];
        int n = 0;
        float scale = 1.f;
        const nnc_valinfo *c = u && (is_op(u, "Mul") || (is_op(u, "Div") && u->in[0] == v))
                                   ? const_other(p, u, v)
                                   : NULL;
        if (c && nnc_info_numel(c) == 1 && bias_keeps_shape(c, rank, -1)) {
            kind = is_op(u, "Mul") ? ATT_SCALE_MUL : ATT_SCALE_DIV;
            scale = *(const float *)c->const_data;
            chain[n++] = u;
            v = u->out[0];
            u = sole_consumer(p, v);
        }
        if (is_op(u, "Add") && u->nin == 2 && u->in[0] >= 0 && u->in[1] >= 0 &&
            u->in[0] != u->in[1]) {
            mask = u->in[u->in[0] == v ? 1 : 0];
            if (p->vals[mask].info.dtype != DT_F32 || p->vals[mask].info.ndim < 0 ||
                p->vals[mask].info.ndim > rank)
                continue;
            chain[n++] = u;
            v = u->out[0];
            u = sole_consumer(p, v);
        }
        if (!is_op(u, "Softmax") || !nnc_softmax_last_axis(u, rank) || u->out[0] < 0) continue;
        chain[n++] = u;
        v = u->out[0];
        int nanrep = 0, only = -1;
        float rep = 0.f;
        u = sole_consumer(p, v);
        if (!u && p->vals[v].ext_out < 0 && consumers(p, v, &only) == 2) {
            /* Where(IsNaN(p), C, p): the two readers of p */
            nnc_node *isn = NULL, *w = NULL;
            for (int k = 0; k < p->nnodes; k++) {
                nnc_node *x = &p->nodes[k];
                if (x->dead || x->nin < 1) continue;
                if (is_op(x, "IsNaN") && x->in[0] == v) isn = x;
                else if (is_op(x, "Where") && x->nin == 3 && x->in[2] == v) w = x;
            }
            const nnc_value *cv = w && w->in[1] >= 0 ? &p->vals[w->in[1]] : NULL;
            if (!isn || !w || isn->out[0] < 0 || w->in[0] != isn->out[0] ||
                sole_consumer(p, isn->out[0]) != w || !cv || !cv->is_const ||
                cv->info.dtype != DT_F32 || nnc_info_numel(&cv->info) != 1 ||
                !cv->info.const_data || w->out[0] < 0)
                continue;
            nanrep = 1;
            rep = *(const float *)cv->info.const_data;
            chain[n++] = isn;
            chain[n++] = w;
            v = w->out[0];
            u = sole_consumer(p, v);
        }
        if (!is_op(u, "MatMul") || u->in[0] != v || nnc_matmul_packed(u) || u->nin != 2 ||
            !f32_matrices(p, u->in[1]) || u->out[0] < 0 || u->act.kind != ACT_NONE ||
            u->residual >= 0)
            continue;
        nnc_node *pv = u;
        int k = qk->in[1], k_rows = 0, kr = p->vals[k].info.ndim;
        nnc_node *t = p->vals[k].producer >= 0 ? &p->nodes[p->vals[k].producer] : NULL;
        if (t && !t->dead && is_op(t, "Transpose") && t->in[0] >= 0 &&
            nnc_transpose_swaps_last_two(t, kr) && sole_consumer(p, k) == qk) {
            chain[n++] = t;
            k = t->in[0];
            k_rows = 1;
        }
        int q = qk->in[0], vals = pv->in[1];
        chain[n++] = qk;
        if (!nnc_attention_init(pv, kind, scale, k_rows, nanrep, rep)) continue;
        pv->in[0] = q;
        pv->in[1] = k;
        pv->in[2] = vals;
        pv->in[3] = mask;
        pv->nin = mask >= 0 ? 4 : 3;
        for (int j = 0; j < pv->nin; j++) pv->vin[j] = &p->vals[pv->in[j]].info;
        for (int j = 0; j < n; j++) fuse_into(p, pv, chain[j]);
    }
}

static int takes_act(const nnc_node *n)
{
    if (nnc_matmul_packed(n)) return 1;
    static const char *ops[] = {"Conv",
                                "Gemm",
                                "BatchNormalization",
                                "ChannelAffine",
                                "MaxPool",
                                "AveragePool",
                                "GlobalAveragePool",
                                "GlobalMaxPool",
                                "Concat",
                                "Add",
                                "Sub",
                                "Mul",
                                "Div",
                                "Sum",
                                "LRN",
                                NULL};
    for (const char **o = ops; *o; o++)
        if (is_op(n, *o)) return 1;
    return 0;
}

static void fuse_activations(nnc_plan *p)
{
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *r = &p->nodes[i];
        nnc_act act;
        if (r->dead || !(is_op(r, "Relu") || is_op(r, "Clip") || is_op(r, "LeakyRelu"))) continue;
        if (r->in[0] < 0 || !nnc_unary_as_act(r, &act)) continue;
        int pi = p->vals[r->in[0]].producer;
        if (pi < 0) continue;
        nnc_node *c = &p->nodes[pi];
        if (c->dead || c->act.kind != ACT_NONE || !takes_act(c) || c->out[0] != r->in[0]) continue;
        if (p->vals[r->in[0]].info.dtype != DT_F32) continue;
        if (sole_consumer(p, r->in[0]) != r) continue;
        c->act = act;
        take_output(p, c, r);
    }
}

/* The Conv that alone computes value v (float32, no activation fused yet), or NULL. */
static nnc_node *plain_conv_producer(nnc_plan *p, int v)
{
    if (v < 0 || p->vals[v].producer < 0 || p->vals[v].info.dtype != DT_F32) return NULL;
    nnc_node *c = &p->nodes[p->vals[v].producer];
    if (c->dead || !is_op(c, "Conv") || c->act.kind != ACT_NONE || c->out[0] != v) return NULL;
    return c;
}

/* Activations only Conv applies (after its product): HardSwish (MobileNetV3) and SiLU, which
 * exporters write as x * Sigmoid(x) (EfficientNet). */
static void fuse_conv_activations(nnc_plan *p)
{
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *r = &p->nodes[i];
        if (r->dead || r->nin != 1 || r->in[0] < 0) continue;
        int v = r->in[0];
        nnc_node *c = plain_conv_producer(p, v);
        if (!c) continue;
        if (is_op(r, "HardSwish")) {
            if (sole_consumer(p, v) != r) continue;
            c->act.kind = ACT_HARDSWISH;
            take_output(p, c, r);
        } else if (is_op(r, "Sigmoid")) {
            nnc_node *m = sole_consumer(p, r->out[0]);
            int only = -1;
            if (!is_op(m, "Mul") || m->dead || m->nin != 2 || p->vals[v].ext_out >= 0) continue;
            if (!((m->in[0] == v && m->in[1] == r->out[0]) ||
                  (m->in[1] == v && m->in[0] == r->out[0])))
                continue;
            if (consumers(p, v, &only) != 2) continue; /* only the Sigmoid and the Mul read v */
            c->act.kind = ACT_SILU;
            take_output(p, c, m);
            r->dead = 1;
            r->fused_into = (int)(c - p->nodes);
        }
    }
}

/* ---- building ------------------------------------------------------------------------ */

/* Each live node lists the nodes folded or fused into it (for profile events). */
static int name_fused(nnc_plan *p, nnc_err *e)
{
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *d = &p->nodes[i];
        if (!d->dead) continue;
        int r = d->fused_into;
        for (int hops = 0; r >= 0 && p->nodes[r].dead && hops < p->nnodes; hops++)
            r = p->nodes[r].fused_into;
        if (r < 0 || p->nodes[r].dead) continue;
        nnc_node *n = &p->nodes[r];
        const char **names = realloc(n->fused_names, (size_t)(n->nfused + 1) * sizeof *names);
        if (names) n->fused_names = names;
        const char **types =
            names ? realloc(n->fused_types, (size_t)(n->nfused + 1) * sizeof *types) : NULL;
        if (types) n->fused_types = types;
        if (!names || !types) return nnc_fail(e, "out of memory naming fused nodes");
        n->fused_names[n->nfused] = d->name;
        n->fused_types[n->nfused] = d->op_type;
        n->nfused++;
    }
    return NNC_OK;
}

/* Whether a node reads or writes a string tensor: then only op_string.c's ops may run it. */
static int touches_strings(const nnc_desc_node *d)
{
    for (int j = 0; j < d->nin; j++)
        if (d->in[j].info.dtype == DT_STR) return 1;
    for (int j = 0; j < d->nout; j++)
        if (d->out[j].info.dtype == DT_STR) return 1;
    return 0;
}

/* A string constant's elements and bytes in one block (the caller's pointers die with the
 * call). Elements are {data, size} as nnp_string. */
typedef struct {
    const char *data;
    uint64_t size;
} str_elem;
static void *copy_strings(const void *src, size_t count)
{
    const str_elem *s = src;
    size_t bytes = 0;
    for (size_t i = 0; i < count; i++) {
        if (s[i].size && !s[i].data) return NULL;
        bytes += (size_t)s[i].size;
    }
    str_elem *d = nnc_alloc(count * sizeof *d + bytes + 1);
    if (!d) return NULL;
    char *at = (char *)(d + count);
    for (size_t i = 0; i < count; i++) {
        d[i].size = s[i].size;
        d[i].data = s[i].size ? at : NULL;
        if (s[i].size) memcpy(at, s[i].data, (size_t)s[i].size);
        at += s[i].size;
    }
    return d;
}

static int owns_const(const nnc_node *n, int j)
{
    return n->op && n->op->owns_const && n->op->owns_const(n, j);
}

/* Concat inputs written in place: an input computed by a live node of this plan becomes a
 * slice of the Concat's output, so its producer writes there and the Concat copies nothing
 * (DenseNet's chains of Concats share one buffer per kernel, Inception's branches write into
 * theirs). Only where every axis before the concatenated one has size 1 (each input is one
 * contiguous slab), and not when an activation is fused into the Concat (it rewrites its
 * output, which would be its inputs). Later Concats first, so an input used by several lands
 * in the last. parent[v] / off[v]: the value v now lives in, and where. */
static void place_concat_inputs(nnc_plan *p, int *parent, int64_t *off)
{
    for (int i = p->nnodes - 1; i >= 0; i--) {
        const nnc_node *c = &p->nodes[i];
        if (c->dead || !is_op(c, "Concat") || c->act.kind != ACT_NONE || c->out[0] < 0) continue;
        const nnc_value *o = &p->vals[c->out[0]];
        if (o->is_const || !info_static(&o->info)) continue;
        int axis = nnc_concat_axis(c, o->info.ndim);
        if (axis < 0) continue;
        int64_t outer = 1, inner = 1, at = 0;
        for (int d = 0; d < axis; d++) outer *= o->info.dims[d];
        for (int d = axis + 1; d < o->info.ndim; d++) inner *= o->info.dims[d];
        if (outer != 1) continue;
        for (int k = 0; k < c->nin; k++) {
            int v = c->in[k];
            if (v < 0) break;
            const nnc_value *x = &p->vals[v];
            if (!info_static(&x->info) || x->info.ndim != o->info.ndim ||
                x->info.dtype != o->info.dtype)
                break;
            int ok = x->producer >= 0 && x->producer < i && !p->nodes[x->producer].dead &&
                     !x->is_const && x->ext_out < 0 && x->root == v && parent[v] < 0 &&
                     !(p->nodes[x->producer].op->flags & OPF_ALIAS);
            for (int q = 0; q < c->nin && ok; q++) ok = q == k || c->in[q] != v;
            if (ok) {
                parent[v] = c->out[0];
                off[v] = at;
            }
            at += x->info.dims[axis] * inner * (int64_t)nnc_dtsize(x->info.dtype);
        }
    }
}

static int plan_memory(nnc_plan *p, int concat_in_place, nnc_err *e)
{
    int nv = p->nvals;
    int *first = malloc((size_t)nv * sizeof(int)), *last = malloc((size_t)nv * sizeof(int));
    int *parent = malloc((size_t)nv * sizeof(int));
    int64_t *off = malloc((size_t)nv * sizeof(int64_t));
    if (!first || !last || !parent || !off) {
        free(first);
        free(last);
        free(parent);
        free(off);
        return nnc_fail(e, "out of memory planning a kernel");
    }
    for (int v = 0; v < nv; v++) {
        first[v] = -1;
        last[v] = -1;
        p->vals[v].root = v;
        parent[v] = -1;
        off[v] = 0;
    }
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *n = &p->nodes[i];
        if (!n->dead && (n->op->flags & OPF_ALIAS) && n->out[0] >= 0 && n->in[0] >= 0)
            p->vals[n->out[0]].root = p->vals[n->in[0]].root;
    }
    if (concat_in_place) {
        place_concat_inputs(p, parent, off);
        /* each value's memory: its view's root, then up the Concats it was placed in (first
         * and last hold the results until the lifetimes below need them) */
        for (int v = 0; v < nv; v++) {
            int r = p->vals[v].root;
            int64_t o = 0;
            for (int hops = 0; parent[r] >= 0 && hops < nv; hops++) {
                o += off[r];
                r = parent[r];
            }
            first[v] = r;
            p->vals[v].view_off = o;
        }
        for (int v = 0; v < nv; v++) {
            p->vals[v].root = first[v];
            first[v] = -1;
        }
    }
    for (int i = 0; i < p->nnodes; i++) {
        nnc_node *n = &p->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] >= 0) last[p->vals[n->in[j]].root] = i;
        for (int j = 0; j < n->nout; j++) {
            int v = n->out[j];
            if (v < 0) continue;
            int r = p->vals[v].root;
            if (first[r] < 0) first[r] = i;
            if (last[r] < i) last[r] = i;
        }
    }
    /* Intermediates: made by a live node, not a view, not a kernel output. */
    int *cand = malloc((size_t)nv * sizeof(int));
    int nc = 0;
    if (!cand) {
        free(first);
        free(last);
        return nnc_fail(e, "out of memory planning a kernel");
    }
    for (int v = 0; v < nv; v++) {
        nnc_value *x = &p->vals[v];
        if (x->producer < 0 || x->ext_out >= 0 || x->root != v || x->is_const) continue;
        if (p->nodes[x->producer].dead) continue;
        if (!info_static(&x->info)) {
            x->dyn = 1;
            continue;
        }
        x->nbytes = nnc_align64(info_nbytes(&x->info) ? info_nbytes(&x->info) : 1);
        cand[nc++] = v;
    }
    /* Greedy: biggest first, lowest offset clear of every overlapping lifetime. */
    for (int a = 0; a < nc; a++)
        for (int b = a + 1; b < nc; b++)
            if (p->vals[cand[b]].nbytes > p->vals[cand[a]].nbytes) {
                int t = cand[a];
                cand[a] = cand[b];
                cand[b] = t;
            }
    size_t total = 0;
    for (int a = 0; a < nc; a++) {
        nnc_value *x = &p->vals[cand[a]];
        int64_t off = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int b = 0; b < a; b++) {
                nnc_value *y = &p->vals[cand[b]];
                if (last[cand[a]] < first[cand[b]] || last[cand[b]] < first[cand[a]]) continue;
                if (off < y->offset + (int64_t)y->nbytes && y->offset < off + (int64_t)x->nbytes) {
                    off = y->offset + (int64_t)y->nbytes;
                    moved = 1;
                }
            }
        }
        x->offset = off;
        x->arena = 1;
        if ((size_t)off + x->nbytes > total) total = (size_t)off + x->nbytes;
    }
    p->arena_bytes = total;
    free(cand);
    free(first);
    free(last);
    free(parent);
    free(off);
    return NNC_OK;
}

/* Per-thread scratch of node i for the given input tensors; outputs inferred. */
static int node_scratch(nnc_node *n, nnc_tensor *const *in, size_t *out, nnc_err *e)
{
    *out = 0;
    if (!n->op->scratch) return NNC_OK;
    nnc_tensor outs[NNC_MAXIO];
    memset(outs, 0, sizeof outs);
    TRY(n->op->infer(n, in, outs, e));
    *out = nnc_align64(n->op->scratch(n, in, outs));
    return NNC_OK;
}

nnc_plan *nnc_plan_build(const nnc_desc_node *nodes, int nn, int probing, nnc_err *e)
{
    nnc_plan *p = calloc(1, sizeof *p);
    if (!p) {
        nnc_fail(e, "out of memory");
        return NULL;
    }
    int maxv = 0, maxk = 0;
    for (int i = 0; i < nn; i++) {
        maxv += nodes[i].nin + nodes[i].nout;
        maxk += nodes[i].nin;
    }
    p->vals = calloc((size_t)maxv + 1, sizeof *p->vals);
    p->nodes = calloc((size_t)nn + 1, sizeof *p->nodes);
    p->kin_val = calloc((size_t)maxk + 1, sizeof(int));
    p->kout_val = calloc((size_t)(nn ? nodes[nn - 1].nout : 0) + 1, sizeof(int));
    if (!p->vals || !p->nodes || !p->kin_val || !p->kout_val) {
        nnc_fail(e, "out of memory");
        goto fail;
    }
    for (int i = 0; i < nn; i++) {
        const nnc_desc_node *d = &nodes[i];
        nnc_node *n = &p->nodes[i];
        n->name = dup_str(d->name);
        n->op_type = dup_str(d->op_type);
        n->opset = d->opset;
        n->residual = -1;
        n->fused_into = -1;
        n->probing = probing;
        p->nnodes = i + 1;
        if (!n->name || !n->op_type) {
            nnc_fail(e, "out of memory");
            goto fail;
        }
        if (d->nin > NNC_MAXIO || d->nout > NNC_MAXIO) {
            nnc_node_unsup(e, n, "more than %d inputs or outputs are not supported", NNC_MAXIO);
            goto fail;
        }
        n->op = touches_strings(d) ? nnc_find_string_op(d->domain, d->op_type)
                                   : nnc_find_op_in(d->domain, d->op_type);
        if (!n->op && touches_strings(d)) {
            nnc_node_unsup(e, n,
                           "this op does not take string tensors on the cpu backend (see "
                           "docs/backends/cpu.md, String tensors)");
            goto fail;
        }
        if (!n->op && d->domain && d->domain[0] && strcmp(d->domain, "ai.onnx")) {
            nnc_node_unsup(e, n, "op '%s' of domain '%s' is not supported by the cpu backend",
                           d->op_type, d->domain);
            goto fail;
        }
        if (!n->op) {
            nnc_node_unsup(e, n, "this op is not supported by the cpu backend");
            goto fail;
        }
        n->nin = d->nin;
        n->nout = d->nout;
        for (int j = 0; j < d->nin; j++) {
            const nnc_desc_value *dv = &d->in[j];
            int v = -1;
            if (dv->name && dv->name[0]) {
                v = find_value(p, dv->name);
                if (v < 0 || p->vals[v].producer < 0) {
                    if (v < 0 && (v = add_value(p, dv, -1)) < 0) {
                        nnc_fail(e, "out of memory");
                        goto fail;
                    }
                }
            }
            if (v < 0 || p->vals[v].producer < 0 || p->vals[v].producer >= i)
                p->kin_val[p->nkin++] = v;
            n->in[j] = v;
            n->vin[j] = v >= 0 ? &p->vals[v].info : NULL;
        }
        for (int j = 0; j < d->nout; j++) {
            const nnc_desc_value *dv = &d->out[j];
            int v = -1;
            if (dv->name && dv->name[0]) {
                if (find_value(p, dv->name) >= 0) {
                    nnc_node_fail(e, n, "output '%s' is produced twice", dv->name);
                    goto fail;
                }
                if ((v = add_value(p, dv, i)) < 0) {
                    nnc_fail(e, "out of memory");
                    goto fail;
                }
                p->vals[v].is_const = 0;
                p->vals[v].info.const_data = NULL;
            }
            n->out[j] = v;
            n->vout[j] = v >= 0 ? &p->vals[v].info : NULL;
            /* ONNX shape inference leaves Dropout-7..9's mask untyped: it is the input's shape,
             * bool from opset 10, the input's type before. */
            if (v >= 0 && j == 1 && !strcmp(d->op_type, "Dropout") && n->in[0] >= 0 &&
                p->vals[v].info.dtype == DT_UNDEF) {
                p->vals[v].info = p->vals[n->in[0]].info;
                p->vals[v].info.const_data = NULL;
                if (d->opset >= 10 || p->vals[v].info.dtype == DT_UNDEF)
                    p->vals[v].info.dtype = DT_BOOL;
            }
        }
        int nin_used = d->nin;
        while (nin_used > 0 && n->in[nin_used - 1] < 0) nin_used--; /* trailing omitted */
        if (nin_used < n->op->min_in || d->nin > n->op->max_in) {
            nnc_node_fail(e, n, "has %d inputs; this op takes %d to %d", d->nin, n->op->min_in,
                          n->op->max_in);
            goto fail;
        }
        if (d->nout < n->op->min_out || d->nout > n->op->max_out) {
            nnc_node_unsup(e, n, "has %d outputs; the cpu backend supports %d to %d", d->nout,
                           n->op->min_out, n->op->max_out);
            goto fail;
        }
        n->nattr = d->nattr;
        n->attrs = d->attrs;
        if (n->op->create && n->op->create(n, e) != NNC_OK) goto fail;
        n->attrs = NULL; /* only valid during this call */
        n->nattr = 0;
    }
    if (nn > 0) {
        const nnc_node *last = &p->nodes[nn - 1];
        p->nkout = last->nout;
        for (int j = 0; j < last->nout; j++) {
            p->kout_val[j] = last->out[j];
            if (last->out[j] >= 0) p->vals[last->out[j]].ext_out = j;
        }
    }
    if (probing) return p;
    const char *fz = getenv("NNPLUG_CPU_FUSION"); /* "0": no folding or fusion (debugging) */
    int fusion = !(fz && !strcmp(fz, "0"));
    if (nn > 1 && fusion) {
        fold_affines(p);
        fuse_matmul_bias(p);
        fuse_residuals(p);
        fuse_gelu_erf(p);
        fuse_rms_norm(p);
        fuse_attention(p);
        fuse_activations(p);
        fuse_conv_activations(p);
    }
    if (name_fused(p, e)) goto fail;
    /* Keep constants the kernels read at run time (not those packed at create). */
    for (int v = 0; v < p->nvals; v++) {
        nnc_value *x = &p->vals[v];
        if (!x->is_const) continue;
        int needed = 0;
        for (int i = 0; i < p->nnodes && !needed; i++) {
            const nnc_node *n = &p->nodes[i];
            if (n->dead) continue;
            for (int j = 0; j < n->nin; j++)
                if (n->in[j] == v && !owns_const(n, j)) {
                    needed = 1;
                    break;
                }
        }
        size_t nb = info_nbytes(&x->info);
        if (needed && x->info.dtype == DT_STR) {
            if (!(x->owned = copy_strings(x->info.const_data, nb / nnc_dtsize(DT_STR)))) {
                nnc_fail(e, "out of memory copying constant '%s'", x->name);
                goto fail;
            }
        } else if (needed) {
            x->owned = nnc_alloc(nb ? nb : 1);
            if (!x->owned) {
                nnc_fail(e, "out of memory copying constant '%s'", x->name);
                goto fail;
            }
            if (nb) memcpy(x->owned, x->info.const_data, nb);
        }
        x->info.const_data = x->owned; /* never the caller's pointer after this call */
    }
    for (int i = 0; i < p->nnodes; i++) p->live += !p->nodes[i].dead;
    if (plan_memory(p, fusion, e)) goto fail;
    /* Static scratch: every live node's inputs static. */
    p->static_scratch = 1;
    for (int i = 0; i < p->nnodes && p->static_scratch; i++) {
        nnc_node *n = &p->nodes[i];
        if (n->dead || !n->op->scratch) continue;
        nnc_tensor ts[NNC_MAXIO], *in[NNC_MAXIO];
        for (int j = 0; j < n->nin; j++) {
            in[j] = NULL;
            if (n->in[j] < 0) continue;
            if (!info_static(&p->vals[n->in[j]].info)) {
                p->static_scratch = 0;
                break;
            }
            info_tensor(&p->vals[n->in[j]].info, NULL, &ts[j]);
            in[j] = &ts[j];
        }
        if (!p->static_scratch) break;
        size_t s;
        nnc_err tmp = {{0}, 0};
        if (node_scratch(n, in, &s, &tmp)) {
            p->static_scratch = 0;
            break;
        }
        if (s > p->scratch_static) p->scratch_static = s;
    }
    return p;
fail:
    nnc_plan_free(p);
    return NULL;
}

/* ---- running ------------------------------------------------------------------------- */

static _Thread_local nnc_node_hook t_hook;
static _Thread_local void *t_hook_user;

void nnc_set_node_hook(nnc_node_hook fn, void *user)
{
    t_hook = fn;
    t_hook_user = fn ? user : NULL;
}

/* NNPLUG_CPU_PROFILE=1 prints every node's time to stderr (for tuning, not for tests). */
static int profiling(void)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("NNPLUG_CPU_PROFILE");
        on = v && *v && strcmp(v, "0") != 0;
    }
    return on;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

typedef struct {
    nnc_tensor *vt;
    char *set;
    void **dyn;
    int ndyn;
} run_env;

static int bind_inputs(const nnc_plan *p, const nnc_tensor *kin, int nkin, run_env *r, nnc_err *e)
{
    if (nkin != p->nkin) return nnc_fail(e, "the kernel got %d inputs, it has %d", nkin, p->nkin);
    for (int k = 0; k < nkin; k++) {
        int v = p->kin_val[k];
        if (v < 0 || r->set[v]) continue;
        const nnc_value *x = &p->vals[v];
        if (x->is_const) {
            info_tensor(&x->info, x->owned, &r->vt[v]);
        } else {
            const nnc_tensor *t = &kin[k];
            if (x->info.dtype != DT_UNDEF && t->dtype != x->info.dtype)
                return nnc_fail(e, "input '%s' has element type %s, the model declares %s", x->name,
                                nnc_dtname(t->dtype), nnc_dtname(x->info.dtype));
            if (x->info.ndim >= 0 && t->ndim != x->info.ndim)
                return nnc_fail(e, "input '%s' has rank %d, the model declares %d", x->name,
                                t->ndim, x->info.ndim);
            if (!t->data && nnc_numel(t) > 0) return nnc_fail(e, "input '%s' has no data", x->name);
            r->vt[v] = *t;
        }
        r->set[v] = 1;
    }
    return NNC_OK;
}

static void gather_inputs(const nnc_node *n, run_env *r, nnc_tensor **in)
{
    for (int j = 0; j < n->nin; j++)
        in[j] = n->in[j] >= 0 && r->set[n->in[j]] ? &r->vt[n->in[j]] : NULL;
}

static int check_inputs_present(const nnc_node *n, nnc_tensor *const *in, nnc_err *e)
{
    for (int j = 0; j < n->nin; j++)
        if (n->in[j] >= 0 && !in[j]) return nnc_node_fail(e, n, "input %d was not computed", j);
    if (n->op->min_in > 0 && !in[0]) return nnc_node_fail(e, n, "input 0 is missing");
    return NNC_OK;
}

/* The host allocates what output_shapes reports: a shape whose bytes pass int64 (a
 * ConstantOfShape of [2**62, 4]; onnxruntime: "Integer overflow") is refused here, naming the
 * node, rather than left to fail in the allocator. */
static int outputs_fit(const nnc_node *n, const nnc_tensor *outs, nnc_err *e)
{
    for (int j = 0; j < n->nout; j++) {
        int64_t bytes = (int64_t)(nnc_dtsize(outs[j].dtype) ? nnc_dtsize(outs[j].dtype) : 1);
        for (int i = 0; i < outs[j].ndim; i++)
            if (outs[j].dims[i] < 0 || __builtin_mul_overflow(bytes, outs[j].dims[i], &bytes)) {
                char sh[160];
                nnc_shape_str(&outs[j], sh, sizeof sh);
                return nnc_node_fail(
                    e, n, "output %d would have shape %s of %s: more bytes than any memory holds",
                    j, sh, nnc_dtname(outs[j].dtype));
            }
    }
    return NNC_OK;
}

/* Output shapes of a multi-node plan whose shapes are not all known ahead (the chains
 * matmul_chain takes): every live node's infer in order, from the actual input shapes (their
 * infer reads no data). */
static int infer_through(const nnc_plan *p, const nnc_tensor *kin, int nkin, nnc_tensor *outs,
                         nnc_err *e)
{
    run_env r = {malloc((size_t)p->nvals * sizeof(nnc_tensor)), calloc((size_t)p->nvals, 1), NULL,
                 0};
    int rc = r.vt && r.set ? bind_inputs(p, kin, nkin, &r, e) : nnc_fail(e, "out of memory");
    for (int i = 0; i < p->nnodes && rc == NNC_OK; i++) {
        const nnc_node *n = &p->nodes[i];
        if (n->dead) continue;
        nnc_tensor *in[NNC_MAXIO], o[NNC_MAXIO];
        gather_inputs(n, &r, in);
        if ((rc = check_inputs_present(n, in, e))) break;
        memset(o, 0, sizeof(nnc_tensor) * (size_t)n->nout);
        if ((rc = n->op->infer((nnc_node *)n, in, o, e)) || (rc = outputs_fit(n, o, e))) break;
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] >= 0) {
                o[j].data = NULL;
                r.vt[n->out[j]] = o[j];
                r.set[n->out[j]] = 1;
            }
    }
    for (int j = 0; j < p->nkout && rc == NNC_OK; j++) {
        int v = p->kout_val[j];
        memset(&outs[j], 0, sizeof outs[j]);
        if (v < 0) continue;
        if (!r.set[v]) {
            rc = nnc_fail(e, "output '%s' was not computed", p->vals[v].name);
            break;
        }
        outs[j] = r.vt[v];
    }
    free(r.vt);
    free(r.set);
    return rc;
}

int nnc_plan_output_shapes(const nnc_plan *p, const nnc_tensor *kin, int nkin, nnc_tensor *outs,
                           nnc_err *e)
{
    /* Multi-node plans are static (the fuse query guarantees it): report the known shapes.
     * A single node infers from its actual inputs. */
    if (p->nnodes == 1) {
        nnc_tensor vt[2 * NNC_MAXIO + 2];
        char set[2 * NNC_MAXIO + 2] = {0};
        run_env r = {vt, set, NULL, 0};
        if (p->nvals > 2 * NNC_MAXIO + 2) return nnc_fail(e, "too many values");
        TRY(bind_inputs(p, kin, nkin, &r, e));
        const nnc_node *n = &p->nodes[0];
        nnc_tensor *in[NNC_MAXIO];
        gather_inputs(n, &r, in);
        TRY(check_inputs_present(n, in, e));
        memset(outs, 0, sizeof(nnc_tensor) * (size_t)n->nout);
        TRY(n->op->infer((nnc_node *)n, in, outs, e));
        return outputs_fit(n, outs, e);
    }
    int dynamic = 0;
    for (int j = 0; j < p->nkout; j++)
        dynamic |= p->kout_val[j] >= 0 && !info_static(&p->vals[p->kout_val[j]].info);
    if (dynamic) return infer_through(p, kin, nkin, outs, e);
    for (int j = 0; j < p->nkout; j++) {
        int v = p->kout_val[j];
        memset(&outs[j], 0, sizeof outs[j]);
        if (v < 0) continue;
        info_tensor(&p->vals[v].info, NULL, &outs[j]);
    }
    return NNC_OK;
}

int nnc_plan_workspace_reads_inputs(const nnc_plan *p)
{
    return !p->static_scratch && p->nnodes == 1 && p->nodes[0].op->scratch;
}

int nnc_plan_workspace(const nnc_plan *p, const nnc_tensor *kin, int nkin, size_t *out, nnc_err *e)
{
    size_t per = p->scratch_static;
    if (nnc_plan_workspace_reads_inputs(p)) {
        nnc_tensor vt[2 * NNC_MAXIO + 2];
        char set[2 * NNC_MAXIO + 2] = {0};
        run_env r = {vt, set, NULL, 0};
        if (p->nvals > 2 * NNC_MAXIO + 2) return nnc_fail(e, "too many values");
        TRY(bind_inputs(p, kin, nkin, &r, e));
        nnc_tensor *in[NNC_MAXIO];
        gather_inputs(&p->nodes[0], &r, in);
        TRY(check_inputs_present(&p->nodes[0], in, e));
        TRY(node_scratch((nnc_node *)&p->nodes[0], in, &per, e));
    }
    *out = nnc_align64(p->arena_bytes) + (size_t)nnc_num_threads() * per;
    return NNC_OK;
}

int nnc_plan_run(const nnc_plan *p, const nnc_tensor *kin, int nkin, const nnc_tensor *kout,
                 int nkout, void *ws, size_t wsn, nnc_err *e)
{
    if (nkout != p->nkout)
        return nnc_fail(e, "the kernel got %d outputs, it has %d", nkout, p->nkout);
    size_t arena = nnc_align64(p->arena_bytes);
    if (p->arena_bytes && (!ws || wsn < arena))
        return nnc_fail(e, "the workspace has %zu bytes, the kernel needs %zu", ws ? wsn : 0,
                        arena);
    nnc_tensor vt_stack[64];
    char set_stack[64];
    void *dyn_stack[16];
    run_env r;
    int heap = p->nvals > 64;
    r.vt = heap ? malloc((size_t)p->nvals * sizeof(nnc_tensor)) : vt_stack;
    r.set = heap ? calloc((size_t)p->nvals, 1) : set_stack;
    r.dyn = dyn_stack;
    r.ndyn = 0;
    if (!r.vt || !r.set) {
        if (heap) {
            free(r.vt);
            free(r.set);
        }
        return nnc_fail(e, "out of memory");
    }
    if (!heap) memset(set_stack, 0, sizeof set_stack);
    int rc = bind_inputs(p, kin, nkin, &r, e);
    nnc_exec x = {NULL, 0, 0};
    /* Scratch per thread after the arena. */
    size_t per = p->scratch_static;
    if (rc == NNC_OK && nnc_plan_workspace_reads_inputs(p)) {
        nnc_tensor *in[NNC_MAXIO];
        gather_inputs(&p->nodes[0], &r, in);
        rc = check_inputs_present(&p->nodes[0], in, e);
        if (rc == NNC_OK) rc = node_scratch((nnc_node *)&p->nodes[0], in, &per, e);
    }
    if (rc == NNC_OK && per) {
        size_t avail = ws && wsn > arena ? (wsn - arena) / per : 0;
        if (avail < 1)
            rc = nnc_fail(e, "the workspace has %zu bytes, the kernel needs %zu", ws ? wsn : 0,
                          arena + per);
        x.scratch = (char *)ws + arena;
        x.per_thread = per;
        x.nthreads = avail > 64 ? 64 : (int)avail;
        nnc_set_thread_limit(x.nthreads);
    }
    for (int i = 0; i < p->nnodes && rc == NNC_OK; i++) {
        nnc_node *n = &p->nodes[i];
        if (n->dead) continue;
        nnc_tensor *in[NNC_MAXIO], outs[NNC_MAXIO];
        gather_inputs(n, &r, in);
        if ((rc = check_inputs_present(n, in, e))) break;
        memset(outs, 0, sizeof(nnc_tensor) * (size_t)n->nout);
        if ((rc = n->op->infer(n, in, outs, e))) break;
        int empty = 1, alias_out = -1;
        for (int j = 0; j < n->nout && rc == NNC_OK; j++) {
            int v = n->out[j];
            if (v < 0) {
                outs[j].data = NULL;
                continue;
            }
            const nnc_value *xv = &p->vals[v];
            size_t nb = nnc_nbytes(&outs[j]);
            if (nnc_numel(&outs[j]) > 0) empty = 0;
            if (outs[j].ndim > NNC_MAXDIM) {
                rc = nnc_node_fail(e, n, "output rank too large");
                break;
            }
            if (xv->ext_out >= 0) {
                const nnc_tensor *k = &kout[xv->ext_out];
                if (k->dtype != outs[j].dtype || !nnc_same_shape(k, &outs[j])) {
                    char a[128], b[128];
                    nnc_shape_str(&outs[j], a, sizeof a);
                    nnc_shape_str(k, b, sizeof b);
                    rc = nnc_node_fail(e, n, "output %d is %s %s but the caller allocated %s %s", j,
                                       nnc_dtname(outs[j].dtype), a, nnc_dtname(k->dtype), b);
                    break;
                }
                if (!k->data && nb) {
                    rc = nnc_node_fail(e, n, "output %d has no buffer", j);
                    break;
                }
                outs[j].data = k->data;
                if (j == 0 && (n->op->flags & OPF_ALIAS)) alias_out = 0;
            } else if (j == 0 && (n->op->flags & OPF_ALIAS)) {
                outs[j].data = in[0]->data;
            } else if (xv->root != v) { /* a slice of a Concat's output (place_concat_inputs) */
                const nnc_value *rv = &p->vals[xv->root];
                char *base = NULL;
                size_t cap = 0;
                if (rv->ext_out >= 0) {
                    base = kout[rv->ext_out].data;
                    cap = nnc_nbytes(&kout[rv->ext_out]);
                } else if (rv->arena) {
                    base = (char *)ws + rv->offset;
                    cap = rv->nbytes;
                }
                if (!base || (size_t)xv->view_off + nb > cap) {
                    rc = nnc_node_fail(
                        e, n, "output %d does not fit in the Concat output '%s' planned for it", j,
                        rv->name);
                    break;
                }
                outs[j].data = base + xv->view_off;
            } else if (xv->arena) {
                if (nb > xv->nbytes) {
                    rc = nnc_node_fail(e, n, "output %d is larger than planned", j);
                    break;
                }
                outs[j].data = (char *)ws + xv->offset;
            } else {
                void *m = nnc_alloc(nb ? nb : 1);
                if (!m || r.ndyn >= 16) {
                    nnc_free(m);
                    rc = nnc_node_fail(e, n, "out of memory");
                    break;
                }
                r.dyn[r.ndyn++] = m;
                outs[j].data = m;
            }
        }
        if (rc) break;
        if (alias_out == 0) { /* a view that leaves the kernel: copy it out */
            size_t nb = nnc_nbytes(&outs[0]);
            if (nb) memmove(outs[0].data, in[0]->data, nb);
        }
        int64_t hook_t0 = t_hook ? nnc_now_ns() : 0;
        if (!empty || n->nout == 0) {
            double t0 = profiling() ? now_ms() : 0;
            if ((rc = n->op->run(n, in, outs, &x, e))) break;
            if (t0 > 0) {
                double ms = now_ms() - t0;
                char shp[96];
                nnc_shape_str(&outs[0], shp, sizeof shp);
                double sum = 0;
                if (outs[0].dtype == DT_F32)
                    for (int64_t q = 0, m = nnc_numel(&outs[0]); q < m; q++)
                        sum += ((const float *)outs[0].data)[q];
                fprintf(stderr, "nnplug-cpu: %-12s %-24s %8.3f ms  -> %s%s%s sum %.6g\n",
                        n->op->type, n->name, ms, shp, n->act.kind ? " +act" : "",
                        n->residual >= 0 ? " +res" : "", sum);
            }
        }
        if (t_hook) t_hook(t_hook_user, n, in, outs, hook_t0, nnc_now_ns());
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] >= 0) {
                r.vt[n->out[j]] = outs[j];
                r.set[n->out[j]] = 1;
            }
    }
    nnc_set_thread_limit(0);
    for (int k = 0; k < r.ndyn; k++) nnc_free(r.dyn[k]);
    if (heap) {
        free(r.vt);
        free(r.set);
    }
    return rc;
}

/* ---- the fuse query ------------------------------------------------------------------ */

static int desc_static(const nnc_desc_value *v)
{
    return !v->name || !v->name[0] || info_static(&v->info);
}

static int all_static(const nnc_desc_node *d)
{
    for (int j = 0; j < d->nout; j++)
        if (!desc_static(&d->out[j])) return 0;
    return 1;
}

/* Nodes that may continue a chain started by a Conv/Gemm/BN (folded or fused into it). */
static int continues_chain(const char *op)
{
    static const char *ops[] = {
        "BatchNormalization", "Mul", "Add", "Sub", "Div", "Sum", "Relu", "Clip",
        "LeakyRelu",          "Erf", NULL};
    for (const char **o = ops; *o; o++)
        if (!strcmp(op, *o)) return 1;
    return 0;
}

static int desc_is(const nnc_desc_node *d, const char *op)
{
    return !strcmp(d->op_type, op) &&
           (!d->domain || !d->domain[0] || !strcmp(d->domain, "ai.onnx"));
}

static int same_name(const nnc_desc_value *v, const char *name)
{
    return v->name && name && !strcmp(v->name, name);
}

/* The input of two-input d other than the one named v (exactly one input is v), or NULL. */
static const nnc_desc_value *desc_other(const nnc_desc_node *d, const char *v)
{
    if (d->nin != 2 || same_name(&d->in[0], v) == same_name(&d->in[1], v)) return NULL;
    return &d->in[same_name(&d->in[0], v) ? 1 : 0];
}

static const nnc_valinfo *desc_const(const nnc_desc_value *v)
{
    return v && v->info.const_data && v->info.dtype == DT_F32 && info_static(&v->info) ? &v->info
                                                                                       : NULL;
}

/* How many nodes from nodes[0] fold into a MatMul with a constant 2-D B whatever the shapes
 * (fuse_matmul_bias, fuse_gelu_erf: a bias Add, then the exact Gelu's five nodes in either
 * exporter's order), else 1. */
static int matmul_chain(const nnc_desc_node *nodes, int n)
{
    const nnc_desc_node *m = &nodes[0];
    if (!desc_is(m, "MatMul") || m->nin != 2 || m->nout != 1 || !desc_const(&m->in[1]) ||
        m->in[1].info.ndim != 2 || m->in[0].info.dtype != DT_F32 || m->in[0].info.ndim < 2)
        return 1;
    int rank = m->in[0].info.ndim;
    if (n < 2 || !desc_is(&nodes[1], "Add") || nodes[1].nout != 1 ||
        !bias_keeps_shape(desc_const(desc_other(&nodes[1], m->out[0].name)), rank,
                          m->in[1].info.dims[1]))
        return 1;
    const char *x = nodes[1].out[0].name;
    if (n < 7) return 2;
    const nnc_desc_node *dv = &nodes[2], *ef = &nodes[3], *ad = &nodes[4], *m1 = &nodes[5],
                        *m2 = &nodes[6];
    int gelu = desc_is(dv, "Div") && dv->nin == 2 && same_name(&dv->in[0], x) &&
               bias_keeps_shape(desc_const(&dv->in[1]), rank, -1) && desc_is(ef, "Erf") &&
               ef->nin == 1 && same_name(&ef->in[0], dv->out[0].name) && desc_is(ad, "Add") &&
               bias_keeps_shape(desc_const(desc_other(ad, ef->out[0].name)), rank, -1) &&
               desc_is(m1, "Mul") && desc_is(m2, "Mul") &&
               ((desc_other(m1, x) && same_name(desc_other(m1, x), ad->out[0].name) &&
                 bias_keeps_shape(desc_const(desc_other(m2, m1->out[0].name)), rank, -1)) ||
                (bias_keeps_shape(desc_const(desc_other(m1, ad->out[0].name)), rank, -1) &&
                 desc_other(m2, x) && same_name(desc_other(m2, x), m1->out[0].name)));
    return gelu ? 7 : 2;
}

/* Whether d has an input named v. */
static int desc_reads(const nnc_desc_node *d, const char *v)
{
    for (int j = 0; j < d->nin; j++)
        if (same_name(&d->in[j], v)) return 1;
    return 0;
}

/* How many nodes from nodes[0] make an RMS normalization as fuse_rms_norm takes it whatever
 * the shapes ([Cast] Pow ReduceMean Add Sqrt Div|Reciprocal Mul [Cast] [Mul], each reading the
 * one before, the first Mul x too), else 1. The plan checks the rest. */
static int rms_chain(const nnc_desc_node *nodes, int n)
{
    static const char *const ops[] = {"Pow", "ReduceMean", "Add", "Sqrt", "", "Mul"};
    int i = n > 0 && desc_is(&nodes[0], "Cast") && nodes[0].nout == 1;
    const char *x = i ? nodes[0].out[0].name : NULL;
    for (int k = 0; k < 6; k++, i++) {
        if (i >= n || nodes[i].nout != 1) return 1;
        const nnc_desc_node *d = &nodes[i];
        int op = *ops[k] ? desc_is(d, ops[k]) : desc_is(d, "Div") || desc_is(d, "Reciprocal");
        if (!op || (i > 0 && !desc_reads(d, nodes[i - 1].out[0].name))) return 1;
        if (k == 0 && !x) x = d->nin > 0 ? d->in[0].name : NULL;
        if (k == 5 && (!x || !desc_reads(d, x))) return 1;
    }
    if (i < n && desc_is(&nodes[i], "Cast") && desc_reads(&nodes[i], nodes[i - 1].out[0].name)) i++;
    if (i < n && desc_is(&nodes[i], "Mul") && nodes[i].nout == 1 &&
        desc_const(desc_other(&nodes[i], nodes[i - 1].out[0].name)))
        i++;
    return i;
}

/* How many nodes from nodes[0] make an attention as fuse_attention takes it whatever the
 * shapes ([Transpose] MatMul [Mul|Div] [Add] Softmax [IsNaN Where] MatMul, each reading the one
 * before, the products of two values), else 1. The plan checks the rest. */
static int attention_chain(const nnc_desc_node *nodes, int n)
{
    int i = 0;
    if (n > 1 && desc_is(&nodes[0], "Transpose") && nodes[0].nout == 1 && nodes[1].nin == 2 &&
        same_name(&nodes[1].in[1], nodes[0].out[0].name))
        i = 1;
    const nnc_desc_node *d = &nodes[i];
    if (i >= n || !desc_is(d, "MatMul") || d->nin != 2 || d->nout != 1 || desc_const(&d->in[1]))
        return 1;
    const char *prev = d->out[0].name, *sm;
    i++;
    if (i < n && (desc_is(&nodes[i], "Mul") || desc_is(&nodes[i], "Div")) &&
        desc_const(desc_other(&nodes[i], prev)))
        prev = nodes[i++].out[0].name;
    if (i < n && desc_is(&nodes[i], "Add") && desc_other(&nodes[i], prev))
        prev = nodes[i++].out[0].name;
    if (i >= n || !desc_is(&nodes[i], "Softmax") || !desc_reads(&nodes[i], prev)) return 1;
    prev = sm = nodes[i++].out[0].name;
    if (i + 1 < n && desc_is(&nodes[i], "IsNaN") && desc_reads(&nodes[i], sm) &&
        desc_is(&nodes[i + 1], "Where") && nodes[i + 1].nin == 3 &&
        same_name(&nodes[i + 1].in[0], nodes[i].out[0].name) &&
        same_name(&nodes[i + 1].in[2], sm)) {
        prev = nodes[i + 1].out[0].name;
        i += 2;
    }
    if (i >= n || !desc_is(&nodes[i], "MatMul") || nodes[i].nin != 2 ||
        !same_name(&nodes[i].in[0], prev) || desc_const(&nodes[i].in[1]))
        return 1;
    return i + 1;
}

int nnc_fuse_count(const nnc_desc_node *nodes, int n)
{
    int chain = matmul_chain(nodes, n);
    if (chain == 1) chain = rms_chain(nodes, n);
    if (chain == 1) chain = attention_chain(nodes, n);
    int chain_static = 1;
    for (int i = 0; i < chain; i++) chain_static &= all_static(&nodes[i]);
    if (chain > 1 && !chain_static) return chain; /* dynamic shapes: the chain alone */
    int take = 0;
    for (int i = 0; i < n; i++) {
        int ok = 1;
        for (int j = 0; j < nodes[i].nout && ok; j++)
            ok = desc_static(&nodes[i].out[j]) || (j == 1 && !strcmp(nodes[i].op_type, "Dropout"));
        if (!ok) break;
        take = i + 1;
    }
    if (take == 0) return 1;
    /* The last node's outputs leave the kernel: they must all be typed and shaped. */
#define LAST_OK(t) all_static(&nodes[(t) - 1])
    while (take > 1 && !LAST_OK(take)) take--;
    /* Do not end a full window in the middle of a Conv/BN/activation chain: leave the
     * chain's head for the next group, so the whole chain fuses there. */
    if (take == n && n > 2) {
        int j = take - 1;
        while (j > 0 && continues_chain(nodes[j].op_type)) j--;
        int gemm = !strcmp(nodes[j].op_type, "Conv") || !strcmp(nodes[j].op_type, "Gemm") ||
                   !strcmp(nodes[j].op_type, "MatMul");
        int head = gemm || !strcmp(nodes[j].op_type, "BatchNormalization");
        /* an attention's second product is a chain's end, not a head: the chain stays whole */
        for (int k = j - 3; k >= 0 && k >= j - 8 && head; k--)
            if (attention_chain(nodes + k, j + 1 - k) == j + 1 - k) head = 0;
        if (head && j > 0 && LAST_OK(j) && (j < take - 1 || gemm)) take = j;
    }
    return take;
}
