#include "vm/kernels/cuda/radix.hpp"

#include <algorithm>

#include "vm/cuda/driver.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"

namespace cr::cuda {
namespace {

constexpr int kBlock = 256;             // radix.cuh's RADIX: a thread per digit
constexpr long long kTile = 16 * 1024;  // elements a block counts and moves in a pass

// The bits of dtype d's keys: one pass of 8 bits each.
int key_bits(DType d) {
  switch (d) {
    case DType::f64: case DType::i64: return 64;
    case DType::f16: case DType::bf16: return 16;
    case DType::b8: return 8;
    default: return 32;
  }
}

void launch(Context& ctx, DType d, int device, const char* fn, int64_t grid, void* const* args) {
  library_launch(ctx, device, cat("radix_", dtype_name(d)), [d] { return radix_source(d); }, fn, grid, kBlock, args);
}

// A grid-stride launch's blocks over `total` elements.
int64_t grid_of(int64_t total, int device) {
  return std::clamp<int64_t>((total + kBlock - 1) / kBlock, 1, int64_t(device_info(device).multiprocessors) * 16);
}

}  // namespace

std::string radix_source(DType d) {
  const char* key = key_bits(d) == 64 ? "unsigned long long" : "unsigned";
  return cat(prelude(), "\ntypedef ", cuda_type(d), " T;\ntypedef ", key, " K;\n", cuda_source("radix.cuh"));
}

void radix_sort_lines(Context& ctx, const Tensor& x, int64_t outer, int64_t n, int64_t inner, int64_t k,
                      bool descending, const Tensor& values, const Tensor& indices) {
  const int device = x.device().index;
  const DType d = x.dtype();
  const int64_t lines = outer * inner;
  long long total = lines * n, n_ = n, inner_ = inner, tile = kTile, tiles = (n + kTile - 1) / kTile;
  const DType kd = key_bits(d) == 64 ? DType::i64 : DType::i32;
  Tensor keys[2] = {Tensor::empty({total}, kd, x.device()), Tensor::empty({total}, kd, x.device())};
  Tensor pos[2] = {Tensor::empty({total}, DType::i32, x.device()), Tensor::empty({total}, DType::i32, x.device())};
  Tensor counts = Tensor::empty({lines * 256 * tiles}, DType::i64, x.device());
  Tensor offsets = Tensor::empty({lines * 256 * tiles}, DType::i64, x.device());
  void *xp = x.data_bytes(), *kp = keys[0].data_bytes(), *pp = pos[0].data_bytes();
  void *cp = counts.data_bytes(), *op = offsets.data_bytes();
  int desc = descending;
  void* key_args[] = {&xp, &kp, &pp, &n_, &inner_, &total, &desc};
  launch(ctx, d, device, "radix_keys", grid_of(total, device), key_args);
  int cur = 0;
  for (int shift = 0; shift < key_bits(d); shift += 8, cur ^= 1) {
    void *ki = keys[cur].data_bytes(), *pi = pos[cur].data_bytes();
    void *ko = keys[cur ^ 1].data_bytes(), *po = pos[cur ^ 1].data_bytes();
    void* count_args[] = {&ki, &n_, &tile, &tiles, &shift, &cp};
    launch(ctx, d, device, "radix_count", lines * tiles, count_args);
    cumsum(ctx, offsets, counts, lines, 256 * tiles, 1);
    void* scatter_args[] = {&ki, &pi, &ko, &po, &n_, &tile, &tiles, &shift, &cp, &op};
    launch(ctx, d, device, "radix_scatter", lines * tiles, scatter_args);
  }
  void *sp = pos[cur].data_bytes(), *yp = values.data_bytes(), *yip = indices.data_bytes();
  long long k_ = k, kept = lines * k;
  void* write_args[] = {&xp, &sp, &yp, &yip, &n_, &inner_, &k_, &kept};
  launch(ctx, d, device, "radix_write", grid_of(kept, device), write_args);
}

}  // namespace cr::cuda
