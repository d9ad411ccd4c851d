// Lazy tensors after their segment ran: values the graph did not keep are recomputed from a
// record of the segment's inputs when first read (or before one of those inputs is written in
// place); values Lua may still use carry a tracker that marks them as escaping when used.
#include <algorithm>
#include <memory>

#include "vm/alloc.hpp"
#include "vm/graph/segment.hpp"

namespace cr::graph {

using guards::Leaf;

// How a value a segment did not produce can still be computed: the segment's recorded graph and
// its inputs, with the storage versions they had (an in-place write since then makes it
// impossible, and is reported rather than computed wrongly).
// (Records live until Lua collects their tensors: host_alloc's memory, see HostAllocator.)
template <class T> using HostVector = std::vector<T, HostAllocator<T>>;
struct ExecRecord {
  bool external = false;     // an input wraps host memory (from_blob): writes to it are unseen
  std::shared_ptr<Graph> raw;
  HostVector<Tensor> vals;  // inputs, by vid
  HostVector<double> numbers;  // the call's numbers that vary (Segment::numbers)
  HostVector<std::pair<Tensor, uint32_t>> versions;
  std::weak_ptr<Leaf> leaf;  // the segment variant the values came from
  // One slot per waiting tensor, reserved once (the tensors point at their slots). The record
  // keeps itself alive (`self`) until the last of them leaves.
  HostVector<LazyInfo> slots;
  size_t waiting = 0;
  std::shared_ptr<ExecRecord> self;
  ~ExecRecord() {
    for (auto& [t, v] : versions) t.storage()->pending_reads.fetch_sub(1);
  }
};


namespace {

// A tensor stops waiting on its record (freed, or computed). The last one to leave frees the
// record, slots included: nothing may touch `slot` after this.
void leave(LazyInfo& slot) {
  ExecRecord* r = slot.rec;
  slot.t = nullptr;
  if (--r->waiting == 0) std::shared_ptr<ExecRecord> last = std::move(r->self);
}


bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Only the ancestors of `vid`: what recomputing one value needs.
Graph prune_for(const Graph& g, int32_t vid) {
  Graph p = g;
  p.outputs = {vid};
  eliminate_dead_code(p, false);
  return p;
}

void recompute(Context& ctx, cr_tensor* t, ExecRecord& r, int32_t vid) {
  for (auto& [tensor, version] : r.versions)
    if (tensor.storage()->version.load() != version)
      fail(cat("a tensor computed inside a compiled function was not kept by its graph, and an input it depends "
               "on (", tensor.describe(), ") was modified in place since: its value is lost. Use the tensor "
               "before modifying its inputs, or clone it inside the compiled function"));
  Graph g = prune_for(*r.raw, vid);
  for (const Node& n : g.nodes)  // compile() keeps every value a write reaches: none is left
    if (n.inplace()) fail(cat("internal: recomputing value %", vid, " would repeat an in-place write"));
  std::vector<Tensor> vals(r.vals.begin(), r.vals.end());
  run_eager(g, ctx, vals, r.numbers.empty() ? nullptr : r.numbers.data());
  Tensor::attach(t, vals[size_t(vid)]);
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
    std::vector<cr_tensor*> ts;
    for (const LazyInfo& slot : r->slots)
      if (slot.t) ts.push_back(slot.t);
    for (cr_tensor* t : ts) ensure_real(ctx_, t);
  }
}

void release_lazy(cr_tensor* t) {
  auto* info = static_cast<LazyInfo*>(t->_lazy);
  t->_lazy = nullptr;
  if (info->rec) leave(*info);
  else delete info;
}

void before_write(Context& ctx, Storage* s) {
  if (s->pending_reads.load() > 0) ctx.recorder->before_write(s);
}

void ensure_real(Context& ctx, cr_tensor* t) {
  auto* info = static_cast<LazyInfo*>(t->_lazy);
  if (!t->_storage) {
    if (info && info->lost) {
      std::shared_ptr<Leaf> leaf = info->leaf.lock();
      const int32_t vid = info->vid;
      release_lazy(t);
      if (leaf) note_escape(*leaf, vid, "used");
      fail(cat("a tensor computed inside a compiled function (value %", vid, " of the segment ending at ",
               leaf ? leaf->where : "?", ") was not kept by its graph: Lua did not reach it after the function's "
               "first run, and it depends on an in-place write or a random op, so it cannot be recomputed. The "
               "function recompiles to keep it from its next call on; return it from the function to read it now"));
    }
    if (!info || !info->rec) {
      Recorder* rec = ctx.recorder.get();
      if (rec && rec->active()) {  // a lazy tensor of the running segment, read by C++ code
        rec->graph_break("tensor data read by the runtime", "?", t);
        if (t->_storage) return;
      }
      fail("this tensor has no value: the compiled function that made it stopped with an error");
    }
    // detached first: the recomputation may write storages whose pending readers include t
    ExecRecord* r = info->rec;
    const int32_t vid = info->vid;
    std::shared_ptr<ExecRecord> keep = r->self;  // alive through the recomputation
    t->_lazy = nullptr;
    leave(*info);
    recompute(ctx, t, *r, vid);
    if (auto leaf = r->leaf.lock()) note_escape(*leaf, vid, "used");
    return;
  }
  if (info) {  // a tracker (a value computed by recompute() has none)
    if (auto leaf = info->leaf.lock()) note_escape(*leaf, info->vid, "used");
    release_lazy(t);
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

std::shared_ptr<ExecRecord> wait_on_record(Leaf& leaf, const std::shared_ptr<Leaf>& owner, const Segment& s,
                                           const std::vector<std::pair<cr_tensor*, int32_t>>& waiting) {
  auto rec = std::allocate_shared<ExecRecord>(HostAllocator<ExecRecord>());
  if (!leaf.raw) leaf.raw = guards::build_graph(leaf);
  // dynamic: the graph with this call's sizes and integers
  rec->raw = !leaf.dynamic ? leaf.raw : s.instance_raw ? s.instance_raw : instance_of(*leaf.raw, s);
  rec->leaf = owner;
  rec->numbers.assign(s.numbers.begin(), s.numbers.end());
  rec->vals.resize(s.vals.size());
  // The waiting values are pure (compile() keeps or loses the others): they read no storage the
  // graph writes, so the next run's writes there need not compute them first.
  if (leaf.written_inputs.empty()) {
    const std::vector<char> written = written_roots(*leaf.raw);
    leaf.written_inputs.assign(leaf.raw->values.size() + 1, 0);  // (+1: never empty once computed)
    for (int32_t in : leaf.raw->inputs) leaf.written_inputs[size_t(in)] = written[size_t(storage_root(*leaf.raw, in))];
  }
  for (int32_t in : leaf.raw->inputs) {
    Storage* st = s.vals[size_t(in)].storage();
    rec->vals[size_t(in)] = s.vals[size_t(in)];
    if (leaf.written_inputs[size_t(in)]) continue;
    rec->versions.emplace_back(s.vals[size_t(in)], st->version.load());
    st->pending_reads.fetch_add(1);
    rec->external = rec->external || st->free_fn != nullptr;
  }
  rec->slots.resize(waiting.size());  // never resized again: the tensors point into it
  for (size_t i = 0; i < waiting.size(); ++i) {
    LazyInfo& slot = rec->slots[i];
    slot.vid = waiting[i].second;
    slot.rec = rec.get();
    slot.t = waiting[i].first;
    slot.t->_lazy = &slot;
  }
  rec->waiting = waiting.size();
  rec->self = rec;
  return rec;
}

bool reads_host_memory(const ExecRecord& r) { return r.external; }

}  // namespace cr::graph
