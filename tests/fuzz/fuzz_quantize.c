/*
 * fuzz_quantize.c - libFuzzer target over the whole quantize pipeline:
 * every input is untrusted model bytes.
 *
 * Per input: load from memory (no external data), the rewrites (cleanup,
 * upgrade-opset, fold-bn, fuse), calibration on one random sample (minmax,
 * one thread, Loop nodes bounded at 1000 iterations, the values held at
 * once at 256 MiB; only for inputs of at most 2^16 elements in all), the
 * quantize pass, and a save to a temporary file that must load again. Any status is fine
 * as long as a failure carries a message; crashes, sanitizer reports,
 * leaks and timeouts are findings. With OQ_FUZZ_PASSES_ONLY=1 in the
 * environment it stops after the rewrites (load + passes: many more runs a
 * second, for long campaigns).
 *
 * Build: cmake -DONNXQ_FUZZ=ON -DCMAKE_C_COMPILER=clang (tests/fuzz/CMakeLists.txt).
 * Run:   tests/integration/fuzz.sh, or fuzz_quantize CORPUS_DIR -dict=tests/fuzz/onnx.dict
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib/calibrate.h"
#include "passes/pass.h"
#include "src/io/onnx_io.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char out_path[64];
static int passes_only; /* OQ_FUZZ_PASSES_ONLY set: stop after the rewrites */

static void cleanup(void)
{
	unlink(out_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int fd;
	(void)argc;
	(void)argv;
	snprintf(out_path, sizeof out_path, "/tmp/oq-fuzzq.XXXXXX");
	if ((fd = mkstemp(out_path)) < 0) {
		perror("fuzz_quantize: mkstemp");
		abort();
	}
	close(fd);
	passes_only = getenv("OQ_FUZZ_PASSES_ONLY") && strcmp(getenv("OQ_FUZZ_PASSES_ONLY"), "0");
	atexit(cleanup);
	return 0;
}

/* Calibration runs only models whose random sample (symbolic dims 1) has at most this many elements
 * in all: a Conv on a [58, 1, 126, 61] input with a [56, 1, 7, 59] weight input is 3.7 GMAC, seconds
 * under the sanitizers, and -timeout counts that as a finding. */
#define FUZZ_MAX_INPUT_ELEMENTS ((uint64_t)1 << 16)

/* The elements of g's inputs as random:1 makes them (symbolic or unknown dims 1), saturating. */
static uint64_t input_elements(const oq_graph *g)
{
	uint64_t total = 0;

	for (size_t i = 0; i < g->n_inputs; i++) {
		const oq_type *t = g->inputs[i] ? &g->inputs[i]->type : NULL;
		uint64_t n = 1;
		for (int d = 0; t && d < t->rank; d++) {
			uint64_t v = t->dims[d].value > 0 ? (uint64_t)t->dims[d].value : 1;
			n = v > UINT64_MAX / 2 / n ? UINT64_MAX / 2 : n * v;
		}
		total = total + n < total ? UINT64_MAX : total + n;
	}
	return total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	oq_model *m = NULL, *m2 = NULL;
	oq_ranges ranges = {0};
	oq_calib_opts co = {0};
	oq_pass_run run = {0};
	oq_opts q;
	oq_diag d;
	int rc;

	oq_diag_init(&d);
	if (oq_model_load_buffer(data, size, NULL, &m, &d))
		return 0;
	oq_opts_init(&q);
	run.stage = oq_passes_rewrite;
	oq_diag_init(&d);
	rc = oq_passes_run(m, &run, &q, &d);
	fuzz_expect_message(rc, &d, "fuzz_quantize: the rewrites");
	if (rc || !m->graph || passes_only)
		goto out;
	if (input_elements(m->graph) > FUZZ_MAX_INPUT_ELEMENTS)
		goto out; /* a legitimately big sample: compute without bound, not a finding */
	co.source = "random:1";
	co.threads = 1;
	co.method = OQ_CALIB_MINMAX;
	co.max_loop_iterations = 1000;
	co.max_live_bytes = 256 << 20; /* a file may ask for any size: below -rss_limit_mb */
	oq_diag_init(&d);
	rc = oq_calibrate(m, &co, &ranges, &d);
	fuzz_expect_message(rc, &d, "fuzz_quantize: calibration");
	if (rc)
		goto out;
	q.ranges = &ranges;
	memset(&run, 0, sizeof run);
	run.stage = oq_passes_quantize;
	oq_diag_init(&d);
	rc = oq_passes_run(m, &run, &q, &d);
	fuzz_expect_message(rc, &d, "fuzz_quantize: quantize");
	if (rc)
		goto out;
	oq_diag_init(&d);
	rc = oq_model_save(m, out_path, NULL, NULL, &d);
	fuzz_expect_message(rc, &d, "fuzz_quantize: save");
	if (rc == OQ_OK) {
		oq_diag_init(&d);
		if (oq_model_load(out_path, &m2, &d)) {
			fprintf(stderr, "fuzz_quantize: the quantized model does not load again: %s\n", d.msg);
			abort();
		}
		oq_model_free(m2);
	}
out:
	oq_ranges_free(&ranges);
	oq_model_free(m);
	return 0;
}
