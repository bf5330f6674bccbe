/*
 * calibrate.c - calibration: runs the samples and observes every value (see
 * calibrate.h for the contract; select.c turns the statistics into ranges).
 *
 * One executor runs every sample; an observer sees each node output of the
 * main graph as it is produced and folds it into a running range:
 *
 *     min_T = min { x in T, over all samples : x finite }    (max alike)
 *     n_nan_T = #{ x in T : x is NaN or +-Inf }
 *
 * Graph inputs get the same treatment from the loaded sample tensors. The
 * per-tensor state lives in an array indexed by oq_value.index of the main
 * graph, so memory is O(values) and nothing is copied or buffered.
 *
 * Determinism: min and max are exact (no rounding), and -0.0 is folded into
 * +0.0 before comparing (x + 0.0f), so the result is one well-defined number
 * whatever the order of samples or elements and whatever the executor's
 * thread count (whose outputs are already identical for any --threads).
 *
 * Hot loop: float32 data goes through oq_minmax_f32 (histogram.c: masked
 * AVX-512 min/max, or independent compare-and-select lanes the compiler
 * vectorises without -ffast-math). A value is finite iff x - x == 0 (false
 * for NaN and +-Inf). float16/bfloat16 are
 * widened into a small float buffer and go through the same loop; double
 * has its own loop (and is rounded outwards to float at the end).
 *
 * Other methods (histogram.h): ema keeps a moving average of each sample's
 * min/max next to the exact range. percentile, entropy and mse add every
 * value to the tensor's histogram in the same pass, right after the min/max
 * scan of the same tensor (whose largest |x| fixes the histogram's grid
 * before the fill), and the method picks the range from it at the end.
 * Bin counts are integers and the histogram depends only on the multiset of
 * values (histogram.h), so these ranges are order-, batch- and
 * thread-independent too. The grid a method aims at (entropy's bit width,
 * mse's step and zero point, the |x| form of percentile) is each tensor's
 * own: oq_calib_opts.grid resolves it as the quantize pass will, overrides
 * included; the histogram itself does not depend on it.
 *
 * Threads: a float32 tensor of at least 2 x 16K elements is scanned in
 * chunks over the executor's pool (scan_par): min/max first, then the
 * values on the tensor's grid, each worker's into its own histogram added to
 * the tensor's after; min/max and counts being exact, that is the serial
 * scan's result bit for bit. The range selections at the end run over the
 * pool too, one tensor per item (collect).
 *
 * Random calibration ("random:N[:SEED]") reuses calib/samples.c's generator
 * through OQ_SRC_RANDOM sources: sample i feeds input K the splitmix64
 * stream seeded with mix(SEED, i) + K * 0x9E3779B97F4A7C15, where mix is one
 * splitmix64 finaliser round, so samples differ and depend only on SEED and
 * i. One sample record is reused, so N costs no memory.
 */
#include "calib/calibrate.h"
#include "calib/calibrate_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "calib/exec/threadpool.h"
#include "calib/folds.h"
#include "src/quant/qparams.h"
#include "calib/samples.h"

#define WIDEN_BLOCK 1024 /* f16/bf16 elements widened at a time */

/* ------------------------------------------------------------ the hot loop */

static void scan_f64(const double *p, size_t n, double *lo, double *hi, uint64_t *bad)
{
	for (size_t i = 0; i < n; i++) {
		double x = p[i] + 0.0;
		if ((x - x) != 0.0) {
			(*bad)++;
			continue;
		}
		*lo = x < *lo ? x : *lo;
		*hi = x > *hi ? x : *hi;
	}
}

static int is_observed_dtype(int dt)
{
	return dt == OQ_DT_FLOAT || dt == OQ_DT_FLOAT16 || dt == OQ_DT_BFLOAT16 ||
	       dt == OQ_DT_DOUBLE;
}

/*
 * Parallel scan of a float32 tensor of at least 2 PAR_GRAIN values, in two
 * rounds over the pool's threads, chunk by chunk: the min/max of each chunk
 * into its own slot, folded in chunk order (exact, -0 read as +0); then,
 * with h raised to the whole tensor's grid, the values, the caller's chunks
 * into h and each worker's into its own histogram on that grid, added to h
 * bin by bin after (oq_hist_drain). Counts are integers, so the result is the
 * serial scan's, bit for bit, whatever the thread count or which thread took
 * which chunk. About two chunks per thread: each fill call clears and sums
 * its sub-histograms, so smaller chunks cost more than they balance.
 */
#define PAR_GRAIN ((size_t)1 << 14) /* the smallest chunk (below 2 of them: a serial scan) */
#define PAR_CHUNKS 32               /* the most chunks of a scan */

typedef struct pscan {
	const float *p;
	size_t n, chunk;
	oq_hist *h, *ph;         /* the caller's histogram, the workers' (by pool thread index) */
	float amax;              /* the whole tensor's largest |x| (fill round) */
	float lo[PAR_CHUNKS], hi[PAR_CHUNKS];
	uint64_t bad[PAR_CHUNKS];
	int rc[PAR_CHUNKS];
} pscan;

static void pscan_minmax(void *ctx, size_t begin, size_t end)
{
	pscan *ps = ctx;

	for (size_t c = begin; c < end; c++) {
		size_t i = c * ps->chunk, m = ps->n - i < ps->chunk ? ps->n - i : ps->chunk;
		ps->lo[c] = INFINITY;
		ps->hi[c] = -INFINITY;
		ps->bad[c] = 0;
		oq_minmax_f32(ps->p + i, m, &ps->lo[c], &ps->hi[c], &ps->bad[c]);
	}
}

static void pscan_fill(void *ctx, size_t begin, size_t end)
{
	pscan *ps = ctx;
	int self = oq_pool_self();
	oq_hist *h = self ? &ps->ph[self] : ps->h;

	for (size_t c = begin; c < end; c++) {
		size_t i = c * ps->chunk, m = ps->n - i < ps->chunk ? ps->n - i : ps->chunk;
		ps->rc[c] = oq_hist_add_f32(h, ps->p + i, m, ps->amax);
	}
}

/* fold()'s float32 scan of p[0..n) into *lo, *hi, *bad and h (when not NULL), over c's threads. */
static int scan_par(calib *c, oq_hist *h, const float *p, size_t n, float *lo, float *hi,
                    uint64_t *bad)
{
	pscan ps;
	size_t nch;
	float tlo = INFINITY, thi = -INFINITY;
	int rc = OQ_OK, nt = oq_pool_threads(c->pool);

	nch = n / PAR_GRAIN;
	nch = nch > 2 * (size_t)nt ? 2 * (size_t)nt : nch;
	nch = nch > PAR_CHUNKS ? PAR_CHUNKS : nch;
	ps.p = p;
	ps.n = n;
	ps.chunk = (n + nch - 1) / nch;
	ps.h = h;
	ps.ph = c->ph;
	nch = (n + ps.chunk - 1) / ps.chunk;
	oq_pool_run(c->pool, nch, 1, pscan_minmax, &ps);
	for (size_t k = 0; k < nch; k++) {
		tlo = ps.lo[k] < tlo ? ps.lo[k] : tlo;
		thi = ps.hi[k] > thi ? ps.hi[k] : thi;
		*bad += ps.bad[k];
	}
	*lo = tlo < *lo ? tlo : *lo;
	*hi = thi > *hi ? thi : *hi;
	if (!h)
		return OQ_OK;
	ps.amax = tlo <= thi ? fmaxf(-tlo, thi) : 0;
	if (!(ps.amax > 0)) /* zeros, NaN and Inf only: a count of zeros */
		return oq_hist_add_f32(h, p, n, 0);
	if ((rc = oq_hist_reserve(h, oq_hist_exponent(ps.amax < FLT_MAX ? ps.amax : FLT_MAX))))
		return rc;
	for (int t = 1; t < nt; t++)
		if ((rc = oq_hist_regrid(&c->ph[t], h->e)))
			return rc;
	oq_pool_run(c->pool, nch, 1, pscan_fill, &ps);
	for (size_t k = 0; k < nch; k++)
		rc = rc ? rc : ps.rc[k];
	for (int t = 1; t < nt && !rc; t++)
		rc = oq_hist_drain(h, &c->ph[t]);
	return rc;
}

/* Folds tensor t into s (and, for EMA, its per-sample range into em; the histogram h when not
 * NULL). OQ_ENOMEM when h's bins cannot be allocated. */
static int fold(calib *c, tstat *s, ema *em, oq_hist *h, double ema_c, const oq_rt *t)
{
	float lo = INFINITY, hi = -INFINITY;
	uint64_t bad = 0;
	int rc = OQ_OK;

	s->seen = 1;
	if (!t->nelem || !t->data)
		return OQ_OK;
	if (t->dtype == OQ_DT_FLOAT && c->ph && t->nelem >= 2 * PAR_GRAIN) {
		rc = scan_par(c, h, t->data, t->nelem, &lo, &hi, &bad);
	} else if (t->dtype == OQ_DT_FLOAT) {
		oq_minmax_f32(t->data, t->nelem, &lo, &hi, &bad);
		/* the scan's extremes fix the histogram's grid for this tensor before the fill */
		if (h)
			rc = oq_hist_add_f32(h, t->data, t->nelem, lo <= hi ? fmaxf(-lo, hi) : 0);
	} else if (t->dtype == OQ_DT_DOUBLE) {
		double dlo = INFINITY, dhi = -INFINITY;
		scan_f64(t->data, t->nelem, &dlo, &dhi, &bad);
		s->lo = dlo < s->lo ? dlo : s->lo;
		s->hi = dhi > s->hi ? dhi : s->hi;
		s->n_bad += bad;
		if (em && dlo <= dhi)
			oq_ema_update(&em->lo, &em->hi, &em->init, dlo, dhi, ema_c);
		return h ? oq_hist_add_f64(h, t->data, t->nelem) : OQ_OK;
	} else {
		const uint16_t *p = t->data;
		float buf[WIDEN_BLOCK];
		for (size_t i = 0; i < t->nelem && !rc; i += WIDEN_BLOCK) {
			size_t m = t->nelem - i < WIDEN_BLOCK ? t->nelem - i : WIDEN_BLOCK;
			float blo = INFINITY, bhi = -INFINITY;
			for (size_t j = 0; j < m; j++)
				buf[j] = t->dtype == OQ_DT_FLOAT16 ? oq_f16_to_f32(p[i + j])
				                                   : oq_bf16_to_f32(p[i + j]);
			oq_minmax_f32(buf, m, &blo, &bhi, &bad);
			if (h)
				rc = oq_hist_add_f32(h, buf, m, blo <= bhi ? fmaxf(-blo, bhi) : 0);
			lo = blo < lo ? blo : lo;
			hi = bhi > hi ? bhi : hi;
		}
	}
	s->lo = (double)lo < s->lo ? (double)lo : s->lo;
	s->hi = (double)hi > s->hi ? (double)hi : s->hi;
	s->n_bad += bad;
	if (em && lo <= hi)
		oq_ema_update(&em->lo, &em->hi, &em->init, lo, hi, ema_c);
	return rc;
}

/* ------------------------------------------------------------ slots */

static int cmp_sub(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)((const vsub *)a)->g, y = (uintptr_t)((const vsub *)b)->g;
	return (x > y) - (x < y);
}

/* The numbering of body g, or NULL when g is not a body of c's model. */
static const vsub *find_sub(const calib *c, const oq_graph *g)
{
	vsub key = {g, NULL};
	return c->n_subs ? bsearch(&key, c->subs, c->n_subs, sizeof *c->subs, cmp_sub) : NULL;
}

/* v's slot, or SIZE_MAX when v is not observed (not a value of c's model, an outer capture). */
static size_t slot_of(const calib *c, const oq_value *v)
{
	const vsub *s;

	if (v->graph == c->g)
		return v->index < c->g->n_values && c->g->values[v->index] == v ? v->index : SIZE_MAX;
	if (!(s = find_sub(c, v->graph)) || v->index >= s->g->n_values || s->g->values[v->index] != v)
		return SIZE_MAX;
	return s->map[v->index];
}

/* The slot of the value named name, or SIZE_MAX (the main graph first, then the bodies). */
static size_t slot_named(const calib *c, const char *name)
{
	const oq_value *v = oq_graph_find(c->g, name);
	size_t i = v ? slot_of(c, v) : SIZE_MAX;

	for (size_t k = 0; i == SIZE_MAX && k < c->n_subs; k++)
		if ((v = oq_graph_find(c->subs[k].g, name)) && v->graph == c->subs[k].g)
			i = slot_of(c, v);
	return i;
}

typedef struct subs_acc {
	vsub *v;
	size_t n, cap;
} subs_acc;

static int add_sub(oq_graph *sub, oq_node *owner, void *ctx)
{
	subs_acc *a = ctx;

	(void)owner;
	if (oq_grow(&a->v, &a->cap, a->n + 1, sizeof *a->v))
		return OQ_ENOMEM;
	a->v[a->n].g = sub;
	a->v[a->n++].map = NULL;
	return oq_graph_each_subgraph(sub, add_sub, ctx);
}

static void slots_free(calib *c)
{
	for (size_t k = 0; k < c->n_subs; k++)
		free(c->subs[k].map);
	free(c->subs);
	free(c->vals);
	c->subs = NULL;
	c->vals = NULL;
	c->n_subs = 0;
}

/*
 * c->n, c->vals and c->subs for main graph g: its values keep their index; the values each
 * body defines (not its outer captures) follow, a name seen before reusing that slot, so a
 * body's statistics merge over every iteration and call (min/max and counts are exact).
 */
static int slots_init(calib *c, oq_graph *g)
{
	subs_acc a = {NULL, 0, 0};
	oq_nameset seen;
	size_t n = g->n_values;
	int rc;

	memset(&seen, 0, sizeof seen);
	c->n = n;
	if ((rc = oq_graph_each_subgraph(g, add_sub, &a)))
		goto fail;
	c->subs = a.v;
	c->n_subs = a.n;
	for (size_t k = 0; k < a.n; k++)
		if (!oq_add_size(n, a.v[k].g->n_values, &n))
			goto fail;
	if (!(c->vals = oq_calloc(n ? n : 1, sizeof *c->vals)))
		goto fail;
	for (size_t i = 0; i < g->n_values; i++) {
		c->vals[i] = g->values[i];
		if (a.n && oq_nameset_add(&seen, g->values[i]->name))
			goto fail;
	}
	for (size_t k = 0; k < a.n; k++) {
		const oq_graph *b = a.v[k].g;
		if (!(a.v[k].map = oq_calloc(b->n_values ? b->n_values : 1, sizeof *a.v[k].map)))
			goto fail;
		for (size_t i = 0; i < b->n_values; i++) {
			const oq_value *v = b->values[i];
			a.v[k].map[i] = SIZE_MAX;
			if (v->flags & OQ_V_OUTER)
				continue;
			if (oq_nameset_has(&seen, v->name)) {
				for (size_t x = 0; x < c->n; x++) /* rare: a name two bodies define */
					if (strcmp(c->vals[x]->name, v->name) == 0) {
						a.v[k].map[i] = x;
						break;
					}
				continue;
			}
			if (oq_nameset_add(&seen, v->name))
				goto fail;
			c->vals[c->n] = v;
			a.v[k].map[i] = c->n++;
		}
	}
	if (a.n > 1)
		qsort(c->subs, c->n_subs, sizeof *c->subs, cmp_sub);
	oq_nameset_free(&seen);
	return OQ_OK;
fail:
	c->subs = a.v;
	c->n_subs = a.n;
	oq_nameset_free(&seen);
	slots_free(c);
	return OQ_ENOMEM;
}

/* v is observed: not a main-graph value the quantize pass reads no range of (need_only). */
static int needed(const calib *c, const oq_value *v)
{
	return !c->need || v->graph != c->g || v->index >= c->g->n_values || c->need[v->index];
}

static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	calib *c = ctx;
	size_t i, q;
	int rc;

	if (c->extra && (rc = c->extra(c->extra_ctx, v, t)))
		return rc;
	if (c->tap_st)
		c->tap->observe(c->tap->ctx, c->tap_st, v, t);
	if ((i = slot_of(c, v)) == SIZE_MAX || !is_observed_dtype(t->dtype) || !needed(c, v))
		return 0;
	q = c->fold * c->n + i;
	if ((rc = fold(c, &c->fst[q], c->em ? &c->em[i] : NULL, c->h && c->track[i] ? &c->fh[q] : NULL,
	               c->ema_c, t)))
		c->oom = v;
	return rc;
}

/* Whether the observer needs v (oq_exec_set_observe_want). */
static int want(void *ctx, const oq_value *v)
{
	const calib *c = ctx;
	return (!(v->qmark & c->skip) && needed(c, v)) || (c->tap && c->tap->want(c->tap->ctx, v));
}

/* ------------------------------------------------------------ sources */

static uint64_t mix64(uint64_t z)
{
	z += 0x9E3779B97F4A7C15u;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
	return z ^ (z >> 31);
}

/* Decimal digits of [p, end) into *v; 0 when empty, not all digits or too large. */
static int parse_u64(const char *p, const char *end, uint64_t *v)
{
	*v = 0;
	if (p == end)
		return 0;
	for (; p < end; p++) {
		if (*p < '0' || *p > '9' || *v > (UINT64_MAX - 9) / 10)
			return 0;
		*v = *v * 10 + (uint64_t)(*p - '0');
	}
	return 1;
}

/* "random:N" or "random:N:SEED" -> n, seed. */
static int parse_random(const char *src, uint64_t *n, uint64_t *seed, oq_diag *d)
{
	const char *p = src + 7, *colon = strchr(p, ':');
	const char *end = p + strlen(p);

	*seed = 0;
	if (!parse_u64(p, colon ? colon : end, n) || *n == 0 ||
	    (colon && !parse_u64(colon + 1, end, seed)))
		return oq_err(d, OQ_EUSAGE,
		              "calibrate: --calib '%s': expected random:N or random:N:SEED (N > 0 "
		              "samples, SEED a non-negative integer)",
		              src);
	return OQ_OK;
}

/* OQ_EINVAL when folder `dir` holds nothing that could be a sample (hidden entries and *.onnx do
 * not count, as in oq_samples_scan); other problems are left to the scan. */
static int check_not_empty(const char *dir, oq_diag *d)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	int any = 0;

	if (!dp)
		return oq_err(d, OQ_EIO, "calibrate: cannot open folder '%s': %s", dir,
		              strerror(errno));
	while (!any && (de = readdir(dp))) {
		size_t l = strlen(de->d_name);
		if (de->d_name[0] == '.' || (l >= 5 && !strcmp(de->d_name + l - 5, ".onnx")))
			continue;
		any = 1;
	}
	closedir(dp);
	if (!any)
		return oq_err(d, OQ_EINVAL,
		              "calibrate: %s holds no samples; give NNN.npy files or NNN/ folders "
		              "(see README)",
		              dir);
	return OQ_OK;
}

/* One reusable random sample for e's inputs. */
static int random_sample(const oq_exec *e, oq_samples *s, oq_diag *d)
{
	size_t nin = oq_exec_n_inputs(e);

	memset(s, 0, sizeof *s);
	s->n_inputs = nin;
	s->v = oq_calloc(1, sizeof *s->v);
	if (!s->v)
		return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
	s->n = 1;
	s->v[0].name = oq_strdup("random");
	s->v[0].where = oq_strdup("--calib random");
	s->v[0].in = oq_calloc(nin, sizeof *s->v[0].in);
	if (!s->v[0].name || !s->v[0].where || !s->v[0].in)
		return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
	for (size_t k = 0; k < nin; k++) {
		s->v[0].in[k].kind = OQ_SRC_RANDOM;
		if (!(s->v[0].in[k].path = oq_strdup("random")))
			return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
	}
	return OQ_OK;
}

/* ------------------------------------------------------------ progress */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void bar(FILE *f, const char *what, size_t done, size_t total, double elapsed)
{
	double rate = elapsed > 0 ? (double)done / elapsed : 0;
	fprintf(f, "\rcalibrate%s: %zu/%zu samples, %.1f samples/s", what, done, total, rate);
	if (rate > 0)
		fprintf(f, ", ETA %.0f s", (double)(total - done) / rate);
	fputs("\033[K", f); /* clear what a longer previous line left */
	fflush(f);
}

/* ------------------------------------------------------------ driver */

/* What a pass over the samples needs. */
typedef struct job {
	oq_exec *e;
	oq_samples s;      /* the sample list (one reused record for random data) */
	oq_rt *in, *outs;  /* nin inputs, nout outputs of one run */
	size_t nin, nout;
	size_t total;      /* samples of the whole set (after --calib-limit) */
	size_t begin, end; /* the samples this run reads: [begin, end) (a shard, or all) */
	size_t batch;      /* samples per run (--calib-batch), >= 1 */
	oq_rt *pend;       /* batch > 1: batch x nin loaded samples waiting to be concatenated */
	int is_random;     /* --calib random:N[:SEED] */
	uint64_t seed;     /* its SEED */
	FILE *tty;         /* progress bar stream, or NULL */
	size_t lanes;      /* samples that ran at a time (sweep_lanes), 1 when one after the other */
	double t0, last;   /* pass start; last bar update (-1: none yet) */
} job;

/* Loads sample i (absolute index) into in[nin] from s (j->s, or a lane's copy of the one
 * random record: its seeds are rewritten per sample) for executor e. */
static int load(const job *j, oq_samples *s, const oq_exec *e, size_t i, oq_rt *in, oq_diag *d)
{
	if (j->is_random)
		for (size_t k = 0; k < j->nin; k++)
			s->v[0].in[k].seed = mix64(j->seed ^ mix64((uint64_t)i));
	return oq_sample_load(s, j->is_random ? 0 : i, e, in, d);
}

/* The fold of sample i (absolute index): what c->fold is while it runs. */
static size_t fold_of(const job *j, const calib *c, size_t i)
{
	return c->nf > 1 ? oq_folds_of(i, j->total, c->nf) : 0;
}

/* Observes in[nin] (into c; sample i fed to the tap, SIZE_MAX: a batch, not fed), runs it on e
 * and releases inputs and outputs. */
static int run_one(const job *j, oq_exec *e, calib *c, size_t i, oq_rt *in, oq_rt *outs, oq_diag *d)
{
	int rc = OQ_OK;
	c->tap_st = NULL;
	if (c->tap && i != SIZE_MAX)
		c->tap->begin(c->tap->ctx, i, j->total, &c->tap_st);
	for (size_t k = 0; k < j->nin && !rc; k++)
		rc = observe(c, oq_exec_input(e, k), &in[k]);
	if (!rc)
		rc = oq_exec_run(e, in, j->nin, outs, j->nout, d);
	if (c->tap_st)
		c->tap->end(c->tap->ctx, c->tap_st, i, rc ? NULL : outs, j->nout);
	c->tap_st = NULL;
	if (rc && c->oom) /* the observer's own failure: the executor has no message for it */
		rc = oq_err(d, OQ_ENOMEM, "calibrate: out of memory for the histogram of '%s' (%d bins)",
		            c->oom->name, 2 * OQ_HIST_SIDE);
	for (size_t k = 0; k < j->nin; k++)
		oq_rt_release(&in[k]);
	for (size_t k = 0; k < j->nout; k++)
		oq_rt_release(&outs[k]);
	return rc;
}

/* Can samples a and b (nin inputs each) share a batch: same dtypes and dims past axis 0? */
static int same_shape(const oq_rt *a, const oq_rt *b, size_t nin)
{
	for (size_t k = 0; k < nin; k++) {
		if (a[k].dtype != b[k].dtype || a[k].rank != b[k].rank || a[k].rank < 1)
			return 0;
		for (int x = 1; x < a[k].rank; x++)
			if (a[k].dims[x] != b[k].dims[x])
				return 0;
	}
	return 1;
}

/* j->in = the n pending samples concatenated along axis 0 (pending ones released). */
static int concat(job *j, size_t n, oq_diag *d)
{
	for (size_t k = 0; k < j->nin; k++) {
		const oq_rt *first = &j->pend[k];
		int64_t dims[OQ_RT_MAX_RANK];
		size_t at = 0;
		int rc;
		memcpy(dims, first->dims, sizeof dims);
		dims[0] = 0;
		for (size_t b = 0; b < n; b++) {
			if (j->pend[b * j->nin + k].dims[0] > INT64_MAX - dims[0])
				return oq_err(d, OQ_EINVAL, "calibrate: --calib-batch: batch too large");
			dims[0] += j->pend[b * j->nin + k].dims[0];
		}
		if ((rc = oq_rt_alloc(&j->in[k], first->dtype, first->rank, dims)))
			return oq_err(d, rc, "calibrate: --calib-batch: cannot allocate a batch of %zu "
			                     "samples for input '%s'",
			              n, oq_exec_input(j->e, k)->name);
		for (size_t b = 0; b < n; b++) {
			oq_rt *t = &j->pend[b * j->nin + k];
			if (t->nbytes > j->in[k].nbytes - at)
				return oq_err(d, OQ_EINVAL, "calibrate: --calib-batch: sizes do not add up");
			if (t->nbytes)
				memcpy((char *)j->in[k].data + at, t->data, t->nbytes);
			at += t->nbytes;
			oq_rt_release(t);
		}
	}
	return OQ_OK;
}

static void progress(job *j, const char *what, size_t done)
{
	double t;
	if (!j->tty)
		return;
	t = now();
	if (done == j->end - j->begin || j->last < 0 || t - j->last >= 0.1) {
		bar(j->tty, what, done, j->end - j->begin, t - j->t0);
		j->last = t;
	}
}

/* n entries "nothing seen" into *st and, with hist, n empty histograms into *h. */
static int stats_alloc(size_t n, int hist, tstat **st, oq_hist **h)
{
	*st = oq_calloc(n, sizeof **st);
	*h = hist ? oq_calloc(n, sizeof **h) : NULL;
	if (!*st || (hist && !*h))
		return OQ_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		(*st)[i].lo = INFINITY;
		(*st)[i].hi = -INFINITY;
		if (*h)
			oq_hist_init(&(*h)[i]);
	}
	return OQ_OK;
}

/* c->st and, with hist, c->h for the values of c->g, and their c->nf folds (c->fst, c->fh). */
static int stats_new(calib *c, int hist)
{
	size_t n = c->n, nf;

	c->fst = NULL;
	c->fh = NULL;
	if (stats_alloc(n, hist, &c->st, &c->h))
		return OQ_ENOMEM;
	if (c->nf <= 1) {
		c->fst = c->st;
		c->fh = c->h;
		return OQ_OK;
	}
	if (!oq_mul_size(n, c->nf, &nf))
		return OQ_ENOMEM;
	return stats_alloc(nf, hist, &c->fst, &c->fh);
}

static void hists_free(oq_hist *h, size_t n)
{
	for (size_t i = 0; h && i < n; i++)
		oq_hist_free(&h[i]);
	free(h);
}

/* Frees what stats_new made (the histograms' bins too). */
static void stats_free(calib *c)
{
	size_t n = c->n;

	if (c->fst != c->st) {
		free(c->fst);
		hists_free(c->fh, c->nf * n);
	}
	hists_free(c->h, n);
	free(c->st);
	c->h = c->fh = NULL;
	c->st = c->fst = NULL;
}

/* Folds b into a: min, max, counts (exact). */
static void tstat_add(tstat *a, const tstat *b)
{
	a->lo = b->lo < a->lo ? b->lo : a->lo;
	a->hi = b->hi > a->hi ? b->hi : a->hi;
	a->n_bad += b->n_bad;
	a->seen |= b->seen;
}

/* With folds: c->st and c->h (the tracked ones), empty so far, become the totals of the folds
 * (exact merges: what one fold would have held). OQ_ENOMEM, OQ_EINVAL on a count overflow. */
static int fold_totals(calib *c)
{
	size_t n = c->n;
	int rc;

	if (c->nf <= 1)
		return OQ_OK;
	for (size_t i = 0; i < n; i++)
		for (size_t f = 0; f < c->nf; f++) {
			tstat_add(&c->st[i], &c->fst[f * n + i]);
			if (c->h && c->track[i] && (rc = oq_hist_merge(&c->h[i], &c->fh[f * n + i])))
				return rc;
		}
	return OQ_OK;
}

/*
 * Sample lanes. With T >= 2 threads and one sample per run, the samples
 * after the first run T at a time, one per thread: lane 0 on the executor
 * itself and c, lane k on a clone (oq_exec_clone: the plan and packed
 * weights shared, its own arena) with its own observer state, all run as
 * the items of one parallel-for over the executor's pool, so every kernel
 * inside runs on its lane's thread alone. A lane takes the next sample
 * index from a shared counter until none is left. At the end each lane's
 * state is merged into c; min/max, NaN counts and histogram counts (on
 * their power-of-two grids, histogram.h) merge exactly, so c ends bit for bit
 * as after one sample at a time. Lanes help small models whose kernels
 * cannot keep T threads busy; they cost T arenas.
 * Not used for ema (its average is in sample order), an extra observer
 * (bias correction), --calib-batch, or when T arenas would take more than
 * a quarter of the machine's memory: then the executor's threads share each
 * kernel as before.
 *
 * Errors: a lane that fails at sample i lowers `stop` to i; no lane takes a
 * sample after stop, and every sample before it was handed out before i
 * and runs to its end. The error reported is the one of the smallest
 * failing index, as in the serial sweep.
 */
int oq_calib_lanes = -1;

typedef struct lane {
	oq_exec *e;        /* j->e (lane 0) or a clone */
	calib *c;          /* the caller's state (lane 0) or own */
	calib own;
	oq_rt *in, *outs;
	oq_samples s;      /* j->s, or (random data) a copy of its one record with own seeds */
	oq_sample one;
	oq_diag d;
	size_t err_at;     /* sample index of the lane's error */
	int rc;
} lane;

typedef struct lanes {
	job *j;
	const char *what;
	lane *v;
	size_t n;
	int by_fold;        /* lanes take whole folds (next_fold), not single samples (next) */
	size_t start;       /* the first sample the lanes run */
	atomic_size_t next_fold; /* by_fold: the next fold to hand out */
	atomic_size_t next; /* the next sample to hand out */
	atomic_size_t stop; /* the smallest failing sample so far, SIZE_MAX: none */
	atomic_size_t done; /* samples finished */
} lanes;

/* Runs sample i on lane ln: 0, or 1 after an error (recorded, `stop` lowered). */
static int lane_sample(lanes *L, lane *ln, size_t i)
{
	job *j = L->j;
	size_t stop, done;

	ln->c->fold = fold_of(j, ln->c, i);
	if ((ln->rc = load(j, &ln->s, ln->e, i, ln->in, &ln->d)) ||
	    (ln->rc = run_one(j, ln->e, ln->c, i, ln->in, ln->outs, &ln->d))) {
		ln->err_at = i;
		stop = atomic_load(&L->stop);
		while (i < stop && !atomic_compare_exchange_weak(&L->stop, &stop, i))
			;
		return 1;
	}
	done = atomic_fetch_add(&L->done, 1) + 1;
	if (oq_pool_self() == 0)
		progress(j, L->what, done);
	return 0;
}

static void lane_run(void *ctx, size_t begin, size_t end)
{
	lanes *L = ctx;
	job *j = L->j;

	for (size_t k = begin; k < end; k++) {
		lane *ln = &L->v[k];
		while (L->by_fold) {
			size_t f = atomic_fetch_add(&L->next_fold, 1), a, b;
			if (f >= L->v[0].c->nf)
				break;
			a = oq_folds_begin(f, j->total, L->v[0].c->nf);
			b = oq_folds_begin(f + 1, j->total, L->v[0].c->nf);
			a = a < L->start ? L->start : a;
			b = b > j->end ? j->end : b;
			for (size_t i = a; i < b && i <= atomic_load(&L->stop); i++)
				if (lane_sample(L, ln, i))
					return;
		}
		for (;;) {
			size_t i = L->by_fold ? j->end : atomic_fetch_add(&L->next, 1);
			if (i >= j->end || i > atomic_load(&L->stop) || lane_sample(L, ln, i))
				break;
		}
	}
}

/*
 * Folds lane state l into c (same graph, folds and tracked values), fold by fold. A histogram c
 * has no bins for yet takes l's (the lanes ran different folds): no copy, and l is left without
 * them, to be freed as it is.
 */
static int lane_merge(calib *c, calib *l)
{
	size_t n = c->n;

	for (size_t q = 0; q < c->nf * n; q++) {
		int rc;
		tstat_add(&c->fst[q], &l->fst[q]);
		if (!c->fh || !c->track[q % n])
			continue;
		if (!oq_hist_has_bins(&c->fh[q]) && !c->fh[q].n_zero) {
			c->fh[q] = l->fh[q];
			oq_hist_init(&l->fh[q]);
		} else if ((rc = oq_hist_merge(&c->fh[q], &l->fh[q]))) {
			return rc;
		}
	}
	return OQ_OK;
}

static void lane_free(lane *ln, size_t nin, size_t nout, int is_clone)
{
	if (ln->in)
		for (size_t k = 0; k < nin; k++)
			oq_rt_release(&ln->in[k]);
	if (ln->outs)
		for (size_t k = 0; k < nout; k++)
			oq_rt_release(&ln->outs[k]);
	free(ln->in);
	free(ln->outs);
	free(ln->one.in);
	if (ln->c == &ln->own)
		stats_free(&ln->own);
	if (is_clone)
		oq_exec_free(ln->e);
}

/* Lane k's executor, observer state and buffers. */
static int lane_init(job *j, calib *c, lane *ln, size_t k)
{
	oq_exec_opts eo = {.threads = 1};
	int rc;

	oq_diag_init(&ln->d);
	ln->err_at = SIZE_MAX;
	ln->s = j->s;
	if (j->is_random) {
		ln->one = j->s.v[0];
		if (!(ln->one.in = oq_calloc(j->nin ? j->nin : 1, sizeof *ln->one.in)))
			return OQ_ENOMEM;
		memcpy(ln->one.in, j->s.v[0].in, j->nin * sizeof *ln->one.in);
		ln->s.v = &ln->one;
	}
	if (!(ln->in = oq_calloc(j->nin ? j->nin : 1, sizeof *ln->in)) ||
	    !(ln->outs = oq_calloc(j->nout ? j->nout : 1, sizeof *ln->outs)))
		return OQ_ENOMEM;
	if (k == 0) {
		ln->e = j->e;
		ln->c = c;
		return OQ_OK;
	}
	if ((rc = oq_exec_clone(j->e, &eo, &ln->e, &ln->d)))
		return rc;
	ln->c = &ln->own;
	ln->own = *c;
	ln->own.pool = oq_exec_pool(ln->e);
	ln->own.ph = NULL;
	ln->own.oom = NULL;
	if (stats_new(&ln->own, c->h != NULL))
		return OQ_ENOMEM;
	oq_exec_set_observer(ln->e, observe, &ln->own);
	return OQ_OK;
}

size_t oq_calib_lane_count(int threads, size_t per_lane)
{
	size_t nl = threads > 0 ? (size_t)threads : 1;
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	double budget = pages > 0 && psize > 0 ? (double)pages * (double)psize / 4 : 1e9;

	if (!oq_calib_lanes)
		return 0;
	if (oq_calib_lanes > 0 && (size_t)oq_calib_lanes < nl)
		nl = (size_t)oq_calib_lanes;
	if (nl < 2 || (double)(nl - 1) * (double)per_lane > budget)
		return 0;
	return nl;
}

/* How many lanes the samples after the first get: 0 for none (see above). */
static size_t lane_count(const job *j, const calib *c)
{
	size_t hist = 0;

	if (c->em || c->extra || j->batch > 1)
		return 0;
	for (size_t i = 0; c->h && i < c->n; i++)
		hist += c->track[i] * c->nf;
	/* a clone: the activations of the first run, its histograms, scratch */
	return oq_calib_lane_count(oq_pool_threads(c->pool),
	                           oq_exec_peak_bytes(j->e) +
	                               hist * (2 * OQ_HIST_SIDE + 2) * sizeof(uint32_t) +
	                               ((size_t)4 << 20));
}

/* Runs samples [*i, j->end) over lanes when lane_count allows, advancing *i past them. */
static int sweep_lanes(job *j, calib *c, const char *what, size_t *i, oq_diag *d)
{
	lanes L;
	size_t nl = lane_count(j, c), first = SIZE_MAX;
	oq_hist *ph = c->ph;
	int rc = OQ_OK;

	if (nl == 0 || j->end - *i < 2)
		return OQ_OK;
	if (nl > j->end - *i)
		nl = j->end - *i;
	memset(&L, 0, sizeof L);
	L.j = j;
	L.what = what;
	L.n = nl;
	if (!(L.v = oq_calloc(nl, sizeof *L.v)))
		return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
	for (size_t k = 0; k < nl && !rc; k++)
		if ((rc = lane_init(j, c, &L.v[k], k)))
			rc = L.v[k].d.count ? oq_err(d, rc, "%s", L.v[k].d.msg)
			                    : oq_err(d, rc, "calibrate: out of memory for %zu sample lanes", nl);
	if (!rc) {
		/* with at least two folds per lane, a lane runs whole folds: its own statistics then
		 * hold bins only for the folds it ran (histograms are allocated at their first value) */
		L.by_fold = c->nf >= 2 * nl;
		L.start = *i;
		atomic_init(&L.next_fold, 0);
		atomic_init(&L.next, *i);
		atomic_init(&L.stop, SIZE_MAX);
		atomic_init(&L.done, *i - j->begin);
		c->ph = NULL; /* lane 0 scans on its own thread */
		oq_pool_run(c->pool, nl, 1, lane_run, &L);
		c->ph = ph;
		*i = j->end;
		j->lanes = nl;
		for (size_t k = 0; k < nl; k++)
			if (L.v[k].rc && (first == SIZE_MAX || L.v[k].err_at < L.v[first].err_at))
				first = k;
		if (first != SIZE_MAX)
			rc = L.v[first].d.count ? oq_err(d, L.v[first].rc, "%s", L.v[first].d.msg)
			                        : L.v[first].rc;
		for (size_t k = 1; k < nl && !rc; k++) {
			if ((rc = lane_merge(c, &L.v[k].own)))
				rc = oq_err(d, rc, "calibrate: %s merging the sample lanes' statistics",
				            rc == OQ_ENOMEM ? "out of memory" : "count overflow");
			stats_free(&L.v[k].own); /* merged: its bins go before the next lane's merge */
		}
		if (!rc)
			progress(j, what, j->end - j->begin);
	}
	for (size_t k = 0; k < nl; k++)
		lane_free(&L.v[k], j->nin, j->nout, k > 0);
	free(L.v);
	return rc;
}

/* Runs samples [begin, end) once with c observing (each into its fold). */
static int sweep_samples(job *j, calib *c, const char *what, oq_diag *d)
{
	size_t np = 0;
	int rc;

	j->t0 = now();
	if (j->batch <= 1) {
		size_t i = j->begin;
		/* the first sample on the executor's own threads: it sets the plan's lazy state
		 * and measures the activation memory a lane needs */
		if (i < j->end) {
			c->fold = fold_of(j, c, i);
			if ((rc = load(j, &j->s, j->e, i, j->in, d)) ||
			    (rc = run_one(j, j->e, c, i, j->in, j->outs, d)))
				return rc;
			progress(j, what, ++i - j->begin);
		}
		if ((rc = sweep_lanes(j, c, what, &i, d)))
			return rc;
		for (; i < j->end; i++) {
			c->fold = fold_of(j, c, i);
			if ((rc = load(j, &j->s, j->e, i, j->in, d)) ||
			    (rc = run_one(j, j->e, c, i, j->in, j->outs, d)))
				return rc;
			progress(j, what, i + 1 - j->begin);
		}
		return OQ_OK;
	}
	/* batches: consecutive samples of one shape and one fold (c->fold), at most j->batch */
	for (size_t i = j->begin; i < j->end; i++) {
		oq_rt *cur = &j->pend[np * j->nin];
		if ((rc = load(j, &j->s, j->e, i, cur, d)))
			return rc;
		if (np && (!same_shape(j->pend, cur, j->nin) || fold_of(j, c, i) != c->fold)) {
			/* run what is pending, then start a new batch with this sample */
			oq_rt *first = j->pend;
			if ((rc = concat(j, np, d)) || (rc = run_one(j, j->e, c, SIZE_MAX, j->in, j->outs, d)))
				return rc;
			for (size_t k = 0; k < j->nin; k++) {
				first[k] = cur[k];
				memset(&cur[k], 0, sizeof cur[k]);
			}
			np = 0;
		}
		if (!np)
			c->fold = fold_of(j, c, i);
		np++;
		if (np == j->batch || i + 1 == j->end) {
			if ((rc = concat(j, np, d)) || (rc = run_one(j, j->e, c, SIZE_MAX, j->in, j->outs, d)))
				return rc;
			np = 0;
		}
		progress(j, what, i + 1 - j->begin);
	}
	return OQ_OK;
}

/* Runs samples [begin, end) once with c observing, then c's totals from its folds. */
static int sweep(job *j, calib *c, const char *what, oq_diag *d)
{
	int rc;

	if ((rc = sweep_samples(j, c, what, d)))
		return rc;
	if ((rc = fold_totals(c)))
		return oq_err(d, rc, "calibrate: %s adding the folds' statistics",
		              rc == OQ_ENOMEM ? "out of memory" : "count overflow");
	return OQ_OK;
}

/* OQ_EUSAGE for settings the method cannot use. */
static int check_opts(const oq_calib_opts *o, oq_diag *d)
{
	int act = o->act_type ? o->act_type : OQ_DT_UINT8, bits = oq_dtype_bits(act);

	if (o->method < OQ_CALIB_MINMAX || o->method > OQ_CALIB_AUTO)
		return oq_err(d, OQ_EUSAGE, "calibrate: unknown method %d", o->method);
	if (o->folds == 1 || o->folds > OQ_FOLDS_MAX)
		return oq_err(d, OQ_EUSAGE, "calibrate: --calib-folds must be in 2..%d (default %d)",
		              OQ_FOLDS_MAX, OQ_FOLDS_DEFAULT);
	if (o->ema_constant < 0 || o->ema_constant > 1 || o->ema_constant != o->ema_constant)
		return oq_err(d, OQ_EUSAGE, "calibrate: --ema-constant must be in (0, 1] (default %g)",
		              OQ_EMA_CONSTANT);
	if (o->percentile < 0 || o->percentile > 100 || o->percentile != o->percentile)
		return oq_err(d, OQ_EUSAGE, "calibrate: --percentile must be in (0, 100] (default %g)",
		              OQ_PERCENTILE);
	if (bits < 2 || bits > 16)
		return oq_err(d, OQ_EUSAGE, "calibrate: activation type %s has no integer grid",
		              oq_dtype_name(act));
	if (o->method == OQ_CALIB_ENTROPY && 1 << (bits - 1) > OQ_ENTROPY_MAX_TARGET)
		return oq_err(d, OQ_EUSAGE,
		              "calibrate: --method entropy compares histograms of more than %d bins with "
		              "2^(b-1) target bins; %s needs %d, too many for a meaningful search: use "
		              "--method mse or percentile for %d-bit activations",
		              OQ_HIST_SIDE / 2, oq_dtype_name(act), 1 << (bits - 1), bits);
	return OQ_OK;
}

/* Does the method read histograms? */
static int is_hist(int method)
{
	return method == OQ_CALIB_PERCENTILE || method == OQ_CALIB_ENTROPY || method == OQ_CALIB_MSE ||
	       method == OQ_CALIB_AUTO;
}

static void release(job *j, calib *c)
{
	stats_free(c);
	if (c->ph)
		for (int t = 0; t < oq_pool_threads(c->pool); t++)
			oq_hist_free(&c->ph[t]);
	free(c->ph);
	free(c->track);
	free(c->em);
	slots_free(c);
	if (j->pend)
		for (size_t i = 0; i < j->batch * j->nin; i++)
			oq_rt_release(&j->pend[i]);
	free(j->pend);
	free(j->outs);
	free(j->in);
	oq_samples_free(&j->s);
	oq_exec_free(j->e);
}

/* The observer state for m with nf folds (st reset to "nothing seen"). */
static int calib_init(oq_model *m, const oq_calib_opts *o, size_t nf, calib *c, oq_diag *d)
{
	c->g = m->graph;
	c->nf = nf;
	c->method = o->method;
	c->extra = o->extra;
	c->extra_ctx = o->extra_ctx;
	c->tap = o->tap;
	c->ema_c = o->ema_constant > 0 ? o->ema_constant : OQ_EMA_CONSTANT;
	if (slots_init(c, m->graph))
		return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
	if (o->method == OQ_CALIB_EMA)
		c->em = oq_calloc(c->n ? c->n : 1, sizeof *c->em);
	if (is_hist(o->method))
		c->track = oq_calloc(c->n ? c->n : 1, 1);
	if (stats_new(c, is_hist(o->method)) || (o->method == OQ_CALIB_EMA && !c->em) ||
	    (is_hist(o->method) && !c->track))
		return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
	/* hist_need covers the main graph; body values keep their histograms */
	for (size_t i = 0; c->track && i < c->n; i++)
		c->track[i] = o->hist_need && i < m->graph->n_values ? o->hist_need[i] != 0 : 1;
	return OQ_OK;
}

/* --calib-batch needs every input's axis 0 symbolic (and whole-byte elements to concatenate). */
static int check_batch(const oq_exec *e, oq_diag *d)
{
	for (size_t k = 0; k < oq_exec_n_inputs(e); k++) {
		const oq_value *v = oq_exec_input(e, k);
		const oq_type *t = &v->type;
		if (t->rank == 0 || (t->rank > 0 && t->dims[0].value >= 0))
			return oq_err(d, OQ_EUSAGE,
			              "calibrate: --calib-batch: input '%s' has %s; batching needs a "
			              "symbolic batch dimension (axis 0): drop --calib-batch",
			              v->name,
			              t->rank == 0 ? "no axis 0 (a scalar)" : "a fixed batch dimension");
		if (t->dtype && (oq_dtype_bits(t->dtype) % 8 || t->dtype == OQ_DT_STRING))
			return oq_err(d, OQ_EUNSUP,
			              "calibrate: --calib-batch: input '%s' (%s) cannot be concatenated; "
			              "drop --calib-batch",
			              v->name, oq_dtype_name(t->dtype));
	}
	return OQ_OK;
}

/* --method auto with fewer folds than asked for (too few samples): says so on f. */
static void folds_note(FILE *f, const oq_calib_opts *o, size_t total, size_t nf)
{
	size_t want = o->folds ? o->folds : OQ_FOLDS_DEFAULT;

	if (nf >= want)
		return;
	if (nf < 2)
		fprintf(f, "calibrate: auto: %zu sample: no held-out fold, ranges as --method mse\n",
		        total);
	else
		fprintf(f, "calibrate: auto: %zu samples: %zu folds of at least 2 samples instead of "
		           "%zu (--calib-folds)\n",
		        total, nf, want);
}

/* Does a run with o keep statistics per fold? */
static int keeps_folds(const oq_calib_opts *o)
{
	return o->method == OQ_CALIB_AUTO || (o->folds_out && o->method != OQ_CALIB_EMA);
}

/*
 * Checks the options and the samples, builds the executor and the observer
 * state; j->begin/end select shard o->shard of o->n_shards.
 */
static int prepare(oq_model *m, const oq_calib_opts *o, job *j, calib *c, oq_diag *d)
{
	oq_exec_opts eo = {.threads = 0, .max_loop_iterations = o->max_loop_iterations,
			   .max_live_bytes = o->max_live_bytes};
	uint64_t n_random = 0, b, e;
	uint32_t ns = o->n_shards ? o->n_shards : 1;
	int rc;

	memset(j, 0, sizeof *j);
	memset(c, 0, sizeof *c);
	j->last = -1;
	if (!m || !m->graph)
		return oq_err(d, OQ_EINVAL, "calibrate: the model has no graph");
	if (!o->source || !*o->source)
		return oq_err(
		    d, OQ_EUSAGE,
		    "calibrate: no calibration data; give --calib DIR or --calib random:N");
	if ((rc = check_opts(o, d)))
		return rc;
	if (ns > OQ_STATS_MAX_SHARDS || o->shard >= ns)
		return oq_err(d, OQ_EUSAGE,
		              "calibrate: --shard %u/%u: I must be in 0..N-1 and N at most %d",
		              o->shard, ns, OQ_STATS_MAX_SHARDS);
	j->is_random = !strncmp(o->source, "random:", 7);
	if (j->is_random && (rc = parse_random(o->source, &n_random, &j->seed, d)))
		return rc;
	if (!j->is_random && (rc = check_not_empty(o->source, d)))
		return rc;

	eo.threads = o->threads;
	if ((rc = oq_exec_new(m, &eo, &j->e, d)))
		return rc;
	j->nin = oq_exec_n_inputs(j->e);
	j->nout = oq_exec_n_outputs(j->e);
	if (j->is_random) {
		if ((rc = random_sample(j->e, &j->s, d)) || (rc = oq_samples_check(&j->s, j->e, d)))
			return rc;
		j->total = n_random > SIZE_MAX ? SIZE_MAX : (size_t)n_random;
	} else {
		if ((rc = oq_samples_scan(o->source, j->e, &j->s, d)))
			return rc;
		j->total = j->s.n;
	}
	if (o->limit && o->limit < j->total)
		j->total = o->limit;
	oq_stats_shard_range(j->total, o->shard, ns, &b, &e);
	j->begin = (size_t)b;
	j->end = (size_t)e;
	if (!j->is_random) {
		/* check only the samples that will run */
		oq_sample *all = j->s.v;
		size_t n_all = j->s.n;
		j->s.v += j->begin;
		j->s.n = j->end - j->begin;
		rc = j->s.n ? oq_samples_check(&j->s, j->e, d) : OQ_OK;
		j->s.v = all;
		j->s.n = n_all;
		if (rc)
			return rc;
	}
	if (j->is_random && o->progress)
		fprintf(o->progress, "calibrate: warning: random calibration data is not "
		                     "representative; ranges will not match real inputs\n");
	if ((rc = calib_init(m, o, keeps_folds(o) ? oq_folds_count(o->folds, j->total) : 1, c, d)))
		return rc;
	if (o->method == OQ_CALIB_AUTO && o->progress)
		folds_note(o->progress, o, j->total, c->nf);
	c->pool = oq_exec_pool(j->e);
	if (oq_pool_threads(c->pool) > 1) {
		if (!(c->ph = oq_calloc((size_t)oq_pool_threads(c->pool), sizeof *c->ph)))
			return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
		for (int t = 0; t < oq_pool_threads(c->pool); t++)
			oq_hist_init(&c->ph[t]);
	}
	j->in = oq_calloc(j->nin, sizeof *j->in);
	j->outs = oq_calloc(j->nout, sizeof *j->outs);
	if (!j->in || !j->outs)
		return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
	j->batch = o->batch > 1 ? o->batch : 1;
	if (j->batch > 1) {
		size_t n;
		if ((rc = check_batch(j->e, d)))
			return rc;
		if (!oq_mul_size(j->batch, j->nin, &n) || !(j->pend = oq_calloc(n, sizeof *j->pend)))
			return oq_err(d, OQ_ENOMEM, "calibrate: out of memory for --calib-batch %zu",
			              j->batch);
	}
	oq_exec_set_observer(j->e, observe, c);
	/* Values nobody quantizes need no range; declining them lets the executor keep its
	 * fused Conv groups. The bias-correction observer (extra) wants every value. */
	c->skip = o->skip_qmark;
	c->need = o->need_only ? o->hist_need : NULL;
	if ((c->skip || c->need) && !c->extra)
		oq_exec_set_observe_want(j->e, want);
	if (o->progress && isatty(fileno(o->progress)))
		j->tty = o->progress;
	return OQ_OK;
}

/* Ends the summary line: how many samples ran at a time when more than one. */
static void lanes_note(FILE *f, const job *j)
{
	if (j->lanes > 1)
		fprintf(f, " (%zu samples at a time)", j->lanes);
	fputc('\n', f);
}

static void warn_nan(FILE *f, const oq_ranges *r)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->v[i].n_nan)
			fprintf(f, "calibrate: warning: tensor '%s': %llu NaN/Inf values skipped\n",
			        r->v[i].name, (unsigned long long)r->v[i].n_nan);
}

/* ------------------------------------------------------------ statistics files */

/* OQ_EUSAGE for ema, which cannot be split or merged. */
static int refuse_ema(const oq_calib_opts *o, const char *where, oq_diag *d)
{
	if (o->method != OQ_CALIB_EMA)
		return OQ_OK;
	return oq_err(d, OQ_EUSAGE,
	              "%s: --method ema averages per-sample ranges in sample order, so its "
	              "statistics cannot be split or merged; run onnxq quantize --calib DIR "
	              "--method ema on one machine, or use minmax, percentile, entropy or mse",
	              where);
}

/* Checks that s (named `what`) belongs to m and is complete. */
static int check_file(const oq_model *m, const oq_stats *s, const char *what, const char *where,
                      oq_diag *d)
{
	if (s->model_fp != oq_stats_fingerprint(m))
		return oq_err(d, OQ_EINVAL,
		              "%s: %s was computed for another model or other rewrite options "
		              "(--passes, --no-PASS, --opset); run calibrate with this model and the "
		              "same options",
		              where, what);
	return oq_stats_check_complete(s, what, d);
}

/* c->st (and c->h when c has histograms) from the records of s. */
static int load_file(calib *c, const oq_stats *s, const char *what, oq_diag *d)
{
	if (c->track) /* the file says which histograms were kept */
		memset(c->track, 0, c->n);

	for (size_t k = 0; k < s->n; k++) {
		const oq_stat *r = &s->v[k];
		size_t i = slot_named(c, r->name);
		tstat *t;
		if (i == SIZE_MAX)
			return oq_err(d, OQ_EINVAL,
			              "calibrate: %s has tensor '%s', which the model lacks; give the "
			              "statistics of this model",
			              what, r->name);
		t = &c->st[i];
		t->seen = r->seen;
		t->lo = r->lo;
		t->hi = r->hi;
		t->n_bad = r->n_bad;
		if (c->h) {
			c->track[i] = (uint8_t)r->hist;
			if (oq_hist_copy(&c->h[i], &r->h))
				return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
		}
		for (size_t f = 0; c->nf > 1 && f < c->nf; f++) {
			size_t q = f * c->n + i;
			c->fst[q].seen = r->seen;
			c->fst[q].lo = r->fold[f].lo;
			c->fst[q].hi = r->fold[f].hi;
			c->fst[q].n_bad = r->fold[f].n_bad;
			if (r->hist && oq_hist_copy(&c->fh[q], &r->fold[f].h))
				return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
		}
	}
	return OQ_OK;
}

/* h's bins into *to (an empty histogram): moved out of h (left empty) with `move`, else copied. */
static int hist_take(oq_hist *to, oq_hist *h, int move)
{
	if (!move)
		return oq_hist_copy(to, h);
	*to = *h;
	oq_hist_init(h);
	return OQ_OK;
}

/* out's records from c (every value seen, with its histogram when c has them, and its folds);
 * with `move` the histograms are moved out of c, which has no more use for them. */
static int save_file(calib *c, int move, oq_stats *out, oq_diag *d)
{
	size_t n = 0, k = 0;

	out->n_folds = c->nf > 1 ? (uint32_t)c->nf : 0;
	for (size_t i = 0; i < c->n; i++)
		n += (size_t)c->st[i].seen;
	if (!(out->v = oq_calloc(n, sizeof *out->v)))
		return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
	for (size_t i = 0; i < n; i++)
		oq_hist_init(&out->v[i].h);
	for (size_t i = 0; i < c->n; i++) {
		const tstat *t = &c->st[i];
		oq_stat *r;
		if (!t->seen)
			continue;
		r = &out->v[k];
		out->n = ++k;
		r->seen = 1;
		r->lo = t->lo;
		r->hi = t->hi;
		r->n_bad = t->n_bad;
		r->hist = c->h && c->track[i];
		if (!(r->name = oq_strdup(c->vals[i]->name)) || (r->hist && hist_take(&r->h, &c->h[i], move)) ||
		    (out->n_folds && !(r->fold = oq_calloc(out->n_folds, sizeof *r->fold))))
			return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
		for (size_t f = 0; f < out->n_folds; f++) {
			const tstat *x = &c->fst[f * c->n + i];
			r->fold[f].lo = x->lo;
			r->fold[f].hi = x->hi;
			r->fold[f].n_bad = x->n_bad;
			oq_hist_init(&r->fold[f].h);
			if (r->hist && hist_take(&r->fold[f].h, &c->fh[f * c->n + i], move))
				return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
		}
	}
	for (size_t i = 1; i < out->n; i++) /* values are few: insertion sort by name */
		for (size_t x = i; x > 0 && strcmp(out->v[x - 1].name, out->v[x].name) > 0; x--) {
			oq_stat tmp = out->v[x];
			out->v[x] = out->v[x - 1];
			out->v[x - 1] = tmp;
		}
	return OQ_OK;
}

int oq_calibrate_stats(oq_model *m, const oq_calib_opts *o, oq_stats *out, oq_diag *d)
{
	job j;
	calib c;
	int rc;
	double t0 = now();

	memset(out, 0, sizeof *out);
	if ((rc = refuse_ema(o, "calibrate", d)))
		return rc;
	if ((rc = prepare(m, o, &j, &c, d)) || (rc = sweep(&j, &c, "", d)))
		goto fail;
	out->kind = is_hist(o->method) ? OQ_STATS_HIST : OQ_STATS_RANGES;
	out->model_fp = oq_stats_fingerprint(m);
	out->n_total = j.total;
	out->n_samples = j.end - j.begin;
	out->n_shards = o->n_shards ? o->n_shards : 1;
	if (!(out->covered = oq_calloc(out->n_shards, 1))) {
		rc = oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
		goto fail;
	}
	out->covered[o->shard] = 1;
	if ((rc = save_file(&c, 0, out, d)))
		goto fail;
	if (o->progress) {
		if (j.tty)
			fputs("\r\033[K", o->progress);
		fprintf(o->progress,
		        "calibrate: shard %u/%u: samples [%zu, %zu) of %zu, %zu tensors, %s, %.1f s",
		        o->shard, out->n_shards, j.begin, j.end, j.total, out->n,
		        out->kind == OQ_STATS_HIST ? "ranges + histograms" : "ranges", now() - t0);
		lanes_note(o->progress, &j);
	}
	rc = OQ_OK;
fail:
	if (rc && j.last >= 0)
		fputc('\n', o->progress);
	if (rc)
		oq_stats_free(out);
	release(&j, &c);
	return rc;
}

/* quantize --stats: the ranges from a merged statistics file. */
static int calibrate_from_stats(oq_model *m, const oq_calib_opts *o, oq_ranges *out, oq_diag *d)
{
	const oq_stats *s = o->stats;
	const char *what = o->stats_name ? o->stats_name : "the statistics file";
	calib c;
	size_t nf = 1;
	int rc;

	memset(&c, 0, sizeof c);
	out->v = NULL;
	out->n = 0;
	if (!m || !m->graph)
		return oq_err(d, OQ_EINVAL, "calibrate: the model has no graph");
	if ((rc = check_opts(o, d)) || (rc = refuse_ema(o, "quantize --stats", d)) ||
	    (rc = check_file(m, s, what, "quantize --stats", d)))
		return rc;
	if (is_hist(o->method) && s->kind != OQ_STATS_HIST)
		return oq_err(d, OQ_EINVAL,
		              "quantize --stats: %s holds ranges only (calibrate --method minmax); "
		              "--method %s needs histograms: run calibrate with --method %s on every "
		              "shard, then merge-stats",
		              what, oq_calib_method_name(o->method), oq_calib_method_name(o->method));
	if (o->method == OQ_CALIB_AUTO) {
		nf = oq_folds_count(o->folds, s->n_total > SIZE_MAX ? SIZE_MAX : (size_t)s->n_total);
		if (nf != (s->n_folds ? s->n_folds : 1))
			return oq_err(d, OQ_EINVAL,
			              "quantize --stats: %s holds %u folds per tensor; --method auto with "
			              "--calib-folds %zu on %llu samples needs %zu: run calibrate with "
			              "--method auto and the same --calib-folds on every shard",
			              what, s->n_folds, o->folds ? o->folds : OQ_FOLDS_DEFAULT,
			              (unsigned long long)s->n_total, nf);
		if (o->progress)
			folds_note(o->progress, o, (size_t)s->n_total, nf);
	}
	if ((rc = calib_init(m, o, nf, &c, d)) || (rc = load_file(&c, s, what, d)))
		goto fail;
	if ((rc = oq_calib_collect(&c, o, out, d)))
		goto fail;
	if (o->progress) {
		warn_nan(o->progress, out);
		fprintf(o->progress, "calibrate: %llu samples from %s, %zu tensors, %s\n",
		        (unsigned long long)s->n_total, what, out->n, oq_calib_method_name(o->method));
	}
fail:
	stats_free(&c);
	free(c.track);
	free(c.em);
	slots_free(&c);
	return rc;
}

/* ------------------------------------------------------------ one machine */

int oq_calibrate_minmax(oq_model *m, const oq_calib_opts *o, oq_ranges *out, oq_diag *d)
{
	oq_calib_opts mo;

	memset(&mo, 0, sizeof mo);
	mo.source = o->source;
	mo.limit = o->limit;
	mo.threads = o->threads;
	mo.progress = o->progress;
	return oq_calibrate(m, &mo, out, d);
}

/* oq_calib_opts.folds_out of a one-machine run: c's statistics as a folds file holds them. */
static int folds_out(const oq_model *m, const job *j, calib *c, oq_stats *out, oq_diag *d)
{
	int rc;

	memset(out, 0, sizeof *out);
	out->kind = c->h ? OQ_STATS_HIST : OQ_STATS_RANGES;
	out->model_fp = oq_stats_fingerprint(m);
	out->n_total = out->n_samples = j->total;
	out->n_shards = 1;
	if (!(out->covered = oq_calloc(1, 1)))
		return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
	out->covered[0] = 1;
	if ((rc = save_file(c, 1, out, d))) /* the ranges are collected: c's histograms move */
		oq_stats_free(out);
	return rc;
}

/* Online CPUs (at least 1): the threads of o->threads <= 0. */
static int online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int)n : 1;
}

int oq_calibrate_held_out(oq_model *m, const oq_calib_opts *o, const oq_stats *s, size_t held,
			  oq_ranges *out, oq_diag *d)
{
	oq_calib_opts q = *o;
	calib c;
	size_t k = s->n_folds, n, nf;
	int rc;

	memset(&c, 0, sizeof c);
	out->v = NULL;
	out->n = 0;
	q.progress = NULL;
	q.verbose = 0;
	if (!m || !m->graph || k < 2 || held > k)
		return oq_err(d, OQ_EINVAL, "calibrate: no held-out fold %zu in statistics of %zu folds",
		              held, k);
	if ((rc = check_opts(&q, d)))
		return rc;
	nf = held == k ? k : k - 1; /* held k: every fold */
	nf = (q.method == OQ_CALIB_AUTO || q.wide_auto) && nf >= 2 ? nf : 1;
	if ((rc = calib_init(m, &q, nf, &c, d)))
		goto fail;
	n = c.n;
	if (c.track)
		memset(c.track, 0, n);
	for (size_t r = 0; r < s->n; r++) {
		const oq_stat *x = &s->v[r];
		size_t i = slot_named(&c, x->name), g = 0;
		if (i == SIZE_MAX || !x->fold)
			continue;
		if (c.track)
			c.track[i] = (uint8_t)(x->hist && s->kind == OQ_STATS_HIST);
		for (size_t f = 0; f < k; f++) {
			tstat t = {x->fold[f].lo, x->fold[f].hi, x->fold[f].n_bad, x->seen};
			if (f == held)
				continue;
			tstat_add(&c.st[i], &t);
			if (c.h && c.track[i] && (rc = oq_hist_merge(&c.h[i], &x->fold[f].h))) {
				rc = oq_err(d, rc, "calibrate: tensor '%s': merging its folds failed", x->name);
				goto fail;
			}
			if (nf > 1) {
				c.fst[g * n + i] = t;
				if (c.h && c.track[i] && oq_hist_copy(&c.fh[g * n + i], &x->fold[f].h)) {
					rc = oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
					goto fail;
				}
			}
			g++;
		}
	}
	/* the selections run over a pool of o->threads (each tensor's alone: the same ranges) */
	if (c.h && (rc = oq_pool_new(o->threads > 0 ? o->threads : online_cpus(), &c.pool)))
		rc = oq_err(d, rc, "calibrate: cannot start %d threads", o->threads);
	else
		rc = oq_calib_collect(&c, &q, out, d);
	oq_pool_free(c.pool);
	c.pool = NULL;
fail:
	stats_free(&c);
	free(c.track);
	free(c.em);
	slots_free(&c);
	return rc;
}

int oq_calibrate(oq_model *m, const oq_calib_opts *o, oq_ranges *out, oq_diag *d)
{
	oq_calib_opts all = *o;
	job j;
	calib c;
	int rc;
	double t0 = now();

	out->v = NULL;
	out->n = 0;
	if (o->stats)
		return calibrate_from_stats(m, o, out, d);
	all.shard = 0;
	all.n_shards = 1;
	if ((rc = prepare(m, &all, &j, &c, d)) || (rc = sweep(&j, &c, "", d)) ||
	    (rc = oq_calib_collect(&c, o, out, d)) || (o->folds_out && (rc = folds_out(m, &j, &c, o->folds_out, d))))
		goto fail;
	if (o->progress) {
		if (j.tty)
			fputs("\r\033[K", o->progress);
		warn_nan(o->progress, out);
		fprintf(o->progress, "calibrate: %zu samples, %zu tensors observed, %s, %.1f s", j.total,
		        out->n, oq_calib_method_name(o->method), now() - t0);
		lanes_note(o->progress, &j);
	}
	rc = OQ_OK;
fail:
	if (rc && j.last >= 0)
		fputc('\n', o->progress); /* keep the error off the progress line */
	release(&j, &c);
	return rc;
}
