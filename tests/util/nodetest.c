/*
 * nodetest.c - see nodetest.h.
 */
#include "nodetest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_io.h"

int oq_test_read_file(const char *path, void **buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long n;
	if (!f)
		return -1;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fclose(f);
		return -1;
	}
	*buf = malloc((size_t)n + 1);
	if (!*buf || fread(*buf, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		free(*buf);
		return -1;
	}
	fclose(f);
	*len = (size_t)n;
	return 0;
}

int oq_test_load_pb(const char *path, oq_tensor **t, char *why, size_t n)
{
	void *buf;
	size_t len;
	oq_diag d;
	oq_diag_init(&d);
	if (oq_test_read_file(path, &buf, &len)) {
		snprintf(why, n, "cannot read %s", path);
		return -1;
	}
	int rc = oq_tensor_load_pb(buf, len, path, t, &d);
	free(buf);
	if (rc) {
		snprintf(why, n, "%s", d.msg);
		return -1;
	}
	return 0;
}

int oq_test_compare(const oq_tensor *want_in, const oq_rt *got, double rtol, double abstol, char *why,
		    size_t n)
{
	char a[256];
	oq_tensor bf = *want_in;
	const oq_tensor *want = want_in;
	/* The ONNX 1.12 test data stores bfloat16 tensors as uint16 bit patterns. */
	if (want->dtype == OQ_DT_UINT16 && got->dtype == OQ_DT_BFLOAT16) {
		bf.dtype = OQ_DT_BFLOAT16;
		want = &bf;
	}
	if (want->dtype != got->dtype || want->rank != got->rank) {
		snprintf(why, n, "got %s, want %s with rank %d", oq_rt_describe(got, a, sizeof a),
			 oq_dtype_name(want->dtype), want->rank);
		return -1;
	}
	for (int i = 0; i < want->rank; i++)
		if (want->dims[i] != got->dims[i]) {
			snprintf(why, n, "got shape %s, dim %d should be %lld", oq_rt_describe(got, a, sizeof a),
				 i, (long long)want->dims[i]);
			return -1;
		}
	if (want->dtype == OQ_DT_STRING) {
		for (size_t i = 0; i < want->nelem; i++)
			if (want->strs[i].len != got->strs[i].len ||
			    memcmp(want->strs[i].p, got->strs[i].p, want->strs[i].len) != 0) {
				snprintf(why, n, "string element %zu differs", i);
				return -1;
			}
		return 0;
	}
	for (size_t i = 0; i < want->nelem; i++) {
		double w = oq_tensor_get(want, i), g = oq_rt_get(got, i);
		if (isnan(w) || isnan(g)) {
			if (isnan(w) && isnan(g))
				continue;
		} else if (w == g || fabs(g - w) <= abstol + rtol * fabs(w)) {
			continue;
		}
		snprintf(why, n, "element %zu: got %.9g, want %.9g", i, g, w);
		return -1;
	}
	return 0;
}

/* 0 pass, 1 fail, 2 skip; `why` explains fail/skip. */
