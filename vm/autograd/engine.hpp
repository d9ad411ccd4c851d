// The eager backward (PyTorch's engine.cpp, single-threaded): walks the nodes reachable from the
// roots in reverse topological order by dependency counts (the latest node first among the
// ready ones), sums the gradients per edge, runs each node's derivative rule, accumulates into
// leaves' .grad (or captures the gradients of given inputs), runs hooks and retain_grad.
#pragma once
#include <vector>

#include "vm/autograd/meta.hpp"
#include "vm/context.hpp"

namespace cr::autograd {

struct BackwardOptions {
  bool retain_graph = false;
  bool create_graph = false;
  bool allow_unused = false;
  bool capture = false;  // T.autograd.grad: return the inputs' gradients, touch no .grad
};

// Thrown when a hook raised: the Lua side re-raises the hook's own error.
struct HookRaised : Error {
  HookRaised() : Error("a hook raised an error") {}
};

// grads[i] undefined: ones for a one-element root. Returns the inputs' gradients (capture), or
// accumulates them into the inputs' .grad (inputs given) or into every leaf's .grad.
std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& roots, std::vector<Tensor> grads,
                             const std::vector<Tensor>& inputs, const BackwardOptions& o);

// Node n's gradients of its inputs from those of its outputs (its derivative rule or its custom
// backward), each fitted to its input; n's saved tensors are checked, not released.
struct Node;
std::vector<Tensor> run_node(Node& n, std::vector<Tensor>& out_grads, bool create_graph);

// Inside a custom node's apply: whether the engine frees the node's saved values when it returns
// (no retain_graph), so that the node may drop them sooner.
bool releases_saved();
// While a custom backward's apply runs (Backward::apply): whether leaf accumulator `acc` gets this
// pass's gradient from that node alone, into .grad, through no tensor hook (DDP's in-graph
// reduction, vm/graph/buckets.hpp, relies on it).
bool sole_accumulation(const Node& acc);

// x.grad = g and the engine's accumulation into it (a copy unless g is ours alone).
void accumulate_grad(const Tensor& t, const Tensor& g, bool create_graph);
void accumulate_into(AutogradMeta& m, const Tensor& g, bool create_graph);

}  // namespace cr::autograd
