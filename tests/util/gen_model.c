/*
 * gen_model.c - see gen_model.h. Every protobuf-c struct, string and array
 * is allocated from the model's arena and freed together by gen_free(), so
 * the builders never need the protobuf-c free functions.
 */
#include "gen_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/io/onnx_io.h"

struct gen_model {
	Onnx__ModelProto *mp; /* the model being built */
	void **arena;         /* every allocation, freed by gen_free */
	size_t n_arena, cap_arena;
	uint8_t *packed; /* last gen_pack output */
	size_t n_packed;
};

static void die(const char *what)
{
	fprintf(stderr, "gen_model: %s\n", what);
	abort();
}

static void *alloc(gen_model *m, size_t size)
{
	void *p = calloc(1, size ? size : 1);
	if (!p)
		die("out of memory");
	if (m->n_arena == m->cap_arena) {
		size_t cap = m->cap_arena ? m->cap_arena * 2 : 256;
		void **na = realloc(m->arena, cap * sizeof *na);
		if (!na)
			die("out of memory");
		m->arena = na;
		m->cap_arena = cap;
	}
	m->arena[m->n_arena++] = p;
	return p;
}

static char *str(gen_model *m, const char *s)
{
	size_t n = strlen(s);
	char *p = alloc(m, n + 1);
	memcpy(p, s, n);
	return p;
}

/* Appends to a GEN_CAP list allocated on first use. */
#define PUSH(m, arr, count, v)                                                                     \
	do {                                                                                       \
		if (!(arr))                                                                        \
			(arr) = alloc((m), GEN_CAP * sizeof *(arr));                               \
		if ((count) >= GEN_CAP)                                                            \
			die("list over GEN_CAP entries");                                          \
		(arr)[(count)++] = (v);                                                            \
	} while (0)

gen_model *gen_new(int64_t ir_version)
{
	gen_model *m = calloc(1, sizeof *m);
	if (!m)
		die("out of memory");
	m->mp = alloc(m, sizeof *m->mp);
	onnx__model_proto__init(m->mp);
	m->mp->has_ir_version = 1;
	m->mp->ir_version = ir_version;
	m->mp->producer_name = str(m, "onnxq-tests");
	m->mp->graph = alloc(m, sizeof *m->mp->graph);
	onnx__graph_proto__init(m->mp->graph);
	m->mp->graph->name = str(m, "g");
	return m;
}

void gen_free(gen_model *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_arena; i++)
		free(m->arena[i]);
	free(m->arena);
	free(m->packed);
	free(m);
}

Onnx__ModelProto *gen_proto(gen_model *m)
{
	return m->mp;
}

Onnx__GraphProto *gen_graph(gen_model *m)
{
	return m->mp->graph;
}

void gen_opset(gen_model *m, const char *domain, int64_t version)
{
	Onnx__OperatorSetIdProto *o = alloc(m, sizeof *o);
	onnx__operator_set_id_proto__init(o);
	o->domain = str(m, domain);
	o->has_version = 1;
	o->version = version;
	PUSH(m, m->mp->opset_import, m->mp->n_opset_import, o);
}

static Onnx__ValueInfoProto *vinfo(gen_model *m, const char *name, int dtype, int rank,
                                   const int64_t *dims)
{
	Onnx__ValueInfoProto *v = alloc(m, sizeof *v);
	Onnx__TypeProto *tp = alloc(m, sizeof *tp);
	Onnx__TypeProto__Tensor *tt = alloc(m, sizeof *tt);

	onnx__value_info_proto__init(v);
	onnx__type_proto__init(tp);
	onnx__type_proto__tensor__init(tt);
	v->name = str(m, name);
	v->type = tp;
	tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
	tp->tensor_type = tt;
	if (dtype) {
		tt->has_elem_type = 1;
		tt->elem_type = dtype;
	}
	if (rank >= 0) {
		Onnx__TensorShapeProto *sh = alloc(m, sizeof *sh);
		onnx__tensor_shape_proto__init(sh);
		sh->dim = alloc(m, ((size_t)rank + 1) * sizeof *sh->dim);
		for (int i = 0; i < rank; i++) {
			Onnx__TensorShapeProto__Dimension *d = alloc(m, sizeof *d);
			onnx__tensor_shape_proto__dimension__init(d);
			if (dims[i] >= 0) {
				d->value_case =
				    ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
				d->dim_value = dims[i];
			} else {
				d->value_case =
				    ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
				d->dim_param = str(m, "N");
			}
			sh->dim[sh->n_dim++] = d;
		}
		tt->shape = sh;
	}
	return v;
}

void gen_input(gen_model *m, Onnx__GraphProto *g, const char *name, int dtype, int rank,
               const int64_t *dims)
{
	PUSH(m, g->input, g->n_input, vinfo(m, name, dtype, rank, dims));
}

void gen_output(gen_model *m, Onnx__GraphProto *g, const char *name, int dtype, int rank,
                const int64_t *dims)
{
	PUSH(m, g->output, g->n_output, vinfo(m, name, dtype, rank, dims));
}

void gen_value_info(gen_model *m, Onnx__GraphProto *g, const char *name, int dtype, int rank,
                    const int64_t *dims)
{
	PUSH(m, g->value_info, g->n_value_info, vinfo(m, name, dtype, rank, dims));
}

/* Writes element i of value v in dtype dt into raw bytes p (sub-byte types: OR into place). */
static void put_elem(uint8_t *p, int dt, size_t i, double v)
{
	int bits = oq_dtype_bits(dt);
	if (oq_dtype_is_subbyte(dt)) {
		int64_t q = (int64_t)llround(v);
		unsigned mask = (1u << bits) - 1u;
		size_t bit = i * (size_t)bits;
		p[bit / 8] |= (uint8_t)(((unsigned)q & mask) << (bit % 8));
		return;
	}
	switch (dt) {
	case OQ_DT_FLOAT: {
		float f = (float)v;
		memcpy(p + 4 * i, &f, 4);
		return;
	}
	case OQ_DT_DOUBLE: memcpy(p + 8 * i, &v, 8); return;
	case OQ_DT_FLOAT16: {
		uint16_t h = oq_f32_to_f16((float)v);
		p[2 * i] = (uint8_t)h;
		p[2 * i + 1] = (uint8_t)(h >> 8);
		return;
	}
	case OQ_DT_BFLOAT16: { /* the float's top half, rounded to nearest even */
		float f = (float)v;
		uint32_t u;
		memcpy(&u, &f, 4);
		u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
		p[2 * i] = (uint8_t)u;
		p[2 * i + 1] = (uint8_t)(u >> 8);
		return;
	}
	default: break;
	}
	/* integers (and bool): little-endian two's complement of round(v) */
	int64_t q = (int64_t)llround(v);
	for (int b = 0; b < bits / 8; b++)
		p[(size_t)(bits / 8) * i + (size_t)b] = (uint8_t)((uint64_t)q >> (8 * b));
}

Onnx__TensorProto *gen_tensor(gen_model *m, const char *name, int dtype, int rank,
                              const int64_t *dims, const double *vals)
{
	Onnx__TensorProto *t = alloc(m, sizeof *t);
	size_t nelem = 1, nbytes = 0;

	onnx__tensor_proto__init(t);
	t->name = str(m, name);
	t->has_data_type = 1;
	t->data_type = dtype;
	t->dims = alloc(m, ((size_t)(rank > 0 ? rank : 0) + 1) * sizeof *t->dims);
	for (int i = 0; i < rank; i++) {
		t->dims[t->n_dims++] = dims[i];
		nelem *= dims[i] > 0 ? (size_t)dims[i] : 0;
	}
	if (oq_dtype_valid(dtype) && dtype != OQ_DT_STRING &&
	    !oq_dtype_nbytes(dtype, nelem, &nbytes))
		die("tensor too large");
	t->has_raw_data = 1;
	t->raw_data.len = nbytes;
	t->raw_data.data = alloc(m, nbytes);
	if (vals && nbytes)
		for (size_t i = 0; i < nelem; i++)
			put_elem(t->raw_data.data, dtype, i, vals[i]);
	return t;
}

Onnx__TensorProto *gen_init(gen_model *m, Onnx__GraphProto *g, const char *name, int dtype,
                            int rank, const int64_t *dims, const double *vals)
{
	Onnx__TensorProto *t = gen_tensor(m, name, dtype, rank, dims, vals);
	PUSH(m, g->initializer, g->n_initializer, t);
	return t;
}

/* Splits "a,,b" into an arena list of names. */
static size_t split(gen_model *m, const char *s, char ***out)
{
	size_t n = 0;
	*out = NULL;
	if (!s || !*s)
		return 0;
	for (const char *p = s;;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		char *name = alloc(m, len + 1);
		memcpy(name, p, len);
		PUSH(m, *out, n, name);
		if (!e)
			break;
		p = e + 1;
	}
	return n;
}

Onnx__NodeProto *gen_node(gen_model *m, Onnx__GraphProto *g, const char *op_type, const char *name,
                          const char *inputs, const char *outputs)
{
	Onnx__NodeProto *n = alloc(m, sizeof *n);
	onnx__node_proto__init(n);
	n->op_type = str(m, op_type);
	n->name = str(m, name ? name : "");
	n->domain = str(m, "");
	n->n_input = split(m, inputs, &n->input);
	n->n_output = split(m, outputs, &n->output);
	PUSH(m, g->node, g->n_node, n);
	return n;
}

void gen_domain(gen_model *m, Onnx__NodeProto *n, const char *domain)
{
	n->domain = str(m, domain);
}

Onnx__AttributeProto *gen_attr(gen_model *m, Onnx__NodeProto *n, const char *name, int type)
{
	Onnx__AttributeProto *a = alloc(m, sizeof *a);
	onnx__attribute_proto__init(a);
	a->name = str(m, name);
	if (type) {
		a->has_type = 1;
		a->type = (Onnx__AttributeProto__AttributeType)type;
	}
	PUSH(m, n->attribute, n->n_attribute, a);
	return a;
}

void gen_attr_int(gen_model *m, Onnx__NodeProto *n, const char *name, int64_t v)
{
	Onnx__AttributeProto *a = gen_attr(m, n, name, OQ_ATTR_INT);
	a->has_i = 1;
	a->i = v;
}

void gen_attr_float(gen_model *m, Onnx__NodeProto *n, const char *name, float v)
{
	Onnx__AttributeProto *a = gen_attr(m, n, name, OQ_ATTR_FLOAT);
	a->has_f = 1;
	a->f = v;
}

void gen_attr_str(gen_model *m, Onnx__NodeProto *n, const char *name, const char *v)
{
	Onnx__AttributeProto *a = gen_attr(m, n, name, OQ_ATTR_STRING);
	a->has_s = 1;
	a->s.len = strlen(v);
	a->s.data = (uint8_t *)str(m, v);
}

void gen_attr_ints(gen_model *m, Onnx__NodeProto *n, const char *name, size_t count,
                   const int64_t *v)
{
	Onnx__AttributeProto *a = gen_attr(m, n, name, OQ_ATTR_INTS);
	a->ints = alloc(m, (count + 1) * sizeof *a->ints);
	if (count)
		memcpy(a->ints, v, count * sizeof *v);
	a->n_ints = count;
}

Onnx__GraphProto *gen_attr_graph(gen_model *m, Onnx__NodeProto *n, const char *name,
                                 const char *graph_name)
{
	Onnx__AttributeProto *a = gen_attr(m, n, name, OQ_ATTR_GRAPH);
	Onnx__GraphProto *g = alloc(m, sizeof *g);
	onnx__graph_proto__init(g);
	g->name = str(m, graph_name);
	a->g = g;
	return g;
}

int gen_pack(gen_model *m, const void **buf, size_t *len)
{
	size_t n = onnx__model_proto__get_packed_size(m->mp);
	uint8_t *p = malloc(n ? n : 1);
	if (!p)
		return OQ_ENOMEM;
	onnx__model_proto__pack(m->mp, p);
	free(m->packed);
	m->packed = p;
	m->n_packed = n;
	*buf = p;
	*len = n;
	return OQ_OK;
}

int gen_write(gen_model *m, const char *path)
{
	const void *buf;
	size_t len;
	FILE *f;
	int ok;

	if (gen_pack(m, &buf, &len))
		return OQ_ENOMEM;
	f = fopen(path, "wb");
	if (!f)
		return OQ_EIO;
	ok = fwrite(buf, 1, len, f) == len;
	ok = (fclose(f) == 0) && ok;
	return ok ? OQ_OK : OQ_EIO;
}

int gen_load(gen_model *m, oq_model **out, oq_diag *d)
{
	const void *buf;
	size_t len;

	*out = NULL;
	if (gen_pack(m, &buf, &len))
		return oq_err(d, OQ_ENOMEM, "gen: out of memory");
	return oq_model_load_buffer(buf, len, NULL, out, d);
}

gen_model *gen_matmul(int64_t rows, int64_t k, int64_t n, const double *w)
{
	gen_model *m = gen_new(10);
	Onnx__GraphProto *g;

	gen_opset(m, "", 21);
	g = gen_graph(m);
	gen_input(m, g, "x", OQ_DT_FLOAT, GEN_SHAPE(rows, k));
	gen_init(m, g, "W", OQ_DT_FLOAT, GEN_SHAPE(k, n), w);
	gen_node(m, g, "MatMul", "mm", "x,W", "y");
	gen_output(m, g, "y", OQ_DT_FLOAT, GEN_SHAPE(rows, n));
	return m;
}
