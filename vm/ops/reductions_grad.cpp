// Derivatives of the reductions (vm/ops/reductions.cpp) and of softmax, log_softmax and cumsum
// (vm/ops/scans.cpp): the output gradient is broadcast back over the reduced dims.
#include <cmath>

#include "vm/autograd/grad.hpp"
#include "vm/ops/derivatives.hpp"

namespace cr {
namespace {
using namespace autograd;

constexpr uint32_t kIn0 = 1, kOut0 = 1;

// The reduced dims of argument 1 (0-based; all when absent) and keepdim (argument 2).
// A 0-d input has no dim to reduce (its dim 1 / -1 names the tensor itself): none.
std::vector<int> reduced(const Grad& g) { return g.ndim(0) ? g.arg().dims(1, g.ndim(0)) : std::vector<int>{}; }

// v (shaped like the output) reshaped to the input's rank with size 1 in the reduced dims.
Var keep(const Grad& g, const Var& v) {
  Shape s = g.sizes(0);
  for (int d : reduced(g)) s[size_t(d)] = 1;
  return v.tensor().sizes() == s ? v : reshape(v, s);
}
Var unreduce(const Grad& g, const Var& v) { return expand(keep(g, v), g.sizes(0)); }
int64_t reduced_count(const Grad& g) {
  int64_t n = 1;
  for (int d : reduced(g)) n *= g.sizes(0)[size_t(d)];
  return n;
}
std::vector<int64_t> lua_dims(const std::vector<int>& dims) {
  std::vector<int64_t> r;
  for (int d : dims) r.push_back(d + 1);
  return r;
}

void sum_rule(Grad& g) { g.set(0, unreduce(g, g.grad())); }
void mean_rule(Grad& g) { g.set(0, unreduce(g, g.grad() / double(reduced_count(g)))); }

// prod: the product of the other elements, with zeros handled (one zero: only it gets the
// product of the rest; two or more: none)
void prod_rule(Grad& g) {
  Var x = g.in(0);
  std::vector<int64_t> dims = lua_dims(reduced(g));
  Var is0 = op("eq", {x, 0.0});
  Var nonzero_prod = op("prod", {where(is0, 1.0, x), dims, true});
  Var zeros_n = op("sum", {is0, dims, true});
  Var none = op("eq", {zeros_n, 0.0}), one = op("logical_and", {op("eq", {zeros_n, 1.0}), is0});
  Var others = where(none, nonzero_prod / x, where(one, nonzero_prod, 0.0));
  g.set(0, unreduce(g, g.grad()) * others);
}

// amax / amin and max / min over everything: split evenly between the tied extremes
void even_rule(Grad& g) {
  Var x = g.in(0), hit = op("eq", {x, unreduce(g, g.out(0))});
  Var count = op("sum", {hit, lua_dims(reduced(g)), true});
  g.set(0, unreduce(g, g.grad()) * hit / count);
}

// aminmax: amin's and amax's rule, one for each result's gradient
void low_high_rule(Grad& g) {
  Var x = g.in(0), sum;
  for (int k = 0; k < 2; ++k) {
    Var hit = op("eq", {x, unreduce(g, g.out(k))});
    Var part = unreduce(g, g.grad(k)) * hit / op("sum", {hit, lua_dims(reduced(g)), true});
    sum = k ? sum + part : part;
  }
  g.set(0, sum);
}

// max / min over everything (PyTorch's evenly_distribute_backward): split evenly between the
// elements equal to the result, or between the NaNs when it is NaN; the others get 0
void distribute_rule(Grad& g) {
  Var x = g.in(0), y = g.out(0);
  Var nan = op("logical_and", {op("isnan", {y}), op("isnan", {x})});
  Var hit = op("logical_or", {op("eq", {x, y}), nan});
  g.set(0, where(hit, g.grad() / op("sum", {hit}), 0.0));
}

// max / min along a dim (values, indices): the gradient goes to the index chosen
void select_index_rule(Grad& g) {
  if (!g.arg().has(1)) return distribute_rule(g);
  if (g.ndim(0) == 0) return g.set(0, reshape(g.grad(), {}));  // the one element is the extreme
  const int d = g.arg().dim(1, g.ndim(0));
  const Shape& s = g.sizes(0);
  Shape pos(s.size(), 1);
  pos[size_t(d)] = s[size_t(d)];
  const std::string dev = device_name(g.meta(0).device);
  Var at = reshape(op("arange", {1.0, double(s[size_t(d)] + 1), nullptr, nullptr, dev.c_str()}), pos);
  Var hit = op("eq", {at, keep(g, g.out(1))});
  g.set(0, where(hit, keep(g, g.grad()), 0.0));
}

double correction(const Grad& g) {
  if (g.arg().has(3)) return g.arg().number(3);
  return g.arg().boolean_or(4, true) ? 1 : 0;
}
// var: 2 (x - mean) / (N - correction); std: the same over 2 std
Var var_slope(const Grad& g) {
  Var x = g.in(0);
  Var centered = x - op("mean", {x, lua_dims(reduced(g)), true});
  return centered * (2.0 / (double(reduced_count(g)) - correction(g)));
}
void var_rule(Grad& g) { g.set(0, unreduce(g, g.grad()) * var_slope(g)); }
// (0 where the std is 0, as PyTorch's std_backward, rather than 0 / 0)
void std_rule(Grad& g) {
  Var half = where(op("eq", {g.out(0), 0.0}), 0.0, g.grad() / (g.out(0) * 2.0));
  g.set(0, unreduce(g, half) * var_slope(g));
}

// norm: p = 2 (default) x / norm (0 where the norm is 0), else sign(x) |x|^(p-1) / norm^(p-1)
void norm_rule(Grad& g) {
  const double p = g.arg().number_or(3, 2);
  Var x = g.in(0), n = unreduce(g, g.out(0)), gr = unreduce(g, g.grad());
  if (p == 0) return g.set(0, zeros_like(x));
  if (p == 1) return g.set(0, gr * op("sign", {x}));
  if (std::isinf(p)) {  // split evenly between the elements of largest (smallest) magnitude
    Var hit = op("eq", {op("abs", {x}), n});
    return g.set(0, gr * op("sign", {x}) * hit / op("sum", {hit, lua_dims(reduced(g)), true}));
  }
  Var slope = p == 2 ? x / n : op("sign", {x}) * op("pow", {op("abs", {x}), p - 1}) / op("pow", {n, p - 1});
  if (p < 1) slope = where(op("eq", {x, 0.0}), 0.0, slope);  // (|x|^(p-1) is inf at 0: PyTorch masks it to 0)
  g.set(0, gr * where(op("eq", {n, 0.0}), 0.0, slope));
}

void logsumexp_rule(Grad& g) { g.set(0, unreduce(g, g.grad()) * op("exp", {g.in(0) - unreduce(g, g.out(0))})); }

void softmax_rule(Grad& g) {
  const int64_t d = g.arg().integer(1);
  Var y = g.out(0), gy = g.grad() * y;
  g.set(0, gy - y * op("sum", {gy, d, true}));
}
void log_softmax_rule(Grad& g) {
  const int64_t d = g.arg().integer(1);
  g.set(0, g.grad() - op("exp", {g.out(0)}) * op("sum", {g.grad(), d, true}));
}
// cumsum: the reversed cumulative sum of the gradient, total - cumsum + g
void cumsum_rule(Grad& g) {
  const int64_t d = g.arg().integer(1);
  Var gr = g.grad();
  g.set(0, op("sum", {gr, d, true}) - op("cumsum", {gr, d}) + gr);
}

}  // namespace

void register_reduction_derivatives(Registry& r) {
  derivative(r, "sum", {.fn = sum_rule});
  derivative(r, "mean", {.fn = mean_rule});
  derivative(r, "prod", {.fn = prod_rule, .saves_inputs = kIn0});
  for (const char* n : {"amax", "amin"}) derivative(r, n, {.fn = even_rule, .saves_inputs = kIn0, .saves_outputs = kOut0});
  derivative(r, "aminmax", {.fn = low_high_rule, .saves_inputs = kIn0, .saves_outputs = 3});
  for (const char* n : {"max", "min"})
    derivative(r, n, {.fn = select_index_rule, .saves_inputs = kIn0, .saves_outputs = 3, .given = 1, .given_outputs = 2});
  derivative(r, "var", {.fn = var_rule, .saves_inputs = kIn0});
  derivative(r, "std", {.fn = std_rule, .saves_inputs = kIn0, .saves_outputs = kOut0});
  derivative(r, "norm", {.fn = norm_rule, .saves_inputs = kIn0, .saves_outputs = kOut0});
  derivative(r, "logsumexp", {.fn = logsumexp_rule, .saves_inputs = kIn0, .saves_outputs = kOut0});
  derivative(r, "softmax", {.fn = softmax_rule, .saves_outputs = kOut0});
  derivative(r, "log_softmax", {.fn = log_softmax_rule, .saves_outputs = kOut0});
  derivative(r, "cumsum", {.fn = cumsum_rule});
  for (const char* n : {"argmax", "argmin", "all", "any"}) derivative(r, n, {.not_differentiable = true});
}

}  // namespace cr
