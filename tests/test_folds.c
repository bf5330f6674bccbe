/*
 * test_folds.c - held-out folds of the calibration samples and --method auto
 * (calib/folds.c, and the fold paths of calib/calibrate.c and
 * calib/stats_file.c).
 *
 * Expected numbers are hand-computed: fold blocks of the split formula, the
 * per-fold min/max and bin counts of eight hand-written samples (which also
 * show a --calib-batch closing at a fold boundary: a batch across it would
 * move a sample's values into the wrong fold), and --method auto's pick on
 * hand-made folds whose held-out errors are dominated by clipping that can
 * be worked out by hand. The per-fold histograms must add up, bin for bin,
 * to the histogram the single-histogram path (--method mse) fills from the
 * same samples. Sharded runs, thread counts, sample lanes and batches must
 * give the one-machine ranges bit for bit.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib/calibrate.h"
#include "calib/folds.h"
#include "calib/stats_file.h"
#include "gen_model.h"
#include "src/io/npy.h"
#include "src/quant/qparams.h"
#include "tmpdir.h"

/* ------------------------------------------------------------ fold blocks */

Test(folds, blocks_by_hand)
{
	static const size_t of10[10] = {0, 0, 1, 1, 1, 2, 2, 3, 3, 3};

	/* fewer than 2k samples: at least two a fold; one sample: none */
	cr_expect_eq(oq_folds_count(0, 16), 4);
	cr_expect_eq(oq_folds_count(8, 16), 8);
	cr_expect_eq(oq_folds_count(4, 8), 4);
	cr_expect_eq(oq_folds_count(4, 7), 3);
	cr_expect_eq(oq_folds_count(4, 4), 2);
	cr_expect_eq(oq_folds_count(4, 3), 2);
	cr_expect_eq(oq_folds_count(4, 2), 2);
	cr_expect_eq(oq_folds_count(4, 1), 1);
	/* 10 samples, 4 folds: floor(10 f / 4) = 0, 2, 5, 7 */
	cr_expect(oq_folds_begin(0, 10, 4) == 0 && oq_folds_begin(1, 10, 4) == 2 &&
	          oq_folds_begin(2, 10, 4) == 5 && oq_folds_begin(3, 10, 4) == 7 &&
	          oq_folds_begin(4, 10, 4) == 10);
	for (size_t i = 0; i < 10; i++)
		cr_expect_eq(oq_folds_of(i, 10, 4), of10[i], "sample %zu", i);
	/* no overflow: 2^64 - 1 = 3 x 6148914691236517205 */
	if (sizeof(size_t) == 8) {
		cr_expect_eq(oq_folds_begin(1, SIZE_MAX, 3), (size_t)6148914691236517205u);
		cr_expect_eq(oq_folds_begin(2, SIZE_MAX, 3), (size_t)12297829382473034410u);
		cr_expect_eq(oq_folds_of(SIZE_MAX - 1, SIZE_MAX, 3), 2);
	}
}

/* ------------------------------------------------------------ auto on hand-made folds */

/* h = the histogram of n1 values a and n2 values b (the reference fill). */
static void two_values(oq_hist *h, float a, size_t n1, float b, size_t n2)
{
	float *p = malloc((n1 + n2) * sizeof *p);
	cr_assert_not_null(p);
	for (size_t i = 0; i < n1 + n2; i++)
		p[i] = i < n1 ? a : b;
	oq_hist_init(h);
	cr_assert_eq(oq_hist_add_f32_ref(h, p, n1 + n2), OQ_OK);
	free(p);
}

/*
 * Folds 0..2 hold 100 values 0.5 and 100 values 1.0, fold 3 100 values 0.5 and 100 values 1.8, on
 * a uint16 grid (asymmetric). Every base method gives the data's own range here (two point
 * masses: mse gains nothing by clipping one, the percentiles cut less than one value; entropy is
 * no candidate on 16 bits). Fold 3 held out: the others' range is [0.5, 1] and widening by w
 * clips the 100 values at 1.8 to w. The error model spreads them evenly over their bin (e = 1,
 * width 1/2048, bin floor(1.8 * 2048) = 3686, centre c = 3686.5 / 2048), so clipping costs
 * 100 ((c - w)^2 + (1/2048)^2 / 12), counted OQ_AUTO_CLIP_WEIGHT times: 4 x about 64, 49,
 * 30.25, 9 for w = 1, 1.1, 1.25, 1.5, and 0 for w = 2. Folds 0..2 held out: the others reach 1.8, nothing is clipped, and the rounding
 * error of a step of 3.6 / 65535 is below 1e-6 in all. So x2 wins, with minmax (the first of
 * the tied bases), and its range from all folds is [0.5, 3.6]. Fold 3 exceeded the others' max
 * by (1.8 - 1) / 1 = 80 %.
 */
Test(folds, auto_widens_where_a_held_out_fold_exceeds)
{
	oq_hist h[4];
	oq_fold f[4];
	oq_auto a;

	for (int k = 0; k < 4; k++) {
		two_values(&h[k], 0.5f, 100, k == 3 ? 1.8f : 1.0f, 100);
		f[k].lo = 0.5;
		f[k].hi = k == 3 ? (double)1.8f : 1.0;
		f[k].h = &h[k];
	}
	cr_assert_eq(oq_auto_select(f, 4, OQ_DT_UINT16, OQ_QP_ASYM, 0, &a), OQ_OK);
	cr_expect_eq(a.folds, 4);
	cr_expect_eq(a.widen, 4, "x%g", oq_auto_widen[a.widen]);
	cr_expect_eq(a.base, OQ_AUTO_MINMAX, "%s", oq_auto_base_name(a.base));
	cr_expect(a.lo == 0.5 && a.hi == 2 * (double)1.8f, "[%.9g, %.9g]", a.lo, a.hi);
	cr_expect(fabs(a.exceed - ((double)1.8f - 1)) < 1e-12, "exceed %g", a.exceed);
	/* the clipping errors by hand (plus the rounding, below 1e-6) */
	{
		double c = 3686.5 / 2048, bw = 1.0 / 2048;
		for (int w = 0; w < 4; w++) {
			double g = oq_auto_widen[w];
			double want = OQ_AUTO_CLIP_WEIGHT * 100 * ((c - g) * (c - g) + bw * bw / 12);
			cr_expect(fabs(a.err[OQ_AUTO_MINMAX][w] - want) < 1e-3, "x%g: %.9g, by hand %.9g",
			          g, a.err[OQ_AUTO_MINMAX][w], want);
		}
		cr_expect_lt(a.err[OQ_AUTO_MINMAX][4], 1e-3, "%g", a.err[OQ_AUTO_MINMAX][4]);
	}
	for (int w = 0; w < OQ_AUTO_WIDEN; w++)
		cr_expect(isinf(a.err[OQ_AUTO_ENTROPY][w]), "entropy is no candidate on 16 bits");
	/* an 8-bit grid has entropy among the candidates */
	cr_assert_eq(oq_auto_select(f, 4, OQ_DT_UINT8, OQ_QP_ASYM, 128, &a), OQ_OK);
	cr_expect(isfinite(a.err[OQ_AUTO_ENTROPY][0]));
	for (int k = 0; k < 4; k++)
		oq_hist_free(&h[k]);
}

/* k folds f[k] holding the same n values v (histograms h[k], filled by the reference fill). */
static void equal_folds(oq_hist *h, oq_fold *f, int k, const float *v, size_t n, double lo,
                        double hi)
{
	for (int q = 0; q < k; q++) {
		oq_hist_init(&h[q]);
		cr_assert_eq(oq_hist_add_f32_ref(&h[q], v, n), OQ_OK);
		f[q].lo = lo;
		f[q].hi = hi;
		f[q].h = &h[q];
	}
}

/*
 * Equal folds: no held-out fold exceeds the others, so widening only adds rounding error (about
 * n s^2 / 12, growing with the step s): x1, exceed 0, and each wider candidate costs more than
 * the one before. (a) 1025 evenly spread values i / 1024 on a uint8 grid. (b) 100 values 0.5 and
 * 1000 values 1.0 on a uint16 grid, the max a point mass (a saturated activation): the bins the
 * error model reads reach past 1.0, and a range ending at 1.0 must not be charged for clipping
 * them (it would be, 1000 (w/2)^2 / 3 with w = 1/2048, far more than the rounding that widening
 * adds at 16 bits); all bases agree on [0.5, 1], so minmax keeps it.
 */
Test(folds, auto_keeps_the_range_when_the_folds_agree)
{
	oq_hist h[4];
	oq_fold f[4];
	oq_auto a;
	float v[1100];

	for (int i = 0; i <= 1024; i++)
		v[i] = (float)i / 1024;
	equal_folds(h, f, 4, v, 1025, 0, 1);
	cr_assert_eq(oq_auto_select(f, 4, OQ_DT_UINT8, OQ_QP_ASYM, 128, &a), OQ_OK);
	cr_expect(a.folds == 4 && a.widen == 0 && a.exceed == 0, "x%g exceed %g",
	          oq_auto_widen[a.widen], a.exceed);
	cr_expect(a.lo >= 0 && a.hi <= 1.0, "[%g, %g]", a.lo, a.hi);
	for (int w = 1; w < OQ_AUTO_WIDEN; w++)
		cr_expect_gt(a.err[a.base][w], a.err[a.base][w - 1], "wider rounds coarser");
	for (int k = 0; k < 4; k++)
		oq_hist_free(&h[k]);

	for (int i = 0; i < 1100; i++)
		v[i] = i < 100 ? 0.5f : 1.0f;
	equal_folds(h, f, 4, v, 1100, 0.5, 1);
	cr_assert_eq(oq_auto_select(f, 4, OQ_DT_UINT16, OQ_QP_ASYM, 0, &a), OQ_OK);
	cr_expect(a.widen == 0 && a.base == OQ_AUTO_MINMAX && a.lo == 0.5 && a.hi == 1.0,
	          "%s x%g [%g, %g]", oq_auto_base_name(a.base), oq_auto_widen[a.widen], a.lo, a.hi);
	for (int w = 1; w < OQ_AUTO_WIDEN; w++)
		cr_expect_gt(a.err[OQ_AUTO_MINMAX][w], a.err[OQ_AUTO_MINMAX][w - 1], "x%g",
		             oq_auto_widen[w]);
	for (int k = 0; k < 4; k++)
		oq_hist_free(&h[k]);
}

/* All values in one fold (the others only zeros): no fold can measure, and the pick is what
 * --method mse gives for all values (on a mirrored grid: int8 symmetric). */
Test(folds, auto_unmeasured_is_mse)
{
	oq_hist h[3];
	oq_fold f[3];
	oq_auto a;

	two_values(&h[0], -1.0f, 10, 2.0f, 10);
	f[0].lo = -1;
	f[0].hi = 2;
	f[0].h = &h[0];
	for (int k = 1; k < 3; k++) {
		two_values(&h[k], 0.0f, 5, 0.0f, 5);
		f[k].lo = f[k].hi = 0;
		f[k].h = &h[k];
	}
	cr_assert_eq(oq_auto_select(f, 3, OQ_DT_INT8, OQ_QP_SYM_NARROW, 128, &a), OQ_OK);
	cr_expect(a.folds == 0 && a.base == OQ_AUTO_MSE && a.widen == 0);
	{
		double lo, hi;
		cr_assert_eq(oq_select_range(&h[0], -1, 2, OQ_CALIB_MSE, OQ_DT_INT8, OQ_QP_SYM_NARROW,
		                             0, 0, &lo, &hi),
		             OQ_OK);
		cr_expect(a.lo == lo && a.hi == hi, "[%g, %g] vs mse [%g, %g]", a.lo, a.hi, lo, hi);
	}
	for (int k = 0; k < 3; k++)
		oq_hist_free(&h[k]);
}

/* ------------------------------------------------------------ through calibrate */

static void setup(void)
{
	cr_assert_not_null(tmpdir_make("oq_folds"));
}

static void teardown(void)
{
	tmpdir_remove();
}

#define at tmpdir_at

typedef struct fixture {
	gen_model *g;
	oq_model *m;
} fixture;

/* x float[B, 2] -> Relu -> r; x -> Neg -> n (B symbolic: batches may form). */
static void build(fixture *f)
{
	oq_diag d;
	Onnx__GraphProto *mg;

	f->g = gen_new(8);
	gen_opset(f->g, "", 13);
	mg = gen_graph(f->g);
	gen_input(f->g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(-1, 2));
	gen_node(f->g, mg, "Relu", "relu", "x", "r");
	gen_node(f->g, mg, "Neg", "neg", "x", "n");
	gen_output(f->g, mg, "r", OQ_DT_FLOAT, GEN_SHAPE(-1, 2));
	gen_output(f->g, mg, "n", OQ_DT_FLOAT, GEN_SHAPE(-1, 2));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(f->g, &f->m, &d), OQ_OK, "%s", d.msg);
}

static void unbuild(fixture *f)
{
	oq_model_free(f->m);
	gen_free(f->g);
}

/* n samples into folder rel: sample i is x = [[i + 1, -(i + 1) / 2]]. With 8 samples and 4 folds,
 * fold f holds samples 2f and 2f + 1: x in [-(f + 1), 2f + 2], r = Relu(x) in [0, 2f + 2] with 2
 * zeros, n = Neg(x) in [-(2f + 2), f + 1]. */
static void write_samples(const char *rel, int n)
{
	oq_diag d;
	char p[64];

	cr_assert_eq(mkdir(at(rel), 0700), 0);
	for (int i = 0; i < n; i++) {
		float v[2] = {(float)(i + 1), -(float)(i + 1) / 2};
		snprintf(p, sizeof p, "%s/%03d.npy", rel, i);
		oq_diag_init(&d);
		cr_assert_eq(oq_npy_write(at(p), OQ_DT_FLOAT, 2, (const int64_t[]){1, 2}, v, 8, &d),
		             OQ_OK, "%s", d.msg);
	}
}

static oq_calib_opts opts(int method)
{
	static char src[512]; /* at() reuses its buffer */
	oq_calib_opts o;
	memset(&o, 0, sizeof o);
	snprintf(src, sizeof src, "%s", at("c"));
	o.source = src;
	o.threads = 1;
	o.method = method;
	return o;
}

static const oq_stat *record(const oq_stats *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i].name, name))
			return &s->v[i];
	cr_assert_fail("no record of %s", name);
	return NULL;
}

/* Whether a and b hold the same counts (either may be 32- or 64-bit). */
static int same_bins(const oq_hist *a, const oq_hist *b)
{
	for (size_t k = 0; k < 2 * (size_t)OQ_HIST_SIDE; k++)
		if (oq_hist_at(a, k) != oq_hist_at(b, k))
			return 0;
	return 1;
}

static uint64_t in_bins(const oq_hist *h)
{
	uint64_t t = 0;
	for (size_t k = 0; k < 2 * (size_t)OQ_HIST_SIDE; k++)
		t += oq_hist_at(h, k);
	return t;
}

/* The per-fold statistics of the 8 samples by hand, and their merge against `whole` (a single-
 * histogram file of the same samples), bin for bin. */
static void expect_folds(const oq_stats *s, const oq_stats *whole, const char *what)
{
	static const char *const names[3] = {"x", "r", "n"};

	cr_assert_eq(s->n_folds, 4, "%s", what);
	for (int t = 0; t < 3; t++) {
		const oq_stat *r = record(s, names[t]), *w = record(whole, names[t]);
		oq_hist sum;
		oq_hist_init(&sum);
		cr_assert_not_null(r->fold, "%s: %s", what, names[t]);
		for (int f = 0; f < 4; f++) {
			const oq_stat_fold *x = &r->fold[f];
			double lo = t == 0 ? -(f + 1) : t == 1 ? 0 : -(2 * f + 2);
			double hi = t == 0 ? 2 * f + 2 : t == 1 ? 2 * f + 2 : f + 1;
			cr_expect(x->lo == lo && x->hi == hi && x->n_bad == 0,
			          "%s: %s fold %d: [%g, %g], by hand [%g, %g]", what, names[t], f, x->lo,
			          x->hi, lo, hi);
			cr_expect_eq(in_bins(&x->h), t == 1 ? 2 : 4, "%s: %s fold %d", what, names[t], f);
			cr_expect_eq(x->h.n_zero, t == 1 ? 2 : 0, "%s: %s fold %d", what, names[t], f);
			cr_assert_eq(oq_hist_merge(&sum, &x->h), OQ_OK);
		}
		/* the folds add up to what one histogram of all samples holds */
		cr_expect(r->lo == w->lo && r->hi == w->hi && r->n_bad == w->n_bad, "%s: %s", what,
		          names[t]);
		cr_expect(sum.e == w->h.e && sum.n_zero == w->h.n_zero && r->h.e == w->h.e &&
		              r->h.n_zero == w->h.n_zero,
		          "%s: %s", what, names[t]);
		cr_expect(same_bins(&sum, &w->h) && same_bins(&r->h, &w->h),
		          "%s: %s: the folds do not add up to the whole histogram", what, names[t]);
		oq_hist_free(&sum);
	}
}

static void stats_of(fixture *f, const oq_calib_opts *o, oq_stats *s)
{
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(oq_calibrate_stats(f->m, o, s, &d), OQ_OK, "%s", d.msg);
}

/* Threads 1..3 (sample lanes from 2), --calib-batch 3 (batches {0, 1} {2, 3} ... close at the
 * fold boundaries: a batch {0, 1, 2} would put sample 2's 3 into fold 0), lanes off. */
Test(folds, per_fold_statistics_by_hand, .init = setup, .fini = teardown)
{
	fixture f;
	oq_stats whole;
	oq_calib_opts o;

	write_samples("c", 8);
	build(&f);
	o = opts(OQ_CALIB_MSE);
	stats_of(&f, &o, &whole);
	cr_expect_eq(whole.n_folds, 0, "mse keeps no folds");
	for (int run = 0; run < 5; run++) {
		oq_stats s;
		char what[48];
		o = opts(OQ_CALIB_AUTO);
		o.threads = run < 3 ? run + 1 : 2;
		o.batch = run == 3 ? 3 : 0;
		oq_calib_lanes = run == 4 ? 0 : -1;
		snprintf(what, sizeof what, "threads %d batch %zu lanes %d", o.threads, o.batch,
		         oq_calib_lanes);
		stats_of(&f, &o, &s);
		expect_folds(&s, &whole, what);
		oq_stats_free(&s);
	}
	oq_calib_lanes = -1;
	oq_stats_free(&whole);
	unbuild(&f);
}

static void ranges(fixture *f, const oq_calib_opts *o, oq_ranges *r)
{
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(oq_calibrate(f->m, o, r, &d), OQ_OK, "%s", d.msg);
}

static void same_ranges(const oq_ranges *a, const oq_ranges *b, const char *what)
{
	cr_assert_eq(a->n, b->n, "%s", what);
	for (size_t i = 0; i < a->n; i++) {
		cr_assert_str_eq(a->v[i].name, b->v[i].name);
		cr_expect(memcmp(&a->v[i].min, &b->v[i].min, sizeof(float)) == 0 &&
		              memcmp(&a->v[i].max, &b->v[i].max, sizeof(float)) == 0,
		          "%s: %s [%.9g, %.9g] vs [%.9g, %.9g]", what, a->v[i].name, a->v[i].min,
		          a->v[i].max, b->v[i].min, b->v[i].max);
	}
}

/* One machine at 1 thread is the reference; 2 and 3 threads (lanes), lanes off, batches of 3,
 * and N = 1..5 shards through files merged in reverse order give the same ranges, bit for bit,
 * also on an int16 grid. The control: the held-out folds change the pick, so auto differs
 * from mse on these samples. */
Test(folds, auto_ranges_whatever_the_threads_batches_and_shards, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges ref, r, mse;
	oq_calib_opts o;

	write_samples("c", 8);
	build(&f);
	for (int g = 0; g < 2; g++) {
		o = opts(OQ_CALIB_AUTO);
		o.act_type = g ? OQ_DT_INT16 : 0;
		ranges(&f, &o, &ref);
		for (int run = 0; run < 4; run++) {
			o.threads = run < 2 ? run + 2 : 2;
			o.batch = run == 3 ? 3 : 0;
			oq_calib_lanes = run == 2 ? 0 : -1;
			ranges(&f, &o, &r);
			same_ranges(&ref, &r, "threads / lanes / batch");
			oq_ranges_free(&r);
		}
		oq_calib_lanes = -1;
		o.threads = 1;
		o.batch = 0;
		for (uint32_t n = 1; n <= 5; n++) {
			oq_stats acc, s;
			oq_diag d;
			oq_calib_opts q = o;
			for (uint32_t k = n; k-- > 0;) {
				char rel[32];
				q.shard = k;
				q.n_shards = n;
				stats_of(&f, &q, &s);
				snprintf(rel, sizeof rel, "s%u.bin", k);
				oq_diag_init(&d);
				cr_assert_eq(oq_stats_write(at(rel), &s, &d), OQ_OK, "%s", d.msg);
				oq_stats_free(&s);
				cr_assert_eq(oq_stats_read(at(rel), k == n - 1 ? &acc : &s, &d), OQ_OK,
				             "%s", d.msg);
				if (k != n - 1) {
					cr_assert_eq(oq_stats_merge(&acc, &s, rel, &d), OQ_OK, "%s", d.msg);
					oq_stats_free(&s);
				}
			}
			q = o;
			q.source = NULL;
			q.stats = &acc;
			ranges(&f, &q, &r);
			same_ranges(&ref, &r, "shards");
			oq_ranges_free(&r);
			oq_stats_free(&acc);
		}
		o = opts(OQ_CALIB_MSE);
		o.act_type = g ? OQ_DT_INT16 : 0;
		ranges(&f, &o, &mse);
		{
			const oq_range *a = oq_ranges_find(&ref, "x"), *b = oq_ranges_find(&mse, "x");
			cr_expect(a && b && a->max > b->max, "auto widens x: %g vs mse %g", a->max, b->max);
		}
		oq_ranges_free(&mse);
		oq_ranges_free(&ref);
	}
	unbuild(&f);
}

/* The grid of value x is int16, every other value's the default (uint8). */
static int x_on_int16(void *ctx, const oq_value *v, int *dtype, int *act_sym, oq_diag *d)
{
	(void)ctx;
	(void)act_sym;
	(void)d;
	if (!strcmp(v->name, "x"))
		*dtype = OQ_DT_INT16;
	return OQ_OK;
}

static void expect_range_of(const oq_ranges *got, const oq_ranges *want, const char *name, const char *what)
{
	const oq_range *a = oq_ranges_find(got, name), *b = oq_ranges_find(want, name);
	cr_assert(a && b, "%s: %s", what, name);
	cr_expect(memcmp(&a->min, &b->min, sizeof(float)) == 0 && memcmp(&a->max, &b->max, sizeof(float)) == 0,
	          "%s: %s [%.9g, %.9g], want [%.9g, %.9g]", what, name, a->min, a->max, b->min, b->max);
}

/* wide_auto (the default method of an 8-bit quantize): the one tensor on a 16-bit grid takes
 * --method auto's range (as a run with --method auto on an int16 grid gives it), the 8-bit ones
 * keep mse's; without folds (no folds_out) x keeps mse's int16 range too. The control: on these
 * samples auto widens x beyond mse (the previous test), so the routing is visible. */
Test(folds, wide_auto_routes_16_bit_grids_to_auto, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges got, auto16, mse8, mse16;
	oq_stats fo;
	oq_calib_opts o;

	write_samples("c", 8);
	build(&f);
	o = opts(OQ_CALIB_AUTO);
	o.act_type = OQ_DT_INT16;
	ranges(&f, &o, &auto16);
	o = opts(OQ_CALIB_MSE);
	o.act_type = OQ_DT_INT16;
	ranges(&f, &o, &mse16);
	o = opts(OQ_CALIB_MSE);
	ranges(&f, &o, &mse8);
	{
		const oq_range *a = oq_ranges_find(&auto16, "x"), *b = oq_ranges_find(&mse16, "x");
		cr_assert(a && b && a->max != b->max, "control: auto and mse agree on x");
	}

	o = opts(OQ_CALIB_MSE);
	o.grid = x_on_int16;
	o.wide_auto = 1;
	memset(&fo, 0, sizeof fo);
	o.folds_out = &fo;
	ranges(&f, &o, &got);
	expect_range_of(&got, &auto16, "x", "wide_auto with folds");
	expect_range_of(&got, &mse8, "r", "wide_auto with folds");
	expect_range_of(&got, &mse8, "n", "wide_auto with folds");
	oq_ranges_free(&got);
	oq_stats_free(&fo);

	o.folds_out = NULL;
	ranges(&f, &o, &got);
	expect_range_of(&got, &mse16, "x", "wide_auto without folds");
	oq_ranges_free(&got);

	oq_ranges_free(&auto16);
	oq_ranges_free(&mse16);
	oq_ranges_free(&mse8);
	unbuild(&f);
}

/* quantize --stats --method auto: a file without folds, or of another fold count, is refused
 * naming the fix; a folds file serves the other methods as a plain histogram file does. */
Test(folds, stats_files_without_or_with_other_folds, .init = setup, .fini = teardown)
{
	fixture f;
	oq_stats s;
	oq_ranges r, want;
	oq_calib_opts o;
	oq_diag d;

	write_samples("c", 8);
	build(&f);
	o = opts(OQ_CALIB_MSE);
	stats_of(&f, &o, &s);
	o = opts(OQ_CALIB_AUTO);
	o.source = NULL;
	o.stats = &s;
	oq_diag_init(&d);
	cr_expect_eq(oq_calibrate(f.m, &o, &r, &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "0 folds") && strstr(d.msg, "--method auto"), "%s", d.msg);
	oq_stats_free(&s);

	o = opts(OQ_CALIB_AUTO);
	o.folds = 2;
	stats_of(&f, &o, &s);
	cr_expect_eq(s.n_folds, 2);
	o = opts(OQ_CALIB_AUTO);
	o.source = NULL;
	o.stats = &s;
	oq_diag_init(&d);
	cr_expect_eq(oq_calibrate(f.m, &o, &r, &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "2 folds") && strstr(d.msg, "needs 4"), "%s", d.msg);
	o.folds = 2;
	ranges(&f, &o, &r);
	oq_ranges_free(&r);
	for (int m = OQ_CALIB_PERCENTILE; m <= OQ_CALIB_MSE; m++) {
		oq_calib_opts one = opts(m);
		ranges(&f, &one, &want);
		one.source = NULL;
		one.stats = &s;
		ranges(&f, &one, &r);
		same_ranges(&want, &r, oq_calib_method_name(m));
		oq_ranges_free(&r);
		oq_ranges_free(&want);
	}
	oq_stats_free(&s);
	unbuild(&f);
}

/* Too few samples: 3 give 2 folds (said so), 1 gives none and the ranges of mse. */
Test(folds, few_samples, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges r, want;
	oq_calib_opts o;
	oq_diag d;
	char *log = NULL;
	size_t len;

	write_samples("c", 3);
	build(&f);
	o = opts(OQ_CALIB_AUTO);
	cr_assert_not_null(o.progress = open_memstream(&log, &len));
	oq_diag_init(&d);
	cr_assert_eq(oq_calibrate(f.m, &o, &r, &d), OQ_OK, "%s", d.msg);
	fclose(o.progress);
	cr_expect(strstr(log, "3 samples: 2 folds") && strstr(log, "auto (2 folds)"), "%s", log);
	free(log);
	oq_ranges_free(&r);

	o = opts(OQ_CALIB_AUTO);
	o.limit = 1;
	cr_assert_not_null(o.progress = open_memstream(&log, &len));
	ranges(&f, &o, &r);
	fclose(o.progress);
	cr_expect(strstr(log, "no held-out fold"), "%s", log);
	free(log);
	o = opts(OQ_CALIB_MSE);
	o.limit = 1;
	ranges(&f, &o, &want);
	same_ranges(&want, &r, "one sample");
	oq_ranges_free(&r);
	oq_ranges_free(&want);
	unbuild(&f);
}

/* ------------------------------------------------------------ the file format */

/* A folds file round-trips; its totals are the folds' merge; the header's fold count is checked
 * (version 3 needs 2..64 folds and histograms); merging files of different fold counts is
 * refused. */
Test(folds, file_format, .init = setup, .fini = teardown)
{
	fixture f;
	oq_stats s, t, u;
	oq_calib_opts o;
	uint8_t *buf, *c;
	size_t len;
	oq_diag d;

	write_samples("c", 8);
	build(&f);
	o = opts(OQ_CALIB_AUTO);
	stats_of(&f, &o, &s);
	oq_diag_init(&d);
	cr_assert_eq(oq_stats_encode(&s, &buf, &len, &d), OQ_OK, "%s", d.msg);
	/* version 3, kind 2, 4096 bins a side, 4 folds */
	cr_expect(memcmp(buf, "ONNXQSTA\3\0\0\0\2\0\0\0\0\x10\0\0\4\0\0\0", 24) == 0);
	cr_assert_eq(oq_stats_decode(buf, len, "mem", &t, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(t.n_folds, 4);
	cr_assert_eq(t.n, s.n);
	for (size_t i = 0; i < t.n; i++) {
		cr_expect(t.v[i].lo == s.v[i].lo && t.v[i].hi == s.v[i].hi);
		cr_expect(t.v[i].h.e == s.v[i].h.e && same_bins(&t.v[i].h, &s.v[i].h));
		for (int k = 0; k < 4; k++)
			cr_expect(t.v[i].fold[k].lo == s.v[i].fold[k].lo &&
			          t.v[i].fold[k].hi == s.v[i].fold[k].hi &&
			          in_bins(&t.v[i].fold[k].h) == in_bins(&s.v[i].fold[k].h));
	}
	oq_stats_free(&t);
	c = malloc(len);
	for (uint32_t bad = 0; bad < 3; bad++) {
		uint32_t v = bad == 0 ? 1 : bad == 1 ? 65 : 0;
		memcpy(c, buf, len);
		memcpy(c + 20, &v, 4); /* host = little-endian on every CI machine */
		{
			uint64_t sum = oq_stats_hash(c, len - 8, 0);
			for (int k = 0; k < 8; k++)
				c[len - 8 + (size_t)k] = (uint8_t)(sum >> (8 * k));
		}
		oq_diag_init(&d);
		cr_expect_eq(oq_stats_decode(c, len, "mem", &t, &d), OQ_EINVAL, "folds %u", v);
		cr_expect(strstr(d.msg, "bad header fields"), "%s", d.msg);
		oq_stats_free(&t);
	}
	free(c);
	free(buf);
	o = opts(OQ_CALIB_AUTO);
	o.folds = 2;
	stats_of(&f, &o, &u);
	oq_diag_init(&d);
	cr_expect_eq(oq_stats_merge(&s, &u, "two.bin", &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "2 folds") && strstr(d.msg, "--calib-folds"), "%s", d.msg);
	oq_stats_free(&u);
	oq_stats_free(&s);
	unbuild(&f);
}
