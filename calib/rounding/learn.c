/*
 * learn.c - learned weight rounding over a model: which layers, their inputs, the stages, and
 * the result the quantize passes apply (rounding.h for the algorithms).
 *
 * Layers: the weights the quantize pass (or weight-only mode) will quantize, of Conv (1-D and
 * 2-D), MatMul (a [K, N] weight) and Gemm, whose weight has no other reader and an integer
 * grid. Others (ConvTranspose, Gather, 3-D convs, float8) keep round-to-nearest.
 *
 * Stages (asymmetric reconstruction): the layers, in graph order, are cut into OQ_WR_STAGES
 * stages of about equal count, more where a stage's moments would pass OQ_WR_STAGE_BYTES.
 * Stage 0's inputs come from one run of the float model over the samples (x~ = x). For stage
 * s > 0 a second copy of the model (saved and loaded back once) holds the weights of every
 * earlier stage as they will be quantized (and, weight-only, their corrected biases), plus
 * every planned weight that is not learned at nearest rounding; each sample runs through the
 * float model, whose stage-s layer inputs are kept, then through that copy, whose inputs are
 * paired with them. A stage's frontier layers (no layer of the stage upstream of them) target
 * the float output W x from the quantized-so-far input x~: they also make up for the error
 * upstream. The others see x~ with float layers of their own stage before them, which the
 * frontier layers' correction will change: they reconstruct W x~ (their own rounding error
 * only), so that no upstream error is made up for twice. More stages: more frontier layers,
 * two more model runs each. Activations stay float throughout (the shift the weights cause,
 * whatever the mode).
 *
 * Held out (the guard, rounding.h): sample i of n when i % OQ_WR_HOLD == OQ_WR_HOLD - 1, or the
 * last one when 2 <= n < OQ_WR_HOLD; its patches go to a second set of moments per layer, which
 * judges the layer's result and then joins the first for the final learning, the bias and the
 * report.
 *
 * Memory: per layer of a stage 2 K^2 + 2 K doubles per conv group (one K^2 at stage 0), twice
 * with held-out samples; a stage's float layer inputs of one sample; the model copy; the
 * solver's per-chunk state. Positions per sample and layer are capped (moments.h).
 *
 * Deterministic: samples in order, fixed stage cuts, moments and solvers whose partitions
 * depend on shapes only.
 *
 * --awq (awq.h) runs on the same layers, inputs and held-out samples before the rounding: the
 * float model only (every stage unpaired, its layers' moments cut by the memory budget alone),
 * each layer's scales searched and guarded from its moments, and applied to the model once
 * every stage has run (the scales of one layer change no other layer's float input).
 */
#include "calib/rounding/rounding.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "calib/exec/threadpool.h"
#include "calib/rounding/awq.h"
#include "calib/rounding/moments.h"
#include "calib/samples.h"
#include "src/io/onnx_io.h"
#include "src/quant/qparams.h"

#define OQ_WR_STAGES 3
#define OQ_WR_STAGE_BYTES ((size_t)768 << 20)
/* One sample in OQ_WR_HOLD is held out: the guard judges each layer's result on those. */
#define OQ_WR_HOLD 4

/* A layer being learned. */
typedef struct wl {
	oq_node *node;       /* in m */
	oq_wspec spec;       /* the plan's */
	const oq_value *wv;  /* the weight, in m */
	const oq_value *x;   /* its input, in m */
	const oq_value *xq;  /* the same value in the copy */
	int gin;             /* x's position among the executor's inputs, or -1 */
	oq_wr_geom g;
	size_t M, Mg;        /* output channels, per group */
	int cols;            /* 1: row m of the problem is column m of W ([K, M]); 0: W[m * K + k] */
	float alpha;         /* Gemm alpha (the output's scale of W x) */
	oq_wgrid grid;
	int stage;
	int frontier;        /* no other layer of its stage is upstream: its x~ is the quantized
			      * model's (asymmetric target); others see x~ with float layers of
			      * their own stage before them and only reconstruct W x~ */
	oq_wr_moments *mo;   /* g.groups entries, during its stage: the samples it learns on */
	oq_wr_moments *ho;   /* the same of the held-out samples (the guard), or NULL */
	oq_rt keep;          /* its float input of the sample being run (paired stages) */
	oq_node *bn;         /* bias correction: the node holding the bias, or NULL */
	size_t bi;           /* its input index */
	float bscale;        /* the bias enters the output times this (Gemm beta) */
	double *db;          /* M: the correction so far */
	float *wq;           /* the weight as quantized, once learned */
} wl;

typedef struct learn {
	const char *what;    /* names the step in messages: "weight rounding" or "awq" */
	oq_model *m, *qm;
	const oq_opts *o;
	int bias;
	wl *L;
	size_t nl;
	int stage;
	int guard;           /* some samples are held out (held_out()): each layer's result is
			      * judged on them */
	int held;            /* the sample being run is held out */
	int awq;             /* --awq (awq.h): float inputs only, layers scaled, not rounded */
	int mode;            /* what the observer does: */
	oq_pool *pool;
	int rc;
	oq_diag *d;
} learn;

enum { M_SELF = 0, M_STORE, M_PAIR };

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Element (row m, k) of the weight tensor. */
static size_t elem(const wl *l, size_t m, size_t k)
{
	return l->cols ? k * l->M + m : m * l->g.K + k;
}

static int64_t ints_at(const oq_node *n, const char *name, size_t i, int64_t dflt)
{
	const oq_attr *a = oq_node_attr(n, name);
	return a && a->type == OQ_ATTR_INTS && i < a->n ? a->ints[i] : dflt;
}

/* Fills l's geometry from its node; 0 when learned rounding does not handle the layer. */
static int geometry(wl *l)
{
	const oq_node *n = l->node;
	const oq_tensor *W = l->wv->init;

	if (n->op == OQ_OP_Conv) {
		const oq_attr *ap = oq_node_attr(n, "auto_pad");
		int64_t grp = oq_node_attr_int(n, "group", 1);
		int nsp = W->rank - 2;
		if (nsp < 1 || nsp > 2 || grp < 1 || W->dims[0] % grp || W->nelem == 0)
			return 0;
		l->g.kind = OQ_WR_CONV;
		l->g.nsp = nsp;
		l->g.groups = (size_t)grp;
		l->g.cin_g = (size_t)W->dims[1];
		l->M = (size_t)W->dims[0];
		l->g.K = W->nelem / l->M;
		for (int a = 0; a < nsp; a++) {
			l->g.kernel[a] = W->dims[2 + a];
			l->g.stride[a] = ints_at(n, "strides", (size_t)a, 1);
			l->g.dil[a] = ints_at(n, "dilations", (size_t)a, 1);
			l->g.pads[a] = ints_at(n, "pads", (size_t)a, 0);
			l->g.pads[nsp + a] = ints_at(n, "pads", (size_t)(nsp + a), 0);
			if (l->g.stride[a] < 1 || l->g.dil[a] < 1 || l->g.pads[a] < 0 || l->g.pads[nsp + a] < 0)
				return 0;
		}
		l->g.auto_pad = OQ_WR_PAD_NOTSET;
		if (ap && ap->type == OQ_ATTR_STRING && ap->s.p) {
			if (!strcmp(ap->s.p, "VALID"))
				l->g.auto_pad = OQ_WR_PAD_VALID;
			else if (!strcmp(ap->s.p, "SAME_UPPER"))
				l->g.auto_pad = OQ_WR_PAD_SAME_UPPER;
			else if (!strcmp(ap->s.p, "SAME_LOWER"))
				l->g.auto_pad = OQ_WR_PAD_SAME_LOWER;
			else if (strcmp(ap->s.p, "NOTSET"))
				return 0;
		}
		l->cols = 0;
	} else if (n->op == OQ_OP_MatMul || n->op == OQ_OP_Gemm) {
		int tb = n->op == OQ_OP_Gemm && oq_node_attr_int(n, "transB", 0);
		const oq_attr *al = oq_node_attr(n, "alpha");
		if (W->rank != 2 || W->nelem == 0)
			return 0;
		l->g.kind = n->op == OQ_OP_Gemm && oq_node_attr_int(n, "transA", 0) ? OQ_WR_COLS : OQ_WR_ROWS;
		l->g.groups = 1;
		l->g.K = (size_t)W->dims[tb ? 1 : 0];
		l->g.cin_g = l->g.K;
		l->M = (size_t)W->dims[tb ? 0 : 1];
		l->cols = !tb;
		if (n->op == OQ_OP_Gemm && al && al->type == OQ_ATTR_FLOAT)
			l->alpha = al->f;
	} else {
		return 0;
	}
	l->Mg = l->M / l->g.groups;
	return 1;
}

/*
 * Weight-only bias correction: where layer l's bias lives, adding a zero bias to a Conv or Gemm
 * without one (the model computes the same; dry: l->bn is set as if, nothing added). A MatMul
 * needs an Add of a constant with one value per output channel right after it.
 */
static int bias_target(oq_graph *g, wl *l, int dry)
{
	oq_node *n = l->node;
	const oq_tensor *B;

	l->bscale = 1;
	if (n->op == OQ_OP_MatMul) {
		oq_value *y = n->outputs[0];
		oq_node *a = y && oq_value_is_private(y) ? oq_value_only_user(y) : NULL;
		if (!a || !oq_node_is(a, OQ_OP_Add) || a->n_inputs != 2)
			return OQ_OK;
		for (size_t k = 0; k < 2; k++) {
			const oq_tensor *c = a->inputs[1 - k] == y ? oq_value_const(g, a->inputs[k]) : NULL;
			if (c && c->dtype == OQ_DT_FLOAT && c->nelem == l->M && c->rank >= 1 &&
			    (size_t)c->dims[c->rank - 1] == l->M && a->inputs[k]->n_uses == 1) {
				l->bn = a;
				l->bi = k;
			}
		}
		return OQ_OK;
	}
	if (n->op == OQ_OP_Gemm) {
		const oq_attr *be = oq_node_attr(n, "beta");
		float beta = be && be->type == OQ_ATTR_FLOAT ? be->f : 1.0f;
		if (beta == 0 && n->n_inputs >= 3 && n->inputs[2])
			return OQ_OK;
		l->bscale = beta == 0 ? 1 : beta;
	}
	if (n->n_inputs >= 3 && n->inputs[2]) {
		B = oq_value_const(g, n->inputs[2]);
		if (!B || B->dtype != OQ_DT_FLOAT || B->rank != 1 || B->nelem != l->M || n->inputs[2]->n_uses != 1)
			return OQ_OK;
	} else if (!dry) {
		int64_t dim = (int64_t)l->M;
		float *z = oq_calloc(l->M, sizeof *z);
		char base[256];
		int rc;
		if (!z)
			return OQ_ENOMEM;
		snprintf(base, sizeof base, "%.200s_bias", l->wv->name);
		rc = oq_pass_set_const(g, n, 2, base, 1, &dim, z);
		free(z);
		if (rc)
			return rc;
		if (n->op == OQ_OP_Gemm && (rc = oq_node_set_attr_float(n, "beta", 1.0f)))
			return rc;
		l->bscale = 1;
	}
	l->bn = n;
	l->bi = 2;
	return OQ_OK;
}

/* Replaces the data of the copy's initializer `name` (same element count) by f. */
static int qm_set(oq_model *qm, const char *name, const float *f)
{
	oq_value *v = oq_graph_find(qm->graph, name);
	oq_tensor *t;
	if (!v || !v->init || v->init->dtype != OQ_DT_FLOAT)
		return OQ_EINVAL;
	if (!(t = oq_tensor_from_floats(v->init->rank, v->init->dims, f)))
		return OQ_ENOMEM;
	free(t->name);
	if (!(t->name = oq_strdup(v->name))) {
		oq_tensor_free(t);
		return OQ_ENOMEM;
	}
	oq_tensor_free(v->init);
	v->init = t;
	return OQ_OK;
}

/* The copy of m the quantized stages run: saved to a temporary file and loaded back. */
static int copy_model(const oq_model *m, oq_model **out, oq_diag *d)
{
	const char *dir = getenv("TMPDIR");
	char path[4096], data[4200];
	oq_save_info info;
	int fd, rc;

	snprintf(path, sizeof path, "%s/onnxq_wround_XXXXXX", dir && *dir ? dir : "/tmp");
	if ((fd = mkstemp(path)) < 0)
		return oq_err(d, OQ_EIO, "weight rounding: cannot create a temporary file in %s (set TMPDIR)",
			      dir && *dir ? dir : "/tmp");
	close(fd);
	rc = oq_model_save(m, path, NULL, &info, d);
	if (!rc)
		rc = oq_model_load(path, out, d);
	unlink(path);
	snprintf(data, sizeof data, "%s.data", path);
	if (!rc && info.went_external)
		unlink(data);
	return rc;
}

/* ------------------------------------------------------------ observing */

static int want(void *ctx, const oq_value *v)
{
	const learn *c = ctx;
	for (size_t i = 0; i < c->nl; i++)
		if (c->L[i].x == v || c->L[i].xq == v)
			return 1;
	return 0;
}

static int observe(void *ctx, const oq_value *v, const oq_rt *t)
{
	learn *c = ctx;
	int rc = OQ_OK;

	for (size_t i = 0; i < c->nl && !rc; i++) {
		wl *l = &c->L[i];
		if (l->stage != c->stage || l->gin >= 0)
			continue;
		oq_wr_moments *mo = c->held ? l->ho : l->mo;
		if (c->mode == M_SELF && l->x == v)
			rc = oq_wr_accumulate(&l->g, t, NULL, mo, c->pool);
		else if (c->mode == M_STORE && l->x == v && l->frontier)
			rc = oq_rt_copy(&l->keep, t);
		else if (c->mode == M_PAIR && l->xq == v)
			rc = oq_wr_accumulate(&l->g, t, l->frontier ? &l->keep : NULL, mo, c->pool);
		if (rc)
			rc = oq_err(c->d, rc, "%s: node '%s' (%s): input '%s' (%s): %s", c->what, l->node->name,
				    l->node->op_type, v->name, oq_rt_describe(t, (char[96]){0}, 96),
				    rc == OQ_ENOMEM ? "out of memory" : "not a float32 tensor of the expected shape");
	}
	return rc;
}

/* ------------------------------------------------------------ solving */

/*
 * A and C = E[x~ x^T] of a group as floats, from the moments' sums: the covariances shrunk
 * towards their diagonals (rounding.h), plus the means' products unless cent (a bias absorbs
 * the mean error). mu_q, mu_f: the means (K doubles each).
 */
static void moments_to(const oq_wr_moments *mo, int cent, float *A, float *C, double *mu_q, double *mu_f)
{
	size_t K = mo->K;
	double n = mo->n ? (double)mo->n : 1, al = OQ_WR_SHRINK;
	const double *qf = mo->paired ? mo->qf : mo->qq, *sf = mo->paired ? mo->sf : mo->sq;

	for (size_t k = 0; k < K; k++) {
		mu_q[k] = mo->sq[k] / n;
		mu_f[k] = sf[k] / n;
	}
	for (size_t a = 0; a < K; a++)
		for (size_t b = 0; b < K; b++) {
			double f = a == b ? 1 : 1 - al, mqq = mu_q[a] * mu_q[b], mqf = mu_q[a] * mu_f[b];
			A[a * K + b] = (float)(f * (mo->qq[a * K + b] / n - mqq) + (cent ? 0 : mqq));
			C[a * K + b] = (float)(f * (qf[a * K + b] / n - mqf) + (cent ? 0 : mqf));
		}
}

/* Adds sum w A w to *sig and sum (wq - w) A (wq - w) to *err over p's rows (D: rows x K scratch). */
static void rounding_error(const oq_wr_problem *p, const float *Wq, float *D, const float *zeros, double *sig,
			   double *err)
{
	oq_wr_problem z = *p;
	z.T = zeros;
	*sig += oq_wr_loss(&z, p->W);
	for (size_t e = 0; e < p->rows * p->K; e++)
		D[e] = Wq[e] - p->W[e];
	*err += oq_wr_loss(&z, D);
}

static double db(double sig, double err)
{
	return err > 0 ? 10 * log10(sig / err) : INFINITY;
}

/* Row m, element k of group gi of the weight tensor t (float32). */
static float wat(const wl *l, const oq_tensor *t, size_t gi, size_t m, size_t k)
{
	float v;
	memcpy(&v, (const char *)t->data + elem(l, gi * l->Mg + m, k) * 4, 4);
	return v;
}

/*
 * The loss (rounding.h) of weights wq (the whole tensor) on the held-out moments of group gi,
 * up to a constant that does not depend on wq. A, C: K x K scratch; W, Wq, T: rows x K; mq, mf:
 * K.
 */
static double held_loss(const wl *l, size_t gi, int cent, const float *wq, float *A, float *C, float *W, float *Wq,
			float *T, double *mq, double *mf)
{
	size_t K = l->g.K, R = l->Mg;
	oq_wr_problem p;

	moments_to(&l->ho[gi], cent, A, C, mq, mf);
	for (size_t m = 0; m < R; m++)
		for (size_t k = 0; k < K; k++) {
			W[m * K + k] = wat(l, l->wv->init, gi, m, k);
			Wq[m * K + k] = wq[elem(l, gi * R + m, k)];
		}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)R, (int)K, (int)K, 1.0f, W, (int)K, C, (int)K, 0.0f, T,
		    (int)K);
	p = (oq_wr_problem){K, R, A, T, W, NULL, NULL, 0, 0, NULL, 0, 0, NULL};
	return oq_wr_loss(&p, Wq);
}

/* dy[m] = w_m . mu_f - wq_m . mu_q over the rows of group gi: its mean output error. */
static void mean_error(const wl *l, size_t gi, const float *wq, const double *mq, const double *mf, double *dy)
{
	for (size_t m = 0; m < l->Mg; m++) {
		double e = 0;
		for (size_t k = 0; k < l->g.K; k++)
			e += (double)wat(l, l->wv->init, gi, m, k) * mf[k] -
			     (double)wq[elem(l, gi * l->Mg + m, k)] * mq[k];
		dy[m] = e;
	}
}

/* Scratch of one layer's solve (solve_layer). */
typedef struct solve_ws {
	float *A, *C;        /* K x K */
	float *W, *S, *Z, *T, *D; /* rows x K */
	size_t *grp;         /* rows x K: each element's scale group */
	double *mq, *mf;     /* K */
	float *cs, *cz;      /* seq-mse: each group's candidate scales and zero points */
	size_t *choice;      /* seq-mse: each group's pick */
} solve_ws;

/*
 * Learns layer l's rounding (alg) from its moments l->mo, group by group, into e (up, or
 * scale and zp); *kept counts the rows that kept what they learned.
 */
static int learn_groups(learn *c, wl *l, int cent, int alg, solve_ws *w, oq_wlearned *e, size_t *kept)
{
	const oq_tensor *Wt = l->wv->init;
	size_t K = l->g.K, R = l->Mg, ncand = OQ_SEQMSE_CANDIDATES;
	float *X = NULL;
	int rc = OQ_OK;
	oq_adaround_opts ao;

	oq_adaround_defaults(&ao);
	*kept = 0;
	for (size_t gi = 0; gi < l->g.groups; gi++) {
		oq_wr_moments *mo = &l->mo[gi];
		oq_wr_problem p;
		size_t nk = 0;
		moments_to(mo, cent, w->A, w->C, w->mq, w->mf);
		for (size_t m = 0; m < R; m++)
			for (size_t k = 0; k < K; k++) {
				size_t i = elem(l, gi * R + m, k), gq = l->grid.group[i];
				float wv;
				memcpy(&wv, (const char *)Wt->data + i * 4, 4);
				w->W[m * K + k] = wv;
				w->S[m * K + k] = l->grid.scale[gq];
				w->Z[m * K + k] = (float)l->grid.zp[gq];
				w->grp[m * K + k] = gq;
			}
		/* T[m] = C w_m */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)R, (int)K, (int)K, 1.0f, w->W, (int)K, w->C,
			    (int)K, 0.0f, w->T, (int)K);
		p = (oq_wr_problem){K,    R, w->A, w->T, w->W, w->S, w->Z, (float)l->grid.qmin, (float)l->grid.qmax,
				    NULL, 0, 0,    NULL};
		/* few positions (fully connected layers): the solvers' products through the patches */
		free(X);
		X = NULL;
		if (mo->rq && mo->cap_rows && mo->n * 2 <= K && (X = malloc((mo->n + 1) * K * sizeof *X))) {
			float *mu = X + mo->n * K;
			for (size_t k = 0; k < K; k++)
				mu[k] = (float)w->mq[k];
			for (size_t i = 0; i < mo->n; i++)
				for (size_t k = 0; k < K; k++)
					X[i * K + k] = (float)((double)mo->rq[i * K + k] - w->mq[k]);
			p.X = X;
			p.N = (size_t)mo->n;
			p.alpha = (float)OQ_WR_SHRINK;
			p.mu = cent ? NULL : mu;
		}
		if (alg == OQ_WROUND_ADAROUND) {
			uint8_t *up = (uint8_t *)w->D; /* rows x K bytes of scratch */
			if ((rc = oq_adaround(&p, &ao, c->pool, up, NULL, NULL, &nk)))
				goto out;
			for (size_t m = 0; m < R; m++)
				for (size_t k = 0; k < K; k++)
					e->up[elem(l, gi * R + m, k)] = up[m * K + k];
		} else if (alg == OQ_WROUND_SEQMSE) {
			if ((rc = oq_seqmse(&p, w->grp, e->ngroups, ncand, w->cs, w->cz, c->pool, w->choice, NULL, NULL, &nk)))
				goto out;
			for (size_t m = 0; m < R; m++)
				for (size_t k = 0; k < K; k++) {
					size_t gq = w->grp[m * K + k];
					e->scale[gq] = w->cs[gq * ncand + w->choice[gq]];
					e->zp[gq] = (int64_t)w->cz[gq * ncand + w->choice[gq]];
				}
		}
		*kept += nk;
	}
out:
	free(X);
	return rc;
}

/* Learns layer l from its moments; appends its entry to out; fills l->wq and the bias correction. */
static int solve_layer(learn *c, wl *l, oq_wlearned_set *out, FILE *vlog)
{
	const oq_opts *o = c->o;
	const oq_tensor *Wt = l->wv->init;
	size_t K = l->g.K, R = l->Mg, nrk = R * K, ncand = OQ_SEQMSE_CANDIDATES, kept = 0;
	int cent = c->bias && l->bn, rc = OQ_ENOMEM, alg = o->weight_rounding, reverted = 0, bias_kept = 1;
	float *A = NULL, *C = NULL, *W = NULL, *S = NULL, *Z = NULL, *T = NULL, *Wq = NULL, *D = NULL, *zeros = NULL;
	float *cs = NULL, *cz = NULL, *wn = NULL;
	double *mq = NULL, *mf = NULL, *dyl = NULL, *dyh = NULL, sig = 0, e_near = 0, e_out = 0, dummy = 0;
	size_t *grp = NULL, *choice = NULL;
	oq_wlearned e;
	oq_wspec sp = l->spec;
	solve_ws w;

	memset(&e, 0, sizeof e);
	/* seq-mse needs every scale group inside one row: not per tensor */
	if (alg == OQ_WROUND_SEQMSE && l->spec.axis < 0)
		alg = OQ_WROUND_NEAREST;
	if (!(A = malloc(K * K * sizeof *A)) || !(C = malloc(K * K * sizeof *C)) || !(W = malloc(nrk * sizeof *W)) ||
	    !(S = malloc(nrk * sizeof *S)) || !(Z = malloc(nrk * sizeof *Z)) || !(T = malloc(nrk * sizeof *T)) ||
	    !(Wq = malloc(nrk * sizeof *Wq)) || !(D = malloc(nrk * sizeof *D)) || !(zeros = calloc(nrk, sizeof *zeros)) ||
	    !(grp = malloc(nrk * sizeof *grp)) || !(mq = malloc(K * sizeof *mq)) || !(mf = malloc(K * sizeof *mf)))
		goto fail;
	e.ngroups = l->grid.ngroups;
	e.nelem = Wt->nelem;
	if (!(e.name = oq_strdup(l->wv->name)) || !(e.scale = malloc(e.ngroups * sizeof *e.scale)) ||
	    !(e.zp = malloc(e.ngroups * sizeof *e.zp)) || (alg == OQ_WROUND_ADAROUND && !(e.up = malloc(e.nelem))))
		goto fail;
	memcpy(e.scale, l->grid.scale, e.ngroups * sizeof *e.scale);
	memcpy(e.zp, l->grid.zp, e.ngroups * sizeof *e.zp);
	if (alg == OQ_WROUND_SEQMSE) {
		if (!(cs = malloc(e.ngroups * ncand * sizeof *cs)) || !(cz = malloc(e.ngroups * ncand * sizeof *cz)) ||
		    !(choice = malloc(e.ngroups * sizeof *choice)))
			goto fail;
		for (size_t gq = 0; gq < e.ngroups; gq++)
			for (size_t k = 0; k < ncand; k++) {
				float f = 1.0f - (float)k / 100.0f, sc;
				int64_t z;
				cs[gq * ncand + k] = l->grid.scale[gq];
				cz[gq * ncand + k] = (float)l->grid.zp[gq];
				if (k && !oq_qparams((double)(l->grid.mn[gq] * f), (double)(l->grid.mx[gq] * f), sp.dtype,
						     l->grid.form, sp.reduce_range, &sc, &z)) {
					cs[gq * ncand + k] = sc;
					cz[gq * ncand + k] = (float)z;
				}
			}
	}
	w = (solve_ws){A, C, W, S, Z, T, D, grp, mq, mf, cs, cz, choice};
	if ((rc = learn_groups(c, l, cent, alg, &w, &e, &kept)))
		goto fail;
	/* the weight as it will be quantized: the spec with the result applied */
	if (alg != OQ_WROUND_NEAREST) {
		sp.fixed_scale = e.scale;
		sp.fixed_zp = e.zp;
		sp.n_fixed = e.ngroups;
		sp.round_up = e.up;
		sp.n_round_up = e.up ? e.nelem : 0;
	}
	if (!(l->wq = malloc(Wt->nelem * sizeof *l->wq)) || !(wn = malloc(Wt->nelem * sizeof *wn)))
		goto fail;
	if ((rc = oq_weight_fake_quantize(Wt, &sp, l->wq, c->d)) || (rc = oq_weight_fake_quantize(Wt, &l->spec, wn, c->d)))
		goto out;
	/* the guard: the learned rounding stays only if it lowers the layer's loss on the held-out samples */
	if (alg != OQ_WROUND_NEAREST && l->ho) {
		double h_near = 0, h_out = 0;
		for (size_t gi = 0; gi < l->g.groups; gi++) {
			h_near += held_loss(l, gi, cent, wn, A, C, W, Wq, T, mq, mf);
			h_out += held_loss(l, gi, cent, l->wq, A, C, W, Wq, T, mq, mf);
		}
		if (!(h_out < h_near)) {
			memcpy(l->wq, wn, Wt->nelem * sizeof *wn);
			alg = OQ_WROUND_NEAREST;
			kept = 0;
			reverted = 1;
		}
	}
	/*
	 * Weight-only bias correction: each channel's mean error on the learning samples; kept for
	 * the layer only if it brings the held-out samples' mean errors closer to 0 (summed squares),
	 * then measured on all samples.
	 */
	if (cent && l->ho) {
		double before = 0, after = 0;
		if (!(dyl = malloc(R * sizeof *dyl)) || !(dyh = malloc(R * sizeof *dyh)))
			goto fail;
		for (size_t gi = 0; gi < l->g.groups; gi++) {
			moments_to(&l->mo[gi], cent, A, C, mq, mf);
			mean_error(l, gi, l->wq, mq, mf, dyl);
			moments_to(&l->ho[gi], cent, A, C, mq, mf);
			mean_error(l, gi, l->wq, mq, mf, dyh);
			for (size_t m = 0; m < R; m++) {
				before += dyh[m] * dyh[m];
				after += (dyh[m] - dyl[m]) * (dyh[m] - dyl[m]);
			}
		}
		bias_kept = after < before;
	}
	/* from here on: all samples; a rounding the held-out samples confirmed is learned again on all */
	for (size_t gi = 0; gi < l->g.groups && l->ho; gi++)
		oq_wr_moments_add(&l->mo[gi], &l->ho[gi]);
	if (l->ho && alg != OQ_WROUND_NEAREST) {
		if ((rc = learn_groups(c, l, cent, alg, &w, &e, &kept)))
			goto fail;
		if ((rc = oq_weight_fake_quantize(Wt, &sp, l->wq, c->d)))
			goto out;
	}
	if (cent && bias_kept) {
		if (!dyl && !(dyl = malloc(R * sizeof *dyl)))
			goto fail;
		for (size_t gi = 0; gi < l->g.groups; gi++) {
			moments_to(&l->mo[gi], cent, A, C, mq, mf);
			mean_error(l, gi, l->wq, mq, mf, dyl);
			for (size_t m = 0; m < R; m++)
				l->db[gi * R + m] += dyl[m] * (double)l->alpha / (double)l->bscale;
		}
	}
	/* the per-layer report */
	for (size_t gi = 0; gi < l->g.groups && vlog; gi++) {
		oq_wr_problem p = {K, R, A, zeros, W, NULL, NULL, 0, 0, NULL, 0, 0, NULL};
		moments_to(&l->mo[gi], cent, A, C, mq, mf);
		for (size_t m = 0; m < R; m++)
			for (size_t k = 0; k < K; k++) {
				size_t i = elem(l, gi * R + m, k);
				W[m * K + k] = wat(l, Wt, gi, m, k);
				Wq[m * K + k] = l->wq[i];
				T[m * K + k] = wn[i];
			}
		rounding_error(&p, T, D, zeros, &sig, &e_near);
		rounding_error(&p, Wq, D, zeros, &dummy, &e_out);
	}
	if (vlog)
		fprintf(vlog, "weight rounding: node '%s' (%s): %zu x %zu weights%s: layer SQNR of the rounding %.2f -> "
			"%.2f dB; %zu of %zu channels learned%s%s\n", l->node->name, l->node->op_type, l->M, K,
			l->g.groups > 1 ? " (grouped)" : "", db(sig, e_near), db(sig, e_out), kept, l->M,
			reverted ? "; nearest kept (worse on the held-out samples)" : "",
			!cent ? "" : bias_kept ? "; bias corrected" : "; bias kept (no gain on the held-out samples)");
	if (alg != OQ_WROUND_NEAREST) {
		if (out->n % 16 == 0) {
			oq_wlearned *v = realloc(out->v, (out->n + 16) * sizeof *v);
			if (!v)
				goto fail;
			out->v = v;
		}
		e.spec = l->spec;
		out->v[out->n++] = e;
		memset(&e, 0, sizeof e);
	}
	rc = OQ_OK;
	goto out;
fail:
	rc = oq_err(c->d, OQ_ENOMEM, "weight rounding: node '%s' (%s): out of memory", l->node->name,
		    l->node->op_type);
out:
	free(e.name);
	free(e.scale);
	free(e.zp);
	free(e.up);
	free(A);
	free(C);
	free(W);
	free(S);
	free(Z);
	free(T);
	free(Wq);
	free(D);
	free(zeros);
	free(grp);
	free(mq);
	free(mf);
	free(cs);
	free(cz);
	free(choice);
	free(wn);
	free(dyl);
	free(dyh);
	return rc;
}

/* The copy after l was learned: its weight as quantized, and its corrected bias. */
static int update_copy(learn *c, const wl *l)
{
	int rc = qm_set(c->qm, l->wv->name, l->wq);
	if (!rc && l->bn) {
		const oq_tensor *B = oq_value_const(c->m->graph, l->bn->inputs[l->bi]);
		float *b = oq_tensor_to_floats(B);
		if (!b)
			return OQ_ENOMEM;
		for (size_t i = 0; i < l->M; i++)
			b[i] = (float)((double)b[i] + l->db[i]);
		rc = qm_set(c->qm, l->bn->inputs[l->bi]->name, b);
		free(b);
	}
	return rc;
}

/* ------------------------------------------------------------ the driver */

/* 1 when no layer of l's stage (but l) is upstream of l's input in m. */
static int is_frontier(const learn *c, const wl *l, uint8_t *seen, oq_node **stack)
{
	const oq_graph *g = c->m->graph;
	size_t top = 0;
	int front = 1;

	memset(seen, 0, g->n_nodes);
	/* every node is pushed at most once (marked when pushed) */
#define PUSH(u)                                                                                                        \
	do {                                                                                                           \
		oq_node *u_ = (u);                                                                                     \
		if (u_ && u_->graph == g && u_->index < g->n_nodes && g->nodes[u_->index] == u_ && !seen[u_->index]) { \
			seen[u_->index] = 1;                                                                           \
			stack[top++] = u_;                                                                             \
		}                                                                                                      \
	} while (0)
	PUSH(l->x->producer);
	while (top && front) {
		oq_node *u = stack[--top];
		for (size_t i = 0; i < c->nl; i++)
			if (c->L[i].node == u && c->L[i].stage == l->stage)
				front = 0;
		for (size_t k = 0; k < u->n_inputs; k++)
			if (u->inputs[k])
				PUSH(u->inputs[k]->producer);
	}
#undef PUSH
	return front;
}

/* Moment bytes of layer l in a paired stage: the learning and the held-out sets. */
static size_t layer_bytes(const wl *l)
{
	return 2 * l->g.groups * (2 * l->g.K * l->g.K + 2 * l->g.K) * sizeof(double);
}

/* Is sample i of n held out (see the top of the file)? None of a single sample: no guard then. */
static int held_out(size_t i, size_t n)
{
	return n >= OQ_WR_HOLD ? i % OQ_WR_HOLD == OQ_WR_HOLD - 1 : n >= 2 && i == n - 1;
}

/* Runs the samples for stage s (ef: float model, eq: quantized copy or NULL at stage 0). */
static int run_stage(learn *c, oq_exec *ef, oq_exec *eq, const oq_samples *smp, size_t n, oq_diag *d)
{
	size_t nin = oq_exec_n_inputs(ef), nout = oq_exec_n_outputs(ef);
	oq_rt *in = oq_calloc(nin + 1, sizeof *in), *outs = oq_calloc(nout + 1, sizeof *outs);
	int rc = OQ_OK;

	if (!in || !outs) {
		rc = oq_err(d, OQ_ENOMEM, "%s: out of memory", c->what);
		goto out;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		if ((rc = oq_sample_load(smp, i, ef, in, d)))
			break;
		c->held = c->guard && held_out(i, n);
		/* layers reading a graph input: x~ = x */
		for (size_t k = 0; k < c->nl && !rc; k++)
			if (c->L[k].stage == c->stage && c->L[k].gin >= 0 && (rc = oq_wr_accumulate(
				&c->L[k].g, &in[c->L[k].gin], NULL, c->held ? c->L[k].ho : c->L[k].mo, c->pool)))
				rc = oq_err(d, rc, "%s: node '%s': graph input does not fit its weight", c->what,
					    c->L[k].node->name);
		c->mode = eq ? M_STORE : M_SELF;
		if (!rc)
			rc = oq_exec_run(ef, in, nin, outs, nout, d);
		for (size_t k = 0; k < nout; k++)
			oq_rt_release(&outs[k]);
		if (!rc && eq) {
			c->mode = M_PAIR;
			rc = oq_exec_run(eq, in, nin, outs, nout, d);
			for (size_t k = 0; k < nout; k++)
				oq_rt_release(&outs[k]);
		}
		for (size_t k = 0; k < c->nl; k++)
			oq_rt_release(&c->L[k].keep);
		for (size_t k = 0; k < nin; k++)
			oq_rt_release(&in[k]);
	}
out:
	free(in);
	free(outs);
	return rc;
}

static void free_layers(learn *c)
{
	for (size_t i = 0; i < c->nl; i++) {
		wl *l = &c->L[i];
		for (size_t gi = 0; l->mo && gi < l->g.groups; gi++)
			oq_wr_moments_free(&l->mo[gi]);
		for (size_t gi = 0; l->ho && gi < l->g.groups; gi++)
			oq_wr_moments_free(&l->ho[gi]);
		free(l->mo);
		free(l->ho);
		oq_wgrid_free(&l->grid);
		oq_rt_release(&l->keep);
		free(l->db);
		free(l->wq);
	}
	free(c->L);
}

/* The layers of m's plans (in plan order) and what their input is. */
static int find_layers(learn *c, oq_exec *ef, FILE *vlog, size_t *n_skipped, oq_diag *d)
{
	oq_graph *g = c->m->graph;
	oq_wplan *plans = NULL;
	size_t np = 0;
	int rc;

	*n_skipped = 0;
	rc = c->o->weight_only ? oq_weight_only_plans(g, c->o, &plans, &np, d)
			       : oq_quantize_weight_plans(g, c->o, &plans, &np, d);
	if (rc)
		return rc;
	if (!(c->L = oq_calloc(np + 1, sizeof *c->L))) {
		free(plans);
		return oq_err(d, OQ_ENOMEM, "%s: out of memory", c->what);
	}
	for (size_t i = 0; i < np; i++) {
		wl *l = &c->L[c->nl];
		oq_diag d2;
		memset(l, 0, sizeof *l);
		l->node = plans[i].node;
		l->spec = plans[i].spec;
		l->wv = l->node->inputs[plans[i].w_idx];
		l->x = l->node->inputs[0];
		l->alpha = 1;
		l->gin = -1;
		oq_diag_init(&d2);
		if (plans[i].w_idx != 1 || !l->x || l->x->init || !l->wv || !l->wv->init || oq_value_only_user(l->wv) != l->node ||
		    !geometry(l) || oq_weight_grid(l->wv->init, &l->spec, &l->grid, &d2)) {
			if (vlog)
				fprintf(vlog, "%s: node '%s' (%s): %s (%s)\n", c->what, l->node->name, l->node->op_type,
					c->awq ? "not scaled" : "rounds to nearest",
					d2.count ? d2.msg : "a layer kind or weight it does not learn");
			oq_wgrid_free(&l->grid);
			(*n_skipped)++;
			continue;
		}
		for (size_t k = 0; k < oq_exec_n_inputs(ef); k++)
			if (oq_exec_input(ef, k) == l->x)
				l->gin = (int)k;
		if (l->x->flags & OQ_V_INPUT && l->gin < 0) {
			oq_wgrid_free(&l->grid);
			(*n_skipped)++;
			continue;
		}
		c->nl++;
	}
	free(plans);
	return OQ_OK;
}

int oq_wround_learn(oq_model *m, const oq_opts *o, const oq_calib_opts *co, int bias, oq_wlearned_set *out,
		    FILE *log, oq_diag *d)
{
	return oq_wround_learn_shifts(m, o, co, bias, out, NULL, log, d);
}

/* Appends layer l's correction, as the output shift it absorbs, to *s (contract in rounding.h). */
static int give_shift(const wl *l, oq_biascorr_shifts *s)
{
	oq_biascorr_shift *e;
	size_t m;

	for (m = 0; m < l->M && l->db[m] == 0; m++)
		;
	if (m == l->M || !l->node->n_outputs || !l->node->outputs[0])
		return OQ_OK;
	if (s->n % 16 == 0) {
		oq_biascorr_shift *v = realloc(s->v, (s->n + 16) * sizeof *v);
		if (!v)
			return OQ_ENOMEM;
		s->v = v;
	}
	e = &s->v[s->n];
	e->M = l->M;
	e->layer = oq_strdup(l->node->outputs[0]->name);
	e->shift = malloc(l->M * sizeof *e->shift);
	if (!e->layer || !e->shift) {
		free(e->layer);
		free(e->shift);
		return OQ_ENOMEM;
	}
	/* the bias enters the output times bscale, and moved by db to cancel the shift */
	for (m = 0; m < l->M; m++)
		e->shift[m] = -l->db[m] * (double)l->bscale;
	s->n++;
	return OQ_OK;
}

int oq_wround_learn_shifts(oq_model *m, const oq_opts *o, const oq_calib_opts *co, int bias,
			   oq_wlearned_set *out, oq_biascorr_shifts *shifts, FILE *log, oq_diag *d)
{
	static const char *const names[] = {"nearest", "adaround", "seq-mse"};
	learn c;
	oq_exec *ef = NULL, *eq = NULL;
	oq_exec_opts eo = {.threads = co->threads};
	oq_samples smp = {0};
	size_t n, n_skipped = 0, nst = 0, per, cnt = 0, bytes = 0;
	FILE *vlog = o->log;
	double t0 = now();
	int rc;

	memset(out, 0, sizeof *out);
	if (shifts)
		memset(shifts, 0, sizeof *shifts);
	memset(&c, 0, sizeof c);
	c.what = "weight rounding";
	c.m = m;
	c.o = o;
	c.bias = bias;
	c.d = d;
	if (!co->source || !strncmp(co->source, "random:", 7))
		return oq_err(d, OQ_EUSAGE, "weight rounding: --weight-rounding %s%s learns on calibration samples: "
			      "give --calib DIR (a folder of samples)", names[o->weight_rounding % 3],
			      bias ? " / weight-only --bias-correction" : "");
	if ((rc = oq_exec_new(m, &eo, &ef, d)))
		goto out;
	if ((rc = find_layers(&c, ef, vlog, &n_skipped, d)))
		goto out;
	/* a plan indexes the graph's values: gone before the bias targets add any */
	oq_exec_free(ef);
	ef = NULL;
	/* stages: about equal counts, moments within the budget */
	per = (c.nl + OQ_WR_STAGES - 1) / OQ_WR_STAGES;
	for (size_t i = 0; i < c.nl; i++) {
		size_t b = layer_bytes(&c.L[i]);
		if (cnt && (cnt >= per || bytes + b > OQ_WR_STAGE_BYTES)) {
			nst++;
			cnt = bytes = 0;
		}
		c.L[i].stage = (int)nst;
		cnt++;
		bytes += b;
	}
	nst += c.nl > 0;
	{
		uint8_t *seen = oq_calloc(m->graph->n_nodes + 1, 1);
		oq_node **stack = oq_calloc(m->graph->n_nodes + 1, sizeof *stack);
		if (!seen || !stack)
			rc = oq_err(d, OQ_ENOMEM, "weight rounding: out of memory");
		for (size_t i = 0; i < c.nl && !rc; i++)
			c.L[i].frontier = is_frontier(&c, &c.L[i], seen, stack);
		free(seen);
		free(stack);
		if (rc)
			goto out;
	}
	if (bias)
		for (size_t i = 0; i < c.nl && !rc; i++) {
			if ((rc = bias_target(m->graph, &c.L[i], 0)) || (rc = oq_graph_rebuild_uses(m->graph)))
				rc = oq_err(d, rc, "weight rounding: out of memory");
			else if (c.L[i].bn && !(c.L[i].db = oq_calloc(c.L[i].M, sizeof *c.L[i].db)))
				rc = oq_err(d, OQ_ENOMEM, "weight rounding: out of memory");
		}
	if (rc)
		goto out;
	/* the float executor, zero biases included */
	if ((rc = oq_exec_new(m, &eo, &ef, d)))
		goto out;
	c.pool = oq_exec_pool(ef);
	oq_exec_set_observer(ef, observe, &c);
	oq_exec_set_observe_want(ef, want);
	if ((rc = oq_samples_scan(co->source, ef, &smp, d)) || (rc = oq_samples_check(&smp, ef, d)))
		goto out;
	n = co->limit && co->limit < smp.n ? co->limit : smp.n;
	c.guard = n >= 2;
	if (nst > 1) {
		if ((rc = copy_model(m, &c.qm, d)))
			goto out;
		for (size_t i = 0; i < c.nl; i++) {
			oq_value *v = oq_graph_find(c.qm->graph, c.L[i].x->name);
			c.L[i].xq = v;
		}
		/* planned weights that are not learned: at nearest rounding in the copy from the start */
		{
			oq_wplan *plans = NULL;
			size_t np = 0;
			rc = o->weight_only ? oq_weight_only_plans(m->graph, o, &plans, &np, d)
					    : oq_quantize_weight_plans(m->graph, o, &plans, &np, d);
			for (size_t i = 0; i < np && !rc; i++) {
				const oq_value *wv = plans[i].node->inputs[plans[i].w_idx];
				int learned = 0;
				float *f;
				oq_diag d2;
				for (size_t k = 0; k < c.nl; k++)
					learned |= c.L[k].wv == wv;
				if (learned || !wv || !wv->init)
					continue;
				if (!(f = malloc(wv->init->nelem * sizeof *f) )) {
					rc = oq_err(d, OQ_ENOMEM, "weight rounding: out of memory");
					break;
				}
				oq_diag_init(&d2);
				if (!oq_weight_fake_quantize(wv->init, &plans[i].spec, f, &d2))
					rc = qm_set(c.qm, wv->name, f);
				free(f);
				if (rc)
					rc = oq_err(d, rc, "weight rounding: out of memory");
			}
			free(plans);
			if (rc)
				goto out;
		}
	}
	for (size_t s = 0; s < nst; s++) {
		double ts = now();
		size_t nls = 0;
		c.stage = (int)s;
		for (size_t i = 0; i < c.nl; i++) {
			wl *l = &c.L[i];
			if (l->stage != (int)s)
				continue;
			nls++;
			if (!(l->mo = oq_calloc(l->g.groups, sizeof *l->mo)) ||
			    (c.guard && !(l->ho = oq_calloc(l->g.groups, sizeof *l->ho)))) {
				rc = oq_err(d, OQ_ENOMEM, "weight rounding: out of memory");
				goto out;
			}
			for (size_t gi = 0; gi < l->g.groups; gi++)
				if ((rc = oq_wr_moments_init(&l->mo[gi], l->g.K, s > 0 && l->gin < 0 && l->frontier)) ||
				    (l->ho && (rc = oq_wr_moments_init(&l->ho[gi], l->g.K,
								       s > 0 && l->gin < 0 && l->frontier)))) {
					rc = oq_err(d, rc, "weight rounding: node '%s': out of memory for its input moments",
						    l->node->name);
					goto out;
				}
		}
		if (s > 0) {
			if ((rc = oq_exec_new(c.qm, &eo, &eq, d)))
				goto out;
			oq_exec_set_observer(eq, observe, &c);
			oq_exec_set_observe_want(eq, want);
		}
		if ((rc = run_stage(&c, ef, eq, &smp, n, d)))
			goto out;
		oq_exec_free(eq);
		eq = NULL;
		for (size_t i = 0; i < c.nl && !rc; i++) {
			wl *l = &c.L[i];
			if (l->stage != (int)s)
				continue;
			if ((rc = solve_layer(&c, l, out, vlog)))
				goto out;
			for (size_t gi = 0; gi < l->g.groups; gi++) {
				oq_wr_moments_free(&l->mo[gi]);
				if (l->ho)
					oq_wr_moments_free(&l->ho[gi]);
			}
			free(l->mo);
			free(l->ho);
			l->mo = l->ho = NULL;
			if (c.qm && (rc = update_copy(&c, l))) {
				rc = oq_err(d, rc, "weight rounding: out of memory");
				goto out;
			}
		}
		if (log)
			fprintf(log, "weight rounding: stage %zu/%zu: %zu layers, %zu samples%s, %.1f s\n", s + 1, nst, nls,
				n, s ? " (float and quantized-so-far models)" : "", now() - ts);
	}
	/* weight-only bias correction: into m for good */
	for (size_t i = 0; i < c.nl && bias && !rc; i++) {
		wl *l = &c.L[i];
		const oq_tensor *B;
		float *b;
		char base[256];
		if (!l->bn)
			continue;
		B = oq_value_const(m->graph, l->bn->inputs[l->bi]);
		if (!(b = oq_tensor_to_floats(B))) {
			rc = oq_err(d, OQ_ENOMEM, "weight rounding: out of memory");
			break;
		}
		if (shifts && (rc = give_shift(l, shifts))) {
			free(b);
			rc = oq_err(d, rc, "weight rounding: out of memory");
			break;
		}
		for (size_t k = 0; k < l->M; k++)
			b[k] = (float)((double)b[k] + l->db[k]);
		snprintf(base, sizeof base, "%.200s_corrected", l->bn->inputs[l->bi]->name);
		rc = oq_pass_set_const(m->graph, l->bn, l->bi, base, B->rank, B->dims, b);
		free(b);
		if (rc)
			rc = oq_err(d, rc, "weight rounding: out of memory");
	}
	if (log)
		fprintf(log, "weight rounding: %s on %zu layers (%zu round to nearest)%s, %zu stages, %.1f s\n",
			names[o->weight_rounding % 3], c.nl, n_skipped, bias ? " with bias correction" : "", nst,
			now() - t0);
out:
	oq_exec_free(eq);
	oq_exec_free(ef);
	oq_samples_free(&smp);
	free_layers(&c);
	oq_model_free(c.qm);
	if (rc) {
		oq_wlearned_free(out);
		oq_biascorr_shifts_free(shifts);
	}
	return rc;
}

/* ------------------------------------------------------------ --awq (awq.h) */

/* A = E[x x^T] of moments mo as floats, centred (the covariance) with cent; not shrunk. */
static void second_moments(const oq_wr_moments *mo, int cent, float *A)
{
	size_t K = mo->K;
	double n = mo->n ? (double)mo->n : 1;
	for (size_t a = 0; a < K; a++)
		for (size_t b = 0; b < K; b++)
			A[a * K + b] = (float)(mo->qq[a * K + b] / n - (cent ? (mo->sq[a] / n) * (mo->sq[b] / n) : 0));
}

/* m[c] = mean |x| of input channel c (per patch elements each) from moments mo. */
static void magnitudes(const oq_wr_moments *mo, size_t per, double *m)
{
	double n = mo->n ? (double)mo->n : 1;
	for (size_t c = 0; c < mo->K / per; c++) {
		double a = 0;
		for (size_t k = c * per; k < (c + 1) * per; k++)
			a += mo->sa[k];
		m[c] = a / (n * (double)per);
	}
}

static double awq_db(double l0, double l)
{
	return l > 0 && l0 > 0 ? 10 * log10(l / l0) : 0;
}

/*
 * Layer l's scales s[C] (all 1: none) and *a (alpha * OQ_AWQ_GRID, 0: none): the search on the
 * learning samples, the held-out guard, the search again on all samples (awq.h); on centred
 * moments with cent. *rejected: the guard sent the layer back to s = 1.
 */
static int awq_layer(learn *c, wl *l, size_t C, int cent, float *s, int *a, int *rejected, FILE *vlog)
{
	size_t K = l->g.K, KK;
	oq_awq_layer Ly = {l->wv->init, &l->spec, l->M, K, l->cols, K / C};
	oq_awq_fit fit;
	double h0 = 0, h1 = 0, *m = NULL;
	float *A = NULL;
	int rc;

	*a = *rejected = 0;
	if (!oq_mul_size(K, K, &KK) || KK > SIZE_MAX / sizeof *A || !(A = oq_malloc(KK * sizeof *A)) ||
	    !(m = oq_malloc(C * sizeof *m))) {
		rc = oq_err(c->d, OQ_ENOMEM, "awq: node '%s': out of memory", l->node->name);
		goto out;
	}
	second_moments(&l->mo[0], cent, A);
	magnitudes(&l->mo[0], Ly.per, m);
	if ((rc = oq_awq_search(&Ly, A, m, &fit, s, c->d)))
		goto out;
	if (fit.a && l->ho) {
		second_moments(&l->ho[0], cent, A);
		if ((rc = oq_awq_loss(&Ly, A, NULL, &h0, c->d)) || (rc = oq_awq_loss(&Ly, A, s, &h1, c->d)))
			goto out;
		if (!(h1 < h0)) {
			*rejected = 1;
			for (size_t k = 0; k < C; k++)
				s[k] = 1;
		}
	}
	/* a layer the held-out samples confirmed searches again on every sample */
	if (fit.a && l->ho && !*rejected) {
		oq_wr_moments_add(&l->mo[0], &l->ho[0]);
		second_moments(&l->mo[0], cent, A);
		magnitudes(&l->mo[0], Ly.per, m);
		if ((rc = oq_awq_search(&Ly, A, m, &fit, s, c->d)))
			goto out;
	}
	*a = *rejected ? 0 : fit.a;
	if (vlog && *rejected)
		fprintf(vlog, "awq: node '%s' (%s): %zu channels: not scaled (alpha %.2f: layer output error %+.2f dB, "
			"%+.2f dB on the held-out samples)\n", l->node->name, l->node->op_type, C,
			(double)fit.a / OQ_AWQ_GRID, awq_db(fit.loss0, fit.loss), awq_db(h0, h1));
	else if (vlog && *a)
		fprintf(vlog, "awq: node '%s' (%s): %zu channels: alpha %.2f: layer output error %+.2f dB%s\n",
			l->node->name, l->node->op_type, C, (double)*a / OQ_AWQ_GRID, awq_db(fit.loss0, fit.loss),
			l->ho ? " (held-out samples agree)" : "");
	else if (vlog)
		fprintf(vlog, "awq: node '%s' (%s): %zu channels: not scaled (no alpha lowers the layer's error)\n",
			l->node->name, l->node->op_type, C);
	rc = OQ_OK;
out:
	free(A);
	free(m);
	return rc;
}

int oq_awq_learn(oq_model *m, const oq_opts *o, const oq_calib_opts *co, int bias, size_t *n_scaled, FILE *log,
		 oq_diag *d)
{
	learn c;
	oq_exec *ef = NULL;
	oq_exec_opts eo = {.threads = co->threads};
	oq_samples smp = {0};
	oq_wplan *plans = NULL;
	oq_awq_path *paths = NULL;
	float **S = NULL;
	int *alpha = NULL;
	size_t n, np = 0, n_skipped = 0, nst = 0, bytes = 0, scaled = 0, n_rejected = 0, n_path = 0;
	FILE *vlog = o->log;
	double t0 = now();
	int rc, lo = OQ_AWQ_GRID + 1, hi = 0;

	if (n_scaled)
		*n_scaled = 0;
	memset(&c, 0, sizeof c);
	c.what = "awq";
	c.awq = 1;
	c.m = m;
	c.o = o;
	c.d = d;
	if (!o->weight_only)
		return oq_err(d, OQ_EUSAGE, "awq: --awq is for --weight-only (scaled input channels would change the "
			      "activation ranges W8A8 calibrates)");
	if (!co->source || !strncmp(co->source, "random:", 7))
		return oq_err(d, OQ_EUSAGE, "awq: --awq measures each layer on calibration samples: give --calib DIR "
			      "(a folder of samples)");
	if ((rc = oq_exec_new(m, &eo, &ef, d)) || (rc = find_layers(&c, ef, vlog, &n_skipped, d)) ||
	    (rc = oq_weight_only_plans(m->graph, o, &plans, &np, d)))
		goto out;
	/* the layers a path can absorb the scales of; the others leave the list */
	if (!(paths = oq_calloc(c.nl + 1, sizeof *paths))) {
		rc = oq_err(d, OQ_ENOMEM, "awq: out of memory");
		goto out;
	}
	{
		size_t k = 0;
		for (size_t i = 0; i < c.nl; i++) {
			wl *l = &c.L[i];
			if (l->g.kind != OQ_WR_CONV && l->g.kind != OQ_WR_ROWS)
				snprintf(paths[k].why, sizeof paths[k].why, "Gemm with transA");
			else if (l->spec.n_fixed)
				snprintf(paths[k].why, sizeof paths[k].why, "its grid is fixed (imported encodings)");
			else if (oq_awq_path_of(m->graph, l->node, plans, np, &paths[k]) && paths[k].C &&
				 l->g.K % paths[k].C == 0 && l->g.groups == 1) {
				if (k != i) {
					c.L[k] = *l;
					memset(l, 0, sizeof *l);
				}
				k++;
				continue;
			}
			if (vlog)
				fprintf(vlog, "awq: node '%s' (%s): not scaled (%s)\n", l->node->name, l->node->op_type,
					paths[k].why[0] ? paths[k].why : "no path");
			n_path++;
			oq_wgrid_free(&l->grid);
			memset(l, 0, sizeof *l);
		}
		c.nl = k;
	}
	if (!(S = oq_calloc(c.nl + 1, sizeof *S)) || !(alpha = oq_calloc(c.nl + 1, sizeof *alpha))) {
		rc = oq_err(d, OQ_ENOMEM, "awq: out of memory");
		goto out;
	}
	/* stages: the memory budget alone (every input is the float model's) */
	for (size_t i = 0; i < c.nl; i++) {
		size_t b = layer_bytes(&c.L[i]);
		if (bytes && bytes + b > OQ_WR_STAGE_BYTES) {
			nst++;
			bytes = 0;
		}
		c.L[i].stage = (int)nst;
		bytes += b;
	}
	nst += c.nl > 0;
	c.pool = oq_exec_pool(ef);
	oq_exec_set_observer(ef, observe, &c);
	oq_exec_set_observe_want(ef, want);
	if (c.nl && ((rc = oq_samples_scan(co->source, ef, &smp, d)) || (rc = oq_samples_check(&smp, ef, d))))
		goto out;
	n = co->limit && co->limit < smp.n ? co->limit : smp.n;
	c.guard = n >= 2;
	for (size_t s = 0; s < nst; s++) {
		c.stage = (int)s;
		for (size_t i = 0; i < c.nl; i++) {
			wl *l = &c.L[i];
			if (l->stage != (int)s)
				continue;
			if (!(l->mo = oq_calloc(1, sizeof *l->mo)) || (c.guard && !(l->ho = oq_calloc(1, sizeof *l->ho))) ||
			    oq_wr_moments_init(&l->mo[0], l->g.K, 0) || (l->ho && oq_wr_moments_init(&l->ho[0], l->g.K, 0))) {
				rc = oq_err(d, OQ_ENOMEM, "awq: node '%s': out of memory for its input moments",
					    l->node->name);
				goto out;
			}
		}
		if ((rc = run_stage(&c, ef, NULL, &smp, n, d)))
			goto out;
		for (size_t i = 0; i < c.nl; i++) {
			wl *l = &c.L[i];
			int rej, cent = 0;
			if (l->stage != (int)s)
				continue;
			/* the bias correction that follows takes the mean error: the rest is what counts */
			if (bias) {
				if ((rc = bias_target(m->graph, l, 1)))
					goto out;
				cent = l->bn != NULL;
				l->bn = NULL;
			}
			if (!(S[i] = oq_malloc(paths[i].C * sizeof *S[i]))) {
				rc = oq_err(d, OQ_ENOMEM, "awq: out of memory");
				goto out;
			}
			if ((rc = awq_layer(&c, l, paths[i].C, cent, S[i], &alpha[i], &rej, vlog)))
				goto out;
			n_rejected += (size_t)rej;
			oq_wr_moments_free(&l->mo[0]);
			if (l->ho)
				oq_wr_moments_free(&l->ho[0]);
			free(l->mo);
			free(l->ho);
			l->mo = l->ho = NULL;
		}
	}
	/* the executor reads m's tensors: gone before they change */
	oq_exec_free(ef);
	ef = NULL;
	for (size_t i = 0; i < c.nl && !rc; i++)
		if (alpha[i]) {
			rc = oq_awq_apply(m->graph, c.L[i].node, &paths[i], S[i], d);
			scaled++;
			lo = alpha[i] < lo ? alpha[i] : lo;
			hi = alpha[i] > hi ? alpha[i] : hi;
		}
	if (rc)
		goto out;
	if (n_scaled)
		*n_scaled = scaled;
	if (log) {
		fprintf(log, "awq: %zu of %zu layers scaled", scaled, c.nl + n_path + n_skipped);
		if (scaled)
			fprintf(log, " (alpha %.2f-%.2f)", (double)lo / OQ_AWQ_GRID, (double)hi / OQ_AWQ_GRID);
		fprintf(log, "; %zu with no exact path for the scales, %zu refused by the held-out samples, %zu "
			"no better scaled; %.1f s\n", n_path + n_skipped, n_rejected, c.nl - scaled - n_rejected,
			now() - t0);
	}
out:
	oq_exec_free(ef);
	oq_samples_free(&smp);
	for (size_t i = 0; S && i < c.nl; i++)
		free(S[i]);
	free(S);
	free(alpha);
	free(paths);
	free(plans);
	free_layers(&c);
	return rc;
}
