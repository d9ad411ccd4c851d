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
  int s = kMinShift;
  while ((size_t(1) << s) < n) ++s;
  return s;
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
  for (auto& v : k.small) {
    for (void* p : v) std::free(p);
    v.clear();
  }
  for (auto& [n, p] : k.large) std::free(p);
  k.large.clear();
  k.large_bytes = 0;
}

}  // namespace cr
