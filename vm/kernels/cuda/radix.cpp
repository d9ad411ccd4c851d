#include "vm/kernels/cuda/radix.hpp"

#include <algorithm>

#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"

namespace cr::cuda {
namespace {

constexpr int kBlock = 256;            // radix.cuh's RADIX: a thread per digit
constexpr long long kChunk = 16384;    // the keys a block counts for the histogram

// The bits of dtype d's keys: one pass of 8 bits each.
int key_bits(DType d) {
  switch (d) {
    case DType::f64: case DType::i64: return 64;
    case DType::f16: case DType::bf16: return 16;
    case DType::b8: return 8;
    default: return 32;
  }
}

// The keys a thread of radix_onesweep moves (radix.cuh ITEMS): its tile (and 64-bit keys
// double-sized) in 48 KiB of shared memory.
int items(DType d) { return key_bits(d) == 64 ? 8 : 16; }

void launch(Context& ctx, DType d, int device, const char* fn, int64_t grid, void* const* args) {
  library_launch(ctx, device, cat("radix_", dtype_name(d)), [d] { return radix_source(d); }, fn, grid, kBlock, args);
}

// A grid-stride launch's blocks over `total` elements.
int64_t grid_of(int64_t total, int device) {
  return std::clamp<int64_t>((total + kBlock - 1) / kBlock, 1, int64_t(device_info(device).multiprocessors) * 16);
}

Tensor zeros_i32(int64_t n, Device dev) {
  Tensor t = Tensor::empty({n}, DType::i32, dev);
  fill_pattern(t.data_bytes(), size_t(n), 4, 0u, dev.index);
  return t;
}

}  // namespace

std::string radix_source(DType d) {
  const char* key = key_bits(d) == 64 ? "unsigned long long" : "unsigned";
  return cat(prelude(), "\ntypedef ", cuda_type(d), " T;\ntypedef ", key, " K;\n#define ITEMS ", items(d), "\n",
             cuda_source("radix.cuh"));
}

void radix_sort_lines(Context& ctx, const Tensor& x, int64_t outer, int64_t n, int64_t inner, int64_t k,
                      bool descending, const Tensor& values, const Tensor& indices) {
  const int device = x.device().index;
  const DType d = x.dtype();
  const int64_t lines = outer * inner;
  long long total = lines * n, n_ = n, inner_ = inner, k_ = k, chunk = kChunk, chunks = (n + kChunk - 1) / kChunk;
  const long long tile = items(d) * 256;  // (radix.cuh TILE)
  long long tiles = (n + tile - 1) / tile;
  int passes = key_bits(d) / 8, desc = descending;
  const DType kd = key_bits(d) == 64 ? DType::i64 : DType::i32;
  Tensor keys[2] = {Tensor::empty({total}, kd, x.device()), Tensor::empty({total}, kd, x.device())};
  Tensor pos[2] = {Tensor::empty({total}, DType::i32, x.device()), Tensor::empty({total}, DType::i32, x.device())};
  Tensor starts = zeros_i32(lines * passes * 256, x.device());
  Tensor status = zeros_i32(2 * lines * tiles * 256 + passes, x.device());  // (then the passes' tile counters)
  void *sp = starts.data_bytes(), *stp = status.data_bytes();
  void* counters = static_cast<char*>(stp) + 8 * lines * tiles * 256;
  // contiguous lines: the first pass (and the histogram) read x itself; others laid out first
  void *xp = x.data_bytes(), *from = inner == 1 ? xp : nullptr, *kp = keys[0].data_bytes(), *pp = pos[0].data_bytes();
  if (!from) {
    void* key_args[] = {&xp, &kp, &pp, &n_, &inner_, &total};
    launch(ctx, d, device, "radix_keys", grid_of(total, device), key_args);
  }
  void* hist_args[] = {&from, &kp, &n_, &chunk, &chunks, &passes, &desc, &sp};
  launch(ctx, d, device, "radix_histogram", lines * chunks, hist_args);
  void* start_args[] = {&sp};
  launch(ctx, d, device, "radix_starts", lines * passes, start_args);
  int cur = 0;
  for (int pass = 0; pass < passes; ++pass, cur ^= 1) {
    const bool last = pass == passes - 1;
    void *xi = pass == 0 ? from : nullptr, *ki = keys[cur].data_bytes(), *pi = pos[cur].data_bytes();
    void *ko = keys[cur ^ 1].data_bytes(), *po = pos[cur ^ 1].data_bytes();
    void *yp = last ? values.data_bytes() : nullptr, *yip = last ? indices.data_bytes() : nullptr;
    void* args[] = {&xi, &ki, &pi, &ko, &po, &yp, &yip, &n_, &inner_, &k_, &tiles, &pass, &passes, &desc, &sp, &stp, &counters};
    launch(ctx, d, device, "radix_onesweep", lines * tiles, args);
  }
}

}  // namespace cr::cuda
