/*
 * upgrade_conf.c - runs the upgrade-opset pass from scripts (until
 * `onnxq convert --passes` exists) and checks it on the ONNX backend node
 * tests.
 *
 *   upgrade_conf convert IN OUT [--opset N]
 *       load IN, run the pass "upgrade-opset" with the verifier, save OUT.
 *       Exit 0, or the oq_exit_code of the failure (message on stderr).
 *   upgrade_conf node [--opset N] [--dir D] [--save-dir S] [-v] [CASE...]
 *       for every case (default: all in D, /usr/share/libonnx-testdata/data/node)
 *       whose ai.onnx opset is below N (default 13): run the original model
 *       with the executor against output_K.pb, upgrade it (verifier on),
 *       save and reload it, and run the reloaded model against the same
 *       data (|got - want| <= 1e-5 + 1e-3 |want|, NaN matches NaN, as
 *       tests/tools/conformance.c). A case
 *       - passes when the upgraded model matches the reference data;
 *       - fails when the pass or the verifier reports an error other than a
 *         refusal, when save/reload fails, or when the upgraded model does
 *         not match while the original does;
 *       - is skipped (reason printed) when it is already at N or above,
 *         when the executor cannot run the original (or the original does
 *         not match either), or when the pass refuses the node (OQ_EUNSUP).
 *       --save-dir writes each upgraded model to S/<case>.onnx (for a
 *       second runtime). Closing line "N passed, N failed, N skipped";
 *       exit 1 on any failure. Each case runs in a forked child.
 *   upgrade_conf pb2npy IN.pb OUT.npy
 *       converts a test-data TensorProto to .npy (for ONNX Runtime in node)
 *       and prints the tensor's name.
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
#include "src/io/npy.h"
#include "src/io/onnx_io.h"
#include "passes/pass.h"

static int verbose;

static int run_model(oq_model *m, const char *dir, char *why, size_t n)
{
	char path[4096];
	oq_exec *e = NULL;
	oq_diag d;
	int rc, result = 1;
	oq_rt *in = NULL, *out = NULL;
	size_t nin = 0, nout = 0;
	oq_exec_opts o = {.threads = 1};

	oq_diag_init(&d);
	if ((rc = oq_exec_new(m, &o, &e, &d))) {
		snprintf(why, n, "%s", d.msg);
		return rc == OQ_EUNSUP ? 2 : 1;
	}
	for (size_t i = 0; i < m->graph->n_inputs; i++)
		if (!m->graph->inputs[i]->init && m->graph->inputs[i]->type.kind != OQ_TYPE_TENSOR &&
		    m->graph->inputs[i]->type.kind != OQ_TYPE_NONE) {
			snprintf(why, n, "input '%s' is not a tensor", m->graph->inputs[i]->name);
			result = 2;
			goto done;
		}
	nin = oq_exec_n_inputs(e);
	nout = oq_exec_n_outputs(e);
	in = oq_calloc(nin, sizeof *in);
	out = oq_calloc(nout, sizeof *out);
	if (!in || !out)
		goto done;
	for (int set = 0;; set++) {
		struct stat st;
		snprintf(path, sizeof path, "%s/test_data_set_%d", dir, set);
		if (stat(path, &st) != 0)
			break;
		for (size_t i = 0; i < nin; i++) {
			oq_tensor *t;
			oq_rt view;
			snprintf(path, sizeof path, "%s/test_data_set_%d/input_%zu.pb", dir, set, i);
			if (oq_test_load_pb(path, &t, why, n))
				goto done;
			if (t->dtype == OQ_DT_UINT16 && oq_exec_input(e, i)->type.dtype == OQ_DT_BFLOAT16)
				t->dtype = OQ_DT_BFLOAT16;
			rc = oq_rt_from_tensor(&view, t);
			if (!rc)
				rc = oq_rt_copy(&in[i], &view);
			oq_rt_release(&view);
			oq_tensor_free(t);
			if (rc) {
				snprintf(why, n, "input %zu: cannot convert", i);
				goto done;
			}
		}
		oq_diag_init(&d);
		if (oq_exec_run(e, in, nin, out, nout, &d)) {
			snprintf(why, n, "%s", d.msg);
			goto done;
		}
		for (size_t i = 0; i < nout; i++) {
			oq_tensor *t;
			char w2[512];
			snprintf(path, sizeof path, "%s/test_data_set_%d/output_%zu.pb", dir, set, i);
			if (oq_test_load_pb(path, &t, why, n))
				goto done;
			rc = oq_test_compare(t, &out[i], 1e-3, 1e-5, w2, sizeof w2);
			oq_tensor_free(t);
			if (rc) {
				snprintf(why, n, "set %d output %zu: %s", set, i, w2);
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
	return result;
}

/* Loads, upgrades (verifier on) and saves; returns an OQ_* status with d filled. */
static int upgrade_file(const char *in, const char *out, int64_t opset, oq_diag *d)
{
	oq_model *m = NULL;
	oq_opts o;
	oq_pass_run r = {0};
	oq_save_opts so = {0};
	int rc;

	oq_opts_init(&o);
	o.opset = opset;
	r.list = "upgrade-opset";
	r.verify = 1;
	if ((rc = oq_model_load(in, &m, d)))
		return rc;
	if (!(rc = oq_passes_run(m, &r, &o, d)))
		rc = oq_model_save(m, out, &so, NULL, d);
	oq_model_free(m);
	return rc;
}

/* 0 pass, 1 fail, 2 skip. */
static int node_case(const char *dir, const char *name, int64_t target, const char *save_dir, char *why,
		     size_t n)
{
	char path[4096], out[4096], w0[1024] = "";
	oq_model *m = NULL;
	oq_diag d;
	int orig, rc;

	oq_diag_init(&d);
	snprintf(path, sizeof path, "%s/model.onnx", dir);
	if (oq_model_load(path, &m, &d)) {
		snprintf(why, n, "original does not load: %s", d.msg);
		return 2;
	}
	int64_t cur = oq_model_opset(m, "");
	if (cur >= target || cur == 0) {
		snprintf(why, n, "already at opset %lld", (long long)cur);
		oq_model_free(m);
		return 2;
	}
	orig = run_model(m, dir, w0, sizeof w0);
	oq_model_free(m);
	m = NULL;
	if (save_dir)
		snprintf(out, sizeof out, "%s/%s.onnx", save_dir, name);
	else
		snprintf(out, sizeof out, "/tmp/upgrade_conf.%ld.onnx", (long)getpid());
	oq_diag_init(&d);
	rc = upgrade_file(path, out, target, &d);
	if (rc == OQ_EUNSUP) {
		snprintf(why, n, "refused: %s", d.msg);
		return 2;
	}
	if (rc) {
		snprintf(why, n, "upgrade: %s", d.msg);
		return 1;
	}
	oq_diag_init(&d);
	if (oq_model_load(out, &m, &d)) {
		snprintf(why, n, "upgraded model does not load: %s", d.msg);
		return 1;
	}
	if (oq_model_opset(m, "") != target) {
		snprintf(why, n, "upgraded model has opset %lld", (long long)oq_model_opset(m, ""));
		oq_model_free(m);
		return 1;
	}
	rc = run_model(m, dir, why, n);
	oq_model_free(m);
	if (!save_dir)
		remove(out);
	if (rc == 0)
		return 0;
	if (orig != 0) {
		char w[2048];
		snprintf(w, sizeof w, "original does not pass either (%s)", w0);
		snprintf(why, n, "%s", w);
		return 2;
	}
	return 1; /* the original matches the reference, the upgraded one does not */
}

static int cmpstr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int node_main(int argc, char **argv)
{
	const char *dir = "/usr/share/libonnx-testdata/data/node", *save_dir = NULL;
	int64_t target = 13;
	char **cases = NULL;
	size_t n = 0, cap = 0;
	int passed = 0, failed = 0, skipped = 0, from_dir;
	int sk_at = 0, sk_refused = 0, sk_orig = 0; /* skip reasons */

	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--opset") && i + 1 < argc)
			target = atoll(argv[++i]);
		else if (!strcmp(argv[i], "--save-dir") && i + 1 < argc)
			save_dir = argv[++i];
		else if (!strcmp(argv[i], "-v"))
			verbose = 1;
		else {
			if (oq_grow(&cases, &cap, n + 1, sizeof *cases))
				return 2;
			cases[n++] = argv[i];
		}
	}
	from_dir = n == 0;
	if (from_dir) {
		DIR *dd = opendir(dir);
		struct dirent *de;
		if (!dd) {
			fprintf(stderr, "upgrade_conf: cannot open %s\n", dir);
			return 2;
		}
		while ((de = readdir(dd))) {
			if (de->d_name[0] == '.')
				continue;
			if (oq_grow(&cases, &cap, n + 1, sizeof *cases) || !(cases[n] = oq_strdup(de->d_name)))
				return 2;
			n++;
		}
		closedir(dd);
		qsort(cases, n, sizeof *cases, cmpstr);
	}
	for (size_t i = 0; i < n; i++) {
		char path[4096], why[2048] = "";
		int fds[2], status, r;
		pid_t pid;
		snprintf(path, sizeof path, "%s/%s", dir, cases[i]);
		if (pipe(fds) != 0)
			return 2;
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			close(fds[0]);
			r = node_case(path, cases[i], target, save_dir, why, sizeof why);
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
		if (r == 0) {
			passed++;
			if (verbose)
				printf("PASS %s\n", cases[i]);
		} else if (r == 2) {
			skipped++;
			if (strncmp(why, "already at", 10) == 0)
				sk_at++;
			else if (strncmp(why, "refused", 7) == 0)
				sk_refused++;
			else
				sk_orig++;
			if (verbose || strncmp(why, "already at", 10) != 0)
				printf("SKIP %s: %s\n", cases[i], why);
		} else {
			failed++;
			printf("FAIL %s: %s\n", cases[i], why);
		}
	}
	printf("skipped: %d already at opset %lld or above, %d refused by the pass, %d the executor cannot run "
	       "(original and upgraded)\n",
	       sk_at, (long long)target, sk_refused, sk_orig);
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	for (size_t i = 0; from_dir && i < n; i++)
		free(cases[i]);
	free(cases);
	return failed ? 1 : 0;
}

static int pb2npy(const char *in, const char *out)
{
	oq_tensor *t;
	char why[1024];
	oq_diag d;
	int rc;
	if (oq_test_load_pb(in, &t, why, sizeof why)) {
		fprintf(stderr, "%s\n", why);
		return 2;
	}
	oq_diag_init(&d);
	rc = oq_npy_write(out, t->dtype, t->rank, t->dims, t->data, t->nbytes, &d);
	if (rc)
		fprintf(stderr, "%s\n", d.msg);
	else
		printf("%s\n", t->name ? t->name : "");
	oq_tensor_free(t);
	return rc ? oq_exit_code(rc) : 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "pb2npy"))
		return pb2npy(argv[2], argv[3]);
	if (argc >= 2 && !strcmp(argv[1], "node"))
		return node_main(argc, argv);
	if (argc >= 4 && !strcmp(argv[1], "convert")) {
		int64_t opset = 0;
		oq_diag d;
		for (int i = 4; i < argc; i++)
			if (!strcmp(argv[i], "--opset") && i + 1 < argc)
				opset = atoll(argv[++i]);
		oq_diag_init(&d);
		int rc = upgrade_file(argv[2], argv[3], opset, &d);
		if (rc) {
			fprintf(stderr, "%s\n", d.msg);
			return oq_exit_code(rc);
		}
		return 0;
	}
	fprintf(stderr, "usage: upgrade_conf convert IN OUT [--opset N]\n"
			"       upgrade_conf node [--opset N] [--dir D] [--save-dir S] [-v] [CASE...]\n"
			"       upgrade_conf pb2npy IN.pb OUT.npy\n");
	return 2;
}
