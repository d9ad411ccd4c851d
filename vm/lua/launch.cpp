#include "vm/lua/launch.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "vm/config.hpp"

namespace cr {
namespace {

constexpr double kGraceSeconds = 3, kTermSeconds = 5;

volatile sig_atomic_t g_signal = 0;
void on_signal(int s) { g_signal = s; }

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

pid_t start_rank(int rank, int nproc, char** argv) {
  const pid_t pid = fork();
  if (pid > 0) setpgid(pid, pid);  // (each rank leads a process group: stopping it stops what it started)
  if (pid != 0) return pid;
  setpgid(0, 0);
  const std::string r = std::to_string(rank), n = std::to_string(nproc);
  setenv("RANK", r.c_str(), 1);
  setenv("LOCAL_RANK", r.c_str(), 1);
  setenv("WORLD_SIZE", n.c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", n.c_str(), 1);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "crescent: rank %d: cannot start /proc/self/exe\n", rank);
  _exit(127);
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// The rendezvous file: CRESCENT_DIST_FILE when set, else one in a new folder (removed at the end,
// with what the ranks left in it).
std::string rendezvous(std::string* dir) {
  if (const char* f = env_setting(Setting::DistFile); f && *f) return f;
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/crescent-dist-XXXXXX";
  if (!mkdtemp(pattern.data())) return "";
  *dir = pattern;
  return pattern + "/nccl.id";
}

struct Run {
  std::vector<pid_t> pids;
  int failed = -1, failed_status = 0;
  bool termed = false, killed = false;
  Clock::time_point failed_at;
};

void signal_alive(const Run& run, int sig) {
  for (pid_t p : run.pids)
    if (p > 0) kill(-p, sig);
}

// One round of waiting: reaps what exited, escalates after a failure; false when all are gone.
bool step(Run& run, int nproc) {
  int status = 0;
  const pid_t pid = waitpid(-1, &status, WNOHANG);
  if (pid > 0) {
    for (int r = 0; r < nproc; ++r) {
      if (run.pids[size_t(r)] != pid) continue;
      run.pids[size_t(r)] = 0;
      const bool bad = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (bad && run.failed < 0) {
        run.failed = r, run.failed_status = status, run.failed_at = Clock::now();
        if (nproc > 1) std::fprintf(stderr, "crescent: rank %d %s; stopping the other ranks\n", r, describe(status).c_str());
      }
    }
  } else if (pid < 0 && errno != EINTR) {
    return false;  // (ECHILD: none left)
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (g_signal) {
    signal_alive(run, g_signal);
    g_signal = 0;
  }
  if (run.failed >= 0 && !run.termed && since(run.failed_at) > kGraceSeconds) signal_alive(run, SIGTERM), run.termed = true;
  if (run.termed && !run.killed && since(run.failed_at) > kGraceSeconds + kTermSeconds) signal_alive(run, SIGKILL), run.killed = true;
  for (pid_t p : run.pids)
    if (p > 0) return true;
  return false;
}

}  // namespace

int launch(int nproc, int argc, char** argv) {
  std::string dir;
  const std::string file = rendezvous(&dir);
  if (file.empty()) return std::fprintf(stderr, "crescent: --nproc: cannot make a folder for the rendezvous file\n"), 1;
  setenv("CRESCENT_DIST_FILE", file.c_str(), 1);
  setenv("CRESCENT_DIST_RUN", (std::to_string(getpid()) + "-" + std::to_string(time(nullptr))).c_str(), 1);
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  std::fflush(nullptr);
  Run run;
  for (int r = 0; r < nproc; ++r) {
    run.pids.push_back(start_rank(r, nproc, args.data()));
    if (run.pids.back() > 0) continue;
    std::fprintf(stderr, "crescent: --nproc: cannot start rank %d (fork failed)\n", r);
    run.pids.back() = 0;
    signal_alive(run, SIGTERM);
    while (step(run, nproc)) {
    }
    return 1;
  }
  while (step(run, nproc)) {
  }
  if (!dir.empty()) {  // (with the simulated process group's last files)
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  if (run.failed < 0) return 0;
  std::fprintf(stderr, "crescent: rank %d of %d failed (it %s)\n", run.failed, nproc, describe(run.failed_status).c_str());
  const int s = run.failed_status;
  return WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
}

}  // namespace cr
