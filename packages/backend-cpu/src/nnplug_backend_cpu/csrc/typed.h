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
    else { /* subnormal */
        int k = 0;
        while (!(m & 0x400u)) { m <<= 1; k++; }
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
    if (a >= 0x7f800000u) return (uint16_t)(s | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0));
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

static inline int nnc_dt_float(int dt) { return dt == DT_F32 || dt == DT_F64 || dt == DT_F16 || dt == DT_BF16; }
static inline int nnc_dt_signed(int dt) { return dt == DT_I8 || dt == DT_I16 || dt == DT_I32 || dt == DT_I64; }
static inline int nnc_dt_unsigned(int dt) { return dt == DT_U8 || dt == DT_U16 || dt == DT_U32 || dt == DT_U64; }
static inline int nnc_dt_int(int dt) { return nnc_dt_signed(dt) || nnc_dt_unsigned(dt); }
static inline int nnc_dt_numeric(int dt) { return nnc_dt_float(dt) || nnc_dt_int(dt); }

/* n elements starting at p[i0] with element stride st (0: broadcast one value) into buf. */
static inline void nnc_load_d(const void *p, int dt, int64_t i0, int64_t st, int64_t n, double *buf)
{
#define NNC_LD(T, CONV) { const T *q = (const T *)p + i0; for (int64_t i = 0; i < n; i++) buf[i] = CONV(q[i * st]); } break;
#define NNC_ID(x) (double)(x)
    switch (dt) {
    case DT_F32: NNC_LD(float, NNC_ID)
    case DT_F64: NNC_LD(double, NNC_ID)
    case DT_F16: NNC_LD(uint16_t, nnc_h2f)
    case DT_BF16: NNC_LD(uint16_t, nnc_bf2f)
    case DT_I8: NNC_LD(int8_t, NNC_ID)
    case DT_U8: case DT_BOOL: NNC_LD(uint8_t, NNC_ID)
    case DT_I16: NNC_LD(int16_t, NNC_ID)
    case DT_U16: NNC_LD(uint16_t, NNC_ID)
    case DT_I32: NNC_LD(int32_t, NNC_ID)
    case DT_U32: NNC_LD(uint32_t, NNC_ID)
    case DT_I64: NNC_LD(int64_t, NNC_ID)
    case DT_U64: NNC_LD(uint64_t, NNC_ID)
    default: for (int64_t i = 0; i < n; i++) buf[i] = 0; break;
    }
#undef NNC_ID
#undef NNC_LD
}

/* Integers keep their bit pattern (unsigned 64-bit values wrap into int64). */
static inline void nnc_load_i(const void *p, int dt, int64_t i0, int64_t st, int64_t n, int64_t *buf)
{
#define NNC_LD(T) { const T *q = (const T *)p + i0; for (int64_t i = 0; i < n; i++) buf[i] = (int64_t)q[i * st]; } break;
    switch (dt) {
    case DT_I8: NNC_LD(int8_t)
    case DT_U8: case DT_BOOL: NNC_LD(uint8_t)
    case DT_I16: NNC_LD(int16_t)
    case DT_U16: NNC_LD(uint16_t)
    case DT_I32: NNC_LD(int32_t)
    case DT_U32: NNC_LD(uint32_t)
    case DT_I64: NNC_LD(int64_t)
    case DT_U64: NNC_LD(uint64_t)
    default: for (int64_t i = 0; i < n; i++) buf[i] = 0; break;
    }
#undef NNC_LD
}

static inline void nnc_store_d(void *p, int dt, int64_t i0, int64_t n, const double *buf)
{
#define NNC_ST(T, CONV) { T *q = (T *)p + i0; for (int64_t i = 0; i < n; i++) q[i] = CONV(buf[i]); } break;
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
    default: break; /* integers: callers store through nnc_store_i */
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
#define NNC_ST(T) { T *q = (T *)p + i0; for (int64_t i = 0; i < n; i++) q[i] = (T)(uint64_t)buf[i]; } break;
    switch (dt) {
    case DT_I8: NNC_ST(int8_t)
    case DT_U8: NNC_ST(uint8_t)
    case DT_I16: NNC_ST(int16_t)
    case DT_U16: NNC_ST(uint16_t)
    case DT_I32: NNC_ST(int32_t)
    case DT_U32: NNC_ST(uint32_t)
    case DT_I64: NNC_ST(int64_t)
    case DT_U64: NNC_ST(uint64_t)
    case DT_BOOL: { uint8_t *q = (uint8_t *)p + i0; for (int64_t i = 0; i < n; i++) q[i] = buf[i] != 0; } break;
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
        return v != v ? 0 : (v >= 9.2233720368547758e18 ? INT64_MAX : (v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v));
    }
    int64_t v;
    nnc_load_i(p, dt, i, 0, 1, &v);
    return v;
}
#endif
