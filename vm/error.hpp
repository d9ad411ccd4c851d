// Errors: every misuse throws cr::Error with a message that names what was expected and what was
// given. The dispatcher prefixes the op name; the Lua side adds the source location.
#pragma once
#include <stdexcept>
#include <string>
#include <type_traits>

namespace cr {

struct Error : std::runtime_error {
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

[[noreturn]] inline void fail(const std::string& msg) { throw Error(msg); }

template <class... A> std::string cat(const A&... parts) {
  std::string s;
  auto add = [&s](const auto& p) {
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(p)>>) s += std::to_string(p);
    else s += p;
  };
  (add(parts), ...);
  return s;
}

}  // namespace cr
