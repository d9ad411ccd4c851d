#include "vm/kernels/cuda/scatter.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "vm/cuda/checks.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/deterministic.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/radix.hpp"
#include "vm/kernels/cuda/sources.hpp"

namespace cr::cuda {
namespace {

// The launch's geometry, laid out as scatter.cuh's ScatterGeo.
struct Geo {
  long long sizes[kMaxDims], idx_strides[kMaxDims], src_strides[kMaxDims], out_strides[kMaxDims];
  long long n, limit;
  int nd, d;
};
static_assert(kMaxDims == 16, "scatter.cuh's ScatterGeo holds 16 dims");

// What alpha * src is computed in (scatter.cuh's A): as the CPU's compute_t, integers widened.
const char* scaled_type(DType d) {
  switch (d) {
    case DType::f64: return "double";
    case DType::i32: case DType::i64: return "long long";
    case DType::b8: return "int";
    default: return "float";
  }
}

// What a histogram's shared-memory bins hold (scatter.cuh's B): float sums for float32 (and,
// unused, the 16-bit floats), wrapping integers, bool's "or" in a word.
const char* bin_type(DType d) {
  switch (d) {
    case DType::f64: return "double";
    case DType::i64: return "unsigned long long";
    case DType::i32: case DType::b8: return "unsigned";
    default: return "float";
  }
}
size_t bin_bytes(DType d) { return d == DType::f64 || d == DType::i64 ? 8 : 4; }

}  // namespace

std::string scatter_source(DType d) {
  return cat(prelude(), "\ntypedef ", cuda_type(d), " T;\ntypedef ", scaled_type(d), " A;\ntypedef ", bin_type(d),
             " B;\n", cuda_source("scatter.cuh"));
}

namespace {

Geo geometry(const Tensor& out, int d, const Tensor& idx, const Tensor& src) {
  Geo g{};
  g.nd = idx.dim();
  g.d = d;
  g.n = idx.numel();
  g.limit = out.size(d);
  for (int k = 0; k < g.nd; ++k) {
    g.sizes[k] = idx.size(k);
    g.idx_strides[k] = idx.stride(k);
    g.src_strides[k] = src.stride(k);
    g.out_strides[k] = out.stride(k);
  }
  return g;
}

constexpr int kBlock = 256;
constexpr size_t kBinBytes = 48 << 10;  // the shared memory every launch gets without an opt-in

struct Launch {
  const char* fn;
  int64_t grid;
  size_t shared;
};

// scatter_add's launch. A 1-D line into a 1-D target (a histogram) keeps its bins in shared
// memory when they fit and the line is long enough to pay for clearing them; counting into more
// bins (a constant source) groups a warp's equal bins; anything else is a thread per position.
// (16-bit floats add one by one, as the CPU: float bins would not saturate where they do.)
Launch add_launch(const Tensor& out, const Tensor& idx, const Tensor& src) {
  const int64_t n = idx.numel(), threads = (n + kBlock - 1) / kBlock;
  const bool half = out.dtype() == DType::f16 || out.dtype() == DType::bf16;
  if (out.dim() != 1 || idx.dim() != 1 || n < 4 * kBlock || half) return {"scatter_add", threads, 0};
  const bool counting = src.stride(0) == 0;
  const int64_t waves = int64_t(device_info(out.device().index).multiprocessors) * 4;
  const size_t shared = size_t(out.size(0)) * (counting ? 4 : bin_bytes(out.dtype()));
  if (shared <= kBinBytes && n >= 2 * out.size(0))
    return {"scatter_bins", std::clamp<int64_t>(n / (16 * kBlock), 1, waves), shared};
  if (counting) return {"count_line", std::min(threads, 2 * waves), 0};
  return {"scatter_add", threads, 0};
}

// A number as scatter.cuh's A for dtype d: the storage of each width and the address to pass.
struct Scalar {
  double f64;
  float f32;
  long long i64;
  int b8;
  Scalar(double v, long long i) : f64(v), f32(float(v)), i64(i), b8(v != 0) {}
  void* of(DType d) {
    switch (d) {
      case DType::f64: return &f64;
      case DType::i32: case DType::i64: return &i64;
      case DType::b8: return &b8;
      default: return &f32;
    }
  }
};

// Launches l.fn over idx's positions, of scatter.cuh's module or (reducing) scatter_reduce.cuh's;
// `extra` goes between the geometry and the check word.
void launch_scatter(Context& ctx, bool reducing, const Launch& l, const Tensor& out, int d, const Tensor& idx,
                    const Tensor& src, std::initializer_list<void*> extra, const std::string& op, const std::string& what) {
  if (idx.numel() == 0) return;
  Geo g = geometry(out, d, idx, src);
  const int device = out.device().index;
  const std::shared_ptr<DeviceCheck> check = library_check(device, op, {what});
  void *op_ = out.data_bytes(), *ip = idx.data_bytes(), *sp = src.data_bytes(), *cp = check->word;
  std::vector<void*> args{&op_, &ip, &sp, &g};
  args.insert(args.end(), extra);
  args.push_back(&cp);
  const DType dt = out.dtype();
  const std::string key = cat(reducing ? "scatter_reduce_" : "scatter_", dtype_name(dt));
  library_launch(ctx, device, key, [=] { return reducing ? scatter_reduce_source(dt) : scatter_source(dt); }, l.fn,
                 l.grid, kBlock, args.data(), l.shared);
  defer_check(check, current_stream(device));
}

// What the positions an index names start from without include_self: the reduction's identity.
Scalar identity(int reduce, DType d) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const bool i32 = d == DType::i32;
  switch (reduce) {
    case kReduceProd: return {1.0, 1};
    case kReduceAmax: return {-inf, i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min()};
    case kReduceAmin: return {inf, i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max()};
    default: return {-0.0, 0};  // (sum, mean: -0 + v is v, the sign of zero included)
  }
}

// The second half of the ordered scatter_add: the keys (out's element offsets, NO_KEY last)
// sorted stably with their 1-based positions (radix.hpp), each run of equal keys added in
// position order with one write (scatter.cuh scatter_runs; src read by idx's geometry).
void sum_runs(Context& ctx, const Tensor& out, int d, const Tensor& idx, const Tensor& src, const Tensor& keys, Scalar& a,
              const std::string& op, const std::string& what) {
  const int64_t n = keys.numel();
  if (n >= (int64_t(1) << 31))
    fail(cat("the deterministic CUDA scatter_add takes fewer than 2^31 positions, got ", n));
  Tensor sorted = Tensor::empty({n}, DType::i64, out.device()), order = Tensor::empty({n}, DType::i64, out.device());
  void *sp = sorted.data_bytes(), *pp = order.data_bytes();
  radix_sort_lines(ctx, keys, 1, n, 1, n, false, sorted, order);
  launch_scatter(ctx, false, {"scatter_runs", (n + kBlock - 1) / kBlock, 0}, out, d, idx, src, {a.of(out.dtype()), &sp, &pp},
                 op, what);
}

// The ordered scatter_add (T.use_deterministic_algorithms): each position's target offset as a
// key (scatter.cuh scatter_keys), then sum_runs.
void ordered_scatter_add(Context& ctx, const Tensor& out, int d, const Tensor& idx, const Tensor& src, Scalar& a,
                         const std::string& op, const std::string& what) {
  const int64_t n = idx.numel();
  if (n == 0) return;
  Tensor keys = Tensor::empty({n}, DType::i64, out.device());
  void* kp = keys.data_bytes();
  launch_scatter(ctx, false, {"scatter_keys", (n + kBlock - 1) / kBlock, 0}, out, d, idx, src, {&kp}, op, what);
  sum_runs(ctx, out, d, idx, src, keys, a, op, what);
}

}  // namespace

std::string scatter_reduce_source(DType d) { return cat(scatter_source(d), "\n", cuda_source("scatter_reduce.cuh")); }

void scatter_add(Context& ctx, const Tensor& out, int d, const Tensor& idx, const Tensor& src, double alpha,
                 const std::string& op, const std::string& what) {
  Scalar a(alpha, static_cast<long long>(alpha));
  if (deterministic() && is_floating(out.dtype())) return ordered_scatter_add(ctx, out, d, idx, src, a, op, what);
  launch_scatter(ctx, false, add_launch(out, idx, src), out, d, idx, src, {a.of(out.dtype())}, op, what);
}

void add_at_offsets(Context& ctx, const Tensor& out, const Tensor& keys, const Tensor& src, const std::string& op) {
  if (keys.numel() == 0) return;
  Scalar one(1.0, 1);
  sum_runs(ctx, out, 0, keys, src, keys, one, op, "");
}

void scatter_reduce(Context& ctx, const Tensor& out, int d, const Tensor& idx, const Tensor& src, int reduce,
                    bool include_self, const std::string& op, const std::string& what) {
  const int64_t n = idx.numel();
  if (n == 0) return;
  if (is_floating(out.dtype()) && (reduce == kReduceSum || reduce == kReduceMean || reduce == kReduceProd))
    alert_not_deterministic(op, "a float sum or product by atomics");
  const Launch each{nullptr, (n + kBlock - 1) / kBlock, 0};
  if (!include_self) {
    Scalar id = identity(reduce, out.dtype());
    launch_scatter(ctx, true, {"scatter_identity", each.grid, 0}, out, d, idx, src, {id.of(out.dtype())}, op, what);
  }
  Tensor counts;
  void* cp = nullptr;
  if (reduce == kReduceMean) {
    counts = Tensor::empty({out.numel()}, DType::i32, out.device());
    fill_pattern(counts.data_bytes(), size_t(out.numel()), 4, 0u, out.device().index);
    cp = counts.data_bytes();
  }
  launch_scatter(ctx, true, {"scatter_reduce", each.grid, 0}, out, d, idx, src, {&reduce, &cp}, op, what);
  if (reduce != kReduceMean) return;
  void* yp = out.data_bytes();
  long long numel = out.numel();
  int with_self = include_self;
  void* args[] = {&yp, &cp, &numel, &with_self};
  const DType dt = out.dtype();
  library_launch(ctx, out.device().index, cat("scatter_reduce_", dtype_name(dt)), [dt] { return scatter_reduce_source(dt); },
                 "scatter_mean", (numel + kBlock - 1) / kBlock, kBlock, args);
}

}  // namespace cr::cuda
