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
  // inputs the graph wrote, by vid, with their versions after the run: lost values replayed
  // from the state the run left (slots with `lost`) are valid while these are unchanged
  HostVector<std::pair<int32_t, uint32_t>> written;
  Generator rng;  // as the run began: a recomputation that draws starts from it
  std::weak_ptr<Leaf> leaf;  // the segment variant the values came from
  // One slot per waiting tensor, reserved once (the tensors point at their slots). The record
  // keeps itself alive (`self`) until the last of them leaves.
  HostVector<LazyInfo> slots;
  size_t waiting = 0;
  std::shared_ptr<ExecRecord> self;
  Context* ctx = nullptr;  // the VM that ran it
  ~ExecRecord() {
    for (auto& [t, v] : versions) {
      Storage* st = t.storage();
      st->pending_reads.fetch_sub(1);
      if (st->reader == ctx) st->reader = nullptr;
    }
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

// The nodes that compute value `vid` again after the graph ran, from its inputs as the run left
// them: writes to the graph's own storages run again (into fresh ones, in order, before each
// reader); a write to an input's storage is not repeated (the input holds its result), so every
// read of that storage must come after the graph's last write to it. A random op runs again with
// every draw before it, from the generator as the run began (`draws`). Empty `why`: it can.
struct Replay {
  Graph g;
  bool draws = false;
  std::string why;
};
Replay replay_graph(const Graph& g, int32_t vid, bool build = true) {
  const size_t n_nodes = g.nodes.size();
  auto input_root = [&](int32_t r) { return g.nodes[size_t(g.values[size_t(r)].node)].kind == NodeKind::Input; };
  std::vector<std::vector<int32_t>> writers(g.values.size());  // by storage root, in node order
  for (size_t i = 0; i < n_nodes; ++i)
    each_written_root(g, g.nodes[i], [&](int32_t r) { writers[size_t(r)].push_back(int32_t(i)); });
  Replay out;
  // keep: 1 runs again, 2 a write to an input's storage whose result is the input itself
  std::vector<char> keep(n_nodes), live(g.values.size()), force(n_nodes);
  std::vector<int32_t> alias(g.values.size(), -1);  // a kept-2 write's result: the input's value
  live[size_t(vid)] = 1;
  for (bool grew = true; grew && out.why.empty();) {
    grew = false;
    for (size_t i = n_nodes; i-- > 0 && out.why.empty();) {
      const Node& n = g.nodes[i];
      // (a node whose output is an earlier value, such as contiguous() of a contiguous tensor,
      // computes nothing: that value's liveness does not make it run)
      bool k = force[i];
      for (int32_t o : n.outs) k = k || (live[size_t(o)] && g.values[size_t(o)].node == int32_t(i));
      if (keep[i] || !k) continue;
      keep[i] = 1;
      grew = true;
      if (n.kind != NodeKind::Op) continue;
      if (n.def().flags & kCollective) out.why = cat("it depends on a collective (", n.def().name, ")");
      if (n.random() && !out.draws) {  // (the generator's offsets: every draw before runs too)
        out.draws = true;
        for (size_t j = 0; j < i; ++j) force[j] = force[j] || g.nodes[j].random();
      }
      bool on_input = false;
      each_written_root(g, n, [&](int32_t r) { on_input = on_input || input_root(r); });
      if (on_input) {
        if (!n.inplace() || n.def().writes) out.why = cat(n.def().name, " writes an input's storage");
        keep[i] = 2;
        alias[size_t(n.outs[0])] = n.args[0].value;
        live[size_t(n.args[0].value)] = 1;
        continue;
      }
      const bool view = is_view_node(g, n);
      auto read = [&](int32_t a) {
        live[size_t(a)] = 1;
        const int32_t r = storage_root(g, a);
        const std::vector<int32_t>& w = writers[size_t(r)];
        if (view || w.empty()) return;
        if (!input_root(r))
          for (int32_t j : w) force[size_t(j)] = force[size_t(j)] || j < int32_t(i);
        else if (w.back() > int32_t(i))
          out.why = cat(n.def().name, " reads an input before the graph writes it");
      };
      for (const Arg& a : n.args) {
        if (a.tag == kTensor) read(a.value);
        for (int32_t v : a.values) read(v);
      }
    }
  }
  if (!out.why.empty() || !build) return out;
  out.g = g;
  for (size_t v = 0; v < alias.size(); ++v) {
    if (alias[v] < 0) continue;
    int32_t to = alias[v];
    while (alias[size_t(to)] >= 0) to = alias[size_t(to)];
    substitute(out.g, int32_t(v), to, false);
  }
  out.g.outputs = {vid};
  out.g.transient = true;  // (the caller reads only vid: the run frees each value after its last reader)
  for (size_t i = 0; i < n_nodes; ++i) keep[i] = keep[i] == 1 || g.nodes[i].kind == NodeKind::Input;
  keep_nodes(out.g, keep);
  return out;
}

// An input the record's graph wrote that has been written again since its run (else undefined).
Tensor written_since(const ExecRecord& r) {
  for (auto [in, version] : r.written)
    if (r.vals[size_t(in)].storage()->version.load() != version) return r.vals[size_t(in)];
  return Tensor();
}

[[noreturn]] void fail_modified(const Tensor& input) {
  fail(cat("a tensor computed inside a compiled function was not kept by its graph, and an input it depends "
           "on (", input.describe(), ") was modified in place since: its value is lost. Use the tensor "
           "before modifying its inputs, or clone it inside the compiled function"));
}

void recompute(Context& ctx, cr_tensor* t, ExecRecord& r, int32_t vid) {
  for (auto& [tensor, version] : r.versions)
    if (tensor.storage()->version.load() != version) fail_modified(tensor);
  Replay p = replay_graph(*r.raw, vid);
  if (!p.why.empty()) fail(cat("internal: value %", vid, " cannot be computed again: ", p.why));
  std::vector<Tensor> vals(r.vals.begin(), r.vals.end());
  const Generator now = ctx.gen;
  if (p.draws) ctx.gen.seed = r.rng.seed, ctx.gen.offset = r.rng.offset;
  try {
    run_eager(p.g, ctx, vals, r.numbers.empty() ? nullptr : r.numbers.data());
  } catch (...) {
    ctx.gen = now;
    throw;
  }
  ctx.gen = now;
  Tensor::attach(t, vals[size_t(vid)]);
}

// A lost value's slot whose inputs are written again: a tracker that raises when read.
void drop_slot(cr_tensor* t) {
  auto* info = static_cast<LazyInfo*>(t->_lazy);
  std::weak_ptr<Leaf> leaf = info->rec->leaf;
  const int32_t vid = info->vid;
  t->_lazy = nullptr;
  leave(*info);
  t->_lazy = new LazyInfo{leaf, vid, nullptr, nullptr, true};
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
    // (lost ones, mostly garbage Lua has not collected yet, are not computed for a write: they
    // raise when read from now on, as a value the graph could not keep)
    for (cr_tensor* t : ts) {
      auto* slot = static_cast<LazyInfo*>(t->_lazy);
      if (slot && slot->rec == r.get() && slot->lost) drop_slot(t);
      else ensure_real(ctx_, t);
    }
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
    if (info && info->lost && !info->rec) {
      std::shared_ptr<Leaf> leaf = info->leaf.lock();
      const int32_t vid = info->vid;
      release_lazy(t);
      if (leaf) note_escape(*leaf, vid, "used");
      fail(cat("a tensor computed inside a compiled function (value %", vid, " of the segment ending at ",
               leaf ? leaf->where : "?", ") was not kept by its graph: Lua did not reach it after the function's "
               "first run, and it cannot be recomputed (it depends on a collective, or on an input written in "
               "place after the value read it). The function recompiles to keep it from its next call on; return "
               "it from the function to read it now"));
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
    if (const Tensor input = info->lost ? written_since(*r) : Tensor(); input.defined()) {
      // (its replay would read the inputs' new values)
      std::shared_ptr<Leaf> leaf = r->leaf.lock();
      drop_slot(t);
      if (leaf) note_escape(*leaf, vid, "used");
      fail_modified(input);
    }
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

bool replayable(const Graph& g, int32_t vid) { return replay_graph(g, vid, false).why.empty(); }

void note_escape(Leaf& leaf, int32_t vid, const char* how) {
  if (leaf.escaping.size() <= size_t(vid)) leaf.escaping.resize(size_t(vid) + 1);
  if (leaf.escaping[size_t(vid)]) return;
  leaf.escaping[size_t(vid)] = 1;
  if (leaf.compiled && !contains(leaf.compiled->outputs, vid))
    leaf.recompile_reason = cat("value %", vid, " of the segment ending at ", leaf.where, " was ", how,
                                " after the graph ran");
}

std::shared_ptr<ExecRecord> wait_on_record(Context& ctx, Leaf& leaf, const std::shared_ptr<Leaf>& owner, const Segment& s,
                                           const std::vector<std::pair<cr_tensor*, int32_t>>& waiting) {
  auto rec = std::allocate_shared<ExecRecord>(HostAllocator<ExecRecord>());
  rec->ctx = &ctx;
  if (!leaf.raw) leaf.raw = guards::build_graph(leaf);
  // dynamic: the graph with this call's sizes and integers
  rec->raw = !leaf.dynamic ? leaf.raw : s.instance_raw ? s.instance_raw : instance_of(*leaf.raw, s);
  rec->leaf = owner;
  rec->numbers.assign(s.numbers.begin(), s.numbers.end());
  rec->rng = s.rng;
  rec->vals.resize(s.vals.size());
  // Pure waiting values read no storage the graph writes, so the next run's writes there need
  // not compute them first; lost ones read those storages as the run left them (`written`).
  if (leaf.written_inputs.empty()) {
    const std::vector<char> written = written_roots(*leaf.raw);
    leaf.written_inputs.assign(leaf.raw->values.size() + 1, 0);  // (+1: never empty once computed)
    for (int32_t in : leaf.raw->inputs) leaf.written_inputs[size_t(in)] = written[size_t(storage_root(*leaf.raw, in))];
  }
  auto lost = [&](int32_t vid) { return leaf.lost.size() > size_t(vid) && leaf.lost[size_t(vid)]; };
  bool any_lost = false;
  for (const auto& w : waiting) any_lost = any_lost || lost(w.second);
  for (int32_t in : leaf.raw->inputs) {
    Storage* st = s.vals[size_t(in)].storage();
    rec->vals[size_t(in)] = s.vals[size_t(in)];
    if (leaf.written_inputs[size_t(in)]) {
      if (!any_lost) continue;
      rec->written.emplace_back(in, st->version.load());
    } else {
      rec->versions.emplace_back(s.vals[size_t(in)], st->version.load());
      st->pending_reads.fetch_add(1);
      st->reader = &ctx;
    }
    rec->external = rec->external || st->free_fn != nullptr;
  }
  rec->slots.resize(waiting.size());  // never resized again: the tensors point into it
  for (size_t i = 0; i < waiting.size(); ++i) {
    LazyInfo& slot = rec->slots[i];
    slot.vid = waiting[i].second;
    slot.rec = rec.get();
    slot.t = waiting[i].first;
    slot.lost = lost(slot.vid);
    slot.t->_lazy = &slot;
  }
  rec->waiting = waiting.size();
  rec->self = rec;
  return rec;
}

bool reads_host_memory(const ExecRecord& r) { return r.external; }

}  // namespace cr::graph
