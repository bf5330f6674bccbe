/*
 * inspect.c - the `onnxq inspect` report.
 *
 * One read-only walk over the model gathers the facts into a `report`
 * (gather), then one of two writers prints it: aligned text for people or
 * one JSON object with stable keys for scripts. The walk visits the main
 * graph and every subgraph (If/Loop/Scan bodies, at any depth) through an
 * explicit work list, so deep nesting costs no stack.
 *
 * What the report counts and why:
 * - Graph inputs that also have an initializer are parameters with a
 *   default (IR < 4 exporters list every weight as an input), not inputs a
 *   user feeds: they are left out of the input list and only counted.
 * - The op census keys nodes by (domain, op_type); "" and "ai.onnx" are the
 *   same domain. Other domains print as `domain::op_type`.
 * - Parameters are the initializers of every graph; tensors held in
 *   Constant nodes (value, value_float(s), value_int(s), value_string(s),
 *   sparse_value) are counted apart, because a quantizer treats them alike
 *   but a user reads "initializers" as the weights of the file.
 * - Q/DQ granularity follows ONNX's QuantizeLinear/DequantizeLinear rules:
 *   `block_size` > 0 is blockwise; otherwise a scale of one element is
 *   per-tensor and a 1-D scale of more is per-axis along `axis` (default 1,
 *   reported as written). The scale's shape comes from its initializer, a
 *   Constant producer or its declared type, in that order; when none is
 *   known the granularity is "unknown". The quantized type is the zero
 *   point's type; without a zero point, Q uses `output_dtype` or uint8 (the
 *   spec's default) and DQ the type of its input x.
 * Nothing here trusts the model: missing types, inputs or attributes print
 * as '?', never crash.
 */
#include "src/report/inspect.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Granularity of one Q/DQ node. */
enum { G_TENSOR, G_CHANNEL, G_BLOCK, G_UNKNOWN, G_COUNT };
static const char *const gran_text[G_COUNT] = {"per-tensor", "per-channel", "blockwise", "unknown"};
static const char *const gran_json[G_COUNT] = {"per_tensor", "per_channel", "blockwise", "unknown"};

/* Totals of a set of tensors for one element type. */
typedef struct tacc {
	size_t count;        /* tensors */
	size_t elems;        /* elements (saturating) */
	size_t bytes;        /* payload bytes (saturating) */
} tacc;

/* Per-dtype totals; slot 0 collects unknown or invalid element types. */
typedef struct tsum {
	tacc by[OQ_DT_COUNT];
	tacc all;
	size_t external;     /* tensors whose payload is in an external data file */
} tsum;

/* One row of the op census. */
typedef struct census {
	char *label;         /* "Conv" or "com.microsoft::QLinearConv" (owned) */
	size_t count;
} census;

/* One QuantizeLinear or DequantizeLinear node. */
typedef struct qnode {
	const oq_node *n;
	int is_q;            /* 1 QuantizeLinear, 0 DequantizeLinear */
	int gran;            /* G_* */
	int64_t axis;        /* per-channel and blockwise: `axis` as written (default 1) */
	int64_t block;       /* blockwise: block_size */
	int dtype;           /* quantized element type, 0 when unknown */
	int in_sub;          /* node lives in a subgraph */
} qnode;

/* Everything the writers print. */
typedef struct report {
	const oq_model *m;
	const oq_graph **graphs; /* main graph first, then every subgraph */
	size_t n_graphs, cap_graphs;
	size_t n_nodes;          /* all graphs */
	size_t n_sub_nodes;      /* nodes inside subgraphs */
	size_t n_init_inputs;    /* main-graph inputs backed by an initializer */
	census *ops;
	size_t n_ops;
	tsum inits;              /* initializers of all graphs */
	tsum consts;             /* tensors held by Constant nodes */
	size_t n_sparse;         /* sparse initializers of all graphs */
	qnode *q;
	size_t n_q;
	size_t n_qops[2];        /* [0] DequantizeLinear, [1] QuantizeLinear */
	size_t by_gran[G_COUNT];
	size_t by_qtype[OQ_DT_COUNT]; /* slot 0: unknown */
	size_t n_qweights;       /* distinct quantized initializers (integer, 8/4-bit float) feeding a DQ's x */
	size_t qweight_bytes;
} report;

static void sat_add(size_t *acc, size_t v)
{
	if (!oq_add_size(*acc, v, acc))
		*acc = SIZE_MAX;
}

static int is_default_domain(const char *d)
{
	return oq_domain_of(d) == OQ_DOM_ONNX;
}

static const char *dtname(int dt)
{
	return oq_dtype_valid(dt) ? oq_dtype_name(dt) : "?";
}

static const char *str_or(const char *s, const char *dflt)
{
	return s ? s : dflt;
}

/* ---- gathering ---- */

static int add_graph(report *r, const oq_graph *g)
{
	if (!g)
		return OQ_OK;
	if (oq_grow(&r->graphs, &r->cap_graphs, r->n_graphs + 1, sizeof *r->graphs))
		return OQ_ENOMEM;
	r->graphs[r->n_graphs++] = g;
	return OQ_OK;
}

/* Appends the subgraphs held by g's node attributes to the work list. */
static int add_subgraphs(report *r, const oq_graph *g)
{
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		for (size_t k = 0; n && k < n->n_attrs; k++) {
			const oq_attr *a = &n->attrs[k];
			if (a->g && add_graph(r, a->g))
				return OQ_ENOMEM;
			if (a->graphs)
				for (size_t j = 0; j < a->n; j++)
					if (add_graph(r, a->graphs[j]))
						return OQ_ENOMEM;
		}
	}
	return OQ_OK;
}

static void tsum_add(tsum *s, int dtype, size_t elems, size_t bytes, int external)
{
	tacc *a = &s->by[oq_dtype_valid(dtype) ? dtype : 0];
	a->count++;
	sat_add(&a->elems, elems);
	sat_add(&a->bytes, bytes);
	s->all.count++;
	sat_add(&s->all.elems, elems);
	sat_add(&s->all.bytes, bytes);
	if (external)
		s->external++;
}

/* Bytes of a tensor: payload, or the string lengths for STRING tensors. */
static size_t tensor_bytes(const oq_tensor *t)
{
	size_t b = t->nbytes;
	if (t->dtype == OQ_DT_STRING && t->strs)
		for (size_t i = 0; i < t->nelem; i++)
			sat_add(&b, t->strs[i].len);
	return b;
}

static void tsum_tensor(tsum *s, const oq_tensor *t)
{
	if (t)
		tsum_add(s, t->dtype, t->nelem, tensor_bytes(t), t->external);
}

/* Adds the tensors a Constant node holds to r->consts. */
static void count_constant(report *r, const oq_node *n)
{
	for (size_t k = 0; k < n->n_attrs; k++) {
		const oq_attr *a = &n->attrs[k];
		size_t bytes = 0;
		if (!a->name)
			continue;
		if (!strcmp(a->name, "value") && a->type == OQ_ATTR_TENSOR && a->t)
			tsum_tensor(&r->consts, a->t);
		else if (!strcmp(a->name, "sparse_value") && a->type == OQ_ATTR_SPARSE_TENSOR && a->sp &&
			 a->sp->values)
			tsum_tensor(&r->consts, a->sp->values);
		else if (!strcmp(a->name, "value_float") && a->type == OQ_ATTR_FLOAT)
			tsum_add(&r->consts, OQ_DT_FLOAT, 1, 4, 0);
		else if (!strcmp(a->name, "value_int") && a->type == OQ_ATTR_INT)
			tsum_add(&r->consts, OQ_DT_INT64, 1, 8, 0);
		else if (!strcmp(a->name, "value_string") && a->type == OQ_ATTR_STRING)
			tsum_add(&r->consts, OQ_DT_STRING, 1, a->s.len, 0);
		else if (!strcmp(a->name, "value_floats") && a->type == OQ_ATTR_FLOATS)
			tsum_add(&r->consts, OQ_DT_FLOAT, a->n, oq_mul_size(a->n, 4, &bytes) ? bytes : SIZE_MAX, 0);
		else if (!strcmp(a->name, "value_ints") && a->type == OQ_ATTR_INTS)
			tsum_add(&r->consts, OQ_DT_INT64, a->n, oq_mul_size(a->n, 8, &bytes) ? bytes : SIZE_MAX, 0);
		else if (!strcmp(a->name, "value_strings") && a->type == OQ_ATTR_STRINGS) {
			for (size_t i = 0; i < a->n; i++)
				sat_add(&bytes, a->strings[i].len);
			tsum_add(&r->consts, OQ_DT_STRING, a->n, bytes, 0);
		}
	}
}

/* Follows outer links to the defining value (bounded: a malformed cycle ends). */
static const oq_value *resolve(const oq_value *v)
{
	for (int i = 0; v && (v->flags & OQ_V_OUTER) && v->outer && i < 4096; i++)
		v = v->outer;
	return v;
}

/* What is known about a value's element type and shape. */
typedef struct vshape {
	int dtype;           /* 0 when unknown */
	int rank;            /* -1 when unknown */
	size_t nelem;        /* valid when has_nelem */
	int has_nelem;
	const oq_tensor *t;  /* the constant tensor, when the value is one */
} vshape;

/*
 * Element type and shape of v: its initializer, its Constant producer, then
 * its declared type; a Cast producer gives the element type alone.
 */
static vshape shape_of(const oq_value *v)
{
	vshape s = {0, -1, 0, 0, NULL};

	v = resolve(v);
	if (!v)
		return s;
	if (v->init) {
		s.t = v->init;
	} else if (v->producer && v->producer->op == OQ_OP_Constant) {
		const oq_node *c = v->producer;
		for (size_t k = 0; k < c->n_attrs; k++) {
			const oq_attr *a = &c->attrs[k];
			if (!a->name)
				continue;
			if (!strcmp(a->name, "value") && a->type == OQ_ATTR_TENSOR && a->t) {
				s.t = a->t;
			} else if ((!strcmp(a->name, "value_float") && a->type == OQ_ATTR_FLOAT) ||
				   (!strcmp(a->name, "value_int") && a->type == OQ_ATTR_INT)) {
				s.dtype = a->type == OQ_ATTR_FLOAT ? OQ_DT_FLOAT : OQ_DT_INT64;
				s.rank = 0;
				s.nelem = 1;
				s.has_nelem = 1;
				return s;
			} else if ((!strcmp(a->name, "value_floats") && a->type == OQ_ATTR_FLOATS) ||
				   (!strcmp(a->name, "value_ints") && a->type == OQ_ATTR_INTS)) {
				s.dtype = a->type == OQ_ATTR_FLOATS ? OQ_DT_FLOAT : OQ_DT_INT64;
				s.rank = 1;
				s.nelem = a->n;
				s.has_nelem = 1;
				return s;
			}
		}
	}
	if (s.t) {
		s.dtype = s.t->dtype;
		s.rank = s.t->rank;
		s.nelem = s.t->nelem;
		s.has_nelem = 1;
		return s;
	}
	if (v->type.kind == OQ_TYPE_TENSOR) {
		s.dtype = v->type.dtype;
		s.rank = v->type.rank;
		if (s.rank >= 0 && v->type.dims) {
			size_t ne = 1;
			s.has_nelem = 1;
			for (int i = 0; i < s.rank; i++) {
				int64_t d = v->type.dims[i].value;
				if (d < 0 || (uint64_t)d > SIZE_MAX || !oq_mul_size(ne, (size_t)d, &ne)) {
					s.has_nelem = 0;
					break;
				}
			}
			s.nelem = ne;
		} else if (s.rank == 0) {
			s.nelem = 1;
			s.has_nelem = 1;
		}
	}
	/* An untyped Cast output still has the element type of its `to`. */
	if (!oq_dtype_valid(s.dtype) && v->producer && v->producer->op == OQ_OP_Cast) {
		int64_t to = oq_node_attr_int(v->producer, "to", 0);
		s.dtype = to > 0 && to < OQ_DT_COUNT ? (int)to : 0;
	}
	return s;
}

static const oq_value *input_at(const oq_node *n, size_t i)
{
	return i < n->n_inputs ? n->inputs[i] : NULL;
}

/* Is n a QuantizeLinear (1) or DequantizeLinear (0) of ai.onnx or com.microsoft? -1 otherwise. */
static int qdq_kind(const oq_node *n)
{
	if (!is_default_domain(n->domain) && strcmp(n->domain, "com.microsoft") != 0)
		return -1;
	if (!strcmp(n->op_type, "QuantizeLinear"))
		return 1;
	if (!strcmp(n->op_type, "DequantizeLinear"))
		return 0;
	return -1;
}

static void classify(report *r, const oq_node *n, int is_q, int in_sub)
{
	qnode *q = &r->q[r->n_q++];
	vshape sc = shape_of(input_at(n, 1));
	const oq_value *zp = input_at(n, 2);
	int64_t block = oq_node_attr_int(n, "block_size", 0);

	q->n = n;
	q->is_q = is_q;
	q->in_sub = in_sub;
	q->axis = oq_node_attr_int(n, "axis", 1);
	q->block = 0;
	if (block > 0) {
		q->gran = G_BLOCK;
		q->block = block;
	} else if (sc.has_nelem && sc.nelem == 1) {
		q->gran = G_TENSOR;
	} else if (sc.rank == 1 && sc.has_nelem && sc.nelem > 1) {
		q->gran = G_CHANNEL;
	} else {
		q->gran = G_UNKNOWN;
	}
	if (zp) {
		q->dtype = shape_of(zp).dtype;
	} else if (is_q) {
		int64_t od = oq_node_attr_int(n, "output_dtype", 0);
		q->dtype = od > 0 ? (int)(od < OQ_DT_COUNT ? od : 0) : OQ_DT_UINT8;
	} else {
		q->dtype = shape_of(input_at(n, 0)).dtype;
	}
	if (!oq_dtype_valid(q->dtype))
		q->dtype = 0;
	r->n_qops[is_q]++;
	r->by_gran[q->gran]++;
	r->by_qtype[q->dtype]++;
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
	return x < y ? -1 : x > y;
}

static int cmp_node_op(const void *a, const void *b)
{
	const oq_node *x = *(const oq_node *const *)a, *y = *(const oq_node *const *)b;
	const char *dx = is_default_domain(x->domain) ? "" : x->domain;
	const char *dy = is_default_domain(y->domain) ? "" : y->domain;
	int c = strcmp(dx, dy);
	return c ? c : strcmp(x->op_type, y->op_type);
}

static int cmp_census(const void *a, const void *b)
{
	const census *x = a, *y = b;
	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return strcmp(x->label, y->label);
}

static char *op_label(const oq_node *n)
{
	size_t ld, lo, len;
	char *s;

	if (is_default_domain(n->domain))
		return oq_strdup(n->op_type);
	ld = strlen(n->domain);
	lo = strlen(n->op_type);
	if (!oq_add_size(ld, lo, &len) || !oq_add_size(len, 3, &len))
		return NULL;
	if (!(s = malloc(len)))
		return NULL;
	memcpy(s, n->domain, ld);
	memcpy(s + ld, "::", 2);
	memcpy(s + ld + 2, n->op_type, lo + 1);
	return s;
}

/* Builds the census from all nodes: sort by (domain, op_type), count runs, sort runs. */
static int build_census(report *r, const oq_node **all, size_t n)
{
	size_t runs = 0;

	qsort(all, n, sizeof *all, cmp_node_op);
	for (size_t i = 0; i < n; i++)
		if (i == 0 || cmp_node_op(&all[i - 1], &all[i]))
			runs++;
	if (!(r->ops = oq_calloc(runs, sizeof *r->ops)))
		return OQ_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (i == 0 || cmp_node_op(&all[i - 1], &all[i])) {
			if (!(r->ops[r->n_ops].label = op_label(all[i])))
				return OQ_ENOMEM;
			r->n_ops++;
		}
		r->ops[r->n_ops - 1].count++;
	}
	qsort(r->ops, r->n_ops, sizeof *r->ops, cmp_census);
	return OQ_OK;
}

static int gather(report *r, const oq_model *m)
{
	const oq_node **all = NULL;
	const oq_tensor **w = NULL;
	size_t n_all = 0, n_w = 0, n_q = 0;
	int rc = OQ_ENOMEM;

	r->m = m;
	if (add_graph(r, m->graph))
		goto fail;
	/* The list grows while we walk it: breadth-first over all nesting levels. */
	for (size_t gi = 0; gi < r->n_graphs; gi++) {
		const oq_graph *g = r->graphs[gi];
		if (add_subgraphs(r, g))
			goto fail;
		sat_add(&r->n_nodes, g->n_nodes);
		if (gi > 0)
			sat_add(&r->n_sub_nodes, g->n_nodes);
		for (size_t i = 0; i < g->n_inits; i++)
			if (g->inits[i])
				tsum_tensor(&r->inits, g->inits[i]->init);
		sat_add(&r->n_sparse, g->n_sparse);
		for (size_t i = 0; i < g->n_nodes; i++)
			if (g->nodes[i] && qdq_kind(g->nodes[i]) >= 0)
				n_q++;
	}
	if (m->graph)
		for (size_t i = 0; i < m->graph->n_inputs; i++)
			if (m->graph->inputs[i] && m->graph->inputs[i]->init)
				r->n_init_inputs++;

	if (!(all = oq_calloc(r->n_nodes, sizeof *all)) || !(r->q = oq_calloc(n_q, sizeof *r->q)) ||
	    !(w = oq_calloc(n_q, sizeof *w)))
		goto fail;
	for (size_t gi = 0; gi < r->n_graphs; gi++) {
		const oq_graph *g = r->graphs[gi];
		for (size_t i = 0; i < g->n_nodes; i++) {
			const oq_node *n = g->nodes[i];
			int k;
			if (!n)
				continue;
			all[n_all++] = n;
			if (n->op == OQ_OP_Constant)
				count_constant(r, n);
			if ((k = qdq_kind(n)) < 0)
				continue;
			classify(r, n, k, gi > 0);
			if (k == 0) {
				const oq_value *x = resolve(input_at(n, 0));
				/* a stored quantized weight: integer, or a float type narrower than 16 bits
				 * (float8 weights of --weight-type float8e4m3fn, float4e2m1) */
				int dt = x && x->init ? x->init->dtype : 0;
				char kind = dt ? oq_dtype_kind(dt) : '-';
				if (kind == 's' || kind == 'u' || (kind == 'f' && oq_dtype_bits(dt) < 16))
					w[n_w++] = x->init;
			}
		}
	}
	if ((rc = build_census(r, all, n_all)))
		goto fail;
	/* A weight shared by several DQ nodes counts once. */
	qsort(w, n_w, sizeof *w, cmp_ptr);
	for (size_t i = 0; i < n_w; i++) {
		if (i > 0 && w[i] == w[i - 1])
			continue;
		r->n_qweights++;
		sat_add(&r->qweight_bytes, w[i]->nbytes);
	}
	rc = OQ_OK;
fail:
	free(all);
	free(w);
	return rc;
}

static void report_free(report *r)
{
	for (size_t i = 0; i < r->n_ops; i++)
		free(r->ops[i].label);
	free(r->ops);
	free(r->q);
	free(r->graphs);
}

/* ---- text ---- */

/* s padded with spaces to `width` columns (bytes; names are mostly ASCII). */
static void text_pad(FILE *f, const char *s, size_t width)
{
	size_t len = s ? strlen(s) : 0;
	oq_text_str(f, s);
	for (; len < width; len++)
		fputc(' ', f);
}

static void text_shape(FILE *f, const oq_type *t)
{
	if (t->rank < 0 || (t->rank > 0 && !t->dims)) {
		fputs("unknown", f);
		return;
	}
	fputc('[', f);
	for (int i = 0; i < t->rank; i++) {
		const oq_dim *d = &t->dims[i];
		if (i)
			fputs(", ", f);
		if (d->value >= 0)
			fprintf(f, "%" PRId64, d->value);
		else if (d->param && *d->param)
			oq_text_str(f, d->param);
		else
			fputc('?', f);
	}
	fputc(']', f);
}

static const char *kind_name(int kind)
{
	switch (kind) {
	case OQ_TYPE_TENSOR: return "tensor";
	case OQ_TYPE_SEQUENCE: return "sequence";
	case OQ_TYPE_MAP: return "map";
	case OQ_TYPE_OPTIONAL: return "optional";
	case OQ_TYPE_SPARSE: return "sparse_tensor";
	case OQ_TYPE_OTHER: return "other";
	default: return "none";
	}
}

/* The type column: dtype for tensors, "sparse float", "sequence", or '?' when untyped. */
static void text_type(FILE *f, const oq_type *t, size_t width)
{
	char buf[64];
	if (t->kind == OQ_TYPE_TENSOR)
		snprintf(buf, sizeof buf, "%s", dtname(t->dtype));
	else if (t->kind == OQ_TYPE_SPARSE)
		snprintf(buf, sizeof buf, "sparse %s", dtname(t->dtype));
	else if (t->kind == OQ_TYPE_NONE)
		snprintf(buf, sizeof buf, "?");
	else
		snprintf(buf, sizeof buf, "%s", kind_name(t->kind));
	text_pad(f, buf, width);
}

/* Width of the name column: the longest listed input or output name, at most 40. */
static size_t name_width(const oq_graph *g)
{
	size_t w = 4;
	for (size_t i = 0; i < g->n_inputs + g->n_outputs; i++) {
		const oq_value *v = i < g->n_inputs ? g->inputs[i] : g->outputs[i - g->n_inputs];
		if (v && v->name && !(i < g->n_inputs && v->init) && strlen(v->name) > w)
			w = strlen(v->name);
	}
	return w > 40 ? 40 : w;
}

static void text_values(FILE *f, oq_value *const *vs, size_t n, int skip_init, size_t wn)
{
	for (size_t i = 0; i < n; i++) {
		const oq_value *v = vs[i];
		if (!v || (skip_init && v->init))
			continue;
		fputs("  ", f);
		text_pad(f, v->name, wn);
		fputs("  ", f);
		text_type(f, &v->type, 8);
		fputs("  ", f);
		if (v->type.kind == OQ_TYPE_TENSOR || v->type.kind == OQ_TYPE_SPARSE)
			text_shape(f, &v->type);
		else
			fputs("unknown", f);
		fputc('\n', f);
	}
}

/* "12345 bytes (12.1 KiB)" */
static void text_bytes(FILE *f, size_t b)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
	double x = (double)b;
	int u = -1;
	fprintf(f, "%zu bytes", b);
	while (x >= 1024.0 && u < 3) {
		x /= 1024.0;
		u++;
	}
	if (u >= 0)
		fprintf(f, " (%.1f %s)", x, unit[u]);
}

static void text_tsum(FILE *f, const char *title, const tsum *s, int show_external)
{
	fprintf(f, "  %-13s %zu tensors, %zu elements, ", title, s->all.count, s->all.elems);
	text_bytes(f, s->all.bytes);
	if (show_external)
		fprintf(f, ", %zu external", s->external);
	fputc('\n', f);
	for (int dt = 1; dt <= OQ_DT_COUNT; dt++) {
		int slot = dt == OQ_DT_COUNT ? 0 : dt; /* unknown types last */
		const tacc *a = &s->by[slot];
		if (!a->count)
			continue;
		fprintf(f, "    %-10s %7zu tensors %12zu elements %13zu bytes\n", dtname(slot), a->count,
			a->elems, a->bytes);
	}
}

/* Text listing shows at most this many Q/DQ nodes; JSON lists them all. */
#define TEXT_MAX_QNODES 20

static void text_qnode(FILE *f, const qnode *q)
{
	fprintf(f, "    %-17s ", q->is_q ? "QuantizeLinear" : "DequantizeLinear");
	if (q->n->name && *q->n->name)
		oq_text_str(f, q->n->name);
	else
		fprintf(f, "#%zu", q->n->index);
	fprintf(f, ": %s", gran_text[q->gran]);
	if (q->gran == G_CHANNEL)
		fprintf(f, " axis=%" PRId64, q->axis);
	else if (q->gran == G_BLOCK)
		fprintf(f, " axis=%" PRId64 " block_size=%" PRId64, q->axis, q->block);
	fprintf(f, ", %s", dtname(q->dtype));
	if (!is_default_domain(q->n->domain))
		fprintf(f, ", %s", q->n->domain);
	if (q->in_sub)
		fputs(", in subgraph", f);
	fputc('\n', f);
}

static void write_text(FILE *f, const report *r)
{
	const oq_model *m = r->m;
	const oq_graph *g = m->graph;
	size_t wop = 4;

	fputs("model      ", f);
	oq_text_str(f, str_or(m->path, "?"));
	fputs("\nproducer   ", f);
	oq_text_str(f, m->producer_name && *m->producer_name ? m->producer_name : "?");
	if (m->producer_version && *m->producer_version) {
		fputc(' ', f);
		oq_text_str(f, m->producer_version);
	}
	fprintf(f, "\nir         %" PRId64 "\nopsets     ", m->ir_version);
	for (size_t i = 0; i < m->n_opsets; i++) {
		fputs(i ? ", " : "", f);
		oq_text_str(f, is_default_domain(m->opsets[i].domain) ? "ai.onnx" : m->opsets[i].domain);
		fprintf(f, " %" PRId64, m->opsets[i].version);
	}
	if (!m->n_opsets)
		fputs("none", f);
	fprintf(f, "\nfunctions  %zu\ntraining   %zu\n", m->n_functions, m->n_training);

	fprintf(f, "\ninputs (%zu", g ? g->n_inputs - r->n_init_inputs : 0);
	if (r->n_init_inputs)
		fprintf(f, "; %zu more backed by initializers, counted as parameters", r->n_init_inputs);
	fputs(")\n", f);
	if (g)
		text_values(f, g->inputs, g->n_inputs, 1, name_width(g));
	fprintf(f, "outputs (%zu)\n", g ? g->n_outputs : 0);
	if (g)
		text_values(f, g->outputs, g->n_outputs, 0, name_width(g));

	fprintf(f, "\nops        %zu nodes", r->n_nodes);
	if (r->n_graphs > 1)
		fprintf(f, " (%zu in %zu subgraphs)", r->n_sub_nodes, r->n_graphs - 1);
	fprintf(f, ", %zu op types\n", r->n_ops);
	for (size_t i = 0; i < r->n_ops; i++)
		if (strlen(r->ops[i].label) > wop)
			wop = strlen(r->ops[i].label);
	if (wop > 48)
		wop = 48;
	for (size_t i = 0; i < r->n_ops; i++) {
		fputs("  ", f);
		text_pad(f, r->ops[i].label, wop);
		fprintf(f, " %6zu\n", r->ops[i].count);
	}

	fputs("\nparameters\n", f);
	text_tsum(f, "initializers", &r->inits, 1);
	if (r->consts.all.count)
		text_tsum(f, "constants", &r->consts, 0);
	else
		fputs("  constants     none\n", f);
	if (r->n_sparse)
		fprintf(f, "  sparse        %zu sparse initializers (not counted above)\n", r->n_sparse);

	fputs("\nquantization", f);
	if (!r->n_q) {
		fputs("  none (no QuantizeLinear/DequantizeLinear nodes)\n", f);
		return;
	}
	fprintf(f, "\n  QuantizeLinear %zu, DequantizeLinear %zu\n  granularity  ", r->n_qops[1],
		r->n_qops[0]);
	for (int k = 0, first = 1; k < G_COUNT; k++) {
		if (!r->by_gran[k])
			continue;
		fprintf(f, "%s%s %zu", first ? "" : ", ", gran_text[k], r->by_gran[k]);
		first = 0;
	}
	fputs("\n  types        ", f);
	for (int dt = 1, first = 1; dt <= OQ_DT_COUNT; dt++) {
		int slot = dt == OQ_DT_COUNT ? 0 : dt;
		if (!r->by_qtype[slot])
			continue;
		fprintf(f, "%s%s %zu", first ? "" : ", ", dtname(slot), r->by_qtype[slot]);
		first = 0;
	}
	fprintf(f, "\n  weights      %zu quantized initializers feed a DequantizeLinear, ", r->n_qweights);
	text_bytes(f, r->qweight_bytes);
	fputc('\n', f);
	for (size_t i = 0; i < r->n_q && i < TEXT_MAX_QNODES; i++)
		text_qnode(f, &r->q[i]);
	if (r->n_q > TEXT_MAX_QNODES)
		fprintf(f, "    ... %zu more (see --json)\n", r->n_q - TEXT_MAX_QNODES);
}

/* ---- JSON ---- */

static void json_shape(FILE *f, const oq_type *t)
{
	if ((t->kind != OQ_TYPE_TENSOR && t->kind != OQ_TYPE_SPARSE) || t->rank < 0 ||
	    (t->rank > 0 && !t->dims)) {
		fputs("null", f);
		return;
	}
	fputc('[', f);
	for (int i = 0; i < t->rank; i++) {
		const oq_dim *d = &t->dims[i];
		if (i)
			fputs(", ", f);
		if (d->value >= 0)
			fprintf(f, "%" PRId64, d->value);
		else if (d->param && *d->param)
			oq_json_str(f, d->param);
		else
			fputs("null", f);
	}
	fputc(']', f);
}

static void json_values(FILE *f, oq_value *const *vs, size_t n, int skip_init)
{
	int first = 1;
	fputc('[', f);
	for (size_t i = 0; i < n; i++) {
		const oq_value *v = vs[i];
		if (!v || (skip_init && v->init))
			continue;
		fputs(first ? "{\"name\": " : ", {\"name\": ", f);
		first = 0;
		oq_json_str(f, str_or(v->name, ""));
		fprintf(f, ", \"kind\": \"%s\", \"dtype\": ", kind_name(v->type.kind));
		oq_json_str(f, v->type.kind == OQ_TYPE_TENSOR || v->type.kind == OQ_TYPE_SPARSE
				       ? dtname(v->type.dtype)
				       : "?");
		fputs(", \"shape\": ", f);
		json_shape(f, &v->type);
		fputc('}', f);
	}
	fputc(']', f);
}

static void json_tsum(FILE *f, const tsum *s, int show_external)
{
	int first = 1;
	fprintf(f, "{\"count\": %zu, \"elements\": %zu, \"bytes\": %zu, ", s->all.count, s->all.elems,
		s->all.bytes);
	if (show_external)
		fprintf(f, "\"external\": %zu, ", s->external);
	fputs("\"by_dtype\": [", f);
	for (int dt = 1; dt <= OQ_DT_COUNT; dt++) {
		int slot = dt == OQ_DT_COUNT ? 0 : dt;
		const tacc *a = &s->by[slot];
		if (!a->count)
			continue;
		fprintf(f, "%s{\"dtype\": \"%s\", \"count\": %zu, \"elements\": %zu, \"bytes\": %zu}",
			first ? "" : ", ", dtname(slot), a->count, a->elems, a->bytes);
		first = 0;
	}
	fputs("]}", f);
}

static void write_json(FILE *f, const report *r)
{
	const oq_model *m = r->m;
	const oq_graph *g = m->graph;

	fputs("{\"path\": ", f);
	if (m->path)
		oq_json_str(f, m->path);
	else
		fputs("null", f);
	fputs(", \"producer\": {\"name\": ", f);
	oq_json_str(f, str_or(m->producer_name, ""));
	fputs(", \"version\": ", f);
	oq_json_str(f, str_or(m->producer_version, ""));
	fprintf(f, "}, \"ir_version\": %" PRId64 ", \"opsets\": [", m->ir_version);
	for (size_t i = 0; i < m->n_opsets; i++) {
		fputs(i ? ", {\"domain\": " : "{\"domain\": ", f);
		oq_json_str(f, is_default_domain(m->opsets[i].domain) ? "ai.onnx" : m->opsets[i].domain);
		fprintf(f, ", \"version\": %" PRId64 "}", m->opsets[i].version);
	}
	fprintf(f, "], \"functions\": %zu, \"training_info\": %zu", m->n_functions, m->n_training);

	fputs(", \"inputs\": ", f);
	if (g)
		json_values(f, g->inputs, g->n_inputs, 1);
	else
		fputs("[]", f);
	fprintf(f, ", \"initializer_inputs\": %zu, \"outputs\": ", r->n_init_inputs);
	if (g)
		json_values(f, g->outputs, g->n_outputs, 0);
	else
		fputs("[]", f);

	fprintf(f, ", \"ops\": {\"nodes\": %zu, \"subgraph_nodes\": %zu, \"subgraphs\": %zu, \"census\": [",
		r->n_nodes, r->n_sub_nodes, r->n_graphs ? r->n_graphs - 1 : 0);
	for (size_t i = 0; i < r->n_ops; i++) {
		fputs(i ? ", {\"op\": " : "{\"op\": ", f);
		oq_json_str(f, r->ops[i].label);
		fprintf(f, ", \"count\": %zu}", r->ops[i].count);
	}
	fputs("]}, \"parameters\": {\"initializers\": ", f);
	json_tsum(f, &r->inits, 1);
	fputs(", \"constants\": ", f);
	json_tsum(f, &r->consts, 0);
	fprintf(f, ", \"sparse_initializers\": %zu}", r->n_sparse);

	fprintf(f, ", \"quantization\": {\"quantize_linear\": %zu, \"dequantize_linear\": %zu, "
		   "\"by_granularity\": {",
		r->n_qops[1], r->n_qops[0]);
	for (int k = 0; k < G_COUNT; k++)
		fprintf(f, "%s\"%s\": %zu", k ? ", " : "", gran_json[k], r->by_gran[k]);
	fputs("}, \"by_dtype\": {", f);
	for (int dt = 1, first = 1; dt <= OQ_DT_COUNT; dt++) {
		int slot = dt == OQ_DT_COUNT ? 0 : dt;
		if (!r->by_qtype[slot])
			continue;
		fprintf(f, "%s\"%s\": %zu", first ? "" : ", ", dtname(slot), r->by_qtype[slot]);
		first = 0;
	}
	fprintf(f, "}, \"weight_initializers\": %zu, \"weight_bytes\": %zu, \"nodes\": [", r->n_qweights,
		r->qweight_bytes);
	for (size_t i = 0; i < r->n_q; i++) {
		const qnode *q = &r->q[i];
		fputs(i ? ", {\"name\": " : "{\"name\": ", f);
		oq_json_str(f, str_or(q->n->name, ""));
		fprintf(f, ", \"op\": \"%s\", \"domain\": ", q->is_q ? "QuantizeLinear" : "DequantizeLinear");
		oq_json_str(f, is_default_domain(q->n->domain) ? "ai.onnx" : q->n->domain);
		fprintf(f, ", \"granularity\": \"%s\", \"axis\": ", gran_json[q->gran]);
		if (q->gran == G_CHANNEL || q->gran == G_BLOCK)
			fprintf(f, "%" PRId64, q->axis);
		else
			fputs("null", f);
		fputs(", \"block_size\": ", f);
		if (q->gran == G_BLOCK)
			fprintf(f, "%" PRId64, q->block);
		else
			fputs("null", f);
		fprintf(f, ", \"dtype\": \"%s\", \"in_subgraph\": %s}", dtname(q->dtype),
			q->in_sub ? "true" : "false");
	}
	fputs("]}}\n", f);
}

int oq_inspect_print(const oq_model *m, FILE *f, int json)
{
	report r;
	int rc;

	memset(&r, 0, sizeof r);
	if ((rc = gather(&r, m)))
		goto fail;
	if (json)
		write_json(f, &r);
	else
		write_text(f, &r);
	rc = (fflush(f) != 0 || ferror(f)) ? OQ_EIO : OQ_OK;
fail:
	report_free(&r);
	return rc;
}
