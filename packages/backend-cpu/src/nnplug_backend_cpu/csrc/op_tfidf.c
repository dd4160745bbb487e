/* TfIdfVectorizer on int32/int64 tokens (pool_int64s; string pools are declined). The pool's
 * n-grams become a trie at create time, keyed by (parent node, token) in one open-addressing
 * table; matching walks it from every start position and skip distance exactly as the ONNX
 * reference and onnxruntime do (unigrams counted once, later duplicates of an n-gram take its
 * id, n-gram ids counted over every size, also those outside [min, max]). */
#include "ml.h" /* ml_attr_int_list */

#include <stdlib.h>

enum { TF_TF, TF_IDF, TF_TFIDF };

typedef struct {
    int64_t parent, key, child; /* child < 0: empty slot */
} tf_slot;

typedef struct {
    int mode;
    int64_t min_n, max_n, max_skip, out_size;
    int64_t nnodes, cap;    /* trie nodes (0 is the root); hash slots (a power of two) */
    int64_t *node_id;       /* n-gram id of each node, 0 when its path is only a prefix */
    int64_t *nchild;        /* children per node */
    tf_slot *slots;
    int64_t *indexes, nindexes;
    float *weights;
    int64_t nweights;
} tf_state;

static void tf_destroy(nnc_node *n)
{
    tf_state *s = n->state;
    if (s) {
        free(s->node_id);
        free(s->nchild);
        free(s->slots);
        free(s->indexes);
        free(s->weights);
    }
    free(s);
    n->state = NULL;
}

static uint64_t tf_hash(int64_t parent, int64_t key)
{
    uint64_t h = (uint64_t)parent * 0x9E3779B97F4A7C15ull ^ ((uint64_t)key + 0x632BE59BD9B4E019ull);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

static int64_t tf_find(const tf_state *s, int64_t parent, int64_t key)
{
    uint64_t m = (uint64_t)s->cap - 1;
    for (uint64_t i = tf_hash(parent, key) & m;; i = (i + 1) & m) {
        const tf_slot *t = &s->slots[i];
        if (t->child < 0) return -1;
        if (t->parent == parent && t->key == key) return t->child;
    }
}

/* The child of parent for key, added when missing (the table has room for every node). */
static int64_t tf_add(tf_state *s, int64_t parent, int64_t key)
{
    uint64_t m = (uint64_t)s->cap - 1;
    for (uint64_t i = tf_hash(parent, key) & m;; i = (i + 1) & m) {
        tf_slot *t = &s->slots[i];
        if (t->child >= 0 && t->parent == parent && t->key == key) return t->child;
        if (t->child < 0) {
            *t = (tf_slot){parent, key, s->nnodes};
            s->node_id[s->nnodes] = 0;
            s->nchild[s->nnodes] = 0;
            s->nchild[parent]++;
            return s->nnodes++;
        }
    }
}

static int tf_build(nnc_node *n, tf_state *s, const int64_t *counts, int64_t ncounts,
                    const int64_t *pool, int64_t npool, nnc_err *e);

static int tf_create(nnc_node *n, nnc_err *e)
{
    static const int ints[] = {DT_I32, DT_I64, 0};
    if (nnc_attr_find(n, "pool_strings"))
        return nnc_node_unsup(
            e, n,
            "string pools (pool_strings) are not supported (the cpu backend carries no "
            "string tensors); use integer tokens (pool_int64s)");
    TRY(nnc_check_dtype(n, 0, ints, e));
    if (n->vin[0] && n->vin[0]->ndim > 2)
        return nnc_node_fail(e, n, "input must have rank 0, 1 or 2, got %d", n->vin[0]->ndim);
    tf_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    char mode[16];
    if (!nnc_attr_find(n, "mode"))
        return nnc_node_fail(e, n, "attribute 'mode' is required (TF, IDF or TFIDF)");
    TRY(nnc_attr_str(n, "mode", "", mode, sizeof mode, e));
    if (!strcmp(mode, "TF")) s->mode = TF_TF;
    else if (!strcmp(mode, "IDF")) s->mode = TF_IDF;
    else if (!strcmp(mode, "TFIDF")) s->mode = TF_TFIDF;
    else return nnc_node_fail(e, n, "attribute 'mode' is '%s'; expected TF, IDF or TFIDF", mode);
    static const char *req[] = {"min_gram_length", "max_gram_length", "max_skip_count"};
    for (int i = 0; i < 3; i++)
        if (!nnc_attr_find(n, req[i]))
            return nnc_node_fail(e, n, "attribute '%s' is required", req[i]);
    TRY(nnc_attr_int(n, "min_gram_length", 1, &s->min_n, e));
    TRY(nnc_attr_int(n, "max_gram_length", 1, &s->max_n, e));
    TRY(nnc_attr_int(n, "max_skip_count", 0, &s->max_skip, e));
    if (s->min_n < 1 || s->max_n < s->min_n || s->max_n > 1024)
        return nnc_node_fail(
            e, n, "need 1 <= min_gram_length <= max_gram_length (<= 1024), got %lld and %lld",
            (long long)s->min_n, (long long)s->max_n);
    if (s->max_skip < 0 || s->max_skip > (1 << 20))
        return nnc_node_fail(e, n, "attribute 'max_skip_count' must be 0 to %d, got %lld", 1 << 20,
                             (long long)s->max_skip);
    int64_t *counts = NULL, *pool = NULL, ncounts, npool;
    int rc = ml_attr_int_list(n, "ngram_counts", &counts, &ncounts, e);
    if (rc == NNC_OK) rc = ml_attr_int_list(n, "pool_int64s", &pool, &npool, e);
    if (rc == NNC_OK) rc = tf_build(n, s, counts, ncounts, pool, npool, e);
    free(counts);
    free(pool);
    return rc;
}

/* Checks the attributes and builds the trie (create's second half; the lists are freed there). */
static int tf_build(nnc_node *n, tf_state *s, const int64_t *counts, int64_t ncounts,
                    const int64_t *pool, int64_t npool, nnc_err *e)
{
    if (ncounts < 0) return nnc_node_fail(e, n, "attribute 'ngram_counts' is required");
    if (npool < 0) return nnc_node_fail(e, n, "attribute 'pool_int64s' is required");
    TRY(ml_attr_int_list(n, "ngram_indexes", &s->indexes, &s->nindexes, e));
    if (s->nindexes < 1)
        return nnc_node_fail(e, n, "attribute 'ngram_indexes' is required and must not be empty");
    const int64_t *idx = s->indexes;
    s->out_size = 0;
    for (int64_t i = 0; i < s->nindexes; i++) {
        if (idx[i] < 0 || idx[i] > (1LL << 31))
            return nnc_node_fail(e, n, "ngram_indexes[%lld] = %lld is out of range", (long long)i,
                                 (long long)idx[i]);
        if (idx[i] + 1 > s->out_size) s->out_size = idx[i] + 1;
    }
    for (int64_t i = 0; i < ncounts; i++)
        if (counts[i] < 0 || counts[i] > npool || (i && counts[i] < counts[i - 1]))
            return nnc_node_fail(
                e, n,
                "ngram_counts must be non-decreasing offsets into the pool (0..%lld); "
                "entry %lld is %lld",
                (long long)npool, (long long)i, (long long)counts[i]);
    const nnc_attr *wa = nnc_attr_find(n, "weights");
    if (wa) {
        if (wa->kind != AK_FLOATS || (wa->count > 0 && !wa->data))
            return nnc_node_fail(e, n, "attribute 'weights' must be a list of floats");
        s->nweights = wa->count;
        if (s->nweights > 0 && s->nweights < s->out_size)
            return nnc_node_fail(e, n, "attribute 'weights' has %lld values for an output of %lld",
                                 (long long)s->nweights, (long long)s->out_size);
        s->weights = malloc((size_t)(s->nweights ? s->nweights : 1) * sizeof(float));
        if (!s->weights) return nnc_node_fail(e, n, "out of memory");
        if (s->nweights) memcpy(s->weights, wa->data, (size_t)s->nweights * sizeof(float));
    }
    /* the trie: at most one node per pool item, plus the root */
    s->cap = 16;
    while (s->cap < 2 * (npool + 1)) s->cap *= 2;
    s->slots = malloc((size_t)s->cap * sizeof *s->slots);
    s->node_id = malloc((size_t)(npool + 1) * sizeof(int64_t));
    s->nchild = malloc((size_t)(npool + 1) * sizeof(int64_t));
    if (!s->slots || !s->node_id || !s->nchild) return nnc_node_fail(e, n, "out of memory");
    for (int64_t i = 0; i < s->cap; i++) s->slots[i].child = -1;
    s->nnodes = 1;
    s->node_id[0] = 0;
    s->nchild[0] = 0;
    int64_t ngram_id = 1;
    for (int64_t i = 0, size = 1; i < ncounts; i++, size++) {
        int64_t start = counts[i], end = i + 1 < ncounts ? counts[i + 1] : npool;
        int64_t k = (end - start) / size;
        if (end - start <= 0) continue;
        if (size < s->min_n || size > s->max_n) {
            ngram_id += k;
            continue;
        }
        int64_t at = start;
        for (int64_t g = 0; g < k && at < npool; g++) {
            int64_t node = 0, t = 0;
            for (; t < size && at < npool; t++) node = tf_add(s, node, pool[at++]);
            if (t == size) {
                if (ngram_id - 1 >= s->nindexes)
                    return nnc_node_fail(
                        e, n, "the pool has more n-grams than 'ngram_indexes' has entries (%lld)",
                        (long long)s->nindexes);
                s->node_id[node] = ngram_id++;
            }
        }
    }
    return NNC_OK;
}

static int tf_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const tf_state *s = n->state;
    const nnc_tensor *x = in[0];
    if (x->dtype != DT_I32 && x->dtype != DT_I64)
        return nnc_node_fail(e, n, "input must be int32 or int64");
    if (x->ndim > 2) return nnc_node_fail(e, n, "input must have rank 0, 1 or 2, got %d", x->ndim);
    out->dtype = DT_F32;
    if (x->ndim == 2) {
        out->ndim = 2;
        out->dims[0] = x->dims[0];
        out->dims[1] = s->out_size;
    } else {
        out->ndim = 1;
        out->dims[0] = s->out_size;
    }
    return NNC_OK;
}

static inline int64_t tok(const nnc_tensor *x, int64_t i)
{
    return x->dtype == DT_I64 ? ((const int64_t *)x->data)[i] : ((const int32_t *)x->data)[i];
}

static int tf_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    const tf_state *s = n->state;
    const nnc_tensor *x = in[0];
    int64_t rows = x->ndim == 2 ? x->dims[0] : 1, C = x->ndim == 0 ? 1 : x->dims[x->ndim - 1],
            O = s->out_size;
    int64_t cells = rows * O, *freq = calloc((size_t)(cells > 0 ? cells : 1), sizeof *freq);
    if (!freq) return nnc_node_fail(e, n, "out of memory");
    for (int64_t r = 0; r < rows && s->nchild[0] > 0; r++) {
        int64_t begin = r * C, end = begin + C, start_n = s->min_n;
        for (int64_t skip = 1; skip <= s->max_skip + 1; skip++) {
            for (int64_t st = begin; st < end; st++) {
                if (st + skip * (start_n - 1) >= end) break;
                int64_t node = 0, item = st;
                for (int64_t size = 1; s->nchild[node] > 0 && size <= s->max_n && item < end;
                     size++, item += skip) {
                    int64_t child = tf_find(s, node, tok(x, item));
                    if (child < 0) break;
                    int64_t id = s->node_id[child];
                    if (size >= start_n && id != 0) freq[r * O + s->indexes[id - 1]]++;
                    node = child;
                }
            }
            if (start_n == 1) { /* unigrams once: they do not depend on the skip distance */
                start_n++;
                if (start_n > s->max_n) break;
            }
        }
    }
    float *y = out->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < O; i++) {
            int64_t f = freq[r * O + i];
            float v;
            if (s->mode == TF_TF) v = (float)f;
            else if (s->mode == TF_IDF) v = f > 0 ? (s->nweights ? s->weights[i] : 1.f) : 0.f;
            else v = s->nweights ? s->weights[i] * (float)f : (float)f;
            y[r * O + i] = v;
        }
    free(freq);
    return NNC_OK;
}

const nnc_op nnc_op_tfidfvectorizer = {"TfIdfVectorizer", 1,        1,      1,          1,
                                       tf_create,         tf_infer, tf_run, tf_destroy, 0};
