/* pipeline.c - placeholder. */
#include "pipeline.h"

int oq_pipeline_run(const oq_pipeline_opts *o, oq_diag *d)
{
	(void)o;
	return oq_err(d, OQ_EUNSUP, "quantize: not built yet");
}
