/*
 * threadpool.c - the executor's thread pool (see threadpool.h).
 *
 * A job is [0, n) cut into n_chunks chunks of `chunk` items. One 64-bit
 * atomic word, the ticket, holds (generation, n_chunks, next chunk index):
 * the caller publishes a job by storing a ticket with a new generation, and
 * every thread (the caller too) claims chunks by compare-and-swap on it.
 * A thread reads the job's fields (fn, ctx, sizes) only after claiming a
 * chunk of that generation, and the caller changes them only after every
 * chunk of the previous job has finished (the `done` counter), so a worker
 * that wakes late can never see a half-written job or run a chunk twice.
 * The caller never waits for a worker that has not started: it runs the
 * remaining chunks itself and waits only for chunks already claimed. So an
 * odd chunk count, a worker descheduled by the OS or a slow wake-up costs
 * at most one chunk of waiting.
 *
 * Waiting: kernels run back to back, separated by a few microseconds of
 * serial executor work, and a futex sleep/wake per parallel region costs
 * tens of microseconds (ORT and OpenMP runtimes spin for the same reason).
 * So a worker spins (with a pause) for up to SPIN_NS after its last chunk
 * before it sleeps on a condition variable, and the caller spins for up to
 * SPIN_NS for the claimed chunks to finish before it sleeps; after the first
 * SPIN_ALONE_NS of a spin it also yields the core between checks, for when
 * the machine is shared. The sleeping
 * side announces itself in an atomic counter before its final check, under
 * the mutex; the waking side changes the state and then reads the counter
 * (both sequentially consistent), so one of them always sees the other and
 * no wake-up is lost.
 *
 * Chunks: at most CHUNKS_PER_THREAD per thread and at least `grain` items
 * each, so a thread that finishes early takes another chunk. The split and
 * the chunk-to-thread assignment never change what an item computes
 * (kernel.h's contract for oq_k_parallel).
 */
#include "calib/exec/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long an idle thread spins before it sleeps: longer than the executor's serial gaps between kernels. */
#define SPIN_NS 200000
/*
 * After this much of the spin, each check also yields the core (sched_yield):
 * free on an idle machine, but when other processes share the cores a
 * spinning thread does not keep the thread it waits for off its core.
 */
#define SPIN_ALONE_NS 5000
/* Chunks per thread: enough for a thread that finishes early to pick up slack. */
#define CHUNKS_PER_THREAD 4
/* Bits of the ticket: generation (32), chunk count (16), next chunk (16). */
#define MAX_CHUNKS 0xffffu

struct oq_pool {
	int n;                       /* threads including the caller */
	int started;                 /* workers running (n - 1 once oq_pool_new succeeded) */
	pthread_t *tid;              /* [n - 1] workers */
	pthread_mutex_t mu;          /* guards the condition variables only */
	pthread_cond_t go;           /* sleeping workers wait here for a new ticket */
	pthread_cond_t fin;          /* a sleeping caller waits here for `done` */
	/* the current job: written by the caller while no chunk is claimed or running */
	oq_range_fn fn;
	void *ctx;
	size_t n_items;
	size_t chunk;                /* items per chunk */
	_Alignas(64) _Atomic uint64_t ticket; /* gen << 32 | n_chunks << 16 | next chunk */
	_Alignas(64) atomic_size_t done;      /* chunks of the current job finished */
	atomic_int sleepers;         /* workers blocked (or about to block) on go */
	atomic_int waiting;          /* the caller is blocked (or about to block) on fin */
	atomic_int stop;             /* oq_pool_free: workers exit */
};

/* Pool index of this thread (oq_pool_self), and whether it is inside a chunk (nested calls run inline). */
static _Thread_local int tl_self;
static _Thread_local int tl_inside;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint32_t t_gen(uint64_t t)
{
	return (uint32_t)(t >> 32);
}

/*
 * Claims and runs chunks of generation gen until none is left (or a newer
 * job replaced it); the thread that finishes the last chunk wakes a
 * sleeping caller.
 */
static void run_chunks(oq_pool *p, uint32_t gen)
{
	uint64_t t = atomic_load_explicit(&p->ticket, memory_order_acquire);

	for (;;) {
		size_t c, nc, b, e;
		if (t_gen(t) != gen || (t & MAX_CHUNKS) >= ((t >> 16) & MAX_CHUNKS))
			return;
		if (!atomic_compare_exchange_weak_explicit(&p->ticket, &t, t + 1, memory_order_acquire,
							   memory_order_acquire))
			continue;
		c = (size_t)(t & MAX_CHUNKS);
		nc = (size_t)((t >> 16) & MAX_CHUNKS);
		b = c * p->chunk;
		e = b + p->chunk < p->n_items ? b + p->chunk : p->n_items;
		tl_inside = 1;
		p->fn(p->ctx, b, e);
		tl_inside = 0;
		/* seq_cst: ordered before the read of `waiting` (see the file comment) */
		if (atomic_fetch_add(&p->done, 1) + 1 == nc && atomic_load(&p->waiting)) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->fin);
			pthread_mutex_unlock(&p->mu);
		}
		t = atomic_load_explicit(&p->ticket, memory_order_acquire);
	}
}

/* Waits (spinning, then sleeping) for a ticket of a generation other than seen, or stop. */
static uint64_t wait_job(oq_pool *p, uint32_t seen)
{
	int64_t end = 0;
	uint64_t t;

	for (unsigned i = 0;; i++) {
		t = atomic_load_explicit(&p->ticket, memory_order_acquire);
		if (t_gen(t) != seen || atomic_load_explicit(&p->stop, memory_order_relaxed))
			return t;
		if ((i & 63) == 0) {
			int64_t now = now_ns();
			if (!end)
				end = now + SPIN_NS;
			else if (now > end)
				break;
			else if (now > end - SPIN_NS + SPIN_ALONE_NS)
				sched_yield();
		}
		cpu_relax();
	}
	pthread_mutex_lock(&p->mu);
	atomic_fetch_add(&p->sleepers, 1);
	while (t_gen(t = atomic_load(&p->ticket)) == seen && !atomic_load(&p->stop))
		pthread_cond_wait(&p->go, &p->mu);
	atomic_fetch_sub(&p->sleepers, 1);
	pthread_mutex_unlock(&p->mu);
	return t;
}

typedef struct worker_arg {
	oq_pool *p;
	int self;
} worker_arg;

static void *worker(void *arg)
{
	worker_arg *a = arg;
	oq_pool *p = a->p;
	uint32_t seen = 0;

	tl_self = a->self;
	free(a);
	for (;;) {
		uint64_t t = wait_job(p, seen);
		if (atomic_load(&p->stop))
			break;
		seen = t_gen(t);
		run_chunks(p, seen);
	}
	return NULL;
}

int oq_pool_new(int threads, oq_pool **out)
{
	oq_pool *p = calloc(1, sizeof *p);

	*out = NULL;
	if (!p)
		return OQ_ENOMEM;
	p->n = threads < 1 ? 1 : threads;
	atomic_init(&p->ticket, 0);
	atomic_init(&p->done, 0);
	atomic_init(&p->sleepers, 0);
	atomic_init(&p->waiting, 0);
	atomic_init(&p->stop, 0);
	*out = p;
	if (p->n == 1)
		return OQ_OK;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->fin, NULL);
	p->tid = calloc((size_t)p->n - 1, sizeof *p->tid);
	if (!p->tid)
		goto fail;
	for (int i = 1; i < p->n; i++) {
		worker_arg *a = malloc(sizeof *a);
		if (!a)
			goto fail;
		a->p = p;
		a->self = i;
		if (pthread_create(&p->tid[i - 1], NULL, worker, a) != 0) {
			free(a);
			goto fail;
		}
		p->started++;
	}
	return OQ_OK;
fail:
	oq_pool_free(p);
	*out = NULL;
	return OQ_ENOMEM;
}

void oq_pool_free(oq_pool *p)
{
	if (!p)
		return;
	if (p->n > 1) {
		pthread_mutex_lock(&p->mu);
		atomic_store(&p->stop, 1);
		pthread_cond_broadcast(&p->go);
		pthread_mutex_unlock(&p->mu);
		for (int i = 0; i < p->started; i++)
			pthread_join(p->tid[i], NULL);
		pthread_mutex_destroy(&p->mu);
		pthread_cond_destroy(&p->go);
		pthread_cond_destroy(&p->fin);
	}
	free(p->tid);
	free(p);
}

int oq_pool_threads(const oq_pool *p)
{
	return p->n;
}

int oq_pool_self(void)
{
	return tl_self;
}

void oq_pool_run(oq_pool *p, size_t n, size_t grain, oq_range_fn fn, void *ctx)
{
	size_t chunks, chunk;
	uint64_t t;
	uint32_t gen;
	int64_t end = 0;

	if (n == 0)
		return;
	if (grain < 1)
		grain = 1;
	chunks = n / grain; /* so that chunk >= grain */
	if (chunks > (size_t)p->n * CHUNKS_PER_THREAD)
		chunks = (size_t)p->n * CHUNKS_PER_THREAD;
	if (chunks > MAX_CHUNKS)
		chunks = MAX_CHUNKS;
	if (chunks <= 1 || p->n <= 1 || tl_inside) {
		fn(ctx, 0, n);
		return;
	}
	chunk = (n + chunks - 1) / chunks;
	chunks = (n + chunk - 1) / chunk;
	/* no chunk of the previous job is claimed or running: the fields are ours */
	p->fn = fn;
	p->ctx = ctx;
	p->n_items = n;
	p->chunk = chunk;
	atomic_store_explicit(&p->done, 0, memory_order_relaxed);
	gen = t_gen(atomic_load_explicit(&p->ticket, memory_order_relaxed)) + 1;
	t = (uint64_t)gen << 32 | (uint64_t)chunks << 16;
	atomic_store(&p->ticket, t); /* seq_cst: before the read of `sleepers` */
	if (atomic_load(&p->sleepers) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->go);
		pthread_mutex_unlock(&p->mu);
	}
	run_chunks(p, gen);
	/* every chunk is claimed; wait for the ones other threads run */
	for (unsigned i = 0; atomic_load_explicit(&p->done, memory_order_acquire) < chunks; i++) {
		if ((i & 63) == 0) {
			int64_t now = now_ns();
			if (!end) {
				end = now + SPIN_NS;
			} else if (now > end - SPIN_NS + SPIN_ALONE_NS && now <= end) {
				sched_yield();
			} else if (now > end) {
				pthread_mutex_lock(&p->mu);
				atomic_store(&p->waiting, 1);
				while (atomic_load(&p->done) < chunks)
					pthread_cond_wait(&p->fin, &p->mu);
				atomic_store(&p->waiting, 0);
				pthread_mutex_unlock(&p->mu);
				break;
			}
		}
		cpu_relax();
	}
}
