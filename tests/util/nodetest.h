/*
 * nodetest.h - what the tools that run ONNX backend node tests share:
 * reading a file, loading a test-data TensorProto (.pb), and comparing an
 * executor output with the reference (dtype, shape, |got - want| <= atol +
 * rtol * |want|, NaN must meet NaN).
 */
#ifndef OQ_NODETEST_H
#define OQ_NODETEST_H

#include <stddef.h>

#include "calib/exec/exec.h"

/* Whole file into a malloc'd buffer (one spare byte); -1 on failure. */
int oq_test_read_file(const char *path, void **buf, size_t *len);
/* A serialized TensorProto file; -1 with `why` filled on failure. */
int oq_test_load_pb(const char *path, oq_tensor **t, char *why, size_t n);
/* 0 when got matches want within the tolerances; otherwise -1 with `why` filled. */
int oq_test_compare(const oq_tensor *want, const oq_rt *got, double rtol, double abstol, char *why,
		    size_t n);

/*
 * A test-data .pb holding a value of type kind (OQ_TYPE_TENSOR: TensorProto,
 * OQ_TYPE_SEQUENCE: SequenceProto, OQ_TYPE_OPTIONAL: OptionalProto) into an
 * owned runtime value (release with oq_rt_release); -1 with `why` filled.
 * SequenceProto and OptionalProto are not in proto/onnx.proto: their few
 * fields are read from the protobuf wire format here, and each element
 * TensorProto goes through oq_tensor_load_pb.
 */
int oq_test_load_value_pb(const char *path, int kind, oq_rt *out, char *why, size_t n);
/* oq_test_compare for any runtime value: kinds, sequence lengths, then each tensor. */
int oq_test_compare_value(const oq_rt *want, const oq_rt *got, double rtol, double abstol, char *why,
			  size_t n);

#endif
