/*
 * einsum.c - Einsum by direct summation.
 *
 * The equation ("ij,jk->ik", "...ii->...i", "bij,bjk", ...) is parsed into
 * labels; each input gets a stride per label (repeated labels in one term
 * add their strides, which walks the diagonal; a size-1 dim broadcast
 * against a larger label size gets stride 0). The output is then every
 * combination of output labels, each the double-precision sum over every
 * combination of the remaining labels of the product of the inputs. This is
 * general (transposes, reductions, traces, outer and batched products,
 * ellipsis broadcasting, implicit output in sorted label order) but does
 * prod(all label sizes) work: fine for the small contractions models hold.
 * Spec: https://onnx.ai/onnx/operators/onnx__Einsum.html (numpy.einsum semantics).
 */
#include "calib/kernels/linalg/linalg.h"

#include <stdlib.h>
#include <string.h>

#define EIN_LETTERS 52                       /* a-z, A-Z */
#define EIN_MAX (EIN_LETTERS + OQ_RT_MAX_RANK) /* letters plus ellipsis dims */
#define EIN_MAX_IN 16

static int letter_id(char c)
{
	if (c >= 'a' && c <= 'z')
		return c - 'a';
	if (c >= 'A' && c <= 'Z')
		return 26 + (c - 'A');
	return -1;
}

/* One term: labels in dim order; the ellipsis expands to labels EIN_LETTERS + j. */
typedef struct term {
	int n;                       /* labels written (letters), not counting the ellipsis */
	int ell;                     /* index among the letters where "..." stands, -1 if none */
	int lab[OQ_RT_MAX_RANK + EIN_LETTERS];
} term;

static int parse_term(const char *s, size_t len, term *t)
{
	t->n = 0;
	t->ell = -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == ' ')
			continue;
		if (s[i] == '.') {
			if (t->ell >= 0 || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
				return -1;
			t->ell = t->n;
			i += 2;
			continue;
		}
		if (letter_id(s[i]) < 0 || t->n >= (int)(sizeof t->lab / sizeof t->lab[0]))
			return -1;
		t->lab[t->n++] = letter_id(s[i]);
	}
	return 0;
}

/* Label of dim d of a tensor of rank r written as term t with ell_rank ellipsis dims. */
static int dim_label(const term *t, int d, int ell_rank, int max_ell)
{
	if (t->ell < 0 || d < t->ell)
		return t->lab[d];
	if (d < t->ell + ell_rank) /* ellipsis dims are right-aligned against max_ell */
		return EIN_LETTERS + (max_ell - ell_rank) + (d - t->ell);
	return t->lab[d - ell_rank];
}

int oq_linalg_einsum(oq_kctx *k)
{
	const char *eq = oq_k_str(k, "equation", NULL), *arrow, *p;
	term in[EIN_MAX_IN], out;
	int ell_rank[EIN_MAX_IN], max_ell = 0, any_ell = 0, count[EIN_MAX];
	int64_t size[EIN_MAX], strides[EIN_MAX_IN][EIN_MAX], odims[OQ_RT_MAX_RANK];
	int olab[EIN_MAX], no = 0, slab[EIN_MAX], ns = 0, in_out[EIN_MAX];
	double *buf[EIN_MAX_IN];
	size_t nin = k->n_in, ti = 0;
	oq_rt *y;
	int rc = OQ_OK, dt;

	memset(buf, 0, sizeof buf);
	if (!eq)
		return oq_k_err(k, OQ_EINVAL, "attribute 'equation' is missing");
	if (nin < 1 || nin > EIN_MAX_IN)
		return oq_k_err(k, OQ_EUNSUP, "%zu inputs; 1 to %d are supported", nin, EIN_MAX_IN);
	dt = k->in[0] ? k->in[0]->dtype : 0;
	for (size_t i = 0; i < nin; i++) {
		char kd;
		if (!k->in[i])
			return oq_k_err(k, OQ_EINVAL, "input %zu is missing", i);
		kd = oq_dtype_kind(k->in[i]->dtype);
		if (k->in[i]->dtype != dt || (kd != 'f' && kd != 's' && kd != 'u'))
			return oq_k_err(k, OQ_EUNSUP, "inputs must share one numeric type (input %zu is %s)", i,
					oq_dtype_name(k->in[i]->dtype));
	}
	/* parse */
	arrow = strstr(eq, "->");
	p = eq;
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len;
		if (!end || (arrow && end > arrow))
			end = arrow ? arrow : p + strlen(p);
		len = (size_t)(end - p);
		if (ti >= nin || parse_term(p, len, &in[ti]))
			return oq_k_err(k, OQ_EINVAL, "equation '%s': bad term %zu or more terms than the %zu inputs", eq,
					ti, nin);
		ti++;
		if (*end != ',')
			break;
		p = end + 1;
	}
	if (ti != nin)
		return oq_k_err(k, OQ_EINVAL, "equation '%s' has %zu input terms for %zu inputs", eq, ti, nin);
	for (size_t i = 0; i < nin; i++) {
		ell_rank[i] = k->in[i]->rank - in[i].n;
		if ((in[i].ell < 0 && ell_rank[i] != 0) || ell_rank[i] < 0)
			return oq_k_err(k, OQ_EINVAL, "equation '%s': term %zu has %d labels but input %zu has rank %d", eq,
					i, in[i].n, i, k->in[i]->rank);
		if (in[i].ell >= 0)
			any_ell = 1;
		if (ell_rank[i] > max_ell)
			max_ell = ell_rank[i];
	}
	/* label sizes */
	for (int l = 0; l < EIN_MAX; l++) {
		size[l] = -1;
		count[l] = 0;
		in_out[l] = 0;
	}
	for (size_t i = 0; i < nin; i++)
		for (int d = 0; d < k->in[i]->rank; d++) {
			int l = dim_label(&in[i], d, ell_rank[i], max_ell);
			int64_t s = k->in[i]->dims[d];
			count[l]++;
			if (size[l] < 0 || size[l] == 1)
				size[l] = s;
			else if (s != size[l] && s != 1)
				return oq_k_err(k, OQ_EINVAL, "equation '%s': a label has sizes %lld and %lld", eq,
						(long long)size[l], (long long)s);
		}
	/* output labels */
	if (arrow) {
		if (parse_term(arrow + 2, strlen(arrow + 2), &out))
			return oq_k_err(k, OQ_EINVAL, "equation '%s': bad output term", eq);
		for (int j = 0; j < out.n + (out.ell >= 0 ? max_ell : 0); j++) {
			int l = dim_label(&out, j, out.ell >= 0 ? max_ell : 0, max_ell);
			if (size[l] < 0 || in_out[l])
				return oq_k_err(k, OQ_EINVAL, "equation '%s': output label missing from the inputs or repeated", eq);
			in_out[l] = 1;
			olab[no++] = l;
		}
	} else {
		for (int j = 0; any_ell && j < max_ell; j++) {
			olab[no++] = EIN_LETTERS + j;
			in_out[EIN_LETTERS + j] = 1;
		}
		/* numpy order: uppercase before lowercase */
		for (int l = 26; l < 52; l++)
			if (count[l] == 1)
				olab[no++] = l, in_out[l] = 1;
		for (int l = 0; l < 26; l++)
			if (count[l] == 1)
				olab[no++] = l, in_out[l] = 1;
	}
	if (no > OQ_RT_MAX_RANK)
		return oq_k_err(k, OQ_EUNSUP, "output rank %d is above %d", no, OQ_RT_MAX_RANK);
	for (int l = 0; l < EIN_MAX; l++)
		if (size[l] >= 0 && !in_out[l])
			slab[ns++] = l;
	for (int j = 0; j < no; j++)
		odims[j] = size[olab[j]];
	/* strides */
	for (size_t i = 0; i < nin; i++) {
		int64_t st = 1;
		for (int l = 0; l < EIN_MAX; l++)
			strides[i][l] = 0;
		for (int d = k->in[i]->rank - 1; d >= 0; d--) {
			int l = dim_label(&in[i], d, ell_rank[i], max_ell);
			if (!(k->in[i]->dims[d] == 1 && size[l] != 1))
				strides[i][l] += st;
			st *= k->in[i]->dims[d];
		}
	}
	if ((rc = oq_k_output(k, 0, dt, no, odims, &y)))
		return rc;
	for (size_t i = 0; i < nin; i++) {
		if (!(buf[i] = malloc((k->in[i]->nelem + 1) * sizeof(double)))) {
			rc = oq_k_err(k, OQ_ENOMEM, "out of memory");
			goto done;
		}
		for (size_t e = 0; e < k->in[i]->nelem; e++)
			buf[i][e] = oq_rt_get(k->in[i], e);
	}
	{
		int64_t oi[EIN_MAX], si[EIN_MAX], inner = 1;
		for (int j = 0; j < ns; j++)
			inner *= size[slab[j]];
		memset(oi, 0, sizeof oi);
		for (size_t e = 0; e < y->nelem; e++) {
			double sum = 0;
			int64_t base[EIN_MAX_IN];
			/* output multi-index of e */
			size_t rem = e;
			for (int j = no - 1; j >= 0; j--) {
				oi[j] = (int64_t)(rem % (size_t)odims[j]);
				rem /= (size_t)odims[j];
			}
			for (size_t i = 0; i < nin; i++) {
				base[i] = 0;
				for (int j = 0; j < no; j++)
					base[i] += oi[j] * strides[i][olab[j]];
			}
			memset(si, 0, sizeof si);
			for (int64_t q = 0; q < inner; q++) {
				double prod = 1;
				for (size_t i = 0; i < nin; i++) {
					int64_t off = base[i];
					for (int j = 0; j < ns; j++)
						off += si[j] * strides[i][slab[j]];
					prod *= buf[i][off];
				}
				sum += prod;
				for (int j = ns - 1; j >= 0; j--) { /* odometer */
					if (++si[j] < size[slab[j]])
						break;
					si[j] = 0;
				}
			}
			oq_rt_set(y, e, sum);
		}
	}
done:
	for (size_t i = 0; i < nin; i++)
		free(buf[i]);
	return rc;
}
