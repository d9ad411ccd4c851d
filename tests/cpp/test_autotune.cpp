// mode = "max-autotune" never tunes in the foreground (jit/autotune.hpp): while the background
// thread is held, a tuned function's calls return with the default kernels' results and no
// tuning job has run; released, the job runs and the calls go on with the winners.
#include <catch2/catch.hpp>

#include <string>

#include <crescent/crescent.hpp>

#include "jit/autotune.hpp"
#include "jit/jit.hpp"

using crescent::VM;

TEST_CASE("autotune: the first calls return before tuning has run", "[autotune]") {
  std::string why;
  if (!cr::jit::cpu_backend_available(&why)) {
    WARN("native CPU code is not available here: " << why);
    return;
  }
  VM vm;
  vm.run_string(R"(
    T = crescent
    T.config.sync_compile = true
    T.config.cache_dir = "0"
    x = T.randn(32, 1500)
    fn = function(v) return (v * 1.375 + 0.5):tanh():sum(2) end
    f = T.compile(fn, { hot = 0, mode = "max-autotune" })
    want = fn(x)
  )");
  const cr::jit::AutotuneStats a0 = cr::jit::autotune_stats();
  cr::jit::hold_background_compiles(true);
  // native code (sync_compile), the tuning job queued behind the hold
  const double err = vm.run_string("local e = 0; for _ = 1, 3 do e = math.max(e, (f(x) - want):abs():max():item()) end; return e")[0].as_number();
  const cr::jit::AutotuneStats a1 = cr::jit::autotune_stats();
  const double queued = vm.run_string("return T.compiler.stats().compiles_pending")[0].as_number();
  cr::jit::hold_background_compiles(false);
  cr::jit::wait_background_compiles();
  const cr::jit::AutotuneStats a2 = cr::jit::autotune_stats();
  CHECK(err <= 1e-4);
  CHECK(a1.graphs == a0.graphs);
  CHECK(a1.candidates == a0.candidates);
  CHECK(queued >= 1);
  CHECK(a2.graphs == a0.graphs + 1);
  CHECK(a2.candidates > a0.candidates);
  CHECK(vm.run_string("return (f(x) - want):abs():max():item()")[0].as_number() <= 1e-4);
  CHECK(vm.run_string("return T.compiler.stats().kernels_compiled")[0].as_number() >= 1);
}
