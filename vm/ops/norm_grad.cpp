// The derivative of _layer_norm (vm/ops/norm.cpp): the fused _layer_norm_backward from the saved
// input, weight, mean and rstd. With create_graph the rule writes the same gradients as a
// composition of registry ops instead (mean and rstd recomputed from the input), so that a
// double backward differentiates them; _layer_norm_backward itself has no derivative.
#include "vm/autograd/grad.hpp"
#include "vm/autograd/grad_mode.hpp"
#include "vm/ops/derivatives.hpp"

namespace cr {
namespace {
using namespace autograd;

constexpr uint32_t kInput = 1, kWeight = 4, kMeanRstd = 2 | 4;

Var wide(const Var& x) {
  const DType d = x.tensor().dtype();
  return d == DType::f16 || d == DType::bf16 ? to_dtype(x, DType::f32) : x;
}

// The gradients as PyTorch's layer_norm_backward formula, op by op:
//   gx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = grad * weight
void composite_rule(Grad& g, const Shape& normalized) {
  const int r = g.ndim(0), k = int(normalized.size());
  std::vector<int> dims;
  double n = 1;
  for (int d = r - k; d < r; ++d) dims.push_back(d), n *= double(g.sizes(0)[size_t(d)]);
  Var x = wide(g.in(0)), gy = wide(g.grad());
  Var xc = x - sum(x, dims, true) / n;
  Var rs = op("rsqrt", {sum(xc * xc, dims, true) / n + g.arg().number_or(4, 1e-5)});
  Var xh = xc * rs;
  if (g.needs(0)) {
    Var gw = g.is_tensor(2) ? gy * wide(g.in(2)) : gy;
    g.set(0, rs * (gw - sum(gw, dims, true) / n - xh * (sum(gw * xh, dims, true) / n)));
  }
  if (g.is_tensor(2) && g.needs(2)) g.set(2, sum_to(gy * xh, normalized));
  if (g.is_tensor(3) && g.needs(3)) g.set(3, sum_to(gy, normalized));
}

void layer_norm_rule(Grad& g) {
  if (g.has_grad(1) || g.has_grad(2)) fail("_layer_norm: mean and rstd (outputs 2 and 3) are not differentiable");
  const std::vector<int64_t> shape = g.arg().ints(1);
  if (grad_enabled) return composite_rule(g, Shape(shape.begin(), shape.end()));
  const bool w = g.is_tensor(2), want_w = w && g.needs(2), want_b = g.is_tensor(3) && g.needs(3);
  const std::vector<Tensor> r =
      call_op("_layer_norm_backward", {g.grad(), g.in(0), shape, g.out(1), g.out(2), w ? Arg(g.in(2)) : Arg(nullptr),
                                       std::vector<int64_t>{g.needs(0), want_w, want_b}});
  if (g.needs(0)) g.set(0, r[0]);
  if (want_w) g.set(2, r[1]);
  if (want_b) g.set(3, r[2]);
}

}  // namespace

void register_norm_derivatives(Registry& r) {
  derivative(r, "_layer_norm", {.fn = layer_norm_rule, .saves_inputs = kInput | kWeight, .saves_outputs = kMeanRstd});
}

}  // namespace cr
