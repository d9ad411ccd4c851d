// The runtime's calls upward (docs: vm/README.md "Layers"). The runtime links nothing above it:
// where it needs capture (a lazy tensor's value) or the compiler (an eager CUDA op's kernel, a
// library kernel's CUBIN), it calls through this one table, which the upper layers fill when a
// VM starts (install_hooks, vm/lua/layers.hpp). Until then each entry raises an error naming it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "vm/tensor.hpp"

namespace cr {

struct Context;
namespace graph {
struct Graph;
struct NativeOptions;
}  // namespace graph

struct Hooks {
  // ---- capture (vm/graph/hooks.cpp) ----
  // Gives a new Context its recorder (Context::recorder).
  void (*start_capture)(Context& ctx);
  // A lazy tensor of a compiled function is computed before an op reads it (graph::ensure_real),
  // and lazy values recomputed from a storage before an in-place write to it (graph::before_write).
  void (*ensure_real)(Context& ctx, cr_tensor* t);
  void (*before_write)(Context& ctx, Storage* s);
  // Frees a tensor's cr_tensor::_lazy as the tensor is released (graph::LazyInfo).
  void (*release_lazy)(cr_tensor* t);
  // An op call (autograd::call: from Lua or a derivative rule) while a compiled function is being
  // captured: recorded, `outs` its lazy results; false when nothing is being captured.
  bool (*record_call)(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs);

  // ---- compiler (jit/hooks.cpp) ----
  // An op on CUDA tensors as a generated kernel; false when it has none (it runs on host copies).
  bool (*cuda_run_op)(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>* outs);
  // dst = src on one CUDA device as a generated kernel; false when it has none.
  bool (*cuda_copy)(const Tensor& dst, const Tensor& src);
  // The CUBIN of a library kernel's module source for `arch` (prebuilt, cached or compiled).
  std::string (*cuda_cubin)(Context& ctx, const std::string& source, const std::string& name, const std::string& arch);
  // Capture hands an optimised graph to a native backend (jit/jit.hpp compile_native), after
  // asking whether the CPU / CUDA backend can run here (`why` says why not).
  void (*compile_native)(const std::shared_ptr<graph::Graph>& g, const graph::NativeOptions& o);
  bool (*backend_available)(bool cuda, std::string* why);
};

// The process's table (one for every VM: the layers above are the same code for all).
Hooks& hooks();

}  // namespace cr
