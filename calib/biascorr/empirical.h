/*
 * empirical.h - empirical bias correction's layers (empirical.c; the
 * rounds are biascorr.h's oq_biascorr_empirical, the measurement
 * measure.h).
 */
#ifndef OQ_BC_EMPIRICAL_H
#define OQ_BC_EMPIRICAL_H

#include "calib/biascorr/biascorr.h"
#include "calib/biascorr/tables.h"

/*
 * The layers of g (a float graph after the rewrites) whose bias can take a
 * correction: b gets one zeroed entry per Conv, ConvTranspose, Gemm and
 * MatMul that the quantize pass (options o) will quantize and that has (or
 * may get) a float bias; the others are skipped with a note on o->log.
 * Layers are named by their output (oq_bc_node_writing finds them again in
 * a fresh copy).
 */
int oq_bc_targets_find(oq_graph *g, const oq_opts *o, oq_bc_targets *b, oq_diag *d) OQ_WUR;

/*
 * Subtracts each layer's corr from its bias in g (a fresh float copy of the
 * graph b was found on), before the quantize pass; layers whose corr is
 * all zero are left exactly as they are (no bias created).
 */
int oq_bc_targets_apply(oq_graph *g, const oq_bc_targets *b, oq_diag *d) OQ_WUR;

#endif
