/*
 * overrides.h - per-tensor and per-node quantization settings from a JSON
 * file (`onnxq quantize --overrides FILE.json`), parsed into oq_override
 * entries (pass.h) that the quantize pass applies on top of the options.
 *
 * The file is one JSON object with up to two members:
 *
 *   {
 *     "tensors": {
 *       "conv1_out": {"dtype": "int16", "symmetric": true, "range": [-1, 1]},
 *       "logits":    {"skip": true},
 *       "prob":      {"scale": 0.00390625, "zero_point": 0}
 *     },
 *     "nodes": {
 *       "conv1": {"skip": true},
 *       "fc":    {"granularity": "tensor", "dtype": "int8"},
 *       "proj":  {"granularity": "block", "axis": 0, "block_size": 64}
 *     }
 *   }
 *
 * Names: "tensors" keys are value names of the main graph (activations or
 * weights), "nodes" keys are node names of the main graph. Keys of an entry:
 *   skip        true: the tensor stays float / the node is not quantized
 *   dtype       "int8" | "uint8" | "int16" | "uint16" | "int4" | "uint4"
 *   symmetric   true | false (zero point 0, or the mid-point for unsigned)
 *   granularity "tensor" | "channel" | "block"   (weights)
 *   axis        integer: the channel axis (per channel) or the blocked axis (block)
 *   block_size  integer > 0 (granularity "block")
 *   range       [min, max], finite, min <= max: replaces the calibrated range
 *   scale       finite number > 0, with optional zero_point (integer, default 0):
 *               fixed quantization parameters instead of any range
 * A node entry applies to the node's weight (dtype, symmetric, granularity,
 * axis, block_size) and to its output activation (dtype, symmetric, range,
 * scale); a tensor entry on the same value wins over the node's.
 *
 * Any unknown member, name or key, a value of the wrong type and malformed
 * JSON are OQ_EUSAGE with one line naming the file, the entry and what is
 * valid; a file that cannot be read is OQ_EIO.
 */
#ifndef OQ_OVERRIDES_H
#define OQ_OVERRIDES_H

#include "passes/pass.h"

/*
 * Parses `path` and checks every name against m's main graph. *out receives
 * *n entries (tensors first, then nodes, each in file order); free with
 * oq_overrides_free. On failure *out is NULL and *n is 0.
 */
int oq_overrides_load(const char *path, const oq_model *m, oq_override **out, size_t *n,
		      oq_diag *d) OQ_WUR;

/* Frees what oq_overrides_load returned (NULL is fine). */
void oq_overrides_free(oq_override *v, size_t n);

/* The entry for tensor `name` (is_node 0) or node `name` (is_node 1), or NULL. */
const oq_override *oq_override_find(const oq_override *v, size_t n, const char *name, int is_node);

#endif
