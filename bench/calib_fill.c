/*
 * calib_fill.c - micro-benchmark of the calibration observers' hot loops:
 * the power-of-two histogram fill (oq_hist_add_f32: 2 x 4096 bins) and the
 * min/max scan (oq_minmax_f32), each against its plain one-value-at-a-time
 * reference, the plain-C fast path (oq_hist_simd = 0) and the AVX-512 one.
 *
 * Data: one 32x112x112 activation (401408 floats, mobilenet_v2's first
 * ReLU6 output size) in three shapes: "relu6" (45 % exact zeros, 10 % at
 * the clip value 6, the rest uniform in (0, 6)), "signed" (uniform in
 * [-3, 5], a NaN every 1000 values) and "spiky" (Laplace-like, |x| = -ln u
 * / 8 with a random sign: most values in a few bins near 0, the case where
 * neighbouring values hit the same bin), and "flat" (runs of 64 values
 * where 7 runs in 10 hold one value, -0.37, like a detector's activations over
 * a blank page background; the others uniform in [-1, 2]). Prints the best of 30 thread-CPU
 * times per call in ns per value (the fill on a histogram whose grid the
 * first call fixed, as in calibration after the first sample), and checks
 * every histogram against the reference (exit 1 if not).
 *
 * build (after a Release build in BUILD):
 *   cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I. bench/calib_fill.c \
 *      BUILD/libonnxq.a -lm -o /tmp/calib_fill
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib/histogram.h"

#define N (32 * 112 * 112)
#define REPS 30

static double cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static float unif(uint64_t *s)
{
	*s = *s * 6364136223846793005u + 1442695040888963407u;
	return (float)(*s >> 40) / 16777216.0f;
}

static int same(const oq_hist *a, const oq_hist *b)
{
	if (a->n_zero != b->n_zero || a->e != b->e || oq_hist_has_bins(a) != oq_hist_has_bins(b))
		return 0;
	for (size_t k = 0; k < 2 * (size_t)OQ_HIST_SIDE; k++)
		if (oq_hist_at(a, k) != oq_hist_at(b, k))
			return 0;
	return 1;
}

int main(void)
{
	static float x[4][N];
	const char *names[] = {"relu6", "signed", "spiky", "flat"};
	uint64_t s = 1;
	int fail = 0;

	for (size_t i = 0; i < N; i++) {
		float r = unif(&s), c = unif(&s);
		x[0][i] = c < 0.45f ? 0.0f : c < 0.55f ? 6.0f : 6 * r;
		x[1][i] = i % 1000 == 999 ? NAN : 8 * r - 3;
		x[2][i] = (c < 0.5f ? -1 : 1) * -logf(1 - r * 0.9999f) / 8;
		x[3][i] = (i / 64) % 10 < 7 ? -0.37f : 3 * r - 1;
	}
	for (int d = 0; d < 4; d++) {
		const float *p = x[d];
		float lo = INFINITY, hi = -INFINITY, amax;
		uint64_t bad = 0;
		double best[3] = {1e30, 1e30, 1e30};
		oq_hist ref;
		oq_minmax_f32_ref(p, N, &lo, &hi, &bad);
		amax = fmaxf(-lo, hi);
		oq_hist_init(&ref);
		if (oq_hist_add_f32_ref(&ref, p, N))
			return 1;
		for (int r = 0; r < REPS; r++) {
			for (int how = 0; how < 3; how++) {
				oq_hist h;
				double t0, t;
				int rc;
				oq_hist_init(&h);
				if (oq_hist_reserve(&h, ref.e)) /* the grid as after a first sample */
					return 1;
				oq_hist_simd = how == 2;
				t0 = cpu_ns();
				rc = how == 0 ? oq_hist_add_f32_ref(&h, p, N) : oq_hist_add_f32(&h, p, N, amax);
				t = cpu_ns() - t0;
				best[how] = t < best[how] ? t : best[how];
				if (rc || !same(&h, &ref))
					fail = 1;
				oq_hist_free(&h);
			}
		}
		oq_hist_free(&ref);
		printf("fill   %-6s ns/value: ref %.2f  c %.2f  simd %.2f\n", names[d], best[0] / N,
		       best[1] / N, best[2] / N);
	}
	for (int d = 0; d < 2; d++) {
		double best[3] = {1e30, 1e30, 1e30};
		float rlo = INFINITY, rhi = -INFINITY;
		uint64_t rbad = 0;
		oq_minmax_f32_ref(x[d], N, &rlo, &rhi, &rbad);
		for (int r = 0; r < REPS; r++) {
			for (int how = 0; how < 3; how++) {
				float lo = INFINITY, hi = -INFINITY;
				uint64_t bad = 0;
				oq_hist_simd = how == 2;
				double t0 = cpu_ns();
				if (how == 0)
					oq_minmax_f32_ref(x[d], N, &lo, &hi, &bad);
				else
					oq_minmax_f32(x[d], N, &lo, &hi, &bad);
				double t = cpu_ns() - t0;
				best[how] = t < best[how] ? t : best[how];
				if (lo != rlo || hi != rhi || bad != rbad)
					fail = 1;
			}
		}
		printf("minmax %-6s ns/value: ref %.2f  c %.2f  simd %.2f\n", names[d], best[0] / N,
		       best[1] / N, best[2] / N);
	}
	oq_hist_simd = 1;
	if (fail)
		printf("MISMATCH against the reference\n");
	return fail;
}
