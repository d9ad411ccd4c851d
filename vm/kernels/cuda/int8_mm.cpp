#include "vm/kernels/cuda/int8_mm.hpp"

#include <algorithm>

#include "vm/cuda/driver.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"

namespace cr::cuda {
namespace {

constexpr int kWarps = 8;                 // (as int8_mm.cuh)
constexpr int kRows = 4;                  // rows of q per warp (int8_mm.cuh's CR_GEMV instances)
constexpr int64_t kSmemBytes = 48 << 10;  // dynamic shared memory without an opt-in

void* ptr(const Tensor& t) { return t.defined() ? t.data_bytes() : nullptr; }

void launch(Context& ctx, const Tensor& x, const Tensor& scales, const char* fn, int64_t grid, int block,
            void* const* args, size_t shared = 0) {
  const DType d = x.dtype(), s = scales.dtype();
  library_launch(ctx, x.device().index, cat("int8_mm_", dtype_name(d), "_", dtype_name(s)),
                 [d, s] { return int8_mm_source(d, s); }, fn, grid, block, args, shared);
}

// The slices of k per block: split while the row groups leave fewer than two blocks per
// multiprocessor and every lane of a slice still reads a chunk (short n, long k: fc2's 768 x 3072).
int k_slices(int64_t n, int64_t kp, int64_t sms) {
  int ks = 1;
  while (ks < kWarps && (n + kWarps / ks * kRows - 1) / (kWarps / ks * kRows) < 2 * sms && kp / 16 >= 64 * ks) ks *= 2;
  return ks;
}

}  // namespace

std::string int8_mm_source(DType x, DType scales) {
  return cat(prelude(), "\ntypedef ", cuda_type(x), " T;\ntypedef ", cuda_type(scales), " S;\ntypedef ",
             x == DType::f64 ? "double" : "float", " A;\n", cuda_source("int8_mm.cuh"));
}

void int8_gemv(Context& ctx, const Tensor& y, const Tensor& x, const Tensor& q, const Tensor& scales,
               const Tensor& bias, int64_t m, int64_t n, int64_t k, int64_t kp) {
  if (m == 0 || n == 0) return;
  int mt = 1;
  while (mt < m) mt *= 2;
  const int64_t asize = x.dtype() == DType::f64 ? 8 : 4, sms = device_info(x.device().index).multiprocessors;
  const int ks = k_slices(n, kp, sms);
  // the slices' sums (int8_mm.cuh; none for one slice)
  const int64_t part = ks > 1 ? int64_t(kWarps) * mt * kRows * asize : 0;
  // the tile: all of kp when it fits, else the most 16-column chunks that do
  const int kt = int(std::max<int64_t>(16, std::min<int64_t>(kp, (kSmemBytes - part) / (asize * mt) / 16 * 16)));
  void *xp = ptr(x), *qp = ptr(q), *sp = ptr(scales), *bp = ptr(bias), *yp = ptr(y);
  int mm = int(m), ktile = kt, kslices = ks;
  long long nn = n, kk = k, kpp = kp;
  void* args[] = {&xp, &qp, &sp, &bp, &yp, &mm, &nn, &kk, &kpp, &ktile, &kslices};
  const int64_t group = kWarps / ks * kRows, groups = (n + group - 1) / group;
  launch(ctx, x, scales, cat("int8_gemv_", mt).c_str(), std::min(groups, 4 * sms), kWarps * 32, args,
         size_t(mt * kt * asize + part));
}

void int8_dequantize(Context& ctx, const Tensor& w, const Tensor& q, const Tensor& scales, int64_t n, int64_t k,
                     int64_t kp) {
  if (n == 0 || k == 0) return;
  void *qp = ptr(q), *sp = ptr(scales), *wp = ptr(w);
  long long nn = n, kk = k, kpp = kp;
  void* args[] = {&qp, &sp, &wp, &nn, &kk, &kpp};
  const int64_t blocks = std::min<int64_t>((n * k + 255) / 256, 65536);
  launch(ctx, w, scales, "int8_dequant", blocks, 256, args);
}

}  // namespace cr::cuda
