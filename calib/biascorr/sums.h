/*
 * sums.h - analytic bias correction's input sums, collected during
 * calibration (tables.h describes what is summed; analytic.c uses it).
 *
 * An observer (oq_observe_fn) that the calibration run calls next to its
 * range observer, in the first pass over the samples: for every listed
 * layer whose data input (input 0) is the observed value, it adds that
 * tensor to the layer's sums. float32 inputs only; another dtype or a shape
 * the layer cannot take marks the layer failed (it gets no correction).
 *
 * Determinism: sums are double, added in sample order and in a fixed
 * element order on the calling thread, so they do not depend on --threads.
 */
#ifndef OQ_BC_SUMS_H
#define OQ_BC_SUMS_H

#include "calib/biascorr/tables.h"
#include "calib/exec/exec.h"

typedef struct oq_bc_collector oq_bc_collector;

/*
 * A collector for s, whose layers name node and w_idx; allocates each
 * layer's zeroed sums (n_sum from the weight's dims). Layers whose weight is
 * not a float32 initializer of rank 2 (Gemm, MatMul) or >= 3 (Conv,
 * ConvTranspose) are marked failed.
 */
int oq_bc_collector_new(const oq_graph *g, oq_bc_sums *s, oq_bc_collector **out, oq_diag *d) OQ_WUR;
void oq_bc_collector_free(oq_bc_collector *c);

/* The observer; ctx is the collector. Never fails a run (misfits mark the layer). */
int oq_bc_observe(void *ctx, const oq_value *v, const oq_rt *t);

#endif
