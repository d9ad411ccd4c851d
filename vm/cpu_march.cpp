#include "vm/cpu_march.hpp"

#include <cstdlib>

namespace cr {

std::string_view cpu_march_override() {
  const char* env = std::getenv("CRESCENT_CPU_MARCH");
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

}  // namespace cr
