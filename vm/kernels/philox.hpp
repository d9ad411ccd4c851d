// Philox4x32-10, the counter-based generator of rand / randn / randint. Element i of a draw uses
// counter (offset + i) and key = seed, so the CPU and CUDA code paths give identical values.
#pragma once
#include <cmath>
#include <cstdint>

namespace cr {

struct Philox4 { uint32_t v[4]; };

inline Philox4 philox(uint64_t counter, uint64_t seed) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// uniform in [0, 1) with 53 random bits
inline double philox_uniform(uint64_t counter, uint64_t seed) {
  Philox4 r = philox(counter, seed);
  uint64_t bits = (uint64_t(r.v[0]) << 21) ^ (r.v[1] >> 11);
  return double(bits & ((uint64_t(1) << 53) - 1)) * 0x1.0p-53;
}

// standard normal by Box-Muller on the four 32-bit words
inline double philox_normal(uint64_t counter, uint64_t seed) {
  Philox4 r = philox(counter, seed);
  double u1 = (double((uint64_t(r.v[0]) << 20) ^ r.v[1]) + 1.0) * 0x1.0p-52;  // (0, 1]
  double u2 = double((uint64_t(r.v[2]) << 20) ^ r.v[3]) * 0x1.0p-52;
  u1 = u1 > 1.0 ? 1.0 : u1;
  u2 = u2 - std::floor(u2);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

inline uint64_t philox_u64(uint64_t counter, uint64_t seed) {
  Philox4 r = philox(counter, seed);
  return (uint64_t(r.v[0]) << 32) | r.v[1];
}

}  // namespace cr
