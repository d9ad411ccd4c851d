// The on-disk kernel cache as a whole (entries: jit/cache_entry.hpp): where it is, its size, its
// bound and clearing. An entry's modification time is its last use (set when it is written or
// loaded); once the entries pass the bound, the least recently used go first.
#pragma once
#include <cstdint>
#include <string>

namespace cr::jit {

// CRESCENT_CACHE_DIR, else ~/.cache/crescent (T.config.cache_dir's default)
std::string default_cache_dir();

// The bound in MB (T.config.cache_max_mb, CRESCENT_CACHE_MAX_MB; default 1024), for every cache
// directory of the process. Throws cr::Error on a value that is not a positive number.
void set_cache_max_mb(double mb);
double cache_max_mb();

struct DiskUsage {
  int64_t entries = 0, bytes = 0;
  bool exists = false;  // the directory exists
};
// Entries are `<64 hex>.so` and `<64 hex>.cubin` (and the temporary files of unfinished writes);
// nothing else in the directory is counted or removed. Throws cr::Error when `dir` exists but is
// not a directory that can be read.
DiskUsage disk_usage(const std::string& dir);
// Removes every entry (and temporary file); returns what was removed.
DiskUsage clear_disk_cache(const std::string& dir);
// Says once per directory, on stderr, that `dir` cannot take entries (read-only, not a directory,
// full): the kernels then load from their scratch directory and are compiled again next time.
void warn_unwritable(const std::string& dir, const std::string& why);
// Marks the entry at `path` as just used.
void touch_entry(const std::string& path);
// Removes the least recently used entries of `dir` until they take at most cache_max_mb(),
// never the one named `keep` (the file name of the entry just written) nor a write in progress;
// returns how many went.
int64_t evict_entries(const std::string& dir, const std::string& keep);

}  // namespace cr::jit
