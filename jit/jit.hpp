// The compile driver (DESIGN.md "Execution model", step 5): graph -> lowering -> fusion ->
// CPU code -> kernel cache -> an Executable placed in the graph's NativeSlot. In line, or on
// the background compile thread while the graph keeps running eagerly; a failure is recorded in
// the slot (the graph then stays eager) and never produces a wrong value.
#pragma once
#include <memory>
#include <string>

#include "vm/graph/graph.hpp"

namespace cr::jit {

using Options = graph::NativeOptions;

// Starts compiling g for o.device; g->native is set to the slot that receives the outcome.
// Lines for CRESCENT_LOGS (fusion, output_code) are left in the slot's `log`.
void compile_native(const std::shared_ptr<graph::Graph>& g, const Options& o);
// Returns once the background thread has no compile queued or running (at most a minute).
void wait_background_compiles();
// Drops the background compiles queued for `owner` (Options::owner) and waits for its compile in
// progress (at most a minute): a VM's end and os.exit call it, so that no compile of theirs runs
// while the VM or exit destroys what it uses, and none runs for graphs that cannot run again.
void cancel_background_compiles(const void* owner);
// The process is ending: drops every queued compile (any owner's: a VM's eager kernel
// specialisations too) and waits for the one running, before exit destroys the statics and
// libraries (NVRTC's among them) that a compile uses. Nothing compiles in the background after it.
void stop_background_compiles();

// The background queue since the process started (for tests and benchmarks; jit/background.hpp).
struct QueueStats {
  int64_t queued = 0;     // waiting now
  int64_t running = 0;    // compiling now (0 or 1)
  int64_t peak = 0;       // the most that ever waited at once
  int64_t stale = 0;      // dropped or skipped: their graph was gone (its function dropped)
  int64_t evicted = 0;    // dropped from a full queue: their graphs stay eager
  int64_t cancelled = 0;  // dropped by cancel_background_compiles
};
QueueStats background_stats();
// While held, the background thread starts no job (tests fill the queue this way).
void hold_background_compiles(bool hold);

// The CUBIN of a library kernel's source (vm/kernels/cuda/library.hpp) for `arch`: the build's
// (vm/cuda/prebuilt.hpp), else from the kernel cache that graphs' modules use too (memory, then
// `<cache_dir>/<key>.cubin`) or compiled by NVRTC and cached.
std::string cuda_cubin(const std::string& source, const std::string& name, const std::string& arch,
                       const std::string& cache_dir);

// Whether native code can be generated here for the CPU (libgccjit loads) / for CUDA devices
// (the driver and NVRTC load); `why` says why not.
bool cpu_backend_available(std::string* why);
bool cuda_backend_available(std::string* why);

// The kernel cache counters since the process started (for tests and benchmarks).
struct CacheStats {
  int64_t memory_hits = 0, disk_hits = 0, compiled = 0;
  int64_t cuda_compiled = 0;    // of `compiled`, the CUDA modules (NVRTC)
  int64_t prebuilt = 0;         // CUDA modules found among the build's CUBINs (vm/cuda/prebuilt.hpp)
  int64_t rejected = 0;         // disk entries that failed their check (then recompiled)
  int64_t unpublished = 0;      // compiled objects the disk cache could not take (read-only, full)
  int64_t evicted = 0;          // disk entries removed to keep the cache within cache_max_mb
  std::string last_rejection;   // the path of the last one and why
};
CacheStats cache_stats();

}  // namespace cr::jit
