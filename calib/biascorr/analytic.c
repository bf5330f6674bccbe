/*
 * analytic.c - empirical bias correction (--bias-correction).
 *
 *   Conv(x, W, B)              ==>  Conv(x, W, B - shift)          (B created when absent)
 *   ConvTranspose(x, W, B)     ==>  ConvTranspose(x, W, B - shift)
 *   Gemm(A, W, C)              ==>  Gemm(A, W, C - shift / beta)   (C created when absent)
 *   MatMul(x, W) -> Add(., c)  ==>  MatMul(x, W) -> Add(., c - shift)
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
 *
 * A MatMul has no bias input: its correction goes into the constant of an
 * Add that is the only reader of its output (the bias Add of exported
 * Linear layers), when that constant broadcasts along the last axis only;
 * otherwise the MatMul is skipped (an inserted Add would get its own
 * activation Q/DQ, which costs more than the shift). Biases read by other
 * nodes too are copied, never changed under them (oq_pass_set_const).
 */
#include "calib/biascorr/analytic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/quantize/qweight.h"

int oq_bias_correct_plan(oq_graph *g, const oq_opts *o, oq_bc_stats *s, oq_diag *d)
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

/* Layer output channels and the shift of each (shift[M], caller-sized by out_channels). */
static size_t out_channels(const oq_node *n, const oq_tensor *w)
{
	if (n->op == OQ_OP_Conv)
		return (size_t)w->dims[0];
	if (n->op == OQ_OP_ConvTranspose)
		return (size_t)(w->dims[1] * oq_node_attr_int(n, "group", 1));
	if (n->op == OQ_OP_Gemm && oq_node_attr_int(n, "transB", 0))
		return (size_t)w->dims[0];
	return (size_t)w->dims[1];
}

/* dW[j] = W_q[j] - W[j], in double (no dW array: it would be the weight's size in doubles). */
#define DW(j) ((double)wq[j] - (double)wf[j])

/* shift[M] from W_q, W (w's layout) and the layer's sums; 0 when the shapes do not fit. */
static int shift_of(const oq_bc_layer *l, const oq_tensor *w, const float *wq, const float *wf, double *shift,
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

/* The Add that alone reads a MatMul's output, and the index of its constant input; NULL if none. */
static oq_node *bias_add(const oq_graph *g, const oq_node *mm, size_t M, int *bidx)
{
	const oq_value *y = mm->n_outputs ? mm->outputs[0] : NULL;
	oq_node *a;
	const oq_tensor *c;

	if (!y || y->n_uses != 1 || (y->flags & OQ_V_OUTPUT) || oq_value_n_captures(y))
		return NULL;
	a = y->uses[0].node;
	if (a->dead || a->op != OQ_OP_Add || oq_domain_of(a->domain) != OQ_DOM_ONNX || a->n_inputs != 2 ||
	    a->inputs[0] == a->inputs[1])
		return NULL;
	*bidx = y->uses[0].index == 0 ? 1 : 0;
	if (!a->inputs[*bidx] || a->inputs[*bidx]->graph != g || !(c = a->inputs[*bidx]->init) ||
	    (a->inputs[*bidx]->flags & OQ_V_INPUT) || c->dtype != OQ_DT_FLOAT)
		return NULL;
	/* broadcasts along the last axis only: [..1.., M] or [..1.., 1] */
	for (int k = 0; k + 1 < c->rank; k++)
		if (c->dims[k] != 1)
			return NULL;
	if (c->rank && c->dims[c->rank - 1] != 1 && (size_t)c->dims[c->rank - 1] != M)
		return NULL;
	return a;
}

/*
 * Where layer n's correction goes: input *bidx of *tgt (n itself, or a
 * MatMul's bias Add), scaled by *f (1 / beta for a Gemm), the bias there
 * now being *old (NULL: none yet). Returns why it cannot take one, or NULL.
 */
static const char *target(const oq_graph *g, oq_node *n, size_t M, oq_node **tgt, size_t *bidx, double *f,
			  const oq_tensor **old)
{
	*tgt = n;
	*bidx = 2;
	*f = 1;
	*old = NULL;
	if (n->op == OQ_OP_Gemm) {
		const oq_attr *b = oq_node_attr(n, "beta");
		*f = b && b->type == OQ_ATTR_FLOAT ? b->f : 1;
		if (*f == 0)
			return "beta is 0";
		*f = 1 / *f;
	}
	if (n->op == OQ_OP_MatMul) {
		int bi;
		if (!(*tgt = bias_add(g, n, M, &bi)))
			return "no bias Add with a constant reads its output";
		*bidx = (size_t)bi;
	}
	if (*bidx < (*tgt)->n_inputs && (*tgt)->inputs[*bidx]) {
		const oq_value *bv = (*tgt)->inputs[*bidx];
		*old = bv->graph == g && !(bv->flags & OQ_V_INPUT) ? bv->init : NULL;
		if (!*old || (*old)->dtype != OQ_DT_FLOAT)
			return "its bias is not a float32 constant";
		if ((*old)->nelem != 1 && !((*old)->rank >= 1 && (size_t)(*old)->dims[(*old)->rank - 1] == M))
			return "its bias does not broadcast along the output channels";
	}
	return NULL;
}

/*
 * new[j] = old[j] - shift[j % M] * f for a constant of dims that broadcasts to
 * [..., M] (last dim M, or all ones: widened to last dim M).
 */
static int fold(oq_graph *g, oq_node *n, size_t idx, const char *base, const oq_tensor *old, const double *shift,
		size_t M, double f)
{
	int64_t dims[OQ_MAX_RANK];
	int rank = old && old->rank ? old->rank : 1;
	size_t cnt = 1;
	float *nb, *ob = old ? oq_tensor_to_floats(old) : NULL;
	int rc;

	if (old && !ob)
		return OQ_ENOMEM;
	for (int k = 0; k < rank; k++) {
		dims[k] = old && old->rank ? old->dims[k] : 1;
		if (k + 1 == rank)
			dims[k] = (int64_t)M;
		cnt *= (size_t)dims[k]; /* at most old->nelem * M, both in memory */
	}
	if (!(nb = malloc(cnt * sizeof *nb))) {
		free(ob);
		return OQ_ENOMEM;
	}
	for (size_t j = 0; j < cnt; j++) {
		double o = !ob ? 0 : old->nelem == cnt ? ob[j] : ob[0];
		nb[j] = (float)(o - shift[j % M] * f);
	}
	rc = oq_pass_set_const(g, n, idx, base, rank, dims, nb);
	free(nb);
	free(ob);
	return rc;
}

int oq_bias_correct(oq_graph *g, const oq_opts *o, const oq_bc_stats *s, FILE *log, oq_diag *d)
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
		const oq_bc_layer *l = &s->v[i];
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
		M = out_channels(n, w);
		if (l->failed || !l->count) {
			why = l->failed ? "its input did not fit the statistics (not float32 or bad shape)"
					: "no calibration data reached it";
			goto next;
		}
		if ((why = target(g, n, M, &tgt, &bidx, &f, &old)))
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
		if ((rc = fold(g, tgt, bidx, base, old, shift, M, f))) {
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

/* ---- empirical mode: corrections measured on the quantized model (calib/biascorr/measure.c) ---- */

oq_node *oq_bias_correct_node(oq_graph *g, const char *name)
{
	oq_value *v = oq_graph_value(g, name);
	return v && v->producer && !v->producer->dead && v->producer_index == 0 ? v->producer : NULL;
}

int oq_bias_correct_targets(oq_graph *g, const oq_opts *o, oq_bce *b, oq_diag *d)
{
	oq_wplan *p = NULL;
	size_t np = 0;
	int rc;

	memset(b, 0, sizeof *b);
	if ((rc = oq_quantize_weight_plans(g, o, &p, &np, d)))
		return rc;
	if ((rc = oq_graph_rebuild_uses(g)) || (np && !(b->v = oq_calloc(np, sizeof *b->v)))) {
		free(p);
		return oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
	}
	for (size_t i = 0; i < np; i++) {
		oq_node *n = p[i].node, *tgt;
		oq_bce_layer *l = &b->v[b->n];
		const oq_tensor *w = n->inputs[p[i].w_idx]->init, *old;
		const char *why;
		size_t M, bidx;
		double f;

		if (n->op != OQ_OP_Conv && n->op != OQ_OP_ConvTranspose && n->op != OQ_OP_Gemm &&
		    n->op != OQ_OP_MatMul)
			continue;
		M = out_channels(n, w);
		if (!n->n_outputs || !n->outputs[0])
			why = "it has no output";
		else
			why = target(g, n, M, &tgt, &bidx, &f, &old);
		if (why) {
			if (o->log)
				fprintf(o->log, "bias correction: node '%s' (%s) skipped: %s\n", n->name,
					n->op_type, why);
			continue;
		}
		l->node = oq_strdup(n->outputs[0]->name);
		l->measured = oq_strdup(tgt->outputs[0] ? tgt->outputs[0]->name : "");
		l->ch_last = n->op == OQ_OP_Gemm || n->op == OQ_OP_MatMul;
		l->M = M;
		l->corr = oq_calloc(M ? M : 1, sizeof *l->corr);
		l->sum_f = oq_calloc(M ? OQ_BCE_FOLDS * M : 1, sizeof *l->sum_f);
		l->sum_q = oq_calloc(M ? OQ_BCE_FOLDS * M : 1, sizeof *l->sum_q);
		b->n++;
		if (!l->node || !l->measured || !l->corr || !l->sum_f || !l->sum_q) {
			free(p);
			return oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
		}
	}
	free(p);
	return OQ_OK;
}

int oq_bias_correct_apply(oq_graph *g, const oq_bce *b, oq_diag *d)
{
	int rc;

	if ((rc = oq_graph_rebuild_uses(g)))
		return oq_err(d, rc, "bias correction: out of memory");
	for (size_t i = 0; i < b->n; i++) {
		const oq_bce_layer *l = &b->v[i];
		oq_node *n = oq_bias_correct_node(g, l->node), *tgt;
		const oq_tensor *old;
		size_t bidx, m;
		double f;
		char base[256];

		for (m = 0; m < l->M && l->corr[m] == 0; m++)
			;
		if (m == l->M)
			continue;
		if (!n || target(g, n, l->M, &tgt, &bidx, &f, &old))
			return oq_err(d, OQ_EINVAL, "bias correction: layer writing '%s' is no longer correctable "
				      "(internal error)", l->node);
		snprintf(base, sizeof base, "%.200s_bias", l->node);
		if ((rc = fold(g, tgt, bidx, base, old, l->corr, l->M, f)))
			return oq_err(d, rc, "bias correction: node '%s' (%s): out of memory", n->name, n->op_type);
	}
	return OQ_OK;
}
