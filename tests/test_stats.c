/*
 * test_stats.c - calibration statistics files (calib/stats_file.c) and the
 * sharded calibration paths of calib/calibrate.c.
 *
 * Expected numbers are hand-computed: the shard blocks of the split
 * formula, the ranges and histogram bins of five hand-written samples
 * through Relu and Neg, merged records of hand-made statistics. Sharded
 * runs are also checked against the one-machine run bit for bit (the
 * property the feature promises), for minmax and the histogram methods,
 * N = 1..7 (N > samples leaves shards empty), and one histogram file serves
 * every histogram method. Corrupt, truncated, other-version (the two-round
 * version 1 included), other-model and incomplete inputs must be refused
 * with OQ_EINVAL and a message naming the problem.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib/calibrate.h"
#include "gen_model.h"
#include "tmpdir.h"
#include "src/io/npy.h"
#include "src/io/onnx_io.h"
#include "src/quant/qparams.h"
#include "calib/stats_file.h"

/* ------------------------------------------------------------ fixture */

/* Whether a and b hold the same counts (either may be 32- or 64-bit). */
static int same_bins(const oq_hist *a, const oq_hist *b)
{
	for (size_t k = 0; k < 2 * (size_t)OQ_HIST_SIDE; k++)
		if (oq_hist_at(a, k) != oq_hist_at(b, k))
			return 0;
	return 1;
}

static void setup(void)
{
	cr_assert_not_null(tmpdir_make("oq_stats"));
}

static void teardown(void)
{
	tmpdir_remove();
}

#define at tmpdir_at

#define NS 5 /* samples */

/* Sample i: x = [i+1, -(5-i)/2, 0, 0.25] (element 3 NaN in sample 3). Hand ranges over all five:
 * x [-2.5 (sample 0), 5 (sample 4)], r = Relu(x) [0, 5], n = Neg(x) [-5, 2.5]; one NaN each.
 * The extremes sit in the first and the last sample, so every merge order must combine them. */
static void write_samples(void)
{
	oq_diag d;
	char rel[64];

	cr_assert_eq(mkdir(at("c"), 0700), 0);
	for (int i = 0; i < NS; i++) {
		float v[4] = {(float)(i + 1), -(float)(5 - i) / 2, 0, i == 3 ? NAN : 0.25f};
		snprintf(rel, sizeof rel, "c/%03d.npy", i);
		oq_diag_init(&d);
		cr_assert_eq(oq_npy_write(at(rel), OQ_DT_FLOAT, 2, (const int64_t[]){2, 2}, v, 16, &d),
		             OQ_OK, "%s", d.msg);
	}
}

typedef struct fixture {
	gen_model *g;
	oq_model *m;
} fixture;

/* x float[2, 2] -> Relu -> r;  x -> Neg -> n (neg 0: Relu instead, another model). */
static void build(fixture *f, int neg)
{
	oq_diag d;
	Onnx__GraphProto *mg;

	f->g = gen_new(8);
	gen_opset(f->g, "", 13);
	mg = gen_graph(f->g);
	gen_input(f->g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_node(f->g, mg, "Relu", "relu", "x", "r");
	gen_node(f->g, mg, neg ? "Neg" : "Relu", "neg", "x", "n");
	gen_output(f->g, mg, "r", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_output(f->g, mg, "n", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(f->g, &f->m, &d), OQ_OK, "%s", d.msg);
}

static void unbuild(fixture *f)
{
	oq_model_free(f->m);
	gen_free(f->g);
}

static oq_calib_opts opts(int method, int act_sym)
{
	oq_calib_opts o;
	memset(&o, 0, sizeof o);
	o.source = at("c");
	o.threads = 1;
	o.method = method;
	o.act_sym = act_sym;
	return o;
}

/* Shard i of n, written to and read back from rel. */
static void shard(fixture *f, int method, int act_sym, uint32_t i, uint32_t n, const char *rel,
                  oq_stats *back)
{
	oq_calib_opts o = opts(method, act_sym);
	oq_stats s;
	oq_diag d;
	char p[512];

	o.shard = i;
	o.n_shards = n;
	oq_diag_init(&d);
	cr_assert_eq(oq_calibrate_stats(f->m, &o, &s, &d), OQ_OK, "%s", d.msg);
	snprintf(p, sizeof p, "%s", at(rel));
	cr_assert_eq(oq_stats_write(p, &s, &d), OQ_OK, "%s", d.msg);
	oq_stats_free(&s);
	cr_assert_eq(oq_stats_read(p, back, &d), OQ_OK, "%s", d.msg);
}

/* All n shards, merged in reverse order (merge order must not matter). */
static void round_all(fixture *f, int method, int act_sym, uint32_t n, oq_stats *out)
{
	oq_diag d;
	for (uint32_t k = n; k-- > 0;) {
		oq_stats s;
		char rel[32];
		snprintf(rel, sizeof rel, "s%u.bin", k);
		shard(f, method, act_sym, k, n, rel, k == n - 1 ? out : &s);
		if (k != n - 1) {
			oq_diag_init(&d);
			cr_assert_eq(oq_stats_merge(out, &s, rel, &d), OQ_OK, "%s", d.msg);
			oq_stats_free(&s);
		}
	}
}

static void ranges_from(fixture *f, int method, int act_sym, const oq_stats *s, oq_ranges *r)
{
	oq_calib_opts o = opts(method, act_sym);
	oq_diag d;
	o.source = NULL;
	o.stats = s;
	o.stats_name = "merged";
	oq_diag_init(&d);
	cr_assert_eq(oq_calibrate(f->m, &o, r, &d), OQ_OK, "%s", d.msg);
}

static void one_machine(fixture *f, int method, int act_sym, oq_ranges *r)
{
	oq_calib_opts o = opts(method, act_sym);
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(oq_calibrate(f->m, &o, r, &d), OQ_OK, "%s", d.msg);
}

static void same_ranges(const oq_ranges *a, const oq_ranges *b, const char *what)
{
	cr_assert_eq(a->n, b->n, "%s: %zu vs %zu tensors", what, a->n, b->n);
	for (size_t i = 0; i < a->n; i++) {
		cr_assert_str_eq(a->v[i].name, b->v[i].name);
		cr_expect(memcmp(&a->v[i].min, &b->v[i].min, sizeof(float)) == 0 &&
		              memcmp(&a->v[i].max, &b->v[i].max, sizeof(float)) == 0 &&
		              a->v[i].n_nan == b->v[i].n_nan,
		          "%s: tensor %s: [%.9g, %.9g] nan %llu vs [%.9g, %.9g] nan %llu", what,
		          a->v[i].name, a->v[i].min, a->v[i].max, (unsigned long long)a->v[i].n_nan,
		          b->v[i].min, b->v[i].max, (unsigned long long)b->v[i].n_nan);
	}
}

/* ------------------------------------------------------------ shard split */

Test(stats, shard_blocks)
{
	uint64_t b, e;
	/* 16 samples, 3 shards: q = 5, r = 1 -> 6, 5, 5 */
	oq_stats_shard_range(16, 0, 3, &b, &e);
	cr_expect(b == 0 && e == 6);
	oq_stats_shard_range(16, 1, 3, &b, &e);
	cr_expect(b == 6 && e == 11);
	oq_stats_shard_range(16, 2, 3, &b, &e);
	cr_expect(b == 11 && e == 16);
	/* 2 samples, 3 shards: 1, 1, 0 */
	oq_stats_shard_range(2, 2, 3, &b, &e);
	cr_expect(b == 2 && e == 2);
	oq_stats_shard_range(2, 1, 3, &b, &e);
	cr_expect(b == 1 && e == 2);
	/* large totals do not overflow */
	oq_stats_shard_range(UINT64_MAX, 65535, 65536, &b, &e);
	cr_expect(e == UINT64_MAX && b == UINT64_MAX - UINT64_MAX / 65536);
}

/* ------------------------------------------------------------ through calibrate */

Test(stats, minmax_shards_hand_ranges, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges one, r;

	write_samples();
	build(&f, 1);
	one_machine(&f, OQ_CALIB_MINMAX, 0, &one);
	for (uint32_t n = 1; n <= 7; n++) {
		oq_stats s;
		const oq_range *x;
		round_all(&f, OQ_CALIB_MINMAX, 0, n, &s);
		cr_expect_eq(s.n_samples, NS);
		cr_expect_eq(s.n_total, NS);
		ranges_from(&f, OQ_CALIB_MINMAX, 0, &s, &r);
		x = oq_ranges_find(&r, "x");
		cr_assert_not_null(x);
		cr_expect(x->min == -2.5f && x->max == 5.0f && x->n_nan == 1, "n=%u x [%g, %g] %llu", n,
		          x->min, x->max, (unsigned long long)x->n_nan);
		x = oq_ranges_find(&r, "r");
		cr_expect(x && x->min == 0.0f && x->max == 5.0f && x->n_nan == 1);
		x = oq_ranges_find(&r, "n");
		cr_expect(x && x->min == -5.0f && x->max == 2.5f && x->n_nan == 1);
		same_ranges(&r, &one, "minmax");
		oq_ranges_free(&r);
		oq_stats_free(&s);
	}
	oq_ranges_free(&one);
	unbuild(&f);
}

/* One round for the histogram methods: identical to one machine for N = 1..7; a file written for
 * one histogram method serves the others (and other grids) just as well. */
static void one_round(int method, int act_sym)
{
	static const int hm[] = {OQ_CALIB_PERCENTILE, OQ_CALIB_ENTROPY, OQ_CALIB_MSE};
	fixture f;
	oq_ranges one, r;

	write_samples();
	build(&f, 1);
	one_machine(&f, method, act_sym, &one);
	for (uint32_t n = 1; n <= 7; n++) {
		oq_stats hs;
		round_all(&f, method, act_sym, n, &hs);
		cr_expect_eq(hs.kind, OQ_STATS_HIST);
		ranges_from(&f, method, act_sym, &hs, &r);
		same_ranges(&r, &one, oq_calib_method_name(method));
		oq_ranges_free(&r);
		if (n == 3)
			for (size_t k = 0; k < 3; k++) /* the other methods, and the other symmetry */
				for (int sym = 0; sym < 2; sym++) {
					oq_ranges o2, r2;
					one_machine(&f, hm[k], sym, &o2);
					ranges_from(&f, hm[k], sym, &hs, &r2);
					same_ranges(&r2, &o2, oq_calib_method_name(hm[k]));
					oq_ranges_free(&o2);
					oq_ranges_free(&r2);
				}
		oq_stats_free(&hs);
	}
	oq_ranges_free(&one);
	unbuild(&f);
}

Test(stats, mse_one_round, .init = setup, .fini = teardown) { one_round(OQ_CALIB_MSE, 0); }
Test(stats, percentile_sym_one_round, .init = setup, .fini = teardown)
{
	one_round(OQ_CALIB_PERCENTILE, 1);
}
Test(stats, entropy_one_round, .init = setup, .fini = teardown)
{
	one_round(OQ_CALIB_ENTROPY, 0);
}

/* The merged histogram of x by hand: values 1..5, -2.5..-0.5 (step 0.5), 0.25 four times (a NaN in
 * sample 3), five zeros. max |x| = 5 -> e = 3, bins of 8 / 4096 = 2^-9: k = |x| * 512. */
static void expect_hand_x(const oq_stats *hs, const char *what)
{
	uint64_t in_bins = 0;
	const oq_stat *x = NULL;

	for (size_t i = 0; i < hs->n; i++)
		if (!strcmp(hs->v[i].name, "x"))
			x = &hs->v[i];
	cr_assert_not_null(x, "%s: no record of x", what);
	cr_assert(oq_hist_has_bins(&x->h), "%s: no bins", what);
	cr_expect(x->lo == -2.5 && x->hi == 5.0 && x->n_bad == 1, "%s: [%g, %g], %llu bad", what,
	          x->lo, x->hi, (unsigned long long)x->n_bad);
	cr_expect_eq(x->h.e, 3, "%s: e %d", what, x->h.e);
	for (size_t k = 0; k < 2 * (size_t)OQ_HIST_SIDE; k++)
		in_bins += oq_hist_at(&x->h, k);
	cr_expect_eq(in_bins, 14, "%s: %llu in bins", what, (unsigned long long)in_bins);
	cr_expect_eq(x->h.n_zero, 5, "%s", what);
	for (int v = 1; v <= 5; v++)
		cr_expect_eq(oq_hist_at(&x->h, 512 * v), 1, "%s: bin of %d", what, v);
	cr_expect_eq(oq_hist_at(&x->h, 128), 4, "%s: bin of 0.25", what);
	for (int v = 1; v <= 5; v++) /* -0.5 v on the negative side */
		cr_expect_eq(oq_hist_at(&x->h, OQ_HIST_SIDE + 256 * v), 1, "%s: bin of -%g", what, 0.5 * v);
}

Test(stats, hist_counts, .init = setup, .fini = teardown)
{
	fixture f;
	oq_stats hs;

	write_samples();
	build(&f, 1);
	round_all(&f, OQ_CALIB_MSE, 0, 3, &hs);
	expect_hand_x(&hs, "3 shards");
	oq_stats_free(&hs);
	unbuild(&f);
}

/*
 * Sample lanes (calibrate.c): with T threads the samples after the first run T at a time on
 * executors of their own, each into its own statistics, merged at the end. Here the largest
 * |x| grows from sample to sample (2.5, 2, 3, 4, 5), so lanes hold histograms on different
 * grids that the merge must regrid. Every thread count gives the hand counts, and the summary
 * line says how many ran at a time (so the lanes did run: 4 samples after the first).
 */
Test(stats, sample_lanes_hand_counts, .init = setup, .fini = teardown)
{
	fixture f;

	write_samples();
	build(&f, 1);
	for (int threads = 1; threads <= 5; threads++) {
		oq_calib_opts o = opts(OQ_CALIB_MSE, 0);
		oq_stats hs;
		oq_diag d;
		char *log = NULL, what[32], want[48];
		size_t len;
		int at_once = threads < 4 ? threads : 4;
		o.threads = threads;
		cr_assert_not_null(o.progress = open_memstream(&log, &len));
		oq_diag_init(&d);
		cr_assert_eq(oq_calibrate_stats(f.m, &o, &hs, &d), OQ_OK, "%s", d.msg);
		fclose(o.progress);
		snprintf(what, sizeof what, "%d threads", threads);
		snprintf(want, sizeof want, " (%d samples at a time)\n", at_once);
		if (threads > 1)
			cr_expect(strstr(log, want), "%s: %s", what, log);
		else
			cr_expect(!strstr(log, "at a time"), "%s: %s", what, log);
		expect_hand_x(&hs, what);
		oq_stats_free(&hs);
		free(log);
	}
	/* oq_calib_lanes 0: the pool's threads share each kernel instead, the same counts */
	oq_calib_lanes = 0;
	{
		oq_calib_opts o = opts(OQ_CALIB_MSE, 0);
		oq_stats hs;
		oq_diag d;
		o.threads = 3;
		oq_diag_init(&d);
		cr_assert_eq(oq_calibrate_stats(f.m, &o, &hs, &d), OQ_OK, "%s", d.msg);
		expect_hand_x(&hs, "3 threads, no lanes");
		oq_stats_free(&hs);
	}
	oq_calib_lanes = -1;
	unbuild(&f);
}

/* ------------------------------------------------------------ the file format */

/* Hand-made statistics: shard `shard` of 4, records "a" (no histogram bins, 7 zeros in a
 * histogram file) and "b" (bins at e = 2 + shard % 2: 2 + shard in bin 0, 5 in bin 100, 1 in bin
 * 7 of the negative side, 7 zeros). */
static void handmade(oq_stats *s, int kind, uint32_t shard)
{
	memset(s, 0, sizeof *s);
	s->kind = kind;
	s->model_fp = 0x1122334455667788u;
	s->n_total = 40;
	s->n_samples = 10;
	s->n_shards = 4;
	s->covered = calloc(4, 1);
	s->covered[shard] = 1;
	s->n = 2;
	s->v = calloc(2, sizeof *s->v);
	s->v[0].name = strdup("a");
	s->v[0].seen = 1;
	s->v[0].lo = 1.5;
	s->v[0].hi = 1.5;
	s->v[0].n_bad = 3;
	oq_hist_init(&s->v[0].h);
	s->v[1].name = strdup("b");
	s->v[1].seen = 1;
	s->v[1].lo = -1;
	s->v[1].hi = 3;
	oq_hist_init(&s->v[1].h);
	s->v[0].hist = s->v[1].hist = kind == OQ_STATS_HIST;
	if (kind == OQ_STATS_HIST) {
		s->v[0].h.n_zero = 7;
		uint64_t *b = oq_hist_wide_bins(&s->v[1].h, 2 + (int)(shard % 2));
		cr_assert_not_null(b);
		b[0] = 2 + shard;
		b[100] = 5;
		b[OQ_HIST_SIDE + 7] = 1;
		oq_hist_fit(&s->v[1].h);
		s->v[1].h.n_zero = 7;
	}
	s->v[1].lo = -1.0 - shard;
}

Test(stats, round_trip)
{
	oq_stats s, t;
	uint8_t *buf;
	size_t len;
	oq_diag d;

	handmade(&s, OQ_STATS_HIST, 2);
	oq_diag_init(&d);
	cr_assert_eq(oq_stats_encode(&s, &buf, &len, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_stats_decode(buf, len, "mem", &t, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(t.kind, OQ_STATS_HIST);
	cr_expect_eq(t.model_fp, 0x1122334455667788u);
	cr_expect(t.n_total == 40 && t.n_samples == 10 && t.n_shards == 4);
	cr_expect(!t.covered[0] && !t.covered[1] && t.covered[2] && !t.covered[3]);
	cr_assert_eq(t.n, 2);
	cr_expect_str_eq(t.v[0].name, "a");
	cr_expect(t.v[0].lo == 1.5 && t.v[0].hi == 1.5 && t.v[0].n_bad == 3 && !oq_hist_has_bins(&t.v[0].h) &&
	          t.v[0].h.n_zero == 7);
	cr_expect_str_eq(t.v[1].name, "b");
	cr_assert(oq_hist_has_bins(&t.v[1].h));
	cr_expect(t.v[1].h.e == 2 && oq_hist_at(&t.v[1].h, 0) == 4 && oq_hist_at(&t.v[1].h, 100) == 5 &&
	          oq_hist_at(&t.v[1].h, OQ_HIST_SIDE + 7) == 1 && t.v[1].h.n_zero == 7);
	/* fixed layout: magic, version 2 little-endian, kind 2, 4096 bins a side */
	cr_expect(memcmp(buf, "ONNXQSTA\2\0\0\0\2\0\0\0\0\x10\0\0", 20) == 0);
	/* trailing empty bins are left out: record b stores e, 101 positive bins (0..100) and 8
	 * negative ones (0..7). The file: header (61 bytes with N = 4), record a (name length,
	 * name, flags, min, max, NaN count: 4+1+4+24; its histogram: zeros, e = 0, no bins, no
	 * bins: 8+4+4+4), record b (33; zeros, e, 101, bins, 8, bins) and the checksum */
	cr_expect_eq(len, 61 + 33 + 20 + 33 + 8 + 4 + 4 + 808 + 4 + 64 + 8, "%zu", len);
	cr_expect_eq(t.sum, s.sum);
	/* small counts come back 32-bit; a count past 2^32 comes back 64-bit, the same */
	cr_expect(t.v[1].h.b32 && !t.v[1].h.b64);
	free(buf);
	oq_stats_free(&t);
	cr_assert_not_null(oq_hist_wide_bins(&s.v[1].h, 0));
	s.v[1].h.b64[100] = (uint64_t)1 << 33;
	cr_assert_eq(oq_stats_encode(&s, &buf, &len, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(oq_stats_decode(buf, len, "mem", &t, &d), OQ_OK, "%s", d.msg);
	cr_expect(t.v[1].h.b64 && !t.v[1].h.b32 && oq_hist_at(&t.v[1].h, 100) == (uint64_t)1 << 33 &&
	          oq_hist_at(&t.v[1].h, 0) == 4, "a count of 2^33 read back");
	free(buf);
	oq_stats_free(&s);
	oq_stats_free(&t);
}

static char last_msg[1024];

static void expect_bad(const uint8_t *buf, size_t len, const char *needle)
{
	oq_stats t;
	oq_diag d;
	oq_diag_init(&d);
	cr_expect_eq(oq_stats_decode(buf, len, "f.bin", &t, &d), OQ_EINVAL, "%s: accepted", needle);
	cr_expect(strstr(d.msg, needle) && strstr(d.msg, "f.bin"), "want '%s' in: %s", needle, d.msg);
	snprintf(last_msg, sizeof last_msg, "%s", d.msg);
	oq_stats_free(&t);
}

/* Offset of record b's histogram part (its exponent) in an encoded handmade() file. */
static size_t hist_at(const uint8_t *buf, size_t len)
{
	const uint8_t *p = memchr(buf + 61 + 53, 'b', len - 61 - 53);
	cr_assert_not_null(p);
	return (size_t)(p - buf) + 1 + 4 + 24 + 8;
}

/* Rewrites the trailing checksum after an edit, to reach the checks behind it. */
static void reseal(uint8_t *buf, size_t len)
{
	uint64_t h = oq_stats_hash(buf, len - 8, 0);
	for (int k = 0; k < 8; k++)
		buf[len - 8 + (size_t)k] = (uint8_t)(h >> (8 * k));
}

Test(stats, corrupt_truncated_version)
{
	oq_stats s;
	uint8_t *buf, *c;
	size_t len;
	oq_diag d;

	handmade(&s, OQ_STATS_HIST, 1);
	oq_diag_init(&d);
	cr_assert_eq(oq_stats_encode(&s, &buf, &len, &d), OQ_OK);
	c = malloc(len);
	/* every single flipped bit in a sample of positions is caught */
	for (size_t at = 12; at < len; at += len / 97 + 1) {
		memcpy(c, buf, len);
		c[at] ^= 0x10;
		expect_bad(c, len, "corrupted");
	}
	/* truncation at any length */
	for (size_t l = 0; l < len; l += len / 53 + 1)
		expect_bad(buf, l, l < 8 ? "not an onnxq statistics file" : "corrupted");
	expect_bad(buf, len - 1, "corrupted");
	/* another version (1: the two-round format): refused before anything else is read */
	memcpy(c, buf, len);
	c[8] = 1;
	expect_bad(c, len, "format version 1");
	cr_expect(strstr(last_msg, "reads version 2"), "%s", last_msg);
	/* wrong magic */
	memcpy(c, buf, len);
	c[0] = 'X';
	expect_bad(c, len, "not an onnxq statistics file");
	/* a valid checksum over bad fields: N = 0, unknown kind, unsorted records */
	memcpy(c, buf, len);
	memset(c + 8 + 16 + 24, 0, 4);
	reseal(c, len);
	expect_bad(c, len, "bad shard count");
	memcpy(c, buf, len); /* bins per side other than 4096 */
	c[17] = 0x08;
	reseal(c, len);
	expect_bad(c, len, "bad header fields");
	memcpy(c, buf, len);
	c[12] = 9;
	reseal(c, len);
	expect_bad(c, len, "bad header fields");
	memcpy(c, buf, len);
	{
		/* the names "a" and "b" -> "c" and "b": not sorted */
		uint8_t *p = memchr(c + 60, 'a', len - 60);
		cr_assert_not_null(p);
		*p = 'c';
	}
	reseal(c, len);
	expect_bad(c, len, "not sorted");
	/* histogram fields: exponent past 128, more bins than a side has, counts whose total
	 * overflows, bins in a ranges file */
	{
		size_t h = hist_at(buf, len);
		cr_assert_eq(buf[h], 3 - OQ_HIST_EMIN); /* shard 1: e = 3, stored as e - EMIN */
		memcpy(c, buf, len);
		c[h] = 250;
		reseal(c, len);
		expect_bad(c, len, "bad histogram exponent");
		memcpy(c, buf, len);
		c[h + 4] = 0x01;
		c[h + 5] = 0x10; /* 4097 positive bins */
		reseal(c, len);
		expect_bad(c, len, "bad histogram bin count");
		memcpy(c, buf, len);
		memset(c + h + 8, 0xff, 8); /* bin 0 = 2^64 - 1, plus the others */
		reseal(c, len);
		expect_bad(c, len, "overflow");
		memcpy(c, buf, len);
		c[12] = 1; /* kind: ranges */
		reseal(c, len);
		expect_bad(c, len, "bad header fields"); /* the bins-per-side field says histograms */
		c[16] = 0;
		c[17] = 0;
		reseal(c, len);
		expect_bad(c, len, "corrupted"); /* records laid out for a histogram file */
	}
	free(c);
	free(buf);
	oq_stats_free(&s);
}

/* Random edits under a valid checksum: decode returns OQ_OK or OQ_EINVAL, never crashes (ASan runs
 * this too), and whatever it accepts can be merged and read by every range selection. */
Test(stats, random_edits_are_refused_or_safe)
{
	oq_stats s, t;
	uint8_t *buf, *c;
	size_t len;
	oq_diag d;
	uint64_t r = 12345;
	int accepted = 0;

	handmade(&s, OQ_STATS_HIST, 1);
	oq_diag_init(&d);
	cr_assert_eq(oq_stats_encode(&s, &buf, &len, &d), OQ_OK);
	c = malloc(len);
	cr_assert_not_null(c);
	for (int it = 0; it < 1500; it++) {
		int rc;
		memcpy(c, buf, len);
		for (int k = 0; k < 1 + it % 3; k++) {
			r = r * 6364136223846793005u + 1442695040888963407u;
			c[12 + (r >> 33) % (len - 20)] = (uint8_t)(r >> 13);
		}
		reseal(c, len);
		oq_diag_init(&d);
		rc = oq_stats_decode(c, len, "f.bin", &t, &d);
		cr_assert(rc == OQ_OK || rc == OQ_EINVAL, "decode returned %d", rc);
		if (rc == OQ_OK) {
			oq_stats u;
			accepted++;
			for (size_t i = 0; i < t.n; i++) {
				const oq_stat *v = &t.v[i];
				for (int abs = 0; abs < 2 && oq_hist_has_bins(&v->h) && v->lo <= v->hi; abs++) {
					oq_hbins b;
					double lo, hi;
					if (oq_hist_view(&v->h, v->lo, v->hi, abs, &b) != OQ_OK)
						continue;
					oq_select_percentile(&b, v->lo, v->hi, 99.9, &lo, &hi);
					rc = abs ? oq_select_entropy(&b, v->lo, v->hi, 128, &lo, &hi) : OQ_OK;
					cr_assert(rc == OQ_OK || rc == OQ_EINVAL);
					rc = oq_select_mse(&b, v->lo, v->hi, OQ_DT_UINT8,
					                   abs ? OQ_QP_SYM_NARROW : OQ_QP_ASYM, &lo, &hi);
					cr_assert_eq(rc, OQ_OK);
					oq_hbins_free(&b);
				}
			}
			/* merging it with a copy of another shard must not crash either */
			handmade(&u, OQ_STATS_HIST, 3);
			u.model_fp = t.model_fp;
			u.n_shards = t.n_shards;
			u.n_total = t.n_total;
			free(u.covered);
			u.covered = calloc(t.n_shards, 1);
			oq_diag_init(&d);
			rc = oq_stats_merge(&t, &u, "u.bin", &d);
			cr_assert(rc == OQ_OK || rc == OQ_EINVAL, "merge returned %d", rc);
			oq_stats_free(&u);
		}
		oq_stats_free(&t);
	}
	cr_expect(accepted > 10 && accepted < 1500, "accepted %d edits", accepted);
	free(c);
	free(buf);
	oq_stats_free(&s);
}

Test(stats, file_errors, .init = setup, .fini = teardown)
{
	oq_stats s;
	oq_diag d;
	FILE *f;

	oq_diag_init(&d);
	cr_expect_eq(oq_stats_read(at("missing.bin"), &s, &d), OQ_EIO);
	cr_expect(strstr(d.msg, "missing.bin") != NULL, "%s", d.msg);
	f = fopen(at("text.bin"), "w");
	fputs("hello world, not statistics", f);
	fclose(f);
	oq_diag_init(&d);
	cr_expect_eq(oq_stats_read(at("text.bin"), &s, &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "not an onnxq statistics file") != NULL, "%s", d.msg);
	oq_diag_init(&d);
	handmade(&s, OQ_STATS_RANGES, 0);
	cr_expect_eq(oq_stats_write(at("nodir/x.bin"), &s, &d), OQ_EIO);
	oq_stats_free(&s);
}

/* ------------------------------------------------------------ merging */

Test(stats, merge_hand)
{
	oq_stats a, b, h1, h2;
	oq_diag d;

	/* ranges: b's lo -1 - shard: min(-1, -4) = -4; n_bad 3 + 3; coverage 0 + 3 */
	handmade(&a, OQ_STATS_RANGES, 0);
	handmade(&b, OQ_STATS_RANGES, 3);
	free(b.v[0].name);
	b.v[0].name = strdup("a0"); /* a record only b has: union */
	b.v[0].lo = -7;
	b.v[0].hi = 8;
	oq_diag_init(&d);
	cr_assert_eq(oq_stats_merge(&a, &b, "b.bin", &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(a.n, 3);
	cr_expect_str_eq(a.v[0].name, "a");
	cr_expect(a.v[0].lo == 1.5 && a.v[0].n_bad == 3);
	cr_expect_str_eq(a.v[1].name, "a0");
	cr_expect(a.v[1].lo == -7 && a.v[1].hi == 8 && a.v[1].n_bad == 3);
	cr_expect_str_eq(a.v[2].name, "b");
	cr_expect(a.v[2].lo == -4 && a.v[2].hi == 3);
	cr_expect(a.covered[0] && !a.covered[1] && !a.covered[2] && a.covered[3]);
	cr_expect_eq(a.n_samples, 20);
	cr_expect_eq(oq_stats_check_complete(&a, "a.bin", &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "stats cover shards 0,3 of 4") && strstr(d.msg, "missing 1,2"),
	          "%s", d.msg);
	oq_stats_free(&b);

	/* histograms: shard 0 at e = 2, shard 1 at e = 3: shard 0's bins halve (bin 100 -> 50,
	 * negative 7 -> 3), then the counts add: bin 0 2 + 3, bin 50 5, bin 100 5, negative 3 and 7
	 * one each; zeros 7 + 7 (and 7 + 7 for a, whose record has no bins); ranges merge too */
	handmade(&h1, OQ_STATS_HIST, 0);
	handmade(&h2, OQ_STATS_HIST, 1);
	oq_diag_init(&d);
	cr_assert_eq(oq_stats_merge(&h1, &h2, "h2.bin", &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(h1.v[1].h.e, 3);
	cr_expect(oq_hist_at(&h1.v[1].h, 0) == 5 && oq_hist_at(&h1.v[1].h, 50) == 5 && oq_hist_at(&h1.v[1].h, 100) == 5 &&
	          oq_hist_at(&h1.v[1].h, OQ_HIST_SIDE + 3) == 1 && oq_hist_at(&h1.v[1].h, OQ_HIST_SIDE + 7) == 1 &&
	          h1.v[1].h.n_zero == 14 && h1.v[0].h.n_zero == 14 && !oq_hist_has_bins(&h1.v[0].h));
	cr_expect(h1.v[1].lo == -2 && h1.v[1].hi == 3);
	oq_stats_free(&h1);
	oq_stats_free(&h2);
	oq_stats_free(&a);
}

static void expect_merge_err(oq_stats *a, oq_stats *b, const char *needle)
{
	oq_diag d;
	oq_diag_init(&d);
	cr_expect_eq(oq_stats_merge(a, b, "b.bin", &d), OQ_EINVAL, "%s: accepted", needle);
	cr_expect(strstr(d.msg, needle) != NULL, "want '%s' in: %s", needle, d.msg);
	snprintf(last_msg, sizeof last_msg, "%s", d.msg);
}

Test(stats, merge_refusals)
{
	oq_stats a, b;

	handmade(&a, OQ_STATS_RANGES, 1);
	handmade(&b, OQ_STATS_RANGES, 1);
	expect_merge_err(&a, &b, "shard 1 of 4 is already");
	oq_stats_free(&b);

	handmade(&b, OQ_STATS_RANGES, 2);
	b.model_fp ^= 1;
	expect_merge_err(&a, &b, "another model");
	oq_stats_free(&b);

	handmade(&b, OQ_STATS_RANGES, 2);
	b.n_shards = 3;
	expect_merge_err(&a, &b, "into 3 shards");
	oq_stats_free(&b);

	handmade(&b, OQ_STATS_RANGES, 2);
	b.n_total = 41;
	expect_merge_err(&a, &b, "41 samples");
	oq_stats_free(&b);

	handmade(&b, OQ_STATS_HIST, 2);
	expect_merge_err(&a, &b, "same --method");
	cr_expect(strstr(last_msg, "histograms") && strstr(last_msg, "ranges only"), "%s", last_msg);
	oq_stats_free(&b);
	oq_stats_free(&a);

	/* counts that would overflow 64 bits */
	handmade(&a, OQ_STATS_HIST, 1);
	handmade(&b, OQ_STATS_HIST, 2);
	cr_assert_not_null(oq_hist_wide_bins(&b.v[1].h, 0));
	b.v[1].h.b64[5] = UINT64_MAX - 10;
	expect_merge_err(&a, &b, "histogram count overflows");
	oq_stats_free(&b);
	oq_stats_free(&a);
}

/* ------------------------------------------------------------ refusals at use */

Test(stats, wrong_model_kind_incomplete, .init = setup, .fini = teardown)
{
	fixture f, g;
	oq_stats rs, s0, hs;
	oq_calib_opts o;
	oq_ranges r, one;
	oq_diag d;

	write_samples();
	build(&f, 1);
	build(&g, 0);
	round_all(&f, OQ_CALIB_MINMAX, 0, 2, &rs);

	/* other model: refused with the fingerprint message */
	o = opts(OQ_CALIB_MINMAX, 0);
	o.source = NULL;
	o.stats = &rs;
	o.stats_name = "rs.bin";
	oq_diag_init(&d);
	cr_expect_eq(oq_calibrate(g.m, &o, &r, &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "rs.bin") && strstr(d.msg, "another model"), "%s", d.msg);

	/* ranges only, method needs histograms */
	o.method = OQ_CALIB_MSE;
	oq_diag_init(&d);
	cr_expect_eq(oq_calibrate(f.m, &o, &r, &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "ranges only") && strstr(d.msg, "--method mse"), "%s", d.msg);

	/* a histogram file serves minmax too: the same ranges */
	round_all(&f, OQ_CALIB_PERCENTILE, 0, 2, &hs);
	o.method = OQ_CALIB_MINMAX;
	o.stats = &hs;
	oq_diag_init(&d);
	cr_assert_eq(oq_calibrate(f.m, &o, &r, &d), OQ_OK, "%s", d.msg);
	one_machine(&f, OQ_CALIB_MINMAX, 0, &one);
	same_ranges(&r, &one, "minmax from histograms");
	oq_ranges_free(&r);
	oq_ranges_free(&one);
	oq_stats_free(&hs);

	/* ema: refused both ways */
	o.method = OQ_CALIB_EMA;
	oq_diag_init(&d);
	cr_expect_eq(oq_calibrate(f.m, &o, &r, &d), OQ_EUSAGE);
	cr_expect(strstr(d.msg, "ema") != NULL, "%s", d.msg);
	o = opts(OQ_CALIB_EMA, 0);
	oq_diag_init(&d);
	cr_expect_eq(oq_calibrate_stats(f.m, &o, &s0, &d), OQ_EUSAGE);

	/* incomplete: shard 0 of 2 only */
	shard(&f, OQ_CALIB_MSE, 0, 0, 2, "only0.bin", &s0);
	o = opts(OQ_CALIB_MSE, 0);
	o.source = NULL;
	o.stats = &s0;
	o.stats_name = "only0.bin";
	oq_diag_init(&d);
	cr_expect_eq(oq_calibrate(f.m, &o, &r, &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "stats cover shards 0 of 2") && strstr(d.msg, "missing 1"), "%s",
	          d.msg);
	/* ranges and histograms do not merge */
	oq_diag_init(&d);
	cr_expect_eq(oq_stats_merge(&s0, &rs, "rs.bin", &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "same --method") != NULL, "%s", d.msg);

	oq_stats_free(&s0);
	oq_stats_free(&rs);
	unbuild(&g);
	unbuild(&f);
}

/* ------------------------------------------------------------ symbolic sizes */

/* x float[1, 2, N, N] -> Relu -> r;  x -> GlobalAveragePool -> g. */
static void build_sym(fixture *f)
{
	oq_diag d;
	Onnx__GraphProto *mg;

	f->g = gen_new(8);
	gen_opset(f->g, "", 13);
	mg = gen_graph(f->g);
	gen_input(f->g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, -1, -1));
	gen_node(f->g, mg, "Relu", "relu", "x", "r");
	gen_node(f->g, mg, "GlobalAveragePool", "gap", "x", "g");
	gen_output(f->g, mg, "r", OQ_DT_FLOAT, GEN_SHAPE(1, 2, -1, -1));
	gen_output(f->g, mg, "g", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 1, 1));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(f->g, &f->m, &d), OQ_OK, "%s", d.msg);
}

/*
 * Samples of spatial size 3, 5, 4 (k = 0, 1, 2): x[i] = (i - 3) (k + 1), i over the 2 s^2
 * elements. By hand: x in [-9 (k=2), 92 (k=1: (49-3)*2)]; Relu [0, 92]; channel means
 * ((c s^2 + (s^2-1)/2) - 3)(k+1): k=0: 1, 10; k=1: 18, 68; k=2: 13.5, 61.5 -> g in [1, 68].
 * One statistic per tensor over all sizes, and the same through shards.
 */
Test(stats, symbolic_spatial_sizes, .init = setup, .fini = teardown)
{
	static const int sz[3] = {3, 5, 4};
	fixture f;
	oq_ranges one, r;
	oq_stats s, hs;
	oq_diag d;
	const oq_range *x;

	cr_assert_eq(mkdir(at("c"), 0700), 0);
	for (int k = 0; k < 3; k++) {
		size_t n = 2 * (size_t)sz[k] * (size_t)sz[k];
		float *v = malloc(n * sizeof *v);
		char rel[32];
		for (size_t i = 0; i < n; i++)
			v[i] = ((float)i - 3) * (float)(k + 1);
		snprintf(rel, sizeof rel, "c/%03d.npy", k);
		oq_diag_init(&d);
		cr_assert_eq(oq_npy_write(at(rel), OQ_DT_FLOAT, 4,
		                          (const int64_t[]){1, 2, sz[k], sz[k]}, v, n * 4, &d),
		             OQ_OK, "%s", d.msg);
		free(v);
	}
	build_sym(&f);
	one_machine(&f, OQ_CALIB_MINMAX, 0, &one);
	cr_assert_eq(one.n, 3);
	x = oq_ranges_find(&one, "x");
	cr_expect(x && x->min == -9.0f && x->max == 92.0f, "x [%g, %g]", x->min, x->max);
	x = oq_ranges_find(&one, "r");
	cr_expect(x && x->min == 0.0f && x->max == 92.0f);
	x = oq_ranges_find(&one, "g");
	cr_expect(x && x->min == 1.0f && x->max == 68.0f, "g [%g, %g]", x->min, x->max);
	round_all(&f, OQ_CALIB_MINMAX, 0, 2, &s);
	ranges_from(&f, OQ_CALIB_MINMAX, 0, &s, &r);
	same_ranges(&r, &one, "symbolic minmax");
	oq_ranges_free(&r);
	oq_ranges_free(&one);
	/* histogram method: the histogram of every tensor spans all sizes */
	one_machine(&f, OQ_CALIB_MSE, 0, &one);
	round_all(&f, OQ_CALIB_MSE, 0, 3, &hs);
	ranges_from(&f, OQ_CALIB_MSE, 0, &hs, &r);
	same_ranges(&r, &one, "symbolic mse");
	oq_ranges_free(&r);
	oq_ranges_free(&one);
	oq_stats_free(&s);
	oq_stats_free(&hs);
	unbuild(&f);
}

/* ------------------------------------------------------------ --calib-batch */

static const char *src_dir(void)
{
	const char *s = getenv("OQ_SOURCE_DIR");
	return s ? s : ".";
}

static void ranges_opts(oq_model *m, const oq_calib_opts *o, oq_ranges *r)
{
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(oq_calibrate(m, o, r, &d), OQ_OK, "%s", d.msg);
}

/* Is value `name` computed by a Gemm/MatMul or downstream of one? */
static int after_gemm(const oq_model *m, const char *name)
{
	const oq_graph *g = m->graph;
	char *mark = calloc(g->n_values, 1);
	int r = 0;
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		int hit = !strcmp(n->op_type, "Gemm") || !strcmp(n->op_type, "MatMul");
		for (size_t k = 0; k < n->n_inputs; k++)
			hit |= n->inputs[k] && n->inputs[k]->graph == g && mark[n->inputs[k]->index];
		for (size_t k = 0; k < n->n_outputs; k++)
			if (n->outputs[k] && n->outputs[k]->graph == g)
				mark[n->outputs[k]->index] = (char)hit;
	}
	for (size_t i = 0; i < g->n_values; i++)
		if (!strcmp(g->values[i]->name, name))
			r = mark[i];
	free(mark);
	return r;
}

/* Distance in float steps between a and b. */
static int64_t ulps(float a, float b)
{
	int32_t x, y;
	memcpy(&x, &a, 4);
	memcpy(&y, &b, 4);
	x = x < 0 ? INT32_MIN - x : x;
	y = y < 0 ? INT32_MIN - y : y;
	return x > y ? (int64_t)x - y : (int64_t)y - x;
}

/*
 * tiny_cnn (Conv, BN, Relu, pooling, Gemm, Softmax; batch dim "batch") on its 16 samples: batches
 * of 3, 5 and 16 give the ranges of one at a time bit for bit for every order-free method, except
 * downstream of the Gemm: OpenBLAS' sgemm rounds a row differently depending on how many rows a
 * call has (measured with OpenBLAS 0.3.21 Haswell: M = 4 differs from M = 1..3 in the last bit),
 * so the Gemm's output (and what follows) may move by a few float steps. There the range ends are
 * held to 4 ulps (measured: 1) for minmax; the histogram methods re-pick from bins.
 */
Test(stats, calib_batch_tiny_cnn)
{
	static const int methods[] = {OQ_CALIB_MINMAX, OQ_CALIB_MSE, OQ_CALIB_PERCENTILE,
	                              OQ_CALIB_ENTROPY};
	static const size_t batches[] = {3, 5, 16};
	char mp[1024], cp[1024];
	oq_model *m;
	oq_diag d;
	size_t exact = 0;

	snprintf(mp, sizeof mp, "%s/models/tiny_cnn.onnx", src_dir());
	snprintf(cp, sizeof cp, "%s/models/tiny_cnn_calib", src_dir());
	oq_diag_init(&d);
	cr_assert_eq(oq_model_load(mp, &m, &d), OQ_OK, "%s", d.msg);
	for (size_t k = 0; k < sizeof methods / sizeof *methods; k++) {
		oq_calib_opts o;
		oq_ranges one;
		memset(&o, 0, sizeof o);
		o.source = cp;
		o.threads = 1;
		o.method = methods[k];
		ranges_opts(m, &o, &one);
		cr_assert_gt(one.n, 10);
		for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) {
			oq_ranges r;
			o.batch = batches[b];
			o.threads = b == 1 ? 2 : 1;
			ranges_opts(m, &o, &r);
			cr_assert_eq(r.n, one.n);
			for (size_t i = 0; i < r.n; i++) {
				const oq_range *a = &r.v[i], *e = &one.v[i];
				cr_assert_str_eq(a->name, e->name);
				if (!after_gemm(m, a->name)) {
					exact++;
					cr_expect(memcmp(&a->min, &e->min, 4) == 0 &&
					              memcmp(&a->max, &e->max, 4) == 0,
					          "%s batch %zu: %s [%.9g, %.9g] vs [%.9g, %.9g]",
					          oq_calib_method_name(methods[k]), batches[b], a->name,
					          a->min, a->max, e->min, e->max);
				} else if (methods[k] == OQ_CALIB_MINMAX) {
					cr_expect(ulps(a->min, e->min) <= 4 && ulps(a->max, e->max) <= 4,
					          "batch %zu: %s [%.9g, %.9g] vs [%.9g, %.9g]", batches[b],
					          a->name, a->min, a->max, e->min, e->max);
				}
			}
			oq_ranges_free(&r);
		}
		oq_ranges_free(&one);
	}
	cr_expect_gt(exact, 4 * 3 * 8, "most tensors compared exactly (%zu)", exact);
	oq_model_free(m);
}

/* x float[B, 2] -> Relu -> r; x -> Neg -> n (B symbolic; fixed 1 when fixed). */
static void build_batch(fixture *f, int fixed)
{
	oq_diag d;
	Onnx__GraphProto *mg;

	f->g = gen_new(8);
	gen_opset(f->g, "", 13);
	mg = gen_graph(f->g);
	gen_input(f->g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(fixed ? 1 : -1, 2));
	gen_node(f->g, mg, "Relu", "relu", "x", "r");
	gen_node(f->g, mg, "Neg", "neg", "x", "n");
	gen_output(f->g, mg, "r", OQ_DT_FLOAT, GEN_SHAPE(fixed ? 1 : -1, 2));
	gen_output(f->g, mg, "n", OQ_DT_FLOAT, GEN_SHAPE(fixed ? 1 : -1, 2));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(f->g, &f->m, &d), OQ_OK, "%s", d.msg);
}

/* Samples i = 0..3: x = [[i, -i]]. ema (c = 0.5) updates once per run, so by hand:
 *   one at a time: lo 0 -> -0.5 -> -1.25 -> -2.125 (max alike, mirrored);
 *   batches of 2 ({0,1}, {2,3}: [-1, 1], [-3, 3]): lo -1 -> -1 + 0.5 (-3 + 1) = -2.
 * minmax is [-3, 3] either way. A fixed batch dim is a usage error naming the input. */
Test(stats, calib_batch_ema_and_fixed, .init = setup, .fini = teardown)
{
	fixture f, g;
	oq_calib_opts o;
	oq_ranges r;
	oq_diag d;
	const oq_range *x;

	cr_assert_eq(mkdir(at("c"), 0700), 0);
	for (int i = 0; i < 4; i++) {
		float v[2] = {(float)i, -(float)i};
		char rel[32];
		snprintf(rel, sizeof rel, "c/%03d.npy", i);
		oq_diag_init(&d);
		cr_assert_eq(oq_npy_write(at(rel), OQ_DT_FLOAT, 2, (const int64_t[]){1, 2}, v, 8, &d),
		             OQ_OK, "%s", d.msg);
	}
	build_batch(&f, 0);
	o = opts(OQ_CALIB_EMA, 0);
	o.ema_constant = 0.5;
	ranges_opts(f.m, &o, &r);
	x = oq_ranges_find(&r, "x");
	cr_expect(x && x->min == -2.125f && x->max == 2.125f, "x [%g, %g]", x->min, x->max);
	oq_ranges_free(&r);
	o.batch = 2;
	ranges_opts(f.m, &o, &r);
	x = oq_ranges_find(&r, "x");
	cr_expect(x && x->min == -2.0f && x->max == 2.0f, "x [%g, %g]", x->min, x->max);
	oq_ranges_free(&r);
	o = opts(OQ_CALIB_MINMAX, 0);
	o.batch = 3; /* 3 + 1 */
	ranges_opts(f.m, &o, &r);
	x = oq_ranges_find(&r, "n");
	cr_expect(x && x->min == -3.0f && x->max == 3.0f);
	oq_ranges_free(&r);

	build_batch(&g, 1);
	o.batch = 2;
	oq_diag_init(&d);
	cr_expect_eq(oq_calibrate(g.m, &o, &r, &d), OQ_EUSAGE);
	cr_expect(strstr(d.msg, "'x'") && strstr(d.msg, "fixed batch dimension"), "%s", d.msg);
	unbuild(&g);
	unbuild(&f);
}

/* Different spatial sizes with batching: a batch closes when the shape changes (sizes 3, 3, 5, 4,
 * 4, 4 with batch 2 run as {3,3} {5} {4,4} {4}); ranges equal one at a time. */
Test(stats, calib_batch_symbolic_sizes, .init = setup, .fini = teardown)
{
	static const int sz[6] = {3, 3, 5, 4, 4, 4};
	fixture f;
	oq_diag d;
	Onnx__GraphProto *mg;
	oq_calib_opts o;
	oq_ranges one, r;

	cr_assert_eq(mkdir(at("c"), 0700), 0);
	for (int k = 0; k < 6; k++) {
		size_t n = 2 * (size_t)sz[k] * (size_t)sz[k];
		float *v = malloc(n * sizeof *v);
		char rel[32];
		for (size_t i = 0; i < n; i++)
			v[i] = ((float)i - 3) * (float)(k + 1) / 7;
		snprintf(rel, sizeof rel, "c/%03d.npy", k);
		oq_diag_init(&d);
		cr_assert_eq(oq_npy_write(at(rel), OQ_DT_FLOAT, 4,
		                          (const int64_t[]){1, 2, sz[k], sz[k]}, v, n * 4, &d),
		             OQ_OK, "%s", d.msg);
		free(v);
	}
	f.g = gen_new(8);
	gen_opset(f.g, "", 13);
	mg = gen_graph(f.g);
	gen_input(f.g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(-1, 2, -1, -1));
	mg->input[0]->type->tensor_type->shape->dim[0]->dim_param = "B"; /* batch apart from H, W */
	gen_node(f.g, mg, "Relu", "relu", "x", "r");
	gen_node(f.g, mg, "GlobalAveragePool", "gap", "x", "g");
	gen_output(f.g, mg, "g", OQ_DT_FLOAT, GEN_SHAPE(-1, 2, 1, 1));
	mg->output[0]->type->tensor_type->shape->dim[0]->dim_param = "B";
	oq_diag_init(&d);
	cr_assert_eq(gen_load(f.g, &f.m, &d), OQ_OK, "%s", d.msg);
	for (int method = OQ_CALIB_MINMAX; method <= OQ_CALIB_MSE; method += OQ_CALIB_MSE) {
		o = opts(method, 0);
		ranges_opts(f.m, &o, &one);
		cr_assert_eq(one.n, 3);
		o.batch = 2;
		ranges_opts(f.m, &o, &r);
		same_ranges(&r, &one, "batched sizes");
		oq_ranges_free(&r);
		oq_ranges_free(&one);
	}
	unbuild(&f);
}

/* ------------------------------------------------------------ the parallel scan */

#define BIGN (5 * 65536 + 4321) /* past calibrate.c's parallel threshold, a short last chunk */

/*
 * x float[1, BIGN] -> Relu -> r;  x -> Neg -> n: tensors large enough that calibration scans
 * them in chunks over the pool's threads, each worker's chunks into its own histogram on the
 * tensor's grid, added after (magnitudes here jump by 2^3 every 40000 elements, so the chunks'
 * own extremes differ from the tensor's). The statistics at 1, 2 and 3 threads must equal the value-by-value reference
 * (oq_hist_add_f32_ref, the exact min/max, the NaN/Inf count) over both samples, bit for bit.
 */
Test(stats, parallel_scan_matches_reference, .init = setup, .fini = teardown)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	oq_model *m;
	oq_diag d;
	float *v = malloc(BIGN * sizeof *v);
	oq_hist ref[3]; /* x, r, n */
	double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
	uint64_t bad = 0, s = 99;
	const char *names[3] = {"x", "r", "n"};

	cr_assert_not_null(v);
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, BIGN));
	gen_node(g, mg, "Relu", "relu", "x", "r");
	gen_node(g, mg, "Neg", "neg", "x", "n");
	gen_output(g, mg, "r", OQ_DT_FLOAT, GEN_SHAPE(1, BIGN));
	gen_output(g, mg, "n", OQ_DT_FLOAT, GEN_SHAPE(1, BIGN));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	for (int t = 0; t < 3; t++)
		oq_hist_init(&ref[t]);
	cr_assert_eq(mkdir(at("c"), 0700), 0);
	for (int i = 0; i < 2; i++) {
		char rel[32];
		for (size_t k = 0; k < BIGN; k++) {
			s = s * 6364136223846793005u + 1442695040888963407u;
			double u = (double)(s >> 11) / 9007199254740992.0; /* [0, 1) */
			float x = (float)ldexp(u - 0.3, (int)(k / 40000) * 3 - 9 + i);
			x = k % 7 == 0 ? 0.0f : k % 11 == 0 ? -0.0f : x;
			x = k == 123457 + (size_t)i ? NAN : k == 300001 && i ? -INFINITY : x;
			v[k] = x;
			/* the references: x, Relu(x) (NaN stays NaN, -0 and negatives -> +0) and -x */
			const float y[3] = {x, isnan(x) ? x : x > 0 ? x : 0.0f, -x};
			for (int t = 0; t < 3; t++) {
				cr_assert_eq(oq_hist_add_f32_ref(&ref[t], &y[t], 1), OQ_OK);
				if (isfinite(y[t])) {
					lo[t] = y[t] + 0.0f < lo[t] ? y[t] + 0.0f : lo[t];
					hi[t] = y[t] + 0.0f > hi[t] ? y[t] + 0.0f : hi[t];
				}
			}
			bad += !isfinite(x);
		}
		snprintf(rel, sizeof rel, "c/%03d.npy", i);
		cr_assert_eq(oq_npy_write(at(rel), OQ_DT_FLOAT, 2, (const int64_t[]){1, BIGN}, v,
		                          BIGN * sizeof *v, &d),
		             OQ_OK, "%s", d.msg);
	}
	cr_assert_eq(bad, 3);
	for (int threads = 1; threads <= 3; threads++) {
		oq_calib_opts o = opts(OQ_CALIB_MSE, 0);
		oq_stats st;
		o.threads = threads;
		oq_diag_init(&d);
		cr_assert_eq(oq_calibrate_stats(m, &o, &st, &d), OQ_OK, "%s", d.msg);
		for (int t = 0; t < 3; t++) {
			const oq_stat *x = NULL;
			for (size_t i = 0; i < st.n; i++)
				if (!strcmp(st.v[i].name, names[t]))
					x = &st.v[i];
			cr_assert_not_null(x, "no record for %s", names[t]);
			cr_assert(oq_hist_has_bins(&x->h));
			cr_expect(x->lo == lo[t] && x->hi == hi[t],
			          "%d threads, %s: [%a, %a], expected [%a, %a]", threads, names[t], x->lo,
			          x->hi, lo[t], hi[t]);
			/* Relu keeps the two NaNs and makes the -Inf 0, Neg keeps all three */
			cr_expect_eq(x->n_bad, t == 1 ? 2u : 3u, "%d threads, %s: %llu bad", threads,
			             names[t], (unsigned long long)x->n_bad);
			cr_expect_eq(x->h.e, ref[t].e, "%d threads, %s: e %d, reference %d", threads,
			             names[t], x->h.e, ref[t].e);
			cr_expect_eq(x->h.n_zero, ref[t].n_zero, "%d threads, %s: zeros", threads, names[t]);
			cr_expect(same_bins(&x->h, &ref[t]),
			          "%d threads, %s: the bins differ from the reference", threads, names[t]);
		}
		oq_stats_free(&st);
	}
	for (int t = 0; t < 3; t++)
		oq_hist_free(&ref[t]);
	free(v);
	oq_model_free(m);
	gen_free(g);
}
