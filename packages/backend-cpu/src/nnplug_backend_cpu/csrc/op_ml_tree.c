/* ai.onnx.ml tree ensembles: TreeEnsembleRegressor, TreeEnsembleClassifier (opsets 1 and 3,
 * thresholds and weights as floats or as tensors) and TreeEnsemble (opset 5). Every form is
 * converted at create time into one flat model; node ids, branch targets, weights and class
 * ids are all checked there (no branch leaves its tree, no cycle, no weight points nowhere),
 * and feature ids against the input width before each run. Aggregation, base values,
 * post-transforms and the binary-classifier special cases follow onnxruntime's CPU kernels. */
#include "ml.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { M_LEQ, M_LT, M_GTE, M_GT, M_EQ, M_NEQ, M_LEAF, M_MEMBER };
enum { AGG_AVERAGE, AGG_SUM, AGG_MIN, AGG_MAX };

typedef struct {
    int64_t n;          /* nodes (leaves included) */
    int32_t *feat;
    double *thr_d;
    float *thr_f;
    uint8_t *mode, *miss_true;
    int64_t *tnext, *fnext;
    int64_t *wstart, *wcount, *wtarget; /* weights of node i: [wstart[i], wstart[i] + wcount[i]) */
    double *wval_d;
    float *wval_f;
    int64_t *mstart, *mcount; /* set members of BRANCH_MEMBER nodes */
    double *members;
    int64_t ntrees, *roots;
    int64_t max_feature;
    int64_t T; /* targets or classes */
    int agg, pt;
    int64_t nbase;
    double *base;
    /* classifier */
    int classifier, binary_case, all_positive;
    int64_t *labels;
    /* TreeEnsemble (opset 5): output has the input's type */
    int v5;
    /* The fast layout, built when every branch has one ordered mode (LEQ, LT, GTE or GT) and
     * inputs compare as float: 16-byte branch nodes only, packed per tree in node order.
     * child[1] is taken when the comparison holds (or the value is a tracked NaN), child[0]
     * otherwise; a child c < 0 is leaf ~c (fleaf maps it to the node table above). Bit 31 of
     * feat is the node's missing-value track. NULL when the model has no such form. */
    struct fast_node *fnodes, *fbase; /* fnodes[~k], k < nleaves: leaf k, a node looping to
                                       * itself (so a finished walk can keep stepping) */
    int32_t *froots; /* per tree: a fast node, or ~leaf for a one-leaf tree */
    int32_t *fleaf; /* leaf k's index in the node table above */
    int fast_mode;
} tree_model;

typedef struct fast_node {
    float thr;
    uint32_t feat;
    int32_t child[2];
} fast_node;

static void tree_destroy(nnc_node *n)
{
    tree_model *m = n->state;
    if (m) {
        free(m->feat);
        free(m->thr_d);
        free(m->thr_f);
        free(m->mode);
        free(m->miss_true);
        free(m->tnext);
        free(m->fnext);
        free(m->wstart);
        free(m->wcount);
        free(m->wtarget);
        free(m->wval_d);
        free(m->wval_f);
        free(m->mstart);
        free(m->mcount);
        free(m->members);
        free(m->roots);
        free(m->base);
        free(m->labels);
        free(m->fbase);
        free(m->froots);
        free(m->fleaf);
    }
    ml_free_state(n);
}

static int tree_alloc(tree_model *m, int64_t n)
{
    size_t k = (size_t)(n ? n : 1);
    m->n = n;
    m->feat = calloc(k, sizeof *m->feat);
    m->thr_d = calloc(k, sizeof *m->thr_d);
    m->thr_f = calloc(k, sizeof *m->thr_f);
    m->mode = calloc(k, 1);
    m->miss_true = calloc(k, 1);
    m->tnext = calloc(k, sizeof(int64_t));
    m->fnext = calloc(k, sizeof(int64_t));
    m->wstart = calloc(k, sizeof(int64_t));
    m->wcount = calloc(k, sizeof(int64_t));
    m->mstart = calloc(k, sizeof(int64_t));
    m->mcount = calloc(k, sizeof(int64_t));
    return m->feat && m->thr_d && m->thr_f && m->mode && m->miss_true && m->tnext && m->fnext &&
           m->wstart && m->wcount && m->mstart && m->mcount;
}

/* Weights given as (node index, target, value) triples, grouped per node in input order. */
static int set_weights(const nnc_node *n, tree_model *m, const int64_t *node, const int64_t *target,
                       const double *val, int64_t k, nnc_err *e)
{
    m->wtarget = malloc((size_t)(k ? k : 1) * sizeof(int64_t));
    m->wval_d = malloc((size_t)(k ? k : 1) * sizeof(double));
    m->wval_f = malloc((size_t)(k ? k : 1) * sizeof(float));
    if (!m->wtarget || !m->wval_d || !m->wval_f) return nnc_node_fail(e, n, "out of memory");
    for (int64_t i = 0; i < k; i++) {
        if (target[i] < 0 || target[i] >= m->T)
            return nnc_node_fail(e, n, "weight %lld is for target/class %lld; the model has %lld",
                                 (long long)i, (long long)target[i], (long long)m->T);
        m->wcount[node[i]]++;
    }
    int64_t acc = 0;
    for (int64_t i = 0; i < m->n; i++) {
        m->wstart[i] = acc;
        acc += m->wcount[i];
        m->wcount[i] = 0;
    }
    for (int64_t i = 0; i < k; i++) {
        int64_t at = m->wstart[node[i]] + m->wcount[node[i]]++;
        m->wtarget[at] = target[i];
        m->wval_d[at] = val[i];
        m->wval_f[at] = (float)val[i];
    }
    return NNC_OK;
}

/* Every branch stays inside the node table and no path loops (a topological order exists). */
static int check_acyclic(const nnc_node *n, tree_model *m, nnc_err *e)
{
    int64_t *indeg = calloc((size_t)(m->n ? m->n : 1), sizeof(int64_t));
    int64_t *queue = malloc((size_t)(m->n ? m->n : 1) * sizeof(int64_t));
    if (!indeg || !queue) {
        free(indeg);
        free(queue);
        return nnc_node_fail(e, n, "out of memory");
    }
    for (int64_t i = 0; i < m->n; i++) {
        if (m->mode[i] == M_LEAF) continue;
        indeg[m->tnext[i]]++;
        indeg[m->fnext[i]]++;
    }
    int64_t head = 0, tail = 0;
    for (int64_t i = 0; i < m->n; i++)
        if (!indeg[i]) queue[tail++] = i;
    while (head < tail) {
        int64_t i = queue[head++];
        if (m->mode[i] == M_LEAF) continue;
        if (!--indeg[m->tnext[i]]) queue[tail++] = m->tnext[i];
        if (!--indeg[m->fnext[i]]) queue[tail++] = m->fnext[i];
    }
    free(indeg);
    free(queue);
    if (tail != m->n)
        return nnc_node_fail(e, n, "the trees contain a cycle (a node reachable from itself)");
    return NNC_OK;
}

/* The fast layout (see tree_model), when the model has the form; else fnodes stays NULL. */
static int build_fast(tree_model *m)
{
    int mode = -1;
    int64_t nb = 0;
    for (int64_t i = 0; i < m->n; i++) {
        if (m->mode[i] == M_LEAF) continue;
        if (mode < 0) mode = m->mode[i];
        if (m->mode[i] != mode || mode > M_GT || m->feat[i] < 0) return NNC_OK;
        nb++;
    }
    if (m->n >= INT32_MAX / 2 || m->ntrees >= INT32_MAX) return NNC_OK;
    int64_t nl = m->n - nb;
    int32_t *at = malloc((size_t)(m->n ? m->n : 1) * sizeof(int32_t));
    m->fbase = malloc((size_t)(m->n ? m->n : 1) * sizeof(fast_node));
    m->froots = malloc((size_t)(m->ntrees ? m->ntrees : 1) * sizeof(int32_t));
    m->fleaf = malloc((size_t)(nl ? nl : 1) * sizeof(int32_t));
    if (!at || !m->fbase || !m->froots || !m->fleaf) {
        free(at);
        free(m->fbase);
        free(m->froots);
        free(m->fleaf);
        m->fbase = NULL;
        m->froots = NULL;
        m->fleaf = NULL;
        return NNC_ERR;
    }
    m->fnodes = m->fbase + nl;
    int32_t k = 0, l = 0;
    for (int64_t i = 0; i < m->n; i++) {
        if (m->mode[i] != M_LEAF) {
            at[i] = k++;
            continue;
        }
        at[i] = ~l;
        m->fleaf[l] = (int32_t)i;
        /* reads feature 0, which exists: a model with a branch has inputs of width >= 1 */
        m->fnodes[~l] = (fast_node){0.f, 0u, {~l, ~l}};
        l++;
    }
    for (int64_t i = 0; i < m->n; i++) {
        if (m->mode[i] == M_LEAF) continue;
        fast_node *f = &m->fnodes[at[i]];
        f->thr = m->thr_f[i];
        f->feat = (uint32_t)m->feat[i] | (m->miss_true[i] ? 0x80000000u : 0u);
        f->child[1] = at[m->tnext[i]];
        f->child[0] = at[m->fnext[i]];
    }
    for (int64_t t = 0; t < m->ntrees; t++) m->froots[t] = at[m->roots[t]];
    free(at);
    m->fast_mode = mode < 0 ? M_LEQ : mode; /* only leaves: any mode will do */
    return NNC_OK;
}

static int finish_model(const nnc_node *n, tree_model *m, nnc_err *e)
{
    m->max_feature = -1;
    for (int64_t i = 0; i < m->n; i++) {
        if (m->mode[i] == M_LEAF) continue;
        if (m->feat[i] < 0)
            return nnc_node_fail(e, n, "node %lld has a negative feature id", (long long)i);
        if (m->feat[i] > m->max_feature) m->max_feature = m->feat[i];
    }
    TRY(check_acyclic(n, m, e));
    if (build_fast(m)) return nnc_node_fail(e, n, "out of memory");
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 1 && x->ndim <= 2 && x->dims[x->ndim - 1] >= 0 &&
        m->max_feature >= x->dims[x->ndim - 1])
        return nnc_node_fail(e, n, "a node reads feature %lld; input X has %lld features",
                             (long long)m->max_feature, (long long)x->dims[x->ndim - 1]);
    return NNC_OK;
}

/* ---- opsets 1 and 3: nodes named by (tree id, node id) -------------------------------- */

typedef struct {
    int64_t tree, node, idx;
} node_key;

static int key_cmp(const void *a, const void *b)
{
    const node_key *x = a, *y = b;
    if (x->tree != y->tree) return x->tree < y->tree ? -1 : 1;
    return x->node < y->node ? -1 : x->node > y->node;
}

static int64_t key_find(const node_key *keys, int64_t n, int64_t tree, int64_t node)
{
    int64_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        node_key k = {tree, node, 0};
        int c = key_cmp(&k, &keys[mid]);
        if (!c) return keys[mid].idx;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return -1;
}

static int mode_from_name(const char *s)
{
    static const char *names[] = {"BRANCH_LEQ", "BRANCH_LT",  "BRANCH_GTE", "BRANCH_GT",
                                  "BRANCH_EQ",  "BRANCH_NEQ", "LEAF"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

typedef struct {
    int64_t *treeids, *nodeids, *featids, *trueids, *falseids, *missing, *wtree, *wnode, *wtarget;
    double *values, *wval;
    node_key *keys;
    int64_t *widx;
} v3_arrays;

static void v3_free(v3_arrays *a)
{
    free(a->treeids);
    free(a->nodeids);
    free(a->featids);
    free(a->trueids);
    free(a->falseids);
    free(a->missing);
    free(a->wtree);
    free(a->wnode);
    free(a->wtarget);
    free(a->values);
    free(a->wval);
    free(a->keys);
    free(a->widx);
}

static int build_v3(const nnc_node *n, tree_model *m, const char *wprefix, v3_arrays *a, nnc_err *e)
{
    int64_t nt, nn, nf, ntr, nfa, nmi, nv, nwt, nwn, nwi, nww, nmodes;
    const char *const *modes;
    char name[64];
    TRY(ml_attr_int_list(n, "nodes_treeids", &a->treeids, &nt, e));
    TRY(ml_attr_int_list(n, "nodes_nodeids", &a->nodeids, &nn, e));
    TRY(ml_attr_int_list(n, "nodes_featureids", &a->featids, &nf, e));
    TRY(ml_attr_int_list(n, "nodes_truenodeids", &a->trueids, &ntr, e));
    TRY(ml_attr_int_list(n, "nodes_falsenodeids", &a->falseids, &nfa, e));
    TRY(ml_attr_int_list(n, "nodes_missing_value_tracks_true", &a->missing, &nmi, e));
    TRY(ml_attr_string_list(n, "nodes_modes", &modes, &nmodes, e));
    TRY(ml_attr_reals2(n, "nodes_values", &a->values, &nv, e));
    snprintf(name, sizeof name, "%s_treeids", wprefix);
    TRY(ml_attr_int_list(n, name, &a->wtree, &nwt, e));
    snprintf(name, sizeof name, "%s_nodeids", wprefix);
    TRY(ml_attr_int_list(n, name, &a->wnode, &nwn, e));
    snprintf(name, sizeof name, "%s_ids", wprefix);
    TRY(ml_attr_int_list(n, name, &a->wtarget, &nwi, e));
    snprintf(name, sizeof name, "%s_weights", wprefix);
    TRY(ml_attr_reals2(n, name, &a->wval, &nww, e));
    if (nt < 1)
        return nnc_node_fail(e, n, "attribute 'nodes_treeids' is required and must not be empty");
    if (nn != nt || nf != nt || ntr != nt || nfa != nt || nmodes != nt || nv != nt)
        return nnc_node_fail(
            e, n,
            "the nodes_* attributes must all have %lld values (nodes_treeids); got nodeids %lld, "
            "featureids %lld, truenodeids %lld, falsenodeids %lld, modes %lld, values %lld",
            (long long)nt, (long long)nn, (long long)nf, (long long)ntr, (long long)nfa,
            (long long)nmodes, (long long)nv);
    if (nmi >= 0 && nmi != nt && nmi != 0)
        return nnc_node_fail(
            e, n, "attribute 'nodes_missing_value_tracks_true' has %lld values for %lld nodes",
            (long long)nmi, (long long)nt);
    if (nwt < 0) nwt = 0;
    if (nwn != nwt || nwi != nwt || (nww < 0 ? 0 : nww) != nwt)
        return nnc_node_fail(e, n, "the %s_* attributes must all have %lld values", wprefix,
                             (long long)nwt);
    if (!tree_alloc(m, nt)) return nnc_node_fail(e, n, "out of memory");
    a->keys = malloc((size_t)nt * sizeof *a->keys);
    a->widx = malloc((size_t)(nwt ? nwt : 1) * sizeof(int64_t));
    if (!a->keys || !a->widx) return nnc_node_fail(e, n, "out of memory");
    for (int64_t i = 0; i < nt; i++) {
        a->keys[i] = (node_key){a->treeids[i], a->nodeids[i], i};
        int md = mode_from_name(modes[i]);
        if (md < 0)
            return nnc_node_unsup(
                e, n,
                "node %lld has mode '%s'; supported: BRANCH_LEQ, BRANCH_LT, BRANCH_GTE, "
                "BRANCH_GT, BRANCH_EQ, BRANCH_NEQ, LEAF",
                (long long)i, modes[i]);
        if (a->featids[i] > INT32_MAX)
            return nnc_node_fail(e, n, "node %lld has feature id %lld", (long long)i,
                                 (long long)a->featids[i]);
        m->mode[i] = (uint8_t)md;
        m->feat[i] = (int32_t)a->featids[i];
        m->thr_d[i] = a->values[i];
        m->thr_f[i] = (float)a->values[i];
        m->miss_true[i] = nmi > 0 && a->missing[i] == 1;
    }
    qsort(a->keys, (size_t)nt, sizeof *a->keys, key_cmp);
    for (int64_t i = 1; i < nt; i++)
        if (!key_cmp(&a->keys[i - 1], &a->keys[i]))
            return nnc_node_fail(e, n, "node %lld of tree %lld is defined twice",
                                 (long long)a->keys[i].node, (long long)a->keys[i].tree);
    for (int64_t i = 0; i < nt; i++) {
        if (m->mode[i] == M_LEAF) continue;
        int64_t t = key_find(a->keys, nt, a->treeids[i], a->trueids[i]);
        int64_t f = key_find(a->keys, nt, a->treeids[i], a->falseids[i]);
        if (t < 0 || f < 0)
            return nnc_node_fail(
                e, n, "node %lld of tree %lld branches to node %lld, which tree %lld does not have",
                (long long)a->nodeids[i], (long long)a->treeids[i],
                (long long)(t < 0 ? a->trueids[i] : a->falseids[i]), (long long)a->treeids[i]);
        if (t == i || f == i)
            return nnc_node_fail(e, n, "node %lld of tree %lld branches to itself",
                                 (long long)a->nodeids[i], (long long)a->treeids[i]);
        m->tnext[i] = t;
        m->fnext[i] = f;
    }
    /* Roots: the first node of each run of one tree id, as onnxruntime takes them. */
    m->roots = malloc((size_t)nt * sizeof(int64_t));
    if (!m->roots) return nnc_node_fail(e, n, "out of memory");
    m->ntrees = 0;
    for (int64_t i = 0; i < nt; i++)
        if (i == 0 || a->treeids[i] != a->treeids[i - 1]) m->roots[m->ntrees++] = i;
    for (int64_t i = 0; i < nwt; i++) {
        a->widx[i] = key_find(a->keys, nt, a->wtree[i], a->wnode[i]);
        if (a->widx[i] < 0)
            return nnc_node_fail(e, n,
                                 "weight %lld is for node %lld of tree %lld, which does not exist",
                                 (long long)i, (long long)a->wnode[i], (long long)a->wtree[i]);
    }
    TRY(set_weights(n, m, a->widx, a->wtarget, a->wval, nwt, e));
    return finish_model(n, m, e);
}

static int agg_from_name(const nnc_node *n, int *out, nnc_err *e)
{
    char s[32];
    TRY(nnc_attr_str(n, "aggregate_function", "SUM", s, sizeof s, e));
    static const char *names[] = {"AVERAGE", "SUM", "MIN", "MAX"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return NNC_OK;
        }
    return nnc_node_fail(
        e, n, "attribute 'aggregate_function' is '%s'; expected AVERAGE, SUM, MIN or MAX", s);
}


static int treereg_create(nnc_node *n, nnc_err *e)
{
    TRY(ml_check_numeric(n, 0, e));
    TRY(ml_check_out(n, 0, ML_OUT_F32, e));
    tree_model *m = calloc(1, sizeof *m);
    if (!m) return nnc_node_fail(e, n, "out of memory");
    n->state = m;
    TRY(nnc_attr_int(n, "n_targets", 1, &m->T, e));
    if (m->T < 1) return nnc_node_fail(e, n, "attribute 'n_targets' must be at least 1");
    TRY(agg_from_name(n, &m->agg, e));
    TRY(ml_post_transform(n, &m->pt, e));
    TRY(ml_attr_reals2(n, "base_values", &m->base, &m->nbase, e));
    if (m->nbase < 0) m->nbase = 0;
    if (m->nbase != 0 && m->nbase != m->T)
        return nnc_node_fail(
            e, n, "attribute 'base_values' has %lld values; it needs 0 or n_targets = %lld",
            (long long)m->nbase, (long long)m->T);
    v3_arrays a = {0};
    int rc = build_v3(n, m, "target", &a, e);
    v3_free(&a);
    return rc;
}

static int treecls_create(nnc_node *n, nnc_err *e)
{
    TRY(ml_no_string_labels(n, "classlabels_strings", e));
    TRY(ml_check_numeric(n, 0, e));
    TRY(ml_check_out(n, 0, ML_OUT_I64, e));
    TRY(ml_check_out(n, 1, ML_OUT_F32, e));
    tree_model *m = calloc(1, sizeof *m);
    if (!m) return nnc_node_fail(e, n, "out of memory");
    n->state = m;
    m->classifier = 1;
    m->agg = AGG_SUM;
    TRY(ml_attr_int_list(n, "classlabels_int64s", &m->labels, &m->T, e));
    if (m->T < 2)
        return nnc_node_unsup(e, n,
                              "a tree classifier needs at least 2 integer class labels, got %lld",
                              (long long)(m->T < 0 ? 0 : m->T));
    TRY(ml_post_transform(n, &m->pt, e));
    TRY(ml_attr_reals2(n, "base_values", &m->base, &m->nbase, e));
    if (m->nbase < 0) m->nbase = 0;
    if (m->T > 2 && m->nbase > m->T)
        return nnc_node_fail(e, n, "attribute 'base_values' has %lld values for %lld classes",
                             (long long)m->nbase, (long long)m->T);
    v3_arrays a = {0};
    int rc = build_v3(n, m, "class", &a, e);
    if (rc == NNC_OK) {
        /* onnxruntime's binary case: two labels, weights for one class only. */
        int64_t seen[2] = {-1, -1};
        int distinct = 0;
        m->all_positive = 1;
        for (int64_t i = 0; i < m->n; i++)
            for (int64_t w = m->wstart[i]; w < m->wstart[i] + m->wcount[i]; w++) {
                if (m->wval_d[w] < 0) m->all_positive = 0;
                int64_t c = m->wtarget[w];
                if (c != seen[0] && c != seen[1]) {
                    if (distinct < 2) seen[distinct] = c;
                    distinct++;
                }
            }
        m->binary_case = m->T == 2 && distinct == 1;
    }
    v3_free(&a);
    return rc;
}

/* ---- opset 5: TreeEnsemble ------------------------------------------------------------ */

static int treev5_create(nnc_node *n, nnc_err *e)
{
    static const int fl[] = {DT_F32, DT_F64, 0};
    TRY(nnc_check_dtype(n, 0, fl, e));
    if (n->vin[0] && n->vin[0]->ndim > 2)
        return nnc_node_unsup(e, n, "input X has rank %d; this op takes rank 1 or 2",
                              n->vin[0]->ndim);
    tree_model *m = calloc(1, sizeof *m);
    if (!m) return nnc_node_fail(e, n, "out of memory");
    n->state = m;
    m->v5 = 1;
    int64_t agg, pt;
    TRY(nnc_attr_int(n, "n_targets", -1, &m->T, e));
    TRY(nnc_attr_int(n, "aggregate_function", 1, &agg, e));
    TRY(nnc_attr_int(n, "post_transform", 0, &pt, e));
    if (m->T < 1)
        return nnc_node_fail(e, n, "attribute 'n_targets' is required and must be at least 1");
    if (agg < 0 || agg > 3)
        return nnc_node_fail(e, n, "attribute 'aggregate_function' = %lld; expected 0..3",
                             (long long)agg);
    static const int pts[] = {PT_NONE, PT_SOFTMAX, PT_LOGISTIC, PT_SOFTMAX_ZERO, PT_PROBIT};
    if (pt < 0 || pt > 4)
        return nnc_node_fail(e, n, "attribute 'post_transform' = %lld; expected 0..4",
                             (long long)pt);
    if (pt == 1 || pt == 2)
        /* the ONNX spec numbers SOFTMAX 1 and LOGISTIC 2, onnxruntime the other way round */
        return nnc_node_unsup(
            e, n,
            "post_transform %lld is not supported (onnxruntime reads 1 as LOGISTIC and 2 as "
            "SOFTMAX, the ONNX specification the other way round)",
            (long long)pt);
    m->agg = (int)agg;
    m->pt = pts[pt];
    int64_t *feat = NULL, *tid = NULL, *fid = NULL, *tleaf = NULL, *fleaf = NULL, *miss = NULL,
            *roots = NULL, *ltarget = NULL;
    double *splits = NULL, *lw = NULL, *mem = NULL;
    int64_t nfeat, ntid, nfid, ntl, nfl, nmiss, nroots, nlt, nsplit, nlw, nmem = -1, nmodes;
    int rc = NNC_ERR;
    const nnc_attr *ma = nnc_attr_find(n, "nodes_modes");
    if (ml_attr_int_list(n, "nodes_featureids", &feat, &nfeat, e) ||
        ml_attr_int_list(n, "nodes_truenodeids", &tid, &ntid, e) ||
        ml_attr_int_list(n, "nodes_falsenodeids", &fid, &nfid, e) ||
        ml_attr_int_list(n, "nodes_trueleafs", &tleaf, &ntl, e) ||
        ml_attr_int_list(n, "nodes_falseleafs", &fleaf, &nfl, e) ||
        ml_attr_int_list(n, "nodes_missing_value_tracks_true", &miss, &nmiss, e) ||
        ml_attr_int_list(n, "tree_roots", &roots, &nroots, e) ||
        ml_attr_int_list(n, "leaf_targetids", &ltarget, &nlt, e) ||
        ml_attr_reals(n, "nodes_splits", &splits, &nsplit, e) ||
        ml_attr_reals(n, "leaf_weights", &lw, &nlw, e) ||
        ml_attr_reals(n, "membership_values", &mem, &nmem, e))
        goto done;
    if (!ma || ma->kind != AK_TENSOR || ma->tdtype != DT_U8 || (ma->count && !ma->data)) {
        nnc_node_fail(e, n, "attribute 'nodes_modes' must be a uint8 tensor");
        goto done;
    }
    nmodes = ma->count;
    int64_t N = nfeat, L = nlt;
    if (N < 1 || ntid != N || nfid != N || ntl != N || nfl != N || nmodes != N || nsplit != N ||
        (nmiss > 0 && nmiss != N)) {
        nnc_node_fail(e, n, "the nodes_* attributes must all have %lld values (nodes_featureids)",
                      (long long)N);
        goto done;
    }
    if (L < 1 || nlw != L) {
        nnc_node_fail(
            e, n,
            "attributes 'leaf_targetids' and 'leaf_weights' must have the same, non-zero length");
        goto done;
    }
    if (nroots < 1) {
        nnc_node_fail(e, n, "attribute 'tree_roots' is required");
        goto done;
    }
    if (!tree_alloc(m, N + L)) {
        nnc_node_fail(e, n, "out of memory");
        goto done;
    }
    const uint8_t *modes = ma->data;
    int64_t mpos = 0;
    for (int64_t i = 0; i < N; i++) {
        if (modes[i] > 6) {
            nnc_node_fail(e, n, "node %lld has mode %d; expected 0..6", (long long)i, modes[i]);
            goto done;
        }
        if (feat[i] < 0 || feat[i] > INT32_MAX) {
            nnc_node_fail(e, n, "node %lld has feature id %lld", (long long)i, (long long)feat[i]);
            goto done;
        }
        /* BRANCH_MEMBER tests the value itself against the set, as the ONNX specification and
         * reference do (onnxruntime truncates the input to an integer first) */
        m->mode[i] = modes[i] == 6 ? M_MEMBER : modes[i];
        m->feat[i] = (int32_t)feat[i];
        m->thr_d[i] = splits[i];
        m->thr_f[i] = (float)splits[i];
        m->miss_true[i] = nmiss > 0 && miss[i] == 1;
        int64_t t = tid[i], f = fid[i], tl = tleaf[i] != 0, fl2 = fleaf[i] != 0;
        if (t < 0 || t >= (tl ? L : N) || f < 0 || f >= (fl2 ? L : N)) {
            nnc_node_fail(
                e, n,
                "node %lld branches to %s %lld / %s %lld, out of range (%lld nodes, %lld leaves)",
                (long long)i, tl ? "leaf" : "node", (long long)t, fl2 ? "leaf" : "node",
                (long long)f, (long long)N, (long long)L);
            goto done;
        }
        m->tnext[i] = tl ? N + t : t;
        m->fnext[i] = fl2 ? N + f : f;
        if (m->tnext[i] == i || m->fnext[i] == i) {
            nnc_node_fail(e, n, "node %lld branches to itself", (long long)i);
            goto done;
        }
        if (m->mode[i] == M_MEMBER) {
            /* this node's set: the next NaN-terminated run of membership_values */
            if (nmem < 0 || mpos > nmem) {
                nnc_node_fail(
                    e, n, "node %lld is BRANCH_MEMBER but 'membership_values' has no set for it",
                    (long long)i);
                goto done;
            }
            m->mstart[i] = mpos;
            while (mpos < nmem && !isnan(mem[mpos])) mpos++;
            m->mcount[i] = mpos - m->mstart[i];
            mpos++;
        }
    }
    for (int64_t l = 0; l < L; l++) m->mode[N + l] = M_LEAF;
    m->members = mem;
    mem = NULL;
    m->roots = malloc((size_t)nroots * sizeof(int64_t));
    if (!m->roots) {
        nnc_node_fail(e, n, "out of memory");
        goto done;
    }
    for (int64_t r = 0; r < nroots; r++) {
        if (roots[r] < 0 || roots[r] >= N) {
            nnc_node_fail(e, n, "tree_roots[%lld] = %lld is not a node", (long long)r,
                          (long long)roots[r]);
            goto done;
        }
        m->roots[r] = roots[r];
        /* a root whose two branches name the same leaf is a one-leaf tree: leaf tree_roots[r]
         * (onnxruntime); branches naming the same id as a node and as a leaf are two branches */
        if (tid[roots[r]] == fid[roots[r]] && tleaf[roots[r]] && fleaf[roots[r]]) {
            if (roots[r] >= L) {
                nnc_node_fail(e, n, "tree %lld is a single leaf %lld, beyond the %lld leaves",
                              (long long)r, (long long)roots[r], (long long)L);
                goto done;
            }
            m->roots[r] = N + roots[r];
        }
    }
    m->ntrees = nroots;
    int64_t *wnode = malloc((size_t)L * sizeof(int64_t));
    if (!wnode) {
        nnc_node_fail(e, n, "out of memory");
        goto done;
    }
    for (int64_t l = 0; l < L; l++) wnode[l] = N + l;
    rc = set_weights(n, m, wnode, ltarget, lw, L, e);
    free(wnode);
    if (rc == NNC_OK) rc = finish_model(n, m, e);
done:
    free(feat);
    free(tid);
    free(fid);
    free(tleaf);
    free(fleaf);
    free(miss);
    free(roots);
    free(ltarget);
    free(splits);
    free(lw);
    free(mem);
    return rc;
}

/* ---- running ------------------------------------------------------------------------- */

static int tree_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    tree_model *m = n->state;
    int64_t N, F;
    if (m->v5 && in[0]->dtype != DT_F32 && in[0]->dtype != DT_F64)
        return nnc_node_fail(e, n, "input X has element type %s; expected float or double",
                             nnc_dtname(in[0]->dtype));
    TRY(ml_rows(n, in[0], &N, &F, e));
    if (m->max_feature >= F)
        return nnc_node_fail(e, n, "a node reads feature %lld; input X has %lld features",
                             (long long)m->max_feature, (long long)F);
    if (m->classifier) {
        out[0].dtype = DT_I64;
        out[0].ndim = 1;
        out[0].dims[0] = N;
        if (n->nout > 1) {
            out[1].dtype = DT_F32;
            out[1].ndim = 2;
            out[1].dims[0] = N;
            out[1].dims[1] = m->T;
        }
    } else {
        out[0].dtype = m->v5 ? in[0]->dtype : DT_F32;
        out[0].ndim = 2;
        out[0].dims[0] = N;
        out[0].dims[1] = m->T;
    }
    return NNC_OK;
}

static int in_set(const tree_model *m, int64_t i, double v)
{
    const double *s = m->members + m->mstart[i];
    for (int64_t k = 0; k < m->mcount[i]; k++)
        if (s[k] == v) return 1;
    return 0;
}

/* Leaf reached from node i for row x (values as the comparison type, widened to double). */
static int64_t find_leaf(const tree_model *m, int64_t i, const double *x, int f32)
{
    while (m->mode[i] != M_LEAF) {
        double v = x[m->feat[i]], t = f32 ? (double)m->thr_f[i] : m->thr_d[i];
        int c;
        switch (m->mode[i]) {
        case M_LEQ: c = v <= t; break;
        case M_LT: c = v < t; break;
        case M_GTE: c = v >= t; break;
        case M_GT: c = v > t; break;
        case M_EQ: c = v == t; break;
        case M_NEQ: c = v != t; break;
        default: c = in_set(m, i, v); break;
        }
        if (!c && m->miss_true[i] && isnan(v)) c = 1;
        i = c ? m->tnext[i] : m->fnext[i];
    }
    return i;
}

typedef struct {
    const tree_model *m;
    const nnc_tensor *x;
    int64_t F;
    int64_t *label;
    void *z;
    int zdouble, f32, failed;
} tree_job;

/* acc = acc + w in the accumulation type (float arithmetic for float models). */
#define ADD(f32, a, w) ((f32) ? (double)((float)(a) + (float)(w)) : (a) + (w))

static void finalize_regressor(const tree_model *m, double *acc, unsigned char *has, float *z32,
                               int f32)
{
    int64_t T = m->T;
    if (T == 1) {
        double origin = m->nbase == 1 ? (f32 ? (double)(float)m->base[0] : m->base[0]) : 0.0;
        double s = acc[0];
        if (m->agg == AGG_SUM) s = ADD(f32, s, origin);
        else if (m->agg == AGG_AVERAGE)
            s = ADD(f32, f32 ? (double)((float)s / (float)m->ntrees) : s / (double)m->ntrees,
                    origin);
        else s = has[0] ? ADD(f32, s, origin) : origin;
        z32[0] = (float)s;
        ml_transform_targets(z32, 1, m->pt);
        return;
    }
    int use_base = m->nbase == T;
    for (int64_t t = 0; t < T; t++) {
        double s = acc[t], b = use_base ? (f32 ? (double)(float)m->base[t] : m->base[t]) : 0.0;
        if (m->agg == AGG_SUM) s = use_base ? ADD(f32, s, b) : s;
        else if (m->agg == AGG_AVERAGE)
            s = ADD(f32, f32 ? (double)((float)s / (float)m->ntrees) : s / (double)m->ntrees, b);
        else s = ADD(f32, b, has[t] ? s : 0.0);
        /* a target no tree gave a weight is 0 before the transform, base value or not: what
         * onnxruntime writes (its scores carry a has-score flag that adding the base leaves
         * unset; the ONNX spec and reference give the base value). One target keeps the base. */
        z32[t] = has[t] ? (float)s : 0.f;
    }
    ml_transform_targets(z32, T, m->pt);
}

static int64_t finalize_classifier(const tree_model *m, double *acc, unsigned char *has, float *z,
                                   int f32)
{
    int64_t C = m->T, label;
    float v[2];
    if (C > 2) {
        for (int64_t k = 0; k < m->nbase; k++) {
            double b = f32 ? (double)(float)m->base[k] : m->base[k];
            if (!has[k]) {
                has[k] = 1;
                acc[k] = b;
            } else acc[k] = ADD(f32, acc[k], b);
        }
        int64_t best = -1;
        for (int64_t k = 0; k < C; k++)
            if (has[k] && (best < 0 || acc[k] > acc[best])) best = k;
        label = m->labels[best < 0 ? 0 : best];
        for (int64_t k = 0; k < C; k++) z[k] = has[k] ? (float)acc[k] : 0.f;
        ml_write_scores(z, (int)C, m->pt, -1, z);
        return label;
    }
    int k = 2, was = -1;
    double b0 = m->nbase > 0 ? (f32 ? (double)(float)m->base[0] : m->base[0]) : 0;
    double b1 = m->nbase > 1 ? (f32 ? (double)(float)m->base[1] : m->base[1]) : 0;
    if (m->nbase == 2) {
        if (has[1]) {
            acc[1] = ADD(f32, b1, acc[0]);
            acc[0] = -acc[1];
            has[1] = 1;
        } else {
            acc[1] = ADD(f32, acc[1], b1);
            acc[0] = ADD(f32, acc[0], b0);
        }
    } else if (m->nbase == 1) {
        acc[0] = ADD(f32, acc[0], b0);
        if (!has[1]) k = 1;
    } else if (m->nbase == 0) {
        was = 3;
        if (!has[1]) k = 1;
    }
    double pos = k == 2 && has[1] ? acc[1] : (has[0] ? acc[0] : 0.0);
    if (m->binary_case) {
        if (m->all_positive) {
            if (pos > 0.5) {
                was = 0;
                label = m->labels[1];
            } else {
                was = 1;
                label = m->labels[0];
            }
        } else {
            if (pos > 0) {
                was = 2;
                label = m->labels[1];
            } else {
                was = 3;
                label = m->labels[0];
            }
        }
    } else {
        label = pos > 0 ? 1 : 0;
    }
    v[0] = has[0] ? (float)acc[0] : 0.f;
    v[1] = has[1] ? (float)acc[1] : 0.f;
    int w = ml_write_scores(v, k, m->pt, was, z);
    if (w < 2) z[1] = 0.f;
    return label;
}

/* Adds the weights of a leaf to one row's scores. */
static inline void add_leaf(const tree_model *m, int64_t leaf, double *acc, unsigned char *has,
                            int f32, int single)
{
    int64_t w0 = m->wstart[leaf], w1 = w0 + m->wcount[leaf];
    if (single && w1 > w0 + 1) w1 = w0 + 1; /* one target: the leaf's first weight */
    if (single && w1 == w0) { /* a leaf without weight counts as 0 (onnxruntime) */
        double v = 0.0;
        if (m->agg == AGG_MIN) acc[0] = !has[0] || v < acc[0] ? v : acc[0];
        else if (m->agg == AGG_MAX) acc[0] = !has[0] || v > acc[0] ? v : acc[0];
        has[0] = 1;
    }
    for (int64_t w = w0; w < w1; w++) {
        int64_t c = m->wtarget[w];
        double v = f32 ? (double)m->wval_f[w] : m->wval_d[w];
        if (m->agg == AGG_SUM || m->agg == AGG_AVERAGE) acc[c] = ADD(f32, acc[c], v);
        else if (m->agg == AGG_MIN) acc[c] = !has[c] || v < acc[c] ? v : acc[c];
        else acc[c] = !has[c] || v > acc[c] ? v : acc[c];
        has[c] = 1;
    }
}

/* Leaves of one tree for nr rows of x (row stride F) on the fast layout: the comparison is
 * the node's mode, a NaN goes to child[1] only when its node tracks missing values. WALK_ROWS
 * rows step together, without a branch per row (a row at its leaf keeps stepping in place),
 * so that their loads overlap; the last rows of a block walk one by one. */
#define WALK_ROWS 8 /* rows stepping together: 16 measured slower, 4 slower still */
/* Steps the WALK_ROWS walks i[] (walk q on the row at XQ, an expression of q) until every
 * one is at a leaf: no branch per walk, a walk at its leaf steps in place. */
#define WALK_TOGETHER(CMP, i, XQ)             \
    for (;;) {                                \
        int32_t all = -1;                     \
        for (int q = 0; q < WALK_ROWS; q++) { \
            FAST_STEP(CMP, i[q], XQ);         \
            all &= i[q];                      \
        }                                     \
        if (all < 0) break;                   \
    }
#define FAST_WALK(NAME, CMP)                                                                   \
    static void NAME(const fast_node *fn, int32_t root, const float *x, int64_t F, int64_t nr, \
                     int32_t *leaf)                                                            \
    {                                                                                          \
        int64_t r = 0;                                                                         \
        for (; root >= 0 && r + WALK_ROWS <= nr; r += WALK_ROWS) {                             \
            int32_t i[WALK_ROWS];                                                              \
            for (int q = 0; q < WALK_ROWS; q++) i[q] = root;                                   \
            WALK_TOGETHER(CMP, i, x + (r + q) * F)                                             \
            for (int q = 0; q < WALK_ROWS; q++) leaf[r + q] = ~i[q];                           \
        }                                                                                      \
        for (; r < nr; r++) {                                                                  \
            int32_t i = root;                                                                  \
            const float *xr = x + r * F;                                                       \
            while (i >= 0) FAST_STEP(CMP, i, xr);                                              \
            leaf[r] = ~i;                                                                      \
        }                                                                                      \
    }
/* one step of row walk i; a finished walk (i < 0) is at a leaf, which loops to itself */
#define FAST_STEP(CMP, i, xr)                                     \
    do {                                                          \
        const fast_node *nd = &fn[i];                             \
        uint32_t fm = nd->feat;                                   \
        float v = (xr)[fm & 0x7fffffffu];                         \
        int c = (CMP(v, nd->thr)) | ((int)(fm >> 31) & (v != v)); \
        i = nd->child[c];                                         \
    } while (0)
/* Leaves of nt trees (their roots) for one row xr: WALK_ROWS trees step together, as rows do
 * in FAST_WALK, so that a row alone (batch 1) overlaps the loads of several walks instead of
 * waiting on one tree's chain of nodes at a time. A root that is a leaf loops in place. */
#define FAST_WALK_TREES(NAME, CMP)                                                           \
    static void NAME(const fast_node *fn, const int32_t *roots, int64_t nt, const float *xr, \
                     int32_t *leaf)                                                          \
    {                                                                                        \
        int64_t t = 0;                                                                       \
        for (; t + WALK_ROWS <= nt; t += WALK_ROWS) {                                        \
            int32_t i[WALK_ROWS];                                                            \
            for (int q = 0; q < WALK_ROWS; q++) i[q] = roots[t + q];                         \
            WALK_TOGETHER(CMP, i, xr)                                                        \
            for (int q = 0; q < WALK_ROWS; q++) leaf[t + q] = ~i[q];                         \
        }                                                                                    \
        for (; t < nt; t++) {                                                                \
            int32_t i = roots[t];                                                            \
            while (i >= 0) FAST_STEP(CMP, i, xr);                                            \
            leaf[t] = ~i;                                                                    \
        }                                                                                    \
    }
#define CMP_LEQ(v, t) ((v) <= (t))
#define CMP_LT(v, t) ((v) < (t))
#define CMP_GTE(v, t) ((v) >= (t))
#define CMP_GT(v, t) ((v) > (t))
FAST_WALK(walk_leq, CMP_LEQ)
FAST_WALK(walk_lt, CMP_LT)
FAST_WALK(walk_gte, CMP_GTE)
FAST_WALK(walk_gt, CMP_GT)
FAST_WALK_TREES(walk_trees_leq, CMP_LEQ)
FAST_WALK_TREES(walk_trees_lt, CMP_LT)
FAST_WALK_TREES(walk_trees_gte, CMP_GTE)
FAST_WALK_TREES(walk_trees_gt, CMP_GT)

/* Rows are taken ROW_BLOCK at a time and every tree runs over the block before the next tree,
 * so a tree's nodes stay in cache across rows; each row still adds its trees in tree order. */
#define ROW_BLOCK 64

static void tree_rows(void *arg, int64_t b, int64_t end, int tid)
{
    (void)tid;
    tree_job *j = arg;
    const tree_model *m = j->m;
    int64_t T = m->T, F = j->F;
    int f32 = j->f32, single = !m->classifier && T == 1;
    int fast = f32 && m->fnodes;
    int64_t rb = fast ? ROW_BLOCK : 1;
    int copy = fast && j->x->dtype != DT_F32; /* other inputs: cast to float, as onnxruntime */
    double *xd = fast ? NULL : malloc((size_t)(F ? F : 1) * sizeof(double));
    float *xf = copy ? malloc((size_t)(rb * F ? rb * F : 1) * sizeof(float)) : NULL;
    double *accs = malloc((size_t)(rb * T) * sizeof(double));
    unsigned char *hass = malloc((size_t)(rb * T));
    float *zb = malloc((size_t)(T + 2) * sizeof(float));
    int32_t leaf[ROW_BLOCK];
    if ((!fast && !xd) || (copy && !xf) || !accs || !hass || !zb) {
        free(xd);
        free(xf);
        free(accs);
        free(hass);
        free(zb);
        j->failed = 1;
        return;
    }
    for (int64_t r0 = b; r0 < end; r0 += rb) {
        int64_t nr = end - r0 < rb ? end - r0 : rb;
        memset(accs, 0, (size_t)(nr * T) * sizeof(double));
        memset(hass, 0, (size_t)(nr * T));
        if (fast) {
            const float *xs = (const float *)j->x->data + r0 * F;
            if (copy) {
                for (int64_t k = 0; k < nr * F; k++) xf[k] = ml_at_f(j->x, r0 * F + k);
                xs = xf;
            }
            if (nr < WALK_ROWS) { /* too few rows to step together: their trees do */
                for (int64_t r = 0; r < nr; r++)
                    for (int64_t t0 = 0; t0 < m->ntrees; t0 += ROW_BLOCK) {
                        int64_t nt = m->ntrees - t0 < ROW_BLOCK ? m->ntrees - t0 : ROW_BLOCK;
                        const int32_t *roots = m->froots + t0;
                        const float *xr = xs + r * F;
                        switch (m->fast_mode) {
                        case M_LEQ: walk_trees_leq(m->fnodes, roots, nt, xr, leaf); break;
                        case M_LT: walk_trees_lt(m->fnodes, roots, nt, xr, leaf); break;
                        case M_GTE: walk_trees_gte(m->fnodes, roots, nt, xr, leaf); break;
                        default: walk_trees_gt(m->fnodes, roots, nt, xr, leaf); break;
                        }
                        for (int64_t q = 0; q < nt; q++) /* in tree order: the same sums */
                            add_leaf(m, m->fleaf[leaf[q]], accs + r * T, hass + r * T, 1, single);
                    }
            } else {
                for (int64_t t = 0; t < m->ntrees; t++) {
                    int32_t root = m->froots[t];
                    switch (m->fast_mode) {
                    case M_LEQ: walk_leq(m->fnodes, root, xs, F, nr, leaf); break;
                    case M_LT: walk_lt(m->fnodes, root, xs, F, nr, leaf); break;
                    case M_GTE: walk_gte(m->fnodes, root, xs, F, nr, leaf); break;
                    default: walk_gt(m->fnodes, root, xs, F, nr, leaf); break;
                    }
                    if (root < 0)
                        for (int64_t r = 0; r < nr; r++) leaf[r] = ~root;
                    for (int64_t r = 0; r < nr; r++)
                        add_leaf(m, m->fleaf[leaf[r]], accs + r * T, hass + r * T, 1, single);
                }
            }
        } else {
            for (int64_t f = 0; f < F; f++)
                xd[f] = f32 ? (double)ml_at_f(j->x, r0 * F + f) : ml_at_d(j->x, r0 * F + f);
            for (int64_t t = 0; t < m->ntrees; t++)
                add_leaf(m, find_leaf(m, m->roots[t], xd, f32), accs, hass, f32, single);
        }
        for (int64_t q = 0; q < nr; q++) {
            int64_t r = r0 + q;
            double *acc = accs + q * T;
            unsigned char *has = hass + q * T;
            if (m->classifier) {
                j->label[r] = finalize_classifier(m, acc, has, zb, f32);
                if (j->z) memcpy((float *)j->z + r * T, zb, (size_t)T * sizeof(float));
            } else if (j->zdouble) {
                /* TreeEnsemble on double: accumulated and written in double (it has no base
                 * values); transforms computed in float, as onnxruntime does */
                double *zo = (double *)j->z + r * T;
                for (int64_t t = 0; t < T; t++) {
                    double v = acc[t];
                    if (m->agg == AGG_AVERAGE) v /= (double)m->ntrees;
                    else if (m->agg != AGG_SUM && !has[t]) v = 0;
                    zo[t] = v;
                }
                if (ml_targets_transformed(T, m->pt)) {
                    for (int64_t t = 0; t < T; t++) zb[t] = (float)zo[t];
                    ml_transform_targets(zb, T, m->pt);
                    for (int64_t t = 0; t < T; t++) zo[t] = zb[t];
                }
            } else {
                finalize_regressor(m, acc, has, zb, f32);
                memcpy((float *)j->z + r * T, zb, (size_t)T * sizeof(float));
            }
        }
    }
    free(xd);
    free(xf);
    free(accs);
    free(hass);
    free(zb);
}

static int tree_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    tree_model *m = n->state;
    int64_t N, F;
    TRY(ml_rows(n, in[0], &N, &F, e));
    if (m->max_feature >= F)
        return nnc_node_fail(e, n, "a node reads feature %lld; input X has %lld features",
                             (long long)m->max_feature, (long long)F);
    tree_job j = {m, in[0], F, NULL, NULL, 0, in[0]->dtype != DT_F64, 0};
    if (m->classifier) {
        j.label = out[0].data;
        j.z = n->nout > 1 ? out[1].data : NULL;
    } else {
        j.z = out[0].data;
        j.zdouble = out[0].dtype == DT_F64;
    }
    /* chunks of at least a row block while there are a few per thread */
    int64_t grain = 1 + 8192 / (m->ntrees + 1);
    nnc_parallel_for(N, grain < ROW_BLOCK ? grain : ROW_BLOCK, tree_rows, &j);
    if (j.failed) return nnc_node_fail(e, n, "out of memory");
    return NNC_OK;
}

const nnc_op nnc_op_ml_treeensembleregressor = {"TreeEnsembleRegressor",
                                                1,
                                                1,
                                                1,
                                                1,
                                                treereg_create,
                                                tree_infer,
                                                tree_run,
                                                tree_destroy,
                                                0,
                                                NULL,
                                                NULL,
                                                ML_DOMAIN};
const nnc_op nnc_op_ml_treeensembleclassifier = {"TreeEnsembleClassifier",
                                                 1,
                                                 1,
                                                 1,
                                                 2,
                                                 treecls_create,
                                                 tree_infer,
                                                 tree_run,
                                                 tree_destroy,
                                                 0,
                                                 NULL,
                                                 NULL,
                                                 ML_DOMAIN};
const nnc_op nnc_op_ml_treeensemble = {
    "TreeEnsemble", 1, 1,    1,    1,        treev5_create, tree_infer, tree_run,
    tree_destroy,   0, NULL, NULL, ML_DOMAIN};
