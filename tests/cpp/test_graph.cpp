// The graph IR passes (vm/graph/passes.cpp) and the eager backend (vm/graph/interp.cpp) on small
// hand-built graphs: each pass must do its rewrite, and the rewritten graph must compute the same
// values as the recorded one (every element compared, random inputs, the generator reset).
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "graph_builder.hpp"
#include "vm/graph/segment.hpp"
#include "vm/kernels/loop.hpp"

using namespace cr;
using namespace cr::graph;
using namespace cr::testing;

namespace {

// Every element equal, same dtype and shape (strides may differ).
bool same(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor x = contiguous(cast(a, DType::f64)), y = contiguous(cast(b, DType::f64));
  for (int64_t i = 0; i < x.numel(); ++i)
    if (x.data<double>()[i] != y.data<double>()[i]) return false;
  return true;
}

std::vector<double> elements(const Tensor& t) {
  Tensor x = contiguous(cast(t, DType::f64));
  return std::vector<double>(x.data<double>(), x.data<double>() + x.numel());
}

// Runs g on copies of `in` (so in-place writes to inputs stay visible in the result) from a
// fresh generator.
std::vector<Tensor> run(const Graph& g, Context& ctx, const std::vector<Tensor>& in) {
  std::vector<Tensor> vals(g.values.size());
  for (size_t i = 0; i < g.inputs.size(); ++i) vals[size_t(g.inputs[i])] = copy_of(in[i]);
  ctx.gen = Generator{};
  run_eager(g, ctx, vals);
  return vals;
}

std::vector<Tensor> random_inputs(const Graph& g, uint32_t seed) {
  std::vector<Tensor> in;
  for (int32_t v : g.inputs) in.push_back(uniform(concrete(g.values[size_t(v)].meta.sizes), seed++));
  return in;
}

// `after` (a rewrite of `before`) gives every output of `before` and every input the same values.
void require_same_results(const Graph& before, const Graph& after, Context& ctx) {
  for (uint32_t seed : {1u, 7u}) {
    std::vector<Tensor> in = random_inputs(before, seed);
    std::vector<Tensor> a = run(before, ctx, in), b = run(after, ctx, in);
    for (int32_t o : before.outputs) {
      INFO("output %" << o << " (seed " << seed << ")");
      REQUIRE(same(a[size_t(o)], b[size_t(o)]));
    }
    for (int32_t v : before.inputs) {
      INFO("input %" << v << " after the run");
      REQUIRE(same(a[size_t(v)], b[size_t(v)]));
    }
  }
}

const Node& node_of(const Graph& g, int32_t v) {
  REQUIRE(g.values[size_t(v)].node >= 0);
  return g.nodes[size_t(g.values[size_t(v)].node)];
}
std::string op_name(const Graph& g, int32_t v) {
  const Node& n = node_of(g, v);
  return n.kind == NodeKind::Op ? n.def().name : n.kind == NodeKind::Const ? "<const>" : "<input>";
}
std::vector<std::string> op_names(const Graph& g) {
  std::vector<std::string> r;
  for (const Node& n : g.nodes)
    if (n.kind == NodeKind::Op) r.push_back(n.def().name);
  return r;
}
bool has_alias(const Graph& g, int32_t removed, int32_t kept) {
  for (const Graph::Alias& a : g.aliases)
    if (a.removed == removed && a.kept == kept) return true;
  return false;
}

}  // namespace

TEST_CASE("eliminate_dead_code drops unused pure nodes, keeps outputs, writes and draws", "[graph]") {
  Context ctx;
  Builder B{ctx};
  int32_t x = B.input(uniform({2, 3}, 1)), y = B.input(uniform({2, 3}, 2));
  int32_t unused = B.op("add", {T(x), N(1)});
  int32_t out = B.op("mul", {T(x), N(2)});
  int32_t unused_of_out = B.op("neg", {T(out)});
  int32_t t = B.op("add", {T(x), N(3)});   // dead, except that an in-place op writes it
  int32_t t2 = B.op("add_", {T(t), N(1)});
  int32_t y2 = B.op("mul_", {T(y), N(4)});  // writes an input nobody reads afterwards
  int32_t r1 = B.op("rand", {I({4})});      // unused, but the draw shifts r2's values
  int32_t r2 = B.op("rand", {I({4})});
  B.g.outputs = {out, r2};

  Graph before = B.g;
  REQUIRE(eliminate_dead_code(B.g) == 2);
  const Graph& g = B.g;
  REQUIRE(op_names(g) == std::vector<std::string>{"mul", "add", "add_", "mul_", "rand", "rand"});
  REQUIRE(g.values[size_t(unused)].node == -1);
  REQUIRE(g.values[size_t(unused_of_out)].node == -1);
  // the surviving values point at their (renumbered) nodes
  for (int32_t v : {x, y, out, t, t2, y2, r1, r2}) {
    const Node& n = node_of(g, v);
    REQUIRE(std::find(n.outs.begin(), n.outs.end(), v) != n.outs.end());
  }
  REQUIRE(g.inputs == before.inputs);
  require_same_results(before, g, ctx);
  // a second run has nothing left to remove
  REQUIRE(eliminate_dead_code(B.g) == 0);
}

TEST_CASE("passes keep an op that writes its list arguments, and reads on either side apart", "[graph]") {
  Context ctx;
  Builder B{ctx};
  int32_t p = B.input(uniform({2, 3}, 1)), g = B.input(uniform({2, 3}, 2));
  int32_t before = B.op("mul", {T(p), N(2)});
  // _fused_sgd(params, grads, momentum_buffers, fresh, lr, momentum, dampening, weight_decay, ...):
  // p -= 0.5 g in place, no value of its own
  REQUIRE(B.ops("_fused_sgd", {TL({p}), TL({g}), TL({}), I({1}), N(0.5), N(0), N(0), N(0)}).empty());
  int32_t after = B.op("mul", {T(p), N(2)});
  int32_t both = B.op("sub", {T(before), T(after)});  // 2 (p - p') = g
  B.g.outputs = {both};
  Graph recorded = B.g;
  REQUIRE(eliminate_common_subexpressions(B.g) == 0);  // (the same key, another time)
  REQUIRE(eliminate_dead_code(B.g) == 0);
  REQUIRE(op_names(B.g) == std::vector<std::string>{"mul", "_fused_sgd", "mul", "sub"});
  std::vector<Tensor> in = random_inputs(recorded, 5);
  std::vector<Tensor> out = run(B.g, ctx, in);
  const std::vector<double> dx = elements(in[1]), r = elements(out[size_t(both)]);
  for (size_t i = 0; i < r.size(); ++i) REQUIRE(r[i] == Approx(dx[i]).margin(1e-6));
}

TEST_CASE("eliminate_common_subexpressions merges equal pure nodes only", "[graph]") {
  Context ctx;
  Builder B{ctx};
  int32_t x = B.input(uniform({2, 3}, 3));

  SECTION("two add(%0, 1) become one; uses and aliases follow") {
    int32_t a1 = B.op("add", {T(x), N(1)});
    int32_t a2 = B.op("add", {T(x), N(1)});
    int32_t other = B.op("add", {T(x), N(2)});  // a different scalar: not equal
    int32_t s = B.op("mul", {T(a2), T(other)});
    B.g.outputs = {a1, s};
    Graph before = B.g;
    REQUIRE(eliminate_common_subexpressions(B.g) == 1);
    REQUIRE(has_alias(B.g, a2, a1));
    REQUIRE(B.g.aliases.size() == 1);
    REQUIRE(B.g.aliases[0].copy);  // Lua's tensor of a2 must not share a1's storage
    REQUIRE(B.g.outputs == std::vector<int32_t>{a1, s});
    REQUIRE(node_of(B.g, s).args[0].value == a1);
    REQUIRE(eliminate_dead_code(B.g) == 1);
    REQUIRE(op_names(B.g) == std::vector<std::string>{"add", "add", "mul"});
    require_same_results(before, B.g, ctx);
  }

  SECTION("never two results Lua receives: they stay two tensors") {
    int32_t a = B.op("add", {T(x), N(1)});
    int32_t b = B.op("add", {T(x), N(1)});
    B.g.outputs = {a, b};
    Graph before = B.g;
    REQUIRE(eliminate_common_subexpressions(B.g) == 0);
    std::vector<Tensor> r = run(B.g, ctx, random_inputs(B.g, 1));
    REQUIRE(r[size_t(a)].storage() != r[size_t(b)].storage());
    require_same_results(before, B.g, ctx);
  }

  SECTION("not across an in-place write to the storage the operands read") {
    int32_t v = B.op("view", {T(x), I({6})});
    int32_t a1 = B.op("add", {T(v), N(1)});
    int32_t a1b = B.op("add", {T(v), N(1)});  // same epoch as a1: merged
    B.op("add_", {T(x), N(1)});
    int32_t a2 = B.op("add", {T(v), N(1)});  // same arguments as a1, but x changed
    int32_t a2b = B.op("add", {T(v), N(1)});
    int32_t s1 = B.op("mul", {T(a1), T(a1b)});
    int32_t s2 = B.op("mul", {T(a2), T(a2b)});
    B.g.outputs = {a1, s1, a2, s2};
    Graph before = B.g;
    REQUIRE(eliminate_common_subexpressions(B.g) == 2);
    REQUIRE(has_alias(B.g, a1b, a1));
    REQUIRE(has_alias(B.g, a2b, a2));
    REQUIRE(node_of(B.g, s2).args[1].value == a2);
    require_same_results(before, B.g, ctx);
    std::vector<Tensor> r = run(B.g, ctx, random_inputs(B.g, 5));
    REQUIRE_FALSE(same(r[size_t(a1)], r[size_t(a2)]));  // the write is visible
  }

  SECTION("not random ops") {
    int32_t r1 = B.op("rand", {I({3})});
    int32_t r2 = B.op("rand", {I({3})});
    int32_t n1 = B.op("randn", {I({2, 2})});
    int32_t n2 = B.op("randn", {I({2, 2})});
    B.g.outputs = {r1, r2, n1, n2};
    Graph before = B.g;
    REQUIRE(eliminate_common_subexpressions(B.g) == 0);
    REQUIRE(B.g.aliases.empty());
    require_same_results(before, B.g, ctx);
    std::vector<Tensor> r = run(B.g, ctx, random_inputs(B.g, 5));
    REQUIRE_FALSE(same(r[size_t(r1)], r[size_t(r2)]));
  }

  SECTION("not values written in place later, directly or through a view") {
    int32_t a1 = B.op("add", {T(x), N(1)});
    int32_t a2 = B.op("add", {T(x), N(1)});
    int32_t w = B.op("add_", {T(a2), N(5)});
    int32_t b1 = B.op("mul", {T(x), N(3)});
    int32_t b2 = B.op("mul", {T(x), N(3)});
    int32_t bv = B.op("view", {T(b1), I({6})});  // the first of the pair is written, via a view
    int32_t bw = B.op("mul_", {T(bv), N(-1)});
    B.g.outputs = {a1, w, b1, b2, bw};
    Graph before = B.g;
    REQUIRE(eliminate_common_subexpressions(B.g) == 0);
    REQUIRE(B.g.aliases.empty());
    require_same_results(before, B.g, ctx);
  }
}

TEST_CASE("fold_constants evaluates creation-only subgraphs", "[graph]") {
  Context ctx;
  Builder B{ctx};
  int32_t x = B.input(uniform({3}, 4));
  int32_t ones = B.op("ones", {I({3})});
  int32_t two = B.op("mul", {T(ones), N(2)});
  int32_t ar = B.op("arange", {N(3)});                  // int64 {0,1,2}
  int32_t half = B.op("full", {I({3}), N(0.5)});        // float32 0.5
  int32_t sum = B.op("add", {T(ar), T(half)});          // {0.5,1.5,2.5}
  int32_t dep = B.op("add", {T(x), T(two)});            // reads an input
  int32_t r = B.op("rand", {I({3})});
  int32_t rdep = B.op("mul", {T(r), N(2)});             // reads a random value
  int32_t w = B.op("zeros", {I({3})});                  // written in place below
  int32_t wread = B.op("mul", {T(w), N(3)});
  int32_t wv = B.op("view", {T(w), I({1, 3})});
  int32_t ww = B.op("add_", {T(wv), T(x)});
  B.g.outputs = {two, sum, dep, rdep, wread, ww};
  Graph before = B.g;

  REQUIRE(fold_constants(B.g, ctx) == 5);  // ones, mul, arange, full, add
  for (int32_t v : {ones, two, ar, half, sum}) {
    INFO("%" << v);
    REQUIRE(node_of(B.g, v).kind == NodeKind::Const);
    REQUIRE(node_of(B.g, v).args.empty());
  }
  REQUIRE(elements(node_of(B.g, two).constant) == std::vector<double>{2, 2, 2});
  REQUIRE(node_of(B.g, sum).constant.dtype() == DType::f32);
  REQUIRE(elements(node_of(B.g, sum).constant) == std::vector<double>{0.5, 1.5, 2.5});
  REQUIRE(op_name(B.g, dep) == "add");
  REQUIRE(op_name(B.g, r) == "rand");
  REQUIRE(op_name(B.g, rdep) == "mul");
  REQUIRE(op_name(B.g, w) == "zeros");
  REQUIRE(op_name(B.g, wread) == "mul");
  REQUIRE(op_name(B.g, wv) == "view");
  require_same_results(before, B.g, ctx);

  REQUIRE(eliminate_dead_code(B.g) == 3);  // ones, arange, full: only folded values read them
  REQUIRE(op_names(B.g) == std::vector<std::string>{"add", "rand", "mul", "zeros", "mul", "view", "add_"});
  require_same_results(before, B.g, ctx);

  // a folded output is the caller's own copy: writing it does not change the next run
  std::vector<Tensor> in = random_inputs(B.g, 9);
  std::vector<Tensor> first = run(B.g, ctx, in);
  fill(first[size_t(two)], 42);
  REQUIRE(elements(run(B.g, ctx, in)[size_t(two)]) == std::vector<double>{2, 2, 2});
}

TEST_CASE("canonicalize_views removes identity views and collapses view chains", "[graph]") {
  Context ctx;
  Builder B{ctx};

  SECTION("an identity view is its input") {
    int32_t x = B.input(uniform({2, 3}, 5));
    int32_t v = B.op("view", {T(x), I({2, 3})});
    int32_t e = B.op("expand", {T(x), I({2, 3})});
    int32_t s = B.op("add", {T(v), T(e)});
    int32_t f = B.op("view", {T(x), I({3, 2})});  // not an identity
    B.g.outputs = {v, s, f};
    REQUIRE(B.g.values[size_t(v)].views == x);
    Graph before = B.g;
    REQUIRE(canonicalize_views(B.g) == 2);
    REQUIRE(has_alias(B.g, v, x));
    REQUIRE(has_alias(B.g, e, x));
    REQUIRE(B.g.outputs == std::vector<int32_t>{x, s, f});
    REQUIRE(node_of(B.g, s).args[0].value == x);
    REQUIRE(node_of(B.g, s).args[1].value == x);
    require_same_results(before, B.g, ctx);
    REQUIRE(eliminate_dead_code(B.g) == 2);
    REQUIRE(op_names(B.g) == std::vector<std::string>{"add", "view"});
    require_same_results(before, B.g, ctx);
  }

  SECTION("a view of a view is one as_strided of the base") {
    int32_t x = B.input(uniform({4, 5}, 6));
    int32_t n = B.op("narrow", {T(x), N(1), N(2), N(2)});  // rows 2..3: {2,5}, offset 5
    int32_t t = B.op("transpose", {T(n), N(1), N(2)});     // {5,2} strides {1,5}
    int32_t u = B.op("narrow", {T(t), N(1), N(2), N(3)});  // {3,2}, offset 6
    int32_t s = B.op("mul", {T(u), N(2)});
    B.g.outputs = {t, u, s};
    Graph before = B.g;
    REQUIRE(canonicalize_views(B.g) == 2);
    const Node& nt = node_of(B.g, t);
    REQUIRE(std::string(nt.def().name) == "as_strided");
    REQUIRE(nt.args.size() == 4);
    REQUIRE(nt.args[0].value == x);
    REQUIRE(nt.args[1].ints == std::vector<int64_t>{5, 2});
    REQUIRE(nt.args[2].ints == std::vector<int64_t>{1, 5});
    REQUIRE(nt.args[3].num == 5);
    REQUIRE(B.g.values[size_t(t)].views == x);
    const Node& nu = node_of(B.g, u);
    REQUIRE(std::string(nu.def().name) == "as_strided");
    REQUIRE(nu.args[0].value == x);
    REQUIRE(nu.args[3].num == 6);
    REQUIRE(B.g.aliases.empty());
    require_same_results(before, B.g, ctx);
    REQUIRE(eliminate_dead_code(B.g) == 1);  // the narrow of x
    REQUIRE(op_names(B.g) == std::vector<std::string>{"as_strided", "as_strided", "mul"});
    require_same_results(before, B.g, ctx);
    // still views: they share the input's storage
    std::vector<Tensor> r = run(B.g, ctx, random_inputs(B.g, 3));
    REQUIRE(r[size_t(u)].storage() == r[size_t(x)].storage());
  }

  SECTION("a view of a computed value stays") {
    int32_t x = B.input(uniform({2, 3}, 8));
    int32_t a = B.op("add", {T(x), N(1)});
    int32_t t = B.op("transpose", {T(a), N(1), N(2)});
    B.g.outputs = {t};
    REQUIRE(canonicalize_views(B.g) == 0);
    REQUIRE(op_name(B.g, t) == "transpose");
  }
}

TEST_CASE("optimize keeps the values of a mixed graph", "[graph]") {
  Context ctx;
  Builder B{ctx};
  int32_t x = B.input(uniform({2, 3}, 10));
  int32_t v = B.op("view", {T(x), I({2, 3})});             // identity view
  int32_t ones = B.op("ones", {I({2, 3})});
  int32_t c = B.op("mul", {T(ones), N(2)});                // folded
  int32_t a1 = B.op("add", {T(v), T(c)});
  int32_t a2 = B.op("add", {T(x), T(c)});                  // = a1 once v is x
  int32_t a3 = B.op("mul", {T(a2), N(1)});
  B.op("exp", {T(x)});                                     // dead
  int32_t n = B.op("narrow", {T(x), N(2), N(1), N(2)});
  int32_t t = B.op("transpose", {T(n), N(1), N(2)});       // one as_strided of x
  int32_t r = B.op("rand", {I({2, 3})});
  int32_t s = B.op("add", {T(a3), T(r)});
  int32_t w = B.op("mul", {T(x), N(-1)});
  int32_t w2 = B.op("sub_", {T(w), T(a1)});                // an in-place write survives
  B.g.outputs = {a1, t, s, w2};
  Graph before = B.g;
  REQUIRE(before.op_count() == 13);

  optimize(B.g, ctx);
  REQUIRE(B.g.op_count() == 7);
  REQUIRE(op_names(B.g) == std::vector<std::string>{"add", "mul", "as_strided", "rand", "add", "mul", "sub_"});
  REQUIRE(has_alias(B.g, v, x));
  REQUIRE(has_alias(B.g, a2, a1));
  REQUIRE(node_of(B.g, c).kind == NodeKind::Const);
  REQUIRE(B.g.outputs == std::vector<int32_t>{a1, t, s, w2});
  require_same_results(before, B.g, ctx);
}

TEST_CASE("run_eager reports a failing op at the line that recorded it", "[graph]") {
  Context ctx;
  Builder B{ctx};
  Tensor idx = Tensor::empty({2}, DType::i64);
  idx.data<int64_t>()[0] = 1, idx.data<int64_t>()[1] = 2;
  int32_t x = B.input(uniform({3, 2}, 11));
  int32_t i = B.input(idx);
  std::string where = GENERATE(std::string("model.lua:7"), std::string());
  int32_t s = B.op("index_select", {T(x), N(1), T(i)}, where);
  B.g.outputs = {s};
  Graph g = B.g;
  optimize(g, ctx);

  // the recorded indices were valid; these are not (1-based: 5 is past the 3 rows)
  Tensor bad = copy_of(idx);
  bad.data<int64_t>()[1] = 5;
  std::vector<Tensor> vals(g.values.size());
  vals[size_t(x)] = uniform({3, 2}, 12);
  vals[size_t(i)] = bad;
  std::string msg;
  bool located = false;
  try {
    run_eager(g, ctx, vals);
  } catch (const LocatedError& e) {
    located = true;
    msg = e.what();
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO(msg);
  REQUIRE(located == !where.empty());
  std::string prefix = where.empty() ? "index_select: " : "model.lua:7: index_select: ";
  REQUIRE(msg.rfind(prefix, 0) == 0);
  REQUIRE(msg.find("index 5 is out of range") != std::string::npos);

  vals[size_t(i)] = idx;  // and the valid indices run
  run_eager(g, ctx, vals);
  REQUIRE(vals[size_t(s)].sizes() == Shape{2, 2});
}

TEST_CASE("Graph::str prints one line per node with its position", "[graph]") {
  Context ctx;
  Builder B{ctx};
  B.g.name = "f.lua:1 #1";
  int32_t a = B.op("add", {T(B.input(uniform({2, 3}, 13))), N(1)}, "model.lua:12");
  int32_t t = B.op("transpose", {T(a), N(1), N(2)}, "model.lua:13");
  B.g.outputs = {t};
  std::string s = B.g.str();
  INFO(s);
  std::vector<std::string> lines;
  for (size_t p = 0, e; p < s.size(); p = e + 1) {
    e = s.find('\n', p);
    lines.push_back(s.substr(p, e - p));
  }
  REQUIRE(lines.size() == 1 + B.g.nodes.size() + 1);  // header, nodes, outputs
  REQUIRE(lines[0] == "graph f.lua:1 #1: 1 inputs, 2 ops");
  REQUIRE(lines[1] == "  %0 = input 1 : float32{2,3}");
  REQUIRE(lines[2] == "  %1 = add(%0, 1) : float32{2,3}    -- model.lua:12");
  REQUIRE(lines[3] == "  %2 = transpose(%1, 1, 2) : float32{3,2} strides {1,3}    -- model.lua:13");
  REQUIRE(lines[4] == "  outputs: %2");
}

// ---- regressions: aliasing and constants ------------------------------------------------------

TEST_CASE("fold_constants keeps a view of a constant a view of it", "[graph]") {
  Context ctx; Builder B{ctx};
  int32_t c = B.op("ones", {I({2, 3})});
  int32_t t = B.op("transpose", {T(c), N(1), N(2)});
  B.g.outputs = {c, t};
  Graph before = B.g;
  optimize(B.g, ctx);
  auto a = run(before, ctx, {}), b = run(B.g, ctx, {});
  CHECK(a[c].storage() == a[t].storage());
  CHECK(b[c].storage() == b[t].storage());
}

TEST_CASE("views of a folded constant never reach the graph's own copy", "[graph]") {
  Context ctx; Builder B{ctx};
  int32_t c = B.op("ones", {I({4})});
  auto p = B.ops("chunk", {T(c), N(2)});
  B.g.outputs = {p[0], p[1]};
  optimize(B.g, ctx);
  auto r1 = run(B.g, ctx, {});
  fill(r1[p[0]], 7);  // the caller writes its result
  auto r2 = run(B.g, ctx, {});
  CHECK(elements(r2[p[0]]) == std::vector<double>{1, 1});
}

TEST_CASE("a removed alias of a folded constant is a fresh tensor each run", "[graph]") {
  Context ctx; Builder B{ctx};
  int32_t x = B.input(uniform({3}, 1));
  int32_t c = B.op("ones", {I({3})});
  int32_t v = B.op("view", {T(c), I({3})});
  int32_t s = B.op("add", {T(x), T(v)});
  B.g.outputs = {s};
  optimize(B.g, ctx);
  auto in = random_inputs(B.g, 1);
  auto r1 = run(B.g, ctx, in);
  INFO(B.g.str());
  REQUIRE(r1[v].defined());  // a lazy tensor of v would get this
  fill(r1[v], 7);
  auto r2 = run(B.g, ctx, in);
  CHECK(same(r1[s], r2[s]));
}

TEST_CASE("optimize keeps two equal results two tensors", "[graph]") {
  Context ctx; Builder B{ctx};
  int32_t x = B.input(uniform({3}, 1));
  int32_t a = B.op("add", {T(x), N(1)});
  int32_t b = B.op("add", {T(x), N(1)});
  B.g.outputs = {a, b};
  Graph before = B.g;
  optimize(B.g, ctx);
  auto in = random_inputs(B.g, 1);
  auto r0 = run(before, ctx, in), r = run(B.g, ctx, in);
  CHECK(r0[a].storage() != r0[b].storage());
  CHECK(r[a].storage() != r[b].storage());
}

TEST_CASE("canonicalize_views removes a transpose of a transpose", "[graph]") {
  Context ctx; Builder B{ctx};
  int32_t x = B.input(uniform({2, 3}, 1));
  int32_t t = B.op("transpose", {T(x), N(1), N(2)});
  int32_t u = B.op("transpose", {T(t), N(1), N(2)});
  B.g.outputs = {u};
  optimize(B.g, ctx);
  INFO(B.g.str());
  CHECK(B.g.op_count() == 0);
}

TEST_CASE("canonicalize_views collapses views across a removed identity view", "[graph]") {
  Context ctx; Builder B{ctx};
  int32_t x = B.input(uniform({4, 5}, 1));
  int32_t n = B.op("narrow", {T(x), N(1), N(2), N(2)});
  int32_t i = B.op("view", {T(n), I({2, 5})});
  int32_t t = B.op("transpose", {T(i), N(1), N(2)});
  int32_t u = B.op("narrow", {T(t), N(1), N(1), N(2)});
  B.g.outputs = {u};
  optimize(B.g, ctx);
  INFO(B.g.str());
  CHECK(B.g.op_count() == 1);
}

TEST_CASE("recomputation keeps a write a view of the value sees", "[graph]") {
  Context ctx; Builder B{ctx};
  int32_t x = B.input(uniform({2, 3}, 1));
  int32_t t = B.op("add", {T(x), N(1)});
  int32_t v = B.op("view", {T(t), I({6})});
  int32_t t2 = B.op("add_", {T(t), N(2)});
  B.g.outputs = {t2};
  Graph full = B.g, pruned = B.g;
  pruned.outputs = {v};
  eliminate_dead_code(pruned, false);
  auto in = random_inputs(full, 1);
  auto a = run(full, ctx, in), b = run(pruned, ctx, in);
  CHECK(same(a[v], b[v]));
}

// matmul -> scale -> softmax -> matmul of CUDA 16-bit / float32 values becomes one attention op (the pass
// reads metadata only: the sample values live on the CPU and the device is set afterwards; the
// rewritten graph, moved back to the CPU, runs attention's CPU kernel against the recorded ops).
TEST_CASE("fuse_patterns turns attention's ops into one attention op where the CUDA kernel takes them", "[graph]") {
  Context ctx;
  auto on_device = [](Graph g, int8_t type) {
    for (Value& v : g.values) v.meta.device = Device{type, 0};
    return g;
  };
  // (float32 takes the tiled kernel from 32 query rows, every dtype the split kernel up to 8)
  for (auto [d, L] : {std::pair{DType::f16, int64_t(8)}, {DType::f32, int64_t(40)}, {DType::f32, int64_t(4)}})
  for (const char* scale_op : {"div", "mul", ""})
  for (const std::string mask : {"", "add", "masked_fill"}) {
    INFO(dtype_name(d) << ", " << L << " rows, scale by " << (*scale_op ? scale_op : "nothing") << ", mask " << mask);
    Builder B{ctx};
    auto input = [&](const Shape& s, uint32_t seed) { return B.input(cast(uniform(s, seed), d)); };
    const int32_t q = input({2, 3, L, 16}, 1), k = input({2, 3, 10, 16}, 2), v = input({2, 3, 10, 16}, 3);
    // an added {L, S} mask, or a bool {3, 1, S} one (true: left out, a fifth of the keys)
    const int32_t m = mask == "add" ? input({L, 10}, 4) : B.input(uniform({3, 1, 10}, 5));
    const int32_t blocked = mask == "masked_fill" ? B.op("gt", {T(m), N(1.2)}) : -1;
    const int32_t kt = B.op("transpose", {T(k), N(-2), N(-1)});
    int32_t s = B.op("matmul", {T(q), T(kt)});
    if (*scale_op) s = B.op(scale_op, {T(s), N(4)});
    if (mask == "add") s = B.op("add", {T(s), T(m)});
    if (mask == "masked_fill") s = B.op("masked_fill", {T(s), T(blocked), N(-INFINITY)});
    const int32_t o = B.op("matmul", {T(B.op("softmax", {T(s), N(-1)})), T(v)});
    B.g.outputs = {o};

    Graph cpu = B.g;
    CHECK(fuse_patterns(cpu) == 0);  // the CPU runs the composite (BLAS products)
    Graph g = on_device(B.g, 1);
    REQUIRE(fuse_patterns(g) == 1);
    eliminate_dead_code(g);
    CHECK(op_names(g) == (mask == "masked_fill" ? std::vector<std::string>{"gt", "transpose", "transpose", "logical_not", "attention"}
                                                : std::vector<std::string>{"transpose", "transpose", "attention"}));
    const Node& att = node_of(g, o);
    CHECK(att.args[0].value == q);
    CHECK(att.args[2].value == v);
    CHECK(att.args[3].num == (std::string(scale_op) == "div" ? 0.25 : *scale_op ? 4.0 : 1.0));
    CHECK(g.values[size_t(att.args[1].value)].meta.sizes == g.values[size_t(k)].meta.sizes);
    CHECK(att.args.size() == (mask.empty() ? 5u : 6u));
    if (mask == "add") CHECK(att.args[5].value == m);

    // same values as the recorded ops, up to float16 rounding of the scores
    std::vector<Tensor> in = {B.sample[size_t(q)], B.sample[size_t(k)], B.sample[size_t(v)], B.sample[size_t(m)]};
    std::vector<Tensor> a = run(B.g, ctx, in), b = run(on_device(g, 0), ctx, in);
    const std::vector<double> x = elements(a[size_t(o)]), y = elements(b[size_t(o)]);
    REQUIRE(x.size() == y.size());
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(std::abs(x[i] - y[i]) <= 0.02 + 0.02 * std::abs(x[i]));
  }
  SECTION("not when the scores are used elsewhere, nor for float64, other head sizes or 9 to 31 float32 rows") {
    for (int variant = 0; variant < 4; ++variant) {
      Builder B{ctx};
      const DType d = variant == 1 ? DType::f64 : variant == 3 ? DType::f32 : DType::f16;
      const int64_t e = variant == 2 ? 24 : 16;
      auto input = [&](const Shape& s, uint32_t seed) { return B.input(cast(uniform(s, seed), d)); };
      // (up to 8 query rows take the split kernel, any head size up to 128)
      const int32_t q = input({4, 12, e}, 1), k = input({4, 10, e}, 2), v = input({4, 10, e}, 3);
      const int32_t s = B.op("matmul", {T(q), T(B.op("transpose", {T(k), N(-2), N(-1)}))});
      const int32_t o = B.op("matmul", {T(B.op("softmax", {T(s), N(-1)})), T(v)});
      B.g.outputs = variant == 0 ? std::vector<int32_t>{o, s} : std::vector<int32_t>{o};
      Graph g = on_device(B.g, 1);
      CHECK(fuse_patterns(g) == 0);
    }
  }
  SECTION("an added mask only where the op's mask rule takes it (vm/ops/attention.hpp)") {
    // 0: float16 {8, 10} (taken); 1: {1, 4, 8, 10} has more dims than the scores {4, 8, 10} (the
    // add broadcasts them up); 2: bool added (0 / 1, not attention's bool meaning)
    for (int variant = 0; variant < 3; ++variant) {
      INFO("variant " << variant);
      Builder B{ctx};
      auto input = [&](const Shape& s, uint32_t seed) { return B.input(cast(uniform(s, seed), DType::f16)); };
      const int32_t q = input({4, 8, 16}, 1), k = input({4, 10, 16}, 2), v = input({4, 10, 16}, 3);
      const int32_t m = variant == 0   ? input({8, 10}, 4)
                        : variant == 1 ? input({1, 4, 8, 10}, 4)
                                       : B.op("gt", {T(B.input(uniform({8, 10}, 4))), N(0.5)});
      const int32_t s = B.op("mul", {T(B.op("matmul", {T(q), T(B.op("transpose", {T(k), N(-2), N(-1)}))})), N(0.25)});
      const int32_t o = B.op("matmul", {T(B.op("softmax", {T(B.op("add", {T(s), T(m)})), N(-1)})), T(v)});
      B.g.outputs = {o};
      Graph g = on_device(B.g, 1);
      CHECK(fuse_patterns(g) == (variant == 0 ? 1 : 0));
    }
  }
}

// matmul + bias (or linear with its bias) -> [relu | gelu tanh] -> [+ residual] on the CPU becomes
// one _addmm_epilogue, whose per-tile epilogue gives the recorded ops' values within float
// rounding (600 rows: tiles of 256, 256 and 88); chains it cannot take keep their ops.
TEST_CASE("fuse_patterns turns a product's bias, activation and residual into one _addmm_epilogue", "[graph]") {
  Context ctx;
  for (const std::string head : {"matmul", "linear"})
  for (const std::string act : {"", "relu", "gelu"})
  for (bool residual : {false, true}) {
    INFO(head << " " << act << (residual ? " + residual" : ""));
    Builder B{ctx};
    const int32_t x = B.input(uniform({2, 300, 48}, 1)), b = B.input(uniform({40}, 3)), r = B.input(uniform({2, 300, 40}, 4));
    const int32_t w = B.input(uniform(head == "matmul" ? Shape{48, 40} : Shape{40, 48}, 2));
    int32_t y = head == "matmul" ? B.op("add", {T(B.op("matmul", {T(x), T(w)})), T(b)}) : B.op("linear", {T(x), T(w), T(b)});
    if (act == "relu") y = B.op("relu", {T(y)});
    if (act == "gelu") y = B.op("gelu", {T(y), S("tanh")});
    if (residual) y = B.op("add", {T(r), T(y)});
    B.g.outputs = {y};
    Graph g = B.g;
    REQUIRE(fuse_patterns(g) == 1);
    eliminate_dead_code(g);
    CHECK(op_names(g) == std::vector<std::string>{"_addmm_epilogue"});
    const std::vector<Tensor> in = random_inputs(B.g, 5);
    const std::vector<double> want = elements(run(B.g, ctx, in)[size_t(y)]), got = elements(run(g, ctx, in)[size_t(y)]);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) REQUIRE(std::abs(got[i] - want[i]) <= 1e-5 * (1 + std::abs(want[i])));
  }
  SECTION("chains it cannot take keep their ops") {
    Builder B{ctx};
    const int32_t x = B.input(uniform({6, 8}, 1)), w = B.input(uniform({8, 5}, 2)), b = B.input(uniform({6, 5}, 3));
    const int32_t p = B.op("matmul", {T(x), T(w)});
    const int32_t wide = B.op("add", {T(p), T(b)});                    // a {M, N} bias is no bias
    const int32_t twice = B.op("gelu", {T(B.op("add", {T(p), T(B.input(uniform({5}, 4)))})), S("none")});  // erf gelu
    B.g.outputs = {wide, twice};
    Graph g = B.g;
    CHECK(fuse_patterns(g) == 0);  // (p has two uses, and the erf gelu is not cuBLASLt's)
    Builder I{ctx};
    const int32_t xi = I.input(cast(uniform({6, 8}, 1), DType::i64)), wi = I.input(cast(uniform({8, 5}, 2), DType::i64));
    I.g.outputs = {I.op("add", {T(I.op("matmul", {T(xi), T(wi)})), T(I.input(cast(uniform({5}, 4), DType::i64)))})};
    CHECK(fuse_patterns(I.g) == 0);  // integers: no BLAS tiles
  }
}

TEST_CASE("run_eager frees a transient graph's values after their last reader", "[graph]") {
  Context ctx;
  Builder B{ctx};
  int32_t x = B.input(uniform({2, 3}, 1));
  int32_t a = B.op("mul", {T(x), N(2)});
  int32_t v = B.op("reshape", {T(a), I({3, 2})});  // a view of a
  int32_t b = B.op("exp", {T(v)});
  int32_t c = B.op("add", {T(b), N(1)});
  int32_t out = B.op("mul", {T(c), T(v)});
  B.g.outputs = {out};
  Graph kept = B.g;
  B.g.transient = true;
  const DeadLists dead = dead_after(B.g);
  REQUIRE(dead.size() == B.g.nodes.size());
  // a freed after reshape (its view v keeps the storage), b after add, v and c after the last
  // node; the input x after its reader too, in a transient graph only (its caller reads outputs)
  std::vector<int32_t> freed;
  for (const auto& d : dead) freed.insert(freed.end(), d.begin(), d.end());
  std::sort(freed.begin(), freed.end());
  REQUIRE(freed == std::vector<int32_t>{x, a, v, b, c});
  DeadLists without_x = dead;
  for (auto& d : without_x) d.erase(std::remove(d.begin(), d.end(), x), d.end());
  REQUIRE(without_x == dead_after(kept));
  REQUIRE(dead.back() == std::vector<int32_t>{v, c});
  std::vector<Tensor> vals(B.g.values.size()), ref(kept.values.size());
  vals[size_t(x)] = ref[size_t(x)] = B.sample[size_t(x)];
  run_eager(B.g, ctx, vals);
  run_eager(kept, ctx, ref);
  for (int32_t d : freed) REQUIRE(!vals[size_t(d)].defined());
  for (int32_t d : freed) REQUIRE(ref[size_t(d)].defined());  // not transient: every value kept
  REQUIRE(same(vals[size_t(out)], ref[size_t(out)]));
  // a graph that is not transient frees the values its caller says nothing holds, and only those
  std::vector<char> unheld(kept.values.size(), 0);
  unheld[size_t(a)] = unheld[size_t(b)] = 1;
  std::vector<Tensor> some(kept.values.size());
  some[size_t(x)] = B.sample[size_t(x)];
  run_eager(kept, ctx, some, nullptr, &unheld);
  REQUIRE(!some[size_t(a)].defined());
  REQUIRE(!some[size_t(b)].defined());
  REQUIRE(some[size_t(v)].defined());
  REQUIRE(some[size_t(c)].defined());
  REQUIRE(same(some[size_t(out)], ref[size_t(out)]));
}

// A dropped value is computed after its graph ran from the state the run left (lazy.cpp): its
// reads of an input follow the graph's writes to it; draws run again from the run's generator.
TEST_CASE("replayable: reads of written inputs after the writes only, the graph's own writes and draws again",
          "[graph]") {
  Context ctx;
  Builder B{ctx};
  int32_t buf = B.input(uniform({3}, 1)), x = B.input(uniform({3}, 2));
  int32_t before = B.op("mul", {T(buf), N(3)});  // buf before the write below
  int32_t buf2 = B.op("add_", {T(buf), T(x)});
  int32_t after = B.op("mul", {T(buf2), N(3)});  // buf as the run leaves it
  int32_t t = B.op("add", {T(x), N(1)});         // a storage of the graph's own, written twice
  int32_t from_t = B.op("neg", {T(B.op("mul_", {T(t), N(2)}))});
  B.op("add_", {T(t), N(5)});
  int32_t drawn = B.op("add", {T(B.op("rand", {I({3})})), T(after)});
  CHECK_FALSE(graph::replayable(B.g, before));
  CHECK(graph::replayable(B.g, after));
  CHECK(graph::replayable(B.g, from_t));
  CHECK(graph::replayable(B.g, drawn));  // (every draw before it runs again: the generator's offsets)
  // buf written again: what read it before that write no longer can be
  int32_t late = B.op("sub", {T(buf2), N(1)});
  B.op("add_", {T(buf2), N(1)});
  CHECK_FALSE(graph::replayable(B.g, late));
  CHECK_FALSE(graph::replayable(B.g, after));
}
