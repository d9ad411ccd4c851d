// mode = "max-autotune" (and T.config.autotune) for CPU graphs. A tuned graph runs its default
// kernels at once; at its first run each kernel's buffers are copied as it is launched, and a
// job of the background compile queue then, per kernel: compiles the plan with other block sizes
// (the kernel cache keeps them), runs every candidate - block size x thread split - on the
// copies (outputs land in the copies), checks that its outputs are the default's (bit for bit
// without reductions, within float rounding with them; another is rejected and logged), times
// it (best of a few runs) and installs the fastest for later calls. The whole job stays within
// Options::autotune_budget_ms. Each choice is kept in the cache directory as `<key>.tune`,
// keyed by the kernel's text, its size class, the compiler, the threads and this build, so
// another process takes it without timing anything.
#pragma once
#include <memory>

#include "jit/cpu/program.hpp"
#include "jit/jit.hpp"

namespace cr::jit {

// One kernel's configuration: the block of its inner loops (cpu::compile_plan) and its thread
// split (cpu::run_kernel: 0 the heuristic, 1 serial, more: the pool).
struct CpuConfig {
  int64_t block = kBlock;
  int threads = 0;
  bool operator==(const CpuConfig& o) const { return block == o.block && threads == o.threads; }
};

// The configurations tried for kernel k of p with `threads` workers, the default first.
std::vector<CpuConfig> cpu_candidates(const cpu::Program& p, size_t k, int threads);

// Arranges the tuning of p (compile_native calls it before the program is published).
void autotune_cpu(const std::shared_ptr<graph::Graph>& g, const std::shared_ptr<cpu::Program>& p, const Options& o);

// CUDA graphs are not tuned yet (their candidate space is jit::cuda::candidates): says so on
// stderr once a process, and they run the heuristic's kernels.
void autotune_cuda_untuned();

// Since the process started (T.compiler.stats()).
struct AutotuneStats {
  int64_t graphs = 0;      // tuning jobs finished
  int64_t kernels = 0;     // kernels tuned by timing candidates
  int64_t candidates = 0;  // candidates timed
  int64_t cached = 0;      // kernels whose choice came from the cache directory
  int64_t rejected = 0;    // candidates whose outputs were not the default's
  double ms = 0;           // time the tuning jobs took
};
AutotuneStats autotune_stats();

// Arranges the tuning of a freshly compiled program (the driver calls it before publishing it):
// autotune_cpu for CPU programs; CUDA ones are not tuned yet.
void autotune_program(const std::shared_ptr<graph::Graph>& g, const std::shared_ptr<const graph::Executable>& exe, const Options& o);

// jit/cpu/backend.cpp: the plan's kernels compiled with `block`, through the kernel cache
// (memory, then disk).
std::shared_ptr<cpu::SharedObject> cpu_kernels(const Plan& plan, const cpu::FnTable& fns, int64_t block, const Options& o);

}  // namespace cr::jit
