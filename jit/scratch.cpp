#include "jit/scratch.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>

#include "vm/error.hpp"

namespace cr::jit {

namespace {

constexpr const char* kPrefix = "crescent-jit-";
constexpr long kStaleAfterS = 600;

// The pid in "crescent-jit-<pid>-XXXXXX", or -1.
pid_t owner_of(const std::string& name) {
  const std::string prefix = kPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  size_t at = prefix.size(), end = name.find('-', at);
  if (end == std::string::npos || end == at || end - at > 9) return -1;
  pid_t pid = 0;
  for (size_t i = at; i < end; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid > 0 ? pid : -1;
}

}  // namespace

std::string temp_root() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

int sweep_scratch_dirs(const std::string& root, long min_age_s) {
  DIR* d = ::opendir(root.c_str());
  if (!d) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const pid_t pid = owner_of(e->d_name);
    if (pid < 0 || pid == ::getpid()) continue;
    const std::string path = root + "/" + e->d_name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (std::time(nullptr) - st.st_mtime < min_age_s) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // its process (or one with its pid) lives
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    removed += ec ? 0 : 1;
  }
  ::closedir(d);
  return removed;
}

std::string make_scratch_dir() {
  const std::string root = temp_root();
  static std::once_flag swept;
  std::call_once(swept, [&] { sweep_scratch_dirs(root, kStaleAfterS); });
  std::string tmpl = cat(root, "/", kPrefix, ::getpid(), "-XXXXXX");
  if (!::mkdtemp(tmpl.data())) throw Error(cat("cannot create a temporary directory in ", root, " for compiled kernels: ", std::strerror(errno)));
  return tmpl;
}

void remove_scratch_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace cr::jit
