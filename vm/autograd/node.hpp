// The autograd graph: a Node per recorded op call (or per leaf: AccumulateGrad), with an edge per
// tensor argument to the node that made it, what the op's derivative saved, and the call's other
// argument values. Nodes are shared: by the tensors they made (grad_fn) and by later nodes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vm/autograd/meta.hpp"
#include "vm/registry.hpp"

namespace cr::autograd {

struct Node;

struct Edge {
  std::shared_ptr<Node> fn;  // null: the argument needs no gradient
  int nr = 0;                // which output of fn
};

// One tensor argument (an element of a list argument counts as one): its edge and metadata.
struct Input {
  Edge edge;
  int slot = 0, k = 0;  // argument slot, element of a list argument
  Meta meta;
};

// A tensor kept for the backward, with its storage's version when it was saved.
struct Saved {
  Tensor t;
  uint32_t version = 0;
};

// A tensor's layout over its storage (as_strided's derivative and CopySlices read it).
struct Geometry {
  Shape sizes, strides;
  int64_t offset = 0;
};
inline Geometry geometry_of(const Tensor& t) { return Geometry{t.sizes(), t.strides(), t.offset()}; }

// An owned copy of an op call's arguments; tensor slots point at the saved tensors (or are null).
struct Args {
  std::vector<cr_value> v;
  std::vector<std::vector<int64_t>> ints;
  std::vector<std::vector<double>> doubles;
  std::vector<std::string> strs;
  std::vector<std::vector<cr_tensor*>> lists;
};

// A node whose backward is not a registry op's derivative rule: a compiled segment's
// (vm/graph/joint.hpp, PyTorch's autograd.Function of AOTAutograd). apply returns the gradient
// of each entry of Node::inputs (undefined: none) from the gradients of its outputs.
struct Backward {
  virtual ~Backward() = default;
  virtual std::string name() const = 0;
  virtual std::vector<Tensor> apply(Node& n, std::vector<Tensor>& out_grads, bool create_graph) = 0;
  virtual void release() = 0;  // frees what it saved (after a backward without retain_graph)
};

struct Node : std::enable_shared_from_this<Node> {
  int op = -1;  // registry op; -1: AccumulateGrad of `leaf`, or a custom backward
  uint64_t seq = 0;
  std::string where;  // Lua file:line of the call
  std::vector<Input> inputs;
  std::vector<int> first_input;  // per argument slot: its first entry in inputs, or -1
  std::vector<Meta> outs;
  Args args;
  std::vector<Saved> saved_in;   // per entry of inputs (undefined: not saved)
  std::vector<Saved> saved_out;  // per output (a header without autograd metadata)
  std::vector<AutogradMeta*> out_meta;  // output k's tensor when it has hooks / retains its grad
  // the hooks of outputs whose tensors died (nr: the output), in registration order: a hook
  // belongs to the node as in PyTorch, so it still runs (drop_meta moves them here)
  std::vector<TensorHook> kept_hooks;
  bool saves = false, released = false;
  Geometry geometry;  // input 0's layout, when the derivative asks for it (Derivative::saves_geometry)
  Tensor leaf;  // AccumulateGrad
  std::shared_ptr<Backward> custom;

  // Iterative: what it owns that may own further nodes is released by a loop, not recursively
  // (a 1M-node chain would overflow the stack; PyTorch's deleteNode).
  ~Node();

  bool accumulates() const { return op < 0 && !custom; }

  const OpDef* def() const;
  std::string name() const;  // "MulBackward", "AccumulateGrad"
  void release_saved();
};

uint64_t next_seq();
// The edge a gradient of t flows into: its grad_fn, or its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);
std::shared_ptr<Node> accumulator(const Tensor& leaf);

// The node of one op call (call.cpp): an edge per tensor argument, what the derivative saves
// (self from before the write for an in-place op: old_self), owned copies of the other
// arguments. Null when no output is differentiable.
std::shared_ptr<Node> make_node(int op, const cr_value* args, int nargs, const std::vector<Tensor>& outs,
                                const Tensor& old_self);

}  // namespace cr::autograd
