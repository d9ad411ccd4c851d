// The derivative of attention (vm/ops/attention.cpp), as FlashAttention-2's backward written in
// registry ops: the probabilities P recomputed from q and k, then
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)),  dQ = dS K * scale,  dK = dS^T Q * scale
// and a float mask (added to the scores) gets dS. 16-bit inputs compute in float32, as the
// forward does on the CPU. On CUDA, where the fused kernels take the inputs, _attention_backward
// does the same without materialising P (FlashAttention-2's backward, from the forward's row
// logsumexp: _attention saves it, attention recomputes it); elsewhere, with create_graph (a
// double backward differentiates the composition) or a mask that needs a gradient, the ops above.
#include <cmath>
#include <limits>

#include "vm/autograd/grad.hpp"
#include "vm/autograd/grad_mode.hpp"
#include "vm/kernels/cuda/attention_bwd.hpp"
#include "vm/ops/derivatives.hpp"

namespace cr {
namespace {
using namespace autograd;

constexpr uint32_t kQKV = 1 | 2 | 4, kMask = 32;

Var mt(const Var& x) { return op("transpose", {x, -1, -2}); }
Var mm(const Var& a, const Var& b) { return op("matmul", {a, b}); }
Var wide(const Var& x) {
  const DType d = x.tensor().dtype();
  return d == DType::f16 || d == DType::bf16 ? to_dtype(x, DType::f32) : x;
}

// The scaled, masked scores q k^T * scale, as the forward forms them.
Var scores(const Grad& g, const Var& q, const Var& k, double scale) {
  Var s = mm(q, mt(k)) * scale;
  const double inf = std::numeric_limits<double>::infinity();
  if (g.arg().boolean_or(4, false)) {  // keys after the query's position (top-left aligned)
    const std::string dev = device_name(g.meta(0).device);
    const int r = g.ndim(0);
    Var rows = op("arange", {int64_t(0), g.sizes(0)[size_t(r - 2)], nullptr, nullptr, dev.c_str()});
    Var cols = op("arange", {int64_t(0), g.sizes(1)[size_t(r - 2)], nullptr, nullptr, dev.c_str()});
    return op("masked_fill", {s, op("gt", {unsqueeze(cols, 0), unsqueeze(rows, 1)}), -inf});
  }
  if (!g.is_tensor(5)) return s;
  Var m = g.in(5);
  if (m.tensor().dtype() == DType::b8) return op("masked_fill", {s, op("logical_not", {m}), -inf});
  return s + wide(m);
}

double scale_of(const Grad& g) { return g.arg().number_or(3, 1.0 / std::sqrt(double(g.sizes(0).back()))); }

void composite_rule(Grad& g) {
  Var q = wide(g.in(0)), k = wide(g.in(1)), v = wide(g.in(2)), go = wide(g.grad());
  const double scale = scale_of(g);
  Var p = op("softmax", {scores(g, q, k, scale), -1});
  if (g.needs(2)) g.set(2, mm(mt(p), go));
  if (!g.needs(0) && !g.needs(1) && !(g.is_tensor(5) && g.needs(5))) return;
  Var dp = mm(go, mt(v));
  Var ds = p * (dp - sum(dp * p, {g.ndim(0) - 1}, true));
  if (g.needs(0)) g.set(0, mm(ds, k) * scale);
  if (g.needs(1)) g.set(1, mm(mt(ds), q) * scale);
  if (g.is_tensor(5) && g.needs(5)) g.set(5, ds);  // (summed to the mask's shape by the engine)
}

bool fused_takes(const Grad& g) {
  const Meta& q = g.meta(0);
  const int r = g.ndim(0);
  if (q.device.is_cpu() || grad_enabled || g.sizes(0)[size_t(r - 2)] == 0 || g.sizes(1)[size_t(r - 2)] == 0) return false;
  if (g.is_tensor(5) && (g.needs(5) || r > 4)) return false;  // (a mask view of two batch dims at most)
  return cuda::attention_backward_takes(q.dtype, g.sizes(0).back(), g.sizes(2).back());
}

void fused_rule(Grad& g, const Var& out, const Var& lse) {
  const std::vector<Tensor> d =
      call_op("_attention_backward", {to_dtype(g.grad(), g.meta(0).dtype), g.in(0), g.in(1), g.in(2), out, lse, scale_of(g),
                                      g.arg().boolean_or(4, false), g.is_tensor(5) ? Arg(g.in(5)) : Arg(nullptr)});
  for (int i = 0; i < 3; ++i)
    if (g.needs(i)) g.set(i, d[size_t(i)]);
}

void attention_rule(Grad& g) {
  if (!fused_takes(g)) return composite_rule(g);
  const std::vector<Tensor> f = call_op("_attention", {g.in(0), g.in(1), g.in(2), scale_of(g), g.arg().boolean_or(4, false),
                                                       g.is_tensor(5) ? Arg(g.in(5)) : Arg(nullptr)});
  fused_rule(g, f[0], f[1]);
}

void attention_lse_rule(Grad& g) {
  if (g.has_grad(1)) fail("_attention: the logsumexp (output 2) is not differentiable");
  if (fused_takes(g)) return fused_rule(g, g.out(0), g.out(1));
  composite_rule(g);
}

}  // namespace

void register_attention_derivatives(Registry& r) {
  derivative(r, "attention", {.fn = attention_rule, .saves_inputs = kQKV | kMask});
  derivative(r, "_attention", {.fn = attention_lse_rule, .saves_inputs = kQKV | kMask, .saves_outputs = 1 | 2});
}

}  // namespace cr
