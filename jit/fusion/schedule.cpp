// The fusion scheduler: grouping (try_join), storing decisions, kernel construction (inlining
// values at the indices their consumers need), loop-dimension collapsing, and the memory plan.
#include "jit/fusion/schedule.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace cr::jit {

namespace {

struct Layout {
  Shape strides;
  int64_t offset = 0;
};

// One group of values being fused into a kernel, over the group variables (the shape of its
// first full-size value; for reductions, the input shape).
struct Group {
  std::vector<int32_t> members;
  std::map<int32_t, std::vector<Affine>> vars;  // member -> its variables over group variables
  Shape sizes;
  std::vector<char> reduced;  // per group variable; empty: no reduction yet
  bool has(int32_t lv) const { return vars.count(lv) != 0; }
};

class Scheduler {
 public:
  Scheduler(LoopGraph lg, const ScheduleTarget& t) : target_(t) { plan_.lg = std::move(lg); }
  Plan run();

 private:
  const LoopValue& val(int32_t lv) const { return plan_.lg.values[size_t(lv)]; }
  Layout layout(int32_t lv) const;
  bool var_map(const Group& g, int32_t lv, std::vector<Affine>* map, std::vector<char>* reduced) const;
  bool try_join(Group& g, int32_t lv);
  size_t last_read_group(const std::vector<Group>& open, int32_t lv) const;
  void close(Group& g);
  Kernel build(const Group& g, bool check_only, const std::vector<char>& stored);
  void finish_kernel(Kernel& k, const Group& g);
  void plan_memory();
  int32_t buffer_for(int32_t lv);
  int32_t special_buffer(bool Buffer::*kind, int64_t n);

  Plan plan_;
  ScheduleTarget target_;
  std::vector<Group> groups_;
  std::vector<int32_t> group_of_;  // loop value -> group index (-1: none)
  std::string last_refusal_;       // why the last try_join failed (for the fusion log)
};

// ---- layouts and views ------------------------------------------------------------------------

Layout Scheduler::layout(int32_t lv) const {
  const LoopValue& v = val(lv);
  if (v.kind == LKind::Buffer || v.kind == LKind::View) return {v.strides, v.offset};
  if (v.gv >= 0) {
    const graph::ValueMeta& m = plan_.lg.g->values[size_t(v.gv)].meta;
    return {m.strides, m.offset};
  }
  return {contiguous_strides(v.sizes), 0};
}

// The element offset of logical index idx (one Affine per dim) in layout l.
Affine address_of(const Layout& l, const std::vector<Affine>& idx) {
  Affine addr;
  addr.c = l.offset;
  for (size_t d = 0; d < idx.size(); ++d) {
    addr.c += l.strides[d] * idx[d].c;
    for (size_t w = 0; w < idx[d].k.size(); ++w)
      if (idx[d].k[w]) addr.add(w, l.strides[d] * idx[d].k[w]);
  }
  return addr;
}

// The index into computed value `root` that view element `idx` reads, when the view only
// selects, broadcasts, permutes or offsets root's dims (a reshape that merges dims does not).
bool remap_view(const LoopValue& view, const Layout& rl, const Shape& rsizes, const std::vector<Affine>& idx,
                std::vector<Affine>* out) {
  size_t nd = rsizes.size();
  out->assign(nd, Affine{});
  std::vector<int64_t> hi(nd, 0);
  int64_t rem = view.offset - rl.offset;
  std::vector<size_t> order(nd);
  for (size_t d = 0; d < nd; ++d) order[d] = d;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rl.strides[a] > rl.strides[b]; });
  for (size_t d : order) {
    if (rsizes[d] <= 1 || rl.strides[d] <= 0) continue;
    out->at(d).c = rem / rl.strides[d];
    rem -= out->at(d).c * rl.strides[d];
    hi[d] = out->at(d).c;
  }
  if (rem != 0) return false;
  for (size_t k = 0; k < view.sizes.size(); ++k) {
    if (view.sizes[k] <= 1 || view.strides[k] == 0) continue;
    size_t d = 0;
    while (d < nd && !(rsizes[d] > 1 && rl.strides[d] == view.strides[k])) ++d;
    if (d == nd) return false;
    Affine& a = out->at(d);
    const Affine& x = idx[k];
    a.c += x.c;
    for (size_t w = 0; w < x.k.size(); ++w)
      if (x.k[w]) a.add(w, x.k[w]);
    hi[d] += view.sizes[k] - 1;
  }
  for (size_t d = 0; d < nd; ++d)
    if (hi[d] >= std::max<int64_t>(rsizes[d], 1)) return false;
  return true;
}

// ---- kernel construction --------------------------------------------------------------------

// Builds a kernel body: values of the group are computed at the index each consumer needs
// (memoised), values from elsewhere are loaded from their buffers. Throws Error when a value
// cannot be computed in place (then the candidate does not join the group).
class Builder {
 public:
  Builder(const Plan& plan, const Group& g, Kernel& k, std::function<Layout(int32_t)> layout,
          std::function<int32_t(int32_t)> slot)
      : plan_(plan), g_(g), k_(k), layout_(std::move(layout)), slot_(std::move(slot)) {}

  int32_t value(int32_t lv, const std::vector<Affine>& idx) {
    std::string key = cat(lv, ":");
    for (const Affine& a : idx) {
      key += cat(a.c, "[");
      for (int64_t x : a.k) key += cat(x, ",");
      key += "]";
    }
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    int32_t e = compute(lv, idx);
    memo_[key] = e;
    return e;
  }
  std::map<int32_t, int32_t> reduced_expr;  // member reduction -> its Reduced expr

 private:
  const LoopValue& val(int32_t lv) const { return plan_.lg.values[size_t(lv)]; }
  int32_t load(int32_t lv, const Layout& l, const std::vector<Affine>& idx) {
    Expr e{EOp::Load, val(lv).dtype};
    e.index = {address_of(l, idx)};
    e.value = slot_(lv);
    return k_.body.add(std::move(e));
  }
  int32_t compute(int32_t lv, const std::vector<Affine>& idx) {
    const LoopValue& v = val(lv);
    if (v.kind == LKind::View) {
      int32_t root = v.root;
      if (root < 0) throw Error("a view without a root");
      if (!g_.has(root)) return load(root, {v.strides, v.offset}, idx);
      std::vector<Affine> ridx;
      if (!remap_view(v, layout_(root), val(root).sizes, idx, &ridx)) throw Error("a view that is not an index map of its producer");
      return value(root, ridx);
    }
    if (!g_.has(lv)) return load(lv, layout_(lv), idx);
    if (v.kind == LKind::Reduction) {
      auto it = reduced_expr.find(lv);
      if (it == reduced_expr.end()) throw Error("a reduction read before it is computed");
      for (size_t d = 0; d < v.out_vars.size(); ++d) {
        Affine want = v.out_vars[d] < 0 ? Affine{} : Affine::var(size_t(v.out_vars[d]));
        if (!(idx[d] == want)) throw Error("a reduction read at another row");
      }
      return it->second;
    }
    return inline_body(v.body, idx);
  }

 public:
  // body's variables are idx (over the kernel's variables)
  int32_t inline_body(const Body& body, const std::vector<Affine>& idx) {
    std::vector<int32_t> map(body.exprs.size(), -1);
    for (size_t i = 0; i < body.exprs.size(); ++i) {
      const Expr& e = body.exprs[i];
      if (e.gather()) {
        map[i] = gather(e, map[size_t(e.a)], idx);
        continue;
      }
      if (e.op == EOp::Load) {
        std::vector<Affine> sub;
        for (const Affine& a : e.index) sub.push_back(substitute(a, idx));
        int32_t r = value(e.value, sub);
        // a load keeps the value's dtype; the body casts after it
        map[i] = r;
        continue;
      }
      Expr c = e;
      if (c.op == EOp::Index) c.index = {substitute(e.index[0], idx)};
      if (c.a >= 0) c.a = map[size_t(c.a)];
      if (c.b >= 0) c.b = map[size_t(c.b)];
      if (c.c >= 0) c.c = map[size_t(c.c)];
      map[i] = k_.body.add(std::move(c));
    }
    return map[size_t(body.root)];
  }
  bool gathers = false;  // the kernel has a gather (it takes the check word)

 private:
  // A gather of a value from memory (never computed here: its position is data), its own dims
  // read at idx but for the gathered dim, whose position is the kernel expression `at`.
  int32_t gather(const Expr& e, int32_t at, const std::vector<Affine>& idx) {
    int32_t src = e.value;
    Layout l = layout_(src);
    if (val(src).kind == LKind::View) {
      l = {val(src).strides, val(src).offset};
      src = val(src).root;
      if (src < 0) throw Error("a view without a root");
    }
    if (g_.has(src)) throw Error("a gather of a value computed in the same kernel");
    std::vector<Affine> sub;
    for (size_t d = 0; d < e.index.size(); ++d) sub.push_back(int32_t(d) == e.dim ? Affine{} : substitute(e.index[d], idx));
    Expr g = e;
    g.index = {address_of(l, sub)};
    g.value = slot_(src);
    g.a = at;
    g.stride = l.strides[size_t(e.dim)];
    gathers = true;
    return k_.body.add(std::move(g));
  }

  const Plan& plan_;
  const Group& g_;
  Kernel& k_;
  std::function<Layout(int32_t)> layout_;
  std::function<int32_t(int32_t)> slot_;
  std::map<std::string, int32_t> memo_;
};

}  // namespace

// ---- grouping ---------------------------------------------------------------------------------

// How value lv's variables map onto the group's; false when its iteration space does not fit.
bool Scheduler::var_map(const Group& g, int32_t lv, std::vector<Affine>* map, std::vector<char>* reduced) const {
  const LoopValue& v = val(lv);
  map->clear();
  *reduced = g.reduced;
  if (v.kind == LKind::Reduction) {
    if (!g.members.empty() && g.sizes != v.in_sizes) return false;
    if (!g.reduced.empty() && g.reduced != v.reduced) return false;
    *reduced = v.reduced;
    for (size_t d = 0; d < v.in_sizes.size(); ++d) map->push_back(Affine::var(d));
    return true;
  }
  if (g.members.empty() || v.sizes == g.sizes) {
    for (size_t d = 0; d < v.sizes.size(); ++d) map->push_back(Affine::var(d));
    return true;
  }
  auto squeeze = [](const Shape& s) {
    Shape r;
    for (int64_t n : s)
      if (n != 1) r.push_back(n);
    return r;
  };
  if (g.reduced.empty()) {  // the same points but for dims of size 1 ({1, 768} and {1, 1, 768}): dim by dim
    if (squeeze(v.sizes) != squeeze(g.sizes)) return false;
    size_t gd = 0;
    for (int64_t n : v.sizes) {
      if (n == 1) {
        map->push_back(Affine{});
        continue;
      }
      while (g.sizes[gd] == 1) ++gd;
      map->push_back(Affine::var(gd++));
    }
    return true;
  }
  Shape kept, squeezed;
  for (size_t d = 0; d < g.sizes.size(); ++d) {
    kept.push_back(g.reduced[d] ? 1 : g.sizes[d]);
    if (!g.reduced[d]) squeezed.push_back(g.sizes[d]);
  }
  if (v.sizes == kept) {
    for (size_t d = 0; d < kept.size(); ++d) map->push_back(g.reduced[d] ? Affine{} : Affine::var(d));
    return true;
  }
  if (v.sizes == squeezed) {
    for (size_t d = 0; d < g.sizes.size(); ++d)
      if (!g.reduced[d]) map->push_back(Affine::var(d));
    return true;
  }
  return false;
}

namespace {
// A reduction whose iteration space is the pointwise group's with one dim d cut into (p, j) (a
// split of lower_reduce.cpp) may join it: the members' variables are rewritten over the cut space
// (old variable d = size(j) p + j), the same points in the same order, so the producer fuses.
bool cut_space(Group& g, const Shape& to) {
  if (g.members.empty() || !g.reduced.empty() || to.size() != g.sizes.size() + 1) return false;
  for (size_t d = 0; d < g.sizes.size(); ++d) {
    Shape want = g.sizes;
    want[d] = to[d];
    want.insert(want.begin() + std::ptrdiff_t(d) + 1, to[d + 1]);
    if (want != to || to[d] * to[d + 1] != g.sizes[d]) continue;
    std::vector<Affine> vars;
    for (size_t v = 0; v < g.sizes.size(); ++v) {
      Affine a;
      if (v == d) a.add(d, to[d + 1]), a.add(d + 1, 1);
      else a = Affine::var(v < d ? v : v + 1);
      vars.push_back(a);
    }
    for (auto& [member, map] : g.vars)
      for (Affine& a : map) a = substitute(a, vars);
    g.sizes = to;
    return true;
  }
  return false;
}
}  // namespace

// The first of the open groups value lv may join: the last one holding a value it reads.
size_t Scheduler::last_read_group(const std::vector<Group>& open, int32_t lv) const {
  size_t first = 0;
  std::vector<int32_t> todo = {lv};
  std::set<int32_t> seen;
  while (!todo.empty()) {  // (through the loads of its body, and the roots of views)
    const int32_t v = todo.back();
    todo.pop_back();
    if (v < 0 || !seen.insert(v).second) continue;
    const LoopValue& x = val(v);
    if (v != lv) {
      for (size_t i = open.size(); i-- > first;)
        if (open[i].has(v)) first = i;
      if (x.kind == LKind::View) todo.push_back(x.root);
      continue;
    }
    for (const Expr& e : x.body.exprs)
      if (e.op == EOp::Load) todo.push_back(e.value);
  }
  return first;
}

bool Scheduler::try_join(Group& g, int32_t lv) {
  if (int(g.members.size()) >= kMaxNodesPerKernel) return false;
  std::vector<Affine> map;
  std::vector<char> reduced;
  Group trial = g;
  if (val(lv).kind == LKind::Reduction && trial.sizes != val(lv).in_sizes) cut_space(trial, val(lv).in_sizes);
  if (!var_map(trial, lv, &map, &reduced)) return false;
  if (trial.members.empty()) trial.sizes = val(lv).kind == LKind::Reduction ? val(lv).in_sizes : val(lv).sizes;
  trial.reduced = reduced;
  trial.members.push_back(lv);
  trial.vars[lv] = map;
  try {
    build(trial, true, {});
  } catch (const Error& e) {
    last_refusal_ = e.what();
    return false;
  }
  g = std::move(trial);
  return true;
}

Kernel Scheduler::build(const Group& g, bool check_only, const std::vector<char>& stored) {
  Kernel k;
  k.sizes = g.sizes;
  std::map<int32_t, int32_t> slots;
  auto slot = [&](int32_t lv) {
    if (check_only) return int32_t(0);
    int32_t b = plan_.buffer_of[size_t(lv)];
    if (b < 0) throw Error(cat("internal: no buffer for loop value ", lv));
    auto it = slots.find(b);
    if (it != slots.end()) return it->second;
    k.buffers.push_back(b);
    return slots[b] = int32_t(k.buffers.size() - 1);
  };
  Builder bld(plan_, g, k, [this](int32_t lv) { return layout(lv); }, slot);
  for (int32_t lv : g.members) {
    const LoopValue& v = val(lv);
    const std::vector<Affine>& map = g.vars.at(lv);
    int32_t e = bld.inline_body(v.body, map);
    if (v.kind == LKind::Reduction) {
      k.accs.push_back(Accumulate{v.reduce, k.body.exprs[size_t(e)].dtype, v.acc_dtype, e});
      Expr r{EOp::Reduced, v.acc_dtype};
      r.acc = int32_t(k.accs.size() - 1);
      int32_t re = k.body.add(std::move(r));
      bld.reduced_expr[lv] = k.body.add(Expr{EOp::Cast, v.dtype, re});
      e = bld.reduced_expr[lv];
    }
    if (check_only || !stored[size_t(lv)]) continue;
    // the store: at the value's own index, over the group variables
    std::vector<Affine> idx;
    if (v.kind == LKind::Reduction)
      for (int u : v.out_vars) idx.push_back(u < 0 ? Affine{} : Affine::var(size_t(u)));
    else
      idx = map;
    k.stores.push_back(Store{slot(lv), address_of(layout(lv), idx), e});
  }
  if (bld.gathers && !check_only) {
    k.check = int32_t(k.buffers.size());
    k.buffers.push_back(special_buffer(&Buffer::check, kCheckWords));
  }
  for (const Expr& e : k.body.exprs)
    if (e.op == EOp::Runtime) k.draws = std::max(k.draws, e.site / 2 + 1);
  if (k.draws > 0 && !check_only) {
    k.runtime = int32_t(k.buffers.size());
    k.buffers.push_back(special_buffer(&Buffer::runtime, int64_t(2 * plan_.lg.draws.size() + 1)));  // (+ jit/program.cpp's base)
  }
  const bool numbers = std::any_of(k.body.exprs.begin(), k.body.exprs.end(), [](const Expr& e) { return e.op == EOp::Number; });
  if (numbers && !check_only) {
    k.numbers = int32_t(k.buffers.size());
    k.buffers.push_back(special_buffer(&Buffer::numbers, int64_t(plan_.lg.numbers.size())));
  }
  k.values = g.members;
  return k;
}

// ---- kernel shape: variable order, collapsing, chunking ---------------------------------------

namespace {

// Every affine expression of a kernel (load and store addresses, index values): reordering and
// merging variables rewrite them all, and merge only where every one allows it.
std::vector<Affine*> affines(Kernel& k) {
  std::vector<Affine*> r;
  for (Expr& e : k.body.exprs)
    if (e.op == EOp::Load || e.op == EOp::Index) r.push_back(&e.index[0]);
  for (Store& s : k.stores) r.push_back(&s.addr);
  return r;
}

// Reorders variables: perm[new] = old.
void permute_vars(Kernel& k, const std::vector<size_t>& perm) {
  for (Affine* a : affines(k)) {
    Affine r;
    r.c = a->c;
    for (size_t nw = 0; nw < perm.size(); ++nw)
      if (a->coef(perm[nw])) r.add(nw, a->coef(perm[nw]));
    *a = r;
  }
  Shape s;
  for (size_t p : perm) s.push_back(k.sizes[p]);
  k.sizes = s;
}

// Merges variable v with v + 1 where every address walks them as one (k[v] = k[v+1] * size).
bool try_merge(Kernel& k, size_t v) {
  std::vector<Affine*> as = affines(k);
  for (Affine* a : as)
    if (a->coef(v) != a->coef(v + 1) * k.sizes[v + 1]) return false;
  for (Affine* a : as) {
    Affine r;
    r.c = a->c;
    for (size_t w = 0; w < k.sizes.size(); ++w) {
      if (w == v || !a->coef(w)) continue;
      r.add(w > v ? w - 1 : w, a->coef(w));
    }
    *a = r;
  }
  k.sizes[v] *= k.sizes[v + 1];
  Shape s;
  for (size_t w = 0; w < k.sizes.size(); ++w)
    if (w != v + 1) s.push_back(k.sizes[w]);
  k.sizes = s;
  return true;
}

void drop_var(Kernel& k, size_t v) {  // a size-1 variable
  for (Affine* a : affines(k)) {
    Affine r;
    r.c = a->c;
    for (size_t w = 0; w < k.sizes.size(); ++w)
      if (w != v && a->coef(w)) r.add(w > v ? w - 1 : w, a->coef(w));
    *a = r;
  }
  Shape s;
  for (size_t w = 0; w < k.sizes.size(); ++w)
    if (w != v) s.push_back(k.sizes[w]);
  k.sizes = s;
}

}  // namespace

void Scheduler::finish_kernel(Kernel& k, const Group& g) {
  bool reduction = !g.reduced.empty();
  // outer (kept) variables first, then the reduced ones; without reductions only the last is inner
  std::vector<size_t> perm;
  for (size_t v = 0; v < g.sizes.size(); ++v)
    if (!reduction || !g.reduced[v]) perm.push_back(v);
  k.n_outer = reduction ? int(perm.size()) : std::max(0, int(g.sizes.size()) - 1);
  for (size_t v = 0; v < g.sizes.size(); ++v)
    if (reduction && g.reduced[v]) perm.push_back(v);
  permute_vars(k, perm);
  // size-1 variables go (not in dynamic graphs, where the size may be 1 only this time), and
  // neighbours of one class merge when every address allows it
  const bool dynamic = plan_.lg.g && plan_.lg.g->dynamic;
  for (size_t v = k.sizes.size(); v-- > 0 && !dynamic;) {
    if (k.sizes[v] != 1) continue;
    if (int(v) < k.n_outer) --k.n_outer;
    drop_var(k, v);
  }
  for (size_t v = 0; v + 1 < k.sizes.size();) {
    bool same_class = reduction ? (int(v) < k.n_outer) == (int(v + 1) < k.n_outer) : true;
    if (same_class && try_merge(k, v)) {
      if (int(v) < k.n_outer) --k.n_outer;
      continue;
    }
    ++v;
  }
  if (!reduction) k.n_outer = std::max(0, int(k.sizes.size()) - 1);
  if (int(k.sizes.size()) == k.n_outer) k.sizes.push_back(1);  // one inner variable at least
  // pointwise kernels with few rows cut the innermost loop into chunks for the threads (always
  // in dynamic graphs, with a chunk that may cover the row: the choice must not depend on sizes)
  int64_t outer = 1;
  for (int v = 0; v < k.n_outer; ++v) outer *= k.sizes[size_t(v)];
  const int64_t block = target_.block;
  int64_t inner = k.sizes.back(), target = 8 * int64_t(std::max(target_.threads, 1));
  if (block > 0 && !reduction && int(k.sizes.size()) == k.n_outer + 1 && (dynamic || (outer < target && inner > 4 * block))) {
    int64_t per_row = (target + std::max<int64_t>(outer, 1) - 1) / std::max<int64_t>(outer, 1);
    int64_t chunk = std::max<int64_t>(4 * block, (inner + per_row - 1) / per_row);
    chunk = (chunk + block - 1) / block * block;
    if (chunk < inner || dynamic) k.chunk = chunk;
  }
  k.analyse();
}

// ---- the plan ---------------------------------------------------------------------------------

// The plan's check word, run values or numbers (one for all its kernels): n 64-bit words,
// provided by the program.
int32_t Scheduler::special_buffer(bool Buffer::*kind, int64_t n) {
  for (size_t b = 0; b < plan_.buffers.size(); ++b)
    if (plan_.buffers[b].*kind) return int32_t(b);
  Buffer b;
  b.*kind = true;
  b.sizes = {n};
  b.strides = {1};
  b.dtype = DType::i64;
  plan_.buffers.push_back(b);
  return int32_t(plan_.buffers.size() - 1);
}

int32_t Scheduler::buffer_for(int32_t lv) {
  if (plan_.buffer_of[size_t(lv)] >= 0) return plan_.buffer_of[size_t(lv)];
  const LoopValue& v = val(lv);
  Buffer b;
  b.lv = lv;
  b.gv = v.gv;
  b.computed = v.kind == LKind::Pointwise || v.kind == LKind::Reduction;
  b.sizes = v.sizes;
  Layout l = layout(lv);
  b.strides = l.strides;
  b.offset = l.offset;
  b.dtype = v.dtype;
  plan_.buffers.push_back(b);
  return plan_.buffer_of[size_t(lv)] = int32_t(plan_.buffers.size() - 1);
}

void Scheduler::close(Group& g) {
  if (g.members.empty()) return;
  for (int32_t m : g.members) group_of_[size_t(m)] = int32_t(groups_.size());
  groups_.push_back(std::move(g));
  g = Group{};
}

Plan Scheduler::run() {
  LoopGraph& lg = plan_.lg;
  group_of_.assign(lg.values.size(), -1);
  std::vector<std::pair<bool, int32_t>> order;  // (is group, group index or graph node)
  // The groups since the last external step, in launch order. A value joins the latest that
  // takes it, or an earlier one when it reads nothing of the later ones (its kernel runs first):
  // {1}-sized index arithmetic and the {768} chain of an embedding no longer alternate kernels.
  std::vector<Group> open;
  auto close_open = [&] {
    for (Group& g : open) {
      order.push_back({true, int32_t(groups_.size())});
      close(g);
    }
    open.clear();
  };
  for (const LStep& s : lg.steps) {
    if (s.external) {
      close_open();
      order.push_back({false, s.node});
      continue;
    }
    const size_t after = last_read_group(open, s.value);  // (it must join this group or a later one)
    bool joined = false;
    for (size_t i = open.size(); i-- > after && !joined;) joined = try_join(open[i], s.value);
    if (joined) continue;
    if (!open.empty())
      plan_.log.push_back(cat(lg.values[size_t(s.value)].graph_node >= 0 ? lg.g->nodes[size_t(lg.values[size_t(s.value)].graph_node)].def().name : "value",
                              ": starts a new kernel (its iteration space or its reads do not fit the open ones)"));
    open.emplace_back();
    if (!try_join(open.back(), s.value))
      throw Error(cat("internal: loop value ", s.value, " fits no kernel: ", last_refusal_));
  }
  close_open();

  // What is stored: graph outputs, and anything read outside its group (through views too).
  std::vector<char> stored(lg.values.size(), 0), read(lg.values.size(), 0);
  auto root = [&](int32_t lv) { return lv >= 0 && lg.values[size_t(lv)].kind == LKind::View ? lg.values[size_t(lv)].root : lv; };
  auto need = [&](int32_t lv) {
    if ((lv = root(lv)) >= 0) stored[size_t(lv)] = read[size_t(lv)] = 1;
  };
  for (int32_t gv : lg.g->outputs) need(lg.of_graph[size_t(gv)]);
  for (const graph::Graph::Alias& a : lg.g->aliases) need(lg.of_graph[size_t(a.kept)]);
  for (const LStep& s : lg.steps) {
    if (!s.external) {
      const LoopValue& v = lg.values[size_t(s.value)];
      for (const Expr& e : v.body.exprs) {
        if (e.op != EOp::Load) continue;
        int32_t src = root(e.value);
        if (src >= 0) read[size_t(src)] = 1;
        if (src >= 0 && group_of_[size_t(src)] != group_of_[size_t(s.value)]) stored[size_t(src)] = 1;
      }
      continue;
    }
    for (const graph::Arg& a : lg.g->nodes[size_t(s.node)].args) {
      if (a.tag == kTensor) need(lg.of_graph[size_t(a.value)]);
      for (int32_t v : a.values) need(lg.of_graph[size_t(v)]);
    }
  }
  // A gather nothing reads is in the graph for its index check (graph::fails_on_values): stored,
  // so that a kernel computes it and checks its indices as eager does.
  for (const LStep& s : lg.steps) {
    if (s.external || read[size_t(s.value)]) continue;
    const int32_t node = lg.values[size_t(s.value)].graph_node;
    if (node >= 0 && graph::fails_on_values(*lg.g, lg.g->nodes[size_t(node)])) stored[size_t(s.value)] = 1;
  }
  plan_.buffer_of.assign(lg.values.size(), -1);
  for (size_t lv = 0; lv < lg.values.size(); ++lv) {
    LKind kind = lg.values[lv].kind;
    if (kind == LKind::Buffer || (stored[lv] && kind != LKind::View)) buffer_for(int32_t(lv));
  }
  for (auto [is_group, id] : order) {
    PlanStep st;
    if (is_group) {
      const Group& g = groups_[size_t(id)];
      Kernel k = build(g, false, stored);
      finish_kernel(k, g);
      k.name = cat("k", plan_.kernels.size());
      plan_.log.push_back(cat(k.name, ": ", g.members.size(), " loop values, ", k.stores.size(), " stored, ",
                              k.accs.size(), " reductions, loops ", shape_str(k.sizes), " (", k.n_outer, " outer)"));
      st.kernel = int32_t(plan_.kernels.size());
      plan_.kernels.push_back(std::move(k));
    } else {
      st.node = id;
    }
    plan_.steps.push_back(st);
  }
  for (const std::string& n : lg.notes) plan_.log.push_back(n);
  plan_memory();
  return std::move(plan_);
}

// Temporaries (stored values that are not graph outputs) are released after their last reader.
void Scheduler::plan_memory() {
  std::vector<char> keep(plan_.buffers.size(), 0);
  for (size_t b = 0; b < plan_.buffers.size(); ++b) {
    const Buffer& buf = plan_.buffers[b];
    if (!buf.computed || buf.gv >= 0) keep[b] = 1;  // Lua may hold every graph value's tensor
  }
  std::vector<int> last(plan_.buffers.size(), -1);
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    const PlanStep& s = plan_.steps[i];
    if (s.kernel >= 0)
      for (int32_t b : plan_.kernels[size_t(s.kernel)].buffers) last[size_t(b)] = int(i);
  }
  for (size_t b = 0; b < plan_.buffers.size(); ++b)
    if (!keep[b] && last[b] >= 0) plan_.steps[size_t(last[b])].release.push_back(int32_t(b));
}

Plan schedule(LoopGraph lg, const ScheduleTarget& target) { return Scheduler(std::move(lg), target).run(); }

}  // namespace cr::jit
