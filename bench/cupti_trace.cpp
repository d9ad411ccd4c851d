// A kernel timeline of any CUDA process from CUPTI's activity records: preloaded, it records each
// kernel's start and end (concurrent-kernel records, so programmatic dependent launch's overlap
// shows) with its CUDA-graph node, as CSV lines written while the program runs (its exit path
// may skip destructors). bench/kernel_timeline.py reads them. Built where CUDA's headers are:
//   g++ -O2 -shared -fPIC -I/usr/local/cuda/include bench/cupti_trace.cpp -o build/cupti_trace.so
//       -L/usr/local/cuda/lib64 -lcupti -lpthread   (one command)
//   timeout 200 env CUPTI_TRACE_OUT=t.csv LD_PRELOAD=build/cupti_trace.so crescent bench/gpt2_bench.lua ...
// (the preload goes to the traced program itself: a wrapper such as timeout would take it)
#include <cupti.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace {

std::mutex g_mutex;
FILE* g_out = nullptr;
constexpr size_t kBuffer = 1 << 20;

void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBuffer));
  *size = kBuffer;
  *max_records = 0;
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS)
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
      fprintf(g_out, "%llu,%llu,%u,%llu,%u,%s\n", (unsigned long long)k->start, (unsigned long long)k->end, k->graphId,
              (unsigned long long)k->graphNodeId, k->streamId, k->name ? k->name : "?");
    }
  fflush(g_out);
  free(buffer);
}

struct Tracer {
  std::atomic<bool> stop{false};
  std::thread flusher;
  Tracer() {
    const char* path = getenv("CUPTI_TRACE_OUT");
    if (!path) return;
    g_out = fopen(path, "w");
    // (the process's own children, such as crescent's compiler process, neither traced nor writing)
    unsetenv("CUPTI_TRACE_OUT");
    unsetenv("LD_PRELOAD");
    if (!g_out) return;
    fprintf(g_out, "start,end,graph,node,stream,name\n");
    const CUptiResult a = cuptiActivityRegisterCallbacks(requested, completed);
    const CUptiResult b = a == CUPTI_SUCCESS ? cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) : a;
    if (b != CUPTI_SUCCESS) {
      fprintf(stderr, "cupti_trace: CUPTI could not be enabled (error %d)\n", int(b));
      return;
    }
    flusher = std::thread([this] {
      while (!stop.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      }
    });
  }
  ~Tracer() {
    if (!flusher.joinable()) return;
    stop = true;
    flusher.join();
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
} g_tracer;

}  // namespace
