/* MatMulInteger and QLinearMatMul on oneDNN's int8 matmul (int8.h). oneDNN takes u8 or s8 activations and s8
 * weights: a u8 B runs as B - 128 (s8) with its zero point moved by the same 128. The matmul
 * sums the raw products P = A . B' in int32; the zero points come out after, per element:
 *
 *     Y[m, n] = P[m, n] - za * colsum(B')[n] - zb'[n] * (rowsum(A)[m] - K * za)
 *
 * in 32-bit wrapping arithmetic, which is (A - za) . (B - zb) modulo 2^32, as onnxruntime's
 * int32 sums are. B's column sums are taken once when B is a constant (quantize_dynamic's
 * weights); A's row sums only when B has a zero point in the shifted range. QLinearMatMul then
 * requantizes each sum as the cpu backend and onnxruntime do: round(float(acc) * (sa * sb / sy))
 * + zy, ties to even, saturated (a NaN gives zy). */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "int8.h"
#include "plan.h" /* typed_md */

#define QMAXPRIMS 8 /* primitives (shape x thread count) a kernel keeps */

typedef struct {
    int threads, r;
    int64_t ad[MAXR], bd[MAXR]; /* A's and B's dims right-aligned to the result's rank r */
    dnnl_primitive_t prim;
    dnnl_memory_desc_t amd, bmd, ymd;
    void *bpacked; /* a constant B in the layout the matmul picked (bmd), or NULL */
    uint64_t scratch; /* bytes of its scratchpad */
} qprim;

/* The inputs of each op: A, B and their zero points; QLinearMatMul's scales and y's. */
typedef struct {
    int a, b, az, bz, as, bs, ys, yz;
} roles;
static const roles MMI = {0, 1, 2, 3, -1, -1, -1, -1}, QLMM = {0, 3, 2, 5, 1, 4, 6, 7};

struct ox_qmm {
    char *name;
    const char *op; /* its op type (static) */
    roles r;
    float *mult; /* QLinearMatMul: sa * sb[n] / sy, 1 or N of them; else NULL */
    int64_t nmult;
    int32_t yzp; /* its output's zero point */
    dnnl_data_type_t ydt;
    int kin0, nkin; /* A is kernel input kin0 of nkin; B, the zero points follow */
    dnnl_data_type_t adt, bdt; /* A's type; B's as given */
    int ar, br;
    int64_t bdc[MAXR]; /* B's dims when it is a constant */
    int8_t *bc; /* a constant B in s8 (shifted when u8), or NULL */
    int32_t *csum; /* its column sums, [batch matrices of B x N] */
    int azp_in; /* kernel input of a run-time a_zero_point, or -1 */
    int32_t azp; /* a constant one (0 when none) */
    int32_t *bzp; /* B's zero points in s8's range (u8: minus 128; none: 0 - 128): 1 or N */
    int64_t nbzp;
    int bzp_nonzero;
    int f32out; /* the kernel ends with a Cast of the sums to float32 (quantize_dynamic's) */
    int cast; /* the kernel is a lone Cast of int32 to float32 (A is its input); no matmul */
    pthread_mutex_t mu; /* guards the primitives */
    int nprim;
    qprim prims[QMAXPRIMS];
};

/* ---- what runs here ------------------------------------------------------------------------- */

/* Whether n is a Cast of a 32-bit value of type code (NNP_DTYPE_INT, _FLOAT) to float32. */
static int cast_to_float(const nnp_node_desc *n, int code)
{
    return n->op_type && !strcmp(n->op_type, "Cast") && n->num_inputs == 1 && n->num_outputs == 1 &&
           n->inputs[0].dtype.code == code && n->inputs[0].dtype.bits == 32 &&
           n->inputs[0].dtype.lanes <= 1 && n->outputs[0].dtype.code == NNP_DTYPE_FLOAT &&
           n->outputs[0].dtype.bits == 32 && n->outputs[0].dtype.lanes <= 1;
}

/* A Cast of int32 to float32: MatMulInteger's sums on their way to the float ops after them
 * (quantize_dynamic writes MatMulInteger -> Cast -> Mul by the scales). */
static int int32_to_float(const nnp_node_desc *n)
{
    return cast_to_float(n, NNP_DTYPE_INT);
}

/* Any Cast but float32 to float32, which graph.c takes as an Identity (T5 writes them). */
int ox_int8_op(const nnp_node_desc *n)
{
    const char *t = n->op_type;
    return t && (!strcmp(t, "MatMulInteger") || !strcmp(t, "QLinearMatMul") ||
                 (!strcmp(t, "Cast") && !cast_to_float(n, NNP_DTYPE_FLOAT)));
}

int ox_int8_cast_of(const nnp_node_desc *mm, const nnp_node_desc *cast)
{
    return mm->op_type && !strcmp(mm->op_type, "MatMulInteger") && int32_to_float(cast) &&
           mm->num_outputs >= 1 && mm->outputs[0].name && cast->inputs[0].name &&
           !strcmp(mm->outputs[0].name, cast->inputs[0].name);
}

static dnnl_data_type_t int8_type(nnp_dtype t)
{
    if (t.bits != 8 || t.lanes > 1) return dnnl_data_type_undef;
    return t.code == NNP_DTYPE_UINT  ? dnnl_u8
           : t.code == NNP_DTYPE_INT ? dnnl_s8
                                     : dnnl_data_type_undef;
}

static int given(const nnp_node_desc *n, int i)
{
    return n->num_inputs > i && n->inputs[i].name && n->inputs[i].name[0];
}

/* Elements of a value whose dims are known, else -1. */
static int64_t known_numel(const nnp_value_desc *v)
{
    int64_t n = 1;
    if (v->ndim < 0) return -1;
    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] < 0) return -1;
        n *= v->shape[i];
    }
    return n;
}

static int f32_scalars(const nnp_value_desc *v, int64_t per)
{
    int64_t cnt = known_numel(v);
    return v->dtype.code == NNP_DTYPE_FLOAT && v->dtype.bits == 32 && v->const_data &&
           v->ndim <= 1 && (cnt == 1 || (per > 0 && cnt == per));
}

/* Why node does not run here, or NULL. */
static const char *refusal(const nnp_node_desc *n)
{
    if (!strcmp(n->op_type, "Cast"))
        return int32_to_float(n) ? NULL : "the onednn backend casts int32 to float32 only";
    if (!__builtin_cpu_supports("avx512vnni") && !__builtin_cpu_supports("avxvnni"))
        return "this CPU has no VNNI, without which oneDNN's int8 sums can saturate";
    int ql = !strcmp(n->op_type, "QLinearMatMul");
    roles r = ql ? QLMM : MMI;
    if (n->num_outputs < 1 || (ql ? n->num_inputs != 8 : n->num_inputs < 2 || n->num_inputs > 4))
        return ql ? "it takes 8 inputs" : "it takes 2 to 4 inputs and gives 1 output";
    const nnp_value_desc *a = &n->inputs[r.a], *b = &n->inputs[r.b], *y = &n->outputs[0];
    if (ql ? int8_type(y->dtype) == dnnl_data_type_undef
           : y->dtype.code != NNP_DTYPE_INT || y->dtype.bits != 32)
        return ql ? "its output is not uint8 or int8" : "its output is not int32";
    if (int8_type(a->dtype) == dnnl_data_type_undef || int8_type(b->dtype) == dnnl_data_type_undef)
        return "A and B must be uint8 or int8";
    if (a->ndim < 2 || a->ndim > MAXR || b->ndim < 2 || b->ndim > MAXR)
        return "A and B must be of rank 2 to 6 (a vector operand is left to another backend)";
    int64_t N = b->shape[b->ndim - 1];
    if (given(n, r.az)) {
        const nnp_value_desc *z = &n->inputs[r.az];
        if (int8_type(z->dtype) != int8_type(a->dtype) || known_numel(z) != 1)
            return "a_zero_point must be one element of A's type (onnxruntime takes no other)";
    }
    if (given(n, r.bz)) {
        const nnp_value_desc *z = &n->inputs[r.bz];
        int64_t cnt = known_numel(z);
        if (int8_type(z->dtype) != int8_type(b->dtype) || !z->const_data ||
            !(cnt == 1 || (z->ndim == 1 && N > 0 && cnt == N)))
            return "b_zero_point must be a constant of B's type, one element or one per column";
    }
    if (ql) {
        const nnp_value_desc *yz = &n->inputs[r.yz];
        if (!f32_scalars(&n->inputs[r.as], 1) || !f32_scalars(&n->inputs[r.bs], N) ||
            !f32_scalars(&n->inputs[r.ys], 1))
            return "the scales must be float32 constants: a's and y's one, b's one or one per "
                   "column";
        if (!given(n, r.yz) || !yz->const_data || known_numel(yz) != 1 ||
            int8_type(yz->dtype) != int8_type(y->dtype))
            return "y_zero_point must be a constant of the output's type";
        if (given(n, r.az) && !n->inputs[r.az].const_data) return "a_zero_point must be a constant";
    }
    if (b->const_data && known_numel(b) < 0) return "a constant B has no static shape";
    return NULL;
}

int ox_qmm_supported(const nnp_node_desc *node)
{
    return !refusal(node);
}

/* ---- the kernel ---------------------------------------------------------------------------- */

static int32_t get8(const void *p, dnnl_data_type_t dt, int64_t i)
{
    return dt == dnnl_u8 ? (int32_t)((const uint8_t *)p)[i] : (int32_t)((const int8_t *)p)[i];
}

/* B (k rows of n per batch matrix, nb of them) into s8: u8 values less 128. */
static void to_s8(const void *b, dnnl_data_type_t dt, int64_t count, int8_t *out)
{
    if (dt == dnnl_s8) memcpy(out, b, (size_t)count);
    else
        for (int64_t i = 0; i < count; i++)
            out[i] = (int8_t)((int32_t)((const uint8_t *)b)[i] - 128);
}

static void col_sums(const int8_t *b, int64_t nb, int64_t k, int64_t n, int32_t *cs)
{
    for (int64_t m = 0; m < nb; m++) {
        int32_t *c = cs + m * n;
        memset(c, 0, (size_t)n * sizeof *c);
        for (int64_t i = 0; i < k; i++) {
            const int8_t *row = b + (m * k + i) * n;
            for (int64_t j = 0; j < n; j++) c[j] += row[j];
        }
    }
}

static void prim_free(qprim *p)
{
    if (p->prim) D(dnnl_primitive_destroy)(p->prim);
    if (p->amd) D(dnnl_memory_desc_destroy)(p->amd);
    if (p->bmd) D(dnnl_memory_desc_destroy)(p->bmd);
    if (p->ymd) D(dnnl_memory_desc_destroy)(p->ymd);
    free(p->bpacked);
}

/* bytes of layout from (plain) reordered into layout to, in a new buffer; NULL on failure. */
static void *reorder_new(const void *bytes, const_dnnl_memory_desc_t from,
                         const_dnnl_memory_desc_t to)
{
    size_t size = D(dnnl_memory_desc_get_size)(to);
    void *mem = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t rp = NULL;
    dnnl_memory_t ms = NULL, md = NULL;
    dnnl_stream_t s = ox_thread_stream();
    int ok = s && !posix_memalign(&mem, 64, size ? size : 64) &&
             D(dnnl_reorder_primitive_desc_create)(&pd, from, ox_engine(), to, ox_engine(), NULL) ==
                 dnnl_success &&
             D(dnnl_primitive_create)(&rp, pd) == dnnl_success &&
             D(dnnl_memory_create)(&ms, from, ox_engine(), (void *)bytes) == dnnl_success &&
             D(dnnl_memory_create)(&md, to, ox_engine(), mem) == dnnl_success;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
    ok = ok && D(dnnl_primitive_execute)(rp, s, 2, args) == dnnl_success &&
         D(dnnl_stream_wait)(s) == dnnl_success;
    if (ms) D(dnnl_memory_destroy)(ms);
    if (md) D(dnnl_memory_destroy)(md);
    if (rp) D(dnnl_primitive_destroy)(rp);
    if (pd) D(dnnl_primitive_desc_destroy)(pd);
    if (!ok) {
        free(mem);
        return NULL;
    }
    return mem;
}

void ox_qmm_free(ox_qmm *q)
{
    if (!q) return;
    for (int i = 0; i < q->nprim; i++) prim_free(&q->prims[i]);
    pthread_mutex_destroy(&q->mu);
    free(q->name);
    free(q->bc);
    free(q->csum);
    free(q->bzp);
    free(q->mult);
    free(q);
}

ox_qmm *ox_qmm_build(const nnp_node_desc *node, int kin0, int nkin, int f32out, int *unsupported,
                     ox_err *e)
{
    const char *why = refusal(node), *name = node->name ? node->name : "";
    *unsupported = why != NULL;
    if (why) {
        ox_fail(e, "node '%s' (%s): %s; the onednn backend declines it", name, node->op_type, why);
        return NULL;
    }
    ox_qmm *q = calloc(1, sizeof *q);
    if (!q) {
        ox_fail(e, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&q->mu, NULL);
    if (!strcmp(node->op_type, "Cast")) {
        q->cast = 1;
        q->op = "Cast";
        q->kin0 = kin0;
        q->nkin = nkin;
        if (!(q->name = strdup(name))) goto oom;
        return q;
    }
    q->f32out = f32out;
    int ql = !strcmp(node->op_type, "QLinearMatMul");
    q->op = ql ? "QLinearMatMul" : "MatMulInteger";
    q->r = ql ? QLMM : MMI;
    const nnp_value_desc *a = &node->inputs[q->r.a], *b = &node->inputs[q->r.b];
    q->kin0 = kin0;
    q->nkin = nkin;
    q->adt = int8_type(a->dtype);
    q->bdt = int8_type(b->dtype);
    q->ar = a->ndim;
    q->br = b->ndim;
    q->azp_in = -1;
    q->name = strdup(name);
    int64_t N = b->shape[b->ndim - 1];
    if (given(node, q->r.bz)) q->nbzp = known_numel(&node->inputs[q->r.bz]);
    else q->nbzp = 1;
    q->bzp = malloc((size_t)q->nbzp * sizeof *q->bzp);
    if (!q->name || !q->bzp) goto oom;
    for (int64_t j = 0; j < q->nbzp; j++) {
        int32_t z = given(node, q->r.bz) ? get8(node->inputs[q->r.bz].const_data, q->bdt, j) : 0;
        q->bzp[j] = q->bdt == dnnl_u8 ? z - 128 : z;
        q->bzp_nonzero |= q->bzp[j] != 0;
    }
    if (given(node, q->r.az)) {
        if (node->inputs[q->r.az].const_data)
            q->azp = get8(node->inputs[q->r.az].const_data, q->adt, 0);
        else q->azp_in = kin0 + q->r.az;
    }
    if (ql) { /* the requantization multipliers, as the cpu backend computes them */
        const float *as = node->inputs[q->r.as].const_data, *bs = node->inputs[q->r.bs].const_data,
                    *ys = node->inputs[q->r.ys].const_data;
        q->nmult = known_numel(&node->inputs[q->r.bs]);
        q->ydt = int8_type(node->outputs[0].dtype);
        q->yzp = get8(node->inputs[q->r.yz].const_data, q->ydt, 0);
        if (!(q->mult = malloc((size_t)q->nmult * sizeof *q->mult))) goto oom;
        for (int64_t j = 0; j < q->nmult; j++) q->mult[j] = as[0] * bs[j] / ys[0];
    }
    if (b->const_data) {
        int64_t count = known_numel(b), K = b->shape[b->ndim - 2], nb = 1;
        for (int i = 0; i < b->ndim; i++) q->bdc[i] = b->shape[i];
        for (int i = 0; i < b->ndim - 2; i++) nb *= b->shape[i];
        q->bc = malloc((size_t)(count ? count : 1));
        q->csum = malloc((size_t)(nb * N > 0 ? nb * N : 1) * sizeof *q->csum);
        if (!q->bc || !q->csum) goto oom;
        to_s8(b->const_data, q->bdt, count, q->bc);
        col_sums(q->bc, nb, K, N, q->csum);
    }
    return q;
oom:
    ox_qmm_free(q);
    ox_fail(e, "out of memory");
    return NULL;
}

/* A's, B's and the result's dims for these inputs, right-aligned to the result's rank *r. */
static int run_dims(const ox_qmm *q, const nnp_tensor *in, int nin, int64_t *ad, int64_t *bd,
                    int64_t *yd, int *r, ox_err *e)
{
    if (nin != q->nkin || !in)
        return ox_fail(e, "node '%s' (%s): the kernel has %d inputs; called with %d", q->name,
                       q->op, q->nkin, nin);
    const nnp_tensor *a = &in[q->kin0 + q->r.a], *b = &in[q->kin0 + q->r.b];
    if (a->ndim != q->ar || int8_type(a->dtype) != q->adt || (a->ndim && !a->shape))
        return ox_fail(e, "node '%s' (%s): A must be a tensor of rank %d of its type", q->name,
                       q->op, q->ar);
    const int64_t *bs = q->bc ? q->bdc : b->shape;
    if (!q->bc && (b->ndim != q->br || int8_type(b->dtype) != q->bdt || !b->shape))
        return ox_fail(e, "node '%s' (%s): B must be a tensor of rank %d of its type", q->name,
                       q->op, q->br);
    int R = q->ar > q->br ? q->ar : q->br;
    for (int i = 0; i < R; i++) {
        ad[i] = i < R - q->ar ? 1 : a->shape[i - (R - q->ar)];
        bd[i] = i < R - q->br ? 1 : bs[i - (R - q->br)];
    }
    if (ad[R - 1] != bd[R - 2])
        return ox_fail(e, "node '%s' (%s): A's columns (%lld) differ from B's rows (%lld)", q->name,
                       q->op, (long long)ad[R - 1], (long long)bd[R - 2]);
    for (int i = 0; i < R - 2; i++) {
        if (ad[i] != bd[i] && ad[i] != 1 && bd[i] != 1)
            return ox_fail(e, "node '%s' (%s): batch dims %lld and %lld do not broadcast", q->name,
                           q->op, (long long)ad[i], (long long)bd[i]);
        yd[i] = ad[i] == 1 ? bd[i] : ad[i];
    }
    yd[R - 2] = ad[R - 2];
    yd[R - 1] = bd[R - 1];
    if (q->nbzp > 1 && q->nbzp != yd[R - 1])
        return ox_fail(e, "node '%s' (%s): b_zero_point has %lld elements for %lld columns",
                       q->name, q->op, (long long)q->nbzp, (long long)yd[R - 1]);
    *r = R;
    return 0;
}

static int64_t numel(int r, const int64_t *d)
{
    int64_t n = 1;
    for (int i = 0; i < r; i++) n *= d[i];
    return n;
}

int ox_qmm_output_shape(const ox_qmm *q, const nnp_tensor *in, int nin, int32_t *ndim,
                        int64_t *shape, ox_err *e)
{
    int64_t ad[MAXR], bd[MAXR];
    int r;
    if (q->cast) {
        const nnp_tensor *x = in && nin == q->nkin ? &in[q->kin0] : NULL;
        if (!x || x->ndim > MAXR || (x->ndim && !x->shape))
            return ox_fail(e, "node '%s' (Cast): its input must be a tensor of rank up to %d",
                           q->name, MAXR);
        *ndim = x->ndim;
        for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
        return 0;
    }
    if (run_dims(q, in, nin, ad, bd, shape, &r, e)) return 1;
    *ndim = r;
    return 0;
}

static dnnl_memory_desc_t md_of(int r, const int64_t *dims, dnnl_data_type_t dt)
{
    dnnl_dims_t d, s;
    int64_t st = 1;
    for (int i = r - 1; i >= 0; i--) {
        d[i] = dims[i];
        s[i] = st;
        st *= dims[i];
    }
    dnnl_memory_desc_t md = NULL;
    return D(dnnl_memory_desc_create_with_strides)(&md, r, d, dt, s) == dnnl_success ? md : NULL;
}

/* The matmul for these dims at the current thread count: a kept one, else a new one, kept while
 * there is room, else made in *temp (then the caller frees it). NULL with a message when oneDNN
 * has none. */
static const qprim *get_prim(ox_qmm *q, int r, const int64_t *ad, const int64_t *bd,
                             const int64_t *yd, qprim *temp, ox_err *e)
{
    int threads = ox_num_threads();
    size_t bytes = (size_t)r * sizeof(int64_t);
    pthread_mutex_lock(&q->mu);
    for (int i = 0; i < q->nprim; i++) {
        qprim *p = &q->prims[i];
        if (p->threads == threads && p->r == r && !memcmp(p->ad, ad, bytes) &&
            !memcmp(p->bd, bd, bytes)) {
            pthread_mutex_unlock(&q->mu);
            return p;
        }
    }
    qprim made = {.threads = threads, .r = r};
    memcpy(made.ad, ad, bytes);
    memcpy(made.bd, bd, bytes);
    made.amd = md_of(r, ad, q->adt);
    /* a constant B: packed, below */
    made.bmd = q->bc ? typed_md(r, bd, dnnl_s8, dnnl_format_tag_any) : md_of(r, bd, dnnl_s8);
    made.ymd = md_of(r, yd, dnnl_s32);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int ok =
        made.amd && made.bmd && made.ymd && D(dnnl_primitive_attr_create)(&attr) == dnnl_success &&
        D(dnnl_primitive_attr_set_scratchpad_mode)(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    dl_omp_set_num_threads(threads); /* oneDNN sizes its kernels for the creating thread's */
    ok = ok && D(dnnl_matmul_primitive_desc_create)(&pd, ox_engine(), made.amd, made.bmd, NULL,
                                                    made.ymd, attr) == dnnl_success;
    if (ok) {
        const_dnnl_memory_desc_t smd =
            D(dnnl_primitive_desc_query_md)(pd, dnnl_query_scratchpad_md, 0);
        made.scratch = smd ? D(dnnl_memory_desc_get_size)(smd) : 0;
        ok = D(dnnl_primitive_create)(&made.prim, pd) == dnnl_success;
    }
    if (ok && q->bc) { /* packed once: from plain bytes, oneDNN's brgemm copies B every call */
        dnnl_memory_desc_t plain = md_of(r, bd, dnnl_s8), packed = NULL;
        const_dnnl_memory_desc_t want =
            D(dnnl_primitive_desc_query_md)(pd, dnnl_query_weights_md, 0);
        ok = plain && want && D(dnnl_memory_desc_clone)(&packed, want) == dnnl_success &&
             (made.bpacked = reorder_new(q->bc, plain, packed)) != NULL;
        D(dnnl_memory_desc_destroy)(made.bmd);
        made.bmd = packed;
        if (plain) D(dnnl_memory_desc_destroy)(plain);
    }
    if (pd) D(dnnl_primitive_desc_destroy)(pd);
    if (attr) D(dnnl_primitive_attr_destroy)(attr);
    const qprim *got = NULL;
    if (!ok) {
        prim_free(&made);
        ox_fail(e, "node '%s' (%s): oneDNN has no int8 matmul for it", q->name, q->op);
    } else if (q->nprim < QMAXPRIMS) {
        q->prims[q->nprim] = made;
        got = &q->prims[q->nprim++];
    } else {
        *temp = made;
        got = temp;
    }
    pthread_mutex_unlock(&q->mu);
    return got;
}

int ox_qmm_workspace(const ox_qmm *qc, const nnp_tensor *in, int nin, uint64_t *nbytes, ox_err *e)
{
    ox_qmm *q = (ox_qmm *)qc; /* the primitives are the kernel's one mutable part, locked */
    int64_t ad[MAXR], bd[MAXR], yd[MAXR];
    int r;
    *nbytes = 0;
    if (q->cast) return 0;
    if (run_dims(q, in, nin, ad, bd, yd, &r, e)) return 1;
    if (!numel(r, yd) || !ad[r - 1]) return 0; /* nothing to multiply */
    qprim temp = {0};
    const qprim *p = get_prim(q, r, ad, bd, yd, &temp, e);
    if (!p) return 1;
    *nbytes = p->scratch;
    if (p == &temp) prim_free(&temp);
    return 0;
}

/* Index of the batch matrix of a value of dims d (right-aligned, rank r) that the result's
 * batch matrix bo reads, broadcasting dims of 1. */
static int64_t batch_of(int64_t bo, int r, const int64_t *d, const int64_t *yd)
{
    int64_t idx = 0, stride = 1;
    for (int i = r - 3; i >= 0; i--) {
        int64_t k = bo % yd[i];
        bo /= yd[i];
        if (d[i] != 1) idx += k * stride;
        stride *= d[i];
    }
    return idx;
}

static int execute(const qprim *p, const void *a, const void *b, void *y, void *scratch, ox_err *e)
{
    dnnl_memory_t m[4] = {NULL, NULL, NULL, NULL};
    dnnl_stream_t s = ox_thread_stream();
    const_dnnl_primitive_desc_t pd = NULL;
    const_dnnl_memory_desc_t smd = NULL;
    int rc = 1;
    if (!s || D(dnnl_primitive_get_primitive_desc)(p->prim, &pd) != dnnl_success) goto done;
    smd = D(dnnl_primitive_desc_query_md)(pd, dnnl_query_scratchpad_md, 0);
    if (D(dnnl_memory_create)(&m[0], p->amd, ox_engine(), (void *)a) != dnnl_success ||
        D(dnnl_memory_create)(&m[1], p->bmd, ox_engine(), (void *)b) != dnnl_success ||
        D(dnnl_memory_create)(&m[2], p->ymd, ox_engine(), y) != dnnl_success ||
        (p->scratch && D(dnnl_memory_create)(&m[3], smd, ox_engine(), scratch) != dnnl_success))
        goto done;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m[0]},
                               {DNNL_ARG_WEIGHTS, m[1]},
                               {DNNL_ARG_DST, m[2]},
                               {DNNL_ARG_SCRATCHPAD, m[3]}};
    dl_omp_set_num_threads(p->threads);
    rc = D(dnnl_primitive_execute)(p->prim, s, p->scratch ? 4 : 3, args) != dnnl_success ||
         D(dnnl_stream_wait)(s) != dnnl_success;
done:
    for (int i = 0; i < 4; i++)
        if (m[i]) D(dnnl_memory_destroy)(m[i]);
    return rc ? ox_fail(e, "oneDNN failed to run an int8 matmul") : 0;
}

/* QLinearMatMul's output from its int32 sums acc (n of them, rows of N): as the cpu backend's
 * q8put, round(float(acc) * mult) + zy, ties to even, saturated; a NaN gives zy. */
static void requantize(const ox_qmm *q, const int32_t *acc, int64_t n, int64_t N, void *out)
{
    float lo = q->ydt == dnnl_u8 ? 0.f : -128.f, hi = q->ydt == dnnl_u8 ? 255.f : 127.f;
    for (int64_t i = 0; i < n; i++) {
        float v = (float)acc[i] * q->mult[q->nmult == 1 ? 0 : i % N];
        float r = nearbyintf(v) + (float)q->yzp;
        r = r < lo ? lo : r > hi ? hi : r;
        if (r != r) r = (float)q->yzp;
        if (q->ydt == dnnl_u8) ((uint8_t *)out)[i] = (uint8_t)r;
        else ((int8_t *)out)[i] = (int8_t)r;
    }
}

/* The sums' epilogue, rows shared among the pool's threads: the zero points taken out (in
 * 32-bit wrapping arithmetic), then, for a kernel ending with a Cast, each sum converted to
 * float32 in place (the same 4 bytes). */
typedef struct {
    const ox_qmm *q;
    int32_t *y;
    int64_t M, N, K, nrows;
    int r;
    const int64_t *ad, *bd, *yd;
    int32_t za;
    const int32_t *csum, *rs;
} epilogue_job;

static void epilogue_part(void *arg)
{
    const epilogue_job *j = arg;
    const ox_qmm *q = j->q;
    int64_t t0, t1, N = j->N, M = j->M;
    dl_share(j->nrows, &t0, &t1);
    uint32_t uza = (uint32_t)j->za, uk = (uint32_t)j->K;
    for (int64_t row_i = t0; row_i < t1; row_i++) {
        int64_t bo = row_i / M, m = row_i % M;
        uint32_t *row = (uint32_t *)(j->y + row_i * N);
        if (j->za || q->bzp_nonzero) {
            const int32_t *c = j->za ? j->csum + batch_of(bo, j->r, j->bd, j->yd) * N : NULL;
            const int32_t *rr = j->rs ? j->rs + batch_of(bo, j->r, j->ad, j->yd) * M : NULL;
            uint32_t t = rr ? (uint32_t)rr[m] - uk * uza : 0; /* rowsum(A) - K za */
            if (c)
                for (int64_t n = 0; n < N; n++) row[n] -= uza * (uint32_t)c[n];
            if (rr && q->nbzp == 1) {
                uint32_t d = (uint32_t)q->bzp[0] * t;
                for (int64_t n = 0; n < N; n++) row[n] -= d;
            } else if (rr)
                for (int64_t n = 0; n < N; n++) row[n] -= (uint32_t)q->bzp[n] * t;
        }
        if (q->f32out) {
            float *f = (float *)row;
            for (int64_t n = 0; n < N; n++) f[n] = (float)(int32_t)row[n];
        }
    }
}

typedef struct {
    const int32_t *x;
    float *y;
    int64_t n;
} cast_job;

static void cast_part(void *arg)
{
    const cast_job *j = arg;
    int64_t t0, t1;
    dl_share(j->n, &t0, &t1);
    for (int64_t i = t0; i < t1; i++) j->y[i] = (float)j->x[i];
}

static int run_cast(const ox_qmm *q, const nnp_tensor *in, int nin, const nnp_tensor *out,
                    ox_err *e)
{
    int32_t ndim;
    int64_t shape[MAXR];
    if (ox_qmm_output_shape(q, in, nin, &ndim, shape, e)) return 1;
    int64_t n = numel(ndim, shape);
    int ok = out && out->ndim == ndim && !out->strides && (out->data || !n) &&
             (!ndim || out->shape) && out->dtype.code == NNP_DTYPE_FLOAT && out->dtype.bits == 32 &&
             (in[q->kin0].data || !n);
    for (int i = 0; ok && i < ndim; i++) ok = out->shape[i] == shape[i];
    if (!ok)
        return ox_fail(e,
                       "node '%s' (Cast): the output must be a compact float32 tensor of its "
                       "input's shape",
                       q->name);
    cast_job j = {nnp_tensor_ptr(&in[q->kin0]), nnp_tensor_ptr(out), n};
    dl_parallel(cast_part, &j, dl_threads_for(n, ox_num_threads()));
    return 0;
}

int ox_qmm_run(const ox_qmm *qc, const nnp_tensor *in, int nin, const nnp_tensor *out, void *ws,
               uint64_t wsn, ox_err *e)
{
    ox_qmm *q = (ox_qmm *)qc;
    if (q->cast) return run_cast(q, in, nin, out, e);
    int64_t ad[MAXR], bd[MAXR], yd[MAXR];
    int r;
    if (run_dims(q, in, nin, ad, bd, yd, &r, e)) return 1;
    int64_t ny = numel(r, yd), M = yd[r - 2], N = yd[r - 1], K = ad[r - 1];
    int ok = out && out->ndim == r && !out->strides && (out->data || !ny) && out->shape &&
             (q->mult     ? int8_type(out->dtype) == q->ydt
              : q->f32out ? out->dtype.code == NNP_DTYPE_FLOAT && out->dtype.bits == 32
                          : out->dtype.code == NNP_DTYPE_INT && out->dtype.bits == 32);
    for (int i = 0; ok && i < r; i++) ok = out->shape[i] == yd[i];
    if (!ok)
        return ox_fail(e,
                       "node '%s' (%s): the output must be a compact tensor of its type and "
                       "of the shape the inputs give",
                       q->name, q->op);
    if (!ny) return 0;
    int32_t *y = q->mult ? malloc((size_t)ny * sizeof *y) : nnp_tensor_ptr(out);
    if (!y) return ox_fail(e, "out of memory");
    if (!K) { /* sums of nothing (0 is 0.0f's bits too) */
        memset(y, 0, (size_t)ny * sizeof *y);
        if (q->mult) {
            requantize(q, y, ny, N, nnp_tensor_ptr(out));
            free(y);
        }
        return 0;
    }
    const void *a = nnp_tensor_ptr(&in[q->kin0 + q->r.a]);
    const void *braw = q->bc ? NULL : nnp_tensor_ptr(&in[q->kin0 + q->r.b]);
    const void *zin = q->azp_in >= 0 ? nnp_tensor_ptr(&in[q->azp_in]) : NULL;
    if (!a || (!q->bc && !braw) || (q->azp_in >= 0 && !zin)) {
        if (q->mult) free(y);
        return ox_fail(e, "node '%s' (%s): an input has no data", q->name, q->op);
    }
    int32_t za = zin ? get8(zin, q->adt, 0) : q->azp;
    int64_t nba = numel(r - 2, ad), nbb = numel(r - 2, bd), nb = numel(r - 2, yd);
    qprim temp = {0};
    const qprim *p = get_prim(q, r, ad, bd, yd, &temp, e);
    if (!p) {
        if (q->mult) free(y);
        return 1;
    }
    void *own = NULL, *scratch = ws;
    int8_t *bs = NULL;
    int32_t *cs = NULL, *rs = NULL;
    int rc = 1;
    if (p->scratch && (!ws || wsn < p->scratch)) { /* the thread count changed since sized */
        if (posix_memalign(&own, 64, (size_t)p->scratch)) goto oom;
        scratch = own;
    }
    const int8_t *b = q->bc;
    if (!b) {
        if (q->bdt == dnnl_s8) b = braw;
        else {
            if (!(bs = malloc((size_t)(nbb * K * N)))) goto oom;
            to_s8(braw, q->bdt, nbb * K * N, bs);
            b = bs;
        }
    }
    const int32_t *csum = q->csum;
    if (za && !csum) {
        if (!(cs = malloc((size_t)(nbb * N) * sizeof *cs))) goto oom;
        col_sums(b, nbb, K, N, cs);
        csum = cs;
    }
    if (q->bzp_nonzero) {
        if (!(rs = malloc((size_t)(nba * M) * sizeof *rs))) goto oom;
        for (int64_t m = 0; m < nba * M; m++) {
            int32_t s = 0;
            for (int64_t k = 0; k < K; k++) s += get8(a, q->adt, m * K + k);
            rs[m] = s;
        }
    }
    if (execute(p, a, p->bpacked ? p->bpacked : b, y, scratch, e)) goto done;
    if (za || q->bzp_nonzero || q->f32out) {
        epilogue_job j = {q, y, M, N, K, nb * M, r, ad, bd, yd, za, csum, rs};
        dl_parallel(epilogue_part, &j, dl_threads_for(ny, p->threads));
    }
    if (q->mult) requantize(q, y, ny, N, nnp_tensor_ptr(out));
    rc = 0;
    goto done;
oom:
    ox_fail(e, "out of memory");
done:
    if (q->mult) free(y);
    if (p == &temp) prim_free(&temp);
    free(own);
    free(bs);
    free(cs);
    free(rs);
    return rc;
}
