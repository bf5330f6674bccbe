/*
 * norm.c - normalisation kernels: BatchNormalization (inference),
 * InstanceNormalization, LayerNormalization, RMSNormalization,
 * GroupNormalization (opset 18: scale/bias per group; 21: per channel),
 * LRN, MeanVarianceNormalization, LpNormalization.
 *
 * Moments are computed in double with two passes (mean, then the mean of
 * squared deviations), so large offsets do not cancel; the result is
 * rounded to float32 once. Work is split over independent rows (channels,
 * groups, normalised slices): no reduction is ever split across threads.
 */
#include "calib/kernels/nn/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * Normalises rows of `len` elements: y = (x - mean) * inv * scale + bias,
 * inv = 1 / sqrt(var + eps). The parameter index is the position in the row
 * (per_pos), the channel (cpg), or the row modulo nparam.
 */
typedef struct rowjob {
	const float *x;
	float *y;
	size_t len;            /* elements per normalised row */
	size_t sub;            /* elements per channel inside a row (with cpg) */
	const float *scale;    /* NULL: 1 */
	const float *bias;     /* NULL: 0 */
	size_t nparam;         /* per-row parameters: row r uses entry r % nparam */
	int per_pos;           /* scale/bias indexed by position inside the row (length len) */
	int rms;               /* RMS normalisation: no mean subtraction */
	size_t cpg;            /* GroupNormalization opset 21: channels per group (params per channel); 0 otherwise */
	double eps;
	float *mean_out, *inv_out; /* per-row statistics or NULL */
} rowjob;

static void norm_rows(void *ctx, size_t begin, size_t end)
{
	const rowjob *J = ctx;
	for (size_t r = begin; r < end; r++) {
		const float *x = J->x + r * J->len;
		float *y = J->y + r * J->len;
		double mean = 0, var = 0, inv;
		if (!J->rms) {
			for (size_t i = 0; i < J->len; i++)
				mean += x[i];
			mean = J->len ? mean / (double)J->len : 0;
		}
		for (size_t i = 0; i < J->len; i++) {
			double dv = x[i] - mean;
			var += dv * dv;
		}
		var = J->len ? var / (double)J->len : 0;
		inv = 1.0 / sqrt(var + J->eps);
		if (J->mean_out)
			J->mean_out[r] = (float)mean;
		if (J->inv_out)
			J->inv_out[r] = (float)inv;
		for (size_t i = 0; i < J->len; i++) {
			size_t pi = J->per_pos ? i : J->cpg ? (r % J->nparam) * J->cpg + i / J->sub : r % J->nparam;
			double s = J->scale ? J->scale[pi] : 1.0, b = J->bias ? J->bias[pi] : 0.0;
			y[i] = (float)((x[i] - mean) * inv * s + b);
		}
	}
}

/* ---------------------------------------------------------- BatchNormalization */

typedef struct bnjob {
	const float *x;
	float *y;
	const double *a, *b;   /* y = x * a[j] + b[j] */
	size_t P, L;           /* P parameter slots, each over L contiguous elements */
} bnjob;

static void bn_rows(void *ctx, size_t begin, size_t end)
{
	const bnjob *J = ctx;
	for (size_t r = begin; r < end; r++) {
		size_t j = r % J->P;
		const float *x = J->x + r * J->L;
		float *y = J->y + r * J->L;
		double a = J->a[j], b = J->b[j];
		for (size_t i = 0; i < J->L; i++)
			y[i] = (float)(x[i] * a + b);
	}
}

int oq_nn_batchnorm(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	float *sc = NULL, *bi = NULL, *mu = NULL, *va = NULL, *yo = NULL, *xo = NULL;
	double *ab = NULL;
	size_t ns, nb, nm, nv, C, inner;
	const float *xf;
	bnjob J;
	int rc;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input X is missing");
	if (k->opset >= 14 && oq_k_int(k, "training_mode", 0))
		return oq_k_err(k, OQ_EUNSUP, "training_mode=1 is not supported (inference only): export the model "
					      "in eval mode");
	for (size_t i = 1; i < k->n_out; i++)
		if (k->node->outputs[i])
			return oq_k_err(k, OQ_EUNSUP,
					"output #%zu (running or saved statistics) exists only in training mode, which "
					"is not supported (inference only)",
					i);
	if (x->rank < 2)
		return oq_k_err(k, OQ_EINVAL, "input X must have rank >= 2, got %d", x->rank);
	C = (size_t)x->dims[1];
	inner = oq_nn_prod(x->dims, 2, x->rank);
	memset(&J, 0, sizeof J);
	if ((rc = oq_nn_params(k, oq_k_in(k, 1), "scale", &sc, &ns)) ||
	    (rc = oq_nn_params(k, oq_k_in(k, 2), "B", &bi, &nb)) ||
	    (rc = oq_nn_params(k, oq_k_in(k, 3), "mean", &mu, &nm)) ||
	    (rc = oq_nn_params(k, oq_k_in(k, 4), "var", &va, &nv)))
		goto done;
	/* spatial=0 (opsets 1-8): one parameter per element of X.shape[1:] */
	if (ns == C * inner && ns != C && k->opset < 9 && oq_k_int(k, "spatial", 1) == 0) {
		J.P = C * inner;
		J.L = 1;
	} else {
		J.P = C;
		J.L = inner;
	}
	if (ns != J.P || nb != J.P || nm != J.P || nv != J.P) {
		rc = oq_k_err(k, OQ_EINVAL, "scale/B/mean/var have %zu/%zu/%zu/%zu elements, want %zu", ns, nb, nm, nv,
			      J.P);
		goto done;
	}
	if (!(ab = malloc(2 * J.P * sizeof *ab + 1))) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto done;
	}
	{
		double eps = oq_k_float(k, "epsilon", 1e-5f);
		for (size_t j = 0; j < J.P; j++) {
			ab[j] = sc[j] / sqrt((double)va[j] + eps);
			ab[J.P + j] = bi[j] - mu[j] * ab[j];
		}
	}
	J.a = ab;
	J.b = ab + J.P;
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)) || (rc = oq_nn_f32_in(k, x, 0, &xf, &xo)) ||
	    (rc = oq_nn_f32_buf(k, y, &J.y, &yo)))
		goto done;
	J.x = xf;
	{
		size_t rows = (size_t)x->dims[0] * J.P;
		oq_k_parallel(k, rows, J.L >= 4096 ? 1 : 4096 / (J.L + 1), bn_rows, &J);
	}
	oq_nn_f32_out(y, yo);
	yo = NULL;
done:
	free(yo);
	free(xo);
	free(ab);
	free(sc);
	free(bi);
	free(mu);
	free(va);
	return rc;
}

/* ---------------------------------------------------------- InstanceNormalization */

int oq_nn_instancenorm(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	float *sc = NULL, *bi = NULL, *yo = NULL, *xo = NULL;
	size_t ns, nb;
	const float *xf;
	rowjob J;
	int rc;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input X is missing");
	if (x->rank < 3)
		return oq_k_err(k, OQ_EINVAL, "input must have rank >= 3 (N, C, spatial...), got %d", x->rank);
	memset(&J, 0, sizeof J);
	if ((rc = oq_nn_params(k, oq_k_in(k, 1), "scale", &sc, &ns)) ||
	    (rc = oq_nn_params(k, oq_k_in(k, 2), "B", &bi, &nb)))
		goto done;
	if (ns != (size_t)x->dims[1] || nb != (size_t)x->dims[1]) {
		rc = oq_k_err(k, OQ_EINVAL, "scale/B have %zu/%zu elements, want C = %lld", ns, nb,
			      (long long)x->dims[1]);
		goto done;
	}
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)) || (rc = oq_nn_f32_in(k, x, 0, &xf, &xo)) ||
	    (rc = oq_nn_f32_buf(k, y, &J.y, &yo)))
		goto done;
	J.x = xf;
	J.len = oq_nn_prod(x->dims, 2, x->rank);
	J.scale = sc;
	J.bias = bi;
	J.nparam = ns ? ns : 1;
	J.eps = oq_k_float(k, "epsilon", 1e-5f);
	oq_k_parallel(k, (size_t)(x->dims[0] * x->dims[1]), J.len >= 2048 ? 1 : 2048 / (J.len + 1), norm_rows, &J);
	oq_nn_f32_out(y, yo);
	yo = NULL;
done:
	free(yo);
	free(xo);
	free(sc);
	free(bi);
	return rc;
}

/* ---------------------------------------------------------- LayerNormalization / RMSNormalization */

/*
 * Expands parameter t (unidirectionally broadcastable to dims[axis..rank)) into
 * `len` floats in row-major order of the normalised shape.
 */
static int expand_param(oq_kctx *k, const oq_rt *t, const char *what, const oq_rt *x, int axis, size_t len,
			float **out)
{
	int nr = x->rank - axis;
	float *v = NULL;
	size_t n;
	int rc;

	*out = NULL;
	if (!t)
		return OQ_OK;
	if (t->rank > nr)
		return oq_k_err(k, OQ_EINVAL, "%s has rank %d, above the %d normalised dims", what, t->rank, nr);
	for (int i = 0; i < t->rank; i++) {
		int64_t want = x->dims[x->rank - t->rank + i];
		if (t->dims[i] != want && t->dims[i] != 1)
			return oq_k_err(k, OQ_EINVAL, "%s dim %d is %lld, not broadcastable to %lld", what, i,
					(long long)t->dims[i], (long long)want);
	}
	if ((rc = oq_nn_params(k, t, what, &v, &n)))
		return rc;
	if (n == len) {
		*out = v;
		return OQ_OK;
	}
	if (!(*out = malloc(len * sizeof **out + 1))) {
		free(v);
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < len; i++) {
		size_t rem = i, src = 0, stride = 1;
		for (int d = x->rank - 1; d >= axis; d--) {
			size_t c = rem % (size_t)x->dims[d];
			int td = d - (x->rank - t->rank);
			rem /= (size_t)x->dims[d];
			if (td >= 0) {
				if (t->dims[td] != 1)
					src += c * stride;
				stride *= (size_t)t->dims[td];
			}
		}
		(*out)[i] = v[src];
	}
	free(v);
	return OQ_OK;
}

static int run_layernorm(oq_kctx *k, int rms)
{
	oq_rt *x = oq_k_in(k, 0), *y, *mo = NULL, *io = NULL;
	float *sc = NULL, *bi = NULL, *yo = NULL, *xo = NULL;
	const float *xf;
	int64_t sd[OQ_RT_MAX_RANK];
	int axis, stash, rc;
	size_t outer;
	rowjob J;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input X is missing");
	axis = oq_axis(oq_k_int(k, "axis", -1), x->rank);
	if (axis < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld out of range for rank %d", (long long)oq_k_int(k, "axis", -1),
				x->rank);
	stash = (int)oq_k_int(k, "stash_type", OQ_DT_FLOAT);
	if (!oq_nn_is_float(stash))
		return oq_k_err(k, OQ_EINVAL, "stash_type %d is not a float type", stash);
	memset(&J, 0, sizeof J);
	J.len = oq_nn_prod(x->dims, axis, x->rank);
	outer = oq_nn_prod(x->dims, 0, axis);
	if (!oq_k_in(k, 1)) {
		rc = oq_k_err(k, OQ_EINVAL, "input Scale is missing");
		goto done;
	}
	if ((rc = expand_param(k, oq_k_in(k, 1), "Scale", x, axis, J.len, &sc)) ||
	    (!rms && (rc = expand_param(k, oq_k_in(k, 2), "B", x, axis, J.len, &bi))))
		goto done;
	for (int i = 0; i < x->rank; i++)
		sd[i] = i < axis ? x->dims[i] : 1;
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)))
		goto done;
	if (!rms && k->n_out > 1 && k->node->outputs[1] && (rc = oq_k_output(k, 1, stash, x->rank, sd, &mo)))
		goto done;
	if (!rms && k->n_out > 2 && k->node->outputs[2] && (rc = oq_k_output(k, 2, stash, x->rank, sd, &io)))
		goto done;
	if ((rc = oq_nn_f32_in(k, x, 0, &xf, &xo)) || (rc = oq_nn_f32_buf(k, y, &J.y, &yo)))
		goto done;
	J.x = xf;
	J.scale = sc;
	J.bias = bi;
	J.per_pos = 1;
	J.nparam = 1;
	J.rms = rms;
	J.eps = oq_k_float(k, "epsilon", 1e-5f);
	if (mo && !(J.mean_out = malloc(outer * sizeof(float) + 1)))
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
	if (io && !(J.inv_out = malloc(outer * sizeof(float) + 1)))
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
	if (rc)
		goto done;
	oq_k_parallel(k, outer, J.len >= 2048 ? 1 : 2048 / (J.len + 1), norm_rows, &J);
	oq_nn_f32_out(y, yo);
	yo = NULL;
	for (size_t r = 0; r < outer; r++) {
		if (mo)
			oq_nn_setf(mo, r, J.mean_out[r]);
		if (io)
			oq_nn_setf(io, r, J.inv_out[r]);
	}
done:
	free(J.mean_out);
	free(J.inv_out);
	free(yo);
	free(xo);
	free(sc);
	free(bi);
	return rc;
}

int oq_nn_layernorm(oq_kctx *k)
{
	return run_layernorm(k, 0);
}

int oq_nn_rmsnorm(oq_kctx *k)
{
	return run_layernorm(k, 1);
}

/* ---------------------------------------------------------- GroupNormalization */

int oq_nn_groupnorm(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	float *sc = NULL, *bi = NULL, *yo = NULL, *xo = NULL;
	const float *xf;
	size_t ns, nb, C, G, want;
	int64_t g = oq_k_int(k, "num_groups", 0);
	rowjob J;
	int rc;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input X is missing");
	if (x->rank < 2)
		return oq_k_err(k, OQ_EINVAL, "input must have rank >= 2, got %d", x->rank);
	C = (size_t)x->dims[1];
	if (g < 1 || (size_t)g > C || C % (size_t)g)
		return oq_k_err(k, OQ_EINVAL, "num_groups %lld must be positive and divide C = %zu", (long long)g, C);
	G = (size_t)g;
	memset(&J, 0, sizeof J);
	if ((rc = oq_nn_params(k, oq_k_in(k, 1), "scale", &sc, &ns)) ||
	    (rc = oq_nn_params(k, oq_k_in(k, 2), "bias", &bi, &nb)))
		goto done;
	/* opset 18 gave one scale/bias per group; opset 21 fixed it to one per channel */
	want = k->opset >= 21 ? C : G;
	if (ns != want || nb != want) {
		rc = oq_k_err(k, OQ_EINVAL, "scale/bias have %zu/%zu elements; opset %lld needs %zu (%s)", ns, nb,
			      (long long)k->opset, want, k->opset >= 21 ? "one per channel" : "one per group");
		goto done;
	}
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)) || (rc = oq_nn_f32_in(k, x, 0, &xf, &xo)) ||
	    (rc = oq_nn_f32_buf(k, y, &J.y, &yo)))
		goto done;
	J.x = xf;
	J.sub = oq_nn_prod(x->dims, 2, x->rank);
	J.len = C / G * J.sub;
	J.scale = sc;
	J.bias = bi;
	J.eps = oq_k_float(k, "epsilon", 1e-5f);
	J.nparam = G;
	if (k->opset >= 21)
		J.cpg = C / G; /* row r = (n, group r % G) covers channels (r % G) * C/G + i / sub */
	oq_k_parallel(k, (size_t)x->dims[0] * G, J.len >= 2048 ? 1 : 2048 / (J.len + 1), norm_rows, &J);
	oq_nn_f32_out(y, yo);
	yo = NULL;
done:
	free(yo);
	free(xo);
	free(sc);
	free(bi);
	return rc;
}

/* ---------------------------------------------------------- LRN */

typedef struct lrnjob {
	const float *x;
	float *y;
	size_t C, plane;
	int64_t lo, hi;        /* channel window [c - lo, c + hi] */
	double alpha_n, beta, bias;
} lrnjob;

/* Item = one (n, c) plane; the window sum runs over channels of the same n. */
static void lrn_planes(void *ctx, size_t begin, size_t end)
{
	const lrnjob *J = ctx;
	for (size_t r = begin; r < end; r++) {
		size_t n = r / J->C;
		int64_t c = (int64_t)(r % J->C);
		int64_t c0 = c - J->lo < 0 ? 0 : c - J->lo, c1 = c + J->hi >= (int64_t)J->C ? (int64_t)J->C - 1 : c + J->hi;
		const float *xn = J->x + n * J->C * J->plane;
		float *y = J->y + r * J->plane;
		for (size_t i = 0; i < J->plane; i++) {
			double sq = 0;
			for (int64_t cc = c0; cc <= c1; cc++) {
				double v = xn[(size_t)cc * J->plane + i];
				sq += v * v;
			}
			y[i] = (float)(xn[(size_t)c * J->plane + i] / pow(J->bias + J->alpha_n * sq, J->beta));
		}
	}
}

int oq_nn_lrn(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	float *yo = NULL, *xo = NULL;
	const float *xf;
	int64_t size = oq_k_int(k, "size", 0);
	lrnjob J;
	int rc;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input X is missing");
	if (x->rank < 3)
		return oq_k_err(k, OQ_EINVAL, "input must have rank >= 3 (N, C, spatial...), got %d", x->rank);
	if (size < 1 || size > INT32_MAX)
		return oq_k_err(k, OQ_EINVAL, "size must be a positive integer, got %lld", (long long)size);
	memset(&J, 0, sizeof J);
	J.C = (size_t)x->dims[1];
	J.plane = oq_nn_prod(x->dims, 2, x->rank);
	J.lo = (size - 1) / 2;
	J.hi = size - 1 - J.lo;
	J.alpha_n = (double)oq_k_float(k, "alpha", 1e-4f) / (double)size;
	J.beta = oq_k_float(k, "beta", 0.75f);
	J.bias = oq_k_float(k, "bias", 1.0f);
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)) || (rc = oq_nn_f32_in(k, x, 0, &xf, &xo)))
		return rc;
	if ((rc = oq_nn_f32_buf(k, y, &J.y, &yo))) {
		free(xo);
		return rc;
	}
	J.x = xf;
	oq_k_parallel(k, (size_t)x->dims[0] * J.C, J.plane >= 1024 ? 1 : 1024 / (J.plane + 1), lrn_planes, &J);
	oq_nn_f32_out(y, yo);
	free(xo);
	return OQ_OK;
}

/* ---------------------------------------------------------- MeanVarianceNormalization */

typedef struct mvnjob {
	const oq_nn_rplan *p;
	const size_t *off;     /* offsets of the reduced elements relative to the base */
	const float *x;
	float *y;
} mvnjob;

/* y = (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9), the opset-13 function body. */
static void mvn_rows(void *ctx, size_t begin, size_t end)
{
	const mvnjob *J = ctx;
	size_t n = J->p->n_red;
	for (size_t o = begin; o < end; o++) {
		size_t base = oq_nn_rplan_base(J->p, o);
		double mean = 0, var = 0, den;
		for (size_t i = 0; i < n; i++)
			mean += J->x[base + J->off[i]];
		mean /= (double)n;
		for (size_t i = 0; i < n; i++) {
			double d = J->x[base + J->off[i]] - mean;
			var += d * d;
		}
		var /= (double)n;
		den = sqrt(var) + 1e-9;
		for (size_t i = 0; i < n; i++)
			J->y[base + J->off[i]] = (float)((J->x[base + J->off[i]] - mean) / den);
	}
}

int oq_nn_mvn(oq_kctx *k)
{
	static const int64_t dflt[] = {0, 2, 3};
	oq_rt *x = oq_k_in(k, 0), *y;
	const int64_t *axes;
	size_t na = oq_k_ints(k, "axes", &axes);
	unsigned char mask[OQ_RT_MAX_RANK];
	float *yo = NULL, *xo = NULL;
	size_t *off = NULL;
	oq_nn_rplan p;
	mvnjob J;
	int rc;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input X is missing");
	if (!axes) {
		axes = dflt;
		na = 3;
	}
	memset(mask, 0, sizeof mask);
	for (size_t i = 0; i < na; i++) {
		int a = oq_axis(axes[i], x->rank);
		if (a < 0 || mask[a])
			return oq_k_err(k, OQ_EINVAL, "axes[%zu] = %lld is out of range or repeated for rank %d", i,
					(long long)axes[i], x->rank);
		mask[a] = 1;
	}
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)))
		return rc;
	if (x->nelem == 0)
		return OQ_OK;
	oq_nn_rplan_init(&p, x->rank, x->dims, mask);
	if (!(off = malloc(p.n_red * sizeof *off)))
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	oq_nn_rplan_offsets(&p, 0, off);
	memset(&J, 0, sizeof J);
	if ((rc = oq_nn_f32_in(k, x, 0, &J.x, &xo)) || (rc = oq_nn_f32_buf(k, y, &J.y, &yo)))
		goto done;
	J.p = &p;
	J.off = off;
	oq_k_parallel(k, p.n_out, p.n_red >= 2048 ? 1 : 2048 / (p.n_red + 1), mvn_rows, &J);
	oq_nn_f32_out(y, yo);
	yo = NULL;
done:
	free(yo);
	free(xo);
	free(off);
	return rc;
}

/* ---------------------------------------------------------- LpNormalization */

typedef struct lpjob {
	const float *x;
	float *y;
	size_t n, inner;
	int p;
} lpjob;

/* Item = (outer, inner) line along the axis; a zero norm gives zeros (as ONNX Runtime). */
static void lp_lines(void *ctx, size_t begin, size_t end)
{
	const lpjob *J = ctx;
	for (size_t r = begin; r < end; r++) {
		size_t base = (r / J->inner) * J->n * J->inner + r % J->inner;
		double s = 0;
		for (size_t i = 0; i < J->n; i++) {
			double v = J->x[base + i * J->inner];
			s += J->p == 1 ? fabs(v) : v * v;
		}
		if (J->p == 2)
			s = sqrt(s);
		for (size_t i = 0; i < J->n; i++)
			J->y[base + i * J->inner] = s != 0 ? (float)(J->x[base + i * J->inner] / s) : 0.0f;
	}
}

int oq_nn_lpnorm(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	float *yo = NULL, *xo = NULL;
	int64_t p = oq_k_int(k, "p", 2);
	int axis, rc;
	lpjob J;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input X is missing");
	if (p != 1 && p != 2)
		return oq_k_err(k, OQ_EINVAL, "p must be 1 or 2, got %lld", (long long)p);
	axis = oq_axis(oq_k_int(k, "axis", -1), x->rank);
	if (axis < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld out of range for rank %d", (long long)oq_k_int(k, "axis", -1),
				x->rank);
	memset(&J, 0, sizeof J);
	J.p = (int)p;
	J.n = (size_t)x->dims[axis];
	J.inner = oq_nn_prod(x->dims, axis + 1, x->rank);
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)) || (rc = oq_nn_f32_in(k, x, 0, &J.x, &xo)))
		return rc;
	if ((rc = oq_nn_f32_buf(k, y, &J.y, &yo))) {
		free(xo);
		return rc;
	}
	oq_k_parallel(k, oq_nn_prod(x->dims, 0, axis) * J.inner, J.n >= 1024 ? 1 : 1024 / (J.n + 1), lp_lines, &J);
	oq_nn_f32_out(y, yo);
	free(xo);
	return OQ_OK;
}
