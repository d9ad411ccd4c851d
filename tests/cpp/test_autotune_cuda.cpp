// The CUDA candidate space of autotuning (jit::cuda::candidates, KernelConfig): every candidate
// configuration of a pointwise chain, a row reduction, a whole-tensor sum, a few long rows (with
// rows split across blocks among them) and softmax is emitted
// and compiled to CUBIN by NVRTC (no GPU needed), with the launch shape it asks for; where a GPU
// is present each runs and gives the heuristic's results (bit for bit without reductions, within
// float rounding with them).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>

#include "graph_builder.hpp"
#include "jit/cuda/emit.hpp"
#include "jit/cuda/program.hpp"
#include "jit/jit.hpp"
#include "vm/cuda/nvrtc.hpp"
#include "vm/devices.hpp"

using namespace cr;
using namespace cr::testing;
using namespace cr::jit;
namespace jc = cr::jit::cuda;

namespace {

struct Case {
  const char* name;
  std::function<void(Builder&)> build;
  bool reduces;
};

std::vector<Case> cases() {
  return {
      {"pointwise_chain", [](Builder& B) {
         int32_t x = B.input(uniform({64, 3000}, 1));
         B.g.outputs = {B.op("sigmoid", {T(B.op("mul", {T(B.op("tanh", {T(B.op("add", {T(x), N(0.25)}))})), T(x)}))})};
       }, false},
      {"row_sum", [](Builder& B) { B.g.outputs = {B.op("sum", {T(B.input(uniform({48, 5000}, 2))), N(-1)})}; }, true},
      // split by the lowering: partials with the prologue, then their fold
      {"whole_sum", [](Builder& B) { B.g.outputs = {B.op("sum", {T(B.op("abs", {T(B.input(uniform({300000}, 3)))}))})}; }, true},
      // too many results for that split: long rows, split across blocks by the candidates
      {"long_rows", [](Builder& B) { B.g.outputs = {B.op("sum", {T(B.op("abs", {T(B.input(uniform({12, 300000}, 5)))})), N(-1)})}; }, true},
      {"softmax", [](Builder& B) { B.g.outputs = {B.op("softmax", {T(B.input(uniform({32, 3000}, 4))), N(-1)})}; }, true},
  };
}

// The outputs of the plan's module with kernel k in `config` (the others the heuristic's), run
// on device 0.
std::vector<Tensor> run(Builder& B, const Plan& plan, size_t k, const jc::KernelConfig& config, const std::string& tag) {
  std::vector<jc::KernelConfig> configs(plan.kernels.size());
  configs[k] = config;
  jc::CudaModule m = jc::emit_plan(plan, jc::target_of(0), configs);
  std::string cubin = cr::cuda::compile_cubin(m.source, tag + ".cu", m.arch);
  const Device gpu{1, 0};
  Context ctx;
  std::vector<Tensor> vals(B.g.values.size());
  for (int32_t v : B.g.inputs) vals[size_t(v)] = to_device(B.sample[size_t(v)], gpu);
  jc::Program program(Plan(plan), std::move(m), tag, cubin, gpu);
  program.run(ctx, vals);
  std::vector<Tensor> out;
  for (int32_t o : B.g.outputs) out.push_back(contiguous(host_copy(vals[size_t(o)])));
  return out;
}

void same(const std::vector<Tensor>& got, const std::vector<Tensor>& want, bool reduces) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    // a sum that cancels (a row of +-1 values) differs by rounding on the scale of the output's
    // largest value, not of its own
    float scale = 0;
    for (int64_t j = 0; j < want[i].numel(); ++j) scale = std::max(scale, std::fabs(want[i].data<float>()[j]));
    for (int64_t j = 0; j < got[i].numel(); ++j) {
      const float a = got[i].data<float>()[j], b = want[i].data<float>()[j];
      if (reduces) REQUIRE(std::fabs(a - b) <= 1e-4f * std::max(std::fabs(a), std::fabs(b)) + 1e-5f * scale + 1e-6f);
      else REQUIRE(std::memcmp(&a, &b, sizeof a) == 0);
    }
  }
}

}  // namespace

TEST_CASE("autotune cuda: every candidate compiles with its launch shape, and runs as the heuristic", "[autotune][cuda]") {
  if (!available(nvrtc_for_tests, "NVRTC unavailable: the CUDA candidates are not compiled")) return;
  std::string why;
  const bool gpu = cuda_backend_available(&why);
  if (!gpu) WARN("the CUDA candidates are compiled, not run: " << why);
  int splits = 0;  // candidates that split rows across blocks (row_sum, whole_sum, long_rows)
  for (const Case& c : cases()) {
    Context ctx;
    Builder B{ctx};
    c.build(B);
    const Plan plan = schedule(lower(B.g), jc::schedule_target(2));
    const jc::Target target = gpu ? jc::target_of(0) : jc::Target{};
    const jc::CudaModule base = jc::emit_plan(plan, target);
    std::vector<Tensor> want;
    if (gpu) want = run(B, plan, 0, {}, cat(c.name, "_heuristic"));
    for (size_t k = 0; k < plan.kernels.size(); ++k) {
      const std::vector<jc::KernelConfig> space = jc::candidates(base.kernels[k]);
      CHECK(space.size() > 1);
      for (const jc::KernelConfig& config : space) {
        INFO(c.name << " kernel " << k << ": " << jc::config_name(config));
        std::vector<jc::KernelConfig> configs(plan.kernels.size());
        configs[k] = config;
        const jc::CudaModule m = jc::emit_plan(plan, target, configs);
        const jc::CudaKernel& got = m.kernels[k];
        if (config.block) CHECK(got.block == config.block);
        if (config.vector_width == 1) CHECK(got.vector_width == 1);
        if (config.team > 32) CHECK(got.block == config.team);
        if (config.team == 1) CHECK(got.form == jc::Form::ReduceThread);
        if (config.team == 32) CHECK(got.form == jc::Form::ReduceWarp);
        if (config.split > 1) CHECK((got.split == config.split && got.grid == got.rows * config.split && !got.persistent));
        splits += config.split > 1;
        const std::string cubin = cr::cuda::compile_cubin(m.source, cat(c.name, ".cu"), m.arch);
        REQUIRE(cubin.compare(0, 4, "\x7f" "ELF") == 0);
        if (gpu) same(run(B, plan, k, config, cat(c.name, "_", k, "_", jc::config_name(config))), want, c.reduces);
      }
    }
  }
  CHECK(splits >= 4);
}

TEST_CASE("autotune cuda: a kernel's candidates compile as one module, each with its own launch shape", "[autotune][cuda]") {
  if (!available(nvrtc_for_tests, "NVRTC unavailable: the CUDA candidates are not compiled")) return;
  for (const Case& c : cases()) {
    Context ctx;
    Builder B{ctx};
    c.build(B);
    const Plan plan = schedule(lower(B.g), jc::schedule_target(2));
    const jc::CudaModule base = jc::emit_plan(plan, jc::Target{});
    for (size_t k = 0; k < plan.kernels.size(); ++k) {
      const std::vector<jc::KernelConfig> space = jc::candidates(base.kernels[k]);
      const jc::CudaModule all = jc::emit_candidates(plan, k, jc::Target{}, space);
      REQUIRE(all.kernels.size() == space.size());
      for (size_t j = 0; j < space.size(); ++j) {
        INFO(c.name << " kernel " << k << ": " << jc::config_name(space[j]));
        std::vector<jc::KernelConfig> configs(plan.kernels.size());
        configs[k] = space[j];
        const jc::CudaModule one = jc::emit_plan(plan, jc::Target{}, configs);
        const jc::CudaKernel& alone = one.kernels[k];
        CHECK(all.kernels[j].name == cat(alone.name, "_t", j));
        CHECK((all.kernels[j].grid == alone.grid && all.kernels[j].block == alone.block && all.kernels[j].form == alone.form));
      }
      CHECK(base.kernels[k].grid == all.kernels[0].grid);  // (candidate 0: the heuristic)
      const std::string cubin = cr::cuda::compile_cubin(all.source, cat(c.name, "_candidates.cu"), all.arch);
      REQUIRE(cubin.compare(0, 4, "\x7f" "ELF") == 0);
    }
  }
}
