/*
 * compare.c - `onnxq compare REF TEST --data DIR`: how far TEST's outputs
 * (usually a quantized model) are from REF's on the same inputs.
 *
 * Per sample s and output o, with r = REF's values and t = TEST's (as
 * doubles, same shape required):
 *
 *     SQNR_s  = 10 * log10( sum r^2 / sum (r - t)^2 )   dB
 *     cos_s   = sum r*t / sqrt(sum r^2 * sum t^2)
 *     maxabs_s = max |r - t|
 *
 * reported as min and mean of SQNR_s over samples (mean of the dB values),
 * mean of cos_s and max of maxabs_s. Edge cases: sum (r-t)^2 == 0 gives
 * +inf ("inf"; identical outputs), sum r^2 == 0 with a difference gives
 * -inf; cos_s is 1 when both are all zeros and 0 when only one is; a NaN
 * anywhere makes that sample's numbers NaN, which counts as failing
 * --min-sqnr. JSON cannot hold infinities: +inf is written as 999, -inf as
 * -999 and NaN as null.
 *
 * --per-tensor: intermediate tensors are matched by name (a quantized
 * model keeps the float names on the Q inputs / producer outputs). When
 * TEST's value of that name goes through QuantizeLinear -> DequantizeLinear,
 * the DQ output is compared: that is what TEST's consumers see (and with a
 * Relu folded into the Q, the named value itself is the pre-activation
 * sum). While REF runs, an observer
 * copies each float main-graph node output whose name is also produced by a
 * node of TEST's main graph; while TEST runs, its observer accumulates
 * sum r^2 and sum (r-t)^2 against the copy (skipped when the shapes
 * differ), and the copies are freed after each sample, so memory is one
 * sample's activations. Per-tensor SQNR pools the sums over all samples;
 * the `top` worst are listed, ties in REF's node order.
 *
 * Samples: samples.h layouts, scanned for REF and checked against both models;
 * TEST must have the same input names (any order: inputs are mapped by
 * name).
 */
#include "src/pipeline/compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/exec/exec.h"
#include "calib/samples.h"

/* Sums of one output over one sample. */
typedef struct osum {
	double r2, t2, d2, rt; /* sum r^2, t^2, (r-t)^2, r*t */
	double maxabs;         /* max |r - t| (NaN when a NaN was met) */
} osum;

/* Per-output results over samples. */
typedef struct ostat {
	const char *name; /* REF's output name */
	size_t ti;        /* index of the same output in TEST */
	double sqnr_min;  /* min over samples (NaN sticks) */
	double sqnr_sum;  /* sum of per-sample dB values, for the mean */
	double cos_sum;   /* sum of per-sample cosines */
	double maxabs;    /* max over samples */
} ostat;

/* A tensor matched by name for --per-tensor. */
typedef struct tmatch {
	const oq_value *rv; /* REF value */
	const oq_value *tv; /* TEST value of the same name */
	size_t order;       /* REF producer's node position (ties in the ranking) */
	oq_rt copy;         /* REF's values for the current sample (owned) */
	int have;           /* copy holds this sample's values */
	double r2, d2;      /* pooled over samples: sum r^2 and sum (r-t)^2 */
	size_t n;           /* samples compared */
	size_t skipped;     /* samples skipped because the shapes differed */
} tmatch;

/* Observer context for --per-tensor. */
typedef struct ptctx {
	const oq_graph *rg, *tg; /* main graphs */
	long *rmap;              /* rg->n_values: index into m, or -1 */
	long *tmap;              /* tg->n_values: index into m, or -1 */
	tmatch *m;
	size_t n;
	oq_diag *d;
} ptctx;

static int is_float_dt(int dt)
{
	return dt == OQ_DT_FLOAT || dt == OQ_DT_FLOAT16 || dt == OQ_DT_BFLOAT16 ||
	       dt == OQ_DT_DOUBLE;
}

static int is_numeric(const oq_rt *t)
{
	char k = oq_dtype_kind(t->dtype);
	return t->kind == OQ_RT_TENSOR && !t->strs && (k == 'f' || k == 's' || k == 'u' || k == 'b');
}

static int same_shape(const oq_rt *a, const oq_rt *b)
{
	if (a->rank != b->rank || a->nelem != b->nelem)
		return 0;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return 0;
	return 1;
}

/* Sums over r and t (same element count). */
static osum sums(const oq_rt *r, const oq_rt *t)
{
	osum s = {0, 0, 0, 0, 0};
	if (r->dtype == OQ_DT_FLOAT && t->dtype == OQ_DT_FLOAT) {
		const float *a = r->data, *b = t->data;
		for (size_t i = 0; i < r->nelem; i++) {
			double x = a[i], y = b[i], e = x - y, ae = fabs(e);
			s.r2 += x * x;
			s.t2 += y * y;
			s.d2 += e * e;
			s.rt += x * y;
			if (!(ae <= s.maxabs))
				s.maxabs = isnan(s.maxabs) ? s.maxabs : ae;
		}
		return s;
	}
	for (size_t i = 0; i < r->nelem; i++) {
		double x = oq_rt_get(r, i), y = oq_rt_get(t, i), e = x - y, ae = fabs(e);
		s.r2 += x * x;
		s.t2 += y * y;
		s.d2 += e * e;
		s.rt += x * y;
		if (!(ae <= s.maxabs))
			s.maxabs = isnan(s.maxabs) ? s.maxabs : ae;
	}
	return s;
}

static double sqnr_db(double r2, double d2)
{
	if (isnan(r2) || isnan(d2))
		return NAN;
	if (d2 == 0)
		return INFINITY;
	return 10.0 * log10(r2 / d2);
}

static double cosine(const osum *s)
{
	if (isnan(s->rt) || isnan(s->r2) || isnan(s->t2))
		return NAN;
	if (s->r2 == 0 && s->t2 == 0)
		return 1.0;
	if (s->r2 == 0 || s->t2 == 0)
		return 0.0;
	return s->rt / sqrt(s->r2 * s->t2);
}

/* "inf", "-inf", "nan" or the number with `prec` decimals. */
static void put_db(FILE *f, double v)
{
	if (isnan(v))
		fputs("nan", f);
	else if (isinf(v))
		fputs(v > 0 ? "inf" : "-inf", f);
	else
		fprintf(f, "%.1f", v);
}

static void json_db(FILE *f, double v)
{
	if (isnan(v))
		fputs("null", f);
	else if (isinf(v))
		fputs(v > 0 ? "999" : "-999", f);
	else
		fprintf(f, "%.6f", v);
}

static void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.9g", v);
	else
		fputs("null", f);
}

/* ------------------------------------------------------------ --per-tensor observers */

static int observe_ref(void *ctx, const oq_value *v, const oq_rt *t)
{
	ptctx *c = ctx;
	tmatch *x;
	long k;
	if (v->graph != c->rg || v->index >= c->rg->n_values || (k = c->rmap[v->index]) < 0 ||
	    !is_float_dt(t->dtype) || t->strs)
		return 0;
	x = &c->m[k];
	oq_rt_release(&x->copy);
	x->have = 0;
	if (oq_rt_copy(&x->copy, t))
		return oq_err(c->d, OQ_ENOMEM, "compare: out of memory copying tensor '%s'",
		              v->name);
	x->have = 1;
	return 0;
}

static int observe_test(void *ctx, const oq_value *v, const oq_rt *t)
{
	ptctx *c = ctx;
	tmatch *x;
	osum s;
	long k;
	if (v->graph != c->tg || v->index >= c->tg->n_values || (k = c->tmap[v->index]) < 0)
		return 0;
	x = &c->m[k];
	if (!x->have)
		return 0;
	if (!is_numeric(t) || !is_float_dt(t->dtype) || !same_shape(&x->copy, t)) {
		x->skipped++;
		return 0;
	}
	s = sums(&x->copy, t);
	x->r2 += s.r2;
	x->d2 += s.d2;
	x->n++;
	return 0;
}

/*
 * What TEST's consumers actually see of value w: when w only passes through
 * QuantizeLinear -> DequantizeLinear (a quantized model), the DQ output;
 * otherwise w itself. Without this, a tensor whose Relu was folded into its
 * Q would be compared before the Q's clamping.
 */
static const oq_value *seen_value(const oq_value *w)
{
	for (size_t i = 0; i < w->n_uses; i++) {
		const oq_node *q = w->uses[i].node;
		const oq_value *qo;
		if (w->uses[i].index != 0 || strcmp(q->op_type, "QuantizeLinear") || q->domain[0] ||
		    q->n_outputs < 1 || !(qo = q->outputs[0]))
			continue;
		for (size_t k = 0; k < qo->n_uses; k++) {
			const oq_node *dq = qo->uses[k].node;
			if (qo->uses[k].index == 0 && !strcmp(dq->op_type, "DequantizeLinear") &&
			    !dq->domain[0] && dq->n_outputs >= 1 && dq->outputs[0])
				return dq->outputs[0];
		}
	}
	return w;
}

/* Names produced by float node outputs of REF's main graph that TEST's main graph also produces. */
static int match_tensors(const oq_graph *rg, const oq_graph *tg, ptctx *c, oq_diag *d)
{
	size_t cap = 0;
	c->rg = rg;
	c->tg = tg;
	c->d = d;
	c->rmap = malloc(sizeof *c->rmap * (rg->n_values ? rg->n_values : 1));
	c->tmap = malloc(sizeof *c->tmap * (tg->n_values ? tg->n_values : 1));
	if (!c->rmap || !c->tmap)
		return oq_err(d, OQ_ENOMEM, "compare: out of memory");
	for (size_t i = 0; i < rg->n_values; i++)
		c->rmap[i] = -1;
	for (size_t i = 0; i < tg->n_values; i++)
		c->tmap[i] = -1;
	for (size_t ni = 0; ni < rg->n_nodes; ni++) {
		const oq_node *n = rg->nodes[ni];
		for (size_t o = 0; o < n->n_outputs; o++) {
			const oq_value *v = n->outputs[o];
			const oq_value *w;
			if (!v || (v->type.kind == OQ_TYPE_TENSOR && v->type.dtype &&
			           !is_float_dt(v->type.dtype)))
				continue;
			w = oq_graph_find(tg, v->name);
			if (!w || !w->producer || c->tmap[w->index] >= 0 ||
			    (w->type.kind == OQ_TYPE_TENSOR && w->type.dtype &&
			     !is_float_dt(w->type.dtype)))
				continue;
			w = seen_value(w);
			if (c->tmap[w->index] >= 0)
				continue;
			if (oq_grow(&c->m, &cap, c->n + 1, sizeof *c->m))
				return oq_err(d, OQ_ENOMEM, "compare: out of memory");
			memset(&c->m[c->n], 0, sizeof c->m[c->n]);
			c->m[c->n].rv = v;
			c->m[c->n].tv = w;
			c->m[c->n].order = ni;
			c->rmap[v->index] = (long)c->n;
			c->tmap[w->index] = (long)c->n;
			c->n++;
		}
	}
	return OQ_OK;
}

static double tm_sqnr(const tmatch *x)
{
	return sqnr_db(x->r2, x->d2);
}

/* Worst first: NaN, then ascending SQNR, ties in REF's node order. */
static int cmp_tmatch(const void *a, const void *b)
{
	const tmatch *x = *(const tmatch *const *)a, *y = *(const tmatch *const *)b;
	double sx = tm_sqnr(x), sy = tm_sqnr(y);
	int nx = isnan(sx), ny = isnan(sy);
	if (nx != ny)
		return nx ? -1 : 1;
	if (!nx && sx != sy)
		return sx < sy ? -1 : 1;
	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	return x->rv->producer_index < y->rv->producer_index   ? -1
	       : x->rv->producer_index > y->rv->producer_index ? 1
	                                                       : 0;
}

/* ------------------------------------------------------------ setup checks */

/* map[k] = REF input index of TEST input k. */
static int map_inputs(const oq_exec *er, const oq_exec *et, size_t *map, oq_diag *d)
{
	size_t nr = oq_exec_n_inputs(er), nt = oq_exec_n_inputs(et);
	for (size_t k = 0; k < nt; k++) {
		const char *nm = oq_exec_input(et, k)->name;
		size_t i;
		for (i = 0; i < nr && strcmp(oq_exec_input(er, i)->name, nm); i++)
			;
		if (i == nr)
			return oq_err(
			    d, OQ_EINVAL,
			    "compare: TEST input '%s' is not an input of REF; both models need "
			    "the same input names",
			    nm);
		map[k] = i;
	}
	for (size_t i = 0; i < nr; i++) {
		const char *nm = oq_exec_input(er, i)->name;
		size_t k;
		for (k = 0; k < nt && strcmp(oq_exec_input(et, k)->name, nm); k++)
			;
		if (k == nt)
			return oq_err(
			    d, OQ_EINVAL,
			    "compare: REF input '%s' is not an input of TEST; both models need "
			    "the same input names",
			    nm);
	}
	return OQ_OK;
}

/* A view of s with each sample's sources in TEST's input order (shares s's strings). */
static int permute_samples(const oq_samples *s, const size_t *map, size_t nt, oq_samples *p,
                           oq_diag *d)
{
	memset(p, 0, sizeof *p);
	p->n_inputs = nt;
	if (!(p->v = oq_calloc(s->n, sizeof *p->v)))
		return oq_err(d, OQ_ENOMEM, "compare: out of memory");
	p->n = s->n;
	for (size_t j = 0; j < s->n; j++) {
		p->v[j].name = s->v[j].name;
		p->v[j].where = s->v[j].where;
		if (!(p->v[j].in = oq_calloc(nt, sizeof *p->v[j].in)))
			return oq_err(d, OQ_ENOMEM, "compare: out of memory");
		for (size_t k = 0; k < nt; k++)
			p->v[j].in[k] = s->v[j].in[map[k]];
	}
	return OQ_OK;
}

static void free_view(oq_samples *p)
{
	for (size_t j = 0; p->v && j < p->n; j++)
		free(p->v[j].in);
	free(p->v);
	memset(p, 0, sizeof *p);
}

static int match_outputs(const oq_exec *er, const oq_exec *et, ostat *os, oq_diag *d)
{
	size_t nr = oq_exec_n_outputs(er), nt = oq_exec_n_outputs(et);
	for (size_t i = 0; i < nr; i++) {
		const char *nm = oq_exec_output(er, i)->name;
		size_t k;
		for (k = 0; k < nt && strcmp(oq_exec_output(et, k)->name, nm); k++)
			;
		if (k == nt)
			return oq_err(
			    d, OQ_EINVAL,
			    "compare: output '%s' of REF is not an output of TEST; outputs "
			    "are matched by name",
			    nm);
		os[i].name = nm;
		os[i].ti = k;
		os[i].sqnr_min = INFINITY;
	}
	return OQ_OK;
}

static const char *shape_of(const oq_rt *t, char *buf, size_t n)
{
	return oq_rt_describe(t, buf, n);
}

/* ------------------------------------------------------------ report */

static void report_text(FILE *f, const ostat *os, size_t nout, size_t ns, tmatch **rank,
                        size_t nrank, const oq_compare_opts *o)
{
	for (size_t i = 0; i < nout; i++) {
		fprintf(f, "output '%s': SQNR min ", os[i].name);
		put_db(f, os[i].sqnr_min);
		fputs(" dB mean ", f);
		put_db(f, ns ? os[i].sqnr_sum / (double)ns : NAN);
		fprintf(f, " dB, cosine %.6f, max abs err %.4g (%zu samples)\n",
		        ns ? os[i].cos_sum / (double)ns : NAN, os[i].maxabs, ns);
	}
	if (!o->per_tensor)
		return;
	fprintf(f, "worst tensors by SQNR (%zu matched by name):\n", nrank);
	for (size_t i = 0; i < nrank && i < (o->top ? o->top : 10); i++) {
		const oq_node *p = rank[i]->rv->producer;
		fprintf(f, "tensor '%s' (%s): SQNR ", rank[i]->rv->name, p ? p->op_type : "?");
		put_db(f, tm_sqnr(rank[i]));
		fputs(" dB\n", f);
	}
}

static void report_json(FILE *f, const ostat *os, size_t nout, size_t ns, tmatch **rank,
                        size_t nrank, const oq_compare_opts *o)
{
	fputs("{\"ref\": ", f);
	oq_json_str(f, o->ref_path ? o->ref_path : "");
	fputs(", \"test\": ", f);
	oq_json_str(f, o->test_path ? o->test_path : "");
	fprintf(f, ", \"samples\": %zu, \"outputs\": [", ns);
	for (size_t i = 0; i < nout; i++) {
		fprintf(f, "%s{\"name\": ", i ? ", " : "");
		oq_json_str(f, os[i].name);
		fputs(", \"sqnr_min_db\": ", f);
		json_db(f, os[i].sqnr_min);
		fputs(", \"sqnr_mean_db\": ", f);
		json_db(f, ns ? os[i].sqnr_sum / (double)ns : NAN);
		fputs(", \"cosine_mean\": ", f);
		json_num(f, ns ? os[i].cos_sum / (double)ns : NAN);
		fputs(", \"max_abs_err\": ", f);
		json_num(f, os[i].maxabs);
		fputs("}", f);
	}
	fputs("], \"tensors\": [", f);
	for (size_t i = 0; o->per_tensor && i < nrank && i < (o->top ? o->top : 10); i++) {
		const oq_node *p = rank[i]->rv->producer;
		fprintf(f, "%s{\"name\": ", i ? ", " : "");
		oq_json_str(f, rank[i]->rv->name);
		fputs(", \"op\": ", f);
		oq_json_str(f, p ? p->op_type : "");
		fputs(", \"sqnr_db\": ", f);
		json_db(f, tm_sqnr(rank[i]));
		fprintf(f, ", \"samples\": %zu}", rank[i]->n);
	}
	fputs("]}\n", f);
}

/* ------------------------------------------------------------ driver */

/* The lower of a and b; NaN when either is. */
static double lower(double a, double b)
{
	return isnan(a) || isnan(b) ? NAN : b < a ? b : a;
}

/* The worst output: the lowest min and the lowest mean over outputs (NaN sticks). */
static void summarize(const ostat *os, size_t nout, size_t ns, oq_compare_summary *sum)
{
	sum->sqnr_min = sum->sqnr_mean = INFINITY;
	sum->n_outputs = nout;
	sum->n_samples = ns;
	for (size_t i = 0; i < nout; i++) {
		sum->sqnr_min = lower(sum->sqnr_min, os[i].sqnr_min);
		sum->sqnr_mean = lower(sum->sqnr_mean, ns ? os[i].sqnr_sum / (double)ns : NAN);
	}
}

int oq_compare(oq_model *ref, oq_model *test, const oq_compare_opts *o, FILE *out, oq_compare_summary *sum,
	       oq_diag *d)
{
	oq_exec_opts eo = {.threads = 0, .max_loop_iterations = o->max_loop_iterations};
	oq_exec *er = NULL, *et = NULL;
	oq_samples s, st;
	ostat *os = NULL;
	ptctx pt;
	tmatch **rank = NULL;
	oq_rt *rin = NULL, *tin = NULL, *rout = NULL, *tout = NULL;
	size_t *map = NULL, nin = 0, nout = 0, ntout = 0, nrank = 0;
	char a[256], b[256];
	int rc;

	memset(&s, 0, sizeof s);
	memset(&st, 0, sizeof st);
	memset(&pt, 0, sizeof pt);
	if (!ref || !ref->graph || !test || !test->graph)
		return oq_err(d, OQ_EINVAL, "compare: a model has no graph");
	if (!o->data_dir)
		return oq_err(d, OQ_EUSAGE,
		              "compare: give --data DIR (sample inputs for both models)");
	eo.threads = o->threads;
	if ((rc = oq_exec_new(ref, &eo, &er, d)) || (rc = oq_exec_new(test, &eo, &et, d)))
		goto fail;
	nin = oq_exec_n_inputs(er);
	nout = oq_exec_n_outputs(er);
	ntout = oq_exec_n_outputs(et);
	if (nin != oq_exec_n_inputs(et)) {
		rc = oq_err(d, OQ_EINVAL,
		            "compare: REF has %zu inputs, TEST has %zu; both models need the same "
		            "inputs",
		            nin, oq_exec_n_inputs(et));
		goto fail;
	}
	map = oq_calloc(nin, sizeof *map);
	os = oq_calloc(nout, sizeof *os);
	rin = oq_calloc(nin, sizeof *rin);
	tin = oq_calloc(nin, sizeof *tin);
	rout = oq_calloc(nout, sizeof *rout);
	tout = oq_calloc(ntout, sizeof *tout);
	if (!map || !os || !rin || !tin || !rout || !tout) {
		rc = oq_err(d, OQ_ENOMEM, "compare: out of memory");
		goto fail;
	}
	if ((rc = map_inputs(er, et, map, d)) || (rc = match_outputs(er, et, os, d)))
		goto fail;
	if ((rc = oq_samples_scan(o->data_dir, er, &s, d)) || (rc = oq_samples_check(&s, er, d)) ||
	    (rc = permute_samples(&s, map, nin, &st, d)) || (rc = oq_samples_check(&st, et, d)))
		goto fail;
	if (o->per_tensor) {
		if ((rc = match_tensors(ref->graph, test->graph, &pt, d)))
			goto fail;
		oq_exec_set_observer(er, observe_ref, &pt);
		oq_exec_set_observer(et, observe_test, &pt);
	}

	for (size_t j = 0; j < s.n; j++) {
		if ((rc = oq_sample_load(&s, j, er, rin, d)))
			goto fail;
		for (size_t k = 0; k < nin; k++)
			tin[k] = rin[map[k]]; /* borrowed views of the same data */
		if ((rc = oq_exec_run(er, rin, nin, rout, nout, d)) ||
		    (rc = oq_exec_run(et, tin, nin, tout, ntout, d)))
			goto fail;
		for (size_t i = 0; i < nout; i++) {
			const oq_rt *r = &rout[i], *t = &tout[os[i].ti];
			osum sm;
			double q;
			if (!is_numeric(r) || !is_numeric(t)) {
				rc = oq_err(
				    d, OQ_EUNSUP,
				    "compare: output '%s' is %s; only numeric outputs can be "
				    "compared",
				    os[i].name, oq_dtype_name(is_numeric(r) ? t->dtype : r->dtype));
				goto fail;
			}
			if (!same_shape(r, t)) {
				rc = oq_err(
				    d, OQ_EINVAL,
				    "compare: sample %s: output '%s' is %s in REF but %s in TEST",
				    s.v[j].where, os[i].name, shape_of(r, a, sizeof a),
				    shape_of(t, b, sizeof b));
				goto fail;
			}
			sm = sums(r, t);
			q = sqnr_db(sm.r2, sm.d2);
			if (isnan(q) || isnan(os[i].sqnr_min) || q < os[i].sqnr_min)
				os[i].sqnr_min = isnan(os[i].sqnr_min) ? os[i].sqnr_min : q;
			os[i].sqnr_sum += q;
			os[i].cos_sum += cosine(&sm);
			if (!(sm.maxabs <= os[i].maxabs))
				os[i].maxabs = isnan(os[i].maxabs) ? os[i].maxabs : sm.maxabs;
		}
		for (size_t k = 0; k < nin; k++)
			oq_rt_release(&rin[k]);
		for (size_t i = 0; i < nout; i++)
			oq_rt_release(&rout[i]);
		for (size_t i = 0; i < ntout; i++)
			oq_rt_release(&tout[i]);
		for (size_t i = 0; i < pt.n; i++) {
			oq_rt_release(&pt.m[i].copy);
			pt.m[i].have = 0;
		}
	}

	if (pt.n) {
		if (!(rank = oq_calloc(pt.n, sizeof *rank))) {
			rc = oq_err(d, OQ_ENOMEM, "compare: out of memory");
			goto fail;
		}
		for (size_t i = 0; i < pt.n; i++)
			if (pt.m[i].n)
				rank[nrank++] = &pt.m[i];
		if (nrank > 1)
			qsort(rank, nrank, sizeof *rank, cmp_tmatch);
	}
	if (out && o->json)
		report_json(out, os, nout, s.n, rank, nrank, o);
	else if (out)
		report_text(out, os, nout, s.n, rank, nrank, o);
	if (sum)
		summarize(os, nout, s.n, sum);
	rc = OQ_OK;
	if (o->has_min_sqnr)
		for (size_t i = 0; i < nout; i++)
			if (isnan(os[i].sqnr_min) || os[i].sqnr_min < o->min_sqnr) {
				char v[32];
				if (isnan(os[i].sqnr_min))
					snprintf(v, sizeof v, "nan");
				else
					snprintf(v, sizeof v, "%.1f", os[i].sqnr_min);
				rc =
				    oq_err(d, OQ_ECHECK,
				           "compare: output '%s' SQNR %s dB is below --min-sqnr %g",
				           os[i].name, v, o->min_sqnr);
			}
fail:
	for (size_t k = 0; rin && k < nin; k++)
		oq_rt_release(&rin[k]);
	for (size_t i = 0; rout && i < nout; i++)
		oq_rt_release(&rout[i]);
	for (size_t i = 0; tout && i < ntout; i++)
		oq_rt_release(&tout[i]);
	for (size_t i = 0; i < pt.n; i++)
		oq_rt_release(&pt.m[i].copy);
	free(pt.m);
	free(pt.rmap);
	free(pt.tmap);
	free(rank);
	free(rout);
	free(tout);
	free(rin);
	free(tin);
	free(os);
	free(map);
	free_view(&st);
	oq_samples_free(&s);
	oq_exec_free(er);
	oq_exec_free(et);
	return rc;
}
