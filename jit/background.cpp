// The background compile thread (jit/background.hpp): one thread for the process, started by the
// first job, taking jobs in order.
#include "jit/background.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <thread>

#include "jit/jit.hpp"
#include "vm/fork.hpp"

namespace cr::jit {

namespace {

class Worker {
 public:
  // Never destroyed (a static destructor could run while a job runs); instead, exit waits for
  // the job in progress (bounded) and drops the queued ones.
  static Worker& get() {
    static Worker* w = [] {
      auto* p = new Worker;
      std::atexit([] { get().drain(); });
      fork_guard(p->m_, {&p->cv_});
      on_fork_child([] { get().forked(); });
      return p;
    }();
    return *w;
  }
  void submit(Job job) {
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_) return;
    start();
    if (jobs_.size() >= kMaxQueued) make_room();
    // (in order within each class: a job that is not deferrable goes before the deferrable ones)
    auto deferrable = [](const Job& j) { return j.deferrable; };
    auto at = job.deferrable ? jobs_.end() : std::find_if(jobs_.begin(), jobs_.end(), deferrable);
    jobs_.insert(at, std::move(job));
    stats_.peak = std::max(stats_.peak, int64_t(jobs_.size()));
    cv_.notify_all();
  }
  // At exit (an embedding host's exit(); a VM's end and os.exit cancel their jobs first): drops
  // the queued jobs and waits for the one in progress.
  void drain() {
    std::unique_lock<std::mutex> lock(m_);
    stopping_ = true;
    jobs_.clear();
    if (std::this_thread::get_id() == worker_id_) return;  // exit() called by a compile itself
    cv_.wait_for(lock, std::chrono::seconds(30), [this] { return !busy_; });
  }
  void wait_idle() {
    std::unique_lock<std::mutex> lock(m_);
    if (jobs_.empty() && !busy_) return;
    if (std::this_thread::get_id() == worker_id_) return;
    start();
    cv_.wait_for(lock, std::chrono::seconds(60), [this] { return jobs_.empty() && !busy_; });
  }
  void cancel(const void* owner) {
    std::unique_lock<std::mutex> lock(m_);
    const size_t before = jobs_.size();
    jobs_.erase(std::remove_if(jobs_.begin(), jobs_.end(), [owner](const Job& j) { return j.owner == owner; }), jobs_.end());
    stats_.cancelled += int64_t(before - jobs_.size());
    if (std::this_thread::get_id() == worker_id_) return;
    cv_.wait_for(lock, std::chrono::seconds(60), [this, owner] { return !busy_ || running_ != owner; });
  }
  void hold(bool on) {
    std::lock_guard<std::mutex> lock(m_);
    held_ = on;
    cv_.notify_all();
  }
  QueueStats stats() {
    std::lock_guard<std::mutex> lock(m_);
    QueueStats s = stats_;
    s.queued = int64_t(jobs_.size());
    s.running = busy_ ? 1 : 0;
    return s;
  }

 private:
  // (under m_) The thread, once per process: a fork()ed child starts its own.
  void start() {
    if (started_ || stopping_) return;
    started_ = true;
    std::thread([this] { loop(); }).detach();
  }
  // In a fork()ed child (alone, m_ new): the thread is the parent's. The job it was running goes
  // back to the front of the queue with a new slot (the old one's lock and fields may be the
  // thread's, half-written), and the queue waits for the child's next submit or wait.
  void forked() {
    if (busy_ && current_.slot) {
      new (current_.slot.get()) graph::NativeSlot;  // (the old one's members leak)
      jobs_.push_front(std::move(current_));
    }
    current_ = Job{};
    started_ = busy_ = false;
    running_ = nullptr;
    worker_id_ = {};
  }
  // The queue is full: the jobs of graphs that are gone leave, then the oldest deferrable one, else
  // the oldest (its graph stays as it runs).
  void make_room() {
    const size_t before = jobs_.size();
    jobs_.erase(std::remove_if(jobs_.begin(), jobs_.end(), [](const Job& j) { return j.graph.expired(); }), jobs_.end());
    stats_.stale += int64_t(before - jobs_.size());
    while (jobs_.size() >= kMaxQueued) {
      auto victim = std::find_if(jobs_.begin(), jobs_.end(), [](const Job& j) { return j.deferrable; });
      if (victim == jobs_.end()) victim = jobs_.begin();
      graph::NativeSlot& s = *victim->slot;
      {
        std::lock_guard<std::mutex> slot_lock(s.mutex);
        s.done = true;
        s.error = cat("dropped from the background compile queue (", kMaxQueued, " graphs were waiting)");
      }
      jobs_.erase(victim);
      ++stats_.evicted;
    }
  }
  void loop() {
    for (;;) {
      std::shared_ptr<graph::Graph> g;
      std::function<void(const std::shared_ptr<graph::Graph>&)> run;
      {
        std::unique_lock<std::mutex> lock(m_);
        worker_id_ = std::this_thread::get_id();
        busy_ = false;
        cv_.notify_all();
        cv_.wait(lock, [this] { return !jobs_.empty() && !held_; });
        Job job = std::move(jobs_.front());
        jobs_.pop_front();
        g = job.graph.lock();
        if (!g) {
          ++stats_.stale;
          continue;
        }
        run = job.run;
        running_ = job.owner;
        busy_ = true;
        current_ = std::move(job);
      }
      run(g);
      Job done;  // (destroyed unlocked: its slot may hold the last reference to a program)
      std::lock_guard<std::mutex> lock(m_);
      done = std::move(current_);
      current_ = Job{};
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::thread::id worker_id_;
  const void* running_ = nullptr;  // the owner of the job in progress
  Job current_;                    // the job in progress (for a fork()ed child)
  bool started_ = false, busy_ = false, stopping_ = false, held_ = false;
  QueueStats stats_;
};

}  // namespace

void submit_background(Job job) { Worker::get().submit(std::move(job)); }

void wait_background_compiles() { Worker::get().wait_idle(); }

void cancel_background_compiles(const void* owner) { Worker::get().cancel(owner); }

void stop_background_compiles() { Worker::get().drain(); }

void hold_background_compiles(bool hold) { Worker::get().hold(hold); }

QueueStats background_stats() { return Worker::get().stats(); }

}  // namespace cr::jit
