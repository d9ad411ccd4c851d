// The one op-call path (DESIGN.md "Autograd"): a Lua op call (vm/api.cpp) and a derivative rule
// (var.hpp) both come here. Under autocast its arguments are cast first (autocast.hpp). It runs
// the op - through the capture hook when a compiled function is being captured, else dispatch -
// and, when grad mode is on and a tensor argument requires grad, records an autograd node
// (record.cpp). With no tensor requiring grad the cost is a flag test per tensor argument.
#pragma once
#include <vector>

#include "vm/autograd/autocast.hpp"
#include "vm/autograd/grad_mode.hpp"
#include "vm/context.hpp"
#include "vm/registry.hpp"

namespace cr::autograd {

inline bool touches_grad(const cr_value* args, int nargs) {
  for (int i = 0; i < nargs; ++i) {
    if (args[i].tag == kTensor) {
      if (static_cast<const cr_tensor*>(args[i].ptr)->_autograd) return true;
    } else if (args[i].tag == kTensors) {
      for (int j = 0; j < args[i].n; ++j)
        if (static_cast<cr_tensor* const*>(args[i].ptr)[j]->_autograd) return true;
    }
  }
  return false;
}

void run_op(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs);
void call_recording(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs);

// The path without autocast (autocast.cpp calls it with the cast arguments).
inline void call_plain(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  if (grad_enabled && touches_grad(args, nargs)) call_recording(ctx, op, args, nargs, outs);
  else run_op(ctx, op, args, nargs, outs);
}

inline void call(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  if (autocast.enabled) [[unlikely]] call_autocast(ctx, op, args, nargs, outs);
  else call_plain(ctx, op, args, nargs, outs);
}

int op_id(const char* name);
// The Lua position of the node the last call made (service bit 8 of cr_ctx).
void set_where(const char* where);  // the registry index of a known op (cached)

}  // namespace cr::autograd
