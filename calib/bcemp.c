/*
 * bcemp.c - empirical bias correction, the measurement (see bcemp.h).
 *
 * For layer i with measured output y (channel axis 1 for Conv and
 * ConvTranspose, the last axis for Gemm and MatMul) and fold f:
 *     sum_f[f][m] = sum of y_float[..., m, ...] over the fold's samples and positions
 *     sum_q[f][m] = the same in the quantized model
 * so sum_q / n_q - sum_f / n_f is the mean shift of channel m that the
 * quantized model shows on the fold's samples (on all calibration samples
 * when the folds' sums are added), whatever its cause (weight rounding,
 * upstream activation rounding and clipping). The quantized model's y is
 * the float value before its QuantizeLinear, so the shift is
 * pre-activation and a bias change moves it one to one.
 *
 * Output SQNR per sample and float output, as `onnxq compare` computes it:
 *     SQNR = 10 log10( sum r^2 / sum (r - q)^2 )  dB,  r the float model's
 * (an exact output counts as OQ_BCE_SQNR_CAP).
 */
#include "bcemp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"

/* One model's side of the measurement: the observer's context. */
typedef struct side {
	oq_bce *b;
	const oq_value **vals; /* per layer: the measured value in this model, or NULL */
	int q;                 /* 1: a quantized model (sum_q), 0: the float one (sum_f) */
	int fold;              /* the fold of the sample being run */
	int on;                /* 0: add nothing (the float sums are taken in one pass only) */
} side;

/* Evaluated when the executor plans its fusion: independent of `on`. */
static int want(void *ctx, const oq_value *v)
{
	const side *s = ctx;
	for (size_t i = 0; i < s->b->n; i++)
		if (s->vals[i] == v)
			return 1;
	return 0;
}

/* Adds t to layer l's per-channel sums of fold f (or marks l failed when t does not fit). */
static void add(oq_bce_layer *l, const oq_rt *t, int q, int f)
{
	double *S = (q ? l->sum_q : l->sum_f) + (size_t)f * l->M;
	uint64_t *cnt = q ? &l->n_q[f] : &l->n_f[f];
	const float *x = t->data;
	size_t outer = 1, inner = 1;
	int axis;

	if (t->kind != OQ_RT_TENSOR || t->dtype != OQ_DT_FLOAT || t->rank < (l->ch_last ? 1 : 2)) {
		l->failed = 1;
		return;
	}
	axis = l->ch_last ? t->rank - 1 : 1;
	if ((size_t)t->dims[axis] != l->M) {
		l->failed = 1;
		return;
	}
	for (int k = 0; k < axis; k++)
		outer *= (size_t)t->dims[k]; /* factors of nelem, which is in memory */
	for (int k = axis + 1; k < t->rank; k++)
		inner *= (size_t)t->dims[k];
	for (size_t o = 0; o < outer; o++)
		for (size_t m = 0; m < l->M; m++) {
			const float *p = x + (o * l->M + m) * inner;
			double a = 0;
			for (size_t j = 0; j < inner; j++)
				a += p[j];
			S[m] += a;
		}
	*cnt += (uint64_t)(outer * inner);
}

static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	side *s = ctx;
	if (!s->on)
		return 0;
	for (size_t i = 0; i < s->b->n; i++)
		if (s->vals[i] == v && !s->b->v[i].failed)
			add(&s->b->v[i], t, s->q, s->fold);
	return 0;
}

/* SQNR of q against reference r (float32, same size), capped; NaN when they do not fit. */
static double sqnr(const oq_rt *r, const oq_rt *q)
{
	double r2 = 0, d2 = 0, db;
	const float *a = r->data, *b = q->data;

	if (r->kind != OQ_RT_TENSOR || q->kind != OQ_RT_TENSOR || r->dtype != OQ_DT_FLOAT ||
	    q->dtype != OQ_DT_FLOAT || r->nelem != q->nelem)
		return NAN;
	for (size_t i = 0; i < r->nelem; i++) {
		double e = (double)a[i] - (double)b[i];
		r2 += (double)a[i] * a[i];
		d2 += e * e;
	}
	if (d2 == 0)
		return OQ_BCE_SQNR_CAP;
	db = 10 * log10(r2 / d2);
	return db > OQ_BCE_SQNR_CAP ? OQ_BCE_SQNR_CAP : db;
}

static void release(oq_rt *t, size_t n)
{
	for (size_t k = 0; t && k < n; k++)
		oq_rt_release(&t[k]);
}

void oq_bce_cache_free(oq_bce_cache *c)
{
	size_t limit = c->limit;
	release(c->out, c->n * c->nout);
	free(c->out);
	memset(c, 0, sizeof *c);
	c->limit = limit;
}

/*
 * Keeps the float outputs of sample i (moved from of, or copied when
 * borrowed): 0, 1 when they would pass the limit, or OQ_ENOMEM.
 */
static int keep(oq_bce_cache *c, size_t i, oq_rt *of)
{
	for (size_t k = 0; k < c->nout; k++) {
		oq_rt *t = &c->out[i * c->nout + k];
		if (c->bytes + of[k].nbytes > (c->limit ? c->limit : OQ_BCE_CACHE_BYTES))
			return 1;
		if (of[k].borrowed) {
			int rc = oq_rt_copy(t, &of[k]);
			if (rc)
				return rc;
		} else {
			*t = of[k];
			memset(&of[k], 0, sizeof of[k]);
		}
		c->bytes += t->nbytes;
	}
	return 0;
}

/* Adds the SQNR of each output of q against ref (sample i, fold f) to s. */
static void add_sqnr(oq_bce_sqnr *s, size_t i, int f, const oq_rt *ref, const oq_rt *q, size_t nout)
{
	double sum = 0;
	size_t n = 0;
	for (size_t k = 0; k < nout; k++) {
		double db = sqnr(&ref[k], &q[k]);
		if (!isnan(db)) {
			s->sum[f] += db;
			s->n[f]++;
			s->min[f] = fmin(s->min[f], db);
			sum += db;
			n++;
		}
	}
	s->per[i] = n ? sum / (double)n : NAN;
}

int oq_bce_measure(oq_model *ref, oq_node *const *ref_nodes, oq_bce_run *runs, size_t n_runs,
		   const oq_calib_opts *o, oq_bce *b, oq_bce_cache *cache, oq_diag *d)
{
	oq_exec *ef = NULL, *eq = NULL;
	oq_exec_opts eo = {.threads = o->threads};
	oq_samples s = {0};
	oq_rt *in = NULL, *of = NULL, *oqs = NULL;
	side sf = {b, NULL, 0, 0, 0}, sq = {b, NULL, 1, 0, 1};
	size_t nin = 0, nout = 0, n = 0, sums = n_runs;
	/* float only: fill the cache; float sums already taken (a float-only call); outputs kept */
	int fonly = !n_runs && cache && cache->state == 0, fsums = cache && cache->state != 0,
	    cached = cache && cache->state == 1, rc;

	for (size_t i = 0; i < b->n; i++) {
		oq_bce_layer *l = &b->v[i];
		if (!fsums) {
			memset(l->sum_f, 0, OQ_BCE_FOLDS * l->M * sizeof *l->sum_f);
			memset(l->n_f, 0, sizeof l->n_f);
			l->failed = !ref_nodes[i] || !ref_nodes[i]->n_outputs;
		}
		memset(l->sum_q, 0, OQ_BCE_FOLDS * l->M * sizeof *l->sum_q);
		memset(l->n_q, 0, sizeof l->n_q);
	}
	for (size_t r = 0; r < n_runs; r++) {
		for (int f = 0; f < OQ_BCE_FOLDS; f++) {
			runs[r].sqnr.min[f] = OQ_BCE_SQNR_CAP;
			runs[r].sqnr.sum[f] = 0;
			runs[r].sqnr.n[f] = 0;
		}
		runs[r].sqnr.per = NULL;
		runs[r].sqnr.n_per = 0;
		if (!runs[r].nodes)
			continue;
		if (sums != n_runs)
			return oq_err(d, OQ_EINVAL, "bias correction: two runs measure sums (internal error)");
		sums = r;
		for (size_t i = 0; i < b->n; i++)
			b->v[i].failed |= !runs[r].nodes[i] || !runs[r].nodes[i]->n_outputs;
	}
	if (!o->source || !strncmp(o->source, "random:", 7))
		return oq_err(d, OQ_EUNSUP, "bias correction: needs calibration samples from a folder");
	sf.vals = oq_calloc(b->n ? b->n : 1, sizeof *sf.vals);
	sq.vals = oq_calloc(b->n ? b->n : 1, sizeof *sq.vals);
	if (!sf.vals || !sq.vals) {
		rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
		goto out;
	}
	for (size_t i = 0; i < b->n; i++)
		if (!b->v[i].failed) {
			sf.vals[i] = ref_nodes[i]->outputs[0];
			if (sums < n_runs)
				sq.vals[i] = runs[sums].nodes[i]->outputs[0];
		}
	if (!cached) {
		if ((rc = oq_exec_new(ref, &eo, &ef, d)))
			goto out;
		oq_exec_set_observer(ef, observe, &sf);
		oq_exec_set_observe_want(ef, want);
	}
	/*
	 * Pass r runs quantized model r (pass 0 of a float-only call: none),
	 * one model at a time: executors are most of the memory (vit_b_16: ~0.45
	 * GB each). The float model runs alongside unless its outputs are kept.
	 */
	for (size_t r = 0; r < (fonly ? 1 : n_runs); r++) {
		oq_bce_sqnr *q = fonly ? NULL : &runs[r].sqnr;
		unsigned folds = fonly ? (1u << OQ_BCE_FOLDS) - 1 : runs[r].folds;
		oq_exec *e0;
		/* the float sums once: in a float-only call or alongside the quantized sums */
		sf.on = fonly || (!fsums && r == sums);
		if (!fonly) {
			if ((rc = oq_exec_new(runs[r].qm, &eo, &eq, d)))
				goto out;
			if (r == sums) {
				oq_exec_set_observer(eq, observe, &sq);
				oq_exec_set_observe_want(eq, want);
			}
		}
		e0 = eq ? eq : ef;
		if (!in) {
			nin = oq_exec_n_inputs(e0);
			nout = oq_exec_n_outputs(e0);
			if ((rc = oq_samples_scan(o->source, e0, &s, d)))
				goto out;
			n = o->limit && o->limit < s.n ? o->limit : s.n;
			in = oq_calloc(nin ? nin : 1, sizeof *in);
			of = oq_calloc(nout ? nout : 1, sizeof *of);
			oqs = oq_calloc(nout ? nout : 1, sizeof *oqs);
			if (!in || !of || !oqs) {
				rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
				goto out;
			}
			if (cached && (cache->n != n || cache->nout != nout)) {
				rc = oq_err(d, OQ_EINVAL, "bias correction: the samples changed between rounds "
					    "(internal error)");
				goto out;
			}
			for (size_t k = 0; k < n_runs; k++) {
				if (!(runs[k].sqnr.per = malloc((n ? n : 1) * sizeof *runs[k].sqnr.per))) {
					rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
					goto out;
				}
				for (size_t i = 0; i < n; i++)
					runs[k].sqnr.per[i] = NAN;
				runs[k].sqnr.n_per = n;
			}
			if (fonly) {
				if (!(cache->out = oq_calloc(n && nout ? n * nout : 1, sizeof *cache->out))) {
					rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
					goto out;
				}
				cache->n = n;
				cache->nout = nout;
				cache->state = 1; /* until the limit is passed */
			}
		}
		if ((eq && (oq_exec_n_inputs(eq) != nin || oq_exec_n_outputs(eq) != nout)) ||
		    (ef && (oq_exec_n_inputs(ef) != nin || oq_exec_n_outputs(ef) != nout))) {
			rc = oq_err(d, OQ_EINVAL, "bias correction: the quantized model has other inputs or "
				    "outputs than the float one (internal error)");
			goto out;
		}
		for (size_t i = 0; i < n; i++) {
			int f = (int)(i % OQ_BCE_FOLDS);
			const oq_rt *ro = of;
			if (!(folds >> f & 1u))
				continue;
			sf.fold = sq.fold = f;
			if ((rc = oq_sample_load(&s, i, e0, in, d)))
				goto out;
			if (cached)
				ro = cache->out + i * nout;
			else if ((rc = oq_exec_run(ef, in, nin, of, nout, d)))
				goto out;
			if (eq) {
				if ((rc = oq_exec_run(eq, in, nin, oqs, nout, d)))
					goto out;
				add_sqnr(q, i, f, ro, oqs, nout);
				release(oqs, nout);
			}
			if (fonly && cache->state == 1 && (rc = keep(cache, i, of))) {
				if (rc != 1) {
					rc = oq_err(d, rc, "bias correction: out of memory");
					goto out;
				}
				oq_bce_cache_free(cache); /* over the limit: the float model runs each time */
				cache->state = -1;
			}
			release(of, nout);
			release(in, nin);
		}
		oq_exec_free(eq);
		eq = NULL;
	}
	rc = OQ_OK;
out:
	if (rc && fonly)
		oq_bce_cache_free(cache);
	for (size_t r = 0; rc && r < n_runs; r++)
		oq_bce_sqnr_free(&runs[r].sqnr);
	release(in, nin);
	release(of, nout);
	release(oqs, nout);
	free(in);
	free(of);
	free(oqs);
	free(sf.vals);
	free(sq.vals);
	oq_samples_free(&s);
	oq_exec_free(ef);
	oq_exec_free(eq);
	return rc;
}
