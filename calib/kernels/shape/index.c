/*
 * index.c - the index-driven kernels of the 'shape' family: Gather,
 * GatherElements, GatherND (batch_dims), ScatterND and ScatterElements /
 * Scatter (reduction none/add/mul from 16, max/min from 18), NonZero,
 * OneHot, Compress and Unique.
 *
 * Indices may be negative (counted from the end of the axis) where the spec
 * allows; an index out of range is an error naming the position, never a
 * read outside the tensor. Scatter reductions combine in the element type
 * (int64 exactly, others through double with the dtype's rounding).
 */
#include "calib/kernels/shape/util.h"

#include <stdlib.h>
#include <string.h>

#define MAXR OQ_RT_MAX_RANK

static int check_index_dtype(oq_kctx *k, const oq_rt *t, const char *what)
{
	if (!t)
		return oq_k_err(k, OQ_EINVAL, "input '%s' is missing", what);
	if (t->dtype != OQ_DT_INT64 && t->dtype != OQ_DT_INT32)
		return oq_k_err(k, OQ_EINVAL, "'%s' must be int32 or int64, not %s", what, oq_dtype_name(t->dtype));
	return OQ_OK;
}

/* Index i of t normalised against dim; -1 when out of range. */
static int64_t norm_index(const oq_rt *t, size_t i, int64_t dim)
{
	int64_t v = oq_rt_get_int(t, i);
	if (v < 0)
		v += dim;
	return v >= 0 && v < dim ? v : -1;
}

int oq_k_gather(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *ind = oq_k_in(k, 1), *y;
	int64_t d[MAXR], outer, inner, dim;
	int a, rc, r;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input 'data' is missing");
	if ((rc = check_index_dtype(k, ind, "indices")))
		return rc;
	a = oq_axis(oq_k_int(k, "axis", 0), x->rank);
	if (a < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range for rank %d",
				(long long)oq_k_int(k, "axis", 0), x->rank);
	r = x->rank - 1 + ind->rank;
	if (r > MAXR)
		return oq_k_err(k, OQ_EUNSUP, "output rank %d is above %d", r, MAXR);
	memcpy(d, x->dims, (size_t)a * sizeof *d);
	memcpy(d + a, ind->dims, (size_t)ind->rank * sizeof *d);
	memcpy(d + a + ind->rank, x->dims + a + 1, (size_t)(x->rank - a - 1) * sizeof *d);
	dim = x->dims[a];
	for (size_t j = 0; j < ind->nelem; j++)
		if (norm_index(ind, j, dim) < 0)
			return oq_k_err(k, OQ_EINVAL, "indices[%zu] = %lld is out of range for axis %d of size %lld", j,
					(long long)oq_rt_get_int(ind, j), a, (long long)dim);
	if ((rc = oq_k_output(k, 0, x->dtype, r, d, &y)))
		return rc;
	outer = oq_sh_prod(x->dims, 0, a);
	inner = oq_sh_prod(x->dims, a + 1, x->rank);
	for (int64_t o = 0; o < outer; o++)
		for (size_t j = 0; j < ind->nelem; j++) {
			int64_t v = norm_index(ind, j, dim);
			if ((rc = oq_sh_copy(y, (size_t)((o * (int64_t)ind->nelem + (int64_t)j) * inner), x,
					     (size_t)((o * dim + v) * inner), (size_t)inner)))
				return oq_k_err(k, rc, "out of memory");
		}
	return OQ_OK;
}

int oq_k_gather_elements(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *ind = oq_k_in(k, 1), *y;
	int64_t xs[MAXR], idx[MAXR] = {0};
	int a, rc;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input 'data' is missing");
	if ((rc = check_index_dtype(k, ind, "indices")))
		return rc;
	if (ind->rank != x->rank || x->rank == 0)
		return oq_k_err(k, OQ_EINVAL, "indices must have the rank of data (%d), not %d", x->rank, ind->rank);
	a = oq_axis(oq_k_int(k, "axis", 0), x->rank);
	if (a < 0)
		return oq_k_err(k, OQ_EINVAL, "axis is out of range");
	for (int i = 0; i < x->rank; i++)
		if (i != a && ind->dims[i] > x->dims[i])
			return oq_k_err(k, OQ_EINVAL, "indices dim %d (%lld) exceeds data's (%lld)", i,
					(long long)ind->dims[i], (long long)x->dims[i]);
	if ((rc = oq_k_output(k, 0, x->dtype, ind->rank, ind->dims, &y)))
		return rc;
	oq_sh_strides(x->rank, x->dims, xs);
	for (size_t j = 0; j < ind->nelem; j++) {
		int64_t v = norm_index(ind, j, x->dims[a]), off = 0;
		if (v < 0)
			return oq_k_err(k, OQ_EINVAL, "indices[%zu] = %lld is out of range", j,
					(long long)oq_rt_get_int(ind, j));
		for (int i = 0; i < x->rank; i++)
			off += (i == a ? v : idx[i]) * xs[i];
		if ((rc = oq_sh_copy(y, j, x, (size_t)off, 1)))
			return oq_k_err(k, rc, "out of memory");
		for (int i = x->rank - 1; i >= 0; i--) {
			if (++idx[i] < ind->dims[i])
				break;
			idx[i] = 0;
		}
	}
	return OQ_OK;
}

int oq_k_gather_nd(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *ind = oq_k_in(k, 1), *y;
	int64_t b = k->opset >= 12 ? oq_k_int(k, "batch_dims", 0) : 0, m, d[MAXR], xs[MAXR];
	int64_t tuples, per_batch, slice, bstride;
	int r, rc;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input 'data' is missing");
	if ((rc = check_index_dtype(k, ind, "indices")))
		return rc;
	if (ind->rank < 1 || x->rank < 1)
		return oq_k_err(k, OQ_EINVAL, "data and indices must have rank >= 1");
	m = ind->dims[ind->rank - 1];
	if (b < 0 || b >= ind->rank || b >= x->rank || b + m > x->rank)
		return oq_k_err(k, OQ_EINVAL, "batch_dims %lld with index depth %lld does not fit data rank %d",
				(long long)b, (long long)m, x->rank);
	for (int i = 0; i < b; i++)
		if (x->dims[i] != ind->dims[i])
			return oq_k_err(k, OQ_EINVAL, "batch dim %d differs between data and indices", i);
	r = ind->rank - 1 + x->rank - (int)(b + m);
	if (r > MAXR)
		return oq_k_err(k, OQ_EUNSUP, "output rank %d is above %d", r, MAXR);
	memcpy(d, ind->dims, (size_t)(ind->rank - 1) * sizeof *d);
	memcpy(d + ind->rank - 1, x->dims + b + m, (size_t)(x->rank - b - m) * sizeof *d);
	if ((rc = oq_k_output(k, 0, x->dtype, r, d, &y)))
		return rc;
	oq_sh_strides(x->rank, x->dims, xs);
	tuples = oq_sh_prod(ind->dims, 0, ind->rank - 1);
	per_batch = oq_sh_prod(ind->dims, (int)b, ind->rank - 1);
	slice = oq_sh_prod(x->dims, (int)(b + m), x->rank);
	bstride = b ? xs[b - 1] : 0;
	for (int64_t t = 0; t < tuples; t++) {
		int64_t off = per_batch ? (t / per_batch) * bstride : 0;
		for (int64_t j = 0; j < m; j++) {
			int64_t dim = x->dims[b + j], v = norm_index(ind, (size_t)(t * m + j), dim);
			if (v < 0)
				return oq_k_err(k, OQ_EINVAL, "index %lld of tuple %lld is out of range for dim %lld",
						(long long)oq_rt_get_int(ind, (size_t)(t * m + j)), (long long)t,
						(long long)dim);
			off += v * xs[b + j];
		}
		if ((rc = oq_sh_copy(y, (size_t)(t * slice), x, (size_t)off, (size_t)slice)))
			return oq_k_err(k, rc, "out of memory");
	}
	return OQ_OK;
}

/* ----------------------------------------------------------------- scatter */

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static int reduction(oq_kctx *k, int *red)
{
	const char *s = oq_k_str(k, "reduction", "none");
	if (k->opset < 16 || !strcmp(s, "none"))
		*red = RED_NONE;
	else if (!strcmp(s, "add"))
		*red = RED_ADD;
	else if (!strcmp(s, "mul"))
		*red = RED_MUL;
	else if (k->opset >= 18 && !strcmp(s, "max"))
		*red = RED_MAX;
	else if (k->opset >= 18 && !strcmp(s, "min"))
		*red = RED_MIN;
	else
		return oq_k_err(k, OQ_EINVAL, "unknown reduction '%s'", s);
	return OQ_OK;
}

/* y[i] = y[i] (red) u[j]. */
static int combine(oq_rt *y, size_t i, const oq_rt *u, size_t j, int red)
{
	if (red == RED_NONE)
		return oq_sh_copy(y, i, u, j, 1);
	if (y->dtype == OQ_DT_INT64) {
		int64_t *p = y->data, v = ((const int64_t *)u->data)[j];
		switch (red) {
		case RED_ADD: p[i] = (int64_t)((uint64_t)p[i] + (uint64_t)v); break;
		case RED_MUL: p[i] = (int64_t)((uint64_t)p[i] * (uint64_t)v); break;
		case RED_MAX: p[i] = p[i] > v ? p[i] : v; break;
		default: p[i] = p[i] < v ? p[i] : v; break;
		}
		return OQ_OK;
	}
	{
		double a = oq_rt_get(y, i), v = oq_rt_get(u, j);
		switch (red) {
		case RED_ADD: a += v; break;
		case RED_MUL: a *= v; break;
		case RED_MAX: a = a > v ? a : v; break;
		default: a = a < v ? a : v; break;
		}
		oq_rt_set(y, i, a);
	}
	return OQ_OK;
}

static int reducible(oq_kctx *k, const oq_rt *x, int red)
{
	char kind = oq_dtype_kind(x->dtype);
	if (red == RED_NONE)
		return OQ_OK;
	if (x->dtype == OQ_DT_STRING || oq_dtype_is_float8(x->dtype) || oq_dtype_is_subbyte(x->dtype) ||
	    (kind != 'f' && kind != 's' && kind != 'u' && kind != 'b'))
		return oq_k_err(k, OQ_EUNSUP, "reduction on %s is not supported", oq_dtype_name(x->dtype));
	return OQ_OK;
}

int oq_k_scatter_nd(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *ind = oq_k_in(k, 1), *u = oq_k_in(k, 2), *y;
	int64_t m, xs[MAXR], tuples, slice;
	int red, rc;

	if (!x || !u)
		return oq_k_err(k, OQ_EINVAL, "inputs data and updates are required");
	if ((rc = check_index_dtype(k, ind, "indices")) || (rc = reduction(k, &red)) || (rc = reducible(k, x, red)))
		return rc;
	if (ind->rank < 1)
		return oq_k_err(k, OQ_EINVAL, "indices must have rank >= 1");
	m = ind->dims[ind->rank - 1];
	if (m > x->rank || u->dtype != x->dtype)
		return oq_k_err(k, OQ_EINVAL, "index depth %lld exceeds data rank %d or updates dtype differs",
				(long long)m, x->rank);
	tuples = oq_sh_prod(ind->dims, 0, ind->rank - 1);
	slice = oq_sh_prod(x->dims, (int)m, x->rank);
	if ((int64_t)u->nelem != tuples * slice)
		return oq_k_err(k, OQ_EINVAL, "updates has %zu elements, %lld expected", u->nelem,
				(long long)(tuples * slice));
	if ((rc = oq_k_output_like(k, 0, x, x->rank, x->dims, &y)))
		return rc;
	oq_sh_strides(x->rank, x->dims, xs);
	for (int64_t t = 0; t < tuples; t++) {
		int64_t off = 0;
		for (int64_t j = 0; j < m; j++) {
			int64_t v = norm_index(ind, (size_t)(t * m + j), x->dims[j]);
			if (v < 0)
				return oq_k_err(k, OQ_EINVAL, "index of tuple %lld is out of range for dim %lld",
						(long long)t, (long long)j);
			off += v * xs[j];
		}
		for (int64_t e = 0; e < slice; e++)
			if ((rc = combine(y, (size_t)(off + e), u, (size_t)(t * slice + e), red)))
				return oq_k_err(k, rc, "out of memory");
	}
	return OQ_OK;
}

/* ScatterElements and the deprecated Scatter (9, 10): same semantics without reduction. */
int oq_k_scatter_elements(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *ind = oq_k_in(k, 1), *u = oq_k_in(k, 2), *y;
	int64_t xs[MAXR], idx[MAXR] = {0};
	int a, red = RED_NONE, rc;

	if (!x || !u)
		return oq_k_err(k, OQ_EINVAL, "inputs data and updates are required");
	if ((rc = check_index_dtype(k, ind, "indices")))
		return rc;
	if (k->node->op == OQ_OP_ScatterElements && ((rc = reduction(k, &red)) || (rc = reducible(k, x, red))))
		return rc;
	if (ind->rank != x->rank || u->rank != ind->rank || u->dtype != x->dtype || x->rank == 0)
		return oq_k_err(k, OQ_EINVAL, "data, indices and updates must share a rank >= 1 (and dtype)");
	for (int i = 0; i < ind->rank; i++)
		if (ind->dims[i] != u->dims[i])
			return oq_k_err(k, OQ_EINVAL, "indices and updates differ in dim %d", i);
	a = oq_axis(oq_k_int(k, "axis", 0), x->rank);
	if (a < 0)
		return oq_k_err(k, OQ_EINVAL, "axis is out of range");
	if ((rc = oq_k_output_like(k, 0, x, x->rank, x->dims, &y)))
		return rc;
	oq_sh_strides(x->rank, x->dims, xs);
	for (size_t j = 0; j < ind->nelem; j++) {
		int64_t v = norm_index(ind, j, x->dims[a]), off = 0;
		if (v < 0)
			return oq_k_err(k, OQ_EINVAL, "indices[%zu] = %lld is out of range", j,
					(long long)oq_rt_get_int(ind, j));
		for (int i = 0; i < x->rank; i++) {
			int64_t c = i == a ? v : idx[i];
			if (c >= x->dims[i])
				return oq_k_err(k, OQ_EINVAL, "indices shape exceeds data in dim %d", i);
			off += c * xs[i];
		}
		if ((rc = combine(y, (size_t)off, u, j, red)))
			return oq_k_err(k, rc, "out of memory");
		for (int i = x->rank - 1; i >= 0; i--) {
			if (++idx[i] < ind->dims[i])
				break;
			idx[i] = 0;
		}
	}
	return OQ_OK;
}

/* ------------------------------------------------------------ selections */

int oq_k_nonzero(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t d[2], xs[MAXR], nnz = 0;
	int r, rc;
	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	r = x->rank ? x->rank : 1;
	for (size_t i = 0; i < x->nelem; i++)
		nnz += oq_sh_nonzero(x, i);
	d[0] = r;
	d[1] = nnz;
	if ((rc = oq_k_output(k, 0, OQ_DT_INT64, 2, d, &y)))
		return rc;
	oq_sh_strides(x->rank, x->dims, xs);
	{
		int64_t *o = y->data, col = 0;
		for (size_t i = 0; i < x->nelem; i++) {
			int64_t rem = (int64_t)i;
			if (!oq_sh_nonzero(x, i))
				continue;
			if (x->rank == 0)
				o[col] = 0;
			for (int j = 0; j < x->rank; j++) {
				o[j * nnz + col] = rem / xs[j];
				rem %= xs[j];
			}
			col++;
		}
	}
	return OQ_OK;
}

int oq_k_onehot(oq_kctx *k)
{
	oq_rt *ind = oq_k_in(k, 0), *dep = oq_k_in(k, 1), *val = oq_k_in(k, 2), *y;
	int64_t depth, d[MAXR], outer, inner, axis = oq_k_int(k, "axis", -1);
	int a, rc;
	if (!ind || !dep || !val || dep->nelem != 1 || val->nelem != 2)
		return oq_k_err(k, OQ_EINVAL, "needs indices, a scalar depth and two values");
	if (ind->rank + 1 > MAXR)
		return oq_k_err(k, OQ_EUNSUP, "rank too large");
	depth = oq_rt_get_int(dep, 0); /* float depth truncates, saturating */
	if (depth < 1 || depth > ((int64_t)1 << 40))
		return oq_k_err(k, OQ_EINVAL, "depth %lld is out of range", (long long)depth);
	a = oq_axis(axis, ind->rank + 1);
	if (a < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range", (long long)axis);
	memcpy(d, ind->dims, (size_t)a * sizeof *d);
	d[a] = depth;
	memcpy(d + a + 1, ind->dims + a, (size_t)(ind->rank - a) * sizeof *d);
	if ((rc = oq_k_output(k, 0, val->dtype, ind->rank + 1, d, &y)))
		return rc;
	for (size_t i = 0; i < y->nelem; i++)
		if ((rc = oq_sh_copy(y, i, val, 0, 1)))
			return oq_k_err(k, rc, "out of memory");
	outer = oq_sh_prod(ind->dims, 0, a);
	inner = oq_sh_prod(ind->dims, a, ind->rank);
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++) {
			size_t at = (size_t)(o * inner + i);
			int64_t v = oq_rt_get_int(ind, at);
			if (v < 0)
				v += depth;
			if (v < 0 || v >= depth)
				continue;
			if ((rc = oq_sh_copy(y, (size_t)((o * depth + v) * inner + i), val, 1, 1)))
				return oq_k_err(k, rc, "out of memory");
		}
	return OQ_OK;
}

int oq_k_compress(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *c = oq_k_in(k, 1), *y;
	int64_t d[MAXR], cnt = 0, n, outer, inner, dim, o2 = 0;
	int a, has_axis = oq_k_attr(k, "axis") != NULL, rc;
	if (!x || !c || c->rank != 1)
		return oq_k_err(k, OQ_EINVAL, "needs data and a 1-d condition");
	if (has_axis) {
		a = oq_axis(oq_k_int(k, "axis", 0), x->rank);
		if (a < 0)
			return oq_k_err(k, OQ_EINVAL, "axis is out of range");
		memcpy(d, x->dims, (size_t)x->rank * sizeof *d);
		outer = oq_sh_prod(x->dims, 0, a);
		inner = oq_sh_prod(x->dims, a + 1, x->rank);
		dim = x->dims[a];
	} else {
		a = 0;
		outer = 1;
		inner = 1;
		dim = (int64_t)x->nelem;
	}
	n = (int64_t)c->nelem < dim ? (int64_t)c->nelem : dim;
	for (int64_t i = 0; i < n; i++)
		cnt += oq_sh_nonzero(c, (size_t)i);
	d[a] = cnt;
	if ((rc = oq_k_output(k, 0, x->dtype, has_axis ? x->rank : 1, d, &y)))
		return rc;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < n; i++) {
			if (!oq_sh_nonzero(c, (size_t)i))
				continue;
			if ((rc = oq_sh_copy(y, (size_t)(o2 * inner), x, (size_t)((o * dim + i) * inner), (size_t)inner)))
				return oq_k_err(k, rc, "out of memory");
			o2++;
		}
	return OQ_OK;
}

/* ------------------------------------------------------------------ Unique */

typedef struct uctx {
	const oq_rt *x;
	int64_t outer, dim, inner;  /* slices along the axis: x viewed [outer, dim, inner] */
} uctx;

static int cmp_elem(const oq_rt *x, size_t i, size_t j)
{
	char kind = oq_dtype_kind(x->dtype);
	if (x->dtype == OQ_DT_STRING) {
		const oq_bytes *a = &x->strs[i], *b = &x->strs[j];
		size_t n = a->len < b->len ? a->len : b->len;
		int c = n ? memcmp(a->p, b->p, n) : 0;
		return c ? c : (a->len > b->len) - (a->len < b->len);
	}
	if (kind == 'f') {
		double a = oq_rt_get(x, i), b = oq_rt_get(x, j);
		return (a > b) - (a < b);
	}
	if (kind == 'u' && oq_dtype_bits(x->dtype) == 64) {
		uint64_t a = ((const uint64_t *)x->data)[i], b = ((const uint64_t *)x->data)[j];
		return (a > b) - (a < b);
	}
	{
		int64_t a = oq_rt_get_int(x, i), b = oq_rt_get_int(x, j);
		return (a > b) - (a < b);
	}
}

/* Lexicographic comparison of slices p and q. */
static int cmp_slice(const uctx *u, int64_t p, int64_t q)
{
	for (int64_t o = 0; o < u->outer; o++)
		for (int64_t i = 0; i < u->inner; i++) {
			int c = cmp_elem(u->x, (size_t)((o * u->dim + p) * u->inner + i),
					 (size_t)((o * u->dim + q) * u->inner + i));
			if (c)
				return c;
		}
	return 0;
}

/* Stable merge sort of idx[0..n) by slice. */
static void msort(const uctx *u, int64_t *idx, int64_t *tmp, int64_t n)
{
	int64_t h = n / 2, i = 0, j = h, o = 0;
	if (n < 2)
		return;
	msort(u, idx, tmp, h);
	msort(u, idx + h, tmp, n - h);
	while (i < h && j < n)
		tmp[o++] = cmp_slice(u, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
	while (i < h)
		tmp[o++] = idx[i++];
	while (j < n)
		tmp[o++] = idx[j++];
	memcpy(idx, tmp, (size_t)n * sizeof *idx);
}

int oq_k_unique(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y, *oi, *inv, *cnt;
	int has_axis = oq_k_attr(k, "axis") != NULL, sorted = oq_k_int(k, "sorted", 1) != 0, a = 0, rc = OQ_OK;
	int64_t *order = NULL, *tmp = NULL, *group = NULL, *first = NULL, *count = NULL, *rank = NULL, ng = 0;
	int64_t d[MAXR];
	uctx u;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	u.x = x;
	if (has_axis) {
		a = oq_axis(oq_k_int(k, "axis", 0), x->rank);
		if (a < 0)
			return oq_k_err(k, OQ_EINVAL, "axis is out of range");
		u.outer = oq_sh_prod(x->dims, 0, a);
		u.dim = x->dims[a];
		u.inner = oq_sh_prod(x->dims, a + 1, x->rank);
	} else {
		u.outer = 1;
		u.dim = (int64_t)x->nelem;
		u.inner = 1;
	}
	order = calloc((size_t)u.dim + 1, sizeof *order);
	tmp = calloc((size_t)u.dim + 1, sizeof *tmp);
	group = calloc((size_t)u.dim + 1, sizeof *group);  /* slice -> group (sorted rank) */
	first = calloc((size_t)u.dim + 1, sizeof *first);  /* group -> first slice */
	count = calloc((size_t)u.dim + 1, sizeof *count);
	rank = calloc((size_t)u.dim + 1, sizeof *rank);    /* group -> output position */
	if (!order || !tmp || !group || !first || !count || !rank) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto done;
	}
	for (int64_t i = 0; i < u.dim; i++)
		order[i] = i;
	msort(&u, order, tmp, u.dim);
	for (int64_t i = 0; i < u.dim; i++) {
		if (i == 0 || cmp_slice(&u, order[i - 1], order[i]))
			first[ng++] = order[i]; /* stable sort: the first of a run is its first occurrence */
		group[order[i]] = ng - 1;
		count[ng - 1]++;
	}
	if (sorted) {
		for (int64_t g = 0; g < ng; g++)
			rank[g] = g;
	} else { /* order groups by first occurrence */
		int64_t pos = 0;
		for (int64_t i = 0; i < u.dim; i++)
			if (first[group[i]] == i)
				rank[group[i]] = pos++;
	}
	if (has_axis) {
		memcpy(d, x->dims, (size_t)x->rank * sizeof *d);
		d[a] = ng;
	} else {
		d[0] = ng;
	}
	if ((rc = oq_k_output(k, 0, x->dtype, has_axis ? x->rank : 1, d, &y)))
		goto done;
	for (int64_t g = 0; g < ng; g++)
		for (int64_t o = 0; o < u.outer && !rc; o++)
			rc = oq_sh_copy(y, (size_t)((o * ng + rank[g]) * u.inner), x,
					(size_t)((o * u.dim + first[g]) * u.inner), (size_t)u.inner);
	if (rc) {
		rc = oq_k_err(k, rc, "out of memory");
		goto done;
	}
	if (k->n_out > 1) {
		if ((rc = oq_k_output(k, 1, OQ_DT_INT64, 1, &ng, &oi)))
			goto done;
		for (int64_t g = 0; g < ng; g++)
			((int64_t *)oi->data)[rank[g]] = first[g];
	}
	if (k->n_out > 2) {
		if ((rc = oq_k_output(k, 2, OQ_DT_INT64, 1, &u.dim, &inv)))
			goto done;
		for (int64_t i = 0; i < u.dim; i++)
			((int64_t *)inv->data)[i] = rank[group[i]];
	}
	if (k->n_out > 3) {
		if ((rc = oq_k_output(k, 3, OQ_DT_INT64, 1, &ng, &cnt)))
			goto done;
		for (int64_t g = 0; g < ng; g++)
			((int64_t *)cnt->data)[rank[g]] = count[g];
	}
done:
	free(order);
	free(tmp);
	free(group);
	free(first);
	free(count);
	free(rank);
	return rc;
}
