// Grad mode: whether ops record autograd nodes. Per thread, as PyTorch's (each VM is used from one
// thread at a time); T.no_grad / enable_grad / inference_mode / set_grad_enabled set it. With
// the autocast state (vm/autograd/autocast.hpp), it is also each VM's own: Modes below.
#pragma once
#include <utility>

#include "vm/abi.h"
#include "vm/dtype.hpp"

namespace cr::autograd {

// One device type's autocast (PyTorch keeps CUDA's and the CPU's apart: both may be on at once).
struct AutocastDevice {
  bool enabled = false;
  DType dtype;  // the lower precision
};
struct AutocastState {
  bool enabled = false;  // either device's: the op-call path's one test
  AutocastDevice dev[2] = {{false, DType::bf16}, {false, DType::f16}};  // by Device::type: cpu, cuda
  void set(int type, AutocastDevice d) {
    dev[type] = d;
    enabled = dev[0].enabled || dev[1].enabled;
  }
};
inline thread_local AutocastState autocast{};

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

// A VM's modes while it does not run: the embedding API swaps them with the thread's at each
// entry into the VM (outermost only), so two VMs on one thread do not share them.
struct Modes {
  bool grad_enabled = true, inference_mode = false, inference_grad_mode = false;
  AutocastState autocast{};
  void swap_with_thread() {
    std::swap(grad_enabled, autograd::grad_enabled);
    std::swap(inference_mode, autograd::inference_mode);
    std::swap(inference_grad_mode, autograd::inference_grad_mode);
    std::swap(autocast, autograd::autocast);
  }
};

// Sets grad mode for a scope (the engine: create_graph on or off) and restores it.
struct GradModeGuard {
  bool prev;
  explicit GradModeGuard(bool on) : prev(grad_enabled) { grad_enabled = on; }
  ~GradModeGuard() { grad_enabled = prev; }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;
};

}  // namespace cr::autograd
