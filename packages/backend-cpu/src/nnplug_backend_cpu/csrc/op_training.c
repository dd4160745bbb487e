/* The optimizers of domain ai.onnx.preview.training: Adagrad, Adam, Momentum (standard and
 * nesterov). Each takes a learning rate R and a step count T (scalars), then n tensors of each
 * kind (X..., G..., state...) and returns n updated tensors of each kind (X_new..., state...).
 * float32 and float64 tensors; every element is computed in double, as the ONNX reference
 * computes the coefficients (R and T promote to double there). */
#include "nnc.h"
#include "typed.h"

#include <math.h>
#include <stdlib.h>

#define TRAINING_DOMAIN "ai.onnx.preview.training"

enum { OPT_ADAGRAD, OPT_ADAM, OPT_MOMENTUM };

typedef struct {
    int kind, nesterov;
    int64_t n;   /* tensors updated */
    int groups; /* inputs per tensor: X, G and 1 (Adagrad H, Momentum V) or 2 (Adam V, H) states */
    float decay, eps, norm, norm_post, alpha, beta;
} opt_state;

static void opt_free(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int opt_create(nnc_node *n, nnc_err *e, int kind)
{
    static const int fl[] = {DT_F32, DT_F64, 0}, i64[] = {DT_I64, 0};
    opt_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->kind = kind;
    s->groups = kind == OPT_ADAM ? 4 : 3;
    int nouts = s->groups - 1;
    if (n->nin < 2 + s->groups || (n->nin - 2) % s->groups)
        return nnc_node_fail(e, n,
                             "has %d inputs; %s takes R, T and %d inputs per optimized tensor "
                             "(X..., G..., %s)",
                             n->nin, n->op_type, s->groups,
                             kind == OPT_ADAM      ? "V..., H..."
                             : kind == OPT_ADAGRAD ? "H..."
                                                   : "V...");
    s->n = (n->nin - 2) / s->groups;
    if (n->nout != nouts * s->n)
        return nnc_node_fail(e, n, "has %d outputs; %lld optimized tensors need %lld", n->nout,
                             (long long)s->n, (long long)(nouts * s->n));
    for (int i = 0; i < n->nin; i++)
        if (!nnc_in_present(n, i))
            return nnc_node_fail(e, n, "input %d is missing; every input is required", i);
    TRY(nnc_check_dtype(n, 0, fl, e));
    TRY(nnc_check_dtype(n, 1, i64, e));
    for (int i = 2; i < n->nin; i++) TRY(nnc_check_dtype(n, i, fl, e));
    for (int i = 0; i < 2; i++) {
        const nnc_valinfo *v = n->vin[i];
        if (v && nnc_info_numel(v) > 1)
            return nnc_node_fail(e, n, "input %d (%s) must be a scalar", i, i ? "T" : "R");
    }
    if (kind == OPT_ADAGRAD) {
        TRY(nnc_attr_float(n, "decay_factor", 0.f, &s->decay, e));
        TRY(nnc_attr_float(n, "epsilon", 0.f, &s->eps, e));
        TRY(nnc_attr_float(n, "norm_coefficient", 0.f, &s->norm, e));
    } else if (kind == OPT_ADAM) {
        TRY(nnc_attr_float(n, "alpha", 0.9f, &s->alpha, e));
        TRY(nnc_attr_float(n, "beta", 0.999f, &s->beta, e));
        TRY(nnc_attr_float(n, "epsilon", 0.f, &s->eps, e));
        TRY(nnc_attr_float(n, "norm_coefficient", 0.f, &s->norm, e));
        TRY(nnc_attr_float(n, "norm_coefficient_post", 0.f, &s->norm_post, e));
    } else {
        static const char *req[] = {"alpha", "beta", "mode", "norm_coefficient"};
        for (int i = 0; i < 4; i++)
            if (!nnc_attr_find(n, req[i]))
                return nnc_node_fail(e, n, "attribute '%s' is required", req[i]);
        TRY(nnc_attr_float(n, "alpha", 0.f, &s->alpha, e));
        TRY(nnc_attr_float(n, "beta", 0.f, &s->beta, e));
        TRY(nnc_attr_float(n, "norm_coefficient", 0.f, &s->norm, e));
        char mode[16];
        TRY(nnc_attr_str(n, "mode", "", mode, sizeof mode, e));
        if (!strcmp(mode, "nesterov")) s->nesterov = 1;
        else if (strcmp(mode, "standard"))
            return nnc_node_fail(
                e, n, "attribute 'mode' is '%s'; expected 'standard' or 'nesterov'", mode);
    }
    return NNC_OK;
}

static int adagrad_create(nnc_node *n, nnc_err *e)
{
    return opt_create(n, e, OPT_ADAGRAD);
}
static int adam_create(nnc_node *n, nnc_err *e)
{
    return opt_create(n, e, OPT_ADAM);
}
static int momentum_create(nnc_node *n, nnc_err *e)
{
    return opt_create(n, e, OPT_MOMENTUM);
}

static int opt_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const opt_state *s = n->state;
    if (in[0]->dtype != DT_F32 && in[0]->dtype != DT_F64)
        return nnc_node_fail(e, n, "R must be float or double");
    if (in[1]->dtype != DT_I64) return nnc_node_fail(e, n, "T must be int64");
    if (nnc_numel(in[0]) != 1 || nnc_numel(in[1]) != 1)
        return nnc_node_fail(e, n, "R and T must be scalars");
    for (int64_t t = 0; t < s->n; t++) {
        const nnc_tensor *x = in[2 + t];
        for (int g = 1; g < s->groups; g++) {
            const nnc_tensor *o = in[2 + g * s->n + t];
            if (o->dtype != x->dtype || !nnc_same_shape(o, x))
                return nnc_node_fail(e, n,
                                     "input %lld must have the type and shape of X input %lld",
                                     (long long)(2 + g * s->n + t), (long long)(2 + t));
        }
        if (x->dtype != DT_F32 && x->dtype != DT_F64)
            return nnc_node_fail(e, n, "input %lld must be float or double", (long long)(2 + t));
        for (int g = 0; g < s->groups - 1; g++) {
            out[g * s->n + t] = *x;
            out[g * s->n + t].data = NULL;
        }
    }
    return NNC_OK;
}

static inline double at(const nnc_tensor *t, int64_t i)
{
    return nnc_get_d(t->data, t->dtype, i);
}
static inline void put(const nnc_tensor *t, int64_t i, double v)
{
    if (!t->data) return; /* an omitted output */
    nnc_store_d(t->data, t->dtype, i, 1, &v);
}

static int opt_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    (void)e;
    const opt_state *s = n->state;
    double r = at(in[0], 0);
    int64_t step = ((const int64_t *)in[1]->data)[0];
    double norm = s->norm;
    for (int64_t t = 0; t < s->n; t++) {
        const nnc_tensor *x = in[2 + t], *g = in[2 + s->n + t], *s1 = in[2 + 2 * s->n + t];
        const nnc_tensor *xo = &out[t], *so = &out[s->n + t];
        int64_t k = nnc_numel(x);
        if (s->kind == OPT_ADAGRAD) {
            double rr = r / (1.0 + (double)step * (double)s->decay);
            for (int64_t i = 0; i < k; i++) {
                double xv = at(x, i), gr = norm * xv + at(g, i);
                double h = at(s1, i) + gr * gr;
                put(xo, i, xv - rr * gr / (sqrt(h) + (double)s->eps));
                put(so, i, h);
            }
        } else if (s->kind == OPT_ADAM) {
            const nnc_tensor *h1 = in[2 + 3 * s->n + t], *ho = &out[2 * s->n + t];
            double a = s->alpha, b = s->beta;
            double rr =
                step > 0 ? r * sqrt(1.0 - pow(b, (double)step)) / (1.0 - pow(a, (double)step)) : r;
            for (int64_t i = 0; i < k; i++) {
                double xv = at(x, i), gr = norm * xv + at(g, i);
                double v = a * at(s1, i) + (1.0 - a) * gr;
                double h = b * at(h1, i) + (1.0 - b) * (gr * gr);
                double xn = xv - rr * (v / (sqrt(h) + (double)s->eps));
                put(xo, i, (1.0 - (double)s->norm_post) * xn);
                put(so, i, v);
                put(ho, i, h);
            }
        } else {
            double beta = step > 0 ? (double)s->beta : 1.0, a = s->alpha;
            for (int64_t i = 0; i < k; i++) {
                double xv = at(x, i), gr = norm * xv + at(g, i);
                double v = a * at(s1, i) + beta * gr;
                put(xo, i, s->nesterov ? xv - r * (gr + a * v) : xv - r * v);
                put(so, i, v);
            }
        }
    }
    return NNC_OK;
}

const nnc_op nnc_op_tr_adagrad = {"Adagrad",      5,         NNC_MAXIO,      2,        NNC_MAXIO,
                                  adagrad_create, opt_infer, opt_run,        opt_free, 0,
                                  NULL,           NULL,      TRAINING_DOMAIN};
const nnc_op nnc_op_tr_adam = {"Adam",      6,         NNC_MAXIO,      3,        NNC_MAXIO,
                               adam_create, opt_infer, opt_run,        opt_free, 0,
                               NULL,        NULL,      TRAINING_DOMAIN};
const nnc_op nnc_op_tr_momentum = {
    "Momentum", 5,        NNC_MAXIO, 2,    NNC_MAXIO, momentum_create, opt_infer,
    opt_run,    opt_free, 0,         NULL, NULL,      TRAINING_DOMAIN};
