/*
 * integer.c - integer and quantized linear algebra: ConvInteger,
 * MatMulInteger (int32 results), QLinearConv and QLinearMatMul (requantised
 * 8-bit results).
 *
 * The zero points are subtracted while the operands are widened to double,
 * then the float convolution / GEMM engines run in double: every product
 * and partial sum is an integer below 2^53, so the int32 accumulator the
 * spec asks for is exact (and the padding of a convolution is a real zero,
 * i.e. the input zero point, as ONNX Runtime pads). Requantisation follows
 * ONNX Runtime: multiplier = x_scale * w_scale / y_scale in float32, then
 * y = saturate(round_half_even(float(acc) * multiplier) + y_zero_point).
 * Specs: https://onnx.ai/onnx/operators/ onnx__ConvInteger, onnx__MatMulInteger,
 * onnx__QLinearConv, onnx__QLinearMatMul.
 */
#include "calib/kernels/linalg/linalg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int is_q8(int dt)
{
	return dt == OQ_DT_UINT8 || dt == OQ_DT_INT8;
}

/*
 * Values of an optional scale / zero-point input as doubles: absent -> one
 * value dflt. `allowed1`/`allowed2`: the element counts accepted besides 1.
 */
static int params(oq_kctx *k, size_t idx, const char *what, double dflt, size_t allowed1, size_t allowed2,
		  double **out, size_t *n)
{
	oq_rt *t = oq_k_in(k, idx);
	*out = NULL;
	*n = 1;
	if (t && t->nelem != 1 && t->nelem != allowed1 && t->nelem != allowed2)
		return oq_k_err(k, OQ_EINVAL, "%s has %zu elements; expected 1 or %zu", what, t->nelem, allowed1);
	if (t && t->rank > 1 && t->nelem != 1) {
		/* N-D per-row/column forms are accepted only when they flatten to the vector form */
		int ones = 0;
		for (int i = 0; i < t->rank; i++)
			ones += t->dims[i] == 1;
		if (ones < t->rank - 1)
			return oq_k_err(k, OQ_EUNSUP, "%s of rank %d with several non-unit dims is not supported", what,
					t->rank);
	}
	if (t && oq_dtype_kind(t->dtype) != 'f' && oq_dtype_kind(t->dtype) != 's' && oq_dtype_kind(t->dtype) != 'u')
		return oq_k_err(k, OQ_EUNSUP, "%s has type %s", what, oq_dtype_name(t->dtype));
	*n = t ? t->nelem : 1;
	*out = malloc(*n * sizeof **out);
	if (!*out)
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	for (size_t i = 0; i < *n; i++)
		(*out)[i] = t ? oq_rt_get(t, i) : dflt;
	return OQ_OK;
}

/* float32 ONNX Runtime style requantisation of one accumulator. */
static double requant(double acc, float mult, double zp, double lo, double hi)
{
	float v = nearbyintf((float)acc * mult);
	double r = (double)v + zp;
	return r < lo ? lo : r > hi ? hi : r;
}

/* ------------------------------------------------------------ convolutions */

/*
 * Shared by ConvInteger (qlinear = 0: inputs x, w, x_zp, w_zp; int32 out)
 * and QLinearConv (inputs x, xs, xzp, w, ws, wzp, ys, yzp, B).
 */
static int conv_q(oq_kctx *k, int qlinear)
{
	size_t ix = 0, iw = qlinear ? 3 : 1, ixz = qlinear ? 2 : 2, iwz = qlinear ? 5 : 3;
	oq_rt *x = oq_k_in(k, ix), *w = oq_k_in(k, iw), *b = qlinear ? oq_k_in(k, 8) : NULL, *y;
	oq_rt *yzt = qlinear ? oq_k_in(k, 7) : NULL;
	oq_conv_geom g;
	int64_t dims[OQ_RT_MAX_RANK];
	double *xz = NULL, *wz = NULL, *xs = NULL, *ws = NULL, *ys = NULL, *yz = NULL, *acc = NULL, *bb = NULL;
	size_t nxz, nwz, nxs, nws, nys, nyz;
	void *xb = NULL, *wb = NULL;
	int xo = 0, wo = 0, rc, ydt;

	if (!x || !w)
		return oq_k_err(k, OQ_EINVAL, "needs inputs x and w");
	if (!is_q8(x->dtype) || !is_q8(w->dtype))
		return oq_k_err(k, OQ_EUNSUP, "x and w must be uint8 or int8 (got %s, %s)", oq_dtype_name(x->dtype),
				oq_dtype_name(w->dtype));
	if ((rc = oq_linalg_conv_geom(k, x, w, 0, &g)))
		return rc;
	if ((rc = params(k, ixz, "x_zero_point", 0, 1, 1, &xz, &nxz)) ||
	    (rc = params(k, iwz, "w_zero_point", 0, (size_t)g.m, (size_t)g.m, &wz, &nwz)))
		goto done;
	if (oq_k_in(k, ixz) && oq_k_in(k, ixz)->dtype != x->dtype) {
		rc = oq_k_err(k, OQ_EINVAL, "x_zero_point type %s differs from x's %s",
			      oq_dtype_name(oq_k_in(k, ixz)->dtype), oq_dtype_name(x->dtype));
		goto done;
	}
	if (qlinear) {
		if ((rc = params(k, 1, "x_scale", 1, 1, 1, &xs, &nxs)) ||
		    (rc = params(k, 4, "w_scale", 1, (size_t)g.m, (size_t)g.m, &ws, &nws)) ||
		    (rc = params(k, 6, "y_scale", 1, 1, 1, &ys, &nys)) || (rc = params(k, 7, "y_zero_point", 0, 1, 1, &yz, &nyz)))
			goto done;
		if (!oq_k_in(k, 1) || !oq_k_in(k, 4) || !oq_k_in(k, 6)) {
			rc = oq_k_err(k, OQ_EINVAL, "x_scale, w_scale and y_scale are required");
			goto done;
		}
		if (b && (b->rank != 1 || b->dims[0] != g.m || b->dtype != OQ_DT_INT32)) {
			rc = oq_k_err(k, OQ_EINVAL, "bias B must be int32 of shape [%lld]", (long long)g.m);
			goto done;
		}
	}
	ydt = qlinear ? (yzt ? yzt->dtype : x->dtype) : OQ_DT_INT32;
	if (qlinear && !is_q8(ydt)) {
		rc = oq_k_err(k, OQ_EUNSUP, "y_zero_point must be uint8 or int8 (got %s)", oq_dtype_name(ydt));
		goto done;
	}
	dims[0] = g.n;
	dims[1] = g.m;
	for (int d = 0; d < g.nsp; d++)
		dims[d + 2] = g.out[d];
	if ((rc = oq_k_output(k, 0, ydt, x->rank, dims, &y)))
		goto done;
	if ((rc = oq_linalg_load(k, x, OQ_LT_F64, xz, 1, 1, &xb, &xo)) ||
	    (rc = oq_linalg_load(k, w, OQ_LT_F64, wz, nwz, (size_t)(g.c / g.group * g.k_size), &wb, &wo)))
		goto done;
	if (b) {
		if (!(bb = malloc((size_t)g.m * sizeof *bb))) {
			rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
			goto done;
		}
		for (int64_t i = 0; i < g.m; i++)
			bb[i] = (double)oq_rt_get_int(b, (size_t)i);
	}
	if (!(acc = malloc((y->nelem + 1) * sizeof *acc))) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto done;
	}
	if ((rc = oq_conv_run(k, OQ_LT_F64, &g, xb, wb, bb, acc))) {
		rc = oq_k_err(k, rc, "out of memory for the convolution's work buffers");
		goto done;
	}
	if (!qlinear) {
		int32_t *o = y->data;
		for (size_t i = 0; i < y->nelem; i++)
			o[i] = (int32_t)(uint32_t)(int64_t)acc[i]; /* int32 accumulator wraps */
	} else {
		double lo = ydt == OQ_DT_UINT8 ? 0 : -128, hi = ydt == OQ_DT_UINT8 ? 255 : 127;
		size_t plane = (size_t)g.out_size;
		for (size_t i = 0; i < y->nelem; i++) {
			size_t m = i / plane % (size_t)g.m;
			float mult = (float)xs[0] * (float)ws[nws > 1 ? m : 0] / (float)ys[0];
			double v = requant((double)(int32_t)(uint32_t)(int64_t)acc[i], mult, yz[0], lo, hi);
			if (ydt == OQ_DT_UINT8)
				((uint8_t *)y->data)[i] = (uint8_t)v;
			else
				((int8_t *)y->data)[i] = (int8_t)v;
		}
	}
done:
	free(xz);
	free(wz);
	free(xs);
	free(ws);
	free(ys);
	free(yz);
	free(acc);
	free(bb);
	if (xo)
		free(xb);
	if (wo)
		free(wb);
	return rc;
}

int oq_linalg_conv_integer(oq_kctx *k)
{
	return conv_q(k, 0);
}

int oq_linalg_qlinear_conv(oq_kctx *k)
{
	return conv_q(k, 1);
}

/* ------------------------------------------------------------ matmuls */

static int matmul_q(oq_kctx *k, int qlinear)
{
	size_t ia = 0, ib = qlinear ? 3 : 1, iaz = qlinear ? 2 : 2, ibz = qlinear ? 5 : 3;
	oq_rt *a = oq_k_in(k, ia), *b = oq_k_in(k, ib), *y, *yzt = qlinear ? oq_k_in(k, 7) : NULL;
	oq_mm_plan mp;
	oq_gemm_batch p;
	double *az = NULL, *bz = NULL, *as = NULL, *bs = NULL, *ys = NULL, *yz = NULL, *acc = NULL;
	size_t naz, nbz, nas, nbs, nys, nyz, rows;
	void *ab = NULL, *bb = NULL;
	int ao = 0, bo = 0, rc, ydt;

	memset(&mp, 0, sizeof mp);
	if (!a || !b)
		return oq_k_err(k, OQ_EINVAL, "needs inputs A and B");
	if (!is_q8(a->dtype) || !is_q8(b->dtype))
		return oq_k_err(k, OQ_EUNSUP, "A and B must be uint8 or int8 (got %s, %s)", oq_dtype_name(a->dtype),
				oq_dtype_name(b->dtype));
	if ((rc = oq_linalg_mm_plan(k, a, b, &mp)))
		return rc;
	rows = mp.kd ? a->nelem / (size_t)mp.kd : 0; /* rows of A over all batch items */
	if ((rc = params(k, iaz, "a_zero_point", 0, (size_t)mp.m, rows, &az, &naz)) ||
	    (rc = params(k, ibz, "b_zero_point", 0, (size_t)mp.n, (size_t)mp.n, &bz, &nbz)))
		goto done;
	if (qlinear) {
		if ((rc = params(k, 1, "a_scale", 1, (size_t)mp.m, rows, &as, &nas)) ||
		    (rc = params(k, 4, "b_scale", 1, (size_t)mp.n, (size_t)mp.n, &bs, &nbs)) ||
		    (rc = params(k, 6, "y_scale", 1, (size_t)mp.m, (size_t)mp.m, &ys, &nys)) ||
		    (rc = params(k, 7, "y_zero_point", 0, (size_t)mp.m, (size_t)mp.m, &yz, &nyz)))
			goto done;
		if (!oq_k_in(k, 1) || !oq_k_in(k, 4) || !oq_k_in(k, 6)) {
			rc = oq_k_err(k, OQ_EINVAL, "a_scale, b_scale and y_scale are required");
			goto done;
		}
	}
	ydt = qlinear ? (yzt ? yzt->dtype : a->dtype) : OQ_DT_INT32;
	if (qlinear && !is_q8(ydt)) {
		rc = oq_k_err(k, OQ_EUNSUP, "y_zero_point must be uint8 or int8 (got %s)", oq_dtype_name(ydt));
		goto done;
	}
	if ((rc = oq_k_output(k, 0, ydt, mp.rank, mp.dims, &y)))
		goto done;
	if ((rc = oq_linalg_load(k, a, OQ_LT_F64, az, naz, (size_t)mp.kd, &ab, &ao)) ||
	    (rc = oq_linalg_load(k, b, OQ_LT_F64, bz, nbz, 1, &bb, &bo)))
		goto done;
	if (!(acc = malloc((y->nelem + 1) * sizeof *acc))) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto done;
	}
	memset(&p, 0, sizeof p);
	p.t = OQ_LT_F64;
	p.m = mp.m;
	p.n = mp.n;
	p.kd = mp.kd;
	p.alpha = 1;
	p.a = ab;
	p.b = bb;
	p.c = acc;
	p.lda = mp.kd;
	p.ldb = mp.n;
	p.ldc = mp.n;
	p.batch = mp.batch;
	p.aoff = mp.aoff;
	p.boff = mp.boff;
	p.coff = mp.coff;
	oq_gemm_run(k, &p);
	if (!qlinear) {
		int32_t *o = y->data;
		for (size_t i = 0; i < y->nelem; i++)
			o[i] = (int32_t)(uint32_t)(int64_t)acc[i];
	} else {
		double lo = ydt == OQ_DT_UINT8 ? 0 : -128, hi = ydt == OQ_DT_UINT8 ? 255 : 127;
		size_t nn = (size_t)mp.n, mm = (size_t)mp.m;
		for (size_t i = 0; i < y->nelem; i++) {
			size_t col = nn ? i % nn : 0, row = nn ? i / nn % (mm ? mm : 1) : 0, grow = nn ? i / nn : 0;
			float mult = (float)as[nas == 1 ? 0 : nas == mm ? row : grow % nas] * (float)bs[nbs > 1 ? col : 0] /
				     (float)ys[nys > 1 ? row : 0];
			double v = requant((double)(int32_t)(uint32_t)(int64_t)acc[i], mult, yz[nyz > 1 ? row : 0], lo, hi);
			if (ydt == OQ_DT_UINT8)
				((uint8_t *)y->data)[i] = (uint8_t)v;
			else
				((int8_t *)y->data)[i] = (int8_t)v;
		}
	}
done:
	free(az);
	free(bz);
	free(as);
	free(bs);
	free(ys);
	free(yz);
	free(acc);
	if (ao)
		free(ab);
	if (bo)
		free(bb);
	oq_linalg_mm_free(&mp);
	return rc;
}

int oq_linalg_matmul_integer(oq_kctx *k)
{
	return matmul_q(k, 0);
}

int oq_linalg_qlinear_matmul(oq_kctx *k)
{
	return matmul_q(k, 1);
}
