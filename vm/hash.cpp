#include "vm/hash.hpp"

#include <cstdint>
#include <cstdio>

namespace cr {

std::string hash128(const std::string& s) {
  uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
  for (unsigned char ch : s) {
    h1 = (h1 ^ ch) * 0x100000001b3ull;
    h2 = (h2 ^ ch) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h1), static_cast<unsigned long long>(h2));
  return buf;
}

}  // namespace cr
