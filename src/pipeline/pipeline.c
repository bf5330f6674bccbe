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

#include "calib/biascorr/biascorr.h"
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

/* oq_biascorr_models.quantize: the quantize pass (ctx: the pipeline options; q.log, q.ranges set). */
typedef struct models_ctx {
	const oq_pipeline_opts *o;
	const oq_opts *q;
} models_ctx;

static int bc_float_copy(void *ctx, oq_model **out, oq_diag *d)
{
	const models_ctx *c = ctx;
	return fresh_copy(c->o, c->q, out, d);
}

static int bc_quantize(void *ctx, oq_model *m, oq_diag *d)
{
	const models_ctx *c = ctx;
	oq_pass_run run = c->o->run;
	run.only_quantize = 1;
	return oq_passes_run(m, &run, c->q, d);
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
	oq_biascorr_analytic *bca = NULL;
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
			if ((rc = oq_biascorr_analytic_plan(m->graph, &q, &co, &bca, d)))
				goto out;
		}
		/* quantize puts no Q/DQ inside a fused unit: the executor may keep Conv+act fused */
		co.skip_qmark = OQ_QM_INTERNAL;
		if ((rc = oq_calibrate(m, &co, &ranges, d)))
			goto out;
		q.ranges = &ranges;
		if (o->bias_correction == OQ_BC_ANALYTIC && (rc = oq_biascorr_analytic_fold(bca, m->graph, &q, log, d)))
			goto out;
	}
	t2 = now();

	/* quantization; empirical correction runs samples: not on statistics files or random data */
	if (quantize && !q.weight_only && o->bias_correction == OQ_BC_EMPIRICAL && o->calib.source &&
	    strncmp(o->calib.source, "random:", 7) && !o->stats_in) {
		oq_model *qm = NULL;
		models_ctx mc = {o, &q};
		oq_biascorr_models mk = {bc_float_copy, bc_quantize, &mc};
		if ((rc = oq_biascorr_empirical(m, &mk, &q, &o->calib, o->bias_rounds, log, &qm, d)))
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
	oq_biascorr_analytic_free(bca);
	oq_ranges_free(&ranges);
	oq_overrides_free(ov, n_ov);
	oq_overrides_free(all, n_all);
	oq_encodings_free(&enc);
	oq_model_free(m);
	return rc;
}
