// reduce-overhead (stdlib/replay.lua has the purity rules): a plan maps the inputs of a
// function's one compiled segment to the call's arguments and upvalue tensors; a replay checks
// the plan's guards and runs the graph without Lua.
#include <algorithm>

#include "vm/autograd/autocast.hpp"
#include "vm/autograd/grad_mode.hpp"
#include "vm/autograd/meta.hpp"
#include "vm/graph/segment.hpp"

namespace cr::graph {

using guards::Leaf;

namespace {

// The thread's modes a replay must find as planned: Lua code that reads them (is_grad_enabled,
// an autocast region around the call) is not run again, and autocast's casts are ops of the graph.
uint32_t call_modes() {
  const autograd::AutocastState& a = autograd::autocast;
  uint32_t m = uint32_t(autograd::grad_enabled) | uint32_t(autograd::inference_mode) << 1 |
               uint32_t(autograd::inference_mode && autograd::inference_grad_mode) << 2;
  for (int d = 0; d < 2; ++d)
    if (a.enabled && a.dev[d].enabled) m |= (1u | uint32_t(a.dev[d].dtype) << 1) << (8 + 8 * d);
  return m;
}

// What Lua reads of t's autograd state without an op: requires_grad, is_leaf and grad_fn ==
// nil, .grad == nil, retains_grad, is_inference. (Leaf-ness as is_leaf says, without making a
// view's grad_fn as grad_fn_of may: views.cpp.)
uint8_t grad_state(const cr_tensor* t) {
  uint8_t s = uint8_t(t->_flags & (autograd::kInferenceTensor | autograd::kLazyGrad));
  const autograd::AutogradMeta* m = autograd::meta_of(t);
  if (!m) return s;
  const bool made = m->grad_fn || (m->base.defined() && autograd::requires_grad(m->base.get()));
  return uint8_t(s | m->requires_grad << 2 | made << 3 | m->grad.defined() << 4 | m->retains_grad << 5);
}

// The candidates of p.distinct, `moved` of which are not at their planned address, are still
// pairwise distinct (the others are): a few moved ones are compared with all, many are sorted.
bool still_distinct(cr_tensor* const* cands, const guards::Plan& p, size_t moved) {
  const std::vector<int32_t>& d = p.distinct;
  const size_t n = d.size();
  if (moved <= 8) {
    for (size_t a = 0; a < n; ++a) {
      if (cands[d[a]] == p.planned[a]) continue;
      for (size_t b = 0; b < n; ++b)
        if (b != a && cands[d[b]] == cands[d[a]]) return false;
    }
    return true;
  }
  static thread_local std::vector<const cr_tensor*> v;
  v.clear();
  for (int32_t k : d) v.push_back(cands[k]);
  std::sort(v.begin(), v.end());
  return std::adjacent_find(v.begin(), v.end()) == v.end();
}

}  // namespace

// The one-segment call that just ended, for a reduce-overhead plan.
void Recorder::remember_call(Leaf& leaf, const std::vector<cr_tensor*>& rets) {
  Segment& s = *seg_;
  fn_->last_leaf.reset();
  for (auto& e : leaf.last->ends)
    if (e.get() == &leaf) fn_->last_leaf = e;
  fn_->last_inputs.clear();
  for (size_t v = 0; v < s.vals.size(); ++v)
    if (s.is_input[v]) fn_->last_inputs.push_back(s.vals[v].get());
  fn_->last_rets.clear();
  for (cr_tensor* t : rets) fn_->last_rets.push_back(t->_gen == s.gen ? t->_vid : -1);
  fn_->last_numbers = s.numbers;
}

// The graph a replay runs: the compiled one with only the returned values kept, so that the
// intermediates fuse (the compiled graph keeps every value Lua might still read). Dynamic and
// training segments replay their compiled graph.
std::shared_ptr<Graph> Recorder::plan_graph(Leaf& leaf, const guards::Options& o, const std::vector<int32_t>& rets) {
  if (leaf.dynamic || leaf.joint || !leaf.raw) return leaf.compiled;
  if (leaf.plan_graph && leaf.plan_rets == rets) return leaf.plan_graph;
  auto g = std::make_shared<Graph>(*leaf.raw);
  g->name = cat(o.name, " replay of the segment ending at ", leaf.where, " #", leaf.variant);
  g->outputs.clear();
  for (int32_t r : rets)
    if (r >= 0 && g->nodes[size_t(g->values[size_t(r)].node)].kind != NodeKind::Input) g->outputs.push_back(r);
  std::shared_ptr<Graph> built = build(leaf, g, o, false);  // (the segment's graph, counted once)
  leaf.plan_graph = built ? built : leaf.compiled;
  leaf.plan_rets = rets;
  return leaf.plan_graph;
}

int Recorder::plan(int32_t id, cr_tensor* const* cands, int n, int nargs) {
  guards::Function& f = function(id);
  f.plan.reset();
  if (f.yields) fail("it yields (coroutine.yield), which a replay would not");
  if (report.size() != 1 || report[0].reason != "return") {
    const auto syncs = std::count_if(report.begin(), report.end(), [](const SegmentReport& r) { return r.end == 'S'; });
    fail(syncs ? cat("the call has ", syncs, " sync point(s) (data-dependent sizes)")
               : cat("the call has ", report.size() - 1, " graph break(s)"));
  }
  auto leaf = f.last_leaf;
  if (!leaf) fail("the call recorded no tensor op");
  if (leaf->stepped) fail("its graph holds a backward(), whose .grad updates Lua's side of the call makes");
  if (!leaf->compiled || !leaf->recompile_reason.empty()) return 0;
  auto p = std::make_unique<guards::Plan>();
  p->leaf = leaf;
  p->graph = plan_graph(*leaf, f.opts, f.last_rets);
  p->ncands = n;
  p->nargs = nargs;
  p->modes = call_modes();
  if (p->graph->inputs.size() != f.last_inputs.size()) return 0;
  for (size_t i = 0; i < f.last_inputs.size(); ++i) {
    int k = -1;
    for (int j = 0; j < n && k < 0; ++j)
      if (cands[j] == f.last_inputs[i]) k = j;
    if (k < 0) fail(cat("input ", i + 1, " of its graph is neither an argument nor reachable from its Lua state"));
    p->source.push_back(k);
  }
  for (int j = 0; j < n; ++j) {
    if (!cands[j]) continue;  // a value argument
    int k = 0;
    while (k < j && cands[k] != cands[j]) ++k;
    if (k < j) {
      p->same.emplace_back(j, k);
    } else {
      p->distinct.push_back(j);
      p->planned.push_back(cands[j]);
      p->grad.push_back(grad_state(cands[j]));
    }
    bool input = false;
    for (int32_t src : p->source) input = input || cands[j] == cands[src];
    if (!input) {
      const cr_tensor* t = cands[j];
      ValueMeta m{constant_shape(Shape(t->_sizes, t->_sizes + t->_ndim)), Shape(t->_strides, t->_strides + t->_ndim), t->_offset,
                  DType(t->_dtype), Device{t->_dev_type, t->_dev_index}};
      p->others.push_back({j, std::move(m)});
    }
  }
  for (int32_t r : f.last_rets) {
    if (r < 0) fail("it returns a tensor its graph does not make");
    p->rets.push_back(r);
  }
  p->numbers = f.last_numbers;
  f.plan = std::move(p);
  return 1;
}

bool Recorder::has_plan(int32_t id) { return function(id).plan != nullptr; }

// t has the metadata m was recorded with (concrete sizes).
static bool same_meta(const cr_tensor* t, const ValueMeta& m) {
  if (t->_dtype != int8_t(m.dtype) || t->_dev_type != m.device.type || t->_dev_index != m.device.index ||
      t->_ndim != int32_t(m.sizes.size()) || t->_offset != m.offset)
    return false;
  for (int d = 0; d < t->_ndim; ++d)
    if (t->_sizes[d] != m.sizes[size_t(d)].value || t->_strides[d] != m.strides[size_t(d)]) return false;
  return true;
}

bool Recorder::replay(int32_t id, cr_tensor* const* cands, int n, std::vector<Tensor>& rets) {
  guards::Function& f = function(id);
  if (!f.plan || fn_) return false;
  if (f.trains && autograd::grad_enabled) return false;  // (a replay has no autograd: the call is captured)
  const guards::Plan& p = *f.plan;
  const Graph& g = *p.graph;
  if (n != p.ncands || call_modes() != p.modes) return false;
  size_t moved = 0;
  for (size_t a = 0; a < p.distinct.size(); ++a) {
    const cr_tensor* t = cands[p.distinct[a]];
    moved += t != p.planned[a];
    if (grad_state(t) != p.grad[a]) return false;
  }
  for (auto [j, k] : p.same)
    if (cands[j] != cands[k]) return false;
  if (moved && !still_distinct(cands, p, moved)) return false;
  for (const guards::Plan::Other& o : p.others)
    if (!same_meta(cands[o.cand], o.meta)) return false;
  std::vector<Tensor> vals(g.values.size());
  for (size_t i = 0; i < p.source.size(); ++i) {
    cr_tensor* t = cands[p.source[i]];
    if (autograd::grad_enabled && autograd::requires_grad(t)) return false;  // (the call trains)
    if (!t->_storage || t->_lazy) ensure_real(ctx_, t);
    int32_t vid = g.inputs[i];
    const Value& v = g.values[size_t(vid)];
    if (!same_meta(t, v.meta)) return false;
    int32_t alias = -1;  // the aliasing between inputs must be the recorded one
    for (size_t j = 0; j < i && alias < 0; ++j)
      if (vals[size_t(g.inputs[j])].get()->_storage == t->_storage) alias = g.inputs[j];
    if (alias != v.alias_of) return false;
    vals[size_t(vid)] = Tensor(t, true);
  }
  double t0 = now_us();
  rets.clear();
  if (!replay_on_graph(*f.plan, vals, rets)) {
    execute(g, vals, p.numbers.empty() ? nullptr : p.numbers.data());
    for (int32_t r : p.rets) rets.push_back(vals[size_t(r)]);
  }
  vals.clear();  // the graph's temporaries die with its run
  stats.graph_run_us += now_us() - t0;
  ++stats.replays;
  return true;
}

}  // namespace cr::graph
