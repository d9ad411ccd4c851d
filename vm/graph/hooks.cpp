#include "vm/graph/hooks.hpp"

#include "vm/graph/recorder.hpp"

namespace cr::graph {

void install_hooks(Hooks& h) {
  h.start_capture = [](Context& ctx) {
    ctx.recorder = {new Recorder(ctx), [](Recorder* r) { delete r; }};
  };
  h.ensure_real = ensure_real;
  h.before_write = before_write;
  h.release_lazy = release_lazy;
  h.record_call = [](Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
    if (!ctx.recorder->active() || ctx.recorder->paused()) return false;
    ctx.recorder->call(op, args, nargs, outs);
    return true;
  };
}

}  // namespace cr::graph
