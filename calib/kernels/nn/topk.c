/*
 * topk.c - TopK and CumSum.
 *
 * TopK: k from the attribute (opset 1-9) or the second input (opset 10+);
 * largest/sorted from opset 11. Each line along `axis` is sorted by
 * (value, index) with ties broken by the smaller index, so the order is a
 * total one and the result is deterministic; NaN ranks above every number.
 * sorted=0 allows any order; we still return the sorted one. Values are
 * copied bit for bit from the input, so any element type works. Integer
 * inputs compare as int64 (exact).
 *
 * CumSum: axis from the second input (0-D or 1-element int32/int64);
 * exclusive shifts by one, reverse scans from the end. Floats accumulate in
 * double, integers in int64 (wrapping). Work is split over lines.
 */
#include "calib/kernels/nn/nn.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct kv {
	double f;      /* value for float inputs */
	int64_t i;     /* value for integer inputs */
	int64_t idx;   /* position along the axis */
} kv;

static int cmp_idx(const kv *a, const kv *b)
{
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* a before b? descending values (NaN first), then index. */
static int desc_f(const void *pa, const void *pb)
{
	const kv *a = pa, *b = pb;
	int na = isnan(a->f), nb = isnan(b->f);
	if (na != nb)
		return na ? -1 : 1;
	if (!na && a->f != b->f)
		return a->f > b->f ? -1 : 1;
	return cmp_idx(a, b);
}

static int asc_f(const void *pa, const void *pb)
{
	const kv *a = pa, *b = pb;
	int na = isnan(a->f), nb = isnan(b->f);
	if (na != nb)
		return na ? 1 : -1;
	if (!na && a->f != b->f)
		return a->f < b->f ? -1 : 1;
	return cmp_idx(a, b);
}

static int desc_i(const void *pa, const void *pb)
{
	const kv *a = pa, *b = pb;
	if (a->i != b->i)
		return a->i > b->i ? -1 : 1;
	return cmp_idx(a, b);
}

static int asc_i(const void *pa, const void *pb)
{
	const kv *a = pa, *b = pb;
	if (a->i != b->i)
		return a->i < b->i ? -1 : 1;
	return cmp_idx(a, b);
}

typedef struct tkjob {
	const unsigned char *x;
	unsigned char *vals;
	int64_t *ind;
	oq_nn_getf getf;
	oq_nn_geti geti;
	size_t n, inner, kk, esize;
	int largest;
	atomic_int nomem;
} tkjob;

static void topk_lines(void *ctx, size_t begin, size_t end)
{
	tkjob *J = ctx;
	kv *buf = malloc(J->n * sizeof *buf + 1);
	int (*cmp)(const void *, const void *) = J->geti ? (J->largest ? desc_i : asc_i) : (J->largest ? desc_f : asc_f);

	if (!buf) {
		atomic_store(&J->nomem, 1);
		return;
	}
	for (size_t r = begin; r < end; r++) {
		size_t base = (r / J->inner) * J->n * J->inner + r % J->inner;
		size_t obase = (r / J->inner) * J->kk * J->inner + r % J->inner;
		for (size_t i = 0; i < J->n; i++) {
			size_t off = base + i * J->inner;
			buf[i].idx = (int64_t)i;
			if (J->geti)
				buf[i].i = J->geti(J->x, off);
			else
				buf[i].f = J->getf(J->x, off);
		}
		qsort(buf, J->n, sizeof *buf, cmp);
		for (size_t j = 0; j < J->kk; j++) {
			size_t src = base + (size_t)buf[j].idx * J->inner, dst = obase + j * J->inner;
			memcpy(J->vals + dst * J->esize, J->x + src * J->esize, J->esize);
			J->ind[dst] = buf[j].idx;
		}
	}
	free(buf);
}

int oq_nn_topk(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *vals, *ind;
	int64_t a = oq_k_int(k, "axis", -1), kk, od[OQ_RT_MAX_RANK];
	int axis, rc;
	tkjob J;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input X is missing");
	memset(&J, 0, sizeof J);
	J.getf = oq_nn_getf_for(x->dtype);
	J.geti = oq_nn_is_int(x->dtype) ? oq_nn_geti_for(x->dtype) : NULL;
	if (!J.getf || x->dtype == OQ_DT_BOOL)
		return oq_k_err(k, OQ_EUNSUP, "input dtype %s is not supported", oq_dtype_name(x->dtype));
	axis = oq_axis(a, x->rank);
	if (axis < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld out of range for rank %d", (long long)a, x->rank);
	if (k->opset >= 10) {
		const oq_rt *K = oq_k_in(k, 1);
		if (!K || K->nelem != 1 || K->rank > 1 || !oq_nn_is_int(K->dtype))
			return oq_k_err(k, OQ_EINVAL, "input K must be a 1-element integer tensor");
		kk = oq_rt_get_int(K, 0);
	} else {
		if (!oq_k_attr(k, "k"))
			return oq_k_err(k, OQ_EINVAL, "attribute k is required before opset 10");
		kk = oq_k_int(k, "k", 0);
	}
	if (kk < 0 || kk > x->dims[axis])
		return oq_k_err(k, OQ_EINVAL, "k = %lld is outside [0, %lld] (the size of axis %d)", (long long)kk,
				(long long)x->dims[axis], axis);
	J.largest = k->opset < 11 || oq_k_int(k, "largest", 1) != 0;
	memcpy(od, x->dims, (size_t)x->rank * sizeof *od);
	od[axis] = kk;
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, od, &vals)) ||
	    (rc = oq_k_output(k, 1, OQ_DT_INT64, x->rank, od, &ind)))
		return rc;
	if (vals->nelem == 0)
		return OQ_OK;
	J.x = x->data;
	J.vals = vals->data;
	J.ind = ind->data;
	J.n = (size_t)x->dims[axis];
	J.kk = (size_t)kk;
	J.inner = oq_nn_prod(x->dims, axis + 1, x->rank);
	J.esize = (size_t)oq_dtype_bits(x->dtype) / 8;
	atomic_init(&J.nomem, 0);
	oq_k_parallel(k, x->nelem / J.n, J.n >= 1024 ? 1 : 1024 / J.n, topk_lines, &J);
	if (atomic_load(&J.nomem))
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	return OQ_OK;
}

/* ------------------------------------------------------------------ CumSum */

typedef struct csjob {
	const void *x;
	oq_nn_getf getf;
	oq_nn_geti geti;
	oq_rt *y;
	size_t n, inner;
	int exclusive, reverse;
} csjob;

static void cs_lines(void *ctx, size_t begin, size_t end)
{
	const csjob *J = ctx;
	for (size_t r = begin; r < end; r++) {
		size_t base = (r / J->inner) * J->n * J->inner + r % J->inner;
		double sf = 0;
		int64_t si = 0;
		for (size_t t = 0; t < J->n; t++) {
			size_t i = J->reverse ? J->n - 1 - t : t, off = base + i * J->inner;
			if (J->geti) {
				int64_t v = J->geti(J->x, off);
				if (!J->exclusive)
					si = (int64_t)((uint64_t)si + (uint64_t)v);
				oq_nn_seti(J->y, off, si);
				if (J->exclusive)
					si = (int64_t)((uint64_t)si + (uint64_t)v);
			} else {
				double v = J->getf(J->x, off);
				if (!J->exclusive)
					sf += v;
				oq_nn_setf(J->y, off, sf);
				if (J->exclusive)
					sf += v;
			}
		}
	}
}

int oq_nn_cumsum(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *ax = oq_k_in(k, 1), *y;
	int64_t a;
	int axis, rc;
	csjob J;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input x is missing");
	if (!ax || ax->nelem != 1 || ax->rank > 1 || (ax->dtype != OQ_DT_INT32 && ax->dtype != OQ_DT_INT64))
		return oq_k_err(k, OQ_EINVAL, "input axis must be a 0-D (or 1-element) int32/int64 tensor");
	memset(&J, 0, sizeof J);
	J.getf = oq_nn_getf_for(x->dtype);
	J.geti = oq_nn_is_int(x->dtype) ? oq_nn_geti_for(x->dtype) : NULL;
	if (!J.getf || x->dtype == OQ_DT_BOOL)
		return oq_k_err(k, OQ_EUNSUP, "input dtype %s is not supported", oq_dtype_name(x->dtype));
	a = oq_rt_get_int(ax, 0);
	axis = oq_axis(a, x->rank);
	if (axis < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld out of range for rank %d", (long long)a, x->rank);
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)))
		return rc;
	if (x->nelem == 0)
		return OQ_OK;
	J.x = x->data;
	J.y = y;
	J.n = (size_t)x->dims[axis];
	J.inner = oq_nn_prod(x->dims, axis + 1, x->rank);
	J.exclusive = oq_k_int(k, "exclusive", 0) != 0;
	J.reverse = oq_k_int(k, "reverse", 0) != 0;
	oq_k_parallel(k, x->nelem / J.n, J.n >= 4096 ? 1 : 4096 / J.n, cs_lines, &J);
	return OQ_OK;
}
