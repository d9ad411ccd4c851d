#include "jit/cpu/gccjit.hpp"

#include <mutex>

#if CRESCENT_HAVE_GCCJIT
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>
#endif

namespace cr::jit::cpu {

#if CRESCENT_HAVE_GCCJIT

namespace {

struct Loaded {
  GccJit table;
  bool ok = false;
  std::string why;
};

// Whether `exe` is an executable file in a directory of $PATH (execvp's default when unset).
bool on_path(const char* exe) {
  const char* env = std::getenv("PATH");
  std::string_view path = env ? env : "/bin:/usr/bin";
  while (true) {
    const size_t colon = path.find(':');
    std::string_view dir = path.substr(0, colon);
    if (dir.empty()) dir = ".";
    char file[4096];
    const int n = std::snprintf(file, sizeof file, "%.*s/%s", int(dir.size()), dir.data(), exe);
    if (n > 0 && size_t(n) < sizeof file && access(file, X_OK) == 0) return true;
    if (colon == std::string_view::npos) return false;
    path.remove_prefix(colon + 1);
  }
}

void load(Loaded& l) {
  // libgccjit's embedded gcc driver runs the binutils `as` and `ld` (through collect2) as child
  // processes, both for gcc_jit_context_compile and _compile_to_file. When it cannot execute
  // one it reports a *fatal* driver error and calls exit(1), taking the whole process down
  // instead of failing the compile. So a host without them counts as having no usable libgccjit.
  // (Contexts with gcc_jit_context_set_bool_use_external_driver(ctxt, 1) run the system gcc
  // instead and fail softly, "error invoking gcc driver: execvp", at a cost to every compile.)
  for (const char* tool : {"as", "ld"}) {
    if (!on_path(tool)) {
      // (appends, not operator+: GCC 12 -O2 warns a false -Wrestrict on string concatenation)
      l.why = "libgccjit needs the binutils program `";
      l.why += tool;
      l.why += "` on PATH to assemble and link (not found)";
      return;
    }
  }

  // RTLD_LOCAL: libgccjit's (many) symbols stay out of the global namespace; the handle is
  // never closed, so the function pointers stay valid for the life of the process.
  void* lib = dlopen("libgccjit.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    l.why = "cannot load libgccjit.so.0: ";
    l.why += e ? e : "unknown dlopen error";
    return;
  }
  // Each symbol is cast to the declared type of its gcc_jit_ function, so a prototype change
  // in the header is a compile error here rather than a silent ABI mismatch.
#define CRESCENT_GCCJIT_RESOLVE(name)                                                            \
  if (void* sym = dlsym(lib, "gcc_jit_" #name)) {                                                \
    l.table.name = reinterpret_cast<decltype(&gcc_jit_##name)>(sym);                             \
  } else {                                                                                       \
    l.why = "libgccjit.so.0 lacks gcc_jit_" #name " (libgccjit too old?)";                      \
    return;                                                                                      \
  }
  CRESCENT_GCCJIT_FUNCTIONS(CRESCENT_GCCJIT_RESOLVE)
#undef CRESCENT_GCCJIT_RESOLVE
  l.ok = true;
}

}  // namespace

const GccJit* gccjit(std::string* why) {
  static Loaded loaded;
  static std::once_flag once;
  std::call_once(once, [] { load(loaded); });
  if (!loaded.ok) {
    if (why) *why = loaded.why;
    return nullptr;
  }
  return &loaded.table;
}

#else

const GccJit* gccjit(std::string* why) {
  if (why) *why = "built without libgccjit headers";
  return nullptr;
}

#endif

}  // namespace cr::jit::cpu
