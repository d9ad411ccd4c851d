#include "jit/cuda/memory.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "jit/cuda/checks.hpp"
#include "jit/cuda/driver.hpp"
#include "vm/error.hpp"

namespace cr::cuda {
namespace {

constexpr size_t kMinBlock = 512, kPow2Limit = size_t(64) << 20, kLargeStep = size_t(2) << 20;

size_t size_class(size_t n) {
  if (n <= kMinBlock) return kMinBlock;
  if (n <= kPow2Limit) {
    size_t c = kMinBlock;
    while (c < n) c <<= 1;
    return c;
  }
  return (n + kLargeStep - 1) / kLargeStep * kLargeStep;
}

struct DeviceCache {
  std::map<size_t, std::vector<CUdeviceptr>> free;  // size class -> cached blocks
  MemoryStats stats;
};

std::mutex g_mutex;
std::map<int, DeviceCache> g_caches;

void release_cached(int index, DeviceCache& c) {
  use_device(index);
  for (auto& [size, blocks] : c.free) {
    for (CUdeviceptr p : blocks) {
      CR_CU(cuMemFree(p), "emptying the cache");
      c.stats.reserved -= size;
      ++c.stats.driver_frees;
    }
  }
  c.free.clear();
}

std::string mib(size_t n) { return cat(n / (1024.0 * 1024.0), " MiB"); }

}  // namespace

void* device_alloc(size_t nbytes, int index) {
  use_device(index);
  const size_t size = size_class(nbytes);
  std::lock_guard<std::mutex> g(g_mutex);
  DeviceCache& c = g_caches[index];
  c.stats.in_use += size;
  auto it = c.free.find(size);
  if (it != c.free.end() && !it->second.empty()) {
    CUdeviceptr p = it->second.back();
    it->second.pop_back();
    ++c.stats.cache_hits;
    return reinterpret_cast<void*>(p);
  }
  CUdeviceptr p = 0;
  CUresult rc = driver()->cuMemAlloc(&p, size);
  if (rc == 2) {  // CUDA_ERROR_OUT_OF_MEMORY: give the cache back and try once more
    release_cached(index, c);
    rc = driver()->cuMemAlloc(&p, size);
  }
  if (rc == 2) {
    c.stats.in_use -= size;
    size_t free_b = 0, total = 0;
    driver()->cuMemGetInfo(&free_b, &total);
    fail(cat("out of memory allocating ", mib(nbytes), " on cuda:", index, " (", mib(free_b), " free of ", mib(total),
             ", ", mib(c.stats.in_use), " held by crescent's tensors)"));
  }
  if (rc != 0) c.stats.in_use -= size;
  check(rc, "cuMemAlloc_v2", cat(nbytes, " bytes"));
  ++c.stats.driver_allocs;
  c.stats.reserved += size;
  return reinterpret_cast<void*>(p);
}

void device_free(void* p, size_t nbytes, int index) {
  if (!p) return;
  const size_t size = size_class(nbytes);
  std::lock_guard<std::mutex> g(g_mutex);
  DeviceCache& c = g_caches[index];
  c.stats.in_use -= size;
  c.free[size].push_back(reinterpret_cast<CUdeviceptr>(p));
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

void copy_to_device(void* dst, const void* src, size_t n, int index) {
  if (n == 0) return;
  use_device(index);
  CR_CU(cuMemcpyHtoD(dptr(dst), src, n), cat(n, " bytes to cuda:", index));
}
void copy_to_host(void* dst, const void* src, size_t n, int index) {
  if (n == 0) return;
  use_device(index);
  CR_CU(cuMemcpyDtoH(dst, dptr(src), n), cat(n, " bytes from cuda:", index));
  jit::cuda::check_deferred(index);
}
void copy_on_device(void* dst, const void* src, size_t n, int index) {
  if (n == 0) return;
  use_device(index);
  CR_CU(cuMemcpyDtoD(dptr(dst), dptr(src), n), cat(n, " bytes on cuda:", index));
}
void fill_pattern(void* dst, size_t count, int width, uint32_t pattern, int index) {
  if (count == 0) return;
  use_device(index);
  if (width == 1) CR_CU(cuMemsetD8(dptr(dst), static_cast<unsigned char>(pattern), count), "fill");
  else CR_CU(cuMemsetD32(dptr(dst), pattern, count), "fill");
}

void synchronize(int index) {
  use_device(index);
  CR_CU(cuCtxSynchronize(), cat("synchronising cuda:", index));
  jit::cuda::check_deferred(index);
}

}  // namespace cr::cuda
