/*
 * file.h - reading a whole input file (samples, JSON settings) into memory.
 *
 * Input files are untrusted and may be anything a path can name: only a
 * regular file is read (a FIFO would block forever, a device may never
 * end), and never more than the caller's limit.
 */
#ifndef OQ_FILE_H
#define OQ_FILE_H

#include <stddef.h>

#include "src/oq.h"

struct stat;

/*
 * Opens `path` read-only and returns the descriptor, or a negative status:
 * OQ_EIO when it cannot be opened, `not_regular` when it is not a regular
 * file (a FIFO is refused, never waited on: it is opened O_NONBLOCK, and a
 * regular file ignores that flag). *st receives its fstat.
 */
int oq_file_open(const char *path, const char *what, int not_regular, struct stat *st, oq_diag *d) OQ_WUR;

/*
 * Reads the regular file `path` into a new buffer (*buf, caller frees) of
 * *len bytes plus a terminating NUL, so text can be parsed in place.
 * `what` starts every message ("overrides", "run"). OQ_EIO when it cannot
 * be opened or read, OQ_EINVAL when it is not a regular file, OQ_EUSAGE when
 * it holds more than `max` bytes (with `hint` appended when not NULL),
 * OQ_ENOMEM.
 */
int oq_file_read(const char *path, size_t max, const char *what, const char *hint, char **buf,
		 size_t *len, oq_diag *d) OQ_WUR;

/* The 1-based line of position p in the NUL-terminated text buf. */
size_t oq_text_line(const char *buf, const char *p);

#endif
