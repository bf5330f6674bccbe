/*
 * stats_file.h - calibration statistics files: what `onnxq calibrate` writes for
 * one shard of the samples, `onnxq merge-stats` combines and
 * `onnxq quantize --stats` turns into ranges, with a result byte-identical
 * to calibrating all samples on one machine.
 *
 * One round, one pass over the shard's samples (calib/calibrate.c). Two
 * kinds of file:
 *   ranges:     per tensor the exact finite min/max, NaN/Inf count and a
 *               "seen" flag (--method minmax). Merging takes min, max,
 *               sum, or: exact.
 *   histograms: the same plus each tensor's histogram (calib/histogram.h: a
 *               power-of-two grid that depends on the values alone) and
 *               its exact-zero count (percentile, entropy, mse). Merging
 *               brings both histograms to the larger grid and adds the
 *               integer counts: exact, in any order.
 *   folds:      (--method auto) a histograms file whose records hold the
 *               min/max, NaN/Inf count and histogram of each fold of the
 *               samples (calib/folds.h: fold of sample i by its index in
 *               the whole set, so every shard files its samples under the
 *               same folds); the tensor's totals are their exact merge.
 *               Merging adds fold by fold.
 * A histogram file serves every histogram method and grid (and minmax), a
 * folds file also auto; ema depends on the sample order and is refused.
 *
 * Shards: the samples (lexical order, after --calib-limit) are split into N
 * contiguous blocks; shard I (0-based, I < N) gets samples
 * [I*q + min(I, r), (I+1)*q + min(I+1, r)) with q = total / N, r = total % N.
 * A file records N, the total and which shards it covers; merge refuses
 * overlaps and mismatches, quantize refuses an incomplete set.
 *
 * File format (version 2, or 3 for a folds file; all integers little-endian,
 * doubles as their IEEE-754 bit pattern; version 1 was the two-round format
 * and is refused):
 *   magic "ONNXQSTA" | u32 version | u32 kind (1 ranges, 2 histograms)
 *   | u32 bins per side (histograms: OQ_HIST_SIDE; ranges: 0)
 *   | u32 folds K (version 3: 2..OQ_FOLDS_MAX, kind 2; version 2: 0)
 *   | u64 model fingerprint | u64 total samples | u64 covered samples | u32 N
 *   | ceil(N/8) bytes of coverage bitmap (shard I: bit I%8 of byte I/8)
 *   | u64 record count | records | u64 checksum of everything before it.
 * A record: u32 name length | name bytes (no NUL) | u32 flags (1 seen,
 *   2 histogram) | f64 min | f64 max | u64 NaN/Inf count, then with flag 2
 *   (histogram files only; tensors whose range quantize reads): u64 exact
 *   zeros | u32 e - OQ_HIST_EMIN | u32 P | P x u64 (bins 0..P-1 of x > 0)
 *   | u32 M | M x u64 (bins of x < 0); the bins past P, M are empty
 *   (trailing empty bins are left out; P = M = 0: no bins, and e - EMIN 0).
 *   Version 3: u32 name length | name bytes | u32 flags, then K times (fold
 *   0 first) what follows the flags in version 2: the fold's f64 min | f64
 *   max | u64 NaN/Inf count [| its histogram with flag 2].
 * Records are sorted by name (strcmp) and unique.
 */
#ifndef OQ_STATS_H
#define OQ_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "src/ir/ir.h"
#include "calib/histogram.h"

#define OQ_STATS_VERSION 2       /* files without folds */
#define OQ_STATS_VERSION_FOLDS 3 /* files with folds */
#define OQ_STATS_MAX_SHARDS 65536

enum {
	OQ_STATS_RANGES = 1, /* exact min/max (minmax) */
	OQ_STATS_HIST = 2,   /* exact min/max and histograms (percentile, entropy, mse) */
};

/* Statistics of one fold of one tensor. */
typedef struct oq_stat_fold {
	double lo, hi;  /* finite min/max; lo > hi when no finite value was seen */
	uint64_t n_bad; /* NaN/Inf elements skipped */
	oq_hist h;      /* histogram (with the tensor's `hist`) */
} oq_stat_fold;

/* Statistics of one tensor (a main-graph value). */
typedef struct oq_stat {
	char *name;
	int seen;       /* observed with a float dtype */
	double lo, hi;  /* finite min/max; lo > hi when no finite value was seen */
	uint64_t n_bad; /* NaN/Inf elements skipped */
	int hist;       /* histogram files: the histogram was kept (the tensor's range is needed) */
	oq_hist h;      /* that histogram (h.bin NULL: no non-zero finite value) */
	oq_stat_fold *fold; /* folds files: n_folds entries, whose merge lo, hi, n_bad and h are */
} oq_stat;

/* A statistics file in memory. */
typedef struct oq_stats {
	int kind;           /* OQ_STATS_* */
	uint64_t model_fp;  /* oq_stats_fingerprint of the rewritten model */
	uint64_t n_total;   /* samples of the whole set */
	uint64_t n_samples; /* samples these statistics cover */
	uint32_t n_shards;  /* N of --shard I/N (1 without sharding) */
	uint8_t *covered;   /* n_shards flags: 1 = shard included */
	uint32_t n_folds;   /* folds of each record (--method auto), 0: none */
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

/* Folds b (read from `bname`) into acc. Different model, kind, folds, N or
 * total, a shard in both, or a count that overflows, is OQ_EINVAL. */
int oq_stats_merge(oq_stats *acc, const oq_stats *b, const char *bname, oq_diag *d) OQ_WUR;

/* Reads and merges n files into out (`onnxq merge-stats`). */
int oq_stats_merge_files(const char *const *paths, size_t n, oq_stats *out, oq_diag *d) OQ_WUR;

/* OQ_EINVAL unless every shard is covered ("stats cover shards 0,2 of 4"). */
int oq_stats_check_complete(const oq_stats *s, const char *what, oq_diag *d) OQ_WUR;

/* The first sample and the end of shard i of n over total samples. */
void oq_stats_shard_range(uint64_t total, uint32_t i, uint32_t n, uint64_t *begin,
			  uint64_t *end);

#endif
