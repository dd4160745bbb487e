/* Every op this backend runs. */
#include "nnc.h"
#include "ops.h"

#define OPS(X) X(conv) X(gemm) X(matmul) X(maxpool) X(averagepool) X(globalaveragepool) \
    X(globalmaxpool) X(lrn) X(add) X(sub) X(mul) X(div) X(pow) X(equal) X(greater) X(less) \
    X(mod) X(sum) X(max) X(min) X(mean) X(where) X(relu) X(leakyrelu) X(sigmoid) X(tanh) \
    X(clip) X(erf) X(gelu) X(sqrt) X(exp) X(log) X(neg) X(abs) X(reciprocal) X(floor) X(ceil) \
    X(softplus) X(identity) X(dropout) X(cast) X(batchnorm) X(softmax) X(logsoftmax) \
    X(layernorm) X(reducesum) X(reducemean) X(reducemax) X(reducemin) X(reduceprod) \
    X(reducel2) X(reducesumsquare) X(reducel1) X(reducelogsumexp) X(argmax) X(argmin) \
    X(reshape) X(flatten) X(squeeze) X(unsqueeze) X(transpose) X(expand) X(slice) X(concat) \
    X(split) X(gather) X(shape) X(constantofshape) X(constant) X(pad) \
    X(resize) X(upsample) X(convtranspose) X(instancenorm) X(groupnorm) X(lpnorm) \
    X(rnn) X(gru) X(lstm) X(quantizelinear) X(dequantizelinear) X(dynamicquantizelinear) \
    X(matmulinteger) X(convinteger) X(qlinearmatmul) X(qlinearconv) X(einsum) \
    X(nonmaxsuppression) X(roialign) X(gridsample) \
    X(maxunpool) X(col2im) X(det) X(dft) X(stft) X(maxroipool)

#define DECL(x) extern const nnc_op nnc_op_##x;
OPS(DECL)
#define REF(x) &nnc_op_##x,
const nnc_op *const nnc_all_ops[] = {OPS(REF) NULL};

const nnc_op *nnc_find_op(const char *type)
{
    for (const nnc_op *const *p = nnc_all_ops; *p; p++)
        if (!strcmp((*p)->type, type)) return *p;
    return NULL;
}
