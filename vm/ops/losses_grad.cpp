// The derivative of _cross_entropy (vm/ops/losses.cpp). Per position p of target t, with the
// weight w_t of its class (0 where ignored), label smoothing s over C classes and class weights
// W_c (1 without weight), the loss's derivative in the logits is
//   g_p * (softmax_c * Q_p - (1 - s) w_t [c = t] - valid_p (s / C) W_c),  Q_p = sum of the rest
// where g_p is the loss's gradient at p (divided by the summed w_t for "mean"). The fused
// _cross_entropy_backward computes it in one pass from a = g Q, b = g (1 - s) w_t, k = g valid s / C;
// with create_graph the same formula runs as registry ops, so a double backward differentiates it.
// The class weights get no gradient (PyTorch's nll_loss has none): F.cross_entropy takes the
// composition for a weight that requires grad.
#include "vm/autograd/grad.hpp"
#include "vm/autograd/grad_mode.hpp"
#include "vm/ops/derivatives.hpp"
#include "vm/ops/losses.hpp"

namespace cr {
namespace {
using namespace autograd;

constexpr uint32_t kInput = 1, kTarget = 2, kWeight = 4, kLse = 2;

// A large 16-bit gradient {N, C} on CUDA whose rows are off 16 bytes (a 50257 vocabulary) is
// written with rows padded to them, and the rule returns its first C columns: the products
// that read it (the head's two) then run in place instead of copying it twice (vm/cuda/blas.cpp).
int64_t padded_pitch(const Grad& g, int64_t C) {
  const Meta& m = g.meta(0);
  if (m.device.is_cpu() || (m.dtype != DType::f16 && m.dtype != DType::bf16) || g.ndim(0) != 2 || C % 8 == 0) return 0;
  return g.sizes(0)[0] * C >= (int64_t(1) << 20) ? (C + 7) / 8 * 8 : 0;
}

void cross_entropy_rule(Grad& g) {
  if (g.has_grad(1)) fail("_cross_entropy: lse (output 2) is not differentiable");
  if (!g.needs(0)) return;
  const OpCall& arg = g.arg();
  const int cd = ce_class_dim(g.ndim(0));
  const int64_t C = g.sizes(0)[size_t(cd)];
  const DType dt = g.out_meta(1).dtype;  // the loss's (dtype=), the input's or wider
  const double s = arg.number_or(4, 0);
  const bool weighted = g.is_tensor(2);
  Var valid = op("ne", {g.in(1), arg.number_or(3, -100)});
  Var idx = to_dtype(where(valid, g.in(1), 1.0), DType::i64), validf = to_dtype(valid, dt);
  const Shape pos = ce_positions(g.sizes(0));
  // float16 / bfloat16 sums accumulate in float32 (as the forward's)
  auto total = [&](const Var& v) { return to_dtype(op("sum", {ce_accumulated(v, dt)}), dt); };
  Var wt = validf, wsum = double(C);
  if (weighted) {
    Var picked = reshape(op("index_select", {g.in(2), 1, reshape(idx, {idx.tensor().numel()})}), pos);
    wt = where(valid, picked, 0.0), wsum = total(g.in(2));
  }
  const std::string r = arg.has(5) ? arg.str(5) : "mean";
  // ignored positions get exactly 0, as PyTorch's nll_loss (a mean over none is 0 / 0)
  Var gp = where(valid, r == "mean" ? g.grad() / total(wt) : g.grad(), 0.0);
  Var b = gp * (wt * (1 - s)), k = gp * (validf * (s / double(C)));
  Var a = b + k * wsum;
  if (!grad_enabled) {
    const Arg w = weighted ? Arg(g.in(2)) : Arg(nullptr);
    const int64_t pitch = padded_pitch(g, C);
    if (!pitch) return g.set(0, op("_cross_entropy_backward", {g.in(0), g.out(1), idx, a, b, k, w}));
    g.set(0, op("narrow", {op("_cross_entropy_backward", {g.in(0), g.out(1), idx, a, b, k, w, pitch}), 2, 1, C}));
    return;
  }
  Shape view(size_t(g.ndim(0)), 1);
  view[size_t(cd)] = C;
  const std::string dev = device_name(g.meta(0).device);
  Var classes = reshape(op("arange", {int64_t(1), C + 1, nullptr, nullptr, dev.c_str()}), view);
  Var one_hot = to_dtype(op("eq", {classes, unsqueeze(idx, cd)}), dt);
  Var per_class = weighted ? reshape(g.in(2), view) : Var(1.0);
  Var grad = unsqueeze(a, cd) * op("softmax", {to_dtype(g.in(0), dt), cd + 1}) - unsqueeze(b, cd) * one_hot -
             unsqueeze(k, cd) * per_class;
  g.set(0, to_dtype(grad, g.meta(0).dtype));
}

// _binary_cross_entropy's, as PyTorch's: its backward op for the input, -logit(x) for the target
void binary_cross_entropy_rule(Grad& g) {
  Var x = g.in(0), y = g.in(1);
  if (g.needs(0)) g.set(0, op("_binary_cross_entropy_backward", {g.grad(), x, y}));
  if (g.needs(1)) g.set(1, -g.grad() * op("log", {x / (-x + 1.0)}));
}
// and its backward's, PyTorch's double backward (binary_cross_entropy_double_backward*): the
// input's with the denominator (x + eps)^2 (1 - x + eps)^2, eps = 1e-12
void binary_cross_entropy_backward_rule(Grad& g) {
  Var go = g.in(0), x = g.in(1), y = g.in(2), gg = g.grad();
  const double eps = 1e-12;
  if (g.needs(0)) g.set(0, op("_binary_cross_entropy_backward", {gg, x, y}));  // (linear in grad)
  if (g.needs(1)) {
    Var lo = x + eps, hi = -x + 1.0 + eps;
    g.set(1, gg * go * (x * x - x * y * 2.0 + y) / (lo * lo * hi * hi));
  }
  if (g.needs(2)) g.set(2, -gg * go / op("clamp", {(-x + 1.0) * x, eps}));
}

}  // namespace

void register_loss_derivatives(Registry& r) {
  derivative(r, "_cross_entropy", {.fn = cross_entropy_rule, .saves_inputs = kInput | kTarget | kWeight,
                                   .saves_outputs = kLse, .nondiff = kTarget | kWeight});
  derivative(r, "_binary_cross_entropy", {.fn = binary_cross_entropy_rule, .saves_inputs = kInput | kTarget});
  derivative(r, "_binary_cross_entropy_backward", {.fn = binary_cross_entropy_backward_rule, .saves_inputs = 7});
}

}  // namespace cr
