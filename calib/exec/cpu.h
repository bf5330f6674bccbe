/*
 * cpu.h - the CPU features the kernels choose their paths by. The first
 * caller asks the CPU; the answer is kept in an atomic (several threads
 * may ask first). Always 0 off x86-64.
 */
#ifndef OQ_CPU_H
#define OQ_CPU_H

int oq_cpu_avx512(void);     /* AVX-512F */
int oq_cpu_avx512_fma(void); /* AVX-512F and FMA */
int oq_cpu_avx2_fma(void);   /* AVX2 and FMA */
int oq_cpu_f16c(void);       /* F16C (float16 <-> float32 conversions) */

#endif
