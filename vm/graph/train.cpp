// The recorder's side of compiled autograd (joint.hpp): which training segments are
// differentiated as graphs, the node of each run, and the compilation of backward graphs.
#include "vm/autograd/autocast.hpp"
#include "vm/autograd/call.hpp"
#include "vm/autograd/grad_mode.hpp"
#include "vm/autograd/meta.hpp"
#include "vm/graph/joint.hpp"
#include "vm/graph/segment.hpp"

namespace cr::graph {

// A training segment's plan, made once per variant from its first replay (the guards hold grad
// mode and requires_grad, so every later run has the same). A segment that cannot be
// differentiated as a graph was recorded - run eagerly, with eager autograd - and its site runs
// so from then on.
void Recorder::check_training(guards::Leaf& leaf) {
  Segment& s = *seg_;
  SegmentReport& r = report.back();
  if (leaf.joint) {
    r.backward_graph = plan_of(*leaf.joint).any;
    return;
  }
  if (!leaf.raw) leaf.raw = guards::build_graph(leaf);
  std::vector<char> needs_grad(leaf.raw->values.size());
  for (int32_t v : leaf.raw->inputs) needs_grad[size_t(v)] = autograd::requires_grad(s.vals[size_t(v)].get());
  GradPlan plan = plan_gradients(*leaf.raw, needs_grad, s.grad_ops, s.no_grad_ops);
  r.backward_graph = plan.any && plan.unsupported.empty();
  if (!plan.unsupported.empty()) {
    r.grad_fallback = plan.unsupported;
    if (s.pending) fail(cat("internal: compiled autograd: a replayed segment ", plan.unsupported));
    s.site->eager = true;
    ++stats.grad_fallbacks;
    if (logs.aot)
      log("aot", cat(fn_->opts.name, ": the segment at ", s.site->name, " runs eagerly with eager autograd: ",
                     plan.unsupported));
    return;
  }
  if (!s.pending) return;  // (recorded: the plan is made from the pre-run state of a replay)
  const std::string name = cat(fn_->opts.name, " segment ending at ", leaf.where, " #", leaf.variant);
  note_plan(name, plan);
  leaf.joint = make_joint(leaf.raw, std::move(plan), JointOptions{name, fn_->opts.backend});
}

void Recorder::note_plan(const std::string& name, const GradPlan& p) {
  stats.saved_values += int64_t(p.saved.size());
  stats.saved_bytes += p.saved_bytes;
  if (logs.partition)
    log("partition", cat(name, ": saves ", p.saved.size(), " value(s), ", p.saved_bytes, " bytes (the derivative rules read ",
                         p.required_count, ", ", p.required_bytes, " bytes; inputs are kept anyway)"));
}

// The values of the segment that Lua holds (or that end it) get the segment's node as grad_fn.
void Recorder::attach_node(const std::shared_ptr<Joint>& joint, const Graph& ran, std::vector<Tensor>& vals,
                           const std::vector<cr_tensor*>& needed) {
  Segment& s = *seg_;
  for (const Graph::Alias& a : ran.aliases)  // (removed values the backward may read)
    if (!vals[size_t(a.removed)].defined()) vals[size_t(a.removed)] = vals[size_t(a.kept)];
  std::vector<std::pair<int32_t, cr_tensor*>> held;
  for (size_t v = 0; v < s.vals.size() && v < ran.values.size(); ++v) {
    cr_tensor* p = s.vals[v].get();
    if (!p || s.is_input[v] || p->_vid != int32_t(v)) continue;
    const bool ends = std::find(needed.begin(), needed.end(), p) != needed.end();
    if (ends || tensor_refs(p) > 1) held.emplace_back(int32_t(v), p);
  }
  attach_backward(joint, vals, held);
}

// A replayed prefix whose plan is unsupported (a write to memory an earlier op read, met at a
// guard failing after it): its ops run now through eager autograd, one by one, as if recorded;
// Lua's tensors take their values and histories.
void Recorder::run_with_autograd(const Graph& g, std::vector<Tensor>& vals) {
  Segment& s = *seg_;
  Pause pause(*this, ctx_);
  autograd::AutocastOff no_autocast;  // (the graph holds the casts autocast made)
  set_constants(g, vals);
  size_t ordinal = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Op) continue;
    autograd::GradModeGuard mode(ordinal < s.op_grad.size() ? s.op_grad[ordinal] != 0 : autograd::grad_enabled);
    ++ordinal;
    CallArgs call(n, vals, s.numbers_or_null());
    std::vector<Tensor> outs;
    autograd::call(ctx_, n.op, call.args, int(n.args.size()), outs);
    autograd::set_where(n.where.c_str());
    if (n.inplace()) {
      vals[size_t(n.outs[0])] = vals[size_t(n.args[0].value)];
      continue;
    }
    for (size_t k = 0; k < n.outs.size() && k < outs.size(); ++k) {
      if (g.values[size_t(n.outs[k])].node != int32_t(i)) continue;
      Tensor& slot = vals[size_t(n.outs[k])];
      if (!slot.defined() || !slot.is_lazy()) {
        slot = outs[k];
        continue;
      }
      Tensor::attach(slot.get(), outs[k]);  // (Lua's tensor: later ops take it, so views name it as base)
      // copied, not swapped: an op may return an argument itself, whose history must stay
      if (autograd::AutogradMeta* m = autograd::meta_of(outs[k].get())) {
        autograd::AutogradMeta& to = autograd::ensure_meta(slot.get());
        to.requires_grad = m->requires_grad;
        to.grad_fn = m->grad_fn;
        to.output_nr = m->output_nr;
        to.base = m->base;
        to.creation = m->creation;
        to.attr_version = m->attr_version;
      }
    }
  }
}

// A dynamic segment's joint for this call's instance (Recorder::instance): its backward graphs
// are traced with the call's sizes and integers. A hot instance keeps its joint; a cold call's
// backward runs on the eager kernels.
std::shared_ptr<Joint> Recorder::joint_of(guards::Leaf& leaf) {
  if (!leaf.joint || !leaf.dynamic) return leaf.joint;
  Segment& s = *seg_;
  bool first = true;
  guards::Leaf::Instance* mine = nullptr;
  for (auto& [layouts, inst] : leaf.instances) {
    if (inst.raw == s.instance_raw) mine = &inst;
    else if (inst.joint) first = false;
  }
  if (mine && mine->joint) return mine->joint;
  const JointOptions& o = options_of(*leaf.joint);
  auto j = make_joint(s.instance_raw, plan_of(*leaf.joint),
                      JointOptions{o.name, mine ? o.backend : "eager", true, !mine || !first});
  if (mine) mine->joint = j;
  return j;
}

std::shared_ptr<Graph> Recorder::compile_backward(const std::shared_ptr<Graph>& traced, const JointOptions& o,
                                                  std::vector<double>& numbers) {
  auto g = std::make_shared<Graph>(*traced);
  g->dynamic = o.dynamic;
  g->reinstance = o.reinstance;
  if (o.dynamic) vary_numbers(*g, numbers);
  if (!optimized(*g, stats.grad_fallbacks, "aot", "traced")) return traced;
  if (!o.reinstance) ++stats.backward_graphs_compiled;
  if (logs.graph) log("graph", g->str());
  start_native(g, o.backend);
  return g;
}

}  // namespace cr::graph
