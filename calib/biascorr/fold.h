/*
 * fold.h - where a layer's bias correction goes, and folding it in; shared
 * by both modes (analytic.c, empirical.c).
 *
 *   Conv(x, W, B)              ==>  Conv(x, W, B - shift)          (B created when absent)
 *   ConvTranspose(x, W, B)     ==>  ConvTranspose(x, W, B - shift)
 *   Gemm(A, W, C)              ==>  Gemm(A, W, C - shift / beta)   (C created when absent)
 *   MatMul(x, W) -> Add(., c)  ==>  MatMul(x, W) -> Add(., c - shift)
 *
 * A MatMul has no bias input: its correction goes into the constant of an
 * Add that is the only reader of its output (the bias Add of exported
 * Linear layers), when that constant broadcasts along the last axis only;
 * otherwise the MatMul takes no correction (an inserted Add would get its
 * own activation Q/DQ, which costs more than the shift). Biases read by
 * other nodes too are copied, never changed under them (oq_pass_set_const).
 */
#ifndef OQ_BC_FOLD_H
#define OQ_BC_FOLD_H

#include "src/ir/ir.h"

/* Output channels of layer n (Conv, ConvTranspose, Gemm, MatMul) with weight w. */
size_t oq_bc_out_channels(const oq_node *n, const oq_tensor *w);

/*
 * Where layer n's correction of M channels goes: input *bidx of *site (n
 * itself, or a MatMul's bias Add), scaled by *f (1 / beta for a Gemm), the
 * bias there now being *old (NULL: none yet). Returns why it cannot take
 * one, or NULL. Uses must be current.
 */
const char *oq_bc_bias_site(const oq_graph *g, oq_node *n, size_t M, oq_node **site, size_t *bidx, double *f,
			    const oq_tensor **old);

/*
 * Input idx of n becomes old - shift * f: new[j] = old[j] - shift[j % M] * f
 * for a constant that broadcasts to [..., M] (last dim M, or all ones:
 * widened to last dim M; old NULL: zeros). A new initializer is named
 * after `base`. OQ_ENOMEM is the only failure.
 */
int oq_bc_fold(oq_graph *g, oq_node *n, size_t idx, const char *base, const oq_tensor *old, const double *shift,
	       size_t M, double f) OQ_WUR;

/* The live node whose output 0 is `name`, or NULL: how a layer is found again in a fresh copy. */
oq_node *oq_bc_node_writing(oq_graph *g, const char *name);

#endif
