// The op-call path and the recording of autograd nodes (call.hpp).
#include "vm/autograd/call.hpp"

#include <utility>

#include "vm/autograd/node.hpp"
#include "vm/autograd/views.hpp"
#include "vm/hooks.hpp"
#include "vm/nesting.hpp"

namespace cr::autograd {


namespace {

thread_local std::weak_ptr<Node> awaiting_where;  // the last node made, until Lua tells its line

template <class F> void each_tensor(const cr_value* args, int nargs, F&& f) {
  for (int i = 0; i < nargs; ++i) {
    if (args[i].tag == kTensor) f(i, 0, static_cast<cr_tensor*>(args[i].ptr));
    else if (args[i].tag == kTensors)
      for (int j = 0; j < args[i].n; ++j) f(i, j, static_cast<cr_tensor* const*>(args[i].ptr)[j]);
  }
}

Saved save(const Tensor& t, const OpDef& def) {
  if (is_inference(t.get()))
    fail(cat(def.name, ": Inference tensors cannot be saved for backward. To work around you can make a clone to get a normal tensor "
         "and use it in autograd."));
  return Saved{t, t.storage()->version.load()};
}

// Under inference mode the outputs with memory of their own are inference tensors (views take
// the flag of what they view: Tensor::view_of). A recorded call's lazy outputs have no memory
// yet: those of a view or an in-place op are its first argument's kind, the others fresh.
void mark_inference(int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  const OpDef& def = Registry::get().ops()[size_t(op)];
  const bool aliases = def.kind == OpKind::View || (def.flags & (kReturnsSelf | kListOut));
  for (Tensor& o : outs) {
    if (!o.get()->_storage) {
      const bool base = aliases && nargs > 0 && args[0].tag == kTensor;
      if (!base || is_inference(static_cast<cr_tensor*>(args[0].ptr))) o.get()->_flags |= kInferenceTensor;
      continue;
    }
    bool fresh = o.get()->_storage != nullptr;
    each_tensor(args, nargs, [&](int, int, cr_tensor* x) { fresh = fresh && x->_storage != o.get()->_storage; });
    if (fresh) o.get()->_flags |= kInferenceTensor;
  }
}

bool is_leaf_requiring_grad(const cr_tensor* t) {
  const AutogradMeta* m = meta_of(t);
  return m && m->requires_grad && !m->grad_fn && !m->base.defined();
}

// A header over out's storage without autograd metadata: a saved output must not keep its own
// node alive (a cycle); the engine gives it its node back when create_graph needs it.
Tensor alias(const Tensor& out) { return Tensor::view_of(out, out.sizes(), out.strides(), out.offset()); }

void copy_args(Node& n, const cr_value* args, int nargs) {
  Args& a = n.args;
  a.strs.reserve(size_t(nargs));  // (c_str() of the copies must stay put)
  for (int i = 0; i < nargs; ++i) {
    cr_value v = args[i];
    if (v.tag == kTensor) v.ptr = nullptr;
    else if (v.tag == kInts) {
      const auto* p = static_cast<const int64_t*>(v.ptr);
      a.ints.emplace_back(p, p + v.n);
      v.ptr = a.ints.back().data();
    } else if (v.tag == kDoubles) {
      const auto* p = static_cast<const double*>(v.ptr);
      a.doubles.emplace_back(p, p + v.n);
      v.ptr = a.doubles.back().data();
    } else if (v.tag == kString) {
      a.strs.emplace_back(v.str);
      v.str = a.strs.back().c_str();
    } else if (v.tag == kTensors) {
      a.lists.emplace_back(size_t(v.n), nullptr);
      v.ptr = a.lists.back().data();
    }
    a.v.push_back(v);
  }
}

bool is_input(const cr_value* args, int nargs, const cr_tensor* t) {
  bool found = false;
  each_tensor(args, nargs, [&](int, int, cr_tensor* x) { found = found || x == t; });
  return found;
}

// Whether an in-place op's derivative needs self's value from before the write (a copy is kept):
// not when only the other arguments' gradients read it and none of them requires grad.
bool needs_old_self(const OpDef& def, const cr_value* args, int nargs) {
  const Derivative& d = def.grad;
  if (!(d.saves_inputs & 1)) return false;
  if (!(d.saved_for_others & 1)) return true;
  bool others = false;
  each_tensor(args, nargs, [&](int i, int, cr_tensor* p) { others = others || (i > 0 && requires_grad(p) && !(d.nondiff >> i & 1)); });
  return others;
}

// An in-place op's other arguments sharing self's memory were saved after the write: they keep
// the version from before it, so that a backward reading them raises as PyTorch's (x:mul_(x)).
void saved_before_write(Node& n, const Tensor& self, uint32_t before) {
  for (size_t i = 0; i < n.saved_in.size(); ++i) {
    Saved& s = n.saved_in[i];
    if (n.inputs[i].slot > 0 && s.t.defined() && s.t.storage() == self.storage()) s.version = before;
  }
}

void record(Context& ctx, int op, const cr_value* args, int nargs, const std::vector<Tensor>& outs, const Tensor& old_self,
            uint32_t before = 0) {
  const OpDef& def = Registry::get().ops()[size_t(op)];
  std::shared_ptr<Node> n = make_node(op, args, nargs, outs, old_self);
  if (!n) return;
  if (def.flags & kReturnsSelf) {
    saved_before_write(*n, outs[0], before);
    rebase_history(outs[0], n);
  } else {
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!is_floating(outs[k].dtype()) || is_input(args, nargs, outs[k].get())) continue;
      AutogradMeta& m = ensure_meta(outs[k].get());
      m.grad_fn = n;
      m.output_nr = int(k);
      m.requires_grad = false;
    }
  }
  awaiting_where = n;
  ctx.ffi.service |= CR_SERVICE_GRAD_WHERE;
}

}  // namespace

std::shared_ptr<Node> make_node(int op, const cr_value* args, int nargs, const std::vector<Tensor>& outs,
                                const Tensor& old_self) {
  const OpDef& def = Registry::get().ops()[size_t(op)];
  const bool inplace = def.flags & kReturnsSelf;
  if (def.grad.not_differentiable) return nullptr;
  bool diff = false;
  for (const Tensor& o : outs) diff = diff || (is_floating(o.dtype()) && (inplace || !is_input(args, nargs, o.get())));
  if (!diff) return nullptr;
  const Derivative& d = def.grad;
  const bool given = d.given >= 0 && d.given < nargs && args[d.given].tag != kNone;
  const uint32_t keep_in = d.inputs_kept(given), keep_out = d.outputs_kept(given);
  auto n = std::make_shared<Node>();
  n->op = op;
  n->seq = next_seq();
  n->saves = keep_in || keep_out;
  copy_args(*n, args, nargs);
  n->first_input.assign(size_t(nargs), -1);
  uint32_t wants = 0;  // the arguments whose gradient the node computes
  each_tensor(args, nargs, [&](int i, int, cr_tensor* p) {
    if (requires_grad(p) && !(d.nondiff >> i & 1)) wants |= 1u << i;
  });
  each_tensor(args, nargs, [&](int i, int k, cr_tensor* p) {
    Tensor t(p, true);
    if (k == 0) n->first_input[size_t(i)] = int(n->inputs.size());
    Input in{{}, i, k, Meta{t.sizes(), t.dtype(), t.device()}};
    if (requires_grad(p) && !(d.nondiff >> i & 1)) in.edge = gradient_edge(t);
    Saved s;
    // Only a leaf requiring grad is saved whole: any other tensor may later be written in place by
    // an op whose node reaches this one (a cycle through its grad_fn); Grad::in gives the header
    // the edge of the call back when create_graph reads it.
    if ((keep_in >> i & 1) && (!(d.saved_for_others >> i & 1) || (wants & ~(1u << i))))
      s = save(i == 0 && inplace && old_self.defined() ? old_self : is_leaf_requiring_grad(p) ? t : alias(t), def);
    cr_value& v = n->args.v[size_t(i)];
    if (v.tag == kTensor) v.ptr = s.t.get();
    else static_cast<cr_tensor**>(v.ptr)[k] = s.t.get();
    n->inputs.push_back(std::move(in));
    n->saved_in.push_back(std::move(s));
  });
  if (d.saves_geometry) n->geometry = geometry_of(Tensor(static_cast<cr_tensor*>(args[0].ptr), true));
  for (size_t k = 0; k < outs.size(); ++k) {
    n->outs.push_back(Meta{outs[k].sizes(), outs[k].dtype(), outs[k].device()});
    n->saved_out.push_back(keep_out >> k & 1 ? save(alias(outs[k]), def) : Saved{});
  }
  return n;
}

thread_local OpObserver* op_observer = nullptr;

void run_op(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  const bool top = dispatch_depth == 0;  // (not a call a kernel makes: vm/nesting.hpp)
  if (top && hooks().record_call(ctx, op, args, nargs, outs)) {
    note_views(op, args, nargs, outs);  // (a recorded view of a real tensor: its base's history, as eager)
    if (inference_mode) [[unlikely]] mark_inference(op, args, nargs, outs);
    return;
  }
  outs = dispatch(ctx, op, args, nargs);
  note_views(op, args, nargs, outs);
  if (inference_mode) [[unlikely]] mark_inference(op, args, nargs, outs);
  if (op_observer && top) [[unlikely]] op_observer->on_call(op, args, nargs, outs);
}

void call_recording(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  bool any = false;
  each_tensor(args, nargs, [&](int, int, cr_tensor* t) { any = any || requires_grad(t); });
  if (!any) return run_unrecorded(ctx, op, args, nargs, outs);  // (autograd meta only: a view's)
  const OpDef& def = Registry::get().ops()[size_t(op)];
  // an inference capture records the call (the key guards requires_grad): eager autograd, and
  // the function's later calls capture training graphs
  if (ctx.ffi.capturing && !ctx.capture_training) ctx.capture_wants_training = true;
  Tensor old_self;
  const bool inplace = def.flags & kReturnsSelf;
  uint32_t before = 0;
  if (inplace) {  // (a lazy self is replayed: its compiled segment differentiates the write)
    Tensor self(static_cast<cr_tensor*>(args[0].ptr), true);
    check_inplace(def, self);
    if (!self.is_lazy()) before = self.storage()->version.load();
    if (needs_old_self(def, args, nargs) && !self.is_lazy()) {  // (recorded: a double backward reaches self through it)
      std::vector<Tensor> c;
      if (ctx.ffi.capturing) c = dispatch(ctx, op_id("clone"), args, 1);
      else call_plain(ctx, op_id("clone"), args, 1, c);
      old_self = c.at(0);
    }
  }
  run_op(ctx, op, args, nargs, outs);
  if (ctx.ffi.capturing && ctx.capture_lazy) {  // replayed: its segment's compiled node differentiates it
    if (!ctx.capture_training)
      fail(cat(def.name, ": internal: a replayed call of an inference capture takes a tensor that requires grad"));
    return;
  }
  if (inplace) {
    std::vector<Tensor> self{Tensor(static_cast<cr_tensor*>(args[0].ptr), true)};
    record(ctx, op, args, nargs, self, old_self, before);
  } else {
    record(ctx, op, args, nargs, outs, old_self);
  }
}

namespace {
// An in-place call that prepare_late saw: self's value and version from before its write.
struct Late {
  int op = -1;
  Tensor old_self;
  uint32_t before = 0;
};
thread_local Late late;
}  // namespace

void prepare_late(Context& ctx, int op, const cr_value* args, int nargs) {
  late = Late{};
  const OpDef& def = Registry::get().ops()[size_t(op)];
  bool any = false;
  each_tensor(args, nargs, [&](int, int, cr_tensor* t) { any = any || requires_grad(t); });
  Tensor self(static_cast<cr_tensor*>(args[0].ptr), true);
  if (!any || !grad_enabled || !(def.flags & kReturnsSelf) || self.is_lazy()) return;
  check_inplace(def, self);
  late.op = op;
  late.before = self.storage()->version.load();
  if (needs_old_self(def, args, nargs)) late.old_self = dispatch(ctx, op_id("clone"), args, 1).at(0);
}

void record_late(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  bool any = false;
  each_tensor(args, nargs, [&](int, int, cr_tensor* t) { any = any || requires_grad(t); });
  const OpDef& def = Registry::get().ops()[size_t(op)];
  if (!(def.flags & kReturnsSelf)) {
    if (any) record(ctx, op, args, nargs, outs, Tensor());
    return;
  }
  Late before = std::exchange(late, Late{});
  if (!any) return;
  if (before.op != op)  // (its value from before the write is gone)
    fail(cat(def.name, ": compiled autograd: an in-place op on a tensor requiring grad where the trace changed is not "
                       "implemented; run the function eagerly"));
  std::vector<Tensor> self{Tensor(static_cast<cr_tensor*>(args[0].ptr), true)};
  record(ctx, op, args, nargs, self, before.old_self, before.before);
}

void set_where(const char* where) {
  if (auto n = awaiting_where.lock()) n->where = where;
  awaiting_where.reset();
}

}  // namespace cr::autograd
