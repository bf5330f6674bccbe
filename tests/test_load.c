/*
 * test_load.c - unit tests of the ONNX loader and saver (onnx_load.c,
 * onnx_save.c) on hand-built protobuf bytes.
 *
 * Models are assembled with the protobuf-c structs of onnx.pb-c.h and
 * packed, then loaded from memory. Expected payload bytes are written out
 * by hand (IEEE-754 bit patterns, little-endian, sub-byte types packed low
 * bits first), never computed by the code under test. Covered: every
 * typed storage field (float_data, int32_data packing for 8/16-bit, float8,
 * 4- and 2-bit types, int64_data, double_data, uint64_data), raw_data zero
 * copy, IR 3 inputs that repeat initializers, Constant tensors, outer-scope
 * references from If bodies, save -> load equality for each dtype, atomic
 * save failure and external-data save.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/ir/ir.h"
#include "onnx.pb-c.h"
#include "src/io/onnx_io.h"

/* ---------------------------------------------------------------- helpers */

/* Packs a ModelProto (IR `ir`, opset 17) around `g`. Caller frees. */
static uint8_t *pack_graph(Onnx__GraphProto *g, int64_t ir, size_t *len)
{
	Onnx__OperatorSetIdProto op;
	Onnx__OperatorSetIdProto *ops[1] = {&op};
	Onnx__ModelProto m;
	uint8_t *b;

	onnx__operator_set_id_proto__init(&op);
	op.domain = "";
	op.has_version = 1;
	op.version = 17;
	onnx__model_proto__init(&m);
	m.has_ir_version = 1;
	m.ir_version = ir;
	m.producer_name = "test_load";
	m.n_opset_import = 1;
	m.opset_import = ops;
	m.graph = g;
	*len = onnx__model_proto__get_packed_size(&m);
	b = malloc(*len);
	cr_assert_not_null(b);
	onnx__model_proto__pack(&m, b);
	return b;
}

/* A graph holding only the given initializers. */
static uint8_t *pack_inits(Onnx__TensorProto **t, size_t n, size_t *len)
{
	Onnx__GraphProto g;
	onnx__graph_proto__init(&g);
	g.name = "g";
	g.n_initializer = n;
	g.initializer = t;
	return pack_graph(&g, 8, len);
}

static void tensor_init(Onnx__TensorProto *t, const char *name, int dtype, size_t rank,
			int64_t *dims)
{
	onnx__tensor_proto__init(t);
	t->name = (char *)name;
	t->has_data_type = 1;
	t->data_type = dtype;
	t->n_dims = rank;
	t->dims = dims;
}

static oq_model *load_ok(const uint8_t *b, size_t n)
{
	oq_model *m = NULL;
	oq_diag d;
	int rc;
	oq_diag_init(&d);
	rc = oq_model_load_buffer(b, n, NULL, &m, &d);
	cr_assert_eq(rc, OQ_OK, "load failed (%d): %s", rc, d.msg);
	cr_assert_not_null(m);
	return m;
}

/* Loads one typed tensor and compares its payload with `want`. */
static void expect_typed(Onnx__TensorProto *t, const uint8_t *want, size_t nwant)
{
	size_t n;
	uint8_t *b = pack_inits(&t, 1, &n);
	oq_model *m = load_ok(b, n);
	const oq_tensor *x;

	cr_assert_eq(m->graph->n_inits, 1);
	x = m->graph->inits[0]->init;
	cr_assert_eq(x->dtype, t->data_type);
	cr_assert_eq(x->nbytes, nwant, "dtype %d: %zu bytes, want %zu", t->data_type, x->nbytes, nwant);
	cr_assert_arr_eq(x->data, want, nwant, "dtype %d: payload differs", t->data_type);
	oq_model_free(m);
	free(b);
}

/* Loading must fail with OQ_EINVAL (and one message). */
static void expect_invalid(Onnx__TensorProto *t)
{
	size_t n;
	uint8_t *b = pack_inits(&t, 1, &n);
	oq_model *m = NULL;
	oq_diag d;
	int rc;
	oq_diag_init(&d);
	rc = oq_model_load_buffer(b, n, NULL, &m, &d);
	cr_assert_eq(rc, OQ_EINVAL, "dtype %d: load returned %d, want OQ_EINVAL", t->data_type, rc);
	cr_assert_null(m);
	cr_assert_neq(d.msg[0], '\0');
	free(b);
}

static char tmpdir[64];

static void make_tmpdir(void)
{
	strcpy(tmpdir, "/tmp/oq-test-load.XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	cr_assert_eq(system(cmd), 0);
}

static uint8_t *read_file(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b;
	long l;
	cr_assert_not_null(f, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	l = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t)l + 1);
	cr_assert_not_null(b);
	cr_assert_eq(fread(b, 1, (size_t)l, f), (size_t)l);
	fclose(f);
	*n = (size_t)l;
	return b;
}

/* ----------------------------------------------------- typed-field decoding */

Test(typed, float_data)
{
	Onnx__TensorProto t;
	int64_t dims[1] = {3};
	float v[3] = {1.5f, -2.0f, 0.0f};
	/* 1.5 = 0x3FC00000, -2 = 0xC0000000, little-endian */
	static const uint8_t want[12] = {0, 0, 0xC0, 0x3F, 0, 0, 0, 0xC0, 0, 0, 0, 0};
	tensor_init(&t, "t", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, dims);
	t.n_float_data = 3;
	t.float_data = v;
	expect_typed(&t, want, sizeof want);
}

Test(typed, complex64_float_data)
{
	Onnx__TensorProto t;
	int64_t dims[1] = {1};
	float v[2] = {1.0f, 2.0f}; /* real, imaginary */
	static const uint8_t want[8] = {0, 0, 0x80, 0x3F, 0, 0, 0, 0x40};
	tensor_init(&t, "t", ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64, 1, dims);
	t.n_float_data = 2;
	t.float_data = v;
	expect_typed(&t, want, sizeof want);
}

Test(typed, int64_data)
{
	Onnx__TensorProto t;
	int64_t dims[1] = {2};
	int64_t v[2] = {-1, 0x0102030405060708};
	static const uint8_t want[16] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
					 8, 7, 6, 5, 4, 3, 2, 1};
	tensor_init(&t, "t", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, dims);
	t.n_int64_data = 2;
	t.int64_data = v;
	expect_typed(&t, want, sizeof want);
}

Test(typed, double_data)
{
	Onnx__TensorProto t;
	int64_t dims[1] = {2};
	double v[2] = {1.0, -0.5};
	/* 1.0 = 0x3FF0000000000000, -0.5 = 0xBFE0000000000000 */
	static const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0xF0, 0x3F, 0, 0, 0, 0, 0, 0, 0xE0, 0xBF};
	tensor_init(&t, "t", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, 1, dims);
	t.n_double_data = 2;
	t.double_data = v;
	expect_typed(&t, want, sizeof want);
}

Test(typed, uint64_data_uint64)
{
	Onnx__TensorProto t;
	int64_t dims[1] = {2};
	uint64_t v[2] = {0x8000000000000001ull, 5};
	static const uint8_t want[16] = {1, 0, 0, 0, 0, 0, 0, 0x80, 5, 0, 0, 0, 0, 0, 0, 0};
	tensor_init(&t, "t", ONNX__TENSOR_PROTO__DATA_TYPE__UINT64, 1, dims);
	t.n_uint64_data = 2;
	t.uint64_data = v;
	expect_typed(&t, want, sizeof want);
}

Test(typed, uint64_data_uint32)
{
	Onnx__TensorProto t;
	int64_t dims[1] = {2};
	uint64_t v[2] = {0xDEADBEEFu, 7};
	static const uint8_t want[8] = {0xEF, 0xBE, 0xAD, 0xDE, 7, 0, 0, 0};
	tensor_init(&t, "t", ONNX__TENSOR_PROTO__DATA_TYPE__UINT32, 1, dims);
	t.n_uint64_data = 2;
	t.uint64_data = v;
	expect_typed(&t, want, sizeof want);
}

Test(typed, int32_data_int32)
{
	Onnx__TensorProto t;
	int64_t dims[1] = {2};
	int32_t v[2] = {-2, 0x01020304};
	static const uint8_t want[8] = {0xFE, 0xFF, 0xFF, 0xFF, 4, 3, 2, 1};
	tensor_init(&t, "t", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, dims);
	t.n_int32_data = 2;
	t.int32_data = v;
	expect_typed(&t, want, sizeof want);
}

/* One element per int32_data entry, truncated to the element width. */
static void expect_int32_packing(int dtype, const int32_t *v, size_t n, const uint8_t *want, size_t nwant)
{
	Onnx__TensorProto t;
	int64_t dims[1] = {(int64_t)n};
	tensor_init(&t, "t", dtype, 1, dims);
	t.n_int32_data = n;
	t.int32_data = (int32_t *)v;
	expect_typed(&t, want, nwant);
}

Test(typed, int32_data_8bit)
{
	static const int32_t i8[3] = {-1, 127, -128};
	static const uint8_t wi8[3] = {0xFF, 0x7F, 0x80};
	static const int32_t u8[2] = {255, 1};
	static const uint8_t wu8[2] = {0xFF, 0x01};
	static const int32_t b[3] = {1, 0, 1};
	static const uint8_t wb[3] = {1, 0, 1};
	expect_int32_packing(ONNX__TENSOR_PROTO__DATA_TYPE__INT8, i8, 3, wi8, 3);
	expect_int32_packing(ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, u8, 2, wu8, 2);
	expect_int32_packing(ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, b, 3, wb, 3);
}

Test(typed, int32_data_16bit)
{
	static const int32_t i16[2] = {-2, 0x1234};
	static const uint8_t wi16[4] = {0xFE, 0xFF, 0x34, 0x12};
	static const int32_t u16[2] = {65535, 0x0102};
	static const uint8_t wu16[4] = {0xFF, 0xFF, 0x02, 0x01};
	expect_int32_packing(ONNX__TENSOR_PROTO__DATA_TYPE__INT16, i16, 2, wi16, 4);
	expect_int32_packing(ONNX__TENSOR_PROTO__DATA_TYPE__UINT16, u16, 2, wu16, 4);
}

Test(typed, int32_data_float16_bits)
{
	/* fp16 bit patterns: 1.0 = 0x3C00, -2.0 = 0xC000, +inf = 0x7C00 */
	static const int32_t h[3] = {0x3C00, 0xC000, 0x7C00};
	static const uint8_t wh[6] = {0x00, 0x3C, 0x00, 0xC0, 0x00, 0x7C};
	/* bf16: 1.0 = 0x3F80, -0.5 = 0xBF00 */
	static const int32_t bf[2] = {0x3F80, 0xBF00};
	static const uint8_t wbf[4] = {0x80, 0x3F, 0x00, 0xBF};
	expect_int32_packing(ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, h, 3, wh, 6);
	expect_int32_packing(ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16, bf, 2, wbf, 4);
}

Test(typed, int32_data_float8)
{
	/* e4m3fn: 1.0 = 0x38, -2.0 = 0xC0, NaN = 0x7F; one byte each */
	static const int32_t f8[3] = {0x38, 0xC0, 0x7F};
	static const uint8_t w8[3] = {0x38, 0xC0, 0x7F};
	static const int dts[] = {
		ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E4M3FN, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E4M3FNUZ,
		ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E5M2, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E5M2FNUZ,
		ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT8E8M0,
	};
	for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
		expect_int32_packing(dts[i], f8, 3, w8, 3);
}

/* Sub-byte: dims count elements, int32_data holds one packed byte per entry. */
static oq_model *load_packed(int dtype, int64_t nelem, const int32_t *bytes, size_t nbytes,
			     const uint8_t *want)
{
	Onnx__TensorProto t, *tp = &t;
	int64_t dims[1] = {nelem};
	size_t n;
	uint8_t *b;
	oq_model *m;
	const oq_tensor *x;

	tensor_init(&t, "t", dtype, 1, dims);
	t.n_int32_data = nbytes;
	t.int32_data = (int32_t *)bytes;
	b = pack_inits(&tp, 1, &n);
	m = load_ok(b, n);
	free(b);
	x = m->graph->inits[0]->init;
	cr_assert_eq(x->nelem, (size_t)nelem);
	cr_assert_eq(x->nbytes, nbytes);
	cr_assert_arr_eq(x->data, want, nbytes);
	return m;
}

Test(typed, int4_low_nibble_first)
{
	/* int4 [1, 2, -1]: byte0 = 2<<4 | 1 = 0x21, byte1 = low nibble -1 = 0xF, high nibble pad 0 */
	static const int32_t in[2] = {0x21, 0x0F};
	static const uint8_t want[2] = {0x21, 0x0F};
	oq_model *m = load_packed(ONNX__TENSOR_PROTO__DATA_TYPE__INT4, 3, in, 2, want);
	const oq_tensor *x = m->graph->inits[0]->init;
	cr_assert_eq(oq_tensor_get_int(x, 0), 1);
	cr_assert_eq(oq_tensor_get_int(x, 1), 2);
	cr_assert_eq(oq_tensor_get_int(x, 2), -1);
	oq_model_free(m);
}

Test(typed, uint4_and_float4)
{
	/* uint4 [10, 11, 12, 13] = 0xBA, 0xDC */
	static const int32_t in[2] = {0xBA, 0xDC};
	static const uint8_t want[2] = {0xBA, 0xDC};
	oq_model *m = load_packed(ONNX__TENSOR_PROTO__DATA_TYPE__UINT4, 4, in, 2, want);
	const oq_tensor *x = m->graph->inits[0]->init;
	cr_assert_eq(oq_tensor_get_int(x, 0), 10);
	cr_assert_eq(oq_tensor_get_int(x, 3), 13);
	oq_model_free(m);
	/* float4e2m1 [1.0 (0x2), 0.5 (0x1)] = 0x12 */
	static const int32_t f4[1] = {0x12};
	static const uint8_t wf4[1] = {0x12};
	oq_model_free(load_packed(ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT4E2M1, 2, f4, 1, wf4));
}

Test(typed, int2_and_uint2)
{
	/* int2 [0, 1, -2, -1, 1]: byte0 = 0b11'10'01'00 = 0xE4, byte1 = 0b01 */
	static const int32_t in[2] = {0xE4, 0x01};
	static const uint8_t want[2] = {0xE4, 0x01};
	oq_model *m = load_packed(ONNX__TENSOR_PROTO__DATA_TYPE__INT2, 5, in, 2, want);
	const oq_tensor *x = m->graph->inits[0]->init;
	static const int64_t vals[5] = {0, 1, -2, -1, 1};
	for (size_t i = 0; i < 5; i++)
		cr_assert_eq(oq_tensor_get_int(x, i), vals[i], "int2 element %zu", i);
	oq_model_free(m);
	/* uint2 [0, 1, 2, 3] = 0xE4 */
	static const int32_t u[1] = {0xE4};
	static const uint8_t wu[1] = {0xE4};
	m = load_packed(ONNX__TENSOR_PROTO__DATA_TYPE__UINT2, 4, u, 1, wu);
	x = m->graph->inits[0]->init;
	for (size_t i = 0; i < 4; i++)
		cr_assert_eq(oq_tensor_get_int(x, i), (int64_t)i, "uint2 element %zu", i);
	oq_model_free(m);
}

Test(typed, wrong_counts_are_invalid)
{
	Onnx__TensorProto t;
	int64_t dims[1] = {3};
	float f[2] = {1, 2};
	int32_t i[3] = {1, 2, 3};
	/* 3 floats declared, 2 given */
	tensor_init(&t, "t", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, dims);
	t.n_float_data = 2;
	t.float_data = f;
	expect_invalid(&t);
	/* int4 x3 packs into 2 bytes: one entry per element (3) is wrong */
	tensor_init(&t, "t", ONNX__TENSOR_PROTO__DATA_TYPE__INT4, 1, dims);
	t.n_int32_data = 3;
	t.int32_data = i;
	expect_invalid(&t);
	/* float stored in int64_data: wrong field */
	int64_t l[3] = {1, 2, 3};
	tensor_init(&t, "t", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, dims);
	t.n_int64_data = 3;
	t.int64_data = l;
	expect_invalid(&t);
}

/* -------------------------------------------------------------- raw_data */

Test(raw, zero_copy_points_into_buffer)
{
	Onnx__TensorProto t, *tp = &t;
	int64_t dims[2] = {2, 2};
	static const uint8_t payload[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	size_t n;
	uint8_t *b;
	oq_model *m;
	const oq_tensor *x;

	tensor_init(&t, "w", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, dims);
	t.has_raw_data = 1;
	t.raw_data.len = sizeof payload;
	t.raw_data.data = (uint8_t *)payload;
	b = pack_inits(&tp, 1, &n);
	m = load_ok(b, n);
	x = m->graph->inits[0]->init;
	cr_assert_eq(x->owned, 0, "raw_data was copied");
	cr_assert((const uint8_t *)x->data >= b && (const uint8_t *)x->data + 16 <= b + n,
		  "tensor data does not point into the caller's buffer");
	cr_assert_arr_eq(x->data, payload, 16);
	cr_assert_eq(x->nelem, 4);
	oq_model_free(m);
	free(b);
}

/* ----------------------------------------------------------- graph shapes */

/* Value info "name" of float tensors with the given rank (dims unknown). */
static Onnx__ValueInfoProto *vinfo(Onnx__ValueInfoProto *v, Onnx__TypeProto *tp, Onnx__TypeProto__Tensor *tt,
				   const char *name, int dtype)
{
	onnx__type_proto__tensor__init(tt);
	tt->has_elem_type = 1;
	tt->elem_type = dtype;
	onnx__type_proto__init(tp);
	tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
	tp->tensor_type = tt;
	onnx__value_info_proto__init(v);
	v->name = (char *)name;
	v->type = tp;
	return v;
}

Test(graph, ir3_inputs_repeat_initializers)
{
	Onnx__TensorProto w, *inits[1] = {&w};
	int64_t dims[1] = {2};
	float wv[2] = {3, 4};
	Onnx__ValueInfoProto vi[3], *in[2] = {&vi[0], &vi[1]}, *out[1] = {&vi[2]};
	Onnx__TypeProto tp[3];
	Onnx__TypeProto__Tensor tt[3];
	Onnx__NodeProto node, *nodes[1] = {&node};
	char *nin[2] = {"X", "W"}, *nout[1] = {"Y"};
	Onnx__GraphProto g;
	size_t n;
	uint8_t *b;
	oq_model *m;
	oq_value *vw;

	tensor_init(&w, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, dims);
	w.n_float_data = 2;
	w.float_data = wv;
	vinfo(&vi[0], &tp[0], &tt[0], "X", 1);
	vinfo(&vi[1], &tp[1], &tt[1], "W", 1);
	vinfo(&vi[2], &tp[2], &tt[2], "Y", 1);
	onnx__node_proto__init(&node);
	node.op_type = "Add";
	node.n_input = 2;
	node.input = nin;
	node.n_output = 1;
	node.output = nout;
	onnx__graph_proto__init(&g);
	g.name = "g";
	g.n_node = 1;
	g.node = nodes;
	g.n_initializer = 1;
	g.initializer = inits;
	g.n_input = 2;
	g.input = in;
	g.n_output = 1;
	g.output = out;
	b = pack_graph(&g, 3, &n);
	m = load_ok(b, n);
	cr_assert_eq(m->ir_version, 3);
	cr_assert_eq(m->graph->n_inputs, 2);
	cr_assert_eq(m->graph->n_inits, 1);
	vw = oq_graph_find(m->graph, "W");
	cr_assert_not_null(vw);
	/* one value: both a graph input and an initializer */
	cr_assert_eq(m->graph->inputs[1], vw);
	cr_assert_eq(m->graph->inits[0], vw);
	cr_assert(vw->flags & OQ_V_INPUT);
	cr_assert_not_null(vw->init);
	cr_assert_eq(m->graph->nodes[0]->inputs[1], vw);
	oq_model_free(m);
	free(b);
}

Test(graph, constant_node_tensor)
{
	Onnx__TensorProto t;
	int64_t dims[1] = {2};
	static const uint8_t payload[8] = {0, 0, 0x80, 0x3F, 0, 0, 0, 0x40}; /* 1.0f, 2.0f */
	Onnx__AttributeProto a, *attrs[1] = {&a};
	Onnx__NodeProto node, *nodes[1] = {&node};
	char *nout[1] = {"C"};
	Onnx__GraphProto g;
	size_t n;
	uint8_t *b;
	oq_model *m;
	const oq_attr *at;

	tensor_init(&t, "", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, dims);
	t.has_raw_data = 1;
	t.raw_data.len = 8;
	t.raw_data.data = (uint8_t *)payload;
	onnx__attribute_proto__init(&a);
	a.name = "value";
	a.has_type = 1;
	a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
	a.t = &t;
	onnx__node_proto__init(&node);
	node.op_type = "Constant";
	node.name = "c";
	node.n_output = 1;
	node.output = nout;
	node.n_attribute = 1;
	node.attribute = attrs;
	onnx__graph_proto__init(&g);
	g.name = "g";
	g.n_node = 1;
	g.node = nodes;
	b = pack_graph(&g, 8, &n);
	m = load_ok(b, n);
	cr_assert_eq(m->graph->n_nodes, 1);
	at = oq_node_attr(m->graph->nodes[0], "value");
	cr_assert_not_null(at);
	cr_assert_eq(at->type, OQ_ATTR_TENSOR);
	cr_assert_not_null(at->t);
	cr_assert_eq(at->t->dtype, OQ_DT_FLOAT);
	cr_assert_eq(at->t->rank, 1);
	cr_assert_eq(at->t->dims[0], 2);
	cr_assert_eq(at->t->nbytes, 8);
	cr_assert_arr_eq(at->t->data, payload, 8);
	cr_assert_eq(m->graph->nodes[0]->outputs[0]->producer, m->graph->nodes[0]);
	oq_model_free(m);
	free(b);
}

/* A STRING attribute whose value field is absent (type set, no `s`) must
 * still read as a C string: kernels strcmp it (fuzz-found, Resize mode). */
Test(graph, string_attr_without_value_is_empty)
{
	Onnx__AttributeProto a, *attrs[1] = {&a};
	Onnx__NodeProto node, *nodes[1] = {&node};
	char *nin[1] = {"X"}, *nout[1] = {"Y"};
	Onnx__GraphProto g;
	size_t n;
	uint8_t *b;
	oq_model *m;
	const oq_attr *at;

	onnx__attribute_proto__init(&a);
	a.name = "mode";
	a.has_type = 1;
	a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
	onnx__node_proto__init(&node);
	node.op_type = "Resize";
	node.name = "r";
	node.n_input = 1;
	node.input = nin;
	node.n_output = 1;
	node.output = nout;
	node.n_attribute = 1;
	node.attribute = attrs;
	onnx__graph_proto__init(&g);
	g.name = "g";
	g.n_node = 1;
	g.node = nodes;
	b = pack_graph(&g, 8, &n);
	m = load_ok(b, n);
	at = oq_node_attr(m->graph->nodes[0], "mode");
	cr_assert_not_null(at);
	cr_assert_eq(at->type, OQ_ATTR_STRING);
	cr_assert_not_null(at->s.p);
	cr_assert_str_eq(at->s.p, "");
	cr_assert_eq(at->s.len, 0);
	oq_model_free(m);
	free(b);
}

Test(graph, if_body_links_outer_value)
{
	Onnx__TensorProto w, *inits[1] = {&w};
	int64_t dims[1] = {1};
	float wv[1] = {5};
	Onnx__ValueInfoProto vi[4];
	Onnx__TypeProto tp[4];
	Onnx__TypeProto__Tensor tt[4];
	Onnx__ValueInfoProto *gin[1] = {&vi[0]}, *gout[1] = {&vi[1]};
	Onnx__ValueInfoProto *tout[1] = {&vi[2]}, *eout[1] = {&vi[3]};
	/* then: T = Identity(W) (W from the outer graph); else: E = Identity(W) */
	Onnx__NodeProto tn, en, ifn, *tns[1] = {&tn}, *ens[1] = {&en}, *nodes[1] = {&ifn};
	char *tin[1] = {"W"}, *tnout[1] = {"T"}, *enout[1] = {"E"}, *ifin[1] = {"cond"},
	     *ifout[1] = {"Y"};
	Onnx__GraphProto tg, eg, g;
	Onnx__AttributeProto at, ae, *attrs[2] = {&at, &ae};
	size_t n;
	uint8_t *b;
	oq_model *m;
	oq_graph *sub;
	oq_value *inner, *outer;

	tensor_init(&w, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, dims);
	w.n_float_data = 1;
	w.float_data = wv;
	vinfo(&vi[0], &tp[0], &tt[0], "cond", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL);
	vinfo(&vi[1], &tp[1], &tt[1], "Y", 1);
	vinfo(&vi[2], &tp[2], &tt[2], "T", 1);
	vinfo(&vi[3], &tp[3], &tt[3], "E", 1);
	onnx__node_proto__init(&tn);
	tn.op_type = "Identity";
	tn.n_input = 1;
	tn.input = tin;
	tn.n_output = 1;
	tn.output = tnout;
	en = tn;
	en.output = enout;
	onnx__graph_proto__init(&tg);
	tg.name = "then";
	tg.n_node = 1;
	tg.node = tns;
	tg.n_output = 1;
	tg.output = tout;
	eg = tg;
	eg.name = "else";
	eg.node = ens;
	eg.output = eout;
	onnx__attribute_proto__init(&at);
	at.name = "then_branch";
	at.has_type = 1;
	at.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
	at.g = &tg;
	ae = at;
	ae.name = "else_branch";
	ae.g = &eg;
	onnx__node_proto__init(&ifn);
	ifn.op_type = "If";
	ifn.n_input = 1;
	ifn.input = ifin;
	ifn.n_output = 1;
	ifn.output = ifout;
	ifn.n_attribute = 2;
	ifn.attribute = attrs;
	onnx__graph_proto__init(&g);
	g.name = "g";
	g.n_node = 1;
	g.node = nodes;
	g.n_initializer = 1;
	g.initializer = inits;
	g.n_input = 1;
	g.input = gin;
	g.n_output = 1;
	g.output = gout;
	b = pack_graph(&g, 8, &n);
	m = load_ok(b, n);
	outer = oq_graph_find(m->graph, "W");
	cr_assert_not_null(outer);
	for (int k = 0; k < 2; k++) {
		const oq_attr *a = oq_node_attr(m->graph->nodes[0], k ? "else_branch" : "then_branch");
		cr_assert_not_null(a);
		cr_assert_eq(a->type, OQ_ATTR_GRAPH);
		sub = a->g;
		cr_assert_not_null(sub);
		cr_assert_eq(sub->parent, m->graph);
		inner = sub->nodes[0]->inputs[0];
		cr_assert_not_null(inner);
		cr_assert_eq(inner->graph, sub);
		cr_assert(inner->flags & OQ_V_OUTER, "body input W is not marked outer");
		cr_assert_eq(inner->outer, outer, "body's W does not link to the parent's W");
		cr_assert_eq(oq_value_resolve(inner), outer);
		cr_assert_null(oq_graph_find(m->graph, "T"), "a body value leaked into the parent scope");
	}
	oq_model_free(m);
	free(b);
}

/* ----------------------------------------------------------- save / load */

/* One raw_data tensor of every non-string dtype, sized 5 elements (odd, so sub-byte types pad). */
#define N_DT 25
static int all_dtypes[N_DT];

static uint8_t *pack_every_dtype(Onnx__TensorProto *ts, Onnx__TensorProto **tps, int64_t *dims,
				 uint8_t (*payload)[96], char (*names)[16], size_t *len)
{
	size_t k = 0;
	for (int dt = 1; dt <= 26; dt++) {
		size_t nb;
		if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__STRING)
			continue;
		all_dtypes[k] = dt;
		cr_assert(oq_dtype_nbytes(dt, 5, &nb));
		for (size_t i = 0; i < nb; i++)
			payload[k][i] = (uint8_t)(0x11 * (k + 1) + 7 * i); /* arbitrary, distinct */
		snprintf(names[k], sizeof names[k], "t%d", dt);
		dims[k] = 5;
		tensor_init(&ts[k], names[k], dt, 1, &dims[k]);
		ts[k].has_raw_data = 1;
		ts[k].raw_data.len = nb;
		ts[k].raw_data.data = payload[k];
		tps[k] = &ts[k];
		k++;
	}
	cr_assert_eq(k, N_DT);
	return pack_inits(tps, N_DT, len);
}

static void save_ok(const oq_model *m, const char *path, const oq_save_opts *o, oq_save_info *info)
{
	oq_diag d;
	int rc;
	oq_diag_init(&d);
	rc = oq_model_save(m, path, o, info, &d);
	cr_assert_eq(rc, OQ_OK, "save failed (%d): %s", rc, d.msg);
}

static oq_model *load_file_ok(const char *path)
{
	oq_model *m = NULL;
	oq_diag d;
	int rc;
	oq_diag_init(&d);
	rc = oq_model_load(path, &m, &d);
	cr_assert_eq(rc, OQ_OK, "reload failed (%d): %s", rc, d.msg);
	return m;
}

Test(save, roundtrip_every_dtype, .init = make_tmpdir, .fini = remove_tmpdir)
{
	Onnx__TensorProto ts[N_DT + 1], *tps[N_DT + 1];
	int64_t dims[N_DT + 1];
	uint8_t payload[N_DT][96];
	char names[N_DT][16];
	size_t n;
	char path[128];
	uint8_t *b = pack_every_dtype(ts, tps, dims, payload, names, &n);
	oq_model *m = load_ok(b, n), *r;

	snprintf(path, sizeof path, "%s/rt.onnx", tmpdir);
	save_ok(m, path, NULL, NULL);
	r = load_file_ok(path);
	cr_assert_eq(r->graph->n_inits, N_DT);
	for (size_t i = 0; i < N_DT; i++) {
		const oq_tensor *a = m->graph->inits[i]->init, *c = r->graph->inits[i]->init;
		size_t nb;
		cr_assert(oq_dtype_nbytes(all_dtypes[i], 5, &nb));
		cr_assert_eq(c->dtype, all_dtypes[i]);
		cr_assert_eq(c->nbytes, nb);
		/* against the bytes we packed, not only against the first load */
		cr_assert_arr_eq(c->data, payload[i], nb, "dtype %d changed in the round trip", all_dtypes[i]);
		cr_assert(oq_tensor_equal(a, c), "dtype %d: tensors differ", all_dtypes[i]);
	}
	oq_model_free(r);
	oq_model_free(m);
	free(b);
}

Test(save, roundtrip_string_tensor, .init = make_tmpdir, .fini = remove_tmpdir)
{
	Onnx__TensorProto t, *tp = &t;
	int64_t dims[1] = {3};
	ProtobufCBinaryData s[3] = {{2, (uint8_t *)"ab"}, {0, (uint8_t *)""}, {3, (uint8_t *)"x\0y"}};
	size_t n;
	char path[128];
	uint8_t *b;
	oq_model *m, *r;
	const oq_tensor *x;

	tensor_init(&t, "s", ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 1, dims);
	t.n_string_data = 3;
	t.string_data = s;
	b = pack_inits(&tp, 1, &n);
	m = load_ok(b, n);
	snprintf(path, sizeof path, "%s/s.onnx", tmpdir);
	save_ok(m, path, NULL, NULL);
	r = load_file_ok(path);
	x = r->graph->inits[0]->init;
	cr_assert_eq(x->nelem, 3);
	cr_assert_eq(x->strs[0].len, 2);
	cr_assert_arr_eq(x->strs[0].p, "ab", 2);
	cr_assert_eq(x->strs[1].len, 0);
	cr_assert_eq(x->strs[2].len, 3);
	cr_assert_arr_eq(x->strs[2].p, "x\0y", 3);
	oq_model_free(r);
	oq_model_free(m);
	free(b);
}

Test(save, missing_folder_fails_and_creates_nothing, .init = make_tmpdir, .fini = remove_tmpdir)
{
	Onnx__TensorProto ts[N_DT + 1], *tps[N_DT + 1];
	int64_t dims[N_DT + 1];
	uint8_t payload[N_DT][96];
	char names[N_DT][16];
	size_t n;
	char path[160], dir[128];
	uint8_t *b = pack_every_dtype(ts, tps, dims, payload, names, &n);
	oq_model *m = load_ok(b, n);
	oq_save_opts o = {0};
	struct stat st;
	oq_diag d;

	snprintf(dir, sizeof dir, "%s/nope", tmpdir);
	snprintf(path, sizeof path, "%s/out.onnx", dir);
	for (int ext = 0; ext < 2; ext++) {
		o.external_data = ext;
		o.external_threshold = 1;
		oq_diag_init(&d);
		cr_assert_eq(oq_model_save(m, path, &o, NULL, &d), OQ_EIO, "external=%d: %s", ext, d.msg);
		cr_assert_neq(d.msg[0], '\0');
		cr_assert_neq(stat(dir, &st), 0, "save created the missing folder");
	}
	/* and the tmp folder itself is still empty */
	snprintf(path, sizeof path, "rmdir '%s' && mkdir '%s'", tmpdir, tmpdir);
	cr_assert_eq(system(path), 0, "save left files in %s", tmpdir);
	oq_model_free(m);
	free(b);
}

Test(save, external_data_aligned_and_bitwise_equal, .init = make_tmpdir, .fini = remove_tmpdir)
{
	Onnx__TensorProto ts[N_DT + 1], *tps[N_DT + 1];
	int64_t dims[N_DT + 1];
	uint8_t payload[N_DT][96];
	char names[N_DT][16];
	size_t n, mlen, dlen, n_ext = 0;
	char path[128], dpath[440];
	uint8_t *b = pack_every_dtype(ts, tps, dims, payload, names, &n), *mb, *db;
	oq_model *m = load_ok(b, n), *r;
	oq_save_opts o = {0};
	oq_save_info info;
	Onnx__ModelProto *mp;

	/* threshold 8 bytes: 5-element tensors of >= 16-bit types go out, bytes and sub-byte stay */
	o.external_data = 1;
	o.external_threshold = 8;
	snprintf(path, sizeof path, "%s/e.onnx", tmpdir);
	save_ok(m, path, &o, &info);
	cr_assert(info.went_external);
	snprintf(dpath, sizeof dpath, "%s/%s", tmpdir, info.data_name);
	/* inspect the file the saver wrote with protobuf-c directly */
	mb = read_file(path, &mlen);
	db = read_file(dpath, &dlen);
	mp = onnx__model_proto__unpack(NULL, mlen, mb);
	cr_assert_not_null(mp);
	cr_assert_eq(mp->graph->n_initializer, N_DT);
	for (size_t i = 0; i < N_DT; i++) {
		const Onnx__TensorProto *tp = mp->graph->initializer[i];
		size_t nb, off = SIZE_MAX, len = SIZE_MAX;
		const char *loc = NULL;
		cr_assert(oq_dtype_nbytes(all_dtypes[i], 5, &nb));
		if (nb < 8) {
			cr_assert(!(tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL),
				  "dtype %d (%zu bytes) went external below the threshold", all_dtypes[i], nb);
			cr_assert(tp->has_raw_data);
			cr_assert_arr_eq(tp->raw_data.data, payload[i], nb);
			continue;
		}
		n_ext++;
		cr_assert(tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL,
			  "dtype %d (%zu bytes) not external", all_dtypes[i], nb);
		cr_assert(!tp->has_raw_data || tp->raw_data.len == 0);
		for (size_t k = 0; k < tp->n_external_data; k++) {
			const Onnx__StringStringEntryProto *e = tp->external_data[k];
			if (!strcmp(e->key, "location"))
				loc = e->value;
			else if (!strcmp(e->key, "offset"))
				off = (size_t)strtoull(e->value, NULL, 10);
			else if (!strcmp(e->key, "length"))
				len = (size_t)strtoull(e->value, NULL, 10);
		}
		cr_assert_not_null(loc);
		cr_assert_str_eq(loc, info.data_name, "location must be relative to the model");
		cr_assert_eq(off % 64, 0, "dtype %d at offset %zu: not 64-byte aligned", all_dtypes[i], off);
		cr_assert_eq(len, nb);
		cr_assert(off + len <= dlen);
		cr_assert_arr_eq(db + off, payload[i], nb, "dtype %d: bytes in the data file differ", all_dtypes[i]);
	}
	cr_assert_eq(info.n_external, n_ext);
	onnx__model_proto__free_unpacked(mp, NULL);
	/* reload: every tensor bitwise equal, the large ones mapped from the data file */
	r = load_file_ok(path);
	for (size_t i = 0; i < N_DT; i++) {
		const oq_tensor *c = r->graph->inits[i]->init;
		size_t nb;
		cr_assert(oq_dtype_nbytes(all_dtypes[i], 5, &nb));
		cr_assert_eq(c->external, nb >= 8);
		cr_assert_eq(c->nbytes, nb);
		cr_assert_arr_eq(c->data, payload[i], nb);
	}
	oq_model_free(r);
	oq_model_free(m);
	free(mb);
	free(db);
	free(b);
}
