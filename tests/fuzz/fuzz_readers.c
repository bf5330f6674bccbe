/*
 * fuzz_readers.c - libFuzzer target over the readers of the other input
 * files: the first byte selects one, the rest is the file.
 *
 *   0  .npy sample (oq_npy_read, header then data)
 *   1  --overrides JSON (oq_overrides_load, names checked against a small
 *      model: x -> Relu 'relu' -> y)
 *   2  --import-encodings JSON (oq_encodings_read)
 *   3  statistics file (oq_stats_read)
 *
 * The bytes go to a private temporary file, as the readers take paths.
 * A failure must carry a one-line message; crashes, sanitizer reports,
 * leaks and timeouts are findings.
 *
 * Build: cmake -DONNXQ_FUZZ=ON -DCMAKE_C_COMPILER=clang (tests/fuzz/CMakeLists.txt).
 * Run:   tests/integration/fuzz.sh
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib/stats_file.h"
#include "passes/quantize/encodings.h"
#include "passes/quantize/overrides.h"
#include "src/io/npy.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];
static oq_model *model; /* for the override names */

static void cleanup(void)
{
	unlink(path);
	oq_model_free(model);
}

/* x -> Relu 'relu' -> y, float [1, 4]. */
static oq_model *small_model(void)
{
	oq_model *m = oq_model_new();
	oq_graph *g;
	oq_value *x, *y;
	oq_node *n;

	if (!m || !(g = m->graph = oq_graph_new(m, NULL)) || !(x = oq_graph_value(g, "x")) ||
	    !(y = oq_graph_value(g, "y")) || !(n = oq_graph_add_node(g, "Relu", "", "relu")) ||
	    oq_node_set_inputs(n, &x, 1) || oq_node_set_outputs(n, &y, 1) ||
	    !(g->inputs = calloc(1, sizeof *g->inputs)) || !(g->outputs = calloc(1, sizeof *g->outputs)))
		abort();
	x->flags |= OQ_V_INPUT;
	y->flags |= OQ_V_OUTPUT;
	g->inputs[g->n_inputs++] = x;
	g->outputs[g->n_outputs++] = y;
	if (oq_graph_rebuild_uses(g))
		abort();
	return m;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int fd;
	(void)argc;
	(void)argv;
	snprintf(path, sizeof path, "/tmp/oq-fuzzr.XXXXXX");
	if ((fd = mkstemp(path)) < 0) {
		perror("fuzz_readers: mkstemp");
		abort();
	}
	close(fd);
	model = small_model();
	atexit(cleanup);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	oq_diag d;
	int fd, rc = OQ_OK;
	unsigned which;

	if (size < 1)
		return 0;
	which = data[0] % 4u;
	if ((fd = open(path, O_WRONLY | O_TRUNC)) < 0 ||
	    (size > 1 && write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) || close(fd)) {
		perror("fuzz_readers: write");
		abort();
	}
	oq_diag_init(&d);
	if (which == 0) {
		oq_npy a;
		if (!(rc = oq_npy_read(path, 1, &a, &d))) {
			oq_npy_free(&a);
			rc = oq_npy_read(path, 0, &a, &d);
			if (!rc)
				oq_npy_free(&a);
		}
	} else if (which == 1) {
		oq_override *v = NULL;
		size_t n = 0;
		rc = oq_overrides_load(path, model, &v, &n, &d);
		oq_overrides_free(v, n);
	} else if (which == 2) {
		oq_encodings e;
		memset(&e, 0, sizeof e);
		rc = oq_encodings_read(path, &e, &d);
		oq_encodings_free(&e);
	} else {
		oq_stats s;
		memset(&s, 0, sizeof s);
		if (!(rc = oq_stats_read(path, &s, &d)))
			oq_stats_free(&s);
	}
	fuzz_expect_message(rc, &d, which == 0 ? "fuzz_readers: npy" : which == 1 ? "fuzz_readers: overrides"
				    : which == 2 ? "fuzz_readers: encodings" : "fuzz_readers: stats");
	return 0;
}
