/*
 * analytic.h - empirical bias correction (--bias-correction): folds the
 * mean output shift that weight quantization causes into each layer's
 * bias, before the quantize pass quantizes the biases. A pipeline step
 * between calibration (which collects the statistics, calib/biascorr/sums.h)
 * and the quantize pass, not a table pass: it needs calibration data.
 */
#ifndef OQ_BIAS_CORRECT_H
#define OQ_BIAS_CORRECT_H

#include "calib/biascorr/tables.h"
#include "passes/pass.h"

/*
 * The layers to measure: every Conv, ConvTranspose, Gemm and MatMul whose
 * weight the quantize pass (options o) will quantize. Fills s->v with node
 * and w_idx only; the collector allocates the sums.
 */
int oq_bias_correct_plan(oq_graph *g, const oq_opts *o, oq_bc_stats *s, oq_diag *d) OQ_WUR;

/*
 * Subtracts each measured layer's shift from its bias (creating a Conv /
 * ConvTranspose / Gemm bias when there is none; a MatMul's bias is the
 * constant of the Add that alone reads its output, and a MatMul without one
 * is skipped). o->log (or `log`) gets a summary line; o->log one line per
 * layer. Failed or unmeasured layers are skipped with a note.
 */
int oq_bias_correct(oq_graph *g, const oq_opts *o, const oq_bc_stats *s, FILE *log, oq_diag *d) OQ_WUR;

/*
 * Empirical mode (the default; calib/biascorr/measure.h measures). The layers of g
 * (a float graph after the rewrites) whose bias can take a correction: b
 * gets one zeroed entry per Conv, ConvTranspose, Gemm and MatMul that the
 * quantize pass will quantize and that has (or may get) a float bias; the
 * others are skipped with a note on o->log. Layers are named by their
 * output (oq_bias_correct_node finds them again in a fresh copy).
 */
int oq_bias_correct_targets(oq_graph *g, const oq_opts *o, oq_bce *b, oq_diag *d) OQ_WUR;

/* The live node whose output 0 is `name`, or NULL. */
oq_node *oq_bias_correct_node(oq_graph *g, const char *name);

/*
 * Subtracts each layer's corr from its bias in g (a fresh float copy of the
 * graph b was planned on), before the quantize pass; layers whose corr is
 * all zero are left exactly as they are (no bias created).
 */
int oq_bias_correct_apply(oq_graph *g, const oq_bce *b, oq_diag *d) OQ_WUR;

#endif
