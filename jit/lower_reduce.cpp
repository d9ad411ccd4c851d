// Lowering of reductions and of the ops that decompose into reductions: sum, prod, mean,
// amax / amin, any / all, var / std, logsumexp, norm (p = 2), softmax, log_softmax, each
// registered in the lowering table at the end of this file.
//
// A decomposition is written with the same loop values as everything else: intermediate
// reductions keep their reduced dims (size 1) so full-shape consumers load them broadcast, and the
// fusion scheduler puts the whole decomposition in one kernel (softmax: max, sum of exp, output,
// per row). Intermediates of float32 inputs accumulate and combine in float64, as the eager
// folds do, so results stay within float32 rounding of eager; softmax and log_softmax fold
// exactly as their eager kernel does, and give its bits.
#include <algorithm>
#include <cmath>

#include "jit/lower.hpp"

namespace cr::jit {

namespace {

// whole-tensor-like reductions split in two (Decomposition::split_of): at most this many results,
// at least this many inputs
constexpr int64_t kSplitMaxResults = 8, kSplitMinCount = int64_t(1) << 16;

struct Decomposition {
  Lowerer& L;
  int32_t x;                  // loop value of the input
  Shape in;                   // its sizes
  std::vector<char> mask;     // reduced dims
  bool keepdim = false;
  bool whole = false;         // never split (split_of): folded in eager's order
  int64_t count = 1;
  int32_t gv_out = -1, node = -1;
  Shape out;                  // graph output sizes

  std::vector<int> full() const {
    std::vector<int> v(in.size());
    for (size_t d = 0; d < v.size(); ++d) v[d] = int(d);
    return v;
  }
  std::vector<int> kept() const {
    std::vector<int> v(in.size());
    for (size_t d = 0; d < v.size(); ++d) v[d] = mask[d] ? -1 : int(d);
    return v;
  }
  Shape kept_sizes() const {
    Shape s = in;
    for (size_t d = 0; d < s.size(); ++d)
      if (mask[d]) s[d] = 1;
    return s;
  }
  // x over all variables, cast to d
  int32_t input(Body& b, DType d) const { return Lowerer::cast(b, Lowerer::load_at(b, L.val(x), x, full()), d); }
  // a keep-dims intermediate, loaded broadcast over the full variables
  int32_t at_full(Body& b, int32_t lv) const { return Lowerer::load_at(b, L.val(lv), lv, kept()); }

  // A Reduction of `body` over variables `vars` (folded where `mask`), of dtype `value`: the graph
  // output when `final`, else a keep-dims intermediate; its out_vars are the caller's.
  LoopValue reduction(bool final, DType value, const Shape& vars, const std::vector<char>& m, ReduceKind kind, Body body) const {
    LoopValue v{LKind::Reduction, final ? gv_out : -1, final ? out : kept_sizes(), value};
    v.graph_node = node;
    v.in_sizes = vars;
    v.reduced = m;
    v.reduce = kind;
    v.acc_dtype = reduce_acc_dtype(kind, body.exprs[size_t(body.root)].dtype);
    v.body = std::move(body);
    return v;
  }
  // A reduction of `body` (over the input's variables) of dtype `value`; `final` makes it the
  // graph output (its dims as the op's keepdim says), else a keep-dims intermediate.
  int32_t reduce(Body body, ReduceKind kind, DType value, bool final) {
    if (auto [d, parts] = split_of(); parts > 1 && !whole)
      return fold_split(partial_split(std::move(body), kind, d, parts), kind, value, final, d, parts);
    LoopValue v = reduction(final, value, in, mask, kind, std::move(body));
    for (size_t d = 0; d < in.size(); ++d)
      if (!mask[d]) v.out_vars.push_back(int(d));
      else if (!final || keepdim) v.out_vars.push_back(-1);
    return L.add_value(std::move(v));
  }
  // Final reductions of one input into the graph outputs `gvs`, all partials before all folds
  // when split, so that the scheduler fuses the partials into one pass (and the folds).
  void reduce_each(std::vector<Body> bodies, const std::vector<ReduceKind>& kinds, DType value,
                   const std::vector<int32_t>& gvs) {
    const auto [d, parts] = split_of();
    std::vector<int32_t> partials;
    for (size_t i = 0; i < bodies.size(); ++i) {
      if (parts > 1 && !whole) partials.push_back(partial_split(std::move(bodies[i]), kinds[i], d, parts));
      else gv_out = gvs[i], reduce(std::move(bodies[i]), kinds[i], value, true);
    }
    for (size_t i = 0; i < partials.size(); ++i)
      gv_out = gvs[i], fold_split(partials[i], kinds[i], value, true, d, parts);
  }
  // A reduction with few results and many inputs (a whole-tensor sum) runs in two steps, so
  // that the threads share it: partial results over `parts` slices of one reduced dim (a kernel
  // whose outer loop of `parts` rows runs in parallel), then their reduction. The partials keep
  // the accumulator dtype (float64 sums of float32), so the result is within float32 rounding of
  // the one-pass fold. A reduced dim followed by other reduced dims is kept whole (its rows are
  // the slices): the iteration space stays the input's, so a pointwise producer still fuses into
  // the partial reduction. Otherwise a reduced dim is cut into `parts` slices; a pointwise
  // producer still fuses (the scheduler cuts its group's space the same way: fusion/schedule.cpp
  // cut_space), but a later reader of its values then loads them from memory, so with a producer
  // only a single result (else one thread's work) is cut. Returns {dim, parts}; parts = 0: no split.
  std::pair<size_t, int64_t> split_of() const {
    int64_t results = 1;
    for (size_t d = 0; d < in.size(); ++d)
      if (!mask[d]) results *= in[d];
    if (results > kSplitMaxResults || count < kSplitMinCount) return {0, 0};
    for (size_t d = 0; d < in.size(); ++d) {
      bool later = false;  // another reduced dim of size > 1 after d
      for (size_t e = d + 1; e < in.size(); ++e) later = later || (mask[e] && in[e] > 1);
      if (mask[d] && in[d] >= 8 && later) return {d, in[d]};
    }
    const LKind input = L.val(x).kind;
    if (input == LKind::Reduction || (input == LKind::Pointwise && results > 1)) return {0, 0};
    for (size_t d = 0; d < in.size(); ++d)
      for (int64_t parts : {64, 32, 128, 16, 256, 8})
        if (mask[d] && in[d] % parts == 0 && count / parts >= kSplitMinCount / 64) return {d, parts};
    return {0, 0};
  }
  // The split's shape: variable d becomes (p, j), p < parts, j < m (no j when m = 1).
  Shape split_vars(size_t d, int64_t parts) const {
    Shape in2 = in;
    in2[d] = parts;
    if (in[d] / parts > 1) in2.insert(in2.begin() + std::ptrdiff_t(d) + 1, in[d] / parts);
    return in2;
  }
  std::vector<char> split_mask(size_t d, int64_t parts) const {
    std::vector<char> mask2 = mask;
    mask2[d] = 0;
    if (in[d] / parts > 1) mask2.insert(mask2.begin() + std::ptrdiff_t(d) + 1, 1);
    return mask2;
  }
  // The partial results of `body` over `parts` slices of dim d: a keep-dims value over the split
  // variables (p kept).
  int32_t partial_split(Body body, ReduceKind kind, size_t d, int64_t parts) {
    // the old variable d is m p + j
    int64_t m = in[d] / parts;
    size_t extra = m > 1 ? 1 : 0;
    const Shape in2 = split_vars(d, parts);
    std::vector<Affine> vars;
    for (size_t v = 0; v < in.size(); ++v) {
      Affine a = Affine::var(v < d ? v : v + extra);
      if (v == d && extra) {
        a = Affine::var(d + 1);
        a.add(d, m);
      }
      vars.push_back(a);
    }
    for (Expr& e : body.exprs)
      for (Affine& a : e.index) a = substitute(a, vars);
    const std::vector<char> mask2 = split_mask(d, parts);
    DType acc = reduce_acc_dtype(kind, body.exprs[size_t(body.root)].dtype);
    Shape psizes = in2;
    for (size_t k = 0; k < in2.size(); ++k)
      if (mask2[k]) psizes[k] = 1;
    LoopValue pv = reduction(false, acc, in2, mask2, kind, std::move(body));
    pv.sizes = psizes;
    for (size_t k = 0; k < in2.size(); ++k) pv.out_vars.push_back(mask2[k] ? -1 : int(k));
    return L.add_value(std::move(pv));
  }
  // The reduction over p of partial_split's `partial`, as the original reduction's result.
  int32_t fold_split(int32_t partial, ReduceKind kind, DType value, bool final, size_t d, int64_t parts) {
    const size_t extra = in[d] / parts > 1 ? 1 : 0;
    std::vector<char> mask2 = split_mask(d, parts);
    const Shape psizes = L.val(partial).sizes;
    std::vector<int> all(psizes.size());
    for (size_t k = 0; k < all.size(); ++k) all[k] = int(k);
    mask2[d] = 1;
    Body b;
    b.root = Lowerer::load_at(b, L.val(partial), partial, all);
    LoopValue v = reduction(final, value, psizes, mask2, kind, std::move(b));
    for (size_t k = 0; k < in.size(); ++k)
      if (!mask[k]) v.out_vars.push_back(int(k < d ? k : k + extra));
      else if (!final || keepdim) v.out_vars.push_back(-1);
    return L.add_value(std::move(v));
  }

  // A pointwise value over the kept dims (keep-dims form unless `final`).
  template <class F> int32_t per_output(DType d, bool final, F build) {
    LoopValue v{LKind::Pointwise, final ? gv_out : -1, final ? out : kept_sizes(), d};
    v.graph_node = node;
    // the variables of a value are its own dims; a keep-dims intermediate at kept dim k
    std::vector<int> vars(in.size(), -1);
    int j = 0;
    for (size_t k = 0; k < in.size(); ++k)
      if (!mask[k]) vars[k] = final && !keepdim ? j++ : int(k);
    v.body.root = Lowerer::cast(v.body, build(v.body, vars), d);
    return L.add_value(std::move(v));
  }
  template <class F> int32_t per_element(DType d, bool final, F build) {
    LoopValue v{LKind::Pointwise, final ? gv_out : -1, in, d};
    v.graph_node = node;
    v.body.root = Lowerer::cast(v.body, build(v.body), d);
    return L.add_value(std::move(v));
  }
  int32_t load_kept(Body& b, int32_t lv, const std::vector<int>& vars) const {
    return Lowerer::load_at(b, L.val(lv), lv, vars);
  }
};

std::vector<char> reduced_dims(const graph::Arg& a, int ndim, bool* ok) {
  // no dim, or an empty list (as eager parses it: vm/ops/reductions.cpp parse_dims): every dim
  std::vector<char> mask(size_t(ndim), a.tag == kNone || (a.tag == kInts && a.ints.empty()));
  std::vector<int64_t> dims = a.tag == kInts ? a.ints : std::vector<int64_t>{};
  if (a.tag == kNumber) dims.push_back(int64_t(a.num));
  *ok = a.tag == kNone || a.tag == kInts || a.tag == kNumber;
  for (int64_t d : dims) mask[size_t(normalize_dim(d, ndim))] = 1;
  return mask;
}

// The innermost dim (of size > 1) kept and one before it reduced: a loop kernel would fold each
// result from a strided column, where eager's reductions (reduce_outer, cols_blocked) fold whole
// contiguous rows into the results - on the CPU 6-27x faster over 2048 x 2048, the same bits.
bool over_outer_dims(const Shape& in, const std::vector<char>& mask) {
  size_t last = in.size();
  while (last > 0 && in[last - 1] == 1) --last;
  if (last == 0 || mask[last - 1]) return false;
  for (size_t d = 0; d + 1 < last; ++d)
    if (mask[d] && in[d] > 1) return true;
  return false;
}

// op's block function on x, in x's dtype; throws when it has none (the lowering is undone)
int32_t block_call(Body& b, const char* op, int32_t x) {
  int32_t r = Lowerer::call(b, op, x, -1, b.exprs[size_t(x)].dtype);
  if (r < 0) throw Error(cat("no block function ", op));
  return r;
}

// softmax / log_softmax folded as the eager kernel folds them (vm/ops/scans.cpp), with its exp
// and log (softmax_exp / softmax_log). A row (nothing after the dim but size-1 dims) takes max
// and Σ exp a block at a time as the Max / Sum reductions do (Σ in float64) and scales by 1 / Σ
// rounded once; columns fold max and Σ element after element in the input dtype (OrderedMax /
// OrderedSum) and scale by 1 / Σ computed in it.
// cd: the dtype it computes in, od: the output's (float16 / bfloat16 outputs compute in float32).
void softmax(Decomposition& D, bool log, DType cd, DType od) {
  D.whole = true;  // eager folds a row or a column in one go
  Lowerer& L = D.L;
  const DType f64 = DType::f64;
  size_t dim = size_t(std::find(D.mask.begin(), D.mask.end(), 1) - D.mask.begin());
  int64_t inner = 1;
  for (size_t d = dim + 1; d < D.in.size(); ++d) inner *= D.in[d];
  const bool row = inner == 1;
  const DType sum_dtype = row ? f64 : cd;
  Body mb;
  mb.root = Lowerer::cast(mb, D.input(mb, od), cd);
  int32_t m = D.reduce(std::move(mb), row ? ReduceKind::Max : ReduceKind::OrderedMax, cd, false);
  int32_t shifted = D.per_element(cd, false, [&](Body& b) {
    int32_t dx = Lowerer::arith(b, "-", Lowerer::cast(b, D.input(b, od), cd), D.at_full(b, m), cd);
    return log ? dx : block_call(b, "softmax_exp", dx);
  });
  Body sb;
  sb.root = Lowerer::load_at(sb, L.val(shifted), shifted, D.full());
  if (log) sb.root = block_call(sb, "softmax_exp", sb.root);
  int32_t s = D.reduce(std::move(sb), row ? ReduceKind::Sum : ReduceKind::OrderedSum, sum_dtype, false);
  // log_softmax subtracts log Σ, softmax scales by 1 / Σ, each rounded once to the output dtype
  int32_t k = D.per_output(cd, false, [&](Body& b, const std::vector<int>& vars) {
    int32_t sv = D.load_kept(b, s, vars);
    return log ? block_call(b, "softmax_log", sv) : Lowerer::arith(b, "/", Lowerer::constant(b, 1.0, sum_dtype), sv, sum_dtype);
  });
  D.per_element(od, true, [&](Body& b) {
    int32_t e = Lowerer::load_at(b, L.val(shifted), shifted, D.full());
    return Lowerer::arith(b, log ? "-" : "*", e, D.at_full(b, k), cd);
  });
}

// argmax / argmin, and max / min along a dim (values, indices): the first position of the
// extreme along the dim (of the flattened tensor without one), 1-based, a NaN counting as the
// extreme, as the eager fold (vm/kernels/folds.hpp Arg): m = amax(x) (NaN propagates), then the
// least position p with x == m or x != x (n + 1 elsewhere; some position always matches). The
// fusion scheduler puts both reductions in one kernel, one pass over a row each.
bool extreme_position(Decomposition& D, bool max, const graph::Node& n, std::string* why) {
  Lowerer& L = D.L;
  const DType xd = compute_dtype(L.val(D.x).dtype);
  const ReduceKind k = max ? ReduceKind::Max : ReduceKind::Min;
  if (!reduce_supported(k, xd)) return *why = "no block reduction for this dtype", false;
  const bool values = n.outs.size() == 2;
  const int32_t gv_indices = n.outs.back();
  Body mb;
  mb.root = D.input(mb, xd);
  const int32_t m = D.reduce(std::move(mb), k, xd, false);
  if (values) {
    D.gv_out = n.outs[0];
    D.per_output(L.g.values[size_t(n.outs[0])].meta.dtype, true, [&](Body& b, const std::vector<int>& vars) { return D.load_kept(b, m, vars); });
  }
  Affine pos;  // 1-based: along the dim, or row-major over all dims
  pos.c = 1;
  int64_t stride = 1;
  for (size_t d = D.in.size(); d-- > 0;)
    if (D.mask[d]) {
      pos.add(d, stride);
      stride *= D.in[d];
    }
  Body pb;
  int32_t x = D.input(pb, xd);
  int32_t hit = Lowerer::arith(pb, "==", x, D.at_full(pb, m), DType::b8);
  if (is_floating(xd)) hit = Lowerer::arith(pb, "||", hit, Lowerer::arith(pb, "!=", x, x, DType::b8), DType::b8);
  // (positions in int32 when they fit: twice the lanes for the Min, half the temporaries)
  const DType pd = D.count < (int64_t(1) << 31) - 1 ? DType::i32 : DType::i64;
  pb.root = pb.add(Expr{EOp::Select, pd, hit, Lowerer::index(pb, pos, pd), Lowerer::constant(pb, double(D.count + 1), pd)});
  D.gv_out = gv_indices;
  D.reduce(std::move(pb), ReduceKind::Min, DType::i64, true);
  return true;
}

// How a reduction node's arguments read (bits): (x, dims, keepdim, ...) by default; softmax's
// (x, dim, {dtype}) (kAlong); max / min also return the positions along a dim (kIndices); kRows:
// on the CPU reductions over outer dims are left to eager's kernel (over_outer_dims); aminmax
// returns two values of the input's shape (kPair).
enum ArgForm : unsigned { kDims = 0, kAlong = 1, kIndices = 2, kRows = 4, kPair = 8 };

// A reduction node, its arguments checked: its decomposition and the result's dtypes.
struct Reduce {
  NodeLowering& nl;
  Decomposition& D;
  DType od, cd;  // the result's dtype; the one intermediates are computed in (16-bit: float32)
  bool reject(std::string r) { return nl.reject(std::move(r)); }
  // Σ build(body) as a float64 keep-dims intermediate. A float32 body is summed as eager sums
  // float32 (float lanes within a block, float64 across blocks: jit/cpu/helpers.cpp), straight
  // from where it lies; converting every element to float64 first costs a pass of its own.
  template <class F> int32_t sum_of(F build) {
    Body b;
    b.root = build(b);
    if (b.exprs[size_t(b.root)].dtype != DType::f32) b.root = Lowerer::cast(b, b.root, DType::f64);
    return D.reduce(std::move(b), ReduceKind::Sum, DType::f64, false);
  }
};
using ReduceFn = bool (*)(Reduce&, int form);

// The checks and the decomposition every reduction shares, then `F` (with the op's form); a
// block function missing for a dtype (block_call's error) leaves the node to eager.
template <ReduceFn F, unsigned A> bool reduction(NodeLowering& nl, int form) {
  const graph::Node& n = nl.n;
  Lowerer& L = nl.L;
  const bool two = (A & (kIndices | kPair)) && n.outs.size() == 2;  // (max(x, dim); aminmax)
  if ((n.outs.size() != 1 && !two) || n.args.empty() || n.args[0].tag != kTensor)
    return nl.reject("unexpected arguments");
  const graph::ValueMeta& xm = nl.meta_of(n.args[0]);
  const graph::ValueMeta& om = nl.out().meta;
  if (!loop_dtype(xm.dtype, L.device())) return nl.reject("a float16 / bfloat16 input");
  const bool along = A & kAlong;
  if (xm.sizes.empty() && along) return nl.reject("a 0-d input");
  // a 0-d input reduces as a 1-d one of size 1 (its load takes no index): the eager dims 1 / -1
  const Shape in = xm.sizes.empty() ? Shape{1} : graph::concrete(xm.sizes);
  const int ndim = int(in.size());
  bool ok = true;
  graph::Arg none;
  std::vector<char> mask = reduced_dims(n.args.size() > 1 ? n.args[1] : none, ndim, &ok);
  if (!ok) return nl.reject("unexpected dim argument");
  if (along && n.args.size() > 2 && n.args[2].tag != kNone) return nl.reject("the dtype option");
  if ((A & kRows) && L.device().is_cpu() && over_outer_dims(in, mask))
    return nl.reject("a reduction over outer dims only (eager's kernel folds whole rows into the results)");
  Decomposition D{L, L.of(n.args[0].value), in, mask};
  D.keepdim = !along && !xm.sizes.empty() && n.args.size() > 2 && n.args[2].tag == kBool && n.args[2].num != 0;
  D.gv_out = n.outs[0];
  D.node = nl.index;
  D.out = graph::concrete(om.sizes);
  for (int d = 0; d < ndim; ++d)
    if (mask[size_t(d)]) D.count *= D.in[size_t(d)];
  if (D.count == 0) return nl.reject("an empty reduction");
  if (!loop_dtype(om.dtype, L.device())) return nl.reject("a float16 / bfloat16 result");
  Reduce r{nl, D, om.dtype, compute_dtype(om.dtype)};
  try {
    return F(r, form);
  } catch (const Error& e) {
    return nl.reject(e.what());
  }
}

// sum, prod, amax, amin (form: the ReduceKind), and max / min without a dim.
bool fold(Reduce& r, int form) {
  const ReduceKind k = ReduceKind(form);
  if (!reduce_supported(k, r.cd)) return r.reject("no block reduction for this dtype");
  Body b;
  // eager converts the input to the output dtype first (a float16 value is then exact in float32)
  b.root = Lowerer::cast(b, r.D.input(b, r.od), r.cd);
  r.D.reduce(std::move(b), k, r.od, true);
  return true;
}

// argmax / argmin (form: 1 for the largest).
bool position(Reduce& r, int max) { return extreme_position(r.D, max, r.nl.n, &r.nl.why); }

// max / min (form: 1 for max): the extreme value, or along a dim its values and positions.
bool extreme(Reduce& r, int max) {
  if (r.nl.n.outs.size() == 2) return position(r, max);
  return fold(r, int(max ? ReduceKind::Max : ReduceKind::Min));
}

// aminmax: the Min and the Max, one result each, in one pass over the input.
bool low_high(Reduce& r, int) {
  const graph::Node& n = r.nl.n;
  if (n.outs.size() != 2) return r.reject("unexpected results");
  const std::vector<ReduceKind> kinds = {ReduceKind::Min, ReduceKind::Max};
  std::vector<Body> bodies(2);
  for (size_t i = 0; i < 2; ++i) {
    if (!reduce_supported(kinds[i], r.cd)) return r.reject("no block reduction for this dtype");
    bodies[i].root = Lowerer::cast(bodies[i], r.D.input(bodies[i], r.od), r.cd);
  }
  r.D.reduce_each(std::move(bodies), kinds, r.od, n.outs);
  return true;
}

// any / all (form: 1 for any): Max / Min of the elements as bools (x != 0: NaN is true).
bool truth(Reduce& r, int any) {
  Body b;
  b.root = r.D.input(b, DType::b8);
  r.D.reduce(std::move(b), any ? ReduceKind::Max : ReduceKind::Min, DType::b8, true);
  return true;
}

bool mean(Reduce& r, int) {
  if (!is_floating(r.od)) return r.reject("an integer result");
  Decomposition& D = r.D;
  const DType f64 = DType::f64;
  int32_t s = r.sum_of([&](Body& b) { return Lowerer::cast(b, D.input(b, r.od), r.cd); });
  D.per_output(r.od, true, [&](Body& b, const std::vector<int>& vars) {
    // (1 / n at run time, as eager folds it: the same bits, and one template for every n)
    int32_t inv = Lowerer::arith(b, "/", Lowerer::constant(b, 1.0, f64), Lowerer::count(b, D.count), f64);
    return Lowerer::arith(b, "*", D.load_kept(b, s, vars), inv, f64);
  });
  return true;
}

// var / std (form: 1 for std, the square root).
bool variance(Reduce& r, int root) {
  if (!is_floating(r.od)) return r.reject("an integer result");
  const graph::Node& n = r.nl.n;
  Decomposition& D = r.D;
  const DType f64 = DType::f64;
  double correction = n.args.size() > 3 && n.args[3].is_number() ? n.args[3].num : 1.0;
  if (n.args.size() > 4 && n.args[4].tag == kBool) correction = n.args[4].num != 0 ? 1.0 : 0.0;
  // n - correction: from the count at run time for the usual corrections (n >= 1 keeps it
  // non-negative); other corrections fold, clamped at 0 as eager does
  const bool usual = correction == 0 || correction == 1;
  auto denom = [&](Body& b) {
    if (!usual) return Lowerer::constant(b, std::max(0.0, double(D.count) - correction), f64);
    int32_t c = Lowerer::count(b, D.count);
    return correction == 0 ? c : Lowerer::arith(b, "-", c, Lowerer::constant(b, correction, f64), f64);
  };
  int32_t s = r.sum_of([&](Body& b) { return D.input(b, f64); });
  int32_t mu = D.per_output(f64, false, [&](Body& b, const std::vector<int>& vars) {
    return Lowerer::arith(b, "/", D.load_kept(b, s, vars), Lowerer::count(b, D.count), f64);
  });
  // Deviations from the rounded mean c. A float64 input's c is off by its rounding, so, as eager's
  // Var, Σ(x - mean)² = Σ(x - c)² - (Σ(x - c))² / n (any c) takes it back: a constant input gives
  // exactly 0. Narrower inputs sum exactly enough in float64 that c of a constant is itself.
  const bool back = r.od == f64;
  int32_t s1 = back ? r.sum_of([&](Body& b) { return Lowerer::arith(b, "-", D.input(b, f64), D.at_full(b, mu), f64); }) : -1;
  int32_t ss = r.sum_of([&](Body& b) {
    int32_t dx = Lowerer::arith(b, "-", D.input(b, f64), D.at_full(b, mu), f64);
    return Lowerer::arith(b, "*", dx, dx, f64);
  });
  D.per_output(r.od, true, [&](Body& b, const std::vector<int>& vars) {
    int32_t m2 = D.load_kept(b, ss, vars);
    if (back) {  // (a tiny negative left by rounding is clamped; NaN stays NaN)
      int32_t d1 = D.load_kept(b, s1, vars);
      m2 = Lowerer::arith(b, "-", m2, Lowerer::arith(b, "/", Lowerer::arith(b, "*", d1, d1, f64), Lowerer::count(b, D.count), f64), f64);
      int32_t neg = Lowerer::arith(b, "<", m2, Lowerer::constant(b, 0, f64), DType::b8);
      m2 = b.add(Expr{EOp::Select, f64, neg, Lowerer::constant(b, 0, f64), m2});
    }
    int32_t v = Lowerer::arith(b, "/", m2, denom(b), f64);
    return root ? block_call(b, "sqrt", v) : v;
  });
  return true;
}

bool norm(Reduce& r, int) {
  if (!is_floating(r.od)) return r.reject("an integer result");
  const graph::Node& n = r.nl.n;
  double p = n.args.size() > 3 && n.args[3].is_number() ? n.args[3].num : 2.0;
  if (p != 2) return r.reject("norm with p other than 2");
  const DType f64 = DType::f64;
  int32_t s = r.sum_of([&](Body& b) {
    int32_t v = r.D.input(b, f64);
    return Lowerer::arith(b, "*", v, v, f64);
  });
  r.D.per_output(r.od, true, [&](Body& b, const std::vector<int>& vars) { return block_call(b, "sqrt", r.D.load_kept(b, s, vars)); });
  return true;
}

bool logsumexp(Reduce& r, int) {
  if (!is_floating(r.od)) return r.reject("an integer result");
  Decomposition& D = r.D;
  const DType od = r.od, cd = r.cd, f64 = DType::f64;
  Body mb;
  mb.root = Lowerer::cast(mb, D.input(mb, od), cd);
  int32_t m = D.reduce(std::move(mb), ReduceKind::Max, cd, false);
  // the shift: the max, or 0 where it is infinite (then the sum is 0 or inf by itself)
  int32_t shift = D.per_output(cd, false, [&](Body& b, const std::vector<int>& vars) {
    int32_t mv = D.load_kept(b, m, vars);
    return b.add(Expr{EOp::Select, cd, block_call(b, "isinf", mv), Lowerer::constant(b, 0, cd), mv});
  });
  int32_t s = r.sum_of([&](Body& b) {
    return block_call(b, "exp", Lowerer::arith(b, "-", Lowerer::cast(b, D.input(b, od), cd), D.at_full(b, shift), cd));
  });
  D.per_output(od, true, [&](Body& b, const std::vector<int>& vars) {
    return Lowerer::arith(b, "+", block_call(b, "log", D.load_kept(b, s, vars)), Lowerer::cast(b, D.load_kept(b, shift, vars), f64), f64);
  });
  return true;
}

// softmax / log_softmax (form: 1 for log_softmax).
bool softmax_node(Reduce& r, int log) {
  if (!is_floating(r.od)) return r.reject("an integer result");
  softmax(r.D, log, r.cd, r.od);
  return true;
}

}  // namespace

void register_reduction_lowerings(Lowerings& t) {
  t.add("sum", reduction<fold, kRows>, int(ReduceKind::Sum));
  t.add("prod", reduction<fold, kRows>, int(ReduceKind::Prod));
  t.add("amax", reduction<fold, kRows>, int(ReduceKind::Max));
  t.add("amin", reduction<fold, kRows>, int(ReduceKind::Min));
  t.add("max", reduction<extreme, kIndices | kRows>, 1);
  t.add("min", reduction<extreme, kIndices | kRows>, 0);
  t.add("aminmax", reduction<low_high, kPair | kRows>);
  t.add("argmax", reduction<position, kRows>, 1);
  t.add("argmin", reduction<position, kRows>, 0);
  t.add("any", reduction<truth, kRows>, 1);
  t.add("all", reduction<truth, kRows>, 0);
  t.add("mean", reduction<mean, kRows>);
  t.add("var", reduction<variance, kRows>, 0);
  t.add("std", reduction<variance, kRows>, 1);
  t.add("norm", reduction<norm, kRows>);
  t.add("logsumexp", reduction<logsumexp, kRows>);
  t.add("softmax", reduction<softmax_node, kAlong | kRows>, 0);
  t.add("log_softmax", reduction<softmax_node, kAlong | kRows>, 1);
}

}  // namespace cr::jit
