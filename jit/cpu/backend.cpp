#include "jit/cpu/backend.hpp"

#include <dlfcn.h>

#include <set>

#include "jit/autotune.hpp"
#include "jit/cache_entry.hpp"
#include "jit/compiler_process.hpp"
#include "jit/cpu/gccjit.hpp"
#include "jit/cpu/helpers.hpp"
#include "jit/cpu/program.hpp"
#include "jit/kernel_cache.hpp"
#include "vm/env.hpp"

namespace cr::jit::cpu {

namespace {

struct CpuUnit : Unit {
  const Plan* plan = nullptr;  // (the driver's, alive until the program takes it)
  FnTable fns;
  CodeShape shape;             // the default's, or a max-autotune candidate's
};

bool available(std::string* why) { return gccjit(why) != nullptr; }

ScheduleTarget target(const Options& o) { return schedule_target(o.threads); }

// The key: the kernels' full rendering (every expression, address, dtype and constant), the
// function table, the shape, the compiler and its flags (compiler_id) and this build of crescent.
std::unique_ptr<CpuUnit> unit_of(const Plan& plan, const std::string& name, CodeShape shape) {
  auto u = std::make_unique<CpuUnit>();
  u->plan = &plan;
  u->name = name;
  u->shape = shape;
  collect_fns(plan, u->fns);
  std::set<std::string> distinct;
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    u->text += plan.code(i).str(kBlock);
    distinct.insert(anonymous_code(plan.code(i), shape.block));
  }
  u->functions = distinct.size();
  std::string key_text = cat(u->text, "\nfns:");
  for (const std::string& n : u->fns.names) key_text += cat(n, ",");
  const std::string streams = shape.stream_from > 0 ? cat(" streams from ", shape.stream_from) : "";
  u->key = sha256_hex(cat(key_text, "\n", compiler_id(), " block ", shape.block, streams, " build ", build_id()));
  u->dumps = {{".kernels.c", u->text}};
  return u;
}

std::unique_ptr<Unit> emit(const Plan& plan, const std::string& name, const Options&) {
  return unit_of(plan, name, {});
}

// In a compiler process unless CRESCENT_JIT_FORK=0 (then no crash or leak isolation, and one
// compile at a time).
void build(const Unit& unit, const std::string& out) {
  const auto& u = static_cast<const CpuUnit&>(unit);
  const std::string dump = u.dump_base.empty() ? "" : u.dump_base + ".gccjit.c";
  const bool isolated = env_number(kEnvJitFork) != 0;
  const Injected injected = injected_failure(isolated);
  if (isolated) compile_in_compiler_process(*u.plan, u.fns, out, dump, injected, u.shape);
  else compile_plan(*u.plan, u.fns, out, dump, u.shape);
}

// (the loader ignores the seal after the object's last section)
Artifact load(const std::string& path, const std::string&) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw Error(cat("cannot load compiled kernels ", path, ": ", dlerror()));
  auto so = std::make_shared<SharedObject>();
  so->handle = h;
  return so;
}

std::shared_ptr<const graph::Executable> program(Plan plan, Unit& unit, const Artifact& a, const Options&) {
  auto& u = static_cast<CpuUnit&>(unit);
  return std::make_shared<Program>(std::move(plan), std::move(u.fns), std::static_pointer_cast<SharedObject>(a));
}

}  // namespace

const Backend kBackend = {"cpu", ".so", false, nullptr, available, target, emit, build, load, program};

}  // namespace cr::jit::cpu

namespace cr::jit {

std::shared_ptr<cpu::SharedObject> cpu_kernels(const Plan& plan, const cpu::FnTable&, cpu::CodeShape shape,
                                               const Options& o) {
  Source from;
  const std::unique_ptr<cpu::CpuUnit> u = cpu::unit_of(plan, "autotune", shape);
  return std::static_pointer_cast<cpu::SharedObject>(cached_artifact(cpu::kBackend, *u, o.cache_dir, &from));
}

}  // namespace cr::jit
