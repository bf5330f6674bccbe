/*
 * nodetest.c - see nodetest.h.
 */
#include "nodetest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/io/onnx_io.h"

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

/* ------------------------------------------------ sequence / optional .pb */

/* A protobuf varint at *p (< end); -1 when truncated or longer than 10 bytes. */
static int varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
	*v = 0;
	for (int s = 0; s < 64 && *p < end; s += 7) {
		unsigned char b = *(*p)++;
		*v |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80))
			return 0;
	}
	return -1;
}

/*
 * The next field of a message: number, wire type, and for length-delimited
 * fields the payload in *sub/*sublen. Other wire types are skipped over.
 */
static int field(const unsigned char **p, const unsigned char *end, unsigned *num, unsigned *wt,
		 const unsigned char **sub, size_t *sublen)
{
	uint64_t key, v;
	if (varint(p, end, &key))
		return -1;
	*num = (unsigned)(key >> 3);
	*wt = (unsigned)(key & 7);
	*sub = NULL;
	*sublen = 0;
	switch (*wt) {
	case 0:
		return varint(p, end, &v);
	case 1:
		if (end - *p < 8)
			return -1;
		*p += 8;
		return 0;
	case 5:
		if (end - *p < 4)
			return -1;
		*p += 4;
		return 0;
	case 2:
		if (varint(p, end, &v) || v > (uint64_t)(end - *p))
			return -1;
		*sub = *p;
		*sublen = (size_t)v;
		*p += v;
		return 0;
	default:
		return -1;
	}
}

static int tensor_value(const unsigned char *b, size_t len, const char *path, oq_rt *out, char *why, size_t n)
{
	oq_tensor *t;
	oq_rt view;
	oq_diag d;
	int rc;
	oq_diag_init(&d);
	if (oq_tensor_load_pb(b, len, path, &t, &d)) {
		snprintf(why, n, "%s", d.msg);
		return -1;
	}
	rc = oq_rt_from_tensor(&view, t);
	if (!rc)
		rc = oq_rt_copy(out, &view); /* owned: t is freed next */
	oq_rt_release(&view);
	oq_tensor_free(t);
	if (rc)
		snprintf(why, n, "%s: rank above %d or no memory", path, OQ_RT_MAX_RANK);
	return rc ? -1 : 0;
}

/* SequenceProto (seq != 0) or OptionalProto from b[0..len). */
static int message_value(const unsigned char *b, size_t len, int seq, const char *path, oq_rt *out, char *why,
			 size_t n)
{
	const unsigned char *p = b, *end = b + len, *sub;
	size_t sublen;
	unsigned num, wt;

	memset(out, 0, sizeof *out);
	out->kind = OQ_RT_NONE;
	if (seq && oq_rt_seq(out, 0, 0)) {
		snprintf(why, n, "out of memory");
		return -1;
	}
	while (p < end) {
		oq_rt v;
		int r;
		if (field(&p, end, &num, &wt, &sub, &sublen)) {
			snprintf(why, n, "%s: not a valid %s", path, seq ? "SequenceProto" : "OptionalProto");
			return -1;
		}
		/* 3: tensor value(s), 5: sequence value(s), 7 (sequence) / 7 (optional): optional values */
		if (wt != 2 || (num != 3 && num != 5 && num != 7))
			continue;
		if (num == 3)
			r = tensor_value(sub, sublen, path, &v, why, n);
		else
			r = message_value(sub, sublen, num == 5, path, &v, why, n);
		if (r) {
			oq_rt_release(&v);
			return -1;
		}
		if (!seq) {
			oq_rt_release(out);
			*out = v;
			continue;
		}
		oq_rt *items = realloc(out->items, (out->n_items + 1) * sizeof *items);
		if (!items) {
			oq_rt_release(&v);
			snprintf(why, n, "out of memory");
			return -1;
		}
		out->items = items;
		out->items[out->n_items++] = v;
		if (v.kind == OQ_RT_TENSOR)
			out->dtype = v.dtype;
	}
	return 0;
}

int oq_test_load_value_pb(const char *path, int kind, oq_rt *out, char *why, size_t n)
{
	void *buf;
	size_t len;
	int rc;
	memset(out, 0, sizeof *out);
	if (oq_test_read_file(path, &buf, &len)) {
		snprintf(why, n, "cannot read %s", path);
		return -1;
	}
	if (kind == OQ_TYPE_SEQUENCE || kind == OQ_TYPE_OPTIONAL)
		rc = message_value(buf, len, kind == OQ_TYPE_SEQUENCE, path, out, why, n);
	else
		rc = tensor_value(buf, len, path, out, why, n);
	free(buf);
	if (rc)
		oq_rt_release(out);
	return rc;
}

int oq_test_compare_value(const oq_rt *want, const oq_rt *got, double rtol, double abstol, char *why, size_t n)
{
	static const char *kinds[] = {"a tensor", "a sequence", "an empty optional"};
	oq_tensor w;
	if (want->kind != got->kind) {
		snprintf(why, n, "got %s, want %s", kinds[got->kind], kinds[want->kind]);
		return -1;
	}
	if (want->kind == OQ_RT_NONE)
		return 0;
	if (want->kind == OQ_RT_SEQ) {
		if (want->n_items != got->n_items) {
			snprintf(why, n, "got a sequence of %zu, want %zu", got->n_items, want->n_items);
			return -1;
		}
		for (size_t i = 0; i < want->n_items; i++) {
			char w2[512];
			if (oq_test_compare_value(&want->items[i], &got->items[i], rtol, abstol, w2, sizeof w2)) {
				snprintf(why, n, "item %zu: %s", i, w2);
				return -1;
			}
		}
		return 0;
	}
	memset(&w, 0, sizeof w);
	w.name = "";
	w.dtype = want->dtype;
	w.rank = want->rank;
	w.dims = (int64_t *)want->dims;
	w.nelem = want->nelem;
	w.nbytes = want->nbytes;
	w.data = want->data;
	w.strs = want->strs;
	return oq_test_compare(&w, got, rtol, abstol, why, n);
}
