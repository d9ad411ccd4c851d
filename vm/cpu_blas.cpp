#include "vm/cpu_blas.hpp"

#include <dirent.h>
#include <dlfcn.h>

#include <cstdlib>

#include "vm/cpu_march.hpp"
#include "vm/error.hpp"

namespace cr {

const char* openblas_core_for(bool avx512, bool avx2_fma, int cap_bytes) {
  if (avx512 && (cap_bytes == 0 || cap_bytes >= 64)) return "SkylakeX";
  if (avx2_fma && (cap_bytes == 0 || cap_bytes >= 32)) return "Haswell";
  return nullptr;
}

namespace {

struct Loaded {
  Cblas blas;
  std::string why;  // why it is not there
};

template <class F> bool resolve(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  return f != nullptr;
}

// Whether the process has one thread (/proc/self/task lists them): a host program that loads
// libcrescent.so may have more, and setenv is not safe beside them.
bool single_threaded() {
  DIR* d = opendir("/proc/self/task");
  if (!d) return false;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n == 1;
}

Loaded load() {
  Loaded L;
  // Set only while OpenBLAS loads (its constructor reads it): the program's environment stays the
  // user's. Left alone where OpenBLAS is loaded already or other threads could read the environment.
  const char* core = nullptr;
  L.blas.user_core = std::getenv("OPENBLAS_CORETYPE") != nullptr;
  void* already = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_NOLOAD);
  if (already) dlclose(already);
  if (!L.blas.user_core && !already && single_threaded()) {
    core = openblas_core_for(cpu_has_avx512(), cpu_has_avx2_fma(), march_vector_bytes(cpu_march_override()));
    if (core) setenv("OPENBLAS_CORETYPE", core, 1);
    L.blas.named = core != nullptr;
  }
  void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
  if (core) unsetenv("OPENBLAS_CORETYPE");
  if (!lib) {
    const char* e = dlerror();
    L.why = std::string("libopenblas.so.0 could not be loaded") + (e ? std::string(": ") + e : "");
    return L;
  }
  Cblas& b = L.blas;
  void (*threads)(int) = nullptr;
  char* (*corename)() = nullptr;
  bool all = resolve(lib, "cblas_sgemm", b.sgemm) && resolve(lib, "cblas_dgemm", b.dgemm) &&
             resolve(lib, "cblas_sgemv", b.sgemv) && resolve(lib, "cblas_dgemv", b.dgemv);
  if (!all || !resolve(lib, "openblas_set_num_threads", threads)) {
    L.why = "libopenblas.so.0 lacks the CBLAS products or openblas_set_num_threads";
    b.sgemm = nullptr;
    return L;
  }
  // One pool in the process: OpenBLAS's own workers spin (sched_yield) between calls, and on a
  // machine with as many threads as cores they took the cores from ours.
  threads(1);
  if (resolve(lib, "openblas_get_corename", corename) && corename()) b.core = corename();
  return L;
}

const Loaded& loaded() {
  static const Loaded L = load();
  return L;
}

// Loaded as the program starts, single-threaded (setenv is not safe beside other threads).
__attribute__((constructor)) void load_at_start() { loaded(); }

}  // namespace

const Cblas& cblas(const char* op) {
  const Loaded& L = loaded();
  if (!L.blas.sgemm) fail(std::string(op) + ": float32 / float64 products on the CPU need OpenBLAS; " + L.why);
  return L.blas;
}

}  // namespace cr
