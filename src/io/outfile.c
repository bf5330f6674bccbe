/*
 * outfile.c - output files through a temporary file and a rename (see
 * outfile.h), and the registry that removes temporary files on SIGINT and
 * SIGTERM.
 *
 * The registry is a fixed table of path buffers, each with a flag the
 * signal handler reads: a slot is filled before its flag is set and the
 * flag cleared before the slot is reused, with signal fences between, so
 * the handler only ever unlinks complete paths. The handler calls only
 * async-signal-safe functions (unlink, signal, raise).
 */
#include "src/io/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ registry */

#define OQ_OUT_SLOTS 32
#define OQ_OUT_PATH 4096

static char reg_path[OQ_OUT_SLOTS][OQ_OUT_PATH];
static volatile sig_atomic_t reg_used[OQ_OUT_SLOTS];
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static int reg_installed;

static void on_signal(int sig)
{
	for (int i = 0; i < OQ_OUT_SLOTS; i++)
		if (reg_used[i])
			unlink(reg_path[i]);
	signal(sig, SIG_DFL);
	raise(sig); /* delivered when the handler returns: the default action ends the process */
}

/* Installs on_signal for SIGINT and SIGTERM where the disposition is the default. */
static void install(void)
{
	static const int sigs[2] = {SIGINT, SIGTERM};
	for (int i = 0; i < 2; i++) {
		struct sigaction old, sa;
		if (sigaction(sigs[i], NULL, &old) || old.sa_handler != SIG_DFL ||
		    (old.sa_flags & SA_SIGINFO))
			continue;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_signal;
		sigemptyset(&sa.sa_mask);
		sigaddset(&sa.sa_mask, SIGINT);
		sigaddset(&sa.sa_mask, SIGTERM);
		(void)sigaction(sigs[i], &sa, NULL);
	}
}

int oq_out_register(const char *tmp)
{
	size_t n = strlen(tmp);
	int slot = -1;

	if (n >= OQ_OUT_PATH)
		return -1;
	pthread_mutex_lock(&reg_mu);
	if (!reg_installed) {
		install();
		reg_installed = 1;
	}
	for (int i = 0; i < OQ_OUT_SLOTS && slot < 0; i++)
		if (!reg_used[i])
			slot = i;
	if (slot >= 0) {
		memcpy(reg_path[slot], tmp, n + 1);
		atomic_signal_fence(memory_order_seq_cst);
		reg_used[slot] = 1;
	}
	pthread_mutex_unlock(&reg_mu);
	return slot;
}

void oq_out_unregister(int slot)
{
	if (slot < 0 || slot >= OQ_OUT_SLOTS)
		return;
	pthread_mutex_lock(&reg_mu);
	reg_used[slot] = 0;
	atomic_signal_fence(memory_order_seq_cst);
	pthread_mutex_unlock(&reg_mu);
}

/* ------------------------------------------------------------ files */

int oq_out_write_all(int fd, const void *p, size_t n)
{
	const unsigned char *q = p;
	while (n) {
		ssize_t w = write(fd, q, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return errno;
		if (w == 0)
			return EIO;
		q += w;
		n -= (size_t)w;
	}
	return 0;
}

static const char *kind_of(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "a device";
}

int oq_out_open(oq_outfile *f, const char *path, const char *what, unsigned flags, oq_diag *d)
{
	struct stat st;
	mode_t keep = 0;
	int have = 0, e;
	size_t l;

	memset(f, 0, sizeof *f);
	f->fd = -1;
	f->slot = -1;
	if ((flags & OQ_OUT_STDOUT) && (!strcmp(path, "-") || !strcmp(path, "/dev/stdout"))) {
		f->streaming = 1;
		f->fd = 1;
		return OQ_OK;
	}
	if (lstat(path, &st) == 0) {
		if (S_ISLNK(st.st_mode)) {
			char *real = realpath(path, NULL);
			if (!real)
				return oq_err(d, OQ_EIO, "%s: '%s' is a symlink to nothing (%s); refused: give a file",
					      what, path, strerror(errno));
			if (stat(real, &st) || !S_ISREG(st.st_mode)) {
				e = oq_err(d, OQ_EIO, "%s: '%s' is a symlink to '%s', which is not a regular file; "
					   "refused: writing would replace it by a file", what, path, real);
				free(real);
				return e;
			}
			f->target = real;
		} else if (!S_ISREG(st.st_mode)) {
			return oq_err(d, OQ_EIO, "%s: '%s' is %s, not a regular file; refused: writing would "
				      "replace it by a file (give a file%s)", what, path, kind_of(st.st_mode),
				      (flags & OQ_OUT_STDOUT) ? ", or '-' for standard output" : "");
		}
		keep = st.st_mode & 07777;
		have = 1;
	} else if (errno != ENOENT) {
		return oq_err(d, OQ_EIO, "%s: cannot write '%s': %s", what, path, strerror(errno));
	}
	if (!f->target && !(f->target = oq_strdup(path)))
		return oq_err(d, OQ_ENOMEM, "%s: out of memory", what);
	l = strlen(f->target);
	if (!(f->tmp = malloc(l + 16))) {
		oq_out_abort(f);
		return oq_err(d, OQ_ENOMEM, "%s: out of memory", what);
	}
	memcpy(f->tmp, f->target, l);
	memcpy(f->tmp + l, ".tmp.XXXXXX", 12);
	if ((f->fd = mkstemp(f->tmp)) < 0) {
		e = errno;
		free(f->tmp);
		f->tmp = NULL;
		oq_out_abort(f);
		return oq_err(d, OQ_EIO, "%s: cannot create a temporary file beside '%s': %s", what, path,
			      strerror(e));
	}
	f->slot = oq_out_register(f->tmp);
	if (!have) { /* mkstemp makes 0600; outputs are ordinary files */
		mode_t um = umask(0);
		umask(um);
		keep = 0666 & ~um;
	}
	(void)fchmod(f->fd, keep);
	return OQ_OK;
}

void oq_out_abort(oq_outfile *f)
{
	if (!f->streaming && f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	if (f->tmp)
		unlink(f->tmp);
	oq_out_unregister(f->slot);
	f->slot = -1;
	free(f->tmp);
	free(f->target);
	f->tmp = f->target = NULL;
}

int oq_out_commit(oq_outfile *f, const char *what, oq_diag *d)
{
	int rc = OQ_OK;

	if (f->streaming) {
		f->fd = -1;
		return OQ_OK;
	}
	if (f->fd >= 0 && close(f->fd) != 0)
		rc = oq_err(d, OQ_EIO, "%s: cannot write '%s': %s", what, f->target, strerror(errno));
	f->fd = -1;
	if (!rc && rename(f->tmp, f->target) != 0)
		rc = oq_err(d, OQ_EIO, "%s: cannot rename the temporary file to '%s': %s", what, f->target,
			    strerror(errno));
	if (!rc) {
		free(f->tmp);
		f->tmp = NULL; /* renamed: nothing to remove */
	}
	oq_out_abort(f);
	return rc;
}

int oq_out_not_input(const char *out, const char *what, const char *const *inputs, size_t n, oq_diag *d)
{
	struct stat so, si;

	if (!out || stat(out, &so) != 0)
		return OQ_OK;
	for (size_t i = 0; i < n; i++)
		if (inputs[i] && stat(inputs[i], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
			return oq_err(d, OQ_EUSAGE,
				      "%s '%s' is the input '%s' (the same file); refused: write the output "
				      "elsewhere", what, out, inputs[i]);
	return OQ_OK;
}
