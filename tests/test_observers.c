/*
 * test_observers.c - calibration methods beyond min/max (calib/histogram.c and
 * the --method paths of calib/calibrate.c).
 *
 * Expected numbers are hand-computed (bin indices, percentile cuts on a flat
 * histogram, EMA steps), come from an independent brute-force evaluation
 * written here (KL(P||Q) summed bin by bin for every entropy candidate; the
 * actual squared error of quantizing the raw data with the quantize pass'
 * qparams for MSE), or are properties every method must have (an outlier is
 * clipped by percentile/entropy/mse and not by minmax; sample order and
 * thread count change nothing, bit for bit).
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib/calibrate.h"
#include "gen_model.h"
#include "tmpdir.h"
#include "src/io/npy.h"
#include "calib/histogram.h"
#include "passes/pass.h"
#include "src/quant/qparams.h"

/* ------------------------------------------------------------ helpers */

/* Deterministic uniform [0, 1) stream (64-bit LCG, top 24 bits). */
static float unif(uint64_t *s)
{
	*s = *s * 6364136223846793005u + 1442695040888963407u;
	return (float)(*s >> 40) / 16777216.0f;
}

/* Flat bins: every bin holds `per` values. */
static void flat(oq_hbins *h, double lo, double hi, int abs, uint64_t per)
{
	cr_assert_eq(oq_hbins_init(h, lo, hi, 2048, abs), OQ_OK);
	for (size_t k = 0; k < h->n; k++)
		h->bin[k] = per;
}

/* ------------------------------------------------------------ histogram */

#define SIDE OQ_HIST_SIDE

/* fill: 0 reference, 1 fast plain C, 2 fast with SIMD (AVX-512, else AVX2, where the CPU has it),
 * 3 fast with at most AVX2. The fast fill gets the block's largest finite |x| from the reference
 * min/max scan. */
static void fill(int how, oq_hist *h, const float *p, size_t n)
{
	float lo = INFINITY, hi = -INFINITY;
	uint64_t bad = 0;

	oq_minmax_f32_ref(p, n, &lo, &hi, &bad);
	oq_hist_simd = how == 2 ? 1 : how == 3 ? 2 : 0;
	if (how == 0)
		cr_assert_eq(oq_hist_add_f32_ref(h, p, n), OQ_OK);
	else
		cr_assert_eq(oq_hist_add_f32(h, p, n, lo <= hi ? fmaxf(-lo, hi) : 0), OQ_OK);
	oq_hist_simd = 1;
}

/* Count of bin k of side `neg` (0: x > 0, 1: x < 0). */
static uint64_t at_bin(const oq_hist *h, int neg, size_t k)
{
	return oq_hist_at(h, (size_t)neg * SIDE + k);
}

/* Sum of all bins. */
static uint64_t in_bins(const oq_hist *h)
{
	uint64_t t = 0;
	for (size_t k = 0; k < 2 * (size_t)SIDE; k++)
		t += oq_hist_at(h, k);
	return t;
}

static int same_hist(const oq_hist *a, const oq_hist *b)
{
	if (a->n_zero != b->n_zero || oq_hist_has_bins(a) != oq_hist_has_bins(b))
		return 0;
	if (oq_hist_has_bins(a) && a->e != b->e)
		return 0;
	for (size_t k = 0; k < 2 * (size_t)SIDE; k++)
		if (oq_hist_at(a, k) != oq_hist_at(b, k))
			return 0;
	return 1;
}

Test(observers, histogram_bins_by_hand)
{
	/* 4096 bins a side; 2^e the smallest power of two above max |x|; bin = floor(|x| 4096 / 2^e).
	 * Block 1: max |x| 3 -> e = 2, w = 2^-10: 0.5 -> 512, nextafter(0.5, 0) -> 511, 3 -> 3072,
	 * 2.999 -> 3070 (3070.98), -1 -> negative 1024, 1e-30 and a subnormal -> 0; zeros (+0, -0)
	 * apart; NaN/Inf skipped. */
	const float b1[] = {0.5f, 3.0f, 0.0f, -0.0f, NAN, INFINITY, 2.999f, -1.0f, 1e-30f,
			    -INFINITY, 1e-40f, 0x1.fffffep-2f /* nextafter(0.5, 0) */};
	/* Block 2: 4 = 2^2 itself needs e = 3 (2^e > |x|, strictly): bins halve (512 -> 256,
	 * 511 -> 255, 3072 -> 1536, 3070 -> 1535, -1024 -> -512), then 4 -> 2048, -7.99 -> -4090
	 * (4090.9). Values past 16 so the vector loop runs too. */
	const float b2[] = {4.0f, -7.99f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
			    0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 4.0f};
	/* Block 3: 1000 -> e = 10 (s = 7): the same values at floor(|x| 4): 0.5 -> 2, 0.4999 -> 1,
	 * 3 -> 12, 2.999 -> 11, 4 -> 16, -1 -> -4, -7.99 -> -31; 1000 -> 4000 */
	const float b3[] = {1000.0f};

	for (int how = 0; how < 4; how++) {
		oq_hist h;
		oq_hist_init(&h);
		fill(how, &h, b1, sizeof b1 / sizeof *b1);
		cr_expect_eq(h.e, 2, "fill %d: e %d", how, h.e);
		cr_expect_eq(h.n_zero, 2);
		cr_expect(at_bin(&h, 0, 512) == 1 && at_bin(&h, 0, 511) == 1 && at_bin(&h, 0, 3072) == 1 &&
			  at_bin(&h, 0, 3070) == 1 && at_bin(&h, 1, 1024) == 1 && at_bin(&h, 0, 0) == 2,
			  "fill %d", how);
		cr_expect_eq(in_bins(&h), 7);
		fill(how, &h, b2, sizeof b2 / sizeof *b2);
		cr_expect_eq(h.e, 3, "fill %d: e %d", how, h.e);
		cr_expect_eq(h.n_zero, 16);
		cr_expect(at_bin(&h, 0, 256) == 1 && at_bin(&h, 0, 255) == 1 && at_bin(&h, 0, 1536) == 1 &&
			  at_bin(&h, 0, 1535) == 1 && at_bin(&h, 1, 512) == 1 && at_bin(&h, 0, 2048) == 2 &&
			  at_bin(&h, 1, 4090) == 1 && at_bin(&h, 0, 0) == 2, "fill %d", how);
		cr_expect_eq(in_bins(&h), 10);
		fill(how, &h, b3, 1);
		cr_expect_eq(h.e, 10);
		cr_expect(at_bin(&h, 0, 2) == 1 && at_bin(&h, 0, 1) == 1 && at_bin(&h, 0, 12) == 1 &&
			  at_bin(&h, 0, 11) == 1 && at_bin(&h, 0, 16) == 2 && at_bin(&h, 1, 4) == 1 &&
			  at_bin(&h, 1, 31) == 1 && at_bin(&h, 0, 4000) == 1 && at_bin(&h, 0, 0) == 2,
			  "fill %d", how);
		cr_expect_eq(in_bins(&h), 11);
		oq_hist_free(&h);
	}
	/* exponents: 2^e > a, strictly; tiny values stop at OQ_HIST_EMIN */
	cr_expect_eq(oq_hist_exponent(1.0), 1);
	cr_expect_eq(oq_hist_exponent(0.75), 0);
	cr_expect_eq(oq_hist_exponent(FLT_MAX), 128);
	cr_expect_eq(oq_hist_exponent(1e-40), OQ_HIST_EMIN);
	cr_expect_eq(OQ_HIST_EMIN, -115);
}

/* Random values with the hard cases mixed in: NaN, +-Inf, +-0, subnormals, values on bin edges
 * of several grids and their float neighbours, powers of two, and a rare large value that
 * raises e in the middle of a block. */
static float *edge_data(size_t n, uint64_t seed, float scale)
{
	float *x = malloc(n * sizeof *x);
	uint64_t s = seed;
	cr_assert(x);
	for (size_t i = 0; i < n; i++) {
		float r = unif(&s), k = (float)(int)(unif(&s) * 4097);
		int e = (int)(unif(&s) * 8) - 2;
		switch ((int)(unif(&s) * 12)) {
		case 0: x[i] = NAN; break;
		case 1: x[i] = r < 0.5f ? INFINITY : -INFINITY; break;
		case 2: x[i] = r < 0.5f ? 0.0f : -0.0f; break;
		case 3: x[i] = ldexpf(r < 0.5f ? 1.0f : -1.0f, e); break; /* 2^e itself */
		case 4: /* an edge k 2^(e - 12) of grid e, and its neighbours */
			x[i] = ldexpf(k, e - 12);
			if (r < 0.3f)
				x[i] = nextafterf(x[i], INFINITY);
			else if (r < 0.6f)
				x[i] = nextafterf(x[i], -INFINITY);
			if (unif(&s) < 0.5f)
				x[i] = -x[i];
			break;
		case 5: x[i] = r < 0.5f ? 1e-40f : -0x1p-149f; break; /* subnormals */
		case 6: x[i] = unif(&s) < 0.002f ? scale * 8 * (1 + r) : r; break;
		case 7: x[i] = r < 0.5f ? 1e-30f : -1e-30f; break;
		default: x[i] = scale * (2 * r - 1);
		}
	}
	return x;
}

Test(observers, fast_fill_matches_scalar_reference)
{
	/* sizes: below 16 (scalar tail only), below the sub-histogram threshold, above it, and past
	 * two flushes of the 16-bit sub-histograms (every 255 blocks of 1024 values) */
	const size_t sizes[] = {13, 1000, 5 * 2 * SIDE + 7, 11 * 2 * SIDE + 29, 2 * 255 * 1024 + 4099};
	const float scales[] = {3.25f, 6.0f, 1e-3f, 1e30f};

	for (size_t r = 0; r < sizeof scales / sizeof *scales; r++) {
		for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
			size_t n = sizes[z], cut = n / 3;
			oq_hist ref, fast, rev;
			float *x = edge_data(n, 7 + r * 31 + z, scales[r]), *y = malloc(n * sizeof *y);
			cr_assert(y);
			/* the reference, in two calls; e grows value by value */
			oq_hist_init(&ref);
			fill(0, &ref, x, cut);
			fill(0, &ref, x + cut, n - cut);
			uint64_t nonzero = 0;
			for (size_t k = 0; k < 2 * (size_t)SIDE; k++)
				nonzero += oq_hist_at(&ref, k) != 0;
			cr_expect(n < 1000 || (nonzero > 100 && ref.n_zero > 0), "data too thin");
			for (int how = 1; how < 4; how++) {
				/* the second call starts mid-vector and (usually) raises e */
				oq_hist_init(&fast);
				fill(how, &fast, x, cut);
				fill(how, &fast, x + cut, n - cut);
				cr_expect(same_hist(&fast, &ref), "scale %g size %zu fill %d differs from the "
					  "reference", scales[r], n, how);
				oq_hist_free(&fast);
			}
			/* reversed, in other blocks: the same histogram */
			for (size_t i = 0; i < n; i++)
				y[i] = x[n - 1 - i];
			oq_hist_init(&rev);
			for (size_t i = 0; i < n; i += 777)
				fill(2, &rev, y + i, n - i < 777 ? n - i : 777);
			cr_expect(same_hist(&rev, &ref), "scale %g size %zu: order changed it", scales[r], n);
			oq_hist_free(&rev);
			free(y);
			free(x);
			oq_hist_free(&ref);
		}
	}
}

/* Both fast fills (plain C, AVX-512) of x[0..n), in one call and in pieces of 4099 values (odd
 * offsets within a vector), equal the reference fill; the reference histogram into *ref. */
static void expect_fast_fills_match(const float *x, size_t n, oq_hist *ref)
{
	oq_hist fast;

	oq_hist_init(ref);
	fill(0, ref, x, n);
	for (int how = 1; how < 4; how++) {
		oq_hist_init(&fast);
		fill(how, &fast, x, n);
		cr_expect(same_hist(&fast, ref), "fill %d differs from the reference", how);
		oq_hist_free(&fast);
		oq_hist_init(&fast);
		for (size_t i = 0; i < n; i += 4099)
			fill(how, &fast, x + i, n - i < 4099 ? n - i : 4099);
		cr_expect(same_hist(&fast, ref), "fill %d in pieces differs from the reference", how);
		oq_hist_free(&fast);
	}
}

/* Runs of values sharing one bin (flat regions: whole 16-value vectors in one bin are counted at
 * once by the AVX-512 path, 8-value ones by the AVX2 path): runs of 1..40 of one value or of
 * neighbours in the same bin, on either side, at the top of the grid (amax itself), broken by
 * zeros and NaN, starting at any offset within a vector. */
Test(observers, fast_fill_runs_in_one_bin)
{
	const size_t n = 3 * 255 * 1024 + 333;
	float *x = malloc(n * sizeof *x);
	oq_hist ref;
	uint64_t s = 5;

	cr_assert(x);
	for (size_t i = 0; i < n;) {
		size_t len = 1 + (size_t)(unif(&s) * 40);
		float r = unif(&s), v = r < 0.1f ? 5.0f : r < 0.2f ? -5.0f : (8 * unif(&s) - 4);
		int brk = unif(&s) < 0.1f;
		for (size_t k = 0; k < len && i < n; k++, i++)
			x[i] = brk && k == len / 2 ? (r < 0.15f ? NAN : 0.0f)
			       : k % 3 == 2 ? nextafterf(v, 0.0f) /* most likely the same bin */
			                    : v;
	}
	expect_fast_fills_match(x, n, &ref);
	oq_hist_free(&ref);
	free(x);
}

/* One bin takes every value (a constant tensor, as after a saturating Clip) far past what a 16-bit
 * sub-histogram count holds between flushes: the counts stay exact. */
Test(observers, fast_fill_one_bin_many_values)
{
	const size_t n = 3 * 255 * 1024 + 77;
	float *x = malloc(n * sizeof *x);
	oq_hist ref;
	uint64_t six = 0;

	cr_assert(x);
	for (size_t i = 0; i < n; i++) {
		x[i] = i % 1000 == 0 ? 0.0f : i % 977 == 0 ? -6.0f : 6.0f;
		six += x[i] == 6.0f;
	}
	expect_fast_fills_match(x, n, &ref);
	/* and the reference (so both fast fills) holds the hand count: 6 in bin 3/4 of e = 3's grid */
	cr_expect_eq(at_bin(&ref, 0, 3 * SIDE / 4), six, "count %llu",
		     (unsigned long long)at_bin(&ref, 0, 3 * SIDE / 4));
	oq_hist_free(&ref);
	free(x);
}

/* Merging histograms of two halves gives the histogram of the whole, bit for bit, whatever their
 * exponents (here 2^-100 and 2^40 apart: e jumps past the 12 bits of the bins). */
Test(observers, merge_and_copy_are_exact)
{
	const size_t n = 20000;
	float *x = edge_data(n, 99, 2.0f);
	oq_hist all, a, b, c, tiny, big;
	const float t[] = {0x1p-100f, -0x1p-101f, 0x1.8p-100f};
	const float g[] = {0x1p40f, 3.0f};

	oq_hist_init(&all);
	oq_hist_init(&a);
	oq_hist_init(&b);
	fill(0, &all, x, n);
	fill(2, &a, x, 5000);
	fill(1, &b, x + 5000, n - 5000);
	cr_assert_eq(oq_hist_merge(&a, &b), OQ_OK);
	cr_expect(same_hist(&a, &all), "merge differs");
	cr_assert_eq(oq_hist_copy(&c, &all), OQ_OK);
	cr_expect(same_hist(&c, &all));
	oq_hist_free(&c);
	/* merging into an empty histogram, and an empty one into a full one */
	oq_hist_init(&c);
	cr_assert_eq(oq_hist_merge(&c, &all), OQ_OK);
	cr_expect(same_hist(&c, &all));
	oq_hist_free(&b);
	oq_hist_init(&b);
	cr_assert_eq(oq_hist_merge(&c, &b), OQ_OK);
	cr_expect(same_hist(&c, &all));
	/* far-apart exponents: every tiny value ends in bin 0 of its side; 3 -> floor(3 2^-29) = 0 */
	oq_hist_init(&tiny);
	oq_hist_init(&big);
	fill(0, &tiny, t, 3);
	cr_expect_eq(tiny.e, -99);
	cr_expect(at_bin(&tiny, 0, 2048) == 1 && at_bin(&tiny, 1, 1024) == 1 && at_bin(&tiny, 0, 3072) == 1);
	fill(0, &big, g, 2);
	cr_expect_eq(big.e, 41);
	cr_assert_eq(oq_hist_merge(&tiny, &big), OQ_OK);
	cr_expect_eq(tiny.e, 41);
	cr_expect(at_bin(&tiny, 0, 0) == 3 && at_bin(&tiny, 1, 0) == 1 && at_bin(&tiny, 0, 2048) == 1,
		  "%llu %llu", (unsigned long long)at_bin(&tiny, 0, 0), (unsigned long long)at_bin(&tiny, 1, 0));
	cr_expect_eq(in_bins(&tiny), 5);
	oq_hist_free(&tiny);
	oq_hist_free(&big);
	oq_hist_free(&all);
	oq_hist_free(&a);
	oq_hist_free(&b);
	oq_hist_free(&c);
	free(x);
}

/*
 * 32-bit counts move to 64 bits when their bound would pass oq_hist_narrow_max (lowered here to
 * 1000): every fill path, merge, drain and copy keep the counts of the histograms that never
 * move (the default limit), and a bound inflated by zeros is recounted before a move.
 */
Test(observers, counts_move_to_64_bits_and_stay_the_same)
{
	const size_t n = 6000;
	float *x = edge_data(n, 7, 3.0f);
	float zeros[900] = {0}, ones[150];
	oq_hist ref, h, a, b, c;

	for (size_t i = 0; i < 150; i++)
		ones[i] = 1.0f;
	for (int how = 0; how < 4; how++) {
		oq_hist_init(&ref);
		oq_hist_init(&h);
		for (size_t i = 0; i < n; i += 700)
			fill(how, &ref, x + i, n - i < 700 ? n - i : 700);
		cr_expect(ref.b32 && !ref.b64, "fill %d: 32-bit under the default limit", how);
		oq_hist_narrow_max = 1000;
		for (size_t i = 0; i < n; i += 700) {
			fill(how, &h, x + i, n - i < 700 ? n - i : 700);
			/* 700 values (a few zeros, NaN, Inf among them) fit; 1400 do not */
			cr_expect(i == 0 ? h.b32 && !h.b64 : h.b64 && !h.b32, "fill %d: width after %zu values",
				  how, i + 700);
		}
		oq_hist_narrow_max = UINT32_MAX;
		cr_expect(same_hist(&h, &ref), "fill %d: counts differ after the move", how);
		/* n values at once (n >= top + 64: through the sub-histograms, flushed into 64-bit
		 * counts), against the reference fill of the same values into ref */
		cr_assert_eq(h.e, ref.e);
		fill(how, &h, x, n);
		fill(0, &ref, x, n);
		cr_expect(h.b64 && same_hist(&h, &ref), "fill %d: 64-bit counts of a large fill", how);
		oq_hist_free(&h);
		oq_hist_free(&ref);
	}

	/* merge: two 32-bit halves whose bounds add past the limit; drain the same */
	oq_hist_init(&ref);
	fill(2, &ref, x, n);
	oq_hist_init(&a);
	oq_hist_init(&b);
	fill(2, &a, x, 800);
	fill(1, &b, x + 800, n - 800);
	oq_hist_narrow_max = 1000;
	cr_assert_eq(oq_hist_merge(&a, &b), OQ_OK);
	cr_expect(a.b64 && !a.b32 && same_hist(&a, &ref), "merge");
	cr_assert_eq(oq_hist_copy(&c, &a), OQ_OK);
	cr_expect(c.b64 && same_hist(&c, &ref), "copy of 64-bit counts");
	oq_hist_free(&c);
	oq_hist_free(&a);
	oq_hist_init(&a);
	oq_hist_narrow_max = UINT32_MAX;
	fill(2, &a, x, 800);
	cr_assert_eq(oq_hist_regrid(&c, b.e), OQ_OK); /* c: empty bins on b's grid */
	oq_hist_narrow_max = 1000;
	cr_assert_eq(oq_hist_drain(&c, &b), OQ_OK); /* 5200 > 1000: c moves, b empties */
	cr_expect(c.b64 && in_bins(&b) == 0 && b.n_zero == 0, "drain");
	cr_assert_eq(oq_hist_merge(&c, &a), OQ_OK);
	cr_expect(same_hist(&c, &ref), "drain, then merge");
	/* back to 32 bits where the sum fits (under the default limit) */
	oq_hist_narrow_max = UINT32_MAX;
	oq_hist_fit(&c);
	cr_expect(c.b32 && !c.b64 && same_hist(&c, &ref), "fit");
	oq_hist_free(&a);
	oq_hist_free(&b);
	oq_hist_free(&c);
	oq_hist_free(&ref);

	/* 850 zeros and 50 ones count 900 against the bound, 50 in the bins: with 150 more ones
	 * the bound is recounted (50 + 150 = 200), and the counts stay 32-bit (bin of 1 at e = 1:
	 * 2048) */
	oq_hist_narrow_max = 1000;
	oq_hist_init(&h);
	memcpy(zeros + 850, ones, 50 * sizeof *ones);
	fill(2, &h, zeros, 900);
	cr_expect(h.b32 && h.bound == 900, "bound %llu", (unsigned long long)h.bound);
	fill(2, &h, ones, 150);
	cr_expect(h.b32 && !h.b64 && h.bound == 200 && at_bin(&h, 0, 2048) == 200 && h.n_zero == 850,
		  "recount: bound %llu", (unsigned long long)h.bound);
	oq_hist_narrow_max = UINT32_MAX;
	oq_hist_free(&h);
	free(x);
}

Test(observers, views_by_hand)
{
	/* -1.5, -0.25, 0, 0.5, 3 -> e = 2, w = 2^-10; signed cells: -1.5 -> -1537, -0.25 -> -257,
	 * 0.5 -> 512, 3 -> 3072 */
	const float v[] = {-1.5f, -0.25f, 0.0f, 0.5f, 3.0f};
	oq_hist h;
	oq_hbins b;

	oq_hist_init(&h);
	fill(2, &h, v, 5);
	cr_assert_eq(oq_hist_view(&h, -1.5, 3, 0, &b), OQ_OK);
	cr_expect_eq(b.n, 1537 + 3072 + 1);
	cr_expect(b.lo == -1537.0 / 1024 && b.hi == 3073.0 / 1024, "[%a, %a]", b.lo, b.hi);
	cr_expect(b.bin[0] == 1 && b.bin[1537 - 257] == 1 && b.bin[1537 + 512] == 1 &&
		  b.bin[b.n - 1] == 1 && b.n_zero == 1 && !b.abs);
	oq_hbins_free(&b);
	/* |x|: cells 0..3072 (max(1.5, 3) = 3), sides added */
	cr_assert_eq(oq_hist_view(&h, -1.5, 3, 1, &b), OQ_OK);
	cr_expect(b.n == 3073 && b.lo == 0 && b.hi == 3073.0 / 1024 && b.abs);
	cr_expect(b.bin[1536] == 1 && b.bin[256] == 1 && b.bin[512] == 1 && b.bin[3072] == 1);
	oq_hbins_free(&b);
	/* a positive-only range starts at its own cell: [0.5, 3] -> cells 512..3072 */
	cr_assert_eq(oq_hist_view(&h, 0.5, 3, 0, &b), OQ_OK);
	cr_expect(b.n == 2561 && b.lo == 0.5 && b.bin[0] == 1);
	oq_hbins_free(&b);
	oq_hist_free(&h);
	oq_hist_init(&h);
	cr_expect_eq(oq_hist_view(&h, 0, 1, 0, &b), OQ_EINVAL); /* no bins */
	cr_expect_eq(oq_hbins_init(&b, 1, 1, 8, 0), OQ_EINVAL);
	cr_expect_eq(oq_hbins_init(&b, -1, 1, 8, 1), OQ_EINVAL);
}

Test(observers, minmax_scan_by_hand_and_against_reference)
{
	const float v[] = {NAN, -0.0f, INFINITY, 2.5f, -INFINITY, 0.0f, 1.0f, NAN, -0.0f, -0.0f,
			   3.0f, -1.5f, 1e-30f, 2.0f, NAN, 0.5f, -0.0f, 2.0f, 1.0f, 0.0f,
			   -1.0f, 3.0f, 1.0f, 2.0f, 0.25f, 0.5f, 0.75f, 1.25f, -1.25f, 2.25f,
			   INFINITY, -0.5f, 1.0f, 0.125f};
	const float z[] = {NAN, -0.0f, -0.0f, INFINITY, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f,
			   -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f,
			   -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f,
			   -0.0f, -0.0f, -0.0f, -0.0f};
	const size_t n = 100003;
	float *x = malloc(n * sizeof *x);
	uint64_t s = 99;
	cr_assert(x);
	for (size_t i = 0; i < n; i++) {
		float r = unif(&s), c = unif(&s);
		x[i] = c < 0.05f ? NAN : c < 0.1f ? -INFINITY : c < 0.15f ? -0.0f : 8 * r - 3;
	}

	for (int how = 0; how < 4; how++) {
		float lo = INFINITY, hi = -INFINITY, lo2 = INFINITY, hi2 = -INFINITY;
		uint64_t bad = 0, bad2 = 0;
		oq_hist_simd = how == 2 ? 1 : how == 3 ? 2 : 0;
		/* by hand: 6 NaN/Inf out of 34; finite min -1.5, max 3 */
		if (how)
			oq_minmax_f32(v, sizeof v / sizeof *v, &lo, &hi, &bad);
		else
			oq_minmax_f32_ref(v, sizeof v / sizeof *v, &lo, &hi, &bad);
		cr_expect(lo == -1.5f && hi == 3.0f && bad == 6, "scan %d: %g %g %lu", how, lo, hi,
			  (unsigned long)bad);
		/* only -0 and non-finite: both ends +0 (sign bit clear), 2 bad */
		lo = INFINITY, hi = -INFINITY, bad = 0;
		if (how)
			oq_minmax_f32(z, sizeof z / sizeof *z, &lo, &hi, &bad);
		else
			oq_minmax_f32_ref(z, sizeof z / sizeof *z, &lo, &hi, &bad);
		cr_expect(lo == 0 && hi == 0 && !signbit(lo) && !signbit(hi) && bad == 2, "scan %d", how);
		/* random data against the reference, in two calls that carry the state */
		lo = INFINITY, hi = -INFINITY, bad = 0;
		oq_minmax_f32_ref(x, n, &lo2, &hi2, &bad2);
		if (how) {
			oq_minmax_f32(x, 777, &lo, &hi, &bad);
			oq_minmax_f32(x + 777, n - 777, &lo, &hi, &bad);
			cr_expect(lo == lo2 && hi == hi2 && bad == bad2, "scan %d: %a %a %lu", how, lo, hi,
				  (unsigned long)bad);
		}
		cr_expect(lo2 >= -3 && hi2 < 5 && bad2 > n / 20 && bad2 < n / 5);
	}
	oq_hist_simd = 1;
	free(x);
}

/* ------------------------------------------------------------ EMA */

Test(observers, ema_steps_by_hand)
{
	double lo = 0, hi = 0;
	int init = 0;

	/* per-sample ranges [0,1], [-1,2], [0,4] with c = 0.5:
	 * [0,1] -> [0 + .5(-1-0), 1 + .5(2-1)] = [-0.5, 1.5] -> [-0.5 + .5(0.5), 1.5 + .5(2.5)] */
	oq_ema_update(&lo, &hi, &init, 0, 1, 0.5);
	cr_expect(lo == 0 && hi == 1);
	oq_ema_update(&lo, &hi, &init, -1, 2, 0.5);
	cr_expect(lo == -0.5 && hi == 1.5);
	oq_ema_update(&lo, &hi, &init, 0, 4, 0.5);
	cr_expect(lo == -0.25 && hi == 2.75, "%g %g", lo, hi);
}

/* ------------------------------------------------------------ percentile */

Test(observers, percentile_uniform_by_hand)
{
	oq_hbins h;
	double lo, hi;

	/* 2048 bins x 100 values over [0, 1]; P = 99 cuts at most 0.5 % = 1024 values a side:
	 * 10 bins (1000 values), so [10/2048, 1 - 10/2048] */
	flat(&h, 0, 1, 0, 100);
	oq_select_percentile(&h, 0, 1, 99, &lo, &hi);
	cr_expect_eq(lo, 10.0 / 2048, "%.10g", lo);
	cr_expect_eq(hi, 1 - 10.0 / 2048, "%.10g", hi);
	/* P = 100 is min/max */
	oq_select_percentile(&h, 0, 1, 100, &lo, &hi);
	cr_expect(lo == 0 && hi == 1);
	/* zeros count: 1000 of them go to bin 0, so the low cut stops before it */
	h.n_zero = 1000;
	oq_select_percentile(&h, 0, 1, 99, &lo, &hi);
	cr_expect_eq(lo, 0, "%.10g", lo); /* q = 0.005 * 205800 = 1029 < 1100 in bin 0 */
	oq_hbins_free(&h);

	/* |x| form: cut at most 1 % = 2048 values from the top: 20 bins -> t = 1 - 20/2048 */
	flat(&h, 0, 1, 1, 100);
	oq_select_percentile(&h, -1, 1, 99, &lo, &hi);
	cr_expect_eq(hi, 1 - 20.0 / 2048, "%.10g", hi);
	cr_expect_eq(lo, -(1 - 20.0 / 2048));
	/* clipped to the observed range */
	oq_select_percentile(&h, -0.25, 1, 99, &lo, &hi);
	cr_expect_eq(lo, -0.25);
	oq_hbins_free(&h);
}

/* ------------------------------------------------------------ entropy */

/* KL(P||Q) of candidate i, summed bin by bin (the definition, no prefix sums); Q's total is
 * taken before smoothing, as histogram.c does (the difference is O(eps / N)). */
static double kl_brute(const uint64_t *hb, size_t n, size_t i, size_t T)
{
	double *P = calloc(i, sizeof *P), *Q = calloc(i, sizeof *Q), sp = 0, sq = 0, kl = 0;
	double *G = calloc(T, sizeof *G), *nz = calloc(T, sizeof *nz), O = 0;

	cr_assert(P && Q && G && nz);
	for (size_t k = 0; k < i; k++)
		P[k] = (double)hb[k];
	for (size_t k = i; k < n; k++)
		O += (double)hb[k];
	P[i - 1] += O;
	/* group j of bin k: k * T / i; its mass without the outliers, its non-empty bins of P */
	for (size_t k = 0; k < i; k++) {
		G[k * T / i] += (double)hb[k];
		nz[k * T / i] += P[k] != 0;
	}
	for (size_t k = 0; k < i; k++)
		if (P[k] != 0)
			Q[k] = G[k * T / i] / nz[k * T / i];
	free(G);
	free(nz);
	for (size_t k = 0; k < i; k++) {
		sp += P[k];
		sq += Q[k];
	}
	for (size_t k = 0; k < i; k++) {
		if (P[k] == 0)
			continue;
		if (Q[k] == 0)
			Q[k] = 1e-4; /* MXNet's smoothing of an empty Q bin (eps counts) */
		kl += P[k] / sp * log((P[k] / sp) / (Q[k] / sq));
	}
	free(P);
	free(Q);
	return kl;
}

Test(observers, entropy_uniform_keeps_full_range)
{
	oq_hbins h;
	double lo, hi;

	/* flat: Q = P at i = 2048 (KL 0); any smaller i piles outliers into one bin */
	flat(&h, 0, 1, 1, 100);
	cr_assert_eq(oq_select_entropy(&h, 0, 1, 128, &lo, &hi), OQ_OK);
	cr_expect(lo == 0 && hi == 1, "[%g, %g]", lo, hi);
	cr_assert_eq(oq_select_entropy(&h, -1, 1, 128, &lo, &hi), OQ_OK);
	cr_expect(lo == -1 && hi == 1, "[%g, %g]", lo, hi);
	/* exact zeros (a ReLU's) are exact on any grid and do not move t */
	h.n_zero = 1000000;
	cr_assert_eq(oq_select_entropy(&h, 0, 1, 128, &lo, &hi), OQ_OK);
	cr_expect(lo == 0 && hi == 1, "[%g, %g]", lo, hi);
	cr_expect_eq(oq_select_entropy(&h, 0, 1, 4096, &lo, &hi), OQ_EINVAL);
	oq_hbins_free(&h);
}

Test(observers, entropy_matches_brute_force_kl)
{
	oq_hist h;
	oq_hbins b;
	uint64_t s = 7;
	double lo, hi, best = INFINITY;
	size_t best_i = 0;
	float *x = malloc(200000 * sizeof *x);

	/* |Laplace|-like data (-ln u) with a sparse tail up to 30: e = 5, bins of 2^-7, the |x| view
	 * has the 3841 bins up to the one holding 30 (30 * 128 = 3840) */
	cr_assert_not_null(x);
	for (int k = 0; k < 200000; k++)
		x[k] = -logf(1.0f - unif(&s) * 0.999999f);
	x[0] = 30.0f;
	oq_hist_init(&h);
	cr_assert_eq(oq_hist_add_f32(&h, x, 200000, 30.0f), OQ_OK);
	cr_assert_eq(oq_hist_view(&h, 0, 30, 1, &b), OQ_OK);
	cr_assert_eq(b.n, 3841);
	cr_assert_eq(oq_select_entropy(&b, 0, 30, 128, &lo, &hi), OQ_OK);
	for (size_t i = 128; i <= b.n; i++) {
		double kl = kl_brute(b.bin, b.n, i, 128);
		if (kl < best - 1e-12) {
			best = kl;
			best_i = i;
		}
	}
	cr_expect(fabs(hi - fmin(30, (double)best_i / 128)) < 1e-9,
	          "entropy t = %g, brute force t = %g (i = %zu)", hi, (double)best_i / 128, best_i);
	cr_expect(hi < 30 && hi > 2, "t = %g", hi);
	oq_hbins_free(&b);
	oq_hist_free(&h);
	free(x);
}

/* ------------------------------------------------------------ MSE */

/* The bins a selection reads for x (range [lo, hi]; abs: |x| bins). */
static void view_of(const float *x, size_t n, double lo, double hi, int abs, oq_hbins *b)
{
	oq_hist h;
	oq_hist_init(&h);
	cr_assert_eq(oq_hist_add_f32(&h, x, n, (float)fmax(-lo, hi)), OQ_OK);
	cr_assert_eq(oq_hist_view(&h, lo, hi, abs, b), OQ_OK);
	oq_hist_free(&h);
}

/* Sum of squared errors of quantizing x on the pass' grid for [a, b]. */
static double sse(const float *x, size_t n, double a, double b, int dtype, int form)
{
	float sc;
	int64_t zp, qmin, qmax;
	double e = 0;

	cr_assert_eq(oq_qparams(a, b, dtype, form, 0, &sc, &zp), OQ_OK);
	cr_assert(oq_qgrid(dtype, form, 0, &qmin, &qmax));
	for (size_t i = 0; i < n; i++) {
		double d = (double)(oq_quantize_value(x[i], sc, zp, qmin, qmax) - zp) * sc - x[i];
		e += d * d;
	}
	return e;
}

/* mse's range on x (n values, one outlier) is no worse than nearby ranges, by actual error. */
static void mse_check(const float *x, size_t n, double lo, double hi, int sym, double *out_hi)
{
	oq_hbins h;
	double a, b, e;
	int form = sym ? OQ_QP_SYM_NARROW : OQ_QP_ASYM, dt = sym ? OQ_DT_INT8 : OQ_DT_UINT8;

	view_of(x, n, lo, hi, sym, &h);
	cr_assert_eq(oq_select_mse(&h, lo, hi, dt, form, &a, &b), OQ_OK);
	e = sse(x, n, a, b, dt, form);
	cr_expect(e <= sse(x, n, lo, hi, dt, form), "mse worse than min/max: [%g, %g] %g vs %g", a, b,
	          e, sse(x, n, lo, hi, dt, form));
	cr_expect(e <= 1.02 * sse(x, n, a, b * 0.8, dt, form), "0.8 x hi is better: [%g, %g]", a, b);
	cr_expect(e <= 1.02 * sse(x, n, a, b * 1.25, dt, form), "1.25 x hi is better: [%g, %g]", a,
	          b);
	if (a < 0) {
		cr_expect(e <= 1.02 * sse(x, n, a * 0.8, b, dt, form), "0.8 x lo is better");
		cr_expect(e <= 1.02 * sse(x, n, a * 1.25, b, dt, form), "1.25 x lo is better");
	}
	*out_hi = b;
	oq_hbins_free(&h);
}

Test(observers, mse_clips_outlier_and_is_near_optimal)
{
	size_t n = 2000000;
	float *x = malloc(n * sizeof *x);
	uint64_t s = 11;
	double b;

	cr_assert_not_null(x);
	/* uniform [0, 1) and one value at 20: keeping it costs N s^2/12 with s = 20/255 */
	for (size_t i = 0; i < n; i++)
		x[i] = unif(&s);
	x[5] = 20;
	mse_check(x, n, 0, 20, 0, &b);
	cr_expect(b < 10, "hi %g", b);
	/* without the outlier mse keeps (almost) all of the range: clipping uniform data hurts */
	x[5] = 0.5f;
	mse_check(x, n, 0, 1, 0, &b);
	cr_expect(b > 0.98, "hi %g", b);
	/* signed, symmetric int8: uniform [-1, 1) and -20 */
	for (size_t i = 0; i < n; i++)
		x[i] = 2 * unif(&s) - 1;
	x[9] = -20;
	mse_check(x, n, -20, 1, 1, &b);
	cr_expect(b < 10, "t %g", b);
	/* signed, asymmetric uint8 */
	mse_check(x, n, -20, 1, 0, &b);
	free(x);
}

/* Actual FP8 round-trip error of x on [-t, t] (scale t/448). */
static double sse_fp8(const float *x, size_t n, double t)
{
	float s = (float)(t / OQ_FP8_E4M3FN_MAX);
	double e = 0;
	for (size_t i = 0; i < n; i++) {
		double d = (double)oq_fp8_round(x[i], s) * s - x[i];
		e += d * d;
	}
	return e;
}

Test(observers, mse_unsigned_symmetric_and_fp8)
{
	size_t n = 2000000;
	float *x = malloc(n * sizeof *x);
	uint64_t s = 5;
	oq_hbins h;
	double a, b, e;
	int form = oq_act_form(OQ_ACT_SYM_UNSIGNED, 0);

	cr_assert_not_null(x);
	/* AIMET unsigned uint8 (zp 0 on [0,255]): a quarter of the values negative (they clamp to 0
	 * whatever the range), uniform [0, 1) and one 20: the top must come down as in the
	 * asymmetric case, on a signed histogram */
	for (size_t i = 0; i < n; i++)
		x[i] = i % 4 ? unif(&s) : -unif(&s);
	x[7] = 20;
	view_of(x, n, -1, 20, 0, &h);
	cr_assert_eq(oq_select_mse(&h, -1, 20, OQ_DT_UINT8, form, &a, &b), OQ_OK);
	e = sse(x, n, a, b, OQ_DT_UINT8, form);
	cr_expect(b < 10, "hi %g", b);
	cr_expect(e <= sse(x, n, -1, 20, OQ_DT_UINT8, form));
	cr_expect(e <= 1.02 * sse(x, n, a, b * 0.8, OQ_DT_UINT8, form), "0.8 x hi better: %g", b);
	cr_expect(e <= 1.02 * sse(x, n, a, b * 1.25, OQ_DT_UINT8, form), "1.25 x hi better: %g", b);
	/* |x| bins do not describe this grid */
	oq_hbins_free(&h);
	view_of(x, n, -1, 20, 1, &h);
	cr_expect_eq(oq_select_mse(&h, -1, 20, OQ_DT_UINT8, form, &a, &b), OQ_EINVAL);
	oq_hbins_free(&h);

	/* FP8 E4M3FN on |x|: uniform [-1, 1) and one outlier 8 (bins of 16/4096: the linear
	 * histogram resolves the bulk). The chosen t must be near-optimal by the actual FP8 error
	 * and no worse than min/max */
	for (size_t i = 0; i < n; i++)
		x[i] = 2 * unif(&s) - 1;
	x[3] = 8;
	view_of(x, n, -1, 8, 1, &h);
	cr_assert_eq(oq_select_mse(&h, -1, 8, OQ_DT_FLOAT8E4M3FN, OQ_QP_SYM_NARROW, &a, &b), OQ_OK);
	e = sse_fp8(x, n, b);
	cr_expect(a == -b || a == -1, "[%g, %g]", a, b);
	cr_expect(e <= sse_fp8(x, n, 8), "mse %g vs minmax %g", e, sse_fp8(x, n, 8));
	cr_expect(e <= 1.02 * sse_fp8(x, n, b * 0.8), "0.8 x t better: %g", b);
	cr_expect(e <= 1.02 * sse_fp8(x, n, b * 1.25), "1.25 x t better: %g", b);
	/* the FP8 grid has no asymmetric form */
	cr_expect_eq(oq_select_mse(&h, -1, 8, OQ_DT_FLOAT8E4M3FN, OQ_QP_ASYM, &a, &b),
	             OQ_EINVAL);
	oq_hbins_free(&h);
	free(x);
}

/* The branch-free level walk (the default) and the reference walk choose the same ranges, bit
 * for bit, on bins of every shape: dense, sparse (runs of empty bins, where the reference's
 * tests go either way), spikes, a signed view across 0 or on one side, |x| views; asymmetric,
 * symmetric and AIMET-unsigned grids, 8 and 16 bits. */
Test(observers, mse_fast_walk_matches_reference)
{
	static const struct { int dtype, form, abs; } grids[] = {
		{OQ_DT_UINT8, OQ_QP_ASYM, 0},      {OQ_DT_INT8, OQ_QP_SYM_NARROW, 1},
		{OQ_DT_UINT8, OQ_QP_SYM_FULL, 0},  {OQ_DT_INT16, OQ_QP_ASYM, 0},
		{OQ_DT_INT8, OQ_QP_ASYM, 0},
	};
	uint64_t s = 23;

	for (int c = 0; c < 60; c++) {
		size_t n = 600 + (size_t)(unif(&s) * 3500);
		int shape = c % 4;
		for (size_t g = 0; g < sizeof grids / sizeof *grids; g++) {
			oq_hbins h;
			double lo, hi, r[2][2];
			uint64_t s2 = s + (uint64_t)c;
			if (grids[g].abs) {
				lo = 0;
				hi = 0.1 + 10 * unif(&s2);
			} else {
				lo = c % 3 == 0 ? 0.01 * unif(&s2) : -(0.1 + 5 * unif(&s2));
				hi = 0.1 + 10 * unif(&s2);
			}
			cr_assert_eq(oq_hbins_init(&h, lo, hi, n, grids[g].abs), OQ_OK);
			h.n_zero = (uint64_t)(unif(&s2) * 1000);
			for (size_t k = 0; k < n; k++) {
				double u = unif(&s2);
				h.bin[k] = shape == 0   ? (uint64_t)(u * 1000)                        /* dense */
				           : shape == 1 ? (u < 0.7 ? 0 : (uint64_t)(u * 50))          /* sparse */
				           : shape == 2 ? (uint64_t)(1e5 * exp(-(double)k / 40) * u)  /* a spike at lo */
				                        : (k % 97 == 0 ? (uint64_t)(u * 1e6) : u < 0.5); /* comb */
			}
			h.bin[n - 1] += 1; /* the data reach both ends */
			h.bin[0] += 1;
			for (int ref = 0; ref < 2; ref++) {
				oq_mse_ref = ref;
				cr_assert_eq(oq_select_mse(&h, lo, hi, grids[g].dtype, grids[g].form, &r[ref][0],
				                           &r[ref][1]), OQ_OK);
			}
			/* and the error of each of 40 candidate ranges, clipped or wider than the data */
			for (int t = 0; t < 40; t++) {
				double a = grids[g].abs ? 0 : lo * 1.2 * unif(&s2), b = hi * (0.01 + 1.2 * unif(&s2));
				double err[2];
				if (grids[g].abs || grids[g].form != OQ_QP_ASYM)
					a = grids[g].abs || grids[g].form == OQ_QP_SYM_NARROW ? -b : a;
				for (int ref = 0; ref < 2; ref++) {
					oq_mse_ref = ref;
					cr_assert_eq(oq_mse_error(&h, a, b, grids[g].dtype, grids[g].form, &err[ref]),
					             OQ_OK);
				}
				cr_expect(!memcmp(&err[0], &err[1], sizeof err[0]),
				          "case %d grid %zu [%a, %a]: fast %a, reference %a", c, g, a, b, err[0],
				          err[1]);
			}
			oq_mse_ref = 0;
			cr_expect(!memcmp(r[0], r[1], sizeof r[0]),
			          "case %d grid %zu: fast [%a, %a], reference [%a, %a]", c, g, r[0][0], r[0][1],
			          r[1][0], r[1][1]);
			oq_hbins_free(&h);
		}
	}
}

/* ------------------------------------------------------------ through calibrate */

static void setup(void)
{
	cr_assert_not_null(tmpdir_make("oq_obs"));
}

static void teardown(void)
{
	tmpdir_remove();
}

#define at tmpdir_at

#define ROWS 4
#define COLS 64

/* rel.npy: float32[ROWS, COLS]. */
static void sample(const char *rel, const float *v)
{
	oq_diag d;
	oq_diag_init(&d);
	cr_assert_eq(oq_npy_write(at(rel), OQ_DT_FLOAT, 2, (const int64_t[]){ROWS, COLS}, v,
	                          ROWS * COLS * 4, &d),
	             OQ_OK, "%s", d.msg);
}

typedef struct fixture {
	gen_model *g;
	oq_model *m;
} fixture;

/* x float[4, 64] -> Relu -> r;  x -> MatMul(W [64, 64]) -> y (split over threads). */
static void build(fixture *f)
{
	oq_diag d;
	Onnx__GraphProto *mg;
	static double w[COLS * COLS];

	for (int i = 0; i < COLS * COLS; i++)
		w[i] = ((i * 37) % 101 - 50) / 64.0;
	f->g = gen_new(8);
	gen_opset(f->g, "", 13);
	mg = gen_graph(f->g);
	gen_input(f->g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(ROWS, COLS));
	gen_init(f->g, mg, "W", OQ_DT_FLOAT, GEN_SHAPE(COLS, COLS), w);
	gen_node(f->g, mg, "Relu", "relu", "x", "r");
	gen_node(f->g, mg, "MatMul", "mm", "x,W", "y");
	gen_output(f->g, mg, "r", OQ_DT_FLOAT, GEN_SHAPE(ROWS, COLS));
	gen_output(f->g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(ROWS, COLS));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(f->g, &f->m, &d), OQ_OK, "%s", d.msg);
}

static void unbuild(fixture *f)
{
	oq_model_free(f->m);
	gen_free(f->g);
}

static int calib(fixture *f, const char *src, int method, int threads, double param, int act,
                 oq_ranges *r, oq_diag *d)
{
	oq_calib_opts o;

	memset(&o, 0, sizeof o);
	o.source = src;
	o.threads = threads;
	o.method = method;
	o.act_type = act;
	if (method == OQ_CALIB_EMA)
		o.ema_constant = param;
	if (method == OQ_CALIB_PERCENTILE)
		o.percentile = param;
	oq_diag_init(d);
	return oq_calibrate(f->m, &o, r, d);
}

static const oq_range *find(const oq_ranges *r, const char *name)
{
	const oq_range *x = oq_ranges_find(r, name);
	cr_assert_not_null(x, "no range for %s", name);
	return x;
}

/* n samples "NNN.npy" in sub (reversed names when rev) of uniform [-1, 1) data; sample 2 has an
 * outlier 50 at element 3 and a NaN at element 5. */
static void write_samples(const char *sub, int n, int rev)
{
	float v[ROWS * COLS];
	char rel[64];
	uint64_t s = 3;

	cr_assert_eq(mkdir(at(sub), 0700), 0);
	for (int i = 0; i < n; i++) {
		for (int k = 0; k < ROWS * COLS; k++)
			v[k] = 2 * unif(&s) - 1;
		if (i == 2) {
			v[3] = 50;
			v[5] = NAN;
		}
		snprintf(rel, sizeof rel, "%s/%03d.npy", sub, rev ? n - 1 - i : i);
		sample(rel, v);
	}
}

Test(observers, ema_through_calibrate, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges r;
	oq_diag d;
	float v[ROWS * COLS];
	const float ranges[3][2] = {{0, 1}, {-1, 2}, {0, 4}};

	/* sample i: all values inside ranges[i], ends present */
	cr_assert_eq(mkdir(at("e"), 0700), 0);
	for (int i = 0; i < 3; i++) {
		char rel[32];
		for (int k = 0; k < ROWS * COLS; k++)
			v[k] = ranges[i][0] + (ranges[i][1] - ranges[i][0]) * (float)(k % 7) / 6;
		snprintf(rel, sizeof rel, "e/%03d.npy", i);
		sample(rel, v);
	}
	build(&f);
	cr_assert_eq(calib(&f, at("e"), OQ_CALIB_EMA, 1, 0.5, 0, &r, &d), OQ_OK, "%s", d.msg);
	/* x: [0,1] -> [-0.5,1.5] -> [-0.25,2.75]; r = Relu(x): [0,1] -> [0,1.5] -> [0,2.75] */
	cr_expect(find(&r, "x")->min == -0.25f && find(&r, "x")->max == 2.75f, "%g %g",
	          find(&r, "x")->min, find(&r, "x")->max);
	cr_expect(find(&r, "r")->min == 0 && find(&r, "r")->max == 2.75f);
	oq_ranges_free(&r);
	/* the default constant 0.01 */
	cr_assert_eq(calib(&f, at("e"), OQ_CALIB_EMA, 1, 0, 0, &r, &d), OQ_OK, "%s", d.msg);
	/* x hi: 1 -> 1.01 -> 1.01 + 0.01 * 2.99 = 1.0399 */
	cr_expect(fabsf(find(&r, "x")->max - 1.0399f) < 1e-6f, "%.8g", find(&r, "x")->max);
	oq_ranges_free(&r);
	unbuild(&f);
}

Test(observers, outlier_clipped_except_by_minmax, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges r;
	oq_diag d;
	const int methods[] = {OQ_CALIB_PERCENTILE, OQ_CALIB_ENTROPY};

	/* not mse: for 4096 values keeping the 50 costs 4096 (51/255)^2 / 12 = 13.6 in squared
	 * error, clipping it 49^2 = 2401, so mse rightly keeps it (mse_clips_outlier_... uses 2M) */
	write_samples("s", 16, 0);
	build(&f);
	cr_assert_eq(calib(&f, at("s"), OQ_CALIB_MINMAX, 1, 0, 0, &r, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(find(&r, "r")->max, 50);
	cr_expect_eq(find(&r, "x")->n_nan, 1);
	oq_ranges_free(&r);
	for (int i = 0; i < 2; i++) {
		double p = methods[i] == OQ_CALIB_PERCENTILE ? 99.9 : 0;
		cr_assert_eq(calib(&f, at("s"), methods[i], 1, p, 0, &r, &d), OQ_OK, "%s", d.msg);
		/* 16 x 256 values in [-1, 1) and one 50: both drop the outlier; entropy's smallest
		 * candidate is 128 bins of 2^-6 (e = 6: 50 < 64): 2 */
		cr_expect(find(&r, "r")->max < 3.2 && find(&r, "r")->max > 0.5, "%s: r max %g",
		          oq_calib_method_name(methods[i]), find(&r, "r")->max);
		cr_expect(find(&r, "x")->max < 3.2, "%s: x max %g", oq_calib_method_name(methods[i]),
		          find(&r, "x")->max);
		cr_expect(find(&r, "x")->min >= -1 && find(&r, "x")->min < -0.9, "%s: x min %g",
		          oq_calib_method_name(methods[i]), find(&r, "x")->min);
		cr_expect_eq(find(&r, "x")->n_nan, 1);
		oq_ranges_free(&r);
	}
	unbuild(&f);
}

Test(observers, order_and_threads_do_not_matter, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges a, b, c;
	oq_diag d;
	const int methods[] = {OQ_CALIB_PERCENTILE, OQ_CALIB_ENTROPY, OQ_CALIB_MSE};

	write_samples("fwd", 12, 0);
	write_samples("rev", 12, 1);
	build(&f);
	for (int i = 0; i < 3; i++) {
		double p = methods[i] == OQ_CALIB_PERCENTILE ? 99 : 0;
		cr_assert_eq(calib(&f, at("fwd"), methods[i], 1, p, 0, &a, &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(calib(&f, at("rev"), methods[i], 1, p, 0, &b, &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(calib(&f, at("fwd"), methods[i], 2, p, 0, &c, &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(a.n, b.n);
		cr_assert_eq(a.n, c.n);
		for (size_t k = 0; k < a.n; k++) {
			cr_expect(!memcmp(&a.v[k].min, &b.v[k].min, 4) &&
			              !memcmp(&a.v[k].max, &b.v[k].max, 4),
			          "%s %s: order changed [%a, %a] -> [%a, %a]",
			          oq_calib_method_name(methods[i]), a.v[k].name, a.v[k].min, a.v[k].max,
			          b.v[k].min, b.v[k].max);
			cr_expect(!memcmp(&a.v[k].min, &c.v[k].min, 4) &&
			              !memcmp(&a.v[k].max, &c.v[k].max, 4),
			          "%s %s: threads changed it", oq_calib_method_name(methods[i]),
			          a.v[k].name);
		}
		/* y (MatMul) is a real test of the threaded kernel: its range must not be trivial */
		cr_expect(find(&a, "y")->min < 0 && find(&a, "y")->max > 0);
		oq_ranges_free(&a);
		oq_ranges_free(&b);
		oq_ranges_free(&c);
	}
	unbuild(&f);
}

Test(observers, bad_settings_are_usage_errors, .init = setup, .fini = teardown)
{
	fixture f;
	oq_ranges r;
	oq_diag d;

	write_samples("s", 1, 0);
	build(&f);
	cr_expect_eq(calib(&f, at("s"), OQ_CALIB_ENTROPY, 1, 0, OQ_DT_INT16, &r, &d), OQ_EUSAGE);
	cr_expect(strstr(d.msg, "mse or percentile") != NULL, "%s", d.msg);
	cr_expect_eq(calib(&f, at("s"), OQ_CALIB_PERCENTILE, 1, 101, 0, &r, &d), OQ_EUSAGE);
	cr_expect_eq(calib(&f, at("s"), OQ_CALIB_EMA, 1, 2, 0, &r, &d), OQ_EUSAGE);
	cr_expect_eq(calib(&f, at("s"), 9, 1, 0, 0, &r, &d), OQ_EUSAGE);
	/* 16-bit mse and percentile are fine */
	cr_expect_eq(calib(&f, at("s"), OQ_CALIB_MSE, 1, 0, OQ_DT_INT16, &r, &d), OQ_OK, "%s", d.msg);
	oq_ranges_free(&r);
	unbuild(&f);
}

Test(observers, method_names)
{
	cr_expect_eq(oq_calib_method_parse("minmax"), OQ_CALIB_MINMAX);
	cr_expect_eq(oq_calib_method_parse("mse"), OQ_CALIB_MSE);
	cr_expect_eq(oq_calib_method_parse("kl"), -1);
	cr_expect_str_eq(oq_calib_method_name(OQ_CALIB_ENTROPY), "entropy");
}

/* ------------------------------------------------------------ per-tensor grids */

/* oq_calib_grid_fn as the pipeline's: the quantize pass' resolution (ctx: its options). */
static int pass_grid(void *ctx, const oq_value *v, int *dtype, int *act_sym, oq_diag *d)
{
	const oq_opts *q = ctx;
	return oq_quantize_act_grid(q, v, oq_quantize_grid_node(q, v), dtype, act_sym, d);
}

#define BIG 65536

/*
 * x float[1, 65536] -> Relu -> r, 16 samples of uniform [0, 1) and one 20 (sample 5). For r:
 *   uint8 (s = t/255): keeping the 20 costs about N s^2/12 = 1M (20/255)^2/12 = 512 in squared
 *     error, clipping it to t ~ 1 costs (20 - t)^2 ~ 361: mse clips, far below 20;
 *   int16 (s = t/65535): keeping it costs 1M (20/65535)^2/12 < 0.01, any clipping below 20
 *     costs (20 - t)^2: mse keeps [0, 20] exactly.
 * A tensor override {"r": {"dtype": "int16"}} (or a node override on relu) must give r the
 * int16 search, equal to oq_select_mse on r's bins with int16, while x keeps uint8's.
 */
Test(observers, per_tensor_grid_from_overrides, .init = setup, .fini = teardown)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	oq_model *m;
	oq_diag d;
	oq_opts q;
	oq_override ov;
	oq_calib_opts o;
	oq_ranges r8, r16, rn;
	oq_hist h;
	oq_hbins b;
	float *v = malloc(BIG * sizeof *v), amax = 0, vmin = INFINITY;
	uint64_t s = 17;
	double lo, hi;

	cr_assert_not_null(v);
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, BIG));
	gen_node(g, mg, "Relu", "relu", "x", "r");
	gen_output(g, mg, "r", OQ_DT_FLOAT, GEN_SHAPE(1, BIG));
	oq_diag_init(&d);
	cr_assert_eq(gen_load(g, &m, &d), OQ_OK, "%s", d.msg);
	cr_assert_eq(mkdir(at("c"), 0700), 0);
	oq_hist_init(&h);
	for (int i = 0; i < 16; i++) {
		char rel[32];
		for (int k = 0; k < BIG; k++)
			v[k] = unif(&s);
		if (i == 5)
			v[77] = 20;
		snprintf(rel, sizeof rel, "c/%03d.npy", i);
		cr_assert_eq(oq_npy_write(at(rel), OQ_DT_FLOAT, 2, (const int64_t[]){1, BIG}, v,
		                          BIG * 4, &d), OQ_OK, "%s", d.msg);
		for (int k = 0; k < BIG; k++) {
			amax = v[k] > amax ? v[k] : amax;
			vmin = v[k] < vmin ? v[k] : vmin;
		}
		cr_assert_eq(oq_hist_add_f32(&h, v, BIG, amax), OQ_OK);
	}
	oq_opts_init(&q);
	memset(&ov, 0, sizeof ov);
	ov.name = "r";
	ov.dtype = OQ_DT_INT16;
	ov.symmetric = -1;
	ov.granularity = -1;
	memset(&o, 0, sizeof o);
	o.source = at("c");
	o.threads = 1;
	o.method = OQ_CALIB_MSE;
	o.grid = pass_grid;
	o.grid_ctx = &q;
	cr_assert_eq(oq_calibrate(m, &o, &r8, &d), OQ_OK, "%s", d.msg);
	q.overrides = &ov;
	q.n_overrides = 1;
	cr_assert_eq(oq_calibrate(m, &o, &r16, &d), OQ_OK, "%s", d.msg);
	ov.name = "relu"; /* the same as a node entry of r's producer */
	ov.is_node = 1;
	cr_assert_eq(oq_calibrate(m, &o, &rn, &d), OQ_OK, "%s", d.msg);

	/* (no exact 0 in the data: r's minimum is the data's smallest value) */
	cr_expect(find(&r8, "r")->max < 10 && find(&r8, "r")->min == vmin, "uint8: r [%g, %g]",
	          find(&r8, "r")->min, find(&r8, "r")->max);
	cr_expect(find(&r16, "r")->min == vmin && find(&r16, "r")->max == 20, "int16: r [%g, %g]",
	          find(&r16, "r")->min, find(&r16, "r")->max);
	cr_assert_eq(oq_hist_view(&h, vmin, 20, 0, &b), OQ_OK);
	cr_assert_eq(oq_select_mse(&b, vmin, 20, OQ_DT_INT16, OQ_QP_ASYM, &lo, &hi), OQ_OK);
	cr_expect(find(&r16, "r")->min == (float)lo && find(&r16, "r")->max == (float)hi,
	          "direct int16 search [%g, %g]", lo, hi);
	cr_assert_eq(oq_select_mse(&b, vmin, 20, OQ_DT_UINT8, OQ_QP_ASYM, &lo, &hi), OQ_OK);
	cr_expect(find(&r8, "r")->max == (float)hi, "direct uint8 search [%g, %g]", lo, hi);
	/* the node entry gives the same; x (no entry) keeps the uint8 search in every run */
	cr_expect(find(&rn, "r")->max == 20);
	cr_expect(find(&r16, "x")->max == find(&r8, "x")->max && find(&r8, "x")->max < 10);
	/* entropy has no 16-bit search: a usage error naming the tensor */
	o.method = OQ_CALIB_ENTROPY;
	oq_diag_init(&d);
	oq_ranges_free(&rn); /* oq_calibrate fills it anew */
	cr_expect_eq(oq_calibrate(m, &o, &rn, &d), OQ_EUSAGE);
	cr_expect(strstr(d.msg, "'r'") && strstr(d.msg, "int16"), "%s", d.msg);
	oq_hbins_free(&b);
	oq_hist_free(&h);
	oq_ranges_free(&r8);
	oq_ranges_free(&r16);
	oq_ranges_free(&rn);
	oq_model_free(m);
	gen_free(g);
	free(v);
}
