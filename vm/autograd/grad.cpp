#include "vm/autograd/grad.hpp"

#include "vm/autograd/grad_mode.hpp"

namespace cr::autograd {

Grad::Grad(Node& n, std::vector<Tensor>& out_grads, std::vector<Tensor>& in_grads)
    : node_(n), out_grads_(out_grads), in_grads_(in_grads),
      arg_{current_context(), *n.def(), n.args.v.data(), int(n.args.v.size()), {}, {}} {}

Var Grad::grad(int k) const {
  Tensor& g = out_grads_.at(size_t(k));
  if (!g.defined()) {
    const Meta& m = node_.outs[size_t(k)];
    g = zeros(m.sizes, m.dtype, m.device).tensor();
  }
  return g;
}

int Grad::index(int i, int k) const {
  if (i >= int(node_.first_input.size()) || node_.first_input[size_t(i)] < 0)
    fail(cat("internal: the derivative of ", node_.def()->name, " reads argument ", i + 1, ", which is no tensor"));
  return node_.first_input[size_t(i)] + k;
}

// A saved argument other than a leaf is a header without metadata (call.cpp make_node); when the
// rule itself is recorded (create_graph) it gets the argument's edge back, as the call saw it.
static Tensor saved_value(const Node& n, int idx, int i) {
  const Saved& s = n.saved_in[size_t(idx)];
  if (!s.t.defined())
    fail(cat("internal: the derivative of ", n.def()->name, " reads argument ", i + 1, ", which it does not save"));
  const Edge& e = n.inputs[size_t(idx)].edge;
  if (!grad_enabled || !e.fn || meta_of(s.t.get())) return s.t;
  Tensor a = Tensor::view_of(s.t, s.t.sizes(), s.t.strides(), s.t.offset());
  AutogradMeta& m = ensure_meta(a.get());
  m.grad_fn = e.fn;
  m.output_nr = e.nr;
  return a;
}

Var Grad::in(int i) const {
  const cr_value& v = arg_.args[i];
  if (v.tag == kNumber || v.tag == kBool) return Var(v.num);
  return saved_value(node_, index(i, 0), i);
}

Var Grad::in(int i, int k) const { return saved_value(node_, index(i, k), i); }

// A saved output is a header without metadata (no cycle through its own node); when the rule
// itself is recorded (create_graph) it gets the node back, so the double backward reaches it.
Var Grad::out(int k) const {
  const Saved& s = node_.saved_out.at(size_t(k));
  if (!s.t.defined()) fail(cat("internal: the derivative of ", node_.def()->name, " reads output ", k + 1, ", which it does not save"));
  if (!grad_enabled) return s.t;
  Tensor a = Tensor::view_of(s.t, s.t.sizes(), s.t.strides(), s.t.offset());
  AutogradMeta& m = ensure_meta(a.get());
  m.grad_fn = const_cast<Node&>(node_).shared_from_this();
  m.output_nr = k;
  return a;
}

bool Grad::needs(int i) const {
  if (i >= int(node_.first_input.size()) || node_.first_input[size_t(i)] < 0) return false;
  const int n = arg_.args[i].tag == kTensors ? arg_.args[i].n : 1;
  for (int k = 0; k < n; ++k)
    if (needs(i, k)) return true;
  return false;
}

bool Grad::needs(int i, int k) const { return bool(node_.inputs[size_t(index(i, k))].edge.fn); }

void Grad::set(int i, int k, const Var& g) {
  const int idx = index(i, k);
  if (!node_.inputs[size_t(idx)].edge.fn) return;
  in_grads_[size_t(idx)] = g.tensor();
}

const Meta& Grad::meta(int i, int k) const { return node_.inputs[size_t(index(i, k))].meta; }

int Grad::count(int i) const { return arg_.args[i].tag == kTensors ? arg_.args[i].n : 1; }

void derivative(Registry& r, const char* name, Derivative d) { r.set_derivative(name, d); }

}  // namespace cr::autograd
