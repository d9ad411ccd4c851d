// Derivatives of im2col / col2im / conv2d (vm/ops/conv.cpp). im2col and col2im are each other's
// adjoints; conv2d's are written with them, per group g (L output positions, N samples):
//   dX = col2im(W_g^T @ dY_g),  dW_g = sum over samples of dY_g @ im2col(X)_g^T,  db = sum of dY
// so a double backward goes through the same ops. On CUDA with cuDNN, dX and dW are cuDNN's
// backward data / filter (_conv2d_input_grad / _conv2d_weight_grad, vm/ops/conv_cuda.cpp), whose
// own rules are convolutions again (both are linear in each argument).
#include "vm/autograd/grad.hpp"
#include "vm/cuda/cudnn.hpp"
#include "vm/ops/derivatives.hpp"

namespace cr {
namespace {
using namespace autograd;

constexpr uint32_t kIn0 = 1, kIn1 = 2;

Var mt(const Var& x) { return op("transpose", {x, -1, -2}); }
Var mm(const Var& a, const Var& b) { return op("matmul", {a, b}); }

// An optional integer-list argument passed on as it came (nil stays nil: the op's default).
Arg same(const Grad& g, int i) { return g.arg().has(i) ? Arg(g.arg().ints(i)) : Arg(nullptr); }

// im2col(x, kernel_size, dilation, padding, stride)
void im2col_rule(Grad& g) {
  const Shape& xs = g.sizes(0);
  const Shape hw{xs[xs.size() - 2], xs.back()};
  g.set(0, op("col2im", {g.grad(), hw, g.arg().ints(1), same(g, 2), same(g, 3), same(g, 4)}));
}

// col2im(cols, output_size, kernel_size, dilation, padding, stride)
void col2im_rule(Grad& g) { g.set(0, op("im2col", {g.grad(), g.arg().ints(2), same(g, 3), same(g, 4), same(g, 5)})); }

// conv2d(x, w, bias, stride, padding, dilation, groups): dX and dW of the batched gy {N, Cout,
// Ho, Wo} and x {N, Cin, H, W} (xs) through im2col / col2im and products.
void unfolded_grads(Grad& g, const Var& gy, const Shape& xs, bool batched) {
  const Shape& ws = g.sizes(1);
  const Shape ys = gy.tensor().sizes();
  const int64_t N = xs[0], cin = xs[1], cout = ws[0], G = g.arg().integer_or(6, 1);
  const int64_t kk = ws[2] * ws[3], kg = cin / G * kk, L = ys[2] * ys[3];
  const Shape kernel{ws[2], ws[3]};
  Var gyr = reshape(gy, {N, G, cout / G, L});
  if (g.needs(0)) {
    Var cols = mm(mt(reshape(g.in(1), {G, cout / G, kg})), gyr);
    Var gx = op("col2im", {reshape(cols, {N, cin * kk, L}), Shape{xs[2], xs[3]}, kernel, same(g, 5), same(g, 4), same(g, 3)});
    g.set(0, batched ? gx : reshape(gx, g.sizes(0)));
  }
  if (g.needs(1)) {
    Var x = batched ? g.in(0) : unsqueeze(g.in(0), 0);
    Var cols = reshape(op("im2col", {x, kernel, same(g, 5), same(g, 4), same(g, 3)}), {N, G, kg, L});
    // the samples joined into the products' inner dim, so no per-sample copy of dW is made
    auto by_group = [&](const Var& t, int64_t rows) { return reshape(op("permute", {t, Shape{2, 3, 1, 4}}), {G, rows, N * L}); };
    Var gw = N == 1 ? mm(reshape(gyr, {G, cout / G, L}), mt(reshape(cols, {G, kg, L})))
                    : mm(by_group(gyr, cout / G), mt(by_group(cols, kg)));
    g.set(1, reshape(gw, ws));
  }
}

void conv2d_rule(Grad& g) {
  const bool batched = g.ndim(0) == 4;
  Var gy = g.grad();
  if (!batched) gy = unsqueeze(gy, 0);
  const Shape xs = batched ? g.sizes(0) : Shape{1, g.sizes(0)[0], g.sizes(0)[1], g.sizes(0)[2]};
  if (g.meta(0).device.is_cpu() || !cuda::cudnn_usable()) {
    unfolded_grads(g, gy, xs, batched);
  } else {
    const Arg s = same(g, 3), p = same(g, 4), d = same(g, 5), G = Arg(g.arg().integer_or(6, 1));
    if (g.needs(0)) {
      Var gx = op("_conv2d_input_grad", {gy, g.in(1), xs, s, p, d, G});
      g.set(0, batched ? gx : reshape(gx, g.sizes(0)));
    }
    if (g.needs(1)) g.set(1, op("_conv2d_weight_grad", {gy, batched ? g.in(0) : unsqueeze(g.in(0), 0), g.sizes(1), s, p, d, G}));
  }
  if (g.is_tensor(2) && g.needs(2)) g.set(2, sum(gy, {0, 2, 3}, false));
}

// _conv2d_input_grad(gy, w, input_size, ...) = dX: for its gradient G, d gy = conv2d(G, w) and
// dw = _conv2d_weight_grad(gy, G); _conv2d_weight_grad(gy, x, weight_size, ...) = dW: for H,
// d gy = conv2d(x, H) and dx = _conv2d_input_grad(gy, H).
void conv_grad_rule(Grad& g, bool input_grad) {
  const Arg s = same(g, 3), p = same(g, 4), d = same(g, 5), G = Arg(g.arg().integer_or(6, 1));
  const Var h = g.grad();
  if (g.needs(0))
    g.set(0, input_grad ? op("conv2d", {h, g.in(1), nullptr, s, p, d, G}) : op("conv2d", {g.in(1), h, nullptr, s, p, d, G}));
  if (g.needs(1))
    g.set(1, op(input_grad ? "_conv2d_weight_grad" : "_conv2d_input_grad", {g.in(0), h, g.sizes(1), s, p, d, G}));
}
void input_grad_rule(Grad& g) { conv_grad_rule(g, true); }
void weight_grad_rule(Grad& g) { conv_grad_rule(g, false); }

}  // namespace

void register_conv_derivatives(Registry& r) {
  derivative(r, "im2col", {.fn = im2col_rule});
  derivative(r, "col2im", {.fn = col2im_rule});
  derivative(r, "conv2d", {.fn = conv2d_rule, .saves_inputs = kIn0 | kIn1});
  derivative(r, "_conv2d_input_grad", {.fn = input_grad_rule, .saves_inputs = kIn0 | kIn1});
  derivative(r, "_conv2d_weight_grad", {.fn = weight_grad_rule, .saves_inputs = kIn0 | kIn1});
}

}  // namespace cr
