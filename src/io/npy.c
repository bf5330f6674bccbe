/*
 * npy.c - reading and writing NumPy .npy files (see npy.h for the format).
 *
 * The header is a tiny Python literal; we parse exactly the subset numpy
 * writes (a dict with the keys 'descr', 'fortran_order' and 'shape', quoted
 * with ' or ", any whitespace, trailing commas) and nothing more: files are
 * untrusted input, so every length is checked before it is used and every
 * size product is overflow-checked.
 */
#include "src/io/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/io/file.h"
#include "src/io/outfile.h"

/* Largest header we accept; numpy's own limit for reading is 10000 bytes by default. */
#define NPY_MAX_HEADER ((size_t)1 << 20)

static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* descr type code and byte size -> ONNX dtype */
static const struct {
	char code; /* numpy kind character */
	int size;  /* bytes per element */
	int dtype; /* ONNX dtype */
} types[] = {
    {'f', 2, OQ_DT_FLOAT16}, {'f', 4, OQ_DT_FLOAT},  {'f', 8, OQ_DT_DOUBLE}, {'i', 1, OQ_DT_INT8},
    {'i', 2, OQ_DT_INT16},   {'i', 4, OQ_DT_INT32},  {'i', 8, OQ_DT_INT64},  {'u', 1, OQ_DT_UINT8},
    {'u', 2, OQ_DT_UINT16},  {'u', 4, OQ_DT_UINT32}, {'u', 8, OQ_DT_UINT64}, {'b', 1, OQ_DT_BOOL},
};

const char *oq_npy_descr(int dtype)
{
	switch (dtype) {
	case OQ_DT_FLOAT16: return "<f2";
	case OQ_DT_FLOAT: return "<f4";
	case OQ_DT_DOUBLE: return "<f8";
	case OQ_DT_INT8: return "|i1";
	case OQ_DT_INT16: return "<i2";
	case OQ_DT_INT32: return "<i4";
	case OQ_DT_INT64: return "<i8";
	case OQ_DT_UINT8: return "|u1";
	case OQ_DT_UINT16: return "<u2";
	case OQ_DT_UINT32: return "<u4";
	case OQ_DT_UINT64: return "<u8";
	case OQ_DT_BOOL: return "|b1";
	default: return NULL;
	}
}

/* Also reports whether elements must be byte-swapped (big-endian descr). */
static int descr_dtype(const char *s, int *swap)
{
	char order = '=';
	*swap = 0;
	if (*s == '<' || *s == '>' || *s == '|' || *s == '=')
		order = *s++;
	if (!s[0] || s[1] < '1' || s[1] > '9' || s[2])
		return -1;
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		if (types[i].code != s[0] || types[i].size != s[1] - '0')
			continue;
		/* '|' means "no byte order": only meaningful for one-byte types */
		if (order == '|' && types[i].size != 1)
			return -1;
		*swap = order == '>' && types[i].size > 1;
		return types[i].dtype;
	}
	return -1;
}

int oq_npy_dtype(const char *descr)
{
	int swap;
	return descr_dtype(descr, &swap);
}

void oq_npy_free(oq_npy *a)
{
	free(a->data);
	memset(a, 0, sizeof *a);
}

/* ---------------------------------------------------------------- header */

/* A cursor over the header text. */
typedef struct hcur {
	const char *p;   /* next character */
	const char *end; /* one past the header */
} hcur;

static void skip_ws(hcur *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static int eat(hcur *c, char ch)
{
	skip_ws(c);
	if (c->p < c->end && *c->p == ch) {
		c->p++;
		return 1;
	}
	return 0;
}

/* A quoted string (no escapes: numpy's keys and descrs never need them) into buf. */
static int quoted(hcur *c, char *buf, size_t cap)
{
	char q;
	size_t n = 0;
	skip_ws(c);
	if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
		return 0;
	q = *c->p++;
	while (c->p < c->end && *c->p != q) {
		if (*c->p == '\\' || n + 1 >= cap)
			return 0;
		buf[n++] = *c->p++;
	}
	if (c->p >= c->end)
		return 0;
	c->p++;
	buf[n] = 0;
	return 1;
}

static int word(hcur *c, const char *w)
{
	size_t n = strlen(w);
	skip_ws(c);
	if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, w, n)) {
		c->p += n;
		return 1;
	}
	return 0;
}

/* '(' [int (',' int)* [',']] ')' ; returns 0 on a syntax error, -1 on too many dims. */
static int shape(hcur *c, oq_npy *a)
{
	if (!eat(c, '('))
		return 0;
	a->rank = 0;
	for (;;) {
		int64_t v = 0;
		int digits = 0;
		if (eat(c, ')'))
			return 1;
		skip_ws(c);
		while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
			int dgt = *c->p++ - '0';
			if (v > (INT64_MAX - dgt) / 10)
				return 0;
			v = v * 10 + dgt;
			digits++;
		}
		if (!digits)
			return 0;
		if (c->p < c->end && *c->p == 'L') /* Python 2 long */
			c->p++;
		if (a->rank >= OQ_MAX_RANK)
			return -1;
		a->dims[a->rank++] = v;
		if (eat(c, ')'))
			return 1;
		if (!eat(c, ','))
			return 0;
	}
}

/*
 * Parses magic, version, header length and header from b (avail bytes
 * present); `total` is the size of the whole file, checked against the shape.
 */
static int parse_head(const unsigned char *b, size_t avail, size_t total, const char *what,
                      oq_npy *a, int *swap, oq_diag *d)
{
	size_t hlen, pre;
	hcur c;
	char key[32], descr[32];
	int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0, dtype, r;

	memset(a, 0, sizeof *a);
	if (avail < 10 || memcmp(b, magic, sizeof magic))
		return oq_err(d, OQ_EINVAL, "npy: %s: not a .npy file (no \\x93NUMPY magic)", what);
	if (b[6] < 1 || b[6] > 3 || b[7] != 0)
		return oq_err(d, OQ_EUNSUP,
		              "npy: %s: format version %d.%d is not supported (1.0, 2.0, 3.0 are)",
		              what, b[6], b[7]);
	a->version = b[6];
	if (a->version == 1) {
		hlen = (size_t)b[8] | (size_t)b[9] << 8;
		pre = 10;
	} else {
		if (avail < 12)
			return oq_err(d, OQ_EINVAL, "npy: %s: truncated header", what);
		hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
		pre = 12;
	}
	if (hlen > NPY_MAX_HEADER)
		return oq_err(d, OQ_EINVAL, "npy: %s: header of %zu bytes is implausibly long",
		              what, hlen);
	if (avail - pre < hlen)
		return oq_err(d, OQ_EINVAL, "npy: %s: truncated header (%zu of %zu bytes)", what,
		              avail - pre, hlen);
	a->data_offset = pre + hlen;
	c.p = (const char *)b + pre;
	c.end = c.p + hlen;

	if (!eat(&c, '{'))
		goto syntax;
	while (!eat(&c, '}')) {
		if (!quoted(&c, key, sizeof key) || !eat(&c, ':'))
			goto syntax;
		if (!strcmp(key, "descr") && !have_descr) {
			skip_ws(&c);
			if (c.p < c.end && *c.p == '[')
				return oq_err(d, OQ_EUNSUP,
				              "npy: %s: structured dtypes are not supported", what);
			if (!quoted(&c, descr, sizeof descr))
				goto syntax;
			have_descr = 1;
		} else if (!strcmp(key, "fortran_order") && !have_order) {
			if (word(&c, "True"))
				fortran = 1;
			else if (!word(&c, "False"))
				goto syntax;
			have_order = 1;
		} else if (!strcmp(key, "shape") && !have_shape) {
			if ((r = shape(&c, a)) < 0)
				return oq_err(d, OQ_EUNSUP, "npy: %s: more than %d dims", what,
				              OQ_MAX_RANK);
			if (!r)
				goto syntax;
			have_shape = 1;
		} else {
			return oq_err(d, OQ_EINVAL,
			              "npy: %s: unexpected or repeated header key '%s'", what, key);
		}
		if (!eat(&c, ',')) {
			if (!eat(&c, '}'))
				goto syntax;
			break;
		}
	}
	skip_ws(&c);
	if (c.p != c.end)
		goto syntax;
	if (!have_descr || !have_order || !have_shape)
		return oq_err(d, OQ_EINVAL, "npy: %s: header lacks '%s'", what,
		              !have_descr   ? "descr"
		              : !have_order ? "fortran_order"
		                            : "shape");
	if ((dtype = descr_dtype(descr, swap)) < 0)
		return oq_err(d, OQ_EUNSUP,
		              "npy: %s: dtype '%s' is not supported (float16/32/64, int8/16/32/64, "
		              "uint8/16/32/64, bool are)",
		              what, descr);
	if (fortran)
		return oq_err(
		    d, OQ_EUNSUP,
		    "npy: %s: Fortran-order arrays are not supported; save a C-order array "
		    "(numpy.ascontiguousarray)",
		    what);
	a->dtype = dtype;
	if (oq_shape_size(dtype, a->rank, a->dims, &a->nelem, &a->nbytes))
		return oq_err(d, OQ_EINVAL, "npy: %s: shape is too large", what);
	if (total < a->data_offset + a->nbytes)
		return oq_err(d, OQ_EINVAL,
		              "npy: %s: truncated: %zu data bytes, the header's shape needs %zu",
		              what, total - a->data_offset, a->nbytes);
	if (total > a->data_offset + a->nbytes)
		return oq_err(d, OQ_EINVAL, "npy: %s: %zu bytes of trailing garbage after the data",
		              what, total - a->data_offset - a->nbytes);
	return OQ_OK;
syntax:
	return oq_err(d, OQ_EINVAL, "npy: %s: malformed header near offset %zu", what,
	              pre + (size_t)(c.p - ((const char *)b + pre)));
}

static void *alloc_data(size_t n)
{
	/* 64-byte aligned with slack, like runtime tensors, so it can be moved into one */
	return aligned_alloc(64, (n + 63) / 64 * 64 + 64);
}

static void swap_bytes(unsigned char *p, size_t nelem, size_t size)
{
	for (size_t i = 0; i < nelem; i++, p += size)
		for (size_t j = 0; j < size / 2; j++) {
			unsigned char t = p[j];
			p[j] = p[size - 1 - j];
			p[size - 1 - j] = t;
		}
}

int oq_npy_parse(const void *buf, size_t len, const char *what, int header_only, oq_npy *out,
                 oq_diag *d)
{
	int swap, rc;
	if ((rc = parse_head(buf, len, len, what, out, &swap, d)))
		return rc;
	if (header_only)
		return OQ_OK;
	if (!(out->data = alloc_data(out->nbytes)))
		return oq_err(d, OQ_ENOMEM, "npy: %s: out of memory for %zu bytes", what,
		              out->nbytes);
	if (out->nbytes)
		memcpy(out->data, (const unsigned char *)buf + out->data_offset, out->nbytes);
	if (swap)
		swap_bytes(out->data, out->nelem, out->nbytes / (out->nelem ? out->nelem : 1));
	return OQ_OK;
}

/* Reads exactly n bytes at the current position; 0 on success. */
static int read_all(int fd, void *p, size_t n)
{
	unsigned char *q = p;
	while (n) {
		ssize_t r = read(fd, q, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		q += r;
		n -= (size_t)r;
	}
	return 0;
}

int oq_npy_read(const char *path, int header_only, oq_npy *out, oq_diag *d)
{
	unsigned char pre[12], *head = NULL;
	struct stat st;
	size_t size, hlen, got;
	int fd, swap, rc;

	memset(out, 0, sizeof *out);
	if ((fd = oq_file_open(path, "npy", OQ_EIO, &st, d)) < 0)
		return fd;
	size = (size_t)st.st_size;
	got = size < sizeof pre ? size : sizeof pre;
	if (read_all(fd, pre, got)) {
		rc = oq_err(d, OQ_EIO, "npy: cannot read '%s': %s", path, strerror(errno));
		goto fail;
	}
	/* Let the parser judge a short or foreign prefix; else read the whole header. */
	hlen = got;
	if (got == sizeof pre && !memcmp(pre, magic, sizeof magic)) {
		size_t h = pre[6] == 1 ? 10 + ((size_t)pre[8] | (size_t)pre[9] << 8)
		                       : 12 + ((size_t)pre[8] | (size_t)pre[9] << 8 |
		                               (size_t)pre[10] << 16 | (size_t)pre[11] << 24);
		hlen = h > NPY_MAX_HEADER + 12 ? sizeof pre : h > size ? size : h;
	}
	if (!(head = malloc(hlen > sizeof pre ? hlen : sizeof pre))) {
		rc = oq_err(d, OQ_ENOMEM, "npy: out of memory");
		goto fail;
	}
	memcpy(head, pre, got);
	if (hlen > got && read_all(fd, head + got, hlen - got)) {
		rc = oq_err(d, OQ_EIO, "npy: cannot read '%s': %s", path, strerror(errno));
		goto fail;
	}
	if ((rc = parse_head(head, hlen, size, path, out, &swap, d)))
		goto fail;
	if (!header_only) {
		if (!(out->data = alloc_data(out->nbytes))) {
			rc = oq_err(d, OQ_ENOMEM, "npy: %s: out of memory for %zu bytes", path,
			            out->nbytes);
			goto fail;
		}
		if (lseek(fd, (off_t)out->data_offset, SEEK_SET) < 0 ||
		    read_all(fd, out->data, out->nbytes)) {
			rc = oq_err(d, OQ_EIO, "npy: cannot read the data of '%s'", path);
			goto fail;
		}
		if (swap)
			swap_bytes(out->data, out->nelem,
			           out->nbytes / (out->nelem ? out->nelem : 1));
	}
	free(head);
	close(fd);
	return OQ_OK;
fail:
	free(head);
	close(fd);
	oq_npy_free(out);
	return rc;
}

/* ---------------------------------------------------------------- writing */

int oq_npy_header(int dtype, int rank, const int64_t *dims, char *buf, size_t cap, size_t *len)
{
	const char *descr = oq_npy_descr(dtype);
	size_t n, total, pre;
	int w;

	if (!descr)
		return OQ_EUNSUP;
	if (rank < 0 || rank > OQ_MAX_RANK)
		return OQ_EINVAL;
	if (cap < 128)
		return OQ_EINVAL;
	/* text first, at offset 12 (room for the v2 prefix); moved for v1 */
	w = snprintf(buf + 12, cap - 12, "{'descr': '%s', 'fortran_order': False, 'shape': (",
	             descr);
	if (w < 0 || (size_t)w >= cap - 12)
		return OQ_EINVAL;
	n = 12 + (size_t)w;
	for (int i = 0; i < rank; i++) {
		w = snprintf(buf + n, cap - n, "%s%lld%s", i ? " " : "", (long long)dims[i],
		             rank == 1 || i + 1 < rank ? "," : "");
		if (w < 0 || (size_t)w >= cap - n)
			return OQ_EINVAL;
		n += (size_t)w;
	}
	w = snprintf(buf + n, cap - n, "), }");
	if (w < 0 || (size_t)w >= cap - n)
		return OQ_EINVAL;
	n += (size_t)w;
	n -= 12; /* header text length without padding and '\n' */
	/* numpy pads so that the data starts at a multiple of 64; v2 only when v1's 16-bit length
	 * overflows */
	pre = 10;
	total = (pre + n + 1 + 63) / 64 * 64;
	if (total - pre > 65535) {
		pre = 12;
		total = (pre + n + 1 + 63) / 64 * 64;
	}
	if (total > cap)
		return OQ_EINVAL;
	memmove(buf + pre, buf + 12, n);
	memset(buf + pre + n, ' ', total - pre - n - 1);
	buf[total - 1] = '\n';
	memcpy(buf, magic, sizeof magic);
	buf[6] = (char)(pre == 10 ? 1 : 2);
	buf[7] = 0;
	{
		size_t h = total - pre;
		buf[8] = (char)(h & 0xff);
		buf[9] = (char)(h >> 8 & 0xff);
		if (pre == 12) {
			buf[10] = (char)(h >> 16 & 0xff);
			buf[11] = (char)(h >> 24 & 0xff);
		}
	}
	*len = total;
	return OQ_OK;
}

int oq_npy_write(const char *path, int dtype, int rank, const int64_t *dims, const void *data,
                 size_t nbytes, oq_diag *d)
{
	char *head = NULL;
	size_t hcap, hlen, nelem, want;
	oq_outfile f;
	int rc, e;

	if (!oq_npy_descr(dtype))
		return oq_err(d, OQ_EUNSUP, "npy: %s: element type %s has no .npy equivalent", path,
		              oq_dtype_name(dtype));
	if (rank < 0 || rank > OQ_MAX_RANK || oq_shape_size(dtype, rank, dims, &nelem, &want) ||
	    want != nbytes)
		return oq_err(d, OQ_EINVAL, "npy: %s: data size does not match the shape", path);
	hcap = 256 + 24 * (size_t)rank;
	if (!(head = malloc(hcap)))
		return oq_err(d, OQ_ENOMEM, "npy: out of memory");
	if ((rc = oq_npy_header(dtype, rank, dims, head, hcap, &hlen))) {
		free(head);
		return oq_err(d, rc, "npy: %s: cannot format the header", path);
	}
	if ((rc = oq_out_open(&f, path, "npy", 0, d))) {
		free(head);
		return rc;
	}
	if ((e = oq_out_write_all(f.fd, head, hlen)) || (nbytes && (e = oq_out_write_all(f.fd, data, nbytes)))) {
		rc = oq_err(d, OQ_EIO, "npy: cannot write '%s': %s", path, strerror(e));
		oq_out_abort(&f);
	} else {
		rc = oq_out_commit(&f, "npy", d);
	}
	free(head);
	return rc;
}
