// The ceiling for row_sum on this machine: row sums of a 2048 x 2048 float matrix (16 MB, the
// anchor's CPU size) by hand-written AVX2 / AVX-512 loops with 4 or 8 accumulators, on 1 and 2
// threads (a spinning worker, so no thread start is timed), medians of 400 runs in microseconds.
// Compare with bench/run_codegen.sh's row_sum (crescent compiled, torch eager): when both sit
// at this probe's time, the workload is bound by the cache's bandwidth, not by either code.
//   g++ -std=c++20 -O2 -march=x86-64-v4 -pthread bench/bench_rowsum.cpp -o /tmp/bench_rowsum && /tmp/bench_rowsum
// (-march=x86-64-v3 and -DNO_AVX512 on a machine without AVX-512.)
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

constexpr int kRows = 2048, kCols = 2048;
float* g_x;
float* g_out;
using RowsFn = void (*)(int, int);

float lanes_sum(const float* t, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += t[i];
  return s;
}

template <int Acc> void rows_avx2(int r0, int r1) {
  for (int r = r0; r < r1; ++r) {
    const float* p = g_x + size_t(r) * kCols;
    __m256 a[Acc];
    for (auto& v : a) v = _mm256_setzero_ps();
    for (int j = 0; j < kCols; j += 8 * Acc)
      for (int k = 0; k < Acc; ++k) a[k] = _mm256_add_ps(a[k], _mm256_loadu_ps(p + j + 8 * k));
    for (int k = 1; k < Acc; ++k) a[0] = _mm256_add_ps(a[0], a[k]);
    float t[8];
    _mm256_storeu_ps(t, a[0]);
    g_out[r] = lanes_sum(t, 8);
  }
}

#ifndef NO_AVX512
template <int Acc> void rows_avx512(int r0, int r1) {
  for (int r = r0; r < r1; ++r) {
    const float* p = g_x + size_t(r) * kCols;
    __m512 a[Acc];
    for (auto& v : a) v = _mm512_setzero_ps();
    for (int j = 0; j < kCols; j += 16 * Acc)
      for (int k = 0; k < Acc; ++k) a[k] = _mm512_add_ps(a[k], _mm512_loadu_ps(p + j + 16 * k));
    for (int k = 1; k < Acc; ++k) a[0] = _mm512_add_ps(a[0], a[k]);
    float t[16];  // (not _mm512_reduce_add_ps: GCC 12's header warns in it)
    _mm512_storeu_ps(t, a[0]);
    g_out[r] = lanes_sum(t, 16);
  }
}
#endif

// The second thread spins on `go` and sums the second half of the rows.
std::atomic<int> g_go{0}, g_done{0};
std::atomic<bool> g_quit{false};
RowsFn g_fn = nullptr;
void worker() {
  int seen = 0;
  for (;;) {
    while (g_go.load(std::memory_order_acquire) == seen)
      if (g_quit.load()) return;
    seen = g_go.load();
    g_fn(kRows / 2, kRows);
    g_done.fetch_add(1, std::memory_order_release);
  }
}

double median_us(RowsFn f, int threads) {
  g_fn = f;
  std::vector<double> ts;
  for (int it = 0; it < 400; ++it) {
    auto t0 = std::chrono::steady_clock::now();
    if (threads == 1) {
      f(0, kRows);
    } else {
      g_done = 0;
      g_go.fetch_add(1, std::memory_order_release);
      f(0, kRows / 2);
      while (g_done.load(std::memory_order_acquire) == 0) {
      }
    }
    ts.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

}  // namespace

int main() {
  g_x = static_cast<float*>(std::aligned_alloc(64, size_t(kRows) * kCols * sizeof(float)));
  g_out = static_cast<float*>(std::aligned_alloc(64, kRows * sizeof(float)));
  for (size_t i = 0; i < size_t(kRows) * kCols; ++i) g_x[i] = float(i % 7);
  std::thread w(worker);
  struct Case {
    const char* name;
    RowsFn f;
  } cases[] = {{"avx2 x4", rows_avx2<4>}, {"avx2 x8", rows_avx2<8>},
#ifndef NO_AVX512
               {"avx512 x4", rows_avx512<4>}, {"avx512 x8", rows_avx512<8>},
#endif
  };
  const double bytes = double(kRows) * kCols * sizeof(float);
  for (const Case& c : cases) {
    double t1 = median_us(c.f, 1), t2 = median_us(c.f, 2);
    std::printf("%-10s 1 thread %7.1f us (%5.1f GB/s)   2 threads %7.1f us (%5.1f GB/s)\n", c.name, t1, bytes / t1 / 1e3, t2,
                bytes / t2 / 1e3);
  }
  g_quit = true;
  w.join();
}
