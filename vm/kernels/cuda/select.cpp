#include "vm/kernels/cuda/select.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>

#include "vm/cuda/checks.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/deterministic.hpp"
#include "vm/devices.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/scatter.hpp"
#include "vm/kernels/cuda/sources.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::cuda {
namespace {

constexpr int kBlock = 256;
constexpr long long kTile = 16 * kBlock;  // elements a block compacts: select.cuh COMPACT_ROUNDS * kBlock

// Laid out as select.cuh's Coords and IndexGeo.
struct Coords {
  long long sizes[kMaxDims];
  int nd;
};
struct IndexGeo {
  long long limits[kMaxDims], strides[kMaxDims], rest_sizes[kMaxDims], rest_strides[kMaxDims];
  long long value_sizes[kMaxDims], value_strides[kMaxDims];
  long long nb, nr, n;
  int k, nrest, nvalue;
};
static_assert(kMaxDims == 16, "select.cuh's geometries hold 16 dims");

void launch(Context& ctx, int device, DType d, const char* fn, int64_t grid, void* const* args) {
  library_launch(ctx, device, cat("select_", dtype_name(d)), [d] { return select_source(d); }, fn, grid, kBlock, args);
}

// Per stream: the count kernels' ticket (device memory that their last block sets back to 0)
// and the pinned host word it writes the total to. A stream's selections take the lock in turn.
struct TotalSlot {
  std::mutex m;
  CUdeviceptr ticket = 0, total_device = 0;
  volatile int64_t* total = nullptr;
};

TotalSlot& total_slot(int device, CUstream s) {
  static std::mutex m;
  static std::map<std::pair<int, CUstream>, std::unique_ptr<TotalSlot>> slots;
  std::lock_guard<std::mutex> g(m);
  std::unique_ptr<TotalSlot>& slot = slots[{device, s}];
  if (!slot) {
    auto t = std::make_unique<TotalSlot>();
    void* host = nullptr;
    constexpr unsigned kPortable = 1, kDeviceMap = 2;  // CU_MEMHOSTALLOC_*
    CR_CU(cuMemAlloc(&t->ticket, 4), "a selection's ticket");
    CR_CU(cuMemsetD32Async(t->ticket, 0u, 1, s), "a selection's ticket");
    CR_CU(cuMemHostAlloc(&host, sizeof(int64_t), kPortable | kDeviceMap), "a selection's total");
    CR_CU(cuMemHostGetDevicePointer(&t->total_device, host, 0), "a selection's total");
    t->total = static_cast<volatile int64_t*>(host);
    slot = std::move(t);
  }
  return *slot;
}

// Waits for the count kernel's total: spins on the pinned word for a short while (the stream's
// synchronisation would add its latency to every selection), then synchronises.
int64_t wait_total(const TotalSlot& t, CUstream s, int device) {
  const auto start = std::chrono::steady_clock::now();
  for (int k = 1; *t.total < 0; ++k) {
    if (k % 64 != 0) continue;
    if (std::chrono::steady_clock::now() - start > std::chrono::microseconds(200)) {
      CR_CU(cuStreamSynchronize(s), "counting a selection");
      if (*t.total < 0) fail("internal: a selection's count kernel finished without its total");
      break;
    }
    constexpr CUresult kNotReady = 600;  // (any other failure of the stream's work is raised here)
    if (const CUresult rc = driver()->cuStreamQuery(s); rc != 0 && rc != kNotReady)
      check(rc, "cuStreamQuery", "counting a selection");
  }
  check_deferred(device, s, false);  // (the stream's earlier work is done: as copy_to_host)
  return *t.total;
}

// The inclusive offsets of the tiles' selected elements, from `count_fn`'s counts; `total` gets
// their sum (the one synchronisation).
Tensor tile_offsets(Context& ctx, const Tensor& x, const char* count_fn, void* flags, long long n, int64_t* total) {
  const int device = x.device().index;
  const int64_t tiles = (n + kTile - 1) / kTile;
  Tensor offsets = Tensor::empty({tiles}, DType::i64, x.device());
  use_device(device);
  const CUstream stream = current_stream(device);
  TotalSlot& slot = total_slot(device, stream);
  std::lock_guard<std::mutex> g(slot.m);
  *slot.total = -1;
  void* op = offsets.data_bytes();
  void* tp = reinterpret_cast<void*>(slot.ticket);
  void* sp = reinterpret_cast<void*>(slot.total_device);
  long long tile = kTile, count = tiles;
  int aligned = reinterpret_cast<uintptr_t>(flags) % 16 == 0;
  void* args[] = {&flags, &n, &tile, &count, &aligned, &op, &tp, &sp};
  const int64_t warps = kBlock / 32, blocks = (tiles + warps - 1) / warps;
  launch(ctx, device, x.dtype(), count_fn, std::min<int64_t>(blocks, 4 * device_info(device).multiprocessors), args);
  *total = wait_total(slot, stream, device);
  return offsets;
}

}  // namespace

std::string select_source(DType d) { return cat(scatter_source(d), "\n", cuda_source("select.cuh")); }

Tensor masked_select(Context& ctx, const Tensor& x, const Tensor& mask) {
  long long n = x.numel();
  if (n == 0) return Tensor::empty({0}, x.dtype(), x.device());
  int64_t count = 0;
  const Tensor offsets = tile_offsets(ctx, x, "count_mask", mask.data_bytes(), n, &count);
  Tensor out = Tensor::empty({count}, x.dtype(), x.device());
  if (count == 0) return out;
  void *xp = x.data_bytes(), *mp = mask.data_bytes(), *op = offsets.data_bytes(), *yp = out.data_bytes();
  long long tile = kTile;
  void* args[] = {&xp, &mp, &n, &tile, &op, &yp};
  launch(ctx, x.device().index, x.dtype(), "masked_select_write", offsets.numel(), args);
  return out;
}

Tensor nonzero(Context& ctx, const Tensor& x) {
  long long n = x.numel();
  if (n == 0) return Tensor::empty({0, int64_t(x.dim())}, DType::i64, x.device());
  int64_t count = 0;
  const Tensor offsets = tile_offsets(ctx, x, "count_nonzero", x.data_bytes(), n, &count);
  Tensor out = Tensor::empty({count, int64_t(x.dim())}, DType::i64, x.device());
  if (out.numel() == 0) return out;
  Coords g{};
  g.nd = x.dim();
  for (int k = 0; k < g.nd; ++k) g.sizes[k] = x.size(k);
  void *xp = x.data_bytes(), *op = offsets.data_bytes(), *yp = out.data_bytes();
  long long tile = kTile;
  void* args[] = {&xp, &n, &tile, &op, &yp, &g};
  launch(ctx, x.device().index, x.dtype(), "nonzero_write", offsets.numel(), args);
  return out;
}

namespace {

IndexGeo index_geo(const Tensor& self, const Tensor& idx, int64_t n) {
  IndexGeo g{};
  g.k = int(idx.size(0));
  g.nb = idx.size(1);
  g.n = n;
  g.nr = 1;
  for (int j = 0; j < g.k; ++j) {
    g.limits[j] = self.size(j);
    g.strides[j] = self.stride(j);
  }
  g.nrest = self.dim() - g.k;
  for (int d = 0; d < g.nrest; ++d) {
    g.rest_sizes[d] = self.size(g.k + d);
    g.rest_strides[d] = self.stride(g.k + d);
    g.nr *= self.size(g.k + d);
  }
  return g;
}

// The values' dims (the selection's shape, row-major as the kernel's element e) with size-1 dims
// dropped and dims that step as one merged: a dense source is one dim of stride 1.
void value_geo(IndexGeo& g, const Tensor& values) {
  g.nvalue = 0;
  for (int d = 0; d < values.dim(); ++d) {
    const long long size = values.size(d), stride = values.stride(d);
    if (size == 1) continue;
    if (g.nvalue > 0 && g.value_strides[g.nvalue - 1] == stride * size) {
      g.value_sizes[g.nvalue - 1] *= size;
      g.value_strides[g.nvalue - 1] = stride;
      continue;
    }
    g.value_sizes[g.nvalue] = size;
    g.value_strides[g.nvalue++] = stride;
  }
}

// A grid-stride launch's blocks: a few waves of the device's multiprocessors at most.
int64_t grid_of(int64_t n, int device) {
  return std::clamp<int64_t>((n + kBlock - 1) / kBlock, 1, int64_t(device_info(device).multiprocessors) * 8);
}

}  // namespace

void index_gather(Context& ctx, const Tensor& out, const Tensor& self, const Tensor& idx, const std::string& op,
                  const std::vector<std::string>& whats) {
  if (out.numel() == 0) return;
  const int device = self.device().index;
  IndexGeo g = index_geo(self, idx, out.numel());
  const std::shared_ptr<DeviceCheck> check = library_check(device, op, whats);
  void *sp = self.data_bytes(), *ip = idx.data_bytes(), *yp = out.data_bytes(), *cp = check->word;
  void* args[] = {&sp, &ip, &yp, &g, &cp};
  launch(ctx, device, self.dtype(), "index_gather", grid_of(g.n, device), args);
  defer_check(check, current_stream(device));
}

void index_put(Context& ctx, const Tensor& self, const Tensor& idx, const Tensor& values, bool accumulate,
               const std::string& op, const std::vector<std::string>& whats) {
  if (values.numel() == 0) return;
  const bool ordered = accumulate && deterministic() && is_floating(self.dtype());
  if (ordered && !values.is_contiguous()) {  // (the ordered sum reads the values dense)
    Tensor dense = Tensor::empty(values.sizes(), values.dtype(), values.device());
    copy_into(dense, values);
    return index_put(ctx, self, idx, dense, accumulate, op, whats);
  }
  const int device = self.device().index;
  IndexGeo g = index_geo(self, idx, values.numel());
  const std::shared_ptr<DeviceCheck> check = library_check(device, op, whats);
  void *sp = self.data_bytes(), *ip = idx.data_bytes(), *vp = values.data_bytes(), *cp = check->word;
  if (ordered) {  // (the ordered sum: the same bits every run)
    Tensor keys = Tensor::empty({g.n}, DType::i64, self.device());
    void* kp = keys.data_bytes();
    void* args[] = {&ip, &g, &kp, &cp};
    launch(ctx, device, self.dtype(), "index_put_keys", grid_of(g.n, device), args);
    defer_check(check, current_stream(device));
    return add_at_offsets(ctx, self, keys, Tensor::view_of(values, {g.n}, {1}, values.offset()), op);
  }
  value_geo(g, values);
  int acc = accumulate;
  void* args[] = {&sp, &ip, &vp, &g, &acc, &cp};
  launch(ctx, device, self.dtype(), "index_put", grid_of(g.n, device), args);
  defer_check(check, current_stream(device));
}

}  // namespace cr::cuda
