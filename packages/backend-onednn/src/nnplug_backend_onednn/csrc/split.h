/* A Split whose parts are a kernel's outputs, the kernel's last node (the host ends a group
 * where what it makes is read outside): alone, or after the group's graph (kernels.c), its
 * parts copied out of its input. Inside a group a Split's parts are views (graph.c
 * parse_split), since a group's graph has one output. */
#ifndef NNPLUG_ONEDNN_SPLIT_H_
#define NNPLUG_ONEDNN_SPLIT_H_

#include "kernels.h"

typedef struct ox_split ox_split;

/* Split node n's axis and parts for an input of rank `rank` whose axis has `len` elements
 * (-1: unknown): part j is [at[j], at[j + 1]) of the axis. NULL, or why it is declined. */
const char *ox_split_parts(const nnp_node_desc *n, int rank, const int64_t *dims, int64_t *axis,
                           int64_t *at);
/* The kernel of Split node n (float32, its parts known); NULL with a message. */
ox_split *ox_split_build(const nnp_node_desc *n, int *unsupported, ox_err *e);
void ox_split_free(ox_split *s);
int ox_split_outputs(const ox_split *s);
int ox_split_output_shapes(const ox_split *s, const nnp_tensor *in, int nin, int32_t *ndims,
                           int64_t *shapes, ox_err *e);
int ox_split_run(const ox_split *s, const nnp_tensor *in, int nin, const nnp_tensor *out, int nout,
                 ox_err *e);
/* The parts' shapes, and the parts copied into out, from x of dims xd (the tail of a group,
 * kernels.c: x the group's graph's result). */
int ox_split_shapes(const ox_split *s, const int64_t *xd, int32_t *ndims, int64_t *shapes,
                    ox_err *e);
int ox_split_copy(const ox_split *s, const float *x, const int64_t *xd, const nnp_tensor *out,
                  int nout, ox_err *e);

#endif
