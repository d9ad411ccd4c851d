// Host memory for tensor storage: 64-byte aligned blocks, with small blocks (<= 1 MiB) cached
// in power-of-two size classes. Eager ops allocate and free a result per op; without the cache
// glibc's malloc/free (consolidation of aligned chunks) was ~40% of the per-op time.
#pragma once
#include <cstddef>

namespace cr {
void* host_alloc(size_t nbytes);           // null on failure; nbytes may be 0
void host_free(void* p, size_t nbytes);    // nbytes as given to host_alloc
void host_cache_clear();                   // gives cached blocks back to the system
}  // namespace cr
