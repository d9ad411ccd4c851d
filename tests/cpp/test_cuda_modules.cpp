// jit/cuda: the module of a plan as NVRTC compiles it. Kernels of the same code over other buffers
// (a model's repeated layers) share one function; a module of many functions is compiled in parts
// at once, their CUBINs packed into one (jit/cuda/backend.hpp). No GPU needed; skipped where NVRTC
// cannot be loaded. The emitted kernels themselves: test_cuda_emit.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
// <regex>: GCC 12 warns inside it under ASan (-Wmaybe-uninitialized); not our code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#include <string>
#include <vector>

#include "graph_builder.hpp"
#include "jit/cuda/backend.hpp"
#include "jit/cuda/emit.hpp"
#include "jit/jit.hpp"
#include "vm/cuda/nvrtc.hpp"

using namespace cr;
using namespace cr::testing;
using namespace cr::jit;
using cr::jit::cuda::CudaModule;

namespace {

bool have_nvrtc() { return available(nvrtc_for_tests, "NVRTC unavailable, CUDA module tests skipped"); }

struct Compiled {
  Plan plan;
  CudaModule module;
};

// lower -> schedule -> CUDA C -> NVRTC (the parts at once); each launch's function must be in its
// part's CUBIN.
Compiled compile(const Builder& B, const std::string& name) {
  Plan plan = schedule(lower(B.g), jit::cuda::schedule_target(2));
  CudaModule m = jit::cuda::emit_plan(plan);
  INFO("generated CUDA for " << name << ":\n" << jit::cuda::render(m));
  std::vector<std::string> cubins;
  try {
    cubins = jit::cuda::unpack_cubins(jit::cuda::compile_module(m, name + ".cu"));
  } catch (const Error& e) {
    FAIL(e.what());
  }
  REQUIRE(cubins.size() == std::max<size_t>(1, m.parts.size()));
  REQUIRE(m.kernels.size() == plan.kernels.size());
  for (const jit::cuda::CudaKernel& k : m.kernels) {
    INFO("kernel " << k.name << " in part " << k.part);
    REQUIRE(size_t(k.part) < cubins.size());
    CHECK(cubins[size_t(k.part)].find(std::string(1, '\0') + k.name + std::string(1, '\0')) != std::string::npos);
  }
  return {std::move(plan), std::move(m)};
}

// softmax(softmax(x) @ w): two softmax kernels split by the matmul (an extern), over {R, C} and
// {R, w's columns}.
Compiled softmax_twice(Context& ctx, int64_t R, int64_t C, int64_t W) {
  Builder B{ctx};
  int32_t first = B.op("softmax", {T(B.input(uniform({R, C}, 8))), N(-1)});
  int32_t mm = B.op("matmul", {T(first), T(B.input(uniform({C, W}, 9)))});
  B.g.outputs = {B.op("softmax", {T(mm), N(-1)})};
  return compile(B, cat("softmax_twice_", W));
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// `layers` transformer-like blocks over x {R, C}, each with its own weights: a layer_norm written
// with mean / rsqrt, matmul, bias + relu, matmul, bias + residual.
void blocks_graph(Builder& B, int64_t layers, int64_t R, int64_t C) {
  int32_t x = B.input(uniform({R, C}, 10));
  for (int64_t l = 0; l < layers; ++l) {
    const uint32_t seed = uint32_t(20 + 4 * l);
    int32_t w1 = B.input(uniform({C, 4 * C}, seed)), b1 = B.input(uniform({4 * C}, seed + 1));
    int32_t w2 = B.input(uniform({4 * C, C}, seed + 2)), b2 = B.input(uniform({C}, seed + 3));
    int32_t mean = B.op("mean", {T(x), N(-1), Bool(true)});
    int32_t d = B.op("sub", {T(x), T(mean)});
    int32_t var = B.op("mean", {T(B.op("mul", {T(d), T(d)})), N(-1), Bool(true)});
    int32_t h = B.op("mul", {T(d), T(B.op("rsqrt", {T(B.op("add", {T(var), N(1e-5)}))}))});
    int32_t a = B.op("relu", {T(B.op("add", {T(B.op("matmul", {T(h), T(w1)})), T(b1)}))});
    x = B.op("add", {T(x), T(B.op("add", {T(B.op("matmul", {T(a), T(w2)})), T(b2)}))});
  }
  B.g.outputs = {x};
}

}  // namespace

TEST_CASE("cuda: kernels of the same code over other buffers share one function", "[cuda]") {
  if (!have_nvrtc()) return;
  Context ctx;
  SECTION("the same shapes: one function, launched twice") {
    Compiled c = softmax_twice(ctx, 64, 128, 128);
    REQUIRE(c.plan.kernels.size() == 2);
    CHECK(c.plan.kernels[0].name != c.plan.kernels[1].name);
    CHECK(c.module.kernels[0].name == c.module.kernels[1].name);
    CHECK(count_of(c.module.source, "__global__") == 1);
  }
  SECTION("other sizes: two functions") {
    Compiled c = softmax_twice(ctx, 64, 128, 96);
    REQUIRE(c.plan.kernels.size() == 2);
    CHECK(c.module.kernels[0].name != c.module.kernels[1].name);
    CHECK(count_of(c.module.source, "__global__") == 2);
  }
}

TEST_CASE("cuda: repeated layers compile the same functions however many there are", "[cuda]") {
  if (!have_nvrtc()) return;
  Context ctx;
  Builder two{ctx}, four{ctx};  // (the first and last layers may fuse with the graph's ends)
  blocks_graph(two, 2, 16, 64);
  blocks_graph(four, 4, 16, 64);
  Compiled a = compile(two, "blocks_2"), b = compile(four, "blocks_4");
  CHECK(b.plan.kernels.size() > a.plan.kernels.size());
  CHECK(count_of(b.module.source, "__global__") == count_of(a.module.source, "__global__"));
}

TEST_CASE("cuda: a module of many functions compiles in parts, packed in one CUBIN", "[cuda]") {
  if (!have_nvrtc()) return;
  Context ctx;
  Builder B{ctx};
  int32_t x = B.input(uniform({16, 16}, 11));
  for (int64_t l = 0; l < 14; ++l)  // softmax over 14 widths: 14 functions
    x = B.op("softmax", {T(B.op("matmul", {T(x), T(B.input(uniform({16 + l, 17 + l}, uint32_t(30 + l))))})), N(-1)});
  B.g.outputs = {x};
  Compiled c = compile(B, "softmax_widths");  // (each function found in its part's CUBIN)
  REQUIRE(c.module.parts.size() == 2);
  for (const jit::cuda::CudaKernel& k : c.module.kernels) {
    INFO(k.name << " in part " << k.part);
    CHECK(c.module.parts[size_t(1 - k.part)].find(cat(" ", k.name, "(")) == std::string::npos);
  }
  const std::vector<std::string> cubins = jit::cuda::unpack_cubins(jit::cuda::compile_module(c.module, "softmax_widths"));
  const std::string pack = jit::cuda::pack_cubins(cubins);
  CHECK(jit::cuda::unpack_cubins(cubins[0]).size() == 1);
  CHECK_THROWS_WITH(jit::cuda::unpack_cubins(pack.substr(0, pack.size() - 1)), Catch::Contains("no CUBIN"));
  CHECK_THROWS_WITH(jit::cuda::unpack_cubins(pack.substr(0, 12)), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(jit::cuda::unpack_cubins("not a CUBIN"), Catch::Contains("no CUBIN"));
}

// Not a check: the cold compile of 12 GPT-2-sized blocks (bench/RESULTS.md), against the same
// module with a function of its own for every launch (as before kernels shared functions).
TEST_CASE("cuda: cold compile time of 12 GPT-2-sized blocks", "[.bench][cuda]") {
  if (!have_nvrtc()) return;
  Context ctx;
  Builder B{ctx};
  blocks_graph(B, 12, 64, 768);
  auto ms_since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  auto t0 = std::chrono::steady_clock::now();
  Plan plan = schedule(lower(B.g), jit::cuda::schedule_target(2));
  const double plan_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  CudaModule m = jit::cuda::emit_plan(plan);
  const double emit_ms = ms_since(t0);
  std::string own = m.source;  // each launch's copy of its function, under the plan kernel's name
  for (size_t i = 0; i < m.kernels.size(); ++i) {
    const std::string& name = plan.kernels[i].name;
    if (m.kernels[i].name == name) continue;
    const size_t at = m.source.find(cat("// ", m.kernels[i].name, ": "));
    REQUIRE(at != std::string::npos);
    const std::string text = m.source.substr(at, m.source.find("\n}\n", at) + 3 - at);
    own += '\n';
    own += std::regex_replace(text, std::regex(cat("\\b", m.kernels[i].name, "\\b")), name);
  }
  t0 = std::chrono::steady_clock::now();
  const std::string one_bin = cr::cuda::compile_cubin(m.source, "blocks_12.cu", "sm_90");
  const double one_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  const std::string parts_bin = jit::cuda::compile_module(m, "blocks_12.cu");
  const double parts_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  const std::string own_bin = cr::cuda::compile_cubin(own, "blocks_12_own.cu", "sm_90");
  const double own_ms = ms_since(t0);
  std::printf("12 blocks: %zu kernels, %zu functions; lower + schedule %.1f ms, emit %.1f ms; NVRTC: one module %.0f ms, "
              "%zu parts at once %.0f ms; a function a kernel (%zu functions) %.0f ms\n",
              plan.kernels.size(), count_of(m.source, "__global__"), plan_ms, emit_ms, one_ms, std::max<size_t>(1, m.parts.size()), parts_ms,
              count_of(own, "__global__"), own_ms);
  CHECK(one_bin.size() < own_bin.size());
  CHECK(jit::cuda::unpack_cubins(parts_bin).size() == std::max<size_t>(1, m.parts.size()));
}
