/*
 * reduce.c - ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp,
 * ArgMax, ArgMin, and the reduction plans nn.h describes.
 *
 * Axes come from the `axes` attribute before opset 13 (ReduceSum) or 18
 * (the others), and from the optional second input after. Empty axes mean
 * "all axes", unless noop_with_empty_axes (axes-input versions) makes the op
 * an identity. Reducing an empty set gives the identity of the operation:
 * Sum/L1/L2/SumSquare 0, Prod 1, Max -inf (lowest int), Min +inf (highest
 * int), LogSum/LogSumExp -inf, Mean NaN (0/0). Float inputs accumulate in
 * double, integer inputs in int64 (Mean truncates like numpy's mean cast
 * back; L2, LogSum and LogSumExp go through double). LogSumExp subtracts the
 * maximum first. float32 ReduceSum / ReduceMean over one contiguous run
 * (the last axes, as LayerNorm exports use) add in 16 double stripes on an
 * AVX-512 or AVX2 CPU (oq_vm_sum) instead of one serial chain: both sum in double,
 * only the order of the additions differs. Work is split over output
 * elements.
 */
#include "calib/kernels/nn/nn.h"
#include "calib/kernels/vmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void oq_nn_rplan_init(oq_nn_rplan *p, int rank, const int64_t *dims, const unsigned char *mask)
{
	int64_t stride = 1;
	int last = -1; /* kind of the group being extended: 0 kept, 1 reduced */

	memset(p, 0, sizeof *p);
	/* walk from the innermost dim so strides are known; groups are reversed below */
	for (int i = rank - 1; i >= 0; i--) {
		int red = mask[i] != 0;
		if (dims[i] == 1)
			continue;
		if (red == last) {
			if (red)
				p->rd[p->nr - 1] *= dims[i];
			else
				p->kd[p->nk - 1] *= dims[i];
		} else if (red) {
			p->rd[p->nr] = dims[i];
			p->rs[p->nr++] = stride;
		} else {
			p->kd[p->nk] = dims[i];
			p->ks[p->nk++] = stride;
		}
		last = red;
		stride *= dims[i];
	}
	for (int i = 0; i < p->nr / 2; i++) {
		int64_t t = p->rd[i], u = p->rs[i];
		p->rd[i] = p->rd[p->nr - 1 - i];
		p->rs[i] = p->rs[p->nr - 1 - i];
		p->rd[p->nr - 1 - i] = t;
		p->rs[p->nr - 1 - i] = u;
	}
	for (int i = 0; i < p->nk / 2; i++) {
		int64_t t = p->kd[i], u = p->ks[i];
		p->kd[i] = p->kd[p->nk - 1 - i];
		p->ks[i] = p->ks[p->nk - 1 - i];
		p->kd[p->nk - 1 - i] = t;
		p->ks[p->nk - 1 - i] = u;
	}
	if (!p->nr) {
		p->rd[0] = 1;
		p->rs[0] = 0;
		p->nr = 1;
	}
	if (!p->nk) {
		p->kd[0] = 1;
		p->ks[0] = 0;
		p->nk = 1;
	}
	p->n_out = oq_nn_prod(p->kd, 0, p->nk);
	p->n_red = oq_nn_prod(p->rd, 0, p->nr);
}

size_t oq_nn_rplan_base(const oq_nn_rplan *p, size_t o)
{
	size_t base = 0;
	for (int i = p->nk - 1; i >= 0; i--) {
		base += (o % (size_t)p->kd[i]) * (size_t)p->ks[i];
		o /= (size_t)p->kd[i];
	}
	return base;
}

void oq_nn_rplan_offsets(const oq_nn_rplan *p, size_t o, size_t *off)
{
	size_t base = oq_nn_rplan_base(p, o);
	for (size_t j = 0; j < p->n_red; j++) {
		size_t r = j, d = 0;
		for (int i = p->nr - 1; i >= 0; i--) {
			d += (r % (size_t)p->rd[i]) * (size_t)p->rs[i];
			r /= (size_t)p->rd[i];
		}
		off[j] = base + d;
	}
}

/* ------------------------------------------------------------------ Reduce* */

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_SUMSQ, R_LOGSUM, R_LOGSUMEXP };
/* accumulation steps */
enum { A_SUM, A_MAX, A_MIN, A_PROD, A_ABS, A_SQ, A_EXP };

typedef struct rjob {
	const oq_nn_rplan *p;
	int op;
	const void *x;
	oq_nn_getf getf;       /* float path */
	oq_nn_geti geti;       /* integer path (NULL for floats) */
	oq_rt *y;
	const float *xf;       /* float32 data whose reduced elements are contiguous, where oq_vm_fast (ReduceSum/Mean) */
} rjob;

/*
 * Folds output o's reduced elements with step a (A_EXP: sum of exp(x - shift)).
 * The innermost reduced group is the tight loop; the others run as an odometer.
 */
static double fold_f(const rjob *J, size_t base, int a, double shift)
{
	const oq_nn_rplan *p = J->p;
	int64_t idx[OQ_RT_MAX_RANK] = {0};
	int in = p->nr - 1;
	size_t n = (size_t)p->rd[in], st = (size_t)p->rs[in];
	double acc = a == A_MAX ? -INFINITY : a == A_MIN ? INFINITY : a == A_PROD ? 1.0 : 0.0;
	for (;;) {
		size_t off = base;
		for (int i = 0; i < in; i++)
			off += (size_t)idx[i] * (size_t)p->rs[i];
		for (size_t j = 0; j < n; j++) {
			double v = J->getf(J->x, off + j * st);
			switch (a) {
			case A_SUM: acc += v; break;
			case A_MAX: acc = v > acc || isnan(v) ? v : acc; break;
			case A_MIN: acc = v < acc || isnan(v) ? v : acc; break;
			case A_PROD: acc *= v; break;
			case A_ABS: acc += fabs(v); break;
			case A_SQ: acc += v * v; break;
			default: acc += exp(v - shift); break;
			}
			if (isnan(acc) && (a == A_MAX || a == A_MIN))
				return acc;
		}
		int i = in - 1;
		while (i >= 0 && ++idx[i] == p->rd[i])
			idx[i--] = 0;
		if (i < 0)
			break;
	}
	return acc;
}

static int64_t fold_i(const rjob *J, size_t base, int a)
{
	const oq_nn_rplan *p = J->p;
	int64_t idx[OQ_RT_MAX_RANK] = {0};
	int in = p->nr - 1;
	size_t n = (size_t)p->rd[in], st = (size_t)p->rs[in];
	int64_t acc = a == A_MAX ? INT64_MIN : a == A_MIN ? INT64_MAX : a == A_PROD ? 1 : 0;
	for (;;) {
		size_t off = base;
		for (int i = 0; i < in; i++)
			off += (size_t)idx[i] * (size_t)p->rs[i];
		for (size_t j = 0; j < n; j++) {
			int64_t v = J->geti(J->x, off + j * st);
			/* unsigned wrap-around arithmetic: overflow is the model's problem, not UB */
			switch (a) {
			case A_SUM: acc = (int64_t)((uint64_t)acc + (uint64_t)v); break;
			case A_MAX: acc = v > acc ? v : acc; break;
			case A_MIN: acc = v < acc ? v : acc; break;
			case A_PROD: acc = (int64_t)((uint64_t)acc * (uint64_t)v); break;
			case A_ABS: acc = (int64_t)((uint64_t)acc + (uint64_t)(v < 0 ? -(uint64_t)v : (uint64_t)v)); break;
			default: acc = (int64_t)((uint64_t)acc + (uint64_t)v * (uint64_t)v); break;
			}
		}
		int i = in - 1;
		while (i >= 0 && ++idx[i] == p->rd[i])
			idx[i--] = 0;
		if (i < 0)
			break;
	}
	return acc;
}

static void reduce_outs(void *ctx, size_t begin, size_t end)
{
	const rjob *J = ctx;
	double n = (double)J->p->n_red;
	for (size_t o = begin; o < end; o++) {
		size_t base = oq_nn_rplan_base(J->p, o);
		if (J->geti && J->op != R_L2 && J->op != R_LOGSUM && J->op != R_LOGSUMEXP) {
			int64_t v;
			switch (J->op) {
			case R_SUM: v = fold_i(J, base, A_SUM); break;
			case R_MEAN: v = J->p->n_red ? fold_i(J, base, A_SUM) / (int64_t)J->p->n_red : 0; break;
			case R_MAX: v = fold_i(J, base, A_MAX); break;
			case R_MIN: v = fold_i(J, base, A_MIN); break;
			case R_PROD: v = fold_i(J, base, A_PROD); break;
			case R_L1: v = fold_i(J, base, A_ABS); break;
			default: v = fold_i(J, base, A_SQ); break;
			}
			oq_nn_seti(J->y, o, v);
			continue;
		}
		double v, m;
		if (J->xf) { /* one contiguous run: the vector sum (vmath.h) */
			v = oq_vm_sum(J->xf + base, J->p->n_red);
			oq_nn_setf(J->y, o, J->op == R_MEAN ? v / n : v);
			continue;
		}
		switch (J->op) {
		case R_SUM: v = fold_f(J, base, A_SUM, 0); break;
		case R_MEAN: v = fold_f(J, base, A_SUM, 0) / n; break;
		case R_MAX: v = fold_f(J, base, A_MAX, 0); break;
		case R_MIN: v = fold_f(J, base, A_MIN, 0); break;
		case R_PROD: v = fold_f(J, base, A_PROD, 0); break;
		case R_L1: v = fold_f(J, base, A_ABS, 0); break;
		case R_L2: v = sqrt(fold_f(J, base, A_SQ, 0)); break;
		case R_SUMSQ: v = fold_f(J, base, A_SQ, 0); break;
		case R_LOGSUM: v = log(fold_f(J, base, A_SUM, 0)); break;
		default:
			m = fold_f(J, base, A_MAX, 0);
			v = isinf(m) || isnan(m) ? log(fold_f(J, base, A_EXP, 0)) : m + log(fold_f(J, base, A_EXP, m));
			break;
		}
		oq_nn_setf(J->y, o, v);
	}
}

/* Value of reducing an empty set. */
static void empty_value(const rjob *J, size_t i)
{
	if (J->geti) {
		int64_t v = J->op == R_PROD ? 1 : J->op == R_MAX ? INT64_MIN : J->op == R_MIN ? INT64_MAX : 0;
		if (J->op == R_LOGSUM || J->op == R_LOGSUMEXP || J->op == R_L2) {
			oq_nn_setf(J->y, i, J->op == R_L2 ? 0.0 : -INFINITY);
			return;
		}
		oq_nn_seti(J->y, i, v);
		return;
	}
	switch (J->op) {
	case R_PROD: oq_nn_setf(J->y, i, 1.0); break;
	case R_MAX:
	case R_LOGSUM:
	case R_LOGSUMEXP: oq_nn_setf(J->y, i, -INFINITY); break;
	case R_MIN: oq_nn_setf(J->y, i, INFINITY); break;
	case R_MEAN: oq_nn_setf(J->y, i, NAN); break;
	default: oq_nn_setf(J->y, i, 0.0); break;
	}
}

static int op_of(oq_op op)
{
	switch (op) {
	case OQ_OP_ReduceSum: return R_SUM;
	case OQ_OP_ReduceMean: return R_MEAN;
	case OQ_OP_ReduceMax: return R_MAX;
	case OQ_OP_ReduceMin: return R_MIN;
	case OQ_OP_ReduceProd: return R_PROD;
	case OQ_OP_ReduceL1: return R_L1;
	case OQ_OP_ReduceL2: return R_L2;
	case OQ_OP_ReduceSumSquare: return R_SUMSQ;
	case OQ_OP_ReduceLogSum: return R_LOGSUM;
	default: return R_LOGSUMEXP;
	}
}

int oq_nn_reduce(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int op = op_of(k->node->op), rc;
	int axes_input = k->opset >= (op == R_SUM ? 13 : 18);
	int64_t keep = oq_k_int(k, "keepdims", 1), od[OQ_RT_MAX_RANK];
	unsigned char mask[OQ_RT_MAX_RANK];
	int64_t axv[OQ_RT_MAX_RANK];
	size_t na = 0;
	int ro = 0;
	oq_nn_rplan p;
	rjob J;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input data is missing");
	memset(&J, 0, sizeof J);
	J.op = op;
	J.getf = oq_nn_getf_for(x->dtype);
	J.geti = oq_nn_is_int(x->dtype) ? oq_nn_geti_for(x->dtype) : NULL;
	if (!J.getf || x->dtype == OQ_DT_BOOL)
		return oq_k_err(k, OQ_EUNSUP, "input dtype %s is not supported", oq_dtype_name(x->dtype));
	if (axes_input) {
		const oq_rt *a = oq_k_in(k, 1);
		if (a) {
			if (a->dtype != OQ_DT_INT64 || a->rank > 1)
				return oq_k_err(k, OQ_EINVAL, "axes must be a 1-D int64 tensor");
			if (a->nelem > (size_t)(x->rank ? x->rank : 1))
				return oq_k_err(k, OQ_EINVAL, "axes has %zu entries for rank %d", a->nelem, x->rank);
			for (size_t i = 0; i < a->nelem; i++)
				axv[na++] = ((const int64_t *)a->data)[i];
		}
		if (na == 0 && oq_k_int(k, "noop_with_empty_axes", 0)) {
			if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)))
				return rc;
			if (x->nbytes)
				memcpy(y->data, x->data, x->nbytes);
			return OQ_OK;
		}
	} else {
		const int64_t *av;
		size_t n = oq_k_ints(k, "axes", &av);
		if (n > (size_t)(x->rank ? x->rank : 1))
			return oq_k_err(k, OQ_EINVAL, "axes has %zu entries for rank %d", n, x->rank);
		for (size_t i = 0; i < n; i++)
			axv[na++] = av[i];
	}
	memset(mask, 0, sizeof mask);
	for (size_t i = 0; i < na; i++) {
		int a = oq_axis(axv[i], x->rank);
		if (a < 0 || mask[a])
			return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range or repeated for rank %d",
					(long long)axv[i], x->rank);
		mask[a] = 1;
	}
	if (na == 0)
		memset(mask, 1, sizeof mask);
	for (int i = 0; i < x->rank; i++) {
		if (!mask[i])
			od[ro++] = x->dims[i];
		else if (keep)
			od[ro++] = 1;
	}
	if ((rc = oq_k_output(k, 0, x->dtype, ro, od, &y)))
		return rc;
	J.y = y;
	J.x = x->data;
	if (y->nelem == 0)
		return OQ_OK;
	if (x->nelem == 0) {
		for (size_t i = 0; i < y->nelem; i++)
			empty_value(&J, i);
		return OQ_OK;
	}
	oq_nn_rplan_init(&p, x->rank, x->dims, mask);
	J.p = &p;
	if (x->dtype == OQ_DT_FLOAT && (op == R_SUM || op == R_MEAN) && p.nr == 1 && p.rs[0] == 1 && oq_vm_fast())
		J.xf = x->data;
	oq_k_parallel(k, p.n_out, p.n_red >= 4096 ? 1 : 4096 / p.n_red, reduce_outs, &J);
	return OQ_OK;
}

/* ------------------------------------------------------------------ ArgMax / ArgMin */

typedef struct ajob {
	const void *x;
	oq_nn_getf getf;
	oq_nn_geti geti;
	int64_t *y;
	size_t n, inner;
	int is_max, last;
} ajob;

static void arg_lines(void *ctx, size_t begin, size_t end)
{
	const ajob *J = ctx;
	for (size_t r = begin; r < end; r++) {
		size_t base = (r / J->inner) * J->n * J->inner + r % J->inner;
		size_t best = 0;
		if (J->geti) {
			int64_t b = J->geti(J->x, base);
			for (size_t i = 1; i < J->n; i++) {
				int64_t v = J->geti(J->x, base + i * J->inner);
				int better = J->is_max ? (J->last ? v >= b : v > b) : (J->last ? v <= b : v < b);
				if (better) {
					b = v;
					best = i;
				}
			}
		} else {
			double b = J->getf(J->x, base);
			for (size_t i = 1; i < J->n && !isnan(b); i++) {
				double v = J->getf(J->x, base + i * J->inner);
				int better = isnan(v) ||
					     (J->is_max ? (J->last ? v >= b : v > b) : (J->last ? v <= b : v < b));
				if (better) {
					b = v;
					best = i;
				}
			}
		}
		J->y[r] = (int64_t)best;
	}
}

static int run_arg(oq_kctx *k, int is_max)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t a = oq_k_int(k, "axis", 0), od[OQ_RT_MAX_RANK];
	int axis, ro = 0, rc;
	ajob J;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input data is missing");
	memset(&J, 0, sizeof J);
	J.getf = oq_nn_getf_for(x->dtype);
	J.geti = oq_nn_is_int(x->dtype) ? oq_nn_geti_for(x->dtype) : NULL;
	if (!J.getf || x->dtype == OQ_DT_BOOL)
		return oq_k_err(k, OQ_EUNSUP, "input dtype %s is not supported", oq_dtype_name(x->dtype));
	axis = oq_axis(a, x->rank);
	if (axis < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld out of range for rank %d", (long long)a, x->rank);
	if (x->dims[axis] == 0)
		return oq_k_err(k, OQ_EINVAL, "cannot take the arg%s of an empty axis", is_max ? "max" : "min");
	for (int i = 0; i < x->rank; i++) {
		if (i != axis)
			od[ro++] = x->dims[i];
		else if (oq_k_int(k, "keepdims", 1))
			od[ro++] = 1;
	}
	if ((rc = oq_k_output(k, 0, OQ_DT_INT64, ro, od, &y)))
		return rc;
	J.x = x->data;
	J.y = y->data;
	J.n = (size_t)x->dims[axis];
	J.inner = oq_nn_prod(x->dims, axis + 1, x->rank);
	J.is_max = is_max;
	J.last = k->opset >= 12 && oq_k_int(k, "select_last_index", 0) != 0;
	oq_k_parallel(k, y->nelem, J.n >= 4096 ? 1 : 4096 / J.n, arg_lines, &J);
	return OQ_OK;
}

int oq_nn_argmax(oq_kctx *k)
{
	return run_arg(k, 1);
}

int oq_nn_argmin(oq_kctx *k)
{
	return run_arg(k, 0);
}
