/*
 * gen_model.h - build small ONNX models in C for tests and test tools.
 *
 * A gen_model is a ModelProto under construction (protobuf-c structs from
 * onnx.pb-c.h) plus an arena that owns every allocation, so tests can write
 * malformed models on purpose (dangling names, wrong attribute types, bad
 * Q/DQ shapes) that no exporter would produce. Serialize it with
 * gen_pack()/gen_write(), or load it straight into the IR with gen_load().
 *
 * Capacities are fixed (GEN_CAP entries per list) because test models are
 * tiny; a list that overflows aborts the test program (test code only).
 *
 *   gen_model *g = gen_new(10);
 *   gen_opset(g, "", 21);
 *   Onnx__GraphProto *mg = gen_graph(g);
 *   gen_input(g, mg, "x", OQ_DT_FLOAT, GEN_SHAPE(2, 4));
 *   gen_init(g, mg, "s", OQ_DT_FLOAT, 0, NULL, GEN_VALS(0.5));
 *   gen_node(g, mg, "QuantizeLinear", "q", "x,s", "y");
 *   gen_output(g, mg, "y", OQ_DT_UINT8, GEN_SHAPE(2, 4));
 */
#ifndef OQ_GEN_MODEL_H
#define OQ_GEN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "src/ir/ir.h"
#include "onnx.pb-c.h"

/* Largest number of entries in any list of a generated message. */
#define GEN_CAP 64

/* `rank, dims` argument pair from a list of dims: GEN_SHAPE(2, 4). */
#define GEN_SHAPE(...)                                                                             \
	(int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[])         \
	{                                                                                          \
		__VA_ARGS__                                                                        \
	}
/* Initializer values (converted to the tensor's dtype): GEN_VALS(0.5, 1). */
#define GEN_VALS(...)                                                                              \
	(const double[])                                                                           \
	{                                                                                          \
		__VA_ARGS__                                                                        \
	}

typedef struct gen_model gen_model;

/* A model with the given IR version, no opset imports and an empty graph named "g". */
gen_model *gen_new(int64_t ir_version);
void gen_free(gen_model *m);
Onnx__ModelProto *gen_proto(gen_model *m);
/* The main graph. */
Onnx__GraphProto *gen_graph(gen_model *m);
void gen_opset(gen_model *m, const char *domain, int64_t version);

/* Graph inputs/outputs/value_info: dims < 0 become the symbolic dim "N"; rank < 0 means no shape;
 * dtype 0 means no element type. */
void gen_input(gen_model *m, Onnx__GraphProto *g, const char *name, int dtype, int rank,
               const int64_t *dims);
void gen_output(gen_model *m, Onnx__GraphProto *g, const char *name, int dtype, int rank,
                const int64_t *dims);
void gen_value_info(gen_model *m, Onnx__GraphProto *g, const char *name, int dtype, int rank,
                    const int64_t *dims);

/* A tensor in raw_data form; vals (product of dims entries) or NULL for zeros. Sub-byte types are
 * packed low bits first. */
Onnx__TensorProto *gen_tensor(gen_model *m, const char *name, int dtype, int rank,
                              const int64_t *dims, const double *vals);
/* Adds an initializer (see gen_tensor). */
Onnx__TensorProto *gen_init(gen_model *m, Onnx__GraphProto *g, const char *name, int dtype,
                            int rank, const int64_t *dims, const double *vals);

/* Appends a node; inputs and outputs are comma-separated names, empty entries allowed ("a,,b"). */
Onnx__NodeProto *gen_node(gen_model *m, Onnx__GraphProto *g, const char *op_type, const char *name,
                          const char *inputs, const char *outputs);
void gen_domain(gen_model *m, Onnx__NodeProto *n, const char *domain);

/* Attributes (type set from the call). */
Onnx__AttributeProto *gen_attr(gen_model *m, Onnx__NodeProto *n, const char *name, int type);
void gen_attr_int(gen_model *m, Onnx__NodeProto *n, const char *name, int64_t v);
void gen_attr_float(gen_model *m, Onnx__NodeProto *n, const char *name, float v);
void gen_attr_str(gen_model *m, Onnx__NodeProto *n, const char *name, const char *v);
void gen_attr_ints(gen_model *m, Onnx__NodeProto *n, const char *name, size_t count,
                   const int64_t *v);
/* A GRAPH attribute holding a new empty graph, returned for filling. */
Onnx__GraphProto *gen_attr_graph(gen_model *m, Onnx__NodeProto *n, const char *name,
                                 const char *graph_name);

/* y = x W, the model several tests quantize: opset 21, IR 10, input x [rows, k], initializer W
 * [k, n] holding w (row-major), output y [rows, n]. */
gen_model *gen_matmul(int64_t rows, int64_t k, int64_t n, const double *w);

/* Serializes the model into a buffer owned by m (valid until the next gen_pack or gen_free). */
int gen_pack(gen_model *m, const void **buf, size_t *len);
/* Writes the serialized model to path. 0 on success. */
int gen_write(gen_model *m, const char *path);
/* Serializes and loads into the IR. The model borrows m's buffer: free it before gen_free(m).
 * Returns the loader's status; d receives its message. */
int gen_load(gen_model *m, oq_model **out, oq_diag *d);

#endif
