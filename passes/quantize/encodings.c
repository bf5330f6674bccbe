/*
 * encodings.c - AIMET-style encodings files (format and limits in
 * encodings.h): collected from a quantized graph, written as JSON, read
 * back with cJSON, turned into quantize-pass overrides, and checked
 * against the model quantize produced.
 *
 * Mapping of one record to ONNX (x = (q - zp) * scale on q in [qmin, qmax],
 * AIMET x = (u + offset) * scale on u in [0, 2^b - 1], u = q - qmin):
 *   offset = qmin - zp      zp = qmin - offset
 *   min = offset * scale    max = (offset + 2^b - 1) * scale
 * Scales are printed with 9 significant digits, which identifies a float32
 * exactly, so export -> import gives back the same bits.
 *
 * The file is untrusted input: its size is capped, every member is
 * type-checked, integers are checked to be integral and in range, and
 * names are looked up in the model before the pass runs.
 */
#include "passes/quantize/encodings.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "passes/quantize/overrides.h"
#include "src/io/file.h"
#include "src/io/outfile.h"
#include "src/quant/qparams.h"

/* Per-channel encodings of a large model are big, but not this big. */
#define MAX_FILE ((size_t)1 << 30)

#define RKEYS "bitwidth, dtype, is_symmetric, scale, offset, min, max, onnx_type, axis, block_size"
#define VERSION "onnxq-encodings/1"

static void enc_clear(oq_encoding *x)
{
	free(x->name);
	free(x->scale);
	free(x->zp);
	memset(x, 0, sizeof *x);
}

void oq_encodings_free(oq_encodings *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < e->n; i++)
		enc_clear(&e->v[i]);
	free(e->v);
	e->v = NULL;
	e->n = 0;
}

/* The integer type with `bits` bits and that signedness; 0 when there is none. */
static int int_type(int bits, int is_signed)
{
	switch (bits) {
	case 4: return is_signed ? OQ_DT_INT4 : OQ_DT_UINT4;
	case 8: return is_signed ? OQ_DT_INT8 : OQ_DT_UINT8;
	case 16: return is_signed ? OQ_DT_INT16 : OQ_DT_UINT16;
	default: return 0;
	}
}

/* Full grid of an ONNX integer type (what DequantizeLinear accepts). */
static void grid(int dtype, int64_t *qmin, int64_t *qmax)
{
	if (!oq_qrange(dtype, 0, qmin, qmax))
		*qmin = *qmax = 0;
}

/* is_symmetric from zero points: 0 for signed types, the mid-point 2^(b-1)-1 for unsigned ones. */
static int zp_symmetric(int dtype, const int64_t *zp, size_t n)
{
	int64_t qmin, qmax, want;
	grid(dtype, &qmin, &qmax);
	want = qmin < 0 ? 0 : (qmax + 1) / 2 - 1;
	for (size_t i = 0; i < n; i++)
		if (zp[i] != want)
			return 0;
	return 1;
}

/* ------------------------------------------------------------ collect */

/* Same parameters (bitwise scales)? */
static int enc_same(const oq_encoding *a, const oq_encoding *b)
{
	if (a->dtype != b->dtype || a->axis != b->axis || a->block_size != b->block_size ||
	    a->n != b->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (memcmp(&a->scale[i], &b->scale[i], sizeof(float)) || a->zp[i] != b->zp[i])
			return 0;
	return 1;
}

static oq_encoding *enc_find(const oq_encodings *e, int is_param, const char *name)
{
	for (size_t i = 0; i < e->n; i++)
		if (e->v[i].is_param == is_param && strcmp(e->v[i].name, name) == 0)
			return &e->v[i];
	return NULL;
}

/* Appends *x (taken over, also on failure) unless an identical entry exists. */
static int enc_add(oq_encodings *e, size_t *cap, oq_encoding *x, oq_diag *d)
{
	oq_encoding *old = enc_find(e, x->is_param, x->name);
	if (old) {
		int same = enc_same(old, x);
		if (!same)
			(void)oq_err(d, OQ_EUNSUP,
			             "encodings: %s '%s' is quantized twice with different "
			             "parameters; an encodings file holds one set per tensor",
			             x->is_param ? "weight" : "tensor", x->name);
		enc_clear(x);
		return same ? OQ_OK : OQ_EUNSUP;
	}
	if (oq_grow(&e->v, cap, e->n + 1, sizeof *e->v)) {
		enc_clear(x);
		return oq_err(d, OQ_ENOMEM, "encodings: out of memory");
	}
	e->v[e->n++] = *x;
	memset(x, 0, sizeof *x);
	return OQ_OK;
}

/* "<w>_quantized" or "<w>_quantized_<digits>" (qweight.c's names) -> "<w>"; else a copy. */
static char *weight_name(const char *s)
{
	size_t len = strlen(s);
	const char *best = NULL;
	for (const char *p = strstr(s, "_quantized"); p; p = strstr(p + 1, "_quantized")) {
		const char *r = p + 10;
		int ok = !*r;
		if (*r == '_' && r[1]) {
			ok = 1;
			for (const char *t = r + 1; *t; t++)
				ok &= *t >= '0' && *t <= '9';
		}
		if (ok && p > s)
			best = p;
	}
	if (best)
		len = (size_t)(best - s);
	{
		char *o = malloc(len + 1);
		if (o) {
			memcpy(o, s, len);
			o[len] = 0;
		}
		return o;
	}
}

/*
 * Fills x's scales, zero points and axis from a Q or DQ node n (inputs
 * x, scale[, zp]) whose integer tensor has rank `rank` and type `qtype`.
 */
static int node_params(const oq_node *n, int qtype, int rank, oq_encoding *x, oq_diag *d)
{
	const oq_tensor *s = n->n_inputs > 1 && n->inputs[1] ? n->inputs[1]->init : NULL;
	const oq_tensor *z = n->n_inputs > 2 && n->inputs[2] ? n->inputs[2]->init : NULL;
	int64_t axis;

	if (!s || !s->nelem)
		return oq_err(d, OQ_EUNSUP,
		              "encodings: node '%s' (%s): its scale is not an initializer; "
		              "only constant quantization parameters can be exported",
		              n->name, n->op_type);
	if (z && z->nelem != s->nelem)
		return oq_err(d, OQ_EINVAL,
		              "encodings: node '%s' (%s): zero point and scale differ in size",
		              n->name, n->op_type);
	x->dtype = qtype;
	x->bitwidth = oq_dtype_bits(qtype);
	x->has_qparams = 1;
	x->n = s->nelem;
	x->block_size = oq_node_attr_int(n, "block_size", 0);
	axis = oq_node_attr_int(n, "axis", 1);
	if (axis < 0)
		axis += rank;
	if (s->rank == 0 || (s->nelem == 1 && x->block_size <= 0 && rank == 0))
		x->axis = -1;
	else if (axis < 0 || axis >= rank)
		return oq_err(d, OQ_EINVAL,
		              "encodings: node '%s' (%s): axis %lld is outside rank %d", n->name,
		              n->op_type, (long long)oq_node_attr_int(n, "axis", 1), rank);
	else
		x->axis = (int)axis;
	x->scale = oq_calloc(x->n, sizeof *x->scale);
	x->zp = oq_calloc(x->n, sizeof *x->zp);
	if (!x->scale || !x->zp)
		return oq_err(d, OQ_ENOMEM, "encodings: out of memory");
	for (size_t i = 0; i < x->n; i++) {
		x->scale[i] = (float)oq_tensor_get(s, i);
		x->zp[i] = z ? oq_tensor_get_int(z, i) : 0;
		if (!isfinite(x->scale[i]) || !(x->scale[i] > 0))
			return oq_err(d, OQ_EINVAL,
			              "encodings: node '%s' (%s): scale %g is not a finite "
			              "positive number",
			              n->name, n->op_type, (double)x->scale[i]);
	}
	x->symmetric = zp_symmetric(qtype, x->zp, x->n);
	return OQ_OK;
}

/*
 * The float tensor a QuantizeLinear stands for: its input, except for a
 * quantized graph output y, where quantize renamed the producer's output
 * to "y_QuantizeLinear_Input[_N]" and the DQ writes y.
 */
static const char *act_name(const oq_node *q)
{
	const oq_value *x = q->inputs[0], *o = q->n_outputs ? q->outputs[0] : NULL, *y;
	size_t len;
	if (!o || o->n_uses != 1 || o->uses[0].node->op != OQ_OP_DequantizeLinear ||
	    !o->uses[0].node->n_outputs || !(y = o->uses[0].node->outputs[0]) ||
	    !(y->flags & OQ_V_OUTPUT) || (x->flags & OQ_V_OUTPUT))
		return x->name;
	len = strlen(y->name);
	if (strncmp(x->name, y->name, len) || strncmp(x->name + len, "_QuantizeLinear_Input", 21))
		return x->name;
	return y->name;
}

int oq_encodings_collect(const oq_model *m, oq_encodings *out, oq_diag *d)
{
	const oq_graph *g = m->graph;
	size_t cap = 0;
	int rc = OQ_OK;

	out->v = NULL;
	out->n = 0;
	for (size_t i = 0; i < g->n_nodes && !rc; i++) {
		const oq_node *n = g->nodes[i];
		const oq_value *x = n->n_inputs ? n->inputs[0] : NULL;
		oq_encoding e;
		int qtype, rank;

		if (n->dead || !x)
			continue;
		memset(&e, 0, sizeof e);
		if (n->op == OQ_OP_QuantizeLinear) {
			const oq_tensor *z =
			    n->n_inputs > 2 && n->inputs[2] ? n->inputs[2]->init : NULL;
			qtype =
			    z ? z->dtype : (int)oq_node_attr_int(n, "output_dtype", OQ_DT_UINT8);
			rank = x->type.kind == OQ_TYPE_TENSOR ? x->type.rank : -1;
			e.name = oq_strdup(act_name(n));
		} else if (n->op == OQ_OP_DequantizeLinear && x->init && !x->producer) {
			qtype = x->init->dtype;
			rank = x->init->rank;
			if (qtype == OQ_DT_INT32)
				continue; /* a bias: its scale is derived (encodings.h) */
			e.is_param = 1;
			e.name = weight_name(x->name);
		} else {
			continue;
		}
		if (!e.name) {
			rc = oq_err(d, OQ_ENOMEM, "encodings: out of memory");
			break;
		}
		if (!int_type(oq_dtype_bits(qtype), oq_dtype_kind(qtype) == 's') ||
		    int_type(oq_dtype_bits(qtype), oq_dtype_kind(qtype) == 's') != qtype) {
			rc = oq_err(d, OQ_EUNSUP,
			            "encodings: node '%s' (%s): type %s has no encoding "
			            "(int4/8/16, uint4/8/16 only)",
			            n->name, n->op_type, oq_dtype_name(qtype));
		} else if (!(rc = node_params(n, qtype, rank < 0 ? OQ_MAX_RANK : rank, &e, d))) {
			rc = enc_add(out, &cap, &e, d);
		}
		enc_clear(&e);
	}
	if (rc)
		oq_encodings_free(out);
	return rc;
}

/* ------------------------------------------------------------ write */

static void write_one(const oq_encoding *x, FILE *f)
{
	int64_t qmin, qmax;
	oq_json_str(f, x->name);
	fputs(": [", f);
	if (x->is_float || x->ignored) {
		fprintf(f, "{\"bitwidth\": %d, \"dtype\": \"%s\"}]", x->bitwidth,
		        x->is_float ? "float" : "int");
		return;
	}
	grid(x->dtype, &qmin, &qmax);
	for (size_t i = 0; i < (x->has_qparams ? x->n : 1); i++) {
		fprintf(
		    f,
		    "%s\n      {\"bitwidth\": %d, \"dtype\": \"int\", \"is_symmetric\": \"%s\", ",
		    i ? "," : "", x->bitwidth, x->symmetric ? "True" : "False");
		if (x->has_qparams) {
			double s = x->scale[i];
			fprintf(f,
			        "\"scale\": %.9g, \"offset\": %lld, \"min\": %.9g, \"max\": %.9g, ",
			        s, (long long)(qmin - x->zp[i]), (double)(qmin - x->zp[i]) * s,
			        (double)(qmax - x->zp[i]) * s);
		} else {
			fprintf(f, "\"min\": %.17g, \"max\": %.17g, ", x->min, x->max);
		}
		fprintf(f, "\"onnx_type\": \"%s\"", oq_dtype_name(x->dtype));
		if (x->axis >= 0)
			fprintf(f, ", \"axis\": %d", x->axis);
		if (x->block_size > 0)
			fprintf(f, ", \"block_size\": %lld", (long long)x->block_size);
		fputc('}', f);
	}
	fputs("]", f);
}

int oq_encodings_write(const oq_encodings *e, FILE *f)
{
	static const char *sec[2] = {"activation_encodings", "param_encodings"};
	fputs("{\n  \"version\": \"" VERSION "\"", f);
	for (int p = 0; p < 2; p++) {
		size_t k = 0;
		fprintf(f, ",\n  \"%s\": {", sec[p]);
		for (size_t i = 0; i < e->n; i++) {
			if (e->v[i].is_param != p)
				continue;
			fputs(k++ ? ",\n    " : "\n    ", f);
			write_one(&e->v[i], f);
		}
		fputs(k ? "\n  }" : "}", f);
	}
	fputs("\n}\n", f);
	return ferror(f) ? OQ_EIO : OQ_OK;
}

int oq_encodings_export(const oq_model *m, const char *path, oq_diag *d)
{
	oq_encodings e;
	oq_outfile out;
	FILE *f = NULL;
	int rc, fd;

	if ((rc = oq_encodings_collect(m, &e, d)))
		return rc;
	/* a temporary file renamed over path: an old file stays whole until the new one is */
	if ((rc = oq_out_open(&out, path, "encodings", OQ_OUT_STDOUT, d))) {
		oq_encodings_free(&e);
		return rc;
	}
	if ((fd = dup(out.fd)) < 0 || !(f = fdopen(fd, "w"))) {
		if (fd >= 0)
			close(fd);
		rc = OQ_EIO;
	} else {
		rc = oq_encodings_write(&e, f);
		if (fclose(f) && !rc)
			rc = OQ_EIO;
	}
	oq_encodings_free(&e);
	if (rc) {
		oq_out_abort(&out);
		return oq_err(d, rc, "encodings: cannot write %s: %s", path, strerror(errno));
	}
	return oq_out_commit(&out, "encodings", d);
}

/* Context of one tensor entry for messages. */
typedef struct ectx {
	const char *path;    /* the file */
	const char *section; /* "activation_encodings" or "param_encodings" */
	const char *name;    /* tensor name */
	size_t rec;          /* record index */
	oq_diag *d;
} ectx;

static int bad(const ectx *c, const char *key, const char *what)
{
	return oq_err(c->d, OQ_EUSAGE, "encodings: %s: %s '%s' record %zu: \"%s\" %s", c->path,
	              c->section, c->name, c->rec, key, what);
}

/* An integral JSON number within [lo, hi]. */
static int get_int(const cJSON *it, double lo, double hi, int64_t *v)
{
	double x;
	if (!cJSON_IsNumber(it))
		return 0;
	x = it->valuedouble;
	if (!isfinite(x) || x != floor(x) || x < lo || x > hi)
		return 0;
	*v = (int64_t)x;
	return 1;
}

/* One record as read. */
typedef struct rec {
	int64_t bitwidth;                            /* 0 when absent */
	int is_float;                                /* dtype "float" */
	int sym;                                     /* -1 absent */
	int has_scale, has_offset, has_min, has_max; /* which of the numbers below were given */
	double scale, min, max; /* as written (AIMET's x = (u + offset) * scale) */
	int64_t offset;         /* AIMET offset = qmin - zp */
	int onnx_type;          /* 0 absent */
	int64_t axis;           /* INT32_MIN absent */
	int64_t block_size;     /* 0 absent */
} rec;

static int read_rec(const ectx *c, const cJSON *o, rec *r)
{
	const cJSON *it;
	memset(r, 0, sizeof *r);
	r->sym = -1;
	r->axis = INT32_MIN;
	if (!cJSON_IsObject(o))
		return oq_err(c->d, OQ_EUSAGE, "encodings: %s: %s '%s' record %zu is not an object",
		              c->path, c->section, c->name, c->rec);
	cJSON_ArrayForEach(it, o)
	{
		const char *k = it->string;
		if (strcmp(k, "bitwidth") == 0) {
			if (!get_int(it, 1, 32, &r->bitwidth))
				return bad(c, k, "must be an integer in [1, 32]");
		} else if (strcmp(k, "dtype") == 0) {
			if (!cJSON_IsString(it) ||
			    (strcmp(it->valuestring, "int") && strcmp(it->valuestring, "float")))
				return bad(c, k, "must be \"int\" or \"float\"");
			r->is_float = strcmp(it->valuestring, "float") == 0;
		} else if (strcmp(k, "is_symmetric") == 0) {
			if (cJSON_IsBool(it))
				r->sym = cJSON_IsTrue(it);
			else if (cJSON_IsString(it) && (!strcmp(it->valuestring, "True") ||
			                                !strcmp(it->valuestring, "False")))
				r->sym = strcmp(it->valuestring, "True") == 0;
			else
				return bad(c, k, "must be \"True\" or \"False\"");
		} else if (strcmp(k, "scale") == 0) {
			if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) ||
			    !(it->valuedouble > 0) || !((float)it->valuedouble > 0) ||
			    !isfinite((float)it->valuedouble))
				return bad(c, k, "must be a finite number > 0 (as float32)");
			r->has_scale = 1;
			r->scale = it->valuedouble;
		} else if (strcmp(k, "offset") == 0) {
			if (!get_int(it, -4294967296.0, 4294967296.0, &r->offset))
				return bad(c, k, "must be an integer");
			r->has_offset = 1;
		} else if (strcmp(k, "min") == 0 || strcmp(k, "max") == 0) {
			if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
				return bad(c, k, "must be a finite number");
			if (k[1] == 'i') {
				r->has_min = 1;
				r->min = it->valuedouble;
			} else {
				r->has_max = 1;
				r->max = it->valuedouble;
			}
		} else if (strcmp(k, "onnx_type") == 0) {
			int t = cJSON_IsString(it) ? oq_dtype_from_name(it->valuestring) : -1;
			if (t <= 0 || int_type(oq_dtype_bits(t), oq_dtype_kind(t) == 's') != t)
				return bad(
				    c, k, "must be one of int8, uint8, int16, uint16, int4, uint4");
			r->onnx_type = t;
		} else if (strcmp(k, "axis") == 0) {
			if (!get_int(it, 0, OQ_MAX_RANK - 1, &r->axis))
				return bad(c, k, "must be an integer axis >= 0");
		} else if (strcmp(k, "block_size") == 0) {
			if (!get_int(it, 1, 1e15, &r->block_size))
				return bad(c, k, "must be an integer > 0");
		} else {
			return bad(c, k, "is not a known key (valid: " RKEYS ")");
		}
	}
	return OQ_OK;
}

/* Fills x from its records (all must agree on type, axis, block size). */
static int read_entry(const ectx *c0, const cJSON *arr, int is_param, oq_encoding *x)
{
	ectx c = *c0;
	size_t n = (size_t)cJSON_GetArraySize(arr), i = 0;
	const cJSON *it;
	rec r0, r;
	int64_t qmin = 0, qmax = 0;
	int rc;

	if (!cJSON_IsArray(arr) || n == 0)
		return oq_err(c.d, OQ_EUSAGE,
		              "encodings: %s: %s '%s' must be a non-empty list of records", c.path,
		              c.section, c.name);
	x->is_param = is_param;
	if (!(x->name = oq_strdup(c.name)))
		return oq_err(c.d, OQ_ENOMEM, "encodings: out of memory");
	cJSON_ArrayForEach(it, arr)
	{
		c.rec = i;
		if ((rc = read_rec(&c, it, i ? &r : &r0)))
			return rc;
		if (i == 0) {
			r = r0;
			if (!r0.bitwidth)
				return bad(&c, "bitwidth", "is missing");
			x->bitwidth = (int)r0.bitwidth;
			x->is_float = r0.is_float;
			if (x->is_float)
				return n == 1 ? OQ_OK
				              : bad(&c, "dtype", "\"float\" takes one record");
			if (is_param && r0.bitwidth == 32) {
				x->ignored = 1; /* an int32 bias: derived again by quantize */
				return OQ_OK;
			}
			x->symmetric = r0.sym == 1;
			x->dtype =
			    r0.onnx_type ? r0.onnx_type : int_type(x->bitwidth, x->symmetric);
			if (!x->dtype)
				return bad(&c, "bitwidth",
				           "must be 4, 8 or 16 for integer encodings");
			if (oq_dtype_bits(x->dtype) != x->bitwidth)
				return bad(&c, "onnx_type", "does not have \"bitwidth\" bits");
			grid(x->dtype, &qmin, &qmax);
			x->has_qparams = r0.has_scale;
			x->axis = r0.axis == INT32_MIN ? (n > 1 ? INT32_MIN : -1) : (int)r0.axis;
			x->block_size = r0.block_size;
			if (x->block_size && r0.axis == INT32_MIN)
				return bad(&c, "block_size", "needs \"axis\" (the blocked axis)");
			if (!is_param && (n > 1 || r0.axis != INT32_MIN || r0.block_size))
				return oq_err(
				    c.d, OQ_EUNSUP,
				    "encodings: %s: activation '%s': per-channel or "
				    "blocked activation encodings are not supported (one record)",
				    c.path, c.name);
			x->n = n;
			x->scale = oq_calloc(n, sizeof *x->scale);
			x->zp = oq_calloc(n, sizeof *x->zp);
			if (!x->scale || !x->zp)
				return oq_err(c.d, OQ_ENOMEM, "encodings: out of memory");
		} else if (r.bitwidth != r0.bitwidth || r.is_float != r0.is_float ||
		           r.sym != r0.sym || r.onnx_type != r0.onnx_type || r.axis != r0.axis ||
		           r.block_size != r0.block_size || r.has_scale != r0.has_scale) {
			return bad(&c, "bitwidth",
			           "and the other keys must be the same in every record of a "
			           "tensor (only scale, offset, min, max differ)");
		}
		if (r.has_scale) {
			if (!r.has_offset)
				return bad(&c, "offset", "is missing (needed with \"scale\")");
			if (qmin - r.offset < qmin || qmin - r.offset > qmax)
				return bad(&c, "offset",
				           "gives a zero point outside the type's range");
			x->scale[i] = (float)r.scale;
			x->zp[i] = qmin - r.offset;
		} else {
			if (!r.has_min || !r.has_max || !(r.min <= r.max))
				return bad(&c, "min",
				           "and \"max\" (min <= max) are needed without \"scale\"");
			if (i == 0) {
				x->min = r.min;
				x->max = r.max;
			}
		}
		i++;
	}
	return OQ_OK;
}

int oq_encodings_read(const char *path, oq_encodings *out, oq_diag *d)
{
	static const char *sec[2] = {"activation_encodings", "param_encodings"};
	char *buf = NULL;
	size_t len;
	const char *end = NULL;
	cJSON *root = NULL;
	const cJSON *it;
	size_t cap = 0;
	int rc;

	out->v = NULL;
	out->n = 0;
	if ((rc = oq_file_read(path, MAX_FILE, "encodings", NULL, &buf, &len, d)))
		return rc;
	root = cJSON_ParseWithOpts(buf, &end, 0);
	if (!root) {
		const char *p = cJSON_GetErrorPtr();
		rc = oq_err(d, OQ_EUSAGE, "encodings: %s: malformed JSON near line %zu", path,
		            p ? oq_text_line(buf, p) : (size_t)0);
		goto out;
	}
	if (!cJSON_IsObject(root)) {
		rc = oq_err(d, OQ_EUSAGE,
		            "encodings: %s: expected a JSON object with \"activation_encodings\" "
		            "and \"param_encodings\"",
		            path);
		goto out;
	}
	cJSON_ArrayForEach(it, root)
	{
		const char *k = it->string;
		if (strcmp(k, "version") == 0) {
			if (!cJSON_IsString(it)) {
				rc = oq_err(d, OQ_EUSAGE,
				            "encodings: %s: \"version\" must be a string", path);
				goto out;
			}
			if (strcmp(it->valuestring, VERSION) && strncmp(it->valuestring, "0.", 2)) {
				rc = oq_err(d, OQ_EUNSUP,
				            "encodings: %s: version \"%s\" is not supported (AIMET "
				            "0.x object form or \"" VERSION
				            "\"; export AIMET encodings "
				            "with encoding_version 0.6.1)",
				            path, it->valuestring);
				goto out;
			}
		} else if (strcmp(k, "excluded_layers") && strcmp(k, "quantizer_args") &&
		           strcmp(k, sec[0]) && strcmp(k, sec[1])) {
			rc = oq_err(d, OQ_EUSAGE,
			            "encodings: %s: unknown member \"%s\" (valid: version, "
			            "activation_encodings, param_encodings)",
			            path, k);
			goto out;
		}
	}
	for (int p = 0; p < 2; p++) {
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, sec[p]), *e;
		if (!s)
			continue;
		if (!cJSON_IsObject(s)) {
			rc = oq_err(d, cJSON_IsArray(s) ? OQ_EUNSUP : OQ_EUSAGE,
			            "encodings: %s: \"%s\" must be "
			            "an object of tensor name -> records%s",
			            path, sec[p],
			            cJSON_IsArray(s) ? " (AIMET 1.0 list form is not supported)"
			                             : "");
			goto out;
		}
		cJSON_ArrayForEach(e, s)
		{
			ectx c = {path, sec[p], e->string, 0, d};
			oq_encoding x;
			memset(&x, 0, sizeof x);
			if (enc_find(out, p, e->string)) {
				rc = oq_err(d, OQ_EUSAGE, "encodings: %s: %s '%s' is listed twice",
				            path, sec[p], e->string);
				goto out;
			}
			if ((rc = read_entry(&c, e, p, &x)) || (rc = enc_add(out, &cap, &x, d))) {
				enc_clear(&x);
				goto out;
			}
		}
	}
out:
	cJSON_Delete(root);
	free(buf);
	if (rc)
		oq_encodings_free(out);
	return rc;
}

/* ------------------------------------------------------------ overrides */

/* Checks a weight's record count against its shape; fills granularity and axis. */
static int param_shape(const oq_encoding *x, const oq_tensor *w, const char *path, oq_override *o,
                       oq_diag *d)
{
	int axis = x->axis;
	size_t want = 1;

	if (axis >= w->rank)
		return oq_err(d, OQ_EUSAGE,
		              "encodings: %s: weight '%s': axis %d is outside its rank %d", path,
		              x->name, x->axis, w->rank);
	if (x->block_size > 0) {
		int64_t D = w->dims[axis];
		for (int k = 0; k < w->rank; k++)
			if (!oq_mul_size(want,
			                 (size_t)(k == axis
			                              ? (D + x->block_size - 1) / x->block_size
			                              : w->dims[k]),
			                 &want))
				want = SIZE_MAX;
		o->granularity = OQ_GRAN_BLOCK;
		o->axis = axis;
		o->block_size = x->block_size;
	} else if (x->axis == -1) {
		o->granularity = OQ_GRAN_TENSOR;
	} else if (axis != INT32_MIN) {
		want = (size_t)w->dims[axis];
		o->granularity = OQ_GRAN_CHANNEL;
		o->axis = axis;
	} else {
		/* per channel on the op's default axis: it must at least be one of the first two
		 * dims */
		o->granularity = OQ_GRAN_CHANNEL;
		if (w->rank >= 1 && (size_t)w->dims[0] == x->n)
			want = x->n;
		else if (w->rank >= 2 && (size_t)w->dims[1] == x->n)
			want = x->n;
		else
			want = 0;
	}
	if (want != x->n)
		return oq_err(d, OQ_EUSAGE,
		              "encodings: %s: weight '%s': %zu records do not fit its shape "
		              "(%s, expected %zu)",
		              path, x->name, x->n,
		              x->block_size > 0 ? "blocked"
		              : x->axis == -1   ? "per tensor"
		                                : "per channel",
		              want);
	return OQ_OK;
}

int oq_encodings_to_overrides(const oq_encodings *e, const oq_model *m, const char *path,
                              oq_override **out, size_t *n, oq_diag *d)
{
	const oq_graph *g = m->graph;
	oq_override *v = NULL;
	size_t k = 0;
	int rc = OQ_OK;

	*out = NULL;
	*n = 0;
	if (e->n && !(v = oq_calloc(e->n, sizeof *v)))
		return oq_err(d, OQ_ENOMEM, "encodings: out of memory");
	for (size_t i = 0; i < e->n; i++) {
		const oq_encoding *x = &e->v[i];
		const oq_value *val = oq_graph_find(g, x->name);
		oq_override *o = &v[k];

		if (!val || (x->is_param && (!val->init || val->init->dtype != OQ_DT_FLOAT)) ||
		    (!x->is_param && val->init && !(val->flags & OQ_V_INPUT))) {
			rc = oq_err(d, OQ_EUSAGE,
			            "encodings: %s: %s '%s' is no %s of the model's main graph",
			            path, x->is_param ? "param_encodings" : "activation_encodings",
			            x->name,
			            x->is_param ? "float initializer" : "activation tensor");
			goto fail;
		}
		if (x->ignored)
			continue;
		memset(o, 0, sizeof *o);
		o->symmetric = -1;
		o->granularity = -1;
		o->axis = INT32_MIN;
		if (!(o->name = oq_strdup(x->name))) {
			rc = oq_err(d, OQ_ENOMEM, "encodings: out of memory");
			goto fail;
		}
		k++;
		if (x->is_float) {
			o->skip = 1;
			continue;
		}
		o->dtype = x->dtype;
		if (x->is_param) {
			o->symmetric = x->symmetric;
			if ((rc = param_shape(x, val->init, path, o, d)))
				goto fail;
			if (x->has_qparams && x->n) {
				/* the file's scales and offsets, used as they are */
				o->w_scale = oq_calloc(x->n, sizeof *o->w_scale);
				o->w_zp = oq_calloc(x->n, sizeof *o->w_zp);
				if (!o->w_scale || !o->w_zp) {
					rc = oq_err(d, OQ_ENOMEM, "encodings: out of memory");
					goto fail;
				}
				memcpy(o->w_scale, x->scale, x->n * sizeof *o->w_scale);
				memcpy(o->w_zp, x->zp, x->n * sizeof *o->w_zp);
				o->n_wq = x->n;
			}
		} else if (x->has_qparams) {
			o->has_qparams = 1;
			o->scale = x->scale[0];
			o->zero_point = x->zp[0];
		} else {
			o->symmetric = x->symmetric;
			o->has_range = 1;
			o->min = (float)x->min;
			o->max = (float)x->max;
		}
	}
	*out = v;
	*n = k;
	return OQ_OK;
fail:
	oq_overrides_free(v, k);
	return rc;
}

int oq_encodings_import(const char *path, const oq_model *m, oq_override **out, size_t *n,
                        oq_diag *d)
{
	oq_encodings e;
	int rc;

	*out = NULL;
	*n = 0;
	if ((rc = oq_encodings_read(path, &e, d)))
		return rc;
	rc = oq_encodings_to_overrides(&e, m, path, out, n, d);
	oq_encodings_free(&e);
	return rc;
}

/* ------------------------------------------------------------ verify */

int oq_encodings_verify(const oq_model *q, const oq_encodings *want, FILE *log, size_t *n_unused,
                        oq_diag *d)
{
	oq_encodings got;
	int rc;

	*n_unused = 0;
	if ((rc = oq_encodings_collect(q, &got, d)))
		return rc;
	for (size_t i = 0; i < want->n && !rc; i++) {
		const oq_encoding *w = &want->v[i], *h;
		const char *what = w->is_param ? "weight" : "tensor";
		if (w->is_float || w->ignored)
			continue;
		if (!(h = enc_find(&got, w->is_param, w->name))) {
			(*n_unused)++;
			if (log)
				fprintf(log,
				        "encodings: %s '%s' has an encoding but no Q/DQ in the "
				        "quantized "
				        "model (inside a fused unit, excluded or not quantized)\n",
				        what, w->name);
			continue;
		}
		if (h->dtype != w->dtype) {
			rc =
			    oq_err(d, w->is_param ? OQ_EUNSUP : OQ_EINVAL,
			           "encodings: %s '%s' was quantized "
			           "to %s, the encodings say %s",
			           what, w->name, oq_dtype_name(h->dtype), oq_dtype_name(w->dtype));
			break;
		}
		if (!w->has_qparams)
			continue;
		if (h->n != w->n) {
			rc = oq_err(d, OQ_EUNSUP,
			            "encodings: %s '%s' has %zu scales in the quantized model, the "
			            "encodings %zu",
			            what, w->name, h->n, w->n);
			break;
		}
		for (size_t c = 0; c < w->n; c++) {
			if (memcmp(&h->scale[c], &w->scale[c], sizeof(float)) == 0 &&
			    h->zp[c] == w->zp[c])
				continue;
			if (w->is_param)
				rc = oq_err(
				    d, OQ_EUNSUP,
				    "encodings: weight '%s' record %zu: the quantized model uses "
				    "scale %.9g zero point %lld, the file has %.9g / %lld (the "
				    "int32 bias would overflow with the imported scale)",
				    w->name, c, (double)h->scale[c], (long long)h->zp[c],
				    (double)w->scale[c], (long long)w->zp[c]);
			else
				rc = oq_err(d, OQ_EINVAL,
				            "encodings: tensor '%s': the quantized model uses "
				            "scale %.9g zero point %lld instead of the imported "
				            "%.9g / %lld",
				            w->name, (double)h->scale[c], (long long)h->zp[c],
				            (double)w->scale[c], (long long)w->zp[c]);
			break;
		}
	}
	oq_encodings_free(&got);
	return rc;
}
