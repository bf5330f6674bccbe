/*
 * precision.h - the high-precision type of a model: float32, or a 16-bit
 * float (float16 / bfloat16) that float16 converters leave models in.
 *
 * `quantize` works on float32: oq_precision_widen turns a 16-bit float
 * model into float32 before the rewrites and calibration, and
 * oq_precision_narrow turns the quantized float32 model back into the
 * high-precision type asked for (--high-precision; the model's own by
 * default), as onnxconverter-common's float16 conversion would, with
 * float16 scales on the QuantizeLinear / DequantizeLinear nodes.
 * See precision.c for the rules.
 */
#ifndef OQ_PRECISION_H
#define OQ_PRECISION_H

#include "src/ir/ir.h"

/*
 * The 16-bit float type m computes in (an initializer, Constant, declared
 * type or Cast target of that type, subgraphs included): OQ_DT_FLOAT16 or
 * OQ_DT_BFLOAT16 in *dtype; OQ_DT_FLOAT when it has neither. OQ_EUNSUP
 * when it has both.
 */
int oq_precision_of(const oq_model *m, int *dtype, oq_diag *d) OQ_WUR;

/*
 * m computing in float32: every float16 / bfloat16 initializer, attribute
 * tensor, declared type, Cast / dtype target becomes float32 (exactly);
 * main graph inputs and outputs declared 16-bit keep their type, with a
 * Cast after / before them. *changed: something changed. OQ_ENOMEM.
 */
int oq_precision_widen(oq_model *m, int *changed, oq_diag *d) OQ_WUR;

/*
 * m's float32 computation in dtype (OQ_DT_FLOAT16 or OQ_DT_BFLOAT16; with
 * OQ_DT_FLOAT only the Casts that convert nothing are removed). Main graph
 * inputs and outputs keep their declared types (Casts at the boundary);
 * ops float16 converters keep in float32 (Resize, Upsample, Range, TopK,
 * NonMaxSuppression, RoiAlign, CumSum, Min, Max, the integer-arithmetic
 * ops), and a Concat reading a DequantizeLinear output (ONNX Runtime would
 * fuse it into a QLinearConcat, which takes float32 scales only), stay
 * float32 with Casts around them; QuantizeLinear /
 * DequantizeLinear take scales of dtype (the model must be at opset >= 19:
 * OQ_EUNSUP otherwise) and an int32 bias DequantizeLinear becomes a dtype
 * initializer (a bias scale below dtype's range would flush to zero).
 * OQ_ENOMEM, OQ_EUNSUP.
 */
int oq_precision_narrow(oq_model *m, int dtype, oq_diag *d) OQ_WUR;

#endif
