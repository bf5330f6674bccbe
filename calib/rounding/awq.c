/*
 * awq.c - activation-aware input-channel scaling (awq.h): the alpha search of one layer, the
 * path that absorbs the scales, and applying them to the graph. learn.c runs it over a model.
 */
#include "calib/rounding/awq.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the search */

/* Element (row m, k) of Ly's weight. */
static size_t at(const oq_awq_layer *Ly, size_t m, size_t k)
{
	return Ly->cols ? k * Ly->rows + m : m * Ly->K + k;
}

void oq_awq_scales(const double *m, size_t C, double alpha, float *s)
{
	double top = 0, lo = INFINITY, hi = 0, norm;

	for (size_t c = 0; c < C; c++)
		top = m[c] > top ? m[c] : top;
	if (!(top > 0) || alpha == 0) {
		for (size_t c = 0; c < C; c++)
			s[c] = 1;
		return;
	}
	for (size_t c = 0; c < C; c++) {
		double v = pow(m[c] > OQ_AWQ_FLOOR * top ? m[c] : OQ_AWQ_FLOOR * top, alpha);
		lo = v < lo ? v : lo;
		hi = v > hi ? v : hi;
	}
	norm = sqrt(lo * hi);
	for (size_t c = 0; c < C; c++)
		s[c] = (float)(pow(m[c] > OQ_AWQ_FLOOR * top ? m[c] : OQ_AWQ_FLOOR * top, alpha) / norm);
}

/* Scratch of one layer's losses. */
typedef struct ws {
	float *w;            /* the float weight (nelem) */
	float *sw, *q;       /* scaled, and quantized (nelem) */
	float *D, *P;        /* rows x K: the error d and d A */
} ws;

static void ws_free(ws *w)
{
	free(w->w);
	free(w->sw);
	free(w->q);
	free(w->D);
	free(w->P);
}

static int ws_init(ws *w, const oq_awq_layer *Ly, oq_diag *d)
{
	size_t rk;

	memset(w, 0, sizeof *w);
	if (!oq_mul_size(Ly->rows, Ly->K, &rk) || rk != Ly->W->nelem || rk > SIZE_MAX / sizeof(float) ||
	    Ly->per == 0 || Ly->K % Ly->per || Ly->K > (size_t)INT32_MAX || Ly->rows > (size_t)INT32_MAX)
		return oq_err(d, OQ_EINVAL, "awq: weight '%s': %zu x %zu does not match its %zu elements",
			      Ly->W->name, Ly->rows, Ly->K, Ly->W->nelem);
	if (!(w->w = oq_tensor_to_floats(Ly->W)) || !(w->sw = oq_malloc(rk * sizeof *w->sw)) ||
	    !(w->q = oq_malloc(rk * sizeof *w->q)) || !(w->D = oq_malloc(rk * sizeof *w->D)) ||
	    !(w->P = oq_malloc(rk * sizeof *w->P))) {
		ws_free(w);
		return oq_err(d, OQ_ENOMEM, "awq: out of memory");
	}
	return OQ_OK;
}

/* L(s) on A (s NULL: 1). */
static int loss_at(const oq_awq_layer *Ly, const float *A, const float *s, ws *w, double *loss, oq_diag *d)
{
	size_t K = Ly->K, R = Ly->rows;
	oq_tensor *t;
	double l = 0;
	int rc;

	for (size_t m = 0; m < R; m++)
		for (size_t k = 0; k < K; k++) {
			size_t e = at(Ly, m, k);
			w->sw[e] = s ? (float)((double)w->w[e] * (double)s[k / Ly->per]) : w->w[e];
		}
	if (!(t = oq_tensor_from_floats(Ly->W->rank, Ly->W->dims, w->sw)))
		return oq_err(d, OQ_ENOMEM, "awq: out of memory");
	rc = oq_weight_fake_quantize(t, Ly->spec, w->q, d);
	oq_tensor_free(t);
	if (rc)
		return rc;
	for (size_t m = 0; m < R; m++)
		for (size_t k = 0; k < K; k++) {
			size_t e = at(Ly, m, k);
			double q = s ? (double)w->q[e] / (double)s[k / Ly->per] : (double)w->q[e];
			w->D[m * K + k] = (float)(q - (double)w->w[e]);
		}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)R, (int)K, (int)K, 1.0f, w->D, (int)K, A, (int)K,
		    0.0f, w->P, (int)K);
	for (size_t i = 0; i < R * K; i++)
		l += (double)w->D[i] * (double)w->P[i];
	*loss = l;
	return OQ_OK;
}

int oq_awq_loss(const oq_awq_layer *Ly, const float *A, const float *s, double *loss, oq_diag *d)
{
	ws w;
	int rc;

	if ((rc = ws_init(&w, Ly, d)))
		return rc;
	rc = loss_at(Ly, A, s, &w, loss, d);
	ws_free(&w);
	return rc;
}

int oq_awq_search(const oq_awq_layer *Ly, const float *A, const double *m, oq_awq_fit *fit, float *s, oq_diag *d)
{
	size_t C = Ly->per ? Ly->K / Ly->per : 0;
	float *try = NULL;
	ws w;
	int rc;

	fit->a = 0;
	fit->loss0 = fit->loss = 0;
	if ((rc = ws_init(&w, Ly, d)))
		return rc;
	if (!(try = oq_malloc(C * sizeof *try))) {
		rc = oq_err(d, OQ_ENOMEM, "awq: out of memory");
		goto out;
	}
	for (size_t c = 0; c < C; c++)
		s[c] = 1;
	for (int a = 0; a <= OQ_AWQ_GRID; a++) {
		double l;
		oq_awq_scales(m, C, (double)a / OQ_AWQ_GRID, try);
		if ((rc = loss_at(Ly, A, a ? try : NULL, &w, &l, d)))
			goto out;
		if (a == 0) {
			fit->loss0 = fit->loss = l;
		} else if (l < fit->loss) {
			fit->a = a;
			fit->loss = l;
			memcpy(s, try, C * sizeof *s);
		}
	}
out:
	free(try);
	ws_free(&w);
	return rc;
}

/* ------------------------------------------------------------ the path */

static int no(oq_awq_path *p, const char *fmt, ...) OQ_PRINTF(2, 3);

/* 0, with p->why set. */
static int no(oq_awq_path *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->why, sizeof p->why, fmt, ap);
	va_end(ap);
	return 0;
}

static int is_shape_reader(const oq_node *u)
{
	return oq_node_is(u, OQ_OP_Shape) || oq_node_is(u, OQ_OP_Size);
}

/* v is read once, by `user`, and otherwise by Shape / Size nodes only (they read no values). */
static int sole_reader(const oq_value *v, const oq_node *user)
{
	size_t k = 0;
	for (size_t i = 0; i < v->n_uses; i++) {
		const oq_node *u = v->uses[i].node;
		if (u->dead || (u != user && is_shape_reader(u)))
			continue;
		if (u != user)
			return 0;
		k++;
	}
	return k == 1;
}

/* The float32 constant at input i of n, or NULL. */
static const oq_tensor *fconst(const oq_graph *g, const oq_node *n, size_t i)
{
	const oq_tensor *t = i < n->n_inputs && n->inputs[i] ? oq_value_const(g, n->inputs[i]) : NULL;
	return t && t->dtype == OQ_DT_FLOAT ? t : NULL;
}

/* Is every group of producer pr's grid inside one output channel (axis out), or pr not quantized? */
static int grid_follows_rows(const oq_wplan *plans, size_t np, const oq_node *pr, int out)
{
	for (size_t i = 0; plans && i < np; i++)
		if (plans[i].node == pr) {
			const oq_wspec *sp = &plans[i].spec;
			if (sp->axis < 0 || sp->n_fixed)
				return 0;
			return sp->block_size > 0 ? sp->axis != out : sp->axis == out;
		}
	return 1;
}

/* A 1-D-like constant of C values or 1: its dims all 1 but (optionally) the last, which is C. */
static int last_axis_vector(const oq_tensor *t, size_t C)
{
	for (int i = 0; i + 1 < t->rank; i++)
		if (t->dims[i] != 1)
			return 0;
	return t->rank == 0 || t->dims[t->rank - 1] == 1 || (size_t)t->dims[t->rank - 1] == C;
}

/*
 * The constant t of an elementwise node on the path: one value, or one per channel at the
 * channel axis (the tail-th axis from the right). *rank: the new constant's; *spread: t holds
 * one value per channel. 0 when t is not such a constant, or one value meeting a value not
 * known to carry every channel (!sure).
 */
static int channel_const(oq_awq_path *p, const oq_tensor *t, int sure, int *rank, int *spread, const oq_node *n)
{
	int ch = t->rank - p->tail; /* the channel axis among t's dims, if >= 0 */
	int64_t cd = ch >= 0 ? t->dims[ch] : 1;

	for (int i = 0; i < t->rank; i++)
		if (i != ch && t->dims[i] != 1)
			return no(p, "the constant of %s '%s' is not one value per channel", n->op_type, n->name);
	if (cd != 1 && (size_t)cd != p->C)
		return no(p, "the constant of %s '%s' has %lld values on the channel axis, not %zu", n->op_type,
			  n->name, (long long)cd, p->C);
	*spread = cd != 1 || p->C == 1;
	if (!*spread && !sure)
		return no(p, "%s '%s': its constant would become per channel on a value that may broadcast",
			  n->op_type, n->name);
	*rank = t->rank > p->tail ? t->rank : p->tail;
	return 1;
}

/* Is an output of a normalization other than its first (mean, variance) read or exported? */
static int more_outputs_used(const oq_node *pr)
{
	for (size_t k = 1; k < pr->n_outputs; k++)
		if (pr->outputs[k] && (pr->outputs[k]->n_uses || !oq_value_is_private(pr->outputs[k])))
			return 1;
	return 0;
}

/* The producer pr of a Conv layer's input: Conv, ConvTranspose (group 1) or BatchNormalization. */
static int conv_producer(const oq_graph *g, oq_node *pr, const oq_wplan *plans, size_t np, oq_awq_path *p)
{
	oq_awq_site *st = &p->site[p->n];
	const oq_tensor *W = fconst(g, pr, 1), *B;

	if (oq_node_is(pr, OQ_OP_Conv) || oq_node_is(pr, OQ_OP_ConvTranspose)) {
		int tr = pr->op == OQ_OP_ConvTranspose, out = tr ? 1 : 0;
		if (!W || W->rank < 3)
			return no(p, "%s '%s' has no constant float weight", pr->op_type, pr->name);
		if (tr && oq_node_attr_int(pr, "group", 1) != 1)
			return no(p, "ConvTranspose '%s' is grouped", pr->name);
		if ((size_t)W->dims[out] != p->C)
			return no(p, "%s '%s' writes %lld channels, not %zu", pr->op_type, pr->name,
				  (long long)W->dims[out], p->C);
		if (pr->n_inputs > 2 && pr->inputs[2] && (!(B = fconst(g, pr, 2)) || B->nelem != p->C))
			return no(p, "%s '%s' has a bias that is not a float constant of %zu values", pr->op_type,
				  pr->name, p->C);
		if (!grid_follows_rows(plans, np, pr, out))
			return no(p, "%s '%s' has a per-tensor or fixed grid, which the scales would change", pr->op_type,
				  pr->name);
		st->kind = OQ_AWQ_ROWS;
	} else {
		const oq_tensor *sc = fconst(g, pr, 1);
		B = fconst(g, pr, 2);
		if (pr->n_inputs != 5 || !sc || !B || sc->nelem != p->C || B->nelem != p->C ||
		    oq_node_attr_int(pr, "training_mode", 0) != 0)
			return no(p, "BatchNormalization '%s' has no constant scale and bias of %zu values", pr->name,
				  p->C);
		if (more_outputs_used(pr))
			return no(p, "BatchNormalization '%s' has more outputs in use", pr->name);
		st->kind = OQ_AWQ_NORM;
	}
	st->node = pr;
	p->n++;
	return 1;
}

/* The producer pr of a MatMul / Gemm layer's input: MatMul, Gemm or LayerNormalization. */
static int row_producer(const oq_graph *g, oq_node *pr, const oq_wplan *plans, size_t np, oq_awq_path *p)
{
	oq_awq_site *st = &p->site[p->n];
	const oq_tensor *W = fconst(g, pr, 1), *B;

	if (oq_node_is(pr, OQ_OP_MatMul) || oq_node_is(pr, OQ_OP_Gemm)) {
		int out = pr->op == OQ_OP_Gemm && oq_node_attr_int(pr, "transB", 0) ? 0 : 1;
		if (!W || W->rank != 2)
			return no(p, "%s '%s' has no constant 2-D float weight", pr->op_type, pr->name);
		if ((size_t)W->dims[out] != p->C)
			return no(p, "%s '%s' writes %lld channels, not %zu", pr->op_type, pr->name,
				  (long long)W->dims[out], p->C);
		if (pr->op == OQ_OP_Gemm && pr->n_inputs > 2 && pr->inputs[2] &&
		    (!(B = fconst(g, pr, 2)) || !last_axis_vector(B, p->C)))
			return no(p, "Gemm '%s' has a C that is not a float constant of one value per output channel",
				  pr->name);
		if (!grid_follows_rows(plans, np, pr, out))
			return no(p, "%s '%s' has a per-tensor or fixed grid, which the scales would change", pr->op_type,
				  pr->name);
		st->kind = OQ_AWQ_ROWS;
	} else {
		const oq_tensor *sc = fconst(g, pr, 1);
		B = fconst(g, pr, 2);
		if (oq_node_attr_int(pr, "axis", -1) != -1 || !sc || sc->nelem != p->C || !last_axis_vector(sc, p->C) ||
		    (pr->n_inputs > 2 && pr->inputs[2] && (!B || B->nelem != p->C || !last_axis_vector(B, p->C))))
			return no(p, "LayerNormalization '%s' is not over the last axis with constant Scale and B of %zu "
				  "values", pr->name, p->C);
		if (more_outputs_used(pr))
			return no(p, "LayerNormalization '%s' has more outputs in use", pr->name);
		st->kind = OQ_AWQ_NORM;
	}
	st->node = pr;
	p->n++;
	return 1;
}

int oq_awq_path_of(const oq_graph *g, const oq_node *n, const oq_wplan *plans, size_t np, oq_awq_path *p)
{
	const oq_tensor *W = fconst(g, n, 1);
	const oq_node *user = n;
	oq_value *v;
	int sure = 1;

	memset(p, 0, sizeof *p);
	if (!W || W->rank < 2)
		return no(p, "its weight is not a float constant");
	if (oq_node_is(n, OQ_OP_Conv)) {
		if (oq_node_attr_int(n, "group", 1) != 1)
			return no(p, "a grouped Conv");
		p->C = (size_t)W->dims[1];
		p->tail = W->rank - 1;
	} else if (oq_node_is(n, OQ_OP_MatMul) && W->rank == 2) {
		p->C = (size_t)W->dims[0];
		p->tail = 1;
	} else if (oq_node_is(n, OQ_OP_Gemm) && W->rank == 2) {
		if (oq_node_attr_int(n, "transA", 0))
			return no(p, "Gemm with transA");
		p->C = (size_t)W->dims[oq_node_attr_int(n, "transB", 0) ? 1 : 0];
		p->tail = 1;
	} else {
		return no(p, "not a Conv, a MatMul or a Gemm with a 2-D weight");
	}
	for (v = n->n_inputs ? n->inputs[0] : NULL;;) {
		oq_node *pr;
		oq_awq_site *st;
		if (!v)
			return no(p, "no input");
		if (!oq_value_is_private(v))
			return no(p, "'%s' is a graph input or output", v->name);
		if (v->init)
			return no(p, "'%s' is a constant", v->name);
		if (!sole_reader(v, user))
			return no(p, "'%s' has other readers", v->name);
		if (!(pr = v->producer) || pr->dead)
			return no(p, "'%s' has no producer", v->name);
		if (p->n == OQ_AWQ_CHAIN)
			return no(p, "more than %d nodes before a node that ends the path", OQ_AWQ_CHAIN);
		st = &p->site[p->n];
		if (oq_node_is(pr, OQ_OP_Add) || oq_node_is(pr, OQ_OP_Sub) || oq_node_is(pr, OQ_OP_Mul) ||
		    oq_node_is(pr, OQ_OP_Div)) {
			const oq_tensor *c0, *c1, *t;
			size_t k;
			int spread;
			if (pr->n_inputs != 2 || !pr->inputs[0] || !pr->inputs[1])
				return no(p, "%s '%s' does not have two operands", pr->op_type, pr->name);
			c0 = fconst(g, pr, 0);
			c1 = fconst(g, pr, 1);
			if (!c0 == !c1)
				return no(p, "%s '%s' has %s constant operand", pr->op_type, pr->name, c0 ? "more than one" : "no");
			k = c0 ? 0 : 1;
			t = c0 ? c0 : c1;
			if (pr->op == OQ_OP_Div && k == 0)
				return no(p, "Div '%s' divides a constant by the value", pr->name);
			if (!channel_const(p, t, sure, &st->rank, &spread, pr))
				return 0;
			st->node = pr;
			st->kind = pr->op == OQ_OP_Div ? OQ_AWQ_MUL_CONST : OQ_AWQ_DIV_CONST;
			st->idx = k;
			p->n++;
			if (pr->op == OQ_OP_Mul || pr->op == OQ_OP_Div)
				return 1;
			/* the other operand may broadcast along the channels where t did not */
			sure = sure && !spread;
			user = pr;
			v = pr->inputs[1 - k];
			continue;
		}
		if (p->tail > 1 && (oq_node_is(pr, OQ_OP_Conv) || oq_node_is(pr, OQ_OP_ConvTranspose) ||
				    oq_node_is(pr, OQ_OP_BatchNormalization)))
			return conv_producer(g, pr, plans, np, p);
		if (p->tail == 1 && (oq_node_is(pr, OQ_OP_MatMul) || oq_node_is(pr, OQ_OP_Gemm) ||
				     oq_node_is(pr, OQ_OP_LayerNormalization)))
			return row_producer(g, pr, plans, np, p);
		return no(p, "'%s' is written by %s '%s'", v->name, pr->op_type, pr->name);
	}
}

/* ------------------------------------------------------------ applying */

/* Stores f (dims of t, or rank / dims) as input i of n, keeping a tensor type declared on it current. */
static int store(oq_graph *g, oq_node *n, size_t i, int rank, const int64_t *dims, const float *f)
{
	int rc = oq_pass_set_const(g, n, i, n->inputs[i]->name, rank, dims, f);
	oq_value *v = n->inputs[i];
	if (!rc && v->type.kind == OQ_TYPE_TENSOR)
		rc = oq_value_set_type(v, OQ_DT_FLOAT, v->init->rank, v->init->dims);
	return rc;
}

/* Output channel of element e of producer pr's weight W. */
static size_t out_channel(const oq_node *pr, const oq_tensor *W, size_t e)
{
	size_t inner = W->nelem / (size_t)(W->dims[0] * W->dims[1]);
	if (pr->op == OQ_OP_Conv)
		return e / ((size_t)W->dims[1] * inner);
	if (pr->op == OQ_OP_ConvTranspose) /* group 1 */
		return (e / inner) % (size_t)W->dims[1];
	/* MatMul [K, N], Gemm [K, N] or transB [N, K] */
	return pr->op == OQ_OP_Gemm && oq_node_attr_int(pr, "transB", 0) ? e / (size_t)W->dims[1]
									 : e % (size_t)W->dims[1];
}

/* Input i of n (a float constant of C values, or one value when bcast) divided by s, per channel. */
static int divide_vector(oq_graph *g, oq_node *n, size_t i, const float *s, size_t C, oq_diag *d)
{
	const oq_tensor *t = fconst(g, n, i);
	float *f = t ? oq_tensor_to_floats(t) : NULL, *o = NULL;
	int64_t dim = (int64_t)C;
	int rc;

	if (!f || !(o = oq_malloc(C * sizeof *o))) {
		free(f);
		return oq_err(d, OQ_ENOMEM, "awq: out of memory");
	}
	for (size_t c = 0; c < C; c++)
		o[c] = (float)((double)f[t->nelem == C ? c : 0] / (double)s[c]);
	/* one value or C: the same rank, C on the last axis */
	if (t->rank == 0) {
		rc = store(g, n, i, 1, &dim, o);
	} else {
		int64_t *dims = oq_malloc((size_t)t->rank * sizeof *dims);
		if (!dims) {
			free(f);
			free(o);
			return oq_err(d, OQ_ENOMEM, "awq: out of memory");
		}
		memcpy(dims, t->dims, (size_t)t->rank * sizeof *dims);
		dims[t->rank - 1] = dim;
		rc = store(g, n, i, t->rank, dims, o);
		free(dims);
	}
	free(f);
	free(o);
	return rc ? oq_err(d, rc, "awq: node '%s': out of memory", n->name) : OQ_OK;
}

/* Site st of path p takes the division by s. */
static int apply_site(oq_graph *g, const oq_awq_path *p, const oq_awq_site *st, const float *s, oq_diag *d)
{
	oq_node *pr = st->node;
	size_t C = p->C;
	int rc = OQ_OK;

	if (st->kind == OQ_AWQ_DIV_CONST || st->kind == OQ_AWQ_MUL_CONST) {
		const oq_tensor *t = fconst(g, pr, st->idx);
		float *f = t ? oq_tensor_to_floats(t) : NULL, *o = NULL;
		int64_t *dims = oq_malloc((size_t)st->rank * sizeof *dims);
		if (!f || !dims || !(o = oq_malloc(C * sizeof *o))) {
			rc = oq_err(d, OQ_ENOMEM, "awq: out of memory");
		} else {
			for (int i = 0; i < st->rank; i++)
				dims[i] = i == st->rank - p->tail ? (int64_t)C : 1;
			for (size_t c = 0; c < C; c++) {
				double v = f[t->nelem == C ? c : 0];
				o[c] = (float)(st->kind == OQ_AWQ_MUL_CONST ? v * (double)s[c] : v / (double)s[c]);
			}
			if ((rc = store(g, pr, st->idx, st->rank, dims, o)))
				rc = oq_err(d, rc, "awq: node '%s': out of memory", pr->name);
		}
		free(f);
		free(dims);
		free(o);
		return rc;
	}
	if (st->kind == OQ_AWQ_ROWS) {
		const oq_tensor *W = fconst(g, pr, 1);
		float *f = W ? oq_tensor_to_floats(W) : NULL;
		if (!f)
			return oq_err(d, OQ_ENOMEM, "awq: out of memory");
		for (size_t e = 0; e < W->nelem; e++)
			f[e] = (float)((double)f[e] / (double)s[out_channel(pr, W, e)]);
		rc = store(g, pr, 1, W->rank, W->dims, f);
		free(f);
		if (rc)
			return oq_err(d, rc, "awq: node '%s': out of memory", pr->name);
		if (pr->n_inputs > 2 && pr->inputs[2])
			return divide_vector(g, pr, 2, s, C, d);
		return OQ_OK;
	}
	/* BatchNormalization: scale, B; LayerNormalization: Scale, B (optional) */
	if ((rc = divide_vector(g, pr, 1, s, C, d)))
		return rc;
	return pr->n_inputs > 2 && pr->inputs[2] ? divide_vector(g, pr, 2, s, C, d) : OQ_OK;
}

int oq_awq_apply(oq_graph *g, oq_node *n, const oq_awq_path *p, const float *s, oq_diag *d)
{
	const oq_tensor *W = fconst(g, n, 1);
	float *f = W ? oq_tensor_to_floats(W) : NULL;
	int rc;

	if (!f)
		return oq_err(d, OQ_ENOMEM, "awq: out of memory");
	for (size_t e = 0; e < W->nelem; e++) {
		size_t c;
		if (n->op == OQ_OP_Conv) /* [M, C, k...] */
			c = (e / (W->nelem / ((size_t)W->dims[0] * p->C))) % p->C;
		else if (n->op == OQ_OP_Gemm && oq_node_attr_int(n, "transB", 0)) /* [N, K] */
			c = e % p->C;
		else /* [K, N] */
			c = e / (size_t)W->dims[1];
		f[e] = (float)((double)f[e] * (double)s[c]);
	}
	rc = store(g, n, 1, W->rank, W->dims, f);
	free(f);
	if (rc)
		return oq_err(d, rc, "awq: node '%s': out of memory", n->name);
	for (size_t i = 0; i < p->n && !rc; i++)
		rc = apply_site(g, p, &p->site[i], s, d);
	if (!rc && (rc = oq_graph_rebuild_uses(g)))
		rc = oq_err(d, rc, "awq: out of memory");
	return rc;
}
