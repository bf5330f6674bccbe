/*
 * ops.h - operator identity: (domain, op_type) resolved once at load time.
 *
 * `com.microsoft::Gelu` and `ai.onnx::Gelu` are different enum members
 * (OQ_OP_ms_Gelu and OQ_OP_Gelu). Members of the default domain keep ONNX
 * spelling; other domains are prefixed (ml_, ms_, tr_).
 */
#ifndef OQ_OPS_H
#define OQ_OPS_H

/* Operator set domains onnxq recognises; anything else is OQ_DOM_OTHER. */
typedef enum oq_domain {
	OQ_DOM_ONNX,     /* "" or "ai.onnx" */
	OQ_DOM_ML,       /* "ai.onnx.ml" */
	OQ_DOM_MS,       /* "com.microsoft" */
	OQ_DOM_TRAINING, /* "ai.onnx.preview.training" */
	OQ_DOM_OTHER,
} oq_domain;

typedef enum oq_op {
	OQ_OP_UNKNOWN = 0,
#define OQ_OP(dom, cname, str) OQ_OP_##cname,
#include "src/ir/ops.def"
#undef OQ_OP
	OQ_OP_COUNT
} oq_op;

oq_domain oq_domain_of(const char *domain);      /* NULL or "" -> OQ_DOM_ONNX */
const char *oq_domain_name(oq_domain d);         /* canonical name, "" for ONNX */
oq_op oq_op_lookup(oq_domain d, const char *op_type);
const char *oq_op_name(oq_op op);                /* ONNX op_type spelling */
oq_domain oq_op_domain(oq_op op);

#endif
