/*
 * test_pool.c - the executor's thread pool (calib/exec/threadpool.c).
 *
 * oq_pool_run must call fn on chunks that cover [0, n) exactly once, none
 * shorter than the grain except the last, for any thread count; run nested
 * calls inline; and survive many back-to-back jobs, including jobs separated
 * by sleeps longer than the spin time (workers asleep on the condition
 * variable) and jobs whose chunks finish in a different order than they
 * were handed out. Expected values are counted here item by item.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib/exec/threadpool.h"

typedef struct job {
	size_t n, grain;
	atomic_int *hits;       /* per item: times computed */
	atomic_int bad;         /* a chunk shorter than the grain (not the last), out of range, or a bad self index */
	atomic_int calls;       /* fn calls */
	atomic_int inside_self; /* nested calls seen running on another thread */
	oq_pool *p;
	int nested;             /* fn calls oq_pool_run itself */
	int slow;               /* the first chunk sleeps, so later chunks finish first */
} job;

static void nested_fn(void *ctx, size_t b, size_t e)
{
	int *who = ctx;
	for (size_t i = b; i < e; i++)
		if (who[i] != oq_pool_self())
			who[i] = -1;
}

static void count_fn(void *ctx, size_t b, size_t e)
{
	job *j = ctx;
	atomic_fetch_add(&j->calls, 1);
	if (b >= e || e > j->n || (e - b < j->grain && e != j->n) || oq_pool_self() < 0 ||
	    oq_pool_self() >= oq_pool_threads(j->p))
		atomic_store(&j->bad, 1);
	if (j->slow && b == 0) {
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
	}
	for (size_t i = b; i < e && i < j->n; i++)
		atomic_fetch_add(&j->hits[i], 1);
	if (j->nested) {
		/* the nested call must run inline, on this thread */
		int who[8];
		for (int i = 0; i < 8; i++)
			who[i] = oq_pool_self();
		oq_pool_run(j->p, 8, 1, nested_fn, who);
		for (int i = 0; i < 8; i++)
			if (who[i] != oq_pool_self())
				atomic_store(&j->inside_self, 1);
	}
}

static void check_run(oq_pool *p, size_t n, size_t grain, int nested, int slow)
{
	job j;
	memset(&j, 0, sizeof j);
	j.n = n;
	j.grain = grain;
	j.p = p;
	j.nested = nested;
	j.slow = slow;
	j.hits = calloc(n ? n : 1, sizeof *j.hits);
	cr_assert(j.hits);
	oq_pool_run(p, n, grain, count_fn, &j);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(atomic_load(&j.hits[i]), 1, "n=%zu grain=%zu: item %zu computed %d times", n, grain, i,
			     atomic_load(&j.hits[i]));
	cr_assert_eq(atomic_load(&j.bad), 0, "n=%zu grain=%zu: a chunk out of range or below the grain", n, grain);
	cr_assert_eq(atomic_load(&j.inside_self), 0, "nested call did not run inline");
	if (n == 0)
		cr_assert_eq(atomic_load(&j.calls), 0);
	free(j.hits);
}

Test(pool, covers_every_item_once)
{
	static const size_t ns[] = {0, 1, 2, 3, 5, 7, 8, 9, 31, 100, 1000, 100003};
	static const size_t grains[] = {0, 1, 2, 3, 7, 64, 4096};
	for (int t = 1; t <= 4; t++) {
		oq_pool *p;
		cr_assert_eq(oq_pool_new(t, &p), 0);
		cr_assert_eq(oq_pool_threads(p), t);
		for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
			for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++)
				check_run(p, ns[a], grains[g], 0, 0);
		oq_pool_free(p);
	}
}

Test(pool, nested_calls_run_inline)
{
	for (int t = 1; t <= 3; t++) {
		oq_pool *p;
		cr_assert_eq(oq_pool_new(t, &p), 0);
		check_run(p, 64, 1, 1, 0);
		oq_pool_free(p);
	}
}

Test(pool, chunks_finish_out_of_order)
{
	oq_pool *p;
	cr_assert_eq(oq_pool_new(3, &p), 0);
	for (int r = 0; r < 5; r++)
		check_run(p, 12, 1, 0, 1);
	oq_pool_free(p);
}

Test(pool, back_to_back_and_after_sleep)
{
	oq_pool *p;
	cr_assert_eq(oq_pool_new(2, &p), 0);
	for (int r = 0; r < 20000; r++)
		check_run(p, (size_t)(r % 17) + 1, 1, 0, 0);
	for (int r = 0; r < 5; r++) {
		/* longer than the spin: the worker sleeps and must be woken */
		struct timespec ts = {0, 3000000};
		nanosleep(&ts, NULL);
		check_run(p, 9, 1, 0, 0);
	}
	oq_pool_free(p);
}

Test(pool, self_index)
{
	oq_pool *p;
	cr_assert_eq(oq_pool_new(1, &p), 0);
	cr_assert_eq(oq_pool_self(), 0);
	oq_pool_free(p);
	oq_pool_free(NULL);
}
