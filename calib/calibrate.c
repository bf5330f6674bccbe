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

#include "run.h"

#define LANES 16
#define WIDEN_BLOCK 1024 /* f16/bf16 elements widened at a time */

/* Running state of one main-graph value. */
typedef struct tstat {
	double lo, hi;  /* finite extremes so far; lo > hi until a finite element is seen */
	uint64_t n_bad; /* NaN/Inf elements skipped */
	int seen;       /* observed at least once with a float dtype */
} tstat;

/* Observer context. */
typedef struct calib {
	const oq_graph *g; /* main graph: only its values are observed */
	tstat *st;         /* g->n_values entries, by oq_value.index */
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

/* Folds tensor t into s. */
static void fold(tstat *s, const oq_rt *t)
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
}

static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	calib *c = ctx;
	if (v->graph != c->g || v->index >= c->g->n_values || c->g->values[v->index] != v ||
	    !is_observed_dtype(t->dtype))
		return 0;
	fold(&c->st[v->index], t);
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

static void bar(FILE *f, size_t done, size_t total, double elapsed)
{
	double rate = elapsed > 0 ? (double)done / elapsed : 0;
	fprintf(f, "\rcalibrate: %zu/%zu samples, %.1f samples/s", done, total, rate);
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

static int collect(const calib *c, oq_ranges *out, oq_diag *d)
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
			r->min = down_f(s->lo);
			r->max = up_f(s->hi);
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

int oq_calibrate_minmax(oq_model *m, const oq_calib_opts *o, oq_ranges *out, oq_diag *d)
{
	oq_exec_opts eo;
	oq_exec *e = NULL;
	oq_samples s;
	calib c;
	oq_rt *in = NULL, *outs = NULL;
	size_t nin = 0, nout = 0, total, observed = 0;
	uint64_t n_random = 0, seed = 0;
	int is_random, tty = 0, rc;
	double t0 = now(), last = -1;

	memset(&s, 0, sizeof s);
	memset(&c, 0, sizeof c);
	out->v = NULL;
	out->n = 0;
	if (!m || !m->graph)
		return oq_err(d, OQ_EINVAL, "calibrate: the model has no graph");
	if (!o->source || !*o->source)
		return oq_err(
		    d, OQ_EUSAGE,
		    "calibrate: no calibration data; give --calib DIR or --calib random:N");
	is_random = !strncmp(o->source, "random:", 7);
	if (is_random && (rc = parse_random(o->source, &n_random, &seed, d)))
		return rc;
	if (!is_random && (rc = check_not_empty(o->source, d)))
		return rc;

	eo.threads = o->threads;
	if ((rc = oq_exec_new(m, &eo, &e, d)))
		return rc;
	nin = oq_exec_n_inputs(e);
	nout = oq_exec_n_outputs(e);
	if (is_random) {
		if ((rc = random_sample(e, &s, d)) || (rc = oq_samples_check(&s, e, d)))
			goto fail;
		total = n_random > SIZE_MAX ? SIZE_MAX : (size_t)n_random;
	} else {
		if ((rc = oq_samples_scan(o->source, e, &s, d)))
			goto fail;
		total = s.n;
	}
	if (o->limit && o->limit < total)
		total = o->limit;
	if (!is_random) {
		/* check only the samples that will run */
		size_t all = s.n;
		s.n = total;
		rc = oq_samples_check(&s, e, d);
		s.n = all;
		if (rc)
			goto fail;
	}
	if (is_random && o->progress)
		fprintf(o->progress, "calibrate: warning: random calibration data is not "
		                     "representative; ranges will not match real inputs\n");

	c.g = m->graph;
	c.st = oq_calloc(m->graph->n_values, sizeof *c.st);
	in = oq_calloc(nin, sizeof *in);
	outs = oq_calloc(nout, sizeof *outs);
	if (!c.st || !in || !outs) {
		rc = oq_err(d, OQ_ENOMEM, "calibrate: out of memory");
		goto fail;
	}
	for (size_t i = 0; i < m->graph->n_values; i++) {
		c.st[i].lo = INFINITY;
		c.st[i].hi = -INFINITY;
	}
	oq_exec_set_observer(e, observe, &c);
	tty = o->progress && isatty(fileno(o->progress));

	for (size_t i = 0; i < total; i++) {
		size_t si = is_random ? 0 : i;
		if (is_random)
			for (size_t k = 0; k < nin; k++)
				s.v[0].in[k].seed = mix64(seed ^ mix64((uint64_t)i));
		if ((rc = oq_sample_load(&s, si, e, in, d)))
			goto fail;
		for (size_t k = 0; k < nin; k++)
			observe(&c, oq_exec_input(e, k), &in[k]);
		rc = oq_exec_run(e, in, nin, outs, nout, d);
		for (size_t k = 0; k < nin; k++)
			oq_rt_release(&in[k]);
		for (size_t k = 0; k < nout; k++)
			oq_rt_release(&outs[k]);
		if (rc)
			goto fail;
		if (tty) {
			double t = now();
			if (i + 1 == total || t - last >= 0.1) {
				bar(o->progress, i + 1, total, t - t0);
				last = t;
			}
		}
	}
	if ((rc = collect(&c, out, d)))
		goto fail;
	observed = out->n;
	if (o->progress) {
		if (tty)
			fputs("\r\033[K", o->progress);
		for (size_t i = 0; i < out->n; i++)
			if (out->v[i].n_nan)
				fprintf(o->progress,
				        "calibrate: warning: tensor '%s': %llu NaN/Inf values "
				        "skipped\n",
				        out->v[i].name, (unsigned long long)out->v[i].n_nan);
		fprintf(o->progress, "calibrate: %zu samples, %zu tensors observed, %.1f s\n",
		        total, observed, now() - t0);
	}
	rc = OQ_OK;
fail:
	if (rc && last >= 0)
		fputc('\n', o->progress); /* keep the error off the progress line */
	free(outs);
	free(in);
	free(c.st);
	oq_samples_free(&s);
	oq_exec_free(e);
	return rc;
}
