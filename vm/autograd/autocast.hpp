// Autocast (mixed precision, PyTorch's torch.autocast): a per-thread state beside the grad mode,
// applied in the one op-call path (call.hpp) from each op's OpDef::cast policy, set where the op
// is registered. Casts are ordinary conversion ops called through the same path, so autograd
// differentiates through them and capture records them.
#pragma once
#include <vector>

#include "vm/context.hpp"
#include "vm/registry.hpp"

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

// Off for a scope: the engine runs backward outside autocast, as PyTorch does; the casts the
// forward recorded differentiate back, so gradients reach each input in its own dtype.
struct AutocastOff {
  bool prev;
  AutocastOff() : prev(autocast.enabled) { autocast.enabled = false; }
  ~AutocastOff() { autocast.enabled = prev; }
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;
};

// Runs op with its floating tensor arguments cast as its policy for their device type says, when
// that device's autocast is on (an op's device: its first tensor argument's).
void call_autocast(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs);

}  // namespace cr::autograd
