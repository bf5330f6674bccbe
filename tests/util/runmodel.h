/*
 * runmodel.h - run a model on pseudo-random inputs with onnxq's executor and
 * compare the outputs: what the pass tests use to check that a rewrite keeps
 * the computation (executor before and after, relative difference).
 *
 *   uint64_t rng;
 *   size_t nin, nout;
 *   runmodel_inputs(m, &rng, 4, in, 8, &nin, &d);    inputs in [-1, 1)
 *   runmodel_run(m, in, nin, a, 8, &nout, &d);       one thread
 *   ... rewrite m, run again into b ...
 *   runmodel_rel_err(a, b, nout)                      max|a-b| / max|a|
 */
#ifndef OQ_RUNMODEL_H
#define OQ_RUNMODEL_H

#include <stddef.h>
#include <stdint.h>

#include "calib/exec/exec.h"
#include "src/ir/ir.h"

/* The seed runmodel_inputs resets *state to. */
#define RUNMODEL_SEED 88172645463325252ull

/* The next xorshift64 value of *state, mapped to [-1, 1). */
double runmodel_urand(uint64_t *state);

/* Allocates in[0..*n) for the graph inputs of m that no initializer backs, filled from
 * runmodel_urand after resetting *state to RUNMODEL_SEED; a symbolic dim is 1 on axis 0 and
 * `sym` elsewhere. OQ_OK, or an error (d says which) when there are more than cap inputs or
 * an allocation fails; the caller releases in[0..*n) either way. */
int runmodel_inputs(oq_model *m, uint64_t *state, int64_t sym, oq_rt *in, size_t cap,
                    size_t *n, oq_diag *d);

/* Runs m once on one thread; out[0..*n) receive its outputs (at most cap, else an error). */
int runmodel_run(oq_model *m, const oq_rt *in, size_t nin, oq_rt *out, size_t cap, size_t *n,
                 oq_diag *d);

/* max|a-b| / max|a| over n outputs (max|a-b| when a is all zero); NAN when two outputs differ
 * in element count. */
double runmodel_rel_err(const oq_rt *a, const oq_rt *b, size_t n);

/* How many nodes of the main graph have op type `op`. */
size_t runmodel_count_op(const oq_graph *g, const char *op);

#endif
