/*
 * check.h - structural validation of a loaded model (`onnxq check`).
 *
 * Finds every problem, not just the first: topological order, single
 * definitions, dangling inputs, graph outputs, opset imports, attribute
 * types, initializer sizes and QuantizeLinear/DequantizeLinear legality
 * (scale/zero-point shapes against axis and block_size, dtype pairs, opset
 * and IR version requirements). Subgraphs are checked too.
 */
#ifndef OQ_CHECK_H
#define OQ_CHECK_H

#include "src/ir/ir.h"

/* One problem found by the checker. */
typedef struct oq_problem {
	char *where;  /* "node 'conv1' (Conv)", "initializer 'w'", "model", ... */
	char *rule;   /* short stable rule id, e.g. "topo-order", "qdq-scale-shape" */
	char *msg;    /* what is wrong and what to do */
} oq_problem;

typedef struct oq_problems {
	oq_problem *v;
	size_t n, cap;
} oq_problems;

/* Appends every problem of m to *out. Returns OQ_OK (even with problems) or OQ_ENOMEM. */
int oq_check_model(const oq_model *m, oq_problems *out) OQ_WUR;
/* Adds one problem (strings are copied). */
int oq_problems_add(oq_problems *p, const char *where, const char *rule, const char *fmt, ...)
	OQ_PRINTF(4, 5) OQ_WUR;
void oq_problems_free(oq_problems *p);
/*
 * Prints the problems of the model at `path` to f: as JSON
 * ({"valid", "loaded": true, "problems": [{where, rule, message}]}), or as
 * text, one "PATH: WHERE: MESSAGE [RULE]" line each ("PATH: valid" when
 * there are none), names escaped (oq_text_str) so that none forges a line.
 */
void oq_problems_print(const oq_problems *p, const char *path, int json, FILE *f);
/* The members of that JSON object ("valid", "loaded", "problems"), without braces: a caller
 * adding members of its own writes the braces. */
void oq_problems_json(const oq_problems *p, FILE *f);

#endif
