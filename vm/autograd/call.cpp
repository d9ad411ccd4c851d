// The op-call path and the recording of autograd nodes (call.hpp).
#include "vm/autograd/call.hpp"

#include "vm/autograd/node.hpp"
#include "vm/hooks.hpp"

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

Saved save(const Tensor& t) { return Saved{t, t.storage()->version.load()}; }

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

// Before an in-place op runs on self: PyTorch's refusals, and a copy of self when the
// derivative needs its value from before the write.
bool check_inplace(const OpDef& def, const Tensor& self) {
  const AutogradMeta* m = meta_of(self.get());
  if (m && requires_grad(self.get())) {
    if (!m->grad_fn) fail(cat(def.name, ": a leaf Variable that requires grad is being used in an in-place operation."));
    if (m->is_view || m->has_views)
      fail(cat(def.name, ": an in-place operation on a view (or on a tensor with views) that requires grad is not "
                         "implemented (PyTorch's CopySlices); use the out-of-place form"));
  }
  return def.grad.saves_inputs & 1;
}

void record(Context& ctx, int op, const cr_value* args, int nargs, const std::vector<Tensor>& outs, const Tensor& old_self) {
  const OpDef& def = Registry::get().ops()[size_t(op)];
  const bool inplace = def.flags & kReturnsSelf;
  if (def.grad.not_differentiable) return;
  std::vector<int> diff;
  for (size_t k = 0; k < outs.size(); ++k)
    if (is_floating(outs[k].dtype()) && (inplace || !is_input(args, nargs, outs[k].get()))) diff.push_back(int(k));
  if (diff.empty()) return;
  const Derivative& d = def.grad;
  auto n = std::make_shared<Node>();
  n->op = op;
  n->seq = next_seq();
  n->saves = d.saves_inputs || d.saves_outputs;
  copy_args(*n, args, nargs);
  n->first_input.assign(size_t(nargs), -1);
  each_tensor(args, nargs, [&](int i, int k, cr_tensor* p) {
    Tensor t(p, true);
    if (k == 0) n->first_input[size_t(i)] = int(n->inputs.size());
    Input in{{}, i, k, Meta{t.sizes(), t.dtype(), t.device()}};
    if (requires_grad(p) && !(d.nondiff >> i & 1)) in.edge = gradient_edge(t);
    Saved s;
    if (d.saves_inputs >> i & 1) s = save(i == 0 && inplace && old_self.defined() ? old_self : t);
    cr_value& v = n->args.v[size_t(i)];
    if (v.tag == kTensor) v.ptr = s.t.get();
    else static_cast<cr_tensor**>(v.ptr)[k] = s.t.get();
    n->inputs.push_back(std::move(in));
    n->saved_in.push_back(std::move(s));
  });
  for (size_t k = 0; k < outs.size(); ++k) {
    n->outs.push_back(Meta{outs[k].sizes(), outs[k].dtype(), outs[k].device()});
    n->saved_out.push_back(d.saves_outputs >> k & 1 ? save(alias(outs[k])) : Saved{});
  }
  for (int k : diff) {
    AutogradMeta& m = ensure_meta(outs[size_t(k)].get());
    m.grad_fn = n;
    m.output_nr = k;
    m.requires_grad = false;
    if (def.kind == OpKind::View) m.is_view = true;
  }
  if (def.kind == OpKind::View && args[0].tag == kTensor) ensure_meta(static_cast<cr_tensor*>(args[0].ptr)).has_views = true;
  awaiting_where = n;
  ctx.ffi.service |= 8;
}

}  // namespace

thread_local OpObserver* op_observer = nullptr;

void run_op(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  if (hooks().record_call(ctx, op, args, nargs, outs)) return;
  outs = dispatch(ctx, op, args, nargs);
  if (op_observer) [[unlikely]] op_observer->on_call(op, args, nargs, outs);
}

void call_recording(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  bool any = false;
  each_tensor(args, nargs, [&](int, int, cr_tensor* t) { any = any || requires_grad(t); });
  if (!any) return run_op(ctx, op, args, nargs, outs);
  const OpDef& def = Registry::get().ops()[size_t(op)];
  // an inference capture records the call (the key guards requires_grad): eager autograd, and
  // the function's later calls capture training graphs
  if (ctx.ffi.capturing && !ctx.capture_training) ctx.capture_wants_training = true;
  Tensor old_self;
  const bool inplace = def.flags & kReturnsSelf;
  if (inplace) {  // (a lazy self is replayed: its compiled segment differentiates the write)
    Tensor self(static_cast<cr_tensor*>(args[0].ptr), true);
    if (check_inplace(def, self) && !self.is_lazy()) old_self = dispatch(ctx, op_id("clone"), args, 1).at(0);
  }
  run_op(ctx, op, args, nargs, outs);
  if (ctx.ffi.capturing && ctx.capture_lazy) {  // replayed: its segment's compiled node differentiates it
    if (!ctx.capture_training)
      fail(cat(def.name, ": internal: a replayed call of an inference capture takes a tensor that requires grad"));
    return;
  }
  if (inplace) {
    std::vector<Tensor> self{Tensor(static_cast<cr_tensor*>(args[0].ptr), true)};
    record(ctx, op, args, nargs, self, old_self);
  } else {
    record(ctx, op, args, nargs, outs, old_self);
  }
}

void record_late(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  bool any = false;
  each_tensor(args, nargs, [&](int, int, cr_tensor* t) { any = any || requires_grad(t); });
  if (!any) return;
  const OpDef& def = Registry::get().ops()[size_t(op)];
  if (def.flags & kReturnsSelf)  // (its value from before the write is gone)
    fail(cat(def.name, ": compiled autograd: an in-place op on a tensor requiring grad where the trace changed is not "
                       "implemented; run the function eagerly"));
  record(ctx, op, args, nargs, outs, Tensor());
}

void set_where(const char* where) {
  if (auto n = awaiting_where.lock()) n->where = where;
  awaiting_where.reset();
}

}  // namespace cr::autograd
