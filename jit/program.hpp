// A compiled graph, on any device: the plan's steps in order - generated kernels, launched by the
// backend (jit/cpu/program, jit/cuda/program), and Extern nodes run by the eager kernels - with
// buffers allocated on the plan's device as the plan says and temporaries released after their
// last reader.
#pragma once
#include <atomic>
#include <functional>
#include <mutex>

#include "jit/fusion/schedule.hpp"

namespace cr::jit {

// The elements of its storage that buffer b spans (from element 0).
int64_t buffer_extent(const Buffer& b);

// The bytes of buffer b a launch may touch (the check word, the run's values and numbers are
// buffers of int64 words).
size_t slot_bytes(const Buffer& b);

// Autotuning's copies of what each kernel of one run got (jit/autotune.hpp): armed, then every
// kernel's launch adds its copies; the launch that completes them hands them all on.
template <class Copies>
class LaunchCapture {
 public:
  using Take = std::function<void(std::vector<Copies>)>;
  void arm(size_t kernels, Take take) {
    std::lock_guard<std::mutex> lock(mutex_);
    take_ = std::move(take);
    got_.assign(kernels, {});
    have_.assign(kernels, 0);
    on_ = true;
  }
  bool on() const { return on_; }
  // Kernel k's copies, made by copy() unless the run has them; on the launching thread, before
  // the launch (take() should only hand the copies on).
  template <class F>
  void add(size_t k, F copy) {
    Take take;
    std::vector<Copies> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!on_ || have_[k]) return;
      got_[k] = copy();
      have_[k] = 1;
      for (char h : have_)
        if (!h) return;
      on_ = false;
      all = std::move(got_);
      take = std::move(take_);
    }
    take(std::move(all));
  }

 private:
  std::mutex mutex_;
  std::atomic<bool> on_{false};
  std::vector<Copies> got_;
  std::vector<char> have_;
  Take take_;
};

class PlanProgram : public graph::Executable {
 public:
  PlanProgram(Plan plan, Device device);
  // `numbers`: the call's numbers by graph::Arg::varying (null, or an argument with none: the
  // value the graph was built with)
  void run(Context& ctx, std::vector<Tensor>& vals, const double* numbers = nullptr,
           const std::vector<char>* unheld = nullptr) const override;
  const Plan& plan() const { return plan_; }
  const std::vector<char>* stores() const override { return &stores_; }

 protected:
  // Runs kernel k; bufs[i] is the storage (element 0) of the kernel's i-th buffer slot.
  virtual void launch(size_t k, void** bufs) const = 0;
  // A device program's check word (vm/checks.hpp), and reading it later (CPU programs use a
  // word of the run and read it at once).
  virtual void* check_word() const { return nullptr; }
  virtual void defer_check() const {}
  std::vector<const Storage*> settled_inputs(const std::vector<Tensor>& vals) const;
  Plan plan_;
  Device device_;
  graph::DeadLists dead_;  // per step: graph values a run may free after it (graph::dead_after)
  std::vector<char> stores_;  // by graph value: a buffer of the plan or an extern step's result
  // Context::plan_settled: the graph's inputs, and the values whose storage a node writes
  std::vector<int32_t> inputs_, written_;
};

}  // namespace cr::jit
