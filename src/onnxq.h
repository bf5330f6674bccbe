/*
 * onnxq.h - onnxq as a library: quantize a float ONNX model (QuantizeLinear/
 * DequantizeLinear, weights stored as integers), calibrating activation
 * ranges on sample inputs with onnxq's own CPU executor, and compare two
 * models on samples. This is the one public header: C11 or C++, no other
 * onnxq header needed; build with `pkg-config --cflags --libs --static onnxq`.
 *
 *     onnxq_error err;
 *     onnxq_options *o = onnxq_options_new();
 *     if (!o || onnxq_options_set(o, "calib", "samples/", &err) ||
 *         onnxq_quantize("model.onnx", "model_q.onnx", o, &err))
 *             fprintf(stderr, "%s\n", o ? err.message : "out of memory");
 *     onnxq_options_free(o);
 *
 * Every function that can fail returns ONNXQ_OK or a negative ONNXQ_E*
 * status and, when given an onnxq_error, fills it with one line saying what
 * is wrong and what to do. Nothing exits or aborts on bad input. Results do
 * not depend on the number of threads, bit for bit.
 */
#ifndef ONNXQ_H
#define ONNXQ_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes; the onnxq command exits with their negation (README "Exit codes"). */
enum {
	ONNXQ_OK = 0,
	ONNXQ_EUSAGE = -1, /* an unknown option, a bad value, options that exclude each other */
	ONNXQ_EINVAL = -2, /* an invalid or unreadable model or data file */
	ONNXQ_EUNSUP = -3, /* valid, but a construct onnxq does not support */
	ONNXQ_EIO = -4,    /* open, read, write or rename failed */
	ONNXQ_ENOMEM = -5, /* out of memory */
	ONNXQ_ECHECK = -6, /* a check failed: a comparison below its min_sqnr */
};

/* What went wrong. */
typedef struct onnxq_error {
	int status;         /* ONNXQ_E*, ONNXQ_OK when nothing failed */
	char message[1024]; /* one line: "stage: what is wrong and what to do" */
} onnxq_error;

/* The library's version ("0.1.0"). */
const char *onnxq_version(void);

/* A status in words ("usage error", "invalid input", ...). */
const char *onnxq_status_name(int status);

/* ---- models ---- */

typedef struct onnxq_model onnxq_model;

/* Loads an .onnx file (external data beside it included). err may be NULL. */
int onnxq_model_load(const char *path, onnxq_model **out, onnxq_error *err);

/* Writes m to path through a temporary file: path is untouched on failure. err may be NULL. */
int onnxq_model_save(const onnxq_model *m, const char *path, onnxq_error *err);

/* Frees m; NULL is a no-op. */
void onnxq_model_free(onnxq_model *m);

/* ---- quantizing ---- */

typedef struct onnxq_options onnxq_options;

/* Options at the defaults of `onnxq quantize`; NULL when out of memory. */
onnxq_options *onnxq_options_new(void);

/* Frees o; NULL is a no-op. */
void onnxq_options_free(onnxq_options *o);

/*
 * Sets an option of `onnxq quantize`, named as on its command line without
 * the leading "--": "calib" (a folder of samples), "method", "weight-type",
 * "granularity", "weight-only", "no-bias-correction", "no-fold-bn", "quiet",
 * ... (`onnxq quantize --help` lists them). value: the option's value, NULL
 * for a flag or to leave an optional value out; it is copied. An unknown
 * name or a bad value is ONNXQ_EUSAGE; whether the options fit together is
 * checked by onnxq_quantize. err may be NULL.
 */
int onnxq_options_set(onnxq_options *o, const char *name, const char *value, onnxq_error *err);

/*
 * Quantizes the model at in_path into out_path with options o (NULL: the
 * defaults, which need "calib" or "weight-only" to be set, so NULL is
 * ONNXQ_EUSAGE). The summary and warnings go to stderr unless "quiet" is
 * set. out_path is untouched on failure. err may be NULL.
 */
int onnxq_quantize(const char *in_path, const char *out_path, const onnxq_options *o, onnxq_error *err);

/* ---- comparing ---- */

/* The worst output of a comparison. */
typedef struct onnxq_comparison {
	double sqnr_min_db;  /* lowest SQNR of any output on any sample, in dB (inf: identical) */
	double sqnr_mean_db; /* lowest over the outputs of the mean SQNR over the samples, in dB */
	size_t n_outputs;    /* outputs compared */
	size_t n_samples;    /* samples run */
} onnxq_comparison;

/*
 * Runs ref and test on every sample of data_dir (DIR/NNN.npy for a model
 * with one input, DIR/NNN/<input>.npy, or the ONNX test layout) and fills
 * *out with SQNR = 10 log10(sum ref^2 / sum (ref - test)^2) per output and
 * sample. threads <= 0: all cores. err may be NULL.
 */
int onnxq_compare(onnxq_model *ref, onnxq_model *test, const char *data_dir, int threads,
		  onnxq_comparison *out, onnxq_error *err);

#ifdef __cplusplus
}
#endif

#endif
