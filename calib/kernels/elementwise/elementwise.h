/*
 * elementwise.h - private to the element-wise family (elementwise.c, convert.c):
 * chunked element conversion between any numeric dtype and the two compute
 * domains (double for float dtypes, int64 bit patterns for integer/bool
 * dtypes), the small-float encoders used by Cast, and the Cast kernels.
 *
 * Why two domains: double holds every float16/bfloat16/float/float8 value
 * exactly and gives correctly rounded float results for + - * / sqrt after
 * one rounding to float; int64 keeps 64-bit integers exact (uint64 values
 * travel as their bit pattern and the ops that care look at signedness).
 */
#ifndef OQ_ELEMENTWISE_H
#define OQ_ELEMENTWISE_H

#include "calib/kernels/kernel.h"

/* Elements per chunk of the converting paths (stack buffers of this size). */
#define OQ_ELEMENTWISE_CHUNK 256

/* True for a dtype the loaders and storers handle (numeric or bool, not string). */
int oq_elementwise_numeric(int dtype);

/*
 * Loads n elements of t starting at element `off` into buf, stepping `s`
 * elements (0: repeat element off, 1: contiguous). Float dtypes convert
 * exactly to double; integer dtypes load to double (exact below 2^53).
 */
void oq_elementwise_load_double(const oq_rt *t, size_t off, int s, size_t n, double *buf);
/* Integer/bool dtypes to int64 (uint64 as its bit pattern); floats truncate toward zero, saturating. */
void oq_elementwise_load_int64(const oq_rt *t, size_t off, int s, size_t n, int64_t *buf);

/*
 * Stores n doubles at element `off` of t: float targets round to nearest
 * even (float8: `sat` selects saturation to the largest finite value
 * instead of NaN/Inf on overflow), integer targets truncate toward zero and
 * saturate (NaN becomes 0), bool is v != 0.
 */
void oq_elementwise_store_double(oq_rt *t, size_t off, size_t n, const double *v, int sat);
/* Stores n int64 values: integer targets keep the low bits (wrap), bool is v != 0, floats convert. */
void oq_elementwise_store_int64(oq_rt *t, size_t off, size_t n, const int64_t *v, int uns);

/*
 * Small float formats: encodes v (round to nearest even) as float16,
 * bfloat16 or one of the float8 dtypes; `sat` applies to float8 only.
 * Decodes such bits back to double.
 */
uint16_t oq_elementwise_encode_small(double v, int dtype, int sat);
double oq_elementwise_decode_small(uint16_t bits, int dtype);

/* Cast (opset 1: `to` as a string; 6+: int; 19+: saturate) and CastLike. */
int oq_elementwise_cast(oq_kctx *k);
int oq_elementwise_castlike(oq_kctx *k);

#endif
