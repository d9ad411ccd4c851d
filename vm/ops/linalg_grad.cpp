// Derivatives of matmul / mm / bmm / linear / tril / triu (vm/ops/linalg.cpp) and of the
// indexing ops (vm/ops/indexing.cpp), whose scatter-add backward is a one-hot product here.
#include <algorithm>

#include "vm/autograd/grad.hpp"
#include "vm/ops/derivatives.hpp"

namespace cr {
namespace {
using namespace autograd;

constexpr uint32_t kIn0 = 1, kIn1 = 2, kIn2 = 4;

Var mt(const Var& x) { return op("transpose", {x, -1, -2}); }  // the last two dims swapped
Var mm(const Var& a, const Var& b) { return op("matmul", {a, b}); }

void mm_rule(Grad& g) {
  if (g.needs(0)) g.set(0, mm(g.grad(), mt(g.in(1))));
  if (g.needs(1)) g.set(1, mm(mt(g.in(0)), g.grad()));
}

// matmul with PyTorch's 1-D rules: a vector operand is a matrix of one row (left) or one column
// (right) whose extra dim the result drops; batch broadcasting is undone by sum_to.
void matmul_rule(Grad& g) {
  Var a = g.in(0), b = g.in(1), gr = g.grad();
  const bool va = g.ndim(0) == 1, vb = g.ndim(1) == 1;
  if (va) a = unsqueeze(a, 0);
  if (vb) b = unsqueeze(b, 1);
  Shape gs = gr.tensor().sizes();
  if (va) gs.insert(gs.end() - (vb ? 0 : 1), 1);
  if (vb) gs.push_back(1);
  gr = reshape(gr, gs);
  if (g.needs(0)) g.set(0, reshape(sum_to(mm(gr, mt(b)), a.tensor().sizes()), g.sizes(0)));
  if (g.needs(1)) g.set(1, reshape(sum_to(mm(mt(a), gr), b.tensor().sizes()), g.sizes(1)));
}

// linear: y = x w^T + b, over any batch dims of x
void linear_rule(Grad& g) {
  Var gr = g.grad();
  if (g.needs(0)) g.set(0, mm(gr, g.in(1)));
  if (g.needs(1)) {
    const Shape& xs = g.sizes(0);
    const int64_t in = xs.empty() ? 1 : xs.back(), out = g.sizes(1)[0];
    const int64_t rows = in ? shape_numel(xs) / in : 0;
    g.set(1, mm(mt(reshape(gr, {rows, out})), reshape(g.in(0), {rows, in})));
  }
  if (g.is_tensor(2) && g.needs(2)) g.set(2, gr);
}

template <const char* Name> void tri_rule(Grad& g) {
  g.set(0, g.arg().has(1) ? op(Name, {g.grad(), g.arg().integer(1)}) : op(Name, {g.grad()}));
}
constexpr char kTril[] = "tril", kTriu[] = "triu";

// A one-hot of 1-based indices idx over n positions, along a new last dim, as dtype.
Var one_hot(const Var& idx, int64_t n, const Meta& like) {
  const std::string dev = device_name(like.device);
  Var at = op("arange", {1.0, double(n + 1), nullptr, nullptr, dev.c_str()});
  return to_dtype(op("eq", {unsqueeze(idx, int(idx.tensor().dim())), at}), like.dtype);
}

// embedding: weight row v gets the sum of the gradient rows whose index is v
void embedding_rule(Grad& g) {
  const Shape& ws = g.sizes(1);
  Var idx = g.in(0);
  const int64_t n = shape_numel(idx.tensor().sizes());
  Var hot = reshape(one_hot(idx, ws[0], g.meta(1)), {n, ws[0]});
  g.set(1, mm(mt(hot), reshape(g.grad(), {n, ws[1]})));
}

// index_select along d: gradient dim d (K picks) times the K x n one-hot
void index_select_rule(Grad& g) {
  const int d = g.arg().dim(1, g.ndim(0));
  const int64_t n = g.ndim(0) ? g.sizes(0)[size_t(d)] : 1;
  Var hot = one_hot(reshape(g.in(2), {-1}), n, g.meta(0));
  Var gt = op("transpose", {g.grad(), d + 1, -1});
  g.set(0, reshape(op("transpose", {mm(gt, hot), d + 1, -1}), g.sizes(0)));
}

// gather along d (also sort / topk values): each gradient element goes to the position its index
// names, through a one-hot over a new dim after d, summed over d
void scatter_back(Grad& g, const Var& index, int d) {
  const int64_t n = g.ndim(0) ? g.sizes(0)[size_t(d)] : 1;
  Var idx = g.ndim(0) ? op("transpose", {index, d + 1, -1}) : reshape(index, {1});
  Var gr = g.ndim(0) ? op("transpose", {g.grad(), d + 1, -1}) : reshape(g.grad(), {1});
  Var hot = one_hot(idx, n, g.meta(0));                   // [..., K, n]
  Var summed = sum(hot * unsqueeze(gr, int(gr.tensor().dim())), {int(gr.tensor().dim()) - 1}, false);  // [..., n]
  g.set(0, g.ndim(0) ? op("transpose", {summed, d + 1, -1}) : reshape(summed, {}));
}
void gather_rule(Grad& g) { scatter_back(g, g.in(2), g.arg().dim(1, g.ndim(0))); }
// sort(self, dim) / topk(self, k, dim): the values' gradient goes back to where they came from
template <int DimArg> void sorted_rule(Grad& g) {
  const int d = g.arg().has(DimArg) ? g.arg().dim(DimArg, g.ndim(0)) : std::max(g.ndim(0) - 1, 0);
  scatter_back(g, g.out(1), d);
}

void masked_fill_rule(Grad& g) {
  Var m = g.in(1);
  if (g.needs(0)) g.set(0, where(m, 0.0, g.grad()));
  if (g.is_tensor(2) && g.needs(2)) g.set(2, op("sum", {where(m, g.grad(), 0.0)}));
}

}  // namespace

void register_linalg_derivatives(Registry& r) {
  derivative(r, "mm", {.fn = mm_rule, .saves_inputs = kIn0 | kIn1});
  derivative(r, "bmm", {.fn = mm_rule, .saves_inputs = kIn0 | kIn1});
  derivative(r, "matmul", {.fn = matmul_rule, .saves_inputs = kIn0 | kIn1});
  derivative(r, "linear", {.fn = linear_rule, .saves_inputs = kIn0 | kIn1});
  derivative(r, "tril", {.fn = tri_rule<kTril>});
  derivative(r, "triu", {.fn = tri_rule<kTriu>});
  derivative(r, "embedding", {.fn = embedding_rule, .saves_inputs = kIn0, .nondiff = kIn0});
  derivative(r, "index_select", {.fn = index_select_rule, .saves_inputs = kIn2, .nondiff = kIn2});
  derivative(r, "gather", {.fn = gather_rule, .saves_inputs = kIn2, .nondiff = kIn2});
  derivative(r, "sort", {.fn = sorted_rule<1>, .saves_outputs = 2});
  derivative(r, "topk", {.fn = sorted_rule<2>, .saves_outputs = 2});
  derivative(r, "masked_fill", {.fn = masked_fill_rule, .saves_inputs = kIn1, .nondiff = kIn1});
  derivative(r, "masked_fill_", {.fn = masked_fill_rule, .saves_inputs = kIn1, .nondiff = kIn1});
}

}  // namespace cr
