#include "vm/threads.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "vm/config.hpp"
#include "vm/denormal.hpp"
#include "vm/env.hpp"
#include "vm/error.hpp"
#include "vm/fork.hpp"

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
      apply_flush_denormal();
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

constexpr int kMaxThreads = 256;

int configured_threads() {
  const char* s = env_setting(Setting::NumThreads);
  if (!s || !*s) return int(std::clamp(std::thread::hardware_concurrency(), 1u, unsigned(kMaxThreads)));
  char* end = nullptr;
  const long n = std::strtol(s, &end, 10);
  if (*end || n < 1 || n > kMaxThreads)
    throw Error(cat("CRESCENT_NUM_THREADS: expected a whole number of threads from 1 to ", kMaxThreads, ", got \"", s, "\""));
  return int(n);
}

// The pool, replaced whole by set_num_threads: a job in progress keeps the one it started on.
std::mutex pool_mutex;
std::shared_ptr<Pool> the_pool;
std::atomic<int> pool_size{0};

// In a fork()ed child the pool's workers are the parent's: it is kept (never joined) and a new
// one starts with the next parallel op.
void forget_pool() {
  static auto* kept = new std::vector<std::shared_ptr<Pool>>;  // (reachable: no leak reported)
  kept->push_back(std::move(the_pool));
  pool_size = 0;
}

std::shared_ptr<Pool> pool() {
  static const bool guarded = [] {
    fork_guard(pool_mutex);
    on_fork_child(forget_pool);
    return true;
  }();
  (void)guarded;
  std::lock_guard<std::mutex> g(pool_mutex);
  if (!the_pool) {
    the_pool = std::make_shared<Pool>(configured_threads());
    pool_size = the_pool->size();
  }
  return the_pool;
}

}  // namespace

int num_threads() {
  const int n = pool_size.load(std::memory_order_relaxed);
  return n ? n : pool()->size();
}

void set_num_threads(int n) {
  if (n < 1 || n > kMaxThreads) throw Error(cat("set_num_threads: expected a whole number of threads from 1 to ", kMaxThreads, ", got ", n));
  std::shared_ptr<Pool> old;
  std::lock_guard<std::mutex> g(pool_mutex);
  if (the_pool && the_pool->size() == n) return;
  old = std::move(the_pool);  // (its workers end when the last job holding it has finished)
  the_pool = std::make_shared<Pool>(n);
  pool_size = n;
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  apply_flush_denormal();
  // (tests: the chunked paths at the small sizes of the specs and fuzzers)
  static const bool split_all = env_number(kEnvSplitAll) != 0;
  if (split_all) grain = 1;
  int parts = int(std::min<int64_t>(num_threads(), (n + grain - 1) / std::max<int64_t>(grain, 1)));
  if (parts <= 1 || t_in_worker) return fn(0, n);
  const std::shared_ptr<Pool> pool_ref = pool();
  Pool& p = *pool_ref;
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
