/*
 * test_inspect.c - the `onnxq inspect` report (src/report/inspect.c).
 *
 * Two sources of models, each with facts known independently of the code
 * under test:
 * - ONNX backend node tests (/usr/share/libonnx-testdata/data/node): the
 *   expected ops, shapes and constants were read from the files with
 *   Debian's python3-onnx 1.12 (onnx.load + printable_graph + numpy_helper)
 *   and match the ONNX test generator (onnx/backend/test/case/node/ in the onnx sources);
 * - a synthetic model built here with protobuf-c and loaded through the real
 *   loader: its counts follow from the construction (listed next to it).
 * Reports are written into memory (open_memstream) and checked with
 * whitespace-squashed substring matches, so column alignment may change
 * without breaking the facts. JSON output is also parsed by node when node
 * is installed.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/report/inspect.h"
#include "onnx.pb-c.h"
#include "src/io/onnx_io.h"

#define NODE_DIR "/usr/share/libonnx-testdata/data/node/"

/* ---- running the report ---- */

static char *report(const oq_model *m, int json)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int rc;

	cr_assert_not_null(f);
	rc = oq_inspect_print(m, f, json);
	cr_assert_eq(fclose(f), 0);
	cr_assert_eq(rc, OQ_OK, "oq_inspect_print returned %d", rc);
	return buf;
}

/* Collapses runs of spaces into one (an indented line keeps one leading space),
 * so that matches do not depend on column widths. */
static char *squash(const char *s)
{
	char *r = malloc(strlen(s) + 1), *o = r;
	cr_assert_not_null(r);
	for (; *s; s++)
		if (*s != ' ' || o == r || o[-1] != ' ')
			*o++ = *s;
	*o = '\0';
	return r;
}

static void expect(const char *hay, const char *needle)
{
	cr_expect(strstr(hay, needle) != NULL, "expected \"%s\" in:\n%s", needle, hay);
}

static void expect_not(const char *hay, const char *needle)
{
	cr_expect(strstr(hay, needle) == NULL, "did not expect \"%s\" in:\n%s", needle, hay);
}

static oq_model *load_case(const char *name)
{
	char path[512];
	oq_model *m = NULL;
	oq_diag d;
	int rc;

	snprintf(path, sizeof path, NODE_DIR "%s/model.onnx", name);
	if (access(path, R_OK) != 0)
		cr_skip_test("%s not installed (apt-get install libonnx-testdata)", path);
	oq_diag_init(&d);
	rc = oq_model_load(path, &m, &d);
	cr_assert_eq(rc, OQ_OK, "load %s: %s", path, d.msg);
	return m;
}

/* Text (squashed) and JSON reports of one node-test model. */
typedef struct both {
	char *text;
	char *json;
} both;

static both run_case(const char *name)
{
	oq_model *m = load_case(name);
	char *t = report(m, 0);
	both b = {squash(t), report(m, 1)};
	free(t);
	oq_model_free(m);
	return b;
}

static void both_free(both *b)
{
	free(b->text);
	free(b->json);
}

/* JSON.parse through node; skipped (with a note) where node is missing. */
static void expect_valid_json(const char *json)
{
	char path[] = "/tmp/oq_inspect_XXXXXX";
	char cmd[256];
	int fd, rc;
	FILE *f;

	if (system("command -v node >/dev/null 2>&1") != 0) {
		cr_log_warn("node not found: JSON validity not checked");
		return;
	}
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	cr_assert_not_null(f);
	fputs(json, f);
	cr_assert_eq(fclose(f), 0);
	snprintf(cmd, sizeof cmd,
		 "node -e 'JSON.parse(require(\"fs\").readFileSync(process.argv[1], \"utf8\"))' %s", path);
	rc = system(cmd);
	unlink(path);
	cr_expect_eq(rc, 0, "node rejected the JSON:\n%s", json);
}

/* ---- node-test models ---- */

Test(inspect, conv_shapes_and_census)
{
	/* test_conv_with_strides_padding: IR 6, opset 11, one Conv; x [1,1,7,5], W [1,1,3,3], y [1,1,4,3]. */
	both b = run_case("test_conv_with_strides_padding");
	expect(b.text, "producer backend-test");
	expect(b.text, "ir 6\n");
	expect(b.text, "opsets ai.onnx 11\n");
	expect(b.text, "functions 0\ntraining 0\n");
	expect(b.text, "inputs (2)\n x float [1, 1, 7, 5]\n W float [1, 1, 3, 3]\n");
	expect(b.text, "outputs (1)\n y float [1, 1, 4, 3]\n");
	expect(b.text, "ops 1 nodes, 1 op types\n Conv 1\n");
	expect(b.text, "quantization none");
	expect(b.json, "\"ir_version\": 6, \"opsets\": [{\"domain\": \"ai.onnx\", \"version\": 11}]");
	expect(b.json, "{\"name\": \"x\", \"kind\": \"tensor\", \"dtype\": \"float\", \"shape\": [1, 1, 7, 5]}");
	expect(b.json, "\"census\": [{\"op\": \"Conv\", \"count\": 1}]");
	expect(b.json, "\"quantize_linear\": 0, \"dequantize_linear\": 0");
	expect(b.json, "\"path\": \"" NODE_DIR "test_conv_with_strides_padding/model.onnx\"");
	expect_valid_json(b.json);
	both_free(&b);
}

Test(inspect, quantizelinear_per_tensor)
{
	/* y = QuantizeLinear(x[6], y_scale scalar, y_zero_point uint8 scalar), opset 13. */
	both b = run_case("test_quantizelinear");
	expect(b.text, "y_scale float []\n");
	expect(b.text, "QuantizeLinear 1, DequantizeLinear 0\n");
	expect(b.text, "granularity per-tensor 1\n");
	expect(b.text, "types uint8 1\n");
	expect(b.json, "\"by_granularity\": {\"per_tensor\": 1, \"per_channel\": 0, \"blockwise\": 0, \"unknown\": 0}");
	expect(b.json, "\"by_dtype\": {\"uint8\": 1}");
	expect(b.json, "\"op\": \"QuantizeLinear\", \"domain\": \"ai.onnx\", \"granularity\": \"per_tensor\", "
		       "\"axis\": null, \"block_size\": null, \"dtype\": \"uint8\", \"in_subgraph\": false");
	expect_valid_json(b.json);
	both_free(&b);
}

Test(inspect, dequantizelinear_axis_is_per_channel_axis_1)
{
	/* x uint8 [1,3,3,2], x_scale float [3], x_zero_point uint8 [3]; no axis attribute (default 1). */
	both b = run_case("test_dequantizelinear_axis");
	expect(b.text, "x uint8 [1, 3, 3, 2]\n x_scale float [3]\n x_zero_point uint8 [3]\n");
	expect(b.text, "QuantizeLinear 0, DequantizeLinear 1\n");
	expect(b.text, "granularity per-channel 1\n");
	expect(b.text, "per-channel axis=1, uint8");
	expect(b.json, "\"granularity\": \"per_channel\", \"axis\": 1, \"block_size\": null, \"dtype\": \"uint8\"");
	expect(b.json, "\"weight_initializers\": 0");
	expect_valid_json(b.json);
	both_free(&b);
}

Test(inspect, quantizelinear_axis_is_per_channel_axis_1)
{
	both b = run_case("test_quantizelinear_axis");
	expect(b.json, "\"op\": \"QuantizeLinear\", \"domain\": \"ai.onnx\", \"granularity\": \"per_channel\", \"axis\": 1");
	both_free(&b);
}

Test(inspect, if_counts_subgraph_nodes_and_constants)
{
	/* test_if: If(cond) with then/else branches of one Constant each (float[5], 20 bytes each). */
	both b = run_case("test_if");
	expect(b.text, "cond bool []\n");
	expect(b.text, "res float [5]\n");
	expect(b.text, "ops 3 nodes (2 in 2 subgraphs), 2 op types\n Constant 2\n If 1\n");
	expect(b.text, "constants 2 tensors, 10 elements, 40 bytes\n");
	expect(b.json, "\"ops\": {\"nodes\": 3, \"subgraph_nodes\": 2, \"subgraphs\": 2, \"census\": "
		       "[{\"op\": \"Constant\", \"count\": 2}, {\"op\": \"If\", \"count\": 1}]}");
	expect(b.json, "\"constants\": {\"count\": 2, \"elements\": 10, \"bytes\": 40, \"by_dtype\": "
		       "[{\"dtype\": \"float\", \"count\": 2, \"elements\": 10, \"bytes\": 40}]}");
	expect_valid_json(b.json);
	both_free(&b);
}

Test(inspect, loop_body)
{
	/* test_loop11: Loop with a 9-node body: Identity x2, Constant x2 (float[5], int64 scalar),
	 * Add x2, Unsqueeze x2, Slice. */
	both b = run_case("test_loop11");
	expect(b.text, "ops 10 nodes (9 in 1 subgraphs), 6 op types\n");
	expect(b.text, " Add 2\n Constant 2\n Identity 2\n Unsqueeze 2\n Loop 1\n Slice 1\n");
	expect(b.text, "constants 2 tensors, 6 elements, 28 bytes\n");
	expect(b.text, "trip_count int64 []\n");
	expect(b.text, "res_scan float [5, 1]\n");
	both_free(&b);
}

Test(inspect, symbolic_dims_and_sequence_types)
{
	/* x0: sequence type; x1: float [N] (dim_param N); y0: sequence. */
	both b = run_case("test_sequence_map_add_1_sequence_1_tensor");
	expect(b.text, "x0 sequence unknown\n");
	expect(b.text, "x1 float [N]\n");
	expect(b.text, "ops 2 nodes (1 in 1 subgraphs), 2 op types\n");
	expect(b.json, "{\"name\": \"x1\", \"kind\": \"tensor\", \"dtype\": \"float\", \"shape\": [\"N\"]}");
	expect(b.json, "{\"name\": \"x0\", \"kind\": \"sequence\", \"dtype\": \"?\", \"shape\": null}");
	expect_valid_json(b.json);
	both_free(&b);
}

Test(inspect, non_default_domain_is_prefixed)
{
	/* test_adagrad: one Adagrad node of ai.onnx.preview.training, opset 1 of that domain only. */
	both b = run_case("test_adagrad");
	expect(b.text, "opsets ai.onnx.preview.training 1\n");
	expect(b.text, " ai.onnx.preview.training::Adagrad 1\n");
	expect(b.json, "{\"op\": \"ai.onnx.preview.training::Adagrad\", \"count\": 1}");
	both_free(&b);
}

Test(inspect, untyped_scale_is_unknown_cast_zero_point_is_uint8)
{
	/* test_dynamicquantizelinear_expanded: the Q's scale is an untyped Div output
	 * (shape unknown) and its zero point an untyped Cast(to=UINT8) output. */
	both b = run_case("test_dynamicquantizelinear_expanded");
	expect(b.json, "\"granularity\": \"unknown\", \"axis\": null, \"block_size\": null, \"dtype\": \"uint8\"");
	expect(b.text, "ops 16 nodes, 12 op types\n");
	both_free(&b);
}

/* ---- a synthetic model through the real loader ---- */

/* Everything the builder allocates; freed at the end of the test. */
static void *keep[1024];
static size_t n_keep;

static void *tm(size_t n)
{
	void *p = calloc(1, n ? n : 1);
	cr_assert_not_null(p);
	cr_assert_lt(n_keep, sizeof keep / sizeof keep[0]);
	keep[n_keep++] = p;
	return p;
}

static void tm_free(void)
{
	while (n_keep)
		free(keep[--n_keep]);
}

static char *ts(const char *s)
{
	char *r = tm(strlen(s) + 1);
	memcpy(r, s, strlen(s) + 1);
	return r;
}

/* Splits "a,b,,c" into a string array ("" kept for omitted inputs). */
static char **split(const char *s, size_t *n)
{
	char **v = tm(16 * sizeof *v);
	*n = 0;
	if (!*s)
		return v;
	for (;;) {
		const char *e = strchr(s, ',');
		size_t len = e ? (size_t)(e - s) : strlen(s);
		char *w = tm(len + 1);
		memcpy(w, s, len);
		v[(*n)++] = w;
		if (!e)
			return v;
		s = e + 1;
	}
}

/* A value info: elem 0 = no type at all; shape NULL = tensor type without shape;
 * shape "a,3,?" = dims (number, symbolic name, or ? for neither). */
static Onnx__ValueInfoProto *vi(const char *name, int elem, const char *shape)
{
	Onnx__ValueInfoProto *v = tm(sizeof *v);
	onnx__value_info_proto__init(v);
	v->name = ts(name);
	if (elem) {
		Onnx__TypeProto *t = tm(sizeof *t);
		Onnx__TypeProto__Tensor *tt = tm(sizeof *tt);
		onnx__type_proto__init(t);
		onnx__type_proto__tensor__init(tt);
		tt->has_elem_type = 1;
		tt->elem_type = elem;
		t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
		t->tensor_type = tt;
		if (shape) {
			size_t n;
			char **d = split(shape, &n);
			Onnx__TensorShapeProto *sp = tm(sizeof *sp);
			onnx__tensor_shape_proto__init(sp);
			sp->dim = tm(16 * sizeof *sp->dim);
			for (size_t i = 0; i < n; i++) {
				Onnx__TensorShapeProto__Dimension *dm = tm(sizeof *dm);
				onnx__tensor_shape_proto__dimension__init(dm);
				if (d[i][0] >= '0' && d[i][0] <= '9') {
					dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
					dm->dim_value = atoll(d[i]);
				} else if (strcmp(d[i], "?") != 0) {
					dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
					dm->dim_param = d[i];
				}
				sp->dim[sp->n_dim++] = dm;
			}
			tt->shape = sp;
		}
		v->type = t;
	}
	return v;
}

/* A zero-filled tensor with raw_data of `nbytes` bytes. */
static Onnx__TensorProto *tensor(const char *name, int dtype, size_t rank, const int64_t *dims,
				 size_t nbytes)
{
	Onnx__TensorProto *t = tm(sizeof *t);
	onnx__tensor_proto__init(t);
	t->name = ts(name);
	t->has_data_type = 1;
	t->data_type = dtype;
	t->n_dims = rank;
	t->dims = tm((rank + 1) * sizeof *t->dims);
	if (rank)
		memcpy(t->dims, dims, rank * sizeof *dims);
	t->has_raw_data = 1;
	t->raw_data.len = nbytes;
	t->raw_data.data = tm(nbytes);
	return t;
}

static Onnx__NodeProto *node(Onnx__GraphProto *g, const char *op, const char *domain,
			     const char *name, const char *in, const char *out)
{
	Onnx__NodeProto *n = tm(sizeof *n);
	onnx__node_proto__init(n);
	n->op_type = ts(op);
	n->domain = ts(domain);
	n->name = ts(name);
	n->input = split(in, &n->n_input);
	n->output = split(out, &n->n_output);
	n->attribute = tm(8 * sizeof *n->attribute);
	g->node[g->n_node++] = n;
	return n;
}

static Onnx__AttributeProto *attr(Onnx__NodeProto *n, const char *name, int type)
{
	Onnx__AttributeProto *a = tm(sizeof *a);
	onnx__attribute_proto__init(a);
	a->name = ts(name);
	a->has_type = 1;
	a->type = (Onnx__AttributeProto__AttributeType)type;
	n->attribute[n->n_attribute++] = a;
	return a;
}

static void attr_i(Onnx__NodeProto *n, const char *name, int64_t v)
{
	Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
	a->has_i = 1;
	a->i = v;
}

static Onnx__GraphProto *graph(const char *name)
{
	Onnx__GraphProto *g = tm(sizeof *g);
	onnx__graph_proto__init(g);
	g->name = ts(name);
	g->node = tm(32 * sizeof *g->node);
	g->initializer = tm(32 * sizeof *g->initializer);
	g->input = tm(16 * sizeof *g->input);
	g->output = tm(16 * sizeof *g->output);
	return g;
}

/*
 * The synthetic model (IR 10; opsets ai.onnx 21, com.microsoft 1; 1 function,
 * 1 training_info):
 *   inputs: x float [batch,4,?,8]; w_in float [2] (also an initializer);
 *           untyped (no type); norank (float, no shape)
 *   initializers (8 tensors, 84 elements, 113 bytes):
 *     w_q int8 [4,8] 32 B; w_scale float [4] 16 B; w_zp int8 [4] 4 B;
 *     b_q int4 [4,8] 16 B; b_scale float [4,2] 32 B; w_in float [2] 8 B;
 *     s float [] 4 B; zp_u8 uint8 [] 1 B
 *     float: 4 tensors, 15 elements, 60 B; int8: 2, 36, 36; int4: 1, 32, 16; uint8: 1, 1, 1
 *   nodes (main 12, subgraph 2):
 *     dq_w  DQ(w_q, w_scale, w_zp) axis=0     per-channel axis 0, int8, weight w_q
 *     dq_w2 DQ(w_q, w_scale, w_zp) axis=0     per-channel axis 0, int8, same weight
 *     dq_b  DQ(b_q, b_scale) axis=1 block=4   blockwise axis 1 block 4, int4 (x's type), weight b_q
 *     q_x   Q(x, s) output_dtype=INT8         per-tensor, int8
 *     ms_dq com.microsoft DQ(qx, s, zp_u8)    per-tensor, uint8
 *     dq_noscale DQ(qx)                       unknown, '?' (qx is untyped)
 *     c1 Constant value_floats[3]             12 B
 *     c2 Constant value=int64[2]              16 B
 *     q_default Q(x, c1out)                   per-channel axis 1 (1-D scale of 3), uint8 default
 *     g1, g2 com.microsoft::Gelu
 *     if1 If(cond): then { sub_dq DQ(w_q, w_scale, w_zp) axis=0 } else { Identity }
 *   => Q 2, DQ 6; per-tensor 2, per-channel 4, blockwise 1, unknown 1;
 *      int8 4, int4 1, uint8 2, ? 1; weights 2 (w_q, b_q) of 48 bytes.
 *   census: DequantizeLinear 5, Constant 2, QuantizeLinear 2, com.microsoft::Gelu 2,
 *           Identity 1, If 1, com.microsoft::DequantizeLinear 1 (14 nodes, 2 in 2 subgraphs)
 */
static oq_model *synthetic(void **buf)
{
	Onnx__ModelProto mp;
	Onnx__GraphProto *g = graph("synthetic"), *then_g = graph("then"), *else_g = graph("else");
	Onnx__OperatorSetIdProto *os[2];
	Onnx__FunctionProto fn;
	Onnx__TrainingInfoProto ti, *tip = &ti;
	Onnx__FunctionProto *fnp = &fn;
	Onnx__NodeProto *n;
	Onnx__AttributeProto *a;
	const int64_t d48[] = {4, 8}, d4[] = {4}, d42[] = {4, 2}, d2[] = {2};
	oq_model *m = NULL;
	oq_diag d;
	size_t len;
	int rc;

	onnx__model_proto__init(&mp);
	mp.has_ir_version = 1;
	mp.ir_version = 10;
	mp.producer_name = ts("onnxq-test");
	mp.producer_version = ts("1.0");
	for (int i = 0; i < 2; i++) {
		os[i] = tm(sizeof *os[i]);
		onnx__operator_set_id_proto__init(os[i]);
		os[i]->domain = ts(i ? "com.microsoft" : "");
		os[i]->has_version = 1;
		os[i]->version = i ? 1 : 21;
	}
	mp.opset_import = os;
	mp.n_opset_import = 2;
	onnx__function_proto__init(&fn);
	fn.name = ts("f");
	fn.domain = ts("local");
	mp.functions = &fnp;
	mp.n_functions = 1;
	onnx__training_info_proto__init(&ti);
	mp.training_info = &tip;
	mp.n_training_info = 1;

	g->input[g->n_input++] = vi("x", 1, "batch,4,?,8");
	g->input[g->n_input++] = vi("w_in", 1, "2");
	g->input[g->n_input++] = vi("untyped", 0, NULL);
	g->input[g->n_input++] = vi("norank", 1, NULL);
	g->input[g->n_input++] = vi("cond", 9, "");
	g->output[g->n_output++] = vi("y", 1, "batch,4,?,8");
	g->initializer[g->n_initializer++] = tensor("w_q", 3, 2, d48, 32);
	g->initializer[g->n_initializer++] = tensor("w_scale", 1, 1, d4, 16);
	g->initializer[g->n_initializer++] = tensor("w_zp", 3, 1, d4, 4);
	g->initializer[g->n_initializer++] = tensor("b_q", 22, 2, d48, 16);
	g->initializer[g->n_initializer++] = tensor("b_scale", 1, 2, d42, 32);
	g->initializer[g->n_initializer++] = tensor("w_in", 1, 1, d2, 8);
	g->initializer[g->n_initializer++] = tensor("s", 1, 0, NULL, 4);
	g->initializer[g->n_initializer++] = tensor("zp_u8", 2, 0, NULL, 1);

	attr_i(node(g, "DequantizeLinear", "", "dq_w", "w_q,w_scale,w_zp", "w"), "axis", 0);
	attr_i(node(g, "DequantizeLinear", "", "dq_w2", "w_q,w_scale,w_zp", "w2"), "axis", 0);
	n = node(g, "DequantizeLinear", "", "dq_b", "b_q,b_scale", "b");
	attr_i(n, "axis", 1);
	attr_i(n, "block_size", 4);
	attr_i(node(g, "QuantizeLinear", "", "q_x", "x,s", "qx"), "output_dtype", 3);
	node(g, "DequantizeLinear", "com.microsoft", "ms_dq", "qx,s,zp_u8", "dqx");
	node(g, "DequantizeLinear", "", "dq_noscale", "qx", "dqx2");
	a = attr(node(g, "Constant", "", "c1", "", "c1out"), "value_floats",
		 ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
	a->n_floats = 3;
	a->floats = tm(3 * sizeof(float));
	a = attr(node(g, "Constant", "", "c2", "", "c2out"), "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
	a->t = tensor("", 7, 1, d2, 16);
	node(g, "QuantizeLinear", "", "q_default", "x,c1out", "qd");
	node(g, "Gelu", "com.microsoft", "g1", "x", "g1out");
	node(g, "Gelu", "com.microsoft", "g2", "g1out", "y");
	attr_i(node(then_g, "DequantizeLinear", "", "sub_dq", "w_q,w_scale,w_zp", "t_out"), "axis", 0);
	then_g->output[then_g->n_output++] = vi("t_out", 1, "4,8");
	node(else_g, "Identity", "", "", "w", "e_out");
	else_g->output[else_g->n_output++] = vi("e_out", 1, "4,8");
	n = node(g, "If", "", "if1", "cond", "if_out");
	attr(n, "then_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = then_g;
	attr(n, "else_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = else_g;
	mp.graph = g;

	len = onnx__model_proto__get_packed_size(&mp);
	*buf = malloc(len);
	cr_assert_not_null(*buf);
	cr_assert_eq(onnx__model_proto__pack(&mp, *buf), len);
	tm_free();
	oq_diag_init(&d);
	rc = oq_model_load_buffer(*buf, len, NULL, &m, &d);
	cr_assert_eq(rc, OQ_OK, "load synthetic: %s", d.msg);
	return m;
}

Test(inspect, synthetic_text)
{
	void *buf;
	oq_model *m = synthetic(&buf);
	char *raw = report(m, 0), *t = squash(raw);

	expect(t, "model ?\nproducer onnxq-test 1.0\nir 10\nopsets ai.onnx 21, com.microsoft 1\n"
		  "functions 1\ntraining 1\n");
	expect(t, "inputs (4; 1 more backed by initializers, counted as parameters)\n");
	expect(t, " x float [batch, 4, ?, 8]\n");
	expect(t, " untyped ? unknown\n");
	expect(t, " norank float unknown\n");
	expect(t, " cond bool []\n");
	expect_not(t, " w_in ");
	expect(t, "ops 14 nodes (2 in 2 subgraphs), 7 op types\n DequantizeLinear 5\n Constant 2\n"
		  " QuantizeLinear 2\n com.microsoft::Gelu 2\n Identity 1\n If 1\n"
		  " com.microsoft::DequantizeLinear 1\n");
	expect(t, "initializers 8 tensors, 84 elements, 113 bytes, 0 external\n");
	expect(t, "float 4 tensors 15 elements 60 bytes\n");
	expect(t, "uint8 1 tensors 1 elements 1 bytes\n");
	expect(t, "int8 2 tensors 36 elements 36 bytes\n");
	expect(t, "int4 1 tensors 32 elements 16 bytes\n");
	expect(t, "constants 2 tensors, 5 elements, 28 bytes\n");
	expect(t, "QuantizeLinear 2, DequantizeLinear 6\n");
	expect(t, "granularity per-tensor 2, per-channel 4, blockwise 1, unknown 1\n");
	expect(t, "types uint8 2, int8 4, int4 1, ? 1\n");
	expect(t, "weights 2 quantized initializers feed a DequantizeLinear, 48 bytes\n");
	expect(t, "DequantizeLinear dq_w: per-channel axis=0, int8\n");
	expect(t, "DequantizeLinear dq_b: blockwise axis=1 block_size=4, int4\n");
	expect(t, "QuantizeLinear q_x: per-tensor, int8\n");
	expect(t, "DequantizeLinear ms_dq: per-tensor, uint8, com.microsoft\n");
	expect(t, "DequantizeLinear dq_noscale: unknown, ?\n");
	expect(t, "QuantizeLinear q_default: per-channel axis=1, uint8\n");
	expect(t, "DequantizeLinear sub_dq: per-channel axis=0, int8, in subgraph\n");
	free(raw);
	free(t);
	oq_model_free(m);
	free(buf);
}

Test(inspect, synthetic_json)
{
	void *buf;
	oq_model *m = synthetic(&buf);
	char *j = report(m, 1);

	expect(j, "{\"path\": null, \"producer\": {\"name\": \"onnxq-test\", \"version\": \"1.0\"}, "
		  "\"ir_version\": 10, \"opsets\": [{\"domain\": \"ai.onnx\", \"version\": 21}, "
		  "{\"domain\": \"com.microsoft\", \"version\": 1}], \"functions\": 1, \"training_info\": 1");
	expect(j, "{\"name\": \"x\", \"kind\": \"tensor\", \"dtype\": \"float\", \"shape\": [\"batch\", 4, null, 8]}");
	expect(j, "{\"name\": \"untyped\", \"kind\": \"none\", \"dtype\": \"?\", \"shape\": null}");
	expect(j, "{\"name\": \"norank\", \"kind\": \"tensor\", \"dtype\": \"float\", \"shape\": null}");
	expect(j, "\"initializer_inputs\": 1");
	expect(j, "\"ops\": {\"nodes\": 14, \"subgraph_nodes\": 2, \"subgraphs\": 2");
	expect(j, "{\"op\": \"com.microsoft::DequantizeLinear\", \"count\": 1}");
	expect(j, "\"initializers\": {\"count\": 8, \"elements\": 84, \"bytes\": 113, \"external\": 0");
	expect(j, "{\"dtype\": \"int4\", \"count\": 1, \"elements\": 32, \"bytes\": 16}");
	expect(j, "\"constants\": {\"count\": 2, \"elements\": 5, \"bytes\": 28");
	expect(j, "\"quantize_linear\": 2, \"dequantize_linear\": 6");
	expect(j, "\"by_granularity\": {\"per_tensor\": 2, \"per_channel\": 4, \"blockwise\": 1, \"unknown\": 1}");
	expect(j, "\"by_dtype\": {\"uint8\": 2, \"int8\": 4, \"int4\": 1, \"?\": 1}");
	expect(j, "\"weight_initializers\": 2, \"weight_bytes\": 48");
	expect(j, "{\"name\": \"dq_b\", \"op\": \"DequantizeLinear\", \"domain\": \"ai.onnx\", "
		  "\"granularity\": \"blockwise\", \"axis\": 1, \"block_size\": 4, \"dtype\": \"int4\", "
		  "\"in_subgraph\": false}");
	expect(j, "{\"name\": \"ms_dq\", \"op\": \"DequantizeLinear\", \"domain\": \"com.microsoft\", "
		  "\"granularity\": \"per_tensor\"");
	expect(j, "{\"name\": \"sub_dq\", \"op\": \"DequantizeLinear\", \"domain\": \"ai.onnx\", "
		  "\"granularity\": \"per_channel\", \"axis\": 0, \"block_size\": null, \"dtype\": \"int8\", "
		  "\"in_subgraph\": true}");
	expect_valid_json(j);
	free(j);
	oq_model_free(m);
	free(buf);
}

Test(inspect, write_failure_is_eio)
{
	oq_model *m = load_case("test_if");
	FILE *f = fopen("/dev/full", "w");
	if (!f)
		cr_skip_test("/dev/full not available");
	cr_expect_eq(oq_inspect_print(m, f, 0), OQ_EIO);
	clearerr(f);
	cr_expect_eq(oq_inspect_print(m, f, 1), OQ_EIO);
	fclose(f);
	oq_model_free(m);
}

Test(inspect, bare_model_does_not_crash)
{
	/* A model built with the IR API: no path, no producer, no opsets, an empty graph. */
	oq_model *m = oq_model_new();
	char *t, *j;
	cr_assert_not_null(m);
	m->graph = oq_graph_new(m, NULL);
	cr_assert_not_null(m->graph);
	t = report(m, 0);
	j = report(m, 1);
	expect(t, "opsets     none\n");
	expect(t, "ops        0 nodes, 0 op types\n");
	expect(j, "\"inputs\": [], \"initializer_inputs\": 0, \"outputs\": []");
	expect_valid_json(j);
	free(t);
	free(j);
	oq_model_free(m);
}
