// Throughput of vmath:: elementary functions (vm/kernels/vmath.hpp) against std:: on 4M elements,
// single-threaded, in the loop shape of loop.hpp's contiguous path. Build and run:
//   g++ -std=c++20 -O3 -march=x86-64-v3 -I. bench/bench_vmath.cpp -o /tmp/bench_vmath && /tmp/bench_vmath
// Add -fopt-info-vec-optimized to see which loops GCC vectorised (every vmath:: one should be).
// `/tmp/bench_vmath tanh-ulp` instead measures float vmath::tanh's error on every float of [-10, 10]
// against long double std::tanh (a few CPU-minutes).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "vm/kernels/vmath.hpp"

namespace {

constexpr long kN = 1 << 22;

// Out-of-line so that each function gets its own loop (and its own -fopt-info line).
template <class T, class F> __attribute__((noinline)) void apply(T* __restrict o, const T* __restrict x, long n, F f) {
  for (long i = 0; i < n; ++i) o[i] = f(x[i]);
}

// ns per element of run() over kN elements, best of 5
template <class Run> double best_ns(Run run) {
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best * 1e9 / kN;
}
template <class T, class F> double ns_per_elem(const std::vector<T>& x, std::vector<T>& o, F f) {
  return best_ns([&] { apply(o.data(), x.data(), kN, f); });
}

template <class T> std::vector<T> inputs(double lo, double hi) {
  std::mt19937 g(42);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(kN);
  for (auto& e : v) e = T(d(g));
  return v;
}

template <class T, class FS, class FV> void row(const char* name, double lo, double hi, FS fs, FV fv) {
  std::vector<T> x = inputs<T>(lo, hi), o(kN);
  double s = ns_per_elem(x, o, fs), v = ns_per_elem(x, o, fv);
  std::printf("%-8s %-6s std %6.2f ns  vm %6.3f ns  speedup %5.1fx\n", name, sizeof(T) == 4 ? "float" : "double", s, v,
              s / v);
}

// float sin / cos as the loops call them: the block form (sin_block, cos_block) vectorises where
// the per-element form's choice between its float and double forms does not.
template <class FS, class B> void block_row(const char* name, FS fs, B block) {
  std::vector<float> x = inputs<float>(-100, 100), o(kN);
  double s = ns_per_elem(x, o, fs), v = best_ns([&] { block(x.data(), o.data(), kN); });
  std::printf("%-8s %-6s std %6.2f ns  vm %6.3f ns  speedup %5.1fx\n", name, "float", s, v, s / v);
}

template <class T> void all() {
  using namespace cr;
  row<T>("exp", -80, 80, [](T a) { return std::exp(a); }, [](T a) { return vmath::exp(a); });
  row<T>("exp2", -100, 100, [](T a) { return std::exp2(a); }, [](T a) { return vmath::exp2(a); });
  row<T>("expm1", -5, 5, [](T a) { return std::expm1(a); }, [](T a) { return vmath::expm1(a); });
  row<T>("log", 1e-6, 1e6, [](T a) { return std::log(a); }, [](T a) { return vmath::log(a); });
  row<T>("log2", 1e-6, 1e6, [](T a) { return std::log2(a); }, [](T a) { return vmath::log2(a); });
  row<T>("log1p", -0.9, 10, [](T a) { return std::log1p(a); }, [](T a) { return vmath::log1p(a); });
  row<T>("sin", -100, 100, [](T a) { return std::sin(a); }, [](T a) { return vmath::sin(a); });
  row<T>("cos", -100, 100, [](T a) { return std::cos(a); }, [](T a) { return vmath::cos(a); });
  if constexpr (sizeof(T) == 4) {
    block_row("sin blk", [](float a) { return std::sin(a); }, [](const float* x, float* y, long n) { cr::vmath::sin_block(x, y, n); });
    block_row("cos blk", [](float a) { return std::cos(a); }, [](const float* x, float* y, long n) { cr::vmath::cos_block(x, y, n); });
  }
  row<T>("tan", -100, 100, [](T a) { return std::tan(a); }, [](T a) { return vmath::tan(a); });
  row<T>("tanh", -10, 10, [](T a) { return std::tanh(a); }, [](T a) { return vmath::tanh(a); });
  // the tanh form of gelu, as the pointwise kernels compute it (vm/kernels/scalar_math.hpp)
  auto gelu = [](auto th) {
    return [th](T a) { return T(0.5) * a * (T(1) + th(T(0.79788456080286535588) * (a + T(0.044715) * a * a * a))); };
  };
  row<T>("gelu_t", -10, 10, gelu([](T a) { return std::tanh(a); }), gelu([](T a) { return vmath::tanh(a); }));
  row<T>("sigmoid", -20, 20, [](T a) { return T(1) / (T(1) + std::exp(-a)); }, [](T a) { return vmath::sigmoid(a); });
  row<T>("erf", -5, 5, [](T a) { return std::erf(a); }, [](T a) { return vmath::erf(a); });
}

// Max ulp error of float vmath::tanh over every float of [-10, 10], computed in blocks by the
// vectorised loop, on all cores.
int tanh_ulp() {
  const uint32_t top = std::bit_cast<uint32_t>(10.0f), sign = 0x80000000u;
  const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  std::vector<double> worst(nt);
  std::vector<float> at(nt);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < nt; ++t)
    threads.emplace_back([&, t] {
      constexpr uint32_t kB = 4096;
      std::vector<float> x(kB), y(kB);
      for (uint64_t b0 = uint64_t(t) * kB; b0 <= 2ull * top + 1; b0 += uint64_t(nt) * kB) {
        const uint32_t n = uint32_t(std::min<uint64_t>(kB, 2ull * top + 2 - b0));
        for (uint32_t i = 0; i < n; ++i) {  // b <= top: +x, else -(x - top - 1): -0 to -10
          uint64_t b = b0 + i;
          x[i] = std::bit_cast<float>(b <= top ? uint32_t(b) : uint32_t(b - top - 1) | sign);
        }
        apply(y.data(), x.data(), long(n), [](float a) { return cr::vmath::tanh(a); });
        for (uint32_t i = 0; i < n; ++i) {
          long double ref = std::tanh((long double)x[i]);
          int e = std::max(std::ilogb(ref), -126);  // ulp of a float at ref (subnormal below)
          double err = double(std::fabs(y[i] - ref) / std::ldexp(1.0L, e - 23));
          if (x[i] == 0) err = std::memcmp(&x[i], &y[i], 4) == 0 ? 0 : 1e30;  // -0 keeps its sign
          if (err > worst[t]) worst[t] = err, at[t] = x[i];
        }
      }
    });
  for (auto& th : threads) th.join();
  size_t w = size_t(std::max_element(worst.begin(), worst.end()) - worst.begin());
  std::printf("float tanh on [-10, 10]: max %.4f ulp at x = %a (%.9g)\n", worst[w], double(at[w]), double(at[w]));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "tanh-ulp") == 0) return tanh_ulp();
  all<float>();
  all<double>();
}
