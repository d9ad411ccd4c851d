// The compile driver: lowering, scheduling, the kernel cache (memory, then disk), code
// generation (jit/compiler_process.hpp), in line or on the background thread (jit/background.hpp).
//
// Cache key: the SHA-256 of the kernels' full rendering (every expression, address, dtype
// and constant), the function table, kBlock, the compiler and its flags (compiler_id) and this
// build of crescent. Kernels are compiled into a scratch directory (jit/scratch.hpp); disk entries
// are `<cache_dir>/<key>.so`, sealed (jit/cache_entry.hpp), written under a unique temporary name
// and renamed into place, so a concurrent process sees a whole entry or none; an entry that fails
// its check before dlopen() is discarded and recompiled. A cache directory that cannot take an
// entry (read-only, full) still gives its entries; the compiled object is then loaded from the
// scratch directory.
#include "jit/jit.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>

#include "jit/autotune.hpp"
#include "jit/background.hpp"
#include "jit/cache_entry.hpp"
#include "jit/compiler_process.hpp"
#include "jit/disk_cache.hpp"
#include "jit/dot.hpp"
#include "jit/cpu/gccjit.hpp"
#include "jit/cpu/helpers.hpp"
#include "jit/cpu/program.hpp"
#include "vm/config.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/nvrtc.hpp"
#include "vm/cuda/prebuilt.hpp"
#include "jit/cuda/program.hpp"
#include "jit/fusion/schedule.hpp"
#include "jit/progress.hpp"
#include "jit/scratch.hpp"
#include "vm/env.hpp"
#include "vm/fixed.hpp"

namespace cr::jit {

// This build of crescent: the file holding this code (executable or shared library), its size
// and modification time. Any rebuild changes the key, so a stale entry is never loaded.
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

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- the kernel cache ------------------------------------------------------------------------

std::mutex cache_mutex;
// entries live as long as a compiled graph uses them (then the shared object is unloaded)
std::map<std::string, std::weak_ptr<cpu::SharedObject>> memory_cache;
CacheStats counters;

std::shared_ptr<cpu::SharedObject> load(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw Error(cat("cannot load compiled kernels ", path, ": ", dlerror()));
  auto so = std::make_shared<cpu::SharedObject>();
  so->handle = h;
  return so;
}

// CRESCENT_JIT_FORK=0 compiles in process (no crash or leak isolation; one compile at a time);
// otherwise in a compiler process (jit/compiler_process.hpp).
bool isolate_compiles() {
  return env_number(kEnvJitFork) != 0;
}

// CRESCENT_JIT_FAIL (tests of the fallback): "crash" / "hang" make the compiler process do so,
// any other value but "0" fails the compile before it starts.
Injected injected_failure() {
  const char* v = env_setting(Setting::JitFail);
  if (!v || !*v || std::strcmp(v, "0") == 0) return Injected::None;
  if (isolate_compiles() && std::strcmp(v, "crash") == 0) return Injected::Crash;
  if (isolate_compiles() && std::strcmp(v, "hang") == 0) return Injected::Hang;
  throw Error("injected compile failure (CRESCENT_JIT_FAIL)");
}

void compile_to(const Plan& plan, const cpu::FnTable& fns, const std::string& so_path, const std::string& dump, int64_t block) {
  const Injected injected = injected_failure();
  if (isolate_compiles()) compile_in_compiler_process(plan, fns, so_path, dump, injected, block);
  else cpu::compile_plan(plan, fns, so_path, dump, block);
}

struct Built {
  std::shared_ptr<cpu::SharedObject> so;
  bool disk_hit = false, memory_hit = false;
};

// A disk entry that passes its check and loads; otherwise (damaged, truncated, another key's
// object, or dlopen() refuses it) it is removed, counted and left for the caller to recompile.
Built load_entry(const std::string& path, const std::string& key) {
  Built b;
  std::string why;
  if (check_entry(path, key, &why)) {
    try {
      b.so = load(path);
      b.disk_hit = true;
      touch_entry(path);
      return b;
    } catch (const Error& e) {
      why = e.what();
    }
  }
  std::remove(path.c_str());
  std::lock_guard<std::mutex> lock(cache_mutex);
  ++counters.rejected;
  counters.last_rejection = cat(path, " ", why);
  return b;
}

// `bytes` as the entry `name` of the cache directory `dir`, then the directory back within its
// bound (jit/disk_cache.hpp); false when the cache cannot take it.
bool publish_in(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (bytes.empty()) return false;
  if (!publish_file(cat(dir, "/", name), bytes)) {
    warn_unwritable(dir, ec ? ec.message() : std::strerror(errno));
    return false;
  }
  const int64_t evicted = evict_entries(dir, name);
  std::lock_guard<std::mutex> lock(cache_mutex);
  counters.evicted += evicted;
  return true;
}

// The compiled object at `so` (in a scratch directory) as the disk entry for `key`.
bool publish_entry(const std::string& so, const std::string& dir, const std::string& key) {
  seal_entry(so, key);
  return publish_in(dir, key + ".so", read_file(so));
}

Built build_or_load(const Plan& plan, const cpu::FnTable& fns, const std::string& key, const Options& o, const std::string& dump,
                    int64_t block) {
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = memory_cache.find(key);
    if (it != memory_cache.end()) {
      if (auto so = it->second.lock()) {
        ++counters.memory_hits;
        return {so, false, true};
      }
      memory_cache.erase(it);
    }
  }
  Built b;
  const bool disk = !o.cache_dir.empty() && o.cache_dir != "0";
  const std::string path = disk ? cat(o.cache_dir, "/", key, ".so") : std::string();
  if (disk && ::access(path.c_str(), R_OK) == 0) b = load_entry(path, key);
  if (!b.so) {
    ScratchDir scratch;  // removed on every path
    const std::string so = scratch.path + "/kernels.so";
    compile_to(plan, fns, so, dump, block);
    const bool published = disk && publish_entry(so, o.cache_dir, key);
    try {
      b.so = load(published ? path : so);
    } catch (const Error&) {  // (another process's eviction may remove the entry first)
      if (!published) throw;
      b.so = load(so);
    }
    std::lock_guard<std::mutex> lock(cache_mutex);
    ++counters.compiled;
    counters.unpublished += disk && !published ? 1 : 0;
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (b.disk_hit) ++counters.disk_hits;
  memory_cache[key] = b.so;
  return b;
}

// The kernel cache's key of the plan's CPU code with `block`; `code` gets the kernels' text.
std::string cpu_key(const Plan& plan, const cpu::FnTable& fns, int64_t block, std::string* code) {
  for (size_t i = 0; i < plan.kernels.size(); ++i) *code += plan.code(i).str(kBlock);
  std::string key_text = cat(*code, "\nfns:");
  for (const std::string& n : fns.names) key_text += cat(n, ",");
  key_text += cat("\n", cpu::compiler_id(), " block ", block, " build ", build_id());
  return sha256_hex(key_text);
}

// ---- one compilation ---------------------------------------------------------------------------

void write_file(const std::string& path, const std::string& text);

// CUDA modules: the CUBIN by key, in memory and on disk as `<cache_dir>/<key>.cubin` (written
// under a temporary name and renamed into place, as the CPU's shared objects).
std::map<std::string, std::shared_ptr<const std::string>> cubin_cache;

std::string cubin_key(const std::string& source, const std::string& arch) {
  return sha256_hex(cat(source, "\n", arch, " ", cr::cuda::nvrtc_version(), " ", cr::cuda::nvrtc_options(), " build ", build_id()));
}

std::shared_ptr<const std::string> cubin_for(const std::string& source, const std::string& arch, const std::string& name,
                                             const std::string& key, const Options& o, bool* disk_hit, bool* memory_hit) {
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (auto it = cubin_cache.find(key); it != cubin_cache.end()) {
      ++counters.memory_hits;
      *memory_hit = true;
      return it->second;
    }
  }
  const bool disk = !o.cache_dir.empty() && o.cache_dir != "0";
  const std::string path = cat(o.cache_dir, "/", key, ".cubin");
  std::shared_ptr<const std::string> bin;
  if (disk && ::access(path.c_str(), R_OK) == 0) {
    std::string b = read_file(path);
    if (b.size() > 4 && b.compare(0, 4, "\x7f" "ELF") == 0) bin = std::make_shared<const std::string>(std::move(b));
    *disk_hit = bin != nullptr;  // a damaged entry (not ELF) is compiled again
    if (*disk_hit) touch_entry(path);
  }
  if (!bin) {
    if (const char* inject = env_setting(Setting::JitFail); inject && *inject && *inject != '0')
      throw Error("injected compile failure (CRESCENT_JIT_FAIL)");
    bin = std::make_shared<const std::string>(cr::cuda::compile_cubin(source, name, arch));
    if (disk) publish_in(o.cache_dir, key + ".cubin", *bin);  // (a cache that cannot take it costs a compile next time)
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (*disk_hit) {
    ++counters.disk_hits;
  } else {
    ++counters.compiled;
    ++counters.cuda_compiled;
  }
  cubin_cache[key] = bin;
  return bin;
}

// A CUDA graph's program: emission, the CUBIN (cached), the loaded module; `phases` gets each
// one's time.
std::shared_ptr<const graph::Executable> cuda_program(Plan plan, const graph::Graph& g, const Options& o,
                                                      std::vector<std::string>& log, bool* disk_hit, bool* cached,
                                                      std::string* phases) {
  const double t0 = now_ms();
  jit::cuda::CudaModule m = jit::cuda::emit_plan(plan, jit::cuda::target_of(o.device.index));
  const double t_emit = now_ms();
  const std::string key = cubin_key(m.source, m.arch);
  if (o.log_code) log.push_back(cat("output_code: ", g.name, " (key ", key, ")\n", jit::cuda::render(m)));
  if (!o.debug_dir.empty()) {  // the readable rendering, and the exact source NVRTC compiles (prelude included)
    write_file(cat(o.debug_dir, "/", key.substr(0, 8), ".cu"), jit::cuda::render(m));
    write_file(cat(o.debug_dir, "/", key.substr(0, 8), ".full.cu"), m.source);
  }
  bool memory_hit = false;
  std::shared_ptr<const std::string> bin = cubin_for(m.source, m.arch, g.name, key, o, disk_hit, &memory_hit);
  *cached = *disk_hit || memory_hit;
  const double t_bin = now_ms();
  auto p = std::make_shared<jit::cuda::Program>(std::move(plan), std::move(m), key, *bin, o.device);
  *phases = cat("emit ", fixed(t_emit - t0), " ms, ", *cached ? "CUBIN from the cache " : "NVRTC ", fixed(t_bin - t_emit),
                " ms, module load ", fixed(now_ms() - t_bin), " ms");
  return p;
}



void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

// The loop graph of g; with `whole` (Options::whole_graph), a graph that lowers only in part,
// or not at all, sets *unlowered instead of compiling with externs or failing.
LoopGraph lower_whole(const graph::Graph& g, bool whole, bool* unlowered) {
  if (!whole) return lower(g);
  try {
    LoopGraph lg = lower(g);
    *unlowered = !lg.notes.empty();
    return lg;
  } catch (const Error&) {
    *unlowered = true;
    return LoopGraph{};
  }
}

// CRESCENT_DEBUG_DIR's files of graph `name`: "<dir>/<name, as a file name>-<key's start>".
std::string debug_base(const Options& o, const std::string& name, const std::string& key) {
  std::error_code ec;
  std::filesystem::create_directories(o.debug_dir, ec);
  std::string safe = name;
  for (char& ch : safe)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '.') ch = '_';
  return cat(o.debug_dir, "/", safe, "-", key.substr(0, 8));
}

void finish_unlowered(graph::NativeSlot& slot) {
  std::lock_guard<std::mutex> lock(slot.mutex);
  slot.done = true;
  slot.unlowered = true;
}

void compile_now(const std::shared_ptr<graph::Graph>& g, const Options& o, graph::NativeSlot& slot) {
  double t0 = now_ms();
  std::vector<std::string> log;
  std::shared_ptr<const graph::Executable> exe;
  int nkernels = 0, nloaded = 0;
  bool disk_hit = false;
  std::string error, dump_base, code_phases;
  double t_lower = 0, t_sched = 0, t_code = 0;
  bool unlowered = false;
  ProgressNote note(g->name, device_name(o.device), o.log_progress);
  try {
    LoopGraph lg = lower_whole(*g, o.whole_graph, &unlowered);
    if (unlowered) return finish_unlowered(slot);
    t_lower = now_ms();
    note.phase("scheduling");
    std::string lg_text = o.debug_dir.empty() ? std::string() : lg.str();
    Plan plan = schedule(std::move(lg), o.device.is_cpu() ? cpu::schedule_target(o.threads) : jit::cuda::schedule_target(o.threads));
    if (g->dynamic)  // size-generic code: compiled from the templates, launched with the params
      for (const Kernel& k : plan.kernels) {
        plan.templates.push_back(k);
        plan.params.push_back(parametrize(plan.templates.back()));
      }
    t_sched = now_ms();
    if (o.log_fusion)
      for (const std::string& l : plan.log) log.push_back(cat("fusion: ", g->name, ": ", l));
    nkernels = int(plan.kernels.size());
    note.kernels(nkernels);
    if (!o.debug_dir.empty()) {  // (named by its own hash: the kernels' key comes later)
      const std::string dot = plan_dot(*g, plan);
      write_dot(debug_base(o, g->name, sha256_hex(dot)), dot);
    }
    note.phase("code generation");
    if (!o.device.is_cpu() && !plan.kernels.empty()) {
      if (o.autotune) autotune_cuda_untuned();
      bool cached = false;
      exe = cuda_program(std::move(plan), *g, o, log, &disk_hit, &cached, &code_phases);
      if (cached) std::swap(nkernels, nloaded);
      note.done(nkernels + nloaded);
      t_code = now_ms();
    } else if (!plan.kernels.empty()) {
      cpu::FnTable fns;
      cpu::collect_fns(plan, fns);
      std::string code;
      const std::string key = cpu_key(plan, fns, kBlock, &code);
      if (o.log_code) log.push_back(cat("output_code: ", g->name, " (key ", key, ")\n", code));
      if (!o.debug_dir.empty()) {
        dump_base = debug_base(o, g->name, key);
        std::string fusion;
        for (const std::string& l : plan.log) fusion += l + "\n";
        write_file(dump_base + ".loops.txt", lg_text);
        write_file(dump_base + ".fusion.txt", fusion);
        write_file(dump_base + ".kernels.c", code);
      }
      Built b = build_or_load(plan, fns, key, o, dump_base.empty() ? "" : dump_base + ".gccjit.c", kBlock);
      disk_hit = b.disk_hit;
      if (b.memory_hit || b.disk_hit) std::swap(nkernels, nloaded);  // nothing was compiled
      note.done(nkernels + nloaded);
      t_code = now_ms();
      auto program = std::make_shared<cpu::Program>(std::move(plan), std::move(fns), b.so);
      if (o.autotune) autotune_cpu(g, program, o);
      exe = program;
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  double ms = now_ms() - t0;
  if (!dump_base.empty())
    write_file(dump_base + ".timings.txt", cat("lower ", fixed(t_lower - t0), " ms\nschedule ", fixed(t_sched - t_lower),
                                               " ms\ncode + cache ", fixed(t_code > 0 ? t_code - t_sched : 0.0), " ms\ntotal ",
                                               fixed(ms), " ms\n",
                                               disk_hit ? "from the disk cache\n" : "", error.empty() ? "" : cat("error: ", error, "\n")));
  std::lock_guard<std::mutex> lock(slot.mutex);
  slot.done = true;
  slot.exe = exe;
  slot.error = error;
  slot.kernels = nkernels;
  slot.kernels_loaded = nloaded;
  slot.disk_hit = disk_hit;
  slot.compile_ms = ms;
  slot.phases = cat("lower ", fixed(t_lower - t0), " ms, schedule ", fixed(t_sched - t_lower), " ms",
                    code_phases.empty() ? "" : cat(", ", code_phases));
  slot.log = std::move(log);
}

}  // namespace

std::string cuda_cubin(const std::string& source, const std::string& name, const std::string& arch,
                       const std::string& cache_dir) {
  // library kernels: the build may have compiled this one (vm/cuda/prebuilt.hpp)
  if (const cr::cuda::PrebuiltCubin* p = cr::cuda::find_prebuilt(source, arch)) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    ++counters.prebuilt;
    return std::string(reinterpret_cast<const char*>(p->data), p->size);
  }
  Options o;
  o.cache_dir = cache_dir;
  bool disk_hit = false, memory_hit = false;
  return *cubin_for(source, arch, name, cubin_key(source, arch), o, &disk_hit, &memory_hit);
}

std::shared_ptr<cpu::SharedObject> cpu_kernels(const Plan& plan, const cpu::FnTable& fns, int64_t block, const Options& o) {
  std::string code;
  return build_or_load(plan, fns, cpu_key(plan, fns, block, &code), o, "", block).so;
}

bool cpu_backend_available(std::string* why) { return cpu::gccjit(why) != nullptr; }

bool cuda_backend_available(std::string* why) {
  if (!cr::cuda::driver(why)) return false;
  return cr::cuda::nvrtc_available(why);
}

CacheStats cache_stats() {
  std::lock_guard<std::mutex> lock(cache_mutex);
  return counters;
}

void compile_native(const std::shared_ptr<graph::Graph>& g, const Options& o) {
  auto slot = std::make_shared<graph::NativeSlot>();
  g->native = slot;
  if (o.sync) {
    compile_now(g, o, *slot);
    return;
  }
  // the job holds the graph weakly (a dropped function's compile is skipped); it is only read
  submit_background({g, slot, o.owner, [o, slot](const std::shared_ptr<graph::Graph>& live) { compile_now(live, o, *slot); }});
}

}  // namespace cr::jit
