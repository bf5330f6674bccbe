/*
 * options.c - the pipeline's options: defaults, the rules that make a set
 * of options consistent, and what the defaults resolve to (pipeline.h).
 *
 * The rules are checked in a fixed order, so one command line always gets
 * the same first error, and before any file is touched.
 */
#include "src/pipeline/pipeline.h"

#include <string.h>

#include "src/quant/qparams.h"

void oq_pipeline_opts_init(oq_pipeline_opts *o, int job)
{
	memset(o, 0, sizeof *o);
	o->job = job;
	oq_opts_init(&o->q);
	o->calib.method = OQ_PIPELINE_METHOD_DEFAULT;
	o->bias_correction = OQ_BC_DEFAULT;
	o->bias_rounds = -1;
	o->log = stderr;
	if (job == OQ_JOB_CONVERT)
		o->run.list = ""; /* no rewrites unless run.list names them */
}

static const char *job_name(int job)
{
	return job == OQ_JOB_CALIBRATE ? "calibrate" : job == OQ_JOB_CONVERT ? "convert" : "quantize";
}

/* Does the job run the quantize pass? */
static int quantizes(const oq_pipeline_opts *o)
{
	return o->job == OQ_JOB_QUANTIZE && oq_pass_selected(&o->run, "quantize");
}

/* The first rule o breaks, or NULL. */
static const char *broken_rule(const oq_pipeline_opts *o)
{
	const oq_opts *q = &o->q;
	const oq_calib_opts *c = &o->calib;
	int bc_given = o->bias_correction == OQ_BC_ANALYTIC || o->bias_correction == OQ_BC_EMPIRICAL;

	if (!o->in_path)
		return "missing MODEL";
	if (!o->out_path)
		return o->job == OQ_JOB_CALIBRATE ? "missing -o STATS" : "missing -o OUT";
	if (o->job == OQ_JOB_CALIBRATE) {
		if (!c->source)
			return "missing --calib DIR (the samples to calibrate on)";
		if (q->weight_only)
			return "--weight-only needs no calibration";
	}
	if (o->stats_in && c->source)
		return "--stats and --calib exclude each other (the statistics replace the samples)";
	if (o->stats_in && q->weight_only)
		return "--weight-only needs no --stats (weights are not calibrated)";
	if (q->block_size && q->granularity != OQ_GRAN_BLOCK)
		return "--block-size needs --granularity block";
	if (q->weight_only && c->source)
		return "--weight-only needs no --calib (weights are not calibrated)";
	if (c->ema_constant > 0 && c->method != OQ_CALIB_EMA)
		return "--ema-constant applies to --method ema";
	if (c->percentile > 0 && c->method != OQ_CALIB_PERCENTILE)
		return "--percentile applies to --method percentile";
	if (c->method != OQ_PIPELINE_METHOD_DEFAULT && q->weight_only)
		return "--method needs activation calibration; drop --weight-only";
	if (bc_given && q->weight_only)
		return "--bias-correction measures the shift on calibration data; drop --weight-only";
	if (bc_given && (o->stats_in || o->job == OQ_JOB_CALIBRATE))
		return "--bias-correction needs the samples (--calib DIR): statistics files carry no "
		       "bias-correction sums";
	if (q->op_types && !q->weight_only)
		return "--op-types applies to --weight-only";
	if (q->profile == OQ_PROFILE_TRT && (q->act_type != OQ_DT_UINT8 || q->act_sym))
		return "--profile trt fixes activations to symmetric int8; drop --act-type/--act-symmetric";
	if (q->profile == OQ_PROFILE_TRT && q->weight_type != OQ_DT_INT8)
		return "--profile trt fixes weights to symmetric int8; drop --weight-type";
	if (q->act_sym == OQ_ACT_SYM_UNSIGNED && q->act_type != OQ_DT_UINT8 && q->act_type != OQ_DT_UINT16)
		return "--act-symmetric=unsigned needs --act-type uint8 or uint16 (zero point 0 at the bottom "
		       "of an unsigned grid)";
	if (q->weight_type == OQ_DT_FLOAT8E4M3FN) {
		if (q->weight_asym)
			return "float8e4m3fn weights are symmetric (scale = amax/448); drop --weight-asymmetric";
		if (q->reduce_range)
			return "--reduce-range is for 8-bit integer weights; drop it with --weight-type "
			       "float8e4m3fn";
		if (q->granularity == OQ_GRAN_BLOCK)
			return "float8e4m3fn weights are per tensor or per channel; use --granularity channel or "
			       "tensor";
	}
	if (quantizes(o) && !q->weight_only && !c->source && !o->stats_in)
		return "activation quantization needs calibration data: give --calib DIR (NNN.npy samples or "
		       "NNN/<input>.npy folders), --calib random:N to calibrate on random data (not "
		       "representative), or --weight-only";
	return NULL;
}

int oq_pipeline_opts_check(const oq_pipeline_opts *o, oq_diag *d)
{
	const char *why = broken_rule(o);
	return why ? oq_err(d, OQ_EUSAGE, "%s: %s", job_name(o->job), why) : OQ_OK;
}

void oq_pipeline_opts_resolve(const oq_pipeline_opts *o, oq_pipeline_opts *out)
{
	*out = *o;
	/* measured best overall on the PaddleOCR and torchvision models (README "Calibration methods") */
	if (out->calib.method == OQ_PIPELINE_METHOD_DEFAULT)
		out->calib.method = OQ_CALIB_MSE;
	/* measured on the corpus over calibration splits (README "Bias correction"); nothing to
	 * correct without calibration */
	if (out->bias_correction == OQ_BC_DEFAULT)
		out->bias_correction = out->job == OQ_JOB_QUANTIZE && !out->q.weight_only ? OQ_BC_EMPIRICAL : OQ_BC_OFF;
	if (out->q.act_type == OQ_DT_FLOAT8E4M3FN)
		out->q.act_sym = OQ_ACT_SYM; /* FP8 has one grid: symmetric, zero point 0, amax / 448 */
	if (out->q.profile == OQ_PROFILE_TRT) {
		out->q.act_type = OQ_DT_INT8;
		out->q.act_sym = OQ_ACT_SYM;
	}
}
