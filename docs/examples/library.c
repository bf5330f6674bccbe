/*
 * library.c - onnxq used as a library, through its installed header and
 * pkg-config only (tests/integration/install_pc.sh builds and runs it):
 * quantizes MODEL with the samples of CALIB into OUT, compares OUT with MODEL
 * on the samples of TEST, and shows that mistakes come back as statuses.
 *
 *     cc library.c $(pkg-config --cflags --libs --static onnxq)
 *
 * usage: library MODEL CALIB TEST OUT
 * Prints "version V", "sqnr_min_db X", "sqnr_mean_db X", "outputs N",
 * "samples N", then one "usage: ..." line per refused call; exits 0 when
 * every call behaved, 1 otherwise.
 */
#include <onnxq.h>
#include <stdio.h>

/* A call that must fail with ONNXQ_EUSAGE and say so. */
static int refused(const char *what, int rc, const onnxq_error *err)
{
	if (rc != ONNXQ_EUSAGE || err->status != ONNXQ_EUSAGE || !err->message[0]) {
		fprintf(stderr, "library: %s: status %d (%s), want a usage error\n", what, rc,
			onnxq_status_name(rc));
		return 0;
	}
	printf("usage: %s: %s\n", what, err->message);
	return 1;
}

int main(int argc, char **argv)
{
	onnxq_options *o = NULL, *bad = NULL;
	onnxq_model *ref = NULL, *q = NULL;
	onnxq_comparison c;
	onnxq_error err;
	int rc, ok = 1;

	if (argc != 5) {
		fprintf(stderr, "usage: library MODEL CALIB TEST OUT\n");
		return 1;
	}
	printf("version %s\n", onnxq_version());
	if (!(o = onnxq_options_new()) || !(bad = onnxq_options_new())) {
		fprintf(stderr, "library: out of memory\n");
		return 1;
	}
	/* "prefer" "accuracy": quantize even where ONNX Runtime would run the model faster in float
	 * (the default placement leaves such a model, like the tiny CNN, float) */
	if ((rc = onnxq_options_set(o, "calib", argv[2], &err)) || (rc = onnxq_options_set(o, "threads", "2", &err)) ||
	    (rc = onnxq_options_set(o, "prefer", "accuracy", &err)) ||
	    (rc = onnxq_options_set(o, "quiet", NULL, &err)) || (rc = onnxq_quantize(argv[1], argv[4], o, &err)) ||
	    (rc = onnxq_model_load(argv[1], &ref, &err)) || (rc = onnxq_model_load(argv[4], &q, &err)) ||
	    (rc = onnxq_compare(ref, q, argv[3], 0, &c, &err))) {
		fprintf(stderr, "library: %s (%s)\n", err.message, onnxq_status_name(rc));
		ok = 0;
	} else {
		printf("sqnr_min_db %.2f\nsqnr_mean_db %.2f\noutputs %zu\nsamples %zu\n", c.sqnr_min_db,
		       c.sqnr_mean_db, c.n_outputs, c.n_samples);
	}
	/* a bad value, an unknown option, options that exclude each other, no options at all */
	ok &= refused("weight-type int7", onnxq_options_set(bad, "weight-type", "int7", &err), &err);
	ok &= refused("no-such-option", onnxq_options_set(bad, "no-such-option", NULL, &err), &err);
	if (onnxq_options_set(bad, "weight-only", NULL, &err) || onnxq_options_set(bad, "calib", argv[2], &err)) {
		fprintf(stderr, "library: %s\n", err.message);
		ok = 0;
	}
	ok &= refused("weight-only with calib", onnxq_quantize(argv[1], argv[4], bad, &err), &err);
	ok &= refused("no options", onnxq_quantize(argv[1], argv[4], NULL, &err), &err);
	onnxq_model_free(ref);
	onnxq_model_free(q);
	onnxq_options_free(o);
	onnxq_options_free(bad);
	return ok ? 0 : 1;
}
