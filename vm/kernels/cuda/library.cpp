#include "vm/kernels/cuda/library.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "vm/cuda/checks.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/launch.hpp"
#include "vm/cuda/module.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/deterministic.hpp"
#include "vm/hooks.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/radix.hpp"
#include "vm/kernels/cuda/sources.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::cuda {
namespace {

constexpr int64_t kScanChunk = 16384;  // a chunk of a long row: 4 tiles of 4 x 1024
constexpr int64_t kScanTile = 8 * 32 * 16;  // scan.cuh SCAN_TILE

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

// The module of library source `cuh` (vm/kernels/cuda/<cuh>) for element type `d`: the prelude,
// T, the accumulator A (cumsum) and the key type C (sort), the source.
std::string source_of(const char* cuh, DType d) {
  const char* acc = is_floating(d) ? "double" : "unsigned long long";  // (integers wrap, as on the CPU)
  return cat(prelude(), "\ntypedef ", cuda_type(d), " T;\ntypedef ", acc, " A;\ntypedef ", key_type(d), " C;\n", cuda_source(cuh));
}

// Function `fn` of the module named `key` on `device`, compiled from source() once per device:
// the key names the source (the prelude is fixed), so a launch builds no source text and hashes
// no more than the key.
CUfunction library_function(Context& ctx, int device, const std::string& key,
                            const std::function<std::string()>& source, const char* fn) {
  std::lock_guard<std::mutex> g(g_mutex);
  Library& lib = g_libraries[cat(device, " ", key)];
  if (!lib.mod) {
    const std::string arch = device_arch(device);
    const std::string bin = hooks().cuda_cubin(ctx, source(), key, arch);
    use_device(device);
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
  use_device(device);
  allow_shared(f, shared_bytes, what);
  launch_counts().kernels.fetch_add(1, std::memory_order_relaxed);
  launch_kernel(f, device, grid, block, shared_bytes, const_cast<void**>(args), what);
}

// Function `fn` of the library source `cuh` (named `name`) for element type `d`, on `device`.
CUfunction function(Context& ctx, int device, const char* name, const char* cuh, DType d, const char* fn) {
  return library_function(ctx, device, cat(name, "_", dtype_name(d)), [&] { return source_of(cuh, d); }, fn);
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

std::shared_ptr<DeviceCheck> library_check(int device, const std::string& op, const std::vector<std::string>& whats) {
  static std::mutex m;
  static auto* checks = new std::map<std::string, std::shared_ptr<DeviceCheck>>;  // (never freed)
  std::string key = cat(device, "|", op);
  for (const std::string& w : whats) key += "|" + w;
  std::lock_guard<std::mutex> g(m);
  std::shared_ptr<DeviceCheck>& c = (*checks)[key];
  if (!c) {
    CheckSites sites;
    for (const std::string& w : whats) sites.push_back({"", op, w});
    c = std::make_shared<DeviceCheck>(device, sites);
  }
  return c;
}

std::string cumsum_source(DType d) { return source_of("scan.cuh", d); }
std::string sort_source(DType d) { return source_of("sort.cuh", d); }

namespace {

// Rows longer than a chunk in one pass (scan.cuh cumsum_scan): the tiles' flags and the counter
// zeroed, their totals and inclusive sums beside.
void cumsum_long_rows(Context& ctx, const Tensor& out, const Tensor& x, int64_t outer, int64_t n) {
  const int device = out.device().index;
  long long len = n, tiles = (n + kScanTile - 1) / kScanTile;
  const int64_t total = outer * tiles;
  const DType acc = is_floating(out.dtype()) ? DType::f64 : DType::i64;
  Tensor flags = Tensor::empty({total + 1}, DType::i32, out.device());  // (then the counter)
  Tensor sums = Tensor::empty({2 * total}, acc, out.device());
  fill_pattern(flags.data_bytes(), size_t(total + 1), 4, 0u, device);
  void *xp = x.data_bytes(), *yp = out.data_bytes(), *fp = flags.data_bytes();
  void *pp = sums.data_bytes(), *ip = static_cast<char*>(pp) + 8 * total, *cp = static_cast<int32_t*>(fp) + total;
  launch(function(ctx, device, "cumsum", "scan.cuh", out.dtype(), "cumsum_scan"), device, total, 256,
         {&xp, &yp, &len, &tiles, &fp, &pp, &ip, &cp}, "cumsum_scan");
}

}  // namespace

void cumsum(Context& ctx, const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner) {
  if (out.numel() == 0) return;
  const int device = out.device().index;
  void *xp = x.data_bytes(), *yp = out.data_bytes();
  long long len = n;
  // (floats under T.use_deterministic_algorithms take the chunked passes: a fixed association)
  if (inner == 1 && n > kScanChunk && outer * ((n + kScanTile - 1) / kScanTile) < (int64_t(1) << 31) &&
      !(deterministic() && is_floating(out.dtype()))) {
    cumsum_long_rows(ctx, out, x, outer, n);
    return;
  }
  if (inner == 1 && n > 32) {
    int block = 32;
    while (block < 1024 && 4 * block < n) block *= 2;
    const int64_t sms = device_info(device).multiprocessors;
    long long chunk = n > kScanChunk && outer < 2 * sms ? kScanChunk : n, chunks = (n + chunk - 1) / chunk;
    if (outer * chunks < (int64_t(1) << 31)) {
      Tensor totals;
      void* tp = nullptr;
      if (chunks > 1) {
        totals = Tensor::empty({outer * chunks}, is_floating(out.dtype()) ? DType::f64 : DType::i64, out.device());
        tp = totals.data_bytes();
        launch(function(ctx, device, "cumsum", "scan.cuh", out.dtype(), "cumsum_totals"), device, outer * chunks, 1024,
               {&xp, &tp, &len, &chunk, &chunks}, "cumsum_totals");
      }
      launch(function(ctx, device, "cumsum", "scan.cuh", out.dtype(), "cumsum_rows"), device, outer * chunks, block,
             {&xp, &yp, &len, &chunk, &chunks, &tp}, "cumsum_rows");
      return;
    }
  }
  long long in = inner, positions = outer * inner;
  constexpr int kBlock = 256;
  launch(function(ctx, device, "cumsum", "scan.cuh", out.dtype(), "cumsum_walk"), device, (positions + kBlock - 1) / kBlock, kBlock,
         {&xp, &yp, &len, &in, &positions}, "cumsum_walk");
}

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
  launch(function(ctx, device, "sort", "sort.cuh", x.dtype(), "sort_lines"), device, outer * inner * chunks, block,
         {&xp, &xip, &yp, &yip, &n_, &inner_, &chunk_, &chunks_, &keep_, &out_len_, &pow2, &desc, &one}, "sort_lines",
         shared);
}

}  // namespace

bool order_lines(Context& ctx, const Tensor& x, int64_t outer, int64_t n, int64_t inner, int64_t k, bool descending,
                 const Tensor& values, const Tensor& indices) {
  if (n >= (int64_t(1) << 31) || outer * inner * ((n + kSortChunk - 1) / kSortChunk) >= (int64_t(1) << 31)) return false;
  if (values.numel() == 0) return true;
  if (n > kSortChunk && k > kSortChunk / 2) {
    radix_sort_lines(ctx, x, outer, n, inner, k, descending, values, indices);
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

}  // namespace cr::cuda
