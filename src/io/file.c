/*
 * file.c - reading a whole input file (see file.h).
 */
#include "src/io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int oq_file_open(const char *path, const char *what, int not_regular, struct stat *st, oq_diag *d)
{
	int fd, rc;

	/* O_NONBLOCK: opening a FIFO must not wait for a writer before we can refuse it. */
	if ((fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0)
		return oq_err(d, OQ_EIO, "%s: cannot open '%s': %s", what, path, strerror(errno));
	if (fstat(fd, st)) {
		rc = oq_err(d, OQ_EIO, "%s: cannot read '%s': %s", what, path, strerror(errno));
		close(fd);
		return rc;
	}
	if (!S_ISREG(st->st_mode)) {
		rc = oq_err(d, not_regular, "%s: '%s' is not a regular file (%s); give a file", what, path,
			    S_ISDIR(st->st_mode) ? "a folder" : S_ISFIFO(st->st_mode) ? "a FIFO" : "a device or socket");
		close(fd);
		return rc;
	}
	return fd;
}

int oq_file_read(const char *path, size_t max, const char *what, const char *hint, char **buf,
		 size_t *len, oq_diag *d)
{
	struct stat st;
	char *b = NULL;
	size_t n = 0, cap;
	int fd, rc = OQ_OK;

	*buf = NULL;
	*len = 0;
	if ((fd = oq_file_open(path, what, OQ_EINVAL, &st, d)) < 0)
		return fd;
	if ((uintmax_t)st.st_size > max) {
		rc = oq_err(d, OQ_EUSAGE, "%s: '%s' is larger than %zu MiB%s%s", what, path, max >> 20,
			    hint ? "; " : "", hint ? hint : "");
		goto out;
	}
	/* The size may change while we read: read to the end, never past max + 1 bytes. */
	cap = (size_t)st.st_size + 4097;
	if (cap > max + 2)
		cap = max + 2;
	if (!(b = malloc(cap))) {
		rc = oq_err(d, OQ_ENOMEM, "%s: out of memory reading '%s'", what, path);
		goto out;
	}
	for (;;) {
		ssize_t got;
		if (n > max) {
			rc = oq_err(d, OQ_EUSAGE, "%s: '%s' is larger than %zu MiB%s%s", what, path, max >> 20,
				    hint ? "; " : "", hint ? hint : "");
			goto out;
		}
		if (n + 1 == cap) {
			size_t nc = cap > (max + 2) / 2 ? max + 2 : cap * 2;
			char *nb = realloc(b, nc);
			if (!nb) {
				rc = oq_err(d, OQ_ENOMEM, "%s: out of memory reading '%s'", what, path);
				goto out;
			}
			b = nb;
			cap = nc;
		}
		got = read(fd, b + n, cap - 1 - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = oq_err(d, OQ_EIO, "%s: cannot read '%s': %s", what, path, strerror(errno));
			goto out;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	b[n] = 0;
	*buf = b;
	*len = n;
	b = NULL;
out:
	free(b);
	close(fd);
	return rc;
}

size_t oq_text_line(const char *buf, const char *p)
{
	size_t line = 1;
	for (const char *q = buf; q < p && *q; q++)
		line += *q == '\n';
	return line;
}
