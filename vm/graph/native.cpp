// The recorder's side of native code generation: which graphs go to a native backend, and
// running them through their NativeSlot (jit/jit.hpp, through Hooks::compile_native). The compile's outcome is counted once,
// on the Lua thread, the first time the graph runs after it is known (the compile itself may
// have happened on the background thread).
#include "vm/graph/recorder.hpp"
#include "vm/fixed.hpp"
#include "vm/hooks.hpp"
#include "vm/threads.hpp"

namespace cr::graph {

namespace {

// The one device of all the graph's values; false when they are on several (those graphs run
// on the eager kernels).
bool one_device(const Graph& g, Device* d) {
  if (g.values.empty()) return false;
  *d = g.values.front().meta.device;
  for (const Value& v : g.values)
    if (!(v.meta.device == *d)) return false;
  return true;
}

}  // namespace

void Recorder::start_native(const std::shared_ptr<Graph>& g, const std::string& backend, bool tune) {
  if (backend == "eager" || backend == "aot_eager" || g->op_count() == 0) return;
  Device device;
  if (!one_device(*g, &device)) return;
  std::string why;
  const bool cuda = !device.is_cpu();
  if (!hooks().backend_available(cuda, &why)) {
    static bool told[2] = {false, false};  // once per process and kind: every graph would say the same
    ++stats.eager_fallbacks;
    if (!told[cuda]) log("graph", cat("native ", cuda ? "CUDA" : "CPU", " code is not available (", why, "): compiled graphs run on the eager kernels"));
    told[cuda] = true;
    return;
  }
  NativeOptions o;
  o.cache_dir = cache_dir;
  o.debug_dir = debug_dir;
  o.sync = sync_compile;
  o.log_fusion = logs.fusion;
  o.log_code = logs.output_code;
  o.log_progress = logs.progress;
  o.log_perf = logs.perf;
  o.threads = num_threads();
  o.autotune = tune || autotune;
  o.autotune_budget_ms = autotune_budget_ms;
  o.log_autotune = logs.autotune;
  o.device = device;
  o.owner = this;
  hooks().compile_native(g, o);
}

void Recorder::execute(const Graph& g, std::vector<Tensor>& vals, const double* numbers,
                       const std::vector<char>* unheld) {
  if (g.native) {
    NativeSlot& s = *g.native;
    std::unique_lock<std::mutex> lock(s.mutex);
    if (s.done && !s.seen) {
      s.seen = true;
      stats.compile_ms += s.compile_ms;
      for (const std::string& l : s.log) log(l.substr(0, l.find(':')), l.substr(l.find(':') + 2));
      if (!s.error.empty()) {
        ++stats.eager_fallbacks;
        log("graph", cat("compiling ", g.name, " failed (", s.error, "): it stays on the eager kernels"));
      } else if (s.exe) {
        stats.kernels_compiled += s.kernels;
        stats.kernels_loaded += s.kernels_loaded;
        if (g.reinstance && s.kernels > 0) ++stats.graphs_compiled;  // a new structure of a dynamic graph
        stats.disk_cache_hits += s.disk_hit ? 1 : 0;
        if (logs.perf) log("perf", cat(g.name, ": native code in ", fixed(s.compile_ms), " ms (", s.kernels, " kernels compiled", s.disk_hit ? ", from the disk cache" : "", "; ", s.phases, ")"));
      }
    }
  }
  run_graph(g, ctx_, vals, numbers, unheld);
}

}  // namespace cr::graph
