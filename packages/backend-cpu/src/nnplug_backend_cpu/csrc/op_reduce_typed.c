/* Reductions on element types other than float32 (op_reduce.c keeps the float32 fast
 * paths): float types accumulate in double, integers in int64 (sums and products wrap as
 * onnxruntime's, Max/Min compare signed or unsigned, Mean divides as integers). Any set of
 * reduced axes is walked directly. */
#include "nnc.h"
#include "ops.h"
#include "typed.h"

#include <math.h>

int nnc_reduce_typed_ok(int kind, int dt)
{
    if (nnc_dt_float(dt)) return 1;
    if (nnc_dt_int(dt))
        return kind == NNC_R_SUM || kind == NNC_R_MEAN || kind == NNC_R_MAX || kind == NNC_R_MIN ||
               kind == NNC_R_PROD || kind == NNC_R_L1 || kind == NNC_R_SUMSQ;
    if (dt == DT_BOOL) return kind == NNC_R_MAX || kind == NNC_R_MIN;
    return 0;
}

static void int_limits(int dt, int64_t *lo, int64_t *hi)
{
    switch (dt) {
    case DT_I8:
        *lo = INT8_MIN;
        *hi = INT8_MAX;
        break;
    case DT_I16:
        *lo = INT16_MIN;
        *hi = INT16_MAX;
        break;
    case DT_I32:
        *lo = INT32_MIN;
        *hi = INT32_MAX;
        break;
    case DT_I64:
        *lo = INT64_MIN;
        *hi = INT64_MAX;
        break;
    case DT_U8:
    case DT_BOOL:
        *lo = 0;
        *hi = UINT8_MAX;
        break;
    case DT_U16:
        *lo = 0;
        *hi = UINT16_MAX;
        break;
    case DT_U32:
        *lo = 0;
        *hi = UINT32_MAX;
        break;
    default:
        *lo = 0;
        *hi = -1;
        break; /* uint64: all bits */
    }
}

int nnc_reduce_typed_run(const nnc_node *n, int kind, const int *mask, const nnc_tensor *x,
                         nnc_tensor *out, nnc_err *e)
{
    (void)n;
    (void)e;
    int r = x->ndim, dt = x->dtype;
    int64_t st[NNC_MAXDIM], s = 1;
    for (int d = r - 1; d >= 0; d--) {
        st[d] = s;
        s *= x->dims[d];
    }
    /* kept axes index the output; reduced axes are walked for each output element */
    int kept[NNC_MAXDIM], red[NNC_MAXDIM], nk = 0, nr = 0;
    int64_t count = 1, outs = 1;
    for (int d = 0; d < r; d++) {
        if (mask[d]) {
            red[nr++] = d;
            count *= x->dims[d];
        } else {
            kept[nk++] = d;
            outs *= x->dims[d];
        }
    }
    int fl = nnc_dt_float(dt), uns = nnc_dt_unsigned(dt) || dt == DT_BOOL;
    int64_t lo, hi;
    int_limits(dt, &lo, &hi);
    int64_t ki[NNC_MAXDIM] = {0};
    for (int64_t o = 0; o < outs; o++) {
        int64_t base = 0;
        for (int q = 0; q < nk; q++) base += ki[q] * st[kept[q]];
        double ad = kind == NNC_R_PROD
                        ? 1
                        : (kind == NNC_R_MAX ? -INFINITY : (kind == NNC_R_MIN ? INFINITY : 0));
        int64_t ai =
            kind == NNC_R_PROD ? 1 : (kind == NNC_R_MAX ? lo : (kind == NNC_R_MIN ? hi : 0));
        double mx = -INFINITY;
        int64_t ri[NNC_MAXDIM] = {0};
        for (int pass = kind == NNC_R_LOGSUMEXP ? 0 : 1; pass < 2; pass++) {
            memset(ri, 0, sizeof ri);
            for (int64_t c = 0; c < count; c++) {
                int64_t off = base;
                for (int q = 0; q < nr; q++) off += ri[q] * st[red[q]];
                if (fl) {
                    double v = nnc_get_d(x->data, dt, off);
                    if (pass == 0) {
                        mx = v > mx ? v : mx;
                    } else switch (kind) {
                        case NNC_R_SUM: /* bfloat16: each partial sum rounded, as ml_dtypes' add.reduce
                                           (onnx.reference's np.sum) does */
                            ad = dt == DT_BF16 ? nnc_bf2f(nnc_f2bf((float)ad + (float)v)) : ad + v;
                            break;
                        case NNC_R_MEAN:
                        case NNC_R_LOGSUM: ad += v; break;
                        case NNC_R_MAX: ad = v > ad || v != v ? v : ad; break;
                        case NNC_R_MIN: ad = v < ad || v != v ? v : ad; break;
                        case NNC_R_PROD: ad *= v; break;
                        case NNC_R_L2:
                        case NNC_R_SUMSQ: ad += v * v; break;
                        case NNC_R_L1: ad += fabs(v); break;
                        case NNC_R_LOGSUMEXP: ad += nnc_lse_term(v, mx); break;
                        }
                } else {
                    int64_t v;
                    nnc_load_i(x->data, dt, off, 0, 1, &v);
                    uint64_t u = (uint64_t)v;
                    switch (kind) {
                    case NNC_R_SUM:
                    case NNC_R_MEAN: ai = (int64_t)((uint64_t)ai + u); break;
                    case NNC_R_MAX:
                        ai = uns ? ((uint64_t)v > (uint64_t)ai ? v : ai) : (v > ai ? v : ai);
                        break;
                    case NNC_R_MIN:
                        ai = uns ? ((uint64_t)v < (uint64_t)ai ? v : ai) : (v < ai ? v : ai);
                        break;
                    case NNC_R_PROD: ai = (int64_t)((uint64_t)ai * u); break;
                    case NNC_R_SUMSQ: ai = (int64_t)((uint64_t)ai + u * u); break;
                    case NNC_R_L1:
                        ai = (int64_t)((uint64_t)ai + (!uns && v < 0 ? 0 - u : u));
                        break;
                    }
                }
                for (int q = nr - 1; q >= 0; q--) {
                    if (++ri[q] < x->dims[red[q]]) break;
                    ri[q] = 0;
                }
            }
        }
        if (fl) {
            if (kind == NNC_R_MEAN) ad = count ? ad / (double)count : NAN;
            if (kind == NNC_R_L2) ad = sqrt(ad);
            if (kind == NNC_R_LOGSUM) ad = log(ad);
            if (kind == NNC_R_LOGSUMEXP) ad = nnc_lse_result(mx, ad, count);
            nnc_store_d(out->data, dt, o, 1, &ad);
        } else {
            if (kind == NNC_R_MEAN && count)
                ai = uns ? (int64_t)((uint64_t)ai / (uint64_t)count) : ai / count;
            nnc_store_i(out->data, dt, o, 1, &ai);
        }
        for (int q = nk - 1; q >= 0; q--) {
            if (++ki[q] < x->dims[kept[q]]) break;
            ki[q] = 0;
        }
    }
    return NNC_OK;
}
