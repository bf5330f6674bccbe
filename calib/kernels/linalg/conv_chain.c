/*
 * conv_chain.c - a Conv followed by a depthwise Conv on its output, run as
 * one kernel (oq_conv_chain_run; the executor's plan finds the pairs).
 *
 * A convolution A (group 1) whose output feeds only a depthwise
 * convolution B (MobileNet's expansion 1x1 and 3x3 depthwise; its stem
 * conv and first depthwise) runs as one pass over bands of B's output
 * rows and groups of CHAIN_CH channels (B's channel c reads only A's
 * channel c): per item, A's output rows that B reads are computed for
 * the group's channels into a per-thread buffer of at most CHAIN_E_BYTES
 * (the rows two bands share are computed by both), A's epilogue applied,
 * and B runs on that buffer with its own epilogue, straight into B's
 * output. A's output (MobileNet's expanded tensors are its largest) is
 * never written out and read back; each of its values is the one the
 * separate kernels compute, so B's output keeps its bits. Without the
 * AVX-512 kernels the two convolutions run one after the other.
 */
#include "calib/kernels/linalg/conv_internal.h"

#include <stdlib.h>
#include <string.h>

#if defined(HAVE_X86_KERNELS)
#define CHAIN_E_BYTES (384u << 10) /* A's output rows of one item (a thread's buffer), at most */
#define CHAIN_CH OQ_PACKED_W_NR    /* channels per item: one weight panel, two depthwise blocks */
#define CHAIN_ITEMS 8              /* items a chain is cut into at least, where rows allow */

typedef struct chain_job {
	oq_kctx *k;            /* for oq_k_scratch, or NULL (malloc) */
	const oq_conv_geom *ga, *gb; /* A (2-D, group 1) and B (depthwise on A's output) */
	const float *x, *wa, *ba;
	const oq_packed_w *pwa;      /* A's weight packed, or NULL (wa in place) */
	const oq_kfuse *epa;   /* A's epilogue (no tensor operands), or NULL */
	float *y;              /* B's output */
	int direct, chan;      /* A: 1x1 input in place as col / channels in the lanes (gemm_chan) */
	int64_t kc;            /* A's depth */
	int64_t band, nband;   /* B output rows per band, bands per image */
	int64_t ngrp;          /* channel groups (CHAIN_CH channels) */
	int64_t pmax;          /* A positions of a band, at most */
	dw_chan_job d;             /* B (its g replaced per band) */
	atomic_int oom;
} chain_job;

/* A's output rows [*ih0, *ih1) that B's output rows [oh0, oh1) read. */
static void chain_rows(const chain_job *j, int64_t oh0, int64_t oh1, int64_t *ih0, int64_t *ih1)
{
	const oq_conv_geom *gb = j->gb;
	*ih0 = oh0 * gb->stride[0] - gb->pad[0];
	*ih1 = (oh1 - 1) * gb->stride[0] - gb->pad[0] + j->d.span;
	if (*ih0 < 0)
		*ih0 = 0;
	if (*ih1 > gb->in[0])
		*ih1 = gb->in[0];
	if (*ih1 < *ih0)
		*ih1 = *ih0;
}

static size_t chain_col_floats(const chain_job *j)
{
	return j->direct && j->chan ? 0 : packed_col_floats(j->kc, j->pmax) + (size_t)j->pmax;
}

AVX512 static void chain_range(void *ctx, size_t begin, size_t end)
{
	chain_job *j = ctx;
	const oq_conv_geom *ga = j->ga, *gb = j->gb;
	int64_t ma = ga->m, W = gb->in[1];
	size_t ne = (size_t)CHAIN_CH * (size_t)round_up(j->pmax, 16), nc = chain_col_floats(j);
	size_t nr = oq_conv_dw_chan_scratch_floats(&j->d);
	size_t need = (ne + round_up((int64_t)nc, 16) + nr) * sizeof(float);
	float *own = j->k ? NULL : aligned_alloc(64, need), *e = j->k ? oq_k_scratch(j->k, need) : own;
	float *col, *ring;
	int reg = j->epa && !oq_conv_late_act(j->epa) && !j->epa->n_steps;
	tile_a A;

	if (!e) {
		atomic_store(&j->oom, 1);
		return;
	}
	col = e + ne;
	ring = col + round_up((int64_t)nc, 16);
	memset(ring, 0, nr * sizeof(float));
	if (j->pwa) {
		A.a = j->pwa->p;
		A.lda = 0;
		A.pstride = j->kc * OQ_PACKED_W_NR;
	} else {
		A.a = j->wa;
		A.lda = j->kc;
		A.pstride = 0;
	}
	for (size_t it = begin; it < end; it++) {
		int64_t grp = (int64_t)it % j->ngrp, rest = (int64_t)it / j->ngrp, band = rest % j->nband;
		int64_t n = rest / j->nband, ih0, ih1, p0, pp, m0 = grp * CHAIN_CH;
		int64_t nch = ma - m0 < CHAIN_CH ? ma - m0 : CHAIN_CH;
		int64_t oh0 = band * j->band, oh1 = oh0 + j->band < gb->out[0] ? oh0 + j->band : gb->out[0];
		const float *xa = j->x + n * ga->c * ga->in_size;
		oq_conv_geom gbb;
		dw_chan_job dj;
		tile_epi ze;
		tile_a Ag = A;

		chain_rows(j, oh0, oh1, &ih0, &ih1);
		p0 = ih0 * W;
		pp = (ih1 - ih0) * W;
		if (pp == 0)
			continue;
		/* A: rows [ih0, ih1) of its output, channels [m0, m0 + nch), into e ([nch][pp]) */
		if (!(j->direct && j->chan))
			oq_conv_pack_col(ga, xa, ga->out_size, j->direct, 0, j->kc, j->kc, p0, pp, col + packed_col_floats(j->kc, j->pmax),
					 col);
		if (reg) {
			memset(&ze, 0, sizeof ze);
			ze.scale = j->epa->scale ? j->epa->scale + m0 : NULL;
			ze.shift = j->epa->scale ? j->epa->shift + m0 : NULL;
			ze.act = j->epa->act.kind;
			ze.lo = j->epa->act.a;
			ze.hi = j->epa->act.b;
			ze.ldc = pp;
		}
		Ag.a = A.pstride ? A.a + m0 / OQ_PACKED_W_NR * A.pstride : A.a + m0 * A.lda;
		if (j->chan)
			oq_conv_gemm_chan(nch, pp, j->kc, Ag.a, Ag.pstride, xa + p0, ga->in_size, j->direct ? NULL : col, e, pp,
					  j->ba ? j->ba + m0 : NULL, reg ? &ze : NULL);
		else
			oq_conv_gemm_pos(nch, pp, j->kc, &Ag, col, NULL, e, pp, j->ba ? j->ba + m0 : NULL, reg ? &ze : NULL);
		if (j->epa && !reg)
			oq_conv_epi_tile(j->epa, m0, nch, 0, e, pp, pp);
		/* B: its output rows [oh0, oh1) of the same channels (row ih of A's output at ih - ih0) */
		gbb = *gb;
		gbb.in[0] = ih1 - ih0;
		gbb.pad[0] = gb->pad[0] + ih0;
		gbb.in_size = pp;
		dj = j->d;
		dj.g = &gbb;
		for (int64_t c0 = m0; c0 < m0 + nch; c0 += 16)
			oq_conv_dw_chan_block(&dj, e + (c0 - m0) * pp, j->y + (n * gb->c + c0) * gb->out_size, c0, oh0, oh1, ring,
					      ring + (size_t)j->d.span * (size_t)j->d.wp * 16);
	}
	free(own);
}
#endif

int oq_conv_chain_run(oq_kctx *k, const oq_conv_geom *ga0, const float *x, const float *wa, const oq_packed_w *pwa,
		      const float *ba, const oq_kfuse *epa, const oq_conv_geom *gb0, const float *wb, const float *bb,
		      const oq_kfuse *epb, float *y)
{
	oq_conv_geom ga, gb;
	int rc = OQ_OK;

	oq_conv_as_2d(ga0, &ga);
	oq_conv_as_2d(gb0, &gb);
	if (gb.group != gb.c || gb.m != gb.c || gb.c != ga.m || gb.n != ga.n || gb.in[0] != ga.out[0] ||
	    gb.in[1] != ga.out[1] || (epa && epa->n_t) || (epb && epb->n_t))
		return OQ_EINVAL;
	if (ga.n == 0 || gb.out_size == 0 || ga.out_size == 0 || ga.m == 0)
		return OQ_OK;
#if defined(HAVE_X86_KERNELS)
	if (oq_conv_use_avx512() && !oq_linalg_use_ref && ga.nsp == 2 && ga.group == 1 && oq_conv_dw_chan_fits(&gb) && (wa || pwa)) {
		chain_job j;
		int64_t rows, items;
		oq_packed_w own;
		memset(&j, 0, sizeof j);
		memset(&own, 0, sizeof own);
		j.k = k;
		j.ga = &ga;
		j.gb = &gb;
		j.x = x;
		j.wa = wa;
		j.ba = ba;
		j.pwa = pwa;
		j.epa = epa;
		j.y = y;
		j.kc = ga.c * ga.k_size;
		j.direct = 1;
		for (int d = 0; d < 2; d++)
			if (ga.k[d] != 1 || ga.stride[d] != 1 || ga.pad[d] != 0 || ga.out[d] != ga.in[d])
				j.direct = 0;
		oq_conv_dw_chan_setup(&j.d, k, &gb, NULL, wb, bb, epb, y);
		/* bands: A's rows of a band (a group's channels) within CHAIN_E_BYTES, at least one output row */
		rows = (int64_t)(CHAIN_E_BYTES / sizeof(float)) / (CHAIN_CH * gb.in[1]);
		j.band = rows > j.d.span ? (rows - j.d.span) / gb.stride[0] + 1 : 1;
		if (j.band > gb.out[0])
			j.band = gb.out[0];
		/* at least CHAIN_ITEMS items where bands of 8 rows allow (a 32-channel stem: 5 -> 8 bands) */
		j.ngrp = ceil_div(ga.m, CHAIN_CH);
		if (ga.n * j.ngrp * ceil_div(gb.out[0], j.band) < CHAIN_ITEMS) {
			int64_t want = ceil_div(gb.out[0], ceil_div(CHAIN_ITEMS, ga.n * j.ngrp));
			if (want < 8)
				want = 8;
			if (want < j.band)
				j.band = want;
		}
		j.nband = ceil_div(gb.out[0], j.band);
		j.pmax = ((j.band - 1) * gb.stride[0] + j.d.span) * gb.in[1];
		if (j.pmax > ga.out_size)
			j.pmax = ga.out_size;
		j.chan = oq_conv_use_chan_lanes(&ga, j.kc, ga.m);
		if (j.chan && !pwa) {
			if ((rc = oq_packed_w_pack(wa, ga.m, j.kc, 1, &own)))
				return rc;
			j.pwa = &own;
		}
		atomic_init(&j.oom, 0);
		items = ga.n * j.nband * j.ngrp;
		oq_k_parallel(k, (size_t)items, 1, chain_range, &j);
		oq_packed_w_free(&own);
		return atomic_load(&j.oom) ? OQ_ENOMEM : OQ_OK;
	}
#endif
	{ /* the two kernels one after the other */
		size_t n;
		float *t;
		if (!oq_mul_size((size_t)(ga.n * ga.m), (size_t)ga.out_size, &n) || !oq_mul_size(n, sizeof(float), &n) ||
		    !(t = aligned_alloc(64, (n + 63) / 64 * 64)))
			return OQ_ENOMEM;
		rc = oq_conv_run_packed(k, OQ_LT_F32, ga0, x, wa, pwa, ba, epa, t);
		if (!rc)
			rc = oq_conv_run_epilogue(k, OQ_LT_F32, gb0, t, wb, bb, epb, y);
		free(t);
	}
	return rc;
}

