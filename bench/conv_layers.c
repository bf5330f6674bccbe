/*
 * conv_layers.c - single Conv layers of resnet50 and mobilenet_v2 shapes
 * through oq_conv_run (1 thread, no epilogue), best thread-CPU time of N
 * repetitions each. The best of many is far steadier than a whole-model
 * median when other jobs share the cores, so it is the figure to compare
 * two builds of the GEMM with (run them alternately).
 *
 * build: cc -std=c11 -O2 -I src -I calib -I BUILD/gen bench/conv_layers.c -o conv_layers \
 *        BUILD/libonnxq_exec.a BUILD/libonnxq_core.a BUILD/libonnx_proto.a \
 *        $(pkg-config --libs libprotobuf-c openblas) -lpthread -lm
 * usage: conv_layers [REPS]   (default 60)
 */
#define _POSIX_C_SOURCE 200809L
#include "linalg.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* One square c -> m layer, kernel k, stride s, pad p on an h x h input; 0 or 1 on failure. */
static int layer(int64_t c, int64_t m, int64_t h, int64_t k, int64_t s, int64_t p, int reps)
{
	oq_conv_geom g = {0};
	float *x, *w, *y;
	double best = 1e30, gf;
	int rc = 0;

	g.nsp = 2;
	g.n = 1;
	g.c = c;
	g.m = m;
	g.group = 1;
	for (int d = 0; d < 2; d++) {
		g.in[d] = h;
		g.k[d] = k;
		g.stride[d] = s;
		g.dil[d] = 1;
		g.pad[d] = p;
		g.out[d] = (h + 2 * p - k) / s + 1;
	}
	g.in_size = h * h;
	g.out_size = g.out[0] * g.out[1];
	g.k_size = k * k;
	x = malloc(sizeof(float) * (size_t)(c * h * h));
	w = malloc(sizeof(float) * (size_t)(m * c * k * k));
	y = malloc(sizeof(float) * (size_t)(m * g.out_size));
	if (!x || !w || !y) {
		rc = 1;
		goto done;
	}
	for (int64_t i = 0; i < c * h * h; i++)
		x[i] = (float)(i % 7) - 3.0f;
	for (int64_t i = 0; i < m * c * k * k; i++)
		w[i] = (float)(i % 5) * 0.1f;
	for (int r = 0; r < reps; r++) {
		double t = cpu_ms();
		if (oq_conv_run(NULL, OQ_LT_F32, &g, x, w, NULL, y)) {
			rc = 1;
			goto done;
		}
		t = cpu_ms() - t;
		if (t < best)
			best = t;
	}
	gf = 2.0 * (double)(m * c * k * k * g.out_size) / 1e9;
	printf("c%-5lld m%-5lld %3lldx%-3lld k%lld s%lld  %8.3f ms %6.1f GFLOP/s\n", (long long)c, (long long)m,
	       (long long)h, (long long)h, (long long)k, (long long)s, best, gf / best * 1e3);
done:
	free(x);
	free(w);
	free(y);
	return rc;
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 60, bad = 0;
	/* c, m, h, k, s, pad: resnet50 (64-channel stage, 14x14 and 7x7 stages), then mobilenet_v2 1x1s */
	static const int64_t shapes[][6] = {
		{64, 64, 56, 3, 1, 1},    {256, 256, 14, 3, 1, 1}, {1024, 256, 14, 1, 1, 0}, {256, 1024, 14, 1, 1, 0},
		{512, 512, 7, 3, 1, 1},   {32, 16, 112, 1, 1, 0},  {16, 96, 112, 1, 1, 0},   {144, 32, 28, 1, 1, 0},
		{384, 64, 14, 1, 1, 0},   {576, 160, 7, 1, 1, 0},  {960, 320, 7, 1, 1, 0},
	};

	if (reps < 1)
		reps = 1;
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
		bad |= layer(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], shapes[i][5], reps);
	if (bad)
		fprintf(stderr, "conv_layers: out of memory or oq_conv_run failed\n");
	return bad;
}
