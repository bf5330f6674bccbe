/*
 * target.c - `quantize --target-sqnr DB` (see target.h).
 */
#include "src/pipeline/target.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "passes/quantize/overrides.h"

#define MARGIN_DB 1.5      /* a round aims this far above the target (the noise estimate is rough) */
#define MAC_FLOOR 1e-3     /* a point's cost is its MACs + this share of the model's */
#define LOWER_TRIES 6      /* fold measurements the give-back phase may spend */
#define LOWER_SHARE 0.5    /* a give-back try fills at most this share of an output's room */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void oq_target_free(oq_target *t)
{
	for (size_t i = 0; t->out && i < t->n_out; i++)
		free(t->out[i]);
	free(t->out);
	free(t->sqnr);
	free(t->sqnr0);
	oq_overrides_free(t->ov, t->n_ov);
	free(t->kind);
	memset(t, 0, sizeof *t);
}

/* The overrides of `level` (0: as the options, 1: 16-bit, 2: float) per analysis point. */
static int overrides(const oq_analysis *a, const int *level, int act16, int w16, oq_override **out, int **kind,
		     size_t *n, oq_diag *d)
{
	size_t k = 0;
	oq_override *v = oq_calloc(a->n_pt + 1, sizeof *v);
	int *kd = oq_calloc(a->n_pt + 1, sizeof *kd);

	if (!v || !kd)
		goto oom;
	for (size_t p = 0; p < a->n_pt; p++) {
		oq_override *o = &v[k];
		if (!level[p])
			continue;
		if (!(o->name = oq_strdup(a->pt[p].name)))
			goto oom;
		o->skip = level[p] == 2;
		o->dtype = level[p] == 1 ? (a->pt[p].weight ? w16 : act16) : 0;
		o->symmetric = -1;
		o->granularity = -1;
		o->axis = INT32_MIN;
		kd[k++] = a->pt[p].weight;
	}
	*out = v;
	*kind = kd;
	*n = k;
	return OQ_OK;
oom:
	oq_overrides_free(v, k);
	free(kd);
	return oq_err(d, OQ_ENOMEM, "target-sqnr: out of memory");
}

/* The lowest output fold SQNR of sums r2, d2 (NaN counts as lowest); its output in *at. */
static double worst_of(const double *r2, const double *d2, size_t n, size_t *at)
{
	double w = INFINITY;

	*at = 0;
	for (size_t o = 0; o < n; o++) {
		double db = oq_fidelity_db(r2[o], d2[o]);
		if (r2[o] == 0 && d2[o] == 0)
			continue;
		if (isnan(db) || db < w) {
			w = db;
			*at = o;
			if (isnan(db))
				break;
		}
	}
	return w;
}

/* Is a better than b (NaN is worst)? */
static int better(double a, double b)
{
	return !isnan(a) && (isnan(b) || a > b);
}

/* MACs of nodes that read a quantization point and no raised one (a node the placement left
 * float reads no point: its MACs are not 8-bit). */
static double macs8(const oq_model *fm, const oq_analysis *a, const int *level, oq_diag *d, int *rc)
{
	const oq_graph *g = fm->graph;
	unsigned char *pt = oq_calloc(g->n_values + 1, 1); /* 1: an 8-bit point, 2: a raised one */
	double m = 0;

	*rc = OQ_OK;
	if (!pt) {
		*rc = oq_err(d, OQ_ENOMEM, "target-sqnr: out of memory");
		return 0;
	}
	for (size_t p = 0; p < a->n_pt; p++) {
		const oq_value *v = oq_graph_find(g, a->pt[p].name);
		if (v && v->graph == g)
			pt[v->index] = level[p] ? 2 : 1;
	}
	for (size_t i = 0; i < g->n_nodes; i++) {
		const oq_node *n = g->nodes[i];
		int raised = 0, read = 0;
		for (size_t k = 0; k < n->n_inputs; k++) {
			const oq_value *v = n->inputs[k];
			if (v && v->graph == g) {
				raised |= pt[v->index] == 2;
				read |= pt[v->index] == 1;
			}
		}
		if (read && !raised)
			m += a->node_macs[i];
	}
	free(pt);
	return m;
}

/*
 * Raises points for output o (see target.h) from the measured noise d2o toward `goal` (noise
 * power); returns the steps taken. order: scratch of a->n_pt entries.
 */
static size_t plan_round(const oq_analysis *a, int *level, size_t o, double d2o, double goal, size_t *order)
{
	double floor = MAC_FLOOR * a->total_macs + 1, total = 0, need, cum = 0;
	size_t nc = 0, steps = 0;
	int from;

	for (size_t p = 0; p < a->n_pt && !nc; p++)
		nc += level[p] == 0;
	from = nc ? 0 : 1; /* 8-bit points first; then 16-bit ones go to float */
	nc = 0;
	for (size_t p = 0; p < a->n_pt; p++) { /* candidates by score, best first: insertion sort */
		double s;
		size_t x = nc;
		if (level[p] != from)
			continue;
		s = from ? a->pt[p].d2[o] : a->pt[p].d2[o] / (a->pt[p].macs + floor);
		for (; x > 0; x--) {
			size_t q = order[x - 1];
			double sq = from ? a->pt[q].d2[o] : a->pt[q].d2[o] / (a->pt[q].macs + floor);
			if (!(s > sq))
				break;
			order[x] = q;
		}
		order[x] = p;
		nc++;
	}
	/* the measured noise d2o is shared among the candidates in proportion to their noise alone
	 * (alone, the points' noises do not add up to the measured one): remove the share that
	 * would leave goal */
	for (size_t i = 0; i < nc; i++)
		total += a->pt[order[i]].d2[o];
	need = d2o > goal && d2o > 0 ? (1 - goal / d2o) * total : 0;
	for (size_t i = 0; i < nc; i++) {
		if (steps && cum >= need)
			break;
		level[order[i]]++;
		cum += a->pt[order[i]].d2[o];
		steps++;
	}
	return steps;
}

/* One fold measurement of the model with `level`'s overrides; f is replaced. */
static int measure_level(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, const oq_analysis *a,
			 const int *level, int act16, int w16, oq_fid_make_fn make, oq_target_set_fn set, void *ctx,
			 oq_fidelity *f, oq_diag *d)
{
	oq_override *ov = NULL;
	int *kind = NULL;
	size_t n_ov = 0;
	int rc;

	oq_fidelity_free(f);
	rc = overrides(a, level, act16, w16, &ov, &kind, &n_ov, d);
	if (!rc && !(rc = set(ctx, ov, n_ov, d)))
		rc = oq_fidelity_measure(fm, co, folds, make, ctx, f, d);
	oq_overrides_free(ov, n_ov);
	free(kind);
	return rc;
}

/* A 16-bit point's cost back at 8 bits: its largest share of an output's power, per MAC it
 * would return to 8 bits (MACs + MAC_FLOOR of the model's, as plan_round counts them). */
static double back_score(const oq_analysis *a, size_t p)
{
	double s = 0;
	for (size_t o = 0; o < a->n_out; o++)
		if (a->r2[o] > 0 && a->pt[p].d2[o] / a->r2[o] > s)
			s = a->pt[p].d2[o] / a->r2[o];
	return s / (a->pt[p].macs + MAC_FLOOR * a->total_macs + 1);
}

/*
 * The give-back phase (target.h): best holds the levels that reached the target, d2 their
 * per-output noise (updated as points go back to 8 bits), sqnr the per-output dB. order:
 * scratch of a->n_pt entries. Returns the measurements spent in *tries.
 */
static int give_back(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, const oq_analysis *a,
		     double db, int act16, int w16, oq_fid_make_fn make, oq_target_set_fn set, void *ctx,
		     int *best, double *d2, double *sqnr, size_t *order, size_t *tries, size_t *lowered, FILE *log,
		     oq_diag *d)
{
	int *level = oq_calloc(a->n_pt + 1, sizeof *level);
	unsigned char *stuck = oq_calloc(a->n_pt + 1, 1);
	double *room = oq_calloc(a->n_out + 1, sizeof *room), *fill = oq_calloc(a->n_out + 1, sizeof *fill);
	oq_fidelity f;
	size_t nc = 0, ng = 0;
	int rc = OQ_OK;

	memset(&f, 0, sizeof f);
	*tries = *lowered = 0;
	if (!level || !stuck || !room || !fill) {
		rc = oq_err(d, OQ_ENOMEM, "target-sqnr: out of memory");
		goto out;
	}
	/* candidates: the 16-bit points by their noise per MAC, least first (ties: analysis order) */
	for (size_t p = 0; p < a->n_pt; p++) {
		size_t x = nc;
		if (best[p] != 1)
			continue;
		for (; x > 0 && back_score(a, p) < back_score(a, order[x - 1]); x--)
			order[x] = order[x - 1];
		order[x] = p;
		nc++;
	}
	while (*tries < LOWER_TRIES) {
		double w;
		size_t at;
		if (!ng) { /* a new group: the candidates left whose noise alone fits the room */
			for (size_t o = 0; o < a->n_out; o++) {
				room[o] = a->r2[o] > 0 ? LOWER_SHARE * (a->r2[o] / pow(10, db / 10) - d2[o]) : INFINITY;
				fill[o] = 0;
			}
			memcpy(level, best, a->n_pt * sizeof *level);
			for (size_t i = 0; i < nc; i++) {
				size_t p = order[i], o;
				if (stuck[p] || best[p] != 1)
					continue;
				for (o = 0; o < a->n_out; o++)
					if (!(fill[o] + a->pt[p].d2[o] <= room[o]))
						break;
				if (o < a->n_out)
					continue;
				for (o = 0; o < a->n_out; o++)
					fill[o] += a->pt[p].d2[o];
				level[p] = 0;
				ng++;
			}
			if (!ng)
				break;
		}
		if ((rc = measure_level(fm, co, folds, a, level, act16, w16, make, set, ctx, &f, d)))
			goto out;
		++*tries;
		w = worst_of(f.r2, f.d2, f.n_out, &at);
		if (log)
			fprintf(log, "target-sqnr: give back %zu point%s to 8 bits: worst output '%s' %.1f dB%s\n", ng,
				ng == 1 ? "" : "s", f.out[at], w, !isnan(w) && w >= db ? "" : ", refused");
		if (!isnan(w) && w >= db) {
			*lowered += ng;
			memcpy(best, level, a->n_pt * sizeof *best);
			for (size_t o = 0; o < a->n_out; o++) {
				d2[o] = f.d2[o];
				sqnr[o] = oq_fidelity_db(f.r2[o], f.d2[o]);
			}
			ng = 0;
			continue;
		}
		if (ng == 1) { /* that point stays raised */
			for (size_t p = 0; p < a->n_pt; p++)
				if (level[p] != best[p])
					stuck[p] = 1;
			ng = 0;
			continue;
		}
		/* refused: try the group's first half in candidate order (the least noise per MAC) */
		{
			size_t keep = (ng + 1) / 2, k = 0;
			for (size_t i = 0; i < nc; i++) {
				size_t p = order[i];
				if (level[p] != best[p] && ++k > keep)
					level[p] = best[p];
			}
			ng = keep;
		}
	}
out:
	oq_fidelity_free(&f);
	free(level);
	free(stuck);
	free(room);
	free(fill);
	return rc;
}

int oq_target_search(oq_model *fm, const oq_calib_opts *co, const oq_stats *folds, const oq_ranges *all,
		     double db, int act16, int w16, oq_fid_make_fn make, oq_target_set_fn set, void *ctx,
		     FILE *log, oq_target *out, oq_diag *d)
{
	oq_analysis a;
	oq_fidelity f;
	int *level = NULL, *best = NULL;
	size_t *order = NULL, o;
	double *bd2 = NULL; /* per output: the best round's noise */
	double t0 = now(), bw, w;
	int rc;

	memset(out, 0, sizeof *out);
	memset(&f, 0, sizeof f);
	out->db = db;
	if ((rc = set(ctx, NULL, 0, d)) || (rc = oq_analyze(fm, co, folds, all, make, ctx, &a, d)))
		return rc;
	out->n_out = a.n_out;
	level = oq_calloc(a.n_pt + 1, sizeof *level);
	best = oq_calloc(a.n_pt + 1, sizeof *best);
	order = oq_calloc(a.n_pt + 1, sizeof *order);
	bd2 = oq_calloc(a.n_out + 1, sizeof *bd2);
	out->out = oq_calloc(a.n_out + 1, sizeof *out->out);
	out->sqnr = oq_calloc(a.n_out + 1, sizeof *out->sqnr);
	out->sqnr0 = oq_calloc(a.n_out + 1, sizeof *out->sqnr0);
	if (!level || !best || !order || !bd2 || !out->out || !out->sqnr || !out->sqnr0) {
		rc = oq_err(d, OQ_ENOMEM, "target-sqnr: out of memory");
		goto fail;
	}
	for (size_t i = 0; i < a.n_out; i++) {
		if (!(out->out[i] = oq_strdup(a.out[i]))) {
			rc = oq_err(d, OQ_ENOMEM, "target-sqnr: out of memory");
			goto fail;
		}
		out->sqnr[i] = out->sqnr0[i] = oq_fidelity_db(a.r2[i], a.qd2[i]);
		bd2[i] = a.qd2[i];
	}
	/* round 0 is the analysis' fully quantized model */
	bw = w = worst_of(a.r2, a.qd2, a.n_out, &o);
	if (log)
		fprintf(log, "target-sqnr: %zu points; fold SQNR of the worst output '%s' %.1f dB, target %.1f dB\n",
			a.n_pt, a.out[o], w, db);
	while (isnan(w) || w < db) {
		double goal = a.r2[o] / pow(10, (db + MARGIN_DB) / 10);
		double d2o = f.k ? f.d2[o] : a.qd2[o];
		size_t steps = plan_round(&a, level, o, d2o, goal, order), n16 = 0, nf = 0;

		if (!steps)
			break;
		if ((rc = measure_level(fm, co, folds, &a, level, act16, w16, make, set, ctx, &f, d)))
			goto fail;
		out->rounds++;
		w = worst_of(f.r2, f.d2, f.n_out, &o);
		for (size_t p = 0; p < a.n_pt; p++) {
			n16 += level[p] == 1;
			nf += level[p] == 2;
		}
		if (log)
			fprintf(log, "target-sqnr: round %zu: %zu points at 16 bits, %zu float: worst output '%s' %.1f dB\n",
				out->rounds, n16, nf, f.out[o], w);
		if (better(w, bw)) {
			bw = w;
			memcpy(best, level, a.n_pt * sizeof *best);
			for (size_t i = 0; i < a.n_out; i++) {
				out->sqnr[i] = oq_fidelity_db(f.r2[i], f.d2[i]);
				bd2[i] = f.d2[i];
			}
		}
	}
	out->reached = !isnan(bw) && bw >= db;
	oq_fidelity_free(&f);
	if (out->reached && out->rounds &&
	    (rc = give_back(fm, co, folds, &a, db, act16, w16, make, set, ctx, best, bd2, out->sqnr, order,
			    &out->tries_back, &out->given_back, log, d)))
		goto fail;
	if ((rc = overrides(&a, best, act16, w16, &out->ov, &out->kind, &out->n_ov, d)) ||
	    (rc = set(ctx, out->ov, out->n_ov, d)))
		goto fail;
	out->macs = a.total_macs;
	out->macs8 = macs8(fm, &a, best, d, &rc);
	out->seconds = now() - t0;
fail:
	oq_fidelity_free(&f);
	oq_analysis_free(&a);
	free(level);
	free(best);
	free(order);
	free(bd2);
	if (rc)
		oq_target_free(out);
	return rc;
}



int oq_target_json(const oq_target *t, const char *path, oq_diag *d)
{
	FILE *f = fopen(path, "w");
	int bad;

	if (!f)
		return oq_err(d, OQ_EIO, "target-sqnr: cannot write %s", path);
	fprintf(f, "{\n  \"target_sqnr_db\": %.4f,\n  \"reached\": %s,\n  \"rounds\": %zu,\n  \"given_back\": %zu,\n"
		"  \"seconds\": %.3f,\n", t->db, t->reached ? "true" : "false", t->rounds, t->given_back, t->seconds);
	fprintf(f, "  \"macs\": %.0f,\n  \"macs_8bit\": %.0f,\n  \"macs_8bit_share\": %.6f,\n  \"outputs\": [", t->macs,
		t->macs8, t->macs > 0 ? t->macs8 / t->macs : 1.0);
	for (size_t o = 0; o < t->n_out; o++) {
		fputs(o ? ", " : "", f);
		fputs("{\"name\": ", f);
		oq_json_str(f, t->out[o]);
		fputs(", \"fold_sqnr_db\": ", f);
		oq_fidelity_json_db(f, t->sqnr[o]);
		fputs(", \"fold_sqnr_db_8bit\": ", f);
		oq_fidelity_json_db(f, t->sqnr0[o]);
		fputc('}', f);
	}
	fputs("],\n  \"raised\": [", f);
	for (size_t i = 0; i < t->n_ov; i++) {
		fputs(i ? ",\n    " : "\n    ", f);
		fputs("{\"name\": ", f);
		oq_json_str(f, t->ov[i].name);
		fprintf(f, ", \"kind\": \"%s\", \"to\": \"%s\"}", t->kind[i] ? "weight" : "activation",
			t->ov[i].skip ? "float" : oq_dtype_name(t->ov[i].dtype));
	}
	fputs("]\n}\n", f);
	bad = ferror(f);
	if (fclose(f) || bad)
		return oq_err(d, OQ_EIO, "target-sqnr: writing %s failed", path);
	return OQ_OK;
}
