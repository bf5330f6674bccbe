/*
 * pre.c - bias correction's float side taken during calibration (pre.h).
 */
#include "calib/biascorr/pre.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "calib/biascorr/empirical.h"
#include "calib/samples.h"

/* One measured sample: what bias correction's float run of it would stage (measure.c). */
typedef struct pstage {
	double *s;      /* per layer: its M channel sums at off[l] (in its set's block) */
	uint64_t *cnt;  /* per layer: elements summed per channel */
	uint8_t *bad;   /* per layer: the value did not fit */
	size_t j;       /* its index among the measured samples */
	int done;       /* its run ended and its outputs are kept */
} pstage;

/* The samples of one measurement: the first `limit` of the folder (0: all), at most
 * OQ_MEASURE_SAMPLES of them, evenly spread. */
typedef struct pset {
	size_t limit;
	int sums;            /* 1: also each sample's stage (else the outputs alone) */
	size_t total, n;     /* the measurement's samples before and after thinning (0: none begun) */
	pstage *st;          /* n */
	double *S;           /* the stages' sums, counts and flags: one block each, allocated with st
			      * by the sample that begins first (calibration's first, on the calling
			      * thread): stages allocated one by one on the lanes' threads, long-lived
			      * among calibration's short-lived buffers, keep the heap pages freed
			      * around them from going back to the system */
	uint64_t *C;
	uint8_t *B;
	size_t n_done;
	oq_bc_float_cache cache;
	int broken;          /* out of memory, outputs past the limit, taken: not ready */
} pset;

struct oq_bc_pre {
	oq_calib_tap tap;
	const oq_graph *g;   /* the model calibration runs */
	size_t nl;           /* layers */
	char **name;         /* per layer: the value measured */
	size_t *M, *off, n_ch;
	int *ch_last;
	long *lmap;          /* per value index of g: its layer, or -1 */
	char *source;        /* the samples' folder (co->source) */
	pthread_mutex_t mu;  /* guards the sets' bookkeeping and caches */
	pset set[2];         /* [0]: bias correction's (calibration's limit), [1]: outputs alone on a
			      * smaller limit (the placement's), or none (limit 0) */
	size_t ns;           /* sets in use */
};

int oq_bc_pre_use = 1;

static int tap_want(void *ctx, const oq_value *v)
{
	const oq_bc_pre *p = ctx;
	return v->graph == p->g && v->index < p->g->n_values && p->lmap[v->index] >= 0;
}

static void stages_free(pset *t)
{
	free(t->st);
	free(t->S);
	free(t->C);
	free(t->B);
	t->st = NULL;
	t->S = NULL;
	t->C = NULL;
	t->B = NULL;
}

/* Measured sample j of t->n for calibration's sample i (oq_samples_pick's inverse), or SIZE_MAX. */
static size_t measured_index(const pset *t, size_t i)
{
	size_t j;
	if (i >= t->total)
		return SIZE_MAX;
	if (t->n == t->total)
		return i;
	/* the smallest j with j total / n >= i; pick is increasing in steps of at least 1 */
	j = (i * t->n + t->total - 1) / t->total;
	return j < t->n && oq_samples_pick(j, t->total, t->n) == i ? j : SIZE_MAX;
}

/* Sample i of calibration's total in set t: its stage (zeroed), or NULL. Under p->mu. */
static pstage *set_begin(const oq_bc_pre *p, pset *t, size_t i, size_t total)
{
	pstage *s;
	size_t j, nl = p->nl ? p->nl : 1, nc = p->n_ch ? p->n_ch : 1;

	if (!t->broken && !t->total && total) {
		t->total = t->limit && t->limit < total ? t->limit : total;
		t->n = t->total < OQ_MEASURE_SAMPLES ? t->total : OQ_MEASURE_SAMPLES;
		/* no overflow: n <= OQ_MEASURE_SAMPLES, nc counts output channels of weights in memory */
		if (!(t->st = oq_calloc(t->n, sizeof *t->st)) ||
		    (t->sums && (!(t->S = malloc(t->n * nc * sizeof *t->S)) || !(t->C = malloc(t->n * nl * sizeof *t->C)) ||
				 !(t->B = malloc(t->n * nl)))))
			t->broken = 1;
		for (size_t k = 0; !t->broken && t->sums && k < t->n; k++) {
			t->st[k].s = t->S + k * nc;
			t->st[k].cnt = t->C + k * nl;
			t->st[k].bad = t->B + k * nl;
		}
	}
	if (t->broken || (j = measured_index(t, i)) == SIZE_MAX)
		return NULL;
	s = &t->st[j];
	if (s->done) { /* run twice: the second run replaces the first */
		s->done = 0;
		t->n_done--;
	}
	s->j = j;
	if (!t->sums)
		return s;
	memset(s->s, 0, nc * sizeof *s->s);
	memset(s->cnt, 0, nl * sizeof *s->cnt);
	memset(s->bad, 0, nl);
	return s;
}

/* The stages of one sample: one per set that measures it. */
typedef struct pstages {
	pstage *s[2];
} pstages;

static void tap_begin(void *ctx, size_t i, size_t total, void **stage)
{
	oq_bc_pre *p = ctx;
	pstages *x = NULL;
	pstage *s[2] = {NULL, NULL};

	pthread_mutex_lock(&p->mu);
	for (size_t k = 0; k < p->ns; k++)
		s[k] = set_begin(p, &p->set[k], i, total);
	pthread_mutex_unlock(&p->mu);
	if ((s[0] || s[1]) && (x = malloc(sizeof *x))) {
		x->s[0] = s[0];
		x->s[1] = s[1];
	}
	*stage = x; /* no memory for x: the sample is not kept (its sets are never ready) */
}

/* A lane's own stage: no lock (the outputs are kept under it, in tap_end). */
static void tap_observe(void *ctx, void *stage, const oq_value *v, const oq_rt *t)
{
	const oq_bc_pre *p = ctx;
	pstage *s = ((pstages *)stage)->s[0];
	long l;

	if (!s || !p->set[0].sums || v->graph != p->g || v->index >= p->g->n_values || (l = p->lmap[v->index]) < 0)
		return;
	if (oq_bc_channel_sums(t, p->M[l], p->ch_last[l], s->s + p->off[l], &s->cnt[l]))
		s->bad[l] = 1;
}

static void tap_end(void *ctx, void *stage, size_t i, oq_rt *outs, size_t nout)
{
	oq_bc_pre *p = ctx;
	pstages *x = stage;

	(void)i;
	if (!outs) { /* the run failed: calibration fails with it */
		free(x);
		return;
	}
	pthread_mutex_lock(&p->mu);
	/* the later set first: keeping moves the outputs out of outs, the earlier copies them */
	for (size_t k = p->ns; k-- > 0;) {
		pset *t = &p->set[k];
		pstage *s = x->s[k];
		oq_rt *of = outs, *cp = NULL;
		int fail = 0;
		if (!s || t->broken)
			continue;
		if (!t->cache.state && oq_bc_float_cache_init(&t->cache, t->n, nout))
			fail = 1;
		if (!fail && k && x->s[0]) { /* set 0 keeps the same outputs next: a copy for this one */
			if (!(cp = oq_calloc(nout + 1, sizeof *cp)))
				fail = 1;
			for (size_t o = 0; !fail && o < nout; o++)
				fail = oq_rt_copy(&cp[o], &outs[o]) != OQ_OK;
			of = cp;
		}
		if (fail || t->cache.nout != nout || oq_bc_float_cache_keep(&t->cache, s->j, of) || t->cache.state != 1)
			t->broken = 1;
		else {
			s->done = 1;
			t->n_done++;
		}
		for (size_t o = 0; cp && o < nout; o++)
			oq_rt_release(&cp[o]);
		free(cp);
	}
	pthread_mutex_unlock(&p->mu);
	free(x);
}

int oq_bc_pre_new(oq_graph *g, const oq_opts *q, const oq_calib_opts *co, size_t out_limit, oq_bc_pre **out,
		  oq_diag *d)
{
	oq_opts quiet = *q;
	oq_bc_targets b;
	oq_bc_pre *p;
	int rc;

	*out = NULL;
	quiet.log = NULL;
	if ((rc = oq_bc_targets_find(g, &quiet, &b, d)))
		return rc;
	if (!(p = oq_calloc(1, sizeof *p)))
		goto nomem;
	pthread_mutex_init(&p->mu, NULL);
	p->g = g;
	p->set[0].limit = co->limit;
	p->set[0].sums = 1;
	p->ns = 1;
	if (out_limit && (!co->limit || out_limit < co->limit)) {
		p->set[1].limit = out_limit;
		p->ns = 2;
	}
	p->name = oq_calloc(b.n + 1, sizeof *p->name);
	p->M = oq_calloc(b.n + 1, sizeof *p->M);
	p->off = oq_calloc(b.n + 1, sizeof *p->off);
	p->ch_last = oq_calloc(b.n + 1, sizeof *p->ch_last);
	p->lmap = oq_calloc(g->n_values + 1, sizeof *p->lmap);
	if (!p->name || !p->M || !p->off || !p->ch_last || !p->lmap ||
	    (co->source && !(p->source = oq_strdup(co->source))))
		goto nomem;
	for (size_t i = 0; i < g->n_values; i++)
		p->lmap[i] = -1;
	for (size_t l = 0; l < b.n; l++) {
		const oq_value *v = oq_graph_value(g, b.v[l].measured);
		if (!v || v->index >= g->n_values || p->lmap[v->index] >= 0)
			continue;
		if (!(p->name[p->nl] = oq_strdup(b.v[l].measured)))
			goto nomem;
		p->M[p->nl] = b.v[l].M;
		p->ch_last[p->nl] = b.v[l].ch_last;
		p->off[p->nl] = p->n_ch;
		p->n_ch += b.v[l].M; /* each layer's channels are one tensor's, in memory */
		p->lmap[v->index] = (long)p->nl++;
	}
	oq_bc_targets_free(&b);
	p->tap = (oq_calib_tap){p, tap_want, tap_begin, tap_observe, tap_end};
	*out = p;
	return OQ_OK;
nomem:
	oq_bc_targets_free(&b);
	oq_bc_pre_free(p);
	return oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
}

const oq_calib_tap *oq_bc_pre_tap(oq_bc_pre *p)
{
	return &p->tap;
}

void oq_bc_pre_free(oq_bc_pre *p)
{
	if (!p)
		return;
	for (size_t l = 0; p->name && l < p->nl; l++)
		free(p->name[l]);
	free(p->name);
	free(p->M);
	free(p->off);
	free(p->ch_last);
	free(p->lmap);
	free(p->source);
	for (size_t k = 0; k < 2; k++) {
		stages_free(&p->set[k]);
		oq_bc_float_cache_free(&p->set[k].cache);
	}
	pthread_mutex_destroy(&p->mu);
	free(p);
}

int oq_bc_pre_ready(const oq_bc_pre *p, const oq_calib_opts *o, size_t limit, size_t *n, size_t *nout)
{
	if (!p->source || !o->source || strcmp(p->source, o->source))
		return -1;
	for (size_t k = 0; k < p->ns; k++) {
		const pset *t = &p->set[k];
		if (t->limit == o->limit && !t->broken && t->total && t->n_done == t->n && t->cache.state == 1 &&
		    t->cache.limit == limit) {
			*n = t->n;
			*nout = t->cache.nout;
			return (int)k;
		}
	}
	return -1;
}

long oq_bc_pre_layer(const oq_bc_pre *p, int set, const char *measured, size_t M, int ch_last)
{
	for (size_t l = 0; p->set[set].sums && l < p->nl; l++)
		if (!strcmp(p->name[l], measured))
			return p->M[l] == M && p->ch_last[l] == ch_last ? (long)l : -1;
	return -1;
}

void oq_bc_pre_stage(const oq_bc_pre *p, int set, size_t i, long l, const double **S, uint64_t *cnt, int *bad)
{
	const pstage *s = &p->set[set].st[i];
	*S = s->s + p->off[l];
	*cnt = s->cnt[l];
	*bad = s->bad[l];
}

void oq_bc_pre_take(oq_bc_pre *p, int set, oq_bc_float_cache *c)
{
	pset *t = &p->set[set];
	size_t limit = c->limit, pf = c->peak_f, pq = c->peak_q;

	*c = t->cache;
	c->limit = limit;
	c->peak_f = pf;
	c->peak_q = pq;
	memset(&t->cache, 0, sizeof t->cache);
	stages_free(t);
	t->n_done = 0;
	t->broken = 1;
}
