/* Reshape, Transpose and Slice as views of their input's bytes, copying nothing where a layout
 * allows. */
#define _GNU_SOURCE

#include "plan.h"

/* The strides of dims `nd` (rank nr) over the bytes of a tensor of dims `od`, strides `os`
 * (rank or), element for element in row-major order, when some exist (numpy's no-copy reshape:
 * each run of old dims merged into new ones must be contiguous in memory); 0 if found. */
static int reshape_strides(int or, const int64_t *od, const int64_t *os, int nr, const int64_t *nd,
                           int64_t *ns)
{
    int64_t d[MAXR] = {0}, st[MAXR] = {0}; /* zeroed: gcc cannot tell only [0, n) is read */
    int n = 0;
    for (int i = 0; i < or ; i++) {
        if (od[i] <= 0) return 1;
        if (od[i] != 1) {
            d[n] = od[i];
            st[n] = os[i];
            n++;
        }
    }
    int64_t nn[MAXR];
    int m = 0, map[MAXR];
    for (int i = 0; i < nr; i++) {
        if (nd[i] <= 0) return 1;
        if (nd[i] != 1) {
            map[m] = i;
            nn[m++] = nd[i];
        }
    }
    int64_t out[MAXR];
    int oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < m && oi < n) {
        int64_t np = nn[ni], op = d[oi];
        while (np != op) {
            if (np < op) {
                if (nj >= m) return 1;
                np *= nn[nj++];
            } else {
                if (oj >= n) return 1;
                op *= d[oj++];
            }
        }
        for (int k = oi; k < oj - 1; k++)
            if (st[k] != d[k + 1] * st[k + 1]) return 1;
        out[nj - 1] = st[oj - 1];
        for (int k = nj - 1; k > ni; k--) out[k - 1] = out[k] * nn[k];
        ni = nj++;
        oi = oj++;
    }
    if (ni != m || oi != n) return 1;
    int64_t last = 1; /* size-1 dims: any stride; the next one out keeps descriptors tidy */
    for (int i = nr - 1, k = m - 1; i >= 0; i--) {
        if (k >= 0 && map[k] == i) {
            ns[i] = out[k];
            last = out[k] * nn[k];
            k--;
        } else ns[i] = last;
    }
    return 0;
}

int strided_of(const_dnnl_memory_desc_t md, int *nd, int64_t *dims, int64_t *strides)
{
    dnnl_format_kind_t fk = dnnl_format_kind_undef;
    int nblks = -1;
    const dnnl_dims_t *dd = NULL, *ss = NULL;
    dnnl_dim_t off = -1;
    if (D(dnnl_memory_desc_query)(md, dnnl_query_format_kind, &fk) != dnnl_success ||
        fk != dnnl_blocked ||
        D(dnnl_memory_desc_query)(md, dnnl_query_inner_nblks_s32, &nblks) != dnnl_success ||
        nblks != 0 || D(dnnl_memory_desc_query)(md, dnnl_query_ndims_s32, nd) != dnnl_success ||
        D(dnnl_memory_desc_query)(md, dnnl_query_dims, &dd) != dnnl_success ||
        D(dnnl_memory_desc_query)(md, dnnl_query_strides, &ss) != dnnl_success ||
        D(dnnl_memory_desc_query)(md, dnnl_query_submemory_offset_s64, &off) != dnnl_success ||
        off != 0 || !dd || !ss)
        return 1;
    for (int i = 0; i < *nd; i++) {
        dims[i] = (*dd)[i];
        strides[i] = (*ss)[i];
    }
    return 0;
}

/* A Reshape of value x (rank-r result dims yd) as a view of bytes x already has: one of its
 * strided layouts the new dims can be read through (a channel split of an nhwc conv output);
 * else, for a 4-D result of a value in a strided, non-plain layout (a channel shuffle's
 * transposed view), one reorder of x into the bytes of an nhwc result, so the convolution after
 * it reads them as they are; else -1 (its row-major bytes then). *md and *buf: the result's. */
static int reshape_view(pb *b, int x, int r, const int64_t *yd, int is_out, dnnl_memory_desc_t *md,
                        int *buf)
{
    int64_t xd[MAXR], xs[MAXR], ys[MAXR];
    int nd;
    for (int i = 0; i < b->nviews[x]; i++) { /* its float32 views (not a reader's bf16 copy) */
        if (md_type(b->views[x][i].md) != dnnl_f32 || strided_of(b->views[x][i].md, &nd, xd, xs) ||
            reshape_strides(nd, xd, xs, r, yd, ys))
            continue;
        if (!(*md = strided_typed_md(r, yd, ys, dnnl_f32))) return -1;
        *buf = b->views[x][i].buf;
        return 0;
    }
    if (r != 4 || is_out || !b->nviews[x] || is_plain(b, x, home(b, x)) ||
        md_type(home(b, x)) != dnnl_f32 || strided_of(home(b, x), &nd, xd, xs))
        return -1;
    const int64_t *xdims = DIMS(x);
    int xr = VAL(x)->ndim;
    int64_t nhwc[4] = {yd[1] * yd[2] * yd[3], 1, yd[3] * yd[1], yd[1]}; /* acdb strides of yd */
    if (reshape_strides(4, yd, nhwc, xr, xdims, xs)) return -1;
    dnnl_memory_desc_t xmd = strided_typed_md(xr, xdims, xs, dnnl_f32);
    *md = strided_typed_md(4, yd, nhwc, dnnl_f32);
    if (!xmd || !*md) {
        md_free(xmd);
        md_free(*md);
        *md = NULL;
        return -1;
    }
    int nb = b->dry ? 0 : arena_buf(b, *md);
    int rc = nb < 0 || (!b->dry && add_reorder(b, b->views[x][0].buf, home(b, x), nb, xmd)) ||
             add_view(b, x, xmd, nb);
    md_free(xmd);
    if (rc) {
        md_free(*md);
        *md = NULL;
        return 1;
    }
    *buf = nb;
    return 0;
}

/* A Slice (one axis, step 1) of value x as a view: oneDNN's submemory of the layout x is in
 * (any cut of a plain or nhwc layout; of a blocked one only at its blocks' bounds), else of x's
 * row-major bytes. A reader that needs the slice dense reorders it, as for any value. */
static int slice_view(pb *b, const ox_op *op, dnnl_memory_desc_t *md, int *buf)
{
    int x = op->in[0], r = VAL(x)->ndim;
    const int64_t *xd = DIMS(x), *yd = DIMS(op->out);
    dnnl_dims_t d, off;
    for (int i = 0; i < r; i++) {
        d[i] = yd[i];
        off[i] = i == op->axis ? ox_slice_bound(op->start, xd[i]) : 0;
    }
    if (D(dnnl_memory_desc_create_submemory)(md, home(b, x), d, off) == dnnl_success) {
        *buf = b->views[x][0].buf;
        return 0;
    }
    *md = NULL;
    dnnl_memory_desc_t pm = value_plain(b, x, r);
    int rc = !pm || D(dnnl_memory_desc_create_submemory)(md, pm, d, off) != dnnl_success ||
             (!b->dry && plain_buf(b, x, buf));
    md_free(pm);
    if (rc) {
        md_free(*md);
        *md = NULL;
    }
    return rc;
}

/* Reshape, Transpose and Slice copy nothing where they can: the result is a view of the input's
 * bytes (a Reshape through strides the input's layout allows, see reshape_view, else of its
 * row-major bytes; a Transpose of the layout it is in, axes permuted; a Slice, see
 * slice_view). A reader needing another layout reorders it, as for any value; the kernel's
 * output is reordered into place. */
int build_view(pb *b, const ox_op *op)
{
    int x = op->in[0], buf = 0, r = VAL(op->out)->ndim;
    dnnl_memory_desc_t md = NULL;
    if (op->kind == OP_SLICE) {
        if (slice_view(b, op, &md, &buf))
            return ox_fail(b->e, "node '%s' (Slice): no view of its input", op->name);
    } else if (op->kind == OP_RESHAPE) {
        int got = reshape_view(b, x, r, DIMS(op->out), op->out == b->g->out, &md, &buf);
        if (got > 0) return 1;
        if (got < 0) {
            md = value_plain(b, op->out, r);
            if (!md || (!b->dry && plain_buf(b, x, &buf))) {
                md_free(md);
                return ox_fail(b->e, "node '%s' (%s): no view of its input", op->name, op->op_type);
            }
        }
    } else {
        int inv[MAXR];
        for (int i = 0; i < r; i++)
            inv[op->perm[i]] = i; /* oneDNN: input axis i becomes output axis inv[i] */
        const_dnnl_memory_desc_t from = home(b, x);
        if (D(dnnl_memory_desc_permute_axes)(&md, from, inv) != dnnl_success) {
            md = NULL;
            dnnl_memory_desc_t pm = value_plain(b, x, VAL(x)->ndim);
            if (!pm || D(dnnl_memory_desc_permute_axes)(&md, pm, inv) != dnnl_success ||
                (!b->dry && plain_buf(b, x, &buf))) {
                md_free(pm);
                return ox_fail(b->e, "node '%s' (Transpose): oneDNN cannot permute its layout",
                               op->name);
            }
            md_free(pm);
        } else buf = b->views[x][0].buf;
    }
    int rc;
    if (b->dry) rc = add_view(b, op->out, md, 0);
    else {
        b->p->bufs[buf].shared = 1; /* its readers' arguments extend the buffer's life */
        rc = op->out == b->g->out ? set_result(b, op, buf, md, 1) : add_view(b, op->out, md, buf);
    }
    md_free(md);
    return rc;
}
