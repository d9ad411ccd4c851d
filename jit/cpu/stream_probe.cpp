#include "jit/cpu/stream_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "jit/cache_entry.hpp"
#include "vm/cpu_march.hpp"
#include "vm/error.hpp"
#include "vm/kernels/stream.hpp"
#include "vm/threads.hpp"

namespace cr::jit::cpu {

namespace {

constexpr int64_t kLane = 512;  // floats a block: the generated kernels' default block
// A kernel that is not bound by memory pays the copy through the stack block and gains little:
// streaming must win the bare pass clearly.
constexpr double kStreamWins = 0.9;

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Floats = std::unique_ptr<float[], FreeDeleter>;

Floats floats(int64_t n) {
  auto* p = static_cast<float*>(std::aligned_alloc(64, size_t(n) * sizeof(float)));
  if (!p) throw Error(cat("the streaming-store probe could not allocate ", n * int64_t(sizeof(float)), " bytes"));
  return Floats(p);
}

// fn(b0, b1) over [0, blocks) in contiguous chunks on `threads` threads of its own: the pool may
// be busy with the program's kernels (then it would run the probe serially).
template <class Fn>
void on_threads(int threads, int64_t blocks, const Fn& fn) {
  std::vector<std::thread> team;
  for (int t = 1; t < threads; ++t) team.emplace_back([&, t] { fn(blocks * t / threads, blocks * (t + 1) / threads); });
  fn(0, blocks / threads);
  for (std::thread& th : team) th.join();
}

double pass_ms(const float* x, float* y, int64_t blocks, int threads, bool streamed) {
  const auto t0 = std::chrono::steady_clock::now();
  on_threads(threads, blocks, [&](int64_t b0, int64_t b1) {
    alignas(64) float stage[kLane];
    for (int64_t b = b0; b < b1; ++b) {
      const float* in = x + b * kLane;
      float* out = streamed ? stage : y + b * kLane;
      for (int64_t i = 0; i < kLane; ++i) out[i] = 2.0f * in[i] + 1.0f;
      if (streamed) stream_block(y + b * kLane, stage, kLane * int64_t(sizeof(float)));
    }
    if (streamed) stream_fence();
  });
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The CPU's name (/proc/cpuinfo), its largest cache and the pool's threads: a changed machine
// measures again.
std::string machine_key() {
  std::string model = "unknown";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(std::min(line.size(), line.find(':') + 2));
      break;
    }
  return cat("crescent streaming-store probe 1; cpu ", model, "; cache ", cpu_cache_bytes(), "; threads ", num_threads());
}

}  // namespace

StreamProbe probe_streaming(int64_t bytes, int rounds) {
  const int64_t blocks = std::max<int64_t>(1, bytes / (kLane * int64_t(sizeof(float))));
  const int64_t n = blocks * kLane;
  Floats x = floats(n), y = floats(n);
  const int threads = num_threads();
  on_threads(threads, blocks, [&](int64_t b0, int64_t b1) {  // (pages fault in on the threads using them)
    for (int64_t i = b0 * kLane; i < b1 * kLane; ++i) x[size_t(i)] = float(i & 1023), y[size_t(i)] = 0;
  });
  std::vector<double> plain, streamed, ratio;
  for (int r = 0; r < rounds; ++r) {
    plain.push_back(pass_ms(x.get(), y.get(), blocks, threads, false));
    streamed.push_back(pass_ms(x.get(), y.get(), blocks, threads, true));
    ratio.push_back(streamed.back() / plain.back());
  }
  StreamProbe p;
  p.bytes = n * int64_t(sizeof(float));
  p.plain_ms = median(plain);
  p.streamed_ms = median(streamed);
  p.ratio = median(ratio);
  return p;
}

int64_t measured_stream_bytes(const std::string& cache_dir) {
#if !defined(__SSE2__)
  (void)cache_dir;
  return kNeverStream;  // stream_block is a plain copy here
#else
  const bool disk = !cache_dir.empty() && cache_dir != "0";
  const std::string path = cache_dir + "/cpu-streaming";
  const std::string key = machine_key();
  if (disk) {
    const std::string kept = read_file(path);
    const size_t eol = kept.find('\n');
    if (eol != std::string::npos && kept.compare(0, eol, key) == 0) {
      const char* v = kept.c_str() + eol + 1;
      char* end = nullptr;
      const long long bytes = std::strtoll(v, &end, 10);
      if (end != v && bytes > 0) return int64_t(bytes);
    }
  }
  // buffers as large as the last-level cache: the sizes from which kernels would stream
  const int64_t large = cpu_large_block_bytes();
  const StreamProbe p = probe_streaming(std::clamp<int64_t>(2 * large, int64_t(8) << 20, int64_t(128) << 20), 9);
  const int64_t from = p.ratio < kStreamWins ? large : kNeverStream;
  if (disk) {
    std::error_code ec;
    std::filesystem::create_directories(cache_dir, ec);
    publish_file(path, cat(key, "\n", from, "\nbuffers of ", p.bytes, " bytes, medians: plain stores ", p.plain_ms,
                           " ms, streamed ", p.streamed_ms, " ms, streamed / plain ", p.ratio, "\n"));
  }
  return from;
#endif
}

}  // namespace cr::jit::cpu
