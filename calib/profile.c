/*
 * profile.c - the report of `onnxq run --profile` (see profile.h).
 *
 * Op types are those of the nodes charged: a fused group's time counts
 * under its first node's op (Conv), as the executor ran it as one call.
 * Shares are of the time in kernels, which the header line relates to the
 * runs' wall time (the rest: frames, releases, input checks).
 */
#include "calib/profile.h"

#include <stdlib.h>
#include <string.h>

#include "calib/exec/threadpool.h"

/* A row of either table. */
typedef struct row {
	const char *name;  /* op type, or node name */
	const char *label; /* node rows: what the call ran (oq_exec_prof.label) */
	uint64_t ns, calls;
} row;

/* More time first; ties by name, then label, so the order is fixed. */
static int cmp_row(const void *a, const void *b)
{
	const row *x = a, *y = b;
	int c;
	if (x->ns != y->ns)
		return x->ns < y->ns ? 1 : -1;
	if ((c = strcmp(x->name, y->name)))
		return c;
	return strcmp(x->label ? x->label : "", y->label ? y->label : "");
}

/* The op type a node is listed under: "Conv", or "domain:Op" outside the default domain. */
static const char *op_name(const oq_node *n, char *buf, size_t len)
{
	if (oq_domain_of(n->domain) == OQ_DOM_ONNX)
		return n->op_type;
	snprintf(buf, len, "%s:%s", n->domain, n->op_type);
	return buf;
}

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

static double share(uint64_t ns, uint64_t total)
{
	return total ? 100.0 * (double)ns / (double)total : 0;
}

static void text_rows(FILE *f, const char *title, const row *r, size_t n, uint64_t total, int nodes)
{
	fprintf(f, "  %-7s %10s %7s %10s  %s\n", "calls", "ms", "share", "ms/call", title);
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "  %7llu %10.3f %6.1f%% %10.4f  %s", (unsigned long long)r[i].calls, ms(r[i].ns),
			share(r[i].ns, total), r[i].calls ? ms(r[i].ns) / (double)r[i].calls : 0, r[i].name);
		if (nodes)
			fprintf(f, " (%s)", r[i].label);
		fputc('\n', f);
	}
}

static void json_rows(FILE *f, const char *key, const row *r, size_t n, uint64_t total, int nodes)
{
	fprintf(f, ", \"%s\": [", key);
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "%s{\"%s\": ", i ? ", " : "", nodes ? "name" : "op_type");
		oq_json_str(f, r[i].name);
		if (nodes) {
			fputs(", \"ops\": ", f);
			oq_json_str(f, r[i].label);
		}
		fprintf(f, ", \"calls\": %llu, \"ms\": %.6f, \"share\": %.4f}", (unsigned long long)r[i].calls,
			ms(r[i].ns), share(r[i].ns, total) / 100);
	}
	fputc(']', f);
}

int oq_profile_report(FILE *f, const oq_exec *e, size_t runs, double run_ms, int json, oq_diag *d)
{
	oq_exec_prof *p = NULL;
	row *ops = NULL, *nodes = NULL;
	char (*names)[160] = NULL;
	size_t n = 0, n_ops = 0, top;
	uint64_t total = 0;
	int threads = oq_pool_threads(oq_exec_pool(e));

	if (oq_exec_profile_get(e, &p, &n) || (n && (!(ops = oq_calloc(n, sizeof *ops)) ||
						    !(nodes = oq_calloc(n, sizeof *nodes)) ||
						    !(names = oq_calloc(n, sizeof *names))))) {
		free(p);
		free(ops);
		free(nodes);
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		const char *op = op_name(p[i].node, names[i], sizeof names[i]);
		size_t j;
		total += p[i].ns;
		nodes[i] = (row){p[i].node->name, p[i].label, p[i].ns, p[i].calls};
		for (j = 0; j < n_ops && strcmp(ops[j].name, op); j++)
			;
		if (j == n_ops)
			ops[n_ops++] = (row){op, NULL, 0, 0};
		ops[j].ns += p[i].ns;
		ops[j].calls += p[i].calls;
	}
	if (n) {
		qsort(ops, n_ops, sizeof *ops, cmp_row);
		qsort(nodes, n, sizeof *nodes, cmp_row);
	}
	top = n < OQ_PROFILE_TOP ? n : OQ_PROFILE_TOP;
	if (json) {
		fprintf(f, "{\"runs\": %zu, \"threads\": %d, \"run_ms\": %.6f, \"kernel_ms\": %.6f", runs, threads,
			run_ms, ms(total));
		json_rows(f, "op_types", ops, n_ops, total, 0);
		json_rows(f, "nodes", nodes, top, total, 1);
		fputc('}', f);
	} else {
		fprintf(f, "profile: %zu run%s, %d thread%s: %.3f ms, %.3f ms in kernels (%.1f%%)\n", runs,
			runs == 1 ? "" : "s", threads, threads == 1 ? "" : "s", run_ms, ms(total),
			run_ms > 0 ? 100.0 * ms(total) / run_ms : 0);
		text_rows(f, "op type", ops, n_ops, total, 0);
		fprintf(f, "slowest nodes:\n");
		text_rows(f, "node (what its call ran)", nodes, top, total, 1);
	}
	free(p);
	free(ops);
	free(nodes);
	free(names);
	return OQ_OK;
}
