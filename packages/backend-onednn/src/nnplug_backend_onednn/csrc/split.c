/* A Split whose parts are a kernel's outputs (split.h). */
#define _GNU_SOURCE
#include "split.h"

#include <stdlib.h>
#include <string.h>

struct ox_split {
    int rank, k;
    int64_t axis, at[MAXSPLIT + 1];
};

static const nnp_attr *find_attr(const nnp_node_desc *n, const char *name)
{
    return n->attrs ? nnp_find_attr(n->attrs, n->num_attrs, name) : NULL;
}

const char *ox_split_parts(const nnp_node_desc *n, int rank, const int64_t *dims, int64_t *axis,
                           int64_t *at)
{
    int k = n->num_outputs;
    if (n->num_inputs < 1 || n->num_inputs > 2 || k < 1 || k > MAXSPLIT) return "arity";
    const nnp_attr *a = find_attr(n, "axis");
    *axis = a && a->type == NNP_ATTR_INT && a->data ? *(const int64_t *)a->data : 0;
    if (*axis < 0) *axis += rank;
    if (*axis < 0 || *axis >= rank) return "axis";
    int64_t sizes[MAXSPLIT], len = dims[*axis];
    int given = 0;
    if (n->num_inputs == 2 && n->inputs[1].name && n->inputs[1].name[0]) {
        const nnp_value_desc *d = &n->inputs[1];
        if (!d->const_data || d->dtype.code != NNP_DTYPE_INT || d->dtype.bits != 64 ||
            d->const_nbytes != (uint64_t)k * 8)
            return "split must be a constant of one int64 per output";
        memcpy(sizes, d->const_data, sizeof(int64_t) * (size_t)k);
        given = 1;
    } else if ((a = find_attr(n, "split"))) {
        if (a->type != NNP_ATTR_INTS || a->count != k || !a->data)
            return "split must have one size per output";
        memcpy(sizes, a->data, sizeof(int64_t) * (size_t)k);
        given = 1;
    }
    if (!given) { /* equal parts (the last smaller, opset 18) */
        if (len < 0) return "equal parts of an axis unknown at load";
        for (int j = 0; j < k; j++) sizes[j] = (len + k - 1) / k;
        sizes[k - 1] = len - (int64_t)(k - 1) * ((len + k - 1) / k);
    }
    at[0] = 0;
    for (int j = 0; j < k; j++) {
        if (sizes[j] < 1) return "empty parts";
        at[j + 1] = at[j] + sizes[j];
    }
    if (len >= 0 && at[k] != len) return "the parts do not add up to the axis";
    return NULL;
}

static int f32(const nnp_value_desc *v)
{
    return v->dtype.code == NNP_DTYPE_FLOAT && v->dtype.bits == 32 && v->dtype.lanes <= 1;
}

ox_split *ox_split_build(const nnp_node_desc *n, int *unsupported, ox_err *e)
{
    *unsupported = 1;
    const nnp_value_desc *x = n->num_inputs > 0 ? &n->inputs[0] : NULL;
    if (!x || !x->name || !x->name[0] || x->ndim < 1 || x->ndim > MAXR || !x->shape || !f32(x))
        return ox_fail(e,
                       "node '%s' (Split): the onednn backend splits float32 tensors of known "
                       "rank 1 to %d",
                       n->name ? n->name : "", MAXR),
               NULL;
    if (x->const_data) /* kernels own their constants (abi.c): its data is NULL at run time */
        return ox_fail(e, "node '%s' (Split): a constant's parts are folded elsewhere",
                       n->name ? n->name : ""),
               NULL;
    for (int j = 0; j < n->num_outputs; j++)
        if (!n->outputs[j].name || !n->outputs[j].name[0] || !f32(&n->outputs[j]))
            return ox_fail(e, "node '%s' (Split): output %d is omitted or not float32",
                           n->name ? n->name : "", j),
                   NULL;
    ox_split *s = calloc(1, sizeof *s);
    if (!s) return ox_fail(e, "out of memory"), NULL;
    const char *why = ox_split_parts(n, x->ndim, x->shape, &s->axis, s->at);
    if (why) {
        free(s);
        return ox_fail(e, "node '%s' (Split): %s", n->name ? n->name : "", why), NULL;
    }
    *unsupported = 0;
    s->rank = x->ndim;
    s->k = n->num_outputs;
    return s;
}

void ox_split_free(ox_split *s)
{
    free(s);
}

int ox_split_outputs(const ox_split *s)
{
    return s->k;
}

/* Whether x (rank s->rank, dims xd) has the axis the parts take. */
static int check_dims(const ox_split *s, const int64_t *xd, ox_err *e)
{
    if (xd[s->axis] != s->at[s->k])
        return ox_fail(e, "Split: axis %lld has %lld elements; the parts take %lld",
                       (long long)s->axis, (long long)xd[s->axis], (long long)s->at[s->k]);
    return 0;
}

static int check_input(const ox_split *s, const nnp_tensor *in, int nin, ox_err *e)
{
    if (nin < 1 || !in || in->ndim != s->rank || (in->ndim && !in->shape) || in->strides ||
        in->dtype.code != NNP_DTYPE_FLOAT || in->dtype.bits != 32)
        return ox_fail(e, "Split: its input must be a compact float32 tensor of rank %d", s->rank);
    return check_dims(s, in->shape, e);
}

int ox_split_shapes(const ox_split *s, const int64_t *xd, int32_t *ndims, int64_t *shapes,
                    ox_err *e)
{
    if (check_dims(s, xd, e)) return 1;
    for (int j = 0; j < s->k; j++) {
        ndims[j] = s->rank; /* row j of the shapes at j * NNP_MAX_NDIM (backend.h) */
        memcpy(shapes + (size_t)j * NNP_MAX_NDIM, xd, sizeof(int64_t) * (size_t)s->rank);
        shapes[(size_t)j * NNP_MAX_NDIM + s->axis] = s->at[j + 1] - s->at[j];
    }
    return 0;
}

int ox_split_output_shapes(const ox_split *s, const nnp_tensor *in, int nin, int32_t *ndims,
                           int64_t *shapes, ox_err *e)
{
    return check_input(s, in, nin, e) || ox_split_shapes(s, in->shape, ndims, shapes, e);
}

int ox_split_copy(const ox_split *s, const float *x, const int64_t *xd, const nnp_tensor *out,
                  int nout, ox_err *e)
{
    if (check_dims(s, xd, e)) return 1;
    if (nout != s->k || !out) return ox_fail(e, "Split: %d outputs; called with %d", s->k, nout);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < s->axis; d++) outer *= xd[d];
    for (int d = (int)s->axis + 1; d < s->rank; d++) inner *= xd[d];
    for (int j = 0; j < s->k; j++) {
        const nnp_tensor *t = &out[j];
        int64_t part = s->at[j + 1] - s->at[j], n = outer * part * inner;
        int ok = !t->strides && t->dtype.code == NNP_DTYPE_FLOAT && t->dtype.bits == 32 &&
                 t->ndim == s->rank && (t->data || !n) && (!t->ndim || t->shape);
        for (int d = 0; ok && d < s->rank; d++) ok = t->shape[d] == (d == s->axis ? part : xd[d]);
        if (!ok)
            return ox_fail(e,
                           "Split: output %d must be a compact float32 tensor of its part's "
                           "shape",
                           j);
        if (!n) continue;
        const float *xs = x + s->at[j] * inner;
        float *y = (float *)((char *)t->data + t->byte_offset);
        size_t row = sizeof(float) * (size_t)(part * inner);
        for (int64_t o = 0; o < outer; o++)
            memcpy(y + o * part * inner, xs + o * s->at[s->k] * inner, row);
    }
    return 0;
}

int ox_split_run(const ox_split *s, const nnp_tensor *in, int nin, const nnp_tensor *out, int nout,
                 ox_err *e)
{
    if (check_input(s, in, nin, e)) return 1;
    return ox_split_copy(s, (const float *)((const char *)in->data + in->byte_offset), in->shape,
                         out, nout, e);
}
