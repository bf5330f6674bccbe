/*
 * irdiff.c - deep comparison of two loaded models (see irdiff.h).
 *
 * Two layers:
 * 1. the IR: model header, opsets, every graph (recursively through
 *    attribute subgraphs) with its inputs, outputs, value_info, nodes in
 *    order, attributes and initializers (bitwise, oq_tensor_equal);
 * 2. the kept protobuf (m->proto): a generic walk over protobuf-c field
 *    descriptors comparing every field, present-flag and unknown field, so
 *    that doc strings, metadata_props, functions, training info and fields
 *    onnxq does not model are checked without listing them. In TensorProtos
 *    of the graphs (not in functions or training info, which are kept
 *    verbatim) the payload fields are skipped, and so is the loader's
 *    raw_data reference (an unknown field): the IR layer compared them.
 *
 * The first difference wins; its location is kept as a path string that is
 * extended on the way down and cut back on the way up.
 */
#include "irdiff.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "onnx.pb-c.h"

/* The loader's raw_data reference field (onnx_load.c): not part of the model. */
#define REF_FIELD 536870911u

typedef struct dctx {
	char *why;         /* caller's buffer for the first difference */
	size_t n;          /* its size */
	char path[2048];   /* where we are, e.g. "graph 'g' / node #3 'c' (Conv)" */
	size_t plen;       /* strlen(path) */
} dctx;

/* Appends a path segment; returns the previous length for pop(). */
static size_t push(dctx *c, const char *fmt, ...) OQ_PRINTF(2, 3);
static size_t push(dctx *c, const char *fmt, ...)
{
	size_t old = c->plen;
	va_list ap;
	int k;

	if (c->plen && c->plen < sizeof c->path - 4) {
		memcpy(c->path + c->plen, " / ", 4);
		c->plen += 3;
	}
	va_start(ap, fmt);
	k = vsnprintf(c->path + c->plen, sizeof c->path - c->plen, fmt, ap);
	va_end(ap);
	if (k > 0)
		c->plen += (size_t)k < sizeof c->path - c->plen ? (size_t)k : sizeof c->path - c->plen - 1;
	return old;
}

static void pop(dctx *c, size_t old)
{
	c->plen = old;
	c->path[old] = '\0';
}

/* Records the difference and returns 1. */
static int differ(dctx *c, const char *fmt, ...) OQ_PRINTF(2, 3);
static int differ(dctx *c, const char *fmt, ...)
{
	va_list ap;
	int k = 0;

	if (!c->why || !c->n)
		return 1;
	if (c->plen)
		k = snprintf(c->why, c->n, "%s: ", c->path);
	if (k < 0)
		k = 0;
	if ((size_t)k < c->n) {
		va_start(ap, fmt);
		vsnprintf(c->why + k, c->n - (size_t)k, fmt, ap);
		va_end(ap);
	}
	return 1;
}

static const char *nz(const char *s)
{
	return s ? s : "";
}

/* ------------------------------------------------------------------- IR */

static int cmp_str(dctx *c, const char *what, const char *a, const char *b)
{
	if (strcmp(nz(a), nz(b)) != 0)
		return differ(c, "%s '%s' vs '%s'", what, nz(a), nz(b));
	return 0;
}

static int cmp_bytes(dctx *c, const char *what, const oq_bytes *a, const oq_bytes *b)
{
	if (a->len != b->len || (a->len && memcmp(a->p, b->p, a->len) != 0))
		return differ(c, "%s differs (%zu vs %zu bytes)", what, a->len, b->len);
	return 0;
}

static int cmp_tensor(dctx *c, const char *what, const oq_tensor *a, const oq_tensor *b)
{
	if (!a || !b) {
		if (a != b)
			return differ(c, "%s present in only one model", what);
		return 0;
	}
	if (oq_tensor_equal(a, b))
		return 0;
	if (strcmp(a->name, b->name) != 0)
		return differ(c, "%s name '%s' vs '%s'", what, a->name, b->name);
	if (a->dtype != b->dtype)
		return differ(c, "%s '%s' dtype %s vs %s", what, a->name, oq_dtype_name(a->dtype),
			      oq_dtype_name(b->dtype));
	if (a->rank != b->rank)
		return differ(c, "%s '%s' rank %d vs %d", what, a->name, a->rank, b->rank);
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return differ(c, "%s '%s' dim %d is %lld vs %lld", what, a->name, i,
				      (long long)a->dims[i], (long long)b->dims[i]);
	if (a->nbytes != b->nbytes)
		return differ(c, "%s '%s' has %zu vs %zu bytes", what, a->name, a->nbytes, b->nbytes);
	if (a->dtype != OQ_DT_STRING) {
		const unsigned char *pa = a->data, *pb = b->data;
		size_t i = 0;
		while (i < a->nbytes && pa[i] == pb[i])
			i++;
		return differ(c, "%s '%s' (%s, %zu bytes): payload differs first at byte %zu "
			      "(0x%02x vs 0x%02x)",
			      what, a->name, oq_dtype_name(a->dtype), a->nbytes, i, pa[i], pb[i]);
	}
	for (size_t i = 0; i < a->nelem; i++)
		if (a->strs[i].len != b->strs[i].len ||
		    memcmp(a->strs[i].p, b->strs[i].p, a->strs[i].len) != 0)
			return differ(c, "%s '%s': string element %zu differs", what, a->name, i);
	return differ(c, "%s '%s' differs", what, a->name);
}

static int cmp_sparse(dctx *c, const char *what, const oq_sparse *a, const oq_sparse *b)
{
	size_t old;
	int r = 0;

	if (!a || !b) {
		if (a != b)
			return differ(c, "%s present in only one model", what);
		return 0;
	}
	if (a->rank != b->rank)
		return differ(c, "%s dense rank %d vs %d", what, a->rank, b->rank);
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return differ(c, "%s dense dim %d is %lld vs %lld", what, i, (long long)a->dims[i],
				      (long long)b->dims[i]);
	old = push(c, "%s", what);
	r = cmp_tensor(c, "values", a->values, b->values) || cmp_tensor(c, "indices", a->indices, b->indices);
	pop(c, old);
	return r;
}

static int cmp_type(dctx *c, const oq_type *a, const oq_type *b)
{
	if (a->kind != b->kind)
		return differ(c, "type kind %d vs %d", a->kind, b->kind);
	if (a->dtype != b->dtype)
		return differ(c, "element type %s vs %s", oq_dtype_name(a->dtype), oq_dtype_name(b->dtype));
	if (a->rank != b->rank)
		return differ(c, "declared rank %d vs %d", a->rank, b->rank);
	for (int i = 0; i < a->rank; i++) {
		if (a->dims[i].value != b->dims[i].value)
			return differ(c, "dim %d is %lld vs %lld", i, (long long)a->dims[i].value,
				      (long long)b->dims[i].value);
		if ((a->dims[i].param == NULL) != (b->dims[i].param == NULL) ||
		    strcmp(nz(a->dims[i].param), nz(b->dims[i].param)) != 0)
			return differ(c, "dim %d symbol '%s' vs '%s'", i, nz(a->dims[i].param),
				      nz(b->dims[i].param));
	}
	return 0;
}

static const char *vname(const oq_value *v)
{
	return v ? v->name : "";
}

/* A list of declared values (inputs, outputs, value_info): names and types. */
static int cmp_decls(dctx *c, const char *what, oq_value *const *a, size_t na, oq_value *const *b,
		     size_t nb)
{
	if (na != nb)
		return differ(c, "%zu vs %zu %s", na, nb, what);
	for (size_t i = 0; i < na; i++) {
		size_t old;
		int r;
		if (strcmp(vname(a[i]), vname(b[i])) != 0)
			return differ(c, "%s #%zu is '%s' vs '%s'", what, i, vname(a[i]), vname(b[i]));
		if (!a[i] || !b[i])
			continue;
		old = push(c, "%s '%s'", what, a[i]->name);
		r = cmp_type(c, &a[i]->type, &b[i]->type);
		pop(c, old);
		if (r)
			return 1;
	}
	return 0;
}

static int cmp_graph(dctx *c, const oq_graph *a, const oq_graph *b);

static int cmp_attr(dctx *c, const oq_attr *a, const oq_attr *b)
{
	if (strcmp(a->name, b->name) != 0)
		return differ(c, "attribute '%s' vs '%s'", a->name, b->name);
	if (a->type != b->type)
		return differ(c, "type %s vs %s", oq_attr_type_name(a->type), oq_attr_type_name(b->type));
	switch (a->type) {
	case OQ_ATTR_FLOAT:
		if (memcmp(&a->f, &b->f, sizeof a->f) != 0)
			return differ(c, "value %.9g vs %.9g", (double)a->f, (double)b->f);
		return 0;
	case OQ_ATTR_INT:
		if (a->i != b->i)
			return differ(c, "value %lld vs %lld", (long long)a->i, (long long)b->i);
		return 0;
	case OQ_ATTR_STRING: return cmp_bytes(c, "string", &a->s, &b->s);
	case OQ_ATTR_TENSOR: return cmp_tensor(c, "tensor", a->t, b->t);
	case OQ_ATTR_SPARSE_TENSOR: return cmp_sparse(c, "sparse tensor", a->sp, b->sp);
	case OQ_ATTR_GRAPH:
		if (!a->g || !b->g)
			return a->g != b->g ? differ(c, "graph present in only one model") : 0;
		return cmp_graph(c, a->g, b->g);
	default: break;
	}
	if (a->n != b->n)
		return differ(c, "%zu vs %zu elements", a->n, b->n);
	for (size_t i = 0; i < a->n; i++) {
		char what[48];
		snprintf(what, sizeof what, "element %zu", i);
		switch (a->type) {
		case OQ_ATTR_FLOATS:
			if (memcmp(&a->floats[i], &b->floats[i], sizeof *a->floats) != 0)
				return differ(c, "%s %.9g vs %.9g", what, (double)a->floats[i],
					      (double)b->floats[i]);
			break;
		case OQ_ATTR_INTS:
			if (a->ints[i] != b->ints[i])
				return differ(c, "%s %lld vs %lld", what, (long long)a->ints[i],
					      (long long)b->ints[i]);
			break;
		case OQ_ATTR_STRINGS:
			if (cmp_bytes(c, what, &a->strings[i], &b->strings[i]))
				return 1;
			break;
		case OQ_ATTR_TENSORS:
			if (cmp_tensor(c, what, a->tensors[i], b->tensors[i]))
				return 1;
			break;
		case OQ_ATTR_SPARSE_TENSORS:
			if (cmp_sparse(c, what, a->sparses[i], b->sparses[i]))
				return 1;
			break;
		case OQ_ATTR_GRAPHS: {
			size_t old = push(c, "%s", what);
			int r = cmp_graph(c, a->graphs[i], b->graphs[i]);
			pop(c, old);
			if (r)
				return 1;
			break;
		}
		default: break;
		}
	}
	return 0;
}

static int cmp_node(dctx *c, const oq_node *a, const oq_node *b)
{
	if (cmp_str(c, "op_type", a->op_type, b->op_type) || cmp_str(c, "domain", a->domain, b->domain) ||
	    cmp_str(c, "name", a->name, b->name))
		return 1;
	if (a->op != b->op)
		return differ(c, "resolved op %d vs %d", (int)a->op, (int)b->op);
	if (a->n_inputs != b->n_inputs)
		return differ(c, "%zu vs %zu inputs", a->n_inputs, b->n_inputs);
	for (size_t i = 0; i < a->n_inputs; i++)
		if (strcmp(vname(a->inputs[i]), vname(b->inputs[i])) != 0)
			return differ(c, "input %zu is '%s' vs '%s'", i, vname(a->inputs[i]),
				      vname(b->inputs[i]));
	if (a->n_outputs != b->n_outputs)
		return differ(c, "%zu vs %zu outputs", a->n_outputs, b->n_outputs);
	for (size_t i = 0; i < a->n_outputs; i++)
		if (strcmp(vname(a->outputs[i]), vname(b->outputs[i])) != 0)
			return differ(c, "output %zu is '%s' vs '%s'", i, vname(a->outputs[i]),
				      vname(b->outputs[i]));
	if (a->n_attrs != b->n_attrs)
		return differ(c, "%zu vs %zu attributes", a->n_attrs, b->n_attrs);
	for (size_t i = 0; i < a->n_attrs; i++) {
		size_t old = push(c, "attribute '%s'", a->attrs[i].name);
		int r = cmp_attr(c, &a->attrs[i], &b->attrs[i]);
		pop(c, old);
		if (r)
			return 1;
	}
	return 0;
}

static int cmp_graph(dctx *c, const oq_graph *a, const oq_graph *b)
{
	size_t old = push(c, "graph '%s'", a->name);
	int r = 1;

	if (cmp_str(c, "graph name", a->name, b->name) ||
	    cmp_decls(c, "input", a->inputs, a->n_inputs, b->inputs, b->n_inputs) ||
	    cmp_decls(c, "output", a->outputs, a->n_outputs, b->outputs, b->n_outputs) ||
	    cmp_decls(c, "value_info", a->vinfos, a->n_vinfos, b->vinfos, b->n_vinfos))
		goto out;
	if (a->n_inits != b->n_inits) {
		differ(c, "%zu vs %zu initializers", a->n_inits, b->n_inits);
		goto out;
	}
	for (size_t i = 0; i < a->n_inits; i++) {
		char what[48];
		snprintf(what, sizeof what, "initializer #%zu", i);
		if (strcmp(a->inits[i]->name, b->inits[i]->name) != 0) {
			differ(c, "%s is '%s' vs '%s'", what, a->inits[i]->name, b->inits[i]->name);
			goto out;
		}
		if (cmp_tensor(c, what, a->inits[i]->init, b->inits[i]->init))
			goto out;
	}
	if (a->n_sparse != b->n_sparse) {
		differ(c, "%zu vs %zu sparse initializers", a->n_sparse, b->n_sparse);
		goto out;
	}
	for (size_t i = 0; i < a->n_sparse; i++) {
		char what[48];
		snprintf(what, sizeof what, "sparse initializer #%zu", i);
		if (cmp_str(c, what, a->sparse_names[i], b->sparse_names[i]) ||
		    cmp_sparse(c, what, a->sparse_inits[i], b->sparse_inits[i]))
			goto out;
	}
	if (a->n_nodes != b->n_nodes) {
		differ(c, "%zu vs %zu nodes", a->n_nodes, b->n_nodes);
		goto out;
	}
	for (size_t i = 0; i < a->n_nodes; i++) {
		size_t o2 = push(c, "node #%zu '%s' (%s)", i, a->nodes[i]->name, a->nodes[i]->op_type);
		int rr = cmp_node(c, a->nodes[i], b->nodes[i]);
		pop(c, o2);
		if (rr)
			goto out;
	}
	r = 0;
out:
	pop(c, old);
	return r;
}

static int cmp_model_ir(dctx *c, const oq_model *a, const oq_model *b)
{
	if (a->ir_version != b->ir_version)
		return differ(c, "ir_version %lld vs %lld", (long long)a->ir_version, (long long)b->ir_version);
	if (a->n_opsets != b->n_opsets)
		return differ(c, "%zu vs %zu opset imports", a->n_opsets, b->n_opsets);
	for (size_t i = 0; i < a->n_opsets; i++)
		if (strcmp(a->opsets[i].domain, b->opsets[i].domain) != 0 ||
		    a->opsets[i].version != b->opsets[i].version)
			return differ(c, "opset import #%zu is '%s' %lld vs '%s' %lld", i, a->opsets[i].domain,
				      (long long)a->opsets[i].version, b->opsets[i].domain,
				      (long long)b->opsets[i].version);
	if (cmp_str(c, "producer_name", a->producer_name, b->producer_name) ||
	    cmp_str(c, "producer_version", a->producer_version, b->producer_version))
		return 1;
	if (a->n_functions != b->n_functions)
		return differ(c, "%zu vs %zu functions", a->n_functions, b->n_functions);
	if (a->n_training != b->n_training)
		return differ(c, "%zu vs %zu training_info entries", a->n_training, b->n_training);
	if (!a->graph || !b->graph)
		return a->graph != b->graph ? differ(c, "graph present in only one model") : 0;
	return cmp_graph(c, a->graph, b->graph);
}

/* ------------------------------------------------------------- protobuf */

/* TensorProto fields whose storage the saver may change (payload compared in the IR). */
static int payload_field(const ProtobufCFieldDescriptor *f)
{
	static const char *const names[] = {
		"float_data", "int32_data", "string_data", "int64_data", "raw_data",
		"double_data", "uint64_data", "external_data", "data_location",
	};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (strcmp(f->name, names[i]) == 0)
			return 1;
	return 0;
}

static size_t elem_size(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_FLOAT:
	case PROTOBUF_C_TYPE_ENUM:
		return 4;
	case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE:
		return 8;
	case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
	case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
	case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
	case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
	}
	return 0;
}

static int cmp_msg(dctx *c, const ProtobufCMessage *a, const ProtobufCMessage *b, int verbatim);

/* One element (scalar, string, bytes or message) at pa / pb. */
static int cmp_elem(dctx *c, const ProtobufCFieldDescriptor *f, const void *pa, const void *pb,
		    int verbatim)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_STRING: {
		const char *sa = *(char *const *)pa, *sb = *(char *const *)pb;
		if (strcmp(nz(sa), nz(sb)) != 0)
			return differ(c, "'%.200s' vs '%.200s'", nz(sa), nz(sb));
		return 0;
	}
	case PROTOBUF_C_TYPE_BYTES: {
		const ProtobufCBinaryData *ba = pa, *bb = pb;
		if (ba->len != bb->len || (ba->len && memcmp(ba->data, bb->data, ba->len) != 0))
			return differ(c, "bytes differ (%zu vs %zu bytes)", ba->len, bb->len);
		return 0;
	}
	case PROTOBUF_C_TYPE_MESSAGE: {
		const ProtobufCMessage *ma = *(ProtobufCMessage *const *)pa;
		const ProtobufCMessage *mb = *(ProtobufCMessage *const *)pb;
		if (!ma || !mb)
			return ma != mb ? differ(c, "message present in only one model") : 0;
		return cmp_msg(c, ma, mb, verbatim);
	}
	default:
		if (memcmp(pa, pb, elem_size(f->type)) != 0) {
			long long va = 0, vb = 0;
			if (elem_size(f->type) == 8) {
				int64_t x, y;
				memcpy(&x, pa, 8);
				memcpy(&y, pb, 8);
				va = x;
				vb = y;
			} else {
				int32_t x, y;
				memcpy(&x, pa, 4);
				memcpy(&y, pb, 4);
				va = x;
				vb = y;
			}
			return differ(c, "value %lld vs %lld (raw bits)", va, vb);
		}
		return 0;
	}
}

static int cmp_unknown(dctx *c, const ProtobufCMessage *a, const ProtobufCMessage *b, int skip_ref)
{
	size_t ia = 0, ib = 0;

	for (;;) {
		while (skip_ref && ia < a->n_unknown_fields && a->unknown_fields[ia].tag == REF_FIELD)
			ia++;
		while (skip_ref && ib < b->n_unknown_fields && b->unknown_fields[ib].tag == REF_FIELD)
			ib++;
		if (ia == a->n_unknown_fields || ib == b->n_unknown_fields)
			break;
		const ProtobufCMessageUnknownField *ua = &a->unknown_fields[ia], *ub = &b->unknown_fields[ib];
		if (ua->tag != ub->tag || ua->wire_type != ub->wire_type || ua->len != ub->len ||
		    (ua->len && memcmp(ua->data, ub->data, ua->len) != 0))
			return differ(c, "unknown field %u vs %u differs", ua->tag, ub->tag);
		ia++;
		ib++;
	}
	while (skip_ref && ia < a->n_unknown_fields && a->unknown_fields[ia].tag == REF_FIELD)
		ia++;
	while (skip_ref && ib < b->n_unknown_fields && b->unknown_fields[ib].tag == REF_FIELD)
		ib++;
	if (ia != a->n_unknown_fields || ib != b->n_unknown_fields)
		return differ(c, "unknown field %u present in only one model",
			      ia != a->n_unknown_fields ? a->unknown_fields[ia].tag : b->unknown_fields[ib].tag);
	return 0;
}

/*
 * Every field of a and b. `verbatim`: inside functions / training info, where
 * the loader keeps tensors as they were, so their payload fields count too.
 */
static int cmp_msg(dctx *c, const ProtobufCMessage *a, const ProtobufCMessage *b, int verbatim)
{
	const ProtobufCMessageDescriptor *d = a->descriptor;
	int tensor = d == &onnx__tensor_proto__descriptor;

	if (a->descriptor != b->descriptor)
		return differ(c, "message type %s vs %s", d->name, b->descriptor->name);
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *ca = (const char *)a, *cb = (const char *)b;
		int sub_verbatim = verbatim;
		size_t old;
		int r = 0;

		if (tensor && !verbatim && payload_field(f))
			continue;
		if (d == &onnx__model_proto__descriptor &&
		    (strcmp(f->name, "functions") == 0 || strcmp(f->name, "training_info") == 0))
			sub_verbatim = 1;
		old = push(c, "%s.%s", d->short_name, f->name);
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t na = *(const size_t *)(ca + f->quantifier_offset);
			size_t nb = *(const size_t *)(cb + f->quantifier_offset);
			const char *aa = *(char *const *)(ca + f->offset), *ab = *(char *const *)(cb + f->offset);
			size_t es = elem_size(f->type);
			if (na != nb) {
				r = differ(c, "%zu vs %zu entries", na, nb);
			} else {
				for (size_t k = 0; k < na && !r; k++) {
					size_t o2 = push(c, "[%zu]", k);
					r = cmp_elem(c, f, aa + k * es, ab + k * es, sub_verbatim);
					pop(c, o2);
				}
			}
		} else {
			int ha = 1, hb = 1;
			if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
				ha = *(const uint32_t *)(ca + f->quantifier_offset) == f->id;
				hb = *(const uint32_t *)(cb + f->quantifier_offset) == f->id;
			} else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
				   f->type != PROTOBUF_C_TYPE_MESSAGE) {
				ha = *(const protobuf_c_boolean *)(ca + f->quantifier_offset) != 0;
				hb = *(const protobuf_c_boolean *)(cb + f->quantifier_offset) != 0;
			}
			if (ha != hb)
				r = differ(c, "set in only the %s model", ha ? "first" : "second");
			else if (ha)
				r = cmp_elem(c, f, ca + f->offset, cb + f->offset, sub_verbatim);
		}
		pop(c, old);
		if (r)
			return 1;
	}
	{
		size_t old = push(c, "%s", d->short_name);
		int r = cmp_unknown(c, a, b, tensor);
		pop(c, old);
		return r;
	}
}

int oq_test_model_diff(const oq_model *a, const oq_model *b, char *why, size_t n)
{
	dctx c;

	memset(&c, 0, sizeof c);
	c.why = why;
	c.n = n;
	if (why && n)
		why[0] = '\0';
	if (!a || !b)
		return a != b ? differ(&c, "model present in only one side") : 0;
	if (cmp_model_ir(&c, a, b))
		return 1;
	if (!a->proto || !b->proto)
		return a->proto != b->proto ? differ(&c, "protobuf kept for only one model") : 0;
	return cmp_msg(&c, a->proto, b->proto, 0) ? 1 : 0;
}
