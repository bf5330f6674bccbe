/*
 * fold_bn.c - fold inference BatchNormalization into the linear op before it.
 *
 *   Conv(X, W, B) -> BN(s, b, m, v, eps)
 *     ==>  Conv(X, W*a, (B-m)*a + b),   a = s / sqrt(v + eps)   (per output channel)
 *
 * BN normalizes channel axis 1 of its input, which is the output channel of
 * the producer:
 *   Conv           W [M, C/group, k...]: channel o is W's axis 0 (any spatial
 *                  rank, grouped and depthwise alike);
 *   ConvTranspose  W [C, M/group, k...]: channel o = g*(M/group) + j lives at
 *                  W[g*(C/group) + i, j, ...] for every i of group g;
 *   Gemm           Y = alpha*A*W' + beta*C: W [K,N] (transB=0) scales columns,
 *                  W [N,K] (transB=1) rows; the new C is
 *                  beta*C*a + b - m*a with beta set to 1;
 *   MatMul         X[.., K] * W[K,N] with a rank-2 output (BN's axis 1 is N):
 *                  W columns scale; without a bias Add after it, a new
 *                  Add(bias) is created.
 *   Any of these (without its own bias input) followed by Add(constant bias
 *   holding one value per channel of axis 1, e.g. [C,1,1] after a Conv):
 *                  W scales as above, the Add's bias becomes (bias-m)*a + b.
 * A missing bias counts as zeros. Arithmetic in double, epsilon default 1e-5.
 * A Conv/ConvTranspose that takes a BN's place keeps what the BN knew of its
 * output: channel c ~ N(b_c, s_c^2) (oq_value.bn), for cle's high-bias
 * absorption; folding a Mul/Add into it later drops them.
 *
 * The same folding covers a BN exported as separate ops (PaddleOCR's det
 * model scales every Conv by Mul(constant) then Add(constant)):
 *   Conv/ConvTranspose(X, W, B) -> Mul(c)  ==>  (X, W*c, B*c)
 *   Conv/ConvTranspose(X, W, B) -> Add(c)  ==>  (X, W, B+c)
 * with c a constant holding one value, or one value per output channel on
 * axis 1 (e.g. [C,1,1]); not after Gemm/MatMul, whose bias Add is a
 * quantization unit of its own.
 *
 * Conditions: the producer's output feeds only the BN, is not a graph
 * output and not captured by a subgraph; W, B and all BN parameters are
 * constant initializers; BN in inference (training_mode 0, no running
 * statistics output read; spatial=0 from opsets < 9 is left alone). A
 * weight or bias another node also reads is copied, never changed in
 * place. The BN's output keeps its name: the producer (or the new Add)
 * writes it.
 */
#include "passes/pass.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Number of live consumers (dead nodes may still be listed before a sweep). */
static size_t live_uses(const oq_value *v)
{
	size_t k = 0;
	for (size_t i = 0; i < v->n_uses; i++)
		k += !v->uses[i].node->dead;
	return k;
}

/*
 * Stores `data` (nelem floats, shape of `like` or dims) as the new content of
 * input `idx` of n: in place when n is the value's only reader, else in a
 * new initializer. Takes nothing; copies data.
 */
int oq_pass_set_const(oq_graph *g, oq_node *n, size_t idx, const char *base, int rank,
		     const int64_t *dims, const float *data)
{
	oq_value *v = idx < n->n_inputs ? n->inputs[idx] : NULL;
	oq_tensor *t = oq_tensor_from_floats(rank, dims, data);
	if (!t)
		return OQ_ENOMEM;
	if (v && v->init && live_uses(v) == 1 && oq_value_is_private(v)) {
		char *nm = oq_strdup(v->name);
		if (!nm) {
			oq_tensor_free(t);
			return OQ_ENOMEM;
		}
		free(t->name);
		t->name = nm;
		oq_tensor_free(v->init);
		v->init = t;
		if (v->type.kind == OQ_TYPE_TENSOR && (v->type.dtype != OQ_DT_FLOAT || v->type.rank != rank)) {
			int rc = oq_value_set_type(v, OQ_DT_FLOAT, rank, t->dims); /* dims may be the freed tensor's */
			if (rc)
				return rc;
		}
		return OQ_OK;
	}
	oq_value *nv = oq_graph_add_init(g, v ? v->name : base, t);
	if (!nv)
		return OQ_ENOMEM;
	if (idx >= n->n_inputs) {
		oq_value *in[8] = {0};
		if (idx >= 8)
			return OQ_EINVAL;
		memcpy(in, n->inputs, n->n_inputs * sizeof *in);
		in[idx] = nv;
		int rc = oq_node_set_inputs(n, in, idx + 1);
		if (rc)
			return rc;
	} else {
		n->inputs[idx] = nv;
	}
	return oq_graph_rebuild_uses(g);
}

/* BN parameters as a[c] = s/sqrt(v+eps), sh[c] = b - m*a. NULL on a non-foldable BN. */
static int bn_params(const oq_graph *g, const oq_node *bn, size_t *C, double **a, double **sh)
{
	const oq_tensor *s, *b, *m, *v;
	const oq_attr *ep = oq_node_attr(bn, "epsilon");
	double eps = ep && ep->type == OQ_ATTR_FLOAT ? ep->f : 1e-5;

	*a = *sh = NULL;
	if (bn->n_inputs != 5 || !bn->inputs[0] || !(s = oq_value_const(g, bn->inputs[1])) ||
	    !(b = oq_value_const(g, bn->inputs[2])) || !(m = oq_value_const(g, bn->inputs[3])) || !(v = oq_value_const(g, bn->inputs[4])))
		return OQ_OK;
	if (oq_node_attr_int(bn, "training_mode", 0) != 0 || oq_node_attr_int(bn, "spatial", 1) == 0)
		return OQ_OK;
	for (size_t k = 1; k < bn->n_outputs; k++)
		if (bn->outputs[k] && (live_uses(bn->outputs[k]) || !oq_value_is_private(bn->outputs[k])))
			return OQ_OK;
	if (!bn->n_outputs || !bn->outputs[0] || s->nelem == 0 || b->nelem != s->nelem || m->nelem != s->nelem ||
	    v->nelem != s->nelem || oq_dtype_kind(s->dtype) != 'f' || oq_dtype_kind(b->dtype) != 'f' ||
	    oq_dtype_kind(m->dtype) != 'f' || oq_dtype_kind(v->dtype) != 'f')
		return OQ_OK;
	*C = s->nelem;
	*a = oq_calloc(*C, sizeof **a);
	*sh = oq_calloc(*C, sizeof **sh);
	if (!*a || !*sh) {
		free(*a);
		free(*sh);
		*a = *sh = NULL;
		return OQ_ENOMEM;
	}
	for (size_t c = 0; c < *C; c++) {
		double den = oq_tensor_get(v, c) + eps;
		(*a)[c] = den > 0 ? oq_tensor_get(s, c) / sqrt(den) : NAN;
		(*sh)[c] = oq_tensor_get(b, c) - oq_tensor_get(m, c) * (*a)[c];
		if (!isfinite((*a)[c]) || !isfinite((*sh)[c])) {
			free(*a);
			free(*sh);
			*a = *sh = NULL;
			return OQ_OK;
		}
	}
	return OQ_OK;
}

/*
 * The distribution BN declares for its output, N(beta_c, gamma_c^2) per channel (bias and |scale|),
 * for cle's high-bias absorption (oq_bnstats); *st stays NULL when a value is not finite.
 */
static int bn_stats(const oq_graph *g, const oq_node *bn, size_t C, oq_bnstats **st)
{
	const oq_tensor *s = oq_value_const(g, bn->inputs[1]), *b = oq_value_const(g, bn->inputs[2]);

	if (!(*st = oq_bnstats_new(C)))
		return OQ_ENOMEM;
	for (size_t c = 0; c < C; c++) {
		(*st)->mean[c] = oq_tensor_get(b, c);
		(*st)->std[c] = fabs(oq_tensor_get(s, c));
		if (!isfinite((*st)->mean[c]) || !isfinite((*st)->std[c])) {
			free(*st);
			*st = NULL;
			return OQ_OK;
		}
	}
	return OQ_OK;
}

/* Per-channel bias values of a constant with `C` elements (or one broadcast element), 0 when absent. */
static int bias_ok(const oq_tensor *t, size_t C)
{
	if (!t)
		return 1;
	if (oq_dtype_kind(t->dtype) != 'f')
		return 0;
	if (t->nelem == 1)
		return 1;
	if (t->nelem != C)
		return 0;
	for (int i = 0; i + 1 < t->rank; i++)
		if (t->dims[i] != 1)
			return 0;
	return 1;
}

static double bias_at(const oq_tensor *t, size_t c)
{
	return !t ? 0 : oq_tensor_get(t, t->nelem == 1 ? 0 : c);
}

/* New weight: W scaled per channel, chan(i) gives the channel of element i. */
typedef struct wmap {
	int kind;            /* 0: axis 0, 1: ConvTranspose groups, 2: last axis (columns) */
	size_t inner;        /* elements per index of the scaled axis (kind 0/1) */
	size_t d0, d1;       /* W dims 0 and 1 (kind 1); d1 = N columns (kind 2) */
	size_t cin_g, m_g;   /* kind 1: C/group and M/group */
} wmap;

static size_t chan(const wmap *w, size_t i)
{
	switch (w->kind) {
	case 0: return i / w->inner;
	case 1: {
		size_t c = i / (w->inner * w->d1), j = (i / w->inner) % w->d1;
		return (c / w->cin_g) * w->m_g + j;
	}
	default: return i % w->d1;
	}
}

/* Conv, ConvTranspose, Gemm or MatMul: ops whose weight can absorb the BN scale. */
static int is_linear(const oq_node *n)
{
	return oq_node_is(n, OQ_OP_Conv) || oq_node_is(n, OQ_OP_ConvTranspose) || oq_node_is(n, OQ_OP_Gemm) ||
	       oq_node_is(n, OQ_OP_MatMul);
}

/* The op has its own bias input (Conv/ConvTranspose B, Gemm C). */
static int has_bias(const oq_node *n)
{
	return n->op != OQ_OP_MatMul && n->n_inputs >= 3 && n->inputs[2];
}

/*
 * A bias that, broadcast against an output of rank `orank`, adds one value
 * per channel of axis 1: dims right-aligned to orank are 1 except axis 1 = C.
 */
static int channel_bias(const oq_tensor *t, size_t C, int orank)
{
	if (oq_dtype_kind(t->dtype) != 'f' || t->nelem != C || t->rank > orank || t->rank < orank - 1)
		return 0;
	for (int i = 0; i < t->rank; i++) {
		int axis = orank - t->rank + i;
		if (t->dims[i] != (axis == 1 ? (int64_t)C : 1))
			return 0;
	}
	return 1;
}

/* Folds BN into its producer p (which writes x); *done = 1 when it did. */
static int fold_one(oq_graph *g, oq_node *bn, oq_diag *d, int *done)
{
	oq_value *x = bn->n_inputs ? bn->inputs[0] : NULL, *y = bn->n_outputs ? bn->outputs[0] : NULL;
	oq_node *p = x ? x->producer : NULL, *lin = p, *mm = NULL, *addn = NULL;
	double *a = NULL, *sh = NULL;
	float *nw = NULL, *nb = NULL;
	oq_bnstats *st = NULL;
	size_t C = 0, widx = 1, bidx = 2;
	const oq_tensor *W, *B = NULL;
	wmap wm = {0};
	int rc = OQ_OK;

	*done = 0;
	if (!p || p->dead || x->graph != g || !oq_value_is_private(x) || oq_value_only_user(x) != bn ||
	    !p->n_outputs || p->outputs[0] != x)
		return OQ_OK;
	/* Linear op + Add(constant bias): the Add is the producer, the op before it holds W */
	if (oq_node_is(p, OQ_OP_Add) && p->n_inputs == 2) {
		for (int k = 0; k < 2 && !addn; k++) {
			oq_value *o = p->inputs[k], *c = p->inputs[1 - k];
			if (o && c && is_linear(o->producer) && oq_value_const(g, c) && !oq_value_const(g, o) &&
			    oq_value_only_user(o) == p && oq_value_is_private(o) && o->producer->outputs[0] == o &&
			    !has_bias(o->producer)) {
				lin = o->producer;
				addn = p;
				bidx = (size_t)(1 - k);
			}
		}
		if (!addn)
			return OQ_OK;
	} else if (!is_linear(p)) {
		return OQ_OK;
	}
	mm = lin->op == OQ_OP_MatMul ? lin : NULL;
	if ((rc = bn_params(g, bn, &C, &a, &sh)) || !a)
		return rc ? oq_err(d, rc, "fold-bn: out of memory") : OQ_OK;
	/* a Conv/ConvTranspose writing y directly: y's statistics for cle's high-bias absorption */
	if (!addn && (lin->op == OQ_OP_Conv || lin->op == OQ_OP_ConvTranspose) && (rc = bn_stats(g, bn, C, &st)))
		goto out;

	oq_node *wn = lin;
	int orank = 2; /* rank of the linear op's output */
	if (wn->n_inputs < 2 || !(W = oq_value_const(g, wn->inputs[widx])) || W->dtype != OQ_DT_FLOAT || W->rank < 2)
		goto out;
	if (mm) {
		/* BN's channel axis 1 is N only for a rank-2 product */
		int r = y->type.kind == OQ_TYPE_TENSOR ? y->type.rank : -1;
		if (r < 0 && x->type.kind == OQ_TYPE_TENSOR)
			r = x->type.rank;
		if (r < 0 && mm->inputs[0] && mm->inputs[0]->type.kind == OQ_TYPE_TENSOR)
			r = mm->inputs[0]->type.rank;
		if (r != 2 || W->rank != 2 || (size_t)W->dims[1] != C)
			goto out;
		wm.kind = 2;
		wm.d1 = C;
	} else if (lin->op == OQ_OP_Gemm) {
		int tb = (int)oq_node_attr_int(lin, "transB", 0);
		if (W->rank != 2 || (size_t)W->dims[tb ? 0 : 1] != C)
			goto out;
		if (tb) {
			wm.kind = 0;
			wm.inner = (size_t)W->dims[1];
		} else {
			wm.kind = 2;
			wm.d1 = C;
		}
		B = lin->n_inputs >= 3 ? oq_value_const(g, lin->inputs[2]) : NULL;
		if (lin->n_inputs >= 3 && lin->inputs[2] && (!B || !bias_ok(B, C)))
			goto out;
	} else if (lin->op == OQ_OP_Conv) {
		if ((size_t)W->dims[0] != C)
			goto out;
		wm.kind = 0;
		wm.inner = W->nelem / C;
		orank = W->rank;
		B = lin->n_inputs >= 3 ? oq_value_const(g, lin->inputs[2]) : NULL;
		if (lin->n_inputs >= 3 && lin->inputs[2] && (!B || B->nelem != C || oq_dtype_kind(B->dtype) != 'f'))
			goto out;
	} else { /* ConvTranspose */
		int64_t grp = oq_node_attr_int(lin, "group", 1);
		if (grp < 1 || W->dims[0] % grp || (size_t)(W->dims[1] * grp) != C)
			goto out;
		wm.kind = 1;
		wm.d0 = (size_t)W->dims[0];
		wm.d1 = (size_t)W->dims[1];
		wm.inner = W->nelem / (wm.d0 * wm.d1);
		wm.cin_g = wm.d0 / (size_t)grp;
		wm.m_g = wm.d1;
		orank = W->rank;
		B = lin->n_inputs >= 3 ? oq_value_const(g, lin->inputs[2]) : NULL;
		if (lin->n_inputs >= 3 && lin->inputs[2] && (!B || B->nelem != C || oq_dtype_kind(B->dtype) != 'f'))
			goto out;
	}
	if (addn) {
		/* the Add's bias must hold one value per channel, on axis 1 of the output */
		B = oq_value_const(g, addn->inputs[bidx]);
		if (!B || !channel_bias(B, C, orank))
			goto out;
	}

	nw = oq_calloc(W->nelem, sizeof *nw);
	nb = oq_calloc(C, sizeof *nb);
	if (!nw || !nb) {
		rc = OQ_ENOMEM;
		goto out;
	}
	if (wm.kind == 0) { /* channel-major: C runs of inner weights (W is float32, checked above) */
		const unsigned char *wp = W->data; /* may be unaligned (borrowed from the file) */
		for (size_t c = 0, i = 0; c < C; c++)
			for (size_t k = 0; k < wm.inner; k++, i++) {
				float wv;
				memcpy(&wv, wp + 4 * i, 4);
				nw[i] = (float)((double)wv * a[c]);
			}
	} else {
		for (size_t i = 0; i < W->nelem; i++)
			nw[i] = (float)(oq_tensor_get(W, i) * a[chan(&wm, i)]);
	}
	double beta = 1;
	if (!addn && lin->op == OQ_OP_Gemm) {
		const oq_attr *ba = oq_node_attr(lin, "beta");
		beta = ba && ba->type == OQ_ATTR_FLOAT ? ba->f : 1.0;
	}
	for (size_t c = 0; c < C; c++)
		nb[c] = (float)(beta * bias_at(B, c) * a[c] + sh[c]);

	int64_t bdim = (int64_t)C;
	char base[256];
	snprintf(base, sizeof base, "%.200s_bias", wn->inputs[widx]->name);
	if ((rc = oq_pass_set_const(g, wn, widx, "W", W->rank, W->dims, nw)))
		goto out;
	if (mm && !addn) {
		/* MatMul -> BN  ==>  MatMul -> Add(new bias) writing y */
		oq_node *an = oq_graph_add_node(g, "Add", "", bn->name[0] ? bn->name : "");
		oq_tensor *bt = oq_tensor_from_floats(1, &bdim, nb);
		oq_value *bv = bt ? oq_graph_add_init(g, base, bt) : NULL;
		oq_value *in[2] = {x, bv};
		if (!an || !bv) {
			rc = OQ_ENOMEM;
			goto out;
		}
		if ((rc = oq_node_set_inputs(an, in, 2)) || (rc = oq_node_set_outputs(an, &y, 1)))
			goto out;
		if (an->opset && an->opset < 7) {
			/* Add-1/6 broadcasts only when asked */
			if ((rc = oq_node_set_attr_int(an, "broadcast", 1)))
				goto out;
		}
	} else {
		if (addn) {
			/* keep the bias's own shape: its one non-1 dim is the channel */
			if ((rc = oq_pass_set_const(g, addn, bidx, base, B->rank, B->dims, nb)))
				goto out;
		} else {
			if ((rc = oq_pass_set_const(g, lin, 2, base, 1, &bdim, nb)))
				goto out;
			if (lin->op == OQ_OP_Gemm) {
				if ((rc = oq_node_set_attr_float(lin, "beta", 1.0f)))
					goto out;
				if (lin->opset && lin->opset < 7 && (rc = oq_node_set_attr_int(lin, "broadcast", 1)))
					goto out;
			}
		}
		p->outputs[0] = y;
		if (x->flags & OQ_V_VINFO)
			oq_graph_remove_vinfo(g, x);
		/* x's statistics (a BN folded before this one) describe a value nobody writes now */
		free(x->bn);
		x->bn = NULL;
		free(y->bn);
		y->bn = st;
		st = NULL;
	}
	bn->dead = 1;
	bn->outputs[0] = NULL; /* the producer (or the new Add) is y's only writer */
	*done = 1;
	rc = oq_graph_rebuild_uses(g);
out:
	free(a);
	free(sh);
	free(st);
	free(nw);
	free(nb);
	if (rc)
		return oq_err(d, rc, "fold-bn: node '%s' (BatchNormalization): out of memory", bn->name);
	return OQ_OK;
}

/* Conv/ConvTranspose -> Mul(c) or Add(c): folds the constant into W / B; *done = 1 when it did. */
static int fold_affine(oq_graph *g, oq_node *n, oq_diag *d, int *done)
{
	oq_value *x = NULL, *y = n->n_outputs ? n->outputs[0] : NULL;
	const oq_tensor *c = NULL, *W, *B = NULL;
	oq_node *p;
	float *nw = NULL, *nb = NULL;
	size_t C;
	int mul = n->op == OQ_OP_Mul, orank, rc = OQ_OK;
	wmap wm = {0};

	*done = 0;
	if (n->n_inputs != 2 || n->n_outputs != 1 || !y)
		return OQ_OK;
	for (int k = 0; k < 2 && !c; k++)
		if (n->inputs[k] && n->inputs[1 - k] && oq_value_const(g, n->inputs[k]) && !oq_value_const(g, n->inputs[1 - k])) {
			c = oq_value_const(g, n->inputs[k]);
			x = n->inputs[1 - k];
		}
	if (!c || c->dtype != OQ_DT_FLOAT || !(p = x->producer) || p->dead || x->graph != g ||
	    !oq_value_is_private(x) || oq_value_only_user(x) != n || !p->n_outputs || p->outputs[0] != x ||
	    !(oq_node_is(p, OQ_OP_Conv) || oq_node_is(p, OQ_OP_ConvTranspose)) || p->n_inputs < 2 ||
	    !(W = oq_value_const(g, p->inputs[1])) || W->dtype != OQ_DT_FLOAT || W->rank < 3)
		return OQ_OK;
	if (n->opset && n->opset < 7)
		return OQ_OK; /* legacy broadcast semantics */
	orank = W->rank;
	if (p->op == OQ_OP_Conv) {
		C = (size_t)W->dims[0];
		wm.kind = 0;
		wm.inner = W->nelem / (C ? C : 1);
	} else {
		int64_t grp = oq_node_attr_int(p, "group", 1);
		if (grp < 1 || W->dims[0] % grp)
			return OQ_OK;
		C = (size_t)(W->dims[1] * grp);
		wm.kind = 1;
		wm.d0 = (size_t)W->dims[0];
		wm.d1 = (size_t)W->dims[1];
		wm.inner = W->nelem / (wm.d0 * wm.d1);
		wm.cin_g = wm.d0 / (size_t)grp;
		wm.m_g = wm.d1;
	}
	if (C == 0 || c->rank > orank || !(c->nelem == 1 || channel_bias(c, C, orank)))
		return OQ_OK;
	if (p->n_inputs >= 3 && p->inputs[2] &&
	    (!(B = oq_value_const(g, p->inputs[2])) || B->nelem != C || oq_dtype_kind(B->dtype) != 'f'))
		return OQ_OK;
	nb = oq_calloc(C, sizeof *nb);
	if (!nb)
		goto nomem;
	for (size_t k = 0; k < C; k++) {
		double cv = oq_tensor_get(c, c->nelem == 1 ? 0 : k), b = bias_at(B, k);
		nb[k] = (float)(mul ? b * cv : b + cv);
		if (!isfinite(nb[k]))
			goto out;
	}
	if (mul) {
		if (!(nw = oq_calloc(W->nelem, sizeof *nw)))
			goto nomem;
		if (wm.kind == 0) { /* channel-major, both float32 (checked above): fold_one's loop */
			const unsigned char *wp = W->data, *cp = c->data; /* may be unaligned (borrowed) */
			for (size_t ch = 0, i = 0; ch < C; ch++) {
				float cf;
				memcpy(&cf, cp + 4 * (c->nelem == 1 ? 0 : ch), 4);
				for (size_t k = 0; k < wm.inner; k++, i++) {
					float wv;
					memcpy(&wv, wp + 4 * i, 4);
					nw[i] = (float)((double)wv * (double)cf);
				}
			}
		} else {
			for (size_t i = 0; i < W->nelem; i++) {
				size_t ch = chan(&wm, i);
				nw[i] = (float)(oq_tensor_get(W, i) * oq_tensor_get(c, c->nelem == 1 ? 0 : ch));
			}
		}
	}
	{
		int64_t bdim = (int64_t)C;
		char base[256];
		snprintf(base, sizeof base, "%.200s_bias", p->inputs[1]->name);
		if (nw && (rc = oq_pass_set_const(g, p, 1, "W", W->rank, W->dims, nw)))
			goto out;
		if ((rc = oq_pass_set_const(g, p, 2, base, 1, &bdim, nb)))
			goto out;
	}
	p->outputs[0] = y;
	if (x->flags & OQ_V_VINFO)
		oq_graph_remove_vinfo(g, x);
	/* a folded BN's statistics do not describe y (scaled or shifted): none for cle */
	free(x->bn);
	x->bn = NULL;
	n->dead = 1;
	n->outputs[0] = NULL;
	*done = 1;
	rc = oq_graph_rebuild_uses(g);
	goto out;
nomem:
	rc = OQ_ENOMEM;
out:
	free(nw);
	free(nb);
	if (rc)
		return oq_err(d, rc, "fold-bn: node '%s' (%s): out of memory", n->name, n->op_type);
	return OQ_OK;
}

int oq_pass_fold_bn(oq_graph *g, const oq_opts *o, oq_diag *d, int *changed)
{
	size_t nfold = 0, naff = 0;
	int rc;

	*changed = 0;
	if ((rc = oq_graph_rebuild_uses(g)))
		return oq_err(d, rc, "fold-bn: out of memory");
	for (size_t i = 0; i < g->n_nodes; i++) {
		oq_node *n = g->nodes[i];
		int done = 0;
		if (oq_node_is(n, OQ_OP_Mul) || oq_node_is(n, OQ_OP_Add)) {
			if ((rc = fold_affine(g, n, d, &done)))
				return rc;
			naff += (size_t)done;
			continue;
		}
		if (!oq_node_is(n, OQ_OP_BatchNormalization))
			continue;
		if ((rc = fold_one(g, n, d, &done)))
			return rc;
		nfold += (size_t)done;
	}
	if (!nfold && !naff)
		return OQ_OK;
	*changed = 1;
	if ((rc = oq_graph_sweep(g)))
		return oq_err(d, rc, "fold-bn: out of memory");
	/* BN parameters and replaced weights nobody reads any more */
	for (size_t i = g->n_inits; i-- > 0;) {
		oq_value *v = g->inits[i];
		if (v->n_uses == 0 && oq_value_is_private(v))
			oq_graph_remove_init(g, v);
	}
	if (o && o->log)
		fprintf(o->log, "fold-bn: %zu BatchNormalization and %zu constant Mul/Add folded\n", nfold, naff);
	return OQ_OK;
}
