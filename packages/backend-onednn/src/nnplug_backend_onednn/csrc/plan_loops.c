/* Element-wise loops of the backend's own (Erf, Clip, HardSigmoid, Exp, Log, NaN replacement,
 * and the NaN rows of a Softmax): exact where oneDNN's eltwise is not. */
#define _GNU_SOURCE
#include <math.h>
#include <string.h>

#include "plan.h"

/* A loop of the backend's own over n plain floats (its step's args: src, dst), seen as rows
 * of `row` elements `inner` apart (a row-major axis of that length with that inner size); c, d:
 * scalar parameters (nan_replace_loop's replacement, Clip's bounds). It runs as a step
 * (loop_fn) with its parameters as the settings. */
typedef void (*ox_loop)(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                        float d);

typedef struct {
    ox_loop loop;
    int64_t n, row, inner;
    float c, d;
    int threads;
} ox_loop_cfg;

typedef struct {
    const ox_loop_cfg *l;
    const float *x;
    float *y;
} loop_job;

/* The loops are element-wise: each thread takes one contiguous share of the elements */
static void loop_part(void *arg)
{
    const loop_job *j = arg;
    const ox_loop_cfg *l = j->l;
    int64_t t0, t1;
    dl_share(l->n, &t0, &t1);
    if (t1 > t0) l->loop(j->x + t0, j->y + t0, t1 - t0, l->row, l->inner, l->c, l->d);
}

static int loop_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const ox_loop_cfg *l = cfg;
    loop_job j = {l, ptrs[0], ptrs[1]};
    dl_parallel(loop_part, &j, l->n >= 32768 ? l->threads : 1); /* small: not worth a wake */
    return -1;
}

/* A step running loop over the n floats of its args src and dst (added by the caller). */
static int loop_step(pb *b, ox_loop loop, int64_t n, int64_t row, int64_t inner, float c, float d,
                     const char *what)
{
    ox_loop_cfg *l = owned_cfg(b, sizeof *l);
    if (!l) return -1;
    *l = (ox_loop_cfg){loop, n, row, inner, c, d, b->p->threads};
    return fn_step(b, loop_fn, l, RUN_ALWAYS, what);
}

static void erf_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                     float d)
{
    (void)row, (void)inner, (void)c, (void)d;
    for (int64_t i = 0; i < n; i++) y[i] = erff(x[i]);
}

/* The ox_own_eltwise ops (kernels.h). Written so that a NaN fails every compare and comes
 * through: onnxruntime keeps it in all four. */
static void clip_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float lo,
                      float hi)
{
    (void)row, (void)inner;
    for (int64_t i = 0; i < n; i++) { /* hi last: lo > hi gives hi, as ONNX says */
        float v = x[i] < lo ? lo : x[i];
        y[i] = v > hi ? hi : v;
    }
}

static void hardsigmoid_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner,
                             float alpha, float beta)
{
    (void)row, (void)inner;
    for (int64_t i = 0; i < n; i++) {
        float v = alpha * x[i] + beta;
        v = v < 0.f ? 0.f : v;
        y[i] = v > 1.f ? 1.f : v;
    }
}

static void exp_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                     float d)
{
    (void)row, (void)inner, (void)c, (void)d;
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

static void log_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner, float c,
                     float d)
{
    (void)row, (void)inner, (void)c, (void)d;
    for (int64_t i = 0; i < n; i++) y[i] = logf(x[i]);
}

/* Where(IsNaN(x), C, x): every NaN (any payload, either sign) becomes c; everything else
 * (infinities, -0.0, denormals) is copied bit for bit. On the bits, so that no float compare
 * or move can touch a value. */
static void nan_replace_loop(const float *x, float *y, int64_t n, int64_t row, int64_t inner,
                             float c, float d)
{
    (void)row, (void)inner, (void)d;
    uint32_t cb;
    memcpy(&cb, &c, 4);
    const uint32_t *xs = (const uint32_t *)x;
    uint32_t *ys = (uint32_t *)y;
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = xs[i];
        ys[i] = (v & 0x7fffffffu) > 0x7f800000u ? cb : v;
    }
}

/* oneDNN's (Log)Softmax gives NaN only where a row holds NaN or +inf (0 elsewhere); onnxruntime
 * and the ONNX reference give the whole row NaN (max - max is NaN, and so is every sum). In place,
 * on the plain result: a row with a NaN becomes all NaN. The result is read once more whole
 * (attention's scores: 54 MB a layer in Whisper's encoder), so the rows are shared between
 * the pool's threads and a contiguous row is checked on its bits, which vectorises. */
typedef struct {
    float *y;
    int64_t n, row, inner;
} nan_rows_job;

QUANT_LOOP static int row_has_nan(const float *r, int64_t len)
{
    const uint32_t *bits = (const uint32_t *)r;
    uint32_t worst = 0; /* the largest magnitude's bits: above +inf's only for a NaN */
    for (int64_t i = 0; i < len; i++) {
        uint32_t m = bits[i] & 0x7fffffffu;
        worst = m > worst ? m : worst;
    }
    return worst > 0x7f800000u;
}

static void nan_rows_part(void *arg)
{
    const nan_rows_job *j = arg;
    int64_t rows = j->n / (j->row * j->inner) * j->inner, t0, t1; /* (outer, inner) pairs */
    dl_share(rows, &t0, &t1);
    for (int64_t q = t0; q < t1; q++) {
        float *r = j->y + q / j->inner * j->row * j->inner + q % j->inner;
        int nan = 0;
        if (j->inner == 1) nan = row_has_nan(r, j->row);
        else
            for (int64_t i = 0; i < j->row; i++) nan |= r[i * j->inner] != r[i * j->inner];
        if (nan)
            for (int64_t i = 0; i < j->row; i++) r[i * j->inner] = NAN;
    }
}

typedef struct {
    int64_t n, row, inner;
    int threads;
} nan_rows_cfg;

static int nan_rows_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const nan_rows_cfg *c = cfg;
    nan_rows_job j = {ptrs[1], c->n, c->row, c->inner};
    dl_parallel(nan_rows_part, &j, c->n >= 32768 ? c->threads : 1); /* small: not worth a wake */
    return -1;
}

/* The NaN rule above as a step after op's (Log)Softmax, on its plain row-major result (rows along
 * the op's axis). */
int add_softmax_nan_rows(pb *b, const ox_op *op)
{
    if (b->dry) return 0;
    int v = op->out, r = VAL(v)->ndim;
    const ox_view *vw = &b->views[v][b->nviews[v] - 1];
    if (!is_plain(b, v, vw->md))
        return ox_fail(b->e, "internal: node '%s' (%s): its result is not plain", op->name,
                       op->op_type);
    int64_t row = 1, inner = 1;
    for (int d = 0; d < r; d++) {
        if (d == op->axis) row = DIMS(v)[d];
        else if (d > op->axis) inner *= DIMS(v)[d];
    }
    nan_rows_cfg *c = owned_cfg(b, sizeof *c);
    if (!c) return 1;
    *c = (nan_rows_cfg){(int64_t)(D(dnnl_memory_desc_get_size)(vw->md) / sizeof(float)),
                        row > 0 ? row : 1, inner > 0 ? inner : 1, b->p->threads};
    int s = fn_step(b, nan_rows_fn, c, RUN_ALWAYS, "softmax nan rows");
    if (s < 0) return 1;
    return add_arg(b, s, DNNL_ARG_SRC, vw->buf, vw->md) ||
           add_arg(b, s, DNNL_ARG_DST, vw->buf, vw->md);
}

/* Erf outside a GELU: the C library's erff over the plain values (oneDNN has no erf of its own);
 * Where(IsNaN(x), C, x) (OP_NANREP): nan_replace_loop over them. */
int build_loop(pb *b, const ox_op *op)
{
    int x = op->in[0], xbuf, reorder_out;
    dnnl_memory_desc_t md = value_plain(b, op->out, VAL(op->out)->ndim);
    int rc = 1;
    if (!md) {
        ox_fail(b->e, "oneDNN could not create a memory descriptor");
        goto done;
    }
    if (b->dry) {
        rc = add_view(b, op->out, md, 0);
        goto done;
    }
    if (plain_buf(b, x, &xbuf)) goto done;
    int dbuf = dst_buf(b, op, md, &reorder_out), s;
    if (dbuf < 0 ||
        (s = loop_step(b, op->kind == OP_NANREP ? nan_replace_loop : erf_loop,
                       (int64_t)(D(dnnl_memory_desc_get_size)(md) / sizeof(float)), 1, 1, op->alpha,
                       0.f, op->kind == OP_NANREP ? "nan replacement" : "erf")) < 0)
        goto done;
    rc = add_arg(b, s, DNNL_ARG_SRC, xbuf, md) || add_arg(b, s, DNNL_ARG_DST, dbuf, md) ||
         set_result(b, op, dbuf, md, reorder_out);
done:
    md_free(md);
    return rc;
}

/* The layout an element-for-element loop reads value x in: the one x has when it is dense, else
 * plain (a blocked layout's padding would not hold f(0)), made into *pm, which the caller
 * destroys; *n: x's element count. NULL, with a message, when oneDNN cannot make it. */
static const_dnnl_memory_desc_t loop_layout(pb *b, int x, dnnl_memory_desc_t *pm, size_t *n)
{
    const_dnnl_memory_desc_t md = home(b, x);
    *n = 1;
    for (int d = 0; d < VAL(x)->ndim; d++) *n *= (size_t)DIMS(x)[d];
    if ((size_t)D(dnnl_memory_desc_get_size)(md) == *n * sizeof(float)) return md;
    if (!(*pm = value_plain(b, x, VAL(x)->ndim)))
        ox_fail(b->e, "oneDNN could not create a memory descriptor");
    return *pm;
}

/* An ox_own_eltwise op: its loop element for element over its input in the layout that input
 * has (the result takes it too), when that layout is dense; a blocked one whose padding would
 * no longer hold zeros (f(0) != 0: log(0) is -inf) is read in plain layout instead. */
int build_own_eltwise(pb *b, const ox_op *op)
{
    int x = op->in[0], xbuf, reorder_out;
    dnnl_memory_desc_t pm = NULL;
    size_t n;
    const_dnnl_memory_desc_t md = loop_layout(b, x, &pm, &n);
    if (!md) return 1;
    int rc = 1;
    if (b->dry) {
        rc = add_view(b, op->out, md, 0);
        goto done;
    }
    if (get_view(b, x, md, &xbuf)) goto done;
    ox_loop loop = op->alg == dnnl_eltwise_clip          ? clip_loop
                   : op->alg == dnnl_eltwise_hardsigmoid ? hardsigmoid_loop
                   : op->alg == dnnl_eltwise_exp         ? exp_loop
                                                         : log_loop;
    int dbuf = dst_buf(b, op, md, &reorder_out), s;
    if (dbuf < 0 ||
        (s = loop_step(b, loop, (int64_t)n, 1, 1, op->alpha, op->beta, op->op_type)) < 0)
        goto done;
    rc = add_arg(b, s, DNNL_ARG_SRC, xbuf, md) || add_arg(b, s, DNNL_ARG_DST, dbuf, md) ||
         set_result(b, op, dbuf, md, reorder_out);
done:
    md_free(pm);
    return rc;
}

/* OP_QDQ (graph.c fake_quant), y = (saturate(round(x / s0) + z0) - z1) * s1: the cpu backend's
 * QuantizeLinear and DequantizeLinear in one pass, with their arithmetic (the same bits),
 * rounding as its quant8 does: x / s0 clamped to [-1024, 1024] (no saturated result changes)
 * and rounded to even by adding and subtracting 1.5 * 2^23; a NaN gives the lowest integer. */
typedef struct {
    int64_t n;
    float s0, z0, s1, lo, hi;
    int32_t z1;
    int threads;
} ox_qdq;

typedef struct {
    const ox_qdq *q;
    const float *x;
    float *y;
} qdq_job;

QUANT_LOOP static void qdq_part(void *arg)
{
    const qdq_job *j = arg;
    const ox_qdq *q = j->q;
    const float *x = j->x;
    float *y = j->y;
    const float s0 = q->s0, z0 = q->z0, s1 = q->s1, lo = q->lo, hi = q->hi;
    const int32_t z1 = q->z1;
    int64_t t0, t1;
    dl_share(q->n, &t0, &t1);
    for (int64_t i = t0; i < t1; i++) {
        float v = x[i] / s0;
        v = v < -1024.f ? -1024.f : v > 1024.f ? 1024.f : v;
        float r = (v + 12582912.f) - 12582912.f + z0;
        r = r != r ? lo : r < lo ? lo : r > hi ? hi : r;
        y[i] = (float)((int32_t)r - z1) * s1;
    }
}

static int qdq_fn(const void *cfg, void *const *ptrs, int nptrs)
{
    (void)nptrs;
    const ox_qdq *q = cfg;
    qdq_job j = {q, ptrs[0], ptrs[1]};
    dl_parallel(qdq_part, &j, q->n >= 32768 ? q->threads : 1); /* small ones: not worth a wake */
    return -1;
}

/* OP_QDQ element for element over its input in the layout that input has (the result takes it
 * too) when that layout is dense, else plain (a blocked layout's padding: f(0) need not be 0). */
int build_qdq(pb *b, const ox_op *op)
{
    int x = op->in[0], xbuf, reorder_out, s;
    dnnl_memory_desc_t pm = NULL;
    size_t n;
    const_dnnl_memory_desc_t md = loop_layout(b, x, &pm, &n);
    if (!md) return 1;
    int rc = 1;
    if (b->dry) {
        rc = add_view(b, op->out, md, 0);
        goto done;
    }
    ox_qdq *q = owned_cfg(b, sizeof *q);
    if (!q || get_view(b, x, md, &xbuf)) goto done;
    *q = (ox_qdq){.n = (int64_t)n,
                  .s0 = op->qscale[0],
                  .z0 = (float)op->qzp[0],
                  .s1 = op->qscale[1],
                  .lo = op->qs8 ? -128.f : 0.f,
                  .hi = op->qs8 ? 127.f : 255.f,
                  .z1 = op->qzp[1],
                  .threads = b->p->threads};
    int dbuf = dst_buf(b, op, md, &reorder_out);
    if (dbuf < 0 || (s = fn_step(b, qdq_fn, q, RUN_ALWAYS, "quantize-dequantize")) < 0) goto done;
    rc = add_arg(b, s, DNNL_ARG_SRC, xbuf, md) || add_arg(b, s, DNNL_ARG_DST, dbuf, md) ||
         set_result(b, op, dbuf, md, reorder_out);
done:
    md_free(pm);
    return rc;
}
