// Float32 / float64 products on the CPU: OpenBLAS's CBLAS, loaded when the program starts (dlopen
// "libopenblas.so.0") rather than linked, so that the core it runs is settled first. OpenBLAS
// picks its kernels once, as it loads, from the CPU's model; a model newer than the library
// (Emerald Rapids under Debian 12's 0.3.21) gets the fallback, Prescott's SSE3 kernels
// (bench/RESULTS.md). Unless OPENBLAS_CORETYPE is set, crescent names the core from the
// instruction set its own kernels use (vm/cpu_march.hpp: CRESCENT_CPU_MARCH caps both).
#pragma once
#include <cblas.h>

#include <string>

namespace cr {

struct Cblas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  decltype(&cblas_sgemv) sgemv = nullptr;
  decltype(&cblas_dgemv) dgemv = nullptr;
  std::string core;        // openblas_get_corename(): the kernels OpenBLAS chose
  bool user_core = false;  // OPENBLAS_CORETYPE was the user's
  bool named = false;      // crescent named the core (not where another thread or OpenBLAS was there first)
};

// The loaded library (single-threaded: products are split by crescent's pool, vm/ops/linalg.cpp);
// raises, naming `op`, where OpenBLAS could not be loaded.
const Cblas& cblas(const char* op);

// The OPENBLAS_CORETYPE for a CPU with AVX-512 (F, VL, BW, DQ, CD) / AVX2 and FMA under a cap of
// `cap_bytes` vector bytes (0: none): "SkylakeX", "Haswell", or nullptr for OpenBLAS's own choice.
const char* openblas_core_for(bool avx512, bool avx2_fma, int cap_bytes);

}  // namespace cr
