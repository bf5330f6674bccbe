/*
 * ops.c - op name tables generated from ops.def and a sorted index for
 * lookup by (domain, op_type).
 */
#include "src/ir/ops.h"

#include <stdlib.h>
#include <string.h>

static const char *const names[OQ_OP_COUNT] = {
	[OQ_OP_UNKNOWN] = "?",
#define OQ_OP(dom, cname, str) [OQ_OP_##cname] = str,
#include "src/ir/ops.def"
#undef OQ_OP
};

static const unsigned char domains[OQ_OP_COUNT] = {
	[OQ_OP_UNKNOWN] = OQ_DOM_OTHER,
#define OQ_OP(dom, cname, str) [OQ_OP_##cname] = OQ_DOM_##dom,
#include "src/ir/ops.def"
#undef OQ_OP
};

oq_domain oq_domain_of(const char *domain)
{
	if (!domain || !*domain || strcmp(domain, "ai.onnx") == 0)
		return OQ_DOM_ONNX;
	if (strcmp(domain, "ai.onnx.ml") == 0)
		return OQ_DOM_ML;
	if (strcmp(domain, "com.microsoft") == 0)
		return OQ_DOM_MS;
	if (strcmp(domain, "ai.onnx.preview.training") == 0)
		return OQ_DOM_TRAINING;
	return OQ_DOM_OTHER;
}

const char *oq_domain_name(oq_domain d)
{
	switch (d) {
	case OQ_DOM_ONNX: return "";
	case OQ_DOM_ML: return "ai.onnx.ml";
	case OQ_DOM_MS: return "com.microsoft";
	case OQ_DOM_TRAINING: return "ai.onnx.preview.training";
	default: return "?";
	}
}

/* Index sorted by (domain, name); built on first use. */
static int index_built;
static unsigned short order[OQ_OP_COUNT];

static int cmp(const void *a, const void *b)
{
	int x = *(const unsigned short *)a, y = *(const unsigned short *)b;
	if (domains[x] != domains[y])
		return domains[x] - domains[y];
	return strcmp(names[x], names[y]);
}

oq_op oq_op_lookup(oq_domain d, const char *op_type)
{
	size_t lo = 0, hi = OQ_OP_COUNT - 1;

	if (!op_type || d == OQ_DOM_OTHER)
		return OQ_OP_UNKNOWN;
	if (!index_built) {
		for (int i = 1; i < OQ_OP_COUNT; i++)
			order[i - 1] = (unsigned short)i;
		qsort(order, OQ_OP_COUNT - 1, sizeof order[0], cmp);
		index_built = 1;
	}
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int o = order[mid], c = (int)domains[o] - (int)d;
		if (c == 0)
			c = strcmp(names[o], op_type);
		if (c == 0)
			return (oq_op)o;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return OQ_OP_UNKNOWN;
}

const char *oq_op_name(oq_op op)
{
	return (op >= 0 && op < OQ_OP_COUNT) ? names[op] : "?";
}

oq_domain oq_op_domain(oq_op op)
{
	return (op >= 0 && op < OQ_OP_COUNT) ? (oq_domain)domains[op] : OQ_DOM_OTHER;
}
