/*
 * decision.c - decision-safe placement: values whose quantization would
 * change a discrete decision stay float.
 *
 *   a = MaxPool(s); s = Sigmoid(z); peaks = Equal(a, s)   ==>  z, s, a float
 *
 * Rounding to a grid turns near-equal values into ties, so the inputs of a
 * comparison or selection - Equal, Less, Greater, LessOrEqual,
 * GreaterOrEqual (both inputs), ArgMax, ArgMin, TopK (the data),
 * NonMaxSuppression (boxes and scores) - get no Q/DQ, and neither does
 * anything the decision reads through an order-preserving chain from the
 * same tensor: walking back from each such input through ops that keep or
 * only select values (Sigmoid, Tanh, Relu, LeakyRelu, Clip, Exp, Log,
 * Softmax, Neg, Cast, Identity, Reshape, Transpose, Squeeze, Unsqueeze,
 * Flatten, Slice, Gather, Concat, Split, Resize, MaxPool, GlobalMaxPool,
 * ReduceMax, ReduceMin, and Add / Sub / Mul / Div with a constant), every
 * value on the way stays float; the walk stops at the first other op (a
 * Conv's output on the chain stays float, its input is not the decision's
 * business). The condition of Where / If is a boolean and never quantized;
 * the comparison computing it is covered above. A Cast of a boolean (the
 * output of a comparison or logic op, or a value declared bool) is not
 * quantized either: it is a mask, 0 or 1 exactly.
 */
#include "passes/pass.h"

#include <stdlib.h>

/* Inputs whose values a decision op compares: bit k = input k. */
static unsigned decision_inputs(const oq_node *n)
{
	switch (n->op) {
	case OQ_OP_Equal:
	case OQ_OP_Less:
	case OQ_OP_Greater:
	case OQ_OP_LessOrEqual:
	case OQ_OP_GreaterOrEqual: return 3;
	case OQ_OP_ArgMax:
	case OQ_OP_ArgMin:
	case OQ_OP_TopK: return 1;
	case OQ_OP_NonMaxSuppression: return 3;
	default: return 0;
	}
}

/* Ops through which order (and ties) carry over from input to output. */
static int order_preserving(const oq_graph *g, const oq_node *n)
{
	switch (n->op) {
	case OQ_OP_Sigmoid: case OQ_OP_Tanh: case OQ_OP_Relu: case OQ_OP_LeakyRelu: case OQ_OP_Clip:
	case OQ_OP_Exp: case OQ_OP_Log: case OQ_OP_Softmax: case OQ_OP_Neg: case OQ_OP_Cast:
	case OQ_OP_Identity: case OQ_OP_Reshape: case OQ_OP_Transpose: case OQ_OP_Squeeze:
	case OQ_OP_Unsqueeze: case OQ_OP_Flatten: case OQ_OP_Slice: case OQ_OP_Gather: case OQ_OP_Concat:
	case OQ_OP_Split: case OQ_OP_Resize: case OQ_OP_MaxPool: case OQ_OP_GlobalMaxPool:
	case OQ_OP_ReduceMax: case OQ_OP_ReduceMin:
		return 1;
	case OQ_OP_Add: case OQ_OP_Sub: case OQ_OP_Mul: case OQ_OP_Div:
		return n->n_inputs == 2 && (oq_value_const(g, n->inputs[0]) || oq_value_const(g, n->inputs[1]));
	default:
		return 0;
	}
}

/* The data inputs an order-preserving op carries order from (not shapes, indices, bounds). */
static int carries(const oq_graph *g, const oq_node *n, size_t k)
{
	const oq_value *v = n->inputs[k];
	if (!v || oq_value_const(g, v))
		return 0;
	if (n->op == OQ_OP_Concat)
		return 1;
	return k == 0 || ((n->op == OQ_OP_Add || n->op == OQ_OP_Mul || n->op == OQ_OP_Sub || n->op == OQ_OP_Div) &&
			  k == 1);
}

static int is_boolean(const oq_value *v)
{
	const oq_node *p = v ? v->producer : NULL;
	if (!v)
		return 0;
	if (v->type.kind == OQ_TYPE_TENSOR && v->type.dtype == OQ_DT_BOOL)
		return 1;
	if (!p)
		return 0;
	switch (p->op) {
	case OQ_OP_Equal: case OQ_OP_Less: case OQ_OP_Greater: case OQ_OP_LessOrEqual:
	case OQ_OP_GreaterOrEqual: case OQ_OP_Not: case OQ_OP_And: case OQ_OP_Or: case OQ_OP_Xor:
	case OQ_OP_IsNaN: case OQ_OP_IsInf:
		return 1;
	default:
		return 0;
	}
}

/* Marks v and walks back through its order-preserving producers. */
static size_t walk(const oq_graph *g, oq_value *v, const oq_node *why, uint8_t *keep, FILE *log)
{
	size_t n = 0;
	oq_node *p;
	if (!v || v->graph != g || v->init || keep[v->index])
		return 0;
	keep[v->index] = 1;
	n++;
	if (log)
		fprintf(log, "quantize: tensor '%s' kept float: %s '%s' (%s) decides on it\n", v->name,
			decision_inputs(why) ? "the comparison/selection" : "its order reaches", why->name,
			why->op_type);
	p = v->producer;
	if (!p || !order_preserving(g, p))
		return n;
	for (size_t k = 0; k < p->n_inputs; k++)
		if (carries(g, p, k))
			n += walk(g, p->inputs[k], why, keep, log);
	return n;
}

size_t oq_decision_safe_values(const oq_graph *g, uint8_t *keep, FILE *log)
{
	size_t n = 0;
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *d = g->nodes[i];
		unsigned in = decision_inputs(d);
		if (d->dead)
			continue;
		for (size_t k = 0; k < d->n_inputs && k < 32; k++)
			if ((in >> k) & 1u)
				n += walk(g, d->inputs[k], d, keep, log);
		if (d->op == OQ_OP_Cast && d->n_inputs && is_boolean(d->inputs[0]) && d->n_outputs &&
		    d->outputs[0] && !keep[d->outputs[0]->index]) {
			keep[d->outputs[0]->index] = 1;
			n++;
			if (log)
				fprintf(log, "quantize: tensor '%s' kept float: a Cast of a boolean (a 0/1 mask)\n",
					d->outputs[0]->name);
		}
	}
	return n;
}
