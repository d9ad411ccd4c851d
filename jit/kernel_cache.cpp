#include "jit/kernel_cache.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "jit/cache_entry.hpp"
#include "jit/disk_cache.hpp"
#include "jit/scratch.hpp"
#include "vm/fork.hpp"

namespace cr::jit {

namespace {

std::mutex cache_mutex;
[[maybe_unused]] const bool cache_guarded = (fork_guard(cache_mutex), true);
CacheStats counters;

// By "<key><ext>": weakly while a program uses the artifact (a shared object is then unloaded),
// strongly too for the backends that keep theirs (Backend::keep).
struct Held {
  std::weak_ptr<void> used;
  Artifact kept;
};
std::map<std::string, Held> memory_cache;

Artifact from_memory(const std::string& name) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = memory_cache.find(name);
  if (it == memory_cache.end()) return nullptr;
  if (Artifact a = it->second.used.lock()) {
    ++counters.memory_hits;
    return a;
  }
  memory_cache.erase(it);
  return nullptr;
}

// A disk entry that passes its check and loads; otherwise (damaged, truncated, another key's,
// or the loader refuses it) it is removed, counted and left for the caller to compile again.
Artifact from_disk(const Backend& b, const std::string& path, const std::string& key) {
  std::string why, body;
  if (check_entry(path, key, &why, &body)) {
    try {
      Artifact a = b.load(path, body);
      touch_entry(path);
      return a;
    } catch (const Error& e) {
      why = e.what();
    }
  }
  std::remove(path.c_str());
  std::lock_guard<std::mutex> lock(cache_mutex);
  ++counters.rejected;
  counters.last_rejection = cat(path, " ", why);
  return nullptr;
}

// `bytes` as the entry `name` of the cache directory `dir`, then the directory back within its
// bound (jit/disk_cache.hpp); false when the cache cannot take it.
bool publish_in(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!publish_file(cat(dir, "/", name), bytes)) {
    warn_unwritable(dir, ec ? ec.message() : std::strerror(errno));
    return false;
  }
  const int64_t evicted = evict_entries(dir, name);
  std::lock_guard<std::mutex> lock(cache_mutex);
  counters.evicted += evicted;
  return true;
}

// Builds `u` in a scratch directory, publishes it sealed and loads it (from the cache directory,
// or from the scratch directory when the cache could not take it or lost it to an eviction).
Artifact built(const Backend& b, const Unit& u, const std::string& dir, const std::string& path) {
  ScratchDir scratch;  // removed on every path
  const std::string out = cat(scratch.path, "/kernels", b.ext);
  b.build(u, out);
  const std::string body = read_file(out);
  if (body.empty()) throw Error(cat("the ", b.name, " compiler left no object for ", u.name));
  const bool published = !dir.empty() && publish_in(dir, u.key + b.ext, sealed(body, u.key));
  Artifact a;
  try {
    a = b.load(published ? path : out, body);
  } catch (const Error&) {
    if (!published) throw;
    a = b.load(out, body);
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  ++counters.compiled;
  if (b.compiled_stat) ++(counters.*b.compiled_stat);
  counters.unpublished += !dir.empty() && !published ? 1 : 0;
  return a;
}

}  // namespace

Artifact cached_artifact(const Backend& b, const Unit& u, const std::string& cache_dir, Source* from) {
  const std::string name = u.key + b.ext;
  *from = Source::Memory;
  if (Artifact a = from_memory(name)) return a;
  const std::string dir = cache_dir == "0" ? std::string() : cache_dir;
  const std::string path = dir.empty() ? std::string() : cat(dir, "/", name);
  Artifact a;
  if (!dir.empty() && ::access(path.c_str(), R_OK) == 0) a = from_disk(b, path, u.key);
  *from = a ? Source::Disk : Source::Built;
  if (!a) a = built(b, u, dir, path);
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (*from == Source::Disk) ++counters.disk_hits;
  memory_cache[name] = {a, b.keep ? a : nullptr};
  // entries of artifacts no program uses go when the map doubles (a program of ever-new kernels)
  static size_t sweep_at = 1024;
  if (memory_cache.size() >= sweep_at) {
    std::erase_if(memory_cache, [](const auto& e) { return !e.second.kept && e.second.used.expired(); });
    sweep_at = std::max<size_t>(1024, 2 * memory_cache.size());
  }
  return a;
}

std::string build_id() {
  static const std::string id = [] {
    Dl_info info{};
    struct stat st {};
    if (dladdr(reinterpret_cast<void*>(&build_id), &info) && info.dli_fname && ::stat(info.dli_fname, &st) == 0)
      return cat(info.dli_fname, ":", st.st_size, ":", st.st_mtime);
    return cat("unknown build ", __DATE__, " ", __TIME__);
  }();
  return id;
}

void count_prebuilt() {
  std::lock_guard<std::mutex> lock(cache_mutex);
  ++counters.prebuilt;
}

CacheStats cache_stats() {
  std::lock_guard<std::mutex> lock(cache_mutex);
  return counters;
}

}  // namespace cr::jit
