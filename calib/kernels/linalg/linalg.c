/*
 * linalg.c - the 'linalg' kernel family: Conv, ConvTranspose, Gemm,
 * MatMul here; ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul in
 * integer.c; Einsum in einsum.c. The compute engines live in
 * conv.c / gemm.c (see linalg.h).
 *
 * Types: float32 runs the float engine; double runs it in double;
 * float16 / bfloat16 are widened to float32 and rounded back; integer
 * MatMul / Gemm accumulate exactly in int64 (wrapping like the C types).
 * Opset differences handled: Gemm's C is required with a `broadcast`
 * attribute before opset 7 (broadcast=0 needs C of shape [M, N]) and
 * optional from 11; Conv/ConvTranspose/MatMul kept their semantics.
 * Specs: https://onnx.ai/onnx/operators/ (Conv, ConvTranspose, Gemm, MatMul).
 */
#include "calib/kernels/linalg/linalg.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

static int is_float_like(int dt)
{
	return dt == OQ_DT_FLOAT || dt == OQ_DT_DOUBLE || dt == OQ_DT_FLOAT16 || dt == OQ_DT_BFLOAT16;
}

/* Engine type for a float-like dtype: double stays double, the rest run in float32. */
static oq_ltype ltype_of(int dt)
{
	return dt == OQ_DT_DOUBLE ? OQ_LT_F64 : OQ_LT_F32;
}

int oq_linalg_load(oq_kctx *k, const oq_rt *t, oq_ltype lt, const double *shift, size_t nshift, size_t inner,
		   void **buf, int *owned)
{
	int native = (lt == OQ_LT_F32 && t->dtype == OQ_DT_FLOAT) || (lt == OQ_LT_F64 && t->dtype == OQ_DT_DOUBLE);
	size_t es = lt == OQ_LT_F32 ? 4 : 8;

	if (native && !shift) {
		*buf = t->data;
		*owned = 0;
		return OQ_OK;
	}
	*buf = malloc(t->nelem * es + 64);
	*owned = 1;
	if (!*buf)
		return oq_k_err(k, OQ_ENOMEM, "out of memory converting %s data", oq_dtype_name(t->dtype));
	if (inner < 1)
		inner = 1;
	for (size_t i = 0; i < t->nelem; i++) {
		double v = oq_rt_get(t, i);
		if (shift)
			v -= shift[nshift > 1 ? i / inner % nshift : 0];
		if (lt == OQ_LT_F32)
			((float *)*buf)[i] = (float)v;
		else
			((double *)*buf)[i] = v;
	}
	return OQ_OK;
}

/* Writes an engine buffer into y (which has another dtype), rounding as the dtype does. */
static void store(oq_rt *y, oq_ltype lt, const void *buf)
{
	for (size_t i = 0; i < y->nelem; i++)
		oq_rt_set(y, i, lt == OQ_LT_F32 ? (double)((const float *)buf)[i] : ((const double *)buf)[i]);
}

/* Output buffer for the engine: y's own data when its dtype matches lt, else scratch. */
static int out_buf(oq_kctx *k, oq_rt *y, oq_ltype lt, void **buf, int *owned)
{
	if ((lt == OQ_LT_F32 && y->dtype == OQ_DT_FLOAT) || (lt == OQ_LT_F64 && y->dtype == OQ_DT_DOUBLE)) {
		*buf = y->data;
		*owned = 0;
		return OQ_OK;
	}
	*buf = calloc(y->nelem + 16, lt == OQ_LT_F32 ? 4 : 8);
	*owned = 1;
	return *buf ? OQ_OK : oq_k_err(k, OQ_ENOMEM, "out of memory");
}

/* An INTS attribute that must have `want` entries (or be absent: fills dflt). */
static int ints_attr(oq_kctx *k, const char *name, size_t want, int64_t dflt, int64_t *out, int *present)
{
	const int64_t *v;
	size_t n = oq_k_ints(k, name, &v);
	if (present)
		*present = n > 0;
	if (n == 0) {
		for (size_t i = 0; i < want; i++)
			out[i] = dflt;
		return OQ_OK;
	}
	if (n != want)
		return oq_k_err(k, OQ_EINVAL, "attribute '%s' has %zu values, expected %zu", name, n, want);
	memcpy(out, v, want * sizeof *v);
	return OQ_OK;
}

int oq_linalg_conv_geom(oq_kctx *k, const oq_rt *x, const oq_rt *w, int transpose, oq_conv_geom *g)
{
	int64_t pads[2 * OQ_CONV_MAX_SP], ks[OQ_CONV_MAX_SP], opad[OQ_CONV_MAX_SP], oshape[OQ_CONV_MAX_SP];
	const int64_t *osv;
	size_t nos;
	const char *ap = oq_k_str(k, "auto_pad", "NOTSET");
	int nsp, rc, has_ks, has_pads;

	memset(g, 0, sizeof *g);
	if (x->rank < 3 || x->rank - 2 > OQ_CONV_MAX_SP)
		return oq_k_err(k, OQ_EUNSUP, "input X has rank %d; 3 to %d is supported", x->rank, OQ_CONV_MAX_SP + 2);
	if (w->rank != x->rank)
		return oq_k_err(k, OQ_EINVAL, "weight W has rank %d but X has rank %d", w->rank, x->rank);
	nsp = x->rank - 2;
	g->nsp = nsp;
	g->n = x->dims[0];
	g->c = x->dims[1];
	g->group = oq_k_int(k, "group", 1);
	if (g->group < 1)
		return oq_k_err(k, OQ_EINVAL, "attribute 'group' is %lld; it must be >= 1", (long long)g->group);
	if (g->c % g->group)
		return oq_k_err(k, OQ_EINVAL, "X has %lld channels, not a multiple of group %lld", (long long)g->c,
				(long long)g->group);
	if (!transpose) {
		g->m = w->dims[0];
		if (w->dims[1] * g->group != g->c)
			return oq_k_err(k, OQ_EINVAL, "W has %lld input channels per group; X has %lld channels in %lld groups",
					(long long)w->dims[1], (long long)g->c, (long long)g->group);
		if (g->m % g->group)
			return oq_k_err(k, OQ_EINVAL, "W has %lld output channels, not a multiple of group %lld",
					(long long)g->m, (long long)g->group);
	} else {
		if (w->dims[0] != g->c)
			return oq_k_err(k, OQ_EINVAL, "W has %lld input channels but X has %lld", (long long)w->dims[0],
					(long long)g->c);
		g->m = w->dims[1] * g->group;
	}
	if ((rc = ints_attr(k, "kernel_shape", (size_t)nsp, 0, ks, &has_ks)) ||
	    (rc = ints_attr(k, "strides", (size_t)nsp, 1, g->stride, NULL)) ||
	    (rc = ints_attr(k, "dilations", (size_t)nsp, 1, g->dil, NULL)) ||
	    (rc = ints_attr(k, "pads", 2 * (size_t)nsp, 0, pads, &has_pads)))
		return rc;
	g->in_size = g->out_size = g->k_size = 1;
	for (int d = 0; d < nsp; d++) {
		g->in[d] = x->dims[d + 2];
		g->k[d] = w->dims[d + 2];
		if (g->k[d] < 1)
			return oq_k_err(k, OQ_EINVAL, "W has an empty kernel (spatial dim %d is %lld)", d,
					(long long)g->k[d]);
		if (has_ks && ks[d] != g->k[d])
			return oq_k_err(k, OQ_EINVAL, "kernel_shape[%d] is %lld but W has %lld", d, (long long)ks[d],
					(long long)g->k[d]);
		if (g->stride[d] < 1 || g->dil[d] < 1)
			return oq_k_err(k, OQ_EINVAL, "strides and dilations must be >= 1 (dim %d: %lld, %lld)", d,
					(long long)g->stride[d], (long long)g->dil[d]);
		if (pads[d] < 0 || pads[d + nsp] < 0)
			return oq_k_err(k, OQ_EINVAL, "pads must be >= 0");
		g->in_size *= g->in[d];
		g->k_size *= g->k[d];
	}
	if (strcmp(ap, "NOTSET") && strcmp(ap, "VALID") && strcmp(ap, "SAME_UPPER") && strcmp(ap, "SAME_LOWER"))
		return oq_k_err(k, OQ_EINVAL, "auto_pad '%s' is not NOTSET, VALID, SAME_UPPER or SAME_LOWER", ap);

	if (!transpose) {
		for (int d = 0; d < nsp; d++) {
			int64_t ek = (g->k[d] - 1) * g->dil[d] + 1, pb = pads[d], pe = pads[d + nsp], span;
			if (!strcmp(ap, "VALID")) {
				pb = pe = 0;
			} else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
				int64_t o = (g->in[d] + g->stride[d] - 1) / g->stride[d];
				int64_t tot = (o - 1) * g->stride[d] + ek - g->in[d];
				if (tot < 0)
					tot = 0;
				pb = !strcmp(ap, "SAME_UPPER") ? tot / 2 : tot - tot / 2;
				pe = tot - pb;
			}
			span = g->in[d] + pb + pe - ek;
			if (span < 0)
				return oq_k_err(k, OQ_EINVAL,
						"spatial dim %d: input %lld with pads %lld+%lld is smaller than the kernel extent %lld",
						d, (long long)g->in[d], (long long)pb, (long long)pe, (long long)ek);
			g->pad[d] = pb;
			g->out[d] = span / g->stride[d] + 1;
			g->out_size *= g->out[d];
		}
		return OQ_OK;
	}

	if ((rc = ints_attr(k, "output_padding", (size_t)nsp, 0, opad, NULL)))
		return rc;
	nos = oq_k_ints(k, "output_shape", &osv);
	if (nos && nos != (size_t)nsp && nos != (size_t)nsp + 2)
		return oq_k_err(k, OQ_EINVAL, "attribute 'output_shape' has %zu values, expected %d", nos, nsp);
	for (int d = 0; d < nsp; d++)
		oshape[d] = nos ? osv[nos - (size_t)nsp + (size_t)d] : 0;
	for (int d = 0; d < nsp; d++) {
		int64_t ek = (g->k[d] - 1) * g->dil[d] + 1;
		int64_t full = g->stride[d] * (g->in[d] - 1) + opad[d] + ek, o, tot, pb, half;
		if (opad[d] < 0)
			return oq_k_err(k, OQ_EINVAL, "output_padding must be >= 0");
		if (nos || !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
			o = nos ? oshape[d] : g->in[d] * g->stride[d];
			tot = full - o;
			/* the spec: SAME_UPPER puts the odd pad at the end; otherwise at the start */
			half = tot >= 0 ? tot / 2 : -((-tot + 1) / 2); /* floor, as the reference's // */
			if (!strcmp(ap, "SAME_UPPER"))
				pb = half;
			else
				pb = tot - half;
		} else if (!strcmp(ap, "VALID")) {
			pb = 0;
			o = full;
		} else {
			pb = pads[d];
			o = full - pads[d] - pads[d + nsp];
		}
		if (o < 0)
			return oq_k_err(k, OQ_EINVAL, "spatial dim %d: pads leave a negative output size %lld", d,
					(long long)o);
		g->pad[d] = pb;
		g->out[d] = o;
		g->out_size *= o;
	}
	return OQ_OK;
}

/* ------------------------------------------------------------ Conv */

/* fuse (fused Conv only): the group's epilogue (BN affine, activation, steps) the engine applies per tile. */
static int conv_common(oq_kctx *k, int transpose, const oq_kfuse *fuse)
{
	oq_rt *x = oq_k_in(k, 0), *w = oq_k_in(k, 1), *b = oq_k_in(k, 2), *y;
	const oq_packed_w *pw = transpose || !w || w->dtype != OQ_DT_FLOAT ? NULL : k->packed_w;
	oq_kfuse run;       /* fuse with this call's tensor operands */
	oq_conv_geom g;
	int64_t dims[OQ_RT_MAX_RANK];
	void *xb = NULL, *wb = NULL, *bb = NULL, *yb = NULL;
	int xo = 0, wo = 0, bo = 0, yo = 0, rc;
	oq_ltype lt;

	if (!x || !w)
		return oq_k_err(k, OQ_EINVAL, "needs inputs X and W");
	if (!is_float_like(x->dtype) || w->dtype != x->dtype || (b && b->dtype != x->dtype))
		return oq_k_err(k, OQ_EUNSUP, "X, W (and B) must share one float type; got %s, %s%s%s",
				oq_dtype_name(x->dtype), oq_dtype_name(w->dtype), b ? ", " : "",
				b ? oq_dtype_name(b->dtype) : "");
	if (fuse && x->dtype != OQ_DT_FLOAT)
		return oq_k_err(k, OQ_EUNSUP, "X, W (and B) must share one float type; got %s, %s",
				oq_dtype_name(x->dtype), oq_dtype_name(w->dtype));
	if ((rc = oq_linalg_conv_geom(k, x, w, transpose, &g)))
		return rc;
	if (b && (b->rank != 1 || b->dims[0] != g.m))
		return oq_k_err(k, OQ_EINVAL, "bias B must be 1-D of %lld elements", (long long)g.m);
	dims[0] = g.n;
	dims[1] = g.m;
	for (int d = 0; d < g.nsp; d++)
		dims[d + 2] = g.out[d];
	if (fuse && fuse->n_t) {
		/* tensor operands must be float32 of the output's shape, else the group runs unfused */
		run = *fuse;
		for (int i = 0; i < fuse->n_t; i++) {
			const oq_rt *t = k->fuse_in ? k->fuse_in[i] : NULL;
			if (!t || t->kind != OQ_RT_TENSOR || t->dtype != OQ_DT_FLOAT || t->rank != x->rank ||
			    memcmp(t->dims, dims, (size_t)x->rank * sizeof *dims))
				return OQ_K_UNFUSED;
			run.t[i] = t->data;
		}
		fuse = &run;
	}
	/* the engines write every output element (Conv: bias or beta 0; ConvTranspose: bias first) */
	if ((rc = oq_k_output_raw(k, 0, x->dtype, x->rank, dims, &y)))
		return rc;
	lt = ltype_of(x->dtype);
	/* a W packed by the plan (k->packed_w, float32 only) may have no data left: the engine reads the panels */
	if ((rc = oq_linalg_load(k, x, lt, NULL, 0, 1, &xb, &xo)) ||
	    (!(pw && !w->data) && (rc = oq_linalg_load(k, w, lt, NULL, 0, 1, &wb, &wo))) ||
	    (b && (rc = oq_linalg_load(k, b, lt, NULL, 0, 1, &bb, &bo))) || (rc = out_buf(k, y, lt, &yb, &yo)))
		goto done;
	rc = transpose ? oq_convt_run(k, lt, &g, xb, wb, bb, yb) : oq_conv_run_packed(k, lt, &g, xb, wb, pw, bb, fuse, yb);
	if (rc) {
		rc = oq_k_err(k, rc, rc == OQ_EINVAL ? "the packed weight does not fit (internal error)"
					      : "out of memory for the convolution's work buffers");
		goto done;
	}
	if (yo)
		store(y, lt, yb);
done:
	if (xo)
		free(xb);
	if (wo)
		free(wb);
	if (bo)
		free(bb);
	if (yo)
		free(yb);
	return rc;
}

static int k_conv(oq_kctx *k)
{
	return conv_common(k, 0, NULL);
}

int oq_k_conv_fused(oq_kctx *k)
{
	if (!k->fuse)
		return oq_k_err(k, OQ_EINVAL, "fused Conv called without its plan (internal error)");
	return conv_common(k, 0, k->fuse);
}

int oq_k_conv_chain(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *w = oq_k_in(k, 1), *b = oq_k_in(k, 2), *y, mid;
	const oq_kchain *c = k->chain;
	oq_rt *wb = c && c->n_in > 1 ? c->in[1] : NULL, *bb = c && c->n_in > 2 ? c->in[2] : NULL;
	oq_conv_geom ga, gb;
	oq_kctx kb;
	int64_t dims[OQ_RT_MAX_RANK];
	int rc;

	if (!c || !x || !w || !wb)
		return oq_k_err(k, OQ_EINVAL, "chained Conv called without its plan (internal error)");
	if (x->dtype != OQ_DT_FLOAT || w->dtype != OQ_DT_FLOAT || (b && b->dtype != OQ_DT_FLOAT) ||
	    wb->dtype != OQ_DT_FLOAT || !wb->data || (bb && bb->dtype != OQ_DT_FLOAT) || (!w->data && !k->packed_w))
		return oq_k_err(k, OQ_EUNSUP, "a chained Conv needs float32 X, W and B");
	if ((rc = oq_linalg_conv_geom(k, x, w, 0, &ga)))
		return rc;
	if (b && (b->rank != 1 || b->dims[0] != ga.m))
		return oq_k_err(k, OQ_EINVAL, "bias B must be 1-D of %lld elements", (long long)ga.m);
	/* the depthwise Conv's geometry from its own attributes, on the first one's output shape */
	memset(&mid, 0, sizeof mid);
	mid.kind = OQ_RT_TENSOR;
	mid.dtype = OQ_DT_FLOAT;
	mid.rank = x->rank;
	mid.dims[0] = ga.n;
	mid.dims[1] = ga.m;
	for (int d = 0; d < ga.nsp; d++)
		mid.dims[d + 2] = ga.out[d];
	kb = *k;
	kb.node = c->node;
	kb.in = (oq_rt **)c->in;
	kb.n_in = c->n_in;
	if ((rc = oq_linalg_conv_geom(&kb, &mid, wb, 0, &gb)))
		return rc;
	if (bb && (bb->rank != 1 || bb->dims[0] != gb.m))
		return oq_k_err(&kb, OQ_EINVAL, "bias B must be 1-D of %lld elements", (long long)gb.m);
	dims[0] = gb.n;
	dims[1] = gb.m;
	for (int d = 0; d < gb.nsp; d++)
		dims[d + 2] = gb.out[d];
	if ((rc = oq_k_output_raw(k, 0, OQ_DT_FLOAT, x->rank, dims, &y)))
		return rc;
	rc = oq_conv_chain_run(k, &ga, x->data, w->data, k->packed_w, b ? b->data : NULL, k->fuse, &gb, wb->data,
			       bb ? bb->data : NULL, c->fuse, y->data);
	if (rc)
		return oq_k_err(k, rc, rc == OQ_EINVAL ? "the chained depthwise Conv does not fit (internal error)"
					      : "out of memory for the convolutions' work buffers");
	return OQ_OK;
}

static int k_conv_transpose(oq_kctx *k)
{
	return conv_common(k, 1, NULL);
}

/* ------------------------------------------------------------ Gemm */

static int is_int_type(int dt)
{
	char c = oq_dtype_kind(dt);
	return (c == 's' || c == 'u') && oq_dtype_bits(dt) >= 8;
}

/* Integer C = alpha*AB + beta*C exactly in int64 (wrapping), for the integer Gemm / MatMul types. */
static void int_gemm(const oq_rt *a, const oq_rt *b, oq_rt *y, const oq_gemm_batch *p, int64_t alpha, int64_t beta)
{
	for (size_t item = 0; item < p->batch; item++) {
		size_t ao = p->aoff ? p->aoff[item] : 0, bo = p->boff ? p->boff[item] : 0;
		size_t co = p->coff ? p->coff[item] : 0;
		for (int64_t i = 0; i < p->m; i++)
			for (int64_t j = 0; j < p->n; j++) {
				uint64_t s = 0;
				size_t ci = co + (size_t)(i * p->ldc + j);
				for (int64_t q = 0; q < p->kd; q++) {
					size_t ai = ao + (size_t)(p->ta ? q * p->lda + i : i * p->lda + q);
					size_t bi = bo + (size_t)(p->tb ? j * p->ldb + q : q * p->ldb + j);
					s += (uint64_t)oq_rt_get_int(a, ai) * (uint64_t)oq_rt_get_int(b, bi);
				}
				s = s * (uint64_t)alpha + (beta ? (uint64_t)beta * (uint64_t)oq_rt_get_int(y, ci) : 0);
				/* store wrapped to the output's width */
				switch (oq_dtype_bits(y->dtype)) {
				case 64:
					memcpy((char *)y->data + ci * 8, &s, 8);
					break;
				case 32: {
					uint32_t v = (uint32_t)s;
					memcpy((char *)y->data + ci * 4, &v, 4);
					break;
				}
				case 16: {
					uint16_t v = (uint16_t)s;
					memcpy((char *)y->data + ci * 2, &v, 2);
					break;
				}
				default:
					((unsigned char *)y->data)[ci] = (unsigned char)s;
				}
			}
	}
}

static int k_gemm(oq_kctx *k)
{
	oq_rt *a = oq_k_in(k, 0), *b = oq_k_in(k, 1), *c = oq_k_in(k, 2), *y;
	int ta = (int)oq_k_int(k, "transA", 0), tb = (int)oq_k_int(k, "transB", 0);
	float alpha = oq_k_float(k, "alpha", 1.0f), beta = oq_k_float(k, "beta", 1.0f);
	int64_t m, n, kd, dims[2], cm = 1, cn = 1;
	oq_gemm_batch p;
	void *ab = NULL, *bb = NULL, *yb = NULL;
	int ao = 0, bo = 0, yo = 0, rc;
	oq_ltype lt;

	if (!a || !b)
		return oq_k_err(k, OQ_EINVAL, "needs inputs A and B");
	if (!c && k->opset < 11)
		return oq_k_err(k, OQ_EINVAL, "input C is required before opset 11");
	if (a->dtype != b->dtype || (c && c->dtype != a->dtype))
		return oq_k_err(k, OQ_EINVAL, "A, B (and C) must share one type; got %s, %s", oq_dtype_name(a->dtype),
				oq_dtype_name(b->dtype));
	if (!is_float_like(a->dtype) && !is_int_type(a->dtype))
		return oq_k_err(k, OQ_EUNSUP, "type %s is not supported", oq_dtype_name(a->dtype));
	if (a->rank != 2 || b->rank != 2)
		return oq_k_err(k, OQ_EINVAL, "A and B must be 2-D (ranks %d and %d)", a->rank, b->rank);
	m = ta ? a->dims[1] : a->dims[0];
	kd = ta ? a->dims[0] : a->dims[1];
	n = tb ? b->dims[0] : b->dims[1];
	if ((tb ? b->dims[1] : b->dims[0]) != kd)
		return oq_k_err(k, OQ_EINVAL, "inner dims differ: op(A) is [%lld, %lld], op(B) is [%lld, %lld]",
				(long long)m, (long long)kd, (long long)(tb ? b->dims[1] : b->dims[0]), (long long)n);
	if (m > INT32_MAX || n > INT32_MAX || kd > INT32_MAX)
		return oq_k_err(k, OQ_EUNSUP, "matrix dims above 2^31 are not supported");
	dims[0] = m;
	dims[1] = n;
	if (c) {
		cm = c->rank == 2 ? c->dims[0] : 1;
		cn = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
		if (c->rank > 2 || (cm != 1 && cm != m) || (cn != 1 && cn != n))
			return oq_k_err(k, OQ_EINVAL, "C of rank %d cannot broadcast to [%lld, %lld]", c->rank,
					(long long)m, (long long)n);
		if (k->opset < 7 && !oq_k_int(k, "broadcast", 0) && (c->rank != 2 || cm != m || cn != n))
			return oq_k_err(k, OQ_EINVAL, "C must be [%lld, %lld] when attribute broadcast is 0",
					(long long)m, (long long)n);
	}
	if (k->packed_b && (a->dtype != OQ_DT_FLOAT || ta || alpha != 1.0f || k->packed_b->kd != kd || k->packed_b->n != n))
		return oq_k_err(k, OQ_EINVAL, "packed B does not fit (internal error)");
	/* Y = beta * C first (broadcast), then the product accumulates onto it */
	if ((rc = (k->packed_b && !(c && beta != 0) ? oq_k_output_raw : oq_k_output)(k, 0, a->dtype, 2, dims, &y)))
		return rc;
	if (c && beta != 0)
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				size_t ci = (size_t)((cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j));
				if (y->dtype == OQ_DT_FLOAT)
					((float *)y->data)[i * n + j] = beta * ((const float *)c->data)[ci];
				else if (is_int_type(y->dtype))
					oq_rt_set(y, (size_t)(i * n + j), (double)(int64_t)beta * (double)oq_rt_get_int(c, ci));
				else
					oq_rt_set(y, (size_t)(i * n + j), (double)beta * oq_rt_get(c, ci));
			}
	if (k->packed_b) { /* B packed by the plan: Y = (beta * C or 0) + A x op(B) */
		oq_packed_b_gemm(k, m, a->data, a->dims[1], k->packed_b, y->data, n, c && beta != 0);
		return OQ_OK;
	}
	memset(&p, 0, sizeof p);
	p.ta = ta;
	p.tb = tb;
	p.m = m;
	p.n = n;
	p.kd = kd;
	p.alpha = alpha;
	p.beta = c && beta != 0 ? 1 : 0;
	p.lda = a->dims[1];
	p.ldb = b->dims[1];
	p.ldc = n;
	p.batch = 1;
	if (is_int_type(a->dtype)) {
		int_gemm(a, b, y, &p, (int64_t)alpha, c && beta != 0 ? 1 : 0);
		return OQ_OK;
	}
	lt = ltype_of(a->dtype);
	p.t = lt;
	if ((rc = oq_linalg_load(k, a, lt, NULL, 0, 1, &ab, &ao)) || (rc = oq_linalg_load(k, b, lt, NULL, 0, 1, &bb, &bo)) ||
	    (rc = out_buf(k, y, lt, &yb, &yo)))
		goto done;
	if (yo && p.beta != 0)
		for (size_t i = 0; i < y->nelem; i++) {
			if (lt == OQ_LT_F32)
				((float *)yb)[i] = (float)oq_rt_get(y, i);
			else
				((double *)yb)[i] = oq_rt_get(y, i);
		}
	p.a = ab;
	p.b = bb;
	p.c = yb;
	oq_gemm_run(k, &p);
	if (yo)
		store(y, lt, yb);
done:
	if (ao)
		free(ab);
	if (bo)
		free(bb);
	if (yo)
		free(yb);
	return rc;
}

/* ------------------------------------------------------------ MatMul */

void oq_linalg_mm_free(oq_mm_plan *p)
{
	free(p->aoff);
	free(p->boff);
	free(p->coff);
	p->aoff = p->boff = p->coff = NULL;
}

int oq_linalg_mm_plan(oq_kctx *k, const oq_rt *a, const oq_rt *b, oq_mm_plan *p)
{
	int64_t ad[OQ_RT_MAX_RANK], bd[OQ_RT_MAX_RANK], bat[OQ_RT_MAX_RANK];
	int ar, br, rr = 0, ra, rb;
	size_t nb = 1;

	memset(p, 0, sizeof *p);
	if (a->rank < 1 || b->rank < 1)
		return oq_k_err(k, OQ_EINVAL, "MatMul operands must have rank >= 1 (got %d and %d)", a->rank, b->rank);
	/* 1-D operands: [K] -> [1, K] for A, [K] -> [K, 1] for B; the unit dim is dropped from the output */
	ar = a->rank == 1 ? 2 : a->rank;
	br = b->rank == 1 ? 2 : b->rank;
	if (a->rank == 1) {
		ad[0] = 1;
		ad[1] = a->dims[0];
	} else {
		memcpy(ad, a->dims, (size_t)ar * sizeof *ad);
	}
	if (b->rank == 1) {
		bd[0] = b->dims[0];
		bd[1] = 1;
	} else {
		memcpy(bd, b->dims, (size_t)br * sizeof *bd);
	}
	p->m = ad[ar - 2];
	p->kd = ad[ar - 1];
	p->n = bd[br - 1];
	if (bd[br - 2] != p->kd)
		return oq_k_err(k, OQ_EINVAL, "inner dims differ: A is [..., %lld, %lld], B is [..., %lld, %lld]",
				(long long)p->m, (long long)p->kd, (long long)bd[br - 2], (long long)p->n);
	if (p->m > INT32_MAX || p->n > INT32_MAX || p->kd > INT32_MAX)
		return oq_k_err(k, OQ_EUNSUP, "matrix dims above 2^31 are not supported");
	ra = ar - 2;
	rb = br - 2;
	if (oq_broadcast(ra, ad, rb, bd, &rr, bat))
		return oq_k_err(k, OQ_EINVAL, "batch dims of A and B do not broadcast");
	for (int i = 0; i < rr; i++)
		nb *= (size_t)bat[i];
	p->batch = nb;
	p->rank = 0;
	for (int i = 0; i < rr; i++)
		p->dims[p->rank++] = bat[i];
	if (a->rank != 1)
		p->dims[p->rank++] = p->m;
	if (b->rank != 1)
		p->dims[p->rank++] = p->n;
	p->aoff = oq_calloc(nb ? nb : 1, sizeof *p->aoff);
	p->boff = oq_calloc(nb ? nb : 1, sizeof *p->boff);
	p->coff = oq_calloc(nb ? nb : 1, sizeof *p->coff);
	if (!p->aoff || !p->boff || !p->coff) {
		oq_linalg_mm_free(p);
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < nb; i++) {
		size_t rem = i, ai = 0, bi = 0, ast = 1, bst = 1;
		for (int d = rr - 1; d >= 0; d--) {
			size_t idx = rem % (size_t)bat[d];
			int da = d - (rr - ra), db = d - (rr - rb);
			rem /= (size_t)bat[d];
			if (da >= 0) {
				ai += (ad[da] == 1 ? 0 : idx) * ast;
				ast *= (size_t)ad[da];
			}
			if (db >= 0) {
				bi += (bd[db] == 1 ? 0 : idx) * bst;
				bst *= (size_t)bd[db];
			}
		}
		p->aoff[i] = ai * (size_t)(p->m * p->kd);
		p->boff[i] = bi * (size_t)(p->kd * p->n);
		p->coff[i] = i * (size_t)(p->m * p->n);
	}
	return OQ_OK;
}

/*
 * Whether every batch item uses the same B (B's batch dims are all 1) and
 * the items of A and C follow each other (A is not broadcast): then the
 * batch is one GEMM of batch * m rows. Each output element is still the
 * same dot product of one A row and one B column, so only the tiling
 * changes: e.g. X[197, 1, 768] x W[768, 2304] is one 197-row product, not
 * 197 one-row ones that each repack W.
 */
static int mm_fold_batch(const oq_mm_plan *mp)
{
	size_t astep = (size_t)(mp->m * mp->kd);

	if (mp->batch < 2 || (double)mp->m * (double)mp->batch > (double)INT32_MAX)
		return 0;
	for (size_t i = 0; i < mp->batch; i++)
		if (mp->boff[i] != 0 || mp->aoff[i] != i * astep)
			return 0;
	return 1;
}

static int k_matmul(oq_kctx *k)
{
	oq_rt *a = oq_k_in(k, 0), *b = oq_k_in(k, 1), *y;
	oq_mm_plan mp;
	oq_gemm_batch p;
	void *ab = NULL, *bb = NULL, *yb = NULL;
	int ao = 0, bo = 0, yo = 0, rc;
	oq_ltype lt;

	if (!a || !b)
		return oq_k_err(k, OQ_EINVAL, "needs inputs A and B");
	if (a->dtype != b->dtype)
		return oq_k_err(k, OQ_EINVAL, "A is %s but B is %s", oq_dtype_name(a->dtype), oq_dtype_name(b->dtype));
	if (!is_float_like(a->dtype) && !is_int_type(a->dtype))
		return oq_k_err(k, OQ_EUNSUP, "type %s is not supported", oq_dtype_name(a->dtype));
	if ((rc = oq_linalg_mm_plan(k, a, b, &mp)))
		return rc;
	if (k->packed_b) { /* B packed by the plan (float32, batch dims all 1): one product of every row of A */
		if (a->dtype != OQ_DT_FLOAT || k->packed_b->kd != mp.kd || k->packed_b->n != mp.n) {
			rc = oq_k_err(k, OQ_EINVAL, "packed B does not fit (internal error)");
			goto done;
		}
		if (!(rc = oq_k_output_raw(k, 0, a->dtype, mp.rank, mp.dims, &y)))
			oq_packed_b_gemm(k, mp.m * (int64_t)mp.batch, a->data, mp.kd, k->packed_b, y->data, mp.n, 0);
		goto done;
	}
	if ((rc = oq_k_output(k, 0, a->dtype, mp.rank, mp.dims, &y)))
		goto done;
	memset(&p, 0, sizeof p);
	p.m = mp.m;
	p.n = mp.n;
	p.kd = mp.kd;
	p.alpha = 1;
	p.lda = mp.kd;
	p.ldb = mp.n;
	p.ldc = mp.n;
	p.batch = mp.batch;
	p.aoff = mp.aoff;
	p.boff = mp.boff;
	p.coff = mp.coff;
	if (is_int_type(a->dtype)) {
		int_gemm(a, b, y, &p, 1, 0);
		goto done;
	}
	if (mm_fold_batch(&mp)) { /* one [batch * m, kd] x [kd, n] product instead of batch small ones */
		p.m = mp.m * (int64_t)mp.batch;
		p.batch = 1;
		p.aoff = p.boff = p.coff = NULL;
	}
	lt = ltype_of(a->dtype);
	p.t = lt;
	if ((rc = oq_linalg_load(k, a, lt, NULL, 0, 1, &ab, &ao)) || (rc = oq_linalg_load(k, b, lt, NULL, 0, 1, &bb, &bo)) ||
	    (rc = out_buf(k, y, lt, &yb, &yo)))
		goto done;
	p.a = ab;
	p.b = bb;
	p.c = yb;
	oq_gemm_run(k, &p);
	if (yo)
		store(y, lt, yb);
done:
	if (ao)
		free(ab);
	if (bo)
		free(bb);
	if (yo)
		free(yb);
	oq_linalg_mm_free(&mp);
	return rc;
}

const oq_kreg oq_kernels_linalg[] = {
	{OQ_OP_Conv, 0, k_conv},
	{OQ_OP_ConvTranspose, 0, k_conv_transpose},
	{OQ_OP_Gemm, 0, k_gemm},
	{OQ_OP_MatMul, 0, k_matmul},
	{OQ_OP_ConvInteger, 0, oq_linalg_conv_integer},
	{OQ_OP_MatMulInteger, 0, oq_linalg_matmul_integer},
	{OQ_OP_QLinearConv, 0, oq_linalg_qlinear_conv},
	{OQ_OP_QLinearMatMul, 0, oq_linalg_qlinear_matmul},
	{OQ_OP_Einsum, 0, oq_linalg_einsum},
	{OQ_OP_UNKNOWN, 0, NULL},
};
