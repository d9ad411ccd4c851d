// Grad mode: whether ops record autograd nodes. Per thread, as PyTorch's (each VM is used from one
// thread at a time); T.no_grad / enable_grad / inference_mode / set_grad_enabled set it.
#pragma once
#include "vm/abi.h"

namespace cr::autograd {

inline thread_local bool grad_enabled = true;
inline thread_local bool inference_mode = false;  // also implies grad_enabled == false
// Under inference mode: the grad mode Lua set (enable_grad, set_grad_enabled), which
// is_grad_enabled reports; nothing records all the same (PyTorch's InferenceMode).
inline thread_local bool inference_grad_mode = false;

// cr_tensor::_flags bit of an inference tensor (PyTorch's): made by an op under inference mode,
// or a view of one. It may not be changed in place, nor saved for backward, outside that mode.
constexpr int8_t kInferenceTensor = 1;
inline bool is_inference(const cr_tensor* t) { return t->_flags & kInferenceTensor; }
// _flags bit of a lazy value of a training capture's replay that requires grad, as the recorded
// call's output did: it has no autograd history until its graph runs; Lua's queries read this.
constexpr int8_t kLazyGrad = 2;
inline bool lazy_grad(const cr_tensor* t) { return t->_flags & kLazyGrad; }

// Sets grad mode for a scope (the engine: create_graph on or off) and restores it.
struct GradModeGuard {
  bool prev;
  explicit GradModeGuard(bool on) : prev(grad_enabled) { grad_enabled = on; }
  ~GradModeGuard() { grad_enabled = prev; }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;
};

}  // namespace cr::autograd
