#include "jit/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <vector>

#include "vm/config.hpp"
#include "vm/error.hpp"

namespace cr::jit {

namespace fs = std::filesystem;

namespace {

double initial_max_mb() {
  const char* v = env_setting(Setting::CacheMaxMb);
  if (!v || !*v) return 1024;
  char* end = nullptr;
  const double mb = std::strtod(v, &end);
  if (*end || !(mb > 0)) throw Error(cat("CRESCENT_CACHE_MAX_MB: expected a positive number of MB, got \"", v, "\""));
  return mb;
}

std::atomic<double>& max_mb() {
  static std::atomic<double> mb{initial_max_mb()};
  return mb;
}

bool is_hex_key(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// `<key>.so`, `<key>.cubin`, `<key>.tune` (an autotuning choice), or a temporary file of one
// (io::create_temp: `.<name>.tmp-<pid>-<n>`)
bool is_entry(const std::string& name, bool* temp) {
  std::string n = name;
  *temp = n.size() > 1 && n[0] == '.' && n.find(".tmp-") != std::string::npos;
  if (*temp) n = n.substr(1, n.find(".tmp-") - 1);
  for (const char* ext : {".so", ".cubin", ".tune"}) {
    const size_t len = std::char_traits<char>::length(ext);
    if (n.size() > len && n.compare(n.size() - len, len, ext) == 0 && is_hex_key(n.substr(0, n.size() - len))) return true;
  }
  return false;
}

struct Entry {
  std::string path, name;
  int64_t bytes;
  struct timespec used;
  bool temp;  // a write in progress (or one a crash left)
};

// The entries of dir (regular files only: a link or a FIFO is no entry of ours to count).
std::vector<Entry> entries_of(const std::string& dir, bool* exists) {
  std::vector<Entry> out;
  struct stat st {};
  *exists = ::stat(dir.c_str(), &st) == 0;
  if (!*exists) return out;
  if (!S_ISDIR(st.st_mode)) throw Error(cat("the kernel cache directory ", dir, " is not a directory"));
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string path = it->path().string(), name = it->path().filename().string();
    bool temp = false;
    if (!is_entry(name, &temp) || ::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({path, name, int64_t(st.st_size), st.st_mtim, temp});
  }
  if (ec) throw Error(cat("the kernel cache directory ", dir, " cannot be read: ", ec.message()));
  return out;
}

}  // namespace

std::string default_cache_dir() {
  if (const char* d = env_setting(Setting::CacheDir); d && *d) return d;
  return cat(std::getenv("HOME") ? std::getenv("HOME") : ".", "/.cache/crescent");
}

void set_cache_max_mb(double mb) {
  if (!(mb > 0)) throw Error(cat("config: cache_max_mb expected a positive number of MB, got ", mb));
  max_mb() = mb;
}
double cache_max_mb() { return max_mb(); }

DiskUsage disk_usage(const std::string& dir) {
  DiskUsage u;
  for (const Entry& e : entries_of(dir, &u.exists)) {
    ++u.entries;
    u.bytes += e.bytes;
  }
  return u;
}

DiskUsage clear_disk_cache(const std::string& dir) {
  DiskUsage u;
  for (const Entry& e : entries_of(dir, &u.exists))
    if (std::remove(e.path.c_str()) == 0) {
      ++u.entries;
      u.bytes += e.bytes;
    }
  return u;
}

void warn_unwritable(const std::string& dir, const std::string& why) {
  static std::mutex m;
  static std::set<std::string> told;
  std::lock_guard<std::mutex> lock(m);
  if (!told.insert(dir).second) return;
  std::fprintf(stderr,
               "crescent: warning: the kernel cache %s cannot take compiled kernels (%s); they will be compiled again "
               "in each process (T.config.cache_dir, CRESCENT_CACHE_DIR; \"0\" turns the disk cache off)\n",
               dir.c_str(), why.c_str());
}

void touch_entry(const std::string& path) { ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

int64_t evict_entries(const std::string& dir, const std::string& keep) {
  bool exists = false;
  std::vector<Entry> all;
  try {
    all = entries_of(dir, &exists);
  } catch (const Error&) {
    return 0;  // (a cache that cannot be listed is not bounded, as one that cannot be written)
  }
  int64_t total = 0, removed = 0;
  for (const Entry& e : all) total += e.bytes;
  const auto limit = int64_t(cache_max_mb() * 1024 * 1024);
  if (total <= limit) return 0;
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) {
    return a.used.tv_sec != b.used.tv_sec ? a.used.tv_sec < b.used.tv_sec : a.used.tv_nsec < b.used.tv_nsec;
  });
  for (const Entry& e : all) {
    if (total <= limit) break;
    // (another process may be writing a temporary file, or have removed the entry already)
    if (e.temp || e.name == keep || std::remove(e.path.c_str()) != 0) continue;
    total -= e.bytes;
    ++removed;
  }
  return removed;
}

}  // namespace cr::jit
