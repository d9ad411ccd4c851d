// The autograd entries of the cr_api table (vm/lua/ffi_api.h cr_autograd_api), for
// stdlib/autograd.lua. Like vm/lua/api.cpp, every entry keeps C++ exceptions out of LuaJIT.
#include "vm/lua/autograd_api.hpp"

#include <optional>
#include <utility>

#include "vm/autograd/call.hpp"
#include "vm/autograd/engine.hpp"
#include "vm/autograd/node.hpp"
#include "vm/graph/recorder.hpp"

namespace cr::autograd {
namespace {

template <class F> int32_t guarded(cr_ctx* c, F&& f) {
  try {
    return f();
  } catch (const HookRaised& e) {
    Context::of(c).error = e.what();
    return -2;
  } catch (const std::exception& e) {
    Context::of(c).error = e.what();
    return -1;
  }
}

cr_tensor* hand_one(cr_ctx* c, Tensor t) {
  if (!t.defined()) return nullptr;
  cr_tensor* p = t.release();
  Context::of(c).handing(&p, 1);
  return p;
}

// One device type's autocast state as one number: bit 0 enabled, bits 4-7 the dtype.
int32_t autocast_mode(int type, int32_t value) {
  const AutocastDevice s = autocast.dev[type];
  if (value >= 0) autocast.set(type, AutocastDevice{(value & 1) != 0, DType(value >> 4 & 15)});
  return int32_t(s.enabled) | int32_t(s.dtype) << 4;
}

int32_t ag_mode(int32_t what, int32_t value) {
  if (what == CR_AG_AUTOCAST_CUDA || what == CR_AG_AUTOCAST_CPU) return autocast_mode(what == CR_AG_AUTOCAST_CUDA ? 1 : 0, value);
  if (what == CR_AG_AUTOCAST_BOTH) return autocast_mode(1, -1) | autocast_mode(0, -1) << 8;  // read only
  if (what == CR_AG_GRAD_MODE) {
    bool& flag = inference_mode ? inference_grad_mode : grad_enabled;
    const bool prev = flag;
    if (value >= 0) flag = value != 0;
    return prev;
  }
  const bool prev = inference_mode;
  if (value >= 0 && (value != 0) != prev) {  // (entering it keeps the grad mode aside, leaving restores it)
    if (prev) grad_enabled = std::exchange(inference_grad_mode, false);
    else inference_grad_mode = std::exchange(grad_enabled, false);
    inference_mode = value != 0;
  }
  return prev;
}

int32_t ag_query(cr_ctx* c, cr_tensor* t, int32_t what) {
  return guarded(c, [&] {
    const AutogradMeta* m = meta_of(t);
    switch (what) {
      case CR_AG_REQUIRES_GRAD: return int32_t(requires_grad(t) || lazy_grad(t));
      case CR_AG_IS_LEAF: return int32_t(is_leaf(t) && !lazy_grad(t));
      case CR_AG_RETAINS_GRAD: return int32_t(m && m->retains_grad);
      case CR_AG_IS_INFERENCE: return int32_t(is_inference(t));
      default: return 0;
    }
  });
}

// A lazy tensor of a compiled function's replay has no autograd history yet: a hook or
// retain_grad on it ends the graph there, which gives it its node (a graph break).
void with_history(cr_ctx* c, cr_tensor* t, const char* what) {
  if (t->_storage) return;
  Context& ctx = Context::of(c);
  if (const graph::Recorder* rec = ctx.recorder.get(); rec && rec->active() && rec->stepped_value(t))
    fail(cat(what, ": not implemented on a tensor computed after a backward() that a compiled step traced into its ",
             "graph (its replay's tensors carry no autograd history); call ", what, " before that backward() or ",
             "outside T.compile"));
  graph::ensure_real(ctx, t);
}

int32_t ag_set_requires_grad(cr_ctx* c, cr_tensor* t, int32_t b) {
  return guarded(c, [&] {
    if (!is_leaf(t) && b) return 0;  // (a non-leaf requires grad already: PyTorch's no-op)
    if (!is_leaf(t))
      fail("requires_grad_: you can only change requires_grad flags of leaf variables. If you want to use a computed "
           "variable in a subgraph that doesn't require differentiation use var_no_grad = var:detach().");
    const DType d = DType(t->_dtype);
    if (b && !is_floating(d))
      fail(cat("requires_grad_: only Tensors of floating point dtype can require gradients, got ", dtype_name(d)));
    if (b && is_inference(t) && !inference_mode)
      fail("requires_grad_: Setting requires_grad=True on inference tensor outside InferenceMode is not allowed.");
    // (a lazy tensor of a compiled function's replay: the graph ends there, so that the ops after
    // it are captured as training ones, with it as an input requiring grad)
    if (b && !t->_storage) with_history(c, t, "requires_grad_");
    if (b || t->_autograd) ensure_meta(t).requires_grad = b != 0;
    return 0;
  });
}

// x:detach_(): PyTorch's - the history dropped, requires_grad off; a view cannot (its
// gradient goes to its base's history)
int32_t ag_detach_(cr_ctx* c, cr_tensor* t) {
  return guarded(c, [&] {
    with_history(c, t, "detach_");
    t->_flags = int8_t(t->_flags & ~kLazyGrad);  // (a compiled replay's value: no gradient either)
    AutogradMeta* m = meta_of(t);
    if (!m) return 0;
    if (m->base.defined()) fail("detach_: can't detach views in-place, expected a tensor that is not a view: use detach()");
    m->grad_fn.reset();
    m->requires_grad = false;
    m->output_nr = 0;
    return 0;
  });
}

int32_t ag_move_hooks(cr_ctx* c, cr_tensor* from, cr_tensor* to) {
  return guarded(c, [&] {
    AutogradMeta* m = meta_of(from);
    if (!m || (m->hooks.empty() && m->post_hooks.empty())) return 0;
    if (m->grad_fn || m->base.defined() || grad_fn_of(to, ensure_meta(to)))
      fail("move_hooks: expected two leaf tensors that are not views");
    AutogradMeta& n = ensure_meta(to);
    for (std::vector<autograd::TensorHook> AutogradMeta::*v : {&AutogradMeta::hooks, &AutogradMeta::post_hooks}) {
      (n.*v).insert((n.*v).end(), (m->*v).begin(), (m->*v).end());
      (m->*v).clear();
    }
    return 0;
  });
}

cr_tensor* ag_get_grad(cr_ctx* c, cr_tensor* t) {
  const AutogradMeta* m = meta_of(t);
  return m ? hand_one(c, m->grad) : nullptr;
}

int32_t ag_set_grad(cr_ctx* c, cr_tensor* t, cr_tensor* g) {
  return guarded(c, [&] {
    if (!g) {
      if (t->_autograd) meta_of(t)->grad = Tensor();
      return 0;
    }
    if (g == t)
      fail("grad: can't assign a tensor as its own grad, expected another tensor (a copy: x:detach():clone())");
    Tensor x(t, true), gt(g, true);
    if (gt.sizes() != x.sizes())
      fail(cat("grad: assigned grad has data of a different size: ", shape_str(gt.sizes()), ", expected ", shape_str(x.sizes())));
    if (gt.dtype() != x.dtype()) fail(cat("grad: assigned grad has data of a different type: ", dtype_name(gt.dtype()), ", expected ", dtype_name(x.dtype())));
    if (!(gt.device() == x.device())) fail(cat("grad: assigned grad has data located on a different device: ", device_name(gt.device())));
    ensure_meta(t).grad = gt;
    return 0;
  });
}

const char* ag_grad_fn(cr_ctx* c, cr_tensor* t, double* id) {
  AutogradMeta* m = meta_of(t);
  const char* r = nullptr;
  *id = 0;
  if (guarded(c, [&] {
    if (!m || !grad_fn_of(t, *m)) return 0;
    *id = double(m->grad_fn->seq);
    Context::of(c).scratch = m->grad_fn->name();
    r = Context::of(c).scratch.c_str();
    return 0;
  }) < 0)
    *id = -1;
  return r;
}

// Non-leaves keep their hooks / retained grad in their node's out_meta (the engine reads them).
void watch(cr_tensor* t) {
  AutogradMeta& m = ensure_meta(t);
  if (grad_fn_of(t, m)) autograd::watch(m);
}


int32_t ag_retain_grad(cr_ctx* c, cr_tensor* t) {
  return guarded(c, [&] {
    with_history(c, t, "retain_grad");
    if (!requires_grad(t)) fail("retain_grad: can't retain_grad on Tensor that has requires_grad=false");
    if (is_leaf(t)) return 0;
    ensure_meta(t).retains_grad = true;
    watch(t);
    return 0;
  });
}

int32_t ag_add_hook(cr_ctx* c, cr_tensor* t, int32_t id) {
  return guarded(c, [&] {
    with_history(c, t, "register_hook");
    if (!requires_grad(t)) fail("register_hook: cannot register a hook on a tensor that doesn't require gradient");
    AutogradMeta& m = ensure_meta(t);
    m.hooks.push_back(TensorHook{id, grad_fn_of(t, m), m.output_nr, Context::of(c).hook_owner});
    watch(t);
    return 0;
  });
}

int32_t ag_add_post_hook(cr_ctx* c, cr_tensor* t, int32_t id) {
  return guarded(c, [&] {
    if (!requires_grad(t) || !is_leaf(t))
      fail("register_post_accumulate_grad_hook: expected a leaf tensor that requires grad");
    ensure_meta(t).post_hooks.push_back(TensorHook{id, {}, 0, Context::of(c).hook_owner});
    return 0;
  });
}

void ag_remove_hook(cr_ctx* c, cr_tensor* t, int32_t id) {
  AutogradMeta* m = t ? meta_of(t) : nullptr;
  if (!m) return;
  const HookOwner* owner = Context::of(c).hook_owner.get();
  auto same = [&](const TensorHook& h) { return h.id == id && h.owner.get() == owner; };
  std::erase_if(m->hooks, same);  // (the engine runs copies)
  std::erase_if(m->post_hooks, same);
}

int32_t ag_dead_hooks(cr_ctx* c, int32_t* out, int32_t cap) {
  auto& ids = Context::of(c).hook_owner->dead;
  const int32_t n = std::min<int32_t>(cap, int32_t(ids.size()));
  std::copy(ids.end() - n, ids.end(), out);
  ids.resize(ids.size() - size_t(n));
  return n;
}

void ag_set_hook_caller(cr_ctx* c, int32_t (*fn)(int32_t, cr_tensor*, cr_tensor**)) { Context::of(c).hook_owner->caller = fn; }

int32_t ag_backward(cr_ctx* c, cr_tensor** roots, cr_tensor** grads, int32_t n, cr_tensor** inputs, int32_t ninputs,
                    int32_t flags, cr_tensor** outs) {
  return guarded(c, [&] {
    Context& ctx = Context::of(c);
    // inside a compiled function the segment before ended at a graph break (stdlib/autograd.lua):
    // the engine runs eagerly, and the compiled segments' nodes run their backward graphs
    std::optional<graph::Recorder::Pause> pause;
    if (c->capturing) pause.emplace(*ctx.recorder, ctx);
    std::vector<Tensor> rs, gs, ins;
    for (int32_t i = 0; i < n; ++i) {
      rs.emplace_back(roots[i], true);
      gs.push_back(grads[i] ? Tensor(grads[i], true) : Tensor());
    }
    for (int32_t i = 0; i < ninputs; ++i) ins.emplace_back(inputs[i], true);
    BackwardOptions o{(flags & CR_AG_RETAIN_GRAPH) != 0, (flags & CR_AG_CREATE_GRAPH) != 0, (flags & CR_AG_ALLOW_UNUSED) != 0,
                      (flags & CR_AG_RETURN_GRADS) != 0};
    std::vector<Tensor> r;
    try {
      r = backward(ctx, rs, gs, ins, o);
    } catch (const HookRaised&) {
      throw;
    } catch (const Error& e) {
      throw Error(cat(o.capture ? "autograd.grad: " : "backward: ", e.what()));
    }
    if (!o.capture) return 0;
    std::vector<cr_tensor*> handed;
    for (size_t i = 0; i < r.size(); ++i) {
      outs[i] = r[i].defined() ? r[i].release() : nullptr;
      if (outs[i]) handed.push_back(outs[i]);
    }
    ctx.handing(handed.data(), handed.size());
    return 0;
  });
}

int32_t ag_capture_backward(cr_ctx* c, cr_tensor* root, const char* where, const char** why) {
  static thread_local std::string reason;
  return guarded(c, [&] {
    Context& ctx = Context::of(c);
    reason = !c->capturing || !ctx.recorder || !ctx.recorder->active() ? "no capture"
                                                                       : ctx.recorder->capture_backward(root, where);
    *why = reason.c_str();
    return reason.empty() ? 1 : 0;
  });
}

void ag_where(cr_ctx* c, const char* where) {
  c->service &= ~CR_SERVICE_GRAD_WHERE;
  set_where(where);
}

int32_t ag_status(int32_t op) {
  const auto& ops = Registry::get().ops();
  if (op < 0 || size_t(op) >= ops.size()) return -1;
  const Derivative& d = ops[size_t(op)].grad;
  return d.fn ? CR_AG_HAS_RULE : d.not_differentiable ? CR_AG_NOT_DIFFERENTIABLE : CR_AG_NO_RULE;
}

}  // namespace

const cr_autograd_api* api_table() {
  static const cr_autograd_api api = {ag_mode,     ag_query,       ag_set_requires_grad, ag_get_grad,
                                      ag_set_grad, ag_grad_fn,     ag_retain_grad,
                                      ag_add_hook, ag_dead_hooks,  ag_set_hook_caller,   ag_backward,
                                      ag_where,    ag_status,      ag_add_post_hook,     ag_capture_backward,
                                      ag_remove_hook, ag_detach_,     ag_move_hooks};
  return &api;
}

}  // namespace cr::autograd
