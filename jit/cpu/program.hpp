// A compiled graph on the CPU (jit/program.hpp runs its steps): generated kernels launched over
// the thread pool.
#pragma once
#include <memory>

#include "jit/cpu/emit.hpp"
#include "jit/program.hpp"

namespace cr::jit::cpu {

// A loaded shared object of kernels (dlclose'd when the last program using it goes).
struct SharedObject {
  void* handle = nullptr;
  ~SharedObject();
};

class Program : public PlanProgram {
 public:
  Program(Plan plan, FnTable fns, std::shared_ptr<SharedObject> so);

 private:
  void launch(size_t k, void** bufs) const override;
  FnTable fns_;
  std::shared_ptr<SharedObject> so_;
  std::vector<KernelFn> kernels_;
};

}  // namespace cr::jit::cpu
