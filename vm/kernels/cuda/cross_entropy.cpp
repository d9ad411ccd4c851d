#include "vm/kernels/cuda/cross_entropy.hpp"

#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"

namespace cr::cuda {

std::string cross_entropy_source(DType d, DType l) {
  return cat(prelude(), "\ntypedef ", cuda_type(d), " T;\ntypedef ", cuda_type(l), " L;\ntypedef ",
             l == DType::f64 ? "double" : "float", " A;\n", cuda_source("cross_entropy.cuh"));
}

namespace {
std::string module_key(DType d, DType l) { return cat("cross_entropy_", dtype_name(d), "_", dtype_name(l)); }
}  // namespace

void cross_entropy_backward(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& lse, const Tensor& t,
                            const Tensor& a, const Tensor& b, const Tensor& k, const Tensor& w, int64_t classes,
                            int64_t inner, int64_t pitch) {
  const int64_t n = out.numel();
  if (n == 0) return;
  void *xp = x.data_bytes(), *lp = lse.data_bytes(), *tp = t.data_bytes(), *ap = a.data_bytes();
  void *bp = b.data_bytes(), *kp = k.data_bytes(), *wp = w.defined() ? w.data_bytes() : nullptr, *op = out.data_bytes();
  constexpr int kBlock = 256, kSpan = 32 * kBlock;  // (rows: the classes a block writes)
  const DType d = x.dtype(), l = lse.dtype();
  auto source = [d, l] { return cross_entropy_source(d, l); };
  if (pitch != classes) {  // (rows of {rows, pitch}: inner is 1)
    const int64_t rows = n / pitch, chunks = (pitch + kSpan - 1) / kSpan;
    if (rows * chunks > INT32_MAX)
      fail(cat("cross_entropy: ", rows, " rows of ", pitch, " are too many for the kernel"));
    long long kk = chunks, ss = kSpan, cc = classes, pp = pitch;
    void* args[] = {&xp, &lp, &tp, &ap, &bp, &kp, &wp, &op, &kk, &ss, &cc, &pp};
    return library_launch(ctx, x.device().index, module_key(d, l), source, "cross_entropy_bwd_pitched", rows * chunks,
                          kBlock, args);
  }
  const int64_t rows = n / classes, chunks = (classes + kSpan - 1) / kSpan;
  long long nn = n, cc = classes, ii = inner, kk = chunks, ss = kSpan;
  // (the rows' kernel stores 16-byte vectors at the scores' offsets: out must share x's alignment)
  const bool same_alignment = (reinterpret_cast<uintptr_t>(xp) - reinterpret_cast<uintptr_t>(op)) % 16 == 0;
  if (inner == 1 && rows * chunks <= INT32_MAX && same_alignment) {
    void* args[] = {&xp, &lp, &tp, &ap, &bp, &kp, &wp, &op, &kk, &ss, &cc};
    return library_launch(ctx, x.device().index, module_key(d, l), source, "cross_entropy_bwd_rows", rows * chunks, kBlock,
                          args);
  }
  void* args[] = {&xp, &lp, &tp, &ap, &bp, &kp, &wp, &op, &nn, &cc, &ii};
  library_launch(ctx, x.device().index, module_key(d, l), source, "cross_entropy_bwd", (n + kBlock - 1) / kBlock, kBlock,
                 args);
}

void cross_entropy_lse(Context& ctx, const Tensor& lse, const Tensor& x) {
  const int64_t rows = x.size(0);
  if (rows == 0) return;
  if (rows > INT32_MAX) fail(cat("cross_entropy: more than 2^31 - 1 rows (", rows, ") for the fused kernel"));
  const DType d = x.dtype(), l = lse.dtype();
  void *xp = x.data_bytes(), *lp = lse.data_bytes();
  long long cc = x.size(1);
  void* args[] = {&xp, &lp, &cc};
  library_launch(ctx, x.device().index, module_key(d, l), [d, l] { return cross_entropy_source(d, l); },
                 "cross_entropy_lse_rows", rows, 256, args);
}

}  // namespace cr::cuda
