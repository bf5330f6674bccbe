/*
 * onnx_io.h - reading and writing ONNX model files.
 *
 * Loading maps the file read-only, rewrites the protobuf so that large
 * raw_data payloads are left in the mapping (the IR borrows them), unpacks
 * the rest with protobuf-c and builds the IR. External data is mapped the
 * same way after a path-traversal check. Saving streams the protobuf to a
 * temporary file beside the output and renames it into place, so the output
 * path is untouched on any failure (src/io/outfile.h: what an output path
 * may name; "-" streams to standard output). External data goes to
 * "<out>.<16 hex digits>.data", named by its content: the model is renamed
 * last, so a model never meets data another save wrote.
 */
#ifndef OQ_ONNX_IO_H
#define OQ_ONNX_IO_H

#include "src/ir/ir.h"

/* Loads a model file. On failure *out is NULL and d holds one line. */
int oq_model_load(const char *path, oq_model **out, oq_diag *d) OQ_WUR;

/*
 * Loads a model from memory (fuzzing, tests). `buf` must outlive the model.
 * `dir` is the base folder for external data, or NULL to refuse it.
 */
int oq_model_load_buffer(const void *buf, size_t len, const char *dir, oq_model **out,
			 oq_diag *d) OQ_WUR;

typedef struct oq_save_opts {
	int external_data;         /* 1: write tensors >= external_threshold to <out>.<hash>.data */
	size_t external_threshold; /* bytes; 0 means the default (1024) */
	int no_auto_external;      /* 1: fail instead of switching to external data past 2 GB */
	size_t auto_limit;         /* serialized size that triggers automatic external data;
				    * 0 means protobuf's limit minus a 64 MiB margin (tests lower it) */
} oq_save_opts;

typedef struct oq_save_info {
	int went_external;         /* external data was used (asked for or automatic) */
	int auto_external;         /* ... because the model would pass the 2 GB protobuf limit */
	size_t model_bytes;        /* bytes written to the .onnx file */
	size_t data_bytes;         /* bytes written to the .data file */
	size_t n_external;         /* tensors moved to the .data file */
	char data_name[288];       /* the data file's name (beside the model), "" without one */
} oq_save_info;

/* Saves atomically; `o` and `info` may be NULL. */
int oq_model_save(const oq_model *m, const char *path, const oq_save_opts *o, oq_save_info *info,
		  oq_diag *d) OQ_WUR;

/*
 * Loads one serialized TensorProto (the ONNX test-data .pb files) into an
 * owned tensor. `what` names the source in messages. External data is refused.
 */
int oq_tensor_load_pb(const void *buf, size_t len, const char *what, oq_tensor **out, oq_diag *d) OQ_WUR;

/* The ONNX protobuf limit for one serialized message (2 GiB - 1). */
#define OQ_PROTOBUF_LIMIT ((size_t)0x7fffffff)

#endif
