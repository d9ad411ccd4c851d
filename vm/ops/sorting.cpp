// Ops that order the values along one dim: topk and sort. Each returns values and 1-based
// indices (API.md section 1). NaN counts as larger than every number, as in PyTorch (sort puts
// it last ascending, first descending; topk takes it first); equal values keep their order of
// position, so results are deterministic.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/radix_sort.hpp"
#include "vm/devices.hpp"
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

// `ahead(a, b)`: a comes before b in the wanted order (the index breaks ties).
template <class C> struct Order {
  bool descending;
  bool ahead(C a, int64_t ia, C b, int64_t ib) const {
    const bool na = is_nan(a), nb = is_nan(b);
    if (na || nb) {
      if (na && nb) return ia < ib;
      return descending ? na : nb;
    }
    if (a != b) return descending ? a > b : a < b;
    return ia < ib;
  }
  template <class V> static bool is_nan(V v) {
    if constexpr (std::is_floating_point_v<V>) return std::isnan(v);
    else return false;
  }
};

// Sorts (or, k < size, partially sorts) a line's (value, position) pairs in `ord`. The pairs are
// contiguous: the comparisons read no strided values. A long line is sorted in chunks over the
// pool and merged (the position breaks ties: the order is total, any split gives the same result).
template <class C> void sort_line(std::vector<std::pair<C, int64_t>>& line, int64_t k, const Order<C>& ord, bool split) {
  auto before = [&](const std::pair<C, int64_t>& a, const std::pair<C, int64_t>& b) {
    return ord.ahead(a.first, a.second, b.first, b.second);
  };
  const int64_t n = int64_t(line.size());
  if (k < n) return std::partial_sort(line.begin(), line.begin() + k, line.end(), before);
  const int64_t parts = split ? std::min<int64_t>(num_threads(), n / kParallelGrain) : 1;
  if (parts < 2) return std::sort(line.begin(), line.end(), before);
  auto edge = [&](int64_t p) { return line.begin() + n * p / parts; };
  parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) std::sort(edge(p), edge(p + 1), before);
  });
  for (int64_t p = 1; p < parts; ++p) std::inplace_merge(edge(0), edge(p), edge(p + 1), before);
}

// Whole sorts of lines this long take the radix sort (equal results: both orders are stable).
constexpr int64_t kRadixFrom = 2048;

// The first k positions of every line of x in `order`, written as values and indices.
void order_lines(const Tensor& xin, int d, int64_t k, bool descending, const Tensor& vals, const Tensor& idx) {
  Tensor x = contiguous(xin);
  const Along l = along(x, d);
  if (x.numel() == 0 || k == 0) return;
  int64_t* ip = idx.data<int64_t>();
  visit(x.dtype(), [&](auto t) {
    using T = decltype(t);
    using C = compute_t<T>;
    const T* xp = x.data<T>();
    T* vp = vals.data<T>();
    const Order<C> ord{descending};
    const int64_t lines = l.outer * l.inner;
    parallel_for(lines, std::max<int64_t>(1, kParallelGrain / (l.n * 8)), [&](int64_t r0, int64_t r1) {
      std::vector<std::pair<C, int64_t>> line;
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t o = r / l.inner, j = r % l.inner;
        const T* src = xp + o * l.n * l.inner + j;
        const int64_t parts = lines == 1 ? std::clamp<int64_t>(l.n / kParallelGrain, 1, num_threads()) : 1;
        if (k == l.n && l.n >= kRadixFrom &&
            radix_sort_line(src, l.inner, l.n, descending, vp + o * k * l.inner + j, l.inner, ip + o * k * l.inner + j, l.inner, parts))
          continue;
        line.resize(size_t(l.n));
        for (int64_t i = 0; i < l.n; ++i) line[size_t(i)] = {C(load(src[i * l.inner])), i};
        sort_line(line, k, ord, lines == 1);
        const int64_t base = o * k * l.inner + j;
        for (int64_t i = 0; i < k; ++i) {
          store(vp[base + i * l.inner], line[size_t(i)].first);
          ip[base + i * l.inner] = line[size_t(i)].second + 1;
        }
      }
    });
  });
}

// On a CUDA device: the library's sort kernels (vm/kernels/cuda/library.hpp), or, for a whole sort of a
// line too long for them, the op on host copies.
void order_on_device(OpCall& c, const Tensor& xin, int d, int64_t k, bool descending) {
  Tensor x = contiguous(xin);
  const Along l = along(x, d);
  if (cuda::order_lines(c.ctx, x, l.outer, l.n, l.inner, k, descending, c.outs[0], c.outs[1])) return;
  std::vector<Tensor> r = run_on_host(c.ctx, c.def, c.args, c.nargs);
  for (size_t i = 0; i < r.size(); ++i) copy_into(c.outs[i], r[i]);
}

// The dim an op orders along (checked: a 0-d tensor is one line of one element, dim 1 or -1).
int order_dim(const OpCall& c, int i, const Tensor& x) { return c.dim(i, x.dim()); }
int64_t line_length(const Tensor& x, int d) { return x.dim() == 0 ? 1 : x.size(d); }

// topk(x, k[, dim = -1[, largest = true[, sorted = true]]]): the results are always sorted
// (PyTorch allows any order when sorted = false; sorted is one valid order).
std::vector<Meta> infer_topk(OpCall& c) {
  Tensor x = c.tensor(0);
  const int d = c.has(2) ? order_dim(c, 2, x) : std::max(0, x.dim() - 1);
  const int64_t k = c.integer(1), n = line_length(x, d);
  if (k < 0 || k > n)
    fail(cat("k expected a number in [0, ", n, "] (the size of dim ", d + 1, " of ", x.describe(), "), got ", k));
  Shape s = x.sizes();
  if (x.dim() > 0) s[size_t(d)] = k;
  return {{s, x.dtype(), x.device()}, {s, DType::i64, x.device()}};
}
void run_topk(OpCall& c) {
  Tensor x = c.tensor(0);
  const int d = c.has(2) ? order_dim(c, 2, x) : std::max(0, x.dim() - 1);
  c.boolean_or(4, true);  // validated: every result is sorted
  const int64_t k = x.dim() == 0 ? 1 : c.integer(1);  // (a 0-d result holds x whatever k, as PyTorch's)
  if (!x.device().is_cpu()) return order_on_device(c, x, d, k, c.boolean_or(3, true));
  order_lines(x, d, k, c.boolean_or(3, true), c.outs[0], c.outs[1]);
}

// sort(x[, dim = -1[, descending = false]]) -> values, indices
std::vector<Meta> infer_sort(OpCall& c) {
  Tensor x = c.tensor(0);
  if (c.has(1)) order_dim(c, 1, x);
  c.boolean_or(2, false);
  return {{x.sizes(), x.dtype(), x.device()}, {x.sizes(), DType::i64, x.device()}};
}
void run_sort(OpCall& c) {
  Tensor x = c.tensor(0);
  const int d = c.has(1) ? order_dim(c, 1, x) : std::max(0, x.dim() - 1);
  if (!x.device().is_cpu()) return order_on_device(c, x, d, line_length(x, d), c.boolean_or(2, false));
  order_lines(x, d, line_length(x, d), c.boolean_or(2, false), c.outs[0], c.outs[1]);
}

}  // namespace

void register_sorting(Registry& r) {
  r.add(OpDef{"topk", "self:T, k:I, dim:D?, largest:B?, sorted:B?", OpKind::Other, kMultiOut | kDeviceAware | kExtern, infer_topk, run_topk});
  r.add(OpDef{"sort", "self:T, dim:D?, descending:B?", OpKind::Other, kMultiOut | kDeviceAware | kExtern, infer_sort, run_sort});
}

}  // namespace cr
