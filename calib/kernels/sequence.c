/*
 * sequence.c - kernel family 'seq': sequence and optional values.
 * Specs: https://onnx.ai/onnx/operators/ (SequenceConstruct 11, ...,
 * SequenceMap 17, Optional* 15/18).
 *
 * Representation (exec.h): a sequence is an oq_rt of kind OQ_RT_SEQ whose
 * items are owned tensors and whose dtype is the element type; an optional
 * with a value is the value itself, an empty optional is kind OQ_RT_NONE.
 * Sequences are immutable values: every op that "changes" one builds a new
 * sequence of copies, so no two values share storage and the executor's
 * release-after-last-use stays simple.
 *
 * SequenceMap runs its body once per position i with item i of each
 * sequence input and every tensor input unchanged (spec: all sequence
 * inputs have the same length); body output j, item i, becomes item i of
 * output sequence j.
 */
#include "calib/kernels/kernel.h"

#include <stdlib.h>
#include <string.h>

int oq_k_takes_values(oq_op op)
{
	switch (op) {
	case OQ_OP_Identity:
	case OQ_OP_If:
	case OQ_OP_Loop:
	case OQ_OP_SequenceAt:
	case OQ_OP_SequenceConstruct:
	case OQ_OP_SequenceEmpty:
	case OQ_OP_SequenceErase:
	case OQ_OP_SequenceInsert:
	case OQ_OP_SequenceLength:
	case OQ_OP_SequenceMap:
	case OQ_OP_ConcatFromSequence:
	case OQ_OP_Optional:
	case OQ_OP_OptionalHasElement:
	case OQ_OP_OptionalGetElement:
		return 1;
	default:
		return 0;
	}
}

/* Input i as a sequence, or an error naming it. */
static int seq_in(oq_kctx *k, size_t i, oq_rt **s)
{
	*s = oq_k_in(k, i);
	if (!*s || (*s)->kind != OQ_RT_SEQ)
		return oq_k_err(k, OQ_EINVAL, "input %zu must be a sequence", i);
	return OQ_OK;
}

static int tensor_in(oq_kctx *k, size_t i, oq_rt **t)
{
	*t = oq_k_in(k, i);
	if (!*t || (*t)->kind != OQ_RT_TENSOR)
		return oq_k_err(k, OQ_EINVAL, "input %zu must be a tensor", i);
	return OQ_OK;
}

/* A new sequence as output i with n zeroed items. */
static int seq_out(oq_kctx *k, size_t i, int dtype, size_t n, oq_rt **t)
{
	oq_rt tmp;
	int rc;
	memset(&tmp, 0, sizeof tmp);
	tmp.kind = OQ_RT_SEQ;
	tmp.dtype = dtype;
	/* an empty sequence copied in, then sized: keeps ownership in one place (oq_k_output_value, kernel_api.c) */
	if ((rc = oq_k_output_value(k, i, &tmp, t)))
		return rc;
	free((*t)->items);
	(*t)->items = oq_calloc(n ? n : 1, sizeof *(*t)->items);
	(*t)->n_items = (*t)->items ? n : 0;
	return (*t)->items ? OQ_OK : oq_k_err(k, OQ_ENOMEM, "out of memory");
}

/* Position input i (int32/int64 scalar) normalised against [0, n] (insert) or [0, n) (others). */
static int position(oq_kctx *k, size_t i, size_t n, int insert, size_t *pos)
{
	const oq_rt *p = oq_k_in(k, i);
	int64_t v, lim = (int64_t)n;
	if (!p) {
		if (!insert && n == 0)
			return oq_k_err(k, OQ_EINVAL, "the sequence is empty");
		*pos = insert ? n : n - 1;
		return OQ_OK;
	}
	if (p->kind != OQ_RT_TENSOR || p->nelem != 1 || (p->dtype != OQ_DT_INT32 && p->dtype != OQ_DT_INT64))
		return oq_k_err(k, OQ_EINVAL, "position must be an int32 or int64 scalar");
	v = oq_rt_get_int(p, 0);
	if (v < -lim || v > (insert ? lim : lim - 1))
		return oq_k_err(k, OQ_EINVAL, "position %lld is outside [%lld, %lld] for a sequence of %zu",
				(long long)v, (long long)-lim, (long long)(insert ? lim : lim - 1), n);
	*pos = (size_t)(v < 0 ? v + lim : v);
	return OQ_OK;
}

static int copy_into(oq_kctx *k, oq_rt *dst, const oq_rt *src)
{
	return oq_rt_copy(dst, src) ? oq_k_err(k, OQ_ENOMEM, "out of memory") : OQ_OK;
}

static int seq_empty(oq_kctx *k)
{
	int64_t dt = oq_k_int(k, "dtype", OQ_DT_FLOAT);
	oq_rt *y;
	if (!oq_dtype_valid((int)dt))
		return oq_k_err(k, OQ_EINVAL, "dtype %lld is not a tensor element type", (long long)dt);
	return seq_out(k, 0, (int)dt, 0, &y);
}

static int seq_construct(oq_kctx *k)
{
	oq_rt *y, *t;
	int rc;
	if (k->n_in < 1)
		return oq_k_err(k, OQ_EINVAL, "needs at least one input");
	for (size_t i = 0; i < k->n_in; i++) {
		if ((rc = tensor_in(k, i, &t)))
			return rc;
		if (t->dtype != k->in[0]->dtype)
			return oq_k_err(k, OQ_EINVAL, "input %zu is %s, input 0 %s: a sequence holds one type", i,
					oq_dtype_name(t->dtype), oq_dtype_name(k->in[0]->dtype));
	}
	if ((rc = seq_out(k, 0, k->in[0]->dtype, k->n_in, &y)))
		return rc;
	for (size_t i = 0; i < k->n_in; i++)
		if ((rc = copy_into(k, &y->items[i], k->in[i])))
			return rc;
	return OQ_OK;
}

static int seq_at(oq_kctx *k)
{
	oq_rt *s, *y;
	size_t p;
	int rc;
	if ((rc = seq_in(k, 0, &s)))
		return rc;
	if (!oq_k_in(k, 1))
		return oq_k_err(k, OQ_EINVAL, "position is required");
	if ((rc = position(k, 1, s->n_items, 0, &p)))
		return rc;
	return oq_k_output_value(k, 0, &s->items[p], &y);
}

static int seq_insert(oq_kctx *k)
{
	oq_rt *s, *t, *y;
	size_t p;
	int rc;
	if ((rc = seq_in(k, 0, &s)) || (rc = tensor_in(k, 1, &t)) || (rc = position(k, 2, s->n_items, 1, &p)))
		return rc;
	if (s->dtype && t->dtype != s->dtype)
		return oq_k_err(k, OQ_EINVAL, "cannot insert %s into a sequence of %s", oq_dtype_name(t->dtype),
				oq_dtype_name(s->dtype));
	if ((rc = seq_out(k, 0, t->dtype, s->n_items + 1, &y)))
		return rc;
	for (size_t i = 0, j = 0; i <= s->n_items; i++)
		if ((rc = copy_into(k, &y->items[i], i == p ? t : &s->items[j++])))
			return rc;
	return OQ_OK;
}

static int seq_erase(oq_kctx *k)
{
	oq_rt *s, *y;
	size_t p;
	int rc;
	if ((rc = seq_in(k, 0, &s)) || (rc = position(k, 1, s->n_items, 0, &p)))
		return rc;
	if ((rc = seq_out(k, 0, s->dtype, s->n_items - 1, &y)))
		return rc;
	for (size_t i = 0, j = 0; i < s->n_items; i++)
		if (i != p && (rc = copy_into(k, &y->items[j++], &s->items[i])))
			return rc;
	return OQ_OK;
}

static int seq_length(oq_kctx *k)
{
	oq_rt *s, *y;
	int rc;
	if ((rc = seq_in(k, 0, &s)) || (rc = oq_k_output_raw(k, 0, OQ_DT_INT64, 0, NULL, &y)))
		return rc;
	*(int64_t *)y->data = (int64_t)s->n_items;
	return OQ_OK;
}

/* Bytes per element, 0 for strings and sub-byte types. */
static size_t esize(int dtype)
{
	int bits = oq_dtype_bits(dtype);
	return bits >= 8 && dtype != OQ_DT_STRING ? (size_t)bits / 8 : 0;
}

/* Copies the slab [a, b) of axis ax of x into y (y has b - a on that axis, x's other dims). */
static void slab(const oq_rt *x, int ax, int64_t a, int64_t b, oq_rt *y, size_t es)
{
	size_t outer = 1, inner = es, len = (size_t)x->dims[ax], w = (size_t)(b - a);
	for (int i = 0; i < ax; i++)
		outer *= (size_t)x->dims[i];
	for (int i = ax + 1; i < x->rank; i++)
		inner *= (size_t)x->dims[i];
	for (size_t o = 0; o < outer && w > 0 && inner > 0; o++)
		memcpy((unsigned char *)y->data + o * w * inner,
		       (const unsigned char *)x->data + (o * len + (size_t)a) * inner, w * inner);
}

static int split_to_seq(oq_kctx *k)
{
	oq_rt *x, *sp = oq_k_in(k, 1), *y;
	int64_t axis = oq_k_int(k, "axis", 0), keep = oq_k_int(k, "keepdims", 1), len, *cut = NULL;
	int ax, rc;
	size_t n = 0, es;

	if ((rc = tensor_in(k, 0, &x)))
		return rc;
	if ((ax = oq_axis(axis, x->rank)) < 0)
		return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range for rank %d", (long long)axis, x->rank);
	if (!(es = esize(x->dtype)))
		return oq_k_err(k, OQ_EUNSUP, "%s tensors cannot be split", oq_dtype_name(x->dtype));
	len = x->dims[ax];
	if (!sp) { /* pieces of 1 */
		n = (size_t)len;
	} else if (sp->kind != OQ_RT_TENSOR || (sp->dtype != OQ_DT_INT32 && sp->dtype != OQ_DT_INT64) || sp->rank > 1) {
		return oq_k_err(k, OQ_EINVAL, "split must be an int32/int64 scalar or 1-D tensor");
	} else if (sp->rank == 0) {
		int64_t c = oq_rt_get_int(sp, 0);
		if (c < 1)
			return oq_k_err(k, OQ_EINVAL, "split %lld must be positive", (long long)c);
		n = (size_t)((len + c - 1) / c);
	} else {
		int64_t sum = 0;
		n = sp->nelem;
		for (size_t i = 0; i < n; i++) {
			int64_t c = oq_rt_get_int(sp, i);
			if (c < 0 || c > len - sum)
				return oq_k_err(k, OQ_EINVAL, "split lengths must be >= 0 and sum to %lld", (long long)len);
			sum += c;
		}
		if (sum != len)
			return oq_k_err(k, OQ_EINVAL, "split lengths sum to %lld, not %lld", (long long)sum, (long long)len);
	}
	if (!(cut = oq_calloc(n + 1, sizeof *cut)))
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		int64_t c = !sp ? 1 : sp->rank == 0 ? oq_rt_get_int(sp, 0) : oq_rt_get_int(sp, i);
		cut[i + 1] = cut[i] + c < len ? cut[i] + c : len;
	}
	if ((rc = seq_out(k, 0, x->dtype, n, &y)))
		goto done;
	for (size_t i = 0; i < n; i++) {
		int64_t d[OQ_RT_MAX_RANK];
		oq_rt *it = &y->items[i];
		memcpy(d, x->dims, (size_t)x->rank * sizeof *d);
		d[ax] = cut[i + 1] - cut[i];
		if (oq_rt_alloc(it, x->dtype, x->rank, d)) {
			rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
			goto done;
		}
		slab(x, ax, cut[i], cut[i + 1], it, es);
		if (!sp && !keep) { /* drop the split axis */
			memmove(it->dims + ax, it->dims + ax + 1, (size_t)(x->rank - ax - 1) * sizeof *it->dims);
			it->rank--;
		}
	}
done:
	free(cut);
	return rc;
}

static int concat_from_seq(oq_kctx *k)
{
	oq_rt *s, *y;
	const oq_attr *a = oq_k_attr(k, "axis");
	int64_t newax = oq_k_int(k, "new_axis", 0), od[OQ_RT_MAX_RANK], tot = 0;
	int rank, ax, rc;
	size_t es, outer = 1, inner, off = 0;

	if ((rc = seq_in(k, 0, &s)))
		return rc;
	if (!a || a->type != OQ_ATTR_INT)
		return oq_k_err(k, OQ_EINVAL, "attribute axis is required");
	if (s->n_items == 0)
		return oq_k_err(k, OQ_EINVAL, "cannot concatenate an empty sequence (its shape is unknown)");
	rank = s->items[0].rank;
	if (newax && rank >= OQ_RT_MAX_RANK)
		return oq_k_err(k, OQ_EUNSUP, "rank above %d", OQ_RT_MAX_RANK);
	if ((ax = oq_axis(a->i, rank + (newax ? 1 : 0))) < 0 || (!newax && rank == 0))
		return oq_k_err(k, OQ_EINVAL, "axis %lld is out of range for rank %d", (long long)a->i, rank);
	if (!(es = esize(s->items[0].dtype)))
		return oq_k_err(k, OQ_EUNSUP, "%s tensors cannot be concatenated", oq_dtype_name(s->items[0].dtype));
	for (size_t i = 0; i < s->n_items; i++) {
		const oq_rt *t = &s->items[i];
		if (t->dtype != s->items[0].dtype || t->rank != rank)
			return oq_k_err(k, OQ_EINVAL, "item %zu is %s, item 0 %s", i, oq_dtype_name(t->dtype),
					oq_dtype_name(s->items[0].dtype));
		for (int j = 0; j < rank; j++)
			if (t->dims[j] != s->items[0].dims[j] && (newax || j != ax))
				return oq_k_err(k, OQ_EINVAL, "item %zu: dim %d is %lld, item 0 has %lld", i, j,
						(long long)t->dims[j], (long long)s->items[0].dims[j]);
		tot += newax ? 1 : t->dims[ax];
	}
	/* output dims: item 0's with the concatenated (or new) axis */
	for (int j = 0, src = 0; j < rank + (newax ? 1 : 0); j++) {
		if (j != ax || !newax)
			od[j] = s->items[0].dims[src++];
		if (j == ax)
			od[j] = tot;
	}
	if ((rc = oq_k_output_raw(k, 0, s->items[0].dtype, rank + (newax ? 1 : 0), od, &y)))
		return rc;
	for (int j = 0; j < ax; j++)
		outer *= (size_t)od[j];
	inner = y->nelem && outer ? y->nbytes / outer / (size_t)tot : 0; /* bytes per unit of the axis */
	for (size_t i = 0; i < s->n_items; i++) {
		const oq_rt *t = &s->items[i];
		size_t w = (size_t)(newax ? 1 : t->dims[ax]) * inner;
		for (size_t o = 0; o < outer && w; o++)
			memcpy((unsigned char *)y->data + o * (size_t)tot * inner + off,
			       (const unsigned char *)t->data + o * w, w);
		off += w;
	}
	return OQ_OK;
}

static int seq_map(oq_kctx *k)
{
	const oq_attr *a = oq_k_attr(k, "body");
	const oq_graph *body = a && a->type == OQ_ATTR_GRAPH ? a->g : NULL;
	oq_rt *s0, *bin = NULL, *bout = NULL, **ys = NULL;
	size_t n, nin = k->n_in, nout;
	int rc;

	if (!body)
		return oq_k_err(k, OQ_EINVAL, "missing graph attribute body");
	if ((rc = seq_in(k, 0, &s0)))
		return rc;
	n = s0->n_items;
	nout = body->n_outputs;
	if (body->n_inputs != nin || nout != k->n_out)
		return oq_k_err(k, OQ_EINVAL, "body takes %zu inputs and gives %zu outputs; the node has %zu and %zu",
				body->n_inputs, nout, nin, k->n_out);
	for (size_t j = 0; j < nin; j++) {
		const oq_rt *t = k->in[j];
		if (!t || t->kind == OQ_RT_NONE)
			return oq_k_err(k, OQ_EINVAL, "input %zu is missing", j);
		if (t->kind == OQ_RT_SEQ && t->n_items != n)
			return oq_k_err(k, OQ_EINVAL, "input %zu has %zu items, input 0 %zu", j, t->n_items, n);
	}
	bin = oq_calloc(nin, sizeof *bin);
	bout = oq_calloc(nout ? nout : 1, sizeof *bout);
	ys = oq_calloc(nout ? nout : 1, sizeof *ys);
	if (!bin || !bout || !ys) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto done;
	}
	for (size_t j = 0; j < nout; j++)
		if ((rc = seq_out(k, j, 0, n, &ys[j])))
			goto done;
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < nin; j++)
			bin[j] = k->in[j]->kind == OQ_RT_SEQ ? k->in[j]->items[i] : *k->in[j];
		if ((rc = oq_k_run_subgraph(k, body, bin, nin, bout, nout)))
			goto done;
		for (size_t j = 0; j < nout; j++) {
			if (bout[j].kind != OQ_RT_TENSOR) {
				rc = oq_k_err(k, OQ_EUNSUP, "body output %zu is not a tensor", j);
				goto done;
			}
			ys[j]->items[i] = bout[j]; /* moved */
			ys[j]->dtype = bout[j].dtype;
			memset(&bout[j], 0, sizeof bout[j]);
		}
	}
done:
	for (size_t j = 0; bout && j < nout; j++)
		oq_rt_release(&bout[j]);
	free(bin);
	free(bout);
	free(ys);
	return rc;
}

static int optional(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), none, *y;
	if (x)
		return oq_k_output_value(k, 0, x, &y);
	memset(&none, 0, sizeof none);
	none.kind = OQ_RT_NONE;
	return oq_k_output_value(k, 0, &none, &y);
}

static int opt_has(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int rc = oq_k_output_raw(k, 0, OQ_DT_BOOL, 0, NULL, &y);
	if (!rc)
		*(unsigned char *)y->data = x && x->kind != OQ_RT_NONE;
	return rc;
}

static int opt_get(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	if (!x)
		return oq_k_err(k, OQ_EINVAL, "input is missing");
	if (x->kind == OQ_RT_NONE)
		return oq_k_err(k, OQ_EINVAL, "the optional input is empty; check OptionalHasElement first");
	return oq_k_output_value(k, 0, x, &y);
}

const oq_kreg oq_kernels_sequence[] = {
	{OQ_OP_SequenceEmpty, 0, seq_empty},
	{OQ_OP_SequenceConstruct, 0, seq_construct},
	{OQ_OP_SequenceAt, 0, seq_at},
	{OQ_OP_SequenceInsert, 0, seq_insert},
	{OQ_OP_SequenceErase, 0, seq_erase},
	{OQ_OP_SequenceLength, 0, seq_length},
	{OQ_OP_SplitToSequence, 0, split_to_seq},
	{OQ_OP_ConcatFromSequence, 0, concat_from_seq},
	{OQ_OP_SequenceMap, 0, seq_map},
	{OQ_OP_Optional, 0, optional},
	{OQ_OP_OptionalHasElement, 0, opt_has},
	{OQ_OP_OptionalGetElement, 0, opt_get},
	{OQ_OP_UNKNOWN, 0, NULL},
};
