// Derivatives of the pointwise ops (vm/ops/pointwise.cpp), as PyTorch's derivatives.yaml has
// them. The engine undoes broadcasting and casts each gradient to its input's dtype.
#include <cmath>
#include <cstring>
#include <string>
#include <numbers>

#include "vm/autograd/grad.hpp"

namespace cr {
namespace {
using namespace autograd;

Var f(const char* name, const Var& x) { return op(name, {x}); }
Var f(const char* name, const Var& x, const Var& y) { return op(name, {x, y}); }
Var mask(const char* cmp, const Var& x, const Var& y) { return f(cmp, x, y); }  // a bool tensor

constexpr uint32_t kIn0 = 1, kIn1 = 2, kIn2 = 4, kOut0 = 1;

// y = f(x) with dy/dx from x (saves the input) or from y (saves the output)
#define FROM_X(NAME, EXPR) \
  derivative(r, NAME, {.fn = [](Grad& g) { Var x = g.in(0); g.set(0, g.grad() * (EXPR)); }, .saves_inputs = kIn0})
#define FROM_Y(NAME, EXPR) \
  derivative(r, NAME, {.fn = [](Grad& g) { Var y = g.out(0); g.set(0, g.grad() * (EXPR)); }, .saves_outputs = kOut0})

void zero_grad_rule(Grad& g) { g.set(0, zeros_like(g.grad())); }

// gelu's two forms (PyTorch's GeluBackward)
Var gelu_erf_slope(const Var& x) {
  const double inv_sqrt2 = 1 / std::numbers::sqrt2, inv_sqrt2pi = 1 / std::sqrt(2 * std::numbers::pi);
  Var cdf = (f("erf", x * inv_sqrt2) + 1.0) * 0.5;
  return cdf + x * f("exp", x * x * -0.5) * inv_sqrt2pi;
}
Var gelu_tanh_slope(const Var& x) {
  const double beta = std::sqrt(2 / std::numbers::pi), kappa = 0.044715;
  Var th = f("tanh", (x + x * x * x * kappa) * beta);
  Var left = x * 0.5, right = th + 1.0;
  return right * 0.5 + left * (-(th * th) + 1.0) * beta * (x * x * (3 * kappa) + 1.0);
}
// d slope / dx, for the gradients of gelu's gradient (double backward)
Var gelu_erf_curvature(const Var& x) {
  const double inv_sqrt2pi = 1 / std::sqrt(2 * std::numbers::pi);
  return f("exp", x * x * -0.5) * inv_sqrt2pi * (-(x * x) + 2.0);
}
Var gelu_tanh_curvature(const Var& x) {
  const double beta = std::sqrt(2 / std::numbers::pi), kappa = 0.044715;
  Var th = f("tanh", (x + x * x * x * kappa) * beta);
  Var du = (x * x * (3 * kappa) + 1.0) * beta;  // d inner / dx
  return (-(th * th) + 1.0) * (du + x * x * (3 * beta * kappa) - x * th * du * du);
}
void gelu_rule(Grad& g) {
  const bool tanh = g.arg().has(1) && g.arg().str(1) == "tanh";
  g.set(0, op(tanh ? "_gelu_tanh_backward" : "_gelu_backward", {g.grad(), g.in(0)}));
}
template <bool Tanh> void gelu_backward_rule(Grad& g) {
  Var x = g.in(1);
  if (g.needs(0)) g.set(0, g.grad() * (Tanh ? gelu_tanh_slope(x) : gelu_erf_slope(x)));
  if (g.needs(1)) g.set(1, g.grad() * g.in(0) * (Tanh ? gelu_tanh_curvature(x) : gelu_erf_curvature(x)));
}

// mish's slope, as PyTorch's mish_backward: tanh(softplus(x)) + x sigmoid(x) (1 - tanh(softplus(x))^2)
Var mish_slope(const Var& x) {
  Var t = f("tanh", op("softplus", {x, 1.0}));
  return t + x * f("sigmoid", x) * (-(t * t) + 1.0);
}

void add_rule(Grad& g) {
  const double alpha = g.arg().number_or(2, 1);
  if (g.needs(0)) g.set(0, g.grad());
  if (g.needs(1)) g.set(1, alpha == 1 ? g.grad() : g.grad() * alpha);
}
void sub_rule(Grad& g) {
  const double alpha = g.arg().number_or(2, 1);
  if (g.needs(0)) g.set(0, g.grad());
  if (g.needs(1)) g.set(1, g.grad() * -alpha);
}
void mul_rule(Grad& g) {
  if (g.needs(0)) g.set(0, g.grad() * g.in(1));
  if (g.needs(1)) g.set(1, g.grad() * g.in(0));
}
void div_rule(Grad& g) {
  Var b = g.in(1);
  if (g.needs(0)) g.set(0, g.grad() / b);
  if (g.needs(1)) g.set(1, -g.grad() * g.in(0) / (b * b));
}
// pow: d/dx = y * x^(y-1) (0 where y == 0), d/dy = x^y * log(x) (0 where x == 0 and y >= 0);
// log(x) in the result's dtype, as PyTorch's (an integer x would take float32's log)
void pow_rule(Grad& g) {
  Var x = g.in(0), y = g.in(1), r = g.out(0);
  if (g.needs(0)) {
    Var d = y * f("pow", x, y - 1.0);
    if (!y.is_num) d = where(mask("eq", y, 0.0), 0.0, d);
    else if (y.num == 0) d = zeros_like(g.grad());
    g.set(0, g.grad() * d);
  }
  if (g.needs(1)) {
    Var d = x.is_num ? r * std::log(x.num) : where(f("logical_and", mask("eq", x, 0.0), mask("ge", y, 0.0)), 0.0, r * f("log", to_dtype(x, g.out_meta().dtype)));
    if (x.is_num && x.num == 0) d = where(mask("ge", y, 0.0), 0.0, d);  // (r * log(0) is 0 * -inf there)
    g.set(1, g.grad() * d);
  }
}
// fmod / remainder: x - trunc(x / y) * y and x - floor(x / y) * y
void fmod_rule(Grad& g) {
  if (g.needs(0)) g.set(0, g.grad());
  if (g.needs(1)) g.set(1, -g.grad() * f("trunc", g.in(0) / g.in(1)));
}
// PyTorch's div(x, y, rounding_mode="floor"): the exact quotient (x - fmod(x, y)) / y, one less
// where fmod's sign is not y's; NaN for an infinite x; x / y where y == 0. In the result's dtype.
Var floor_div(Var x, Var y, DType dtype) {
  if (!x.is_num) x = to_dtype(x, dtype);
  y = to_dtype(y, dtype);
  Var m = f("fmod", x, y);
  Var off = f("logical_and", mask("ne", m, 0.0), mask("ne", mask("lt", m, 0.0), mask("lt", y, 0.0)));
  Var q = f("round", (x - m) / y - where(off, 1.0, 0.0));
  return where(mask("eq", y, 0.0), x / y, q);
}
void remainder_rule(Grad& g) {
  if (g.needs(0)) g.set(0, g.grad());
  if (g.needs(1)) g.set(1, -g.grad() * floor_div(g.in(0), g.in(1), g.out_meta().dtype));
}
// maximum / minimum, as PyTorch's: halved on ties, zero for an input that strictly loses; where
// either is NaN no comparison holds, so both get the gradient
template <const char* Wins> void extremum_rule(Grad& g) {
  Var a = g.in(0), b = g.in(1), gr = g.grad();
  Var share = where(mask("eq", a, b), gr * 0.5, gr);
  if (g.needs(0)) g.set(0, where(mask(Wins, b, a), 0.0, share));
  if (g.needs(1)) g.set(1, where(mask(Wins, a, b), 0.0, share));
}
constexpr char kGt[] = "gt", kLt[] = "lt";
void atan2_rule(Grad& g) {
  Var a = g.in(0), b = g.in(1);
  Var den = a * a + b * b;
  if (g.needs(0)) g.set(0, g.grad() * b / den);
  if (g.needs(1)) g.set(1, -g.grad() * a / den);
}

void hypot_rule(Grad& g) {  // (a / hypot(a, b): NaN at 0, 0, as PyTorch's)
  Var a = g.in(0), b = g.in(1);
  Var h = op("hypot", {a, b});
  if (g.needs(0)) g.set(0, g.grad() * a / h);
  if (g.needs(1)) g.set(1, g.grad() * b / h);
}

void where_rule(Grad& g) {
  Var c = g.in(0);
  if (g.needs(1)) g.set(1, where(c, g.grad(), 0.0));
  if (g.needs(2)) g.set(2, where(c, 0.0, g.grad()));
}
// y = min(max(x, lo), hi): x passes where lo <= x and max(x, lo) <= hi
void clamp_rule(Grad& g) {
  Var x = g.in(0), gr = g.grad();
  const bool lo = g.arg().has(1), hi = g.arg().has(2);
  Var a = lo ? f("maximum", x, g.in(1)) : x;
  Var below_hi = hi ? mask("le", a, g.in(2)) : Var();
  auto both = [&](const Var& m) { return !m.defined() ? below_hi : below_hi.defined() ? f("logical_and", m, below_hi) : m; };
  auto pass = [&](const Var& m) { return m.defined() ? where(m, gr, 0.0) : gr; };
  if (g.needs(0)) g.set(0, pass(both(lo ? mask("ge", x, g.in(1)) : Var())));
  if (lo && g.needs(1)) g.set(1, pass(both(mask("lt", x, g.in(1)))));
  if (hi && g.needs(2)) g.set(2, pass(mask("gt", a, g.in(2))));
}
void lerp_rule(Grad& g) {
  Var w = g.in(2);
  if (g.needs(0)) g.set(0, g.grad() * (-w + 1.0));
  if (g.needs(1)) g.set(1, g.grad() * w);
  if (g.needs(2)) g.set(2, g.grad() * (g.in(1) - g.in(0)));
}
void addcmul_rule(Grad& g) {
  const double v = g.arg().number_or(3, 1);
  if (g.needs(0)) g.set(0, g.grad());
  if (g.needs(1)) g.set(1, g.grad() * g.in(2) * v);
  if (g.needs(2)) g.set(2, g.grad() * g.in(1) * v);
}

}  // namespace

void register_pointwise_derivatives(Registry& r) {
  derivative(r, "neg", {.fn = [](Grad& g) { g.set(0, -g.grad()); }});
  FROM_X("abs", f("sign", x));
  FROM_Y("exp", y);
  FROM_Y("exp2", y * std::numbers::ln2);
  FROM_X("log", f("reciprocal", x));
  FROM_X("log2", f("reciprocal", x * std::numbers::ln2));
  FROM_X("log1p", f("reciprocal", x + 1.0));
  FROM_Y("expm1", y + 1.0);
  FROM_Y("sqrt", f("reciprocal", y * 2.0));
  FROM_Y("rsqrt", y * y * y * -0.5);
  FROM_X("sin", f("cos", x));
  FROM_X("cos", -f("sin", x));
  FROM_Y("tan", y * y + 1.0);
  FROM_Y("tanh", -(y * y) + 1.0);
  FROM_Y("sigmoid", y * (-y + 1.0));
  FROM_Y("relu", f("logical_not", mask("le", y, 0.0)));  // NaN passes, as threshold_backward
  FROM_X("silu", f("sigmoid", x) * (x * (-f("sigmoid", x) + 1.0) + 1.0));
  // (where, not a product with a mask: elu's exp(x) is inf where x > 0 is large; NaN takes the
  // gradient as it is, as PyTorch's elu_backward)
  derivative(r, "leaky_relu", {.fn = [](Grad& g) {
    g.set(0, where(mask("gt", g.in(0), 0.0), g.grad(), g.grad() * g.arg().number(1)));
  }, .saves_inputs = kIn0});
  derivative(r, "softplus", {.fn = [](Grad& g) {
    Var z = g.in(0) * g.arg().number(1);
    g.set(0, where(mask("gt", z, 20.0), g.grad(), g.grad() * f("sigmoid", z)));
  }, .saves_inputs = kIn0});
  FROM_X("mish", mish_slope(x));
  FROM_X("logsigmoid", f("sigmoid", -x));
  derivative(r, "hardsigmoid", {.fn = [](Grad& g) {
    Var x = g.in(0);
    g.set(0, where(f("logical_and", mask("gt", x, -3.0), mask("lt", x, 3.0)), g.grad() * (1.0 / 6), 0.0));
  }, .saves_inputs = kIn0});
  derivative(r, "hardswish", {.fn = [](Grad& g) {
    Var x = g.in(0);
    g.set(0, where(mask("lt", x, -3.0), 0.0, where(mask("le", x, 3.0), g.grad() * (x * (1.0 / 3) + 0.5), g.grad())));
  }, .saves_inputs = kIn0});
  // (at 0 the slope alpha is a constant of x: its own gradient there is 0, as PyTorch's
  // elu_double_backward, whose mask is x < 0)
  derivative(r, "elu", {.fn = [](Grad& g) {
    Var x = g.in(0);
    const double alpha = g.arg().number(1);
    Var neg = where(mask("lt", x, 0.0), g.grad() * f("exp", x) * alpha, g.grad() * alpha);
    g.set(0, where(mask("le", x, 0.0), neg, g.grad()));
  }, .saves_inputs = kIn0});
  FROM_X("erf", f("exp", -(x * x)) * (2 / std::sqrt(std::numbers::pi)));
  FROM_Y("erfinv", f("exp", y * y) * (std::sqrt(std::numbers::pi) / 2));
  FROM_Y("reciprocal", -(y * y));
  FROM_X("square", x * 2.0);
  for (const char* n : {"floor", "ceil", "round", "trunc", "sign"}) derivative(r, n, {.fn = zero_grad_rule});
  derivative(r, "gelu", {.fn = gelu_rule, .saves_inputs = kIn0});
  derivative(r, "_gelu_backward", {.fn = gelu_backward_rule<false>, .saves_inputs = kIn0 | kIn1});
  derivative(r, "_gelu_tanh_backward", {.fn = gelu_backward_rule<true>, .saves_inputs = kIn0 | kIn1});
  derivative(r, "add", {.fn = add_rule});
  derivative(r, "sub", {.fn = sub_rule});
  derivative(r, "mul", {.fn = mul_rule, .saves_inputs = kIn0 | kIn1, .saved_for_others = kIn0 | kIn1});
  derivative(r, "div", {.fn = div_rule, .saves_inputs = kIn0 | kIn1, .saved_for_others = kIn0});
  derivative(r, "pow", {.fn = pow_rule, .saves_inputs = kIn0 | kIn1, .saves_outputs = kOut0});
  derivative(r, "fmod", {.fn = fmod_rule, .saves_inputs = kIn0 | kIn1});
  derivative(r, "remainder", {.fn = remainder_rule, .saves_inputs = kIn0 | kIn1});
  derivative(r, "maximum", {.fn = extremum_rule<kGt>, .saves_inputs = kIn0 | kIn1});
  derivative(r, "minimum", {.fn = extremum_rule<kLt>, .saves_inputs = kIn0 | kIn1});
  derivative(r, "atan2", {.fn = atan2_rule, .saves_inputs = kIn0 | kIn1});
  derivative(r, "hypot", {.fn = hypot_rule, .saves_inputs = kIn0 | kIn1});
  derivative(r, "where", {.fn = where_rule, .saves_inputs = kIn0, .nondiff = kIn0});
  derivative(r, "clamp", {.fn = clamp_rule, .saves_inputs = kIn0 | kIn1 | kIn2});
  // (unlike clamp's, zero at the bounds; NaN passes, as PyTorch's hardtanh_backward)
  derivative(r, "hardtanh", {.fn = [](Grad& g) {
    Var x = g.in(0);
    Var out = f("logical_or", mask("le", x, g.arg().number(1)), mask("ge", x, g.arg().number(2)));
    g.set(0, where(out, 0.0, g.grad()));
  }, .saves_inputs = kIn0});
  derivative(r, "lerp", {.fn = lerp_rule, .saves_inputs = kIn0 | kIn1 | kIn2});
  derivative(r, "addcmul", {.fn = addcmul_rule, .saves_inputs = kIn1 | kIn2});
  // (rounded quotients are steps: zero gradients, as PyTorch's div with a rounding_mode)
  for (const char* n : {"_div_floor", "_div_trunc"})
    derivative(r, n, {.fn = [](Grad& g) {
      for (int i : {0, 1})
        if (g.needs(i)) g.set(i, zeros_like(g.grad()));
    }});
#define CR_INPLACE_NAME(NAME) #NAME "_",
  for (const char* n : {CR_INPLACE_OPS(CR_INPLACE_NAME)}) {
    std::string base(n, std::strlen(n) - 1);
    r.set_derivative(n, r.find(base)->grad);
  }
#undef CR_INPLACE_NAME
  for (const char* n : {"isnan", "isinf", "logical_not", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
                        "logical_xor"})
    derivative(r, n, {.not_differentiable = true});
}

}  // namespace cr
