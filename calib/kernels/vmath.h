/*
 * vmath.h - vectorised float32 math shared by the kernels (vmath.c): Erf,
 * exp(x - max) with its sum (Softmax), line sums in double (ReduceMean),
 * line maximum and scaling, Sigmoid. AVX-512 and AVX2 paths with scalar
 * references of the same operations (the same bits); see vmath.c.
 */
#ifndef OQ_VMATH_H
#define OQ_VMATH_H

#include <stddef.h>

/*
 * Which vector paths may run: 1 the CPU's best (AVX-512 + FMA, else AVX2 +
 * FMA), 2 at most AVX2, 0 none. All give the same bits; tests set it.
 */
extern int oq_vm_simd;

/* The vector paths run here (as oq_vm_simd allows); callers keep their scalar loops otherwise. */
int oq_vm_fast(void);

/*
 * Erf of n floats: 16 lanes at a time on AVX-512, 8 on AVX2 (at most 2 ulp
 * from erf; the same bits as oq_erf_ref for every element wherever it
 * falls in x), else erff.
 */
void oq_erf_f32(const float *x, float *y, size_t n);
/* The AVX-512 path's operations on one value (fmaf, same order): its reference. */
float oq_erf_ref(float x);

/*
 * Sigmoid of n floats (y may be x): the bits of oq_vm_sigmoid_ref on every
 * CPU, vectorised where oq_vm_fast. Within 2 ulp of 1 / (1 + exp(-x)).
 */
void oq_vm_sigmoid(const float *x, float *y, size_t n);
float oq_vm_sigmoid_ref(float x);

/* exp(x) for x <= 0 (exp(-104) and below: 0) with the vector path's operations. */
float oq_vm_exp_ref(float x);

/* Sum of x[0..n) in double: 16 stripes added pairwise (vmath.c), the same bits as oq_vm_sum_ref. */
double oq_vm_sum(const float *x, size_t n);
double oq_vm_sum_ref(const float *x, size_t n);
/*
 * y[i] = exp(x[i] - m) (oq_vm_exp_ref) for x[i] <= m, no NaN, m finite;
 * returns their sum as oq_vm_sum would. y may be x.
 */
double oq_vm_expsum(const float *x, float m, float *y, size_t n);
double oq_vm_expsum_ref(const float *x, float m, float *y, size_t n);
/* Largest of x[0..n) (-Inf for n 0), ignoring NaN; *nan: some x is NaN. */
float oq_vm_max(const float *x, size_t n, int *nan);
/* y[i] *= s. */
void oq_vm_scale(float *y, size_t n, float s);

#endif
