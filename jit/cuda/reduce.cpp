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
// Templates of dynamic graphs know their row count and length only at launch. Their form is
// that of a specialised kernel for the power of 2 at or above the instance's row length (its
// bucket; rows up to 512 share one), with every element checked against the actual length (and
// an unchecked copy for rows of exactly the bucket's length): the bucket is part of the
// source and so of the cache key. The row count, which is what varies in a dynamic batch, never
// changes the source; a row length that grows compiles new kernels each time it doubles (counted
// in T.compiler.stats().kernels_compiled). Column reductions split each row over a team of lanes,
// one per warp, a warp reading 32 neighbouring rows (column_team): specialised ones when their
// rows are too few to fill the GPU, templates as for kTemplateColumns rows, looped.

#include <algorithm>
#include <cstdlib>
#include <limits>
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

// A row length no limit of column_team applies to: a template's rows, whose code may not depend on it.
constexpr int64_t kAnyLength = std::numeric_limits<int64_t>::max();

// Lanes per row of a column reduction (strided rows) of R rows of C: enough for 32-row blocks to
// fill the GPU, each lane folding 16 elements or more; 1: a thread per row. Element-wise stores
// (a bias gradient's fused pointwise producer) are written by the lane that computes them.
int64_t column_team(const KernelWriter& w, int64_t R, int64_t C) {
  if (!strided_rows(w.k) || w.k.accs.empty()) return 1;
  const int64_t want = int64_t(w.target.sm_count) * w.target.max_threads_per_sm, blocks = (R + 31) / 32;
  int64_t lane_bytes = 0;  // (the partials' shared memory, 32 rows a lane: under 32 KiB)
  for (const Accumulate& a : w.k.accs) lane_bytes += 32 * int64_t(dtype_size(cuda_acc_dtype(a)));
  int64_t team = 1;
  while (team < 32 && blocks * 32 * team < want && C >= 32 * team && 2 * team * lane_bytes <= (32 << 10)) team *= 2;
  return team;
}

// Passes over the row: the stages that read its elements (folds, and stores of whole rows).
// A row sum makes one; softmax and layer_norm three.
int row_passes(const Kernel& k) {
  std::set<int32_t> depths;
  for (const Accumulate& a : k.accs) depths.insert(k.depth[size_t(a.expr)]);
  for (const Store& s : k.stores)
    if (store_inner(k, s)) depths.insert(k.depth[size_t(s.expr)]);
  return int(depths.size());
}

// Team and block size from the row count R and length C. Returns the team.
int64_t choose_form(KernelWriter& w, int64_t R, int64_t C) {
  CudaKernel& o = w.out;
  const int64_t items = kPersistentItems;  // (of a row a thread keeps in registers at most)
  int64_t team;
  // few rows: a smaller block (at least a warp: zero rows, an empty input, still launch one)
  auto rows_block = [&](int64_t t) { return std::clamp<int64_t>((R * t + 31) / 32 * 32, 32, 256); };
  if (const KernelConfig& cfg = w.config; cfg.team > 0) {  // autotuning's choice
    team = cfg.team;
    o.form = team == 1 ? Form::ReduceThread : team == 32 ? Form::ReduceWarp : Form::ReduceBlock;
    o.block = team > 32 ? team : std::clamp<int64_t>(team * std::max<int64_t>(1, cfg.rows_per_block), 32, 1024);
  } else if (const int64_t g = column_team(w, R, C); g > 1) {
    o.form = Form::ReduceColumns;  // a warp reads element c of 32 neighbouring rows
    team = g;
    o.block = 32 * g;
  } else if ((strided_rows(w.k) && R >= 1024) || (C <= 16 && R >= 4096)) {
    o.form = Form::ReduceThread;  // neighbouring threads read neighbouring rows: coalesced
    team = 1;
    o.block = rows_block(team);
  } else if (C <= 32 * kPersistentItems) {
    o.form = Form::ReduceWarp;
    team = 32;
    o.block = rows_block(team);
  } else {
    // A block per row, 16 items a lane (teams of up to 1024; rows longer than 16384 loop); a
    // kernel of several passes (softmax, layer_norm) takes teams from 64 rather than 128. A block
    // per row reads as fast as more items a lane, and 16 items compile in a third of 64's time
    // (bench/RESULTS.md H32).
    const bool several = row_passes(w.k) > 1;
    o.form = Form::ReduceBlock;
    team = o.block = std::clamp<int64_t>(pow2_at_least((C + items - 1) / items), several ? 64 : 128, 1024);
  }
  o.persistent = (C + team - 1) / team <= items;
  return team;
}

// The form of a template for its instance's row length C (see the top): choose_form's for rows
// of the bucket, as if they were many (the row count must not change the code). Returns the team.
// One form for all lengths was 1.3-2.4x slower than specialised kernels (bench/RESULTS.md H35).
// Rows up to kSmallRows share one bucket (a warp, 16 checked items a lane): a sequence that grows
// from 1 (a KV cache's attention rows) compiles once until it passes it, not at every doubling.
constexpr int64_t kSmallRows = 32 * kPersistentItems;

int64_t bucket(int64_t C) { return std::max(pow2_at_least(C), kSmallRows); }

// The row count a template's column reduction is written for (a thread a row left a bias
// gradient of a few hundred columns to as many threads, each folding every row of the batch).
constexpr int64_t kTemplateColumns = 1024;

int64_t template_form(KernelWriter& w, int64_t C) { return choose_form(w, int64_t(1) << 20, bucket(C)); }

// Block-per-row grids reach this many waves of resident blocks (a block per row up to there, so
// the hardware balances the last wave; see choose_form), then walk the rows grid-stride.
constexpr int64_t kBlockRowWaves = 32;

class ReductionWriter {
 public:
  ReductionWriter(KernelWriter& w) : w_(w), k_(w.k), L_(w.lines), ex_(w.k, w.lines, w.functions) {}

  void write() {
    size_t outer = size_t(k_.n_outer), end = k_.sizes.size();
    CudaKernel& o = w_.out;
    o.rows = product(w_.instance, 0, outer);
    o.row_size = product(w_.instance, outer, end);
    C_ = w_.product_text(outer, end);
    if (!w_.dynamic) {
      team_ = choose_form(w_, o.rows, o.row_size);
      cluster_ = cluster_size(o);
      if (cluster_ > 1) {  // (a team of the cluster's threads: lane across its blocks)
        team_ = o.block * cluster_;
        o.persistent = (o.row_size + team_ - 1) / team_ <= kPersistentItems;
        o.cluster = cluster_;
      }
    } else if (strided_rows(k_)) {
      // Column reductions, looped: a team of lanes a row as for kTemplateColumns long rows (the
      // code depends on no size; a bias gradient's rows are few, their length varies).
      team_ = column_team(w_, kTemplateColumns, kAnyLength);
      o.form = team_ > 1 ? Form::ReduceColumns : Form::ReduceThread;
      o.block = team_ > 1 ? 32 * team_ : 256;
      o.persistent = false;
    } else {
      team_ = template_form(w_, o.row_size);
    }
    o.splittable = !w_.dynamic && o.form == Form::ReduceBlock && one_pass() && cluster_ == 1;
    split_ = o.splittable ? std::max<int64_t>(1, w_.config.split) : 1;
    if (!w_.dynamic && o.form == Form::ReduceColumns) split_ = column_split(o.rows, o.row_size);
    if (split_ > 1) o.persistent = false;  // (a block loops over its slice)
    persistent_ = o.persistent;
    w_.set_grid(std::max<int64_t>(1, o.block / team_), o.form == Form::ReduceBlock ? kBlockRowWaves : 1);
    if (split_ > 1) o.grid = (o.form == Form::ReduceColumns ? (o.rows + 31) / 32 : o.rows) * split_;
    o.split = split_;
    w_.set_index_type();
    // (a template's persistent rows: its bucket's items, each checked against the row length)
    items_ = w_.dynamic ? bucket(o.row_size) / team_ : (o.row_size + team_ - 1) / team_;
    ragged_ = w_.dynamic || items_ * team_ != o.row_size;
    vec_ = vector_group();
    if (o.form == Form::ReduceColumns) {
      columns_loop();
    } else {
      L_.add(team_ == 1      ? std::string("const int lane = 0;")
             : cluster_ > 1 ? cat("const int lane = int(cr::cluster_rank()) * ", o.block, " + int(threadIdx.x);")
                            : cat("const int lane = threadIdx.x % ", team_, ";"));
      if (o.form == Form::ReduceBlock) shared_partials();
      if (split_ > 1) return split_rows();
      const std::string& idx = w_.idx;
      if (cluster_ > 1)  // (a cluster a row: every block of it walks the same rows)
        L_.open(cat("for (", idx, " row = ", idx, "(blockIdx.x) / ", cluster_, "; row < ", w_.product_text(0, outer),
                    "; row += ", idx, "(gridDim.x) / ", cluster_, ")"));
      else
        L_.open(cat("for (", idx, " row = ", idx, "(blockIdx.x) * ", o.block / team_, " + ", idx, "(threadIdx.x / ",
                    team_, "); row < ", w_.product_text(0, outer), "; row += ", idx, "(gridDim.x) * ", o.block / team_,
                    ")"));
    }
    w_.decompose("row", 0, outer, outer);
    if (w_.dynamic && persistent_) {  // rows of exactly the bucket's length need no checks
      L_.open(cat("if (", C_, " == ", items_ * team_, ")"));
      row_body(false);
      L_.close();
      L_.open("else");
      row_body(true);
      L_.close();
    } else {
      row_body(ragged_);
    }
    L_.close();
  }

 private:
  void row_body(bool ragged) {
    ragged_ = ragged;
    ex_.open_scope();  // (each form defines its own expressions)
    if (persistent_) plan_cache();
    if (w_.out.form == Form::ReduceColumns && split_ > 1) split_columns();
    else stages();
    ex_.close_scope();
  }

  // Blocks of 32 rows walk the rows grid-stride together (the team folds meet at barriers):
  // lanes of rows past the end fold the last row again and store nothing.
  void columns_loop() {
    const std::string& idx = w_.idx, R = w_.product_text(0, size_t(k_.n_outer));
    L_.add("const int lane = threadIdx.x / 32;");
    for (size_t a = 0; a < k_.accs.size(); ++a)
      L_.add(cat("__shared__ ", cuda_type(cuda_acc_dtype(k_.accs[a])), " red", a, "[", team_, "][32];"));
    if (split_ > 1) {  // block b: rows from (b / split) * 32, slice b % split of their elements
      const int64_t chunk = (w_.out.row_size + split_ - 1) / split_, groups = (w_.out.rows + 31) / 32;
      L_.add("__shared__ bool last;");
      L_.open(cat("for (", idx, " b = blockIdx.x; b < ", groups * split_, "; b += gridDim.x)"));
      L_.add(cat("const ", idx, " base = b / ", split_, " * 32, part = b % ", split_, ";"));
      L_.add(cat("const ", idx, " c_end = (part + 1) * ", chunk, " < ", C_, " ? (part + 1) * ", chunk, " : ", idx, "(", C_, ");"));
      first_c_ = cat("part * ", chunk, " + lane");
      end_c_ = "c_end";
    } else {
      L_.open(cat("for (", idx, " base = ", idx, "(blockIdx.x) * 32; base < ", R, "; base += ", idx, "(gridDim.x) * 32)"));
    }
    L_.add(cat("const bool live = base + threadIdx.x % 32 < ", R, ";"));
    L_.add(cat("const ", idx, " row = live ? base + threadIdx.x % 32 : ", R, " - 1;"));
    row_guard_ = "lane == 0 && live";
  }

  // Blocks that share a column team's rows (split_columns): enough for two waves of blocks when
  // the rows alone are too few (GPT-2's bias gradients: 24 blocks of 768 columns), each lane
  // folding 16 elements or more; 1: no split. One stage of folds, whose element stores come first.
  int64_t column_split(int64_t R, int64_t C) const {
    for (const Accumulate& a : k_.accs)
      if (k_.depth[size_t(a.expr)] != 0 || a.kind == ReduceKind::OrderedSum || a.kind == ReduceKind::OrderedMax) return 1;
    for (const Store& s : k_.stores)
      if (store_inner(k_, s) ? k_.depth[size_t(s.expr)] != 0 : k_.depth[size_t(s.expr)] == 0) return 1;
    const int64_t groups = (R + 31) / 32, per_sm = std::max<int64_t>(1, w_.target.max_threads_per_sm / w_.out.block);
    const int64_t want = 2 * int64_t(w_.target.sm_count) * per_sm;
    if (groups * 2 > want) return 1;
    return std::clamp<int64_t>((want + groups - 1) / groups, 1, std::min<int64_t>(64, C / (16 * team_)));
  }

  // The module globals of a split kernel: `parts` partials per accumulator, `counters` counters.
  void declare_partials(int64_t parts, int64_t counters) {
    const std::string& name = w_.out.name;
    for (size_t a = 0; a < k_.accs.size(); ++a)
      w_.functions[cat("~split ", name, " ", a)] =
          cat("__device__ ", cuda_type(cuda_acc_dtype(k_.accs[a])), " ", name, "_part", a, "[", parts, "];\n");
    w_.functions[cat("~split ", name)] = cat("__device__ unsigned int ", name, "_count[", std::max<int64_t>(1, counters), "];\n");
  }
  // acc<a> = the fold of the split_ partials of `slot` (an index expression), in slice order.
  void fold_partials(const std::string& slot) {
    for (size_t a = 0; a < k_.accs.size(); ++a) {
      const DType t = cuda_acc_dtype(k_.accs[a]);
      L_.add(cat("acc", a, " = ", literal(reduce_init(k_.accs[a].kind, k_.accs[a].in), t), ";"));
      L_.add(cat("for (int s = 0; s < ", split_, "; ++s) acc", a, " = ", fold_name(k_.accs[a].kind), "()(acc", a, ", ((volatile ",
                 cuda_type(t), "*)", w_.out.name, "_part", a, ")[", slot, " * ", split_, " + s]);"));
    }
  }

  // The fold of split_columns' blocks: each writes its rows' partials (module globals), and the
  // rows' last block to finish (a counter per 32 rows, reset by it) folds them in slice order,
  // so the sums do not depend on the blocks' order (as split_rows), then stores the results.
  void split_columns() {
    const CudaKernel& o = w_.out;
    const int64_t groups = (o.rows + 31) / 32;
    declare_partials(groups * 32 * split_, groups);
    stage(0);
    for (size_t a = 0; a < k_.accs.size(); ++a)
      L_.add(cat("if (lane == 0) ", o.name, "_part", a, "[(base + threadIdx.x % 32) * ", split_, " + part] = acc", a, ";"));
    L_.add("__threadfence();");
    L_.add("__syncthreads();");
    L_.add(cat("if (threadIdx.x == 0) last = atomicAdd(&", o.name, "_count[b / ", split_, "], 1u) == ", split_ - 1, ";"));
    L_.add("__syncthreads();");
    L_.open("if (last)");
    L_.add("__threadfence();");
    fold_partials("(base + threadIdx.x % 32)");
    L_.add(cat("if (threadIdx.x == 0) ", o.name, "_count[b / ", split_, "] = 0;"));
    for (int d = 1; d <= k_.max_depth; ++d) stage(d);  // (the rows' stores: lane 0 of live rows)
    L_.close();
    L_.add("__syncthreads();  // (`last` serves the next rows)");
  }

  // One stage of folds over the row, then stores of the row's results only: its fold can be
  // split across blocks (split_rows).
  bool one_pass() const {
    for (const Accumulate& a : k_.accs)
      if (k_.depth[size_t(a.expr)] != 0 || a.kind == ReduceKind::OrderedSum || a.kind == ReduceKind::OrderedMax) return false;
    for (const Store& s : k_.stores)
      if (store_inner(k_, s) || k_.depth[size_t(s.expr)] == 0) return false;
    return true;
  }

  // Rows split across split_ blocks: block b folds slice b % split_ of row b / split_ into its
  // partials (module globals), and the row's last block to finish (a counter per row, reset by
  // it) folds the partials in slice order, so the result does not depend on the blocks' order.
  // The globals make one launch at a time per loaded module (the program's stream) a must.
  void split_rows() {
    const CudaKernel& o = w_.out;
    const std::string& idx = w_.idx;
    const int64_t chunk = (o.row_size + split_ - 1) / split_;
    declare_partials(std::max<int64_t>(1, o.rows * split_), o.rows);
    L_.add("__shared__ bool last;");
    L_.open(cat("for (", idx, " b = blockIdx.x; b < ", o.rows * split_, "; b += gridDim.x)"));
    L_.add(cat("const ", idx, " row = b / ", split_, ", part = b % ", split_, ";"));
    L_.add(cat("const ", idx, " c_end = (part + 1) * ", chunk, " < ", C_, " ? (part + 1) * ", chunk, " : ", idx, "(", C_, ");"));
    w_.decompose("row", 0, size_t(k_.n_outer), size_t(k_.n_outer));
    ex_.open_scope();
    first_c_ = cat("part * ", chunk, " + lane");
    end_c_ = "c_end";
    stage(0);
    L_.open("if (threadIdx.x == 0)");
    for (size_t a = 0; a < k_.accs.size(); ++a) L_.add(cat(o.name, "_part", a, "[b] = acc", a, ";"));
    L_.add("__threadfence();");
    L_.add(cat("last = atomicAdd(&", o.name, "_count[row], 1u) == ", split_ - 1, ";"));
    L_.close();
    L_.add("__syncthreads();");
    L_.open("if (last)");
    L_.open("if (threadIdx.x == 0)");
    L_.add("__threadfence();");
    fold_partials("row");
    L_.add(cat(o.name, "_count[row] = 0;"));
    L_.close();
    for (int d = 1; d <= k_.max_depth; ++d) stage(d);  // (the row's stores: thread 0 writes)
    L_.close();
    L_.add("__syncthreads();  // (`last` serves the next row)");
    ex_.close_scope();
    L_.close();
  }

  void shared_partials() {
    for (size_t a = 0; a < k_.accs.size(); ++a) {
      const char* t = cuda_type(cuda_acc_dtype(k_.accs[a]));
      L_.add(cat("__shared__ ", t, " red", a, "[", w_.out.block / 32, "];"));
      if (cluster_ > 1) {  // (the cluster's values; two sets, used in turn: cr::cluster_reduce)
        L_.add(cat("__shared__ ", t, " cred", a, "[", 2 * cluster_, "];"));
        L_.add(cat("int cturn", a, " = 0;"));
      }
    }
  }

  // Blocks a row (a thread-block cluster, sm_90) for few long rows of a specialised block
  // reduction whose folds are exact in any order (max / min, integers): the row's elements
  // spread over the cluster, each block's fold merged in rank order. 1: a block a row.
  int64_t cluster_size(const CudaKernel& o) const {
    constexpr int64_t kCluster = 8, kMinBlockElements = 1024;  // (8: the portable cluster size)
    const std::string& arch = w_.target.arch;  // ("sm_90", "sm_100a", ...)
    if (o.form != Form::ReduceBlock || w_.config.team > 0) return 1;
    if (arch.rfind("sm_", 0) != 0 || std::atoi(arch.c_str() + 3) < 90) return 1;
    if (o.rows * kCluster > w_.target.sm_count || o.row_size < kCluster * kMinBlockElements) return 1;
    for (const Accumulate& a : k_.accs) {
      const bool exact = a.kind == ReduceKind::Max || a.kind == ReduceKind::Min || !is_floating(cuda_acc_dtype(a));
      if (!exact || a.kind == ReduceKind::OrderedSum || a.kind == ReduceKind::OrderedMax) return 1;
    }
    return kCluster;
  }

  void stages() {
    for (int d = 0; d <= k_.max_depth; ++d) stage(d);
  }

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
  bool inner_store(size_t j, int d) const {
    const Store& s = k_.stores[j];
    return k_.depth[size_t(s.expr)] == d && store_inner(k_, s);
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
        L_.add(cat("if (", row_guard_, ") p", s.buffer, "[", affine_str(s.addr), "] = ", ex_.ref(s.expr), ";"));
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
    if (w_.out.form == Form::ReduceColumns) columns_reduce(accs);
    else
      for (size_t a : accs) team_reduce(a);
  }

  // Persistent rows of one contiguous inner dim (specialised kernels, whole rows) read their
  // unit-stride loads and write their row stores as 16-byte vectors: lane l owns the groups of
  // `vec` consecutive elements (g * team + l) * vec, so one vector access of a warp covers 32 x 16
  // contiguous bytes (float16 rows move 2 bytes an access otherwise). Returns vec (1: scalar
  // accesses, element c = lane + it * team). Every row store must take the vector form too: stored
  // one by one, a lane's neighbours cost a store instruction each across the warp (bench/RESULTS.md
  // H35).
  int vector_group() const {
    const size_t last = k_.sizes.size() - 1;
    if (!persistent_ || ragged_ || w_.dynamic || team_ < 32 || last != size_t(k_.n_outer)) return 1;
    size_t widest = 0;
    for (const Expr& e : k_.body.exprs)
      if (vector_load(e, 1)) widest = std::max(widest, dtype_size(e.dtype));
    if (widest == 0) return 1;
    int vec = int(16 / widest);
    auto fits = [&](int v) {
      if (items_ % v != 0) return false;
      for (const Expr& e : k_.body.exprs)
        if (vector_load(e, 1) && !vector_load(e, v)) return false;
      for (const Store& st : k_.stores)  // (a lane's neighbours stored one by one would cost a store per element)
        if (store_inner(k_, st) && !unit_aligned(st.addr, v)) return false;
      return true;
    };
    while (vec > 1 && !fits(vec)) vec /= 2;
    return vec;
  }
  // A load that walks the inner dim with unit stride from a multiple of vec.
  bool vector_load(const Expr& e, int vec) const { return e.op == EOp::Load && !e.gather() && unit_aligned(e.index[0], vec); }
  bool unit_aligned(const Affine& a, int vec) const {
    const size_t last = k_.sizes.size() - 1;
    if (a.coef(last) != 1 || a.c % vec != 0) return false;
    for (size_t v = 0; v < a.k.size(); ++v)
      if (v != last && a.k[v] % vec != 0) return false;
    return true;
  }

  // The group loop of the vector form, up to the element: the stage's vector loads at the
  // group's first element, then the group's elements.
  void open_groups(int d, std::vector<char>& vectors) {
    const std::string& idx = w_.idx;
    L_.add("#pragma unroll");
    L_.open(cat("for (int g = 0; g < ", items_ / vec_, "; ++g)"));
    L_.add(cat("const ", idx, " cg = (", idx, "(g) * ", team_, " + lane) * ", vec_, ";"));  // (c<i>: caches)
    w_.decompose("cg", size_t(k_.n_outer), k_.sizes.size(), k_.sizes.size());
    std::set<int32_t> used;
    for (int32_t r : inner_roots(d)) collect(r, used);
    vectors.assign(k_.body.exprs.size(), 0);
    for (int32_t i : used) {
      const Expr& e = k_.body.exprs[size_t(i)];
      if (!vector_load(e, vec_) || (cached_.count(i) && first_[size_t(i)] < d)) continue;  // (earlier stages' are cached)
      vectors[size_t(i)] = 1;
      L_.add(cat("const cr::vec<", cuda_type(e.dtype), ", ", vec_, "> v", i, " = cr::loadv<", vec_, ">(p", e.value, " + ",
                 affine_str(e.index[0]), ");"));
    }
    for (size_t j = 0; j < k_.stores.size(); ++j)
      if (inner_store(j, d)) L_.add(cat("cr::vec<", cuda_type(k_.body.exprs[size_t(k_.stores[j].expr)].dtype), ", ", vec_, "> s", j, ";"));
    L_.add("#pragma unroll");
    L_.open(cat("for (int u = 0; u < ", vec_, "; ++u)"));
    L_.add(cat("const int it = g * ", vec_, " + u;"));
    L_.add(cat("const ", idx, " c = cg + u;"));
  }

  void element_loop(int d, const std::vector<size_t>& accs) {
    const std::string& idx = w_.idx;
    bool persistent = persistent_;
    // (a column team's lanes past the last row fold that row again: they store nothing)
    const bool columns = w_.out.form == Form::ReduceColumns;
    std::vector<char> vectors;
    if (persistent && vec_ > 1) {
      open_groups(d, vectors);
    } else if (persistent) {
      L_.add("#pragma unroll");
      L_.open(cat("for (int it = 0; it < ", items_, "; ++it)"));
      L_.add(cat("const ", idx, " c = lane + ", idx, "(it) * ", team_, ";"));
      if (ragged_) L_.open(cat("if (c < ", C_, ")"));
    } else {
      L_.open(cat("for (", idx, " c = ", first_c_, "; c < ", end_c_.empty() ? C_ : end_c_, "; c += ", team_, ")"));
    }
    w_.decompose("c", size_t(k_.n_outer), k_.sizes.size(), k_.sizes.size());
    ex_.open_scope();
    if (!vectors.empty()) {
      const std::vector<Expr>& exprs = k_.body.exprs;
      ex_.load = [this, vectors, &exprs](const Expr& e) {
        const size_t i = size_t(&e - exprs.data());
        return vectors[i] ? cat("v", i, ".v[u]") : plain_load(k_, e);
      };
    }
    if (persistent) {
      ex_.reuse = [this, d](int32_t i) { return cached_.count(i) && first_[size_t(i)] < d ? cat("c", i, "[it]") : std::string(); };
      ex_.computed = [this, d](int32_t i) {
        if (cached_.count(i) && first_[size_t(i)] == d) L_.add(cat("c", i, "[it] = e", i, ";"));
      };
    }
    for (size_t j = 0; j < k_.stores.size(); ++j) {
      const Store& s = k_.stores[j];
      if (!inner_store(j, d)) continue;
      if (vectors.empty()) L_.add(cat(columns ? "if (live) " : "", "p", s.buffer, "[", affine_str(s.addr), "] = ", ex_.ref(s.expr), ";"));
      else L_.add(cat("s", j, ".v[u] = ", ex_.ref(s.expr), ";"));  // (stored by the group: below)
    }
    for (size_t a : accs) {
      const Accumulate& ac = k_.accs[a];
      std::string x = ex_.ref(ac.expr);
      L_.add(cat("acc", a, " = ", fold_name(ac.kind), "()(acc", a, ", (", cuda_type(cuda_acc_dtype(ac)), ")", x, ");"));
    }
    ex_.close_scope();
    ex_.reuse = nullptr;
    ex_.computed = nullptr;
    ex_.load = nullptr;
    if (persistent && ragged_) L_.close();
    if (!vectors.empty()) {
      L_.close();  // the lane loop; then the group's vector stores (i<last> is the group's first)
      for (size_t j = 0; j < k_.stores.size(); ++j)
        if (inner_store(j, d)) L_.add(cat("cr::storev(p", k_.stores[j].buffer, " + ", affine_str(k_.stores[j].addr), ", s", j, ");"));
    }
    L_.close();
  }

  // A column team's partials folded in lane order (the same bits every run), by every lane.
  void columns_reduce(const std::vector<size_t>& accs) {
    for (size_t a : accs) L_.add(cat("red", a, "[lane][threadIdx.x % 32] = acc", a, ";"));
    L_.add("__syncthreads();");
    for (size_t a : accs) {
      L_.add(cat("acc", a, " = red", a, "[0][threadIdx.x % 32];"));
      L_.add(cat("for (int j = 1; j < ", team_, "; ++j) acc", a, " = ", fold_name(k_.accs[a].kind), "()(acc", a, ", red", a,
                 "[j][threadIdx.x % 32]);"));
    }
    L_.add("__syncthreads();");
  }

  void team_reduce(size_t a) {
    std::string fold = cat(fold_name(k_.accs[a].kind), "()");
    if (team_ == 32) L_.add(cat("acc", a, " = cr::warp_reduce(acc", a, ", ", fold, ");"));
    else if (team_ > 32)
      L_.add(cat("acc", a, " = cr::block_reduce<", w_.out.block, ">(acc", a, ", ", fold, ", red", a, ");"));
    if (cluster_ > 1)
      L_.add(cat("acc", a, " = cr::cluster_reduce<", cluster_, ">(acc", a, ", ", fold, ", cred", a, " + ", cluster_,
                 " * (cturn", a, "++ & 1));"));
  }

  KernelWriter& w_;
  const Kernel& k_;
  Lines& L_;
  Exprs ex_;
  int64_t team_ = 1, items_ = 1, split_ = 1, cluster_ = 1;
  std::string first_c_ = "lane", end_c_;  // the looped form's elements of this block (split_rows)
  int vec_ = 1;  // persistent rows: elements a lane reads with one vector load (vector_group)
  bool persistent_ = false;
  bool ragged_ = false;  // persistent: the last item of some lanes is past the row
  std::string C_;        // the row length's text
  std::string row_guard_ = "lane == 0";  // who stores a row's values
  std::set<int32_t> cached_;
  std::vector<int> first_;
};

}  // namespace

void write_reduction(KernelWriter& w) { ReductionWriter(w).write(); }

}  // namespace cr::jit::cuda
