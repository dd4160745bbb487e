#define _GNU_SOURCE
/* Small shared helpers: dtypes, errors, attribute access, memory, activations. */
#include "nnc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

size_t nnc_dtsize(int dt)
{
    switch (dt) {
    case DT_F32:
    case DT_I32:
    case DT_U32: return 4;
    case DT_I64:
    case DT_U64:
    case DT_F64: return 8;
    case DT_STR: return 16; /* nnp_string: only op_string.c's ops see these */
    case DT_U8:
    case DT_I8:
    case DT_BOOL: return 1;
    case DT_F8E4M3FN:
    case DT_F8E4M3FNUZ:
    case DT_F8E5M2:
    case DT_F8E5M2FNUZ:
    case DT_F8E8M0:
    case DT_F4E2M1:
    case DT_I4:
    case DT_U4:
    case DT_I2:
    case DT_U2: return 1; /* padded */
    case DT_U16:
    case DT_I16:
    case DT_F16:
    case DT_BF16: return 2;
    default: return 0;
    }
}

const char *nnc_dtname(int dt)
{
    static const char *names[] = {
        "undefined",      "float32",  "uint8",        "int8",           "uint16",
        "int16",          "int32",    "int64",        "string",         "bool",
        "float16",        "float64",  "uint32",       "uint64",         "complex64",
        "complex128",     "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
        "float8e5m2fnuz", "uint4",    "int4",         "float4e2m1",     "float8e8m0",
        "uint2",          "int2"};
    if (dt >= 0 && dt < (int)(sizeof names / sizeof names[0])) return names[dt];
    return "unsupported type";
}

int64_t nnc_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int64_t nnc_numel(const nnc_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->dims[i];
    return n;
}

int nnc_same_shape(const nnc_tensor *a, const nnc_tensor *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

void nnc_shape_str(const nnc_tensor *t, char *buf, size_t n)
{
    size_t used = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < t->ndim && used < n; i++)
        used +=
            (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)t->dims[i]);
    if (used < n) snprintf(buf + used, n - used, ")");
}

int nnc_fail(nnc_err *e, const char *fmt, ...)
{
    if (e && !e->msg[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return NNC_ERR;
}

static void node_vfail(nnc_err *e, const nnc_node *n, const char *fmt, va_list ap)
{
    int k = snprintf(e->msg, sizeof e->msg, "node '%s' (op %s): ", n->name ? n->name : "",
                     n->op_type ? n->op_type : "?");
    if (k < 0) k = 0;
    if ((size_t)k < sizeof e->msg) vsnprintf(e->msg + k, sizeof e->msg - (size_t)k, fmt, ap);
}

int nnc_node_unsup(nnc_err *e, const nnc_node *n, const char *fmt, ...)
{
    if (e && !e->msg[0]) {
        va_list ap;
        va_start(ap, fmt);
        node_vfail(e, n, fmt, ap);
        va_end(ap);
        e->unsupported = 1;
    }
    return NNC_ERR;
}

int nnc_node_fail(nnc_err *e, const nnc_node *n, const char *fmt, ...)
{
    if (e && !e->msg[0]) {
        int k = snprintf(e->msg, sizeof e->msg, "node '%s' (op %s): ", n->name ? n->name : "",
                         n->op_type ? n->op_type : "?");
        if (k < 0) k = 0;
        if ((size_t)k < sizeof e->msg) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(e->msg + k, sizeof e->msg - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return NNC_ERR;
}

/* ---- attributes ---------------------------------------------------------------------- */

const nnc_attr *nnc_attr_find(const nnc_node *n, const char *name)
{
    for (int i = 0; i < n->nattr; i++)
        if (n->attrs[i].name && strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

static const char *kind_name(int k)
{
    switch (k) {
    case AK_FLOAT: return "float";
    case AK_INT: return "int";
    case AK_STRING: return "string";
    case AK_TENSOR: return "tensor";
    case AK_FLOATS: return "floats";
    case AK_INTS: return "ints";
    case AK_STRINGS: return "strings";
    default: return "unknown";
    }
}

int nnc_attr_int(const nnc_node *n, const char *name, int64_t def, int64_t *out, nnc_err *e)
{
    const nnc_attr *a = nnc_attr_find(n, name);
    if (!a) {
        *out = def;
        return NNC_OK;
    }
    if (a->kind != AK_INT || a->count != 1 || !a->data)
        return nnc_node_fail(e, n, "attribute '%s' must be an int, got %s", name,
                             kind_name(a->kind));
    *out = *(const int64_t *)a->data;
    return NNC_OK;
}

int nnc_attr_float(const nnc_node *n, const char *name, float def, float *out, nnc_err *e)
{
    const nnc_attr *a = nnc_attr_find(n, name);
    if (!a) {
        *out = def;
        return NNC_OK;
    }
    if (a->kind == AK_FLOAT && a->count == 1 && a->data) {
        *out = *(const float *)a->data;
        return NNC_OK;
    }
    if (a->kind == AK_INT && a->count == 1 && a->data) {
        *out = (float)*(const int64_t *)a->data;
        return NNC_OK;
    }
    return nnc_node_fail(e, n, "attribute '%s' must be a float, got %s", name, kind_name(a->kind));
}

int nnc_attr_ints(const nnc_node *n, const char *name, int64_t *out, int maxn, int *count,
                  nnc_err *e)
{
    const nnc_attr *a = nnc_attr_find(n, name);
    *count = -1;
    if (!a) return NNC_OK;
    if (a->kind != AK_INTS && a->kind != AK_INT)
        return nnc_node_fail(e, n, "attribute '%s' must be a list of ints, got %s", name,
                             kind_name(a->kind));
    if (a->count < 0 || a->count > maxn)
        return nnc_node_unsup(e, n, "attribute '%s' has %lld values, at most %d are supported",
                              name, (long long)a->count, maxn);
    if (a->count && !a->data) return nnc_node_fail(e, n, "attribute '%s' has no data", name);
    if (a->count) memcpy(out, a->data, (size_t)a->count * sizeof(int64_t));
    *count = (int)a->count;
    return NNC_OK;
}

int nnc_attr_floats(const nnc_node *n, const char *name, float *out, int maxn, int *count,
                    nnc_err *e)
{
    const nnc_attr *a = nnc_attr_find(n, name);
    *count = -1;
    if (!a) return NNC_OK;
    if (a->kind != AK_FLOATS && a->kind != AK_FLOAT)
        return nnc_node_fail(e, n, "attribute '%s' must be a list of floats, got %s", name,
                             kind_name(a->kind));
    if (a->count < 0 || a->count > maxn)
        return nnc_node_unsup(e, n, "attribute '%s' has %lld values, at most %d are supported",
                              name, (long long)a->count, maxn);
    if (a->count) memcpy(out, a->data, (size_t)a->count * sizeof(float));
    *count = (int)a->count;
    return NNC_OK;
}

int nnc_attr_str(const nnc_node *n, const char *name, const char *def, char *buf, size_t bn,
                 nnc_err *e)
{
    const nnc_attr *a = nnc_attr_find(n, name);
    if (!a) {
        snprintf(buf, bn, "%s", def);
        return NNC_OK;
    }
    if (a->kind != AK_STRING)
        return nnc_node_fail(e, n, "attribute '%s' must be a string, got %s", name,
                             kind_name(a->kind));
    size_t len = a->count < 0 ? 0 : (size_t)a->count;
    if (len >= bn) len = bn - 1;
    if (len) memcpy(buf, a->data, len);
    buf[len] = 0;
    return NNC_OK;
}

int nnc_in_static(const nnc_node *n, int i)
{
    if (i >= n->nin || !n->vin[i] || n->vin[i]->ndim < 0) return 0;
    for (int d = 0; d < n->vin[i]->ndim; d++)
        if (n->vin[i]->dims[d] < 0) return 0;
    return 1;
}

int64_t nnc_info_numel(const nnc_valinfo *v)
{
    if (!v || v->ndim < 0) return -1;
    int64_t k = 1;
    for (int d = 0; d < v->ndim; d++) {
        if (v->dims[d] < 0) return -1;
        k *= v->dims[d];
    }
    return k;
}

int nnc_check_dtype(const nnc_node *n, int i, const int *allowed, nnc_err *e)
{
    if (i >= n->nin || !n->vin[i]) return NNC_OK;
    int dt = n->vin[i]->dtype;
    if (dt == DT_UNDEF) return NNC_OK; /* checked again at run time */
    for (const int *p = allowed; *p; p++)
        if (*p == dt) return NNC_OK;
    char list[160] = "";
    size_t used = 0;
    for (const int *p = allowed; *p && used < sizeof list; p++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", p == allowed ? "" : ", ",
                                 nnc_dtname(*p));
    return nnc_node_unsup(e, n, "input %d has element type %s; this backend supports %s", i,
                          nnc_dtname(dt), list);
}

int nnc_read_ints(const nnc_node *n, const nnc_tensor *t, const char *what, int64_t *out, int maxn,
                  int *count, nnc_err *e)
{
    if (t->dtype != DT_I64 && t->dtype != DT_I32)
        return nnc_node_fail(e, n, "%s must be int64 or int32, got %s", what, nnc_dtname(t->dtype));
    if (t->ndim > 1) return nnc_node_fail(e, n, "%s must be 1-D, got rank %d", what, t->ndim);
    int64_t k = nnc_numel(t);
    if (k > maxn)
        return nnc_node_unsup(e, n, "%s has %lld values, at most %d are supported", what,
                              (long long)k, maxn);
    for (int64_t i = 0; i < k; i++)
        out[i] = t->dtype == DT_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
    *count = (int)k;
    return NNC_OK;
}

/* ---- memory -------------------------------------------------------------------------- */

void *nnc_alloc(size_t nbytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, nbytes ? nbytes : 64) != 0) return NULL;
    return p;
}

void nnc_free(void *p)
{
    free(p);
}

void *nnc_tbuf_get(nnc_tbuf *b, size_t nbytes)
{
    if (b->nbytes >= nbytes) return b->p;
    void *p = nnc_alloc(nbytes);
    if (!p) return NULL;
    nnc_free(b->p);
    b->p = p;
    b->nbytes = nbytes;
    return p;
}

void *nnc_scratch(nnc_exec *x, int tid, size_t nbytes)
{
    if (!x || tid < 0 || tid >= x->nthreads || nbytes > x->per_thread || !x->scratch) return NULL;
    return x->scratch + (size_t)tid * x->per_thread;
}

/* ---- activations --------------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_SILU_AVX2 1

/* x * sigmoid(x) as x / (1 + e^-x), 8 at a time: one exp (x = n ln2 + r, the degree-6
 * polynomial of vmath.c's exp, 2^n in the exponent bits, argument clamped so 2^n stays a
 * normal float) and one division, about a third of the instructions of Sigmoid then Mul and
 * within a few ulp of them. Below -87.34 (where Sigmoid gives 0) the result is x * 0, as the
 * separate kernels give: -0, and NaN for -inf. NaN stays NaN. A tail shorter than 8 goes
 * through the same instructions, so a value never depends on where it sits. */
__attribute__((target("avx2,fma"))) static __m256 silu8(__m256 x)
{
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
    const __m256 one = _mm256_set1_ps(1.f);
    __m256 t = _mm256_sub_ps(_mm256_setzero_ps(), x);
    t = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(-87.f)),
                      _mm256_set1_ps(88.f)); /* NaN -> -87 */
    __m256 fn =
        _mm256_round_ps(_mm256_mul_ps(t, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fn, ln2_hi, t);
    r = _mm256_fnmadd_ps(fn, ln2_lo, r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, one));
    __m256i e2 =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fn), _mm256_set1_epi32(127)), 23);
    __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(e2));
    __m256 y = _mm256_div_ps(x, _mm256_add_ps(one, e));
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_LT_OQ);
    return _mm256_blendv_ps(y, _mm256_mul_ps(x, _mm256_setzero_ps()), tiny);
}

__attribute__((target("avx2,fma"))) static void silu_avx2(float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, silu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float t[8] = {0};
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(t, silu8(_mm256_loadu_ps(t)));
        memcpy(x + i, t, (size_t)(n - i) * sizeof(float));
    }
}

/* The same instructions 16 lanes at a time (AVX-512), so the same bits as silu8. */
__attribute__((target("avx512f"))) static __m512 silu16(__m512 x)
{
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    const __m512 one = _mm512_set1_ps(1.f);
    __m512 t = _mm512_sub_ps(_mm512_setzero_ps(), x);
    t = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(-87.f)),
                      _mm512_set1_ps(88.f)); /* NaN -> -87 */
    __m512 fn = _mm512_roundscale_ps(_mm512_mul_ps(t, log2e),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fn, ln2_hi, t);
    r = _mm512_fnmadd_ps(fn, ln2_lo, r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, one));
    __m512i e2 =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fn), _mm512_set1_epi32(127)), 23);
    __m512 e = _mm512_mul_ps(p, _mm512_castsi512_ps(e2));
    __m512 y = _mm512_div_ps(x, _mm512_add_ps(one, e));
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(tiny, y, _mm512_mul_ps(x, _mm512_setzero_ps()));
}

__attribute__((target("avx512f"))) static void silu_avx512(float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, silu16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, silu16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}
#endif

void nnc_apply_act(float *x, int64_t n, const nnc_act *a)
{
    switch (a->kind) {
    case ACT_RELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] < 0.f ? 0.f : x[i]; /* NaN stays NaN */
        break;
    case ACT_CLIP: {
        float lo = a->a, hi = a->b;
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            v = v < lo ? lo : v;
            x[i] = v > hi ? hi : v;
        }
        break;
    }
    case ACT_LEAKY: {
        float al = a->a;
        for (int64_t i = 0; i < n; i++) x[i] = x[i] >= 0.f ? x[i] : x[i] * al;
        break;
    }
    case ACT_GELU_ERF: nnc_vgelu_erf(x, x, n, a->a, a->b != 0.f); break;
    case ACT_HARDSWISH: { /* as the HardSwish kernel (op_unary.c) computes it */
        float t[256];
        for (int64_t i0 = 0; i0 < n; i0 += 256) {
            int64_t m = n - i0 < 256 ? n - i0 : 256;
            for (int64_t i = 0; i < m; i++) {
                float v = x[i0 + i] * (1.f / 6.f) + 0.5f;
                t[i] = v < 0.f ? 0.f : (v > 1.f ? 1.f : v);
            }
            for (int64_t i = 0; i < m; i++) x[i0 + i] *= t[i];
        }
        break;
    }
    case ACT_SILU: { /* elsewhere: Sigmoid then Mul, as the two unfused kernels compute them */
#ifdef HAVE_SILU_AVX2
        if (nnc_isa_level() == 2) {
            silu_avx512(x, n);
            break;
        }
        if (nnc_isa_level() == 1) {
            silu_avx2(x, n);
            break;
        }
#endif
        float t[256];
        for (int64_t i0 = 0; i0 < n; i0 += 256) {
            int64_t m = n - i0 < 256 ? n - i0 : 256;
            nnc_vsigmoid(x + i0, t, m);
            for (int64_t i = 0; i < m; i++) x[i0 + i] *= t[i];
        }
        break;
    }
    default: break;
    }
}

/* ---- broadcasting -------------------------------------------------------------------- */

int nnc_broadcast_shape(const nnc_tensor *a, const nnc_tensor *b, nnc_tensor *out)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    out->ndim = nd;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da == db || db == 1) out->dims[i] = da;
        else if (da == 1) out->dims[i] = db;
        else return NNC_ERR;
    }
    return NNC_OK;
}
