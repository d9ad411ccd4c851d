// ---- crescent CUDA prelude ----
// NVRTC sees no host headers: the fixed-width integer types, limits and type traits the scalar
// definitions need are spelled out here. The namespaces vmath, sm and std mirror the names the
// registry's expressions use (vm/kernels/scalar_math.hpp, vm/kernels/vmath.hpp), with the same
// NaN / -0 / integer-wrap behaviour, computed with CUDA's accurate device math (expf, erff, ...:
// no __expf-style intrinsics, whose errors exceed float32 rounding of the eager results).
typedef int int32_t;
typedef long long int64_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;

namespace cr {
template <class T> struct is_fp { static constexpr bool value = false; };
template <> struct is_fp<float> { static constexpr bool value = true; };
template <> struct is_fp<double> { static constexpr bool value = true; };
template <class T> struct is_int { static constexpr bool value = false; };
template <> struct is_int<int32_t> { static constexpr bool value = true; };
template <> struct is_int<int64_t> { static constexpr bool value = true; };
template <class T> struct unsigned_of { typedef T type; };
template <> struct unsigned_of<int32_t> { typedef uint32_t type; };
template <> struct unsigned_of<int64_t> { typedef uint64_t type; };

template <class T> __forceinline__ T nan_();
template <> __forceinline__ float nan_<float>() { return __int_as_float(0x7fc00000); }
template <> __forceinline__ double nan_<double>() { return __longlong_as_double(0x7ff8000000000000ULL); }
template <class T> __forceinline__ T inf_();
template <> __forceinline__ float inf_<float>() { return __int_as_float(0x7f800000); }
template <> __forceinline__ double inf_<double>() { return __longlong_as_double(0x7ff0000000000000ULL); }

// float -> 16 bits, two at once: a's bits in the low half, b's in the high half. On sm_80+ the
// paired cvt.rn is one F2FP, where the single-value cvt is an F2F of a much slower pipe (that
// bounded bf16 chains rounding after each op as eager does): single values go through it too.
template <int Bf16> __forceinline__ uint32_t cvt2(float a, float b) {
  uint32_t r;
#if __CUDA_ARCH__ >= 800
  if constexpr (Bf16 != 0) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
#else
  unsigned short lo, hi;
  if constexpr (Bf16 != 0) asm("cvt.rn.bf16.f32 %0, %2;\n\tcvt.rn.bf16.f32 %1, %3;"
                               : "=h"(lo), "=h"(hi) : "f"(a), "f"(b));
  else asm("cvt.rn.f16.f32 %0, %2;\n\tcvt.rn.f16.f32 %1, %3;"
           : "=h"(lo), "=h"(hi) : "f"(a), "f"(b));
  r = uint32_t(lo) | uint32_t(hi) << 16;
#endif
  return r;
}

// float16 / bfloat16 storage: 16-bit words converted to and from float32 around every load and
// store (the lowering computes in float32, jit/lower.hpp compute_dtype). Conversions from other
// types go through float32, as the eager kernels' store() does (vm/dtype.hpp); float -> 16 bits
// rounds to nearest even (PTX cvt.rn), NaN stays NaN.
struct half_t {
  unsigned short bits;
  half_t() = default;
  __forceinline__ half_t(float f) { bits = (unsigned short)cvt2<0>(f, 0.f); }
  template <class T> __forceinline__ half_t(T v) : half_t(float(v)) {}
  static __forceinline__ half_t of_bits(uint32_t w) {
    half_t h;
    h.bits = (unsigned short)w;
    return h;
  }
  __forceinline__ operator float() const {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
};
struct bf16_t {
  unsigned short bits;
  bf16_t() = default;
  __forceinline__ bf16_t(float f) { bits = (unsigned short)cvt2<1>(f, 0.f); }
  template <class T> __forceinline__ bf16_t(T v) : bf16_t(float(v)) {}
  static __forceinline__ bf16_t of_bits(uint32_t w) {
    bf16_t h;
    h.bits = (unsigned short)w;
    return h;
  }
  __forceinline__ operator float() const { return __uint_as_float(uint32_t(bits) << 16); }
};
template <> struct is_fp<half_t> { static constexpr bool value = true; };
template <> struct is_fp<bf16_t> { static constexpr bool value = true; };

// N-element vectors (16 bytes: 4 float32, 8 float16), for aligned contiguous loads and stores of
// N consecutive elements.
template <class T, int N> struct alignas(N * sizeof(T)) vec { T v[N]; };
template <int N, class T> __forceinline__ vec<T, N> loadv(const T* p) { return *reinterpret_cast<const vec<T, N>*>(p); }
template <class T, int N> __forceinline__ void storev(T* p, const vec<T, N>& x) { *reinterpret_cast<vec<T, N>*>(p) = x; }

// The run's values of a kernel (random ops' seeds and counter offsets), passed by value.
template <int N> struct words { int64_t v[N]; };
// Run value `site` (seed: even, offset: odd). The last word, when not 0, points at the device's
// {seed, base offset} of a CUDA graph, which each replay sets; the values are then relative.
template <int N> __forceinline__ int64_t run_word(const words<N>& w, int site) {
  const int64_t* base = reinterpret_cast<const int64_t*>(w.v[N - 1]);
  return (base ? base[site & 1] : 0) + w.v[site];
}

// A gather's 1-based position p as a 0-based one. A p outside 1..limit reads position 1 (never a
// wild read) and is recorded in the kernel's check word {p, limit, site + 1} by the first thread
// that finds one; the host reads the word at its next synchronisation (vm/checks.hpp).
__forceinline__ int64_t position(int64_t p, int64_t limit, int site, int64_t* check) {
  if (p >= 1 && p <= limit) return p - 1;
  if (atomicCAS(reinterpret_cast<unsigned long long*>(check + 2), 0ull, (unsigned long long)(site + 1)) == 0ull) {
    check[0] = p;
    check[1] = limit;
  }
  return 0;
}

// Reduction folds. Integer sums and products wrap (unsigned arithmetic), as the CPU folds do;
// max / min propagate NaN (the first NaN wins), as torch.amax / torch.amin.
struct Sum {
  template <class T> __forceinline__ T operator()(T a, T b) const {
    if constexpr (is_int<T>::value) return T(typename unsigned_of<T>::type(a) + typename unsigned_of<T>::type(b));
    else return a + b;
  }
};
struct Prod {
  template <class T> __forceinline__ T operator()(T a, T b) const {
    if constexpr (is_int<T>::value) return T(typename unsigned_of<T>::type(a) * typename unsigned_of<T>::type(b));
    else return a * b;
  }
};
struct Max {
  template <class T> __forceinline__ T operator()(T a, T b) const { return (a > b || a != a) ? a : b; }
};
struct Min {
  template <class T> __forceinline__ T operator()(T a, T b) const { return (a < b || a != a) ? a : b; }
};

// Team reductions: every thread of the team gets the result (xor butterflies: the same fold
// order on every lane, so every lane holds the same bits).
template <class T> __forceinline__ T shfl_xor(T v, int lane_mask) { return __shfl_xor_sync(0xffffffffu, v, lane_mask); }
template <> __forceinline__ bool shfl_xor<bool>(bool v, int lane_mask) { return __shfl_xor_sync(0xffffffffu, int(v), lane_mask) != 0; }
template <class T, class Op> __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) v = op(v, shfl_xor(v, m));
  return v;
}
// One row per block of B threads: warps fold, then every thread folds the warps' partials in
// warp order (deterministic). `smem` holds B / 32 partials; the second barrier lets the next
// reduction reuse it.
template <int B, class T, class Op> __forceinline__ T block_reduce(T v, Op op, T* smem) {
  v = warp_reduce(v, op);
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  T r = smem[0];
#pragma unroll
  for (int w = 1; w < B / 32; ++w) r = op(r, smem[w]);
  __syncthreads();
  return r;
}

// The sum of v over the block's threads before this one, and (total, optional) over all of them
// (compactions: each thread's place). Every thread calls it; `smem` holds 32 sums, reused only
// after a barrier.
__forceinline__ long long block_exclusive_sum(long long v, long long* smem, long long* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  long long incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const long long t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  if (lane == 31) smem[warp] = incl;
  __syncthreads();
  long long before = incl - v, all = 0;
  for (int w = 0; w < warps; ++w) {
    if (w < warp) before += smem[w];
    all += smem[w];
  }
  if (total) *total = all;
  return before;
}

#if __CUDA_ARCH__ >= 900
// Thread-block clusters (sm_90): blocks of one cluster read each other's shared memory, so the
// partials of a split reduction merge without a workspace or a second kernel (attention_decode,
// gemv, generated reductions of a few long rows).
__forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster; orders the shared-memory writes before it with the
// reads after it, across the cluster.
__forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// *p = v in the shared memory of the cluster's block `rank` (p: this block's copy of the
// variable); a cluster_sync() orders it before that block's reads.
template <class T> __forceinline__ void cluster_store(T* p, unsigned rank, T v) {
  unsigned long long remote;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(remote) : "l"(p), "r"(rank));
  *reinterpret_cast<T*>(remote) = v;
}
// v folded over the cluster's CL blocks in rank order (the same bits in every block): each block
// stores v into every block's `slots` (CL shared values), so one barrier does and none waits to
// leave. A caller that reduces again alternates two sets (no store can overtake a read then).
template <int CL, class T, class Op> __forceinline__ T cluster_reduce(T v, Op op, T* slots) {
  const unsigned rank = cluster_rank();
  if (threadIdx.x < CL) cluster_store(slots + rank, threadIdx.x, v);
  cluster_sync();
  T r = slots[0];
#pragma unroll
  for (int s = 1; s < CL; ++s) r = op(r, slots[s]);
  return r;
}
#endif

// Called by a kernel launched with programmatic dependent launch (vm/cuda/launch.hpp) before it
// touches memory: waits for the stream's previous kernel, then lets the next start - one kernel
// ahead (letting it start before the wait, many ahead, read stale data: a GPT-2 decode diverged).
__forceinline__ void grid_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// The line holding *p into L2. Harmless before grid_wait(), even of memory the previous kernel
// writes (L2 is where every SM's writes meet: a line fetched early holds what a later read would
// see), so a kernel's inputs stream in while the previous kernel runs.
__forceinline__ void to_l2(const void* p) { asm volatile("prefetch.L2 [%0];" ::"l"(p)); }
}  // namespace cr

// the functions the registry's scalar expressions name (vm/kernels/vmath.hpp). CR_F1_CALL ones
// stay calls: sin / cos / tan and pow carry a large argument-reduction slow path, and inlined
// at every (unrolled) use they made NVRTC's time grow with the chain (16x for 20 sins: H35). The
// call costs a few instructions in kernels that wait on memory anyway.
#define CR_F1(name, f32, f64) \
  __forceinline__ float name(float x) { return f32(x); } \
  __forceinline__ double name(double x) { return f64(x); }
#define CR_F1_CALL(name, f32, f64) \
  __noinline__ float name(float x) { return f32(x); } \
  __noinline__ double name(double x) { return f64(x); }
namespace vmath {
CR_F1(exp, expf, ::exp)
CR_F1(exp2, exp2f, ::exp2)
CR_F1(log, logf, ::log)
CR_F1(log2, log2f, ::log2)
CR_F1(log1p, log1pf, ::log1p)
CR_F1(expm1, expm1f, ::expm1)
CR_F1_CALL(sin, sinf, ::sin)
CR_F1_CALL(cos, cosf, ::cos)
CR_F1_CALL(tan, tanf, ::tan)
CR_F1(tanh, tanhf, ::tanh)
CR_F1(erf, erff, ::erf)
template <class T> __forceinline__ T sigmoid(T x) { return T(1) / (T(1) + exp(-x)); }
}  // namespace vmath
namespace std {
CR_F1(sqrt, sqrtf, ::sqrt)
__forceinline__ float atan2(float a, float b) { return atan2f(a, b); }
__forceinline__ double atan2(double a, double b) { return ::atan2(a, b); }
}  // namespace std
namespace cr {
CR_F1(floor_fp, floorf, ::floor)
CR_F1(ceil_fp, ceilf, ::ceil)
CR_F1(rint_fp, rintf, ::rint)
CR_F1(trunc_fp, truncf, ::trunc)
__forceinline__ float fmod_fp(float a, float b) { return fmodf(a, b); }
__forceinline__ double fmod_fp(double a, double b) { return ::fmod(a, b); }
__noinline__ float pow_fp(float a, float b) { return powf(a, b); }
__noinline__ double pow_fp(double a, double b) { return ::pow(a, b); }
}  // namespace cr
#undef CR_F1
#undef CR_F1_CALL

// the scalar definitions of the pointwise ops (vm/kernels/scalar_math.hpp)
namespace sm {
template <class T> __forceinline__ T floor_(T a) { if constexpr (cr::is_fp<T>::value) return cr::floor_fp(a); else return a; }
template <class T> __forceinline__ T ceil_(T a) { if constexpr (cr::is_fp<T>::value) return cr::ceil_fp(a); else return a; }
template <class T> __forceinline__ T round_(T a) { if constexpr (cr::is_fp<T>::value) return cr::rint_fp(a); else return a; }
template <class T> __forceinline__ T trunc_(T a) { if constexpr (cr::is_fp<T>::value) return cr::trunc_fp(a); else return a; }
template <class T> __forceinline__ T neg_(T a) {
  if constexpr (cr::is_int<T>::value) return T(typename cr::unsigned_of<T>::type(0) - typename cr::unsigned_of<T>::type(a));
  else return -a;
}
template <class T> __forceinline__ T abs_(T a) { return a < T(0) ? neg_(a) : a; }
template <class T> __forceinline__ T sign_(T a) { return T((T(0) < a) - (a < T(0))); }
template <class T> __forceinline__ T relu_(T a) { return a != a ? a : a > T(0) ? a : T(0); }
template <class T> __forceinline__ T silu_(T a) { return a * vmath::sigmoid(a); }
template <class T> __forceinline__ T leaky_relu_(T a, T b) { return a > T(0) ? a : a * b; }
template <class T> __forceinline__ T elu_(T a, T b) { return a > T(0) ? a : b * vmath::expm1(a); }
template <class T> __forceinline__ T softplus_(T a, T b) {
  const T z = a * b;
  return z > T(20) ? a : vmath::log1p(vmath::exp(z)) / b;
}
template <class T> __forceinline__ T mish_(T a) { return a * vmath::tanh(softplus_(a, T(1))); }
template <class T> __forceinline__ T logsigmoid_(T a) {
  return (a < T(0) ? a : T(0)) - vmath::log1p(vmath::exp(a < T(0) ? a : -a));
}
template <class T> __forceinline__ T hardsigmoid_(T a) {
  return a <= T(-3) ? T(0) : a >= T(3) ? T(1) : a / T(6) + T(0.5);
}
template <class T> __forceinline__ T hardswish_(T a) {  // (a times the clamped a + 3: -inf gives NaN, as PyTorch's)
  T c = a + T(3);
  c = c < T(0) ? T(0) : c;
  return a * (c > T(6) ? T(6) : c) / T(6);
}
__forceinline__ float hypot_(float a, float b) { return hypotf(a, b); }
__forceinline__ double hypot_(double a, double b) { return ::hypot(a, b); }
__forceinline__ float erfinv_(float a) { return erfinvf(a); }
__forceinline__ double erfinv_(double a) { return ::erfinv(a); }
template <class T> __forceinline__ T gelu_(T a) { return T(0.5) * a * (T(1) + vmath::erf(a * T(0.70710678118654752440))); }
template <class T> __forceinline__ T gelu_tanh_(T a) {
  const T k = T(0.79788456080286535588), c = T(0.044715);
  return T(0.5) * a * (T(1) + vmath::tanh(k * (a + c * a * a * a)));
}
// gelu's gradient g * dgelu/dx in one pass, PyTorch's GeluBackward formulas (GeluKernel.cpp).
template <class T> __forceinline__ T gelu_backward_(T g, T x) {
  const T cdf = T(0.5) * (T(1) + vmath::erf(x * T(0.70710678118654752440)));
  const T pdf = T(0.39894228040143267794) * vmath::exp(x * x * T(-0.5));
  return g * (cdf + x * pdf);
}
template <class T> __forceinline__ T gelu_tanh_backward_(T g, T x) {
  const T k = T(0.79788456080286535588), c = T(0.044715);
  const T th = vmath::tanh(k * (x + c * x * x * x));
  return g * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * k * (T(1) + T(3) * c * x * x));
}
template <class T> __forceinline__ T rsqrt_(T a) { return T(1) / std::sqrt(a); }
template <class T> __forceinline__ bool isnan_(T a) { return a != a; }
template <class T> __forceinline__ bool isinf_(T a) {
  if constexpr (cr::is_fp<T>::value) return a == cr::inf_<T>() || a == -cr::inf_<T>();
  else return false;
}
template <class T> __forceinline__ T maximum_(T a, T b) {
  if constexpr (cr::is_fp<T>::value) { if (a != a || b != b) return cr::nan_<T>(); }
  return a > b ? a : b;
}
template <class T> __forceinline__ T minimum_(T a, T b) {
  if constexpr (cr::is_fp<T>::value) { if (a != a || b != b) return cr::nan_<T>(); }
  return a < b ? a : b;
}
template <class T> __forceinline__ T fmod_(T a, T b) {
  if constexpr (cr::is_fp<T>::value) return cr::fmod_fp(a, b);
  else if constexpr (cr::is_int<T>::value) return b == T(-1) ? T(0) : T(a % b);
  else return T(a && !b);
}
template <class T> __forceinline__ T remainder_(T a, T b) {  // Python's %: the sign of the divisor
  if constexpr (cr::is_fp<T>::value) {
    T r = cr::fmod_fp(a, b);
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? r + b : r;
  } else if constexpr (cr::is_int<T>::value) {
    if (b == T(-1)) return T(0);
    T r = T(a % b);
    return (r != 0 && ((r < 0) != (b < 0))) ? T(r + b) : r;
  } else return T(a && !b);
}
// (vm/kernels/scalar_math.hpp's div_floor_ / div_trunc_)
template <class T> __forceinline__ T div_floor_(T a, T b) {
  if constexpr (cr::is_fp<T>::value) {
    if (b == T(0)) return a / b;
    T mod = cr::fmod_fp(a, b), div = (a - mod) / b;
    if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
    if (div == T(0)) return ::copysign(T(0), a / b);
    T fl = cr::floor_fp(div);
    return div - fl > T(0.5) ? fl + T(1) : fl;
  } else if constexpr (cr::is_int<T>::value) {
    if (b == T(-1)) return T(0 - (unsigned long long)a);
    T q = T(a / b);
    return ((a < 0) != (b < 0)) && T(a % b) != 0 ? T(q - 1) : q;
  } else return a;
}
template <class T> __forceinline__ T div_trunc_(T a, T b) {
  if constexpr (cr::is_fp<T>::value) return cr::trunc_fp(a / b);
  else if constexpr (cr::is_int<T>::value) return b == T(-1) ? T(0 - (unsigned long long)a) : T(a / b);
  else return a;
}
template <class T> __forceinline__ T pow_(T a, T b) {
  if constexpr (cr::is_int<T>::value) {  // exponentiation by squaring, wrapping
    typedef typename cr::unsigned_of<T>::type U;
    if (b < 0) return a == 1 ? T(1) : a == -1 ? T((b & 1) ? -1 : 1) : T(0);
    U r = 1, base = U(a);
    for (T e = b; e; e >>= 1, base *= base)
      if (e & 1) r *= base;
    return T(r);
  } else if constexpr (cr::is_fp<T>::value) return cr::pow_fp(a, b);
  else return a || !b;
}
}  // namespace sm
// ---- end of the prelude ----
