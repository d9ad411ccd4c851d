// NVRTC through dlopen (see nvrtc.hpp). The declarations below are NVRTC's C ABI as nvrtc.h has
// it since CUDA 11.1 (nvrtcGetCUBIN appeared there); the library's handle is never closed, so the
// function pointers stay valid for the life of the process.
#include "vm/cuda/nvrtc.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <vector>

#include "vm/cuda/dl.hpp"
#include "vm/config.hpp"
#include "vm/error.hpp"

namespace cr::cuda {

namespace {

using nvrtcResult = int;  // NVRTC_SUCCESS = 0
using nvrtcProgram = struct _nvrtcProgram*;

struct Nvrtc {
  const char* (*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int*, int*);
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  nvrtcResult (*DestroyProgram)(nvrtcProgram*);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*);
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetPTX)(nvrtcProgram, char*);
};

struct Loaded {
  Nvrtc fn{};
  bool ok = false, minimal = false;
  std::string why, version;
};

// Library names in the order tried: the loader's search path first, then the CUDA install.
std::vector<std::string> candidates() {
  std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> dirs;
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) dirs.push_back(cat(home, "/lib64"));
  dirs.push_back("/usr/local/cuda/lib64");
  std::vector<std::string> all = names;
  for (const std::string& d : dirs)
    for (const std::string& n : names) all.push_back(cat(d, "/", n));
  return all;
}

template <class F> bool resolve(void* lib, const char* name, F*& out, std::string* why) {
  out = reinterpret_cast<F*>(dlsym(lib, name));
  if (!out) *why = cat("the NVRTC library lacks ", name, " (NVRTC older than CUDA 11.1?)");
  return out != nullptr;
}

void load(Loaded& l) {
  std::string tried;
  void* lib = open_first(candidates(), &tried);
  if (!lib) {
    l.why = cat("cannot load NVRTC (tried ", tried, ")");
    return;
  }
  Nvrtc& f = l.fn;
  bool ok = resolve(lib, "nvrtcGetErrorString", f.GetErrorString, &l.why) && resolve(lib, "nvrtcVersion", f.Version, &l.why) &&
            resolve(lib, "nvrtcCreateProgram", f.CreateProgram, &l.why) && resolve(lib, "nvrtcDestroyProgram", f.DestroyProgram, &l.why) &&
            resolve(lib, "nvrtcCompileProgram", f.CompileProgram, &l.why) &&
            resolve(lib, "nvrtcGetProgramLogSize", f.GetProgramLogSize, &l.why) &&
            resolve(lib, "nvrtcGetProgramLog", f.GetProgramLog, &l.why) && resolve(lib, "nvrtcGetCUBINSize", f.GetCUBINSize, &l.why) &&
            resolve(lib, "nvrtcGetCUBIN", f.GetCUBIN, &l.why) &&
            resolve(lib, "nvrtcGetPTXSize", f.GetPTXSize, &l.why) && resolve(lib, "nvrtcGetPTX", f.GetPTX, &l.why);
  if (!ok) return;
  int major = 0, minor = 0;
  if (f.Version(&major, &minor) != 0) {
    l.why = "nvrtcVersion failed";
    return;
  }
  l.version = cat("nvrtc ", major, ".", minor);
  l.minimal = major > 12 || (major == 12 && minor >= 4);
  l.ok = true;
}

const Loaded& loaded() {
  static Loaded l;
  static std::once_flag once;
  std::call_once(once, [] { load(l); });
  return l;
}

std::string program_log(const Nvrtc& f, nvrtcProgram p) {
  size_t n = 0;
  if (f.GetProgramLogSize(p, &n) != 0 || n <= 1) return "";
  std::string log(n, '\0');
  if (f.GetProgramLog(p, log.data()) != 0) return "";
  log.resize(n - 1);  // (the size counts the terminating NUL)
  return log;
}

}  // namespace

bool nvrtc_available(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why) *why = l.why;
  return l.ok;
}

std::string nvrtc_version() { return loaded().version; }

// CRESCENT_NVRTC_OPTIONS: more NVRTC options, split at spaces (e.g. "-lineinfo" for profilers).
// Read at each compile (a compile costs tens of ms; tests set it); part of the cache key.
static std::vector<std::string> extra_options() {
  std::vector<std::string> v;
  const char* env = env_setting(Setting::NvrtcOptions);
  std::istringstream in(env ? env : "");
  for (std::string w; in >> w;) v.push_back(w);
  return v;
}

std::string nvrtc_options() {
  std::string s;
  for (const std::string& o : extra_options()) s += cat(s.empty() ? "" : " ", o);
  return s;
}

namespace {

// CUBIN for a real architecture (sm_90), PTX text for a virtual one (compute_90).
std::string compile(const std::string& source, const std::string& name, const std::string& arch, std::string* log,
                    bool ptx) {
  const Loaded& l = loaded();
  if (!l.ok) throw Error(cat("NVRTC is not available: ", l.why));
  const Nvrtc& f = l.fn;
  nvrtcProgram p = nullptr;
  if (nvrtcResult r = f.CreateProgram(&p, source.c_str(), name.c_str(), 0, nullptr, nullptr); r != 0)
    throw Error(cat("nvrtcCreateProgram: ", f.GetErrorString(r)));
  struct Destroy {
    const Nvrtc& f;
    nvrtcProgram& p;
    ~Destroy() { f.DestroyProgram(&p); }
  } destroy{f, p};
  std::string gpu = cat("--gpu-architecture=", arch);
  // -default-device: functions without __device__ / __global__ are device functions (the prelude).
  // -minimal (NVRTC 12.4 on) leaves out the texture / device-runtime declarations the kernels
  // never use, a fifth of an empty program's compile time.
  std::vector<const char*> opts = {gpu.c_str(), "-default-device", "--std=c++17"};
  if (l.minimal) opts.push_back("-minimal");
  const std::vector<std::string> extra = extra_options();
  for (const std::string& o : extra) opts.push_back(o.c_str());
  nvrtcResult r = f.CompileProgram(p, int(opts.size()), opts.data());
  if (r != 0) throw Error(cat("NVRTC (", arch, ") failed to compile ", name, ": ", f.GetErrorString(r), "\n", program_log(f, p)));
  if (log) *log = program_log(f, p);
  size_t n = 0;
  const char* what = ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN";
  if ((r = (ptx ? f.GetPTXSize : f.GetCUBINSize)(p, &n)) != 0) throw Error(cat(what, "Size: ", f.GetErrorString(r)));
  std::string code(n, '\0');
  if ((r = (ptx ? f.GetPTX : f.GetCUBIN)(p, code.data())) != 0) throw Error(cat(what, ": ", f.GetErrorString(r)));
  if (ptx && !code.empty() && code.back() == '\0') code.pop_back();
  return code;
}

}  // namespace

std::string compile_cubin(const std::string& source, const std::string& name, const std::string& arch, std::string* log) {
  return compile(source, name, arch, log, false);
}

std::string compile_ptx(const std::string& source, const std::string& name, const std::string& arch) {
  return compile(source, name, arch, nullptr, true);
}

}  // namespace cr::cuda
