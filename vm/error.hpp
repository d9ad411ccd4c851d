// Errors: every misuse throws cr::Error with a message that names what was expected and what was
// given. The dispatcher prefixes the op name; the Lua side adds the source location.
#pragma once
#include <charconv>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace cr {

struct Error : std::runtime_error {
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// An error whose message already starts with its Lua "file:line: " (errors of captured graphs,
// which know the line of the op that failed): the Lua side raises it as it is.
struct LocatedError : Error {
  explicit LocatedError(const std::string& msg) : Error(msg) {}
};

[[noreturn]] inline void fail(const std::string& msg) { throw Error(msg); }

template <class... A> std::string cat(const A&... parts) {
  std::string s;
  auto add = [&s](const auto& p) {
    using P = std::decay_t<decltype(p)>;
    if constexpr (std::is_floating_point_v<P>) {  // shortest round-trip form: 2.5, 1e-300, nan
      char buf[32];
      s.append(buf, std::to_chars(buf, buf + sizeof buf, p).ptr);
    } else if constexpr (std::is_arithmetic_v<P>) s += std::to_string(p);
    else s += p;
  };
  (add(parts), ...);
  return s;
}

}  // namespace cr
