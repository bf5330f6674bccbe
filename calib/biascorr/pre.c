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
	double *s;      /* per layer: its M channel sums at off[l] */
	uint64_t *cnt;  /* per layer: elements summed per channel */
	uint8_t *bad;   /* per layer: the value did not fit */
	size_t j;       /* its index among the measured samples */
	int done;       /* its run ended and its outputs are kept */
} pstage;

struct oq_bc_pre {
	oq_calib_tap tap;
	const oq_graph *g;   /* the model calibration runs */
	size_t nl;           /* layers */
	char **name;         /* per layer: the value measured */
	size_t *M, *off, n_ch;
	int *ch_last;
	long *lmap;          /* per value index of g: its layer, or -1 */
	char *source;        /* the samples: co->source, co->limit */
	size_t limit;
	pthread_mutex_t mu;  /* guards what follows */
	size_t total, n;     /* calibration's samples (0: none begun yet), the measured ones */
	pstage *st;          /* n */
	size_t n_done;
	oq_bc_float_cache cache;
	int broken;          /* out of memory, outputs past the limit, other samples: not ready */
};

int oq_bc_pre_use = 1;

static int tap_want(void *ctx, const oq_value *v)
{
	const oq_bc_pre *p = ctx;
	return v->graph == p->g && v->index < p->g->n_values && p->lmap[v->index] >= 0;
}

static void stages_free(oq_bc_pre *p)
{
	for (size_t j = 0; p->st && j < p->n; j++) {
		free(p->st[j].s);
		free(p->st[j].cnt);
		free(p->st[j].bad);
	}
	free(p->st);
	p->st = NULL;
}

/* Measured sample j of p->n for calibration's sample i (oq_samples_pick's inverse), or SIZE_MAX. */
static size_t measured_index(const oq_bc_pre *p, size_t i)
{
	size_t j;
	if (p->n == p->total)
		return i;
	/* the smallest j with j total / n >= i; pick is increasing in steps of at least 1 */
	j = i / p->total * p->n + ((i % p->total) * p->n + p->total - 1) / p->total;
	return j < p->n && oq_samples_pick(j, p->total, p->n) == i ? j : SIZE_MAX;
}

static void tap_begin(void *ctx, size_t i, size_t total, void **stage)
{
	oq_bc_pre *p = ctx;
	pstage *s = NULL;
	size_t j;

	pthread_mutex_lock(&p->mu);
	if (!p->broken && !p->total && total) {
		p->total = total;
		p->n = total < OQ_MEASURE_SAMPLES ? total : OQ_MEASURE_SAMPLES;
		if (!(p->st = oq_calloc(p->n, sizeof *p->st)))
			p->broken = 1;
	}
	if (p->broken || total != p->total || (j = measured_index(p, i)) == SIZE_MAX)
		goto out;
	s = &p->st[j];
	if (s->done) { /* run twice: the second run replaces the first */
		s->done = 0;
		p->n_done--;
	}
	if ((!s->s && !(s->s = malloc((p->n_ch ? p->n_ch : 1) * sizeof *s->s))) ||
	    (!s->cnt && !(s->cnt = malloc((p->nl ? p->nl : 1) * sizeof *s->cnt))) ||
	    (!s->bad && !(s->bad = malloc(p->nl ? p->nl : 1)))) {
		p->broken = 1;
		s = NULL;
		goto out;
	}
	memset(s->s, 0, (p->n_ch ? p->n_ch : 1) * sizeof *s->s);
	memset(s->cnt, 0, (p->nl ? p->nl : 1) * sizeof *s->cnt);
	memset(s->bad, 0, p->nl ? p->nl : 1);
	s->j = j;
out:
	pthread_mutex_unlock(&p->mu);
	*stage = s;
}

/* A lane's own stage: no lock (the outputs are kept under it, in tap_end). */
static void tap_observe(void *ctx, void *stage, const oq_value *v, const oq_rt *t)
{
	const oq_bc_pre *p = ctx;
	pstage *s = stage;
	long l;

	if (v->graph != p->g || v->index >= p->g->n_values || (l = p->lmap[v->index]) < 0)
		return;
	if (oq_bc_channel_sums(t, p->M[l], p->ch_last[l], s->s + p->off[l], &s->cnt[l]))
		s->bad[l] = 1;
}

static void tap_end(void *ctx, void *stage, size_t i, oq_rt *outs, size_t nout)
{
	oq_bc_pre *p = ctx;
	pstage *s = stage;

	(void)i;
	pthread_mutex_lock(&p->mu);
	if (!p->broken && !p->cache.state && oq_bc_float_cache_init(&p->cache, p->n, nout))
		p->broken = 1;
	if (!p->broken && (p->cache.nout != nout || oq_bc_float_cache_keep(&p->cache, s->j, outs) ||
			   p->cache.state != 1))
		p->broken = 1;
	if (!p->broken) {
		s->done = 1;
		p->n_done++;
	}
	pthread_mutex_unlock(&p->mu);
}

int oq_bc_pre_new(oq_graph *g, const oq_opts *q, const oq_calib_opts *co, oq_bc_pre **out, oq_diag *d)
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
	p->limit = co->limit;
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
	stages_free(p);
	oq_bc_float_cache_free(&p->cache);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

int oq_bc_pre_ready(const oq_bc_pre *p, const oq_calib_opts *o, size_t limit, size_t *n, size_t *nout)
{
	if (p->broken || !p->total || p->n_done != p->n || p->cache.state != 1 || p->cache.limit != limit ||
	    p->limit != o->limit || !p->source || !o->source || strcmp(p->source, o->source))
		return 0;
	*n = p->n;
	*nout = p->cache.nout;
	return 1;
}

long oq_bc_pre_layer(const oq_bc_pre *p, const char *measured, size_t M, int ch_last)
{
	for (size_t l = 0; l < p->nl; l++)
		if (!strcmp(p->name[l], measured))
			return p->M[l] == M && p->ch_last[l] == ch_last ? (long)l : -1;
	return -1;
}

void oq_bc_pre_stage(const oq_bc_pre *p, size_t i, long l, const double **S, uint64_t *cnt, int *bad)
{
	const pstage *s = &p->st[i];
	*S = s->s + p->off[l];
	*cnt = s->cnt[l];
	*bad = s->bad[l];
}

void oq_bc_pre_take(oq_bc_pre *p, oq_bc_float_cache *c)
{
	size_t limit = c->limit, pf = c->peak_f, pq = c->peak_q;

	*c = p->cache;
	c->limit = limit;
	c->peak_f = pf;
	c->peak_q = pq;
	memset(&p->cache, 0, sizeof p->cache);
	stages_free(p);
	p->n_done = 0;
	p->broken = 1;
}
