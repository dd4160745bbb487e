/* Ops that make a tensor from a shape or a few scalars: EyeLike (ones on a diagonal, every
 * numeric type and bool) and MelWeightMatrix (triangular mel filters, computed as the ONNX
 * reference computes them: float32 mel edges, double bin positions, floor division). */
#include "nnc.h"
#include "typed.h"

#include <math.h>
#include <stdlib.h>

static void free_state(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

/* The element 1 of type dt, written to one (at least 8 bytes). */
static void one_of(int dt, void *one)
{
    memset(one, 0, 8);
    if (nnc_dt_float(dt) || dt == DT_BOOL) {
        double d = 1.0;
        nnc_store_d(one, dt, 0, 1, &d);
    } else {
        int64_t i = 1;
        nnc_store_i(one, dt, 0, 1, &i);
    }
}

static int gen_dtype_ok(int dt)
{
    return dt != DT_STR && dt != DT_UNDEF && nnc_dtsize(dt) > 0;
}

/* ---- EyeLike ------------------------------------------------------------------------- */

typedef struct {
    int dtype;
    int64_t k;
} eye_state;

static int eye_create(nnc_node *n, nnc_err *e)
{
    eye_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    const nnc_valinfo *x = n->vin[0];
    if (x && x->ndim >= 0 && x->ndim != 2)
        return nnc_node_fail(e, n, "input must be 2-D, got rank %d", x->ndim);
    if (x && x->dtype != DT_UNDEF && !gen_dtype_ok(x->dtype))
        return nnc_node_unsup(e, n, "input element type %s is not supported", nnc_dtname(x->dtype));
    int64_t dt;
    TRY(nnc_attr_int(n, "dtype", x ? x->dtype : DT_UNDEF, &dt, e));
    TRY(nnc_attr_int(n, "k", 0, &s->k, e));
    if (nnc_attr_find(n, "dtype") && (dt < 1 || dt > 64 || !gen_dtype_ok((int)dt)))
        return nnc_node_unsup(e, n,
                              "attribute 'dtype' = %lld is not an element type this backend makes",
                              (long long)dt);
    s->dtype = nnc_attr_find(n, "dtype") ? (int)dt : DT_UNDEF; /* DT_UNDEF: the input's */
    return NNC_OK;
}

static int eye_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const eye_state *s = n->state;
    if (in[0]->ndim != 2) return nnc_node_fail(e, n, "input must be 2-D, got rank %d", in[0]->ndim);
    int dt = s->dtype ? s->dtype : in[0]->dtype;
    if (!gen_dtype_ok(dt))
        return nnc_node_fail(e, n, "element type %s is not supported", nnc_dtname(dt));
    *out = *in[0];
    out->dtype = dt;
    out->data = NULL;
    return NNC_OK;
}

static int eye_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    (void)e;
    const eye_state *s = n->state;
    (void)in;
    size_t sz = nnc_dtsize(out->dtype);
    unsigned char one[8];
    one_of(out->dtype, one);
    int64_t R = out->dims[0], C = out->dims[1];
    memset(out->data, 0, (size_t)(R * C) * sz);
    for (int64_t r = 0; r < R; r++) {
        int64_t c = r + s->k;
        if (c >= 0 && c < C) memcpy((char *)out->data + (r * C + c) * (int64_t)sz, one, sz);
    }
    return NNC_OK;
}

const nnc_op nnc_op_eyelike = {"EyeLike",  1,         1,       1,          1,
                               eye_create, eye_infer, eye_run, free_state, 0};

/* ---- MelWeightMatrix ----------------------------------------------------------------- */

typedef struct {
    int dtype;
} mel_state;

#define MEL_MAX_BINS (1 << 20) /* num_mel_bins + 2 band edges are held on the stack or heap */

static int mel_create(nnc_node *n, nnc_err *e)
{
    static const int ints[] = {DT_I32, DT_I64, 0}, fl[] = {DT_F32, DT_F64, DT_F16, DT_BF16, 0};
    mel_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    for (int i = 0; i < 3; i++) TRY(nnc_check_dtype(n, i, ints, e));
    for (int i = 3; i < 5; i++) TRY(nnc_check_dtype(n, i, fl, e));
    for (int i = 0; i < 5; i++)
        if (n->vin[i] && nnc_info_numel(n->vin[i]) > 1)
            return nnc_node_fail(e, n, "input %d must be a scalar", i);
    int64_t dt;
    TRY(nnc_attr_int(n, "output_datatype", DT_F32, &dt, e));
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_F16 && dt != DT_BF16)
        return nnc_node_unsup(
            e, n, "attribute 'output_datatype' = %lld is not supported (float types are)",
            (long long)dt);
    s->dtype = (int)dt;
    return NNC_OK;
}

typedef struct {
    int64_t mel, dft, rate;
    double lo, hi;
} mel_args;

static int mel_read(const nnc_node *n, nnc_tensor *const *in, mel_args *a, nnc_err *e)
{
    for (int i = 0; i < 5; i++) {
        if (nnc_numel(in[i]) != 1) return nnc_node_fail(e, n, "input %d must be a scalar", i);
        int intish = in[i]->dtype == DT_I32 || in[i]->dtype == DT_I64;
        if ((i < 3) != intish)
            return nnc_node_fail(e, n, "input %d has element type %s", i, nnc_dtname(in[i]->dtype));
    }
    a->mel = nnc_get_i(in[0]->data, in[0]->dtype, 0);
    a->dft = nnc_get_i(in[1]->data, in[1]->dtype, 0);
    a->rate = nnc_get_i(in[2]->data, in[2]->dtype, 0);
    a->lo = nnc_get_d(in[3]->data, in[3]->dtype, 0);
    a->hi = nnc_get_d(in[4]->data, in[4]->dtype, 0);
    if (a->mel < 1 || a->mel > MEL_MAX_BINS)
        return nnc_node_fail(e, n, "num_mel_bins must be 1 to %d, got %lld", MEL_MAX_BINS,
                             (long long)a->mel);
    if (a->dft < 1 || a->dft > (1LL << 30))
        return nnc_node_fail(e, n, "dft_length must be positive, got %lld", (long long)a->dft);
    if (a->rate < 1)
        return nnc_node_fail(e, n, "sample_rate must be positive, got %lld", (long long)a->rate);
    if ((a->dft / 2 + 1) * a->mel > (1LL << 28))
        return nnc_node_fail(e, n, "a %lld x %lld weight matrix is too large",
                             (long long)(a->dft / 2 + 1), (long long)a->mel);
    if (!(a->lo >= 0) || !(a->hi >= a->lo) || isinf(a->hi))
        return nnc_node_fail(
            e, n,
            "the edges must satisfy 0 <= lower_edge_hertz <= upper_edge_hertz (finite), got %g and %g",
            a->lo, a->hi);
    return NNC_OK;
}

static int mel_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const mel_state *s = n->state;
    mel_args a;
    TRY(mel_read(n, in, &a, e));
    out->dtype = s->dtype;
    out->ndim = 2;
    out->dims[0] = a.dft / 2 + 1;
    out->dims[1] = a.mel;
    return NNC_OK;
}

static int mel_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *x, nnc_err *e)
{
    (void)x;
    mel_args a;
    TRY(mel_read(n, in, &a, e));
    int64_t nspec = a.dft / 2 + 1, M = a.mel;
    int64_t *bins = malloc((size_t)(M + 2) * sizeof *bins);
    double *w = calloc((size_t)(nspec * M), sizeof *w);
    if (!bins || !w) {
        free(bins);
        free(w);
        return nnc_node_fail(e, n, "out of memory");
    }
    /* the edges' mel values in the edges' own type (float32 unless float64), then double */
    int f64 = in[3]->dtype == DT_F64;
    double lo_mel =
        f64 ? 2595.0 * log1p(a.lo / 700.0) : (double)(2595.f * log1pf((float)a.lo / 700.f));
    double hi_mel =
        f64 ? 2595.0 * log1p(a.hi / 700.0) : (double)(2595.f * log1pf((float)a.hi / 700.f));
    lo_mel /= log(10.0);
    hi_mel /= log(10.0);
    double step = (hi_mel - lo_mel) / (double)(M + 2);
    int rc = NNC_OK;
    for (int64_t i = 0; i < M + 2; i++) {
        double f = (double)i * step + lo_mel;
        f = 700.0 * expm1(f / 2595.0 * log(10.0));
        double b = floor((double)(a.dft + 1) * f / (double)a.rate);
        if (!(b >= 0) || b >= (double)nspec) {
            rc = nnc_node_fail(
                e, n,
                "mel band edge %lld falls at spectrogram bin %g, outside 0..%lld; lower "
                "upper_edge_hertz (at most sample_rate / 2)",
                (long long)i, b, (long long)(nspec - 1));
            break;
        }
        bins[i] = (int64_t)b;
    }
    for (int64_t i = 0; i < M && rc == NNC_OK; i++) {
        int64_t l = bins[i], c = bins[i + 1], h = bins[i + 2];
        if (c == l) w[c * M + i] = 1.0;
        else
            for (int64_t j = l; j <= c; j++) w[j * M + i] = (double)(j - l) / (double)(c - l);
        if (h > c)
            for (int64_t j = c; j < h; j++) w[j * M + i] = (double)(h - j) / (double)(h - c);
    }
    if (rc == NNC_OK) nnc_store_d(out->data, out->dtype, 0, nspec * M, w);
    free(bins);
    free(w);
    return rc;
}

const nnc_op nnc_op_melweightmatrix = {"MelWeightMatrix", 5,         5,       1,          1,
                                       mel_create,        mel_infer, mel_run, free_state, 0};
