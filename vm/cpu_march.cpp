#include "vm/cpu_march.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "vm/config.hpp"

namespace cr {

std::string_view cpu_march_override() {
  const char* env = env_setting(Setting::CpuMarch);
  if (!env) return {};
  std::string_view v(env);
  if (v.starts_with("-march=")) v.remove_prefix(7);
  return v == "native" ? std::string_view{} : v;
}

int march_vector_bytes(std::string_view level) {
  if (level == "x86-64-v4") return 64;
  if (level == "x86-64-v3") return 32;
  if (level == "x86-64-v2" || level == "x86-64") return 16;
  return 0;
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd");
}
bool cpu_has_avx2_fma() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int64_t cpu_cache_bytes() {
  static const int64_t bytes = [] {
    int64_t best = 0;
    for (int i = 0; i < 8; ++i) {
      std::string path = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size";
      std::FILE* f = std::fopen(path.c_str(), "r");
      if (!f) continue;
      long long n = 0;
      char unit = 0;
      int got = std::fscanf(f, "%lld%c", &n, &unit);
      std::fclose(f);
      if (got < 1 || n <= 0) continue;
      best = std::max<int64_t>(best, unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : unit == 'G' ? n << 30 : n);
    }
    return best;
  }();
  return bytes;
}

int64_t cpu_large_block_bytes() {
  static const int64_t bytes = cpu_cache_bytes() > 0 ? cpu_cache_bytes() / 2 : int64_t(16) << 20;
  return bytes;
}

}  // namespace cr
