// bincount(self[, weights[, minlength]]): how often each value 0..max of a 1-D int32 / int64
// tensor occurs (data values, not positions), or the sums of the weights at them (float32 for
// float32 weights, float64 otherwise; int64 zeros for an empty input, as PyTorch); max(minlength,
// max + 1) bins. A counting kernel of its own:
// one pass finds the range and counts the values below kFewBins, a second pass (only when larger
// values occur) counts those; no temporaries of the input's size. On CUDA: vm/kernels/cuda/bincount.hpp.
// _value_counts(self) -> counts, range: the smallest and the largest value lo, hi of a 1-D int32 /
// int64 tensor (range: int64 {lo, hi} on the CPU, {0, -1} when empty) and, when 0 <= lo, hi <
// 2 numel and hi - lo < numel, how often each value lo..hi occurs (int64 {hi - lo + 1} on self's
// device; else counts is empty): bincount's passes, the range found by the first (unique of
// integers, stdlib/surface.lua, reads no value twice for it).
// _unique_counted(self) -> values, counts: under the same condition, the values that occur, in
// increasing order, and their counts (int64); else two empty tensors (unique then sorts). On CUDA
// values below 4096 are compacted by the counting pass's second kernel: one read back in all.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "vm/deterministic.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/kernels/cuda/bincount.hpp"
#include "vm/kernels/cuda/scatter.hpp"
#include "vm/ops/indexing.hpp"

namespace cr {
namespace {

constexpr int64_t kFewBins = 4096;  // bins each piece keeps in the first pass (cache-resident)

struct Bincount {
  Tensor x, weights;  // x: contiguous int32 / int64; weights: contiguous, of the result's dtype
  int64_t minlength = 0;
  DType out = DType::i64;
};

Bincount prepare(const OpCall& c) {
  Bincount b;
  b.x = c.tensor(0);
  if (b.x.dim() != 1 || (b.x.dtype() != DType::i64 && b.x.dtype() != DType::i32))
    fail(cat("only supports 1-d non-negative integral inputs, got ", b.x.describe()));
  b.x = contiguous(b.x);
  b.minlength = c.integer_or(2, 0);
  if (b.minlength < 0) fail(cat("minlength should be >= 0, got ", b.minlength));
  if (!c.is_tensor(1)) return b;
  const Tensor w = c.tensor(1);
  check_device(b.x, w);
  if (w.dim() != 1 || w.size(0) != b.x.size(0))
    fail(cat("weights should be 1-d and have the same length as input (", b.x.size(0), "), got ", w.describe()));
  if (b.x.numel() == 0) return b;  // (int64 zeros, as PyTorch's empty input whatever the weights)
  b.out = w.dtype() == DType::f32 ? DType::f32 : DType::f64;
  b.weights = contiguous(cast(w, b.out));
  return b;
}

// The pieces of the line: their number follows its length, never the threads, so a float sum
// is the same on any number of threads (each piece sums in order, the pieces add in order).
int64_t pieces_of(int64_t n) { return std::clamp<int64_t>(n / kParallelGrain, 1, 16); }

template <class I, class W> struct Counter {
  const I* x;
  const W* w;  // null: counting
  int64_t n, pieces;
  int64_t lo(int64_t p) const { return n * p / pieces; }
  W at(int64_t i) const { return w ? w[i] : W(1); }
};

// Counts of the values in [0, cap) among x[i0..i1) into four 32-bit tables (element i into table
// i % 4: a run of one value waits on no store of its own), added into s; the range into a, b.
template <class I>
void count_four(const I* x, int64_t i0, int64_t i1, int64_t cap, uint32_t* t, int64_t* s, I& a, I& b) {
  std::memset(t, 0, size_t(4 * cap) * sizeof(uint32_t));
  I lo[4] = {a, a, a, a}, hi[4] = {b, b, b, b};  // (four chains of min / max too)
  int64_t i = i0;
  for (; i + 4 <= i1; i += 4)
    for (int j = 0; j < 4; ++j) {
      const I v = x[i + j];
      lo[j] = std::min(lo[j], v);
      hi[j] = std::max(hi[j], v);
      if (uint64_t(int64_t(v)) < uint64_t(cap)) ++t[j * cap + v];  // (negative values: huge unsigned)
    }
  a = std::min({a, lo[0], lo[1], lo[2], lo[3]});
  b = std::max({b, hi[0], hi[1], hi[2], hi[3]});
  for (; i < i1; ++i) {
    const I v = x[i];
    a = std::min(a, v);
    b = std::max(b, v);
    if (uint64_t(int64_t(v)) < uint64_t(cap)) ++t[v];
  }
  for (int64_t v = 0; v < cap; ++v) s[v] += int64_t(t[v]) + t[cap + v] + t[2 * cap + v] + t[3 * cap + v];
}

// The first pass: each piece's minimum and maximum, and its sums of the values in [0, cap).
template <class I, class W>
void count_low(const Counter<I, W>& k, int64_t cap, std::vector<W>& sums, int64_t* mn, int64_t* mx) {
  std::vector<int64_t> lows(size_t(k.pieces)), highs(size_t(k.pieces));
  parallel_for(k.pieces, 1, [&](int64_t p0, int64_t p1) {
    std::vector<uint32_t> tables;
    for (int64_t p = p0; p < p1; ++p) {
      W* s = sums.data() + p * cap;
      I a = std::numeric_limits<I>::max(), b = std::numeric_limits<I>::min();
      const int64_t i0 = k.lo(p), i1 = k.lo(p + 1);
      if constexpr (std::is_same_v<W, int64_t>) {
        if (!k.w && i1 - i0 < (int64_t(1) << 32)) {  // (counting: 32-bit tables hold a piece's counts)
          tables.resize(size_t(4 * cap));
          count_four(k.x, i0, i1, cap, tables.data(), s, a, b);
          lows[size_t(p)] = a, highs[size_t(p)] = b;
          continue;
        }
      }
      for (int64_t i = i0; i < i1; ++i) {
        const I v = k.x[i];
        a = std::min(a, v);
        b = std::max(b, v);
        if (uint64_t(int64_t(v)) < uint64_t(cap)) s[v] += k.at(i);  // (negative values: huge unsigned)
      }
      lows[size_t(p)] = a, highs[size_t(p)] = b;
    }
  });
  *mn = *std::min_element(lows.begin(), lows.end());
  *mx = *std::max_element(highs.begin(), highs.end());
}

// The second pass, for the values in [cap, bins): per-piece sums when the bins are few beside
// the line, else one serial pass straight into the result (in order).
template <class I, class W> void count_high(const Counter<I, W>& k, int64_t cap, int64_t bins, W* out) {
  const int64_t width = bins - cap;
  if (k.pieces == 1 || width * 8 > k.n) {
    for (int64_t i = 0; i < k.n; ++i)
      if (k.x[i] >= cap) out[k.x[i]] += k.at(i);
    return;
  }
  std::vector<W> sums(size_t(k.pieces * width), W(0));
  parallel_for(k.pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      W* s = sums.data() + p * width - cap;
      for (int64_t i = k.lo(p), e = k.lo(p + 1); i < e; ++i)
        if (k.x[i] >= cap) s[k.x[i]] += k.at(i);
    }
  });
  parallel_for(width, kParallelGrain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t p = 0; p < k.pieces; ++p) out[cap + b] += sums[size_t(p * width + b)];
  });
}

void fail_negative() { fail("only supports 1-d non-negative integral inputs (got a negative value)"); }

// The counts (out undefined when a value is negative or the bins would pass `limit`) and the range.
struct Counts {
  Tensor out;
  int64_t mn = 0, mx = -1;
};

template <class I, class W> Counts count_cpu(const Bincount& b, int64_t limit) {
  const int64_t n = b.x.numel();
  Counter<I, W> k{b.x.data<I>(), b.weights.defined() ? b.weights.data<W>() : nullptr, n, pieces_of(n)};
  const int64_t cap = std::min(kFewBins, n);
  std::vector<W> sums(size_t(k.pieces * cap), W(0));
  int64_t mn = 0, mx = -1;
  if (n > 0) count_low(k, cap, sums, &mn, &mx);
  const int64_t bins = std::max(b.minlength, mx + 1);
  if (mn < 0 || bins > limit) return {Tensor(), mn, mx};
  Tensor out = Tensor::empty({bins}, b.out, b.x.device());
  W* o = out.data<W>();
  std::memset(static_cast<void*>(o), 0, size_t(bins) * sizeof(W));  // (zero bits: 0 in every dtype)
  for (int64_t v = 0, e = std::min(cap, bins); v < e; ++v)
    for (int64_t p = 0; p < k.pieces; ++p) o[v] += sums[size_t(p * cap + v)];
  if (mx >= cap) count_high(k, cap, bins, o);
  return {out, mn, mx};
}

Counts count_any(OpCall& c, const Bincount& b, int64_t limit) {
  if (!b.x.device().is_cpu()) {
    const cuda::BincountResult r = cuda::bincount(c.ctx, b.x, b.weights, b.minlength, b.out, limit);
    return {r.out, r.min, r.max};
  }
  const bool i32 = b.x.dtype() == DType::i32;
  switch (b.out) {
    case DType::f32: return i32 ? count_cpu<int32_t, float>(b, limit) : count_cpu<int64_t, float>(b, limit);
    case DType::f64: return i32 ? count_cpu<int32_t, double>(b, limit) : count_cpu<int64_t, double>(b, limit);
    default: return i32 ? count_cpu<int32_t, int64_t>(b, limit) : count_cpu<int64_t, int64_t>(b, limit);
  }
}

// On CUDA under T.use_deterministic_algorithms, weight sums go by the ordered scatter_add (the
// values + 1 as its positions): the same bits every run.
Tensor ordered_cuda(OpCall& c, const Bincount& b) {
  int64_t mn = 0, mx = -1;
  if (b.x.numel() > 0) cuda::value_range(c.ctx, b.x, &mn, &mx);
  if (mn < 0) fail_negative();
  const int64_t bins = std::max(b.minlength, mx + 1);
  Tensor out = Tensor::empty({bins}, b.out, b.x.device());
  if (bins > 0) cuda::fill_pattern(out.data_bytes(), size_t(bins) * (b.out == DType::f32 ? 1 : 2), 4, 0u, b.x.device().index);
  const Tensor idx = call(c.ctx, "add", {tensor_arg(cast(b.x, DType::i64)), number_arg(1)});
  cuda::scatter_add(c.ctx, out, 0, idx, b.weights, 1.0, c.def.name, cat("dim 1 of size ", bins));
  return out;
}

void run_bincount(OpCall& c) {
  const Bincount b = prepare(c);
  if (!b.x.device().is_cpu() && deterministic() && b.weights.defined()) return c.outs.push_back(ordered_cuda(c, b));
  const Counts r = count_any(c, b, std::numeric_limits<int64_t>::max());
  if (r.mn < 0) fail_negative();
  c.outs.push_back(r.out);
}

void run_value_counts(OpCall& c) {
  Bincount b;
  b.x = c.tensor(0);
  if (b.x.dim() != 1 || (b.x.dtype() != DType::i64 && b.x.dtype() != DType::i32))
    fail(cat("expected a 1-D int32 or int64 tensor, got ", b.x.describe()));
  b.x = contiguous(b.x);
  const int64_t n = b.x.numel();
  const Counts r = count_any(c, b, 2 * n);
  Tensor range = Tensor::empty({2}, DType::i64);
  range.data<int64_t>()[0] = r.mn, range.data<int64_t>()[1] = r.mx;
  const bool counted = r.out.defined() && r.mn >= 0 && r.mx - r.mn < n;
  c.outs.push_back(counted ? Tensor::view_of(r.out, {r.mx - r.mn + 1}, {1}, r.out.offset() + r.mn)
                           : Tensor::empty({0}, DType::i64, b.x.device()));
  c.outs.push_back(range);
}

// The bins of counts (of the values lo, lo + 1, ...) that hold a count: their values and counts.
void compact_counts(OpCall& c, const Tensor& counts, int64_t lo, DType values) {
  if (counts.device().is_cpu()) {
    const int64_t* k = counts.data<int64_t>();
    int64_t distinct = 0;
    for (int64_t i = 0; i < counts.numel(); ++i) distinct += k[i] != 0;
    Tensor v = Tensor::empty({distinct}, DType::i64), n = Tensor::empty({distinct}, DType::i64);
    int64_t *vp = v.data<int64_t>(), *np = n.data<int64_t>();
    for (int64_t i = 0; i < counts.numel(); ++i)
      if (k[i] != 0) *vp++ = lo + i, *np++ = k[i];
    c.outs.push_back(cast(v, values));
    c.outs.push_back(n);
    return;
  }
  const Tensor present = call(c.ctx, "gt", {tensor_arg(counts), number_arg(0)});
  const Tensor at = call(c.ctx, "nonzero", {tensor_arg(present)});  // (1-based)
  const Tensor v =
      call(c.ctx, "add", {tensor_arg(Tensor::view_of(at, {at.size(0)}, {1}, 0)), number_arg(double(lo - 1))});
  c.outs.push_back(cast(v, values));
  c.outs.push_back(call(c.ctx, "masked_select", {tensor_arg(counts), tensor_arg(present)}));
}

void run_unique_counted(OpCall& c) {
  Tensor x = c.tensor(0);
  if (x.dim() != 1 || (x.dtype() != DType::i64 && x.dtype() != DType::i32))
    fail(cat("expected a 1-D int32 or int64 tensor, got ", x.describe()));
  x = contiguous(x);
  const int64_t n = x.numel();
  bool count = n > 0;
  if (count && !x.device().is_cpu()) {
    const cuda::Distinct d = cuda::distinct_small(c.ctx, x);
    if (d.values.defined()) {
      c.outs.push_back(d.values);
      c.outs.push_back(d.counts);
      return;
    }
    count = d.min >= 0 && d.max - d.min < n;  // (else no second pass)
  }
  Bincount b;
  b.x = x;
  const Counts r = count ? count_any(c, b, 2 * n) : Counts{};
  if (!r.out.defined() || r.mn < 0 || r.mx - r.mn >= n) {
    c.outs.push_back(Tensor::empty({0}, x.dtype(), x.device()));
    c.outs.push_back(Tensor::empty({0}, DType::i64, x.device()));
    return;
  }
  compact_counts(c, Tensor::view_of(r.out, {r.mx - r.mn + 1}, {1}, r.out.offset() + r.mn), r.mn, x.dtype());
}

}  // namespace

void register_bincount(Registry& r) {
  r.add(OpDef{"bincount", "self:T, weights:T?, minlength:I?", OpKind::Index, kDataSize | kDeviceAware, nullptr,
              run_bincount});
  r.add(OpDef{"_value_counts", "self:T", OpKind::Index, kDataSize | kDeviceAware | kMultiOut | kNoMethod, nullptr,
              run_value_counts});
  r.add(OpDef{"_unique_counted", "self:T", OpKind::Index, kDataSize | kDeviceAware | kMultiOut | kNoMethod, nullptr,
              run_unique_counted});
}

}  // namespace cr
