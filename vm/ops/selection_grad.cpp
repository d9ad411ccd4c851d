// Derivatives of the selection ops (vm/ops/selection.cpp): a selection's gradient is an
// accumulating index_put of the output's gradient into zeros of the input's shape; index_put's
// values get the gradient at the positions they were written to.
#include "vm/autograd/grad.hpp"
#include "vm/kernels/loop.hpp"
#include "vm/ops/derivatives.hpp"

namespace cr {
namespace {
using namespace autograd;

constexpr uint32_t kIn1 = 2;

std::vector<Var> saved_list(const Grad& g, int i) {
  std::vector<Var> r;
  for (int k = 0; k < g.count(i); ++k) r.push_back(g.in(i, k));
  return r;
}

Var zeros_of(const Grad& g, int i) { return zeros(g.sizes(i), g.meta(i).dtype, g.meta(i).device); }

void index_rule(Grad& g) {
  g.set(0, op("index_put", {zeros_of(g, 0), saved_list(g, 1), to_dtype(g.grad(), g.meta(0).dtype), true}));
}

// index_put(self, indices, values, accumulate): self's gradient passes except where values were
// written over; values get what the positions they went to received (summed where broadcast)
void index_put_rule(Grad& g) {
  const std::vector<Var> idx = saved_list(g, 1);
  const bool acc = g.arg().boolean_or(3, false);
  if (g.needs(0)) {
    const Meta& m = g.meta(0);
    g.set(0, acc ? g.grad() : op("index_put", {g.grad(), idx, zeros({}, m.dtype, m.device), false}));
  }
  if (g.needs(2)) g.set(2, op("index", {g.grad(), idx}));
}

// masked_select(self, mask): the gradient goes back to the positions the mask selected
void masked_select_rule(Grad& g) {
  const Shape shape = broadcast_shapes(g.sizes(0), g.sizes(1));
  Var full = zeros(shape, g.meta(0).dtype, g.meta(0).device);
  Var mask = expand(g.in(1), shape);
  Var nz = op("nonzero", {mask});
  std::vector<Var> cols;
  for (size_t d = 0; d < shape.size(); ++d) cols.push_back(op("select", {nz, 2, int64_t(d) + 1}));
  if (cols.empty()) return g.set(0, sum_to(g.grad(), {}));
  g.set(0, op("index_put", {full, cols, to_dtype(g.grad(), g.meta(0).dtype), true}));
}

}  // namespace

void register_selection_derivatives(Registry& r) {
  derivative(r, "index", {.fn = index_rule, .saves_inputs = kIn1, .nondiff = kIn1});
  for (const char* n : {"index_put", "index_put_"})
    derivative(r, n, {.fn = index_put_rule, .saves_inputs = kIn1, .nondiff = kIn1});
  derivative(r, "masked_select", {.fn = masked_select_rule, .saves_inputs = kIn1, .nondiff = kIn1});
  derivative(r, "nonzero", {.not_differentiable = true});
}

}  // namespace cr
