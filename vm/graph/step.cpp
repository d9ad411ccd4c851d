// A whole compiled step (issue 35): backward() inside a capture, on a loss that is a value of the
// segment being captured, is no graph break. The segment so far (the loss's ancestors) is
// differentiated once per trace-tree position by the joint trace (joint_trace.hpp) and the
// traced backward's op calls are made through the recorder, as Lua's are: the gradients are
// values of the same graph, and so is their accumulation into the leaves' .grad (the leaf takes
// the gradient, or an add_ into the .grad it has), which the optimizer then reads.
#include <unordered_set>

#include "vm/autograd/call.hpp"
#include "vm/autograd/meta.hpp"
#include "vm/autograd/node.hpp"
#include "vm/fixed.hpp"
#include "vm/graph/joint.hpp"
#include "vm/graph/joint_trace.hpp"
#include "vm/graph/segment.hpp"

namespace cr::graph {

// The traced backward of one segment prefix from one loss, cached on the prefix's last event.
struct StepBackward {
  std::string declined;        // why backward() stays a graph break ("": it is traced)
  Traced t;                    // its graph: root gradient in, the forward values it reads
  std::vector<int32_t> leaves;  // the inputs differentiated (forward value ids), as t.grad_out
  std::vector<int32_t> plain;   // the loss's other inputs (requiring no grad when traced)
  std::vector<char> own;       // per leaf: .grad may take the gradient itself (else a clone)
  DeadLists dead;              // per node of t.graph: its values dead after it (the gradients kept)
  int root_op = -1;            // the registry op that made the loss (its grad_fn's name)
};

namespace {

constexpr size_t kMaxShapes = 16;  // traced backwards kept a position (past it they are traced again)

template <class F> void for_tensor_args(const Node& n, F&& f) {
  for (const Arg& a : n.args) {
    if (a.tag == kTensor) f(a.value);
    for (int32_t v : a.values) f(v);
  }
}

// A gradient the engine would store in an empty .grad as it is (autograd::accumulate_into): a
// fresh contiguous result no other leaf receives.
bool owned(const Graph& g, const std::vector<int32_t>& outs, int32_t v) {
  const Value& x = g.values[size_t(v)];
  if (x.node < 0 || g.nodes[size_t(x.node)].kind != NodeKind::Op || x.views >= 0) return false;
  if (x.meta.strides != contiguous_strides(concrete(x.meta.sizes))) return false;
  return std::count(outs.begin(), outs.end(), v) == 1;
}

// An in-place op under grad mode on a value requiring grad anywhere in the segment so far, not
// only among the loss's ancestors: the segment then runs with eager autograd (check_training),
// since a replay of it could not be differentiated as a graph where a later guard fails.
std::string inplace_with_grad(const Graph& g, const std::vector<char>& grad_on, std::vector<char> needs) {
  size_t k = 0;
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::Op) continue;
    const bool on = grad_on.at(k++);
    bool in = false;
    for_tensor_args(n, [&](int32_t v) { in = in || needs[size_t(v)]; });
    if (!on || !in || n.def().grad.not_differentiable) continue;
    if (n.inplace()) return cat("in-place op ", n.def().name, " (", n.where, ") in a segment with gradients");
    for (int32_t o : n.outs) needs[size_t(o)] = 1;
  }
  return "";
}

// Prunes the prefix graph to the loss's ancestors and finds the inputs whose gradients it needs;
// "" or why it cannot be differentiated as a graph (an ancestor made under T.no_grad from a
// tensor requiring grad, which eager autograd would not differentiate through).
std::string ancestors(Graph& g, const std::vector<char>& grad_on, const std::vector<char>& wants, int32_t root,
                      StepBackward& b) {
  std::vector<char> needs = wants, live(g.values.size()), kept(g.nodes.size());
  std::vector<size_t> ordinal(g.nodes.size());
  for (size_t i = 0, k = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Op) continue;
    ordinal[i] = k++;
    bool in = false;
    for_tensor_args(n, [&](int32_t v) { in = in || needs[size_t(v)]; });
    if (in && grad_on.at(ordinal[i]))
      for (int32_t o : n.outs) needs[size_t(o)] = 1;
  }
  live[size_t(root)] = 1;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Op || std::none_of(n.outs.begin(), n.outs.end(), [&](int32_t o) { return live[size_t(o)]; }))
      continue;
    bool in = false;
    for_tensor_args(n, [&](int32_t v) {
      live[size_t(v)] = 1;
      in = in || needs[size_t(v)];
    });
    if (in && !grad_on[ordinal[i]]) return cat("the loss depends on ", n.def().name, " (", n.where, ") run under T.no_grad");
  }
  for (int32_t v : g.inputs)
    if (live[size_t(v)]) (wants[size_t(v)] ? b.leaves : b.plain).push_back(v);
  g.outputs = {root};
  eliminate_dead_code(g, false);
  // (none: the loss needs no gradient, or its leaves were made inside the segment)
  return b.leaves.empty() ? "no input of the graph that requires grad reaches the loss (leaves made inside it?)" : "";
}

// What the trace assumed and the trace tree does not guard: the leaves are leaves without hooks
// (and the other inputs still require no grad: an input first met under T.no_grad is not
// guarded so), the forward values it reads are the segment's, no value of it has a hook.
std::string per_call(const Segment& s, const StepBackward& b) {
  for (int32_t v : b.plain)
    if (autograd::requires_grad(s.vals[size_t(v)].get())) return "an input requires grad now";
  for (int32_t v : b.leaves) {
    const autograd::AutogradMeta* m = autograd::meta_of(s.vals[size_t(v)].get());
    if (!m || m->grad_fn) return "the loss depends on a tensor computed before the graph (a non-leaf)";
    if (!m->requires_grad) return "an input requires no grad now";
    if (!m->hooks.empty() || !m->post_hooks.empty()) return "a parameter has a hook";
    if (m->grad.defined() && m->grad.is_lazy() && m->grad.get()->_gen != s.gen)
      return "a .grad is a value of an earlier graph";
  }
  for (const auto& [v, f] : b.t.reads)
    if (s.vals[size_t(f)].get()->_vid != f) return "a value the backward reads was written in place";
  for (size_t v = 0; v < s.vals.size(); ++v) {
    const cr_tensor* p = s.vals[v].get();
    const autograd::AutogradMeta* m = p ? autograd::meta_of(p) : nullptr;
    if (m && !s.is_input[v] && (!m->hooks.empty() || m->retains_grad)) return "a tensor hook or retain_grad";
  }
  return "";
}

// The loss as eager's is after backward() without retain_graph: a non-leaf whose graph's saved
// tensors are freed, so that requires_grad and grad_fn match and a second backward() raises. A
// recorded loss has eager's graph (released here: the traced backward ran instead of the
// engine); a replayed one has none and gets a released node of the op that made it.
void settle_loss(cr_tensor* root, int op) {
  autograd::AutogradMeta& m = autograd::ensure_meta(root);
  if (m.requires_grad) return;  // (a leaf: ancestors() declined it)
  if (!m.grad_fn) {
    auto n = std::make_shared<autograd::Node>();
    n->op = op;
    n->seq = autograd::next_seq();
    const Tensor loss(root, true);
    n->outs.push_back(Meta{loss.sizes(), loss.dtype(), loss.device()});
    n->released = true;
    m.grad_fn = std::move(n);
    return;
  }
  std::vector<autograd::Node*> stack{m.grad_fn.get()};
  std::unordered_set<autograd::Node*> seen{m.grad_fn.get()};
  while (!stack.empty()) {
    autograd::Node* n = stack.back();
    stack.pop_back();
    n->release_saved();
    for (const autograd::Input& in : n->inputs)
      if (in.edge.fn && seen.insert(in.edge.fn.get()).second) stack.push_back(in.edge.fn.get());
  }
}

}  // namespace

// Differentiates the segment so far from value `root` (its values are real: recorded, or the
// replayed prefix ran; or lazy in a dynamic segment's replay) by the joint trace, with the
// recorder paused.
std::shared_ptr<StepBackward> Recorder::trace_step(int32_t root) {
  Segment& s = *seg_;
  let_go_unreached(s);
  auto b = std::make_shared<StepBackward>();
  guards::Leaf prefix{guards::EndKind::Break, "", "", s.pos};
  auto g = guards::build_graph(prefix);
  if (s.dynamic) g = instance_of(*g, s);  // (this call's sizes and integers)
  std::vector<char> wants(g->values.size());
  std::vector<Tensor> inputs(g->values.size());
  for (int32_t v : g->inputs) {
    ensure_real(ctx_, s.vals[size_t(v)].get());
    inputs[size_t(v)] = s.vals[size_t(v)];
    wants[size_t(v)] = autograd::requires_grad(s.vals[size_t(v)].get());
  }
  b->declined = inplace_with_grad(*g, s.op_grad, wants);
  if (!b->declined.empty()) return b;
  b->declined = ancestors(*g, s.op_grad, wants, root, *b);
  if (!b->declined.empty()) return b;
  for (const Node& n : g->nodes)  // (the trace would take the recorded ones; a backward's are its shape's)
    for (const Arg& a : n.args)
      if (a.varying >= 0) {
        b->declined = cat("the loss depends on a number that varies (", n.def().name, " at ", n.where, ")");
        return b;
      }
  b->root_op = g->nodes[size_t(g->values[size_t(root)].node)].op;
  std::vector<char> needs(g->values.size());
  for (int32_t v : b->leaves) needs[size_t(v)] = 1;
  const double t0 = now_us();
  GradPlan plan = plan_gradients(*g, needs, 1, 0);
  const double partitioned = now_us();
  if (!plan.unsupported.empty()) {
    b->declined = plan.unsupported;
    return b;
  }
  // (the backward reads the forward values still there - autograd's saved ones among them - and
  // recomputes those the segment let go)
  std::vector<int32_t> kept;
  for (size_t v = 0; v < g->values.size(); ++v) {
    const cr_tensor* p = s.vals[v].get();
    const bool here = p && (p->_storage || p->_gen == s.gen) && p->_vid == int32_t(v);  // (lazy in a replay)
    if (g->values[v].node >= 0 && here) kept.push_back(int32_t(v));
  }
  Pause pause(*this, ctx_);
  const Tensor& loss = s.vals[size_t(root)];
  // (of a tensor like the loss, which may be lazy: reading it would end the segment)
  const Tensor like = Tensor::empty(loss.sizes(), loss.dtype(), loss.device());
  cr_value a{};
  a.tag = kTensor;
  a.ptr = like.get();
  std::vector<Tensor> ones = dispatch(ctx_, autograd::op_id("ones_like"), &a, 1);
  // (the trace runs the forward again: its random ops draw, and the generator is put back, so the
  // step draws what eager's does; the backward reads the segment's own draws, every value kept)
  struct Restore {
    Generator& gen;
    const Generator was;
    ~Restore() { gen = was; }
  } restore{ctx_.gen, ctx_.gen};
  // Only the graph is kept: the trace computes nothing (phantom dispatch) unless an op has no
  // rule for its outputs' layouts; then it runs for real.
  const TraceInput in{*g, inputs, b->leaves, kept};
  try {
    PhantomScope phantom;
    b->t = trace_backward(ctx_, in, {root}, ones, true);
  } catch (const Error& e) {
    if (logs.aot) log("aot", cat(fn_->opts.name, ": the step's backward is traced on values: ", e.what()));
    ctx_.gen = restore.was;
    b->t = trace_backward(ctx_, in, {root}, ones, true);
  }
  if (logs.perf)
    log("perf", cat("step backward of ", g->op_count(), " forward ops: partition ", fixed((partitioned - t0) / 1e3), " ms, joint trace ",
                    fixed((now_us() - partitioned) / 1e3), " ms"));
  if (!b->t.broken.empty()) {
    b->declined = b->t.broken;
    return b;
  }
  for (const Node& n : b->t.graph->nodes)
    if (n.random()) {
      b->declined = cat("the backward would draw ", n.def().name, " again (its result was written in place)");
      return b;
    }
  b->t.grads.clear();
  std::vector<char> keep(b->t.graph->values.size());
  for (int32_t v : b->t.grad_out) {
    b->own.push_back(v >= 0 && owned(*b->t.graph, b->t.grad_out, v));
    if (v >= 0) keep[size_t(v)] = 1;
  }
  b->dead = dead_after(*b->t.graph, keep);
  return b;
}

// The traced backward's calls, through the recorder (grad mode off and autocast off, as the
// engine runs), then the accumulation into each leaf's .grad as it is now.
void Recorder::run_step(const StepBackward& b, cr_tensor* root, const std::string& where) {
  Segment& s = *seg_;
  autograd::GradModeGuard off(false);
  autograd::AutocastOff no_autocast;
  const Graph& g = *b.t.graph;
  std::vector<Tensor> vals(g.values.size()), outs;
  auto call = [&](int op, const cr_value* args, int nargs) {
    autograd::call(ctx_, op, args, nargs, outs);
    set_where(where);
  };
  cr_value a[2]{};
  a[0].tag = a[1].tag = kTensor;
  a[0].ptr = root;
  call(autograd::op_id("ones_like"), a, 1);
  vals[size_t(b.t.grad_in.at(0))] = outs.at(0);
  for (const auto& [v, f] : b.t.reads) vals[size_t(v)] = s.vals[size_t(f)];
  // Each value is let go after its last reader. A recorded call runs these ops eagerly, and the
  // segment holds what it records: a value only it holds then leaves it too, as the engine frees
  // its temporaries (not every backward value alive at once).
  auto let_go = [&](int32_t v) {
    const cr_tensor* p = vals[size_t(v)].get();
    if (p && p->_storage && p->_gen == s.gen && size_t(p->_vid) < s.vals.size() && !s.is_input[size_t(p->_vid)] &&
        s.vals[size_t(p->_vid)].get() == p && tensor_refs(p) == 2)
      s.vals[size_t(p->_vid)] = Tensor();
    vals[size_t(v)] = Tensor();
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Op) {
      CallArgs args(n, vals, nullptr);
      call(n.op, args.args, int(n.args.size()));
      if (n.inplace()) {
        vals[size_t(n.outs.at(0))] = vals[size_t(n.args.at(0).value)];
      } else {
        for (size_t k = 0; k < n.outs.size() && k < outs.size(); ++k)
          if (g.values[size_t(n.outs[k])].node == int32_t(i)) vals[size_t(n.outs[k])] = outs[k];
      }
      outs.clear();
    }
    for (int32_t v : b.dead[i]) let_go(v);
  }
  for (size_t k = 0; k < b.leaves.size(); ++k) {
    if (b.t.grad_out[k] < 0) continue;
    const Tensor& grad = vals[size_t(b.t.grad_out[k])];
    autograd::AutogradMeta& m = autograd::ensure_meta(s.vals[size_t(b.leaves[k])].get());
    a[0].ptr = grad.get();
    if (!m.grad.defined()) {
      if (b.own[k]) {
        m.grad = grad;
        continue;
      }
      call(autograd::op_id("clone"), a, 1);
      m.grad = outs.at(0);
    } else {
      Tensor acc = m.grad;  // (alive through the call)
      a[0].ptr = acc.get();
      a[1].ptr = grad.get();
      call(autograd::op_id("add_"), a, 2);
    }
  }
}

bool Recorder::stepped_value(const cr_tensor* t) const {
  return seg_ && seg_->stepped && !t->_storage && t->_gen == seg_->gen;
}

std::string Recorder::capture_backward(cr_tensor* root, const std::string& where) {
  Segment& s = *seg_;
  // (a function's first call does not know yet that it trains: its ops that take a tensor
  // requiring grad ran eagerly with eager autograd, and the function trains from then on)
  if (!(s.train || ctx_.capture_wants_training) || s.passthrough) return "not a training capture";
  if (!autograd::grad_enabled) return "grad mode is off";
  if (root->_gen != s.gen || s.ops == 0 || s.is_input.at(size_t(root->_vid)) || s.vals[size_t(root->_vid)].get() != root)
    return "the loss is not a value of the graph being captured";
  if (s.vals[size_t(root->_vid)].numel() != 1)
    return "the loss has more than one element";
  std::vector<int64_t> key{root->_vid};
  if (s.dynamic) {  // (traced per shape: its numbers - a mean's 1 / n - and sizes are the call's)
    if (s.pos->step_backwards.size() > kMaxShapes) s.pos->step_backwards.clear();
    std::vector<int32_t> ins;
    for (size_t v = 0; v < s.vals.size(); ++v)
      if (s.is_input[v] && s.vals[v].defined()) ins.push_back(int32_t(v));
    std::vector<int64_t> layouts = instance_key(ins, s, true);
    key.insert(key.end(), layouts.begin(), layouts.end());
  }
  std::shared_ptr<StepBackward>& b = s.pos->step_backwards[key];
  if (!b) {
    // (a dynamic segment's replay goes on lazily: the trace reads layouts, and a prefix run now
    // would be run again with the rest, drawing its random ops twice)
    if (!s.dynamic) run_pending();
    b = trace_step(root->_vid);
    if (logs.aot && !b->declined.empty()) log("aot", cat(fn_->opts.name, ": backward() at ", where, " ends the graph: ", b->declined));
  }
  if (!b->declined.empty()) return b->declined;
  std::string why = per_call(s, *b);
  if (!why.empty()) return why;
  std::shared_ptr<StepBackward> keep = b;  // (the tree may grow while its calls are recorded)
  // (stepped first: a guard failing among the backward's calls - another shape's derivative
  // rules may take other ops - runs the prefix without a joint, then records the rest)
  s.stepped = true;
  run_step(*keep, root, where);
  settle_loss(root, keep->root_op);
  return "";
}

}  // namespace cr::graph
