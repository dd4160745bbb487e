/* Shared pieces of the ai.onnx.ml kernels, see ml.h. */
#include "ml.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int ml_post_transform(const nnc_node *n, int *out, nnc_err *e)
{
    char s[32];
    TRY(nnc_attr_str(n, "post_transform", "NONE", s, sizeof s, e));
    static const char *names[] = {"NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return NNC_OK;
        }
    return nnc_node_fail(e, n,
                         "attribute 'post_transform' is '%s'; expected NONE, LOGISTIC, SOFTMAX, "
                         "SOFTMAX_ZERO or PROBIT",
                         s);
}

float ml_logistic(float v)
{
    float a = 1.f / (1.f + expf(-fabsf(v)));
    return v < 0 ? 1.f - a : a;
}

/* onnxruntime's approximation of erfinv (Winitzki), kept so probabilities match it. */
static float erfinv_approx(float x)
{
    float sgn = x < 0 ? -1.0f : 1.0f;
    x = (1 - x) * (1 + x);
    float lg = logf(x);
    float v = 2 / (3.14159f * 0.147f) + 0.5f * lg;
    float v2 = 1 / (0.147f) * lg;
    float v3 = -v + sqrtf(v * v - v2);
    return sgn * sqrtf(v3);
}

float ml_probit(float v)
{
    return 1.41421356f * erfinv_approx(2 * v - 1);
}

void ml_softmax(float *v, int64_t k)
{
    float mx = -FLT_MAX, sum = 0.f;
    for (int64_t i = 0; i < k; i++)
        if (v[i] > mx) mx = v[i];
    for (int64_t i = 0; i < k; i++) {
        v[i] = expf(v[i] - mx);
        sum += v[i];
    }
    for (int64_t i = 0; i < k; i++) v[i] /= sum;
}

void ml_softmax_zero(float *v, int64_t k)
{
    float mx = -FLT_MAX, sum = 0.f;
    for (int64_t i = 0; i < k; i++)
        if (v[i] > mx) mx = v[i];
    float eneg = expf(-mx);
    for (int64_t i = 0; i < k; i++) {
        if (v[i] > 0.0000001f || v[i] < -0.0000001f) {
            v[i] = expf(v[i] - mx);
            sum += v[i];
        } else v[i] *= eneg;
    }
    for (int64_t i = 0; i < k; i++) v[i] /= sum;
}

int ml_write_scores(float *s, int k, int pt, int add_second, float *z)
{
    if (k >= 2) {
        switch (pt) {
        case PT_PROBIT:
            for (int i = 0; i < k; i++) z[i] = ml_probit(s[i]);
            return k;
        case PT_LOGISTIC:
            for (int i = 0; i < k; i++) z[i] = ml_logistic(s[i]);
            return k;
        case PT_SOFTMAX: ml_softmax(s, k); break;
        case PT_SOFTMAX_ZERO: ml_softmax_zero(s, k); break;
        default: break;
        }
        for (int i = 0; i < k; i++) z[i] = s[i];
        return k;
    }
    if (k != 1) return 0;
    float v = s[0];
    if (pt == PT_PROBIT) {
        z[0] = ml_probit(v);
        return 1;
    }
    switch (add_second) {
    case 0:
    case 1:
        /* LOGISTIC applies here too since onnxruntime 1.26 (its issue 27533: a binary tree
         * classifier whose weights are all for class 0, e.g. leaf-only trees, gave [1 - s, s]) */
        if (pt == PT_LOGISTIC) {
            z[0] = ml_logistic(-v);
            z[1] = ml_logistic(v);
        } else {
            z[0] = 1.f - v;
            z[1] = v;
        }
        return 2;
    case 2:
    case 3:
        if (pt == PT_LOGISTIC) {
            z[0] = ml_logistic(-v);
            z[1] = ml_logistic(v);
        } else {
            z[0] = -v;
            z[1] = v;
        }
        return 2;
    default: z[0] = v; return 1;
    }
}

int ml_targets_transformed(int64_t T, int pt)
{
    return T == 1 ? pt == PT_PROBIT : pt != PT_NONE;
}

void ml_transform_targets(float *z, int64_t T, int pt)
{
    if (T == 1) {
        if (pt == PT_PROBIT) z[0] = ml_probit(z[0]);
    } else if (T > 1 && pt != PT_NONE) ml_write_scores(z, (int)T, pt, -1, z);
}

/* ---- attributes ---------------------------------------------------------------------- */

int ml_attr_floats(const nnc_node *n, const char *name, int required, float **out, int64_t *count,
                   nnc_err *e)
{
    double *d;
    *out = NULL;
    TRY(ml_attr_reals(n, name, &d, count, e));
    if (*count < 0) {
        if (required) return nnc_node_fail(e, n, "attribute '%s' is required", name);
        *count = 0;
    }
    *out = malloc((size_t)(*count ? *count : 1) * sizeof(float));
    if (!*out) {
        free(d);
        return nnc_node_fail(e, n, "out of memory");
    }
    for (int64_t i = 0; i < *count; i++) (*out)[i] = (float)d[i];
    free(d);
    return NNC_OK;
}

int64_t ml_attr_len(const nnc_node *n, const char *name)
{
    const nnc_attr *a = nnc_attr_find(n, name);
    return a && a->count > 0 ? a->count : 0;
}

int ml_attr_reals(const nnc_node *n, const char *name, double **out, int64_t *count, nnc_err *e)
{
    const nnc_attr *a = nnc_attr_find(n, name);
    *out = NULL;
    *count = -1;
    if (!a) return NNC_OK;
    int64_t k = a->count < 0 ? 0 : a->count;
    int f32 = a->kind == AK_FLOATS || a->kind == AK_FLOAT ||
              (a->kind == AK_TENSOR && a->tdtype == DT_F32);
    int f64 = a->kind == AK_TENSOR && a->tdtype == DT_F64;
    if (!f32 && !f64)
        return nnc_node_unsup(e, n, "attribute '%s' must be floats or a float/double tensor", name);
    if (k && !a->data) return nnc_node_fail(e, n, "attribute '%s' has no data", name);
    double *d = malloc((size_t)(k ? k : 1) * sizeof *d);
    if (!d) return nnc_node_fail(e, n, "out of memory reading attribute '%s'", name);
    for (int64_t i = 0; i < k; i++)
        d[i] = f32 ? ((const float *)a->data)[i] : ((const double *)a->data)[i];
    *out = d;
    *count = k;
    return NNC_OK;
}

int ml_attr_reals2(const nnc_node *n, const char *name, double **out, int64_t *count, nnc_err *e)
{
    char tn[96];
    snprintf(tn, sizeof tn, "%s_as_tensor", name);
    if (nnc_attr_find(n, tn)) return ml_attr_reals(n, tn, out, count, e);
    return ml_attr_reals(n, name, out, count, e);
}

int ml_attr_int_list(const nnc_node *n, const char *name, int64_t **out, int64_t *count, nnc_err *e)
{
    const nnc_attr *a = nnc_attr_find(n, name);
    *out = NULL;
    *count = -1;
    if (!a) return NNC_OK;
    int64_t k = a->count < 0 ? 0 : a->count;
    int i64 =
        a->kind == AK_INTS || a->kind == AK_INT || (a->kind == AK_TENSOR && a->tdtype == DT_I64);
    if (!i64) return nnc_node_fail(e, n, "attribute '%s' must be a list of ints", name);
    if (k && !a->data) return nnc_node_fail(e, n, "attribute '%s' has no data", name);
    int64_t *d = malloc((size_t)(k ? k : 1) * sizeof *d);
    if (!d) return nnc_node_fail(e, n, "out of memory reading attribute '%s'", name);
    if (k) memcpy(d, a->data, (size_t)k * sizeof *d);
    *out = d;
    *count = k;
    return NNC_OK;
}

int ml_attr_string_list(const nnc_node *n, const char *name, const char *const **out,
                        int64_t *count, nnc_err *e)
{
    const nnc_attr *a = nnc_attr_find(n, name);
    *out = NULL;
    *count = -1;
    if (!a) return NNC_OK;
    if (a->kind != AK_STRINGS)
        return nnc_node_fail(e, n, "attribute '%s' must be a list of strings", name);
    int64_t k = a->count < 0 ? 0 : a->count;
    const char *const *s = a->data;
    for (int64_t i = 0; i < k; i++)
        if (!s || !s[i]) return nnc_node_fail(e, n, "attribute '%s' has no data", name);
    *out = s;
    *count = k;
    return NNC_OK;
}

/* ---- inputs -------------------------------------------------------------------------- */

int ml_check_numeric(const nnc_node *n, int i, nnc_err *e)
{
    static const int num[] = {DT_F32, DT_F64, DT_I64, DT_I32, 0};
    TRY(nnc_check_dtype(n, i, num, e));
    if (i < n->nin && n->vin[i] && n->vin[i]->ndim > 2)
        return nnc_node_unsup(e, n, "input %d has rank %d; this op takes rank 1 or 2", i,
                              n->vin[i]->ndim);
    return NNC_OK;
}

int ml_rows(const nnc_node *n, const nnc_tensor *x, int64_t *N, int64_t *F, nnc_err *e)
{
    if (x->dtype != DT_F32 && x->dtype != DT_F64 && x->dtype != DT_I64 && x->dtype != DT_I32)
        return nnc_node_fail(e, n,
                             "input X has element type %s; expected float, double, int64 or int32",
                             nnc_dtname(x->dtype));
    if (x->ndim == 1) {
        *N = 1;
        *F = x->dims[0];
        return NNC_OK;
    }
    if (x->ndim == 2) {
        *N = x->dims[0];
        *F = x->dims[1];
        return NNC_OK;
    }
    return nnc_node_fail(e, n, "input X has rank %d; expected rank 1 or 2", x->ndim);
}

int ml_check_out(const nnc_node *n, int j, const int *allowed, nnc_err *e)
{
    if (j >= n->nout || !n->vout[j] || n->vout[j]->dtype == DT_UNDEF) return NNC_OK;
    for (const int *p = allowed; *p; p++)
        if (*p == n->vout[j]->dtype) return NNC_OK;
    return nnc_node_unsup(e, n, "output %d is declared %s, which this op does not produce here", j,
                          nnc_dtname(n->vout[j]->dtype));
}

const int ML_OUT_F32[] = {DT_F32, 0};
const int ML_OUT_I64[] = {DT_I64, 0};

int ml_no_string_labels(const nnc_node *n, const char *attr, nnc_err *e)
{
    if (ml_attr_len(n, attr) > 0)
        return nnc_node_unsup(
            e, n,
            "string class labels ('%s') run when the label output is typed as a string "
            "tensor (it is not typed so here)",
            attr);
    return NNC_OK;
}

void ml_free_state(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}
