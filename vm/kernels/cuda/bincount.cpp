#include "vm/kernels/cuda/bincount.hpp"

#include <algorithm>
#include <limits>

#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/devices.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int64_t kFewBins = 4096;      // bins of the first pass (16 KiB of counts, 32 KiB of double sums)
constexpr size_t kBinBytes = 48 << 10;  // the shared memory every launch gets without an opt-in

size_t bin_bytes(DType out) { return out == DType::f64 ? 8 : 4; }

void launch(Context& ctx, DType x, DType out, int device, const char* fn, int64_t grid, void* const* args,
            size_t shared) {
  library_launch(ctx, device, cat("bincount_", dtype_name(x), "_", dtype_name(out)),
                 [x, out] { return bincount_source(x, out); }, fn, grid, kBlock, args, shared);
}

// Blocks enough to fill the device, each with a few thousand values (its bins cleared and
// flushed once).
int64_t grid_of(int64_t n, int device) {
  return std::clamp<int64_t>(n / (16 * kBlock), 1, int64_t(device_info(device).multiprocessors) * 8);
}

Tensor zeros(int64_t n, DType d, Device dev) {
  Tensor t = Tensor::empty({n}, d, dev);
  if (n > 0) fill_pattern(t.data_bytes(), size_t(n) * (d == DType::f32 ? 1 : 2), 4, 0u, dev.index);
  return t;
}

// bincount_low over x, then value_compact: the range's bounds into *mn / *mx (read back: the one
// synchronisation); with cap > 0 the values below cap counted into low (cap bins, zeroed); with
// `d` (counts, cap > 0), the distinct values and their counts when they all lie below cap.
void first_pass(Context& ctx, const Tensor& x, const Tensor& w, DType out, long long cap, const Tensor& low,
                int64_t* mn, int64_t* mx, Distinct* d = nullptr) {
  const int device = x.device().index;
  long long n = x.numel(), grid = grid_of(n, device);
  Tensor range = Tensor::empty({2 * grid}, DType::i64, x.device()), meta = Tensor::empty({3}, DType::i64, x.device());
  void *xp = x.data_bytes(), *wp = w.defined() ? w.data_bytes() : nullptr, *lp = cap ? low.data_bytes() : nullptr;
  void *rp = range.data_bytes(), *mp = meta.data_bytes(), *vp = nullptr, *cp = nullptr;
  void* args[] = {&xp, &wp, &n, &cap, &lp, &rp};
  launch(ctx, x.dtype(), out, device, "bincount_low", grid, args, size_t(cap) * bin_bytes(out));
  if (d) {
    d->values = Tensor::empty({cap}, x.dtype(), x.device());
    d->counts = Tensor::empty({cap}, DType::i64, x.device());
    vp = d->values.data_bytes(), cp = d->counts.data_bytes();
  }
  void* cargs[] = {&rp, &grid, &lp, &cap, &vp, &cp, &mp};
  launch(ctx, x.dtype(), out, device, "value_compact", 1, cargs, 0);
  const Tensor host = host_copy(meta);
  const int64_t* m = host.data<int64_t>();
  *mn = m[0], *mx = m[1];
  if (!d) return;
  if (m[2] < 0) d->values = d->counts = Tensor();
  else d->values = Tensor::view_of(d->values, {m[2]}, {1}, 0), d->counts = Tensor::view_of(d->counts, {m[2]}, {1}, 0);
}

}  // namespace

std::string bincount_source(DType x, DType out) {
  const char* o = out == DType::i64 ? "long long" : cuda_type(out);
  return cat(prelude(), "\ntypedef ", x == DType::i64 ? "long long" : "int", " I;\ntypedef ", o, " O;\ntypedef ",
             out == DType::i64 ? "unsigned" : o, " B;\n", cuda_source("bincount.cuh"));
}

void value_range(Context& ctx, const Tensor& x, int64_t* mn, int64_t* mx) {
  first_pass(ctx, x, Tensor(), DType::i64, 0, Tensor(), mn, mx);
}

Distinct distinct_small(Context& ctx, const Tensor& x) {
  const long long cap = std::min<long long>(kFewBins, x.numel());
  Distinct d;
  first_pass(ctx, x, Tensor(), DType::i64, cap, zeros(cap, DType::i64, x.device()), &d.min, &d.max, &d);
  return d;
}

BincountResult bincount(Context& ctx, const Tensor& x, const Tensor& weights, int64_t minlength, DType out,
                        int64_t limit) {
  long long n = x.numel();
  const long long cap = std::min<long long>(kFewBins, n);
  if (n == 0) return {minlength <= limit ? zeros(minlength, out, x.device()) : Tensor(), 0, -1};
  const Tensor low = zeros(cap, out, x.device());
  int64_t mn = 0, mx = 0;
  first_pass(ctx, x, weights, out, cap, low, &mn, &mx);
  const int64_t bins = std::max<int64_t>(minlength, mx + 1);
  if (mn < 0 || bins > limit) return {Tensor(), mn, mx};
  if (bins <= cap) {
    Tensor r = Tensor::empty({bins}, out, x.device());
    copy_into(r, Tensor::view_of(low, {bins}, {1}, 0));
    return {r, mn, mx};
  }
  Tensor r = zeros(bins, out, x.device());
  copy_into(Tensor::view_of(r, {cap}, {1}, 0), low);
  if (mx < cap) return {r, mn, mx};
  long long lo = cap, hi = mx + 1;
  const size_t shared = size_t(hi - lo) * bin_bytes(out);
  int in_shared = shared <= kBinBytes;
  const int device = x.device().index;
  void *xp = x.data_bytes(), *wp = weights.defined() ? weights.data_bytes() : nullptr, *rp = r.data_bytes();
  void* args[] = {&xp, &wp, &n, &lo, &hi, &in_shared, &rp};
  launch(ctx, x.dtype(), out, device, "bincount_high", grid_of(n, device), args, in_shared ? shared : 0);
  return {r, mn, mx};
}

}  // namespace cr::cuda
