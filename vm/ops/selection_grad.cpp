// Derivatives of the selection ops (vm/ops/selection.cpp): a selection's gradient is an
// accumulating index_put of the output's gradient into zeros of the input's shape; index_put's
// values get the gradient at the positions they were written to.
#include <functional>

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

// masked_select(self, mask): the gradient goes back to the positions the mask selected (each once:
// written, not accumulated, so that T.use_deterministic_algorithms takes it on CUDA)
void masked_select_rule(Grad& g) {
  const Shape shape = broadcast_shapes(g.sizes(0), g.sizes(1));
  Var full = zeros(shape, g.meta(0).dtype, g.meta(0).device);
  Var mask = expand(g.in(1), shape);
  Var nz = op("nonzero", {mask});
  std::vector<Var> cols;
  for (size_t d = 0; d < shape.size(); ++d) cols.push_back(op("select", {nz, 2, int64_t(d) + 1}));
  if (cols.empty()) return g.set(0, sum_to(g.grad(), {}));
  g.set(0, op("index_put", {full, cols, to_dtype(g.grad(), g.meta(0).dtype), false}));
}

// scatter_reduce's "prod" (PyTorch's formula): self's gradient is the product of the source
// values, taken as result / self with self's zeros as 1; a source value's is result / src, or
// where it is the only zero at its position, the product of the others (it taken as 1)
void scatter_prod_grads(Grad& g, int d, bool include_self, const Var& hit, const Var& src,
                        const std::function<Var(const Var&)>& scatter_sum) {
  const Var self = g.in(0), idx = g.in(2), gr = g.grad();
  auto prod = [&](const Var& s, const Var& v) { return op("scatter_reduce", {s, d + 1, idx, v, "prod", include_self}); };
  if (g.needs(0)) {
    const Var masked = where(op("eq", {self, 0.0}), 1.0, self);
    const Var gs = gr * prod(masked, src) / masked;
    g.set(0, include_self ? gs : where(hit, 0.0, gs));
  }
  if (!g.needs(3)) return;
  const Var zero = op("eq", {src, 0.0});
  const Var zeros_there = op("gather", {scatter_sum(to_dtype(zero, g.meta(0).dtype)), d + 1, idx});
  const Var single = op("logical_and", {zero, op("eq", {zeros_there, 1.0})});
  const Var others = op("gather", {gr * prod(self, where(single, 1.0, src)), d + 1, idx});
  const Var divided = op("gather", {gr * g.out(0), d + 1, idx}) / where(zero, 1.0, src);
  g.set(3, widened(where(single, others, divided), g.sizes(3)));
}

// scatter_reduce(self, dim, index, src, reduce, {include_self}): sum, mean, prod, amax / amin
// (the gradient split evenly between the values equal to the result, as PyTorch's); n counts
// the source values each position took. Only src's leading block of the index's sizes is read.
void scatter_reduce_rule(Grad& g) {
  const std::string reduce = g.arg().str(4);
  const bool include_self = g.arg().boolean_or(5, true);
  const int d = g.arg().dim(1, g.ndim(0));
  const Meta& m = g.meta(0);
  const Var idx = g.in(2), src = leading(g.in(3), g.sizes(2));
  const std::function<Var(const Var&)> scatter_sum = [&](const Var& v) {
    return op("scatter_add", {zeros(m.sizes, m.dtype, m.device), d + 1, idx, v});
  };
  Var n = scatter_sum(op("ones_like", {src}));
  Var hit = op("gt", {n, 0.0});
  if (reduce == "prod") return scatter_prod_grads(g, d, include_self, hit, src, scatter_sum);
  Var gr = g.grad();
  if (reduce == "sum" || reduce == "mean") {
    if (reduce == "mean") gr = gr / op("clamp", {include_self ? n + 1.0 : n, 1.0, nullptr});
    if (g.needs(0)) g.set(0, include_self ? gr : where(hit, 0.0, gr));
    if (g.needs(3)) g.set(3, widened(op("gather", {gr, d + 1, idx}), g.sizes(3)));
    return;
  }
  const Var r = g.out(0);
  const Var self_wins = include_self ? op("eq", {g.in(0), r}) : op("logical_not", {hit});
  const Var src_wins = op("eq", {src, op("gather", {r, d + 1, idx})});
  Var count = scatter_sum(to_dtype(src_wins, m.dtype));
  if (include_self) count = count + to_dtype(self_wins, m.dtype);
  Var share = gr / op("clamp", {count, 1.0, nullptr});
  if (g.needs(0)) g.set(0, where(self_wins, include_self ? share : gr, 0.0));
  if (g.needs(3)) g.set(3, widened(where(src_wins, op("gather", {share, d + 1, idx}), 0.0), g.sizes(3)));
}

}  // namespace

void register_selection_derivatives(Registry& r) {
  derivative(r, "index", {.fn = index_rule, .saves_inputs = kIn1, .nondiff = kIn1});
  for (const char* n : {"index_put", "index_put_"})
    derivative(r, n, {.fn = index_put_rule, .saves_inputs = kIn1, .nondiff = kIn1});
  derivative(r, "masked_select", {.fn = masked_select_rule, .saves_inputs = kIn1, .nondiff = kIn1});
  derivative(r, "nonzero", {.not_differentiable = true});
  for (const char* n : {"bincount", "_value_counts", "_unique_counted"}) derivative(r, n, {.not_differentiable = true});
  derivative(r, "scatter_reduce", {.fn = scatter_reduce_rule, .saves_inputs = 1 | 4 | 8, .saves_outputs = 1, .nondiff = 4});
}

}  // namespace cr
