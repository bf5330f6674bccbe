/*
 * empirical.c - empirical bias correction (the default with --calib DIR):
 * each layer's mean output shift is measured on the quantized model against
 * the float one over the calibration samples (measure.c), folded into the
 * float bias of a fresh copy (fold.h) that is quantized again with the same
 * ranges, in rounds; a round is kept only if it survives two-fold
 * cross-validation on the samples and improves their output SQNR (mean
 * up, min not down: tables.h's keep rule).
 *
 * The layers are found once, on the float model after the rewrites, and
 * named by their output (oq_bc_node_writing finds them again in every
 * fresh copy).
 */
#include "calib/biascorr/empirical.h"

#include <stdlib.h>
#include <string.h>

#include "calib/biascorr/fold.h"
#include "calib/biascorr/measure.h"
#include "passes/quantize/qweight.h"

int oq_bc_targets_find(oq_graph *g, const oq_opts *o, oq_bc_targets *b, oq_diag *d)
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
		oq_bc_target *l = &b->v[b->n];
		const oq_tensor *w = n->inputs[p[i].w_idx]->init, *old;
		const char *why;
		size_t M, bidx;
		double f;

		if (n->op != OQ_OP_Conv && n->op != OQ_OP_ConvTranspose && n->op != OQ_OP_Gemm &&
		    n->op != OQ_OP_MatMul)
			continue;
		M = oq_bc_out_channels(n, w);
		if (!n->n_outputs || !n->outputs[0])
			why = "it has no output";
		else
			why = oq_bc_bias_site(g, n, M, &tgt, &bidx, &f, &old);
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
		l->sum_f = oq_calloc(M ? OQ_BC_FOLDS * M : 1, sizeof *l->sum_f);
		l->sum_fp = oq_calloc(M ? OQ_BC_FOLDS * M : 1, sizeof *l->sum_fp);
		l->sum_q = oq_calloc(M ? OQ_BC_FOLDS * M : 1, sizeof *l->sum_q);
		b->n++;
		if (!l->node || !l->measured || !l->corr || !l->sum_f || !l->sum_fp || !l->sum_q) {
			free(p);
			return oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
		}
	}
	free(p);
	return OQ_OK;
}

int oq_bc_targets_apply(oq_graph *g, const oq_bc_targets *b, oq_diag *d)
{
	int rc;

	if ((rc = oq_graph_rebuild_uses(g)))
		return oq_err(d, rc, "bias correction: out of memory");
	for (size_t i = 0; i < b->n; i++) {
		const oq_bc_target *l = &b->v[i];
		oq_node *n = oq_bc_node_writing(g, l->node), *tgt;
		const oq_tensor *old;
		size_t bidx, m;
		double f;
		char base[256];

		for (m = 0; m < l->M && l->corr[m] == 0; m++)
			;
		if (m == l->M)
			continue;
		if (!n || oq_bc_bias_site(g, n, l->M, &tgt, &bidx, &f, &old))
			return oq_err(d, OQ_EINVAL, "bias correction: layer writing '%s' is no longer correctable "
				      "(internal error)", l->node);
		snprintf(base, sizeof base, "%.200s_bias", l->node);
		if ((rc = oq_bc_fold(g, tgt, bidx, base, old, l->corr, l->M, f)))
			return oq_err(d, rc, "bias correction: node '%s' (%s): out of memory", n->name, n->op_type);
	}
	return OQ_OK;
}

/*
 * A fresh copy with b's corrections folded into its biases, quantized;
 * nodes[i] (nodes may be NULL): the node measured for layer i (NULL when
 * not found). The nodes are resolved before the quantize pass, which
 * rewires but never removes the layers and their bias Adds.
 */
static int quantize_corrected(const oq_biascorr_models *mk, const oq_bc_targets *b, oq_model **out, oq_node **nodes,
			      oq_diag *d)
{
	int rc;

	if ((rc = mk->float_copy(mk->ctx, out, d)))
		return rc;
	if ((rc = oq_bc_targets_apply((*out)->graph, b, d)))
		goto fail;
	for (size_t i = 0; nodes && i < b->n; i++)
		nodes[i] = oq_bc_node_writing((*out)->graph, b->v[i].measured);
	if ((rc = mk->quantize(mk->ctx, *out, d)))
		goto fail;
	return OQ_OK;
fail:
	oq_model_free(*out);
	*out = NULL;
	return rc;
}

/*
 * diff[i][k * M + m]: layer i's measured mean shift of channel m, quantized
 * - float, on the samples of fold k (k < OQ_BC_FOLDS) or on all of them
 * (k = OQ_BC_FOLDS); 0 for a failed layer or an empty fold.
 */
static void take_diffs(const oq_bc_targets *b, double **diff)
{
	for (size_t i = 0; i < b->n; i++) {
		const oq_bc_target *l = &b->v[i];
		size_t M = l->M;
		for (size_t m = 0; m < M; m++) {
			double sf = 0, sq = 0;
			uint64_t nf = 0, nq = 0;
			for (size_t k = 0; k < OQ_BC_FOLDS; k++) {
				double a = l->sum_f[k * M + m], c = l->sum_q[k * M + m];
				diff[i][k * M + m] = l->failed || !l->n_f[k] || l->n_f[k] != l->n_q[k]
							     ? 0
							     : c / (double)l->n_q[k] - a / (double)l->n_f[k];
				sf += a;
				sq += c;
				nf += l->n_f[k];
				nq += l->n_q[k];
			}
			diff[i][OQ_BC_FOLDS * M + m] = l->failed || !nf || nf != nq ? 0 : sq / (double)nq - sf / (double)nf;
		}
	}
}

/* corr of layers [lo, hi) = saved + estimate k of diff (k = OQ_BC_FOLDS: all samples; -1: none). */
static void set_corr(oq_bc_targets *b, double **saved, double **diff, size_t lo, size_t hi, int k)
{
	for (size_t i = lo; i < hi; i++)
		for (size_t m = 0; m < b->v[i].M; m++)
			b->v[i].corr[m] = saved[i][m] + (k < 0 ? 0 : diff[i][(size_t)k * b->v[i].M + m]);
}

void oq_biascorr_shifts_free(oq_biascorr_shifts *s)
{
	for (size_t i = 0; s && i < s->n; i++) {
		free(s->v[i].layer);
		free(s->v[i].shift);
	}
	if (s) {
		free(s->v);
		s->v = NULL;
		s->n = 0;
	}
}

/*
 * The weight-shift round (biascorr.h): the layers of b that w names with the same channel
 * count take w's shifts as their corrections; the quantized model so corrected replaces *best
 * (and its SQNR *bs, its measured shifts diff) when it holds over all samples, else every
 * correction goes back to 0. *kept: 1 when it did, 0 when not, -1 when w names no layer of b.
 */
static int weights_round(oq_model *ref, const oq_biascorr_models *mk, const oq_opts *q, const oq_calib_opts *calib,
			 const oq_biascorr_shifts *w, oq_node **rn, oq_node **qn, oq_bc_targets *b,
			 oq_bc_float_cache *cache, double **diff, oq_model **best, oq_bc_sqnr *bs, int *kept, oq_diag *d)
{
	const unsigned all = (1u << OQ_BC_FOLDS) - 1;
	oq_model *cand = NULL;
	oq_bc_quantized run;
	size_t used = 0;
	double g, se;
	int rc;

	*kept = -1;
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < w->n; k++)
			if (w->v[k].M == b->v[i].M && !strcmp(w->v[k].layer, b->v[i].node)) {
				memcpy(b->v[i].corr, w->v[k].shift, b->v[i].M * sizeof *b->v[i].corr);
				used++;
				break;
			}
	if (!used)
		return OQ_OK;
	if ((rc = quantize_corrected(mk, b, &cand, qn, d)))
		return rc;
	run = (oq_bc_quantized){.qm = cand, .nodes = qn, .folds = all};
	if ((rc = oq_bc_measure(ref, rn, &run, 1, calib, b, cache, d))) {
		oq_model_free(cand);
		return rc;
	}
	*kept = oq_bc_sqnr_holds(&run.sqnr, bs, all);
	oq_bc_sqnr_gain(&run.sqnr, bs, all, &g, &se);
	if (q->log)
		fprintf(q->log, "bias correction: weight shifts of %zu layers (activations float): SQNR min %.2f mean "
			"%.2f dB (uncorrected %.2f / %.2f; gain %.2f +- %.2f): %s\n", used, oq_bc_sqnr_min(&run.sqnr, all),
			oq_bc_sqnr_mean(&run.sqnr, all), oq_bc_sqnr_min(bs, all), oq_bc_sqnr_mean(bs, all), g, se,
			*kept ? "kept" : "not kept");
	if (!*kept) {
		/* diff still holds the uncorrected model's shifts (the rounds read only diff) */
		oq_bc_sqnr_free(&run.sqnr);
		oq_model_free(cand);
		for (size_t i = 0; i < b->n; i++)
			memset(b->v[i].corr, 0, b->v[i].M * sizeof *b->v[i].corr);
		return OQ_OK;
	}
	take_diffs(b, diff);
	oq_model_free(*best);
	*best = cand;
	oq_bc_sqnr_free(bs);
	*bs = run.sqnr;
	return OQ_OK;
}

int oq_bc_probe = 1;
size_t oq_bc_probe_stops;

/* Round r's layers [*lo, *hi) of b (rounds forward groups over layers [0, n-1), then the last
 * layer alone). */
static void round_layers(const oq_bc_targets *b, int r, int rounds, size_t *lo, size_t *hi)
{
	size_t nf = b->n - 1;

	*lo = r < rounds ? nf * (size_t)r / (size_t)rounds : nf;
	*hi = r < rounds ? nf * (size_t)(r + 1) / (size_t)rounds : b->n;
}

/* Swaps each layer's float sums of all samples and of the probe samples. */
static void swap_probe_sums(oq_bc_targets *b)
{
	for (size_t i = 0; i < b->n; i++) {
		oq_bc_target *l = &b->v[i];
		double *t = l->sum_f;
		uint64_t n[OQ_BC_FOLDS];
		l->sum_f = l->sum_fp;
		l->sum_fp = t;
		memcpy(n, l->n_f, sizeof n);
		memcpy(l->n_f, l->n_fp, sizeof n);
		memcpy(l->n_fp, n, sizeof n);
	}
}

/*
 * run.from := what a candidate cand of the last layer's round reuses of base's run that kept
 * tail: tail itself when cand differs from base in initializers only (oq_bc_prefix_fits), else a
 * view of it (v: cand's nodes that differ from base's, as when the correction gives the layer
 * a bias it did not have, and what they reach); unchanged when neither applies.
 */
static int last_layer_from(const oq_bc_prefix *tail, const oq_model *base, const oq_model *cand,
			   oq_bc_prefix *v, oq_bc_quantized *run, oq_diag *d)
{
	int rc;

	if (oq_bc_prefix_fits(tail, base, cand)) {
		run->from = tail;
		return OQ_OK;
	}
	if ((rc = oq_bc_prefix_view(tail, base, cand, v, d)))
		return rc;
	if (v->state == 1)
		run->from = v;
	return OQ_OK;
}

/*
 * The probe (biascorr.h). First the float model on every sample, as the rounds start (cache
 * and float sums filled, and each layer's float sums of the probe samples, tables.h; a cache
 * left at state -1: *go 1, the rounds decide). Then, on the probe samples alone
 * (oq_bc_quantized.every), the uncorrected model `base` (its measured nodes qn) and each
 * round's fold candidates as the rounds would make them first (every correction 0 before),
 * the float outputs read from the cache. *go: 1 when some round's every fold candidate gains
 * more than OQ_BC_PROBE_MARGIN standard errors on the other fold's probe samples, or when at
 * most OQ_BC_PROBE_MIN samples are measured (the probe would be most of them: the rounds
 * decide); else 0, no round can pass. The float sums and the corrections end as the float
 * pass left them.
 */
static int probe(oq_model *ref, const oq_biascorr_models *mk, const oq_opts *q, const oq_calib_opts *calib,
		 int rounds, oq_node **rn, oq_node **qn, oq_model *base, oq_bc_targets *b, double **zero,
		 double **diff, oq_bc_float_cache *cache, int *go, oq_diag *d)
{
	const unsigned all = (1u << OQ_BC_FOLDS) - 1;
	oq_bc_prefix tail = {0};
	oq_bc_quantized run0 = {.qm = base, .nodes = qn, .folds = all, .every = OQ_BC_PROBE_EVERY, .keep = &tail};
	oq_model *cand = NULL;
	size_t np;
	int rc;

	*go = 1;
	if ((rc = oq_bc_measure(ref, rn, NULL, 0, calib, b, cache, d)))
		return rc;
	if (cache->state != 1 || cache->n <= OQ_BC_PROBE_MIN)
		return OQ_OK;
	/* the shifts of the probe samples: their float sums against base's on the same samples; the
	 * last layer's candidates run only what its bias reaches (as the rounds' do) */
	swap_probe_sums(b);
	if ((b->n && (rc = oq_bc_prefix_plan(base, qn + (b->n - 1), 1, &tail, d))) ||
	    (rc = oq_bc_measure(ref, rn, &run0, 1, calib, b, cache, d)))
		goto out;
	take_diffs(b, diff);
	for (size_t i = np = 0; i < cache->n; i++)
		np += (size_t)oq_bc_probe_sample(i);
	*go = 0;
	for (int r = 0; r <= rounds && !*go; r++) {
		size_t lo, hi;
		int pass = 1;
		round_layers(b, r, rounds, &lo, &hi);
		for (int k = 0; k < OQ_BC_FOLDS && pass && lo < hi; k++) {
			unsigned on = all & ~(1u << k);
			oq_bc_quantized run;
			oq_bc_prefix v = {.state = -1};
			double g, se;
			set_corr(b, zero, diff, lo, hi, k);
			rc = quantize_corrected(mk, b, &cand, NULL, d);
			set_corr(b, zero, diff, lo, hi, -1);
			if (rc)
				goto out;
			run = (oq_bc_quantized){.qm = cand, .folds = on, .every = OQ_BC_PROBE_EVERY};
			if (lo == b->n - 1 && hi == b->n)
				rc = last_layer_from(&tail, base, cand, &v, &run, d);
			if (!rc)
				rc = oq_bc_measure(ref, rn, &run, 1, calib, b, cache, d);
			oq_bc_prefix_free(&v);
			if (rc)
				goto out;
			oq_bc_sqnr_gain(&run.sqnr, &run0.sqnr, on, &g, &se);
			pass = g > OQ_BC_PROBE_MARGIN * se; /* NaN: no */
			if (q->log)
				fprintf(q->log, "bias correction: probe (%zu of %zu samples): round %d (layers %zu..%zu): "
					"fold %d's shift on the other samples: gain %.2f +- %.2f dB%s\n", np, cache->n,
					r + 1, lo, hi - 1, k, g, se, pass ? "" : ": cannot pass");
			oq_bc_sqnr_free(&run.sqnr);
			oq_model_free(cand);
			cand = NULL;
		}
		*go = pass && lo < hi;
	}
out:
	swap_probe_sums(b);
	oq_model_free(cand);
	oq_bc_sqnr_free(&run0.sqnr);
	oq_bc_prefix_free(&tail);
	return rc;
}

/*
 * The rounds (contract in biascorr.h; round 0 is the uncorrected model).
 * Round r adds the shifts measured on the best model so far to the
 * corrections of group r only, so a group is corrected after the layers
 * before it (correcting every layer at once counts an upstream shift twice:
 * in its own layer and again in every layer it reaches, which lowers the
 * SQNR). The last layer's shift is the whole model's mean output error,
 * whatever its cause.
 *
 * A round is kept only when its correction survives cross-validation and
 * improves the calibration SQNR (oq_bc_sqnr_better: mean up, min not
 * down): for each fold k (tables.h), the shifts measured on the
 * samples of fold k alone, applied the same way, must improve the SQNR on
 * the samples of the other folds; then the shifts of all samples (the
 * correction kept) must improve it on all samples, so it is never worse on
 * the calibration data. The in-sample check alone is biased: subtracting a
 * mean measured on the very samples judged always lowers their total
 * squared error, also when that mean is only the noise of a few samples.
 * The fold checks also want the mean per-sample gain above twice its
 * standard error (oq_bc_sqnr_holds): with a few samples per fold a small
 * gain is often chance, and held-out samples then lose. Corrections kept
 * in earlier rounds were estimated on all samples, so a later round's
 * folds both contain them.
 * The fold checks come first (a round that fails them costs no model on
 * all samples), and one candidate exists at a time besides the best model
 * so far (executors are most of the memory). A rejected round's group keeps
 * its previous correction.
 */
int oq_biascorr_empirical(oq_model *ref, const oq_biascorr_models *mk, const oq_opts *q, const oq_calib_opts *calib,
			  int rounds, const oq_biascorr_shifts *w, FILE *log, oq_model **out, oq_bc_float_cache *fout,
			  oq_diag *d)
{
	const unsigned all = (1u << OQ_BC_FOLDS) - 1;
	oq_bc_targets b = {0};
	oq_node **rn = NULL, **qn = NULL;
	double **diff = NULL, **saved = NULL;
	oq_model *best = NULL, *cand = NULL;
	oq_bc_quantized run0;
	oq_bc_sqnr bs = {0};
	oq_bc_float_cache cache = {0};
	oq_bc_prefix tail = {0};
	int kept = 0, wkept = -1;
	int rc;

	*out = NULL;
	if (rounds < 0)
		rounds = OQ_BC_ROUNDS;
	if ((rc = oq_bc_targets_find(ref->graph, q, &b, d)))
		goto out;
	rn = oq_calloc(b.n + 1, sizeof *rn);
	qn = oq_calloc(b.n + 1, sizeof *qn);
	diff = oq_calloc(b.n + 1, sizeof *diff);
	saved = oq_calloc(b.n + 1, sizeof *saved);
	if (!rn || !qn || !diff || !saved) {
		rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
		goto out;
	}
	for (size_t i = 0; i < b.n; i++) {
		rn[i] = oq_bc_node_writing(ref->graph, b.v[i].measured);
		if (!(diff[i] = oq_calloc((OQ_BC_FOLDS + 1) * b.v[i].M + 1, sizeof **diff)) ||
		    !(saved[i] = oq_calloc(b.v[i].M + 1, sizeof **saved))) {
			rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
			goto out;
		}
	}
	if ((rc = quantize_corrected(mk, &b, &best, qn, d)))
		goto out;
	/* the float model alone first (its outputs kept), then one quantized model at a time; the
	 * probe runs the float model as the rounds would, then a few samples: when no round can
	 * pass there, none is measured on all */
	if (oq_bc_probe && b.n && !(w && w->n)) {
		int go;
		if ((rc = probe(ref, mk, q, calib, rounds, rn, qn, best, &b, saved, diff, &cache, &go, d)))
			goto out;
		if (!go) {
			if (log)
				fprintf(log, "bias correction: %zu layers, %d forward groups + the last layer: no round "
					"gains on the probe samples, none measured on all\n", b.n, rounds);
			oq_bc_probe_stops++;
			*out = best;
			best = NULL;
			if (fout && cache.state == 1) {
				*fout = cache;
				memset(&cache, 0, sizeof cache);
			}
			rc = OQ_OK;
			goto out;
		}
	} else if ((rc = oq_bc_measure(ref, rn, NULL, 0, calib, &b, &cache, d))) {
		goto out;
	}
	/* the last layer's round changes one bias: run0 keeps what the nodes it reaches read, and its
	 * candidates run only those nodes (measure.h; while best is still run0's model) */
	if (b.n && (rc = oq_bc_prefix_plan(best, qn + (b.n - 1), 1, &tail, d)))
		goto out;
	run0 = (oq_bc_quantized){.qm = best, .nodes = qn, .folds = all, .keep = &tail};
	if ((rc = oq_bc_measure(ref, rn, &run0, 1, calib, &b, &cache, d)))
		goto out;
	take_diffs(&b, diff);
	bs = run0.sqnr;
	if (q->log)
		fprintf(q->log, "bias correction: round 0 (uncorrected): SQNR min %.2f mean %.2f dB\n",
			oq_bc_sqnr_min(&bs, all), oq_bc_sqnr_mean(&bs, all));
	if (w && w->n && (rc = weights_round(ref, mk, q, calib, w, rn, qn, &b, &cache, diff, &best, &bs, &wkept, d)))
		goto out;
	for (int r = 0; r <= rounds && b.n; r++) {
		size_t lo, hi;
		oq_bc_quantized run;
		char msg[640];
		double g, se;
		size_t len;
		int keep = 1, last, sums = 1;
		round_layers(&b, r, rounds, &lo, &hi);
		/* the last layer's round on run0's model: its candidates are tails (run0 kept their
		 * inputs), also the one on all samples, whose sums no later round reads (it is the last) */
		last = lo == b.n - 1 && hi == b.n && !kept && wkept != 1;
		if (lo == hi)
			continue;
		for (size_t i = lo; i < hi; i++)
			memcpy(saved[i], b.v[i].corr, b.v[i].M * sizeof *saved[i]);
		msg[0] = 0;
		/* k < OQ_BC_FOLDS: the shifts of fold k, judged on the other folds; then of all samples on all */
		for (int k = 0; k <= OQ_BC_FOLDS && keep; k++) {
			unsigned on = k < OQ_BC_FOLDS ? all & ~(1u << k) : all;
			oq_bc_prefix v = {.state = -1};
			set_corr(&b, saved, diff, lo, hi, k);
			if ((rc = quantize_corrected(mk, &b, &cand, k < OQ_BC_FOLDS ? NULL : qn, d)))
				goto out;
			run = (oq_bc_quantized){.qm = cand, .nodes = k < OQ_BC_FOLDS ? NULL : qn, .folds = on};
			if (last && (rc = last_layer_from(&tail, best, cand, &v, &run, d)))
				goto out;
			if (run.from) {
				run.nodes = NULL;
				sums = k < OQ_BC_FOLDS;
			}
			rc = oq_bc_measure(ref, rn, &run, 1, calib, &b, &cache, d);
			oq_bc_prefix_free(&v);
			if (rc)
				goto out;
			keep = k < OQ_BC_FOLDS ? oq_bc_sqnr_holds(&run.sqnr, &bs, on)
						: oq_bc_sqnr_better(&run.sqnr, &bs, on);
			oq_bc_sqnr_gain(&run.sqnr, &bs, on, &g, &se);
			len = strlen(msg);
			if (k < OQ_BC_FOLDS)
				snprintf(msg + len, sizeof msg - len, "%s fold %d's shift on the other samples", k ? ";" : "", k);
			else
				snprintf(msg + len, sizeof msg - len, "; all samples' shift on all");
			len = strlen(msg);
			snprintf(msg + len, sizeof msg - len, ": SQNR min %.2f mean %.2f dB (uncorrected %.2f / %.2f; gain "
				 "%.2f +- %.2f)", oq_bc_sqnr_min(&run.sqnr, on), oq_bc_sqnr_mean(&run.sqnr, on),
				 oq_bc_sqnr_min(&bs, on), oq_bc_sqnr_mean(&bs, on), g, se);
			if (!keep || k < OQ_BC_FOLDS) {
				oq_model_free(cand);
				cand = NULL;
				oq_bc_sqnr_free(&run.sqnr);
			}
		}
		if (q->log)
			fprintf(q->log, "bias correction: round %d (layers %zu..%zu):%s: %s\n", r + 1, lo, hi - 1, msg,
				keep ? "kept" : "not kept");
		if (!keep) {
			set_corr(&b, saved, diff, lo, hi, -1);
			continue;
		}
		if (sums)
			take_diffs(&b, diff);
		oq_model_free(best);
		best = cand;
		cand = NULL;
		oq_bc_sqnr_free(&bs);
		bs = run.sqnr;
		kept++;
	}
	if (log && b.n_nonfinite)
		fprintf(log, "bias correction: %zu samples with NaN/Inf outputs left out of the measurement\n",
			b.n_nonfinite);
	if (log)
		fprintf(log, "bias correction: %zu layers, %s%d forward groups + the last layer, %d rounds kept; "
			"calibration SQNR min %.2f mean %.2f dB\n", b.n,
			wkept < 0 ? "" : wkept ? "weight shifts kept, " : "weight shifts not kept, ", rounds, kept,
			oq_bc_sqnr_min(&bs, all), oq_bc_sqnr_mean(&bs, all));
	*out = best;
	best = NULL;
	if (fout && cache.state == 1) {
		*fout = cache;
		memset(&cache, 0, sizeof cache);
	}
	rc = OQ_OK;
out:
	oq_model_free(best);
	oq_model_free(cand);
	oq_bc_sqnr_free(&bs);
	for (size_t i = 0; diff && i < b.n; i++)
		free(diff[i]);
	for (size_t i = 0; saved && i < b.n; i++)
		free(saved[i]);
	free(diff);
	free(saved);
	free(rn);
	free(qn);
	oq_bc_float_cache_free(&cache);
	oq_bc_prefix_free(&tail);
	oq_bc_targets_free(&b);
	return rc;
}
