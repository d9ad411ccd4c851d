// AVX-512 twins of the runtime's element loops. The binary is built for x86-64-v3 (AVX2) so that
// it runs on every AVX2 machine; the loops whose cost is arithmetic rather than memory (the block
// functions of exp, sin, tanh, erf... that generated kernels call) are compiled a second time for
// AVX-512 with 512-bit vectors and chosen at run time (20-30 % faster: bench/RESULTS.md H35).
// CR_TARGET_AVX512 marks such a twin; it may only run when use_avx512_loops() is true.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CR_HAVE_AVX512_TWINS 1
#define CR_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512cd,prefer-vector-width=512")))
#else
#define CR_HAVE_AVX512_TWINS 0
#define CR_TARGET_AVX512
#endif

namespace cr {

// Whether the CPU (and the OS, which must save the 512-bit registers) runs AVX-512 F/VL/BW/DQ/CD,
// and CRESCENT_CPU_MARCH does not cap this process at an AVX2 or older level ("x86-64-v3", ...).
// Decided once per process.
bool use_avx512_loops();

}  // namespace cr
