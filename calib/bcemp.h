/*
 * bcemp.h - empirical bias correction: measuring what the quantized model
 * does (AIMET's empirical mode). The calibration samples run through the
 * float model and the quantized one side by side; for every layer of an
 * oq_bce (src/bcstats.h) the observer sums the measured output per channel
 * in both, and the model outputs give the SQNR of the quantized model on
 * those samples, which decides whether a round of correction is kept
 * (src/pipeline/pipeline.c).
 *
 * Determinism: sums are double, added in sample order and in a fixed
 * element order on the calling thread, and the executor's results do not
 * depend on its thread count, so neither do the corrections.
 */
#ifndef OQ_BCEMP_H
#define OQ_BCEMP_H

#include "bcstats.h"
#include "calibrate.h"

/*
 * Runs the samples of o->source (a folder; o->limit applies, o->batch does
 * not: one sample at a time) through ref (float) and qm (quantized, same
 * inputs and outputs). ref_nodes[i] / q_nodes[i]: the node whose output 0 is
 * layer i's measured value in each model (NULL marks the layer failed).
 * Resets and fills every layer's sum_f, sum_q, n_f, n_q (a measured value
 * that is not float32 or lacks M channels on its channel axis marks the
 * layer failed) and b->sqnr_min / sqnr_mean over the float32 outputs.
 * A random source is OQ_EUNSUP (nothing to measure on).
 */
int oq_bce_measure(oq_model *ref, oq_model *qm, oq_node *const *ref_nodes, oq_node *const *q_nodes,
		   const oq_calib_opts *o, oq_bce *b, oq_diag *d) OQ_WUR;

#endif
