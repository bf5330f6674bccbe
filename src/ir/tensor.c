/*
 * tensor.c - dense tensors: allocation with checked sizes, ownership,
 * element access for reports and checks, equality.
 */
#include "src/ir/ir.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int oq_shape_size(int dtype, int rank, const int64_t *dims, size_t *nelem, size_t *nbytes)
{
	size_t n = 1;

	if (rank < 0 || rank > OQ_MAX_RANK)
		return OQ_EINVAL;
	for (int i = 0; i < rank; i++) {
		if (dims[i] < 0 || (uint64_t)dims[i] > SIZE_MAX)
			return OQ_EINVAL;
		if (!oq_mul_size(n, (size_t)dims[i], &n))
			return OQ_EINVAL;
	}
	*nelem = n;
	if (dtype == OQ_DT_STRING) {
		*nbytes = 0;
		return OQ_OK;
	}
	if (!oq_dtype_valid(dtype) || !oq_dtype_nbytes(dtype, n, nbytes))
		return OQ_EINVAL;
	return OQ_OK;
}

oq_tensor *oq_tensor_new(int dtype, int rank, const int64_t *dims)
{
	oq_tensor *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->dtype = dtype;
	t->rank = rank;
	t->name = oq_strdup("");
	t->dims = oq_calloc((size_t)(rank > 0 ? rank : 0), sizeof *t->dims);
	if (!t->name || !t->dims || oq_shape_size(dtype, rank, dims, &t->nelem, &t->nbytes))
		goto fail;
	if (rank > 0)
		memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
	if (dtype == OQ_DT_STRING) {
		t->strs = oq_calloc(t->nelem, sizeof *t->strs);
		if (!t->strs)
			goto fail;
		for (size_t i = 0; i < t->nelem; i++) {
			t->strs[i].p = oq_strdup("");
			if (!t->strs[i].p)
				goto fail;
		}
	} else {
		void *p = aligned_alloc(64, (t->nbytes + 63) / 64 * 64 + 64);
		if (!p)
			goto fail;
		memset(p, 0, t->nbytes);
		t->data = p;
		t->owned = 1;
	}
	return t;
fail:
	oq_tensor_free(t);
	return NULL;
}

void oq_tensor_free(oq_tensor *t)
{
	if (!t)
		return;
	if (t->owned)
		free((void *)t->data);
	if (t->strs)
		for (size_t i = 0; i < t->nelem; i++)
			free(t->strs[i].p);
	free(t->strs);
	free(t->dims);
	free(t->name);
	free(t);
}

int oq_tensor_own(oq_tensor *t)
{
	void *p;

	if (t->owned || t->dtype == OQ_DT_STRING)
		return OQ_OK;
	p = aligned_alloc(64, (t->nbytes + 63) / 64 * 64 + 64);
	if (!p)
		return OQ_ENOMEM;
	if (t->nbytes)
		memcpy(p, t->data, t->nbytes);
	t->data = p;
	t->owned = 1;
	t->external = 0;
	return OQ_OK;
}

/* Raw (unsigned) bits of element i for types up to 64 bits wide. */
static uint64_t get_bits(const oq_tensor *t, size_t i)
{
	const unsigned char *p = t->data;
	int bits = oq_dtype_bits(t->dtype);
	uint64_t v = 0;

	if (bits < 8) {
		int per = 8 / bits;
		unsigned shift = (unsigned)(i % (size_t)per) * (unsigned)bits;
		return (p[i / (size_t)per] >> shift) & ((1u << bits) - 1);
	}
	/* Little-endian assemble; works for unaligned borrowed data. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(&v, p + i * (size_t)(bits / 8), (size_t)(bits / 8)); /* the low bytes of v */
#else
	for (int b = bits / 8 - 1; b >= 0; b--)
		v = (v << 8) | p[i * (size_t)(bits / 8) + (size_t)b];
#endif
	return v;
}

static int64_t sign_extend(uint64_t v, int bits)
{
	if (bits >= 64)
		return (int64_t)v;
	uint64_t m = 1ull << (bits - 1);
	return (int64_t)((v ^ m) - m);
}

int64_t oq_tensor_get_int(const oq_tensor *t, size_t i)
{
	char k = oq_dtype_kind(t->dtype);
	int bits = oq_dtype_bits(t->dtype);

	if (i >= t->nelem || !t->data)
		return 0;
	if (k == 's')
		return sign_extend(get_bits(t, i), bits);
	if (k == 'u' || k == 'b')
		return (int64_t)get_bits(t, i);
	return 0;
}

double oq_tensor_get(const oq_tensor *t, size_t i)
{
	uint64_t b;

	if (i >= t->nelem || !t->data)
		return 0;
	switch (t->dtype) {
	case OQ_DT_FLOAT: {
		uint32_t u = (uint32_t)get_bits(t, i);
		float f;
		memcpy(&f, &u, 4);
		return f;
	}
	case OQ_DT_DOUBLE: {
		double f;
		b = get_bits(t, i);
		memcpy(&f, &b, 8);
		return f;
	}
	case OQ_DT_FLOAT16:
		return oq_f16_to_f32((uint16_t)get_bits(t, i));
	case OQ_DT_BFLOAT16:
		return oq_bf16_to_f32((uint16_t)get_bits(t, i));
	default:
		break;
	}
	switch (oq_dtype_kind(t->dtype)) {
	case 's':
	case 'u':
	case 'b':
		return (double)oq_tensor_get_int(t, i);
	default:
		return 0;
	}
}

int oq_tensor_equal(const oq_tensor *a, const oq_tensor *b)
{
	if (a->dtype != b->dtype || a->rank != b->rank || a->nelem != b->nelem ||
	    a->nbytes != b->nbytes || strcmp(a->name, b->name) != 0)
		return 0;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return 0;
	if (a->dtype == OQ_DT_STRING) {
		for (size_t i = 0; i < a->nelem; i++)
			if (a->strs[i].len != b->strs[i].len ||
			    memcmp(a->strs[i].p, b->strs[i].p, a->strs[i].len) != 0)
				return 0;
		return 1;
	}
	return a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0;
}

void oq_tensor_release_pages(const oq_model *m, const oq_tensor *t)
{
	long pg = sysconf(_SC_PAGESIZE);

	if (!m || !t || t->owned || !t->data || !t->nbytes || pg <= 0)
		return;
	for (size_t i = 0; i < m->n_maps; i++) {
		const oq_mapping *mp = &m->maps[i];
		uintptr_t base = (uintptr_t)mp->base, p = (uintptr_t)t->data, lo, hi;
		if (!mp->mapped || p < base || p - base >= mp->size || t->nbytes > mp->size - (p - base))
			continue;
		/*
		 * A read-only private file mapping: dropped pages are read back from
		 * the file when touched again, so rounding out to whole pages only
		 * costs the neighbours a re-read.
		 */
		lo = p & ~(uintptr_t)(pg - 1);
		hi = (p + t->nbytes + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
		(void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
		return;
	}
}
