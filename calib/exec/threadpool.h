/*
 * threadpool.h - the executor's thread pool: a parallel-for over [0, n) whose
 * items are handed out in chunks to the caller and n - 1 workers.
 *
 * Kernels reach it through oq_k_parallel (kernel.h); each executor makes
 * one pool (oq_exec_new). Which thread runs which chunk is decided at run
 * time (an atomic counter), so a kernel must compute each item the same
 * way whatever range it falls in: then the results do not depend on the
 * thread count or on scheduling.
 */
#ifndef OQ_POOL_H
#define OQ_POOL_H

#include <stddef.h>

#include "src/ir/ir.h"

typedef struct oq_pool oq_pool;

/* fn(ctx, begin, end) computes items [begin, end). */
typedef void (*oq_range_fn)(void *ctx, size_t begin, size_t end);

/* A pool of `threads` threads including the caller (< 1: 1, i.e. no workers). OQ_ENOMEM on failure. */
int oq_pool_new(int threads, oq_pool **out) OQ_WUR;
/* Stops and joins the workers; NULL is a no-op. */
void oq_pool_free(oq_pool *p);
/* Threads including the caller. */
int oq_pool_threads(const oq_pool *p);
/*
 * Calls fn over [0, n) in chunks of at least `grain` items (the last one may
 * be shorter), run by the caller and the workers; returns when all are
 * done. Nested calls (from inside fn) and pools of one thread run
 * fn(ctx, 0, n) inline.
 */
void oq_pool_run(oq_pool *p, size_t n, size_t grain, oq_range_fn fn, void *ctx);
/* Index of the calling thread in the pool running it: 0 for callers, 1..threads-1 for workers. */
int oq_pool_self(void);

#endif
