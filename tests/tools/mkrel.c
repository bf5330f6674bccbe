/*
 * mkrel.c - writes the small models of tests/integration/reliability.sh
 * into a folder, one file per case (built with tests/util/gen_model.h).
 *
 *   empty.onnx        a graph with no nodes (its output is its input)
 *   slice9.onnx       opset 9 Slice without its required starts/ends
 *   dup.onnx          value 'y' written by two nodes (Relu and Sigmoid)
 *   sparse_oob.onnx   a sparse initializer whose index 100 is outside its [2, 2] shape
 *   ext_dot.onnx      an initializer whose external data location is "."
 *   loop.onnx         Loop with trip count 2^62 and cond true, scan output of the counter
 *   evil.onnx         Relu whose output is named "y\n/tmp/x.onnx: valid\x1b[2J"
 *   evil_bad.onnx     Add reading a dangling input named that way (check prints it)
 *   relu.onnx         x -> Relu -> y, float [2, 2] (a valid model)
 *
 * usage: mkrel DIR
 */
#include <stdio.h>
#include <stdlib.h>

#include "gen_model.h"

static const char *dir;

static void emit(gen_model *g, const char *name)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (gen_write(g, path)) {
		fprintf(stderr, "mkrel: cannot write %s\n", path);
		exit(1);
	}
	gen_free(g);
}

/* A model with opset `opset`, graph input x float [2, 2]; *mg receives the graph. */
static gen_model *start(int opset, Onnx__GraphProto **mg)
{
	gen_model *g = gen_new(8);
	gen_opset(g, "", opset);
	*mg = gen_graph(g);
	gen_input(g, *mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	return g;
}

int main(int argc, char **argv)
{
	static const char evil[] = "y\n/tmp/x.onnx: valid\x1b[2J";
	Onnx__GraphProto *mg, *body;
	Onnx__TensorProto *t;
	Onnx__NodeProto *n;
	gen_model *g;

	if (argc != 2) {
		fprintf(stderr, "usage: mkrel DIR\n");
		return 1;
	}
	dir = argv[1];

	g = start(13, &mg);
	gen_output(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	emit(g, "empty.onnx");

	g = start(13, &mg);
	gen_node(g, mg, "Relu", "relu", "x", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	emit(g, "relu.onnx");

	g = start(9, &mg);
	gen_node(g, mg, "Slice", "slice", "x", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, -1, NULL);
	emit(g, "slice9.onnx");

	g = start(13, &mg);
	gen_node(g, mg, "Relu", "a", "x", "y");
	gen_node(g, mg, "Sigmoid", "b", "x", "y");
	gen_node(g, mg, "Mul", "mul", "y,x", "z");
	gen_output(g, mg, "z", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	emit(g, "dup.onnx");

	g = start(13, &mg);
	{
		static Onnx__SparseTensorProto sp;
		static Onnx__SparseTensorProto *sps[1] = {&sp};
		static int64_t dense[2] = {2, 2};
		onnx__sparse_tensor_proto__init(&sp);
		sp.values = gen_tensor(g, "s", OQ_DT_FLOAT, GEN_SHAPE(1), GEN_VALS(5));
		sp.indices = gen_tensor(g, "", OQ_DT_INT64, GEN_SHAPE(1), GEN_VALS(100));
		sp.n_dims = 2;
		sp.dims = dense;
		mg->n_sparse_initializer = 1;
		mg->sparse_initializer = sps;
	}
	gen_node(g, mg, "Add", "add", "x,s", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	emit(g, "sparse_oob.onnx");

	g = start(13, &mg);
	t = gen_init(g, mg, "w", OQ_DT_FLOAT, GEN_SHAPE(2, 2), NULL);
	{
		static Onnx__StringStringEntryProto e;
		static Onnx__StringStringEntryProto *ep[1] = {&e};
		onnx__string_string_entry_proto__init(&e);
		e.key = "location";
		e.value = ".";
		t->has_raw_data = 0;
		t->raw_data.len = 0;
		t->has_data_location = 1;
		t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
		t->n_external_data = 1;
		t->external_data = ep;
	}
	gen_node(g, mg, "Add", "add", "x,w", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	emit(g, "ext_dot.onnx");

	g = start(13, &mg);
	gen_init(g, mg, "M", OQ_DT_INT64, 0, NULL, GEN_VALS(4611686018427387904.0));
	gen_init(g, mg, "c", OQ_DT_BOOL, 0, NULL, GEN_VALS(1));
	n = gen_node(g, mg, "Loop", "forever", "M,c", "iters");
	body = gen_attr_graph(g, n, "body", "body");
	gen_input(g, body, "i", OQ_DT_INT64, 0, NULL);
	gen_input(g, body, "cin", OQ_DT_BOOL, 0, NULL);
	gen_node(g, body, "Identity", "keep", "cin", "cout");
	gen_node(g, body, "Identity", "count", "i", "iout");
	gen_output(g, body, "cout", OQ_DT_BOOL, 0, NULL);
	gen_output(g, body, "iout", OQ_DT_INT64, 0, NULL);
	gen_node(g, mg, "Relu", "relu", "x", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	gen_output(g, mg, "iters", OQ_DT_INT64, -1, NULL);
	emit(g, "loop.onnx");

	g = start(13, &mg);
	gen_node(g, mg, "Relu", "relu", "x", evil);
	gen_output(g, mg, evil, OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	emit(g, "evil.onnx");

	g = start(13, &mg);
	gen_node(g, mg, "Add", "add", "x,ghost\n/tmp/x.onnx: valid\x1b[2J", "z");
	gen_output(g, mg, "z", OQ_DT_FLOAT, GEN_SHAPE(2, 2));
	emit(g, "evil_bad.onnx");
	return 0;
}
