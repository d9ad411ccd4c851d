// The trace recorder: see recorder.hpp for the model. Read top-down: lazy-tensor bookkeeping,
// keys, op calls (replay / record), segment ends, compilation, the eager-side hooks.
#include "vm/graph/recorder.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>

#include "vm/kernels/loop.hpp"

namespace cr::graph {

static double now_us() {
  using namespace std::chrono;
  return double(duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count()) / 1e3;
}

using guards::EndKind;
using guards::Key;
using guards::Leaf;
using guards::TraceNode;

// ---- lazy tensors --------------------------------------------------------------------------

// How a value a segment did not produce can still be computed: the segment's recorded graph and
// its inputs, with the storage versions they had (an in-place write since then makes it
// impossible, and is reported rather than computed wrongly).
struct ExecRecord {
  std::shared_ptr<Graph> raw;
  std::vector<Tensor> vals;  // inputs, by vid
  std::vector<std::pair<Tensor, uint32_t>> versions;
  std::vector<cr_tensor*> pending;  // lazy tensors that still need it (not owned)
  ~ExecRecord() {
    for (auto& [t, v] : versions) t.storage()->pending_reads.fetch_sub(1);
  }
};

// cr_tensor::_lazy: the segment variant a value came from (to learn that it escaped) and, for a
// tensor still without storage, how to compute it.
struct LazyInfo {
  std::weak_ptr<Leaf> leaf;
  int32_t vid;
  std::shared_ptr<ExecRecord> rec;
};

namespace {

void free_lazy(cr_tensor* t) {
  auto* info = static_cast<LazyInfo*>(t->_lazy);
  if (info->rec) std::erase(info->rec->pending, t);
  delete info;
  t->_lazy = nullptr;
}
const bool g_hook = (lazy_release_hook = free_lazy, true);

std::atomic<uint64_t> g_generation{1};  // process-wide, so tensors shared by two VMs never clash

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The value `vid` escaped its segment: the next compilation must produce it.
void note_escape(Leaf& leaf, int32_t vid, const char* how) {
  if (leaf.escaping.size() <= size_t(vid)) leaf.escaping.resize(size_t(vid) + 1);
  if (leaf.escaping[size_t(vid)]) return;
  leaf.escaping[size_t(vid)] = 1;
  if (leaf.compiled && !contains(leaf.compiled->outputs, vid))
    leaf.recompile_reason = cat("value %", vid, " of the segment ending at ", leaf.where, " was ", how,
                                " after the graph ran");
}

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
    recompute(ctx, t, *info);
  }
  if (info) {
    if (auto leaf = info->leaf.lock()) note_escape(*leaf, info->vid, "used");
    free_lazy(t);
  }
}

}  // namespace cr::graph

namespace cr {
Context::Context() : recorder(std::make_unique<graph::Recorder>(*this)) { ffi.impl = this; }
Context::~Context() = default;
}  // namespace cr

namespace cr::graph {

// ---- the segment being captured --------------------------------------------------------------

struct Segment {
  uint64_t gen = 0;
  guards::Site* site = nullptr;
  TraceNode* pos = nullptr;       // the last event matched or recorded
  bool recording = false;         // new events run eagerly and are appended
  bool passthrough = false;       // the site is over cache_size_limit: ops just run
  bool pending = false;           // replayed events that have not run yet
  int ops = 0;
  int32_t next_vid = 0;
  std::vector<Tensor> vals;       // by vid: inputs, outputs (lazy while replaying)
  std::vector<int32_t> alias;     // by vid: for inputs, an earlier input sharing the storage
  std::vector<char> is_input;     // by vid
  Key key;                        // scratch: the key of the current call
  TraceNode* last_recorded = nullptr;

  void reset() {
    recording = passthrough = pending = false;
    ops = 0;
    next_vid = 0;
    vals.clear();
    alias.clear();
    is_input.clear();
    last_recorded = nullptr;
  }

  void set(int32_t vid, Tensor t) {
    if (vals.size() <= size_t(vid)) {
      vals.resize(size_t(vid) + 1);
      alias.resize(size_t(vid) + 1, -1);
      is_input.resize(size_t(vid) + 1);
    }
    vals[size_t(vid)] = std::move(t);
  }
};

Recorder::Recorder(Context& ctx) : ctx_(ctx) {
  if (const char* l = std::getenv("CRESCENT_LOGS")) logs.parse(l);
}
Recorder::~Recorder() = default;

void Logs::parse(const std::string& list) {
  *this = Logs{};
  size_t i = 0;
  while (i <= list.size()) {
    size_t j = list.find(',', i);
    if (j == std::string::npos) j = list.size();
    std::string w = list.substr(i, j - i);
    while (!w.empty() && (w[0] == '+' || w[0] == ' ')) w.erase(0, 1);
    graph |= w == "graph";
    guards |= w == "guards";
    recompiles |= w == "recompiles";
    graph_breaks |= w == "graph_breaks";
    perf |= w == "perf";
    i = j + 1;
  }
}

void Recorder::log(const std::string& what, const std::string& text) {
  std::fprintf(stderr, "[crescent %s] %s%s", what.c_str(), text.c_str(), text.empty() || text.back() != '\n' ? "\n" : "");
}

int32_t Recorder::new_function(const guards::Options& opts) {
  auto f = std::make_unique<guards::Function>();
  f->id = int32_t(functions_.size());
  f->opts = opts;
  functions_.push_back(std::move(f));
  return functions_.back()->id;
}

guards::Function& Recorder::function(int32_t id) {
  if (id < 0 || size_t(id) >= functions_.size()) fail(cat("compile: unknown compiled function ", id));
  return *functions_[size_t(id)];
}

bool Recorder::begin(int32_t fn, int cache_size_limit) {
  if (fn_) return false;
  guards::Function& f = function(fn);
  fn_ = &f;
  ctx_.ffi.capturing = 1;
  cache_size_limit_ = cache_size_limit;
  report.clear();
  start_segment(f.site("entry"));
  return true;
}

void Recorder::start_segment(guards::Site& site) {
  if (!seg_) seg_ = std::make_unique<Segment>();
  Segment& s = *seg_;
  s.reset();  // keeps the vectors' memory: a call starts segments at every break
  s.gen = g_generation.fetch_add(1);
  s.site = &site;
  s.pos = &site.root;
  s.passthrough = site.eager;
  s.recording = site.root.children.empty() && site.root.ends.empty();
}

void Recorder::reset() {
  if (fn_) abort();
  for (auto& f : functions_) {  // Lua wrappers keep their ids: they re-record
    f->sites.clear();
    f->plan.reset();
    f->last_leaf.reset();
  }
  stats = Stats{};
}

// ---- keys ------------------------------------------------------------------------------------

namespace {

uint64_t bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

// A tensor argument: its vid if the segment knows it, else it becomes an input and the key
// carries its guards.
void encode_tensor(Context& ctx, Segment& s, cr_tensor* t) {
  if (t->_gen == s.gen) {
    s.key.push_back(uint64_t(t->_vid));
    return;
  }
  if (!t->_storage || t->_lazy) ensure_real(ctx, t);  // a value of an earlier segment
  int32_t vid = s.next_vid++;
  t->_gen = s.gen;
  t->_vid = vid;
  s.set(vid, Tensor(t, true));
  s.is_input[size_t(vid)] = 1;
  int32_t alias = -1;
  for (int32_t v = 0; v < vid && alias < 0; ++v)
    if (s.is_input[size_t(v)] && s.vals[size_t(v)].storage() == t->_storage) alias = v;
  s.alias[size_t(vid)] = alias;
  Key& k = s.key;
  k.push_back(guards::kNewTensor | uint64_t(vid));
  k.push_back(uint64_t(uint8_t(t->_dtype)) | uint64_t(uint8_t(t->_dev_type)) << 8 |
              uint64_t(uint8_t(t->_dev_index)) << 16 | uint64_t(t->_ndim) << 24);
  k.push_back(uint64_t(t->_offset));
  for (int i = 0; i < t->_ndim; ++i) k.push_back(uint64_t(t->_sizes[i]));
  for (int i = 0; i < t->_ndim; ++i) k.push_back(uint64_t(t->_strides[i]));
  k.push_back(uint64_t(alias + 1));
}

void encode(Context& ctx, Segment& s, int op, const cr_value* args, int nargs) {
  Key& k = s.key;
  k.clear();
  k.push_back(uint64_t(op));
  k.push_back(uint64_t(nargs));
  for (int i = 0; i < nargs; ++i) {
    const cr_value& a = args[i];
    k.push_back(uint64_t(a.tag));
    switch (a.tag) {
      case kTensor: encode_tensor(ctx, s, static_cast<cr_tensor*>(a.ptr)); break;
      case kTensors: {
        k.push_back(uint64_t(a.n));
        for (int j = 0; j < a.n; ++j) encode_tensor(ctx, s, static_cast<cr_tensor* const*>(a.ptr)[j]);
        break;
      }
      case kNumber:
      case kBool: k.push_back(bits(a.num)); break;
      case kInts: {
        k.push_back(uint64_t(a.n));
        const int64_t* p = static_cast<const int64_t*>(a.ptr);
        for (int j = 0; j < a.n; ++j) k.push_back(uint64_t(p[j]));
        break;
      }
      case kDoubles: {
        k.push_back(uint64_t(a.n));
        k.push_back(bits(a.num));
        const double* p = static_cast<const double*>(a.ptr);
        for (int j = 0; j < a.n; ++j) k.push_back(bits(p[j]));
        break;
      }
      case kString: {
        size_t n = std::strlen(a.str);
        k.push_back(n);
        for (size_t j = 0; j < n; j += 8) {
          uint64_t w = 0;
          std::memcpy(&w, a.str + j, std::min<size_t>(8, n - j));
          k.push_back(w);
        }
        break;
      }
      default: break;
    }
  }
}

// The recorded form of the arguments (every tensor has a vid once encoded).
std::vector<Arg> to_args(const cr_value* args, int nargs) {
  std::vector<Arg> r(static_cast<size_t>(nargs));
  for (int i = 0; i < nargs; ++i) {
    const cr_value& a = args[i];
    Arg& g = r[size_t(i)];
    g.tag = a.tag;
    g.num = a.num;
    switch (a.tag) {
      case kTensor: g.value = static_cast<cr_tensor*>(a.ptr)->_vid; g.num = 0; break;
      case kTensors:
        for (int j = 0; j < a.n; ++j) g.values.push_back(static_cast<cr_tensor* const*>(a.ptr)[j]->_vid);
        g.num = 0;
        break;
      case kInts: g.ints.assign(static_cast<const int64_t*>(a.ptr), static_cast<const int64_t*>(a.ptr) + a.n); break;
      case kDoubles: g.doubles.assign(static_cast<const double*>(a.ptr), static_cast<const double*>(a.ptr) + a.n); break;
      case kString: g.str = a.str; break;
      default: break;
    }
  }
  return r;
}

// The tensor arguments of a call, in order.
std::vector<cr_tensor*> tensor_args(const cr_value* args, int nargs) {
  std::vector<cr_tensor*> r;
  for (int i = 0; i < nargs; ++i) {
    if (args[i].tag == kTensor) r.push_back(static_cast<cr_tensor*>(args[i].ptr));
    if (args[i].tag == kTensors)
      for (int j = 0; j < args[i].n; ++j) r.push_back(static_cast<cr_tensor* const*>(args[i].ptr)[j]);
  }
  return r;
}

}  // namespace

// ---- op calls ------------------------------------------------------------------------------

void Recorder::call(int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  Segment& s = *seg_;
  outs.clear();
  if (s.passthrough) {
    for (cr_tensor* t : tensor_args(args, nargs)) ensure_real(ctx_, t);
    outs = dispatch(ctx_, op, args, nargs);
    return;
  }
  int32_t first_new = s.next_vid;
  encode(ctx_, s, op, args, nargs);
  const OpDef& def = Registry::get().ops()[size_t(op)];
  if (!s.recording) {
    for (auto& c : s.pos->children) {
      if (c->key != s.key) continue;
      if (!c->error.empty()) {  // the op fails here, as it did when recorded
        s.pos = c.get();
        throw Error(c->error);
      }
      // a match: hand out lazy tensors with the recorded metadata; nothing runs yet
      for (const guards::OutInfo& o : c->outs) {
        s.next_vid = std::max(s.next_vid, o.vid + 1);
        if (def.flags & kReturnsSelf) {
          cr_tensor* self = static_cast<cr_tensor*>(args[0].ptr);
          self->_vid = o.vid;
          s.set(o.vid, Tensor(self, true));
        } else if (!o.fresh) {
          outs.push_back(s.vals[size_t(o.vid)]);
        } else {
          Tensor t = Tensor::lazy(concrete(o.meta.sizes), o.meta.strides, o.meta.offset, o.meta.dtype, o.meta.device);
          t.get()->_gen = s.gen;
          t.get()->_vid = o.vid;
          s.set(o.vid, t);
          outs.push_back(std::move(t));
        }
      }
      s.pos = c.get();
      s.pending = true;
      ++s.ops;
      return;
    }
    // a guard failure: what ran lazily so far runs now, and recording goes on from here
    pending_reason_ = guards::describe_mismatch(*s.pos, s.key, op);
    run_pending();
    if (s.site->variants >= cache_size_limit_) {
      s.site->eager = s.passthrough = true;
      ++stats.eager_fallbacks;
      if (logs.recompiles)
        log("recompiles", cat(fn_->opts.name, ": cache_size_limit (", cache_size_limit_, ") reached at ", s.site->name,
                              " (", pending_reason_, "): this site runs eagerly from now on"));
      outs = dispatch(ctx_, op, args, nargs);
      return;
    }
    s.recording = true;
  }

  // recording: run eagerly, append the event
  auto node = std::make_unique<TraceNode>();
  node->key = s.key;
  node->parent = s.pos;
  node->node.op = op;
  node->node.args = to_args(args, nargs);
  for (int32_t v = first_new; v < s.next_vid; ++v)
    node->new_inputs.push_back(guards::NewInput{v, meta_of(s.vals[size_t(v)]), s.alias[size_t(v)]});
  try {
    outs = dispatch(ctx_, op, args, nargs);
  } catch (const LocatedError&) {
    throw;
  } catch (const Error& e) {
    if (def.kind != OpKind::Index) {  // the same key fails the same way: remember it
      node->error = e.what();
      s.pos->children.push_back(std::move(node));
      s.pos = s.pos->children.back().get();
    }
    throw;
  }
  std::vector<cr_tensor*> targs = tensor_args(args, nargs);
  if (def.flags & kReturnsSelf) {
    cr_tensor* self = targs[0];
    int32_t v = s.next_vid++;
    node->outs.push_back(guards::OutInfo{v, true, meta_of(Tensor(self, true)), self->_vid});
    self->_vid = v;
    s.set(v, Tensor(self, true));
  } else {
    for (const Tensor& o : outs) {
      cr_tensor* same = nullptr;
      int32_t views = -1;
      for (cr_tensor* a : targs) {
        if (a == o.get()) same = a;
        if (views < 0 && a->_storage == o.get()->_storage) views = a->_vid;
      }
      if (same) {
        node->outs.push_back(guards::OutInfo{same->_vid, false, meta_of(o), -1});
        continue;
      }
      int32_t v = s.next_vid++;
      o.get()->_gen = s.gen;
      o.get()->_vid = v;
      s.set(v, o);
      node->outs.push_back(guards::OutInfo{v, true, meta_of(o), views});
    }
  }
  for (const guards::OutInfo& o : node->outs) node->node.outs.push_back(o.vid);
  s.pos->children.push_back(std::move(node));
  s.pos = s.last_recorded = s.pos->children.back().get();
  ++s.ops;
  ctx_.ffi.service |= 2;  // ask Lua for the position of this op (cap_where)
}

void Recorder::set_where(const std::string& where) {
  if (seg_ && seg_->last_recorded) seg_->last_recorded->node.where = where;
  if (seg_) seg_->last_recorded = nullptr;
}

// The replayed events since the segment started run now (a guard failed midway, or an error).
void Recorder::run_pending() {
  Segment& s = *seg_;
  if (!s.pending) return;
  s.pending = false;
  Leaf prefix{EndKind::Break, "", "", s.pos};
  auto g = guards::build_graph(prefix);
  std::vector<Tensor> vals = values_for(*g);
  run_eager(*g, ctx_, vals);
  settle(nullptr, vals, false);
}

// What a graph run starts from: the inputs, and the lazy tensors waiting for op outputs (the
// eager backend allocates their storage in place instead of making a tensor to attach).
std::vector<Tensor> Recorder::values_for(const Graph& g) {
  Segment& s = *seg_;
  std::vector<Tensor> vals(g.values.size());
  for (size_t v = 0; v < vals.size() && v < s.vals.size(); ++v) {
    cr_tensor* p = s.vals[v].get();
    if (p && (s.is_input[v] || (!p->_storage && p->_vid == int32_t(v)))) vals[v] = s.vals[v];
  }
  return vals;
}

// After a graph ran: lazy tensors get their values; a value the graph did not keep but Lua may
// still hold gets a way to be recomputed; while a leaf is cold, values that Lua still holds get
// a tracker so that their later use marks them as graph outputs.
void Recorder::settle(Leaf* leaf, std::vector<Tensor>& computed, bool learn, const Graph* g) {
  Segment& s = *seg_;
  std::vector<char> copies;  // common subexpressions a pass merged: Lua gets its own tensor
  if (g)
    for (const Graph::Alias& a : g->aliases)
      if (a.copy) {
        if (copies.size() <= size_t(a.removed)) copies.resize(size_t(a.removed) + 1);
        copies[size_t(a.removed)] = 1;
      }
  std::shared_ptr<ExecRecord> rec;
  std::shared_ptr<Leaf> owner;
  if (leaf)
    for (auto& e : leaf->last->ends)
      if (e.get() == leaf) owner = e;
  for (size_t vid = 0; vid < s.vals.size(); ++vid) {
    cr_tensor* p = s.vals[vid].get();
    if (!p || s.is_input[vid] || p->_vid != int32_t(vid)) continue;
    bool alive = tensor_refs(p) > 1;
    if (!p->_storage) {
      if (vid < computed.size() && computed[vid].defined() && !computed[vid].is_lazy()) {
        if (vid < copies.size() && copies[vid] && alive) {
          Tensor c = Tensor::empty(computed[vid].sizes(), computed[vid].dtype(), computed[vid].device());
          copy_into(c, computed[vid]);
          Tensor::attach(p, c);
        } else {
          Tensor::attach(p, computed[vid]);
        }
      } else if (alive) {
        if (!leaf) fail("internal: a replayed prefix left a value uncomputed");
        if (!rec) {
          rec = std::make_shared<ExecRecord>();
          if (!leaf->raw) leaf->raw = guards::build_graph(*leaf);
          rec->raw = leaf->raw;
          rec->vals.resize(s.vals.size());
          for (int32_t in : leaf->raw->inputs) {
            Storage* st = s.vals[size_t(in)].storage();
            rec->vals[size_t(in)] = s.vals[size_t(in)];
            rec->versions.emplace_back(s.vals[size_t(in)], st->version.load());
            st->pending_reads.fetch_add(1);
          }
          records_.push_back(rec);
        }
        rec->pending.push_back(p);
        p->_lazy = new LazyInfo{owner, int32_t(vid), rec};
        continue;
      } else {
        continue;  // garbage: nobody will read it
      }
    }
    bool escaped = leaf && vid < leaf->escaping.size() && leaf->escaping[vid];
    if (learn && owner && alive && !escaped && !p->_lazy) p->_lazy = new LazyInfo{owner, int32_t(vid), nullptr};
  }
}

// ---- segment ends ----------------------------------------------------------------------------

Leaf& Recorder::leaf_for(EndKind kind, const std::string& reason, const std::string& where) {
  Segment& s = *seg_;
  for (auto& e : s.pos->ends)
    if (e->kind == kind && e->where == where && e->reason == reason) return *e;
  auto leaf = std::make_shared<Leaf>(Leaf{kind, reason, where, s.pos});
  leaf->variant = ++s.site->variants;
  if (leaf->variant > 1) {
    ++stats.recompiles;
    if (logs.recompiles)
      log("recompiles", cat(fn_->opts.name, ": new variant ", leaf->variant, " of the segment at ", s.site->name, ": ",
                            pending_reason_.empty() ? "it ended at another place (" + reason + " at " + where + ")"
                                                    : pending_reason_));
  }
  if (s.site->variants > cache_size_limit_) {
    s.site->eager = true;
    ++stats.eager_fallbacks;
    if (logs.recompiles)
      log("recompiles", cat(fn_->opts.name, ": cache_size_limit (", cache_size_limit_, ") reached at ", s.site->name,
                            ": this site runs eagerly from now on"));
  }
  pending_reason_.clear();
  s.pos->ends.push_back(leaf);
  if (logs.guards) log("guards", guards::describe_guards(*leaf));
  return *leaf;
}

void Recorder::end_segment(EndKind kind, const std::string& reason, const std::string& where,
                           const std::vector<cr_tensor*>& needed) {
  Segment& s = *seg_;
  report.push_back(SegmentReport{s.ops, reason, where});
  if (kind == EndKind::Break) ++stats.graph_breaks;
  if (kind == EndKind::Break && logs.graph_breaks && (s.recording || !s.pending))
    log("graph_breaks", cat(fn_->opts.name, ": graph break at ", where, ": ", reason, " (after ", s.ops, " ops)"));
  if (!s.passthrough && s.ops > 0) {
    Leaf& leaf = leaf_for(kind, reason, where);
    for (cr_tensor* t : needed)
      if (t->_gen == s.gen) note_escape(leaf, t->_vid, "returned or read");
    ++leaf.hits;
    if (!s.pending) {  // recorded: everything already ran eagerly
      settle(&leaf, s.vals, true);
    } else {
      std::shared_ptr<Graph> g;
      if (leaf.hits > fn_->opts.hot) g = leaf.compiled && leaf.recompile_reason.empty() ? leaf.compiled : compile(leaf);
      if (!g) {
        if (!leaf.raw) leaf.raw = guards::build_graph(leaf);
        g = leaf.raw;
      }
      std::vector<Tensor> vals = values_for(*g);
      s.pending = false;
      double t0 = now_us();
      run_eager(*g, ctx_, vals);
      double t1 = now_us();
      settle(&leaf, vals, g == leaf.raw, g.get());
      double t2 = now_us();
      vals.clear();  // the graph's temporaries die with its run
      stats.graph_run_us += (t1 - t0) + (now_us() - t2);
    }
    if (kind == EndKind::Return && report.size() == 1) remember_call(leaf, needed);
  }
  if (kind == EndKind::Break) start_segment(fn_->site(cat("after ", reason, " at ", where)));
}

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
}

void Recorder::graph_break(const std::string& reason, const std::string& where, cr_tensor* needed) {
  if (fn_->opts.fullgraph)
    throw LocatedError(cat(where, ": compile (fullgraph = true): graph break at ", where, ": ", reason));
  std::vector<cr_tensor*> n;
  if (needed) n.push_back(needed);
  end_segment(EndKind::Break, reason, where, n);
}

void Recorder::finish(const std::vector<cr_tensor*>& rets, const std::string& where) {
  try {
    end_segment(EndKind::Return, "return", where, rets);
  } catch (...) {
    stop();
    throw;
  }
  stop();
}

void Recorder::stop() {
  fn_ = nullptr;
  if (seg_) seg_->reset();
  ctx_.ffi.capturing = 0;
}

void Recorder::abort() {
  if (!fn_) return;
  try {
    run_pending();
  } catch (const std::exception&) {
    // the call is already failing with its own error; its lazy tensors stay without values
  }
  stop();
}

// ---- compilation -----------------------------------------------------------------------------

std::shared_ptr<Graph> Recorder::compile(Leaf& leaf) {
  if (!leaf.raw) leaf.raw = guards::build_graph(leaf);
  auto g = std::make_shared<Graph>(*leaf.raw);
  g->name = cat(fn_->opts.name, " segment ending at ", leaf.where, " #", leaf.variant);
  // Outputs: values used after the segment, and every value that depends on an in-place or a
  // random op (those cannot be recomputed later from the inputs).
  std::vector<char> impure(g->values.size());
  for (const Node& n : g->nodes) {
    bool dirty = n.inplace() || n.random();
    for (const Arg& a : n.args) {
      if (a.tag == kTensor) dirty = dirty || impure[size_t(a.value)];
      for (int32_t v : a.values) dirty = dirty || impure[size_t(v)];
    }
    for (int32_t o : n.outs)
      if (dirty && g->values[size_t(o)].node == int32_t(&n - g->nodes.data())) impure[size_t(o)] = 1;
  }
  std::vector<char> written = written_roots(*g);  // storage an in-place op writes, through any view
  g->outputs.clear();
  for (size_t v = 0; v < g->values.size(); ++v) {
    if (g->values[v].node >= 0 && written[size_t(storage_root(*g, int32_t(v)))]) impure[v] = 1;
    bool esc = v < leaf.escaping.size() && leaf.escaping[v];
    if ((esc || impure[v]) && g->values[v].node >= 0 && g->nodes[size_t(g->values[v].node)].kind != NodeKind::Input)
      g->outputs.push_back(int32_t(v));
  }
  if (!leaf.recompile_reason.empty()) {
    ++stats.recompiles;
    if (logs.recompiles) log("recompiles", cat(fn_->opts.name, ": ", leaf.recompile_reason));
    leaf.recompile_reason.clear();
  }
  try {
    optimize(*g, ctx_);
  } catch (const std::exception& e) {
    ++stats.eager_fallbacks;
    log("graph", cat("optimising ", g->name, " failed (", e.what(), "): it runs as recorded"));
    leaf.compiled = leaf.raw;
    return leaf.raw;
  }
  ++stats.graphs_compiled;
  if (logs.graph) log("graph", g->str());
  leaf.compiled = g;
  return g;
}

}  // namespace cr::graph

namespace cr::graph {

// ---- reduce-overhead -------------------------------------------------------------------------

int Recorder::plan(int32_t id, cr_tensor* const* cands, int n) {
  guards::Function& f = function(id);
  f.plan.reset();
  if (report.size() != 1 || report[0].reason != "return")
    fail(cat("the call has ", report.size() - 1, " graph break(s)"));
  auto leaf = f.last_leaf;
  if (!leaf) fail("the call recorded no tensor op");
  if (!leaf->compiled || !leaf->recompile_reason.empty()) return 0;
  auto p = std::make_unique<guards::Plan>();
  p->leaf = leaf;
  p->graph = leaf->compiled;
  if (p->graph->inputs.size() != f.last_inputs.size()) return 0;
  for (size_t i = 0; i < f.last_inputs.size(); ++i) {
    int k = -1;
    for (int j = 0; j < n && k < 0; ++j)
      if (cands[j] == f.last_inputs[i]) k = j;
    if (k < 0) fail(cat("input ", i + 1, " of its graph is neither an argument nor reachable from an upvalue"));
    p->source.push_back(k);
  }
  for (int32_t r : f.last_rets) {
    if (r < 0) fail("it returns a tensor its graph does not make");
    p->rets.push_back(r);
  }
  f.plan = std::move(p);
  return 1;
}

bool Recorder::has_plan(int32_t id) { return function(id).plan != nullptr; }

bool Recorder::replay(int32_t id, cr_tensor* const* cands, int n, std::vector<Tensor>& rets) {
  guards::Function& f = function(id);
  if (!f.plan || fn_) return false;
  const guards::Plan& p = *f.plan;
  const Graph& g = *p.graph;
  std::vector<Tensor> vals(g.values.size());
  for (size_t i = 0; i < p.source.size(); ++i) {
    if (p.source[i] >= n) return false;
    cr_tensor* t = cands[p.source[i]];
    if (!t->_storage || t->_lazy) ensure_real(ctx_, t);
    int32_t vid = g.inputs[i];
    const Value& v = g.values[size_t(vid)];
    const ValueMeta& m = v.meta;
    if (t->_dtype != int8_t(m.dtype) || t->_dev_type != m.device.type || t->_dev_index != m.device.index ||
        t->_ndim != int32_t(m.sizes.size()) || t->_offset != m.offset)
      return false;
    for (int d = 0; d < t->_ndim; ++d)
      if (t->_sizes[d] != m.sizes[size_t(d)].value || t->_strides[d] != m.strides[size_t(d)]) return false;
    int32_t alias = -1;  // the aliasing between inputs must be the recorded one
    for (size_t j = 0; j < i && alias < 0; ++j)
      if (vals[size_t(g.inputs[j])].get()->_storage == t->_storage) alias = g.inputs[j];
    if (alias != v.alias_of) return false;
    vals[size_t(vid)] = Tensor(t, true);
  }
  double t0 = now_us();
  run_eager(g, ctx_, vals);
  rets.clear();
  for (int32_t r : p.rets) rets.push_back(vals[size_t(r)]);
  vals.clear();  // the graph's temporaries die with its run
  stats.graph_run_us += now_us() - t0;
  ++stats.replays;
  return true;
}

}  // namespace cr::graph
