/*
 * mkbad.c - writes malicious and malformed ONNX model files (plus a few
 * valid ones for contrast) into a folder, one file per case, for
 * tests/integration/errors.sh.
 *
 * usage: mkbad DIR
 *
 * Models are built with the protobuf-c structs of onnx.pb-c.h and packed;
 * cases the packer cannot express (wrong wire types, 10000-level nesting,
 * forged fields) are written as hand-made wire bytes. Every case is small
 * (the "1e12-element tensor" is about 100 bytes): the point is that the
 * loader must refuse each one with one clear line, never crash, hang or
 * allocate what the header claims. The expected exit code and message
 * keyword of each case live in errors.sh, next to the assertions.
 *
 * External-data cases each get their own subfolder (the model's folder is
 * the boundary the loader must keep to); the file they try to reach lies
 * in DIR itself, so nothing is written outside DIR.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "onnx.pb-c.h"

static const char *root; /* DIR */

static void die(const char *what, const char *path)
{
	fprintf(stderr, "mkbad: %s '%s': %s\n", what, path, strerror(errno));
	exit(1);
}

static void path_of(char *out, size_t n, const char *rel)
{
	if ((size_t)snprintf(out, n, "%s/%s", root, rel) >= n) {
		fprintf(stderr, "mkbad: path too long\n");
		exit(1);
	}
}

static void write_file(const char *rel, const void *p, size_t n)
{
	char path[4096];
	FILE *f;
	path_of(path, sizeof path, rel);
	f = fopen(path, "wb");
	if (!f)
		die("cannot create", path);
	if ((n && fwrite(p, 1, n, f) != n) || fclose(f) != 0)
		die("cannot write", path);
}

static void make_dir(const char *rel)
{
	char path[4096];
	path_of(path, sizeof path, rel);
	if (mkdir(path, 0777) != 0 && errno != EEXIST)
		die("cannot create folder", path);
}

/* ------------------------------------------------------------ wire bytes */

/* A growable byte buffer for hand-made protobuf. */
typedef struct wbuf {
	uint8_t *p;
	size_t n, cap;
} wbuf;

static void put(wbuf *b, const void *src, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		if (!b->p) {
			fprintf(stderr, "mkbad: out of memory\n");
			exit(1);
		}
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, src, n);
	b->n += n;
}

static void put_varint(wbuf *b, uint64_t v)
{
	uint8_t t[10];
	size_t n = 0;
	do {
		t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	put(b, t, n);
}

static void put_tag(wbuf *b, uint32_t field, unsigned wt)
{
	put_varint(b, ((uint64_t)field << 3) | wt);
}

/* Field `field` as a length-delimited blob. */
static void put_ld(wbuf *b, uint32_t field, const void *p, size_t n)
{
	put_tag(b, field, 2);
	put_varint(b, n);
	put(b, p, n);
}

static void put_str(wbuf *b, uint32_t field, const char *s)
{
	put_ld(b, field, s, strlen(s));
}

/* ModelProto header fields: ir_version 8, opset_import {"" 17}. */
static void put_model_head(wbuf *b)
{
	wbuf op = {0};
	put_tag(&op, 2, 0);
	put_varint(&op, 17);
	put_tag(b, 1, 0);
	put_varint(b, 8);
	put_ld(b, 8, op.p, op.n);
	free(op.p);
}

/* -------------------------------------------------------- model building */

/* Value info "name": float tensor [2, 2]. */
static Onnx__ValueInfoProto *vinfo(const char *name)
{
	static Onnx__TensorShapeProto__Dimension dim[2];
	static Onnx__TensorShapeProto__Dimension *dims[2] = {&dim[0], &dim[1]};
	static Onnx__TensorShapeProto shape;
	Onnx__TypeProto__Tensor *tt = calloc(1, sizeof *tt);
	Onnx__TypeProto *tp = calloc(1, sizeof *tp);
	Onnx__ValueInfoProto *v = calloc(1, sizeof *v);

	if (!tt || !tp || !v)
		exit(1);
	for (int i = 0; i < 2; i++) {
		onnx__tensor_shape_proto__dimension__init(&dim[i]);
		dim[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
		dim[i].dim_value = 2;
	}
	onnx__tensor_shape_proto__init(&shape);
	shape.n_dim = 2;
	shape.dim = dims;
	onnx__type_proto__tensor__init(tt);
	tt->has_elem_type = 1;
	tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
	tt->shape = &shape;
	onnx__type_proto__init(tp);
	tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
	tp->tensor_type = tt;
	onnx__value_info_proto__init(v);
	v->name = (char *)name;
	v->type = tp;
	return v;
}

static void free_vinfo(Onnx__ValueInfoProto *v)
{
	free(v->type->tensor_type);
	free(v->type);
	free(v);
}

/* Tensor "W" of dtype and dims (no data yet). */
static void tensor_init(Onnx__TensorProto *t, const char *name, int dtype, size_t rank, int64_t *dims)
{
	onnx__tensor_proto__init(t);
	t->name = (char *)name;
	t->has_data_type = 1;
	t->data_type = dtype;
	t->n_dims = rank;
	t->dims = dims;
}

/*
 * Packs the model: Y = Add(X, W) with X, Y float [2, 2] and W the given
 * initializer; `extra` (may be NULL) is a second node appended to the graph.
 */
static uint8_t *pack_model(Onnx__TensorProto *w, int64_t ir, size_t *len)
{
	Onnx__OperatorSetIdProto op;
	Onnx__OperatorSetIdProto *ops[1] = {&op};
	Onnx__NodeProto node;
	Onnx__NodeProto *nodes[1] = {&node};
	char *in[2] = {"X", "W"}, *out[1] = {"Y"};
	Onnx__GraphProto g;
	Onnx__ValueInfoProto *gin[1], *gout[1];
	Onnx__TensorProto *inits[1] = {w};
	Onnx__ModelProto m;
	uint8_t *bytes;

	onnx__operator_set_id_proto__init(&op);
	op.domain = "";
	op.has_version = 1;
	op.version = 17;
	onnx__node_proto__init(&node);
	node.op_type = "Add";
	node.name = "add";
	node.n_input = 2;
	node.input = in;
	node.n_output = 1;
	node.output = out;
	gin[0] = vinfo("X");
	gout[0] = vinfo("Y");
	onnx__graph_proto__init(&g);
	g.name = "g";
	g.n_node = 1;
	g.node = nodes;
	g.n_initializer = w ? 1 : 0;
	g.initializer = inits;
	g.n_input = 1;
	g.input = gin;
	g.n_output = 1;
	g.output = gout;
	onnx__model_proto__init(&m);
	m.has_ir_version = 1;
	m.ir_version = ir;
	m.producer_name = "mkbad";
	m.n_opset_import = 1;
	m.opset_import = ops;
	m.graph = &g;
	*len = onnx__model_proto__get_packed_size(&m);
	bytes = malloc(*len ? *len : 1);
	if (!bytes)
		exit(1);
	onnx__model_proto__pack(&m, bytes);
	free_vinfo(gin[0]);
	free_vinfo(gout[0]);
	return bytes;
}

static void emit(const char *rel, Onnx__TensorProto *w)
{
	size_t n;
	uint8_t *b = pack_model(w, 8, &n);
	write_file(rel, b, n);
	free(b);
}

static const float four[4] = {1.0f, 2.0f, 3.0f, 4.0f};

/* The valid initializer: W float [2, 2] = 1 2 3 4 as raw_data. */
static void good_w(Onnx__TensorProto *t, int64_t *dims)
{
	dims[0] = dims[1] = 2;
	tensor_init(t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	t->has_raw_data = 1;
	t->raw_data.len = sizeof four;
	t->raw_data.data = (uint8_t *)four;
}

/* W as external data: location, offset and length (NULL = key absent). */
static void ext_w(Onnx__TensorProto *t, int64_t *dims, Onnx__StringStringEntryProto *e,
		  Onnx__StringStringEntryProto **ep, const char *loc, const char *off, const char *len)
{
	size_t n = 0;
	dims[0] = dims[1] = 2;
	tensor_init(t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	t->has_data_location = 1;
	t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
	const char *keys[3] = {"location", "offset", "length"};
	const char *vals[3] = {loc, off, len};
	for (int i = 0; i < 3; i++) {
		if (!vals[i])
			continue;
		onnx__string_string_entry_proto__init(&e[n]);
		e[n].key = (char *)keys[i];
		e[n].value = (char *)vals[i];
		ep[n] = &e[n];
		n++;
	}
	t->n_external_data = n;
	t->external_data = ep;
}

/* One external-data case in its own folder: DIR/<sub>/model.onnx. */
static void emit_ext(const char *sub, const char *loc, const char *off, const char *len)
{
	char rel[256];
	Onnx__TensorProto t;
	int64_t dims[2];
	Onnx__StringStringEntryProto e[3], *ep[3];
	make_dir(sub);
	ext_w(&t, dims, e, ep, loc, off, len);
	snprintf(rel, sizeof rel, "%s/model.onnx", sub);
	emit(rel, &t);
}

/* The data file of external cases: W's 16 bytes at offset 64 of 128. */
static void emit_data(const char *rel)
{
	uint8_t d[128] = {0};
	memcpy(d + 64, four, sizeof four);
	write_file(rel, d, sizeof d);
}

static void make_symlink(const char *target, const char *rel)
{
	char path[4096];
	path_of(path, sizeof path, rel);
	unlink(path);
	if (symlink(target, path) != 0)
		die("cannot create symlink", path);
}

static void make_fifo(const char *rel)
{
	char path[4096];
	path_of(path, sizeof path, rel);
	unlink(path);
	if (mkfifo(path, 0600) != 0)
		die("cannot create fifo", path);
}

/* ------------------------------------------------------------------ cases */

static void valid_cases(void)
{
	Onnx__TensorProto t;
	int64_t dims[2];
	size_t n;
	uint8_t *b;

	good_w(&t, dims);
	emit("valid.onnx", &t);

	/* the same W as float_data */
	tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	t.n_float_data = 4;
	t.float_data = (float *)four;
	emit("valid_typed.onnx", &t);

	/* external data inside the model's folder, and through a symlink that stays inside */
	emit_ext("valid_ext", "w.data", "64", "16");
	emit_data("valid_ext/w.data");
	emit_ext("valid_ext_link", "link.data", "64", "16");
	emit_data("valid_ext_link/real.data");
	make_symlink("real.data", "valid_ext_link/link.data");

	/* IR 3 (oldest accepted) */
	good_w(&t, dims);
	b = pack_model(&t, 3, &n);
	write_file("valid_ir3.onnx", b, n);
	free(b);
}

static void truncated_cases(void)
{
	Onnx__TensorProto t;
	int64_t dims[2];
	size_t n;
	uint8_t *b;
	char rel[64];
	/* Cut points as fractions of the file (in 1/8ths) and the last byte. */
	static const int eighths[] = {1, 2, 4, 6, 7};

	good_w(&t, dims);
	b = pack_model(&t, 8, &n);
	for (size_t i = 0; i < sizeof eighths / sizeof eighths[0]; i++) {
		snprintf(rel, sizeof rel, "trunc_%d8.onnx", eighths[i]);
		write_file(rel, b, n * (size_t)eighths[i] / 8);
	}
	write_file("trunc_last.onnx", b, n - 1);
	write_file("trunc_1.onnx", b, 1); /* inside the first varint */
	free(b);
}

static void random_case(void)
{
	uint8_t r[4096];
	uint64_t s = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < sizeof r; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		r[i] = (uint8_t)(s >> 24);
	}
	write_file("random.onnx", r, sizeof r);
	write_file("empty.onnx", r, 0);
}

static void wire_cases(void)
{
	wbuf b = {0}, g = {0}, tb = {0};

	/* graph (field 7, a message) encoded as a varint */
	put_model_head(&b);
	put_tag(&b, 7, 0);
	put_varint(&b, 5);
	write_file("wiretype_graph.onnx", b.p, b.n);
	b.n = 0;

	/* a group wire type (3), which ONNX never uses */
	put_model_head(&b);
	put_tag(&b, 7, 3);
	write_file("wiretype_group.onnx", b.p, b.n);
	b.n = 0;

	/* tensor dims (int64) as fixed32 inside an initializer */
	put_tag(&tb, 1, 5);
	put(&tb, "\x02\x00\x00\x00", 4);
	put_tag(&tb, 2, 0);
	put_varint(&tb, 1);
	put_str(&tb, 8, "W");
	put_str(&g, 2, "g");
	put_ld(&g, 5, tb.p, tb.n);
	put_model_head(&b);
	put_ld(&b, 7, g.p, g.n);
	write_file("wiretype_dims.onnx", b.p, b.n);
	b.n = g.n = tb.n = 0;

	/*
	 * A forged raw_data reference: the loader's private field number
	 * (536870911) written into a file, pointing far outside it. It must be
	 * dropped, leaving W without data (4 floats expected, none given).
	 */
	{
		uint8_t ref[16] = {0};
		ref[5] = 0x01; /* offset 2^40 */
		ref[8] = 16;   /* length 16 */
		put_tag(&tb, 1, 0);
		put_varint(&tb, 4);
		put_tag(&tb, 2, 0);
		put_varint(&tb, 1);
		put_str(&tb, 8, "W");
		put_ld(&tb, 536870911u, ref, sizeof ref);
		put_str(&g, 2, "g");
		put_ld(&g, 5, tb.p, tb.n);
		put_model_head(&b);
		put_ld(&b, 7, g.p, g.n);
		write_file("forged_ref.onnx", b.p, b.n);
	}
	b.n = g.n = tb.n = 0;

	/*
	 * Field number 0 hidden in a non-canonical tag (0x81 0x00: field 0,
	 * wire type 1) inside a graph input's TypeProto.Tensor. Protobuf
	 * forbids field 0; protobuf-c keeps it as an unknown field and
	 * re-encodes it canonically (0x01), which it then refuses to read,
	 * so accepting this file makes `convert` write an unloadable model.
	 */
	{
		wbuf tt = {0}, ty = {0}, vi = {0};
		put_tag(&tt, 1, 0);
		put_varint(&tt, 1);
		put(&tt, "\x81\x00\x00\x00\x00\x00\x00\x00\x00\x00", 10);
		put_ld(&ty, 1, tt.p, tt.n);
		put_str(&vi, 1, "X");
		put_ld(&vi, 2, ty.p, ty.n);
		put_str(&g, 2, "g");
		put_ld(&g, 11, vi.p, vi.n);
		put_model_head(&b);
		put_ld(&b, 7, g.p, g.n);
		write_file("field_zero.onnx", b.p, b.n);
		free(tt.p);
		free(ty.p);
		free(vi.p);
	}
	free(b.p);
	free(g.p);
	free(tb.p);
}

static void tensor_cases(void)
{
	Onnx__TensorProto t;
	int64_t dims[4];
	float f2[2] = {1, 2};

	/* product of dims overflows int64 (and size_t): 2^62 * 4 */
	dims[0] = (int64_t)1 << 62;
	dims[1] = 4;
	tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	t.has_raw_data = 1;
	t.raw_data.len = 16;
	t.raw_data.data = (uint8_t *)four;
	emit("dims_overflow_i64.onnx", &t);

	/* element count fits (2^62) but bytes (x4) overflow size_t */
	dims[0] = (int64_t)1 << 62;
	tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, dims);
	t.has_raw_data = 1;
	t.raw_data.len = 16;
	t.raw_data.data = (uint8_t *)four;
	emit("dims_overflow_bytes.onnx", &t);

	/* 2^32 * 2^32 elements: wraps to 0 in 64-bit unchecked math */
	dims[0] = dims[1] = (int64_t)1 << 32;
	tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	t.has_raw_data = 1;
	t.raw_data.len = 0;
	t.raw_data.data = NULL;
	emit("dims_overflow_wrap.onnx", &t);

	/* raw_data shorter than dims: 4x4 floats need 64 bytes, 16 given */
	dims[0] = dims[1] = 4;
	tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	t.has_raw_data = 1;
	t.raw_data.len = 16;
	t.raw_data.data = (uint8_t *)four;
	emit("raw_short.onnx", &t);

	/* ~100 bytes claiming 1e12 floats */
	dims[0] = dims[1] = 1000000;
	tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	t.has_raw_data = 1;
	t.raw_data.len = 8;
	t.raw_data.data = (uint8_t *)four;
	emit("huge_raw.onnx", &t);
	tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	t.n_float_data = 2;
	t.float_data = f2;
	emit("huge_float_data.onnx", &t);
	/* ... and the same claim with no data field at all */
	tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	emit("huge_nodata.onnx", &t);

	/* negative dims */
	dims[0] = -1;
	dims[1] = 4;
	tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	t.has_raw_data = 1;
	t.raw_data.len = 16;
	t.raw_data.data = (uint8_t *)four;
	emit("dims_negative.onnx", &t);

	/* bad element types */
	dims[0] = dims[1] = 2;
	tensor_init(&t, "W", 0, 2, dims);
	t.has_raw_data = 1;
	t.raw_data.len = 16;
	t.raw_data.data = (uint8_t *)four;
	emit("dtype_0.onnx", &t);
	t.data_type = 99;
	emit("dtype_99.onnx", &t);
	t.data_type = -5;
	emit("dtype_neg.onnx", &t);

	/* rank 65 (one past OQ_MAX_RANK), all dims 1 */
	{
		int64_t d65[65];
		float one = 1;
		for (int i = 0; i < 65; i++)
			d65[i] = 1;
		tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 65, d65);
		t.has_raw_data = 1;
		t.raw_data.len = 4;
		t.raw_data.data = (uint8_t *)&one;
		emit("rank_65.onnx", &t);
	}

	/* int4 via int32_data: 4 elements = 2 packed bytes, 3 entries given */
	{
		int32_t packed[3] = {0x21, 0x43, 0x65};
		tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__INT4, 2, dims);
		t.n_int32_data = 3;
		t.int32_data = packed;
		emit("int4_count.onnx", &t);
	}

	/* a segmented tensor: valid ONNX, unsupported by onnxq (exit 3) */
	{
		Onnx__TensorProto__Segment seg;
		onnx__tensor_proto__segment__init(&seg);
		seg.has_begin = seg.has_end = 1;
		seg.begin = 0;
		seg.end = 4;
		good_w(&t, dims);
		t.segment = &seg;
		emit("segment.onnx", &t);
	}

	/* string tensor in raw_data (forbidden by the spec) */
	tensor_init(&t, "W", ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 2, dims);
	t.has_raw_data = 1;
	t.raw_data.len = 16;
	t.raw_data.data = (uint8_t *)four;
	emit("string_raw.onnx", &t);

	/* a name that would inject a second line and a terminal escape into the message */
	dims[0] = dims[1] = 4;
	tensor_init(&t, "W\n\033[2Jinjected line", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	t.has_raw_data = 1;
	t.raw_data.len = 16;
	t.raw_data.data = (uint8_t *)four;
	emit("ctrl_name.onnx", &t);
	dims[0] = dims[1] = 2;

	/* initializer without a name */
	good_w(&t, dims);
	t.name = "";
	emit("init_noname.onnx", &t);
}

static void model_cases(void)
{
	Onnx__TensorProto t;
	int64_t dims[2];
	size_t n;
	uint8_t *b;
	wbuf w = {0};

	/* IR version 2: valid ONNX but older than onnxq supports (exit 3) */
	good_w(&t, dims);
	b = pack_model(&t, 2, &n);
	write_file("ir_2.onnx", b, n);
	free(b);

	/* no ir_version at all, no graph */
	put_str(&w, 2, "mkbad");
	write_file("no_ir.onnx", w.p, w.n);
	w.n = 0;
	put_model_head(&w);
	write_file("no_graph.onnx", w.p, w.n);
	free(w.p);

	/* a duplicate initializer */
	{
		Onnx__TensorProto t2;
		int64_t d2[2];
		Onnx__OperatorSetIdProto op;
		Onnx__OperatorSetIdProto *ops[1] = {&op};
		Onnx__TensorProto *inits[2] = {&t, &t2};
		Onnx__GraphProto g;
		Onnx__ModelProto m;
		good_w(&t2, d2);
		onnx__operator_set_id_proto__init(&op);
		op.has_version = 1;
		op.version = 17;
		onnx__graph_proto__init(&g);
		g.name = "g";
		g.n_initializer = 2;
		g.initializer = inits;
		onnx__model_proto__init(&m);
		m.has_ir_version = 1;
		m.ir_version = 8;
		m.n_opset_import = 1;
		m.opset_import = ops;
		m.graph = &g;
		n = onnx__model_proto__get_packed_size(&m);
		b = malloc(n);
		if (!b)
			exit(1);
		onnx__model_proto__pack(&m, b);
		write_file("init_twice.onnx", b, n);
		free(b);
	}
}

/*
 * `levels` graphs nested through If.then_branch, built from the inside out
 * as wire bytes (no recursion here, so the generator itself is safe).
 */
static void nested_case(const char *rel, int levels)
{
	wbuf g = {0}, node = {0}, attr = {0}, m = {0};

	put_str(&g, 2, "leaf");
	for (int i = 0; i < levels; i++) {
		attr.n = node.n = 0;
		put_str(&attr, 1, "then_branch");
		put_tag(&attr, 20, 0);
		put_varint(&attr, 5); /* GRAPH */
		put_ld(&attr, 6, g.p, g.n);
		put_str(&node, 4, "If");
		put_ld(&node, 5, attr.p, attr.n);
		g.n = 0;
		put_ld(&g, 1, node.p, node.n);
	}
	put_model_head(&m);
	put_ld(&m, 7, g.p, g.n);
	write_file(rel, m.p, m.n);
	free(g.p);
	free(node.p);
	free(attr.p);
	free(m.p);
}

/* A graph input whose type is sequence(sequence(...(tensor))) `levels` deep. */
static void nested_type_case(const char *rel, int levels)
{
	wbuf tp = {0}, tmp = {0}, vi = {0}, g = {0}, m = {0};

	put_ld(&tp, 1, "\x08\x01", 2); /* tensor_type { elem_type: FLOAT } */
	for (int i = 0; i < levels; i++) {
		tmp.n = 0;
		put_ld(&tmp, 1, tp.p, tp.n); /* Sequence.elem_type */
		tp.n = 0;
		put_ld(&tp, 4, tmp.p, tmp.n); /* TypeProto.sequence_type */
	}
	put_str(&vi, 1, "X");
	put_ld(&vi, 2, tp.p, tp.n);
	put_str(&g, 2, "g");
	put_ld(&g, 11, vi.p, vi.n);
	put_model_head(&m);
	put_ld(&m, 7, g.p, g.n);
	write_file(rel, m.p, m.n);
	free(tp.p);
	free(tmp.p);
	free(vi.p);
	free(g.p);
	free(m.p);
}

static void external_cases(void)
{
	emit_data("outside.data"); /* the file that escaping cases try to reach */

	emit_ext("ext_abs", "/etc/passwd", "0", "16");
	emit_ext("ext_dotdot", "../outside.data", "64", "16");
	emit_ext("ext_dotdot_mid", "sub/../../outside.data", "64", "16");
	emit_ext("ext_symlink", "link.data", "64", "16");
	make_symlink("../outside.data", "ext_symlink/link.data");
	emit_ext("ext_offset", "w.data", "4096", "16");
	emit_data("ext_offset/w.data");
	emit_ext("ext_offset_huge", "w.data", "18446744073709551615", "16");
	emit_data("ext_offset_huge/w.data");
	emit_ext("ext_offset_neg", "w.data", "-64", "16");
	emit_data("ext_offset_neg/w.data");
	emit_ext("ext_tail", "w.data", "120", "16"); /* starts inside, runs past the end */
	emit_data("ext_tail/w.data");
	emit_ext("ext_length", "w.data", "64", "8");
	emit_data("ext_length/w.data");
	emit_ext("ext_missing", "nope.data", "0", "16");
	emit_ext("ext_noloc", NULL, "0", "16");
	emit_ext("ext_ctrl", "w\n\033[31minjected.data", "0", "16");
	emit_ext("ext_dir", "sub", "0", "16");
	make_dir("ext_dir/sub");
	emit_ext("ext_fifo", "pipe.data", "0", "16");
	make_fifo("ext_fifo/pipe.data");

	/* 1e12 floats claimed, external file of 128 bytes */
	{
		Onnx__TensorProto t;
		int64_t dims[2];
		Onnx__StringStringEntryProto e[3], *ep[3];
		make_dir("ext_huge");
		ext_w(&t, dims, e, ep, "w.data", "0", NULL);
		dims[0] = dims[1] = 1000000;
		emit("ext_huge/model.onnx", &t);
		emit_data("ext_huge/w.data");
	}
}

static void path_cases(void)
{
	make_dir("adir.onnx");
	make_fifo("fifo.onnx");
}

int main(int argc, char **argv)
{
	struct stat st;

	if (argc != 2) {
		fprintf(stderr, "usage: mkbad DIR\n");
		return 1;
	}
	root = argv[1];
	if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "mkbad: '%s' is not a folder\n", root);
		return 1;
	}
	valid_cases();
	truncated_cases();
	random_case();
	wire_cases();
	tensor_cases();
	model_cases();
	nested_case("nested_10000.onnx", 10000);
	nested_case("nested_65.onnx", 65);
	nested_case("nested_8.onnx", 8); /* fine: shallow nesting loads */
	nested_type_case("nested_type.onnx", 10000);
	external_cases();
	path_cases();
	return 0;
}
