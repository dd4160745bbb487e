/* String tensors (backend ABI 1.3): StringConcat, StringSplit, StringNormalizer,
 * RegexFullMatch, Equal on strings, LabelEncoder with string keys or values, CategoryMapper,
 * Cast to and from strings (op_cast.c), and the data-movement ops (Identity, Reshape,
 * Transpose, Gather, Concat, Where, Compress, the gathers and scatters, ...) on strings.
 *
 * Elements are nnp_string {data, size}: UTF-8 bytes, not NUL-terminated. Inputs belong to the
 * host; every output element gets its own malloc'd bytes (NULL for ""), freed by the table's
 * release_strings once the host copied them (abi.c). graph.c sends a node that touches a
 * string tensor only to the ops of nnc_string_ops[], never to the others. */
#define _GNU_SOURCE
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <wctype.h>

#include "nnplug/common.h"
#include "nnc.h"
#include "ops.h"

typedef nnp_string nstr;
_Static_assert(sizeof(nstr) == 16, "nnp_string is 16 bytes");

/* ---- helpers --------------------------------------------------------------------------- */

static int utf8_valid(const unsigned char *s, uint64_t n)
{
    for (uint64_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int k = (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
        if (k < 0 || n - i <= (uint64_t)k) return 0;
        uint32_t cp = c & (0x3Fu >> k);
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += (uint64_t)k + 1;
    }
    return 1;
}

/* Every element of a string input: bytes where it says, UTF-8. */
static int check_strings(const nnc_node *n, const nnc_tensor *t, int idx, nnc_err *e)
{
    if (t->dtype != DT_STR)
        return nnc_node_fail(e, n, "input %d is %s, expected string", idx, nnc_dtname(t->dtype));
    const nstr *s = t->data;
    int64_t k = nnc_numel(t);
    for (int64_t i = 0; i < k; i++) {
        if (s[i].size && !s[i].data)
            return nnc_node_fail(e, n, "input %d: string element %lld has %llu bytes at NULL", idx,
                                 (long long)i, (unsigned long long)s[i].size);
        if (!utf8_valid((const unsigned char *)s[i].data, s[i].size))
            return nnc_node_fail(e, n, "input %d: string element %lld is not valid UTF-8", idx,
                                 (long long)i);
    }
    return NNC_OK;
}

static int put(const nnc_node *n, nstr *o, const char *a, size_t na, const char *b, size_t nb,
               nnc_err *e)
{
    o->data = NULL;
    o->size = 0;
    if (!na && !nb) return NNC_OK;
    char *m = malloc(na + nb);
    if (!m) return nnc_node_fail(e, n, "out of memory for a string of %zu bytes", na + nb);
    if (na) memcpy(m, a, na);
    if (nb) memcpy(m + na, b, nb);
    o->data = m;
    o->size = na + nb;
    return NNC_OK;
}

static int want_dtype(const nnc_node *n, int out, int i, int dt, nnc_err *e)
{
    const nnc_valinfo *v = out ? n->vout[i] : n->vin[i];
    if (v && v->dtype != DT_UNDEF && v->dtype != dt)
        return nnc_node_fail(e, n, "%s %d is %s, this op needs %s", out ? "output" : "input", i,
                             nnc_dtname(v->dtype), nnc_dtname(dt));
    return NNC_OK;
}

/* Two-input broadcasting: element offsets of a and b for each output element, in order. */
typedef struct {
    int nd;
    int64_t dims[NNC_MAXDIM], sa[NNC_MAXDIM], sb[NNC_MAXDIM];
} bc2;

static void bc2_strides(const nnc_tensor *t, int nd, const int64_t *dims, int64_t *st)
{
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int td = d - (nd - t->ndim);
        int64_t dim = td >= 0 ? t->dims[td] : 1;
        st[d] = dim == 1 && dims[d] != 1 ? 0 : s;
        s *= dim;
    }
}

static void bc2_init(bc2 *b, const nnc_tensor *out, const nnc_tensor *x, const nnc_tensor *y)
{
    b->nd = out->ndim;
    memcpy(b->dims, out->dims, sizeof b->dims);
    bc2_strides(x, b->nd, b->dims, b->sa);
    bc2_strides(y, b->nd, b->dims, b->sb);
}

typedef void (*bc2_fn)(void *ctx, int64_t o, int64_t ia, int64_t ib);

static void bc2_each(const bc2 *b, int64_t total, bc2_fn fn, void *ctx)
{
    int64_t idx[NNC_MAXDIM] = {0}, ia = 0, ib = 0;
    for (int64_t o = 0; o < total; o++) {
        fn(ctx, o, ia, ib);
        for (int d = b->nd - 1; d >= 0; d--) {
            ia += b->sa[d];
            ib += b->sb[d];
            if (++idx[d] < b->dims[d]) break;
            ia -= b->sa[d] * b->dims[d];
            ib -= b->sb[d] * b->dims[d];
            idx[d] = 0;
        }
    }
}

static int bcast_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, int dt, nnc_err *e)
{
    TRY(check_strings(n, in[0], 0, e));
    TRY(check_strings(n, in[1], 1, e));
    if (nnc_broadcast_shape(in[0], in[1], out) != NNC_OK) {
        char a[128], b[128];
        nnc_shape_str(in[0], a, sizeof a);
        nnc_shape_str(in[1], b, sizeof b);
        return nnc_node_fail(e, n, "input shapes %s and %s do not broadcast", a, b);
    }
    out->dtype = dt;
    out->data = NULL;
    return NNC_OK;
}

static int two_strings_create(nnc_node *n, int out_dt, nnc_err *e)
{
    TRY(want_dtype(n, 0, 0, DT_STR, e));
    TRY(want_dtype(n, 0, 1, DT_STR, e));
    return want_dtype(n, 1, 0, out_dt, e);
}

/* ---- StringConcat, Equal ---------------------------------------------------------------- */

typedef struct {
    const nnc_node *n;
    const nstr *a, *b;
    void *o;
    nnc_err *e;
    int rc;
} pair_ctx;

static void concat_one(void *c, int64_t o, int64_t ia, int64_t ib)
{
    pair_ctx *p = c;
    if (p->rc) return;
    p->rc = put(p->n, (nstr *)p->o + o, p->a[ia].data, p->a[ia].size, p->b[ib].data, p->b[ib].size,
                p->e);
}

static void equal_one(void *c, int64_t o, int64_t ia, int64_t ib)
{
    pair_ctx *p = c;
    const nstr *x = &p->a[ia], *y = &p->b[ib];
    ((uint8_t *)p->o)[o] = x->size == y->size && (!x->size || !memcmp(x->data, y->data, x->size));
}

static int sc_create(nnc_node *n, nnc_err *e)
{
    return two_strings_create(n, DT_STR, e);
}
static int sc_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    return bcast_infer(n, in, out, DT_STR, e);
}
static int eq_create(nnc_node *n, nnc_err *e)
{
    return two_strings_create(n, DT_BOOL, e);
}
static int eq_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    return bcast_infer(n, in, out, DT_BOOL, e);
}

static int pair_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e, bc2_fn fn)
{
    bc2 b;
    bc2_init(&b, out, in[0], in[1]);
    pair_ctx c = {n, in[0]->data, in[1]->data, out->data, e, 0};
    bc2_each(&b, nnc_numel(out), fn, &c);
    return c.rc;
}

static int sc_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, struct nnc_exec *x,
                  nnc_err *e)
{
    (void)x;
    return pair_run(n, in, out, e, concat_one);
}

static int eq_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, struct nnc_exec *x,
                  nnc_err *e)
{
    (void)x;
    return pair_run(n, in, out, e, equal_one);
}

/* ---- StringSplit ----------------------------------------------------------------------- */

typedef struct {
    char *delim;
    size_t ndelim;
    int64_t maxsplit; /* -1: no limit */
} split_state;

static int ss_create(nnc_node *n, nnc_err *e)
{
    TRY(want_dtype(n, 0, 0, DT_STR, e));
    TRY(want_dtype(n, 1, 0, DT_STR, e));
    if (n->nout > 1) TRY(want_dtype(n, 1, 1, DT_I64, e));
    split_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    const nnc_attr *d = nnc_attr_find(n, "delimiter");
    if (d) {
        if (d->kind != AK_STRING)
            return nnc_node_fail(e, n, "attribute 'delimiter' must be a string");
        s->ndelim = d->count > 0 ? (size_t)d->count : 0;
        if (!(s->delim = malloc(s->ndelim + 1))) return nnc_node_fail(e, n, "out of memory");
        if (s->ndelim) memcpy(s->delim, d->data, s->ndelim);
        if (!utf8_valid((const unsigned char *)s->delim, s->ndelim))
            return nnc_node_fail(e, n, "attribute 'delimiter' is not valid UTF-8");
    }
    TRY(nnc_attr_int(n, "maxsplit", -1, &s->maxsplit, e));
    if (s->maxsplit < -1 || (nnc_attr_find(n, "maxsplit") && s->maxsplit < 0))
        return nnc_node_fail(
            e, n, "attribute 'maxsplit' is %lld; it must be >= 0 (or left out: no limit)",
            (long long)s->maxsplit);
    return NNC_OK;
}

static void ss_destroy(nnc_node *n)
{
    split_state *s = n->state;
    if (s) free(s->delim);
    free(s);
    n->state = NULL;
}

static int is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Pieces of one string (start, length), at most cap of them written; returns the count. As
 * Python's str.split(delimiter, maxsplit) but "" has none; no delimiter: runs of ASCII
 * whitespace, none empty. */
static int64_t split_one(const split_state *s, const nstr *x, int64_t *starts, int64_t *lens,
                         int64_t cap)
{
    const char *p = x->data;
    int64_t n = (int64_t)x->size, k = 0, splits = 0;
#define PIECE(a, l)          \
    do {                     \
        if (k < cap) {       \
            starts[k] = (a); \
            lens[k] = (l);   \
        }                    \
        k++;                 \
    } while (0)
    if (!s->ndelim) {
        int64_t i = 0;
        while (i < n) {
            while (i < n && is_space(p[i])) i++;
            if (i >= n) break;
            if (s->maxsplit >= 0 && splits == s->maxsplit) {
                PIECE(i, n - i);
                break;
            }
            int64_t j = i;
            while (j < n && !is_space(p[j])) j++;
            PIECE(i, j - i);
            splits++;
            i = j;
        }
        return k;
    }
    int64_t i = 0, d = (int64_t)s->ndelim;
    if (!n) return 0; /* onnxruntime: "" has no pieces (Python's split gives [""]) */
    for (;;) {
        int64_t j = i;
        int found = 0;
        if (s->maxsplit < 0 || splits < s->maxsplit)
            for (; j + d <= n; j++)
                if (!memcmp(p + j, s->delim, (size_t)d)) {
                    found = 1;
                    break;
                }
        if (!found) {
            PIECE(i, n - i);
            break;
        }
        PIECE(i, j - i);
        splits++;
        i = j + d;
    }
#undef PIECE
    return k;
}

static int ss_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const split_state *s = n->state;
    TRY(check_strings(n, in[0], 0, e));
    if (in[0]->ndim + 1 > NNC_MAXDIM)
        return nnc_node_unsup(e, n, "input rank %d is too large", in[0]->ndim);
    const nstr *x = in[0]->data;
    int64_t total = nnc_numel(in[0]), most = 0;
    for (int64_t i = 0; i < total; i++) {
        int64_t c = split_one(s, &x[i], NULL, NULL, 0);
        if (c > most) most = c;
    }
    out[0] = *in[0];
    out[0].data = NULL;
    out[0].dims[out[0].ndim++] = most;
    if (n->nout > 1) {
        out[1] = *in[0];
        out[1].data = NULL;
        out[1].dtype = DT_I64;
    }
    return NNC_OK;
}

static int ss_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, struct nnc_exec *x_,
                  nnc_err *e)
{
    (void)x_;
    const split_state *s = n->state;
    const nstr *x = in[0]->data;
    int64_t total = nnc_numel(in[0]), width = out[0].dims[out[0].ndim - 1];
    nstr *y = out[0].data;
    int64_t *z = n->nout > 1 && n->out[1] >= 0 ? out[1].data : NULL;
    int64_t *starts = malloc((size_t)(width > 0 ? width : 1) * 2 * sizeof(int64_t));
    if (!starts) return nnc_node_fail(e, n, "out of memory");
    int64_t *lens = starts + (width > 0 ? width : 1);
    int rc = NNC_OK;
    for (int64_t i = 0; i < total && rc == NNC_OK; i++) {
        int64_t c = split_one(s, &x[i], starts, lens, width);
        if (c > width) {
            rc = nnc_node_fail(e, n, "element %lld has %lld pieces; the output holds %lld",
                               (long long)i, (long long)c, (long long)width);
            break;
        }
        if (z) z[i] = c;
        for (int64_t k = 0; k < width && rc == NNC_OK; k++) {
            nstr *o = &y[i * width + k];
            if (k < c) rc = put(n, o, x[i].data + starts[k], (size_t)lens[k], NULL, 0, e);
            else o->data = NULL, o->size = 0;
        }
    }
    free(starts);
    return rc;
}

/* ---- locales and case (StringNormalizer) ---------------------------------------------- */

static locale_t g_utf8;
static pthread_once_t g_utf8_once = PTHREAD_ONCE_INIT;

static void utf8_init(void)
{
    g_utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (!g_utf8) g_utf8 = newlocale(LC_CTYPE_MASK, "C.utf8", (locale_t)0);
}

static locale_t utf8_locale(void)
{
    pthread_once(&g_utf8_once, utf8_init);
    return g_utf8;
}

/* Decode one code point (input validated) and return its length. */
static int utf8_dec(const unsigned char *s, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int k = (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : 3;
    uint32_t v = c & (0x3F >> k);
    for (int j = 1; j <= k; j++) v = (v << 6) | (s[j] & 0x3F);
    *cp = v;
    return k + 1;
}

static int utf8_enc(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

enum { CASE_NONE, CASE_LOWER, CASE_UPPER };

/* The text with each code point mapped (simple case mapping of the locale, as onnxruntime's
 * std::ctype<wchar_t>); *out is malloc'd (NULL when empty). */
static int case_map(const char *s, size_t n, int how, locale_t loc, char **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    if (!n) return NNC_OK;
    char *m = malloc(n * 4 + 1); /* a mapping may change a code point's length */
    if (!m) return NNC_ERR;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += (size_t)utf8_dec((const unsigned char *)s + i, &cp);
        wint_t w = how == CASE_UPPER   ? towupper_l((wint_t)cp, loc)
                   : how == CASE_LOWER ? towlower_l((wint_t)cp, loc)
                                       : (wint_t)cp;
        uint32_t c = (uint32_t)w;
        if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = cp;
        k += (size_t)utf8_enc(c, m + k);
    }
    *out = m;
    *nout = k;
    return NNC_OK;
}

typedef struct {
    int action, sensitive;
    locale_t loc, own_loc;
    int64_t nstop;
    nstr *stop; /* upper-cased when not case-sensitive */
} norm_state;

static void sn_destroy(nnc_node *n)
{
    norm_state *s = n->state;
    if (s) {
        for (int64_t i = 0; i < s->nstop; i++) free((void *)s->stop[i].data);
        free(s->stop);
        if (s->own_loc) freelocale(s->own_loc);
    }
    free(s);
    n->state = NULL;
}

static int sn_create(nnc_node *n, nnc_err *e)
{
    TRY(want_dtype(n, 0, 0, DT_STR, e));
    TRY(want_dtype(n, 1, 0, DT_STR, e));
    norm_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    char act[32], loc[128];
    int64_t sens;
    TRY(nnc_attr_str(n, "case_change_action", "NONE", act, sizeof act, e));
    if (!strcmp(act, "NONE")) s->action = CASE_NONE;
    else if (!strcmp(act, "LOWER")) s->action = CASE_LOWER;
    else if (!strcmp(act, "UPPER")) s->action = CASE_UPPER;
    else
        return nnc_node_fail(
            e, n, "attribute 'case_change_action' is '%s'; it must be NONE, LOWER or UPPER", act);
    TRY(nnc_attr_int(n, "is_case_sensitive", 0, &sens, e));
    s->sensitive = sens != 0;
    TRY(nnc_attr_str(n, "locale", "", loc, sizeof loc, e));
    if (loc[0] && (s->own_loc = newlocale(LC_CTYPE_MASK, loc, (locale_t)0))) s->loc = s->own_loc;
    else if (!loc[0] || !strncmp(loc, "en_", 3) || !strcmp(loc, "C") || !strcmp(loc, "POSIX") ||
             !strncasecmp(loc, "C.UTF", 5))
        s->loc = utf8_locale(); /* en_* share the C.UTF-8 case tables (glibc's i18n) */
    else
        return nnc_node_unsup(
            e, n,
            "attribute 'locale' is '%s', which is not installed on this machine (see `locale -a`)",
            loc);
    if (!s->loc) return nnc_node_unsup(e, n, "the C.UTF-8 locale is not available on this machine");
    const nnc_attr *sw = nnc_attr_find(n, "stopwords");
    if (sw) {
        if (sw->kind != AK_STRINGS || sw->count < 0 || (sw->count && !sw->data))
            return nnc_node_fail(e, n, "attribute 'stopwords' must be a list of strings");
        s->stop = calloc((size_t)(sw->count ? sw->count : 1), sizeof *s->stop);
        if (!s->stop) return nnc_node_fail(e, n, "out of memory");
        for (int64_t i = 0; i < sw->count; i++) {
            const char *w = ((const char *const *)sw->data)[i];
            size_t len = w ? strlen(w) : 0;
            if (!utf8_valid((const unsigned char *)w, len))
                return nnc_node_fail(e, n, "stopword %lld is not valid UTF-8", (long long)i);
            char *m;
            size_t mn;
            if (case_map(w, len, s->sensitive ? CASE_NONE : CASE_UPPER, s->loc, &m, &mn))
                return nnc_node_fail(e, n, "out of memory");
            s->stop[s->nstop].data = m;
            s->stop[s->nstop++].size = mn;
        }
    }
    return NNC_OK;
}

static int sn_is_stop(const norm_state *s, const nstr *x, int *stop)
{
    *stop = 0;
    if (!s->nstop) return NNC_OK;
    char *m = NULL;
    size_t mn = x->size;
    const char *key = x->data;
    if (!s->sensitive) {
        if (case_map(x->data, x->size, CASE_UPPER, s->loc, &m, &mn)) return NNC_ERR;
        key = m;
    }
    for (int64_t i = 0; i < s->nstop && !*stop; i++)
        *stop = s->stop[i].size == mn && (!mn || !memcmp(s->stop[i].data, key, mn));
    free(m);
    return NNC_OK;
}

static int sn_count(const nnc_node *n, const norm_state *s, const nnc_tensor *t, int64_t *kept,
                    nnc_err *e)
{
    const nstr *x = t->data;
    int64_t total = nnc_numel(t);
    *kept = 0;
    for (int64_t i = 0; i < total; i++) {
        int stop;
        if (sn_is_stop(s, &x[i], &stop)) return nnc_node_fail(e, n, "out of memory");
        *kept += !stop;
    }
    return NNC_OK;
}

static int sn_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(check_strings(n, in[0], 0, e));
    const nnc_tensor *t = in[0];
    if (!(t->ndim == 1 || (t->ndim == 2 && t->dims[0] == 1))) {
        char a[128];
        nnc_shape_str(t, a, sizeof a);
        return nnc_node_fail(e, n, "input has shape %s; StringNormalizer takes [C] or [1, C]", a);
    }
    int64_t kept;
    TRY(sn_count(n, n->state, t, &kept, e));
    *out = *t;
    out->data = NULL;
    out->dims[out->ndim - 1] = kept ? kept : 1; /* nothing left: one empty string */
    return NNC_OK;
}

static int sn_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, struct nnc_exec *x_,
                  nnc_err *e)
{
    (void)x_;
    const norm_state *s = n->state;
    const nstr *x = in[0]->data;
    nstr *y = out->data;
    int64_t total = nnc_numel(in[0]), k = 0, cap = nnc_numel(out);
    for (int64_t i = 0; i < total; i++) {
        int stop;
        if (sn_is_stop(s, &x[i], &stop)) return nnc_node_fail(e, n, "out of memory");
        if (stop) continue;
        if (k >= cap) return nnc_node_fail(e, n, "more strings kept than the output holds");
        char *m;
        size_t mn;
        if (case_map(x[i].data, x[i].size, s->action, s->loc, &m, &mn))
            return nnc_node_fail(e, n, "out of memory");
        y[k].data = m;
        y[k++].size = mn;
    }
    for (; k < cap; k++) y[k].data = NULL, y[k].size = 0;
    return NNC_OK;
}

/* ---- RegexFullMatch ------------------------------------------------------------------- */

/* RE2 syntax -> POSIX ERE (glibc), for a yes/no full match. Fails with a reason for what has no
 * faithful translation. RE2's \d \w \s and [[:classes:]] are ASCII; '.' is any code point but
 * '\n'; lazy quantifiers match the same strings as greedy ones. */
typedef struct {
    char *buf;
    size_t n, cap;
} sbuf;

static int sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t c = (b->cap + n + 16) * 2;
        char *m = realloc(b->buf, c);
        if (!m) return NNC_ERR;
        b->buf = m;
        b->cap = c;
    }
    memcpy(b->buf + b->n, s, n);
    b->n += n;
    b->buf[b->n] = 0;
    return NNC_OK;
}
#define SB(b, lit) sb_add((b), (lit), sizeof(lit) - 1)

static const char *class_body(char c)
{
    switch (c) {
    case 'd': return "0-9";
    case 'w': return "0-9A-Za-z_";
    case 's': return "\t\n\f\r ";
    default: return NULL;
    }
}

static const char *posix_class(const char *name, size_t len)
{
    static const char *const t[][2] = {
        {"alpha", "A-Za-z"},     {"digit", "0-9"}, {"alnum", "0-9A-Za-z"},
        {"upper", "A-Z"},        {"lower", "a-z"}, {"space", "\t\n\v\f\r "},
        {"xdigit", "0-9A-Fa-f"}, {"blank", "\t "}, {"word", "0-9A-Za-z_"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strlen(t[i][0]) == len && !strncmp(t[i][0], name, len)) return t[i][1];
    return NULL;
}

/* Literal escapes RE2 allows: punctuation, and \t \n \r \f \v \a. */
static int escaped_literal(char c, char *lit)
{
    switch (c) {
    case 't': *lit = '\t'; return 1;
    case 'n': *lit = '\n'; return 1;
    case 'r': *lit = '\r'; return 1;
    case 'f': *lit = '\f'; return 1;
    case 'v': *lit = '\v'; return 1;
    case 'a': *lit = '\a'; return 1;
    }
    if ((unsigned char)c < 0x80 &&
        !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) && c != '_' &&
        c > ' ') {
        *lit = c;
        return 1;
    }
    return 0;
}

/* One bracket expression starting at p[i] == '['; appends the ERE bracket. */
static const char *tr_bracket(const char *p, size_t len, size_t *pi, sbuf *o)
{
    size_t i = *pi + 1;
    int neg = 0, close = 0, dash = 0, caret = 0;
    sbuf body = {0};
    if (i < len && p[i] == '^') {
        neg = 1;
        i++;
    }
    const char *why = NULL;
    int first = 1;
    while (!why) {
        if (i >= len) {
            why = "an unterminated [...]";
            break;
        }
        char c = p[i];
        if (c == ']' && !first) {
            i++;
            break;
        }
        first = 0;
        char lit[4];
        size_t nlit = 0;
        if (c == '[' && i + 1 < len && p[i + 1] == ':') {
            const char *end = strstr(p + i + 2, ":]");
            if (!end) {
                why = "an unterminated [:class:]";
                break;
            }
            const char *body_ = posix_class(p + i + 2, (size_t)(end - (p + i + 2)));
            if (!body_) {
                why =
                    "a [:class:] other than alpha digit alnum upper lower space xdigit blank word";
                break;
            }
            if (sb_add(&body, body_, strlen(body_))) {
                why = "out of memory";
                break;
            }
            i = (size_t)(end - p) + 2;
            continue;
        }
        if (c == '\\') {
            if (i + 1 >= len) {
                why = "a trailing backslash";
                break;
            }
            char d = p[i + 1];
            const char *cls = class_body(d);
            if (cls) {
                if (sb_add(&body, cls, strlen(cls))) {
                    why = "out of memory";
                    break;
                }
                i += 2;
                continue;
            }
            if (!escaped_literal(d, lit)) {
                why = "an escape inside [...] other than \\d \\w \\s or a punctuation character";
                break;
            }
            nlit = 1;
            i += 2;
        } else {
            uint32_t cp;
            nlit = (size_t)utf8_dec((const unsigned char *)p + i, &cp);
            memcpy(lit, p + i, nlit);
            i += nlit;
        }
        /* a range a-z (the end is not ']') */
        if (i + 1 < len && p[i] == '-' && p[i + 1] != ']') {
            char hi[4];
            size_t nhi;
            if (p[i + 1] == '\\') {
                if (i + 2 >= len || !escaped_literal(p[i + 2], hi)) {
                    why = "a range ending in an escape";
                    break;
                }
                nhi = 1;
                i += 3;
            } else if (p[i + 1] == '[') {
                why = "a range ending in '['";
                break;
            } else {
                uint32_t cp;
                nhi = (size_t)utf8_dec((const unsigned char *)p + i + 1, &cp);
                memcpy(hi, p + i + 1, nhi);
                i += 1 + nhi;
            }
            if ((nlit == 1 && strchr("]^-[", lit[0])) || (nhi == 1 && strchr("]^-[", hi[0]))) {
                why = "a range with ] ^ - or [ as an end";
                break;
            }
            if (sb_add(&body, lit, nlit) || SB(&body, "-") || sb_add(&body, hi, nhi)) {
                why = "out of memory";
                break;
            }
            continue;
        }
        if (nlit == 1 && lit[0] == ']') close = 1;
        else if (nlit == 1 && lit[0] == '-') dash = 1;
        else if (nlit == 1 && lit[0] == '^') caret = 1;
        else if (nlit == 1 && lit[0] == '[') {
            if (SB(&body, "[")) why = "out of memory";
        } else if (sb_add(&body, lit, nlit)) why = "out of memory";
    }
    if (!why && !close && !dash && !caret && body.n == 0) why = "an empty [...]";
    if (!why) {
        /* ERE: ']' first, '^' not first, '-' last */
        int ok = SB(o, "[") == 0 && (!neg || SB(o, "^") == 0) && (!close || SB(o, "]") == 0) &&
                 (!body.n || sb_add(o, body.buf, body.n) == 0) && (!caret || SB(o, "^") == 0) &&
                 (!dash || SB(o, "-") == 0) && SB(o, "]") == 0;
        if (!ok) why = "out of memory";
        if (!body.n && !close && caret && !neg && !dash)
            why = "a [^] bracket"; /* "[^]" would negate */
    }
    free(body.buf);
    *pi = i;
    return why;
}

static const char *re2_to_ere(const char *p, size_t len, sbuf *o, int *word_boundary)
{
    *word_boundary = 0;
    if (SB(o, "^(")) return "out of memory";
    for (size_t i = 0; i < len;) {
        char c = p[i];
        const char *why = NULL;
        if (c == '[') {
            if ((why = tr_bracket(p, len, &i, o))) return why;
            continue;
        }
        if (c == '\\') {
            if (i + 1 >= len) return "a trailing backslash";
            char d = p[i + 1], lit;
            const char *cls = class_body(d | 0x20);
            i += 2;
            if (cls && d >= 'a') {
                if (SB(o, "[") || sb_add(o, cls, strlen(cls)) || SB(o, "]")) return "out of memory";
                continue;
            }
            if (cls) {
                if (SB(o, "[^") || sb_add(o, cls, strlen(cls)) || SB(o, "]"))
                    return "out of memory";
                continue;
            }
            if (d == 'b' || d == 'B') {
                *word_boundary = 1;
                if (sb_add(o, p + i - 2, 2)) return "out of memory";
                continue;
            }
            if (!escaped_literal(d, &lit))
                return "an escape other than \\d \\D \\w \\W \\s \\S \\b \\B, \\t \\n \\r \\f \\v \\a or a punctuation character";
            if (strchr(".[]()*+?{}|^$\\", lit)) {
                char esc[2] = {'\\', lit};
                if (sb_add(o, esc, 2)) return "out of memory";
            } else if (lit == '\n' || lit == '\t' || lit == '\r' || lit == '\f' || lit == '\v' ||
                       lit == '\a') {
                if (sb_add(o, &lit, 1)) return "out of memory";
            } else {
                char br[3] = {'[', lit, ']'};
                if (sb_add(o, br, 3)) return "out of memory";
            }
            continue;
        }
        if (c == '(' && i + 1 < len && p[i + 1] == '?') {
            if (i + 2 < len && p[i + 2] == ':') {
                i += 3;
                if (SB(o, "(")) return "out of memory";
                continue;
            }
            return "a (?...) group other than (?:...) (flags, named groups)";
        }
        if (c == '.') {
            i++;
            if (SB(o, "[^\n]")) return "out of memory";
            continue;
        }
        if ((c == '*' || c == '+' || c == '?' || c == '}') && i + 1 < len && p[i + 1] == '?') {
            /* lazy: the same strings match fully */
            if (sb_add(o, &c, 1)) return "out of memory";
            i += 2;
            continue;
        }
        if ((c == '*' || c == '+' || c == '?' || c == '}') && i + 1 < len && p[i + 1] == '+')
            return "a possessive quantifier";
        if (c == '{') {
            /* RE2: a '{' that does not start {n}, {n,} or {n,m} is a literal */
            size_t j = i + 1;
            while (j < len && p[j] >= '0' && p[j] <= '9') j++;
            int ok = j > i + 1;
            if (ok && j < len && p[j] == ',') {
                j++;
                while (j < len && p[j] >= '0' && p[j] <= '9') j++;
            }
            ok = ok && j < len && p[j] == '}';
            if (!ok) {
                i++;
                if (SB(o, "[{]")) return "out of memory";
                continue;
            }
            if (sb_add(o, p + i, j + 1 - i)) return "out of memory";
            i = j + 1;
            continue;
        }
        uint32_t cp;
        size_t k = (size_t)utf8_dec((const unsigned char *)p + i, &cp);
        if (sb_add(o, p + i, k)) return "out of memory";
        i += k;
    }
    if (SB(o, ")$")) return "out of memory";
    return NULL;
}

typedef struct {
    regex_t re;
    int compiled, word_boundary;
} regex_state;

static void rx_destroy(nnc_node *n)
{
    regex_state *s = n->state;
    if (s && s->compiled) regfree(&s->re);
    free(s);
    n->state = NULL;
}

static int rx_create(nnc_node *n, nnc_err *e)
{
    TRY(want_dtype(n, 0, 0, DT_STR, e));
    TRY(want_dtype(n, 1, 0, DT_BOOL, e));
    const nnc_attr *a = nnc_attr_find(n, "pattern");
    if (!a || a->kind != AK_STRING)
        return nnc_node_fail(e, n, "attribute 'pattern' (a string) is required");
    size_t len = a->count > 0 ? (size_t)a->count : 0;
    const char *pat = a->data;
    if (!utf8_valid((const unsigned char *)pat, len))
        return nnc_node_fail(e, n, "attribute 'pattern' is not valid UTF-8");
    if (memchr(pat, 0, len)) return nnc_node_unsup(e, n, "attribute 'pattern' holds a NUL byte");
    locale_t loc = utf8_locale();
    if (!loc) return nnc_node_unsup(e, n, "the C.UTF-8 locale is not available on this machine");
    regex_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    sbuf o = {0};
    const char *why = re2_to_ere(pat, len, &o, &s->word_boundary);
    if (why) {
        free(o.buf);
        return nnc_node_unsup(
            e, n,
            "attribute 'pattern' uses %s, which the cpu backend's POSIX regex engine cannot match as RE2 does",
            why);
    }
    locale_t old = uselocale(loc);
    int rc = regcomp(&s->re, o.buf, REG_EXTENDED | REG_NOSUB);
    uselocale(old);
    if (rc) {
        char msg[256];
        regerror(rc, &s->re, msg, sizeof msg);
        free(o.buf);
        return nnc_node_fail(e, n, "attribute 'pattern' is not a valid regular expression: %s",
                             msg);
    }
    free(o.buf);
    s->compiled = 1;
    return NNC_OK;
}

static int rx_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(check_strings(n, in[0], 0, e));
    *out = *in[0];
    out->dtype = DT_BOOL;
    out->data = NULL;
    return NNC_OK;
}

static int rx_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, struct nnc_exec *x_,
                  nnc_err *e)
{
    (void)x_;
    const regex_state *s = n->state;
    const nstr *x = in[0]->data;
    uint8_t *y = out->data;
    int64_t total = nnc_numel(in[0]);
    locale_t old = uselocale(utf8_locale());
    int rc = NNC_OK;
    for (int64_t i = 0; i < total && rc == NNC_OK; i++) {
        if (s->word_boundary)
            for (uint64_t k = 0; k < x[i].size; k++)
                if ((unsigned char)x[i].data[k] >= 0x80) {
                    rc = nnc_node_unsup(
                        e, n,
                        "the pattern uses \\b or \\B and element %lld is not ASCII; RE2's word boundaries are ASCII, the cpu backend's are not",
                        (long long)i);
                    break;
                }
        if (rc) break;
        regmatch_t m = {0, (regoff_t)x[i].size};
        static const char empty[1] = "";
        int r = regexec(&s->re, x[i].size ? x[i].data : empty, 1, &m, REG_STARTEND);
        if (r != 0 && r != REG_NOMATCH)
            rc = nnc_node_fail(e, n, "regexec failed on element %lld (%d)", (long long)i, r);
        y[i] = r == 0;
    }
    uselocale(old);
    return rc;
}

/* ---- LabelEncoder with string keys or values ------------------------------------------ */

enum { LK_STR, LK_INT, LK_REAL };

typedef struct {
    int kkind, vkind, vdt;
    int last_wins;       /* equal keys: the last given wins (CategoryMapper), else the first */
    int64_t n;
    nstr *ks, *vs;       /* strings (copied) */
    int64_t *ki, *vi;
    double *kd, *vd;
    int64_t *order;      /* key indices sorted by key, ties by index */
    nstr ds;             /* default */
    int64_t di;
    double dd;
} le_state;

static void les_destroy(nnc_node *n)
{
    le_state *s = n->state;
    if (s) {
        for (int64_t i = 0; i < s->n; i++) {
            if (s->ks) free((void *)s->ks[i].data);
            if (s->vs) free((void *)s->vs[i].data);
        }
        free(s->ks);
        free(s->vs);
        free(s->ki);
        free(s->vi);
        free(s->kd);
        free(s->vd);
        free(s->order);
        free((void *)s->ds.data);
    }
    free(s);
    n->state = NULL;
}

static int copy_str(nstr *d, const char *p, size_t len)
{
    d->size = len;
    d->data = NULL;
    if (!len) return NNC_OK;
    char *m = malloc(len);
    if (!m) return NNC_ERR;
    memcpy(m, p, len);
    d->data = m;
    return NNC_OK;
}

/* One list attribute (keys_* / values_*): kind, count, and copies into the state. */
static int le_load(nnc_node *n, const char *what, int *kind, int *dt, int64_t *count, nstr **str,
                   int64_t **ints, double **reals, nnc_err *e)
{
    char name[32];
    const nnc_attr *a = NULL;
    static const char *const suf[] = {"strings", "int64s", "floats", "tensor"};
    int found = -1;
    for (int k = 0; k < 4; k++) {
        snprintf(name, sizeof name, "%s_%s", what, suf[k]);
        const nnc_attr *b = nnc_attr_find(n, name);
        if (!b) continue;
        if (a) return nnc_node_fail(e, n, "more than one %s_* attribute is set", what);
        a = b;
        found = k;
    }
    if (!a)
        return nnc_node_fail(e, n, "no %s_strings, %s_int64s, %s_floats or %s_tensor attribute",
                             what, what, what, what);
    int64_t c = a->count;
    if (c < 0 || (c && !a->data))
        return nnc_node_fail(e, n, "attribute '%s_%s' is malformed", what, suf[found]);
    *count = c;
    size_t m = (size_t)(c ? c : 1);
    int tdt = found == 0 ? DT_STR : found == 1 ? DT_I64 : found == 2 ? DT_F32 : a->tdtype;
    if (found == 0 && a->kind != AK_STRINGS)
        return nnc_node_fail(e, n, "attribute '%s_strings' must be strings", what);
    if (found == 1 && a->kind != AK_INTS)
        return nnc_node_fail(e, n, "attribute '%s_int64s' must be ints", what);
    if (found == 2 && a->kind != AK_FLOATS)
        return nnc_node_fail(e, n, "attribute '%s_floats' must be floats", what);
    if (found == 3 && a->kind != AK_TENSOR)
        return nnc_node_fail(e, n, "attribute '%s_tensor' must be a tensor", what);
    *dt = tdt;
    if (tdt == DT_STR) {
        *kind = LK_STR;
        if (!(*str = calloc(m, sizeof **str))) return nnc_node_fail(e, n, "out of memory");
        for (int64_t i = 0; i < c; i++) {
            const char *p;
            size_t len;
            if (found == 0) {
                p = ((const char *const *)a->data)[i];
                len = p ? strlen(p) : 0;
            } else {
                const nstr *t = (const nstr *)a->data + i;
                p = t->data;
                len = t->size;
                if (len && !p)
                    return nnc_node_fail(e, n, "attribute '%s_tensor' element %lld is NULL", what,
                                         (long long)i);
            }
            if (!utf8_valid((const unsigned char *)p, len))
                return nnc_node_fail(e, n, "attribute '%s_%s' element %lld is not valid UTF-8",
                                     what, suf[found], (long long)i);
            if (copy_str(&(*str)[i], p, len)) return nnc_node_fail(e, n, "out of memory");
        }
        return NNC_OK;
    }
    int integer = tdt == DT_I64 || tdt == DT_I32 || tdt == DT_I16 || tdt == DT_I8 || tdt == DT_U8 ||
                  tdt == DT_U16 || tdt == DT_U32;
    if (!integer && tdt != DT_F32 && tdt != DT_F64)
        return nnc_node_unsup(e, n, "attribute '%s_tensor' has element type %s", what,
                              nnc_dtname(tdt));
    *kind = integer ? LK_INT : LK_REAL;
    if (integer && !(*ints = malloc(m * sizeof **ints)))
        return nnc_node_fail(e, n, "out of memory");
    if (!integer && !(*reals = malloc(m * sizeof **reals)))
        return nnc_node_fail(e, n, "out of memory");
    for (int64_t i = 0; i < c; i++) {
        const void *d = a->data;
        switch (tdt) {
        case DT_I64: (*ints)[i] = ((const int64_t *)d)[i]; break;
        case DT_I32: (*ints)[i] = ((const int32_t *)d)[i]; break;
        case DT_I16: (*ints)[i] = ((const int16_t *)d)[i]; break;
        case DT_I8: (*ints)[i] = ((const int8_t *)d)[i]; break;
        case DT_U8: (*ints)[i] = ((const uint8_t *)d)[i]; break;
        case DT_U16: (*ints)[i] = ((const uint16_t *)d)[i]; break;
        case DT_U32: (*ints)[i] = ((const uint32_t *)d)[i]; break;
        case DT_F32: (*reals)[i] = ((const float *)d)[i]; break;
        default: (*reals)[i] = ((const double *)d)[i]; break;
        }
    }
    return NNC_OK;
}

static const le_state *g_sort_state; /* only during create's qsort, under a lock */
static pthread_mutex_t g_sort_lock = PTHREAD_MUTEX_INITIALIZER;

static int str_cmp(const nstr *a, const nstr *b)
{
    size_t m = a->size < b->size ? a->size : b->size;
    int c = m ? memcmp(a->data, b->data, m) : 0;
    return c ? c : (a->size < b->size ? -1 : a->size > b->size);
}

static int key_cmp(const le_state *s, int64_t i, int64_t j)
{
    if (s->kkind == LK_STR) return str_cmp(&s->ks[i], &s->ks[j]);
    if (s->kkind == LK_INT) return s->ki[i] < s->ki[j] ? -1 : s->ki[i] > s->ki[j];
    double a = s->kd[i], b = s->kd[j];
    if (isnan(a) || isnan(b)) return isnan(a) - isnan(b); /* NaN keys last, all equal */
    return a < b ? -1 : a > b;
}

static int order_cmp(const void *x, const void *y)
{
    int64_t i = *(const int64_t *)x, j = *(const int64_t *)y;
    int c = key_cmp(g_sort_state, i, j);
    if (c) return c;
    c = i < j ? -1 : i > j; /* equal keys: the one that wins first */
    return g_sort_state->last_wins ? -c : c;
}

/* Key indices by key, equal keys in their given order (a lookup finds the first). */
static int le_sort(const nnc_node *n, le_state *s, nnc_err *e)
{
    if (!(s->order = malloc((size_t)(s->n ? s->n : 1) * sizeof *s->order)))
        return nnc_node_fail(e, n, "out of memory");
    for (int64_t i = 0; i < s->n; i++) s->order[i] = i;
    pthread_mutex_lock(&g_sort_lock);
    g_sort_state = s;
    qsort(s->order, (size_t)s->n, sizeof *s->order, order_cmp);
    g_sort_state = NULL;
    pthread_mutex_unlock(&g_sort_lock);
    return NNC_OK;
}

static int les_create(nnc_node *n, nnc_err *e)
{
    le_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    int kdt, vdt;
    int64_t nk, nv;
    TRY(le_load(n, "keys", &s->kkind, &kdt, &nk, &s->ks, &s->ki, &s->kd, e));
    TRY(le_load(n, "values", &s->vkind, &vdt, &nv, &s->vs, &s->vi, &s->vd, e));
    if (nk != nv)
        return nnc_node_fail(e, n, "there are %lld keys and %lld values", (long long)nk,
                             (long long)nv);
    s->n = nk;
    s->vdt = vdt;
    if (s->kkind != LK_STR && s->vkind != LK_STR)
        return nnc_node_unsup(
            e, n, "neither keys nor values are strings (the numeric LabelEncoder handles those)");
    TRY(want_dtype(n, 0, 0, kdt == DT_STR ? DT_STR : n->vin[0] ? n->vin[0]->dtype : kdt, e));
    if (s->kkind != LK_STR && n->vin[0] && n->vin[0]->dtype != kdt &&
        !(kdt == DT_F32 && n->vin[0]->dtype == DT_F64))
        return nnc_node_fail(e, n, "input is %s; the keys are %s", nnc_dtname(n->vin[0]->dtype),
                             nnc_dtname(kdt));
    TRY(want_dtype(n, 1, 0, vdt, e));
    /* defaults */
    const nnc_attr *dt = nnc_attr_find(n, "default_tensor");
    s->di = -1;
    s->dd = -0.0;
    if (dt) {
        if (dt->kind != AK_TENSOR || dt->count != 1 || !dt->data || dt->tdtype != vdt)
            return nnc_node_fail(
                e, n, "attribute 'default_tensor' must hold one value of the values' type (%s)",
                nnc_dtname(vdt));
        int64_t one;
        nstr *ds = NULL;
        int64_t *di = NULL;
        double *dd = NULL;
        int kind, ddt;
        /* reuse the list loader on a copy named values_tensor */
        nnc_attr tmp = *dt;
        tmp.name = "values_tensor";
        nnc_node m = *n;
        m.attrs = &tmp;
        m.nattr = 1;
        if (le_load(&m, "values", &kind, &ddt, &one, &ds, &di, &dd, e)) {
            free(ds);
            free(di);
            free(dd);
            return NNC_ERR;
        }
        if (ds) s->ds = ds[0];
        if (di) s->di = di[0];
        if (dd) s->dd = dd[0];
        free(ds);
        free(di);
        free(dd);
    } else if (s->vkind == LK_STR) {
        char buf[4096];
        const nnc_attr *a = nnc_attr_find(n, "default_string");
        if (a && (a->kind != AK_STRING || (a->count > 0 && !a->data)))
            return nnc_node_fail(e, n, "attribute 'default_string' must be a string");
        const char *p = a ? a->data : "_Unused";
        size_t len = a ? (size_t)(a->count > 0 ? a->count : 0) : 7;
        (void)buf;
        if (!utf8_valid((const unsigned char *)p, len))
            return nnc_node_fail(e, n, "attribute 'default_string' is not valid UTF-8");
        if (copy_str(&s->ds, p, len)) return nnc_node_fail(e, n, "out of memory");
    } else if (s->vkind == LK_INT) {
        TRY(nnc_attr_int(n, "default_int64", -1, &s->di, e));
    } else {
        float f;
        TRY(nnc_attr_float(n, "default_float", -0.0f, &f, e));
        s->dd = f;
    }
    return le_sort(n, s, e);
}

/* CategoryMapper: cats_strings[i] <-> cats_int64s[i], the direction by the input's type. */
static int cm_create(nnc_node *n, nnc_err *e)
{
    le_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    const nnc_attr *cs = nnc_attr_find(n, "cats_strings"), *ci = nnc_attr_find(n, "cats_int64s");
    if (!cs || !ci || cs->kind != AK_STRINGS || ci->kind != AK_INTS || cs->count != ci->count ||
        cs->count < 0 || (cs->count && (!cs->data || !ci->data)))
        return nnc_node_fail(
            e, n, "attributes 'cats_strings' and 'cats_int64s' must be lists of one length");
    int to_int = n->vin[0] && n->vin[0]->dtype == DT_STR;
    int64_t c = cs->count;
    size_t m = (size_t)(c ? c : 1);
    nstr *strs = calloc(m, sizeof *strs);
    int64_t *ints = malloc(m * sizeof *ints);
    if (to_int) s->ks = strs, s->vi = ints;
    else s->vs = strs, s->ki = ints;
    if (!strs || !ints) return nnc_node_fail(e, n, "out of memory");
    s->n = c;
    for (int64_t i = 0; i < c; i++) {
        const char *p = ((const char *const *)cs->data)[i];
        size_t len = p ? strlen(p) : 0;
        if (!utf8_valid((const unsigned char *)p, len))
            return nnc_node_fail(e, n, "cats_strings element %lld is not valid UTF-8",
                                 (long long)i);
        if (copy_str(&strs[i], p, len)) return nnc_node_fail(e, n, "out of memory");
        ints[i] = ((const int64_t *)ci->data)[i];
    }
    s->last_wins = 1; /* as onnxruntime's maps, filled in order */
    s->kkind = to_int ? LK_STR : LK_INT;
    s->vkind = to_int ? LK_INT : LK_STR;
    s->vdt = to_int ? DT_I64 : DT_STR;
    TRY(want_dtype(n, 0, 0, to_int ? DT_STR : DT_I64, e));
    TRY(want_dtype(n, 1, 0, s->vdt, e));
    if (to_int) {
        TRY(nnc_attr_int(n, "default_int64", -1, &s->di, e));
    } else {
        const nnc_attr *a = nnc_attr_find(n, "default_string");
        if (a && (a->kind != AK_STRING || (a->count > 0 && !a->data)))
            return nnc_node_fail(e, n, "attribute 'default_string' must be a string");
        const char *p = a ? a->data : "_Unused";
        size_t len = a ? (size_t)(a->count > 0 ? a->count : 0) : 7;
        if (!utf8_valid((const unsigned char *)p, len))
            return nnc_node_fail(e, n, "attribute 'default_string' is not valid UTF-8");
        if (copy_str(&s->ds, p, len)) return nnc_node_fail(e, n, "out of memory");
    }
    return le_sort(n, s, e);
}

static int les_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const le_state *s = n->state;
    if (s->kkind == LK_STR) TRY(check_strings(n, in[0], 0, e));
    *out = *in[0];
    out->dtype = s->vdt;
    out->data = NULL;
    return NNC_OK;
}

/* Index of the value for input element i, or -1 for the default. */
static int64_t les_find(const le_state *s, const nnc_tensor *t, int64_t i)
{
    int64_t lo = 0, hi = s->n - 1;
    nstr ks = {0};
    int64_t ki = 0;
    double kd = 0;
    if (s->kkind == LK_STR) ks = ((const nstr *)t->data)[i];
    else if (s->kkind == LK_INT) {
        switch (t->dtype) {
        case DT_I64: ki = ((const int64_t *)t->data)[i]; break;
        case DT_I32: ki = ((const int32_t *)t->data)[i]; break;
        case DT_I16: ki = ((const int16_t *)t->data)[i]; break;
        case DT_I8: ki = ((const int8_t *)t->data)[i]; break;
        case DT_U8: ki = ((const uint8_t *)t->data)[i]; break;
        case DT_U16: ki = ((const uint16_t *)t->data)[i]; break;
        default: ki = ((const uint32_t *)t->data)[i]; break;
        }
    } else kd = t->dtype == DT_F32 ? ((const float *)t->data)[i] : ((const double *)t->data)[i];
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2, j = s->order[mid];
        int c;
        if (s->kkind == LK_STR) c = str_cmp(&s->ks[j], &ks);
        else if (s->kkind == LK_INT) c = s->ki[j] < ki ? -1 : s->ki[j] > ki;
        else {
            double a = s->kd[j];
            c = (isnan(a) || isnan(kd)) ? isnan(a) - isnan(kd) : (a < kd ? -1 : a > kd);
        }
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    if (lo >= s->n) return -1;
    int64_t j = s->order[lo];
    if (s->kkind == LK_STR) return str_cmp(&s->ks[j], &ks) ? -1 : j;
    if (s->kkind == LK_INT) return s->ki[j] == ki ? j : -1;
    double a = s->kd[j];
    return (isnan(a) && isnan(kd)) || a == kd ? j : -1;
}

static int les_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, struct nnc_exec *x_,
                   nnc_err *e)
{
    (void)x_;
    const le_state *s = n->state;
    int64_t total = nnc_numel(in[0]);
    if (s->kkind != LK_STR && in[0]->dtype == DT_STR)
        return nnc_node_fail(e, n, "input is string; the keys are numbers");
    for (int64_t i = 0; i < total; i++) {
        int64_t j = les_find(s, in[0], i);
        if (s->vkind == LK_STR) {
            const nstr *v = j >= 0 ? &s->vs[j] : &s->ds;
            TRY(put(n, (nstr *)out->data + i, v->data, v->size, NULL, 0, e));
            continue;
        }
        int64_t iv = j >= 0 && s->vi ? s->vi[j] : s->di;
        double dv = j >= 0 && s->vd ? s->vd[j] : s->dd;
        void *o = out->data;
        switch (s->vdt) {
        case DT_I64: ((int64_t *)o)[i] = iv; break;
        case DT_I32: ((int32_t *)o)[i] = (int32_t)iv; break;
        case DT_I16: ((int16_t *)o)[i] = (int16_t)iv; break;
        case DT_I8: ((int8_t *)o)[i] = (int8_t)iv; break;
        case DT_U8: ((uint8_t *)o)[i] = (uint8_t)iv; break;
        case DT_U16: ((uint16_t *)o)[i] = (uint16_t)iv; break;
        case DT_U32: ((uint32_t *)o)[i] = (uint32_t)iv; break;
        case DT_F32: ((float *)o)[i] = (float)dv; break;
        default: ((double *)o)[i] = dv; break;
        }
    }
    return NNC_OK;
}

/* OneHotEncoder with cats_strings: [..] strings -> [.., categories] floats. Equal categories:
 * the last wins, as onnxruntime's map filled in order. */
static int ohs_create(nnc_node *n, nnc_err *e)
{
    le_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    const nnc_attr *cs = nnc_attr_find(n, "cats_strings");
    if (!cs || cs->kind != AK_STRINGS || cs->count < 1 || !cs->data)
        return nnc_node_fail(e, n,
                             "attribute 'cats_strings' must be a list of at least one string");
    TRY(want_dtype(n, 0, 0, DT_STR, e));
    TRY(want_dtype(n, 1, 0, DT_F32, e));
    if (!(s->ks = calloc((size_t)cs->count, sizeof *s->ks)))
        return nnc_node_fail(e, n, "out of memory");
    s->n = cs->count;
    for (int64_t i = 0; i < s->n; i++) {
        const char *p = ((const char *const *)cs->data)[i];
        size_t len = p ? strlen(p) : 0;
        if (!utf8_valid((const unsigned char *)p, len))
            return nnc_node_fail(e, n, "cats_strings element %lld is not valid UTF-8",
                                 (long long)i);
        if (copy_str(&s->ks[i], p, len)) return nnc_node_fail(e, n, "out of memory");
    }
    int64_t z;
    TRY(nnc_attr_int(n, "zeros", 1, &z, e));
    s->di = z != 0; /* the 'zeros' attribute */
    s->kkind = LK_STR;
    s->last_wins = 1;
    return le_sort(n, s, e);
}

static int ohs_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    const le_state *s = n->state;
    TRY(check_strings(n, in[0], 0, e));
    if (in[0]->ndim + 1 > NNC_MAXDIM)
        return nnc_node_unsup(e, n, "input rank %d is too large", in[0]->ndim);
    *out = *in[0];
    out->data = NULL;
    out->dtype = DT_F32;
    out->dims[out->ndim++] = s->n;
    return NNC_OK;
}

static int ohs_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, struct nnc_exec *x_,
                   nnc_err *e)
{
    (void)x_;
    const le_state *s = n->state;
    int64_t k = nnc_numel(in[0]);
    float *y = out->data;
    if (k) memset(y, 0, (size_t)(k * s->n) * sizeof(float));
    for (int64_t i = 0; i < k; i++) {
        int64_t j = les_find(s, in[0], i);
        if (j >= 0) y[i * s->n + j] = 1.f;
        else if (!s->di)
            return nnc_node_fail(
                e, n, "input element %lld is not one of the categories and attribute 'zeros' is 0",
                (long long)i);
    }
    return NNC_OK;
}

/* ---- Unique (no axis) ---------------------------------------------------------------------- */

/* Y: the distinct strings, in byte order (sorted=1, as std::string's compare) or in order of
 * first occurrence; indices (first occurrences), inverse_indices, counts as onnxruntime. */
static int uq_create(nnc_node *n, nnc_err *e)
{
    TRY(want_dtype(n, 0, 0, DT_STR, e));
    TRY(want_dtype(n, 1, 0, DT_STR, e));
    for (int j = 1; j < n->nout; j++) TRY(want_dtype(n, 1, j, DT_I64, e));
    if (nnc_attr_find(n, "axis"))
        return nnc_node_unsup(e, n, "Unique on strings with attribute 'axis' is not supported");
    int64_t sorted;
    TRY(nnc_attr_int(n, "sorted", 1, &sorted, e));
    int64_t *st = malloc(sizeof *st);
    if (!st) return nnc_node_fail(e, n, "out of memory");
    *st = sorted != 0;
    n->state = st;
    return NNC_OK;
}

static void uq_destroy(nnc_node *n)
{
    free(n->state);
    n->state = NULL;
}

static int uq_cmp(const void *a, const void *b, void *ctx)
{
    const nstr *x = ctx;
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    int c = str_cmp(&x[i], &x[j]);
    return c ? c : (i < j ? -1 : i > j);
}

static int first_cmp(const void *a, const void *b)
{
    int64_t i = ((const int64_t *)a)[0], j = ((const int64_t *)b)[0];
    return i < j ? -1 : i > j;
}

/* groups[2u], groups[2u+1]: first index and start in `order` of each distinct string, in output
 * order; returns the count (-1: out of memory). order has the indices by (string, index). */
static int64_t uq_groups(const nstr *x, int64_t total, int sorted, int64_t *order, int64_t *groups)
{
    for (int64_t i = 0; i < total; i++) order[i] = i;
    qsort_r(order, (size_t)total, sizeof *order, uq_cmp, (void *)x);
    int64_t u = 0;
    for (int64_t i = 0; i < total; i++)
        if (i == 0 || str_cmp(&x[order[i]], &x[order[i - 1]])) {
            groups[2 * u] = order[i];
            groups[2 * u + 1] = i;
            u++;
        }
    if (!sorted) qsort(groups, (size_t)u, 2 * sizeof *groups, first_cmp);
    return u;
}

static int uq_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    TRY(check_strings(n, in[0], 0, e));
    int64_t total = nnc_numel(in[0]);
    int64_t *buf = malloc((size_t)(total ? total : 1) * 3 * sizeof *buf);
    if (!buf) return nnc_node_fail(e, n, "out of memory");
    int64_t u = uq_groups(in[0]->data, total, *(const int64_t *)n->state, buf, buf + total);
    free(buf);
    for (int j = 0; j < n->nout; j++) {
        out[j] = *in[0];
        out[j].data = NULL;
        out[j].ndim = 1;
        out[j].dims[0] = j == 2 ? total : u;
        out[j].dtype = j ? DT_I64 : DT_STR;
    }
    return NNC_OK;
}

static int uq_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, struct nnc_exec *x_,
                  nnc_err *e)
{
    (void)x_;
    const nstr *x = in[0]->data;
    int64_t total = nnc_numel(in[0]);
    int64_t *order = malloc((size_t)(total ? total : 1) * 3 * sizeof *order),
            *groups = order + total;
    if (!order) return nnc_node_fail(e, n, "out of memory");
    int64_t u = uq_groups(x, total, *(const int64_t *)n->state, order, groups);
    nstr *y = out[0].data;
    int64_t *ind = n->nout > 1 && n->out[1] >= 0 ? out[1].data : NULL;
    int64_t *inv = n->nout > 2 && n->out[2] >= 0 ? out[2].data : NULL;
    int64_t *cnt = n->nout > 3 && n->out[3] >= 0 ? out[3].data : NULL;
    int rc = u == nnc_numel(&out[0]) ? NNC_OK
                                     : nnc_node_fail(e, n, "internal: the unique count changed");
    for (int64_t k = 0; k < nnc_numel(&out[0]); k++) y[k].data = NULL, y[k].size = 0;
    for (int64_t k = 0; k < u && rc == NNC_OK; k++) {
        int64_t first = groups[2 * k], start = groups[2 * k + 1], end = start + 1;
        while (end < total && !str_cmp(&x[order[end]], &x[first])) end++;
        rc = put(n, &y[k], x[first].data, (size_t)x[first].size, NULL, 0, e);
        if (ind) ind[k] = first;
        if (cnt) cnt[k] = end - start;
        if (inv)
            for (int64_t i = start; i < end; i++) inv[order[i]] = k;
    }
    free(order);
    return rc;
}

/* ---- classifiers with string class labels ---------------------------------------------- */

/* LinearClassifier, SVMClassifier, TreeEnsembleClassifier with classlabels_strings: the
 * numeric op runs with integer labels 0..n-1 (its create sees those in place of the strings
 * and an int64 label output), then each label index becomes its string. The numeric op sees
 * a copy of the node holding its own state, so the node itself is never changed at run. */
extern const nnc_op nnc_op_ml_linearclassifier, nnc_op_ml_svmclassifier,
    nnc_op_ml_treeensembleclassifier;
static const nnc_op *const labelled_orig[] = {&nnc_op_ml_linearclassifier, &nnc_op_ml_svmclassifier,
                                              &nnc_op_ml_treeensembleclassifier};
#define NLABELLED 3
static nnc_op labelled_ops[NLABELLED];

typedef struct {
    void *inner;
    int64_t n;
    nstr *labels;
} lab_state;

static const nnc_op *labelled_inner(const nnc_node *n)
{
    for (int i = 0; i < NLABELLED; i++)
        if (n->op == &labelled_ops[i]) return labelled_orig[i];
    return NULL;
}

/* The node as the numeric op knows it. */
static nnc_node inner_node(const nnc_node *n)
{
    nnc_node m = *n;
    m.op = labelled_inner(n);
    m.state = n->state ? ((const lab_state *)n->state)->inner : NULL;
    return m;
}

static void lab_destroy(nnc_node *n)
{
    lab_state *s = n->state;
    if (!s) return;
    nnc_node m = inner_node(n);
    if (m.state && m.op->destroy) m.op->destroy(&m);
    for (int64_t i = 0; i < s->n; i++) free((void *)s->labels[i].data);
    free(s->labels);
    free(s);
    n->state = NULL;
}

static int lab_create(nnc_node *n, nnc_err *e)
{
    const nnc_op *o = labelled_inner(n);
    const nnc_attr *cs = nnc_attr_find(n, "classlabels_strings");
    if (!o) return nnc_node_fail(e, n, "internal: no classifier for string labels");
    if (!cs || cs->kind != AK_STRINGS || cs->count < 1 || !cs->data)
        return nnc_node_unsup(e, n, "string outputs need attribute 'classlabels_strings'");
    /* the tree ensemble names its integer labels classlabels_int64s, the others classlabels_ints */
    const char *ints_name =
        o == &nnc_op_ml_treeensembleclassifier ? "classlabels_int64s" : "classlabels_ints";
    if (nnc_attr_find(n, ints_name))
        return nnc_node_fail(e, n, "both classlabels_strings and %s are given", ints_name);
    TRY(want_dtype(n, 1, 0, DT_STR, e));
    for (int j = 0; j < n->nin; j++)
        if (n->vin[j] && n->vin[j]->dtype == DT_STR)
            return nnc_node_unsup(e, n, "input %d is string; this op takes numbers", j);
    lab_state *s = calloc(1, sizeof *s);
    if (!s) return nnc_node_fail(e, n, "out of memory");
    n->state = s;
    if (!(s->labels = calloc((size_t)cs->count, sizeof *s->labels)))
        return nnc_node_fail(e, n, "out of memory");
    s->n = cs->count;
    for (int64_t i = 0; i < cs->count; i++) {
        const char *p = ((const char *const *)cs->data)[i];
        size_t len = p ? strlen(p) : 0;
        if (!utf8_valid((const unsigned char *)p, len))
            return nnc_node_fail(e, n, "classlabels_strings element %lld is not valid UTF-8",
                                 (long long)i);
        if (copy_str(&s->labels[i], p, len)) return nnc_node_fail(e, n, "out of memory");
    }
    nnc_attr *attrs = malloc((size_t)n->nattr * sizeof *attrs);
    int64_t *ids = malloc((size_t)cs->count * sizeof *ids);
    if (!attrs || !ids) {
        free(attrs);
        free(ids);
        return nnc_node_fail(e, n, "out of memory");
    }
    for (int64_t i = 0; i < cs->count; i++) ids[i] = i;
    for (int i = 0; i < n->nattr; i++) {
        attrs[i] = n->attrs[i];
        if (&n->attrs[i] == cs) {
            attrs[i].name = ints_name;
            attrs[i].kind = AK_INTS;
            attrs[i].data = ids;
        }
    }
    nnc_node m = inner_node(n);
    nnc_valinfo as_int;
    if (m.vout[0]) {
        as_int = *m.vout[0];
        as_int.dtype = DT_I64;
        m.vout[0] = &as_int;
    }
    m.attrs = attrs;
    int rc = o->create(&m, e); /* the numeric ops copy what they keep of attributes */
    s->inner = m.state;
    free(attrs);
    free(ids);
    return rc;
}

static int lab_infer(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, nnc_err *e)
{
    nnc_node m = inner_node(n);
    TRY(m.op->infer(&m, in, out, e));
    if (out[0].dtype != DT_I64)
        return nnc_node_fail(e, n, "internal: the label output is not int64");
    out[0].dtype = DT_STR;
    return NNC_OK;
}

static int lab_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, struct nnc_exec *x,
                   nnc_err *e)
{
    const lab_state *s = n->state;
    nnc_node m = inner_node(n);
    nnc_tensor outs[NNC_MAXIO];
    for (int j = 0; j < n->nout; j++) outs[j] = out[j];
    outs[0].dtype = DT_I64; /* the string elements' buffer is twice as large as the labels */
    nstr *y = out[0].data;
    int64_t k = nnc_numel(&out[0]);
    int rc = m.op->run(&m, in, outs, x, e);
    const int64_t *ids = out[0].data;
    /* from the last element down: element i's 16 bytes cover only labels i and up, read before */
    for (int64_t i = k - 1; i >= 0; i--) {
        int64_t id = rc == NNC_OK ? ids[i] : -1;
        y[i].data = NULL;
        y[i].size = 0;
        if (rc != NNC_OK) continue;
        if (id < 0 || id >= s->n) {
            rc = nnc_node_fail(e, n, "internal: label index %lld", (long long)id);
            continue;
        }
        rc = put(n, &y[i], s->labels[id].data, (size_t)s->labels[id].size, NULL, 0, e);
    }
    if (rc != NNC_OK)
        for (int64_t i = 0; i < k; i++) {
            free((void *)y[i].data);
            y[i].data = NULL;
            y[i].size = 0;
        }
    return rc;
}

static pthread_once_t labelled_once = PTHREAD_ONCE_INIT;
static void labelled_init(void)
{
    for (int i = 0; i < NLABELLED; i++) {
        labelled_ops[i] = *labelled_orig[i];
        labelled_ops[i].create = lab_create;
        labelled_ops[i].infer = lab_infer;
        labelled_ops[i].run = lab_run;
        labelled_ops[i].destroy = lab_destroy;
        labelled_ops[i].scratch = NULL;
        labelled_ops[i].owns_const = NULL;
    }
}

/* ---- data movement on strings ---------------------------------------------------------- */

/* The numeric op's create and infer (attributes, shapes, indices) and its run on the 16-byte
 * elements, then every output element gets bytes of its own, so an output never points into
 * an input. Only ops each of whose string output elements is a copy of an input element
 * (Shape and Size read no elements; the scatters decline reductions on strings). */
// clang-format off: an X-macro list, packed by hand
#define MOVE_OPS(X) X(identity) X(reshape) X(flatten) X(squeeze) X(unsqueeze) X(transpose) \
    X(expand) X(slice) X(concat) X(split) X(gather) X(tile) X(where) X(compress) X(reversesequence) \
    X(gatherelements) X(gathernd) X(scatterelements) X(scatternd) X(shape) X(size)
#define MOVE_DECL(x) extern const nnc_op nnc_op_##x;
MOVE_OPS(MOVE_DECL)
// clang-format on
#define MOVE_REF(x) &nnc_op_##x,
static const nnc_op *const move_orig[] = {MOVE_OPS(MOVE_REF)};
#define NMOVE ((int)(sizeof move_orig / sizeof move_orig[0]))
static nnc_op move_ops[NMOVE];
static pthread_once_t move_once = PTHREAD_ONCE_INIT;

static const nnc_op *orig_of(const nnc_op *op)
{
    for (int i = 0; i < NMOVE; i++)
        if (op == &move_ops[i]) return move_orig[i];
    return NULL;
}

static int move_owns_const(const nnc_node *n, int i)
{
    const nnc_op *o = orig_of(n->op);
    if (n->vin[i] && n->vin[i]->dtype == DT_STR) return 0; /* graph.c keeps a deep copy */
    return o && o->owns_const ? o->owns_const(n, i) : 0;
}

static int move_run(nnc_node *n, nnc_tensor *const *in, nnc_tensor *out, struct nnc_exec *x,
                    nnc_err *e)
{
    const nnc_op *o = orig_of(n->op);
    int rc = NNC_OK;
    if (!o) return nnc_node_fail(e, n, "internal: no data-movement op for strings");
    if (o->flags & OPF_ALIAS) { /* a view: the same elements in the same order */
        if (nnc_numel(&out[0]) != nnc_numel(in[0]))
            rc = nnc_node_fail(e, n, "internal: a view changed the element count");
        else if (nnc_numel(in[0]))
            memcpy(out[0].data, in[0]->data, (size_t)nnc_numel(in[0]) * sizeof(nstr));
    } else {
        rc = o->run(n, in, out, x, e);
    }
    for (int j = 0; j < n->nout; j++) {
        if (n->out[j] < 0 || out[j].dtype != DT_STR || !out[j].data) continue;
        nstr *el = out[j].data;
        int64_t total = nnc_numel(&out[j]), i = 0;
        for (; rc == NNC_OK && i < total; i++) {
            nstr v = el[i];
            el[i].data = NULL;
            el[i].size = 0;
            if (v.size && (rc = put(n, &el[i], v.data, (size_t)v.size, NULL, 0, e))) break;
        }
        for (; i < total; i++) el[i].data = NULL, el[i].size = 0; /* never the input's bytes */
    }
    return rc;
}

static void move_init(void)
{
    for (int i = 0; i < NMOVE; i++) {
        move_ops[i] = *move_orig[i];
        move_ops[i].run = move_run;
        move_ops[i].flags &= ~OPF_ALIAS;
        move_ops[i].owns_const = move_owns_const;
    }
}

/* ---- table ----------------------------------------------------------------------------- */

static const nnc_op op_concat = {"StringConcat", 2,    2, 1,    1,    sc_create, sc_infer,
                                 sc_run,         NULL, 0, NULL, NULL, NULL};
static const nnc_op op_equal = {"Equal", 2,    2, 1,    1,    eq_create, eq_infer,
                                eq_run,  NULL, 0, NULL, NULL, NULL};
static const nnc_op op_split = {"StringSplit", 1,          1, 1,    2,    ss_create, ss_infer,
                                ss_run,        ss_destroy, 0, NULL, NULL, NULL};
static const nnc_op op_norm = {"StringNormalizer", 1, 1,    1,    1,   sn_create, sn_infer, sn_run,
                               sn_destroy,         0, NULL, NULL, NULL};
static const nnc_op op_regex = {"RegexFullMatch", 1,          1, 1,    1,    rx_create, rx_infer,
                                rx_run,           rx_destroy, 0, NULL, NULL, NULL};
static const nnc_op op_catmap = {"CategoryMapper", 1,       1,           1, 1,    cm_create,
                                 les_infer,        les_run, les_destroy, 0, NULL, NULL,
                                 "ai.onnx.ml"};
static const nnc_op op_onehot = {"OneHotEncoder", 1,       1,           1, 1,    ohs_create,
                                 ohs_infer,       ohs_run, les_destroy, 0, NULL, NULL,
                                 "ai.onnx.ml"};
static const nnc_op op_unique = {"Unique", 1,          1, 1,    4,    uq_create, uq_infer,
                                 uq_run,   uq_destroy, 0, NULL, NULL, NULL};
static const nnc_op op_labelenc = {"LabelEncoder", 1,         1,           1,           1,
                                   les_create,     les_infer, les_run,     les_destroy, 0,
                                   NULL,           NULL,      "ai.onnx.ml"};

extern const nnc_op nnc_op_cast_str, nnc_op_castlike_str; /* op_cast.c */
static const nnc_op *const string_ops[] = {
    &op_concat,           &op_equal,  &op_split,  &op_norm,   &op_regex,
    &op_labelenc,         &op_catmap, &op_onehot, &op_unique, &nnc_op_cast_str,
    &nnc_op_castlike_str, NULL};

const nnc_op *nnc_find_string_op(const char *domain, const char *type)
{
    int dflt = !domain || !domain[0] || !strcmp(domain, "ai.onnx");
    for (const nnc_op *const *p = string_ops; *p; p++)
        if (!strcmp((*p)->type, type) &&
            (dflt ? !(*p)->domain : (*p)->domain && !strcmp((*p)->domain, domain)))
            return *p;
    pthread_once(&labelled_once, labelled_init);
    for (int i = 0; !dflt && domain && !strcmp(domain, "ai.onnx.ml") && i < NLABELLED; i++)
        if (!strcmp(labelled_ops[i].type, type)) return &labelled_ops[i];
    pthread_once(&move_once, move_init);
    for (int i = 0; dflt && i < NMOVE; i++)
        if (!strcmp(move_ops[i].type, type)) return &move_ops[i];
    return NULL;
}
