#include "vm/cuda/blas.hpp"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "vm/cuda/dl.hpp"
#include "vm/cuda/blaslt.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/error.hpp"

namespace cr::cuda {
namespace {

using Handle = void*;
using Status = int;
constexpr int kOpN = 0, kOpT = 1;
// cudaDataType / cublasComputeType_t / cublasGemmAlgo_t values (library_types.h, cublas_api.h)
constexpr int kCudaR32F = 0, kCudaR16F = 2, kCudaR16BF = 14, kComputeF32 = 68, kComputeTf32 = 77, kGemmDefault = -1;
std::atomic<bool> tf32{false};

struct Blas {
  Status (*create)(Handle*);
  Status (*set_stream)(Handle, CUstream);
  Status (*sgemm)(Handle, int, int, int, int, int, const float*, const float*, int, const float*, int, const float*,
                  float*, int);
  Status (*dgemm)(Handle, int, int, int, int, int, const double*, const double*, int, const double*, int,
                  const double*, double*, int);
  Status (*sgemm_b)(Handle, int, int, int, int, int, const float*, const float*, int, long long, const float*, int,
                    long long, const float*, float*, int, long long, int);
  Status (*dgemm_b)(Handle, int, int, int, int, int, const double*, const double*, int, long long, const double*, int,
                    long long, const double*, double*, int, long long, int);
  Status (*gemm_ex_b)(Handle, int, int, int, int, int, const void*, const void*, int, int, long long, const void*, int,
                      int, long long, const void*, void*, int, int, long long, int, int, int);
  bool ok = false;
  std::string why;
  // per device and stream slot, created on first use: cuBLAS keeps a workspace per handle, which
  // two streams running at once must not share
  std::vector<std::array<Handle, kPoolStreams + 1>> handles;
};

Blas& blas() {
  static Blas B;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!driver(&B.why)) return;
    void* lib = open_first({"libcublas.so.13", "libcublas.so.12", "libcublas.so"});
    if (!lib) {
      B.why = "libcublas could not be loaded (libcublas.so.13 / .12 not found)";
      return;
    }
    B.create = reinterpret_cast<decltype(B.create)>(dlsym(lib, "cublasCreate_v2"));
    B.set_stream = reinterpret_cast<decltype(B.set_stream)>(dlsym(lib, "cublasSetStream_v2"));
    B.sgemm = reinterpret_cast<decltype(B.sgemm)>(dlsym(lib, "cublasSgemm_v2"));
    B.dgemm = reinterpret_cast<decltype(B.dgemm)>(dlsym(lib, "cublasDgemm_v2"));
    B.sgemm_b = reinterpret_cast<decltype(B.sgemm_b)>(dlsym(lib, "cublasSgemmStridedBatched"));
    B.dgemm_b = reinterpret_cast<decltype(B.dgemm_b)>(dlsym(lib, "cublasDgemmStridedBatched"));
    B.gemm_ex_b = reinterpret_cast<decltype(B.gemm_ex_b)>(dlsym(lib, "cublasGemmStridedBatchedEx"));
    if (!B.create || !B.set_stream || !B.sgemm || !B.dgemm || !B.sgemm_b || !B.dgemm_b || !B.gemm_ex_b) {
      B.why = "libcublas lacks cublasCreate_v2 / cublasSetStream_v2 / cublas[SD]gemm_v2 / cublas[SD]gemmStridedBatched / cublasGemmStridedBatchedEx";
      return;
    }
    B.handles.assign(size_t(device_count()), {});
    B.ok = true;
  });
  return B;
}

void check_blas(Status s, const char* what) {
  if (s != 0) fail(cat("cuBLAS error ", s, " in ", what));
}

}  // namespace

void set_allow_tf32(bool on) { tf32.store(on, std::memory_order_relaxed); }
bool allow_tf32() { return tf32.load(std::memory_order_relaxed); }

bool blas_available(std::string* why) {
  Blas& B = blas();
  if (why) *why = B.why;
  return B.ok;
}

Handle handle(int index) {
  Blas& L = blas();
  if (!L.ok) fail(cat("matmul on CUDA needs cuBLAS: ", L.why));
  use_device(index);
  static std::mutex m;
  std::lock_guard<std::mutex> g(m);
  const int slot = current_slot(index);
  Handle& h = L.handles[size_t(index)][size_t(slot)];
  if (!h) {
    check_blas(L.create(&h), "cublasCreate");
    check_blas(L.set_stream(h, current_stream(index)), "cublasSetStream");  // (for good: one handle per stream)
  }
  return h;
}

void blas_prepare(int index) {
  if (blas_available()) handle(index);
  blaslt_prepare(index);
}

namespace {

// 16-bit products with a dim or row pitch off a multiple of 8 elements (a 50257 vocabulary) get
// cuBLAS's slow SM75 kernels, 4-7x slower (bench/RESULTS.md): large ones, whose padding copies are
// small beside them (not a decoding step's few rows), run zero-padded, as Inductor's pad_mm.
constexpr double kPadMinWork = double(1 << 28);  // M N K
constexpr double kPadWorkPerCopied = 64;         // M N K per element copied, at least
int up8(int n) { return (n + 7) / 8 * 8; }
bool aligned(const void* p, int ld, size_t es) { return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld * es % 16 == 0; }

// A {rows, cols} operand (lines of `cols` elements `ld` apart; of `rows` when column-major),
// padded with zeros to {up8(rows), up8(cols)}; `to` is null when it needs no copy.
struct Padded {
  const char* from;
  int ld, lines, width;  // its lines and their length, in elements
  char* to = nullptr;
  int pitch = 0, lines8 = 0;
  Padded(const void* p, int ld_, bool colmajor, int rows, int cols, size_t es)
      : from(static_cast<const char*>(p)), ld(ld_), lines(colmajor ? cols : rows), width(colmajor ? rows : cols) {
    pitch = up8(width);
    lines8 = up8(lines);
    if (pitch == width && lines8 == lines && aligned(p, ld, es)) pitch = ld, lines8 = lines;
  }
  bool copied() const { return to != nullptr; }
  bool needs_copy(size_t es) const { return pitch != ld || lines8 != lines || !aligned(from, ld, es); }
  size_t bytes(size_t es) const { return size_t(pitch) * size_t(lines8) * es; }
  // the copy, its padding zeroed
  void fill(int index, size_t es) {
    const size_t w = size_t(width) * es, p = size_t(pitch) * es;
    copy_rows(to, p, from, size_t(ld) * es, w, size_t(lines), index);
    if (p > w) zero_rows(to + w, p, p - w, size_t(lines), index);
    if (lines8 > lines) zero_rows(to + size_t(lines) * p, p, p, size_t(lines8 - lines), index);
  }
};

bool padded_gemm(int index, DType d, int M, int N, int K, const void* A, int lda, bool a_colmajor, const void* B,
                 int ldb, bool b_colmajor, void* C, int ldc, double beta) {
  const size_t es = dtype_size(d);
  if ((d != DType::f16 && d != DType::bf16) || double(M) * double(N) * double(K) < kPadMinWork) return false;
  Padded a(A, lda, a_colmajor, M, K, es), b(B, ldb, b_colmajor, K, N, es), c(C, ldc, false, M, N, es);
  if (!a.needs_copy(es) && !b.needs_copy(es) && !c.needs_copy(es)) return false;
  double copied = 0;
  for (const Padded* x : {&a, &b, &c})
    if (x->needs_copy(es)) copied += double(x->pitch) * double(x->lines8);
  if (copied * kPadWorkPerCopied > double(M) * double(N) * double(K)) return false;
  for (Padded* x : {&a, &b, &c})
    if (x->needs_copy(es)) x->to = static_cast<char*>(device_alloc(x->bytes(es), index));
  if (a.copied()) a.fill(index, es);
  if (b.copied()) b.fill(index, es);
  if (c.copied() && beta != 0) c.fill(index, es);
  gemm_batched(index, d, up8(M), up8(N), up8(K), a.copied() ? a.to : A, a.copied() ? a.pitch : lda, a_colmajor, 0,
               b.copied() ? b.to : B, b.copied() ? b.pitch : ldb, b_colmajor, 0, c.copied() ? c.to : C,
               c.copied() ? c.pitch : ldc, 0, 1, beta);
  if (c.copied()) copy_rows(C, size_t(ldc) * es, c.to, size_t(c.pitch) * es, size_t(N) * es, size_t(M), index);
  for (Padded* x : {&a, &b, &c})  // (blocks are cached per stream: later work on it is ordered after)
    if (x->copied()) device_free(x->to, x->bytes(es), index);
  return true;
}

}  // namespace

// cuBLAS is column-major: the row-major C {M, N} is the column-major C^T {N, M} = B^T A^T, and a
// row-major operand read as column-major is its transpose - so B goes first, transposed only
// when it is column-major itself.
void gemm(int index, DType d, int M, int N, int K, const void* A, int lda, bool a_colmajor, const void* B, int ldb,
          bool b_colmajor, void* C, int ldc, double beta) {
  if (padded_gemm(index, d, M, N, K, A, lda, a_colmajor, B, ldb, b_colmajor, C, ldc, beta)) return;
  gemm_batched(index, d, M, N, K, A, lda, a_colmajor, 0, B, ldb, b_colmajor, 0, C, ldc, 0, 1, beta);
}

void gemm_batched(int index, DType d, int M, int N, int K, const void* A, int lda, bool a_colmajor, int64_t sa,
                  const void* B, int ldb, bool b_colmajor, int64_t sb, void* C, int ldc, int64_t sc, int batch, double beta) {
  Handle h = handle(index);
  Blas& L = blas();
  launch_counts().blas.fetch_add(1, std::memory_order_relaxed);
  const int opb = b_colmajor ? kOpT : kOpN, opa = a_colmajor ? kOpT : kOpN;
  const bool fast = d == DType::f32 && allow_tf32();
  if (d == DType::f16 || d == DType::bf16 || fast) {
    const int t = d == DType::f16 ? kCudaR16F : d == DType::bf16 ? kCudaR16BF : kCudaR32F;
    const float one = 1, b = float(beta);
    check_blas(L.gemm_ex_b(h, opb, opa, N, M, K, &one, B, t, ldb, sb, A, t, lda, sa, &b, C, t, ldc, sc, batch,
                           fast ? kComputeTf32 : kComputeF32, kGemmDefault),
               "cublasGemmStridedBatchedEx");
  } else if (d == DType::f64) {
    const double one = 1, b = beta;
    check_blas(L.dgemm_b(h, opb, opa, N, M, K, &one, static_cast<const double*>(B), ldb, sb,
                         static_cast<const double*>(A), lda, sa, &b, static_cast<double*>(C), ldc, sc, batch),
               "cublasDgemmStridedBatched");
  } else {
    const float one = 1, b = float(beta);
    check_blas(L.sgemm_b(h, opb, opa, N, M, K, &one, static_cast<const float*>(B), ldb, sb,
                         static_cast<const float*>(A), lda, sa, &b, static_cast<float*>(C), ldc, sc, batch),
               "cublasSgemmStridedBatched");
  }
}

}  // namespace cr::cuda
