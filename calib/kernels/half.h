/*
 * half.h - arrays of 16-bit floats (float16, bfloat16) to and from
 * float32, the conversions the executor runs float16 models with (it
 * holds their values as float32: exec.h). Vector paths (AVX-512F, else
 * F16C for float16; AVX-512F integer lanes for bfloat16) chosen at run
 * time (calib/exec/cpu.c), with plain-C references of the same bits:
 *
 *   float16 -> float32: exact; a NaN comes out quiet (the quiet bit set,
 *       the payload kept), as the hardware converts it.
 *   float32 -> float16: round to nearest even, overflow to Inf, subnormals
 *       kept; a NaN comes out quiet with the payload's top 9 bits.
 *   bfloat16 -> float32: exact (the bits shifted up).
 *   float32 -> bfloat16: round to nearest even on the bits (subnormals
 *       included); a NaN comes out quiet with the payload's top bits.
 */
#ifndef OQ_HALF_H
#define OQ_HALF_H

#include <stddef.h>
#include <stdint.h>

void oq_half_to_float(const uint16_t *h, float *f, size_t n);
void oq_float_to_half(const float *f, uint16_t *h, size_t n);
void oq_bf16_to_float(const uint16_t *h, float *f, size_t n);
void oq_float_to_bf16(const float *f, uint16_t *h, size_t n);

/* The references, one element at a time. */
float oq_half_to_float_ref(uint16_t h);
uint16_t oq_float_to_half_ref(float f);
float oq_bf16_to_float_ref(uint16_t h);
uint16_t oq_float_to_bf16_ref(float f);

/* Test hook: 0 everywhere (default), 1 no AVX-512 (F16C or scalar), 2 scalar only. */
extern int oq_half_limit;

#endif
