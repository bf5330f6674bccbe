/*
 * irdiff.h - deep comparison of two loaded models, for round-trip tests.
 *
 * A model that was loaded, saved and loaded again must be the same model:
 * same IR (graphs, values and their declared types, nodes, attributes,
 * initializers bitwise) and the same protobuf for everything the IR does
 * not model (doc strings, metadata, functions, unknown fields). The
 * comparison walks the IR first, so the first difference is reported in IR
 * terms ("graph 'g' node #3 'conv' (Conv): attribute 'pads' ..."), then the
 * kept protobuf messages field by field through protobuf-c's descriptors,
 * skipping only the TensorProto payload fields whose storage the saver may
 * legitimately change (typed fields -> raw_data, inline <-> external data);
 * those payloads are compared through the IR with oq_tensor_equal.
 */
#ifndef OQ_TEST_IRDIFF_H
#define OQ_TEST_IRDIFF_H

#include <stddef.h>

#include "src/ir/ir.h"

/*
 * Returns 0 when a and b are equal, 1 when they differ (the first
 * difference, with its location, is written into why[0..n-1]).
 */
int oq_test_model_diff(const oq_model *a, const oq_model *b, char *why, size_t n);

#endif
