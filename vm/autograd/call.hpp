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

// Sees every op call that runs (not those a capture takes): how vm/graph/joint.cpp traces the
// derivative rules into a graph. One per thread, set while a trace runs.
struct OpObserver {
  virtual ~OpObserver() = default;
  virtual void on_call(int op, const cr_value* args, int nargs, const std::vector<Tensor>& outs) = 0;
};
extern thread_local OpObserver* op_observer;

void run_op(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs);
void call_recording(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs);

// A training capture ran the call eagerly (a guard failed at it) after the replayed ops before it
// ran and got their segment's node: its arguments may require grad only now.
void record_late(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs);
// Before such a call runs, if it writes in place: what its node needs from before the write.
void prepare_late(Context& ctx, int op, const cr_value* args, int nargs);

// A call no argument of which requires grad now: in a training capture, a replayed argument may
// require it once the call ran (record_late).
inline void run_unrecorded(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  run_op(ctx, op, args, nargs, outs);
  if (ctx.capture_training && !ctx.capture_lazy && grad_enabled) [[unlikely]] record_late(ctx, op, args, nargs, outs);
}

// The path without autocast (autocast.cpp calls it with the cast arguments).
inline void call_plain(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  if (grad_enabled && touches_grad(args, nargs)) return call_recording(ctx, op, args, nargs, outs);
  run_unrecorded(ctx, op, args, nargs, outs);
}

inline void call(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  if (autocast.enabled) [[unlikely]] call_autocast(ctx, op, args, nargs, outs);
  else call_plain(ctx, op, args, nargs, outs);
}

int op_id(const char* name);
// The Lua position of the node the last call made (service bit 8 of cr_ctx).
void set_where(const char* where);  // the registry index of a known op (cached)

}  // namespace cr::autograd
