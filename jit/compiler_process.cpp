// The compiler processes (jit/compiler_process.hpp): the program's side (a pool, requests with a
// timeout) and the process's side (a loop run from a constructor, before the host's main()).
#include "jit/compiler_process.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "jit/cache_entry.hpp"
#include "jit/cpu/target.hpp"
#include "jit/cpu/wire.hpp"
#include "jit/scratch.hpp"
#include "vm/env.hpp"
#include "vm/fork.hpp"

extern char** environ;

namespace cr::jit {

namespace {

constexpr const char* kServeEnv = "CRESCENT_JIT_SERVE";  // set in a compiler process: its program's pid
constexpr int kSocketFd = 3;                              // a compiler process's requests and replies
constexpr const char* kMagic = "crescent compile request 3";
constexpr int kCompilesPerProcess = 256;
std::atomic<int64_t> started{0};

// ---- messages: a 4-byte length, then the bytes; a request is a list of strings ------------------

std::string pack(const std::vector<std::string>& parts) {
  std::string m;
  for (const std::string& p : parts) {
    const uint32_t n = uint32_t(p.size());
    m.append(reinterpret_cast<const char*>(&n), 4);
    m += p;
  }
  return m;
}

std::vector<std::string> unpack(const std::string& m) {
  std::vector<std::string> parts;
  for (size_t at = 0; at < m.size();) {
    uint32_t n = 0;
    if (m.size() - at < 4) throw Error("the compiler process got a malformed request");
    std::memcpy(&n, m.data() + at, 4);
    if (m.size() - at - 4 < n) throw Error("the compiler process got a malformed request");
    parts.push_back(m.substr(at + 4, n));
    at += 4 + n;
  }
  return parts;
}

bool send_message(int fd, const std::string& body) {
  std::string m = pack({body});
  for (size_t at = 0; at < m.size();) {
    const ssize_t n = ::send(fd, m.data() + at, m.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += size_t(n);
  }
  return true;
}

// Whether `got` holds a whole message; then it is moved to `body`.
bool whole_message(std::string& got, std::string& body) {
  uint32_t n = 0;
  if (got.size() < 4) return false;
  std::memcpy(&n, got.data(), 4);
  if (got.size() - 4 < n) return false;
  body = got.substr(4, n);
  return true;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += n + "\n";
  return s;
}

// ---- the compiler process ------------------------------------------------------------------------

void serve_one(const std::string& request) {
  const std::vector<std::string> f = unpack(request);
  if (f.size() != 10 || f[0] != kMagic) throw Error("the compiler process got a malformed request");
  if (f[1] != cpu::compiler_id())
    throw Error(cat("the compiler process generates code for ", cpu::compiler_id(), ", the program for ", f[1]));
  Plan plan;
  plan.kernels = cpu::decode_kernels(f[7]);
  if (sha256_hex(cpu::kernels_text(plan)) != f[5]) throw Error("internal: the kernels changed on their way to the compiler process");
  cpu::FnTable fns;
  cpu::collect_fns(plan, fns, false);
  if (joined(fns.names) != f[6]) throw Error("internal: the compiler process made another function table");
  if (f[4] == "crash") ::abort();
  while (f[4] == "hang") ::pause();
  if (const char* tmp = std::getenv("TMPDIR")) ::mkdir(tmp, 0700);  // (a sweep may have taken it)
  cpu::compile_plan(plan, fns, f[2], f[3], cpu::CodeShape{std::stoll(f[8]), std::stoll(f[9])});
  if (joined(fns.names) != f[6]) throw Error("internal: code generation added to the function table");
}

[[noreturn]] void serve(pid_t program) {
  // orphaned (its program was killed): ends within a second, even inside a compile that hangs
  std::thread([program] {
    while (::getppid() == program) ::sleep(1);
    ::_exit(3);
  }).detach();
  std::string got, request;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(kSocketFd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the program closed its end: it is done, or ended
    got.append(buf, size_t(n));
    if (!whole_message(got, request)) continue;
    got.erase(0, 4 + request.size());
    std::string reply(1, '\0');
    try {
      serve_one(request);
    } catch (const std::exception& e) {
      reply = std::string(1, '\1') + e.what();
    }
    if (!send_message(kSocketFd, reply)) break;
  }
  if (const char* tmp = std::getenv("TMPDIR")) remove_scratch_dir(tmp);
  ::_exit(0);
}

// Runs before main(), and before the program's constructors of default priority (what it
// uses is constant-initialised or function-local): a compiler process never reaches them.
__attribute__((constructor(101))) void serve_when_asked() {
  const char* v = std::getenv(kServeEnv);
  if (!v) return;
  const pid_t program = pid_t(std::atol(v));
  ::unsetenv(kServeEnv);
  if (::getppid() != program) ::_exit(3);
  serve(program);
}

// ---- the program's side ---------------------------------------------------------------------------

struct Server {
  pid_t pid = -1;
  int sock = -1, err = -1;  // requests and replies; the process's stdout and stderr
  std::string dir;          // its TMPDIR: libgccjit's temporary files
  int compiles = 0;
};

// Whether this code is in the executable (/proc/self/exe), not in a shared library.
bool in_executable() {
  Dl_info self{}, exe{};
  return ::dladdr(reinterpret_cast<void*>(&in_executable), &self) && ::dladdr(reinterpret_cast<void*>(::getauxval(AT_PHDR)), &exe) &&
         self.dli_fbase == exe.dli_fbase;
}

// This environment without our variables, plus theirs for a compiler process in `dir`.
std::vector<std::string> server_environment(const std::string& dir) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string v = *e;
    const bool ours = v.rfind(cat(kServeEnv, "="), 0) == 0 || v.rfind("TMPDIR=", 0) == 0 ||
                      v.rfind("OPENBLAS_NUM_THREADS=", 0) == 0 ||
                      v.rfind(cat(setting_name(Setting::CpuStreamBytes), "="), 0) == 0;
    if (!ours) env.push_back(v);
  }
  env.push_back(cat(kServeEnv, "=", ::getpid()));
  env.push_back("TMPDIR=" + dir);
  env.push_back("OPENBLAS_NUM_THREADS=1");  // (its BLAS is never used: no thread pool)
  // the program's streaming choice, not a measurement of its own
  env.push_back(cat(setting_name(Setting::CpuStreamBytes), "=", cpu::stream_store_bytes()));
  return env;
}

// Starts a compiler process: a new image, not a fork(), whose child would inherit the locks the
// program's other threads held and could hang in libgccjit, malloc or stdio. Its socket and stderr
// ends move above the descriptors dup2() sets, so each dup2 clears close-on-exec for it alone.
Server spawn() {
  if (!in_executable())
    throw Error("the compiler process runs the program's executable, and crescent is in a shared library here (CRESCENT_JIT_FORK=0 compiles in process)");
  Server s;
  s.dir = make_scratch_dir();
  int sv[2] = {-1, -1}, ep[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || ::pipe2(ep, O_CLOEXEC) != 0) {
    for (int fd : {sv[0], sv[1], ep[0], ep[1]})
      if (fd >= 0) ::close(fd);
    remove_scratch_dir(s.dir);
    throw Error(cat("cannot create the compiler process's socket: ", std::strerror(errno)));
  }
  const int csock = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10), cerr = ::fcntl(ep[1], F_DUPFD_CLOEXEC, 10);
  ::close(sv[1]);
  ::close(ep[1]);
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&fa, cerr, 1);
  ::posix_spawn_file_actions_adddup2(&fa, cerr, 2);
  ::posix_spawn_file_actions_adddup2(&fa, csock, kSocketFd);
  ::posix_spawnattr_init(&at);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&at, &none);
  ::posix_spawnattr_setsigdefault(&at, &all);
  ::posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> env = server_environment(s.dir);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char name[] = "crescent-compiler";
  char* argv[] = {name, nullptr};
  const int rc = csock < 0 || cerr < 0 ? EMFILE : ::posix_spawn(&s.pid, "/proc/self/exe", &fa, &at, argv, envp.data());
  ::posix_spawn_file_actions_destroy(&fa);
  ::posix_spawnattr_destroy(&at);
  for (int fd : {csock, cerr})
    if (fd >= 0) ::close(fd);
  if (rc != 0) {
    ::close(sv[0]);
    ::close(ep[0]);
    remove_scratch_dir(s.dir);
    throw Error(cat("cannot start the compiler process: ", std::strerror(rc)));
  }
  ++started;
  s.sock = sv[0];
  s.err = ep[0];
  ::fcntl(s.err, F_SETFL, O_NONBLOCK);
  return s;
}

// Appends what is waiting on the process's stderr to `text` (the first 64 KiB); false at its end.
bool read_stderr(int fd, std::string& text) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      text.append(buf, size_t(std::min<ssize_t>(n, ssize_t(65536 - std::min<size_t>(text.size(), 65536)))));
      continue;
    }
    return n < 0 && (errno == EAGAIN || errno == EINTR);
  }
}

// Kills the process (it may be past its last reply, hung or dead), reaps it, keeps what is left
// on its stderr in `errors` (when given), removes its directory; returns its wait status.
int end(Server& s, std::string* errors = nullptr) {
  ::close(s.sock);
  ::kill(s.pid, SIGKILL);
  int status = 0;
  while (::waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (errors) read_stderr(s.err, *errors);
  ::close(s.err);
  remove_scratch_dir(s.dir);
  return status;
}

// An idle process has nothing to say: a readable or closed socket means it is gone.
bool idle_alive(const Server& s) {
  pollfd p{s.sock, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

class Pool {
 public:
  // Never destroyed: the processes end with the program (the end of their input); at a normal
  // exit the idle ones end first, so that their directories are gone when the program is.
  static Pool& get() {
    static Pool* p = [] {
      auto* pool = new Pool;
      std::atexit([] { get().end_idle(); });
      fork_guard(pool->m_, {&pool->cv_});
      on_fork_child([] { get().forked(); });
      return pool;
    }();
    return *p;
  }
  Server take() {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      while (!idle_.empty()) {
        Server s = idle_.back();
        idle_.pop_back();
        if (idle_alive(s)) {
          busy_.push_back(s);
          return s;
        }
        end(s);
        --live_;
      }
      if (live_ < max_) break;
      cv_.wait(lock);
    }
    ++live_;
    lock.unlock();
    try {
      Server s = spawn();
      lock.lock();
      busy_.push_back(s);
      return s;
    } catch (...) {
      done_with_one();
      throw;
    }
  }
  void give_back(Server s) {
    if (++s.compiles >= kCompilesPerProcess) {
      retire(s);
      return;
    }
    std::lock_guard<std::mutex> lock(m_);
    forget_busy(s);
    idle_.push_back(s);
    cv_.notify_one();
  }
  int retire(Server& s, std::string* errors = nullptr) {
    {
      std::lock_guard<std::mutex> lock(m_);
      forget_busy(s);
    }
    const int status = end(s, errors);
    done_with_one();
    return status;
  }

 private:
  // Ends the idle processes and removes their directories (left to themselves, they see the end
  // of their input only after the program is gone). Only the process that started them.
  void end_idle() {
    if (::getpid() != owner_) return;
    std::unique_lock<std::mutex> lock(m_, std::try_to_lock);  // (a thread stopped mid-take: leave them)
    if (!lock.owns_lock()) return;
    for (Server& s : idle_) end(s);
    live_ -= int(idle_.size());
    idle_.clear();
  }
  // In a fork()ed child (alone, m_ new): the processes are the parent's, serving its requests on
  // these sockets. The child closes its copies of their ends, never kills them nor removes their
  // directories, and starts its own processes when it compiles.
  void forked() {
    for (const std::vector<Server>* v : {&idle_, &busy_})
      for (const Server& s : *v) {
        ::close(s.sock);
        ::close(s.err);
      }
    idle_.clear();
    busy_.clear();
    live_ = 0;
    owner_ = ::getpid();
  }
  void forget_busy(const Server& s) {
    std::erase_if(busy_, [&](const Server& b) { return b.pid == s.pid; });
  }
  void done_with_one() {
    std::lock_guard<std::mutex> lock(m_);
    --live_;
    cv_.notify_one();
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<Server> idle_;
  std::vector<Server> busy_;  // serving a compile now (their ends are closed in a fork()ed child)
  int live_ = 0;
  const int max_ = std::clamp(int(std::thread::hardware_concurrency()), 2, 8);
  pid_t owner_ = ::getpid();
};
// Made at load time, as jit/progress.cpp's watcher: a compile thread's first use could hold the
// static's guard across a fork(), and the child would wait on it forever.
[[maybe_unused]] const bool pool_made = (Pool::get(), true);

enum class Outcome { Reply, Gone, TimedOut };

// Sends the request and waits for the reply, reading the process's stderr meanwhile.
Outcome exchange(Server& s, const std::string& request, std::string& reply, std::string& errors) {
  std::string discard;
  read_stderr(s.err, discard);  // (what an earlier request left)
  if (!send_message(s.sock, request)) return Outcome::Gone;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(compile_timeout_ms());
  std::string got;
  char buf[4096];
  int err_fd = s.err;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return Outcome::TimedOut;
    pollfd p[2] = {{s.sock, POLLIN, 0}, {err_fd, POLLIN, 0}};
    const int r = ::poll(p, 2, int(std::min<long long>(left, 1 << 30)));
    if (r < 0 && errno != EINTR) return Outcome::Gone;
    if (r <= 0) continue;
    if (p[1].revents && !read_stderr(s.err, errors)) err_fd = -1;
    if (!p[0].revents) continue;
    const ssize_t n = ::recv(s.sock, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Outcome::Gone;
    got.append(buf, size_t(n));
    if (whole_message(got, reply)) return Outcome::Reply;
  }
}

std::string trimmed(std::string m) {
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  if (m.size() > 1500) m = m.substr(0, 1500) + " ...";
  return m;
}

}  // namespace

int compile_timeout_ms() {
  return int(env_number(kEnvJitTimeout) * 1000);
}

int64_t compiler_processes_started() { return started.load(); }

void compile_in_compiler_process(const Plan& plan, const cpu::FnTable& fns, const std::string& so_path,
                                 const std::string& c_dump, Injected injected, cpu::CodeShape shape) {
  const char* inject = injected == Injected::Crash ? "crash" : injected == Injected::Hang ? "hang" : "";
  const std::string request = pack({kMagic, cpu::compiler_id(), so_path, c_dump, inject, sha256_hex(cpu::kernels_text(plan)),
                                    joined(fns.names), cpu::encode_kernels(plan), std::to_string(shape.block),
                                    std::to_string(shape.stream_from)});
  Pool& pool = Pool::get();
  Server s = pool.take();
  std::string reply, errors;
  const Outcome o = exchange(s, request, reply, errors);
  if (o == Outcome::Reply) {
    pool.give_back(s);
    if (reply.empty() || reply[0] != '\0') throw Error(trimmed(reply.empty() ? "the compiler process failed" : reply.substr(1)));
    if (::access(so_path.c_str(), R_OK) != 0) throw Error("the compiler process reported success and wrote no shared object");
    return;
  }
  const int status = pool.retire(s, &errors);
  errors = trimmed(errors);
  if (o == Outcome::TimedOut) throw Error(cat("the compiler process did not finish in ", compile_timeout_ms() / 1000.0, " s"));
  if (WIFSIGNALED(status))
    throw Error(cat("the compiler process died (signal ", WTERMSIG(status), ")", errors.empty() ? "" : ": ", errors));
  throw Error(cat("the compiler process ended (status ", WIFEXITED(status) ? WEXITSTATUS(status) : -1, ")",
                  errors.empty() ? "" : ": ", errors));
}

}  // namespace cr::jit
