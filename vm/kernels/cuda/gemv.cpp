#include "vm/kernels/cuda/gemv.hpp"

#include <algorithm>
#include <functional>

#include "vm/cuda/driver.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"

namespace cr::cuda {
namespace {

constexpr int kWarps = 8;                 // (as gemv.cuh)
constexpr int kRows = 4;                  // rows of w per warp (gemv.cuh's CR_GEMV instances)
constexpr int64_t kSmemBytes = 48 << 10;  // dynamic shared memory without an opt-in
constexpr int64_t kClusterSplit = 4;      // blocks of a cluster splitting k (gemv.cuh's gemv_MT_c4)

void* ptr(const Tensor& t) { return t.defined() ? t.data_bytes() : nullptr; }

// The slices of k per block: split while the row groups leave fewer than two blocks per
// multiprocessor and every lane of a slice still reads two chunks (short n, long k: fc2's 768 x 3072).
int k_slices(int64_t n, int64_t chunks, int64_t sms) {
  int ks = 1;
  while (ks < kWarps && (n + kWarps / ks * kRows - 1) / (kWarps / ks * kRows) < 2 * sms && chunks >= 64 * ks) ks *= 2;
  return ks;
}

// The kernel's Out (gemv.cuh), passed by value.
struct Out {
  const void* scales;
  const void *bias, *res;
  void* y;
  int act;
};

}  // namespace

bool settled(const Context& ctx, const Tensor& w) {
  const std::vector<const Storage*>* s = ctx.plan_settled;
  return s && std::find(s->begin(), s->end(), w.storage()) != s->end();
}

std::string gemv_source(DType x, bool int8, DType scales) {
  return cat(prelude(), "\ntypedef ", cuda_type(x), " T;\ntypedef ", int8 ? "signed char" : cuda_type(x),
             " W;\ntypedef ", cuda_type(scales), " S;\ntypedef ", x == DType::f64 ? "double" : "float", " A;\n",
             int8 ? "" : "#define CR_DENSE_W\n", cuda_source("gemv.cuh"));
}

namespace {

// w {k, n}: columns across the lanes, k split over a block's warps and a cluster's blocks (sm_90,
// slices of at least 64 rows); narrower column tiles until there are two blocks a multiprocessor.
void launch_kn(Context& ctx, int device, const std::string& key, const std::function<std::string()>& source, int mt,
               void* const* args, int64_t n, int64_t k, int64_t cols) {
  const DeviceInfo& info = device_info(device);
  const int64_t chunks = n / cols, cl = info.sm_major >= 9 && k >= 8 * 64 ? 8 : 1;
  int64_t lc = 32;
  while (lc > 8 && (chunks + lc - 1) / lc * cl < 2 * info.multiprocessors) lc /= 2;
  library_launch(ctx, device, key, source, cat("gemv_kn_", mt, "_", lc, "_", cl).c_str(), (chunks + lc - 1) / lc * cl,
                 kWarps * 32, args);
}

}  // namespace

void gemv(Context& ctx, const Tensor& y, const Tensor& x, int64_t ldx, const GemvWeights& w, const Tensor& bias,
          Epilogue act, const Tensor& residual, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0) return;
  int mt = 1;
  while (mt < m) mt *= 2;
  const DType d = x.dtype(), sd = w.int8 ? w.scales.dtype() : DType::f32;
  const std::string key = cat("gemv_", dtype_name(d), w.int8 ? "_int8_" : "_", dtype_name(sd));
  auto source = [d, int8 = w.int8, sd] { return gemv_source(d, int8, sd); };
  Out o{w.int8 ? ptr(w.scales) : nullptr, ptr(bias), ptr(residual), ptr(y), int(act)};
  void *xp = ptr(x), *wp = const_cast<void*>(w.p);
  long long lx = ldx, pitch = w.pitch / 16, nn = n, kk = k;
  int mm = int(m);
  if (w.kn) {
    int pre = w.settled;
    void* args[] = {&xp, &lx, &wp, &pitch, &o, &mm, &nn, &kk, &pre};
    return launch_kn(ctx, x.device().index, key, source, mt, args, n, k, 16 / int64_t(dtype_size(d)));
  }
  const DeviceInfo& info = device_info(x.device().index);
  const int64_t asize = d == DType::f64 ? 8 : 4, sms = info.multiprocessors;
  const int64_t cols = w.int8 ? 16 : 16 / int64_t(dtype_size(d)), chunks = w.kp / cols;
  // int8 from 8 rows, short n and long k (fc2's 768 x 3072): a cluster's blocks split k, each
  // staging its part of x, where the row groups alone leave most multiprocessors idle
  const int64_t cl = w.int8 && mt >= 8 && info.sm_major >= 9 && k_slices(n, chunks, sms) > 1 &&
                             chunks >= kClusterSplit * 32
                         ? kClusterSplit
                         : 1;
  const int64_t per = (chunks + cl - 1) / cl;
  const int ks = k_slices(n, per, sms);
  // the slices' sums (gemv.cuh; none for one slice), and the cluster ranks' (two buffers)
  const int64_t part = ks > 1 ? int64_t(kWarps) * mt * kRows * asize : 0;
  const int64_t ranks = cl > 1 ? 2 * cl * kWarps * mt * kRows * asize : 0;
  // the tile: all of the block's chunks when they fit, else the most whole chunks that do (more
  // than 4 rows of x: in the shared memory a block may opt in to, as x is staged for every tile)
  const int64_t budget = mt > 4 ? std::max<int64_t>(kSmemBytes, info.max_shared_per_block) : kSmemBytes;
  const int64_t fit = (budget - part - ranks) / (asize * mt) / 16 * 16;
  const int kt = int(std::max<int64_t>(16, std::min<int64_t>(per * cols, fit)));
  long long kpp = w.kp;
  int ktile = kt, kslices = ks, pre = w.settled;
  void* args[] = {&xp, &lx, &wp, &pitch, &o, &mm, &nn, &kk, &kpp, &ktile, &kslices, &pre};
  const int64_t group = kWarps / ks * kRows, groups = (n + group - 1) / group;
  library_launch(ctx, x.device().index, key, source, cat("gemv_", mt, cl > 1 ? cat("_c", cl) : "").c_str(),
                 std::min(groups, 4 * sms) * cl, kWarps * 32, args, size_t(mt * kt * asize + part + ranks));
}

}  // namespace cr::cuda
