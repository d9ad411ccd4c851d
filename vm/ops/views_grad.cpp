// Derivatives of the views (vm/ops/views.cpp) and conversions (vm/ops/conversions.cpp): a view's
// gradient is the gradient laid back into the input's shape.
#include <algorithm>

#include "vm/autograd/call.hpp"
#include "vm/autograd/grad.hpp"
#include "vm/ops/derivatives.hpp"

namespace cr {
namespace {
using namespace autograd;

void reshape_back(Grad& g) { g.set(0, reshape(g.grad(), g.sizes(0))); }
void pass(Grad& g) {
  if (g.needs(0)) g.set(0, g.grad());
}

void permute_rule(Grad& g) {
  std::vector<int64_t> dims = g.arg().ints(1), inverse(dims.size());
  const int n = g.ndim(0);
  for (size_t i = 0; i < dims.size(); ++i) inverse[size_t(normalize_dim(dims[i], n))] = int64_t(i) + 1;
  g.set(0, op("permute", {g.grad(), inverse}));
}
void transpose_rule(Grad& g) { g.set(0, op("transpose", {g.grad(), g.arg().integer(1), g.arg().integer(2)})); }
void t_rule(Grad& g) { g.set(0, op("t", {g.grad()})); }

// The gradient of a window [start, start + len) of dim d (0-based): zeros around it.
Var pad_dim(const Var& gr, const Shape& full, int d, int64_t start, int64_t len) {
  std::vector<Var> parts;
  const Meta m{gr.tensor().sizes(), gr.tensor().dtype(), gr.tensor().device()};
  auto zeros_of = [&](int64_t n) {
    Shape s = full;
    s[size_t(d)] = n;
    return zeros(s, m.dtype, m.device);
  };
  if (start > 0) parts.push_back(zeros_of(start));
  parts.push_back(gr);
  if (full[size_t(d)] - start - len > 0) parts.push_back(zeros_of(full[size_t(d)] - start - len));
  return parts.size() == 1 ? gr : op("cat", {parts, d + 1});
}

void narrow_rule(Grad& g) {
  const int d = g.arg().dim(1, g.ndim(0));
  const int64_t size = g.sizes(0)[size_t(d)];
  int64_t start = g.arg().integer(2);
  start = start > 0 ? start - 1 : start + size;  // 1-based or from the end
  g.set(0, pad_dim(g.grad(), g.sizes(0), d, start, g.arg().integer(3)));
}

void select_rule(Grad& g) {
  const int d = g.arg().dim(1, g.ndim(0));
  const int64_t size = g.sizes(0)[size_t(d)];
  int64_t i = g.arg().integer(2);
  i = i > 0 ? i - 1 : i + size;
  g.set(0, pad_dim(unsqueeze(g.grad(), d), g.sizes(0), d, i, 1));
}

// slice (any step) and the views without a closed form: the gradient written through the same
// view of a zero tensor of the input's shape
void through_view(Grad& g) {
  const Meta& m = g.meta(0);
  Var z = zeros(m.sizes, m.dtype, m.device);
  const OpCall& a = g.arg();
  std::vector<Tensor> v;
  cr_value args[8];
  for (int i = 0; i < a.nargs && i < 8; ++i) args[i] = a.args[i];
  args[0].ptr = z.tensor().get();
  call(current_context(), g.node().op, args, a.nargs, v);
  call_op("copy_", {v.at(0), g.grad()});
  g.set(0, z);
}

// ---- as_strided: PyTorch's as_strided_backward -------------------------------------------------

// The storage elements a layout needs from its offset on (PyTorch's _min_storage_size).
int64_t min_storage(const Shape& sizes, const Shape& strides, int64_t offset) {
  int64_t n = offset + 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return offset;
    n += (sizes[i] - 1) * strides[i];
  }
  return n;
}

// size-1 dims dropped (and, for the output, stride-0 dims summed out of the gradient)
struct Layout {
  Shape sizes, strides;
};

// The gradient scattered into a zero storage through the output's layout (summed where that
// layout overlaps itself), divided by how often the input's layout reads each element, and read
// back through the input's layout.
void as_strided_rule(Grad& g) {
  const Geometry& in = g.node().geometry;
  const Meta& m = g.meta(0);
  const Shape sizes = g.arg().ints(1), strides = g.arg().ints(2);
  const int64_t offset = g.arg().integer_or(3, in.offset);
  auto zero = [&] { g.set(0, zeros(m.sizes, m.dtype, m.device)); };
  Var grad = g.grad();
  Layout o, i;
  for (int d = int(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[size_t(d)] == 0) return zero();
    if (sizes[size_t(d)] == 1) {
      grad = op("squeeze", {grad, d + 1});
    } else if (strides[size_t(d)] == 0) {
      grad = sum(grad, {d}, false);
    } else {
      o.sizes.insert(o.sizes.begin(), sizes[size_t(d)]);
      o.strides.insert(o.strides.begin(), strides[size_t(d)]);
    }
  }
  for (size_t d = 0; d < in.sizes.size(); ++d) {
    if (in.sizes[d] == 0) return zero();
    if (in.sizes[d] == 1) continue;
    i.sizes.push_back(in.sizes[d]);
    i.strides.push_back(in.strides[d]);
  }
  const bool out_overlap = maybe_overlapping(o.sizes, o.strides), in_overlap = maybe_overlapping(i.sizes, i.strides);
  const int64_t shared = std::min(in.offset, offset), in_at = in.offset - shared, out_at = offset - shared;
  const int64_t n = std::max(min_storage(i.sizes, i.strides, in_at), min_storage(o.sizes, o.strides, out_at));
  const std::string dev = device_name(m.device);
  Var storage = zeros({n}, m.dtype, m.device), positions;
  if (in_overlap || out_overlap) positions = op("arange", {int64_t(1), n + 1, nullptr, nullptr, dev.c_str()});
  auto at = [&](const Layout& l, int64_t off) {
    return reshape(op("as_strided", {positions, l.sizes, l.strides, off}), {-1});
  };
  if (out_overlap) storage = op("index_add", {storage, 1, at(o, out_at), reshape(grad, {-1})});
  else call_op("copy_", {op("as_strided", {storage, o.sizes, o.strides, out_at}), grad});
  if (in_overlap) {
    Var where = at(i, in_at);
    Var ones = op("ones", {Shape{where.tensor().numel()}, dtype_name(m.dtype), dev.c_str()});
    storage = storage / op("index_add", {zeros({n}, m.dtype, m.device), 1, where, ones});
  }
  g.set(0, op("as_strided", {storage, in.sizes, in.strides, in_at}));
}

// (a 1-D empty input beside inputs of another rank is skipped by cat, as PyTorch's: zeros)
void cat_rule(Grad& g) {
  const int n = g.count(0), rank = int(g.out_meta().sizes.size());
  const int d = normalize_dim(g.arg().integer_or(1, 1), rank);
  int64_t at = 1;
  for (int k = 0; k < n; ++k) {
    if (int(g.sizes(0, k).size()) != rank) {
      if (g.needs(0, k)) g.set(0, k, zeros(g.sizes(0, k), g.meta(0, k).dtype, g.meta(0, k).device));
      continue;
    }
    const int64_t len = g.sizes(0, k)[size_t(d)];
    if (g.needs(0, k)) g.set(0, k, op("narrow", {g.grad(), d + 1, at, len}));
    at += len;
  }
}
void stack_rule(Grad& g) {
  const int n = g.count(0);
  const int d = normalize_dim(g.arg().integer_or(1, 1), int(g.sizes(0, 0).size()) + 1);
  for (int k = 0; k < n; ++k)
    if (g.needs(0, k)) g.set(0, k, op("select", {g.grad(), d + 1, k + 1}));
}
// split / chunk: the outputs' gradients joined again (zeros for those without)
void join_outputs(Grad& g) {
  std::vector<Var> parts;
  for (size_t k = 0; k < g.node().outs.size(); ++k) parts.push_back(g.grad(int(k)));
  const int d = g.arg().has(2) ? g.arg().dim(2, g.ndim(0)) : 0;
  g.set(0, op("cat", {parts, d + 1}));
}

void copy_rule(Grad& g) {
  if (g.needs(1)) g.set(1, g.grad());
}
void fill_rule(Grad& g) {
  if (g.needs(1)) g.set(1, op("sum", {g.grad()}));
}

}  // namespace

void register_view_derivatives(Registry& r) {
  for (const char* n : {"view", "reshape", "flatten", "squeeze", "unsqueeze"}) derivative(r, n, {.fn = reshape_back});
  for (const char* n : {"expand", "contiguous", "clone", "to", "float", "double", "half", "bfloat16", "cpu", "cuda"})
    derivative(r, n, {.fn = pass});
  derivative(r, "permute", {.fn = permute_rule});
  derivative(r, "transpose", {.fn = transpose_rule});
  derivative(r, "t", {.fn = t_rule});
  derivative(r, "narrow", {.fn = narrow_rule});
  derivative(r, "select", {.fn = select_rule});
  derivative(r, "slice", {.fn = through_view});
  derivative(r, "as_strided", {.fn = as_strided_rule, .saves_geometry = true});
  derivative(r, "cat", {.fn = cat_rule});
  derivative(r, "stack", {.fn = stack_rule});
  derivative(r, "split", {.fn = join_outputs});
  derivative(r, "chunk", {.fn = join_outputs});
  derivative(r, "copy_", {.fn = copy_rule});
  derivative(r, "fill_", {.fn = fill_rule});
  derivative(r, "zero_", {.fn = [](Grad&) {}});
  for (const char* n : {"int", "long", "bool", "detach"}) derivative(r, n, {.not_differentiable = true});
}

}  // namespace cr
