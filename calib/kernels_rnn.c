/*
 * kernels_rnn.c - kernel family 'rnn' (see kernel.h for the list of ops).
 * Placeholder table: kernels are being written.
 */
#include "kernel.h"

const oq_kreg oq_kernels_rnn[] = {
	{OQ_OP_UNKNOWN, 0, NULL},
};
