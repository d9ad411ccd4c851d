// The loop IR's Index expression (an element's position as data, jit/loop_ir.hpp): tril / triu
// and the generators arange / linspace / eye lowered to loops; and gathers (a load at a position
// that is data): index_select / gather / embedding, with their positions checked by the kernel. Each graph goes through the CPU
// backend and must give the eager kernels' bits; on CUDA the same lowering makes their eager
// kernels (tests/cpp/test_cuda_emit.cpp compiles them to CUBIN, tests/lua/test_cuda.lua runs
// them). Skipped (with a warning) where libgccjit cannot be loaded.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>

#include "graph_builder.hpp"
#include "jit/jit.hpp"
#include "jit/loop_ir.hpp"
#include "vm/kernels/loop.hpp"

using namespace cr;
using namespace cr::testing;

namespace {

bool have_gccjit() { return available(jit::cpu_backend_available, "libgccjit unavailable, Index expression tests skipped"); }

Arg none() { return Arg{}; }

// Every op of the graph lowers to loops (no extern step), and the compiled graph gives eager's
// values bit for bit, every element written.
void check_bits(const std::string& what, const std::function<void(Builder&)>& build) {
  INFO(what);
  Context ctx;
  Builder B{ctx};
  build(B);
  auto g = std::make_shared<Graph>(B.g);
  g->name = what;
  jit::LoopGraph lg = jit::lower(*g);
  for (const jit::LStep& s : lg.steps) CHECK(!s.external);
  jit::Options o;
  o.threads = 2;
  o.sync = true;
  jit::compile_native(g, o);
  REQUIRE(g->native);
  REQUIRE(g->native->error == "");
  REQUIRE(g->native->exe);
  std::vector<Tensor> eager(g->values.size()), native(g->values.size());
  for (int32_t v : g->inputs) eager[size_t(v)] = native[size_t(v)] = copy_of(B.sample[size_t(v)]);
  run_eager(*g, ctx, eager);
  for (int32_t out : g->outputs) {  // outputs start filled with a byte pattern: every element written?
    const graph::ValueMeta& m = g->values[size_t(out)].meta;
    native[size_t(out)] = Tensor::empty(graph::concrete(m.sizes), m.dtype);
    std::memset(native[size_t(out)].data_bytes(), 0xA5, size_t(native[size_t(out)].numel()) * native[size_t(out)].itemsize());
  }
  g->native->exe->run(ctx, native);
  for (int32_t out : g->outputs) {
    INFO("output %" << out);
    Tensor a = contiguous(native[size_t(out)]), b = contiguous(eager[size_t(out)]);
    REQUIRE(a.sizes() == b.sizes());
    REQUIRE(a.dtype() == b.dtype());
    CHECK(std::memcmp(a.data_bytes(), b.data_bytes(), size_t(a.numel()) * a.itemsize()) == 0);
  }
}

}  // namespace

TEST_CASE("Gathers compiled: index_select / gather / embedding, eager's bits", "[gccjit]") {
  if (!have_gccjit()) return;
  for (DType d : {DType::f32, DType::f64, DType::i32, DType::i64, DType::b8}) {
    check_bits(cat("index_select ", dtype_name(d)), [&](Builder& B) {
      int32_t x = B.input(cast(uniform({5, 7}, 3), d));
      int32_t t = B.op("transpose", {T(x), N(1), N(2)});  // {7, 5}, strided
      int32_t cols = B.input(positions({9}, 7, 4)), rows = B.input(positions({3}, 5, 5, DType::i32));
      int32_t none_ = B.input(positions({0}, 5, 6));
      B.g.outputs = {B.op("index_select", {T(x), N(2), T(cols)}), B.op("index_select", {T(x), N(-2), T(rows)}),
                     B.op("index_select", {T(t), N(2), T(rows)}), B.op("index_select", {T(x), N(1), T(none_)})};
    });
    check_bits(cat("gather ", dtype_name(d)), [&](Builder& B) {
      int32_t x = B.input(cast(uniform({5, 7}, 7), d));
      int32_t t = B.op("transpose", {T(x), N(1), N(2)});
      B.g.outputs = {B.op("gather", {T(x), N(1), T(B.input(positions({3, 7}, 5, 8)))}),
                     B.op("gather", {T(x), N(2), T(B.input(positions({5, 11}, 7, 9)))}),
                     B.op("gather", {T(x), N(2), T(B.input(positions({2, 3}, 7, 10, DType::i32)))}),
                     B.op("gather", {T(t), N(1), T(B.input(positions({4, 5}, 7, 11)))})};
    });
    check_bits(cat("embedding ", dtype_name(d)), [&](Builder& B) {
      int32_t w = B.input(cast(uniform({9, 6}, 12), d));
      B.g.outputs = {B.op("embedding", {T(B.input(positions({2, 3}, 9, 13))), T(w)}),
                     B.op("embedding", {T(B.input(positions({4}, 9, 14))), T(B.op("transpose", {T(B.input(cast(uniform({6, 9}, 15), d))), N(1), N(2)}))})};
    });
  }
  check_bits("gathers fused with their users, of computed values, at computed positions", [](Builder& B) {
    int32_t x = B.input(uniform({6, 8}, 16));
    int32_t idx = B.input(positions({5}, 8, 17));
    int32_t sel = B.op("index_select", {T(B.op("sin", {T(x)})), N(2), T(idx)});  // the sin is stored first
    int32_t at = B.op("sub", {T(B.op("add", {T(idx), N(3)})), N(3)});           // a position computed in the kernel
    B.g.outputs = {B.op("mul", {T(sel), N(2)}), B.op("add", {T(B.op("index_select", {T(x), N(2), T(at)})), N(1)}),
                   B.op("sum", {T(B.op("embedding", {T(idx), T(B.op("transpose", {T(x), N(1), N(2)}))})), N(2)})};
  });
}

TEST_CASE("Extreme positions compiled: argmax / argmin, max / min with indices, eager's bits", "[gccjit]") {
  if (!have_gccjit()) return;
  for (DType d : {DType::f32, DType::f64, DType::i32, DType::i64, DType::b8}) {
    check_bits(cat("argmax / argmin / max / min ", dtype_name(d)), [&](Builder& B) {
      Tensor sx = cast(uniform({6, 40}, 20), d);
      if (is_floating(d)) {  // NaN rows: the first NaN is the extreme; ties: the first of them
        Tensor r = cast(uniform({6, 40}, 20), DType::f64);
        double* p = r.data<double>();
        p[3] = p[17] = std::nan("");
        p[40 + 5] = p[40 + 9] = 5.0;
        p[80 + 39] = std::nan("");
        sx = cast(r, d);
      }
      int32_t x = B.input(sx);
      int32_t t = B.op("transpose", {T(x), N(1), N(2)});
      // (a column's positions, argmin(x, 1), are eager's kernel's on the CPU: over_outer_dims)
      B.g.outputs = {B.op("argmax", {T(x), N(2)}), B.op("argmin", {T(x), N(-1), Bool(true)}), B.op("argmax", {T(t), N(2)}),
                     B.op("argmax", {T(x)})};
      for (const char* op : {"max", "min"})
        for (int32_t v : B.ops(op, {T(x), N(2), Bool(op[1] == 'i')})) B.g.outputs.push_back(v);
    });
  }
  check_bits("argmax of a computed value, fused; a whole-tensor argmax in two steps", [](Builder& B) {
    int32_t x = B.input(uniform({512, 300}, 21));
    B.g.outputs = {B.op("argmax", {T(B.op("mul", {T(x), N(-2)})), N(2)}), B.op("argmin", {T(B.op("sin", {T(x)}))})};
  });
}

TEST_CASE("Random ops compiled: rand / randn / randint draw eager's numbers, in eager's order", "[gccjit]") {
  if (!have_gccjit()) return;
  Context ctx;
  Builder B{ctx};
  int32_t x = B.input(uniform({6, 8}, 22));
  int32_t a = B.op("rand", {I({6, 8})});
  int32_t n = B.op("randn", {I({3, 5}), S("float64")});
  int32_t r = B.op("randint", {N(-1e9), N(3e15), I({4, 9})});  // bits % span, then lo: exact in a double
  B.g.outputs = {B.op("add", {T(x), T(a)}), B.op("mul", {T(n), N(2)}), B.op("lt", {T(B.op("randn", {I({7})})), N(0)}), a, r,
                 B.op("randint", {N(3), N(9), I({5}), S("int32")}), B.op("randint", {N(0), N(2), I({6}), S("bool")})};
  auto g = std::make_shared<Graph>(B.g);
  jit::LoopGraph lg = jit::lower(*g);
  for (const jit::LStep& s : lg.steps) CHECK(!s.external);
  CHECK(lg.draws == std::vector<int64_t>{48, 15, 36, 7, 5, 6});
  jit::Options o;
  o.threads = 2;
  o.sync = true;
  jit::compile_native(g, o);
  REQUIRE(g->native->exe);
  for (uint64_t seed : {uint64_t(1), uint64_t(0x9e3779b97f4a7c15)}) {
    std::vector<Tensor> eager(g->values.size()), native(g->values.size());
    eager[size_t(x)] = native[size_t(x)] = copy_of(B.sample[size_t(x)]);
    ctx.gen = Generator{seed, 1000};
    run_eager(*g, ctx, eager);
    const uint64_t after = ctx.gen.offset;
    ctx.gen = Generator{seed, 1000};
    g->native->exe->run(ctx, native);
    CHECK(ctx.gen.offset == after);  // the generator advanced as eager advanced it
    CHECK(after == 1000 + 48 + 15 + 36 + 7 + 5 + 6);
    for (int32_t out : g->outputs) {
      INFO("seed " << seed << " output %" << out);
      Tensor p = contiguous(native[size_t(out)]), q = contiguous(eager[size_t(out)]);
      REQUIRE(p.sizes() == q.sizes());
      CHECK(std::memcmp(p.data_bytes(), q.data_bytes(), size_t(p.numel()) * p.itemsize()) == 0);
    }
  }
}

TEST_CASE("Gathers compiled: a position out of range raises, naming the op", "[gccjit]") {
  if (!have_gccjit()) return;
  Context ctx;
  Builder B{ctx};
  int32_t x = B.input(uniform({5, 7}, 18));
  int32_t idx = B.input(positions({4}, 7, 19));
  B.g.outputs = {B.op("add", {T(B.op("index_select", {T(x), N(2), T(idx)})), N(1)})};
  auto g = std::make_shared<Graph>(B.g);
  jit::Options o;
  o.threads = 2;
  o.sync = true;
  jit::compile_native(g, o);
  REQUIRE(g->native->exe);
  for (int64_t bad : {0, 8, -1}) {
    INFO("position " << bad);
    std::vector<Tensor> vals(g->values.size());
    vals[size_t(x)] = copy_of(B.sample[size_t(x)]);
    Tensor pos = copy_of(B.sample[size_t(idx)]);
    pos.data<int64_t>()[2] = bad;
    vals[size_t(idx)] = pos;
    CHECK_THROWS_WITH(g->native->exe->run(ctx, vals),
                      Catch::Contains(cat("index_select: index ", bad, " is out of range for dim 2 of size 7 (expected 1..7)")));
    vals[size_t(idx)] = copy_of(B.sample[size_t(idx)]);  // and the next run is fine again
    vals[size_t(g->outputs[0])] = Tensor();
    CHECK_NOTHROW(g->native->exe->run(ctx, vals));
  }
}

TEST_CASE("Index expressions: tril / triu compiled, eager's bits", "[gccjit]") {
  if (!have_gccjit()) return;
  for (DType d : {DType::f32, DType::f64, DType::i32, DType::i64, DType::b8})
    for (int64_t k : {-7, -1, 0, 2, 9}) {
      check_bits(cat("tril / triu ", dtype_name(d), " k = ", k), [&](Builder& B) {
        int32_t x = B.input(cast(uniform({2, 5, 6}, 1), d));
        int32_t t = B.op("transpose", {T(x), N(2), N(3)});
        B.g.outputs = {B.op("tril", {T(x), N(double(k))}), B.op("triu", {T(t), N(double(k))}),
                       B.op("tril", {T(B.op("triu", {T(x), N(double(-k))})), N(double(k))})};
      });
    }
}

TEST_CASE("Index expressions: arange / linspace / eye compiled, eager's bits", "[gccjit]") {
  if (!have_gccjit()) return;
  check_bits("arange", [](Builder& B) {
    B.g.outputs = {B.op("arange", {N(13)}), B.op("arange", {N(-3), N(40), N(3)}),
                   B.op("arange", {N(0.5), N(3.9), N(0.1)}), B.op("arange", {N(7), N(-2.5), N(-0.75), S("float64")}),
                   B.op("arange", {N(5), none(), none(), S("int32")}), B.op("arange", {N(0)})};
  });
  check_bits("linspace", [](Builder& B) {
    B.g.outputs = {B.op("linspace", {N(-1), N(2.5), N(7)}), B.op("linspace", {N(3), N(3), N(4)}),
                   B.op("linspace", {N(2), N(5), N(1)}), B.op("linspace", {N(0.1), N(1e3), N(1001), S("float64")}),
                   B.op("linspace", {N(-8), N(8), N(5), S("int64")}), B.op("linspace", {N(1), N(2), N(0)})};
  });
  check_bits("eye", [](Builder& B) {
    B.g.outputs = {B.op("eye", {N(5)}), B.op("eye", {N(3), N(7), S("int64")}), B.op("eye", {N(6), N(2), S("bool")}),
                   B.op("eye", {N(4), N(4), S("float64")})};
  });
  check_bits("generators fused with their users", [](Builder& B) {
    int32_t x = B.input(uniform({6, 6}, 2));
    B.g.outputs = {B.op("add", {T(B.op("mul", {T(x), T(B.op("eye", {N(6)}))})), T(B.op("arange", {N(6)}))}),
                   B.op("sub", {T(x), T(B.op("linspace", {N(0), N(1), N(6)}))})};
  });
}
