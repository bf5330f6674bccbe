/*
 * oq.h - what every onnxq module shares: status codes, the diagnostic sink,
 * checked size arithmetic and the attribute macros.
 *
 * Library functions return an int status (OQ_OK or a negative OQ_E*) and
 * write one human-readable line into the caller's oq_diag. Only main.c turns
 * a status into an exit code (oq_exit_code) and prints the diagnostic.
 */
#ifndef OQ_H
#define OQ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__) || defined(__clang__)
#define OQ_WUR __attribute__((warn_unused_result))
#define OQ_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define OQ_WUR
#define OQ_PRINTF(f, a)
#endif

/* The version, from CMakeLists.txt's project(). */
const char *oq_version(void);

/* Status codes. Each maps to one documented process exit code. */
enum {
	OQ_OK = 0,
	OQ_EUSAGE = -1,   /* bad command line or impossible option (exit 1) */
	OQ_EINVAL = -2,   /* invalid or unreadable model or data (exit 2) */
	OQ_EUNSUP = -3,   /* valid but unsupported construct (exit 3) */
	OQ_EIO = -4,      /* file system error: open, read, write, rename (exit 4) */
	OQ_ENOMEM = -5,   /* allocation failed (exit 5) */
	OQ_ECHECK = -6,   /* `check` found problems in a model (exit 6) */
};

/* Process exit codes, documented in README.md. */
enum {
	OQ_EXIT_OK = 0,
	OQ_EXIT_USAGE = 1,
	OQ_EXIT_INVALID = 2,
	OQ_EXIT_UNSUPPORTED = 3,
	OQ_EXIT_IO = 4,
	OQ_EXIT_NOMEM = 5,
	OQ_EXIT_CHECK = 6,
};

int oq_exit_code(int status);
const char *oq_status_name(int status);

/*
 * Diagnostic sink: keeps the first error message (later ones usually follow
 * from it) and counts the rest.
 */
typedef struct oq_diag {
	char msg[1024]; /* first error line, without trailing newline */
	int status;     /* status that went with msg, OQ_OK when empty */
	int count;      /* number of errors reported */
} oq_diag;

void oq_diag_init(oq_diag *d);
/* Records an error and returns `status`, so callers can `return oq_err(...)`. */
int oq_err(oq_diag *d, int status, const char *fmt, ...) OQ_PRINTF(3, 4);

/* Checked size arithmetic: return 0 on overflow, 1 on success. */
static inline int oq_mul_size(size_t a, size_t b, size_t *r)
{
	if (a != 0 && b > SIZE_MAX / a)
		return 0;
	*r = a * b;
	return 1;
}

static inline int oq_add_size(size_t a, size_t b, size_t *r)
{
	if (b > SIZE_MAX - a)
		return 0;
	*r = a + b;
	return 1;
}

/* malloc/calloc/realloc that never return NULL for n == 0. */
void *oq_malloc(size_t n);
void *oq_calloc(size_t n, size_t size);
void *oq_realloc(void *p, size_t n);
char *oq_strdup(const char *s);
/* Grows *p (element size `size`) so that it holds at least `need` elements. */
int oq_grow(void *pp, size_t *cap, size_t need, size_t size) OQ_WUR;

/* The decimal number s (digits only, all of s) when it is in [lo, hi] (lo >= 0); -1 otherwise. */
long long oq_parse_count(const char *s, long long lo, long long hi);

/* Writes s as a JSON string literal (quotes and escapes included). */
void oq_json_str(FILE *f, const char *s);
/*
 * Writes s (NULL: nothing) with control characters shown as '?', as oq_err
 * does: names come from files and must not forge lines or drive the
 * terminal in text output.
 */
void oq_text_str(FILE *f, const char *s);

#endif
