// Fused normalisation ops (PyTorch's native_layer_norm / native_layer_norm_backward):
//   _layer_norm(input, normalized_shape, weight?, bias?, eps = 1e-5) -> out, mean, rstd
//   _layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, output_mask?)
//     -> grad_input, grad_weight, grad_bias
// over the trailing dims normalized_shape names (rows of n = their product elements). mean and
// rstd keep the input's batch dims and size 1 in the normalised ones (they broadcast against the
// input), in float32 (float64 for float64 inputs): 16-bit inputs compute in float32 and round
// once. output_mask (three 0 / 1, default {1, weight given, weight given}) says which gradients
// are computed; one not asked for is an empty tensor of shape {0}.
// F.layer_norm (stdlib/functional.lua) calls _layer_norm in eager mode; a captured graph keeps
// the composition, which its code generators fuse with the neighbouring ops.
// CPU: a row per task, two-pass in the compute dtype (lane sums); grad_weight / grad_bias are
// column sums, over blocks of columns row by row, or for large inputs in the rows' pass by fixed
// blocks of rows (fused_rows); either way in an order that does not depend on the thread count.
// CUDA: vm/kernels/cuda/layer_norm.hpp.
#include <algorithm>
#include <cmath>

#include "vm/alloc.hpp"
#include "vm/kernels/cuda/layer_norm.hpp"
#include "vm/kernels/lanes.hpp"
#include "vm/ops/dense.hpp"
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

DType stats_dtype(DType d) { return d == DType::f64 ? DType::f64 : DType::f32; }

// The normalised trailing dims: k of them, matching x's last sizes; n their product.
struct Rows {
  int64_t rows = 1, n = 1;
  Shape normalized, stats;  // stats: x's sizes with 1 in the normalised dims
};
Rows rows_of(const OpCall& c, int shape_arg, const Tensor& x) {
  const std::vector<int64_t> s = c.ints(shape_arg);
  const int k = int(s.size()), r = x.dim();
  bool ok = k >= 1 && k <= r;
  for (int i = 0; ok && i < k; ++i) ok = x.size(r - k + i) == s[size_t(i)];
  if (!ok)
    fail(cat("normalized_shape ", shape_str(Shape(s.begin(), s.end())), " expected to be non-empty and to match the ",
             "last sizes of the input, got input ", x.describe()));
  Rows w;
  w.normalized.assign(s.begin(), s.end());
  w.stats = x.sizes();
  for (int d = 0; d < r; ++d) {
    if (d < r - k) w.rows *= x.size(d);
    else w.n *= x.size(d), w.stats[size_t(d)] = 1;
  }
  return w;
}

void check_same(const char* role, const Tensor& t, const Tensor& x, const Shape& sizes) {
  if (t.dtype() != x.dtype() || t.device() != x.device() || t.sizes() != sizes)
    fail(cat(role, " expected input's dtype ", dtype_name(x.dtype()), ", device ", device_name(x.device()), " and shape ",
             shape_str(sizes), ", got ", t.describe()));
}

void check_input(const Tensor& x) {
  if (!is_floating(x.dtype())) fail(cat("input ", dtype_list_error("a floating tensor", x.dtype())));
}

std::vector<Meta> infer_layer_norm(OpCall& c) {
  const Tensor x = c.tensor(0);
  check_input(x);
  const Rows w = rows_of(c, 1, x);
  if (c.has(2)) check_same("weight", c.tensor(2), x, w.normalized);
  if (c.has(3)) check_same("bias", c.tensor(3), x, w.normalized);
  if (c.has(4) && !std::isfinite(c.number(4))) fail(cat("eps expected a finite number, got ", c.number(4)));
  const DType sd = stats_dtype(x.dtype());
  return {{x.sizes(), x.dtype(), x.device()}, {w.stats, sd, x.device()}, {w.stats, sd, x.device()}};
}

// Σ over a row of n in lanes (vm/kernels/lanes.hpp: kSumLanes independent sums per block of
// lanes::kBlock, the blocks added in double), so the adds vectorise and the order is fixed.
template <class C, class T, class F> C row_mean(const T* x, int64_t n, F f) {
  return C(lanes::blocked_sum<C>(x, n, f) / double(n));
}

template <class T, class C>
void forward_rows(const T* x, const T* w, const T* b, T* y, C* mean, C* rstd, int64_t n, C eps, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    const C mu = row_mean<C>(xr, n, lanes::Identity{});
    const C rs = C(1) / std::sqrt(row_mean<C>(xr, n, [mu](C v) { return (v - mu) * (v - mu); }) + eps);
    if (w && b) {
      for (int64_t j = 0; j < n; ++j) store(yr[j], (load(xr[j]) - mu) * rs * load(w[j]) + load(b[j]));
    } else {
      for (int64_t j = 0; j < n; ++j) {
        C h = (load(xr[j]) - mu) * rs;
        if (w) h *= load(w[j]);
        if (b) h += load(b[j]);
        store(yr[j], h);
      }
    }
    mean[r] = mu, rstd[r] = rs;
  }
}

void run_layer_norm(OpCall& c) {
  const Tensor x = dense(c.tensor(0)), w = c.has(2) ? dense(c.tensor(2)) : Tensor(),
               b = c.has(3) ? dense(c.tensor(3)) : Tensor();
  const Rows s = rows_of(c, 1, x);
  const double eps = c.number_or(4, 1e-5);
  if (!x.device().is_cpu()) return cuda::layer_norm(c.ctx, c.outs[0], c.outs[1], c.outs[2], x, w, b, s.rows, s.n, eps);
  visit_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T *wp = w.defined() ? w.data<T>() : nullptr, *bp = b.defined() ? b.data<T>() : nullptr;
    parallel_for(s.rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, s.n)), [&](int64_t r0, int64_t r1) {
      forward_rows(x.data<T>(), wp, bp, c.outs[0].data<T>(), c.outs[1].data<C>(), c.outs[2].data<C>(), s.n, C(eps), r0, r1);
    });
  });
}

// ---- backward -----------------------------------------------------------------------------------

std::vector<bool> output_mask(const OpCall& c) {
  const bool w = c.has(5);
  if (!c.has(6)) return {true, w, w};
  const std::vector<int64_t> m = c.ints(6);
  if (m.size() != 3) fail(cat("output_mask expected three 0 / 1 flags, got ", m.size()));
  for (int64_t v : m)
    if (v != 0 && v != 1) fail(cat("output_mask expected flags 0 or 1, got ", v));
  if (m[1] && !w) fail("output_mask asks for grad_weight, expected a weight");
  return {m[0] != 0, m[1] != 0, m[2] != 0};
}

std::vector<Meta> infer_layer_norm_backward(OpCall& c) {
  const Tensor go = c.tensor(0), x = c.tensor(1);
  check_input(x);
  const Rows s = rows_of(c, 2, x);
  check_same("grad_out", go, x, x.sizes());
  for (int i : {3, 4}) {
    const Tensor t = c.tensor(i);
    if (t.dtype() != stats_dtype(x.dtype()) || t.device() != x.device() || t.sizes() != s.stats)
      fail(cat(i == 3 ? "mean" : "rstd", " expected dtype ", dtype_name(stats_dtype(x.dtype())), " and shape ",
               shape_str(s.stats), " on input's device, got ", t.describe()));
  }
  if (c.has(5)) check_same("weight", c.tensor(5), x, s.normalized);
  const std::vector<bool> m = output_mask(c);
  auto meta = [&](bool on, const Shape& sizes) { return Meta{on ? sizes : Shape{0}, x.dtype(), x.device()}; };
  return {meta(m[0], x.sizes()), meta(m[1], s.normalized), meta(m[2], s.normalized)};
}

// A row's Σ g and Σ g (x - mu), g = grad_out (x weight), in lanes::kLanes independent sums each
// (vectorised; the lanes added pairwise at the end).
template <bool Weighted, class T, class C>
void row_sums(const T* gr, const T* xr, const T* w, C mu, int64_t n, C& sg, C& sgx) {
  constexpr int L = lanes::kLanes;
  C a[L] = {}, b[L] = {};
  auto add = [&](int l, int64_t j) {
    const C g = Weighted ? load(gr[j]) * load(w[j]) : load(gr[j]);
    a[l] += g, b[l] += g * (load(xr[j]) - mu);
  };
  int64_t j = 0;
  for (; j + L <= n; j += L)
    for (int l = 0; l < L; ++l) add(l, j + l);
  for (int l = 0; j < n; ++j, ++l) add(l, j);
  for (int h = L / 2; h > 0; h /= 2)
    for (int l = 0; l < h; ++l) a[l] += a[l + h], b[l] += b[l + h];
  sg = a[0], sgx = b[0];
}

template <class T, class C>
void input_rows(const T* go, const T* x, const C* mean, const C* rstd, const T* w, T* gx, int64_t n, int64_t r0,
                int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T *gr = go + r * n, *xr = x + r * n;
    const C mu = mean[r], rs = rstd[r];
    C sg, sgx;
    if (w) row_sums<true>(gr, xr, w, mu, n, sg, sgx);
    else row_sums<false>(gr, xr, w, mu, n, sg, sgx);
    sg /= C(n), sgx *= rs / C(n);
    T* gxr = gx + r * n;
    const C k = rs * sgx;
    if (w) {
      for (int64_t j = 0; j < n; ++j) store(gxr[j], rs * (load(gr[j]) * load(w[j]) - sg - (load(xr[j]) - mu) * k));
    } else {
      for (int64_t j = 0; j < n; ++j) store(gxr[j], rs * (load(gr[j]) - sg - (load(xr[j]) - mu) * k));
    }
  }
}

// Columns [c0, c1): gw = sum over rows of grad_out * xhat, gb = sum of grad_out (null: not asked).
template <class T, class C>
void column_sums(const T* go, const T* x, const C* mean, const C* rstd, T* gw, T* gb, int64_t rows, int64_t n,
                 int64_t c0, int64_t c1) {
  std::vector<C> aw(size_t(c1 - c0)), ab(size_t(c1 - c0));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = c0; j < c1; ++j) {
      const C g = load(go[r * n + j]);
      aw[size_t(j - c0)] += g * (load(x[r * n + j]) - mean[r]) * rstd[r];
      ab[size_t(j - c0)] += g;
    }
  for (int64_t j = c0; j < c1; ++j) {
    if (gw) store(gw[j], aw[size_t(j - c0)]);
    if (gb) store(gb[j], ab[size_t(j - c0)]);
  }
}

// gx, gw and gb in one pass while each row is in cache (inputs past the caches): fixed blocks of
// rows (by shape alone: sums independent of the thread count), a block's column sums in row
// order into its own partials, the partials added in block order.
constexpr int64_t kFusedMinRows = 256, kFusedMinBytes = int64_t(4) << 20, kMaxPartialBytes = int64_t(8) << 20;
int64_t column_blocks(int64_t rows, int64_t n, size_t c_bytes) {
  return std::clamp<int64_t>(rows / 64, 1, std::max<int64_t>(1, kMaxPartialBytes / (2 * n * int64_t(c_bytes))));
}

template <class T, class C>
void fused_rows(const T* go, const T* x, const C* mean, const C* rstd, const T* w, T* gx, T* gw, T* gb, int64_t rows,
                int64_t n) {
  const int64_t blocks = column_blocks(rows, n, sizeof(C)), per = (rows + blocks - 1) / blocks;
  Scratch<C> partial(size_t(2 * blocks * n));
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      C *aw = partial.p + 2 * b * n, *ab = aw + n;
      std::fill(aw, aw + 2 * n, C(0));
      const int64_t r1 = std::min(rows, (b + 1) * per);
      for (int64_t r = b * per; r < r1; ++r) {
        if (gx) input_rows(go, x, mean, rstd, w, gx, n, r, r + 1);
        const T *gr = go + r * n, *xr = x + r * n;
        const C mu = mean[r], rs = rstd[r];
        for (int64_t j = 0; j < n; ++j) {
          const C g = load(gr[j]);
          aw[j] += g * (load(xr[j]) - mu) * rs;
          ab[j] += g;
        }
      }
    }
  });
  parallel_for(n, std::max<int64_t>(16, kParallelGrain / blocks), [&](int64_t c0, int64_t c1) {
    for (int64_t j = c0; j < c1; ++j) {
      C sw = 0, sb = 0;
      for (int64_t b = 0; b < blocks; ++b) sw += partial.p[2 * b * n + j], sb += partial.p[(2 * b + 1) * n + j];
      if (gw) store(gw[j], sw);
      if (gb) store(gb[j], sb);
    }
  });
}

void run_layer_norm_backward(OpCall& c) {
  const Tensor go = dense(c.tensor(0)), x = dense(c.tensor(1)), mean = dense(c.tensor(3)), rstd = dense(c.tensor(4));
  const Tensor w = c.has(5) ? dense(c.tensor(5)) : Tensor();
  const Rows s = rows_of(c, 2, x);
  const std::vector<bool> m = output_mask(c);
  const Tensor gx = m[0] ? c.outs[0] : Tensor(), gw = m[1] ? c.outs[1] : Tensor(), gb = m[2] ? c.outs[2] : Tensor();
  if (!x.device().is_cpu()) return cuda::layer_norm_backward(c.ctx, gx, gw, gb, go, x, mean, rstd, w, s.rows, s.n);
  visit_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T *gop = go.data<T>(), *xp = x.data<T>(), *wp = w.defined() ? w.data<T>() : nullptr;
    const C *mp = mean.data<C>(), *rp = rstd.data<C>();
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, s.n));
    T *gwp = gw.defined() ? gw.data<T>() : nullptr, *gbp = gb.defined() ? gb.data<T>() : nullptr;
    if ((gwp || gbp) && s.rows >= kFusedMinRows && x.numel() * int64_t(x.itemsize()) >= kFusedMinBytes)
      return fused_rows(gop, xp, mp, rp, wp, gx.defined() ? gx.data<T>() : nullptr, gwp, gbp, s.rows, s.n);
    if (gx.defined())
      parallel_for(s.rows, grain, [&](int64_t r0, int64_t r1) { input_rows(gop, xp, mp, rp, wp, gx.data<T>(), s.n, r0, r1); });
    if (!gwp && !gbp) return;
    parallel_for(s.n, std::max<int64_t>(16, kParallelGrain / std::max<int64_t>(1, s.rows)), [&](int64_t c0, int64_t c1) {
      column_sums(gop, xp, mp, rp, gwp, gbp, s.rows, s.n, c0, c1);
    });
  });
}

}  // namespace

void register_norm(Registry& r) {
  r.add(OpDef{"_layer_norm", "input:T, normalized_shape:Is, weight:T?, bias:T?, eps:N?", OpKind::Other,
              kNoMethod | kMultiOut | kDeviceAware | kExtern, infer_layer_norm, run_layer_norm});
  r.add(OpDef{"_layer_norm_backward",
              "grad_out:T, input:T, normalized_shape:Is, mean:T, rstd:T, weight:T?, output_mask:Is?", OpKind::Other,
              kNoMethod | kMultiOut | kDeviceAware | kExtern, infer_layer_norm_backward, run_layer_norm_backward});
}

}  // namespace cr
