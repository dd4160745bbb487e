/* Parsing a group of nodes into ops (see kernels.h). Every node is checked here, before
 * oneDNN sees it: what the backend does not handle exactly is declined so another backend
 * runs it. Then element-wise nodes, a folded BatchNormalization and a residual Add are fused
 * into the op before them as post-ops, and the ops are put in execution order. */
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "split.h"

int ox_fail(ox_err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return 1;
}

typedef struct {
    ox_graph *g;
    const nnp_node_desc *n;
    int *unsupported;
    ox_err *e;
    int cap_val;
    int allow_bool; /* the value being added may be bool (an IsNaN's result) */
    int allow_q8;   /* ... or uint8 / int8 (a QuantizeLinear's result) */
    const ox_graph *from; /* constants kept there are borrowed (ox_graph_parse_kept) */
    int64_t split_at[MAXSPLIT + 1]; /* a Split's outputs: [split_at[j], split_at[j + 1]) */
} parser;

static int decline(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int decline(parser *p, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    *p->unsupported = 1;
    return ox_fail(p->e, "node '%s' (%s) is not handled by the onednn backend: %s",
                   p->n->name ? p->n->name : "", p->n->op_type, why);
}

/* ---- attributes ------------------------------------------------------------------------- */

static const nnp_attr *attr(const nnp_node_desc *n, const char *name)
{
    return n->attrs ? nnp_find_attr(n->attrs, n->num_attrs, name) : NULL;
}

static int64_t attr_int(const nnp_node_desc *n, const char *name, int64_t def)
{
    const nnp_attr *a = attr(n, name);
    return a && a->type == NNP_ATTR_INT && a->data ? *(const int64_t *)a->data : def;
}

static float attr_float(const nnp_node_desc *n, const char *name, float def)
{
    const nnp_attr *a = attr(n, name);
    return a && a->type == NNP_ATTR_FLOAT && a->data ? *(const float *)a->data : def;
}

/* Copies an INTS attribute; its count, 0 when absent, -1 when malformed or too long. */
static int attr_ints(const nnp_node_desc *n, const char *name, int64_t *out, int max)
{
    const nnp_attr *a = attr(n, name);
    if (!a) return 0;
    if (a->type != NNP_ATTR_INTS || a->count > max || (a->count && !a->data)) return -1;
    memcpy(out, a->data, (size_t)a->count * sizeof(int64_t));
    return (int)a->count;
}

static const char *attr_str(const nnp_node_desc *n, const char *name, const char *def)
{
    const nnp_attr *a = attr(n, name);
    return a && a->type == NNP_ATTR_STRING && a->data ? (const char *)a->data : def;
}

/* ---- values ----------------------------------------------------------------------------- */

static int find_value(const ox_graph *g, const char *name)
{
    for (int i = g->nval - 1; i >= 0; i--)
        if (!strcmp(g->vals[i].name, name)) return i;
    return -1;
}

static int64_t vnumel(const ox_value *v)
{
    int64_t k = 1;
    for (int i = 0; i < v->ndim; i++) k *= v->dims[i];
    return k;
}

/* A new value from its descriptor: float32, rank 0..MAXR, dims > 0 or -1. */
static int add_value(parser *p, const nnp_value_desc *d, int *out)
{
    ox_graph *g = p->g;
    const char *nm = d->name ? d->name : "";
    int boolean = p->allow_bool && d->dtype.code == NNP_DTYPE_BOOL && d->dtype.bits == 8 &&
                  d->dtype.lanes <= 1 && !d->const_data;
    int q8 = p->allow_q8 && (d->dtype.code == NNP_DTYPE_UINT || d->dtype.code == NNP_DTYPE_INT) &&
             d->dtype.bits == 8 && d->dtype.lanes <= 1 && !d->const_data;
    if (!boolean && !q8 &&
        (d->dtype.code != NNP_DTYPE_FLOAT || d->dtype.bits != 32 || d->dtype.lanes > 1))
        return decline(p, "value '%s' is not float32", nm);
    if (d->ndim < 0) return decline(p, "value '%s' has an unknown rank", nm);
    if (d->ndim > MAXR) return decline(p, "value '%s' has rank %d (at most %d)", nm, d->ndim, MAXR);
    if (d->ndim && !d->shape)
        return ox_fail(p->e, "value '%s': malformed descriptor (no shape)", nm);
    if (g->nval == p->cap_val) {
        int cap = p->cap_val ? 2 * p->cap_val : 32;
        ox_value *nv = realloc(g->vals, (size_t)cap * sizeof *nv);
        if (!nv) return ox_fail(p->e, "out of memory");
        g->vals = nv;
        p->cap_val = cap;
    }
    ox_value *v = &g->vals[g->nval];
    memset(v, 0, sizeof *v);
    v->kin = -1;
    v->boolean = boolean;
    v->q8 = q8;
    v->ndim = d->ndim;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] == 0) return decline(p, "value '%s' is empty", nm);
        v->dims[i] = d->shape[i] < 0 ? -1 : d->shape[i];
        if (v->dims[i] < 0) g->dynamic = 1;
    }
    v->name = strdup(nm);
    if (!v->name) return ox_fail(p->e, "out of memory");
    g->nval++;
    if (d->const_data) {
        int64_t k = vnumel(v);
        if (k < 0 || (uint64_t)k * 4 != d->const_nbytes) {
            return ox_fail(p->e, "constant '%s' has %llu bytes; its shape needs %lld", nm,
                           (unsigned long long)d->const_nbytes, (long long)k * 4);
        }
        v->konst = 1;
        v->borrowed = BORROW_CALL;
        v->cdata = (float *)d->const_data; /* never written */
        int f = p->from ? find_value(p->from, nm) : -1;
        if (f >= 0 && p->from->vals[f].konst && p->from->vals[f].borrowed != BORROW_CALL &&
            p->from->vals[f].cdata && vnumel(&p->from->vals[f]) == k) {
            v->borrowed = BORROW_KERNEL;
            v->cdata = p->from->vals[f].cdata;
        }
    }
    *out = g->nval - 1;
    return 0;
}

static int known(const ox_value *v)
{
    for (int i = 0; i < v->ndim; i++)
        if (v->dims[i] < 0) return 0;
    return 1;
}

static int same_dims(const ox_value *a, const ox_value *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

/* ---- op parsers --------------------------------------------------------------------------- */

#define V(i) (&p->g->vals[op->in[i]])
#define Y (&p->g->vals[op->out])

static int parse_eltwise(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    const char *t = n->op_type;
    op->alpha = op->beta = 0.f;
    int maxin = 1;
    if (!strcmp(t, "Relu")) op->alg = dnnl_eltwise_relu;
    else if (!strcmp(t, "LeakyRelu")) {
        op->alg = dnnl_eltwise_relu;
        op->alpha = attr_float(n, "alpha", 0.01f);
    } else if (!strcmp(t, "Sigmoid")) op->alg = dnnl_eltwise_logistic;
    else if (!strcmp(t, "Tanh")) op->alg = dnnl_eltwise_tanh;
    else if (!strcmp(t, "Elu")) {
        op->alg = dnnl_eltwise_elu;
        op->alpha = attr_float(n, "alpha", 1.f);
    } else if (!strcmp(t, "Pow")) {
        /* x ** 2 (an RMS normalization's square): oneDNN's square, x * x, the exact result;
         * x ** 3 (the tanh GELU's cube): a loop of the backend's own, x * x * x as
         * onnxruntime computes it (see ox_own_eltwise) */
        maxin = 2;
        if (op->nin != 2 || op->in[1] < 0 || !V(1)->cdata || vnumel(V(1)) != 1 ||
            (V(1)->cdata[0] != 2.f && V(1)->cdata[0] != 3.f))
            return decline(p, "Pow: only a constant exponent of 2 or 3");
        op->alg = V(1)->cdata[0] == 2.f ? dnnl_eltwise_square : dnnl_eltwise_pow;
        if (op->alg == dnnl_eltwise_pow) op->alpha = 1.f, op->beta = 3.f;
    } else if (!strcmp(t, "Softplus")) op->alg = dnnl_eltwise_soft_relu; /* a loop: kernels.h */
    else if (!strcmp(t, "Abs")) op->alg = dnnl_eltwise_abs;
    else if (!strcmp(t, "Sqrt")) op->alg = dnnl_eltwise_sqrt;
    else if (!strcmp(t, "Exp")) op->alg = dnnl_eltwise_exp;
    else if (!strcmp(t, "Log")) op->alg = dnnl_eltwise_log;
    else if (!strcmp(t, "Neg")) {
        op->alg = dnnl_eltwise_linear;
        op->alpha = -1.f;
    } else if (!strcmp(t, "HardSigmoid")) {
        op->alg = dnnl_eltwise_hardsigmoid;
        op->alpha = attr_float(n, "alpha", 0.2f);
        op->beta = attr_float(n, "beta", 0.5f);
    } else if (!strcmp(t, "HardSwish")) {
        op->alg = dnnl_eltwise_hardswish;
        op->alpha = 1.f / 6.f;
        op->beta = 0.5f;
    } else if (!strcmp(t, "Clip")) {
        maxin = 3;
        op->alg = dnnl_eltwise_clip;
        /* an omitted bound is float32's lowest / largest value (ONNX; onnxruntime): +-inf
         * clips to it */
        op->alpha = -FLT_MAX;
        op->beta = FLT_MAX;
        if (n->opset > 0 && n->opset < 11) {
            op->alpha = attr_float(n, "min", -FLT_MAX);
            op->beta = attr_float(n, "max", FLT_MAX);
        } else {
            /* min and max are inputs: only constant scalars can become eltwise parameters */
            for (int i = 1; i < 3 && i < op->nin; i++) {
                if (op->in[i] < 0) continue;
                const ox_value *v = V(i);
                if (!v->cdata || !known(v) || vnumel(v) != 1)
                    return decline(p, "Clip min/max must be constant scalars");
                float x = v->cdata[0];
                if (isnan(x)) return decline(p, "Clip with a NaN bound");
                if (i == 1) op->alpha = x;
                else op->beta = x;
            }
        }
        if (op->alpha > op->beta) return decline(p, "Clip min > max");
    } else return decline(p, "op not handled");
    if (op->nin < 1 || op->nin > maxin || op->in[0] < 0) return decline(p, "arity");
    op->nin = 1; /* Clip's bounds are attributes now */
    if (!same_dims(V(0), Y)) return decline(p, "output shape differs from the input's");
    return 0;
}

/* Spatial padding: pads/auto_pad of a 2-D window op, with the right padding that gives the
 * output size wanted (ceil_mode, SAME_*). */
int ox_window(const ox_op *op, const int64_t *in, const int64_t *out, int64_t *pl, int64_t *pr,
              ox_err *e)
{
    int exact = op->kind == OP_CONV || op->incl;
    for (int i = 0; i < 2; i++) {
        int64_t span = (op->ker[i] - 1) * op->dil[i] + 1;
        int64_t total = (out[i] - 1) * op->st[i] + span - in[i];
        if (op->autopad == PAD_NOTSET) {
            pl[i] = op->pads[i];
            pr[i] = op->pads[i + 2];
        } else if (op->autopad == PAD_VALID) {
            pl[i] = pr[i] = 0;
        } else {
            if (total < 0) total = 0;
            pl[i] = op->autopad == PAD_SAME_UPPER ? total / 2 : total - total / 2;
            pr[i] = total - pl[i];
        }
        if (pl[i] < 0 || pr[i] < 0 || pl[i] >= span || pr[i] >= span)
            return ox_fail(e, "pads out of range");
        if (in[i] + pl[i] + pr[i] < span) return ox_fail(e, "window larger than the padded input");
        if ((in[i] + pl[i] + pr[i] - span) / op->st[i] + 1 != out[i]) {
            /* ceil_mode: oneDNN needs the extra right padding spelled out */
            int64_t need = total - pl[i];
            if (exact || need < pr[i] || (in[i] + pl[i] + need - span) / op->st[i] + 1 != out[i])
                return ox_fail(e, "output size %lld does not follow from input %lld",
                               (long long)out[i], (long long)in[i]);
            pr[i] = need;
        }
    }
    return 0;
}

/* Output size of a window op for a known input size (floor; ceil_mode with SAME or dynamic
 * spatial dims is declined at parse). */
static int64_t window_out(const ox_op *op, int i, int64_t in)
{
    int64_t span = (op->ker[i] - 1) * op->dil[i] + 1;
    if (op->autopad == PAD_SAME_UPPER || op->autopad == PAD_SAME_LOWER)
        return (in + op->st[i] - 1) / op->st[i];
    int64_t padded = in + (op->autopad == PAD_VALID ? 0 : op->pads[i] + op->pads[i + 2]) - span;
    if (padded < 0) return -1;
    if (op->ceil) return (padded + op->st[i] - 1) / op->st[i] + 1;
    return padded / op->st[i] + 1;
}

static int parse_window(parser *p, ox_op *op, int dilations)
{
    const nnp_node_desc *n = p->n;
    /* a 1-D window (op->line) is the W axis of a 2-D one whose H axis has size 1 */
    int sp = op->line ? 1 : 2, at = 2 - sp;
    op->st[0] = op->st[1] = op->dil[0] = op->dil[1] = 1;
    int ns = attr_ints(n, "strides", op->st + at, sp),
        nd = attr_ints(n, "dilations", op->dil + at, sp);
    if ((ns && ns != sp) || (nd && nd != sp) || op->st[0] < 1 || op->st[1] < 1 || op->dil[0] < 1 ||
        op->dil[1] < 1)
        return decline(p, "strides/dilations");
    if (!dilations && (op->dil[0] != 1 || op->dil[1] != 1)) return decline(p, "dilations");
    int64_t pads[4] = {0, 0, 0, 0};
    int np = attr_ints(n, "pads", pads, 2 * sp);
    if (np != 0 && np != 2 * sp) return decline(p, "pads");
    for (int i = 0; i < 4; i++) op->pads[i] = 0;
    for (int i = 0; i < sp; i++) {
        op->pads[at + i] = pads[i];
        op->pads[2 + at + i] = pads[sp + i];
    }
    for (int i = 0; i < 4; i++)
        if (op->pads[i] < 0) return decline(p, "negative pads");
    const char *ap = attr_str(n, "auto_pad", "NOTSET");
    if (!strcmp(ap, "NOTSET")) op->autopad = PAD_NOTSET;
    else if (!strcmp(ap, "VALID")) op->autopad = PAD_VALID;
    else if (!strcmp(ap, "SAME_UPPER")) op->autopad = PAD_SAME_UPPER;
    else if (!strcmp(ap, "SAME_LOWER")) op->autopad = PAD_SAME_LOWER;
    else return decline(p, "auto_pad %s", ap);
    int64_t xd[4], yd[4];
    ox_dims4(op, V(0)->dims, xd);
    ox_dims4(op, Y->dims, yd);
    int spatial_known = xd[2] > 0 && xd[3] > 0 && yd[2] > 0 && yd[3] > 0;
    if (op->ceil && (!spatial_known || op->autopad != PAD_NOTSET))
        return decline(p, "ceil_mode with dynamic spatial dims or auto_pad");
    if (spatial_known) {
        int64_t pl[2], pr[2];
        ox_err e2;
        if (ox_window(op, xd + 2, yd + 2, pl, pr, &e2)) return decline(p, "%s", e2.msg);
    } else
        for (int i = 0; i < 2; i++)
            if (xd[2 + i] > 0 && window_out(op, i, xd[2 + i]) < 1)
                return decline(p, "window larger than input");
    return 0;
}

/* A Conv's or ConvTranspose's kernel size: its weights' last two dims, which kernel_shape,
 * when given, must repeat. */
static int parse_kernel(parser *p, ox_op *op, const ox_value *w)
{
    int sp = op->line ? 1 : 2;
    op->ker[0] = op->line ? 1 : w->dims[2];
    op->ker[1] = w->dims[1 + sp];
    int64_t ks[2];
    int nk = attr_ints(p->n, "kernel_shape", ks, sp);
    if (nk < 0 ||
        (nk && (nk != sp || ks[sp - 1] != op->ker[1] || (sp == 2 && ks[0] != op->ker[0]))))
        return decline(p, "kernel_shape");
    return 0;
}

static int parse_conv(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    if (op->nin < 2 || op->nin > 3 || op->in[0] < 0 || op->in[1] < 0) return decline(p, "arity");
    const ox_value *x = V(0), *w = V(1), *y = Y;
    /* a 1-D convolution (audio front ends) runs as a 2-D one of height 1 (ox_dims4) */
    op->line = x->ndim == 3 && w->ndim == 3 && y->ndim == 3;
    if (!op->line && (x->ndim != 4 || w->ndim != 4 || y->ndim != 4))
        return decline(p, "only 1-D and 2-D convolutions");
    if (!w->cdata) return decline(p, "weights must be constant");
    if (op->line && w->i8) return decline(p, "int8 1-D convolutions");
    /* ONNX pads with zeros, so a weight that is not finite makes 0 * inf = NaN on the padding;
     * oneDNN's kernels skip padded taps and this backend's Winograd spreads such a weight over
     * whole tiles, so the cpu backend, which follows the definition, runs these */
    if (!ox_all_finite(w->cdata, vnumel(w))) return decline(p, "a weight is infinite or NaN");
    int64_t C = x->dims[1], OC = w->dims[0];
    op->group = attr_int(n, "group", 1);
    if (C < 0) return decline(p, "channel count unknown at load");
    if (op->group < 1 || C % op->group || OC % op->group || w->dims[1] != C / op->group ||
        (y->dims[1] >= 0 && y->dims[1] != OC) ||
        (y->dims[0] >= 0 && x->dims[0] >= 0 && y->dims[0] != x->dims[0]))
        return decline(p, "channels and group do not match");
    if (parse_kernel(p, op, w)) return 1;
    if (op->nin == 3 && op->in[2] >= 0) {
        const ox_value *b = V(2);
        if (b->ndim != 1 || b->dims[0] != OC) return decline(p, "bias shape");
    }
    if (parse_window(p, op, 1)) return 1;
    op->oc = OC;
    if (op->line) { /* (OC, C / group, 1, kw): the same bytes */
        int64_t wd[4] = {w->dims[0], w->dims[1], 1, w->dims[2]};
        memcpy(op->wdims, wd, sizeof op->wdims);
    } else memcpy(op->wdims, w->dims, sizeof op->wdims);
    size_t nw = (size_t)vnumel(w);
    op->w = w->cdata; /* shared until a fold writes to it (own_weights) */
    op->wshared = 1;
    if (w->i8) {
        op->w8 = malloc(nw);
        op->wscale = malloc((size_t)w->ni8scale * sizeof(float));
        if (!op->w8 || !op->wscale) return ox_fail(p->e, "out of memory");
        memcpy(op->w8, w->i8, nw);
        memcpy(op->wscale, w->i8scale, (size_t)w->ni8scale * sizeof(float));
        op->nwscale = w->ni8scale;
    }
    if (op->nin == 3 && op->in[2] >= 0 && V(2)->cdata) {
        op->b = malloc((size_t)OC * sizeof(float));
        if (!op->b) return ox_fail(p->e, "out of memory");
        memcpy(op->b, V(2)->cdata, (size_t)OC * sizeof(float));
    }
    return 0;
}

/* ConvTranspose's output size along spatial axis i for input size in (ONNX's formula, with
 * explicit pads). */
static int64_t deconv_out(const ox_op *op, int i, int64_t in)
{
    return op->st[i] * (in - 1) + op->outpad[i] + (op->ker[i] - 1) * op->dil[i] + 1 - op->pads[i] -
           op->pads[i + 2];
}

/* ConvTranspose: 2-D, constant finite weights (C, OC / group, kh, kw), explicit pads (or
 * VALID), no output_shape; output_padding within the end pads, as oneDNN's deconvolution
 * crops its result by the pads (its right padding is the end pad less the output padding). */
static int parse_deconv(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    if (op->nin < 2 || op->nin > 3 || op->in[0] < 0 || op->in[1] < 0) return decline(p, "arity");
    const ox_value *x = V(0), *w = V(1), *y = Y;
    if (x->ndim != 4 || w->ndim != 4 || y->ndim != 4) return decline(p, "only 2-D ConvTranspose");
    if (!w->cdata || w->i8) return decline(p, "weights must be constant float32");
    if (!ox_all_finite(w->cdata, vnumel(w))) return decline(p, "a weight is infinite or NaN");
    int64_t C = x->dims[1];
    op->group = attr_int(n, "group", 1);
    if (C < 0) return decline(p, "channel count unknown at load");
    if (op->group < 1 || C % op->group || w->dims[0] != C) return decline(p, "channels and group");
    int64_t OC = w->dims[1] * op->group;
    if ((y->dims[1] >= 0 && y->dims[1] != OC) ||
        (y->dims[0] >= 0 && x->dims[0] >= 0 && y->dims[0] != x->dims[0]))
        return decline(p, "output channels");
    if (parse_kernel(p, op, w)) return 1;
    if (op->nin == 3 && op->in[2] >= 0 && (V(2)->ndim != 1 || V(2)->dims[0] != OC))
        return decline(p, "bias shape");
    int64_t shape[2];
    if (attr_ints(n, "output_shape", shape, 2)) return decline(p, "output_shape");
    const char *ap = attr_str(n, "auto_pad", "NOTSET");
    int valid = !strcmp(ap, "VALID");
    if (!valid && strcmp(ap, "NOTSET")) return decline(p, "auto_pad %s", ap);
    op->st[0] = op->st[1] = op->dil[0] = op->dil[1] = 1;
    int ns = attr_ints(n, "strides", op->st, 2), nd = attr_ints(n, "dilations", op->dil, 2);
    int np = valid ? 0 : attr_ints(n, "pads", op->pads, 4);
    int no = attr_ints(n, "output_padding", op->outpad, 2);
    if ((ns && ns != 2) || (nd && nd != 2) || (np && np != 4) || (no && no != 2))
        return decline(p, "strides, dilations, pads or output_padding");
    for (int i = 0; i < 2; i++)
        if (op->st[i] < 1 || op->dil[i] < 1 || op->pads[i] < 0 || op->pads[i + 2] < 0 ||
            op->outpad[i] < 0 || op->outpad[i] > op->pads[i + 2] ||
            (op->outpad[i] >= op->st[i] && op->outpad[i] >= op->dil[i]))
            return decline(p, "strides, dilations, pads or output_padding out of range");
    for (int i = 0; i < 2; i++)
        if (x->dims[2 + i] > 0 && y->dims[2 + i] >= 0 &&
            deconv_out(op, i, x->dims[2 + i]) != y->dims[2 + i])
            return decline(p, "output size does not follow from the input's");
    op->oc = OC;
    memcpy(op->wdims, w->dims, sizeof op->wdims);
    return 0;
}

static int parse_pool(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    const char *t = n->op_type;
    op->global = !strncmp(t, "Global", 6);
    op->maxpool = strstr(t, "Max") != NULL;
    if (op->nin != 1 || op->in[0] < 0) return decline(p, "arity");
    const ox_value *x = V(0), *y = Y;
    if (x->ndim != 4 || y->ndim != 4) return decline(p, "only 2-D pools");
    if (x->dims[1] < 0 || y->dims[1] != x->dims[1]) return decline(p, "channels");
    if (op->global) {
        if (y->dims[2] != 1 || y->dims[3] != 1) return decline(p, "output size");
        return 0;
    }
    if (attr_ints(n, "kernel_shape", op->ker, 2) != 2 || op->ker[0] < 1 || op->ker[1] < 1)
        return decline(p, "kernel_shape");
    if (attr_int(n, "storage_order", 0) != 0) return decline(p, "storage_order");
    op->ceil = attr_int(n, "ceil_mode", 0) != 0;
    op->incl = !op->maxpool && attr_int(n, "count_include_pad", 0) != 0;
    return parse_window(p, op, op->maxpool);
}

static int parse_softmax(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    op->logsm = !strcmp(n->op_type, "LogSoftmax");
    if (op->nin != 1 || op->in[0] < 0) return decline(p, "arity");
    const ox_value *x = V(0);
    if (x->ndim < 1 || !same_dims(x, Y)) return decline(p, "shapes");
    int64_t axis = attr_int(n, "axis", n->opset > 0 && n->opset < 13 ? 1 : -1);
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim) return decline(p, "axis");
    /* before opset 13 the input is flattened to 2-D at axis: one axis only when the axes after
     * it have one element each */
    int ones_after = 1;
    for (int i = (int)axis + 1; i < x->ndim; i++) ones_after &= x->dims[i] == 1;
    if (n->opset > 0 && n->opset < 13 && !ones_after)
        return decline(p, "opset < 13 with elements after the axis");
    op->axis = axis;
    return 0;
}

/* 1 when v, right-aligned to y's rank, has y's dims; 0 when it broadcasts to them; -1 neither
 * (-1 dims match only -1 dims). */
static int fits(const ox_value *v, const ox_value *y)
{
    if (v->ndim > y->ndim) return -1;
    int full = v->ndim == y->ndim;
    for (int i = 0; i < v->ndim; i++) {
        int64_t d = v->dims[i], want = y->dims[i + y->ndim - v->ndim];
        if (d != want && d != 1) return -1;
        if (d != want) full = 0;
    }
    return full;
}

static int parse_binary(parser *p, ox_op *op)
{
    const char *t = p->n->op_type;
    op->commutes = 1;
    if (!strcmp(t, "Add")) op->alg = dnnl_binary_add;
    else if (!strcmp(t, "Mul")) op->alg = dnnl_binary_mul;
    else if (!strcmp(t, "Max") || !strcmp(t, "Min"))
        /* oneDNN's binary max and min, and its max post-op, drop a NaN in the first operand;
         * onnxruntime and the ONNX reference keep it */
        return decline(p, "oneDNN's max and min drop a NaN; another backend runs it");
    else if (!strcmp(t, "Sub")) {
        op->alg = dnnl_binary_sub;
        op->commutes = 0;
    } else if (!strcmp(t, "Div")) {
        op->alg = dnnl_binary_div;
        op->commutes = 0;
    } else if (!strcmp(t, "Sum") && op->nin == 2)
        op->alg = dnnl_binary_add; /* a residual, in exported ResNets */
    else return decline(p, "op not handled (Sum: two inputs only)");
    if (op->nin != 2 || op->in[0] < 0 || op->in[1] < 0) return decline(p, "two inputs");
    if (Y->ndim < 1) return decline(p, "rank-0 output");
    int f0 = fits(V(0), Y), f1 = fits(V(1), Y);
    if (f0 < 0 || f1 < 0) return decline(p, "broadcast");
    if (f0 != 1 && (!op->commutes || f1 != 1))
        return decline(p, "the first input must have the output's shape");
    return 0;
}

static int parse_concat(parser *p, ox_op *op)
{
    const ox_value *y = Y;
    if (op->nin < 1 || op->nin > MAXIN || y->ndim < 1) return decline(p, "arity");
    int64_t axis = attr_int(p->n, "axis", 1);
    if (axis < 0) axis += y->ndim;
    if (axis < 0 || axis >= y->ndim) return decline(p, "axis");
    for (int i = 0; i < op->nin; i++) {
        if (op->in[i] < 0) return decline(p, "omitted input");
        const ox_value *v = V(i);
        if (v->ndim != y->ndim) return decline(p, "ranks differ");
        for (int d = 0; d < y->ndim; d++)
            if (d != axis && v->dims[d] != y->dims[d]) return decline(p, "shapes");
    }
    op->axis = axis;
    return 0;
}

/* Resize of a 4-D value over its spatial axes, where oneDNN's resampling maps an output
 * position to the same source coordinate as ONNX: linear with half_pixel (pytorch_half_pixel
 * too, which differs only for an output axis of one element), to any size; nearest by
 * integer factors, asymmetric with floor, or half_pixel or pytorch_half_pixel with either
 * round_prefer mode (an integer upscale meets no tie there; oneDNN rounds half away from
 * zero). The sizes, or the scales (then integers), are constants; roi is read by
 * tf_crop_and_resize only, which is declined. */
static int parse_resize(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    if (n->opset > 0 && n->opset < 11) return decline(p, "opset < 11 (attributes)");
    if (op->in[0] < 0 || n->num_inputs < 2 || n->num_inputs > 4) return decline(p, "arity");
    const ox_value *x = V(0), *y = Y;
    if (x->ndim != 4 || y->ndim != 4) return decline(p, "only 4-D values");
    if (attr_int(n, "antialias", 0) || attr(n, "axes") ||
        strcmp(attr_str(n, "keep_aspect_ratio_policy", "stretch"), "stretch"))
        return decline(p, "antialias, axes and keep_aspect_ratio_policy");
    const char *mode = attr_str(n, "mode", "nearest"),
               *ct = attr_str(n, "coordinate_transformation_mode", "half_pixel"),
               *nm = attr_str(n, "nearest_mode", "round_prefer_floor");
    int half = !strcmp(ct, "half_pixel"), pyhalf = !strcmp(ct, "pytorch_half_pixel");
    int nearest = !strcmp(mode, "nearest");
    if (!strcmp(mode, "linear") && (half || pyhalf)) op->alg = dnnl_resampling_linear;
    else if (nearest && ((!strcmp(ct, "asymmetric") && !strcmp(nm, "floor")) ||
                         ((half || pyhalf) && !strncmp(nm, "round_prefer_", 13))))
        op->alg = dnnl_resampling_nearest;
    else
        return decline(p, "mode '%s' with coordinate_transformation_mode '%s'%s%s", mode, ct,
                       nearest ? " and nearest_mode " : "", nearest ? nm : "");
    const nnp_value_desc *sc = NULL, *sz = NULL;
    for (int j = 2; j < n->num_inputs; j++) {
        const nnp_value_desc *d = &n->inputs[j];
        if (!d->name[0] || (d->ndim == 1 && d->shape && d->shape[0] == 0)) continue; /* none */
        if (!d->const_data) return decline(p, "its scales and sizes must be constants");
        if (j == 2) sc = d;
        else sz = d;
    }
    if (!sc == !sz) return decline(p, "scales or sizes, one of them");
    for (int i = 0; i < 4 && sz; i++)
        if (x->dims[i] < 0) return decline(p, "sizes for an input with dims known at run time");
    if (sz) {
        if (sz->dtype.code != NNP_DTYPE_INT || sz->dtype.bits != 64 || sz->const_nbytes != 32)
            return decline(p, "sizes: 4 int64 values");
        const int64_t *s = sz->const_data;
        if (s[0] != x->dims[0] || s[1] != x->dims[1])
            return decline(p, "a batch or channel resize");
        for (int i = 0; i < 2; i++) {
            if (s[2 + i] < 1) return decline(p, "sizes below 1");
            if (nearest && s[2 + i] % x->dims[2 + i]) return decline(p, "nearest by a fraction");
            if (pyhalf && s[2 + i] == 1 && x->dims[2 + i] > 1)
                return decline(p, "pytorch_half_pixel to one element");
            op->rsize[i] = s[2 + i];
        }
    } else {
        if (sc->dtype.code != NNP_DTYPE_FLOAT || sc->dtype.bits != 32 || sc->const_nbytes != 16)
            return decline(p, "scales: 4 float32 values");
        const float *s = sc->const_data;
        if (s[0] != 1.f || s[1] != 1.f) return decline(p, "a batch or channel resize");
        for (int i = 0; i < 2; i++) {
            if (!(s[2 + i] >= 1.f && s[2 + i] <= 1024.f && s[2 + i] == (float)(int)s[2 + i]))
                return decline(p, "scales other than whole factors");
            op->rscale[i] = (int64_t)s[2 + i];
        }
    }
    for (int i = 0; i < 2; i++) {
        int64_t want = op->rsize[i] ? op->rsize[i] : x->dims[2 + i] * op->rscale[i];
        if (y->dims[2 + i] >= 0 && x->dims[2 + i] >= 0 && y->dims[2 + i] != want)
            return decline(p, "its declared output size");
    }
    op->nin = 1;
    return 0;
}

static int parse_lrn(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    if (op->nin != 1 || op->in[0] < 0) return decline(p, "arity");
    op->size = attr_int(n, "size", 0);
    if (V(0)->ndim != 4 || !same_dims(V(0), Y) || op->size < 1 || op->size % 2 == 0)
        return decline(p, "4-D, odd size");
    op->alpha = attr_float(n, "alpha", 1e-4f);
    op->beta = attr_float(n, "beta", 0.75f);
    op->lrn_bias = attr_float(n, "bias", 1.f);
    return 0;
}

static int parse_bn(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    if (op->nin != 5 || n->num_outputs != 1 || attr_int(n, "training_mode", 0) != 0)
        return decline(p, "inference mode only");
    if (n->opset > 0 && n->opset < 9) return decline(p, "opset < 9");
    const ox_value *x = V(0);
    if (x->ndim < 2 || x->ndim > 5 || !same_dims(x, Y) || x->dims[1] < 0)
        return decline(p, "shapes");
    for (int i = 1; i < 5; i++)
        if (op->in[i] < 0 || V(i)->ndim != 1 || V(i)->dims[0] != x->dims[1])
            return decline(p, "parameters");
    op->eps = attr_float(n, "epsilon", 1e-5f);
    return 0;
}

/* Slice along one axis with step 1, its starts, ends, axes and steps constants of one element
 * (opset 10 and later): a view of its input (plan_view.c). ShuffleNet splits each block's
 * channels so; on the CPU backend each split cost a reorder out of oneDNN's layout and back. */
static int parse_slice(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    if (n->opset > 0 && n->opset < 10) return decline(p, "opset < 10 (attributes)");
    if (op->in[0] < 0 || n->num_inputs < 3 || n->num_inputs > 5) return decline(p, "arity");
    const ox_value *x = V(0);
    int64_t v[4] = {0, 0, 0, 1}; /* start, end, axis (omitted: 0), step (omitted: 1) */
    for (int j = 1; j < n->num_inputs; j++) {
        const nnp_value_desc *d = &n->inputs[j];
        if (!d->name[0]) continue;
        int b = d->dtype.bits;
        if (!d->const_data || d->dtype.code != NNP_DTYPE_INT || (b != 64 && b != 32) ||
            d->const_nbytes != (uint64_t)b / 8)
            return decline(p, "starts, ends, axes and steps must be constants of one element");
        v[j - 1] = b == 64 ? *(const int64_t *)d->const_data : *(const int32_t *)d->const_data;
    }
    if (v[2] < 0) v[2] += x->ndim;
    if (v[2] < 0 || v[2] >= x->ndim) return decline(p, "axis");
    if (v[3] != 1) return decline(p, "steps other than 1");
    op->start = v[0];
    op->end = v[1];
    op->axis = v[2];
    op->nin = 1;
    return 0;
}

/* Split along one axis into up to MAXSPLIT parts, their sizes a constant input (opset 13 and
 * later), the attribute `split` (before) or equal (the axis known): each part a Slice, a view
 * of the input (plan_view.c), made by split_outputs. GPT-2's attention splits its Q, K and V
 * so; on the CPU backend the Split cut the layer's partition in two. A graph never ends at
 * a Split (it has one output): a group's last Split runs after it (split.h, kernels.c). */
static int parse_split(parser *p, ox_op *op)
{
    if (op->in[0] < 0) return decline(p, "arity");
    const ox_value *x = V(0);
    const char *why = ox_split_parts(p->n, x->ndim, x->dims, &op->axis, p->split_at);
    if (why) return decline(p, "%s", why);
    op->start = 0;
    op->end = p->split_at[1];
    op->nin = 1;
    return 0;
}

/* A Split's outputs after its first (parse_split): a Slice op each, at ops[at], ... */
static int split_outputs(parser *p, const ox_op *op, int at)
{
    ox_graph *g = p->g;
    for (int j = 1; j < p->n->num_outputs; j++) {
        ox_op *o = &g->ops[at + j - 1];
        *o = *op;
        o->name = strdup(op->name);
        o->op_type = strdup(op->op_type);
        if (!o->name || !o->op_type) return ox_fail(p->e, "out of memory");
        o->start = p->split_at[j];
        o->end = p->split_at[j + 1];
        if (add_value(p, &p->n->outputs[j], &o->out)) return 1;
        g->vals[o->in[0]].consumers++;
    }
    return 0;
}

/* ReduceMean over the last axis only (axes an attribute before opset 18, a constant input
 * from it; keepdims either way: the result's bytes are the same). */
static int parse_reduce_mean(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    if (op->in[0] < 0 || n->num_inputs > 2 || n->num_outputs != 1) return decline(p, "arity");
    const ox_value *x = V(0);
    int64_t axes[1];
    if (n->num_inputs == 2 && n->inputs[1].name[0]) {
        const nnp_value_desc *d = &n->inputs[1];
        if (!d->const_data || d->dtype.code != NNP_DTYPE_INT || d->dtype.bits != 64 ||
            d->const_nbytes != 8)
            return decline(p, "axes must be a constant of one element");
        axes[0] = *(const int64_t *)d->const_data;
    } else if (attr_ints(n, "axes", axes, 1) != 1)
        return decline(p, "only a reduction over one axis, the last");
    if (axes[0] < 0) axes[0] += x->ndim;
    if (x->ndim < 1 || axes[0] != x->ndim - 1) return decline(p, "only the last axis");
    if (x->dims[x->ndim - 1] < 1) return decline(p, "the reduced axis must be known and not empty");
    const ox_value *y = Y;
    int keep = y->ndim == x->ndim;
    if (!keep && y->ndim != x->ndim - 1) return decline(p, "shapes");
    for (int i = 0; i < x->ndim - 1; i++)
        if (y->dims[i] != x->dims[i]) return decline(p, "shapes");
    if (keep && y->dims[x->ndim - 1] != 1) return decline(p, "shapes");
    op->axis = axes[0];
    op->nin = 1;
    return 0;
}

/* InstanceNormalization (plan_norm.c build_in): each image's and channel's own statistics. */
static int parse_in(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    if (op->nin != 3 || n->num_outputs != 1 || op->in[0] < 0 || op->in[1] < 0 || op->in[2] < 0)
        return decline(p, "arity");
    const ox_value *x = V(0);
    if (x->ndim < 3 || x->ndim > 5 || !same_dims(x, Y) || x->dims[1] < 0)
        return decline(p, "shapes");
    for (int i = 1; i < 3; i++)
        if (V(i)->ndim != 1 || V(i)->dims[0] != x->dims[1]) return decline(p, "parameters");
    op->eps = attr_float(n, "epsilon", 1e-5f);
    return 0;
}

/* LayerNormalization over the axes from `axis` on: the backend's own loop over the input seen
 * as (outer, inner) rows (plan_norm.c); Scale and B must have exactly the normalised shape. */
static int parse_ln(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    if (op->nin < 2 || op->nin > 3 || op->in[0] < 0 || op->in[1] < 0) return decline(p, "arity");
    const ox_value *x = V(0);
    if (x->ndim < 1 || !same_dims(x, Y)) return decline(p, "shapes");
    int64_t axis = attr_int(n, "axis", -1);
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim) return decline(p, "axis");
    int64_t inner = 1;
    for (int i = (int)axis; i < x->ndim; i++) {
        if (x->dims[i] < 0) return decline(p, "normalised dimensions unknown at load");
        inner *= x->dims[i];
    }
    for (int j = 1; j < op->nin; j++) {
        if (op->in[j] < 0) continue;
        const ox_value *v = V(j);
        if (v->ndim > x->ndim - axis || vnumel(v) != inner)
            return decline(p, "Scale and B must have the normalised shape (no broadcasting)");
        for (int i = 0; i < v->ndim; i++)
            if (v->dims[i] != x->dims[x->ndim - v->ndim + i])
                return decline(p, "Scale and B must have the normalised shape (no broadcasting)");
    }
    op->axis = axis;
    op->size = inner;
    op->eps = attr_float(n, "epsilon", 1e-5f);
    return 0;
}

static int parse_matmul(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    op->gemm = n->op_type[0] == 'G';
    if (op->nin < 2 || op->nin > (op->gemm ? 3 : 2) || op->in[0] < 0 || op->in[1] < 0)
        return decline(p, "arity");
    const ox_value *a = V(0), *w = V(1), *y = Y;
    const ox_value *c = op->gemm && op->nin == 3 && op->in[2] >= 0 ? V(2) : NULL;
    int r = y->ndim;
    if (op->gemm) {
        op->ta = attr_int(n, "transA", 0) != 0;
        op->tb = attr_int(n, "transB", 0) != 0;
        if (a->ndim != 2 || w->ndim != 2 || r != 2) return decline(p, "Gemm ranks");
        if (attr_float(n, "alpha", 1.f) != 1.f || (c && attr_float(n, "beta", 1.f) != 1.f))
            return decline(p, "Gemm alpha/beta");
        if (c && c->ndim > 2) return decline(p, "Gemm C rank");
    } else if (a->ndim < 2 || w->ndim < 2 || r < 2 ||
               r != (a->ndim > w->ndim ? a->ndim : w->ndim)) {
        return decline(p, "rank-1 operands");
    }
    int64_t K = op->ta ? a->dims[a->ndim - 2] : a->dims[a->ndim - 1];
    int64_t K2 = op->tb ? w->dims[w->ndim - 1] : w->dims[w->ndim - 2];
    if (K < 0 || K2 < 0 || K != K2) return decline(p, "inner dimensions");
    if (K == 0) return decline(p, "an empty inner dimension (the product is its bias alone)");
    if (c)
        for (int i = 0; i < c->ndim; i++) {
            int64_t want = y->dims[2 - c->ndim + i];
            if (c->dims[i] != 1 && c->dims[i] != want) return decline(p, "Gemm C shape");
        }
    /* a constant C with one value per column (or one value) is the bias of a packed-weights
     * primitive (see plan.c); other C are the matmul's bias operand */
    int64_t N = y->dims[1];
    if (c && c->cdata && N > 0 && (c->ndim < 2 || c->dims[0] == 1)) {
        int perc = vnumel(c) == N && N > 1;
        op->b = malloc((size_t)N * sizeof(float));
        if (!op->b) return ox_fail(p->e, "out of memory");
        for (int64_t o = 0; o < N; o++) op->b[o] = c->cdata[perc ? o : 0];
        op->nin = 2;
    }
    return 0;
}

#undef V
#undef Y

/* ---- the group ---------------------------------------------------------------------------- */

/* A QuantizeLinear or DequantizeLinear's zero point, a constant uint8 / int8 scalar, into
 * op->qzp[0] (qs8: its type); an omitted one is a uint8 0. Only as a pair (see fake_quant). */
static int q8_scalar(parser *p, ox_op *op, const nnp_value_desc *vd)
{
    int s8 = vd->dtype.code == NNP_DTYPE_INT;
    if (!vd->const_data || vd->const_nbytes != 1 || vd->dtype.bits != 8 ||
        (vd->dtype.code != NNP_DTYPE_UINT && !s8))
        return decline(p, "the zero point must be a constant uint8 or int8 scalar");
    op->qzp[0] = s8 ? *(const int8_t *)vd->const_data : *(const uint8_t *)vd->const_data;
    op->qs8 = s8;
    return 0;
}

/* QuantizeLinear (float32 -> uint8 / int8) or DequantizeLinear (back), per tensor: a constant
 * float32 scalar scale. Only as QuantizeLinear -> DequantizeLinear (see fake_quant). */
static int parse_qdq(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    int quant = n->op_type[0] == 'Q';
    op->kind = quant ? OP_QUANT : OP_DEQUANT;
    if (op->nin < 2 || op->nin > 3 || op->in[0] < 0 || op->in[1] < 0) return decline(p, "arity");
    const ox_value *sc = &p->g->vals[op->in[1]], *x = &p->g->vals[op->in[0]],
                   *y = &p->g->vals[op->out];
    if (!sc->cdata || !known(sc) || vnumel(sc) != 1)
        return decline(p, "only a per-tensor quantization (a constant scalar scale)");
    if (attr_int(n, "block_size", 0) != 0) return decline(p, "block_size");
    int64_t prec = attr_int(n, "precision", 0);
    if (prec != 0 && prec != 1) return decline(p, "precision other than float32");
    if (x->boolean || (quant ? x->q8 || !y->q8 : !x->q8 || y->q8))
        return decline(p, "only float32 -> uint8 / int8 -> float32");
    int s8 = (quant ? n->outputs[0] : n->inputs[0]).dtype.code == NNP_DTYPE_INT;
    if (n->num_inputs > 2 && n->inputs[2].name[0] && op->qs8 != s8)
        return decline(p, "the zero point's type differs from the integer value's");
    op->qs8 = s8;
    op->qscale[0] = sc->cdata[0];
    if (!same_dims(x, y)) return decline(p, "output shape differs from the input's");
    return 0;
}

static int parse_node(parser *p, ox_op *op)
{
    const char *t = p->n->op_type;
    if (!strcmp(t, "Conv")) {
        op->kind = OP_CONV;
        return parse_conv(p, op);
    }
    if (!strcmp(t, "ConvTranspose")) {
        op->kind = OP_DECONV;
        return parse_deconv(p, op);
    }
    if (!strcmp(t, "Gemm") || !strcmp(t, "MatMul")) {
        op->kind = OP_MATMUL;
        return parse_matmul(p, op);
    }
    if (!strcmp(t, "MaxPool") || !strcmp(t, "AveragePool") || !strcmp(t, "GlobalAveragePool") ||
        !strcmp(t, "GlobalMaxPool")) {
        op->kind = OP_POOL;
        return parse_pool(p, op);
    }
    if (!strcmp(t, "Softmax") || !strcmp(t, "LogSoftmax")) {
        op->kind = OP_SOFTMAX;
        return parse_softmax(p, op);
    }
    if (!strcmp(t, "Concat")) {
        op->kind = OP_CONCAT;
        return parse_concat(p, op);
    }
    if (!strcmp(t, "Resize")) {
        op->kind = OP_RESIZE;
        return parse_resize(p, op);
    }
    if (!strcmp(t, "LRN")) {
        op->kind = OP_LRN;
        return parse_lrn(p, op);
    }
    if (!strcmp(t, "BatchNormalization")) {
        op->kind = OP_BN;
        return parse_bn(p, op);
    }
    if (!strcmp(t, "InstanceNormalization")) {
        op->kind = OP_IN;
        return parse_in(p, op);
    }
    if (!strcmp(t, "LayerNormalization")) {
        op->kind = OP_LN;
        return parse_ln(p, op);
    }
    if (!strcmp(t, "Reshape") || !strcmp(t, "Flatten")) {
        /* a new shape over the same row-major bytes: the output's dims known at load, or from a
         * constant shape (0: the input's dim, -1: the rest) and the input's dims at run time */
        const ox_value *x = &p->g->vals[op->in[0]], *y = &p->g->vals[op->out];
        op->kind = OP_RESHAPE;
        if (op->in[0] < 0 || op->nin > 2) return decline(p, "arity");
        if (!strcmp(t, "Flatten")) {
            int64_t axis = attr_int(p->n, "axis", 1);
            if (axis < 0) axis += x->ndim;
            if (y->ndim != 2 || axis < 0 || axis > x->ndim) return decline(p, "axis");
            op->axis = axis;
            op->size = 2; /* Flatten: (prod dims[:axis], prod dims[axis:]) */
        } else if (op->nin == 2) {
            const nnp_value_desc *sd = &p->n->inputs[1];
            if (sd->const_data && sd->dtype.code == NNP_DTYPE_INT && sd->dtype.bits == 64 &&
                sd->ndim == 1 && sd->shape && sd->shape[0] == y->ndim && y->ndim <= MAXR &&
                sd->const_nbytes == (uint64_t)y->ndim * 8) {
                memcpy(op->perm, sd->const_data, (size_t)y->ndim * 8);
                int minus = 0;
                for (int i = 0; i < y->ndim; i++) {
                    if (op->perm[i] < -1 || (op->perm[i] == 0 && attr_int(p->n, "allowzero", 0)))
                        return decline(p, "shape");
                    if (op->perm[i] == 0 && i >= x->ndim) return decline(p, "shape");
                    minus += op->perm[i] == -1;
                }
                if (minus > 1) return decline(p, "shape");
                op->size = 1;
            }
        }
        if (!op->size && !known(y))
            return decline(p, "the output's dims must be known at load, or the shape constant");
        if (known(x) && known(y) && vnumel(x) != vnumel(y))
            return decline(p, "element counts differ");
        op->nin = 1;
        return 0;
    }
    if (!strcmp(t, "Slice")) {
        op->kind = OP_SLICE;
        return parse_slice(p, op);
    }
    if (!strcmp(t, "Split")) {
        op->kind = OP_SLICE;
        return parse_split(p, op);
    }
    if (!strcmp(t, "Transpose")) {
        const ox_value *x = &p->g->vals[op->in[0]], *y = &p->g->vals[op->out];
        op->kind = OP_TRANSPOSE;
        if (op->nin != 1 || op->in[0] < 0 || x->ndim < 1 || x->ndim != y->ndim)
            return decline(p, "arity");
        int np = attr_ints(p->n, "perm", op->perm, MAXR);
        if (np < 0 || (np && np != x->ndim)) return decline(p, "perm");
        int seen[MAXR] = {0};
        for (int i = 0; i < x->ndim; i++) {
            if (!np) op->perm[i] = x->ndim - 1 - i;
            if (op->perm[i] < 0 || op->perm[i] >= x->ndim || seen[op->perm[i]]++)
                return decline(p, "perm is not a permutation");
            if (y->dims[i] >= 0 && x->dims[op->perm[i]] >= 0 && y->dims[i] != x->dims[op->perm[i]])
                return decline(p, "shapes");
        }
        return 0;
    }
    if (!strcmp(t, "Identity") || !strcmp(t, "Dropout") ||
        (!strcmp(t, "Cast") && attr_int(p->n, "to", 0) == 1)) {
        /* inference Dropout passes its input through, as does a Cast of a float32 value (every
         * value here is) to float32 (T5's normalizations): a view of it, as a Transpose that
         * moves no axis */
        const ox_value *x = &p->g->vals[op->in[0]], *y = &p->g->vals[op->out];
        op->kind = OP_TRANSPOSE;
        if (op->in[0] < 0 || (t[0] != 'D' && op->nin != 1) || op->nin > 3 || !same_dims(x, y))
            return decline(p, "arity");
        if (t[0] == 'D') {
            if (p->n->opset > 0 && p->n->opset < 7) return decline(p, "opset < 7 (is_test)");
            const nnp_value_desc *tm = op->nin == 3 ? &p->n->inputs[2] : NULL;
            if (tm && tm->name[0] &&
                !(tm->const_data && tm->const_nbytes == 1 && !*(const uint8_t *)tm->const_data))
                return decline(p, "training_mode must be omitted or a constant false");
        }
        for (int i = 0; i < x->ndim; i++) op->perm[i] = i;
        op->nin = 1;
        return 0;
    }
    if (!strcmp(t, "IsNaN") ||
        !strcmp(t, "Where")) { /* only as Where(IsNaN(x), C, x): see nan_replace */
        const ox_value *y = &p->g->vals[op->out];
        op->kind = t[0] == 'I' ? OP_ISNAN : OP_WHERE;
        if (op->nin != (op->kind == OP_ISNAN ? 1 : 3)) return decline(p, "arity");
        for (int j = 0; j < op->nin; j++)
            if (op->in[j] < 0 || p->g->vals[op->in[j]].boolean != (op->kind == OP_WHERE && j == 0))
                return decline(p, "only Where(IsNaN(x), C, x) on float32 values");
        if (!same_dims(&p->g->vals[op->in[op->nin - 1]], y))
            return decline(p, "output shape differs from the input's");
        return 0;
    }
    if (!strcmp(t, "QuantizeLinear") || !strcmp(t, "DequantizeLinear")) return parse_qdq(p, op);
    if (!strcmp(
            t, "Erf")) { /* oneDNN has erf only inside gelu_erf: a loop of its own when not fused */
        op->kind = OP_ERF;
        if (op->nin != 1 || op->in[0] < 0) return decline(p, "arity");
        if (!same_dims(&p->g->vals[op->in[0]], &p->g->vals[op->out]))
            return decline(p, "output shape differs from the input's");
        return 0;
    }
    const ox_value *c = op->nin == 2 && op->in[0] >= 0 ? &p->g->vals[op->in[0]] : NULL;
    if (!strcmp(t, "Div") && c && op->in[1] >= 0 && c->cdata && vnumel(c) == 1 &&
        c->ndim <= p->g->vals[op->out].ndim &&
        same_dims(&p->g->vals[op->in[1]], &p->g->vals[op->out])) {
        /* a constant divided by the value (Div(1, Sqrt(...)) of an exported rsqrt): a loop of
         * the backend's own (see ox_own_eltwise) */
        op->kind = OP_ELTWISE;
        op->alg = dnnl_eltwise_pow;
        op->alpha = c->cdata[0];
        op->beta = 0.f;
        p->g->vals[op->in[0]].consumers--;
        op->in[0] = op->in[1];
        op->in[1] = -1;
        op->nin = 1;
        return 0;
    }
    if (!strcmp(t, "ReduceMean")) {
        op->kind = OP_REDMEAN;
        return parse_reduce_mean(p, op);
    }
    if (!strcmp(t, "Add") || !strcmp(t, "Mul") || !strcmp(t, "Sub") || !strcmp(t, "Div") ||
        !strcmp(t, "Max") || !strcmp(t, "Min") || !strcmp(t, "Sum")) {
        op->kind = OP_BINARY;
        return parse_binary(p, op);
    }
    op->kind = OP_ELTWISE;
    return parse_eltwise(p, op);
}

void ox_graph_free(ox_graph *g)
{
    if (!g) return;
    for (int i = 0; i < g->nval; i++) {
        free(g->vals[i].name);
        if (!g->vals[i].borrowed) free(g->vals[i].cdata);
        free(g->vals[i].i8);
        free(g->vals[i].i8scale);
    }
    for (int i = 0; i < g->nop; i++) {
        free(g->ops[i].name);
        free(g->ops[i].op_type);
        if (!g->ops[i].wshared) free(g->ops[i].w);
        free(g->ops[i].b);
        free(g->ops[i].w8);
        free(g->ops[i].wscale);
    }
    free(g->vals);
    free(g->ops);
    free(g->kin_val);
    free(g->order);
    free(g);
}

/* The single live op reading value v, or -1. */
static int sole_consumer(const ox_graph *g, int v)
{
    if (v == g->out || g->vals[v].consumers != 1) return -1;
    for (int i = 0; i < g->nop; i++) {
        const ox_op *o = &g->ops[i];
        if (o->dead) continue;
        for (int j = 0; j < o->nin; j++)
            if (o->in[j] == v) return i;
    }
    return -1;
}

/* Fold an inference BatchNormalization with constant parameters into the Conv before it. */
/* Whether bn's scale, shift, mean and variance are all constants. */
static int bn_params_const(const ox_graph *g, const ox_op *bn)
{
    for (int i = 1; i < 5; i++)
        if (!g->vals[bn->in[i]].cdata) return 0;
    return 1;
}

/* Channel c's factor of a BatchNormalization with constant parameters: scale / sqrt(var + eps). */
static double bn_factor(const ox_graph *g, const ox_op *bn, int64_t c)
{
    return g->vals[bn->in[1]].cdata[c] / sqrt((double)g->vals[bn->in[4]].cdata[c] + bn->eps);
}

/* A Conv whose float weights a fold changes runs in float: its int8 ones no longer match. */
static void drop_int8(ox_op *conv)
{
    free(conv->w8);
    free(conv->wscale);
    conv->w8 = NULL;
    conv->wscale = NULL;
}

/* A Conv's weights copied for a fold to write: 0 when they could not be. */
static int own_weights(ox_graph *g, ox_op *conv)
{
    if (!conv->wshared) return 1;
    size_t n = (size_t)vnumel(&g->vals[conv->in[1]]);
    float *w = malloc(n * sizeof(float));
    if (!w) return 0;
    memcpy(w, conv->w, n * sizeof(float));
    conv->w = w;
    conv->wshared = 0;
    return 1;
}

static int fold_bn(ox_graph *g, ox_op *conv, const ox_op *bn)
{
    if (conv->npost || (conv->nin == 3 && conv->in[2] >= 0 && !conv->b) ||
        !bn_params_const(g, bn) || !own_weights(g, conv))
        return 0;
    int64_t OC = conv->oc, per = conv->wdims[1] * conv->wdims[2] * conv->wdims[3];
    if (!conv->b) {
        conv->b = calloc((size_t)OC, sizeof(float));
        if (!conv->b) return 0;
    }
    drop_int8(conv);
    const float *sh = g->vals[bn->in[2]].cdata, *mu = g->vals[bn->in[3]].cdata;
    /* y = (conv(x) + bias - mean) * s + shift with s = scale / sqrt(var + eps), per channel */
    for (int64_t o = 0; o < OC; o++) {
        double f = bn_factor(g, bn, o);
        for (int64_t i = 0; i < per; i++) conv->w[o * per + i] = (float)(conv->w[o * per + i] * f);
        conv->b[o] = (float)((conv->b[o] - mu[o]) * f + sh[o]);
    }
    return 1;
}

/* A BatchNormalization whose parameters are constants as one multiply-add per channel,
 * y = x * s + t with s = scale / sqrt(var + eps) and t = shift - mean * s (op->w = s, op->b = t):
 * run as one binary primitive in its input's layout (oneDNN's own batch normalization
 * falls back to plain layout and a slow kernel for some channel counts), which also takes any
 * element-wise post-op. Left as it is when a parameter is a run-time input. */
static void bn_affine(ox_graph *g, ox_op *bn)
{
    if (!bn_params_const(g, bn)) return;
    int64_t C = g->vals[bn->in[1]].dims[0];
    float *s = malloc((size_t)C * sizeof(float)), *t = malloc((size_t)C * sizeof(float));
    if (!s || !t) {
        free(s);
        free(t);
        return;
    }
    const float *sh = g->vals[bn->in[2]].cdata, *mu = g->vals[bn->in[3]].cdata;
    for (int64_t c = 0; c < C; c++) {
        double f = bn_factor(g, bn, c);
        s[c] = (float)f;
        t[c] = (float)(sh[c] - mu[c] * f);
    }
    bn->w = s;
    bn->b = t;
    bn->oc = C;
}

/* The constant that Mul or Add nx applies to value v when it is one value per channel of C
 * (axis 1 of a rank-r value; or one value), else NULL; *perc: one value per channel. */
static const float *channel_const(const ox_graph *g, const ox_op *nx, int v, int64_t C, int *perc)
{
    if (nx->kind != OP_BINARY || (nx->alg != dnnl_binary_mul && nx->alg != dnnl_binary_add))
        return NULL;
    int other = nx->in[0] == v ? nx->in[1] : nx->in[0];
    const ox_value *c = &g->vals[other];
    int r = g->vals[v].ndim;
    if (other == v || !c->cdata || c->ndim > r || !same_dims(&g->vals[nx->out], &g->vals[v]))
        return NULL;
    for (int i = 0; i < c->ndim; i++) { /* right-aligned to (N, C, ...): 1 everywhere but C */
        int axis = r - c->ndim + i;
        if (c->dims[i] != 1 && !(axis == 1 && c->dims[i] == C)) return NULL;
    }
    *perc = vnumel(c) == C && C > 1;
    return c->cdata;
}

/* Fold a Mul or Add of the Conv's output by a constant that is one value per output channel
 * (or one value) into its weights and bias: BatchNormalization exported as Mul+Add. */
static int fold_channel(ox_graph *g, ox_op *conv, const ox_op *nx)
{
    if (conv->npost || (conv->nin == 3 && conv->in[2] >= 0 && !conv->b)) return 0;
    int64_t OC = conv->oc, per = conv->wdims[1] * conv->wdims[2] * conv->wdims[3];
    int perc;
    const float *c = channel_const(g, nx, conv->out, OC, &perc);
    if (!c || g->vals[conv->out].ndim > 4) return 0;
    if (nx->alg == dnnl_binary_mul && !own_weights(g, conv)) return 0;
    if (!conv->b) {
        conv->b = calloc((size_t)OC, sizeof(float));
        if (!conv->b) return 0;
    }
    if (nx->alg == dnnl_binary_mul) drop_int8(conv);
    for (int64_t o = 0; o < OC; o++) {
        float s = c[perc ? o : 0];
        if (nx->alg == dnnl_binary_add) {
            conv->b[o] += s;
            continue;
        }
        for (int64_t i = 0; i < per; i++) conv->w[o * per + i] *= s;
        conv->b[o] *= s;
    }
    return 1;
}

/* Fold a Mul or Add by a constant of one value per channel into the per-channel multiply-add
 * of a BatchNormalization (bn_affine; its own scales and shifts): Caffe2's DenseNet follows
 * each BatchNormalization with a Mul and an Add so, three binary steps where one does. */
static int fold_affine(ox_graph *g, ox_op *bn, const ox_op *nx)
{
    int perc;
    const float *c = bn->npost ? NULL : channel_const(g, nx, bn->out, bn->oc, &perc);
    if (!c) return 0;
    for (int64_t o = 0; o < bn->oc; o++) {
        float s = c[perc ? o : 0];
        if (nx->alg == dnnl_binary_mul) bn->w[o] *= s;
        bn->b[o] = nx->alg == dnnl_binary_mul ? bn->b[o] * s : bn->b[o] + s;
    }
    return 1;
}

/* Fold an Add of a constant bias, one value per output column (or one value), into a MatMul /
 * Gemm with constant weights that has no bias yet: the bias of its primitive. */
static int fold_matmul_bias(ox_graph *g, ox_op *mm, const ox_op *nx)
{
    if (mm->npost || mm->b || (mm->nin == 3 && mm->in[2] >= 0) || !g->vals[mm->in[1]].cdata)
        return 0;
    if (nx->kind != OP_BINARY || nx->alg != dnnl_binary_add) return 0;
    int other = nx->in[0] == mm->out ? nx->in[1] : nx->in[0];
    const ox_value *c = &g->vals[other], *y = &g->vals[mm->out];
    if (other == mm->out || !c->cdata || !same_dims(&g->vals[nx->out], y) ||
        y->dims[y->ndim - 1] < 1)
        return 0;
    int64_t N = y->dims[y->ndim - 1];
    for (int i = 0; i < c->ndim; i++)
        if (c->dims[i] != 1 && !(i == c->ndim - 1 && c->dims[i] == N)) return 0;
    int perc = vnumel(c) == N && N > 1;
    mm->b = malloc((size_t)N * sizeof(float));
    if (!mm->b) return 0;
    for (int64_t o = 0; o < N; o++) mm->b[o] = c->cdata[perc ? o : 0];
    return 1;
}

/* Op o gone: its inputs read once less. */
static void drop(ox_graph *g, ox_op *o)
{
    for (int j = 0; j < o->nin; j++)
        if (o->in[j] >= 0) g->vals[o->in[j]].consumers--;
    o->dead = 1;
}

static void absorb(ox_graph *g, ox_op *op, ox_op *next)
{
    drop(g, next);
    op->out = next->out;
    op->pos = next->pos;
}

/* Whether value c is a constant scalar (any rank, one element) equal to want within rel. */
static int const_is(const ox_graph *g, int c, double want, double rel)
{
    const ox_value *v = &g->vals[c];
    return v->cdata && known(v) && vnumel(v) == 1 && fabs(v->cdata[0] - want) <= rel * fabs(want);
}

/* The other operand of binary op o (alg) reading value v, or -1 when o is not that. */
static int binary_with(const ox_graph *g, int o, int v, dnnl_alg_kind_t alg, int first_only)
{
    if (o < 0) return -1;
    const ox_op *x = &g->ops[o];
    if (x->kind != OP_BINARY || x->alg != alg || x->nin != 2) return -1;
    if (x->in[0] == v && x->in[1] != v) return x->in[1];
    if (!first_only && x->in[1] == v && x->in[0] != v) return x->in[0];
    return -1;
}

/* The exact GELU as exported from PyTorch, on value x read by nothing else:
 * Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5), or as its dynamo exporter writes it,
 * Mul(x, Mul(Add(Erf(Div(x, sqrt 2)), 1), 0.5)) (Div may be Mul by 1/sqrt 2; the Muls' operands
 * either way round). Fills chain[5] with the ops in order; 1 when found. */
static int gelu_chain(const ox_graph *g, int x, int *chain)
{
    if (x == g->out || g->vals[x].consumers != 2) return 0;
    int d = -1, m = -1;
    for (int i = 0; i < g->nop; i++) {
        const ox_op *o = &g->ops[i];
        if (o->dead) continue;
        int c = binary_with(g, i, x, dnnl_binary_div, 1);
        if (c >= 0 && const_is(g, c, 1.4142135623730951, 1e-6)) {
            d = i;
            continue;
        }
        c = binary_with(g, i, x, dnnl_binary_mul, 0);
        if (c >= 0 && const_is(g, c, 0.7071067811865476, 1e-6)) {
            d = i;
            continue;
        }
        if (c >= 0) m = i;
    }
    if (d < 0 || m < 0) return 0;
    int e = sole_consumer(g, g->ops[d].out);
    if (e < 0 || g->ops[e].kind != OP_ERF) return 0;
    int a = sole_consumer(g, g->ops[e].out);
    int one = binary_with(g, a, g->ops[e].out, dnnl_binary_add, 0);
    if (one < 0 || !const_is(g, one, 1.0, 0.0)) return 0;
    int h = sole_consumer(g, g->ops[a].out), seq[5] = {d, e, a, m, -1};
    if (h == m) { /* x * (erf + 1), then * 0.5 (the TorchScript exporter) */
        if (binary_with(g, m, x, dnnl_binary_mul, 0) != g->ops[a].out) return 0;
        seq[4] = h = sole_consumer(g, g->ops[m].out);
        int half = binary_with(g, h, g->ops[m].out, dnnl_binary_mul, 0);
        if (half < 0 || !const_is(g, half, 0.5, 0.0)) return 0;
    } else { /* (erf + 1) * 0.5, then x * that (the dynamo exporter) */
        int half = binary_with(g, h, g->ops[a].out, dnnl_binary_mul, 0);
        if (half < 0 || !const_is(g, half, 0.5, 0.0) ||
            binary_with(g, m, x, dnnl_binary_mul, 0) != g->ops[h].out ||
            sole_consumer(g, g->ops[h].out) != m)
            return 0;
        seq[3] = h;
        seq[4] = m;
    }
    /* every operand must have x's shape (no broadcasting hides in the pattern) */
    for (int i = 0; i < 5; i++)
        if (!same_dims(&g->vals[g->ops[seq[i]].out], &g->vals[x])) return 0;
    memcpy(chain, seq, sizeof seq);
    return 1;
}

/* The tanh GELU as exported from PyTorch (Hugging Face's gelu_new: GPT-2), on value x read by
 * the chain alone: Mul(Mul(x, 0.5), Add(Tanh(Mul(Add(x, Mul(Pow(x, 3), 0.044715)),
 * sqrt(2 / pi))), 1)), the operands of each either way round. Fills chain[8] with the ops in
 * order; 1 when found. */
static int gelu_tanh_chain(const ox_graph *g, int x, int *chain)
{
    if (x == g->out || g->vals[x].consumers != 3) return 0;
    int h = -1, p = -1, a = -1, c;
    for (int i = 0; i < g->nop; i++) {
        const ox_op *o = &g->ops[i];
        if (o->dead) continue;
        if (o->kind == OP_ELTWISE && o->alg == dnnl_eltwise_pow && o->beta == 3.f && o->in[0] == x)
            p = i;
        else if ((c = binary_with(g, i, x, dnnl_binary_mul, 0)) >= 0 && const_is(g, c, 0.5, 0.0))
            h = i;
        else if (binary_with(g, i, x, dnnl_binary_add, 0) >= 0) a = i;
    }
    if (h < 0 || p < 0 || a < 0) return 0;
    int p3 = sole_consumer(g, g->ops[p].out);
    if ((c = binary_with(g, p3, g->ops[p].out, dnnl_binary_mul, 0)) < 0 ||
        !const_is(g, c, 0.044715, 1e-6) ||
        binary_with(g, a, x, dnnl_binary_add, 0) != g->ops[p3].out)
        return 0;
    int s = sole_consumer(g, g->ops[a].out);
    if ((c = binary_with(g, s, g->ops[a].out, dnnl_binary_mul, 0)) < 0 ||
        !const_is(g, c, 0.7978845608028654, 1e-6))
        return 0;
    int t = sole_consumer(g, g->ops[s].out);
    if (t < 0 || g->ops[t].kind != OP_ELTWISE || g->ops[t].alg != dnnl_eltwise_tanh) return 0;
    int t1 = sole_consumer(g, g->ops[t].out);
    if ((c = binary_with(g, t1, g->ops[t].out, dnnl_binary_add, 0)) < 0 ||
        !const_is(g, c, 1.0, 0.0))
        return 0;
    int m = sole_consumer(g, g->ops[t1].out);
    if (binary_with(g, m, g->ops[t1].out, dnnl_binary_mul, 0) != g->ops[h].out ||
        sole_consumer(g, g->ops[h].out) != m)
        return 0;
    int seq[8] = {h, p, p3, a, s, t, t1, m};
    for (int i = 0; i < 8; i++) /* no broadcasting hides in the pattern */
        if (!same_dims(&g->vals[g->ops[seq[i]].out], &g->vals[x])) return 0;
    memcpy(chain, seq, sizeof seq);
    return 1;
}

/* SiLU / swish as exported: Mul(x, Sigmoid(x)) (either order), x read by nothing else. Fills
 * chain[2]; 1 when found. */
static int swish_chain(const ox_graph *g, int x, int *chain)
{
    if (x == g->out || g->vals[x].consumers != 2) return 0;
    int sg = -1;
    for (int i = 0; i < g->nop && sg < 0; i++) {
        const ox_op *o = &g->ops[i];
        if (!o->dead && o->kind == OP_ELTWISE && o->alg == dnnl_eltwise_logistic && o->in[0] == x)
            sg = i;
    }
    if (sg < 0) return 0;
    int m = sole_consumer(g, g->ops[sg].out);
    if (binary_with(g, m, x, dnnl_binary_mul, 0) != g->ops[sg].out) return 0;
    if (!same_dims(&g->vals[g->ops[m].out], &g->vals[x])) return 0;
    chain[0] = sg;
    chain[1] = m;
    return 1;
}

/* Each value read by attention ops alone, as their mask (an attention mask of -inf:
 * Where(mask, 0, -inf) in newer PyTorch exports), marked (ox_value.masks_scores). */
static void masks_only(ox_graph *g)
{
    int *uses = calloc((size_t)g->nval, sizeof *uses);
    if (!uses) return; /* none marked: a strict plan for any infinity, as before */
    for (int i = 0; i < g->nop; i++) {
        const ox_op *o = &g->ops[i];
        if (o->dead || o->kind != OP_ATTENTION || o->nin < 4) continue;
        int other = 0;
        for (int j = 0; j < 3; j++) other |= o->in[j] == o->in[3];
        if (!other) uses[o->in[3]]++;
    }
    for (int v = 0; v < g->nval; v++)
        g->vals[v].masks_scores = v != g->out && uses[v] && uses[v] == g->vals[v].consumers;
    free(uses);
}

/* Each exported GELU (gelu_chain, gelu_tanh_chain) as one element-wise op of oneDNN's
 * gelu_erf or gelu_tanh, which fuse makes a post-op where an op before it takes post-ops and
 * which runs as oneDNN's eltwise primitive elsewhere (after a GroupNorm: wav2vec2's first
 * convolution layer, whose five ops took 14 ms with the scalar Erf loop). Not in a strict
 * graph (see strict_differs). */
static void gelus(ox_graph *g)
{
    for (int x = 0; x < g->nval; x++) {
        int chain[8], n = 0;
        dnnl_alg_kind_t alg = dnnl_eltwise_gelu_erf;
        if (gelu_chain(g, x, chain)) n = 5;
        else if (gelu_tanh_chain(g, x, chain)) n = 8, alg = dnnl_eltwise_gelu_tanh;
        if (!n) continue;
        ox_op *e = &g->ops[chain[0]]; /* it reads x: the GELU's op */
        for (int j = 0; j < e->nin; j++)
            if (e->in[j] >= 0 && e->in[j] != x) g->vals[e->in[j]].consumers--;
        e->kind = OP_ELTWISE;
        e->alg = alg;
        e->alpha = e->beta = 0.f;
        e->nin = 1;
        e->in[0] = x;
        for (int k = 1; k < n; k++) absorb(g, e, &g->ops[chain[k]]);
    }
}

/* Whether value c is a constant of one element, or of n along the last of rank r's axes. */
static int last_axis_const(const ox_graph *g, int c, int64_t n, int r)
{
    const ox_value *v = &g->vals[c];
    if (!v->cdata || !known(v) || vnumel(v) != n || v->ndim > r) return 0;
    for (int i = 0; i + 1 < v->ndim; i++)
        if (v->dims[i] != 1) return 0;
    return !v->ndim || v->dims[v->ndim - 1] == n;
}

/* RMS normalization as T5's and Llama's exports write it: Pow(x, 2) (oneDNN's square),
 * ReduceMean over the last axis, Add of eps, Sqrt, then Mul(x, Div(c, .)) or Div(x, .), then
 * [Mul by a weight along the last axis], each result read by the next alone: as one OP_RMS,
 * which computes each step's float32 in the same order, the mean's sum in double as the
 * ReduceMean's loop does (the same bits). Seven steps a layer were five primitives and two
 * loops (T5-small's 13: 0.9 ms of a 6 ms run at 2 threads). */
static void rms_norms(ox_graph *g)
{
    for (int i = 0; i < g->nop; i++) {
        ox_op *sq = &g->ops[i];
        if (sq->dead || sq->kind != OP_ELTWISE || sq->alg != dnnl_eltwise_square) continue;
        int x = sq->in[0], r = g->vals[x].ndim;
        int64_t len = r ? g->vals[x].dims[r - 1] : -1;
        if (len < 1) continue;
        int m = sole_consumer(g, sq->out);
        if (m < 0 || g->ops[m].kind != OP_REDMEAN) continue;
        int a = sole_consumer(g, g->ops[m].out);
        int eps = binary_with(g, a, g->ops[m].out, dnnl_binary_add, 0);
        if (eps < 0 || !last_axis_const(g, eps, 1, r)) continue;
        int s = sole_consumer(g, g->ops[a].out);
        if (s < 0 || g->ops[s].kind != OP_ELTWISE || g->ops[s].alg != dnnl_eltwise_sqrt) continue;
        int q = sole_consumer(g, g->ops[s].out), y = -1, chain[6] = {m, a, s, -1, -1, -1};
        float c = 1.f, divide = 0.f;
        if (q >= 0 && g->ops[q].kind == OP_ELTWISE && g->ops[q].alg == dnnl_eltwise_pow &&
            g->ops[q].beta == 0.f) { /* c / sqrt (graph.c parse_node's Div of a constant) */
            c = g->ops[q].alpha;
            y = sole_consumer(g, g->ops[q].out);
            if (binary_with(g, y, g->ops[q].out, dnnl_binary_mul, 0) != x) continue;
            chain[3] = q;
            chain[4] = y;
        } else if (q >= 0 && g->ops[q].kind == OP_BINARY && g->ops[q].alg == dnnl_binary_div &&
                   g->ops[q].in[0] == x && g->ops[q].in[1] == g->ops[s].out) {
            y = q; /* x / sqrt */
            divide = 1.f;
            chain[3] = q;
        } else continue;
        if (!same_dims(&g->vals[g->ops[y].out], &g->vals[x])) continue;
        int z = sole_consumer(g, g->ops[y].out),
            w = binary_with(g, z, g->ops[y].out, dnnl_binary_mul, 0);
        if (w >= 0 &&
            (!last_axis_const(g, w, len, r) || !same_dims(&g->vals[g->ops[z].out], &g->vals[x])))
            w = -1;
        if (w >= 0) chain[divide ? 4 : 5] = z;
        /* the square's op, whole again as the normalization */
        sq->kind = OP_RMS;
        sq->eps = g->vals[eps].cdata[0];
        sq->alpha = c;
        sq->beta = divide;
        for (int k = 0; k < 6; k++)
            if (chain[k] >= 0) absorb(g, sq, &g->ops[chain[k]]);
        sq->nin = 2;
        sq->in[1] = w;
        if (w >= 0) g->vals[w].consumers++;
    }
}

/* Whether element-wise op e may be a post-op: oneDNN's eltwise, and Clip (MobileNet's ReLU6)
 * outside a strict graph; the backend's other own loops are not. */
static int fusable_eltwise(const ox_op *e, int strict)
{
    return (!strict && e->alg == dnnl_eltwise_clip) || !ox_own_eltwise(e->alg);
}

/* The element-wise op that alone reads the end of a chain of Reshapes and Transposes starting
 * at op r (each its input's sole reader), when it may be a post-op of the op before the chain
 * (any element-wise op commutes with a view): its index, *last the chain's last view and *q
 * the post-op; else -1. A Mul by a constant scalar is the post-op linear(c, -0), c * x + (-0),
 * which is c * x for every x, -0 included (torch's attention export scales Q and K so, after
 * their heads' Reshape and Transpose). */
/* Whether el multiplies v (and nothing else of v's size) by a constant scalar c: then it is the
 * post-op linear(c, -0), c * x + -0 = c * x for every x, -0 included. */
static int scalar_mul(const ox_graph *g, const ox_op *el, int v, ox_post *q)
{
    if (el->kind != OP_BINARY || el->alg != dnnl_binary_mul || el->nin != 2 ||
        (el->in[0] == v) == (el->in[1] == v) || !same_dims(&g->vals[el->out], &g->vals[v]))
        return 0;
    const ox_value *c = &g->vals[el->in[el->in[0] == v]];
    if (!c->cdata || !known(c) || vnumel(c) != 1) return 0;
    *q = (ox_post){POST_ELTWISE, dnnl_eltwise_linear, c->cdata[0], -0.f, -1};
    return 1;
}

static int viewed_eltwise(const ox_graph *g, int r, int strict, int *last, ox_post *q)
{
    if (g->ops[r].kind != OP_RESHAPE && g->ops[r].kind != OP_TRANSPOSE) return -1;
    int e = sole_consumer(g, g->ops[r].out);
    while (e >= 0 && (g->ops[e].kind == OP_RESHAPE || g->ops[e].kind == OP_TRANSPOSE)) {
        r = e;
        e = sole_consumer(g, g->ops[r].out);
    }
    if (e < 0) return -1;
    const ox_op *el = &g->ops[e];
    int v = g->ops[r].out;
    *last = r;
    if (el->kind == OP_ELTWISE && el->in[0] == v && fusable_eltwise(el, strict)) {
        *q = (ox_post){POST_ELTWISE, el->alg, el->alpha, el->beta, -1};
        return e;
    }
    return scalar_mul(g, el, v, q) ? e : -1;
}

/* Post-op fusion: each op that takes post-ops absorbs the chain of ops that alone read its
 * output: element-wise ops (an exported GELU among them: see gelus), also behind a Reshape,
 * SiLU (Sigmoid, Mul: one swish), a BatchNormalization (into a Conv's weights), a bias Add
 * (into a MatMul's bias), and for a Conv or MatMul the residual Add of a value of the same
 * shape (a `sum` post-op; the op then runs where the Add was, after both operands exist). */
/* A BatchNormalization left to oneDNN's own primitive (a parameter given at run time): it
 * takes no post-op, so a Relu after it is a step of its own (its fuse_norm_relu flag is
 * oneDNN's relu, which a strict graph must not use; see plan_steps.c strict_relu); bn_affine's
 * multiply-add takes any post-op. */
static int bn_primitive(const ox_op *op)
{
    return op->kind == OP_BN && !op->w;
}

/* Whether op runs otherwise in a strict graph, where a NaN or an infinity can reach it: a Relu
 * (oneDNN's relu is max(x, 0), which drops a NaN; see plan_steps.c strict_relu), a fused Clip (its
 * clip too), a GELU (oneDNN's gelu_erf gives NaN for +inf, where x * 0.5 * (1 + erf) is +inf;
 * the strict graph runs the exported ops one by one; the same for gelu_tanh), a max pooling, an
 * LRN and a linear Resize (see strict.h), and a convolution that may run as Winograd
 * (ox_winograd_shape). */
static int strict_differs(const ox_op *op)
{
    int n = (op->kind == OP_ELTWISE &&
             (ox_is_relu(op->alg, op->alpha) || op->alg == dnnl_eltwise_gelu_erf ||
              op->alg == dnnl_eltwise_gelu_tanh)) ||
            (op->kind == OP_POOL && op->maxpool) || op->kind == OP_LRN || ox_winograd_shape(op) ||
            (op->kind == OP_RESIZE && op->alg == dnnl_resampling_linear);
    for (int i = 0; i < op->npost; i++) {
        const ox_post *q = &op->post[i];
        n |= q->kind == POST_ELTWISE &&
             (q->alg == dnnl_eltwise_clip || q->alg == dnnl_eltwise_gelu_erf ||
              q->alg == dnnl_eltwise_gelu_tanh || ox_is_relu(q->alg, q->alpha));
    }
    return n;
}

static void fuse(ox_graph *g, int strict)
{
    for (int i = 0; i < g->nop; i++) {
        ox_op *op = &g->ops[i];
        if (op->dead || (op->kind != OP_CONV && op->kind != OP_MATMUL && op->kind != OP_BINARY &&
                         op->kind != OP_BN && op->kind != OP_DECONV))
            continue;
        if (op->kind == OP_BN) bn_affine(g, op); /* not folded into a Conv before it */
        int has_sum = 0;
        for (;;) {
            int chain[2];
            if (!bn_primitive(op) && op->npost < MAXPOST && swish_chain(g, op->out, chain)) {
                op->post[op->npost++] = (ox_post){POST_ELTWISE, dnnl_eltwise_swish, 1.f, 0.f, -1};
                for (int k = 0; k < 2; k++) absorb(g, op, &g->ops[chain[k]]);
                continue;
            }
            /* an element-wise op behind views (GPT-2's Conv1D: a Gemm, a Reshape, its GELU;
             * BERT's scaled Q: a MatMul, Reshape, Transpose, Mul): a post-op on the op's own
             * shape, the views giving its result */
            int j = sole_consumer(g, op->out), last = -1;
            ox_post q;
            int e = j >= 0 && !bn_primitive(op) ? viewed_eltwise(g, j, strict, &last, &q) : -1;
            if (e >= 0 && op->npost < MAXPOST) {
                op->post[op->npost++] = q;
                drop(g, &g->ops[e]);
                g->ops[last].out = g->ops[e].out;
                continue;
            }
            if (j < 0) break;
            ox_op *nx = &g->ops[j];
            if (bn_primitive(op)) break;
            if (op->kind == OP_CONV &&
                ((nx->kind == OP_BN && nx->in[0] == op->out && fold_bn(g, op, nx)) ||
                 fold_channel(g, op, nx))) {
                absorb(g, op, nx);
                continue;
            }
            if (op->kind == OP_BN && op->w && fold_affine(g, op, nx)) {
                absorb(g, op, nx);
                continue;
            }
            if (op->kind == OP_MATMUL && fold_matmul_bias(g, op, nx)) {
                absorb(g, op, nx);
                continue;
            }
            if (op->npost >= MAXPOST) break;
            if (nx->kind == OP_ELTWISE && nx->in[0] == op->out && fusable_eltwise(nx, strict)) {
                op->post[op->npost++] = (ox_post){POST_ELTWISE, nx->alg, nx->alpha, nx->beta, -1};
                absorb(g, op, nx);
                continue;
            }
            /* a scale right after it (Whisper's and BART's q_proj, after its bias) */
            if (scalar_mul(g, nx, op->out, &q)) {
                op->post[op->npost++] = q;
                absorb(g, op, nx);
                continue;
            }
            if ((op->kind == OP_CONV || op->kind == OP_MATMUL) && !has_sum &&
                nx->kind == OP_BINARY && nx->alg == dnnl_binary_add) {
                int other = nx->in[0] == op->out ? nx->in[1] : nx->in[0];
                if (other == op->out || !same_dims(&g->vals[other], &g->vals[op->out]) ||
                    !same_dims(&g->vals[nx->out], &g->vals[op->out]))
                    break;
                op->post[op->npost++] = (ox_post){POST_SUM, dnnl_alg_kind_undef, 1.f, 0.f, other};
                g->vals[other].consumers++; /* now read by op */
                absorb(g, op, nx);
                has_sum = 1;
                continue;
            }
            break;
        }
    }
}

/* PyTorch's export of attention, p = Softmax(s); y = Where(IsNaN(p), 0.0, p), as one op:
 * Where(IsNaN(x), C, x) with C a constant float32 scalar (any rank, one element) and the
 * IsNaN's result read by that Where alone becomes OP_NANREP, y = isnan(x) ? C : x, so the bool
 * value never exists in the kernel. Any other IsNaN or Where is declined (the backend holds
 * float32 values only), and another backend runs it. */
static int nan_replace(parser *p, const nnp_node_desc *nodes)
{
    ox_graph *g = p->g;
    for (int i = 0; i < g->nop; i++) {
        ox_op *w = &g->ops[i];
        if (w->dead || w->kind != OP_WHERE) continue;
        p->n = &nodes[i];
        int k = -1;
        for (int j = 0; j < g->nop && k < 0; j++)
            if (!g->ops[j].dead && g->ops[j].kind == OP_ISNAN && g->ops[j].out == w->in[0]) k = j;
        if (k < 0)
            return decline(
                p,
                "the condition must be an IsNaN in the same kernel (only Where(IsNaN(x), C, x))");
        ox_op *isn = &g->ops[k];
        const ox_value *c = &g->vals[w->in[1]];
        if (isn->in[0] != w->in[2])
            return decline(p, "only Where(IsNaN(x), C, x): the IsNaN reads another value");
        if (!c->cdata || !known(c) || vnumel(c) != 1)
            return decline(p, "only Where(IsNaN(x), C, x) with C a constant scalar");
        if (sole_consumer(g, isn->out) != i)
            return decline(p, "the IsNaN's result is read elsewhere too");
        w->alpha = c->cdata[0];
        g->vals[w->in[0]].consumers--;
        g->vals[w->in[1]].consumers--;
        w->in[0] = w->in[2];
        w->nin = 1;
        w->kind = OP_NANREP;
        g->vals[isn->in[0]].consumers--;
        isn->dead = 1;
    }
    for (int i = 0; i < g->nop; i++)
        if (!g->ops[i].dead && g->ops[i].kind == OP_ISNAN) {
            p->n = &nodes[i];
            return decline(
                p,
                "its bool result is not only the condition of a Where(IsNaN(x), C, x) in the same kernel");
        }
    return 0;
}

/* Whether op is a MatMul of two values as they are (no Gemm, no transposition, nothing folded
 * into it): a product an attention may hold. */
static int bare_matmul(const ox_op *op)
{
    return !op->dead && op->kind == OP_MATMUL && !op->gemm && !op->ta && !op->tb && !op->b &&
           !op->npost && op->nin == 2;
}

/* Scaled dot-product attention as exported (the scale is applied to Q and K^T before it):
 * MatMul(Q, K^T) -> [Add(mask)] -> Softmax(last axis) -> [Where(IsNaN(p), C, p)] ->
 * MatMul(p, V), each result read by the next alone, becomes one OP_ATTENTION whose inputs are
 * Q, K^T, V and the mask. plan_attention.c runs it a block of query rows at a time, so the
 * scores never leave the cache (Whisper's encoder writes and reads 54 MB of them a layer
 * otherwise); the ops stay whole in sub[] for a plan that runs them one by one. Run before
 * fuse, which would take the Add as a residual sum. Room for the new ops was allocated with
 * the graph (parse). */
static void attention(ox_graph *g)
{
    int nop = g->nop;
    for (int i = 0; i < nop; i++) {
        if (!bare_matmul(&g->ops[i])) continue;
        int r = g->vals[g->ops[i].out].ndim, v = g->ops[i].out, j = sole_consumer(g, v), mask;
        int sub[ATT_NSUB] = {i, -1, -1, -1, -1};
        if ((mask = binary_with(g, j, v, dnnl_binary_add, 0)) >= 0) {
            /* the mask broadcasts to the scores (rank and dims as the model declares them) */
            if (g->vals[mask].ndim > r || !same_dims(&g->vals[g->ops[j].out], &g->vals[v]))
                continue;
            sub[ATT_MASK] = j;
            v = g->ops[j].out;
            j = sole_consumer(g, v);
        }
        if (j < 0 || g->ops[j].kind != OP_SOFTMAX || g->ops[j].logsm || g->ops[j].axis != r - 1)
            continue;
        sub[ATT_SOFTMAX] = j;
        v = g->ops[j].out;
        j = sole_consumer(g, v);
        if (j >= 0 && g->ops[j].kind == OP_NANREP) {
            sub[ATT_NANREP] = j;
            v = g->ops[j].out;
            j = sole_consumer(g, v);
        }
        if (j < 0 || !bare_matmul(&g->ops[j]) || g->ops[j].in[0] != v ||
            g->vals[g->ops[j].out].ndim != r)
            continue;
        sub[ATT_VALUES] = j;
        ox_op *a = &g->ops[g->nop], *qk = &g->ops[i], *pv = &g->ops[j];
        a->name = strdup(qk->name);
        a->op_type = strdup("Attention");
        g->nop++; /* freed with the graph from here on */
        if (!a->name || !a->op_type) { /* not fused: the ops run as they are */
            a->dead = 1;
            continue;
        }
        a->kind = OP_ATTENTION;
        a->in[0] = qk->in[0];
        a->in[1] = qk->in[1];
        a->in[2] = pv->in[1];
        a->nin = 3;
        if (mask >= 0) a->in[a->nin++] = mask;
        a->out = pv->out;
        a->pos = pv->pos;
        memcpy(a->sub, sub, sizeof sub);
        /* the inputs' reader counts stand: each was read by one of the ops it now holds */
        for (int k = 0; k < ATT_NSUB; k++)
            if (sub[k] >= 0) g->ops[sub[k]].dead = 1;
    }
}

/* Whether value c is a constant whose every one of its n floats is `want`. */
static int const_all(const ox_graph *g, int c, int64_t n, float want)
{
    const ox_value *v = &g->vals[c];
    if (!v->cdata || !known(v) || vnumel(v) != n) return 0;
    for (int64_t i = 0; i < n; i++)
        if (v->cdata[i] != want) return 0;
    return 1;
}

/* Whether value c is a constant of one float per channel of a [N, C, ...] value of rank r,
 * shaped to broadcast along the channels ([C, 1, ...] or [1, C, 1, ...]). */
static int per_channel(const ox_graph *g, int c, int64_t channels, int r)
{
    const ox_value *v = &g->vals[c];
    if (!v->cdata || !known(v) || vnumel(v) != channels || v->ndim > r || v->ndim < r - 1) return 0;
    int at = v->ndim - (r - 1); /* the channel axis of v */
    for (int i = 0; i < v->ndim; i++)
        if (v->dims[i] != (i == at ? channels : 1)) return 0;
    return 1;
}

/* PyTorch's export of GroupNorm on x [N, C, spatial...]: Reshape to [N, G, L], an
 * InstanceNormalization with scale 1 and bias 0, a Reshape back to x's dims, then (affine) Mul
 * by gamma and Add of beta, one per channel; each result read by the next alone. As one OP_GN
 * (in: x, gamma or -1, beta or -1; size: G), which plan_norm.c runs on x's own layout: the
 * normalisation otherwise needs x in the plain layout, a reorder there and one back around
 * a loop and two binary primitives (a 32 x 256 x 256 GroupNorm took 4 ms of them at 2
 * threads). The InstanceNormalization op becomes the OP_GN; the others die. */
static void group_norm(ox_graph *g)
{
    for (int i = 0; i < g->nop; i++) {
        ox_op *in = &g->ops[i];
        if (in->dead || in->kind != OP_IN || in->nin != 3) continue;
        /* the Reshape before it, from x of known dims, rank 3 to 5 */
        int rs1 = -1;
        for (int k = 0; k < g->nop; k++)
            if (!g->ops[k].dead && g->ops[k].kind == OP_RESHAPE && g->ops[k].out == in->in[0])
                rs1 = k;
        if (rs1 < 0 || sole_consumer(g, in->in[0]) != i) continue;
        int x = g->ops[rs1].in[0];
        const ox_value *xv = &g->vals[x], *mid = &g->vals[in->in[0]];
        int r = xv->ndim;
        if (!known(xv) || r < 3 || r > 5 || !known(mid) || mid->ndim != 3 ||
            mid->dims[0] != xv->dims[0])
            continue;
        int64_t groups = mid->dims[1], channels = xv->dims[1];
        if (groups < 1 || channels % groups || xv->dims[0] * (channels + 15) > OX_GN_MAX_CHANNELS ||
            !const_all(g, in->in[1], groups, 1.f) || !const_all(g, in->in[2], groups, 0.f))
            continue;
        /* the Reshape back */
        int rs2 = sole_consumer(g, in->out);
        if (rs2 < 0 || g->ops[rs2].kind != OP_RESHAPE || g->ops[rs2].in[0] != in->out ||
            !same_dims(&g->vals[g->ops[rs2].out], xv))
            continue;
        int dead[5] = {rs1, i, rs2, -1, -1}, v = g->ops[rs2].out, gamma = -1, beta = -1, j;
        j = sole_consumer(g, v);
        if ((gamma = binary_with(g, j, v, dnnl_binary_mul, 0)) >= 0 &&
            per_channel(g, gamma, channels, r) && same_dims(&g->vals[g->ops[j].out], xv)) {
            dead[3] = j;
            v = g->ops[j].out;
            j = sole_consumer(g, v);
        } else gamma = -1;
        /* a shift without a scale stays an Add of its own (the step takes them in order) */
        if (gamma >= 0 && (beta = binary_with(g, j, v, dnnl_binary_add, 0)) >= 0 &&
            per_channel(g, beta, channels, r) && same_dims(&g->vals[g->ops[j].out], xv)) {
            dead[4] = j;
            v = g->ops[j].out;
        } else beta = -1;
        int pos = g->ops[dead[4] >= 0 ? dead[4] : dead[3] >= 0 ? dead[3] : rs2].pos;
        for (int k = 0; k < 5; k++) {
            if (dead[k] < 0) continue;
            ox_op *o = &g->ops[dead[k]];
            for (int q = 0; q < o->nin; q++)
                if (o->in[q] >= 0) g->vals[o->in[q]].consumers--;
            o->dead = 1;
        }
        /* the InstanceNormalization's op, whole again as the GroupNorm */
        in->dead = 0;
        in->kind = OP_GN;
        in->nin = 3;
        in->in[0] = x;
        in->in[1] = gamma;
        in->in[2] = beta;
        for (int q = 0; q < 3; q++)
            if (in->in[q] >= 0) g->vals[in->in[q]].consumers++;
        in->size = groups;
        in->out = v;
        in->pos = pos;
    }
}

/* A Relu that alone reads an InstanceNormalization's or GroupNorm's result: applied as the
 * values are written (plan_norm.c gn_relu), a NaN kept. */
static void norm_relus(ox_graph *g)
{
    for (int i = 0; i < g->nop; i++) {
        ox_op *op = &g->ops[i];
        if (op->dead || (op->kind != OP_IN && op->kind != OP_GN) || op->npost) continue;
        int j = sole_consumer(g, op->out);
        if (j >= 0 && g->ops[j].kind == OP_ELTWISE && g->ops[j].in[0] == op->out &&
            ox_is_relu(g->ops[j].alg, g->ops[j].alpha)) {
            op->post[op->npost++] = (ox_post){POST_ELTWISE, dnnl_eltwise_relu, 0.f, 0.f, -1};
            absorb(g, op, &g->ops[j]);
        }
    }
}

/* QDQ models (onnxruntime's quantize_static) round each activation to its integer grid and
 * back, QuantizeLinear -> DequantizeLinear: as one float32 -> float32 op, OP_QDQ,
 * y = (saturate(round(x / s0) + z0) - z1) * s1, so the 8-bit value never exists in the kernel
 * and the convolutions around it stay in one partition. The QuantizeLinear's result must be
 * read by that DequantizeLinear alone; any other QuantizeLinear or DequantizeLinear is declined. */
static int fake_quant(parser *p, const nnp_node_desc *nodes)
{
    ox_graph *g = p->g;
    for (int i = 0; i < g->nop; i++) {
        ox_op *d = &g->ops[i];
        if (d->dead || d->kind != OP_DEQUANT) continue;
        p->n = &nodes[i];
        int k = -1;
        for (int j = 0; j < g->nop && k < 0; j++)
            if (!g->ops[j].dead && g->ops[j].kind == OP_QUANT && g->ops[j].out == d->in[0]) k = j;
        if (k < 0) return decline(p, "only after its QuantizeLinear in the same kernel");
        ox_op *q = &g->ops[k];
        if (sole_consumer(g, q->out) != i)
            return decline(p, "the QuantizeLinear's result is read elsewhere too");
        if (q->qs8 != d->qs8) return decline(p, "the two integer types differ");
        d->qscale[1] = d->qscale[0];
        d->qzp[1] = d->qzp[0];
        d->qscale[0] = q->qscale[0];
        d->qzp[0] = q->qzp[0];
        for (int j = 0; j < d->nin; j++)
            if (d->in[j] >= 0) g->vals[d->in[j]].consumers--;
        for (int j = 1; j < q->nin; j++)
            if (q->in[j] >= 0) g->vals[q->in[j]].consumers--;
        d->in[0] = q->in[0];
        d->nin = 1;
        d->kind = OP_QDQ;
        q->dead = 1;
    }
    for (int i = 0; i < g->nop; i++)
        if (!g->ops[i].dead && (g->ops[i].kind == OP_QUANT || g->ops[i].kind == OP_DEQUANT)) {
            p->n = &nodes[i];
            return decline(p, "only QuantizeLinear -> DequantizeLinear, the one read by the other");
        }
    return 0;
}

/* A DequantizeLinear of constant int8 weights, which the host leaves unfolded for a backend
 * claiming it together with the Conv reading it (ox_supports_fused): the float32 weights
 * folding would give, w * s (ONNX's (w - 0) * s, one rounding), become the constant value of
 * its output, and the integers and scales are kept beside them for an int8 convolution
 * (plan_conv.c). Per tensor or per output channel (axis 0), zero points 0: what onnxruntime's
 * quantize_static writes for int8 weights. The op is dead from the start: nothing runs it. */
static int const_dequant(parser *p, ox_op *op)
{
    const nnp_node_desc *n = p->n;
    ox_graph *g = p->g;
    op->kind = OP_DEQUANT;
    op->dead = 1;
    op->nin = 0;
    if (n->num_inputs < 2 || n->num_inputs > 3) return decline(p, "arity");
    const nnp_value_desc *x = &n->inputs[0], *sc = &n->inputs[1],
                         *zp = n->num_inputs > 2 && n->inputs[2].name[0] ? &n->inputs[2] : NULL;
    if (x->dtype.code != NNP_DTYPE_INT || x->dtype.bits != 8 || x->dtype.lanes > 1 || x->ndim < 1 ||
        x->ndim > MAXR || !x->shape)
        return decline(p, "only int8 weights are taken unfolded");
    int64_t count = 1;
    for (int i = 0; i < x->ndim; i++) count *= x->shape[i] > 0 ? x->shape[i] : 0;
    if (count < 1 || x->const_nbytes != (uint64_t)count) return decline(p, "weights' shape");
    int64_t axis = attr_int(n, "axis", 1);
    if (axis < 0) axis += x->ndim;
    int64_t ns = sc->ndim == 0 ? 1 : sc->ndim == 1 && sc->shape ? sc->shape[0] : -1;
    if (!sc->const_data || sc->dtype.code != NNP_DTYPE_FLOAT || sc->dtype.bits != 32 ||
        (ns != 1 && !(sc->ndim == 1 && axis == 0 && ns == x->shape[0])) ||
        sc->const_nbytes != (uint64_t)ns * 4)
        return decline(p, "only a scale per tensor or per output channel (axis 0)");
    if (attr_int(n, "block_size", 0) != 0) return decline(p, "block_size");
    if (zp) {
        if (!zp->const_data || zp->dtype.code != NNP_DTYPE_INT || zp->dtype.bits != 8 ||
            zp->const_nbytes != (uint64_t)ns)
            return decline(p, "the zero point must be an int8 constant shaped as the scale");
        for (int64_t i = 0; i < ns; i++)
            if (((const int8_t *)zp->const_data)[i])
                return decline(p, "only symmetric int8 weights (zero points 0)");
    }
    for (int j = 0; j < n->num_inputs; j++) g->kin_val[g->nkin++] = -1; /* read here, once */
    if (add_value(p, &n->outputs[0], &op->out)) return 1;
    ox_value *y = &g->vals[op->out];
    if (y->ndim != x->ndim || vnumel(y) != count) return decline(p, "output shape");
    const int8_t *q = x->const_data;
    const float *s = sc->const_data;
    int64_t per = count / (ns == 1 ? 1 : ns);
    y->konst = 1;
    y->cdata = malloc((size_t)count * 4 + 4);
    y->i8 = malloc((size_t)count);
    y->i8scale = malloc((size_t)ns * 4);
    if (!y->cdata || !y->i8 || !y->i8scale) return ox_fail(p->e, "out of memory");
    memcpy(y->i8, q, (size_t)count);
    memcpy(y->i8scale, s, (size_t)ns * 4);
    y->ni8scale = ns;
    for (int64_t i = 0; i < count; i++) y->cdata[i] = (float)q[i] * s[ns == 1 ? 0 : i / per];
    return 0;
}

/* Whether every reader of a dead DequantizeLinear's constant reads it as a Conv's weights, and
 * the group's result is not it: the only way it is claimed (a model's other such nodes are
 * folded by the host). */
static int const_dequant_read(parser *p, const nnp_node_desc *nodes)
{
    ox_graph *g = p->g;
    for (int i = 0; i < g->nop; i++) {
        const ox_op *d = &g->ops[i];
        if (d->kind != OP_DEQUANT || !d->dead || d->out < 0 || !g->vals[d->out].i8) continue;
        p->n = &nodes[i];
        int weights = 0, other = d->out == g->out;
        for (int k = 0; k < g->nop; k++) {
            const ox_op *o = &g->ops[k];
            for (int j = 0; j < o->nin; j++)
                if (o->in[j] == d->out) {
                    if (o->kind == OP_CONV && j == 1) weights++;
                    else other++;
                }
        }
        if (!weights || other)
            return decline(p, "a DequantizeLinear of int8 weights is taken only with the Conv "
                              "reading them");
    }
    return 0;
}

/* An int8 Conv followed by a QuantizeLinear -> DequantizeLinear (OP_QDQ) of one grid, read
 * by it alone and not the group's result: the Conv writes the integers itself (oneDNN scales
 * and rounds them in the convolution), and its result is marked as on that grid, so the next
 * int8 Conv reads them as they are. A plan that cannot run it as int8 rounds its float result
 * to the grid instead (plan_conv.c). */
static void requantize(ox_graph *g)
{
    for (int i = 0; i < g->nop; i++) {
        ox_op *op = &g->ops[i];
        if (op->dead || !ox_int8_conv(op)) continue;
        int j = sole_consumer(g, op->out);
        if (j < 0) continue;
        ox_op *q = &g->ops[j];
        if (q->kind != OP_QDQ || q->in[0] != op->out || q->out == g->out ||
            q->qscale[0] != q->qscale[1] || q->qzp[0] != q->qzp[1] || !(q->qscale[0] > 0.f) ||
            !isfinite(q->qscale[0]))
            continue;
        absorb(g, op, q);
        op->qout = 1;
        op->qscale[0] = q->qscale[0];
        op->qzp[0] = q->qzp[0];
        op->qs8 = q->qs8;
        ox_value *v = &g->vals[op->out];
        v->grid = 1;
        v->gscale = q->qscale[0];
        v->gzp = q->qzp[0];
        v->gs8 = q->qs8;
    }
}

/* Whether the host keeps its constants for each kernel's life (NNP_HOST_KEEPS_CONSTANTS). */
static int g_host_keeps;

void ox_graph_host_keeps_constants(int keeps)
{
    g_host_keeps = keeps;
}

/* The constants a plan reads, kept: the host's const_data where the host keeps it for the
 * kernel's life, else copied (it lives only as long as the call that parses); the others
 * dropped. A Conv reads its weights through op->w (shared with its
 * weight value until a fold wrote to them: then its own) and its bias through op->b, so a folded
 * Conv's weight value is dropped: ResNet-50's 100 MB of weights were copied twice, and a third
 * time for the strict graph, which now borrows the first graph's. */
static int keep_constants(ox_graph *g, ox_err *e)
{
    char *read = calloc((size_t)g->nval + 1, 1);
    if (!read) return ox_fail(e, "out of memory");
    for (int i = 0; i < g->nop; i++) {
        const ox_op *op = &g->ops[i];
        if (op->dead) continue;
        for (int j = 0; j < op->nin; j++)
            if (op->in[j] >= 0 &&
                !(op->kind == OP_CONV && ((j == 1 && !op->wshared) || (j == 2 && op->b))))
                read[op->in[j]] = 1;
        for (int j = 0; j < op->npost; j++)
            if (op->post[j].kind == POST_SUM && op->post[j].val >= 0) read[op->post[j].val] = 1;
    }
    int rc = 0;
    for (int v = 0; v < g->nval && !rc; v++) {
        ox_value *val = &g->vals[v];
        if (val->borrowed != BORROW_CALL) continue;
        float *from = val->cdata;
        if (read[v] && g_host_keeps) {
            val->borrowed = BORROW_KERNEL;
            continue;
        }
        val->cdata = NULL;
        val->borrowed = BORROW_NONE;
        if (!read[v]) continue;
        size_t n = (size_t)vnumel(val);
        if (!(val->cdata = malloc(n * 4 + 4))) {
            rc = ox_fail(e, "out of memory");
            continue;
        }
        memcpy(val->cdata, from, n * 4);
        for (int i = 0; i < g->nop; i++) /* the Convs sharing them read the copy */
            if (g->ops[i].kind == OP_CONV && g->ops[i].wshared && g->ops[i].w == from)
                g->ops[i].w = val->cdata;
    }
    free(read);
    return rc;
}

static int by_pos(const void *a, const void *b, void *ops)
{
    const ox_op *o = ops;
    return o[*(const int *)a].pos - o[*(const int *)b].pos;
}

static ox_graph *parse(const nnp_node_desc *nodes, int n, int strict, int keep,
                       const ox_graph *from, int *unsupported, ox_err *e)
{
    *unsupported = 0;
    if (!nodes || n < 1) {
        ox_fail(e, "no nodes given");
        return NULL;
    }
    int nkin = 0, nsplit = 0, extra_at = n; /* extra_at: where a Split's next op goes */
    for (int i = 0; i < n; i++) {
        const nnp_node_desc *d = &nodes[i];
        if (!d->op_type || d->num_inputs < 0 || d->num_outputs < 1 ||
            (d->num_inputs && !d->inputs) || !d->outputs || d->num_attrs < 0 ||
            (d->num_attrs && !d->attrs)) {
            ox_fail(e, "node %d: malformed descriptor", i);
            return NULL;
        }
        for (int j = 0; j < d->num_inputs; j++)
            if (!d->inputs[j].name) {
                ox_fail(e, "node %d: malformed descriptor", i);
                return NULL;
            }
        if (d->domain && d->domain[0] && strcmp(d->domain, "ai.onnx")) {
            *unsupported = 1;
            ox_fail(e, "node '%s': domain %s is not handled by the onednn backend",
                    d->name ? d->name : "", d->domain);
            return NULL;
        }
        int extra = 0; /* outputs after the first the model wants (an omitted one is "") */
        for (int j = 1; j < d->num_outputs; j++)
            extra += d->outputs[j].name && d->outputs[j].name[0];
        int split = !strcmp(d->op_type, "Split");
        if (split && i == n - 1 && extra) { /* the kernel would have several outputs */
            *unsupported = 1;
            ox_fail(e, "node '%s' (Split): a graph does not end at a Split (kernels.c runs it)",
                    d->name ? d->name : "");
            return NULL;
        }
        if (split) nsplit += d->num_outputs - 1;
        else if (extra) {
            *unsupported = 1;
            ox_fail(e, "node '%s' (%s): only single-output nodes are handled by the onednn backend",
                    d->name ? d->name : "", d->op_type);
            return NULL;
        }
        nkin += d->num_inputs;
    }
    ox_graph *g = calloc(1, sizeof *g);
    if (!g) {
        ox_fail(e, "out of memory");
        return NULL;
    }
    /* n ops for the nodes, then a Split's outputs after its first (split_outputs), and room
     * for the attentions made of them (each holds 3 or more) */
    g->ops = calloc((size_t)(n + nsplit) + (size_t)(n + nsplit) / 3 + 1, sizeof *g->ops);
    g->kin_val = calloc((size_t)nkin + 1, sizeof *g->kin_val);
    g->order = calloc((size_t)(n + nsplit), sizeof *g->order);
    parser p = {g, NULL, unsupported, e, 0, 0, 0, from};
    if (!g->ops || !g->kin_val || !g->order) {
        ox_fail(e, "out of memory");
        goto bad;
    }
    for (int i = 0; i < n; i++) {
        const nnp_node_desc *d = &nodes[i];
        ox_op *op = &g->ops[i];
        p.n = d;
        op->pos = i;
        op->name = strdup(d->name ? d->name : "");
        op->op_type = strdup(d->op_type);
        if (!op->name || !op->op_type) {
            ox_fail(e, "out of memory");
            goto bad;
        }
        g->nop = i + 1;
        if (d->num_inputs > MAXIN) {
            decline(&p, "more than %d inputs", MAXIN);
            goto bad;
        }
        if (!strcmp(d->op_type, "DequantizeLinear") && d->num_inputs > 0 &&
            d->inputs[0].const_data) {
            if (const_dequant(&p, op)) goto bad;
            continue;
        }
        op->nin = d->num_inputs;
        for (int j = 0; j < d->num_inputs; j++) {
            const nnp_value_desc *vd = &d->inputs[j];
            op->in[j] = -1;
            if (!vd->name[0]) {
                g->kin_val[g->nkin++] = -1;
                continue;
            }
            int qdq =
                !strcmp(d->op_type, "QuantizeLinear") || !strcmp(d->op_type, "DequantizeLinear");
            if (qdq && j == 2) { /* a zero point: read here (see parse_qdq) */
                if (q8_scalar(&p, op, vd)) goto bad;
                g->kin_val[g->nkin++] = -1;
                continue;
            }
            if ((j == 1 && (!strcmp(d->op_type, "Reshape") || !strcmp(d->op_type, "ReduceMean") ||
                            !strcmp(d->op_type, "Split"))) ||
                (j >= 1 && (!strcmp(d->op_type, "Dropout") || !strcmp(d->op_type, "Slice") ||
                            !strcmp(d->op_type, "Resize")))) {
                /* Reshape's shape: the declared output dims are used; Dropout's ratio and
                 * training mode, Slice's bounds, ReduceMean's axes, Resize's roi, scales and
                 * sizes: see parse_node */
                g->kin_val[g->nkin++] = -1;
                continue;
            }
            int v = find_value(g, vd->name);
            int inside = 0;
            for (int k = 0; k < i && v >= 0; k++)
                if (g->ops[k].out == v) inside = 1;
            for (int k = n; k < extra_at && v >= 0; k++)
                if (g->ops[k].out == v) inside = 1;
            if (!inside) { /* a kernel input (duplicates keep their own index) */
                if (v < 0 && add_value(&p, vd, &v)) goto bad;
                if (g->vals[v].kin < 0 && !g->vals[v].konst) g->vals[v].kin = g->nkin;
                g->kin_val[g->nkin++] = v;
            }
            op->in[j] = v;
            g->vals[v].consumers++;
        }
        p.allow_bool = !strcmp(d->op_type, "IsNaN");
        p.allow_q8 = !strcmp(d->op_type, "QuantizeLinear");
        if (add_value(&p, &d->outputs[0], &op->out)) goto bad;
        p.allow_bool = p.allow_q8 = 0;
        if (parse_node(&p, op)) goto bad;
        if (!strcmp(d->op_type, "Split")) {
            int rc = split_outputs(&p, op, extra_at);
            extra_at += d->num_outputs - 1; /* made, or zeroes: freed with the graph */
            if (rc) goto bad;
        }
        /* inputs parse_node dropped (Clip's bounds) are not read */
        for (int j = op->nin; j < d->num_inputs; j++)
            if (op->in[j] >= 0) g->vals[op->in[j]].consumers--;
    }
    g->out = g->ops[n - 1].out;
    g->nop = extra_at;
    if (nan_replace(&p, nodes) || fake_quant(&p, nodes) || const_dequant_read(&p, nodes)) goto bad;
    attention(g);
    group_norm(g);
    norm_relus(g);
    rms_norms(g);
    if (!strict) gelus(g);
    fuse(g, strict);
    requantize(g);
    if (keep && keep_constants(g, e)) goto bad;
    g->strict = strict;
    for (int i = 0; i < g->nop; i++)
        if (!g->ops[i].dead) {
            g->order[g->norder++] = i;
            g->guarded |= !strict && strict_differs(&g->ops[i]);
        }
    if (!strict) masks_only(g);
    qsort_r(g->order, (size_t)g->norder, sizeof(int), by_pos, g->ops);
    return g;
bad:
    if (g->nop > 0 && g->nop < extra_at) g->nop = extra_at; /* a Split's outputs' ops too */
    ox_graph_free(g);
    return NULL;
}

ox_graph *ox_graph_parse(const nnp_node_desc *nodes, int n, int strict, int *unsupported, ox_err *e)
{
    return parse(nodes, n, strict, 0, NULL, unsupported, e);
}

ox_graph *ox_graph_parse_kept(const nnp_node_desc *nodes, int n, int strict, const ox_graph *from,
                              int *unsupported, ox_err *e)
{
    return parse(nodes, n, strict, 1, from, unsupported, e);
}

/* ---- shapes for concrete inputs ------------------------------------------------------------ */

#define DIMS(v) (dims + (size_t)(v) * MAXR)

/* The dims of op's result (and, for an attention, of each op it holds) from its inputs'. */
static int op_shape(const ox_graph *g, const ox_op *op, int64_t *dims, ox_err *e)
{
    const ox_value *yv = &g->vals[op->out];
    int r = yv->ndim;
    int64_t y[MAXR];
    const int64_t *x = DIMS(op->in[0]);
    memcpy(y, x, sizeof y);
    switch (op->kind) {
    case OP_CONV:
        if (op->line) { /* (N, C, W): the W axis is the window's second */
            y[1] = op->oc;
            y[2] = yv->dims[2] > 0 ? yv->dims[2] : window_out(op, 1, x[2]);
            if (y[2] < 1 && !(y[2] == 0 && x[2] == 0))
                return ox_fail(e, "node '%s': window larger than its input", op->name);
            break;
        }
        /* fall through */
    case OP_POOL:
        y[1] = op->kind == OP_CONV ? op->oc : x[1];
        /* as onnxruntime ("Only N can be zero"): an empty channel or plane has no pooled value */
        if (op->kind == OP_POOL && (x[1] == 0 || x[2] == 0 || x[3] == 0))
            return ox_fail(
                e,
                "node '%s' (%s): an input dimension other than the batch has size 0; a pool of it has no value",
                op->name, op->op_type);
        for (int i = 0; i < 2; i++) {
            y[2 + i] = op->global            ? 1
                       : yv->dims[2 + i] > 0 ? yv->dims[2 + i]
                                             : window_out(op, i, x[2 + i]);
            /* an empty plane with SAME padding gives an empty one */
            if (y[2 + i] < 1 && !(y[2 + i] == 0 && x[2 + i] == 0))
                return ox_fail(e, "node '%s': window larger than its input", op->name);
        }
        break;
    case OP_RESIZE:
        for (int i = 0; i < 2; i++)
            y[2 + i] = op->rsize[i] ? op->rsize[i] : x[2 + i] * op->rscale[i];
        break;
    case OP_DECONV:
        y[1] = op->oc;
        for (int i = 0; i < 2; i++) {
            y[2 + i] = deconv_out(op, i, x[2 + i]);
            if (y[2 + i] < 1) return ox_fail(e, "node '%s': its pads leave no output", op->name);
        }
        break;
    case OP_REDMEAN: /* the last axis: 1 with keepdims, else gone (x's first r dims) */
        if (r == g->vals[op->in[0]].ndim) y[r - 1] = 1;
        break;
    case OP_BINARY: {
        const ox_value *a = &g->vals[op->in[0]], *b = &g->vals[op->in[1]];
        for (int i = 0; i < r; i++) {
            int ia = i - (r - a->ndim), ib = i - (r - b->ndim);
            int64_t da = ia >= 0 ? DIMS(op->in[0])[ia] : 1, db = ib >= 0 ? DIMS(op->in[1])[ib] : 1;
            if (da != db && da != 1 && db != 1)
                return ox_fail(e, "node '%s': dims %lld and %lld do not broadcast", op->name,
                               (long long)da, (long long)db);
            y[i] = da == 1 ? db : da; /* a 0 broadcast against a 1 stays 0 */
        }
        break;
    }
    case OP_CONCAT:
        y[op->axis] = 0;
        for (int j = 0; j < op->nin; j++) {
            const int64_t *d = DIMS(op->in[j]);
            for (int i = 0; i < r; i++)
                if (i != op->axis && d[i] != x[i])
                    return ox_fail(e, "node '%s': input shapes differ", op->name);
            y[op->axis] += d[op->axis];
        }
        break;
    case OP_MATMUL: {
        const ox_value *a = &g->vals[op->in[0]], *w = &g->vals[op->in[1]];
        const int64_t *da = DIMS(op->in[0]), *dw = DIMS(op->in[1]);
        int64_t M = op->ta ? da[a->ndim - 1] : da[a->ndim - 2],
                K = op->ta ? da[a->ndim - 2] : da[a->ndim - 1];
        int64_t K2 = op->tb ? dw[w->ndim - 1] : dw[w->ndim - 2],
                N = op->tb ? dw[w->ndim - 2] : dw[w->ndim - 1];
        if (K != K2)
            return ox_fail(e, "node '%s': inner dimensions %lld and %lld differ", op->name,
                           (long long)K, (long long)K2);
        for (int i = 0; i < r - 2; i++) {
            int ia = i - (r - a->ndim), iw = i - (r - w->ndim);
            int64_t p = ia >= 0 ? da[ia] : 1, q = iw >= 0 ? dw[iw] : 1;
            if (p != q && p != 1 && q != 1)
                return ox_fail(e, "node '%s': batch dims do not broadcast", op->name);
            y[i] = p == 1 ? q : p;
        }
        y[r - 2] = M;
        y[r - 1] = N;
        break;
    }
    case OP_RESHAPE: {
        const ox_value *xv = &g->vals[op->in[0]];
        int64_t nx = 1, ny = 1, rest = -1;
        for (int i = 0; i < xv->ndim; i++) nx *= x[i];
        if (op->size == 2) { /* Flatten */
            y[0] = y[1] = 1;
            for (int i = 0; i < xv->ndim; i++) y[i < op->axis ? 0 : 1] *= x[i];
        } else if (op->size == 1) {
            for (int i = 0; i < r; i++) {
                y[i] = op->perm[i] == 0 ? x[i] : op->perm[i];
                if (y[i] == -1) rest = i;
                else ny *= y[i];
            }
            if (rest >= 0) {
                if (ny < 1 || nx % ny)
                    return ox_fail(e, "node '%s': cannot reshape %lld elements", op->name,
                                   (long long)nx);
                y[rest] = nx / ny;
            }
        } else memcpy(y, yv->dims, sizeof y);
        ny = 1;
        for (int i = 0; i < r; i++) ny *= y[i];
        if (ny != nx)
            return ox_fail(e, "node '%s': cannot reshape %lld elements to %lld", op->name,
                           (long long)nx, (long long)ny);
        break;
    }
    case OP_TRANSPOSE:
        for (int i = 0; i < r; i++) y[i] = x[op->perm[i]];
        break;
    case OP_ATTENTION: /* its ops' shapes in turn; the last one's result is its own */
        for (int k = 0; k < ATT_NSUB; k++)
            if (op->sub[k] >= 0 && op_shape(g, &g->ops[op->sub[k]], dims, e)) return 1;
        memcpy(y, DIMS(op->out), sizeof y);
        break;
    case OP_SLICE: {
        int64_t dim = x[op->axis], a = ox_slice_bound(op->start, dim),
                z = ox_slice_bound(op->end, dim);
        y[op->axis] = z > a ? z - a : 0;
        break;
    }
    default: /* element-wise, softmax, LRN, Batch- and LayerNormalization: the input's shape */
        break;
    }
    for (int i = 0; i < r; i++)
        if (yv->dims[i] >= 0 && yv->dims[i] != y[i])
            return ox_fail(e, "node '%s': output dimension %d is %lld; the model says %lld",
                           op->name, i, (long long)y[i], (long long)yv->dims[i]);
    memcpy(DIMS(op->out), y, sizeof y);
    for (int j = 0; j < op->npost; j++)
        if (op->post[j].kind == POST_SUM &&
            memcmp(DIMS(op->post[j].val), y, (size_t)r * sizeof(int64_t)))
            return ox_fail(e, "node '%s': the residual Add's operands have different shapes",
                           op->name);
    return 0;
}

int ox_graph_shapes(const ox_graph *g, const nnp_tensor *in, int nin, int64_t *dims, ox_err *e)
{
    if (in && nin != g->nkin)
        return ox_fail(e, "the kernel has %d inputs; called with %d", g->nkin, nin);
    for (int v = 0; v < g->nval; v++) memcpy(DIMS(v), g->vals[v].dims, sizeof g->vals[v].dims);
    for (int k = 0; in && k < nin; k++) {
        int v = g->kin_val[k];
        if (v < 0 || g->vals[v].konst) continue;
        const ox_value *val = &g->vals[v];
        const nnp_tensor *t = &in[k];
        if (t->dtype.code != NNP_DTYPE_FLOAT || t->dtype.bits != 32 || t->ndim != val->ndim ||
            (t->ndim && !t->shape))
            return ox_fail(e, "input %d ('%s') must be a float32 tensor of rank %d", k, val->name,
                           val->ndim);
        for (int i = 0; i < t->ndim; i++) {
            if (t->shape[i] < 0)
                return ox_fail(e, "input '%s' has dimension %d of size %lld", val->name, i,
                               (long long)t->shape[i]);
            if (val->dims[i] >= 0 && t->shape[i] != val->dims[i])
                return ox_fail(e, "input '%s' has dimension %d of size %lld; the model says %lld",
                               val->name, i, (long long)t->shape[i], (long long)val->dims[i]);
            DIMS(v)[i] = t->shape[i];
        }
    }
    for (int oi = 0; oi < g->norder; oi++)
        if (op_shape(g, &g->ops[g->order[oi]], dims, e)) return 1;
    return 0;
}
