/* calibrate.c - placeholder until calibration lands (being written this session). */
#include "calibrate.h"

int oq_calibrate_minmax(oq_model *m, const oq_calib_opts *o, oq_ranges *out, oq_diag *d)
{
	(void)m; (void)o; (void)out;
	return oq_err(d, OQ_EUNSUP, "calibrate: not built yet");
}
