// Autocast (mixed precision, PyTorch's torch.autocast): a per-thread state beside the grad mode,
// applied in the one op-call path (call.hpp) from each op's OpDef::cast policy, set where the op
// is registered. Casts are ordinary conversion ops called through the same path, so autograd
// differentiates through them and capture records them.
#pragma once
#include <vector>

#include "vm/autograd/grad_mode.hpp"
#include "vm/context.hpp"
#include "vm/registry.hpp"

namespace cr::autograd {

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
