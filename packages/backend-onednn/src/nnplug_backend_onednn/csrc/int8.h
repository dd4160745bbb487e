/* Integer ops on oneDNN's int8 primitives, outside the float32 graphs of kernels.h: ONNX
 * MatMulInteger (u8/s8 x u8/s8 -> int32 with zero points, or float32 with the Cast after it)
 * and QLinearMatMul (the same sums, requantized to u8/s8), each a kernel of its own; and a
 * lone Cast of int32 to float32. The sums are exact, bit for bit onnxruntime's: the products are summed in int32 (VNNI's vpdpbusd, which
 * wraps; never AVX2's vpmaddubsw, which saturates pairs of products in int16, so the backend
 * claims it only on a CPU with VNNI) and the zero points are taken out after, in integers. */
#ifndef NNPLUG_ONEDNN_INT8_H_
#define NNPLUG_ONEDNN_INT8_H_

#include "kernels.h"

typedef struct ox_qmm ox_qmm;

/* Whether node is an op this file runs (then the group's other nodes are float32 ones whose
 * results nothing reads, see ox_build). */
int ox_int8_op(const nnp_node_desc *n);
/* Whether node runs here: the types, ranks and zero points it takes, on a CPU with VNNI. */
int ox_qmm_supported(const nnp_node_desc *node);
/* The kernel of node, whose first input is the kernel's input kin0 of nkin; NULL with a message
 * (*unsupported: a node ox_qmm_supported refuses). */
ox_qmm *ox_qmm_build(const nnp_node_desc *node, int kin0, int nkin, int f32out, int *unsupported,
                     ox_err *e);
/* Whether cast is a Cast of MatMulInteger mm's sums to float32, which the two run as one kernel
 * (claimed together, supports_fused), the sums converted as they are made. */
int ox_int8_cast_of(const nnp_node_desc *mm, const nnp_node_desc *cast);
void ox_qmm_free(ox_qmm *q);
int ox_qmm_output_shape(const ox_qmm *q, const nnp_tensor *in, int nin, int32_t *ndim,
                        int64_t *shape, ox_err *e);
int ox_qmm_workspace(const ox_qmm *q, const nnp_tensor *in, int nin, uint64_t *nbytes, ox_err *e);
int ox_qmm_run(const ox_qmm *q, const nnp_tensor *in, int nin, const nnp_tensor *out, void *ws,
               uint64_t wsn, ox_err *e);

#endif
