/*
 * roundtrip.c - load -> save -> load round-trip check over many models.
 *
 *   roundtrip DIR_OR_MODEL... [--external-data] [--external-threshold BYTES]
 *                             [--tmpdir DIR] [-v]
 *
 * Every *.onnx file given, or found below a given folder (sorted, so runs
 * are reproducible), is loaded, saved with oq_model_save into a private
 * temporary folder (with external data when asked), loaded again and
 * compared with oq_test_model_diff (IR and kept protobuf, initializers
 * bitwise). The reloaded model is then saved a second time, and the two
 * saved files (and .data files) must be byte-identical: saving is a
 * function of the model, not of how it was stored.
 *
 * --self-test checks the checker instead: each model is loaded twice, the
 * second copy is changed in one small way (IR version, a node name, one
 * initializer byte, one attribute value, one declared dim, the model doc
 * string, a metadata entry) and oq_test_model_diff must report it. Each
 * applicable mutation is one test.
 *
 * --compare A B checks instead that two model files (e.g. a model and its
 * `onnxq convert` copy) load to equal models.
 *
 * Each model runs in a child process, so a crash or a sanitizer abort on
 * one model is reported as that model's failure and the run goes on.
 *
 * A model the loader refuses in the first place counts as a failure too
 * (the inputs are meant to be valid models). Prints one line per failure
 * and closes with "N passed, N failed"; exit 1 on any failure, 2 on usage.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "irdiff.h"
#include "onnx.pb-c.h"
#include "src/io/onnx_io.h"

/* A growable list of model paths. */
typedef struct paths {
	char **p;          /* owned path strings */
	size_t n, cap;     /* used and allocated entries */
} paths;

static int add_path(paths *l, const char *s)
{
	char *d = oq_strdup(s);
	if (!d || oq_grow(&l->p, &l->cap, l->n + 1, sizeof *l->p)) {
		free(d);
		return -1;
	}
	l->p[l->n++] = d;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n >= k && strcmp(s + n - k, suf) == 0;
}

/* Adds every *.onnx below dir (depth-limited), in sorted order. */
static int collect(paths *l, const char *dir, int depth)
{
	DIR *dp;
	struct dirent *e;
	paths here = {0};
	int rc = 0;

	if (depth > 8)
		return 0;
	if (!(dp = opendir(dir))) {
		fprintf(stderr, "roundtrip: cannot open folder '%s': %s\n", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(dp))) {
		char *full;
		size_t len;
		if (e->d_name[0] == '.')
			continue;
		len = strlen(dir) + strlen(e->d_name) + 2;
		if (!(full = malloc(len))) {
			rc = -1;
			break;
		}
		snprintf(full, len, "%s/%s", dir, e->d_name);
		if (add_path(&here, full))
			rc = -1;
		free(full);
		if (rc)
			break;
	}
	closedir(dp);
	if (here.n)
		qsort(here.p, here.n, sizeof *here.p, by_name);
	for (size_t i = 0; i < here.n; i++) {
		struct stat st;
		if (!rc && stat(here.p[i], &st) == 0) {
			if (S_ISDIR(st.st_mode))
				rc = collect(l, here.p[i], depth + 1);
			else if (S_ISREG(st.st_mode) && ends_with(here.p[i], ".onnx"))
				rc = add_path(l, here.p[i]);
		}
		free(here.p[i]);
	}
	free(here.p);
	return rc;
}

/* Whole file into memory; *len set. NULL when unreadable (ENOENT: *missing = 1). */
static unsigned char *slurp(const char *path, size_t *len, int *missing)
{
	FILE *f = fopen(path, "rb");
	unsigned char *p = NULL;
	long sz;

	*len = 0;
	*missing = 0;
	if (!f) {
		*missing = errno == ENOENT;
		return NULL;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
		goto fail;
	if (!(p = oq_malloc((size_t)sz)))
		goto fail;
	if (sz && fread(p, 1, (size_t)sz, f) != (size_t)sz)
		goto fail;
	fclose(f);
	*len = (size_t)sz;
	return p;
fail:
	free(p);
	fclose(f);
	return NULL;
}

/* 0 when both files are byte-identical or both absent; else 1 with why. */
static int same_file(const char *a, const char *b, char *why, size_t n)
{
	size_t la, lb;
	int ma, mb, r = 0;
	unsigned char *pa = slurp(a, &la, &ma), *pb = slurp(b, &lb, &mb);

	if (!pa || !pb) {
		if (!(ma && mb && !pa && !pb)) {
			snprintf(why, n, "second save: '%s' / '%s' unreadable or present only once", a, b);
			r = 1;
		}
	} else if (la != lb || (la && memcmp(pa, pb, la) != 0)) {
		size_t i = 0;
		while (i < la && i < lb && pa[i] == pb[i])
			i++;
		snprintf(why, n, "second save not byte-identical: %s is %zu vs %zu bytes, first difference at byte %zu",
			 a, la, lb, i);
		r = 1;
	}
	free(pa);
	free(pb);
	return r;
}

typedef struct opts {
	oq_save_opts save; /* passed to every oq_model_save */
	const char *tmpdir; /* where the work folder goes (default $TMPDIR or /tmp) */
	int self_test;     /* check that oq_test_model_diff sees mutations */
	int verbose;       /* also print one line per passing model */
} opts;

/* Removes the files of folder dir (the model and its content-named data file). */
static void clean_dir(const char *dir)
{
	DIR *dh = opendir(dir);
	struct dirent *e;
	char f[1400];
	while (dh && (e = readdir(dh)))
		if (e->d_name[0] != '.') {
			snprintf(f, sizeof f, "%s/%s", dir, e->d_name);
			unlink(f);
		}
	if (dh)
		closedir(dh);
}

/* Round-trips one model; 0 ok, 1 failure (why filled). */
static int one(const char *path, const opts *o, const char *work, char *why, size_t n)
{
	char out1[1100], out2[1100], d1[1500], d2[1500];
	oq_model *a = NULL, *b = NULL;
	oq_save_info i1, i2;
	oq_diag d;
	int r = 1;

	/* Same file name in two folders: external data locations then match. */
	snprintf(out1, sizeof out1, "%s/1/model.onnx", work);
	snprintf(out2, sizeof out2, "%s/2/model.onnx", work);
	oq_diag_init(&d);
	if (oq_model_load(path, &a, &d)) {
		snprintf(why, n, "load: %s", d.msg);
		goto out;
	}
	if (oq_model_save(a, out1, &o->save, &i1, &d)) {
		snprintf(why, n, "save: %s", d.msg);
		goto out;
	}
	if (oq_model_load(out1, &b, &d)) {
		snprintf(why, n, "reload: %s", d.msg);
		goto out;
	}
	if (oq_test_model_diff(a, b, why, n))
		goto out;
	if (oq_model_save(b, out2, &o->save, &i2, &d)) {
		snprintf(why, n, "second save: %s", d.msg);
		goto out;
	}
	snprintf(d1, sizeof d1, "%s/1/%s", work, i1.data_name[0] ? i1.data_name : "none.data");
	snprintf(d2, sizeof d2, "%s/2/%s", work, i2.data_name[0] ? i2.data_name : "none.data");
	if (same_file(out1, out2, why, n) || same_file(d1, d2, why, n))
		goto out;
	r = 0;
out:
	oq_model_free(a);
	oq_model_free(b);
	snprintf(d1, sizeof d1, "%s/1", work);
	snprintf(d2, sizeof d2, "%s/2", work);
	clean_dir(d1);
	clean_dir(d2);
	return r;
}

enum { MUT_IR, MUT_NODE_NAME, MUT_INIT_BYTE, MUT_ATTR, MUT_DIM, MUT_DOC, MUT_META, MUT_COUNT };

static const char *const mut_name[MUT_COUNT] = {
	"ir_version", "node name", "initializer byte", "attribute value", "declared dim",
	"model doc_string", "metadata_props value",
};

/* Replaces *s by a malloc'd copy of v (the protobuf is freed with free()). */
static int set_str(char **s, const char *v)
{
	char *d = oq_strdup(v);
	if (!d)
		return -1;
	free(*s);
	*s = d;
	return 0;
}

/* Applies mutation k to m; 1 applied, 0 not applicable, -1 error. */
static int mutate(oq_model *m, int k)
{
	oq_graph *g = m->graph;
	Onnx__ModelProto *mp = m->proto;

	switch (k) {
	case MUT_IR: m->ir_version++; return 1;
	case MUT_NODE_NAME:
		if (!g->n_nodes)
			return 0;
		return set_str(&g->nodes[0]->name, "oq-mutated") ? -1 : 1;
	case MUT_INIT_BYTE:
		for (size_t i = 0; i < g->n_inits; i++) {
			oq_tensor *t = g->inits[i]->init;
			if (t->dtype == OQ_DT_STRING || !t->nbytes)
				continue;
			if (oq_tensor_own(t))
				return -1;
			((unsigned char *)t->data)[t->nbytes - 1] ^= 1;
			return 1;
		}
		return 0;
	case MUT_ATTR:
		for (size_t i = 0; i < g->n_nodes; i++)
			for (size_t j = 0; j < g->nodes[i]->n_attrs; j++) {
				oq_attr *a = &g->nodes[i]->attrs[j];
				if (a->type == OQ_ATTR_INT) {
					a->i ^= 2;
					return 1;
				}
				if (a->type == OQ_ATTR_FLOAT) {
					a->f = a->f * 2.0f + 1.0f;
					return 1;
				}
				if (a->type == OQ_ATTR_INTS && a->n) {
					a->ints[a->n - 1] ^= 2;
					return 1;
				}
			}
		return 0;
	case MUT_DIM:
		for (size_t i = 0; i < g->n_inputs; i++) {
			oq_type *t = &g->inputs[i]->type;
			if (t->rank > 0) {
				t->dims[0].value = t->dims[0].value == 7 ? 8 : 7;
				return 1;
			}
		}
		return 0;
	case MUT_DOC: return set_str(&mp->doc_string, "oq-mutated doc") ? -1 : 1;
	case MUT_META:
		if (!mp->n_metadata_props)
			return 0;
		return set_str(&mp->metadata_props[0]->value, "oq-mutated") ? -1 : 1;
	}
	return 0;
}

/* Runs every mutation on one model; counts passes and failures. */
static void self_test(const char *path, size_t *passed, size_t *failed)
{
	char why[2048];

	for (int k = 0; k < MUT_COUNT; k++) {
		oq_model *a = NULL, *b = NULL;
		oq_diag d;
		int r;
		oq_diag_init(&d);
		if (oq_model_load(path, &a, &d) || oq_model_load(path, &b, &d)) {
			printf("FAIL %s: load: %s\n", path, d.msg);
			(*failed)++;
			oq_model_free(a);
			return;
		}
		if (oq_test_model_diff(a, b, why, sizeof why)) {
			printf("FAIL %s: two loads differ: %s\n", path, why);
			(*failed)++;
		} else if ((r = mutate(b, k)) < 0) {
			printf("FAIL %s: out of memory\n", path);
			(*failed)++;
		} else if (r > 0) {
			if (oq_test_model_diff(a, b, why, sizeof why)) {
				(*passed)++;
			} else {
				printf("FAIL %s: mutation '%s' not detected\n", path, mut_name[k]);
				(*failed)++;
			}
		}
		oq_model_free(a);
		oq_model_free(b);
	}
}

/* Exit status of a child whose model failed (it printed its FAIL line). */
#define CHILD_FAILED 3

/*
 * Runs one() in a child process; 0 passed, 1 failed. A child killed by a
 * signal or exiting with anything else (sanitizers exit 1) is a crash.
 */
static int isolated(const char *path, const opts *o, const char *work)
{
	char why[2048];
	pid_t pid;
	int st;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		printf("FAIL %s: fork: %s\n", path, strerror(errno));
		return 1;
	}
	if (pid == 0) {
		int r = one(path, o, work, why, sizeof why);
		if (r)
			printf("FAIL %s: %s\n", path, why);
		fflush(stdout);
		_exit(r ? CHILD_FAILED : 0);
	}
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			printf("FAIL %s: waitpid: %s\n", path, strerror(errno));
			return 1;
		}
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	if (WIFEXITED(st) && WEXITSTATUS(st) == CHILD_FAILED)
		return 1;
	if (WIFSIGNALED(st))
		printf("FAIL %s: crashed (signal %d)\n", path, WTERMSIG(st));
	else
		printf("FAIL %s: crashed or sanitizer error (exit %d; see stderr)\n", path, WEXITSTATUS(st));
	/* The child may have died before cleaning up. */
	for (int k = 1; k <= 2; k++) {
		char f[1200];
		snprintf(f, sizeof f, "%s/%d", work, k);
		clean_dir(f);
	}
	return 1;
}

/* --compare: loads two files and diffs them; 0 equal. */
static int compare_files(const char *pa, const char *pb)
{
	oq_model *a = NULL, *b = NULL;
	oq_diag d;
	char why[2048];
	int r = 1;

	oq_diag_init(&d);
	if (oq_model_load(pa, &a, &d) || oq_model_load(pb, &b, &d))
		printf("FAIL %s vs %s: load: %s\n", pa, pb, d.msg);
	else if (oq_test_model_diff(a, b, why, sizeof why))
		printf("FAIL %s vs %s: %s\n", pa, pb, why);
	else
		r = 0;
	oq_model_free(a);
	oq_model_free(b);
	printf("%d passed, %d failed\n", !r, r);
	return r;
}

static int usage(void)
{
	fputs("usage: roundtrip DIR_OR_MODEL... [--external-data] [--external-threshold BYTES]\n"
	      "                 [--tmpdir DIR] [-v]\n"
	      "       roundtrip DIR_OR_MODEL... --self-test\n"
	      "       roundtrip --compare MODEL_A MODEL_B\n",
	      stderr);
	return 2;
}

int main(int argc, char **argv)
{
	opts o;
	paths l = {0};
	char work[1024], sub1[1030], sub2[1030];
	size_t passed = 0, failed = 0;
	const char *tmp;

	memset(&o, 0, sizeof o);
	if (argc == 4 && strcmp(argv[1], "--compare") == 0)
		return compare_files(argv[2], argv[3]);
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (strcmp(argv[i], "--external-data") == 0) {
			o.save.external_data = 1;
		} else if (strcmp(argv[i], "--external-threshold") == 0 && i + 1 < argc) {
			char *end;
			unsigned long long v = strtoull(argv[++i], &end, 10);
			if (*end || argv[i][0] == '-')
				return usage();
			o.save.external_threshold = (size_t)v;
		} else if (strcmp(argv[i], "--tmpdir") == 0 && i + 1 < argc) {
			o.tmpdir = argv[++i];
		} else if (strcmp(argv[i], "--self-test") == 0) {
			o.self_test = 1;
		} else if (strcmp(argv[i], "-v") == 0) {
			o.verbose = 1;
		} else if (argv[i][0] == '-') {
			return usage();
		} else if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "roundtrip: %s: %s\n", argv[i], strerror(errno));
			return 2;
		} else if (S_ISDIR(st.st_mode) ? collect(&l, argv[i], 0) : add_path(&l, argv[i])) {
			return 2;
		}
	}
	if (!l.n) {
		fprintf(stderr, "roundtrip: no models given or found\n");
		return usage();
	}
	if (o.self_test) {
		for (size_t i = 0; i < l.n; i++) {
			self_test(l.p[i], &passed, &failed);
			free(l.p[i]);
		}
		free(l.p);
		printf("%zu passed, %zu failed\n", passed, failed);
		return failed ? 1 : 0;
	}
	tmp = o.tmpdir ? o.tmpdir : getenv("TMPDIR");
	snprintf(work, sizeof work, "%s/oq-roundtrip.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(work)) {
		fprintf(stderr, "roundtrip: cannot create a temporary folder in %s: %s\n",
			tmp && *tmp ? tmp : "/tmp", strerror(errno));
		return 2;
	}
	snprintf(sub1, sizeof sub1, "%s/1", work);
	snprintf(sub2, sizeof sub2, "%s/2", work);
	if (mkdir(sub1, 0700) != 0 || mkdir(sub2, 0700) != 0) {
		fprintf(stderr, "roundtrip: cannot create folders in %s: %s\n", work, strerror(errno));
		return 2;
	}
	for (size_t i = 0; i < l.n; i++) {
		switch (isolated(l.p[i], &o, work)) {
		case 0:
			if (o.verbose)
				printf("ok   %s\n", l.p[i]);
			passed++;
			break;
		default: failed++; break;
		}
		free(l.p[i]);
	}
	free(l.p);
	rmdir(sub1);
	rmdir(sub2);
	rmdir(work);
	printf("%zu passed, %zu failed\n", passed, failed);
	return failed ? 1 : 0;
}
