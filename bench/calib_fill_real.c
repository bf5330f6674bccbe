/*
 * calib_fill_real.c - the histogram fill on a real model's activations: runs
 * MODEL on one sample through the executor, keeps a copy of every float32
 * node output (with an observer set, nothing is fused, so the copies are
 * every intermediate calibration could see), then times oq_hist_add_f32
 * over all of them, the best of 15 thread-CPU times, with the AVX-512 path
 * counting one-bin vectors at once (oq_hist_runs = 1, the default) and value
 * by value (0), and checks both give the same histograms. Also times the
 * min/max scan calibration runs before each fill (oq_minmax_f32): one read
 * of every value with two compares, what a pass over the values costs at
 * the least.
 *
 * build (after a Release build in BUILD):
 *   cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I. bench/calib_fill_real.c \
 *      BUILD/libonnxq.a -lprotobuf-c -lopenblas \
 *      -lm -lpthread -o /tmp/calib_fill_real
 * usage: /tmp/calib_fill_real MODEL SAMPLE.npy   (a model with one float input)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib/exec/exec.h"
#include "src/io/npy.h"
#include "calib/histogram.h"
#include "src/io/onnx_io.h"

#define REPS 15

typedef struct cap {
	float **v;
	size_t *n, count, cap, total;
} cap;

/* Whether a and b hold the same histogram (either count width). */
static int same(const oq_hist *a, const oq_hist *b)
{
	if (a->n_zero != b->n_zero || oq_hist_has_bins(a) != oq_hist_has_bins(b))
		return 0;
	for (size_t k = 0; k < 2 * (size_t)OQ_HIST_SIDE; k++)
		if (oq_hist_at(a, k) != oq_hist_at(b, k))
			return 0;
	return 1;
}

static int keep(void *ctx, const oq_value *val, const oq_rt *t)
{
	cap *c = ctx;
	(void)val;
	if (t->kind != OQ_RT_TENSOR || t->dtype != OQ_DT_FLOAT || !t->nelem)
		return 0;
	if (c->count == c->cap) {
		size_t nc = c->cap ? 2 * c->cap : 64;
		float **v = realloc(c->v, nc * sizeof *v);
		size_t *n = realloc(c->n, nc * sizeof *n);
		if (!v || !n)
			return OQ_ENOMEM;
		c->v = v;
		c->n = n;
		c->cap = nc;
	}
	if (!(c->v[c->count] = malloc(t->nelem * sizeof(float))))
		return OQ_ENOMEM;
	memcpy(c->v[c->count], t->data, t->nelem * sizeof(float));
	c->n[c->count++] = t->nelem;
	c->total += t->nelem;
	return 0;
}

static double cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* One fill of every captured tensor into its own histogram (grids fixed beforehand). */
static double fill_all(const cap *c, oq_hist *h, const float *amax)
{
	double t0 = cpu_ns();
	for (size_t i = 0; i < c->count; i++)
		if (oq_hist_add_f32(&h[i], c->v[i], c->n[i], amax[i]))
			exit(1);
	return cpu_ns() - t0;
}

int main(int argc, char **argv)
{
	oq_model *m;
	oq_exec *e;
	oq_exec_opts o = {.threads = 1};
	oq_diag d;
	oq_npy a;
	oq_rt in, out[16];
	cap c = {0};
	oq_hist *h[2];
	float *amax;
	double best[2] = {1e30, 1e30}, best_mm = 1e30;

	if (argc != 3) {
		fprintf(stderr, "usage: calib_fill_real MODEL SAMPLE.npy\n");
		return 2;
	}
	oq_diag_init(&d);
	if (oq_model_load(argv[1], &m, &d) || oq_exec_new(m, &o, &e, &d) ||
	    oq_npy_read(argv[2], 0, &a, &d)) {
		fprintf(stderr, "calib_fill_real: %s\n", d.msg);
		return 1;
	}
	if (oq_exec_n_inputs(e) != 1 || oq_exec_n_outputs(e) > 16) {
		fprintf(stderr, "calib_fill_real: the model needs one input and at most 16 outputs\n");
		return 1;
	}
	memset(&in, 0, sizeof in);
	memset(out, 0, sizeof out);
	in.kind = OQ_RT_TENSOR;
	in.dtype = a.dtype;
	in.rank = a.rank;
	memcpy(in.dims, a.dims, (size_t)a.rank * sizeof *a.dims);
	in.nelem = a.nelem;
	in.nbytes = a.nbytes;
	in.data = a.data;
	in.borrowed = 1;
	oq_exec_set_observer(e, keep, &c);
	if (oq_exec_run(e, &in, 1, out, oq_exec_n_outputs(e), &d)) {
		fprintf(stderr, "calib_fill_real: %s\n", d.msg);
		return 1;
	}
	amax = calloc(c.count, sizeof *amax);
	h[0] = calloc(c.count, sizeof **h);
	h[1] = calloc(c.count, sizeof **h);
	if (!amax || !h[0] || !h[1])
		return 1;
	for (int r = 0; r < REPS; r++) {
		double t0 = cpu_ns(), t;
		for (size_t i = 0; i < c.count; i++) {
			float lo = INFINITY, hi = -INFINITY;
			uint64_t bad = 0;
			oq_minmax_f32(c.v[i], c.n[i], &lo, &hi, &bad);
			amax[i] = lo <= hi ? fmaxf(-lo, hi) : 0;
		}
		t = cpu_ns() - t0;
		best_mm = t < best_mm ? t : best_mm;
	}
	for (int r = 0; r < REPS; r++)
		for (int runs = 0; runs < 2; runs++) {
			double t;
			oq_hist_runs = runs;
			for (size_t i = 0; i < c.count; i++) {
				oq_hist_free(&h[runs][i]);
				if (amax[i] > 0 && oq_hist_reserve(&h[runs][i], oq_hist_exponent(amax[i])))
					return 1;
			}
			t = fill_all(&c, h[runs], amax);
			best[runs] = t < best[runs] ? t : best[runs];
		}
	for (size_t i = 0; i < c.count; i++)
		if (!same(&h[0][i], &h[1][i])) {
			printf("MISMATCH in tensor %zu\n", i);
			return 1;
		}
	printf("%zu float tensors, %.2f M values: min/max scan %.3f ms (%.3f ns/value)\n", c.count,
	       (double)c.total / 1e6, best_mm / 1e6, best_mm / (double)c.total);
	printf("%zu float tensors, %.2f M values: fill %.3f ms (%.3f ns/value) value by value, "
	       "%.3f ms (%.3f ns/value) with one-bin vectors counted at once\n",
	       c.count, (double)c.total / 1e6, best[0] / 1e6, best[0] / (double)c.total,
	       best[1] / 1e6, best[1] / (double)c.total);
	return 0;
}
