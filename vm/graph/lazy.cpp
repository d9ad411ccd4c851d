// Lazy tensors after their segment ran: values the graph did not keep are recomputed from a
// record of the segment's inputs when first read (or before one of those inputs is written in
// place); values Lua may still use carry a tracker that marks them as escaping when used.
#include <algorithm>
#include <memory>

#include "vm/graph/segment.hpp"

namespace cr::graph {

using guards::Leaf;

// How a value a segment did not produce can still be computed: the segment's recorded graph and
// its inputs, with the storage versions they had (an in-place write since then makes it
// impossible, and is reported rather than computed wrongly).
struct ExecRecord {
  bool external = false;     // an input wraps host memory (from_blob): writes to it are unseen
  std::shared_ptr<Graph> raw;
  std::vector<Tensor> vals;  // inputs, by vid
  std::vector<std::pair<Tensor, uint32_t>> versions;
  std::vector<cr_tensor*> pending;  // lazy tensors that still need it (not owned)
  ~ExecRecord() {
    for (auto& [t, v] : versions) t.storage()->pending_reads.fetch_sub(1);
  }
};


namespace {

// Removes t from its record's pending list: the last entry takes its place (a call's
// intermediates are freed one by one when Lua collects them; a search per release was quadratic).
void drop_pending(LazyInfo& info) {
  std::vector<cr_tensor*>& v = info.rec->pending;
  cr_tensor* last = v.back();
  v[info.pending_at] = last;
  static_cast<LazyInfo*>(last->_lazy)->pending_at = info.pending_at;
  v.pop_back();
}

void free_lazy(cr_tensor* t) {
  auto* info = static_cast<LazyInfo*>(t->_lazy);
  if (info->rec) drop_pending(*info);
  delete info;
  t->_lazy = nullptr;
}
const bool g_hook = (lazy_release_hook = free_lazy, true);

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Only the ancestors of `vid`: what recomputing one value needs.
Graph prune_for(const Graph& g, int32_t vid) {
  Graph p = g;
  p.outputs = {vid};
  eliminate_dead_code(p, false);
  return p;
}

void recompute(Context& ctx, cr_tensor* t, LazyInfo& info) {
  ExecRecord& r = *info.rec;
  for (auto& [tensor, version] : r.versions)
    if (tensor.storage()->version.load() != version)
      fail(cat("a tensor computed inside a compiled function was not kept by its graph, and an input it depends "
               "on (", tensor.describe(), ") was modified in place since: its value is lost. Use the tensor "
               "before modifying its inputs, or clone it inside the compiled function"));
  Graph g = prune_for(*r.raw, info.vid);
  for (const Node& n : g.nodes)  // compile() keeps every value a write reaches: none is left
    if (n.inplace()) fail(cat("internal: recomputing value %", info.vid, " would repeat an in-place write"));
  std::vector<Tensor> vals = r.vals;
  run_eager(g, ctx, vals);
  Tensor::attach(t, vals[size_t(info.vid)]);
}

}  // namespace

// An in-place write to `s` is about to happen: lazy tensors that would be recomputed from it get
// their values first.
void Recorder::before_write(Storage* st) {
  std::vector<std::shared_ptr<ExecRecord>> hit;
  std::erase_if(records_, [&](const std::weak_ptr<ExecRecord>& w) {
    auto r = w.lock();
    if (!r) return true;
    for (auto& [t, v] : r->versions)
      if (t.storage() == st) {
        hit.push_back(r);
        return true;
      }
    return false;
  });
  for (auto& r : hit) {
    std::vector<cr_tensor*> ts = r->pending;
    for (cr_tensor* t : ts) ensure_real(ctx_, t);
  }
}

void before_write(Context& ctx, Storage* s) {
  if (s->pending_reads.load() > 0) ctx.recorder->before_write(s);
}

void ensure_real(Context& ctx, cr_tensor* t) {
  auto* info = static_cast<LazyInfo*>(t->_lazy);
  if (!t->_storage) {
    if (!info || !info->rec) {
      Recorder* rec = ctx.recorder.get();
      if (rec && rec->active()) {  // a lazy tensor of the running segment, read by C++ code
        rec->graph_break("tensor data read by the runtime", "?", t);
        if (t->_storage) return;
      }
      fail("this tensor has no value: the compiled function that made it stopped with an error");
    }
    // detached first: the recomputation may write storages whose pending readers include t
    drop_pending(*info);
    std::unique_ptr<LazyInfo> own(info);
    t->_lazy = nullptr;
    recompute(ctx, t, *own);
    if (auto leaf = own->leaf.lock()) note_escape(*leaf, own->vid, "used");
    return;
  }
  if (info) {
    if (auto leaf = info->leaf.lock()) note_escape(*leaf, info->vid, "used");
    free_lazy(t);
  }
}

void note_escape(Leaf& leaf, int32_t vid, const char* how) {
  if (leaf.escaping.size() <= size_t(vid)) leaf.escaping.resize(size_t(vid) + 1);
  if (leaf.escaping[size_t(vid)]) return;
  leaf.escaping[size_t(vid)] = 1;
  if (leaf.compiled && !contains(leaf.compiled->outputs, vid))
    leaf.recompile_reason = cat("value %", vid, " of the segment ending at ", leaf.where, " was ", how,
                                " after the graph ran");
}

std::shared_ptr<ExecRecord> new_exec_record(Leaf& leaf, const Segment& s) {
  auto rec = std::make_shared<ExecRecord>();
  if (!leaf.raw) leaf.raw = guards::build_graph(leaf);
  // dynamic: the graph with this call's sizes and integers
  rec->raw = !leaf.dynamic ? leaf.raw : s.instance_raw ? s.instance_raw : instance_of(*leaf.raw, s);
  rec->vals.resize(s.vals.size());
  for (int32_t in : leaf.raw->inputs) {
    Storage* st = s.vals[size_t(in)].storage();
    rec->vals[size_t(in)] = s.vals[size_t(in)];
    rec->versions.emplace_back(s.vals[size_t(in)], st->version.load());
    st->pending_reads.fetch_add(1);
    rec->external = rec->external || st->free_fn != nullptr;
  }
  return rec;
}

bool reads_host_memory(const ExecRecord& r) { return r.external; }

void add_pending(ExecRecord& r, cr_tensor* t) {
  static_cast<LazyInfo*>(t->_lazy)->pending_at = r.pending.size();
  r.pending.push_back(t);
}

}  // namespace cr::graph
