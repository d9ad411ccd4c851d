#include "vm/kernels/cuda/layer_norm.hpp"

#include <algorithm>

#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"

namespace cr::cuda {
namespace {

constexpr int kBlock = 128, kCols = 32, kColRows = 8;  // (as layer_norm.cuh)
// Rows per chunk of the column sums: enough chunks to fill the device, few enough that the
// partials (2 x chunks x n) stay small.
constexpr int64_t kChunkRows = 64, kMaxChunks = 256;

void* ptr(const Tensor& t) { return t.defined() ? t.data_bytes() : nullptr; }

// The warp-per-row kernels' terms (layer_norm.cuh): rows of at most 32 x 32 elements in whole
// 16-byte vectors, every tensor given 16-byte aligned.
constexpr int64_t kWarpRowMax = 32 * 32, kWarpBlock = 128;
bool warp_rows(int64_t n, size_t es, std::initializer_list<const Tensor*> ts) {
  if (n > kWarpRowMax || (size_t(n) * es) % 16 != 0) return false;
  for (const Tensor* t : ts)
    if (t->defined() && reinterpret_cast<uintptr_t>(t->data_bytes()) % 16 != 0) return false;
  return true;
}

void launch(Context& ctx, const Tensor& on, const char* fn, int64_t grid, int block, void* const* args) {
  const DType d = on.dtype();
  library_launch(ctx, on.device().index, cat("layer_norm_", dtype_name(d)), [d] { return layer_norm_source(d); }, fn,
                 grid, block, args);
}

}  // namespace

std::string layer_norm_source(DType d) {
  return cat(prelude(), "\ntypedef ", cuda_type(d), " T;\ntypedef ", d == DType::f64 ? "double" : "float", " A;\n",
             cuda_source("layer_norm.cuh"));
}

void layer_norm(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                const Tensor& w, const Tensor& b, int64_t rows, int64_t n, double eps) {
  if (rows == 0) return;
  void *xp = ptr(x), *wp = ptr(w), *bp = ptr(b), *yp = ptr(y), *mp = ptr(mean), *rp = ptr(rstd);
  long long nn = n, rr = rows;
  if (warp_rows(n, dtype_size(x.dtype()), {&x, &w, &b, &y})) {
    void* args[] = {&xp, &wp, &bp, &yp, &mp, &rp, &rr, &nn, &eps};
    return launch(ctx, x, "layer_norm_fwd_warp", (rows + kWarpBlock / 32 - 1) / (kWarpBlock / 32), kWarpBlock, args);
  }
  void* args[] = {&xp, &wp, &bp, &yp, &mp, &rp, &nn, &eps};
  launch(ctx, x, "layer_norm_fwd", rows, kBlock, args);
}

void layer_norm_backward(Context& ctx, const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& go,
                         const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& w, int64_t rows,
                         int64_t n) {
  void *gop = ptr(go), *xp = ptr(x), *mp = ptr(mean), *rp = ptr(rstd), *wp = ptr(w);
  long long nn = n, rr = rows;
  if (gx.defined() && rows > 0) {
    void* gxp = ptr(gx);
    if (warp_rows(n, dtype_size(x.dtype()), {&go, &x, &w, &gx})) {
      void* args[] = {&gop, &xp, &mp, &rp, &wp, &gxp, &rr, &nn};
      launch(ctx, x, "layer_norm_bwd_input_warp", (rows + kWarpBlock / 32 - 1) / (kWarpBlock / 32), kWarpBlock, args);
    } else {
      void* args[] = {&gop, &xp, &mp, &rp, &wp, &gxp, &nn};
      launch(ctx, x, "layer_norm_bwd_input", rows, kBlock, args);
    }
  }
  if ((!gw.defined() && !gb.defined()) || n == 0) return;
  const int chunks = int(std::clamp<int64_t>((rows + kChunkRows - 1) / kChunkRows, 1, kMaxChunks));
  long long chunk = (rows + chunks - 1) / chunks;
  const Tensor partial = Tensor::empty({2, chunks, n}, mean.dtype(), x.device());
  void* pp = ptr(partial);
  int nchunks = chunks;
  const int64_t col_blocks = (n + kCols - 1) / kCols;
  void* cols[] = {&gop, &xp, &mp, &rp, &pp, &rr, &nn, &chunk, &nchunks};
  launch(ctx, x, "layer_norm_bwd_cols", col_blocks * chunks, kCols * kColRows, cols);
  void *gwp = ptr(gw), *gbp = ptr(gb);
  void* fold[] = {&pp, &gwp, &gbp, &nn, &nchunks};
  launch(ctx, x, "layer_norm_bwd_fold", (n * 32 + 255) / 256, 256, fold);  // (a warp a column)
}

}  // namespace cr::cuda
