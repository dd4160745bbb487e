/* LayerNormalization: oneDNN's layer normalization over the input's plain bytes as rows.
 * InstanceNormalization: oneDNN's batch normalization, or a loop of the backend's own. */
#define _GNU_SOURCE
#include <math.h>

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
    return s < 0 ? 0 : stats_args(b, pd, s);
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

/* ---- InstanceNormalization ------------------------------------------------------------------- */

typedef struct {
    int64_t rows, len, channels; /* rows: images x channels, each of len values */
    float eps;
    int threads;
} in_cfg;

typedef struct {
    const in_cfg *c;
    const float *x, *scale, *shift;
    float *y;
} in_job;

/* Sums in double over 8 lanes (a fixed order for a given n): of x, and of (x - mu)^2. */
WIDE_LOOP static double lanes_sum(const float *x, int64_t n)
{
    double acc[8] = {0}, s = 0;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[k + l];
    for (; k < n; k++) s += x[k];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s;
}

WIDE_LOOP static double lanes_sq_dev(const float *x, int64_t n, double mu)
{
    double acc[8] = {0}, s = 0;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) {
            double d = x[k + l] - mu;
            acc[l] += d * d;
        }
    for (; k < n; k++) {
        double d = x[k] - mu;
        s += d * d;
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s;
}

/* (x - mean) first, then the scale: x * a + (shift - mean * a) would cancel a large mean in
 * float32. */
WIDE_LOOP static void in_affine(const float *x, float m, float a, float t, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) * a + t;
}

static void in_part(void *arg)
{
    const in_job *j = arg;
    const in_cfg *c = j->c;
    int64_t t0, t1;
    dl_share(c->rows, &t0, &t1);
    for (int64_t r = t0; r < t1; r++) {
        const float *x = j->x + r * c->len;
        int64_t ch = r % c->channels;
        double mu = c->len ? lanes_sum(x, c->len) / (double)c->len : 0;
        double var = c->len ? lanes_sq_dev(x, c->len, mu) / (double)c->len : 0;
        double inv = 1.0 / sqrt(var + (double)c->eps);
        in_affine(x, (float)mu, (float)(inv * j->scale[ch]), j->shift[ch], j->y + r * c->len,
                  c->len);
    }
}

static int in_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const in_cfg *c = cfg;
    in_job j = {c, ptrs[0], ptrs[1], ptrs[2], ptrs[3]};
    dl_parallel(in_part, &j, c->rows > 1 ? dl_threads_for(c->rows * c->len, c->threads) : 1);
    return -1;
}

int build_in(pb *b, const ox_op *op)
{
    int x = op->in[0], r = VAL(x)->ndim;
    const int64_t *xd = DIMS(x);
    if (!b->dry && xd[0] == 1 && !is_plain(b, x, home(b, x))) return build_simple(b, op);
    in_cfg c = {xd[0] * xd[1], 1, xd[1], op->eps, b->p->threads};
    for (int d = 2; d < r; d++) c.len *= xd[d];
    return build_plain_step(b, op, in_fn, &c, sizeof c, "instance normalization", 2);
}
