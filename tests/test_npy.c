/*
 * test_npy.c - unit tests of the .npy reader and writer (src/io/npy.c).
 *
 * Expected bytes are written out by hand or copied from numpy 1.24
 * (`np.save` of the arrays named in each test; the byte strings below are
 * its output), never produced by the code under test: the header layout
 * (magic, version, length, dict text, space padding to a multiple of 64,
 * '\n'), IEEE-754 bit patterns, little-endian integers. Covered: the dtype
 * table, hand-written v1/v2/v3 headers (key order, quotes, whitespace,
 * trailing commas, big-endian descrs, scalars), rejections (Fortran order,
 * truncated header or data, trailing bytes, bad magic, version, dtype,
 * structured dtypes, unknown keys), file reads (header only and full),
 * writes byte-identical to numpy, round trips for every dtype and the
 * atomic write (no temporary file left, target untouched on failure).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/io/npy.h"

/* numpy: np.save(f, np.array([[1.5, -2, 0.25], [3, 4, 5]], dtype=np.float32)) */
static const char np_f32[] =
    "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
    "                                                          \n"
    "\x00\x00\xc0?\x00\x00\x00\xc0\x00\x00\x80>\x00\x00@@\x00\x00\x80@\x00\x00\xa0@";
/* numpy: np.save(f, np.array(7, dtype=np.int64)) */
static const char np_i64_scalar[] =
    "\x93NUMPY\x01\x00v\x00{'descr': '<i8', 'fortran_order': False, 'shape': (), }"
    "                                                              \n"
    "\x07\x00\x00\x00\x00\x00\x00\x00";
/* numpy: np.save(f, np.array([True, False, True])) */
static const char np_bool[] =
    "\x93NUMPY\x01\x00v\x00{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }"
    "                                                            \n"
    "\x01\x00\x01";

/*
 * Builds a file by hand: magic, version `ver`, the header text padded with
 * spaces + '\n' to a multiple of 64 (when pad), then `n` data bytes.
 */
static size_t make(unsigned char *out, int ver, const char *text, int pad, const void *data,
                   size_t n)
{
	size_t pre = ver == 1 ? 10 : 12, tl = strlen(text), total = pre + tl;
	memcpy(out, "\x93NUMPY", 6);
	out[6] = (unsigned char)ver;
	out[7] = 0;
	memcpy(out + pre, text, tl);
	if (pad) {
		while ((total + 1) % 64)
			out[total++] = ' ';
		out[total++] = '\n';
	}
	out[8] = (unsigned char)((total - pre) & 0xff);
	out[9] = (unsigned char)((total - pre) >> 8);
	if (ver != 1) {
		out[10] = 0;
		out[11] = 0;
	}
	memcpy(out + total, data, n);
	return total + n;
}

static int parse(const void *buf, size_t len, oq_npy *a, oq_diag *d)
{
	oq_diag_init(d);
	return oq_npy_parse(buf, len, "t.npy", 0, a, d);
}

/* ---------------------------------------------------------------- dtype table */

Test(npy, dtype_table)
{
	static const struct {
		const char *descr;
		int dtype;
	} ok[] = {
	    {"<f2", OQ_DT_FLOAT16}, {"<f4", OQ_DT_FLOAT},  {"<f8", OQ_DT_DOUBLE},
	    {"|i1", OQ_DT_INT8},    {"<i2", OQ_DT_INT16},  {"<i4", OQ_DT_INT32},
	    {"<i8", OQ_DT_INT64},   {"|u1", OQ_DT_UINT8},  {"<u2", OQ_DT_UINT16},
	    {"<u4", OQ_DT_UINT32},  {"<u8", OQ_DT_UINT64}, {"|b1", OQ_DT_BOOL},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		cr_expect_eq(oq_npy_dtype(ok[i].descr), ok[i].dtype, "%s", ok[i].descr);
		cr_expect_str_eq(oq_npy_descr(ok[i].dtype), ok[i].descr);
	}
	/* other byte-order spellings */
	cr_expect_eq(oq_npy_dtype(">f4"), OQ_DT_FLOAT);
	cr_expect_eq(oq_npy_dtype("=i8"), OQ_DT_INT64);
	cr_expect_eq(oq_npy_dtype("<u1"), OQ_DT_UINT8);
	cr_expect_eq(oq_npy_dtype("b1"), OQ_DT_BOOL);
	/* unsupported */
	const char *bad[] = {"<c8", "<U5", "|O", "|V2", "<f16", "|f4",
	                     "<M8", "",    "<",  "<f",  "<f4 ", "<i3"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_expect_eq(oq_npy_dtype(bad[i]), -1, "'%s' should be unsupported", bad[i]);
	cr_expect_null(oq_npy_descr(OQ_DT_BFLOAT16));
	cr_expect_null(oq_npy_descr(OQ_DT_STRING));
	cr_expect_null(oq_npy_descr(OQ_DT_INT4));
	cr_expect_null(oq_npy_descr(OQ_DT_FLOAT8E4M3FN));
}

/* ---------------------------------------------------------------- reading */

Test(npy, numpy_files)
{
	oq_npy a;
	oq_diag d;
	float f[6];
	int64_t v;

	cr_assert_eq(parse(np_f32, sizeof np_f32 - 1, &a, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(a.dtype, OQ_DT_FLOAT);
	cr_expect_eq(a.rank, 2);
	cr_expect_eq(a.dims[0], 2);
	cr_expect_eq(a.dims[1], 3);
	cr_expect_eq(a.nelem, 6);
	cr_expect_eq(a.nbytes, 24);
	cr_expect_eq(a.data_offset, 128);
	cr_expect_eq(a.version, 1);
	cr_expect_eq((uintptr_t)a.data % 64, 0);
	memcpy(f, a.data, sizeof f);
	cr_expect(f[0] == 1.5f && f[1] == -2.0f && f[2] == 0.25f && f[3] == 3.0f && f[4] == 4.0f &&
	          f[5] == 5.0f);
	oq_npy_free(&a);

	cr_assert_eq(parse(np_i64_scalar, sizeof np_i64_scalar - 1, &a, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(a.dtype, OQ_DT_INT64);
	cr_expect_eq(a.rank, 0);
	cr_expect_eq(a.nelem, 1);
	memcpy(&v, a.data, 8);
	cr_expect_eq(v, 7);
	oq_npy_free(&a);

	cr_assert_eq(parse(np_bool, sizeof np_bool - 1, &a, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(a.dtype, OQ_DT_BOOL);
	cr_expect_eq(a.rank, 1);
	cr_expect_eq(a.dims[0], 3);
	cr_expect_eq(memcmp(a.data, "\x01\x00\x01", 3), 0);
	oq_npy_free(&a);
}

Test(npy, versions_2_and_3)
{
	unsigned char buf[256];
	const unsigned char data[4] = {0x00, 0x00, 0x80, 0x3f}; /* 1.0f */
	oq_npy a;
	oq_diag d;
	float f;

	for (int ver = 2; ver <= 3; ver++) {
		size_t n =
		    make(buf, ver, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 1,
		         data, 4);
		cr_assert_eq(parse(buf, n, &a, &d), OQ_OK, "v%d: %s", ver, d.msg);
		cr_expect_eq(a.version, ver);
		cr_expect_eq(a.data_offset, 128); /* 12 + 57 text + newline = 70, padded to 128 */
		memcpy(&f, a.data, 4);
		cr_expect(f == 1.0f);
		oq_npy_free(&a);
	}
}

Test(npy, header_spellings)
{
	/* key order, double quotes, no padding, extra whitespace, no trailing comma */
	static const char *texts[] = {
	    "{'shape': (2,), 'fortran_order': False, 'descr': '<i4'}",
	    "{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (2,)}\n",
	    "{ 'descr' :'<i4' ,'fortran_order':False,'shape':( 2 , ) , }   \n",
	    "{'descr': '<i4', 'fortran_order': False, 'shape': (2L,), }\n",
	};
	const unsigned char data[8] = {0x01, 0x02, 0x00, 0x00,
	                               0xff, 0xff, 0xff, 0xff}; /* 513, -1 */
	unsigned char buf[256];
	oq_npy a;
	oq_diag d;
	int32_t v[2];

	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		size_t n = make(buf, 1, texts[i], 0, data, 8);
		cr_assert_eq(parse(buf, n, &a, &d), OQ_OK, "%s: %s", texts[i], d.msg);
		cr_expect_eq(a.dtype, OQ_DT_INT32);
		cr_expect_eq(a.rank, 1);
		cr_expect_eq(a.dims[0], 2);
		memcpy(v, a.data, 8);
		cr_expect(v[0] == 513 && v[1] == -1, "%s", texts[i]);
		oq_npy_free(&a);
	}
}

Test(npy, big_endian_is_swapped)
{
	const unsigned char be[12] = {0x00, 0x00, 0x01, 0x02, 0x3f, 0xc0,
	                              0x00, 0x00, 0xff, 0xff, 0xff, 0xfe};
	unsigned char buf[256];
	oq_npy a;
	oq_diag d;
	int32_t i32[3];
	size_t n =
	    make(buf, 1, "{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }", 1, be, 12);

	cr_assert_eq(parse(buf, n, &a, &d), OQ_OK, "%s", d.msg);
	memcpy(i32, a.data, 12);
	cr_expect_eq(i32[0], 258);
	cr_expect_eq(i32[1], 0x3fc00000);
	cr_expect_eq(i32[2], -2);
	oq_npy_free(&a);

	n = make(buf, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 1, be + 4, 4);
	cr_assert_eq(parse(buf, n, &a, &d), OQ_OK, "%s", d.msg);
	cr_expect(*(float *)a.data == 1.5f);
	oq_npy_free(&a);
}

Test(npy, zero_sized)
{
	unsigned char buf[256];
	oq_npy a;
	oq_diag d;
	size_t n =
	    make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", 1, "", 0);
	cr_assert_eq(parse(buf, n, &a, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(a.nelem, 0);
	cr_expect_eq(a.nbytes, 0);
	cr_expect_eq(a.rank, 2);
	oq_npy_free(&a);
}

/* Parses buf and expects `status` with `msg` somewhere in the message. */
static void reject(const void *buf, size_t n, int status, const char *msg)
{
	oq_npy a;
	oq_diag d;
	int rc = parse(buf, n, &a, &d);
	cr_expect_eq(rc, status, "expected %d for '%s', got %d (%s)", status, msg, rc, d.msg);
	cr_expect(strstr(d.msg, msg) != NULL, "message '%s' lacks '%s'", d.msg, msg);
	cr_expect(strstr(d.msg, "t.npy") != NULL, "message '%s' does not name the file", d.msg);
	cr_expect_null(a.data);
}

Test(npy, fortran_order_rejected)
{
	unsigned char buf[256];
	float data[6] = {0};
	size_t n =
	    make(buf, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 1, data, 24);
	reject(buf, n, OQ_EUNSUP, "Fortran-order");
}

Test(npy, truncated_rejected)
{
	unsigned char buf[256];
	float data[6] = {0};
	size_t n = make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 1,
	                data, 24);

	reject(buf, n - 1, OQ_EINVAL, "truncated: 23 data bytes, the header's shape needs 24");
	reject(buf, 100, OQ_EINVAL, "truncated");     /* inside the header */
	reject(buf, 9, OQ_EINVAL, "not a .npy file"); /* inside the prefix */
	reject(buf, 0, OQ_EINVAL, "not a .npy file");
	reject(np_f32, sizeof np_f32 - 2, OQ_EINVAL, "truncated");
	/* trailing bytes are as wrong as missing ones */
	n = make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 1, data,
	         24);
	buf[n] = 0;
	reject(buf, n + 1, OQ_EINVAL, "1 bytes of trailing garbage");
}

Test(npy, malformed_rejected)
{
	unsigned char buf[256];
	float data[6] = {0};
	size_t n;

	n = make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 1, data,
	         24);
	buf[1] = 'X';
	reject(buf, n, OQ_EINVAL, "not a .npy file");
	n = make(buf, 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 1, data,
	         24);
	reject(buf, n, OQ_EUNSUP, "format version 4.0");
	n = make(buf, 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", 1, data, 24);
	reject(buf, n, OQ_EUNSUP, "dtype '<c8' is not supported");
	n = make(buf, 1, "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", 1, data, 24);
	reject(buf, n, OQ_EUNSUP, "dtype '|O' is not supported");
	n = make(buf, 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", 1,
	         data, 24);
	reject(buf, n, OQ_EUNSUP, "structured");
	n = make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", 1, data,
	         24);
	reject(buf, n, OQ_EINVAL, "unexpected or repeated header key 'x'");
	n = make(buf, 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}",
	         1, data, 24);
	reject(buf, n, OQ_EINVAL, "repeated");
	n = make(buf, 1, "{'descr': '<f4', 'shape': (6,), }", 1, data, 24);
	reject(buf, n, OQ_EINVAL, "lacks 'fortran_order'");
	n = make(buf, 1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (6,), }", 1, data, 24);
	reject(buf, n, OQ_EINVAL, "malformed header");
	n = make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }", 1, data, 24);
	reject(buf, n, OQ_EINVAL, "malformed header");
	n = make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), } x", 1, data,
	         24);
	reject(buf, n, OQ_EINVAL, "malformed header");
	n = make(buf, 1,
	         "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 1,
	         data, 24);
	reject(buf, n, OQ_EINVAL, "malformed header");
	/* a product of dims past SIZE_MAX */
	n = make(buf, 1,
	         "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, "
	         "4294967296), }",
	         1, data, 24);
	reject(buf, n, OQ_EINVAL, "too large");
	/* header length past the end of the file */
	n = make(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", 1, data, 24);
	buf[9] = 0x7f;
	reject(buf, n, OQ_EINVAL, "truncated header");
}

/* ---------------------------------------------------------------- files */

static char tmpdir[64];

static void mk_tmpdir(void)
{
	strcpy(tmpdir, "/tmp/oq_npy_XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void rm_tmpdir(void)
{
	DIR *dir = opendir(tmpdir);
	struct dirent *de;
	char p[512];
	if (!dir)
		return;
	while ((de = readdir(dir)))
		if (de->d_name[0] != '.') {
			snprintf(p, sizeof p, "%s/%s", tmpdir, de->d_name);
			unlink(p);
		}
	closedir(dir);
	rmdir(tmpdir);
}

static size_t count_entries(void)
{
	DIR *dir = opendir(tmpdir);
	struct dirent *de;
	size_t n = 0;
	while ((de = readdir(dir)))
		n += de->d_name[0] != '.';
	closedir(dir);
	return n;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(p, 1, n, f), n);
	fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b;
	cr_assert_not_null(f, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc(*n + 1);
	cr_assert_eq(fread(b, 1, *n, f), *n);
	fclose(f);
	return b;
}

Test(npy, read_file, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	char p[256];
	oq_npy a;
	oq_diag d;

	snprintf(p, sizeof p, "%s/a.npy", tmpdir);
	write_bytes(p, np_f32, sizeof np_f32 - 1);
	oq_diag_init(&d);
	cr_assert_eq(oq_npy_read(p, 1, &a, &d), OQ_OK, "%s", d.msg);
	cr_expect_null(a.data);
	cr_expect_eq(a.dtype, OQ_DT_FLOAT);
	cr_expect_eq(a.nbytes, 24);
	oq_npy_free(&a);
	cr_assert_eq(oq_npy_read(p, 0, &a, &d), OQ_OK, "%s", d.msg);
	cr_expect_eq(memcmp(a.data, np_f32 + 128, 24), 0);
	oq_npy_free(&a);

	/* the header-only read still checks the file's length */
	write_bytes(p, np_f32, sizeof np_f32 - 5);
	cr_expect_eq(oq_npy_read(p, 1, &a, &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "a.npy: truncated: 20 data bytes") != NULL, "%s", d.msg);

	oq_diag_init(&d);
	write_bytes(p, "\x93NUMPY\x01", 7);
	cr_expect_eq(oq_npy_read(p, 1, &a, &d), OQ_EINVAL);
	cr_expect(strstr(d.msg, "not a .npy file") != NULL, "%s", d.msg);

	oq_diag_init(&d);
	snprintf(p, sizeof p, "%s/missing.npy", tmpdir);
	cr_expect_eq(oq_npy_read(p, 0, &a, &d), OQ_EIO);
	cr_expect(strstr(d.msg, "missing.npy") != NULL, "%s", d.msg);

	oq_diag_init(&d);
	cr_expect_eq(oq_npy_read(tmpdir, 0, &a, &d), OQ_EIO);
}

Test(npy, write_matches_numpy, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	const float f[6] = {1.5f, -2.0f, 0.25f, 3.0f, 4.0f, 5.0f};
	const int64_t dims[2] = {2, 3};
	const int64_t seven = 7;
	const unsigned char bools[3] = {1, 0, 1};
	const int64_t three = 3;
	char p[256];
	unsigned char *b;
	size_t n;
	oq_diag d;

	oq_diag_init(&d);
	snprintf(p, sizeof p, "%s/f.npy", tmpdir);
	cr_assert_eq(oq_npy_write(p, OQ_DT_FLOAT, 2, dims, f, sizeof f, &d), OQ_OK, "%s", d.msg);
	b = read_bytes(p, &n);
	cr_expect_eq(n, sizeof np_f32 - 1);
	cr_expect_eq(memcmp(b, np_f32, sizeof np_f32 - 1), 0, "differs from numpy's bytes");
	free(b);

	snprintf(p, sizeof p, "%s/i.npy", tmpdir);
	cr_assert_eq(oq_npy_write(p, OQ_DT_INT64, 0, NULL, &seven, 8, &d), OQ_OK, "%s", d.msg);
	b = read_bytes(p, &n);
	cr_expect_eq(n, sizeof np_i64_scalar - 1);
	cr_expect_eq(memcmp(b, np_i64_scalar, sizeof np_i64_scalar - 1), 0);
	free(b);

	snprintf(p, sizeof p, "%s/b.npy", tmpdir);
	cr_assert_eq(oq_npy_write(p, OQ_DT_BOOL, 1, &three, bools, 3, &d), OQ_OK, "%s", d.msg);
	b = read_bytes(p, &n);
	cr_expect_eq(n, sizeof np_bool - 1);
	cr_expect_eq(memcmp(b, np_bool, sizeof np_bool - 1), 0);
	free(b);
	cr_expect_eq(count_entries(), 3, "temporary files left behind");
}

Test(npy, round_trip_every_dtype, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	static const int dts[] = {OQ_DT_FLOAT16, OQ_DT_FLOAT,  OQ_DT_DOUBLE, OQ_DT_INT8,
	                          OQ_DT_INT16,   OQ_DT_INT32,  OQ_DT_INT64,  OQ_DT_UINT8,
	                          OQ_DT_UINT16,  OQ_DT_UINT32, OQ_DT_UINT64, OQ_DT_BOOL};
	const int64_t dims[3] = {2, 1, 5};
	unsigned char src[80];
	char p[256];
	oq_npy a;
	oq_diag d;

	for (size_t i = 0; i < sizeof src; i++)
		src[i] = (unsigned char)(i * 37 + 11);
	for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
		size_t nbytes = 10 * (size_t)oq_dtype_bits(dts[k]) / 8;
		if (dts[k] == OQ_DT_BOOL)
			for (size_t i = 0; i < 10; i++)
				src[i] &= 1;
		snprintf(p, sizeof p, "%s/%s.npy", tmpdir, oq_dtype_name(dts[k]));
		oq_diag_init(&d);
		cr_assert_eq(oq_npy_write(p, dts[k], 3, dims, src, nbytes, &d), OQ_OK, "%s", d.msg);
		cr_assert_eq(oq_npy_read(p, 0, &a, &d), OQ_OK, "%s", d.msg);
		cr_expect_eq(a.dtype, dts[k]);
		cr_expect_eq(a.rank, 3);
		cr_expect(a.dims[0] == 2 && a.dims[1] == 1 && a.dims[2] == 5);
		cr_expect_eq(a.nbytes, nbytes);
		cr_expect_eq(memcmp(a.data, src, nbytes), 0, "%s differs", oq_dtype_name(dts[k]));
		cr_expect_eq(a.data_offset % 64, 0);
		oq_npy_free(&a);
	}
	cr_expect_eq(count_entries(), sizeof dts / sizeof dts[0]);
}

Test(npy, write_failures, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	const int64_t dims[1] = {2};
	const float f[2] = {1, 2};
	char p[256];
	unsigned char *b;
	size_t n;
	oq_diag d;

	oq_diag_init(&d);
	snprintf(p, sizeof p, "%s/no/such/dir/x.npy", tmpdir);
	cr_expect_eq(oq_npy_write(p, OQ_DT_FLOAT, 1, dims, f, 8, &d), OQ_EIO);
	cr_expect(strstr(d.msg, "x.npy") != NULL, "%s", d.msg);

	oq_diag_init(&d);
	snprintf(p, sizeof p, "%s/x.npy", tmpdir);
	cr_expect_eq(oq_npy_write(p, OQ_DT_BFLOAT16, 1, dims, f, 4, &d), OQ_EUNSUP);
	cr_expect(strstr(d.msg, "bfloat16") != NULL, "%s", d.msg);
	oq_diag_init(&d);
	cr_expect_eq(oq_npy_write(p, OQ_DT_FLOAT, 1, dims, f, 4, &d),
	             OQ_EINVAL); /* size mismatch */
	cr_expect_eq(count_entries(), 0, "a failed write left a file");

	/* replacing an existing file; a rename over a folder fails and leaves no temporary */
	write_bytes(p, "old", 3);
	cr_expect_eq(oq_npy_write(p, OQ_DT_FLOAT, 1, dims, f, 8, &d), OQ_OK);
	b = read_bytes(p, &n);
	cr_expect_eq(n, 128 + 8); /* 10 + 57 text + newline = 68, padded to 128 */
	free(b);
	snprintf(p, sizeof p, "%s/dir.npy", tmpdir);
	cr_assert_eq(mkdir(p, 0700), 0);
	oq_diag_init(&d);
	cr_expect_eq(oq_npy_write(p, OQ_DT_FLOAT, 1, dims, f, 8, &d), OQ_EIO);
	rmdir(p);
	cr_expect_eq(count_entries(), 1, "temporary file left behind");
}

Test(npy, header_format)
{
	char buf[512];
	size_t n;
	int64_t dims[OQ_MAX_RANK];
	oq_npy a;
	oq_diag d;

	for (int i = 0; i < OQ_MAX_RANK; i++)
		dims[i] = i == 0 ? 1234567890123LL : 1;
	cr_assert_eq(oq_npy_header(OQ_DT_FLOAT, 1, dims, buf, sizeof buf, &n), OQ_OK);
	cr_expect_eq(n, 128);
	cr_expect_eq(memcmp(buf + 10,
	                    "{'descr': '<f4', 'fortran_order': False, 'shape': (1234567890123,), }",
	                    69),
	             0);
	cr_expect_eq(buf[127], '\n');
	cr_expect_eq(oq_npy_header(OQ_DT_STRING, 1, dims, buf, sizeof buf, &n), OQ_EUNSUP);
	/* the largest rank still fits the documented capacity and parses back */
	dims[0] = 0;
	{
		size_t cap = 256 + 24 * OQ_MAX_RANK;
		char *big = malloc(cap);
		cr_assert_eq(oq_npy_header(OQ_DT_INT8, OQ_MAX_RANK, dims, big, cap, &n), OQ_OK);
		cr_expect_eq(n % 64, 0);
		oq_diag_init(&d);
		cr_expect_eq(oq_npy_parse(big, n, "big", 1, &a, &d), OQ_OK, "%s", d.msg);
		cr_expect_eq(a.rank, OQ_MAX_RANK);
		free(big);
	}
}
