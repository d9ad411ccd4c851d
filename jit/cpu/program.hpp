// A compiled graph on the CPU: the plan's steps in order - generated kernels launched over the
// thread pool, Extern nodes run by the eager kernels - with buffers allocated as the plan says
// and temporaries released after their last reader.
#pragma once
#include <memory>

#include "jit/cpu/emit.hpp"

namespace cr::jit::cpu {

// A loaded shared object of kernels (dlclose'd when the last program using it goes).
struct SharedObject {
  void* handle = nullptr;
  ~SharedObject();
};

class Program : public graph::Executable {
 public:
  Program(Plan plan, FnTable fns, std::shared_ptr<SharedObject> so);
  void run(Context& ctx, std::vector<Tensor>& vals) const override;
  const Plan& plan() const { return plan_; }

 private:
  Plan plan_;
  FnTable fns_;
  std::shared_ptr<SharedObject> so_;
  std::vector<KernelFn> kernels_;
};

}  // namespace cr::jit::cpu
