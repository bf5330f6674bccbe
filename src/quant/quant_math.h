/*
 * quant_math.h - the scalar arithmetic of ONNX quantization, shared by the
 * Q/DQ kernels (calib/kernels/quant.c) and the weight quantizer
 * (passes/quantize/qweight.c: float8 weights are encoded here, so the stored bits are
 * what QuantizeLinear computes), pinned by tests/test_quant.c.
 *
 * Integer quantization follows ONNX Runtime's MLAS reference loop exactly:
 *   y = clamp(nearbyintf(x / scale) + (float)zp, qmin, qmax)
 * computed in float32: the division (not a multiplication by 1/scale), the
 * round half to even of the default FP environment, then the zero point,
 * then saturation. Dequantization is (float)((int32)x - zp) * scale.
 *
 * Small floats (float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz, float4 e2m1) are
 * encoded by rounding the float32 value to the target's grid with round
 * half to even (exact: the grid step is a power of two, so the scaled value
 * is exact in double and rint() decides the tie), then applying the
 * saturation rules of the ONNX Cast spec (docs/Operators.md, "Float 8 type").
 * One deliberate choice where spec and runtimes disagree: with saturate=1,
 * +/-Inf becomes +/-max for every float8 type (ONNX Runtime and the ONNX
 * reference implementation both do this; the Cast table says NaN for the
 * FNUZ types).
 * References: https://onnx.ai/onnx/technical/float8.html,
 * https://github.com/onnx/onnx/blob/main/docs/Operators.md#QuantizeLinear
 */
#ifndef OQ_QUANT_MATH_H
#define OQ_QUANT_MATH_H

#include <stddef.h>
#include <stdint.h>

/* Integer range of an integer dtype (int4..int32, uint4..uint16); 0 when not an integer dtype. */
int oq_quant_range(int dtype, int32_t *qmin, int32_t *qmax);

/* One integer quantization step: clamp(nearbyintf(x / scale) + zp, qmin, qmax); NaN gives zp. */
int32_t oq_quant_int(float x, float scale, int32_t zp, int32_t qmin, int32_t qmax);

/*
 * A row of n float32 values (src: 4n bytes, any alignment) to 8-bit codes with one scale and zero
 * point: out[i] = the low byte of oq_quant_int(x[i], scale, zp, qmin, qmax) (int8 codes as two's
 * complement bytes), for 8-bit bounds and qmin <= zp <= qmax. Branch-free, so the compiler
 * vectorises it: clamping x / scale to [qmin - zp, qmax - zp] before rounding equals saturating
 * after it (the bounds are integers), and adding then subtracting 1.5 * 2^23 rounds to nearest
 * even for |v| < 2^22 under the default rounding mode, like nearbyintf; NaN gives zp. The
 * executor's QuantizeLinear runs an AVX-512 loop of the same operations before it.
 */
void oq_quant_row8(const void *src, size_t n, float scale, int32_t zp, int32_t qmin, int32_t qmax,
		   void *out);

/* Small float types (float8 x4, float4e2m1): 1 when dtype is one of them. */
int oq_quant_is_smallfloat(int dtype);
/* float32 -> encoded bits (low 4 bits for float4e2m1), round half to even, ONNX saturation rules.
 */
uint8_t oq_smallfloat_from_f32(int dtype, float x, int saturate);
/* encoded bits -> float32 (NaN encodings give NaN, e5m2 infinities give Inf). */
float oq_smallfloat_to_f32(int dtype, uint8_t bits);

/* float32 -> bfloat16 bits, round to nearest even, NaN kept NaN. */
uint16_t oq_quant_f32_to_bf16(float f);

#endif
