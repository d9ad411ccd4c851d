#include "vm/cuda/memory.hpp"

#include <atomic>
#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>
#include <mutex>
#include <vector>

#include "vm/cuda/checks.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/error.hpp"

namespace cr::cuda {
namespace {

constexpr unsigned kEventDisableTiming = 2;
constexpr size_t kMinBlock = 512, kSmallLimit = size_t(1) << 20, kStepLimit = size_t(64) << 20,
                 kLargeStep = size_t(2) << 20;

// Powers of two up to 1 MiB; then four classes per power of two (p < n <= 2p rounds up to a
// quarter of p), so a block wastes at most a fifth of itself; 2 MiB steps past 64 MiB.
size_t size_class(size_t n) {
  if (n <= kMinBlock) return kMinBlock;
  size_t p = kMinBlock;
  while (p < n && p < kSmallLimit) p <<= 1;
  if (n <= kSmallLimit) return p;
  if (n <= kStepLimit) {
    while (p * 2 < n) p <<= 1;
    const size_t q = p / 4;
    return (n + q - 1) / q * q;
  }
  return (n + kLargeStep - 1) / kLargeStep * kLargeStep;
}

// A block allocated on a stream other than the default one, or used on other streams
// (record_stream): the stream whose pool it returns to, and the others (slots).
struct Owner {
  int slot = 0;
  std::vector<int> uses;
};
// A freed block that other streams' work may still read: it joins its pool when their events
// have passed.
struct Pending {
  CUdeviceptr p = 0;
  size_t size = 0;
  int slot = 0;
  std::vector<CUevent> events;
};

struct DeviceCache {
  // per stream slot (vm/cuda/streams.hpp): size class -> cached blocks. A block freed by one
  // stream is only handed out again to that stream, whose order makes the reuse safe.
  std::array<std::map<size_t, std::vector<CUdeviceptr>>, kPoolStreams + 1> free;
  std::unordered_map<CUdeviceptr, Owner> owners;  // empty while only the default stream allocates
  std::vector<Pending> pending;
  MemoryStats stats;
};

std::mutex g_mutex;
std::map<int, DeviceCache> g_caches;
std::atomic<size_t> g_driver_bytes{0};

// Moves the pending blocks whose events have all passed into their pools.
void collect_pending(DeviceCache& c) {
  for (size_t i = c.pending.size(); i-- > 0;) {
    Pending& b = c.pending[i];
    bool passed = true;
    for (CUevent e : b.events) passed = passed && driver()->cuEventQuery(e) == 0;
    if (!passed) continue;
    for (CUevent e : b.events) driver()->cuEventDestroy(e);
    c.free[size_t(b.slot)][b.size].push_back(b.p);
    c.pending.erase(c.pending.begin() + std::ptrdiff_t(i));
  }
}

void release_cached(int index, DeviceCache& c) {
  use_device(index);
  CR_CU(cuCtxSynchronize(), "emptying the cache");  // (work queued on any stream may still use a freed block)
  collect_pending(c);
  for (auto& pool : c.free) {
    for (auto& [size, blocks] : pool) {
      for (CUdeviceptr p : blocks) {
        CR_CU(cuMemFree(p), "emptying the cache");
        c.stats.reserved -= size;
        ++c.stats.driver_frees;
      }
    }
    pool.clear();
  }
}

std::string mib(size_t n) { return cat(n / (1024.0 * 1024.0), " MiB"); }

// A block of `size` bytes for stream `slot`: a cached one, or one from the driver.
CUdeviceptr take_block(DeviceCache& c, size_t size, size_t nbytes, int slot, int index) {
  auto& pool = c.free[size_t(slot)];
  auto it = pool.find(size);
  if (it != pool.end() && !it->second.empty()) {
    CUdeviceptr p = it->second.back();
    it->second.pop_back();
    ++c.stats.cache_hits;
    return p;
  }
  CUdeviceptr p = 0;
  CUresult rc = driver()->cuMemAlloc(&p, size);
  if (rc == 2) {  // CUDA_ERROR_OUT_OF_MEMORY: give the cache back and try once more
    release_cached(index, c);
    rc = driver()->cuMemAlloc(&p, size);
  }
  if (rc == 2) {
    size_t free_b = 0, total = 0;
    driver()->cuMemGetInfo(&free_b, &total);
    fail(cat("out of memory allocating ", mib(nbytes), " on cuda:", index, " (", mib(free_b), " free of ", mib(total),
             ", ", mib(c.stats.in_use), " held by crescent's tensors)"));
  }
  check(rc, "cuMemAlloc_v2", cat(nbytes, " bytes"));
  ++c.stats.driver_allocs;
  c.stats.reserved += size;
  g_driver_bytes.fetch_add(size, std::memory_order_relaxed);
  return p;
}

}  // namespace

struct Pool {
  int index = 0;
  std::map<size_t, std::vector<CUdeviceptr>> free;
  std::unordered_map<CUdeviceptr, size_t> blocks;  // every block it holds: its size class
};

namespace {
thread_local Pool* t_pool = nullptr;
std::unordered_map<CUdeviceptr, Pool*> g_pool_blocks;  // (g_mutex) null: its pool is gone

// The pool is gone: its free blocks join the shared cache, the others when they are freed.
void pool_delete(Pool* pool) {
  std::lock_guard<std::mutex> g(g_mutex);
  DeviceCache& c = g_caches[pool->index];
  for (auto& [size, list] : pool->free)
    for (CUdeviceptr b : list) {
      c.free[0][size].push_back(b);
      pool->blocks.erase(b);
      g_pool_blocks.erase(b);
    }
  for (auto& [b, size] : pool->blocks) g_pool_blocks[b] = nullptr;
  delete pool;
}
}  // namespace

void* device_alloc(size_t nbytes, int index) {
  use_device(index);
  const size_t size = size_class(nbytes);
  const int slot = current_slot(index);
  std::lock_guard<std::mutex> g(g_mutex);
  DeviceCache& c = g_caches[index];
  if (!c.pending.empty()) collect_pending(c);
  Pool* pool = t_pool && t_pool->index == index ? t_pool : nullptr;
  CUdeviceptr p = 0;
  if (pool) {
    auto it = pool->free.find(size);
    if (it != pool->free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      ++c.stats.cache_hits;
    } else {
      p = take_block(c, size, nbytes, slot, index);
      pool->blocks[p] = size;
      g_pool_blocks[p] = pool;
    }
  } else {
    p = take_block(c, size, nbytes, slot, index);
    if (slot) c.owners[p] = Owner{slot, {}};
  }
  c.stats.in_use += size;
  return reinterpret_cast<void*>(p);
}

void device_free(void* p, size_t nbytes, int index) {
  if (!p) return;
  const size_t size = size_class(nbytes);
  std::lock_guard<std::mutex> g(g_mutex);
  DeviceCache& c = g_caches[index];
  c.stats.in_use -= size;
  const CUdeviceptr b = reinterpret_cast<CUdeviceptr>(p);
  if (auto pit = g_pool_blocks.find(b); pit != g_pool_blocks.end()) {
    Pool* pool = pit->second;
    if (pool) {
      pool->free[size].push_back(b);
      return;
    }
    g_pool_blocks.erase(pit);  // (its pool is gone: an ordinary block from now on)
  }
  auto it = c.owners.find(b);
  if (it == c.owners.end()) {
    c.free[0][size].push_back(b);
    return;
  }
  Owner o = std::move(it->second);
  c.owners.erase(it);
  if (o.uses.empty()) {
    c.free[size_t(o.slot)][size].push_back(b);
    return;
  }
  Pending pend{b, size, o.slot, {}};
  use_device(index);
  for (int use : o.uses) {  // an event after each other stream's work so far
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
  return std::shared_ptr<Pool>(p, pool_delete);
}

void pool_enter(Pool* p) { t_pool = p; }

bool pool_owns(const Pool& p, const void* block) {
  std::lock_guard<std::mutex> g(g_mutex);
  return p.blocks.count(reinterpret_cast<CUdeviceptr>(block)) != 0;
}

size_t pool_reserved(const Pool& p) {
  std::lock_guard<std::mutex> g(g_mutex);
  size_t n = 0;
  for (auto& [b, size] : p.blocks) n += size;
  return n;
}

void record_stream(void* p, int index, int64_t stream) {
  if (!p) return;
  const int slot = stream_slot(stream);
  if (stream_device(stream) != index)
    fail(cat("record_stream: the tensor is on cuda:", index, ", the stream on cuda:", stream_device(stream)));
  std::lock_guard<std::mutex> g(g_mutex);
  DeviceCache& c = g_caches[index];
  const CUdeviceptr b = reinterpret_cast<CUdeviceptr>(p);
  auto it = c.owners.find(b);
  const int home = it == c.owners.end() ? 0 : it->second.slot;
  if (slot == home) return;
  Owner& o = c.owners[b];
  o.slot = home;
  if (std::find(o.uses.begin(), o.uses.end(), slot) == o.uses.end()) o.uses.push_back(slot);
}

void empty_cache() {
  if (!available()) return;
  std::lock_guard<std::mutex> g(g_mutex);
  for (auto& [index, c] : g_caches) release_cached(index, c);
}

MemoryStats memory_stats(int index) {
  std::lock_guard<std::mutex> g(g_mutex);
  auto it = g_caches.find(index);
  return it == g_caches.end() ? MemoryStats{} : it->second.stats;
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
    budget = std::min(budget, (free_b + (c.stats.reserved - c.stats.in_use)) / 4);
  }
  return std::max(budget, kMin);
}

static CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// Copies and fills go to the current stream. A host source is ours (pageable, never registered):
// the driver has staged it when the call returns, so the caller may reuse it at once.
void copy_to_device(void* dst, const void* src, size_t n, int index) {
  if (n == 0) return;
  use_device(index);
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
void fill_pattern(void* dst, size_t count, int width, uint32_t pattern, int index) {
  if (count == 0) return;
  use_device(index);
  CUstream s = current_stream(index);
  if (width == 1) CR_CU(cuMemsetD8Async(dptr(dst), static_cast<unsigned char>(pattern), count, s), "fill");
  else CR_CU(cuMemsetD32Async(dptr(dst), pattern, count, s), "fill");
}

void synchronize(int index) {
  use_device(index);
  CR_CU(cuCtxSynchronize(), cat("synchronising cuda:", index));
  check_deferred(index, nullptr, true);
}

}  // namespace cr::cuda
