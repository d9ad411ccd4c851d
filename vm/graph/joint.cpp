// Compiled autograd: the plan of a training segment, its node (CompiledFunctionBackward) and
// the runs of its backward graphs. The tracing of those graphs is in joint_trace.cpp.
#include "vm/graph/joint.hpp"

#include "vm/autograd/engine.hpp"
#include "vm/autograd/node.hpp"
#include "vm/autograd/var.hpp"
#include "vm/graph/buckets.hpp"
#include "vm/graph/joint_trace.hpp"
#include "vm/graph/partition.hpp"
#include "vm/graph/recorder.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::graph {

namespace {

template <class F> void each_tensor_arg(const Node& n, F&& f) {
  for (size_t i = 0; i < n.args.size(); ++i) {
    if (n.args[i].tag == kTensor) f(int(i), n.args[i].value);
    for (int32_t v : n.args[i].values) f(int(i), v);
  }
}

}  // namespace

GradPlan plan_gradients(const Graph& g, const std::vector<char>& input_requires, int grad_ops, int no_grad_ops) {
  GradPlan p;
  p.needs_grad.assign(g.values.size(), 0);
  if (grad_ops == 0) return p;  // every op ran under T.no_grad: an inference segment
  for (int32_t v : g.inputs)
    if (size_t(v) < input_requires.size() && input_requires[size_t(v)]) p.needs_grad[size_t(v)] = p.any = true;
  std::vector<char> saved(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Op) continue;
    const Derivative& d = n.def().grad;
    bool in = false;
    each_tensor_arg(n, [&](int slot, int32_t v) { in = in || (p.needs_grad[size_t(v)] && !(d.nondiff >> slot & 1)); });
    if (!in || d.not_differentiable) continue;
    if (!d.fn && p.unsupported.empty()) p.unsupported = cat(n.def().name, " (", n.where, ") has no derivative rule");
    uint32_t wants = 0;  // (the arguments whose gradient the node computes: saved_for_others)
    each_tensor_arg(n, [&](int slot, int32_t v) {
      if (p.needs_grad[size_t(v)] && !(d.nondiff >> slot & 1)) wants |= 1u << slot;
    });
    const bool given = d.given >= 0 && size_t(d.given) < n.args.size() && n.args[size_t(d.given)].tag != kNone;
    each_tensor_arg(n, [&](int slot, int32_t v) {
      if ((d.inputs_kept(given) >> slot & 1) && (!(d.saved_for_others >> slot & 1) || (wants & ~(1u << slot))))
        saved[size_t(v)] = 1;
    });
    for (size_t k = 0; k < n.outs.size(); ++k) {
      const int32_t o = n.outs[k];
      if (g.values[size_t(o)].node != int32_t(i)) continue;  // an argument handed back
      if (is_floating(g.values[size_t(o)].meta.dtype)) p.needs_grad[size_t(o)] = p.any = true;
      if (d.outputs_kept(given) >> k & 1) saved[size_t(o)] = 1;
    }
  }
  if (p.any && no_grad_ops > 0 && p.unsupported.empty())
    p.unsupported = "grad mode changes inside the segment (T.no_grad / T.enable_grad around some of its ops)";
  // A write could change the history of a tensor requiring grad (eager autograd rebases it), or
  // memory an earlier op read, which the backward may read again (saved, or to recompute from):
  // not functionalised yet. Other writes (an integer buffer filled beside the gradients) are none.
  std::vector<char> read(g.values.size());
  for (const Node& n : g.nodes) {
    if (!p.any || !p.unsupported.empty()) break;
    if (n.kind != NodeKind::Op) continue;
    if (n.inplace() || n.writes()) {
      bool bad = false;
      each_tensor_arg(n, [&](int, int32_t v) { bad = bad || p.needs_grad[size_t(v)]; });
      each_written_root(g, n, [&](int32_t r) { bad = bad || read[size_t(r)]; });
      if (bad) p.unsupported = cat("in-place op ", n.def().name, " (", n.where, ") in a segment with gradients");
    }
    if (!is_view_node(g, n)) each_tensor_arg(n, [&](int, int32_t v) { read[size_t(storage_root(g, v))] = 1; });
  }
  if (!p.any || !p.unsupported.empty()) return p;
  Partition cut = min_cut_partition(g, saved);
  p.saved = std::move(cut.saved);
  p.saved_bytes = cut.saved_bytes;
  p.required_bytes = cut.required_bytes;
  p.required_count = cut.required_count;
  return p;
}

// One backward graph of a forward graph.
struct BackwardGraph {
  bool traced = false;
  std::string fallback;  // why it runs on eager autograd instead ("": it does not)
  Traced t;
  BucketPlan reduced;  // DDP's buckets it reduces (buckets.hpp)
};

struct Joint {
  std::shared_ptr<const Graph> forward;
  GradPlan plan;
  JointOptions opts;
  // by the outputs that receive a gradient and the DDP buckets their backward may reduce
  std::map<std::pair<std::vector<int32_t>, BucketPlan>, BackwardGraph> backwards;
};

std::shared_ptr<Joint> make_joint(const std::shared_ptr<const Graph>& forward, GradPlan plan, JointOptions o) {
  auto j = std::make_shared<Joint>();
  j->forward = forward;
  j->plan = std::move(plan);
  j->opts = std::move(o);
  return j;
}

const GradPlan& plan_of(const Joint& j) { return j.plan; }
const JointOptions& options_of(const Joint& j) { return j.opts; }

namespace {

Recorder& recorder_of(Context& ctx) { return *ctx.recorder; }

Tensor contiguous_copy(const Tensor& t) {
  Tensor r = Tensor::empty(t.sizes(), t.dtype(), t.device());
  copy_into(r, t);
  return r;
}

// A value after the graph ran: a removed one is its kept value's.
const Tensor& produced(const Graph& g, const std::vector<Tensor>& vals, int32_t v) {
  for (const Graph::Alias& a : g.aliases)
    if (a.removed == v && !vals[size_t(v)].defined()) return produced(g, vals, a.kept);
  if (!vals[size_t(v)].defined()) fail(cat("internal: ", g.name, " did not produce value %", v));
  return vals[size_t(v)];
}

// Runs a traced backward graph: the gradients (laid out as traced: else a contiguous copy, as
// traced) and the forward values it reads in, the inputs' gradients out.
std::vector<Tensor> run_backward(Recorder& rec, const Traced& t, const std::vector<Tensor>& grads,
                                 std::vector<Tensor> saved) {
  const Graph& g = *t.graph;
  std::vector<Tensor> vals(g.values.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const int32_t v = t.grad_in[i];
    vals[size_t(v)] = meta_of(grads[i]) == g.values[size_t(v)].meta ? grads[i] : contiguous_copy(grads[i]);
  }
  for (const auto& [v, f] : t.reads) {
    const Tensor& x = saved[size_t(f)];
    if (!x.defined()) fail(cat("internal: ", g.name, " reads forward value %", f, ", which was not kept"));
    // (a phantom trace gives an op's result the layout of its infer rule: contiguous)
    const ValueMeta& want = g.values[size_t(v)].meta;
    if (meta_of(x) == want) vals[size_t(v)] = x;
    else if (want.strides == contiguous_strides(concrete(want.sizes)) && want.offset == 0)
      vals[size_t(v)] = contiguous_copy(x);
    else fail(cat("internal: ", g.name, " reads forward value %", f, " in another layout than traced"));
  }
  saved.clear();  // (the graph drops each after its last reader)
  rec.execute_backward(g, vals, t.numbers.empty() ? nullptr : t.numbers.data());
  std::vector<Tensor> out(t.grad_out.size());
  for (size_t k = 0; k < out.size(); ++k)
    if (t.grad_out[k] >= 0) out[k] = produced(g, vals, t.grad_out[k]);
  return out;
}

std::string recomputed_list(const Traced& t) {
  std::string s;
  for (const std::string& r : t.recomputed) s += cat(s.empty() ? "" : ", ", r);
  return s.empty() ? "nothing" : s;
}

// The node of one run of a training segment.
class CompiledFunction : public autograd::Backward {
 public:
  explicit CompiledFunction(std::shared_ptr<Joint> j) : j_(std::move(j)) {}
  std::string name() const override { return "CompiledFunctionBackward"; }
  void release() override { inputs_.clear(); }

  std::vector<Tensor> apply(autograd::Node& n, std::vector<Tensor>& out_grads, bool create_graph) override {
    if (create_graph)
      fail("CompiledFunctionBackward: create_graph (a double backward) through a compiled segment is not implemented "
           "yet; run the function eagerly (without T.compile) to differentiate twice");
    Context& ctx = autograd::current_context();
    std::vector<int32_t> key;
    std::vector<Tensor> grads;
    for (size_t k = 0; k < out_grads.size(); ++k)
      if (out_grads[k].defined()) {
        key.push_back(outs_[k]);
        grads.push_back(out_grads[k]);
      }
    BucketPlan plan = plan_buckets(n.inputs);
    BackwardGraph& b = j_->backwards[{key, plan}];
    Recorder& rec = recorder_of(ctx);
    if (!b.traced) {
      // The trace re-runs the forward and backward on phantom values; the graph then runs on the
      // saved values, as later calls do. Without phantom rules the trace runs on values, and with
      // the inputs as the forward saw them its gradients are this one's (the saved values go first).
      const std::vector<Tensor> inputs = trace_input().inputs;
      const TraceInput in{*j_->forward, inputs, ins_, j_->plan.saved};
      Traced t;
      bool phantom = true, as_seen = false;
      try {
        PhantomScope scope;
        t = trace_backward(ctx, in, key, grads, true);
      } catch (const Error& e) {
        if (rec.logs.aot) Recorder::log("aot", cat(j_->opts.name, ": the backward is traced on values: ", e.what()));
        phantom = false;
        as_seen = !changed_input(j_->forward->inputs);
        if (as_seen && autograd::releases_saved()) n.release_saved();
        t = trace_backward(ctx, in, key, grads, true);
      }
      b.traced = true;  // (not when the trace raised: the next backward traces again)
      std::vector<Tensor> traced_grads = std::move(t.grads);
      t.grads.clear();
      if (!t.broken.empty()) {
        b.fallback = t.broken;
        ++rec.stats.grad_fallbacks;
        if (rec.logs.aot) Recorder::log("aot", cat(j_->opts.name, ": the backward runs on eager autograd: ", t.broken));
        if (!phantom) {
          check_inputs(j_->forward->inputs);
          return traced_grads;
        }
      } else {
        b.t = std::move(t);
        b.reduced = place_buckets(b.t, plan);
        b.t.graph->name = cat(j_->opts.name, " backward #", j_->backwards.size());
        b.t.graph = rec.compile_backward(b.t.graph, j_->opts, b.t.numbers);
        rec.stats.recomputed_ops += int64_t(b.t.recomputed.size());
        if (rec.logs.aot)
          Recorder::log("aot", cat(b.t.graph->name, ": ", key.size(), " output gradient(s), ", b.t.graph->op_count(),
                                   " ops, reading ", b.t.reads.size(), " forward value(s)",
                                   b.reduced.empty() ? "" : cat(", reducing ", b.reduced.size(), " DDP bucket(s)")));
        if (rec.logs.partition) Recorder::log("partition", cat(b.t.graph->name, " recomputes: ", recomputed_list(b.t)));
        if (!phantom && as_seen) return traced_grads;  // (DDP's buckets reduce them: none was reduced in the graph)
      }
    }
    if (!b.fallback.empty()) {
      check_inputs(j_->forward->inputs);
      return trace_backward(ctx, trace_input(), key, grads, false).grads;
    }
    for (const auto& [v, f] : b.t.reads) check_inputs({f});
    std::vector<Tensor> saved = saved_of(n);
    // the engine frees them when this returns (no retain_graph): freed now, the backward graph
    // drops each after its last reader, as eager autograd's nodes do
    if (autograd::releases_saved()) n.release_saved();
    std::vector<Tensor> in_grads = run_backward(rec, b.t, grads, std::move(saved));
    mark_reduced(n.inputs, b.reduced);
    return in_grads;
  }

  std::shared_ptr<Joint> j_;
  std::vector<int32_t> ins_, outs_;  // value ids of the node's inputs and outputs
  std::vector<Tensor> inputs_;       // by value id: the forward graph's inputs (for tracing)
  std::vector<int32_t> saved_ids_;   // value ids of Node::saved_out's entries
  std::vector<uint32_t> versions_;   // by value id: the forward inputs' storage versions

 private:
  // Forward inputs read again (not through Node::saved_out, which the engine checks): unchanged,
  // as eager autograd requires of what it saved. The first of `ids` written since, or null.
  const Tensor* changed_input(const std::vector<int32_t>& ids) const {
    for (int32_t v : ids)
      if (size_t(v) < inputs_.size() && inputs_[size_t(v)].defined() &&
          inputs_[size_t(v)].storage()->version.load() != versions_[size_t(v)])
        return &inputs_[size_t(v)];
    return nullptr;
  }
  void check_inputs(const std::vector<int32_t>& ids) const {
    const Tensor* t = changed_input(ids);
    if (!t) return;
    const size_t v = size_t(t - inputs_.data());
    fail(cat("one of the variables needed for gradient computation has been modified by an inplace operation: [",
             dtype_name(t->dtype()), " ", shape_str(t->sizes()), "], an input of ", j_->opts.name, ", is at version ",
             t->storage()->version.load(), "; expected version ", versions_[v], " instead"));
  }

  TraceInput trace_input() {
    if (inputs_.empty()) fail("CompiledFunctionBackward: its saved values were already freed");
    return TraceInput{*j_->forward, inputs_, ins_, j_->plan.saved};
  }
  // The kept forward values by value id (version-checked by the engine, as eager saves are).
  std::vector<Tensor> saved_of(const autograd::Node& n) const {
    std::vector<Tensor> r(j_->forward->values.size());
    for (size_t i = 0; i < saved_ids_.size(); ++i) r[size_t(saved_ids_[i])] = n.saved_out[i].t;
    for (int32_t v : j_->forward->inputs)
      if (!r[size_t(v)].defined()) r[size_t(v)] = inputs_.at(size_t(v));
    return r;
  }
};

}  // namespace

void attach_backward(const std::shared_ptr<Joint>& j, const std::vector<Tensor>& vals,
                     const std::vector<std::pair<int32_t, cr_tensor*>>& held) {
  const Graph& g = *j->forward;
  const GradPlan& p = j->plan;
  auto cf = std::make_shared<CompiledFunction>(j);
  auto n = std::make_shared<autograd::Node>();
  auto alias = [](const Tensor& t) { return Tensor::view_of(t, t.sizes(), t.strides(), t.offset()); };
  cf->inputs_.resize(g.values.size());
  cf->versions_.resize(g.values.size());
  for (int32_t v : g.inputs) {
    const Tensor& t = vals[size_t(v)];
    cf->inputs_[size_t(v)] = alias(t);
    cf->versions_[size_t(v)] = t.storage()->version.load();
    if (!p.needs_grad[size_t(v)]) continue;
    n->inputs.push_back(autograd::Input{autograd::gradient_edge(t), int(n->inputs.size()), 0,
                                        Meta{t.sizes(), t.dtype(), t.device()}});
    cf->ins_.push_back(v);
  }
  for (int32_t v : p.saved) {
    const Tensor& t = vals[size_t(v)];
    if (!t.defined() || t.is_lazy())
      fail(cat("internal: the forward graph ", j->opts.name, " did not keep value %", v, ", which its backward reads"));
    n->saved_out.push_back(autograd::Saved{alias(t), t.storage()->version.load()});
    cf->saved_ids_.push_back(v);
  }
  for (const auto& [v, t] : held) {
    if (!p.needs_grad[size_t(v)]) continue;
    autograd::AutogradMeta& m = autograd::ensure_meta(t);
    m.grad_fn = n;
    m.output_nr = int(cf->outs_.size());
    m.requires_grad = false;
    // (a view of a value Lua does not hold: Recorder::note_view left it without a base)
    if (g.values[size_t(v)].views >= 0 && !m.base.defined()) m.creation = autograd::ViewCreation::Compiled;
    cf->outs_.push_back(v);
    const ValueMeta& vm = g.values[size_t(v)].meta;
    n->outs.push_back(Meta{concrete(vm.sizes), vm.dtype, vm.device});
  }
  if (cf->outs_.empty()) return;  // nothing Lua holds needs a gradient
  n->seq = autograd::next_seq();
  n->saves = true;
  n->custom = cf;
}

}  // namespace cr::graph
