/*
 * outfile.h - writing an output file so that it can never destroy or
 * mismatch anything: a temporary file beside the target, renamed over it
 * only when everything was written.
 *
 * What an output path may name (oq_out_open):
 * - nothing yet, or a regular file: written through a temporary file in the
 *   same folder and renamed over it; a replaced file keeps its permission
 *   bits;
 * - a symlink to a regular file: the target is written the same way (the
 *   temporary file in the target's folder), the link stays;
 * - "-" or /dev/stdout, when the caller allows it (OQ_OUT_STDOUT): the bytes
 *   stream to standard output, nothing is renamed;
 * - anything else (a device, FIFO, socket, folder, dangling symlink) is
 *   refused: renaming over it would replace a device node by a file.
 *
 * Temporary files are registered until committed or aborted: SIGINT and
 * SIGTERM remove the registered ones, then end the process as the signal
 * would have (handlers installed on first use, only where none was set).
 */
#ifndef OQ_OUTFILE_H
#define OQ_OUTFILE_H

#include "src/oq.h"

/* oq_out_open flags. */
enum {
	OQ_OUT_STDOUT = 1, /* "-" and /dev/stdout write to standard output */
};

typedef struct oq_outfile {
	char *target;  /* the file renamed over (a symlink's resolved target); NULL when streaming */
	char *tmp;     /* the temporary file beside target, or NULL */
	int fd;        /* where to write: the temporary file, or 1 when streaming; -1 when closed */
	int slot;      /* signal registry entry of tmp, or -1 */
	int streaming; /* writing to standard output */
} oq_outfile;

/*
 * Opens a way to write `path` (see the header comment); `what` starts the
 * messages ("save", "stats"). OQ_EIO naming the path when it cannot be
 * written or names something that is not a regular file, OQ_ENOMEM.
 */
int oq_out_open(oq_outfile *f, const char *path, const char *what, unsigned flags, oq_diag *d) OQ_WUR;

/* Closes and renames the temporary file over the target (no-op rename when streaming); on
 * failure the temporary file is removed. f is released either way. */
int oq_out_commit(oq_outfile *f, const char *what, oq_diag *d) OQ_WUR;

/* Closes and removes the temporary file; f is released (NULL-safe, idempotent). */
void oq_out_abort(oq_outfile *f);

/*
 * A temporary file name is registered for removal on SIGINT/SIGTERM until
 * unregistered. Returns the slot (or -1 when the registry is full: the file
 * is then only removed by the normal paths).
 */
int oq_out_register(const char *tmp);
void oq_out_unregister(int slot);

/* Writes all n bytes to fd (retrying short writes and EINTR); 0 or the errno. */
int oq_out_write_all(int fd, const void *p, size_t n);

/*
 * OQ_EUSAGE naming both when `out` (an output about to be written) is the
 * same file as one of inputs[0..n) (same device and inode: symlinks and
 * other spellings included); `what` names the output's option. NULL
 * entries are skipped; an output that does not exist yet is no input.
 */
int oq_out_not_input(const char *out, const char *what, const char *const *inputs, size_t n,
		     oq_diag *d) OQ_WUR;

#endif
