/* Einsum (float32, float64, float16, bfloat16, int32, int64): any equation, explicit or implicit output,
 * ellipsis with broadcasting, repeated labels (diagonals), any number of operands. A generic
 * contraction: every output element sums the product of the operands over the labels the
 * output does not keep; parallel over output elements. */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <stdlib.h>

#define EL 60 /* labels: 52 letters, then up to NNC_MAXDIM ellipsis dims */
#define ELL_BASE 52

typedef struct {
    int nops;
    int nlab[NNC_MAXIO]; /* letters per operand (ellipsis excluded) */
    signed char lab[NNC_MAXIO][NNC_MAXDIM + 1]; /* letter ids in order; -1 marks the ellipsis */
    int has_ell[NNC_MAXIO];
    int nout; /* explicit output labels (ellipsis: -1) */
    signed char out[NNC_MAXDIM + 1];
    int out_ell, explicit_out;
} es_state;

static void es_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int letter(char c)
{
    if (c >= 'a' && c <= 'z') return c - 'a';
    if (c >= 'A' && c <= 'Z') return 26 + c - 'A';
    return -1;
}

/* One term: letters and at most one "..."; returns the count of entries in ids. */
static int parse_term(const char *s, size_t len, signed char *ids, int *ell)
{
    int k = 0;
    *ell = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') continue;
        if (s[i] == '.') {
            if (*ell || i + 2 >= len + 0 || s[i + 1] != '.' || s[i + 2] != '.') return -1;
            *ell = 1;
            if (k > NNC_MAXDIM) return -1;
            ids[k++] = -1;
            i += 2;
            continue;
        }
        int l = letter(s[i]);
        if (l < 0 || k > NNC_MAXDIM) return -1;
        ids[k++] = (signed char)l;
    }
    return k;
}

static int es_create(nnc_node *n, nnc_err *e)
{
    static const int dts[] = {DT_F32, DT_F64, DT_F16, DT_BF16, DT_I32, DT_I64, 0};
    for (int i = 0; i < n->nin; i++) TRY(nnc_check_dtype(n, i, dts, e));
    for (int i = 1; i < n->nin; i++)
        if (n->vin[i] && n->vin[0] && n->vin[i]->dtype && n->vin[0]->dtype &&
            n->vin[i]->dtype != n->vin[0]->dtype)
            return nnc_node_fail(e, n, "all inputs must have the same element type");
    es_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    char eq[512];
    if (!nnc_attr_find(n, "equation"))
        return nnc_node_fail(e, n, "attribute 'equation' is required");
    TRY(nnc_attr_str(n, "equation", "", eq, sizeof eq, e));
    const char *arrow = strstr(eq, "->");
    size_t lhs = arrow ? (size_t)(arrow - eq) : strlen(eq);
    s->nops = 0;
    size_t start = 0;
    for (size_t i = 0; i <= lhs; i++) {
        if (i < lhs && eq[i] != ',') continue;
        if (s->nops >= NNC_MAXIO) return nnc_node_fail(e, n, "too many operands in the equation");
        int k = parse_term(eq + start, i - start, s->lab[s->nops], &s->has_ell[s->nops]);
        if (k < 0) return nnc_node_fail(e, n, "equation '%s' is not valid", eq);
        s->nlab[s->nops] = k - s->has_ell[s->nops];
        s->nops++;
        start = i + 1;
    }
    if (s->nops != n->nin)
        return nnc_node_fail(e, n, "equation '%s' has %d operands, the node %d inputs", eq, s->nops,
                             n->nin);
    int count[ELL_BASE] = {0};
    for (int o = 0; o < s->nops; o++)
        for (int k = 0; k < s->nlab[o] + s->has_ell[o]; k++)
            if (s->lab[o][k] >= 0) count[(int)s->lab[o][k]]++;
    if (arrow) {
        s->explicit_out = 1;
        int k = parse_term(arrow + 2, strlen(arrow + 2), s->out, &s->out_ell);
        if (k < 0) return nnc_node_fail(e, n, "equation '%s' is not valid", eq);
        s->nout = k;
        for (int o = 0; o < s->nops; o++)
            if (s->has_ell[o] && !s->out_ell)
                return nnc_node_unsup(
                    e, n, "an ellipsis in the inputs but not in the output is not supported");
        int seen[ELL_BASE] = {0};
        for (int i = 0; i < k; i++) {
            int l = s->out[i];
            if (l < 0) continue;
            if (seen[l]++) return nnc_node_fail(e, n, "equation '%s' repeats an output label", eq);
            if (!count[l])
                return nnc_node_fail(e, n, "equation '%s' has an output label no input has", eq);
        }
    } else {
        /* implicit: ellipsis, then the labels seen once in alphabetical order; with both cases
         * onnxruntime (lower first) and numpy (upper first) differ: decline that */
        int any_ell = 0, lower = 0, upper = 0;
        for (int o = 0; o < s->nops; o++) any_ell |= s->has_ell[o];
        s->nout = 0;
        if (any_ell) {
            s->out[s->nout++] = -1;
            s->out_ell = 1;
        }
        for (int l = 0; l < ELL_BASE; l++)
            if (count[l] == 1) {
                if (s->nout > NNC_MAXDIM)
                    return nnc_node_unsup(e, n, "the output has too many dimensions");
                s->out[s->nout++] = (signed char)l;
                if (l < 26) lower = 1;
                else upper = 1;
            }
        if (lower && upper)
            return nnc_node_unsup(
                e, n, "an implicit output with upper- and lower-case labels is not supported");
    }
    return NNC_OK;
}

typedef struct {
    int nops, nout, nsum, dt;
    int64_t osize[EL], ssize[EL];
    int64_t ostr[NNC_MAXIO][EL],
        sstr[NNC_MAXIO][EL]; /* operand strides per output / summed label */
    const void *x[NNC_MAXIO];
    void *y;
    int64_t odims[NNC_MAXDIM];
    int ond;
} es_plan;

static int es_resolve(nnc_node *n, nnc_tensor *const *in, es_plan *p, nnc_err *e)
{
    const es_state *s = n->state;
    memset(p, 0, sizeof *p);
    int64_t size[EL];
    int seen[EL] = {0};
    int nell = 0;
    p->dt = in[0]->dtype;
    for (int o = 0; o < s->nops; o++) {
        if (in[o]->dtype != p->dt)
            return nnc_node_fail(e, n, "all inputs must have the same element type");
        if (p->dt != DT_F32 && p->dt != DT_F64 && p->dt != DT_F16 && p->dt != DT_BF16 &&
            p->dt != DT_I32 && p->dt != DT_I64)
            return nnc_node_fail(e, n, "element type %s is not supported", nnc_dtname(p->dt));
        int r = in[o]->ndim, ne = r - s->nlab[o];
        if (ne < 0 || (!s->has_ell[o] && ne != 0))
            return nnc_node_fail(e, n, "input %d has rank %d, the equation gives it %d labels", o,
                                 r, s->nlab[o]);
        if (ne > nell) nell = ne;
    }
    /* ellipsis dims, right-aligned and broadcast */
    for (int k = 0; k < nell; k++) {
        size[ELL_BASE + k] = 1;
        seen[ELL_BASE + k] = 1;
    }
    for (int o = 0; o < s->nops; o++) {
        const nnc_tensor *t = in[o];
        int ne = t->ndim - s->nlab[o], d = 0;
        int64_t st[NNC_MAXDIM];
        int64_t acc = 1;
        for (int q = t->ndim - 1; q >= 0; q--) {
            st[q] = acc;
            acc *= t->dims[q];
        }
        for (int k = 0; k < s->nlab[o] + s->has_ell[o]; k++) {
            int l = s->lab[o][k];
            if (l < 0) {
                for (int q = 0; q < ne; q++, d++) {
                    int el = ELL_BASE + nell - ne + q;
                    int64_t sz = t->dims[d];
                    if (sz != 1) {
                        if (size[el] != 1 && size[el] != sz)
                            return nnc_node_fail(e, n, "ellipsis dimensions do not broadcast");
                        size[el] = sz;
                        p->sstr[o][el] = st[d]; /* provisional: moved to ostr below if kept */
                    }
                }
                continue;
            }
            int64_t sz = t->dims[d];
            if (seen[l] && size[l] != sz)
                return nnc_node_fail(e, n, "label '%c' has sizes %lld and %lld",
                                     l < 26 ? 'a' + l : 'A' + l - 26, (long long)size[l],
                                     (long long)sz);
            seen[l] = 1;
            size[l] = sz;
            p->sstr[o][l] += st[d]; /* repeated label: a diagonal */
            d++;
        }
    }
    /* output labels in order, summed labels after */
    int keep[EL] = {0}, order[EL], no = 0;
    for (int i = 0; i < s->nout; i++) {
        int l = s->out[i];
        if (l < 0) {
            for (int k = 0; k < nell; k++) order[no++] = ELL_BASE + k;
        } else order[no++] = l;
    }
    if (no > NNC_MAXDIM)
        return nnc_node_fail(e, n, "the output has rank %d, at most %d is supported", no,
                             NNC_MAXDIM);
    p->nops = s->nops;
    p->nout = no;
    p->ond = no;
    for (int i = 0; i < no; i++) {
        int l = order[i];
        keep[l] = 1;
        p->osize[i] = size[l];
        p->odims[i] = size[l];
        for (int o = 0; o < s->nops; o++) p->ostr[o][i] = p->sstr[o][l];
    }
    int64_t tmp[NNC_MAXIO][EL];
    memcpy(tmp, p->sstr, sizeof tmp);
    p->nsum = 0;
    for (int l = 0; l < EL; l++) {
        if (!seen[l] || keep[l] || (l >= ELL_BASE + nell)) continue;
        p->ssize[p->nsum] = size[l];
        for (int o = 0; o < s->nops; o++) p->sstr[o][p->nsum] = tmp[o][l];
        p->nsum++;
    }
    for (int o = 0; o < s->nops; o++)
        for (int k = p->nsum; k < EL; k++) p->sstr[o][k] = 0;
    return NNC_OK;
}

static int es_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    es_plan *p = malloc(sizeof *p);
    if (!p) return nnc_node_fail(e, n, "out of memory");
    int rc = es_resolve(n, in, p, e);
    if (rc == NNC_OK) {
        out->dtype = p->dt;
        out->ndim = p->ond;
        memcpy(out->dims, p->odims, sizeof(int64_t) * (size_t)p->ond);
    }
    free(p);
    return rc;
}

static double es_get(const void *x, int dt, int64_t i)
{
    switch (dt) {
    case DT_F32: return ((const float *)x)[i];
    case DT_F64: return ((const double *)x)[i];
    case DT_F16: return nnc_h2f(((const uint16_t *)x)[i]);
    case DT_BF16: return nnc_bf2f(((const uint16_t *)x)[i]);
    default: return 0;
    }
}

static int64_t es_geti(const void *x, int dt, int64_t i)
{
    return dt == DT_I32 ? ((const int32_t *)x)[i] : ((const int64_t *)x)[i];
}

static void es_elems(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const es_plan *p = arg;
    int isint = p->dt == DT_I32 || p->dt == DT_I64;
    int64_t total = 1;
    for (int k = 0; k < p->nsum; k++) total *= p->ssize[k];
    for (int64_t i = b; i < e; i++) {
        int64_t base[NNC_MAXIO] = {0}, rem = i;
        for (int d = p->nout - 1; d >= 0; d--) {
            int64_t v = rem % p->osize[d];
            rem /= p->osize[d];
            for (int o = 0; o < p->nops; o++) base[o] += v * p->ostr[o][d];
        }
        /* one operand and nothing summed is a copy (transpose, diagonal): start from -0.0 so
         * -0.0 is kept, as onnxruntime and numpy; sums and products start from +0.0 as theirs */
        double acc = p->nops == 1 && p->nsum == 0 ? -0.0 : 0.0;
        int64_t acci = 0;
        int64_t idx[EL] = {0}, off[NNC_MAXIO];
        for (int o = 0; o < p->nops; o++) off[o] = base[o];
        for (int64_t t = 0; t < total; t++) {
            if (isint) {
                int64_t prod = 1;
                for (int o = 0; o < p->nops; o++) prod *= es_geti(p->x[o], p->dt, off[o]);
                acci += prod;
            } else {
                double prod = 1;
                for (int o = 0; o < p->nops; o++) prod *= es_get(p->x[o], p->dt, off[o]);
                acc += prod;
            }
            for (int k = p->nsum - 1; k >= 0; k--) { /* odometer over the summed labels */
                idx[k]++;
                for (int o = 0; o < p->nops; o++) off[o] += p->sstr[o][k];
                if (idx[k] < p->ssize[k]) break;
                for (int o = 0; o < p->nops; o++) off[o] -= p->sstr[o][k] * p->ssize[k];
                idx[k] = 0;
            }
        }
        switch (p->dt) {
        case DT_F32: ((float *)p->y)[i] = (float)acc; break;
        case DT_F64: ((double *)p->y)[i] = acc; break;
        case DT_F16:
        case DT_BF16:
            nnc_store_d(p->y, p->dt, i, 1, &acc);
            break; /* summed wide, rounded once at the end */
        case DT_I32: ((int32_t *)p->y)[i] = (int32_t)(uint32_t)(uint64_t)acci; break;
        default: ((int64_t *)p->y)[i] = acci; break;
        }
    }
}

static int es_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    es_plan *p = malloc(sizeof *p);
    if (!p) return nnc_node_fail(e, n, "out of memory");
    int rc = es_resolve(n, in, p, e);
    if (rc == NNC_OK) {
        for (int o = 0; o < p->nops; o++) p->x[o] = in[o]->data;
        p->y = out->data;
        int64_t work = 1;
        for (int k = 0; k < p->nsum; k++) work *= p->ssize[k];
        int64_t empty = 0;
        for (int k = 0; k < p->nsum; k++) empty |= p->ssize[k] == 0;
        if (empty) { /* nothing to sum: zeros */
            memset(out->data, 0, nnc_nbytes(out));
        } else {
            nnc_parallel_for(nnc_numel(out), 1 + 16384 / (work * p->nops + 1), es_elems, p);
        }
    }
    free(p);
    return rc;
}

const nnc_op nnc_op_einsum = {"Einsum",  1,        NNC_MAXIO, 1,          1,
                              es_create, es_infer, es_run,    es_destroy, 0};
