// Autocast (mixed precision, PyTorch's torch.autocast): a per-thread state beside the grad mode,
// applied in the one op-call path (call.hpp) from each op's OpDef::cast policy, set where the op
// is registered. Casts are ordinary conversion ops called through the same path, so autograd
// differentiates through them and capture records them.
#pragma once
#include <vector>

#include "vm/context.hpp"
#include "vm/registry.hpp"

namespace cr::autograd {

struct AutocastState {
  bool enabled = false;
  int8_t device = 1;          // Device::type: 0 cpu, 1 cuda
  DType dtype = DType::f16;   // the lower precision
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

// Runs op with its floating tensor arguments on the autocast device cast as its policy says
// (cast_call is the path without autocast).
void call_autocast(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs);

}  // namespace cr::autograd
