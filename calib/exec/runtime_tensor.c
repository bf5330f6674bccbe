/*
 * runtime_tensor.c - runtime tensors: allocation, views of IR tensors, generic element
 * access with dtype conversion (used by shape arithmetic, Cast and tests;
 * hot kernels work on typed pointers instead).
 */
#include "calib/exec/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int set_shape(oq_rt *t, int dtype, int rank, const int64_t *dims)
{
	if (rank < 0 || rank > OQ_RT_MAX_RANK)
		return OQ_EUNSUP;
	if (oq_shape_size(dtype, rank, dims, &t->nelem, &t->nbytes))
		return OQ_EINVAL;
	t->dtype = dtype;
	t->rank = rank;
	if (rank)
		memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
	return OQ_OK;
}

int oq_rt_alloc(oq_rt *t, int dtype, int rank, const int64_t *dims)
{
	int rc;

	memset(t, 0, sizeof *t);
	if ((rc = set_shape(t, dtype, rank, dims)))
		return rc;
	if (dtype == OQ_DT_STRING) {
		t->strs = oq_calloc(t->nelem, sizeof *t->strs);
		return t->strs ? OQ_OK : OQ_ENOMEM;
	}
	t->data = aligned_alloc(64, (t->nbytes + 63) / 64 * 64 + 64);
	if (!t->data)
		return OQ_ENOMEM;
	memset(t->data, 0, t->nbytes);
	return OQ_OK;
}

void oq_rt_release(oq_rt *t)
{
	if (!t->borrowed) {
		free(t->data);
		for (size_t i = 0; t->items && i < t->n_items; i++)
			oq_rt_release(&t->items[i]);
		free(t->items);
	}
	if (t->strs)
		for (size_t i = 0; i < t->nelem; i++)
			free(t->strs[i].p);
	free(t->strs);
	memset(t, 0, sizeof *t);
}

int oq_rt_shape_of(oq_rt *t, const oq_tensor *src)
{
	memset(t, 0, sizeof *t);
	t->borrowed = 1;
	return src->dtype == OQ_DT_STRING ? OQ_EUNSUP : set_shape(t, src->dtype, src->rank, src->dims);
}

int oq_rt_from_tensor(oq_rt *t, const oq_tensor *src)
{
	int rc;
	size_t align;

	memset(t, 0, sizeof *t);
	if ((rc = set_shape(t, src->dtype, src->rank, src->dims)))
		return rc;
	if (src->dtype == OQ_DT_STRING) {
		if (!(t->strs = oq_calloc(t->nelem, sizeof *t->strs)))
			return OQ_ENOMEM;
		for (size_t i = 0; i < t->nelem; i++) {
			t->strs[i].p = malloc(src->strs[i].len + 1);
			if (!t->strs[i].p)
				return OQ_ENOMEM;
			memcpy(t->strs[i].p, src->strs[i].p, src->strs[i].len + 1);
			t->strs[i].len = src->strs[i].len;
		}
		return OQ_OK;
	}
	/* Borrow when aligned for the element type; tensors inside a protobuf file rarely are. */
	align = (size_t)oq_dtype_bits(src->dtype) / 8;
	if (align < 1)
		align = 1;
	if (align > 8)
		align = 8;
	if (src->nbytes == 0 || ((uintptr_t)src->data % align) == 0) {
		t->data = (void *)src->data;
		t->borrowed = 1;
		return OQ_OK;
	}
	t->data = aligned_alloc(64, (t->nbytes + 63) / 64 * 64 + 64);
	if (!t->data)
		return OQ_ENOMEM;
	memcpy(t->data, src->data, t->nbytes);
	return OQ_OK;
}

int oq_rt_seq(oq_rt *t, int dtype, size_t n)
{
	memset(t, 0, sizeof *t);
	t->kind = OQ_RT_SEQ;
	t->dtype = dtype;
	t->items = oq_calloc(n ? n : 1, sizeof *t->items);
	t->n_items = n;
	return t->items ? OQ_OK : OQ_ENOMEM;
}

int oq_rt_copy(oq_rt *dst, const oq_rt *src)
{
	int rc;
	if (src->kind == OQ_RT_NONE) {
		memset(dst, 0, sizeof *dst);
		dst->kind = OQ_RT_NONE;
		return OQ_OK;
	}
	if (src->kind == OQ_RT_SEQ) {
		if ((rc = oq_rt_seq(dst, src->dtype, src->n_items)))
			return rc;
		for (size_t i = 0; i < src->n_items; i++)
			if ((rc = oq_rt_copy(&dst->items[i], &src->items[i])))
				return rc; /* dst stays releasable */
		return OQ_OK;
	}
	if ((rc = oq_rt_alloc(dst, src->dtype, src->rank, src->dims)))
		return rc;
	if (src->strs) {
		for (size_t i = 0; i < src->nelem; i++) {
			dst->strs[i].p = malloc(src->strs[i].len + 1);
			if (!dst->strs[i].p)
				return OQ_ENOMEM;
			memcpy(dst->strs[i].p, src->strs[i].p, src->strs[i].len + 1);
			dst->strs[i].len = src->strs[i].len;
		}
	} else if (src->nbytes) {
		memcpy(dst->data, src->data, src->nbytes);
	}
	return OQ_OK;
}

/* The IR tensor accessors already handle every dtype; wrap the runtime tensor. */
static oq_tensor view(const oq_rt *t)
{
	oq_tensor v;
	memset(&v, 0, sizeof v);
	v.dtype = t->dtype;
	v.rank = t->rank;
	v.dims = (int64_t *)t->dims;
	v.nelem = t->nelem;
	v.nbytes = t->nbytes;
	v.data = t->data;
	return v;
}

double oq_rt_get(const oq_rt *t, size_t i)
{
	oq_tensor v = view(t);
	return oq_tensor_get(&v, i);
}

int64_t oq_rt_get_int(const oq_rt *t, size_t i)
{
	oq_tensor v = view(t);
	if (oq_dtype_kind(t->dtype) == 'f') {
		double x = oq_tensor_get(&v, i);
		if (isnan(x))
			return 0;
		if (x >= 9.2233720368547758e18)
			return INT64_MAX;
		if (x <= -9.2233720368547758e18)
			return INT64_MIN;
		return (int64_t)x; /* truncation, as C and numpy casts do */
	}
	return oq_tensor_get_int(&v, i);
}

static double clampd(double v, double lo, double hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

void oq_rt_set(oq_rt *t, size_t i, double v)
{
	unsigned char *p = t->data;
	int bits = oq_dtype_bits(t->dtype);
	char kind = oq_dtype_kind(t->dtype);

	if (i >= t->nelem)
		return;
	switch (t->dtype) {
	case OQ_DT_FLOAT: {
		float f = (float)v;
		memcpy(p + 4 * i, &f, 4);
		return;
	}
	case OQ_DT_DOUBLE:
		memcpy(p + 8 * i, &v, 8);
		return;
	case OQ_DT_FLOAT16: {
		uint16_t h = oq_f32_to_f16((float)v);
		memcpy(p + 2 * i, &h, 2);
		return;
	}
	case OQ_DT_BFLOAT16: {
		float f = (float)v;
		uint32_t u;
		memcpy(&u, &f, 4);
		if ((u & 0x7fffffff) > 0x7f800000)
			u = 0x7fc00000; /* keep NaN a NaN */
		else
			u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
		uint16_t h = (uint16_t)(u >> 16);
		memcpy(p + 2 * i, &h, 2);
		return;
	}
	case OQ_DT_BOOL:
		p[i] = v != 0;
		return;
	default:
		break;
	}
	if (kind == 's' || kind == 'u') {
		double lo = kind == 's' ? -ldexp(1, bits - 1) : 0;
		double hi = kind == 's' ? ldexp(1, bits - 1) - 1 : ldexp(1, bits) - 1;
		uint64_t u;
		if (isnan(v))
			v = 0;
		v = clampd(nearbyint(v), lo, hi);
		u = kind == 's' ? (uint64_t)(int64_t)v : (uint64_t)v;
		if (bits < 8) {
			int per = 8 / bits;
			unsigned shift = (unsigned)(i % (size_t)per) * (unsigned)bits;
			unsigned mask = ((1u << bits) - 1) << shift;
			p[i / (size_t)per] = (unsigned char)((p[i / (size_t)per] & ~mask) | ((u << shift) & mask));
			return;
		}
		for (int b = 0; b < bits / 8; b++)
			p[i * (size_t)(bits / 8) + (size_t)b] = (unsigned char)(u >> (8 * b));
	}
}

const char *oq_rt_describe(const oq_rt *t, char *buf, size_t n)
{
	size_t off = 0;
	int w;
	if (t->kind == OQ_RT_NONE) {
		snprintf(buf, n, "optional(none)");
		return buf;
	}
	if (t->kind == OQ_RT_SEQ) {
		snprintf(buf, n, "sequence<%s>(%zu)", t->dtype ? oq_dtype_name(t->dtype) : "?", t->n_items);
		return buf;
	}
	w = snprintf(buf, n, "%s[", oq_dtype_name(t->dtype));
	if (w < 0 || (size_t)w >= n)
		return buf;
	off = (size_t)w;
	for (int i = 0; i < t->rank && off < n; i++) {
		w = snprintf(buf + off, n - off, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
		if (w < 0)
			break;
		off += (size_t)w;
	}
	if (off < n)
		snprintf(buf + off, n - off, "]");
	return buf;
}
