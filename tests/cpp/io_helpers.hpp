// Helpers of the IO tests (test_io.cpp, test_io_files.cpp): a file's bytes, and the message of
// the cr::Error a call throws.
#pragma once
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "vm/error.hpp"

namespace cr::testing {

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// e.what() of the cr::Error f throws, or "<no error>".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace cr::testing
