/*
 * onnx_save.c - IR -> ONNX protobuf, written atomically.
 *
 * Each IR object is turned back into its protobuf message by copying the
 * message it was loaded from (when there is one) and overwriting the fields
 * the IR models: doc strings, metadata, unknown fields and everything else
 * onnxq does not model come back as they were. Tensors are written as
 * raw_data pointing straight at the IR payload (often the input file's
 * mapping), and protobuf-c streams the message through a buffered writer, so
 * no serialized copy of the model is ever held in memory.
 *
 * The output goes to a temporary file in the output's folder, renamed over
 * the output only when everything was written: any failure leaves the
 * output path untouched (src/io/outfile.c). With external data, tensors of
 * at least `external_threshold` bytes go to `<out>.<hash>.data`, named by a
 * hash of its content (place_pair), at 64-byte aligned offsets
 * (4096 for tensors of 1 MiB and more, so they can be mapped page-aligned);
 * this is switched on automatically when the model would pass protobuf's
 * 2 GiB limit.
 */
#include "src/io/onnx_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/file.h>

#include "onnx.pb-c.h"
#include "src/io/outfile.h"

#define OQ_REF_FIELD 536870911u

/* ------------------------------------------------------------------ arena */

/* Every temporary protobuf struct of one save, freed together. */
typedef struct arena {
	void **ptrs;
	size_t n, cap;
	int oom;
} arena;

static void *aalloc(arena *a, size_t n, size_t size)
{
	void *p;
	if (a->oom)
		return NULL;
	if (oq_grow(&a->ptrs, &a->cap, a->n + 1, sizeof *a->ptrs) || !(p = oq_calloc(n, size))) {
		a->oom = 1;
		return NULL;
	}
	a->ptrs[a->n++] = p;
	return p;
}

static void afree(arena *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->ptrs[i]);
	free(a->ptrs);
}

/* ----------------------------------------------------------------- writer */

typedef struct writer {
	ProtobufCBuffer base;
	int fd;
	uint8_t *buf;
	size_t n, cap;
	size_t total;
	int err; /* errno of the first failure */
} writer;

/*
 * Writes in 1 MiB pieces: one huge write() from a file mapping faults the
 * whole source in while the kernel holds the destination's pages, which
 * measured about 2x slower than chunks that stay in cache (bench/convert.sh).
 */
static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		size_t chunk = n > (1u << 20) ? (1u << 20) : n;
		int e = oq_out_write_all(fd, p, chunk);
		if (e)
			return e;
		p += chunk;
		n -= chunk;
	}
	return 0;
}

/*
 * The data file's content hash, fed in write order: 8-byte words
 * multiplied into the state, the tail bytewise, the length last. It names
 * the data file, so a model and the data it was written with always go
 * together (see oq_model_save).
 */
static uint64_t hash_bytes(uint64_t h, const uint8_t *p, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0x9E3779B97F4A7C15ull;
		h ^= h >> 29;
	}
	for (; i < n; i++)
		h = (h ^ p[i]) * 0x100000001B3ull;
	return h;
}

static void wflush(writer *w)
{
	if (!w->err && w->n)
		w->err = write_all(w->fd, w->buf, w->n);
	w->n = 0;
}

static void wappend(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
	writer *w = (writer *)b;
	if (w->err || len == 0)
		return;
	w->total += len;
	if (len >= w->cap / 2) { /* large payloads bypass the buffer */
		wflush(w);
		if (!w->err)
			w->err = write_all(w->fd, data, len);
		return;
	}
	if (w->n + len > w->cap)
		wflush(w);
	memcpy(w->buf + w->n, data, len);
	w->n += len;
}

/* ------------------------------------------------------------- conversion */

typedef struct sctx {
	arena a;
	oq_diag *d;
	const oq_save_opts *o;
	int external;         /* write large tensors to the data file */
	size_t threshold;
	int data_fd;
	const char *data_name; /* location recorded in the model (filled in before packing) */
	size_t data_off;
	uint64_t data_hash;    /* hash_bytes of everything written to the data file */
	oq_save_info *info;
	int err;              /* first status */
} sctx;

static Onnx__GraphProto *mk_graph(sctx *s, const oq_graph *g);

/* Keeps the file's NULL-vs-"" distinction for optional strings that did not change. */
static char *keep_str(const char *orig, const char *ir)
{
	if (strcmp(orig ? orig : "", ir) == 0)
		return (char *)orig;
	return (char *)ir;
}

static int write_external(sctx *s, const oq_tensor *t, size_t *off)
{
	static const uint8_t zeros[4096];
	size_t align = t->nbytes >= (1u << 20) ? 4096 : 64;
	size_t pad = (align - s->data_off % align) % align;
	int e;

	if ((e = write_all(s->data_fd, zeros, pad)) || (e = write_all(s->data_fd, t->data, t->nbytes)))
		return e;
	s->data_hash = hash_bytes(hash_bytes(s->data_hash, zeros, pad), t->data, t->nbytes);
	*off = s->data_off + pad;
	s->data_off += pad + t->nbytes;
	return 0;
}

/*
 * `may_external`: 1 for initializers, 2 for attribute tensors (Constant
 * values), 0 for tensors that always stay inline. Integer attribute tensors
 * stay inline: they are shapes, axes and indices that ONNX Runtime's shape
 * inference reads at load time and refuses to take from external data.
 * Float ones (weights in Constant nodes, as PaddleOCR exports them) move.
 */
static Onnx__TensorProto *mk_tensor(sctx *s, const oq_tensor *t, const char *name, int may_external)
{
	Onnx__TensorProto *tp = aalloc(&s->a, 1, sizeof *tp);
	const Onnx__TensorProto *src = t->src;

	if (!tp)
		return NULL;
	if (src) {
		*tp = *src;
		/* Drop our raw_data reference; keep the file's own unknown fields. */
		tp->base.n_unknown_fields = 0;
		tp->base.unknown_fields = NULL;
		if (src->base.n_unknown_fields) {
			tp->base.unknown_fields =
				aalloc(&s->a, src->base.n_unknown_fields, sizeof *tp->base.unknown_fields);
			if (!tp->base.unknown_fields)
				return NULL;
			for (unsigned i = 0; i < src->base.n_unknown_fields; i++)
				if (src->base.unknown_fields[i].tag != OQ_REF_FIELD)
					tp->base.unknown_fields[tp->base.n_unknown_fields++] =
						src->base.unknown_fields[i];
		}
	} else {
		onnx__tensor_proto__init(tp);
	}
	tp->n_dims = (size_t)t->rank;
	tp->dims = t->dims;
	tp->has_data_type = 1;
	tp->data_type = t->dtype;
	tp->name = keep_str(src ? src->name : NULL, name ? name : t->name);
	tp->segment = NULL;
	tp->n_float_data = tp->n_int32_data = tp->n_int64_data = 0;
	tp->n_double_data = tp->n_uint64_data = tp->n_string_data = 0;
	tp->n_external_data = 0;
	tp->external_data = NULL;
	tp->has_data_location = 0;
	tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT;
	tp->has_raw_data = 0;
	tp->raw_data.len = 0;
	tp->raw_data.data = NULL;
	if (t->dtype == OQ_DT_STRING) {
		tp->n_string_data = t->nelem;
		tp->string_data = aalloc(&s->a, t->nelem, sizeof *tp->string_data);
		if (!tp->string_data)
			return NULL;
		for (size_t i = 0; i < t->nelem; i++) {
			tp->string_data[i].len = t->strs[i].len;
			tp->string_data[i].data = (uint8_t *)t->strs[i].p;
		}
		return tp;
	}
	if (may_external == 2 && strchr("subS", oq_dtype_kind(t->dtype)))
		may_external = 0;
	if (may_external && s->external && t->nbytes >= s->threshold) {
		Onnx__StringStringEntryProto *e = aalloc(&s->a, 3, sizeof *e);
		Onnx__StringStringEntryProto **ep = aalloc(&s->a, 3, sizeof *ep);
		char *num = aalloc(&s->a, 2, 24);
		size_t off;
		int err;
		if (!e || !ep || !num)
			return NULL;
		if ((err = write_external(s, t, &off))) {
			s->err = oq_err(s->d, OQ_EIO, "save: cannot write external data: %s", strerror(err));
			return NULL;
		}
		for (int i = 0; i < 3; i++) {
			onnx__string_string_entry_proto__init(&e[i]);
			ep[i] = &e[i];
		}
		snprintf(num, 24, "%zu", off);
		snprintf(num + 24, 24, "%zu", t->nbytes);
		e[0].key = "location";
		e[0].value = (char *)s->data_name;
		e[1].key = "offset";
		e[1].value = num;
		e[2].key = "length";
		e[2].value = num + 24;
		tp->n_external_data = 3;
		tp->external_data = ep;
		tp->has_data_location = 1;
		tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
		if (s->info) {
			s->info->n_external++;
			s->info->data_bytes = s->data_off;
		}
		return tp;
	}
	/* An empty tensor keeps the file's choice of storing empty raw_data or nothing. */
	tp->has_raw_data = t->nbytes > 0 || !src || src->has_raw_data;
	tp->raw_data.len = t->nbytes;
	tp->raw_data.data = (uint8_t *)t->data;
	return tp;
}

static Onnx__SparseTensorProto *mk_sparse(sctx *s, const oq_sparse *sp)
{
	Onnx__SparseTensorProto *p = aalloc(&s->a, 1, sizeof *p);
	if (!p)
		return NULL;
	if (sp->src)
		*p = *(const Onnx__SparseTensorProto *)sp->src;
	else
		onnx__sparse_tensor_proto__init(p);
	p->n_dims = (size_t)sp->rank;
	p->dims = sp->dims;
	p->values = sp->values ? mk_tensor(s, sp->values, NULL, 0) : NULL;
	p->indices = sp->indices ? mk_tensor(s, sp->indices, NULL, 0) : NULL;
	if ((sp->values && !p->values) || (sp->indices && !p->indices))
		return NULL;
	return p;
}

static Onnx__AttributeProto *mk_attr(sctx *s, const oq_attr *a)
{
	Onnx__AttributeProto *p = aalloc(&s->a, 1, sizeof *p);
	const Onnx__AttributeProto *src = a->src;

	if (!p)
		return NULL;
	if (src)
		*p = *src;
	else
		onnx__attribute_proto__init(p);
	p->name = keep_str(src ? src->name : NULL, a->name);
	if (!src || src->has_type || a->type != OQ_ATTR_UNDEFINED) {
		p->has_type = 1;
		p->type = (Onnx__AttributeProto__AttributeType)a->type;
	}
	if (src && !src->has_type && a->type != OQ_ATTR_UNDEFINED)
		p->has_type = 0; /* IR 1 file: keep inferring from the field in use */
	switch (a->type) {
	case OQ_ATTR_FLOAT: p->has_f = 1; p->f = a->f; break;
	case OQ_ATTR_INT: p->has_i = 1; p->i = a->i; break;
	case OQ_ATTR_STRING:
		p->has_s = 1;
		p->s.len = a->s.len;
		p->s.data = (uint8_t *)(a->s.p ? a->s.p : "");
		break;
	case OQ_ATTR_FLOATS: p->n_floats = a->n; p->floats = a->floats; break;
	case OQ_ATTR_INTS: p->n_ints = a->n; p->ints = a->ints; break;
	case OQ_ATTR_STRINGS:
		p->n_strings = a->n;
		p->strings = aalloc(&s->a, a->n, sizeof *p->strings);
		if (!p->strings)
			return NULL;
		for (size_t i = 0; i < a->n; i++) {
			p->strings[i].len = a->strings[i].len;
			p->strings[i].data = (uint8_t *)a->strings[i].p;
		}
		break;
	default:
		break;
	}
	p->t = NULL;
	p->g = NULL;
	p->sparse_tensor = NULL;
	if (a->t && !(p->t = mk_tensor(s, a->t, NULL, 2)))
		return NULL;
	if (a->g && !(p->g = mk_graph(s, a->g)))
		return NULL;
	if (a->sp && !(p->sparse_tensor = mk_sparse(s, a->sp)))
		return NULL;
	if (a->type == OQ_ATTR_TENSORS) {
		p->n_tensors = a->n;
		if (!(p->tensors = aalloc(&s->a, a->n, sizeof *p->tensors)))
			return NULL;
		for (size_t i = 0; i < a->n; i++)
			if (!(p->tensors[i] = mk_tensor(s, a->tensors[i], NULL, 2)))
				return NULL;
	}
	if (a->type == OQ_ATTR_GRAPHS) {
		p->n_graphs = a->n;
		if (!(p->graphs = aalloc(&s->a, a->n, sizeof *p->graphs)))
			return NULL;
		for (size_t i = 0; i < a->n; i++)
			if (!(p->graphs[i] = mk_graph(s, a->graphs[i])))
				return NULL;
	}
	if (a->type == OQ_ATTR_SPARSE_TENSORS) {
		p->n_sparse_tensors = a->n;
		if (!(p->sparse_tensors = aalloc(&s->a, a->n, sizeof *p->sparse_tensors)))
			return NULL;
		for (size_t i = 0; i < a->n; i++)
			if (!(p->sparse_tensors[i] = mk_sparse(s, a->sparses[i])))
				return NULL;
	}
	return p;
}

static const char *value_name(const oq_value *v)
{
	return v ? v->name : "";
}

static Onnx__NodeProto *mk_node(sctx *s, const oq_node *n)
{
	Onnx__NodeProto *p = aalloc(&s->a, 1, sizeof *p);
	const Onnx__NodeProto *src = n->src;

	if (!p)
		return NULL;
	if (src)
		*p = *src;
	else
		onnx__node_proto__init(p);
	p->name = keep_str(src ? src->name : NULL, n->name);
	p->op_type = keep_str(src ? src->op_type : NULL, n->op_type);
	p->domain = keep_str(src ? src->domain : NULL, n->domain);
	p->n_input = n->n_inputs;
	p->input = aalloc(&s->a, n->n_inputs, sizeof *p->input);
	p->n_output = n->n_outputs;
	p->output = aalloc(&s->a, n->n_outputs, sizeof *p->output);
	p->n_attribute = n->n_attrs;
	p->attribute = aalloc(&s->a, n->n_attrs, sizeof *p->attribute);
	if (!p->input || !p->output || !p->attribute)
		return NULL;
	for (size_t i = 0; i < n->n_inputs; i++)
		p->input[i] = (char *)value_name(n->inputs[i]);
	for (size_t i = 0; i < n->n_outputs; i++)
		p->output[i] = (char *)value_name(n->outputs[i]);
	for (size_t i = 0; i < n->n_attrs; i++)
		if (!(p->attribute[i] = mk_attr(s, &n->attrs[i])))
			return NULL;
	return p;
}

static Onnx__TypeProto *mk_type(sctx *s, const oq_type *t)
{
	Onnx__TypeProto *tp = aalloc(&s->a, 1, sizeof *tp);
	Onnx__TypeProto__Tensor *tt = aalloc(&s->a, 1, sizeof *tt);
	if (!tp || !tt)
		return NULL;
	onnx__type_proto__init(tp);
	onnx__type_proto__tensor__init(tt);
	tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
	tp->tensor_type = tt;
	tt->has_elem_type = 1;
	tt->elem_type = t->dtype;
	if (t->rank >= 0) {
		Onnx__TensorShapeProto *sh = aalloc(&s->a, 1, sizeof *sh);
		Onnx__TensorShapeProto__Dimension *dv = aalloc(&s->a, (size_t)t->rank, sizeof *dv);
		Onnx__TensorShapeProto__Dimension **dp = aalloc(&s->a, (size_t)t->rank, sizeof *dp);
		if (!sh || !dv || !dp)
			return NULL;
		onnx__tensor_shape_proto__init(sh);
		sh->n_dim = (size_t)t->rank;
		sh->dim = dp;
		for (int i = 0; i < t->rank; i++) {
			onnx__tensor_shape_proto__dimension__init(&dv[i]);
			if (t->dims[i].value >= 0) {
				dv[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
				dv[i].dim_value = t->dims[i].value;
			} else if (t->dims[i].param) {
				dv[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
				dv[i].dim_param = t->dims[i].param;
			}
			dp[i] = &dv[i];
		}
		tt->shape = sh;
	}
	return tp;
}

static Onnx__ValueInfoProto *mk_vinfo(sctx *s, const oq_value *v)
{
	Onnx__ValueInfoProto *p = aalloc(&s->a, 1, sizeof *p);
	const Onnx__ValueInfoProto *src = v->vinfo;
	if (!p)
		return NULL;
	if (src)
		*p = *src;
	else
		onnx__value_info_proto__init(p);
	p->name = keep_str(src ? src->name : NULL, v->name);
	if ((!src || (v->flags & OQ_V_TYPE_EDITED)) && v->type.kind == OQ_TYPE_TENSOR) {
		if (!(p->type = mk_type(s, &v->type)))
			return NULL;
	}
	return p;
}

static Onnx__ValueInfoProto **mk_vinfos(sctx *s, oq_value *const *v, size_t n)
{
	Onnx__ValueInfoProto **p = aalloc(&s->a, n, sizeof *p);
	if (!p)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (!(p[i] = mk_vinfo(s, v[i])))
			return NULL;
	return p;
}

static Onnx__GraphProto *mk_graph(sctx *s, const oq_graph *g)
{
	Onnx__GraphProto *p = aalloc(&s->a, 1, sizeof *p);
	const Onnx__GraphProto *src = g->src;

	if (!p)
		return NULL;
	if (src)
		*p = *src;
	else
		onnx__graph_proto__init(p);
	p->name = keep_str(src ? src->name : NULL, g->name);
	p->n_node = g->n_nodes;
	if (!(p->node = aalloc(&s->a, g->n_nodes, sizeof *p->node)))
		return NULL;
	for (size_t i = 0; i < g->n_nodes; i++)
		if (!(p->node[i] = mk_node(s, g->nodes[i])))
			return NULL;
	p->n_initializer = g->n_inits;
	if (!(p->initializer = aalloc(&s->a, g->n_inits, sizeof *p->initializer)))
		return NULL;
	for (size_t i = 0; i < g->n_inits; i++) /* named after the value, which passes may rename */
		if (!(p->initializer[i] = mk_tensor(s, g->inits[i]->init, g->inits[i]->name, 1)))
			return NULL;
	p->n_sparse_initializer = g->n_sparse;
	if (!(p->sparse_initializer = aalloc(&s->a, g->n_sparse, sizeof *p->sparse_initializer)))
		return NULL;
	for (size_t i = 0; i < g->n_sparse; i++)
		if (!(p->sparse_initializer[i] = mk_sparse(s, g->sparse_inits[i])))
			return NULL;
	p->n_input = g->n_inputs;
	p->n_output = g->n_outputs;
	p->n_value_info = g->n_vinfos;
	if (!(p->input = mk_vinfos(s, g->inputs, g->n_inputs)) ||
	    !(p->output = mk_vinfos(s, g->outputs, g->n_outputs)) ||
	    !(p->value_info = mk_vinfos(s, g->vinfos, g->n_vinfos)))
		return NULL;
	return p;
}

static Onnx__ModelProto *mk_model(sctx *s, const oq_model *m)
{
	Onnx__ModelProto *p = aalloc(&s->a, 1, sizeof *p);
	const Onnx__ModelProto *src = m->proto;

	if (!p)
		return NULL;
	if (src)
		*p = *src;
	else
		onnx__model_proto__init(p);
	p->has_ir_version = 1;
	p->ir_version = m->ir_version;
	p->producer_name = keep_str(src ? src->producer_name : NULL, m->producer_name ? m->producer_name : "");
	p->producer_version =
		keep_str(src ? src->producer_version : NULL, m->producer_version ? m->producer_version : "");
	p->n_opset_import = m->n_opsets;
	if (!(p->opset_import = aalloc(&s->a, m->n_opsets, sizeof *p->opset_import)))
		return NULL;
	for (size_t i = 0; i < m->n_opsets; i++) {
		Onnx__OperatorSetIdProto *o = aalloc(&s->a, 1, sizeof *o);
		const Onnx__OperatorSetIdProto *os = m->opsets[i].src;
		if (!o)
			return NULL;
		if (os)
			*o = *os;
		else
			onnx__operator_set_id_proto__init(o);
		o->domain = keep_str(os ? os->domain : NULL, m->opsets[i].domain);
		o->has_version = 1;
		o->version = m->opsets[i].version;
		p->opset_import[i] = o;
	}
	if (m->graph && !(p->graph = mk_graph(s, m->graph)))
		return NULL;
	return p;
}

/* ------------------------------------------------------------ size guess */

static size_t tensor_bytes(const oq_tensor *t);

static size_t graph_bytes(const oq_graph *g)
{
	size_t n = 0;
	for (size_t i = 0; i < g->n_inits; i++)
		n += tensor_bytes(g->inits[i]->init);
	for (size_t i = 0; i < g->n_sparse; i++) {
		if (g->sparse_inits[i]->values)
			n += tensor_bytes(g->sparse_inits[i]->values);
		if (g->sparse_inits[i]->indices)
			n += tensor_bytes(g->sparse_inits[i]->indices);
	}
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *nd = g->nodes[i];
		for (size_t k = 0; k < nd->n_attrs; k++) {
			const oq_attr *a = &nd->attrs[k];
			if (a->t)
				n += tensor_bytes(a->t);
			if (a->g)
				n += graph_bytes(a->g);
			for (size_t j = 0; a->tensors && j < a->n; j++)
				n += tensor_bytes(a->tensors[j]);
			for (size_t j = 0; a->graphs && j < a->n; j++)
				n += graph_bytes(a->graphs[j]);
		}
	}
	return n;
}

static size_t tensor_bytes(const oq_tensor *t)
{
	size_t n = t->nbytes + 64;
	if (t->strs)
		for (size_t i = 0; i < t->nelem; i++)
			n += t->strs[i].len + 8;
	return n;
}

/* ------------------------------------------------------------------- save */

/* The folder of file path p ("." when it has none), malloc'd. */
static char *dir_of(const char *p)
{
	const char *slash = strrchr(p, '/');
	char *d;
	if (!slash)
		return oq_strdup(".");
	if (slash == p)
		return oq_strdup("/");
	if (!(d = malloc((size_t)(slash - p) + 1)))
		return NULL;
	memcpy(d, p, (size_t)(slash - p));
	d[slash - p] = 0;
	return d;
}

/* Is `name` "<base>.<16 hex digits>.data": a data file this saver names for model file base? */
static int our_data_name(const char *name, const char *base)
{
	size_t bl = strlen(base);
	if (strncmp(name, base, bl) || name[bl] != '.' || strlen(name) != bl + 22 || strcmp(name + bl + 17, ".data"))
		return 0;
	for (size_t i = bl + 1; i < bl + 17; i++)
		if (!strchr("0123456789abcdef", name[i]))
			return 0;
	return 1;
}

/*
 * Puts a model and its data file (dout, NULL without one) in place: with
 * the model's folder locked against other onnxq saves (flock), renames the
 * data file to its content-named final name `dname`, then the model over
 * its target, then removes the other data files named for this model
 * (earlier saves' data, which nothing written by us references any more).
 * A crash between the renames leaves the old model with its own, untouched
 * data file; concurrent saves end as the last one's model and data.
 */
static int place_pair(oq_outfile *out, oq_outfile *dout, const char *dir, const char *base, const char *dname,
		      oq_diag *d)
{
	char *dpath = malloc(strlen(dir) + strlen(dname) + 2);
	int lock = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = OQ_OK;

	if (!dpath) {
		rc = oq_err(d, OQ_ENOMEM, "save: out of memory");
		goto out;
	}
	sprintf(dpath, "%s/%s", dir, dname);
	if (lock >= 0)
		while (flock(lock, LOCK_EX) != 0 && errno == EINTR)
			;
	if (dout) {
		free(dout->target);
		dout->target = dpath;
		dpath = NULL;
		if ((rc = oq_out_commit(dout, "save", d)))
			goto out;
	}
	if ((rc = oq_out_commit(out, "save", d)))
		goto out;
	{
		DIR *dh = opendir(dir);
		struct dirent *e;
		while (dh && (e = readdir(dh)))
			if (our_data_name(e->d_name, base) && strcmp(e->d_name, dname)) {
				char *old = malloc(strlen(dir) + strlen(e->d_name) + 2);
				if (old) {
					sprintf(old, "%s/%s", dir, e->d_name);
					unlink(old);
					free(old);
				}
			}
		if (dh)
			closedir(dh);
	}
out:
	if (lock >= 0)
		close(lock); /* releases the lock */
	free(dpath);
	return rc;
}

int oq_model_save(const oq_model *m, const char *path, const oq_save_opts *o, oq_save_info *info,
		  oq_diag *d)
{
	static const oq_save_opts none = {0};
	oq_save_info dummy;
	sctx s = {0};
	writer w = {0};
	Onnx__ModelProto *mp;
	oq_outfile out, dout;
	char *dir = NULL, *dpath = NULL, *bname = NULL, dname[288] = "";
	const char *base = "";
	int rc = OQ_OK;

	memset(&dout, 0, sizeof dout);
	dout.fd = dout.slot = -1;
	if (!o)
		o = &none;
	if (!info)
		info = &dummy;
	memset(info, 0, sizeof *info);
	s.d = d;
	s.o = o;
	s.info = info;
	s.data_fd = -1;
	s.threshold = o->external_threshold ? o->external_threshold : 1024;
	s.external = o->external_data;
	if (!s.external && m->graph &&
	    graph_bytes(m->graph) > (o->auto_limit ? o->auto_limit : OQ_PROTOBUF_LIMIT - (64u << 20))) {
		if (o->no_auto_external)
			return oq_err(d, OQ_EUNSUP,
				      "save: '%s': the model is over the 2 GB protobuf limit; use "
				      "--external-data",
				      path);
		s.external = 1;
		info->auto_external = 1;
	}
	if ((rc = oq_out_open(&out, path, "save", OQ_OUT_STDOUT, d)))
		return rc;
	if (s.external) {
		size_t l = strlen(out.target);
		if (out.streaming) {
			rc = oq_err(d, OQ_EUSAGE, "save: external data needs a model file beside it, not "
				    "standard output; give -o FILE");
			goto done;
		}
		/* the data goes beside the file written (a symlink's target), under a name of its content */
		if (!(dir = dir_of(out.target)) || !(dpath = malloc(l + 6))) {
			rc = oq_err(d, OQ_ENOMEM, "save: out of memory");
			goto done;
		}
		memcpy(dpath, out.target, l);
		memcpy(dpath + l, ".data", 6);
		base = strrchr(out.target, '/') ? strrchr(out.target, '/') + 1 : out.target;
		if (strlen(base) + 23 > sizeof dname) {
			rc = oq_err(d, OQ_EUSAGE, "save: '%s': the file name is too long for a data file beside it",
				    path);
			goto done;
		}
		if (!(base = bname = oq_strdup(base))) { /* out.target goes at the commit */
			rc = oq_err(d, OQ_ENOMEM, "save: out of memory");
			goto done;
		}
		if ((rc = oq_out_open(&dout, dpath, "save", 0, d)))
			goto done;
		s.data_fd = dout.fd;
		s.data_name = dname;
		s.data_hash = 0xcbf29ce484222325ull;
		info->went_external = 1;
	}
	mp = mk_model(&s, m);
	if (!mp) {
		rc = s.err ? s.err : oq_err(d, OQ_ENOMEM, "save: out of memory");
		goto done;
	}
	if (s.external)
		snprintf(dname, sizeof dname, "%s.%016llx.data", base,
			 (unsigned long long)hash_bytes(s.data_hash, (const uint8_t *)&s.data_off, sizeof s.data_off));
	if (!s.external && protobuf_c_message_get_packed_size(&mp->base) > OQ_PROTOBUF_LIMIT) {
		rc = oq_err(d, OQ_EUNSUP, "save: '%s': the model is over the 2 GB protobuf limit; use --external-data",
			    path);
		goto done;
	}
	w.base.append = wappend;
	w.fd = out.fd;
	w.cap = 1u << 20;
	w.buf = malloc(w.cap);
	if (!w.buf) {
		rc = oq_err(d, OQ_ENOMEM, "save: out of memory");
		goto done;
	}
	protobuf_c_message_pack_to_buffer(&mp->base, &w.base);
	wflush(&w);
	if (w.err) {
		rc = oq_err(d, OQ_EIO, "save: cannot write '%s': %s", path, strerror(w.err));
		goto done;
	}
	info->model_bytes = w.total;
	if (s.external && info->n_external == 0) {
		/* nothing was large enough: no data file */
		oq_out_abort(&dout);
		info->went_external = 0;
	}
	if (out.streaming) {
		rc = oq_out_commit(&out, "save", d);
		goto done;
	}
	if (s.external && info->n_external)
		snprintf(info->data_name, sizeof info->data_name, "%s", dname);
	else
		dname[0] = 0; /* no data file: earlier saves' data files go */
	if (!dir && !(dir = dir_of(out.target))) {
		rc = oq_err(d, OQ_ENOMEM, "save: out of memory");
		goto done;
	}
	if (!bname) {
		base = strrchr(out.target, '/') ? strrchr(out.target, '/') + 1 : out.target;
		if (!(base = bname = oq_strdup(base))) {
			rc = oq_err(d, OQ_ENOMEM, "save: out of memory");
			goto done;
		}
	}
	rc = place_pair(&out, dname[0] ? &dout : NULL, dir, base, dname, d);
done:
	oq_out_abort(&out);
	oq_out_abort(&dout);
	free(dir);
	free(dpath);
	free(bname);
	free(w.buf);
	afree(&s.a);
	return rc;
}
