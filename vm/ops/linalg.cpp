// Linear algebra: matmul (PyTorch's 1-D and batched-broadcasting rules), mm, bmm, linear, tril,
// triu. Every product goes through one core, matmul_into: float32 / float64 call OpenBLAS
// (reading transposed operands in place through the trans flags), the other dtypes use a
// generic kernel that accumulates in float (float16 / bfloat16) or 64-bit integers.
#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>

#include "vm/cpu_blas.hpp"
#include "vm/cuda/blas.hpp"
#include "vm/devices.hpp"
#include "vm/kernels/cuda/gemv.hpp"
#include "vm/ops/linalg.hpp"
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

// Multiply-adds per block below which a product is not split further: a block must outweigh
// handing it to a thread (microseconds on an idle machine, far more on a busy one): a decode
// step's gemvs (768 x 2304: 1.8M) stay whole on one core (split, 18x slower when loaded: H35).
constexpr int64_t kBlasBlockMNK = int64_t(1) << 20;

// ---- operands ------------------------------------------------------------------------------

// The last two dims of a tensor as BLAS reads them: row-major with leading dimension ld, or
// (trans) column-major, i.e. element (i, j) at p[i + j * ld].
struct Mat {
  const char* p;
  int64_t rows, cols, ld;
  bool trans;
  int64_t rs() const { return trans ? 1 : ld; }  // element strides
  int64_t cs() const { return trans ? ld : 1; }
};

// Finds the BLAS layout of the last two dims (strides of size-1 dims do not matter); false when
// BLAS cannot read them in place.
bool blas_layout(const Tensor& t, Mat* m) {
  const int nd = t.dim();
  int64_t rows = t.size(nd - 2), cols = t.size(nd - 1), rs = t.stride(nd - 2), cs = t.stride(nd - 1);
  *m = Mat{t.data_bytes(), rows, cols, 0, false};
  if (cs == 1 || cols == 1) {
    m->ld = rows == 1 ? std::max<int64_t>(1, cols) : rs;
    if (m->ld >= std::max<int64_t>(1, cols) && m->ld <= INT_MAX) return true;
  }
  if (rs == 1 || rows == 1) {
    m->ld = cols == 1 ? std::max<int64_t>(1, rows) : cs;
    m->trans = true;
    if (m->ld >= std::max<int64_t>(1, rows) && m->ld <= INT_MAX) return true;
  }
  return false;
}

// Merges dims [0, nd-1) of t into one when one stride walks them all; false otherwise.
bool fold_rows(const Tensor& t, Tensor* folded) {
  const int nd = t.dim();
  int64_t rows = 1, stride = -1;
  for (int d = nd - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (stride < 0) stride = t.stride(d);
    else if (t.stride(d) != stride * rows) return false;
    rows *= t.size(d);
  }
  const int64_t cols = t.size(nd - 1);
  *folded = Tensor::view_of(t, {rows, cols}, {stride < 0 ? cols : stride, t.stride(nd - 1)}, t.offset());
  return true;
}

// The last two dims of t alone (its first matrix), for operands whose batch is all ones.
Tensor last_matrix(const Tensor& t) {
  const int nd = t.dim();
  return Tensor::view_of(t, {t.size(nd - 2), t.size(nd - 1)}, {t.stride(nd - 2), t.stride(nd - 1)}, t.offset());
}

int64_t batch_numel(const Tensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.dim() - 2; ++d) n *= t.size(d);
  return n;
}

// Element offsets of every matrix of t in the batch of out (batch dims broadcast, right-aligned).
std::vector<int64_t> batch_offsets(const Tensor& t, const Tensor& out) {
  const int nb = out.dim() - 2, tb = t.dim() - 2;
  std::vector<int64_t> offs{0};
  for (int d = 0; d < nb; ++d) {
    int td = d - (nb - tb);
    int64_t size = out.size(d), stride = td >= 0 && t.size(td) != 1 ? t.stride(td) : 0;
    std::vector<int64_t> next;
    next.reserve(offs.size() * size_t(size));
    for (int64_t o : offs)
      for (int64_t i = 0; i < size; ++i) next.push_back(o + i * stride);
    offs.swap(next);
  }
  return offs;
}

// ---- the BLAS path (float32, float64) ------------------------------------------------------

CBLAS_TRANSPOSE flag(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

void gemm(const Mat& A, const Mat& B, float* C, int ldc, float beta, bool allow_gemv) {
  const int M = int(A.rows), N = int(B.cols), K = int(A.cols);
  const Cblas& blas = cblas("matmul");
  if (allow_gemv && N == 1)  // C = A x, x a column of B
    return blas.sgemv(CblasRowMajor, flag(A.trans), A.trans ? K : M, A.trans ? M : K, 1.f, (const float*)A.p,
                       int(A.ld), (const float*)B.p, int(B.rs()), beta, C, ldc);
  if (allow_gemv && M == 1)  // C = B^T x, x the row of A
    return blas.sgemv(CblasRowMajor, flag(!B.trans), B.trans ? N : K, B.trans ? K : N, 1.f, (const float*)B.p,
                       int(B.ld), (const float*)A.p, int(A.cs()), beta, C, 1);
  blas.sgemm(CblasRowMajor, flag(A.trans), flag(B.trans), M, N, K, 1.f, (const float*)A.p, int(A.ld),
              (const float*)B.p, int(B.ld), beta, C, ldc);
}

void gemm(const Mat& A, const Mat& B, double* C, int ldc, double beta, bool allow_gemv) {
  const int M = int(A.rows), N = int(B.cols), K = int(A.cols);
  const Cblas& blas = cblas("matmul");
  if (allow_gemv && N == 1)
    return blas.dgemv(CblasRowMajor, flag(A.trans), A.trans ? K : M, A.trans ? M : K, 1.0, (const double*)A.p,
                       int(A.ld), (const double*)B.p, int(B.rs()), beta, C, ldc);
  if (allow_gemv && M == 1)
    return blas.dgemv(CblasRowMajor, flag(!B.trans), B.trans ? N : K, B.trans ? K : N, 1.0, (const double*)B.p,
                       int(B.ld), (const double*)A.p, int(A.cs()), beta, C, 1);
  blas.dgemm(CblasRowMajor, flag(A.trans), flag(B.trans), M, N, K, 1.0, (const double*)A.p, int(A.ld),
              (const double*)B.p, int(B.ld), beta, C, ldc);
}

// Rows [r0, r1) or columns [c0, c1) of a matrix, as BLAS reads them.
Mat rows_of(Mat m, int64_t r0, int64_t r1, size_t esize) {
  m.p += r0 * m.rs() * int64_t(esize);
  m.rows = r1 - r0;
  return m;
}
Mat cols_of(Mat m, int64_t c0, int64_t c1, size_t esize) {
  m.p += c0 * m.cs() * int64_t(esize);
  m.cols = c1 - c0;
  return m;
}

// C {M, N} = A B as blocks of output rows (or of columns when there are few rows: a decode
// step's gemv), one per thread; columns are cut at multiples of 16 to keep the vector loops
// aligned.
template <class T> void split_product(const Mat& A, const Mat& B, T* C, int64_t ldc, T beta) {
  const int64_t M = A.rows, N = B.cols, K = A.cols;
  const int64_t pieces = std::min<int64_t>(num_threads(), M * N * K / kBlasBlockMNK);
  if (pieces <= 1) return gemm(A, B, C, int(ldc), beta, true);
  const bool by_rows = M >= 4 * pieces;
  const int64_t len = by_rows ? M : N, quantum = by_rows ? 1 : 16;
  const int64_t step = ((len + pieces - 1) / pieces + quantum - 1) / quantum * quantum;
  parallel_for((len + step - 1) / step, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * step, hi = std::min(len, lo + step);
      if (by_rows) gemm(rows_of(A, lo, hi, sizeof(T)), B, C + lo * ldc, int(ldc), beta, true);
      else gemm(A, cols_of(B, lo, hi, sizeof(T)), C + lo, int(ldc), beta, true);
    }
  });
}

template <class T> void blas_matmul(const Tensor& out, Tensor a, Tensor b, bool accumulate) {
  cblas("matmul");  // (raises here, outside the pool, where OpenBLAS is missing)
  Mat A, B;
  // BLAS reads strided matrices in place; anything else (a broadcast row, a step) is copied once
  if (!blas_layout(a, &A)) blas_layout(a = contiguous(a), &A);
  if (!blas_layout(b, &B)) blas_layout(b = contiguous(b), &B);
  const int64_t M = A.rows, N = B.cols, K = A.cols;
  const std::vector<int64_t> ao = batch_offsets(a, out), bo = batch_offsets(b, out);
  const int64_t nb = int64_t(ao.size());
  T* C = out.data<T>();
  const T beta = accumulate ? T(1) : T(0);
  auto at = [&](const Mat& m, const std::vector<int64_t>& off, int64_t i) {
    Mat r = m;
    r.p += off[size_t(i)] * int64_t(sizeof(T));
    return r;
  };
  if (nb == 1 || M * N * K >= kBlasBlockMNK * num_threads()) {  // big products: each one split
    for (int64_t i = 0; i < nb; ++i) split_product(at(A, ao, i), at(B, bo, i), C + i * M * N, N, beta);
    return;
  }
  parallel_for(nb, std::max<int64_t>(1, kBlasBlockMNK / std::max<int64_t>(1, M * N * K)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) gemm(at(A, ao, i), at(B, bo, i), C + i * M * N, int(N), beta, true);
  });
}

// Tiles of at most kTileRows rows and ~kTileElems outputs (4 MB of float32, an eighth of the L3
// the epilogue then reads them from), widened until each is worth a task; few rows (a decode
// step) are cut by columns so that every thread has one. Smaller tiles cost more in BLAS's
// packing of the operands than the epilogue saves (bench/RESULTS.md).
constexpr int64_t kTileRows = 256, kTileElems = int64_t(1) << 20;

template <class T> void tiled_matmul(const Tensor& out, Tensor a, Tensor b, const TileFn& after) {
  cblas("matmul");  // (raises here, outside the pool, where OpenBLAS is missing)
  Mat A, B;
  if (!blas_layout(a, &A)) blas_layout(a = contiguous(a), &A);
  if (!blas_layout(b, &B)) blas_layout(b = contiguous(b), &B);
  const int64_t M = A.rows, N = B.cols, K = A.cols;
  const int64_t rb = std::min(M, kTileRows), row_blocks = (M + rb - 1) / rb;
  int64_t cb = std::max<int64_t>(16, kTileElems / rb / 16 * 16);
  if (row_blocks < num_threads()) cb = std::min(cb, ((N * row_blocks + num_threads() - 1) / num_threads() + 15) / 16 * 16);
  while (cb < N && rb * cb * K < kBlasBlockMNK) cb *= 2;
  cb = std::min(cb, N);
  const int64_t col_blocks = (N + cb - 1) / cb;
  T* C = out.data<T>();
  parallel_for(row_blocks * col_blocks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = t / col_blocks * rb, r1 = std::min(M, r0 + rb), c0 = t % col_blocks * cb, c1 = std::min(N, c0 + cb);
      gemm(rows_of(A, r0, r1, sizeof(T)), cols_of(B, c0, c1, sizeof(T)), C + r0 * N + c0, int(N), T(0), true);
      after(r0, r1, c0, c1);
    }
  });
}

// ---- the generic path (float16, bfloat16, int32, int64; any size) --------------------------

// Accumulator: float for the 16-bit floats, unsigned 64-bit for integers (wraps like int64
// arithmetic without signed-overflow UB), the type itself for float / double.
template <class T> struct Acc { using type = compute_t<T>; };
template <> struct Acc<int32_t> { using type = uint64_t; };
template <> struct Acc<int64_t> { using type = uint64_t; };

// C = A B (+ C) for one matrix of the batch, rows [r0, r1); B is given packed, {K, N} contiguous
// in the accumulator type, so the inner loop is a contiguous, vectorisable axpy.
template <class T, class A>
void generic_rows(const T* a, int64_t ars, int64_t acs, const A* b, T* c, int64_t K, int64_t N, int64_t r0, int64_t r1,
                  bool accumulate) {
  std::vector<A> acc(static_cast<size_t>(N));
  for (int64_t i = r0; i < r1; ++i) {
    for (int64_t j = 0; j < N; ++j) acc[size_t(j)] = accumulate ? A(load(c[i * N + j])) : A(0);
    for (int64_t k = 0; k < K; ++k) {
      const A x = A(load(a[i * ars + k * acs]));
      const A* row = b + k * N;
      for (int64_t j = 0; j < N; ++j) acc[size_t(j)] += x * row[j];
    }
    for (int64_t j = 0; j < N; ++j) {
      if constexpr (std::is_integral_v<A>) store(c[i * N + j], int64_t(acc[size_t(j)]));
      else store(c[i * N + j], acc[size_t(j)]);
    }
  }
}

// B's matrix in the accumulator type, {K, N} contiguous (B itself when it already is one).
template <class T, class A>
const A* pack(const T* b, int64_t brs, int64_t bcs, int64_t K, int64_t N, std::vector<A>& buf) {
  if constexpr (std::is_same_v<T, A>)
    if (bcs == 1 && brs == N) return b;
  buf.resize(size_t(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) buf[size_t(k * N + j)] = A(load(b[k * brs + j * bcs]));
  return buf.data();
}

template <class T> void generic_matmul(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) {
  using A = typename Acc<T>::type;
  const int nd = a.dim();
  const int64_t M = a.size(nd - 2), K = a.size(nd - 1), N = b.size(b.dim() - 1);
  const int64_t ars = a.stride(nd - 2), acs = a.stride(nd - 1), brs = b.stride(b.dim() - 2), bcs = b.stride(b.dim() - 1);
  const std::vector<int64_t> ao = batch_offsets(a, out), bo = batch_offsets(b, out);
  const int64_t nb = int64_t(ao.size());
  const T* ap = a.data<T>();
  const T* bp = b.data<T>();
  T* cp = out.data<T>();
  if (nb > 1 && double(M) * double(K) * double(N) < kParallelGrain) {  // many small products: one task per matrix
    parallel_for(nb, std::max<int64_t>(1, kParallelGrain / (M * K * N)), [&](int64_t b0, int64_t b1) {
      std::vector<A> buf;
      for (int64_t i = b0; i < b1; ++i)
        generic_rows(ap + ao[size_t(i)], ars, acs, pack(bp + bo[size_t(i)], brs, bcs, K, N, buf), cp + i * M * N, K, N,
                     0, M, accumulate);
    });
    return;
  }
  std::vector<A> buf;  // big products: B packed once, the rows split across the pool
  for (int64_t i = 0; i < nb; ++i) {
    const A* packed = pack(bp + bo[size_t(i)], brs, bcs, K, N, buf);
    parallel_for(M, std::max<int64_t>(1, int64_t(kParallelGrain / (double(K) * double(N)))), [&](int64_t r0, int64_t r1) {
      generic_rows(ap + ao[size_t(i)], ars, acs, packed, cp + i * M * N, K, N, r0, r1, accumulate);
    });
  }
}

// ---- the core ------------------------------------------------------------------------------

bool fits_blas(const Tensor& out, const Tensor& a) {
  const int64_t M = out.size(out.dim() - 2), N = out.size(out.dim() - 1), K = a.size(a.dim() - 1);
  return M <= INT_MAX && N <= INT_MAX && K <= INT_MAX;
}

// Whether every group of `run` consecutive matrices steps evenly through memory, by one step.
bool groups_even(const std::vector<int64_t>& o, size_t run) {
  for (size_t g = 0; g < o.size(); g += run)
    for (size_t i = g + 1; i < g + run; ++i)
      if (o[i] - o[i - 1] != o[1] - o[0]) return false;
  return true;
}

// The matrices of one strided-batched cuBLAS call: the longest run, a product of out's trailing
// batch dims, whose groups step evenly in a and b alike (heads split off a fused qkv projection
// step by the head within a batch entry, not across: a call per entry, not per matrix).
size_t even_run(const Tensor& out, const std::vector<int64_t>& ao, const std::vector<int64_t>& bo) {
  size_t run = 1;
  for (int d = out.dim() - 3; d >= 0; --d) {
    const size_t next = run * size_t(out.size(d));
    if (next > size_t(INT_MAX) || !groups_even(ao, next) || !groups_even(bo, next)) break;
    run = next;
  }
  return run;
}

// CUDA: floating dtypes through cuBLAS (float16 / bfloat16 accumulate in float32), a
// strided-batched call per run of evenly spaced matrices; integers (or no cuBLAS) on host copies.
void device_matmul(const Tensor& out, Tensor a, Tensor b, bool accumulate) {
  const DType d = out.dtype();
  if (!is_floating(d) || !cuda::blas_available() || !fits_blas(out, a)) {
    Tensor host = accumulate ? host_copy(out) : Tensor::empty(out.sizes(), d);
    matmul_into(host, host_copy(a), host_copy(b), accumulate);
    copy_across(out, host);
    return;
  }
  Mat A, B;
  if (!blas_layout(a, &A)) blas_layout(a = contiguous(a), &A);
  if (!blas_layout(b, &B)) blas_layout(b = contiguous(b), &B);
  const int64_t M = A.rows, N = B.cols, K = A.cols;
  const std::vector<int64_t> ao = batch_offsets(a, out), bo = batch_offsets(b, out);
  const size_t es = dtype_size(d);
  char* C = out.data_bytes();
  const int dev = out.device().index;
  const double beta = accumulate ? 1.0 : 0.0;
  const size_t nb = ao.size(), run = even_run(out, ao, bo);
  for (size_t g = 0; g < nb; g += run) {
    char* Cg = C + int64_t(g) * M * N * int64_t(es);
    if (run > 1)
      cuda::gemm_batched(dev, d, int(M), int(N), int(K), A.p + ao[g] * int64_t(es), int(A.ld), A.trans, ao[g + 1] - ao[g],
                         B.p + bo[g] * int64_t(es), int(B.ld), B.trans, bo[g + 1] - bo[g], Cg, int(N), M * N, int(run), beta);
    else
      cuda::gemm(dev, d, int(M), int(N), int(K), A.p + ao[g] * int64_t(es), int(A.ld), A.trans, B.p + bo[g] * int64_t(es),
                 int(B.ld), B.trans, Cg, int(N), beta);
  }
}

}  // namespace

// (linear's bias is the accumulated out)
void matmul_into(Tensor out, Tensor a, Tensor b, bool accumulate) {
  if (out.numel() == 0) return;
  if (a.size(a.dim() - 1) == 0) {  // an empty sum
    if (!accumulate) fill(out, 0);
    return;
  }
  // b is one matrix and a's batch and rows share one stride: a single product over all rows
  Tensor folded;
  if (out.dim() > 2 && batch_numel(b) == 1 && fold_rows(a, &folded)) {
    const int64_t n = out.size(out.dim() - 1), rows = out.numel() / n;
    out = Tensor::view_of(out, {rows, n}, {n, 1}, out.offset());
    a = folded;
    b = last_matrix(b);
  }
  DType d = out.dtype();
  if (!out.device().is_cpu()) return device_matmul(out, a, b, accumulate);
  if ((d == DType::f32 || d == DType::f64) && fits_blas(out, a)) {
    if (d == DType::f32) blas_matmul<float>(out, a, b, accumulate);
    else blas_matmul<double>(out, a, b, accumulate);
    return;
  }
  visit_numeric(d, [&](auto t) { generic_matmul<decltype(t)>(out, a, b, accumulate); });
}

bool cuda_matmul_epilogue(const Tensor& out, Tensor a, Tensor b, const Tensor& bias, cuda::Epilogue act,
                          const Tensor& residual) {
  if (!fits_blas(out, a) || a.size(1) == 0) return false;
  Mat A, B;
  if (!blas_layout(a, &A)) blas_layout(a = contiguous(a), &A);
  if (!blas_layout(b, &B)) blas_layout(b = contiguous(b), &B);
  const int M = int(A.rows), N = int(B.cols);
  return cuda::gemm_epilogue(out.device().index, out.dtype(), M, N, int(A.cols), A.p, int(A.ld), A.trans, B.p,
                             int(B.ld), B.trans, bias.defined() ? bias.data_bytes() : nullptr, act,
                             residual.defined() ? residual.data_bytes() : nullptr, N, out.data_bytes(), N);
}

bool cuda_gemv(Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
               cuda::Epilogue act, const Tensor& residual) {
  const DType d = out.dtype();
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1), es = int64_t(dtype_size(d));
  if (out.device().is_cpu() || !cuda::gemv_takes(d, M) || N == 0 || K == 0 || (a.stride(1) != 1 && K > 1) ||
      reinterpret_cast<uintptr_t>(b.data_bytes()) % 16)
    return false;
  // b {K, N} with rows of whole 16-byte chunks at a 16-byte pitch, or linear's weight {N, K} seen as {K, N}
  const bool kn = b.stride(1) == 1 && (N * es) % 16 == 0 && (b.stride(0) * es) % 16 == 0;
  if (!kn && (b.stride(0) != 1 || (K * es) % 16 || (b.stride(1) * es) % 16)) return false;
  const cuda::GemvWeights w{b.data_bytes(), (kn ? b.stride(0) : b.stride(1)) * es, K, false, {}, kn, cuda::settled(ctx, b)};
  cuda::gemv(ctx, out, a, a.stride(0), w, bias, act, residual, M, N, K);
  return true;
}

void matmul_tiles(const Tensor& out, Tensor a, Tensor b, const TileFn& after) {
  if (out.numel() == 0) return;
  if (out.dtype() == DType::f32) tiled_matmul<float>(out, a, b, after);
  else if (out.dtype() == DType::f64) tiled_matmul<double>(out, a, b, after);
  else fail(cat("matmul_tiles: expected float32 or float64, got ", dtype_name(out.dtype())));
}

namespace {

// ---- argument checks -------------------------------------------------------------------------

void check_pair(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    fail(cat("expected both tensors to have the same dtype, got ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()),
             " (convert one with :to())"));
  if (a.dtype() == DType::b8) fail("expected numeric tensors, got bool tensors");
  if (!(a.device() == b.device()))
    fail(cat("expected both tensors on one device, got ", device_name(a.device()), " and ", device_name(b.device())));
}

void check_inner(const Tensor& a, const Tensor& b, int64_t ka, int64_t kb) {
  if (ka != kb)
    fail(cat("shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()), " cannot be multiplied (", ka, " != ", kb, ")"));
}

// Broadcast of the batch dims (all but the last two) of two shapes.
Shape batch_shape(const Shape& a, const Shape& b, const Tensor& ta, const Tensor& tb) {
  Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  size_t n = std::max(ba.size(), bb.size());
  Shape r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - ba.size() ? 1 : ba[i - (n - ba.size())];
    int64_t y = i < n - bb.size() ? 1 : bb[i - (n - bb.size())];
    if (x != y && x != 1 && y != 1)
      fail(cat("the batch dims of ", shape_str(ta.sizes()), " and ", shape_str(tb.sizes()), " cannot be broadcast (",
               x, " and ", y, ")"));
    r[i] = x == 1 ? y : x;
  }
  return r;
}

// ---- matmul ----------------------------------------------------------------------------------

// matmul's operands as matrices: a 1-D a becomes a row {1, K}, a 1-D b a column {K, 1}; the
// result drops those dims again.
struct Product {
  Tensor a, b;  // at least 2-D
  Shape full;   // batch.., M, N
  Shape shape;  // the result
};

Tensor as_row(const Tensor& v) { return Tensor::view_of(v, {1, v.size(0)}, {v.size(0) * v.stride(0), v.stride(0)}, v.offset()); }
Tensor as_col(const Tensor& v) { return Tensor::view_of(v, {v.size(0), 1}, {v.stride(0), 1}, v.offset()); }

Product prepare_matmul(const OpCall& c) {
  Tensor a = c.tensor(0), b = c.tensor(1);
  if (a.dim() == 0 || b.dim() == 0)
    fail(cat("expected tensors of at least 1 dim, got shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes())));
  check_pair(a, b);
  Product p{a.dim() == 1 ? as_row(a) : a, b.dim() == 1 ? as_col(b) : b, {}, {}};
  check_inner(a, b, p.a.size(p.a.dim() - 1), p.b.size(p.b.dim() - 2));
  p.full = batch_shape(p.a.sizes(), p.b.sizes(), a, b);
  p.shape = p.full;
  p.full.push_back(p.a.size(p.a.dim() - 2));
  p.full.push_back(p.b.size(p.b.dim() - 1));
  if (a.dim() > 1) p.shape.push_back(p.a.size(p.a.dim() - 2));
  if (b.dim() > 1) p.shape.push_back(p.b.size(p.b.dim() - 1));
  return p;
}

std::vector<Meta> infer_matmul(OpCall& c) {
  Product p = prepare_matmul(c);
  return {{p.shape, p.a.dtype(), p.a.device()}};
}

// A CUDA product of a few rows with one matrix: the GEMV kernel where cuda_gemv takes it (out
// contiguous, bias {N} contiguous or undefined).
bool small_product(Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  Tensor rows;
  if (out.device().is_cpu() || out.numel() == 0 || batch_numel(b) != 1 || !fold_rows(a, &rows)) return false;
  const int64_t n = b.size(b.dim() - 1);  // (out may have dropped it: a vector's product)
  return cuda_gemv(ctx, Tensor::view_of(out, {out.numel() / n, n}, {n, 1}, out.offset()), rows, last_matrix(b), bias,
                   cuda::Epilogue::None, Tensor());
}

void run_matmul(OpCall& c) {
  Product p = prepare_matmul(c);
  if (small_product(c.ctx, c.outs[0], p.a, p.b, Tensor())) return;
  // dropping size-1 dims keeps a contiguous layout, so the result is a view of the full product
  matmul_into(Tensor::view_of(c.outs[0], p.full, contiguous_strides(p.full), 0), p.a, p.b, false);
}

// mm: 2-D x 2-D; bmm: 3-D x 3-D with equal batch sizes (no broadcasting, as PyTorch).
Product prepare_fixed(const OpCall& c, int nd) {
  Tensor a = c.tensor(0), b = c.tensor(1);
  if (a.dim() != nd || b.dim() != nd)
    fail(cat("expected two ", nd, "-D tensors, got shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes())));
  check_pair(a, b);
  if (nd == 3 && a.size(0) != b.size(0))
    fail(cat("expected equal batch sizes, got shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes())));
  check_inner(a, b, a.size(nd - 1), b.size(nd - 2));
  Shape s = a.sizes();
  s[size_t(nd - 1)] = b.size(nd - 1);
  return Product{a, b, s, s};
}

std::vector<Meta> infer_mm(OpCall& c) { return {{prepare_fixed(c, 2).shape, c.tensor(0).dtype(), c.tensor(0).device()}}; }
std::vector<Meta> infer_bmm(OpCall& c) { return {{prepare_fixed(c, 3).shape, c.tensor(0).dtype(), c.tensor(0).device()}}; }
void run_fixed(OpCall& c) {
  Product p = prepare_fixed(c, c.tensor(0).dim());
  if (small_product(c.ctx, c.outs[0], p.a, p.b, Tensor())) return;
  matmul_into(c.outs[0], p.a, p.b, false);
}

// ---- linear(x, w[, bias]) = x @ w^T + bias; w is {out, in} -------------------------------------

struct Linear {
  Tensor x, wt, bias;  // wt: w transposed, a view {in, out}
  Shape shape;
};

Linear prepare_linear(const OpCall& c) {
  Tensor x = c.tensor(0), w = c.tensor(1);
  if (w.dim() != 2) fail(cat("weight expected a 2-D tensor {out, in}, got ", w.describe()));
  if (x.dim() == 0) fail(cat("input expected a tensor of at least 1 dim, got ", x.describe()));
  check_pair(x, w);
  if (x.size(x.dim() - 1) != w.size(1))
    fail(cat("input of shape ", shape_str(x.sizes()), " does not fit weight of shape ", shape_str(w.sizes()), " (",
             x.size(x.dim() - 1), " input features, weight expects ", w.size(1), ")"));
  Linear l{x, Tensor::view_of(w, {w.size(1), w.size(0)}, {w.stride(1), w.stride(0)}, w.offset()), {}, x.sizes()};
  l.shape.back() = w.size(0);
  if (c.has(2)) {
    l.bias = c.tensor(2);
    check_pair(x, l.bias);
    if (!broadcasts_to(l.bias.sizes(), l.shape))
      fail(cat("bias of shape ", shape_str(l.bias.sizes()), " does not broadcast to the output shape ", shape_str(l.shape)));
  }
  return l;
}

std::vector<Meta> infer_linear(OpCall& c) {
  Linear l = prepare_linear(c);
  return {{l.shape, l.x.dtype(), l.x.device()}};
}

void run_linear(OpCall& c) {
  Linear l = prepare_linear(c);
  const Tensor& b = l.bias;
  const bool row_bias = !b.defined() || (b.dim() == 1 && b.size(0) == l.wt.size(1) && b.stride(0) == 1);
  if (row_bias && small_product(c.ctx, c.outs[0], l.x.dim() == 1 ? as_row(l.x) : l.x, l.wt, l.bias)) return;
  if (l.bias.defined()) copy_into(c.outs[0], l.bias);  // the product accumulates onto it
  Tensor x = l.x.dim() == 1 ? as_row(l.x) : l.x;
  Shape full = x.sizes();
  full.back() = l.wt.size(1);
  matmul_into(Tensor::view_of(c.outs[0], full, contiguous_strides(full), 0), x, l.wt, l.bias.defined());
}

// ---- tril / triu: keep the lower / upper triangle of the last two dims ------------------------

template <bool Lower> std::vector<Meta> infer_tri(OpCall& c) {
  Tensor x = c.tensor(0);
  if (x.dim() < 2) fail(cat("expected a tensor of at least 2 dims, got ", x.describe()));
  (void)c.integer_or(1, 0);  // validates diagonal
  return {{x.sizes(), x.dtype(), x.device()}};
}

// Copies x, then zeroes the other triangle row by row (zero is all-bits-zero in every dtype).
template <bool Lower> void run_tri(OpCall& c) {
  const Tensor& out = c.outs[0];
  copy_into(out, c.tensor(0));
  const int64_t k = c.integer_or(1, 0), R = out.size(out.dim() - 2), C = out.size(out.dim() - 1);
  if (out.numel() == 0) return;
  const size_t isz = out.itemsize();
  char* base = out.data_bytes();
  const int64_t rows = out.numel() / C;
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = r % R;
      char* row = base + size_t(r * C) * isz;
      // tril keeps j <= i + k: zero [i + k + 1, C); triu keeps j >= i + k: zero [0, i + k)
      if (Lower) {
        int64_t from = std::clamp<int64_t>(i + k + 1, 0, C);
        std::memset(row + size_t(from) * isz, 0, size_t(C - from) * isz);
      } else {
        int64_t to = std::clamp<int64_t>(i + k, 0, C);
        std::memset(row, 0, size_t(to) * isz);
      }
    }
  });
}

}  // namespace

void register_linalg(Registry& r) {
  const int dev = kDeviceAware | kExtern;  // (BLAS calls)
  r.add(OpDef{"matmul", "self:T, other:T", OpKind::Linalg, dev, infer_matmul, run_matmul});
  r.add(OpDef{"mm", "self:T, mat2:T", OpKind::Linalg, dev, infer_mm, run_fixed});
  r.add(OpDef{"bmm", "self:T, mat2:T", OpKind::Linalg, dev, infer_bmm, run_fixed});
  r.add(OpDef{"linear", "input:T, weight:T, bias:T?", OpKind::Linalg, kNoMethod | dev, infer_linear, run_linear});
  r.add(OpDef{"tril", "self:T, diagonal:I?", OpKind::Linalg, 0, infer_tri<true>, run_tri<true>});
  r.add(OpDef{"triu", "self:T, diagonal:I?", OpKind::Linalg, 0, infer_tri<false>, run_tri<false>});
  r.set_cast({"matmul", "mm", "bmm", "linear"}, CastPolicy::Lower);  // autocast: tensor-core dtypes
  r.set_cast({"matmul", "mm", "bmm", "linear"}, CastPolicy::Lower, true);  // (PyTorch's CPU list too)
}

}  // namespace cr
