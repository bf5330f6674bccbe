/*
 * sgemm_peak.c - the machine's practical float32 ceiling for one core: the
 * best GFLOP/s of OpenBLAS cblas_sgemm on square row-major matrices (n = 2048
 * by default, one OpenBLAS thread), over a few repetitions after a warm-up.
 * bench/exec_conv.sh divides the executor's GFLOP/s by this figure, so the
 * Conv/MatMul efficiency is read against what the hardware gives a tuned BLAS
 * here rather than against a datasheet peak. n = 2048: at 1024 OpenBLAS is
 * still some 20 % below its plateau on this Zen 4 (74 vs 94 GFLOP/s measured).
 *
 * usage: sgemm_peak [N] [REPS]     prints "sgemm_peak n=N gflops=G best_ms=T"
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void openblas_set_num_threads(int);

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 2048, reps = argc > 2 ? atoi(argv[2]) : 5;
	size_t nn;
	float *a, *b, *c;
	double best = 0;

	if (n < 16 || n > 8192 || reps < 1) {
		fprintf(stderr, "usage: sgemm_peak [N in 16..8192] [REPS >= 1]\n");
		return 2;
	}
	nn = (size_t)n * (size_t)n;
	a = malloc(nn * sizeof *a);
	b = malloc(nn * sizeof *b);
	c = malloc(nn * sizeof *c);
	if (!a || !b || !c) {
		fprintf(stderr, "sgemm_peak: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < nn; i++) {
		a[i] = (float)(i % 17) * 0.25f - 2.0f;
		b[i] = (float)(i % 13) * 0.125f - 0.75f;
	}
	openblas_set_num_threads(1);
	for (int r = 0; r <= reps; r++) { /* r = 0: warm-up */
		double t0 = now_ms(), ms;
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
		ms = now_ms() - t0;
		if (r > 0 && (best == 0 || ms < best))
			best = ms;
	}
	printf("sgemm_peak n=%d gflops=%.1f best_ms=%.3f\n", n, 2.0 * n * n * (double)n / (best * 1e6), best);
	free(a);
	free(b);
	free(c);
	return 0;
}
