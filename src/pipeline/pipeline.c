/*
 * pipeline.c - `onnxq quantize`, `calibrate` and `convert`: the stages, one
 * function each, in the order oq_pipeline_run calls them.
 *
 *   load       --stats (its errors first), the model, --overrides
 *   widen      a float16 / bfloat16 model computed in float32 from here on
 *              (passes/rewrite/precision.h), so every later stage works on
 *              float32; its high-precision type is what `narrow` gives back
 *   rewrite    cleanup, upgrade-opset, fold-bn, [cle,] fuse
 *              (oq_passes_rewrite); then --import-encodings, whose names are
 *              those an export of this pipeline writes
 *   learn      weight-only --awq (input channels scaled, awq.h), then
 *              --weight-rounding adaround|seq-mse, and weight-only
 *              --bias-correction: each weight's rounding (and, weight-only,
 *              its layer's bias) learned on the calibration samples
 *              (calib/rounding/rounding.h); the quantize pass applies it
 *   calibrate  a range for every float activation the quantize pass reads,
 *              aimed at the grid the pass gives it (calib_grid), from the
 *              samples or a merged --stats file, on the rewritten float
 *              model (fuse only marks units, so a Relu's output range is
 *              what its Q will use when quantize folds the Relu away);
 *              analytic bias correction's input sums alongside; then the
 *              runtime-aware placement (placement.h: which units stay
 *              float, from the samples). `onnxq calibrate` writes one
 *              shard's statistics instead and stops.
 *   correct    analytic bias correction: shifts folded into float biases
 *   quantize   the quantize pass (oq_passes_quantize: Q/DQ, weights,
 *              biases); with empirical bias correction, the best of the
 *              corrected candidates (calib/biascorr/biascorr.h)
 *   narrow     the float32 model in the high-precision type asked for
 *              (--high-precision, the model's own by default): float16
 *              tensors and scales, Casts at float32 graph inputs / outputs
 *   encodings  --import-encodings verified, --export-encodings written
 *   save       temporary file + rename: OUT is untouched on failure
 *
 * A stage the job does not need returns at once: weight-only has no
 * calibration, `convert` (and a pass selection without quantize) only
 * loads, rewrites and saves. `quantize --stats` takes the ranges from the
 * merged statistics, so it writes the bytes a one-machine run writes.
 */
#include "src/pipeline/pipeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib/biascorr/measure.h"
#include "calib/biascorr/pre.h"
#include "calib/rounding/awq.h"
#include "calib/rounding/rounding.h"
#include "passes/quantize/encodings.h"
#include "passes/quantize/overrides.h"
#include "passes/rewrite/precision.h"
#include "src/io/outfile.h"
#include "src/pipeline/placement.h"
#include "src/pipeline/analyze.h"
#include "src/pipeline/fidelity.h"
#include "src/pipeline/target.h"

#define OQ_FOLD_WARN_DB 20 /* a fold SQNR below this is a warning */

/* The steps the verbose "steps:" line times (wall and CPU), inside the stages. */
enum { OQ_ST_CALIBRATE, OQ_ST_PLACEMENT, OQ_ST_QUANTIZE, OQ_ST_BIAS, OQ_ST_FOLD, OQ_ST_N };
static const char *const stage_names[OQ_ST_N] = {"calibrate", "placement", "quantize pass", "bias correction",
						  "fold report"};

/* One run: the options it uses and what the stages hand on. */
typedef struct job {
	oq_pipeline_opts o;       /* resolved (oq_pipeline_opts_resolve) */
	oq_opts q;                /* pass options: o.q with the overrides, ranges and verbose log */
	FILE *log;                /* summary and notes; NULL with --quiet */
	int quantize;             /* the quantize pass runs */
	int hp_model;             /* the model's high-precision type (oq_precision_of) */
	int hp;                   /* the one written: --high-precision, else hp_model */
	oq_model *m;
	oq_stats stats;           /* --stats FILE, or what `calibrate` writes */
	oq_override *ov;          /* imported encodings first, then --overrides (first match wins) */
	size_t n_ov;
	oq_encodings enc;         /* --import-encodings */
	uint8_t *need;            /* per value: the quantize pass reads its range */
	oq_ranges ranges;
	oq_placement placement;   /* runtime-aware placement: its float units (j->q.float_nodes) */
	int left_float;           /* the placement left every unit float and nothing needs a range:
				   * no bias correction or fold report (early_placement) */
	oq_calib_opts co;         /* the calibration options (the fold measurement repeats them) */
	oq_stats folds;           /* per-fold statistics of a sample folder (n_folds 0: none) */
	oq_fidelity fid;          /* the fold SQNR (fid.k 0: not measured) */
	oq_ranges *fr;            /* the fold report's held-out ranges, fr_k of them (fold_ranges), or NULL */
	size_t fr_k;
	uint64_t fr_total;        /* the samples they were made on */
	oq_target target;         /* --target-sqnr's search (target.db 0: none) */
	oq_override *tov;         /* the overrides in effect during and after it: --overrides, then
				   * the raised points (shallow copies) */
	oq_bc_float_cache fout;   /* empirical bias correction's float outputs on the samples (the fold
				   * report reuses them), or empty */
	oq_biascorr_analytic *analytic;
	oq_bc_pre *bc_pre;        /* empirical bias correction's float side, taken by calibration
				   * (j->o.calib.bc_pre after it), or NULL */
	size_t awq_scaled;        /* layers --awq scaled */
	oq_wlearned_set learned;  /* learned rounding (q.learned points here once learned) */
	oq_biascorr_shifts wshift; /* W8A8 empirical bias correction's start: the weights' shifts */
	oq_save_info info;
	size_t fl0, in0;          /* initializer bytes after the rewrites: float (a 16-bit model's at 16 bits,
				   * as its file holds them), integer */
	double t0, t_learn, t_calibrate, t_quantize, t_save, t_end; /* when the timed stages began */
	double sw[OQ_ST_N], sc[OQ_ST_N]; /* per step of stage_names: wall and process CPU seconds */
	size_t rw[OQ_ST_N], rp[OQ_ST_N]; /* and the executors' whole and partial runs (oq_exec_runs) */
} job;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Process CPU seconds (every thread). */
static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A step's clocks: step_begin, then step_end adds the time since to step s. */
typedef struct step {
	double w, c;
	size_t rw, rp;
} step;

static step step_begin(void)
{
	return (step){now(), cpu_now(), oq_exec_runs(0), oq_exec_runs(1)};
}

static void step_end(job *j, int s, step t)
{
	j->sw[s] += now() - t.w;
	j->sc[s] += cpu_now() - t.c;
	j->rw[s] += oq_exec_runs(0) - t.rw;
	j->rp[s] += oq_exec_runs(1) - t.rp;
}

/* Bytes of float and of integer initializers of g and its If/Loop/Scan bodies (any depth). */
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
	for (size_t i = 0; g->n_subgraphs && i < g->n_nodes; i++)
		for (size_t k = 0; k < g->nodes[i]->n_attrs; k++) {
			const oq_attr *a = &g->nodes[i]->attrs[k];
			size_t f = 0, n = 0;
			for (size_t b = 0; b < (a->g ? 1 : a->graphs ? a->n : 0); b++) {
				init_bytes(a->g ? a->g : a->graphs[b], &f, &n);
				*fl += f;
				*in += n;
			}
		}
}

/* Nodes of type op (default domain) in g, and with deep, in its bodies (any depth) too. */
static size_t count_op_in(const oq_graph *g, const char *op, int deep)
{
	size_t n = 0;
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *nd = g->nodes[i];
		n += strcmp(nd->op_type, op) == 0 && nd->domain[0] == 0;
		for (size_t k = 0; deep && g->n_subgraphs && k < nd->n_attrs; k++) {
			const oq_attr *a = &nd->attrs[k];
			for (size_t b = 0; b < (a->g ? 1 : a->graphs ? a->n : 0); b++)
				n += count_op_in(a->g ? a->g : a->graphs[b], op, 1);
		}
	}
	return n;
}

/* Nodes of type op in the whole model (If/Loop/Scan bodies included). */
static size_t count_op(const oq_graph *g, const char *op)
{
	return count_op_in(g, op, 1);
}

/*
 * OQ_EUSAGE when an output of the command is one of its inputs (the model,
 * its external data, the settings and statistics files) or another output:
 * writing it would destroy what the command reads. -o equal to MODEL is
 * allowed: the model is replaced atomically.
 */
static int outputs_not_inputs(const oq_pipeline_opts *o, const oq_model *m, oq_diag *d)
{
	const char *in[8], **all;
	size_t n = 0, na = 0;
	int rc = OQ_OK;

	in[n++] = o->overrides_path;
	in[n++] = o->import_encodings;
	in[n++] = o->stats_in;
	if (!(all = oq_calloc(m->n_maps + n + 2, sizeof *all)))
		return oq_err(d, OQ_ENOMEM, "quantize: out of memory");
	for (size_t i = 0; i < n; i++)
		all[na++] = in[i];
	for (size_t i = 1; i < m->n_maps; i++) /* external data files */
		all[na++] = m->maps[i].path;
	if (o->job != OQ_JOB_CALIBRATE)
		rc = oq_out_not_input(o->out_path, "-o", all, na, d);
	all[na++] = o->in_path;
	if (!rc && o->job == OQ_JOB_CALIBRATE)
		rc = oq_out_not_input(o->out_path, "-o", all, na, d);
	if (!rc && o->export_encodings) {
		all[na++] = o->out_path;
		rc = oq_out_not_input(o->export_encodings, "--export-encodings", all, na, d);
		if (!rc && !strcmp(o->export_encodings, o->out_path))
			rc = oq_err(d, OQ_EUSAGE, "--export-encodings '%s' is also -o; refused: give another "
				    "file", o->export_encodings);
	}
	free(all);
	return rc;
}

/* oq_calib_grid_fn: the quantize pass' grid for v (ctx: the pass options). */
static int calib_grid(void *ctx, const oq_value *v, int *dtype, int *act_sym, oq_diag *d)
{
	const oq_opts *q = ctx;
	return oq_quantize_act_grid(q, v, oq_quantize_grid_node(q, v), dtype, act_sym, d);
}

/* Runs one stage's passes (oq_passes_rewrite or oq_passes_quantize) of the selection on m. */
static int run_passes(job *j, oq_model *m, const char *stage, oq_diag *d)
{
	oq_pass_run run = j->o.run;
	run.stage = stage;
	return oq_passes_run(m, &run, &j->q, d);
}

/* oq_biascorr_models.float_copy: load + the rewrites (deterministic: the graph j->m was). */
static int float_copy(void *ctx, oq_model **out, oq_diag *d)
{
	job *j = ctx;
	int rc;

	int changed;

	if ((rc = oq_model_load(j->o.in_path, out, d)) ||
	    (j->hp_model != OQ_DT_FLOAT && (rc = oq_precision_widen(*out, &changed, d))) ||
	    (rc = run_passes(j, *out, oq_passes_rewrite, d))) {
		oq_model_free(*out);
		*out = NULL;
	}
	return rc;
}

/* oq_placement_src.float_copy: float_copy with q's rewrites */
static int placement_copy(void *ctx, const oq_opts *q, oq_model **out, oq_diag *d)
{
	job *j = ctx;
	oq_opts keep = j->q;
	int rc;

	j->q = *q;
	rc = float_copy(j, out, d);
	j->q = keep;
	return rc;
}

/* oq_biascorr_models.quantize */
static int quantize_pass(void *ctx, oq_model *m, oq_diag *d)
{
	return run_passes(ctx, m, oq_passes_quantize, d);
}

/* need[]: the tensors whose ranges the quantize pass will read (with --prefer balanced, the
 * accuracy-first placement's too: the placement measures it): only they need histograms. */
static int range_needs(job *j, oq_diag *d)
{
	if (!(j->need = oq_calloc(j->m->graph->n_values + 1, 1)))
		return oq_err(d, OQ_ENOMEM, "quantize: out of memory");
	return oq_placement_range_needs(j->m, &j->q, j->need, d);
}

/* Calibration options common to `calibrate` and `quantize`. */
static oq_calib_opts calib_opts(const job *j)
{
	oq_calib_opts co = j->o.calib;
	co.progress = j->log;
	co.act_type = j->q.act_type; /* the grid entropy and mse aim at, per tensor (co.grid) */
	co.act_sym = j->q.act_sym;
	co.hist_need = j->need;
	/* quantize puts no Q/DQ inside a fused unit: the executor may keep Conv+act fused */
	co.skip_qmark = OQ_QM_INTERNAL;
	return co;
}

static void job_init(job *j, const oq_pipeline_opts *o)
{
	memset(j, 0, sizeof *j);
	j->t0 = now();
	oq_pipeline_opts_resolve(o, &j->o);
	j->q = j->o.q;
	j->log = j->o.quiet ? NULL : j->o.log;
	if (j->o.verbose && !j->q.log)
		j->q.log = j->log;
	j->quantize = (j->o.job == OQ_JOB_QUANTIZE || j->o.job == OQ_JOB_ANALYZE) &&
		      oq_pass_selected(&j->o.run, "quantize");
}

static void job_free(job *j)
{
	oq_biascorr_analytic_free(j->analytic);
	j->o.calib.bc_pre = NULL;
	oq_bc_pre_free(j->bc_pre);
	oq_bc_float_cache_free(&j->fout);
	oq_wlearned_free(&j->learned);
	oq_biascorr_shifts_free(&j->wshift);
	oq_placement_free(&j->placement);
	oq_fidelity_free(&j->fid);
	oq_fidelity_ranges_free(j->fr, j->fr_k);
	oq_target_free(&j->target);
	free(j->tov);
	oq_stats_free(&j->folds);
	oq_ranges_free(&j->ranges);
	free(j->need);
	oq_encodings_free(&j->enc);
	oq_overrides_free(j->ov, j->n_ov);
	oq_stats_free(&j->stats);
	oq_model_free(j->m);
}

static int load(job *j, oq_diag *d)
{
	int rc;

	if (j->o.stats_in && (rc = oq_stats_read(j->o.stats_in, &j->stats, d)))
		return rc;
	if ((rc = oq_model_load(j->o.in_path, &j->m, d)) ||
	    (j->o.job != OQ_JOB_ANALYZE && (rc = outputs_not_inputs(&j->o, j->m, d))))
		return rc;
	if (!j->m->graph)
		return oq_err(d, OQ_EINVAL, "quantize: %s has no graph", j->o.in_path);
	if (j->o.overrides_path) {
		if ((rc = oq_overrides_load(j->o.overrides_path, j->m, &j->ov, &j->n_ov, d)))
			return rc;
		j->q.overrides = j->ov;
		j->q.n_overrides = j->n_ov;
	}
	return OQ_OK;
}

/* The imported encodings become overrides, ahead of --overrides (oq_override_find: first match). */
static int import_encodings(job *j, oq_diag *d)
{
	oq_override *ev = NULL, *all;
	size_t n_ev = 0;
	int rc;

	if ((rc = oq_encodings_read(j->o.import_encodings, &j->enc, d)) ||
	    (rc = oq_encodings_to_overrides(&j->enc, j->m, j->o.import_encodings, &ev, &n_ev, d)))
		return rc;
	if (!(all = oq_calloc(n_ev + j->n_ov, sizeof *all))) {
		oq_overrides_free(ev, n_ev);
		return oq_err(d, OQ_ENOMEM, "quantize: out of memory");
	}
	memcpy(all, ev, n_ev * sizeof *all);
	if (j->n_ov)
		memcpy(all + n_ev, j->ov, j->n_ov * sizeof *all);
	free(ev);
	free(j->ov);
	j->ov = all;
	j->n_ov += n_ev;
	j->q.overrides = j->ov;
	j->q.n_overrides = j->n_ov;
	return OQ_OK;
}

/* `convert` leaves the precision alone unless --high-precision asks for another one. */
static int keeps_precision(const job *j)
{
	return j->o.job == OQ_JOB_CONVERT && j->hp == j->hp_model;
}

static int widen(job *j, oq_diag *d)
{
	const char *why;
	int64_t need;
	int rc, changed;

	if ((rc = oq_precision_of(j->m, &j->hp_model, d)))
		return rc;
	j->hp = j->o.high_precision ? j->o.high_precision : j->hp_model;
	if (keeps_precision(j))
		return OQ_OK;
	/* 16-bit scales on QuantizeLinear / DequantizeLinear need opset 19; `calibrate` upgrades the
	 * same way, so that `quantize --stats` finds the model its statistics were made on */
	if ((j->quantize || j->o.job == OQ_JOB_CALIBRATE) && j->hp != OQ_DT_FLOAT && oq_model_opset(j->m, "") < 19) {
		if (j->q.opset && j->q.opset < 19)
			return oq_err(d, OQ_EUSAGE,
				      "%s: --opset %lld: %s scales need opset 19; give --opset 19 or more, or "
				      "--high-precision float32", j->quantize ? "quantize" : "calibrate",
				      (long long)j->q.opset, oq_dtype_name(j->hp));
		need = oq_quantize_opset_need(&j->q, &why);
		if (!j->q.opset)
			j->q.opset = need > 19 ? need : 19;
	}
	return j->hp_model == OQ_DT_FLOAT ? OQ_OK : oq_precision_widen(j->m, &changed, d);
}

static int rewrite(job *j, oq_diag *d)
{
	int rc;

	if ((rc = run_passes(j, j->m, oq_passes_rewrite, d)))
		return rc;
	if (j->o.import_encodings && (rc = import_encodings(j, d)))
		return rc;
	/* after cleanup, which turns Constant-node weights (PaddleOCR) into initializers */
	init_bytes(j->m->graph, &j->fl0, &j->in0);
	if (j->hp_model != OQ_DT_FLOAT && !keeps_precision(j))
		j->fl0 /= 2; /* widened to float32 (precision.h) */
	return OQ_OK;
}

/*
 * Weight-only --awq, learned weight rounding (--weight-rounding) and, with --weight-only, the
 * bias correction of each layer's mean error: on the rewritten float model, before calibration
 * (which then sees the weight-only biases it corrected; W8A8 biases are not touched here).
 */
static int has_sample_folder(const oq_pipeline_opts *o);

static int learn_rounding(job *j, oq_diag *d)
{
	int bias = j->q.weight_only && j->o.bias_correction == OQ_BC_EMPIRICAL;
	/* W8A8 (--bias-correction-weights): the weights' shifts, learned on a copy whose biases
	 * take them, for empirical bias correction to judge on the quantized model (quantize()) */
	int wshift = !j->q.weight_only && j->o.bias_correction == OQ_BC_EMPIRICAL && j->o.bias_weights == OQ_BCW_ON &&
		     has_sample_folder(&j->o);
	oq_model *cp = NULL;
	int rc;

	j->t_learn = now();
	if (!j->quantize)
		return OQ_OK;
	/* --awq (weight-only) first: the rounding and the bias correction see the scaled weights */
	if (j->q.awq && (rc = oq_awq_learn(j->m, &j->q, &j->o.calib, bias, &j->awq_scaled, j->log, d)))
		return rc;
	if (j->q.weight_rounding == OQ_WROUND_NEAREST && !bias && !wshift)
		return OQ_OK;
	if (!wshift)
		rc = oq_wround_learn(j->m, &j->q, &j->o.calib, bias, &j->learned, j->log, d);
	else if (!(rc = float_copy(j, &cp, d)))
		rc = oq_wround_learn_shifts(cp, &j->q, &j->o.calib, 1, &j->learned, &j->wshift, j->log, d);
	oq_model_free(cp);
	if (rc)
		return rc;
	j->q.learned = &j->learned;
	return OQ_OK;
}

/* `onnxq calibrate`: one shard's statistics, the ranges `quantize --calib` would compute. */
static int write_statistics(job *j, oq_diag *d)
{
	oq_calib_opts co;
	int rc;

	if ((rc = range_needs(j, d)))
		return rc;
	co = calib_opts(j);
	if ((rc = oq_calibrate_stats(j->m, &co, &j->stats, d)) || (rc = oq_stats_write(j->o.out_path, &j->stats, d)))
		return rc;
	if (j->log)
		fprintf(j->log, "calibrate: wrote %s\n", j->o.out_path);
	return OQ_OK;
}

/* Empirical bias correction runs the calibration samples: not on statistics or random data. */
static int has_sample_folder(const oq_pipeline_opts *o)
{
	return o->calib.source && strncmp(o->calib.source, "random:", 7) != 0 && !o->stats_in;
}

static int fold_ranges(job *j, oq_diag *d);

/*
 * The placement's speed search before calibration (it needs the value sizes only): when it
 * leaves every unit of the main graph float (ONNX Runtime runs the model faster in float) and
 * then no tensor needs a range, nothing is quantized: bias correction and the fold report would
 * measure the float model against itself, and j->left_float skips them. Calibration still runs
 * (its checks of the samples, the statistics file and the options stand). Not for analyze or
 * --target-sqnr (they rank and raise points from the statistics), nor with control-flow bodies
 * (quantized whatever the main graph's placement).
 */
static int early_placement(job *j, oq_diag *d)
{
	uint8_t *need;
	int rc, any = 0;
	step t;

	if (j->o.job != OQ_JOB_QUANTIZE || j->o.target_sqnr > 0 || j->m->graph->n_subgraphs || !oq_runtime_aware(&j->q))
		return OQ_OK;
	t = step_begin();
	rc = oq_placement_speed(&j->o, &j->q, j->m, &j->placement, j->log, d);
	step_end(j, OQ_ST_PLACEMENT, t);
	if (rc || !oq_placement_all_float(&j->placement))
		return rc;
	if (!(need = oq_calloc(j->m->graph->n_values + 1, 1)))
		return oq_err(d, OQ_ENOMEM, "quantize: out of memory");
	if (!(rc = oq_quantize_range_needs(j->m->graph, &j->q, need, d)))
		for (size_t i = 0; i < j->m->graph->n_values; i++)
			any |= need[i];
	free(need);
	j->left_float = !rc && !any;
	if (j->left_float && j->o.verbose && j->log)
		fprintf(j->log, "placement: every unit float and no tensor needs a range: no bias correction or "
			"fold report\n");
	return rc;
}

static int calibrate(job *j, oq_diag *d)
{
	oq_placement_src src;
	oq_calib_opts co;
	step t;
	int rc;

	j->t_calibrate = now();
	if (!j->quantize || j->q.weight_only)
		return OQ_OK;
	if ((rc = early_placement(j, d)))
		return rc;
	if ((rc = range_needs(j, d)))
		return rc;
	co = calib_opts(j);
	/* quantize reads no other range: the rest are not scanned at all (a statistics file keeps
	 * every tensor's min/max). Not with If/Loop/Scan bodies: the quantize pass also gives a Q to
	 * a main-graph value a body captures, which need does not mark. */
	co.need_only = !j->m->graph->n_subgraphs;
	co.grid = calib_grid;
	co.grid_ctx = &j->q;
	co.stats = j->o.stats_in ? &j->stats : NULL;
	co.stats_name = j->o.stats_in;
	co.verbose = j->o.verbose;
	if (j->o.bias_correction == OQ_BC_ANALYTIC &&
	    (rc = oq_biascorr_analytic_plan(j->m->graph, &j->q, &co, &j->analytic, d)))
		return rc;
	j->co = co;
	/* the fold measurement needs each fold's statistics (the ranges are the same bits) */
	if (has_sample_folder(&j->o) && co.method != OQ_CALIB_EMA)
		co.folds_out = &j->folds;
	/* empirical bias correction's float run of its samples, taken on the way (pre.h; analyze
	 * corrects no bias) */
	if (oq_bc_pre_use && j->o.job == OQ_JOB_QUANTIZE && j->o.bias_correction == OQ_BC_EMPIRICAL &&
	    has_sample_folder(&j->o) && !j->left_float && co.batch <= 1) {
		if ((rc = oq_bc_pre_new(j->m->graph, &j->q, &co, OQ_PLACEMENT_SAMPLES, &j->bc_pre, d)))
			return rc;
		co.tap = oq_bc_pre_tap(j->bc_pre);
	}
	t = step_begin();
	rc = oq_calibrate(j->m, &co, &j->ranges, d);
	step_end(j, OQ_ST_CALIBRATE, t);
	if (rc)
		return rc;
	j->o.calib.bc_pre = j->bc_pre;
	j->q.ranges = &j->ranges;
	/* the fold report's held-out ranges, which the placement measures with too: the per-fold
	 * statistics are freed before it runs */
	if ((rc = fold_ranges(j, d)))
		return rc;
	/* runtime-aware placement: which units stay float (needs the samples; not with --stats) */
	src = (oq_placement_src){.co = &j->co, .folds = &j->folds, .fr = j->fr, .fr_k = j->fr_k, .fr_total = j->fr_total,
				 .float_copy = placement_copy, .ctx = j};
	t = step_begin();
	rc = oq_placement_choose(&j->o, &src, &j->q, j->m, &j->placement, j->log, d);
	step_end(j, OQ_ST_PLACEMENT, t);
	return rc;
}

/* Analytic bias correction (the empirical one measures the quantized model: quantize()). */
static int correct_bias(job *j, oq_diag *d)
{
	return j->analytic ? oq_biascorr_analytic_fold(j->analytic, j->m->graph, &j->q, j->log, d) : OQ_OK;
}

static int quantize(job *j, oq_diag *d)
{
	oq_biascorr_models mk = {float_copy, quantize_pass, j};
	oq_model *qm = NULL;
	/* weight-only's correction was made while learning (learn_rounding) */
	int rc, empirical = j->o.bias_correction == OQ_BC_EMPIRICAL && !j->q.weight_only;
	step t;

	j->t_quantize = now();
	if (!j->quantize)
		return OQ_OK;
	t = step_begin();
	if (j->left_float) { /* no Q/DQ to correct */
		rc = quantize_pass(j, j->m, d);
		step_end(j, OQ_ST_QUANTIZE, t);
		return rc;
	}
	if (!empirical || !has_sample_folder(&j->o)) {
		if (empirical && !j->o.stats_in && j->o.verbose && j->log)
			fprintf(j->log, "bias correction: skipped: it needs calibration samples from a folder\n");
		rc = quantize_pass(j, j->m, d);
		step_end(j, OQ_ST_QUANTIZE, t);
		return rc;
	}
	rc = oq_biascorr_empirical(j->m, &mk, &j->q, &j->o.calib, j->o.bias_rounds, &j->wshift, j->log, &qm,
				   j->fr ? &j->fout : NULL, d);
	step_end(j, OQ_ST_BIAS, t);
	if (rc)
		return rc;
	oq_model_free(j->m);
	j->m = qm;
	return OQ_OK;
}

static int narrow(job *j, oq_diag *d)
{
	if (keeps_precision(j) || (j->hp == OQ_DT_FLOAT && j->hp_model == OQ_DT_FLOAT))
		return OQ_OK;
	return oq_precision_narrow(j->m, j->hp, d);
}

/* oq_fid_make_fn: the float model quantized as j's model is, with ranges r (quiet; no bias
 * correction: the fold SQNR is that of the uncorrected quantization). */
static int fold_model(void *ctx, const oq_ranges *r, oq_model **out, oq_diag *d)
{
	job *j = ctx;
	oq_opts keep = j->q;
	int rc;

	if ((rc = float_copy(j, out, d)))
		return rc;
	j->q.ranges = r;
	j->q.log = NULL;
	rc = quantize_pass(j, *out, d);
	j->q = keep;
	if (rc) {
		oq_model_free(*out);
		*out = NULL;
	}
	return rc;
}

/* oq_fid_make_fn: fold_model with every weight rounded to nearest (no learned rounding). */
static int fold_model_near(void *ctx, const oq_ranges *r, oq_model **out, oq_diag *d)
{
	job *j = ctx;
	const oq_wlearned_set *keep = j->q.learned;
	int rc;

	j->q.learned = NULL;
	rc = fold_model(ctx, r, out, d);
	j->q.learned = keep;
	return rc;
}

/* oq_target_set_fn: --overrides (first: the user's settings stand), then the raised points v. */
static int set_overrides(void *ctx, const oq_override *v, size_t n, oq_diag *d)
{
	job *j = ctx;
	oq_override *all = oq_calloc(j->n_ov + n + 1, sizeof *all);

	if (!all)
		return oq_err(d, OQ_ENOMEM, "target-sqnr: out of memory");
	if (j->n_ov)
		memcpy(all, j->ov, j->n_ov * sizeof *all);
	if (n)
		memcpy(all + j->n_ov, v, n * sizeof *all);
	free(j->tov);
	j->tov = all;
	j->q.overrides = all;
	j->q.n_overrides = j->n_ov + n;
	return OQ_OK;
}

/* The 16-bit type of a grid's 8-bit one (signedness kept). */
static int wide(int dtype)
{
	return dtype == OQ_DT_UINT8 || dtype == OQ_DT_UINT16 ? OQ_DT_UINT16 : OQ_DT_INT16;
}

/*
 * --target-sqnr: the search (target.h) leaves its overrides in j->q; the model is rewritten
 * again for them and the activation ranges are computed again from every fold on the grids
 * they now have.
 */
static int reach_target(job *j, oq_diag *d)
{
	oq_model *fm = NULL;
	oq_ranges r;
	int rc;

	if (!(j->o.target_sqnr > 0) || !j->quantize)
		return OQ_OK;
	if (j->folds.n_folds < 2)
		return oq_err(d, OQ_EINVAL, "target-sqnr: needs at least two calibration samples (one per fold)");
	if ((rc = float_copy(j, &fm, d)))
		return rc;
	rc = oq_target_search(fm, &j->co, &j->folds, &j->ranges, j->o.target_sqnr, wide(j->q.act_type),
			      wide(j->q.weight_type), fold_model, set_overrides, j, j->log, &j->target, d);
	oq_model_free(fm);
	fm = NULL;
	/* the model again, rewritten for its overrides now (16-bit types need opset 21) */
	if (!rc && !(rc = float_copy(j, &fm, d))) {
		oq_model_free(j->m);
		j->m = fm;
	}
	if (!rc && !(rc = oq_calibrate_held_out(j->m, &j->co, &j->folds, j->folds.n_folds, &r, d))) {
		oq_ranges_free(&j->ranges);
		j->ranges = r;
		j->q.ranges = &j->ranges;
	}
	if (!rc && j->o.report_path)
		rc = oq_target_json(&j->target, j->o.report_path, d);
	return rc;
}

/*
 * The fold report's held-out ranges, made from the per-fold statistics right after calibration
 * (on the model before the placement: a range depends on its tensor's statistics and grid, which
 * the placement does not change), so that the statistics, the largest thing calibration leaves,
 * are freed before the placement and bias correction run. --target-sqnr and analyze read them
 * later: then they stay.
 */
static int fold_ranges(job *j, oq_diag *d)
{
	oq_model *fm = NULL;
	step t;
	int rc;

	if (!j->quantize || j->o.job == OQ_JOB_ANALYZE || j->folds.n_folds < 2 || j->o.target_sqnr > 0 ||
	    j->left_float)
		return OQ_OK;
	t = step_begin();
	if ((rc = float_copy(j, &fm, d)))
		return rc;
	rc = oq_fidelity_ranges(fm, &j->co, &j->folds, &j->fr, d);
	oq_model_free(fm);
	if (!rc) {
		j->fr_k = j->folds.n_folds;
		j->fr_total = j->folds.n_total;
		oq_stats_free(&j->folds);
	}
	step_end(j, OQ_ST_FOLD, t);
	return rc;
}

/* The fold SQNR (fidelity.h) when calibration kept per-fold statistics. */
static int fidelity(job *j, oq_diag *d)
{
	oq_model *fm = NULL;
	step t;
	int rc;

	if (!j->quantize || j->left_float || (!j->fr && j->folds.n_folds < 2))
		return OQ_OK;
	t = step_begin();
	if ((rc = float_copy(j, &fm, d)))
		return rc;
	if (j->fr)
		rc = oq_fidelity_measure_ranges(fm, &j->co, j->fr, j->fr_k, j->fr_total,
						j->fout.state == 1 ? &j->fout : NULL, fold_model, j, &j->fid, d);
	else
		rc = oq_fidelity_measure(fm, &j->co, &j->folds, fold_model, j, &j->fid, d);
	oq_bc_float_cache_free(&j->fout);
	oq_model_free(fm);
	step_end(j, OQ_ST_FOLD, t);
	return rc;
}

static int encodings(job *j, oq_diag *d)
{
	size_t unused = 0;
	int rc;

	if (!j->quantize)
		return OQ_OK;
	if (j->o.import_encodings) {
		if ((rc = oq_encodings_verify(j->m, &j->enc, j->o.verbose ? j->log : NULL, &unused, d)))
			return rc;
		if (unused && j->log)
			fprintf(j->log, "quantize: %zu imported encodings had no Q/DQ to apply to\n", unused);
	}
	return OQ_OK;
}

/* After the model: a failed save leaves an old encodings file as it was. */
static int export_encodings(job *j, oq_diag *d)
{
	return j->quantize && j->o.export_encodings ? oq_encodings_export(j->m, j->o.export_encodings, d) : OQ_OK;
}

static int save(job *j, oq_diag *d)
{
	int rc;

	j->t_save = now();
	rc = oq_model_save(j->m, j->o.out_path, &j->o.save, &j->info, d);
	j->t_end = now();
	return rc;
}

/*
 * The summary's runtime lines: the coverage of the profile's runtime on the quantized model (MACs
 * from the float model's sizes the placement kept), every quantized op left in float with
 * --verbose, and how many tensors decision-safe placement kept float.
 */
static void summary_runtime(const job *j)
{
	oq_value_sizes sz = {0};
	oq_coverage cov = {0};
	uint8_t *keep = oq_calloc(j->m->graph->n_values + 1, 1);
	size_t nk;

	if (keep && !oq_placement_sizes(&j->placement, j->m->graph, &sz) &&
	    !oq_coverage_analyze(j->m, j->q.profile == OQ_PROFILE_TRT ? OQ_TARGET_TRT : OQ_TARGET_ORT,
				 sz.n ? &sz : NULL, &cov))
		oq_coverage_print(&cov, j->log, j->o.verbose);
	if (keep && (nk = oq_decision_safe_values(j->m->graph, keep, NULL)))
		fprintf(j->log, "quantize: %zu tensors kept float: comparisons and selections decide on them "
			"(decision-safe placement; --verbose names them)\n", nk);
	free(keep);
	oq_coverage_free(&cov);
	oq_value_sizes_free(&sz);
}

/* A model the runtime-aware placement left wholly float is said so, never a silent "wrote". */
static void summary_left_float(const job *j)
{
	const oq_placement *p = &j->placement;
	size_t nf = p->n_float_speed + p->n_float_fidelity;

	/* (the placement weighs the main graph's units; quantized bodies are not float) */
	if (!p->n_units || nf < p->n_units ||
	    count_op(j->m->graph, "QuantizeLinear") > count_op_in(j->m->graph, "QuantizeLinear", 0))
		return;
	if (!p->n_float_fidelity && p->within_margin)
		fprintf(j->log, "quantize: warning: the model was left float: ONNX Runtime runs it faster in float "
			"(no 8-bit placement of its %zu Conv/Gemm/MatMul units is expected to save %.0f%% or more); "
			"--prefer accuracy quantizes it anyway\n", p->n_units, 100 * (1 - OQ_PLACEMENT_MARGIN));
	else if (!p->n_float_fidelity)
		fprintf(j->log, "quantize: warning: the model was left float: ONNX Runtime runs it faster in float "
			"(each of its %zu Conv/Gemm/MatMul units is); --prefer accuracy quantizes it anyway\n",
			p->n_units);
	else if (p->within_margin)
		fprintf(j->log, "quantize: warning: the model was left float: of its %zu Conv/Gemm/MatMul units "
			"%zu lose more than %.1f dB in 8 bits, and the other %zu are not expected to save %.0f%% "
			"in integer kernels; --prefer accuracy quantizes it anyway\n", p->n_units, p->n_float_fidelity,
			OQ_PLACEMENT_BUDGET_DB, p->n_float_speed, 100 * (1 - OQ_PLACEMENT_MARGIN));
	else
		fprintf(j->log, "quantize: warning: the model was left float: of its %zu Conv/Gemm/MatMul units "
			"ONNX Runtime runs %zu faster in float, and %zu lose more than %.1f dB in 8 bits; "
			"--prefer accuracy quantizes it anyway\n", p->n_units, p->n_float_speed, p->n_float_fidelity,
			OQ_PLACEMENT_BUDGET_DB);
}

/* `onnxq analyze`: the ranked points on stdout, --json and --html files. */
static int analyze(job *j, oq_diag *d)
{
	oq_analysis a;
	oq_model *fm = NULL;
	int rc;

	if (!j->quantize || j->folds.n_folds < 2)
		return oq_err(d, OQ_EINVAL, "analyze: needs at least two calibration samples (one per fold)%s",
			      j->quantize ? "" : " and the quantize pass");
	if ((rc = float_copy(j, &fm, d)))
		return rc;
	rc = oq_analyze_with_nearest(fm, &j->co, &j->folds, &j->ranges, fold_model,
				     j->q.learned && j->q.learned->n ? fold_model_near : NULL, j, &a, d);
	oq_model_free(fm);
	if (rc)
		return rc;
	oq_analysis_print(&a, stdout, 20);
	if (j->o.json_path && (rc = oq_analysis_json(&a, j->o.json_path, d)))
		goto out;
	if (j->o.html_path && (rc = oq_analysis_html(&a, j->o.in_path, j->o.html_path, d)))
		goto out;
	if (j->log && j->o.json_path)
		fprintf(j->log, "analyze: wrote %s\n", j->o.json_path);
	if (j->log && j->o.html_path)
		fprintf(j->log, "analyze: wrote %s\n", j->o.html_path);
out:
	oq_analysis_free(&a);
	return rc;
}


/*
 * The fold SQNR of every output; below OQ_FOLD_WARN_DB a warning naming the three points with the
 * most error of their own and how to raise them.
 */
static void report_fidelity(const job *j)
{
	const oq_fidelity *f = &j->fid;
	FILE *log = j->log;
	double worst = INFINITY;
	size_t *r;

	if (!log || !j->quantize || j->q.weight_only)
		return;
	if (!f->k) {
		if (has_sample_folder(&j->o) && j->co.method != OQ_CALIB_EMA && !j->left_float)
			fprintf(log, "quantize: no fold SQNR: one calibration sample (folds need two)\n");
		return;
	}
	if (f->n < f->n_all)
		fprintf(log, "quantize: fold SQNR (held-out, %zu folds of %zu samples, %zu of them run):", f->k,
			f->n_all, f->n);
	else
		fprintf(log, "quantize: fold SQNR (held-out, %zu folds of %zu samples):", f->k, f->n);
	for (size_t o = 0; o < f->n_out; o++) {
		double db = oq_fidelity_db(f->r2[o], f->d2[o]);
		if (f->r2[o] == 0 && f->d2[o] == 0)
			continue; /* not a float32 output */
		fprintf(log, "%s '%s' ", o ? "," : "", f->out[o]);
		oq_fidelity_put_db(log, 0, db);
		fputs(" dB", log);
		worst = isnan(db) || db < worst ? db : worst;
	}
	fputc('\n', log);
	if (!(isnan(worst) || worst < OQ_FOLD_WARN_DB) || !(r = oq_fidelity_rank(f)))
		return;
	fprintf(log, "quantize: warning: fold SQNR below %d dB. Points with the most error of their own "
		"(held-out):", OQ_FOLD_WARN_DB);
	for (size_t i = 0; i < 3 && i < f->n_pt; i++) {
		const oq_fid_point *p = &f->pt[r[i]];
		fprintf(log, "%s '%s' (%s, ", i ? "," : "", p->name, p->weight ? "weight" : "activation");
		oq_fidelity_put_db(log, 0, oq_fidelity_db(p->r2, p->d2));
		fputs(" dB", log);
		fputc(')', log);
	}
	if (f->n_pt)
		fprintf(log, ". Give them 16 bits or keep them float with --overrides FILE.json, e.g. "
			"{\"tensors\": {\"%s\": {\"dtype\": \"int16\"}}} (or {\"skip\": true}), or let "
			"--target-sqnr %d raise the points that cost most until the folds reach it; "
			"`onnxq analyze` ranks every point by its effect on the outputs",
			f->pt[r[0]].name, OQ_FOLD_WARN_DB);
	fputs("\n", log);
	free(r);
}

/* Names on log every If/Loop/Scan body (any depth below g) the quantize pass kept float because
 * none of its values has a calibrated range (oq_quantize_body_observed). */
static void note_float_bodies(FILE *log, const oq_ranges *r, const oq_graph *g)
{
	for (size_t i = 0; g->n_subgraphs && i < g->n_nodes; i++)
		for (size_t k = 0; k < g->nodes[i]->n_attrs; k++) {
			const oq_node *n = g->nodes[i];
			const oq_attr *a = &n->attrs[k];
			for (size_t b = 0; b < (a->g ? 1 : a->graphs ? a->n : 0); b++) {
				const oq_graph *s = a->g ? a->g : a->graphs[b];
				if (oq_quantize_body_observed(r, s))
					note_float_bodies(log, r, s);
				else
					fprintf(log, "quantize: note: %s node '%s': body '%s' (attribute %s) never ran "
						"during calibration and keeps float; give samples that take it\n",
						n->op_type, n->name, s->name ? s->name : "", a->name);
			}
		}
}

/* Main-graph nodes that hold subgraphs (If, Loop, Scan). */
static size_t count_control(const oq_graph *g)
{
	return count_op_in(g, "If", 0) + count_op_in(g, "Loop", 0) + count_op_in(g, "Scan", 0);
}

static void summary(const job *j)
{
	const oq_graph *g = j->m->graph;
	FILE *log = j->log;
	size_t fl1, in1;

	if (!log)
		return;
	init_bytes(g, &fl1, &in1);
	if (j->target.db > 0)
		fprintf(log, "quantize: --target-sqnr %.1f dB %s in %zu rounds (%.1f s): %zu points raised (16-bit or "
			"float); %.1f %% of the MACs stay 8-bit\n", j->target.db,
			j->target.reached ? "reached on the folds" : "NOT reached (the best model found is written)",
			j->target.rounds, j->target.seconds, j->target.n_ov,
			j->target.macs > 0 ? 100 * j->target.macs8 / j->target.macs : 100.0);
	if (j->target.tries_back)
		fprintf(log, "quantize: --target-sqnr: %zu raised points went back to 8 bits (%zu measurements)\n",
			j->target.given_back, j->target.tries_back);
	report_fidelity(j);
	/* (a model the placement left float on purpose is said so by summary_left_float) */
	if (j->quantize && !count_op(g, "QuantizeLinear") && !count_op(g, "DequantizeLinear") &&
	    !(j->placement.n_units &&
	      j->placement.n_float_speed + j->placement.n_float_fidelity >= j->placement.n_units)) {
		size_t nc = count_control(g);
		if (nc && j->q.weight_only)
			fprintf(log, "quantize: warning: nothing was quantized: no node of the main graph or of "
				"its %zu If/Loop/Scan nodes' bodies reads a constant weight of the --op-types "
				"(--verbose names weights that stay float); the model is written unquantized\n", nc);
		else if (nc)
			fprintf(log, "quantize: warning: nothing was quantized: the main graph's %zu If/Loop/Scan "
				"nodes hold the computation in subgraphs, and no body got a pair (bodies that "
				"never ran during calibration keep float: give samples that take them); the "
				"model is written unquantized\n", nc);
		else
			fprintf(log, "quantize: warning: nothing was quantized: no node of the main graph is one "
				"quantize handles (or --op-types, --exclude or --overrides left none); the model "
				"is written unquantized\n");
	}
	if (j->quantize)
		fprintf(log,
			"quantize: wrote %s: %zu QuantizeLinear, %zu DequantizeLinear; initializers "
			"%.2f MB float + %.2f MB int -> %.2f MB float + %.2f MB int\n",
			j->o.out_path, count_op(g, "QuantizeLinear"), count_op(g, "DequantizeLinear"), j->fl0 / 1e6,
			j->in0 / 1e6, fl1 / 1e6, in1 / 1e6);
	else if (j->o.verbose)
		fprintf(log, "convert: wrote %s (%zu nodes)\n", j->o.out_path, g->n_nodes);
	if (j->quantize)
		summary_left_float(j);
	if (j->quantize && j->q.ranges && !j->q.weight_only)
		note_float_bodies(log, j->q.ranges, g);
	if (j->hp != OQ_DT_FLOAT && !keeps_precision(j))
		fprintf(log, "%s: a %s model, computed in float32 and written in %s%s\n",
			j->o.job == OQ_JOB_CONVERT ? "convert" : "quantize", oq_dtype_name(j->hp_model),
			oq_dtype_name(j->hp), j->quantize ? " (Q/DQ scales too, opset >= 19)" : "");
	if (j->quantize && !j->q.weight_only)
		summary_runtime(j);
	if (j->info.auto_external)
		fprintf(log, "onnxq: %s: model is over 2 GB: wrote %zu tensors to %s\n",
			j->o.job == OQ_JOB_CONVERT ? "convert" : "quantize", j->info.n_external, j->info.data_name);
	if (j->quantize && j->o.bias_correction == OQ_BC_EMPIRICAL && j->o.stats_in)
		fprintf(log, "quantize: no bias correction with --stats (no samples to measure on): the model "
			"of --calib DIR --no-bias-correction\n");
	if (j->o.verbose)
		fprintf(log,
			"timings: load+rewrite %.3f s, learn rounding %.3f s, calibrate %.3f s, quantize %.3f s, "
			"save %.3f s\n",
			j->t_learn - j->t0, j->t_calibrate - j->t_learn, j->t_quantize - j->t_calibrate,
			j->t_save - j->t_quantize, j->t_end - j->t_save);
	if (j->o.verbose) {
		fputs("steps (wall / CPU s):", log);
		for (int s = 0; s < OQ_ST_N; s++)
			if (j->sw[s] > 0)
				fprintf(log, " %s %.3f / %.3f,", stage_names[s], j->sw[s], j->sc[s]);
		fprintf(log, " whole command %.3f / %.3f\n", now() - j->t0, cpu_now());
		fputs("model runs (whole / partial):", log);
		for (int s = 0, first = 1; s < OQ_ST_N; s++)
			if (j->sw[s] > 0) {
				fprintf(log, "%s %s %zu / %zu", first ? "" : ",", stage_names[s], j->rw[s], j->rp[s]);
				first = 0;
			}
		fputc('\n', log);
	}
}

/* The worst output's fold SQNR (fidelity.h) of a job that measured it; NaN when it did not. */
static double fold_db(const job *j)
{
	double w = NAN;

	for (size_t i = 0; i < j->fid.n_out; i++)
		if (j->fid.r2[i] > 0) {
			double v = oq_fidelity_db(j->fid.r2[i], j->fid.d2[i]);
			if (isnan(w) || v < w)
				w = v;
		}
	return j->fid.k ? w : NAN;
}

/* The 8-bit share of the MACs a --target-sqnr search left (1 without one). */
static double share8(const job *j)
{
	return j->target.db > 0 && j->target.macs > 0 ? j->target.macs8 / j->target.macs : 1.0;
}

/*
 * Is job a better than job b for the guard? The higher worst-output fold SQNR (a NaN never
 * wins); with --target-sqnr, the search's own order first: reaching the target, then the
 * larger 8-bit share of the MACs (the fold SQNR only breaks ties). Strict: equal is not better.
 */
static int guard_better(const job *a, const job *b)
{
	if (a->target.db > 0) {
		if (a->target.reached != b->target.reached)
			return a->target.reached;
		if (share8(a) != share8(b))
			return share8(a) > share8(b);
	}
	return fold_db(a) > fold_db(b);
}

/* *j becomes alt (a job of the same run that a guard preferred); j's own is freed. */
static void take_job(job *j, job *alt)
{
	/* the kept job logs as the run asked (its timings are its own) */
	alt->log = j->log;
	alt->o.quiet = j->o.quiet;
	alt->o.verbose = j->o.verbose;
	job_free(j);
	*j = *alt;
	/* the pointers into the job itself follow it */
	if (j->q.learned)
		j->q.learned = &j->learned;
	if (j->q.ranges)
		j->q.ranges = &j->ranges;
	if (j->co.grid_ctx)
		j->co.grid_ctx = &j->q;
}

/*
 * The model-level guard of --cle and W8A8 --weight-rounding (both change the weights before
 * calibration): the job runs again without them (no CLE, nearest rounding) up to the fold
 * SQNR, and whichever is better (guard_better: the worst-output fold SQNR, held-out:
 * fidelity.h; with --target-sqnr, first the target reached and the 8-bit MAC share, each job
 * running its own search) goes on; the options must win strictly. The folds hold out the
 * ranges; a learned rounding was learned on every sample (its own per-layer guard held some
 * out). Needs the fold measurement (a sample folder); costs a second load, calibration, search,
 * quantization (bias correction included) and fold measurement, and both jobs' memory at once.
 * *j becomes the job kept.
 */
static int guard_weights(job *j, const oq_pipeline_opts *o, oq_diag *d)
{
	oq_pipeline_opts alt_o = *o;
	job alt;
	double with, without;
	int rc, keep;

	if (!j->quantize || j->q.weight_only || j->fid.k < 2 ||
	    (!j->q.cle && j->q.weight_rounding == OQ_WROUND_NEAREST))
		return OQ_OK;
	alt_o.q.cle = 0;
	alt_o.q.weight_rounding = OQ_WROUND_NEAREST;
	alt_o.quiet = 1;
	alt_o.verbose = 0;
	alt_o.report_path = NULL;
	job_init(&alt, &alt_o);
	if ((rc = load(&alt, d)) || (rc = widen(&alt, d)) || (rc = rewrite(&alt, d)) ||
	    (rc = learn_rounding(&alt, d)) || (rc = calibrate(&alt, d)) || (rc = reach_target(&alt, d)) ||
	    (rc = correct_bias(&alt, d)) || (rc = quantize(&alt, d)) || (rc = fidelity(&alt, d))) {
		job_free(&alt);
		return rc;
	}
	with = fold_db(j);
	without = fold_db(&alt);
	keep = guard_better(j, &alt);
	if (j->log) {
		fprintf(j->log, "quantize: fold SQNR with %s%s%s %.2f dB, without %.2f dB", j->q.cle ? "--cle" : "",
			j->q.cle && j->q.weight_rounding != OQ_WROUND_NEAREST ? " and " : "",
			j->q.weight_rounding != OQ_WROUND_NEAREST ? "learned rounding" : "", with, without);
		if (j->target.db > 0)
			fprintf(j->log, "; --target-sqnr %s with, %s without; 8-bit MACs %.1f %% with, %.1f %% without",
				j->target.reached ? "reached" : "not reached", alt.target.reached ? "reached" : "not reached",
				100 * share8(j), 100 * share8(&alt));
		fprintf(j->log, ": %s\n", keep ? "kept" : "not kept (the model without them is written)");
	}
	if (!keep && j->o.report_path && (rc = oq_target_json(&alt.target, j->o.report_path, d))) {
		job_free(&alt);
		return rc;
	}
	if (!keep) {
		take_job(j, &alt);
		return OQ_OK;
	}
	job_free(&alt);
	return OQ_OK;
}

/*
 * The model-level guard of weight-only --awq. Its scales are judged layer by layer (awq.h), but
 * a layer's output error is not the model's, and learned rounding on the scaled weights may end
 * worse than on the others: the job runs again without --awq, both quantized models run the
 * calibration samples (at most OQ_MEASURE_SAMPLES, measure.h) next to the float model, and the
 * scales stay only when the output SQNR gains: its mean over the samples strictly higher, its
 * lowest sample not lower (oq_bc_sqnr_better). Costs a second job (its learned rounding
 * included) and three runs of the samples; nothing when no layer was scaled. *j becomes the job
 * kept.
 */
static int guard_awq(job *j, const oq_pipeline_opts *o, oq_diag *d)
{
	const unsigned all = (1u << OQ_BC_FOLDS) - 1;
	oq_pipeline_opts alt_o = *o;
	oq_bc_quantized runs[2];
	oq_bc_targets b;
	oq_model *fm = NULL;
	job alt;
	int rc, keep;

	if (!j->quantize || !j->q.weight_only || !j->q.awq || !j->awq_scaled || !has_sample_folder(&j->o))
		return OQ_OK;
	alt_o.q.awq = 0;
	alt_o.quiet = 1;
	alt_o.verbose = 0;
	job_init(&alt, &alt_o);
	memset(runs, 0, sizeof runs);
	memset(&b, 0, sizeof b);
	if ((rc = load(&alt, d)) || (rc = widen(&alt, d)) || (rc = rewrite(&alt, d)) || (rc = learn_rounding(&alt, d)) ||
	    (rc = quantize(&alt, d)) || (rc = float_copy(j, &fm, d)))
		goto out;
	runs[0] = (oq_bc_quantized){.qm = j->m, .folds = all};
	runs[1] = (oq_bc_quantized){.qm = alt.m, .folds = all};
	if ((rc = oq_bc_measure(fm, NULL, runs, 2, &j->o.calib, &b, NULL, d)))
		goto out;
	keep = oq_bc_sqnr_better(&runs[0].sqnr, &runs[1].sqnr, all);
	if (j->log)
		fprintf(j->log, "awq: calibration SQNR with the scales %.2f / %.2f dB (lowest / mean), without "
			"%.2f / %.2f dB: %s\n", oq_bc_sqnr_min(&runs[0].sqnr, all), oq_bc_sqnr_mean(&runs[0].sqnr, all),
			oq_bc_sqnr_min(&runs[1].sqnr, all), oq_bc_sqnr_mean(&runs[1].sqnr, all),
			keep ? "kept" : "not kept (the model without them is written)");
	if (!keep) {
		take_job(j, &alt);
		goto out;
	}
	job_free(&alt);
out:
	if (rc)
		job_free(&alt);
	oq_bc_sqnr_free(&runs[0].sqnr);
	oq_bc_sqnr_free(&runs[1].sqnr);
	oq_bc_targets_free(&b);
	oq_model_free(fm);
	return rc;
}

int oq_pipeline_run(const oq_pipeline_opts *o, oq_diag *d)
{
	job j;
	int rc;

	if ((rc = oq_pipeline_opts_check(o, d)))
		return rc;
	job_init(&j, o);
	if ((rc = load(&j, d)) || (rc = widen(&j, d)) || (rc = rewrite(&j, d)))
		goto out;
	if (j.o.job == OQ_JOB_CALIBRATE) {
		rc = write_statistics(&j, d); /* `onnxq calibrate` ends here */
		goto out;
	}
	if (j.o.job == OQ_JOB_ANALYZE) {
		if (!(rc = learn_rounding(&j, d)) && !(rc = calibrate(&j, d)))
			rc = analyze(&j, d); /* `onnxq analyze` ends here */
		goto out;
	}
	if ((rc = learn_rounding(&j, d)) || (rc = calibrate(&j, d)) ||
	    (rc = reach_target(&j, d)) || (rc = correct_bias(&j, d)) || (rc = quantize(&j, d)) ||
	    (rc = fidelity(&j, d)) || (rc = guard_weights(&j, o, d)) || (rc = guard_awq(&j, o, d)) || (rc = narrow(&j, d)) ||
	    (rc = encodings(&j, d)) || (rc = save(&j, d)) || (rc = export_encodings(&j, d)))
		goto out;
	summary(&j);
out:
	job_free(&j);
	return rc;
}
