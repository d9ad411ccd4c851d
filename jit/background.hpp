// The background compile thread's queue (compile_native with Options::sync false). A job holds
// its graph weakly: one whose compiled function was dropped (the graph is gone) is skipped, and
// dropped from the queue when it is full. The queue holds at most kMaxQueued jobs; past that the
// oldest deferrable one (else the oldest) is dropped and its graph stays as it runs.
#pragma once
#include <functional>
#include <memory>

#include "vm/graph/graph.hpp"

namespace cr::jit {

constexpr size_t kMaxQueued = 256;

struct Job {
  std::weak_ptr<graph::Graph> graph;
  std::shared_ptr<graph::NativeSlot> slot;
  const void* owner = nullptr;  // Options::owner
  // Options::deferrable: a speed-up of code that already runs natively (an eager kernel's
  // specialisation, autotuning), queued behind every other job
  bool deferrable = false;
  std::function<void(const std::shared_ptr<graph::Graph>&)> run;
};

void submit_background(Job job);

}  // namespace cr::jit
