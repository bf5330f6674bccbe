/*
 * gemm.c - batched, tiled, parallel GEMM over OpenBLAS (float32 and
 * double) and its direct-loop reference.
 *
 * On an AVX-512 CPU a float32 product with A as stored, alpha 1 and beta 0
 * or 1 (MatMul, Gemm without alpha / transA) runs gemm_packed.c's kernel
 * instead, B packed per call: the bits then do not depend on the CPU model
 * OpenBLAS detects (it may pick an older core's kernels, which sum in
 * another order) and equal those of the same product with B constant and
 * packed once by the plan. Otherwise:
 *
 * The output of every batch item is cut into tiles of rows x columns whose
 * sizes depend only on (m, n, k, batch): enough tiles (>= 8) for two or more
 * threads to balance, none smaller than 32 rows / 64 columns, and no split
 * at all for small problems where waking threads costs more than it saves.
 * Each tile is one cblas_?gemm call, so a tile's arithmetic never depends on
 * which thread runs it or how many there are.
 */
#include "calib/kernels/linalg/linalg.h"

#include <cblas.h>
#include <pthread.h>
#include <strings.h>

int oq_linalg_use_ref;

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_one_thread(void)
{
	openblas_set_num_threads(1);
}

void oq_linalg_blas_init(void)
{
	pthread_once(&blas_once, blas_one_thread);
}

const char *oq_linalg_blas_core_wanted(void)
{
#if defined(__GNUC__) && defined(__x86_64__)
	static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
	const char *core = openblas_get_corename();

	__builtin_cpu_init();
	if (!core || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
	    !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq") ||
	    !__builtin_cpu_supports("avx512cd"))
		return NULL;
	for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
		if (!strcasecmp(core, avx512[i]))
			return NULL;
	return "SkylakeX";
#else
	return NULL;
#endif
}

static int64_t ceil_div(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

static int64_t round16(int64_t v)
{
	return (v + 15) / 16 * 16;
}

/* Tile sizes for a batch of m x n x kd products (see the file comment). */
static void tiles(int64_t m, int64_t n, int64_t kd, size_t batch, int64_t *mt, int64_t *nt)
{
	double flops = 2.0 * (double)m * (double)n * (double)kd * (double)batch;

	*mt = m > 0 ? m : 1;
	*nt = n > 0 ? n : 1;
	if (flops < 4e6)
		return;
	while ((double)batch * (double)ceil_div(m, *mt) * (double)ceil_div(n, *nt) < 8) {
		if (*nt >= 128 && (*nt >= *mt || *mt < 64))
			*nt = round16(ceil_div(*nt, 2));
		else if (*mt >= 64)
			*mt = round16(ceil_div(*mt, 2));
		else
			break;
	}
}

typedef struct gemm_job {
	const oq_gemm_batch *p;
	int64_t mt, nt;    /* tile rows / columns */
	int64_t tm, tn;    /* tiles per item along m / n */
} gemm_job;

static void gemm_range(void *ctx, size_t begin, size_t end)
{
	const gemm_job *j = ctx;
	const oq_gemm_batch *p = j->p;
	size_t es = p->t == OQ_LT_F32 ? 4 : 8;

	for (size_t t = begin; t < end; t++) {
		size_t item = t / (size_t)(j->tm * j->tn);
		int64_t r = (int64_t)(t % (size_t)(j->tm * j->tn));
		int64_t m0 = (r / j->tn) * j->mt, n0 = (r % j->tn) * j->nt;
		int64_t mm = p->m - m0 < j->mt ? p->m - m0 : j->mt;
		int64_t nn = p->n - n0 < j->nt ? p->n - n0 : j->nt;
		size_t ao = (p->aoff ? p->aoff[item] : 0) + (size_t)(p->ta ? m0 : m0 * p->lda);
		size_t bo = (p->boff ? p->boff[item] : 0) + (size_t)(p->tb ? n0 * p->ldb : n0);
		size_t co = (p->coff ? p->coff[item] : 0) + (size_t)(m0 * p->ldc + n0);
		const char *a = (const char *)p->a + ao * es, *b = (const char *)p->b + bo * es;
		char *c = (char *)p->c + co * es;

		if (p->kd == 0) { /* BLAS would leave C alone: the empty sum is zero */
			for (int64_t i = 0; i < mm; i++)
				for (int64_t q = 0; q < nn; q++) {
					if (p->t == OQ_LT_F32) {
						float *e = (float *)c + i * p->ldc + q;
						*e = p->beta == 0 ? 0.0f : (float)p->beta * *e;
					} else {
						double *e = (double *)c + i * p->ldc + q;
						*e = p->beta == 0 ? 0.0 : p->beta * *e;
					}
				}
			continue;
		}
		if (p->t == OQ_LT_F32)
			cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans,
				    (int)mm, (int)nn, (int)p->kd, (float)p->alpha, (const float *)a, (int)p->lda,
				    (const float *)b, (int)p->ldb, (float)p->beta, (float *)c, (int)p->ldc);
		else
			cblas_dgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans,
				    (int)mm, (int)nn, (int)p->kd, p->alpha, (const double *)a, (int)p->lda,
				    (const double *)b, (int)p->ldb, p->beta, (double *)c, (int)p->ldc);
	}
}

/* Item `item` of p on the packed kernel, B packed for this call; BLAS when packing fails. */
static void packed_item(oq_kctx *k, const oq_gemm_batch *p, size_t item)
{
	const float *a = (const float *)p->a + (p->aoff ? p->aoff[item] : 0);
	const float *b = (const float *)p->b + (p->boff ? p->boff[item] : 0);
	float *c = (float *)p->c + (p->coff ? p->coff[item] : 0);
	oq_packed_b pb;

	if (oq_packed_b_pack(b, p->kd, p->n, p->tb, p->ldb, &pb) == OQ_OK) {
		oq_packed_b_gemm(k, p->m, a, p->lda, &pb, c, p->ldc, p->beta != 0);
		oq_packed_b_free(&pb);
		return;
	}
	oq_linalg_blas_init();
	cblas_sgemm(CblasRowMajor, CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans, (int)p->m, (int)p->n, (int)p->kd,
		    1.0f, a, (int)p->lda, b, (int)p->ldb, (float)p->beta, c, (int)p->ldc);
}

static void packed_items(void *ctx, size_t begin, size_t end)
{
	for (size_t item = begin; item < end; item++)
		packed_item(NULL, ctx, item);
}

void oq_gemm_run(oq_kctx *k, const oq_gemm_batch *p)
{
	gemm_job j;

	if (oq_linalg_use_ref) {
		oq_gemm_ref(p);
		return;
	}
	if (p->batch == 0 || p->m == 0 || p->n == 0)
		return;
	/*
	 * float32, A as stored, alpha 1, beta 0 or 1: the packed kernel with B packed per call,
	 * so a product gives the bits it gives with a constant B packed once (an FMA chain in k
	 * order from C or 0), on any CPU OpenBLAS may take for another (its kernels sum in
	 * orders of their own). The items of a batch go to the threads one item each (attention's
	 * heads: an item's product may be one panel wide, too narrow to split); one item is split.
	 */
	if (p->t == OQ_LT_F32 && !p->ta && p->alpha == 1 && (p->beta == 0 || p->beta == 1) &&
	    oq_packed_b_available()) {
		if (p->batch > 1)
			oq_k_parallel(k, p->batch, 1, packed_items, (void *)p);
		else
			packed_item(k, p, 0);
		return;
	}
	oq_linalg_blas_init();
	j.p = p;
	tiles(p->m, p->n, p->kd, p->batch, &j.mt, &j.nt);
	j.tm = ceil_div(p->m, j.mt);
	j.tn = ceil_div(p->n, j.nt);
	oq_k_parallel(k, p->batch * (size_t)(j.tm * j.tn), 1, gemm_range, &j);
}

void oq_gemm_ref(const oq_gemm_batch *p)
{
	for (size_t item = 0; item < p->batch; item++) {
		size_t ao = p->aoff ? p->aoff[item] : 0, bo = p->boff ? p->boff[item] : 0;
		size_t co = p->coff ? p->coff[item] : 0;
		for (int64_t i = 0; i < p->m; i++)
			for (int64_t j = 0; j < p->n; j++) {
				double s = 0, old;
				for (int64_t q = 0; q < p->kd; q++) {
					size_t ai = ao + (size_t)(p->ta ? q * p->lda + i : i * p->lda + q);
					size_t bi = bo + (size_t)(p->tb ? j * p->ldb + q : q * p->ldb + j);
					if (p->t == OQ_LT_F32)
						s += (double)((const float *)p->a)[ai] * ((const float *)p->b)[bi];
					else
						s += ((const double *)p->a)[ai] * ((const double *)p->b)[bi];
				}
				size_t ci = co + (size_t)(i * p->ldc + j);
				if (p->t == OQ_LT_F32) {
					old = p->beta == 0 ? 0 : ((float *)p->c)[ci];
					((float *)p->c)[ci] = (float)(p->alpha * s + p->beta * old);
				} else {
					old = p->beta == 0 ? 0 : ((double *)p->c)[ci];
					((double *)p->c)[ci] = p->alpha * s + p->beta * old;
				}
			}
	}
}
