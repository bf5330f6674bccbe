/*
 * stats_file.c - calibration statistics files (see stats_file.h for the format and
 * the merge rules).
 *
 * Encoding goes through a growable byte buffer with explicit little-endian
 * stores; decoding reads the whole file, checks magic, version and the
 * trailing checksum first (so a flipped bit anywhere is "corrupted", not a
 * strange parse error), then walks it with a cursor whose every read is
 * bounds-checked, and validates what it read (sorted unique names, bin
 * counts and exponents, count totals that cannot overflow, coverage bits
 * beyond N clear).
 *
 * Checksum and fingerprint use one 64-bit hash: 8-byte little-endian words
 * folded with h = (h ^ w) * K, h ^= h >> 29 (K an odd 64-bit constant),
 * then the length and a final avalanche. It detects corruption, it is not a
 * cryptographic signature.
 */
#include "calib/stats_file.h"
#include "calib/folds.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/io/outfile.h"

static const char magic[8] = {'O', 'N', 'N', 'X', 'Q', 'S', 'T', 'A'};

#define HDR_FIXED (8 + 4 * 4 + 8 * 3 + 4) /* magic .. N */
#define MAX_NAME (1u << 20)

/* ------------------------------------------------------------ hashing */

static uint64_t mixfin(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
	return z ^ (z >> 31);
}

uint64_t oq_stats_hash(const void *p, size_t n, uint64_t seed)
{
	const uint8_t *b = p;
	uint64_t h = seed ^ 0x9E3779B97F4A7C15u;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t w = 0;
		for (int k = 7; k >= 0; k--)
			w = w << 8 | b[i + (size_t)k];
		h = (h ^ w) * 0x100000001B3u * 0xFF51AFD7ED558CCDu;
		h ^= h >> 29;
	}
	if (i < n) {
		uint64_t w = 0;
		for (size_t k = n; k > i; k--)
			w = w << 8 | b[k - 1];
		h = (h ^ w) * 0xFF51AFD7ED558CCDu;
		h ^= h >> 29;
	}
	return mixfin(h ^ (uint64_t)n);
}

static uint64_t hash_str(uint64_t h, const char *s)
{
	return oq_stats_hash(s ? s : "", s ? strlen(s) + 1 : 1, h);
}

uint64_t oq_stats_fingerprint(const oq_model *m)
{
	uint64_t h = 0x6F6E6E7871u; /* "onnxq" */
	const oq_graph *g = m->graph;

	for (size_t i = 0; i < m->n_maps; i++)
		if (m->maps[i].base)
			h = oq_stats_hash(m->maps[i].base, m->maps[i].size, h);
	for (size_t i = 0; i < m->n_opsets; i++) {
		h = hash_str(h, m->opsets[i].domain);
		h = oq_stats_hash(&m->opsets[i].version, sizeof m->opsets[i].version, h);
	}
	if (!g)
		return h;
	/* the observed tensors: the rewritten topology (rewrites change it, not the file) */
	for (size_t i = 0; i < g->n_inputs; i++)
		h = hash_str(h, g->inputs[i]->name);
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		h = hash_str(hash_str(hash_str(h, n->domain), n->op_type), n->name);
		for (size_t k = 0; k < n->n_inputs; k++)
			h = hash_str(h, n->inputs[k] ? n->inputs[k]->name : "");
		h = hash_str(h, "->");
		for (size_t k = 0; k < n->n_outputs; k++)
			h = hash_str(h, n->outputs[k] ? n->outputs[k]->name : "");
	}
	return h;
}

/* ------------------------------------------------------------ basics */

/* Frees record r's name, histogram and nf folds. */
static void stat_free(oq_stat *r, uint32_t nf)
{
	free(r->name);
	oq_hist_free(&r->h);
	for (uint32_t f = 0; r->fold && f < nf; f++)
		oq_hist_free(&r->fold[f].h);
	free(r->fold);
}

void oq_stats_free(oq_stats *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		stat_free(&s->v[i], s->n_folds);
	free(s->v);
	free(s->covered);
	memset(s, 0, sizeof *s);
}

void oq_stats_shard_range(uint64_t total, uint32_t i, uint32_t n, uint64_t *begin, uint64_t *end)
{
	uint64_t q = total / n, r = total % n;
	*begin = (uint64_t)i * q + (i < r ? i : r);
	*end = (uint64_t)(i + 1) * q + (i + 1 < r ? i + 1 : r);
}

static const char *kind_name(int kind)
{
	return kind == OQ_STATS_RANGES ? "ranges only (--method minmax)"
				       : "histograms (--method percentile, entropy or mse)";
}

/* ------------------------------------------------------------ encoding */

typedef struct wbuf {
	uint8_t *p;
	size_t len, cap;
	int bad; /* out of memory */
} wbuf;

static void put(wbuf *w, const void *src, size_t n)
{
	size_t need;
	if (w->bad)
		return;
	if (!oq_add_size(w->len, n, &need) || oq_grow(&w->p, &w->cap, need, 1)) {
		w->bad = 1;
		return;
	}
	memcpy(w->p + w->len, src, n);
	w->len += n;
}

static void put_u32(wbuf *w, uint32_t v)
{
	uint8_t b[4];
	for (int k = 0; k < 4; k++)
		b[k] = (uint8_t)(v >> (8 * k));
	put(w, b, 4);
}

static void put_u64(wbuf *w, uint64_t v)
{
	uint8_t b[8];
	for (int k = 0; k < 8; k++)
		b[k] = (uint8_t)(v >> (8 * k));
	put(w, b, 8);
}

static void put_f64(wbuf *w, double x)
{
	uint64_t v;
	memcpy(&v, &x, 8);
	put_u64(w, v);
}

/* The part of a record after its flags (of one fold in a folds file). */
static void put_body(wbuf *w, double lo, double hi, uint64_t n_bad, const oq_hist *h, int hist)
{
	uint32_t used[2] = {0, 0};

	put_f64(w, lo);
	put_f64(w, hi);
	put_u64(w, n_bad);
	if (!hist)
		return;
	for (size_t side = 0; side < 2 && oq_hist_has_bins(h); side++) {
		used[side] = OQ_HIST_SIDE;
		while (used[side] && !oq_hist_at(h, side * OQ_HIST_SIDE + used[side] - 1))
			used[side]--;
	}
	put_u64(w, h->n_zero);
	put_u32(w, used[0] || used[1] ? (uint32_t)(h->e - OQ_HIST_EMIN) : 0);
	for (size_t side = 0; side < 2; side++) {
		put_u32(w, used[side]);
		for (uint32_t k = 0; k < used[side]; k++)
			put_u64(w, oq_hist_at(h, side * OQ_HIST_SIDE + k));
	}
}

int oq_stats_encode(oq_stats *s, uint8_t **buf, size_t *len, oq_diag *d)
{
	wbuf w = {0};
	size_t nb = ((size_t)s->n_shards + 7) / 8;

	*buf = NULL;
	*len = 0;
	put(&w, magic, 8);
	put_u32(&w, s->n_folds ? OQ_STATS_VERSION_FOLDS : OQ_STATS_VERSION);
	put_u32(&w, (uint32_t)s->kind);
	put_u32(&w, s->kind == OQ_STATS_HIST ? OQ_HIST_SIDE : 0);
	put_u32(&w, s->n_folds);
	put_u64(&w, s->model_fp);
	put_u64(&w, s->n_total);
	put_u64(&w, s->n_samples);
	put_u32(&w, s->n_shards);
	for (size_t i = 0; i < nb; i++) {
		uint8_t b = 0;
		for (size_t k = 0; k < 8 && i * 8 + k < s->n_shards; k++)
			b |= (uint8_t)((s->covered[i * 8 + k] != 0) << k);
		put(&w, &b, 1);
	}
	put_u64(&w, s->n);
	for (size_t i = 0; i < s->n; i++) {
		const oq_stat *r = &s->v[i];
		size_t l = strlen(r->name);
		put_u32(&w, (uint32_t)l);
		put(&w, r->name, l);
		int hist = s->kind == OQ_STATS_HIST && r->hist;
		put_u32(&w, (uint32_t)(r->seen ? 1 : 0) | (hist ? 2u : 0u));
		if (!s->n_folds)
			put_body(&w, r->lo, r->hi, r->n_bad, &r->h, hist);
		for (uint32_t f = 0; f < s->n_folds; f++)
			put_body(&w, r->fold[f].lo, r->fold[f].hi, r->fold[f].n_bad, &r->fold[f].h, hist);
	}
	if (!w.bad)
		s->sum = oq_stats_hash(w.p, w.len, 0);
	put_u64(&w, s->sum);
	if (w.bad) {
		free(w.p);
		return oq_err(d, OQ_ENOMEM, "stats: out of memory");
	}
	*buf = w.p;
	*len = w.len;
	return OQ_OK;
}

/* ------------------------------------------------------------ decoding */

typedef struct rbuf {
	const uint8_t *p;
	size_t len, at;
} rbuf;

static int get(rbuf *r, void *dst, size_t n)
{
	if (n > r->len - r->at)
		return 0;
	memcpy(dst, r->p + r->at, n);
	r->at += n;
	return 1;
}

static int get_u32(rbuf *r, uint32_t *v)
{
	uint8_t b[4];
	if (!get(r, b, 4))
		return 0;
	*v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	return 1;
}

static int get_u64(rbuf *r, uint64_t *v)
{
	uint8_t b[8];
	if (!get(r, b, 8))
		return 0;
	*v = 0;
	for (int k = 7; k >= 0; k--)
		*v = *v << 8 | b[k];
	return 1;
}

static int get_f64(rbuf *r, double *x)
{
	uint64_t v;
	if (!get_u64(r, &v))
		return 0;
	memcpy(x, &v, 8);
	return 1;
}

static int corrupt(oq_diag *d, const char *what, const char *why)
{
	return oq_err(d, OQ_EINVAL,
		      "stats: %s is corrupted (%s); write it again with onnxq calibrate / merge-stats",
		      what, why);
}

/*
 * The part of a record after its flags (one fold's in a folds file) into *lo, *hi, *n_bad and, with
 * flag 2, *h (initialised by the caller). *total: the counts read so far in the record, which
 * every count must keep below 2^64.
 */
static int get_body(rbuf *r, int kind, uint32_t flags, double *lo, double *hi, uint64_t *n_bad,
		    oq_hist *h, uint64_t *total, const char *what, oq_diag *d)
{
	uint64_t *b;
	uint32_t e;

	if (!get_f64(r, lo) || !get_f64(r, hi) || !get_u64(r, n_bad))
		return corrupt(d, what, "truncated record");
	if (isnan(*lo) || isnan(*hi) || (*lo <= *hi && (!isfinite(*lo) || !isfinite(*hi))))
		return corrupt(d, what, "bad range");
	if (!(flags & 2))
		return OQ_OK;
	if (kind != OQ_STATS_HIST)
		return corrupt(d, what, "histogram in a ranges file");
	if (!get_u64(r, &h->n_zero) || !get_u32(r, &e))
		return corrupt(d, what, "truncated histogram");
	if (e > (uint32_t)(OQ_HIST_EMAX - OQ_HIST_EMIN))
		return corrupt(d, what, "bad histogram exponent");
	if (h->n_zero > UINT64_MAX - *total)
		return corrupt(d, what, "histogram counts overflow");
	*total += h->n_zero;
	for (size_t side = 0; side < 2; side++) {
		uint32_t used;
		if (!get_u32(r, &used))
			return corrupt(d, what, "truncated histogram");
		if (used > OQ_HIST_SIDE)
			return corrupt(d, what, "bad histogram bin count");
		if ((size_t)used > (r->len - r->at) / 8)
			return corrupt(d, what, "truncated histogram");
		if (!used)
			continue;
		/* bins hold finite non-zero values, so the record has a finite range */
		if (!(*lo <= *hi) || !(flags & 1))
			return corrupt(d, what, "histogram without a range");
		if (!(b = oq_hist_wide_bins(h, (int)e + OQ_HIST_EMIN)))
			return oq_err(d, OQ_ENOMEM, "stats: out of memory");
		for (size_t k = 0; k < used; k++) {
			uint64_t *c = &b[side * OQ_HIST_SIDE + k];
			(void)get_u64(r, c);
			/* the total bounds every sum the histogram code forms (merged bins, |x| views) */
			if (*c > UINT64_MAX - *total)
				return corrupt(d, what, "histogram counts overflow");
			*total += *c;
		}
	}
	if (!oq_hist_has_bins(h) && e)
		return corrupt(d, what, "bad histogram exponent"); /* no bins: written as 0 */
	oq_hist_fit(h);
	return OQ_OK;
}

/* A folds record's totals: the merge of its nf folds (counts bounded by the record's total). */
static int fold_totals(oq_stat *st, uint32_t nf, const char *what, oq_diag *d)
{
	st->lo = INFINITY;
	st->hi = -INFINITY;
	st->n_bad = 0;
	for (uint32_t f = 0; f < nf; f++) {
		const oq_stat_fold *x = &st->fold[f];
		st->lo = x->lo < st->lo ? x->lo : st->lo;
		st->hi = x->hi > st->hi ? x->hi : st->hi;
		if (x->n_bad > UINT64_MAX - st->n_bad)
			return corrupt(d, what, "NaN/Inf counts overflow");
		st->n_bad += x->n_bad;
		if (st->hist && oq_hist_merge(&st->h, &x->h))
			return oq_err(d, OQ_ENOMEM, "stats: out of memory");
	}
	return OQ_OK;
}

/* One record of a file of `kind` with nf folds (0: none); `prev` is the previous name (NULL for
 * the first). */
static int get_record(rbuf *r, int kind, uint32_t nf, oq_stat *st, const char *prev,
		      const char *what, oq_diag *d)
{
	uint32_t l, flags;
	uint64_t total = 0;
	int rc;

	oq_hist_init(&st->h);
	if (!get_u32(r, &l))
		return corrupt(d, what, "truncated record");
	if (l == 0 || l > MAX_NAME || l > r->len - r->at)
		return corrupt(d, what, "bad tensor name length");
	if (!(st->name = oq_malloc((size_t)l + 1)))
		return oq_err(d, OQ_ENOMEM, "stats: out of memory");
	(void)get(r, st->name, l);
	st->name[l] = 0;
	if (strlen(st->name) != l)
		return corrupt(d, what, "NUL in a tensor name");
	if (prev && strcmp(prev, st->name) >= 0)
		return corrupt(d, what, "tensor records not sorted or repeated");
	if (!get_u32(r, &flags))
		return corrupt(d, what, "truncated record");
	if (flags & ~3u)
		return corrupt(d, what, "unknown record flags");
	st->seen = (int)(flags & 1);
	st->hist = (flags & 2) != 0;
	if (!nf)
		return get_body(r, kind, flags, &st->lo, &st->hi, &st->n_bad, &st->h, &total, what, d);
	if (!(st->fold = oq_calloc(nf, sizeof *st->fold)))
		return oq_err(d, OQ_ENOMEM, "stats: out of memory");
	for (uint32_t f = 0; f < nf; f++) {
		oq_stat_fold *x = &st->fold[f];
		oq_hist_init(&x->h);
		if ((rc = get_body(r, kind, flags, &x->lo, &x->hi, &x->n_bad, &x->h, &total, what, d)))
			return rc;
	}
	return fold_totals(st, nf, what, d);
}

int oq_stats_decode(const uint8_t *buf, size_t len, const char *what, oq_stats *s, oq_diag *d)
{
	rbuf r = {buf, 0, 0};
	uint32_t version, kind, side, folds;
	uint64_t sum, nrec;
	size_t nb;
	int rc;

	memset(s, 0, sizeof *s);
	if (len < 8 || memcmp(buf, magic, 8) != 0)
		return oq_err(d, OQ_EINVAL,
			      "stats: %s is not an onnxq statistics file (no ONNXQSTA magic); give a file "
			      "written by onnxq calibrate or merge-stats",
			      what);
	if (len < 12)
		return corrupt(d, what, "truncated header");
	r.at = 8;
	(void)get_u32(&r, &version);
	if (version != OQ_STATS_VERSION && version != OQ_STATS_VERSION_FOLDS)
		return oq_err(d, OQ_EINVAL,
			      "stats: %s has format version %u; this onnxq reads version %d (%d with "
			      "folds): run calibrate again with this onnxq",
			      what, version, OQ_STATS_VERSION, OQ_STATS_VERSION_FOLDS);
	if (len < HDR_FIXED + 8 + 8)
		return corrupt(d, what, "truncated header");
	r.len = len - 8;
	{
		rbuf t = {buf, len, len - 8};
		(void)get_u64(&t, &sum);
	}
	if (oq_stats_hash(buf, len - 8, 0) != sum)
		return corrupt(d, what, "checksum mismatch");
	s->sum = sum;
	(void)get_u32(&r, &kind);
	(void)get_u32(&r, &side);
	(void)get_u32(&r, &folds);
	(void)get_u64(&r, &s->model_fp);
	(void)get_u64(&r, &s->n_total);
	(void)get_u64(&r, &s->n_samples);
	(void)get_u32(&r, &s->n_shards);
	if ((kind != OQ_STATS_RANGES && kind != OQ_STATS_HIST) ||
	    side != (kind == OQ_STATS_HIST ? OQ_HIST_SIDE : 0) ||
	    (version == OQ_STATS_VERSION ? folds != 0
	                                 : folds < 2 || folds > OQ_FOLDS_MAX || kind != OQ_STATS_HIST))
		return corrupt(d, what, "bad header fields");
	s->kind = (int)kind;
	s->n_folds = folds;
	if (s->n_shards == 0 || s->n_shards > OQ_STATS_MAX_SHARDS || s->n_samples > s->n_total)
		return corrupt(d, what, "bad shard count");
	nb = ((size_t)s->n_shards + 7) / 8;
	if (!(s->covered = oq_calloc(s->n_shards, 1)))
		return oq_err(d, OQ_ENOMEM, "stats: out of memory");
	for (size_t i = 0; i < nb; i++) {
		uint8_t b;
		if (!get(&r, &b, 1))
			return corrupt(d, what, "truncated header");
		for (size_t k = 0; k < 8; k++) {
			if (!(b >> k & 1))
				continue;
			if (i * 8 + k >= s->n_shards)
				return corrupt(d, what, "coverage bit beyond N");
			s->covered[i * 8 + k] = 1;
		}
	}
	if (!get_u64(&r, &nrec))
		return corrupt(d, what, "truncated header");
	/* a record takes at least 33 bytes: bounds the allocation by the file size */
	if (nrec > (r.len - r.at) / 33)
		return corrupt(d, what, "record count larger than the file");
	if (!(s->v = oq_calloc((size_t)nrec, sizeof *s->v)))
		return oq_err(d, OQ_ENOMEM, "stats: out of memory");
	for (size_t i = 0; i < nrec; i++) {
		s->n = i + 1;
		if ((rc = get_record(&r, s->kind, s->n_folds, &s->v[i], i ? s->v[i - 1].name : NULL,
				     what, d)))
			return rc;
	}
	if (r.at != r.len)
		return corrupt(d, what, "trailing bytes");
	return OQ_OK;
}

int oq_stats_write(const char *path, oq_stats *s, oq_diag *d)
{
	uint8_t *buf = NULL;
	size_t len;
	oq_outfile f;
	int rc, e;

	if ((rc = oq_stats_encode(s, &buf, &len, d)))
		return rc;
	if ((rc = oq_out_open(&f, path, "stats", 0, d))) {
		free(buf);
		return rc;
	}
	if ((e = oq_out_write_all(f.fd, buf, len))) {
		rc = oq_err(d, OQ_EIO, "stats: cannot write '%s': %s", path, strerror(e));
		oq_out_abort(&f);
	} else {
		rc = oq_out_commit(&f, "stats", d);
	}
	free(buf);
	return rc;
}

int oq_stats_read(const char *path, oq_stats *s, oq_diag *d)
{
	struct stat st;
	uint8_t *buf = NULL;
	size_t len, got = 0;
	int fd, rc;

	memset(s, 0, sizeof *s);
	if ((fd = open(path, O_RDONLY)) < 0)
		return oq_err(d, OQ_EIO, "stats: cannot open '%s': %s", path, strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return oq_err(d, OQ_EIO, "stats: '%s' is not a regular file", path);
	}
	if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX / 2) {
		close(fd);
		return oq_err(d, OQ_EINVAL, "stats: '%s' is too large", path);
	}
	len = (size_t)st.st_size;
	if (!(buf = oq_malloc(len))) {
		close(fd);
		return oq_err(d, OQ_ENOMEM, "stats: out of memory reading '%s'", path);
	}
	while (got < len) {
		ssize_t k = read(fd, buf + got, len - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			rc = oq_err(d, OQ_EIO, "stats: cannot read '%s': %s", path,
				    k < 0 ? strerror(errno) : "file shrank");
			close(fd);
			free(buf);
			return rc;
		}
		got += (size_t)k;
	}
	close(fd);
	rc = oq_stats_decode(buf, len, path, s, d);
	free(buf);
	if (rc)
		oq_stats_free(s);
	return rc;
}

/* ------------------------------------------------------------ merging */

/* "0,2,5" of the shards with covered[i] == want into buf (truncated with "..."). */
static void shard_list(const oq_stats *s, int want, char *buf, size_t cap)
{
	size_t at = 0;
	buf[0] = 0;
	for (uint32_t i = 0; i < s->n_shards; i++) {
		if ((s->covered[i] != 0) != want)
			continue;
		if (at + 16 >= cap) {
			snprintf(buf + at, cap - at, "...");
			return;
		}
		at += (size_t)snprintf(buf + at, cap - at, "%s%u", at ? "," : "", i);
	}
}

int oq_stats_check_complete(const oq_stats *s, const char *what, oq_diag *d)
{
	char have[160], miss[160];

	for (uint32_t i = 0; i < s->n_shards; i++)
		if (!s->covered[i])
			goto incomplete;
	return OQ_OK;
incomplete:
	shard_list(s, 1, have, sizeof have);
	shard_list(s, 0, miss, sizeof miss);
	return oq_err(d, OQ_EINVAL,
		      "stats: %s: stats cover shards %s of %u (0-based; missing %s): merge the "
		      "missing shards' files with onnxq merge-stats",
		      what, *have ? have : "none", s->n_shards, miss);
}

static int add_u64(uint64_t *a, uint64_t b)
{
	if (b > UINT64_MAX - *a)
		return 0;
	*a += b;
	return 1;
}

/* dst = a copy of src and its nf folds (on failure, what was copied is in dst for stat_free). */
static int copy_stat(oq_stat *dst, const oq_stat *src, uint32_t nf)
{
	*dst = *src;
	oq_hist_init(&dst->h);
	dst->name = NULL;
	dst->fold = NULL;
	if (!(dst->name = oq_strdup(src->name)) || oq_hist_copy(&dst->h, &src->h))
		return OQ_ENOMEM;
	if (nf && !(dst->fold = oq_calloc(nf, sizeof *dst->fold)))
		return OQ_ENOMEM;
	for (uint32_t f = 0; f < nf; f++) {
		dst->fold[f] = src->fold[f];
		if (oq_hist_copy(&dst->fold[f].h, &src->fold[f].h))
			return OQ_ENOMEM;
	}
	return OQ_OK;
}

/* Total of h's counts; 0 when it overflows (*ok cleared). */
static uint64_t hist_total(const oq_hist *h, int *ok)
{
	uint64_t t = h->n_zero;
	for (size_t k = 0; oq_hist_has_bins(h) && k < 2 * (size_t)OQ_HIST_SIDE; k++)
		if (!add_u64(&t, oq_hist_at(h, k)))
			*ok = 0;
	return t;
}

/* Folds record b into a (same name, nf folds each). */
static int merge_stat(oq_stat *a, const oq_stat *b, uint32_t nf, const char *bname, oq_diag *d)
{
	int ok = 1, rc;
	uint64_t t;

	a->seen |= b->seen;
	a->lo = b->lo < a->lo ? b->lo : a->lo;
	a->hi = b->hi > a->hi ? b->hi : a->hi;
	if (!add_u64(&a->n_bad, b->n_bad))
		return oq_err(d, OQ_EINVAL, "stats: %s: tensor '%s': NaN/Inf count overflows",
			      bname, a->name);
	if (a->hist != b->hist)
		return oq_err(d, OQ_EINVAL,
			      "stats: %s: tensor '%s' has a histogram in one file and not in the other; "
			      "calibrate every shard with the same options",
			      bname, a->name);
	/* both totals fit (checked when read); their sum bounds every count of the merge */
	t = hist_total(&a->h, &ok);
	if (!add_u64(&t, hist_total(&b->h, &ok)) || !ok)
		return oq_err(d, OQ_EINVAL, "stats: %s: tensor '%s': histogram count overflows", bname,
			      a->name);
	if ((rc = oq_hist_merge(&a->h, &b->h)))
		return oq_err(d, rc, "stats: %s: tensor '%s': %s", bname, a->name,
			      rc == OQ_ENOMEM ? "out of memory" : "histogram count overflows");
	/* the folds add up to the totals, whose sums fit */
	for (uint32_t f = 0; f < nf; f++) {
		oq_stat_fold *x = &a->fold[f];
		const oq_stat_fold *y = &b->fold[f];
		x->lo = y->lo < x->lo ? y->lo : x->lo;
		x->hi = y->hi > x->hi ? y->hi : x->hi;
		x->n_bad += y->n_bad;
		if ((rc = oq_hist_merge(&x->h, &y->h)))
			return oq_err(d, rc, "stats: %s: tensor '%s': %s", bname, a->name,
				      rc == OQ_ENOMEM ? "out of memory" : "histogram count overflows");
	}
	return OQ_OK;
}

int oq_stats_merge(oq_stats *acc, const oq_stats *b, const char *bname, oq_diag *d)
{
	oq_stat *v;
	size_t i = 0, j = 0, k = 0;
	int rc;

	if (acc->model_fp != b->model_fp)
		return oq_err(d, OQ_EINVAL,
			      "stats: %s was computed for another model or other rewrite options than "
			      "the files before it; calibrate every shard with the same model and options",
			      bname);
	if (acc->kind != b->kind)
		return oq_err(d, OQ_EINVAL,
			      "stats: %s holds %s, the files before it %s; calibrate every shard with the "
			      "same --method",
			      bname, kind_name(b->kind), kind_name(acc->kind));
	if (acc->n_folds != b->n_folds)
		return oq_err(d, OQ_EINVAL,
			      "stats: %s holds %u folds per tensor, the files before it %u; calibrate "
			      "every shard with the same --method and --calib-folds",
			      bname, b->n_folds, acc->n_folds);
	if (acc->n_shards != b->n_shards || acc->n_total != b->n_total)
		return oq_err(d, OQ_EINVAL,
			      "stats: %s splits %llu samples into %u shards, the files before it %llu "
			      "into %u; use the same --calib, --calib-limit and --shard I/N",
			      bname, (unsigned long long)b->n_total, b->n_shards,
			      (unsigned long long)acc->n_total, acc->n_shards);
	for (uint32_t s = 0; s < b->n_shards; s++)
		if (acc->covered[s] && b->covered[s])
			return oq_err(d, OQ_EINVAL,
				      "stats: %s: shard %u of %u is already in the files before it; give "
				      "each shard once",
				      bname, s, b->n_shards);
	/* union of the sorted record lists (a shard without samples has no records) */
	if (!(v = oq_calloc(acc->n + b->n, sizeof *v)))
		return oq_err(d, OQ_ENOMEM, "stats: out of memory");
	while (i < acc->n || j < b->n) {
		int c = i == acc->n ? 1 : j == b->n ? -1 : strcmp(acc->v[i].name, b->v[j].name);
		if (c < 0) {
			v[k++] = acc->v[i++];
		} else if (c > 0) {
			if (copy_stat(&v[k], &b->v[j], b->n_folds)) {
				stat_free(&v[k], b->n_folds);
				rc = oq_err(d, OQ_ENOMEM, "stats: out of memory");
				goto fail;
			}
			k++;
			j++;
		} else {
			v[k] = acc->v[i++];
			if ((rc = merge_stat(&v[k++], &b->v[j++], b->n_folds, bname, d)))
				goto fail;
		}
	}
	free(acc->v);
	acc->v = v;
	acc->n = k;
	for (uint32_t s = 0; s < b->n_shards; s++)
		acc->covered[s] |= b->covered[s];
	acc->n_samples += b->n_samples;
	return OQ_OK;
fail:
	/* records taken from acc stay owned by acc: free only the copies from b */
	for (size_t x = 0; x < k; x++) {
		int from_acc = 0;
		for (size_t y = 0; y < acc->n && !from_acc; y++)
			from_acc = v[x].name == acc->v[y].name;
		if (!from_acc)
			stat_free(&v[x], b->n_folds);
	}
	free(v);
	return rc;
}

int oq_stats_merge_files(const char *const *paths, size_t n, oq_stats *out, oq_diag *d)
{
	int rc;

	memset(out, 0, sizeof *out);
	if (n == 0)
		return oq_err(d, OQ_EUSAGE, "merge-stats: no input files");
	if ((rc = oq_stats_read(paths[0], out, d)))
		return rc;
	for (size_t i = 1; i < n; i++) {
		oq_stats b;
		if ((rc = oq_stats_read(paths[i], &b, d))) {
			oq_stats_free(out);
			return rc;
		}
		rc = oq_stats_merge(out, &b, paths[i], d);
		oq_stats_free(&b);
		if (rc) {
			oq_stats_free(out);
			return rc;
		}
	}
	return OQ_OK;
}
