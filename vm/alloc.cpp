#include "vm/alloc.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "vm/fork.hpp"

namespace cr {
namespace {

constexpr int kMinShift = 6, kMaxShift = 20;                      // small classes: 64 B .. 1 MiB
constexpr size_t kMaxCachedBytesPerClass = size_t(16) << 20;      // Lua's GC frees in bursts
constexpr size_t kMaxCachedLargeBytes = size_t(512) << 20;

// Small blocks are carved, a batch of a class at a time, from 2 MiB chunks of huge pages (a fault
// each): a heap grown 4 KiB at a time faults per page, tens of us in a VM, and a compiled function's
// first calls grow it by the lazy tensors Lua has not collected yet. Chunks are never given back.
constexpr int kArenaMaxShift = 16;  // classes up to 64 KiB
struct Arena {
  char* next = nullptr;
  char* end = nullptr;
  std::vector<uintptr_t> chunks;  // sorted starts
};

// Large blocks are cached too: a fresh multi-megabyte block from the system costs a page fault
// per 4 KiB on first touch, as much as a memory-bound op itself. Sizes are rounded up to 1/8
// of their power of two so that blocks of similar size are reused.
struct Cache {
  std::mutex m;
  std::vector<void*> small[kMaxShift + 1];
  std::multimap<size_t, void*> large;
  size_t large_bytes = 0;
  Arena arena;
};
void drop_large_blocks();
Cache& cache() {
  static Cache* c = [] {
    auto* k = new Cache;  // never destroyed: tensors may be freed during exit
    fork_guard(k->m);
    on_fork_child(drop_large_blocks);
    return k;
  }();
  return *c;
}

int size_class(size_t n) {
  if (n <= (size_t(1) << kMinShift)) return kMinShift;
  return 64 - __builtin_clzll(n - 1);  // the smallest s with 2^s >= n
}

// Headers (cr_tensor, Storage) and tiny data blocks come and go with every op: a small per-thread
// front cache serves them without the global lock; it spills to and refills from the global cache.
constexpr int kFrontMaxShift = 9;  // classes up to 512 B
// The GC frees a call's lazy tensors long after the call, thousands at a time (a collection
// cycle spans hundreds of compiled calls of 60 ops): the front holds such a burst (4 MiB of a
// class, at least 1024 blocks) rather than spilling it block by block under the global lock.
constexpr size_t front_depth(int c) { return std::max<size_t>(1024, (size_t(4) << 20) >> c); }
// A thread's tensors may be freed after its front cache is destroyed: by the thread_local
// objects constructed before it, or, on the main thread, by static objects (a global
// crescent::VM) destroyed after the thread-local ones. The flag (trivially destructible, so still
// readable then) sends those frees to the global cache.
thread_local bool t_front_gone = false;
struct Front {
  std::vector<void*> blocks[kFrontMaxShift + 1];
  ~Front() {  // a thread's blocks go back to the global cache (never leaked)
    Cache& k = cache();
    std::lock_guard<std::mutex> g(k.m);
    for (int c = 0; c <= kFrontMaxShift; ++c)
      for (void* p : blocks[c]) k.small[c].push_back(p);
    t_front_gone = true;
  }
};
Front* front() {
  if (t_front_gone) return nullptr;
  thread_local Front f;
  return &f;
}

size_t large_rounded(size_t n) {
  int s = size_class(n);
  size_t step = size_t(1) << (s - 3);
  return (n + step - 1) / step * step;
}

// Large blocks come straight from mmap, with MADV_HUGEPAGE and 2 MiB alignment for blocks of 2 MiB
// or more: a fresh 16 MB output faults 8 times instead of 4096 (transparent huge pages are often
// "madvise" only). No MADV_DONTFORK: a worker fork()ed after its model was loaded reads the weights.
constexpr size_t kHuge = size_t(2) << 20;
// gcc says __SANITIZE_ADDRESS__, clang (the fuzz build) __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
#define CR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CR_ASAN 1
#endif
#endif
#if defined(CR_ASAN)
// AddressSanitizer does not watch mmap'd memory: the sanitizer build keeps malloc'd blocks, so an
// out-of-bounds access of a large tensor is still reported.
void* large_map(size_t n) { return std::aligned_alloc(64, n); }
void large_unmap(void* p, size_t) { std::free(p); }
#else
void* map_aligned(size_t n) {
  size_t align = n >= kHuge ? kHuge : 4096;
  size_t span = n + align - 4096;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  uintptr_t lo = reinterpret_cast<uintptr_t>(raw), start = (lo + align - 1) / align * align;
  if (start > lo) munmap(raw, start - lo);
  if (lo + span > start + n) munmap(reinterpret_cast<void*>(start + n), lo + span - (start + n));
  void* p = reinterpret_cast<void*>(start);
  if (n >= kHuge) madvise(p, n, MADV_HUGEPAGE);
  return p;
}
void* large_map(size_t n) { return map_aligned(n); }
void large_unmap(void* p, size_t n) { munmap(p, n); }
#endif

#if defined(CR_ASAN)
void* carve(Arena&, std::vector<void*>&, int) { return nullptr; }  // blocks stay malloc'd, watched
bool in_arena(const Arena&, const void*) { return false; }
#else
// One block of class c, with more of the batch pushed to `spare`; null when no chunk can be mapped.
void* carve(Arena& a, std::vector<void*>& spare, int c) {
  constexpr size_t kBatchBytes = size_t(64) << 10;  // carved per miss of a class
  const size_t size = size_t(1) << c, n = std::max<size_t>(1, kBatchBytes >> c);
  if (size_t(a.end - a.next) < n * size) {
    char* chunk = static_cast<char*>(map_aligned(kHuge));
    if (!chunk) return nullptr;
    a.chunks.insert(std::upper_bound(a.chunks.begin(), a.chunks.end(), uintptr_t(chunk)), uintptr_t(chunk));
    a.next = chunk;
    a.end = chunk + kHuge;
  }
  for (size_t i = 1; i < n; ++i) spare.push_back(a.next + i * size);
  void* p = a.next;
  a.next += n * size;
  return p;
}
bool in_arena(const Arena& a, const void* p) {
  uintptr_t chunk = uintptr_t(p) & ~uintptr_t(kHuge - 1);
  return std::binary_search(a.chunks.begin(), a.chunks.end(), chunk);
}
#endif

// In a fork()ed child: the cached free blocks are shared copy-on-write with the parent, which
// would copy each page it writes in one again while the child lives. The child lets them go.
void drop_large_blocks() {
  Cache& k = cache();
  std::lock_guard<std::mutex> g(k.m);
  for (auto& [n, p] : k.large) large_unmap(p, n);
  k.large.clear();
  k.large_bytes = 0;
}

}  // namespace

void* host_alloc(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  Cache& k = cache();
  if (nbytes > (size_t(1) << kMaxShift)) {
    size_t n = large_rounded(nbytes);
    {
      std::lock_guard<std::mutex> g(k.m);
      // the most recently freed block of this size: likeliest to be still in the cache
      auto it = k.large.upper_bound(n);
      if (it != k.large.begin() && (--it)->first == n) {
        void* p = it->second;
        k.large.erase(it);
        k.large_bytes -= n;
        return p;
      }
    }
    return large_map(n);
  }
  int c = size_class(nbytes);
  Front* fr = c <= kFrontMaxShift ? front() : nullptr;
  if (fr) {
    auto& f = fr->blocks[c];
    if (!f.empty()) {
      void* p = f.back();
      f.pop_back();
      // The next block handed out was freed long ago (see front_depth): its lines are fetched
      // now, while this one is used, instead of stalling the next op's header writes.
      if (!f.empty())
        for (size_t o = 0; o < (size_t(1) << c); o += 64) __builtin_prefetch(static_cast<char*>(f.back()) + o, 1);
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
    if (c <= kArenaMaxShift)
      if (void* p = carve(k.arena, k.small[c], c)) return p;
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
    return large_unmap(p, n);
  }
  int c = size_class(nbytes);
  Front* fr = c <= kFrontMaxShift ? front() : nullptr;
  if (fr) {
    auto& f = fr->blocks[c];
    if (f.size() < front_depth(c)) {
      if (f.capacity() == 0) f.reserve(1024);
      f.push_back(p);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> g(k.m);
    if ((k.small[c].size() + 1) << c <= kMaxCachedBytesPerClass || in_arena(k.arena, p)) {
      k.small[c].push_back(p);
      return;
    }
  }
  std::free(p);
}

// (Blocks of the arena's chunks stay cached: a chunk goes back only with all of its blocks.)
void host_cache_clear() {
  Cache& k = cache();
  std::lock_guard<std::mutex> g(k.m);
  auto clear = [&](std::vector<void*>& v) {
    std::erase_if(v, [&](void* p) { return in_arena(k.arena, p) ? false : (std::free(p), true); });
  };
  if (Front* fr = front())
    for (auto& v : fr->blocks) clear(v);
  for (auto& v : k.small) clear(v);
  for (auto& [n, p] : k.large) large_unmap(p, n);
  k.large.clear();
  k.large_bytes = 0;
}

bool host_chunks_own(const void* p) {
  Cache& k = cache();
  std::lock_guard<std::mutex> g(k.m);
  return in_arena(k.arena, p);
}

size_t host_chunk_bytes() {
  Cache& k = cache();
  std::lock_guard<std::mutex> g(k.m);
  return k.arena.chunks.size() * kHuge;
}

}  // namespace cr
