/* Every op this backend runs. */
#include "nnc.h"
#include "ops.h"

// clang-format off: X-macro lists, packed by hand
#define OPS(X) X(conv) X(gemm) X(matmul) X(maxpool) X(averagepool) X(globalaveragepool) \
    X(globalmaxpool) X(lrn) X(add) X(sub) X(mul) X(div) X(pow) X(equal) X(greater) X(less) \
    X(mod) X(sum) X(max) X(min) X(mean) X(where) X(relu) X(leakyrelu) X(sigmoid) X(tanh) \
    X(clip) X(erf) X(gelu) X(sqrt) X(exp) X(log) X(neg) X(abs) X(reciprocal) X(floor) X(ceil) \
    X(softplus) X(identity) X(dropout) X(cast) X(batchnorm) X(softmax) X(logsoftmax) \
    X(layernorm) X(reducesum) X(reducemean) X(reducemax) X(reducemin) X(reduceprod) \
    X(reducel2) X(reducesumsquare) X(reducel1) X(reducelogsumexp) X(argmax) X(argmin) \
    X(reshape) X(flatten) X(squeeze) X(unsqueeze) X(transpose) X(expand) X(slice) X(concat) \
    X(split) X(gather) X(shape) X(constantofshape) X(constant) X(pad) \
    X(castlike) X(greaterorequal) X(lessorequal) X(and) X(or) X(xor) X(bitwiseand) X(bitwiseor) \
    X(bitwisexor) X(bitshift) X(sign) X(round) X(isnan) X(isinf) X(not) X(bitwisenot) X(sin) \
    X(cos) X(tan) X(asin) X(acos) X(atan) X(sinh) X(cosh) X(asinh) X(acosh) X(atanh) \
    X(hardsigmoid) X(hardswish) X(elu) X(selu) X(celu) X(mish) X(softsign) X(thresholdedrelu) \
    X(shrink) X(swish) X(size) X(range) X(trilu) X(cumsum) X(cumprod) X(tile) X(gatherelements) X(scatterelements) \
    X(gathernd) X(scatternd) X(onehot) X(nonzero) X(topk) X(compress) X(reversesequence) X(hardmax) X(unique) X(reducelogsum) X(prelu) \
    X(resize) X(upsample) X(convtranspose) X(instancenorm) X(groupnorm) X(lpnorm) X(meanvariancenormalization) \
    X(rnn) X(gru) X(lstm) X(quantizelinear) X(dequantizelinear) X(dynamicquantizelinear) \
    X(matmulinteger) X(convinteger) X(qlinearmatmul) X(qlinearconv) X(einsum) \
    X(nonmaxsuppression) X(roialign) X(gridsample) \
    X(maxunpool) X(col2im) X(det) X(dft) X(stft) X(maxroipool)
/* ai.onnx.ml: the ops scikit-learn converters emit (op_ml_*.c). */
#define ML_OPS(X) X(ml_linearclassifier) X(ml_linearregressor) X(ml_svmclassifier) \
    X(ml_svmregressor) X(ml_treeensembleclassifier) X(ml_treeensembleregressor) \
    X(ml_treeensemble) X(ml_scaler) X(ml_normalizer) X(ml_binarizer) \
    X(ml_arrayfeatureextractor) X(ml_labelencoder) X(ml_onehotencoder) X(ml_imputer) \
    X(ml_zipmap) X(ml_categorymapper)

/* The long tail of the node suite: op_pool.c (LpPool), op_index.c (Scatter), op_generate.c,
 * op_tensorscatter.c, op_tfidf.c, op_deformconv.c; ai.onnx.preview.training optimizers in
 * op_training.c. */
#define TAIL_OPS(X) X(lppool) X(scatter) X(eyelike) X(melweightmatrix) X(tensorscatter) \
    X(tfidfvectorizer) X(deformconv) X(tr_adagrad) X(tr_adam) X(tr_momentum)

/* Ops of the 8-, 4- and 2-bit types (op_cast.c). */
#define DTYPE_OPS(X) X(bitcast)

#define DECL(x) extern const nnc_op nnc_op_##x;
OPS(DECL)
ML_OPS(DECL)
TAIL_OPS(DECL)
DTYPE_OPS(DECL)
// clang-format on
#define REF(x) &nnc_op_##x,
const nnc_op *const nnc_all_ops[] = {OPS(REF) ML_OPS(REF) TAIL_OPS(REF) DTYPE_OPS(REF) NULL};

static int default_domain(const char *d)
{
    return !d || !d[0] || !strcmp(d, "ai.onnx");
}

const nnc_op *nnc_find_op_in(const char *domain, const char *type)
{
    int dflt = default_domain(domain);
    for (const nnc_op *const *p = nnc_all_ops; *p; p++) {
        if (strcmp((*p)->type, type)) continue;
        if (dflt ? default_domain((*p)->domain)
                 : !default_domain((*p)->domain) && !strcmp((*p)->domain, domain))
            return *p;
    }
    return NULL;
}

const nnc_op *nnc_find_op(const char *type)
{
    return nnc_find_op_in(NULL, type);
}
