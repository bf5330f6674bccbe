/*
 * kernel_api.c - the executor's services to kernels (kernel.h): outputs
 * carved from the activation arena, per-thread and shared scratch buffers
 * kept across calls, error reports naming the node, attribute getters,
 * the deterministic parallel-for, and shape helpers.
 */
#include "calib/exec/exec_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* b's buffer, grown (64-byte aligned, contents dropped) to at least `bytes`; NULL when out of memory. */
static void *buf_reserve(struct buf *b, size_t bytes)
{
	if (b->cap < bytes) {
		size_t cap = (bytes + 63) / 64 * 64 + 64;
		void *p = aligned_alloc(64, cap);
		if (!p)
			return NULL;
		free(b->p);
		b->p = p;
		b->cap = cap;
	}
	return b->p;
}

void *oq_k_scratch(oq_kctx *k, size_t bytes)
{
	int w = oq_pool_self();

	if (!k || w < 0 || w >= k->e->n_scratch)
		return NULL;
	return buf_reserve(&k->e->scratch[w], bytes);
}

void *oq_k_shared(oq_kctx *k, size_t bytes)
{
	return buf_reserve(&k->e->shared, bytes);
}

/* oq_k_output (zero) and oq_k_output_raw. */
static int output(oq_kctx *k, size_t i, int dtype, int rank, const int64_t *dims, int zero, oq_rt **t)
{
	oq_rt *r;
	int rc;

	*t = NULL;
	if (i >= k->n_out) /* an output the node does not declare: scratch nobody reads */
		return oq_k_err(k, OQ_EINVAL, "kernel wrote output #%zu but the node has %zu outputs", i,
				k->n_out);
	if (k->out[i]) {
		k->e->live -= k->out[i]->nbytes;
		oq_arena_release(k->e, k->out[i]);
		free(k->out[i]);
		k->out[i] = NULL;
	}
	r = malloc(sizeof *r);
	if (!r)
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	if (dtype != OQ_DT_STRING) {
		memset(r, 0, sizeof *r);
		rc = rank < 0 || rank > OQ_RT_MAX_RANK ? OQ_EUNSUP
		     : oq_shape_size(dtype, rank, dims, &r->nelem, &r->nbytes) ? OQ_EINVAL : OQ_OK;
		if (!rc && r->nbytes > k->e->max_live - (k->e->live < k->e->max_live ? k->e->live : k->e->max_live)) {
			size_t nbytes = r->nbytes;
			free(r);
			k->e->refused = 1;
			return oq_k_err(k, OQ_ENOMEM, "output #%zu of %zu bytes would pass the executor's limit of "
					"%zu bytes of values held at once", i, nbytes, k->e->max_live);
		}
		if (!rc) {
			r->dtype = dtype;
			r->rank = rank;
			if (rank)
				memcpy(r->dims, dims, (size_t)rank * sizeof *dims);
			r->data = oq_arena_get(k->e, r->nbytes, &r->cap);
			if (!r->data)
				rc = OQ_ENOMEM;
			else if (zero)
				memset(r->data, 0, r->nbytes);
		}
	} else {
		rc = oq_rt_alloc(r, dtype, rank, dims);
	}
	if (rc) {
		oq_rt_release(r);
		free(r);
		if (rc == OQ_EUNSUP)
			return oq_k_err(k, rc, "output rank %d is above the supported %d", rank, OQ_RT_MAX_RANK);
		return oq_k_err(k, rc, rc == OQ_ENOMEM ? "out of memory for an output of %s"
						       : "invalid output shape for %s",
				oq_dtype_name(dtype));
	}
	k->e->live += r->nbytes;
	k->out[i] = r;
	*t = r;
	return OQ_OK;
}

int oq_k_output(oq_kctx *k, size_t i, int dtype, int rank, const int64_t *dims, oq_rt **t)
{
	return output(k, i, dtype, rank, dims, 1, t);
}

int oq_k_output_raw(oq_kctx *k, size_t i, int dtype, int rank, const int64_t *dims, oq_rt **t)
{
	return output(k, i, dtype, rank, dims, 0, t);
}

int oq_k_output_like(oq_kctx *k, size_t i, const oq_rt *src, int rank, const int64_t *dims, oq_rt **t)
{
	int rc;
	if (src->kind != OQ_RT_TENSOR) /* a sequence or empty optional: a deep copy */
		return oq_k_output_value(k, i, src, t);
	rc = oq_k_output(k, i, src->dtype, rank, dims, t);
	if (rc)
		return rc;
	if ((*t)->nelem != src->nelem)
		return oq_k_err(k, OQ_EINVAL, "cannot give %zu elements the shape of %zu", src->nelem,
				(*t)->nelem);
	if (src->strs) {
		for (size_t j = 0; j < src->nelem; j++) {
			(*t)->strs[j].p = malloc(src->strs[j].len + 1);
			if (!(*t)->strs[j].p)
				return oq_k_err(k, OQ_ENOMEM, "out of memory");
			memcpy((*t)->strs[j].p, src->strs[j].p, src->strs[j].len + 1);
			(*t)->strs[j].len = src->strs[j].len;
		}
	} else if (src->nbytes) {
		memcpy((*t)->data, src->data, src->nbytes);
	}
	return OQ_OK;
}

int oq_k_output_value(oq_kctx *k, size_t i, const oq_rt *src, oq_rt **t)
{
	oq_rt *r;
	*t = NULL;
	if (src->kind == OQ_RT_TENSOR)
		return oq_k_output_like(k, i, src, src->rank, src->dims, t);
	if (i >= k->n_out)
		return oq_k_err(k, OQ_EINVAL, "kernel wrote output #%zu but the node has %zu outputs", i,
				k->n_out);
	if (!(r = malloc(sizeof *r)) || oq_rt_copy(r, src)) {
		if (r) {
			oq_rt_release(r);
			free(r);
		}
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	}
	if (k->out[i]) {
		k->e->live -= k->out[i]->nbytes;
		oq_arena_release(k->e, k->out[i]);
		free(k->out[i]);
	}
	k->out[i] = r;
	*t = r;
	return OQ_OK;
}

int oq_k_err(oq_kctx *k, int status, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return oq_err(k->d, status, "run: node '%s' (%s, opset %lld): %s", k->node->name,
		      k->node->op_type, (long long)k->opset, msg);
}

const oq_attr *oq_k_attr(const oq_kctx *k, const char *name)
{
	return oq_node_attr(k->node, name);
}

int64_t oq_k_int(const oq_kctx *k, const char *name, int64_t dflt)
{
	const oq_attr *a = oq_k_attr(k, name);
	return a && a->type == OQ_ATTR_INT ? a->i : dflt;
}

float oq_k_float(const oq_kctx *k, const char *name, float dflt)
{
	const oq_attr *a = oq_k_attr(k, name);
	return a && a->type == OQ_ATTR_FLOAT ? a->f : dflt;
}

const char *oq_k_str(const oq_kctx *k, const char *name, const char *dflt)
{
	const oq_attr *a = oq_k_attr(k, name);
	return a && a->type == OQ_ATTR_STRING ? a->s.p : dflt;
}

size_t oq_k_ints(const oq_kctx *k, const char *name, const int64_t **v)
{
	const oq_attr *a = oq_k_attr(k, name);
	*v = a && a->type == OQ_ATTR_INTS ? a->ints : NULL;
	return *v ? a->n : 0;
}

size_t oq_k_floats(const oq_kctx *k, const char *name, const float **v)
{
	const oq_attr *a = oq_k_attr(k, name);
	*v = a && a->type == OQ_ATTR_FLOATS ? a->floats : NULL;
	return *v ? a->n : 0;
}

void oq_k_parallel(oq_kctx *k, size_t n, size_t grain, oq_range_fn fn, void *ctx)
{
	if (!k) {
		fn(ctx, 0, n);
		return;
	}
	oq_pool_run(k->e->pool, n, grain, fn, ctx);
}

int oq_broadcast(int ra, const int64_t *a, int rb, const int64_t *b, int *rr, int64_t *r)
{
	int n = ra > rb ? ra : rb;
	if (n > OQ_RT_MAX_RANK)
		return OQ_EUNSUP;
	for (int i = 0; i < n; i++) {
		int64_t x = i < n - ra ? 1 : a[i - (n - ra)];
		int64_t y = i < n - rb ? 1 : b[i - (n - rb)];
		if (x != y && x != 1 && y != 1)
			return OQ_EINVAL;
		r[i] = x == 1 ? y : x;
	}
	*rr = n;
	return OQ_OK;
}

int oq_axis(int64_t axis, int rank)
{
	if (axis < -(int64_t)rank || axis >= rank)
		return -1;
	return (int)(axis < 0 ? axis + rank : axis);
}
