/*
 * loss.c - NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
 * (opsets 12/13), so models that carry their loss head still run.
 *
 * input (N, C, d1..dk), target (N, d1..dk) int32/int64, optional weight (C).
 * loss[n, d] = -input[n, target, d] * weight[target]; entries whose target
 * equals ignore_index contribute 0 and weigh 0. reduction "none" returns
 * loss; "sum" its sum; "mean" the sum divided by the sum of the gathered
 * weights (the count of non-ignored entries without weights), as the ONNX
 * reference computes it. SoftmaxCrossEntropyLoss first takes LogSoftmax over
 * axis 1 (optional second output log_prob). Everything runs in double; the
 * log-softmax lines are split over threads, the final sum stays sequential.
 */
#include "calib/kernels/nn/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct lsjob {
	const double *x;
	double *lp;
	size_t C, D;
} lsjob;

/* Item = one (n, d) line over the C classes (stride D). */
static void logsoftmax_lines(void *ctx, size_t begin, size_t end)
{
	const lsjob *J = ctx;
	for (size_t r = begin; r < end; r++) {
		size_t base = (r / J->D) * J->C * J->D + r % J->D;
		double m = -INFINITY, s = 0, ls;
		for (size_t c = 0; c < J->C; c++)
			if (J->x[base + c * J->D] > m)
				m = J->x[base + c * J->D];
		for (size_t c = 0; c < J->C; c++)
			s += exp(J->x[base + c * J->D] - m);
		ls = log(s);
		for (size_t c = 0; c < J->C; c++)
			J->lp[base + c * J->D] = J->x[base + c * J->D] - m - ls;
	}
}

static int run_loss(oq_kctx *k, int sce)
{
	oq_rt *x = oq_k_in(k, 0), *t = oq_k_in(k, 1), *w = oq_k_in(k, 2), *y, *lpo;
	const char *red = oq_k_str(k, "reduction", "mean");
	const oq_attr *iia = oq_k_attr(k, "ignore_index");
	int64_t ii = oq_k_int(k, "ignore_index", 0);
	double *xd = NULL, *lp = NULL, *loss = NULL, wsum = 0, total = 0;
	size_t N, C, D, nt;
	oq_nn_getf getx;
	int rc = OQ_OK;

	if (!x || !t)
		return oq_k_err(k, OQ_EINVAL, "inputs %s and target are required", sce ? "scores" : "input");
	if (!oq_nn_is_float(x->dtype) || !(getx = oq_nn_getf_for(x->dtype)))
		return oq_k_err(k, OQ_EUNSUP, "input dtype %s is not supported", oq_dtype_name(x->dtype));
	if (t->dtype != OQ_DT_INT32 && t->dtype != OQ_DT_INT64)
		return oq_k_err(k, OQ_EINVAL, "target must be int32 or int64, got %s", oq_dtype_name(t->dtype));
	if (strcmp(red, "none") && strcmp(red, "sum") && strcmp(red, "mean"))
		return oq_k_err(k, OQ_EINVAL, "unknown reduction '%s' (none, sum or mean)", red);
	if (x->rank < 2 || t->rank != x->rank - 1 || t->dims[0] != x->dims[0])
		return oq_k_err(k, OQ_EINVAL, "input must be (N, C, d...) and target (N, d...)");
	for (int i = 2; i < x->rank; i++)
		if (t->dims[i - 1] != x->dims[i])
			return oq_k_err(k, OQ_EINVAL, "target dim %d is %lld, input has %lld", i - 1,
					(long long)t->dims[i - 1], (long long)x->dims[i]);
	N = (size_t)x->dims[0];
	C = (size_t)x->dims[1];
	D = oq_nn_prod(x->dims, 2, x->rank);
	nt = N * D;
	if (w && (w->rank != 1 || (size_t)w->dims[0] != C || !oq_nn_getf_for(w->dtype)))
		return oq_k_err(k, OQ_EINVAL, "weight must be a 1-D float tensor of C = %zu values", C);
	if (!(xd = malloc(x->nelem * sizeof *xd + 1)) || !(loss = malloc(nt * sizeof *loss + 1))) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < x->nelem; i++)
		xd[i] = getx(x->data, i);
	lp = xd;
	if (sce) {
		lsjob J;
		if (!(lp = malloc(x->nelem * sizeof *lp + 1))) {
			rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
			goto done;
		}
		J.x = xd;
		J.lp = lp;
		J.C = C;
		J.D = D;
		if (C)
			oq_k_parallel(k, nt, C >= 1024 ? 1 : 1024 / C, logsoftmax_lines, &J);
	}
	for (size_t i = 0; i < nt; i++) {
		int64_t tg = oq_rt_get_int(t, i);
		size_t n = i / D, d = i % D;
		double wt;
		if (iia && tg == ii) {
			loss[i] = 0;
			continue;
		}
		if (tg < 0 || (size_t)tg >= C) {
			rc = oq_k_err(k, OQ_EINVAL, "target[%zu] = %lld is outside [0, %zu) and not ignore_index", i,
				      (long long)tg, C);
			goto done;
		}
		wt = w ? oq_rt_get(w, (size_t)tg) : 1.0;
		loss[i] = -lp[(n * C + (size_t)tg) * D + d] * wt;
		wsum += wt;
		total += loss[i];
	}
	if (!strcmp(red, "none")) {
		if ((rc = oq_k_output(k, 0, x->dtype, t->rank, t->dims, &y)))
			goto done;
		for (size_t i = 0; i < nt; i++)
			oq_nn_setf(y, i, loss[i]);
	} else {
		if ((rc = oq_k_output(k, 0, x->dtype, 0, NULL, &y)))
			goto done;
		oq_nn_setf(y, 0, !strcmp(red, "sum") ? total : total / wsum);
	}
	if (sce && k->n_out > 1 && k->node->outputs[1]) {
		if ((rc = oq_k_output(k, 1, x->dtype, x->rank, x->dims, &lpo)))
			goto done;
		for (size_t i = 0; i < x->nelem; i++)
			oq_nn_setf(lpo, i, lp[i]);
	}
done:
	if (lp != xd)
		free(lp);
	free(xd);
	free(loss);
	return rc;
}

int oq_nn_nllloss(oq_kctx *k)
{
	return run_loss(k, 0);
}

int oq_nn_sceloss(oq_kctx *k)
{
	return run_loss(k, 1);
}
