#include "vm/autograd/node.hpp"

#include <atomic>

namespace cr::autograd {

uint64_t next_seq() {
  static std::atomic<uint64_t> seq{0};
  return ++seq;
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
