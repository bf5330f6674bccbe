/*
 * control.c - If, Loop and Scan: run attribute subgraphs through
 * oq_k_run_subgraph (outer-scope names resolve to the calling frame).
 *
 * If (1-16): runs then_branch or else_branch; each branch may produce
 *   outputs of different shapes, so outputs are copied from the branch.
 * Loop (1-16): `for (i = 0; (M absent || i < M) && (cond absent || cond); i++)
 *   { cond, v..., s... = body(i, cond, v...) }`; the body's cond output is
 *   used only when the node has a cond input (spec table "input (trip_count,
 *   "")": a for loop ignores it). Scan outputs s... of every iteration are
 *   stacked along a new first axis; with zero iterations they are empty with
 *   the first dim 0 and the rest from the body's declared output type.
 * Scan 9+: N state variables and M scan inputs sliced along
 *   scan_input_axes (reversed when scan_input_directions is 1); the K scan
 *   outputs are stacked along scan_output_axes (an axis inserted into each
 *   per-iteration output, position T-1-t when scan_output_directions is 1).
 * Scan 8: the batched form (optional sequence_lens, batch axis 0, scan axis
 *   1, `directions`), run batch entry by batch entry with the 9+ core;
 *   outputs past a batch entry's sequence length are zero.
 *
 * If outputs and Loop-carried values may be sequences or optionals (Loop
 * 13/16): they are moved or deep-copied like tensors (oq_k_output_like);
 * Loop scan outputs and Scan take tensors only. Values are copied in and
 * out of the body (the executor owns activation accounting); slicing and
 * stacking handle every dtype of whole bytes.
 */
#include "calib/kernels/kernel.h"

#include <stdlib.h>
#include <string.h>

static const oq_graph *graph_attr(const oq_kctx *k, const char *name)
{
	const oq_attr *a = oq_k_attr(k, name);
	return a && a->type == OQ_ATTR_GRAPH ? a->g : NULL;
}

static int truth(const oq_rt *t, int *v)
{
	if (!t || t->nelem != 1 || t->strs)
		return -1;
	*v = oq_rt_get(t, 0) != 0;
	return 0;
}

/* Bytes per element, or 0 when elements are not whole bytes (sub-byte, strings). */
static size_t elem_size(int dtype)
{
	int bits = oq_dtype_bits(dtype);
	return bits >= 8 && dtype != OQ_DT_STRING ? (size_t)bits / 8 : 0;
}

/* Copies src into node output i (shape and dtype from src). */
static int put_output(oq_kctx *k, size_t i, const oq_rt *src)
{
	oq_rt *t;
	if (i >= k->n_out || !k->node->outputs[i])
		return OQ_OK;
	return oq_k_output_like(k, i, src, src->rank, src->dims, &t);
}

static void release_all(oq_rt *t, size_t n)
{
	for (size_t i = 0; t && i < n; i++)
		oq_rt_release(&t[i]);
}

/* ------------------------------------------------------------------ If */

static int k_if(oq_kctx *k)
{
	const oq_graph *g;
	oq_rt *outs = NULL;
	int c, rc = OQ_OK;

	if (truth(oq_k_in(k, 0), &c))
		return oq_k_err(k, OQ_EINVAL, "cond must be a one-element tensor");
	g = graph_attr(k, c ? "then_branch" : "else_branch");
	if (!g)
		return oq_k_err(k, OQ_EINVAL, "missing graph attribute %s",
		                c ? "then_branch" : "else_branch");
	if (g->n_outputs != k->n_out)
		return oq_k_err(k, OQ_EINVAL, "%s has %zu outputs, the node %zu",
		                c ? "then_branch" : "else_branch", g->n_outputs, k->n_out);
	if (!(outs = oq_calloc(g->n_outputs ? g->n_outputs : 1, sizeof *outs)))
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	if ((rc = oq_k_run_subgraph(k, g, NULL, 0, outs, g->n_outputs)))
		goto fail;
	for (size_t i = 0; i < g->n_outputs && !rc; i++)
		rc = put_output(k, i, &outs[i]);
fail:
	release_all(outs, g->n_outputs);
	free(outs);
	return rc;
}

/* -------------------------------------------------------- stacking helpers */

/* A growing stack of equally shaped per-iteration tensors. */
typedef struct stack {
	int dtype;
	int rank; /* rank of one entry */
	int64_t dims[OQ_RT_MAX_RANK];
	size_t entry_bytes;
	size_t n; /* entries */
	unsigned char *buf;
	size_t cap;
} stack;

static int stack_push(oq_kctx *k, stack *s, const oq_rt *t, size_t which)
{
	if (t->kind != OQ_RT_TENSOR)
		return oq_k_err(k, OQ_EUNSUP, "scan output %zu is a sequence or optional; only tensors can be stacked",
				which);
	if (s->n == 0 && !s->buf) {
		if (!elem_size(t->dtype))
			return oq_k_err(k, OQ_EUNSUP,
			                "scan output %zu: %s elements cannot be stacked", which,
			                oq_dtype_name(t->dtype));
		if (t->rank + 1 > OQ_RT_MAX_RANK)
			return oq_k_err(k, OQ_EUNSUP, "scan output %zu: rank too large", which);
		s->dtype = t->dtype;
		s->rank = t->rank;
		memcpy(s->dims, t->dims, sizeof s->dims);
		s->entry_bytes = t->nbytes;
	} else if (t->dtype != s->dtype || t->rank != s->rank ||
	           memcmp(t->dims, s->dims, (size_t)t->rank * sizeof *t->dims) != 0) {
		char a[128], b[128];
		oq_rt ref;
		memset(&ref, 0, sizeof ref);
		ref.dtype = s->dtype;
		ref.rank = s->rank;
		memcpy(ref.dims, s->dims, sizeof ref.dims);
		return oq_k_err(
		    k, OQ_EINVAL, "scan output %zu changes shape between iterations: %s then %s",
		    which, oq_rt_describe(&ref, a, sizeof a), oq_rt_describe(t, b, sizeof b));
	}
	if ((s->n + 1) * s->entry_bytes > s->cap) {
		size_t nc = s->cap ? s->cap * 2 : s->entry_bytes * 4;
		unsigned char *nb;
		if (nc < (s->n + 1) * s->entry_bytes)
			nc = (s->n + 1) * s->entry_bytes;
		if (!(nb = realloc(s->buf, nc ? nc : 1)))
			return oq_k_err(k, OQ_ENOMEM, "out of memory");
		s->buf = nb;
		s->cap = nc;
	}
	if (s->entry_bytes)
		memcpy(s->buf + s->n * s->entry_bytes, t->data, s->entry_bytes);
	s->n++;
	return OQ_OK;
}

/* Slice `idx` of src along `axis` into an owned tensor without that axis. */
static int slice_axis(oq_kctx *k, const oq_rt *src, int axis, int64_t idx, oq_rt *dst)
{
	size_t es = elem_size(src->dtype), outer = 1, inner = 1, len = (size_t)src->dims[axis];
	int64_t dims[OQ_RT_MAX_RANK];
	int r = 0;

	for (int i = 0; i < src->rank; i++) {
		if (i < axis)
			outer *= (size_t)src->dims[i];
		if (i > axis)
			inner *= (size_t)src->dims[i];
		if (i != axis)
			dims[r++] = src->dims[i];
	}
	if (oq_rt_alloc(dst, src->dtype, r, dims))
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	for (size_t o = 0; o < outer; o++)
		memcpy((unsigned char *)dst->data + o * inner * es,
		       (const unsigned char *)src->data + (o * len + (size_t)idx) * inner * es,
		       inner * es);
	return OQ_OK;
}

/* Writes entry e of a stack (shape s->dims) to position p along `axis` of dst. */
static void place_axis(oq_rt *dst, int axis, size_t p, const stack *s, size_t e)
{
	size_t es = elem_size(dst->dtype), outer = 1, inner = 1, len = (size_t)dst->dims[axis];
	for (int i = 0; i < dst->rank; i++) {
		if (i < axis)
			outer *= (size_t)dst->dims[i];
		if (i > axis)
			inner *= (size_t)dst->dims[i];
	}
	for (size_t o = 0; o < outer; o++)
		memcpy((unsigned char *)dst->data + (o * len + p) * inner * es,
		       s->buf + e * s->entry_bytes + o * inner * es, inner * es);
}

/* Allocates an empty (first dim 0) stacked output from a body output's declared type. */
static int empty_stacked(oq_kctx *k, const oq_value *v, int axis_pos, oq_rt *dst)
{
	int64_t dims[OQ_RT_MAX_RANK];
	int rank = 0, dt = v->type.dtype ? v->type.dtype : OQ_DT_FLOAT;
	int er = v->type.kind == OQ_TYPE_TENSOR && v->type.rank >= 0 ? v->type.rank : 0;
	if (er + 1 > OQ_RT_MAX_RANK)
		return oq_k_err(k, OQ_EUNSUP, "scan output rank too large");
	if (axis_pos < 0 || axis_pos > er)
		axis_pos = 0;
	for (int i = 0; i < er; i++) {
		if (i == axis_pos)
			dims[rank++] = 0;
		dims[rank++] = v->type.dims[i].value > 0 ? v->type.dims[i].value : 0;
	}
	if (axis_pos == er)
		dims[rank++] = 0;
	if (oq_rt_alloc(dst, dt, rank, dims))
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	return OQ_OK;
}

/* Stacked tensor from a stack: entries along `axis` (normalized against rank+1), reversed if rev.
 */
static int stack_finish(oq_kctx *k, stack *s, int64_t axis, int rev, size_t len, oq_rt *dst,
                        size_t which)
{
	int64_t dims[OQ_RT_MAX_RANK];
	int ax = oq_axis(axis, s->rank + 1);
	if (ax < 0)
		return oq_k_err(k, OQ_EINVAL,
		                "scan_output_axes[%zu] = %lld is out of range for rank %d", which,
		                (long long)axis, s->rank + 1);
	for (int i = 0, r = 0; i <= s->rank; i++)
		dims[i] = i == ax ? (int64_t)len : s->dims[r++];
	if (oq_rt_alloc(dst, s->dtype, s->rank + 1, dims))
		return oq_k_err(k, OQ_ENOMEM, "out of memory");
	for (size_t e = 0; e < s->n; e++)
		place_axis(dst, ax, rev ? s->n - 1 - e : e, s, e);
	return OQ_OK;
}

/* ---------------------------------------------------------------- Loop */

static int k_loop(oq_kctx *k)
{
	const oq_graph *body = graph_attr(k, "body");
	oq_rt *mt = oq_k_in(k, 0), *ct = oq_k_in(k, 1);
	size_t N, K, nb_in;
	oq_rt *cur = NULL, *bin = NULL, *bout = NULL;
	int *owned = NULL;
	stack *st = NULL;
	int64_t M = INT64_MAX, it;
	int cond = 1, rc = OQ_OK;
	oq_rt itv, cv;

	memset(&itv, 0, sizeof itv);
	memset(&cv, 0, sizeof cv);
	if (!body)
		return oq_k_err(k, OQ_EINVAL, "missing graph attribute body");
	if (k->n_in < 2)
		return oq_k_err(k, OQ_EINVAL,
		                "needs at least the M and cond inputs (may be empty names)");
	N = k->n_in - 2;
	if (body->n_inputs != N + 2 || body->n_outputs < N + 1)
		return oq_k_err(
		    k, OQ_EINVAL,
		    "body takes %zu inputs and gives %zu outputs; %zu loop-carried values need "
		    "%zu inputs and at least %zu outputs",
		    body->n_inputs, body->n_outputs, N, N + 2, N + 1);
	K = body->n_outputs - 1 - N;
	if (k->n_out != N + K)
		return oq_k_err(k, OQ_EINVAL, "node has %zu outputs, the body gives %zu", k->n_out,
		                N + K);
	if (mt) {
		if (mt->nelem != 1 || mt->strs)
			return oq_k_err(k, OQ_EINVAL, "M must be a one-element tensor");
		M = oq_rt_get_int(mt, 0);
	}
	if (ct && truth(ct, &cond))
		return oq_k_err(k, OQ_EINVAL, "cond must be a one-element tensor");
	nb_in = N + 2;
	cur = oq_calloc(N + 1, sizeof *cur);
	owned = oq_calloc(N + 1, sizeof *owned);
	bin = oq_calloc(nb_in, sizeof *bin);
	bout = oq_calloc(body->n_outputs, sizeof *bout);
	st = oq_calloc(K + 1, sizeof *st);
	if (!cur || !owned || !bin || !bout || !st) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < N; i++) {
		if (!k->in[2 + i]) {
			rc = oq_k_err(k, OQ_EINVAL, "loop-carried input %zu is missing", i);
			goto fail;
		}
		cur[i] = *k->in[2 + i]; /* shallow: owned[i] = 0 */
	}
	if ((rc = oq_rt_alloc(&itv, OQ_DT_INT64, 0, NULL)) ||
	    (rc = oq_rt_alloc(&cv, OQ_DT_BOOL, 0, NULL))) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto fail;
	}
	for (it = 0; it < M && cond; it++) {
		if (it >= oq_exec_max_loop(k->e)) {
			rc = oq_k_err(k, OQ_EINVAL,
			              "ran %lld iterations without ending (trip count %lld%s); "
			              "raise --max-loop-iterations if the model needs more",
			              (long long)it, (long long)M, ct ? ", cond still true" : "");
			goto fail;
		}
		*(int64_t *)itv.data = it;
		*(unsigned char *)cv.data = (unsigned char)cond;
		bin[0] = itv;
		bin[1] = cv;
		for (size_t i = 0; i < N; i++)
			bin[2 + i] = cur[i];
		if ((rc = oq_k_run_subgraph(k, body, bin, nb_in, bout, body->n_outputs)))
			goto fail;
		if (ct) {
			if (truth(&bout[0], &cond)) {
				rc = oq_k_err(k, OQ_EINVAL,
				              "body's cond output must be a one-element tensor");
				goto fail;
			}
		}
		oq_rt_release(&bout[0]);
		for (size_t i = 0; i < N; i++) {
			if (owned[i])
				oq_rt_release(&cur[i]);
			cur[i] = bout[1 + i];
			owned[i] = 1;
			memset(&bout[1 + i], 0, sizeof bout[1 + i]);
		}
		for (size_t s = 0; s < K; s++) {
			rc = stack_push(k, &st[s], &bout[1 + N + s], s);
			oq_rt_release(&bout[1 + N + s]);
			if (rc)
				goto fail;
		}
	}
	for (size_t i = 0; i < N && !rc; i++)
		rc = put_output(k, i, &cur[i]);
	for (size_t s = 0; s < K && !rc; s++) {
		oq_rt t;
		memset(&t, 0, sizeof t);
		if (st[s].n == 0)
			rc = empty_stacked(k, body->outputs[1 + N + s], 0, &t);
		else
			rc = stack_finish(k, &st[s], 0, 0, st[s].n, &t, s);
		if (!rc)
			rc = put_output(k, N + s, &t);
		oq_rt_release(&t);
	}
fail:
	for (size_t i = 0; cur && i < N; i++)
		if (owned[i])
			oq_rt_release(&cur[i]);
	release_all(bout, body->n_outputs);
	for (size_t s = 0; st && s < K; s++)
		free(st[s].buf);
	oq_rt_release(&itv);
	oq_rt_release(&cv);
	free(cur);
	free(owned);
	free(bin);
	free(bout);
	free(st);
	return rc;
}

/* ---------------------------------------------------------------- Scan */

/*
 * One scan of T steps. states (N) and scans (M) are borrowed; fin (N) and
 * outs (K) receive owned tensors: the final states and the stacked outputs.
 */
static int scan_core(oq_kctx *k, const oq_graph *body, size_t N, size_t M, size_t K,
                     const oq_rt *states, const oq_rt *scans, const int *in_axes,
                     const int64_t *in_dirs, int64_t T, const int64_t *out_axes,
                     const int64_t *out_dirs, oq_rt *fin, oq_rt *outs)
{
	oq_rt *cur = oq_calloc(N + 1, sizeof *cur), *bin = oq_calloc(N + M + 1, sizeof *bin);
	oq_rt *bout = oq_calloc(N + K + 1, sizeof *bout), *sl = oq_calloc(M + 1, sizeof *sl);
	int *owned = oq_calloc(N + 1, sizeof *owned);
	stack *st = oq_calloc(K + 1, sizeof *st);
	int rc = OQ_OK;

	if (!cur || !bin || !bout || !sl || !owned || !st) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < N; i++)
		cur[i] = states[i];
	for (int64_t t = 0; t < T; t++) {
		for (size_t m = 0; m < M; m++) {
			if ((rc = slice_axis(k, &scans[m], in_axes[m], in_dirs[m] ? T - 1 - t : t,
			                     &sl[m])))
				goto fail;
			bin[N + m] = sl[m];
		}
		for (size_t i = 0; i < N; i++)
			bin[i] = cur[i];
		rc = oq_k_run_subgraph(k, body, bin, N + M, bout, N + K);
		release_all(sl, M);
		if (rc)
			goto fail;
		for (size_t i = 0; i < N; i++) {
			if (owned[i])
				oq_rt_release(&cur[i]);
			cur[i] = bout[i];
			owned[i] = 1;
			memset(&bout[i], 0, sizeof bout[i]);
		}
		for (size_t s = 0; s < K; s++) {
			rc = stack_push(k, &st[s], &bout[N + s], s);
			oq_rt_release(&bout[N + s]);
			if (rc)
				goto fail;
		}
	}
	for (size_t i = 0; i < N; i++) {
		if (owned[i]) {
			fin[i] = cur[i];
			owned[i] = 0;
		} else if (oq_rt_copy(&fin[i], &cur[i])) {
			rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
			goto fail;
		}
	}
	for (size_t s = 0; s < K; s++) {
		if (st[s].n == 0) {
			const oq_value *v = body->outputs[N + s];
			int er = v->type.rank >= 0 ? v->type.rank : 0,
			    ax = oq_axis(out_axes[s], er + 1);
			rc = empty_stacked(k, v, ax < 0 ? 0 : ax, &outs[s]);
		} else {
			rc = stack_finish(k, &st[s], out_axes[s], out_dirs[s] != 0, (size_t)T,
			                  &outs[s], s);
		}
		if (rc)
			goto fail;
	}
fail:
	for (size_t i = 0; cur && owned && i < N; i++)
		if (owned[i])
			oq_rt_release(&cur[i]);
	release_all(bout, N + K);
	for (size_t s = 0; st && s < K; s++)
		free(st[s].buf);
	free(cur);
	free(bin);
	free(bout);
	free(sl);
	free(owned);
	free(st);
	return rc;
}

/* Reads an INTS attribute of `want` entries (default 0 each) into dst. */
static int ints_attr(oq_kctx *k, const char *name, size_t want, int64_t *dst)
{
	const int64_t *v;
	size_t n = oq_k_ints(k, name, &v);
	if (n && n != want)
		return oq_k_err(k, OQ_EINVAL, "%s has %zu entries, expected %zu", name, n, want);
	for (size_t i = 0; i < want; i++)
		dst[i] = n ? v[i] : 0;
	return OQ_OK;
}

static int k_scan9(oq_kctx *k)
{
	const oq_graph *body = graph_attr(k, "body");
	int64_t Mi = oq_k_int(k, "num_scan_inputs", -1), T = -1;
	size_t N, M, K;
	int64_t *ia = NULL, *id = NULL, *oa = NULL, *od = NULL;
	int *axes = NULL;
	oq_rt *states = NULL, *scans = NULL, *fin = NULL, *outs = NULL;
	int rc = OQ_OK;

	if (!body)
		return oq_k_err(k, OQ_EINVAL, "missing graph attribute body");
	if (Mi < 1 || (size_t)Mi > k->n_in)
		return oq_k_err(k, OQ_EINVAL, "num_scan_inputs %lld is not in [1, %zu]",
		                (long long)Mi, k->n_in);
	M = (size_t)Mi;
	N = k->n_in - M;
	if (k->n_out < N || body->n_inputs != N + M || body->n_outputs != k->n_out)
		return oq_k_err(k, OQ_EINVAL,
		                "body (%zu inputs, %zu outputs) does not fit %zu states, %zu scan "
		                "inputs and %zu node outputs",
		                body->n_inputs, body->n_outputs, N, M, k->n_out);
	K = k->n_out - N;
	ia = oq_calloc(M, sizeof *ia);
	id = oq_calloc(M, sizeof *id);
	axes = oq_calloc(M, sizeof *axes);
	oa = oq_calloc(K + 1, sizeof *oa);
	od = oq_calloc(K + 1, sizeof *od);
	states = oq_calloc(N + 1, sizeof *states);
	scans = oq_calloc(M, sizeof *scans);
	fin = oq_calloc(N + 1, sizeof *fin);
	outs = oq_calloc(K + 1, sizeof *outs);
	if (!ia || !id || !axes || !oa || !od || !states || !scans || !fin || !outs) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = ints_attr(k, "scan_input_axes", M, ia)) ||
	    (rc = ints_attr(k, "scan_input_directions", M, id)) ||
	    (rc = ints_attr(k, "scan_output_axes", K, oa)) ||
	    (rc = ints_attr(k, "scan_output_directions", K, od)))
		goto fail;
	for (size_t i = 0; i < N + M; i++)
		if (!k->in[i]) {
			rc = oq_k_err(k, OQ_EINVAL, "input %zu is missing", i);
			goto fail;
		}
	for (size_t i = 0; i < N; i++)
		states[i] = *k->in[i];
	for (size_t m = 0; m < M; m++) {
		const oq_rt *x = k->in[N + m];
		scans[m] = *x;
		if ((axes[m] = oq_axis(ia[m], x->rank)) < 0) {
			rc = oq_k_err(k, OQ_EINVAL,
			              "scan_input_axes[%zu] = %lld is out of range for rank %d", m,
			              (long long)ia[m], x->rank);
			goto fail;
		}
		if (!elem_size(x->dtype)) {
			rc = oq_k_err(k, OQ_EUNSUP, "scan input %zu: %s elements cannot be sliced",
			              m, oq_dtype_name(x->dtype));
			goto fail;
		}
		if (T >= 0 && x->dims[axes[m]] != T) {
			rc = oq_k_err(k, OQ_EINVAL,
			              "scan input %zu has %lld steps, scan input 0 has %lld", m,
			              (long long)x->dims[axes[m]], (long long)T);
			goto fail;
		}
		T = x->dims[axes[m]];
	}
	if ((rc = scan_core(k, body, N, M, K, states, scans, axes, id, T, oa, od, fin, outs)))
		goto fail;
	for (size_t i = 0; i < N && !rc; i++)
		rc = put_output(k, i, &fin[i]);
	for (size_t s = 0; s < K && !rc; s++)
		rc = put_output(k, N + s, &outs[s]);
fail:
	release_all(fin, N);
	release_all(outs, K);
	free(ia);
	free(id);
	free(axes);
	free(oa);
	free(od);
	free(states);
	free(scans);
	free(fin);
	free(outs);
	return rc;
}

/* Borrowed view of entry b along the first axis of t. */
static oq_rt batch_view(const oq_rt *t, int64_t b)
{
	oq_rt v;
	memset(&v, 0, sizeof v);
	v.dtype = t->dtype;
	v.rank = t->rank - 1;
	if (v.rank > 0)
		memcpy(v.dims, t->dims + 1, (size_t)v.rank * sizeof *v.dims);
	v.nelem = t->dims[0] ? t->nelem / (size_t)t->dims[0] : 0;
	v.nbytes = t->dims[0] ? t->nbytes / (size_t)t->dims[0] : 0;
	v.data = (unsigned char *)t->data + (size_t)b * v.nbytes;
	v.borrowed = 1;
	return v;
}

/* Scan 8: batch axis 0 on every input and output, scan axis 1, optional sequence_lens. */
static int k_scan8(oq_kctx *k)
{
	const oq_graph *body = graph_attr(k, "body");
	oq_rt *lens = oq_k_in(k, 0);
	int64_t Mi = oq_k_int(k, "num_scan_inputs", -1), B = -1, maxT = -1;
	size_t N, M, K;
	int64_t *dirs = NULL, *zeros = NULL;
	int *axes = NULL;
	oq_rt *states = NULL, *scans = NULL, *fin = NULL, *outs = NULL;
	oq_rt **res = NULL;
	int rc = OQ_OK;

	if (!body)
		return oq_k_err(k, OQ_EINVAL, "missing graph attribute body");
	if (k->n_in < 1 || Mi < 1 || (size_t)Mi > k->n_in - 1)
		return oq_k_err(k, OQ_EINVAL, "num_scan_inputs %lld does not fit %zu inputs",
		                (long long)Mi, k->n_in);
	M = (size_t)Mi;
	N = k->n_in - 1 - M;
	if (k->n_out < N || body->n_inputs != N + M || body->n_outputs != k->n_out)
		return oq_k_err(k, OQ_EINVAL,
		                "body (%zu inputs, %zu outputs) does not fit %zu states, %zu scan "
		                "inputs and %zu node outputs",
		                body->n_inputs, body->n_outputs, N, M, k->n_out);
	K = k->n_out - N;
	dirs = oq_calloc(M, sizeof *dirs);
	zeros = oq_calloc(K + 1, sizeof *zeros);
	axes = oq_calloc(M, sizeof *axes);
	states = oq_calloc(N + 1, sizeof *states);
	scans = oq_calloc(M, sizeof *scans);
	fin = oq_calloc(N + 1, sizeof *fin);
	outs = oq_calloc(K + 1, sizeof *outs);
	res = oq_calloc(N + K + 1, sizeof *res);
	if (!dirs || !zeros || !axes || !states || !scans || !fin || !outs || !res) {
		rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = ints_attr(k, "directions", M, dirs)))
		goto fail;
	for (size_t i = 1; i < k->n_in; i++) {
		const oq_rt *x = k->in[i];
		int scan = i > N;
		if (!x || x->rank < (scan ? 2 : 1) || !elem_size(x->dtype)) {
			rc = oq_k_err(
			    k, OQ_EINVAL,
			    "input %zu must be a tensor with a batch axis%s (of whole-byte "
			    "elements)",
			    i, scan ? " and a sequence axis" : "");
			goto fail;
		}
		if (B >= 0 && x->dims[0] != B) {
			rc = oq_k_err(k, OQ_EINVAL, "input %zu has batch %lld, expected %lld", i,
			              (long long)x->dims[0], (long long)B);
			goto fail;
		}
		B = x->dims[0];
		if (scan) {
			if (maxT >= 0 && x->dims[1] != maxT) {
				rc = oq_k_err(k, OQ_EINVAL,
				              "scan input %zu has %lld steps, expected %lld", i,
				              (long long)x->dims[1], (long long)maxT);
				goto fail;
			}
			maxT = x->dims[1];
		}
	}
	if (lens && (lens->nelem != (size_t)B || lens->strs)) {
		rc = oq_k_err(k, OQ_EINVAL, "sequence_lens must have one entry per batch (%lld)",
		              (long long)B);
		goto fail;
	}
	for (int64_t b = 0; b < B; b++) {
		int64_t T = lens ? oq_rt_get_int(lens, (size_t)b) : maxT;
		if (T < 0 || T > maxT) {
			rc = oq_k_err(k, OQ_EINVAL,
			              "sequence_lens[%lld] = %lld is outside [0, %lld]",
			              (long long)b, (long long)T, (long long)maxT);
			goto fail;
		}
		for (size_t i = 0; i < N; i++)
			states[i] = batch_view(k->in[1 + i], b);
		for (size_t m = 0; m < M; m++)
			scans[m] = batch_view(k->in[1 + N + m], b);
		if ((rc = scan_core(k, body, N, M, K, states, scans, axes, dirs, T, zeros, zeros,
		                    fin, outs)))
			goto fail;
		for (size_t i = 0; i < N + K; i++) {
			oq_rt *r = i < N ? &fin[i] : &outs[i - N];
			int64_t dims[OQ_RT_MAX_RANK];
			size_t per;
			if (r->rank + 1 > OQ_RT_MAX_RANK) {
				rc = oq_k_err(k, OQ_EUNSUP, "output rank too large");
				goto fail;
			}
			dims[0] = B;
			memcpy(dims + 1, r->dims, (size_t)r->rank * sizeof *dims);
			if (i >= N)
				dims[1] = maxT; /* padded to the longest sequence */
			if (b == 0 &&
			    (rc = oq_k_output(k, i, r->dtype, r->rank + 1, dims, &res[i])))
				goto fail;
			per = res[i]->nbytes / (size_t)B;
			if (res[i]->dtype != r->dtype || res[i]->rank != r->rank + 1 ||
			    r->nbytes > per ||
			    memcmp(res[i]->dims + 2, r->dims + 1,
			           (size_t)(r->rank > 1 ? r->rank - 1 : 0) * sizeof *dims) != 0) {
				rc = oq_k_err(k, OQ_EINVAL,
				              "output %zu changes shape between batch entries", i);
				goto fail;
			}
			if (r->nbytes)
				memcpy((unsigned char *)res[i]->data + (size_t)b * per, r->data,
				       r->nbytes);
		}
		release_all(fin, N);
		release_all(outs, K);
	}
	if (B == 0) {
		rc = oq_k_err(k, OQ_EUNSUP, "empty batch");
		goto fail;
	}
fail:
	release_all(fin, N);
	release_all(outs, K);
	free(dirs);
	free(zeros);
	free(axes);
	free(states);
	free(scans);
	free(fin);
	free(outs);
	free(res);
	return rc;
}

const oq_kreg oq_kernels_control[] = {
    {OQ_OP_If, 1, k_if},      {OQ_OP_Loop, 1, k_loop},  {OQ_OP_Scan, 8, k_scan8},
    {OQ_OP_Scan, 9, k_scan9}, {OQ_OP_UNKNOWN, 0, NULL},
};
