#include "vm/alloc.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

namespace cr {
namespace {

constexpr int kMinShift = 6, kMaxShift = 20;                      // small classes: 64 B .. 1 MiB
constexpr size_t kMaxCachedBytesPerClass = size_t(16) << 20;      // Lua's GC frees in bursts
constexpr size_t kMaxCachedLargeBytes = size_t(512) << 20;

// Large blocks are cached too: a fresh multi-megabyte block from the system costs a page fault
// per 4 KiB on first touch, as much as a memory-bound op itself. Sizes are rounded up to 1/8
// of their power of two so that blocks of similar size are reused.
struct Cache {
  std::mutex m;
  std::vector<void*> small[kMaxShift + 1];
  std::multimap<size_t, void*> large;
  size_t large_bytes = 0;
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may be freed during exit
  return *c;
}

int size_class(size_t n) {
  if (n <= (size_t(1) << kMinShift)) return kMinShift;
  return 64 - __builtin_clzll(n - 1);  // the smallest s with 2^s >= n
}

// Headers (cr_tensor, Storage) and tiny data blocks come and go with every op: a small per-thread
// front cache serves them without the global lock; it spills to and refills from the global cache.
constexpr int kFrontMaxShift = 9;  // classes up to 512 B
constexpr size_t kFrontDepth = 1024;  // the GC frees handles in bursts of hundreds
struct Front {
  std::vector<void*> blocks[kFrontMaxShift + 1];
  ~Front() {  // a thread's blocks go back to the global cache (never leaked)
    Cache& k = cache();
    std::lock_guard<std::mutex> g(k.m);
    for (int c = 0; c <= kFrontMaxShift; ++c)
      for (void* p : blocks[c]) k.small[c].push_back(p);
  }
};
Front& front() {
  thread_local Front f;
  return f;
}

size_t large_rounded(size_t n) {
  int s = size_class(n);
  size_t step = size_t(1) << (s - 3);
  return (n + step - 1) / step * step;
}

}  // namespace

void* host_alloc(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  Cache& k = cache();
  if (nbytes > (size_t(1) << kMaxShift)) {
    size_t n = large_rounded(nbytes);
    {
      std::lock_guard<std::mutex> g(k.m);
      auto it = k.large.find(n);
      if (it != k.large.end()) {
        void* p = it->second;
        k.large.erase(it);
        k.large_bytes -= n;
        return p;
      }
    }
    return std::aligned_alloc(64, n);
  }
  int c = size_class(nbytes);
  if (c <= kFrontMaxShift) {
    auto& f = front().blocks[c];
    if (!f.empty()) {
      void* p = f.back();
      f.pop_back();
      return p;
    }
  }
  {
    std::lock_guard<std::mutex> g(k.m);
    if (!k.small[c].empty()) {
      void* p = k.small[c].back();
      k.small[c].pop_back();
      return p;
    }
  }
  return std::aligned_alloc(64, size_t(1) << c);
}

void host_free(void* p, size_t nbytes) {
  if (!p) return;
  if (nbytes == 0) nbytes = 1;
  Cache& k = cache();
  if (nbytes > (size_t(1) << kMaxShift)) {
    size_t n = large_rounded(nbytes);
    {
      std::lock_guard<std::mutex> g(k.m);
      if (k.large_bytes + n <= kMaxCachedLargeBytes) {
        k.large.emplace(n, p);
        k.large_bytes += n;
        return;
      }
    }
    return std::free(p);
  }
  int c = size_class(nbytes);
  if (c <= kFrontMaxShift) {
    auto& f = front().blocks[c];
    if (f.size() < kFrontDepth) {
      if (f.capacity() == 0) f.reserve(kFrontDepth);
      f.push_back(p);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> g(k.m);
    if ((k.small[c].size() + 1) << c <= kMaxCachedBytesPerClass) {
      k.small[c].push_back(p);
      return;
    }
  }
  std::free(p);
}

void host_cache_clear() {
  Cache& k = cache();
  std::lock_guard<std::mutex> g(k.m);
  for (auto& v : front().blocks) {
    for (void* p : v) std::free(p);
    v.clear();
  }
  for (auto& v : k.small) {
    for (void* p : v) std::free(p);
    v.clear();
  }
  for (auto& [n, p] : k.large) std::free(p);
  k.large.clear();
  k.large_bytes = 0;
}

}  // namespace cr
