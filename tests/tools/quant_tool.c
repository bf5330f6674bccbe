/*
 * quant_tool.c - writes the small float models tests/integration/quant_patterns.sh
 * quantizes and runs in ONNX Runtime: one model per placement pattern of
 * the quantize pass (Conv/Relu/MaxPool/Reshape/Gemm/Softmax, two branches
 * into an Add with a Clip(0, 6), one tensor with three consumers, MatMul +
 * bias + LeakyRelu + Gemm, ConvTranspose/Resize/Slice/Pad/AveragePool,
 * HardSigmoid/Split/Concat/Gather). Every model has one float input "x" with
 * fixed dims (listed by `quant_tool list`) and opset 13.
 *
 *   quant_tool write DIR    writes DIR/<name>.onnx for every model
 *   quant_tool list         prints "<name> <d0,d1,...>" per model
 *
 * Weights are a fixed pseudo-random sequence (an LCG), so the files are the
 * same on every run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_model.h"

static unsigned lcg_state = 12345;

/* Uniform in [-a, a). */
static double rnd(double a)
{
	lcg_state = lcg_state * 1103515245u + 12345u;
	return ((double)((lcg_state >> 8) & 0xffff) / 65536.0 * 2 - 1) * a;
}

/* An initializer of `n` random values in [-a, a). */
static void rinit(gen_model *g, Onnx__GraphProto *mg, const char *name, int rank, const int64_t *dims,
		  double a)
{
	size_t n = 1;
	double *v;
	for (int i = 0; i < rank; i++)
		n *= (size_t)dims[i];
	v = malloc(n * sizeof *v);
	if (!v) {
		fprintf(stderr, "quant_tool: out of memory\n");
		exit(5);
	}
	for (size_t i = 0; i < n; i++)
		v[i] = rnd(a);
	gen_init(g, mg, name, OQ_DT_FLOAT, rank, dims, v);
	free(v);
}

static const int64_t *ints(int n, int64_t a, int64_t b, int64_t c, int64_t d)
{
	static int64_t v[4];
	v[0] = a;
	v[1] = b;
	v[2] = c;
	v[3] = d;
	(void)n;
	return v;
}

/* x[1,3,8,8] -> Conv+B -> Relu -> MaxPool -> Reshape[1,64] -> Gemm(transB) -> Softmax */
static gen_model *m_cnn(void)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	Onnx__NodeProto *n;
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 3, 8, 8));
	rinit(g, mg, "W", GEN_SHAPE(4, 3, 3, 3), 0.4);
	rinit(g, mg, "B", GEN_SHAPE(4), 0.2);
	gen_init(g, mg, "shape", OQ_DT_INT64, GEN_SHAPE(2), GEN_VALS(1, 64));
	rinit(g, mg, "fcW", GEN_SHAPE(10, 64), 0.3);
	rinit(g, mg, "fcB", GEN_SHAPE(10), 0.1);
	n = gen_node(g, mg, "Conv", "conv1", "x,W,B", "c");
	gen_attr_ints(g, n, "pads", 4, ints(4, 1, 1, 1, 1));
	gen_node(g, mg, "Relu", "relu1", "c", "r");
	n = gen_node(g, mg, "MaxPool", "pool", "r", "p");
	gen_attr_ints(g, n, "kernel_shape", 2, ints(2, 2, 2, 0, 0));
	gen_attr_ints(g, n, "strides", 2, ints(2, 2, 2, 0, 0));
	gen_node(g, mg, "Reshape", "flat", "p,shape", "f");
	n = gen_node(g, mg, "Gemm", "fc", "f,fcW,fcB", "logits");
	gen_attr_int(g, n, "transB", 1);
	n = gen_node(g, mg, "Softmax", "sm", "logits", "y");
	gen_attr_int(g, n, "axis", 1);
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 10));
	return g;
}

/* x[1,4,6,6] -> Conv 1x1 -> A; x -> Conv 3x3 -> Clip(0, 6) -> B; Add -> GlobalAveragePool -> Flatten */
static gen_model *m_branches(void)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	Onnx__NodeProto *n;
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 4, 6, 6));
	rinit(g, mg, "Wa", GEN_SHAPE(5, 4, 1, 1), 0.5);
	rinit(g, mg, "Wb", GEN_SHAPE(5, 4, 3, 3), 0.3);
	rinit(g, mg, "Bb", GEN_SHAPE(5), 0.3);
	gen_init(g, mg, "lo", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0));
	gen_init(g, mg, "hi", OQ_DT_FLOAT, 0, NULL, GEN_VALS(6));
	gen_node(g, mg, "Conv", "conva", "x,Wa", "A");
	n = gen_node(g, mg, "Conv", "convb", "x,Wb,Bb", "Bc");
	gen_attr_ints(g, n, "pads", 4, ints(4, 1, 1, 1, 1));
	gen_node(g, mg, "Clip", "relu6", "Bc,lo,hi", "B");
	gen_node(g, mg, "Add", "add", "A,B", "s");
	gen_node(g, mg, "GlobalAveragePool", "gap", "s", "g");
	gen_node(g, mg, "Flatten", "flat", "g", "y");
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 5));
	return g;
}

/* x[1,2,5,5] -> Conv -> t; Sigmoid(t) -> s; Mul(t, s) -> m; Neg(t) -> n; Concat(m, t) -> c */
static gen_model *m_fanout(void)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	Onnx__NodeProto *n;
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 5, 5));
	rinit(g, mg, "W", GEN_SHAPE(3, 2, 1, 1), 0.8);
	gen_node(g, mg, "Conv", "conv", "x,W", "t");
	gen_node(g, mg, "Sigmoid", "sig", "t", "s");
	gen_node(g, mg, "Mul", "mul", "t,s", "m");
	gen_node(g, mg, "Neg", "neg", "t", "n");
	n = gen_node(g, mg, "Concat", "cat", "m,t", "c");
	gen_attr_int(g, n, "axis", 1);
	gen_output(g, mg, "n", OQ_DT_FLOAT, GEN_SHAPE(1, 3, 5, 5));
	gen_output(g, mg, "c", OQ_DT_FLOAT, GEN_SHAPE(1, 6, 5, 5));
	return g;
}

/* x[4,8] -> MatMul W[8,6] -> Add b -> LeakyRelu -> Unsqueeze -> Squeeze -> Gemm(B[6,3], C[3]) */
static gen_model *m_matmul(void)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	Onnx__NodeProto *n;
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(4, 8));
	rinit(g, mg, "W", GEN_SHAPE(8, 6), 0.5);
	rinit(g, mg, "b", GEN_SHAPE(6), 0.2);
	gen_init(g, mg, "axes", OQ_DT_INT64, GEN_SHAPE(1), GEN_VALS(0));
	rinit(g, mg, "W2", GEN_SHAPE(6, 3), 0.5);
	rinit(g, mg, "C2", GEN_SHAPE(3), 0.2);
	gen_node(g, mg, "MatMul", "mm", "x,W", "h");
	gen_node(g, mg, "Add", "bias", "h,b", "hb");
	n = gen_node(g, mg, "LeakyRelu", "lrelu", "hb", "a");
	gen_attr_float(g, n, "alpha", 0.1f);
	gen_node(g, mg, "Unsqueeze", "unsq", "a,axes", "u");
	gen_node(g, mg, "Squeeze", "sq", "u,axes", "q");
	n = gen_node(g, mg, "Gemm", "fc", "q,W2,C2", "y");
	gen_attr_float(g, n, "beta", 0.5f);
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(4, 3));
	return g;
}

/* x[1,2,4,4] -> ConvTranspose(stride 2) -> Relu -> Resize x2 -> Slice -> Pad -> AveragePool */
static gen_model *m_upsample(void)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	Onnx__NodeProto *n;
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 2, 4, 4));
	rinit(g, mg, "W", GEN_SHAPE(2, 3, 3, 3), 0.5);
	rinit(g, mg, "B", GEN_SHAPE(3), 0.2);
	gen_init(g, mg, "scales", OQ_DT_FLOAT, GEN_SHAPE(4), GEN_VALS(1, 1, 2, 2));
	gen_init(g, mg, "starts", OQ_DT_INT64, GEN_SHAPE(2), GEN_VALS(1, 1));
	gen_init(g, mg, "ends", OQ_DT_INT64, GEN_SHAPE(2), GEN_VALS(15, 15));
	gen_init(g, mg, "sl_axes", OQ_DT_INT64, GEN_SHAPE(2), GEN_VALS(2, 3));
	gen_init(g, mg, "pads", OQ_DT_INT64, GEN_SHAPE(8), GEN_VALS(0, 0, 1, 1, 0, 0, 1, 1));
	n = gen_node(g, mg, "ConvTranspose", "deconv", "x,W,B", "d");
	gen_attr_ints(g, n, "strides", 2, ints(2, 2, 2, 0, 0));
	gen_node(g, mg, "Relu", "relu", "d", "r");
	n = gen_node(g, mg, "Resize", "up", "r,,scales", "u");
	gen_attr_str(g, n, "mode", "nearest");
	gen_node(g, mg, "Slice", "slice", "u,starts,ends,sl_axes", "s");
	gen_node(g, mg, "Pad", "pad", "s,pads", "p");
	n = gen_node(g, mg, "AveragePool", "avg", "p", "y");
	gen_attr_ints(g, n, "kernel_shape", 2, ints(2, 3, 3, 0, 0));
	gen_attr_ints(g, n, "strides", 2, ints(2, 2, 2, 0, 0));
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 3, 7, 7));
	return g;
}

/* x[1,4,4,4] -> Conv -> t -> HardSigmoid -> h; Mul(t, h) -> m -> Split(2) -> Concat(b, a) -> Gather */
static gen_model *m_hardsig(void)
{
	gen_model *g = gen_new(8);
	Onnx__GraphProto *mg = gen_graph(g);
	Onnx__NodeProto *n;
	gen_opset(g, "", 13);
	gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(1, 4, 4, 4));
	rinit(g, mg, "W", GEN_SHAPE(4, 4, 1, 1), 0.9);
	rinit(g, mg, "B", GEN_SHAPE(4), 0.5);
	gen_init(g, mg, "idx", OQ_DT_INT64, GEN_SHAPE(3), GEN_VALS(3, 0, 2));
	gen_node(g, mg, "Conv", "conv", "x,W,B", "t");
	gen_node(g, mg, "HardSigmoid", "hsig", "t", "h");
	gen_node(g, mg, "Mul", "mul", "t,h", "m");
	n = gen_node(g, mg, "Split", "split", "m", "a,b");
	gen_attr_int(g, n, "axis", 1);
	n = gen_node(g, mg, "Concat", "cat", "b,a", "c");
	gen_attr_int(g, n, "axis", 1);
	n = gen_node(g, mg, "Gather", "gather", "c,idx", "y");
	gen_attr_int(g, n, "axis", 1);
	gen_output(g, mg, "y", OQ_DT_FLOAT, GEN_SHAPE(1, 3, 4, 4));
	return g;
}

/* One model of the set. */
typedef struct model {
	const char *name;
	const char *dims;    /* input x */
	gen_model *(*make)(void);
} model;

static const model models[] = {
	{"cnn", "1,3,8,8", m_cnn},
	{"branches", "1,4,6,6", m_branches},
	{"fanout", "1,2,5,5", m_fanout},
	{"matmul", "4,8", m_matmul},
	{"upsample", "1,2,4,4", m_upsample},
	{"hardsig", "1,4,4,4", m_hardsig},
};

int main(int argc, char **argv)
{
	size_t n = sizeof models / sizeof models[0];
	if (argc == 2 && strcmp(argv[1], "list") == 0) {
		for (size_t i = 0; i < n; i++)
			printf("%s %s\n", models[i].name, models[i].dims);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "write") == 0) {
		for (size_t i = 0; i < n; i++) {
			char path[1024];
			gen_model *g = models[i].make();
			snprintf(path, sizeof path, "%s/%s.onnx", argv[2], models[i].name);
			if (gen_write(g, path)) {
				fprintf(stderr, "quant_tool: cannot write %s\n", path);
				gen_free(g);
				return 4;
			}
			gen_free(g);
		}
		return 0;
	}
	fprintf(stderr, "usage: quant_tool write DIR | quant_tool list\n");
	return 1;
}
