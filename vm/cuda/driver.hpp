// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"): one binary runs on machines
// with and without a GPU, and the CPU path never needs the driver. Only the `_v2` entry points
// of the functions that have them are used (the unversioned names are the CUDA 3.x ABI).
//
// Every call goes through check(), which turns a failure into cr::Error naming the driver
// function, CUDA's error name and text, and what we were doing.
#pragma once
#include <cstddef>
#include <atomic>
#include <cstdint>
#include <string>

namespace cr::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
struct CUgraph_st;
struct CUgraphExec_st;
struct CUgraphNode_st;
using CUgraph = CUgraph_st*;
using CUgraphExec = CUgraphExec_st*;
using CUgraphNode = CUgraphNode_st*;

// cuda.h's CUDA_MEMCPY2D (memory types: 2 is device memory).
struct CudaMemcpy2D {
  size_t src_x_bytes, src_y;
  int src_type;
  const void* src_host;
  CUdeviceptr src_device;
  void* src_array;
  size_t src_pitch;
  size_t dst_x_bytes, dst_y;
  int dst_type;
  void* dst_host;
  CUdeviceptr dst_device;
  void* dst_array;
  size_t dst_pitch;
  size_t width_bytes, height;
};

// cuda.h's CUlaunchAttribute (its value a union of 64 bytes) and CUlaunchConfig, for cuLaunchKernelEx.
struct LaunchAttribute {
  int id;
  int pad;
  union {
    int value;
    char bytes[64];
  };
};
struct LaunchConfig {
  unsigned grid[3], block[3], shared_bytes;
  CUstream stream;
  LaunchAttribute* attrs;
  unsigned count;
};
static_assert(sizeof(LaunchAttribute) == 72 && sizeof(LaunchConfig) == 56, "cuda.h's launch structs");

// The driver's functions we call, resolved once.
struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned);  // (pinned host words the device writes)
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemGetInfo)(size_t*, size_t*);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpy2DAsync)(const struct CudaMemcpy2D*, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuMemsetD16Async)(CUdeviceptr, unsigned short, size_t, CUstream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuMemsetD2D32Async)(CUdeviceptr, size_t, unsigned, size_t, size_t, CUstream);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  // CUDA graphs (vm/cuda/graphs.hpp): optional, null on a driver without them
  CUresult (*cuStreamBeginCapture)(CUstream, int);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
  CUresult (*cuStreamIsCapturing)(CUstream, int*);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuGraphGetNodes)(CUgraph, CUgraphNode*, size_t*);
  CUresult (*cuLaunchKernelEx)(const LaunchConfig*, CUfunction, void**, void**);  // (optional: vm/cuda/launch.hpp)
};

// The loaded driver, or null when there is none (no libcuda, no device, cuInit failed); `why`
// (optional) says which. Thread-safe; tried once per process.
const Driver* driver(std::string* why = nullptr);
// Whether a CUDA device can be used here.
bool available();
int device_count();  // 0 without a driver

// Throws cr::Error "CUDA error in <fn> (<what>): <NAME>: <text>" unless rc == 0.
void check(CUresult rc, const char* fn, const std::string& what = "");
#define CR_CU(call, what) ::cr::cuda::check(::cr::cuda::driver()->call, #call, what)

// Why cuda:index cannot be used here ("CUDA is not available: ...", or "this machine has 2 CUDA
// devices (cuda:0 to cuda:1)"); "" when it can.
std::string device_problem(int64_t index);
// Makes device `index`'s primary context current on the calling thread (checks the index).
void use_device(int index);

// Device properties for launch configuration and printing.
struct DeviceInfo {
  std::string name;
  int sm_major = 0, sm_minor = 0, multiprocessors = 0, max_threads_per_block = 0;
  int max_shared_per_block = 0;  // dynamic shared memory a block may opt in to (bytes)
  size_t total_memory = 0;
};
const DeviceInfo& device_info(int index);

// The work the host queued on the devices (T.cuda.stats): kernels launched (generated and
// library ones), cuBLAS / cuBLASLt / cuDNN graph-API calls, CUDA-graph launches and the nodes
// those ran. Work a capture records counts once, when it is recorded.
struct LaunchCounts {
  std::atomic<int64_t> kernels{0}, blas{0}, graphs{0}, graph_nodes{0};
};
LaunchCounts& launch_counts();

// T.bench's device timer on `index`'s current stream (vm/cuda/streams.hpp): phase 0 records the start event; phase 1
// records the end event, waits for it and returns the milliseconds between the two.
double time_events(int index, int phase);

}  // namespace cr::cuda
