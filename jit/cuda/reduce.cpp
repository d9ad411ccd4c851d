// Reduction kernels: the Kernel's outer variables index rows (kept dims), its inner variables
// the elements folded per row. A team of T threads owns a row (T = 1, a warp, or the block), and
// rows are walked grid-stride:
//
//   for (row = first row of this team; row < R; row += teams in the grid)
//     outer variables from row
//     for each stage d (Kernel::analyse: reduction depth)
//       row-level stores of depth d (lane 0 writes)
//       acc = init; for each element c of the row owned by this lane: inner stores, acc = fold
//       acc = team reduction (warp xor-shuffles; + shared memory across warps): every lane has it
//
// Persistent rows (at most kPersistentItems elements a thread): the element loop is unrolled over
// a compile-time count, and loads and op calls that later stages use again stay in registers, so
// softmax / layer_norm read their input once. Longer rows loop and re-read (looped form).
//
// Templates of dynamic graphs know their row count and length only at launch. A template of
// contiguous rows has both forms and picks at run time, from its parameters (uniform over the
// grid; the host picks the same to size the grid):
//   team = row length > kWarpRowMax ? the block : a warp
//   if (row length <= team * kTemplateItems) persistent form (items guarded) else looped form
// Column reductions keep a thread per row, looped.
// Whole-tensor reductions are already split in two kernels by the lowering (lower_reduce.cpp:
// partials per slice, then their fold), which run here as two reduction kernels.
#include <algorithm>
#include <set>

#include "jit/cuda/kernels.hpp"

namespace cr::jit::cuda {

namespace {

bool store_inner(const Kernel& k, const Store& s) {
  bool in = k.inner[size_t(s.expr)];
  for (size_t v = size_t(k.n_outer); v < k.sizes.size(); ++v) in = in || s.addr.coef(v) != 0;
  return in;
}

bool any_access(const Kernel& k, size_t var) {
  for (const Expr& e : k.body.exprs)
    if (e.op == EOp::Load && e.index[0].coef(var) == 1) return true;
  for (const Store& s : k.stores)
    if (s.addr.coef(var) == 1) return true;
  return false;
}

int64_t pow2_at_least(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// Neighbouring rows are neighbours in memory while the elements of a row are not (a column
// reduction): a thread per row reads coalesced.
bool strided_rows(const Kernel& k) {
  bool inner_unit = any_access(k, k.sizes.size() - 1);
  bool outer_unit = k.n_outer > 0 && any_access(k, size_t(k.n_outer - 1));
  return !inner_unit && outer_unit;
}

// Team and block size from the row count R and length C. Returns the team.
int64_t choose_form(KernelWriter& w, int64_t R, int64_t C) {
  CudaKernel& o = w.out;
  int64_t team;
  auto rows_block = [&](int64_t t) { return std::min<int64_t>(256, (R * t + 31) / 32 * 32); };  // few rows: a smaller block
  if ((strided_rows(w.k) && R >= 1024) || (C <= 16 && R >= 4096)) {
    o.form = Form::ReduceThread;  // neighbouring threads read neighbouring rows: coalesced
    team = 1;
    o.block = rows_block(team);
  } else if (C <= 32 * kPersistentItems) {
    o.form = Form::ReduceWarp;
    team = 32;
    o.block = rows_block(team);
  } else {
    o.form = Form::ReduceBlock;
    team = o.block = std::clamp<int64_t>(pow2_at_least((C + kPersistentItems - 1) / kPersistentItems), 128, 1024);
  }
  o.persistent = (C + team - 1) / team <= kPersistentItems;
  return team;
}

// Template rows longer than this get the block as team (kTemplateBlock threads), others a warp;
// a row of at most kTemplateItems a lane stays in registers. Attention's rows of 1024: a warp per
// row keeps 8 rows in flight per block, where the block as team (one row, 4 items a thread,
// barriers between passes) measured 2.2x slower on the H100.
constexpr int64_t kWarpRowMax = 1024;
constexpr int64_t kTemplateBlock = 256;
constexpr int64_t kTemplateItems = 32;

int64_t template_team(int64_t row_size) { return row_size > kWarpRowMax ? kTemplateBlock : 32; }

class ReductionWriter {
 public:
  ReductionWriter(KernelWriter& w) : w_(w), k_(w.k), L_(w.lines), ex_(w.k, w.lines, w.functions) {}

  void write() {
    size_t outer = size_t(k_.n_outer), end = k_.sizes.size();
    CudaKernel& o = w_.out;
    o.rows = product(w_.instance, 0, outer);
    o.row_size = product(w_.instance, outer, end);
    C_ = w_.product_text(outer, end);
    if (w_.dynamic && !strided_rows(k_)) return write_template_rows();
    if (w_.dynamic) {  // column reductions: a thread per row, looped
      o.form = Form::ReduceThread;
      o.block = 256;
      team_ = 1;
    } else {
      team_ = choose_form(w_, o.rows, o.row_size);
    }
    persistent_ = o.persistent;
    team_text_ = cat(team_);
    w_.set_grid(o.block / team_);
    w_.set_index_type();
    items_ = (o.row_size + team_ - 1) / team_;  // (persistent rows: specialised kernels only)
    ragged_ = items_ * team_ != o.row_size;
    L_.add(team_ == 1 ? "const int lane = 0;" : cat("const int lane = threadIdx.x % ", team_, ";"));
    if (o.form == Form::ReduceBlock) shared_partials();
    row_loop(cat(o.block / team_), [this] {
      if (persistent_) plan_cache();
      stages();
    });
  }

 private:
  // A template's rows (see the top): the team and the form are chosen by the row length.
  void write_template_rows() {
    CudaKernel& o = w_.out;
    o.form = Form::ReduceTeam;
    o.block = kTemplateBlock;
    o.persistent = false;  // (per launch: the kernel decides)
    w_.set_grid(o.block / template_team(o.row_size));
    w_.set_index_type();
    L_.add(cat("const ", w_.idx, " C = ", C_, ";  // the row length"));
    C_ = std::string("C");  // (not = "C": GCC 12 warns falsely, -Wrestrict)
    L_.add(cat("const int team = C > ", kWarpRowMax, " ? ", kTemplateBlock, " : 32;"));
    L_.add("const int lane = threadIdx.x % team;");
    shared_partials();
    team_ = 0;  // (known at run time only)
    team_text_ = "team";
    row_loop(cat("(", kTemplateBlock, " / team)"), [this] {
      items_ = kTemplateItems;
      ragged_ = true;
      L_.open(cat("if (C <= team * ", kTemplateItems, ")"));
      persistent_ = true;
      ex_.open_scope();
      plan_cache();
      stages();
      ex_.close_scope();
      L_.close();
      L_.open("else");
      persistent_ = false;
      ex_.open_scope();
      stages();
      ex_.close_scope();
      L_.close();
    });
  }

  // for (row = first row of this team; row < rows; row += teams in the grid) { variables; body }
  template <typename Body>
  void row_loop(const std::string& rows_per_block, Body body) {
    const std::string& idx = w_.idx;
    size_t outer = size_t(k_.n_outer);
    L_.open(cat("for (", idx, " row = ", idx, "(blockIdx.x) * ", rows_per_block, " + ", idx, "(threadIdx.x / ", team_text_, "); row < ",
                w_.product_text(0, outer), "; row += ", idx, "(gridDim.x) * ", rows_per_block, ")"));
    w_.decompose("row", 0, outer, outer);
    body();
    L_.close();
  }

  void shared_partials() {
    for (size_t a = 0; a < k_.accs.size(); ++a)
      L_.add(cat("__shared__ ", cuda_type(cuda_acc_dtype(k_.accs[a])), " red", a, "[", w_.out.block / 32, "];"));
  }

  void stages() {
    for (int d = 0; d <= k_.max_depth; ++d) stage(d);
  }

 private:
  // Inner expressions (loads and op calls) that a later stage uses again: kept per item.
  void plan_cache() {
    std::vector<std::set<int32_t>> used(size_t(k_.max_depth + 1));
    for (int d = 0; d <= k_.max_depth; ++d)
      for (int32_t r : inner_roots(d)) collect(r, used[size_t(d)]);
    first_.assign(k_.body.exprs.size(), -1);
    for (int d = 0; d <= k_.max_depth; ++d)
      for (int32_t i : used[size_t(d)]) {
        const Expr& e = k_.body.exprs[size_t(i)];
        if (first_[size_t(i)] < 0) first_[size_t(i)] = d;
        else if ((e.op == EOp::Load || e.op == EOp::Call) && !cached_.count(i)) cached_.insert(i);
      }
    for (int32_t i : cached_) L_.add(cat(cuda_type(k_.body.exprs[size_t(i)].dtype), " c", i, "[", items_, "];"));
  }
  std::vector<int32_t> inner_roots(int d) const {
    std::vector<int32_t> r;
    for (const Store& s : k_.stores)
      if (k_.depth[size_t(s.expr)] == d && store_inner(k_, s)) r.push_back(s.expr);
    for (const Accumulate& a : k_.accs)
      if (k_.depth[size_t(a.expr)] == d) r.push_back(a.expr);
    return r;
  }
  void collect(int32_t i, std::set<int32_t>& seen) const {
    if (!k_.inner[size_t(i)] || !seen.insert(i).second) return;
    const Expr& e = k_.body.exprs[size_t(i)];
    for (int32_t o : {e.a, e.b, e.c})
      if (o >= 0) collect(o, seen);
  }
  // Row-level values the element loop reads are defined before it.
  void hoist(int32_t i, std::set<int32_t>& seen) {
    if (!seen.insert(i).second) return;
    if (!k_.inner[size_t(i)]) {
      ex_.ref(i);
      return;
    }
    const Expr& e = k_.body.exprs[size_t(i)];
    for (int32_t o : {e.a, e.b, e.c})
      if (o >= 0) hoist(o, seen);
  }

  void stage(int d) {
    for (const Store& s : k_.stores)
      if (k_.depth[size_t(s.expr)] == d && !store_inner(k_, s))
        L_.add(cat("if (lane == 0) p", s.buffer, "[", affine_str(s.addr), "] = ", ex_.ref(s.expr), ";"));
    std::vector<int32_t> roots = inner_roots(d);
    if (roots.empty()) return;
    L_.add(cat("// stage ", d));
    std::vector<size_t> accs;
    for (size_t a = 0; a < k_.accs.size(); ++a)
      if (k_.depth[size_t(k_.accs[a].expr)] == d) {
        accs.push_back(a);
        DType t = cuda_acc_dtype(k_.accs[a]);
        L_.add(cat(cuda_type(t), " acc", a, " = ", literal(reduce_init(k_.accs[a].kind, k_.accs[a].in), t), ";"));
      }
    std::set<int32_t> seen;
    for (int32_t r : roots) hoist(r, seen);
    element_loop(d, accs);
    for (size_t a : accs) team_reduce(a);
  }

  void element_loop(int d, const std::vector<size_t>& accs) {
    const std::string& idx = w_.idx;
    bool persistent = persistent_;
    if (persistent) {
      L_.add("#pragma unroll");
      L_.open(cat("for (int it = 0; it < ", items_, "; ++it)"));
      L_.add(cat("const ", idx, " c = lane + ", idx, "(it) * ", team_text_, ";"));
      if (ragged_) L_.open(cat("if (c < ", C_, ")"));
    } else {
      L_.open(cat("for (", idx, " c = lane; c < ", C_, "; c += ", team_text_, ")"));
    }
    w_.decompose("c", size_t(k_.n_outer), k_.sizes.size(), k_.sizes.size());
    ex_.open_scope();
    if (persistent) {
      ex_.reuse = [this, d](int32_t i) { return cached_.count(i) && first_[size_t(i)] < d ? cat("c", i, "[it]") : std::string(); };
      ex_.computed = [this, d](int32_t i) {
        if (cached_.count(i) && first_[size_t(i)] == d) L_.add(cat("c", i, "[it] = e", i, ";"));
      };
    }
    for (const Store& s : k_.stores)
      if (k_.depth[size_t(s.expr)] == d && store_inner(k_, s)) L_.add(cat("p", s.buffer, "[", affine_str(s.addr), "] = ", ex_.ref(s.expr), ";"));
    for (size_t a : accs) {
      const Accumulate& ac = k_.accs[a];
      std::string x = ex_.ref(ac.expr);
      L_.add(cat("acc", a, " = ", fold_name(ac.kind), "()(acc", a, ", (", cuda_type(cuda_acc_dtype(ac)), ")", x, ");"));
    }
    ex_.close_scope();
    ex_.reuse = nullptr;
    ex_.computed = nullptr;
    if (persistent && ragged_) L_.close();
    L_.close();
  }

  void team_reduce(size_t a) {
    std::string fold = cat(fold_name(k_.accs[a].kind), "()");
    if (team_ == 0)  // a template's team: uniform over the block, so the barriers are safe
      L_.add(cat("acc", a, " = team == 32 ? cr::warp_reduce(acc", a, ", ", fold, ") : cr::block_reduce<", kTemplateBlock, ">(acc", a,
                 ", ", fold, ", red", a, ");"));
    else if (team_ == 32) L_.add(cat("acc", a, " = cr::warp_reduce(acc", a, ", ", fold, ");"));
    else if (team_ > 32) L_.add(cat("acc", a, " = cr::block_reduce<", team_, ">(acc", a, ", ", fold, ", red", a, ");"));
  }

  KernelWriter& w_;
  const Kernel& k_;
  Lines& L_;
  Exprs ex_;
  int64_t team_ = 1, items_ = 1;  // team_ 0: chosen at run time (templates)
  std::string team_text_;         // the team's size in the code
  bool persistent_ = false;
  bool ragged_ = false;  // persistent: the last item of some lanes is past the row
  std::string C_;        // the row length's text
  std::set<int32_t> cached_;
  std::vector<int> first_;
};

}  // namespace

void write_reduction(KernelWriter& w) { ReductionWriter(w).write(); }

}  // namespace cr::jit::cuda
