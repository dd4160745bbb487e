/* Gemm and MatMul over BLAS, split into row or column blocks across threads, with the
 * bias and a fused activation applied per block. Constant B is packed once (alpha folded). */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <stdatomic.h>
#include <stdlib.h>

/* ---- matrix-vector products ---------------------------------------------------------- */

/* Every output is summed in the same order whatever its position, so equal weight rows give
 * bit-identical outputs (the zoo's models, with constant weights, depend on it: their logits
 * are huge and equal, and the softmax after them must stay uniform). Memory bound; vectorised
 * through the 16 explicit lanes. */
MULTIVERSION
static void gemv_rows(const float *W, int64_t ldw, int64_t K, const float *x, int64_t incx,
                      float alpha, float *y, int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++) {
        const float *w = W + r * ldw;
        float acc[16] = {0};
        int64_t k = 0;
        if (incx == 1) {
            for (; k + 16 <= K; k += 16)
                for (int l = 0; l < 16; l++) acc[l] += w[k + l] * x[k + l];
        }
        float tail = 0.f;
        for (; k < K; k++) tail += w[k] * x[k * incx];
        for (int h = 8; h >= 1; h /= 2)
            for (int l = 0; l < h; l++) acc[l] += acc[l + h];
        y[r] = alpha * (acc[0] + tail);
    }
}

/* y[n0:n1] = alpha * x . B[:, n0:n1] for row-major B (K x ldb): lanes are columns. */
MULTIVERSION
static void gemv_cols(const float *B, int64_t ldb, int64_t K, const float *x, int64_t incx,
                      float alpha, float *y, int64_t n0, int64_t n1)
{
    for (int64_t n = n0; n < n1; n++) y[n] = 0.f;
    for (int64_t k = 0; k < K; k++) {
        const float xv = x[k * incx], *b = B + k * ldb;
        for (int64_t n = n0; n < n1; n++) y[n] += xv * b[n];
    }
    for (int64_t n = n0; n < n1; n++) y[n] *= alpha;
}

/* ---- threaded sgemm with epilogue ---------------------------------------------------- */

typedef struct {
    int ta, tb;
    int64_t M, N, K;
    float alpha;
    const float *A, *B;
    int64_t lda, ldb;
    float *C;
    int64_t ldc;
    const float *bias;   /* added as bias[m*bsm + n*bsn] */
    int64_t bsm, bsn;
    const nnc_act *act;
    int64_t blk, nblk;
    int split_m;
} gemm_job;

static void gemm_block(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    gemm_job *j = arg;
    for (int64_t t = b; t < e; t++) {
        int64_t m0 = 0, m1 = j->M, n0 = 0, n1 = j->N;
        if (j->split_m) {
            m0 = t * j->blk;
            m1 = m0 + j->blk < j->M ? m0 + j->blk : j->M;
        } else {
            n0 = t * j->blk;
            n1 = n0 + j->blk < j->N ? n0 + j->blk : j->N;
        }
        if (m0 >= m1 || n0 >= n1) continue;
        const float *A = j->A + (j->ta ? m0 : m0 * j->lda);
        const float *B = j->B + (j->tb ? n0 * j->ldb : n0);
        float *C = j->C + m0 * j->ldc + n0;
        if (m1 - m0 == 1) {
            /* one row: a matrix-vector product streams B once, with no packing */
            int64_t incx = j->ta ? j->lda : 1;
            if (j->tb) gemv_rows(j->B, j->ldb, j->K, A, incx, j->alpha, C - n0, n0, n1);
            else gemv_cols(j->B, j->ldb, j->K, A, incx, j->alpha, C - n0, n0, n1);
        } else {
            nnc_sgemm(j->ta, j->tb, m1 - m0, n1 - n0, j->K, j->alpha, A, j->lda, B, j->ldb, 0.f, C,
                      j->ldc);
        }
        for (int64_t m = m0; m < m1; m++) {
            float *row = C + (m - m0) * j->ldc;
            if (j->bias) {
                const float *bb = j->bias + m * j->bsm;
                if (j->bsn)
                    for (int64_t k = 0; k < n1 - n0; k++) row[k] += bb[(n0 + k) * j->bsn];
                else
                    for (int64_t k = 0; k < n1 - n0; k++) row[k] += bb[0];
            }
            if (j->act && j->act->kind) nnc_apply_act(row, n1 - n0, j->act);
        }
    }
}

static void gemm_mt(gemm_job *j)
{
    int T = nnc_num_threads();
    double flops = (double)j->M * (double)j->N * (double)j->K;
    int64_t tasks = 1;
    if (flops > 2e5 && T > 1) tasks = 2 * T;
    j->split_m = j->M >= 8 * tasks && j->M >= j->N / 4;
    int64_t dim = j->split_m ? j->M : j->N;
    int64_t minblk = j->split_m ? 8 : 32;
    j->blk = (dim + tasks - 1) / tasks;
    if (j->blk < minblk) j->blk = minblk;
    j->nblk = (dim + j->blk - 1) / j->blk;
    if (j->nblk <= 1) gemm_block(j, 0, 1, 0);
    else nnc_parallel_for(j->nblk, 1, gemm_block, j);
}

void nnc_sgemm_mt(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc)
{
    gemm_job j = {.ta = ta,
                  .tb = tb,
                  .M = m,
                  .N = n,
                  .K = k,
                  .alpha = alpha,
                  .A = a,
                  .lda = lda,
                  .B = b,
                  .ldb = ldb,
                  .C = c,
                  .ldc = ldc};
    gemm_mt(&j);
}

/* ---- products with a constant weight, packed once ------------------------------------ */

/* A float32 MatMul whose B is a constant 2-D weight [K, N] (a transformer's projections), or a
 * Gemm of a constant B (alpha * op(B) packed): B is packed once in the GEMM's panel layout, A's
 * leading dims are folded into the rows of one product, and a bias (Gemm's C), a residual Add
 * and an activation fused by the planner run in the epilogue of each 6x16 tile. Threads split
 * the columns in blocks of MM_COLS, so each block of packed B (MM_COLS x 256 floats per depth
 * block) stays in L2 while the rows pass over it. */
#define MM_COLS 128
#define MM_SPLIT_B 32768 /* B floats from which a few-rows product is split across threads */
#define MM_SHARE_ROWS 512 /* rows up to which each thread takes one equal share of the columns */

/* Packing memory of the calling thread, kept between runs, for plans without planned scratch. */
static _Thread_local nnc_tbuf t_pa;

static float *mm_pack_memory(size_t nbytes)
{
    return nnc_tbuf_get(&t_pa, nbytes);
}

typedef struct {
    int64_t M, N, K;
    const float *pa, *pb;
    float *C;
    nnc_gemm_epi ep;
    int64_t width;  /* columns per task, a multiple of NNC_GEMM_NR */
    const float *A; /* set: each task packs A itself, into its thread's memory (pa unset) */
    atomic_int failed;
} mm_packed_job;

static void mm_packed_cols(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    mm_packed_job *j = arg;
    const float *pa = j->pa;
    if (j->A) {
        float *own = mm_pack_memory((size_t)nnc_sgemm_packed_a_floats(j->M, j->K) * sizeof(float));
        if (!own) {
            atomic_store(&j->failed, 1);
            return;
        }
        nnc_sgemm_pack_a(j->M, j->K, j->A, j->K, own);
        pa = own;
    }
    nnc_sgemm_packed_cols(j->M, j->N, j->K, pa, j->pb, j->C, j->N, &j->ep, b * j->width,
                          e * j->width);
}

/* C[M x N] = A[M x K] (row-major, packed here) * packed B, then the epilogue: the one way a
 * product with a constant weight runs (MatMul's and Gemm's). Few rows read each packed B element
 * once: their time is B's bytes from memory, which two threads fetch faster than one well
 * before the arithmetic is worth splitting. */
static int packed_product(int64_t M, int64_t K, int64_t N, const float *A, const float *pb,
                          const nnc_gemm_epi *ep, float *C, nnc_exec *x)
{
    size_t pan = (size_t)nnc_sgemm_packed_a_floats(M, K) * sizeof(float);
    mm_packed_job j = {M, N, K, NULL, pb, C, *ep, MM_COLS, NULL, 0};
    int64_t blocks = (N + MM_COLS - 1) / MM_COLS, tasks = 0, chunk = 1;
    double flops = (double)M * (double)N * (double)K, bfloats = (double)N * (double)K;
    int T = nnc_num_threads();
    int alone = (flops < 2e5 && !(M <= 4 && bfloats >= MM_SPLIT_B)) || blocks == 1 || T <= 1;
    if (!alone && M <= 4) { /* one contiguous share of B per thread: each reads one stream */
        tasks = blocks;
        chunk = (blocks + T - 1) / T;
    } else if (!alone && M <= MM_SHARE_ROWS) {
        /* a prompt's or a sequence's rows: one equal share of the columns per thread, so no
         * thread waits for another's last block (43 panels were 24 against 19 in blocks of
         * 128), and each packs A once */
        int64_t panels = (N + NNC_GEMM_NR - 1) / NNC_GEMM_NR;
        j.width = (panels + T - 1) / T * NNC_GEMM_NR;
        tasks = (N + j.width - 1) / j.width;
    }
    if (tasks) {
        /* each thread its own share of the columns: each packs A itself, in its own memory.
         * One packing for all, written by one core and read by the others, took a sixth of a
         * 16-row product's time on 2 threads while the others waited (16 x 256 x 688 and back:
         * 58 -> 43 us; 128 x 512 x 1376: 530 -> 460 us). */
        j.A = A;
        nnc_parallel_for(tasks, chunk, mm_packed_cols, &j);
        return !atomic_load(&j.failed);
    }
    float *pa = nnc_scratch(x, 0, pan);
    if (!pa) pa = mm_pack_memory(pan); /* A's shape known only at run time: no planned scratch */
    if (!pa) return 0;
    nnc_sgemm_pack_a(M, K, A, K, pa);
    j.pa = pa;
    if (alone) mm_packed_cols(&j, 0, blocks, 0);
    else nnc_parallel_for(blocks, 1, mm_packed_cols, &j);
    return 1;
}

static int run_packed(nnc_node *n, int64_t M, int64_t K, int64_t N, const float *A, const float *pb,
                      const nnc_gemm_epi *ep, float *C, nnc_exec *x, nnc_err *e)
{
    if (!packed_product(M, K, N, A, pb, ep, C, x))
        return nnc_node_fail(e, n, "out of memory packing A (%zu bytes)",
                             (size_t)nnc_sgemm_packed_a_floats(M, K) * sizeof(float));
    return NNC_OK;
}

int nnc_sgemm_packed_b_product(int64_t m, int64_t k, int64_t n, const float *a, const float *pb,
                               float *c)
{
    nnc_gemm_epi ep = {NULL, NULL, 0, NULL, NULL};
    return packed_product(m, k, n, a, pb, &ep, c, NULL);
}

/* ---- Gemm ----------------------------------------------------------------------------- */

typedef struct {
    int ta, tb;
    float alpha, beta;
    float *packed_b; /* [N][K] = alpha * B^T when B is constant and A transposed */
    float *pb;       /* alpha * op(B) in panels (run_packed) when B is constant, A not */
    int64_t pk, pn;
    float *cbias;    /* beta * C per column when C is constant and the same for every row */
} gemm_state;

static void gemm_destroy(nnc_node *n)
{
    gemm_state *s = n->state;
    if (!s) return;
    nnc_free(s->packed_b);
    nnc_free(s->pb);
    nnc_free(s->cbias);
    free(s);
    n->state = NULL;
}

int nnc_gemm_can_fuse(const nnc_node *n)
{
    return n->act.kind == ACT_NONE;
}

/* beta * C as one value per column, when C is constant and the same for every row ([N], [1, N],
 * a scalar): the packed product adds it in its epilogue. */
static int gemm_const_bias(nnc_node *n, gemm_state *s, nnc_err *e)
{
    if (!nnc_in_present(n, 2) || s->beta == 0.f || !nnc_in_const(n, 2) || !nnc_in_static(n, 2))
        return NNC_OK;
    const nnc_valinfo *c = n->vin[2];
    int64_t numel = 1;
    for (int d = 0; d < c->ndim; d++) numel *= c->dims[d];
    int rows_alike = numel == 1 || (numel == s->pn && c->dims[c->ndim - 1] == s->pn);
    if (!rows_alike || c->dtype != DT_F32) return NNC_OK;
    s->cbias = nnc_alloc((size_t)(s->pn ? s->pn : 1) * sizeof(float));
    if (!s->cbias) return nnc_node_fail(e, n, "out of memory");
    const float *cd = c->const_data;
    for (int64_t j = 0; j < s->pn; j++) s->cbias[j] = s->beta * cd[numel == 1 ? 0 : j];
    return NNC_OK;
}

/* dst (rows x cols) = alpha * src, src read as rows x cols or, when transposed, as cols x rows,
 * in 32 x 32 blocks: gathering each row from a column of src read all of src once per row (2 ms
 * of a cached ResNet-50 load, for its 2048 x 1000 classifier). */
static void scaled_matrix(float *dst, const float *src, int64_t rows, int64_t cols, int transposed,
                          float alpha)
{
    for (int64_t r0 = 0; r0 < rows; r0 += 32)
        for (int64_t c0 = 0; c0 < cols; c0 += 32)
            for (int64_t r = r0; r < rows && r < r0 + 32; r++)
                for (int64_t c = c0; c < cols && c < c0 + 32; c++)
                    dst[r * cols + c] =
                        alpha * (transposed ? src[c * rows + r] : src[r * cols + c]);
}

static int gemm_create(nnc_node *n, nnc_err *e)
{
    static const int f32[] = {DT_F32, 0};
    for (int i = 0; i < n->nin; i++) TRY(nnc_check_dtype(n, i, f32, e));
    gemm_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int64_t ta, tb;
    TRY(nnc_attr_int(n, "transA", 0, &ta, e));
    TRY(nnc_attr_int(n, "transB", 0, &tb, e));
    TRY(nnc_attr_float(n, "alpha", 1.f, &s->alpha, e));
    TRY(nnc_attr_float(n, "beta", 1.f, &s->beta, e));
    s->ta = ta != 0;
    s->tb = tb != 0;
    for (int i = 0; i < 2; i++)
        if (n->vin[i] && n->vin[i]->ndim >= 0 && n->vin[i]->ndim != 2)
            return nnc_node_fail(e, n, "input %c must be 2-D, got rank %d", 'A' + i,
                                 n->vin[i]->ndim);
    if (nnc_in_present(n, 2) && n->vin[2]->ndim > 2)
        return nnc_node_fail(e, n, "input C must have rank 2 or less, got %d", n->vin[2]->ndim);
    if (nnc_in_static(n, 0) && nnc_in_static(n, 1)) {
        int64_t ka = n->vin[0]->dims[s->ta ? 0 : 1], kb = n->vin[1]->dims[s->tb ? 1 : 0];
        if (ka != kb)
            return nnc_node_fail(e, n,
                                 "inner dimensions differ: A gives K = %lld, B gives K = %lld",
                                 (long long)ka, (long long)kb);
    }
    if (!n->probing && nnc_in_const(n, 1) && nnc_in_static(n, 1)) {
        const nnc_valinfo *b = n->vin[1];
        int64_t K = b->dims[s->tb ? 1 : 0], N = b->dims[s->tb ? 0 : 1];
        if (K * N > INT32_MAX || K > INT32_MAX) return nnc_node_fail(e, n, "B is too large");
        const float *src = b->const_data;
        s->pk = K;
        s->pn = N;
        if (!s->ta) { /* the product of MatMul's constant weights, bias in its epilogue */
            /* alpha * B as K x N rows first, where it is not src itself */
            int as_is = !s->tb && s->alpha == 1.f;
            float *b = as_is ? NULL : malloc((size_t)(K * N ? K * N : 1) * sizeof(float));
            s->pb = nnc_alloc((size_t)nnc_sgemm_packed_b_floats(K, N) * sizeof(float));
            if (!s->pb || (!as_is && !b)) {
                free(b);
                return nnc_node_fail(e, n, "out of memory packing B");
            }
            if (b) scaled_matrix(b, src, K, N, s->tb, s->alpha);
            nnc_sgemm_pack_b(K, N, b ? b : src, N, s->pb);
            free(b);
            return gemm_const_bias(n, s, e);
        }
        s->packed_b = nnc_alloc((size_t)(K * N) * sizeof(float));
        if (!s->packed_b) return nnc_node_fail(e, n, "out of memory packing B");
        scaled_matrix(s->packed_b, src, N, K, !s->tb, s->alpha); /* [N][K] = alpha * B^T */
    }
    return NNC_OK;
}

static int gemm_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const gemm_state *s = n->state;
    const nnc_tensor *a = in[0], *b = in[1];
    if (a->ndim != 2 || b->ndim != 2) return nnc_node_fail(e, n, "A and B must be 2-D");
    if (a->dtype != DT_F32 || b->dtype != DT_F32)
        return nnc_node_fail(e, n, "inputs must be float32");
    int64_t M = a->dims[s->ta ? 1 : 0], K = a->dims[s->ta ? 0 : 1];
    int64_t K2 = b->dims[s->tb ? 1 : 0], N = b->dims[s->tb ? 0 : 1];
    if (K != K2)
        return nnc_node_fail(e, n, "inner dimensions differ: %lld vs %lld", (long long)K,
                             (long long)K2);
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return nnc_node_fail(e, n, "matrix too large");
    out->dtype = DT_F32;
    out->ndim = 2;
    out->dims[0] = M;
    out->dims[1] = N;
    if (n->nin > 2 && in[2]) {
        const nnc_tensor *c = in[2];
        nnc_tensor bc;
        if (c->dtype != DT_F32) return nnc_node_fail(e, n, "C must be float32");
        if (nnc_broadcast_shape(out, c, &bc) || !nnc_same_shape(&bc, out))
            return nnc_node_fail(e, n, "C cannot be broadcast to (%lld, %lld)", (long long)M,
                                 (long long)N);
    }
    return NNC_OK;
}

/* A Gemm of a constant B on the packed product: C in the epilogue when it is the constant
 * per-column bias or, with beta 1, a full [M, N] C; any other C added after, then the
 * activation. */
static int gemm_run_packed(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x,
                           nnc_err *e)
{
    const gemm_state *s = n->state;
    int64_t M = out->dims[0];
    if (M == 0 || s->pn == 0) return NNC_OK;
    const nnc_tensor *c = n->nin > 2 && s->beta != 0.f ? in[2] : NULL;
    nnc_gemm_epi ep = {NULL, NULL, 0, NULL, NULL};
    int after = 0; /* C added after the product */
    if (s->cbias) ep.col_bias = s->cbias;
    else if (c && s->beta == 1.f && c->ndim == 2 && nnc_same_shape(c, out)) {
        ep.res = c->data;
        ep.ldr = s->pn;
    } else after = c != NULL;
    /* Gemm's fused activation is Relu, Clip or LeakyRelu (nnc_unary_as_act), which the
     * epilogue applies, unless C comes after the product */
    if (!after && n->act.kind != ACT_NONE) ep.act = &n->act;
    TRY(run_packed(n, M, s->pk, s->pn, in[0]->data, s->pb, &ep, out->data, x, e));
    float *y = out->data;
    if (after) {
        int64_t cm = c->ndim == 2 ? c->dims[0] : 1, cn = c->ndim >= 1 ? c->dims[c->ndim - 1] : 1;
        const float *cd = c->data;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < s->pn; j++)
                y[i * s->pn + j] += s->beta * cd[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
    }
    if (after && n->act.kind != ACT_NONE) nnc_apply_act(y, M * s->pn, &n->act);
    return NNC_OK;
}

static int gemm_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    const gemm_state *s = n->state;
    if (s->pb) return gemm_run_packed(n, in, out, x, e);
    const nnc_tensor *a = in[0], *b = in[1];
    gemm_job j;
    memset(&j, 0, sizeof j);
    j.M = out->dims[0];
    j.N = out->dims[1];
    j.K = a->dims[s->ta ? 0 : 1];
    j.ta = s->ta;
    j.A = a->data;
    j.lda = a->dims[1];
    if (s->packed_b) {
        j.tb = 1;
        j.B = s->packed_b;
        j.ldb = j.K;
        j.alpha = 1.f;
    } else {
        j.tb = s->tb;
        j.B = b->data;
        j.ldb = b->dims[1];
        j.alpha = s->alpha;
    }
    j.C = out->data;
    j.ldc = j.N;
    j.act = &n->act;
    float *tmp = NULL;
    if (n->nin > 2 && in[2] && s->beta != 0.f) {
        const nnc_tensor *c = in[2];
        int64_t cm = c->ndim == 2 ? c->dims[0] : 1;
        int64_t cn = c->ndim >= 1 ? c->dims[c->ndim - 1] : 1;
        const float *cd = c->data;
        if (s->beta != 1.f) {
            int64_t k = nnc_numel(c);
            tmp = nnc_alloc((size_t)k * sizeof(float));
            if (!tmp) return nnc_node_fail(e, n, "out of memory");
            for (int64_t i = 0; i < k; i++) tmp[i] = s->beta * cd[i];
            cd = tmp;
        }
        j.bias = cd;
        j.bsm = cm == 1 ? 0 : cn;
        j.bsn = cn == 1 ? 0 : 1;
    }
    gemm_mt(&j);
    nnc_free(tmp);
    return NNC_OK;
}

static int gemm_owns(const nnc_node *n, int i)
{
    const gemm_state *s = n->state;
    return s && (s->packed_b || s->pb) && i == 1;
}

static size_t gemm_scratch(const nnc_node *n, nnc_tensor *const *in, const nnc_tensor *out)
{
    (void)in;
    const gemm_state *s = n->state;
    if (!s || !s->pb || !out || out->ndim != 2) return 0;
    return (size_t)nnc_sgemm_packed_a_floats(out->dims[0], s->pk) * sizeof(float);
}

const nnc_op nnc_op_gemm = {
    "Gemm",       2,        3, 1, 1, gemm_create, gemm_infer, gemm_run, gemm_destroy, 0,
    gemm_scratch, gemm_owns};

/* ---- MatMul --------------------------------------------------------------------------- */

/* MatMul's element types: float32 on the GEMM kernel; the others on a plain loop that sums
 * float16/bfloat16 in float32 (as onnxruntime and ml_dtypes do), float64 in double and integers
 * in 64 bits, wrapped to the element width. */
static const int matmul_dts[] = {DT_F32, DT_F16, DT_BF16, DT_F64, DT_I32,
                                 DT_I64, DT_U32, DT_U64,  0};

extern const nnc_op nnc_op_matmul;
typedef struct {
    float *pb;     /* packed B */
    float *bias;   /* per column, fused Add, or NULL */
    int64_t K, N;
} mm_state;

static void matmul_destroy(nnc_node *n)
{
    mm_state *s = n->state;
    if (!s) return;
    nnc_free(s->pb);
    nnc_free(s->bias);
    free(s);
    n->state = NULL;
}

int nnc_matmul_packed(const nnc_node *n)
{
    const mm_state *s = n->op == &nnc_op_matmul ? n->state : NULL;
    return s && s->pb;
}

int64_t nnc_matmul_cols(const nnc_node *n)
{
    return nnc_matmul_packed(n) ? ((const mm_state *)n->state)->N : -1;
}

int nnc_matmul_set_bias(nnc_node *n, const float *bias)
{
    mm_state *s = n->state;
    if (!nnc_matmul_packed(n) || s->bias || n->residual >= 0 || n->act.kind != ACT_NONE) return 0;
    s->bias = nnc_alloc((size_t)s->N * sizeof(float));
    if (!s->bias) return 0;
    memcpy(s->bias, bias, (size_t)s->N * sizeof(float));
    return 1;
}

static int matmul_owns(const nnc_node *n, int i)
{
    return i == 1 && nnc_matmul_packed(n);
}

static int matmul_create(nnc_node *n, nnc_err *e)
{
    TRY(nnc_check_dtype(n, 0, matmul_dts, e));
    TRY(nnc_check_dtype(n, 1, matmul_dts, e));
    if (n->vin[0] && n->vin[1] && n->vin[0]->dtype && n->vin[1]->dtype &&
        n->vin[0]->dtype != n->vin[1]->dtype)
        return nnc_node_fail(e, n, "A is %s and B is %s; MatMul needs one element type",
                             nnc_dtname(n->vin[0]->dtype), nnc_dtname(n->vin[1]->dtype));
    for (int i = 0; i < 2; i++)
        if (n->vin[i] && n->vin[i]->ndim == 0)
            return nnc_node_fail(e, n, "input %d is a scalar; MatMul needs rank 1 or more", i);
    const nnc_valinfo *a = n->vin[0], *b = n->vin[1];
    if (!n->probing && a && b && a->dtype == DT_F32 && a->ndim >= 2 && nnc_in_const(n, 1) &&
        nnc_in_static(n, 1) && b->ndim == 2 && b->dims[0] > 0 && b->dims[1] > 0 &&
        b->dims[0] <= INT32_MAX && b->dims[1] <= INT32_MAX &&
        (a->dims[a->ndim - 1] < 0 || a->dims[a->ndim - 1] == b->dims[0])) {
        mm_state *s = calloc(1, sizeof *s);
        if (!s) return nnc_node_fail(e, n, "out of memory");
        n->state = s;
        s->K = b->dims[0];
        s->N = b->dims[1];
        s->pb = nnc_alloc((size_t)nnc_sgemm_packed_b_floats(s->K, s->N) * sizeof(float));
        if (!s->pb) return nnc_node_fail(e, n, "out of memory packing B");
        nnc_sgemm_pack_b(s->K, s->N, (const float *)b->const_data, s->N, s->pb);
    }
    return NNC_OK;
}

/* Rows of A (all its leading dims) for the packed path. */
static int64_t mm_rows(const nnc_tensor *a)
{
    return a->dims[a->ndim - 1] ? nnc_numel(a) / a->dims[a->ndim - 1] : 0;
}

static size_t matmul_scratch(const nnc_node *n, nnc_tensor *const *in, const nnc_tensor *out)
{
    (void)out;
    if (!nnc_matmul_packed(n) || !in[0] || in[0]->ndim < 2) return 0;
    const mm_state *s = n->state;
    return (size_t)nnc_sgemm_packed_a_floats(mm_rows(in[0]), s->K) * sizeof(float);
}

static int matmul_run_packed(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x,
                             nnc_err *e)
{
    const mm_state *s = n->state;
    const nnc_tensor *a = in[0];
    int64_t M = mm_rows(a);
    if (M == 0) return NNC_OK;
    nnc_gemm_epi ep = {NULL, NULL, 0, NULL, s->bias};
    if (n->residual >= 0) {
        const nnc_tensor *r = in[n->residual];
        if (!r || r->dtype != DT_F32 || !nnc_same_shape(r, out))
            return nnc_node_fail(e, n, "the fused residual does not have the output's shape");
        ep.res = r->data;
        ep.ldr = s->N;
    }
    if (n->act.kind != ACT_NONE) ep.act = &n->act;
    return run_packed(n, M, s->K, s->N, a->data, s->pb, &ep, out->data, x, e);
}

/* Shapes after numpy's 1-D promotion: a (..., M, K), b (..., K, N). */
static int matmul_shapes(nnc_node *n, const nnc_tensor *a, const nnc_tensor *b, nnc_tensor *out,
                         int64_t *M, int64_t *K, int64_t *N, nnc_tensor *ba, nnc_tensor *bb,
                         nnc_err *e)
{
    if (a->ndim < 1 || b->ndim < 1) return nnc_node_fail(e, n, "inputs must have rank 1 or more");
    *M = a->ndim >= 2 ? a->dims[a->ndim - 2] : 1;
    *K = a->dims[a->ndim - 1];
    int64_t kb = b->ndim >= 2 ? b->dims[b->ndim - 2] : b->dims[0];
    *N = b->ndim >= 2 ? b->dims[b->ndim - 1] : 1;
    if (*K != kb)
        return nnc_node_fail(e, n, "inner dimensions differ: %lld vs %lld", (long long)*K,
                             (long long)kb);
    ba->ndim = a->ndim > 2 ? a->ndim - 2 : 0;
    bb->ndim = b->ndim > 2 ? b->ndim - 2 : 0;
    for (int i = 0; i < ba->ndim; i++) ba->dims[i] = a->dims[i];
    for (int i = 0; i < bb->ndim; i++) bb->dims[i] = b->dims[i];
    nnc_tensor batch;
    if (nnc_broadcast_shape(ba, bb, &batch))
        return nnc_node_fail(e, n, "batch dimensions do not broadcast");
    if (batch.ndim + 2 > NNC_MAXDIM) return nnc_node_fail(e, n, "rank too large");
    out->dtype = a->dtype;
    out->ndim = 0;
    for (int i = 0; i < batch.ndim; i++) out->dims[out->ndim++] = batch.dims[i];
    if (a->ndim >= 2) out->dims[out->ndim++] = *M;
    if (b->ndim >= 2) out->dims[out->ndim++] = *N;
    if (*M > INT32_MAX || *N > INT32_MAX || *K > INT32_MAX)
        return nnc_node_fail(e, n, "matrix too large");
    return NNC_OK;
}

static int matmul_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    int64_t M, K, N;
    nnc_tensor ba, bb;
    if (nnc_matmul_packed(n)) { /* B is the packed constant: A (..., M, K) gives (..., M, N) */
        const mm_state *s = n->state;
        const nnc_tensor *a = in[0];
        if (a->dtype != DT_F32 || a->ndim < 2)
            return nnc_node_fail(e, n, "A must be float32 of rank 2 or more");
        if (a->dims[a->ndim - 1] != s->K)
            return nnc_node_fail(e, n, "inner dimensions differ: %lld vs %lld",
                                 (long long)a->dims[a->ndim - 1], (long long)s->K);
        *out = *a;
        out->dims[a->ndim - 1] = s->N;
        out->data = NULL;
        return NNC_OK;
    }
    if (in[0]->dtype != in[1]->dtype)
        return nnc_node_fail(e, n, "A and B must have one element type");
    int ok = 0;
    for (const int *d = matmul_dts; *d; d++) ok |= *d == in[0]->dtype;
    if (!ok)
        return nnc_node_fail(e, n, "element type %s is not supported", nnc_dtname(in[0]->dtype));
    return matmul_shapes(n, in[0], in[1], out, &M, &K, &N, &ba, &bb, e);
}

/* Batch offsets (in elements) of A and B for output batch t. */
typedef struct {
    int nb;
    int64_t ostr[NNC_MAXDIM], astr[NNC_MAXDIM], bstr[NNC_MAXDIM];
} mm_batch;

static void mm_batch_setup(mm_batch *bt, const nnc_tensor *o, int nb, const nnc_tensor *ba,
                           const nnc_tensor *bb, int64_t M, int64_t K, int64_t N)
{
    int64_t sa = M * K, sb = K * N;
    bt->nb = nb;
    for (int i = nb - 1; i >= 0; i--) {
        int ia = i - (nb - ba->ndim), ib = i - (nb - bb->ndim);
        bt->astr[i] = (ia >= 0 && ba->dims[ia] != 1) ? sa : 0;
        bt->bstr[i] = (ib >= 0 && bb->dims[ib] != 1) ? sb : 0;
        if (ia >= 0) sa *= ba->dims[ia];
        if (ib >= 0) sb *= bb->dims[ib];
        bt->ostr[i] = o->dims[i];
    }
}

static void mm_batch_offsets(const mm_batch *bt, int64_t t, int64_t *offa, int64_t *offb)
{
    int64_t rem = t;
    *offa = *offb = 0;
    for (int i = bt->nb - 1; i >= 0; i--) {
        int64_t idx = rem % bt->ostr[i];
        rem /= bt->ostr[i];
        *offa += idx * bt->astr[i];
        *offb += idx * bt->bstr[i];
    }
}

typedef struct {
    int dt;
    int64_t M, K, N;
    mm_batch bt;
    const void *A, *B;
    void *C;
} mm_typed_job;

/* Rows [b, e) of all batches' outputs (row r is row r % M of batch r / M). */
static void mm_typed_rows(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const mm_typed_job *j = arg;
    int dt = j->dt, fl = nnc_dt_float(dt);
    int64_t M = j->M, K = j->K, N = j->N;
    double a[NNC_CHUNK], bv[NNC_CHUNK], o[NNC_CHUNK];
    int64_t ai[NNC_CHUNK], bi[NNC_CHUNK], oi[NNC_CHUNK];
    for (int64_t r = b; r < e; r++) {
        int64_t t = r / M, i = r % M, offa, offb;
        mm_batch_offsets(&j->bt, t, &offa, &offb);
        for (int64_t c0 = 0; c0 < N; c0 += NNC_CHUNK) {
            int64_t nc = N - c0 < NNC_CHUNK ? N - c0 : NNC_CHUNK;
            if (fl) {
                for (int64_t c = 0; c < nc; c++) o[c] = 0;
                for (int64_t k0 = 0; k0 < K; k0 += NNC_CHUNK) {
                    int64_t nk = K - k0 < NNC_CHUNK ? K - k0 : NNC_CHUNK;
                    nnc_load_d(j->A, dt, offa + i * K + k0, 1, nk, a);
                    for (int64_t k = 0; k < nk; k++) {
                        nnc_load_d(j->B, dt, offb + (k0 + k) * N + c0, 1, nc, bv);
                        if (dt == DT_F64)
                            for (int64_t c = 0; c < nc; c++) o[c] += a[k] * bv[c];
                        else
                            for (int64_t c = 0; c < nc; c++)
                                o[c] = (double)((float)o[c] + (float)a[k] * (float)bv[c]);
                    }
                }
                nnc_store_d(j->C, dt, r * N + c0, nc, o);
            } else {
                for (int64_t c = 0; c < nc; c++) oi[c] = 0;
                for (int64_t k0 = 0; k0 < K; k0 += NNC_CHUNK) {
                    int64_t nk = K - k0 < NNC_CHUNK ? K - k0 : NNC_CHUNK;
                    nnc_load_i(j->A, dt, offa + i * K + k0, 1, nk, ai);
                    for (int64_t k = 0; k < nk; k++) {
                        nnc_load_i(j->B, dt, offb + (k0 + k) * N + c0, 1, nc, bi);
                        for (int64_t c = 0; c < nc; c++)
                            oi[c] = (int64_t)((uint64_t)oi[c] + (uint64_t)ai[k] * (uint64_t)bi[c]);
                    }
                }
                nnc_store_i(j->C, dt, r * N + c0, nc, oi);
            }
        }
    }
}

typedef struct {
    gemm_job j;
    mm_batch bt;
    const float *A, *B;
    float *C;
    int64_t M, N;
    int whole;
} mm_batch_job;

/* One whole product of a batch on this thread: both operands packed into the thread's memory
 * and the tiles stored straight into C (the same sums as nnc_sgemm, without its staging tile).
 * 0 when the memory cannot be had. */
static int mm_one_packed(const float *A, const float *B, float *C, int64_t M, int64_t K, int64_t N)
{
    size_t nb = (size_t)nnc_sgemm_packed_b_floats(K, N),
           na = (size_t)nnc_sgemm_packed_a_floats(M, K);
    nb = (nb + 15) / 16 * 16; /* packed A after B, B 64-byte aligned */
    float *pb = mm_pack_memory((nb + na) * sizeof(float));
    if (!pb) return 0;
    for (int64_t k = 0; k < K; k++) nnc_sgemm_pack_b_row(K, k, N, B + k * N, pb);
    nnc_sgemm_pack_a(M, K, A, K, pb + nb);
    nnc_sgemm_packed(M, N, K, pb + nb, pb, C, N, NULL);
    return 1;
}

static void mm_batches(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const mm_batch_job *bj = arg;
    for (int64_t t = b; t < e; t++) {
        int64_t offa, offb;
        mm_batch_offsets(&bj->bt, t, &offa, &offb);
        if (bj->whole && mm_one_packed(bj->A + offa, bj->B + offb, bj->C + t * bj->M * bj->N, bj->M,
                                       bj->j.K, bj->N))
            continue;
        gemm_job j = bj->j;
        j.M = bj->M;
        j.A = bj->A + offa;
        j.B = bj->B + offb;
        j.C = bj->C + t * bj->M * bj->N;
        gemm_mt(&j); /* inside a pool chunk its own split runs inline */
    }
}

static int matmul_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    if (nnc_matmul_packed(n)) return matmul_run_packed(n, in, out, x, e);
    int64_t M, K, N;
    nnc_tensor ba, bb, o;
    TRY(matmul_shapes(n, in[0], in[1], &o, &M, &K, &N, &ba, &bb, e));
    int nb = o.ndim - (in[0]->ndim >= 2) - (in[1]->ndim >= 2);
    int64_t nbatch = 1;
    for (int i = 0; i < nb; i++) nbatch *= o.dims[i];
    if (in[0]->dtype != DT_F32) {
        mm_typed_job tj = {in[0]->dtype, M, K, N, {0}, in[0]->data, in[1]->data, out->data};
        mm_batch_setup(&tj.bt, &o, nb, &ba, &bb, M, K, N);
        if (M > 0 && N > 0)
            nnc_parallel_for(nbatch * M, 1 + 16384 / (N * K + 1), mm_typed_rows, &tj);
        return NNC_OK;
    }
    const float *A = in[0]->data, *B = in[1]->data;
    float *C = out->data;
    gemm_job j;
    memset(&j, 0, sizeof j);
    j.N = N;
    j.K = K;
    j.lda = K;
    j.ldb = N;
    j.ldc = N;
    j.alpha = 1.f;
    if (bb.ndim == 0 || nnc_numel(&bb) == 1) { /* one B for all: fold the batch into M */
        int64_t abatch = nnc_numel(&ba);
        if (abatch == nbatch) {
            nnc_sgemm_mt(0, 0, M * nbatch, N, K, 1.f, A, K, B, N, C, N);
            return NNC_OK;
        }
    }
    /* General broadcast over batch dims: the batch entries (attention's heads) are spread
     * over the threads, one whole product each. */
    mm_batch_job bj = {j, {0}, A, B, C, M, N, 0};
    mm_batch_setup(&bj.bt, &o, nb, &ba, &bb, M, K, N);
    if (nbatch >= 2 * nnc_num_threads()) {
        bj.whole = M >= 2 && K > 0; /* one row: gemm_mt's matrix-vector kernel */
        nnc_parallel_for(nbatch, 1, mm_batches, &bj);
    } else {
        mm_batches(&bj, 0, nbatch, 0); /* few entries: each product split over the threads */
    }
    return NNC_OK;
}

const nnc_op nnc_op_matmul = {
    "MatMul",       2,          2, 1, 1, matmul_create, matmul_infer, matmul_run, matmul_destroy, 0,
    matmul_scratch, matmul_owns};
