/*
 * analyze.c - `onnxq analyze`: per-point output SQNR, held out (see
 * analyze.h).
 *
 * Per sample: the float model runs once with an observer that copies every
 * value (the cache); the fold's quantized model runs once (the fully
 * quantized figure); then per point, the nodes downstream of it (those
 * reading it, and so on: `part`) run on the cache with the point's value
 * replaced by its fake-quantized copy (an activation) or its dequantized
 * integer weight (a weight). A point that reaches no output is not run.
 */
#include "src/pipeline/analyze.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib/exec/exec.h"
#include "calib/folds.h"
#include "calib/samples.h"

/* One fold's quantized model and its points. */
typedef struct foldq {
	oq_model *qm;
	oq_exec *e;      /* runs qm */
	oq_qpoint *q;    /* oq_qpoints of qm */
	size_t nq;
	long *of;        /* per analysis point: its entry of q, or -1 */
	long *bias;      /* per analysis point (a weight): the entry of q of its layer's bias, or -1 */
	/* the same for the copy with weights rounded to nearest (oq_analyze_with_nearest), or NULL */
	oq_model *nm;
	oq_qpoint *nq_;
	size_t n_nq;
	long *nof, *nbias;
} foldq;

/* The float run's observer: a copy of every main-graph value. */
typedef struct keep {
	const oq_graph *g;
	oq_rt *v;        /* per value index (owned copies) */
	oq_diag *d;
} keep;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int keep_all(void *ctx, const oq_value *v)
{
	(void)ctx;
	(void)v;
	return 1;
}

static int keep_value(void *ctx, const oq_value *v, const oq_rt *t)
{
	keep *k = ctx;

	if (v->graph != k->g || t->kind != OQ_RT_TENSOR)
		return 0;
	oq_rt_release(&k->v[v->index]);
	if (oq_rt_copy(&k->v[v->index], t))
		return oq_err(k->d, OQ_ENOMEM, "analyze: out of memory keeping '%s'", v->name);
	return 0;
}

void oq_analysis_free(oq_analysis *a)
{
	for (size_t i = 0; a->out && i < a->n_out; i++)
		free(a->out[i]);
	for (size_t i = 0; a->pt && i < a->n_pt; i++) {
		free(a->pt[i].name);
		free(a->pt[i].d2);
		free(a->pt[i].d2n);
	}
	free(a->out);
	free(a->r2);
	free(a->qd2);
	free(a->node_macs);
	free(a->pt);
	free(a->rank);
	memset(a, 0, sizeof *a);
}

/* part[0..n_nodes): the nodes downstream of value v (reading it, or what they compute). Sweeps
 * the node list until nothing changes: one sweep when it is topologically sorted, more when not
 * (the executor runs unsorted graphs in its own order). */
static void downstream(const oq_graph *g, const oq_value *v, unsigned char *part, unsigned char *mark)
{
	int grew = 1;

	memset(part, 0, g->n_nodes);
	memset(mark, 0, g->n_values);
	mark[v->index] = 1;
	while (grew) {
		grew = 0;
		for (size_t i = 0; i < g->n_nodes; i++) {
			const oq_node *n = g->nodes[i];
			int hit = 0;
			if (part[i])
				continue;
			for (size_t k = 0; k < n->n_inputs && !hit; k++)
				hit = n->inputs[k] && n->inputs[k]->graph == g && mark[n->inputs[k]->index];
			if (!hit)
				continue;
			part[i] = 1;
			grew = 1;
			for (size_t k = 0; k < n->n_outputs; k++)
				if (n->outputs[k])
					mark[n->outputs[k]->index] = 1;
		}
	}
}

/* Does the change of v reach a graph output (v is one, or part computes one)? */
static int reaches_output(const oq_graph *g, const oq_value *v, const unsigned char *part)
{
	if (v->flags & OQ_V_OUTPUT)
		return 1;
	for (size_t i = 0; i < g->n_outputs; i++) {
		const oq_value *o = g->outputs[i];
		if (o->producer && o->producer->graph == g && part[o->producer->index])
			return 1;
	}
	return 0;
}

/* MACs of node n from the kept values (0: not a Conv/ConvTranspose/MatMul/Gemm, or unknown). */
static double node_macs(const oq_node *n, const oq_rt *kept)
{
	const oq_value *a = n->n_inputs > 0 ? n->inputs[0] : NULL, *w = n->n_inputs > 1 ? n->inputs[1] : NULL;
	const oq_value *y = n->n_outputs ? n->outputs[0] : NULL;
	const oq_tensor *wt = w ? w->init : NULL;
	const oq_rt *ta = a ? &kept[a->index] : NULL, *ty = y ? &kept[y->index] : NULL;

	if (n->domain[0] || !a || !w || !y)
		return 0;
	switch (n->op) {
	case OQ_OP_Conv:
		return wt && wt->rank >= 1 && wt->dims[0] > 0 && ty->data ? (double)ty->nelem * (double)(wt->nelem / (size_t)wt->dims[0]) : 0;
	case OQ_OP_ConvTranspose:
		return wt && wt->rank >= 1 && wt->dims[0] > 0 && ta->data ? (double)ta->nelem * (double)(wt->nelem / (size_t)wt->dims[0]) : 0;
	case OQ_OP_MatMul:
		return ta->data && ta->rank >= 1 && ty->data ? (double)ty->nelem * (double)ta->dims[ta->rank - 1] : 0;
	case OQ_OP_Gemm:
		if (!ta->data || ta->rank != 2 || !ty->data)
			return 0;
		return (double)ty->nelem * (double)ta->dims[oq_node_attr_int(n, "transA", 0) ? 0 : 1];
	default:
		return 0;
	}
}

/* The MACs of every node reading v (first sample's kept values), and the first such node. */
static double point_macs(const oq_graph *g, const oq_value *v, const oq_rt *kept, size_t *order)
{
	double m = 0;

	*order = g->n_nodes;
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		for (size_t k = 0; k < n->n_inputs; k++)
			if (n->inputs[k] == v) {
				m += node_macs(n, kept);
				if (i < *order)
					*order = i;
				break;
			}
	}
	return m;
}

/* t: v's values replaced by dq(q(v)); counts clipped values (outside the grid) into p. */
static int fake_activation(const oq_qpoint *q, const oq_rt *v, oq_rt *t, oq_an_point *p, oq_diag *d)
{
	const float *x = v->data;
	float *y;
	float s0 = ((const float *)q->s->data)[0];

	if (oq_rt_alloc(t, OQ_DT_FLOAT, v->rank, v->dims))
		return oq_err(d, OQ_ENOMEM, "analyze: out of memory");
	y = t->data;
	if (q->s->nelem == 1) { /* the common case: one scale */
		int64_t z = q->z ? oq_tensor_get_int(q->z, 0) : 0;
		float lo = (float)(q->qmin - z) * s0, hi = (float)(q->qmax - z) * s0;
		for (size_t i = 0; i < v->nelem; i++) {
			y[i] = oq_qpoint_fake(q, 0, x[i]);
			p->n_clip += x[i] < lo - s0 / 2 || x[i] > hi + s0 / 2;
		}
	} else {
		for (size_t i = 0; i < v->nelem; i++)
			y[i] = oq_qpoint_fake(q, oq_qpoint_channel(q, v->dims, v->rank, i), x[i]);
	}
	p->n_val += v->nelem;
	return OQ_OK;
}

/* t: the dequantized integer weight of q (its float initializer's shape). */
static int dequantized_weight(const oq_qpoint *q, oq_rt *t, oq_diag *d)
{
	const oq_tensor *it = q->x->init;
	float *y;

	if (oq_rt_alloc(t, OQ_DT_FLOAT, it->rank, it->dims))
		return oq_err(d, OQ_ENOMEM, "analyze: out of memory");
	y = t->data;
	for (size_t e = 0; e < it->nelem; e++) {
		size_t c = oq_qpoint_channel(q, it->dims, it->rank, e);
		int64_t z = q->z ? oq_tensor_get_int(q->z, c) : 0;
		y[e] = (float)(oq_tensor_get_int(it, e) - z) * ((const float *)q->s->data)[c];
	}
	return OQ_OK;
}

/* A weight's range and clipped share (elements beyond the grid's ends by over half a step). */
static void weight_stats(const oq_qpoint *q, oq_an_point *p)
{
	const oq_tensor *ft = q->fv->init;

	p->lo = INFINITY;
	p->hi = -INFINITY;
	for (size_t e = 0; e < ft->nelem; e++) {
		size_t c = oq_qpoint_channel(q, ft->dims, ft->rank, e);
		double w = oq_tensor_get(ft, e), s = ((const float *)q->s->data)[c];
		int64_t z = q->z ? oq_tensor_get_int(q->z, c) : 0;
		p->lo = w < p->lo ? w : p->lo;
		p->hi = w > p->hi ? w : p->hi;
		p->n_clip += w < (double)(q->qmin - z) * s - s / 2 || w > (double)(q->qmax - z) * s + s / 2;
	}
	p->n_val = ft->nelem;
}

/* Adds (r - t)^2 of float32 outputs into d2 (and r^2 into r2 when given). */
static void add_err(const oq_rt *const *r, const oq_rt *t, size_t n, double *d2, double *r2)
{
	for (size_t o = 0; o < n; o++) {
		const float *x, *y;
		if (!r[o] || r[o]->dtype != OQ_DT_FLOAT || t[o].kind != OQ_RT_TENSOR || t[o].dtype != OQ_DT_FLOAT ||
		    t[o].nelem != r[o]->nelem)
			continue;
		x = r[o]->data;
		y = t[o].data;
		for (size_t i = 0; i < t[o].nelem; i++) {
			double e = (double)x[i] - y[i];
			d2[o] += e * e;
			if (r2)
				r2[o] += (double)x[i] * x[i];
		}
	}
}

static void release_all(oq_rt *t, size_t n)
{
	for (size_t i = 0; t && i < n; i++)
		oq_rt_release(&t[i]);
}

/* Is v a bias: read only as input 2 of Conv, ConvTranspose or Gemm? */
static int is_bias(const oq_value *v)
{
	for (size_t i = 0; i < v->n_uses; i++) {
		const oq_node *n = v->uses[i].node;
		if (v->uses[i].index != 2 || n->domain[0] ||
		    (n->op != OQ_OP_Conv && n->op != OQ_OP_ConvTranspose && n->op != OQ_OP_Gemm))
			return 0;
	}
	return v->n_uses > 0;
}

/* The entry of F's points that is the bias of the layer reading weight w as input 1, or -1. */
static long bias_of(const foldq *F, const oq_value *w)
{
	for (size_t u = 0; u < w->n_uses; u++) {
		const oq_node *n = w->uses[u].node;
		if (w->uses[u].index != 1 || n->n_inputs < 3 || !n->inputs[2])
			continue;
		for (size_t i = 0; i < F->nq; i++)
			if (F->q[i].weight && F->q[i].fv == n->inputs[2])
				return (long)i;
	}
	return -1;
}

/* Do two dequantized weights differ anywhere (bit for bit)? */
static int differs(const oq_rt *a, const oq_rt *b)
{
	return a->nelem != b->nelem || memcmp(a->data, b->data, a->nelem * sizeof(float)) != 0;
}

/*
 * Weight point p of fold F measured again with its nearest-rounded copy (F->nof): when that
 * copy (or its bias) differs from the learned one (fake, fakeb), the part downstream runs with
 * it into po and the error goes to a->d2n; when not, the learned run's outputs lo are the
 * nearest ones too. part and vals as for the learned run; vals is restored.
 */
static int nearest_run(const foldq *F, size_t p, const oq_rt *fake, const oq_rt *fakeb, oq_rt *nfake,
		       oq_rt *nfakeb, oq_exec *pe, const unsigned char *part, const oq_rt **vals,
		       const oq_rt *const *ref, const oq_rt *lo, oq_rt *po, size_t nout, oq_an_point *a, oq_diag *d)
{
	const oq_qpoint *q = &F->nq_[F->nof[p]], *bq = F->nbias[p] >= 0 ? &F->nq_[F->nbias[p]] : NULL;
	const oq_rt *was = vals[q->fv->index];
	int rc, same;

	if (!a->d2n && !(a->d2n = oq_calloc(nout + 1, sizeof *a->d2n)))
		return oq_err(d, OQ_ENOMEM, "analyze: out of memory");
	if ((rc = dequantized_weight(q, nfake, d)) || (bq && (rc = dequantized_weight(bq, nfakeb, d))))
		return rc;
	same = !differs(fake, nfake) && (bq ? fakeb->data && !differs(fakeb, nfakeb) : !fakeb->data);
	if (same) {
		add_err(ref, lo, nout, a->d2n, NULL);
		return OQ_OK;
	}
	vals[q->fv->index] = nfake;
	if (bq)
		vals[bq->fv->index] = nfakeb;
	rc = oq_exec_run_part(pe, part, vals, po, nout, d);
	vals[q->fv->index] = was;
	if (bq)
		vals[bq->fv->index] = NULL;
	if (rc)
		return rc;
	add_err(ref, po, nout, a->d2n, NULL);
	release_all(po, nout);
	return OQ_OK;
}

/* Is point i worse than point j (lower worst-output SQNR; NaN first; ties: node order)? */
static int worse(const oq_an_point *p, size_t i, size_t j)
{
	double x = p[i].worst, y = p[j].worst;

	if (isnan(x) != isnan(y))
		return isnan(x);
	if (x != y && !isnan(x))
		return x < y;
	return p[i].order != p[j].order ? p[i].order < p[j].order : i < j;
}

/* The entry of q[0..nq) that is point p (same kind and name), or -1. */
static long entry_of(const oq_qpoint *q, size_t nq, const oq_an_point *p)
{
	for (size_t i = 0; i < nq; i++)
		if (q[i].weight == p->weight && !strcmp(q[i].name, p->name))
			return (long)i;
	return -1;
}

int oq_analyze(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, const oq_ranges *all,
	       oq_fid_make_fn make, void *ctx, oq_analysis *out, oq_diag *d)
{
	return oq_analyze_with_nearest(fm, co, folds, all, make, NULL, ctx, out, d);
}

int oq_analyze_with_nearest(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, const oq_ranges *all,
			    oq_fid_make_fn make, oq_fid_make_fn make_near, void *ctx, oq_analysis *out,
			    oq_diag *d)
{
	const oq_graph *g = fm->graph;
	oq_exec_opts eo = {.threads = co->threads};
	oq_exec *fe = NULL, *pe = NULL;
	foldq *fq = NULL;
	oq_samples s;
	keep kp = {g, NULL, d};
	oq_rt *in = NULL, *po = NULL, *npo = NULL, *qo = NULL, fake, fakeb, nfake, nfakeb;
	const oq_rt **vals = NULL, **ref = NULL;
	unsigned char *part = NULL, *mark = NULL;
	size_t nin = 0, nout = 0, n, k = folds->n_folds;
	double t0 = now();
	int rc;

	memset(out, 0, sizeof *out);
	memset(&s, 0, sizeof s);
	memset(&fake, 0, sizeof fake);
	memset(&fakeb, 0, sizeof fakeb);
	memset(&nfake, 0, sizeof nfake);
	memset(&nfakeb, 0, sizeof nfakeb);
	if (k < 2)
		return oq_err(d, OQ_EINVAL, "analyze: needs at least two calibration samples (one per fold)");
	if ((rc = oq_exec_new(fm, &eo, &fe, d)) || (rc = oq_exec_new(fm, &eo, &pe, d)) ||
	    (rc = oq_samples_scan(co->source, fe, &s, d)) || (rc = oq_samples_check(&s, fe, d)))
		goto fail;
	oq_exec_set_observer(fe, keep_value, &kp);
	oq_exec_set_observe_want(fe, keep_all);
	n = co->limit && co->limit < s.n ? co->limit : s.n;
	if (n != folds->n_total) {
		rc = oq_err(d, OQ_EINVAL, "analyze: %zu samples, but the statistics hold %llu", n,
		            (unsigned long long)folds->n_total);
		goto fail;
	}
	nin = oq_exec_n_inputs(fe);
	nout = oq_exec_n_outputs(fe);
	out->k = k;
	out->n = n;
	out->n_out = nout;
	fq = oq_calloc(k, sizeof *fq);
	kp.v = oq_calloc(g->n_values + 1, sizeof *kp.v);
	vals = oq_calloc(g->n_values + 1, sizeof *vals);
	ref = oq_calloc(nout + 1, sizeof *ref);
	in = oq_calloc(nin + 1, sizeof *in);
	po = oq_calloc(nout + 1, sizeof *po);
	npo = oq_calloc(nout + 1, sizeof *npo);
	qo = oq_calloc(nout + 1, sizeof *qo);
	part = oq_calloc(g->n_nodes + 1, 1);
	mark = oq_calloc(g->n_values + 1, 1);
	out->out = oq_calloc(nout + 1, sizeof *out->out);
	out->r2 = oq_calloc(nout + 1, sizeof *out->r2);
	out->qd2 = oq_calloc(nout + 1, sizeof *out->qd2);
	out->node_macs = oq_calloc(g->n_nodes + 1, sizeof *out->node_macs);
	if (!out->node_macs || !fq || !kp.v || !vals || !ref || !in || !po || !npo || !qo || !part || !mark || !out->out || !out->r2 || !out->qd2) {
		rc = oq_err(d, OQ_ENOMEM, "analyze: out of memory");
		goto fail;
	}
	for (size_t o = 0; o < nout; o++)
		if (!(out->out[o] = oq_strdup(oq_exec_output(fe, o)->name))) {
			rc = oq_err(d, OQ_ENOMEM, "analyze: out of memory");
			goto fail;
		}

	/* each fold's quantized model; the points are fold 0's */
	for (size_t f = 0; f < k; f++) {
		oq_ranges r;
		if ((rc = oq_calibrate_held_out(fm, co, folds, f, &r, d)))
			goto fail;
		rc = make(ctx, &r, &fq[f].qm, d);
		oq_ranges_free(&r);
		if (rc || (rc = oq_qpoints(fm, fq[f].qm, &fq[f].q, &fq[f].nq, d)) ||
		    (rc = oq_exec_new(fq[f].qm, &eo, &fq[f].e, d)))
			goto fail;
		if (oq_exec_n_outputs(fq[f].e) != nout || oq_exec_n_inputs(fq[f].e) != nin) {
			rc = oq_err(d, OQ_EINVAL, "analyze: the quantized model's inputs or outputs differ");
			goto fail;
		}
		if (make_near) {
			if ((rc = oq_calibrate_held_out(fm, co, folds, f, &r, d)))
				goto fail;
			rc = make_near(ctx, &r, &fq[f].nm, d);
			oq_ranges_free(&r);
			if (rc || (rc = oq_qpoints(fm, fq[f].nm, &fq[f].nq_, &fq[f].n_nq, d)))
				goto fail;
		}
	}
	out->near = make_near != NULL;
	if (!(out->pt = oq_calloc(fq[0].nq + 1, sizeof *out->pt)) || !(out->rank = oq_calloc(fq[0].nq + 1, sizeof *out->rank))) {
		rc = oq_err(d, OQ_ENOMEM, "analyze: out of memory");
		goto fail;
	}
	for (size_t x = 0; x < fq[0].nq; x++) {
		const oq_qpoint *q = &fq[0].q[x];
		oq_an_point *a = &out->pt[out->n_pt];
		if (q->weight && is_bias(q->fv))
			continue; /* measured with its layer's weight */
		out->n_pt++;
		const oq_range *rg = all && !q->weight ? oq_ranges_find(all, q->name) : NULL;
		if (!(a->name = oq_strdup(q->name)) || !(a->d2 = oq_calloc(nout + 1, sizeof *a->d2))) {
			rc = oq_err(d, OQ_ENOMEM, "analyze: out of memory");
			goto fail;
		}
		a->weight = q->weight;
		a->worst_near = NAN;
		a->lo = rg ? rg->min : NAN;
		a->hi = rg ? rg->max : NAN;
		if (q->weight)
			weight_stats(q, a);
	}
	for (size_t f = 0; f < k; f++) {
		if (!(fq[f].of = oq_calloc(out->n_pt + 1, sizeof *fq[f].of)) ||
		    !(fq[f].bias = oq_calloc(out->n_pt + 1, sizeof *fq[f].bias))) {
			rc = oq_err(d, OQ_ENOMEM, "analyze: out of memory");
			goto fail;
		}
		for (size_t p = 0; p < out->n_pt; p++) {
			fq[f].of[p] = entry_of(fq[f].q, fq[f].nq, &out->pt[p]);
			fq[f].bias[p] = fq[f].of[p] >= 0 && out->pt[p].weight ? bias_of(&fq[f], fq[f].q[fq[f].of[p]].fv) : -1;
		}
		if (!fq[f].nm)
			continue;
		if (!(fq[f].nof = oq_calloc(out->n_pt + 1, sizeof *fq[f].nof)) ||
		    !(fq[f].nbias = oq_calloc(out->n_pt + 1, sizeof *fq[f].nbias))) {
			rc = oq_err(d, OQ_ENOMEM, "analyze: out of memory");
			goto fail;
		}
		for (size_t p = 0; p < out->n_pt; p++) {
			foldq nf = {.q = fq[f].nq_, .nq = fq[f].n_nq};
			fq[f].nof[p] = out->pt[p].weight ? entry_of(fq[f].nq_, fq[f].n_nq, &out->pt[p]) : -1;
			fq[f].nbias[p] = fq[f].nof[p] >= 0 ? bias_of(&nf, fq[f].nq_[fq[f].nof[p]].fv) : -1;
		}
	}

	for (size_t i = 0; i < n; i++) {
		size_t f = oq_folds_of(i, n, k);
		foldq *F = &fq[f];

		if ((rc = oq_sample_load(&s, i, fe, in, d)) || (rc = oq_exec_run(fe, in, nin, po, nout, d)))
			goto fail;
		release_all(po, nout);
		for (size_t x = 0; x < nin; x++)
			vals[oq_exec_input(fe, x)->index] = &in[x];
		for (size_t v = 0; v < g->n_values; v++)
			if (kp.v[v].kind == OQ_RT_TENSOR && kp.v[v].data)
				vals[v] = &kp.v[v];
		for (size_t o = 0; o < nout; o++)
			ref[o] = vals[oq_exec_output(fe, o)->index];
		if ((rc = oq_exec_run(F->e, in, nin, qo, nout, d)))
			goto fail;
		add_err(ref, qo, nout, out->qd2, out->r2);
		release_all(qo, nout);
		if (i == 0)
			for (size_t p = 0; p < out->n_pt; p++)
				if (fq[0].of[p] >= 0)
					out->pt[p].macs = point_macs(g, fq[0].q[fq[0].of[p]].fv, kp.v, &out->pt[p].order);
		if (i == 0)
			for (size_t x = 0; x < g->n_nodes; x++) {
				out->node_macs[x] = node_macs(g->nodes[x], kp.v);
				out->total_macs += out->node_macs[x];
			}

		for (size_t p = 0; p < out->n_pt; p++) {
			const oq_qpoint *q, *bq = NULL;
			const oq_value *fv;
			oq_an_point *a = &out->pt[p];
			const oq_rt *was;
			if (F->of[p] < 0)
				continue;
			q = &F->q[F->of[p]];
			fv = q->fv;
			downstream(g, fv, part, mark);
			if (!reaches_output(g, fv, part))
				continue;
			was = vals[fv->index];
			if (q->weight) {
				rc = dequantized_weight(q, &fake, d);
				if (!rc && F->bias[p] >= 0) {
					bq = &F->q[F->bias[p]];
					rc = dequantized_weight(bq, &fakeb, d);
					vals[bq->fv->index] = &fakeb;
				}
			} else if (!was || was->dtype != OQ_DT_FLOAT || !oq_qpoint_fits(q, was->dims, was->rank))
				continue;
			else
				rc = fake_activation(q, was, &fake, a, d);
			if (rc)
				goto fail;
			vals[fv->index] = &fake;
			rc = oq_exec_run_part(pe, part, vals, po, nout, d);
			vals[fv->index] = was;
			if (bq)
				vals[bq->fv->index] = NULL;
			if (rc)
				goto fail;
			add_err(ref, po, nout, a->d2, NULL);
			if (q->weight && F->nof && F->nof[p] >= 0)
				rc = nearest_run(F, p, &fake, &fakeb, &nfake, &nfakeb, pe, part, vals, ref, po, npo, nout,
						 a, d);
			release_all(po, nout);
			oq_rt_release(&fake);
			oq_rt_release(&fakeb);
			oq_rt_release(&nfake);
			oq_rt_release(&nfakeb);
			if (rc)
				goto fail;
		}
		release_all(kp.v, g->n_values);
		release_all(in, nin);
		memset(vals, 0, g->n_values * sizeof *vals);
	}

	for (size_t p = 0; p < out->n_pt; p++) {
		oq_an_point *a = &out->pt[p];
		a->worst = INFINITY;
		for (size_t o = 0; o < nout; o++) {
			double db = oq_fidelity_db(out->r2[o], a->d2[o]);
			if (out->r2[o] == 0 && a->d2[o] == 0)
				continue;
			a->worst = isnan(db) || db < a->worst ? db : a->worst;
		}
		a->clipped = a->n_val ? (double)a->n_clip / (double)a->n_val : 0;
		if (a->d2n)
			a->worst_near = INFINITY;
		for (size_t o = 0; a->d2n && o < nout; o++) {
			double db = oq_fidelity_db(out->r2[o], a->d2n[o]);
			if (out->r2[o] == 0 && a->d2n[o] == 0)
				continue;
			a->worst_near = isnan(db) || db < a->worst_near ? db : a->worst_near;
		}
	}
	for (size_t i = 0; i < out->n_pt; i++) { /* points are few: insertion sort */
		size_t x = i;
		for (; x > 0 && worse(out->pt, i, out->rank[x - 1]); x--)
			out->rank[x] = out->rank[x - 1];
		out->rank[x] = i;
	}
	out->seconds = now() - t0;
	rc = OQ_OK;
fail:
	release_all(kp.v, g->n_values);
	release_all(in, nin);
	release_all(po, nout);
	release_all(npo, nout);
	release_all(qo, nout);
	oq_rt_release(&fake);
	oq_rt_release(&fakeb);
	oq_rt_release(&nfake);
	oq_rt_release(&nfakeb);
	for (size_t f = 0; fq && f < k; f++) {
		oq_exec_free(fq[f].e);
		oq_qpoints_free(fq[f].q, fq[f].nq);
		oq_model_free(fq[f].qm);
		free(fq[f].of);
		free(fq[f].bias);
		oq_qpoints_free(fq[f].nq_, fq[f].n_nq);
		oq_model_free(fq[f].nm);
		free(fq[f].nof);
		free(fq[f].nbias);
	}
	free(fq);
	free(kp.v);
	free(vals);
	free(ref);
	free(in);
	free(po);
	free(npo);
	free(qo);
	free(part);
	free(mark);
	oq_exec_free(pe);
	oq_exec_free(fe);
	oq_samples_free(&s);
	if (rc)
		oq_analysis_free(out);
	return rc;
}

/* ------------------------------------------------------------ reports */


void oq_analysis_print(const oq_analysis *a, FILE *f, size_t top)
{
	size_t n = top && top < a->n_pt ? top : a->n_pt;

	fprintf(f, "analyze: %zu points, %zu samples in %zu folds (held-out), %.1f s\n", a->n_pt, a->n, a->k,
		a->seconds);
	if (!a->n_pt)
		fputs("analyze: the quantized model has no quantization point: the placement left the model float "
		      "(the quantize summary says why), or nothing in it is quantized; --prefer accuracy analyzes "
		      "the accuracy-first placement\n", f);
	for (size_t o = 0; o < a->n_out; o++) {
		fprintf(f, "fully quantized: output '%s' fold SQNR ", a->out[o]);
		oq_fidelity_put_db(f, 6, oq_fidelity_db(a->r2[o], a->qd2[o]));
		fputs(" dB\n", f);
	}
	if (a->near)
		fputs("analyze: weights with learned rounding; \"near dB\": the same weight rounded to nearest\n", f);
	fprintf(f, "%4s %6s ", "rank", "dB");
	if (a->near)
		fprintf(f, "%8s ", "near dB");
	fprintf(f, "%-10s %10s %10s %8s %8s  %s\n", "kind", "min", "max", "clip%", "MMACs",
		"point (only it quantized; worst output's SQNR)");
	for (size_t i = 0; i < n; i++) {
		const oq_an_point *p = &a->pt[a->rank[i]];
		fprintf(f, "%4zu ", i + 1);
		oq_fidelity_put_db(f, 6, p->worst);
		if (a->near) {
			fputc(' ', f);
			if (p->d2n)
				oq_fidelity_put_db(f, 8, p->worst_near);
			else
				fprintf(f, "%8s", "-");
		}
		fprintf(f, " %-10s %10.4g %10.4g %8.4f %8.2f  %s\n", p->weight ? "weight" : "activation", p->lo, p->hi,
			100 * p->clipped, p->macs / 1e6, p->name);
	}
	if (n < a->n_pt)
		fprintf(f, "(%zu more in --json)\n", a->n_pt - n);
}



static void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.9g", v);
	else
		fputs("null", f);
}

static int close_file(FILE *f, const char *path, oq_diag *d)
{
	int bad = ferror(f);
	if (fclose(f) || bad)
		return oq_err(d, OQ_EIO, "analyze: writing %s failed", path);
	return OQ_OK;
}

int oq_analysis_json(const oq_analysis *a, const char *path, oq_diag *d)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return oq_err(d, OQ_EIO, "analyze: cannot write %s", path);
	fprintf(f, "{\n  \"folds\": %zu,\n  \"samples\": %zu,\n  \"seconds\": %.3f,\n  \"total_macs\": ", a->k, a->n,
		a->seconds);
	json_num(f, a->total_macs);
	fputs(",\n  \"outputs\": [", f);
	for (size_t o = 0; o < a->n_out; o++) {
		fputs(o ? ", " : "", f);
		fputs("{\"name\": ", f);
		oq_json_str(f, a->out[o]);
		fputs(", \"quantized_sqnr_db\": ", f);
		oq_fidelity_json_db(f, oq_fidelity_db(a->r2[o], a->qd2[o]));
		fputc('}', f);
	}
	fputs("],\n  \"points\": [\n", f);
	for (size_t i = 0; i < a->n_pt; i++) {
		const oq_an_point *p = &a->pt[a->rank[i]];
		fputs("    {\"name\": ", f);
		oq_json_str(f, p->name);
		fprintf(f, ", \"kind\": \"%s\", \"rank\": %zu, \"sqnr_db\": ", p->weight ? "weight" : "activation", i + 1);
		oq_fidelity_json_db(f, p->worst);
		fputs(", \"sqnr_db_per_output\": [", f);
		for (size_t o = 0; o < a->n_out; o++) {
			fputs(o ? ", " : "", f);
			oq_fidelity_json_db(f, oq_fidelity_db(a->r2[o], p->d2[o]));
		}
		fputs("]", f);
		if (p->d2n) {
			fputs(", \"sqnr_db_nearest\": ", f);
			oq_fidelity_json_db(f, p->worst_near);
		}
		fputs(", \"min\": ", f);
		json_num(f, p->lo);
		fputs(", \"max\": ", f);
		json_num(f, p->hi);
		fputs(", \"clipped\": ", f);
		json_num(f, p->clipped);
		fputs(", \"macs\": ", f);
		json_num(f, p->macs);
		fprintf(f, ", \"node_order\": %zu}%s\n", p->order, i + 1 < a->n_pt ? "," : "");
	}
	fputs("  ]\n}\n", f);
	return close_file(f, path, d);
}

/* Text for HTML: & < > " escaped. */
static void html_str(FILE *f, const char *s)
{
	for (; *s; s++)
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		default: fputc(*s, f);
		}
}


/*
 * The error plot: one bar per point along the graph (first reader's node order), height the
 * point SQNR of the worst output (clamped to [0, 80] dB; lower is worse, so bars grow downward
 * from 80 dB), weights and activations in two colours.
 */
static void html_plot(FILE *f, const oq_analysis *a)
{
	const double W = 900, H = 240, top = 10, bottom = 30, left = 40, cap = 80;
	size_t maxo = 1;

	for (size_t i = 0; i < a->n_pt; i++)
		maxo = a->pt[i].order + 1 > maxo ? a->pt[i].order + 1 : maxo;
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" role=\"img\" "
		"aria-label=\"point SQNR along the graph\">\n", W, H);
	for (int db = 0; db <= (int)cap; db += 20) {
		double y = top + (H - top - bottom) * (1 - db / cap);
		fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
			"<text x=\"2\" y=\"%.1f\" font-size=\"10\">%d dB</text>\n", left, W, y, y, y + 3, db);
	}
	for (size_t i = 0; i < a->n_pt; i++) {
		const oq_an_point *p = &a->pt[i];
		double v = isnan(p->worst) ? 0 : p->worst < 0 ? 0 : p->worst > cap ? cap : p->worst;
		double x = left + (W - left - 4) * (double)p->order / (double)maxo;
		double y = top + (H - top - bottom) * (1 - v / cap);
		fprintf(f, "<line class=\"%s\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
			"stroke-width=\"2\"><title>", p->weight ? "w" : "a", x, x, top, y,
			p->weight ? "#c0392b" : "#2c7fb8");
		html_str(f, p->name);
		fputs(" ", f);
		oq_fidelity_put_db(f, 0, p->worst);
		fputs(" dB</title></line>\n", f);
	}
	fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">graph order &#8594; (blue: activations, red: "
		"weights; longer bar = more error)</text>\n</svg>\n", left, H - 8);
}

int oq_analysis_html(const oq_analysis *a, const char *model, const char *path, oq_diag *d)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return oq_err(d, OQ_EIO, "analyze: cannot write %s", path);
	fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>onnxq analyze</title>\n<style>"
	      "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}"
	      "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.n{text-align:left}"
	      "</style></head><body>\n<h1>onnxq analyze: ", f);
	html_str(f, model);
	fprintf(f, "</h1>\n<p>%zu quantization points; %zu samples in %zu folds: each sample is judged with ranges "
		"from the other folds. Point SQNR: the outputs with only that point quantized.</p>\n",
		a->n_pt, a->n, a->k);
	fputs("<h2>Fully quantized model</h2>\n<table id=\"outputs\"><tr><th>output</th><th>fold SQNR (dB)</th></tr>\n", f);
	for (size_t o = 0; o < a->n_out; o++) {
		fputs("<tr><td class=\"n\">", f);
		html_str(f, a->out[o]);
		fputs("</td><td>", f);
		oq_fidelity_put_db(f, 0, oq_fidelity_db(a->r2[o], a->qd2[o]));
		fputs("</td></tr>\n", f);
	}
	fputs("</table>\n<h2>Error along the graph</h2>\n", f);
	html_plot(f, a);
	fputs("<h2>Points, worst first</h2>\n<p>Keeping a point float (or at 16 bits) removes at most its own "
	      "error: the noise power it adds is 10<sup>-SQNR/10</sup> of the output's power (the column "
	      "&ldquo;share&rdquo;: of the noise the points add alone, summed).</p>\n"
	      "<table id=\"points\"><tr><th>rank</th><th>point</th><th>kind</th><th>SQNR (dB)</th><th>share</th>", f);
	if (a->near)
		fputs("<th>SQNR rounded to nearest (dB)</th>", f);
	fputs("<th>min</th><th>max</th><th>clipped %</th><th>MMACs</th></tr>\n", f);
	{
		double sum = 0;
		for (size_t i = 0; i < a->n_pt; i++)
			if (isfinite(a->pt[i].worst))
				sum += pow(10, -a->pt[i].worst / 10);
		for (size_t i = 0; i < a->n_pt; i++) {
			const oq_an_point *p = &a->pt[a->rank[i]];
			double share = isfinite(p->worst) && sum > 0 ? pow(10, -p->worst / 10) / sum : 0;
			fprintf(f, "<tr><td>%zu</td><td class=\"n\">", i + 1);
			html_str(f, p->name);
			fprintf(f, "</td><td>%s</td><td>", p->weight ? "weight" : "activation");
			oq_fidelity_put_db(f, 0, p->worst);
			fprintf(f, "</td><td>%.1f %%</td>", 100 * share);
			if (a->near) {
				fputs("<td>", f);
				if (p->d2n)
					oq_fidelity_put_db(f, 0, p->worst_near);
				else
					fputs("-", f);
				fputs("</td>", f);
			}
			fprintf(f, "<td>%.4g</td><td>%.4g</td><td>%.3f</td><td>%.2f</td></tr>\n",
				p->lo, p->hi, 100 * p->clipped, p->macs / 1e6);
		}
	}
	fputs("</table>\n</body></html>\n", f);
	return close_file(f, path, d);
}
