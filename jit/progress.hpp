// A compile's progress note (CRESCENT_LOGS progress, on by default): a compile that runs longer
// than CRESCENT_PROGRESS_AFTER seconds (1) says on stderr which graph it is and how many of its
// kernels are done, once while it runs and once at its end, so that a long pause is explained.
#pragma once
#include <mutex>
#include <string>

namespace cr::jit {

class ProgressWatcher;  // (progress.cpp) the one thread that prints the notes of every compile

class ProgressNote {
 public:
  // `on` false: nothing is printed.
  ProgressNote(std::string graph, std::string device, bool on);
  ~ProgressNote();  // the closing line, when the compile ran at least the threshold
  ProgressNote(const ProgressNote&) = delete;
  ProgressNote& operator=(const ProgressNote&) = delete;

  void phase(const char* what);    // "lowering", "scheduling", "code generation"
  void kernels(int total);         // known once scheduled
  void done(int kernels);          // compiled or loaded so far

 private:
  friend class ProgressWatcher;
  void overdue();                        // the threshold passed with the compile running
  std::string line(bool closing) const;  // (under mutex_)

  std::string graph_, device_;
  double start_ms_, after_ms_;
  std::mutex mutex_;
  const char* phase_ = "lowering";
  int total_ = -1, done_ = 0;
};

}  // namespace cr::jit
