// A compiled graph, on any device: the plan's steps in order - generated kernels, launched by the
// backend (jit/cpu/program, jit/cuda/program), and Extern nodes run by the eager kernels - with
// buffers allocated on the plan's device as the plan says and temporaries released after their
// last reader.
#pragma once
#include "jit/fusion/schedule.hpp"

namespace cr::jit {

// The elements of its storage that buffer b spans (from element 0).
int64_t buffer_extent(const Buffer& b);

class PlanProgram : public graph::Executable {
 public:
  PlanProgram(Plan plan, Device device) : plan_(std::move(plan)), device_(device) {}
  // `numbers`: the call's numbers by graph::Arg::varying (null, or an argument with none: the
  // value the graph was built with)
  void run(Context& ctx, std::vector<Tensor>& vals, const double* numbers = nullptr) const override;
  const Plan& plan() const { return plan_; }

 protected:
  // Runs kernel k; bufs[i] is the storage (element 0) of the kernel's i-th buffer slot.
  virtual void launch(size_t k, void** bufs) const = 0;
  // A device program's check word (vm/checks.hpp), and reading it later (CPU programs use a
  // word of the run and read it at once).
  virtual void* check_word() const { return nullptr; }
  virtual void defer_check() const {}
  Plan plan_;
  Device device_;
};

}  // namespace cr::jit
