#include "vm/autograd/views.hpp"

#include <algorithm>

#include "vm/autograd/call.hpp"
#include "vm/autograd/engine.hpp"
#include "vm/autograd/grad_mode.hpp"
#include "vm/autograd/var.hpp"

namespace cr::autograd {
namespace {

uint32_t version_of(const cr_tensor* t) { return static_cast<Storage*>(t->_storage)->version.load(); }

// PyTorch's handle_view_on_rebase: the views that may not be changed in place while recording
// (directly, or - indirect - through their base or another view of it).
[[noreturn]] void refuse_rebase(const AutogradMeta& m, bool indirect) {
  const std::string what = indirect ? "its base or another view of its base has been" : "is being";
  if (m.creation == ViewCreation::Compiled)
    fail("an in-place operation on a view (an output of a compiled function viewing another) that requires grad is "
         "not implemented; use the out-of-place form");
  std::string msg = m.grad_fn ? cat("Output ", m.output_nr + 1, " of ", m.grad_fn->name(), " is a view and ", what, " modified inplace.")
                    : m.creation == ViewCreation::Inference
                        ? cat("A view was created in inference mode and ", what, " modified inplace in normal mode.")
                        : cat("A view was created in no_grad mode and ", what, " modified inplace with grad mode enabled.");
  if (m.creation == ViewCreation::MultiOutput)
    fail(msg + " This view is the output of a function that returns multiple views. Such functions do not allow the "
               "output views to be modified inplace. You should replace the inplace operation by an out-of-place one.");
  const char* block = m.creation == ViewCreation::Inference ? "inference_mode" : "no_grad";
  fail(cat(msg, " Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by "
                "moving both the view and the inplace either both inside the ", block,
           " block (if you don't want the inplace to be tracked) or both outside (if you want the inplace to be tracked)."));
}

// The view's grad_fn made over its base: as_strided(base, sizes, strides, offset).
void replay_view(cr_tensor* t, AutogradMeta& m) {
  const Tensor view(t, true);
  std::vector<int64_t> sizes = view.sizes(), strides = view.strides();
  cr_value args[4]{};
  args[0] = cr_value{kTensor, 0, 0, m.base.get(), nullptr};
  args[1] = cr_value{kInts, int32_t(sizes.size()), 0, sizes.data(), nullptr};
  args[2] = cr_value{kInts, int32_t(strides.size()), 0, strides.data(), nullptr};
  args[3] = cr_value{kNumber, 0, double(view.offset()), nullptr, nullptr};
  m.grad_fn = make_node(op_id("as_strided"), args, 4, {view}, Tensor());
  m.output_nr = 0;
  if (m.retains_grad) watch(m);
}

// One past the last element a layout reaches, counted from `from`.
int64_t end_of(const Geometry& g, int64_t from) {
  int64_t e = g.offset - from + 1;
  for (size_t i = 0; i < g.sizes.size(); ++i) {
    if (g.sizes[i] == 0) return g.offset - from;
    e += (g.sizes[i] - 1) * g.strides[i];
  }
  return e;
}

// The node a base gets when one of its views is changed in place by fn's op. Its inputs: the
// base's history, then fn's other inputs.
struct CopySlices : Backward {
  Geometry base, view;
  std::shared_ptr<Node> fn;

  std::string name() const override { return "CopySlices"; }
  void release() override { fn->release_saved(); }

  std::vector<Tensor> apply(Node& n, std::vector<Tensor>& out_grads, bool create_graph) override {
    std::vector<Tensor> r(n.inputs.size());
    const Tensor& grad = out_grads.at(0);
    if (!grad.defined()) return r;
    // the gradient laid out as the base is, so that the view's layout finds its slice in it
    const int64_t lo = std::min(base.offset, view.offset), n_el = std::max(end_of(base, lo), end_of(view, lo));
    Var buf = zeros({n_el}, grad.dtype(), grad.device());
    Var result = op("as_strided", {buf, base.sizes, base.strides, base.offset - lo});
    call_op("copy_", {result, grad});
    Var slice = op("as_strided", {result, view.sizes, view.strides, view.offset - lo});
    std::vector<Tensor> fg{op("clone", {slice}).tensor()};
    std::vector<Tensor> in = run_node(*fn, fg, create_graph);
    if (in.at(0).defined()) call_op("copy_", {slice, in[0]});
    else call_op("zero_", {slice});
    r[0] = result.tensor();
    for (size_t i = 1; i < in.size(); ++i) r[i] = in[i];
    return r;
  }
};

}  // namespace

const std::shared_ptr<Node>& view_grad_fn(cr_tensor* t, AutogradMeta& m) {
  if (!t->_storage) return m.grad_fn;
  const uint32_t now = version_of(t);
  if (now == m.attr_version || (!m.grad_fn && !requires_grad(m.base.get()))) return m.grad_fn;
  if (m.creation != ViewCreation::Default) refuse_rebase(m, true);
  replay_view(t, m);
  m.attr_version = now;
  return m.grad_fn;
}

ViewCreation view_creation(bool multi_output) {
  return inference_mode ? ViewCreation::Inference
         : !grad_enabled ? ViewCreation::NoGrad
         : multi_output  ? ViewCreation::MultiOutput
                         : ViewCreation::Default;
}

void note_view(cr_tensor* in, cr_tensor* out, ViewCreation how) {
  const AutogradMeta* im = meta_of(in);
  if (im && im->base.defined() && im->creation != ViewCreation::Default) how = im->creation;
  // (a view of a compiled function's output that views another has no base to rebase either)
  if (im && im->creation == ViewCreation::Compiled) how = ViewCreation::Compiled;
  AutogradMeta& m = ensure_meta(out);
  m.base = im && im->base.defined() ? im->base : Tensor(in, true);
  m.creation = how;
  m.attr_version = version_of(in);
}

void note_views(int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  const OpDef& def = Registry::get().ops()[size_t(op)];
  if ((def.kind != OpKind::View && !(def.flags & kListOut)) || nargs == 0 || args[0].tag != kTensor) return;
  if (def.grad.not_differentiable) return;  // detach: a view of the storage, not of the autograd history
  auto* in = static_cast<cr_tensor*>(args[0].ptr);
  if (!in->_storage) return;
  for (Tensor& o : outs)
    if (o.get() != in && o.get()->_storage == in->_storage) note_view(in, o.get(), view_creation(def.flags & kListOut));
}

void check_inplace(const OpDef& def, const Tensor& self) {
  AutogradMeta* m = meta_of(self.get());
  if (!m) return;
  if (m->creation == ViewCreation::Compiled || (m->base.defined() && m->creation != ViewCreation::Default)) {
    try {
      refuse_rebase(*m, false);
    } catch (const Error& e) {
      throw Error(cat(def.name, ": ", e.what()));
    }
  }
  if (!requires_grad(self.get())) return;
  if (m->base.defined() && is_leaf(m->base.get()))
    fail(cat(def.name, ": a view of a leaf Variable that requires grad is being used in an in-place operation."));
  if (is_leaf(self.get())) fail(cat(def.name, ": a leaf Variable that requires grad is being used in an in-place operation."));
}

void rebase_history(const Tensor& self, const std::shared_ptr<Node>& fn) {
  AutogradMeta& m = ensure_meta(self.get());
  if (!m.base.defined()) {
    m.grad_fn = fn;
    m.output_nr = 0;
    m.requires_grad = false;
    if (m.retains_grad) watch(m);
    return;
  }
  const Tensor& base = m.base;
  auto cs = std::make_shared<CopySlices>();
  cs->base = geometry_of(base);
  cs->view = geometry_of(self);
  cs->fn = fn;
  auto n = std::make_shared<Node>();
  n->seq = next_seq();
  n->saves = true;  // (PyTorch: a second backward through CopySlices raises whatever fn saved)
  n->custom = cs;
  n->inputs.push_back(Input{gradient_edge(base), 0, 0, Meta{base.sizes(), base.dtype(), base.device()}});
  for (size_t i = 1; i < fn->inputs.size(); ++i) n->inputs.push_back(fn->inputs[i]);
  n->outs.push_back(Meta{base.sizes(), base.dtype(), base.device()});
  AutogradMeta& bm = ensure_meta(base.get());
  bm.grad_fn = n;
  bm.output_nr = 0;
  bm.requires_grad = false;
  replay_view(self.get(), m);
  m.attr_version = version_of(self.get());
}

}  // namespace cr::autograd
