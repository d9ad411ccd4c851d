// int8 weight-only quantisation (T.nn.quantize_int8, stdlib/nn.lua):
//   _int8_quantize(weight {n, k} floating) -> q int32 {n, kp / 4}, scales float32 {n}
//   _int8_weight_mm(input {..., k}, q, scales {n}, bias {n}?, activation?) -> act(input @ (q * scales)^T
//     + bias), activation "none" (default), "relu" or "gelu_tanh" (compiled graphs fuse the op after)
// There is no int8 dtype: q packs the int8 values four to an int32 word, row i's byte j (in
// memory order) being column j, rows padded with zero bytes to kp = k rounded up to 16 (the CUDA
// kernel's 16-byte loads). Symmetric per row: scale = max|w_row| / 127, q = round(w / scale) (half
// to even, in float32). CPU: rows of q dequantised into input's compute dtype per block, then
// BLAS; CUDA: vm/kernels/cuda/int8_mm.hpp. An inference op: a gradient through it raises.

#include <cmath>

#include "vm/cpu_blas.hpp"
#include "vm/kernels/cuda/gemv.hpp"
#include "vm/kernels/cuda/int8_mm.hpp"
#include "vm/ops/dense.hpp"
#include "vm/ops/indexing.hpp"
#include "vm/ops/linalg.hpp"
#include "vm/ops/operands.hpp"
#include "vm/threads.hpp"

namespace cr {
namespace {

int64_t padded(int64_t k) { return (k + 15) / 16 * 16; }

// ---- _int8_quantize ---------------------------------------------------------------------------

std::vector<Meta> infer_quantize(OpCall& c) {
  const Tensor w = c.tensor(0);
  if (!is_floating(w.dtype()) || w.dim() != 2)
    fail(cat("weight expected a 2-D floating tensor {out_features, in_features}, got ", w.describe()));
  return {{{w.size(0), padded(w.size(1)) / 4}, DType::i32, w.device()}, {{w.size(0)}, DType::f32, w.device()}};
}

void run_quantize(OpCall& c) {
  const Tensor w = dense(cast(c.tensor(0), DType::f32));
  const int64_t n = w.size(0), k = w.size(1), kp = padded(k);
  const float* wp = w.data<float>();
  float* scales = c.outs[1].data<float>();
  for (int64_t i = 0; i < n; ++i) {
    float amax = 0;
    for (int64_t j = 0; j < k; ++j) {
      const float a = std::fabs(wp[i * k + j]);
      if (!std::isfinite(a)) fail(cat("weight expected finite values, got ", wp[i * k + j], " in row ", i + 1));
      amax = std::max(amax, a);
    }
    scales[i] = amax / 127.f;
  }
  auto* q = reinterpret_cast<int8_t*>(c.outs[0].data<int32_t>());
  parallel_for(n, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, k)), [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = 0; j < kp; ++j) {
        const float v = j < k && scales[i] > 0 ? std::nearbyint(wp[i * k + j] / scales[i]) : 0.f;
        q[i * kp + j] = int8_t(std::fmin(127.f, std::fmax(-127.f, v)));
      }
  });
}

// ---- _int8_weight_mm --------------------------------------------------------------------------

struct Shapes {
  int64_t m = 1, n = 0, k = 0, kp = 0;
};

Shapes shapes_of(const OpCall& c) {
  const Tensor x = c.tensor(0), q = c.tensor(1), s = c.tensor(2);
  if (!is_floating(x.dtype()) || x.dim() < 1) fail(cat("input expected a floating tensor {..., in_features}, got ", x.describe()));
  Shapes sh;
  const Shape xs = x.sizes();
  sh.k = xs.back(), sh.kp = padded(sh.k), sh.m = shape_numel(Shape(xs.begin(), xs.end() - 1));
  if (q.dtype() != DType::i32 || q.dim() != 2 || q.size(1) != sh.kp / 4)
    fail(cat("weight expected the int8 values packed in int32 {out_features, ", sh.kp / 4, "} (in_features ", sh.k,
             " padded to ", sh.kp, " bytes a row, from _int8_quantize), got ", q.describe()));
  sh.n = q.size(0);
  check_device(x, q);
  if (!is_floating(s.dtype()) || s.sizes() != Shape{sh.n})
    fail(cat("scales expected a floating tensor {", sh.n, "} (one per output channel), got ", s.describe()));
  check_device(x, s);
  activation_arg(c, 4);  // (checked here: an unknown name raises before any work)
  if (c.has(3)) {
    const Tensor b = c.tensor(3);
    if (b.dtype() != x.dtype() || b.sizes() != Shape{sh.n})
      fail(cat("bias expected input's dtype ", dtype_name(x.dtype()), " and shape {", sh.n, "}, got ", b.describe()));
    check_device(x, b);
  }
  return sh;
}

std::vector<Meta> infer_int8_mm(OpCall& c) {
  const Tensor x = c.tensor(0);
  const Shapes sh = shapes_of(c);
  Shape out = x.sizes();
  out.back() = sh.n;
  return {{out, x.dtype(), x.device()}};
}

// Y[:, j0 .. j0 + rows) (leading dimension ldy) = X {m, k} @ W^T, W {rows, k} row-major.
void gemm_rows(const float* X, const float* W, float* Y, int64_t m, int64_t rows, int64_t k, int64_t ldy) {
  const Cblas& blas = cblas("int8_mm");
  if (m == 1) return blas.sgemv(CblasRowMajor, CblasNoTrans, int(rows), int(k), 1.f, W, int(k), X, 1, 0.f, Y, 1);
  blas.sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(rows), int(k), 1.f, X, int(k), W, int(k), 0.f, Y,
             int(ldy));
}
void gemm_rows(const double* X, const double* W, double* Y, int64_t m, int64_t rows, int64_t k, int64_t ldy) {
  const Cblas& blas = cblas("int8_mm");
  if (m == 1) return blas.dgemv(CblasRowMajor, CblasNoTrans, int(rows), int(k), 1.0, W, int(k), X, 1, 0.0, Y, 1);
  blas.dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(rows), int(k), 1.0, X, int(k), W, int(k), 0.0, Y,
             int(ldy));
}

// Y {m, n} in C (float or double) = X @ (q * scales)^T: blocks of kSub rows of q dequantised into
// a buffer that stays in cache, then BLAS (single-threaded: the pool runs the blocks side by side).
template <class C>
void cpu_mm(const C* X, const int8_t* q, const C* scales, C* Y, const Shapes& sh) {
  constexpr int64_t kSub = 64;
  cblas("int8_mm");  // (raises here, outside the pool, where OpenBLAS is missing)
  const int64_t grain = std::max<int64_t>(kSub, (int64_t(1) << 20) / std::max<int64_t>(1, sh.m * sh.k));
  parallel_for(sh.n, grain, [&](int64_t r0, int64_t r1) {
    std::vector<C> w(size_t(kSub * sh.k));
    for (int64_t i0 = r0; i0 < r1; i0 += kSub) {
      const int64_t rows = std::min(kSub, r1 - i0);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < sh.k; ++j) w[size_t(i * sh.k + j)] = C(q[(i0 + i) * sh.kp + j]) * scales[i0 + i];
      if (sh.m == 1) gemm_rows(X, w.data(), Y + i0, 1, rows, sh.k, sh.n);
      else gemm_rows(X, w.data(), Y + i0, sh.m, rows, sh.k, sh.n);
    }
  });
}

void run_cpu(const Tensor& y, const Tensor& x, const Tensor& q, const Tensor& s, const Tensor& b, const Shapes& sh) {
  const DType cd = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor xc = dense(cast(x, cd)), sc = dense(cast(s, cd));
  const Tensor yc = y.dtype() == cd ? y : Tensor::empty({sh.m, sh.n}, cd);
  const auto* qp = reinterpret_cast<const int8_t*>(q.data<int32_t>());
  if (sh.k == 0) fill(yc, 0);
  else if (cd == DType::f64) cpu_mm<double>(xc.data<double>(), qp, sc.data<double>(), yc.data<double>(), sh);
  else cpu_mm<float>(xc.data<float>(), qp, sc.data<float>(), yc.data<float>(), sh);
  const Tensor y2 = Tensor::view_of(y, {sh.m, sh.n}, {sh.n, 1}, y.offset());
  if (b.defined()) {
    const Tensor yb = Tensor::view_of(yc, {sh.m, sh.n}, {sh.n, 1}, yc.offset()), bc = cast(b, cd);
    visit_floating(cd, [&](auto tag) {
      using C = decltype(tag);
      map<C, C, C>(yb, {&yb, &bc}, [](auto u, auto v) { return u + v; });
    });
  }
  if (yc.data_bytes() != y.data_bytes()) copy_into(y2, Tensor::view_of(yc, {sh.m, sh.n}, {sh.n, 1}, 0));
}

// Up to kInt8GemvRows rows: the GEMV kernel; more: q * scales in input's dtype, then one
// cuBLASLt call with the bias as its epilogue (cuBLAS accumulating onto a copy of the bias where
// cuBLASLt does not take the dtype).
void run_cuda(Context& ctx, const Tensor& y, const Tensor& x, const Tensor& q, const Tensor& s, const Tensor& b,
              cuda::Epilogue act, const Shapes& sh) {
  if (sh.m <= cuda::kInt8GemvRows) return cuda::int8_gemv(ctx, y, x, q, s, b, act, sh.m, sh.n, sh.k, sh.kp);
  const Tensor w = Tensor::empty({sh.n, sh.k}, x.dtype(), x.device());
  cuda::int8_dequantize(ctx, w, q, s, sh.n, sh.k, sh.kp);
  const Tensor y2 = Tensor::view_of(y, {sh.m, sh.n}, {sh.n, 1}, y.offset());
  const Tensor x2 = Tensor::view_of(x, {sh.m, sh.k}, {sh.k, 1}, x.offset());
  const Tensor wt = Tensor::view_of(w, {sh.k, sh.n}, {1, sh.k}, 0);
  if (b.defined() && cuda_matmul_epilogue(y2, x2, wt, b, act, Tensor())) return;
  if (b.defined()) copy_into(y2, Tensor::view_of(b, {sh.m, sh.n}, {0, b.stride(0)}, b.offset()));
  matmul_into(y2, x2, wt, b.defined());
  if (act != cuda::Epilogue::None) copy_into(y2, activated(ctx, y2, act));
}

void run_int8_mm(OpCall& c) {
  const Shapes sh = shapes_of(c);
  const Tensor x = dense(c.tensor(0)), q = dense(c.tensor(1)), s = dense(c.tensor(2));
  const Tensor b = c.has(3) ? dense(c.tensor(3)) : Tensor();
  const Tensor& y = c.outs[0];
  const cuda::Epilogue act = activation_arg(c, 4);
  if (sh.m == 0 || sh.n == 0) return;
  if (!x.device().is_cpu()) return run_cuda(c.ctx, y, x, q, s, b, act, sh);
  run_cpu(y, x, q, s, b, sh);
  if (act != cuda::Epilogue::None) copy_into(y, activated(c.ctx, y, act));
}

}  // namespace

void register_quant(Registry& r) {
  OpDef quantize{"_int8_quantize", "weight:T", OpKind::Other, kNoMethod | kMultiOut | kExtern, infer_quantize, run_quantize};
  quantize.grad.not_differentiable = true;  // (rounded codes and their scales)
  r.add(quantize);
  OpDef mm{"_int8_weight_mm", "input:T, weight:T, scales:T, bias:T?, activation:S?", OpKind::Other,
           kNoMethod | kDeviceAware | kExtern, infer_int8_mm, run_int8_mm};
  r.add(mm);  // no derivative: int8 weight-only quantisation is for inference (a backward raises)
}

}  // namespace cr
