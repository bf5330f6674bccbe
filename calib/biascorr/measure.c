/*
 * measure.c - empirical bias correction, the measurement (see measure.h).
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
 * (an exact output counts as OQ_BC_SQNR_CAP).
 */
#include "calib/biascorr/measure.h"
#include "calib/biascorr/pre.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "calib/exec/cpu.h"
#include "calib/exec/threadpool.h"
#include "calib/samples.h"

/*
 * One sample's contribution, staged while its models run and added to the
 * layers' sums and the SQNRs in sample order (commit), so the double sums
 * are the same whichever lane ran the sample and when.
 */
typedef struct stage {
	double *s[2];      /* [0] float, [1] quantized model: layer l's M channel sums at off[l] */
	uint64_t *n[2];    /* per layer: elements summed per channel */
	uint8_t *bad[2];   /* per layer: the measured value did not fit (dtype, channel dim) */
	double *db;        /* nout: SQNR of each output against the float model's (NaN: no pair) */
} stage;

/* One model's side of the measurement: the observer's context. */
typedef struct side {
	const oq_bc_targets *b;
	const size_t *off;     /* per layer: its first channel in a stage's sums */
	const uint8_t *skip;   /* per layer: failed before this measurement (not staged) */
	const oq_value **vals; /* per layer: the measured value in this model, or NULL */
	int q;                 /* 1: a quantized model (sum_q), 0: the float one (sum_f) */
	int on;                /* 0: stage nothing (the float sums are taken in one pass only) */
	stage *st;             /* the sample being run */
	oq_bc_prefix *keep;    /* the base run of tails: values to keep (NULL: none) */
	size_t i;              /* the sample being run (keep) */
	atomic_size_t *kbytes; /* bytes kept so far, all lanes */
	atomic_int *kover;     /* set when they would pass OQ_BC_PREFIX_BYTES */
	int krc;               /* a copy failed (OQ_ENOMEM) */
	size_t kn;             /* samples the pass keeps values of (keep) */
} side;

/* Evaluated when the executor plans its fusion: independent of `on`. */
static int want(void *ctx, const oq_value *v)
{
	const side *s = ctx;
	for (size_t i = 0; i < s->b->n; i++)
		if (s->vals[i] == v)
			return 1;
	return s->keep && v->index < s->keep->n_values && s->keep->kmap[v->index] >= 0;
}

/*
 * oq_bc_sum_f32 (order in measure.h): eight independent chains instead of one, as a single chain
 * waits on each add's latency (mobilenet_v2: ~7 M values per run on each side, once ~17 % of
 * bias correction's time), and on AVX-512 the eight chains are one vector's lanes.
 */
#if defined(__GNUC__) && defined(__x86_64__)
#define HAVE_SUM_AVX512 1
/* The eight partial sums of oq_bc_sum_f32 as the lanes of one vector: the same additions in the same
 * order, lane by lane (GCC -O2 keeps the scalar loop scalar). Returns the elements consumed. */
__attribute__((target("avx512f"))) static size_t sum8_avx512(const float *p, size_t n, double *acc)
{
	__m512d a = _mm512_setzero_pd();
	size_t j = 0;

	for (; j + 8 <= n; j += 8)
		a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm256_loadu_ps(p + j)));
	_mm512_storeu_pd(acc, a);
	return j;
}

/* The same on AVX2: partials 0-3 and 4-7 as two vectors. */
__attribute__((target("avx2"))) static size_t sum8_avx2(const float *p, size_t n, double *acc)
{
	__m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
	size_t j = 0;

	for (; j + 8 <= n; j += 8) {
		a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_loadu_ps(p + j)));
		b = _mm256_add_pd(b, _mm256_cvtps_pd(_mm_loadu_ps(p + j + 4)));
	}
	_mm256_storeu_pd(acc, a);
	_mm256_storeu_pd(acc + 4, b);
	return j;
}
#endif

int oq_bc_sum_simd = 1;

double oq_bc_sum_f32(const float *p, size_t n)
{
	double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, a;
	size_t j = 0;

#ifdef HAVE_SUM_AVX512
	if (oq_bc_sum_simd == 1 && n >= 8 && oq_cpu_avx512())
		j = sum8_avx512(p, n, acc);
	else if (oq_bc_sum_simd && n >= 8 && oq_cpu_avx2_fma())
		j = sum8_avx2(p, n, acc);
#endif
	for (; j + 8 <= n; j += 8)
		for (int k = 0; k < 8; k++)
			acc[k] += (double)p[j + (size_t)k];
	a = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
	for (; j < n; j++)
		a += (double)p[j];
	return a;
}

int oq_bc_channel_sums(const oq_rt *t, size_t M, int ch_last, double *S, uint64_t *n)
{
	const float *x = t->data;
	size_t outer = 1, inner = 1;
	int axis;

	if (t->kind != OQ_RT_TENSOR || t->dtype != OQ_DT_FLOAT || t->rank < (ch_last ? 1 : 2))
		return -1;
	axis = ch_last ? t->rank - 1 : 1;
	if ((size_t)t->dims[axis] != M)
		return -1;
	for (int k = 0; k < axis; k++)
		outer *= (size_t)t->dims[k]; /* factors of nelem, which is in memory */
	for (int k = axis + 1; k < t->rank; k++)
		inner *= (size_t)t->dims[k];
	for (size_t o = 0; o < outer; o++)
		for (size_t m = 0; m < M; m++)
			S[m] += oq_bc_sum_f32(x + (o * M + m) * inner, inner);
	*n += (uint64_t)(outer * inner);
	return 0;
}

/* Stages t's per-channel sums for layer i on side s (or marks it bad when t does not fit). */
static void add(const side *s, size_t i, const oq_rt *t)
{
	const oq_bc_target *l = &s->b->v[i];

	if (oq_bc_channel_sums(t, l->M, l->ch_last, s->st->s[s->q] + s->off[i], &s->st->n[s->q][i]))
		s->st->bad[s->q][i] = 1;
}

static int keep_value(side *s, const oq_value *v, const oq_rt *t);

static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	side *s = ctx;
	if (s->keep && !s->krc)
		s->krc = keep_value(s, v, t);
	if (!s->on)
		return 0;
	for (size_t i = 0; i < s->b->n; i++)
		if (s->vals[i] == v && !s->skip[i])
			add(s, i, t);
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
		return OQ_BC_SQNR_CAP;
	db = 10 * log10(r2 / d2);
	return db > OQ_BC_SQNR_CAP ? OQ_BC_SQNR_CAP : db;
}

void oq_bc_outerr_free(oq_bc_outerr *e)
{
	free(e->r2);
	free(e->d2);
	free(e->e);
	free(e->cnt);
	e->r2 = e->d2 = e->e = NULL;
	e->cnt = NULL;
	e->n = e->nout = 0;
}

/* e's arrays for n samples and nout outputs (NaN errors, no channel sums), unless it has them. */
static int outerr_alloc(oq_bc_outerr *e, size_t n, size_t nout)
{
	size_t nn = n && nout ? n * nout : 1, nm = n && e->M ? n * e->M : 1; /* n, nout, M: in memory */

	if (e->r2)
		return e->n == n && e->nout == nout ? OQ_OK : OQ_EINVAL;
	e->r2 = malloc(nn * sizeof *e->r2);
	e->d2 = malloc(nn * sizeof *e->d2);
	e->e = oq_calloc(nm, sizeof *e->e);
	e->cnt = oq_calloc(n ? n : 1, sizeof *e->cnt);
	if (!e->r2 || !e->d2 || !e->e || !e->cnt) {
		oq_bc_outerr_free(e);
		return OQ_ENOMEM;
	}
	for (size_t i = 0; i < n * nout; i++)
		e->r2[i] = e->d2[i] = NAN;
	e->n = n;
	e->nout = nout;
	return OQ_OK;
}

/* Sample i's errors into e: q against the float outputs r; output k_ch's channel sums. */
static void outerr_add(oq_bc_outerr *e, size_t i, size_t k_ch, const oq_rt *r, const oq_rt *q)
{
	for (size_t k = 0; k < e->nout; k++) {
		const float *a = r[k].data, *b = q[k].data;
		double r2 = 0, d2 = 0;
		size_t outer = 1, inner = 1;
		int axis;

		if (r[k].kind != OQ_RT_TENSOR || q[k].kind != OQ_RT_TENSOR || r[k].dtype != OQ_DT_FLOAT ||
		    q[k].dtype != OQ_DT_FLOAT || r[k].nelem != q[k].nelem)
			continue;
		for (size_t j = 0; j < r[k].nelem; j++) {
			double x = (double)a[j] - (double)b[j];
			r2 += (double)a[j] * a[j];
			d2 += x * x;
		}
		e->r2[i * e->nout + k] = r2;
		e->d2[i * e->nout + k] = d2;
		if (k != k_ch || q[k].rank < (e->ch_last ? 1 : 2))
			continue;
		axis = e->ch_last ? q[k].rank - 1 : 1;
		if ((size_t)q[k].dims[axis] != e->M)
			continue;
		for (int x = 0; x < axis; x++)
			outer *= (size_t)q[k].dims[x]; /* factors of nelem, which is in memory */
		for (int x = axis + 1; x < q[k].rank; x++)
			inner *= (size_t)q[k].dims[x];
		for (size_t o = 0; o < outer; o++)
			for (size_t m = 0; m < e->M; m++) {
				size_t at = (o * e->M + m) * inner;
				double s = 0;
				for (size_t j = 0; j < inner; j++)
					s += (double)b[at + j] - (double)a[at + j];
				e->e[i * e->M + m] += s;
			}
		e->cnt[i] = (uint64_t)(outer * inner);
	}
}

static void release(oq_rt *t, size_t n)
{
	for (size_t k = 0; t && k < n; k++)
		oq_rt_release(&t[k]);
}

int oq_bc_spill = 1;

void oq_bc_float_cache_free(oq_bc_float_cache *c)
{
	size_t limit = c->limit, pf = c->peak_f, pq = c->peak_q;
	release(c->out, c->n * c->nout);
	free(c->out);
	free(c->at);
	if (c->has_fd)
		close(c->fd);
	memset(c, 0, sizeof *c);
	c->limit = limit;
	c->peak_f = pf;
	c->peak_q = pq;
}

/* The cache's file, unlinked at once (none when it cannot be made: the outputs stay in memory). */
/* An unlinked temporary file in $TMPDIR (else /tmp), or -1 (none; or oq_bc_spill 0). */
static int tmp_fd(void)
{
	const char *dir = getenv("TMPDIR");
	char path[4096];
	int fd;

	if (!oq_bc_spill || (size_t)snprintf(path, sizeof path, "%s/onnxq-bc-XXXXXX", dir && *dir ? dir : "/tmp") >= sizeof path ||
	    (fd = mkstemp(path)) < 0)
		return -1;
	unlink(path);
	return fd;
}

static void spill_open(oq_bc_float_cache *c)
{
	int fd = tmp_fd();

	if (fd < 0)
		return;
	c->fd = fd;
	c->has_fd = 1;
	c->fsize = 0;
}

/* Writes n bytes of p at offset at: 0, or -1 (a short or failed write). */
static int write_at(int fd, const void *p, size_t n, size_t at)
{
	const char *b = p;
	while (n) {
		ssize_t w = pwrite(fd, b, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n, (off_t)at);
		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			return -1;
		}
		b += w;
		n -= (size_t)w;
		at += (size_t)w;
	}
	return 0;
}

/* Reads n bytes at offset at into p: 0, or -1 (errno set; 0 when the file was short). */
static int read_at(int fd, void *p, size_t n, size_t at)
{
	char *b = p;
	while (n) {
		ssize_t r = pread(fd, b, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n, (off_t)at);
		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			if (!r)
				errno = 0;
			return -1;
		}
		b += r;
		n -= (size_t)r;
		at += (size_t)r;
	}
	return 0;
}

/* Keeps sample i's outputs in the file when they are all plain tensors and the writes succeed:
 * their types and shapes in c->out, data NULL. 1 when kept so. */
static int spill(oq_bc_float_cache *c, size_t i, const oq_rt *of)
{
	size_t at = c->fsize;

	if (!c->has_fd)
		return 0;
	for (size_t k = 0; k < c->nout; k++)
		if (of[k].kind != OQ_RT_TENSOR || of[k].strs || (of[k].nbytes && !of[k].data))
			return 0;
	for (size_t k = 0; k < c->nout; k++) {
		if (write_at(c->fd, of[k].data, of[k].nbytes, at)) {
			close(c->fd); /* a full disk: memory from here on */
			c->has_fd = 0;
			return 0;
		}
		at += of[k].nbytes;
	}
	for (size_t k = 0; k < c->nout; k++) {
		oq_rt *t = &c->out[i * c->nout + k];
		*t = of[k];
		t->data = NULL;
		t->borrowed = 0;
		t->cap = 0;
	}
	c->at[i] = c->fsize;
	c->fsize = at;
	return 1;
}

/*
 * buf (empty on entry; the caller releases it) := a tensor of shape's type and shape read from
 * fd at offset at; `what` names it in an error. OQ_ENOMEM, OQ_EINVAL or OQ_EIO.
 */
static int read_tensor(int fd, size_t at, const oq_rt *shape, oq_rt *buf, const char *what, oq_diag *d)
{
	if (oq_rt_alloc(buf, shape->dtype, shape->rank, shape->dims))
		return oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
	if (buf->nbytes != shape->nbytes)
		return oq_err(d, OQ_EINVAL, "bias correction: %s changed size (internal error)", what);
	buf->wide = shape->wide;
	if (read_at(fd, buf->data, buf->nbytes, at))
		return oq_err(d, OQ_EIO, "bias correction: cannot read back %s from its temporary file: %s", what,
			      errno ? strerror(errno) : "file shorter than written");
	return OQ_OK;
}

int oq_bc_float_cache_get(const oq_bc_float_cache *c, size_t i, oq_rt *buf, const oq_rt **out, oq_diag *d)
{
	const oq_rt *src = c->out + i * c->nout;
	size_t at;
	int rc;

	*out = src;
	if (!c->at || c->at[i] == SIZE_MAX)
		return OQ_OK;
	at = c->at[i];
	for (size_t k = 0; k < c->nout; k++) {
		if ((rc = read_tensor(c->fd, at, &src[k], &buf[k], "a kept float output", d)))
			return rc;
		at += buf[k].nbytes;
	}
	*out = buf;
	return OQ_OK;
}

/*
 * Keeps the float outputs of sample i (in the file, or moved from of, or copied when
 * borrowed): 0, 1 when they would pass the limit, or OQ_ENOMEM.
 */
static int keep(oq_bc_float_cache *c, size_t i, oq_rt *of)
{
	size_t all = 0;

	for (size_t k = 0; k < c->nout; k++)
		all += of[k].nbytes;
	if (c->bytes + all > (c->limit ? c->limit : OQ_BC_FLOAT_CACHE_BYTES))
		return 1;
	for (size_t k = 0, mem = !spill(c, i, of); mem && k < c->nout; k++) {
		oq_rt *t = &c->out[i * c->nout + k];
		if (of[k].borrowed) {
			int rc = oq_rt_copy(t, &of[k]);
			if (rc)
				return rc;
		} else {
			*t = of[k];
			memset(&of[k], 0, sizeof of[k]);
		}
	}
	c->bytes += all;
	return 0;
}

int oq_bc_float_cache_init(oq_bc_float_cache *c, size_t n, size_t nout)
{
	if (!(c->out = oq_calloc(n && nout ? n * nout : 1, sizeof *c->out)) ||
	    !(c->at = malloc((n ? n : 1) * sizeof *c->at))) {
		oq_bc_float_cache_free(c);
		return OQ_ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		c->at[i] = SIZE_MAX;
	spill_open(c);
	c->n = n;
	c->nout = nout;
	c->state = 1; /* until the limit is passed */
	return OQ_OK;
}

int oq_bc_float_cache_keep(oq_bc_float_cache *c, size_t i, oq_rt *of)
{
	int rc = keep(c, i, of);

	if (rc == 1) {
		oq_bc_float_cache_free(c); /* over the limit: the float model runs each time */
		c->state = -1;
		return OQ_OK;
	}
	return rc;
}

/* ------------------------------------------------------------ tails */

int oq_bc_tail = 1;
size_t oq_bc_tail_runs;

void oq_bc_prefix_free(oq_bc_prefix *p)
{
	for (size_t i = 0; p->kept && p->have && i < p->n * p->nk; i++)
		if (p->have[i])
			oq_rt_release(&p->kept[i]);
	free(p->kept);
	free(p->have);
	free(p->part);
	free(p->vidx);
	free(p->kmap);
	free(p->slot);
	free(p->at);
	if (p->has_fd)
		close(p->fd);
	memset(p, 0, sizeof *p);
}

/* Marks the producer of v for part when it computes from initializers only; returns 1 if it did. */
static int mark_const_producer(const oq_graph *g, unsigned char *part, const oq_value *v)
{
	const oq_node *n = v->producer;
	if (!n || n->graph != g || part[n->index])
		return 0;
	for (size_t k = 0; k < n->n_inputs; k++)
		if (n->inputs[k] && !n->inputs[k]->init)
			return 0;
	part[n->index] = 1;
	return 1;
}

/*
 * Calls fn(ctx, v) for each value v of g that part (per node) reads and does not compute, the
 * graph outputs it does not compute included, initializers excluded; part may grow during the
 * visit (a node marked later in the order is visited in the same call). Stops at the first fn
 * that returns < 0 and returns that; else 1 if any fn returned > 0, else 0.
 */
static int each_given(const oq_graph *g, const unsigned char *part, int (*fn)(void *, const oq_value *), void *ctx)
{
	int any = 0;
	for (size_t i = 0; i < g->n_nodes + g->n_outputs; i++) {
		const oq_node *n = i < g->n_nodes ? g->nodes[i] : NULL;
		size_t nin = n ? n->n_inputs : 1;
		if (n && !part[i])
			continue;
		for (size_t k = 0; k < nin; k++) {
			const oq_value *v = n ? n->inputs[k] : g->outputs[i - g->n_nodes];
			int r;
			if (!v || v->init || (v->producer && v->producer->graph == g && part[v->producer->index]))
				continue;
			if ((r = fn(ctx, v)) < 0)
				return r;
			any |= r > 0;
		}
	}
	return any;
}

/* each_given's fn for oq_bc_prefix_plan: a kept slot for v; -1 for a value of no node of the graph. */
typedef struct given {
	const oq_graph *g;
	oq_bc_prefix *p;
	const oq_bc_prefix *base;
	const oq_value **bv;
	const unsigned char *kept;
} given;

static int plan_given(void *ctx, const oq_value *v)
{
	given *c = ctx;
	oq_bc_prefix *p = c->p;
	if (v->graph != c->g || !v->producer || v->producer->graph != c->g) /* an input, outer or body value */
		return -1;
	if (p->kmap[v->index] < 0) {
		p->kmap[v->index] = (long)p->nk;
		p->vidx[p->nk++] = v->index;
	}
	return 0;
}

int oq_bc_prefix_plan(const oq_model *qm, oq_node *const *nodes, size_t nn, oq_bc_prefix *p, oq_diag *d)
{
	const oq_graph *g = qm->graph;
	int changed = 1;

	memset(p, 0, sizeof *p);
	p->state = -1;
	if (!oq_bc_tail || g->n_subgraphs)
		return OQ_OK;
	p->n_nodes = g->n_nodes;
	p->n_values = g->n_values;
	p->part = oq_calloc(g->n_nodes + 1, 1);
	p->kmap = malloc((g->n_values + 1) * sizeof *p->kmap);
	p->vidx = oq_calloc(g->n_values + 1, sizeof *p->vidx);
	if (!p->part || !p->kmap || !p->vidx) {
		oq_bc_prefix_free(p);
		return oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
	}
	for (size_t i = 0; i < g->n_values; i++)
		p->kmap[i] = -1;
	for (size_t i = 0; i < nn; i++) {
		if (!nodes[i] || nodes[i]->graph != g || nodes[i]->index >= g->n_nodes ||
		    g->nodes[nodes[i]->index] != nodes[i]) { /* a layer not found: no tails */
			oq_bc_prefix_free(p);
			p->state = -1;
			return OQ_OK;
		}
		p->part[nodes[i]->index] = 1;
	}
	/* downstream, and the constant feeders (a bias DequantizeLinear), to a fixed point (any node order) */
	while (changed) {
		changed = 0;
		for (size_t i = 0; i < g->n_nodes; i++) {
			const oq_node *n = g->nodes[i];
			for (size_t k = 0; k < n->n_inputs; k++) {
				const oq_value *v = n->inputs[k];
				if (!v || v->graph != g)
					continue;
				if (!p->part[i] && v->producer && v->producer->graph == g && p->part[v->producer->index]) {
					p->part[i] = 1;
					changed = 1;
				} else if (p->part[i]) {
					changed |= mark_const_producer(g, p->part, v);
				}
			}
		}
	}
	/* what part reads from the rest, and the graph outputs it does not compute */
	if (each_given(g, p->part, plan_given, &(given){.g = g, .p = p}) < 0) {
		oq_bc_prefix_free(p);
		p->state = -1;
		return OQ_OK;
	}
	p->state = 0;
	return OQ_OK;
}

/* The same attribute (scalars and lists; a tensor or graph attribute: never the same here). */
static int same_attr(const oq_attr *a, const oq_attr *b)
{
	if (strcmp(a->name, b->name) || a->type != b->type || a->n != b->n || a->i != b->i ||
	    memcmp(&a->f, &b->f, sizeof a->f) || a->s.len != b->s.len || (a->s.len && memcmp(a->s.p, b->s.p, a->s.len)))
		return 0;
	if (a->type == OQ_ATTR_INTS && a->n && memcmp(a->ints, b->ints, a->n * sizeof *a->ints))
		return 0;
	if (a->type == OQ_ATTR_FLOATS && a->n && memcmp(a->floats, b->floats, a->n * sizeof *a->floats))
		return 0;
	return a->type != OQ_ATTR_TENSOR && a->type != OQ_ATTR_GRAPH && a->type != OQ_ATTR_TENSORS &&
	       a->type != OQ_ATTR_GRAPHS && a->type != OQ_ATTR_SPARSE_TENSOR && a->type != OQ_ATTR_SPARSE_TENSORS &&
	       a->type != OQ_ATTR_STRINGS && a->type != OQ_ATTR_TYPE_PROTO && a->type != OQ_ATTR_TYPE_PROTOS;
}

static int same_tensor(const oq_tensor *a, const oq_tensor *b)
{
	return a->dtype == b->dtype && a->rank == b->rank && a->nbytes == b->nbytes && !a->strs && !b->strs &&
	       (!a->rank || !memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims)) &&
	       (!a->nbytes || !memcmp(a->data, b->data, a->nbytes));
}

int oq_bc_prefix_fits(const oq_bc_prefix *p, const oq_model *bm, const oq_model *cm)
{
	const oq_graph *a = bm->graph, *b = cm->graph;
	unsigned char *changed;
	int ok = 1;

	if (p->state != 1 || a->n_nodes != p->n_nodes || a->n_values != p->n_values || b->n_nodes != a->n_nodes ||
	    b->n_values != a->n_values || b->n_subgraphs || b->n_outputs != a->n_outputs ||
	    !(changed = oq_calloc(a->n_values + 1, 1)))
		return 0;
	for (size_t i = 0; ok && i < a->n_values; i++) {
		const oq_value *x = a->values[i], *y = b->values[i];
		ok = !strcmp(x->name, y->name) && !x->init == !y->init && x->flags == y->flags;
		if (ok && x->init && !same_tensor(x->init, y->init))
			changed[i] = 1;
	}
	for (size_t i = 0; ok && i < a->n_outputs; i++)
		ok = a->outputs[i]->index == b->outputs[i]->index;
	for (size_t i = 0; ok && i < a->n_nodes; i++) {
		const oq_node *x = a->nodes[i], *y = b->nodes[i];
		ok = !strcmp(x->op_type, y->op_type) && !strcmp(x->domain, y->domain) && x->n_inputs == y->n_inputs &&
		     x->n_outputs == y->n_outputs && x->n_attrs == y->n_attrs;
		for (size_t k = 0; ok && k < x->n_inputs; k++) {
			ok = !x->inputs[k] == !y->inputs[k] && (!x->inputs[k] || x->inputs[k]->index == y->inputs[k]->index);
			/* a changed initializer read outside part would change what the base computed */
			ok = ok && !(x->inputs[k] && !p->part[i] && changed[x->inputs[k]->index]);
		}
		for (size_t k = 0; ok && k < x->n_outputs; k++)
			ok = !x->outputs[k] == !y->outputs[k] &&
			     (!x->outputs[k] || x->outputs[k]->index == y->outputs[k]->index);
		for (size_t k = 0; ok && !p->part[i] && k < x->n_attrs; k++)
			ok = same_attr(&x->attrs[k], &y->attrs[k]);
	}
	free(changed);
	return ok;
}

int oq_bc_prefix_union(const oq_bc_prefix *p, size_t n, oq_bc_prefix *u, oq_diag *d)
{
	size_t first = n;

	memset(u, 0, sizeof *u);
	u->state = -1;
	for (size_t i = 0; i < n && first == n; i++)
		if (p[i].state == 0)
			first = i;
	if (first == n)
		return OQ_OK;
	u->n_nodes = p[first].n_nodes;
	u->n_values = p[first].n_values;
	u->kmap = malloc((u->n_values + 1) * sizeof *u->kmap);
	u->vidx = oq_calloc(u->n_values + 1, sizeof *u->vidx);
	if (!u->kmap || !u->vidx) {
		oq_bc_prefix_free(u);
		return oq_err(d, OQ_ENOMEM, "placement: out of memory");
	}
	for (size_t i = 0; i < u->n_values; i++)
		u->kmap[i] = -1;
	for (size_t i = first; i < n; i++)
		for (size_t k = 0; p[i].state == 0 && k < p[i].nk; k++) {
			size_t x = p[i].vidx[k];
			if (p[i].n_values != u->n_values || x >= u->n_values) {
				oq_bc_prefix_free(u);
				u->state = -1;
				return oq_err(d, OQ_EINVAL, "placement: tails planned on other models (internal error)");
			}
			if (u->kmap[x] < 0) {
				u->kmap[x] = (long)u->nk;
				u->vidx[u->nk++] = x;
			}
		}
	u->state = 0;
	return OQ_OK;
}

/* Is candidate node y computed as base node x from the same values (same[] per candidate value)? */
static int same_node(const oq_node *x, const oq_node *y, const unsigned char *same)
{
	if (strcmp(x->op_type, y->op_type) || strcmp(x->domain, y->domain) || x->n_inputs != y->n_inputs ||
	    x->n_outputs != y->n_outputs || x->n_attrs != y->n_attrs)
		return 0;
	for (size_t k = 0; k < x->n_inputs; k++) {
		const oq_value *a = x->inputs[k], *b = y->inputs[k];
		if (!a != !b || (b && (strcmp(a->name, b->name) || !same[b->index])))
			return 0;
	}
	for (size_t k = 0; k < x->n_outputs; k++)
		if (!x->outputs[k] != !y->outputs[k] || (x->outputs[k] && strcmp(x->outputs[k]->name, y->outputs[k]->name)))
			return 0;
	for (size_t k = 0; k < x->n_attrs; k++)
		if (!same_attr(&x->attrs[k], &y->attrs[k]))
			return 0;
	return 1;
}

/*
 * Marks the producer of v (candidate graph g) for part when v is not available to a tail:
 * computed by part already, an initializer, or kept (kept[] set: the same value, copied by the
 * base run): returns 1
 * if it marked a node, -1 when v cannot be had (a graph input or a value of no node), else 0.
 */
static int need(const oq_graph *g, unsigned char *part, const oq_value *v, const unsigned char *kept)
{
	const oq_node *n = v->producer;
	if (v->init || (n && n->graph == g && part[n->index]))
		return 0;
	if (!n || n->graph != g)
		return kept[v->index] ? 0 : -1;
	if (mark_const_producer(g, part, v))
		return 1;
	if (kept[v->index])
		return 0;
	part[n->index] = 1;
	return 1;
}

/* each_given's fn for the view's closure (need) */
static int view_need(void *ctx, const oq_value *v)
{
	given *c = ctx;
	return v->graph == c->g ? need(c->g, c->p->part, v, c->kept) : 0;
}

/* each_given's fn for the view's slots: v is the base's kept value of the same name */
static int view_given(void *ctx, const oq_value *v)
{
	given *c = ctx;
	oq_bc_prefix *p = c->p;
	if (v->graph == c->g && p->kmap[v->index] < 0) {
		p->kmap[v->index] = (long)p->nk;
		p->slot[p->nk] = (size_t)c->base->kmap[c->bv[v->index]->index];
		p->vidx[p->nk++] = v->index;
	}
	return 0;
}

int oq_bc_prefix_view(const oq_bc_prefix *base, const oq_model *bm, const oq_model *cm, oq_bc_prefix *v,
		      oq_diag *d)
{
	const oq_graph *a = bm->graph, *g = cm->graph;
	const oq_value **bv = NULL;
	unsigned char *same = NULL, *done = NULL, *kept = NULL;
	int changed = 1, rc = OQ_OK;
	given c = {.g = g, .p = v, .base = base};

	memset(v, 0, sizeof *v);
	v->state = -1;
	if (!oq_bc_tail || base->state != 1 || a->n_subgraphs || g->n_subgraphs || a->n_values != base->n_values ||
	    a->n_nodes != base->n_nodes)
		return OQ_OK;
	bv = oq_calloc(g->n_values + 1, sizeof *bv);
	same = oq_calloc(g->n_values + 1, 1);
	kept = oq_calloc(g->n_values + 1, 1);
	done = oq_calloc(g->n_nodes + 1, 1);
	v->part = oq_calloc(g->n_nodes + 1, 1);
	v->kmap = malloc((g->n_values + 1) * sizeof *v->kmap);
	v->vidx = oq_calloc(g->n_values + 1, sizeof *v->vidx);
	v->slot = oq_calloc(g->n_values + 1, sizeof *v->slot);
	if (!bv || !same || !kept || !done || !v->part || !v->kmap || !v->vidx || !v->slot) {
		rc = oq_err(d, OQ_ENOMEM, "placement: out of memory");
		goto out;
	}
	/* the values: by name; initializers of equal contents and graph inputs are the same */
	for (size_t i = 0; i < g->n_values; i++) {
		const oq_value *y = g->values[i], *x = oq_graph_find(a, y->name);
		v->kmap[i] = -1;
		if (!x || x->index >= a->n_values || a->values[x->index] != x)
			continue;
		bv[i] = x;
		if (y->init)
			same[i] = x->init && same_tensor(x->init, y->init);
		else if (!y->producer)
			same[i] = !x->init && !x->producer;
	}
	/* the nodes, to a fixed point (any node order) */
	while (changed) {
		changed = 0;
		for (size_t j = 0; j < g->n_nodes; j++) {
			const oq_node *y = g->nodes[j], *x;
			if (done[j] || !y->n_outputs || !y->outputs[0] || !bv[y->outputs[0]->index])
				continue;
			x = bv[y->outputs[0]->index]->producer;
			if (!x || x->graph != a || !same_node(x, y, same))
				continue;
			done[j] = 1;
			changed = 1;
			for (size_t k = 0; k < y->n_outputs; k++)
				if (y->outputs[k])
					same[y->outputs[k]->index] = 1;
		}
	}
	c.bv = bv;
	c.kept = kept;
	/* what the base kept: the same values in its kept slots */
	for (size_t i = 0; i < g->n_values; i++)
		kept[i] = same[i] && bv[i] && base->kmap[bv[i]->index] >= 0;
	for (size_t j = 0; j < g->n_nodes; j++)
		v->part[j] = !done[j];
	/* what the differing nodes read, to what a tail can be given; then the kept values it reads */
	while ((changed = each_given(g, v->part, view_need, &c)) > 0)
		;
	if (changed < 0)
		goto out;
	(void)each_given(g, v->part, view_given, &c);
	v->n_nodes = g->n_nodes;
	v->n_values = g->n_values;
	v->n = base->n;
	v->src = base;
	v->state = 1;
out:
	if (v->state != 1) {
		oq_bc_prefix_free(v);
		v->state = -1;
	}
	free(bv);
	free(same);
	free(kept);
	free(done);
	return rc;
}

/* Keeps a copy of v (t) when the base run of s->keep reads it, for sample s->i: each lane writes
 * its own sample's slots; the byte count is shared. */
static int keep_value(side *s, const oq_value *v, const oq_rt *t)
{
	oq_bc_prefix *p = s->keep;
	oq_rt *dst;
	size_t budget, at;
	long k;

	if (p->state != 0 || v->index >= p->n_values || (k = p->kmap[v->index]) < 0 || t->kind != OQ_RT_TENSOR ||
	    atomic_load(s->kover))
		return OQ_OK;
	dst = &p->kept[s->i * p->nk + (size_t)k];
	if (p->have[s->i * p->nk + (size_t)k])
		return OQ_OK;
	budget = p->has_fd ? OQ_BC_PREFIX_FILE_BYTES : OQ_BC_PREFIX_BYTES;
	/* a value whose copies on every sample would pass the budget: none kept, from the first */
	if (t->nbytes > budget / s->kn / p->nk || (at = atomic_fetch_add(s->kbytes, t->nbytes)) + t->nbytes > budget) {
		atomic_store(s->kover, 1);
		return OQ_OK;
	}
	if (p->has_fd && !t->strs && (t->data || !t->nbytes)) {
		if (write_at(p->fd, t->data, t->nbytes, at)) { /* a full disk: whole runs */
			atomic_store(s->kover, 1);
			return OQ_OK;
		}
		*dst = *t;
		dst->items = NULL;
		dst->n_items = 0;
		dst->data = NULL;
		dst->borrowed = 0;
		dst->cap = 0;
		p->at[s->i * p->nk + (size_t)k] = at;
		p->have[s->i * p->nk + (size_t)k] = 1;
		return OQ_OK;
	}
	if (oq_rt_copy(dst, t)) {
		oq_rt_release(dst);
		return OQ_ENOMEM;
	}
	p->have[s->i * p->nk + (size_t)k] = 1;
	return OQ_OK;
}

/* ------------------------------------------------------------ one pass over the samples */

/*
 * Lanes (as calibration's, calib/calibrate.c): the first sample of a pass
 * runs alone on the pass' executors, which measures a lane's memory (not
 * when an earlier pass measured executors of the same kinds: the cache's
 * peak_f / peak_q); then, with T threads and memory for it, T lanes run one
 * sample each, lane 0 on those executors and lane k on
 * clones of them (shared plan and weights), as the items of one parallel-for
 * over the pool. A lane stages its sample's sums and SQNRs and waits for
 * its turn: samples are committed in index order, so every double sum is
 * added in the order of the one-lane pass, bit for bit. A lane failing at
 * sample i lowers `stop` to i: later samples are dropped, earlier ones run
 * and commit, and the error of the smallest failing index is reported.
 */
typedef struct lane {
	oq_exec *ef, *eq;      /* the pass' own executors (lane 0) or clones */
	int own;               /* ef / eq are clones */
	side sf, sq;
	stage st;
	oq_rt *in, *of, *oqs;
	const oq_rt **vals;    /* tail runs: per value of the quantized model, the kept one or NULL */
	oq_rt *kbuf;           /* tail runs: the kept values read back from their file (per value of
				* the plan; released after each run) */
	int tail;              /* the sample staged ran its tail only */
	oq_diag d;
	size_t err_at;
	int rc;
} lane;

typedef struct pass {
	oq_bc_targets *b;
	const size_t *off;     /* per layer: first channel in a stage */
	size_t n_ch;           /* channels of all layers */
	oq_samples *s;
	size_t n, nin, nout;
	unsigned folds;        /* the samples this pass runs: bit i % OQ_BC_FOLDS, */
	size_t lo, hi;         /* and lo <= i < hi (hi 0: no bound) */
	size_t every;          /* and (i / OQ_BC_FOLDS) % every == 0 (0, 1: no bound) */
	int fonly, cached, sf_on, sq_on;
	oq_bc_sqnr *q;        /* SQNR out (NULL: float only) */
	oq_bc_outerr *err;     /* each sample's errors out (NULL: none) */
	size_t err_k;          /* the output whose channel sums err wants (SIZE_MAX: none) */
	oq_bc_float_cache *cache;
	const oq_bc_prefix *from; /* run the tails of this plan (NULL: whole runs) */
	atomic_size_t kbytes;     /* the base run's kept bytes (keep) */
	atomic_int kover;
	lane *v;
	atomic_size_t next;    /* the next sample to hand out */
	atomic_size_t stop;    /* the smallest failing sample, SIZE_MAX: none */
	size_t turn;           /* the next sample to commit (under mu) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
} pass;

static int in_pass(const pass *P, size_t i)
{
	return (P->folds >> (i % OQ_BC_FOLDS) & 1u) && i >= P->lo && (!P->hi || i < P->hi) &&
	       (P->every < 2 || i / OQ_BC_FOLDS % P->every == 0);
}

/* The first sample at or after i that the pass runs (P->n: none). */
static size_t pass_next(const pass *P, size_t i)
{
	while (i < P->n && !in_pass(P, i))
		i++;
	return i;
}

static void stage_clear(const pass *P, stage *st)
{
	for (int q = 0; q < 2; q++) {
		memset(st->s[q], 0, (P->n_ch ? P->n_ch : 1) * sizeof *st->s[q]);
		memset(st->n[q], 0, (P->b->n ? P->b->n : 1) * sizeof *st->n[q]);
		memset(st->bad[q], 0, P->b->n ? P->b->n : 1);
	}
}

static int stage_alloc(const pass *P, stage *st)
{
	size_t nl = P->b->n ? P->b->n : 1;
	for (int q = 0; q < 2; q++) {
		st->s[q] = oq_calloc(P->n_ch ? P->n_ch : 1, sizeof *st->s[q]);
		st->n[q] = oq_calloc(nl, sizeof *st->n[q]);
		st->bad[q] = oq_calloc(nl, 1);
		if (!st->s[q] || !st->n[q] || !st->bad[q])
			return OQ_ENOMEM;
	}
	st->db = oq_calloc(P->nout ? P->nout : 1, sizeof *st->db);
	return st->db ? OQ_OK : OQ_ENOMEM;
}

static void stage_free(stage *st)
{
	for (int q = 0; q < 2; q++) {
		free(st->s[q]);
		free(st->n[q]);
		free(st->bad[q]);
	}
	free(st->db);
}

/* Adds sample i's stage to the layers and the SQNRs (and its float outputs to the cache): in
 * index order, under P->mu. OQ_ENOMEM when the cache cannot copy an output. */
static int commit(pass *P, lane *ln, size_t i)
{
	int f = (int)(i % OQ_BC_FOLDS);
	const stage *st = &ln->st;
	oq_bc_targets *b = P->b;

	/* a float side with NaN/Inf sums (a non-finite sample): the sample is left out on both sides */
	for (size_t c = 0; P->sf_on && i < b->n_samples && !b->nonfinite[i] && c < P->n_ch; c++)
		if (!isfinite(st->s[0][c])) {
			b->nonfinite[i] = 1;
			b->n_nonfinite++;
		}
	for (size_t l = 0; l < P->b->n; l++) {
		oq_bc_target *L = &P->b->v[l];
		for (int q = 0; q < 2; q++) {
			double *S;
			if (L->failed || !(q ? P->sq_on : P->sf_on) || (i < b->n_samples && b->nonfinite[i]))
				continue;
			if (st->bad[q][l]) {
				L->failed = 1;
				continue;
			}
			/* the float side of a probe sample also into the probe's sums (tables.h) */
			for (int p = 0; p < (!q && L->sum_fp && oq_bc_probe_sample(i) ? 2 : 1); p++) {
				S = (q ? L->sum_q : p ? L->sum_fp : L->sum_f) + (size_t)f * L->M;
				for (size_t m = 0; m < L->M; m++)
					S[m] += st->s[q][P->off[l] + m];
				*(q ? &L->n_q[f] : p ? &L->n_fp[f] : &L->n_f[f]) += st->n[q][l];
			}
		}
	}
	if (P->q) {
		double sum = 0;
		size_t k2 = 0;
		for (size_t k = 0; k < P->nout; k++) {
			double db = st->db[k];
			if (!isnan(db)) {
				P->q->sum[f] += db;
				P->q->n[f]++;
				P->q->min[f] = fmin(P->q->min[f], db);
				sum += db;
				k2++;
			}
		}
		P->q->per[i] = k2 ? sum / (double)k2 : NAN;
	}
	if (P->fonly && P->cache->state == 1)
		return oq_bc_float_cache_keep(P->cache, i, ln->of);
	return OQ_OK;
}

/* The kept value in slot `at` of p: *out = p's copy, or buf (empty on entry) read back from p's
 * file (the caller releases it). OQ_EIO or OQ_ENOMEM. */
static int kept_get(const oq_bc_prefix *p, size_t at, oq_rt *buf, const oq_rt **out, oq_diag *d)
{
	const oq_rt *src = &p->kept[at];
	int rc;

	*out = src;
	if (!p->at || p->at[at] == SIZE_MAX)
		return OQ_OK;
	if ((rc = read_tensor(p->fd, p->at[at], src, buf, "a kept value", d)))
		return rc;
	*out = buf;
	return OQ_OK;
}

/* Runs sample i on lane ln and stages it. */
static int run_sample(pass *P, lane *ln, size_t i)
{
	const oq_rt *ro = ln->of;
	int rc;

	stage_clear(P, &ln->st);
	if ((rc = oq_sample_load(P->s, i, ln->eq ? ln->eq : ln->ef, ln->in, &ln->d)))
		return rc;
	if (P->cached) {
		if ((rc = oq_bc_float_cache_get(P->cache, i, ln->of, &ro, &ln->d)))
			return rc;
	} else if ((rc = oq_exec_run(ln->ef, ln->in, P->nin, ln->of, P->nout, &ln->d))) {
		return rc;
	}
	if (ln->eq) {
		const oq_bc_prefix *t = P->from, *kp = t && t->src ? t->src : t;
		int tail = t && ln->vals;
		for (size_t k = 0; tail && k < t->nk; k++) {
			size_t at = i * kp->nk + (t->src ? t->slot[k] : k);
			if ((tail = kp->have[at]) && (rc = kept_get(kp, at, &ln->kbuf[k], &ln->vals[t->vidx[k]], &ln->d)))
				break;
		}
		ln->sq.i = i;
		ln->tail = tail;
		if (!rc && tail)
			rc = oq_exec_run_part(ln->eq, t->part, ln->vals, ln->oqs, P->nout, &ln->d);
		else if (!rc)
			rc = oq_exec_run(ln->eq, ln->in, P->nin, ln->oqs, P->nout, &ln->d);
		if (t && ln->kbuf)
			release(ln->kbuf, t->nk);
		if (rc)
			return rc;
		for (size_t k = 0; k < P->nout; k++)
			ln->st.db[k] = sqnr(&ro[k], &ln->oqs[k]);
		if (P->err) /* sample i's own slots: no other lane writes them */
			outerr_add(P->err, i, P->err_k, ro, ln->oqs);
		release(ln->oqs, P->nout);
	}
	return OQ_OK;
}

static void lower_stop(pass *P, size_t i)
{
	size_t stop = atomic_load(&P->stop);
	while (i < stop && !atomic_compare_exchange_weak(&P->stop, &stop, i))
		;
	pthread_mutex_lock(&P->mu);
	pthread_cond_broadcast(&P->cv);
	pthread_mutex_unlock(&P->mu);
}

/* Lane loop: samples from P->next below `end`, each run, then committed in its turn. */
static void lane_loop(pass *P, lane *ln, size_t end)
{
	for (;;) {
		size_t i = atomic_fetch_add(&P->next, 1);
		int rc;
		if (i >= end || i > atomic_load(&P->stop))
			break;
		if (!in_pass(P, i))
			continue;
		rc = run_sample(P, ln, i);
		pthread_mutex_lock(&P->mu);
		while (!rc && P->turn != i && atomic_load(&P->stop) >= i)
			pthread_cond_wait(&P->cv, &P->mu);
		if (!rc && P->turn == i) {
			if ((rc = commit(P, ln, i)))
				rc = oq_err(&ln->d, rc, "bias correction: out of memory");
			oq_bc_tail_runs += (size_t)ln->tail;
			P->turn = pass_next(P, i + 1);
			pthread_cond_broadcast(&P->cv);
		}
		pthread_mutex_unlock(&P->mu);
		release(ln->of, P->nout);
		release(ln->in, P->nin);
		if (rc) {
			ln->rc = rc;
			ln->err_at = i;
			lower_stop(P, i);
			break;
		}
		if (atomic_load(&P->stop) < i) /* woken by an earlier sample's failure */
			break;
	}
}

static void lanes_run(void *ctx, size_t begin, size_t end)
{
	pass *P = ctx;
	for (size_t k = begin; k < end; k++)
		lane_loop(P, &P->v[k], P->n);
}

static void lane_free(const pass *P, lane *ln)
{
	release(ln->in, P->nin);
	release(ln->of, P->nout);
	release(ln->oqs, P->nout);
	free(ln->in);
	free(ln->of);
	free(ln->oqs);
	free(ln->vals);
	if (ln->kbuf)
		release(ln->kbuf, P->from->nk);
	free(ln->kbuf);
	stage_free(&ln->st);
	if (ln->own) {
		oq_exec_free(ln->ef);
		oq_exec_free(ln->eq);
	}
}

/* Lane k of P: buffers, and for k > 0 clones of lane 0's executors observed into its own stage. */
static int lane_init(pass *P, lane *ln, const lane *l0, size_t k)
{
	oq_exec_opts eo = {.threads = 1};
	int rc;

	oq_diag_init(&ln->d);
	ln->err_at = SIZE_MAX;
	ln->in = oq_calloc(P->nin ? P->nin : 1, sizeof *ln->in);
	ln->of = oq_calloc(P->nout ? P->nout : 1, sizeof *ln->of);
	ln->oqs = oq_calloc(P->nout ? P->nout : 1, sizeof *ln->oqs);
	if (!ln->in || !ln->of || !ln->oqs || stage_alloc(P, &ln->st) ||
	    (P->from && (!(ln->vals = oq_calloc(P->from->n_values + 1, sizeof *ln->vals)) ||
			 !(ln->kbuf = oq_calloc(P->from->nk + 1, sizeof *ln->kbuf)))))
		return oq_err(&ln->d, OQ_ENOMEM, "bias correction: out of memory");
	ln->sf.st = ln->sq.st = &ln->st;
	if (k == 0)
		return OQ_OK;
	ln->own = 1;
	ln->sf = l0->sf;
	ln->sq = l0->sq;
	ln->sf.st = ln->sq.st = &ln->st;
	if ((l0->ef && (rc = oq_exec_clone(l0->ef, &eo, &ln->ef, &ln->d))) ||
	    (l0->eq && (rc = oq_exec_clone(l0->eq, &eo, &ln->eq, &ln->d))))
		return rc;
	if (ln->ef)
		oq_exec_set_observer(ln->ef, observe, &ln->sf);
	if (ln->eq && (P->sq_on || ln->sq.keep)) /* the run whose measured values are summed or kept */
		oq_exec_set_observer(ln->eq, observe, &ln->sq);
	return OQ_OK;
}

size_t oq_bc_measure_lanes;

/*
 * A float-only measurement from what calibration took (pre.h): each sample's stage rebuilt for
 * b's layers from the pre's and committed in sample order, as the float model's run of it would
 * be, and the float outputs taken over. 1: the pre does not cover it (the float model runs);
 * else OQ_OK or OQ_ENOMEM.
 */
static int replay(oq_bc_pre *pre, const oq_calib_opts *o, oq_bc_targets *b, oq_bc_float_cache *cache, oq_diag *d)
{
	pass P;
	lane ln;
	size_t n, nout, n_ch = 0, *off;
	long *li;
	int rc = 1, set;

	if ((set = oq_bc_pre_ready(pre, o, cache->limit, &n, &nout)) < 0)
		return 1;
	off = oq_calloc(b->n + 1, sizeof *off);
	li = oq_calloc(b->n + 1, sizeof *li);
	memset(&P, 0, sizeof P);
	memset(&ln, 0, sizeof ln);
	if (!off || !li)
		goto nomem;
	for (size_t l = 0; l < b->n; l++) {
		const oq_bc_target *L = &b->v[l];
		off[l] = n_ch;
		n_ch += L->M; /* the pre holds as many channels and more */
		/* a layer failed before the run stages nothing: no observer call adds to it */
		if (!L->failed && (li[l] = oq_bc_pre_layer(pre, set, L->measured, L->M, L->ch_last)) < 0)
			goto out;
		if (L->failed)
			li[l] = -1;
	}
	P.b = b;
	P.off = off;
	P.n_ch = n_ch;
	P.n = n;
	P.nout = nout;
	P.folds = (1u << OQ_BC_FOLDS) - 1;
	P.sf_on = 1;
	if (stage_alloc(&P, &ln.st))
		goto nomem;
	free(b->nonfinite);
	b->n_samples = b->n_nonfinite = 0;
	if (!(b->nonfinite = oq_calloc(n ? n : 1, 1)))
		goto nomem;
	b->n_samples = n;
	for (size_t i = 0; i < n; i++) {
		stage_clear(&P, &ln.st);
		for (size_t l = 0; l < b->n; l++) {
			const double *S;
			uint64_t cnt;
			int bad;
			if (li[l] < 0)
				continue;
			oq_bc_pre_stage(pre, set, i, li[l], &S, &cnt, &bad);
			memcpy(ln.st.s[0] + off[l], S, b->v[l].M * sizeof *S);
			ln.st.n[0][l] = cnt;
			ln.st.bad[0][l] = (uint8_t)bad;
		}
		if ((rc = commit(&P, &ln, i)))
			goto out;
	}
	oq_bc_pre_take(pre, set, cache);
	rc = OQ_OK;
	goto out;
nomem:
	rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
out:
	stage_free(&ln.st);
	free(off);
	free(li);
	return rc;
}

int oq_bc_measure(oq_model *ref, oq_node *const *ref_nodes, oq_bc_quantized *runs, size_t n_runs,
		   const oq_calib_opts *o, oq_bc_targets *b, oq_bc_float_cache *cache, oq_diag *d)
{
	oq_exec *ef = NULL, *eq = NULL;
	/* the quantized models' weights dequantized and packed once (fold_dq): the float model's
	 * executor holds as much already */
	oq_exec_opts eo = {.threads = o->threads, .fold_dq = 1, .max_loop_iterations = o->max_loop_iterations,
			   .max_live_bytes = o->max_live_bytes};
	oq_samples s = {0};
	const oq_value **fvals = NULL, **qvals = NULL;
	size_t *off = NULL, n_ch = 0, nin = 0, nout = 0, n = 0, sums = n_runs;
	uint8_t *skip = NULL;
	side tf, tq; /* the observers' templates (want reads only b and vals) */
	/* float only: fill the cache; float sums already taken (a float-only call); outputs kept */
	int fonly = !n_runs && cache && cache->state == 0, fsums = cache && cache->state != 0,
	    cached = cache && cache->state == 1, scanned = 0, rc;

	oq_bc_measure_lanes = 1;
	for (size_t i = 0; i < b->n; i++) {
		oq_bc_target *l = &b->v[i];
		if (!fsums) {
			memset(l->sum_f, 0, OQ_BC_FOLDS * l->M * sizeof *l->sum_f);
			memset(l->n_f, 0, sizeof l->n_f);
			if (l->sum_fp)
				memset(l->sum_fp, 0, OQ_BC_FOLDS * l->M * sizeof *l->sum_fp);
			memset(l->n_fp, 0, sizeof l->n_fp);
			l->failed = !ref_nodes[i] || !ref_nodes[i]->n_outputs;
		}
		memset(l->sum_q, 0, OQ_BC_FOLDS * l->M * sizeof *l->sum_q);
		memset(l->n_q, 0, sizeof l->n_q);
	}
	for (size_t r = 0; r < n_runs; r++) {
		for (int f = 0; f < OQ_BC_FOLDS; f++) {
			runs[r].sqnr.min[f] = OQ_BC_SQNR_CAP;
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
	if (fonly && o->bc_pre && (rc = replay(o->bc_pre, o, b, cache, d)) != 1)
		return rc;
	fvals = oq_calloc(b->n ? b->n : 1, sizeof *fvals);
	qvals = oq_calloc(b->n ? b->n : 1, sizeof *qvals);
	off = oq_calloc(b->n ? b->n : 1, sizeof *off);
	skip = oq_calloc(b->n ? b->n : 1, 1);
	if (!fvals || !qvals || !off || !skip) {
		rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
		goto out;
	}
	for (size_t i = 0; i < b->n; i++) {
		off[i] = n_ch;
		if (b->v[i].M > SIZE_MAX / 16 - n_ch) {
			rc = oq_err(d, OQ_EINVAL, "bias correction: too many channels");
			goto out;
		}
		n_ch += b->v[i].M;
		if (!b->v[i].failed) {
			fvals[i] = ref_nodes[i]->outputs[0];
			if (sums < n_runs)
				qvals[i] = runs[sums].nodes[i]->outputs[0];
		}
	}
	tf = (side){b, off, skip, fvals, 0, 0, NULL, NULL, 0, NULL, NULL, 0, 1};
	tq = (side){b, off, skip, qvals, 1, 1, NULL, NULL, 0, NULL, NULL, 0, 1};
	if (!cached) {
		if ((rc = oq_exec_new(ref, &eo, &ef, d)))
			goto out;
		oq_exec_set_observer(ef, observe, &tf);
		oq_exec_set_observe_want(ef, want);
	}
	/*
	 * Pass r runs quantized model r (pass 0 of a float-only call: none),
	 * one model at a time: executors are most of the memory (vit_b_16: ~0.45
	 * GB each). The float model runs alongside unless its outputs are kept.
	 */
	for (size_t r = 0; r < (fonly ? 1 : n_runs); r++) {
		pass P;
		lane *v = NULL;
		size_t nl = 0, first, left = 0, worst = SIZE_MAX;
		oq_bc_prefix *kp;
		int known;
		oq_exec *e0;
		oq_pool *pool;

		memset(&P, 0, sizeof P);
		/* the base of tails keeps their inputs (observed); a candidate runs its tails */
		kp = !fonly && oq_bc_tail && runs[r].keep && runs[r].keep->state == 0 ? runs[r].keep : NULL;
		tq.keep = kp;
		if (!fonly) {
			if ((rc = oq_exec_new(runs[r].qm, &eo, &eq, d)))
				goto out;
			if (r == sums || kp) {
				oq_exec_set_observer(eq, observe, &tq);
				oq_exec_set_observe_want(eq, want);
			}
		}
		e0 = eq ? eq : ef;
		if (!scanned) {
			scanned = 1;
			nin = oq_exec_n_inputs(e0);
			nout = oq_exec_n_outputs(e0);
			if ((rc = oq_samples_scan(o->source, e0, &s, d)))
				goto out;
			n = oq_samples_thin(&s, o->limit && o->limit < s.n ? o->limit : s.n, OQ_MEASURE_SAMPLES);
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
				if (runs[k].err && (rc = outerr_alloc(runs[k].err, n, nout))) {
					rc = oq_err(d, rc, rc == OQ_ENOMEM ? "bias correction: out of memory"
									  : "bias correction: errors of other samples "
									    "(internal error)");
					goto out;
				}
			}
			if (fonly && oq_bc_float_cache_init(cache, n, nout)) {
				rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
				goto out;
			}
		}
		if ((eq && (oq_exec_n_inputs(eq) != nin || oq_exec_n_outputs(eq) != nout)) ||
		    (ef && (oq_exec_n_inputs(ef) != nin || oq_exec_n_outputs(ef) != nout))) {
			rc = oq_err(d, OQ_EINVAL, "bias correction: the quantized model has other inputs or "
				    "outputs than the float one (internal error)");
			goto out;
		}
		for (size_t i = 0; i < b->n; i++)
			skip[i] = (uint8_t)(b->v[i].failed != 0);
		P.b = b;
		P.off = off;
		P.n_ch = n_ch;
		P.s = &s;
		P.n = n;
		P.nin = nin;
		P.nout = nout;
		P.folds = fonly ? (1u << OQ_BC_FOLDS) - 1 : runs[r].folds;
		P.lo = fonly ? 0 : runs[r].lo;
		P.hi = fonly ? 0 : runs[r].hi;
		P.every = fonly ? 0 : runs[r].every;
		P.fonly = fonly;
		P.cached = cached;
		/* the float sums once: in a float-only call or alongside the quantized sums */
		P.sf_on = fonly || (!fsums && r == sums);
		if (P.sf_on) {
			free(b->nonfinite);
			b->n_samples = b->n_nonfinite = 0;
			if (!(b->nonfinite = oq_calloc(n ? n : 1, 1))) {
				rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
				goto out;
			}
			b->n_samples = n;
		}
		P.sq_on = !fonly && r == sums;
		P.q = fonly ? NULL : &runs[r].sqnr;
		P.err = fonly ? NULL : runs[r].err;
		P.err_k = SIZE_MAX;
		for (size_t k = 0; P.err && P.err->out && k < nout; k++)
			if (!strcmp(oq_exec_output(e0, k)->name, P.err->out))
				P.err_k = k;
		if (P.err)
			P.err->out_k = P.err_k;
		P.cache = cache;
		if (!fonly && oq_bc_tail && r != sums && !kp && runs[r].from && runs[r].from->state == 1 &&
		    runs[r].from->n == n)
			P.from = runs[r].from;
		atomic_init(&P.kbytes, 0);
		atomic_init(&P.kover, 0);
		tq.kbytes = &P.kbytes;
		tq.kover = &P.kover;
		tq.kn = 0;
		for (size_t i = 0; kp && i < n; i++)
			tq.kn += in_pass(&P, i);
		tq.kn += !tq.kn;
		pthread_mutex_init(&P.mu, NULL);
		pthread_cond_init(&P.cv, NULL);
		if (kp && (n > SIZE_MAX / sizeof *kp->kept / (kp->nk + 1) ||
			   !(kp->kept = oq_calloc(n * kp->nk + 1, sizeof *kp->kept)) ||
			   !(kp->have = oq_calloc(n * kp->nk + 1, 1)))) {
			rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
			goto pass_out;
		}
		if (kp && (!(kp->at = malloc((n * kp->nk + 1) * sizeof *kp->at)))) {
			rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
			goto pass_out;
		}
		if (kp) {
			int fd = kp->nk ? tmp_fd() : -1;
			kp->n = n;
			for (size_t i = 0; i < n * kp->nk; i++)
				kp->at[i] = SIZE_MAX;
			kp->fd = fd;
			kp->has_fd = fd >= 0;
		}
		atomic_init(&P.next, 0);
		atomic_init(&P.stop, SIZE_MAX);
		P.turn = first = pass_next(&P, 0);
		pool = oq_exec_pool(e0);
		if (!(v = oq_calloc((size_t)oq_pool_threads(pool), sizeof *v))) {
			rc = oq_err(d, OQ_ENOMEM, "bias correction: out of memory");
			goto pass_out;
		}
		P.v = v;
		nl = 1;
		v[0].ef = ef;
		v[0].eq = eq;
		v[0].sf = tf;
		v[0].sf.on = P.sf_on;
		v[0].sq = tq;
		if ((rc = lane_init(&P, &v[0], NULL, 0))) {
			rc = oq_err(d, rc, "%s", v[0].d.msg);
			goto pass_out;
		}
		if (ef)
			oq_exec_set_observer(ef, observe, &v[0].sf);
		if (eq && (r == sums || kp))
			oq_exec_set_observer(eq, observe, &v[0].sq);
		/* the first sample alone, on every thread: it measures a lane's memory (unless an
		 * earlier pass measured executors of this kind: cache->peak_f / peak_q) */
		known = cache && (!ef || cache->peak_f) && (!eq || cache->peak_q);
		if (first < n && !known) {
			lane_loop(&P, &v[0], first + 1);
			atomic_store(&P.next, first + 1);
		}
		for (size_t i = known ? first : first + 1; i < n; i++)
			left += in_pass(&P, i);
		if (!v[0].rc && left >= 2) {
			size_t want_l = oq_calib_lane_count(
			    oq_pool_threads(pool), (ef ? known ? cache->peak_f : oq_exec_peak_bytes(ef) : 0) +
			                               (eq ? known ? cache->peak_q : oq_exec_peak_bytes(eq) : 0) +
			                               ((size_t)4 << 20));
			want_l = want_l > left ? left : want_l;
			for (size_t k = 1; k < want_l; k++, nl++)
				if ((rc = lane_init(&P, &v[k], &v[0], k))) {
					rc = oq_err(d, rc, "%s", v[k].d.msg);
					nl++;
					goto pass_out;
				}
		}
		oq_bc_measure_lanes = nl > oq_bc_measure_lanes ? nl : oq_bc_measure_lanes;
		if (!v[0].rc) {
			if (nl > 1)
				oq_pool_run(pool, nl, 1, lanes_run, &P);
			else
				lane_loop(&P, &v[0], n);
		}
		for (size_t k = 0; k < nl; k++)
			if (v[k].rc && (worst == SIZE_MAX || v[k].err_at < v[worst].err_at))
				worst = k;
		rc = worst == SIZE_MAX ? OQ_OK : v[worst].d.count ? oq_err(d, v[worst].rc, "%s", v[worst].d.msg)
		                                                 : v[worst].rc;
		if (kp) { /* every sample's values kept, or none (a tail needs them all) */
			int lost = atomic_load(&P.kover);
			for (size_t k = 0; k < nl; k++)
				lost |= v[k].sq.krc != 0;
			for (size_t i = 0; lost && i < kp->n * kp->nk; i++)
				if (kp->have[i]) {
					oq_rt_release(&kp->kept[i]);
					kp->have[i] = 0;
				}
			kp->state = lost ? -1 : 1;
		}
		if (cache && ef && oq_exec_peak_bytes(ef) > cache->peak_f)
			cache->peak_f = oq_exec_peak_bytes(ef);
		if (cache && eq && oq_exec_peak_bytes(eq) > cache->peak_q)
			cache->peak_q = oq_exec_peak_bytes(eq);
	pass_out:
		for (size_t k = 0; v && k < nl; k++)
			lane_free(&P, &v[k]);
		free(v);
		pthread_mutex_destroy(&P.mu);
		pthread_cond_destroy(&P.cv);
		if (rc)
			goto out;
		oq_exec_free(eq);
		eq = NULL;
	}
	rc = OQ_OK;
out:
	if (rc && fonly)
		oq_bc_float_cache_free(cache);
	for (size_t r = 0; rc && r < n_runs; r++)
		oq_bc_sqnr_free(&runs[r].sqnr);
	free(fvals);
	free(qvals);
	free(off);
	free(skip);
	oq_samples_free(&s);
	oq_exec_free(ef);
	oq_exec_free(eq);
	return rc;
}
