/*
 * kernels_ew.c - element-wise kernels (placeholder with two reference
 * kernels while the family is being written).
 */
#include "kernel.h"

static int k_relu(oq_kctx *k)
{
	oq_rt *x = oq_k_in(k, 0), *y;
	int rc;
	if (!x || x->dtype != OQ_DT_FLOAT)
		return oq_k_err(k, OQ_EUNSUP, "needs a float input");
	if ((rc = oq_k_output(k, 0, x->dtype, x->rank, x->dims, &y)))
		return rc;
	const float *a = x->data;
	float *b = y->data;
	for (size_t i = 0; i < x->nelem; i++)
		b[i] = a[i] > 0 ? a[i] : 0;
	return OQ_OK;
}

const oq_kreg oq_kernels_ew[] = {
	{OQ_OP_Relu, 0, k_relu},
	{OQ_OP_UNKNOWN, 0, NULL},
};
