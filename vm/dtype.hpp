// dtypes: the seven element types of API.md, their storage types, compute types and PyTorch's
// promotion rules. float16 / bfloat16 are stored as 16-bit words and computed in float.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "vm/abi.h"

namespace cr {

enum class DType : int8_t {  // (vm/abi.h's codes, which Lua reads)
  f32 = CR_FLOAT32, f64 = CR_FLOAT64, f16 = CR_FLOAT16, bf16 = CR_BFLOAT16, i32 = CR_INT32, i64 = CR_INT64, b8 = CR_BOOL
};
constexpr int kNumDTypes = CR_NUM_DTYPES;

struct Half { uint16_t bits; };
struct BFloat16 { uint16_t bits; };

inline float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);            // inf / nan
  else if (exp != 0) bits = sign | ((exp + 112) << 23) | (man << 13);  // normal
  else if (man == 0) bits = sign;                                      // zero
  else {                                                               // subnormal: normalise
    int e = -1;
    do { man <<= 1; ++e; } while (!(man & 0x400));
    bits = sign | uint32_t(112 - e) << 23 | ((man & 0x3ff) << 13);
  }
  float f; std::memcpy(&f, &bits, 4); return f;
}

inline uint16_t float_to_half(float f) {  // round to nearest even
  uint32_t x; std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00);                 // overflow -> inf
  if (ax < 0x38800000u) {                                              // subnormal or zero
    float a; std::memcpy(&a, &ax, 4);
    // add 0.5 (2^-1) so the FPU rounds the low bits away: classic magic-number trick
    float r = a + 0.5f; uint32_t rb; std::memcpy(&rb, &r, 4);
    return uint16_t(sign | (rb - 0x3f000000u));  // may carry into the exponent: correct
  }
  uint32_t odd = (ax >> 13) & 1;
  ax += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round
  return uint16_t(sign | (ax >> 13));
}

inline float bf16_to_float(uint16_t h) { uint32_t b = uint32_t(h) << 16; float f; std::memcpy(&f, &b, 4); return f; }
inline uint16_t float_to_bf16(float f) {
  uint32_t x; std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet nan
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

// Storage type -> compute type, and the converting load / store used by every kernel.
template <class T> struct Compute { using type = T; };
template <> struct Compute<Half> { using type = float; };
template <> struct Compute<BFloat16> { using type = float; };
template <class T> using compute_t = typename Compute<T>::type;

template <class T> inline compute_t<T> load(const T& v) { return v; }
// A bool's byte as it is: memory no op wrote (empty) may hold any byte, and reading one that is
// neither 0 nor 1 as a bool is undefined behaviour; any nonzero byte reads as true.
inline bool load(const bool& v) {
  unsigned char b;
  std::memcpy(&b, &v, 1);
  return b != 0;
}
inline float load(const Half& v) { return half_to_float(v.bits); }
inline float load(const BFloat16& v) { return bf16_to_float(v.bits); }

// A floating value out of an integer type's range (NaN included) is undefined behaviour to
// convert in C++: such values store the type's minimum, what x86's conversion instructions give
// (and so PyTorch and the JIT's code on x86: x:int() of NaN is -2^31 in all three).
template <class T, class C> inline T float_to_int(C v) {
  constexpr C lo = C(std::numeric_limits<T>::min());  // -2^31 or -2^63: exact in float / double
  return v >= lo && v < -lo ? static_cast<T>(v) : std::numeric_limits<T>::min();
}
// Integer arithmetic wraps around on overflow, as PyTorch's (two's complement): sums and
// products of integers are computed in the unsigned type, where overflow is defined.
// unsigned_if_int_t<T> is that type for int32 / int64, T itself otherwise.
template <class T, bool = std::is_integral_v<T> && !std::is_same_v<T, bool>> struct UnsignedIfInt { using type = T; };
template <class T> struct UnsignedIfInt<T, true> { using type = std::make_unsigned_t<T>; };
template <class T> using unsigned_if_int_t = typename UnsignedIfInt<T>::type;
template <class T> inline T wrapping_add(T a, T b) { using U = unsigned_if_int_t<T>; return T(U(a) + U(b)); }
template <class T> inline T wrapping_sub(T a, T b) { using U = unsigned_if_int_t<T>; return T(U(a) - U(b)); }
template <class T> inline T wrapping_mul(T a, T b) { using U = unsigned_if_int_t<T>; return T(U(a) * U(b)); }

template <class T, class C> inline void store(T& dst, C v) {
  if constexpr (std::is_integral_v<T> && std::is_floating_point_v<C>) dst = float_to_int<T>(v);
  else dst = static_cast<T>(v);
}
template <class C> inline void store(Half& dst, C v) { dst.bits = float_to_half(float(v)); }
template <class C> inline void store(BFloat16& dst, C v) { dst.bits = float_to_bf16(float(v)); }
template <class C> inline void store(bool& dst, C v) { dst = v != C(0); }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<Half>() { return DType::f16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<bool>() { return DType::b8; }

// Calls f(T{}) with the storage type of d: the one place where a dtype becomes a C++ type, so
// kernels are written once as templates and instantiated for every dtype from here.
template <class F> decltype(auto) visit(DType d, F&& f) {
  switch (d) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(Half{});
    case DType::bf16: return f(BFloat16{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::b8: break;
  }
  return f(bool{});
}

size_t dtype_size(DType d);
const char* dtype_name(DType d);
// The C type of d in generated code ("float", "int64_t", "bool"; "?" for float16 / bfloat16).
const char* ctype(DType d);
bool parse_dtype(const std::string& s, DType* out);
DType dtype_named(const std::string& s);  // parse_dtype, or an error listing the dtypes
inline bool is_floating(DType d) { return d == DType::f32 || d == DType::f64 || d == DType::f16 || d == DType::bf16; }
inline bool is_integral(DType d) { return d == DType::i32 || d == DType::i64; }
// The largest value of floating d below 1: rand's draws, made in double, are clamped to it so that
// rounding to d never gives 1 (rand is [0, 1), as PyTorch's)
inline double largest_below_one(DType d) {
  return d == DType::f16 ? 1 - 0x1p-11 : d == DType::bf16 ? 1 - 0x1p-8 : d == DType::f32 ? 1 - 0x1p-24 : 1 - 0x1p-53;
}

// Promotion category: bool < integer < floating.
int category(DType d);
DType promote(DType a, DType b);
// float ops on integer or bool inputs compute in the default dtype (float32), as PyTorch does
inline DType to_floating(DType d) { return is_floating(d) ? d : DType::f32; }

}  // namespace cr
