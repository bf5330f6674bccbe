/*
 * calib/kernels/nn/util.c - dtype helpers of the 'nn' kernel family: typed element
 * readers/writers (function pointers chosen once per kernel call, so inner
 * loops avoid a per-element switch), float32 views of float16/bfloat16/
 * double tensors, and small parameter tensors as float arrays.
 */
#include "calib/kernels/nn/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GETTERS(name, type)                                                                        \
	static double gf_##name(const void *p, size_t i)                                           \
	{                                                                                          \
		return (double)((const type *)p)[i];                                               \
	}                                                                                          \
	static int64_t gi_##name(const void *p, size_t i)                                          \
	{                                                                                          \
		return (int64_t)((const type *)p)[i];                                              \
	}
GETTERS(i8, int8_t)
GETTERS(u8, uint8_t)
GETTERS(i16, int16_t)
GETTERS(u16, uint16_t)
GETTERS(i32, int32_t)
GETTERS(u32, uint32_t)
GETTERS(i64, int64_t)
GETTERS(b, uint8_t)
#undef GETTERS

/* uint64 above INT64_MAX saturates rather than wrapping. */
static double gf_u64(const void *p, size_t i)
{
	return (double)((const uint64_t *)p)[i];
}
static int64_t gi_u64(const void *p, size_t i)
{
	uint64_t v = ((const uint64_t *)p)[i];
	return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}
static double gf_f32(const void *p, size_t i)
{
	return ((const float *)p)[i];
}
static double gf_f64(const void *p, size_t i)
{
	return ((const double *)p)[i];
}
static double gf_f16(const void *p, size_t i)
{
	return oq_f16_to_f32(((const uint16_t *)p)[i]);
}
static double gf_bf16(const void *p, size_t i)
{
	return oq_bf16_to_f32(((const uint16_t *)p)[i]);
}

oq_nn_getf oq_nn_getf_for(int dtype)
{
	switch (dtype) {
	case OQ_DT_FLOAT: return gf_f32;
	case OQ_DT_DOUBLE: return gf_f64;
	case OQ_DT_FLOAT16: return gf_f16;
	case OQ_DT_BFLOAT16: return gf_bf16;
	case OQ_DT_INT8: return gf_i8;
	case OQ_DT_UINT8: return gf_u8;
	case OQ_DT_INT16: return gf_i16;
	case OQ_DT_UINT16: return gf_u16;
	case OQ_DT_INT32: return gf_i32;
	case OQ_DT_UINT32: return gf_u32;
	case OQ_DT_INT64: return gf_i64;
	case OQ_DT_UINT64: return gf_u64;
	case OQ_DT_BOOL: return gf_b;
	default: return NULL;
	}
}

oq_nn_geti oq_nn_geti_for(int dtype)
{
	switch (dtype) {
	case OQ_DT_INT8: return gi_i8;
	case OQ_DT_UINT8: return gi_u8;
	case OQ_DT_INT16: return gi_i16;
	case OQ_DT_UINT16: return gi_u16;
	case OQ_DT_INT32: return gi_i32;
	case OQ_DT_UINT32: return gi_u32;
	case OQ_DT_INT64: return gi_i64;
	case OQ_DT_UINT64: return gi_u64;
	case OQ_DT_BOOL: return gi_b;
	default: return NULL;
	}
}

void oq_nn_setf(oq_rt *t, size_t i, double v)
{
	switch (t->dtype) {
	case OQ_DT_FLOAT:
		((float *)t->data)[i] = (float)v;
		return;
	case OQ_DT_DOUBLE:
		((double *)t->data)[i] = v;
		return;
	case OQ_DT_FLOAT16:
		((uint16_t *)t->data)[i] = oq_f32_to_f16((float)v);
		return;
	default:
		oq_rt_set(t, i, v);
	}
}

static int64_t clampi(int64_t v, int64_t lo, int64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

void oq_nn_seti(oq_rt *t, size_t i, int64_t v)
{
	switch (t->dtype) {
	case OQ_DT_INT64: ((int64_t *)t->data)[i] = v; return;
	case OQ_DT_UINT64: ((uint64_t *)t->data)[i] = v < 0 ? 0 : (uint64_t)v; return;
	case OQ_DT_INT32: ((int32_t *)t->data)[i] = (int32_t)clampi(v, INT32_MIN, INT32_MAX); return;
	case OQ_DT_UINT32: ((uint32_t *)t->data)[i] = (uint32_t)clampi(v, 0, UINT32_MAX); return;
	case OQ_DT_INT16: ((int16_t *)t->data)[i] = (int16_t)clampi(v, INT16_MIN, INT16_MAX); return;
	case OQ_DT_UINT16: ((uint16_t *)t->data)[i] = (uint16_t)clampi(v, 0, UINT16_MAX); return;
	case OQ_DT_INT8: ((int8_t *)t->data)[i] = (int8_t)clampi(v, INT8_MIN, INT8_MAX); return;
	case OQ_DT_UINT8: ((uint8_t *)t->data)[i] = (uint8_t)clampi(v, 0, UINT8_MAX); return;
	case OQ_DT_BOOL: ((uint8_t *)t->data)[i] = v != 0; return;
	default: oq_nn_setf(t, i, (double)v);
	}
}

int oq_nn_is_float(int dtype)
{
	return dtype == OQ_DT_FLOAT || dtype == OQ_DT_DOUBLE || dtype == OQ_DT_FLOAT16 || dtype == OQ_DT_BFLOAT16;
}

int oq_nn_is_int(int dtype)
{
	return oq_nn_geti_for(dtype) != NULL && dtype != OQ_DT_BOOL;
}

int oq_nn_f32_in(oq_kctx *k, const oq_rt *x, int allow_int, const float **p, float **owned)
{
	oq_nn_getf get;
	float *b;

	*owned = NULL;
	*p = NULL;
	if (x->dtype == OQ_DT_FLOAT) {
		*p = x->data;
		return OQ_OK;
	}
	if (!oq_nn_is_float(x->dtype) && !(allow_int && oq_nn_is_int(x->dtype)))
		return oq_k_err(k, OQ_EUNSUP, "input dtype %s is not supported (needs a float%s tensor)",
				oq_dtype_name(x->dtype), allow_int ? " or integer" : "");
	get = oq_nn_getf_for(x->dtype);
	b = malloc(x->nelem ? x->nelem * sizeof *b : 1);
	if (!b)
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	for (size_t i = 0; i < x->nelem; i++)
		b[i] = (float)get(x->data, i);
	*p = b;
	*owned = b;
	return OQ_OK;
}

int oq_nn_f32_buf(oq_kctx *k, oq_rt *y, float **p, float **owned)
{
	*owned = NULL;
	if (y->dtype == OQ_DT_FLOAT) {
		*p = y->data;
		return OQ_OK;
	}
	*owned = calloc(y->nelem ? y->nelem : 1, sizeof **owned);
	if (!*owned)
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	*p = *owned;
	return OQ_OK;
}

void oq_nn_f32_out(oq_rt *y, float *owned)
{
	if (!owned)
		return;
	for (size_t i = 0; i < y->nelem; i++)
		oq_nn_setf(y, i, owned[i]);
	free(owned);
}

int oq_nn_params(oq_kctx *k, const oq_rt *t, const char *what, float **v, size_t *n)
{
	oq_nn_getf get;

	*v = NULL;
	*n = 0;
	if (!t)
		return oq_k_err(k, OQ_EINVAL, "input '%s' is missing", what);
	if (!(get = oq_nn_getf_for(t->dtype)))
		return oq_k_err(k, OQ_EUNSUP, "input '%s' has unsupported dtype %s", what, oq_dtype_name(t->dtype));
	*v = malloc(t->nelem ? t->nelem * sizeof **v : 1);
	if (!*v)
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	for (size_t i = 0; i < t->nelem; i++)
		(*v)[i] = (float)get(t->data, i);
	*n = t->nelem;
	return OQ_OK;
}

size_t oq_nn_prod(const int64_t *dims, int a, int b)
{
	size_t p = 1;
	for (int i = a; i < b; i++)
		p *= (size_t)dims[i];
	return p;
}
