/*
 * conv_layers.c - single Conv layers of resnet50 and mobilenet_v2 shapes
 * through oq_conv_run_packed (1 thread, no epilogue; the weights packed once
 * beforehand, as the executor's plan does), best thread-CPU time of N
 * repetitions each. The best of many is far steadier than a whole-model
 * median when other jobs share the cores, so it is the figure to compare
 * two builds of the GEMM with (run them alternately).
 *
 * build: cc -std=c11 -O2 -I . bench/conv_layers.c -o conv_layers \
 *        BUILD/libonnxq.a \
 *        $(pkg-config --libs libprotobuf-c openblas) -lpthread -lm
 * usage: conv_layers [REPS]   (default 60)
 *        conv_layers mb [REPS]  MobileNetV2's 52 Conv layers in model order, each
 *        with its fused epilogue (Clip 0..6, residual Add), the output of one the
 *        input of the next, so the caches see what they see in the model; per layer
 *        the best thread-CPU time over REPS passes of the whole sequence.
 */
#define _POSIX_C_SOURCE 200809L
#include "calib/kernels/linalg/linalg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	oq_packed_w cw = {0, 0, 0, NULL};
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
	if (oq_packed_w_available() && oq_packed_w_pack(w, m, c * k * k, 1, &cw)) {
		rc = 1;
		goto done;
	}
	for (int r = 0; r < reps; r++) {
		double t = cpu_ms();
		if (oq_conv_run_packed(NULL, OQ_LT_F32, &g, x, w, cw.p ? &cw : NULL, NULL, NULL, y)) {
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
	oq_packed_w_free(&cw);
	free(x);
	free(w);
	free(y);
	return rc;
}

/* ---------------------------------------------------- MobileNetV2 in order */

typedef struct mb_layer {
	int64_t c, m, h, k, s, dw, clip, res; /* res: + the input of the block (same shape as the output) */
	double best, sum;  /* best and summed thread-CPU ms over the passes */
	float *w, *b;
	oq_packed_w cw;          /* w packed (not for depthwise), as the executor's plan does */
} mb_layer;

#define MB_MAX 64

static int mb_list(mb_layer *L)
{
	/* torchvision's inverted residual settings: expansion t, channels c, repeats n, stride s */
	static const int set[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
				      {6, 96, 3, 1}, {1 * 6, 160, 3, 2}, {6, 320, 1, 1}};
	int n = 0;
	int64_t h = 224, cin = 32;

	L[n++] = (mb_layer){3, 32, h, 3, 2, 0, 1, 0, 0, 0, NULL, NULL, {0, 0, 0, NULL}};
	h = 112;
	for (int i = 0; i < 7; i++)
		for (int r = 0; r < set[i][2]; r++) {
			int64_t s = r == 0 ? set[i][3] : 1, hid = cin * set[i][0], cout = set[i][1];
			if (set[i][0] != 1)
				L[n++] = (mb_layer){cin, hid, h, 1, 1, 0, 1, 0, 0, 0, NULL, NULL, {0, 0, 0, NULL}};
			L[n++] = (mb_layer){hid, hid, h, 3, s, 1, 1, 0, 0, 0, NULL, NULL, {0, 0, 0, NULL}};
			h = (h + 2 - 3) / s + 1;
			L[n++] = (mb_layer){hid, cout, h, 1, 1, 0, 0, s == 1 && cin == cout, 0, 0, NULL, NULL, {0, 0, 0, NULL}};
			cin = cout;
		}
	L[n++] = (mb_layer){cin, 1280, h, 1, 1, 0, 1, 0, 0, 0, NULL, NULL, {0, 0, 0, NULL}};
	return n;
}

static void mb_geom(const mb_layer *l, oq_conv_geom *g)
{
	int64_t p = l->k / 2;
	memset(g, 0, sizeof *g);
	g->nsp = 2;
	g->n = 1;
	g->c = l->c;
	g->m = l->m;
	g->group = l->dw ? l->c : 1;
	for (int d = 0; d < 2; d++) {
		g->in[d] = l->h;
		g->k[d] = l->k;
		g->stride[d] = l->s;
		g->dil[d] = 1;
		g->pad[d] = p;
		g->out[d] = (l->h + 2 * p - l->k) / l->s + 1;
	}
	g->in_size = l->h * l->h;
	g->out_size = g->out[0] * g->out[1];
	g->k_size = l->k * l->k;
}

static int mobilenet(int reps)
{
	mb_layer L[MB_MAX];
	int n = mb_list(L), rc = 1;
	size_t big = 3 * 224 * 224;
	float *buf[3] = {NULL, NULL, NULL}, *blk = NULL;
	double total = 0, mean = 0, flops = 0;
	oq_epi_step res = {OQ_EPI_TENSOR, OQ_EPI_ADD, 0, NULL, 0, 0, {0, 0, 0}, 0};

	for (int i = 0; i < n; i++) {
		oq_conv_geom g;
		size_t nw = (size_t)(L[i].m * (L[i].dw ? 1 : L[i].c) * L[i].k * L[i].k);
		mb_geom(&L[i], &g);
		if ((size_t)(L[i].m * g.out_size) > big)
			big = (size_t)(L[i].m * g.out_size);
		L[i].best = 1e30;
		L[i].sum = 0;
		L[i].w = malloc(nw * sizeof(float));
		L[i].b = malloc((size_t)L[i].m * sizeof(float));
		if (!L[i].w || !L[i].b)
			goto done;
		for (size_t q = 0; q < nw; q++)
			L[i].w[q] = (float)((q * 7) % 11) * 0.02f - 0.1f;
		for (int64_t q = 0; q < L[i].m; q++)
			L[i].b[q] = (float)(q % 3) * 0.1f;
		if (!L[i].dw && oq_packed_w_available() && oq_packed_w_pack(L[i].w, L[i].m, L[i].c * L[i].k * L[i].k, 1, &L[i].cw))
			goto done;
	}
	for (int q = 0; q < 3; q++)
		if (!(buf[q] = aligned_alloc(64, (big * sizeof(float) + 63) / 64 * 64)))
			goto done;
	for (size_t q = 0; q < 3 * 224 * 224; q++)
		buf[0][q] = (float)(q % 13) * 0.05f;
	for (int r = 0; r < reps; r++) {
		float *x = buf[0], *y = buf[1];
		blk = buf[0];
		for (int i = 0; i < n; i++) {
			oq_conv_geom g;
			oq_kfuse ep;
			double t;
			memset(&ep, 0, sizeof ep);
			mb_geom(&L[i], &g);
			if (L[i].clip)
				ep.act = (oq_act){OQ_ACT_CLIP, 0.0f, 6.0f};
			if (L[i].res) {
				ep.steps = &res;
				ep.n_steps = 1;
				ep.n_t = 1;
				ep.t[0] = blk;
			}
			/* the block input (kept for its residual) is never overwritten before its Add */
			if (y == blk)
				y = buf[3 - (x == buf[1] ? 1 : x == buf[2] ? 2 : 0) - (blk == buf[1] ? 1 : blk == buf[2] ? 2 : 0)];
			t = cpu_ms();
			if (oq_conv_run_packed(NULL, OQ_LT_F32, &g, x, L[i].w, L[i].cw.p ? &L[i].cw : NULL, L[i].b,
					       L[i].clip || L[i].res ? &ep : NULL, y))
				goto done;
			t = cpu_ms() - t;
			if (t < L[i].best)
				L[i].best = t;
			L[i].sum += t;
			/* a projection (no Clip) ends a block: its output starts the next one */
			if (!L[i].clip)
				blk = y;
			x = y;
			y = x == buf[0] ? buf[1] : x == buf[1] ? buf[2] : buf[0];
		}
	}
	for (int i = 0; i < n; i++) {
		oq_conv_geom g;
		double f;
		mb_geom(&L[i], &g);
		f = 2.0 * (double)(L[i].m * (L[i].dw ? 1 : L[i].c) * L[i].k * L[i].k * g.out_size);
		printf("%2d %s c%-5lld m%-5lld %3lldx%-3lld k%lld s%lld%s  best %7.3f ms %6.1f GFLOP/s  mean %7.3f ms\n", i,
		       L[i].dw ? "dw" : "  ", (long long)L[i].c, (long long)L[i].m, (long long)L[i].h, (long long)L[i].h,
		       (long long)L[i].k, (long long)L[i].s, L[i].res ? " +res" : "     ", L[i].best, f / L[i].best * 1e-6,
		       L[i].sum / reps);
		total += L[i].best;
		mean += L[i].sum / reps;
		flops += f;
	}
	printf("total best %.3f ms (%.1f GFLOP/s), mean %.3f ms, %.3f GFLOP\n", total, flops / total * 1e-6, mean,
	       flops * 1e-9);
	rc = 0;
done:
	for (int i = 0; i < n; i++) {
		free(L[i].w);
		free(L[i].b);
		oq_packed_w_free(&L[i].cw);
	}
	for (int q = 0; q < 3; q++)
		free(buf[q]);
	return rc;
}

int main(int argc, char **argv)
{
	int reps, bad = 0;

	if (argc > 1 && !strcmp(argv[1], "mb")) {
		reps = argc > 2 ? atoi(argv[2]) : 60;
		return mobilenet(reps < 1 ? 1 : reps);
	}
	reps = argc > 1 ? atoi(argv[1]) : 60;
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
