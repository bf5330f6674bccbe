/*
 * stats.h - calibration statistics files: what `onnxq calibrate` writes for
 * one shard of the samples, `onnxq merge-stats` combines and
 * `onnxq quantize --stats` turns into ranges, with a result byte-identical
 * to calibrating all samples on one machine.
 *
 * Two kinds, matching the two passes of calib/calibrate.c:
 *   ranges:     per tensor the exact finite min/max, NaN/Inf count and a
 *               "seen" flag. Merging takes min, max, sum, or: exact.
 *   histograms: per tensor the global ranges (copied from a merged ranges
 *               file, identical in every shard) plus a fixed-range histogram
 *               of this shard's values over them. Merging adds the integer
 *               counts: exact.
 * minmax needs only ranges; percentile, entropy and mse need a histogram
 * round over the merged ranges (the histograms must cover the global range,
 * as on one machine). ema depends on the sample order and is refused.
 *
 * Shards: the samples (lexical order, after --calib-limit) are split into N
 * contiguous blocks; shard I (0-based, I < N) gets samples
 * [I*q + min(I, r), (I+1)*q + min(I+1, r)) with q = total / N, r = total % N.
 * A file records N, the total and which shards it covers; merge refuses
 * overlaps and mismatches, quantize refuses an incomplete set.
 *
 * File format (version 1, all integers little-endian, doubles as their
 * IEEE-754 bit pattern):
 *   magic "ONNXQSTA" | u32 version | u32 kind (1 ranges, 2 histograms)
 *   | u32 hist_mode | u32 reserved (0) | u64 model fingerprint
 *   | u64 ranges id (histograms: checksum of the ranges file; ranges: 0)
 *   | u64 total samples | u64 covered samples | u32 N | ceil(N/8) bytes of
 *   coverage bitmap (shard I: bit I%8 of byte I/8) | u64 record count
 *   | records | u64 checksum of everything before it.
 * A record: u32 name length | name bytes (no NUL) | u32 flags (1 seen,
 *   2 histogram) | f64 min | f64 max | u64 NaN/Inf count, then with a
 *   histogram: f64 lo | f64 hi | u32 abs | u32 bins | u64 zeros | bins x u64.
 * Records are sorted by name (strcmp) and unique.
 */
#ifndef OQ_STATS_H
#define OQ_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir.h"
#include "observe.h"

#define OQ_STATS_VERSION 1
#define OQ_STATS_MAX_SHARDS 65536

enum {
	OQ_STATS_RANGES = 1, /* round 1: exact min/max */
	OQ_STATS_HIST = 2,   /* round 2: histograms over merged ranges */
};

/* Statistics of one tensor (a main-graph value). */
typedef struct oq_stat {
	char *name;
	int seen;       /* observed with a float dtype */
	double lo, hi;  /* finite min/max; lo > hi when no finite value was seen */
	uint64_t n_bad; /* NaN/Inf elements skipped */
	oq_hist h;      /* histogram (h.bin NULL: none, e.g. a constant tensor) */
} oq_stat;

/* A statistics file in memory. */
typedef struct oq_stats {
	int kind;           /* OQ_STATS_* */
	int hist_mode;       /* histogram settings (calibrate.c hist_mode: 1 entropy, else 2 + grid); 0: ranges */
	uint64_t model_fp;  /* oq_stats_fingerprint of the rewritten model */
	uint64_t ranges_id; /* histograms: checksum of the ranges file they were built over */
	uint64_t n_total;   /* samples of the whole set */
	uint64_t n_samples; /* samples these statistics cover */
	uint32_t n_shards;  /* N of --shard I/N (1 without sharding) */
	uint8_t *covered;   /* n_shards flags: 1 = shard included */
	oq_stat *v;         /* records, sorted by name */
	size_t n;
	uint64_t sum;       /* checksum of the file it was read from / last written to */
} oq_stats;

void oq_stats_free(oq_stats *s);

/* Fingerprint of a (rewritten) model: file bytes, opsets, graph topology. */
uint64_t oq_stats_fingerprint(const oq_model *m);

/* 64-bit checksum (word-wise multiply-xorshift; independent of host byte order). */
uint64_t oq_stats_hash(const void *p, size_t n, uint64_t seed);

/* Serialises s into a new buffer *buf of *len bytes (sets s->sum). */
int oq_stats_encode(oq_stats *s, uint8_t **buf, size_t *len, oq_diag *d) OQ_WUR;
/* Parses buf; `what` names the source in errors. Corrupt / truncated /
 * other-version data is OQ_EINVAL. */
int oq_stats_decode(const uint8_t *buf, size_t len, const char *what, oq_stats *s,
		    oq_diag *d) OQ_WUR;

/* File I/O: write through a temporary file + rename; read checks everything decode does. */
int oq_stats_write(const char *path, oq_stats *s, oq_diag *d) OQ_WUR;
int oq_stats_read(const char *path, oq_stats *s, oq_diag *d) OQ_WUR;

/* Folds b (read from `bname`) into acc. Different model, kind, N, total or
 * ranges, or a shard in both, is OQ_EINVAL. */
int oq_stats_merge(oq_stats *acc, const oq_stats *b, const char *bname, oq_diag *d) OQ_WUR;

/* Reads and merges n files into out (`onnxq merge-stats`). */
int oq_stats_merge_files(const char *const *paths, size_t n, oq_stats *out, oq_diag *d) OQ_WUR;

/* OQ_EINVAL unless every shard is covered ("stats cover shards 0,2 of 4"). */
int oq_stats_check_complete(const oq_stats *s, const char *what, oq_diag *d) OQ_WUR;

/* Does a tensor with finite range [lo, hi] get a histogram? Not when the
 * range (of |x| when abs) is one point: it is exact already. */
static inline int oq_stats_wants_hist(double lo, double hi, int abs)
{
	if (!(lo <= hi))
		return 0;
	if (abs)
		return (-lo > hi ? -lo : hi) > 0;
	return lo < hi;
}

/* The first sample and the end of shard i of n over total samples. */
void oq_stats_shard_range(uint64_t total, uint32_t i, uint32_t n, uint64_t *begin,
			  uint64_t *end);

#endif
