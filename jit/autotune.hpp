// mode = "max-autotune" (and T.config.autotune), on the CPU and on CUDA. A tuned graph runs its default
// kernels at once; at its first run each kernel's buffers are copied as it is launched, and a
// job of the background compile queue then, per kernel: compiles the plan with other block sizes
// (the kernel cache keeps them), runs every candidate - CPU: block size x thread split, and the
// other streaming choice for stores that may stream (cpu::CodeShape); CUDA:
// jit::cuda::candidates, on a side stream, timed by events - on the copies (outputs land in the
// copies), checks that its outputs are the default's (bit for bit
// without reductions, within float rounding with them; another is rejected and logged), times
// it (best of a few runs) and installs the fastest for later calls. The whole job stays within
// Options::autotune_budget_ms. Each choice is kept in the cache directory as `<key>.tune`,
// keyed by the kernel's text, its size class, the compiler (CUDA: the device's name, the driver
// and NVRTC), the threads and this build, so another process takes it without timing anything.
#pragma once
#include <memory>

#include "jit/cpu/emit.hpp"
#include "jit/cpu/program.hpp"
#include "jit/jit.hpp"

namespace cr::jit {

// One kernel's configuration: the shape of its code (cpu::compile_plan: the block of its inner
// loops, whether its large stores stream) and its thread split (cpu::run_kernel: 0 the heuristic,
// 1 serial, more: the pool).
struct CpuConfig {
  int64_t block = kBlock;
  int threads = 0;
  int64_t stream_from = 0;  // cpu::CodeShape's: 0 the default
  bool operator==(const CpuConfig& o) const {
    return block == o.block && threads == o.threads && stream_from == o.stream_from;
  }
};

// The configurations tried for kernel k of p with `threads` workers, the default first.
std::vector<CpuConfig> cpu_candidates(const cpu::Program& p, size_t k, int threads);

// Arranges the tuning of p (compile_native calls it before the program is published).
void autotune_cpu(const std::shared_ptr<graph::Graph>& g, const std::shared_ptr<cpu::Program>& p, const Options& o);

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

// A kernel launch's slots, on the host.
using KernelBytes = std::vector<std::vector<char>>;
// The power of 2 of a kernel's elements (a template's choice holds for its size class).
int size_class(const Kernel& k);

// One kernel's candidates on a device, for tune_kernel. Candidate 0 is the default.
class Candidates {
 public:
  virtual ~Candidates() = default;
  virtual size_t size() const = 0;
  virtual std::string shown(size_t i) const = 0;  // in the logs and the choice file
  virtual bool ready(size_t i) = 0;  // compiles (or finds) candidate i; false (logged) when it cannot
  // Restores the copies, runs i once and returns the bytes of every slot, on the host.
  virtual KernelBytes outputs(size_t i) = 0;
  virtual double time_ms(size_t i) = 0;  // one run on the copies, timed
  virtual bool install(size_t i) = 0;    // later launches run i
};

// Tunes kernel k of `plan` (the program `name`) by `c`: the choice from `key`'s file in the cache
// directory when it has one, else the candidates timed until Options::autotune_budget_ms (from
// t0_ms) is spent; logs them, installs the winner, counts in `tally`.
void tune_kernel(const std::string& name, const Plan& plan, size_t k, Candidates& c, const std::string& key, const Options& o,
                 double t0_ms, AutotuneStats& tally);
// Ends a tuning job: its line in the log, its tally in autotune_stats().
void finish_tuning(const std::string& name, AutotuneStats tally, double t0_ms, const Options& o);
double autotune_now_ms();

// jit/cuda/autotune.cpp: arranges the tuning of a CUDA program.
void autotune_cuda(const std::shared_ptr<graph::Graph>& g, const std::shared_ptr<const graph::Executable>& exe, const Options& o);


// Arranges the tuning of a freshly compiled program (the driver calls it before publishing it):
// autotune_cpu or autotune_cuda.
void autotune_program(const std::shared_ptr<graph::Graph>& g, const std::shared_ptr<const graph::Executable>& exe, const Options& o);

// jit/cpu/backend.cpp: the plan's kernels compiled in `shape`, through the kernel cache (memory,
// then disk).
std::shared_ptr<cpu::SharedObject> cpu_kernels(const Plan& plan, const cpu::FnTable& fns, cpu::CodeShape shape,
                                               const Options& o);

}  // namespace cr::jit
