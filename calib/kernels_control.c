/*
 * kernels_control.c - kernel family 'control' (see kernel.h for the list of ops).
 * Placeholder table: kernels are being written.
 */
#include "kernel.h"

const oq_kreg oq_kernels_control[] = {
	{OQ_OP_UNKNOWN, 0, NULL},
};
