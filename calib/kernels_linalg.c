/*
 * kernels_linalg.c - kernel family 'linalg' (see kernel.h for the list of ops).
 * Placeholder table: kernels are being written.
 */
#include "kernel.h"

const oq_kreg oq_kernels_linalg[] = {
	{OQ_OP_UNKNOWN, 0, NULL},
};
