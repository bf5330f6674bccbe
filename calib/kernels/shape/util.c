/*
 * calib/kernels/shape/util.c - element moving for the 'shape' kernel family: copies of
 * any dtype (bytes, packed 2/4-bit values, strings) and the strided copy
 * engine (see util.h).
 *
 * The engine first drops unit dims and merges dims that are contiguous in
 * both source and destination, so a Transpose that only swaps outer blocks
 * copies long runs with memcpy. Rows (all dims but the innermost) are split
 * across threads; every row is copied the same way whatever thread runs it.
 */
#include "calib/kernels/shape/util.h"

#include <stdlib.h>
#include <string.h>

static unsigned get_packed(const oq_rt *t, size_t i, int bits)
{
	const unsigned char *p = t->data;
	size_t per = (size_t)(8 / bits);
	unsigned shift = (unsigned)(i % per) * (unsigned)bits;
	return (p[i / per] >> shift) & ((1u << bits) - 1);
}

static void set_packed(oq_rt *t, size_t i, int bits, unsigned v)
{
	unsigned char *p = t->data;
	size_t per = (size_t)(8 / bits);
	unsigned shift = (unsigned)(i % per) * (unsigned)bits;
	unsigned mask = ((1u << bits) - 1) << shift;
	p[i / per] = (unsigned char)((p[i / per] & ~mask) | ((v << shift) & mask));
}

int oq_sh_copy(oq_rt *dst, size_t di, const oq_rt *src, size_t si, size_t n)
{
	int bits = oq_dtype_bits(src->dtype);

	if (n == 0)
		return OQ_OK;
	if (src->dtype == OQ_DT_STRING) {
		for (size_t j = 0; j < n; j++) {
			const oq_bytes *s = &src->strs[si + j];
			oq_bytes *d = &dst->strs[di + j];
			char *p = malloc(s->len + 1);
			if (!p)
				return OQ_ENOMEM;
			if (s->p)
				memcpy(p, s->p, s->len + 1);
			else
				p[0] = 0;
			free(d->p);
			d->p = p;
			d->len = s->len;
		}
		return OQ_OK;
	}
	if (bits >= 8) {
		size_t e = (size_t)bits / 8;
		memmove((unsigned char *)dst->data + di * e, (const unsigned char *)src->data + si * e, n * e);
		return OQ_OK;
	}
	for (size_t j = 0; j < n; j++)
		set_packed(dst, di + j, bits, get_packed(src, si + j, bits));
	return OQ_OK;
}

void oq_sh_strides(int rank, const int64_t *dims, int64_t *strides)
{
	int64_t s = 1;
	for (int i = rank - 1; i >= 0; i--) {
		strides[i] = s;
		s *= dims[i];
	}
}

int64_t oq_sh_prod(const int64_t *dims, int b, int e)
{
	int64_t p = 1;
	for (int i = b; i < e; i++) {
		if (dims[i] < 0 || (dims[i] != 0 && p > INT64_MAX / dims[i]))
			return -1;
		p *= dims[i];
	}
	return p;
}

int oq_sh_nonzero(const oq_rt *t, size_t i)
{
	int bits = oq_dtype_bits(t->dtype);
	if (t->dtype == OQ_DT_STRING)
		return t->strs[i].len != 0;
	if (oq_dtype_kind(t->dtype) == 'f' && bits >= 16)
		return oq_rt_get(t, i) != 0;
	if (bits < 8)
		return get_packed(t, i, bits) != 0;
	if (oq_dtype_kind(t->dtype) == 'f') { /* float8: +0 and -0 are the only zeros */
		unsigned char b = ((const unsigned char *)t->data)[i];
		return (b & 0x7f) != 0;
	}
	for (int b = 0; b < bits / 8; b++)
		if (((const unsigned char *)t->data)[i * (size_t)(bits / 8) + (size_t)b])
			return 1;
	return 0;
}

int oq_sh_read_ints(oq_kctx *k, const oq_rt *t, const char *what, int64_t *v, size_t max, size_t *n)
{
	if (!t)
		return oq_k_err(k, OQ_EINVAL, "input '%s' is missing", what);
	if (t->dtype != OQ_DT_INT64 && t->dtype != OQ_DT_INT32)
		return oq_k_err(k, OQ_EINVAL, "input '%s' must be int64 or int32, not %s", what,
				oq_dtype_name(t->dtype));
	if (t->nelem > max)
		return oq_k_err(k, OQ_EUNSUP, "input '%s' has %zu elements, at most %zu are supported", what,
				t->nelem, max);
	for (size_t i = 0; i < t->nelem; i++)
		v[i] = oq_rt_get_int(t, i);
	*n = t->nelem;
	return OQ_OK;
}

/* ------------------------------------------------------------ view copy */

typedef struct vjob {
	const oq_sh_view *v;
	oq_rt *dst;
	const oq_rt *src;
	int64_t rows;        /* product of all dims but the last */
	int esize;           /* bytes per element; 0 for strings/sub-byte */
	int rc;              /* first error (string copies only: run single-threaded) */
} vjob;

static void copy_rows(void *ctx, size_t begin, size_t end)
{
	vjob *j = ctx;
	const oq_sh_view *v = j->v;
	int r = v->rank, last = r - 1;
	int64_t idx[OQ_SH_VIEW_MAX];
	int64_t so = v->soff, dof = v->doff, rem = (int64_t)begin;
	int64_t n = v->dims[last], s1 = v->ss[last], d1 = v->ds[last];
	size_t e = (size_t)j->esize;
	const unsigned char *sp = j->src->data;
	unsigned char *dp = j->dst->data;

	for (int i = last - 1; i >= 0; i--) {
		idx[i] = rem % v->dims[i];
		rem /= v->dims[i];
		so += idx[i] * v->ss[i];
		dof += idx[i] * v->ds[i];
	}
	for (size_t row = begin; row < end; row++) {
		if (e && s1 == 1 && d1 == 1) {
			memcpy(dp + (size_t)dof * e, sp + (size_t)so * e, (size_t)n * e);
		} else if (e == 4) {
			for (int64_t t = 0; t < n; t++)
				memcpy(dp + (size_t)(dof + t * d1) * 4, sp + (size_t)(so + t * s1) * 4, 4);
		} else if (e) {
			for (int64_t t = 0; t < n; t++)
				memcpy(dp + (size_t)(dof + t * d1) * e, sp + (size_t)(so + t * s1) * e, e);
		} else {
			for (int64_t t = 0; t < n && !j->rc; t++)
				j->rc = oq_sh_copy(j->dst, (size_t)(dof + t * d1), j->src, (size_t)(so + t * s1), 1);
		}
		/* next row: odometer over dims [0, last) */
		for (int i = last - 1; i >= 0; i--) {
			so += v->ss[i];
			dof += v->ds[i];
			if (++idx[i] < v->dims[i])
				break;
			so -= v->ss[i] * v->dims[i];
			dof -= v->ds[i] * v->dims[i];
			idx[i] = 0;
		}
	}
}

int oq_sh_view_copy(oq_kctx *k, oq_rt *dst, const oq_rt *src, const oq_sh_view *in)
{
	oq_sh_view v;
	vjob j;
	int bits = oq_dtype_bits(src->dtype);

	/* simplify: drop unit dims, merge dims contiguous on both sides */
	memset(&v, 0, sizeof v);
	v.soff = in->soff;
	v.doff = in->doff;
	for (int i = 0; i < in->rank; i++) {
		if (in->dims[i] == 0)
			return OQ_OK;
		if (in->dims[i] == 1)
			continue;
		if (v.rank > 0 && v.ss[v.rank - 1] == in->ss[i] * in->dims[i] &&
		    v.ds[v.rank - 1] == in->ds[i] * in->dims[i]) {
			v.dims[v.rank - 1] *= in->dims[i];
			v.ss[v.rank - 1] = in->ss[i];
			v.ds[v.rank - 1] = in->ds[i];
			continue;
		}
		v.dims[v.rank] = in->dims[i];
		v.ss[v.rank] = in->ss[i];
		v.ds[v.rank] = in->ds[i];
		v.rank++;
	}
	if (v.rank == 0) {
		v.rank = 1;
		v.dims[0] = 1;
		v.ss[0] = v.ds[0] = 1;
	}
	j.v = &v;
	j.dst = dst;
	j.src = src;
	j.rc = OQ_OK;
	j.esize = src->dtype != OQ_DT_STRING && bits >= 8 ? bits / 8 : 0;
	j.rows = 1;
	for (int i = 0; i < v.rank - 1; i++)
		j.rows *= v.dims[i];
	if (j.esize) {
		size_t per_row = (size_t)v.dims[v.rank - 1];
		size_t grain = per_row >= 16384 ? 1 : 16384 / per_row;
		oq_k_parallel(k, (size_t)j.rows, grain, copy_rows, &j);
	} else {
		copy_rows(&j, 0, (size_t)j.rows);
	}
	if (j.rc)
		return oq_k_err(k, j.rc, "out of memory copying strings");
	return OQ_OK;
}
