/*
 * widen.c - float16 and bfloat16 values held as float32.
 *
 * The executor computes float16 / bfloat16 models in float32, as ONNX
 * Runtime's CPU provider does (it has float32 kernels only for most ops,
 * casts around them and removes the Cast pairs that meet between two such
 * nodes): every 16-bit float value becomes float32 where it enters a frame
 * - initializers when the plan views them (once), graph inputs when they
 * are bound, node outputs of a 16-bit float type (a Cast to float16, a
 * Constant, a DequantizeLinear with float16 scales) right after their
 * kernel - so the kernels only ever see float32 and run their fast paths
 * (packed weights, fused groups). Rounding to 16 bits happens where the
 * model asks for it (a Cast to float16 rounds, then the value is widened
 * exactly) and at the main graph's outputs declared float16 / bfloat16,
 * which the caller gets in their declared type.
 */
#include "calib/exec/exec_internal.h"

#include <stdlib.h>
#include <string.h>

#include "calib/kernels/half.h"

int oq_exec_wide(int dtype)
{
	return dtype == OQ_DT_FLOAT16 || dtype == OQ_DT_BFLOAT16;
}

/* n elements of dtype at src as float32 into dst. */
static void up(int dtype, const void *src, float *dst, size_t n)
{
	if (dtype == OQ_DT_FLOAT16)
		oq_half_to_float(src, dst, n);
	else
		oq_bf16_to_float(src, dst, n);
}

/* t's 16-bit float data as float32 in a new buffer from get (arena or heap); *cap its arena size. */
static int widen_tensor(oq_exec *e, oq_rt *t, int arena)
{
	size_t nbytes = t->nelem * sizeof(float), cap = 0;
	float *p;

	if (t->nelem > SIZE_MAX / sizeof(float))
		return OQ_ENOMEM;
	p = arena ? oq_arena_get(e, nbytes, &cap) : aligned_alloc(64, (nbytes + 63) / 64 * 64 + 64);
	if (!p)
		return OQ_ENOMEM;
	if (t->nelem)
		up(t->dtype, t->data, p, t->nelem);
	if (arena) {
		if (!t->borrowed)
			e->live -= t->nbytes;
		e->live += nbytes;
		t->strs = NULL;
		if (!t->borrowed && t->cap)
			oq_arena_release(e, &(oq_rt){.kind = OQ_RT_TENSOR, .data = t->data, .cap = t->cap});
		else if (!t->borrowed)
			free(t->data);
	} else if (!t->borrowed) {
		free(t->data);
	}
	t->data = p;
	t->cap = cap;
	t->borrowed = 0;
	t->wide = t->dtype;
	t->dtype = OQ_DT_FLOAT;
	t->nbytes = nbytes;
	return OQ_OK;
}

int oq_exec_widen(oq_exec *e, oq_rt *t)
{
	int rc;

	if (t->kind == OQ_RT_SEQ) {
		for (size_t i = 0; i < t->n_items; i++)
			if (oq_exec_wide(t->items[i].dtype) && (rc = widen_tensor(e, &t->items[i], 0)))
				return rc;
		if (oq_exec_wide(t->dtype))
			t->dtype = OQ_DT_FLOAT;
		return OQ_OK;
	}
	if (t->kind != OQ_RT_TENSOR || !oq_exec_wide(t->dtype))
		return OQ_OK;
	return widen_tensor(e, t, 1);
}

int oq_exec_narrow(const oq_rt *src, int dtype, oq_rt *dst)
{
	int rc;

	if ((rc = oq_rt_alloc(dst, dtype, src->rank, src->dims)))
		return rc;
	if (dtype == OQ_DT_FLOAT16)
		oq_float_to_half(src->data, dst->data, src->nelem);
	else
		oq_float_to_bf16(src->data, dst->data, src->nelem);
	return OQ_OK;
}

int oq_exec_wide_of(const oq_node *n, const oq_rt *const *in, size_t n_in)
{
	const oq_rt *x;

	switch (n->op) {
	case OQ_OP_Cast: /* its type is `to` (a 16-bit target was widened with its output) */
		return 0;
	case OQ_OP_CastLike: case OQ_OP_DequantizeLinear: /* the type of input 1 (target, scale) */
		x = n_in > 1 ? in[1] : NULL;
		break;
	default:
		x = n_in > 0 ? in[0] : NULL;
		break;
	}
	return x && x->kind == OQ_RT_TENSOR && x->dtype == OQ_DT_FLOAT ? x->wide : 0;
}
