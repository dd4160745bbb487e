/* Which values a plan stores in bf16 under the "bf16" hint on AMX (bf16_operands). The
 * products round their operands to bf16 there anyway; a value stored so costs half the bytes
 * to write and to read and no reorder before them. A value is stored in bf16 when every op
 * reading it either rounds it to bf16 itself (a float convolution, ConvTranspose or packed
 * dense layer, as its input) or only moves or scales it on its way to such ops: a Concat,
 * which converts an input of the other type, and a per-channel multiply-add (a
 * BatchNormalization not folded into a convolution), a pool, a Resize, an
 * InstanceNormalization or GroupNorm, or a broadcast binary op of a bf16 value. DenseNet's
 * blocks are Concats, multiply-adds and pools between their convolutions (with them in
 * float32 its concats, multiply-adds and reorders took as long as the convolutions).
 * A residual `sum` and the value it adds are both bf16 or both float32 (ResNet's stream
 * between its blocks: each block's input was reordered to bf16 for its convolutions).
 * A LayerNormalization writes bf16 from its float32 input where its readers allow (a pre-norm
 * transformer's projections: the reorder after it is gone).
 * Not stored in bf16: the kernel's output and a value any other op reads. A value stored so
 * may still be float32 where its op ran otherwise (oneDNN had no kernel for bf16): its readers
 * take either type. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* Whether op rounds its input to bf16 itself. */
static int rounds_input(pb *b, const ox_op *op)
{
    return (op->kind == OP_CONV && !op->w8) || op->kind == OP_DECONV ||
           (op->kind == OP_MATMUL && packed_dense(b, op));
}

static int full_shaped(pb *b, int v, int y)
{
    return VAL(v)->ndim == VAL(y)->ndim &&
           !memcmp(DIMS(v), DIMS(y), sizeof(int64_t) * (size_t)VAL(y)->ndim);
}

/* The input whose type op's result keeps, or -1: a pool's, a Resize's, a per-channel
 * multiply-add's, an InstanceNormalization's or GroupNorm's (plan_norm.c reads and writes
 * bf16 on a blocked or channels-last layout), and a binary op's full-shaped operand beside a
 * broadcast one (EfficientNet's
 * squeeze-and-excitation scale; not a residual Add of two full ones, whose sum stays float32).
 * oneDNN's jit kernels for them write the type they read (a binary op from float32 to bf16
 * ran on its reference kernel, 60 times slower); the other operand is read in float32. */
static int kept_input(pb *b, const ox_op *op)
{
    if (b->g->strict && (op->kind == OP_POOL ? op->maxpool /* own loops: plan_strict.c */
                                             : op->alg == dnnl_resampling_linear))
        return -1;
    if (op->kind == OP_POOL || op->kind == OP_RESIZE || (op->kind == OP_BN && op->w) ||
        op->kind == OP_GN || op->kind == OP_IN)
        return 0;
    if (op->kind != OP_BINARY || op->nin != 2 || op->in[1] < 0) return -1;
    int f0 = full_shaped(b, op->in[0], op->out), f1 = full_shaped(b, op->in[1], op->out);
    return f0 && !f1 ? 0 : f1 && !f0 && op->commutes ? 1 : -1; /* as plan_simple.c reads it */
}

/* The value op's `sum` post-op adds, or -1. */
static int sum_operand(const ox_op *op)
{
    for (int i = 0; i < op->npost; i++)
        if (op->post[i].kind == POST_SUM) return op->post[i].val;
    return -1;
}

/* Whether op's result may be bf16 by op alone. */
static int may_write(pb *b, const ox_op *op)
{
    if (op->out == b->g->out || !VAL(op->out)->consumers || VAL(op->out)->grid || op->qout)
        return 0;
    if (op->kind == OP_CONV) return !op->w8 && !op->line;
    if (op->kind == OP_DECONV || op->kind == OP_LN) return 1;
    return (op->kind == OP_MATMUL && packed_dense(b, op)) || op->kind == OP_CONCAT ||
           kept_input(b, op) >= 0;
}

/* Whether reader o, reading v as its input j (j < 0: as the operand of its `sum`), keeps bf16
 * out of every op but those that round it themselves, given the flags so far. A `sum` adds a
 * bf16 operand where it writes bf16 itself (in the operand's own buffer). */
static int reads_ok(pb *b, const ox_op *o, int j, const char *flag)
{
    if (j < 0) return flag[o->out];
    if (o->kind == OP_CONCAT) return 1; /* converts its inputs to its result's type */
    return (j == 0 && rounds_input(b, o)) || (j == kept_input(b, o) && flag[o->out]);
}

/* Drops the flag of w's result where a reader or, for an op that keeps its input's type, its
 * input does not allow it; whether it did. */
static int check(pb *b, const ox_op *w, char *flag)
{
    int v = w->out;
    int k = kept_input(b, w), sv = sum_operand(w);
    if ((k >= 0 && !flag[w->in[k]]) || (sv >= 0 && !flag[sv])) return flag[v] = 0, 1;
    for (int i = 0; i < b->g->norder; i++) {
        const ox_op *o = &b->g->ops[b->g->order[i]];
        for (int j = 0; j < o->nin; j++)
            if (o->in[j] == v && !reads_ok(b, o, j, flag)) return flag[v] = 0, 1;
        if (sum_operand(o) == v && !reads_ok(b, o, -1, flag)) return flag[v] = 0, 1;
    }
    return 0;
}

char *bf16_values(pb *b)
{
    const ox_graph *g = b->g;
    char *flag = calloc((size_t)g->nval, 1);
    if (!flag || !bf16_operands(b)) return flag;
    for (int i = 0; i < g->norder; i++) {
        const ox_op *op = &g->ops[g->order[i]];
        flag[op->out] = (char)may_write(b, op);
    }
    /* the largest set the rules allow: drop flags until none is dropped (each pass drops at
     * least one, so at most as many passes as values) */
    for (int dropped = 1; dropped;) {
        dropped = 0;
        for (int i = g->norder - 1; i >= 0; i--) {
            const ox_op *op = &g->ops[g->order[i]];
            if (flag[op->out]) dropped |= check(b, op, flag);
        }
    }
    return flag;
}

int bf16_result(const pb *b, const ox_op *op)
{
    return b->bf16v && b->bf16v[op->out];
}

dnnl_data_type_t md_type(const_dnnl_memory_desc_t md)
{
    dnnl_data_type_t dt = dnnl_data_type_undef;
    D(dnnl_memory_desc_query)(md, dnnl_query_data_type, &dt);
    return dt;
}

dnnl_memory_desc_t retyped_md(pb *b, int v, const_dnnl_memory_desc_t md, dnnl_data_type_t dt)
{
    if (md_type(md) == dt) return clone_md(md);
    int nd;
    int64_t dims[MAXR], strides[MAXR];
    if (!strided_of(md, &nd, dims, strides)) return strided_typed_md(nd, dims, strides, dt);
    return VAL(v)->ndim == 4 ? typed_md(4, DIMS(v), dt, dnnl_acdb)
                             : plain_typed_md(VAL(v)->ndim, DIMS(v), dt);
}
