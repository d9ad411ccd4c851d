#include "vm/threads.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace cr {

namespace {

thread_local bool t_in_worker = false;

// Waits up to ~100 us for pred() by spinning before the caller blocks: a sleeping thread takes
// tens of microseconds to wake, as long as a whole small parallel op (OpenMP spins likewise).
template <class Pred> bool spin_until(Pred pred) {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
  for (int i = 1;; ++i) {
    if (pred()) return true;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return false;
  }
}

class Pool {
 public:
  explicit Pool(int n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
    size_ = n;
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return size_; }
  std::mutex& job_lock() { return job_; }

  // Runs fn(part) on the caller (part 0) and on every worker that joins before the caller has
  // finished its own call; fn must share the work out itself (parallel_for's chunks are claimed
  // from a counter). The caller never waits for a worker that has not started: on a busy machine
  // a worker may sleep for a whole scheduler time slice, and the caller then does all the work
  // instead of stalling (a fixed split was 10x slower on 2 loaded cores: bench/RESULTS.md H35).
  void run(const std::function<void(int)>& fn) {
    {
      std::lock_guard<std::mutex> g(m_);
      fn_ = &fn;
      closed_ = false;
      running_ = 0;
      ++generation_;
      published_.store(generation_, std::memory_order_release);
      error_ = nullptr;
    }
    cv_.notify_all();
    t_in_worker = true;
    try { fn(0); } catch (...) { record(std::current_exception()); }
    t_in_worker = false;
    spin_until([this] { return running_now_.load(std::memory_order_acquire) == 0; });
    std::unique_lock<std::mutex> g(m_);
    closed_ = true;  // workers that wake from now on skip this job
    done_.wait(g, [this] { return running_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void record(std::exception_ptr e) {
    std::lock_guard<std::mutex> g(m_);
    if (!error_) error_ = e;
  }
  void loop(int part) {
    t_in_worker = true;
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* fn;
      spin_until([&] { return published_.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock<std::mutex> g(m_);
        cv_.wait(g, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (closed_) continue;  // the caller finished this job without us
        ++running_;
        running_now_.store(running_, std::memory_order_release);
        fn = fn_;
      }
      try { (*fn)(part); } catch (...) { record(std::current_exception()); }
      std::lock_guard<std::mutex> g(m_);
      running_now_.store(--running_, std::memory_order_release);
      if (running_ == 0) done_.notify_one();
    }
  }
  std::vector<std::thread> workers_;
  int size_ = 1;
  std::mutex m_, job_;
  std::condition_variable cv_, done_;
  const std::function<void(int)>* fn_ = nullptr;
  int running_ = 0;      // workers inside fn_
  bool closed_ = false;  // the caller has finished its part: no worker joins any more
  uint64_t generation_ = 0;
  // generation_ and running_ mirrored for the spinning waits, which read them without m_
  std::atomic<uint64_t> published_{0};
  std::atomic<int> running_now_{0};
  bool stop_ = false;
  std::exception_ptr error_;
};

int configured_threads() {
  if (const char* s = std::getenv("CRESCENT_NUM_THREADS")) {
    int n = std::atoi(s);
    if (n > 0) return std::min(n, 256);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

Pool& pool() {
  static Pool p(configured_threads());
  return p;
}

}  // namespace

int num_threads() { return pool().size(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  Pool& p = pool();
  int parts = int(std::min<int64_t>(p.size(), (n + grain - 1) / std::max<int64_t>(grain, 1)));
  if (parts <= 1 || t_in_worker) return fn(0, n);
  std::unique_lock<std::mutex> busy(p.job_lock(), std::try_to_lock);
  if (!busy.owns_lock()) return fn(0, n);
  // one chunk per thread, claimed by whoever is running: the caller takes them all when the
  // workers are slow to wake
  const int64_t chunk = (n + p.size() - 1) / p.size(), chunks = (n + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  p.run([&](int) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) fn(i * chunk, std::min(n, (i + 1) * chunk));
  });
}

}  // namespace cr
