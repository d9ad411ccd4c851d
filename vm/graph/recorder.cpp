// The trace recorder: see recorder.hpp for the model. Read top-down: set-up, op calls (replay
// or record), segment ends; compilation is in compile.cpp, keys in keys.cpp, lazy tensors after
// their segment in lazy.cpp, reduce-overhead in replay.cpp.
#include <atomic>
#include <utility>

#include "vm/graph/joint.hpp"
#include "vm/graph/segment.hpp"
#include "vm/config.hpp"
#include "vm/autograd/call.hpp"
#include "vm/autograd/grad_mode.hpp"
#include "vm/autograd/meta.hpp"
#include "vm/autograd/views.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::graph {

using guards::EndKind;
using guards::Key;
using guards::Leaf;
using guards::TraceNode;

namespace {
std::atomic<uint64_t> g_generation{1};  // process-wide, so tensors shared by two VMs never clash
}  // namespace

Recorder::Recorder(Context& ctx) : logs(ctx.logs), ctx_(ctx) {
  if (const char* d = env_setting(Setting::DebugDir)) debug_dir = d;
}
Recorder::~Recorder() = default;

int32_t Recorder::new_function(const guards::Options& opts) {
  auto f = std::make_unique<guards::Function>();
  f->id = int32_t(functions_.size());
  f->opts = opts;
  functions_.push_back(std::move(f));
  return functions_.back()->id;
}

guards::Function& Recorder::function(int32_t id) {
  if (id < 0 || size_t(id) >= functions_.size() || !functions_[size_t(id)])
    fail(cat("compile: unknown compiled function ", id));
  return *functions_[size_t(id)];
}

// Frees a function's traces (its ids are not reused: the slot stays empty).
void Recorder::drop(int32_t id) {
  if (id < 0 || size_t(id) >= functions_.size() || !functions_[size_t(id)]) return;
  if (fn_ == functions_[size_t(id)].get()) return;  // still running (cannot happen from the GC)
  functions_[size_t(id)].reset();
}

bool Recorder::begin(int32_t fn, int cache_size_limit, int train_mode) {
  if (fn_) return false;
  guards::Function& f = function(fn);
  fn_ = &f;
  const bool train = train_mode == 1 || (train_mode == 2 && f.trains);
  ctx_.ffi.capturing = train ? 2 : 1;  // (Lua records the fused training ops then: core.fused_op)
  train_ = ctx_.capture_training = train;
  cache_size_limit_ = cache_size_limit;
  report.clear();
  start_segment(f.site("entry", train));
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
  s.train = train_;
  s.mode = fn_->opts.dynamic;
  s.recording = site.root.children.empty() && site.root.ends.empty();
  ctx_.ffi.collect = 0;
}

void Recorder::reset() {
  if (fn_) abort();
  for (auto& f : functions_) {  // Lua wrappers keep their ids: they re-record
    if (!f) continue;
    f->sites.clear();
    f->plan.reset();
    f->last_leaf.reset();
  }
  stats = Stats{};
}

// ---- op calls ------------------------------------------------------------------------------

void Recorder::call(int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  Segment& s = *seg_;
  outs.clear();
  ctx_.capture_lazy = false;
  if (s.train) ++(autograd::grad_enabled ? s.grad_ops : s.no_grad_ops);
  if (s.passthrough) {
    for (cr_tensor* t : tensor_args(args, nargs)) ensure_real(ctx_, t);
    outs = dispatch(ctx_, op, args, nargs);
    return;
  }
  const OpDef& def = Registry::get().ops()[size_t(op)];
  if (def.flags & kDataSize) {  // never recorded: a replay would assume the recorded sizes
    if (s.ops > 0) data_size(def.name, def.name);
    for (cr_tensor* t : tensor_args(args, nargs)) ensure_real(ctx_, t);
    outs = dispatch(ctx_, op, args, nargs);
    if (s.mode == 1)
      for (const Tensor& t : outs) s.data_sized.push_back({t.get(), t.get()->_storage, s.data_calls});
    s.data_calls += s.mode == 1;
    return;
  }
  int32_t first_new = s.next_vid;
  encode(ctx_, s, op, args, nargs);
  if (!s.recording) {
    pending_reason_.clear();
    if ((ctx_.capture_lazy = replay(op, args, nargs, outs))) return note_lazy(outs);
    if (pending_reason_.empty()) {
      // automatic dynamic shapes: sizes that changed are symbolic from now on (one recompile)
      std::string changed = learn_dynamic(ctx_, s, op, args, nargs, first_new);
      if (!changed.empty() && (ctx_.capture_lazy = replay(op, args, nargs, outs))) return note_lazy(outs);
      if (pending_reason_.empty() && changed.empty()) {
        int arg = -1;
        pending_reason_ = guards::describe_mismatch(*s.pos, s.key, op, &arg);
        if (arg >= 0 && arg < nargs && args[arg].tag == kTensor) ask_name(static_cast<cr_tensor*>(args[arg].ptr));
      } else if (pending_reason_.empty()) {
        pending_reason_ = cat(def.name, ": ", changed, " (symbolic from now on)");
      }
    }
    // a guard failure: what ran lazily so far runs now, and recording goes on from here
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
    if (s.train && (def.flags & kReturnsSelf)) autograd::prepare_late(ctx_, op, args, nargs);  // (record_late's)
  } else if (s.shadow) {
    learn_dynamic(ctx_, s, op, args, nargs, first_new);
  }
  record(op, args, nargs, first_new, outs);
}

namespace {

// Whether eager autograd would differentiate this call: grad mode, a differentiable op, and an
// argument requiring grad (a lazy one as its recorded call's output did).
bool differentiates(const OpDef& def, const cr_value* args, int nargs) {
  if (!autograd::grad_enabled || def.grad.not_differentiable) return false;
  for (cr_tensor* t : tensor_args(args, nargs))
    if (autograd::requires_grad(t) || autograd::lazy_grad(t)) return true;
  return false;
}

}  // namespace

// Replaying: the call matches a recorded event. Its outputs are lazy tensors with the recorded
// layouts (derived from the arguments when sizes are symbolic); nothing runs yet.
bool Recorder::replay(int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  Segment& s = *seg_;
  const OpDef& def = Registry::get().ops()[size_t(op)];
  // (an in-place write under grad to a tensor requiring grad, which a graph cannot differentiate:
  // the call records from here, and its segment takes eager autograd - check_training)
  if (s.train && (def.flags & kReturnsSelf) && differentiates(def, args, nargs)) {
    pending_reason_ = cat(def.name, ": an in-place op on a tensor requiring grad (recorded, with eager autograd)");
    return false;
  }
  std::vector<ValueMeta> metas;
  for (auto& c : s.pos->children) {
    if (c->key != s.key) continue;
    if (!c->error.empty()) {  // the op fails here, as it did when recorded
      if (s.dynamic) continue;  // (with symbolic sizes it may not: errors are not remembered)
      s.pos = c.get();
      throw Error(c->error);
    }
    if (s.dynamic && !(def.flags & kReturnsSelf) && !derive_outputs(ctx_, op, args, nargs, c->outs, metas)) {
      pending_reason_ = cat(def.name, ": the layouts of its outputs cannot be derived for these symbolic sizes");
      return false;
    }
    // (the arguments as they are now: an in-place op's output takes its first argument's tensor)
    if (s.dynamic && has_wildcard_args(def, args, nargs)) s.event_args.emplace_back(s.ops, to_args(s, args, nargs));
    const bool grad = s.train && differentiates(def, args, nargs);
    for (size_t i = 0; i < c->outs.size(); ++i) {
      const guards::OutInfo& o = c->outs[i];
      s.next_vid = std::max(s.next_vid, o.vid + 1);
      if (def.flags & kReturnsSelf) {
        cr_tensor* self = static_cast<cr_tensor*>(args[0].ptr);
        self->_vid = o.vid;
        if (grad && !self->_storage && is_floating(DType(self->_dtype))) self->_flags |= autograd::kLazyGrad;
        s.set(o.vid, Tensor(self, true));
      } else if (!o.fresh) {
        outs.push_back(s.vals[size_t(o.vid)]);
      } else {
        const ValueMeta& m = s.dynamic ? metas[i] : o.meta;
        Tensor t = Tensor::lazy(s.dynamic ? concrete(m.sizes) : o.sizes, m.strides, m.offset, m.dtype, m.device);
        t.get()->_gen = s.gen;
        t.get()->_vid = o.vid;
        if (grad && is_floating(m.dtype)) t.get()->_flags |= autograd::kLazyGrad;
        s.set(o.vid, t);
        outs.push_back(std::move(t));
      }
    }
    s.pos = c.get();
    s.pending = true;
    ++s.ops;
    s.op_ids.push_back(op);
  s.op_grad.push_back(autograd::grad_enabled);
    return true;
  }
  return false;
}

// Lazy values allocate nothing until their graph runs, so the collector's byte budget (api.cpp
// note_allocations) never runs out within a replayed call: past it, Lua collects before the call
// returns, and the run frees what only garbage held (unheld_values) instead of keeping it all.
void Recorder::note_lazy(const std::vector<Tensor>& outs) {
  Segment& s = *seg_;
  for (const Tensor& t : outs) {
    if (!t.is_lazy()) continue;  // (an in-place op's real argument)
    s.lazy_bytes += size_t(t.numel()) * dtype_size(t.dtype());
    s.lazy_on_device = s.lazy_on_device || !t.device().is_cpu();
  }
  if (s.lazy_bytes > (s.lazy_on_device ? ctx_.gc_every_device_bytes : ctx_.gc_every_bytes) && !ctx_.ffi.collect)
    ctx_.ffi.collect = 2;
}

namespace {

constexpr size_t kCollectMinBytes = size_t(1) << 20;

size_t bytes_of(const cr_tensor* t) {
  size_t b = dtype_size(DType(t->_dtype));
  for (int32_t d = 0; d < t->_ndim; ++d) b *= size_t(t->_sizes[d]);
  return b;
}

// What the run of the segment gives storage, by value, when every return where it is has native
// code (the union of their plans' stores()); empty otherwise (every value may be stored).
std::vector<char> native_stores(const Segment& s) {
  std::vector<char> mask;
  for (const auto& leaf : s.pos->ends) {
    if (leaf->kind != EndKind::Return) continue;
    if (!leaf->raw) return {};  // (never replayed: it runs as recorded)
    const Graph* g = leaf->compiled.get();
    if (leaf->dynamic) {  // (the instance of this call's layouts, if compiled)
      auto it = leaf->instances.find(instance_key(leaf->raw->inputs, s));
      g = it == leaf->instances.end() ? nullptr : it->second.compiled.get();
    }
    std::shared_ptr<const Executable> exe = g ? executable_of(*g) : nullptr;
    const std::vector<char>* st = exe ? exe->stores() : nullptr;
    if (!st || !leaf->recompile_reason.empty()) return {};
    if (mask.size() < st->size()) mask.resize(st->size(), 0);
    for (size_t v = 0; v < st->size(); ++v) mask[v] |= (*st)[v];
    if (leaf->joint)  // (the backward holds those whatever Lua's handles do)
      for (int32_t v : plan_of(*leaf->joint).saved) mask[size_t(v)] = 0;
  }
  return mask;
}

}  // namespace

// Collect before the return when dropped Lua handles would make the run keep more than a budget.
// With native CPU code only stored values count (fused ones hold nothing), past the Lua heap's
// size: a training step's at once (its peak is what limits a model); another call's as garbage
// bytes (Context::host_garbage_due: a call that runs often spends a bounded share collecting).
bool Recorder::collect_pays(cr_tensor* const* rets, int32_t n) const {
  if (ctx_.ffi.collect != 2 || !seg_) return ctx_.ffi.collect != 0;
  const Segment& s = *seg_;
  const std::vector<char> stores = s.lazy_on_device ? std::vector<char>() : native_stores(s);
  if (!stores.empty()) {
    size_t bytes = 0;
    for (size_t v = 0; v < s.vals.size() && v < stores.size(); ++v) {
      const cr_tensor* t = s.vals[v].get();
      if (stores[v] && t && !t->_storage && t->_vid == int32_t(v) && tensor_refs(t) > 1 &&
          std::find(rets, rets + n, t) == rets + n)
        bytes += bytes_of(t);
    }
    const size_t budget = std::max(ctx_.lua_heap_bytes, kCollectMinBytes);
    const bool due = train_ ? bytes > budget : ctx_.host_garbage_due(bytes, budget);
    collected_for_stores_ = due;
    return due;
  }
  size_t bytes = s.lazy_bytes;
  for (int32_t i = 0; i < n; ++i)
    if (!rets[i]->_storage && rets[i]->_gen == s.gen) bytes -= std::min(bytes, bytes_of(rets[i]));
  return bytes > (s.lazy_on_device ? ctx_.gc_every_device_bytes : ctx_.gc_every_bytes);
}

void let_go_unreached(Segment& s) {
  std::vector<std::pair<const Storage*, int32_t>> shared;  // (storage, headers only s holds)
  for (int32_t v : s.ran) {
    const Tensor& t = s.vals[size_t(v)];
    if (!t.defined() || tensor_refs(t.get()) != 1 || !t.storage() || t.storage()->refs.load() == 1) continue;
    const Storage* st = t.storage();
    auto it = std::find_if(shared.begin(), shared.end(), [&](const auto& e) { return e.first == st; });
    if (it == shared.end()) shared.emplace_back(st, 1);
    else ++it->second;
  }
  size_t kept = 0;
  for (int32_t v : s.ran) {
    Tensor& t = s.vals[size_t(v)];
    if (!t.defined()) continue;
    const Storage* st = t.storage();
    bool go = t.get()->_vid != v;  // (an older version: the header holds a later value now)
    if (!go && tensor_refs(t.get()) == 1) {
      const int32_t refs = st ? st->refs.load() : 1;
      go = refs == 1 ||
           std::any_of(shared.begin(), shared.end(), [&](const auto& e) { return e.first == st && e.second == refs; });
    }
    if (go) t = Tensor();
    else s.ran[kept++] = v;
  }
  s.ran.resize(kept);
  s.ran_scanned = kept;
}

// Recording: the call runs eagerly and is appended to the tree.
void Recorder::record(int op, const cr_value* args, int nargs, int32_t first_new, std::vector<Tensor>& outs) {
  Segment& s = *seg_;
  ctx_.ffi.collect = 1;
  // (a scan after Lua collected, else once ran has grown by 1/32: linear time over a long recording)
  if (ctx_.gc_end_us != s.gc_seen || s.ran.size() >= s.ran_scanned + 4 + s.ran_scanned / 32) {
    s.gc_seen = ctx_.gc_end_us;
    let_go_unreached(s);
  }
  const OpDef& def = Registry::get().ops()[size_t(op)];
  auto node = std::make_unique<TraceNode>();
  node->key = s.key;
  node->parent = s.pos;
  node->node.op = op;
  node->node.args = to_args(s, args, nargs);
  for (int32_t v = first_new; v < s.next_vid; ++v)
    node->new_inputs.push_back(guards::NewInput{v, meta_of(s.vals[size_t(v)]), s.alias[size_t(v)], s.symbolic[size_t(v)]});
  try {
    outs = dispatch(ctx_, op, args, nargs);
  } catch (const LocatedError&) {
    throw;
  } catch (const Error& e) {
    // the same key fails the same way: remember it (not where it reads values: index values, or
    // numbers the key holds only the class of, whose message names the number)
    const bool numbers_vary = std::any_of(s.arg_number.begin(), s.arg_number.end(), [](int32_t n) { return n >= 0; });
    if (!(def.flags & kValueErrors) && !s.dynamic && !numbers_vary) {
      node->error = e.what();
      s.pos->children.push_back(std::move(node));
      s.pos = s.pos->children.back().get();
    }
    throw;
  }
  std::vector<cr_tensor*> targs = tensor_args(args, nargs);
  const bool draws = def.flags & (kRandom | kCollective);  // (kept: a traced backward never redraws)
  if (def.flags & kReturnsSelf) {
    cr_tensor* self = targs[0];
    int32_t v = s.next_vid++;
    Tensor t(self, true);
    node->outs.push_back(guards::OutInfo{v, true, meta_of(t), self->_vid, t.sizes()});
    self->_vid = v;
    s.set(v, Tensor(self, true));
    if (!draws) s.ran.push_back(v);
  } else {
    for (const Tensor& o : outs) {
      cr_tensor* same = nullptr;
      int32_t views = -1;
      for (cr_tensor* a : targs) {
        if (a == o.get()) same = a;
        if (views < 0 && a->_storage == o.get()->_storage) views = a->_vid;
      }
      if (same) {
        node->outs.push_back(guards::OutInfo{same->_vid, false, meta_of(o), -1, o.sizes()});
        continue;
      }
      int32_t v = s.next_vid++;
      o.get()->_gen = s.gen;
      o.get()->_vid = v;
      s.set(v, o);
      if (!draws) s.ran.push_back(v);
      node->outs.push_back(guards::OutInfo{v, true, meta_of(o), views, o.sizes()});
    }
  }
  for (const guards::OutInfo& o : node->outs) node->node.outs.push_back(o.vid);
  s.pos->children.push_back(std::move(node));
  s.pos = s.last_recorded = s.pos->children.back().get();
  if (s.dynamic && has_wildcard_args(def, args, nargs)) s.event_args.emplace_back(s.ops, s.pos->node.args);
  ++s.ops;
  s.op_ids.push_back(op);
  s.op_grad.push_back(autograd::grad_enabled);
  ctx_.ffi.service |= CR_SERVICE_WHERE;  // ask Lua for the position of this op (cap_where)
}

// The Lua name of a tensor argument whose guard failed (Lua answers through name_arg): the
// recompile log then says `w`, not only "argument 2".
void Recorder::ask_name(cr_tensor* t) {
  unnamed_ = t;
  name_at_ = pending_reason_.find("): ");
  ctx_.ffi.service |= CR_SERVICE_NAME;
}

void Recorder::name_arg(const std::string& name) {
  ctx_.ffi.service &= ~CR_SERVICE_NAME;
  if (unnamed_ && !name.empty() && name_at_ < pending_reason_.size()) pending_reason_.insert(name_at_ + 1, cat(" `", name, "`"));
  unnamed_ = nullptr;
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
  take_event_args(*g, s);
  std::shared_ptr<Joint> joint;
  bool with_autograd = false;
  if (s.train && !s.stepped) {  // (a prefix of a recorded path: the guards make it as differentiable as that path)
    std::vector<char> needs_grad(g->values.size());
    for (int32_t v : g->inputs) needs_grad[size_t(v)] = autograd::requires_grad(s.vals[size_t(v)].get());
    GradPlan plan = plan_gradients(*g, needs_grad, s.grad_ops, s.no_grad_ops);
    with_autograd = !plan.unsupported.empty();
    if (with_autograd && logs.aot)
      log("aot", cat(fn_->opts.name, ": a replayed prefix runs with eager autograd: ", plan.unsupported));
    if (plan.any && !with_autograd) {
      note_plan(cat(fn_->opts.name, " prefix"), plan);
      joint = make_joint(g, std::move(plan), JointOptions{cat(fn_->opts.name, " prefix"), fn_->opts.backend});
    }
  }
  // (values only the segment holds go after their last reader; random draws stay, for a
  // backward traced after this: it reads them, never draws again)
  std::vector<char> unheld = unheld_values(*g, joint.get(), {});
  for (const Node& n : g->nodes)
    if (n.random())
      for (int32_t o : n.outs) unheld[size_t(o)] = 0;
  std::vector<Tensor> vals = values_for(*g, with_autograd ? nullptr : &unheld);
  if (with_autograd) run_with_autograd(*g, vals);
  else run_eager(*g, ctx_, vals, s.numbers_or_null(), &unheld);
  settle(nullptr, vals, false, g.get());
  if (joint) attach_node(joint, *g, vals, {});
  for (size_t v = 0; v < g->values.size(); ++v)
    if (g->values[v].node >= 0 && g->nodes[size_t(g->values[v].node)].kind == NodeKind::Op &&
        !g->nodes[size_t(g->values[v].node)].random())
      s.ran.push_back(int32_t(v));
}

// What a graph run starts from: the inputs, and the lazy tensors waiting for op outputs (the
// eager backend allocates their storage in place instead of making a tensor to attach).
std::vector<Tensor> Recorder::values_for(const Graph& g, const std::vector<char>* unheld) {
  Segment& s = *seg_;
  std::vector<Tensor> vals(g.values.size());
  for (size_t v = 0; v < vals.size() && v < s.vals.size(); ++v) {
    cr_tensor* p = s.vals[v].get();
    if (unheld && (*unheld)[v]) continue;
    if (p && (s.is_input[v] || (!p->_storage && p->_vid == int32_t(v)))) vals[v] = s.vals[v];
  }
  return vals;
}

// The values of g a run may free after their last reader: op results that are no output, no
// value the segment's backward saves, and whose tensor (if Lua got one) only the segment holds.
// Lua's tensors of this call's intermediates are held until Lua collects them.
std::vector<char> Recorder::unheld_values(const Graph& g, const Joint* joint, const std::vector<cr_tensor*>& needed) {
  Segment& s = *seg_;
  std::vector<char> unheld(g.values.size(), 0);
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (val.node < 0 || g.nodes[size_t(val.node)].kind != NodeKind::Op) continue;
    const cr_tensor* p = v < s.vals.size() ? s.vals[v].get() : nullptr;
    unheld[v] = !p || (!s.is_input[v] && p->_vid == int32_t(v) && !p->_storage && tensor_refs(p) == 1);
  }
  for (int32_t v : g.outputs) unheld[size_t(v)] = 0;
  for (const Graph::Alias& a : g.aliases) unheld[size_t(a.removed)] = unheld[size_t(a.kept)] = 0;
  if (joint)
    for (int32_t v : plan_of(*joint).saved) unheld[size_t(v)] = 0;
  for (const cr_tensor* t : needed)
    if (t->_gen == s.gen && size_t(t->_vid) < unheld.size()) unheld[size_t(t->_vid)] = 0;
  return unheld;
}

// As eager's views (run_op notes them): an in-place change of the base later gives the view a
// grad_fn over the base's new history. The base of a value Lua does not hold has no history to
// rebase on (joint.cpp).
void Recorder::note_view(const Graph& g, int32_t vid, cr_tensor* p) {
  Segment& s = *seg_;
  int32_t from = vid;
  while (g.values[size_t(from)].views >= 0) from = g.values[size_t(from)].views;
  cr_tensor* src = size_t(from) < s.vals.size() ? s.vals[size_t(from)].get() : nullptr;
  if (!src || src->_storage != p->_storage) return;
  if (!s.is_input[size_t(from)] && (src->_vid != from || tensor_refs(src) <= 1)) return;
  const Node& made = g.nodes[size_t(g.values[size_t(vid)].node)];
  autograd::ViewCreation how = autograd::view_creation(made.def().flags & kListOut);
  if (s.train && s.grad_ops > 0 && s.no_grad_ops == 0 && !autograd::inference_mode)
    how = made.def().flags & kListOut ? autograd::ViewCreation::MultiOutput : autograd::ViewCreation::Default;
  autograd::note_view(src, p, how);
}

// After a graph ran: lazy tensors get their values; a value the graph did not keep but Lua may
// still hold gets a way to be recomputed; while a leaf is cold, values that Lua still holds get
// a tracker so that their later use marks them as graph outputs.
void Recorder::settle(Leaf* leaf, std::vector<Tensor>& computed, bool learn, const Graph* g, bool collected) {
  Segment& s = *seg_;
  std::vector<char> copies;  // common subexpressions a pass merged: Lua gets its own tensor
  if (g)
    for (const Graph::Alias& a : g->aliases)
      if (a.copy) {
        if (copies.size() <= size_t(a.removed)) copies.resize(size_t(a.removed) + 1);
        copies[size_t(a.removed)] = 1;
      }
  std::shared_ptr<Leaf> owner;
  if (leaf)
    for (auto& e : leaf->last->ends)
      if (e.get() == leaf) owner = e;
  const Graph* raw = leaf && leaf->raw ? leaf->raw.get() : g;  // (a compiled graph's nodes are not the values')
  std::vector<std::pair<cr_tensor*, int32_t>>& waiting = waiting_;  // (a member: no allocation per call)
  waiting.clear();
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
          if (raw && vid < raw->values.size() && raw->values[vid].views >= 0) note_view(*raw, int32_t(vid), p);
        }
      } else if (alive) {
        if (!leaf) fail("internal: a replayed prefix left a value uncomputed");
        if (vid < leaf->lost.size() && leaf->lost[vid]) {  // (lost: 1 unknown, 2 replayable, 3 not)
          if (!leaf->raw) leaf->raw = guards::build_graph(*leaf);
          char& l = leaf->lost[vid];
          if (l == 1) l = replayable(*leaf->raw, int32_t(vid)) ? 2 : 3;
          if (l == 3) {  // (reading it raises)
            p->_lazy = new LazyInfo{owner, int32_t(vid), nullptr, nullptr, true};
            continue;
          }
        }
        waiting.emplace_back(p, int32_t(vid));
        continue;
      } else {
        continue;  // garbage: nobody will read it
      }
    }
    if (collected && alive) {  // after a full collection: Lua still reaches this value
      if (leaf->reachable.size() <= vid) leaf->reachable.resize(s.vals.size());
      leaf->reachable[vid] = 1;
    }
    bool escaped = leaf && vid < leaf->escaping.size() && leaf->escaping[vid];
    if (learn && owner && alive && !escaped && !p->_lazy) p->_lazy = new LazyInfo{owner, int32_t(vid)};
  }
  if (waiting.empty()) return;
  std::shared_ptr<ExecRecord> rec = wait_on_record(ctx_, *leaf, owner, s, waiting);
  // Expired records are pruned when the list has doubled, not per call: until Lua collects the
  // handles of a call's intermediates, every call adds a record, and a scan per call made calls
  // slower and slower between two collections.
  if (records_.size() >= std::max<size_t>(64, 2 * records_live_)) {
    std::erase_if(records_, [](const std::weak_ptr<ExecRecord>& w) { return w.expired(); });
    records_live_ = records_.size();
  }
  records_.push_back(rec);
  if (reads_host_memory(*rec))
    for (auto& [p, vid] : waiting) ensure_real(ctx_, p);
}

// ---- segment ends ----------------------------------------------------------------------------

Leaf& Recorder::leaf_for(EndKind kind, const std::string& reason, const std::string& where) {
  Segment& s = *seg_;
  for (auto& e : s.pos->ends)
    if (e->kind == kind && e->where == where && e->reason == reason) return *e;
  auto leaf = std::make_shared<Leaf>(Leaf{kind, reason, where, s.pos});
  leaf->dynamic = s.dynamic;
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
  std::string names;
  for (int32_t op : s.op_ids) names += cat(names.empty() ? "" : " ", Registry::get().ops()[size_t(op)].name);
  report.push_back(SegmentReport{s.ops, reason, where, symbolic_dims(s), names});
  report.back().end = kind == EndKind::Return ? 'R' : kind == EndKind::Break ? 'B' : 'S';
  if (kind == EndKind::Break) ++stats.graph_breaks;
  if (kind == EndKind::Break && logs.graph_breaks && (s.recording || !s.pending))
    log("graph_breaks", cat(fn_->opts.name, ": graph break at ", where, ": ", reason, " (after ", s.ops, " ops)"));
  if (!s.passthrough && s.ops > 0) {
    Leaf& leaf = leaf_for(kind, reason, where);
    for (cr_tensor* t : needed)
      if (t->_gen == s.gen) note_escape(leaf, t->_vid, "returned or read");
    ++leaf.hits;
    leaf.stepped = s.stepped;
    if (s.train && !s.stepped) check_training(leaf);
    if (!s.pending) {  // recorded: everything already ran eagerly
      // (at a return Lua collected garbage first when ops were recorded: hand_back, stdlib/compile.lua)
      const bool collected = kind == EndKind::Return && ctx_.ffi.collect == 1;
      leaf.reach_learned = leaf.reach_learned || collected;
      settle(&leaf, s.vals, true, nullptr, collected);
    } else {
      std::shared_ptr<Graph> g;
      if (!leaf.raw) leaf.raw = guards::build_graph(leaf);
      if (leaf.dynamic) g = instance(leaf);
      else if (leaf.hits > fn_->opts.hot)
        g = leaf.compiled && leaf.recompile_reason.empty() ? leaf.compiled : compile(leaf, *leaf.raw);
      if (!g) g = leaf.raw;
      // cold (running as recorded): values Lua keeps are tracked, to be outputs once compiled
      const bool cold = leaf.dynamic ? leaf.hits <= fn_->opts.hot : g == leaf.raw;
      const std::vector<char> unheld = unheld_values(*g, leaf.joint.get(), needed);
      std::vector<Tensor> vals = values_for(*g, &unheld);
      s.pending = false;
      double t0 = now_us();
      s.rng = ctx_.gen;
      execute(*g, vals, s.numbers_or_null(), &unheld);
      // The collection before this return found what the dropped handles held: the run's own
      // stores (freed after their last reader) are not garbage for the byte budget to count.
      if (std::exchange(collected_for_stores_, false))
        ctx_.bytes_at_last_gc = bytes_allocated_total(), ctx_.large_bytes_at_last_gc = large_bytes_allocated_total();
      double t1 = now_us();
      settle(&leaf, vals, cold, g.get());
      // A whole training step whose recording learned what Lua keeps starts compiling after its
      // last cold run (what that run learned included): the next call, as `hot` says, takes it.
      if (cold && !leaf.dynamic && leaf.stepped && leaf.reach_learned && leaf.hits == fn_->opts.hot && !leaf.compiled)
        compile(leaf, *leaf.raw);
      if (leaf.joint && plan_of(*leaf.joint).any) attach_node(joint_of(leaf), *g, vals, needed);
      double t2 = now_us();
      vals.clear();  // the graph's temporaries die with its run
      stats.graph_run_us += (t1 - t0) + (now_us() - t2);
    }
    if (kind == EndKind::Return && report.size() == 1) remember_call(leaf, needed);
  }
  if (kind != EndKind::Return) start_segment(fn_->site(cat("after ", reason, " at ", where), train_));
}

void Recorder::data_size(const std::string& op, const std::string& where) {
  Segment& s = *seg_;
  const std::string reason = cat(op, ": the result size depends on the values");
  if (s.mode != 1) return graph_break(reason + " (dynamic = true makes it a symbolic size)", where, nullptr);
  if (s.ops > 0) {
    end_segment(EndKind::Sync, reason, where, {});
  } else {  // (no graph ends; listed all the same: a call with one never replays without Lua)
    report.push_back(SegmentReport{0, reason, where, "", ""});
    report.back().end = 'S';
  }
  if (logs.graph_breaks) log("graph_breaks", cat(fn_->opts.name, ": sync point at ", where, ": ", reason, " (unbacked)"));
}

void Recorder::graph_break(const std::string& reason, const std::string& where, cr_tensor* needed) {
  if (fn_->opts.fullgraph)
    throw LocatedError(cat(where, ": compile (fullgraph = true): graph break at ", where, ": ", reason));
  std::vector<cr_tensor*> n;
  if (needed) n.push_back(needed);
  end_segment(EndKind::Break, reason, where, n);
}

void Recorder::grad_turned_on(const std::string& where) {
  if (!fn_ || train_) return;
  train_ = ctx_.capture_training = true;
  ctx_.ffi.capturing = 2;
  graph_break("grad mode turned on", where, nullptr);
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

void Recorder::suspend(const std::vector<cr_tensor*>& rets, const std::string& where) {
  fn_->yields = true;
  finish(rets, where);
}

void Recorder::stop() {
  if (ctx_.capture_wants_training) fn_->trains = true;
  ctx_.capture_wants_training = false;
  fn_ = nullptr;
  train_ = ctx_.capture_training = ctx_.capture_lazy = false;
  if (seg_) seg_->reset(), seg_->data_sized.clear(), seg_->data_calls = 0;
  ctx_.ffi.capturing = ctx_.ffi.collect = 0;
  collected_for_stores_ = false;
}

void Recorder::abort() {
  if (!fn_) return;
  std::exception_ptr failed;
  try {
    run_pending();
  } catch (...) {
    failed = std::current_exception();  // (its lazy tensors stay without values)
  }
  stop();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace cr::graph
