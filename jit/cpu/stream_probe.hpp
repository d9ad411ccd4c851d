// Whether streaming stores pay on this machine. A generated kernel writes a large output with
// non-temporal stores (jit/cpu/stream_rule.cpp) to spare the read of every line it overwrites;
// some hosts gain by it, others lose (bench/RESULTS.md, "CPU code generation"). So a measurement
// decides, once per machine: its result is kept in the cache directory.
#pragma once
#include <cstdint>
#include <string>

namespace cr::jit::cpu {

// A size no store reaches (CRESCENT_CPU_STREAM_BYTES' largest value): nothing streams.
inline constexpr int64_t kNeverStream = 1'000'000'000'000'000;

struct StreamProbe {
  int64_t bytes = 0;                     // each buffer's
  double plain_ms = 0, streamed_ms = 0;  // the median pass of each
  double ratio = 0;                      // the median of streamed / plain over the rounds
};

// y = 2x + 1 over float buffers of `bytes` on num_threads() threads, once with plain stores and
// once as generated kernels stream (blocks through stream_block), in `rounds` alternating pairs;
// each pass writes another output than the one before, as a program's calls write fresh blocks.
StreamProbe probe_streaming(int64_t bytes, int rounds);

// stream_store_bytes' default: the smallest of 8 MiB, 32 MiB and half the last-level cache (at
// most 64 MiB) from which the streamed pass is clearly faster (a ratio under 0.9) at every larger
// one, else kNeverStream. Read from `<cache dir>/cpu-streaming` when it was measured on this CPU
// with these threads, else measured now and written there (where the directory takes it).
int64_t measured_stream_bytes(const std::string& cache_dir);

}  // namespace cr::jit::cpu
