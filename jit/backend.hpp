// The backend interface (Inductor's register_backend_for_device, tinygrad's device / renderer
// split): one Backend per kind of device, registered in the table of backend.cpp. The compile
// pipeline (driver.cpp) and the kernel cache (kernel_cache.hpp) reach a backend only through it:
// its schedule target, its emitter (code and cache key), its build (code -> an entry's bytes),
// its load (entry -> artifact) and its program (plan + artifact -> an Executable).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jit/fusion/schedule.hpp"
#include "jit/jit.hpp"

namespace cr::jit {

// What a backend loads from a cache entry (a shared object's handle, a CUBIN's bytes); the kernel
// cache keeps it by key.
using Artifact = std::shared_ptr<void>;

// Code emitted by one backend on its way to the kernel cache; each backend derives its own.
struct Unit {
  virtual ~Unit() = default;
  std::string key;        // SHA-256 of every byte the compiled code depends on (code, compiler, build)
  std::string name;       // the graph's (or library kernel's) name
  std::string text;       // the readable code (CRESCENT_LOGS=output_code)
  std::vector<std::pair<std::string, std::string>> dumps;  // CRESCENT_DEBUG_DIR files: suffix, text
  std::string dump_base;  // set by the driver with CRESCENT_DEBUG_DIR: where build may dump too
  size_t functions = 0;   // distinct kernel functions (kernels of the same code share one)
};

struct Backend {
  const char* name;  // "cpu", "cuda"
  const char* ext;   // its disk cache entries are "<key><ext>"
  bool keep;         // the memory cache holds its artifacts for the process (else while used)
  int64_t CacheStats::*compiled_stat;  // its own share of CacheStats::compiled (null: none)
  bool (*available)(std::string* why);
  ScheduleTarget (*target)(const Options& o);
  std::unique_ptr<Unit> (*emit)(const Plan& plan, const std::string& name, const Options& o);
  // Compiles `u` into the file `out`; throws Error with the compiler's message.
  void (*build)(const Unit& u, const std::string& out);
  // The entry at `path`, whose bytes (without the seal) are `body`; throws Error if it cannot load.
  Artifact (*load)(const std::string& path, const std::string& body);
  std::shared_ptr<const graph::Executable> (*program)(Plan plan, Unit& u, const Artifact& a, const Options& o);
};

// The backend of device `d`'s kind.
const Backend& backend_for(Device d);

// What a compile asks of CRESCENT_JIT_FAIL (tests of the fallback): "crash" / "hang" for a
// compiler process when `isolated`; any other value but "0" throws the injected failure.
enum class Injected : uint8_t { None, Crash, Hang };
Injected injected_failure(bool isolated);

}  // namespace cr::jit
