#include "jit/cpu/stream_probe.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
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
constexpr int64_t kMiB = int64_t(1) << 20;

// fn(b0, b1) over [0, blocks) in contiguous chunks on `threads` threads of its own: the pool may
// be busy with the program's kernels (then it would run the probe serially).
template <class Fn>
void on_threads(int threads, int64_t blocks, const Fn& fn) {
  std::vector<std::thread> team;
  for (int t = 1; t < threads; ++t) team.emplace_back([&, t] { fn(blocks * t / threads, blocks * (t + 1) / threads); });
  fn(0, blocks / threads);
  for (std::thread& th : team) th.join();
}

// One pass, timed from the moment every thread has started (starting threads is not the
// stores' cost) to the last one's end.
double pass_ms(const float* x, float* y, int64_t blocks, int threads, bool streamed) {
  using Clock = std::chrono::steady_clock;
  std::atomic<int> started{0};
  std::mutex m;
  Clock::time_point first = Clock::time_point::max(), last = Clock::time_point::min();
  on_threads(threads, blocks, [&](int64_t b0, int64_t b1) {
    started.fetch_add(1);
    while (started.load() < threads) std::this_thread::yield();
    const Clock::time_point t0 = Clock::now();
    alignas(64) float stage[kLane];
    for (int64_t b = b0; b < b1; ++b) {
      const float* in = x + b * kLane;
      float* out = streamed ? stage : y + b * kLane;
      for (int64_t i = 0; i < kLane; ++i) out[i] = 2.0f * in[i] + 1.0f;
      if (streamed) stream_block(y + b * kLane, stage, kLane * int64_t(sizeof(float)));
    }
    if (streamed) stream_fence();
    const Clock::time_point t1 = Clock::now();
    std::lock_guard<std::mutex> lock(m);
    first = std::min(first, t0), last = std::max(last, t1);
  });
  return std::chrono::duration<double, std::milli>(last - first).count();
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
  return cat("crescent streaming-store probe 2; cpu ", model, "; cache ", cpu_cache_bytes(), "; threads ",
             num_threads());
}

// Bytes from mmap, in huge pages where the system gives them (fewer faults), unmapped after:
// the probe's buffers stay out of the allocator's caches.
class Mapped {
 public:
  explicit Mapped(int64_t bytes) : n_(size_t(bytes)) {
    p_ = ::mmap(nullptr, n_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p_ == MAP_FAILED) throw Error(cat("the streaming-store probe could not map ", bytes, " bytes"));
    ::madvise(p_, n_, MADV_HUGEPAGE);
  }
  ~Mapped() { ::munmap(p_, n_); }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  float* floats() const { return static_cast<float*>(p_); }

 private:
  void* p_;
  size_t n_;
};

// An input and kOutputs outputs of `bytes`, their pages faulted in on the threads that use them.
// Each pass writes the next output, as a program's calls write fresh blocks (a plain store then
// reads lines that are not in the cache).
constexpr int kOutputs = 3;
struct Buffers {
  Mapped x;
  std::vector<std::unique_ptr<Mapped>> ys;
  explicit Buffers(int64_t b) : x(b) {
    for (int i = 0; i < kOutputs; ++i) ys.push_back(std::make_unique<Mapped>(b));
    on_threads(num_threads(), b / (kLane * int64_t(sizeof(float))), [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0 * kLane; i < b1 * kLane; ++i) {
        x.floats()[i] = float(i & 1023);
        for (const auto& y : ys) y->floats()[i] = 0;
      }
    });
  }
};

// A probe over the first `bytes` of the buffers.
StreamProbe probe_on(const Buffers& b, int64_t bytes, int rounds) {
  const int64_t blocks = std::max<int64_t>(1, bytes / (kLane * int64_t(sizeof(float))));
  const int threads = num_threads();
  std::vector<double> plain, streamed, ratio;
  for (int r = 0, out = 0; r < rounds; ++r) {
    plain.push_back(pass_ms(b.x.floats(), b.ys[size_t(out++ % kOutputs)]->floats(), blocks, threads, false));
    streamed.push_back(pass_ms(b.x.floats(), b.ys[size_t(out++ % kOutputs)]->floats(), blocks, threads, true));
    ratio.push_back(streamed.back() / plain.back());
  }
  StreamProbe p;
  p.bytes = blocks * kLane * int64_t(sizeof(float));
  p.plain_ms = median(plain);
  p.streamed_ms = median(streamed);
  p.ratio = median(ratio);
  return p;
}

}  // namespace

StreamProbe probe_streaming(int64_t bytes, int rounds) {
  const Buffers b(std::max<int64_t>(bytes, kLane * int64_t(sizeof(float))));
  return probe_on(b, bytes, rounds);
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
  // Outputs past the private caches, up to half the last-level one (at most 64 MiB): streaming
  // starts at the smallest size from which it wins at every larger size probed.
  std::vector<int64_t> sizes = {kMiB * 8, kMiB * 32, std::clamp(cpu_large_block_bytes(), kMiB * 8, kMiB * 64)};
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::vector<StreamProbe> probes;
  try {
    const Buffers b(sizes.back());
    for (const int64_t s : sizes) probes.push_back(probe_on(b, s, s > kMiB * 32 ? 5 : 9));
  } catch (const Error&) {
    return kNeverStream;  // (no memory for the probe: plain stores, measured again next time)
  }
  int64_t from = kNeverStream;
  std::string shown;
  for (size_t i = probes.size(); i-- > 0;) {
    const StreamProbe& p = probes[i];
    if (from == (i + 1 < probes.size() ? probes[i + 1].bytes : kNeverStream) && p.ratio < kStreamWins) from = p.bytes;
    shown = cat(p.bytes >> 20, " MiB: plain stores ", p.plain_ms, " ms, streamed ", p.streamed_ms,
                " ms, streamed / plain ", p.ratio, " (medians)\n", shown);
  }
  if (disk) {
    std::error_code ec;
    std::filesystem::create_directories(cache_dir, ec);
    publish_file(path, cat(key, "\n", from, "\n", shown));
  }
  return from;
#endif
}

}  // namespace cr::jit::cpu
