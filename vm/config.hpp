// Every environment setting of crescent, declared once: its variable, its default and what it
// does (LuaJIT's JIT_PARAMDEF). Code reads a setting through env_setting, never getenv, and
// `crescent --help` lists this table. Settings are read where used: a compile reads its own at
// its start, so a program (or a test) may change CRESCENT_JIT_* / NVRTC options between compiles.
#pragma once
#include <cstdint>
#include <string>

#include "vm/log.hpp"

namespace cr {

// X(id, variable, default, what it does)
#define CR_SETTINGS(X)                                                                                              \
  X(NumThreads, "CRESCENT_NUM_THREADS", "the cores", "threads of the CPU kernels, 1 to 256")                        \
  X(Logs, "CRESCENT_LOGS", "progress",                                                                               \
    "logs on stderr, comma-separated: graph guards recompiles graph_breaks fusion output_code perf host_ops aot "  \
    "partition cudagraphs autotune progress (on by default); -name turns one off (an unknown name is an error)")          \
  X(Traceback, "CRESCENT_TRACEBACK", "short", "full: tracebacks keep crescent's own frames")                     \
  X(CacheDir, "CRESCENT_CACHE_DIR", "~/.cache/crescent", "the kernel cache's directory; 0: no cache on disk")       \
  X(CacheMaxMb, "CRESCENT_CACHE_MAX_MB", "1024", "the kernel cache's bound in MB (least recently used go first)")  \
  X(DebugDir, "CRESCENT_DEBUG_DIR", "none", "per compiled graph: its loops, fusion, code and timings")               \
  X(History, "CRESCENT_HISTORY", "~/.crescent_history", "the REPL's history file; empty: none")                    \
  X(CpuMarch, "CRESCENT_CPU_MARCH", "the host's level", "-march of generated CPU code (\"native\": detect)")        \
  X(CpuStreamBytes, "CRESCENT_CPU_STREAM_BYTES", "measured", "generated stores this large stream (1e15: none)")   \
  X(JitFork, "CRESCENT_JIT_FORK", "1", "0: compile CPU code in process, not in compiler processes")                 \
  X(JitTimeout, "CRESCENT_JIT_TIMEOUT", "60", "seconds a CPU compile may take before it is killed")                \
  X(ProgressAfter, "CRESCENT_PROGRESS_AFTER", "1", "seconds a compile runs before its progress note (0: every compile)") \
  X(JitFail, "CRESCENT_JIT_FAIL", "0", "tests: fail (any value), crash or hang every compile")                     \
  X(SplitAll, "CRESCENT_SPLIT_ALL", "0", "tests: 1 splits every parallel CPU loop of 2 or more items")              \
  X(NvrtcOptions, "CRESCENT_NVRTC_OPTIONS", "none", "more NVRTC options, split at spaces (e.g. -lineinfo)")          \
  X(CudaWaves, "CRESCENT_CUDA_WAVES", "8", "waves of resident blocks of a pointwise CUDA grid")               \
  X(CudaPdl, "CRESCENT_CUDA_PDL", "1", "0: no kernel starts before the previous one ends (sm_90 overlap)")    \
  X(CudaMaxSplitMb, "CRESCENT_CUDA_MAX_SPLIT_MB", "none", "CUDA allocator: blocks this large (MiB, >= 20) stay whole") \
  X(NcclLib, "CRESCENT_NCCL_LIB", "none", "libnccl.so.2 to try first (the file, or its folder)")                 \
  X(Cudnn, "CRESCENT_CUDNN", "1", "0: convolutions on CUDA without cuDNN (T.backends.cudnn.enabled = false)")  \
  X(CudnnApi, "CRESCENT_CUDNN_API", "graph", "graph or legacy: cuDNN's API for convolutions (graph: the backend API)") \
  X(CudnnLib, "CRESCENT_CUDNN_LIB", "none", "libcudnn.so.9 to try first (the file, or its folder)")            \
  X(CudnnSdp, "CRESCENT_CUDNN_SDP", "1", "0: 16-bit attention on CUDA without cuDNN (enable_cudnn_sdp(false))") \
  X(DistTimeout, "CRESCENT_DIST_TIMEOUT", "300", "seconds T.distributed waits for the other ranks")              \
  X(DistFile, "CRESCENT_DIST_FILE", "--nproc's", "the file through which rank 0 shares NCCL's id")

enum class Setting : uint8_t {
#define CR_SETTING_ID(id, ...) id,
  CR_SETTINGS(CR_SETTING_ID)
#undef CR_SETTING_ID
};

// The variable's value now; null when it is not set (the site applies the default above).
const char* env_setting(Setting s);
const char* setting_name(Setting s);  // "CRESCENT_NUM_THREADS"
// The setting whose variable is `variable` (the Lua side reads settings by name); false if none.
bool find_setting(const std::string& variable, Setting* s);
// One line per setting: "  CRESCENT_NUM_THREADS  threads of ... (default: the cores)".
std::string settings_help();
// The switches of CRESCENT_LOGS, parsed once.
const Logs& env_logs();

}  // namespace cr
