// Scalar definitions of the pointwise ops, written once as templates over the compute type
// (float, double, int32_t, int64_t, bool). The eager kernels call them per element; the
// registry keeps each op's expression text for the code generators.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "vm/dtype.hpp"
#include "vm/kernels/vmath.hpp"

namespace cr::sm {

template <class T> constexpr bool is_int = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <class T> inline T floor_(T a) { if constexpr (std::is_floating_point_v<T>) return std::floor(a); else return a; }
template <class T> inline T ceil_(T a) { if constexpr (std::is_floating_point_v<T>) return std::ceil(a); else return a; }
template <class T> inline T round_(T a) { if constexpr (std::is_floating_point_v<T>) return std::nearbyint(a); else return a; }
template <class T> inline T trunc_(T a) { if constexpr (std::is_floating_point_v<T>) return std::trunc(a); else return a; }
// Integer negation wraps (-INT64_MIN == INT64_MIN), as PyTorch's: the unsigned form has no UB.
template <class T> inline T neg_(T a) {
  if constexpr (is_int<T>) return T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(a));
  else return -a;
}
template <class T> inline T abs_(T a) { return a < T(0) ? neg_(a) : a; }
// Integer + - * wrap around on overflow too (dtype.hpp: wrapping_add), as PyTorch's.
template <class T> inline T add_(T a, T b) { return wrapping_add(a, b); }
template <class T> inline T sub_(T a, T b) { return wrapping_sub(a, b); }
template <class T> inline T mul_(T a, T b) { return wrapping_mul(a, b); }
// a * b + c rounded once where PyTorch's kernels have an FMA (addcmul, lerp); written out, not left
// to contraction, so that generated code (EOp::Arith "fma") can do the same (integers wrap).
template <class T> inline T fma_(T a, T b, T c) {
  if constexpr (std::is_floating_point_v<T>) return std::fma(a, b, c);
  else return add_(mul_(a, b), c);
}
template <class T> inline T sign_(T a) { return T((T(0) < a) - (a < T(0))); }  // sign(nan) = 0, as torch
template <class T> inline T relu_(T a) {
  if constexpr (std::is_floating_point_v<T>) { if (std::isnan(a)) return a; }
  return a > T(0) ? a : T(0);
}
// These call vmath:: functions and are always inlined: a call left in a kernel's loop would stop it
// from vectorising. silu is x sigmoid(x) rather than x / (1 + e^-x), whose e^-x overflows for
// x < -88 (float) and gives -0 instead of the tiny negative result.
template <class T> [[gnu::always_inline]] inline T silu_(T a) { return a * vmath::sigmoid(a); }
// leaky_relu's slope b and elu's alpha b apply where a > 0 fails (NaN included: it propagates)
template <class T> [[gnu::always_inline]] inline T leaky_relu_(T a, T b) { return a > T(0) ? a : a * b; }
template <class T> [[gnu::always_inline]] inline T elu_(T a, T b) { return a > T(0) ? a : b * vmath::expm1(a); }
// softplus with beta b, linear past beta * a > 20 (PyTorch's default threshold); mish, logsigmoid
// (stable: min(a, 0) - log1p(e^-|a|)), hardsigmoid and hardswish as PyTorch's (NaN propagates)
template <class T> [[gnu::always_inline]] inline T softplus_(T a, T b) {
  const T z = a * b;
  return z > T(20) ? a : vmath::log1p(vmath::exp(z)) / b;
}
template <class T> [[gnu::always_inline]] inline T mish_(T a) { return a * vmath::tanh(softplus_(a, T(1))); }
template <class T> [[gnu::always_inline]] inline T logsigmoid_(T a) {
  return (a < T(0) ? a : T(0)) - vmath::log1p(vmath::exp(a < T(0) ? a : -a));
}
template <class T> inline T hardsigmoid_(T a) { return a <= T(-3) ? T(0) : a >= T(3) ? T(1) : a / T(6) + T(0.5); }
template <class T> inline T hardswish_(T a) {  // (a times the clamped a + 3: -inf gives NaN, as PyTorch's)
  T c = a + T(3);
  c = c < T(0) ? T(0) : c;
  return a * (c > T(6) ? T(6) : c) / T(6);
}
// sqrt(a^2 + b^2) without overflow or underflow in between, as PyTorch's (std::hypot)
template <class T> inline T hypot_(T a, T b) { return std::hypot(a, b); }
// erf's inverse: a rational first guess (Pavlis's, the central range and the tails), then two
// Newton steps on erf, as PyTorch's calc_erfinv; NaN past +-1, +-inf at +-1
template <class T> inline T erfinv_(T y) {
  const T ay = y < T(0) ? -y : y;
  if (ay > T(1)) return T(NAN);
  if (ay == T(1)) return y < T(0) ? T(-INFINITY) : T(INFINITY);
  T x;
  if (ay <= T(0.7)) {
    const T z = y * y;
    const T num = ((T(-0.140543331) * z + T(0.914624893)) * z + T(-1.645349621)) * z + T(0.886226899);
    const T den = (((T(0.012229801) * z + T(-0.329097515)) * z + T(1.442710462)) * z + T(-2.118377725)) * z + T(1);
    x = y * num / den;
  } else {  // (NaN lands here and stays NaN)
    const T z = std::sqrt(-vmath::log((T(1) - ay) / T(2)));
    const T num = ((T(1.641345311) * z + T(3.429567803)) * z + T(-1.624906493)) * z + T(-1.970840454);
    const T den = (T(1.637067800) * z + T(3.543889200)) * z + T(1);
    x = std::copysign(num, y) / den;
  }
  const T k = T(1.12837916709551257390);  // 2 / sqrt(pi)
  x = x - (vmath::erf(x) - y) / (k * vmath::exp(-x * x));
  return x - (vmath::erf(x) - y) / (k * vmath::exp(-x * x));
}
template <class T> [[gnu::always_inline]] inline T gelu_(T a) { return T(0.5) * a * (T(1) + vmath::erf(a * T(0.70710678118654752440))); }
template <class T> [[gnu::always_inline]] inline T gelu_tanh_(T a) {
  const T k = T(0.79788456080286535588), c = T(0.044715);
  return T(0.5) * a * (T(1) + vmath::tanh(k * (a + c * a * a * a)));
}
// gelu's gradient g * dgelu/dx in one pass, PyTorch's GeluBackward formulas (GeluKernel.cpp).
template <class T> [[gnu::always_inline]] inline T gelu_backward_(T g, T x) {
  const T cdf = T(0.5) * (T(1) + vmath::erf(x * T(0.70710678118654752440)));
  const T pdf = T(0.39894228040143267794) * vmath::exp(x * x * T(-0.5));
  return g * (cdf + x * pdf);
}
template <class T> [[gnu::always_inline]] inline T gelu_tanh_backward_(T g, T x) {
  const T k = T(0.79788456080286535588), c = T(0.044715);
  const T th = vmath::tanh(k * (x + c * x * x * x));
  return g * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * k * (T(1) + T(3) * c * x * x));
}
template <class T> inline T rsqrt_(T a) { return T(1) / std::sqrt(a); }
template <class T> inline bool isnan_(T a) { if constexpr (std::is_floating_point_v<T>) return std::isnan(a); else return false; }
template <class T> inline bool isinf_(T a) { if constexpr (std::is_floating_point_v<T>) return std::isinf(a); else return false; }

// NaN-propagating max / min, as torch.maximum / torch.minimum.
template <class T> inline T maximum_(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN(); }
  return a > b ? a : b;
}
template <class T> inline T minimum_(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN(); }
  return a < b ? a : b;
}
// Integer division by zero is checked before these run (see pointwise.cpp).
template <class T> inline T fmod_(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::fmod(a, b);
  else if constexpr (is_int<T>) return b == T(-1) ? T(0) : T(a % b);
  else return T(a && !b);
}
template <class T> inline T remainder_(T a, T b) {  // Python's %: the sign of the divisor
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b);
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? r + b : r;
  } else if constexpr (is_int<T>) {
    if (b == T(-1)) return T(0);
    T r = T(a % b);
    return (r != 0 && ((r < 0) != (b < 0))) ? T(r + b) : r;
  } else return T(a && !b);
}
// div(a, b, {rounding_mode = "floor" | "trunc"}), as PyTorch's div_floor / div_trunc: the float
// floor from fmod (exact where floor(a / b) would round a quotient up to the next integer)
template <class T> inline T div_floor_(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b == T(0)) return a / b;
    T mod = std::fmod(a, b), div = (a - mod) / b;
    if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
    if (div == T(0)) return std::copysign(T(0), a / b);
    T fl = std::floor(div);
    return div - fl > T(0.5) ? fl + T(1) : fl;
  } else if constexpr (is_int<T>) {
    if (b == T(-1)) return T(0 - std::make_unsigned_t<T>(a));  // (wraps at the minimum, as PyTorch)
    T q = T(a / b);
    return ((a < 0) != (b < 0)) && T(a % b) != 0 ? T(q - 1) : q;
  } else return a;
}
template <class T> inline T div_trunc_(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::trunc(a / b);
  else if constexpr (is_int<T>) return b == T(-1) ? T(0 - std::make_unsigned_t<T>(a)) : T(a / b);
  else return a;
}
template <class T> inline T pow_(T a, T b) {
  if constexpr (is_int<T>) {  // exponentiation by squaring, wrapping like PyTorch
    using U = std::make_unsigned_t<T>;
    if (b < 0) return a == 1 ? T(1) : a == -1 ? T((b & 1) ? -1 : 1) : T(0);
    U r = 1, base = U(a);
    for (T e = b; e; e >>= 1, base *= base)
      if (e & 1) r *= base;
    return T(r);
  } else if constexpr (std::is_same_v<T, bool>) return a || !b;
  else return std::pow(a, b);
}
// clamp's bounds, as torch.clamp: a NaN value or bound gives NaN
template <class T> inline T clamp_min_(T a, T lo) { return a != a ? a : lo != lo ? lo : a < lo ? lo : a; }
template <class T> inline T clamp_max_(T a, T hi) { return a != a ? a : hi != hi ? hi : a > hi ? hi : a; }
template <class T> inline T lerp_(T a, T b, T w) {
  return std::abs(w) < T(0.5) ? fma_(w, b - a, a) : fma_(a - b, T(1) - w, b);
}

// pow(x, e) of a floating tensor and a number e: as PyTorch, the common exponents are
// multiplications or square roots (several times faster than pow, and what torch computes, so
// results match torch's bit for bit where its kernels do the same). Eager and compiled code both
// use this table, so they agree.
enum class PowForm { Generic, Identity, Square, Cube, Sqrt, Rsqrt, Reciprocal, InvSquare };
inline PowForm pow_form(double e) {
  if (e == 1) return PowForm::Identity;
  if (e == 2) return PowForm::Square;
  if (e == 3) return PowForm::Cube;
  if (e == 0.5) return PowForm::Sqrt;
  if (e == -0.5) return PowForm::Rsqrt;
  if (e == -1) return PowForm::Reciprocal;
  if (e == -2) return PowForm::InvSquare;
  return PowForm::Generic;
}

}  // namespace cr::sm
