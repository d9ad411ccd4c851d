// The kernel cache, one for every backend (jit/backend.hpp): artifacts by key in memory, then
// sealed entries `<cache_dir>/<key><ext>` on disk (jit/cache_entry.hpp: a CPU shared object and a
// CUBIN pass the same check), else built in a scratch directory (jit/scratch.hpp) and published:
// written under a unique temporary name and renamed into place, so a concurrent process sees a
// whole entry or none. An entry that fails its check or does not load is removed, counted
// (CacheStats::rejected) and compiled again. A cache directory that cannot take an entry
// (read-only, full) still gives its entries; the new one is then loaded from the scratch directory.
#pragma once
#include <string>

#include "jit/backend.hpp"

namespace cr::jit {

enum class Source : uint8_t { Memory, Disk, Built };

// The artifact of `u` for backend `b` (cache_dir "" or "0": no disk cache); *from says where it
// came from. Throws Error when the build fails.
Artifact cached_artifact(const Backend& b, const Unit& u, const std::string& cache_dir, Source* from);

// This build of crescent (the file holding this code, its size and modification time): part of
// every key, so that a rebuild never loads a stale entry.
std::string build_id();

// Counts a library kernel found among the build's CUBINs (CacheStats::prebuilt).
void count_prebuilt();

}  // namespace cr::jit
