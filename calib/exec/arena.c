/*
 * arena.c - the executor's activation arena.
 *
 * Activation buffers are carved first fit, lowest address first, out of a
 * few large chunks whose pages the system backs only once touched; a
 * released buffer returns to its chunk's free list, merged with its free
 * neighbours. Address-ordered first fit reuses the same memory across
 * tensor sizes, so what is resident stays near the peak of live
 * activations. A buffer is the need rounded up to 64 bytes plus 64 (what
 * vector tails may touch), 64-byte aligned; placement depends only on the
 * sequence of sizes, so runs stay deterministic. Outputs made while
 * planning (folded constants, kept by the plan) and graph outputs handed
 * to the caller live outside the arena.
 */
#include "calib/exec/exec_internal.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_CHUNK ((size_t)64 << 20) /* bytes of a chunk (more for a larger buffer) */

struct span {
	size_t off, len;       /* a free range of a chunk */
};

struct chunk {
	char *base;             /* 4096-byte aligned */
	size_t size;           /* bytes */
	struct span *free;     /* free ranges by offset, never adjacent */
	size_t n_free, cap_free;
};

void *oq_arena_get(oq_exec *e, size_t need, size_t *cap)
{
	size_t n;
	struct chunk *c;

	if (need > SIZE_MAX - 8192) /* the rounding below and a chunk's to whole pages */
		return NULL;
	n = (need + 63) / 64 * 64 + 64;
	if (e->planning) {
		*cap = 0;
		return aligned_alloc(64, n);
	}
	for (size_t i = 0; i < e->n_chunks; i++) {
		c = &e->chunks[i];
		for (size_t j = 0; j < c->n_free; j++) {
			struct span *f = &c->free[j];
			if (f->len >= n) {
				char *p = c->base + f->off;
				f->off += n;
				f->len -= n;
				if (!f->len) {
					memmove(f, f + 1, (c->n_free - j - 1) * sizeof *f);
					c->n_free--;
				}
				*cap = n;
				return p;
			}
		}
	}
	/* a new chunk: its untouched pages cost nothing */
	if (oq_grow(&e->chunks, &e->cap_chunks, e->n_chunks + 1, sizeof *e->chunks))
		return NULL;
	c = &e->chunks[e->n_chunks];
	memset(c, 0, sizeof *c);
	c->size = n > ARENA_CHUNK ? (n + 4095) / 4096 * 4096 : ARENA_CHUNK;
	if (!(c->base = aligned_alloc(4096, c->size)))
		return NULL;
	if (c->size > n) {
		if (oq_grow(&c->free, &c->cap_free, 1, sizeof *c->free)) {
			free(c->base);
			return NULL;
		}
		c->free[0].off = n;
		c->free[0].len = c->size - n;
		c->n_free = 1;
	}
	e->n_chunks++;
	*cap = n;
	return c->base;
}

void oq_arena_release(oq_exec *e, oq_rt *t)
{
	if (t->data && !t->borrowed && t->cap) {
		for (size_t i = 0; i < e->n_chunks; i++) {
			struct chunk *c = &e->chunks[i];
			size_t off, j = 0;
			if ((char *)t->data < c->base || (char *)t->data >= c->base + c->size)
				continue;
			off = (size_t)((char *)t->data - c->base);
			while (j < c->n_free && c->free[j].off < off)
				j++;
			/* merge with the free range before and / or after, else insert one */
			if (j > 0 && c->free[j - 1].off + c->free[j - 1].len == off) {
				c->free[j - 1].len += t->cap;
				if (j < c->n_free && off + t->cap == c->free[j].off) {
					c->free[j - 1].len += c->free[j].len;
					memmove(&c->free[j], &c->free[j + 1], (c->n_free - j - 1) * sizeof *c->free);
					c->n_free--;
				}
			} else if (j < c->n_free && off + t->cap == c->free[j].off) {
				c->free[j].off = off;
				c->free[j].len += t->cap;
			} else if (!oq_grow(&c->free, &c->cap_free, c->n_free + 1, sizeof *c->free)) {
				memmove(&c->free[j + 1], &c->free[j], (c->n_free - j) * sizeof *c->free);
				c->free[j].off = off;
				c->free[j].len = t->cap;
				c->n_free++;
			} /* else out of memory for the list: the range stays used until the executor goes */
			t->data = NULL;
			break;
		}
	}
	oq_rt_release(t);
}

void oq_arena_free(oq_exec *e)
{
	for (size_t i = 0; i < e->n_chunks; i++) {
		free(e->chunks[i].base);
		free(e->chunks[i].free);
	}
	free(e->chunks);
	e->chunks = NULL;
	e->n_chunks = e->cap_chunks = 0;
}
