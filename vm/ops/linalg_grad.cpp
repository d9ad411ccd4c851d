// Derivatives of matmul / mm / bmm / linear / tril / triu (vm/ops/linalg.cpp).
#include "vm/autograd/grad.hpp"
#include "vm/ops/derivatives.hpp"

namespace cr {
namespace {
using namespace autograd;

constexpr uint32_t kIn0 = 1, kIn1 = 2;

Var mt(const Var& x) { return op("transpose", {x, -1, -2}); }  // the last two dims swapped
Var mm(const Var& a, const Var& b) { return op("matmul", {a, b}); }

void mm_rule(Grad& g) {
  if (g.needs(0)) g.set(0, mm(g.grad(), mt(g.in(1))));
  if (g.needs(1)) g.set(1, mm(mt(g.in(0)), g.grad()));
}

// matmul with PyTorch's 1-D rules: a vector operand is a matrix of one row (left) or one column
// (right) whose extra dim the result drops; batch broadcasting is undone by sum_to.
// Each operand is read only for the other's gradient (saved_for_others).
void matmul_rule(Grad& g) {
  Var gr = g.grad();
  const bool va = g.ndim(0) == 1, vb = g.ndim(1) == 1;
  Shape as = g.sizes(0), bs = g.sizes(1);
  if (va) as.insert(as.begin(), 1);
  if (vb) bs.push_back(1);
  Shape gs = gr.tensor().sizes();
  if (va) gs.insert(gs.end() - (vb ? 0 : 1), 1);
  if (vb) gs.push_back(1);
  gr = reshape(gr, gs);
  if (g.needs(0)) g.set(0, reshape(sum_to(mm(gr, mt(vb ? unsqueeze(g.in(1), 1) : g.in(1))), as), g.sizes(0)));
  if (g.needs(1)) g.set(1, reshape(sum_to(mm(mt(va ? unsqueeze(g.in(0), 0) : g.in(0)), gr), bs), g.sizes(1)));
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

}  // namespace

void register_linalg_derivatives(Registry& r) {
  // (each operand serves the other's gradient: kept only when that one requires grad)
  constexpr uint32_t kBoth = kIn0 | kIn1;
  derivative(r, "mm", {.fn = mm_rule, .saves_inputs = kBoth, .saved_for_others = kBoth});
  derivative(r, "bmm", {.fn = mm_rule, .saves_inputs = kBoth, .saved_for_others = kBoth});
  derivative(r, "matmul", {.fn = matmul_rule, .saves_inputs = kBoth, .saved_for_others = kBoth});
  derivative(r, "linear", {.fn = linear_rule, .saves_inputs = kBoth, .saved_for_others = kBoth});
  derivative(r, "tril", {.fn = tri_rule<kTril>});
  derivative(r, "triu", {.fn = tri_rule<kTriu>});
}

}  // namespace cr
