// Philox4x32-10, the counter-based generator of rand / randn / randint. Element i of a draw uses
// counter (offset + i) and key = seed. The arithmetic is written once, in CR_PHILOX: the CPU
// compiles it here, and the CUDA prelude (vm/kernels/cuda/prelude.cpp) takes its text (CR_PHILOX_TEXT),
// so that CPU and CUDA draws are the same integers (randn's log / cos are each side's own).
#pragma once
#include <cmath>
#include <cstdint>

#include "vm/kernels/vmath.hpp"

// F: the function specifiers ("inline" here, "__forceinline__" in CUDA). uniform: [0, 1) with 53
// random bits; normal: Box-Muller on the four 32-bit words (philox_box's two uniforms); u64: 64
// random bits.
#define CR_PHILOX(F)                                                                            \
  F void philox(uint64_t counter, uint64_t seed, uint32_t* out) {                               \
    uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;              \
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);                                    \
    for (int r = 0; r < 10; ++r) {                                                              \
      uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;                \
      uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;            \
      c1 = uint32_t(p1);                                                                        \
      c3 = uint32_t(p0);                                                                        \
      c0 = n0;                                                                                  \
      c2 = n2;                                                                                  \
      k0 += 0x9E3779B9u;                                                                        \
      k1 += 0xBB67AE85u;                                                                        \
    }                                                                                           \
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;                                         \
  }                                                                                             \
  F double philox_uniform(uint64_t counter, uint64_t seed) {                                    \
    uint32_t r[4];                                                                              \
    philox(counter, seed, r);                                                                   \
    uint64_t bits = (uint64_t(r[0]) << 21) ^ (r[1] >> 11);                                      \
    return double(bits & ((uint64_t(1) << 53) - 1)) * 0x1.0p-53;                                \
  }                                                                                             \
  F void philox_box(uint64_t counter, uint64_t seed, double* u1, double* u2) {                 \
    uint32_t r[4];                                                                              \
    philox(counter, seed, r);                                                                   \
    *u1 = (double((uint64_t(r[0]) << 20) ^ r[1]) + 1.0) * 0x1.0p-52; /* (0, 1] */               \
    *u2 = double((uint64_t(r[2]) << 20) ^ r[3]) * 0x1.0p-52;                                    \
    *u1 = *u1 > 1.0 ? 1.0 : *u1;                                                                \
    *u2 = *u2 - floor(*u2);                                                                     \
  }                                                                                             \
  F double box_muller(double u1, double u2) {                                                   \
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);                                  \
  }                                                                                             \
  F double philox_normal(uint64_t counter, uint64_t seed) {                                     \
    double u1, u2;                                                                              \
    philox_box(counter, seed, &u1, &u2);                                                        \
    return box_muller(u1, u2);                                                                  \
  }                                                                                             \
  F uint64_t philox_u64(uint64_t counter, uint64_t seed) {                                      \
    uint32_t r[4];                                                                              \
    philox(counter, seed, r);                                                                   \
    return (uint64_t(r[0]) << 32) | r[1];                                                       \
  }

#define CR_PHILOX_STR(...) #__VA_ARGS__
#define CR_PHILOX_XSTR(...) CR_PHILOX_STR(__VA_ARGS__)  // (expands CR_PHILOX first)
#define CR_PHILOX_TEXT(F) CR_PHILOX_XSTR(CR_PHILOX(F))

namespace cr {
using std::cos, std::floor, std::log, std::sqrt;

// The CPU's draws take vmath's log and cos (vectorisable; libm's calls are not), always inlined
// (a call left in philox_normals' loop would stop it from vectorising).
namespace philox_cpu {
using std::floor, std::sqrt;
using vmath::cos, vmath::log;
CR_PHILOX(inline __attribute__((always_inline)))
}  // namespace philox_cpu
using philox_cpu::philox, philox_cpu::philox_uniform, philox_cpu::philox_normal, philox_cpu::philox_u64;

// philox_normal of n draws, counter(i) and seed(i) for draw i, into out: box_muller's arithmetic
// in its order (so the same bits), a block of draws a step: the Philox words, then the log and
// cos in a loop that vectorises, then the square roots (std::sqrt keeps errno: not vectorised).
template <class Counter, class Seed> void philox_normals(Counter counter, Seed seed, double* out, int64_t n) {
  constexpr int64_t kBlock = 256;
  double u1[kBlock], u2[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = n - b < kBlock ? n - b : kBlock;
    for (int64_t i = 0; i < m; ++i) philox_cpu::philox_box(counter(b + i), seed(b + i), &u1[i], &u2[i]);
    for (int64_t i = 0; i < m; ++i) {
      u1[i] = -2.0 * vmath::log(u1[i]);
      u2[i] = vmath::cos(6.283185307179586 * u2[i]);
    }
    for (int64_t i = 0; i < m; ++i) out[b + i] = std::sqrt(u1[i]) * u2[i];
  }
}
}  // namespace cr
