// The CPU that generated kernels are compiled for: the host's, detected at run time.
//
// libgccjit rejects -march=native (host detection lives in the gcc driver, which libgccjit does
// not run for code generation), so the host is mapped to an explicit x86-64 micro-architecture
// level that GCC accepts:
//   "x86-64-v4"  AVX-512 F/BW/VL/DQ(/CD) on top of v3
//   "x86-64-v3"  AVX + AVX2 + FMA + BMI1/BMI2 + F16C + LZCNT + MOVBE
//   "x86-64-v2"  SSE3/SSSE3/SSE4.1/SSE4.2 + POPCNT + CMPXCHG16B
//   "x86-64"     baseline (SSE2)
// and -mtune=generic.
//
// Environment:
//   CRESCENT_CPU_MARCH  overrides `march` (e.g. "x86-64-v3" to cap a v4 host at AVX2, or a CPU
//                       name GCC knows, like "skylake-avx512"; a leading "-march=" is accepted).
//                       "native" or an empty value mean: detect. The value is passed to libgccjit
//                       unchecked: a name GCC does not know makes every compile fail with GCC's
//                       "bad value ... for '-march=' switch" error. For the four x86-64 levels
//                       vector_bytes follows the override; for a CPU name it stays the host's.
//   CRESCENT_CPU_STREAM_BYTES  see stream_store_bytes.
#pragma once
#include <cstdint>
#include <string>

namespace cr::jit::cpu {

struct Target {
  std::string march;     // "x86-64-v4", "x86-64-v3", "x86-64-v2" or "x86-64" (or the override);
                         // empty when not built for x86 (then pass no -march at all)
  std::string features;  // the detected host features, "avx,avx2,fma,...": for logs only
  int vector_bytes = 16; // widest SIMD register of `march`: 64, 32 or 16
  std::string mtune = "generic";

  std::string march_option() const { return "-march=" + march; }
  std::string mtune_option() const { return "-mtune=" + mtune; }
};

// Detected once (thread-safe), then cached for the life of the process.
const Target& host_target();

// The -march generated kernels use: CRESCENT_CPU_MARCH when set, else the host's level capped at
// x86-64-v3. AVX-512 is left out on purpose: GCC 12's vectoriser hits an internal compiler error
// (unrecognizable insn, V8DI truncated to V8QI) on our bool-producing loops with -march=x86-64-v4,
// and 32-byte vectors already saturate memory bandwidth on the memory-bound kernels.
std::string codegen_march();

// Generated kernels write a store of at least this many bytes with non-temporal (streaming)
// stores (jit/cpu/emit.cpp): measured_stream_bytes (jit/cpu/stream_probe.hpp), or
// CRESCENT_CPU_STREAM_BYTES (tests set 1: every eligible store streams; 1e15: none does). The
// compiler processes get the program's.
int64_t stream_store_bytes();

}  // namespace cr::jit::cpu
