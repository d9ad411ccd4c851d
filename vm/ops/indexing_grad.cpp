// Derivatives of the indexing ops (vm/ops/indexing.cpp) and of sort / topk's values: a gather's
// gradient is a scatter-add of the output's gradient into zeros of the input's shape (index_add
// along one dim, scatter_add by a full index), O(N) memory as PyTorch's.
#include <algorithm>

#include "vm/autograd/call.hpp"
#include "vm/autograd/grad.hpp"
#include "vm/ops/derivatives.hpp"

namespace cr {
namespace {
using namespace autograd;

constexpr uint32_t kIn0 = 1, kIn1 = 2, kIn2 = 4;

Var zeros_of(const Grad& g, int i) { return zeros(g.sizes(i), g.meta(i).dtype, g.meta(i).device); }
// op (index_add_ / scatter_add_) of gr into zeros of input i's shape, in place: one tensor of
// the input's size, not two
void scatter_into_zeros(Grad& g, int i, const char* op, int d, const Var& index, const Var& gr) {
  Var z = zeros_of(g, i);
  call_op(op, {z, d + 1, index, to_dtype(gr, g.meta(i).dtype)});
  g.set(i, z);
}

// embedding: weight row v gets the sum of the gradient rows whose index is v (over the count of
// v in the input with scale_grad_by_freq); none for the padding row (padding_idx)
void embedding_rule(Grad& g) {
  const Shape& ws = g.sizes(1);
  const int64_t n = shape_numel(g.sizes(0));
  Var idx = reshape(g.in(0), {n});
  Var gr = reshape(g.grad(), {n, ws[1]});
  if (g.arg().has(2)) {
    const int64_t p = g.arg().integer(2);
    gr = where(unsqueeze(op("eq", {idx, double(p > 0 ? p : p + ws[0] + 1)}), 1), 0.0, gr);
  }
  if (g.arg().boolean_or(3, false)) {
    Var counts = zeros({ws[0]}, g.meta(1).dtype, g.meta(1).device);
    call_op("index_add_", {counts, 1, idx, zeros({n}, g.meta(1).dtype, g.meta(1).device) + 1.0});
    gr = gr / unsqueeze(op("index_select", {counts, 1, idx}), 1);
  }
  scatter_into_zeros(g, 1, "index_add_", 0, idx, gr);
}

void index_select_rule(Grad& g) {
  const int d = g.arg().dim(1, g.ndim(0));
  scatter_into_zeros(g, 0, "index_add_", d, g.in(2), g.grad());
}

// gather along d (also sort / topk values): each gradient element goes to where its index points
void scatter_back(Grad& g, const Var& index, int d) {
  scatter_into_zeros(g, 0, "scatter_add_", d, index, g.grad());
}
void gather_rule(Grad& g) { scatter_back(g, g.in(2), g.arg().dim(1, g.ndim(0))); }
// sort(self, dim) / topk(self, k, dim): the values' gradient goes back to where they came from
template <int DimArg> void sorted_rule(Grad& g) {
  const int d = g.arg().has(DimArg) ? g.arg().dim(DimArg, g.ndim(0)) : std::max(g.ndim(0) - 1, 0);
  scatter_back(g, g.out(1), d);
}

// index_add(self, dim, index, source, {alpha}): self's gradient passes, source's is the rows the
// index picks, times alpha
void index_add_rule(Grad& g) {
  if (g.needs(0)) g.set(0, g.grad());
  if (!g.needs(3)) return;
  const int d = g.arg().dim(1, g.ndim(0));
  const double alpha = g.arg().number_or(4, 1.0);
  Var picked = reshape(op("index_select", {g.grad(), d + 1, g.in(2)}), g.sizes(3));
  g.set(3, alpha == 1 ? picked : picked * alpha);
}

// scatter_add(self, dim, index, src): src's gradient is gathered; src elements the index does not
// cover (src larger than the index) get zeros
void scatter_add_rule(Grad& g) {
  if (g.needs(0)) g.set(0, g.grad());
  if (!g.needs(3)) return;
  g.set(3, widened(op("gather", {g.grad(), g.arg().dim(1, g.ndim(0)) + 1, g.in(2)}), g.sizes(3)));
}

void masked_fill_rule(Grad& g) {
  Var m = g.in(1);
  if (g.needs(0)) g.set(0, where(m, 0.0, g.grad()));
  if (g.is_tensor(2) && g.needs(2)) g.set(2, op("sum", {where(m, g.grad(), 0.0)}));
}

}  // namespace

void register_indexing_derivatives(Registry& r) {
  derivative(r, "embedding", {.fn = embedding_rule, .saves_inputs = kIn0, .nondiff = kIn0});
  derivative(r, "index_select", {.fn = index_select_rule, .saves_inputs = kIn2, .nondiff = kIn2});
  derivative(r, "gather", {.fn = gather_rule, .saves_inputs = kIn2, .nondiff = kIn2});
  derivative(r, "sort", {.fn = sorted_rule<1>, .saves_outputs = 2});
  derivative(r, "topk", {.fn = sorted_rule<2>, .saves_outputs = 2});
  for (const char* n : {"index_add", "index_add_"}) derivative(r, n, {.fn = index_add_rule, .saves_inputs = kIn2, .nondiff = kIn2});
  for (const char* n : {"scatter_add", "scatter_add_"})
    derivative(r, n, {.fn = scatter_add_rule, .saves_inputs = kIn2, .nondiff = kIn2});
  for (const char* n : {"masked_fill", "masked_fill_"})
    derivative(r, n, {.fn = masked_fill_rule, .saves_inputs = kIn1, .nondiff = kIn1});
}

}  // namespace cr
