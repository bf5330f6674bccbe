/*
 * profile.h - the report of `onnxq run --profile`: where a model's time
 * goes, per op type and for the slowest nodes, from the executor's
 * per-node times (oq_exec_profile).
 */
#ifndef OQ_PROFILE_H
#define OQ_PROFILE_H

#include <stdio.h>

#include "calib/exec/exec.h"

/* How many of the slowest nodes the report lists. */
#define OQ_PROFILE_TOP 10

/*
 * Writes e's profile to f: `runs` runs took run_ms (wall time of
 * oq_exec_run). Text: a header line, a table per op type
 * and one of the OQ_PROFILE_TOP slowest nodes (calls, milliseconds, share
 * of the time in kernels, milliseconds per call), rows by time, ties by
 * name, fixed columns. json: one object ({"runs", "threads", "run_ms",
 * "kernel_ms", "op_types": [...], "nodes": [...]}) with no newline, for
 * the caller to place. OQ_ENOMEM.
 */
int oq_profile_report(FILE *f, const oq_exec *e, size_t runs, double run_ms, int json, oq_diag *d) OQ_WUR;

#endif
