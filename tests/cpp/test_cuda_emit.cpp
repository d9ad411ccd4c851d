// jit/cuda: CUDA C emitted from fusion plans compiles to CUBIN with NVRTC (no GPU needed). Every
// registry op that the loop lowering lowers (pointwise in every loop dtype, reductions, views
// folded into indices) and the fused test graphs of the CPU backend are lowered, scheduled,
// emitted and compiled for sm_90; the CUBIN must be an ELF holding every kernel. The kernel forms
// (vectorised or not, reduction teams, persistent rows) are checked on the emitted module.
// Skipped (with a warning) where NVRTC cannot be loaded. CRESCENT_TEST_CUDA_DUMP=dir writes the
// generated modules there, with what tests/cuda_check.py needs to run them on a GPU. (NVRTC's
// options and the library kernels: test_cuda_library.cpp.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include "graph_builder.hpp"
#include "jit/cuda/emit.hpp"
#include "vm/cuda/nvrtc.hpp"
#include "jit/cuda/program.hpp"
#include "jit/jit.hpp"
#include "vm/devices.hpp"
#include "vm/kernels/loop.hpp"

using namespace cr;
using namespace cr::testing;
using namespace cr::jit;
using cr::jit::cuda::CudaModule;
using cr::jit::cuda::Form;

namespace {

bool have_nvrtc() { return available(nvrtc_for_tests, "NVRTC unavailable, CUDA emission tests skipped"); }

Tensor sample(const Shape& s, DType d, uint32_t seed) {
  Tensor t = Tensor::empty(s, DType::f32);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-3, 3);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(gen);
  return d == DType::f32 ? t : cast(t, d);
}

struct Compiled {
  Plan plan;
  CudaModule module;
};

// CRESCENT_TEST_CUDA_DUMP=dir: the rendered module, and for graphs without externs what a
// launcher needs to run it on a GPU and compare with eager (tests/cuda_check.py): the CUBIN,
// a manifest (launches in plan order, buffers with layouts) and the inputs' and outputs' bytes.
void dump(const std::string& name, const Builder& B, const Plan& plan, const CudaModule& m, const std::string& cubin) {
  const char* dir = std::getenv("CRESCENT_TEST_CUDA_DUMP");
  if (!dir) return;
  std::string base = cat(dir, "/", name);
  std::ofstream(base + ".cu") << jit::cuda::render(m);
  std::ofstream(base + ".full.cu") << m.source;  // what NVRTC compiled, the prelude included
  for (const PlanStep& s : plan.steps)
    if (s.node >= 0) return;  // externs: not runnable by the harness
  std::ofstream(base + ".cubin", std::ios::binary) << cubin;
  auto arr = [](const Shape& xs) {
    std::string r = "[";
    for (size_t i = 0; i < xs.size(); ++i) r += cat(i ? ", " : "", xs[i]);
    return r + "]";
  };
  std::ofstream j(base + ".json");
  j << "{\"kernels\": [";
  for (size_t i = 0; i < m.kernels.size(); ++i) {
    const jit::cuda::CudaKernel& k = m.kernels[i];
    j << (i ? ", " : "") << "{\"name\": \"" << k.name << "\", \"grid\": " << k.grid << ", \"block\": " << k.block << ", \"params\": [";
    for (size_t p = 0; p < k.params.size(); ++p) j << (p ? ", " : "") << k.params[p].buffer;
    j << "]}";
  }
  j << "], \"buffers\": [";
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const Buffer& buf = plan.buffers[b];
    int64_t extent = buf.offset + 1;
    for (size_t d = 0; d < buf.sizes.size(); ++d) extent += (buf.sizes[d] - 1) * buf.strides[d];
    bool input = std::find(B.g.inputs.begin(), B.g.inputs.end(), buf.gv) != B.g.inputs.end();
    auto out_at = std::find(B.g.outputs.begin(), B.g.outputs.end(), buf.gv);
    bool output = buf.gv >= 0 && out_at != B.g.outputs.end();
    j << (b ? ", " : "") << "{\"dtype\": \"" << dtype_name(buf.dtype) << "\", \"numel\": " << extent << ", \"sizes\": " << arr(buf.sizes)
      << ", \"strides\": " << arr(buf.strides) << ", \"offset\": " << buf.offset << ", \"role\": \"" << (input ? "input" : output ? "output" : "temp")
      << "\", \"output\": " << (output ? out_at - B.g.outputs.begin() : -1) << "}";
    if (input || output) {  // the eager value, contiguous
      Tensor t = contiguous(B.sample[size_t(buf.gv)]);
      std::ofstream(cat(base, ".", b, ".bin"), std::ios::binary).write(t.data_bytes(), std::streamsize(t.numel() * int64_t(t.itemsize())));
    }
  }
  j << "]}\n";
}

// lower -> schedule -> CUDA C -> CUBIN; the rendered module is in the log of any failure.
Compiled compile(const Builder& B, const std::string& name) {
  const Graph& g = B.g;
  Plan plan = schedule(lower(g), jit::cuda::schedule_target(2));
  CudaModule m = jit::cuda::emit_plan(plan);
  INFO("generated CUDA for " << name << ":\n" << jit::cuda::render(m));
  std::string cubin;
  try {
    cubin = cr::cuda::compile_cubin(m.source, name + ".cu", "sm_90");
  } catch (const Error& e) {
    FAIL(e.what());
  }
  dump(name, B, plan, m, cubin);
  REQUIRE(cubin.size() > 4);
  REQUIRE(cubin.compare(0, 4, "\x7f" "ELF") == 0);
  REQUIRE(m.kernels.size() == plan.kernels.size());
  for (const jit::cuda::CudaKernel& k : m.kernels) {
    INFO("kernel " << k.name);
    CHECK(cubin.find(std::string(1, '\0') + k.name + std::string(1, '\0')) != std::string::npos);
    CHECK(k.block > 0);
    CHECK(k.grid > 0);
  }
  return {std::move(plan), std::move(m)};
}

// The ops the lowering left to the eager kernels (externs), by name.
// Every number argument of g as a varying one (as the eager ops' one-node graphs mark them):
// the lowering reads those it takes as operands from the run's numbers.
void numbers_vary(Graph& g) {
  int32_t k = 0;
  for (Node& n : g.nodes)
    for (Arg& a : n.args)
      if (a.tag == kNumber) a.varying = k++;
}

// The sample graph is recorded on the CPU, then its values are marked as CUDA values: float16 /
// bfloat16 lower only in CUDA graphs (the CPU code generator has no 16-bit floats), and on the CPU
// reductions over outer dims stay on eager's kernel.
void on_cuda(Graph& g) {
  for (auto& v : g.values) v.meta.device = Device{1, 0};
}

std::set<std::string> externs(const Graph& g) {
  std::set<std::string> r;
  LoopGraph lg = lower(g);
  for (const LStep& s : lg.steps)
    if (s.external) r.insert(g.nodes[size_t(s.node)].def().name);
  return r;
}

// Every unary / binary registry op (and where, conversions) applied to inputs of dtype d that
// eager accepts, but those in `skip`; returns the op names recorded.
std::vector<std::string> all_pointwise(Builder& B, DType d, const std::set<std::string>& skip = {}) {
  int32_t x = B.input(sample({8, 64}, d, 1)), y = B.input(sample({8, 64}, d, 2));
  int32_t c = B.input(sample({8, 64}, DType::b8, 3));
  std::vector<std::string> names;
  auto add = [&](const std::string& name, std::vector<Arg> args) {
    if (skip.count(name)) return;
    try {
      B.g.outputs.push_back(B.op(name, std::move(args)));
      names.push_back(name);
    } catch (const Error&) {  // the op does not take this dtype
    }
  };
  for (const OpDef& def : Registry::get().ops()) {
    if (def.flags & kReturnsSelf) continue;
    if (def.kind == OpKind::Unary) add(def.name, {T(x)});
    if (def.kind == OpKind::Binary) {
      add(def.name, {T(x), T(y)});
      add(def.name, {T(x), N(3)});  // a Lua number operand
    }
  }
  add("gelu", {T(x), S("tanh")});
  add("add", {T(x), T(y), N(2)});  // alpha
  for (double e : {2.0, 0.5, -1.0, 2.5}) add("pow", {T(x), N(e)});
  add("where", {T(c), T(x), T(y)});
  add("clamp", {T(x), N(-1), T(y)});
  add("lerp", {T(x), T(y), N(0.25)});
  add("addcmul", {T(x), T(y), T(x), N(0.5)});
  add("tril", {T(x), N(1)});  // an element's row and column as data (EOp::Index)
  add("triu", {T(x), N(-2)});
  int32_t cols = B.input(positions({5}, 64, 4)), rows = B.input(positions({3, 64}, 8, 5));
  add("index_select", {T(x), N(2), T(cols)});  // loads at positions that are data, checked
  add("gather", {T(x), N(1), T(rows)});
  add("embedding", {T(cols), T(B.op("transpose", {T(y), N(1), N(2)}))});
  for (const char* conv : {"float", "double", "int", "long", "bool", "clone"}) add(conv, {T(x)});
  return names;
}

}  // namespace

TEST_CASE("cuda: every lowered pointwise op compiles to CUBIN, in every loop dtype", "[cuda]") {
  if (!have_nvrtc()) return;
  for (DType d : {DType::f32, DType::f64, DType::i32, DType::i64, DType::b8}) {
    Context ctx;
    Builder B{ctx};
    std::vector<std::string> names = all_pointwise(B, d);
    std::set<std::string> ext = externs(B.g);
    std::string lowered;
    for (const std::string& n : names)
      if (!ext.count(n)) lowered += n + " ";
    std::string left;
    for (const std::string& n : ext) left += n + " ";
    WARN(dtype_name(d) << ": " << names.size() << " ops recorded; left to eager: " << (left.empty() ? "none" : left));
    if (d == DType::f32) CHECK(ext.empty());  // every float32 pointwise op has a loop form
    INFO(dtype_name(d) << " ops: " << lowered);
    Builder lowered_only{ctx};  // (a graph without externs runs on the GPU as a whole)
    all_pointwise(lowered_only, d, ext);
    REQUIRE(externs(lowered_only.g).empty());
    compile(lowered_only, cat("pointwise_", dtype_name(d)));
  }
}

TEST_CASE("cuda: operand numbers as kernel arguments (eager graphs) compile, in every loop dtype", "[cuda]") {
  if (!have_nvrtc()) return;
  Context ctx;
  SECTION("every pointwise op") {
    for (DType d : {DType::f32, DType::f64, DType::i32, DType::i64, DType::b8}) {
      Builder check{ctx};  // (which ops have a loop form)
      all_pointwise(check, d);
      Builder lowered{ctx};
      all_pointwise(lowered, d, externs(check.g));
      numbers_vary(lowered.g);
      REQUIRE(externs(lowered.g).empty());
      CHECK(!lower(lowered.g).numbers.empty());
      const Compiled c = compile(lowered, cat("numbers_", dtype_name(d)));
      CHECK(c.module.source.find("__longlong_as_double(p") != std::string::npos);
    }
  }
  SECTION("each op of test_cuda.lua's scalar loop takes its numbers as arguments") {
    struct Case {
      const char* op;
      DType d;
      std::vector<double> nums;
    };
    for (const Case& c : std::vector<Case>{{"mul", DType::f32, {0.37}}, {"add", DType::i32, {3}}, {"mul", DType::i32, {0.37}},
                                          {"gt", DType::f32, {0.25}}, {"clamp", DType::f32, {-0.5, 0.5}}, {"where", DType::f32, {0.5}}}) {
      INFO(c.op << " " << dtype_name(c.d));
      Builder B{ctx};
      const int32_t x = B.input(sample({5, 7}, c.d, 1));
      std::vector<Arg> args = {T(x)};
      if (std::string(c.op) == "where") args = {T(B.input(sample({5, 7}, DType::b8, 2))), T(x)};
      for (double v : c.nums) args.push_back(N(v));
      if (std::string(c.op) == "add") args.push_back(Arg{});  // (alpha: nil, as Lua's x + 3 passes it)
      B.g.outputs = {B.op(c.op, args)};
      numbers_vary(B.g);
      CHECK(lower(B.g).numbers.size() == c.nums.size());
    }
  }
  SECTION("x * 2.75 + 1.5 and add's alpha take their numbers as arguments, pow's exponent stays literal") {
    Builder B{ctx};
    const int32_t x = B.input(uniform({5, 7}, 1));
    const int32_t y = B.op("add", {T(B.op("mul", {T(x), N(2.75)})), N(1.5)});
    const int32_t z = B.op("add", {T(B.op("pow", {T(y), N(3)})), T(x), N(0.125)});
    B.g.outputs = {z};
    numbers_vary(B.g);
    const LoopGraph lg = lower(B.g);
    REQUIRE(lg.numbers.size() == 3);
    CHECK(B.g.nodes[size_t(lg.numbers[0].node)].args[size_t(lg.numbers[0].arg)].num == 2.75);
    CHECK(B.g.nodes[size_t(lg.numbers[1].node)].args[size_t(lg.numbers[1].arg)].num == 1.5);
    CHECK(B.g.nodes[size_t(lg.numbers[2].node)].args[size_t(lg.numbers[2].arg)].num == 0.125);  // alpha
    const Compiled c = compile(B, "numbers_chain");
    for (const char* literal : {"2.75", "1.5", "0.125"}) CHECK(c.module.source.find(literal) == std::string::npos);
  }
}

TEST_CASE("cuda: every lowered reduction compiles, in each reduction form", "[cuda]") {
  if (!have_nvrtc()) return;
  struct Case {
    Shape shape;
    int64_t dim;
    Form form;
  };
  // thread per row (short rows), warp per row, block per row, column reductions (strided rows):
  // many short ones a thread per row, few long ones in teams (softmax's element stores too)
  for (const Case& c : {Case{{4096, 8}, -1, Form::ReduceThread}, Case{{64, 300}, -1, Form::ReduceWarp},
                        Case{{8, 5000}, -1, Form::ReduceBlock}, Case{{16, 8192}, 1, Form::ReduceThread},
                        Case{{4096, 256}, 1, Form::ReduceColumns}}) {
    Context ctx;
    Builder B{ctx};
    int32_t x = B.input(sample(c.shape, DType::f32, 4));
    for (const char* op : {"sum", "prod", "mean", "amax", "amin", "var", "std", "logsumexp", "norm", "softmax", "log_softmax", "any",
                           "all", "argmax", "argmin"})
      B.g.outputs.push_back(B.op(op, {T(x), N(double(c.dim))}));
    for (int32_t v : B.ops("max", {T(x), N(double(c.dim))})) B.g.outputs.push_back(v);  // values and positions
    B.g.outputs.push_back(B.op("sum", {T(x), N(double(c.dim)), Bool(true)}));  // keepdim
    on_cuda(B.g);
    CHECK(externs(B.g).empty());
    Compiled r = compile(B, cat("reductions_", c.shape[0], "x", c.shape[1], "_dim", c.dim));
    bool seen = false;
    for (const jit::cuda::CudaKernel& k : r.module.kernels) seen = seen || k.form == c.form;
    INFO("shape " << shape_str(c.shape) << " dim " << c.dim);
    CHECK(seen);
  }
  SECTION("integer and bool inputs") {
    Context ctx;
    Builder B{ctx};
    int32_t i = B.input(sample({16, 100}, DType::i32, 5)), l = B.input(sample({16, 100}, DType::i64, 6));
    int32_t m = B.input(sample({16, 100}, DType::b8, 7)), f = B.input(sample({16, 100}, DType::f64, 8));
    for (int32_t v : {i, l, m, f})
      for (const char* op : {"sum", "prod", "amax", "amin", "any", "all", "argmax", "argmin"}) B.g.outputs.push_back(B.op(op, {T(v), N(-1)}));
    B.g.outputs.push_back(B.op("softmax", {T(f), N(-1)}));
    B.g.outputs.push_back(B.op("log_softmax", {T(f), N(1)}));  // a float64 column: ordered folds
    on_cuda(B.g);
    CHECK(externs(B.g).empty());
    compile(B, "int_reductions");
  }
}

TEST_CASE("cuda: a few long rows of exact folds reduce over a thread-block cluster (sm_90)", "[cuda]") {
  if (!have_nvrtc()) return;
  // a decode step's argmax over GPT-2's vocabulary: 8 blocks a row, each element read once
  // (persistent), max then the first position merged across the cluster in rank order
  Context ctx;
  Builder B{ctx};
  int32_t x = B.input(sample({2, 50257}, DType::f32, 9));
  B.g.outputs = {B.op("argmax", {T(x), N(-1), Bool(true)})};
  Compiled r = compile(B, "argmax_cluster");
  REQUIRE(r.module.kernels.size() == 1);
  const jit::cuda::CudaKernel& k = r.module.kernels[0];
  CHECK(k.cluster == 8);
  CHECK(k.grid == 2 * 8);
  CHECK(k.persistent);
  CHECK(r.module.source.find("__cluster_dims__(8, 1, 1)") != std::string::npos);
  CHECK(r.module.source.find("cr::cluster_reduce<8>") != std::string::npos);
  // float sums (their rounding would follow the split), many rows, short rows: a block a row
  const std::pair<const char*, Shape> others[] = {{"sum", {2, 50257}}, {"amax", {64, 50257}}, {"amax", {2, 4000}}};
  for (auto [op, shape] : others) {
    Context c2;
    Builder B2{c2};
    int32_t y = B2.input(sample(shape, DType::f32, 10));
    B2.g.outputs = {B2.op(op, {T(y), N(-1)})};
    Compiled r2 = compile(B2, cat(op, "_no_cluster"));
    INFO(op << " " << shape_str(shape));
    for (const jit::cuda::CudaKernel& k2 : r2.module.kernels) CHECK(k2.cluster == 1);
  }
}

TEST_CASE("cuda: fused graphs keep the CPU backend's kernel counts", "[cuda]") {
  if (!have_nvrtc()) return;
  Context ctx;
  Builder B{ctx};
  SECTION("sin((x + 1) * 2): one vectorised kernel") {
    int32_t x = B.input(sample({1000}, DType::f32, 1));
    B.g.outputs = {B.op("sin", {T(B.op("mul", {T(B.op("add", {T(x), N(1)})), N(2)}))})};
    Compiled r = compile(B, "sin_chain");
    REQUIRE(r.module.kernels.size() == 1);
    CHECK(r.module.kernels[0].vector_width == 4);
    CHECK(r.module.source.find("op_sin_float") != std::string::npos);
  }
  SECTION("bias + relu (a broadcast input): one kernel") {
    int32_t x = B.input(sample({64, 128}, DType::f32, 2)), b = B.input(sample({128}, DType::f32, 3));
    B.g.outputs = {B.op("relu", {T(B.op("add", {T(x), T(b)}))})};
    Compiled r = compile(B, "bias_relu");
    REQUIRE(r.module.kernels.size() == 1);
    CHECK(r.module.kernels[0].vector_width == 4);  // the bias is loaded as vectors too
  }
  SECTION("softmax: one persistent kernel") {
    int32_t x = B.input(sample({64, 127}, DType::f32, 4));
    B.g.outputs = {B.op("softmax", {T(x), N(2)})};
    Compiled r = compile(B, "softmax");
    REQUIRE(r.module.kernels.size() == 1);
    CHECK(r.module.kernels[0].persistent);
    CHECK(r.module.kernels[0].form == Form::ReduceWarp);
    CHECK(r.module.source.find("cr::loadv<") == std::string::npos);  // rows of 127: scalar loads
  }
  SECTION("a layer_norm written with mean / rsqrt: one kernel") {
    int32_t x = B.input(sample({64, 1024}, DType::f32, 5)), w = B.input(sample({1024}, DType::f32, 6));
    int32_t b = B.input(sample({1024}, DType::f32, 7));
    int32_t mean = B.op("mean", {T(x), N(-1), Bool(true)});
    int32_t d = B.op("sub", {T(x), T(mean)});
    int32_t var = B.op("mean", {T(B.op("mul", {T(d), T(d)})), N(-1), Bool(true)});
    int32_t y = B.op("mul", {T(d), T(B.op("rsqrt", {T(B.op("add", {T(var), N(1.25e-5)}))}))});
    B.g.outputs = {B.op("add", {T(B.op("mul", {T(y), T(w)})), T(b)})};
    Compiled r = compile(B, "layer_norm");
    REQUIRE(r.module.kernels.size() == 1);
    CHECK(r.module.kernels[0].form == Form::ReduceBlock);
    CHECK(r.module.kernels[0].block == 64);  // several passes: teams of 64, 16 items a lane
    // whole rows of 1024: a lane reads and writes 4 neighbours with one vector access; x in stage 0
    // (then from registers), w and b in stage 2
    CHECK(r.module.source.find("cr::loadv<4>(p0 + 1024*i0 + i1)") != std::string::npos);
    CHECK(r.module.source.find("cr::loadv<4>(p1 + i1)") != std::string::npos);
    CHECK(r.module.source.find("cr::storev(p3 + 1024*i0 + i1, s0)") != std::string::npos);
  }
  SECTION("a row sum of whole rows: a lane reads 4 neighbours with one vector load") {
    int32_t x = B.input(sample({64, 1024}, DType::f32, 5));
    B.g.outputs = {B.op("sum", {T(B.op("exp", {T(x)})), N(-1)})};
    Compiled r = compile(B, "row_sum_vectors");
    REQUIRE(r.module.kernels.size() == 1);
    CHECK(r.module.kernels[0].persistent);
    CHECK(r.module.source.find("cr::loadv<4>(p0 + 1024*i0 + i1)") != std::string::npos);
  }
  SECTION("a whole-tensor sum with a prologue: split in two kernels") {
    int32_t x = B.input(sample({512, 256}, DType::f32, 8)), y = B.input(sample({512, 256}, DType::f32, 9));
    B.g.outputs = {B.op("sum", {T(B.op("mul", {T(B.op("add", {T(x), T(y)})), N(2.625)}))})};
    Compiled r = compile(B, "split_sum");
    REQUIRE(r.module.kernels.size() == 2);
    CHECK(r.module.kernels[0].rows == 512);  // partial sums per row, then their sum
    CHECK(r.module.kernels[1].rows == 1);
  }
  SECTION("tril / triu: positions as data, in a vectorised kernel and in a reduction's prologue") {
    int32_t x = B.input(sample({48, 64}, DType::f32, 14));
    B.g.outputs = {B.op("add", {T(B.op("tril", {T(x), N(1)})), T(B.op("triu", {T(x), N(-3)}))})};
    Compiled r = compile(B, "tril_triu");
    REQUIRE(r.module.kernels.size() == 1);
    CHECK(r.module.kernels[0].vector_width == 4);  // the lanes' columns differ: per lane
    Builder R{ctx};
    int32_t y = R.input(sample({48, 64}, DType::f32, 15));
    R.g.outputs = {R.op("sum", {T(R.op("tril", {T(y)})), N(-1)})};
    REQUIRE(compile(R, "tril_sum").module.kernels.size() == 1);
  }
  SECTION("gathers: fused with their users, of a stored value, the check word a parameter") {
    int32_t x = B.input(sample({6, 64}, DType::f32, 17));
    int32_t idx = B.input(positions({8}, 64, 18));
    int32_t sel = B.op("index_select", {T(B.op("exp", {T(x)})), N(2), T(idx)});
    B.g.outputs = {B.op("mul", {T(sel), N(2)}), B.op("sum", {T(B.op("embedding", {T(idx), T(B.op("transpose", {T(x), N(1), N(2)}))})), N(-1)})};
    CHECK(externs(B.g).empty());
    Compiled r = compile(B, "gathers");
    REQUIRE(r.module.kernels.size() == 3);  // exp (stored: a gather reads memory), its gather, the embedding's sum
    CHECK(r.module.source.find("cr::position(") != std::string::npos);
  }
  SECTION("rand / randn: Philox draws, their seeds and counters passed by value") {
    int32_t x = B.input(sample({6, 8}, DType::f32, 19));
    B.g.outputs = {B.op("add", {T(x), T(B.op("rand", {I({6, 8})}))}), B.op("randn", {I({5}), S("float64")}),
                   B.op("randint", {N(-3), N(1e12), I({7})})};
    CHECK(externs(B.g).empty());
    Compiled r = compile(B, "random");
    CHECK(r.module.source.find("cr::philox_normal(") != std::string::npos);
    CHECK(r.module.source.find("const cr::words<7> p") != std::string::npos);  // three draws: seeds, offsets, a graph base
    CHECK(r.module.source.find("(uint64_t)") != std::string::npos);            // randint's bits % span
  }
  SECTION("arange / linspace / eye: generators from positions, fused with a user") {
    int32_t x = B.input(sample({6, 8}, DType::f32, 16));
    B.g.outputs = {B.op("arange", {N(-3), N(40), N(3)}), B.op("linspace", {N(0.1), N(1e3), N(11), S("float64")}),
                   B.op("add", {T(x), T(B.op("eye", {N(6), N(8)}))}), B.op("arange", {N(5), Arg{}, Arg{}, S("int32")})};
    CHECK(externs(B.g).empty());
    compile(B, "generators");
  }
  SECTION("a transposed input: vector stores, per-lane loads of the transpose") {
    int32_t x = B.input(sample({64, 32}, DType::f32, 10)), y = B.input(sample({32, 64}, DType::f32, 11));
    B.g.outputs = {B.op("add", {T(B.op("transpose", {T(x), N(1), N(2)})), T(y)})};
    Compiled r = compile(B, "transposed");
    REQUIRE(r.module.kernels.size() == 1);
    CHECK(r.module.kernels[0].vector_width == 4);
    CHECK(r.module.source.find("cr::storev(") != std::string::npos);
  }
  SECTION("a row length that is not a multiple of 4: scalar code") {
    int32_t x = B.input(sample({63, 5}, DType::f32, 12));
    B.g.outputs = {B.op("exp", {T(B.op("mul", {T(x), N(0.5)}))})};
    Compiled r = compile(B, "scalar");
    REQUIRE(r.module.kernels.size() == 1);
    CHECK(r.module.kernels[0].vector_width == 1);
    CHECK(r.module.source.find("cr::loadv<") == std::string::npos);
    CHECK(r.module.kernels[0].index32);
  }
  SECTION("views folded into indices: narrow, select, expand") {
    int32_t x = B.input(sample({16, 40}, DType::f32, 13));
    int32_t n = B.op("narrow", {T(x), N(2), N(3), N(32)});
    int32_t s = B.op("select", {T(x), N(1), N(2)});
    int32_t e = B.op("expand", {T(B.op("unsqueeze", {T(s), N(1)})), I({16, 40})});
    B.g.outputs = {B.op("mul", {T(n), N(3)}), B.op("add", {T(e), T(x)})};
    CHECK(externs(B.g).empty());
    compile(B, "views");
  }
}

namespace {

// A plan of one copy kernel out[i] = in[i] over `sizes` (contiguous), built by hand: sizes no test
// can allocate, dtypes the lowering leaves to eager.
Plan copy_plan(const Shape& sizes, DType d) {
  Plan plan;
  Kernel k;
  k.name = "k0";
  k.sizes = sizes;
  k.n_outer = int(sizes.size()) - 1;
  Affine at;
  int64_t stride = 1;
  for (size_t v = sizes.size(); v-- > 0; stride *= sizes[v]) at.add(v, stride);
  Expr load{EOp::Load, d};
  load.value = 0;
  load.index = {at};
  k.body.root = k.body.add(load);
  k.stores.push_back(Store{1, at, k.body.root});
  k.buffers = {0, 1};
  k.analyse();
  for (int i = 0; i < 2; ++i) {
    Buffer b;
    b.dtype = d;
    b.sizes = sizes;
    plan.buffers.push_back(b);
  }
  plan.kernels.push_back(k);
  return plan;
}

}  // namespace

TEST_CASE("cuda: 64-bit indices past 2^31 elements", "[cuda]") {
  if (!have_nvrtc()) return;
  CudaModule m = jit::cuda::emit_plan(copy_plan({4, int64_t(1) << 30}, DType::f32));
  INFO(jit::cuda::render(m));
  REQUIRE(m.kernels.size() == 1);
  CHECK_FALSE(m.kernels[0].index32);
  CHECK(m.kernels[0].vector_width == 4);
  CHECK(m.kernels[0].grid == 132 * 8 * 8);  // 8 waves of 256-thread blocks on the default H100
  CHECK(m.source.find("typedef int64_t idx_t;") != std::string::npos);
  std::string cubin = cr::cuda::compile_cubin(m.source, "big.cu");
  CHECK(cubin.compare(0, 4, "\x7f" "ELF") == 0);
  CHECK(jit::cuda::emit_plan(copy_plan({1000, 1000}, DType::f32)).kernels[0].index32);
}

TEST_CASE("cuda: column sums of few columns split their rows across blocks, element stores first", "[cuda]") {
  if (!have_nvrtc()) return;
  // a bias gradient beside its element-wise producer: 768 columns of 8192 rows are 24 column
  // teams, too few for 132 SMs; {64, 768} is too short to split
  for (auto [R, C, split] : {std::tuple<int64_t, int64_t, bool>{8192, 768, true}, {5000, 37, true}, {64, 768, false}}) {
    Context ctx;
    Builder B{ctx};
    int32_t y = B.op("mul", {T(B.input(sample({R, C}, DType::f32, 4))), N(2)});
    B.g.outputs = {y, B.op("sum", {T(y), N(1)})};
    on_cuda(B.g);
    Compiled r = compile(B, cat("column_split_", R, "x", C));
    REQUIRE(r.module.kernels.size() == 1);
    const jit::cuda::CudaKernel& k = r.module.kernels[0];
    INFO(R << " x " << C);
    CHECK(k.form == Form::ReduceColumns);
    CHECK((k.split > 1) == split);
    if (split) CHECK(k.grid == (C + 31) / 32 * k.split);
  }
}

TEST_CASE("cuda: float16 / bfloat16 graphs lower (CUDA only) and compile, computing in float32", "[cuda]") {
  for (DType d : {DType::f16, DType::bf16}) {
    Context ctx;
    Builder B{ctx};
    std::vector<std::string> names = all_pointwise(B, d);
    CHECK(externs(B.g) == std::set<std::string>(names.begin(), names.end()));  // a CPU graph keeps them eager
    on_cuda(B.g);
    std::set<std::string> ext = externs(B.g);
    std::string left;
    for (const std::string& n : ext) left += n + " ";
    INFO(dtype_name(d) << " ops left to eager: " << left);
    CHECK(ext.empty());  // every 16-bit float pointwise op has a loop form on CUDA
    if (!have_nvrtc()) continue;
    Compiled c = compile(B, cat("pointwise_", dtype_name(d)));
    CHECK(jit::cuda::render(c.module).find(cat(d == DType::f16 ? "cr::half_t" : "cr::bf16_t", "* __restrict__")) != std::string::npos);

    Builder R{ctx};  // reductions and softmax over 16-bit inputs, a layer norm written with mean / var
    int32_t x = R.input(sample({64, 300}, d, 1)), w = R.input(sample({300}, d, 2));
    for (const char* op : {"sum", "mean", "amax", "amin", "logsumexp", "var", "softmax", "log_softmax"})
      R.g.outputs.push_back(R.op(op, {T(x), N(-1)}));
    R.g.outputs.push_back(R.op("sum", {T(x), N(1)}));
    int32_t mu = R.op("mean", {T(x), N(-1), Bool(true)}), var = R.op("var", {T(x), N(-1), Bool(true)});
    int32_t inv = R.op("rsqrt", {T(R.op("add", {T(var), N(1e-5)}))});
    R.g.outputs.push_back(R.op("add", {T(R.op("mul", {T(R.op("mul", {T(R.op("sub", {T(x), T(mu)})), T(inv)})), T(w)})), T(w)}));
    on_cuda(R.g);
    CHECK(externs(R.g).empty());
    compile(R, cat("reduce_", dtype_name(d)));

    // 16-bit stores: groups of 8 (16 bytes); a row of 4 (not 8) takes groups of 4; a float32
    // result of 16-bit inputs groups of 4. Each op rounds to 16 bits: the lanes go in pairs
    // (one conversion for two), but where a lane reads its own element (a transposed operand).
    for (auto [C, out, width, transposed] : {std::tuple{64, d, 8, false}, std::tuple{68, d, 4, false},
                                             std::tuple{64, DType::f32, 4, false}, std::tuple{64, d, 8, true}}) {
      Builder V{ctx};
      int32_t a = V.input(sample({32, C}, d, 3)), b = V.input(sample({C}, d, 4));
      if (transposed) a = V.op("transpose", {T(V.input(sample({C, 32}, d, 5))), N(1), N(2)});
      V.g.outputs = {V.op("to", {T(V.op("sin", {T(V.op("add", {T(a), T(b)}))})), S(dtype_name(out))})};
      on_cuda(V.g);
      Compiled v = compile(V, cat("vector_", dtype_name(d), "_", C, "_", dtype_name(out), transposed ? "_t" : ""));
      REQUIRE(v.module.kernels.size() == 1);
      CHECK(v.module.kernels[0].vector_width == width);
      CHECK(v.module.source.find(cat("cr::loadv<", width, ">(")) != std::string::npos);
      CHECK((v.module.source.find("u += 2)") != std::string::npos) == !transposed);
      CHECK((v.module.source.find("= cr::cvt2<") != std::string::npos) == !transposed);
    }
  }
}

namespace {

// A dynamic graph's plan as jit/driver.cpp compiles it: every kernel with its template and the
// params of this instance.
Plan dynamic_plan(Builder& B) {
  B.g.dynamic = true;
  Plan plan = schedule(lower(B.g), jit::cuda::schedule_target(2));
  for (const Kernel& k : plan.kernels) {
    plan.templates.push_back(k);
    plan.params.push_back(parametrize(plan.templates.back()));
  }
  return plan;
}

// The integer literals of the kernels' code (tokens of digits only; the prelude and the op
// functions before the first kernel are the same for every module).
std::set<std::string> int_literals(const std::string& source) {
  std::set<std::string> r;
  size_t at = source.find("extern \"C\" __global__");
  std::string token;
  for (size_t i = at; i <= source.size(); ++i) {
    char ch = i < source.size() ? source[i] : ' ';
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.') {
      token += ch;
      continue;
    }
    if (!token.empty() && token.find_first_not_of("0123456789") == std::string::npos) r.insert(token);
    token.clear();
  }
  return r;
}

// One dynamic graph over an R x C input.
struct DynamicCase {
  const char* name;
  std::function<void(Builder&, int64_t R, int64_t C)> build;
  std::vector<std::pair<int64_t, int64_t>> sizes;  // instances of one structure
};

void relu_bias_graph(Builder& B, int64_t R, int64_t C) {
  int32_t x = B.input(sample({R, C}, DType::f32, 1)), b = B.input(sample({C}, DType::f32, 2));
  B.g.outputs = {B.op("exp", {T(B.op("relu", {T(B.op("mul", {T(B.op("add", {T(x), T(b)})), N(2)}))}))})};
}

void row_sum_graph(Builder& B, int64_t R, int64_t C) {
  B.g.outputs = {B.op("sum", {T(B.input(sample({R, C}, DType::f32, 3))), N(-1)})};
}

void column_sum_graph(Builder& B, int64_t R, int64_t C) {
  B.g.outputs = {B.op("sum", {T(B.input(sample({R, C}, DType::f32, 8))), N(1)})};
}

void softmax_graph(Builder& B, int64_t R, int64_t C) {
  B.g.outputs = {B.op("softmax", {T(B.input(sample({R, C}, DType::f32, 4))), N(-1)})};
}

void layer_norm_graph(Builder& B, int64_t R, int64_t C) {
  int32_t x = B.input(sample({R, C}, DType::f32, 5)), w = B.input(sample({C}, DType::f32, 6));
  int32_t b = B.input(sample({C}, DType::f32, 7));
  int32_t mean = B.op("mean", {T(x), N(-1), Bool(true)});
  int32_t d = B.op("sub", {T(x), T(mean)});
  int32_t var = B.op("mean", {T(B.op("mul", {T(d), T(d)})), N(-1), Bool(true)});
  int32_t y = B.op("mul", {T(d), T(B.op("rsqrt", {T(B.op("add", {T(var), N(1.25e-5)}))}))});
  B.g.outputs = {B.op("add", {T(B.op("mul", {T(y), T(w)})), T(b)})};
}

// Emits `build` at every size of `sizes` as a dynamic graph: one source (the cache key) for all,
// naming no size of any instance, compiled once; each instance's launch has its params and grid.
void check_dynamic(const DynamicCase& c) {
  std::string first;
  for (auto [R, C] : c.sizes) {
    Context ctx;
    Builder B{ctx};
    c.build(B, R, C);
    Plan plan = dynamic_plan(B);
    CudaModule m = jit::cuda::emit_plan(plan);
    INFO(c.name << " at " << R << " x " << C << ":\n" << jit::cuda::render(m));
    REQUIRE(m.kernels.size() == plan.templates.size());
    for (size_t i = 0; i < m.kernels.size(); ++i) {
      const jit::cuda::CudaKernel& k = m.kernels[i];
      CHECK(size_t(k.size_params) == plan.params[i].size());
      CHECK(k.grid == jit::cuda::launch_grid(k, plan.kernels[i]));
      CHECK(k.grid > 0);
      CHECK(k.index32);  // (32-bit code is another source: a size past 2^31 elements compiles it again)
      // the vector form is in the source; an instance takes it when its row length allows
      if (k.form == jit::cuda::Form::Pointwise) CHECK(k.vector_width == (C % 4 == 0 ? 4 : 1));
      else CHECK(k.vector_width == 1);
      // templates' rows: persistent up to 16384 elements (a bucket of 16 items a thread), looped
      // above; column reductions always loop
      const bool loops = k.form == jit::cuda::Form::ReduceThread || k.form == jit::cuda::Form::ReduceColumns;
      CHECK(k.persistent == (k.form != jit::cuda::Form::Pointwise && !loops && C <= 16384));
    }
    std::set<std::string> literals = int_literals(m.source);
    for (int64_t size : {R, C, R * C})
      if (size > 1) CHECK_FALSE(literals.count(std::to_string(size)));
    if (first.empty()) {
      first = m.source;
      if (const char* dir = std::getenv("CRESCENT_TEST_CUDA_DUMP")) {  // (the .full.cu compiles with nvcc -Xptxas -v)
        std::ofstream(cat(dir, "/", c.name, "_dynamic.cu")) << jit::cuda::render(m);
        std::ofstream(cat(dir, "/", c.name, "_dynamic.full.cu")) << m.source;
      }
      std::string cubin = cr::cuda::compile_cubin(m.source, cat(c.name, "_dynamic.cu"), "sm_90");
      REQUIRE(cubin.compare(0, 4, "\x7f" "ELF") == 0);
      for (const jit::cuda::CudaKernel& k : m.kernels) CHECK(cubin.find(std::string(1, '\0') + k.name + std::string(1, '\0')) != std::string::npos);
    }
    CHECK(m.source == first);
  }
}

// (a row length of 1 drops the bias's variable, another structure; layer_norm's 1 / n is a
// parameter too, EOp::Count). Reductions' sources are per bucket of row lengths (the power of 2
// at or above, which the source names): each case's row lengths share one and are not it; their
// row counts are anything.
std::vector<DynamicCase> dynamic_cases() {
  return {DynamicCase{"relu_bias", relu_bias_graph, {{5, 7}, {13, 1000}, {1000, 129}}},
          DynamicCase{"row_sum", row_sum_graph, {{5, 600}, {13, 1000}, {1000, 513}}},
          DynamicCase{"column_sum", column_sum_graph, {{5, 7}, {13, 1000}, {1000, 129}}},
          DynamicCase{"softmax", softmax_graph, {{5, 600}, {13, 1000}, {1000, 513}}},
          DynamicCase{"layer_norm", layer_norm_graph, {{5, 33}, {13, 63}, {1000, 40}}},
          DynamicCase{"softmax_short_rows", softmax_graph, {{7, 3}, {3, 77}, {9, 500}}},  // (one bucket up to 512)
          DynamicCase{"softmax_long_rows", softmax_graph, {{3, 2000}, {7, 1500}, {5, 1025}}},
          DynamicCase{"row_sum_very_long_rows", row_sum_graph, {{5, 20000}, {1, 30000}, {3, 16385}}}};
}

// Runs a dynamic graph's program on CUDA device 0 (jit/cuda/program: the launch with the plan's
// params and the instance's grid) and compares its float32 outputs with eager's.
void run_dynamic(const DynamicCase& c, int64_t R, int64_t C) {
  Context ctx;
  Builder B{ctx};
  c.build(B, R, C);
  Plan plan = dynamic_plan(B);
  CudaModule m = jit::cuda::emit_plan(plan, jit::cuda::target_of(0));
  std::string cubin = cr::cuda::compile_cubin(m.source, cat(c.name, ".cu"), m.arch);
  const Device gpu{1, 0};
  std::vector<Tensor> vals(B.g.values.size());
  for (int32_t v : B.g.inputs) vals[size_t(v)] = to_device(B.sample[size_t(v)], gpu);
  jit::cuda::Program program(std::move(plan), std::move(m), cat(c.name, R, "x", C), cubin, gpu);  // (loaded until the copies back)
  program.run(ctx, vals);
  for (int32_t out : B.g.outputs) {
    Tensor got = contiguous(host_copy(vals[size_t(out)])), want = contiguous(B.sample[size_t(out)]);
    REQUIRE(got.numel() == want.numel());
    double worst = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      double w = want.data<float>()[i];
      worst = std::max(worst, std::abs(got.data<float>()[i] - w) / (1 + std::abs(w)));
    }
    INFO(c.name << " at " << R << " x " << C);
    CHECK(worst < 1e-4);
  }
}

}  // namespace

TEST_CASE("cuda: a dynamic graph's kernels run on a GPU at every size", "[cuda][gpu]") {
  if (std::string why; !cuda_backend_available(&why)) {
    WARN("dynamic kernels not run: " << why);
    return;
  }
  for (const DynamicCase& c : dynamic_cases())
    for (auto [R, C] : c.sizes) run_dynamic(c, R, C);
  run_dynamic({"relu_bias_1", relu_bias_graph, {}}, 1, 1);
  run_dynamic({"softmax_1", softmax_graph, {}}, 1, 1000);
  run_dynamic({"softmax_exact", softmax_graph, {}}, 3, 1024);  // a row of exactly its bucket: the unchecked form
  run_dynamic({"layer_norm_exact", layer_norm_graph, {}}, 5, 64);
}

TEST_CASE("cuda: a dynamic graph's kernels are one source for every size, sizes as arguments", "[cuda]") {
  if (!have_nvrtc()) return;
  SECTION("a pointwise chain with a broadcast, a row sum, softmax, layer_norm") {
    for (const DynamicCase& c : dynamic_cases()) check_dynamic(c);
  }
  SECTION("size 1 (another structure) compiles too") {
    for (const DynamicCase& c : {DynamicCase{"relu_bias_1", relu_bias_graph, {{1, 1}}}, DynamicCase{"softmax_1", softmax_graph, {{1, 1000}}}})
      check_dynamic(c);
  }
  SECTION("specialised graphs take no size arguments") {
    Context ctx;
    Builder B{ctx};
    softmax_graph(B, 64, 127);
    CudaModule m = jit::cuda::emit_plan(schedule(lower(B.g), jit::cuda::schedule_target(2)));
    REQUIRE(m.kernels.size() == 1);
    CHECK(m.kernels[0].size_params == 0);
    CHECK(m.source.find("int64_t P0") == std::string::npos);
  }
}
