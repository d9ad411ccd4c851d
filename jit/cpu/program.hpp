// A compiled graph on the CPU (jit/program.hpp runs its steps): generated kernels launched over
// the thread pool.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>

#include "jit/cpu/emit.hpp"
#include "jit/program.hpp"

namespace cr::jit::cpu {

// A loaded shared object of kernels (dlclose'd when the last program using it goes).
struct SharedObject {
  void* handle = nullptr;
  ~SharedObject();
};

// Kernel k's function in `so`; throws when it lacks it.
KernelFn kernel_fn(const SharedObject& so, const Kernel& k);

// The work items per task below which kern runs on one thread (kParallelGrain elements).
int64_t default_grain(const Kernel& kern);

// Runs `fn`, the code of `kern`, over all its work items: `threads` 0 shares them out as the
// heuristic says (kParallelGrain), 1 runs them on the calling thread, more on the pool.
void run_kernel(const Kernel& kern, KernelFn fn, void** fns, const int64_t* P, void** bufs, int threads);

// Copies of the buffers one kernel launch got (one per buffer slot, of the bytes it may touch).
using KernelInputs = std::vector<std::vector<char>>;

class Program : public PlanProgram {
 public:
  Program(Plan plan, FnTable fns, std::shared_ptr<SharedObject> so);
  const FnTable& fns() const { return fns_; }
  // Later launches of kernel k run `fn` (of `so`, kept loaded) with `threads` (run_kernel).
  void install(size_t k, std::shared_ptr<SharedObject> so, KernelFn fn, int threads);
  // At the next run, each kernel's buffers are copied as it is launched; once all are,
  // take(copies by kernel) is called (on the running thread: it should only hand them on).
  void capture_inputs(std::function<void(std::vector<KernelInputs>)> take);

 private:
  void launch(size_t k, void** bufs) const override;
  FnTable fns_;
  std::vector<std::shared_ptr<SharedObject>> sos_;  // the plan's, then those of installed kernels
  std::unique_ptr<std::atomic<KernelFn>[]> kernels_;
  std::unique_ptr<std::atomic<int>[]> threads_;
  std::mutex mutex_;  // sos_
  mutable LaunchCapture<KernelInputs> capture_;
};

}  // namespace cr::jit::cpu
