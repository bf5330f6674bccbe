/*
 * shape.c - kernel family 'shape': ops that move, select or create
 * elements without arithmetic on them (Reshape, Transpose, Slice, Concat,
 * Split, Pad, Expand, Tile, Shape, Constant, ...), plus the table that
 * registers them and the index ops (index.c) and Resize/Upsample
 * (resize.c).
 *
 * Opset differences handled here (ONNX docs/Changelog.md):
 * - Reshape: shape attribute before 5, input after; allowzero from 14.
 * - Squeeze/Unsqueeze/Split: axes / split attribute before 13, input from 13;
 *   Split num_outputs from 18 (last chunk may be smaller).
 * - Slice: starts/ends/axes attributes before 10, inputs (plus steps) after.
 * - Pad: paddings attribute at 1, pads attribute 2..10, inputs from 11,
 *   axes input from 18, wrap mode from 19.
 * - Shape: start/end from 15. Dropout: ratio/training_mode inputs from 12,
 *   mask is bool from 10. Tile: tiles/axis inputs at 1, repeats from 6.
 * Elements are moved as raw bits, so every dtype (strings included) works.
 */
#include "calib/kernels/shape/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXR OQ_RT_MAX_RANK

/* Axes from an attribute (before `input_from`) or from input `idx`; *present = 0 when absent. */
static int get_axes(oq_kctx *k, int input_from, size_t idx, const char *name, int64_t *v, size_t *n,
		    int *present)
{
	*n = 0;
	*present = 0;
	if (k->opset < input_from) {
		const int64_t *a;
		size_t m = oq_k_ints(k, name, &a);
		if (!oq_k_attr(k, name))
			return OQ_OK;
		if (m > MAXR)
			return oq_k_err(k, OQ_EINVAL, "attribute '%s' has %zu entries", name, m);
		if (m)
			memcpy(v, a, m * sizeof *v);
		*n = m;
		*present = 1;
		return OQ_OK;
	}
	if (!oq_k_in(k, idx))
		return OQ_OK;
	*present = 1;
	return oq_sh_read_ints(k, oq_k_in(k, idx), name, v, MAXR, n);
}

/* ------------------------------------------------------------ pure reshapes */

static int k_identity(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	return oq_k_output_like(k, 0, x, x->rank, x->dims, &y);
}

static int k_dropout(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y, *m;
	int rc;
	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	if (k->opset >= 12 && oq_k_in(k, 2) && oq_k_in(k, 2)->nelem && oq_sh_nonzero(oq_k_in(k, 2), 0)) {
		double ratio = oq_k_in(k, 1) && oq_k_in(k, 1)->nelem ? oq_rt_get(oq_k_in(k, 1), 0) : 0.5;
		if (ratio != 0)
			return oq_k_err(k, OQ_EUNSUP, "training_mode is true with ratio %g: random dropout is "
						      "not supported (inference only)", ratio);
	}
	if ((rc = oq_k_output_like(k, 0, x, x->rank, x->dims, &y)))
		return rc;
	if (k->n_out > 1 && k->node->outputs[1]) {
		/* 12+: all true (nothing dropped). 7..11: onnxruntime returns zeros, which we match. */
		int bool_mask = k->opset >= 10;
		if ((rc = oq_k_output(k, 1, bool_mask ? OQ_DT_BOOL : x->dtype, x->rank, x->dims, &m)))
			return rc;
		for (size_t i = 0; k->opset >= 12 && i < m->nelem; i++)
			oq_rt_set(m, i, 1);
	}
	return OQ_OK;
}

static int k_reshape(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t s[MAXR], known = 1;
	size_t n;
	int rc, infer = -1, allowzero = k->opset >= 14 && oq_k_int(k, "allowzero", 0) != 0;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input 'data' is missing");
	if (k->opset < 5) {
		const int64_t *a;
		n = oq_k_ints(k, "shape", &a);
		if (n > MAXR)
			return oq_k_err(k, OQ_EUNSUP, "target rank %zu is above %d", n, MAXR);
		if (n)
			memcpy(s, a, n * sizeof *s);
	} else if ((rc = oq_sh_read_ints(k, oq_k_in(k, 1), "shape", s, MAXR, &n))) {
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] == 0 && !allowzero) {
			if ((int)i >= x->rank)
				return oq_k_err(k, OQ_EINVAL, "shape[%zu] = 0 copies a dim the %d-d input lacks", i,
						x->rank);
			s[i] = x->dims[i];
		}
		if (s[i] == -1) {
			if (infer >= 0)
				return oq_k_err(k, OQ_EINVAL, "shape has more than one -1");
			infer = (int)i;
			continue;
		}
		if (s[i] < 0)
			return oq_k_err(k, OQ_EINVAL, "shape[%zu] = %lld is invalid", i, (long long)s[i]);
		if (s[i] && known > INT64_MAX / s[i])
			return oq_k_err(k, OQ_EINVAL, "shape overflows");
		known *= s[i];
	}
	if (infer >= 0) {
		if (known == 0 || (int64_t)x->nelem % known)
			return oq_k_err(k, OQ_EINVAL, "cannot infer the -1 dim: %zu elements, other dims give %lld",
					x->nelem, (long long)known);
		s[infer] = (int64_t)x->nelem / known;
		known *= s[infer];
	}
	if ((size_t)known != x->nelem)
		return oq_k_err(k, OQ_EINVAL, "cannot reshape %zu elements into %lld", x->nelem, (long long)known);
	return oq_k_output_like(k, 0, x, (int)n, s, &y);
}

static int k_flatten(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t axis = oq_k_int(k, "axis", 1), d[2];
	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	if (axis < 0)
		axis += x->rank;
	if (axis < 0 || axis > x->rank)
		return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range for rank %d",
				(long long)oq_k_int(k, "axis", 1), x->rank);
	d[0] = oq_sh_prod(x->dims, 0, (int)axis);
	d[1] = oq_sh_prod(x->dims, (int)axis, x->rank);
	return oq_k_output_like(k, 0, x, 2, d, &y);
}

static int k_squeeze(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t ax[MAXR], d[MAXR];
	char drop[MAXR] = {0};
	size_t n;
	int present, rc, r = 0;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	if ((rc = get_axes(k, 13, 1, "axes", ax, &n, &present)))
		return rc;
	if (!present) {
		for (int i = 0; i < x->rank; i++)
			drop[i] = x->dims[i] == 1;
	}
	for (size_t i = 0; i < n; i++) {
		int a = oq_axis(ax[i], x->rank);
		if (a < 0)
			return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range for rank %d", (long long)ax[i],
					x->rank);
		if (x->dims[a] != 1)
			return oq_k_err(k, OQ_EINVAL, "cannot squeeze axis %d of size %lld", a, (long long)x->dims[a]);
		drop[a] = 1;
	}
	for (int i = 0; i < x->rank; i++)
		if (!drop[i])
			d[r++] = x->dims[i];
	return oq_k_output_like(k, 0, x, r, d, &y);
}

static int k_unsqueeze(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t ax[MAXR], d[MAXR];
	char add[MAXR] = {0};
	size_t n;
	int present, rc, r, j = 0;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	if ((rc = get_axes(k, 13, 1, "axes", ax, &n, &present)))
		return rc;
	if (!present)
		return oq_k_err(k, OQ_EINVAL, "axes are missing");
	r = x->rank + (int)n;
	if (r > MAXR)
		return oq_k_err(k, OQ_EUNSUP, "output rank %d is above %d", r, MAXR);
	for (size_t i = 0; i < n; i++) {
		int a = oq_axis(ax[i], r);
		if (a < 0 || add[a])
			return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range or repeated (output rank %d)",
					(long long)ax[i], r);
		add[a] = 1;
	}
	for (int i = 0; i < r; i++)
		d[i] = add[i] ? 1 : x->dims[j++];
	return oq_k_output_like(k, 0, x, r, d, &y);
}

/* ----------------------------------------------------- strided copies */

static int k_transpose(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	const int64_t *p;
	size_t n = oq_k_ints(k, "perm", &p);
	int64_t st[MAXR], d[MAXR];
	char seen[MAXR] = {0};
	oq_sh_view v;
	int rc;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	if (n && n != (size_t)x->rank)
		return oq_k_err(k, OQ_EINVAL, "perm has %zu entries for rank %d", n, x->rank);
	memset(&v, 0, sizeof v);
	oq_sh_strides(x->rank, x->dims, st);
	v.rank = x->rank;
	for (int i = 0; i < x->rank; i++) {
		int a = n ? oq_axis(p[i], x->rank) : x->rank - 1 - i;
		if (a < 0 || seen[a])
			return oq_k_err(k, OQ_EINVAL, "perm is not a permutation of 0..%d", x->rank - 1);
		seen[a] = 1;
		d[i] = x->dims[a];
		v.dims[i] = d[i];
		v.ss[i] = st[a];
	}
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, d, &y)))
		return rc;
	oq_sh_strides(y->rank, y->dims, v.ds);
	return oq_sh_view_copy(k, y, x, &v);
}

static int k_slice(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t st[MAXR], en[MAXR], ax[MAXR], sp[MAXR], d[MAXR], xs[MAXR];
	int64_t begin[MAXR], step[MAXR];
	char seen[MAXR] = {0};
	size_t ns, ne, na = 0, np = 0;
	int rc, has_axes = 0, has_steps = 0;
	oq_sh_view v;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	if (k->opset < 10) {
		const int64_t *a;
		/* Slice-1: starts and ends are required attributes */
		if (!oq_k_attr(k, "starts") || !oq_k_attr(k, "ends"))
			return oq_k_err(k, OQ_EINVAL, "the required attributes starts and ends are missing "
						      "(Slice before opset 10)");
		ns = oq_k_ints(k, "starts", &a);
		if (ns > MAXR)
			return oq_k_err(k, OQ_EINVAL, "too many starts");
		if (ns)
			memcpy(st, a, ns * sizeof *st);
		ne = oq_k_ints(k, "ends", &a);
		if (ne > MAXR)
			return oq_k_err(k, OQ_EINVAL, "too many ends");
		if (ne)
			memcpy(en, a, ne * sizeof *en);
		if (oq_k_attr(k, "axes")) {
			na = oq_k_ints(k, "axes", &a);
			if (na > MAXR)
				return oq_k_err(k, OQ_EINVAL, "too many axes");
			if (na)
				memcpy(ax, a, na * sizeof *ax);
			has_axes = 1;
		}
	} else {
		if ((rc = oq_sh_read_ints(k, oq_k_in(k, 1), "starts", st, MAXR, &ns)) ||
		    (rc = oq_sh_read_ints(k, oq_k_in(k, 2), "ends", en, MAXR, &ne)))
			return rc;
		if (oq_k_in(k, 3)) {
			if ((rc = oq_sh_read_ints(k, oq_k_in(k, 3), "axes", ax, MAXR, &na)))
				return rc;
			has_axes = 1;
		}
		if (oq_k_in(k, 4)) {
			if ((rc = oq_sh_read_ints(k, oq_k_in(k, 4), "steps", sp, MAXR, &np)))
				return rc;
			has_steps = 1;
		}
	}
	if (ns != ne || (has_axes && na != ns) || (has_steps && np != ns))
		return oq_k_err(k, OQ_EINVAL, "starts, ends, axes and steps must have the same length (%zu, %zu, "
					      "%zu, %zu)", ns, ne, has_axes ? na : ns, has_steps ? np : ns);
	for (int i = 0; i < x->rank; i++) {
		begin[i] = 0;
		step[i] = 1;
		d[i] = x->dims[i];
	}
	for (size_t i = 0; i < ns; i++) {
		int a = oq_axis(has_axes ? ax[i] : (int64_t)i, x->rank);
		int64_t dim, s, e, t = has_steps ? sp[i] : 1, cnt;
		if (a < 0 || seen[a])
			return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range for rank %d or repeated",
					(long long)(has_axes ? ax[i] : (int64_t)i), x->rank);
		seen[a] = 1;
		if (t == 0)
			return oq_k_err(k, OQ_EINVAL, "step for axis %d is 0", a);
		dim = x->dims[a];
		s = st[i];
		e = en[i];
		if (s < 0)
			s += dim;
		if (e < 0)
			e += dim;
		if (t > 0) {
			s = s < 0 ? 0 : s > dim ? dim : s;
			e = e < 0 ? 0 : e > dim ? dim : e;
			cnt = e > s ? (e - s - 1) / t + 1 : 0;
		} else {
			if (t == INT64_MIN) /* same slice, and -t stays representable */
				t = -INT64_MAX;
			s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
			e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
			cnt = s > e ? (s - e - 1) / (-t) + 1 : 0;
		}
		begin[a] = s;
		step[a] = cnt > 1 ? t : 1; /* a lone element: keep the stride product small */
		d[a] = cnt;
	}
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, d, &y)))
		return rc;
	memset(&v, 0, sizeof v);
	oq_sh_strides(x->rank, x->dims, xs);
	oq_sh_strides(y->rank, y->dims, v.ds);
	v.rank = x->rank;
	for (int i = 0; i < x->rank; i++) {
		v.dims[i] = d[i];
		v.ss[i] = xs[i] * step[i];
		if (d[i])
			v.soff += begin[i] * xs[i];
	}
	return oq_sh_view_copy(k, y, x, &v);
}

static int k_expand(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t s[MAXR], d[MAXR], xs[MAXR];
	size_t n;
	int rc, r;
	oq_sh_view v;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	if ((rc = oq_sh_read_ints(k, oq_k_in(k, 1), "shape", s, MAXR, &n)))
		return rc;
	if (oq_broadcast(x->rank, x->dims, (int)n, s, &r, d))
		return oq_k_err(k, OQ_EINVAL, "input shape does not broadcast to the requested shape");
	if ((rc = oq_k_output(k, 0, x->dtype, r, d, &y)))
		return rc;
	memset(&v, 0, sizeof v);
	oq_sh_strides(x->rank, x->dims, xs);
	oq_sh_strides(r, d, v.ds);
	v.rank = r;
	for (int i = 0; i < r; i++) {
		int j = i - (r - x->rank);
		v.dims[i] = d[i];
		v.ss[i] = j < 0 || x->dims[j] == 1 ? 0 : xs[j];
	}
	return oq_sh_view_copy(k, y, x, &v);
}

/* Tile: out dims d*r, viewed as [r0, d0, r1, d1, ...] with zero stride on the repeats. */
static int tile(oq_kctx *k, oq_rt *x, const int64_t *rep)
{
	int64_t d[MAXR], xs[MAXR], ys[MAXR];
	oq_rt *y;
	oq_sh_view v;
	int rc;

	for (int i = 0; i < x->rank; i++) {
		if (rep[i] < 0)
			return oq_k_err(k, OQ_EINVAL, "repeats[%d] = %lld is negative", i, (long long)rep[i]);
		if (rep[i] && x->dims[i] > INT64_MAX / rep[i])
			return oq_k_err(k, OQ_EINVAL, "output dim overflows");
		d[i] = x->dims[i] * rep[i];
	}
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, d, &y)))
		return rc;
	memset(&v, 0, sizeof v);
	oq_sh_strides(x->rank, x->dims, xs);
	oq_sh_strides(x->rank, d, ys);
	v.rank = 2 * x->rank;
	for (int i = 0; i < x->rank; i++) {
		v.dims[2 * i] = rep[i];
		v.ss[2 * i] = 0;
		v.ds[2 * i] = ys[i] * x->dims[i];
		v.dims[2 * i + 1] = x->dims[i];
		v.ss[2 * i + 1] = xs[i];
		v.ds[2 * i + 1] = ys[i];
	}
	return oq_sh_view_copy(k, y, x, &v);
}

static int k_tile(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0);
	int64_t rep[MAXR];
	size_t n;
	int rc;
	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	if ((rc = oq_sh_read_ints(k, oq_k_in(k, 1), "repeats", rep, MAXR, &n)))
		return rc;
	if (n != (size_t)x->rank)
		return oq_k_err(k, OQ_EINVAL, "repeats has %zu entries for rank %d", n, x->rank);
	return tile(k, x, rep);
}

/* Tile-1: inputs (input, tiles, axis), both scalars. */
static int k_tile1(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *t = oq_k_in(k, 1), *a = oq_k_in(k, 2);
	int64_t rep[MAXR];
	int ax;
	if (!x || !t || !a || t->nelem != 1 || a->nelem != 1)
		return oq_k_err(k, OQ_EINVAL, "needs input, scalar tiles and scalar axis");
	ax = oq_axis(oq_rt_get_int(a, 0), x->rank);
	if (ax < 0)
		return oq_k_err(k, OQ_EINVAL, "axis is out of range");
	for (int i = 0; i < x->rank; i++)
		rep[i] = i == ax ? oq_rt_get_int(t, 0) : 1;
	return tile(k, x, rep);
}

static int k_concat(oq_kctx *k)
{
	oq_rt *x0 = NULL, *y;
	int64_t d[MAXR], axis = oq_k_int(k, "axis", k->opset < 4 ? 1 : INT64_MIN), off = 0;
	int a, rc;

	for (size_t i = 0; i < k->n_in; i++)
		if (k->in[i]) {
			x0 = k->in[i];
			break;
		}
	if (!x0)
		return oq_k_err(k, OQ_EINVAL, "no inputs");
	if (axis == INT64_MIN)
		return oq_k_err(k, OQ_EINVAL, "attribute 'axis' is required");
	a = oq_axis(axis, x0->rank);
	if (a < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range for rank %d", (long long)axis, x0->rank);
	memcpy(d, x0->dims, (size_t)x0->rank * sizeof *d);
	d[a] = 0;
	for (size_t i = 0; i < k->n_in; i++) {
		oq_rt *x = k->in[i];
		if (!x)
			continue;
		if (x->dtype != x0->dtype || x->rank != x0->rank)
			return oq_k_err(k, OQ_EINVAL, "input %zu has another dtype or rank than input 0", i);
		for (int j = 0; j < x->rank; j++)
			if (j != a && x->dims[j] != x0->dims[j])
				return oq_k_err(k, OQ_EINVAL, "input %zu: dim %d is %lld, input 0 has %lld", i, j,
						(long long)x->dims[j], (long long)x0->dims[j]);
		d[a] += x->dims[a];
	}
	if ((rc = oq_k_output(k, 0, x0->dtype, x0->rank, d, &y)))
		return rc;
	for (size_t i = 0; i < k->n_in; i++) {
		oq_rt *x = k->in[i];
		oq_sh_view v;
		int64_t outer = oq_sh_prod(d, 0, a), inner = oq_sh_prod(d, a + 1, x0->rank);
		if (!x)
			continue;
		memset(&v, 0, sizeof v);
		v.rank = 2;
		v.dims[0] = outer;
		v.dims[1] = x->dims[a] * inner;
		v.ss[0] = v.dims[1];
		v.ss[1] = 1;
		v.ds[0] = d[a] * inner;
		v.ds[1] = 1;
		v.doff = off * inner;
		if ((rc = oq_sh_view_copy(k, y, x, &v)))
			return rc;
		off += x->dims[a];
	}
	return OQ_OK;
}

static int k_split(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0);
	int64_t sp[256], axis = oq_k_int(k, "axis", 0), off = 0, total = 0;
	size_t n = 0, nout = k->n_out;
	int a, rc;

	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	a = oq_axis(axis, x->rank);
	if (a < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range for rank %d", (long long)axis, x->rank);
	if (nout == 0 || nout > 256)
		return oq_k_err(k, OQ_EUNSUP, "%zu outputs", nout);
	if (k->opset >= 13 || (k->opset < 2 && oq_k_in(k, 1))) {
		if (oq_k_in(k, 1) && (rc = oq_sh_read_ints(k, oq_k_in(k, 1), "split", sp, 256, &n)))
			return rc;
	} else {
		const int64_t *s;
		n = oq_k_ints(k, "split", &s);
		if (n > 256)
			return oq_k_err(k, OQ_EUNSUP, "split has %zu entries", n);
		if (n)
			memcpy(sp, s, n * sizeof *sp);
	}
	if (n) {
		if (n != nout)
			return oq_k_err(k, OQ_EINVAL, "split has %zu entries for %zu outputs", n, nout);
	} else {
		int64_t num = k->opset >= 18 ? oq_k_int(k, "num_outputs", (int64_t)nout) : (int64_t)nout;
		int64_t dim = x->dims[a], chunk;
		if (num != (int64_t)nout)
			return oq_k_err(k, OQ_EINVAL, "num_outputs is %lld but the node has %zu outputs",
					(long long)num, nout);
		if (k->opset < 18 && dim % num)
			return oq_k_err(k, OQ_EINVAL, "dim %lld does not split into %lld equal parts",
					(long long)dim, (long long)num);
		chunk = (dim + num - 1) / num;
		if (chunk * (num - 1) > dim)
			return oq_k_err(k, OQ_EINVAL, "dim %lld cannot give %lld chunks of %lld", (long long)dim,
					(long long)num, (long long)chunk);
		for (size_t i = 0; i < nout; i++)
			sp[i] = i + 1 < nout ? chunk : dim - chunk * (num - 1);
		n = nout;
	}
	for (size_t i = 0; i < n; i++) {
		if (sp[i] < 0 || sp[i] > x->dims[a])
			return oq_k_err(k, OQ_EINVAL, "split[%zu] = %lld is out of range", i, (long long)sp[i]);
		total += sp[i];
	}
	if (total != x->dims[a])
		return oq_k_err(k, OQ_EINVAL, "split sums to %lld, axis %d has %lld", (long long)total, a,
				(long long)x->dims[a]);
	for (size_t i = 0; i < n; i++) {
		int64_t d[MAXR];
		int64_t outer = oq_sh_prod(x->dims, 0, a), inner = oq_sh_prod(x->dims, a + 1, x->rank);
		oq_rt *y;
		oq_sh_view v;
		memcpy(d, x->dims, (size_t)x->rank * sizeof *d);
		d[a] = sp[i];
		if ((rc = oq_k_output(k, i, x->dtype, x->rank, d, &y)))
			return rc;
		memset(&v, 0, sizeof v);
		v.rank = 2;
		v.dims[0] = outer;
		v.dims[1] = sp[i] * inner;
		v.ss[0] = x->dims[a] * inner;
		v.ss[1] = 1;
		v.ds[0] = v.dims[1];
		v.ds[1] = 1;
		v.soff = off * inner;
		if ((rc = oq_sh_view_copy(k, y, x, &v)))
			return rc;
		off += sp[i];
	}
	return OQ_OK;
}

/* DepthToSpace / SpaceToDepth as 6-d transposes. */
static int space_depth(oq_kctx *k, int to_space)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t b = oq_k_int(k, "blocksize", 0), d[4], t[6], ts[6];
	const char *mode = oq_k_str(k, "mode", "DCR");
	int crd = to_space && k->opset >= 11 && strcmp(mode, "CRD") == 0, rc;
	static const int dcr[6] = {0, 3, 4, 1, 5, 2}, crdp[6] = {0, 1, 4, 2, 5, 3}, s2d[6] = {0, 3, 5, 1, 2, 4};
	const int *perm;
	oq_sh_view v;

	if (!x || x->rank != 4)
		return oq_k_err(k, OQ_EINVAL, "needs a 4-d input");
	if (b <= 0)
		return oq_k_err(k, OQ_EINVAL, "blocksize must be positive");
	if (to_space && strcmp(mode, "DCR") && strcmp(mode, "CRD"))
		return oq_k_err(k, OQ_EINVAL, "unknown mode '%s'", mode);
	if (to_space) {
		if (x->dims[1] % (b * b))
			return oq_k_err(k, OQ_EINVAL, "channels %lld are not a multiple of blocksize^2",
					(long long)x->dims[1]);
		int64_t c = x->dims[1] / (b * b);
		int64_t dcrt[6] = {x->dims[0], b, b, c, x->dims[2], x->dims[3]};
		int64_t crdt[6] = {x->dims[0], c, b, b, x->dims[2], x->dims[3]};
		memcpy(t, crd ? crdt : dcrt, sizeof t);
		perm = crd ? crdp : dcr;
		d[0] = x->dims[0];
		d[1] = c;
		d[2] = x->dims[2] * b;
		d[3] = x->dims[3] * b;
	} else {
		if (x->dims[2] % b || x->dims[3] % b)
			return oq_k_err(k, OQ_EINVAL, "height and width must be multiples of blocksize");
		int64_t s[6] = {x->dims[0], x->dims[1], x->dims[2] / b, b, x->dims[3] / b, b};
		memcpy(t, s, sizeof t);
		perm = s2d;
		d[0] = x->dims[0];
		d[1] = x->dims[1] * b * b;
		d[2] = x->dims[2] / b;
		d[3] = x->dims[3] / b;
	}
	if ((rc = oq_k_output(k, 0, x->dtype, 4, d, &y)))
		return rc;
	memset(&v, 0, sizeof v);
	oq_sh_strides(6, t, ts);
	v.rank = 6;
	for (int i = 0; i < 6; i++) {
		v.dims[i] = t[perm[i]];
		v.ss[i] = ts[perm[i]];
	}
	oq_sh_strides(6, v.dims, v.ds);
	return oq_sh_view_copy(k, y, x, &v);
}

static int k_depth_to_space(oq_kctx *k) { return space_depth(k, 1); }
static int k_space_to_depth(oq_kctx *k) { return space_depth(k, 0); }

/* ------------------------------------------------------------------ Pad */

/* Source coordinate for output coordinate o along a dim of size n; -1: constant. */
static int64_t pad_src(int64_t o, int64_t before, int64_t n, int mode)
{
	int64_t c = o - before;
	if (c >= 0 && c < n)
		return c;
	if (n == 0)
		return -1;
	switch (mode) {
	case 1: /* edge */
		return c < 0 ? 0 : n - 1;
	case 2: { /* reflect */
		int64_t p = 2 * (n - 1);
		if (p == 0)
			return 0;
		c %= p;
		if (c < 0)
			c += p;
		return c >= n ? p - c : c;
	}
	case 3: /* wrap */
		c %= n;
		return c < 0 ? c + n : c;
	default:
		return -1;
	}
}

static int k_pad(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y, fill;
	int64_t pads[2 * MAXR], raw[2 * MAXR], ax[MAXR], d[MAXR], xs[MAXR];
	size_t np = 0, na = 0;
	const char *ms = oq_k_str(k, "mode", "constant");
	int mode, rc, r;

	memset(&fill, 0, sizeof fill);
	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	r = x->rank;
	if (r == 0)
		return oq_k_output_like(k, 0, x, 0, NULL, &y);
	if (!strcmp(ms, "constant"))
		mode = 0;
	else if (!strcmp(ms, "edge"))
		mode = 1;
	else if (!strcmp(ms, "reflect"))
		mode = 2;
	else if (!strcmp(ms, "wrap") && k->opset >= 19)
		mode = 3;
	else
		return oq_k_err(k, OQ_EINVAL, "unknown mode '%s'", ms);
	if (k->opset < 11) {
		const int64_t *p;
		np = oq_k_ints(k, k->opset < 2 ? "paddings" : "pads", &p);
		if (np > 2 * MAXR)
			return oq_k_err(k, OQ_EINVAL, "too many pads");
		if (np)
			memcpy(raw, p, np * sizeof *raw);
	} else if ((rc = oq_sh_read_ints(k, oq_k_in(k, 1), "pads", raw, 2 * MAXR, &np))) {
		return rc;
	}
	if (k->opset >= 18 && oq_k_in(k, 3)) {
		if ((rc = oq_sh_read_ints(k, oq_k_in(k, 3), "axes", ax, MAXR, &na)))
			return rc;
	} else {
		na = (size_t)r;
		for (int i = 0; i < r; i++)
			ax[i] = i;
	}
	if (np != 2 * na)
		return oq_k_err(k, OQ_EINVAL, "pads has %zu entries, %zu expected", np, 2 * na);
	for (size_t i = 0; i < np; i++)
		if (raw[i] > ((int64_t)1 << 40) || raw[i] < -((int64_t)1 << 40))
			return oq_k_err(k, OQ_EINVAL, "pads[%zu] = %lld is out of range", i, (long long)raw[i]);
	for (int i = 0; i < 2 * r; i++)
		pads[i] = 0;
	for (size_t i = 0; i < na; i++) {
		int a = oq_axis(ax[i], r);
		if (a < 0)
			return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range", (long long)ax[i]);
		pads[a] = raw[i];
		pads[a + r] = raw[i + na];
	}
	for (int i = 0; i < r; i++) {
		d[i] = x->dims[i] + pads[i] + pads[i + r];
		if (d[i] < 0)
			return oq_k_err(k, OQ_EINVAL, "pads make dim %d negative", i);
		if (mode != 0 && x->dims[i] == 0 && d[i] > 0)
			return oq_k_err(k, OQ_EINVAL, "cannot pad an empty dim in mode '%s'", ms);
	}
	if ((rc = oq_k_output(k, 0, x->dtype, r, d, &y)))
		return rc;
	if (y->nelem == 0)
		return OQ_OK;
	/* the constant as one element of the output dtype */
	if ((rc = oq_rt_alloc(&fill, x->dtype, 0, NULL)))
		return oq_k_err(k, rc, "out of memory");
	if (k->opset < 11) {
		oq_rt_set(&fill, 0, oq_k_float(k, "value", 0));
	} else if (oq_k_in(k, 2) && oq_k_in(k, 2)->nelem) {
		oq_rt *c = oq_k_in(k, 2);
		if (c->dtype != x->dtype) {
			oq_rt_release(&fill);
			return oq_k_err(k, OQ_EINVAL, "constant_value is %s, data is %s", oq_dtype_name(c->dtype),
					oq_dtype_name(x->dtype));
		}
		if ((rc = oq_sh_copy(&fill, 0, c, 0, 1))) {
			oq_rt_release(&fill);
			return oq_k_err(k, rc, "out of memory");
		}
	}
	oq_sh_strides(r, x->dims, xs);
	{
		int64_t rows = oq_sh_prod(d, 0, r - 1), inner = r ? d[r - 1] : 1;
		int64_t idx[MAXR] = {0};
		size_t o = 0;
		for (int64_t row = 0; row < rows && !rc; row++) {
			int64_t base = 0;
			int outside = 0;
			for (int i = 0; i < r - 1; i++) {
				int64_t c = pad_src(idx[i], pads[i], x->dims[i], mode);
				if (c < 0)
					outside = 1;
				else
					base += c * xs[i];
			}
			for (int64_t j = 0; j < inner && !rc; j++, o++) {
				int64_t c = pad_src(j, pads[r - 1], x->dims[r - 1], mode);
				if (outside || c < 0) {
					rc = oq_sh_copy(y, o, &fill, 0, 1);
					continue;
				}
				/* copy the contiguous run that maps straight through */
				if (j - pads[r - 1] == c) {
					int64_t run = x->dims[r - 1] - c;
					if (run > inner - j)
						run = inner - j;
					rc = oq_sh_copy(y, o, x, (size_t)(base + c), (size_t)run);
					o += (size_t)run - 1;
					j += run - 1;
					continue;
				}
				rc = oq_sh_copy(y, o, x, (size_t)(base + c), 1);
			}
			for (int i = r - 2; i >= 0; i--) {
				if (++idx[i] < d[i])
					break;
				idx[i] = 0;
			}
		}
	}
	oq_rt_release(&fill);
	return rc ? oq_k_err(k, rc, "out of memory") : OQ_OK;
}

/* ------------------------------------------------------ shape and values */

static int k_shape(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t s = 0, e, n;
	int rc;
	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	e = x->rank;
	if (k->opset >= 15) {
		s = oq_k_int(k, "start", 0);
		e = oq_k_int(k, "end", x->rank);
		if (s < 0)
			s += x->rank;
		if (e < 0)
			e += x->rank;
		s = s < 0 ? 0 : s > x->rank ? x->rank : s;
		e = e < 0 ? 0 : e > x->rank ? x->rank : e;
	}
	n = e > s ? e - s : 0;
	if ((rc = oq_k_output(k, 0, OQ_DT_INT64, 1, &n, &y)))
		return rc;
	memcpy(y->data, x->dims + s, (size_t)n * sizeof(int64_t));
	return OQ_OK;
}

static int k_size(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int rc;
	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	if ((rc = oq_k_output(k, 0, OQ_DT_INT64, 0, NULL, &y)))
		return rc;
	((int64_t *)y->data)[0] = (int64_t)x->nelem;
	return OQ_OK;
}

/* Output 0 := a copy of attribute tensor t. */
static int from_tensor(oq_kctx *k, const oq_tensor *t)
{
	oq_rt v, *y;
	int rc;
	if (t->rank > MAXR)
		return oq_k_err(k, OQ_EUNSUP, "tensor rank %d is above %d", t->rank, MAXR);
	if ((rc = oq_rt_from_tensor(&v, t))) {
		oq_rt_release(&v);
		return oq_k_err(k, rc, "cannot read the tensor attribute");
	}
	rc = oq_k_output_like(k, 0, &v, v.rank, v.dims, &y);
	oq_rt_release(&v);
	return rc;
}

static int k_constant(oq_kctx *k)
{
	const oq_attr *a;
	oq_rt *y;
	int64_t n;
	int rc;

	if ((a = oq_k_attr(k, "value")) && a->type == OQ_ATTR_TENSOR && a->t)
		return from_tensor(k, a->t);
	if (oq_k_attr(k, "sparse_value"))
		return oq_k_err(k, OQ_EUNSUP, "sparse_value is not supported; store the constant dense");
	if ((a = oq_k_attr(k, "value_float")) && a->type == OQ_ATTR_FLOAT) {
		if ((rc = oq_k_output(k, 0, OQ_DT_FLOAT, 0, NULL, &y)))
			return rc;
		((float *)y->data)[0] = a->f;
		return OQ_OK;
	}
	if ((a = oq_k_attr(k, "value_int")) && a->type == OQ_ATTR_INT) {
		if ((rc = oq_k_output(k, 0, OQ_DT_INT64, 0, NULL, &y)))
			return rc;
		((int64_t *)y->data)[0] = a->i;
		return OQ_OK;
	}
	if ((a = oq_k_attr(k, "value_floats")) && a->type == OQ_ATTR_FLOATS) {
		n = (int64_t)a->n;
		if ((rc = oq_k_output(k, 0, OQ_DT_FLOAT, 1, &n, &y)))
			return rc;
		if (n)
			memcpy(y->data, a->floats, a->n * sizeof(float));
		return OQ_OK;
	}
	if ((a = oq_k_attr(k, "value_ints")) && a->type == OQ_ATTR_INTS) {
		n = (int64_t)a->n;
		if ((rc = oq_k_output(k, 0, OQ_DT_INT64, 1, &n, &y)))
			return rc;
		if (n)
			memcpy(y->data, a->ints, a->n * sizeof(int64_t));
		return OQ_OK;
	}
	if ((a = oq_k_attr(k, "value_string")) || (a = oq_k_attr(k, "value_strings"))) {
		int one = a->type == OQ_ATTR_STRING;
		n = one ? 1 : (int64_t)a->n;
		if ((rc = oq_k_output(k, 0, OQ_DT_STRING, one ? 0 : 1, &n, &y)))
			return rc;
		for (int64_t i = 0; i < n; i++) {
			const oq_bytes *s = one ? &a->s : &a->strings[i];
			if (!(y->strs[i].p = malloc(s->len + 1)))
				return oq_k_err(k, OQ_ENOMEM, "out of memory");
			if (s->len)
				memcpy(y->strs[i].p, s->p, s->len);
			y->strs[i].p[s->len] = 0;
			y->strs[i].len = s->len;
		}
		return OQ_OK;
	}
	return oq_k_err(k, OQ_EINVAL, "no value attribute (value, value_float(s), value_int(s), value_string(s))");
}

static int k_constant_of_shape(oq_kctx *k)
{
	oq_rt *y, v;
	int64_t s[MAXR];
	size_t n;
	const oq_attr *a = oq_k_attr(k, "value");
	int rc;

	memset(&v, 0, sizeof v);
	if ((rc = oq_sh_read_ints(k, oq_k_in(k, 0), "input", s, MAXR, &n)))
		return rc;
	if (a && (a->type != OQ_ATTR_TENSOR || !a->t || a->t->nelem != 1))
		return oq_k_err(k, OQ_EINVAL, "attribute 'value' must be a one-element tensor");
	if (a && (rc = oq_rt_from_tensor(&v, a->t))) {
		oq_rt_release(&v);
		return oq_k_err(k, rc, "cannot read attribute 'value'");
	}
	if ((rc = oq_k_output(k, 0, a ? a->t->dtype : OQ_DT_FLOAT, (int)n, s, &y)))
		goto done;
	if (a)
		for (size_t i = 0; i < y->nelem && !rc; i++)
			if ((rc = oq_sh_copy(y, i, &v, 0, 1)))
				rc = oq_k_err(k, rc, "out of memory");
done:
	oq_rt_release(&v);
	return rc;
}

static int k_range(oq_kctx *k)
{
	oq_rt *s = oq_k_in(k, 0), *l = oq_k_in(k, 1), *dl = oq_k_in(k, 2), *y;
	int64_t n;
	int rc;
	if (!s || !l || !dl || s->nelem != 1 || l->nelem != 1 || dl->nelem != 1)
		return oq_k_err(k, OQ_EINVAL, "start, limit and delta must be scalars");
	if (s->dtype != l->dtype || s->dtype != dl->dtype)
		return oq_k_err(k, OQ_EINVAL, "start, limit and delta must have one dtype");
	if (oq_dtype_kind(s->dtype) == 'f') {
		double a = oq_rt_get(s, 0), b = oq_rt_get(l, 0), c = oq_rt_get(dl, 0), cnt;
		if (c == 0)
			return oq_k_err(k, OQ_EINVAL, "delta is 0");
		cnt = ceil((b - a) / c);
		if (!(cnt < 1e12))
			return oq_k_err(k, OQ_EINVAL, "range is too long or not finite");
		n = cnt > 0 ? (int64_t)cnt : 0;
		if ((rc = oq_k_output(k, 0, s->dtype, 1, &n, &y)))
			return rc;
		if (s->dtype == OQ_DT_FLOAT) { /* accumulate in float like the runtimes do */
			float v = (float)a, fd = (float)c;
			for (int64_t i = 0; i < n; i++, v += fd)
				((float *)y->data)[i] = v;
		} else {
			for (int64_t i = 0; i < n; i++)
				oq_rt_set(y, (size_t)i, a + (double)i * c);
		}
		return OQ_OK;
	}
	if (oq_dtype_kind(s->dtype) != 's')
		return oq_k_err(k, OQ_EUNSUP, "dtype %s", oq_dtype_name(s->dtype));
	{
		int64_t a = oq_rt_get_int(s, 0), b = oq_rt_get_int(l, 0), c = oq_rt_get_int(dl, 0);
		uint64_t diff, step, cnt = 0;
		if (c == 0)
			return oq_k_err(k, OQ_EINVAL, "delta is 0");
		/* unsigned arithmetic: exact for any int64 start/limit/delta */
		step = c > 0 ? (uint64_t)c : 0 - (uint64_t)c;
		if (c > 0 ? b > a : a > b) {
			diff = c > 0 ? (uint64_t)b - (uint64_t)a : (uint64_t)a - (uint64_t)b;
			cnt = diff / step + (diff % step != 0);
		}
		if (cnt > ((uint64_t)1 << 40))
			return oq_k_err(k, OQ_EINVAL, "range has %llu elements", (unsigned long long)cnt);
		n = (int64_t)cnt;
		if ((rc = oq_k_output(k, 0, s->dtype, 1, &n, &y)))
			return rc;
		for (int64_t i = 0; i < n; i++) {
			int64_t v = (int64_t)((uint64_t)a + (uint64_t)i * (uint64_t)c);
			if (s->dtype == OQ_DT_INT64)
				((int64_t *)y->data)[i] = v;
			else
				oq_rt_set(y, (size_t)i, (double)v);
		}
	}
	return OQ_OK;
}

static int k_eyelike(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t kk = oq_k_int(k, "k", 0);
	int dt, rc;
	if (!x || x->rank != 2)
		return oq_k_err(k, OQ_EINVAL, "needs a 2-d input");
	dt = (int)oq_k_int(k, "dtype", x->dtype);
	if (!oq_dtype_valid(dt) || dt == OQ_DT_STRING)
		return oq_k_err(k, OQ_EINVAL, "bad dtype %d", dt);
	if ((rc = oq_k_output(k, 0, dt, 2, x->dims, &y)))
		return rc;
	for (int64_t i = 0; i < x->dims[0]; i++) {
		int64_t j = i + kk;
		if (j >= 0 && j < x->dims[1])
			oq_rt_set(y, (size_t)(i * x->dims[1] + j), 1);
	}
	return OQ_OK;
}

static int k_trilu(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int64_t kk = 0, upper = oq_k_int(k, "upper", 1), rows, cols, mats;
	int rc;
	if (!x || x->rank < 2)
		return oq_k_err(k, OQ_EINVAL, "needs an input of rank >= 2");
	if (oq_k_in(k, 1)) {
		if (oq_k_in(k, 1)->nelem != 1)
			return oq_k_err(k, OQ_EINVAL, "k must be a scalar");
		kk = oq_rt_get_int(oq_k_in(k, 1), 0);
	}
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)))
		return rc;
	rows = x->dims[x->rank - 2];
	cols = x->dims[x->rank - 1];
	mats = oq_sh_prod(x->dims, 0, x->rank - 2);
	for (int64_t m = 0; m < mats; m++)
		for (int64_t i = 0; i < rows; i++)
			for (int64_t j = 0; j < cols; j++) {
				int keep = upper ? j - i >= kk : j - i <= kk;
				size_t at = (size_t)((m * rows + i) * cols + j);
				if (keep && (rc = oq_sh_copy(y, at, x, at, 1)))
					return oq_k_err(k, rc, "out of memory");
			}
	return OQ_OK;
}

static int k_reverse_sequence(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *l = oq_k_in(k, 1), *y;
	int64_t ba = oq_k_int(k, "batch_axis", 1), ta = oq_k_int(k, "time_axis", 0), xs[MAXR];
	int rc;
	if (!x || !l || x->rank < 2)
		return oq_k_err(k, OQ_EINVAL, "needs an input of rank >= 2 and sequence_lens");
	if ((ba != 0 && ba != 1) || (ta != 0 && ta != 1) || ba == ta)
		return oq_k_err(k, OQ_EINVAL, "batch_axis and time_axis must be 0 and 1 in some order");
	if ((int64_t)l->nelem != x->dims[ba])
		return oq_k_err(k, OQ_EINVAL, "sequence_lens has %zu entries for batch %lld", l->nelem,
				(long long)x->dims[ba]);
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)))
		return rc;
	oq_sh_strides(x->rank, x->dims, xs);
	{
		int64_t inner = xs[1];
		for (int64_t b = 0; b < x->dims[ba]; b++) {
			int64_t len = oq_rt_get_int(l, (size_t)b);
			if (len < 0 || len > x->dims[ta])
				return oq_k_err(k, OQ_EINVAL, "sequence_lens[%lld] = %lld is out of range",
						(long long)b, (long long)len);
			for (int64_t t = 0; t < x->dims[ta]; t++) {
				int64_t st = t < len ? len - 1 - t : t;
				size_t dst = (size_t)(b * xs[ba] + t * xs[ta]);
				size_t src = (size_t)(b * xs[ba] + st * xs[ta]);
				if ((rc = oq_sh_copy(y, dst, x, src, (size_t)inner)))
					return oq_k_err(k, rc, "out of memory");
			}
		}
	}
	return OQ_OK;
}

const oq_kreg oq_kernels_shape[] = {
	{OQ_OP_Identity, 0, k_identity},
	{OQ_OP_Dropout, 0, k_dropout},
	{OQ_OP_Reshape, 0, k_reshape},
	{OQ_OP_Flatten, 0, k_flatten},
	{OQ_OP_Squeeze, 0, k_squeeze},
	{OQ_OP_Unsqueeze, 0, k_unsqueeze},
	{OQ_OP_Transpose, 0, k_transpose},
	{OQ_OP_Slice, 0, k_slice},
	{OQ_OP_Expand, 0, k_expand},
	{OQ_OP_Tile, 0, k_tile1},
	{OQ_OP_Tile, 6, k_tile},
	{OQ_OP_Concat, 0, k_concat},
	{OQ_OP_Split, 0, k_split},
	{OQ_OP_DepthToSpace, 0, k_depth_to_space},
	{OQ_OP_SpaceToDepth, 0, k_space_to_depth},
	{OQ_OP_Pad, 0, k_pad},
	{OQ_OP_Shape, 0, k_shape},
	{OQ_OP_Size, 0, k_size},
	{OQ_OP_Constant, 0, k_constant},
	{OQ_OP_ConstantOfShape, 0, k_constant_of_shape},
	{OQ_OP_Range, 0, k_range},
	{OQ_OP_EyeLike, 0, k_eyelike},
	{OQ_OP_Trilu, 0, k_trilu},
	{OQ_OP_ReverseSequence, 0, k_reverse_sequence},
	{OQ_OP_Gather, 0, oq_k_gather},
	{OQ_OP_GatherElements, 0, oq_k_gather_elements},
	{OQ_OP_GatherND, 0, oq_k_gather_nd},
	{OQ_OP_ScatterND, 0, oq_k_scatter_nd},
	{OQ_OP_ScatterElements, 0, oq_k_scatter_elements},
	{OQ_OP_Scatter, 0, oq_k_scatter_elements},
	{OQ_OP_NonZero, 0, oq_k_nonzero},
	{OQ_OP_OneHot, 0, oq_k_onehot},
	{OQ_OP_Compress, 0, oq_k_compress},
	{OQ_OP_Unique, 0, oq_k_unique},
	{OQ_OP_Resize, 0, oq_k_resize},
	{OQ_OP_Upsample, 0, oq_k_upsample},
	{OQ_OP_UNKNOWN, 0, NULL},
};
