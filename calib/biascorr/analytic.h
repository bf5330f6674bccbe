/*
 * analytic.h - analytic bias correction on the statistics calibration
 * collected (analytic.c; the pipeline calls biascorr.h, which wraps these
 * with the collector of sums.h).
 */
#ifndef OQ_BC_ANALYTIC_H
#define OQ_BC_ANALYTIC_H

#include <stdio.h>

#include "calib/biascorr/biascorr.h"
#include "calib/biascorr/tables.h"

/*
 * The layers to sum inputs for: every Conv, ConvTranspose, Gemm and MatMul
 * whose weight the quantize pass (options o) will quantize. Fills s->v with
 * node and w_idx only; the collector (sums.h) allocates the sums.
 */
int oq_bc_analytic_plan(oq_graph *g, const oq_opts *o, oq_bc_sums *s, oq_diag *d) OQ_WUR;

/*
 * Subtracts each layer's shift from its bias (fold.h). `log` gets a
 * summary line, o->log one line per layer. Failed or unmeasured
 * layers, and those whose bias cannot take a correction, are skipped with
 * a note.
 */
int oq_bc_analytic_fold(oq_graph *g, const oq_opts *o, const oq_bc_sums *s, FILE *log, oq_diag *d) OQ_WUR;

#endif
