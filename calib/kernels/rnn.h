/*
 * rnn.h - test hook of the recurrent kernels (rnn.c).
 *
 * The kernels multiply with cblas_sgemm; the reference path does the same
 * products with plain loops so tests can compare the two.
 */
#ifndef OQ_RNN_H
#define OQ_RNN_H

/* Non-zero: LSTM/GRU/RNN use the plain-loop matrix products (process-wide; tests only). */
void oq_rnn_use_reference(int on);

#endif
