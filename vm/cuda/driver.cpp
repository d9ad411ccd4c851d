#include "vm/cuda/driver.hpp"

#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <vector>

#include "vm/cuda/dl.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/error.hpp"
#include "vm/fork.hpp"

namespace cr::cuda {

LaunchCounts& launch_counts() {
  static LaunchCounts counts;
  return counts;
}
namespace {

constexpr int kAttrMaxThreadsPerBlock = 1, kAttrMultiprocessors = 16, kAttrCcMajor = 75, kAttrCcMinor = 76,
              kAttrMaxSharedOptin = 97;

bool resolve_all(void* lib, Driver& d, std::string* missing) {
  struct Entry {
    const char* name;
    bool ok;
  };
  const Entry entries[] = {
      {"cuInit", resolve(lib, "cuInit", d.cuInit)},
      {"cuDriverGetVersion", resolve(lib, "cuDriverGetVersion", d.cuDriverGetVersion)},
      {"cuDeviceGetCount", resolve(lib, "cuDeviceGetCount", d.cuDeviceGetCount)},
      {"cuDeviceGet", resolve(lib, "cuDeviceGet", d.cuDeviceGet)},
      {"cuDeviceGetName", resolve(lib, "cuDeviceGetName", d.cuDeviceGetName)},
      {"cuDeviceGetAttribute", resolve(lib, "cuDeviceGetAttribute", d.cuDeviceGetAttribute)},
      {"cuDeviceTotalMem_v2", resolve(lib, "cuDeviceTotalMem_v2", d.cuDeviceTotalMem)},
      {"cuDevicePrimaryCtxRetain", resolve(lib, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain)},
      {"cuCtxSetCurrent", resolve(lib, "cuCtxSetCurrent", d.cuCtxSetCurrent)},
      {"cuCtxSynchronize", resolve(lib, "cuCtxSynchronize", d.cuCtxSynchronize)},
      {"cuMemAlloc_v2", resolve(lib, "cuMemAlloc_v2", d.cuMemAlloc)},
      {"cuMemFree_v2", resolve(lib, "cuMemFree_v2", d.cuMemFree)},
      {"cuMemHostAlloc", resolve(lib, "cuMemHostAlloc", d.cuMemHostAlloc)},
      {"cuMemHostGetDevicePointer_v2", resolve(lib, "cuMemHostGetDevicePointer_v2", d.cuMemHostGetDevicePointer)},
      {"cuMemGetInfo_v2", resolve(lib, "cuMemGetInfo_v2", d.cuMemGetInfo)},
      {"cuMemcpyHtoDAsync_v2", resolve(lib, "cuMemcpyHtoDAsync_v2", d.cuMemcpyHtoDAsync)},
      {"cuMemcpyDtoHAsync_v2", resolve(lib, "cuMemcpyDtoHAsync_v2", d.cuMemcpyDtoHAsync)},
      {"cuMemcpyDtoDAsync_v2", resolve(lib, "cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync)},
      {"cuMemcpy2DAsync_v2", resolve(lib, "cuMemcpy2DAsync_v2", d.cuMemcpy2DAsync)},
      {"cuMemsetD8Async", resolve(lib, "cuMemsetD8Async", d.cuMemsetD8Async)},
      {"cuMemsetD16Async", resolve(lib, "cuMemsetD16Async", d.cuMemsetD16Async)},
      {"cuMemsetD32Async", resolve(lib, "cuMemsetD32Async", d.cuMemsetD32Async)},
      {"cuMemsetD2D32Async", resolve(lib, "cuMemsetD2D32Async", d.cuMemsetD2D32Async)},
      {"cuStreamCreate", resolve(lib, "cuStreamCreate", d.cuStreamCreate)},
      {"cuStreamSynchronize", resolve(lib, "cuStreamSynchronize", d.cuStreamSynchronize)},
      {"cuStreamQuery", resolve(lib, "cuStreamQuery", d.cuStreamQuery)},
      {"cuStreamWaitEvent", resolve(lib, "cuStreamWaitEvent", d.cuStreamWaitEvent)},
      {"cuModuleLoadData", resolve(lib, "cuModuleLoadData", d.cuModuleLoadData)},
      {"cuModuleUnload", resolve(lib, "cuModuleUnload", d.cuModuleUnload)},
      {"cuModuleGetFunction", resolve(lib, "cuModuleGetFunction", d.cuModuleGetFunction)},
      {"cuFuncSetAttribute", resolve(lib, "cuFuncSetAttribute", d.cuFuncSetAttribute)},
      {"cuLaunchKernel", resolve(lib, "cuLaunchKernel", d.cuLaunchKernel)},
      {"cuEventCreate", resolve(lib, "cuEventCreate", d.cuEventCreate)},
      {"cuEventDestroy_v2", resolve(lib, "cuEventDestroy_v2", d.cuEventDestroy)},
      {"cuEventRecord", resolve(lib, "cuEventRecord", d.cuEventRecord)},
      {"cuEventSynchronize", resolve(lib, "cuEventSynchronize", d.cuEventSynchronize)},
      {"cuEventQuery", resolve(lib, "cuEventQuery", d.cuEventQuery)},
      {"cuEventElapsedTime", resolve(lib, "cuEventElapsedTime", d.cuEventElapsedTime)},
      {"cuGetErrorName", resolve(lib, "cuGetErrorName", d.cuGetErrorName)},
      {"cuGetErrorString", resolve(lib, "cuGetErrorString", d.cuGetErrorString)},
  };
  for (const Entry& e : entries)
    if (!e.ok) {
      *missing = e.name;
      return false;
    }
  return true;
}

thread_local int t_current = -1;  // the device whose context is current on this thread
bool forked_after_init = false;    // in a fork()ed child of a process that had loaded the driver

struct Loaded {
  Driver d{};
  bool ok = false;
  std::string why;
  int count = 0;
  std::vector<CUcontext> contexts;  // primary contexts, retained on first use
  std::vector<std::unique_ptr<DeviceInfo>> infos;
};

Loaded& load() {
  static Loaded L;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      L.why = "libcuda.so.1 could not be loaded (no NVIDIA driver on this machine)";
      return;
    }
    std::string missing;
    if (!resolve_all(lib, L.d, &missing)) {
      L.why = "libcuda.so.1 lacks " + missing + " (driver too old)";
      return;
    }
    resolve(lib, "cuStreamBeginCapture_v2", L.d.cuStreamBeginCapture);  // (optional: vm/cuda/graphs.cpp)
    resolve(lib, "cuStreamEndCapture", L.d.cuStreamEndCapture);
    resolve(lib, "cuStreamIsCapturing", L.d.cuStreamIsCapturing);
    resolve(lib, "cuGraphInstantiateWithFlags", L.d.cuGraphInstantiateWithFlags);
    resolve(lib, "cuGraphLaunch", L.d.cuGraphLaunch);
    resolve(lib, "cuGraphExecDestroy", L.d.cuGraphExecDestroy);
    resolve(lib, "cuGraphDestroy", L.d.cuGraphDestroy);
    resolve(lib, "cuGraphGetNodes", L.d.cuGraphGetNodes);
    resolve(lib, "cuLaunchKernelEx", L.d.cuLaunchKernelEx);
    if (int rc = L.d.cuInit(0); rc != 0) {
      L.why = "cuInit failed with CUDA error " + std::to_string(rc) + (rc == 100 ? " (no CUDA device)" : "");
      return;
    }
    if (L.d.cuDeviceGetCount(&L.count) != 0 || L.count == 0) {
      L.why = "no CUDA device";
      L.count = 0;
      return;
    }
    L.contexts.assign(size_t(L.count), nullptr);
    L.infos.resize(size_t(L.count));
    L.ok = true;
    on_fork_child([] {  // (device_problem refuses every device there)
      forked_after_init = true;
      t_current = -1;
    });
  });
  return L;
}

}  // namespace

const Driver* driver(std::string* why) {
  Loaded& L = load();
  if (why) *why = L.why;
  return L.ok ? &L.d : nullptr;
}

bool available() { return driver() != nullptr; }
int device_count() { return available() ? load().count : 0; }

void check(CUresult rc, const char* fn, const std::string& what) {
  if (rc == 0) return;
  const Driver* d = driver();
  const char* name = "CUDA_ERROR";
  const char* text = "unknown error";
  if (d) {
    d->cuGetErrorName(rc, &name);
    d->cuGetErrorString(rc, &text);
  }
  std::string call(fn);
  call = call.substr(0, call.find('('));
  fail(cat("CUDA error in ", call, what.empty() ? "" : " (" + what + ")", ": ", name, ": ", text));
}

std::string device_problem(int64_t index) {
  std::string why;
  if (!driver(&why)) return "CUDA is not available: " + why;
  // (the driver's state is the parent's: its calls fail in the child, or worse)
  if (forked_after_init)
    return "CUDA was initialised before this process was fork()ed, and a forked child cannot use it "
           "(fork the workers before CUDA is first used, or start them as new processes)";
  const int n = load().count;
  if (index >= 0 && index < n) return "";
  return cat("this machine has ", n, " CUDA device", n == 1 ? " (cuda:0)" : cat("s (cuda:0 to cuda:", n - 1, ")"));
}

namespace {
void check_device(int index) {
  if (std::string problem = device_problem(index); !problem.empty())
    fail(available() ? cat("cuda:", index, ": ", problem) : problem);
}
}  // namespace

void use_device(int index) {
  if (t_current == index && index >= 0) return;  // (t_current is -1 until a device is used)
  check_device(index);
  Loaded& L = load();
  static std::mutex m;
  std::lock_guard<std::mutex> g(m);
  if (!L.contexts[size_t(index)]) {
    CUdevice dev = 0;
    CR_CU(cuDeviceGet(&dev, index), "device " + std::to_string(index));
    CR_CU(cuDevicePrimaryCtxRetain(&L.contexts[size_t(index)], dev), "device " + std::to_string(index));
  }
  CR_CU(cuCtxSetCurrent(L.contexts[size_t(index)]), "device " + std::to_string(index));
  t_current = index;
}

// (no context needed: asking about another device leaves the calling thread's current one, which
// the next launch on it takes for granted)
const DeviceInfo& device_info(int index) {
  check_device(index);
  Loaded& L = load();
  static std::mutex m;
  std::lock_guard<std::mutex> g(m);
  auto& slot = L.infos[size_t(index)];
  if (!slot) {
    auto info = std::make_unique<DeviceInfo>();
    CUdevice dev = 0;
    CR_CU(cuDeviceGet(&dev, index), "");
    char name[256] = {};
    CR_CU(cuDeviceGetName(name, int(sizeof name), dev), "");
    info->name = name;
    CR_CU(cuDeviceGetAttribute(&info->sm_major, kAttrCcMajor, dev), "");
    CR_CU(cuDeviceGetAttribute(&info->sm_minor, kAttrCcMinor, dev), "");
    CR_CU(cuDeviceGetAttribute(&info->multiprocessors, kAttrMultiprocessors, dev), "");
    CR_CU(cuDeviceGetAttribute(&info->max_threads_per_block, kAttrMaxThreadsPerBlock, dev), "");
    CR_CU(cuDeviceGetAttribute(&info->max_shared_per_block, kAttrMaxSharedOptin, dev), "");
    CR_CU(cuDeviceTotalMem(&info->total_memory, dev), "");
    slot = std::move(info);
  }
  return *slot;
}

double time_events(int index, int phase) {
  use_device(index);
  static thread_local std::vector<std::pair<CUevent, CUevent>> events;
  if (events.size() <= size_t(index)) events.resize(size_t(index) + 1, {nullptr, nullptr});
  auto& [start, end] = events[size_t(index)];
  if (!start) {
    CR_CU(cuEventCreate(&start, 0), "timer");
    CR_CU(cuEventCreate(&end, 0), "timer");
  }
  if (phase == 0) {
    CR_CU(cuEventRecord(start, current_stream(index)), "timer start");
    return 0;
  }
  CR_CU(cuEventRecord(end, current_stream(index)), "timer end");
  CR_CU(cuEventSynchronize(end), "timer end");
  float ms = 0;
  CR_CU(cuEventElapsedTime(&ms, start, end), "timer");
  return double(ms);
}

}  // namespace cr::cuda
