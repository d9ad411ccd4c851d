#include "vm/cuda/nccl.hpp"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "vm/cuda/dl.hpp"
#include "vm/config.hpp"
#include "vm/error.hpp"

namespace cr::cuda {
namespace {

using Result = int;  // ncclResult_t
using Comm = void*;  // ncclComm_t
constexpr Result kInProgress = 7;
constexpr int kNotReady = 600;               // CUDA_ERROR_NOT_READY (cuEventQuery on unfinished work)
constexpr unsigned kEventDisableTiming = 2;  // CU_EVENT_DISABLE_TIMING
const char* const kResultNames[] = {"ncclSuccess",      "ncclUnhandledCudaError", "ncclSystemError",
                                    "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                    "ncclRemoteError",  "ncclInProgress"};
// ncclDataType_t values (nccl.h)
constexpr int kUint8 = 1, kInt32 = 2, kInt64 = 4, kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9;

// ncclConfig_t as of NCCL 2.18 (nccl.h keeps the layout of each version: the library reads the
// fields `version` names and defaults the later ones), so any NCCL from 2.18 on takes it.
struct Config {
  size_t size = 0;  // (set to the bytes up to split_share: the padding after it is no field of ours)
  unsigned magic = 0xcafebeef;
  unsigned version = 21800;  // NCCL_VERSION(2, 18, 0)
  int blocking = 1;
  int cga_cluster_size = INT_MIN, min_ctas = INT_MIN, max_ctas = INT_MIN;  // NCCL_CONFIG_UNDEF_INT
  const char* net_name = nullptr;
  int split_share = INT_MIN;
};

struct Nccl {
  Result (*get_version)(int*);
  Result (*get_unique_id)(NcclId*);
  Result (*init_rank_config)(Comm*, int, NcclId, int, Config*);
  Result (*async_error)(Comm, Result*);
  Result (*finalize)(Comm);
  Result (*destroy)(Comm);
  Result (*abort)(Comm);
  const char* (*error_string)(Result);
  const char* (*last_error)(Comm);
  Result (*all_reduce)(const void*, void*, size_t, int, int, Comm, CUstream);
  Result (*broadcast)(const void*, void*, size_t, int, int, Comm, CUstream);
  Result (*all_gather)(const void*, void*, size_t, int, Comm, CUstream);
  Result (*reduce_scatter)(const void*, void*, size_t, int, int, Comm, CUstream);
  bool ok = false;
  std::string why;
};

void* open_library(std::string* tried) {
  std::vector<std::string> names;
  if (const char* e = env_setting(Setting::NcclLib); e && *e) {
    std::string p = e;
    names.push_back(p.find(".so") == std::string::npos ? p + "/libnccl.so.2" : p);
  }
  names.push_back("libnccl.so.2");
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) names.push_back(std::string(home) + "/lib64/libnccl.so.2");
  names.push_back("/usr/local/cuda/lib64/libnccl.so.2");
  return open_first(names, tried);
}

Nccl& nccl() {
  static Nccl N;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!driver(&N.why)) return;
    std::string tried;
    void* lib = open_library(&tried);
    if (!lib) {
      N.why = "libnccl.so.2 could not be loaded (tried " + tried + "; set CRESCENT_NCCL_LIB to its path)";
      return;
    }
    const bool all = resolve(lib, "ncclGetVersion", N.get_version) && resolve(lib, "ncclGetUniqueId", N.get_unique_id) &&
                     resolve(lib, "ncclCommInitRankConfig", N.init_rank_config) &&
                     resolve(lib, "ncclCommGetAsyncError", N.async_error) && resolve(lib, "ncclCommFinalize", N.finalize) &&
                     resolve(lib, "ncclCommDestroy", N.destroy) && resolve(lib, "ncclCommAbort", N.abort) &&
                     resolve(lib, "ncclGetErrorString", N.error_string) && resolve(lib, "ncclAllReduce", N.all_reduce) &&
                     resolve(lib, "ncclBroadcast", N.broadcast) && resolve(lib, "ncclAllGather", N.all_gather) &&
                     resolve(lib, "ncclReduceScatter", N.reduce_scatter);
    resolve(lib, "ncclGetLastError", N.last_error);  // (optional: NCCL 2.13 on)
    int v = 0;
    if (!all || N.get_version(&v) != 0 || v < 21800) {
      N.why = cat("the loaded libnccl.so.2 is too old (", v, "; crescent needs NCCL 2.18 or later)");
      return;
    }
    N.ok = true;
  });
  return N;
}

Nccl& loaded() {
  Nccl& N = nccl();
  if (!N.ok) fail("T.distributed needs NCCL: " + N.why);
  return N;
}

[[noreturn]] void nccl_fail(Result rc, const char* fn, Comm c) {
  Nccl& N = nccl();
  const char* name = rc >= 0 && rc < 8 ? kResultNames[rc] : "ncclResult";
  std::string detail = N.last_error ? N.last_error(c) : "";
  fail(cat("NCCL error in ", fn, ": ", name, " (", rc, "): ", N.error_string(rc), detail.empty() ? "" : " - " + detail));
}

}  // namespace

struct NcclComm {
  Comm comm = nullptr;
  int index = 0;
  double timeout_s = 300;
};

namespace {

using Clock = std::chrono::steady_clock;

const char* const kTimeoutHint =
    " s waiting for the other ranks (CRESCENT_DIST_TIMEOUT; did every rank call it, with the same world size?)";

// Ends the process when a blocking NCCL call outlives its deadline. Aborting the communicator from
// this thread instead would free what the blocked call still uses. Arming costs a clock read and
// two stores; the thread (one per process, started by the first arm) looks every 20 ms.
class Watchdog {
 public:
  void arm(const char* fn, double timeout_s) {
    std::call_once(started_, [this] { std::thread([this] { watch(); }).detach(); });
    fn_.store(fn, std::memory_order_relaxed);
    timeout_s_.store(timeout_s, std::memory_order_relaxed);
    const auto d = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    deadline_.store(d.time_since_epoch().count(), std::memory_order_release);
  }
  void disarm() { deadline_.store(0, std::memory_order_release); }

 private:
  [[noreturn]] void watch() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const Clock::rep d = deadline_.load(std::memory_order_acquire);
      if (d == 0 || Clock::now().time_since_epoch().count() <= d) continue;
      std::fprintf(stderr, "crescent: %s: timed out after %g%s; ending this process\n", fn_.load(),
                   timeout_s_.load(), kTimeoutHint);
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  std::once_flag started_;
  std::atomic<Clock::rep> deadline_{0};
  std::atomic<const char*> fn_{""};
  std::atomic<double> timeout_s_{0};
};

Watchdog& watchdog() {
  static Watchdog* w = new Watchdog;  // (never destroyed: its thread outlives static destruction)
  return *w;
}

// A non-blocking communicator (NCCL_COMM_BLOCKING=0 overrides ours) answers ncclInProgress: polls
// until the call is done; raises on an error, and aborts the communicator once timeout_s passed.
void settle(NcclComm& c, Result rc, const char* fn, double timeout_s) {
  Nccl& N = nccl();
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (int polls = 0; rc == kInProgress; ++polls) {
    if (Clock::now() > deadline) {
      N.abort(c.comm);
      c.comm = nullptr;
      fail(cat(fn, ": timed out after ", timeout_s, kTimeoutHint));
    }
    if (polls >= 64) std::this_thread::sleep_for(std::chrono::microseconds(polls < 256 ? 10 : 200));
    else if (polls > 0) std::this_thread::yield();
    if (Result e = N.async_error(c.comm, &rc); e != 0) nccl_fail(e, "ncclCommGetAsyncError", c.comm);
  }
  if (rc != 0) nccl_fail(rc, fn, c.comm);
}

// Runs the NCCL call `f` (blocking: it returns once queued, or once the other ranks came when it
// connects them) under the watchdog, then settles its result. f must not throw.
template <class F> void call(NcclComm& c, const char* fn, double timeout_s, F&& f) {
  watchdog().arm(fn, timeout_s);
  const Result rc = f();
  watchdog().disarm();
  settle(c, rc, fn, timeout_s);
}

int nccl_type(DType d) {
  switch (d) {
    case DType::f32: return kFloat32;
    case DType::f64: return kFloat64;
    case DType::f16: return kFloat16;
    case DType::bf16: return kBfloat16;
    case DType::i32: return kInt32;
    case DType::i64: return kInt64;
    case DType::b8: return kUint8;
  }
  fail("nccl: unknown dtype");
}

int nccl_op(DType d, RedOp op) {
  if (d != DType::b8) return int(op);
  if (op == RedOp::avg) fail("T.distributed: op \"avg\" is not defined for bool tensors");
  return int(op == RedOp::sum ? RedOp::max : op == RedOp::prod ? RedOp::min : op);
}

}  // namespace

bool nccl_available(std::string* why) {
  Nccl& N = nccl();
  if (why) *why = N.why;
  return N.ok;
}

int nccl_version() {
  int v = 0;
  loaded().get_version(&v);
  return v;
}

NcclId nccl_unique_id() {
  NcclId id{};
  if (Result rc = loaded().get_unique_id(&id); rc != 0) nccl_fail(rc, "ncclGetUniqueId", nullptr);
  return id;
}

NcclComm* nccl_comm_init(const NcclId& id, int rank, int world, int index, double timeout_s) {
  Nccl& N = loaded();
  use_device(index);
  auto c = std::make_unique<NcclComm>();
  c->index = index;
  c->timeout_s = timeout_s;
  Config config;
  config.size = offsetof(Config, split_share) + sizeof(int);
  call(*c, "ncclCommInitRankConfig", timeout_s, [&] { return N.init_rank_config(&c->comm, world, id, rank, &config); });
  return c.release();
}

void nccl_comm_destroy(NcclComm* c, double timeout_s) {
  std::unique_ptr<NcclComm> owned(c);
  if (!c->comm) return;
  Nccl& N = loaded();
  use_device(c->index);
  call(*c, "ncclCommFinalize", timeout_s, [&] { return N.finalize(c->comm); });
  if (c->comm) N.destroy(c->comm);
}

void nccl_comm_abort(NcclComm* c) {
  std::unique_ptr<NcclComm> owned(c);
  if (c->comm) loaded().abort(c->comm);
}

void nccl_wait(NcclComm* c, CUstream stream, const char* what, int rank, double timeout_s) {
  Nccl& N = loaded();
  if (!c->comm) fail(cat(what, ": the communicator was aborted after an earlier error"));
  use_device(c->index);
  CUevent e = nullptr;
  CR_CU(cuEventCreate(&e, kEventDisableTiming), what);
  CR_CU(cuEventRecord(e, stream), what);
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  std::string why;
  for (int polls = 0; why.empty(); ++polls) {
    const CUresult rc = driver()->cuEventQuery(e);
    if (rc == 0) break;
    if (rc != kNotReady) {
      driver()->cuEventDestroy(e);
      check(rc, "cuEventQuery", what);
    }
    Result async = 0;
    if (N.async_error(c->comm, &async) == 0 && async != 0 && async != kInProgress)
      why = cat("NCCL reported ", async < 8 ? kResultNames[async] : "an error", " (", N.error_string(async), ")");
    else if (Clock::now() > deadline)
      why = cat("timed out after ", timeout_s, kTimeoutHint);
    else
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 100 ? 20 : 1000));
  }
  driver()->cuEventDestroy(e);
  if (why.empty()) return;
  N.abort(c->comm);  // (frees the kernels stuck waiting for the missing ranks)
  c->comm = nullptr;
  fail(cat(what, ": rank ", rank, " ", why, "; the communicator is aborted"));
}

void nccl_collective(NcclComm* c, Coll coll, const void* send, void* recv, size_t count, DType d, RedOp op, int root,
                     CUstream stream) {
  Nccl& N = loaded();
  if (!c->comm) fail("T.distributed: the communicator was aborted after an earlier error");
  use_device(c->index);
  const int t = nccl_type(d);
  const int rop = coll == Coll::all_reduce || coll == Coll::reduce_scatter ? nccl_op(d, op) : 0;  // (may raise)
  const double limit = c->timeout_s;
  switch (coll) {
    case Coll::all_reduce:
      return call(*c, "ncclAllReduce", limit, [&] { return N.all_reduce(send, recv, count, t, rop, c->comm, stream); });
    case Coll::broadcast:
      return call(*c, "ncclBroadcast", limit, [&] { return N.broadcast(send, recv, count, t, root, c->comm, stream); });
    case Coll::all_gather:
      return call(*c, "ncclAllGather", limit, [&] { return N.all_gather(send, recv, count, t, c->comm, stream); });
    case Coll::reduce_scatter:
      return call(*c, "ncclReduceScatter", limit,
                  [&] { return N.reduce_scatter(send, recv, count, t, rop, c->comm, stream); });
  }
}

}  // namespace cr::cuda
