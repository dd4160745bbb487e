/* Element access for kernels that run every element type: float16/bfloat16 conversions
 * (computed in float32, stored rounded to nearest even), and chunked loads/stores of any
 * dtype into double or int64 working buffers. */
#ifndef NNC_TYPED_H
#define NNC_TYPED_H
#include "nnc.h"

#include <math.h>

#define NNC_CHUNK 256 /* elements per working buffer */

static inline float nnc_h2f(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (ex == 0x1f) u = s | 0x7f800000u | (m << 13);
    else if (ex) u = s | ((ex + 112u) << 23) | (m << 13);
    else if (!m) u = s;
    else { /* subnormal */ int k = 0;
        while (!(m & 0x400u)) {
            m <<= 1;
            k++;
        }
        u = s | ((uint32_t)(113 - k) << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t nnc_f2h(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return (uint16_t)(s | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0));
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u); /* rounds past 65504: inf */
    if (a < 0x38800000u) { /* subnormal half (or zero) */
        if (a < 0x33000000u) return s;
        uint32_t ex = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        int shift = (int)(126 - ex); /* value = m * 2^(ex-150) = r * 2^-24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(s | r);
    }
    uint32_t r = a - 0x38000000u; /* rebias 127 -> 15 */
    uint32_t h = r >> 13, rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(s | h);
}

static inline float nnc_bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t nnc_f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- 8- and 4-bit floats (ONNX FLOAT8E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, FLOAT4E2M1) ----------
 * One element per byte (float4 in the low 4 bits). Encoding rounds once, from double (exact
 * for every float16/bfloat16/float32 value), to nearest even, as ml_dtypes and the ONNX spec
 * do. Out of range: saturating casts give +-max; otherwise E5M2 gives +-inf and the types
 * without infinities NaN. The FNUZ types have no negative zero (0x80 is their one NaN);
 * FLOAT4E2M1 has neither infinities nor NaN: it always saturates, and a NaN gives the zero of
 * the other sign (what ml_dtypes, and so onnx.reference, gives). */
typedef struct {
    int bits, mbits, bias;
    double max;
    uint8_t maxcode;
    int fnuz, inf;
} nnc_minifloat;

static inline const nnc_minifloat *nnc_minifloat_of(int dt)
{
    static const nnc_minifloat e4m3fn = {8, 3, 7, 448.0, 0x7e, 0, 0},
                               e4m3fnuz = {8, 3, 8, 240.0, 0x7f, 1, 0},
                               e5m2 = {8, 2, 15, 57344.0, 0x7b, 0, 1},
                               e5m2fnuz = {8, 2, 16, 57344.0, 0x7f, 1, 0},
                               e2m1 = {4, 1, 1, 6.0, 0x7, 0, 0};
    switch (dt) {
    case DT_F8E4M3FN: return &e4m3fn;
    case DT_F8E4M3FNUZ: return &e4m3fnuz;
    case DT_F8E5M2: return &e5m2;
    case DT_F8E5M2FNUZ: return &e5m2fnuz;
    case DT_F4E2M1: return &e2m1;
    default: return NULL;
    }
}
static inline int nnc_dt_minifloat(int dt)
{
    return nnc_minifloat_of(dt) != NULL;
}

/* The NaN a conversion produces (the sign kept where the type has one). */
static inline uint8_t nnc_mf_nan(const nnc_minifloat *f, uint8_t sign)
{
    if (f->fnuz) return 0x80;
    if (f->bits == 4)
        return (uint8_t)(sign ^ 0x8); /* no NaN: a zero of the other sign, as ml_dtypes */
    return (uint8_t)(sign | (f->inf ? 0x7e : 0x7f));
}

static inline uint8_t nnc_mf_encode(const nnc_minifloat *f, double x, int saturate)
{
    uint8_t sign = signbit(x) ? (uint8_t)(1u << (f->bits - 1)) : 0;
    if (x != x) return nnc_mf_nan(f, sign);
    double a = fabs(x);
    int has_special = f->bits == 8; /* float4 has no inf or NaN, so it always saturates */
    int e;
    if (a > f->max) { /* only values that round past max overflow; see below */
        if (isinf(a)) {
            if (saturate || !has_special) return (uint8_t)(sign | f->maxcode);
            return f->inf ? (uint8_t)(sign | 0x7c) : nnc_mf_nan(f, sign);
        }
    }
    frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): the binade's exponent is e - 1 */
    int emin = 1 - f->bias, ex = a == 0 ? emin : (e - 1 < emin ? emin : e - 1);
    double r = nearbyint(ldexp(a, f->mbits - ex)); /* quanta of 2^(ex - mbits), ties to even */
    double v = ldexp(r, ex - f->mbits);
    if (v > f->max) {
        if (saturate || !has_special) return (uint8_t)(sign | f->maxcode);
        return f->inf ? (uint8_t)(sign | 0x7c) : nnc_mf_nan(f, sign);
    }
    if (r == 0) return f->fnuz ? 0 : sign;
    frexp(v, &e);
    ex = e - 1;
    unsigned code;
    if (ex < emin) code = (unsigned)r; /* subnormal */
    else
        code = ((unsigned)(ex + f->bias) << f->mbits) |
               (unsigned)(ldexp(v, f->mbits - ex) - (double)(1u << f->mbits));
    return (uint8_t)(sign | code);
}

static inline double nnc_mf_decode(const nnc_minifloat *f, uint8_t b)
{
    unsigned smask = 1u << (f->bits - 1), mag = b & (smask - 1);
    int neg = (b & smask) != 0;
    if (f->fnuz && b == 0x80) return -NAN; /* its sign bit is set: -NaN, as ml_dtypes */
    if (f->bits == 8 && !f->fnuz) {
        if (!f->inf && mag == 0x7f) return neg ? -NAN : NAN;
        if (f->inf && (mag >> 2) == 0x1f)
            return (mag & 3) ? (neg ? -NAN : NAN) : (neg ? -INFINITY : INFINITY);
    }
    unsigned ex = mag >> f->mbits, m = mag & ((1u << f->mbits) - 1);
    double v = ex ? ldexp((double)((1u << f->mbits) | m), (int)ex - f->bias - f->mbits)
                  : ldexp((double)m, 1 - f->bias - f->mbits);
    return neg ? -v : v;
}

/* FLOAT8E8M0: a power of two 2^(b - 127); 0xff is NaN. */
static inline double nnc_e8m0_decode(uint8_t b)
{
    return b == 0xff ? NAN : ldexp(1.0, (int)b - 127);
}

/* ---- 4- and 2-bit integers: the value in the low bits, the others 0 (as ml_dtypes) ---- */
static inline int64_t nnc_subbyte_get(int dt, uint8_t b)
{
    switch (dt) {
    case DT_I4: return (int64_t)(int8_t)(uint8_t)(b << 4) >> 4;
    case DT_U4: return b & 0xf;
    case DT_I2: return (int64_t)(int8_t)(uint8_t)(b << 6) >> 6;
    default: return b & 0x3; /* DT_U2 */
    }
}
/* Wrapped to the width (two's complement), stored as ml_dtypes stores it. */
static inline uint8_t nnc_subbyte_put(int dt, int64_t v)
{
    return (uint8_t)((uint64_t)v & (dt == DT_I4 || dt == DT_U4 ? 0xfu : 0x3u));
}
/* The range of a 4- or 2-bit integer type. */
static inline void nnc_subbyte_range(int dt, int64_t *lo, int64_t *hi)
{
    switch (dt) {
    case DT_I4:
        *lo = -8;
        *hi = 7;
        break;
    case DT_U4:
        *lo = 0;
        *hi = 15;
        break;
    case DT_I2:
        *lo = -2;
        *hi = 1;
        break;
    default:
        *lo = 0;
        *hi = 3;
        break;
    }
}
static inline int nnc_dt_subbyte_int(int dt)
{
    return dt == DT_I4 || dt == DT_U4 || dt == DT_I2 || dt == DT_U2;
}

static inline int nnc_dt_float(int dt)
{
    return dt == DT_F32 || dt == DT_F64 || dt == DT_F16 || dt == DT_BF16;
}
static inline int nnc_dt_signed(int dt)
{
    return dt == DT_I8 || dt == DT_I16 || dt == DT_I32 || dt == DT_I64;
}
static inline int nnc_dt_unsigned(int dt)
{
    return dt == DT_U8 || dt == DT_U16 || dt == DT_U32 || dt == DT_U64;
}
static inline int nnc_dt_int(int dt)
{
    return nnc_dt_signed(dt) || nnc_dt_unsigned(dt);
}
static inline int nnc_dt_numeric(int dt)
{
    return nnc_dt_float(dt) || nnc_dt_int(dt);
}

/* n elements starting at p[i0] with element stride st (0: broadcast one value) into buf. */
static inline void nnc_load_d(const void *p, int dt, int64_t i0, int64_t st, int64_t n, double *buf)
{
#define NNC_LD(T, CONV)                                           \
    {                                                             \
        const T *q = (const T *)p + i0;                           \
        for (int64_t i = 0; i < n; i++) buf[i] = CONV(q[i * st]); \
    }                                                             \
    break;
#define NNC_ID(x) (double)(x)
    switch (dt) {
    case DT_F32: NNC_LD(float, NNC_ID)
    case DT_F64: NNC_LD(double, NNC_ID)
    case DT_F16: NNC_LD(uint16_t, nnc_h2f)
    case DT_BF16: NNC_LD(uint16_t, nnc_bf2f)
    case DT_I8: NNC_LD(int8_t, NNC_ID)
    case DT_U8:
    case DT_BOOL: NNC_LD(uint8_t, NNC_ID)
    case DT_I16: NNC_LD(int16_t, NNC_ID)
    case DT_U16: NNC_LD(uint16_t, NNC_ID)
    case DT_I32: NNC_LD(int32_t, NNC_ID)
    case DT_U32: NNC_LD(uint32_t, NNC_ID)
    case DT_I64: NNC_LD(int64_t, NNC_ID)
    case DT_U64: NNC_LD(uint64_t, NNC_ID)
    case DT_I4:
    case DT_U4:
    case DT_I2:
    case DT_U2: {
        const uint8_t *q = (const uint8_t *)p + i0;
        for (int64_t i = 0; i < n; i++) buf[i] = (double)nnc_subbyte_get(dt, q[i * st]);
        break;
    }
    case DT_F8E8M0: {
        const uint8_t *q = (const uint8_t *)p + i0;
        for (int64_t i = 0; i < n; i++) buf[i] = nnc_e8m0_decode(q[i * st]);
        break;
    }
    default: {
        const nnc_minifloat *f = nnc_minifloat_of(dt);
        const uint8_t *q = (const uint8_t *)p + i0;
        if (f)
            for (int64_t i = 0; i < n; i++) buf[i] = nnc_mf_decode(f, q[i * st]);
        else
            for (int64_t i = 0; i < n; i++) buf[i] = 0;
        break;
    }
    }
#undef NNC_ID
#undef NNC_LD
}

/* Integers keep their bit pattern (unsigned 64-bit values wrap into int64). */
static inline void nnc_load_i(const void *p, int dt, int64_t i0, int64_t st, int64_t n,
                              int64_t *buf)
{
#define NNC_LD(T)                                                    \
    {                                                                \
        const T *q = (const T *)p + i0;                              \
        for (int64_t i = 0; i < n; i++) buf[i] = (int64_t)q[i * st]; \
    }                                                                \
    break;
    switch (dt) {
    case DT_I8: NNC_LD(int8_t)
    case DT_U8:
    case DT_BOOL: NNC_LD(uint8_t)
    case DT_I16: NNC_LD(int16_t)
    case DT_U16: NNC_LD(uint16_t)
    case DT_I32: NNC_LD(int32_t)
    case DT_U32: NNC_LD(uint32_t)
    case DT_I64: NNC_LD(int64_t)
    case DT_U64: NNC_LD(uint64_t)
    case DT_I4:
    case DT_U4:
    case DT_I2:
    case DT_U2: {
        const uint8_t *q = (const uint8_t *)p + i0;
        for (int64_t i = 0; i < n; i++) buf[i] = nnc_subbyte_get(dt, q[i * st]);
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++) buf[i] = 0;
        break;
    }
#undef NNC_LD
}

static inline void nnc_store_d(void *p, int dt, int64_t i0, int64_t n, const double *buf)
{
#define NNC_ST(T, CONV)                                      \
    {                                                        \
        T *q = (T *)p + i0;                                  \
        for (int64_t i = 0; i < n; i++) q[i] = CONV(buf[i]); \
    }                                                        \
    break;
#define NNC_F(x) (float)(x)
#define NNC_D(x) (x)
#define NNC_HF(x) nnc_f2h((float)(x))
#define NNC_BF(x) nnc_f2bf((float)(x))
#define NNC_B(x) (uint8_t)((x) != 0)
    switch (dt) {
    case DT_F32: NNC_ST(float, NNC_F)
    case DT_F64: NNC_ST(double, NNC_D)
    case DT_F16: NNC_ST(uint16_t, NNC_HF)
    case DT_BF16: NNC_ST(uint16_t, NNC_BF)
    case DT_BOOL: NNC_ST(uint8_t, NNC_B)
    default: { /* 8- and 4-bit floats, saturating (ONNX's default); integers: nnc_store_i */
        const nnc_minifloat *f = nnc_minifloat_of(dt);
        uint8_t *q = (uint8_t *)p + i0;
        if (f)
            for (int64_t i = 0; i < n; i++) q[i] = nnc_mf_encode(f, buf[i], 1);
        break;
    }
    }
#undef NNC_F
#undef NNC_D
#undef NNC_HF
#undef NNC_BF
#undef NNC_B
#undef NNC_ST
}

/* Integers (and bool as 0/1) truncated to the element width (two's complement wrap). */
static inline void nnc_store_i(void *p, int dt, int64_t i0, int64_t n, const int64_t *buf)
{
#define NNC_ST(T)                                                   \
    {                                                               \
        T *q = (T *)p + i0;                                         \
        for (int64_t i = 0; i < n; i++) q[i] = (T)(uint64_t)buf[i]; \
    }                                                               \
    break;
    switch (dt) {
    case DT_I8: NNC_ST(int8_t)
    case DT_U8: NNC_ST(uint8_t)
    case DT_I16: NNC_ST(int16_t)
    case DT_U16: NNC_ST(uint16_t)
    case DT_I32: NNC_ST(int32_t)
    case DT_U32: NNC_ST(uint32_t)
    case DT_I64: NNC_ST(int64_t)
    case DT_U64: NNC_ST(uint64_t)
    case DT_BOOL: {
        uint8_t *q = (uint8_t *)p + i0;
        for (int64_t i = 0; i < n; i++) q[i] = buf[i] != 0;
    } break;
    case DT_I4:
    case DT_U4:
    case DT_I2:
    case DT_U2: {
        uint8_t *q = (uint8_t *)p + i0;
        for (int64_t i = 0; i < n; i++) q[i] = nnc_subbyte_put(dt, buf[i]);
        break;
    }
    default: break;
    }
#undef NNC_ST
}

/* One element of any numeric type as double (indices, bounds, scalars). */
static inline double nnc_get_d(const void *p, int dt, int64_t i)
{
    double v;
    nnc_load_d(p, dt, i, 0, 1, &v);
    return v;
}
static inline int64_t nnc_get_i(const void *p, int dt, int64_t i)
{
    if (nnc_dt_float(dt)) { /* truncated; NaN and out of range as 0 and the int64 limits */
        double v = nnc_get_d(p, dt, i);
        return v != v ? 0
                      : (v >= 9.2233720368547758e18
                             ? INT64_MAX
                             : (v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v));
    }
    int64_t v;
    nnc_load_i(p, dt, i, 0, 1, &v);
    return v;
}
#endif
