#include "vm/autograd/meta.hpp"

#include "vm/autograd/node.hpp"

namespace cr::autograd {

AutogradMeta& ensure_meta(cr_tensor* t) {
  if (!t->_autograd) t->_autograd = new AutogradMeta();
  return *meta_of(t);
}

std::vector<int32_t>& dead_hooks() {
  static thread_local std::vector<int32_t> ids;
  return ids;
}

void drop_meta(cr_tensor* t) {
  AutogradMeta* m = meta_of(t);
  t->_autograd = nullptr;
  if (m->grad_fn && size_t(m->output_nr) < m->grad_fn->out_meta.size() && m->grad_fn->out_meta[size_t(m->output_nr)] == m)
    m->grad_fn->out_meta[size_t(m->output_nr)] = nullptr;
  for (int32_t id : m->hooks) dead_hooks().push_back(id);
  for (int32_t id : m->post_hooks) dead_hooks().push_back(id);
  delete m;
}

}  // namespace cr::autograd
