/*
 * conformance.c - runs ONNX backend node tests through the executor and
 * compares every output with the reference data (output_K.pb: a
 * TensorProto, or a SequenceProto / OptionalProto for values of those
 * types; inputs likewise).
 *
 * usage: conformance [--dir D] [--filter SUBSTR] [--threads N] [-v] [CASE...]
 *   D defaults to /usr/share/libonnx-testdata/data/node; CASE names select
 *   cases (default: all). A case is
 *   - skipped when the executor refuses the model before running (an op
 *     without a kernel, a map input) - the reason is printed;
 *   - failed when it runs and any output differs beyond
 *     |got - want| <= atol + rtol * |want| (rtol 1e-3, atol 1e-5; NaN must
 *     match NaN), has another dtype or shape, or the run reports an error.
 * --known FILE lists cases that are expected to fail, one per line as
 * "case_name  reason" (# comments allowed): such a failure counts as
 * skipped with its reason; a listed case that passes is reported as
 * "FIXED" and fails the run, so the list cannot go stale.
 * Closing line: "N passed, N failed, N skipped"; exit 1 on any failure.
 * Every case runs in a forked child so a crash fails that case only.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "calib/exec/exec.h"
#include "nodetest.h"
#include "src/io/onnx_io.h"

static double rtol = 1e-3, abstol = 1e-5;
static int verbose;

static int run_case(const char *dir, int threads, char *why, size_t n)
{
	char path[4096];
	oq_model *m = NULL;
	oq_exec *e = NULL;
	oq_diag d;
	int rc, result = 1;
	oq_rt *in = NULL, *out = NULL;
	size_t nin = 0, nout = 0;
	oq_exec_opts o = {.threads = threads};

	oq_diag_init(&d);
	snprintf(path, sizeof path, "%s/model.onnx", dir);
	if (oq_model_load(path, &m, &d)) {
		snprintf(why, n, "load: %s", d.msg);
		return 1;
	}
	if ((rc = oq_exec_new(m, &o, &e, &d))) {
		snprintf(why, n, "%s", d.msg);
		oq_model_free(m);
		return rc == OQ_EUNSUP ? 2 : 1;
	}
	for (size_t i = 0; i < m->graph->n_inputs; i++) {
		int kind = m->graph->inputs[i]->type.kind;
		if (!m->graph->inputs[i]->init && kind != OQ_TYPE_TENSOR && kind != OQ_TYPE_NONE &&
		    kind != OQ_TYPE_SEQUENCE && kind != OQ_TYPE_OPTIONAL) {
			snprintf(why, n, "input '%s' is not a tensor, sequence or optional", m->graph->inputs[i]->name);
			result = 2;
			goto done;
		}
	}
	nin = oq_exec_n_inputs(e);
	nout = oq_exec_n_outputs(e);
	in = oq_calloc(nin, sizeof *in);
	out = oq_calloc(nout, sizeof *out);
	for (int set = 0;; set++) {
		snprintf(path, sizeof path, "%s/test_data_set_%d", dir, set);
		struct stat st;
		if (stat(path, &st) != 0)
			break;
		for (size_t i = 0; i < nin; i++) {
			const oq_value *iv = oq_exec_input(e, i);
			snprintf(path, sizeof path, "%s/test_data_set_%d/input_%zu.pb", dir, set, i);
			if (oq_test_load_value_pb(path, iv->type.kind, &in[i], why, n))
				goto done;
			if (in[i].kind == OQ_RT_TENSOR && in[i].dtype == OQ_DT_UINT16 &&
			    iv->type.dtype == OQ_DT_BFLOAT16)
				in[i].dtype = OQ_DT_BFLOAT16; /* 1.12 data: bf16 stored as uint16 */
		}
		oq_diag_init(&d);
		if (oq_exec_run(e, in, nin, out, nout, &d)) {
			snprintf(why, n, "%s", d.msg);
			goto done;
		}
		for (size_t i = 0; i < nout; i++) {
			oq_rt want;
			char w2[512];
			snprintf(path, sizeof path, "%s/test_data_set_%d/output_%zu.pb", dir, set, i);
			if (oq_test_load_value_pb(path, oq_exec_output(e, i)->type.kind, &want, why, n))
				goto done;
			rc = oq_test_compare_value(&want, &out[i], rtol, abstol, w2, sizeof w2);
			oq_rt_release(&want);
			if (rc) {
				snprintf(why, n, "set %d output %zu ('%s'): %s", set, i,
					 oq_exec_output(e, i)->name, w2);
				goto done;
			}
		}
		for (size_t i = 0; i < nout; i++)
			oq_rt_release(&out[i]);
		for (size_t i = 0; i < nin; i++)
			oq_rt_release(&in[i]);
	}
	result = 0;
done:
	for (size_t i = 0; in && i < nin; i++)
		oq_rt_release(&in[i]);
	for (size_t i = 0; out && i < nout; i++)
		oq_rt_release(&out[i]);
	free(in);
	free(out);
	oq_exec_free(e);
	oq_model_free(m);
	return result;
}

/* Reason for an expected failure of `name`, or NULL. */
static const char *known_reason(char *known, const char *name)
{
	size_t l = strlen(name);
	for (char *line = known; line && *line;) {
		char *end = strchr(line, '\n');
		if (strncmp(line, name, l) == 0 && (line[l] == ' ' || line[l] == '\t')) {
			static char why[512];
			const char *r = line + l;
			size_t n;
			while (*r == ' ' || *r == '\t')
				r++;
			n = end ? (size_t)(end - r) : strlen(r);
			if (n >= sizeof why)
				n = sizeof why - 1;
			memcpy(why, r, n);
			why[n] = '\0';
			return why;
		}
		line = end ? end + 1 : NULL;
	}
	return NULL;
}

static int cmpstr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	const char *dir = "/usr/share/libonnx-testdata/data/node", *filter = NULL;
	char *known = NULL;
	char **cases = NULL;
	size_t n = 0, cap = 0;
	int threads = 1, passed = 0, failed = 0, skipped = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
			filter = argv[++i];
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--known") && i + 1 < argc) {
			size_t len;
			void *b;
			if (oq_test_read_file(argv[++i], &b, &len)) {
				fprintf(stderr, "conformance: cannot read %s\n", argv[i]);
				return 2;
			}
			known = b;
			known[len] = '\0';
		} else if (!strcmp(argv[i], "-v"))
			verbose = 1;
		else {
			if (n == cap && oq_grow(&cases, &cap, n + 1, sizeof *cases))
				return 2;
			cases[n++] = argv[i];
		}
	}
	int from_dir = n == 0;
	if (n == 0) {
		DIR *dd = opendir(dir);
		struct dirent *de;
		if (!dd) {
			fprintf(stderr, "conformance: cannot open %s\n", dir);
			return 2;
		}
		while ((de = readdir(dd))) {
			if (de->d_name[0] == '.' || (filter && !strstr(de->d_name, filter)))
				continue;
			if (oq_grow(&cases, &cap, n + 1, sizeof *cases))
				return 2;
			cases[n++] = strdup(de->d_name);
		}
		closedir(dd);
		qsort(cases, n, sizeof *cases, cmpstr);
	}
	for (size_t i = 0; i < n; i++) {
		char path[4096], why[1024] = "";
		int fds[2], status, r;
		pid_t pid;
		snprintf(path, sizeof path, "%s/%s", dir, cases[i]);
		if (pipe(fds) != 0)
			return 2;
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			close(fds[0]);
			r = run_case(path, threads, why, sizeof why);
			if (write(fds[1], why, strlen(why)) < 0)
				_exit(1);
			_exit(r);
		}
		close(fds[1]);
		ssize_t got = read(fds[0], why, sizeof why - 1);
		why[got > 0 ? got : 0] = '\0';
		close(fds[0]);
		waitpid(pid, &status, 0);
		r = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
		if (!WIFEXITED(status))
			snprintf(why, sizeof why, "crashed (signal %d)", WTERMSIG(status));
		const char *kr = known ? known_reason(known, cases[i]) : NULL;
		if (r == 0 && kr) {
			failed++;
			printf("FIXED %s: listed as a known failure (%s) but passes: remove it from the list\n",
			       cases[i], kr);
		} else if (r == 0) {
			passed++;
			if (verbose)
				printf("PASS %s\n", cases[i]);
		} else if (kr) {
			skipped++;
			printf("SKIP %s: known failure: %s (%s)\n", cases[i], kr, why);
		} else if (r == 2) {
			skipped++;
			printf("SKIP %s: %s\n", cases[i], why);
		} else {
			failed++;
			printf("FAIL %s: %s\n", cases[i], why);
		}
	}
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	for (size_t i = 0; from_dir && i < n; i++) /* strdup'd when read from the folder */
		free(cases[i]);
	free(cases);
	free(known);
	return failed ? 1 : 0;
}
