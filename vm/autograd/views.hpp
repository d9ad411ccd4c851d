// Views and in-place ops under autograd (PyTorch's ADInplaceOrView and CopySlices). Every view an
// op makes (views, split / chunk) remembers its base: the tensor owning the memory. An in-place op
// on a view rebases the base's history onto a CopySlices node (the gradient of the base with the
// view's slice replaced by what the op's derivative gives the view's old value); the views of that
// base then get a fresh grad_fn, an as_strided of the base, when next asked for one (their
// storage's version moved on: meta.hpp view_grad_fn).
#pragma once
#include <memory>
#include <vector>

#include "vm/autograd/node.hpp"

namespace cr::autograd {

// After op ran: its outputs that view args[0]'s memory become views of its base.
void note_views(int op, const cr_value* args, int nargs, std::vector<Tensor>& outs);
// out, made from in's memory by a view op, becomes a view of in's base; `how` says how it was
// made (view_creation: in the current grad mode, by an op making several views or one).
void note_view(cr_tensor* in, cr_tensor* out, ViewCreation how);
ViewCreation view_creation(bool multi_output);

// Before an in-place op records on self (some argument requires grad): PyTorch's refusals (a
// leaf requiring grad, a view of one, a view made in no_grad mode or by a multi-output op).
void check_inplace(const OpDef& def, const Tensor& self);

// self was changed in place by fn's op: self's history (or its base's, through CopySlices).
void rebase_history(const Tensor& self, const std::shared_ptr<Node>& fn);

}  // namespace cr::autograd
