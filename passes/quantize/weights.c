/*
 * weights.c - the weights of the quantize pass: the grid each Conv,
 * ConvTranspose, Gemm and MatMul weight gets (options, then node and tensor
 * overrides, then a learned rounding set), and their DequantizeLinear with
 * the int32 bias (qweight.c does the arithmetic).
 */
#include <stdint.h>
#include <string.h>

#include "passes/quantize/quantize_internal.h"
#include "src/quant/qparams.h"

static int weight_spec(const qctx *c, const oq_node *n, const oq_value *w, oq_wspec *s, int *skip)
{
	const oq_override *t = oq_qc_tovr(c, w->name), *no = oq_qc_novr(c, n);
	const oq_tensor *wt = w->init;
	int gran = c->o->granularity, axis = INT32_MIN, chan, red;
	int64_t bs = c->o->block_size ? c->o->block_size : 32;

	*skip = (t && t->skip) || oq_qc_listed(c->o->exclude, c->o->n_exclude, w->name);
	memset(s, 0, sizeof *s);
	s->dtype = c->trt && !oq_qtype_is_fp8(c->o->weight_type) ? OQ_DT_INT8 : c->o->weight_type;
	s->symmetric = c->trt || !c->o->weight_asym;
	s->sym_grid = c->o->sym_grid;
	s->reduce_range = c->o->reduce_range;
	s->mse = c->o->weight_method == OQ_WMETHOD_MSE;
	for (int k = 0; k < 2; k++) {
		const oq_override *v = k ? t : no;
		if (!v)
			continue;
		if (v->dtype)
			s->dtype = v->dtype;
		if (v->symmetric >= 0)
			s->symmetric = v->symmetric;
		if (v->granularity >= 0)
			gran = v->granularity;
		if (v->axis != INT32_MIN)
			axis = v->axis;
		if (v->block_size)
			bs = v->block_size;
		if (v->n_wq) {
			s->fixed_scale = v->w_scale;
			s->fixed_zp = v->w_zp;
			s->n_fixed = v->n_wq;
		}
	}
	switch (n->op) {
	case OQ_OP_Conv: chan = 0; red = 1; break;
	case OQ_OP_ConvTranspose: chan = 1; red = 0; break;
	case OQ_OP_Gemm:
		chan = oq_node_attr_int(n, "transB", 0) ? 0 : 1;
		red = 1 - chan;
		break;
	default: chan = 1; red = 0; break; /* MatMul [K, N] */
	}
	if (axis != INT32_MIN) {
		if (axis < 0)
			axis += wt->rank;
		if (axis < 0 || axis >= wt->rank)
			return oq_err(c->d, OQ_EUSAGE, "quantize: node '%s' (%s): override axis for weight '%s' "
				      "is outside its rank %d", n->name, n->op_type, w->name, wt->rank);
	}
	if (gran == OQ_GRAN_TENSOR) {
		s->axis = -1;
	} else if (gran == OQ_GRAN_BLOCK) {
		s->axis = axis != INT32_MIN ? axis : red;
		s->block_size = bs;
	} else {
		s->axis = axis != INT32_MIN ? axis : chan;
	}
	oq_wlearned_apply(c->o->learned, w->name, s);
	return OQ_OK;
}

int oq_qc_weight_of(qctx *c, const oq_node *n, const opinfo *f, FILE *log, oq_wspec *s, int *ok)
{
	const oq_tensor *wt;
	int skip, rc;

	*ok = 0;
	if (!f || n->dead || f->w < 0 || (size_t)f->w >= n->n_inputs)
		return OQ_OK;
	if (!n->inputs[f->w] || !n->inputs[f->w]->init || (n->inputs[f->w]->flags & OQ_V_INPUT))
		return OQ_OK; /* an activation (MatMul/Gemm with two inputs) */
	if (!oq_weight_quantizable(n->inputs[f->w])) {
		if (log)
			fprintf(log, "quantize: node '%s' (%s): weight '%s' is not float32: left as it is\n",
				n->name, n->op_type, n->inputs[f->w]->name);
		return OQ_OK;
	}
	wt = n->inputs[f->w]->init;
	if (n->op == OQ_OP_MatMul && wt->rank != 2)
		return OQ_OK;
	if ((n->op == OQ_OP_Gemm && wt->rank != 2) || wt->rank < 1)
		return OQ_OK;
	if ((rc = weight_spec(c, n, n->inputs[f->w], s, &skip)))
		return rc;
	*ok = !skip;
	return OQ_OK;
}

int oq_qc_quantize_weights(qctx *c)
{
	for (size_t i = 0; i < c->nn; i++) {
		oq_node *n = c->g->nodes[i];
		const opinfo *f = c->info[i];
		oq_wspec s;
		int ok, rc, b = -1;
		float beta = 1, in_s;

		if ((rc = oq_qc_weight_of(c, n, f, c->o->log, &s, &ok)))
			return rc;
		if (!ok)
			continue;
		in_s = c->trt ? 0 : c->in_scale[i];
		if (in_s > 0 && f->b >= 0 && (size_t)f->b < n->n_inputs && n->inputs[f->b]) {
			const oq_tensor *bt = oq_value_const(c->g, n->inputs[f->b]);
			if (bt && bt->dtype == OQ_DT_FLOAT && bt->rank == 1)
				b = f->b;
		}
		if (n->op == OQ_OP_Gemm) {
			const oq_attr *a = oq_node_attr(n, "beta");
			if (a && a->type == OQ_ATTR_FLOAT)
				beta = a->f;
			if (beta == 0)
				b = -1;
		}
		if ((rc = oq_weight_insert_dq(c->g, n, f->w, b, b >= 0 ? in_s : 0, beta, &s, c->d)))
			return rc;
		c->n_weights++;
	}
	return OQ_OK;
}
