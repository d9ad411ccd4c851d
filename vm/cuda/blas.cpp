#include "vm/cuda/blas.hpp"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <mutex>
#include <optional>
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
// cuBLAS's slow SM75 kernels, 4-7x slower (bench/RESULTS.md). Large ones (not a decoding step's
// few rows) run over the dims rounded down to 8, plus thin products for the tails, on operands
// whose lines are 16-byte aligned: those that are not are copied first (Inductor's pad_mm).
constexpr double kPadMinWork = double(1 << 28);      // M N K
constexpr double kPadWorkPerCopied = 64;             // M N K per element copied, at least
constexpr size_t kCopyBlockBytes = size_t(128) << 20; // a copied result goes in blocks of rows this large
int up8(int n) { return (n + 7) / 8 * 8; }
bool aligned(const void* p, int ld, size_t es) { return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld * es % 16 == 0; }

// An operand {rows, cols}: row-major (element (i, j) at i * ld + j) or column-major (i + j * ld).
struct Operand {
  const char* p;
  int ld;
  bool colmajor;
  const char* at(int i, int j, size_t es) const {
    return p + (colmajor ? i + int64_t(j) * ld : int64_t(i) * ld + j) * int64_t(es);
  }
};

// Device memory for the length of a scope.
struct Scratch {
  char* p;
  size_t bytes;
  int index;
  Scratch(size_t b, int i) : p(static_cast<char*>(device_alloc(b, i))), bytes(b), index(i) {}
  ~Scratch() { device_free(p, bytes, index); }  // (cached per stream: later work on it is ordered after)
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// o {rows, cols} with its lines up8(their length) apart: the bytes it takes, and a copy in `to`.
size_t aligned_bytes(const Operand& o, int rows, int cols, size_t es) {
  return size_t(up8(o.colmajor ? rows : cols)) * size_t(o.colmajor ? cols : rows) * es;
}
Operand aligned_copy(const Operand& o, int rows, int cols, size_t es, char* to, int index) {
  const int lines = o.colmajor ? cols : rows, width = o.colmajor ? rows : cols, pitch = up8(width);
  copy_rows(to, size_t(pitch) * es, o.p, size_t(o.ld) * es, size_t(width) * es, size_t(lines), index);
  return {to, pitch, o.colmajor};
}

// C = A B + beta C as the product over the dims rounded down to 8 and thin ones for the tails;
// the K tail first, so that the body adds it to its sum rounded once.
void split_gemm(int index, DType d, int M, int N, int K, const Operand& A, const Operand& B, char* C, int ldc,
                double beta) {
  const size_t es = dtype_size(d);
  auto run = [&](int m, int n, int k, int i, int j, int l, double b) {  // C[i.., j..] = A[i.., l..] B[l.., j..] + b C
    if (m == 0 || n == 0 || k == 0) return;
    gemm_batched(index, d, m, n, k, A.at(i, l, es), A.ld, A.colmajor, 0, B.at(l, j, es), B.ld, B.colmajor, 0,
                 C + (int64_t(i) * ldc + j) * int64_t(es), ldc, 0, 1, b);
  };
  const int M8 = M / 8 * 8, N8 = N / 8 * 8, K8 = K / 8 * 8;
  if (K8 < K) {
    run(M, N, K - K8, 0, 0, K8, beta);
    beta = 1;
  }
  run(M8, N8, K8, 0, 0, 0, beta);
  run(M8, N - N8, K8, 0, N8, 0, beta);
  run(M - M8, N, K8, M8, 0, 0, beta);
}

bool aligned_gemm(int index, DType d, int M, int N, int K, Operand A, Operand B, void* C, int ldc, double beta) {
  const size_t es = dtype_size(d);
  const double work = double(M) * double(N) * double(K);
  if ((d != DType::f16 && d != DType::bf16) || work < kPadMinWork) return false;
  const bool copy_a = !aligned(A.p, A.ld, es), copy_b = !aligned(B.p, B.ld, es), copy_c = !aligned(C, ldc, es);
  if (!copy_a && !copy_b && !copy_c && M % 8 == 0 && N % 8 == 0 && K % 8 == 0) return false;
  const double copied = (copy_a ? double(M) * K : 0) + (copy_b ? double(K) * N : 0) + (copy_c ? double(M) * N : 0);
  if (copied * kPadWorkPerCopied > work) return false;
  std::optional<Scratch> sb;
  if (copy_b) B = aligned_copy(B, K, N, es, sb.emplace(aligned_bytes(B, K, N, es), index).p, index);
  const Operand whole_c{static_cast<const char*>(C), ldc, false};
  const int block = copy_c ? std::max(8, int(kCopyBlockBytes / (size_t(up8(N)) * es)) / 8 * 8) : M;
  for (int i = 0; i < M; i += block) {
    const int m = std::min(block, M - i);
    Operand a{A.at(i, 0, es), A.ld, A.colmajor}, c{whole_c.at(i, 0, es), ldc, false};
    std::optional<Scratch> sa, sc;
    if (copy_a) a = aligned_copy(a, m, K, es, sa.emplace(aligned_bytes(a, m, K, es), index).p, index);
    if (copy_c) {
      char* to = sc.emplace(aligned_bytes(c, m, N, es), index).p;
      if (beta != 0) aligned_copy(c, m, N, es, to, index);
      c = {to, up8(N), false};
    }
    split_gemm(index, d, m, N, K, a, B, const_cast<char*>(c.p), c.ld, beta);
    if (copy_c)
      copy_rows(const_cast<char*>(whole_c.at(i, 0, es)), size_t(ldc) * es, c.p, size_t(c.ld) * es, size_t(N) * es,
                size_t(m), index);
  }
  return true;
}

}  // namespace

// cuBLAS is column-major: the row-major C {M, N} is the column-major C^T {N, M} = B^T A^T, and a
// row-major operand read as column-major is its transpose - so B goes first, transposed only
// when it is column-major itself.
void gemm(int index, DType d, int M, int N, int K, const void* A, int lda, bool a_colmajor, const void* B, int ldb,
          bool b_colmajor, void* C, int ldc, double beta) {
  if (aligned_gemm(index, d, M, N, K, {static_cast<const char*>(A), lda, a_colmajor},
                   {static_cast<const char*>(B), ldb, b_colmajor}, C, ldc, beta))
    return;
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
