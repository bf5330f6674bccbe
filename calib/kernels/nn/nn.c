/*
 * nn.c - kernel family 'nn': pooling, normalisation, softmax,
 * reductions, ArgMax/ArgMin, TopK, CumSum and the NLL/softmax cross-entropy
 * losses (see nn.h for where each
 * kernel lives and the common compute rules).
 *
 * Rows per opset: one kernel serves an op across versions and reads
 * k->opset where semantics changed (Softmax coercion < 13, Reduce* axes
 * input from 13 (ReduceSum) / 18, TopK K input from 10, GroupNormalization
 * parameters per channel from 21, BatchNormalization training_mode from 14).
 */
#include "calib/kernels/nn/nn.h"

const oq_kreg oq_kernels_nn[] = {
	{OQ_OP_MaxPool, 0, oq_nn_maxpool},
	{OQ_OP_AveragePool, 0, oq_nn_averagepool},
	{OQ_OP_LpPool, 0, oq_nn_lppool},
	{OQ_OP_GlobalAveragePool, 0, oq_nn_globalaveragepool},
	{OQ_OP_GlobalMaxPool, 0, oq_nn_globalmaxpool},
	{OQ_OP_GlobalLpPool, 0, oq_nn_globallppool},
	{OQ_OP_MaxRoiPool, 0, oq_nn_maxroipool},
	{OQ_OP_BatchNormalization, 0, oq_nn_batchnorm},
	{OQ_OP_InstanceNormalization, 0, oq_nn_instancenorm},
	{OQ_OP_LayerNormalization, 0, oq_nn_layernorm},
	{OQ_OP_RMSNormalization, 0, oq_nn_rmsnorm},
	{OQ_OP_GroupNormalization, 0, oq_nn_groupnorm},
	{OQ_OP_LRN, 0, oq_nn_lrn},
	{OQ_OP_MeanVarianceNormalization, 0, oq_nn_mvn},
	{OQ_OP_LpNormalization, 0, oq_nn_lpnorm},
	{OQ_OP_Softmax, 0, oq_nn_softmax},
	{OQ_OP_LogSoftmax, 0, oq_nn_logsoftmax},
	{OQ_OP_Hardmax, 0, oq_nn_hardmax},
	{OQ_OP_ReduceSum, 0, oq_nn_reduce},
	{OQ_OP_ReduceMean, 0, oq_nn_reduce},
	{OQ_OP_ReduceMax, 0, oq_nn_reduce},
	{OQ_OP_ReduceMin, 0, oq_nn_reduce},
	{OQ_OP_ReduceProd, 0, oq_nn_reduce},
	{OQ_OP_ReduceL1, 0, oq_nn_reduce},
	{OQ_OP_ReduceL2, 0, oq_nn_reduce},
	{OQ_OP_ReduceSumSquare, 0, oq_nn_reduce},
	{OQ_OP_ReduceLogSum, 0, oq_nn_reduce},
	{OQ_OP_ReduceLogSumExp, 0, oq_nn_reduce},
	{OQ_OP_ArgMax, 0, oq_nn_argmax},
	{OQ_OP_ArgMin, 0, oq_nn_argmin},
	{OQ_OP_TopK, 0, oq_nn_topk},
	{OQ_OP_CumSum, 0, oq_nn_cumsum},
	{OQ_OP_NegativeLogLikelihoodLoss, 0, oq_nn_nllloss},
	{OQ_OP_SoftmaxCrossEntropyLoss, 0, oq_nn_sceloss},
	{OQ_OP_UNKNOWN, 0, NULL},
};
