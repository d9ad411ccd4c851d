// Grad mode: whether ops record autograd nodes. Per thread, as PyTorch's (each VM is used from one
// thread at a time); T.no_grad / enable_grad / inference_mode / set_grad_enabled set it.
#pragma once

namespace cr::autograd {

inline thread_local bool grad_enabled = true;
inline thread_local bool inference_mode = false;  // also implies grad_enabled == false

// Sets grad mode for a scope (the engine: create_graph on or off) and restores it.
struct GradModeGuard {
  bool prev;
  explicit GradModeGuard(bool on) : prev(grad_enabled) { grad_enabled = on; }
  ~GradModeGuard() { grad_enabled = prev; }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;
};

}  // namespace cr::autograd
