// _addmm_epilogue(input, weight, bias, residual, activation, transposed): act(input @ weight +
// bias) + residual in one op, what vm/graph/epilogues.cpp makes of matmul / linear -> bias add ->
// [relu | gelu tanh] -> [residual add] in compiled graphs. weight is {K, N} as matmul's, or
// {N, K} as linear's when transposed is set; bias {N} and residual (the result's shape) optional;
// activation "none" (default), "relu" or "gelu_tanh".
// CPU (float32 / float64): the epilogue runs per output tile right after the tile's BLAS call,
// with the block functions of add / relu / gelu's tanh form, so it equals the ops it replaces.
// CUDA: up to 4 rows, the GEMV kernel with the whole epilogue (vm/kernels/cuda/gemv.hpp); more,
// one cuBLASLt call (vm/cuda/blaslt.hpp); where cuBLASLt does not take the case, and for
// other dtypes, the product then the ops one by one.
// Inference only: no derivative (a backward reaching it raises); graphs that train keep the
// values their backward reads, which the rewrite leaves alone.
#include "vm/devices.hpp"
#include "vm/ops/dense.hpp"
#include "vm/ops/linalg.hpp"
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

using cuda::Epilogue;

struct Args {
  Tensor x, w, bias, residual;  // w: {K, N}, a view of linear's {N, K} when transposed
  Epilogue act = Epilogue::None;
  Shape shape;
};

void same_kind(const Tensor& x, const Tensor& t, const char* what) {
  if (t.dtype() != x.dtype() || !(t.device() == x.device()))
    fail(cat(what, " expected a ", dtype_name(x.dtype()), " tensor on ", device_name(x.device()), " as input, got ",
             t.describe()));
}

Args prepare(const OpCall& c) {
  Args p{c.tensor(0), c.tensor(1), {}, {}, activation_arg(c, 4), {}};
  if (p.x.dim() < 1) fail(cat("input expected a tensor of at least 1 dim, got ", p.x.describe()));
  if (p.w.dim() != 2) fail(cat("weight expected a 2-D tensor, got ", p.w.describe()));
  same_kind(p.x, p.w, "weight");
  if (c.boolean_or(5, false))
    p.w = Tensor::view_of(p.w, {p.w.size(1), p.w.size(0)}, {p.w.stride(1), p.w.stride(0)}, p.w.offset());
  const int64_t K = p.x.size(p.x.dim() - 1), N = p.w.size(1);
  if (p.w.size(0) != K)
    fail(cat("input of shape ", shape_str(p.x.sizes()), " does not fit weight {K, N} = ", shape_str(p.w.sizes())));
  p.shape = p.x.sizes();
  p.shape.back() = N;
  if (c.has(2)) {
    p.bias = c.tensor(2);
    same_kind(p.x, p.bias, "bias");
    if (p.bias.dim() != 1 || p.bias.size(0) != N) fail(cat("bias expected shape {", N, "}, got ", p.bias.describe()));
  }
  if (c.has(3)) {
    p.residual = c.tensor(3);
    same_kind(p.x, p.residual, "residual");
    if (p.residual.sizes() != p.shape)
      fail(cat("residual expected the result's shape ", shape_str(p.shape), ", got ", p.residual.describe()));
  }
  return p;
}

std::vector<Meta> infer(OpCall& c) {
  Args p = prepare(c);
  return {{p.shape, p.x.dtype(), p.x.device()}};
}

// t's values as a contiguous {M, n} matrix (a view when t is contiguous).
Tensor matrix(const Tensor& t, int64_t M, int64_t n) {
  if (!t.defined()) return t;
  const Tensor d = dense(t);
  return Tensor::view_of(d, {M, n}, {n, 1}, d.offset());
}

// CPU float32 / float64: the tile's rows get bias, activation and residual while in cache.
void run_tiles(const Tensor& out, const Tensor& x, const Args& p, const Tensor& res) {
  const DType d = out.dtype();
  const BlockFn add = block_function("add", d);
  const BlockFn act = p.act == Epilogue::Relu ? block_function("relu", d)
                      : p.act == Epilogue::GeluTanh ? gelu_tanh_block(d) : nullptr;
  if (!add || (p.act != Epilogue::None && !act)) fail(cat("no block function of add / the activation for ", dtype_name(d)));
  const Tensor bias = dense(p.bias);
  const int64_t N = out.size(1), es = int64_t(dtype_size(d));
  char* C = out.data_bytes();
  const char* bp = bias.defined() ? bias.data_bytes() : nullptr;
  const char* rp = res.defined() ? res.data_bytes() : nullptr;
  matmul_tiles(out, x, p.w, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t i = r0; i < r1; ++i) {
      char* row = C + (i * N + c0) * es;
      if (bp) add(row, bp + c0 * es, row, c1 - c0);
      if (act) act(row, nullptr, row, c1 - c0);
      if (rp) add(row, rp + (i * N + c0) * es, row, c1 - c0);
    }
  });
}

// The ops the fused one stands for, one after another (CUDA without cuBLASLt's support, other dtypes).
void run_composite(Context& ctx, const Tensor& out, const Tensor& x, const Args& p, const Tensor& res) {
  matmul_into(out, x, p.w, false);
  Tensor y = out;
  if (p.bias.defined()) y = call(ctx, "add", {tensor_arg(y), tensor_arg(p.bias)});
  y = activated(ctx, y, p.act);
  if (res.defined()) y = call(ctx, "add", {tensor_arg(y), tensor_arg(res)});
  if (y.get() != out.get()) copy_into(out, y);
}

void run(OpCall& c) {
  const Args p = prepare(c);
  const int64_t K = p.w.size(0), N = p.w.size(1), M = N ? c.outs[0].numel() / N : 0;
  if (M == 0 || N == 0) return;
  const Tensor out = Tensor::view_of(c.outs[0], {M, N}, {N, 1}, 0);
  const Tensor x = p.x.dim() == 2 ? p.x : matrix(p.x, M, K), res = matrix(p.residual, M, N);
  const DType d = out.dtype();
  if (out.device().is_cpu() && (d == DType::f32 || d == DType::f64) && K > 0) return run_tiles(out, x, p, res);
  if (!out.device().is_cpu()) {
    if (cuda_gemv(c.ctx, out, x, p.w, dense(p.bias), p.act, res)) return;
    // (cuBLASLt adds its C operand before the activation: with both, the residual comes after)
    const bool both = res.defined() && p.act != Epilogue::None;
    if (cuda_matmul_epilogue(out, x, p.w, dense(p.bias), p.act, both ? Tensor() : res)) {
      if (both) copy_into(out, call(c.ctx, "add", {tensor_arg(out), tensor_arg(res)}));
      return;
    }
  }
  run_composite(c.ctx, out, x, p, res);
}

}  // namespace

Epilogue activation_arg(const OpCall& c, int index) {
  const std::string a = c.has(index) ? c.str(index) : "none";
  if (a == "none") return Epilogue::None;
  if (a == "relu") return Epilogue::Relu;
  if (a == "gelu_tanh") return Epilogue::GeluTanh;
  fail(cat("activation expected \"none\", \"relu\" or \"gelu_tanh\", got \"", a, "\""));
}

Tensor activated(Context& ctx, const Tensor& y, Epilogue act) {
  if (act == Epilogue::Relu) return call(ctx, "relu", {tensor_arg(y)});
  if (act != Epilogue::GeluTanh) return y;
  cr_value tanh{};
  tanh.tag = kString;
  tanh.str = "tanh";
  return call(ctx, "gelu", {tensor_arg(y), tanh});
}

void register_epilogue(Registry& r) {
  r.add(OpDef{"_addmm_epilogue", "input:T, weight:T, bias:T?, residual:T?, activation:S?, transposed:B?",
              OpKind::Linalg, kNoMethod | kDeviceAware | kExtern, infer, run});
  // no derivative: the fused form is for inference graphs (a backward reaching it raises)
}

}  // namespace cr
