/* Kernels: one oneDNN primitive per group of ONNX nodes (an op and the element-wise ops
 * fused into it as post-ops), its descriptors and pre-packed weights, created once. */
#ifndef NNPLUG_ONEDNN_KERNELS_H_
#define NNPLUG_ONEDNN_KERNELS_H_

#include "nnplug/backend.h"

typedef struct {
    char msg[1024];
} ox_err;

/* Engine and threads (init/shutdown). */
int ox_init(int num_threads, ox_err *e);
void ox_shutdown(void);
void ox_set_num_threads(int n);
int ox_num_threads(void);

/* Build the kernel of nodes[0..n). dry: only check that it can be built (supports, fuse).
 * Returns 0 and *out (when not dry); else 1 with a message, *unsupported set when the nodes
 * are valid ONNX this backend does not run. */
int ox_build(const nnp_node_desc *nodes, int n, int dry, nnp_kernel **out, int *unsupported, ox_err *e);
/* How many leading nodes one kernel runs (1..n). */
int ox_fuse_count(const nnp_node_desc *nodes, int n);
void ox_destroy(nnp_kernel *k);
uint64_t ox_workspace_size(const nnp_kernel *k);
int ox_run(const nnp_kernel *k, const nnp_tensor *in, int nin, const nnp_tensor *out, int nout,
           void *ws, uint64_t wsn, ox_err *e);

#endif
