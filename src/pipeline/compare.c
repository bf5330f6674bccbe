/* compare.c - placeholder until `compare` lands (being written this session). */
#include "compare.h"

int oq_compare(oq_model *ref, oq_model *test, const oq_compare_opts *o, FILE *out, oq_diag *d)
{
	(void)ref; (void)test; (void)o; (void)out;
	return oq_err(d, OQ_EUNSUP, "compare: not built yet");
}
