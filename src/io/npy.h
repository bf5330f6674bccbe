/*
 * npy.h - NumPy .npy files on plain buffers (dtype, rank, dims, data).
 *
 * Format (numpy/lib/format.py, NEP 1): the magic "\x93NUMPY", a major and
 * minor version byte, the header length (2 bytes little-endian for v1,
 * 4 bytes for v2 and v3), then an ASCII (v3: UTF-8) Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), } padded with
 * spaces and ended by '\n', then the raw element bytes in C order.
 *
 * Supported element types (descr -> ONNX dtype): f2 f4 f8, i1 i2 i4 i8,
 * u1 u2 u4 u8, b1 (bool). Little-endian ('<'), big-endian ('>', swapped on
 * read) and byte-order-free ('|') descrs are accepted; we write '<' (or
 * '|' for one-byte types), as numpy does on little-endian hosts. Fortran
 * order, structured or object dtypes are refused with an error that names
 * the file. Element bytes in memory are little-endian, as in the IR. The
 * reader is strict: the data must be exactly as long as the header's shape
 * says, so truncated and padded files are both rejected.
 *
 * src/ does not depend on the executor: callers move `data` into their
 * own tensors (it is 64-byte aligned and freed with free()).
 */
#ifndef OQ_NPY_H
#define OQ_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "src/ir/ir.h"
#include "src/oq.h"

/* An array read from (or to be written to) a .npy file. */
typedef struct oq_npy {
	int dtype;                 /* oq_dtype (ONNX number) */
	int rank;                  /* number of dims, 0 for a scalar */
	int64_t dims[OQ_MAX_RANK]; /* rank entries, each >= 0 */
	size_t nelem;              /* product of dims */
	size_t nbytes;             /* bytes of data (nelem * element size) */
	void *data; /* owned, 64-byte aligned, little-endian; NULL after a header-only read */
	size_t data_offset; /* where the element bytes start in the file */
	int version;        /* format major version 1, 2 or 3 */
} oq_npy;

/* The npy descr for an ONNX dtype ("<f4", "|b1"), or NULL when npy cannot hold it. */
const char *oq_npy_descr(int dtype);
/* ONNX dtype for a descr ("<f4", ">i8", "|u1", "b1"), or -1 when unsupported. */
int oq_npy_dtype(const char *descr);

/*
 * Parses a whole .npy file held in memory; `what` names it in messages.
 * With header_only, stops after the header (data stays NULL) but still
 * checks that `len` matches the shape. OQ_EINVAL for malformed files,
 * OQ_EUNSUP for valid ones we cannot use (Fortran order, dtype), OQ_ENOMEM.
 */
int oq_npy_parse(const void *buf, size_t len, const char *what, int header_only, oq_npy *out,
                 oq_diag *d) OQ_WUR;

/* Reads a .npy file (header only: reads just the header and checks the file size). Adds OQ_EIO. */
int oq_npy_read(const char *path, int header_only, oq_npy *out, oq_diag *d) OQ_WUR;

/* Frees data and zeroes *a (safe on a zeroed struct). */
void oq_npy_free(oq_npy *a);

/*
 * Formats the header (magic to '\n', total a multiple of 64 bytes) for an
 * array into buf; *len receives its size. Version 1 unless the header needs
 * more than 65535 bytes (then 2). OQ_EUNSUP for dtypes npy cannot hold,
 * OQ_EINVAL when buf is too small (cap >= 256 + 24 * rank is always enough).
 */
int oq_npy_header(int dtype, int rank, const int64_t *dims, char *buf, size_t cap,
                  size_t *len) OQ_WUR;

/*
 * Writes an array atomically: a temporary file beside `path` (path.tmp.XXXXXX),
 * then rename. `data` holds nbytes = nelem * element size bytes, little-endian.
 * On failure `path` is untouched and no temporary file is left.
 */
int oq_npy_write(const char *path, int dtype, int rank, const int64_t *dims, const void *data,
                 size_t nbytes, oq_diag *d) OQ_WUR;

#endif
