// Native CPU compiles from several VMs at once (issue 32): the compiler process, the in-process
// mode, the background queue of dropped functions.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <crescent/crescent.hpp>

#include "jit/background.hpp"
#include "jit/jit.hpp"
#include "jit/scratch.hpp"

using crescent::VM;

namespace {

// Rounds of the multi-VM tests: 10, or CRESCENT_TEST_ROUNDS.
int rounds(int fallback) {
  const char* v = std::getenv("CRESCENT_TEST_ROUNDS");
  return v && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

// One VM compiles three graphs, distinct for each VM and round (their constants are literals of
// the kernels: each is a compile, not a memory-cache hit), in line and without a disk cache, and
// compares them with eager. "" when every graph ran native code with eager's results.
std::string compile_three(int id, int round) {
  VM vm;
  auto r = vm.run_string(R"(
    local T = crescent
    T.config.sync_compile = true
    T.config.cache_dir = "0"
    local id, round = )" + std::to_string(id) + ", " + std::to_string(round) + R"(
    local bad = {}
    for g = 1, 3 do
      local c = 1 + id / 8 + round / 128 + g / 1024
      local fn = function(x) return ((x * c + g):tanh() - x / c):sum(1) end
      local f = T.compile(fn, { hot = 0 })
      local x = T.randn(8 + g, 16 + id)
      local got = f(x)
      got = f(x)
      local want = fn(x)
      local err = (got - want):abs():max():item()
      if not (err <= 1e-5 * (1 + want:abs():max():item())) then bad[#bad + 1] = "graph " .. g .. " differs from eager by " .. err end
    end
    local s = T.compiler.stats()
    if s.eager_fallbacks ~= 0 or s.kernels_compiled < 3 then
      bad[#bad + 1] = string.format("%d eager fallbacks, %d kernels compiled", s.eager_fallbacks, s.kernels_compiled)
    end
    return table.concat(bad, "; ")
  )");
  return r.empty() ? std::string("no result") : r[0].as_string();
}

// Rounds of 4 VMs on 4 threads, each compiling; the failures, with their VM and round.
std::vector<std::string> four_vms(int n) {
  std::vector<std::string> failures;
  for (int round = 0; round < n; ++round) {
    std::vector<std::string> out(4);
    std::vector<std::thread> threads;
    for (int id = 0; id < 4; ++id)
      threads.emplace_back([&out, id, round] {
        try {
          out[size_t(id)] = compile_three(id, round);
        } catch (const std::exception& e) {
          out[size_t(id)] = e.what();
        }
      });
    for (std::thread& t : threads) t.join();
    for (int id = 0; id < 4; ++id)
      if (!out[size_t(id)].empty()) failures.push_back("round " + std::to_string(round) + " VM " + std::to_string(id) + ": " + out[size_t(id)]);
  }
  return failures;
}

bool native_cpu() {
  std::string why;
  if (cr::jit::cpu_backend_available(&why)) return true;
  WARN("native CPU code is not available here: " << why);
  return false;
}

}  // namespace

// A compiler forked from a threaded program inherited locks other threads held (glibc's
// __exit_funcs_lock) and hung: every compile must now finish, with native code.
TEST_CASE("compile process: 4 VMs compile on 4 threads, repeated", "[compile_process]") {
  if (!native_cpu()) return;
  for (const std::string& f : four_vms(rounds(10))) FAIL_CHECK(f);
}

TEST_CASE("compile process: 4 VMs compile in process (CRESCENT_JIT_FORK=0) on 4 threads", "[compile_process]") {
  if (!native_cpu()) return;
  ::setenv("CRESCENT_JIT_FORK", "0", 1);
  std::vector<std::string> failures = four_vms(rounds(10) / 2);
  ::unsetenv("CRESCENT_JIT_FORK");
  for (const std::string& f : failures) FAIL_CHECK(f);
}

// ---- the background queue ----------------------------------------------------------------------

namespace {

// Holds the background thread for a scope: jobs queue up and none starts.
struct Held {
  Held() { cr::jit::hold_background_compiles(true); }
  ~Held() { cr::jit::hold_background_compiles(false); }
};

}  // namespace

TEST_CASE("background queue: bounded, and the compiles of dropped functions never run", "[compile_process]") {
  if (!native_cpu()) return;
  VM vm;
  vm.run_string("crescent.config.sync_compile = false; crescent.config.cache_dir = '0'; x = crescent.randn(16)");
  const cr::jit::CacheStats c0 = cr::jit::cache_stats();
  const cr::jit::QueueStats q0 = cr::jit::background_stats();
  cr::jit::QueueStats q1;
  {
    Held held;
    vm.run_string(R"(
      for i = 1, 600 do
        local f = crescent.compile(function(a) return a * 2 + 1 end, { hot = 1 })
        f(x); f(x)
      end
      keep = crescent.compile(function(a) return a * 3 - 1 end, { hot = 1 })
      keep(x); keep(x)
    )");
    q1 = cr::jit::background_stats();
    REQUIRE(q1.queued <= int64_t(cr::jit::kMaxQueued));
    REQUIRE(q1.peak <= int64_t(cr::jit::kMaxQueued));
    // every job past the bound left the queue: stale (collected already) or evicted
    REQUIRE(q1.queued - q0.queued + (q1.stale - q0.stale) + (q1.evicted - q0.evicted) == 601);
    vm.run_string("collectgarbage(); collectgarbage()");
  }
  cr::jit::wait_background_compiles();
  const cr::jit::QueueStats q2 = cr::jit::background_stats();
  const cr::jit::CacheStats c2 = cr::jit::cache_stats();
  CHECK(q2.queued == 0);
  // of the jobs queued when the functions were dropped, keep's alone compiled
  CHECK(q2.stale - q1.stale == q1.queued - q0.queued - 1);
  CHECK(c2.compiled + c2.memory_hits - c0.compiled - c0.memory_hits == 1);
  REQUIRE(vm.run_string("keep(x); return crescent.compiler.stats().kernels_compiled")[0].as_number() == 1);
}

TEST_CASE("background queue: a VM's end drops its queued compiles", "[compile_process]") {
  if (!native_cpu()) return;
  Held held;
  const cr::jit::QueueStats q0 = cr::jit::background_stats();
  {
    VM vm;
    vm.run_string(R"(
      crescent.config.sync_compile = false
      local x = crescent.randn(8)
      fs = {}
      for i = 1, 5 do
        fs[i] = crescent.compile(function(a) return a * i end, { hot = 1 })
        fs[i](x); fs[i](x)
      end
    )");
    REQUIRE(cr::jit::background_stats().queued - q0.queued == 5);
  }
  const cr::jit::QueueStats q1 = cr::jit::background_stats();
  CHECK(q1.queued == q0.queued);
  CHECK(q1.cancelled - q0.cancelled == 5);
}

// ---- scratch directories -----------------------------------------------------------------------

TEST_CASE("scratch directories: those of ended processes are swept, once old enough", "[compile_process]") {
  namespace fs = std::filesystem;
  const std::string root = cr::jit::make_scratch_dir();  // (a private root for the test)
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(gone, &status, 0) == gone);
  auto dir = [&](const std::string& name, bool old) {
    fs::create_directories(root + "/" + name + "/libgccjit-abc123");
    if (!old) return;
    const timespec t[2] = {{std::time(nullptr) - 3600, 0}, {std::time(nullptr) - 3600, 0}};
    REQUIRE(::utimensat(AT_FDCWD, (root + "/" + name).c_str(), t, 0) == 0);
  };
  const std::string dead = "crescent-jit-" + std::to_string(gone) + "-aaaaaa";
  const std::string young = "crescent-jit-" + std::to_string(gone) + "-bbbbbb";
  const std::string mine = "crescent-jit-" + std::to_string(::getpid()) + "-cccccc";
  const std::string other = "other-" + std::to_string(gone) + "-dddddd";
  dir(dead, true), dir(young, false), dir(mine, true), dir(other, true);
  CHECK(cr::jit::sweep_scratch_dirs(root, 600) == 1);
  CHECK(!fs::exists(root + "/" + dead));
  CHECK(fs::exists(root + "/" + young));
  CHECK(fs::exists(root + "/" + mine));
  CHECK(fs::exists(root + "/" + other));
  cr::jit::remove_scratch_dir(root);
}

TEST_CASE("background queue: deferrable jobs wait behind the others, in order within each class", "[compile_process]") {
  std::vector<std::string> order;
  std::mutex m;
  auto g = std::make_shared<cr::graph::Graph>();
  auto job = [&](const std::string& name, bool deferrable) {
    return cr::jit::Job{g, std::make_shared<cr::graph::NativeSlot>(), nullptr, deferrable,
                        [&order, &m, name](const std::shared_ptr<cr::graph::Graph>&) {
                          std::lock_guard<std::mutex> lock(m);
                          order.push_back(name);
                        }};
  };
  {
    Held held;
    for (auto [name, deferrable] : {std::pair{"d1", true}, {"d2", true}, {"n1", false}, {"d3", true}, {"n2", false}})
      cr::jit::submit_background(job(name, deferrable));
  }
  cr::jit::wait_background_compiles();
  CHECK(order == std::vector<std::string>{"n1", "n2", "d1", "d2", "d3"});
}
