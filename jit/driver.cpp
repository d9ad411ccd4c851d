// The compile pipeline (DESIGN.md "Execution model", step 5), as Halide's Lower.cpp: a graph
// passes a list of named phases (lower -> schedule -> emit -> build -> load), run by one loop that
// times each and, with CRESCENT_LOGS=perf, logs what it made. The device's backend
// (jit/backend.hpp) emits, builds and loads; the kernel cache (jit/kernel_cache.hpp) serves or
// builds the artifact. In line, or on the background compile thread (jit/background.hpp).
#include "jit/jit.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <utility>

#include "jit/autotune.hpp"
#include "jit/background.hpp"
#include "jit/backend.hpp"
#include "jit/dot.hpp"
#include "jit/fusion/schedule.hpp"
#include "jit/kernel_cache.hpp"
#include "jit/progress.hpp"
#include "vm/fixed.hpp"
#include "vm/sha256.hpp"

namespace cr::jit {

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
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

// One graph's compile as it passes the phases.
struct Compile {
  const graph::Graph& g;
  const Options& o;
  const Backend& backend;
  ProgressNote& note;
  LoopGraph lg;
  std::string loops;  // the loop graph's text, for CRESCENT_DEBUG_DIR
  Plan plan;
  std::unique_ptr<Unit> unit;
  Artifact artifact;
  Source from = Source::Built;
  std::shared_ptr<const graph::Executable> exe;
  std::vector<std::string> log;
  std::string dump_base;  // CRESCENT_DEBUG_DIR's files of this graph ("" none)
  int kernels = 0;        // of the plan
  bool unlowered = false;
};

// A phase does its part and says what it made; false ends the compile there (nothing to build).
struct Phase {
  const char* name;
  bool (*run)(Compile& c, std::string* made);
};

// With Options::whole_graph, a graph that lowers only in part, or not at all, is left unlowered
// instead of compiling with externs or failing.
bool lower_phase(Compile& c, std::string* made) {
  try {
    c.lg = lower(c.g);
    c.unlowered = c.o.whole_graph && !c.lg.notes.empty();
  } catch (const Error&) {
    if (!c.o.whole_graph) throw;
    c.unlowered = true;
  }
  if (!c.o.debug_dir.empty()) c.loops = c.lg.str();
  *made = cat(c.lg.values.size(), " loop values, ", c.lg.notes.size(), " externs");
  return !c.unlowered;
}

bool schedule_phase(Compile& c, std::string* made) {
  c.note.phase("scheduling");
  c.plan = schedule(std::move(c.lg), c.backend.target(c.o));
  if (c.g.dynamic)  // size-generic code: compiled from the templates, launched with the params
    for (const Kernel& k : c.plan.kernels) {
      c.plan.templates.push_back(k);
      c.plan.params.push_back(parametrize(c.plan.templates.back()));
    }
  if (c.o.log_fusion)
    for (const std::string& l : c.plan.log) c.log.push_back(cat("fusion: ", c.g.name, ": ", l));
  c.kernels = int(c.plan.kernels.size());
  c.note.kernels(c.kernels);
  if (!c.o.debug_dir.empty()) {  // (named by its own hash: the kernels' key comes later)
    const std::string dot = plan_dot(c.g, c.plan);
    write_dot(debug_base(c.o, c.g.name, sha256_hex(dot)), dot);
  }
  *made = cat(c.plan.kernels.size(), " kernels, ", c.plan.steps.size(), " steps");
  return !c.plan.kernels.empty();
}

bool emit_phase(Compile& c, std::string* made) {
  c.note.phase("code generation");
  c.unit = c.backend.emit(c.plan, c.g.name, c.o);
  const Unit& u = *c.unit;
  if (c.o.log_code) c.log.push_back(cat("output_code: ", c.g.name, " (key ", u.key, ")\n", u.text));
  if (!c.o.debug_dir.empty()) {
    c.dump_base = c.unit->dump_base = debug_base(c.o, c.g.name, u.key);
    std::string fusion;
    for (const std::string& l : c.plan.log) fusion += l + "\n";
    write_file(c.dump_base + ".loops.txt", c.loops);
    write_file(c.dump_base + ".fusion.txt", fusion);
    for (const auto& [suffix, text] : u.dumps) write_file(c.dump_base + suffix, text);
  }
  *made = cat(c.backend.name, " code, ", u.functions, " functions for ", c.kernels, " kernels, key ", u.key.substr(0, 8));
  return true;
}

bool build_phase(Compile& c, std::string* made) {
  c.artifact = cached_artifact(c.backend, *c.unit, c.o.cache_dir, &c.from);
  c.note.done(c.kernels);
  *made = c.from == Source::Memory ? "from memory" : c.from == Source::Disk ? "from the disk cache" : "compiled";
  return true;
}

bool load_phase(Compile& c, std::string* made) {
  c.exe = c.backend.program(std::move(c.plan), *c.unit, c.artifact, c.o);
  *made = "program ready";
  return true;
}

constexpr Phase kPhases[] = {
    {"lower", lower_phase}, {"schedule", schedule_phase}, {"emit", emit_phase}, {"build", build_phase}, {"load", load_phase}};

// Runs the phases in order; `times` gets each one run and its time, "name X ms".
void run_phases(Compile& c, std::vector<std::string>& times) {
  for (const Phase& p : kPhases) {
    const double t0 = now_ms();
    std::string made;
    const bool more = p.run(c, &made);
    times.push_back(cat(p.name, " ", fixed(now_ms() - t0), " ms"));
    if (c.o.log_perf) c.log.push_back(cat("perf: ", c.g.name, ": ", times.back(), ": ", made));
    if (!more) return;
  }
}

std::string joined(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

void compile_now(const std::shared_ptr<graph::Graph>& g, const Options& o, graph::NativeSlot& slot) {
  const double t0 = now_ms();
  ProgressNote note(g->name, device_name(o.device), o.log_progress);
  std::vector<std::string> times;
  std::string error;
  Compile c{*g, o, backend_for(o.device), note};
  try {
    run_phases(c, times);
    if (c.exe && o.autotune) autotune_program(g, c.exe, o);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double ms = now_ms() - t0;
  const bool cached = c.exe && c.from != Source::Built;  // nothing was compiled
  const bool disk_hit = c.exe && c.from == Source::Disk;
  if (!c.dump_base.empty())
    write_file(c.dump_base + ".timings.txt", cat(joined(times, "\n"), "\ntotal ", fixed(ms), " ms\n", disk_hit ? "from the disk cache\n" : "",
                                                 error.empty() ? "" : cat("error: ", error, "\n")));
  std::lock_guard<std::mutex> lock(slot.mutex);
  slot.done = true;
  slot.unlowered = c.unlowered;
  if (c.unlowered) return;
  slot.exe = c.exe;
  slot.error = error;
  slot.kernels = cached ? 0 : c.kernels;
  slot.kernels_loaded = cached ? c.kernels : 0;
  slot.disk_hit = disk_hit;
  slot.compile_ms = ms;
  slot.phases = joined(times, ", ");
  slot.log = std::move(c.log);
}

}  // namespace

void compile_native(const std::shared_ptr<graph::Graph>& g, const Options& o) {
  auto slot = std::make_shared<graph::NativeSlot>();
  g->native = slot;
  if (o.sync) {
    compile_now(g, o, *slot);
    return;
  }
  // the job holds the graph weakly (a dropped function's compile is skipped); it is only read
  submit_background({g, slot, o.owner, o.deferrable,
                     [o, slot](const std::shared_ptr<graph::Graph>& live) { compile_now(live, o, *slot); }});
}

}  // namespace cr::jit
