/*
 * calib_fill.c - micro-benchmark of the calibration observers' hot loops:
 * the 2048-bin histogram fill (oq_hist_add_f32) and the min/max scan
 * (oq_minmax_f32), each against its plain one-value-at-a-time reference,
 * the plain-C fast path (oq_hist_simd = 0) and, for the fill, the loop of
 * e612646 (indices per block, zeros and NaN/Inf through scratch slots).
 *
 * Data: one 32x112x112 activation (401408 floats, mobilenet_v2's first
 * ReLU6 output size) in three shapes: "relu6" (45 % exact zeros, 10 % at
 * the clip value 6, the rest uniform in (0, 6)), "signed" (uniform in
 * [-3, 5], a NaN every 1000 values) and "abs" (the signed data into a |x|
 * histogram). Prints the best of 30 thread-CPU times per call in ns per
 * value, and checks every histogram against the reference (exit 1 if not).
 *
 * build (after a Release build in BUILD):
 *   cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Isrc -Icalib -IBUILD bench/calib_fill.c \
 *      BUILD/libonnxq_exec.a BUILD/libonnxq_core.a -lm -o /tmp/calib_fill
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "observe.h"

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

/* The fill of e612646, kept here for the comparison only. */
static void old_fill(oq_hist *h, uint64_t *bin, const float *p, size_t n)
{
	uint32_t idx[256];
	const float lo = h->abs ? 0.0f : h->lo_f, inv = h->inv_f, top = (float)(h->n - 1);
	const uint32_t zslot = (uint32_t)h->n, bad = (uint32_t)h->n + 1;
	const int ab = h->abs;

	for (size_t i = 0; i < n; i += 256) {
		size_t m = n - i < 256 ? n - i : 256;
		for (size_t j = 0; j < m; j++) {
			float x = p[i + j], u = ((ab ? fabsf(x) : x) - lo) * inv;
			int fin = (x - x) == 0.0f;
			u = u > 0 ? u : 0;
			u = u < top ? u : top;
			idx[j] = !fin ? bad : x == 0.0f ? zslot : (uint32_t)u;
		}
		for (size_t j = 0; j < m; j++)
			bin[idx[j]]++;
	}
	h->n_zero += bin[zslot];
	bin[zslot] = bin[bad] = 0;
}

int main(void)
{
	static float x[2][N];
	static uint64_t oldbin[OQ_HIST_BINS + 2];
	const char *names[] = {"relu6", "signed", "abs"};
	uint64_t s = 1;
	int fail = 0;

	for (size_t i = 0; i < N; i++) {
		float r = unif(&s), c = unif(&s);
		x[0][i] = c < 0.45f ? 0.0f : c < 0.55f ? 6.0f : 6 * r;
		x[1][i] = i % 1000 == 999 ? NAN : 8 * r - 3;
	}
	for (int d = 0; d < 3; d++) {
		const float *p = x[d == 0 ? 0 : 1];
		double lo = d == 0 ? 0 : -3, hi = d == 0 ? 6 : 5, best[4] = {1e30, 1e30, 1e30, 1e30};
		oq_hist ref, h;
		if (oq_hist_init(&ref, d == 2 ? 0 : lo, hi, OQ_HIST_BINS, d == 2))
			return 1;
		oq_hist_add_f32_ref(&ref, p, N);
		for (int r = 0; r < REPS; r++) {
			for (int how = 0; how < 4; how++) {
				if (oq_hist_init(&h, d == 2 ? 0 : lo, hi, OQ_HIST_BINS, d == 2))
					return 1;
				memset(oldbin, 0, sizeof oldbin);
				oq_hist_simd = how == 3;
				double t0 = cpu_ns();
				if (how == 0)
					oq_hist_add_f32_ref(&h, p, N);
				else if (how == 1)
					old_fill(&h, oldbin, p, N);
				else
					oq_hist_add_f32(&h, p, N);
				double t = cpu_ns() - t0;
				best[how] = t < best[how] ? t : best[how];
				if (how == 1)
					memcpy(h.bin, oldbin, h.n * sizeof *h.bin);
				if (h.n_zero != ref.n_zero || memcmp(h.bin, ref.bin, h.n * sizeof *h.bin))
					fail = 1;
				oq_hist_free(&h);
			}
		}
		oq_hist_free(&ref);
		printf("fill   %-6s ns/value: ref %.2f  e612646 %.2f  c %.2f  simd %.2f\n", names[d],
		       best[0] / N, best[1] / N, best[2] / N, best[3] / N);
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
		printf("minmax %-6s ns/value: ref %.2f  c (e612646 loop) %.2f  simd %.2f\n", names[d],
		       best[0] / N, best[1] / N, best[2] / N);
	}
	oq_hist_simd = 1;
	if (fail)
		printf("MISMATCH against the reference\n");
	return fail;
}
