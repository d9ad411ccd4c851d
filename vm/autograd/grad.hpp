// What a derivative rule sees (Derivative::fn in vm/registry.hpp): the gradients of the op's
// outputs, the tensors and values the forward saved, and where to put each input's gradient.
// Rules read like PyTorch's derivatives.yaml, e.g. mul:
//   if (g.needs(0)) g.set(0, g.grad() * g.in(1));
//   if (g.needs(1)) g.set(1, g.grad() * g.in(0));
// The engine undoes broadcasting (sum_to_size) and casts each gradient to its input's dtype.
#pragma once
#include "vm/autograd/node.hpp"
#include "vm/autograd/var.hpp"

namespace cr::autograd {

class Grad {
 public:
  Grad(Node& n, std::vector<Tensor>& out_grads, std::vector<Tensor>& in_grads);

  Var grad(int k = 0) const;       // the gradient of output k (zeros when none flowed)
  bool has_grad(int k) const { return out_grads_[size_t(k)].defined(); }
  Var in(int i) const;             // argument i: a saved tensor or a number
  Var in(int i, int k) const;      // element k of list argument i (saved)
  Var out(int k = 0) const;        // output k (saved)
  bool needs(int i) const;         // some element of tensor argument i needs a gradient
  bool needs(int i, int k) const;
  void set(int i, const Var& g) { set(i, 0, g); }
  void set(int i, int k, const Var& g);

  const Meta& meta(int i, int k = 0) const;  // tensor argument i's sizes, dtype, device
  const Shape& sizes(int i, int k = 0) const { return meta(i, k).sizes; }
  int ndim(int i) const { return int(meta(i).sizes.size()); }
  int count(int i) const;          // elements of list argument i
  const Meta& out_meta(int k = 0) const { return node_.outs[size_t(k)]; }
  bool is_tensor(int i) const { return arg_.is_tensor(i); }
  const OpCall& arg() const { return arg_; }  // argument values (numbers, dims, options)
  const Node& node() const { return node_; }

 private:
  int index(int i, int k) const;
  Node& node_;
  std::vector<Tensor>& out_grads_;
  std::vector<Tensor>& in_grads_;
  OpCall arg_;
};

// Registers op `name`'s derivative (vm/ops/*_grad.cpp).
void derivative(Registry& r, const char* name, Derivative d);

}  // namespace cr::autograd
