/*
 * qweight.c - quantizing constant tensors and the initializer + DQ rewrite.
 *
 *   W (float initializer) -> N        ==>   W_q (int), s, zp -> DequantizeLinear -> N
 *   B (float bias)        -> N        ==>   B_q (int32), s_b -> DequantizeLinear -> N
 *
 * Grouping: w is viewed as [outer, D, inner] around `axis`; element
 * (o, a, i) uses scale entry o*so + (a/blk)*sa + i*si, with
 *   per tensor: so = sa = si = 0 (one scale, rank 0);
 *   per axis:   sa = 1 (scale [D], DQ attribute axis);
 *   blocked:    blk = B, nb = ceil(D/B), so = nb*inner, sa = inner, si = 1
 *               (scale has w's dims with nb on axis: the opset-21 layout,
 *               the last block may be partial).
 * Each group's [min, max] goes through oq_qparams (src/quant/qparams.c) with the
 * symmetric narrow/full or asymmetric form; values are quantized with
 * rintf(x / scale) + zp in float32 (ties to even) and saturated. 4-bit
 * values are packed two per byte, element 2k in the low nibble.
 * float8e4m3fn: scale = amax / 448, zero point +0, each value encoded from
 * x / scale + 0 in float32 by the executor's E4M3FN encoder (ties to even,
 * saturate=1), so the stored bits are what QuantizeLinear would give.
 *
 * --weight-method mse (oq_wspec.mse): candidate ranges are scored by the
 * exact squared error sum (x - DQ(Q(x)))^2 over each group, one pass over
 * the weight per candidate (all groups at once): 100 candidates for the
 * symmetric forms and FP8, 300 (joint, upper end, lower end) asymmetric.
 *
 * Bias (REFERENCE.md section 2): int32, zero point omitted (0),
 *   bias_scale[c] = in_scale * w_scale[c] * beta  (float32 products as ORT),
 *   q = round_half_even(b / bias_scale).
 * If |q| > 2^31-1 for channel c, w_scale[c] is enlarged to
 *   |b| / (in_scale * beta * (2^31-1)) * (1 + 2^-20)
 * and channel c of the weight is re-quantized with it (ORT PR #22020).
 * Blocked weights have no per-channel scale, so their bias stays float.
 *
 * Sharing: the float initializer is never changed; the quantized tensors are
 * new initializers and the float one is removed once nothing reads it.
 * A weight already quantized with the same result (tied embeddings, a
 * weight read by two MatMuls) reuses the existing DequantizeLinear: we look
 * for a DQ whose x is an initializer named <w>_quantized* with the same
 * bytes, scale, zero point and attributes. Comparing content instead of
 * keeping a cache keeps no state outside the graph.
 *
 * Streaming: a weight borrowed from a read-only file mapping is read in
 * place (unaligned loads through memcpy, no copy), and its pages are given
 * back with madvise(MADV_DONTNEED) once quantized, so peak RSS follows the
 * quantized output, not the float model.
 */
#include "passes/quantize/qweight.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "src/quant/qparams.h"
#include "src/quant/quant_math.h"

/* How elements of w map to scale groups (see the header comment). */
typedef struct wlayout {
	size_t outer;               /* product of dims before the axis (all dims when per tensor) */
	size_t alen;                /* dims[axis] (1 when per tensor) */
	size_t inner;               /* product of dims after the axis */
	size_t blk;                 /* elements along the axis that share a scale */
	size_t so, sa, si;          /* group strides for outer, axis block and inner */
	size_t ngroups;             /* number of scales */
	int srank;                  /* rank of the scale tensor */
	int64_t sdims[OQ_MAX_RANK]; /* its dims */
} wlayout;

/* A weight being quantized: per-group state kept until the tensors are built. */
typedef struct wq {
	wlayout L;          /* grouping */
	int form;           /* OQ_QP_* */
	int fp8;            /* float8e4m3fn (qmin/qmax unused) */
	int mse;            /* --weight-method mse */
	int64_t qmin, qmax; /* grid */
	const uint8_t *up;  /* learned rounding directions (oq_wspec.round_up), or NULL */
	const float *up_scale; /* the per-group scales they were learned on */
	float *mn, *mx;     /* per group observed range */
	float *scale;       /* per group scale */
	int64_t *zp;        /* per group zero point */
	oq_tensor *q;       /* quantized values, w's dims */
} wq;

static void wq_free(wq *st)
{
	free(st->mn);
	free(st->mx);
	free(st->scale);
	free(st->zp);
	oq_tensor_free(st->q);
	memset(st, 0, sizeof *st);
}

static const char *tname(const oq_tensor *t)
{
	return t->name && *t->name ? t->name : "?";
}

static float ld(const oq_tensor *w, size_t i)
{
	float x;
	memcpy(&x, (const unsigned char *)w->data + i * 4, 4);
	return x;
}

/* Stores v (already on the grid) as element i of an integer buffer of `dtype`. */
static void put(unsigned char *buf, int dtype, size_t i, int64_t v)
{
	switch (dtype) {
	case OQ_DT_INT8: {
		int8_t x = (int8_t)v;
		memcpy(buf + i, &x, 1);
		break;
	}
	case OQ_DT_UINT8:
	case OQ_DT_FLOAT8E4M3FN: /* v is the encoding */
		buf[i] = (unsigned char)v;
		break;
	case OQ_DT_INT16: {
		int16_t x = (int16_t)v;
		memcpy(buf + 2 * i, &x, 2);
		break;
	}
	case OQ_DT_UINT16: {
		uint16_t x = (uint16_t)v;
		memcpy(buf + 2 * i, &x, 2);
		break;
	}
	case OQ_DT_INT32: {
		int32_t x = (int32_t)v;
		memcpy(buf + 4 * i, &x, 4);
		break;
	}
	case OQ_DT_INT4:
	case OQ_DT_UINT4: {
		unsigned sh = (unsigned)(4 * (i % 2));
		buf[i / 2] =
		    (unsigned char)((buf[i / 2] & ~(0xFu << sh)) | (((unsigned)v & 0xFu) << sh));
		break;
	}
	default: break;
	}
}

static int layout(const oq_tensor *w, const oq_wspec *s, wlayout *L, oq_diag *d)
{
	memset(L, 0, sizeof *L);
	if (s->block_size > 0 && s->axis < 0)
		return oq_err(d, OQ_EINVAL, "quantize: weight '%s': block_size %lld needs an axis",
		              tname(w), (long long)s->block_size);
	if (s->axis >= w->rank)
		return oq_err(d, OQ_EINVAL,
		              "quantize: weight '%s': axis %d is out of range for rank %d",
		              tname(w), s->axis, w->rank);
	if (s->axis < 0) {
		L->outer = w->nelem;
		L->alen = 1;
		L->inner = 1;
		L->blk = 1;
		L->ngroups = 1;
		return OQ_OK;
	}
	L->outer = 1;
	L->inner = 1;
	for (int k = 0; k < w->rank; k++) {
		if (k < s->axis)
			L->outer *=
			    (size_t)w->dims[k]; /* nelem fits, so every partial product does */
		else if (k > s->axis)
			L->inner *= (size_t)w->dims[k];
		L->sdims[k] = w->dims[k];
	}
	L->alen = (size_t)w->dims[s->axis];
	if (s->block_size > 0) {
		size_t nb =
		    L->alen / (size_t)s->block_size + (L->alen % (size_t)s->block_size != 0);
		L->blk = (size_t)s->block_size;
		L->si = 1;
		L->sa = L->inner;
		L->so = nb * L->inner;
		L->ngroups = L->outer * nb * L->inner;
		L->srank = w->rank;
		L->sdims[s->axis] = (int64_t)nb;
	} else {
		L->blk = 1;
		L->sa = 1;
		L->ngroups = L->alen;
		L->srank = 1;
		L->sdims[0] = (int64_t)L->alen;
	}
	if (L->ngroups == 0)
		L->ngroups = 1; /* empty weight: keep one (unused) scale slot for the arrays */
	return OQ_OK;
}

/* Dequantized x with one group's parameters (the round trip DQ(Q(x))). */
static inline float roundtrip(const wq *st, float x, float s, int64_t zp)
{
	if (st->fp8)
		return oq_fp8_round(x, s) * s;
	return (float)(oq_quantize_value(x, s, zp, st->qmin, st->qmax) - zp) * s;
}

/* Candidate range of phase ph: both ends (0), the upper (1) or the lower (2) scaled by f;
 * a kept end comes from [flo, fhi], the best range when the phase started. */
static void candidate(int ph, float f, float mn, float mx, float flo, float fhi, float *lo,
                      float *hi)
{
	*lo = ph == 1 ? flo : mn * f;
	*hi = ph == 2 ? fhi : mx * f;
}

/*
 * --weight-method mse: replaces each group's [mn, mx] by the candidate range
 * (see qweight.h) with the least squared round-trip error. Phase 0 scales
 * both ends by f; asymmetric phases 1 and 2 scale one end, the other kept
 * at the phase's starting best. OQ_ENOMEM on allocation failure.
 */
static int mse_search(const oq_tensor *w, wq *st, int dtype, int reduce_range)
{
	const wlayout *L = &st->L;
	size_t ng = L->ngroups;
	int nphase = st->form == OQ_QP_ASYM ? 3 : 1, rc = OQ_ENOMEM;
	double *err = oq_calloc(ng, sizeof *err), *best = oq_calloc(ng, sizeof *best);
	float *blo = oq_calloc(ng, sizeof *blo), *bhi = oq_calloc(ng, sizeof *bhi);
	float *flo = oq_calloc(ng, sizeof *flo), *fhi = oq_calloc(ng, sizeof *fhi);
	float *cs = oq_calloc(ng, sizeof *cs);
	int64_t *cz = oq_calloc(ng, sizeof *cz);

	if (!err || !best || !blo || !bhi || !flo || !fhi || !cs || !cz)
		goto out;
	for (size_t g = 0; g < ng; g++) {
		blo[g] = st->mn[g];
		bhi[g] = st->mx[g];
		best[g] = INFINITY;
	}
	for (int ph = 0; ph < nphase; ph++) {
		memcpy(flo, blo, ng * sizeof *flo);
		memcpy(fhi, bhi, ng * sizeof *fhi);
		for (int k = ph ? 1 : 0; k < 100; k++) {
			/* f in float so the candidates are the same numbers on every machine */
			float f = 1.0f - (float)k / 100.0f;
			size_t idx = 0;
			for (size_t g = 0; g < ng; g++) {
				float lo, hi;
				candidate(ph, f, st->mn[g], st->mx[g], flo[g], fhi[g], &lo, &hi);
				err[g] = 0;
				if (oq_qparams(lo, hi, dtype, st->form, reduce_range, &cs[g], &cz[g]))
					err[g] = INFINITY; /* never chosen */
			}
			for (size_t o = 0; o < L->outer; o++)
				for (size_t a = 0; a < L->alen; a++) {
					size_t gb = o * L->so + (a / L->blk) * L->sa;
					for (size_t i = 0; i < L->inner; i++, idx++) {
						size_t g = gb + i * L->si;
						float x = ld(w, idx);
						double e = (double)x - (double)roundtrip(st, x, cs[g], cz[g]);
						err[g] += e * e;
					}
				}
			for (size_t g = 0; g < ng; g++)
				if (err[g] < best[g]) { /* strict: ties keep the wider (earlier) range */
					best[g] = err[g];
					candidate(ph, f, st->mn[g], st->mx[g], flo[g], fhi[g], &blo[g], &bhi[g]);
				}
		}
	}
	memcpy(st->mn, blo, ng * sizeof *blo);
	memcpy(st->mx, bhi, ng * sizeof *bhi);
	rc = OQ_OK;
out:
	free(err);
	free(best);
	free(blo);
	free(bhi);
	free(flo);
	free(fhi);
	free(cs);
	free(cz);
	return rc;
}

/* Range of each group, then scale and zero point. */
static int ranges(const oq_tensor *w, wq *st, int dtype, int reduce_range, oq_diag *d)
{
	const wlayout *L = &st->L;
	size_t idx = 0;

	for (size_t g = 0; g < L->ngroups; g++) {
		st->mn[g] = INFINITY;
		st->mx[g] = -INFINITY;
	}
	for (size_t o = 0; o < L->outer; o++)
		for (size_t a = 0; a < L->alen; a++) {
			size_t gb = o * L->so + (a / L->blk) * L->sa;
			for (size_t i = 0; i < L->inner; i++, idx++) {
				size_t g = gb + i * L->si;
				float x = ld(w, idx);
				if (isnan(x))
					return oq_err(d, OQ_EINVAL,
					              "quantize: weight '%s' holds NaN at element "
					              "%zu; fix the model",
					              tname(w), idx);
				if (x < st->mn[g])
					st->mn[g] = x;
				if (x > st->mx[g])
					st->mx[g] = x;
			}
		}
	for (size_t g = 0; g < L->ngroups; g++)
		if (st->mn[g] > st->mx[g])
			st->mn[g] = st->mx[g] = 0; /* empty group */
	if (st->mse && mse_search(w, st, dtype, reduce_range))
		return oq_err(d, OQ_ENOMEM, "quantize: weight '%s': out of memory", tname(w));
	for (size_t g = 0; g < L->ngroups; g++) {
		if (oq_qparams(st->mn[g], st->mx[g], dtype, st->form, reduce_range, &st->scale[g],
		               &st->zp[g]))
			return oq_err(d, OQ_EINVAL,
			              "quantize: weight '%s': no scale for range [%g, %g]",
			              tname(w), (double)st->mn[g], (double)st->mx[g]);
	}
	return OQ_OK;
}

/* The integer of element idx (group g): learned direction when it holds for g's scale, else nearest. */
static inline int64_t qval(const wq *st, const oq_tensor *w, size_t idx, size_t g)
{
	float x = ld(w, idx);
	if (st->up && st->scale[g] == st->up_scale[g]) {
		float v = floorf(x / st->scale[g]) + (float)st->up[idx] + (float)st->zp[g];
		return v <= (float)st->qmin ? st->qmin : v >= (float)st->qmax ? st->qmax : (int64_t)v;
	}
	return oq_quantize_value(x, st->scale[g], st->zp[g], st->qmin, st->qmax);
}

/* Quantizes every element of w (only group `only` when only != SIZE_MAX). */
static void quantize_elems(const oq_tensor *w, wq *st, int dtype, size_t only)
{
	const wlayout *L = &st->L;
	unsigned char *out = (unsigned char *)st->q->data;
	size_t idx = 0;
	int fast = L->si == 0 && !st->fp8 && !st->up && only == SIZE_MAX &&
		   (dtype == OQ_DT_INT8 || dtype == OQ_DT_UINT8);

	for (size_t o = 0; o < L->outer; o++)
		for (size_t a = 0; a < L->alen; a++) {
			size_t gb = o * L->so + (a / L->blk) * L->sa;
			if (fast) { /* one group for the whole run of inner elements */
				/* the per-element path's qval, as one row (its bits) */
				oq_quant_row8((const unsigned char *)w->data + 4 * idx, L->inner, st->scale[gb],
					      (int32_t)st->zp[gb], (int32_t)st->qmin, (int32_t)st->qmax, out + idx);
				idx += L->inner;
				continue;
			}
			for (size_t i = 0; i < L->inner; i++, idx++) {
				size_t g = gb + i * L->si;
				if (only != SIZE_MAX && g != only)
					continue;
				if (st->fp8)
					put(out, dtype, idx,
					    oq_smallfloat_from_f32(dtype, ld(w, idx) / st->scale[g] + 0.0f, 1));
				else
					put(out, dtype, idx, qval(st, w, idx, g));
			}
		}
}

/* Replaces the computed parameters by s->fixed_* (checked against the grid and the group count). */
static int fixed_params(const oq_tensor *w, const oq_wspec *s, wq *st, oq_diag *d)
{
	if (s->n_fixed != st->L.ngroups)
		return oq_err(d, OQ_EUSAGE,
		              "quantize: weight '%s': %zu fixed scales given, its layout has %zu groups "
		              "(check the granularity / axis / block size of the encodings)",
		              tname(w), s->n_fixed, st->L.ngroups);
	for (size_t g = 0; g < s->n_fixed; g++) {
		float sc = s->fixed_scale[g];
		int64_t z = s->fixed_zp[g];
		if (!(sc > 0) || !isfinite(sc))
			return oq_err(d, OQ_EUSAGE, "quantize: weight '%s': fixed scale %zu is %g; scales "
			                            "must be finite and > 0", tname(w), g, (double)sc);
		if (st->fp8 ? z != 0 : z < st->qmin || z > st->qmax)
			return oq_err(d, OQ_EUSAGE,
			              "quantize: weight '%s': fixed zero point %zu is %lld, outside the "
			              "%s grid", tname(w), g, (long long)z, oq_dtype_name(s->dtype));
		st->scale[g] = sc;
		st->zp[g] = z;
	}
	return OQ_OK;
}

static int wq_run(const oq_tensor *w, const oq_wspec *s, wq *st, oq_diag *d)
{
	int rc;

	memset(st, 0, sizeof *st);
	if (w->dtype != OQ_DT_FLOAT)
		return oq_err(d, OQ_EUNSUP,
		              "quantize: weight '%s' is %s; only float32 weights are quantized",
		              tname(w), oq_dtype_name(w->dtype));
	st->form = !s->symmetric                 ? OQ_QP_ASYM
	           : s->sym_grid == OQ_GRID_FULL ? OQ_QP_SYM_FULL
	                                         : OQ_QP_SYM_NARROW;
	st->mse = s->mse && !s->n_fixed; /* fixed scales replace the search's result anyway */
	if (oq_qtype_is_fp8(s->dtype)) {
		st->fp8 = 1;
		if (!s->symmetric || s->reduce_range || s->block_size > 0)
			return oq_err(d, OQ_EUSAGE,
			              "quantize: weight '%s': float8e4m3fn weights are symmetric, "
			              "per tensor or per channel (%s); change the options or override",
			              tname(w),
			              !s->symmetric   ? "asymmetric requested"
			              : s->block_size ? "blocks requested"
			                              : "reduce_range requested");
	} else if (!oq_qgrid(s->dtype, st->form, s->reduce_range, &st->qmin, &st->qmax))
		return oq_err(d, OQ_EUSAGE,
		              "quantize: weight '%s': cannot quantize to %s (use int8, uint8, "
		              "int16, uint16, int4, uint4 or float8e4m3fn)",
		              tname(w), oq_dtype_name(s->dtype));
	if ((rc = layout(w, s, &st->L, d)))
		return rc;
	st->mn = oq_calloc(st->L.ngroups, sizeof *st->mn);
	st->mx = oq_calloc(st->L.ngroups, sizeof *st->mx);
	st->scale = oq_calloc(st->L.ngroups, sizeof *st->scale);
	st->zp = oq_calloc(st->L.ngroups, sizeof *st->zp);
	st->q = oq_tensor_new(s->dtype, w->rank, w->dims);
	if (!st->mn || !st->mx || !st->scale || !st->zp || !st->q) {
		wq_free(st);
		return oq_err(d, OQ_ENOMEM, "quantize: weight '%s': out of memory", tname(w));
	}
	if ((rc = ranges(w, st, s->dtype, s->reduce_range, d))) {
		wq_free(st);
		return rc;
	}
	if (s->n_fixed && (rc = fixed_params(w, s, st, d))) {
		wq_free(st);
		return rc;
	}
	if (s->round_up && !st->fp8 && s->n_fixed && s->n_round_up == w->nelem) {
		st->up = s->round_up;
		st->up_scale = s->fixed_scale;
	}
	quantize_elems(w, st, s->dtype, SIZE_MAX);
	return OQ_OK;
}

/* Scale and zero-point tensors from the per-group arrays. */
static int wq_params(const wq *st, int dtype, oq_tensor **scale, oq_tensor **zp)
{
	size_t n;
	oq_tensor *s = oq_tensor_new(OQ_DT_FLOAT, st->L.srank, st->L.sdims);
	oq_tensor *z = oq_tensor_new(dtype, st->L.srank, st->L.sdims);

	if (!s || !z) {
		oq_tensor_free(s);
		oq_tensor_free(z);
		return OQ_ENOMEM;
	}
	n = s->nelem;
	memcpy((void *)s->data, st->scale, n * sizeof(float));
	for (size_t g = 0; g < n; g++)
		put((unsigned char *)z->data, dtype, g, st->zp[g]);
	*scale = s;
	*zp = z;
	return OQ_OK;
}

int oq_weight_quantize(const oq_tensor *w, const oq_wspec *s, oq_tensor **q, oq_tensor **scale,
                       oq_tensor **zp, oq_diag *d)
{
	wq st;
	int rc = wq_run(w, s, &st, d);

	if (rc)
		return rc;
	if (wq_params(&st, s->dtype, scale, zp)) {
		wq_free(&st);
		return oq_err(d, OQ_ENOMEM, "quantize: weight '%s': out of memory", tname(w));
	}
	*q = st.q;
	st.q = NULL;
	wq_free(&st);
	return OQ_OK;
}

int oq_weight_fake_quantize(const oq_tensor *w, const oq_wspec *s, float *out, oq_diag *d)
{
	wq st;
	const wlayout *L;
	size_t idx = 0;
	int rc = wq_run(w, s, &st, d);

	if (rc)
		return rc;
	L = &st.L;
	for (size_t o = 0; o < L->outer; o++)
		for (size_t a = 0; a < L->alen; a++) {
			size_t gb = o * L->so + (a / L->blk) * L->sa;
			for (size_t i = 0; i < L->inner; i++, idx++) {
				size_t g = gb + i * L->si;
				int64_t q = qval(&st, w, idx, g);
				/* DequantizeLinear: (q - zp) * scale in float32 */
				out[idx] = (float)(q - st.zp[g]) * st.scale[g];
			}
		}
	wq_free(&st);
	return OQ_OK;
}

int oq_weight_grid(const oq_tensor *w, const oq_wspec *s, oq_wgrid *g, oq_diag *d)
{
	wq st;
	wlayout L;
	size_t idx = 0;
	int rc;

	memset(g, 0, sizeof *g);
	if (oq_qtype_is_fp8(s->dtype))
		return oq_err(d, OQ_EUNSUP, "quantize: weight '%s': float8e4m3fn has no integer grid to round on",
		              tname(w));
	if ((rc = wq_run(w, s, &st, d)))
		return rc;
	L = st.L;
	g->ngroups = L.ngroups;
	g->qmin = st.qmin;
	g->qmax = st.qmax;
	g->form = st.form;
	g->mn = st.mn;
	g->mx = st.mx;
	g->scale = st.scale;
	g->zp = st.zp;
	st.mn = st.mx = st.scale = NULL;
	st.zp = NULL;
	wq_free(&st);
	if (!(g->group = oq_calloc(w->nelem + 1, sizeof *g->group))) {
		oq_wgrid_free(g);
		return oq_err(d, OQ_ENOMEM, "quantize: weight '%s': out of memory", tname(w));
	}
	for (size_t o = 0; o < L.outer; o++)
		for (size_t a = 0; a < L.alen; a++) {
			size_t gb = o * L.so + (a / L.blk) * L.sa;
			for (size_t i = 0; i < L.inner; i++, idx++)
				g->group[idx] = gb + i * L.si;
		}
	return OQ_OK;
}

void oq_wgrid_free(oq_wgrid *g)
{
	free(g->mn);
	free(g->mx);
	free(g->scale);
	free(g->zp);
	free(g->group);
	memset(g, 0, sizeof *g);
}

void oq_wlearned_free(oq_wlearned_set *set)
{
	for (size_t i = 0; i < set->n; i++) {
		free(set->v[i].name);
		free(set->v[i].scale);
		free(set->v[i].zp);
		free(set->v[i].up);
	}
	free(set->v);
	memset(set, 0, sizeof *set);
}

void oq_wlearned_apply(const oq_wlearned_set *set, const char *name, oq_wspec *s)
{
	for (size_t i = 0; set && i < set->n; i++) {
		const oq_wlearned *l = &set->v[i];
		const oq_wspec *t = &l->spec;
		if (strcmp(l->name, name) || t->dtype != s->dtype || t->axis != s->axis ||
		    t->block_size != s->block_size || t->symmetric != s->symmetric || t->sym_grid != s->sym_grid ||
		    t->reduce_range != s->reduce_range || t->mse != s->mse || t->n_fixed != s->n_fixed ||
		    t->fixed_scale != s->fixed_scale || t->fixed_zp != s->fixed_zp)
			continue;
		s->fixed_scale = l->scale;
		s->fixed_zp = l->zp;
		s->n_fixed = l->ngroups;
		s->round_up = l->up;
		s->n_round_up = l->up ? l->nelem : 0;
		return;
	}
}

void oq_weight_release_pages(const oq_model *m, const oq_tensor *t)
{
	oq_tensor_release_pages(m, t);
}

/* Minimum opset for a weight spec: 10 per tensor int8/uint8, 13 per axis, 21 blocked / other types.
 */
static int64_t need_opset(const oq_wspec *s)
{
	if (oq_qtype_is_fp8(s->dtype) && s->block_size <= 0)
		return 19;
	if (s->block_size > 0 || (s->dtype != OQ_DT_INT8 && s->dtype != OQ_DT_UINT8))
		return 21;
	return s->axis >= 0 ? 13 : 10;
}

/* m's output when m is a live DQ reading x as its input 0 that produces exactly (q, scale, zp,
 * axis, block_size), else NULL. */
static oq_value *same_dq(oq_node *m, const oq_value *x, const oq_tensor *q, const oq_tensor *sc,
                         const oq_tensor *zp, const oq_wspec *s)
{
	if (m->dead || m->op != OQ_OP_DequantizeLinear || m->n_inputs != 3 || m->n_outputs < 1 ||
	    !m->outputs[0] || m->inputs[0] != x)
		return NULL;
	if (!m->inputs[1] || !m->inputs[1]->init || !m->inputs[2] || !m->inputs[2]->init)
		return NULL;
	if (!oq_tensor_equal(x->init, q) || !oq_tensor_equal(m->inputs[1]->init, sc) ||
	    !oq_tensor_equal(m->inputs[2]->init, zp))
		return NULL;
	if (s->axis >= 0 && oq_node_attr_int(m, "axis", 1) != s->axis)
		return NULL;
	if (oq_node_attr_int(m, "block_size", 0) != (s->block_size > 0 ? s->block_size : 0))
		return NULL;
	return m->outputs[0];
}

/*
 * The output of a DQ node that produces exactly (q, scale, zp, axis,
 * block_size) from an initializer "<w>_quantized" or "<w>_quantized_K"
 * (the names add_dq gives; K counts up from 1 while the names exist), or
 * NULL. Readers are found through the initializers' use lists, so the cost
 * does not grow with the graph.
 */
static oq_value *find_same_dq(oq_graph *g, const char *wname, const oq_tensor *q,
                              const oq_tensor *sc, const oq_tensor *zp, const oq_wspec *s)
{
	size_t len = strlen(wname) + 40;
	char *nm = malloc(len);
	oq_value *x, *found = NULL;

	if (!nm)
		return NULL;
	snprintf(nm, len, "%s_quantized", wname);
	for (unsigned long k = 1; !found && (x = oq_graph_find(g, nm)); k++) {
		snprintf(nm, len, "%s_quantized_%lu", wname, k);
		if (!x->init)
			continue;
		for (size_t u = 0; u < x->n_uses && !found; u++)
			found = same_dq(x->uses[u].node, x, q, sc, zp, s);
	}
	free(nm);
	return found;
}

/*
 * Adds initializers x (and scale, zp) and a DequantizeLinear reading them; *out is its output.
 * Takes ownership of the tensors (freed on failure too). zp may be NULL (omitted).
 */
static int add_dq(oq_graph *g, const char *base, oq_tensor *x, oq_tensor *sc, oq_tensor *zp,
                  int64_t axis, int64_t block, const oq_tensor *like, oq_value **out, oq_diag *d)
{
	char *nm = NULL;
	size_t bl = strlen(base);
	oq_value *in[3] = {NULL, NULL, NULL}, *o = NULL;
	oq_node *n = NULL;
	const char *sfx[3] = {"_quantized", "_scale", "_zero_point"};
	oq_tensor *ts[3] = {x, sc, zp};
	int rc = OQ_ENOMEM;

	nm = malloc(bl + 40);
	if (!nm)
		goto fail;
	for (int i = 0; i < 3; i++) {
		if (!ts[i])
			continue;
		snprintf(nm, bl + 40, "%s%s", base, sfx[i]);
		in[i] = oq_graph_add_init(g, nm, ts[i]);
		ts[i] = NULL; /* owned by g now, also on failure */
		if (!in[i])
			goto fail;
	}
	snprintf(nm, bl + 40, "%s_DequantizeLinear_Output", base);
	o = oq_graph_new_value(g, nm);
	if (!o)
		goto fail;
	/* node name: <base>_DequantizeLinear plus the suffix the output name got, if any */
	snprintf(nm, bl + 40, "%s_DequantizeLinear%s", base, o->name + strlen(nm));
	n = oq_graph_add_node(g, "DequantizeLinear", "", nm);
	if (!n)
		goto fail;
	if (oq_node_set_inputs(n, in, zp ? 3 : 2) || oq_node_set_outputs(n, &o, 1))
		goto fail;
	/* the new node's uses and output, without a rebuild of the whole graph */
	for (int i = 0; i < (zp ? 3 : 2); i++)
		if (oq_value_add_use(in[i], n, i))
			goto fail;
	o->producer = n;
	o->producer_index = 0;
	if (axis >= 0 && oq_node_set_attr_int(n, "axis", axis))
		goto fail;
	if (block > 0 && oq_node_set_attr_int(n, "block_size", block))
		goto fail;
	if (oq_value_set_type(o, OQ_DT_FLOAT, like->rank, like->dims))
		goto fail;
	free(nm);
	*out = o;
	return OQ_OK;
fail:
	free(nm);
	for (int i = 0; i < 3; i++)
		oq_tensor_free(ts[i]);
	/* a half-built node has no users; mark it for the sweep */
	if (n)
		n->dead = 1;
	return oq_err(d, rc, "quantize: weight '%s': out of memory adding its DequantizeLinear",
	              base);
}

/* Bias state: int32 values and scales, computed against the weight's per-group scales. */
typedef struct bq {
	oq_tensor *q; /* int32, the bias's dims */
	float *bs;    /* per channel bias scale (nsc entries) */
	size_t nsc;   /* 1 (per tensor weight) or C */
} bq;

/*
 * Quantizes bias b against weight scales st->scale, enlarging them (and
 * re-quantizing the weight groups) when a value would overflow int32.
 */
static int bias_quantize(const oq_tensor *w, const oq_tensor *b, wq *st, int wdtype, float in_scale,
                         float beta, bq *out, int *enlarged, oq_diag *d)
{
	const double imax = 2147483647.0;
	size_t nsc = st->L.ngroups;
	float *bf = oq_tensor_to_floats(b);
	int rc = OQ_OK;

	memset(out, 0, sizeof *out);
	out->q = oq_tensor_new(OQ_DT_INT32, b->rank, b->dims);
	out->bs = oq_calloc(nsc, sizeof *out->bs);
	out->nsc = nsc;
	if (!bf || !out->q || !out->bs) {
		rc = oq_err(d, OQ_ENOMEM, "quantize: bias '%s': out of memory", tname(b));
		goto fail;
	}
	for (size_t c = 0; c < nsc; c++) {
		int grew = 0;
		for (int iter = 0; iter < 8; iter++) {
			float bs = in_scale * st->scale[c];
			int over = 0;
			double need = 0;
			if (beta != 1.0f)
				bs *= beta;
			for (size_t i = c; i < b->nelem; i += (nsc == 1 ? 1 : nsc)) {
				double v = fabs((double)bf[i]);
				if (isnan(bf[i])) {
					rc = oq_err(d, OQ_EINVAL,
					            "quantize: bias '%s' holds NaN; fix the model",
					            tname(b));
					goto fail;
				}
				if (rint(v / (double)bs) > imax) {
					over = 1;
					if (v > need)
						need = v;
				}
			}
			out->bs[c] = bs;
			if (!over)
				break;
			/* enlarge: bias fits in int32 with a little margin */
			{
				double ns = need / ((double)in_scale * (double)beta * imax) *
				            (1.0 + 0x1p-20);
				if (!(ns < FLT_MAX)) {
					rc = oq_err(d, OQ_EUNSUP,
					            "quantize: bias '%s' is too large for an int32 "
					            "bias at input "
					            "scale %g; exclude the node",
					            tname(b), (double)in_scale);
					goto fail;
				}
				if ((float)ns <= st->scale[c])
					ns = (double)st->scale[c] * (1.0 + 0x1p-20);
				st->scale[c] = (float)ns;
			}
			if (st->form == OQ_QP_ASYM) {
				double z = rint((double)st->qmin - fmin((double)st->mn[c], 0.0) /
				                                       (double)st->scale[c]);
				st->zp[c] =
				    (int64_t)fmax((double)st->qmin, fmin((double)st->qmax, z));
			}
			grew = 1;
		}
		if (grew) {
			quantize_elems(w, st, wdtype, c);
			*enlarged = 1;
		}
	}
	for (size_t i = 0; i < b->nelem; i++) {
		size_t c = nsc == 1 ? 0 : i % nsc;
		double v = rint((double)bf[i] / (double)out->bs[c]);
		v = fmax(-imax, fmin(imax, v));
		put((unsigned char *)out->q->data, OQ_DT_INT32, i, (int64_t)v);
	}
	free(bf);
	return OQ_OK;
fail:
	free(bf);
	oq_tensor_free(out->q);
	free(out->bs);
	memset(out, 0, sizeof *out);
	return rc;
}

int oq_weight_quantizable(const oq_value *v)
{
	return v && v->init && v->init->dtype == OQ_DT_FLOAT && !(v->flags & OQ_V_INPUT) &&
	       !(v->flags & OQ_V_OUTER);
}

int oq_weight_localize(oq_graph *b, oq_node *n, int idx, oq_diag *d)
{
	oq_value *v = idx >= 0 && (size_t)idx < n->n_inputs ? n->inputs[idx] : NULL, *lv;
	const oq_value *o = v ? oq_value_resolve(v) : NULL;
	oq_tensor *t;

	if (!v || !(v->flags & OQ_V_OUTER) || !o || !o->init || o->init->dtype != OQ_DT_FLOAT ||
	    (o->flags & OQ_V_INPUT))
		return OQ_OK;
	if (!(t = oq_tensor_new(o->init->dtype, o->init->rank, o->init->dims)))
		return oq_err(d, OQ_ENOMEM, "quantize: out of memory");
	if (t->nbytes)
		memcpy((void *)t->data, o->init->data, t->nbytes);
	if (!(lv = oq_graph_add_init(b, o->name, t)) || oq_value_replace_uses(b, v, lv))
		return oq_err(d, OQ_ENOMEM, "quantize: out of memory");
	if (!v->n_uses && !(v->flags & OQ_V_OUTPUT)) {
		v->flags &= ~(unsigned)OQ_V_OUTER;
		v->outer = NULL;
	}
	return OQ_OK;
}

int oq_weight_insert_dq(oq_graph *g, oq_node *n, int w_idx, int b_idx, float in_scale, float beta,
                        const oq_wspec *s, oq_diag *d)
{
	oq_value *wv, *bv = NULL, *wout = NULL, *bout = NULL;
	oq_tensor *wt, *sc = NULL, *zp = NULL;
	int64_t have, need = need_opset(s);
	int blocked = s->block_size > 0, per_axis = s->axis >= 0 && !blocked, enlarged = 0, rc;
	wq st;
	bq bias;

	memset(&bias, 0, sizeof bias);
	if (n->graph)
		g = n->graph;
	if (w_idx < 0 || (size_t)w_idx >= n->n_inputs || !n->inputs[w_idx])
		return oq_err(d, OQ_EINVAL, "quantize: node '%s' (%s): no input %d to quantize",
		              n->name, n->op_type, w_idx);
	wv = n->inputs[w_idx];
	if (!oq_weight_quantizable(wv))
		return oq_err(d, OQ_EUNSUP,
		              "quantize: node '%s' (%s): input '%s' is not a float32 initializer "
		              "of this graph "
		              "(float16 weights and overridable graph inputs stay float)",
		              n->name, n->op_type, wv->name);
	wt = wv->init;
	have = oq_model_opset(g->model, "");
	if (have < need)
		return oq_err(d, OQ_EUNSUP,
		              "quantize: node '%s' (%s): a %s%s weight DequantizeLinear needs "
		              "opset %lld, the "
		              "model imports %lld; run upgrade-opset (--opset %lld)",
		              n->name, n->op_type, oq_dtype_name(s->dtype),
		              blocked    ? " blocked"
		              : per_axis ? " per-axis"
		                         : "",
		              (long long)need, (long long)have, (long long)need);
	if (s->axis >= wt->rank || (s->axis < 0 && blocked))
		return oq_err(
		    d, OQ_EINVAL,
		    "quantize: node '%s' (%s): axis %d does not fit weight '%s' of rank %d",
		    n->name, n->op_type, s->axis, wv->name, wt->rank);
	if ((rc = wq_run(wt, s, &st, d)))
		return rc;

	if (b_idx >= 0 && (size_t)b_idx < n->n_inputs && n->inputs[b_idx] && in_scale > 0 &&
	    beta > 0 && !blocked && !st.fp8) {
		bv = n->inputs[b_idx];
		/* per-axis: the bias is 1-D with one entry per channel; per tensor: any shape */
		if (!oq_weight_quantizable(bv) ||
		    (per_axis &&
		     (bv->init->rank != 1 || (size_t)bv->init->dims[0] != st.L.ngroups)))
			bv = NULL;
	}
	if (bv &&
	    (rc = bias_quantize(wt, bv->init, &st, s->dtype, in_scale, beta, &bias, &enlarged, d)))
		goto fail;
	if (wq_params(&st, s->dtype, &sc, &zp)) {
		rc = oq_err(d, OQ_ENOMEM, "quantize: node '%s' (%s): out of memory", n->name,
		            n->op_type);
		goto fail;
	}
	if (!enlarged)
		wout = find_same_dq(g, wv->name, st.q, sc, zp, s);
	if (wout) {
		oq_tensor_free(sc);
		oq_tensor_free(zp);
		sc = zp = NULL;
	} else {
		oq_tensor *q = st.q;
		st.q = NULL;
		rc = add_dq(g, wv->name, q, sc, zp, blocked || per_axis ? s->axis : -1,
		            blocked ? s->block_size : 0, wt, &wout, d);
		sc = zp = NULL;
		if (rc)
			goto fail;
	}
	if (bv) {
		oq_tensor *bs = oq_tensor_new(OQ_DT_FLOAT, per_axis ? 1 : 0,
		                              (const int64_t[]){(int64_t)bias.nsc});
		if (!bs) {
			rc = oq_err(d, OQ_ENOMEM, "quantize: node '%s' (%s): out of memory",
			            n->name, n->op_type);
			goto fail;
		}
		memcpy((void *)bs->data, bias.bs, bs->nelem * sizeof(float));
		rc =
		    add_dq(g, bv->name, bias.q, bs, NULL, per_axis ? 0 : -1, 0, bv->init, &bout, d);
		bias.q = NULL;
		if (rc)
			goto fail;
		n->inputs[b_idx] = bout;
		if ((rc = oq_value_add_use(bout, n, b_idx)))
			goto fail;
	}
	n->inputs[w_idx] = wout;
	if ((rc = oq_value_add_use(wout, n, w_idx)))
		goto fail;
	oq_weight_release_pages(g->model, wt);
	wq_free(&st);
	free(bias.bs);
	return OQ_OK;
fail:
	wq_free(&st);
	oq_tensor_free(sc);
	oq_tensor_free(zp);
	oq_tensor_free(bias.q);
	free(bias.bs);
	return rc;
}
