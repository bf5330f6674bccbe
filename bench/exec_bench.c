/*
 * exec_bench.c - times onnxq's executor on a model: random inputs, a warm-up
 * run, then the median (and minimum) of N runs of oq_exec_run for each
 * requested thread count. With --profile it also sums the process CPU time
 * spent per op type (taken between consecutive observer calls, so it
 * includes the executor's own bookkeeping for that node; with several
 * threads it is the CPU time of all of them). --profile-fused does the same
 * while fused groups stay fused (the observer wants no intermediate value;
 * conv -> depthwise chains do not run under an observer) and lists every
 * node with its time and, for Conv groups, GFLOP/s. With --check it
 * verifies that every output is bit-identical across the thread counts, and
 * between the fused runs and an observed one (which runs every node on its own).
 *
 * Also printed: the executor's fused Conv groups and conv -> depthwise
 * chains, the model's GFLOP per run (2 * multiply-adds of Conv with
 * constant weights, Gemm and MatMul with any operands, not ConvTranspose;
 * counted from the output shapes of one observed run, the weights' dims and
 * the shapes of A), and a memory line: the peak RSS of the process over the
 * timed runs (read before the observed run, which holds every intermediate
 * value: its own peak is observed_rss_mb), the RSS before the model was
 * loaded (base_mb: binary and libraries), the initializer bytes, the
 * executor's peak of live activations (oq_exec_peak_bytes) and the bound
 * weights + 2 x that peak, as rss / bound and (rss - base) / bound.
 *
 * usage: exec_bench MODEL [--threads 1,2] [--runs N] [--shape d0,d1,...] [--dim NAME=V] [--profile | --profile-fused] [--check]
 * --shape gives the first input's dims; other symbolic dims take --dim values (default 1). Float inputs are uniform in
 * [0, 1) from a fixed seed; integer inputs are 0. Prints one line per thread count:
 * "onnxq threads=T median_ms=X min_ms=Y cpu_ms=Z runs=N fused=F chained=C gflop=G" (cpu_ms: median
 * process CPU time per run, the robust figure for 1 thread on a busy machine).
 * Built by bench/exec_conv.sh (cc ... -lonnxq_exec -lonnxq_core ...).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "calib/exec/exec.h"
#include "calib/kernels/kernel.h"
#include "src/io/onnx_io.h"

#define MAX_T 8
#define MAX_DIMS 16

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* CPU time of the whole process (all threads): robust on a shared machine for 1 thread. */
static double cpu_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* per-op-type profile filled by the observer */
typedef struct prof {
	double last;
	char names[128][32];
	double ms[128];
	int count[128];
	int n;
	struct { double ms; char what[96]; } top[16]; /* slowest nodes */
	int all;                 /* --profile-fused: every node in order (nodes below) */
	struct { double ms; char what[112]; const oq_value *v; size_t nelem; } *nodes;
	int n_nodes, cap_nodes;
} prof;

static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	prof *p = ctx;
	double t1 = cpu_ms();
	const char *op = v->producer ? v->producer->op_type : "?";
	int i;
	if (v->producer && v->producer_index != 0) /* count each node once (first output) */
		return 0;
	for (i = 0; i < p->n; i++)
		if (!strcmp(p->names[i], op))
			break;
	if (i == p->n && p->n < 128)
		snprintf(p->names[p->n++], sizeof p->names[0], "%s", op);
	if (i < 128) {
		p->ms[i] += t1 - p->last;
		p->count[i]++;
	}
	{
		int s = 0;
		char shape[64];
		for (int k = 1; k < 16; k++)
			if (p->top[k].ms < p->top[s].ms)
				s = k;
		if (t1 - p->last > p->top[s].ms) {
			p->top[s].ms = t1 - p->last;
			snprintf(p->top[s].what, sizeof p->top[s].what, "%s -> %s", v->producer ? v->producer->name : "?",
				 oq_rt_describe(t, shape, sizeof shape));
		}
	}
	if (p->all && p->n_nodes < p->cap_nodes) {
		char shape[64];
		p->nodes[p->n_nodes].ms += t1 - p->last;
		p->nodes[p->n_nodes].v = v;
		p->nodes[p->n_nodes].nelem = t->nelem;
		snprintf(p->nodes[p->n_nodes].what, sizeof p->nodes[0].what, "%-12s %s", op,
			 oq_rt_describe(t, shape, sizeof shape));
		p->n_nodes++;
	}
	p->last = cpu_ms();
	return 0;
}

/* --profile-fused: the observer wants no intermediate value, so fused groups stay fused. */
static int want_none(void *ctx, const oq_value *v)
{
	(void)ctx;
	(void)v;
	return 0;
}

/* Product of dims [from, rank) of an initializer (1 when absent). */
static const oq_tensor *weight_of(const oq_value *v)
{
	while (v && !v->init && v->producer && v->producer->op == OQ_OP_Identity)
		v = v->producer->inputs[0];
	if (v && !v->init && v->producer && v->producer->op == OQ_OP_Constant && v->producer->n_attrs == 1)
		return v->producer->attrs[0].t;
	return v ? v->init : NULL;
}

/* Product of dims [from, rank) of a constant weight (0 when not constant). */
static double init_prod(const oq_value *v, int from)
{
	const oq_tensor *t = weight_of(v);
	double p = 1;
	if (!t)
		return 0;
	for (int i = from; i < t->rank; i++)
		p *= (double)t->dims[i];
	return p;
}

/* count_flops' context: the FLOP sum and the last two dims of each main-graph value seen so far. */
typedef struct fctx {
	double flops;
	const oq_graph *g;
	int64_t (*d2)[2];  /* per value index: dims[rank - 2], dims[rank - 1] (1-D: 1, dims[0]; 0 unknown) */
} fctx;

static void note_dims(fctx *f, const oq_value *v, int rank, const int64_t *dims)
{
	if (!v || v->graph != f->g || rank < 1)
		return;
	f->d2[v->index][0] = rank >= 2 ? dims[rank - 2] : 1;
	f->d2[v->index][1] = dims[rank - 1];
}

/*
 * Observer: FLOPs of Conv (constant weights), Gemm and MatMul (any
 * operands: K from the shape of A, noted when A was fed, loaded or
 * produced) from their output sizes.
 */
static int count_flops(void *ctx, const oq_value *v, const oq_rt *t)
{
	fctx *f = ctx;
	const oq_node *n = v->producer;
	note_dims(f, v, t->rank, t->dims);
	if (!n || v->producer_index != 0 || n->n_inputs < 2 || !n->inputs[0] || n->inputs[0]->graph != f->g)
		return 0;
	if (n->op == OQ_OP_Conv) {
		f->flops += 2.0 * (double)t->nelem * init_prod(n->inputs[1], 1);
	} else if (n->op == OQ_OP_Gemm) {
		const oq_attr *ta = oq_node_attr(n, "transA");
		f->flops += 2.0 * (double)t->nelem * (double)f->d2[n->inputs[0]->index][ta && ta->i ? 0 : 1];
	} else if (n->op == OQ_OP_MatMul) {
		f->flops += 2.0 * (double)t->nelem * (double)f->d2[n->inputs[0]->index][1];
	}
	return 0;
}

static const char *dim_value(int argc, char **argv, const char *name, int64_t *v)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--dim")) {
			const char *eq = strchr(argv[i + 1], '=');
			if (eq && (size_t)(eq - argv[i + 1]) == strlen(name) && !strncmp(argv[i + 1], name, strlen(name))) {
				*v = atoll(eq + 1);
				return argv[i + 1];
			}
		}
	return NULL;
}

/* Resident set now (VmRSS, Linux), MiB; 0 when unknown. */
static double rss_now_mb(void)
{
	char line[256];
	double kb = 0;
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = atof(line + 6);
	fclose(f);
	return kb / 1024.0;
}

/* Peak resident set so far (getrusage), MiB. */
static double rss_peak_mb(void)
{
	struct rusage ru;
	return getrusage(RUSAGE_SELF, &ru) ? 0 : (double)ru.ru_maxrss / 1024.0;
}

static void usage(void)
{
	fprintf(stderr, "usage: exec_bench MODEL [--threads 1,2] [--runs N] [--shape d0,..] [--dim NAME=V] "
			"[--profile | --profile-fused] [--check]\n");
}

/* The inputs of e: the first input's dims from --shape, symbolic dims from --dim (else 1); floats uniform in [0, 1). */
static int make_inputs(const oq_exec *e, int argc, char **argv, const int64_t *shape, int nshape, oq_rt *in)
{
	unsigned long long rng = 12345;
	for (size_t i = 0; i < oq_exec_n_inputs(e); i++) {
		const oq_value *v = oq_exec_input(e, i);
		int64_t dims[MAX_DIMS];
		int rank = v->type.rank < 0 ? 0 : v->type.rank;
		if (i == 0 && nshape >= 0) {
			rank = nshape;
			memcpy(dims, shape, (size_t)nshape * sizeof *dims);
		}
		for (int k = 0; k < rank && k < MAX_DIMS && !(i == 0 && nshape >= 0); k++) {
			dims[k] = v->type.dims[k].value;
			if (dims[k] < 0 &&
			    !(v->type.dims[k].param && dim_value(argc, argv, v->type.dims[k].param, &dims[k])))
				dims[k] = 1;
		}
		if (oq_rt_alloc(&in[i], v->type.dtype ? v->type.dtype : OQ_DT_FLOAT, rank, dims)) {
			fprintf(stderr, "exec_bench: cannot make input '%s'\n", v->name);
			return 1;
		}
		if (in[i].dtype == OQ_DT_FLOAT)
			for (size_t k = 0; k < in[i].nelem; k++) {
				rng = rng * 6364136223846793005ull + 1442695040888963407ull;
				((float *)in[i].data)[k] = (float)(rng >> 40) / 16777216.0f;
			}
	}
	return 0;
}

static int same_outputs(const oq_rt *a, const oq_rt *b, size_t n)
{
	for (size_t k = 0; k < n; k++)
		if (a[k].nbytes != b[k].nbytes || (a[k].nbytes && memcmp(a[k].data, b[k].data, a[k].nbytes)))
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	int threads[MAX_T] = {1, 2}, nt = 2, runs = 10, profile = 0, check = 0, rc = 1, nshape = -1;
	oq_model *m = NULL;
	oq_diag d;
	oq_rt *in = NULL, *ref = NULL, *out = NULL; /* ref: outputs of the first thread count's warm-up */
	size_t nin = 0, nout = 0, act_peak = 0, n_fused[MAX_T] = {0}, n_chained[MAX_T] = {0};
	int64_t shape[MAX_DIMS];
	double flops = 0, weights = 0, med[MAX_T] = {0}, mn[MAX_T] = {0}, cpu[MAX_T] = {0};
	double rss_base, rss_infer = 0, bound;
	int n_runs[MAX_T] = {0};

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			char *s = argv[++i];
			nt = 0;
			for (char *tok = strtok(s, ","); tok && nt < MAX_T; tok = strtok(NULL, ","))
				threads[nt++] = atoi(tok);
		} else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
			runs = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--dim") && i + 1 < argc) {
			i++;
		} else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
			char *s = argv[++i];
			nshape = 0;
			for (char *tok = strtok(s, ","); tok && nshape < MAX_DIMS; tok = strtok(NULL, ","))
				shape[nshape++] = atoll(tok);
		} else if (!strcmp(argv[i], "--profile")) {
			profile = 1;
		} else if (!strcmp(argv[i], "--profile-fused")) {
			profile = 2;
		} else if (!strcmp(argv[i], "--check")) {
			check = 1;
		} else if (argv[i][0] != '-' && !path) {
			path = argv[i];
		} else {
			usage();
			return 1;
		}
	}
	if (!path || runs < 1 || nt < 1) {
		usage();
		return 1;
	}
	rss_base = rss_now_mb(); /* the process before the model: binary, libraries */
	oq_diag_init(&d);
	if (oq_model_load(path, &m, &d)) {
		fprintf(stderr, "exec_bench: %s\n", d.msg);
		return 1;
	}
	for (int ti = 0; ti < nt; ti++) {
		oq_exec *e = NULL;
		oq_exec_opts o = {.threads = threads[ti]};
		double *t = calloc((size_t)runs, sizeof *t), *c = calloc((size_t)runs, sizeof *c);
		int nr = runs, bad = 0;
		prof p;

		memset(&p, 0, sizeof p);
		if (!t || !c || oq_exec_new(m, &o, &e, &d)) {
			fprintf(stderr, "exec_bench: %s\n", t && c ? d.msg : "out of memory");
			free(t);
			free(c);
			goto done;
		}
		if (!in) { /* inputs once, shared by every thread count */
			nin = oq_exec_n_inputs(e);
			nout = oq_exec_n_outputs(e);
			in = calloc(nin + 1, sizeof *in);
			ref = calloc(nout + 1, sizeof *ref);
			out = calloc(nout + 1, sizeof *out);
			if (!in || !ref || !out || make_inputs(e, argc, argv, shape, nshape, in)) {
				oq_exec_free(e);
				free(t);
				free(c);
				goto done;
			}
		}
		for (int r = -1; r < runs && !bad; r++) { /* r = -1: warm-up */
			double t0, c0;
			if (profile == 1 && r == runs - 1) {
				oq_exec_set_observer(e, observe, &p);
				p.last = cpu_ms();
			}
			if (profile == 2 && r >= 0) { /* every run, fused, summed per node */
				if (!p.nodes) {
					p.all = 1;
					p.cap_nodes = (int)m->graph->n_nodes;
					p.nodes = calloc((size_t)p.cap_nodes + 1, sizeof *p.nodes);
				}
				p.n_nodes = 0;
				oq_exec_set_observer(e, observe, &p);
				oq_exec_set_observe_want(e, want_none);
				p.last = cpu_ms();
			}
			t0 = now_ms();
			c0 = cpu_ms();
			if (oq_exec_run(e, in, nin, out, nout, &d)) {
				fprintf(stderr, "exec_bench: %s\n", d.msg);
				bad = 1;
				break;
			}
			if (r >= 0) {
				t[r] = now_ms() - t0;
				c[r] = cpu_ms() - c0;
			}
			if (r == -1 && ti == 0) { /* the reference for the other thread counts and the unfused run */
				for (size_t k = 0; k < nout; k++) {
					ref[k] = out[k];
					memset(&out[k], 0, sizeof out[k]);
				}
				continue;
			}
			if (r == -1 && check && !same_outputs(out, ref, nout)) {
				printf("check: outputs differ between threads %d and %d\n", threads[0], threads[ti]);
				check = 2;
			}
			for (size_t k = 0; k < nout; k++)
				oq_rt_release(&out[k]);
		}
		oq_exec_set_observer(e, NULL, NULL);
		if (bad) {
			oq_exec_free(e);
			free(t);
			free(c);
			free(p.nodes);
			goto done;
		}
		if (profile == 1 && runs > 1) /* the profiled run is excluded from the timing */
			nr--;
		qsort(t, (size_t)nr, sizeof *t, cmp_d);
		qsort(c, (size_t)nr, sizeof *c, cmp_d);
		med[ti] = t[nr / 2];
		mn[ti] = t[0];
		cpu[ti] = c[nr / 2];
		n_runs[ti] = nr;
		n_fused[ti] = oq_exec_n_fused(e);
		n_chained[ti] = oq_exec_n_chained(e);
		if (oq_exec_peak_bytes(e) > act_peak)
			act_peak = oq_exec_peak_bytes(e);
		if (profile) {
			printf("profile threads=%d\n", threads[ti]);
			if (profile == 2) /* per run */
				for (int i = 0; i < p.n; i++)
					p.ms[i] /= runs;
			for (int i = 0; i < p.n; i++)
				printf("  %-24s %4d nodes %9.3f ms\n", p.names[i], p.count[i], p.ms[i]);
			for (int i = 0; i < p.n_nodes; i++) {
				const oq_value *v = p.nodes[i].v;
				const oq_node *cv = v->producer;
				double ms = p.nodes[i].ms / runs, fl = 0;
				size_t nel = p.nodes[i].nelem;
				for (int hop = 0; hop < 8 && cv && cv->op != OQ_OP_Conv && cv->n_inputs > 0 && cv->inputs[0]; hop++)
					cv = cv->inputs[0]->producer;
				if (cv && cv->op == OQ_OP_Conv && cv->n_inputs > 1)
					fl = 2.0 * (double)nel * init_prod(cv->inputs[1], 1);
				printf("  %3d %8.3f ms %6.1f GFLOP/s  %s\n", i, ms, fl > 0 && ms > 0 ? fl / ms / 1e6 : 0.0,
				       p.nodes[i].what);
			}
			printf("  slowest nodes:\n");
			for (int i = 0; i < 16; i++)
				if (p.top[i].ms > 0)
					printf("    %8.3f ms  %s\n", p.top[i].ms, p.top[i].what);
			free(p.nodes);
		}
		free(t);
		free(c);
		oq_exec_free(e);
	}
	rss_infer = rss_peak_mb(); /* read before the observed run below, which holds every intermediate */
	{
		/* one observed run (every node on its own): FLOPs, and the unfused outputs for --check */
		oq_exec *e = NULL;
		oq_exec_opts o = {.threads = threads[0]};
		fctx fc = {0, m->graph, calloc(m->graph->n_values + 1, sizeof *fc.d2)};
		int frc;
		if (!fc.d2 || oq_exec_new(m, &o, &e, &d)) {
			fprintf(stderr, "exec_bench: %s\n", fc.d2 ? d.msg : "out of memory");
			free(fc.d2);
			goto done;
		}
		for (size_t k = 0; k < m->graph->n_values; k++) {
			const oq_value *v = m->graph->values[k];
			if (v->init)
				note_dims(&fc, v, v->init->rank, v->init->dims);
		}
		for (size_t k = 0; k < nin; k++)
			note_dims(&fc, oq_exec_input(e, k), in[k].rank, in[k].dims);
		oq_exec_set_observer(e, count_flops, &fc);
		frc = oq_exec_run(e, in, nin, out, nout, &d);
		flops = fc.flops;
		free(fc.d2);
		oq_exec_free(e);
		if (frc) {
			fprintf(stderr, "exec_bench: %s\n", frc == OQ_ENOMEM && !d.count ? "out of memory" : d.msg);
			goto done;
		}
		if (check && !same_outputs(out, ref, nout)) {
			printf("check: outputs differ between the fused and unfused runs\n");
			check = 2;
		}
		for (size_t k = 0; k < nout; k++)
			oq_rt_release(&out[k]);
	}
	for (int ti = 0; ti < nt; ti++)
		printf("onnxq threads=%d median_ms=%.3f min_ms=%.3f cpu_ms=%.3f runs=%d fused=%zu chained=%zu gflop=%.3f\n",
		       threads[ti], med[ti], mn[ti], cpu[ti], n_runs[ti], n_fused[ti], n_chained[ti], flops / 1e9);
	if (check == 1)
		printf("check: outputs bit-identical for all thread counts and fused / unfused\n");
	for (size_t i = 0; i < m->graph->n_inits; i++)
		weights += (double)m->graph->inits[i]->init->nbytes;
	for (size_t i = 0; i < m->graph->n_nodes; i++) /* exporters that store weights as Constant nodes */
		if (m->graph->nodes[i]->op == OQ_OP_Constant && m->graph->nodes[i]->n_attrs == 1 &&
		    m->graph->nodes[i]->attrs[0].t)
			weights += (double)m->graph->nodes[i]->attrs[0].t->nbytes;
	bound = weights / 1048576.0 + 2.0 * (double)act_peak / 1048576.0;
	printf("mem rss_mb=%.1f base_mb=%.1f weights_mb=%.1f act_peak_mb=%.1f bound_mb=%.1f rss_over_bound=%.2f "
	       "net_over_bound=%.2f observed_rss_mb=%.1f\n",
	       rss_infer, rss_base, weights / 1048576.0, (double)act_peak / 1048576.0, bound,
	       bound > 0 ? rss_infer / bound : 0, bound > 0 ? (rss_infer - rss_base) / bound : 0, rss_peak_mb());
	rc = check == 2 ? 2 : 0;
done:
	for (size_t i = 0; in && i < nin; i++)
		oq_rt_release(&in[i]);
	for (size_t i = 0; ref && i < nout; i++)
		oq_rt_release(&ref[i]);
	for (size_t i = 0; out && i < nout; i++)
		oq_rt_release(&out[i]);
	free(in);
	free(ref);
	free(out);
	oq_model_free(m);
	return rc;
}
