// libFuzzer target: the Lua boundary of the op registry. ops_harness.lua decodes the fuzz bytes
// into one call of a registry op with arguments of random kinds (nil, booleans, odd numbers,
// strings, tables, options tables, tensors of odd shapes, dtypes and strides) and runs it under
// pcall. Every outcome must be a result or a Lua error with a string message that names the op;
// the harness raises otherwise, and this target aborts with that message.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <lua.hpp>

#include "crescent/crescent.hpp"

namespace {

// One VM for the whole run, destroyed at exit (before LeakSanitizer's check runs), so that the
// tensors Lua still holds are released and only real leaks are reported.
std::unique_ptr<crescent::VM>& vm() {
  static std::unique_ptr<crescent::VM> v = [] {
    auto p = std::make_unique<crescent::VM>();
    p->run_file(CRESCENT_FUZZ_HARNESS);
    return p;
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lua_State* L = vm()->lua_state();
  lua_getglobal(L, "fuzz_one");
  lua_pushlstring(L, reinterpret_cast<const char*>(data), size);
  if (lua_pcall(L, 1, 0, 0) != 0) {
    std::fprintf(stderr, "fuzz_ops: %s\n", lua_tostring(L, -1));
    std::abort();
  }
  return 0;
}
