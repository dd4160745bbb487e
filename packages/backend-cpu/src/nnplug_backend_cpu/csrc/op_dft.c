/* DFT (opsets 17 and 20: any axis, dft_length padding or truncation, inverse, onesided) and
 * STFT (windowed frames, onesided), float32 and float64. A direct transform per signal with
 * an exact twiddle table (cos/sin of 2*pi*k/n in double); parallel over signals. */
#include "nnc.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    int stft, inverse, onesided;
    int64_t axis_attr;
    int axis_input;
} dft_state;

static void dft_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int dft_create(nnc_node *n, nnc_err *e)
{
    static const int fl[] = {DT_F32, DT_F64, 0}, ints[] = {DT_I32, DT_I64, 0};
    TRY(nnc_check_dtype(n, 0, fl, e));
    dft_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    s->stft = !strcmp(n->op_type, "STFT");
    int64_t v;
    TRY(nnc_attr_int(n, "onesided", s->stft ? 1 : 0, &v, e));
    s->onesided = v != 0;
    if (s->stft) {
        TRY(nnc_check_dtype(n, 1, ints, e));
        TRY(nnc_check_dtype(n, 2, fl, e));
        TRY(nnc_check_dtype(n, 3, ints, e));
        return NNC_OK;
    }
    TRY(nnc_check_dtype(n, 1, ints, e));
    TRY(nnc_check_dtype(n, 2, ints, e));
    TRY(nnc_attr_int(n, "inverse", 0, &v, e));
    s->inverse = v != 0;
    s->axis_input = n->opset >= 20;
    TRY(nnc_attr_int(n, "axis", 1, &s->axis_attr, e));
    return NNC_OK;
}

static int scalar_int(nnc_node *n, const nnc_tensor *t, const char *what, int64_t *out, nnc_err *e)
{
    if ((t->dtype != DT_I64 && t->dtype != DT_I32) || nnc_numel(t) != 1 || t->ndim > 1)
        return nnc_node_fail(e, n, "%s must be a single int32 or int64 value", what);
    *out = t->dtype == DT_I64 ? *(const int64_t *)t->data : *(const int32_t *)t->data;
    return NNC_OK;
}

typedef struct {
    int64_t outer, inner, len_in, n, bins, frames, step;
    int axis, cplx;
} dft_geom;

static int dft_geometry(nnc_node *n, nnc_tensor *const *in, dft_geom *g, nnc_err *e)
{
    const dft_state *s = n->state;
    const nnc_tensor *x = in[0];
    memset(g, 0, sizeof *g);
    if (x->dtype != DT_F32 && x->dtype != DT_F64)
        return nnc_node_fail(e, n, "the input must be float32 or float64");
    int r = x->ndim;
    if (r < 2 || (x->dims[r - 1] != 1 && x->dims[r - 1] != 2))
        return nnc_node_fail(e, n, "the input's last dimension must be 1 (real) or 2 (complex)");
    g->cplx = x->dims[r - 1] == 2;
    int irfft = s->inverse && s->onesided;
    if (s->onesided && !irfft && g->cplx) return nnc_node_fail(e, n, "onesided needs a real input");
    if (irfft && !g->cplx)
        return nnc_node_fail(e, n, "an inverse onesided DFT needs a complex input");
    if (s->stft) {
        if (r != 3) return nnc_node_fail(e, n, "the signal must be [batch, length, 1 or 2]");
        TRY(scalar_int(n, in[1], "frame_step", &g->step, e));
        const nnc_tensor *win = n->nin > 2 ? in[2] : NULL, *fl = n->nin > 3 ? in[3] : NULL;
        int64_t flen = -1;
        if (fl) TRY(scalar_int(n, fl, "frame_length", &flen, e));
        if (win) {
            if (win->dtype != x->dtype || win->ndim != 1)
                return nnc_node_fail(e, n, "the window must be 1-D with the signal's type");
            if (flen >= 0 && flen != win->dims[0])
                return nnc_node_fail(e, n, "frame_length differs from the window's length");
            flen = win->dims[0];
        }
        if (flen < 1) return nnc_node_fail(e, n, "frame_length or a window is required");
        if (g->step < 1) return nnc_node_fail(e, n, "frame_step must be positive");
        g->len_in = x->dims[1];
        if (flen > g->len_in) return nnc_node_fail(e, n, "the frame is longer than the signal");
        g->n = flen;
        g->frames = (g->len_in - flen) / g->step + 1;
        g->outer = x->dims[0];
        g->inner = 1;
        g->axis = 1;
        g->bins = s->onesided ? flen / 2 + 1 : flen;
        return NNC_OK;
    }
    int64_t axis = s->axis_attr;
    if (s->axis_input) {
        axis = -2;
        if (n->nin > 2 && in[2]) TRY(scalar_int(n, in[2], "axis", &axis, e));
    }
    if (axis < -r || axis > r - 2 || axis == -1)
        return nnc_node_fail(e, n, "axis %lld is out of range for rank %d", (long long)axis, r);
    g->axis = (int)(axis < 0 ? axis + r : axis);
    g->len_in = x->dims[g->axis];
    g->n = irfft ? 2 * (g->len_in - 1) : g->len_in;
    if (n->nin > 1 && in[1]) {
        TRY(scalar_int(n, in[1], "dft_length", &g->n, e));
        if (g->n < 1) return nnc_node_fail(e, n, "dft_length must be positive");
    }
    g->outer = 1;
    g->inner = 1;
    for (int d = 0; d < g->axis; d++) g->outer *= x->dims[d];
    for (int d = g->axis + 1; d < r - 1; d++) g->inner *= x->dims[d];
    if (g->n < 1) return nnc_node_fail(e, n, "the transform length must be positive");
    g->bins = irfft ? g->n : s->onesided ? g->n / 2 + 1 : g->n;
    g->frames = 1;
    return NNC_OK;
}

static int dft_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const dft_state *s = n->state;
    dft_geom g;
    TRY(dft_geometry(n, in, &g, e));
    const nnc_tensor *x = in[0];
    out->dtype = x->dtype;
    if (s->stft) {
        out->ndim = 4;
        out->dims[0] = x->dims[0];
        out->dims[1] = g.frames;
        out->dims[2] = g.bins;
        out->dims[3] = 2;
        return NNC_OK;
    }
    *out = *x;
    out->dims[g.axis] = g.bins;
    out->dims[x->ndim - 1] = s->inverse && s->onesided ? 1 : 2;
    return NNC_OK;
}

typedef struct {
    const dft_state *s;
    dft_geom g;
    const void *x, *win;
    void *y;
    int f64;
    const double *cs, *sn; /* twiddles: cos/sin(2 pi k / n) */
} dft_job;

static inline double rd(const void *p, int f64, int64_t i)
{
    return f64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

/* Inverse of a onesided spectrum (numpy's irfft): the missing bins are the conjugates of the
 * given ones; the imaginary parts of the DC and (even n) Nyquist bins do not count. */
static void irfft_signals(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const dft_job *j = arg;
    const dft_geom *g = &j->g;
    int64_t N = g->n, half = N / 2;
    for (int64_t t = b; t < e; t++) {
        int64_t i = t % g->inner, o = t / g->inner;
        for (int64_t m = 0; m < N; m++) {
            double acc = 0;
            for (int64_t k = 0; k <= half && k < g->len_in; k++) {
                int64_t xi = ((o * g->len_in + k) * g->inner + i) * 2;
                double xr = rd(j->x, j->f64, xi), xim = rd(j->x, j->f64, xi + 1);
                int64_t q = (k * m) % N;
                double term = xr * j->cs[q] - xim * j->sn[q];
                if (k == 0) acc += xr;
                else if (2 * k == N) acc += xr * j->cs[q];
                else acc += 2 * term;
            }
            int64_t yi = (o * N + m) * g->inner + i;
            if (j->f64) ((double *)j->y)[yi] = acc / (double)N;
            else ((float *)j->y)[yi] = (float)(acc / (double)N);
        }
    }
}

static void dft_signals(void *arg, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const dft_job *j = arg;
    const dft_geom *g = &j->g;
    int64_t N = g->n, C = g->cplx ? 2 : 1;
    double sign = j->s->inverse ? 1.0 : -1.0, scale = j->s->inverse ? 1.0 / (double)N : 1.0;
    for (int64_t t = b; t < e; t++) {
        /* t: (outer, frame, inner) */
        int64_t i = t % g->inner, rest = t / g->inner, f = rest % g->frames, o = rest / g->frames;
        int64_t start = f * g->step;
        for (int64_t k = 0; k < g->bins; k++) {
            double re = 0, im = 0;
            for (int64_t m = 0; m < N; m++) {
                int64_t pos = start + m;
                if (pos >= g->len_in) break; /* zero padding */
                int64_t xi = ((o * g->len_in + pos) * g->inner + i) * C;
                double xr = rd(j->x, j->f64, xi), xim = C == 2 ? rd(j->x, j->f64, xi + 1) : 0.0;
                if (j->win) {
                    double w = rd(j->win, j->f64, m);
                    xr *= w;
                    xim *= w;
                }
                int64_t q = (k * m) % N;
                double c = j->cs[q], sv = sign * j->sn[q];
                re += xr * c - xim * sv;
                im += xr * sv + xim * c;
            }
            int64_t yi = (((o * g->frames + f) * g->bins + k) * g->inner + i) * 2;
            if (j->f64) {
                ((double *)j->y)[yi] = re * scale;
                ((double *)j->y)[yi + 1] = im * scale;
            } else {
                ((float *)j->y)[yi] = (float)(re * scale);
                ((float *)j->y)[yi + 1] = (float)(im * scale);
            }
        }
    }
}

static int dft_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_exec *xc, nnc_err *e)
{
    (void)xc;
    const dft_state *s = n->state;
    dft_job j;
    j.s = s;
    TRY(dft_geometry(n, in, &j.g, e));
    j.x = in[0]->data;
    j.win = s->stft && n->nin > 2 && in[2] ? in[2]->data : NULL;
    j.y = out->data;
    j.f64 = in[0]->dtype == DT_F64;
    double *tw = malloc((size_t)(2 * j.g.n) * sizeof(double));
    if (!tw) return nnc_node_fail(e, n, "out of memory");
    for (int64_t k = 0; k < j.g.n; k++) {
        double a = 6.283185307179586476925286766559 * (double)k / (double)j.g.n;
        tw[k] = cos(a);
        tw[j.g.n + k] = sin(a);
    }
    j.cs = tw;
    j.sn = tw + j.g.n;
    if (!s->stft) j.g.step = 0;
    int64_t signals = j.g.outer * j.g.frames * j.g.inner;
    nnc_parallel_for(signals, 1 + 4096 / (j.g.n * j.g.bins + 1),
                     s->inverse && s->onesided ? irfft_signals : dft_signals, &j);
    free(tw);
    return NNC_OK;
}

const nnc_op nnc_op_dft = {"DFT", 1, 3, 1, 1, dft_create, dft_infer, dft_run, dft_destroy, 0};
const nnc_op nnc_op_stft = {"STFT", 2, 4, 1, 1, dft_create, dft_infer, dft_run, dft_destroy, 0};
