/*
 * diag.c - status codes, exit codes and the diagnostic sink; small
 * allocation helpers shared by every module.
 */
#include "src/oq.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int oq_exit_code(int status)
{
	switch (status) {
	case OQ_OK: return OQ_EXIT_OK;
	case OQ_EUSAGE: return OQ_EXIT_USAGE;
	case OQ_EINVAL: return OQ_EXIT_INVALID;
	case OQ_EUNSUP: return OQ_EXIT_UNSUPPORTED;
	case OQ_EIO: return OQ_EXIT_IO;
	case OQ_ENOMEM: return OQ_EXIT_NOMEM;
	case OQ_ECHECK: return OQ_EXIT_CHECK;
	default: return OQ_EXIT_INVALID;
	}
}

const char *oq_version(void)
{
	return OQ_VERSION;
}

const char *oq_status_name(int status)
{
	switch (status) {
	case OQ_OK: return "ok";
	case OQ_EUSAGE: return "usage error";
	case OQ_EINVAL: return "invalid input";
	case OQ_EUNSUP: return "unsupported";
	case OQ_EIO: return "I/O error";
	case OQ_ENOMEM: return "out of memory";
	case OQ_ECHECK: return "check failed";
	default: return "error";
	}
}

void oq_diag_init(oq_diag *d)
{
	d->msg[0] = '\0';
	d->status = OQ_OK;
	d->count = 0;
}

int oq_err(oq_diag *d, int status, const char *fmt, ...)
{
	if (d) {
		if (d->count == 0) {
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(d->msg, sizeof d->msg, fmt, ap);
			va_end(ap);
			/* Names come from files: keep the message one printable line. */
			for (char *c = d->msg; *c; c++)
				if ((unsigned char)*c < 0x20 || *c == 0x7f)
					*c = '?';
			d->status = status;
		}
		d->count++;
	}
	return status;
}

void *oq_malloc(size_t n)
{
	return malloc(n ? n : 1);
}

void *oq_calloc(size_t n, size_t size)
{
	if (n == 0 || size == 0)
		return calloc(1, 1);
	return calloc(n, size);
}

void *oq_realloc(void *p, size_t n)
{
	return realloc(p, n ? n : 1);
}

char *oq_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *r = malloc(n);
	if (r)
		memcpy(r, s, n);
	return r;
}

int oq_grow(void *pp, size_t *cap, size_t need, size_t size)
{
	void **p = pp;
	size_t ncap, bytes;
	void *np;

	if (need <= *cap)
		return OQ_OK;
	ncap = *cap ? *cap : 8;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return OQ_ENOMEM;
		ncap *= 2;
	}
	if (!oq_mul_size(ncap, size, &bytes))
		return OQ_ENOMEM;
	np = realloc(*p, bytes);
	if (!np)
		return OQ_ENOMEM;
	*p = np;
	*cap = ncap;
	return OQ_OK;
}

long long oq_parse_count(const char *s, long long lo, long long hi)
{
	char *end;
	long long v;
	if (*s < '0' || *s > '9')
		return -1;
	v = strtoll(s, &end, 10);
	return (*end || v < lo || v > hi) ? -1 : v;
}

void oq_text_str(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		fputc(c < 0x20 || c == 0x7f ? '?' : c, f);
	}
}

void oq_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}
