/*
 * signal.c - kernel family 'signal': DFT, STFT, the window
 * generators (HannWindow, HammingWindow, BlackmanWindow), MelWeightMatrix
 * and Det. Specs: https://onnx.ai/onnx/operators/ (opset 17; DFT 20).
 *
 * Compute type: double. The transforms are the direct O(n^2) sum
 *   X[k] = sum_j x[j] * exp(-+2*pi*i * k * j / n)
 * with the twiddle angle taken from (k * j) mod n, so every term uses an
 * angle in [0, 2*pi) and large k * j products lose no precision; the
 * inverse divides by n. Each output element is one fixed sum in index
 * order, so results do not depend on --threads. Sizes in these ops are
 * small (audio frames, test tensors); a fast (radix-2/Bluestein) path can
 * join behind the same interface when a model needs it.
 *
 * Det: LU decomposition with partial pivoting in double per matrix.
 */
#include "calib/kernels/kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* A scalar (or one-element) integer input; OQ_EINVAL with a message when absent or not one element. */
static int scalar_int(oq_kctx *k, size_t i, const char *what, int64_t *v)
{
	const oq_rt *t = oq_k_in(k, i);
	if (!t || t->nelem != 1 || oq_dtype_kind(t->dtype) == 'S')
		return oq_k_err(k, OQ_EINVAL, "input '%s' must be a scalar", what);
	*v = oq_rt_get_int(t, 0);
	return OQ_OK;
}

static int scalar_f(oq_kctx *k, size_t i, const char *what, double *v)
{
	const oq_rt *t = oq_k_in(k, i);
	if (!t || t->nelem != 1 || oq_dtype_kind(t->dtype) == 'S')
		return oq_k_err(k, OQ_EINVAL, "input '%s' must be a scalar", what);
	*v = oq_rt_get(t, 0);
	return OQ_OK;
}

/* The output_datatype attribute as a numeric dtype (default float). */
static int out_dtype(oq_kctx *k, int *dt)
{
	int64_t v = oq_k_int(k, "output_datatype", OQ_DT_FLOAT);
	char kd = oq_dtype_valid((int)v) ? oq_dtype_kind((int)v) : '-';
	if (v < 0 || v > 64 || (kd != 'f' && kd != 's' && kd != 'u') || oq_dtype_is_subbyte((int)v) ||
	    oq_dtype_is_float8((int)v))
		return oq_k_err(k, OQ_EUNSUP, "output_datatype %lld is not a supported numeric type", (long long)v);
	*dt = (int)v;
	return OQ_OK;
}

/* ------------------------------------------------------------------ DFT */

/*
 * One 1-D transform of length n from `in` (m complex points, zero padded
 * or truncated to n; stride in complex elements) to `out` (nout points).
 */
static void dft1(const double *in, size_t m, size_t istride, double *out, size_t nout, size_t ostride, size_t n,
		 int inverse)
{
	double sgn = inverse ? 1.0 : -1.0;
	size_t len = m < n ? m : n;
	for (size_t kk = 0; kk < nout; kk++) {
		double re = 0, im = 0;
		for (size_t j = 0; j < len; j++) {
			size_t r = (size_t)(((unsigned long long)kk * j) % n);
			double a = sgn * 2.0 * M_PI * (double)r / (double)n, c = cos(a), s = sin(a);
			double xr = in[2 * j * istride], xi = in[2 * j * istride + 1];
			re += xr * c - xi * s;
			im += xr * s + xi * c;
		}
		if (inverse) {
			re /= (double)n;
			im /= (double)n;
		}
		out[2 * kk * ostride] = re;
		out[2 * kk * ostride + 1] = im;
	}
}

static int dft(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t axis, n;
	int inverse = (int)oq_k_int(k, "inverse", 0), onesided = (int)oq_k_int(k, "onesided", 0), ax, rc;
	int64_t od[OQ_RT_MAX_RANK];
	double *xi = NULL, *yo = NULL;
	size_t outer = 1, inner = 1, nout;

	if (!x || x->rank < 2 || (x->dims[x->rank - 1] != 1 && x->dims[x->rank - 1] != 2) ||
	    oq_dtype_kind(x->dtype) != 'f')
		return oq_k_err(k, OQ_EINVAL, "input must be a float tensor [batch, ..., 1 or 2]");
	if (k->opset >= 20) {
		axis = -2;
		if (oq_k_in(k, 2) && (rc = scalar_int(k, 2, "axis", &axis)))
			return rc;
	} else {
		axis = oq_k_int(k, "axis", 1);
	}
	ax = oq_axis(axis, x->rank);
	if (ax < 0 || ax == x->rank - 1)
		return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range for rank %d (the last dim holds re/im)",
				(long long)axis, x->rank);
	n = x->dims[ax];
	if (oq_k_in(k, 1) && (rc = scalar_int(k, 1, "dft_length", &n)))
		return rc;
	if (n < 1)
		return oq_k_err(k, OQ_EINVAL, "dft_length %lld must be positive", (long long)n);
	if (onesided && inverse)
		return oq_k_err(k, OQ_EUNSUP, "onesided inverse DFT is not supported; give the full spectrum");
	nout = onesided ? (size_t)n / 2 + 1 : (size_t)n;
	memcpy(od, x->dims, (size_t)x->rank * sizeof *od);
	od[ax] = (int64_t)nout;
	od[x->rank - 1] = 2;
	if ((rc = oq_k_output_raw(k, 0, x->dtype, x->rank, od, &y)))
		return rc;
	for (int i = 0; i < ax; i++)
		outer *= (size_t)x->dims[i];
	for (int i = ax + 1; i < x->rank - 1; i++)
		inner *= (size_t)x->dims[i];
	/* complex double copy of x (imaginary 0 for real input) */
	{
		size_t pts = x->nelem / (size_t)x->dims[x->rank - 1];
		int cplx = x->dims[x->rank - 1] == 2;
		xi = oq_calloc(pts ? pts * 2 : 1, sizeof *xi);
		yo = oq_calloc(y->nelem ? y->nelem : 1, sizeof *yo);
		if (!xi || !yo) {
			rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
			goto done;
		}
		for (size_t p = 0; p < pts; p++) {
			xi[2 * p] = oq_rt_get(x, cplx ? 2 * p : p);
			xi[2 * p + 1] = cplx ? oq_rt_get(x, 2 * p + 1) : 0.0;
		}
	}
	for (size_t o = 0; o < outer; o++)
		for (size_t i = 0; i < inner; i++)
			dft1(xi + 2 * (o * (size_t)x->dims[ax] * inner + i), (size_t)x->dims[ax], inner,
			     yo + 2 * (o * nout * inner + i), nout, inner, (size_t)n, inverse);
	for (size_t p = 0; p < y->nelem; p++)
		oq_rt_set(y, p, yo[p]);
done:
	free(xi);
	free(yo);
	return rc;
}

/* ----------------------------------------------------------------- STFT */

static int stft(oq_kctx *k)
{
	oq_rt *s = oq_k_in(k, 0), *w = oq_k_in(k, 2), *y;
	int64_t step = 0, flen = -1, od[4];
	int onesided = (int)oq_k_int(k, "onesided", 1), rc, cplx;
	size_t frames, bins, len;
	double *fr = NULL, *sp = NULL;

	if (!s || s->rank != 3 || (s->dims[2] != 1 && s->dims[2] != 2) || oq_dtype_kind(s->dtype) != 'f')
		return oq_k_err(k, OQ_EINVAL, "signal must be a float tensor [batch, length, 1 or 2]");
	if ((rc = scalar_int(k, 1, "frame_step", &step)))
		return rc;
	if (oq_k_in(k, 3) && (rc = scalar_int(k, 3, "frame_length", &flen)))
		return rc;
	if (w && (w->rank != 1 || (flen >= 0 && w->dims[0] != flen)))
		return oq_k_err(k, OQ_EINVAL, "window must be 1-D of frame_length elements");
	if (flen < 0)
		flen = w ? w->dims[0] : -1;
	if (flen < 1 || step < 1 || flen > s->dims[1])
		return oq_k_err(k, OQ_EINVAL,
				"need frame_length (input or window size) in [1, %lld] and frame_step >= 1",
				(long long)s->dims[1]);
	cplx = s->dims[2] == 2;
	if (onesided && cplx)
		return oq_k_err(k, OQ_EINVAL, "onesided needs a real signal (last dim 1)");
	frames = (size_t)((s->dims[1] - flen) / step) + 1;
	bins = onesided ? (size_t)flen / 2 + 1 : (size_t)flen;
	len = (size_t)flen;
	od[0] = s->dims[0];
	od[1] = (int64_t)frames;
	od[2] = (int64_t)bins;
	od[3] = 2;
	if ((rc = oq_k_output_raw(k, 0, s->dtype, 4, od, &y)))
		return rc;
	fr = oq_calloc(2 * len, sizeof *fr);
	sp = oq_calloc(2 * bins, sizeof *sp);
	if (!fr || !sp) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto done;
	}
	for (int64_t b = 0; b < s->dims[0]; b++)
		for (size_t f = 0; f < frames; f++) {
			for (size_t j = 0; j < len; j++) {
				size_t at = ((size_t)b * (size_t)s->dims[1] + f * (size_t)step + j) * (cplx ? 2 : 1);
				double wj = w ? oq_rt_get(w, j) : 1.0;
				fr[2 * j] = oq_rt_get(s, at) * wj;
				fr[2 * j + 1] = cplx ? oq_rt_get(s, at + 1) * wj : 0.0;
			}
			dft1(fr, len, 1, sp, bins, 1, len, 0);
			for (size_t j = 0; j < 2 * bins; j++)
				oq_rt_set(y, ((size_t)b * frames + f) * bins * 2 + j, sp[j]);
		}
done:
	free(fr);
	free(sp);
	return rc;
}

/* -------------------------------------------------------------- windows */

/*
 * w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N = size (periodic)
 * or size - 1 (symmetric): Hann (0.5, 0.5, 0), Hamming (25/46, 21/46, 0),
 * Blackman (0.42, 0.5, 0.08).
 */
static int window(oq_kctx *k, double a0, double a1, double a2)
{
	int64_t size;
	int dt, rc, periodic = oq_k_int(k, "periodic", 1) != 0;
	oq_rt *y;
	double den;

	if ((rc = scalar_int(k, 0, "size", &size)) || (rc = out_dtype(k, &dt)))
		return rc;
	if (size < 0)
		return oq_k_err(k, OQ_EINVAL, "size %lld must not be negative", (long long)size);
	if ((rc = oq_k_output_raw(k, 0, dt, 1, &size, &y)))
		return rc;
	den = periodic ? (double)size : (double)size - 1;
	for (int64_t i = 0; i < size; i++) {
		double t = den > 0 ? 2.0 * M_PI * (double)i / den : 0.0;
		oq_rt_set(y, (size_t)i, a0 - a1 * cos(t) + a2 * cos(2 * t));
	}
	return OQ_OK;
}

static int hann(oq_kctx *k) { return window(k, 0.5, 0.5, 0.0); }
static int hamming(oq_kctx *k) { return window(k, 25.0 / 46.0, 21.0 / 46.0, 0.0); }
static int blackman(oq_kctx *k) { return window(k, 0.42, 0.5, 0.08); }

/* ------------------------------------------------------- MelWeightMatrix */

/*
 * Triangular filters on the mel scale, mel = 2595 log10(1 + hz / 700),
 * as the ONNX reference builds them: num_mel_bins + 2 points spaced by
 * (high - low) / (num_mel_bins + 2) mel, mapped to spectrogram bins
 * floor((dft_length + 1) * hz / sample_rate); filter i rises from point i
 * to i + 1 and falls to i + 2.
 */
static int melweight(oq_kctx *k)
{
	int64_t nmel = 0, dftlen = 0, rate = 0, od[2], *pt = NULL;
	double lo = 0, hi = 0, mlo, mhi, step;
	int dt, rc;
	size_t nspec;
	oq_rt *y;

	if ((rc = scalar_int(k, 0, "num_mel_bins", &nmel)) || (rc = scalar_int(k, 1, "dft_length", &dftlen)) ||
	    (rc = scalar_int(k, 2, "sample_rate", &rate)) || (rc = scalar_f(k, 3, "lower_edge_hertz", &lo)) ||
	    (rc = scalar_f(k, 4, "upper_edge_hertz", &hi)) || (rc = out_dtype(k, &dt)))
		return rc;
	if (nmel < 1 || nmel > (1 << 20) || dftlen < 1 || rate < 1 || !(lo >= 0 && hi > lo))
		return oq_k_err(k, OQ_EINVAL,
				"need num_mel_bins, dft_length, sample_rate > 0 and 0 <= lower_edge_hertz < "
				"upper_edge_hertz");
	nspec = (size_t)dftlen / 2 + 1;
	od[0] = (int64_t)nspec;
	od[1] = nmel;
	if ((rc = oq_k_output(k, 0, dt, 2, od, &y)))
		return rc;
	if (!(pt = oq_calloc((size_t)nmel + 2, sizeof *pt)))
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	mlo = 2595.0 * log10(1.0 + lo / 700.0);
	mhi = 2595.0 * log10(1.0 + hi / 700.0);
	step = (mhi - mlo) / (double)(nmel + 2);
	for (int64_t i = 0; i < nmel + 2; i++) {
		double hz = 700.0 * (pow(10.0, ((double)i * step + mlo) / 2595.0) - 1.0);
		pt[i] = (int64_t)floor((double)(dftlen + 1) * hz / (double)rate);
		if (pt[i] < 0 || (size_t)pt[i] >= nspec) {
			free(pt);
			return oq_k_err(k, OQ_EINVAL, "upper_edge_hertz %g maps beyond the %zu spectrogram bins", hi,
					nspec);
		}
	}
	for (int64_t i = 0; i < nmel; i++) {
		int64_t l = pt[i], c = pt[i + 1], h = pt[i + 2];
		if (c == l)
			oq_rt_set(y, (size_t)(c * nmel + i), 1.0);
		else
			for (int64_t j = l; j <= c; j++)
				oq_rt_set(y, (size_t)(j * nmel + i), (double)(j - l) / (double)(c - l));
		for (int64_t j = c; h > c && j < h; j++)
			oq_rt_set(y, (size_t)(j * nmel + i), (double)(h - j) / (double)(h - c));
	}
	free(pt);
	return OQ_OK;
}

/* ------------------------------------------------------------------ Det */

static int det(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	size_t m, nmat;
	double *a;
	int rc;

	if (!x || x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2] || oq_dtype_kind(x->dtype) != 'f')
		return oq_k_err(k, OQ_EINVAL, "input must be a float tensor [..., M, M]");
	if ((rc = oq_k_output_raw(k, 0, x->dtype, x->rank - 2, x->dims, &y)))
		return rc;
	m = (size_t)x->dims[x->rank - 1];
	nmat = y->nelem;
	if (!(a = oq_calloc(m > 0 ? m * m : 1, sizeof *a)))
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	for (size_t b = 0; b < nmat; b++) {
		double d = 1.0;
		for (size_t i = 0; i < m * m; i++)
			a[i] = oq_rt_get(x, b * m * m + i);
		for (size_t c = 0; c < m && d != 0.0; c++) {
			size_t p = c;
			for (size_t r = c + 1; r < m; r++)
				if (fabs(a[r * m + c]) > fabs(a[p * m + c]))
					p = r;
			if (a[p * m + c] == 0.0) {
				d = 0.0;
				break;
			}
			if (p != c) {
				for (size_t j = 0; j < m; j++) {
					double t = a[c * m + j];
					a[c * m + j] = a[p * m + j];
					a[p * m + j] = t;
				}
				d = -d;
			}
			d *= a[c * m + c];
			for (size_t r = c + 1; r < m; r++) {
				double f = a[r * m + c] / a[c * m + c];
				for (size_t j = c; j < m; j++)
					a[r * m + j] -= f * a[c * m + j];
			}
		}
		oq_rt_set(y, b, d);
	}
	free(a);
	return OQ_OK;
}

const oq_kreg oq_kernels_signal[] = {
	{OQ_OP_DFT, 0, dft},
	{OQ_OP_STFT, 0, stft},
	{OQ_OP_HannWindow, 0, hann},
	{OQ_OP_HammingWindow, 0, hamming},
	{OQ_OP_BlackmanWindow, 0, blackman},
	{OQ_OP_MelWeightMatrix, 0, melweight},
	{OQ_OP_Det, 0, det},
	{OQ_OP_UNKNOWN, 0, NULL},
};
