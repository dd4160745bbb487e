/* Plans: a group of nodes compiled once (ops created, weights packed, BN/affine/activation/
 * residual fusion, intermediate memory laid out in the caller's workspace), run many times
 * concurrently. */
#ifndef NNC_GRAPH_H
#define NNC_GRAPH_H
#include "nnc.h"

typedef struct nnc_desc_value {
    const char *name; /* "" for omitted */
    nnc_valinfo info;
    size_t const_nbytes;
} nnc_desc_value;

typedef struct nnc_desc_node {
    const char *name, *op_type, *domain;
    int opset;
    int nattr;
    nnc_attr *attrs;
    int nin, nout;
    nnc_desc_value *in, *out;
} nnc_desc_node;

typedef struct nnc_value {
    char *name;
    nnc_valinfo info;
    void *owned;      /* constant data copy */
    int is_const;
    int producer;     /* node index, -1 for kernel inputs and constants */
    int ext_out;      /* kernel output index or -1 */
    int root;         /* value whose memory this one views (itself unless made by a view op or
                         written into a Concat's output) */
    int arena;        /* lives in the arena at `offset` */
    int dyn;          /* intermediate whose size is only known at run time */
    int64_t offset;
    size_t nbytes;
    int64_t view_off; /* a Concat input written in place: its byte offset inside root */
} nnc_value;

typedef struct nnc_plan {
    int nvals;
    nnc_value *vals;
    int nnodes;
    nnc_node *nodes;
    int nkin, nkout;
    int *kin_val, *kout_val;
    size_t arena_bytes;
    size_t scratch_static;  /* per-thread scratch for static plans */
    int static_scratch;     /* scratch_static is valid */
    int live;               /* live node count */
} nnc_plan;

nnc_plan *nnc_plan_build(const nnc_desc_node *nodes, int n, int probing, nnc_err *e);
void nnc_plan_free(nnc_plan *p);
/* Whether nnc_plan_workspace reads the inputs' shapes (a single node's scratch that depends
 * on them); otherwise it may be called with none. */
int nnc_plan_workspace_reads_inputs(const nnc_plan *p);
/* Bytes of workspace a run needs for these kernel inputs (shapes only). */
int nnc_plan_workspace(const nnc_plan *p, const nnc_tensor *kin, int nkin, size_t *out, nnc_err *e);
/* Output shapes from actual inputs. */
int nnc_plan_output_shapes(const nnc_plan *p, const nnc_tensor *kin, int nkin, nnc_tensor *outs,
                           nnc_err *e);
int nnc_plan_run(const nnc_plan *p, const nnc_tensor *kin, int nkin, const nnc_tensor *kout,
                 int nkout, void *ws, size_t wsn, nnc_err *e);
/* Called after each node of a run on this thread (see nnc_set_node_hook). */
typedef void (*nnc_node_hook)(void *user, const nnc_node *n, nnc_tensor *const *in,
                              const nnc_tensor *outs, int64_t start_ns, int64_t end_ns);
/* Thread-local; fn == NULL removes it. */
void nnc_set_node_hook(nnc_node_hook fn, void *user);
/* How many leading nodes one plan should take (the fuse query). */
int nnc_fuse_count(const nnc_desc_node *nodes, int n);
#endif
