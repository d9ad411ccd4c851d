// Host memory for tensor storage: 64-byte aligned blocks, with small blocks (<= 1 MiB) cached
// in power-of-two size classes. Eager ops allocate and free a result per op; without the cache
// glibc's malloc/free (consolidation of aligned chunks) was ~40% of the per-op time.
#pragma once
#include <cstddef>
#include <new>

namespace cr {
void* host_alloc(size_t nbytes);           // null on failure; nbytes may be 0
void host_free(void* p, size_t nbytes);    // nbytes as given to host_alloc
void host_cache_clear();                   // gives cached blocks back to the system
// Small blocks (<= 64 KiB) are carved from 2 MiB chunks (alloc.cpp says why); for tests. A
// sanitizer build has no chunks: its blocks stay malloc's, which the sanitizer watches.
bool host_chunks_own(const void* p);
size_t host_chunk_bytes();                 // mapped for small blocks so far

// For runtime objects that live as long as tensors do (e.g. a lazy tensor's record): their
// memory comes from the same caches, not from a heap that grows a page at a time.
template <class T> struct HostAllocator {
  using value_type = T;
  HostAllocator() = default;
  template <class U> HostAllocator(const HostAllocator<U>&) {}
  T* allocate(size_t n) {
    if (void* p = host_alloc(n * sizeof(T))) return static_cast<T*>(p);
    throw std::bad_alloc();
  }
  void deallocate(T* p, size_t n) { host_free(p, n * sizeof(T)); }
  template <class U> bool operator==(const HostAllocator<U>&) const { return true; }
};
// n uninitialised elements of T from host_alloc's caches: a kernel's scratch without fresh
// pages per call.
template <class T> struct Scratch {
  T* p;
  size_t n;
  explicit Scratch(size_t count) : p(static_cast<T*>(host_alloc(count * sizeof(T)))), n(count) {
    if (!p) throw std::bad_alloc();
  }
  ~Scratch() { host_free(p, n * sizeof(T)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};
}  // namespace cr
