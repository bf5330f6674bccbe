/*
 * onnx_load.c - ONNX protobuf -> IR.
 *
 * Three steps:
 * 1. strip(): walk the wire format of the ModelProto along the paths that
 *    can hold tensors (model -> graph -> node -> attribute -> graph ...),
 *    checking every length against the bytes left and the nesting depth,
 *    and copy the message into a new buffer in which each non-empty
 *    TensorProto.raw_data is replaced by a 16-byte reference (offset,
 *    length) to the original mapping, stored under field number
 *    OQ_REF_FIELD. Tensor payloads are therefore never copied: the IR
 *    borrows them from the read-only file mapping.
 * 2. protobuf-c unpacks the stripped buffer (small: no tensor payloads).
 * 3. build the IR: values, nodes, attributes, tensors (raw_data reference,
 *    typed fields, or external data mapped after a path-traversal check).
 *
 * Functions and training_info are walked for depth but not stripped: they
 * stay verbatim in the protobuf and are written back as they were.
 * Everything read is untrusted: sizes are checked before any allocation.
 */
#include "src/io/onnx_io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx.pb-c.h"
#include "src/io/file.h"

/* Field number used for raw_data references; the largest legal number. */
#define OQ_REF_FIELD 536870911u
#define MAX_DEPTH 64

/* ---------------------------------------------------------------- wire walk */

enum {
	K_NONE, K_MODEL, K_GRAPH, K_NODE, K_ATTR, K_TENSOR, K_SPARSE, K_VINFO, K_TYPE,
	K_TSEQ, K_TMAP, K_TOPT, K_FUNC, K_TRAIN, K_RAW,
};

static const char *const kind_name[] = {
	"?", "ModelProto", "GraphProto", "NodeProto", "AttributeProto", "TensorProto",
	"SparseTensorProto", "ValueInfoProto", "TypeProto", "TypeProto.Sequence",
	"TypeProto.Map", "TypeProto.Optional", "FunctionProto", "TrainingInfoProto", "raw_data",
};

/* Which message kind field `f` of message kind `k` holds (wire type 2). */
static int child_kind(int k, uint32_t f)
{
	switch (k) {
	case K_MODEL: return f == 7 ? K_GRAPH : f == 20 ? K_TRAIN : f == 25 ? K_FUNC : K_NONE;
	case K_TRAIN: return (f == 1 || f == 2) ? K_GRAPH : K_NONE;
	case K_FUNC: return f == 7 ? K_NODE : f == 11 ? K_ATTR : f == 12 ? K_VINFO : K_NONE;
	case K_GRAPH:
		if (f == 1) return K_NODE;
		if (f == 5) return K_TENSOR;
		if (f == 15) return K_SPARSE;
		if (f == 11 || f == 12 || f == 13) return K_VINFO;
		return K_NONE;
	case K_NODE: return f == 5 ? K_ATTR : K_NONE;
	case K_ATTR:
		if (f == 5 || f == 10) return K_TENSOR;
		if (f == 6 || f == 11) return K_GRAPH;
		if (f == 22 || f == 23) return K_SPARSE;
		if (f == 14 || f == 15) return K_TYPE;
		return K_NONE;
	case K_SPARSE: return (f == 1 || f == 2) ? K_TENSOR : K_NONE;
	case K_VINFO: return f == 2 ? K_TYPE : K_NONE;
	case K_TYPE: return f == 4 ? K_TSEQ : f == 5 ? K_TMAP : f == 9 ? K_TOPT : K_NONE;
	case K_TSEQ: return f == 1 ? K_TYPE : K_NONE;
	case K_TMAP: return f == 2 ? K_TYPE : K_NONE;
	case K_TOPT: return f == 1 ? K_TYPE : K_NONE;
	case K_TENSOR: return f == 9 ? K_RAW : K_NONE;
	default: return K_NONE;
	}
}

typedef struct buf {
	uint8_t *p;
	size_t n, cap;
} buf;

static int buf_put(buf *b, const void *src, size_t n)
{
	size_t need;
	if (!oq_add_size(b->n, n, &need))
		return OQ_ENOMEM;
	if (need > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < need)
			cap = cap > SIZE_MAX / 2 ? need : cap * 2;
		uint8_t *np = realloc(b->p, cap);
		if (!np)
			return OQ_ENOMEM;
		b->p = np;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, src, n);
	b->n = need;
	return OQ_OK;
}

static int buf_varint(buf *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;
	do {
		tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return buf_put(b, tmp, n);
}

/* Reads a varint at p[*pos], n bytes total. 0 on success. */
static int get_varint(const uint8_t *p, size_t n, size_t *pos, uint64_t *out)
{
	uint64_t v = 0;
	for (unsigned shift = 0; shift < 70; shift += 7) {
		if (*pos >= n)
			return -1;
		uint8_t c = p[(*pos)++];
		if (shift == 63 && c > 1)
			return -1;
		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -1;
}

typedef struct walk {
	const uint8_t *base; /* start of the whole file (offsets in messages) */
	oq_diag *d;
	const char *file;
} walk;

static int strip(walk *w, const uint8_t *p, size_t n, int kind, int depth, int do_strip, buf *out)
{
	size_t pos = 0;
	int rc;

	if (depth > MAX_DEPTH)
		return oq_err(w->d, OQ_EINVAL,
			      "load: %s: messages nested deeper than %d levels at byte %zu: not a "
			      "model onnxq accepts",
			      w->file, MAX_DEPTH, (size_t)(p - w->base));
	while (pos < n) {
		size_t start = pos, len = 0, fpos;
		uint64_t tag, v;
		uint32_t field, wt;

		if (get_varint(p, n, &pos, &tag) || (tag >> 3) == 0 || (tag >> 3) > OQ_REF_FIELD)
			goto bad;
		field = (uint32_t)(tag >> 3);
		wt = (uint32_t)(tag & 7);
		switch (wt) {
		case 0:
			if (get_varint(p, n, &pos, &v))
				goto bad;
			break;
		case 1:
			if (n - pos < 8)
				goto trunc;
			pos += 8;
			break;
		case 5:
			if (n - pos < 4)
				goto trunc;
			pos += 4;
			break;
		case 2:
			if (get_varint(p, n, &pos, &v))
				goto bad;
			if (v > n - pos)
				goto trunc;
			len = (size_t)v;
			pos += len;
			break;
		default:
			goto bad;
		}
		fpos = pos - len;
		if (kind == K_TENSOR && field == OQ_REF_FIELD)
			continue; /* reserved for our references: never accepted from a file */
		int ck = wt == 2 ? child_kind(kind, field) : K_NONE;
		if (ck == K_RAW) {
			if (do_strip && len > 0) {
				uint8_t ref[16];
				uint64_t off = (uint64_t)(p + fpos - w->base), l = len;
				for (int i = 0; i < 8; i++) {
					ref[i] = (uint8_t)(off >> (8 * i));
					ref[8 + i] = (uint8_t)(l >> (8 * i));
				}
				if ((rc = buf_varint(out, ((uint64_t)OQ_REF_FIELD << 3) | 2)) ||
				    (rc = buf_varint(out, 16)) || (rc = buf_put(out, ref, 16)))
					return oq_err(w->d, rc, "load: out of memory");
				continue;
			}
		} else if (ck != K_NONE) {
			buf sub = {0};
			int sub_strip = do_strip && ck != K_FUNC && ck != K_TRAIN;
			rc = strip(w, p + fpos, len, ck, depth + 1, sub_strip, &sub);
			if (!rc && (rc = buf_varint(out, tag)) == 0 && (rc = buf_varint(out, sub.n)) == 0)
				rc = buf_put(out, sub.p, sub.n);
			free(sub.p);
			if (rc)
				return rc == OQ_ENOMEM ? oq_err(w->d, rc, "load: out of memory") : rc;
			continue;
		}
		if ((rc = buf_put(out, p + start, pos - start)))
			return oq_err(w->d, rc, "load: out of memory");
	}
	return OQ_OK;
trunc:
	return oq_err(w->d, OQ_EINVAL,
		      "load: %s: truncated or corrupt: a field of %s at byte %zu runs past the end "
		      "of its data; re-export or re-download the model",
		      w->file, kind_name[kind], (size_t)(p - w->base));
bad:
	return oq_err(w->d, OQ_EINVAL,
		      "load: %s: not a valid ONNX protobuf (malformed %s field at byte %zu); is this "
		      "an .onnx model file?",
		      w->file, kind_name[kind], (size_t)(p - w->base));
}

/* -------------------------------------------------------------- IR building */

typedef struct ctx {
	oq_model *m;
	oq_diag *d;
	const char *file;
	int allow_external;
} ctx;

static int nomem(ctx *c)
{
	return oq_err(c->d, OQ_ENOMEM, "load: %s: out of memory", c->file);
}

static char *dup_or_empty(const char *s)
{
	return oq_strdup(s ? s : "");
}

/* Finds our raw_data reference among a TensorProto's unknown fields. */
static int find_ref(const Onnx__TensorProto *tp, uint64_t *off, uint64_t *len)
{
	int found = 0;
	for (unsigned i = 0; i < tp->base.n_unknown_fields; i++) {
		const ProtobufCMessageUnknownField *u = &tp->base.unknown_fields[i];
		/* protobuf-c keeps the length prefix (one byte, 16) in data. */
		if (u->tag != OQ_REF_FIELD || u->wire_type != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED ||
		    u->len != 17 || u->data[0] != 16)
			continue;
		*off = *len = 0;
		for (int k = 7; k >= 0; k--) {
			*off = (*off << 8) | u->data[1 + k];
			*len = (*len << 8) | u->data[9 + k];
		}
		found = 1; /* the last occurrence wins, as in protobuf */
	}
	return found;
}

static int parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	if (!s || !*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return 0;
}

/* Maps (once) an external data file after checking it stays inside the model folder. */
static int map_external(ctx *c, const char *tname, const char *location, oq_mapping **out)
{
	oq_model *m = c->m;
	char *joined = NULL, *real = NULL, *realdir = NULL;
	int rc = OQ_OK, fd = -1;
	size_t dl;
	struct stat st;

	if (!c->allow_external || !m->dir)
		return oq_err(c->d, OQ_EINVAL,
			      "load: %s: tensor '%s' uses external data, which needs the model to be "
			      "loaded from a file",
			      c->file, tname);
	if (!location || !*location)
		return oq_err(c->d, OQ_EINVAL, "load: %s: tensor '%s': external data without a location",
			      c->file, tname);
	if (location[0] == '/' || location[0] == '\\')
		return oq_err(c->d, OQ_EINVAL,
			      "load: %s: tensor '%s': external data location '%s' is an absolute path; "
			      "refused (path traversal): keep data files beside the model",
			      c->file, tname, location);
	for (const char *s = location; *s;) {
		const char *e = s;
		while (*e && *e != '/' && *e != '\\')
			e++;
		if (e - s == 2 && s[0] == '.' && s[1] == '.')
			return oq_err(c->d, OQ_EINVAL,
				      "load: %s: tensor '%s': external data location '%s' contains '..'; "
				      "refused (path traversal): keep data files inside the model's folder",
				      c->file, tname, location);
		s = *e ? e + 1 : e;
	}
	dl = strlen(m->dir);
	joined = malloc(dl + strlen(location) + 2);
	if (!joined)
		return nomem(c);
	sprintf(joined, "%s/%s", m->dir, location);
	real = realpath(joined, NULL);
	{
		int e = errno;
		realdir = real ? realpath(m->dir, NULL) : NULL;
		if (real)
			e = errno;
		if (!real || !realdir) {
			rc = oq_err(c->d, OQ_EIO,
				    "load: %s: tensor '%s': cannot open external data file '%s': %s",
				    c->file, tname, joined, strerror(e));
			goto done;
		}
	}
	dl = strlen(realdir);
	if (strcmp(real, realdir) == 0) {
		rc = oq_err(c->d, OQ_EINVAL,
			    "load: %s: tensor '%s': external data location '%s' names the model's folder, "
			    "not a file; give the data file's name",
			    c->file, tname, location);
		goto done;
	}
	if (strncmp(real, realdir, dl) != 0 || (real[dl] != '/' && !(dl == 1 && realdir[0] == '/'))) {
		rc = oq_err(c->d, OQ_EINVAL,
			    "load: %s: tensor '%s': external data file '%s' resolves to '%s', outside "
			    "the model's folder; refused (path traversal through a symlink)",
			    c->file, tname, location, real);
		goto done;
	}
	for (size_t i = 1; i < m->n_maps; i++)
		if (m->maps[i].path && strcmp(m->maps[i].path, real) == 0) {
			*out = &m->maps[i];
			goto done;
		}
	fd = open(real, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block us */
	if (fd < 0 || fstat(fd, &st) != 0) {
		rc = oq_err(c->d, OQ_EIO, "load: %s: tensor '%s': cannot open external data file '%s': %s",
			    c->file, tname, real, strerror(errno));
		goto done;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = oq_err(c->d, OQ_EINVAL, "load: %s: tensor '%s': external data '%s' is not a regular file",
			    c->file, tname, real);
		goto done;
	}
	{
		oq_mapping *nm = realloc(m->maps, (m->n_maps + 1) * sizeof *nm);
		void *base = NULL;
		if (!nm) {
			rc = nomem(c);
			goto done;
		}
		m->maps = nm;
		if (st.st_size > 0) {
			base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
			if (base == MAP_FAILED) {
				rc = oq_err(c->d, OQ_EIO, "load: %s: cannot map external data '%s': %s", c->file,
					    real, strerror(errno));
				goto done;
			}
		}
		nm[m->n_maps].path = real;
		nm[m->n_maps].base = base;
		nm[m->n_maps].size = (size_t)st.st_size;
		nm[m->n_maps].mapped = base != NULL;
		real = NULL;
		*out = &nm[m->n_maps++];
	}
done:
	if (fd >= 0)
		close(fd);
	free(joined);
	free(real);
	free(realdir);
	return rc;
}

static int load_external(ctx *c, const Onnx__TensorProto *tp, oq_tensor *t)
{
	const char *location = NULL, *tname = t->name;
	uint64_t off = 0, len = 0;
	int has_len = 0, rc;
	oq_mapping *map = NULL;

	for (size_t i = 0; i < tp->n_external_data; i++) {
		const Onnx__StringStringEntryProto *e = tp->external_data[i];
		const char *k = e->key ? e->key : "";
		if (strcmp(k, "location") == 0) {
			location = e->value;
		} else if (strcmp(k, "offset") == 0) {
			if (parse_u64(e->value, &off))
				return oq_err(c->d, OQ_EINVAL,
					      "load: %s: tensor '%s': external data offset '%s' is not a "
					      "non-negative integer",
					      c->file, tname, e->value ? e->value : "");
		} else if (strcmp(k, "length") == 0) {
			if (parse_u64(e->value, &len))
				return oq_err(c->d, OQ_EINVAL,
					      "load: %s: tensor '%s': external data length '%s' is not a "
					      "non-negative integer",
					      c->file, tname, e->value ? e->value : "");
			has_len = 1;
		}
	}
	if (t->dtype == OQ_DT_STRING)
		return oq_err(c->d, OQ_EUNSUP, "load: %s: tensor '%s': string tensors in external data are not supported",
			      c->file, tname);
	if ((rc = map_external(c, tname, location, &map)))
		return rc;
	if (has_len && len != t->nbytes)
		return oq_err(c->d, OQ_EINVAL,
			      "load: %s: tensor '%s': external data length %llu does not match its "
			      "shape (%zu bytes)",
			      c->file, tname, (unsigned long long)len, t->nbytes);
	if (off > map->size || t->nbytes > map->size - off)
		return oq_err(c->d, OQ_EINVAL,
			      "load: %s: tensor '%s': external data [offset %llu, %zu bytes] goes past "
			      "the end of '%s' (%zu bytes); the data file is truncated or does not "
			      "belong to this model",
			      c->file, tname, (unsigned long long)off, t->nbytes, location, map->size);
	t->data = t->nbytes ? (const uint8_t *)map->base + off : NULL;
	t->external = 1;
	return OQ_OK;
}

static int bad_count(ctx *c, const oq_tensor *t, const char *field, size_t have, size_t want)
{
	return oq_err(c->d, OQ_EINVAL,
		      "load: %s: tensor '%s' (%s) has %zu values in %s but its shape needs %zu; the "
		      "tensor data is truncated or does not match its dims",
		      c->file, t->name, oq_dtype_name(t->dtype), have, field, want);
}

/* Decodes the typed storage fields into an owned buffer. */
static int load_typed(ctx *c, const Onnx__TensorProto *tp, oq_tensor *t)
{
	int bits = oq_dtype_bits(t->dtype);
	uint8_t *dst;
	size_t n = t->nelem;

	if (t->dtype == OQ_DT_STRING) {
		if (tp->n_string_data != n)
			return bad_count(c, t, "string_data", tp->n_string_data, n);
		t->strs = oq_calloc(n, sizeof *t->strs);
		if (!t->strs)
			return nomem(c);
		for (size_t i = 0; i < n; i++) {
			size_t l = tp->string_data[i].len;
			t->strs[i].p = malloc(l + 1);
			if (!t->strs[i].p)
				return nomem(c);
			if (l)
				memcpy(t->strs[i].p, tp->string_data[i].data, l);
			t->strs[i].p[l] = '\0';
			t->strs[i].len = l;
		}
		return OQ_OK;
	}
	if (n == 0) /* empty tensor: no storage at all is fine */
		return OQ_OK;
	/* Counts are checked before allocating, so a lying header cannot make us allocate. */
	switch (t->dtype) {
	case OQ_DT_FLOAT:
	case OQ_DT_COMPLEX64:
		if (tp->n_float_data != t->nbytes / 4)
			return bad_count(c, t, "float_data", tp->n_float_data, t->nbytes / 4);
		break;
	case OQ_DT_DOUBLE:
	case OQ_DT_COMPLEX128:
		if (tp->n_double_data != t->nbytes / 8)
			return bad_count(c, t, "double_data", tp->n_double_data, t->nbytes / 8);
		break;
	case OQ_DT_INT64:
		if (tp->n_int64_data != n)
			return bad_count(c, t, "int64_data", tp->n_int64_data, n);
		break;
	case OQ_DT_UINT32:
	case OQ_DT_UINT64:
		if (tp->n_uint64_data != n)
			return bad_count(c, t, "uint64_data", tp->n_uint64_data, n);
		break;
	default:
		/* One int32 per element, or per packed byte for 4- and 2-bit types. */
		if (tp->n_int32_data != (bits < 8 ? t->nbytes : n))
			return bad_count(c, t, "int32_data", tp->n_int32_data, bits < 8 ? t->nbytes : n);
		break;
	}
	dst = aligned_alloc(64, (t->nbytes + 63) / 64 * 64 + 64);
	if (!dst)
		return nomem(c);
	t->data = dst;
	t->owned = 1;
	switch (t->dtype) {
	case OQ_DT_FLOAT:
	case OQ_DT_COMPLEX64:
		memcpy(dst, tp->float_data, t->nbytes);
		break;
	case OQ_DT_DOUBLE:
	case OQ_DT_COMPLEX128:
		memcpy(dst, tp->double_data, t->nbytes);
		break;
	case OQ_DT_INT64:
		memcpy(dst, tp->int64_data, t->nbytes);
		break;
	case OQ_DT_UINT64:
		memcpy(dst, tp->uint64_data, t->nbytes);
		break;
	case OQ_DT_UINT32:
		for (size_t i = 0; i < n; i++) {
			uint32_t v = (uint32_t)tp->uint64_data[i];
			memcpy(dst + 4 * i, &v, 4);
		}
		break;
	case OQ_DT_INT32:
		memcpy(dst, tp->int32_data, t->nbytes);
		break;
	default:
		if (bits == 16) {
			for (size_t i = 0; i < n; i++) {
				uint16_t v = (uint16_t)tp->int32_data[i];
				memcpy(dst + 2 * i, &v, 2);
			}
		} else if (bits == 8) {
			for (size_t i = 0; i < n; i++)
				dst[i] = (uint8_t)tp->int32_data[i];
		} else {
			for (size_t i = 0; i < t->nbytes; i++)
				dst[i] = (uint8_t)tp->int32_data[i];
		}
		break;
	}
	return OQ_OK;
}

static int load_tensor(ctx *c, const Onnx__TensorProto *tp, oq_tensor **out)
{
	oq_tensor *t = calloc(1, sizeof *t);
	uint64_t off, len;
	int rc;

	*out = NULL;
	if (!t)
		return nomem(c);
	t->src = tp;
	t->name = dup_or_empty(tp->name);
	if (!t->name) {
		rc = nomem(c);
		goto fail;
	}
	t->dtype = tp->has_data_type ? tp->data_type : 0;
	if (!oq_dtype_valid(t->dtype)) {
		rc = oq_err(c->d, OQ_EINVAL,
			    "load: %s: tensor '%s' has data_type %d, which is not an ONNX element type",
			    c->file, t->name, t->dtype);
		goto fail;
	}
	if (tp->n_dims > OQ_MAX_RANK) {
		rc = oq_err(c->d, OQ_EINVAL, "load: %s: tensor '%s' has rank %zu (at most %d supported)",
			    c->file, t->name, tp->n_dims, OQ_MAX_RANK);
		goto fail;
	}
	t->rank = (int)tp->n_dims;
	t->dims = oq_calloc(tp->n_dims, sizeof *t->dims);
	if (!t->dims) {
		rc = nomem(c);
		goto fail;
	}
	if (tp->n_dims)
		memcpy(t->dims, tp->dims, tp->n_dims * sizeof *t->dims);
	if (oq_shape_size(t->dtype, t->rank, t->dims, &t->nelem, &t->nbytes)) {
		rc = oq_err(c->d, OQ_EINVAL,
			    "load: %s: tensor '%s' has negative dims or a size that overflows; the "
			    "file is corrupt",
			    c->file, t->name);
		goto fail;
	}
	if (tp->segment) {
		rc = oq_err(c->d, OQ_EUNSUP, "load: %s: tensor '%s' is segmented; segmented tensors are not supported",
			    c->file, t->name);
		goto fail;
	}
	if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
		rc = load_external(c, tp, t);
	} else if (find_ref(tp, &off, &len)) {
		const oq_mapping *map = &c->m->maps[0];
		if (t->dtype == OQ_DT_STRING) {
			rc = oq_err(c->d, OQ_EINVAL, "load: %s: string tensor '%s' uses raw_data, which the spec forbids",
				    c->file, t->name);
		} else if (len != t->nbytes) {
			rc = oq_err(c->d, OQ_EINVAL,
				    "load: %s: tensor '%s' (%s) has %llu bytes of raw_data but its dims "
				    "need %zu; the tensor data is truncated or does not match its shape",
				    c->file, t->name, oq_dtype_name(t->dtype), (unsigned long long)len,
				    t->nbytes);
		} else if (off > map->size || len > map->size - off) {
			rc = oq_err(c->d, OQ_EINVAL, "load: %s: tensor '%s': raw_data out of bounds", c->file, t->name);
		} else {
			t->data = (const uint8_t *)map->base + off;
			rc = OQ_OK;
		}
	} else if (tp->has_raw_data) {
		/* Only empty raw_data stays in a stripped message; the data lives with the proto. */
		rc = tp->raw_data.len == t->nbytes && t->dtype != OQ_DT_STRING
			     ? OQ_OK
			     : oq_err(c->d, OQ_EINVAL,
				      "load: %s: tensor '%s' has %zu bytes of raw_data but its dims need %zu",
				      c->file, t->name, tp->raw_data.len, t->nbytes);
		if (!rc)
			t->data = t->nbytes ? tp->raw_data.data : NULL;
	} else {
		rc = load_typed(c, tp, t);
	}
	if (rc)
		goto fail;
	*out = t;
	return OQ_OK;
fail:
	oq_tensor_free(t);
	return rc;
}

static int load_sparse(ctx *c, const Onnx__SparseTensorProto *sp, oq_sparse **out)
{
	oq_sparse *s = calloc(1, sizeof *s);
	int rc = OQ_OK;

	*out = NULL;
	if (!s)
		return nomem(c);
	s->src = sp;
	if (sp->n_dims > OQ_MAX_RANK) {
		rc = oq_err(c->d, OQ_EINVAL, "load: %s: sparse tensor of rank %zu", c->file, sp->n_dims);
		goto fail;
	}
	s->rank = (int)sp->n_dims;
	s->dims = oq_calloc(sp->n_dims, sizeof *s->dims);
	if (!s->dims) {
		rc = nomem(c);
		goto fail;
	}
	if (sp->n_dims)
		memcpy(s->dims, sp->dims, sp->n_dims * sizeof *s->dims);
	if (sp->values && (rc = load_tensor(c, sp->values, &s->values)))
		goto fail;
	if (sp->indices && (rc = load_tensor(c, sp->indices, &s->indices)))
		goto fail;
	*out = s;
	return OQ_OK;
fail:
	if (s->values)
		oq_tensor_free(s->values);
	free(s->dims);
	free(s);
	return rc;
}

static int load_type(ctx *c, const char *name, const Onnx__TypeProto *tp, oq_type *ty)
{
	const Onnx__TensorShapeProto *shape = NULL;

	ty->kind = OQ_TYPE_NONE;
	ty->rank = -1;
	if (!tp)
		return OQ_OK;
	switch (tp->value_case) {
	case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE:
		ty->kind = OQ_TYPE_TENSOR;
		ty->dtype = tp->tensor_type->has_elem_type ? tp->tensor_type->elem_type : 0;
		shape = tp->tensor_type->shape;
		break;
	case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE:
		ty->kind = OQ_TYPE_SPARSE;
		ty->dtype = tp->sparse_tensor_type->has_elem_type ? tp->sparse_tensor_type->elem_type : 0;
		shape = tp->sparse_tensor_type->shape;
		break;
	case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE: ty->kind = OQ_TYPE_SEQUENCE; return OQ_OK;
	case ONNX__TYPE_PROTO__VALUE_MAP_TYPE: ty->kind = OQ_TYPE_MAP; return OQ_OK;
	case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE: ty->kind = OQ_TYPE_OPTIONAL; return OQ_OK;
	case ONNX__TYPE_PROTO__VALUE__NOT_SET: return OQ_OK;
	default: ty->kind = OQ_TYPE_OTHER; return OQ_OK;
	}
	if (!shape)
		return OQ_OK;
	if (shape->n_dim > OQ_MAX_RANK)
		return oq_err(c->d, OQ_EINVAL, "load: %s: value '%s' declares rank %zu (at most %d)", c->file,
			      name, shape->n_dim, OQ_MAX_RANK);
	ty->dims = oq_calloc(shape->n_dim, sizeof *ty->dims);
	if (!ty->dims)
		return nomem(c);
	ty->rank = (int)shape->n_dim;
	for (size_t i = 0; i < shape->n_dim; i++) {
		const Onnx__TensorShapeProto__Dimension *dm = shape->dim[i];
		ty->dims[i].value = -1;
		if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
			ty->dims[i].value = dm->dim_value;
		else if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
			 !(ty->dims[i].param = oq_strdup(dm->dim_param ? dm->dim_param : "")))
			return nomem(c);
	}
	return OQ_OK;
}

/* Looks `name` up in g, then in the enclosing graphs; creates an outer link or a dangling value. */
static oq_value *resolve(oq_graph *g, const char *name)
{
	oq_value *v = oq_graph_find(g, name);
	if (v)
		return v;
	for (oq_graph *p = g->parent; p; p = p->parent) {
		oq_value *o = oq_graph_find(p, name);
		if (o) {
			v = oq_graph_value(g, name);
			if (v) {
				v->flags |= OQ_V_OUTER;
				v->outer = o;
			}
			return v;
		}
	}
	return oq_graph_value(g, name);
}

static int load_graph(ctx *c, oq_graph *g, const Onnx__GraphProto *gp);

static int load_attr(ctx *c, oq_graph *g, oq_node *n, const Onnx__AttributeProto *ap, oq_attr *a)
{
	int rc;

	a->src = ap;
	if (!(a->name = dup_or_empty(ap->name)))
		return nomem(c);
	a->type = ap->has_type ? (int)ap->type : OQ_ATTR_UNDEFINED;
	if (a->type == OQ_ATTR_UNDEFINED) { /* IR 1: infer from the field in use */
		if (ap->has_f) a->type = OQ_ATTR_FLOAT;
		else if (ap->has_i) a->type = OQ_ATTR_INT;
		else if (ap->has_s) a->type = OQ_ATTR_STRING;
		else if (ap->t) a->type = OQ_ATTR_TENSOR;
		else if (ap->g) a->type = OQ_ATTR_GRAPH;
		else if (ap->n_floats) a->type = OQ_ATTR_FLOATS;
		else if (ap->n_ints) a->type = OQ_ATTR_INTS;
		else if (ap->n_strings) a->type = OQ_ATTR_STRINGS;
		else if (ap->n_tensors) a->type = OQ_ATTR_TENSORS;
		else if (ap->n_graphs) a->type = OQ_ATTR_GRAPHS;
	}
	a->f = ap->f;
	a->i = ap->i;
	/* A STRING attribute always has a NUL-terminated s.p: a file that declares
	 * the type but omits the field reads as the empty string. */
	if (ap->has_s || a->type == OQ_ATTR_STRING) {
		a->s.p = malloc(ap->s.len + 1);
		if (!a->s.p)
			return nomem(c);
		if (ap->s.len)
			memcpy(a->s.p, ap->s.data, ap->s.len);
		a->s.p[ap->s.len] = '\0';
		a->s.len = ap->s.len;
	}
	if (ap->t && (rc = load_tensor(c, ap->t, &a->t)))
		return rc;
	if (ap->sparse_tensor && (rc = load_sparse(c, ap->sparse_tensor, &a->sp)))
		return rc;
	if (ap->g) {
		if (!(a->g = oq_graph_new(c->m, g)))
			return nomem(c);
		if ((rc = load_graph(c, a->g, ap->g)))
			return rc;
	}
	/* List fields: at most one is meaningful; `n` is the count of the typed one. */
	switch (a->type) {
	case OQ_ATTR_FLOATS:
		a->n = ap->n_floats;
		if (!(a->floats = oq_calloc(a->n, sizeof *a->floats)))
			return nomem(c);
		if (a->n)
			memcpy(a->floats, ap->floats, a->n * sizeof *a->floats);
		break;
	case OQ_ATTR_INTS:
		a->n = ap->n_ints;
		if (!(a->ints = oq_calloc(a->n, sizeof *a->ints)))
			return nomem(c);
		if (a->n)
			memcpy(a->ints, ap->ints, a->n * sizeof *a->ints);
		break;
	case OQ_ATTR_STRINGS:
		a->n = ap->n_strings;
		if (!(a->strings = oq_calloc(a->n, sizeof *a->strings)))
			return nomem(c);
		for (size_t i = 0; i < a->n; i++) {
			if (!(a->strings[i].p = malloc(ap->strings[i].len + 1)))
				return nomem(c);
			if (ap->strings[i].len)
				memcpy(a->strings[i].p, ap->strings[i].data, ap->strings[i].len);
			a->strings[i].p[ap->strings[i].len] = '\0';
			a->strings[i].len = ap->strings[i].len;
		}
		break;
	case OQ_ATTR_TENSORS:
		a->n = ap->n_tensors;
		if (!(a->tensors = oq_calloc(a->n, sizeof *a->tensors)))
			return nomem(c);
		for (size_t i = 0; i < a->n; i++)
			if ((rc = load_tensor(c, ap->tensors[i], &a->tensors[i])))
				return rc;
		break;
	case OQ_ATTR_GRAPHS:
		a->n = ap->n_graphs;
		if (!(a->graphs = oq_calloc(a->n, sizeof *a->graphs)))
			return nomem(c);
		for (size_t i = 0; i < a->n; i++) {
			if (!(a->graphs[i] = oq_graph_new(c->m, g)))
				return nomem(c);
			if ((rc = load_graph(c, a->graphs[i], ap->graphs[i])))
				return rc;
		}
		break;
	case OQ_ATTR_SPARSE_TENSORS:
		a->n = ap->n_sparse_tensors;
		if (!(a->sparses = oq_calloc(a->n, sizeof *a->sparses)))
			return nomem(c);
		for (size_t i = 0; i < a->n; i++)
			if ((rc = load_sparse(c, ap->sparse_tensors[i], &a->sparses[i])))
				return rc;
		break;
	default:
		break;
	}
	/* Tensor-bearing list fields that do not match the type would lose their
	 * payload on save (it was stripped); such attributes are malformed anyway. */
	if ((a->type != OQ_ATTR_TENSORS && ap->n_tensors) ||
	    (a->type != OQ_ATTR_SPARSE_TENSORS && ap->n_sparse_tensors) ||
	    (a->type != OQ_ATTR_GRAPHS && ap->n_graphs))
		return oq_err(c->d, OQ_EINVAL,
			      "load: %s: node '%s' (%s): attribute '%s' of type %s also holds "
			      "tensors or graphs of another type; the model is malformed",
			      c->file, n->name, n->op_type, a->name, oq_attr_type_name(a->type));
	return OQ_OK;
}

static int add_list(oq_value ***list, size_t *n, oq_value *v)
{
	oq_value **nl = realloc(*list, (*n + 1) * sizeof *nl);
	if (!nl)
		return OQ_ENOMEM;
	nl[(*n)++] = v;
	*list = nl;
	return OQ_OK;
}

static int load_vinfo(ctx *c, oq_value *v, const Onnx__ValueInfoProto *vi)
{
	if (v->vinfo)
		return OQ_OK; /* first declaration wins (input before value_info) */
	v->vinfo = vi;
	return load_type(c, v->name, vi->type, &v->type);
}

static int load_graph(ctx *c, oq_graph *g, const Onnx__GraphProto *gp)
{
	int rc;

	g->src = gp;
	free(g->name);
	if (!(g->name = dup_or_empty(gp->name)))
		return nomem(c);
	/* Phase 1: everything this scope defines. */
	for (size_t i = 0; i < gp->n_initializer; i++) {
		const Onnx__TensorProto *tp = gp->initializer[i];
		oq_value *v;
		oq_tensor *t;
		if ((rc = load_tensor(c, tp, &t)))
			return rc;
		if (!*t->name) {
			oq_tensor_free(t);
			return oq_err(c->d, OQ_EINVAL, "load: %s: graph '%s': initializer #%zu has no name",
				      c->file, g->name, i);
		}
		v = oq_graph_value(g, t->name);
		if (!v) {
			oq_tensor_free(t);
			return nomem(c);
		}
		if (v->init) {
			oq_tensor_free(t);
			return oq_err(c->d, OQ_EINVAL,
				      "load: %s: graph '%s': initializer '%s' is defined twice; rename or "
				      "remove one",
				      c->file, g->name, v->name);
		}
		v->init = t;
		if (add_list(&g->inits, &g->n_inits, v))
			return nomem(c);
	}
	for (size_t i = 0; i < gp->n_sparse_initializer; i++) {
		oq_sparse *s;
		oq_sparse **ns;
		char **nn;
		if ((rc = load_sparse(c, gp->sparse_initializer[i], &s)))
			return rc;
		ns = realloc(g->sparse_inits, (g->n_sparse + 1) * sizeof *ns);
		if (ns)
			g->sparse_inits = ns;
		nn = realloc(g->sparse_names, (g->n_sparse + 1) * sizeof *nn);
		if (nn)
			g->sparse_names = nn;
		if (!ns || !nn) {
			oq_tensor_free(s->values);
			oq_tensor_free(s->indices);
			free(s->dims);
			free(s);
			return nomem(c);
		}
		ns[g->n_sparse] = s;
		nn[g->n_sparse] = oq_strdup(s->values ? s->values->name : "");
		g->n_sparse++;
		if (!nn[g->n_sparse - 1])
			return nomem(c);
		/* The sparse initializer defines a value of its (values) name. */
		if (s->values && *s->values->name && !oq_graph_value(g, s->values->name))
			return nomem(c);
	}
	for (size_t i = 0; i < gp->n_input; i++) {
		oq_value *v = oq_graph_value(g, gp->input[i]->name ? gp->input[i]->name : "");
		if (!v || add_list(&g->inputs, &g->n_inputs, v))
			return nomem(c);
		v->flags |= OQ_V_INPUT;
		if ((rc = load_vinfo(c, v, gp->input[i])))
			return rc;
	}
	for (size_t i = 0; i < gp->n_node; i++) {
		const Onnx__NodeProto *np = gp->node[i];
		oq_node *n = oq_graph_add_node(g, np->op_type, np->domain, np->name);
		if (!n)
			return nomem(c);
		n->src = np;
		n->outputs = oq_calloc(np->n_output, sizeof *n->outputs);
		if (!n->outputs)
			return nomem(c);
		n->n_outputs = np->n_output;
		for (size_t k = 0; k < np->n_output; k++) {
			const char *on = np->output[k] ? np->output[k] : "";
			if (*on && !(n->outputs[k] = oq_graph_value(g, on)))
				return nomem(c);
		}
	}
	/* Phase 2: uses, attributes (subgraphs see this scope complete), outputs. */
	for (size_t i = 0; i < gp->n_node; i++) {
		const Onnx__NodeProto *np = gp->node[i];
		oq_node *n = g->nodes[i];
		n->inputs = oq_calloc(np->n_input, sizeof *n->inputs);
		if (!n->inputs)
			return nomem(c);
		n->n_inputs = np->n_input;
		for (size_t k = 0; k < np->n_input; k++) {
			const char *in = np->input[k] ? np->input[k] : "";
			if (*in && !(n->inputs[k] = resolve(g, in)))
				return nomem(c);
		}
		n->attrs = oq_calloc(np->n_attribute, sizeof *n->attrs);
		if (!n->attrs)
			return nomem(c);
		n->n_attrs = np->n_attribute;
		for (size_t k = 0; k < np->n_attribute; k++)
			if ((rc = load_attr(c, g, n, np->attribute[k], &n->attrs[k])))
				return rc;
	}
	for (size_t i = 0; i < gp->n_output; i++) {
		oq_value *v = resolve(g, gp->output[i]->name ? gp->output[i]->name : "");
		if (!v || add_list(&g->outputs, &g->n_outputs, v))
			return nomem(c);
		v->flags |= OQ_V_OUTPUT;
		if ((rc = load_vinfo(c, v, gp->output[i])))
			return rc;
	}
	for (size_t i = 0; i < gp->n_value_info; i++) {
		oq_value *v = resolve(g, gp->value_info[i]->name ? gp->value_info[i]->name : "");
		if (!v || add_list(&g->vinfos, &g->n_vinfos, v))
			return nomem(c);
		v->flags |= OQ_V_VINFO;
		if ((rc = load_vinfo(c, v, gp->value_info[i])))
			return rc;
	}
	return OQ_OK;
}

/*
 * protobuf-c keeps unknown fields of messages strip() does not walk; one
 * with field number 0 (a multi-byte tag protobuf-c lets through) could not
 * be written back. Refuse such files here, walking every sub-message.
 */
static int bad_unknown(const ProtobufCMessage *msg, int depth)
{
	const ProtobufCMessageDescriptor *desc = msg->descriptor;

	if (depth > 2 * MAX_DEPTH)
		return 1;
	for (unsigned i = 0; i < msg->n_unknown_fields; i++)
		if (msg->unknown_fields[i].tag == 0)
			return 1;
	for (unsigned f = 0; f < desc->n_fields; f++) {
		const ProtobufCFieldDescriptor *fd = &desc->fields[f];
		const char *base = (const char *)msg;
		if (fd->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)(base + fd->quantifier_offset);
			ProtobufCMessage *const *arr = *(ProtobufCMessage *const *const *)(base + fd->offset);
			for (size_t k = 0; k < n; k++)
				if (arr[k] && bad_unknown(arr[k], depth + 1))
					return 1;
		} else {
			const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)(base + fd->offset);
			if ((fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
			    *(const uint32_t *)(base + fd->quantifier_offset) != fd->id)
				continue;
			if (sub && bad_unknown(sub, depth + 1))
				return 1;
		}
	}
	return 0;
}

static void free_proto(void *p)
{
	onnx__model_proto__free_unpacked(p, NULL);
}

static int build(ctx *c, const uint8_t *bytes, size_t len)
{
	oq_model *m = c->m;
	walk w = {bytes, c->d, c->file};
	buf sb = {0};
	Onnx__ModelProto *mp;
	int rc;

	if (len == 0)
		return oq_err(c->d, OQ_EINVAL, "load: %s: empty file; not an ONNX model", c->file);
	if ((rc = strip(&w, bytes, len, K_MODEL, 0, 1, &sb))) {
		free(sb.p);
		return rc;
	}
	mp = onnx__model_proto__unpack(NULL, sb.n, sb.p);
	if (!mp) {
		free(sb.p);
		return oq_err(c->d, OQ_EINVAL,
			      "load: %s: not a valid ONNX model (protobuf fields of the wrong type or "
			      "invalid values); re-export it",
			      c->file);
	}
	m->proto = mp;
	m->free_proto = free_proto;
	m->stripped = sb.p; /* unknown fields may point into it: keep until free */
	if (bad_unknown(&mp->base, 0))
		return oq_err(c->d, OQ_EINVAL,
			      "load: %s: not a valid ONNX protobuf (a field with number 0); is this an "
			      ".onnx model file?",
			      c->file);
	if (!mp->has_ir_version)
		return oq_err(c->d, OQ_EINVAL, "load: %s: ModelProto has no ir_version; not an ONNX model",
			      c->file);
	m->ir_version = mp->ir_version;
	if (m->ir_version < 3)
		return oq_err(c->d, OQ_EUNSUP,
			      "load: %s: IR version %lld is older than 3 (no opset imports); convert "
			      "it with a newer ONNX first",
			      c->file, (long long)m->ir_version);
	if (!mp->graph)
		return oq_err(c->d, OQ_EINVAL, "load: %s: ModelProto has no graph", c->file);
	m->opsets = oq_calloc(mp->n_opset_import, sizeof *m->opsets);
	if (!m->opsets)
		return nomem(c);
	for (size_t i = 0; i < mp->n_opset_import; i++) {
		m->opsets[i].src = mp->opset_import[i];
		m->opsets[i].version = mp->opset_import[i]->version;
		if (!(m->opsets[i].domain = dup_or_empty(mp->opset_import[i]->domain)))
			return nomem(c);
		m->n_opsets++;
	}
	if (!(m->producer_name = dup_or_empty(mp->producer_name)) ||
	    !(m->producer_version = dup_or_empty(mp->producer_version)))
		return nomem(c);
	m->n_functions = mp->n_functions;
	m->n_training = mp->n_training_info;
	if (!(m->graph = oq_graph_new(m, NULL)))
		return nomem(c);
	if ((rc = load_graph(c, m->graph, mp->graph)))
		return rc;
	return oq_graph_rebuild_uses(m->graph) ? nomem(c) : OQ_OK;
}

int oq_model_load_buffer(const void *bytes, size_t len, const char *dir, oq_model **out, oq_diag *d)
{
	ctx c = {0};
	int rc;

	*out = NULL;
	c.d = d;
	c.file = "<buffer>";
	c.m = oq_model_new();
	if (!c.m || !(c.m->maps = calloc(1, sizeof *c.m->maps))) {
		oq_model_free(c.m);
		return oq_err(d, OQ_ENOMEM, "load: out of memory");
	}
	c.m->n_maps = 1;
	c.m->maps[0].base = (void *)bytes;
	c.m->maps[0].size = len;
	if (dir) {
		c.allow_external = 1;
		if (!(c.m->dir = oq_strdup(dir))) {
			oq_model_free(c.m);
			return oq_err(d, OQ_ENOMEM, "load: out of memory");
		}
	}
	rc = build(&c, bytes, len);
	if (rc) {
		oq_model_free(c.m);
		return rc;
	}
	*out = c.m;
	return OQ_OK;
}

int oq_model_load(const char *path, oq_model **out, oq_diag *d)
{
	ctx c = {0};
	struct stat st;
	int fd, rc;
	void *base = NULL;
	char *slash;

	*out = NULL;
	if ((fd = oq_file_open(path, "load", OQ_EIO, &st, d)) < 0)
		return fd;
	if (st.st_size > 0) {
		base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (base == MAP_FAILED) {
			rc = errno;
			close(fd);
			return oq_err(d, OQ_EIO, "load: cannot map '%s': %s", path, strerror(rc));
		}
	}
	close(fd);
	c.d = d;
	c.file = path;
	c.allow_external = 1;
	c.m = oq_model_new();
	if (!c.m || !(c.m->maps = calloc(1, sizeof *c.m->maps)) || !(c.m->path = oq_strdup(path)) ||
	    !(c.m->dir = oq_strdup(path)) || !(c.m->maps[0].path = oq_strdup(path))) {
		if (c.m && c.m->maps)
			c.m->n_maps = 1;
		oq_model_free(c.m);
		if (base)
			munmap(base, (size_t)st.st_size);
		return oq_err(d, OQ_ENOMEM, "load: out of memory");
	}
	c.m->n_maps = 1;
	c.m->maps[0].base = base;
	c.m->maps[0].size = (size_t)st.st_size;
	c.m->maps[0].mapped = base != NULL;
	slash = strrchr(c.m->dir, '/');
	if (!slash)
		strcpy(c.m->dir, ".");
	else if (slash == c.m->dir)
		slash[1] = '\0';
	else
		*slash = '\0';
	rc = build(&c, base, (size_t)st.st_size);
	if (rc) {
		oq_model_free(c.m);
		return rc;
	}
	*out = c.m;
	return OQ_OK;
}

int oq_tensor_load_pb(const void *bytes, size_t len, const char *what, oq_tensor **out, oq_diag *d)
{
	oq_model m;
	oq_mapping map;
	ctx c = {0};
	walk w;
	buf sb = {0};
	Onnx__TensorProto *tp;
	int rc;

	*out = NULL;
	memset(&m, 0, sizeof m);
	memset(&map, 0, sizeof map);
	map.base = (void *)bytes;
	map.size = len;
	m.maps = &map;
	m.n_maps = 1;
	c.m = &m;
	c.d = d;
	c.file = what;
	w.base = bytes;
	w.d = d;
	w.file = what;
	if ((rc = strip(&w, bytes, len, K_TENSOR, 0, 1, &sb))) {
		free(sb.p);
		return rc;
	}
	tp = onnx__tensor_proto__unpack(NULL, sb.n, sb.p);
	if (!tp) {
		free(sb.p);
		return oq_err(d, OQ_EINVAL, "load: %s: not a valid serialized TensorProto", what);
	}
	rc = load_tensor(&c, tp, out);
	if (!rc) {
		(*out)->src = NULL; /* the proto is freed below */
		rc = oq_tensor_own(*out);
		if (rc) {
			oq_tensor_free(*out);
			*out = NULL;
			rc = oq_err(d, rc, "load: %s: out of memory", what);
		}
	}
	onnx__tensor_proto__free_unpacked(tp, NULL);
	free(sb.p);
	return rc;
}
