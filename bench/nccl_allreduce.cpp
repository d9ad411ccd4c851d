// The bare-NCCL baseline of bench/allreduce_bench.lua: a C++ loop of ncclAllReduce measured as
// nccl-tests' all_reduce_perf does it (one process driving every GPU through ncclCommInitAll and
// ncclGroupStart / End, its -g N mode): float32 sum in place, sizes min .. max bytes doubling,
// `warmup` calls, then the wall time of `iters` calls queued back to back up to the end of every
// stream; algbw = bytes / time, busbw = algbw * 2 (n - 1) / n.
// It needs no CUDA or NCCL headers: the driver (libcuda.so.1) and NCCL ($CRESCENT_NCCL_LIB, the
// file or its folder, else libnccl.so.2) are loaded at run time, as crescent loads them.
//   g++ -std=c++20 -O2 bench/nccl_allreduce.cpp -o nccl_allreduce -ldl   (CMake builds it too)
//   ./nccl_allreduce [--ngpus 2] [--iters 20] [--warmup 5] [--min-bytes 8] [--max-bytes 1073741824]
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUstream = void*;
using CUdeviceptr = unsigned long long;
using ncclResult_t = int;
using ncclComm_t = void*;
constexpr int kNcclFloat32 = 7, kNcclSum = 0;

struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemsetD32)(CUdeviceptr, unsigned, size_t);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamSynchronize)(CUstream);
  ncclResult_t (*ncclGetVersion)(int*);
  ncclResult_t (*ncclCommInitAll)(ncclComm_t*, int, const int*);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t);
  ncclResult_t (*ncclGroupStart)();
  ncclResult_t (*ncclGroupEnd)();
  ncclResult_t (*ncclAllReduce)(const void*, void*, size_t, int, int, ncclComm_t, CUstream);
  const char* (*ncclGetErrorString)(ncclResult_t);
} api;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "nccl_allreduce: %s\n", what.c_str());
  std::exit(1);
}

template <class F> void load(void* lib, const char* name, F*& fn) {
  fn = reinterpret_cast<F*>(dlsym(lib, name));
  if (!fn) die(std::string("symbol ") + name + " not found");
}

void* open_library(const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (void* lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  die("cannot load " + names.back());
}

void load_all() {
  void* cu = open_library({"libcuda.so.1"});
  load(cu, "cuInit", api.cuInit);
  load(cu, "cuDeviceGetCount", api.cuDeviceGetCount);
  load(cu, "cuDeviceGet", api.cuDeviceGet);
  load(cu, "cuDevicePrimaryCtxRetain", api.cuDevicePrimaryCtxRetain);
  load(cu, "cuCtxSetCurrent", api.cuCtxSetCurrent);
  load(cu, "cuMemAlloc_v2", api.cuMemAlloc);
  load(cu, "cuMemFree_v2", api.cuMemFree);
  load(cu, "cuMemsetD32_v2", api.cuMemsetD32);
  load(cu, "cuStreamCreate", api.cuStreamCreate);
  load(cu, "cuStreamSynchronize", api.cuStreamSynchronize);
  std::vector<std::string> names;
  if (const char* e = std::getenv("CRESCENT_NCCL_LIB"); e && *e)
    names.push_back(std::strstr(e, ".so") ? std::string(e) : std::string(e) + "/libnccl.so.2");
  names.push_back("libnccl.so.2");
  void* nc = open_library(names);
  load(nc, "ncclGetVersion", api.ncclGetVersion);
  load(nc, "ncclCommInitAll", api.ncclCommInitAll);
  load(nc, "ncclCommDestroy", api.ncclCommDestroy);
  load(nc, "ncclGroupStart", api.ncclGroupStart);
  load(nc, "ncclGroupEnd", api.ncclGroupEnd);
  load(nc, "ncclAllReduce", api.ncclAllReduce);
  load(nc, "ncclGetErrorString", api.ncclGetErrorString);
}

void cu(CUresult r, const char* what) {
  if (r != 0) die(std::string(what) + " failed (CUresult " + std::to_string(r) + ")");
}

void nccl(ncclResult_t r, const char* what) {
  if (r != 0) die(std::string(what) + ": " + api.ncclGetErrorString(r));
}

struct Options {
  long ngpus = 0, iters = 20, warmup = 5, min_bytes = 8, max_bytes = 1L << 30;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    long* slot = k == "--ngpus" ? &o.ngpus : k == "--iters" ? &o.iters : k == "--warmup" ? &o.warmup
               : k == "--min-bytes" ? &o.min_bytes : k == "--max-bytes" ? &o.max_bytes : nullptr;
    char* end = nullptr;
    if (!slot || i + 1 >= argc) die("unknown option " + k);
    *slot = std::strtol(argv[i + 1], &end, 10);
    if (*end || *slot < 0) die("option " + k + " expects a number, got " + argv[i + 1]);
  }
  if (o.min_bytes < 4) o.min_bytes = 4;
  return o;
}

struct Rank {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr buf = 0;
  ncclComm_t comm = nullptr;
};

// every rank's all_reduce of `count` floats, one group (as nccl-tests with -g N)
void all_reduce(std::vector<Rank>& ranks, size_t count) {
  nccl(api.ncclGroupStart(), "ncclGroupStart");
  for (Rank& r : ranks) {
    void* p = reinterpret_cast<void*>(r.buf);
    nccl(api.ncclAllReduce(p, p, count, kNcclFloat32, kNcclSum, r.comm, r.stream), "ncclAllReduce");
  }
  nccl(api.ncclGroupEnd(), "ncclGroupEnd");
}

void sync(std::vector<Rank>& ranks) {
  for (Rank& r : ranks) {
    cu(api.cuCtxSetCurrent(r.ctx), "cuCtxSetCurrent");
    cu(api.cuStreamSynchronize(r.stream), "cuStreamSynchronize");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  load_all();
  cu(api.cuInit(0), "cuInit");
  int count = 0;
  cu(api.cuDeviceGetCount(&count), "cuDeviceGetCount");
  const int n = o.ngpus > 0 ? int(o.ngpus) : count;
  if (n < 1 || n > count) die("--ngpus " + std::to_string(n) + ": this machine has " + std::to_string(count) + " GPUs");
  std::vector<Rank> ranks(n);
  std::vector<int> devs(n);
  for (int i = 0; i < n; ++i) {
    CUdevice d;
    cu(api.cuDeviceGet(&d, i), "cuDeviceGet");
    cu(api.cuDevicePrimaryCtxRetain(&ranks[i].ctx, d), "cuDevicePrimaryCtxRetain");
    cu(api.cuCtxSetCurrent(ranks[i].ctx), "cuCtxSetCurrent");
    cu(api.cuStreamCreate(&ranks[i].stream, 1), "cuStreamCreate");  // (CU_STREAM_NON_BLOCKING)
    cu(api.cuMemAlloc(&ranks[i].buf, size_t(o.max_bytes)), "cuMemAlloc");
    cu(api.cuMemsetD32(ranks[i].buf, 0x3f800000u, size_t(o.max_bytes) / 4), "cuMemsetD32");  // (1.0f)
    devs[i] = i;
  }
  std::vector<ncclComm_t> comms(n);
  nccl(api.ncclCommInitAll(comms.data(), n, devs.data()), "ncclCommInitAll");
  for (int i = 0; i < n; ++i) ranks[i].comm = comms[i];
  int version = 0;
  api.ncclGetVersion(&version);
  std::printf("ncclAllReduce (sum, float32, in place) on %d GPUs, one process, NCCL %d\n", n, version);
  std::printf("%12s %12s %12s %12s\n", "size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)");
  for (long bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const size_t floats = size_t(bytes) / 4;
    for (long i = 0; i < o.warmup; ++i) all_reduce(ranks, floats);
    sync(ranks);
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < o.iters; ++i) all_reduce(ranks, floats);
    sync(ranks);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(o.iters);
    const double alg = double(floats * 4) / s / 1e9;
    std::printf("%12zu %12.1f %12.2f %12.2f\n", floats * 4, s * 1e6, alg, alg * 2 * (n - 1) / n);
  }
  for (Rank& r : ranks) {
    nccl(api.ncclCommDestroy(r.comm), "ncclCommDestroy");
    cu(api.cuCtxSetCurrent(r.ctx), "cuCtxSetCurrent");
    cu(api.cuMemFree(r.buf), "cuMemFree");
  }
  return 0;
}
