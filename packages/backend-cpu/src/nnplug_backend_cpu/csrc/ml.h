/* Shared pieces of the ai.onnx.ml kernels (op_ml_*.c): score post-transforms as onnxruntime
 * applies them, attribute arrays of any length, and reading numeric inputs. */
#ifndef NNC_ML_H
#define NNC_ML_H
#include "nnc.h"

#define ML_DOMAIN "ai.onnx.ml"

enum { PT_NONE = 0, PT_LOGISTIC, PT_SOFTMAX, PT_SOFTMAX_ZERO, PT_PROBIT };

/* post_transform string attribute (default NONE); an unknown name is an error. */
int ml_post_transform(const nnc_node *n, int *out, nnc_err *e);
float ml_logistic(float v);
float ml_probit(float v);
void ml_softmax(float *v, int64_t k);
void ml_softmax_zero(float *v, int64_t k);
/* Writes k scores (k >= 1) to z after the post-transform; a single score becomes two columns
 * as add_second says (0/1: [1-s, s]; 2/3: [-s, s]; both LOGISTIC: [logistic(-s), logistic(s)];
 * -1: one column).
 * Returns the number of values written. */
int ml_write_scores(float *s, int k, int pt, int add_second, float *z);
/* Regression targets in place: one target gets PROBIT only (every other transform leaves a
 * single score as it is, as in onnxruntime), several get ml_write_scores' transform. */
int ml_targets_transformed(int64_t T, int pt);
void ml_transform_targets(float *z, int64_t T, int pt);

/* Attribute arrays, malloc'd (free them); *count = -1 when the attribute is absent. */
int ml_attr_reals(const nnc_node *n, const char *name, double **out, int64_t *count, nnc_err *e);
int ml_attr_int_list(const nnc_node *n, const char *name, int64_t **out, int64_t *count,
                     nnc_err *e);
int ml_attr_string_list(const nnc_node *n, const char *name, const char *const **out,
                        int64_t *count, nnc_err *e);
/* A reals attribute as a malloc'd float array (free it); absent: an error when required, else
 * an empty array with *count = 0. */
int ml_attr_floats(const nnc_node *n, const char *name, int required, float **out, int64_t *count,
                   nnc_err *e);
/* Number of values of a list attribute, 0 when absent. */
int64_t ml_attr_len(const nnc_node *n, const char *name);
/* A reals attribute that may come as `name` (floats) or `name`_as_tensor (float or double
 * tensor): the tensor wins, as in onnxruntime. */
int ml_attr_reals2(const nnc_node *n, const char *name, double **out, int64_t *count, nnc_err *e);

/* Input 0 must be float32/float64/int64/int32 when its type is known. */
int ml_check_numeric(const nnc_node *n, int i, nnc_err *e);
/* X of rank 1 ([F], one row) or 2 ([N, F]). */
int ml_rows(const nnc_node *n, const nnc_tensor *x, int64_t *N, int64_t *F, nnc_err *e);
/* Element i as float, the way onnxruntime casts inputs to float. */
static inline float ml_at_f(const nnc_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case DT_F32: return ((const float *)t->data)[i];
    case DT_F64: return (float)((const double *)t->data)[i];
    case DT_I64: return (float)((const int64_t *)t->data)[i];
    case DT_I32: return (float)((const int32_t *)t->data)[i];
    default: return 0.f;
    }
}
static inline double ml_at_d(const nnc_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case DT_F32: return ((const float *)t->data)[i];
    case DT_F64: return ((const double *)t->data)[i];
    case DT_I64: return (double)((const int64_t *)t->data)[i];
    case DT_I32: return (double)((const int32_t *)t->data)[i];
    default: return 0.0;
    }
}
/* A declared output type that is known must be one of those given (0-terminated). */
int ml_check_out(const nnc_node *n, int j, const int *allowed, nnc_err *e);
extern const int ML_OUT_F32[], ML_OUT_I64[]; /* {DT_F32, 0} and {DT_I64, 0} for ml_check_out */
/* Declines classifiers with string class labels (the cpu backend carries no string tensors). */
int ml_no_string_labels(const nnc_node *n, const char *attr, nnc_err *e);
void ml_free_state(nnc_node *n);
#endif
