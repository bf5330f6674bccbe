/*
 * fuzz_load.c - libFuzzer target over the model loader, the checker and the
 * saver: every input is untrusted bytes handed to oq_model_load_buffer.
 *
 * Per input: load from memory (external data allowed, resolved against a
 * private scratch folder that holds one small data file, so the
 * path-traversal and offset checks are exercised too), print the inspect
 * report (text or JSON) to /dev/null, run the checker,
 * save the model (with external data for odd-length inputs), and load the
 * saved file again. The round trip is an oracle: a model onnxq accepted and
 * wrote must load again, and every initializer must come back bitwise
 * equal; anything else aborts and is reported as a crash.
 *
 * Build: cmake -DONNXQ_FUZZ=ON -DCMAKE_C_COMPILER=clang (tests/fuzz/CMakeLists.txt).
 * Run:   tests/integration/fuzz.sh, or fuzz_load CORPUS_DIR -dict=tests/fuzz/onnx.dict
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/report/check.h"
#include "src/report/inspect.h"
#include "src/ir/ir.h"
#include "src/io/onnx_io.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Scratch folder: external data base; saves go to its subfolder out/ so
 * that no input can name the previous input's output (determinism). */
static char scratch[64];
static char out_dir[96];
static char out_path[128];
static FILE *devnull; /* inspect reports go here */

static void cleanup(void)
{
	char p[160];
	snprintf(p, sizeof p, "%s/w.data", scratch);
	unlink(p);
	unlink(out_path);
	{ /* the data file of the last save, named by its content */
		DIR *dh = opendir(out_dir);
		struct dirent *e;
		while (dh && (e = readdir(dh)))
			if (e->d_name[0] != '.') {
				snprintf(p, sizeof p, "%s/%s", out_dir, e->d_name);
				unlink(p);
			}
		if (dh)
			closedir(dh);
	}
	rmdir(out_dir);
	rmdir(scratch);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char p[160];
	FILE *f;
	(void)argc;
	(void)argv;
	snprintf(scratch, sizeof scratch, "/tmp/oq-fuzz.XXXXXX");
	if (!mkdtemp(scratch)) {
		perror("fuzz_load: mkdtemp");
		abort();
	}
	snprintf(out_dir, sizeof out_dir, "%s/out", scratch);
	snprintf(out_path, sizeof out_path, "%s/out.onnx", out_dir);
	if (mkdir(out_dir, 0700) != 0) {
		perror("fuzz_load: mkdir");
		abort();
	}
	/* A 4 KiB data file so inputs naming location "w.data" can reach the offset checks. */
	snprintf(p, sizeof p, "%s/w.data", scratch);
	f = fopen(p, "wb");
	if (!f) {
		perror("fuzz_load: w.data");
		abort();
	}
	for (int i = 0; i < 4096; i++)
		fputc(i & 0xff, f);
	fclose(f);
	devnull = fopen("/dev/null", "w");
	if (!devnull) {
		perror("fuzz_load: /dev/null");
		abort();
	}
	atexit(cleanup);
	return 0;
}

/* Initializers of both graphs, in order, compared bitwise (the save/load oracle). */
static void compare(const oq_graph *a, const oq_graph *b)
{
	if (a->n_inits != b->n_inits || a->n_nodes != b->n_nodes) {
		fprintf(stderr, "fuzz_load: round trip changed the graph (%zu/%zu inits, %zu/%zu nodes)\n",
			a->n_inits, b->n_inits, a->n_nodes, b->n_nodes);
		abort();
	}
	for (size_t i = 0; i < a->n_inits; i++)
		if (!oq_tensor_equal(a->inits[i]->init, b->inits[i]->init)) {
			fprintf(stderr, "fuzz_load: round trip changed initializer '%s'\n", a->inits[i]->name);
			abort();
		}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	oq_model *m = NULL, *m2 = NULL;
	oq_problems p = {0};
	oq_save_opts so = {0};
	oq_diag d;
	int rc;

	oq_diag_init(&d);
	rc = oq_model_load_buffer(data, size, scratch, &m, &d);
	if (rc) {
		fuzz_expect_message(rc, &d, "fuzz_load: load");
		return 0;
	}
	rc = oq_inspect_print(m, devnull, (int)(size >> 1 & 1)); /* any status is fine; no crash */
	(void)rc;
	if (oq_check_model(m, &p) == OQ_OK) {
		so.external_data = (int)(size & 1);
		so.external_threshold = 16;
		oq_diag_init(&d);
		rc = oq_model_save(m, out_path, &so, NULL, &d);
		if (rc == OQ_OK) {
			oq_diag_init(&d);
			rc = oq_model_load(out_path, &m2, &d);
			if (rc) {
				fprintf(stderr, "fuzz_load: saved model does not load again: %s\n", d.msg);
				abort();
			}
			compare(m->graph, m2->graph);
			oq_model_free(m2);
		} else if (rc != OQ_EUNSUP) {
			fprintf(stderr, "fuzz_load: save of a loaded model failed: %s\n", d.msg);
			abort();
		}
	}
	oq_problems_free(&p);
	oq_model_free(m);
	return 0;
}
