// Private temporary directories of native compiles, `<tmp>/crescent-jit-<pid>-XXXXXX` ($TMPDIR or
// /tmp; <pid> the process that made it): a compiled object on its way to dlopen() or to the disk
// cache, and a compiler process's temporary files (libgccjit's own `libgccjit-XXXXXX`). Each is
// removed with what it holds on every path; those of a process that ended without removing them
// (killed in a compile) are removed by the next process that makes one.
#pragma once
#include <string>

namespace cr::jit {

// A new directory (the first one of a process sweeps the stale ones first); throws Error.
std::string make_scratch_dir();
// Removes `dir` and what it holds (errors are ignored).
void remove_scratch_dir(const std::string& dir);

// Removes the scratch directories under `root` that belong to this user, whose process is gone
// and that nothing changed for `min_age_s` seconds (the age spares a process of another pid
// namespace that shares the directory). Returns how many it removed.
int sweep_scratch_dirs(const std::string& root, long min_age_s);
// $TMPDIR, or /tmp.
std::string temp_root();

// A scratch directory for one scope.
class ScratchDir {
 public:
  ScratchDir() : path(make_scratch_dir()) {}
  ~ScratchDir() { remove_scratch_dir(path); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string path;
};

}  // namespace cr::jit
