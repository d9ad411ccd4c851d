#include "jit/cpu/target.hpp"

#include "jit/cpu/stream_probe.hpp"
#include "jit/disk_cache.hpp"
#include "vm/config.hpp"
#include "vm/cpu_march.hpp"
#include "vm/env.hpp"
#include "vm/fork.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace cr::jit::cpu {

namespace {

#if defined(__x86_64__) || defined(__i386__)

// __builtin_cpu_supports reads libgcc's cpuid cache, which also checks (xgetbv) that the OS saves
// the AVX / AVX-512 register state; a feature the OS has not enabled reads as absent.
#define CR_CPU(name) (__builtin_cpu_supports(name) != 0)

// GCC 12 knows the level names themselves ("x86-64-v3" = its full feature list, including the
// ones not listed below: cx16, lahf, lzcnt, movbe, xsave...). Older compilers: the features only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define CR_LEVEL(name) CR_CPU(name)
#else
#define CR_LEVEL(name) true
#endif

// clang before 16 does not know "f16c" in __builtin_cpu_supports (the fuzz build uses clang): the
// cpuid bit then, which counts only where the OS saves the AVX state (AVX reads as present).
#if defined(__clang__) && __clang_major__ < 16
bool has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && CR_CPU("avx");
}
#else
bool has_f16c() { return CR_CPU("f16c"); }
#endif

Target detect() {
  __builtin_cpu_init();
  Target t;
  struct Feature {
    const char* name;
    bool on;
  };
  const Feature feats[] = {
      {"sse4.2", CR_CPU("sse4.2")},     {"popcnt", CR_CPU("popcnt")},
      {"avx", CR_CPU("avx")},           {"avx2", CR_CPU("avx2")},
      {"fma", CR_CPU("fma")},           {"bmi", CR_CPU("bmi")},
      {"bmi2", CR_CPU("bmi2")},         {"f16c", has_f16c()},
      {"avx512f", CR_CPU("avx512f")},   {"avx512bw", CR_CPU("avx512bw")},
      {"avx512vl", CR_CPU("avx512vl")}, {"avx512dq", CR_CPU("avx512dq")},
      {"avx512cd", CR_CPU("avx512cd")}, {"avx512vnni", CR_CPU("avx512vnni")},
      {"avx512bf16", CR_CPU("avx512bf16")},
  };
  for (const Feature& f : feats) {
    if (!f.on) continue;
    if (!t.features.empty()) t.features += ',';
    t.features += f.name;
  }

  const bool v2 = CR_LEVEL("x86-64-v2") && CR_CPU("sse4.2") && CR_CPU("popcnt");
  const bool v3 = v2 && CR_LEVEL("x86-64-v3") && CR_CPU("avx") && CR_CPU("avx2") &&
                  CR_CPU("fma") && CR_CPU("bmi2");
  const bool v4 = v3 && CR_LEVEL("x86-64-v4") && CR_CPU("avx512f") && CR_CPU("avx512bw") &&
                  CR_CPU("avx512vl") && CR_CPU("avx512dq");
  if (v4) {
    t.march = "x86-64-v4";
    t.vector_bytes = 64;
  } else if (v3) {
    t.march = "x86-64-v3";
    t.vector_bytes = 32;
  } else if (v2) {
    t.march = "x86-64-v2";
    t.vector_bytes = 16;
  } else {
    t.march = "x86-64";
    t.vector_bytes = 16;
  }
  return t;
}

#undef CR_LEVEL
#undef CR_CPU

#else

Target detect() {
  Target t;  // not x86: no -march is known to be safe; GCC's default for its target is used
  t.march = "";
  t.vector_bytes = 16;
  return t;
}

#endif

void apply_override(Target& t) {
  const std::string_view v = cpu_march_override();
  if (v.empty()) return;
  t.march = std::string(v);
  if (const int bytes = march_vector_bytes(v)) t.vector_bytes = bytes;
}

}  // namespace

const Target& host_target() {
  static const Target target = [] {
    Target t = detect();
    apply_override(t);
    return t;
  }();
  return target;
}

std::string codegen_march() {
  const Target& t = host_target();
  if (!cpu_march_override().empty()) return t.march;  // what the user asked for, as asked
  return t.march == "x86-64-v4" ? "x86-64-v3" : t.march;
}

// Not a static's guard: the measurement runs on the compile thread, and a fork() in its middle
// would leave the child a guard in progress forever. The lock is remade there (no fork_guard: a
// fork does not wait for a measurement), and the child measures again.
namespace {
std::mutex stream_mutex;
[[maybe_unused]] const bool stream_mutex_remade = (on_fork_child([] { new (&stream_mutex) std::mutex; }), true);
}  // namespace

int64_t stream_store_bytes() {
  static std::atomic<int64_t> known{0};
  if (const int64_t b = known.load(std::memory_order_acquire)) return b;
  std::lock_guard<std::mutex> lock(stream_mutex);
  if (const int64_t b = known.load(std::memory_order_acquire)) return b;
  const double v = env_number(kEnvCpuStreamBytes);
  const int64_t bytes = v > 0 ? int64_t(v) : measured_stream_bytes(default_cache_dir());
  known.store(bytes, std::memory_order_release);
  return bytes;
}

}  // namespace cr::jit::cpu
