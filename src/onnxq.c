/*
 * onnxq.c - the public API (onnxq.h) over the library's own calls: a model
 * is an oq_model, options are the command line's option table
 * (oq_pipeline_args), quantizing is oq_pipeline_run, comparing oq_compare.
 */
#include "src/onnxq.h"

#include <stdlib.h>
#include <string.h>

#include "src/io/onnx_io.h"
#include "src/oq.h"
#include "src/pipeline/compare.h"
#include "src/pipeline/pipeline.h"

#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(ONNXQ_OK, OQ_OK) && SAME(ONNXQ_EUSAGE, OQ_EUSAGE) && SAME(ONNXQ_EINVAL, OQ_EINVAL) &&
		       SAME(ONNXQ_EUNSUP, OQ_EUNSUP) && SAME(ONNXQ_EIO, OQ_EIO) && SAME(ONNXQ_ENOMEM, OQ_ENOMEM) &&
		       SAME(ONNXQ_ECHECK, OQ_ECHECK),
	       "onnxq.h status codes are oq.h's");
_Static_assert(sizeof ((onnxq_error *)0)->message == sizeof ((oq_diag *)0)->msg,
	       "onnxq_error.message holds an oq_diag message");

struct onnxq_model {
	oq_model *m;
};

struct onnxq_options {
	oq_pipeline_args a;
};

/* Copies d's outcome (status rc) into err (may be NULL); returns rc. */
static int report(const oq_diag *d, int rc, onnxq_error *err)
{
	if (err) {
		err->status = rc;
		snprintf(err->message, sizeof err->message, "%s", rc && d->count ? d->msg : oq_status_name(rc));
	}
	return rc;
}

const char *onnxq_version(void)
{
	return oq_version();
}

const char *onnxq_status_name(int status)
{
	return oq_status_name(status);
}

int onnxq_model_load(const char *path, onnxq_model **out, onnxq_error *err)
{
	onnxq_model *m = malloc(sizeof *m);
	oq_diag d;
	int rc;

	oq_diag_init(&d);
	*out = NULL;
	if (!m)
		return report(&d, oq_err(&d, OQ_ENOMEM, "load: out of memory"), err);
	if ((rc = oq_model_load(path, &m->m, &d))) {
		free(m);
		return report(&d, rc, err);
	}
	*out = m;
	return report(&d, OQ_OK, err);
}

int onnxq_model_save(const onnxq_model *m, const char *path, onnxq_error *err)
{
	oq_diag d;

	oq_diag_init(&d);
	return report(&d, oq_model_save(m->m, path, NULL, NULL, &d), err);
}

void onnxq_model_free(onnxq_model *m)
{
	if (!m)
		return;
	oq_model_free(m->m);
	free(m);
}

onnxq_options *onnxq_options_new(void)
{
	onnxq_options *o = malloc(sizeof *o);
	if (o)
		oq_pipeline_args_init(&o->a, OQ_JOB_QUANTIZE);
	return o;
}

void onnxq_options_free(onnxq_options *o)
{
	if (!o)
		return;
	oq_pipeline_args_free(&o->a);
	free(o);
}

int onnxq_options_set(onnxq_options *o, const char *name, const char *value, onnxq_error *err)
{
	oq_diag d;

	oq_diag_init(&d);
	return report(&d, oq_pipeline_args_set(&o->a, name, value, &d), err);
}

int onnxq_quantize(const char *in_path, const char *out_path, const onnxq_options *o, onnxq_error *err)
{
	oq_pipeline_opts p;
	oq_diag d;

	oq_diag_init(&d);
	if (o)
		p = o->a.p;
	else
		oq_pipeline_opts_init(&p, OQ_JOB_QUANTIZE);
	p.in_path = in_path;
	p.out_path = out_path;
	return report(&d, oq_pipeline_run(&p, &d), err);
}

int onnxq_compare(onnxq_model *ref, onnxq_model *test, const char *data_dir, int threads, onnxq_comparison *out,
		  onnxq_error *err)
{
	oq_compare_opts co = {.data_dir = data_dir, .threads = threads};
	oq_compare_summary sum;
	oq_diag d;
	int rc;

	oq_diag_init(&d);
	memset(out, 0, sizeof *out);
	if ((rc = oq_compare(ref->m, test->m, &co, NULL, &sum, &d)))
		return report(&d, rc, err);
	out->sqnr_min_db = sum.sqnr_min;
	out->sqnr_mean_db = sum.sqnr_mean;
	out->n_outputs = sum.n_outputs;
	out->n_samples = sum.n_samples;
	return report(&d, OQ_OK, err);
}
