// What row_sum can reach on this machine: row sums of a 2048 x 2048 float matrix (16 MB, the
// anchor's CPU size) by a hand-written AVX2 loop over 1, 2 or 4 rows at a time, on 1 and 2
// threads (a spinning worker, so no thread start is timed), medians of 400 runs in microseconds.
// Compare with bench/run_codegen.sh's row_sum (crescent compiled, torch eager).
//   g++ -std=c++20 -O2 -march=x86-64-v3 -pthread bench/bench_rowsum.cpp -o /tmp/bench_rowsum && /tmp/bench_rowsum
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

// Nr rows at a time, two 8-float accumulators a row, named one by one so that GCC keeps them in
// registers (an accumulator array indexed in a loop goes through the stack at -O2: a third of the
// speed).
template <int Nr> void rows_avx2(int r0, int r1) {
  for (int r = r0; r < r1; r += Nr) {
    __m256 lo[Nr], hi[Nr];
#pragma GCC unroll 8
    for (int q = 0; q < Nr; ++q) lo[q] = hi[q] = _mm256_setzero_ps();
    for (int j = 0; j < kCols; j += 16) {
#pragma GCC unroll 8
      for (int q = 0; q < Nr; ++q) {
        const float* p = g_x + size_t(r + q) * kCols + j;
        lo[q] = _mm256_add_ps(lo[q], _mm256_loadu_ps(p));
        hi[q] = _mm256_add_ps(hi[q], _mm256_loadu_ps(p + 8));
      }
    }
    for (int q = 0; q < Nr; ++q) {
      float t[8];
      _mm256_storeu_ps(t, _mm256_add_ps(lo[q], hi[q]));
      g_out[r + q] = lanes_sum(t, 8);
    }
  }
}

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
  } cases[] = {{"1 row", rows_avx2<1>}, {"2 rows", rows_avx2<2>}, {"4 rows", rows_avx2<4>}};
  const double bytes = double(kRows) * kCols * sizeof(float);
  for (const Case& c : cases) {
    double t1 = median_us(c.f, 1), t2 = median_us(c.f, 2);
    std::printf("%-10s 1 thread %7.1f us (%5.1f GB/s)   2 threads %7.1f us (%5.1f GB/s)\n", c.name, t1, bytes / t1 / 1e3, t2,
                bytes / t2 / 1e3);
  }
  g_quit = true;
  w.join();
}
