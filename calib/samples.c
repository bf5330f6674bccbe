/*
 * samples.c - sample folders, explicit inputs, validation, loading and the
 * `onnxq run` driver (see samples.h for the layouts and rules).
 *
 * Everything a user can get wrong about the data is found before the first
 * sample runs: the folder is scanned and every file's header is checked
 * against the model's declared inputs, so a bad file 900 samples in does
 * not cost 899 runs. Loading then moves .npy data straight into runtime
 * tensors (npy buffers are 64-byte aligned and freed with free(), like
 * oq_rt's own).
 */
#include "calib/samples.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "calib/profile.h"
#include "src/io/file.h"
#include "src/io/npy.h"
#include "src/io/onnx_io.h"
#include "src/io/outfile.h"

/* ---------------------------------------------------------------- helpers */

static char *join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	int slash = la && a[la - 1] != '/';
	char *p = malloc(la + lb + 2);
	if (!p)
		return NULL;
	memcpy(p, a, la);
	if (slash)
		p[la] = '/';
	memcpy(p + la + (size_t)slash, b, lb + 1);
	return p;
}

void oq_run_file_name(const char *value_name, const char *ext, char *buf, size_t n)
{
	size_t i = 0;
	if (!n)
		return;
	for (; *value_name && i + 1 < n; value_name++)
		buf[i++] = *value_name == '/' ? '_' : *value_name;
	for (; *ext && i + 1 < n; ext++)
		buf[i++] = *ext;
	buf[i] = 0;
}

/* Append formatted text at *off in buf (bounded, never overflows). */
static void put(char *buf, size_t n, size_t *off, const char *fmt, const char *s)
{
	int w;
	if (*off >= n)
		return;
	w = snprintf(buf + *off, n - *off, fmt, s);
	if (w > 0)
		*off += (size_t)w;
}

static void put_int(char *buf, size_t n, size_t *off, const char *fmt, long long v)
{
	int w;
	if (*off >= n)
		return;
	w = snprintf(buf + *off, n - *off, fmt, v);
	if (w > 0)
		*off += (size_t)w;
}

/* "float[N, 3, 48, 320]" with symbolic dims by name ("?" when unnamed). */
static const char *type_str(const oq_type *ty, char *buf, size_t n)
{
	size_t off = 0;
	buf[0] = 0;
	put(buf, n, &off, "%s", ty->dtype ? oq_dtype_name(ty->dtype) : "?");
	if (ty->rank < 0) {
		put(buf, n, &off, "%s", " (any shape)");
		return buf;
	}
	put(buf, n, &off, "%s", "[");
	for (int i = 0; i < ty->rank; i++) {
		if (i)
			put(buf, n, &off, "%s", ", ");
		if (ty->dims[i].value >= 0)
			put_int(buf, n, &off, "%lld", (long long)ty->dims[i].value);
		else
			put(buf, n, &off, "%s", ty->dims[i].param ? ty->dims[i].param : "?");
	}
	put(buf, n, &off, "%s", "]");
	return buf;
}

static const char *shape_str(int dtype, int rank, const int64_t *dims, char *buf, size_t n)
{
	size_t off = 0;
	buf[0] = 0;
	put(buf, n, &off, "%s[", oq_dtype_name(dtype));
	for (int i = 0; i < rank; i++)
		put_int(buf, n, &off, i ? ", %lld" : "%lld", (long long)dims[i]);
	put(buf, n, &off, "%s", "]");
	return buf;
}

/* "x, y, z" (shortened with "..." past the buffer). */
static const char *input_list(const oq_exec *e, char *buf, size_t n)
{
	size_t off = 0;
	buf[0] = 0;
	for (size_t i = 0; i < oq_exec_n_inputs(e); i++)
		put(buf, n, &off, i ? ", %s" : "%s", oq_exec_input(e, i)->name);
	if (off >= n && n > 4)
		memcpy(buf + n - 4, "...", 4);
	return buf;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* By name, then by file (qsort is not stable; messages about duplicates must not vary). */
static int cmp_sample(const void *a, const void *b)
{
	const oq_sample *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : strcmp(x->where, y->where);
}

static void free_names(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Entries of a folder except ".", ".." and hidden ones, sorted. */
static int list_dir(const char *path, char ***out, size_t *n, oq_diag *d)
{
	DIR *dir = opendir(path);
	struct dirent *de;
	char **v = NULL;
	size_t cap = 0;
	int rc = OQ_OK;

	*out = NULL;
	*n = 0;
	if (!dir)
		return oq_err(d, OQ_EIO, "run: cannot open folder '%s': %s", path, strerror(errno));
	while ((de = readdir(dir))) {
		if (de->d_name[0] == '.')
			continue;
		if ((rc = oq_grow(&v, &cap, *n + 1, sizeof *v)) ||
		    !(v[*n] = oq_strdup(de->d_name))) {
			rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
			break;
		}
		(*n)++;
	}
	closedir(dir);
	if (rc) {
		free_names(v, *n);
		*n = 0;
		return rc;
	}
	if (*n)
		qsort(v, *n, sizeof *v, cmp_str);
	*out = v;
	return OQ_OK;
}

static int ends_with(const char *s, const char *suf)
{
	size_t ls = strlen(s), lf = strlen(suf);
	return ls >= lf && !strcmp(s + ls - lf, suf);
}

/* "input_K" / "output_K" with a decimal K: returns K, or -1. */
static long long numbered(const char *stem, size_t len, const char *prefix)
{
	size_t lp = strlen(prefix);
	long long k = 0;
	if (len <= lp || strncmp(stem, prefix, lp))
		return -1;
	for (size_t i = lp; i < len; i++) {
		if (stem[i] < '0' || stem[i] > '9' || k > 100000000)
			return -1;
		k = k * 10 + (stem[i] - '0');
	}
	return k;
}

static int mkdir_p(const char *path, oq_diag *d)
{
	char *p = oq_strdup(path);
	struct stat st;
	int rc = OQ_OK;

	if (!p)
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	for (char *q = p + 1;; q++) {
		char c = *q;
		if (c != '/' && c != 0)
			continue;
		*q = 0;
		if (mkdir(p, 0777) && errno != EEXIST) {
			rc = oq_err(d, OQ_EIO, "run: cannot create folder '%s': %s", p,
			            strerror(errno));
			break;
		}
		if (!c || !q[1]) {
			if (stat(p, &st) || !S_ISDIR(st.st_mode))
				rc = oq_err(d, OQ_EIO, "run: '%s' is not a folder", p);
			break;
		}
		*q = c;
	}
	free(p);
	return rc;
}

/* ---------------------------------------------------------------- samples */

static void sample_free(const oq_samples *s, oq_sample *x)
{
	for (size_t k = 0; x->in && k < s->n_inputs; k++)
		free(x->in[k].path);
	free(x->in);
	free(x->name);
	free(x->where);
}

void oq_samples_free(oq_samples *s)
{
	for (size_t i = 0; i < s->n; i++)
		sample_free(s, &s->v[i]);
	free(s->v);
	memset(s, 0, sizeof *s);
}

size_t oq_samples_pick(size_t j, size_t n, size_t m)
{
	/* j n / m = j (n / m) + j (n % m) / m, and j (n % m) < m^2 does not overflow */
	return m ? j * (n / m) + j * (n % m) / m : j;
}

size_t oq_samples_thin(oq_samples *s, size_t n, size_t cap)
{
	size_t m, j = 0;

	if (n > s->n)
		n = s->n;
	if (!cap || n <= cap)
		return n;
	m = cap;
	/* pick(j) >= j and increases with j: each kept sample moves down or stays */
	for (size_t i = 0; i < s->n; i++) {
		if (j < m && i == oq_samples_pick(j, n, m))
			s->v[j++] = s->v[i];
		else
			sample_free(s, &s->v[i]);
	}
	s->n = m;
	return m;
}

/* Appends an empty sample (sources zeroed). */
static int add_sample(oq_samples *s, size_t *cap, const char *name, const char *where,
                      oq_sample **out, oq_diag *d)
{
	oq_sample *x;
	if (oq_grow(&s->v, cap, s->n + 1, sizeof *s->v))
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	x = &s->v[s->n];
	memset(x, 0, sizeof *x);
	x->name = oq_strdup(name);
	x->where = oq_strdup(where);
	x->in = oq_calloc(s->n_inputs, sizeof *x->in);
	s->n++;
	if (!x->name || !x->where || !x->in)
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	*out = x;
	return OQ_OK;
}

static int src_kind(const char *file)
{
	return ends_with(file, ".pb") ? OQ_SRC_PB : OQ_SRC_NPY;
}

/* Matches the files of one sample folder to the model inputs. */
static int scan_sample_dir(const oq_exec *e, oq_sample *x, const char *dir, oq_diag *d)
{
	char **names = NULL, fname[512], list[512], type[256];
	size_t n = 0, nin = oq_exec_n_inputs(e);
	int rc;

	if ((rc = list_dir(dir, &names, &n, d)))
		return rc;
	for (size_t f = 0; f < n; f++) {
		const char *nm = names[f];
		char *path = join(dir, nm);
		size_t stem;
		long long k = -1, match = -1;
		struct stat st;

		memset(&st, 0, sizeof st);
		if (!path) {
			rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
			goto fail;
		}
		if (stat(path, &st) || !S_ISREG(st.st_mode) ||
		    (!ends_with(nm, ".npy") && !ends_with(nm, ".pb"))) {
			rc = oq_err(d, OQ_EINVAL,
			            "run: %s: unexpected %s (a sample folder holds <input name>.npy or "
			            "input_K.npy files, .pb also accepted; inputs: %s)",
			            path, S_ISDIR(st.st_mode) ? "folder" : "file",
			            input_list(e, list, sizeof list));
			free(path);
			goto fail;
		}
		stem = strlen(nm) - (ends_with(nm, ".pb") ? 3 : 4);
		for (size_t i = 0; i < nin; i++) {
			oq_run_file_name(oq_exec_input(e, i)->name, "", fname, sizeof fname);
			if (strlen(fname) != stem || strncmp(fname, nm, stem))
				continue;
			if (match >= 0) {
				rc = oq_err(d, OQ_EINVAL,
				            "run: %s: the name fits two inputs ('%s' and '%s'); "
				            "use input_K.npy",
				            path, oq_exec_input(e, (size_t)match)->name,
				            oq_exec_input(e, i)->name);
				free(path);
				goto fail;
			}
			match = (long long)i;
		}
		if (match < 0 && (k = numbered(nm, stem, "input_")) >= 0 && (size_t)k < nin)
			match = k;
		if (match < 0 && numbered(nm, stem, "output_") >= 0) {
			free(path); /* a reference output of the ONNX test layout */
			continue;
		}
		if (match < 0) {
			rc = oq_err(d, OQ_EINVAL, "run: %s: matches no model input (inputs: %s)",
			            path, input_list(e, list, sizeof list));
			free(path);
			goto fail;
		}
		if (x->in[match].path) {
			rc = oq_err(d, OQ_EINVAL, "run: %s: input '%s' already comes from %s", path,
			            oq_exec_input(e, (size_t)match)->name, x->in[match].path);
			free(path);
			goto fail;
		}
		x->in[match].path = path;
		x->in[match].kind = src_kind(nm);
	}
	for (size_t i = 0; i < nin; i++) {
		if (x->in[i].path)
			continue;
		oq_run_file_name(oq_exec_input(e, i)->name, ".npy", fname, sizeof fname);
		rc = oq_err(d, OQ_EINVAL,
		            "run: %s: no file for input '%s' (%s); expected %s or input_%zu.npy",
		            dir, oq_exec_input(e, i)->name,
		            type_str(&oq_exec_input(e, i)->type, type, sizeof type), fname, i);
		goto fail;
	}
	free_names(names, n);
	return OQ_OK;
fail:
	free_names(names, n);
	return rc;
}

int oq_samples_scan(const char *dir, const oq_exec *e, oq_samples *s, oq_diag *d)
{
	char **names = NULL, list[512];
	size_t n = 0, cap = 0;
	const char *a_file = NULL, *a_dir = NULL;
	int rc;

	memset(s, 0, sizeof *s);
	s->n_inputs = oq_exec_n_inputs(e);
	if ((rc = list_dir(dir, &names, &n, d)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		char *path = join(dir, names[i]);
		struct stat st;
		oq_sample *x;
		size_t stem;
		char c;
		int is_dir;

		if (!path) {
			rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
			goto fail;
		}
		if (stat(path, &st)) {
			rc = oq_err(d, OQ_EIO, "run: cannot read '%s': %s", path, strerror(errno));
			free(path);
			goto fail;
		}
		is_dir = S_ISDIR(st.st_mode);
		if (!is_dir && ends_with(names[i], ".onnx")) {
			free(path); /* the model of an ONNX test-case folder */
			continue;
		}
		if (!is_dir && (!S_ISREG(st.st_mode) ||
		                (!ends_with(names[i], ".npy") && !ends_with(names[i], ".pb")))) {
			rc = oq_err(
			    d, OQ_EINVAL,
			    "run: %s: unexpected file (samples are NNN.npy files or NNN/ folders)",
			    path);
			free(path);
			goto fail;
		}
		if (is_dir ? !a_dir : !a_file) {
			if (is_dir)
				a_dir = names[i];
			else
				a_file = names[i];
		}
		if (a_dir && a_file) {
			rc = oq_err(d, OQ_EINVAL,
			            "run: %s: mixes sample files (%s) and sample folders (%s/); "
			            "use one layout",
			            dir, a_file, a_dir);
			free(path);
			goto fail;
		}
		if (!is_dir && s->n_inputs != 1) {
			rc = oq_err(d, OQ_EINVAL,
			            "run: %s: one file per sample fits single-input models; this one "
			            "has %zu inputs (%s): use NNN/<input name>.npy folders",
			            path, s->n_inputs, input_list(e, list, sizeof list));
			free(path);
			goto fail;
		}
		/* a sample file's name without .npy/.pb */
		stem = strlen(names[i]) - (is_dir ? 0 : ends_with(names[i], ".pb") ? 3 : 4);
		c = names[i][stem];
		names[i][stem] = 0;
		rc = add_sample(s, &cap, names[i], path, &x, d);
		names[i][stem] = c;
		if (rc) {
			free(path);
			goto fail;
		}
		if (is_dir) {
			rc = scan_sample_dir(e, x, path, d);
			free(path);
			if (rc)
				goto fail;
		} else {
			x->in[0].kind = src_kind(path);
			x->in[0].path = path;
		}
	}
	if (!s->n) {
		rc = oq_err(d, OQ_EINVAL,
		            "run: %s: no samples (expected NNN.npy files, or NNN/ folders holding "
		            "one file per input)",
		            dir);
		goto fail;
	}
	/* file names sort differently from their stems ("a-.npy" < "a.npy" but "a" < "a-") */
	qsort(s->v, s->n, sizeof *s->v, cmp_sample);
	for (size_t i = 1; i < s->n; i++)
		if (!strcmp(s->v[i - 1].name, s->v[i].name)) {
			rc = oq_err(d, OQ_EINVAL, "run: %s: two files for sample '%s' (%s)", dir,
			            s->v[i].name, s->v[i].where);
			goto fail;
		}
	free_names(names, n);
	return OQ_OK;
fail:
	free_names(names, n);
	oq_samples_free(s);
	return rc;
}

int oq_samples_explicit(const char *const *specs, size_t n, const oq_exec *e, oq_samples *s,
                        oq_diag *d)
{
	size_t cap = 0, nin = oq_exec_n_inputs(e);
	char list[512], type[256];
	oq_sample *x;
	int rc;

	memset(s, 0, sizeof *s);
	s->n_inputs = nin;
	if ((rc = add_sample(s, &cap, "", "--input", &x, d)))
		goto fail;
	for (size_t j = 0; j < n; j++) {
		const char *spec = specs[j], *eq, *file = NULL;
		long long match = -1;
		for (eq = strchr(spec, '='); eq && match < 0; eq = strchr(eq + 1, '=')) {
			for (size_t i = 0; i < nin; i++) {
				const char *nm = oq_exec_input(e, i)->name;
				if (strlen(nm) == (size_t)(eq - spec) &&
				    !strncmp(nm, spec, (size_t)(eq - spec))) {
					match = (long long)i;
					file = eq + 1;
					break;
				}
			}
		}
		if (!strchr(spec, '=')) {
			rc = oq_err(d, OQ_EUSAGE, "run: --input '%s': expected NAME=FILE", spec);
			goto fail;
		}
		if (match < 0) {
			rc = oq_err(
			    d, OQ_EUSAGE,
			    "run: --input '%s': the model has no input named '%.*s' (inputs: %s)",
			    spec, (int)(strchr(spec, '=') - spec), spec,
			    input_list(e, list, sizeof list));
			goto fail;
		}
		if (x->in[match].path) {
			rc = oq_err(d, OQ_EUSAGE, "run: --input given twice for '%s'",
			            oq_exec_input(e, (size_t)match)->name);
			goto fail;
		}
		if (!strncmp(file, "random:", 7)) {
			const char *p = file + 7;
			uint64_t v = 0;
			if (!*p) {
				rc = oq_err(d, OQ_EUSAGE,
				            "run: --input '%s': random:SEED needs a seed", spec);
				goto fail;
			}
			for (; *p; p++) {
				if (*p < '0' || *p > '9' || v > (UINT64_MAX - 9) / 10) {
					rc = oq_err(d, OQ_EUSAGE,
					            "run: --input '%s': SEED must be a non-negative integer",
					            spec);
					goto fail;
				}
				v = v * 10 + (uint64_t)(*p - '0');
			}
			x->in[match].kind = OQ_SRC_RANDOM;
			x->in[match].seed = v;
		} else {
			if (!*file) {
				rc = oq_err(d, OQ_EUSAGE, "run: --input '%s': empty FILE", spec);
				goto fail;
			}
			x->in[match].kind = src_kind(file);
		}
		if (!(x->in[match].path = oq_strdup(file))) {
			rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
			goto fail;
		}
	}
	for (size_t i = 0; i < nin; i++)
		if (!x->in[i].path) {
			rc = oq_err(d, OQ_EUSAGE, "run: no --input for model input '%s' (%s)",
			            oq_exec_input(e, i)->name,
			            type_str(&oq_exec_input(e, i)->type, type, sizeof type));
			goto fail;
		}
	return OQ_OK;
fail:
	oq_samples_free(s);
	return rc;
}

/* ---------------------------------------------------------------- checking */

static int random_ok(const oq_value *v, oq_diag *d);

/* A symbolic dim's value as bound by the first file that used it. */
typedef struct binding {
	const char *param; /* dim_param */
	int64_t value;     /* its size in this sample */
	const char *file;  /* file that bound it */
} binding;

/* Dtype and shape of a file without its data (.pb files are parsed whole). */
static int peek(const oq_sample_src *src, oq_npy *h, oq_diag *d)
{
	char *buf;
	size_t len;
	oq_tensor *t = NULL;
	int rc;

	if (src->kind == OQ_SRC_NPY)
		return oq_npy_read(src->path, 1, h, d);
	memset(h, 0, sizeof *h);
	if ((rc = oq_file_read(src->path, OQ_SAMPLE_MAX_BYTES, "run", NULL, &buf, &len, d)))
		return rc;
	rc = oq_tensor_load_pb(buf, len, src->path, &t, d);
	free(buf);
	if (rc)
		return rc;
	if (t->rank > OQ_MAX_RANK) {
		oq_tensor_free(t);
		return oq_err(d, OQ_EUNSUP, "run: %s: rank %d is too large", src->path, t->rank);
	}
	h->dtype = t->dtype;
	h->rank = t->rank;
	if (t->rank)
		memcpy(h->dims, t->dims, (size_t)t->rank * sizeof *t->dims);
	oq_tensor_free(t);
	return OQ_OK;
}

static int check_one(const oq_value *v, const oq_sample_src *src, const oq_npy *h, binding *b,
                     size_t *nb, oq_diag *d)
{
	const oq_type *ty = &v->type;
	char want[256], got[256], why[256];

	why[0] = 0;
	if (ty->kind != OQ_TYPE_TENSOR)
		return OQ_OK; /* the executor refuses non-tensor inputs when it is built */
	if (ty->dtype && ty->dtype != h->dtype)
		snprintf(why, sizeof why, "element type differs");
	else if (ty->rank >= 0 && ty->rank != h->rank)
		snprintf(why, sizeof why, "rank %d, not %d", h->rank, ty->rank);
	else if (h->rank > OQ_RT_MAX_RANK)
		snprintf(why, sizeof why, "rank %d is above the executor's limit of %d", h->rank,
		         OQ_RT_MAX_RANK);
	for (int i = 0; !why[0] && ty->rank >= 0 && i < ty->rank; i++) {
		const oq_dim *dm = &ty->dims[i];
		if (dm->value >= 0 && dm->value != h->dims[i]) {
			snprintf(why, sizeof why, "dim %d is %lld, not %lld", i,
			         (long long)h->dims[i], (long long)dm->value);
		} else if (dm->value < 0 && dm->param && *dm->param) {
			size_t k;
			for (k = 0; k < *nb && strcmp(b[k].param, dm->param); k++)
				;
			if (k == *nb) {
				b[k].param = dm->param;
				b[k].value = h->dims[i];
				b[k].file = src->path;
				(*nb)++;
			} else if (b[k].value != h->dims[i]) {
				snprintf(why, sizeof why, "dim %d '%s' is %lld but %s made it %lld",
				         i, dm->param, (long long)h->dims[i], b[k].file,
				         (long long)b[k].value);
			}
		}
	}
	if (!why[0])
		return OQ_OK;
	return oq_err(d, OQ_EINVAL, "run: %s: input '%s' expects %s, the file holds %s (%s)",
	              src->path, v->name, type_str(ty, want, sizeof want),
	              shape_str(h->dtype, h->rank, h->dims, got, sizeof got), why);
}

int oq_samples_check(const oq_samples *s, const oq_exec *e, oq_diag *d)
{
	binding *b = NULL;
	size_t cap = 0;
	int rc = OQ_OK;

	if (s->n_inputs != oq_exec_n_inputs(e))
		return oq_err(d, OQ_EINVAL,
		              "run: samples were made for %zu inputs, the model has %zu",
		              s->n_inputs, oq_exec_n_inputs(e));
	for (size_t i = 0; i < oq_exec_n_inputs(e); i++) {
		const oq_type *ty = &oq_exec_input(e, i)->type;
		if (ty->kind == OQ_TYPE_TENSOR && ty->rank > 0 &&
		    !oq_add_size(cap, (size_t)ty->rank, &cap))
			return oq_err(d, OQ_EINVAL, "run: too many dims");
	}
	if (!(b = oq_calloc(cap, sizeof *b)))
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	for (size_t j = 0; j < s->n && !rc; j++) {
		size_t nb = 0;
		for (size_t i = 0; i < s->n_inputs && !rc; i++) {
			const oq_sample_src *src = &s->v[j].in[i];
			oq_npy h;
			if (src->kind == OQ_SRC_RANDOM)
				rc = random_ok(oq_exec_input(e, i),
				               d); /* made from the declared type */
			else if (!(rc = peek(src, &h, d)))
				rc = check_one(oq_exec_input(e, i), src, &h, b, &nb, d);
		}
	}
	free(b);
	return rc;
}

/* ---------------------------------------------------------------- loading */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15u);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
	return z ^ (z >> 31);
}

/* Whether random data can be made for v (a declared numeric element type and rank). */
static int random_ok(const oq_value *v, oq_diag *d)
{
	const oq_type *ty = &v->type;
	char kind;

	if (ty->kind != OQ_TYPE_TENSOR || !ty->dtype || ty->rank < 0)
		return oq_err(d, OQ_EUNSUP,
		              "run: input '%s': random data needs a declared element type and rank",
		              v->name);
	kind = oq_dtype_kind(ty->dtype);
	if ((kind != 'f' && kind != 's' && kind != 'u' && kind != 'b') ||
	    oq_dtype_is_float8(ty->dtype) || oq_dtype_is_subbyte(ty->dtype))
		return oq_err(d, OQ_EUNSUP, "run: input '%s': no random data for element type %s",
		              v->name, oq_dtype_name(ty->dtype));
	if (ty->rank > OQ_RT_MAX_RANK)
		return oq_err(d, OQ_EUNSUP, "run: input '%s': rank %d is too large", v->name,
		              ty->rank);
	return OQ_OK;
}

static int load_random(const oq_value *v, size_t k, uint64_t seed, oq_rt *t, oq_diag *d)
{
	const oq_type *ty = &v->type;
	int64_t dims[OQ_RT_MAX_RANK];
	uint64_t st = seed + (uint64_t)k * 0x9E3779B97F4A7C15u;
	char kind;
	int rc;

	if ((rc = random_ok(v, d)))
		return rc;
	kind = oq_dtype_kind(ty->dtype);
	for (int i = 0; i < ty->rank; i++)
		dims[i] = ty->dims[i].value >= 0 ? ty->dims[i].value : 1;
	if ((rc = oq_rt_alloc(t, ty->dtype, ty->rank, dims)))
		return oq_err(d, rc, "run: input '%s': cannot allocate random data", v->name);
	for (size_t i = 0; i < t->nelem; i++) {
		uint64_t x = splitmix64(&st);
		double val = kind == 'f'   ? (double)(x >> 40) * (1.0 / 16777216.0)
		             : kind == 'b' ? (double)(x >> 63)
		                           : (double)((x >> 32) % 10);
		oq_rt_set(t, i, val);
	}
	return OQ_OK;
}

static int load_one(const oq_exec *e, const oq_sample_src *src, size_t k, oq_rt *t, oq_diag *d)
{
	char *buf;
	size_t len;
	oq_tensor *ten = NULL;
	oq_rt view;
	oq_npy a;
	int rc;

	memset(t, 0, sizeof *t);
	if (src->kind == OQ_SRC_RANDOM)
		return load_random(oq_exec_input(e, k), k, src->seed, t, d);
	if (src->kind == OQ_SRC_NPY) {
		if ((rc = oq_npy_read(src->path, 0, &a, d)))
			return rc;
		if (a.rank > OQ_RT_MAX_RANK) {
			oq_npy_free(&a);
			return oq_err(d, OQ_EUNSUP,
			              "run: %s: rank %d is above the executor's limit of %d",
			              src->path, a.rank, OQ_RT_MAX_RANK);
		}
		/* move the aligned buffer into the runtime tensor */
		t->dtype = a.dtype;
		t->rank = a.rank;
		if (a.rank)
			memcpy(t->dims, a.dims, (size_t)a.rank * sizeof *a.dims);
		t->nelem = a.nelem;
		t->nbytes = a.nbytes;
		t->data = a.data;
		return OQ_OK;
	}
	if ((rc = oq_file_read(src->path, OQ_SAMPLE_MAX_BYTES, "run", NULL, &buf, &len, d)))
		return rc;
	rc = oq_tensor_load_pb(buf, len, src->path, &ten, d);
	free(buf);
	if (rc)
		return rc;
	if ((rc = oq_rt_from_tensor(&view, ten))) {
		oq_tensor_free(ten);
		return oq_err(d, rc, "run: %s: cannot use this tensor (rank %d)", src->path,
		              ten->rank);
	}
	rc = oq_rt_copy(t, &view);
	oq_rt_release(&view);
	oq_tensor_free(ten);
	if (rc) {
		oq_rt_release(t);
		return oq_err(d, rc, "run: out of memory loading %s", src->path);
	}
	return OQ_OK;
}

int oq_sample_load(const oq_samples *s, size_t i, const oq_exec *e, oq_rt *inputs, oq_diag *d)
{
	int rc = OQ_OK;
	for (size_t k = 0; k < s->n_inputs; k++)
		if ((rc = load_one(e, &s->v[i].in[k], k, &inputs[k], d)))
			break;
	if (rc)
		for (size_t k = 0; k < s->n_inputs; k++)
			oq_rt_release(&inputs[k]);
	return rc;
}

/* ---------------------------------------------------------------- oq_run */

/* Min/max/mean over non-NaN elements. */
typedef struct stats {
	double min, max, mean; /* valid when n > 0 */
	size_t n;              /* non-NaN elements */
	size_t nan;            /* NaN elements */
} stats;

static stats summarize(const oq_rt *t)
{
	stats s = {0, 0, 0, 0, 0};
	double sum = 0;
	char k = oq_dtype_kind(t->dtype);

	if (t->strs || (k != 'f' && k != 's' && k != 'u' && k != 'b'))
		return s;
	for (size_t i = 0; i < t->nelem; i++) {
		double v =
		    t->dtype == OQ_DT_FLOAT ? (double)((const float *)t->data)[i] : oq_rt_get(t, i);
		if (isnan(v)) {
			s.nan++;
			continue;
		}
		if (!s.n || v < s.min)
			s.min = v;
		if (!s.n || v > s.max)
			s.max = v;
		sum += v;
		s.n++;
	}
	if (s.n)
		s.mean = sum / (double)s.n;
	return s;
}

static void json_num(FILE *f, int valid, double v)
{
	if (valid && isfinite(v))
		fprintf(f, "%.9g", v);
	else
		fputs("null", f);
}

static void report(FILE *f, const oq_run_opts *o, const oq_sample *x, size_t si, const oq_exec *e,
                   const oq_rt *outs, char *const *files)
{
	size_t n = oq_exec_n_outputs(e);
	char desc[512];

	if (o->json) {
		fprintf(f, "%s{\"name\": ", si ? ", " : "");
		oq_json_str(f, x->name);
		fputs(", \"outputs\": [", f);
		for (size_t i = 0; i < n; i++) {
			stats s = summarize(&outs[i]);
			fprintf(f, "%s{\"name\": ", i ? ", " : "");
			oq_json_str(f, oq_exec_output(e, i)->name);
			fputs(", \"dtype\": ", f);
			oq_json_str(f, oq_dtype_name(outs[i].dtype));
			fputs(", \"shape\": [", f);
			for (int j = 0; j < outs[i].rank; j++)
				fprintf(f, "%s%lld", j ? ", " : "", (long long)outs[i].dims[j]);
			fputs("], \"min\": ", f);
			json_num(f, s.n > 0, s.min);
			fputs(", \"max\": ", f);
			json_num(f, s.n > 0, s.max);
			fputs(", \"mean\": ", f);
			json_num(f, s.n > 0, s.mean);
			fprintf(f, ", \"nan\": %zu", s.nan);
			if (files) {
				fputs(", \"file\": ", f);
				oq_json_str(f, files[i]);
			}
			fputs("}", f);
		}
		fputs("]}", f);
		return;
	}
	if (o->output_dir)
		return;
	if (x->name[0]) {
		fputs("sample ", f);
		oq_text_str(f, x->name);
		fputc('\n', f);
	}
	for (size_t i = 0; i < n; i++) {
		stats s = summarize(&outs[i]);
		fputs("  ", f);
		oq_text_str(f, oq_exec_output(e, i)->name);
		fprintf(f, "  %s", oq_rt_describe(&outs[i], desc, sizeof desc));
		if (s.n)
			fprintf(f, "  min %.6g  max %.6g  mean %.6g", s.min, s.max, s.mean);
		if (s.nan)
			fprintf(f, "  nan %zu", s.nan);
		fputc('\n', f);
	}
}

/* With --output-dir: refuses outputs that would share a file or that npy cannot store, before
 * anything runs. */
static int check_outputs(const oq_exec *e, oq_diag *d)
{
	size_t n = oq_exec_n_outputs(e);
	char a[512], b[512];
	for (size_t i = 0; i < n; i++) {
		const oq_value *v = oq_exec_output(e, i);
		oq_run_file_name(v->name, ".npy", a, sizeof a);
		for (size_t j = i + 1; j < n; j++) {
			const oq_value *w = oq_exec_output(e, j);
			oq_run_file_name(w->name, ".npy", b, sizeof b);
			if (v != w && !strcmp(a, b))
				return oq_err(
				    d, OQ_EUNSUP,
				    "run: outputs '%s' and '%s' would both be written to %s",
				    v->name, w->name, a);
		}
		if (v->type.kind == OQ_TYPE_TENSOR && v->type.dtype && !oq_npy_descr(v->type.dtype))
			return oq_err(d, OQ_EUNSUP,
			              "run: output '%s' is %s, which .npy cannot hold", v->name,
			              oq_dtype_name(v->type.dtype));
	}
	return OQ_OK;
}

static int write_outputs(const oq_run_opts *o, const oq_sample *x, const oq_exec *e,
                         const oq_rt *outs, char **files, oq_diag *d)
{
	char *dir = x->name[0] ? join(o->output_dir, x->name) : oq_strdup(o->output_dir);
	char fname[512];
	int rc;

	if (!dir)
		return oq_err(d, OQ_ENOMEM, "run: out of memory");
	if ((rc = mkdir_p(dir, d)))
		goto done;
	for (size_t i = 0; i < oq_exec_n_outputs(e); i++) {
		const oq_rt *t = &outs[i];
		oq_run_file_name(oq_exec_output(e, i)->name, ".npy", fname, sizeof fname);
		if (!(files[i] = join(dir, fname))) {
			rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
			goto done;
		}
		if (t->strs || !oq_npy_descr(t->dtype)) {
			rc = oq_err(d, OQ_EUNSUP, "run: output '%s' is %s, which .npy cannot hold",
			            oq_exec_output(e, i)->name, oq_dtype_name(t->dtype));
			goto done;
		}
		/* never over one of the sample's own input files */
		for (size_t k = 0; k < oq_exec_n_inputs(e); k++)
			if (x->in[k].kind != OQ_SRC_RANDOM &&
			    (rc = oq_out_not_input(files[i], "run: output", (const char *const *)&x->in[k].path, 1, d)))
				goto done;
		if ((rc =
		         oq_npy_write(files[i], t->dtype, t->rank, t->dims, t->data, t->nbytes, d)))
			goto done;
	}
done:
	free(dir);
	return rc;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int oq_run(oq_model *m, const oq_run_opts *o, FILE *out, oq_diag *d)
{
	oq_exec_opts eo = {.threads = 0, .max_loop_iterations = o->max_loop_iterations};
	oq_exec *e = NULL;
	oq_samples s;
	oq_rt *in = NULL, *outs = NULL;
	char **files = NULL;
	size_t nin = 0, nout = 0;
	double run_ms = 0;
	int rc;

	memset(&s, 0, sizeof s);
	eo.threads = o->threads;
	if (!o->data_dir == !o->n_inputs)
		return oq_err(d, OQ_EUSAGE, "run: give either --data DIR or --input NAME=FILE");
	if ((rc = oq_exec_new(m, &eo, &e, d)))
		return rc;
	nin = oq_exec_n_inputs(e);
	nout = oq_exec_n_outputs(e);
	for (size_t i = 0; i < nin; i++) {
		int kind = oq_exec_input(e, i)->type.kind;
		if (kind != OQ_TYPE_TENSOR && kind != OQ_TYPE_NONE) {
			rc = oq_err(d, OQ_EUNSUP, "run: input '%s' is not a tensor (sequence, optional or map); "
				    "onnxq run feeds tensors only", oq_exec_input(e, i)->name);
			goto fail;
		}
	}
	if (o->output_dir && o->data_dir &&
	    (rc = oq_out_not_input(o->output_dir, "run: --output-dir", &o->data_dir, 1, d)))
		goto fail;
	if (o->output_dir && (rc = check_outputs(e, d)))
		goto fail;
	rc = o->data_dir ? oq_samples_scan(o->data_dir, e, &s, d)
	                 : oq_samples_explicit(o->inputs, o->n_inputs, e, &s, d);
	if (rc || (rc = oq_samples_check(&s, e, d)))
		goto fail;
	if (o->output_dir && (rc = mkdir_p(o->output_dir, d)))
		goto fail;
	in = oq_calloc(nin, sizeof *in);
	outs = oq_calloc(nout, sizeof *outs);
	files = oq_calloc(nout, sizeof *files);
	if (!in || !outs || !files) {
		rc = oq_err(d, OQ_ENOMEM, "run: out of memory");
		goto fail;
	}
	if (o->json) {
		fputs("{\"model\": ", out);
		oq_json_str(out, o->model_path ? o->model_path : "");
		fputs(", \"samples\": [", out);
	}
	oq_exec_profile(e, o->profile);
	for (size_t i = 0; i < s.n; i++) {
		double t0;
		if ((rc = oq_sample_load(&s, i, e, in, d)))
			goto fail;
		t0 = now_ms();
		rc = oq_exec_run(e, in, nin, outs, nout, d);
		run_ms += now_ms() - t0;
		for (size_t k = 0; k < nin; k++)
			oq_rt_release(&in[k]);
		for (size_t k = 0; !rc && k < nout; k++)
			if (outs[k].kind != OQ_RT_TENSOR)
				rc = oq_err(d, OQ_EUNSUP, "run: output '%s' is a %s; onnxq run reports and writes tensors only",
					    oq_exec_output(e, k)->name, outs[k].kind == OQ_RT_SEQ ? "sequence" : "empty optional");
		if (rc)
			goto fail;
		if (o->output_dir && (rc = write_outputs(o, &s.v[i], e, outs, files, d)))
			goto fail;
		report(out, o, &s.v[i], i, e, outs, o->output_dir ? files : NULL);
		for (size_t k = 0; k < nout; k++) {
			oq_rt_release(&outs[k]);
			free(files[k]);
			files[k] = NULL;
		}
	}
	if (o->json)
		fputs("]", out);
	if (o->profile) {
		if (o->json)
			fputs(", \"profile\": ", out);
		if ((rc = oq_profile_report(out, e, s.n, run_ms, o->json, d)))
			goto fail;
	}
	if (o->json)
		fputs("}\n", out);
	rc = OQ_OK;
fail:
	for (size_t k = 0; outs && k < nout; k++)
		oq_rt_release(&outs[k]);
	for (size_t k = 0; files && k < nout; k++)
		free(files[k]);
	free(files);
	free(outs);
	free(in);
	oq_samples_free(&s);
	oq_exec_free(e);
	return rc;
}
