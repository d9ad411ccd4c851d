// Vectorisable elementary functions for the eager CPU kernels and the code generators.
//
// std::exp / std::log / ... are calls into libm, which stop GCC from vectorising the pointwise
// loops (glibc's vector libmvec is only used under -ffast-math, which we cannot use because NaN
// and infinity semantics matter). These versions are always-inlined, branch-free arithmetic:
// every special case is a detail::blend of two computed values, there are no table lookups, and
// the bit manipulations are std::bit_cast on unsigned integers, so a loop calling them compiles
// to AVX2 code at -O2 / -O3 -march=x86-64-v3 (bench/bench_vmath.cpp measures and shows it).
// They rely on IEEE arithmetic as written: never compile them with -ffast-math or
// -fassociative-math (x + 0x1.8p23f - 0x1.8p23f is how they round). Contraction of a*b+c into
// fma (GCC's default) is harmless: no error-free transformation here has a product to fuse.
//
// Accuracy, measured by tests/cpp/test_vmath.cpp against double / long double references:
// within 2 ulp of the correctly rounded result (most within 1 ulp) for float and double, with
// IEEE special values (NaN in -> NaN out, overflow -> inf, gradual underflow, log(0) = -inf,
// log(<0) = NaN, exp(-inf) = 0, tanh / erf saturate to +-1, odd functions keep the sign of 0).
// sin / cos / tan reduce the argument with a three-part pi/2 (Cody-Waite; Payne-Hanek needs a
// table lookup by exponent, which GCC does not vectorise with generic tuning): accurate for
// |x| < kTrigLimit (2^48 float, 2^50 double); larger finite arguments return NaN rather than a
// silently wrong value (PyTorch / SLEEF compute those too; float inputs there are integers
// 2^25 apart, so the value has no meaning for a model anyway).
//
// float sin / cos near zero (|x| <= 256) compute in float (16 lanes of AVX-512), beyond in
// double as float tan everywhere (the reduction needs the extra precision);
// everything else computes in the argument's own type. Coefficients: scripts/vmath_coeffs.py (float
// tanh: scripts/tanh_coeffs.py).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

// Always inlined: a call left in a loop (GCC's size heuristics give up on erf<double>) would
// stop it from vectorising.
#define CR_VMATH_INLINE inline __attribute__((always_inline))
// The next loop's iterations do not depend on each other through memory (y may be x, element
// for element): GCC's ivdep, clang's (the fuzz build's) assume_safety.
#if defined(__clang__)
#define CR_VMATH_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#else
#define CR_VMATH_IVDEP _Pragma("GCC ivdep")
#endif

namespace cr::vmath {

template <class T> concept Real = std::is_same_v<T, float> || std::is_same_v<T, double>;

// |x| from which sin / cos / tan return NaN (argument reduction would no longer be accurate).
template <Real T> inline constexpr T kTrigLimit = std::is_same_v<T, float> ? T(0x1p48) : T(0x1p50);

namespace detail {

template <class T> struct Fp;
template <> struct Fp<float> {
  using U = uint32_t;
  static constexpr int kMant = 23;      // explicit mantissa bits
  static constexpr U kBias = 127;
  static constexpr float kShift = 0x1.8p23f;  // x + kShift - kShift rounds x to an integer
};
template <> struct Fp<double> {
  using U = uint64_t;
  static constexpr int kMant = 52;
  static constexpr U kBias = 1023;
  static constexpr double kShift = 0x1.8p52;
};
template <class T> using U = typename Fp<T>::U;
template <class T> constexpr bool kFloat = std::is_same_v<T, float>;

template <class T> CR_VMATH_INLINE U<T> bits(T x) { return std::bit_cast<U<T>>(x); }
template <class T> CR_VMATH_INLINE T from_bits(U<T> u) { return std::bit_cast<T>(u); }
// c ? a : b as bit operations on both values. With a plain ternary GCC sinks the computation
// of a value used in one arm only into a branch, and -ftrapping-math (the default) then forbids
// if-converting that branch back, so the loop would not vectorise. This compiles to a blend.
template <class T> CR_VMATH_INLINE T blend(bool c, T a, T b) {
  U<T> m = U<T>(0) - U<T>(c);
  return from_bits<T>(U<T>((bits(a) & m) | (bits(b) & ~m)));
}
template <class T> CR_VMATH_INLINE T inf() { return std::numeric_limits<T>::infinity(); }
template <class T> CR_VMATH_INLINE T nan() { return std::numeric_limits<T>::quiet_NaN(); }

// x rounded to the nearest integer (ties to even), for |x| < 2^(kMant-1): no conversion
// instruction, and NaN / inf pass through as NaN / inf.
template <class T> CR_VMATH_INLINE T rint(T x) { return (x + Fp<T>::kShift) - Fp<T>::kShift; }

// 2^k for an integral k in [1 - bias, bias], built in the exponent field: bits(k + kShift) holds
// k in its low bits, and only the low exponent-width bits survive the shift.
template <class T> CR_VMATH_INLINE T pow2i(T k) {
  return from_bits<T>(U<T>((bits(k + Fp<T>::kShift) + Fp<T>::kBias) << Fp<T>::kMant));
}

// y * 2^k for an integral k in [2 (1 - bias), 2 bias]: two factors, so that results in the
// subnormal range are rounded once (y * 2^h is exact) and overflow gives inf.
template <class T> CR_VMATH_INLINE T scale_products(T y, T k) {
  T h = rint(k * T(0.5));
  return y * pow2i(h) * pow2i(k - h);
}
// The same bits for y in [1/2, 2), but a subnormal result (k < 1 - bias) built as bits (x86 takes
// a microcode assist per product that underflows): y 2^(k + kSub) is exact and below 2^mant, + 2^mant
// rounds it as the product would; + 0 flushes it under T.set_flush_denormal, as the product's would be.
template <class T> CR_VMATH_INLINE T scale(T y, T k) {
  constexpr T kMin = T(1) - T(Fp<T>::kBias), kSub = T(Fp<T>::kBias - 1 + Fp<T>::kMant);
  const bool sub = k < kMin;
  const T m = T(U<T>(1) << Fp<T>::kMant), v = y * pow2i(blend(sub, k + kSub, T(0))) + m;
  return blend(sub, from_bits<T>(U<T>(bits(v) - bits(m))) + T(0), scale_products(y, blend(sub, T(0), k)));
}

// c[0] + x c[1] + x^2 c[2] + ..., unrolled at compile time (no loop left for the vectoriser).
template <std::size_t I = 0, class T, std::size_t N> CR_VMATH_INLINE T horner(T x, const T (&c)[N]) {
  if constexpr (I + 1 == N) return c[I];
  else return std::fma(horner<I + 1>(x, c), x, c[I]);
}

// Piecewise polynomials: coefficient I of the first piece j whose flag in[j] is set (the last
// piece when none is), selected per lane with blends, then one Horner evaluation.
template <std::size_t I, class T, std::size_t M, std::size_t N, std::size_t... J>
CR_VMATH_INLINE T pick(const bool (&in)[M - 1], const T (&c)[M][N], std::index_sequence<J...>) {
  T v = c[M - 1][I];
  ((v = blend(in[M - 2 - J], c[M - 2 - J][I], v)), ...);  // the lowest piece is applied last
  return v;
}
template <std::size_t I = 0, class T, std::size_t M, std::size_t N>
CR_VMATH_INLINE T horner_pieces(T x, const bool (&in)[M - 1], const T (&c)[M][N]) {
  T ci = pick<I>(in, c, std::make_index_sequence<M - 1>{});
  if constexpr (I + 1 == N) return ci;
  else return std::fma(horner_pieces<I + 1>(x, in, c), x, ci);
}

// ---- coefficients (weighted minimax fits, scripts/vmath_coeffs.py) ------------------------
// exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2
inline constexpr float kExpF[] = {0x1.fffffcp-2f, 0x1.55548ap-3f, 0x1.555916p-5f, 0x1.123fb4p-7f, 0x1.6a1a8ep-10f};
inline constexpr double kExpD[] = {0x1.000000000000bp-1, 0x1.55555555554fp-3,  0x1.555555555025dp-5,
                                   0x1.1111111129941p-7, 0x1.6c16c185981fcp-10, 0x1.a01a01233f46ap-13,
                                   0x1.a01995fa141f6p-16, 0x1.71df2eb65c216p-19, 0x1.28b15bb9c2f43p-22,
                                   0x1.ad7acd5d6edebp-26};
// expm1(r) = r + r^2 P(r), relative to expm1(r)
inline constexpr float kExpm1F[] = {0x1p-1f, 0x1.555554p-3f, 0x1.5554aap-5f, 0x1.11118ep-7f, 0x1.6d78c4p-10f, 0x1.a0332cp-13f};
inline constexpr double kExpm1D[] = {0x1p-1,                0x1.5555555555559p-3,  0x1.555555555553cp-5,
                                     0x1.111111110f4bbp-7,  0x1.6c16c16c1fb2fp-10, 0x1.a01a01b0c5e8bp-13,
                                     0x1.a01a017997c32p-16, 0x1.71ddf5e195312p-19, 0x1.27e5387f9cba9p-22,
                                     0x1.af6360492e125p-26, 0x1.1ee8709eaba6p-29};
// 2^r = 1 + r Q(r), |r| <= 1/2
inline constexpr float kExp2F[] = {0x1.62e432p-1f,  0x1.ebfbe2p-3f,  0x1.c6ae72p-5f,
                                   0x1.3b270ep-7f, 0x1.5f7276p-10f, 0x1.470b4ap-13f};
inline constexpr double kExp2D[] = {0x1.62e42fefa39efp-1,  0x1.ebfbdff82c58fp-3,  0x1.c6b08d704a0d6p-5,
                                    0x1.3b2ab6fba4ea8p-7,  0x1.5d87fe78a130ep-10, 0x1.430912f85993bp-13,
                                    0x1.ffcbfc7ac31b7p-17, 0x1.62c0229a66d2ep-20, 0x1.b524d0eb0b81ap-24,
                                    0x1.e4cd9d7d33a67p-28, 0x1.ea14220b726a6p-32, 0x1.c6d99d85e501fp-36};
// log(1+f) = f - f^2/2 + s (f^2/2 + z T(z)), s = f / (2 + f), z = s^2 <= 0.0295
inline constexpr float kLogF[] = {0x1.55555cp-1f, 0x1.9976f4p-2f, 0x1.2fc9f4p-2f};
inline constexpr double kLogD[] = {0x1.5555555555555p-1, 0x1.99999999991e8p-2, 0x1.249249270336ap-2,
                                   0x1.c71c6b45dd265p-3, 0x1.746081028027dp-3, 0x1.3a4116f18b4fbp-3,
                                   0x1.286d1100e6fafp-3};
// sin(r) = r + r^3 S(r^2), cos(r) = 1 - r^2/2 + r^4 C(r^2); float's are evaluated in double
inline constexpr double kSinF[] = {-0x1.55555555553a6p-3, 0x1.1111110ff35fdp-7, -0x1.a019fd041cd0cp-13,
                                   0x1.71d8d5090fe79p-19, -0x1.a9aef700af3f8p-26};
inline constexpr double kCosF[] = {0x1.55555555554dap-5, -0x1.6c16c16b73567p-10, 0x1.a019fefd28e1ep-16,
                                   -0x1.27e1e572f2242p-22, 0x1.1c3c4e7eb2997p-29};
inline constexpr double kSinD[] = {-0x1.5555555555555p-3, 0x1.1111111111111p-7,  -0x1.a01a01a019e3fp-13,
                                   0x1.71de3a54f3f14p-19,  -0x1.ae6454fd61165p-26, 0x1.6122271cc0979p-33,
                                   -0x1.ab70ca3430b7ap-41};
inline constexpr double kCosD[] = {0x1.5555555555555p-5,  -0x1.6c16c16c16c17p-10, 0x1.a01a01a019f47p-16,
                                   -0x1.27e4fb77545f4p-22, 0x1.1eed8e53ee404p-29,  -0x1.93954f8a73a43p-37,
                                   0x1.abc77bed210acp-45};
// double tanh(x) = x + x^3 P(x^2), |x| < 0.5494
inline constexpr double kTanhD[] = {-0x1.5555555555555p-2, 0x1.111111111111p-3,   -0x1.ba1ba1ba1b399p-5,
                                    0x1.664f48823df89p-6,  -0x1.226e35208d246p-7, 0x1.d6d3b51142568p-9,
                                    -0x1.7d9ffd6a7e4acp-10, 0x1.3519c38dd3b48p-11, -0x1.f0167e69c4322p-13,
                                    0x1.72749911350aap-14, -0x1.7f8d6a811a7c1p-16};
// float tanh (scripts/tanh_coeffs.py): tanh(x) = x + x u N(u) / M(u), u = x^2 <= 1, relative error
// 2^-30.2; tanh(h) = h / E(h^2), |h| <= ln2/4, error 2^-30.8 in the e^-2h it gives
inline constexpr float kTanhNF[] = {-0x1.555554p-2f, -0x1.df6626p-7f};
inline constexpr float kTanhMF[] = {1.0f, 0x1.c68b0cp-2f, 0x1.007348p-6f};
inline constexpr float kTanhEF[] = {1.0f, 0x1.555514p-2f, -0x1.6a8bccp-6f};
// erf(x) = x + x P(x^2), |x| < 1
inline constexpr float kErfF[] = {0x1.06eba8p-3f,  -0x1.81273ep-2f, 0x1.ce2cf8p-4f, -0x1.b7f90ep-6f,
                                  0x1.5405b2p-8f, -0x1.a3f7p-11f,   0x1.496a32p-14f};
inline constexpr double kErfD[] = {0x1.06eba8214db69p-3,  -0x1.812746b0379e7p-2,  0x1.ce2f21a042be2p-4,
                                   -0x1.b82ce31288b4fp-6,  0x1.565bcd0e6a425p-8,  -0x1.c02db40035cc6p-11,
                                   0x1.f9a326f612d53p-14,  -0x1.f4d25b84e56a6p-17, 0x1.b9e6b2b63fa5fp-20,
                                   -0x1.5f724aea6cc17p-23, 0x1.fc91191a29d0bp-27,  -0x1.4ff9bca2a9f0cp-30,
                                   0x1.88bdb71a9d999p-34,  -0x1.439f30bea9cdbp-38};
// erfc(x) = exp(-x^2) R(x - mid) on [1, 2.2] (mid 1.6) and [2.2, 4] (mid 3.1)
inline constexpr float kErfcMidF[2][1] = {{1.6f}, {3.1f}};
inline constexpr float kErfcF[2][8] = {
    {0x1.394bbcp-2f, -0x1.31d3bap-3f, 0x1.128ba6p-4f, -0x1.cbb83ep-6f, 0x1.69a892p-7f, -0x1.0f0fb4p-8f,
     0x1.a4e9f8p-10f, -0x1.1bcd4cp-11f},
    {0x1.63c678p-3f, -0x1.a47468p-5f, 0x1.dec952p-7f, -0x1.0786e6p-8f, 0x1.18443ap-10f, -0x1.22e78ep-12f,
     0x1.446fc6p-14f, -0x1.3c2c4cp-16f}};
// ... and on [1, 1.75], [1.75, 2.75], [2.75, 4], [4, 6] (mids 1.375, 2.25, 3.375, 5)
inline constexpr double kErfcMidD[4][1] = {{1.375}, {2.25}, {3.375}, {5.0}};
inline constexpr double kErfcD[4][16] = {
    {0x1.5f88f52f3c76bp-2, -0x1.797a639d8129dp-3, 0x1.701342cbcea82p-4, -0x1.4bcdb9d9083b6p-5,
     0x1.17eba60d30fddp-6, -0x1.bdf24bccadc07p-8, 0x1.51ab9ffead002p-9, -0x1.e8ae68b36f088p-11,
     0x1.535f56719c5bfp-12, -0x1.c5fa6ac93adacp-14, 0x1.254f8dbab96dfp-15, -0x1.6f06871dd483fp-17,
     0x1.bd54cbc41edaep-19, -0x1.07013c92ba3eap-20, 0x1.3c0021b9d7888p-22, -0x1.5feda1a1dcd5ep-24},
    {0x1.d94446d627932p-3, -0x1.6a70d2bb37411p-4, 0x1.0615670e25a8ep-5, -0x1.6883f9919a159p-7,
     0x1.da595561f1957p-9, -0x1.2bd251bb30668p-10, 0x1.6d7743d9f17d9p-12, -0x1.aed7ebca4ddc6p-14,
     0x1.ec7736a71929bp-16, -0x1.117a651c17f43p-17, 0x1.27b0e48f6f5b8p-19, -0x1.37baa68260f37p-21,
     0x1.406c8a1067068p-23, -0x1.42a2363d7511p-25, 0x1.50f75d1eab57dp-27, -0x1.4323c744233cfp-29},
    {0x1.48f8f10299b71p-3, -0x1.696d353f008b5p-5, 0x1.804cc157141a5p-7, -0x1.8c84c13afb9b2p-9,
     0x1.8de5f26a782fdp-11, -0x1.8511846d9f67ap-13, 0x1.7350e3a7f0037p-15, -0x1.5a61388ed2097p-17,
     0x1.3c3b6aa9fb053p-19, -0x1.1ae03ea503382p-21, 0x1.f05e6a05d4d08p-24, -0x1.ab8143d24da77p-26,
     0x1.691b8c17a2c0cp-28, -0x1.2c89fd6335ff6p-30, 0x1.065582a0d8da9p-32, -0x1.a4ca355c29fb9p-35},
    {0x1.c57239e943d1ap-4, -0x1.5d843497d4f3ap-6, 0x1.08cf82b79a27dp-8, -0x1.8abc198707c8p-11,
     0x1.219f2c3319456p-13, -0x1.a2a81d24a7afbp-16, 0x1.2a41156827c25p-18, -0x1.a3193d28105adp-21,
     0x1.228a5c3e1c8a6p-23, -0x1.8dab9dd8143aap-26, 0x1.0cced7155f38p-28, -0x1.6700134df942cp-31,
     0x1.d7a4c1c782618p-34, -0x1.33f182a6043f1p-36, 0x1.b9d8964c46661p-39, -0x1.18be05e774c2p-41}};

// ---- constants ----------------------------------------------------------------------------
template <class T> struct K;
template <> struct K<float> {
  static constexpr float log2e = 0x1.715476p+0f, log2e_lo = 0x1.4ae0cp-26f;
  static constexpr float ln2_hi = 0x1.62e43p-1f, ln2_lo = -0x1.05c61p-29f;  // ln2_hi: fma-exact
  static constexpr float ln2_hi16 = 0x1.62e4p-1f, ln2_lo16 = 0x1.7f7d1cp-20f;  // k ln2_hi16 exact
  static constexpr float exp_lo = -104.0f, exp_hi = 89.0f;       // exp(x) rounds to 0 / inf beyond
  static constexpr float exp_normal = -87.0f;                    // exp(x) is normal from here up
  static constexpr float exp2_lo = -152.0f, exp2_hi = 129.0f;
  static constexpr float expm1_lo = -30.0f;                      // expm1(x) rounds to -1 below
  static constexpr float tiny = 0x1p-26f;                        // f(x) rounds to x below (expm1, log1p)
  static constexpr float sub_scale = 0x1p25f, sub_log2 = 25.0f;  // lifts subnormals for log
  static constexpr float erf_max = 4.0f;                         // erf(x) rounds to 1 beyond
  static constexpr float tanh_max = 10.0f;                       // tanh(x) rounds to 1 beyond
};
template <> struct K<double> {
  static constexpr double log2e = 0x1.71547652b82fep+0, log2e_lo = 0x1.777d0ffda0d24p-56;
  static constexpr double ln2_hi = 0x1.62e42fefa39efp-1, ln2_lo = 0x1.abc9e3b39803fp-56;
  static constexpr double ln2_hi16 = 0x1.62e42feep-1, ln2_lo16 = 0x1.a39ef35793c76p-33;
  static constexpr double exp_lo = -746.0, exp_hi = 710.0;
  static constexpr double exp_normal = -708.0;
  static constexpr double exp2_lo = -1080.0, exp2_hi = 1025.0;
  static constexpr double expm1_lo = -45.0;
  static constexpr double tiny = 0x1p-55;
  static constexpr double sub_scale = 0x1p54, sub_log2 = 54.0;
  static constexpr double erf_max = 6.0;
  static constexpr double tanh_max = 20.0;
};
// pi/2 = C1 + C2 + C3 (C1 * k is fma-exact), 2/pi
inline constexpr double kPio2_1 = 0x1.921fb54442d18p+0, kPio2_2 = 0x1.1a62633145c07p-54,
                        kPio2_3 = -0x1.f1976b7ed8fbcp-110;
inline constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1, kTwoOverPiLo = -0x1.6b01ec5417056p-55;

template <class T> CR_VMATH_INLINE T expm1_reduced(T r) {  // exp(r) - 1 for |r| <= ln2/2, for exp
  if constexpr (kFloat<T>) return std::fma(r * r, horner(r, kExpF), r);
  else return std::fma(r * r, horner(r, kExpD), r);
}

// x clamped to [lo, hi]; NaN passes through (both comparisons are false).
template <class T> CR_VMATH_INLINE T clamp(T x, T lo, T hi) {
  x = blend(x > hi, hi, x);
  return blend(x < lo, lo, x);
}

// x = k ln2 + r with |r| <= ln2/2 (+ rounding); k is integral and |x| < 2^(kMant-2).
template <class T> CR_VMATH_INLINE T reduce_ln2(T x, T& k) {
  k = rint(x * K<T>::log2e);
  T r = std::fma(-k, K<T>::ln2_hi, x);  // exact: the result is small and has no finer bits
  return std::fma(-k, K<T>::ln2_lo, r);
}
// ... with the rounding error of r: x = k ln2 + r + rl.
template <class T> CR_VMATH_INLINE T reduce_ln2(T x, T& k, T& rl) {
  k = rint(x * K<T>::log2e);
  T r1 = std::fma(-k, K<T>::ln2_hi, x);
  T r = std::fma(-k, K<T>::ln2_lo, r1);
  rl = std::fma(-k, K<T>::ln2_lo, r1 - r);  // r1 - r is exact (they are close)
  return r;
}

// log(x) + c for finite x > 0 (subnormals included) and a small correction c; fdlibm's scheme:
// x = 2^k (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), log(1+f) = f - f^2/2 + s (f^2/2 + R(s^2)).
template <class T> struct LogParts {
  T k, f, hfsq, tail;  // log(x) = k ln2 + f - hfsq + tail
};
template <class T> CR_VMATH_INLINE LogParts<T> log_parts(T x) {
  constexpr int kBits = int(sizeof(T)) * 8;
  constexpr U<T> kSign = U<T>(1) << (kBits - 1);
  constexpr U<T> kExpMask = ~((U<T>(1) << Fp<T>::kMant) - 1);  // sign + exponent field
  bool sub = x < std::numeric_limits<T>::min();
  x = blend(sub, x * K<T>::sub_scale, x);
  U<T> ix = bits(x);
  U<T> tmp = ix - bits(T(0.70710678118654752440));  // its top bits are k, as a signed number
  // k + 2^(w-1) in the exponent-width field (w = kBits - kMant), turned into a float exactly
  U<T> kb = (tmp ^ kSign) >> Fp<T>::kMant;
  constexpr T two_mant = T(U<T>(1) << Fp<T>::kMant);
  constexpr T bias_k = T(U<T>(1) << (kBits - Fp<T>::kMant - 1));
  T k = from_bits<T>(bits(two_mant) | kb) - (two_mant + bias_k);
  k = blend(sub, k - K<T>::sub_log2, k);
  T z = from_bits<T>(ix - (tmp & kExpMask));  // x / 2^k, in [sqrt(1/2), sqrt(2))
  T f = z - T(1);
  T s = f / (T(2) + f);
  T w = s * s;
  T R;
  if constexpr (kFloat<T>) R = w * horner(w, kLogF);
  else R = w * horner(w, kLogD);
  T hfsq = T(0.5) * f * f;
  return {k, f, hfsq, s * (hfsq + R)};
}

// The special cases shared by log, log2 and log1p, on the argument of the logarithm.
template <class T> CR_VMATH_INLINE T log_special(T x, T res) {
  res = blend(x == inf<T>(), x, res);
  res = blend(x == T(0), -inf<T>(), res);
  return blend(x >= T(0), res, nan<T>());  // negative or NaN
}

template <class T> CR_VMATH_INLINE T log_corrected(T x, T c) {  // log(x) + c, c the correction of log1p
  LogParts<T> p = log_parts(x);
  T res = p.k * K<T>::ln2_hi16 + (p.f - (p.hfsq - (p.tail + (p.k * K<T>::ln2_lo16 + c))));
  return log_special(x, res);
}

// Argument reduction for sin / cos / tan, in double: x = q pi/2 + (r + rl), |r| <= pi/4 (+tiny),
// returned with sin(r + rl), cos(r + rl) and q's low two bits.
struct SinCos {
  double s, c;    // sin(r + rl), cos(r + rl)
  double sl, cl;  // their low parts (double only; 0 for float)
  uint64_t q;
};
template <bool FloatAccuracy> CR_VMATH_INLINE double reduce_pio2(double x, double& rl, uint64_t& q) {
  if constexpr (FloatAccuracy) {
    // a float's |r| may exceed pi/4 by up to 2^-5 (k from x 2/pi rounded; the fits allow 0.85),
    // and r's relative error 2^-53 is far below float's
    double k = rint(x * kTwoOverPi);
    q = bits(k + Fp<double>::kShift) & 3u;
    rl = 0.0;
    return std::fma(-k, kPio2_3, std::fma(-k, kPio2_2, std::fma(-k, kPio2_1, x)));
  }
  // k = nearest integer to x 2/pi, from x 2/pi in double-double so that |r| stays <= pi/4
  double p = x * kTwoOverPi;
  double plo = std::fma(x, kTwoOverPi, -p) + x * kTwoOverPiLo;
  double k = rint(p);
  double frac = (p - k) + plo;
  k += blend(frac > 0.5, 1.0, 0.0) - blend(frac < -0.5, 1.0, 0.0);
  q = bits(k + Fp<double>::kShift) & 3u;
  double r1 = std::fma(-k, kPio2_1, x);  // exact for |k| < 2^50
  double w = k * kPio2_2, wl = std::fma(k, kPio2_2, -w);
  double hi = r1 - w;  // two-sum of r1 and -w
  double bb = hi - r1;
  double lo = ((r1 - (hi - bb)) + (-w - bb)) - wl - k * kPio2_3;
  double r = hi + lo;
  rl = (hi - r) + lo;
  return r;
}
template <bool FloatAccuracy> CR_VMATH_INLINE SinCos sincos_reduced(double r, double rl) {
  double u = r * r;
  if constexpr (FloatAccuracy) {  // float results need neither rl nor the 1 - u/2 care
    double s = std::fma(r * u, horner(u, kSinF), r);
    double c = std::fma(u * u, horner(u, kCosF), std::fma(-0.5, u, 1.0));
    return {s, c, 0.0, 0.0, 0};
  } else {
    // sin(r + rl) = sin r + rl cos r; cos(r + rl) = cos r - rl sin r, with 1 - u/2 split exactly;
    // both as head + tail (fast two-sums: the heads r and w dominate)
    double ts = std::fma(r * u, horner(u, kSinD), rl * std::fma(-0.5, u, 1.0));
    double s = r + ts, sl = (r - s) + ts;
    double ul = std::fma(r, r, -u);
    double hz = 0.5 * u, w = 1.0 - hz;
    double tc = ((1.0 - w) - hz) + (u * u * horner(u, kCosD) - (0.5 * ul + r * rl));
    double c = w + tc, cl = (w - c) + tc;
    return {s, c, sl, cl, 0};
  }
}
template <class T> CR_VMATH_INLINE SinCos sincos_pio2(T x) {
  double rl;
  uint64_t q;
  double r = reduce_pio2<kFloat<T>>(double(x), rl, q);
  SinCos sc = sincos_reduced<kFloat<T>>(r, rl);
  sc.q = q;
  return sc;
}

}  // namespace detail

// ---- exponentials --------------------------------------------------------------------------

namespace detail {
// clamped so that 2^k stays buildable; beyond the clamp the result is already 0 or inf.
// kSubnormal false: for callers whose results are normal (tanh, erf), the products alone.
template <bool kSubnormal, Real T> CR_VMATH_INLINE T exp_scaled(T x) {
  T k, r = reduce_ln2(clamp(x, K<T>::exp_lo, K<T>::exp_hi), k);
  if constexpr (kSubnormal) return scale(T(1) + expm1_reduced(r), k);
  else return scale_products(T(1) + expm1_reduced(r), k);
}
}  // namespace detail

template <Real T> CR_VMATH_INLINE T exp(T x) { return detail::exp_scaled<true>(x); }

namespace detail {
// y[i] = f(x[i]) for n values (y may be x) where f(x) = exp(x) below K::exp_normal: the products
// alone (1.4x faster than scale) over chunks of normal results, then exp's bit building for the
// elements below, if any (found again in y: they kept their argument, f's values are >= 0).
// A subnormal x gives f(0)'s bits (exp 1, sigmoid 1/2) without its products' slow path.
template <Real T, class F> CR_VMATH_INLINE void exp_below_block(const T* x, T* y, int64_t n, F f) {
  constexpr int64_t kChunk = 256;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t e = c + kChunk < n ? c + kChunk : n;
    U<T> low = 0;  // (an integer: GCC does not vectorise a bool reduction)
CR_VMATH_IVDEP
    for (int64_t i = c; i < e; ++i) {
      const T v = x[i];
      const bool below = v < K<T>::exp_normal;  // (false for NaN, as tiny)
      const bool tiny = std::fabs(v) < std::numeric_limits<T>::min();
      low |= U<T>(below);
      y[i] = blend(below, v, f(blend(below | tiny, T(0), v)));
    }
    if (!low) continue;
CR_VMATH_IVDEP
    for (int64_t i = c; i < e; ++i) y[i] = blend(y[i] < K<T>::exp_normal, vmath::exp(y[i]), y[i]);
  }
}
}  // namespace detail

// y[i] = exp(x[i]) for n values (y may be x), each exactly vmath::exp's value.
template <Real T> CR_VMATH_INLINE void exp_block(const T* x, T* y, int64_t n) {
  detail::exp_below_block(x, y, n, [](T v) { return detail::exp_scaled<false>(v); });
}

template <Real T> CR_VMATH_INLINE T exp2(T x) {
  using namespace detail;
  x = clamp(x, K<T>::exp2_lo, K<T>::exp2_hi);
  T k = rint(x), r = x - k;  // exact
  T q;
  if constexpr (kFloat<T>) q = horner(r, kExp2F);
  else q = horner(r, kExp2D);
  return scale(std::fma(r, q, T(1)), k);
}

template <Real T> CR_VMATH_INLINE T expm1(T x) {
  using namespace detail;
  T k, rl, r = reduce_ln2(clamp(x, K<T>::expm1_lo, K<T>::exp_hi), k, rl);
  // u = expm1(r + rl) = r + (r^2 P(r) + rl (1 + r)) as uh + ul
  T p;
  if constexpr (kFloat<T>) p = horner(r, kExpm1F);
  else p = horner(r, kExpm1D);
  T q = std::fma(r * r, p, rl * (T(1) + r));
  T uh = r + q, ul = (r - uh) + q;
  // 2^k (1 + u) - 1 = 2 (s u + (s - 1/2)) with s = 2^(k-1), which stays finite for the largest
  // k: s uh and s - 1/2 are exact and summed exactly (two-sum), so the result rounds once.
  // k = 0 keeps uh itself (exact for tiny x, where halving could lose subnormal bits).
  T s = pow2i(k - T(1));
  T a = s - T(0.5), b = s * uh;
  T sum = a + b, bb = sum - a;
  T err = (a - (sum - bb)) + (b - bb);
  T res = blend(k == T(0), uh, T(2) * (sum + (err + s * ul)));
  return blend(std::fabs(x) < K<T>::tiny, x, res);  // -0 and subnormals
}

// ---- logarithms ----------------------------------------------------------------------------

template <Real T> CR_VMATH_INLINE T log(T x) { return detail::log_corrected(x, T(0)); }

template <Real T> CR_VMATH_INLINE T log2(T x) {
  using namespace detail;
  LogParts<T> p = log_parts(x);
  // log(1+f) = hi + lo, hi = f - hfsq (f - hi is exact); then * log2(e) in double-T arithmetic
  T hi = p.f - p.hfsq;
  T lo = ((p.f - hi) - p.hfsq) + p.tail;
  T yh = hi * K<T>::log2e;
  T yl = std::fma(hi, K<T>::log2e, -yh) + (hi * K<T>::log2e_lo + lo * K<T>::log2e);
  T w = p.k + yh;  // |k| >= 1 > |yh|, or k = 0: fast two-sum
  yl += (p.k - w) + yh;
  return log_special(x, w + yl);
}

template <Real T> CR_VMATH_INLINE T log1p(T x) {
  using namespace detail;
  T u = T(1) + x;
  // log1p(x) = log(u) + c/u, c the rounding error of 1 + x (exact while u's ulp is <= 1)
  T c = x - (u - T(1));
  c = blend(u < T(U<T>(1) << (Fp<T>::kMant + 1)), c, T(0));
  T res = log_corrected(u, c / blend(u == T(0), T(1), u));  // x = -1: no 0/0 (the result is -inf)
  return blend(std::fabs(x) < K<T>::tiny, x, res);  // -0 and subnormals
}

// ---- trigonometric -------------------------------------------------------------------------

namespace detail {
template <Real T> CR_VMATH_INLINE T sin_reduced_in_double(T x) {
  SinCos sc = sincos_pio2(x);
  double v = blend((sc.q & 1u) != 0, sc.c, sc.s);
  v = blend((sc.q & 2u) != 0, -v, v);
  T res = blend(std::fabs(x) < kTrigLimit<T>, T(v), nan<T>());  // inf too
  return blend(std::fabs(x) < K<T>::tiny, x, res);
}

// Float sin for |x| <= kSinNear, all in float (16 lanes of AVX-512 where the double form has 8):
// x = j pi/2 + r with pi/2 in four floats, the first two short enough that j c1 and j c2 are exact
// for |j| < 2^8, and the float-accuracy polynomials evaluated in float. Within 1.6 ulp there
// (tests/cpp/test_vmath.cpp); tiny arguments (-0 included) return themselves. j mod 4 is read
// from the bits of the rounding sum t, as exp reads its k.
inline constexpr float kSinNear = 256.0f;
inline constexpr float kSinFf[] = {float(kSinF[0]), float(kSinF[1]), float(kSinF[2]), float(kSinF[3]), float(kSinF[4])};
inline constexpr float kCosFf[] = {float(kCosF[0]), float(kCosF[1]), float(kCosF[2]), float(kCosF[3]), float(kCosF[4])};
inline constexpr float kPio2f_1 = 1.5703125f, kPio2f_2 = 0x1.fb4p-12f;
inline constexpr float kPio2f_3 = float(kPio2_1 - double(kPio2f_1) - double(kPio2f_2));
inline constexpr float kPio2f_4 = float(kPio2_1 - double(kPio2f_1) - double(kPio2f_2) - double(kPio2f_3) + kPio2_2);
// Cos shifts the quadrant by one: cos(j pi/2 + r) = sin((j + 1) pi/2 + r).
template <bool Cos> CR_VMATH_INLINE float trig_near(float x) {
  float t = x * float(kTwoOverPi) + Fp<float>::kShift;
  float j = t - Fp<float>::kShift;
  uint32_t q = (bits(t) + uint32_t(Cos)) & 3u;
  float r = std::fma(-j, kPio2f_1, x);
  r = std::fma(-j, kPio2f_2, r);
  r = std::fma(-j, kPio2f_3, r);
  r = std::fma(-j, kPio2f_4, r);
  float u = r * r;
  float s = std::fma(r * u, horner(u, kSinFf), r);
  float c = std::fma(u * u, horner(u, kCosFf), std::fma(-0.5f, u, 1.0f));
  float v = blend((q & 1u) != 0, c, s);
  v = blend((q & 2u) != 0, -v, v);
  if constexpr (Cos) return v;  // (tiny x: r = x, c rounds to 1)
  else return blend(std::fabs(x) < K<float>::tiny, x, v);  // -0, and subnormals exactly
}
CR_VMATH_INLINE float sin_near(float x) { return trig_near<false>(x); }
CR_VMATH_INLINE float cos_near(float x) { return trig_near<true>(x); }

template <Real T> CR_VMATH_INLINE T cos_reduced_in_double(T x) {
  SinCos sc = sincos_pio2(x);
  double v = blend((sc.q & 1u) != 0, sc.s, sc.c);
  v = blend(((sc.q + 1u) & 2u) != 0, -v, v);
  return blend(std::fabs(x) < kTrigLimit<T>, T(v), nan<T>());
}

// y[i] = f(x[i]) for n floats (y may be x), f = sin (Cos false) or cos: the float form for every
// element near zero (a loop GCC vectorises; an element beyond keeps its argument), then the
// double form for those, if any (found again in y: the float form's results are within [-1, 1]).
template <bool Cos, class Far> CR_VMATH_INLINE void trig_block(const float* x, float* y, int64_t n, Far far_form) {
  uint32_t far = 0;  // (an integer: GCC does not vectorise a bool reduction)
CR_VMATH_IVDEP
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const bool near = std::fabs(v) <= kSinNear;  // (false for NaN)
    far |= uint32_t(!near);
    y[i] = blend(near, trig_near<Cos>(v), v);
  }
  if (!far) return;
  for (int64_t i = 0; i < n; ++i)
    if (!(std::fabs(y[i]) <= kSinNear)) y[i] = far_form(y[i]);
}
}  // namespace detail

// float: the float form near zero, the double reduction beyond (per element; loops over many
// elements use sin_block, which gives the same value for each).
template <Real T> CR_VMATH_INLINE T sin(T x) {
  using namespace detail;
  if constexpr (kFloat<T>) return std::fabs(x) <= kSinNear ? sin_near(x) : sin_reduced_in_double(x);
  else return sin_reduced_in_double(x);
}

// y[i] = sin(x[i]) / cos(x[i]) for n floats (y may be x), each element exactly vmath::sin's /
// vmath::cos's value (detail::trig_block).
CR_VMATH_INLINE void sin_block(const float* x, float* y, int64_t n) {
  detail::trig_block<false>(x, y, n, [](float v) { return detail::sin_reduced_in_double(v); });
}
CR_VMATH_INLINE void cos_block(const float* x, float* y, int64_t n) {
  detail::trig_block<true>(x, y, n, [](float v) { return detail::cos_reduced_in_double(v); });
}

// float: the float form near zero, the double reduction beyond, as sin.
template <Real T> CR_VMATH_INLINE T cos(T x) {
  using namespace detail;
  if constexpr (kFloat<T>) return std::fabs(x) <= kSinNear ? cos_near(x) : cos_reduced_in_double(x);
  else return cos_reduced_in_double(x);
}

template <Real T> CR_VMATH_INLINE T tan(T x) {
  using namespace detail;
  SinCos sc = sincos_pio2(x);
  // tan = s / c in even quadrants, -c / s in odd ones
  bool odd = sc.q & 1u;
  double n = blend(odd, -sc.c, sc.s), d = blend(odd, sc.s, sc.c);
  double t = n / d;
  if constexpr (!kFloat<T>) {  // (n + nl) / (d + dl), corrected with the exact residual
    double nl = blend(odd, -sc.cl, sc.sl), dl = blend(odd, sc.sl, sc.cl);
    t += (std::fma(-t, d, n) + (nl - t * dl)) / d;
  }
  T res = blend(std::fabs(x) < kTrigLimit<T>, T(t), nan<T>());
  return blend(std::fabs(x) < K<T>::tiny, x, res);
}

// ---- hyperbolic, sigmoid, erf --------------------------------------------------------------

namespace detail {
// float tanh without exp and with one division, which two forms share (chosen per lane, a = |x|):
// a < 1:  a + a u N(u) / M(u), u = a^2: the quotient's relative error counts a third in the result.
// a >= 1: 1 - 2q, q = w / (1 + w) <= 0.12, w = e^-2b, b = a capped where tanh rounds to 1: q's
//         relative error counts a quarter. -2b = k ln2 - 2h (|h| <= ln2/4), e^-2h = (E - h) / (E + h)
//         with h / E(h^2) ~ tanh(h), and the 2^k of w is added to the exponent of E - h (k >= -29).
// Within 1.1 ulp of every float (bench/bench_vmath.cpp tanh-ulp); tiny a gives u = 0, so a itself;
// NaN makes h, so E + h and q, NaN.
CR_VMATH_INLINE float tanh_float(float x) {
  float a = std::fabs(x);
  bool small = a < 1.0f;
  float u = a * a;
  float n = horner(u, kTanhNF), m = horner(u, kTanhMF);
  float b = blend(a > K<float>::tanh_max, K<float>::tanh_max, a);
  float t = std::fma(b, -2.0f * K<float>::log2e, Fp<float>::kShift);  // kShift + k, k in the low bits
  float k = t - Fp<float>::kShift;
  float h = std::fma(k, 0.5f * K<float>::ln2_hi, b);  // (ln2_lo would change 2q by < 0.04 ulp)
  float e = horner(h * h, kTanhEF);
  float w = from_bits<float>(bits(e - h) + (bits(t) << Fp<float>::kMant));
  float q = blend(small, n, w) / blend(small, m, (e + h) + w);
  float res = blend(small, std::fma(a * u, q, a), std::fma(-2.0f, q, 1.0f));
  return std::copysign(res, x);
}

CR_VMATH_INLINE double tanh_double(double x) {
  double a = std::fabs(x);
  double u = a * a;
  double small = std::fma(a * u, horner(u, kTanhD), a);
  // tanh(a) = 1 - 2 / (e + 1), e = e^2a >= e^1.1: q = 2 / (d + dl) with d + dl = e + 1 exactly,
  // corrected once with the exact residual, so that only e's error remains, and it is at least
  // halved in 1 - q (tanh >= 1/2 here). a is capped where tanh rounds to 1 (e stays finite).
  double e = exp_scaled<false>(2.0 * blend(a > K<double>::tanh_max, K<double>::tanh_max, a));
  double d = e + 1.0, dl = (e - d) + 1.0;
  double y = 1.0 / d, q = 2.0 * y;
  q = std::fma(std::fma(-q, d, 2.0) - q * dl, y, q);
  double large = 1.0 - q;
  double res = blend(a < 0.5494, small, large);  // NaN takes the large path and stays NaN
  return std::copysign(res, x);
}
}  // namespace detail

template <Real T> CR_VMATH_INLINE T tanh(T x) {
  if constexpr (detail::kFloat<T>) return detail::tanh_float(x);
  else return detail::tanh_double(x);
}

namespace detail {
// 1 / (1 + e^-x), computed from e = e^-|x| <= 1 so that it neither overflows nor loses the
// subnormal results of large negative x: x >= 0 -> 1 / (1 + e), x < 0 -> e / (1 + e).
template <bool kSubnormal, Real T> CR_VMATH_INLINE T sigmoid_scaled(T x) {
  T e = exp_scaled<kSubnormal>(-std::fabs(x));
  T n = blend(x >= T(0), T(1), e);
  // n / (d + dl) with d + dl = 1 + e exactly, corrected once with the exact residual, so that
  // only the error of e remains (scaled by 1 / (1 + e) <= 1)
  T d = T(1) + e, dl = (T(1) - d) + e;
  T y = T(1) / d, q = n * y;
  T res = std::fma(-q, d, n) - q * dl;
  return std::fma(res, y, q);
}
}  // namespace detail
template <Real T> CR_VMATH_INLINE T sigmoid(T x) { return detail::sigmoid_scaled<true>(x); }

// y[i] = sigmoid(x[i]) for n values (y may be x), each exactly vmath::sigmoid's value: below
// exp_normal, e^2 underflows and sigmoid(x) = e = exp(x).
template <Real T> CR_VMATH_INLINE void sigmoid_block(const T* x, T* y, int64_t n) {
  detail::exp_below_block(x, y, n, [](T v) { return detail::sigmoid_scaled<false>(v); });
}

template <Real T> CR_VMATH_INLINE T erf(T x) {
  using namespace detail;
  T a = std::fabs(x);
  T u = a * a;
  T small;
  if constexpr (kFloat<T>) small = std::fma(a, horner(u, kErfF), a);
  else small = std::fma(a, horner(u, kErfD), a);
  // erf(a) = 1 - exp(-a^2) R(a), R a polynomial per interval whose coefficients are selected
  T b = blend(a > K<T>::erf_max, K<T>::erf_max, a);  // saturated (NaN passes)
  T R, e;
  if constexpr (kFloat<T>) {
    const bool in[1] = {b < 2.2f};
    R = horner_pieces(b - horner_pieces(b, in, kErfcMidF), in, kErfcF);
    e = exp_scaled<false>(-b * b);
  } else {
    const bool in[3] = {b < 1.75, b < 2.75, b < 4.0};
    R = horner_pieces(b - horner_pieces(b, in, kErfcMidD), in, kErfcD);
    // exp(-b^2) with b^2 = h + l exact: exp(-h) (1 - l)
    T h = b * b, l = std::fma(b, b, -h);
    e = exp_scaled<false>(-h);
    e = std::fma(-e, l, e);
  }
  T large = T(1) - e * R;
  T res = blend(a < T(1), small, large);
  return std::copysign(res, x);
}

}  // namespace cr::vmath

#undef CR_VMATH_INLINE
