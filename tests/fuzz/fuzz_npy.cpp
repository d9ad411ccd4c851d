// libFuzzer target: the .npy reader over arbitrary bytes. Every input must either load or raise
// cr::Error; anything else (a crash, a sanitizer report, another exception) is a finding.
#include <string>

#include "tests/fuzz/touch.hpp"
#include "vm/io/io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    touch(cr::parse_npy(bytes, "fuzz"));
  } catch (const cr::Error&) {
  }
  return 0;
}
