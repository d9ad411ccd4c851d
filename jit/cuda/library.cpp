#include "jit/cuda/library.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "vm/cuda/driver.hpp"
#include "jit/cuda/eager.hpp"
#include "jit/cuda/exprs.hpp"
#include "jit/cuda/prelude.hpp"
#include "jit/cuda/program.hpp"
#include "vm/cuda/streams.hpp"
#include "jit/jit.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::jit::cuda {
namespace {

using cr::cuda::CUfunction;
using cr::cuda::CUmodule;

// cumsum over a contiguous {outer, n, inner}.
// cumsum_rows (inner == 1, rows longer than a warp): a block per chunk of a row walks it in tiles
// of 4 * blockDim elements: each thread adds its 4 neighbours, a warp scan (shuffles) of the
// threads' sums, the warps' totals scanned by warp 0, and the carry of the tiles before. Few long
// rows (a block per row would leave most of the GPU idle) are cut into chunks: cumsum_totals sums
// each chunk first, and a chunk's block starts from the sum of the totals before it.
// cumsum_walk (columns, or short rows): a thread per (outer, inner) position adds along n, reading
// `inner` apart (neighbouring threads read neighbouring columns).
constexpr const char* kScanText = R"CUDA(
__device__ __forceinline__ A warp_scan(A v, int lane) {
  for (int o = 1; o < 32; o <<= 1) {
    const A t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  return v;
}

// The sum of every thread's v, for all threads; `shared` holds 32 values.
__device__ __forceinline__ A block_total(A v, A* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  A t = A(0);
  for (int w = 0; w < warps; ++w) t += shared[w];
  return t;
}

extern "C" __global__ void cumsum_totals(const T* __restrict__ x, A* __restrict__ totals, long long n, long long chunk,
                                         long long chunks) {
  __shared__ A shared[32];
  const long long row = blockIdx.x / chunks, c = blockIdx.x - row * chunks;
  const long long lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
  x += row * n;
  A s = A(0);
  for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) s += A(x[i]);
  s = block_total(s, shared);
  if (threadIdx.x == 0) totals[blockIdx.x] = s;
}

extern "C" __global__ void cumsum_rows(const T* __restrict__ x, T* __restrict__ y, long long n, long long chunk,
                                       long long chunks, const A* __restrict__ totals) {
  __shared__ A shared[32];
  const long long row = blockIdx.x / chunks, c = blockIdx.x - row * chunks;
  const long long lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
  x += row * n;
  y += row * n;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  A carry = A(0);
  if (c > 0) {  // the chunks before this one
    for (long long k = threadIdx.x; k < c; k += blockDim.x) carry += totals[row * chunks + k];
    carry = block_total(carry, shared);
  }
  for (long long base = lo; base < hi; base += 4 * (long long)blockDim.x) {
    const long long i0 = base + 4 * (long long)threadIdx.x;
    A v[4], run = A(0);
    for (int e = 0; e < 4; ++e) {
      if (i0 + e < hi) run += A(x[i0 + e]);
      v[e] = run;
    }
    const A inclusive = warp_scan(run, lane);
    A before = __shfl_up_sync(0xffffffffu, inclusive, 1);
    if (lane == 0) before = A(0);
    __syncthreads();  // (every reader of the last tile's totals is done)
    if (lane == 31) shared[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
      const A t = warp_scan(lane < warps ? shared[lane] : A(0), lane);
      if (lane < warps) shared[lane] = t;
    }
    __syncthreads();
    if (warp > 0) before += shared[warp - 1];
    before += carry;
    for (int e = 0; e < 4; ++e)
      if (i0 + e < hi) y[i0 + e] = T(before + v[e]);
    carry += shared[warps - 1];
  }
}

extern "C" __global__ void cumsum_walk(const T* __restrict__ x, T* __restrict__ y, long long n, long long inner,
                                       long long positions) {
  const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= positions) return;
  const long long o = p / inner, at = o * n * inner + (p - o * inner);
  A acc = A(0);
  for (long long i = 0; i < n; ++i) {
    acc += A(x[at + i * inner]);
    y[at + i * inner] = T(acc);
  }
}
)CUDA";

// sort / topk over lines of {outer, n, inner} (element i of line (o, j) at (o * n + i) * inner + j).
// sort_lines: a block per chunk of a line sorts it in shared memory - keys C and 0-based int32
// positions, padded to pow2 with slots that order last - by a bitonic network, in the CPU's total
// order (NaN above every number, equal values by position), and writes its first `keep` to line
// slots chunk * keep + t of an output {outer, out_len, inner}. A line longer than a block's chunk
// is cut: for topk each chunk keeps its first k, and the kept candidates (with their positions, xi)
// are ordered again until one chunk holds them; a whole sort merges the sorted chunks pairwise.
constexpr const char* kSortText = R"CUDA(
#define PAD 0x7fffffff
__device__ __forceinline__ bool ahead(C a, long long ia, C b, long long ib, int desc) {
  if (ia == PAD || ib == PAD) return ib == PAD && ia != PAD;
  const bool na = a != a, nb = b != b;
  if (na || nb) {
    if (na && nb) return ia < ib;
    return desc ? na : nb;
  }
  if (a != b) return desc ? a > b : a < b;
  return ia < ib;
}

extern "C" __global__ void sort_lines(const T* __restrict__ x, const long long* __restrict__ xi, T* __restrict__ y,
                                      long long* __restrict__ yi, long long n, long long inner, long long chunk,
                                      long long chunks, long long keep, long long out_len, int pow2, int desc, int one) {
  extern __shared__ __align__(16) unsigned char smem[];
  C* key = reinterpret_cast<C*>(smem);
  int* pos = reinterpret_cast<int*>(smem + sizeof(C) * pow2);
  const long long b = blockIdx.x, line = b / chunks, c = b - line * chunks;
  const long long o = line / inner, j = line - o * inner;
  const long long in_base = o * n * inner + j, out_base = o * out_len * inner + j, first = c * chunk;
  const long long m = chunk < n - first ? chunk : n - first;
  for (int t = threadIdx.x; t < pow2; t += blockDim.x) {
    if (t < m) {
      const long long at = in_base + (first + t) * inner;
      key[t] = C(x[at]);
      pos[t] = xi ? int(xi[at]) : int(first + t);
    } else pos[t] = PAD;
  }
  __syncthreads();
  for (int k = 2; k <= pow2; k <<= 1) {
    for (int s = k >> 1; s > 0; s >>= 1) {
      for (int t = threadIdx.x; t < pow2 / 2; t += blockDim.x) {
        const int i = (t / s) * 2 * s + (t % s), l = i + s;
        if (ahead(key[l], pos[l], key[i], pos[i], desc) == ((i & k) == 0)) {
          const C kt = key[i];
          key[i] = key[l];
          key[l] = kt;
          const int pt = pos[i];
          pos[i] = pos[l];
          pos[l] = pt;
        }
      }
      __syncthreads();  // (warp-only syncs between stages whose pairs stay in a warp's 64 slots measured alike)
    }
  }
  const long long kept = keep < m ? keep : m;
  for (int t = threadIdx.x; t < kept; t += blockDim.x) {
    const long long at = out_base + (c * keep + t) * inner;
    y[at] = T(key[t]);
    yi[at] = (long long)pos[t] + one;
  }
}

// merge_runs: lines of n whose runs of `run` elements are sorted (0-based positions xi); each pair
// of neighbouring runs becomes one sorted run. An element's place is its rank in its own run plus
// the number of the other run's elements ahead of it, found by a binary search: the order is
// total, so no two elements claim one place.
extern "C" __global__ void merge_runs(const T* __restrict__ x, const long long* __restrict__ xi, T* __restrict__ y,
                                      long long* __restrict__ yi, long long n, long long inner, long long run,
                                      long long elements, int desc, int one) {
  const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= elements) return;
  const long long line = p / n, i = p - line * n, o = line / inner, base = o * n * inner + (line - o * inner);
  const long long r = i / run, other = (r ^ 1) * run, at = base + i * inner;
  const T v = x[at];
  const C key = C(v);
  const long long vi = xi[at];
  long long lo = 0;
  if (other < n) {
    long long hi = run < n - other ? run : n - other;
    while (lo < hi) {
      const long long mid = (lo + hi) / 2, m_at = base + (other + mid) * inner;
      if (ahead(C(x[m_at]), xi[m_at], key, vi, desc)) lo = mid + 1;
      else hi = mid;
    }
  }
  const long long dst = base + ((r & ~1LL) * run + (i - r * run) + lo) * inner;
  y[dst] = v;
  yi[dst] = vi + one;
}
)CUDA";

constexpr int64_t kScanChunk = 16384;  // a chunk of a long row: 4 tiles of 4 x 1024

struct Library {
  CUmodule mod = nullptr;
  std::map<std::string, CUfunction> fns;
};
std::mutex g_mutex;
std::map<std::string, Library> g_libraries;  // by device and source; loaded for good

// The type sort compares T's values in (exactly: 16-bit floats widen to float).
const char* key_type(DType d) {
  switch (d) {
    case DType::f64: return "double";
    case DType::i64: return "long long";
    case DType::i32: case DType::b8: return "int";
    default: return "float";
  }
}

// The module of library `text` for element type `d`: the prelude, T, the accumulator A (cumsum)
// and the key type C (sort), the text.
std::string source_of(const char* text, DType d) {
  const char* acc = is_floating(d) ? "double" : "unsigned long long";  // (integers wrap, as on the CPU)
  return cat(prelude(), "\ntypedef ", cuda_type(d), " T;\ntypedef ", acc, " A;\ntypedef ", key_type(d), " C;\n", text);
}

// Function `fn` of the module named `key` on `device`, compiled from source() once per device:
// the key names the source (the prelude is fixed), so a launch builds no source text and hashes
// no more than the key.
CUfunction library_function(Context& ctx, int device, const std::string& key,
                            const std::function<std::string()>& source, const char* fn) {
  std::lock_guard<std::mutex> g(g_mutex);
  Library& lib = g_libraries[cat(device, " ", key)];
  if (!lib.mod) {
    const std::string arch = target_of(device).arch;
    const std::string bin = cuda_cubin(source(), key, arch, compile_cache_dir(ctx));
    cr::cuda::use_device(device);
    CR_CU(cuModuleLoadData(&lib.mod, bin.data()), "loading a library kernel");
  }
  CUfunction& f = lib.fns[fn];
  if (!f) CR_CU(cuModuleGetFunction(&f, lib.mod, fn), fn);
  return f;
}

// A launch past the 48 KiB of dynamic shared memory every kernel gets needs the function's
// opt-in (the attention kernels' tiles); granted once per function and size.
void allow_shared(CUfunction f, size_t bytes, const char* what) {
  constexpr size_t kDefault = 48 << 10;
  if (bytes <= kDefault) return;
  static std::mutex m;
  static std::map<CUfunction, size_t> granted;
  std::lock_guard<std::mutex> g(m);
  size_t& have = granted[f];
  if (have >= bytes) return;
  constexpr int kMaxDynamicShared = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  CR_CU(cuFuncSetAttribute(f, kMaxDynamicShared, int(bytes)), what);
  have = bytes;
}

void launch_function(CUfunction f, int device, int64_t grid, int block, void* const* args, const char* what,
                     size_t shared_bytes) {
  cr::cuda::use_device(device);
  allow_shared(f, shared_bytes, what);
  CR_CU(cuLaunchKernel(f, unsigned(grid), 1, 1, unsigned(block), 1, 1, unsigned(shared_bytes), cr::cuda::current_stream(device),
                       const_cast<void**>(args), nullptr),
        what);
}

// Function `fn` of the library `text` (named `name`) for element type `d`, on `device`.
CUfunction function(Context& ctx, int device, const char* name, const char* text, DType d, const char* fn) {
  return library_function(ctx, device, cat(name, "_", dtype_name(d)), [&] { return source_of(text, d); }, fn);
}

void launch(CUfunction f, int device, int64_t grid, int block, std::initializer_list<void*> args, const char* what,
            size_t shared_bytes = 0) {
  launch_function(f, device, grid, block, std::data(args), what, shared_bytes);
}

}  // namespace

void library_launch(Context& ctx, int device, const std::string& key, const std::function<std::string()>& source,
                    const char* fn, int64_t grid, int block, void* const* args, size_t shared_bytes) {
  launch_function(library_function(ctx, device, key, source, fn), device, grid, block, args, fn, shared_bytes);
}

std::string cumsum_source(DType d) { return source_of(kScanText, d); }
std::string sort_source(DType d) { return source_of(kSortText, d); }

void cumsum(Context& ctx, const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner) {
  if (out.numel() == 0) return;
  const int device = out.device().index;
  void *xp = x.data_bytes(), *yp = out.data_bytes();
  long long len = n;
  if (inner == 1 && n > 32) {
    int block = 32;
    while (block < 1024 && 4 * block < n) block *= 2;
    const int64_t sms = target_of(device).sm_count;
    long long chunk = n > kScanChunk && outer < 2 * sms ? kScanChunk : n, chunks = (n + chunk - 1) / chunk;
    if (outer * chunks < (int64_t(1) << 31)) {
      Tensor totals;
      void* tp = nullptr;
      if (chunks > 1) {
        totals = Tensor::empty({outer * chunks}, is_floating(out.dtype()) ? DType::f64 : DType::i64, out.device());
        tp = totals.data_bytes();
        launch(function(ctx, device, "cumsum", kScanText, out.dtype(), "cumsum_totals"), device, outer * chunks, 1024,
               {&xp, &tp, &len, &chunk, &chunks}, "cumsum_totals");
      }
      launch(function(ctx, device, "cumsum", kScanText, out.dtype(), "cumsum_rows"), device, outer * chunks, block,
             {&xp, &yp, &len, &chunk, &chunks, &tp}, "cumsum_rows");
      return;
    }
  }
  long long in = inner, positions = outer * inner;
  constexpr int kBlock = 256;
  launch(function(ctx, device, "cumsum", kScanText, out.dtype(), "cumsum_walk"), device, (positions + kBlock - 1) / kBlock, kBlock,
         {&xp, &yp, &len, &in, &positions}, "cumsum_walk");
}

}  // namespace cr::jit::cuda

namespace cr::jit::cuda {
namespace {

int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// One sort_lines launch over every line: chunks of `chunk`, the first `keep` of each written to
// {outer, out_len, inner} at y / yi.
void sort_pass(Context& ctx, const Tensor& x, const Tensor* xi, const Tensor& y, const Tensor& yi, int64_t outer,
               int64_t n, int64_t inner, int64_t chunk, int64_t keep, int64_t out_len, bool descending, bool final) {
  const int device = y.device().index;
  const int64_t chunks = (n + chunk - 1) / chunk, p2 = next_pow2(chunk);
  const int block = int(std::clamp<int64_t>(p2 / 2, 32, 1024));
  const size_t key_bytes = x.dtype() == DType::f64 || x.dtype() == DType::i64 ? 8 : 4;  // (key_type's size)
  const size_t shared = size_t(p2) * (key_bytes + 4);  // 48 KiB at most: kSortChunk 4096 of 8-byte keys
  void *xp = x.data_bytes(), *xip = xi ? xi->data_bytes() : nullptr, *yp = y.data_bytes(), *yip = yi.data_bytes();
  long long n_ = n, inner_ = inner, chunk_ = chunk, chunks_ = chunks, keep_ = keep, out_len_ = out_len;
  int pow2 = int(p2), desc = descending, one = final;
  launch(function(ctx, device, "sort", kSortText, x.dtype(), "sort_lines"), device, outer * inner * chunks, block,
         {&xp, &xip, &yp, &yip, &n_, &inner_, &chunk_, &chunks_, &keep_, &out_len_, &pow2, &desc, &one}, "sort_lines",
         shared);
}

// One merge_runs launch: runs of `run` of x / xi into runs of 2 * run of y / yi.
void merge_pass(Context& ctx, const Tensor& x, const Tensor& xi, const Tensor& y, const Tensor& yi, int64_t outer,
                int64_t n, int64_t inner, int64_t run, bool descending, bool final) {
  const int device = y.device().index;
  void *xp = x.data_bytes(), *xip = xi.data_bytes(), *yp = y.data_bytes(), *yip = yi.data_bytes();
  long long n_ = n, inner_ = inner, run_ = run, elements = outer * n * inner;
  int desc = descending, one = final;
  constexpr int kBlock = 256;
  launch(function(ctx, device, "sort", kSortText, x.dtype(), "merge_runs"), device, (elements + kBlock - 1) / kBlock, kBlock,
         {&xp, &xip, &yp, &yip, &n_, &inner_, &run_, &elements, &desc, &one}, "merge_runs");
}

// A sort of lines longer than a chunk: the chunks sorted in shared memory, then merged pairwise
// (log2(n / chunk) passes); the first k of the sorted lines are the result.
void sort_long(Context& ctx, const Tensor& x, int64_t outer, int64_t n, int64_t inner, int64_t k, bool descending,
               const Tensor& values, const Tensor& indices) {
  const Shape lines{outer, n, inner};
  Tensor v = Tensor::empty(lines, x.dtype(), x.device()), vi = Tensor::empty(lines, DType::i64, x.device());
  sort_pass(ctx, x, nullptr, v, vi, outer, n, inner, kSortChunk, kSortChunk, n, descending, false);
  Tensor w = Tensor::empty(lines, x.dtype(), x.device()), wi = Tensor::empty(lines, DType::i64, x.device());
  for (int64_t run = kSortChunk; run < n; run *= 2) {
    const bool last = run * 2 >= n, direct = last && k == n;
    merge_pass(ctx, v, vi, direct ? values : w, direct ? indices : wi, outer, n, inner, run, descending, last);
    if (direct) return;
    std::swap(v, w);
    std::swap(vi, wi);
  }
  const Shape kept{outer, k, inner}, strides = contiguous_strides(lines), out_strides = contiguous_strides(kept);
  copy_into(Tensor::view_of(values, kept, out_strides, values.offset()), Tensor::view_of(v, kept, strides, 0));
  copy_into(Tensor::view_of(indices, kept, out_strides, indices.offset()), Tensor::view_of(vi, kept, strides, 0));
}

}  // namespace

bool order_lines(Context& ctx, const Tensor& x, int64_t outer, int64_t n, int64_t inner, int64_t k, bool descending,
                 const Tensor& values, const Tensor& indices) {
  if (n >= (int64_t(1) << 31) || outer * inner * ((n + kSortChunk - 1) / kSortChunk) >= (int64_t(1) << 31)) return false;
  if (values.numel() == 0) return true;
  if (n > kSortChunk && k > kSortChunk / 2) {
    sort_long(ctx, x, outer, n, inner, k, descending, values, indices);
    return true;
  }
  Tensor cur = x, cur_i;
  int64_t len = n;
  while (len > kSortChunk) {  // keep each chunk's first k, until one chunk holds the candidates
    const int64_t full = len / kSortChunk, rest = len % kSortChunk;
    const int64_t out_len = full * k + std::min(k, rest);
    Tensor v = Tensor::empty({outer, out_len, inner}, x.dtype(), x.device());
    Tensor vi = Tensor::empty({outer, out_len, inner}, DType::i64, x.device());
    sort_pass(ctx, cur, cur_i.defined() ? &cur_i : nullptr, v, vi, outer, len, inner, kSortChunk, k, out_len, descending,
              false);
    cur = v;
    cur_i = vi;
    len = out_len;
  }
  sort_pass(ctx, cur, cur_i.defined() ? &cur_i : nullptr, values, indices, outer, len, inner, len, k, k, descending, true);
  return true;
}

}  // namespace cr::jit::cuda
