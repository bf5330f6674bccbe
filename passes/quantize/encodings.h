/*
 * encodings.h - AIMET-style quantization encodings: export from a
 * quantized model (`onnxq quantize --export-encodings E.json`) and import
 * as quantize-pass overrides (`--import-encodings E.json`), e.g. ranges
 * learnt by quantization-aware training elsewhere.
 *
 * File format: AIMET's encoding specification (0.4 - 0.6.1 form, the one
 * with "activation_encodings" / "param_encodings" objects; AIMET
 * Docs/api_docs/quantization_encoding_specification.rst):
 *
 *   {"version": "onnxq-encodings/1",
 *    "activation_encodings": {"x": [{"bitwidth": 8, "dtype": "int", "is_symmetric": "False",
 *                                     "scale": 0.00784313772, "offset": -128,
 *                                     "min": -1.0039, "max": 0.9961, "onnx_type": "uint8"}]},
 *    "param_encodings": {"W": [{...channel 0...}, {...channel 1...}, ...]}}
 *
 * A record describes x = (u + offset) * scale on AIMET's unsigned grid
 * u in [0, 2^bitwidth - 1], so for an ONNX zero point zp on [qmin, qmax]:
 *   offset = qmin - zp,  min = (qmin - zp) * scale,  max = (qmax - zp) * scale.
 * For unsigned types this is AIMET's "offset = -zp"; for signed types it is
 * shifted by qmin (int8 symmetric: offset -128), as AIMET writes them.
 * Several records for one tensor: one per channel (scale tensor order), or
 * one per block in the C order of the opset-21 blocked scale tensor.
 *
 * Differences from AIMET (documented extensions; AIMET readers ignore
 * unknown keys, onnxq accepts files without them):
 *   "onnx_type"  the ONNX integer type ("uint8", "int8", ...): AIMET's grid
 *                is type-agnostic; without it import picks signed for
 *                is_symmetric "True", unsigned otherwise;
 *   "axis"       channel axis (per channel) or blocked axis; AIMET assumes
 *                the framework's output-channel axis;
 *   "block_size" blocked weights (AIMET 1.0's block encodings use a
 *                different, list-based file, which is not read);
 *   "version"    "onnxq-encodings/1" on export; AIMET versions "0.x" are
 *                accepted on import, "1.x" (list form) is OQ_EUNSUP.
 * int32 biases are not exported: their scale is in_scale * w_scale[c],
 * derived again from the imported activation and weight encodings. AIMET
 * files may list biases (bitwidth 32): import ignores them for that reason.
 * dtype "float" records mean "keep this tensor float" (override skip).
 *
 * Import limits (what oq_override can express): activations get fixed
 * scale/zero point (per tensor only); weights get dtype, symmetric,
 * granularity, axis and block size, and quantize recomputes their scales
 * from the float weights (same model and options -> the same scales).
 * oq_override has no per-channel scale array, so learnt weight scales that
 * differ from what onnxq computes cannot be imported: oq_encodings_verify
 * reports that (OQ_EUNSUP) instead of silently using other scales.
 */
#ifndef OQ_ENCODINGS_H
#define OQ_ENCODINGS_H

#include <stdio.h>

#include "passes/pass.h"

/* The encodings of one tensor (all its records). */
typedef struct oq_encoding {
	char *name;         /* float tensor name: activation value or weight initializer */
	int is_param;       /* 1: "param_encodings" (a weight), 0: "activation_encodings" */
	int is_float;       /* AIMET dtype "float": the tensor stays float */
	int ignored;        /* a 32-bit param record (bias): read, but nothing to apply */
	int bitwidth;       /* bits of the integer grid */
	int dtype;          /* ONNX integer type (OQ_DT_UINT8, OQ_DT_INT8, ...), 0 when is_float */
	int symmetric;      /* is_symmetric */
	int axis;           /* per channel / blocked axis; -1 per tensor; INT32_MIN: not given */
	int64_t block_size; /* > 0: blocked along axis */
	int has_qparams;    /* records carry scale/offset (else only min/max: a fixed range) */
	size_t n;           /* number of records (1 per tensor, C per channel, blocks) */
	float *scale;       /* n scales (has_qparams) */
	int64_t *zp;        /* n ONNX zero points (has_qparams) */
	double min, max;    /* record 0's range when !has_qparams (activations) */
} oq_encoding;

/* A set of encodings: activations and params in file / graph order. */
typedef struct oq_encodings {
	oq_encoding *v; /* owned entries (free with oq_encodings_free) */
	size_t n;       /* number of entries */
} oq_encodings;

void oq_encodings_free(oq_encodings *e);

/*
 * Collects the encodings of a quantized model's main graph: every
 * QuantizeLinear (activation: the float tensor it reads, or the graph output
 * its DequantizeLinear writes) and every DequantizeLinear of an integer
 * initializer (weight: "<w>_quantized[_N]" is recorded as "<w>"; int32
 * biases are skipped). A tensor quantized twice with different parameters
 * is OQ_EUNSUP naming it; non-finite scales are OQ_EINVAL.
 */
int oq_encodings_collect(const oq_model *m, oq_encodings *out, oq_diag *d) OQ_WUR;

/* Writes e as JSON (format above). OQ_EIO when f reports a write error. */
int oq_encodings_write(const oq_encodings *e, FILE *f) OQ_WUR;

/* collect + write to `path` (`--export-encodings`). */
int oq_encodings_export(const oq_model *m, const char *path, oq_diag *d) OQ_WUR;

/*
 * Reads and checks an encodings file (format only; names are not looked
 * up). Malformed JSON, unknown keys and bad values are OQ_EUSAGE with one
 * line naming the file and the tensor; unreadable files OQ_EIO.
 */
int oq_encodings_read(const char *path, oq_encodings *out, oq_diag *d) OQ_WUR;

/*
 * Turns encodings into quantize-pass overrides for the float model m:
 * activations -> fixed scale/zero point (or fixed range, or skip), weights
 * -> dtype, symmetric, granularity, axis, block size (or skip). Every name
 * must be a value (activations) or float initializer (params) of m's main
 * graph, and per-channel / per-block record counts must fit the weight's
 * shape: else OQ_EUSAGE naming `path` (for messages) and the tensor.
 * *out (*n entries, free with oq_overrides_free) is NULL/0 on failure.
 */
int oq_encodings_to_overrides(const oq_encodings *e, const oq_model *m, const char *path,
                              oq_override **out, size_t *n, oq_diag *d) OQ_WUR;

/* read + to_overrides (`--import-encodings`). */
int oq_encodings_import(const char *path, const oq_model *m, oq_override **out, size_t *n,
                        oq_diag *d) OQ_WUR;

/*
 * After quantize: checks that the quantized model q uses exactly the
 * imported scales and zero points (bitwise). A weight whose recomputed
 * scales differ is OQ_EUNSUP naming the weight and channel (learnt weight
 * scales cannot be imported yet); an activation with a different scale is
 * OQ_EINVAL (an internal error: quantize should have used it). Imported
 * tensors that got no Q/DQ at all (inside a fused unit, excluded, not a
 * quantized op) are only counted in *n_unused and, with `log`, listed.
 */
int oq_encodings_verify(const oq_model *q, const oq_encodings *want, FILE *log, size_t *n_unused,
                        oq_diag *d) OQ_WUR;

#endif
