/*
 * samples.h - sample inputs for the executor: folder layouts, explicit inputs,
 * validation before anything runs, loading, and `onnxq run` itself.
 *
 * `onnxq run` uses all of it now; calibration will use the sample part
 * (scan/explicit -> check -> load each sample -> oq_exec_run with an
 * observer). A sample is one value per model input (graph inputs not backed
 * by an initializer, in graph order, as oq_exec_input lists them).
 *
 * Sample folder layouts (DIR):
 *   DIR/NNN.npy (or .pb)      one file per sample, single-input models only;
 *   DIR/NNN/                  one folder per sample holding one file per
 *                             input, named `<input name>.npy` ('/' in the
 *                             name replaced by '_') or `input_K.npy` (K = the
 *                             input's position); .pb (a serialized ONNX
 *                             TensorProto) instead of .npy is accepted too.
 *                             A name match wins over a position match.
 *   DIR/test_data_set_N/      the ONNX backend-test layout: input_K.pb, with
 *                             the reference output_K.pb files ignored. This
 *                             is the previous layout with its own names.
 * Samples run in lexical (strcmp) order of NNN. Hidden entries (".x") and
 * *.onnx files at the top level are ignored (so an ONNX test-case folder
 * can be given as is); anything else unexpected is an error.
 *
 * Explicit inputs: NAME=FILE for every model input, FILE being a .npy, a
 * .pb or `random:SEED` (see oq_samples_explicit). They form one sample
 * whose name is "" (outputs go straight into the output folder).
 */
#ifndef OQ_RUN_H
#define OQ_RUN_H

#include <stdio.h>

#include "calib/exec/exec.h"

/* The largest sample file (.pb) read into memory. */
#define OQ_SAMPLE_MAX_BYTES ((size_t)1 << 40)

/* Kinds of sample input source. */
enum {
	OQ_SRC_NPY = 1, /* a .npy file */
	OQ_SRC_PB,      /* a serialized ONNX TensorProto */
	OQ_SRC_RANDOM,  /* generated from a seed */
};

/* Where one input of a sample comes from. */
typedef struct oq_sample_src {
	int kind;      /* OQ_SRC_* */
	char *path;    /* file path (NPY, PB), or "random:SEED" as given */
	uint64_t seed; /* OQ_SRC_RANDOM */
} oq_sample_src;

/* One sample: a source per model input. */
typedef struct oq_sample {
	char *name;        /* "000", "test_data_set_0"; "" for explicit inputs */
	char *where;       /* file or folder to name in messages */
	oq_sample_src *in; /* n_inputs entries, in oq_exec input order */
} oq_sample;

/* The samples of a run, in the order they run. */
typedef struct oq_samples {
	oq_sample *v;
	size_t n;
	size_t n_inputs; /* model inputs each sample feeds */
} oq_samples;

/* Finds the samples of folder `dir` for e's inputs (layouts above); no file is read yet. */
int oq_samples_scan(const char *dir, const oq_exec *e, oq_samples *s, oq_diag *d) OQ_WUR;

/*
 * One sample from NAME=FILE specs (NAME may itself contain '='; the split
 * that names a model input wins). FILE "random:SEED" generates data from
 * the declared type: symbolic or unknown dims become 1; floats are uniform
 * in [0, 1), integers uniform in [0, 10), bools 0 or 1; the generator is
 * splitmix64 seeded with SEED + K * 0x9E3779B97F4A7C15 for input K, so the
 * data depends only on SEED, the input's position and its type.
 * Every model input needs exactly one spec.
 */
int oq_samples_explicit(const char *const *specs, size_t n, const oq_exec *e, oq_samples *s,
                        oq_diag *d) OQ_WUR;

/*
 * Checks every file of every sample against the declared input types
 * (dtype, rank, fixed dims; a symbolic dim must get one value within a
 * sample) by reading headers only. The first problem becomes one line
 * naming the file, the input and the expected dtype/shape: OQ_EINVAL.
 */
int oq_samples_check(const oq_samples *s, const oq_exec *e, oq_diag *d) OQ_WUR;

/* Loads sample i into `inputs` (n_inputs zeroed tensors, owned; release with oq_rt_release). */
int oq_sample_load(const oq_samples *s, size_t i, const oq_exec *e, oq_rt *inputs,
                   oq_diag *d) OQ_WUR;

void oq_samples_free(oq_samples *s);

/*
 * The most calibration samples a measurement after calibration runs: bias
 * correction's passes, the fold report and the measurements built on it
 * (--target-sqnr, learned-rounding and CLE guards). Ranges always come from
 * every sample; past this many, the measurements take an evenly spread subset
 * (oq_samples_thin), so their cost stops growing with the sample count.
 */
#define OQ_MEASURE_SAMPLES 32

/*
 * Keeps m = min(n, cap) of s's first n samples (n <= s->n), evenly spread
 * over them: sample j of the result is sample floor(j n / m) (oq_samples_pick),
 * in order; the rest are freed. Returns m. cap 0, or n <= cap: s unchanged,
 * returns n (the samples past n stay, as callers ignore them).
 */
size_t oq_samples_thin(oq_samples *s, size_t n, size_t cap);

/* The index among n samples of sample j of m kept by oq_samples_thin: floor(j n / m). */
size_t oq_samples_pick(size_t j, size_t n, size_t m);

/* File name for a value: '/' replaced by '_' plus `ext`, into buf (NUL-terminated, truncated to n).
 */
void oq_run_file_name(const char *value_name, const char *ext, char *buf, size_t n);

/* Options of `onnxq run`. */
typedef struct oq_run_opts {
	const char *model_path;    /* for the JSON report */
	const char *data_dir;      /* --data DIR, or NULL */
	const char *const *inputs; /* --input NAME=FILE specs */
	size_t n_inputs;
	const char *output_dir; /* --output-dir, or NULL: print a summary instead */
	int threads;            /* --threads; <= 0: all cores */
	int json;               /* --json: report as one JSON object */
	int64_t max_loop_iterations; /* --max-loop-iterations (oq_exec_opts); <= 0: the default */
	int profile;            /* --profile: time every node; the report follows the outputs' */
} oq_run_opts;

/*
 * `onnxq run`: builds the executor, collects and checks the samples, then
 * runs them in order. Outputs go to OUT/NNN/<output name>.npy (OUT/<output
 * name>.npy for explicit inputs), each written atomically; the report
 * (per output: dtype, shape, min/max/mean over non-NaN elements and the NaN
 * count) goes to `out` as text, or JSON with o->json. With o->profile the
 * profile (calib/profile.h) follows: text after the samples' report, or
 * the JSON object's "profile" member.
 */
int oq_run(oq_model *m, const oq_run_opts *o, FILE *out, oq_diag *d) OQ_WUR;

#endif
