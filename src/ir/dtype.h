/*
 * dtype.h - ONNX element types (TensorProto.DataType) and their traits.
 *
 * The enum values are the ONNX numbers, so a value read from a file is a
 * dtype once it passes oq_dtype_valid(). Sub-byte types (int4, uint4,
 * float4e2m1: 4 bits; int2, uint2: 2 bits) are stored packed, first element
 * in the lowest bits, exactly as ONNX raw_data holds them.
 */
#ifndef OQ_DTYPE_H
#define OQ_DTYPE_H

#include <stddef.h>
#include <stdint.h>

/* X(NAME, onnx number, bits per element, kind) ; kind: 'f' float, 's' signed int,
 * 'u' unsigned int, 'b' bool, 'c' complex, 'S' string, '-' none */
#define OQ_DTYPES(X)                          \
	X(UNDEFINED, 0, 0, '-')               \
	X(FLOAT, 1, 32, 'f')                  \
	X(UINT8, 2, 8, 'u')                   \
	X(INT8, 3, 8, 's')                    \
	X(UINT16, 4, 16, 'u')                 \
	X(INT16, 5, 16, 's')                  \
	X(INT32, 6, 32, 's')                  \
	X(INT64, 7, 64, 's')                  \
	X(STRING, 8, 0, 'S')                  \
	X(BOOL, 9, 8, 'b')                    \
	X(FLOAT16, 10, 16, 'f')               \
	X(DOUBLE, 11, 64, 'f')                \
	X(UINT32, 12, 32, 'u')                \
	X(UINT64, 13, 64, 'u')                \
	X(COMPLEX64, 14, 64, 'c')             \
	X(COMPLEX128, 15, 128, 'c')           \
	X(BFLOAT16, 16, 16, 'f')              \
	X(FLOAT8E4M3FN, 17, 8, 'f')           \
	X(FLOAT8E4M3FNUZ, 18, 8, 'f')         \
	X(FLOAT8E5M2, 19, 8, 'f')             \
	X(FLOAT8E5M2FNUZ, 20, 8, 'f')         \
	X(UINT4, 21, 4, 'u')                  \
	X(INT4, 22, 4, 's')                   \
	X(FLOAT4E2M1, 23, 4, 'f')             \
	X(FLOAT8E8M0, 24, 8, 'f')             \
	X(UINT2, 25, 2, 'u')                  \
	X(INT2, 26, 2, 's')

typedef enum oq_dtype {
#define X(n, v, b, k) OQ_DT_##n = v,
	OQ_DTYPES(X)
#undef X
	OQ_DT_COUNT
} oq_dtype;

int oq_dtype_valid(int v);           /* a known element type, not UNDEFINED */
const char *oq_dtype_name(int v);    /* "float", "int8", ... ; "?" when unknown */
int oq_dtype_from_name(const char *s); /* -1 when unknown */
int oq_dtype_bits(int v);            /* bits per element; 0 for string/undefined */
char oq_dtype_kind(int v);           /* see OQ_DTYPES */
int oq_dtype_is_float8(int v);
int oq_dtype_is_subbyte(int v);      /* 4- or 2-bit packed types */

/*
 * Bytes needed for `n` elements (sub-byte types rounded up to whole bytes).
 * Returns 0 on overflow or for strings, 1 on success.
 */
int oq_dtype_nbytes(int v, size_t n, size_t *bytes);

/* IEEE half and bfloat16 conversions (round to nearest even). */
float oq_f16_to_f32(uint16_t h);
uint16_t oq_f32_to_f16(float f);
float oq_bf16_to_f32(uint16_t h);

#endif
