/*
 * conv.c - the convolution engine's entry points (Conv: oq_conv_run,
 * oq_conv_run_epilogue, oq_conv_run_packed), the im2col path, the in-place
 * path and the direct-loop reference. The other parts of the engine:
 * conv_gemm.c (the GEMM of one tile on x86 register tiles, packed weights),
 * conv_depthwise.c, conv_epilogue.c (fused BN / activation / steps),
 * conv_chain.c (Conv -> depthwise in one pass), conv_transpose.c.
 *
 * Conv: per image and group, Y_g[Mg, P] = W_g[Mg, Kc] x col[Kc, P] (Kc =
 * C / group x kernel size, P = output positions), one GEMM per tile of
 * output channels x positions (conv_tiles). col is the input itself for a
 * 1x1 stride-1 unpadded convolution, else the im2col rows of the tile's
 * positions, built into a per-thread buffer (or, on AVX-512, packed panels
 * shared by the tile's channel tiles); for a stride-1 convolution with few
 * output channels, rows of a zero-padded copy of the input read in place
 * (conv_in_place). Float32 GEMMs run on the AVX-512 or AVX2 tiles of
 * conv_gemm.c where the CPU has them, else (and double always) through
 * BLAS; depthwise convolutions go to conv_depthwise.c. Every float32 path
 * forms each output as init + sum_k w * x in k order with one FMA per term
 * (or, depthwise, b + the taps in order), so all give the same bits.
 *
 * Tile sizes depend only on the shape, never on the thread count, so
 * results are identical for any number of threads. The _ref versions are
 * plain direct loops accumulating in double.
 * Spec: https://onnx.ai/onnx/operators/onnx__Conv.html
 */
#include "calib/kernels/linalg/conv_internal.h"

#include <stdlib.h>
#include <string.h>

int oq_linalg_use_blas = 0;
int oq_linalg_no_avx512 = 0;
int oq_conv_avx2_tail = 1;
int oq_linalg_dw_rows = 0;
int oq_linalg_no_in_place = 0;
_Atomic size_t oq_linalg_in_place_runs = 0;

void oq_conv_as_2d(const oq_conv_geom *g, oq_conv_geom *o)
{
	*o = *g;
	if (g->nsp != 1)
		return;
	o->nsp = 2;
	o->in[0] = o->out[0] = o->k[0] = o->stride[0] = o->dil[0] = 1;
	o->pad[0] = 0;
	o->in[1] = g->in[0];
	o->out[1] = g->out[0];
	o->k[1] = g->k[0];
	o->stride[1] = g->stride[0];
	o->dil[1] = g->dil[0];
	o->pad[1] = g->pad[0];
}

/* ----------------------------------------------------------------- im2col */

/*
 * Rows [r0, r0 + nr) of col (stored from col's row 0) for output positions
 * [p0, p0 + pp) of one image and group (x points at the group's first
 * channel); row r = (c, kernel
 * offset), kernel offsets in row-major order, as W stores them.
 */
#define IM2COL_2D(T, NAME)                                                                              \
	static void NAME(const oq_conv_geom *g, const T *x, int64_t r0, int64_t nr, int64_t p0, int64_t pp, \
			 T *col)                                                                        \
	{                                                                                               \
		int64_t H = g->in[0], W = g->in[1], OW = g->out[1], kh = g->k[0], kw = g->k[1];         \
		int64_t sh = g->stride[0], sw = g->stride[1], dh = g->dil[0], dw = g->dil[1];           \
		for (int64_t r = r0; r < r0 + nr; r++) {                                                \
			int64_t c = r / (kh * kw), i = (r / kw) % kh, j = r % kw;                       \
			const T *xc = x + c * H * W;                                                    \
			T *dst = col + (r - r0) * pp;                                                   \
			int64_t p = p0, oh = p0 / OW, ow = p0 % OW, off = j * dw - g->pad[1];           \
			int64_t lo = off >= 0 ? 0 : ceil_div(-off, sw);                                 \
			int64_t hi = W - 1 - off >= 0 ? (W - 1 - off) / sw + 1 : 0;                     \
			if (hi > OW)                                                                    \
				hi = OW;                                                                \
			if (lo > hi)                                                                    \
				lo = hi;                                                                \
			while (p < p0 + pp) {                                                           \
				int64_t seg = OW - ow < p0 + pp - p ? OW - ow : p0 + pp - p;            \
				int64_t ih = oh * sh - g->pad[0] + i * dh, e = ow + seg;                \
				if (ih < 0 || ih >= H) {                                                \
					memset(dst, 0, (size_t)seg * sizeof(T));                        \
				} else {                                                                \
					const T *row = xc + ih * W + off;                               \
					int64_t a = lo > ow ? lo : ow, b = hi < e ? hi : e, q;          \
					if (a > b)                                                      \
						a = b = e;                                              \
					for (q = ow; q < a; q++)                                        \
						dst[q - ow] = 0;                                        \
					if (sw == 1)                                                    \
						memcpy(dst + (a - ow), row + a, (size_t)(b - a) * sizeof(T)); \
					else                                                            \
						for (q = a; q < b; q++)                                 \
							dst[q - ow] = row[q * sw];                      \
					for (q = b; q < e; q++)                                         \
						dst[q - ow] = 0;                                        \
				}                                                                       \
				dst += seg;                                                             \
				p += seg;                                                               \
				oh++;                                                                   \
				ow = 0;                                                                 \
			}                                                                               \
		}                                                                                       \
	}

IM2COL_2D(float, im2col_2d_f)
IM2COL_2D(double, im2col_2d_d)

/* Any rank: one element at a time. */
#define IM2COL_ND(T, NAME)                                                                              \
	static void NAME(const oq_conv_geom *g, const T *x, int64_t r0, int64_t nr, int64_t p0, int64_t pp, \
			 T *col)                                                                        \
	{                                                                                               \
		for (int64_t r = r0; r < r0 + nr; r++) {                                                \
			int64_t c = r / g->k_size, koff[OQ_CONV_MAX_SP], pos[OQ_CONV_MAX_SP];          \
			unflat(r % g->k_size, g->nsp, g->k, koff);                                      \
			for (int64_t q = 0; q < pp; q++) {                                              \
				int64_t idx;                                                            \
				unflat(p0 + q, g->nsp, g->out, pos);                                    \
				idx = tap_index(g, pos, koff, g->in);                                   \
				col[(r - r0) * pp + q] = idx >= 0 ? x[c * g->in_size + idx] : (T)0;     \
			}                                                                               \
		}                                                                                       \
	}

IM2COL_ND(float, im2col_nd_f)
IM2COL_ND(double, im2col_nd_d)

void oq_conv_im2col_f(const oq_conv_geom *g, const float *x, int64_t r0, int64_t nr, int64_t p0, int64_t pp,
		      float *col)
{
	if (g->nsp == 2)
		im2col_2d_f(g, x, r0, nr, p0, pp, col);
	else
		im2col_nd_f(g, x, r0, nr, p0, pp, col);
}

/* ---------------------------------------------------------- conv via GEMM */

typedef struct conv_job {
	oq_kctx *k;            /* for oq_k_scratch, or NULL (malloc) */
	oq_ltype t;
	const oq_conv_geom *g;
	const void *x, *w, *b;
	void *y;
	const oq_kfuse *ep;    /* float32 fused epilogue, or NULL */
	int direct;            /* 1x1, stride 1, no padding: the input is col */
	int avx2;              /* float32 on an AVX2+FMA CPU: oq_conv_avx2_gemm instead of BLAS */
	int avx512;            /* float32 on an AVX-512 CPU: oq_conv_gemm_pos / _chan (takes precedence over avx2) */
	int64_t cg, mg, kc;    /* channels per group in / out, GEMM depth */
	int64_t pt, mt;        /* tile sizes: positions, output channels */
	int64_t np, nm;        /* tiles per (image, group) along positions / channels */
	float *shared_col;     /* avx512: the packed col of every position tile, shared by its channel tiles, or NULL */
	int64_t rb;            /* packing into shared_col: rows per work item (whole input channels) */
	const oq_packed_w *packed_w; /* avx512: the weight in packed panels (channel tiles then start at a panel), or NULL */
	int chan;              /* avx512 with packed_w: channels in the lanes (oq_conv_gemm_chan), not positions */
	atomic_int oom;
} conv_job;

static void conv_range(void *ctx, size_t begin, size_t end)
{
	conv_job *j = ctx;
	const oq_conv_geom *g = j->g;
	size_t es = j->t == OQ_LT_F32 ? 4 : 8;
	int64_t P = g->out_size, last = -1;
	void *col = NULL, *own = NULL;
	size_t need = j->direct ? 0 : (size_t)(j->kc * j->pt) * es;

#if defined(HAVE_X86_KERNELS)
	/* packed col, then one im2col row (oq_conv_gemm_chan reads a 1x1 input in place) */
	if (j->avx512)
		need = j->shared_col || (j->chan && j->direct) ? 0
			: (packed_col_floats(j->kc, j->pt) + (size_t)j->pt) * sizeof(float);
#endif
	if (need) {
		need = (need + 63) / 64 * 64;
		col = j->k ? oq_k_scratch(j->k, need) : (own = aligned_alloc(64, need));
		if (!col) {
			atomic_store(&j->oom, 1);
			return;
		}
	}
	for (size_t it = begin; it < end; it++) {
		int64_t mi = (int64_t)it % j->nm, rest = (int64_t)it / j->nm;
		int64_t pi = rest % j->np, ng = rest / j->np; /* ng = image * group + grp */
		int64_t n = ng / g->group, grp = ng % g->group;
		int64_t p0 = pi * j->pt, pp = P - p0 < j->pt ? P - p0 : j->pt;
		int64_t m0 = mi * j->mt, mm = j->mg - m0 < j->mt ? j->mg - m0 : j->mt;
		int64_t xo = (n * g->c + grp * j->cg) * g->in_size;
		int64_t yo = (n * g->m + grp * j->mg + m0) * P + p0;
		int64_t wo = (grp * j->mg + m0) * j->kc;
		const void *bm;
		int64_t ldb;

#if defined(HAVE_X86_KERNELS)
		if (j->avx512) {
			tile_epi ze;
			int reg = j->ep && !oq_conv_late_act(j->ep) && (!j->ep->n_steps || oq_conv_res_steps(j->ep));
			int inplace = j->chan && j->direct;
			const float *bp = j->shared_col ? j->shared_col + (size_t)rest * packed_col_floats(j->kc, j->pt) : col;
			tile_a A;
			if (!j->shared_col && !inplace && rest != last) {
				oq_conv_pack_col(g, (const float *)j->x + xo, P, j->direct, 0, j->kc, j->kc, p0, pp,
						 (float *)col + packed_col_floats(j->kc, j->pt), col);
				last = rest;
			}
			/* the epilogue on the registers before the last store, else in a pass over the tile */
			if (reg) {
				ze.scale = j->ep->scale ? j->ep->scale + grp * j->mg + m0 : NULL;
				ze.shift = j->ep->scale ? j->ep->shift + grp * j->mg + m0 : NULL;
				ze.act = j->ep->act.kind;
				ze.lo = j->ep->act.a;
				ze.hi = j->ep->act.b;
				ze.res = oq_conv_res_steps(j->ep);
				ze.ldc = P;
				ze.t = ze.res ? j->ep->t[j->ep->steps[0].t] + yo : NULL;
			}
			if (j->packed_w) { /* the panels of channels grp * mg + m0 on (m0 starts a panel) */
				int64_t npg = ceil_div(j->mg, OQ_PACKED_W_NR);
				A.a = j->packed_w->p + (size_t)((grp * npg + m0 / OQ_PACKED_W_NR) * j->kc * OQ_PACKED_W_NR);
				A.lda = 0;
				A.pstride = j->kc * OQ_PACKED_W_NR;
			} else {
				A.a = (const float *)j->w + wo;
				A.lda = j->kc;
				A.pstride = 0;
			}
			if (j->chan)
				oq_conv_gemm_chan(mm, pp, j->kc, A.a, A.pstride, (const float *)j->x + xo + p0, g->in_size,
						  inplace ? NULL : bp, (float *)j->y + yo, P,
						  j->b ? (const float *)j->b + grp * j->mg + m0 : NULL, reg ? &ze : NULL);
			else
				oq_conv_gemm_pos(mm, pp, j->kc, &A, bp, NULL, (float *)j->y + yo, P,
						 j->b ? (const float *)j->b + grp * j->mg + m0 : NULL, reg ? &ze : NULL);
			if (j->ep && !reg)
				oq_conv_epi_tile(j->ep, grp * j->mg + m0, mm, (size_t)yo, (float *)j->y + yo, P, pp);
			continue;
		}
#endif
		if (j->direct) {
			bm = (const char *)j->x + (size_t)(xo + p0) * es;
			ldb = P;
		} else {
			if (rest != last) {
				if (j->t == OQ_LT_F32) {
					if (g->nsp == 2)
						im2col_2d_f(g, (const float *)j->x + xo, 0, j->kc, p0, pp, col);
					else
						im2col_nd_f(g, (const float *)j->x + xo, 0, j->kc, p0, pp, col);
				} else {
					if (g->nsp == 2)
						im2col_2d_d(g, (const double *)j->x + xo, 0, j->kc, p0, pp, col);
					else
						im2col_nd_d(g, (const double *)j->x + xo, 0, j->kc, p0, pp, col);
				}
				last = rest;
			}
			bm = col;
			ldb = pp;
		}
		/* bias first, then C = W * col + C (the AVX2 GEMM starts each sum from the bias itself) */
		for (int64_t r = 0; j->b && !j->avx2 && r < mm; r++) {
			int64_t ch = grp * j->mg + m0 + r;
			if (j->t == OQ_LT_F32) {
				float v = ((const float *)j->b)[ch], *yr = (float *)j->y + yo + r * P;
				for (int64_t q = 0; q < pp; q++)
					yr[q] = v;
			} else {
				double v = ((const double *)j->b)[ch], *yr = (double *)j->y + yo + r * P;
				for (int64_t q = 0; q < pp; q++)
					yr[q] = v;
			}
		}
#if defined(HAVE_X86_KERNELS)
		if (j->avx2) { /* BN, Relu, Clip and a residual Add on the registers, the rest in a pass over each row */
			oq_conv_epi2 e;
			int regs = oq_conv_avx2_epi(j->ep, grp * j->mg + m0, &e);
			if (j->ep && !oq_conv_late_act(j->ep) && (e.res = oq_conv_res_steps(j->ep))) {
				e.t = j->ep->t[j->ep->steps[0].t] + yo;
				e.ldt = P;
				regs = 1;
			}
			oq_conv_avx2_gemm(mm, pp, j->kc, (const float *)j->w + wo, j->kc, bm, ldb, (float *)j->y + yo, P,
					  j->b ? (const float *)j->b + grp * j->mg + m0 : NULL, regs ? &e : NULL);
			for (int64_t r = 0; j->ep && !e.res && (j->ep->n_steps || oq_conv_late_act(j->ep)) && r < mm; r++)
				oq_conv_epi_after_regs(j->ep, grp * j->mg + m0 + r, (size_t)(yo + r * P),
						       (float *)j->y + yo + r * P, (size_t)pp);
			continue;
		}
#endif
		{
			oq_gemm_batch gb;
			memset(&gb, 0, sizeof gb);
			gb.t = j->t;
			gb.m = mm;
			gb.n = pp;
			gb.kd = j->kc;
			gb.alpha = 1;
			gb.beta = j->b ? 1 : 0;
			gb.a = (const char *)j->w + (size_t)wo * es;
			gb.lda = j->kc;
			gb.b = bm;
			gb.ldb = ldb;
			gb.c = (char *)j->y + (size_t)yo * es;
			gb.ldc = P;
			gb.batch = 1;
			oq_gemm_run(NULL, &gb);
		}
		for (int64_t r = 0; j->ep && r < mm; r++)
			oq_epi_apply(j->ep, grp * j->mg + m0 + r, (size_t)(yo + r * P), (float *)j->y + yo + r * P,
				     (size_t)pp);
	}
	free(own);
}

#if defined(HAVE_X86_KERNELS)
/*
 * Work items of the shared packing (conv_job.shared_col): item = position tile
 * (image, group, tile) x block of rb rows; every channel tile of that
 * position tile then reads the same packed col instead of packing its own.
 */
static void shared_pack_range(void *ctx, size_t begin, size_t end)
{
	conv_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t P = g->out_size, nrb = ceil_div(j->kc, j->rb);
	float *row = NULL;

	for (size_t it = begin; it < end; it++) {
		int64_t rest = (int64_t)it / nrb, r0 = (int64_t)it % nrb * j->rb;
		int64_t r1 = r0 + j->rb < j->kc ? r0 + j->rb : j->kc;
		int64_t pi = rest % j->np, ng = rest / j->np, n = ng / g->group, grp = ng % g->group;
		int64_t p0 = pi * j->pt, pp = P - p0 < j->pt ? P - p0 : j->pt;
		int64_t xo = (n * g->c + grp * j->cg) * g->in_size;
		if (!row && !j->direct && !im2col_packed_fits(g) &&
		    !(row = oq_k_scratch(j->k, (size_t)j->pt * sizeof *row))) {
			atomic_store(&j->oom, 1);
			return;
		}
		oq_conv_pack_col(g, (const float *)j->x + xo, P, j->direct, r0, r1, j->kc, p0, pp, row,
				 j->shared_col + (size_t)rest * packed_col_floats(j->kc, j->pt));
	}
}
#endif

/*
 * Tiles of one (image, group) GEMM of mg channels x P positions x kc deep:
 * positions per tile so that the col tile is near 1 MiB (128 to 4096
 * columns); then, when images x groups x position tiles are fewer than
 * TILES_MIN and the work is worth sharing (more than SPLIT_FLOPS), cut
 * positions further down to SPLIT_MIN_P columns (whole 32-column panels)
 * and then channels down to 12 rows (one register tile; 4 for fewer than
 * 24 channels), so that late layers with 7x7 or 14x14 positions still give
 * every thread work. With packed weights (packed) channel tiles are whole
 * 32-channel panels; with the channels in the lanes (chan) channels are
 * cut first, then positions into multiples of 8 of at least SPLIT_MIN_CHAN
 * (no col panels to keep whole: a 28x28 plane of 32 channels gives 14
 * tiles of 56 positions, not 5 of 160). Shape only: never depends on the
 * thread count.
 */
#define TILES_MIN 16                  /* tiles a call is cut into at least, where the work allows */
#define SHARED_PACK_FLOATS (4u << 20) /* 16 MiB: larger packed cols are packed per tile */
#define SPLIT_FLOPS 1e6               /* a product worth sharing between threads */
#define SPLIT_MIN_P 64                /* positions per tile at least when a split cuts them */
#define SPLIT_MIN_CHAN 16             /* the same for oq_conv_gemm_chan on a small plane */

static void conv_tiles(const oq_conv_geom *g, int64_t kc, int64_t mg, int packed, int chan, int64_t *pt,
		       int64_t *np, int64_t *mt)
{
	int64_t P = g->out_size, per, tiles, want;

	per = (int64_t)(262144 / (kc > 0 ? kc : 1));
	per = per < 128 ? 128 : per > 4096 ? 4096 : per;
	*np = ceil_div(P, per);
	*pt = *np == 1 ? P : round_up(ceil_div(P, *np), 16);
	*np = ceil_div(P, *pt);
	*mt = mg;
	tiles = g->n * g->group * *np;
	if (tiles >= TILES_MIN || 2.0 * (double)mg * (double)P * (double)kc * (double)(g->n * g->group) < SPLIT_FLOPS)
		return;
	want = ceil_div(TILES_MIN, tiles);
	if (chan) {
		/* whole panels, then positions in multiples of 8 (oq_conv_gemm_chan's rows) down to SPLIT_MIN_CHAN */
		int64_t parts = mg / OQ_PACKED_W_NR < want ? mg / OQ_PACKED_W_NR : want;
		if (parts > 1) {
			*mt = round_up(ceil_div(mg, parts), OQ_PACKED_W_NR);
			want = ceil_div(want, ceil_div(mg, *mt));
		}
		if (want > 1 && *pt >= 2 * SPLIT_MIN_CHAN) {
			parts = *pt / SPLIT_MIN_CHAN < want ? *pt / SPLIT_MIN_CHAN : want;
			*pt = round_up(ceil_div(*pt, parts), 8);
			*np = ceil_div(P, *pt);
		}
		return;
	}
	if (*pt >= 2 * SPLIT_MIN_P) {
		int64_t parts = *pt / SPLIT_MIN_P < want ? *pt / SPLIT_MIN_P : want, q = *pt;
		/* whole 32-column panels, and no last tile below half a tile (196 = 96 + 96 + 4: 2 parts) */
		for (; parts > 1; parts--) {
			q = round_up(ceil_div(*pt, parts), 32);
			if (P % q == 0 || P % q >= q / 2)
				break;
		}
		if (parts > 1) {
			*pt = q;
			*np = ceil_div(P, *pt);
			tiles = g->n * g->group * *np;
			want = ceil_div(TILES_MIN, tiles);
		}
	}
	if (want > 1 && mg >= 8) {
		/* whole panels or 12-row register tiles where there are enough rows, else 4-row tails */
		int64_t q = packed ? OQ_PACKED_W_NR : mg >= 24 ? 12 : 4, parts = mg / q < want ? mg / q : want;
		if (parts > 1)
			*mt = round_up(ceil_div(mg, parts), q);
	}
}

#if defined(HAVE_X86_KERNELS)
/*
 * Channels in the lanes (oq_conv_gemm_chan) instead of positions
 * (oq_conv_gemm_pos) when that fills more lanes: a plane of 49 positions
 * fills 49 of 64 position lanes, 160 channels all of the channel lanes.
 * The lane fill of the channels is weighted by depth: at a depth of 128
 * and more the channel kernel also does more per lane (one cache line of
 * weights and one of positions per k) and its transposes are cheap; at
 * small depth the transposes cost more than they save.
 */
int oq_conv_use_chan_lanes(const oq_conv_geom *g, int64_t kc, int64_t mg)
{
	double eff_n = (double)g->out_size / (double)round_up(g->out_size, 16);
	double eff_t = (double)mg / (double)round_up(mg, OQ_PACKED_W_NR) * (kc >= 128 ? 1.12 : kc >= 96 ? 0.95 : 0.85);
	return eff_t > eff_n;
}

/*
 * The in-place path: a stride-1 convolution (group 1, not 1x1) with B read
 * in place (off with oq_linalg_no_in_place). Over a copy xp of its input
 * with the pads written out as zeros ([c][Hp][Wp], Hp x Wp the padded
 * plane) the output at position q = oh * Wp + ow of the padded width reads
 * im2col row k = (c, i, j) at off[k] = c Hp Wp + i dh Wp + j dw of xp:
 * B[k][q] = xp[off[k] + q]. Each tile of whole output rows is one
 * oq_conv_gemm_pos on those rows at the padded width (the in-place tiles:
 * the same FMAs in the same k order as on a packed col, so the same bits)
 * into a per-thread buffer, whose rows are copied into y without the Wp -
 * OW extra columns before the epilogue runs over them. im2col writes and
 * reads back kc values per output position; here each input value is
 * copied once. That copy is worth it only where few output channels share
 * it (at most IN_PLACE_MAX_M; with many channels the output rows are
 * copied out as many short runs) and where the extra columns are at most
 * 1 / IN_PLACE_WASTE of the positions.
 * On AVX2 (no AVX-512) each tile copies only the input rows it reads into
 * its thread's scratch ([c][nrl][Wp], zero-padded; off[k] then indexes that
 * copy) and runs oq_conv_avx2_gemm_rows on them, with BN and Relu / Clip on
 * its registers and the rest of the epilogue over the copied-out rows: the
 * bits of its im2col path. There it is worth it where the copy-out moves
 * fewer values per position than im2col writes (m < kc) and m is at most
 * IN_PLACE_AVX2_MAX_M (with more channels it measured slower).
 */
#define IN_PLACE_WASTE 8         /* at most 1 / IN_PLACE_WASTE of the positions computed and dropped */
#define IN_PLACE_MAX_M 24        /* output channels at most */
#define IN_PLACE_TILE_BYTES (96u << 10) /* a tile's rows at the padded width, all channels, at most */
#define IN_PLACE_ROW_OW 64       /* channels in the lanes: output rows at least this wide are written in place */
#define IN_PLACE_AVX2_MAX_M 64   /* AVX2: output channels at most (measured: more run slower than im2col) */

typedef struct in_place_job {
	oq_kctx *k;
	const oq_conv_geom *g;
	const float *x, *b;
	const oq_kfuse *ep;
	float *y, *xp;         /* output; the padded input of every image (not avx2) */
	tile_a A;              /* the weights (group 1) */
	int64_t hp, wp;        /* padded plane */
	int64_t kc, rt, nt;    /* depth; output rows per tile, tiles per image */
	const int64_t *off;    /* [kc] start of row k of B in an image's xp (avx2: in a tile's copy) */
	int chan;              /* channels in the lanes (oq_conv_gemm_chan_off; A packed), not positions */
	int avx2;              /* oq_conv_avx2_gemm_rows, A in place (no AVX-512), on a per-tile copy */
	int64_t nrl;           /* avx2: input rows per channel in a tile's copy (rt + the kernel's span - 1) */
	size_t nloc;           /* avx2: floats of that copy, with the zero slack the widest tap reads past it */
	atomic_int oom;
} in_place_job;

static int in_place_fits(const oq_conv_geom *g, int64_t kc, int chan, int avx2)
{
	return !oq_linalg_no_in_place && g->nsp == 2 && g->group == 1 &&
	       (chan || (avx2 ? g->m <= IN_PLACE_AVX2_MAX_M && kc > g->m : g->m <= IN_PLACE_MAX_M)) && g->stride[0] == 1 &&
	       g->stride[1] == 1 && g->k_size > 1 && kc <= 65536 /* its row pointers in the thread's buffer */ &&
	       IN_PLACE_WASTE * (g->k[1] - 1) * g->dil[1] <= g->out[1];
}

/* Planes [begin, end) (image * c + channel) of xp: the input plane inside zeros. */
static void in_place_pad(void *ctx, size_t begin, size_t end)
{
	in_place_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t H = g->in[0], W = g->in[1];

	for (size_t it = begin; it < end; it++) {
		float *d = j->xp + (int64_t)it * j->hp * j->wp;
		const float *s = j->x + (int64_t)it * g->in_size;
		memset(d, 0, (size_t)(g->pad[0] * j->wp) * sizeof *d);
		for (int64_t h = 0; h < H; h++) {
			float *r = d + (g->pad[0] + h) * j->wp;
			memset(r, 0, (size_t)g->pad[1] * sizeof *r);
			memcpy(r + g->pad[1], s + h * W, (size_t)W * sizeof *r);
			memset(r + g->pad[1] + W, 0, (size_t)(j->wp - g->pad[1] - W) * sizeof *r);
		}
		memset(d + (g->pad[0] + H) * j->wp, 0, (size_t)((j->hp - g->pad[0] - H) * j->wp) * sizeof *d);
	}
}

static void in_place_range(void *ctx, size_t begin, size_t end)
{
	in_place_job *j = ctx;
	const oq_conv_geom *g = j->g;
	int64_t M = g->m, P = g->out_size, OW = g->out[1], OH = g->out[0];
	/* the tile's rows, then (64-byte aligned) the row pointers of B */
	size_t nc = (size_t)round_up(M * j->rt * j->wp, 16), nl = (size_t)round_up((int64_t)j->nloc, 16);
	size_t need = (nc + nl) * sizeof(float) + (size_t)j->kc * sizeof(float *);
	void *own = j->k ? NULL : malloc(need), *buf = j->k ? oq_k_scratch(j->k, need) : own;
	float *c = buf, *loc = c + nc;
	const float **br = (const float **)(loc + nl);

	if (!buf) {
		atomic_store(&j->oom, 1);
		return;
	}
	if (j->avx2) { /* the slack past the copy: never written below (each tile writes the copy whole) */
		size_t copy = (size_t)(g->c * j->nrl * j->wp);
		memset(loc + copy, 0, (nl - copy) * sizeof *loc);
	}
	for (size_t it = begin; it < end; it++) {
		int64_t n = (int64_t)it / j->nt, oh0 = (int64_t)it % j->nt * j->rt;
		int64_t oh1 = oh0 + j->rt < OH ? oh0 + j->rt : OH, pp = (oh1 - oh0) * j->wp;
		const float *xn = j->avx2 ? NULL : j->xp + n * g->c * j->hp * j->wp + oh0 * j->wp;
		int64_t yo = n * M * P + oh0 * OW;
		if (j->chan && OW >= IN_PLACE_ROW_OW) {
			/* row by row straight into y: no dropped columns, no copy, the epilogue in registers where it can */
			int reg = j->ep && !oq_conv_late_act(j->ep) && (!j->ep->n_steps || oq_conv_res_steps(j->ep));
			tile_epi ze;
			if (reg) {
				ze.scale = j->ep->scale;
				ze.shift = j->ep->scale ? j->ep->shift : NULL;
				ze.act = j->ep->act.kind;
				ze.lo = j->ep->act.a;
				ze.hi = j->ep->act.b;
				ze.res = oq_conv_res_steps(j->ep);
				ze.ldc = P;
			}
			for (int64_t oh = oh0; oh < oh1; oh++) {
				int64_t yr = n * M * P + oh * OW;
				if (reg)
					ze.t = ze.res ? j->ep->t[j->ep->steps[0].t] + yr : NULL;
				oq_conv_gemm_chan_off(M, OW, j->kc, j->A.a, j->A.pstride, xn + (oh - oh0) * j->wp, j->off,
						      j->y + yr, P, j->b, reg ? &ze : NULL);
			}
			if (j->ep && !reg)
				oq_conv_epi_tile(j->ep, 0, M, (size_t)yo, j->y + yo, P, (oh1 - oh0) * OW);
			continue;
		}
		if (j->avx2) {
			oq_conv_epi2 e;
			int regs = oq_conv_avx2_epi(j->ep, 0, &e);
			int64_t H = g->in[0], W = g->in[1], p1 = g->pad[1];
			/* the input rows this tile reads, zero-padded: [c][nrl][wp] (from row oh0 - pad0) */
			for (int64_t ch = 0; ch < g->c; ch++)
				for (int64_t r = 0; r < j->nrl; r++) {
					int64_t ih = oh0 - g->pad[0] + r;
					float *d = loc + (ch * j->nrl + r) * j->wp;
					if (ih < 0 || ih >= H) {
						memset(d, 0, (size_t)j->wp * sizeof *d);
						continue;
					}
					memset(d, 0, (size_t)p1 * sizeof *d);
					memcpy(d + p1, j->x + ((n * g->c + ch) * H + ih) * W, (size_t)W * sizeof *d);
					memset(d + p1 + W, 0, (size_t)(j->wp - p1 - W) * sizeof *d);
				}
			for (int64_t k = 0; k < j->kc; k++)
				br[k] = loc + j->off[k];
			oq_conv_avx2_gemm_rows(M, pp, j->kc, j->A.a, j->A.lda, br, c, pp, j->b, regs ? &e : NULL);
			for (int64_t m = 0; m < M; m++)
				for (int64_t oh = oh0; oh < oh1; oh++)
					memcpy(j->y + yo + m * P + (oh - oh0) * OW, c + m * pp + (oh - oh0) * j->wp,
					       (size_t)OW * sizeof(float));
			for (int64_t m = 0; j->ep && (j->ep->n_steps || oq_conv_late_act(j->ep)) && m < M; m++)
				oq_conv_epi_after_regs(j->ep, m, (size_t)(yo + m * P), j->y + yo + m * P,
						       (size_t)((oh1 - oh0) * OW));
			continue;
		}
		if (j->chan) {
			oq_conv_gemm_chan_off(M, pp, j->kc, j->A.a, j->A.pstride, xn, j->off, c, pp, j->b, NULL);
		} else {
			for (int64_t k = 0; k < j->kc; k++)
				br[k] = xn + j->off[k];
			oq_conv_gemm_pos(M, pp, j->kc, &j->A, NULL, br, c, pp, j->b, NULL);
		}
		for (int64_t m = 0; m < M; m++)
			for (int64_t oh = oh0; oh < oh1; oh++)
				memcpy(j->y + n * M * P + m * P + oh * OW, c + m * pp + (oh - oh0) * j->wp,
				       (size_t)OW * sizeof(float));
		if (j->ep)
			oq_conv_epi_tile(j->ep, 0, M, (size_t)yo, j->y + yo, P, (oh1 - oh0) * OW);
	}
	free(own);
}

/*
 * Runs g (in_place_fits) with B in place, or returns 1 (nothing written) when
 * the padded copy cannot be allocated: the caller then takes the im2col path.
 */
static int conv_in_place(oq_kctx *k, const oq_conv_geom *g, const float *x, const float *w, const oq_packed_w *pw,
			 int chan, int avx2, const float *b, const oq_kfuse *ep, float *y, int64_t kc, int *rc)
{
	in_place_job j;
	int64_t *off, hr, wr, items;
	size_t nxp, slack;
	float *own;

	memset(&j, 0, sizeof j);
	/* the input at (pad0, pad1), and every row / column a tap of an output reads */
	hr = g->out[0] + (g->k[0] - 1) * g->dil[0];
	wr = g->out[1] + (g->k[1] - 1) * g->dil[1];
	j.hp = g->pad[0] + g->in[0] > hr ? g->pad[0] + g->in[0] : hr;
	j.wp = g->pad[1] + g->in[1] > wr ? g->pad[1] + g->in[1] : wr;
	/* whole output rows per tile, within IN_PLACE_TILE_BYTES at the padded width, and at least
	 * TILES_MIN tiles where there are rows (shape only) */
	j.rt = (int64_t)(IN_PLACE_TILE_BYTES / sizeof(float)) / (g->m * j.wp);
	j.rt = j.rt < 1 ? 1 : j.rt;
	if (g->n * ceil_div(g->out[0], j.rt) < TILES_MIN)
		j.rt = ceil_div(g->out[0], ceil_div(TILES_MIN, g->n));
	j.rt = j.rt < 1 ? 1 : j.rt;
	j.nt = ceil_div(g->out[0], j.rt);
	/* rows readable past the last position of a tile: the last panel's 32 and the widest tap */
	slack = (size_t)((g->k[1] - 1) * g->dil[1] + 2 * TILE_NR);
	/* AVX2: each tile copies the rows it reads (its threads' scratch), not the whole input */
	j.nrl = j.rt + (g->k[0] - 1) * g->dil[0];
	if (avx2 && (!oq_mul_size((size_t)g->c, (size_t)(j.nrl * j.wp), &j.nloc) || j.nloc > SIZE_MAX / 8 - slack))
		return 1;
	j.nloc += avx2 ? slack : 0;
	nxp = 0;
	if (!avx2 && (!oq_mul_size((size_t)(g->n * g->c), (size_t)(j.hp * j.wp), &nxp) ||
		      nxp > SIZE_MAX / sizeof(float) - slack))
		return 1;
	nxp += avx2 ? 0 : slack;
	/* the executor's buffer for the whole call (kept across calls), else our own */
	own = k || avx2 ? NULL : aligned_alloc(64, (nxp * sizeof(float) + 63) / 64 * 64);
	j.xp = avx2 ? NULL : k ? oq_k_shared(k, nxp * sizeof(float)) : own;
	off = malloc((size_t)kc * sizeof *off);
	if ((!avx2 && !j.xp) || !off) {
		free(own);
		free(off);
		return 1;
	}
	if (!avx2)
		memset(j.xp + nxp - slack, 0, slack * sizeof(float));
	for (int64_t q = 0, c = 0; c < g->c; c++)
		for (int64_t i = 0; i < g->k[0]; i++)
			for (int64_t jj = 0; jj < g->k[1]; jj++)
				off[q++] = c * (avx2 ? j.nrl : j.hp) * j.wp + i * g->dil[0] * j.wp + jj * g->dil[1];
	j.k = k;
	j.g = g;
	j.x = x;
	j.b = b;
	j.ep = ep;
	j.y = y;
	j.kc = kc;
	j.off = off;
	j.chan = chan;
	j.avx2 = avx2;
	if (pw) {
		j.A.a = pw->p;
		j.A.pstride = kc * OQ_PACKED_W_NR;
	} else {
		j.A.a = w;
		j.A.lda = kc;
	}
	atomic_init(&j.oom, 0);
	if (!avx2)
		oq_k_parallel(k, (size_t)(g->n * g->c), 1, in_place_pad, &j);
	items = g->n * j.nt;
	oq_k_parallel(k, (size_t)items, 1, in_place_range, &j);
	free(own);
	free(off);
	atomic_fetch_add_explicit(&oq_linalg_in_place_runs, 1, memory_order_relaxed);
	*rc = atomic_load(&j.oom) ? OQ_ENOMEM : OQ_OK;
	return 0;
}
#endif

static int conv_run(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w, const oq_packed_w *pw,
		    const void *b, const oq_kfuse *ep, void *y);

int oq_conv_run(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w,
		const void *b, void *y)
{
	return conv_run(k, t, g0, x, w, NULL, b, NULL, y);
}

int oq_conv_run_epilogue(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w,
			 const void *b, const oq_kfuse *ep, void *y)
{
	return conv_run(k, t, g0, x, w, NULL, b, ep, y);
}

int oq_conv_run_packed(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w, const oq_packed_w *pw,
		       const void *b, const oq_kfuse *ep, void *y)
{
	float *tmp = NULL;
	int rc;

	if (pw && (pw->m != g0->m || pw->group != g0->group || g0->group <= 0 || pw->m % pw->group ||
		   pw->kc != g0->c / g0->group * g0->k_size))
		return OQ_EINVAL;
	/* the packed layout only where gemm_pos / gemm_chan read it */
	if (pw && (t != OQ_LT_F32 || !oq_packed_w_available() || oq_linalg_use_ref || g0->m == g0->group)) {
		size_t n;
		if (!oq_mul_size((size_t)pw->m, (size_t)pw->kc, &n) || !oq_mul_size(n, sizeof(float), &n) ||
		    !(tmp = malloc(n ? n : 1)))
			return OQ_ENOMEM;
		oq_packed_w_unpack(pw, tmp);
		w = tmp;
		pw = NULL;
	}
	rc = conv_run(k, t, g0, x, w, pw, b, ep, y);
	free(tmp);
	return rc;
}

/* x * W (w, or the packed pw) + b, then ep: see oq_conv_run_epilogue / oq_conv_run_packed. */
static int conv_run(oq_kctx *k, oq_ltype t, const oq_conv_geom *g0, const void *x, const void *w, const oq_packed_w *pw,
		    const void *b, const oq_kfuse *ep, void *y)
{
	oq_conv_geom g;
	conv_job j;
	int64_t tiles;
	oq_packed_w own;
	int rc;

	if (ep && t != OQ_LT_F32)
		return OQ_EUNSUP; /* the fused kernel passes one for float32 only */
	if (oq_linalg_use_ref) {
		oq_conv_ref(t, g0, x, w, b, y);
		for (int64_t r = 0; ep && r < g0->n * g0->m; r++)
			oq_epi_apply(ep, r % g0->m, (size_t)(r * g0->out_size), (float *)y + r * g0->out_size,
				     (size_t)g0->out_size);
		return OQ_OK;
	}
	oq_conv_as_2d(g0, &g);
	if (g.n == 0 || g.m == 0 || g.out_size == 0)
		return OQ_OK;
	oq_linalg_blas_init();
	if (t == OQ_LT_F32 && g.nsp == 2 && g.group == g.c && g.group == g.m && g.in_size > 0)
		return oq_conv_depthwise(k, &g, x, w, b, ep, y);
	memset(&j, 0, sizeof j);
	j.k = k;
	j.t = t;
	j.g = &g;
#if defined(HAVE_X86_KERNELS)
	j.avx2 = t == OQ_LT_F32 && oq_conv_use_avx2();
	j.avx512 = t == OQ_LT_F32 && oq_conv_use_avx512();
#endif
	j.x = x;
	j.w = w;
	j.b = b;
	j.y = y;
	j.ep = ep;
	j.cg = g.c / g.group;
	j.mg = g.m / g.group;
	j.kc = j.cg * g.k_size;
	j.direct = 1;
	for (int d = 0; d < g.nsp; d++)
		if (g.k[d] != 1 || g.stride[d] != 1 || g.pad[d] != 0 || g.out[d] != g.in[d])
			j.direct = 0;
	memset(&own, 0, sizeof own);
#if defined(HAVE_X86_KERNELS)
	j.packed_w = j.avx512 ? pw : NULL;
	j.chan = j.avx512 && oq_conv_use_chan_lanes(&g, j.kc, j.mg);
	if (j.chan && !j.packed_w) { /* no plan-time packing (a weight computed per run, tests): pack for this call */
		if ((rc = oq_packed_w_pack(w, g.m, j.kc, g.group, &own)))
			return rc;
		j.packed_w = &own;
	}
#else
	(void)pw;
#endif
#if defined(HAVE_X86_KERNELS)
	if ((j.avx512 || j.avx2) && !j.direct && in_place_fits(&g, j.kc, j.chan, !j.avx512) &&
	    !conv_in_place(k, &g, x, w, j.packed_w, j.chan, !j.avx512, b, ep, y, j.kc, &rc)) {
		oq_packed_w_free(&own);
		return rc;
	}
#endif
	conv_tiles(&g, j.kc, j.mg, j.packed_w != NULL, j.chan, &j.pt, &j.np, &j.mt);
	j.nm = ceil_div(j.mg, j.mt);
	atomic_init(&j.oom, 0);
	tiles = g.n * g.group * j.np * j.nm;
#if defined(HAVE_X86_KERNELS)
	if (j.avx512 && j.nm > 1 && k && k->threads > 1 && !(j.chan && j.direct)) {
		/* channel tiles share their position tile's packed col: pack each once, in parallel */
		size_t each = packed_col_floats(j.kc, j.pt), n_pt = (size_t)(g.n * g.group * j.np);
		if (n_pt * each <= SHARED_PACK_FLOATS && (j.shared_col = oq_k_shared(k, n_pt * each * sizeof(float)))) {
			int64_t ks = j.direct ? 1 : g.k_size;
			j.rb = ks * (j.direct ? 64 : ceil_div(64, ks)); /* about 64 rows, whole input channels */
			oq_k_parallel(k, n_pt * (size_t)ceil_div(j.kc, j.rb), 1, shared_pack_range, &j);
			if (atomic_load(&j.oom)) {
				oq_packed_w_free(&own);
				return OQ_ENOMEM;
			}
		}
	}
#endif
	oq_k_parallel(k, (size_t)tiles, 1, conv_range, &j);
	oq_packed_w_free(&own);
	return atomic_load(&j.oom) ? OQ_ENOMEM : OQ_OK;
}

/* ---------------------------------------------------------- reference */

void oq_conv_ref(oq_ltype t, const oq_conv_geom *g, const void *x, const void *w, const void *b, void *y)
{
	int64_t cg = g->c / g->group, mg = g->m / g->group;
	int64_t op[OQ_CONV_MAX_SP], kp[OQ_CONV_MAX_SP];

	for (int64_t n = 0; n < g->n; n++)
		for (int64_t m = 0; m < g->m; m++)
			for (int64_t p = 0; p < g->out_size; p++) {
				double acc = b ? getv(t, b, m) : 0;
				unflat(p, g->nsp, g->out, op);
				for (int64_t c = 0; c < cg; c++)
					for (int64_t q = 0; q < g->k_size; q++) {
						int64_t idx;
						unflat(q, g->nsp, g->k, kp);
						if ((idx = tap_index(g, op, kp, g->in)) < 0)
							continue;
						acc += getv(t, x, (n * g->c + (m / mg) * cg + c) * g->in_size + idx) *
						       getv(t, w, (m * cg + c) * g->k_size + q);
					}
				setv(t, y, (n * g->m + m) * g->out_size + p, acc);
			}
}
