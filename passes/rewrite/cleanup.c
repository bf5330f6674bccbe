/*
 * cleanup.c - make PyTorch and Paddle exports look alike before the real
 * passes run: no Identity/Dropout, no Constant nodes, no constant-only
 * subgraphs, no dead code.
 *
 *   y = Identity(x); z = F(y)            ==>  z = F(x)
 *   y = Dropout(x) (inference, mask unused)     (same)
 *   y = Identity(x), y a graph output, x = P(..) ==> y = P(..)  (P renamed to write y)
 *   y = Constant(value=t)                ==>  initializer y = t
 *   y = Op(c1, ..., ck), every ci an initializer, Op in {Cast, Reshape,
 *       Transpose, Unsqueeze, Squeeze, Flatten, Concat, Slice}  ==>  initializer y
 *   y = Shape(x), x with a fully static declared shape  ==>  initializer y
 *   node whose outputs nobody reads      ==>  removed (until stable)
 *   initializer nobody reads             ==>  removed
 *
 * The folded ops only move data (Cast converts element by element: floats
 * to integers truncate toward zero as ONNX Runtime does), so they are
 * implemented here directly; the tests check them against the executor.
 * A folded result over 64 MiB is left alone: the file would grow.
 *
 * If/Loop/Scan bodies (at any depth, after the graph that holds them) get
 * the Constant, folding and dead-code rules too, so a recurrent op's
 * weights that a torch.jit.script export slices and concatenates inside a
 * Loop body become body initializers the quantizer can read:
 *
 *   body: y = Concat(Slice(W, ...), ...), W an initializer of an enclosing
 *         graph (captured)           ==>  body initializer y
 *
 * A captured initializer counts as a constant of the body (the enclosing
 * graph does not change it between runs). A capture nothing in its body
 * reads any more is dropped, so the enclosing graph's dead-code step
 * removes an initializer only when no other node or body reads it.
 * Identity/Dropout are removed in the main graph only.
 *
 * A value a subgraph captures is never removed or renamed, graph inputs
 * and outputs keep their names.
 * An initializer that is also a graph input (IR >= 4) can be overridden
 * by the caller, so it is not a constant here.
 */
#include "passes/pass.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Largest folded result, in bytes. */
#define FOLD_LIMIT ((size_t)64 << 20)

/* Rounds of constant/identity rewrites before dead-code removal. */
#define MAX_ROUNDS 32

/* Makes v an initializer holding t (v keeps its name). Takes t. */
static int make_init(oq_graph *g, oq_value *v, oq_tensor *t)
{
	oq_value **ni = realloc(g->inits, (g->n_inits + 1) * sizeof *ni);
	char *nm = oq_strdup(v->name);
	if (!ni || !nm) {
		free(nm);
		if (ni)
			g->inits = ni;
		oq_tensor_free(t);
		return OQ_ENOMEM;
	}
	g->inits = ni;
	g->inits[g->n_inits++] = v;
	free(t->name);
	t->name = nm;
	v->init = t;
	if (v->type.kind == OQ_TYPE_NONE) {
		v->type.kind = OQ_TYPE_TENSOR;
		v->type.dtype = t->dtype;
		v->type.rank = -1;
	}
	return OQ_OK;
}

/* ------------------------------------------------------------ Constant */

static oq_tensor *scalar_or_list(int dtype, int list, size_t n)
{
	int64_t dim = (int64_t)n;
	return oq_tensor_new(dtype, list ? 1 : 0, &dim);
}

/* The tensor a Constant node defines, NULL (and *rc = OQ_OK) when it is not foldable. */
static oq_tensor *constant_value(oq_node *n, int *rc)
{
	*rc = OQ_OK;
	for (size_t i = 0; i < n->n_attrs; i++) {
		oq_attr *a = &n->attrs[i];
		oq_tensor *t = NULL;
		if (strcmp(a->name, "value") == 0 && a->type == OQ_ATTR_TENSOR && a->t) {
			t = a->t;
			a->t = NULL; /* stolen: the node dies */
			a->type = OQ_ATTR_UNDEFINED;
			return t;
		}
		if (strcmp(a->name, "value_float") == 0 && a->type == OQ_ATTR_FLOAT) {
			if ((t = scalar_or_list(OQ_DT_FLOAT, 0, 1)))
				memcpy((void *)t->data, &a->f, sizeof a->f);
		} else if (strcmp(a->name, "value_floats") == 0 && a->type == OQ_ATTR_FLOATS) {
			if ((t = scalar_or_list(OQ_DT_FLOAT, 1, a->n)) && a->n)
				memcpy((void *)t->data, a->floats, a->n * sizeof *a->floats);
		} else if (strcmp(a->name, "value_int") == 0 && a->type == OQ_ATTR_INT) {
			if ((t = scalar_or_list(OQ_DT_INT64, 0, 1)))
				memcpy((void *)t->data, &a->i, sizeof a->i);
		} else if (strcmp(a->name, "value_ints") == 0 && a->type == OQ_ATTR_INTS) {
			if ((t = scalar_or_list(OQ_DT_INT64, 1, a->n)) && a->n)
				memcpy((void *)t->data, a->ints, a->n * sizeof *a->ints);
		} else {
			continue; /* sparse_value, value_string(s): stay a node */
		}
		if (!t)
			*rc = OQ_ENOMEM;
		return t;
	}
	return NULL;
}

/* ------------------------------------------------------------ folding helpers */

/*
 * The constant v holds as g's nodes see it: an initializer of g, or for a
 * value g captures, an initializer of the enclosing graph defining it.
 * NULL when v is not a constant (oq_value_const's rules).
 */
static const oq_tensor *cst(const oq_graph *g, oq_value *v)
{
	oq_value *o;
	if (!v || !(v->flags & OQ_V_OUTER))
		return oq_value_const(g, v);
	o = oq_value_resolve(v);
	return o && o != v ? oq_value_const(o->graph, o) : NULL;
}

/* Stores v (already converted by the caller) as element i of t; 0 when the dtype is not handled. */
static int put(oq_tensor *t, size_t i, double v, int64_t iv, int use_int)
{
	unsigned char *p = (unsigned char *)t->data;
	switch (t->dtype) {
	case OQ_DT_FLOAT: {
		float f = use_int ? (float)iv : (float)v;
		memcpy(p + 4 * i, &f, 4);
		return 1;
	}
	case OQ_DT_DOUBLE: {
		double f = use_int ? (double)iv : v;
		memcpy(p + 8 * i, &f, 8);
		return 1;
	}
	case OQ_DT_FLOAT16: {
		uint16_t h = oq_f32_to_f16(use_int ? (float)iv : (float)v);
		memcpy(p + 2 * i, &h, 2);
		return 1;
	}
	case OQ_DT_BOOL:
		p[i] = use_int ? iv != 0 : v != 0;
		return 1;
	default:
		break;
	}
	if (!use_int) {
		/* float -> integer: truncate; out of range is undefined in ONNX, saturate here */
		double tv = trunc(v);
		if (isnan(tv))
			tv = 0;
		if (tv >= 9.2233720368547758e18)
			iv = INT64_MAX;
		else if (tv <= -9.2233720368547758e18)
			iv = INT64_MIN;
		else
			iv = (int64_t)tv;
	}
	switch (t->dtype) {
	case OQ_DT_INT8: { int8_t x = (int8_t)iv; memcpy(p + i, &x, 1); return 1; }
	case OQ_DT_UINT8: { uint8_t x = (uint8_t)iv; memcpy(p + i, &x, 1); return 1; }
	case OQ_DT_INT16: { int16_t x = (int16_t)iv; memcpy(p + 2 * i, &x, 2); return 1; }
	case OQ_DT_UINT16: { uint16_t x = (uint16_t)iv; memcpy(p + 2 * i, &x, 2); return 1; }
	case OQ_DT_INT32: { int32_t x = (int32_t)iv; memcpy(p + 4 * i, &x, 4); return 1; }
	case OQ_DT_UINT32: { uint32_t x = (uint32_t)iv; memcpy(p + 4 * i, &x, 4); return 1; }
	case OQ_DT_INT64: memcpy(p + 8 * i, &iv, 8); return 1;
	case OQ_DT_UINT64: { uint64_t x = (uint64_t)iv; memcpy(p + 8 * i, &x, 8); return 1; }
	default: return 0;
	}
}

/* dtypes `put` writes and oq_tensor_get reads exactly. */
static int plain_dtype(int dt)
{
	switch (dt) {
	case OQ_DT_FLOAT: case OQ_DT_DOUBLE: case OQ_DT_FLOAT16: case OQ_DT_BOOL:
	case OQ_DT_INT8: case OQ_DT_UINT8: case OQ_DT_INT16: case OQ_DT_UINT16:
	case OQ_DT_INT32: case OQ_DT_UINT32: case OQ_DT_INT64: case OQ_DT_UINT64:
		return 1;
	default:
		return 0;
	}
}

/* Byte-addressable element size, 0 for strings and sub-byte types. */
static size_t elem_size(int dt)
{
	int bits = oq_dtype_bits(dt);
	return (bits >= 8 && bits % 8 == 0 && dt != OQ_DT_STRING) ? (size_t)bits / 8 : 0;
}

/* A new tensor of dtype/dims, NULL with *rc set when too big or out of memory. */
static oq_tensor *new_result(int dtype, int rank, const int64_t *dims, int *rc)
{
	size_t ne, nb;
	oq_tensor *t;
	if (rank < 0 || rank > OQ_MAX_RANK || oq_shape_size(dtype, rank, dims, &ne, &nb) ||
	    nb > FOLD_LIMIT) {
		*rc = OQ_OK; /* not folded */
		return NULL;
	}
	if (!(t = oq_tensor_new(dtype, rank, dims)))
		*rc = OQ_ENOMEM;
	return t;
}

/* Copies t's payload into a tensor of the same dtype with new dims. */
static oq_tensor *with_dims(const oq_tensor *t, int rank, const int64_t *dims, int *rc)
{
	oq_tensor *r = new_result(t->dtype, rank, dims, rc);
	if (r && r->nbytes != t->nbytes) {
		oq_tensor_free(r);
		*rc = OQ_OK;
		return NULL;
	}
	if (r && r->nbytes)
		memcpy((void *)r->data, t->data, r->nbytes);
	return r;
}

/* Integer list from a constant 1-D (or scalar) integer tensor; count in *n. */
static int64_t *int_list(const oq_tensor *t, size_t *n)
{
	int64_t *v;
	if (!t || (t->dtype != OQ_DT_INT64 && t->dtype != OQ_DT_INT32) || t->rank > 1 ||
	    t->nelem > OQ_MAX_RANK)
		return NULL;
	if (!(v = oq_calloc(t->nelem ? t->nelem : 1, sizeof *v)))
		return NULL;
	for (size_t i = 0; i < t->nelem; i++)
		v[i] = oq_tensor_get_int(t, i);
	*n = t->nelem;
	return v;
}

/* Axes from the attribute (older opsets) or the second input; *has = 0 when neither. */
static int64_t *axes_of(const oq_graph *g, const oq_node *n, size_t *cnt, int *has)
{
	const oq_attr *a = oq_node_attr(n, "axes");
	*has = 0;
	*cnt = 0;
	if (a && a->type == OQ_ATTR_INTS) {
		int64_t *v = oq_calloc(a->n ? a->n : 1, sizeof *v);
		if (v && a->n)
			memcpy(v, a->ints, a->n * sizeof *v);
		*has = 1;
		*cnt = a->n;
		return v;
	}
	if (n->n_inputs >= 2 && n->inputs[1]) {
		*has = 1;
		return int_list(cst(g, n->inputs[1]), cnt);
	}
	return NULL;
}

/* ------------------------------------------------------------ folded ops */

static oq_tensor *fold_cast(const oq_node *n, const oq_tensor *x, int *rc)
{
	int to = (int)oq_node_attr_int(n, "to", 0);
	int xi = oq_dtype_kind(x->dtype) != 'f';
	oq_tensor *y;
	if (!plain_dtype(to) || !plain_dtype(x->dtype))
		return NULL;
	if (!(y = new_result(to, x->rank, x->dims, rc)))
		return NULL;
	for (size_t i = 0; i < x->nelem; i++) {
		if (to == OQ_DT_BOOL && !xi)
			((unsigned char *)y->data)[i] = oq_tensor_get(x, i) != 0;
		else
			put(y, i, xi ? 0 : oq_tensor_get(x, i), xi ? oq_tensor_get_int(x, i) : 0, xi);
	}
	return y;
}

static oq_tensor *fold_reshape(const oq_node *n, const oq_tensor *x, const oq_tensor *s, int *rc)
{
	size_t r = 0;
	int64_t *sh = int_list(s, &r);
	int allowzero = (int)oq_node_attr_int(n, "allowzero", 0);
	int infer = -1;
	size_t known = 1;
	oq_tensor *y = NULL;

	if (!sh)
		return NULL;
	if (!s || s->rank != 1)
		goto out;
	for (size_t i = 0; i < r; i++) {
		if (sh[i] == 0 && !allowzero) {
			if ((int)i >= x->rank)
				goto out;
			sh[i] = x->dims[i];
		}
		if (sh[i] == -1) {
			if (infer >= 0)
				goto out;
			infer = (int)i;
			continue;
		}
		if (sh[i] < 0 || !oq_mul_size(known, (size_t)sh[i], &known))
			goto out;
	}
	if (infer >= 0) {
		if (known == 0 || x->nelem % known)
			goto out;
		sh[infer] = (int64_t)(x->nelem / known);
	} else if (known != x->nelem) {
		goto out;
	}
	y = with_dims(x, (int)r, sh, rc);
out:
	free(sh);
	return y;
}

static oq_tensor *fold_transpose(const oq_node *n, const oq_tensor *x, int *rc)
{
	const oq_attr *pa = oq_node_attr(n, "perm");
	int r = x->rank;
	int64_t perm[OQ_MAX_RANK], od[OQ_MAX_RANK], istr[OQ_MAX_RANK], idx[OQ_MAX_RANK];
	size_t es = elem_size(x->dtype);
	oq_tensor *y;

	if (!es || r > OQ_MAX_RANK)
		return NULL;
	if (pa && (pa->type != OQ_ATTR_INTS || pa->n != (size_t)r))
		return NULL;
	for (int i = 0; i < r; i++) {
		perm[i] = pa ? pa->ints[i] : r - 1 - i;
		if (perm[i] < 0)
			perm[i] += r;
		if (perm[i] < 0 || perm[i] >= r)
			return NULL;
		for (int k = 0; k < i; k++)
			if (perm[k] == perm[i])
				return NULL;
	}
	for (int64_t i = r - 1, s = 1; i >= 0; i--) {
		istr[i] = s;
		s *= x->dims[i];
	}
	for (int i = 0; i < r; i++)
		od[i] = x->dims[perm[i]];
	if (!(y = new_result(x->dtype, r, od, rc)))
		return NULL;
	memset(idx, 0, sizeof idx);
	for (size_t o = 0; o < y->nelem; o++) {
		int64_t src = 0;
		for (int i = 0; i < r; i++)
			src += idx[i] * istr[perm[i]];
		memcpy((char *)y->data + o * es, (const char *)x->data + (size_t)src * es, es);
		for (int i = r - 1; i >= 0; i--) {
			if (++idx[i] < od[i])
				break;
			idx[i] = 0;
		}
	}
	return y;
}

/* Unsqueeze / Squeeze / Flatten: payload unchanged, new dims. */
static oq_tensor *fold_dims(const oq_graph *g, const oq_node *n, const oq_tensor *x, int *rc)
{
	int64_t d[OQ_MAX_RANK];
	int r = 0;
	oq_tensor *y = NULL;

	if (oq_node_is(n, OQ_OP_Flatten)) {
		int64_t ax = oq_node_attr_int(n, "axis", 1), a = 1, b = 1;
		if (ax < 0)
			ax += x->rank;
		if (ax < 0 || ax > x->rank)
			return NULL;
		for (int i = 0; i < x->rank; i++)
			*(i < ax ? &a : &b) *= x->dims[i];
		d[0] = a;
		d[1] = b;
		return with_dims(x, 2, d, rc);
	}
	size_t na = 0;
	int has;
	int64_t *axes = axes_of(g, n, &na, &has);
	if (has && !axes)
		return NULL; /* axes not constant (or out of memory: then simply not folded) */
	if (oq_node_is(n, OQ_OP_Unsqueeze)) {
		unsigned char ins[OQ_MAX_RANK] = {0};
		int orank = x->rank + (int)na;
		if (!has || orank > OQ_MAX_RANK)
			goto out;
		for (size_t i = 0; i < na; i++) {
			int64_t a = axes[i] < 0 ? axes[i] + orank : axes[i];
			if (a < 0 || a >= orank || ins[a])
				goto out;
			ins[a] = 1;
		}
		for (int i = 0, k = 0; i < orank; i++)
			d[r++] = ins[i] ? 1 : x->dims[k++];
	} else {
		unsigned char drop[OQ_MAX_RANK] = {0};
		for (size_t i = 0; i < na; i++) {
			int64_t a = axes[i] < 0 ? axes[i] + x->rank : axes[i];
			if (a < 0 || a >= x->rank || x->dims[a] != 1)
				goto out;
			drop[a] = 1;
		}
		for (int i = 0; i < x->rank; i++)
			if (!(has && na ? drop[i] : x->dims[i] == 1))
				d[r++] = x->dims[i];
	}
	y = with_dims(x, r, d, rc);
out:
	free(axes);
	return y;
}

static oq_tensor *fold_concat(const oq_graph *g, const oq_node *n, int *rc)
{
	const oq_tensor *x0 = n->n_inputs ? cst(g, n->inputs[0]) : NULL;
	int64_t ax = oq_node_attr_int(n, "axis", 0), d[OQ_MAX_RANK];
	size_t es = x0 ? elem_size(x0->dtype) : 0, outer = 1, off = 0;
	oq_tensor *y;

	if (!es || x0->rank < 1)
		return NULL;
	if (ax < 0)
		ax += x0->rank;
	if (ax < 0 || ax >= x0->rank)
		return NULL;
	memcpy(d, x0->dims, (size_t)x0->rank * sizeof *d);
	d[ax] = 0;
	for (size_t i = 0; i < n->n_inputs; i++) {
		const oq_tensor *x = cst(g, n->inputs[i]);
		if (!x || x->dtype != x0->dtype || x->rank != x0->rank)
			return NULL;
		for (int k = 0; k < x->rank; k++)
			if (k != ax && x->dims[k] != x0->dims[k])
				return NULL;
		d[ax] += x->dims[ax];
	}
	if (!(y = new_result(x0->dtype, x0->rank, d, rc)))
		return NULL;
	for (int k = 0; k < ax; k++)
		outer *= (size_t)d[k];
	/* per outer index: each input contributes a contiguous block */
	for (size_t o = 0; o < outer; o++)
		for (size_t i = 0; i < n->n_inputs; i++) {
			const oq_tensor *x = cst(g, n->inputs[i]);
			size_t blk = outer ? x->nbytes / outer : 0;
			if (blk)
				memcpy((char *)y->data + off, (const char *)x->data + o * blk, blk);
			off += blk;
		}
	return y;
}

/*
 * Slice (starts/ends/axes attributes up to opset 9, inputs with steps from
 * opset 10): each sliced axis starts at start and takes every step-th
 * element before end, both clamped as the ONNX spec says; a step of 0, a
 * repeated axis or lists of different lengths are not folded.
 */
static oq_tensor *fold_slice(const oq_graph *g, const oq_node *n, const oq_tensor *x, int *rc)
{
	static const char *const names[4] = {"starts", "ends", "axes", "steps"};
	int64_t st[OQ_MAX_RANK], sp[OQ_MAX_RANK], od[OQ_MAX_RANK]; /* start, step, length */
	int64_t istr[OQ_MAX_RANK], idx[OQ_MAX_RANK];
	int64_t *l[4] = {NULL, NULL, NULL, NULL};
	size_t cnt[4] = {0, 0, 0, 0}, es = elem_size(x->dtype);
	unsigned char seen[OQ_MAX_RANK] = {0};
	int r = x->rank;
	oq_tensor *y = NULL;

	if (!es || r < 1)
		return NULL;
	for (size_t k = 0; k < 4; k++) {
		const oq_attr *a = oq_node_attr(n, names[k]);
		if (a && a->type == OQ_ATTR_INTS) {
			if (!(l[k] = oq_calloc(a->n ? a->n : 1, sizeof *l[k])))
				goto out; /* out of memory: simply not folded */
			if (a->n)
				memcpy(l[k], a->ints, a->n * sizeof *l[k]);
			cnt[k] = a->n;
		} else if (k + 1 < n->n_inputs && n->inputs[k + 1]) {
			if (!(l[k] = int_list(cst(g, n->inputs[k + 1]), &cnt[k])))
				goto out;
		} else if (k < 2) {
			goto out;
		}
	}
	if (cnt[1] != cnt[0] || cnt[0] > (size_t)r || (l[2] && cnt[2] != cnt[0]) ||
	    (l[3] && cnt[3] != cnt[0]))
		goto out;
	for (int i = 0; i < r; i++) {
		st[i] = 0;
		sp[i] = 1;
		od[i] = x->dims[i];
	}
	for (size_t k = 0; k < cnt[0]; k++) {
		int64_t ax = l[2] ? l[2][k] : (int64_t)k, step = l[3] ? l[3][k] : 1;
		int64_t dim, s = l[0][k], e = l[1][k];
		if (ax < 0)
			ax += r;
		if (ax < 0 || ax >= r || seen[ax] || step == 0)
			goto out;
		seen[ax] = 1;
		dim = x->dims[ax];
		if (s < 0)
			s += dim;
		if (e < 0)
			e += dim;
		if (step == INT64_MIN) /* one element, as with -INT64_MAX, which can be negated */
			step = -INT64_MAX;
		if (step > 0) {
			s = s < 0 ? 0 : s > dim ? dim : s;
			e = e < 0 ? 0 : e > dim ? dim : e;
			od[ax] = e > s ? 1 + (e - s - 1) / step : 0;
		} else {
			s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
			e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
			od[ax] = s > e ? 1 + (s - e - 1) / -step : 0;
		}
		st[ax] = s;
		sp[ax] = step;
	}
	if (!(y = new_result(x->dtype, r, od, rc)))
		goto out;
	for (int64_t i = r - 1, s = 1; i >= 0; i--) {
		istr[i] = s;
		s *= x->dims[i];
	}
	memset(idx, 0, sizeof idx);
	for (size_t o = 0; o < y->nelem; o++) {
		int64_t src = 0;
		for (int i = 0; i < r; i++)
			src += (st[i] + idx[i] * sp[i]) * istr[i];
		memcpy((char *)y->data + o * es, (const char *)x->data + (size_t)src * es, es);
		for (int i = r - 1; i >= 0; i--) {
			if (++idx[i] < od[i])
				break;
			idx[i] = 0;
		}
	}
out:
	for (size_t k = 0; k < 4; k++)
		free(l[k]);
	return y;
}

static oq_tensor *fold_shape(const oq_graph *g, const oq_node *n, oq_value *in, int *rc)
{
	int64_t d[OQ_MAX_RANK], r, st, en, len;
	const oq_tensor *c = cst(g, in);
	const oq_value *x = oq_value_resolve(in); /* a capture's type: its definition's */
	oq_tensor *y;

	if (c) {
		r = c->rank;
		memcpy(d, c->dims, (size_t)r * sizeof *d);
	} else {
		/* a body's declared shapes may describe one iteration (a carried value can
		 * grow): only the main graph's are taken as fixed */
		if (x->graph->parent || x->type.kind != OQ_TYPE_TENSOR || x->type.rank < 0 ||
		    x->type.rank > OQ_MAX_RANK)
			return NULL;
		r = x->type.rank;
		for (int i = 0; i < r; i++)
			if ((d[i] = x->type.dims[i].value) < 0)
				return NULL;
	}
	st = oq_node_attr_int(n, "start", 0);
	en = oq_node_attr_int(n, "end", r);
	if (st < 0)
		st += r;
	if (en < 0)
		en += r;
	st = st < 0 ? 0 : st > r ? r : st;
	en = en < 0 ? 0 : en > r ? r : en;
	len = en > st ? en - st : 0;
	if (!(y = new_result(OQ_DT_INT64, 1, &len, rc)))
		return NULL;
	if (len)
		memcpy((void *)y->data, d + st, (size_t)len * sizeof *d);
	return y;
}

/* The folded result of n, NULL when n is not foldable (*rc tells errors apart). */
static oq_tensor *fold_node(const oq_graph *g, const oq_node *n, int *rc)
{
	const oq_tensor *x;
	*rc = OQ_OK;
	if (oq_domain_of(n->domain) != OQ_DOM_ONNX || n->n_outputs != 1 || !n->outputs[0] ||
	    n->n_inputs < 1 || !n->inputs[0])
		return NULL;
	if (n->op == OQ_OP_Shape)
		return fold_shape(g, n, n->inputs[0], rc);
	if (n->op == OQ_OP_Concat)
		return fold_concat(g, n, rc);
	if (!(x = cst(g, n->inputs[0])))
		return NULL;
	switch (n->op) {
	case OQ_OP_Cast:
		return fold_cast(n, x, rc);
	case OQ_OP_Reshape:
		return n->n_inputs >= 2 ? fold_reshape(n, x, cst(g, n->inputs[1]), rc) : NULL;
	case OQ_OP_Slice:
		return fold_slice(g, n, x, rc);
	case OQ_OP_Transpose:
		return fold_transpose(n, x, rc);
	case OQ_OP_Unsqueeze:
	case OQ_OP_Squeeze:
	case OQ_OP_Flatten:
		return fold_dims(g, n, x, rc);
	default:
		return NULL;
	}
}

/* ------------------------------------------------------------ Identity / Dropout */

/* Identity, or Dropout that computes the identity (inference) with its mask unused. */
static int is_passthrough(const oq_graph *g, const oq_node *n)
{
	if (oq_domain_of(n->domain) != OQ_DOM_ONNX || n->n_inputs < 1 || !n->inputs[0] ||
	    n->n_outputs < 1 || !n->outputs[0])
		return 0;
	if (n->op == OQ_OP_Identity)
		return n->n_inputs == 1 && n->n_outputs == 1 && n->inputs[0]->type.kind != OQ_TYPE_SEQUENCE &&
		       n->inputs[0]->type.kind != OQ_TYPE_OPTIONAL;
	if (n->op != OQ_OP_Dropout)
		return 0;
	if (n->opset && n->opset < 7 && oq_node_attr_int(n, "is_test", 0) == 0)
		return 0; /* Dropout-1/6 trains unless is_test */
	if (n->n_inputs >= 3 && n->inputs[2]) {
		const oq_tensor *t = oq_value_const(g, n->inputs[2]);
		if (!t || t->nelem != 1 || oq_tensor_get(t, 0) != 0)
			return 0;
	}
	for (size_t k = 1; k < n->n_outputs; k++) {
		const oq_value *m = n->outputs[k];
		if (m && (m->n_uses || !oq_value_is_private(m)))
			return 0;
	}
	return 1;
}

/* Removes one passthrough node; *done = 0 when it has to stay. */
static int drop_passthrough(oq_graph *g, oq_node *n, int *done)
{
	oq_value *x = n->inputs[0], *y = n->outputs[0];
	int rc;

	*done = 0;
	if (oq_value_n_captures(y))
		return OQ_OK;
	if (!(y->flags & OQ_V_OUTPUT)) {
		if ((rc = oq_value_replace_uses(g, y, x)))
			return rc;
		n->dead = 1;
		*done = 1;
		return OQ_OK;
	}
	/* y is a graph output: let x's producer write y instead */
	oq_node *p = x->producer;
	if (!p || p->dead || x->graph != g || !oq_value_is_private(x) || x->init)
		return OQ_OK;
	p->outputs[x->producer_index] = y;
	if ((rc = oq_value_replace_uses(g, x, y)) || (rc = oq_graph_rebuild_uses(g)))
		return rc; /* producers changed: x has none now, y is p's */
	n->dead = 1;
	*done = 1;
	return OQ_OK;
}

/* ------------------------------------------------------------ dead code */

static int drop_dead(oq_graph *g, int *changed)
{
	int rc, again = 1;
	while (again) {
		again = 0;
		if ((rc = oq_graph_sweep(g)))
			return rc;
		size_t *uses = oq_calloc(g->n_values, sizeof *uses);
		if (!uses)
			return OQ_ENOMEM;
		for (size_t i = 0; i < g->n_values; i++)
			uses[i] = g->values[i]->n_uses;
		for (size_t i = g->n_nodes; i-- > 0;) {
			oq_node *n = g->nodes[i];
			int used = n->n_outputs == 0;
			for (size_t k = 0; k < n->n_outputs && !used; k++) {
				oq_value *v = n->outputs[k];
				if (v && (uses[v->index] || !oq_value_is_private(v)))
					used = 1;
			}
			if (used)
				continue;
			n->dead = 1;
			again = 1;
			*changed = 1;
			for (size_t k = 0; k < n->n_inputs; k++)
				if (n->inputs[k] && n->inputs[k]->graph == g && uses[n->inputs[k]->index])
					uses[n->inputs[k]->index]--;
		}
		free(uses);
	}
	/* captures nothing reads any more: the enclosing graph may drop what only they kept */
	for (size_t i = 0; g->parent && i < g->n_values; i++) {
		oq_value *v = g->values[i];
		if (!(v->flags & OQ_V_OUTER) || v->n_uses || (v->flags & OQ_V_OUTPUT) ||
		    oq_value_n_captures(v))
			continue;
		v->flags &= ~(unsigned)OQ_V_OUTER;
		v->outer = NULL;
		*changed = 1;
	}
	/* initializers nobody reads */
	for (size_t i = g->n_inits; i-- > 0;) {
		oq_value *v = g->inits[i];
		int input_ok = !(v->flags & OQ_V_INPUT) || (g->model && g->model->ir_version < 4);
		if (v->n_uses || (v->flags & OQ_V_OUTPUT) || !input_ok || oq_value_n_captures(v))
			continue;
		oq_graph_remove_init(g, v);
		*changed = 1;
	}
	/* value_info of values that no longer exist */
	for (size_t i = g->n_vinfos; i-- > 0;) {
		oq_value *v = g->vinfos[i];
		if (v->producer || v->init || (v->flags & (OQ_V_INPUT | OQ_V_OUTER)))
			continue;
		oq_graph_remove_vinfo(g, v);
		*changed = 1;
	}
	return OQ_OK;
}

/* ------------------------------------------------------------ the pass */

/* What one run of the pass did, over the main graph and the bodies. */
typedef struct counts {
	size_t n_const;      /* Constant nodes made initializers */
	size_t n_pass;       /* Identity/Dropout nodes removed */
	size_t n_fold;       /* nodes folded into initializers */
	size_t n_body;       /* of n_const + n_fold, how many inside bodies */
	int changed;         /* some graph changed */
} counts;

/* Constant/identity/fold rounds over g's own nodes until none applies. */
static int rewrite_rounds(oq_graph *g, counts *c)
{
	int rc;
	for (int round = 0; round < MAX_ROUNDS; round++) {
		int any = 0;
		if ((rc = oq_graph_sweep(g)))
			return rc;
		for (size_t i = 0; i < g->n_nodes; i++) {
			oq_node *n = g->nodes[i];
			oq_tensor *t = NULL;
			if (n->dead)
				continue;
			if (oq_node_is(n, OQ_OP_Constant) && n->n_outputs == 1 && n->outputs[0] &&
			    !(n->outputs[0]->flags & OQ_V_OUTPUT) && !n->outputs[0]->init) {
				if (!(t = constant_value(n, &rc))) {
					if (rc)
						return rc;
					continue;
				}
				if ((rc = make_init(g, n->outputs[0], t)))
					return rc;
				n->dead = 1;
				c->n_const++;
				c->n_body += g->parent != NULL;
				any = 1;
				continue;
			}
			if (!g->parent && is_passthrough(g, n)) {
				int done;
				if ((rc = drop_passthrough(g, n, &done)))
					return rc;
				c->n_pass += (size_t)done;
				any |= done;
				continue;
			}
			if (n->n_outputs == 1 && n->outputs[0] && !(n->outputs[0]->flags & OQ_V_OUTPUT) &&
			    !n->outputs[0]->init) {
				if (!(t = fold_node(g, n, &rc))) {
					if (rc)
						return rc;
					continue;
				}
				if ((rc = make_init(g, n->outputs[0], t)))
					return rc;
				n->dead = 1;
				c->n_fold++;
				c->n_body += g->parent != NULL;
				any = 1;
			}
		}
		if (!any)
			break;
		c->changed = 1;
	}
	return OQ_OK;
}

static int clean_graph(oq_graph *g, counts *c);

static int clean_sub(oq_graph *sub, oq_node *owner, void *ctx)
{
	(void)owner;
	return clean_graph(sub, ctx);
}

/* g's rounds, then its bodies' (they may read g's new initializers), then g's dead code (what
 * only a body read may have gone). */
static int clean_graph(oq_graph *g, counts *c)
{
	int rc;
	if ((rc = rewrite_rounds(g, c)) || (rc = oq_graph_each_subgraph(g, clean_sub, c)))
		return rc;
	return drop_dead(g, &c->changed);
}

int oq_pass_cleanup(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed)
{
	counts c = {0, 0, 0, 0, 0};
	int rc;

	*changed = 0;
	if ((rc = clean_graph(g, &c)))
		return oq_err(d, rc, "cleanup: out of memory");
	*changed = c.changed;
	if (o && o->log && *changed) {
		fprintf(o->log,
		        "cleanup: %zu Constant -> initializer, %zu Identity/Dropout removed, "
		        "%zu folded",
		        c.n_const, c.n_pass, c.n_fold);
		if (c.n_body)
			fprintf(o->log, " (%zu Constant/folded inside If/Loop/Scan bodies)",
			        c.n_body);
		fputc('\n', o->log);
	}
	return OQ_OK;
}
