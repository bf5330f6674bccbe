/*
 * fuzz_util.h - checks shared by the libFuzzer targets (header only: each
 * target is one executable).
 */
#ifndef OQ_FUZZ_UTIL_H
#define OQ_FUZZ_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "src/oq.h"

/*
 * A failed stage (rc != OQ_OK) must come with a real (negative) status and
 * one printable line: names from the file must not smuggle newlines or
 * terminal escapes into the message. Aborts (a finding) otherwise.
 */
static inline void fuzz_expect_message(int rc, const oq_diag *d, const char *who)
{
	int printable = d->msg[0] != '\0';
	if (!rc)
		return;
	for (const char *s = d->msg; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			printable = 0;
	if (d->count == 0 || !printable || rc >= 0) {
		fprintf(stderr, "%s failed (%d) without a printable one-line message: '%s'\n", who, rc, d->msg);
		abort();
	}
}

#endif
