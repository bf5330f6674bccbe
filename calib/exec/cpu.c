/*
 * cpu.c - CPU feature checks (see cpu.h).
 */
#include "calib/exec/cpu.h"

#include <stdatomic.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#endif

enum { F_AVX512 = 1, F_FMA = 2, F_AVX2 = 4, F_F16C = 8, F_KNOWN = 16 };

#if defined(__GNUC__) && defined(__x86_64__)
/* F16C: CPUID leaf 1, ECX bit 29, usable when the OS saves the YMM state (which
 * __builtin_cpu_supports("avx") checks); clang before 15 has no "f16c" there. */
static int has_f16c(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) && __builtin_cpu_supports("avx");
}
#endif

/* The feature bits, F_KNOWN once asked. */
static int features(void)
{
	static atomic_int f;
	int v = atomic_load_explicit(&f, memory_order_relaxed);

	if (!v) {
#if defined(__GNUC__) && defined(__x86_64__)
		__builtin_cpu_init();
		v = (__builtin_cpu_supports("avx512f") ? F_AVX512 : 0) |
		    (__builtin_cpu_supports("fma") ? F_FMA : 0) | (__builtin_cpu_supports("avx2") ? F_AVX2 : 0) |
		    (has_f16c() ? F_F16C : 0);
#endif
		v |= F_KNOWN;
		atomic_store_explicit(&f, v, memory_order_relaxed);
	}
	return v;
}

int oq_cpu_avx512(void)
{
	return (features() & F_AVX512) != 0;
}

int oq_cpu_avx512_fma(void)
{
	return (features() & (F_AVX512 | F_FMA)) == (F_AVX512 | F_FMA);
}

int oq_cpu_avx2_fma(void)
{
	return (features() & (F_AVX2 | F_FMA)) == (F_AVX2 | F_FMA);
}

int oq_cpu_f16c(void)
{
	return (features() & F_F16C) != 0;
}
