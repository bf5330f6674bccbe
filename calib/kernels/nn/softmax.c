/*
 * softmax.c - Softmax, LogSoftmax, Hardmax.
 *
 * Opsets 1-12 coerce the input to 2-D [prod(dims[:axis]), prod(dims[axis:])]
 * and normalise each row (axis defaults to 1); from opset 13 the op works
 * along the single dim `axis` (default -1). Both are lines of n elements
 * with stride `inner` (inner = 1 for the coerced form). Softmax subtracts the
 * line maximum before exp, sums in double; Hardmax marks the first maximum.
 * Contiguous lines (inner 1: the last axis, as in attention) run on the
 * vector path of vmath.h on an AVX-512 or AVX2 CPU (its own exp, within an ulp or
 * so of expf, and the sum in 16 double stripes); lines with NaN or an
 * infinite maximum, strided lines and other CPUs take the scalar loop.
 * Work is split over lines; a line's result does not depend on the split.
 */
#include "calib/kernels/nn/nn.h"
#include "calib/kernels/vmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { S_SOFTMAX, S_LOG, S_HARD };

typedef struct smjob {
	int kind;
	const float *x;
	float *y;
	size_t n, inner;
	int vec;           /* contiguous lines (inner 1) of Softmax / LogSoftmax where oq_vm_fast */
} smjob;

/*
 * A contiguous line on the vector path (vmath.h): max, exp(x - max) with
 * its sum in double (16 stripes), scale by 1 / sum (LogSoftmax: x - max -
 * log(sum)). Returns 0 (nothing written) for a line with NaN or an
 * infinite maximum, which the scalar loop then handles.
 */
static int sm_line_vec(int kind, const float *x, float *y, size_t n)
{
	int nan;
	float m = oq_vm_max(x, n, &nan), ls;
	double s;

	if (nan || !isfinite(m))
		return 0;
	s = oq_vm_expsum(x, m, y, n);
	if (kind == S_SOFTMAX) {
		oq_vm_scale(y, n, (float)(1.0 / s));
		return 1;
	}
	ls = (float)log(s);
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] - m - ls;
	return 1;
}

static void sm_lines(void *ctx, size_t begin, size_t end)
{
	const smjob *J = ctx;
	for (size_t r = begin; r < end; r++) {
		size_t base = (r / J->inner) * J->n * J->inner + r % J->inner, st = J->inner;
		const float *x = J->x + base;
		float *y = J->y + base;
		float m = x[0];
		size_t arg = 0;
		double s = 0;
		if (J->vec && sm_line_vec(J->kind, x, y, J->n))
			continue;
		for (size_t i = 1; i < J->n; i++)
			if (x[i * st] > m) {
				m = x[i * st];
				arg = i;
			}
		if (J->kind == S_HARD) {
			for (size_t i = 0; i < J->n; i++)
				y[i * st] = i == arg ? 1.0f : 0.0f;
			continue;
		}
		for (size_t i = 0; i < J->n; i++) {
			float e = expf(x[i * st] - m);
			if (J->kind == S_SOFTMAX)
				y[i * st] = e;
			s += e;
		}
		if (J->kind == S_SOFTMAX) {
			float inv = (float)(1.0 / s);
			for (size_t i = 0; i < J->n; i++)
				y[i * st] *= inv;
		} else {
			float ls = (float)log(s);
			for (size_t i = 0; i < J->n; i++)
				y[i * st] = x[i * st] - m - ls;
		}
	}
}

static int run_softmax(oq_kctx *k, int kind)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	float *yo = NULL, *xo = NULL;
	int64_t a = oq_k_int(k, "axis", k->opset >= 13 ? -1 : 1);
	int axis, rc;
	size_t lines;
	smjob J;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	/* opsets < 13 accept axis == rank (a [N, 1] coercion) */
	axis = k->opset < 13 && a == x->rank ? x->rank : oq_axis(a, x->rank);
	if (axis < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld out of range for rank %d", (long long)a, x->rank);
	memset(&J, 0, sizeof J);
	J.kind = kind;
	if (k->opset < 13) {
		J.n = oq_nn_prod(x->dims, axis, x->rank);
		J.inner = 1;
	} else {
		J.n = (size_t)x->dims[axis];
		J.inner = oq_nn_prod(x->dims, axis + 1, x->rank);
	}
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)))
		return rc;
	if (x->nelem == 0 || J.n == 0)
		return OQ_OK;
	lines = x->nelem / J.n;
	if ((rc = oq_nn_f32_in(k, x, 0, &J.x, &xo)))
		return rc;
	if ((rc = oq_nn_f32_buf(k, y, &J.y, &yo))) {
		free(xo);
		return rc;
	}
	J.vec = J.inner == 1 && kind != S_HARD && oq_vm_fast();
	oq_k_parallel(k, lines, J.n >= 1024 ? 1 : 1024 / J.n, sm_lines, &J);
	oq_nn_f32_out(y, yo);
	free(xo);
	return OQ_OK;
}

int oq_nn_softmax(oq_kctx *k)
{
	return run_softmax(k, S_SOFTMAX);
}

int oq_nn_logsoftmax(oq_kctx *k)
{
	return run_softmax(k, S_LOG);
}

int oq_nn_hardmax(oq_kctx *k)
{
	return run_softmax(k, S_HARD);
}
