/* LayerNormalization: oneDNN's layer normalization over the input's plain bytes as rows. */
#define _GNU_SOURCE

#include "plan.h"

/* LayerNormalization: the input's plain bytes as (outer, inner) rows. */
static void ln_rows(pb *b, const ox_op *op, int64_t *rows)
{
    const int64_t *xd = DIMS(op->in[0]);
    rows[0] = 1;
    for (int i = 0; i < op->axis; i++) rows[0] *= xd[i];
    rows[1] = op->size;
}

static int ln_inputs(pb *b, const ox_op *op, const_dnnl_primitive_desc_t pd, int s)
{
    int64_t rows[2];
    ln_rows(b, op, rows);
    if (s == -1) return 0;
    if (plain_arg(b, s, DNNL_ARG_SRC, op->in[0], plain_md(2, rows, 2))) return 1;
    if (plain_arg(b, s, DNNL_ARG_SCALE, op->in[1], plain_md(1, &op->size, 1))) return 1;
    if (op->nin == 3 && op->in[2] >= 0 &&
        plain_arg(b, s, DNNL_ARG_SHIFT, op->in[2], plain_md(1, &op->size, 1)))
        return 1;
    if (s < 0) return 0;
    /* the statistics, where this oneDNN wants them as outputs: scratch in the arena */
    static const int stats[2] = {DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
    for (int i = 0; i < 2; i++) {
        const_dnnl_memory_desc_t md = query(pd, dnnl_query_dst_md, 1 + i);
        if (!md || !D(dnnl_memory_desc_get_size)(md)) continue;
        int sb = arena_buf(b, md);
        if (sb < 0 || add_arg(b, s, stats[i], sb, md)) return 1;
    }
    return 0;
}

int build_ln(pb *b, const ox_op *op)
{
    int64_t rows[2];
    ln_rows(b, op, rows);
    unsigned flags = dnnl_use_scale | (op->nin == 3 && op->in[2] >= 0 ? dnnl_use_shift : 0);
    dnnl_memory_desc_t md = plain_md(2, rows, 2), as = value_plain(b, op->out, VAL(op->out)->ndim);
    dnnl_primitive_attr_t a = op_attr(b, op);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = a && md && as ? D(dnnl_layer_normalization_forward_primitive_desc_create)(
                                           &pd, ox_engine(), dnnl_forward_inference, md, md, NULL,
                                           op->eps, flags, a)
                                     : dnnl_out_of_memory;
    md_free(md);
    if (a) D(dnnl_primitive_attr_destroy)(a);
    int rc = st == dnnl_success
                 ? finish_as(b, op, pd, ln_inputs, as)
                 : ox_fail(b->e, "node '%s' (LayerNormalization): oneDNN has no primitive for it",
                           op->name);
    md_free(as);
    return rc;
}
