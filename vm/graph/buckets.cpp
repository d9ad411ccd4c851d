// DDP's gradient buckets inside compiled backward graphs (buckets.hpp).
#include "vm/graph/buckets.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_set>

#include "vm/autograd/engine.hpp"
#include "vm/autograd/meta.hpp"

namespace cr::graph {

namespace {

struct BucketSet {
  std::vector<std::vector<cr_tensor*>> leaves;
  bool sync = true;
  std::unordered_set<cr_tensor*> reduced;
};

std::mutex g_mutex;
std::map<int32_t, BucketSet> g_sets;
int32_t g_next = 1;

// The leaf a node input's gradient accumulates into, alone and into an empty .grad; else null.
cr_tensor* sole_leaf(const autograd::Input& in) {
  const autograd::Node* acc = in.edge.fn.get();
  if (!acc || !acc->accumulates() || !autograd::sole_accumulation(*acc)) return nullptr;
  const autograd::AutogradMeta* m = autograd::meta_of(acc->leaf.get());
  return m && !m->grad.defined() ? acc->leaf.get() : nullptr;
}

ValueMeta contiguous_meta(const Shape& sizes, DType dtype, Device device) {
  return ValueMeta{constant_shape(sizes), contiguous_strides(sizes), 0, dtype, device};
}

}  // namespace

int32_t buckets_register(const std::vector<std::vector<cr_tensor*>>& leaves) {
  std::lock_guard lock(g_mutex);
  g_sets[g_next].leaves = leaves;
  return g_next++;
}

void buckets_set_sync(int32_t id, bool sync) {
  std::lock_guard lock(g_mutex);
  if (auto it = g_sets.find(id); it != g_sets.end()) it->second.sync = sync;
}

bool buckets_take_reduced(int32_t id, cr_tensor* leaf) {
  std::lock_guard lock(g_mutex);
  auto it = g_sets.find(id);
  return it != g_sets.end() && it->second.reduced.erase(leaf) > 0;
}

void buckets_release(int32_t id) {
  std::lock_guard lock(g_mutex);
  g_sets.erase(id);
}

BucketPlan plan_buckets(const std::vector<autograd::Input>& inputs) {
  BucketPlan plan;
  std::lock_guard lock(g_mutex);
  if (g_sets.empty()) return plan;
  std::map<cr_tensor*, int32_t> position;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (cr_tensor* leaf = sole_leaf(inputs[k])) position.emplace(leaf, int32_t(k));
  for (const auto& [id, set] : g_sets) {
    if (!set.sync) continue;
    for (const auto& bucket : set.leaves) {
      std::vector<int32_t> b;
      for (cr_tensor* leaf : bucket)
        if (auto it = position.find(leaf); it != position.end()) b.push_back(it->second);
      if (!b.empty() && b.size() == bucket.size()) plan.push_back(std::move(b));
    }
  }
  return plan;
}

BucketPlan place_buckets(Traced& t, const BucketPlan& plan) {
  Graph& g = *t.graph;
  BucketPlan placed;
  std::vector<std::vector<size_t>> after(g.nodes.size());  // per node: the buckets that start after it
  for (const auto& b : plan) {
    int32_t last = -1;
    bool whole = true;
    for (int32_t k : b) {
      const int32_t v = t.grad_out.at(size_t(k));
      whole = whole && v >= 0;
      if (v >= 0) last = std::max(last, g.values[size_t(v)].node);
    }
    if (!whole || last < 0) continue;
    after[size_t(last)].push_back(placed.size());
    placed.push_back(b);
  }
  if (placed.empty()) return placed;
  const Registry& reg = Registry::get();
  const int32_t start_op = reg.index_of("_dist_bucket_start"), wait_op = reg.index_of("_dist_bucket_wait");
  const size_t old_values = g.values.size();
  std::vector<Node> nodes;
  std::vector<int32_t> moved(g.nodes.size());
  std::vector<int32_t> flats(placed.size());
  auto grads_arg = [&](const std::vector<int32_t>& b) {
    Arg a;
    a.tag = kTensors;
    for (int32_t k : b) a.values.push_back(t.grad_out[size_t(k)]);
    return a;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    moved[i] = int32_t(nodes.size());
    nodes.push_back(std::move(g.nodes[i]));
    for (size_t p : after[i]) {  // the bucket's reduction starts as soon as its last gradient exists
      Node n;
      n.op = start_op;
      n.where = cat("DistributedDataParallel bucket #", p + 1);
      n.args = {grads_arg(placed[p]), Arg{kString}};
      n.args[1].str = "avg";
      const ValueMeta& first = g.values[size_t(t.grad_out[size_t(placed[p][0])])].meta;
      int64_t numel = 0;
      for (int32_t k : placed[p]) numel += shape_numel(concrete(g.values[size_t(t.grad_out[size_t(k)])].meta.sizes));
      flats[p] = g.add_value(int32_t(nodes.size()), contiguous_meta({numel}, first.dtype, first.device));
      n.outs.push_back(flats[p]);
      nodes.push_back(std::move(n));
    }
  }
  for (size_t v = 0; v < old_values; ++v)
    if (g.values[v].node >= 0) g.values[v].node = moved[size_t(g.values[v].node)];
  for (size_t p = 0; p < placed.size(); ++p) {  // the waits where the gradients leave the graph
    Node n;
    n.op = wait_op;
    n.where = cat("DistributedDataParallel bucket #", p + 1);
    n.args = {Arg::tensor(flats[p])};  // (not the gradients: they die once packed)
    int64_t pos = 0;
    for (int32_t k : placed[p]) {
      const ValueMeta& m = g.values[size_t(t.grad_out[size_t(k)])].meta;
      ValueMeta slot = contiguous_meta(concrete(m.sizes), m.dtype, m.device);
      slot.offset = pos;  // (views of the flat buffer)
      pos += shape_numel(concrete(m.sizes));
      n.outs.push_back(g.add_value(int32_t(nodes.size()), slot));
    }
    for (size_t e = 0; e < placed[p].size(); ++e) t.grad_out[size_t(placed[p][e])] = n.outs[e];
    nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
  g.outputs.clear();
  for (int32_t v : t.grad_out)
    if (v >= 0) g.outputs.push_back(v);
  return placed;
}

void mark_reduced(const std::vector<autograd::Input>& inputs, const BucketPlan& placed) {
  std::lock_guard lock(g_mutex);
  for (auto& [id, set] : g_sets)
    for (const auto& b : placed)
      for (int32_t k : b) set.reduced.insert(inputs.at(size_t(k)).edge.fn->leaf.get());
}

}  // namespace cr::graph
