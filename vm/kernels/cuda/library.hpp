// Library kernels: CUDA work the loop IR cannot express - a running sum along a dim (cumsum,
// scan.cuh), and ordering lines (sort, topk: sort.cuh). Each is written once as CUDA C over an
// element type T and an accumulator type A, instantiated per dtype by typedefs after the prelude,
// compiled by NVRTC and kept in the kernel cache with the graphs' modules (Hooks::cuda_cubin,
// jit/jit.hpp cuda_cubin). They run on the current stream.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "vm/registry.hpp"

namespace cr::cuda {

struct DeviceCheck;

// out = the running sum of x along the middle dim of {outer, n, inner}; both contiguous, of
// out's dtype, on one CUDA device. Floating sums accumulate in float64 and integer sums wrap in
// 64 bits, as the CPU kernel (vm/ops/scans.cpp), so the two store the same values up to the
// order of float64 additions.
void cumsum(Context& ctx, const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner);

// The first k of every line of x {outer, n, inner} (contiguous) in the CPU's order (vm/ops/
// sorting.cpp: NaN above every number, equal values by position) into values / indices {outer, k,
// inner} (1-based positions). Lines of up to kSortChunk elements are sorted in one block's shared
// memory; longer ones keep each chunk's first k until one chunk holds them (k <= kSortChunk / 2),
// or are sorted whole by a radix sort (radix.hpp). False (nothing ran) for lines of 2^31
// elements or more: the caller orders host copies.
constexpr int64_t kSortChunk = 4096;
bool order_lines(Context& ctx, const Tensor& x, int64_t outer, int64_t n, int64_t inner, int64_t k, bool descending,
                 const Tensor& values, const Tensor& indices);

// The module sources of the library's kernels for dtype d (tests compile them to CUBIN without a GPU).
std::string cumsum_source(DType d);
std::string sort_source(DType d);

// The library's plumbing, shared by its kernel files (attention.cpp): launches function `fn` of
// the module named `key` over a 1-D grid on the device's current stream. The module is compiled
// from source() once per device through the kernel cache (Hooks::cuda_cubin); the key must
// name one source. Every library kernel calls cr::grid_wait() before it touches memory, so it
// may start while the previous kernel runs (vm/cuda/launch.hpp; test_cuda_library checks it).
void library_launch(Context& ctx, int device, const std::string& key, const std::function<std::string()>& source,
                    const char* fn, int64_t grid, int block, void* const* args, size_t shared_bytes = 0);

// The check word of the library kernels' positions on `device` for op `op`: site j is the
// position against `whats[j]` ("dim 1 of size 50"). One word per (device, op, whats), reused by
// every launch that reports the same errors (read at the next synchronisation: vm/cuda/checks.hpp).
std::shared_ptr<DeviceCheck> library_check(int device, const std::string& op, const std::vector<std::string>& whats);

}  // namespace cr::cuda
