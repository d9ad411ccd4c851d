// Compiled autograd (PyTorch's AOTAutograd), issue 35. A segment captured while grad mode is on
// and some input requires grad runs its forward graph like any other, keeping the values the
// derivative rules read, and hands Lua's tensors ONE autograd node for the whole segment
// (`CompiledFunctionBackward`). That node's backward is a graph too: traced once per set of
// outputs that receive a gradient, by re-running the forward with eager autograd and the engine
// over it while every op call is recorded (the same derivative rules eager autograd uses), then
// cut from the joint trace, optimised and compiled like a forward graph.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "vm/graph/graph.hpp"

namespace cr::graph {

// What autograd needs from a training segment's forward graph (values by id).
struct GradPlan {
  std::vector<char> needs_grad;  // depends differentiably on an input that requires grad
  // what the forward keeps for the backward (partition.hpp: of the values the derivative rules
  // read, the backward recomputes the others), its bytes, and what keeping all of those would
  std::vector<int32_t> saved;
  int64_t saved_bytes = 0, required_bytes = 0;
  int required_count = 0;
  std::string unsupported;  // why the segment falls back to eager autograd ("": it need not)
  bool any = false;         // some value requires grad
};
// `input_requires`: by value id, whether each graph input requires grad. `grad_ops` /
// `no_grad_ops`: how many of the segment's op calls ran with grad mode on / off.
GradPlan plan_gradients(const Graph& g, const std::vector<char>& input_requires, int grad_ops, int no_grad_ops);

// One forward graph's backward graphs, shared by the nodes of its runs.
struct Joint;
struct JointOptions {
  std::string name;     // the forward graph's, for logs
  std::string backend;  // compile's option: "eager" / "aot_eager" run the backward on the eager kernels
  // an instance of a dynamic segment: its backward graphs are compiled size-generic, and counted
  // in backward_graphs_compiled only for the segment's first instance (as forward graphs are)
  bool dynamic = false, reinstance = false;
};
std::shared_ptr<Joint> make_joint(const std::shared_ptr<const Graph>& forward, GradPlan plan, JointOptions o);
const GradPlan& plan_of(const Joint& j);
const JointOptions& options_of(const Joint& j);

// After the forward graph ran (`vals` by value id, inputs included): makes the segment's node,
// whose inputs are the graph inputs that require grad, and gives it as grad_fn to `held` (value
// id and Lua's tensor: the segment's values Lua still holds).
void attach_backward(const std::shared_ptr<Joint>& j, const std::vector<Tensor>& vals,
                     const std::vector<std::pair<int32_t, cr_tensor*>>& held);

}  // namespace cr::graph
