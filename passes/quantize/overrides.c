/*
 * overrides.c - reads `--overrides FILE.json` (format in overrides.h) with
 * cJSON into oq_override entries for the quantize pass.
 *
 * The file is untrusted input: its size is capped, every member is
 * type-checked, numbers that must be integers are checked to be integral
 * and in range, and every name is looked up in the model before the pass
 * runs, so a typo is reported at once instead of being silently ignored.
 */
#include "passes/quantize/overrides.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/io/file.h"

/* Larger than any hand-written override file; keeps a wrong path from reading gigabytes. */
#define MAX_FILE ((size_t)64 << 20)

#define KEYS "skip, dtype, symmetric, granularity, axis, block_size, range, scale, zero_point"
#define DTYPES "int8, uint8, int16, uint16, int4, uint4"

void oq_overrides_free(oq_override *v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].w_scale);
		free(v[i].w_zp);
	}
	free(v);
}

const oq_override *oq_override_find(const oq_override *v, size_t n, const char *name, int is_node)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (v[i].is_node == is_node && strcmp(v[i].name, name) == 0)
			return &v[i];
	return NULL;
}

static int node_exists(const oq_graph *g, const char *name)
{
	for (size_t i = 0; i < g->n_nodes; i++)
		if (!g->nodes[i]->dead && strcmp(g->nodes[i]->name, name) == 0)
			return 1;
	return 0;
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

/* Context of one entry for messages. */
typedef struct ectx {
	const char *path;    /* the file */
	const char *section; /* "tensors" or "nodes" */
	const char *name;    /* entry name */
	oq_diag *d;
} ectx;

static int bad(const ectx *c, const char *key, const char *what)
{
	return oq_err(c->d, OQ_EUSAGE, "overrides: %s: %s '%s': \"%s\" %s", c->path, c->section, c->name, key,
		      what);
}

/* Fills *e from one entry object. */
static int parse_entry(const cJSON *obj, oq_override *e, const ectx *c)
{
	const cJSON *it;
	int has_zp = 0;

	e->symmetric = -1;
	e->granularity = -1;
	e->axis = INT32_MIN;
	if (!cJSON_IsObject(obj))
		return oq_err(c->d, OQ_EUSAGE, "overrides: %s: %s '%s' must be an object of settings (%s)",
			      c->path, c->section, c->name, KEYS);
	cJSON_ArrayForEach(it, obj) {
		const char *k = it->string;
		int64_t iv;
		if (strcmp(k, "skip") == 0) {
			if (!cJSON_IsBool(it))
				return bad(c, k, "must be true or false");
			e->skip = cJSON_IsTrue(it);
		} else if (strcmp(k, "symmetric") == 0) {
			if (!cJSON_IsBool(it))
				return bad(c, k, "must be true or false");
			e->symmetric = cJSON_IsTrue(it);
		} else if (strcmp(k, "dtype") == 0) {
			int t = cJSON_IsString(it) ? oq_dtype_from_name(it->valuestring) : -1;
			if (t != OQ_DT_INT8 && t != OQ_DT_UINT8 && t != OQ_DT_INT16 && t != OQ_DT_UINT16 &&
			    t != OQ_DT_INT4 && t != OQ_DT_UINT4)
				return bad(c, k, "must be one of " DTYPES);
			e->dtype = t;
		} else if (strcmp(k, "granularity") == 0) {
			const char *s = cJSON_IsString(it) ? it->valuestring : "";
			if (strcmp(s, "tensor") == 0)
				e->granularity = OQ_GRAN_TENSOR;
			else if (strcmp(s, "channel") == 0)
				e->granularity = OQ_GRAN_CHANNEL;
			else if (strcmp(s, "block") == 0)
				e->granularity = OQ_GRAN_BLOCK;
			else
				return bad(c, k, "must be \"tensor\", \"channel\" or \"block\"");
		} else if (strcmp(k, "axis") == 0) {
			if (!get_int(it, -OQ_MAX_RANK, OQ_MAX_RANK - 1, &iv))
				return bad(c, k, "must be an integer axis");
			e->axis = (int)iv;
		} else if (strcmp(k, "block_size") == 0) {
			if (!get_int(it, 1, (double)INT32_MAX, &iv))
				return bad(c, k, "must be an integer > 0");
			e->block_size = iv;
		} else if (strcmp(k, "range") == 0) {
			const cJSON *a, *b;
			if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2 ||
			    !cJSON_IsNumber(a = cJSON_GetArrayItem(it, 0)) ||
			    !cJSON_IsNumber(b = cJSON_GetArrayItem(it, 1)) || !isfinite(a->valuedouble) ||
			    !isfinite(b->valuedouble) || fabs(a->valuedouble) > 3e38 ||
			    fabs(b->valuedouble) > 3e38 || a->valuedouble > b->valuedouble)
				return bad(c, k, "must be [min, max] with finite numbers, min <= max");
			e->has_range = 1;
			e->min = (float)a->valuedouble;
			e->max = (float)b->valuedouble;
		} else if (strcmp(k, "scale") == 0) {
			if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || !(it->valuedouble > 0) ||
			    it->valuedouble > 3e38 || !((float)it->valuedouble > 0))
				return bad(c, k, "must be a finite number > 0");
			e->has_qparams = 1;
			e->scale = (float)it->valuedouble;
		} else if (strcmp(k, "zero_point") == 0) {
			if (!get_int(it, -2147483648.0, 2147483647.0, &iv))
				return bad(c, k, "must be an integer");
			e->zero_point = iv;
			has_zp = 1;
		} else {
			return oq_err(c->d, OQ_EUSAGE, "overrides: %s: %s '%s': unknown key \"%s\" (valid: %s)",
				      c->path, c->section, c->name, k, KEYS);
		}
	}
	if (has_zp && !e->has_qparams)
		return bad(c, "zero_point", "needs \"scale\" too");
	if (e->has_qparams && e->has_range)
		return bad(c, "range", "and \"scale\" exclude each other: give one");
	if (e->block_size && e->granularity != OQ_GRAN_BLOCK)
		return bad(c, "block_size", "needs \"granularity\": \"block\"");
	return OQ_OK;
}

int oq_overrides_load(const char *path, const oq_model *m, oq_override **out, size_t *n, oq_diag *d)
{
	static const char *const sections[2] = {"tensors", "nodes"};
	char *buf = NULL;
	size_t len = 0, count = 0, k = 0;
	const char *end = NULL;
	cJSON *root = NULL, *it;
	oq_override *v = NULL;
	int rc;

	*out = NULL;
	*n = 0;
	if (!m || !m->graph)
		return oq_err(d, OQ_EINVAL, "overrides: the model has no graph");
	if ((rc = oq_file_read(path, MAX_FILE, "overrides", "an overrides file is a small JSON object", &buf, &len, d)))
		return rc;
	root = cJSON_ParseWithLengthOpts(buf, len + 1, &end, 1); /* + 1: the NUL is part of it */
	if (!root) {
		rc = oq_err(d, OQ_EUSAGE, "overrides: %s: not valid JSON near line %zu; expected "
			    "{\"tensors\": {NAME: {...}}, \"nodes\": {NAME: {...}}}",
			    path, oq_text_line(buf, end ? end : buf));
		goto fail;
	}
	if (!cJSON_IsObject(root)) {
		rc = oq_err(d, OQ_EUSAGE, "overrides: %s: the top level must be an object with \"tensors\" "
			    "and/or \"nodes\"", path);
		goto fail;
	}
	cJSON_ArrayForEach(it, root) {
		if (strcmp(it->string, "tensors") != 0 && strcmp(it->string, "nodes") != 0) {
			rc = oq_err(d, OQ_EUSAGE, "overrides: %s: unknown member \"%s\" (valid: \"tensors\", "
				    "\"nodes\")", path, it->string);
			goto fail;
		}
		if (!cJSON_IsObject(it)) {
			rc = oq_err(d, OQ_EUSAGE, "overrides: %s: \"%s\" must be an object mapping names to "
				    "settings", path, it->string);
			goto fail;
		}
		count += (size_t)cJSON_GetArraySize(it);
	}
	v = oq_calloc(count, sizeof *v);
	if (!v) {
		rc = oq_err(d, OQ_ENOMEM, "overrides: out of memory");
		goto fail;
	}
	for (int s = 0; s < 2; s++) {
		cJSON *sec = cJSON_GetObjectItemCaseSensitive(root, sections[s]);
		if (!sec)
			continue;
		cJSON_ArrayForEach(it, sec) {
			ectx c = {path, sections[s], it->string, d};
			oq_override *e = &v[k];
			if (s == 0 && !oq_graph_find(m->graph, it->string)) {
				rc = oq_err(d, OQ_EUSAGE, "overrides: %s: unknown tensor '%s' (not a value of the "
					    "main graph; `onnxq inspect` lists them)", path, it->string);
				goto fail;
			}
			if (s == 1 && (!it->string[0] || !node_exists(m->graph, it->string))) {
				rc = oq_err(d, OQ_EUSAGE, "overrides: %s: unknown node '%s' (not a node name of "
					    "the main graph; `onnxq inspect` lists them)", path, it->string);
				goto fail;
			}
			if (oq_override_find(v, k, it->string, s)) {
				rc = oq_err(d, OQ_EUSAGE, "overrides: %s: %s '%s' is given twice", path,
					    sections[s], it->string);
				goto fail;
			}
			e->name = oq_strdup(it->string);
			e->is_node = s;
			k++;
			if (!e->name) {
				rc = oq_err(d, OQ_ENOMEM, "overrides: out of memory");
				goto fail;
			}
			if ((rc = parse_entry(it, e, &c)))
				goto fail;
		}
	}
	cJSON_Delete(root);
	free(buf);
	*out = v;
	*n = k;
	return OQ_OK;
fail:
	oq_overrides_free(v, k);
	cJSON_Delete(root);
	free(buf);
	return rc;
}
