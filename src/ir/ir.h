/*
 * ir.h - onnxq's in-memory model: graphs of nodes and values, tensors,
 * attributes.
 *
 * The IR owns the topology and the tensors and borrows the rest:
 * - an oq_value is an edge (graph input, initializer or node output) with
 *   one producer and a use list (oq_graph_rebuild_uses after edits);
 * - initializer payloads are one representation whatever the file used
 *   (raw_data, typed fields or external data): contiguous little-endian
 *   element bytes, sub-byte types packed low bits first; they may point into
 *   a read-only mapping of the model or its external data file;
 * - everything onnxq does not model (doc strings, metadata, functions,
 *   training info, unknown attributes and fields) stays in the unpacked
 *   protobuf, referenced by each object's `src`, and is written back.
 *
 * Subgraphs (If/Loop/Scan bodies) are oq_graphs with a parent; a name a
 * subgraph uses but does not define is an "outer" value that points at the
 * value of an enclosing graph.
 */
#ifndef OQ_IR_H
#define OQ_IR_H

#include <stddef.h>
#include <stdint.h>

#include "src/ir/dtype.h"
#include "src/oq.h"
#include "src/ir/ops.h"

typedef struct oq_model oq_model;
typedef struct oq_graph oq_graph;
typedef struct oq_node oq_node;
typedef struct oq_value oq_value;
typedef struct oq_tensor oq_tensor;

/* Bytes with a length (attribute strings may hold any byte). */
typedef struct oq_bytes {
	size_t len;        /* number of bytes, excluding the NUL we add */
	char *p;           /* owned, NUL-terminated for convenience */
} oq_bytes;

/* Largest rank onnxq accepts from a file; deeper is reported as invalid. */
#define OQ_MAX_RANK 64

/*
 * A dense tensor. `data` holds `nbytes` bytes: elements in C order,
 * little-endian, sub-byte types packed (see dtype.h). String tensors use
 * `strs` instead. Borrowed data (from a file mapping) may be unaligned:
 * code that computes on it calls oq_tensor_own() first.
 */
struct oq_tensor {
	char *name;          /* initializer name; "" for attribute tensors */
	int dtype;           /* oq_dtype (ONNX number) */
	int rank;            /* number of dims, 0 for a scalar */
	int64_t *dims;       /* rank entries, each >= 0 */
	size_t nelem;        /* product of dims (checked against overflow) */
	size_t nbytes;       /* bytes of data */
	const void *data;    /* payload; NULL only when nbytes == 0 */
	int owned;           /* data was malloc'd by onnxq and is freed with the tensor */
	oq_bytes *strs;      /* STRING tensors: nelem entries */
	int external;        /* payload came from an external data file */
	const void *src;     /* Onnx__TensorProto it was loaded from, or NULL */
};

/* A sparse tensor (COO): values [NNZ] and indices [NNZ] or [NNZ, rank]. */
typedef struct oq_sparse {
	oq_tensor *values;
	oq_tensor *indices;
	int rank;
	int64_t *dims;       /* dense shape */
	const void *src;     /* Onnx__SparseTensorProto, or NULL */
} oq_sparse;

/* Attribute types: the ONNX AttributeProto.AttributeType numbers. */
enum {
	OQ_ATTR_UNDEFINED = 0, OQ_ATTR_FLOAT = 1, OQ_ATTR_INT = 2, OQ_ATTR_STRING = 3,
	OQ_ATTR_TENSOR = 4, OQ_ATTR_GRAPH = 5, OQ_ATTR_FLOATS = 6, OQ_ATTR_INTS = 7,
	OQ_ATTR_STRINGS = 8, OQ_ATTR_TENSORS = 9, OQ_ATTR_GRAPHS = 10,
	OQ_ATTR_SPARSE_TENSOR = 11, OQ_ATTR_SPARSE_TENSORS = 12,
	OQ_ATTR_TYPE_PROTO = 13, OQ_ATTR_TYPE_PROTOS = 14,
};
const char *oq_attr_type_name(int type);

/*
 * A node attribute. Exactly the field named by `type` is meaningful; list
 * types use `n` and the matching array. TYPE_PROTO(S) and `ref_attr_name`
 * references live only in `src` and are written back from there.
 */
typedef struct oq_attr {
	char *name;
	int type;            /* OQ_ATTR_* */
	float f;
	int64_t i;
	oq_bytes s;
	oq_tensor *t;
	oq_graph *g;
	oq_sparse *sp;
	size_t n;            /* element count of the list below */
	float *floats;
	int64_t *ints;
	oq_bytes *strings;
	oq_tensor **tensors;
	oq_graph **graphs;
	oq_sparse **sparses;
	const void *src;     /* Onnx__AttributeProto, or NULL for new attributes */
} oq_attr;

/* Kinds of value type (TypeProto's oneof). */
enum {
	OQ_TYPE_NONE = 0,    /* no type information */
	OQ_TYPE_TENSOR,
	OQ_TYPE_SEQUENCE,
	OQ_TYPE_MAP,
	OQ_TYPE_OPTIONAL,
	OQ_TYPE_SPARSE,
	OQ_TYPE_OTHER,
};

/* One dimension of a declared shape. */
typedef struct oq_dim {
	int64_t value;       /* >= 0 when known, -1 when symbolic or unknown */
	char *param;         /* symbolic name (dim_param), or NULL */
} oq_dim;

/* Declared type and shape of a value (from inputs, outputs, value_info). */
typedef struct oq_type {
	int kind;            /* OQ_TYPE_* */
	int dtype;           /* element type for tensor/sparse; 0 if unknown */
	int rank;            /* -1 when the shape is unknown */
	oq_dim *dims;        /* rank entries */
} oq_type;

/* A use of a value: input `index` of `node`. */
typedef struct oq_use {
	oq_node *node;
	int index;
} oq_use;

/* Value flags. */
enum {
	OQ_V_INPUT = 1,      /* listed in the graph's inputs */
	OQ_V_OUTPUT = 2,     /* listed in the graph's outputs */
	OQ_V_VINFO = 4,      /* listed in the graph's value_info */
	OQ_V_OUTER = 8,      /* defined by an enclosing graph; see `outer` */
	OQ_V_TYPE_EDITED = 16, /* type changed since load: rebuild its TypeProto */
	OQ_V_DROPPING = 32,  /* scratch mark of oq_graph_drop_unused_inits, clear between calls */
};

/*
 * Channel c (axis 1) of a value modelled as N(mean[c], std[c]^2): the bias beta_c and |scale
 * gamma_c| of the inference BatchNormalization that wrote it. fold-bn sets it on the value a
 * Conv/ConvTranspose writes once the BN is folded into it (the statistics are otherwise gone);
 * cle reads it for high-bias absorption and keeps it current for the channels it rescales and
 * shifts. Not saved: a model loaded from a file has none.
 */
typedef struct oq_bnstats {
	size_t n;            /* channels */
	double *mean;        /* n entries (points into v) */
	double *std;         /* n entries, >= 0 (points into v) */
	double v[];          /* mean then std */
} oq_bnstats;

struct oq_value {
	char *name;
	oq_graph *graph;     /* graph whose scope holds this value */
	unsigned flags;      /* OQ_V_* */
	oq_type type;        /* declared type; kind OQ_TYPE_NONE when absent */
	oq_tensor *init;     /* initializer payload, or NULL */
	oq_node *producer;   /* node writing it, or NULL */
	int producer_index;  /* output slot of producer */
	oq_use *uses;        /* consumers (rebuilt by oq_graph_rebuild_uses) */
	size_t n_uses, cap_uses;
	oq_value *outer;     /* OQ_V_OUTER: the enclosing graph's value */
	const void *vinfo;   /* Onnx__ValueInfoProto it was declared by, or NULL */
	size_t index;        /* position in graph->values */
	unsigned qmark;      /* quantization hints set by passes (OQ_QM_*, passes/pass.h) */
	oq_bnstats *bn;      /* the folded BN's statistics (see oq_bnstats), or NULL; owned */
};

struct oq_node {
	char *name;          /* may be "" */
	char *op_type;       /* as in the file */
	char *domain;        /* as in the file ("" for ai.onnx) */
	oq_op op;            /* resolved (domain, op_type) */
	int64_t opset;       /* version of the node's domain imported by the model, 0 if none */
	oq_graph *graph;
	oq_value **inputs;   /* n_inputs entries; NULL for an omitted optional input ("") */
	size_t n_inputs;
	oq_value **outputs;  /* NULL for an omitted optional output */
	size_t n_outputs;
	oq_attr *attrs;
	size_t n_attrs;
	const void *src;     /* Onnx__NodeProto, or NULL for new nodes */
	size_t index;        /* position in graph->nodes */
	int dead;            /* set by a pass; oq_graph_sweep frees the node */
	unsigned qmark;      /* quantization hints set by passes (OQ_QM_*, passes/pass.h) */
};

struct oq_graph {
	oq_model *model;
	oq_graph *parent;    /* enclosing graph for subgraphs, NULL for the main graph */
	char *name;
	oq_node **nodes;     /* in file order (topological once verified) */
	size_t n_nodes, cap_nodes;
	oq_value **values;   /* every value of this scope, owned */
	size_t n_values, cap_values;
	oq_value **inputs;   /* graph inputs, in order */
	size_t n_inputs;
	oq_value **outputs;  /* graph outputs, in order */
	size_t n_outputs;
	oq_value **inits;    /* initializers, in file order */
	size_t n_inits;
	oq_value **vinfos;   /* value_info entries, in file order */
	size_t n_vinfos;
	oq_sparse **sparse_inits; /* sparse initializers (kept, not densified) */
	char **sparse_names;
	size_t n_sparse;
	/* name -> value hash (open addressing, power-of-two size) */
	oq_value **hash;
	size_t hash_cap;
	size_t n_subgraphs;  /* live graphs whose parent is this one: 0 lets subgraph walks end at once */
	const void *src;     /* Onnx__GraphProto, or NULL */
};

/* An imported operator set. */
typedef struct oq_opset {
	char *domain;        /* "" for ai.onnx */
	int64_t version;
	const void *src;     /* Onnx__OperatorSetIdProto, or NULL */
} oq_opset;

/* A read-only file mapping that tensors may borrow from. */
typedef struct oq_mapping {
	char *path;          /* resolved file path, or NULL for a caller's buffer */
	void *base;
	size_t size;
	int mapped;          /* base came from mmap and is unmapped with the model */
} oq_mapping;

struct oq_model {
	int64_t ir_version;
	oq_opset *opsets;
	size_t n_opsets;
	char *producer_name;
	char *producer_version;
	oq_graph *graph;
	char *path;          /* file it was loaded from, or NULL */
	char *dir;           /* its folder (base for external data) */
	oq_mapping *maps;    /* model file first, then external data files */
	size_t n_maps;
	void *proto;         /* unpacked Onnx__ModelProto (owned), or NULL */
	void (*free_proto)(void *proto); /* set by the loader, which knows the type */
	void *stripped;      /* the stripped serialized bytes proto was unpacked from */
	size_t n_functions;  /* model-local functions (kept in proto) */
	size_t n_training;   /* training_info entries (kept in proto) */
};

/* ---- construction and lookup (ir.c) ---- */
oq_model *oq_model_new(void);
void oq_model_free(oq_model *m);
oq_graph *oq_graph_new(oq_model *m, oq_graph *parent);
void oq_graph_free(oq_graph *g);

/* Opset version of `domain` ("" = ai.onnx), 0 when not imported. */
int64_t oq_model_opset(const oq_model *m, const char *domain);

/* Value named `name` in g's own scope, or NULL. */
oq_value *oq_graph_find(const oq_graph *g, const char *name);
/* Value in g's scope, creating it when absent. NULL on allocation failure. */
oq_value *oq_graph_value(oq_graph *g, const char *name);
/* Follows OQ_V_OUTER links to the defining value. */
oq_value *oq_value_resolve(oq_value *v);

/* Statistics for n channels (zeroed), freed with free(). NULL on overflow/allocation failure. */
oq_bnstats *oq_bnstats_new(size_t n);

/* Frees a node that is no longer in any graph's node list. */
void oq_node_free(oq_node *n);
/* Frees what an attribute owns (not the struct itself). */
void oq_attr_clear(oq_attr *a);

/* Appends a new node (copies strings). NULL on allocation failure. */
oq_node *oq_graph_add_node(oq_graph *g, const char *op_type, const char *domain, const char *name);
/* Sets node inputs/outputs arrays (n entries, copied). */
int oq_node_set_inputs(oq_node *n, oq_value *const *v, size_t count) OQ_WUR;
int oq_node_set_outputs(oq_node *n, oq_value *const *v, size_t count) OQ_WUR;
/* Appends the use (n, index) to v's use list (for edits that keep uses current themselves). */
int oq_value_add_use(oq_value *v, oq_node *n, int index) OQ_WUR;
/* Rebuilds producers and use lists of g and all its subgraphs. */
int oq_graph_rebuild_uses(oq_graph *g) OQ_WUR;

/*
 * A set of borrowed strings (open addressing): for passes that test many
 * fresh names against all node names in constant time. The strings must
 * outlive the set.
 */
typedef struct oq_nameset {
	const char **slot;   /* cap entries, NULL when free */
	size_t cap, n;
} oq_nameset;
int oq_nameset_add(oq_nameset *s, const char *name) OQ_WUR;
int oq_nameset_has(const oq_nameset *s, const char *name);
void oq_nameset_free(oq_nameset *s);

/* Attribute lookup by name, or NULL. */
const oq_attr *oq_node_attr(const oq_node *n, const char *name);
int64_t oq_node_attr_int(const oq_node *n, const char *name, int64_t dflt);

/* Calls fn for every subgraph held by node attributes of g (not recursive). */
typedef int (*oq_subgraph_fn)(oq_graph *sub, oq_node *owner, void *ctx);
int oq_graph_each_subgraph(oq_graph *g, oq_subgraph_fn fn, void *ctx) OQ_WUR;

/* ---- tensors (tensor.c) ---- */
/* A new tensor with dims and zeroed owned data; NULL on overflow/alloc failure. */
oq_tensor *oq_tensor_new(int dtype, int rank, const int64_t *dims);
void oq_tensor_free(oq_tensor *t);
/* nelem and nbytes for a dtype and dims; OQ_EINVAL on negative dims or overflow. */
int oq_shape_size(int dtype, int rank, const int64_t *dims, size_t *nelem, size_t *nbytes) OQ_WUR;
/* Makes data owned and 64-byte aligned (copies borrowed data). */
int oq_tensor_own(oq_tensor *t) OQ_WUR;
/* Element i as double (numeric dtypes incl. fp16/bf16/sub-byte; 0 otherwise). */
double oq_tensor_get(const oq_tensor *t, size_t i);
/* Element i as int64 for integer and bool tensors (0 for other types). */
int64_t oq_tensor_get_int(const oq_tensor *t, size_t i);
/*
 * Gives back the resident pages of a tensor borrowed from one of m's file
 * mappings (no-op for owned data): for after its bytes were copied or
 * quantized, so a model's weights are not resident twice.
 */
void oq_tensor_release_pages(const oq_model *m, const oq_tensor *t);
/* Byte-for-byte equality of dtype, dims and payload (strings compared too). */
int oq_tensor_equal(const oq_tensor *a, const oq_tensor *b);

/* ---- editing (edit.c): what passes use to rewrite graphs ---- */
/*
 * A new value named `base`, or `base_1`, `base_2`, ... whichever is free in
 * g, its enclosing graphs and all their subgraphs (ONNX names are unique
 * across scopes). NULL on allocation failure.
 */
oq_value *oq_graph_new_value(oq_graph *g, const char *base);
/* Adds an initializer holding `t` (ownership passes to g, also on failure) under a fresh name. */
oq_value *oq_graph_add_init(oq_graph *g, const char *base, oq_tensor *t);
/* Detaches v's initializer (freed) and drops v from inits, inputs and value_info. */
void oq_graph_remove_init(oq_graph *g, oq_value *v);
/*
 * Removes initializers nothing reads (uses must be current), except graph
 * inputs/outputs and values a subgraph captures. Returns how many went.
 */
size_t oq_graph_drop_unused_inits(oq_graph *g);
/* Drops v from value_info (e.g. after its type changed or its producer went away). */
void oq_graph_remove_vinfo(oq_graph *g, oq_value *v);
/*
 * Makes every consumer of `from` in g (not in subgraphs) read `to`, in
 * time linear in from's uses, which must be current; their entries move to
 * the end of to's use list (producers are untouched).
 */
int oq_value_replace_uses(oq_graph *g, oq_value *from, oq_value *to) OQ_WUR;
/* Number of subgraph values (at any depth below v's graph) that capture v as an outer name. */
size_t oq_value_n_captures(const oq_value *v);
/* The one live (not dead) node reading v, or NULL when none or several do (uses must be current). */
oq_node *oq_value_only_user(const oq_value *v);
/*
 * The tensor of v when v is a constant of g: an initializer of g that is not
 * also a graph input from IR version 4 on (such an input may be fed at run
 * time, so its initializer is only a default). NULL otherwise, and for a
 * value of another graph (a subgraph's capture is not its constant).
 */
oq_tensor *oq_value_const(const oq_graph *g, const oq_value *v);
/* v may be removed or renamed: not a graph input or output, and no subgraph captures it. */
int oq_value_is_private(const oq_value *v);
/* n is a live node (not marked dead) of the ai.onnx domain with op type `op`. */
int oq_node_is(const oq_node *n, oq_op op);
/* Frees nodes marked `dead` (graph and subgraphs) and rebuilds uses. */
int oq_graph_sweep(oq_graph *g) OQ_WUR;
/*
 * Orders g's nodes so every input is produced before it is read (file order
 * kept where it is already valid; subgraph captures count as inputs of
 * their owner). OQ_EINVAL naming a node on a cycle. Uses are rebuilt.
 */
int oq_graph_toposort(oq_graph *g, oq_diag *d) OQ_WUR;
/*
 * OQ_EINVAL naming the value and its writers when a node output of g or of
 * a subgraph is also written by another node, is an initializer or a graph
 * input: passes rewire a value through its one producer and would leave
 * the other writer's readers dangling (`onnxq check`: multiple-def). Uses
 * must be current.
 */
int oq_graph_check_producers(oq_graph *g, oq_diag *d) OQ_WUR;
/* Sets the declared tensor type of v (marks it edited so the saver rewrites it). */
int oq_value_set_type(oq_value *v, int dtype, int rank, const int64_t *dims) OQ_WUR;

/* Attribute setters: replace an attribute of that name or append one. */
int oq_node_set_attr_int(oq_node *n, const char *name, int64_t v) OQ_WUR;
int oq_node_set_attr_float(oq_node *n, const char *name, float v) OQ_WUR;
int oq_node_set_attr_ints(oq_node *n, const char *name, const int64_t *v, size_t count) OQ_WUR;
int oq_node_set_attr_floats(oq_node *n, const char *name, const float *v, size_t count) OQ_WUR;
int oq_node_set_attr_string(oq_node *n, const char *name, const char *v) OQ_WUR;
/* Takes ownership of t (freed on failure too). */
int oq_node_set_attr_tensor(oq_node *n, const char *name, oq_tensor *t) OQ_WUR;
/* Removes the attribute if present. */
void oq_node_del_attr(oq_node *n, const char *name);

/*
 * Sets the imported version of `domain` (adding the import when absent) and
 * updates the opset of every node of that domain, subgraphs included.
 */
int oq_model_set_opset(oq_model *m, const char *domain, int64_t version) OQ_WUR;

/* A float32 tensor with dims and a copy of `data` (nelem floats), or NULL. */
oq_tensor *oq_tensor_from_floats(int rank, const int64_t *dims, const float *data);
/* Elements of a numeric initializer as float32 (converted from its dtype); caller frees. */
float *oq_tensor_to_floats(const oq_tensor *t);

#endif
