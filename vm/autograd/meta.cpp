#include "vm/autograd/meta.hpp"

#include "vm/autograd/node.hpp"

namespace cr::autograd {

AutogradMeta& ensure_meta(cr_tensor* t) {
  if (!t->_autograd) t->_autograd = new AutogradMeta();
  return *meta_of(t);
}

void watch(AutogradMeta& m) {
  if (!m.grad_fn) return;
  auto& om = m.grad_fn->out_meta;
  if (om.size() <= size_t(m.output_nr)) om.resize(size_t(m.output_nr) + 1, nullptr);
  om[size_t(m.output_nr)] = &m;
  m.watched.emplace_back(m.grad_fn, m.output_nr);
}

void drop_meta(cr_tensor* t) {
  AutogradMeta* m = meta_of(t);
  t->_autograd = nullptr;
  for (auto& [w, k] : m->watched)  // (an in-place change left older nodes pointing here too)
    if (std::shared_ptr<Node> n = w.lock(); n && size_t(k) < n->out_meta.size() && n->out_meta[size_t(k)] == m)
      n->out_meta[size_t(k)] = nullptr;
  for (const TensorHook& h : m->hooks) {  // (a non-leaf's hooks stay with their node)
    std::shared_ptr<Node> n = h.fn.lock();
    if (n && !n->accumulates()) n->kept_hooks.push_back(h);
    else h.forget();
  }
  for (const TensorHook& h : m->post_hooks) h.forget();
  delete m;
}

}  // namespace cr::autograd
