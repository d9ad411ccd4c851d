// Per-tensor autograd metadata, behind cr_tensor::_autograd (NULL for tensors that never met
// autograd): whether a leaf requires grad, its .grad, the node that made it (grad_fn and the
// output index), retain_grad and hooks. Owned by the tensor header: tensor_release frees it.
#pragma once
#include <memory>
#include <vector>

#include "vm/tensor.hpp"

namespace cr::autograd {

struct Node;

// Hook ids run by the Lua side (stdlib/autograd.lua): 0 and *out = a replacement (a new reference)
// or NULL; -1 when the hook raised (the Lua side keeps its error).
using HookCaller = int32_t (*)(int32_t id, cr_tensor* grad, cr_tensor** out);

// One VM's hooks: the function its Lua side runs them through and the ids (its own numbering)
// of those whose tensors died, which it forgets. Every hook holds its VM's: a backward run by
// another VM calls it there; once the VM is gone (caller null) its hooks are skipped.
struct HookOwner {
  HookCaller caller = nullptr;
  std::vector<int32_t> dead;
};
using HookOwnerRef = std::shared_ptr<HookOwner>;

// A tensor hook (register_hook): it sees the gradient of the value the tensor had when it was
// registered - the node then its grad_fn (none for a leaf) - as PyTorch's hooks across an
// in-place change; retain_grad follows the latest value.
struct TensorHook {
  int32_t id;
  std::weak_ptr<Node> fn;
  int32_t nr = 0;  // fn's output
  HookOwnerRef owner;
  void forget() const { if (owner) owner->dead.push_back(id); }
};

// How a view was made (PyTorch's CreationMeta): only Default views may be changed in place while
// autograd records; the others raise at such a change (views.cpp). Compiled: an output of a
// compiled training segment that views another value (no base kept: vm/graph/joint.cpp).
enum class ViewCreation : uint8_t { Default, NoGrad, MultiOutput, Inference, Compiled };

struct AutogradMeta {
  bool requires_grad = false;  // a leaf that requires grad (non-leaves: grad_fn set)
  bool retains_grad = false;
  ViewCreation creation = ViewCreation::Default;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  int output_nr = 0;
  std::vector<TensorHook> hooks;  // Lua hook functions (stdlib/autograd.lua)
  std::vector<TensorHook> post_hooks;  // a leaf's post-accumulate-grad hooks: called with the leaf
  // the nodes whose out_meta slot points here (watch): cleared when the tensor dies
  std::vector<std::pair<std::weak_ptr<Node>, int>> watched;
  // the leaf's AccumulateGrad node, shared by every node that uses the leaf
  std::weak_ptr<Node> accumulator;
  // A view (vm/autograd/views.hpp): the tensor owning the memory it views (never itself a view)
  // and the storage version its grad_fn was made at (older: an in-place change made it stale).
  Tensor base;
  uint32_t attr_version = 0;
};

inline AutogradMeta* meta_of(const cr_tensor* t) { return static_cast<AutogradMeta*>(t->_autograd); }
AutogradMeta& ensure_meta(cr_tensor* t);
// Called by tensor_release for a header with metadata.
void drop_meta(cr_tensor* t);
// Makes m's grad_fn report output output_nr's gradient to m (its hooks, retain_grad): the
// engine reads the node's out_meta.
void watch(AutogradMeta& m);

// A view's grad_fn, made again over its base when the storage changed in place since (views.cpp).
const std::shared_ptr<Node>& view_grad_fn(cr_tensor* t, AutogradMeta& m);
// t's grad_fn (null for leaves); m is t's metadata.
inline const std::shared_ptr<Node>& grad_fn_of(const cr_tensor* t, AutogradMeta& m) {
  return m.base.defined() ? view_grad_fn(const_cast<cr_tensor*>(t), m) : m.grad_fn;
}

// (a view requires grad when its base does, whatever its grad_fn: PyTorch's DifferentiableViewMeta)
inline bool requires_grad(const cr_tensor* t) {
  const AutogradMeta* m = meta_of(t);
  return m && (m->requires_grad || m->grad_fn || (m->base.defined() && requires_grad(m->base.get())));
}
inline bool is_leaf(const cr_tensor* t) {
  AutogradMeta* m = meta_of(t);
  return !m || !grad_fn_of(t, *m);
}

// Hook ids of tensors that died, for the Lua side to forget (stdlib/autograd.lua).

}  // namespace cr::autograd
