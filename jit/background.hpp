// The background compile thread's queue (compile_native with Options::sync false). A job holds
// its graph weakly: one whose compiled function was dropped (the graph is gone) is skipped, and
// dropped from the queue when it is full. The queue holds at most kMaxQueued jobs; past that the
// oldest deferrable one (else the oldest) is dropped and its graph stays as it runs (its slot
// says why). Deferrable jobs (speed-ups of code that already runs natively: eager kernels'
// specialisations, autotuning) wait behind the others, so that a compiled function's graph is
// not queued behind dozens of them.
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
  bool deferrable = false;       // Options::deferrable
  std::function<void(const std::shared_ptr<graph::Graph>&)> run;
};

void submit_background(Job job);

}  // namespace cr::jit
