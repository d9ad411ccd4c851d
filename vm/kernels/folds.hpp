// The folds of the reduction ops (see reduce.hpp for the interface): sums of a transform of the
// values, products, extremes, positions of extremes, mean/variance (Welford / Chan), log-sum-exp
// and all/any. Each is a template over the input storage type; float16 / bfloat16 fold in float.
#pragma once
#include <cmath>
#include <limits>
#include <type_traits>

#include "vm/kernels/lanes.hpp"

namespace cr::folds {

template <class C> constexpr bool is_float_v = std::is_floating_point_v<C>;
template <class C> constexpr C nan_v() { return std::numeric_limits<C>::quiet_NaN(); }

using lanes::Identity;

// Σ f(x): floating values are summed in `Lane` precision within blocks of kBlock elements and
// the blocks in double (blocked summation: the error grows with the block, not with n);
// integers and bools are summed in uint64: an int64 sum that overflows wraps, as in PyTorch,
// without signed-overflow UB (the result is stored back as int64, modulo 2^64).
template <class T, class Lane = compute_t<T>, class F = Identity> struct Sum {
  using In = T;
  using Acc = std::conditional_t<is_float_v<Lane>, double, uint64_t>;
  static constexpr bool ordered = false;
  static constexpr bool kBlockCols = true;  // (reduce.hpp cols_blocked: faster over outer rows)
  F f{};
  Acc init() const { return 0; }
  void run(Acc& a, const T* x, int64_t n, int64_t) const {
    for (int64_t i = 0; i < n; i += lanes::kBlock)
      a = wrapping_add(a, Acc(lanes::sum<Lane>(x + i, std::min(lanes::kBlock, n - i), f)));
  }
  void cols(Acc* a, const T* x, int64_t m, int64_t) const {
    for (int64_t j = 0; j < m; ++j) a[j] = wrapping_add(a[j], Acc(f(load(x[j]))));
  }
  void merge(Acc& a, const Acc& b) const { a = wrapping_add(a, b); }
};
template <class T> using sum_lane_t = std::conditional_t<is_float_v<compute_t<T>>, compute_t<T>, uint64_t>;

// Π x, in double for floating inputs and int64 (wrapping) for integers and bools.
template <class T> struct Prod {
  using In = T;
  using Acc = std::conditional_t<is_float_v<compute_t<T>>, double, int64_t>;
  static constexpr bool ordered = false;
  static constexpr bool kBlockCols = true;  // (reduce.hpp cols_blocked: faster over outer rows)
  Acc init() const { return 1; }
  void run(Acc& a, const T* x, int64_t n, int64_t) const {
    using U = std::make_unsigned_t<int64_t>;  // integer overflow wraps (defined for unsigned)
    for (int64_t i = 0; i < n; i += lanes::kBlock) {
      int64_t len = std::min(lanes::kBlock, n - i);
      if constexpr (is_float_v<Acc>) a *= lanes::prod<Acc>(x + i, len);
      else a = Acc(U(a) * U(lanes::prod<U>(x + i, len)));
    }
  }
  void cols(Acc* a, const T* x, int64_t m, int64_t) const {
    using U = std::make_unsigned_t<int64_t>;
    for (int64_t j = 0; j < m; ++j) {
      if constexpr (is_float_v<Acc>) a[j] *= Acc(load(x[j]));
      else a[j] = Acc(U(a[j]) * U(int64_t(load(x[j]))));
    }
  }
  void merge(Acc& a, const Acc& b) const {
    if constexpr (is_float_v<Acc>) a *= b;
    else a = Acc(std::make_unsigned_t<int64_t>(a) * std::make_unsigned_t<int64_t>(b));
  }
};

template <bool Max, class C> inline bool better(C v, C a) { return Max ? v > a : v < a; }
template <bool Max, class C> constexpr C worst() {
  if constexpr (std::numeric_limits<C>::has_infinity) return Max ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
  else return Max ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
}

// The largest (Max) or smallest f(x), NaN if any value is NaN (amax, amin, the inf norms).
template <class T, bool Max, class C = compute_t<T>, class F = Identity> struct Extreme {
  using In = T;
  using Acc = C;
  static constexpr bool ordered = false;
  static constexpr bool kBlockCols = true;  // (reduce.hpp cols_blocked: faster over outer rows)
  F f{};
  Acc init() const { return worst<Max, C>(); }
  void run(Acc& a, const T* x, int64_t n, int64_t) const {
    bool nan = false;
    C v = lanes::extreme<Max, C>(x, n, &nan, f);
    merge(a, nan ? nan_v<C>() : v);
  }
  void cols(Acc* a, const T* x, int64_t m, int64_t) const {
    for (int64_t j = 0; j < m; ++j) merge(a[j], C(f(load(x[j]))));
  }
  void merge(Acc& a, const Acc& b) const {
    if (!lanes::is_nan(a) && (lanes::is_nan(b) || better<Max>(b, a))) a = b;
  }
};

// The smallest and the largest value in one pass (aminmax): each block of the run is read twice
// while it is in L1, so memory is read once. NaN if any value is NaN.
template <class C> struct LowHigh {
  C lo, hi;
};
template <class T, class C = compute_t<T>> struct Extremes {
  using In = T;
  using Acc = LowHigh<C>;
  static constexpr bool ordered = false;
  Acc init() const { return {worst<false, C>(), worst<true, C>()}; }
  void run(Acc& a, const T* x, int64_t n, int64_t) const {
    for (int64_t i = 0; i < n; i += lanes::kBlock) {
      const int64_t len = std::min(lanes::kBlock, n - i);
      bool nan = false;
      const C lo = lanes::extreme<false, C>(x + i, len, &nan, Identity{});
      const C hi = lanes::extreme<true, C>(x + i, len, &nan, Identity{});
      merge(a, nan ? Acc{nan_v<C>(), nan_v<C>()} : Acc{lo, hi});
    }
  }
  void cols(Acc* a, const T* x, int64_t m, int64_t) const {
    for (int64_t j = 0; j < m; ++j) merge(a[j], Acc{C(load(x[j])), C(load(x[j]))});
  }
  void merge(Acc& a, const Acc& b) const {
    Extreme<T, false, C>{}.merge(a.lo, b.lo);
    Extreme<T, true, C>{}.merge(a.hi, b.hi);
  }
};

// The first position of the largest (Max) or smallest value; a NaN beats everything and the
// first NaN wins, as in PyTorch. Positions are 0-based in the reduced range.
template <class C> struct ValueAt {
  C v;
  int64_t i;  // -1: nothing seen yet
};
template <class T, bool Max> struct Arg {
  using In = T;
  using C = compute_t<T>;
  using Acc = ValueAt<C>;
  static constexpr bool ordered = true;
  Acc init() const { return {C(0), -1}; }
  void run(Acc& a, const T* x, int64_t n, int64_t idx) const {
    bool nan = false;
    C best = lanes::extreme<Max, C>(x, n, &nan, Identity{});
    int64_t j = 0;  // the first element equal to the extreme (or the first NaN)
    if (nan) while (!lanes::is_nan(load(x[j]))) ++j;
    else while (!(load(x[j]) == best)) ++j;
    merge(a, Acc{load(x[j]), idx + j});
  }
  void cols(Acc* a, const T* x, int64_t m, int64_t idx) const {
    for (int64_t j = 0; j < m; ++j) merge(a[j], Acc{load(x[j]), idx});
  }
  void merge(Acc& a, const Acc& b) const {
    if (b.i < 0) return;
    if (a.i < 0 || (!lanes::is_nan(a.v) && (lanes::is_nan(b.v) || better<Max>(b.v, a.v)))) a = b;
  }
};

// Count, mean and sum of squared deviations (M2), merged with Chan's formula. Contiguous runs
// are folded a block at a time (block mean, then the block's M2 around it, both vectorised);
// columns use Welford's update.
struct Moments {
  double n, mean, m2;
};
inline void merge_moments(Moments& a, const Moments& b) {
  if (b.n == 0) return;
  if (a.n == 0) { a = b; return; }
  double n = a.n + b.n, d = b.mean - a.mean;
  a.mean += d * (b.n / n);
  a.m2 += b.m2 + d * d * (a.n * b.n / n);
  a.n = n;
}
template <class T> struct Var {
  using In = T;
  using C = compute_t<T>;
  using Acc = Moments;
  static constexpr bool ordered = false;
  static constexpr bool kBlockCols = true;  // (reduce.hpp cols_blocked: faster over outer rows)
  Acc init() const { return {0, 0, 0}; }
  void run(Acc& a, const T* x, int64_t n, int64_t) const {
    for (int64_t i = 0; i < n; i += lanes::kBlock) {
      int64_t len = std::min(lanes::kBlock, n - i);
      // Deviations from a shift c near the mean: Σ(v - mean)² = Σ(v - c)² - (Σ(v - c))² / len
      // for any c. Both sums use the same rounded c (the identity holds for it), and a
      // constant block gives exactly 0; rounding can still leave a tiny negative: clamp.
      C c = C(double(lanes::sum<C>(x + i, len, Identity{})) / double(len));
      double s1 = double(lanes::sum<C>(x + i, len, [c](C v) { return v - c; }));
      double s2 = double(lanes::sum<C>(x + i, len, [c](C v) { C d = v - c; return d * d; }));
      double m2 = s2 - s1 * s1 / double(len);
      if (m2 < 0) m2 = 0;  // (NaN stays NaN)
      merge_moments(a, Moments{double(len), double(c) + s1 / double(len), m2});
    }
  }
  void cols(Acc* a, const T* x, int64_t m, int64_t) const {
    for (int64_t j = 0; j < m; ++j) {
      double v = double(load(x[j]));
      a[j].n += 1;
      double d = v - a[j].mean;
      a[j].mean += d / a[j].n;
      a[j].m2 += d * (v - a[j].mean);
    }
  }
  void merge(Acc& a, const Acc& b) const { merge_moments(a, b); }
};

// log Σ exp(x) kept as (max, Σ exp(x - max)), so it never overflows.
template <class C> struct MaxSum {
  C m, s;
};
template <class T> struct LogSumExp {
  using In = T;
  using C = compute_t<T>;
  using Acc = MaxSum<C>;
  static constexpr bool ordered = false;
  Acc init() const { return {-std::numeric_limits<C>::infinity(), C(0)}; }
  void run(Acc& a, const T* x, int64_t n, int64_t) const {
    for (int64_t i = 0; i < n; i += lanes::kBlock) {
      int64_t len = std::min(lanes::kBlock, n - i);
      bool nan = false;
      C m = lanes::extreme<true, C>(x + i, len, &nan, Identity{});
      if (nan) m = nan_v<C>();
      C s = std::isfinite(m) ? C(lanes::exp_sum(x + i, len, m)) : C(1);
      merge(a, Acc{m, s});
    }
  }
  void cols(Acc* a, const T* x, int64_t m, int64_t) const {
    for (int64_t j = 0; j < m; ++j) merge(a[j], Acc{C(load(x[j])), C(1)});
  }
  void merge(Acc& a, const Acc& b) const {
    if (std::isnan(a.m) || std::isnan(b.m)) { a.m = nan_v<C>(); return; }
    C m = std::max(a.m, b.m);
    if (std::isinf(m)) {  // all -inf (stays -inf) or some +inf (the result is +inf)
      a.m = m;
      return;
    }
    a.s = (a.m == m ? a.s : a.s * std::exp(a.m - m)) + (b.m == m ? b.s : b.s * std::exp(b.m - m));
    a.m = m;
  }
  static double result(const Acc& a) {
    if (std::isnan(a.m) || std::isinf(a.m)) return double(a.m);
    return double(a.m) + std::log(double(a.s));
  }
};

// all (All) / any of x != 0.
template <class T, bool All> struct Truth {
  using In = T;
  using Acc = uint8_t;
  static constexpr bool ordered = false;
  static constexpr bool kBlockCols = true;  // (reduce.hpp cols_blocked: faster over outer rows)
  Acc init() const { return All; }
  void run(Acc& a, const T* x, int64_t n, int64_t) const {
    if (a != All) return;  // already decided
    a = All ? lanes::all_nonzero(x, n) : lanes::any_nonzero(x, n);
  }
  void cols(Acc* a, const T* x, int64_t m, int64_t) const {
    for (int64_t j = 0; j < m; ++j) {
      uint8_t v = load(x[j]) != 0;
      a[j] = All ? (a[j] & v) : (a[j] | v);
    }
  }
  void merge(Acc& a, const Acc& b) const { a = All ? (a & b) : (a | b); }
};

}  // namespace cr::folds
