#include "jit/cuda/backend.hpp"

#include <fstream>
#include <set>

#include "jit/cache_entry.hpp"
#include "jit/cuda/program.hpp"
#include "jit/kernel_cache.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/nvrtc.hpp"
#include "vm/cuda/prebuilt.hpp"

namespace cr::jit::cuda {

namespace {

struct CudaUnit : Unit {
  CudaModule m;  // a library kernel's: its source and arch only
};

bool available(std::string* why) { return cr::cuda::driver(why) && cr::cuda::nvrtc_available(why); }

ScheduleTarget target(const Options& o) { return schedule_target(o.threads); }

std::unique_ptr<Unit> emit(const Plan& plan, const std::string& name, const Options& o) {
  auto u = std::make_unique<CudaUnit>();
  u->m = emit_plan(plan, target_of(o.device.index));
  u->name = name;
  u->key = cubin_key(u->m.source, u->m.arch);
  std::set<std::string> distinct;
  for (const CudaKernel& k : u->m.kernels) distinct.insert(k.name);
  u->functions = distinct.size();
  u->text = render(u->m);
  // the readable rendering, and the exact source NVRTC compiles (prelude included)
  u->dumps = {{".cu", u->text}, {".full.cu", u->m.source}};
  return u;
}

void build(const Unit& unit, const std::string& out) {
  const auto& u = static_cast<const CudaUnit&>(unit);
  injected_failure(false);
  const std::string bin = cr::cuda::compile_cubin(u.m.source, u.name, u.m.arch);
  std::ofstream f(out, std::ios::binary);
  f << bin;
  f.close();
  if (!f) throw Error(cat("cannot write the CUBIN of ", u.name, " to ", out));
}

Artifact load(const std::string&, const std::string& body) {
  if (body.compare(0, 4, "\x7f" "ELF") != 0) throw Error("is no CUBIN (no ELF header)");
  return std::make_shared<std::string>(body);
}

std::shared_ptr<const graph::Executable> program(Plan plan, Unit& unit, const Artifact& a, const Options& o) {
  auto& u = static_cast<CudaUnit&>(unit);
  const auto& bin = *std::static_pointer_cast<const std::string>(a);
  return std::make_shared<Program>(std::move(plan), std::move(u.m), u.key, bin, o.device);
}

}  // namespace

const Backend kBackend = {"cuda", ".cubin", true, &CacheStats::cuda_compiled, available, target, emit, build, load, program};

std::string cubin_key(const std::string& source, const std::string& arch) {
  return sha256_hex(cat(source, "\n", arch, " ", cr::cuda::nvrtc_version(), " ", cr::cuda::nvrtc_options(), " build ", build_id()));
}

}  // namespace cr::jit::cuda

namespace cr::jit {

std::string cuda_cubin(const std::string& source, const std::string& name, const std::string& arch,
                       const std::string& cache_dir) {
  // library kernels: the build may have compiled this one (vm/cuda/prebuilt.hpp)
  if (const cr::cuda::PrebuiltCubin* p = cr::cuda::find_prebuilt(source, arch)) {
    count_prebuilt();
    return std::string(reinterpret_cast<const char*>(p->data), p->size);
  }
  cuda::CudaUnit u;
  u.m.source = source;
  u.m.arch = arch;
  u.name = name;
  u.key = cuda::cubin_key(source, arch);
  Source from;
  return *std::static_pointer_cast<const std::string>(cached_artifact(cuda::kBackend, u, cache_dir, &from));
}

}  // namespace cr::jit
