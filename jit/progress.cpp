#include "jit/progress.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <thread>
#include <vector>

#include "vm/env.hpp"
#include "vm/error.hpp"
#include "vm/fixed.hpp"
#include "vm/fork.hpp"
#include "vm/log.hpp"

namespace cr::jit {

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// One thread for the process, started by the first note and never ended (a static destructor
// could run while a compile does): it prints each registered note once its time has come. A
// note leaves before it is destroyed, under m_, so the thread never touches a dead one.
class ProgressWatcher {
 public:
  using Clock = std::chrono::steady_clock;
  static ProgressWatcher& get() {
    static ProgressWatcher* w = [] {
      auto* p = new ProgressWatcher;
      fork_guard(p->m_, {&p->cv_});
      on_fork_child([] { get().forked(); });
      return p;
    }();
    return *w;
  }
  void add(ProgressNote* note, Clock::time_point due) {
    std::lock_guard<std::mutex> lock(m_);
    if (!started_) {
      started_ = true;
      std::thread([this] { loop(); }).detach();
    }
    due_.push_back({note, due});
    cv_.notify_all();
  }
  void remove(ProgressNote* note) {
    std::lock_guard<std::mutex> lock(m_);
    due_.erase(std::remove_if(due_.begin(), due_.end(), [note](const Due& d) { return d.note == note; }), due_.end());
  }

 private:
  // In a fork()ed child: the thread and the compiles of the notes are the parent's.
  void forked() {
    started_ = false;
    due_.clear();
  }
  struct Due {
    ProgressNote* note;
    Clock::time_point at;
  };
  void loop() {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      if (due_.empty()) {
        cv_.wait(lock);
        continue;
      }
      auto first = std::min_element(due_.begin(), due_.end(), [](const Due& a, const Due& b) { return a.at < b.at; });
      if (const Clock::time_point at = first->at; Clock::now() < at) {
        // (a copy: wait_until reads the time after waking, when add() may have moved due_)
        cv_.wait_until(lock, at);  // (or woken by a new note, maybe due sooner)
        continue;
      }
      ProgressNote* note = first->note;
      due_.erase(first);
      note->overdue();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<Due> due_;
  bool started_ = false;
};
// Made at load time: made first by a compile thread, its static's guard would be held across a
// fork() (the initialiser waits for fork's registry lock) and the child would wait on it forever.
[[maybe_unused]] const bool watcher_made = (ProgressWatcher::get(), true);

ProgressNote::ProgressNote(std::string graph, std::string device, bool on)
    : graph_(std::move(graph)), device_(std::move(device)), start_ms_(now_ms()), after_ms_(-1) {
  if (!on) return;
  try {  // (checked when the VM started; a compile, perhaps on the background thread, must not throw here)
    after_ms_ = env_number(kEnvProgressAfter) * 1000;
  } catch (const std::exception& e) {
    log_line("progress", cat(e.what(), ": no progress note"));
    return;
  }
  const auto after = std::chrono::microseconds(int64_t(after_ms_ * 1000));
  ProgressWatcher::get().add(this, ProgressWatcher::Clock::now() + after);
}

ProgressNote::~ProgressNote() {
  if (after_ms_ < 0) return;
  ProgressWatcher::get().remove(this);  // (waits for the watcher when it is printing this note)
  std::lock_guard<std::mutex> lock(mutex_);
  if (now_ms() - start_ms_ >= after_ms_) log_line("progress", line(true));
}

void ProgressNote::phase(const char* what) {
  std::lock_guard<std::mutex> lock(mutex_);
  phase_ = what;
}

void ProgressNote::kernels(int total) {
  std::lock_guard<std::mutex> lock(mutex_);
  total_ = total;
}

void ProgressNote::done(int kernels) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = kernels;
}

// Once the threshold has passed with the compile still running: one line of where it is.
void ProgressNote::overdue() {
  std::lock_guard<std::mutex> lock(mutex_);
  log_line("progress", line(false));
}

std::string ProgressNote::line(bool closing) const {
  const std::string kernels = total_ < 0 ? "" : cat(", ", done_, " / ", total_, " kernels");
  const std::string seconds = fixed((now_ms() - start_ms_) / 1000);
  if (closing) return cat("compile of graph ", graph_, " (", device_, ") ended", kernels, ", ", seconds, " s");
  return cat("compiling graph ", graph_, " (", device_, "): ", phase_, kernels, ", ", seconds, " s so far");
}

}  // namespace cr::jit
