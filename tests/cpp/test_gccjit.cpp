// jit/cpu/gccjit.hpp and jit/cpu/target.hpp: libgccjit loads lazily through the function table,
// compiles a tiny function in memory and to a shared library for the host's -march, and the host
// target maps to an explicit -march that libgccjit accepts. Skipped (with a warning) where
// libgccjit cannot be loaded: the GPU host has none.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "jit/cpu/gccjit.hpp"
#include "jit/cpu/target.hpp"

#if CRESCENT_HAVE_GCCJIT
#include <dlfcn.h>
#include <unistd.h>
#endif

using namespace cr::jit::cpu;

TEST_CASE("gccjit: host target is an explicit -march", "[gccjit]") {
  const Target& t = host_target();
  const Target& again = host_target();
  CHECK(&t == &again);
  const char* env = std::getenv("CRESCENT_CPU_MARCH");
  if (env && *env && std::string(env) != "native") {
    std::string v(env);
    if (v.rfind("-march=", 0) == 0) v = v.substr(7);
    CHECK(t.march == v);
  } else {
    CHECK((t.march == "x86-64-v4" || t.march == "x86-64-v3" || t.march == "x86-64-v2" ||
           t.march == "x86-64"));
  }
  CHECK((t.vector_bytes == 64 || t.vector_bytes == 32 || t.vector_bytes == 16));
  CHECK(t.mtune == "generic");
  CHECK(t.march_option() == "-march=" + t.march);
  WARN("host target: " << t.march_option() << " " << t.mtune_option() << ", vector_bytes "
                       << t.vector_bytes << ", features " << t.features);
}

#if CRESCENT_HAVE_GCCJIT

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

using Add1 = int64_t (*)(int64_t);
constexpr const char* kAdd1 = "crescent_gccjit_test_add1";

// A context holding `int64_t add1(int64_t x) { return x + 1; }`, built for the host target at -O2.
gcc_jit_context* make_add1(const GccJit& J, const std::string& march_option) {
  gcc_jit_context* ctxt = J.context_acquire();
  J.context_set_bool_print_errors_to_stderr(ctxt, 0);
  J.context_set_int_option(ctxt, GCC_JIT_INT_OPTION_OPTIMIZATION_LEVEL, 2);
  J.context_add_command_line_option(ctxt, march_option.c_str());
  J.context_add_command_line_option(ctxt, host_target().mtune_option().c_str());
  gcc_jit_type* i64 = J.context_get_int_type(ctxt, 8, /*is_signed=*/1);
  gcc_jit_param* x = J.context_new_param(ctxt, nullptr, i64, "x");
  gcc_jit_function* fn =
      J.context_new_function(ctxt, nullptr, GCC_JIT_FUNCTION_EXPORTED, i64, kAdd1, 1, &x, 0);
  gcc_jit_block* entry = J.function_new_block(fn, "entry");
  gcc_jit_rvalue* sum = J.context_new_binary_op(ctxt, nullptr, GCC_JIT_BINARY_OP_PLUS, i64,
                                                J.param_as_rvalue(x), J.context_one(ctxt, i64));
  J.block_end_with_return(entry, nullptr, sum);
  return ctxt;
}

std::string first_error(const GccJit& J, gcc_jit_context* ctxt) {
  const char* e = J.context_get_first_error(ctxt);
  return e ? e : "";
}

}  // namespace

TEST_CASE("gccjit: add1 compiled in memory and to a shared library", "[gccjit]") {
  std::string why;
  const GccJit* jit = gccjit(&why);
  if (!jit) {
    WARN("libgccjit unavailable, skipped: " << why);
    SUCCEED();
    return;
  }
  const GccJit& J = *jit;
  CHECK(gccjit() == jit);  // loaded once
  WARN("libgccjit " << J.version_major() << "." << J.version_minor() << "."
                    << J.version_patchlevel() << ", " << host_target().march_option());

  // In memory: libgccjit writes a .so into a temp dir and dlopen()s it.
  {
    gcc_jit_context* ctxt = make_add1(J, host_target().march_option());
    const auto t0 = Clock::now();
    gcc_jit_result* result = J.context_compile(ctxt);
    const double ms = ms_since(t0);
    INFO(first_error(J, ctxt));
    REQUIRE(result != nullptr);
    auto add1 = reinterpret_cast<Add1>(J.result_get_code(result, kAdd1));
    REQUIRE(add1 != nullptr);
    CHECK(add1(41) == 42);
    CHECK(add1(-1) == 0);
    CHECK(add1(INT64_MAX - 1) == INT64_MAX);
    WARN("context_compile (in memory) of add1: " << ms << " ms");
    J.result_release(result);  // unloads the code: add1 is dangling from here
    J.context_release(ctxt);
  }

  // To a file: a shared library that we load ourselves. Timed over a few fresh contexts (the
  // first also pays for libgccjit's one-time initialisation when it runs first).
  char dir_template[] = "/tmp/crescent_gccjit_XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  const std::string so = dir + "/add1.so";
  std::string times;
  for (int rep = 0; rep < 3; ++rep) {
    gcc_jit_context* ctxt = make_add1(J, host_target().march_option());
    const auto t0 = Clock::now();
    J.context_compile_to_file(ctxt, GCC_JIT_OUTPUT_KIND_DYNAMIC_LIBRARY, so.c_str());
    const double ms = ms_since(t0);
    const std::string err = first_error(J, ctxt);
    J.context_release(ctxt);
    INFO(err);
    REQUIRE(err.empty());
    times += (rep ? ", " : "") + std::to_string(ms);
  }
  WARN("context_compile_to_file (DYNAMIC_LIBRARY) of add1, 3 runs: " << times << " ms");

  void* lib = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  INFO((lib ? "" : dlerror()));
  REQUIRE(lib != nullptr);
  auto add1 = reinterpret_cast<Add1>(dlsym(lib, kAdd1));
  REQUIRE(add1 != nullptr);
  CHECK(add1(41) == 42);
  CHECK(add1(-100) == -99);
  dlclose(lib);
  CHECK(unlink(so.c_str()) == 0);
  CHECK(rmdir(dir.c_str()) == 0);
}

TEST_CASE("gccjit: a bad -march is a compile error, not a crash", "[gccjit]") {
  const GccJit* jit = gccjit();
  if (!jit) {
    WARN("libgccjit unavailable, skipped");
    SUCCEED();
    return;
  }
  const GccJit& J = *jit;
  for (const char* march : {"-march=native", "-march=no-such-cpu"}) {
    gcc_jit_context* ctxt = make_add1(J, march);
    gcc_jit_result* result = J.context_compile(ctxt);
    const std::string err = first_error(J, ctxt);
    WARN(march << ": " << (result ? "compiled" : "failed") << "; first error: \"" << err
               << "\"");
    if (std::string(march) == "-march=no-such-cpu") {
      CHECK(result == nullptr);
      CHECK(!err.empty());
    }
    if (result) J.result_release(result);
    J.context_release(ctxt);
  }
}

#endif  // CRESCENT_HAVE_GCCJIT
