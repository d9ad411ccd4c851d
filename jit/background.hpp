// The background compile thread's queue (compile_native with Options::sync false). A job holds
// its graph weakly: one whose compiled function was dropped (the graph is gone) is skipped, and
// dropped from the queue when it is full. The queue holds at most kMaxQueued jobs; past that the
// oldest is dropped and its graph stays eager (its slot says why).
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
  std::function<void(const std::shared_ptr<graph::Graph>&)> run;
};

void submit_background(Job job);

}  // namespace cr::jit
