#include "jit/progress.hpp"

#include <chrono>

#include "vm/env.hpp"
#include "vm/error.hpp"
#include "vm/fixed.hpp"
#include "vm/log.hpp"

namespace cr::jit {

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

ProgressNote::ProgressNote(std::string graph, std::string device, bool on)
    : graph_(std::move(graph)), device_(std::move(device)), start_ms_(now_ms()), after_ms_(-1) {
  if (!on) return;
  try {  // (checked when the VM started; a compile, perhaps on the background thread, must not throw here)
    after_ms_ = env_number(kEnvProgressAfter) * 1000;
  } catch (const std::exception& e) {
    log_line("progress", cat(e.what(), ": no progress note"));
    return;
  }
  watcher_ = std::thread([this] { watch(); });
}

ProgressNote::~ProgressNote() {
  if (after_ms_ < 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }
  cv_.notify_all();
  watcher_.join();
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
void ProgressNote::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(after_ms_);
  if (cv_.wait_until(lock, deadline, [this] { return finished_; })) return;
  log_line("progress", line(false));
}

std::string ProgressNote::line(bool closing) const {
  const std::string kernels = total_ < 0 ? "" : cat(", ", done_, " / ", total_, " kernels");
  const std::string seconds = fixed((now_ms() - start_ms_) / 1000);
  if (closing) return cat("compile of graph ", graph_, " (", device_, ") ended", kernels, ", ", seconds, " s");
  return cat("compiling graph ", graph_, " (", device_, "): ", phase_, kernels, ", ", seconds, " s so far");
}

}  // namespace cr::jit
