/* ai.onnx.ml linear models and support vector machines: LinearClassifier, LinearRegressor,
 * SVMClassifier, SVMRegressor. Scores, labels and post-transforms follow onnxruntime's CPU
 * kernels exactly (including which transforms apply to one-score outputs). String class
 * labels are declined: the cpu backend carries no string tensors. */
#include "ml.h"

#include <math.h>
#include <stdlib.h>

/* y[r * t_count + t] = x[r] . w[t] for rows [0, n) of float32 x [n, f] and weights w [t_count, f]:
 * each dot in eight partial sums, added in a fixed order (vectorised, the same bits at every
 * level). A row at a time with one accumulator took a 1,000-row batch 4x onnxruntime's time,
 * and the general product pads a handful of targets to a 16-column panel. */
static MULTIVERSION void dot_rows(const float *x, int64_t n, int64_t f, const float *w,
                                  int64_t t_count, float *y)
{
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * f;
        for (int64_t t = 0; t < t_count; t++) {
            const float *wt = w + t * f;
            float p[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
            int64_t i = 0;
            for (; i + 8 <= f; i += 8)
                for (int l = 0; l < 8; l++) p[l] += xr[i + l] * wt[i + l];
            float acc = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
            for (; i < f; i++) acc += xr[i] * wt[i];
            y[r * t_count + t] = acc;
        }
    }
}

/* The same dots for features of any numeric type: float32 through dot_rows, the others read
 * one by one into one accumulator. Every row gets the same bits whatever the batch. */
static void row_dots(const nnc_tensor *x, int64_t n, int64_t f, const float *w, int64_t t_count,
                     float *y)
{
    if (x->dtype == DT_F32) {
        dot_rows(x->data, n, f, w, t_count, y);
        return;
    }
    for (int64_t r = 0; r < n; r++)
        for (int64_t t = 0; t < t_count; t++) {
            float acc = 0.f;
            for (int64_t i = 0; i < f; i++) acc += ml_at_f(x, r * f + i) * w[t * f + i];
            y[r * t_count + t] = acc;
        }
}

static int check_features(const nnc_node *n, int64_t F, int64_t want, nnc_err *e)
{
    if (F != want)
        return nnc_node_fail(e, n,
                             "input X has %lld features; the model's coefficients expect %lld",
                             (long long)F, (long long)want);
    return NNC_OK;
}

static int static_features(const nnc_node *n, int64_t want, nnc_err *e)
{
    const nnc_valinfo *x = n->vin[0];
    if (!x || x->ndim < 1 || x->ndim > 2) return NNC_OK;
    int64_t F = x->dims[x->ndim - 1];
    return F < 0 ? NNC_OK : check_features(n, F, want, e);
}

/* ---- LinearClassifier ---------------------------------------------------------------- */

typedef struct {
    int64_t C, F, nlabels, zcols;
    int pt, add_second;
    float *coef, *icpt;
    int64_t *labels;
} lincls;

static void lincls_destroy(nnc_node *n)
{
    lincls *s = n->state;
    if (s) {
        free(s->coef);
        free(s->icpt);
        free(s->labels);
    }
    ml_free_state(n);
}

static int lincls_create(nnc_node *n, nnc_err *e)
{
    TRY(ml_no_string_labels(n, "classlabels_strings", e));
    TRY(ml_check_numeric(n, 0, e));
    TRY(ml_check_out(n, 0, ML_OUT_I64, e));
    TRY(ml_check_out(n, 1, ML_OUT_F32, e));
    lincls *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int64_t nc, ni;
    TRY(ml_attr_floats(n, "coefficients", 1, &s->coef, &nc, e));
    TRY(ml_attr_floats(n, "intercepts", 0, &s->icpt, &ni, e));
    TRY(ml_attr_int_list(n, "classlabels_ints", &s->labels, &s->nlabels, e));
    if (s->nlabels < 0) s->nlabels = 0;
    TRY(ml_post_transform(n, &s->pt, e));
    /* onnxruntime counts classes by the intercepts. */
    if (ni < 1)
        return nnc_node_unsup(e, n, "a LinearClassifier without 'intercepts' is not supported");
    s->C = ni;
    if (nc < 1 || nc % s->C)
        return nnc_node_fail(e, n,
                             "attribute 'coefficients' has %lld values, not a multiple "
                             "of the %lld classes of 'intercepts'",
                             (long long)nc, (long long)s->C);
    s->F = nc / s->C;
    if (s->C > 1 && s->nlabels != s->C)
        return nnc_node_fail(e, n, "attribute 'classlabels_ints' has %lld labels for %lld classes",
                             (long long)s->nlabels, (long long)s->C);
    s->add_second = s->C == 1 && s->nlabels == 2;
    s->zcols = s->add_second ? 2 : s->C;
    if (s->add_second && s->pt == PT_PROBIT)
        return nnc_node_unsup(
            e, n, "post_transform PROBIT with one score and two labels is not supported");
    return static_features(n, s->F, e);
}

static int lincls_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    lincls *s = n->state;
    int64_t N, F;
    TRY(ml_rows(n, in[0], &N, &F, e));
    TRY(check_features(n, F, s->F, e));
    out[0].dtype = DT_I64;
    out[0].ndim = 1;
    out[0].dims[0] = N;
    if (n->nout > 1) {
        out[1].dtype = DT_F32;
        out[1].ndim = 2;
        out[1].dims[0] = N;
        out[1].dims[1] = s->zcols;
    }
    return NNC_OK;
}

static int lincls_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    lincls *s = n->state;
    int64_t N, F;
    TRY(ml_rows(n, in[0], &N, &F, e));
    TRY(check_features(n, F, s->F, e));
    int64_t *y = out[0].data;
    float *z = n->nout > 1 ? out[1].data : NULL;
    float stack[64], *all = N * s->C <= 64 ? stack : malloc((size_t)(N * s->C) * sizeof(float));
    if (!all) return nnc_node_fail(e, n, "out of memory");
    row_dots(in[0], N, F, s->coef, s->C, all);
    for (int64_t r = 0; r < N; r++) {
        float *sc = all + r * s->C; /* the row's scores */
        for (int64_t c = 0; c < s->C; c++) sc[c] += s->icpt[c];
        if (s->C == 1) {
            int two = s->nlabels == 2;
            y[r] = sc[0] > 0 ? (two ? s->labels[1] : 1) : (two ? s->labels[0] : 0);
        } else {
            int64_t best = 0;
            for (int64_t c = 1; c < s->C; c++)
                if (sc[c] > sc[best]) best = c;
            y[r] = s->labels[best];
        }
        if (!z) continue;
        float *zr = z + r * s->zcols;
        if (s->C > 1) {
            ml_write_scores(sc, (int)s->C, s->pt, -1, zr);
        } else if (s->add_second) {
            /* onnxruntime: the logistic (only) applies before the score becomes [1 - p, p] */
            float v = s->pt == PT_LOGISTIC ? ml_logistic(sc[0]) : sc[0];
            zr[0] = 1.f - v;
            zr[1] = v;
        } else {
            zr[0] = s->pt == PT_PROBIT ? ml_probit(sc[0]) : sc[0];
        }
    }
    if (all != stack) free(all);
    return NNC_OK;
}

const nnc_op nnc_op_ml_linearclassifier = {
    "LinearClassifier", 1, 1,    1,    2,        lincls_create, lincls_infer, lincls_run,
    lincls_destroy,     0, NULL, NULL, ML_DOMAIN};

/* ---- LinearRegressor ----------------------------------------------------------------- */

typedef struct {
    int64_t T, F;
    int pt, has_icpt;
    float *coef, *icpt;
} linreg;

static void linreg_destroy(nnc_node *n)
{
    linreg *s = n->state;
    if (s) {
        free(s->coef);
        free(s->icpt);
    }
    ml_free_state(n);
}

static int linreg_create(nnc_node *n, nnc_err *e)
{
    TRY(ml_check_numeric(n, 0, e));
    TRY(ml_check_out(n, 0, ML_OUT_F32, e));
    linreg *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int64_t nc, ni;
    TRY(ml_attr_floats(n, "coefficients", 1, &s->coef, &nc, e));
    TRY(ml_attr_floats(n, "intercepts", 0, &s->icpt, &ni, e));
    TRY(nnc_attr_int(n, "targets", 1, &s->T, e));
    TRY(ml_post_transform(n, &s->pt, e));
    if (s->T < 1)
        return nnc_node_fail(e, n, "attribute 'targets' must be at least 1, got %lld",
                             (long long)s->T);
    if (nc < 1 || nc % s->T)
        return nnc_node_fail(e, n,
                             "attribute 'coefficients' has %lld values, not a multiple "
                             "of targets = %lld",
                             (long long)nc, (long long)s->T);
    if (ni != 0 && ni != s->T)
        return nnc_node_fail(e, n, "attribute 'intercepts' has %lld values for %lld targets",
                             (long long)ni, (long long)s->T);
    s->has_icpt = ni > 0;
    s->F = nc / s->T;
    return static_features(n, s->F, e);
}

static int linreg_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    linreg *s = n->state;
    int64_t N, F;
    TRY(ml_rows(n, in[0], &N, &F, e));
    TRY(check_features(n, F, s->F, e));
    out[0].dtype = DT_F32;
    out[0].ndim = 2;
    out[0].dims[0] = N;
    out[0].dims[1] = s->T;
    return NNC_OK;
}

static int linreg_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    linreg *s = n->state;
    int64_t N, F;
    TRY(ml_rows(n, in[0], &N, &F, e));
    float *y = out[0].data;
    row_dots(in[0], N, F, s->coef, s->T, y);
    for (int64_t r = 0; r < N; r++) {
        float *yr = y + r * s->T;
        for (int64_t t = 0; t < s->T; t++) yr[t] += s->has_icpt ? s->icpt[t] : 0.f;
        ml_transform_targets(yr, s->T, s->pt);
    }
    return NNC_OK;
}

const nnc_op nnc_op_ml_linearregressor = {
    "LinearRegressor", 1, 1,    1,    1,        linreg_create, linreg_infer, linreg_run,
    linreg_destroy,    0, NULL, NULL, ML_DOMAIN};

/* ---- SVM kernels --------------------------------------------------------------------- */

enum { K_LINEAR, K_POLY, K_RBF, K_SIGMOID };

typedef struct {
    int kernel;
    float gamma, coef0, degree;
} svm_kernel;

static int parse_kernel(const nnc_node *n, svm_kernel *k, nnc_err *e)
{
    char t[32];
    TRY(nnc_attr_str(n, "kernel_type", "LINEAR", t, sizeof t, e));
    static const char *names[] = {"LINEAR", "POLY", "RBF", "SIGMOID"};
    k->kernel = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(t, names[i])) k->kernel = i;
    if (k->kernel < 0)
        return nnc_node_fail(
            e, n, "attribute 'kernel_type' is '%s'; expected LINEAR, POLY, RBF or SIGMOID", t);
    float p[3] = {0, 0, 0};
    int cnt;
    TRY(nnc_attr_floats(n, "kernel_params", p, 3, &cnt, e));
    if (cnt > 0 && cnt < 3)
        return nnc_node_fail(e, n,
                             "attribute 'kernel_params' needs 3 values (gamma, coef0, degree)");
    k->gamma = p[0];
    k->coef0 = p[1];
    k->degree = p[2];
    return NNC_OK;
}

/* Kernel of row x against vector v (F features), as onnxruntime computes it in float. */
static float kernel_dot(const svm_kernel *k, const float *x, const float *v, int64_t F)
{
    float sum = 0.f;
    if (k->kernel == K_RBF) {
        for (int64_t f = 0; f < F; f++) {
            float d = x[f] - v[f];
            sum += d * d;
        }
        return expf(-k->gamma * sum);
    }
    for (int64_t f = 0; f < F; f++) sum += x[f] * v[f];
    if (k->kernel == K_LINEAR) return sum;
    float t = k->gamma * sum + k->coef0;
    if (k->kernel == K_SIGMOID) return tanhf(t);
    if (k->degree == 2) return t * t;
    if (k->degree == 3) return t * t * t;
    return powf(t, k->degree);
}

/* Rows of X as float, one row at a time into buf (F floats). */
static const float *row_f(const nnc_tensor *x, int64_t r, int64_t F, float *buf)
{
    if (x->dtype == DT_F32) return (const float *)x->data + r * F;
    for (int64_t f = 0; f < F; f++) buf[f] = ml_at_f(x, r * F + f);
    return buf;
}

/* ---- SVMClassifier ------------------------------------------------------------------- */

typedef struct {
    svm_kernel k;
    int svc, pt, all_positive, add_second;
    int64_t C, F, nvec, ncls, nrho, nprob, zcols;
    int64_t *labels, *per_class, *start;
    float *sv, *coef, *rho, *proba, *probb;
} svmc;

static void svmc_destroy(nnc_node *n)
{
    svmc *s = n->state;
    if (s) {
        free(s->labels);
        free(s->per_class);
        free(s->start);
        free(s->sv);
        free(s->coef);
        free(s->rho);
        free(s->proba);
        free(s->probb);
    }
    ml_free_state(n);
}

static int svmc_create(nnc_node *n, nnc_err *e)
{
    TRY(ml_no_string_labels(n, "classlabels_strings", e));
    TRY(ml_check_numeric(n, 0, e));
    TRY(ml_check_out(n, 0, ML_OUT_I64, e));
    TRY(ml_check_out(n, 1, ML_OUT_F32, e));
    svmc *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(parse_kernel(n, &s->k, e));
    TRY(ml_post_transform(n, &s->pt, e));
    int64_t npc, nsv, nco, npb;
    TRY(ml_attr_int_list(n, "classlabels_ints", &s->labels, &s->C, e));
    TRY(ml_attr_int_list(n, "vectors_per_class", &s->per_class, &npc, e));
    TRY(ml_attr_floats(n, "support_vectors", 0, &s->sv, &nsv, e));
    TRY(ml_attr_floats(n, "coefficients", 1, &s->coef, &nco, e));
    TRY(ml_attr_floats(n, "rho", 1, &s->rho, &s->nrho, e));
    TRY(ml_attr_floats(n, "prob_a", 0, &s->proba, &s->nprob, e));
    TRY(ml_attr_floats(n, "prob_b", 0, &s->probb, &npb, e));
    if (s->C < 1) return nnc_node_fail(e, n, "attribute 'classlabels_ints' is required");
    if (s->nprob != npb)
        return nnc_node_fail(e, n, "attributes 'prob_a' and 'prob_b' have %lld and %lld values",
                             (long long)s->nprob, (long long)npb);
    if (nco < 1 || s->nrho < 1)
        return nnc_node_fail(e, n, "attributes 'coefficients' and 'rho' must not be empty");
    s->all_positive = 1;
    for (int64_t i = 0; i < nco; i++)
        if (s->coef[i] < 0) {
            s->all_positive = 0;
            break;
        }
    s->nvec = 0;
    if (npc < 0) npc = 0;
    s->start = malloc((size_t)(npc ? npc : 1) * sizeof(int64_t));
    if (!s->start) return nnc_node_fail(e, n, "out of memory");
    for (int64_t i = 0; i < npc; i++) {
        if (s->per_class[i] < 0)
            return nnc_node_fail(e, n, "attribute 'vectors_per_class' has a negative count");
        s->start[i] = s->nvec;
        s->nvec += s->per_class[i];
    }
    s->svc = s->nvec > 0;
    s->ncls = s->C * (s->C - 1) / 2;
    if (s->svc) {
        if (npc != s->C)
            return nnc_node_fail(e, n,
                                 "attribute 'vectors_per_class' has %lld entries for %lld classes",
                                 (long long)npc, (long long)s->C);
        if (s->C < 2)
            return nnc_node_unsup(e, n,
                                  "a support vector classifier with one class is not supported");
        if (nsv < 1 || nsv % s->nvec)
            return nnc_node_fail(e, n,
                                 "attribute 'support_vectors' has %lld values, not a "
                                 "multiple of the %lld vectors",
                                 (long long)nsv, (long long)s->nvec);
        s->F = nsv / s->nvec;
        if (nco != (s->C - 1) * s->nvec)
            return nnc_node_fail(
                e, n,
                "attribute 'coefficients' has %lld values; %lld classes and %lld vectors need %lld",
                (long long)nco, (long long)s->C, (long long)s->nvec,
                (long long)((s->C - 1) * s->nvec));
        if (s->nrho != s->ncls)
            return nnc_node_fail(e, n, "attribute 'rho' has %lld values for %lld class pairs",
                                 (long long)s->nrho, (long long)s->ncls);
        if (s->nprob && s->nprob != s->ncls)
            return nnc_node_fail(
                e, n, "attributes 'prob_a'/'prob_b' have %lld values for %lld class pairs",
                (long long)s->nprob, (long long)s->ncls);
        s->zcols = s->nprob ? s->C : (s->C > 2 ? s->ncls : 2);
    } else {
        s->k.kernel = K_LINEAR;
        if (nco % s->C)
            return nnc_node_fail(
                e, n,
                "attribute 'coefficients' has %lld values, not a multiple of the %lld "
                "classes",
                (long long)nco, (long long)s->C);
        s->F = nco / s->C;
        s->zcols = s->C;
    }
    /* One classifier score written as two columns (onnxruntime's binary case). */
    s->add_second = s->nrho == 1 && s->C == 2 ? (s->pt == PT_NONE ? 2 : 0) : -1;
    if (s->svc && !s->nprob && s->C == 2 && s->pt == PT_PROBIT)
        return nnc_node_unsup(
            e, n,
            "post_transform PROBIT on a two-class SVM without probabilities is not supported");
    if (s->nprob && s->svc) s->add_second = -1;
    return static_features(n, s->F, e);
}

static int svmc_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    svmc *s = n->state;
    int64_t N, F;
    TRY(ml_rows(n, in[0], &N, &F, e));
    TRY(check_features(n, F, s->F, e));
    out[0].dtype = DT_I64;
    out[0].ndim = 1;
    out[0].dims[0] = N;
    if (n->nout > 1) {
        out[1].dtype = DT_F32;
        out[1].ndim = 2;
        out[1].dims[0] = N;
        out[1].dims[1] = s->zcols;
    }
    return NNC_OK;
}

/* libsvm's pairwise coupling (Wu, Lin and Weng), as onnxruntime computes it in float. */
static void multiclass_probability(int64_t k, const float *r, float *p, float *Q, float *Qp)
{
    float eps = 0.005f / (float)k;
    for (int64_t i = 0; i < k * k; i++) Q[i] = 0;
    for (int64_t i = 0; i < k; i++) {
        p[i] = 1.0f / (float)k;
        for (int64_t j = 0; j < i; j++) {
            Q[i * k + i] += r[j * k + i] * r[j * k + i];
            Q[i * k + j] = Q[j * k + i];
        }
        for (int64_t j = i + 1; j < k; j++) {
            Q[i * k + i] += r[j * k + i] * r[j * k + i];
            Q[i * k + j] = -r[j * k + i] * r[i * k + j];
        }
    }
    for (int loop = 0; loop < 100; loop++) {
        float pQp = 0;
        for (int64_t i = 0; i < k; i++) {
            Qp[i] = 0;
            for (int64_t j = 0; j < k; j++) Qp[i] += Q[i * k + j] * p[j];
            pQp += p[i] * Qp[i];
        }
        float max_error = 0;
        for (int64_t i = 0; i < k; i++) {
            float err = fabsf(Qp[i] - pQp);
            if (err > max_error) max_error = err;
        }
        if (max_error < eps) break;
        for (int64_t i = 0; i < k; i++) {
            float diff = (-Qp[i] + pQp) / Q[i * k + i];
            p[i] += diff;
            pQp = (pQp + diff * (diff * Q[i * k + i] + 2 * Qp[i])) / (1 + diff) / (1 + diff);
            for (int64_t j = 0; j < k; j++) {
                Qp[j] = (Qp[j] + diff * Q[i * k + j]) / (1 + diff);
                p[j] /= (1 + diff);
            }
        }
    }
}

typedef struct {
    const svmc *s;
    const nnc_tensor *x;
    int64_t *y;
    float *z;
    int failed;
} svmc_job;

static void svmc_rows(void *arg, int64_t b, int64_t end, int tid)
{
    (void)tid;
    svmc_job *j = arg;
    const svmc *s = j->s;
    int64_t C = s->C, F = s->F;
    /* x row, kernels, coupling matrices R and Q, Qp, scores (room for two columns), pair scores */
    size_t nf = (size_t)(F + s->nvec + 2 * C * C + C + (C + s->ncls + 2) + s->ncls + 8);
    float *buf = malloc(nf * sizeof(float));
    int64_t *votes = malloc((size_t)C * sizeof(int64_t));
    if (!buf || !votes) {
        free(buf);
        free(votes);
        j->failed = 1;
        return;
    }
    float *xb = buf, *ker = xb + F, *R = ker + s->nvec, *Q = R + C * C, *Qp = Q + C * C,
          *sc = Qp + C;
    float *pr = sc + C + s->ncls + 2;
    for (int64_t r = b; r < end; r++) {
        const float *xr = row_f(j->x, r, F, xb);
        int64_t nsc, maxclass = 0;
        float maxw = 0.f;
        if (!s->svc) {
            for (int64_t c = 0; c < C; c++)
                sc[c] = kernel_dot(&s->k, xr, s->coef + c * F, F) + s->rho[0];
            nsc = C;
            for (int64_t c = 1; c < C; c++)
                if (sc[c] > sc[maxclass]) maxclass = c;
            maxw = sc[maxclass];
        } else {
            for (int64_t v = 0; v < s->nvec; v++) ker[v] = kernel_dot(&s->k, xr, s->sv + v * F, F);
            for (int64_t c = 0; c < C; c++) votes[c] = 0;
            float *cs = s->nprob ? pr : sc;
            int64_t q = 0;
            for (int64_t a = 0; a < C - 1; a++)
                for (int64_t c2 = a + 1; c2 < C; c2++, q++) {
                    double sum = 0;
                    const float *w1 = s->coef + (c2 - 1) * s->nvec + s->start[a],
                                *k1 = ker + s->start[a];
                    for (int64_t m = 0; m < s->per_class[a]; m++) sum += w1[m] * k1[m];
                    const float *w2 = s->coef + a * s->nvec + s->start[c2],
                                *k2 = ker + s->start[c2];
                    for (int64_t m = 0; m < s->per_class[c2]; m++) sum += w2[m] * k2[m];
                    sum += s->rho[q];
                    cs[q] = (float)sum;
                    votes[sum > 0 ? a : c2]++;
                }
            for (int64_t c = 1; c < C; c++)
                if (votes[c] > votes[maxclass]) maxclass = c;
            if (s->nprob) {
                /* pairwise probabilities into a C x C matrix, then coupling into sc */
                for (int64_t i = 0; i < C * C; i++) R[i] = 0.f;
                int64_t idx = 0;
                for (int64_t a = 0; a < C - 1; a++) {
                    int64_t p1 = a * C + a + 1, p2 = (a + 1) * C + a;
                    for (int64_t c2 = a + 1; c2 < C; c2++, idx++) {
                        float v1 = 1.f - ml_logistic(cs[idx] * s->proba[idx] + s->probb[idx]);
                        float v2 = v1 > 1.0e-7f ? v1 : 1.0e-7f;
                        v2 = v2 < 1 - 1.0e-7f ? v2 : 1 - 1.0e-7f;
                        R[p1] = v2;
                        R[p2] = 1 - v2;
                        p1++;
                        p2 += C;
                    }
                }
                multiclass_probability(C, R, sc, Q, Qp);
                nsc = C;
            } else {
                nsc = s->ncls;
            }
        }
        /* labels */
        if (s->nrho == 1 && C == 2) {
            if (!s->nprob && ((s->all_positive && maxw >= 0.5f) || (maxw > 0 && !s->all_positive)))
                j->y[r] = s->labels[1];
            else j->y[r] = s->labels[maxclass];
        } else {
            j->y[r] = s->labels[maxclass];
        }
        if (j->z) ml_write_scores(sc, (int)nsc, s->pt, s->add_second, j->z + r * s->zcols);
    }
    free(buf);
    free(votes);
}

static int svmc_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    svmc *s = n->state;
    int64_t N, F;
    TRY(ml_rows(n, in[0], &N, &F, e));
    TRY(check_features(n, F, s->F, e));
    svmc_job j = {s, in[0], out[0].data, n->nout > 1 ? out[1].data : NULL, 0};
    nnc_parallel_for(N, 1 + 4096 / (1 + s->F * (s->svc ? s->nvec : s->C)), svmc_rows, &j);
    if (j.failed) return nnc_node_fail(e, n, "out of memory");
    return NNC_OK;
}

const nnc_op nnc_op_ml_svmclassifier = {
    "SVMClassifier", 1, 1,    1,    2,        svmc_create, svmc_infer, svmc_run,
    svmc_destroy,    0, NULL, NULL, ML_DOMAIN};

/* ---- SVMRegressor -------------------------------------------------------------------- */

typedef struct {
    svm_kernel k;
    int svc, pt, one_class;
    int64_t F, nvec;
    float *sv, *coef, *rho;
} svmr;

static void svmr_destroy(nnc_node *n)
{
    svmr *s = n->state;
    if (s) {
        free(s->sv);
        free(s->coef);
        free(s->rho);
    }
    ml_free_state(n);
}

static int svmr_create(nnc_node *n, nnc_err *e)
{
    TRY(ml_check_numeric(n, 0, e));
    TRY(ml_check_out(n, 0, ML_OUT_F32, e));
    svmr *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(parse_kernel(n, &s->k, e));
    TRY(ml_post_transform(n, &s->pt, e));
    int64_t nsv, nco, nrho, oc;
    TRY(nnc_attr_int(n, "n_supports", 0, &s->nvec, e));
    TRY(nnc_attr_int(n, "one_class", 0, &oc, e));
    s->one_class = oc != 0;
    TRY(ml_attr_floats(n, "support_vectors", 0, &s->sv, &nsv, e));
    TRY(ml_attr_floats(n, "coefficients", 1, &s->coef, &nco, e));
    TRY(ml_attr_floats(n, "rho", 1, &s->rho, &nrho, e));
    if (nrho < 1 || nco < 1)
        return nnc_node_fail(e, n, "attributes 'coefficients' and 'rho' must not be empty");
    if (s->nvec < 0) return nnc_node_fail(e, n, "attribute 'n_supports' is negative");
    s->svc = s->nvec > 0;
    if (s->svc) {
        if (nsv < 1 || nsv % s->nvec)
            return nnc_node_fail(e, n,
                                 "attribute 'support_vectors' has %lld values, not a "
                                 "multiple of n_supports = %lld",
                                 (long long)nsv, (long long)s->nvec);
        s->F = nsv / s->nvec;
        if (nco != s->nvec)
            return nnc_node_fail(
                e, n, "attribute 'coefficients' has %lld values for %lld support vectors",
                (long long)nco, (long long)s->nvec);
    } else {
        s->k.kernel = K_LINEAR;
        s->F = nco;
    }
    return static_features(n, s->F, e);
}

static int svmr_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    svmr *s = n->state;
    int64_t N, F;
    TRY(ml_rows(n, in[0], &N, &F, e));
    TRY(check_features(n, F, s->F, e));
    out[0].dtype = DT_F32;
    out[0].ndim = 2;
    out[0].dims[0] = N;
    out[0].dims[1] = 1;
    return NNC_OK;
}

static int svmr_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    svmr *s = n->state;
    int64_t N, F;
    TRY(ml_rows(n, in[0], &N, &F, e));
    TRY(check_features(n, F, s->F, e));
    float *xb = malloc((size_t)(F ? F : 1) * sizeof(float)), *y = out[0].data;
    if (!xb) return nnc_node_fail(e, n, "out of memory");
    for (int64_t r = 0; r < N; r++) {
        const float *xr = row_f(in[0], r, F, xb);
        float v;
        if (s->svc) {
            float sum = 0.f;
            for (int64_t q = 0; q < s->nvec; q++)
                sum += kernel_dot(&s->k, xr, s->sv + q * F, F) * s->coef[q];
            v = sum + s->rho[0];
        } else {
            v = kernel_dot(&s->k, xr, s->coef, F) + s->rho[0];
        }
        if (s->one_class) v = v > 0.f ? 1.f : -1.f;
        /* post_transform is read and checked but not applied: onnxruntime's SVMRegressor
         * (svmregressor.cc) never applies it, PROBIT included, and users compare with it */
        y[r] = v;
    }
    free(xb);
    return NNC_OK;
}

const nnc_op nnc_op_ml_svmregressor = {
    "SVMRegressor", 1, 1,    1,    1,        svmr_create, svmr_infer, svmr_run,
    svmr_destroy,   0, NULL, NULL, ML_DOMAIN};
