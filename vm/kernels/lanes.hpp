// Vectorisable building blocks of the reduction and softmax kernels. GCC does not reassociate
// floating-point sums on its own (no -ffast-math), so each fold keeps kLanes independent
// accumulators: the inner `for l` loop over them is what the compiler turns into SIMD code, and
// the lanes are combined pairwise at the end (which also keeps rounding errors small).
#pragma once
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <type_traits>

#include "vm/dtype.hpp"
#ifdef __AVX__
#include <immintrin.h>
#endif

namespace cr::lanes {

constexpr int kLanes = 16;
constexpr int64_t kBlock = 4096;  // elements folded in lane precision before a wider merge
// Softmax rows fold in blocks of this many elements (vm/ops/scans.cpp): the block of the code
// generator's inner loops (jit::kBlock asserts it), whose reductions fold a block per call.
constexpr int64_t kSoftmaxBlock = 512;

struct Identity {
  template <class V> V operator()(V v) const { return v; }
};

template <class T> inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  else return false;
}

// Explicit vectors: GCC does not vectorise selects (max, clamps) on floats by itself, since a
// float op that might trap is never moved out of a branch; GCC's vector extensions say it
// directly. V<C> holds 32 bytes of C (AVX2 registers; narrower targets split them).
template <class C> struct VecOf { typedef C type __attribute__((vector_size(32))); };
template <class C> using V = typename VecOf<C>::type;
template <class C> constexpr int kWidth = int(32 / sizeof(C));
template <class C> inline V<C> vload(const C* p) { V<C> v; std::memcpy(&v, p, sizeof v); return v; }
template <class C> inline void vstore(C* p, V<C> v) { std::memcpy(p, &v, sizeof v); }

// Σ f(x[i]) over n <= kBlock elements, computed in type A. 256 bytes of lanes are eight AVX
// registers: enough independent adds in flight to cover the add latency at two loads a cycle.
template <class A> constexpr int kSumLanes = int(256 / sizeof(A)) < 8 ? 8 : int(256 / sizeof(A));
template <class A> A sum_vectors(const A* x, int64_t n);
template <class A, class T, class F> inline A sum(const T* x, int64_t n, F f) {
  if constexpr (std::is_floating_point_v<A> && std::is_same_v<T, A> && std::is_same_v<F, Identity>) return sum_vectors(x, n);
  constexpr int L = kSumLanes<A>;
  using U = unsigned_if_int_t<A>;  // integer sums wrap around (dtype.hpp)
  U acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) acc[l] += U(A(f(load(x[i + l]))));
  for (int l = 0; i < n; ++i, ++l) acc[l] += U(A(f(load(x[i]))));
  for (int w = L / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return A(acc[0]);
}

// sum's lanes as vector registers (lane l is element l % W of vector l / W), with sum's folds in
// its order, so its bits: an array of lanes lives on the stack, and zeroing it and folding it
// cost a row of a few thousand elements ~15 % (generated row reductions call this per row).
// The rest goes into lanes 0.. as in sum, zeros after it: a lane starts at +0 and so is never
// -0, and x + 0 is x.
template <class A> inline A sum_vectors(const A* x, int64_t n) {
  constexpr int W = kWidth<A>, NV = kSumLanes<A> / W;
  V<A> acc[NV] = {};
  int64_t i = 0;
  for (; i + NV * W <= n; i += NV * W)
    for (int v = 0; v < NV; ++v) acc[v] += vload(x + i + v * W);
  for (int v = 0; i < n; ++v, i += W) {
    if (i + W <= n) {
      acc[v] += vload(x + i);
      continue;
    }
    A part[W] = {};
    for (int l = 0; i + l < n; ++l) part[l] = x[i + l];
    acc[v] += vload(part);
  }
  for (int w = NV / 2; w > 0; w /= 2)  // (the folds of whole vectors, then within vector 0)
    for (int v = 0; v < w; ++v) acc[v] += acc[v + w];
  A t[W];
  vstore(t, acc[0]);
  for (int w = W / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) t[l] += t[l + w];
  return t[0];
}

// Σ f(x[i]) over any n: lanes of type A within blocks of kBlock, the blocks added in double.
template <class A, class T, class F> inline double blocked_sum(const T* x, int64_t n, F f) {
  double s = 0;
  for (int64_t i = 0; i < n; i += kBlock) s += double(sum<A>(x + i, n - i < kBlock ? n - i : kBlock, f));
  return s;
}

// Π x[i] in type A.
template <class A, class T> inline A prod(const T* x, int64_t n) {
  A acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = A(1);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] *= A(load(x[i + l]));
  for (int l = 0; i < n; ++i, ++l) acc[l] *= A(load(x[i]));
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] *= acc[l + w];
  return acc[0];
}

// ---- explicit vectors (V<C>, above) --------------------------------------------------------
template <class C> inline V<C> splat(C c) { return c - V<C>{}; }  // (not 0 + c: that makes -0 +0)

// The largest (Max) or smallest of n >= 1 contiguous floats / doubles / int32 / int64; *nan: any
// NaN seen (never for integers).
template <bool Max, class C> inline C vec_extreme(const C* x, int64_t n, bool* nan) {
  constexpr int W = kWidth<C>;
  using M = decltype(V<C>{} > V<C>{});
  V<C> a0 = splat(x[0]), a1 = a0;
  M b0 = {}, b1 = {};
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    V<C> v0 = vload(x + i), v1 = vload(x + i + W);
    a0 = (Max ? v0 > a0 : v0 < a0) ? v0 : a0;
    a1 = (Max ? v1 > a1 : v1 < a1) ? v1 : a1;
    b0 |= v0 != v0;
    b1 |= v1 != v1;
  }
  a0 = (Max ? a1 > a0 : a1 < a0) ? a1 : a0;
  b0 |= b1;
  C r = a0[0];
  bool bad = false;
  for (int l = 0; l < W; ++l) {
    r = (Max ? a0[l] > r : a0[l] < r) ? a0[l] : r;
    bad |= b0[l] != 0;
  }
  for (; i < n; ++i) {
    r = (Max ? x[i] > r : x[i] < r) ? x[i] : r;
    bad |= x[i] != x[i];
  }
  *nan = bad;
  return r;
}

// One step of a max folded element after element, as eager softmax folds a column: v replaces
// m when it is larger or NaN (so the last NaN seen wins; ties keep the first value).
template <class C> inline C max_step(C m, C v) { return (v > m || v != v) ? v : m; }

// The largest (Max) or smallest f(x[i]) of n >= 1 elements; *nan is set when any is NaN.
template <bool Max, class C, class T, class F> inline C extreme(const T* x, int64_t n, bool* nan, F f) {
  if constexpr (std::is_same_v<T, C> && (std::is_floating_point_v<C> || std::is_same_v<C, int32_t> || std::is_same_v<C, int64_t>) &&
                std::is_same_v<F, Identity>) {
    return vec_extreme<Max>(x, n, nan);
  } else {
    C r = C(f(load(x[0])));
    bool bad = false;
    for (int64_t i = 0; i < n; ++i) {
      C v = C(f(load(x[i])));
      r = (Max ? v > r : v < r) ? v : r;
      bad |= is_nan(v);
    }
    *nan = bad;
    return r;
  }
}

// Whether any x[i] is non-zero (NaN counts as non-zero, as in PyTorch).
template <class T> inline bool any_nonzero(const T* x, int64_t n) {
  int acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] |= load(x[i + l]) != 0;
  for (; i < n; ++i) acc[0] |= load(x[i]) != 0;
  int r = 0;
  for (int l = 0; l < kLanes; ++l) r |= acc[l];
  return r != 0;
}
template <class T> inline bool all_nonzero(const T* x, int64_t n) {
  int acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = 1;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] &= load(x[i + l]) != 0;
  for (; i < n; ++i) acc[0] &= load(x[i]) != 0;
  int r = 1;
  for (int l = 0; l < kLanes; ++l) r &= acc[l];
  return r != 0;
}

// exp(x) for a float or a V<float>, without branches but one (whether a vector has a subnormal
// result). Cephes' method: x = k ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial, then
// the scaling by 2^k (k in [-150, 128] after the clamp) as two products by powers of two, or into
// the subnormals as an integer's bits, rounded once as ldexp would. Error <= 2 ulp; results below
// the float range become 0 (or subnormals), above it inf; NaN stays NaN (it passes the clamps,
// whose comparisons are false, and every later step). k is read from the bits of the rounding sum
// t, so a NaN never goes through an int conversion. The AVX-512 twin (vm/ops/scans.cpp
// exp_loop_avx512) does the same steps with one scalef for the scaling, and gives the same bits.
namespace exp_c {
constexpr float hi = 89.0f, lo = -104.0f, log2e = 1.44269504088896341f, round = 12582912.0f;  // 1.5 * 2^23
constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
constexpr float p0 = 1.9875691500e-4f, p1 = 1.3981999507e-3f, p2 = 8.3334519073e-3f, p3 = 4.1665795894e-2f,
                p4 = 1.6666665459e-1f, p5 = 5.0000001201e-1f;
constexpr int32_t round_bits = 0x4B400000;  // the bits of `round`
}  // namespace exp_c
inline int32_t bits_of(float t) { return std::bit_cast<int32_t>(t); }
inline V<int32_t> bits_of(V<float> t) { return std::bit_cast<V<int32_t>>(t); }
inline float from_bits(int32_t e) { return std::bit_cast<float>(e); }
inline V<float> from_bits(V<int32_t> e) { return std::bit_cast<V<float>>(e); }
inline bool any_lane(V<int32_t> mask) {
#ifdef __AVX__
  return !_mm256_testz_si256(std::bit_cast<__m256i>(mask), std::bit_cast<__m256i>(mask));
#else
  uint64_t q[4];
  std::memcpy(q, &mask, sizeof q);
  return (q[0] | q[1] | q[2] | q[3]) != 0;
#endif
}

template <class X> inline X exp_poly(X x) {
  using namespace exp_c;
  const X zero{};
  X xc = x > hi ? zero + hi : x;
  xc = xc < lo ? zero + lo : xc;
  X t = xc * log2e + round;  // k = round-to-nearest(x / ln2), in t's low mantissa bits
  X k = t - round;
  X r = xc - k * ln2_hi;
  r = r - k * ln2_lo;
  X p = r * p0 + p1;
  p = p * r + p2;
  p = p * r + p3;
  p = p * r + p4;
  p = p * r + p5;
  p = p * r * r + r + 1.0f;
  auto ki = bits_of(t) - round_bits;
  auto products = [&p](auto kn) {
    auto k1 = kn >> 1, k2 = kn - k1;
    return p * from_bits((k1 + 127) << 23) * from_bits((k2 + 127) << 23);
  };
  // a subnormal result (k < -126) is built as bits, as vmath::scale does (no underflowing product)
  auto sub = k < -126.0f;  // false for NaN
  if constexpr (!std::is_same_v<X, float>)
    if (!any_lane(sub)) return products(ki);
  auto zi = ki - ki;
  X v = p * from_bits(((sub ? ki + 149 : zi) + 127) << 23) + 8388608.0f;  // + 2^23 rounds to an integer
  return sub ? from_bits(bits_of(v) - 0x4B000000) : products(sub ? zi : ki);
}
inline float exp_fast(float x) { return exp_poly(x); }
inline double exp_fast(double x) { return std::exp(x); }

// y[i] = exp_poly(x[i]) over n contiguous values, W lanes at a time (GCC does not vectorise
// exp_poly's selects for AVX2 by itself); y may be x. Every lane computes what the scalar
// exp_poly computes, so an element's bits do not depend on its position.
inline void exp_block(const float* x, float* y, int64_t n) {
  constexpr int W = kWidth<float>;
  int64_t i = 0;
  for (; i + W <= n; i += W) vstore(y + i, exp_poly(vload(x + i)));
  for (; i < n; ++i) y[i] = exp_poly(x[i]);
}

// Σ exp(x[i] - m) over n contiguous values, also stored to y when y is not null. Float lanes
// within blocks of kBlock, the blocks added in double.
inline double exp_sum(const float* x, float* y, int64_t n, float m) {
  constexpr int W = kWidth<float>;
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    V<float> acc = {};
    int64_t i = b;
    for (; i + W <= e; i += W) {
      V<float> v = exp_poly(vload(x + i) - m);
      if (y) vstore(y + i, v);
      acc += v;
    }
    float s = 0;
    for (int l = 0; l < W; ++l) s += acc[l];
    for (; i < e; ++i) {
      float v = exp_poly(x[i] - m);
      if (y) y[i] = v;
      s += v;
    }
    total += s;
  }
  return total;
}
inline double exp_sum(const double* x, double* y, int64_t n, double m) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v = std::exp(x[i] - m);
    if (y) y[i] = v;
    s += v;
  }
  return s;
}
// Any storage type (float16 / bfloat16 convert element by element).
template <class T, class C> inline double exp_sum(const T* x, int64_t n, C m) {
  if constexpr (std::is_same_v<T, C>) return exp_sum(x, static_cast<C*>(nullptr), n, m);
  else return blocked_sum<C>(x, n, [m](C v) { return exp_fast(v - m); });
}

}  // namespace cr::lanes
