/* ai.onnx.ml feature transforms: Scaler, Normalizer, Binarizer, ArrayFeatureExtractor,
 * LabelEncoder (numeric keys and values), OneHotEncoder (integer categories), Imputer.
 * ZipMap and CategoryMapper are declined with the reason: the first makes a sequence of maps,
 * the second strings, and nnplug values here are numeric tensors only. */
#include "ml.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>


static int64_t last_dim(const nnc_tensor *t)
{
    return t->ndim == 1 ? t->dims[0] : t->dims[1];
}

/* ---- Scaler -------------------------------------------------------------------------- */

typedef struct {
    int64_t noff, nscale;
    double *offset, *scale;
} scaler;

static void scaler_destroy(nnc_node *n)
{
    scaler *s = n->state;
    if (s) {
        free(s->offset);
        free(s->scale);
    }
    ml_free_state(n);
}

static int scaler_sizes(const nnc_node *n, const scaler *s, int64_t stride, nnc_err *e)
{
    if ((s->noff == 1 && s->nscale == 1) || (s->noff == stride && s->nscale == stride))
        return NNC_OK;
    return nnc_node_fail(
        e, n,
        "attributes 'offset' (%lld values) and 'scale' (%lld) must both have 1 value or both "
        "one per feature (%lld)",
        (long long)s->noff, (long long)s->nscale, (long long)stride);
}

static int scaler_create(nnc_node *n, nnc_err *e)
{
    TRY(ml_check_numeric(n, 0, e));
    TRY(ml_check_out(n, 0, ML_OUT_F32, e));
    scaler *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    TRY(ml_attr_reals(n, "offset", &s->offset, &s->noff, e));
    TRY(ml_attr_reals(n, "scale", &s->scale, &s->nscale, e));
    if (s->noff < 1 || s->nscale < 1)
        return nnc_node_fail(e, n, "attributes 'offset' and 'scale' are required");
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 1 && x->ndim <= 2 && x->dims[x->ndim == 1 ? 0 : 1] >= 0)
        return scaler_sizes(n, s, x->dims[x->ndim == 1 ? 0 : 1], e);
    return NNC_OK;
}

static int f32_like_input(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int64_t N, F;
    TRY(ml_rows(n, in[0], &N, &F, e));
    out->dtype = DT_F32;
    out->ndim = in[0]->ndim;
    memcpy(out->dims, in[0]->dims, sizeof out->dims);
    return NNC_OK;
}

static int scaler_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(f32_like_input(n, in, out, e));
    return scaler_sizes(n, n->state, last_dim(in[0]), e);
}

static int scaler_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    scaler *s = n->state;
    int64_t stride = last_dim(in[0]), k = nnc_numel(in[0]);
    TRY(scaler_sizes(n, s, stride, e));
    float *y = out->data;
    int per = s->noff != 1 || stride == 1;
    for (int64_t i = 0; i < k; i++) {
        int64_t c = per ? i % stride : 0;
        if (in[0]->dtype == DT_F64)
            y[i] = (float)((((const double *)in[0]->data)[i] - (double)(float)s->offset[c]) *
                           (double)(float)s->scale[c]);
        else y[i] = (ml_at_f(in[0], i) - (float)s->offset[c]) * (float)s->scale[c];
    }
    return NNC_OK;
}

const nnc_op nnc_op_ml_scaler = {
    "Scaler",       1, 1,    1,    1,        scaler_create, scaler_infer, scaler_run,
    scaler_destroy, 0, NULL, NULL, ML_DOMAIN};

/* ---- Normalizer ---------------------------------------------------------------------- */

enum { NORM_MAX, NORM_L1, NORM_L2 };

static int norm_create(nnc_node *n, nnc_err *e)
{
    TRY(ml_check_numeric(n, 0, e));
    TRY(ml_check_out(n, 0, ML_OUT_F32, e));
    char s[16];
    TRY(nnc_attr_str(n, "norm", "MAX", s, sizeof s, e));
    int *k = malloc(sizeof *k);
    if (!k) return nnc_node_fail(e, n, "out of memory");
    n->state = k;
    if (!strcmp(s, "MAX")) *k = NORM_MAX;
    else if (!strcmp(s, "L1")) *k = NORM_L1;
    else if (!strcmp(s, "L2")) *k = NORM_L2;
    else return nnc_node_fail(e, n, "attribute 'norm' is '%s'; expected MAX, L1 or L2", s);
    return NNC_OK;
}

/* x*x and |x| in the input type, as onnxruntime computes them, then as float. */
static float sq_f(const nnc_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case DT_F64: {
        double v = ((const double *)t->data)[i];
        return (float)(v * v);
    }
    case DT_I64: {
        int64_t v = ((const int64_t *)t->data)[i];
        return (float)(v * v);
    }
    case DT_I32: {
        int32_t v = ((const int32_t *)t->data)[i];
        return (float)(v * v);
    }
    default: {
        float v = ((const float *)t->data)[i];
        return v * v;
    }
    }
}

static float abs_f(const nnc_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case DT_F64: return (float)fabs(((const double *)t->data)[i]);
    case DT_I64: return (float)llabs(((const int64_t *)t->data)[i]);
    case DT_I32: return (float)abs(((const int32_t *)t->data)[i]);
    default: return fabsf(((const float *)t->data)[i]);
    }
}

static int norm_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    int kind = *(int *)n->state;
    int64_t N, F;
    TRY(ml_rows(n, in[0], &N, &F, e));
    float *y = out->data;
    for (int64_t r = 0; r < N; r++) {
        const int64_t o = r * F;
        float acc = kind == NORM_MAX ? -3.402823466e+38f : 0.f;
        for (int64_t f = 0; f < F; f++) {
            if (kind == NORM_MAX) {
                float v = ml_at_f(in[0], o + f);
                acc = acc > v ? acc : v;
            } else if (kind == NORM_L1) acc += abs_f(in[0], o + f);
            else {
                y[o + f] = sq_f(in[0], o + f);
                acc += y[o + f];
            }
        }
        for (int64_t f = 0; f < F; f++) {
            float v = ml_at_f(in[0], o + f);
            if (acc == 0.f) y[o + f] = v;
            else if (kind == NORM_L2)
                y[o + f] = v < 0 ? -sqrtf(y[o + f] / acc) : sqrtf(y[o + f] / acc);
            else y[o + f] = v / acc;
        }
    }
    return NNC_OK;
}

const nnc_op nnc_op_ml_normalizer = {
    "Normalizer",  1, 1,    1,    1,        norm_create, f32_like_input, norm_run,
    ml_free_state, 0, NULL, NULL, ML_DOMAIN};

/* ---- Binarizer ----------------------------------------------------------------------- */

static int bin_create(nnc_node *n, nnc_err *e)
{
    static const int num[] = {DT_F32, DT_F64, DT_I64, DT_I32, 0};
    TRY(nnc_check_dtype(n, 0, num, e));
    float *t = malloc(sizeof *t);
    if (!t) return nnc_node_fail(e, n, "out of memory");
    n->state = t;
    return nnc_attr_float(n, "threshold", 0.f, t, e);
}

static int same_as_input(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    if (in[0]->dtype != DT_F32 && in[0]->dtype != DT_F64 && in[0]->dtype != DT_I64 &&
        in[0]->dtype != DT_I32)
        return nnc_node_fail(e, n,
                             "input has element type %s; expected float, double, int64 or int32",
                             nnc_dtname(in[0]->dtype));
    *out = *in[0];
    out->data = NULL;
    return NNC_OK;
}

static int bin_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    (void)e;
    float t = *(float *)n->state;
    int64_t k = nnc_numel(in[0]);
    switch (in[0]->dtype) {
    case DT_F32:
        for (int64_t i = 0; i < k; i++)
            ((float *)out->data)[i] = ((const float *)in[0]->data)[i] > t ? 1.f : 0.f;
        break;
    case DT_F64:
        for (int64_t i = 0; i < k; i++)
            ((double *)out->data)[i] = ((const double *)in[0]->data)[i] > t ? 1.0 : 0.0;
        break;
    case DT_I64:
        for (int64_t i = 0; i < k; i++)
            ((int64_t *)out->data)[i] = (float)((const int64_t *)in[0]->data)[i] > t;
        break;
    default:
        for (int64_t i = 0; i < k; i++)
            ((int32_t *)out->data)[i] = (float)((const int32_t *)in[0]->data)[i] > t;
        break;
    }
    return NNC_OK;
}

const nnc_op nnc_op_ml_binarizer = {
    "Binarizer",   1, 1,    1,    1,        bin_create, same_as_input, bin_run,
    ml_free_state, 0, NULL, NULL, ML_DOMAIN};

/* ---- ArrayFeatureExtractor ----------------------------------------------------------- */

static int afe_create(nnc_node *n, nnc_err *e)
{
    static const int num[] = {DT_F32, DT_F64, DT_I64, DT_I32, 0}, idx[] = {DT_I64, 0};
    TRY(nnc_check_dtype(n, 0, num, e));
    return nnc_check_dtype(n, 1, idx, e);
}

static int afe_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    if (in[0]->ndim < 1) return nnc_node_fail(e, n, "input X must have rank 1 or more");
    if (in[1]->dtype != DT_I64) return nnc_node_fail(e, n, "the indices must be int64");
    int64_t k = nnc_numel(in[1]);
    if (k < 1) return nnc_node_fail(e, n, "the indices are empty");
    out->dtype = in[0]->dtype;
    if (in[0]->ndim == 1) {
        out->ndim = 2;
        out->dims[0] = 1;
        out->dims[1] = k;
        return NNC_OK;
    }
    out->ndim = in[0]->ndim;
    memcpy(out->dims, in[0]->dims, sizeof out->dims);
    out->dims[out->ndim - 1] = k;
    return NNC_OK;
}

static int afe_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    const int64_t *idx = in[1]->data;
    int64_t k = nnc_numel(in[1]), stride = in[0]->dims[in[0]->ndim - 1],
            rows = nnc_numel(in[0]) / (stride ? stride : 1);
    for (int64_t j = 0; j < k; j++)
        if (idx[j] < 0 || idx[j] >= stride)
            return nnc_node_fail(e, n,
                                 "index %lld is out of range for the last dimension of X (%lld)",
                                 (long long)idx[j], (long long)stride);
    if (!stride) return NNC_OK;
    size_t sz = nnc_dtsize(in[0]->dtype);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++)
            memcpy((char *)out->data + (r * k + j) * (int64_t)sz,
                   (const char *)in[0]->data + (r * stride + idx[j]) * (int64_t)sz, sz);
    return NNC_OK;
}

const nnc_op nnc_op_ml_arrayfeatureextractor = {"ArrayFeatureExtractor",
                                                2,
                                                2,
                                                1,
                                                1,
                                                afe_create,
                                                afe_infer,
                                                afe_run,
                                                NULL,
                                                0,
                                                NULL,
                                                NULL,
                                                ML_DOMAIN};

/* ---- LabelEncoder -------------------------------------------------------------------- */

typedef struct {
    double key, val;
    int64_t ikey, ival, pos;
} le_pair;

typedef struct {
    int kdt, vdt, nan_keys; /* nan_keys: opset 4 matches NaN inputs to a NaN key */
    int64_t n;
    le_pair *p;             /* sorted by key, NaN keys excluded */
    int has_nan;
    le_pair nan_pair, dflt;
} labelenc;

static void le_destroy(nnc_node *n)
{
    labelenc *s = n->state;
    if (s) free(s->p);
    ml_free_state(n);
}

/* Values of a typed list attribute: "<base>_int64s" / "<base>_floats" or "<base>_tensor". */
static int le_list(const nnc_node *n, const char *base, int *dt, double **d, int64_t **iv,
                   int64_t *cnt, nnc_err *e)
{
    char name[48];
    snprintf(name, sizeof name, "%s_strings", base);
    if (ml_attr_len(n, name) > 0 || nnc_attr_find(n, name))
        return nnc_node_unsup(
            e, n,
            "string keys or values are not supported (the cpu backend carries no string tensors)");
    snprintf(name, sizeof name, "%s_tensor", base);
    const nnc_attr *t = nnc_attr_find(n, name);
    if (t) {
        if (t->kind != AK_TENSOR ||
            (t->tdtype != DT_I64 && t->tdtype != DT_F32 && t->tdtype != DT_F64))
            return nnc_node_unsup(
                e, n, "attribute '%s' must be an int64, float or double tensor here", name);
        *dt = t->tdtype;
        if (t->tdtype == DT_I64) return ml_attr_int_list(n, name, iv, cnt, e);
        return ml_attr_reals(n, name, d, cnt, e);
    }
    snprintf(name, sizeof name, "%s_int64s", base);
    if (nnc_attr_find(n, name)) {
        *dt = DT_I64;
        return ml_attr_int_list(n, name, iv, cnt, e);
    }
    snprintf(name, sizeof name, "%s_floats", base);
    if (nnc_attr_find(n, name)) {
        *dt = DT_F32;
        return ml_attr_reals(n, name, d, cnt, e);
    }
    return nnc_node_unsup(
        e, n, "no %s_int64s, %s_floats or %s_tensor attribute (string encoders are not supported)",
        base, base, base);
}

static int le_cmp_int(const void *a, const void *b)
{
    const le_pair *x = a, *y = b;
    if (x->ikey != y->ikey) return x->ikey < y->ikey ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int le_cmp_real(const void *a, const void *b)
{
    const le_pair *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int le_create(nnc_node *n, nnc_err *e)
{
    labelenc *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    if (n->opset > 0 && n->opset < 2)
        return nnc_node_unsup(
            e, n, "LabelEncoder-1 maps strings; the cpu backend carries no string tensors");
    double *kd = NULL, *vd = NULL;
    int64_t *ki = NULL, *vi = NULL, nk = -1, nv = -1;
    int rc = le_list(n, "keys", &s->kdt, &kd, &ki, &nk, e);
    if (rc == NNC_OK) rc = le_list(n, "values", &s->vdt, &vd, &vi, &nv, e);
    if (rc == NNC_OK && nk != nv)
        rc = nnc_node_fail(e, n, "there are %lld keys and %lld values", (long long)nk,
                           (long long)nv);
    if (rc == NNC_OK && !(s->p = malloc((size_t)(nk > 0 ? nk : 1) * sizeof *s->p)))
        rc = nnc_node_fail(e, n, "out of memory");
    s->nan_keys = n->opset >= 4;
    for (int64_t i = 0; rc == NNC_OK && i < nk; i++) {
        le_pair q;
        q.ikey = ki ? ki[i] : 0;
        q.key = ki ? (double)ki[i] : (s->kdt == DT_F32 ? (double)(float)kd[i] : kd[i]);
        q.ival = vi ? vi[i] : 0;
        q.val = vi ? (double)vi[i] : (s->vdt == DT_F32 ? (double)(float)vd[i] : vd[i]);
        q.pos = i;
        if (!ki && isnan(q.key)) {
            if (!s->has_nan) s->nan_pair = q;
            s->has_nan = 1;
            continue;
        }
        s->p[s->n++] = q;
    }
    free(kd);
    free(vd);
    free(ki);
    free(vi);
    TRY(rc);
    /* by key, equal keys in their given order: the first one wins, as in onnxruntime */
    qsort(s->p, (size_t)s->n, sizeof *s->p, s->kdt == DT_I64 ? le_cmp_int : le_cmp_real);
    /* defaults */
    s->dflt.ival = -1;
    s->dflt.val = -0.0;
    const nnc_attr *dt = nnc_attr_find(n, "default_tensor");
    if (dt) {
        if (dt->kind != AK_TENSOR || dt->count != 1 || !dt->data || dt->tdtype != s->vdt)
            return nnc_node_fail(
                e, n, "attribute 'default_tensor' must hold one value of the values' type");
        if (s->vdt == DT_I64) s->dflt.ival = *(const int64_t *)dt->data;
        else if (s->vdt == DT_F32) s->dflt.val = *(const float *)dt->data;
        else s->dflt.val = *(const double *)dt->data;
    } else if (s->vdt == DT_I64) {
        TRY(nnc_attr_int(n, "default_int64", -1, &s->dflt.ival, e));
    } else {
        float f;
        TRY(nnc_attr_float(n, "default_float", -0.0f, &f, e));
        s->dflt.val = f;
    }
    int kin[] = {s->kdt, 0}, vout[] = {s->vdt, 0};
    TRY(nnc_check_dtype(n, 0, kin, e));
    return ml_check_out(n, 0, vout, e);
}

static int le_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    labelenc *s = n->state;
    if (in[0]->dtype != s->kdt)
        return nnc_node_fail(e, n, "input has element type %s; the keys are %s",
                             nnc_dtname(in[0]->dtype), nnc_dtname(s->kdt));
    *out = *in[0];
    out->dtype = s->vdt;
    out->data = NULL;
    return NNC_OK;
}

static const le_pair *le_find(const labelenc *s, const nnc_tensor *t, int64_t i)
{
    int64_t lo = 0, hi = s->n - 1;
    if (s->kdt == DT_I64) {
        int64_t k = ((const int64_t *)t->data)[i];
        while (lo <= hi) {
            int64_t mid = (lo + hi) / 2;
            if (s->p[mid].ikey < k) lo = mid + 1;
            else hi = mid - 1;
        }
        /* lo: the first pair with key >= k (of equal keys, the first given) */
        if (lo >= s->n || s->p[lo].ikey != k) return &s->dflt;
        return &s->p[lo];
    }
    double k = s->kdt == DT_F32 ? ((const float *)t->data)[i] : ((const double *)t->data)[i];
    if (isnan(k)) return s->has_nan && s->nan_keys ? &s->nan_pair : &s->dflt;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        if (s->p[mid].key < k) lo = mid + 1;
        else hi = mid - 1;
    }
    if (lo >= s->n || s->p[lo].key != k) return &s->dflt;
    return &s->p[lo];
}

static int le_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    (void)e;
    labelenc *s = n->state;
    int64_t k = nnc_numel(in[0]);
    for (int64_t i = 0; i < k; i++) {
        const le_pair *p = le_find(s, in[0], i);
        if (s->vdt == DT_I64) ((int64_t *)out->data)[i] = p->ival;
        else if (s->vdt == DT_F32) ((float *)out->data)[i] = (float)p->val;
        else ((double *)out->data)[i] = p->val;
    }
    return NNC_OK;
}

const nnc_op nnc_op_ml_labelencoder = {
    "LabelEncoder", 1, 1, 1, 1, le_create, le_infer, le_run, le_destroy, 0, NULL, NULL, ML_DOMAIN};

/* ---- OneHotEncoder ------------------------------------------------------------------- */

typedef struct {
    int64_t cat, idx;
} ohe_cat;
typedef struct {
    int64_t n;
    int zeros;
    ohe_cat *c;
} ohe;

static void ohe_destroy(nnc_node *n)
{
    ohe *s = n->state;
    if (s) free(s->c);
    ml_free_state(n);
}

static int ohe_cmp(const void *a, const void *b)
{
    const ohe_cat *x = a, *y = b;
    if (x->cat != y->cat) return x->cat < y->cat ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int ohe_create(nnc_node *n, nnc_err *e)
{
    if (ml_attr_len(n, "cats_strings") > 0)
        return nnc_node_unsup(e, n, "cats_strings needs a string input (the input is numeric)");
    static const int num[] = {DT_I64, DT_I32, DT_F32, DT_F64, 0};
    TRY(nnc_check_dtype(n, 0, num, e));
    TRY(ml_check_out(n, 0, ML_OUT_F32, e));
    ohe *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int64_t *cats, z;
    TRY(ml_attr_int_list(n, "cats_int64s", &cats, &s->n, e));
    TRY(nnc_attr_int(n, "zeros", 1, &z, e));
    s->zeros = z != 0;
    if (s->n < 1) {
        free(cats);
        return nnc_node_fail(e, n, "attribute 'cats_int64s' is required and must not be empty");
    }
    s->c = malloc((size_t)s->n * sizeof *s->c);
    if (!s->c) {
        free(cats);
        return nnc_node_fail(e, n, "out of memory");
    }
    for (int64_t i = 0; i < s->n; i++) s->c[i] = (ohe_cat){cats[i], i};
    free(cats);
    qsort(s->c, (size_t)s->n, sizeof *s->c, ohe_cmp);
    if (n->vin[0] && n->vin[0]->ndim + 1 > NNC_MAXDIM)
        return nnc_node_unsup(e, n, "input rank too large");
    return NNC_OK;
}

static int ohe_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    ohe *s = n->state;
    if (in[0]->ndim + 1 > NNC_MAXDIM) return nnc_node_unsup(e, n, "input rank too large");
    out->dtype = DT_F32;
    out->ndim = in[0]->ndim + 1;
    memcpy(out->dims, in[0]->dims, sizeof(int64_t) * (size_t)in[0]->ndim);
    out->dims[in[0]->ndim] = s->n;
    return NNC_OK;
}

/* The category index of value i, or -1. Where several equal categories exist the last wins. */
static int64_t ohe_find(const ohe *s, const nnc_tensor *t, int64_t i)
{
    int64_t v;
    if (t->dtype == DT_F32 || t->dtype == DT_F64) {
        double d = t->dtype == DT_F32 ? ((const float *)t->data)[i] : ((const double *)t->data)[i];
        if (!(d > -9.2e18 && d < 9.2e18)) return -1;
        v = (int64_t)d;
    } else {
        v = t->dtype == DT_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
    }
    int64_t lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        if (s->c[mid].cat < v) lo = mid + 1;
        else hi = mid - 1;
    }
    if (lo >= s->n || s->c[lo].cat != v) return -1;
    while (lo + 1 < s->n && s->c[lo + 1].cat == v) lo++;
    return s->c[lo].idx;
}

static int ohe_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    ohe *s = n->state;
    int64_t k = nnc_numel(in[0]);
    float *y = out->data;
    memset(y, 0, (size_t)(k * s->n) * sizeof(float));
    for (int64_t i = 0; i < k; i++) {
        int64_t c = ohe_find(s, in[0], i);
        if (c >= 0) y[i * s->n + c] = 1.f;
        else if (!s->zeros)
            return nnc_node_fail(
                e, n, "value %lld is not one of the categories and attribute 'zeros' is 0",
                (long long)i);
    }
    return NNC_OK;
}

const nnc_op nnc_op_ml_onehotencoder = {"OneHotEncoder", 1,       1,           1, 1,    ohe_create,
                                        ohe_infer,       ohe_run, ohe_destroy, 0, NULL, NULL,
                                        ML_DOMAIN};

/* ---- Imputer ------------------------------------------------------------------------- */

typedef struct {
    int dt;
    int64_t n;
    double *fv;
    int64_t *iv;
    float rf;
    int64_t ri;
} imputer;

static void imp_destroy(nnc_node *n)
{
    imputer *s = n->state;
    if (s) {
        free(s->fv);
        free(s->iv);
    }
    ml_free_state(n);
}

static int imp_create(nnc_node *n, nnc_err *e)
{
    imputer *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int64_t nf, ni;
    TRY(ml_attr_reals(n, "imputed_value_floats", &s->fv, &nf, e));
    TRY(ml_attr_int_list(n, "imputed_value_int64s", &s->iv, &ni, e));
    if ((nf > 0) == (ni > 0))
        return nnc_node_fail(
            e, n, "exactly one of 'imputed_value_floats' and 'imputed_value_int64s' must be given");
    s->dt = nf > 0 ? DT_F32 : DT_I64;
    s->n = nf > 0 ? nf : ni;
    TRY(nnc_attr_float(n, "replaced_value_float", 0.f, &s->rf, e));
    TRY(nnc_attr_int(n, "replaced_value_int64", 0, &s->ri, e));
    int in_dt[] = {s->dt, 0};
    TRY(nnc_check_dtype(n, 0, in_dt, e));
    return ml_check_out(n, 0, in_dt, e);
}

static int imp_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    imputer *s = n->state;
    if (in[0]->dtype != s->dt)
        return nnc_node_fail(e, n, "input has element type %s; the imputed values are %s",
                             nnc_dtname(in[0]->dtype), nnc_dtname(s->dt));
    if (in[0]->ndim < 1) return nnc_node_fail(e, n, "input must have rank 1 or more");
    *out = *in[0];
    out->data = NULL;
    return NNC_OK;
}

static int imp_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    (void)e;
    imputer *s = n->state;
    int64_t k = nnc_numel(in[0]), stride = last_dim(in[0]);
    int per = s->n == stride;
    if (s->dt == DT_F32) {
        const float *a = in[0]->data;
        float *y = out->data;
        for (int64_t i = 0; i < k; i++) {
            float v = (float)s->fv[per ? i % stride : 0];
            y[i] = (isnan(a[i]) && isnan(s->rf)) || a[i] == s->rf ? v : a[i];
        }
    } else {
        const int64_t *a = in[0]->data;
        int64_t *y = out->data;
        for (int64_t i = 0; i < k; i++) y[i] = a[i] == s->ri ? s->iv[per ? i % stride : 0] : a[i];
    }
    return NNC_OK;
}

const nnc_op nnc_op_ml_imputer = {"Imputer", 1,           1, 1,    1,    imp_create, imp_infer,
                                  imp_run,   imp_destroy, 0, NULL, NULL, ML_DOMAIN};

/* ---- declined ------------------------------------------------------------------------ */

static int zipmap_create(nnc_node *n, nnc_err *e)
{
    return nnc_node_unsup(
        e, n,
        "ZipMap makes a sequence of maps; nnplug values are tensors only. Convert the "
        "classifier without it (skl2onnx: options={'zipmap': False}) to get the probabilities tensor");
}

static int catmap_create(nnc_node *n, nnc_err *e)
{
    return nnc_node_unsup(
        e, n,
        "CategoryMapper maps strings to integers or back; the cpu backend carries no string "
        "tensors");
}

static int never_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    (void)in;
    (void)out;
    return nnc_node_unsup(e, n, "not supported");
}

static int never_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)in;
    (void)out;
    (void)x;
    return nnc_node_unsup(e, n, "not supported");
}

const nnc_op nnc_op_ml_zipmap = {"ZipMap",  1,    1, 1,    1,    zipmap_create, never_infer,
                                 never_run, NULL, 0, NULL, NULL, ML_DOMAIN};
const nnc_op nnc_op_ml_categorymapper = {"CategoryMapper", 1,         1,    1, 1,    catmap_create,
                                         never_infer,      never_run, NULL, 0, NULL, NULL,
                                         ML_DOMAIN};
