// Per-tensor autograd metadata, behind cr_tensor::_autograd (NULL for tensors that never met
// autograd): whether a leaf requires grad, its .grad, the node that made it (grad_fn and the
// output index), retain_grad and hooks. Owned by the tensor header: tensor_release frees it.
#pragma once
#include <memory>
#include <vector>

#include "vm/tensor.hpp"

namespace cr::autograd {

struct Node;

struct AutogradMeta {
  bool requires_grad = false;  // a leaf that requires grad (non-leaves: grad_fn set)
  bool retains_grad = false;
  bool is_view = false;        // made by a view op from a tensor requiring grad
  bool has_views = false;      // a view op took it as input while recording
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  int output_nr = 0;
  std::vector<int32_t> hooks;  // ids of Lua hook functions (stdlib/autograd.lua)
  // the leaf's AccumulateGrad node, shared by every node that uses the leaf
  std::weak_ptr<Node> accumulator;
};

inline AutogradMeta* meta_of(const cr_tensor* t) { return static_cast<AutogradMeta*>(t->_autograd); }
AutogradMeta& ensure_meta(cr_tensor* t);
// Called by tensor_release for a header with metadata.
void drop_meta(cr_tensor* t);

inline bool requires_grad(const cr_tensor* t) {
  const AutogradMeta* m = meta_of(t);
  return m && (m->requires_grad || m->grad_fn);
}
inline bool is_leaf(const cr_tensor* t) {
  const AutogradMeta* m = meta_of(t);
  return !m || !m->grad_fn;
}

// Hook ids of tensors that died, for the Lua side to forget (stdlib/autograd.lua).
std::vector<int32_t>& dead_hooks();

}  // namespace cr::autograd
