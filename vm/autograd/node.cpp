#include "vm/autograd/node.hpp"

#include <atomic>

namespace cr::autograd {

uint64_t next_seq() {
  static std::atomic<uint64_t> seq{0};
  return ++seq;
}

namespace {

// What the nodes being destroyed on this thread handed over; the outermost ~Node empties it.
struct Teardown {
  std::vector<std::shared_ptr<Node>> nodes;
  std::vector<std::shared_ptr<Backward>> customs;
  std::vector<Tensor> tensors;  // (a saved tensor's metadata may own its grad_fn, a leaf's its .grad)
};
thread_local Teardown* t_teardown = nullptr;

void hand_over(Node& n, Teardown& td) {
  for (Input& in : n.inputs)
    if (in.edge.fn) td.nodes.push_back(std::move(in.edge.fn));
  for (Saved& s : n.saved_in)
    if (s.t.defined()) td.tensors.push_back(std::move(s.t));
  for (Saved& s : n.saved_out)
    if (s.t.defined()) td.tensors.push_back(std::move(s.t));
  if (n.leaf.defined()) td.tensors.push_back(std::move(n.leaf));
  if (n.custom) td.customs.push_back(std::move(n.custom));
}

}  // namespace

Node::~Node() {
  for (const TensorHook& h : kept_hooks) h.forget();
  if (t_teardown) {
    hand_over(*this, *t_teardown);
    return;
  }
  Teardown td;
  t_teardown = &td;
  hand_over(*this, td);
  // (each release below may destroy further nodes: they only add to td)
  while (!td.nodes.empty() || !td.customs.empty() || !td.tensors.empty()) {
    if (!td.nodes.empty()) {
      std::shared_ptr<Node> n = std::move(td.nodes.back());
      td.nodes.pop_back();
    } else if (!td.customs.empty()) {
      std::shared_ptr<Backward> c = std::move(td.customs.back());
      td.customs.pop_back();
    } else {
      Tensor t = std::move(td.tensors.back());
      td.tensors.pop_back();
    }
  }
  t_teardown = nullptr;
}

const OpDef* Node::def() const { return op < 0 ? nullptr : &Registry::get().ops()[size_t(op)]; }

// PyTorch's names without the overload number: mul and mul_ -> MulBackward, log_softmax ->
// LogSoftmaxBackward.
std::string Node::name() const {
  if (custom) return custom->name();
  if (op < 0) return "AccumulateGrad";
  std::string r;
  bool up = true;
  for (const char* p = def()->name; *p; ++p) {
    if (*p == '_') {
      up = true;
      continue;
    }
    r += up ? char(std::toupper(static_cast<unsigned char>(*p))) : *p;
    up = false;
  }
  return r + "Backward";
}

void Node::release_saved() {
  if (custom) custom->release();
  if (!saves) return;
  for (Saved& s : saved_in) s.t = Tensor();
  for (Saved& s : saved_out) s.t = Tensor();
  for (cr_value& v : args.v)
    if (v.tag == kTensor) v.ptr = nullptr;
  for (auto& l : args.lists) std::fill(l.begin(), l.end(), nullptr);
  released = true;
}

std::shared_ptr<Node> accumulator(const Tensor& leaf) {
  AutogradMeta& m = ensure_meta(leaf.get());
  if (auto a = m.accumulator.lock()) return a;
  auto a = std::make_shared<Node>();
  a->seq = next_seq();
  a->leaf = leaf;
  a->outs.push_back(Meta{leaf.sizes(), leaf.dtype(), leaf.device()});
  m.accumulator = a;
  return a;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = meta_of(t.get());
  if (!m) return {};
  if (const auto& fn = grad_fn_of(t.get(), *m)) return {fn, m->output_nr};
  if (m->requires_grad) return {accumulator(t), 0};
  return {};
}

}  // namespace cr::autograd
