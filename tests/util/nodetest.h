/*
 * nodetest.h - what the tools that run ONNX backend node tests share:
 * reading a file, loading a test-data TensorProto (.pb), and comparing an
 * executor output with the reference (dtype, shape, |got - want| <= atol +
 * rtol * |want|, NaN must meet NaN).
 */
#ifndef OQ_NODETEST_H
#define OQ_NODETEST_H

#include <stddef.h>

#include "exec.h"

/* Whole file into a malloc'd buffer (one spare byte); -1 on failure. */
int oq_test_read_file(const char *path, void **buf, size_t *len);
/* A serialized TensorProto file; -1 with `why` filled on failure. */
int oq_test_load_pb(const char *path, oq_tensor **t, char *why, size_t n);
/* 0 when got matches want within the tolerances; otherwise -1 with `why` filled. */
int oq_test_compare(const oq_tensor *want, const oq_rt *got, double rtol, double abstol, char *why,
		    size_t n);

#endif
