// Dynamic shapes on the CPU backend (jit/cpu/emit.cpp, jit/loop_ir.hpp parametrize): a graph
// marked dynamic is compiled from its kernels' templates, whose sizes, chunk and address
// coefficients are read from P at run time, so one compiled shared object serves every size with
// the same structure. Each graph is built at several sizes, compiled, run and compared element
// by element with the eager interpreter; after the first size the kernel cache must answer from
// memory (nothing compiled again). Skipped (with a warning) where libgccjit cannot be loaded.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>

#include "graph_builder.hpp"
#include "jit/cpu/emit.hpp"
#include "jit/fusion/schedule.hpp"
#include "jit/jit.hpp"
#include "vm/kernels/loop.hpp"

using namespace cr;
using namespace cr::testing;

namespace {

bool have_gccjit() { return available(jit::cpu_backend_available, "libgccjit unavailable, dynamic CPU code tests skipped"); }

// Every element within float32 rounding of a different summation order.
void require_close(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined());
  REQUIRE(got.sizes() == want.sizes());
  Tensor a = contiguous(cast(got, DType::f64)), b = contiguous(cast(want, DType::f64));
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.data<double>()[i], y = b.data<double>()[i];
    INFO("element " << i << ": " << x << " vs eager " << y);
    REQUIRE(std::abs(x - y) <= 1e-5 + 1e-5 * std::abs(y));
  }
}

// A graph built at size n (its inputs from B.input, its outputs in B.g.outputs).
using Build = std::function<void(Builder& B, int64_t n)>;

std::shared_ptr<Graph> dynamic_graph(Context& ctx, Builder& B, const Build& build, int64_t n) {
  build(B, n);
  auto g = std::make_shared<Graph>(B.g);
  g->dynamic = true;
  g->name = cat("dynamic test, n = ", n);
  optimize(*g, ctx);
  return g;
}

// Compiles the graph at size n natively and compares its outputs with eager. The graph is
// returned: while it lives, its shared object stays in the kernel cache's memory.
std::shared_ptr<Graph> compile_and_check(const Build& build, int64_t n) {
  Context ctx;
  Builder B{ctx};
  std::shared_ptr<Graph> g = dynamic_graph(ctx, B, build, n);
  jit::Options o;
  o.threads = 4;
  jit::compile_native(g, o);
  REQUIRE(g->native);
  INFO("n = " << n);
  REQUIRE(g->native->error == "");
  REQUIRE(g->native->exe);
  std::vector<Tensor> eager(g->values.size()), native(g->values.size());
  for (int32_t v : g->inputs) {
    eager[size_t(v)] = copy_of(B.sample[size_t(v)]);
    native[size_t(v)] = copy_of(B.sample[size_t(v)]);
  }
  run_eager(*g, ctx, eager);
  g->native->exe->run(ctx, native);
  for (int32_t out : g->outputs) {
    INFO("output %" << out);
    require_close(native[size_t(out)], eager[size_t(out)]);
  }
  return g;
}

// The graph at each size gives eager's values; sizes after the first compile nothing (the
// memory cache answers with the first size's code).
void check_shared_code(const Build& build, const std::vector<int64_t>& sizes) {
  std::vector<std::shared_ptr<Graph>> alive;
  for (size_t i = 0; i < sizes.size(); ++i) {
    jit::CacheStats before = jit::cache_stats();
    alive.push_back(compile_and_check(build, sizes[i]));
    jit::CacheStats after = jit::cache_stats();
    INFO("size " << sizes[i] << " after " << sizes[0]);
    if (i == 0) continue;
    CHECK(after.compiled == before.compiled);
    CHECK(after.memory_hits == before.memory_hits + 1);
  }
}

// Sizes of one structure (7, a prime; 1000, more than a block and a chunk; 33; 20000, rows over
// the specialised row cache's byte budget) share code. Sizes in `own` get a structure of their
// own, so they are only checked for their values: size 1, because a size-1 dim is read without a
// variable and a stride of 1 stays a literal (jit/loop_ir.hpp); a large reduction with few
// results, which the lowering splits in two kernels (jit/lower_reduce.cpp, split_of).
void check_sizes(const Build& build, std::vector<int64_t> shared = {7, 1000, 33, 20000}, std::vector<int64_t> own = {1}) {
  check_shared_code(build, shared);
  for (int64_t n : own) compile_and_check(build, n);
}

// ---- the graphs ----
// outer sizes vary with n too, over a few values (n = 1000 keeps the test fast)
int64_t rows(int64_t n) { return n % 4 + 2; }

void pointwise_broadcast(Builder& B, int64_t n) {
  int32_t x = B.input(uniform({3, n}, 1)), b = B.input(uniform({n}, 2));
  int32_t y = B.op("mul", {T(B.op("add", {T(x), T(b)})), N(2)});
  B.g.outputs = {B.op("sub", {T(B.op("relu", {T(y)})), T(B.op("exp", {T(x)}))})};
}
void row_sum(Builder& B, int64_t n) {
  int32_t x = B.input(uniform({rows(n), n}, 3));
  B.g.outputs = {B.op("sum", {T(B.op("mul", {T(x), N(0.5)})), N(-1)})};
}
void sum_two_dims(Builder& B, int64_t n) {  // two inner loops, the outer index split by div / mod
  int32_t x = B.input(uniform({rows(n), 3, n, 4}, 4));
  B.g.outputs = {B.op("sum", {T(B.op("exp", {T(x)})), I({3, 4})})};
}
void softmax(Builder& B, int64_t n) {
  int32_t x = B.input(uniform({rows(n), n}, 5));
  B.g.outputs = {B.op("softmax", {T(x), N(-1)})};
}
// mean and variance as sums divided by the row length, an input: mean's own 1/n is a constant of
// the kernel, different for each size (see "layer norm with mean" below)
void layer_norm_sums(Builder& B, int64_t n) {
  int32_t x = B.input(uniform({rows(n), n}, 6)), w = B.input(uniform({n}, 7));
  Tensor len = Tensor::empty({1}, DType::f32);
  len.data<float>()[0] = float(n);
  int32_t count = B.input(len);
  int32_t mean = B.op("div", {T(B.op("sum", {T(x), N(-1), Bool(true)})), T(count)});
  int32_t d = B.op("sub", {T(x), T(mean)});
  int32_t var = B.op("div", {T(B.op("sum", {T(B.op("mul", {T(d), T(d)})), N(-1), Bool(true)})), T(count)});
  int32_t y = B.op("mul", {T(d), T(B.op("rsqrt", {T(B.op("add", {T(var), N(1e-5)}))}))});
  B.g.outputs = {B.op("mul", {T(y), T(w)})};
}
void layer_norm_mean(Builder& B, int64_t n) {
  int32_t x = B.input(uniform({rows(n), n}, 8));
  int32_t mean = B.op("mean", {T(x), N(-1), Bool(true)});
  int32_t d = B.op("sub", {T(x), T(mean)});
  int32_t var = B.op("mean", {T(B.op("mul", {T(d), T(d)})), N(-1), Bool(true)});
  B.g.outputs = {B.op("mul", {T(d), T(B.op("rsqrt", {T(B.op("add", {T(var), N(1e-5)}))}))})};
}
void transposed(Builder& B, int64_t n) {  // a non-contiguous input over three loops
  int32_t x = B.input(uniform({5, 3, n}, 9)), y = B.input(uniform({n, 3, 5}, 10));
  B.g.outputs = {B.op("add", {T(B.op("transpose", {T(x), N(1), N(3)})), T(y)})};
}

}  // namespace

TEST_CASE("dynamic cpu: one compile serves every size, with eager's values", "[dynamic][gccjit]") {
  if (!have_gccjit()) return;
  SECTION("pointwise chain with a broadcast input") { check_sizes(pointwise_broadcast); }
  SECTION("row sum") { check_sizes(row_sum); }
  SECTION("sum over two inner dims") { check_sizes(sum_two_dims, {7, 1000, 33}, {1, 20000}); }
  SECTION("softmax") { check_sizes(softmax); }
  SECTION("layer norm from sums") { check_sizes(layer_norm_sums); }
  SECTION("a transposed input") { check_sizes(transposed); }
  SECTION("layer norm with mean: eager's values at every size") {
    for (int64_t n : {7, 1000, 1, 33, 20000}) compile_and_check(layer_norm_mean, n);
  }
}

TEST_CASE("dynamic cpu: templates render size parameters, equal for every size", "[dynamic]") {
  std::string first;
  for (int64_t n : {7, 1000}) {
    Context ctx;
    Builder B{ctx};
    std::shared_ptr<Graph> g = dynamic_graph(ctx, B, layer_norm_sums, n);
    jit::Plan plan = jit::schedule(jit::lower(*g), jit::cpu::schedule_target(4));
    std::string text;
    for (const jit::Kernel& k : plan.kernels) {
      jit::Kernel t = k;
      CHECK(!jit::parametrize(t).empty());
      text += t.str();
    }
    INFO(text);
    CHECK(text.find("P0") != std::string::npos);
    if (first.empty()) first = text;
    CHECK(text == first);
  }
}
