#include "vm/cuda/memory.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "vm/cuda/checks.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/env.hpp"
#include "vm/error.hpp"

namespace cr::cuda {
namespace {

constexpr unsigned kEventDisableTiming = 2;

// A freed block that other streams' work may still use (record_stream): it stays in use until
// their events have passed.
struct Pending {
  CUdeviceptr p = 0;
  std::vector<CUevent> events;
};

struct DeviceCache;
void collect_pending(DeviceCache& c);

// The device's side of the block pool: cuMemAlloc / cuMemFree per segment.
struct DriverSegments final : SegmentSource {
  DeviceCache* cache = nullptr;
  int index = 0;
  uint64_t map(size_t bytes) override;
  void unmap(uint64_t base, size_t bytes) override;
  void quiesce() override;
};

// CRESCENT_CUDA_MAX_SPLIT_MB: blocks this large are never split (PyTorch's max_split_size_mb).
size_t max_split() {
  const double mb = env_number(kEnvCudaMaxSplitMb);
  return mb == 0 ? BlockPool::kNoLimit : size_t(mb) << 20;
}

struct DeviceCache {
  DriverSegments source;
  // Pools 0 .. kPoolStreams: one per stream slot (vm/cuda/streams.hpp). A block freed by one stream
  // is only handed out again to that stream, whose order makes the reuse safe. Pools < 0: private.
  BlockPool blocks{source, max_split()};
  std::unordered_map<CUdeviceptr, std::vector<int>> uses;  // other stream slots using a block
  std::vector<Pending> pending;
  explicit DeviceCache(int i) {
    source.cache = this;
    source.index = i;
  }
};

std::mutex g_mutex;
std::map<int, std::unique_ptr<DeviceCache>> g_caches;
std::atomic<size_t> g_driver_bytes{0};

DeviceCache& cache_of(int index) {
  auto& c = g_caches[index];
  if (!c) c = std::make_unique<DeviceCache>(index);
  return *c;
}

// Frees the pending blocks whose events have all passed.
void collect_pending(DeviceCache& c) {
  for (size_t i = c.pending.size(); i-- > 0;) {
    Pending& b = c.pending[i];
    bool passed = true;
    for (CUevent e : b.events) passed = passed && driver()->cuEventQuery(e) == 0;
    if (!passed) continue;
    for (CUevent e : b.events) driver()->cuEventDestroy(e);
    c.blocks.free(b.p);
    c.pending.erase(c.pending.begin() + std::ptrdiff_t(i));
  }
}

uint64_t DriverSegments::map(size_t bytes) {
  use_device(index);
  CUdeviceptr p = 0;
  const CUresult rc = driver()->cuMemAlloc(&p, bytes);
  if (rc == 2) return 0;  // CUDA_ERROR_OUT_OF_MEMORY: the pool gives its cache back and asks again
  check(rc, "cuMemAlloc_v2", cat(bytes, " bytes"));
  g_driver_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return p;
}

void DriverSegments::unmap(uint64_t base, size_t) {
  use_device(index);
  CR_CU(cuMemFree(CUdeviceptr(base)), "emptying the cache");
}

void DriverSegments::quiesce() {
  use_device(index);
  CR_CU(cuCtxSynchronize(), "emptying the cache");  // (work queued on any stream may still use a freed block)
  collect_pending(*cache);
}

std::string mib(size_t n) { return cat(n / (1024.0 * 1024.0), " MiB"); }

}  // namespace

struct Pool {
  int index = 0;
  int key = 0;  // its BlockPool pool
};

namespace {
thread_local Pool* t_pool = nullptr;

// The pool is gone: its segments join the default stream's pool (blocks in use when freed).
void pool_delete(Pool* pool) {
  std::lock_guard<std::mutex> g(g_mutex);
  cache_of(pool->index).blocks.drop_private(pool->key);
  delete pool;
}
}  // namespace

void* device_alloc(size_t nbytes, int index) {
  use_device(index);
  const int slot = current_slot(index);
  std::lock_guard<std::mutex> g(g_mutex);
  DeviceCache& c = cache_of(index);
  if (!c.pending.empty()) collect_pending(c);
  const int key = t_pool && t_pool->index == index ? t_pool->key : slot;
  const uint64_t p = c.blocks.allocate(nbytes, key);
  if (!p) {
    size_t free_b = 0, total = 0;
    driver()->cuMemGetInfo(&free_b, &total);
    fail(cat("out of memory allocating ", mib(nbytes), " on cuda:", index, " (", mib(free_b), " free of ", mib(total),
             ", ", mib(c.blocks.stats().in_use), " held by crescent's tensors)"));
  }
  return reinterpret_cast<void*>(p);
}

void device_free(void* p, size_t nbytes, int index) {
  if (!p) return;
  std::lock_guard<std::mutex> g(g_mutex);
  DeviceCache& c = cache_of(index);
  const CUdeviceptr b = reinterpret_cast<CUdeviceptr>(p);
  auto it = c.uses.find(b);
  if (it == c.uses.end()) {
    if (!c.blocks.free(b))
      fail(cat("device_free: address ", uint64_t(b), " (", nbytes, " bytes) is no block of cuda:", index, "'s allocator"));
    return;
  }
  Pending pend{b, {}};
  const std::vector<int> uses = std::move(it->second);
  c.uses.erase(it);
  use_device(index);
  for (int use : uses) {  // an event after each other stream's work so far
    CUevent e = nullptr;
    CR_CU(cuEventCreate(&e, kEventDisableTiming), "freeing a block used on other streams");
    pend.events.push_back(e);
    CR_CU(cuEventRecord(e, stream_of(int64_t(index) * kSlots + use)), "freeing a block used on other streams");
  }
  c.pending.push_back(std::move(pend));
}

std::shared_ptr<Pool> pool_new(int index) {
  auto* p = new Pool;
  p->index = index;
  {
    std::lock_guard<std::mutex> g(g_mutex);
    p->key = cache_of(index).blocks.new_private();
  }
  return std::shared_ptr<Pool>(p, pool_delete);
}

void pool_enter(Pool* p) { t_pool = p; }

bool pool_owns(const Pool& p, const void* block) {
  std::lock_guard<std::mutex> g(g_mutex);
  bool found = false;
  const int key = cache_of(p.index).blocks.pool_of(reinterpret_cast<uint64_t>(block), &found);
  return found && key == p.key;
}

size_t pool_reserved(const Pool& p) {
  std::lock_guard<std::mutex> g(g_mutex);
  return cache_of(p.index).blocks.pool_reserved(p.key);
}

void record_stream(void* p, int index, int64_t stream) {
  if (!p) return;
  const int slot = stream_slot(stream);
  if (stream_device(stream) != index)
    fail(cat("record_stream: the tensor is on cuda:", index, ", the stream on cuda:", stream_device(stream)));
  std::lock_guard<std::mutex> g(g_mutex);
  DeviceCache& c = cache_of(index);
  const CUdeviceptr b = reinterpret_cast<CUdeviceptr>(p);
  bool found = false;
  const int home = c.blocks.pool_of(b, &found);
  // (a private pool's block: a graph's replays order its uses)
  if (!found || home < 0 || slot == home || !c.blocks.block_size(b)) return;
  std::vector<int>& uses = c.uses[b];
  if (std::find(uses.begin(), uses.end(), slot) == uses.end()) uses.push_back(slot);
}

void empty_cache() {
  if (!available()) return;
  std::lock_guard<std::mutex> g(g_mutex);
  for (auto& [index, c] : g_caches) c->blocks.release_cached();
}

MemoryStats memory_stats(int index) {
  std::lock_guard<std::mutex> g(g_mutex);
  auto it = g_caches.find(index);
  if (it == g_caches.end()) return MemoryStats{};
  // (a block freed while another stream used it is in use only until that stream passes)
  if (!it->second->pending.empty()) {
    use_device(index);
    collect_pending(*it->second);
  }
  return it->second->blocks.stats();
}

void reset_peak_memory(int index) {
  std::lock_guard<std::mutex> g(g_mutex);
  if (auto it = g_caches.find(index); it != g_caches.end()) it->second->blocks.reset_peak();
}

size_t driver_bytes_total() { return g_driver_bytes.load(std::memory_order_relaxed); }

size_t garbage_budget() {
  constexpr size_t kMin = size_t(64) << 20, kMax = size_t(4) << 30;
  size_t budget = kMax;
  std::lock_guard<std::mutex> g(g_mutex);
  for (auto& [index, c] : g_caches) {
    size_t free_b = 0, total = 0;
    use_device(index);
    if (driver()->cuMemGetInfo(&free_b, &total) != 0) return kMin;
    const MemoryStats& s = c->blocks.stats();
    budget = std::min(budget, (free_b + (s.reserved - s.in_use)) / 4);
  }
  return std::max(budget, kMin);
}

static CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// Copies and fills go to the current stream. A host source is ours (pageable, never registered):
// the driver has staged it when the call returns, so the caller may reuse it at once.
void copy_to_device(void* dst, const void* src, size_t n, int index) {
  if (n == 0) return;
  use_device(index);
  // a captured copy would read this host memory again at every replay, long after it was freed
  if (capturing(index))
    throw Error(cat("a copy of ", n, " bytes from host memory cannot be recorded into a CUDA graph (a host op: ",
                    "CRESCENT_LOGS=host_ops names it)"));
  CR_CU(cuMemcpyHtoDAsync(dptr(dst), src, n, current_stream(index)), cat(n, " bytes to cuda:", index));
}
void copy_to_host(void* dst, const void* src, size_t n, int index) {
  if (n == 0) return;
  use_device(index);
  CUstream s = current_stream(index);
  CR_CU(cuMemcpyDtoHAsync(dst, dptr(src), n, s), cat(n, " bytes from cuda:", index));
  CR_CU(cuStreamSynchronize(s), cat(n, " bytes from cuda:", index));
  check_deferred(index, s, false);
}
void copy_on_device(void* dst, const void* src, size_t n, int index) {
  if (n == 0) return;
  use_device(index);
  CR_CU(cuMemcpyDtoDAsync(dptr(dst), dptr(src), n, current_stream(index)), cat(n, " bytes on cuda:", index));
}
void copy_rows(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height, int index) {
  if (width == 0 || height == 0) return;
  use_device(index);
  CudaMemcpy2D c{};
  c.src_type = c.dst_type = 2;
  c.src_device = dptr(src);
  c.src_pitch = spitch;
  c.dst_device = dptr(dst);
  c.dst_pitch = dpitch;
  c.width_bytes = width;
  c.height = height;
  CR_CU(cuMemcpy2DAsync(&c, current_stream(index)), cat(height, " rows of ", width, " bytes on cuda:", index));
}
void fill_pattern(void* dst, size_t count, int width, uint64_t pattern, int index) {
  if (count == 0) return;
  use_device(index);
  CUstream s = current_stream(index);
  if (width == 1) CR_CU(cuMemsetD8Async(dptr(dst), static_cast<unsigned char>(pattern), count, s), "fill");
  else if (width == 2) CR_CU(cuMemsetD16Async(dptr(dst), static_cast<unsigned short>(pattern), count, s), "fill");
  else if (width == 4) CR_CU(cuMemsetD32Async(dptr(dst), unsigned(pattern), count, s), "fill");
  else  // 8 bytes: each half word as a column of 4-byte rows 8 bytes apart (little-endian)
    for (int half = 0; half < 2; ++half) {
      const unsigned word = unsigned(pattern >> (32 * half));
      CR_CU(cuMemsetD2D32Async(dptr(static_cast<char*>(dst) + 4 * half), 8, word, 1, count, s), "fill");
    }
}

void synchronize(int index) {
  use_device(index);
  CR_CU(cuCtxSynchronize(), cat("synchronising cuda:", index));
  check_deferred(index, nullptr, true);
}

}  // namespace cr::cuda
