// Lowerings of the ops whose value at an element depends on its position: selections
// (masked_fill), triangles (tril, triu), generators (arange, linspace, eye), gathers
// (index_select, gather, embedding) and random draws (rand, randn, randint). Each is a pointwise
// value over the result's shape, registered for its ops below (jit/lower.hpp, the table).
#include <cmath>

#include "jit/lower.hpp"

namespace cr::jit {

namespace {

// masked_fill(x, mask, value) = where(mask, value, x), the value converted to x's dtype first as
// eager does. A fractional value into an integer tensor stays eager (its conversion checks).
bool masked_fill(NodeLowering& nl, int) {
  const graph::Node& n = nl.n;
  const graph::ValueMeta& m = nl.out().meta;
  const graph::Arg& v = n.args[2];
  const bool float_value = v.tag == kTensor ? is_floating(nl.meta_of(v).dtype) : v.num != std::floor(v.num);
  if (!is_floating(m.dtype) && float_value) return nl.reject("a float value into an integer tensor");
  if (m.dtype == DType::b8 && v.tag != kTensor && v.num != 0 && v.num != 1) return nl.reject("a bool tensor filled with a number");
  LoopValue lv = nl.pointwise_value();
  const Shape& shape = lv.sizes;
  Body& b = lv.body;
  const DType cd = compute_dtype(m.dtype);
  int32_t value = Lowerer::cast(b, nl.operand(b, 2, shape, m.dtype), cd);
  int32_t sel = b.add(Expr{EOp::Select, cd, nl.operand(b, 1, shape, DType::b8), value, nl.operand(b, 0, shape, cd)});
  b.root = Lowerer::cast(b, sel, m.dtype);
  return nl.define(std::move(lv));
}

// tril / triu (form: 1 for tril): x where the element's column minus its row is <= k (tril) or
// >= k (triu), else 0, as eager zeroes the other triangle (vm/ops/linalg.cpp run_tri); the op
// checked ndim >= 2.
bool triangle(NodeLowering& nl, int lower) {
  const graph::Node& n = nl.n;
  if (n.args[0].tag != kTensor) return nl.reject("no tensor");
  LoopValue v = nl.pointwise_value();
  const Shape& shape = v.sizes;
  const size_t row = shape.size() - 2, col = shape.size() - 1;
  const double k = n.args.size() > 1 && n.args[1].is_number() ? n.args[1].num : 0;
  Body& b = v.body;
  Affine diagonal = Affine::var(col);
  diagonal.add(row, -1);
  int32_t keep = Lowerer::arith(b, lower ? "<=" : ">=", Lowerer::index(b, diagonal, DType::i64),
                                Lowerer::constant(b, k, DType::i64), DType::b8);
  const DType cd = compute_dtype(v.dtype);
  int32_t kept = b.add(Expr{EOp::Select, cd, keep, nl.operand(b, 0, shape, cd), Lowerer::constant(b, 0, cd)});
  b.root = Lowerer::cast(b, kept, v.dtype);
  return nl.define(std::move(v));
}

enum Generator : int { kArange, kLinspace, kEye };

// arange / linspace / eye: values of their position, computed as the eager kernels compute them
// (vm/ops/creation.cpp: in float64, then stored in the dtype). The op checked the arguments.
bool generator(NodeLowering& nl, int form) {
  const graph::Node& n = nl.n;
  const graph::ValueMeta& m = nl.out().meta;
  if (m.dtype == DType::f16 || m.dtype == DType::bf16) return nl.reject("a float16 / bfloat16 result");
  LoopValue v = nl.pointwise_value();
  const Shape& shape = v.sizes;
  Body& b = v.body;
  const DType f64 = DType::f64;
  auto num = [&](size_t i, double otherwise) { return i < n.args.size() && n.args[i].is_number() ? n.args[i].num : otherwise; };
  auto at = [&](size_t d) { return Lowerer::index(b, Affine::var(d), DType::i64); };
  auto c = [&](double x, DType d) { return Lowerer::constant(b, x, d); };
  int32_t root;
  if (form == kEye) {  // 1 on the diagonal
    root = Lowerer::cast(b, Lowerer::arith(b, "==", at(0), at(1), DType::b8), m.dtype);
  } else if (form == kArange) {  // start + i * step
    const bool bounds = n.args.size() > 1 && n.args[1].is_number();  // arange(start, stop[, step]) / arange(stop)
    double start = bounds ? num(0, 0) : 0, step = num(2, 1);
    if (!is_floating(m.dtype)) start = std::trunc(start), step = std::trunc(step);  // (as run_arange)
    root = Lowerer::arith(b, "+", c(start, f64), Lowerer::arith(b, "*", Lowerer::cast(b, at(0), f64), c(step, f64), f64), f64);
  } else {  // linspace: symmetric from both ends, so that the last point is exactly the end
    const double a = num(0, 0), e = num(1, 0);
    const int64_t steps = shape[0];
    const double step = steps > 1 ? (e - a) / double(steps - 1) : 0;
    if (steps == 1) {
      root = c(a, f64);
    } else {
      int32_t i = at(0);
      int32_t head = Lowerer::arith(b, "+", c(a, f64), Lowerer::arith(b, "*", c(step, f64), Lowerer::cast(b, i, f64), f64), f64);
      int32_t back = Lowerer::cast(b, Lowerer::arith(b, "-", c(double(steps - 1), DType::i64), i, DType::i64), f64);
      int32_t tail = Lowerer::arith(b, "-", c(e, f64), Lowerer::arith(b, "*", c(step, f64), back, f64), f64);
      root = b.add(Expr{EOp::Select, f64, Lowerer::arith(b, "<", i, c(double(steps / 2), DType::i64), DType::b8), head, tail});
    }
  }
  b.root = Lowerer::cast(b, root, m.dtype);
  return nl.define(std::move(v));
}

enum Gather : int { kIndexSelect, kGather, kEmbedding };

// index_select(x, dim, index) / gather(x, dim, index) / embedding(index, weight): x read at a
// position along one dim that is data (a gather Load, jit/loop_ir.hpp), 1-based, checked by
// the kernel against the dim's size. index_select's index runs along the result's dim d;
// gather's has the result's shape; embedding's (any shape) picks rows of {n, D} weights.
bool gather(NodeLowering& nl, int form) {
  const graph::Node& n = nl.n;
  Lowerer& L = nl.L;
  const bool embed = form == kEmbedding;
  const graph::Arg &xa = n.args[embed ? 1 : 0], &ia = n.args[embed ? 0 : 2];
  if (xa.tag != kTensor || ia.tag != kTensor) return nl.reject("no tensor");
  const graph::ValueMeta& xm = nl.meta_of(xa);
  const graph::ValueMeta& im = nl.meta_of(ia);
  if (xm.sizes.empty() || !is_integral(im.dtype)) return nl.reject("a 0-d input or a non-integer index");
  if (!loop_dtype(xm.dtype, L.device())) return nl.reject("a float16 / bfloat16 input");
  const Shape xs = graph::concrete(xm.sizes), is = graph::concrete(im.sizes);
  const int d = embed ? 0 : normalize_dim(int64_t(n.args[1].num), int(xs.size()));
  LoopValue v = nl.pointwise_value();
  int64_t numel = 1;
  for (int64_t sz : v.sizes) numel *= sz;
  // no valid position and something to read: eager raises it before any kernel runs
  if (xs[size_t(d)] == 0 && numel > 0) return nl.reject("an empty dim to gather from");
  Body& b = v.body;
  const size_t nd = v.sizes.size();
  // the index's dims over the result's variables: index_select's runs along dim d; gather's
  // and embedding's are the result's leading dims
  std::vector<int> ivars(is.size(), -1);
  for (size_t k = 0; k < is.size(); ++k) ivars[k] = form == kIndexSelect ? d : int(k);
  int32_t il = L.of(ia.value);
  int32_t at = Lowerer::cast(b, Lowerer::load_at(b, L.val(il), il, ivars), DType::i64);
  Expr e{EOp::Load, xm.dtype};
  e.value = L.of(xa.value);
  e.a = at;
  e.dim = d;
  e.limit = xs[size_t(d)];
  e.site = int32_t(L.lg.sites.size());
  for (size_t k = 0; k < xs.size(); ++k)
    e.index.push_back(int(k) == d ? Affine{} : Affine::var(embed ? nd - 1 : k));
  L.lg.sites.push_back({n.where, n.def().name, embed ? cat("a weight of ", xs[0], " rows") : cat("dim ", d + 1, " of size ", xs[size_t(d)])});
  b.root = Lowerer::cast(b, b.add(std::move(e)), v.dtype);
  return nl.define(std::move(v));
}

Affine contiguous_position(const Shape& shape) {
  Affine a;
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    a.add(d, stride);
    stride *= shape[d];
  }
  return a;
}

enum Draw : int { kRand, kRandn, kRandint };

// rand / randn / randint(lo, hi): element i (row-major) is draw(offset + i, seed), as the eager
// kernels draw it (vm/ops/creation.cpp run_random), with the seed and offset run values
// (EOp::Runtime) that the program takes from the generator at each run. randint is lo +
// bits % (hi - lo); eager goes through a double, so only ranges whose values are exact in one
// lower (|lo| + span <= 2^53; the others draw on the eager kernels).
bool random(NodeLowering& nl, int form) {
  const graph::Node& n = nl.n;
  Lowerer& L = nl.L;
  const graph::ValueMeta& m = nl.out().meta;
  const bool integers = form == kRandint;
  if ((!integers && !is_floating(m.dtype)) || !loop_dtype(m.dtype, L.device())) return nl.reject("not a float32 / float64 result");
  const double lo = integers ? n.args[0].num : 0, span = integers ? n.args[1].num - n.args[0].num : 0;
  if (integers && !(std::fabs(lo) + span <= 0x1p53)) return nl.reject("a range beyond 2^53");
  LoopValue v = nl.pointwise_value();
  Body& b = v.body;
  const int32_t j = int32_t(L.lg.draws.size());
  int64_t numel = 1;
  for (int64_t s : v.sizes) numel *= s;
  auto word = [&](int32_t w) {
    Expr e{EOp::Runtime, DType::i64};
    e.site = w;
    return b.add(std::move(e));
  };
  int32_t counter = Lowerer::arith(b, "+", word(2 * j + 1), Lowerer::index(b, contiguous_position(v.sizes), DType::i64), DType::i64);
  const char* draw = form == kRand ? "philox_uniform" : form == kRandn ? "philox_normal" : "philox_bits";
  int32_t x = Lowerer::call(b, draw, counter, word(2 * j), DType::i64);
  if (x < 0) return nl.reject("no draw function");
  L.lg.draws.push_back(numel);
  if (integers) {
    const DType i64 = DType::i64;
    x = Lowerer::arith(b, "+", Lowerer::constant(b, lo, i64), Lowerer::arith(b, "%u", x, Lowerer::constant(b, span, i64), i64), i64);
  } else {
    b.exprs[size_t(x)].dtype = DType::f64;  // (int64 counters in, float64 numbers out)
    if (form == kRand) {  // (below the dtype's 1, as eager's run_rand: rand is [0, 1))
      const int32_t top = Lowerer::constant(b, largest_below_one(m.dtype), DType::f64);
      x = b.add(Expr{EOp::Select, DType::f64, Lowerer::arith(b, "<", x, top, DType::b8), x, top});
    }
  }
  b.root = Lowerer::cast(b, x, m.dtype);
  return nl.define(std::move(v));
}

}  // namespace

void register_position_lowerings(Lowerings& t) {
  t.add("masked_fill", masked_fill);
  t.add("tril", triangle, 1);
  t.add("triu", triangle, 0);
  t.add("arange", generator, kArange);
  t.add("linspace", generator, kLinspace);
  t.add("eye", generator, kEye);
  t.add("index_select", gather, kIndexSelect);
  t.add("gather", gather, kGather);
  t.add("embedding", gather, kEmbedding);
  t.add("rand", random, kRand, true);
  t.add("randn", random, kRandn, true);
  t.add("randint", random, kRandint, true);
}

}  // namespace cr::jit
