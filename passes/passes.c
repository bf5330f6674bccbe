/*
 * passes.c - the pass table and the driver that runs it.
 *
 * The table order is the pipeline order: cleanup makes PyTorch and Paddle
 * exports look alike (no Identity, weights as initializers), upgrade-opset
 * brings old models to an opset that has the Q/DQ features asked for,
 * fold-bn removes inference BatchNormalization (keeping its statistics on
 * the Conv's output for cle), cle (opt-in: --cle or --passes) equalizes the
 * weight ranges of Conv pairs and absorbs high biases, fuse marks the quantization
 * units and quantize inserts Q/DQ from the calibrated ranges. Calibration
 * runs between fuse and quantize: the pipeline (src/pipeline/pipeline.c)
 * runs the stage oq_passes_rewrite, calibrates, then oq_passes_quantize.
 *
 * After every pass the driver removes dead nodes, restores topological
 * order, drops initializers nothing reads any more and, when verifying, runs the model checker and fails on any
 * problem the pass introduced (problems the input already had are not the
 * pass's fault and are only counted).
 */
#include "passes/pass.h"

#include <stdlib.h>
#include <string.h>

#include "src/report/check.h"

static int want_cle(const oq_opts *o)
{
	return o->cle;
}

const oq_pass oq_passes[] = {
	{"cleanup", oq_pass_cleanup,
	 "remove Identity/Dropout, fold constants (Constant nodes become initializers), drop dead code", NULL},
	{"upgrade-opset", oq_pass_upgrade_opset,
	 "convert nodes to the opset quantization needs (--opset N; default the lowest needed, >= 13)", NULL},
	{"fold-bn", oq_pass_fold_bn,
	 "fold inference BatchNormalization into the Conv/ConvTranspose/Gemm/MatMul before it", NULL},
	{"cle", oq_pass_cle,
	 "cross-layer equalization of Conv -> [Relu] -> Conv weight ranges and high-bias absorption (--cle)",
	 want_cle},
	{"fuse", oq_pass_fuse,
	 "mark quantization units: Conv/Gemm/MatMul/Add + Relu/Clip/LeakyRelu, MatMul + bias Add, "
	 "decomposed LayerNorm/GELU/HardSwish", NULL},
	{"quantize", oq_pass_quantize,
	 "insert QuantizeLinear/DequantizeLinear, quantize weights and biases", NULL},
};
const size_t oq_n_passes = sizeof oq_passes / sizeof oq_passes[0];

const char oq_passes_rewrite[] = "cleanup,upgrade-opset,fold-bn,cle,fuse";
const char oq_passes_quantize[] = "quantize";

const oq_pass *oq_pass_find(const char *name)
{
	for (size_t i = 0; i < oq_n_passes; i++)
		if (strcmp(oq_passes[i].name, name) == 0)
			return &oq_passes[i];
	return NULL;
}

void oq_opts_init(oq_opts *o)
{
	memset(o, 0, sizeof *o);
	o->profile = OQ_PROFILE_ORT;
	o->weight_type = OQ_DT_INT8;
	o->act_type = OQ_DT_UINT8;
	o->granularity = OQ_GRAN_CHANNEL;
	o->sym_grid = OQ_GRID_NARROW;
}

int oq_runtime_aware(const oq_opts *o)
{
	return o && o->profile == OQ_PROFILE_ORT && o->prefer != OQ_PREFER_ACCURACY && !o->weight_only &&
	       (o->act_type == OQ_DT_UINT8 || o->act_type == OQ_DT_INT8) &&
	       (o->weight_type == OQ_DT_INT8 || o->weight_type == OQ_DT_UINT8) && o->granularity != OQ_GRAN_BLOCK;
}

/* Is `name` in the comma-separated list? */
static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && strncmp(p, name, n) == 0)
			return 1;
		p += len + (e ? 1 : 0);
	}
	return 0;
}

int oq_pass_selected(const oq_pass_run *r, const char *name)
{
	if (r->list && !in_list(r->list, name))
		return 0;
	for (size_t k = 0; k < r->n_disabled; k++)
		if (strcmp(r->disabled[k], name) == 0)
			return 0;
	return 1;
}

static int usage_names(oq_diag *d, const char *what, const char *name)
{
	char names[256] = "";
	for (size_t i = 0; i < oq_n_passes; i++) {
		strncat(names, oq_passes[i].name, sizeof names - strlen(names) - 1);
		if (i + 1 < oq_n_passes)
			strncat(names, ", ", sizeof names - strlen(names) - 1);
	}
	return oq_err(d, OQ_EUSAGE, "%s: unknown pass '%s' (passes: %s)", what, name, names);
}

/* Checks every name of a comma-separated list. */
static int check_list(const char *list, const char *what, oq_diag *d)
{
	char buf[128];
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len >= sizeof buf)
			len = sizeof buf - 1;
		memcpy(buf, p, len);
		buf[len] = 0;
		if (!oq_pass_find(buf))
			return usage_names(d, what, buf);
		p += (e ? (size_t)(e - p) + 1 : strlen(p));
	}
	return OQ_OK;
}

/* Problem count and the first message of a model, for the verifier. */
static int count_problems(const oq_model *m, size_t *n, char *first, size_t cap)
{
	oq_problems p = {0};
	int rc = oq_check_model(m, &p);
	*n = p.n;
	if (first && cap) {
		first[0] = 0;
		if (p.n)
			snprintf(first, cap, "%s: %s (%s)", p.v[p.n - 1].where, p.v[p.n - 1].msg,
				 p.v[p.n - 1].rule);
	}
	oq_problems_free(&p);
	return rc;
}

int oq_passes_run(oq_model *m, const oq_pass_run *r, const oq_opts *o, oq_diag *d)
{
	size_t base = 0;
	int rc;

	if (r->list && (rc = check_list(r->list, "--passes", d)))
		return rc;
	for (size_t i = 0; i < r->n_disabled; i++)
		if (!oq_pass_find(r->disabled[i]))
			return usage_names(d, "--no-PASS", r->disabled[i]);
	if (r->dump_after && !oq_pass_find(r->dump_after))
		return usage_names(d, "--dump-after", r->dump_after);
	if (r->stage && (rc = check_list(r->stage, "stage", d)))
		return rc;
	if (!m->graph)
		return OQ_OK;
	if ((rc = oq_graph_rebuild_uses(m->graph)))
		return oq_err(d, rc, "passes: out of memory");
	if ((rc = oq_graph_check_producers(m->graph, d)))
		return rc;
	if (r->verify && (rc = count_problems(m, &base, NULL, 0)))
		return oq_err(d, rc, "passes: out of memory");

	for (size_t i = 0; i < oq_n_passes; i++) {
		const oq_pass *p = &oq_passes[i];
		int changed = 0;

		if (!oq_pass_selected(r, p->name) || (r->stage && !in_list(r->stage, p->name)) ||
		    (!r->list && p->wanted && !p->wanted(o)))
			continue;
		if ((rc = oq_graph_rebuild_uses(m->graph)))
			return oq_err(d, rc, "passes: out of memory");
		if ((rc = p->fn(m->graph, o, d, &changed)))
			return rc;
		if ((rc = oq_graph_sweep(m->graph)))
			return oq_err(d, rc, "passes: out of memory");
		if ((rc = oq_graph_toposort(m->graph, d)))
			return rc;
		/* e.g. the bounds of a Clip that quantize folded into its Q */
		(void)oq_graph_drop_unused_inits(m->graph);
		if (o->log && changed)
			fprintf(o->log, "pass %s: changed the graph\n", p->name);
		if (r->verify) {
			size_t n;
			char first[512];
			if ((rc = count_problems(m, &n, first, sizeof first)))
				return oq_err(d, rc, "passes: out of memory");
			if (n > base)
				return oq_err(d, OQ_EINVAL, "verify: pass %s left an invalid model: %s", p->name,
					      first);
			base = n;
		}
		if (r->dump_after && strcmp(r->dump_after, p->name) == 0) {
			FILE *f = r->dump ? r->dump : stderr;
			fprintf(f, "# after %s\n", p->name);
			oq_graph_dump(m->graph, f);
		}
	}
	return OQ_OK;
}

/* ------------------------------------------------------------ dump */

static void dump_value(const oq_value *v, FILE *f)
{
	if (!v) {
		fputs("_", f);
		return;
	}
	fputs(v->name, f);
	if (v->qmark & OQ_QM_INTERNAL)
		fputs("{internal}", f);
	if (v->qmark & OQ_QM_UNIT_OUT)
		fputs("{unit-out}", f);
	if (v->init) {
		const oq_tensor *t = v->init;
		fprintf(f, ":%s[", oq_dtype_name(t->dtype));
		for (int i = 0; i < t->rank; i++)
			fprintf(f, "%s%lld", i ? "," : "", (long long)t->dims[i]);
		fputs("]", f);
	}
}

static void dump_graph(const oq_graph *g, FILE *f, int depth)
{
	for (size_t i = 0; i < g->n_inputs; i++) {
		fprintf(f, "%*sinput ", depth * 2, "");
		dump_value(g->inputs[i], f);
		fputs("\n", f);
	}
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		fprintf(f, "%*s", depth * 2, "");
		for (size_t k = 0; k < n->n_outputs; k++) {
			fputs(k ? ", " : "", f);
			dump_value(n->outputs[k], f);
		}
		fprintf(f, " = %s%s%s", n->domain[0] ? n->domain : "", n->domain[0] ? "::" : "", n->op_type);
		if (n->name[0])
			fprintf(f, " '%s'", n->name);
		if (n->qmark & OQ_QM_ACT)
			fputs(" {fused-act}", f);
		fputs("(", f);
		for (size_t k = 0; k < n->n_inputs; k++) {
			fputs(k ? ", " : "", f);
			dump_value(n->inputs[k], f);
		}
		fputs(")", f);
		for (size_t a = 0; a < n->n_attrs; a++) {
			const oq_attr *at = &n->attrs[a];
			fprintf(f, " %s=", at->name);
			switch (at->type) {
			case OQ_ATTR_INT: fprintf(f, "%lld", (long long)at->i); break;
			case OQ_ATTR_FLOAT: fprintf(f, "%g", at->f); break;
			case OQ_ATTR_STRING: fprintf(f, "\"%s\"", at->s.p ? at->s.p : ""); break;
			case OQ_ATTR_INTS:
				fputs("[", f);
				for (size_t j = 0; j < at->n; j++)
					fprintf(f, "%s%lld", j ? "," : "", (long long)at->ints[j]);
				fputs("]", f);
				break;
			case OQ_ATTR_FLOATS:
				fputs("[", f);
				for (size_t j = 0; j < at->n; j++)
					fprintf(f, "%s%g", j ? "," : "", at->floats[j]);
				fputs("]", f);
				break;
			default: fprintf(f, "<%s>", oq_attr_type_name(at->type)); break;
			}
		}
		fputs("\n", f);
		for (size_t a = 0; a < n->n_attrs; a++) {
			if (n->attrs[a].g)
				dump_graph(n->attrs[a].g, f, depth + 1);
			for (size_t j = 0; n->attrs[a].graphs && j < n->attrs[a].n; j++)
				dump_graph(n->attrs[a].graphs[j], f, depth + 1);
		}
	}
	for (size_t i = 0; i < g->n_outputs; i++) {
		fprintf(f, "%*soutput ", depth * 2, "");
		dump_value(g->outputs[i], f);
		fputs("\n", f);
	}
}

void oq_graph_dump(const oq_graph *g, FILE *f)
{
	dump_graph(g, f, 0);
}
