/*
 * analytic.c - analytic bias correction (--bias-correction=analytic): the
 * mean output shift weight quantization causes, computed from input sums
 * collected during calibration (sums.c), folded into each layer's bias
 * before the quantize pass (fold.h shows where each op's correction goes).
 *
 * Quantizing W to W_q (the grid the quantize pass uses: oq_weight_fake_quantize
 * with the pass's own weight spec, oq_quantize_weight_plans) moves the mean of
 * output channel o over the calibration data by
 *     shift[o] = E[layer(x, W_q) - layer(x, W)][o] = E[layer(x, dW)][o],  dW = W_q - W,
 * the layer being linear in W (the bias cancels). With the sums S and count N
 * of calib/biascorr/tables.h:
 *   Conv           shift[m] = sum_{c in group(m), t} dW[m, c, t] S[g*C/G + c, t] / N
 *   ConvTranspose  shift[m] = sum_{c in group(m), t} dW[c, m - g*M/G, t] S[c, t] / N
 *   Gemm           shift[n] = alpha * sum_k op(dW)[k, n] S[k] / N
 *   MatMul         shift[n] = sum_k dW[k, n] S[k] / N
 * computed in double. Subtracting it makes the quantized layer's output mean
 * on the calibration inputs equal the float one's (before the bias itself is
 * rounded to int32, whose step s_x * s_w is far finer). The inputs are the
 * float model's, so upstream quantization error is not compensated.
 */
#include "calib/biascorr/analytic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/biascorr/fold.h"
#include "calib/biascorr/sums.h"
#include "passes/quantize/qweight.h"

int oq_bc_analytic_plan(oq_graph *g, const oq_opts *o, oq_bc_sums *s, oq_diag *d)
{
	oq_wplan *p = NULL;
	size_t n = 0, k = 0;
	int rc;

	memset(s, 0, sizeof *s);
	if ((rc = oq_quantize_weight_plans(g, o, &p, &n, d)))
		return rc;
	if (n && !(s->v = oq_calloc(n, sizeof *s->v))) {
		free(p);
		return oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		oq_op op = p[i].node->op;
		if (op != OQ_OP_Conv && op != OQ_OP_ConvTranspose && op != OQ_OP_Gemm && op != OQ_OP_MatMul)
			continue;
		s->v[k].node = p[i].node;
		s->v[k].w_idx = p[i].w_idx;
		k++;
	}
	s->n = k;
	free(p);
	return OQ_OK;
}

/* dW[j] = W_q[j] - W[j], in double (no dW array: it would be the weight's size in doubles). */
#define DW(j) ((double)wq[j] - (double)wf[j])

/* shift[M] from W_q, W (w's layout) and the layer's sums; 0 when the shapes do not fit. */
static int shift_of(const oq_bc_sums_layer *l, const oq_tensor *w, const float *wq, const float *wf, double *shift,
		    size_t M)
{
	const oq_node *n = l->node;
	const double *S = l->sum;
	double N = (double)l->count;

	memset(shift, 0, M * sizeof *shift);
	if (n->op == OQ_OP_Conv || n->op == OQ_OP_ConvTranspose) {
		size_t G = (size_t)oq_node_attr_int(n, "group", 1), ks = 1;
		for (int k = 2; k < w->rank; k++)
			ks *= (size_t)w->dims[k];
		if (n->op == OQ_OP_Conv) {
			size_t Cg = (size_t)w->dims[1], Mg = M / G;
			if (!G || M % G || Cg * G * ks != l->n_sum)
				return 0;
			for (size_t m = 0; m < M; m++) {
				const double *Sg = S + (m / Mg) * Cg * ks;
				size_t o = m * Cg * ks;
				double a = 0;
				for (size_t j = 0; j < Cg * ks; j++)
					a += DW(o + j) * Sg[j];
				shift[m] = a / N;
			}
		} else {
			size_t C = (size_t)w->dims[0], Mg = (size_t)w->dims[1], Cg;
			if (!G || C % G || C * ks != l->n_sum)
				return 0;
			Cg = C / G;
			for (size_t c = 0; c < C; c++)
				for (size_t ml = 0; ml < Mg; ml++) {
					const double *Sc = S + c * ks;
					size_t o = (c * Mg + ml) * ks;
					double a = 0;
					for (size_t t = 0; t < ks; t++)
						a += DW(o + t) * Sc[t];
					shift[(c / Cg) * Mg + ml] += a;
				}
			for (size_t m = 0; m < M; m++)
				shift[m] /= N;
		}
		return 1;
	}
	/* Gemm, MatMul */
	{
		int tb = n->op == OQ_OP_Gemm && oq_node_attr_int(n, "transB", 0);
		double alpha = 1;
		size_t K = l->n_sum;
		if (n->op == OQ_OP_Gemm) {
			const oq_attr *a = oq_node_attr(n, "alpha");
			if (a && a->type == OQ_ATTR_FLOAT)
				alpha = a->f;
		}
		if ((size_t)w->dims[tb ? 1 : 0] != K)
			return 0;
		for (size_t k = 0; k < K; k++)
			for (size_t m = 0; m < M; m++)
				shift[m] += (tb ? DW(m * K + k) : DW(k * M + m)) * S[k];
		for (size_t m = 0; m < M; m++)
			shift[m] *= alpha / N;
	}
	return 1;
}

int oq_bc_analytic_fold(oq_graph *g, const oq_opts *o, const oq_bc_sums *s, FILE *log, oq_diag *d)
{
	oq_wplan *p = NULL;
	size_t np = 0, ip = 0, n_done = 0, n_skip = 0;
	double worst = 0;
	const char *worst_name = "";
	int rc;

	if ((rc = oq_quantize_weight_plans(g, o, &p, &np, d)))
		return rc;
	if ((rc = oq_graph_rebuild_uses(g))) {
		free(p);
		return oq_err(d, rc, "bias correction: out of memory");
	}
	for (size_t i = 0; i < s->n; i++) {
		const oq_bc_sums_layer *l = &s->v[i];
		oq_node *n = l->node, *tgt = n;
		const oq_tensor *w, *old = NULL;
		const char *why = NULL;
		float *wq = NULL, *wf = NULL;
		double *shift = NULL, f = 1, mx = 0;
		size_t M, bidx = 2;
		char base[256];

		/* the spec the pass will use (plans are in node order, like s) */
		while (ip < np && p[ip].node != n)
			ip++;
		if (ip == np) {
			free(p);
			return oq_err(d, OQ_EINVAL, "bias correction: node '%s' (%s) is no longer planned for "
				      "quantization (internal error)", n->name, n->op_type);
		}
		w = n->inputs[l->w_idx]->init;
		M = oq_bc_out_channels(n, w);
		if (l->failed || !l->count) {
			why = l->failed ? "its input did not fit the statistics (not float32 or bad shape)"
					: "no calibration data reached it";
			goto next;
		}
		if ((why = oq_bc_bias_site(g, n, M, &tgt, &bidx, &f, &old)))
			goto next;
		wq = malloc(w->nelem * sizeof *wq);
		shift = oq_calloc(M ? M : 1, sizeof *shift);
		wf = oq_tensor_to_floats(w);
		if (!wq || !shift || !wf) {
			rc = oq_err(d, OQ_ENOMEM, "bias correction: node '%s' (%s): out of memory", n->name,
				    n->op_type);
			goto fail;
		}
		if ((rc = oq_weight_fake_quantize(w, &p[ip].spec, wq, d)))
			goto fail;
		if (!shift_of(l, w, wq, wf, shift, M)) {
			why = "its weight does not match the statistics";
			goto next;
		}
		for (size_t m = 0; m < M; m++) {
			if (!isfinite(shift[m])) {
				why = "the calibration inputs hold NaN or Inf";
				goto next;
			}
			mx = fmax(mx, fabs(shift[m]));
		}
		snprintf(base, sizeof base, "%.200s_bias", n->inputs[l->w_idx]->name);
		if ((rc = oq_bc_fold(g, tgt, bidx, base, old, shift, M, f))) {
			rc = oq_err(d, rc, "bias correction: node '%s' (%s): out of memory", n->name, n->op_type);
			goto fail;
		}
		n_done++;
		if (mx > worst) {
			worst = mx;
			worst_name = n->name;
		}
		if (o->log)
			fprintf(o->log, "bias correction: node '%s' (%s): max |shift| %.3g over %zu channels\n",
				n->name, n->op_type, mx, M);
next:
		if (why) {
			n_skip++;
			if (o->log)
				fprintf(o->log, "bias correction: node '%s' (%s) skipped: %s\n", n->name,
					n->op_type, why);
		}
		free(wq);
		free(wf);
		free(shift);
		continue;
fail:
		free(wq);
		free(wf);
		free(shift);
		free(p);
		return rc;
	}
	free(p);
	if (log)
		fprintf(log, "bias correction: %zu layers corrected, %zu skipped; largest |shift| %.3g ('%s')\n",
			n_done, n_skip, worst, worst_name);
	return OQ_OK;
}

/* ---- the pipeline's view (biascorr.h) ---- */

struct oq_biascorr_analytic {
	oq_bc_sums sums;             /* the layers and their input sums */
	oq_bc_collector *collector;  /* calibration's observer filling them */
};

int oq_biascorr_analytic_plan(oq_graph *g, const oq_opts *q, oq_calib_opts *co, oq_biascorr_analytic **out,
			      oq_diag *d)
{
	oq_biascorr_analytic *a = oq_calloc(1, sizeof *a);
	int rc;

	*out = NULL;
	if (!a)
		return oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
	if ((rc = oq_bc_analytic_plan(g, q, &a->sums, d)) || (rc = oq_bc_collector_new(g, &a->sums, &a->collector, d))) {
		oq_biascorr_analytic_free(a);
		return rc;
	}
	co->extra = oq_bc_observe;
	co->extra_ctx = a->collector;
	*out = a;
	return OQ_OK;
}

int oq_biascorr_analytic_fold(oq_biascorr_analytic *a, oq_graph *g, const oq_opts *q, FILE *log, oq_diag *d)
{
	return oq_bc_analytic_fold(g, q, &a->sums, log, d);
}

void oq_biascorr_analytic_free(oq_biascorr_analytic *a)
{
	if (!a)
		return;
	oq_bc_collector_free(a->collector);
	oq_bc_sums_free(&a->sums);
	free(a);
}
