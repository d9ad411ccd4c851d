// Device memory: a caching allocator per device, and copies between host and device.
//
// Eager ops free a result per op; a driver allocation (cuMemAlloc) synchronises the device and
// costs tens of microseconds, so memory is taken in segments and freed blocks are handed out
// again, split and merged as PyTorch's caching allocator does (vm/cuda/block_pool.hpp): no driver
// allocation per op in steady state, and freed memory serves requests of other sizes.
// empty_cache() (T.cuda.empty_cache(), T.compiler.reset()) gives the fully free segments back;
// an allocation that fails empties the cache and tries once more before it raises.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "vm/cuda/block_pool.hpp"

namespace cr::cuda {

void* device_alloc(size_t nbytes, int index);  // throws cr::Error "out of memory ... on cuda:N"
void device_free(void* p, size_t nbytes, int index);
// Streams (vm/cuda/streams.hpp): segments are kept per stream - the one current at their
// allocation - and their blocks only handed out again on that stream. record_stream(p, i, s) says a block's
// memory is also used by stream s's work (Tensor:record_stream): when freed, it waits for the work
// s has queued by then, as PyTorch's caching allocator does.
void record_stream(void* p, int index, int64_t stream);
void empty_cache();

// A private memory pool (CUDA graphs, vm/cuda/graphs.hpp): while a thread has entered one, its
// allocations on the pool's device come from the pool, and a pool block freed at any time goes
// back to the pool, never to the shared cache - a graph replays into those addresses, so no
// other tensor may get them while the pool lives. Dropping the last reference gives the pool's
// segments to the default stream's pool; blocks still in use join it when freed.
struct Pool;
std::shared_ptr<Pool> pool_new(int index);
void pool_enter(Pool* p);  // null: leave
bool pool_owns(const Pool& p, const void* block);
size_t pool_reserved(const Pool& p);  // bytes of its segments

MemoryStats memory_stats(int index);  // (block_pool.hpp)
void reset_peak_memory(int index);  // the peaks start again from the current figures
// How many bytes of dropped tensors the devices may hold until Lua collects them: a quarter of
// the memory the busiest device could still hand out (free in the driver or cached here),
// between 64 MiB and 4 GiB (a collection every 64 calls of a kernel writing 64 MiB). See note_allocations (vm/lua/api.cpp).
size_t garbage_budget();
// Bytes taken from the driver (cuMemAlloc) so far, on every device: the collector runs after each
// 64 MiB of them (vm/lua/api.cpp), so dropped blocks are handed out again before the driver is asked
// for more - a program's first few GiB of outputs would otherwise each cost a cuMemAlloc.
size_t driver_bytes_total();

// Copies on the current stream, ordered after its earlier launches; copy_to_host waits for it.
// copy_to_host and synchronize then raise what the kernels' checks found (vm/cuda/checks.hpp).
void copy_to_device(void* dst, const void* src, size_t n, int index);
void copy_to_host(void* dst, const void* src, size_t n, int index);
void copy_on_device(void* dst, const void* src, size_t n, int index);
void synchronize(int index);
// `height` rows of `width` bytes, `spitch` apart in src, to rows `dpitch` apart in dst.
void copy_rows(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height, int index);
// Sets `count` elements of `width` bytes (1, 2, 4 or 8) to `pattern`, on the device.
void fill_pattern(void* dst, size_t count, int width, uint64_t pattern, int index);

}  // namespace cr::cuda
