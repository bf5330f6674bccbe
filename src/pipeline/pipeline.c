/*
 * pipeline.c - `onnxq quantize`: the whole job, one stage per line.
 *
 *   load -> rewrites (cleanup, upgrade-opset, fold-bn, fuse)
 *        -> calibrate (--method minmax|ema|percentile|entropy|mse: a range
 *           for every float activation, on the rewritten
 *           float model: fuse only marks units, so a Relu's output range is
 *           what its Q will use when quantize folds the Relu away)
 *        -> bias correction, analytic (--bias-correction=analytic: statistics
 *           collected during calibration, each layer's mean output shift from
 *           weight quantization folded into its bias; calib/biascorr/analytic.c)
 *        -> quantize (Q/DQ placement, weights, biases)
 *        -> bias correction, empirical (the default with --calib DIR): the
 *           quantized model and the float one run the calibration samples
 *           (calib/biascorr/measure.c); each layer's measured mean output shift is
 *           folded into the float bias of a fresh copy (load + rewrites)
 *           that is quantized again with the same ranges; a round is kept
 *           only if it survives two-fold cross-validation on the samples
 *           and improves their output SQNR (mean up, min not down).
 *        -> save (temporary file + rename: OUT is untouched on failure).
 *
 * `onnxq calibrate` (stats_out) runs load -> rewrites -> calibrate one
 * shard -> write its statistics; `quantize --stats` takes the ranges from a
 * merged statistics file instead of running samples (same ranges, so the
 * same bytes as a one-machine run).
 *
 * Calibration aims each tensor's range at the grid the quantize pass will
 * give it (calib_grid: the pass' own resolution, overrides included).
 *
 * Weight-only mode skips calibration; `convert --passes` stops after the
 * rewrites. Every stage is a library call; this file only strings them
 * together, times them and prints the summary.
 */
#include "src/pipeline/pipeline.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib/biascorr/analytic.h"
#include "calib/biascorr/measure.h"
#include "calib/biascorr/sums.h"
#include "passes/quantize/encodings.h"
#include "passes/quantize/overrides.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes of initializers by kind: float payloads and integer (quantized) ones. */
static void init_bytes(const oq_graph *g, size_t *fl, size_t *in)
{
	*fl = *in = 0;
	for (size_t i = 0; i < g->n_inits; i++) {
		const oq_tensor *t = g->inits[i]->init;
		if (!t)
			continue;
		if (oq_dtype_kind(t->dtype) == 'f')
			*fl += t->nbytes;
		else
			*in += t->nbytes;
	}
}

static size_t count_op(const oq_graph *g, const char *op)
{
	size_t n = 0;
	for (size_t i = 0; i < g->n_nodes; i++)
		n += strcmp(g->nodes[i]->op_type, op) == 0 && g->nodes[i]->domain[0] == 0;
	return n;
}

/* Does the selection run the quantize pass? */
static int runs_quantize(const oq_pass_run *r)
{
	if (r->list && !strstr(r->list, "quantize"))
		return 0;
	for (size_t i = 0; i < r->n_disabled; i++)
		if (strcmp(r->disabled[i], "quantize") == 0)
			return 0;
	return 1;
}


/* oq_calib_grid_fn: the quantize pass' grid for v (ctx: the pass options). */
static int calib_grid(void *ctx, const oq_value *v, int *dtype, int *act_sym, oq_diag *d)
{
	const oq_opts *q = ctx;
	return oq_quantize_act_grid(q, v, oq_quantize_grid_node(q, v), dtype, act_sym, d);
}

/* A fresh copy of the float model: load + the rewrites (deterministic, so the same graph as m). */
static int fresh_copy(const oq_pipeline_opts *o, const oq_opts *q, oq_model **out, oq_diag *d)
{
	oq_pass_run run = o->run;
	int rc;

	run.stop_before_quantize = 1;
	if ((rc = oq_model_load(o->in_path, out, d)) || (rc = oq_passes_run(*out, &run, q, d))) {
		oq_model_free(*out);
		*out = NULL;
	}
	return rc;
}

/*
 * A fresh copy with b's corrections folded into its biases, quantized with
 * q; nodes[i] (nodes may be NULL): the node measured for layer i (NULL when
 * not found). The nodes are resolved before the quantize pass, which
 * rewires but never removes the layers and their bias Adds.
 */
static int quantize_corrected(const oq_pipeline_opts *o, const oq_opts *q, const oq_bce *b, oq_model **out,
			      oq_node **nodes, oq_diag *d)
{
	oq_pass_run run = o->run;
	int rc;

	run.only_quantize = 1;
	if ((rc = fresh_copy(o, q, out, d)))
		return rc;
	if ((rc = oq_bias_correct_apply((*out)->graph, b, d)))
		goto fail;
	for (size_t i = 0; nodes && i < b->n; i++)
		nodes[i] = oq_bias_correct_node((*out)->graph, b->v[i].measured);
	if ((rc = oq_passes_run(*out, &run, q, d)))
		goto fail;
	return OQ_OK;
fail:
	oq_model_free(*out);
	*out = NULL;
	return rc;
}

/*
 * diff[i][k * M + m]: layer i's measured mean shift of channel m, quantized
 * - float, on the samples of fold k (k < OQ_BCE_FOLDS) or on all of them
 * (k = OQ_BCE_FOLDS); 0 for a failed layer or an empty fold.
 */
static void take_diffs(const oq_bce *b, double **diff)
{
	for (size_t i = 0; i < b->n; i++) {
		const oq_bce_layer *l = &b->v[i];
		size_t M = l->M;
		for (size_t m = 0; m < M; m++) {
			double sf = 0, sq = 0;
			uint64_t nf = 0, nq = 0;
			for (size_t k = 0; k < OQ_BCE_FOLDS; k++) {
				double a = l->sum_f[k * M + m], c = l->sum_q[k * M + m];
				diff[i][k * M + m] = l->failed || !l->n_f[k] || l->n_f[k] != l->n_q[k]
							     ? 0
							     : c / (double)l->n_q[k] - a / (double)l->n_f[k];
				sf += a;
				sq += c;
				nf += l->n_f[k];
				nq += l->n_q[k];
			}
			diff[i][OQ_BCE_FOLDS * M + m] = l->failed || !nf || nf != nq ? 0 : sq / (double)nq - sf / (double)nf;
		}
	}
}

/* corr of layers [lo, hi) = saved + estimate k of diff (k = OQ_BCE_FOLDS: all samples; -1: none). */
static void set_corr(oq_bce *b, double **saved, double **diff, size_t lo, size_t hi, int k)
{
	for (size_t i = lo; i < hi; i++)
		for (size_t m = 0; m < b->v[i].M; m++)
			b->v[i].corr[m] = saved[i][m] + (k < 0 ? 0 : diff[i][(size_t)k * b->v[i].M + m]);
}

/*
 * Empirical bias correction: ref is the float model (after the rewrites),
 * *out receives the quantized model kept (round 0 is the uncorrected one).
 * The layers but the last, in topological order, are split into `rounds`
 * consecutive groups, and the last layer is a final group of its own;
 * round r adds the shifts measured on the best model so far to the
 * corrections of group r only, so a group is corrected after the layers
 * before it (correcting every layer at once counts an upstream shift twice:
 * in its own layer and again in every layer it reaches; measured on
 * mobilenet_v2: 36.7 -> 35.2 dB). The last layer's shift is the whole
 * model's mean output error, whatever its cause.
 *
 * A round is kept only when its correction survives cross-validation and
 * improves the calibration SQNR (oq_bce_sqnr_better: mean up, min not
 * down): for each fold k (calib/biascorr/measure.h), the shifts measured on the
 * samples of fold k alone, applied the same way, must improve the SQNR on
 * the samples of the other folds; then the shifts of all samples (the
 * correction kept) must improve it on all samples, so it is never worse on
 * the calibration data. The in-sample check alone is biased: subtracting a
 * mean measured on the very samples judged always lowers their total
 * squared error, also when that mean is only the noise of a few samples.
 * The fold checks also want the mean per-sample gain above twice its
 * standard error (oq_bce_sqnr_holds): with a few samples per fold a small
 * gain is chance (vit_b_16, 4 images per fold: +0.24 +- 0.46 dB, and the
 * held-out mean fell by 0.7 dB). Corrections kept in earlier rounds were
 * estimated on all samples, so a later round's folds both contain them.
 * The fold checks come first (a round that fails them costs no model on
 * all samples), and one candidate exists at a time besides the best model
 * so far (executors are most of the memory). A rejected round's group keeps
 * its previous correction.
 */
static int empirical(const oq_pipeline_opts *o, const oq_opts *q, oq_model *ref, oq_model **out, FILE *log,
		     oq_diag *d)
{
	const unsigned all = (1u << OQ_BCE_FOLDS) - 1;
	oq_bce b = {0};
	oq_node **rn = NULL, **qn = NULL;
	double **diff = NULL, **saved = NULL;
	oq_model *best = NULL, *cand = NULL;
	oq_bce_run run0;
	oq_bce_sqnr bs = {0};
	oq_bce_cache cache = {0};
	int rounds = o->bias_rounds >= 0 ? o->bias_rounds : OQ_BC_ROUNDS, kept = 0;
	int rc;

	*out = NULL;
	if ((rc = oq_bias_correct_targets(ref->graph, q, &b, d)))
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
		rn[i] = oq_bias_correct_node(ref->graph, b.v[i].measured);
		if (!(diff[i] = oq_calloc((OQ_BCE_FOLDS + 1) * b.v[i].M + 1, sizeof **diff)) ||
		    !(saved[i] = oq_calloc(b.v[i].M + 1, sizeof **saved))) {
			rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
			goto out;
		}
	}
	/* the float model alone first (its outputs kept), then one quantized model at a time */
	if ((rc = oq_bce_measure(ref, rn, NULL, 0, &o->calib, &b, &cache, d)) ||
	    (rc = quantize_corrected(o, q, &b, &best, qn, d)))
		goto out;
	run0 = (oq_bce_run){.qm = best, .nodes = qn, .folds = all};
	if ((rc = oq_bce_measure(ref, rn, &run0, 1, &o->calib, &b, &cache, d)))
		goto out;
	take_diffs(&b, diff);
	bs = run0.sqnr;
	if (q->log)
		fprintf(q->log, "bias correction: round 0 (uncorrected): SQNR min %.2f mean %.2f dB\n",
			oq_bce_sqnr_min(&bs, all), oq_bce_sqnr_mean(&bs, all));
	for (int r = 0; r <= rounds && b.n; r++) {
		/* rounds forward groups over layers [0, n-1), then the last layer alone */
		size_t nf = b.n - 1, lo = r < rounds ? nf * (size_t)r / (size_t)rounds : nf,
		       hi = r < rounds ? nf * (size_t)(r + 1) / (size_t)rounds : b.n;
		oq_bce_run run;
		char msg[640];
		double g, se;
		size_t len;
		int keep = 1;
		if (lo == hi)
			continue;
		for (size_t i = lo; i < hi; i++)
			memcpy(saved[i], b.v[i].corr, b.v[i].M * sizeof *saved[i]);
		msg[0] = 0;
		/* k < OQ_BCE_FOLDS: the shifts of fold k, judged on the other folds; then of all samples on all */
		for (int k = 0; k <= OQ_BCE_FOLDS && keep; k++) {
			unsigned on = k < OQ_BCE_FOLDS ? all & ~(1u << k) : all;
			set_corr(&b, saved, diff, lo, hi, k);
			if ((rc = quantize_corrected(o, q, &b, &cand, k < OQ_BCE_FOLDS ? NULL : qn, d)))
				goto out;
			run = (oq_bce_run){.qm = cand, .nodes = k < OQ_BCE_FOLDS ? NULL : qn, .folds = on};
			if ((rc = oq_bce_measure(ref, rn, &run, 1, &o->calib, &b, &cache, d)))
				goto out;
			keep = k < OQ_BCE_FOLDS ? oq_bce_sqnr_holds(&run.sqnr, &bs, on)
						: oq_bce_sqnr_better(&run.sqnr, &bs, on);
			oq_bce_gain(&run.sqnr, &bs, on, &g, &se);
			len = strlen(msg);
			if (k < OQ_BCE_FOLDS)
				snprintf(msg + len, sizeof msg - len, "%s fold %d's shift on the other samples", k ? ";" : "", k);
			else
				snprintf(msg + len, sizeof msg - len, "; all samples' shift on all");
			len = strlen(msg);
			snprintf(msg + len, sizeof msg - len, ": SQNR min %.2f mean %.2f dB (uncorrected %.2f / %.2f; gain "
				 "%.2f +- %.2f)", oq_bce_sqnr_min(&run.sqnr, on), oq_bce_sqnr_mean(&run.sqnr, on),
				 oq_bce_sqnr_min(&bs, on), oq_bce_sqnr_mean(&bs, on), g, se);
			if (!keep || k < OQ_BCE_FOLDS) {
				oq_model_free(cand);
				cand = NULL;
				oq_bce_sqnr_free(&run.sqnr);
			}
		}
		if (q->log)
			fprintf(q->log, "bias correction: round %d (layers %zu..%zu):%s: %s\n", r + 1, lo, hi - 1, msg,
				keep ? "kept" : "not kept");
		if (!keep) {
			set_corr(&b, saved, diff, lo, hi, -1);
			continue;
		}
		take_diffs(&b, diff);
		oq_model_free(best);
		best = cand;
		cand = NULL;
		oq_bce_sqnr_free(&bs);
		bs = run.sqnr;
		kept++;
	}
	if (log)
		fprintf(log, "bias correction: %zu layers, %d forward groups + the last layer, %d rounds kept; calibration "
			"SQNR min %.2f mean %.2f dB\n", b.n, rounds, kept, oq_bce_sqnr_min(&bs, all),
			oq_bce_sqnr_mean(&bs, all));
	*out = best;
	best = NULL;
	rc = OQ_OK;
out:
	oq_model_free(best);
	oq_model_free(cand);
	oq_bce_sqnr_free(&bs);
	for (size_t i = 0; diff && i < b.n; i++)
		free(diff[i]);
	for (size_t i = 0; saved && i < b.n; i++)
		free(saved[i]);
	free(diff);
	free(saved);
	free(rn);
	free(qn);
	oq_bce_cache_free(&cache);
	oq_bce_free(&b);
	return rc;
}

int oq_pipeline_run(const oq_pipeline_opts *o, oq_diag *d)
{
	oq_model *m = NULL;
	oq_ranges ranges = {0};
	oq_override *ov = NULL, *all = NULL;
	size_t n_ov = 0, n_all = 0;
	oq_encodings enc = {0};
	oq_stats stats = {0};
	uint8_t *need = NULL;
	oq_bc_stats bcs = {0};
	oq_bc_collect *bcc = NULL;
	oq_opts q = o->q;
	oq_pass_run run = o->run;
	oq_save_info info;
	FILE *log = o->quiet ? NULL : o->log;
	double t0 = now(), t1, t2, t3, t4;
	size_t fl0, in0, fl1, in1;
	int quantize = !o->rewrite_only && runs_quantize(&o->run);
	int rc;

	if (o->stats_out)
		quantize = 0;
	if (quantize && !q.weight_only && !o->calib.source && !o->stats_in)
		return oq_err(d, OQ_EUSAGE,
			      "quantize: activation quantization needs calibration data: give --calib DIR "
			      "(NNN.npy samples or NNN/<input>.npy folders), --calib random:N to calibrate on "
			      "random data (not representative), or --weight-only");
	if (o->stats_in && (rc = oq_stats_read(o->stats_in, &stats, d)))
		goto out;
	if ((rc = oq_model_load(o->in_path, &m, d)))
		goto out;
	if (!m->graph) {
		rc = oq_err(d, OQ_EINVAL, "quantize: %s has no graph", o->in_path);
		goto out;
	}
	if (o->overrides_path) {
		if ((rc = oq_overrides_load(o->overrides_path, m, &ov, &n_ov, d)))
			goto out;
		q.overrides = ov;
		q.n_overrides = n_ov;
	}
	if (o->verbose && !q.log)
		q.log = log;
	/* rewrites */
	run.stop_before_quantize = 1;
	if ((rc = oq_passes_run(m, &run, &q, d)))
		goto out;
	/* after the rewrites, so the names are those an export of this pipeline writes */
	if (o->import_encodings) {
		oq_override *ev = NULL;
		size_t n_ev = 0;
		if ((rc = oq_encodings_read(o->import_encodings, &enc, d)) ||
		    (rc = oq_encodings_to_overrides(&enc, m, o->import_encodings, &ev, &n_ev, d)))
			goto out;
		/* the file's entries first: oq_override_find returns the first match */
		if (!(all = oq_calloc(n_ev + n_ov, sizeof *all))) {
			oq_overrides_free(ev, n_ev);
			rc = oq_err(d, OQ_ENOMEM, "quantize: out of memory");
			goto out;
		}
		memcpy(all, ev, n_ev * sizeof *all);
		if (n_ov)
			memcpy(all + n_ev, ov, n_ov * sizeof *all);
		free(ev);
		free(ov);
		ov = NULL;
		n_all = n_ev + n_ov;
		n_ov = 0;
		q.overrides = all;
		q.n_overrides = n_all;
	}
	t1 = now();
	/* after cleanup, which turns Constant-node weights (PaddleOCR) into initializers */
	init_bytes(m->graph, &fl0, &in0);
	/* the tensors whose ranges the quantize pass will read: only they need histograms */
	if (o->stats_out || (quantize && !q.weight_only)) {
		if (!(need = oq_calloc(m->graph->n_values + 1, 1))) {
			rc = oq_err(d, OQ_ENOMEM, "quantize: out of memory");
			goto out;
		}
		if ((rc = oq_quantize_range_needs(m->graph, &q, need, d)))
			goto out;
	}

	/* calibrate one shard into a statistics file */
	if (o->stats_out) {
		oq_calib_opts co = o->calib;
		co.progress = log;
		co.act_type = q.act_type;
		co.act_sym = q.act_sym;
		co.skip_qmark = OQ_QM_INTERNAL; /* as below: same ranges, fused Convs kept */
		co.hist_need = need;
		if ((rc = oq_calibrate_stats(m, &co, &stats, d)) ||
		    (rc = oq_stats_write(o->stats_out, &stats, d)))
			goto out;
		if (log)
			fprintf(log, "calibrate: wrote %s\n", o->stats_out);
		goto out;
	}

	/* calibration */
	if (quantize && !q.weight_only) {
		oq_calib_opts co = o->calib;
		co.progress = log;
		co.act_type = q.act_type; /* the grid entropy and mse aim at, per tensor: */
		co.act_sym = q.act_sym;
		co.grid = calib_grid;
		co.grid_ctx = &q;
		co.hist_need = need;
		co.stats = o->stats_in ? &stats : NULL;
		co.stats_name = o->stats_in;
		if (o->bias_correction == OQ_BC_ANALYTIC) {
			if ((rc = oq_bias_correct_plan(m->graph, &q, &bcs, d)) ||
			    (rc = oq_bc_collect_new(m->graph, &bcs, &bcc, d)))
				goto out;
			co.extra = oq_bc_observe;
			co.extra_ctx = bcc;
		}
		/* quantize puts no Q/DQ inside a fused unit: the executor may keep Conv+act fused */
		co.skip_qmark = OQ_QM_INTERNAL;
		if ((rc = oq_calibrate(m, &co, &ranges, d)))
			goto out;
		q.ranges = &ranges;
		if (o->bias_correction == OQ_BC_ANALYTIC && (rc = oq_bias_correct(m->graph, &q, &bcs, log, d)))
			goto out;
	}
	t2 = now();

	/* quantization; empirical correction runs samples: not on statistics files or random data */
	if (quantize && !q.weight_only && o->bias_correction == OQ_BC_EMPIRICAL && o->calib.source &&
	    strncmp(o->calib.source, "random:", 7) && !o->stats_in) {
		oq_model *qm = NULL;
		if ((rc = empirical(o, &q, m, &qm, log, d)))
			goto out;
		oq_model_free(m);
		m = qm;
	} else if (quantize) {
		if (o->bias_correction == OQ_BC_EMPIRICAL && !q.weight_only && !o->stats_in && o->verbose && log)
			fprintf(log, "bias correction: skipped: it needs calibration samples from a folder\n");
		run = o->run;
		run.only_quantize = 1;
		if ((rc = oq_passes_run(m, &run, &q, d)))
			goto out;
	}
	if (quantize) {
		if (o->import_encodings) {
			size_t unused = 0;
			if ((rc = oq_encodings_verify(m, &enc, o->verbose ? log : NULL, &unused, d)))
				goto out;
			if (unused && log)
				fprintf(log, "quantize: %zu imported encodings had no Q/DQ to apply to\n", unused);
		}
		if (o->export_encodings && (rc = oq_encodings_export(m, o->export_encodings, d)))
			goto out;
	}
	t3 = now();

	if ((rc = oq_model_save(m, o->out_path, &o->save, &info, d)))
		goto out;
	t4 = now();

	init_bytes(m->graph, &fl1, &in1);
	if (log) {
		if (quantize)
			fprintf(log,
				"quantize: wrote %s: %zu QuantizeLinear, %zu DequantizeLinear; initializers "
				"%.2f MB float + %.2f MB int -> %.2f MB float + %.2f MB int\n",
				o->out_path, count_op(m->graph, "QuantizeLinear"),
				count_op(m->graph, "DequantizeLinear"), fl0 / 1e6, in0 / 1e6, fl1 / 1e6,
				in1 / 1e6);
		else if (o->verbose)
			fprintf(log, "convert: wrote %s (%zu nodes)\n", o->out_path, m->graph->n_nodes);
		if (info.auto_external)
			fprintf(log, "onnxq: %s: model is over 2 GB: wrote %zu tensors to %s.data\n",
				o->rewrite_only ? "convert" : "quantize", info.n_external, o->out_path);
		if (quantize && !q.weight_only && o->bias_correction == OQ_BC_EMPIRICAL && o->stats_in)
			fprintf(log, "quantize: no bias correction with --stats (no samples to measure on): the model "
				"of --calib DIR --no-bias-correction\n");
		if (o->verbose)
			fprintf(log, "timings: load+rewrite %.3f s, calibrate %.3f s, quantize %.3f s, save %.3f s\n",
				t1 - t0, t2 - t1, t3 - t2, t4 - t3);
	}
out:
	oq_stats_free(&stats);
	free(need);
	oq_bc_collect_free(bcc);
	oq_bc_stats_free(&bcs);
	oq_ranges_free(&ranges);
	oq_overrides_free(ov, n_ov);
	oq_overrides_free(all, n_all);
	oq_encodings_free(&enc);
	oq_model_free(m);
	return rc;
}
