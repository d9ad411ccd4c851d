#include "vm/cuda/blaslt.hpp"

#include <dlfcn.h>

#include <array>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "vm/cuda/dl.hpp"
#include "vm/cuda/blas.hpp"
#include "vm/cuda/blaslt_abi.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/error.hpp"

namespace cr::cuda {
namespace {

constexpr uint64_t kWorkspaceBytes = uint64_t(4) << 20;

struct Lt {
  lt::Functions f{};
  bool ok = false;
  std::string why;
  std::vector<lt::Handle> handles;  // per device, made on first use (not bound to a stream)
};

Lt& lib() {
  static Lt L;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!driver(&L.why)) return;
    void* h = open_first({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"});
    if (!h) {
      L.why = "libcublasLt could not be loaded (libcublasLt.so.13 / .12 not found)";
      return;
    }
    lt::Functions& f = L.f;
    if (!resolve(h, "cublasLtCreate", f.create) || !resolve(h, "cublasLtMatmulDescCreate", f.desc_create) ||
        !resolve(h, "cublasLtMatmulDescSetAttribute", f.desc_set) || !resolve(h, "cublasLtMatrixLayoutCreate", f.layout_create) ||
        !resolve(h, "cublasLtMatmulPreferenceCreate", f.pref_create) ||
        !resolve(h, "cublasLtMatmulPreferenceSetAttribute", f.pref_set) ||
        !resolve(h, "cublasLtMatmulAlgoGetHeuristic", f.heuristic) || !resolve(h, "cublasLtMatmul", f.matmul)) {
      L.why = "libcublasLt lacks one of cublasLtCreate / MatmulDescCreate / MatrixLayoutCreate / MatmulPreferenceCreate "
              "/ MatmulAlgoGetHeuristic / Matmul";
      return;
    }
    L.handles.assign(size_t(device_count()), nullptr);
    L.ok = true;
  });
  return L;
}

void check_lt(lt::Status s, const char* what) {
  if (s != 0) fail(cat("cuBLASLt error ", s, " in ", what));
}

// The largest power of two (up to 256) dividing a pointer: cuBLASLt's algorithms assume 256
// unless told, and the heuristic picks among those the operands' alignment allows.
uint32_t alignment(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a) a /= 2;
  return a;
}

// One shape's descriptors and chosen algorithm, kept for the process (a graph's few shapes).
struct Plan {
  lt::Handle desc = nullptr, a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  lt::HeuristicResult best{};
  bool ok = false;  // the heuristic found an algorithm
};
using Key = std::tuple<int, int, int, int, int, int, bool, int, bool, int, int, int, bool, std::array<uint32_t, 4>, bool>;

void set(lt::Handle desc, int attr, const auto& v) {
  check_lt(lib().f.desc_set(desc, attr, &v, sizeof v), "cublasLtMatmulDescSetAttribute");
}

uint32_t epilogue_code(Epilogue act, bool bias) {
  const uint32_t a = act == Epilogue::Relu ? lt::kEpiRelu : act == Epilogue::GeluTanh ? lt::kEpiGelu : 0;
  if (!a && !bias) return lt::kEpiDefault;
  return a | (bias ? lt::kEpiBias : 0);
}

// cuBLASLt is column-major: the row-major D {M, N} is the column-major D^T {N, M} = B^T A^T (as
// in blas.cpp), so its first operand is B and the bias runs along its N rows.
Plan make_plan(lt::Handle handle, int type, int M, int N, int K, int lda, bool at, int ldb, bool bt, bool bias,
               Epilogue act, bool res, int ldr, int ldd, const std::array<uint32_t, 4>& aligns) {
  const lt::Functions& f = lib().f;
  Plan p;
  const bool tf32 = type == lt::kR32F && allow_tf32();
  check_lt(f.desc_create(&p.desc, tf32 ? lt::kCompute32FTf32 : lt::kCompute32F, lt::kR32F), "cublasLtMatmulDescCreate");
  set(p.desc, lt::kDescTransA, int32_t(bt ? lt::kOpT : lt::kOpN));
  set(p.desc, lt::kDescTransB, int32_t(at ? lt::kOpT : lt::kOpN));
  set(p.desc, lt::kDescEpilogue, epilogue_code(act, bias));
  check_lt(f.layout_create(&p.a, type, bt ? K : N, bt ? N : K, ldb), "cublasLtMatrixLayoutCreate");
  check_lt(f.layout_create(&p.b, type, at ? M : K, at ? K : M, lda), "cublasLtMatrixLayoutCreate");
  check_lt(f.layout_create(&p.c, type, N, M, res ? ldr : ldd), "cublasLtMatrixLayoutCreate");
  check_lt(f.layout_create(&p.d, type, N, M, ldd), "cublasLtMatrixLayoutCreate");
  lt::Handle pref = nullptr;
  check_lt(f.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
  check_lt(f.pref_set(pref, lt::kPrefMaxWorkspace, &kWorkspaceBytes, sizeof kWorkspaceBytes), "cublasLtMatmulPreferenceSetAttribute");
  const int attrs[4] = {lt::kPrefAlignA, lt::kPrefAlignB, lt::kPrefAlignC, lt::kPrefAlignD};
  for (int i = 0; i < 4; ++i)
    check_lt(f.pref_set(pref, attrs[i], &aligns[size_t(i)], sizeof(uint32_t)), "cublasLtMatmulPreferenceSetAttribute");
  int found = 0;
  const lt::Status s = f.heuristic(handle, p.desc, p.a, p.b, p.c, p.d, pref, 1, &p.best, &found);
  p.ok = s == 0 && found > 0 && p.best.state == 0;
  return p;  // (the preference is not needed again: a few bytes per shape left to the process)
}


std::mutex lt_mutex;  // (a plan's descriptor gets each call's bias pointer: one call at a time)

lt::Handle& handle_locked(Lt& L, int index) {
  lt::Handle& h = L.handles[size_t(index)];
  if (!h) check_lt(L.f.create(&h), "cublasLtCreate");
  return h;
}

}  // namespace

void blaslt_prepare(int index) {
  Lt& L = lib();
  if (!L.ok) return;
  use_device(index);
  std::lock_guard<std::mutex> g(lt_mutex);
  handle_locked(L, index);
}

bool blaslt_available(std::string* why) {
  Lt& L = lib();
  if (why) *why = L.why;
  return L.ok;
}

bool gemm_epilogue(int index, DType d, int M, int N, int K, const void* A, int lda, bool a_colmajor, const void* B,
                   int ldb, bool b_colmajor, const void* bias, Epilogue act, const void* R, int ldr, void* D, int ldd) {
  if (R && act != Epilogue::None) fail("gemm_epilogue: a residual operand comes only without an activation");
  Lt& L = lib();
  if (!L.ok || !(d == DType::f32 || d == DType::f16 || d == DType::bf16)) return false;
  const int type = d == DType::f16 ? lt::kR16F : d == DType::bf16 ? lt::kR16BF : lt::kR32F;
  use_device(index);
  static std::map<Key, Plan> plans;
  std::lock_guard<std::mutex> g(lt_mutex);
  lt::Handle h = handle_locked(L, index);
  // (in cuBLASLt's order: its A is our B)
  const std::array<uint32_t, 4> aligns{alignment(B), alignment(A), alignment(R ? R : D), alignment(D)};
  const Key key{index, type, M, N, K, lda, a_colmajor, ldb, b_colmajor, int(act), R ? ldr : -1, ldd, bias != nullptr,
                aligns, type == lt::kR32F && allow_tf32()};
  auto it = plans.find(key);
  if (it == plans.end())
    it = plans.emplace(key, make_plan(h, type, M, N, K, lda, a_colmajor, ldb, b_colmajor, bias != nullptr, act,
                                      R != nullptr, ldr, ldd, aligns)).first;
  Plan& p = it->second;
  if (!p.ok) return false;
  if (bias) set(p.desc, lt::kDescBiasPointer, bias);
  const float one = 1, beta = R ? 1.f : 0.f;
  const size_t ws = p.best.workspace_size;
  void* work = ws ? device_alloc(ws, index) : nullptr;
  const lt::Status s = L.f.matmul(h, p.desc, &one, B, p.a, A, p.b, &beta, R ? R : D, p.c, D, p.d, &p.best.algo, work,
                                  ws, current_stream(index));
  if (work) device_free(work, ws, index);  // (blocks are cached per stream: later work on it is ordered after)
  // (a case the chosen algorithm refuses at launch: nothing was queued)
  if (s == lt::kStatusNotSupported || s == lt::kStatusInvalidValue) {
    p.ok = false;
    return false;
  }
  check_lt(s, "cublasLtMatmul");
  launch_counts().blas.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace cr::cuda
