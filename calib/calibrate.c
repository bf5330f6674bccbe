/*
 * calibrate.c - min/max calibration (see calibrate.h for the contract).
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
 * Hot loop: float32 data is scanned in blocks of LANES independent lanes
 * (lo[j], hi[j], bad[j]); each lane does compare-and-select only, so the
 * compiler can vectorise it (minps/maxps) without -ffast-math. A value is
 * finite iff x - x == 0 (false for NaN and +-Inf). float16/bfloat16 are
 * widened into a small float buffer and go through the same loop; double
 * has its own loop (and is rounded outwards to float at the end).
 *
 * Other methods (observe.h): ema keeps a moving average of each sample's
 * min/max next to the exact range (one pass). percentile, entropy and mse
 * run the samples a second time: the observer then adds every value to a
 * histogram over the exact range of pass 1 ([0, max |x|] for |x|
 * histograms), and the method picks the range from it at the end. Bin
 * counts are integers and a value's bin depends on the value only, so
 * these ranges are order- and thread-independent too.
 *
 * Random calibration ("random:N[:SEED]") reuses calib/run.c's generator
 * through OQ_SRC_RANDOM sources: sample i feeds input K the splitmix64
 * stream seeded with mix(SEED, i) + K * 0x9E3779B97F4A7C15, where mix is one
 * splitmix64 finaliser round, so samples differ and depend only on SEED and
 * i. One sample record is reused, so N costs no memory.
 */
#include "calibrate.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qparams.h"
#include "run.h"

#define LANES 16
#define WIDEN_BLOCK 1024 /* f16/bf16 elements widened at a time */

/* Running state of one main-graph value. */
typedef struct tstat {
	double lo, hi;  /* finite extremes so far; lo > hi until a finite element is seen */
	uint64_t n_bad; /* NaN/Inf elements skipped */
	int seen;       /* observed at least once with a float dtype */
} tstat;

/* Moving-average range of one value (--method ema). */
typedef struct ema {
	double lo, hi; /* current average */
	int init;      /* a sample with finite values has been seen */
} ema;

/* Observer context. */
typedef struct calib {
	const oq_graph *g; /* main graph: only its values are observed */
	tstat *st;         /* g->n_values entries, by oq_value.index */
	int method;        /* OQ_CALIB_* */
	int phase;         /* 0: min/max (and EMA); 1: histograms */
	double ema_c;      /* EMA constant */
	ema *em;           /* g->n_values entries (ema only) */
	oq_hist *h;        /* g->n_values entries (histogram methods); bin NULL: not histogrammed */
} calib;

/* ------------------------------------------------------------ the hot loop */

/* Folds n float32 values into *lo, *hi, *bad (NaN/Inf skipped, -0 read as +0). */
static void scan_f32(const float *p, size_t n, float *lo_out, float *hi_out, uint64_t *bad_out)
{
	float lo[LANES], hi[LANES];
	uint32_t bad[LANES];
	size_t i = 0;

	for (int j = 0; j < LANES; j++) {
		lo[j] = INFINITY;
		hi[j] = -INFINITY;
		bad[j] = 0;
	}
	while (i + LANES <= n) {
		/* lane counters are flushed every 2^24 blocks so they cannot overflow */
		size_t stop = n - i > ((size_t)LANES << 24) ? i + ((size_t)LANES << 24) : n;
		for (; i + LANES <= stop; i += LANES) {
			for (int j = 0; j < LANES; j++) {
				float x = p[i + (size_t)j] + 0.0f;
				int fin = (x - x) == 0.0f;
				float a = fin ? x : lo[j];
				float b = fin ? x : hi[j];
				lo[j] = a < lo[j] ? a : lo[j];
				hi[j] = b > hi[j] ? b : hi[j];
				bad[j] += (uint32_t)!fin;
			}
		}
		for (int j = 0; j < LANES; j++) {
			*bad_out += bad[j];
			bad[j] = 0;
		}
	}
	for (; i < n; i++) {
		float x = p[i] + 0.0f;
		if ((x - x) != 0.0f) {
			(*bad_out)++;
			continue;
		}
		lo[0] = x < lo[0] ? x : lo[0];
		hi[0] = x > hi[0] ? x : hi[0];
	}
	for (int j = 0; j < LANES; j++) {
		*lo_out = lo[j] < *lo_out ? lo[j] : *lo_out;
		*hi_out = hi[j] > *hi_out ? hi[j] : *hi_out;
	}
}

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

/* Folds tensor t into s (and, for EMA, its per-sample range into em). */
static void fold(tstat *s, ema *em, double ema_c, const oq_rt *t)
{
	float lo = INFINITY, hi = -INFINITY;
	uint64_t bad = 0;

	s->seen = 1;
	if (!t->nelem || !t->data)
		return;
	if (t->dtype == OQ_DT_FLOAT) {
		scan_f32(t->data, t->nelem, &lo, &hi, &bad);
	} else if (t->dtype == OQ_DT_DOUBLE) {
		double dlo = INFINITY, dhi = -INFINITY;
		scan_f64(t->data, t->nelem, &dlo, &dhi, &bad);
		s->lo = dlo < s->lo ? dlo : s->lo;
		s->hi = dhi > s->hi ? dhi : s->hi;
		s->n_bad += bad;
		if (em && dlo <= dhi)
			oq_ema_update(&em->lo, &em->hi, &em->init, dlo, dhi, ema_c);
		return;
	} else {
		const uint16_t *h = t->data;
		float buf[WIDEN_BLOCK];
		for (size_t i = 0; i < t->nelem; i += WIDEN_BLOCK) {
			size_t m = t->nelem - i < WIDEN_BLOCK ? t->nelem - i : WIDEN_BLOCK;
			for (size_t j = 0; j < m; j++)
				buf[j] = t->dtype == OQ_DT_FLOAT16 ? oq_f16_to_f32(h[i + j])
				                                   : oq_bf16_to_f32(h[i + j]);
			scan_f32(buf, m, &lo, &hi, &bad);
		}
	}
	s->lo = (double)lo < s->lo ? (double)lo : s->lo;
	s->hi = (double)hi > s->hi ? (double)hi : s->hi;
	s->n_bad += bad;
	if (em && lo <= hi)
		oq_ema_update(&em->lo, &em->hi, &em->init, lo, hi, ema_c);
}

/* Adds tensor t to histogram h. */
static void hist_add(oq_hist *h, const oq_rt *t)
{
	if (!t->nelem || !t->data)
		return;
	if (t->dtype == OQ_DT_FLOAT) {
		oq_hist_add_f32(h, t->data, t->nelem);
	} else if (t->dtype == OQ_DT_DOUBLE) {
		oq_hist_add_f64(h, t->data, t->nelem);
	} else {
		const uint16_t *p = t->data;
		float buf[WIDEN_BLOCK];
		for (size_t i = 0; i < t->nelem; i += WIDEN_BLOCK) {
			size_t m = t->nelem - i < WIDEN_BLOCK ? t->nelem - i : WIDEN_BLOCK;
			for (size_t j = 0; j < m; j++)
				buf[j] = t->dtype == OQ_DT_FLOAT16 ? oq_f16_to_f32(p[i + j])
				                                   : oq_bf16_to_f32(p[i + j]);
			oq_hist_add_f32(h, buf, m);
		}
	}
}

static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	calib *c = ctx;
	if (v->graph != c->g || v->index >= c->g->n_values || c->g->values[v->index] != v ||
	    !is_observed_dtype(t->dtype))
		return 0;
	if (c->phase == 0)
		fold(&c->st[v->index], c->em ? &c->em[v->index] : NULL, c->ema_c, t);
	else if (c->h[v->index].bin)
		hist_add(&c->h[v->index], t);
	return 0;
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

/* ------------------------------------------------------------ results */

static int cmp_range(const void *a, const void *b)
{
	return strcmp(((const oq_range *)a)->name, ((const oq_range *)b)->name);
}

/* Largest float <= x (x finite double); +-FLT_MAX beyond float's range. */
static float down_f(double x)
{
	float f;
	if (x <= -(double)FLT_MAX)
		return -FLT_MAX;
	if (x >= (double)FLT_MAX)
		return FLT_MAX;
	f = (float)x;
	return (double)f > x ? nextafterf(f, -INFINITY) : f;
}

static float up_f(double x)
{
	return -down_f(-x);
}

/* The method's range of value i into [*lo, *hi] (finite values were seen). */
static int pick(const calib *c, const oq_calib_opts *o, size_t i, double *lo, double *hi,
                oq_diag *d)
{
	const tstat *s = &c->st[i];
	const oq_hist *h = c->h ? &c->h[i] : NULL;
	int act = o->act_type ? o->act_type : OQ_DT_UINT8, rc = OQ_OK;

	*lo = s->lo;
	*hi = s->hi;
	if (c->method == OQ_CALIB_EMA && c->em[i].init) {
		*lo = c->em[i].lo;
		*hi = c->em[i].hi;
	} else if (h && h->bin) {
		if (c->method == OQ_CALIB_PERCENTILE)
			oq_select_percentile(h, s->lo, s->hi,
			                     o->percentile > 0 ? o->percentile : OQ_PERCENTILE, lo, hi);
		else if (c->method == OQ_CALIB_ENTROPY)
			rc = oq_select_entropy(h, s->lo, s->hi, 1 << (oq_dtype_bits(act) - 1), lo, hi);
		else
			rc = oq_select_mse(h, s->lo, s->hi, act, oq_act_form(o->act_sym, s->lo), lo, hi);
	}
	if (rc)
		return oq_err(d, rc, "calibrate: tensor '%s': %s range selection failed (%s)",
		              c->g->values[i]->name, oq_calib_method_name(c->method),
		              rc == OQ_ENOMEM ? "out of memory" : "bad histogram");
	return OQ_OK;
}

static int collect(const calib *c, const oq_calib_opts *o, oq_ranges *out, oq_diag *d)
{
	const oq_graph *g = c->g;
	size_t n = 0, k = 0;

	for (size_t i = 0; i < g->n_values; i++)
		n += (size_t)c->st[i].seen;
	if (!(out->v = oq_calloc(n, sizeof *out->v)))
		return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
	for (size_t i = 0; i < g->n_values; i++) {
		const tstat *s = &c->st[i];
		oq_range *r;
		if (!s->seen)
			continue;
		r = &out->v[k];
		if (!(r->name = oq_strdup(g->values[i]->name))) {
			out->n = k;
			oq_ranges_free(out);
			return oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
		}
		if (s->lo <= s->hi) {
			double lo, hi;
			int rc = pick(c, o, i, &lo, &hi, d);
			if (rc) {
				free(r->name);
				r->name = NULL;
				out->n = k;
				oq_ranges_free(out);
				return rc;
			}
			r->min = down_f(lo);
			r->max = up_f(hi);
		} else {
			r->min = INFINITY; /* nothing finite was seen: min > max */
			r->max = -INFINITY;
		}
		r->n_nan = s->n_bad;
		k++;
	}
	out->n = k;
	if (k > 1)
		qsort(out->v, k, sizeof *out->v, cmp_range);
	return OQ_OK;
}

/* ------------------------------------------------------------ driver */

/* What a pass over the samples needs. */
typedef struct job {
	oq_exec *e;
	oq_samples s;      /* the sample list (one reused record for random data) */
	oq_rt *in, *outs;  /* nin inputs, nout outputs of one run */
	size_t nin, nout;
	size_t total;      /* samples per pass */
	int is_random;     /* --calib random:N[:SEED] */
	uint64_t seed;     /* its SEED */
	FILE *tty;         /* progress bar stream, or NULL */
	double t0, last;   /* pass start; last bar update (-1: none yet) */
} job;

/* Runs every sample once with c observing (c->phase says what it records). */
static int sweep(job *j, calib *c, const char *what, oq_diag *d)
{
	int rc;

	j->t0 = now();
	for (size_t i = 0; i < j->total; i++) {
		size_t si = j->is_random ? 0 : i;
		if (j->is_random)
			for (size_t k = 0; k < j->nin; k++)
				j->s.v[0].in[k].seed = mix64(j->seed ^ mix64((uint64_t)i));
		if ((rc = oq_sample_load(&j->s, si, j->e, j->in, d)))
			return rc;
		for (size_t k = 0; k < j->nin; k++)
			observe(c, oq_exec_input(j->e, k), &j->in[k]);
		rc = oq_exec_run(j->e, j->in, j->nin, j->outs, j->nout, d);
		for (size_t k = 0; k < j->nin; k++)
			oq_rt_release(&j->in[k]);
		for (size_t k = 0; k < j->nout; k++)
			oq_rt_release(&j->outs[k]);
		if (rc)
			return rc;
		if (j->tty) {
			double t = now();
			if (i + 1 == j->total || j->last < 0 || t - j->last >= 0.1) {
				bar(j->tty, what, i + 1, j->total, t - j->t0);
				j->last = t;
			}
		}
	}
	return OQ_OK;
}

/* Histograms over pass 1's exact ranges ([0, max |x|] when abs). */
/* Histograms over the pass-1 ranges: of |x| for entropy and for grids mirrored around 0 (the
 * form depends on the tensor's minimum with --act-symmetric=unsigned), else signed. */
static int hist_setup(calib *c, const oq_calib_opts *o, oq_diag *d)
{
	const oq_graph *g = c->g;
	int act = o->act_type ? o->act_type : OQ_DT_UINT8;

	for (size_t i = 0; i < g->n_values; i++) {
		const tstat *s = &c->st[i];
		double lo = s->lo, hi = s->hi;
		int rc, abs;
		if (!s->seen || !(lo <= hi))
			continue;
		abs = o->method == OQ_CALIB_ENTROPY || oq_qform_mirrored(act, oq_act_form(o->act_sym, lo));
		if (abs) {
			hi = -lo > hi ? -lo : hi;
			lo = 0;
		}
		if (!(lo < hi))
			continue; /* constant tensor: its range is exact already */
		if ((rc = oq_hist_init(&c->h[i], lo, hi, OQ_HIST_BINS, abs)))
			return oq_err(d, rc, "calibrate: out of memory for the histogram of '%s' "
			                     "(%d bins per tensor)",
			              g->values[i]->name, OQ_HIST_BINS);
	}
	return OQ_OK;
}

/* OQ_EUSAGE for settings the method cannot use. */
static int check_opts(const oq_calib_opts *o, oq_diag *d)
{
	int act = o->act_type ? o->act_type : OQ_DT_UINT8, bits = oq_dtype_bits(act);

	if (o->method < OQ_CALIB_MINMAX || o->method > OQ_CALIB_MSE)
		return oq_err(d, OQ_EUSAGE, "calibrate: unknown method %d", o->method);
	if (o->ema_constant < 0 || o->ema_constant > 1 || o->ema_constant != o->ema_constant)
		return oq_err(d, OQ_EUSAGE, "calibrate: --ema-constant must be in (0, 1] (default %g)",
		              OQ_EMA_CONSTANT);
	if (o->percentile < 0 || o->percentile > 100 || o->percentile != o->percentile)
		return oq_err(d, OQ_EUSAGE, "calibrate: --percentile must be in (0, 100] (default %g)",
		              OQ_PERCENTILE);
	if (bits < 2 || bits > 16)
		return oq_err(d, OQ_EUSAGE, "calibrate: activation type %s has no integer grid",
		              oq_dtype_name(act));
	if (o->method == OQ_CALIB_ENTROPY && (1 << (bits - 1)) * 8 > OQ_HIST_BINS)
		return oq_err(d, OQ_EUSAGE,
		              "calibrate: --method entropy compares %d-bin histograms with 2^(b-1) "
		              "target bins; %s needs %d, too many for a meaningful search: use "
		              "--method mse or percentile for %d-bit activations",
		              OQ_HIST_BINS, oq_dtype_name(act), 1 << (bits - 1), bits);
	return OQ_OK;
}

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

int oq_calibrate(oq_model *m, const oq_calib_opts *o, oq_ranges *out, oq_diag *d)
{
	oq_exec_opts eo;
	job j;
	calib c;
	uint64_t n_random = 0;
	int two = o->method == OQ_CALIB_PERCENTILE || o->method == OQ_CALIB_ENTROPY ||
	          o->method == OQ_CALIB_MSE;
	int rc;
	double t0 = now();

	memset(&j, 0, sizeof j);
	memset(&c, 0, sizeof c);
	j.last = -1;
	out->v = NULL;
	out->n = 0;
	if (!m || !m->graph)
		return oq_err(d, OQ_EINVAL, "calibrate: the model has no graph");
	if (!o->source || !*o->source)
		return oq_err(
		    d, OQ_EUSAGE,
		    "calibrate: no calibration data; give --calib DIR or --calib random:N");
	if ((rc = check_opts(o, d)))
		return rc;
	j.is_random = !strncmp(o->source, "random:", 7);
	if (j.is_random && (rc = parse_random(o->source, &n_random, &j.seed, d)))
		return rc;
	if (!j.is_random && (rc = check_not_empty(o->source, d)))
		return rc;

	eo.threads = o->threads;
	if ((rc = oq_exec_new(m, &eo, &j.e, d)))
		return rc;
	j.nin = oq_exec_n_inputs(j.e);
	j.nout = oq_exec_n_outputs(j.e);
	if (j.is_random) {
		if ((rc = random_sample(j.e, &j.s, d)) || (rc = oq_samples_check(&j.s, j.e, d)))
			goto fail;
		j.total = n_random > SIZE_MAX ? SIZE_MAX : (size_t)n_random;
	} else {
		if ((rc = oq_samples_scan(o->source, j.e, &j.s, d)))
			goto fail;
		j.total = j.s.n;
	}
	if (o->limit && o->limit < j.total)
		j.total = o->limit;
	if (!j.is_random) {
		/* check only the samples that will run */
		size_t all = j.s.n;
		j.s.n = j.total;
		rc = oq_samples_check(&j.s, j.e, d);
		j.s.n = all;
		if (rc)
			goto fail;
	}
	if (j.is_random && o->progress)
		fprintf(o->progress, "calibrate: warning: random calibration data is not "
		                     "representative; ranges will not match real inputs\n");

	c.g = m->graph;
	c.method = o->method;
	c.ema_c = o->ema_constant > 0 ? o->ema_constant : OQ_EMA_CONSTANT;
	c.st = oq_calloc(m->graph->n_values, sizeof *c.st);
	j.in = oq_calloc(j.nin, sizeof *j.in);
	j.outs = oq_calloc(j.nout, sizeof *j.outs);
	if (o->method == OQ_CALIB_EMA)
		c.em = oq_calloc(m->graph->n_values, sizeof *c.em);
	if (two)
		c.h = oq_calloc(m->graph->n_values, sizeof *c.h);
	if (!c.st || !j.in || !j.outs || (o->method == OQ_CALIB_EMA && !c.em) || (two && !c.h)) {
		rc = oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
		goto fail;
	}
	for (size_t i = 0; i < m->graph->n_values; i++) {
		c.st[i].lo = INFINITY;
		c.st[i].hi = -INFINITY;
	}
	oq_exec_set_observer(j.e, observe, &c);
	if (o->progress && isatty(fileno(o->progress)))
		j.tty = o->progress;

	if ((rc = sweep(&j, &c, two ? " (pass 1/2: min/max)" : "", d)))
		goto fail;
	if (two) {
		if ((rc = hist_setup(&c, o, d)))
			goto fail;
		c.phase = 1;
		if ((rc = sweep(&j, &c, " (pass 2/2: histograms)", d)))
			goto fail;
	}
	if ((rc = collect(&c, o, out, d)))
		goto fail;
	if (o->progress) {
		if (j.tty)
			fputs("\r\033[K", o->progress);
		for (size_t i = 0; i < out->n; i++)
			if (out->v[i].n_nan)
				fprintf(o->progress,
				        "calibrate: warning: tensor '%s': %llu NaN/Inf values "
				        "skipped\n",
				        out->v[i].name, (unsigned long long)out->v[i].n_nan);
		fprintf(o->progress, "calibrate: %zu samples, %zu tensors observed, %s%s, %.1f s\n",
		        j.total, out->n, oq_calib_method_name(o->method),
		        two ? " (2 passes)" : "", now() - t0);
	}
	rc = OQ_OK;
fail:
	if (rc && j.last >= 0)
		fputc('\n', o->progress); /* keep the error off the progress line */
	if (c.h)
		for (size_t i = 0; i < m->graph->n_values; i++)
			oq_hist_free(&c.h[i]);
	free(c.h);
	free(c.em);
	free(j.outs);
	free(j.in);
	free(c.st);
	oq_samples_free(&j.s);
	oq_exec_free(j.e);
	return rc;
}
