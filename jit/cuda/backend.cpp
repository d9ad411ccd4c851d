#include "jit/cuda/backend.hpp"

#include <exception>
#include <fstream>
#include <set>
#include <thread>

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
  // the readable rendering, and the source NVRTC compiles (prelude included; or its parts)
  u->dumps = {{".cu", u->text}, {".full.cu", u->m.source}};
  return u;
}

void build(const Unit& unit, const std::string& out) {
  const auto& u = static_cast<const CudaUnit&>(unit);
  injected_failure(false);
  const std::string bin = compile_module(u.m, u.name);
  std::ofstream f(out, std::ios::binary);
  f << bin;
  f.close();
  if (!f) throw Error(cat("cannot write the CUBIN of ", u.name, " to ", out));
}

Artifact load(const std::string&, const std::string& body) {
  unpack_cubins(body);  // (throws for what is no CUBIN)
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

std::string compile_module(const CudaModule& m, const std::string& name) {
  if (m.parts.empty()) return cr::cuda::compile_cubin(m.source, name, m.arch);
  // a thread a part (NVRTC is thread-safe)
  std::vector<std::string> cubins(m.parts.size());
  std::vector<std::exception_ptr> failed(m.parts.size());
  std::vector<std::thread> threads;
  for (size_t p = 0; p < m.parts.size(); ++p)
    threads.emplace_back([&, p] {
      try {
        cubins[p] = cr::cuda::compile_cubin(m.parts[p], cat(name, " part ", p), m.arch);
      } catch (...) {
        failed[p] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  return pack_cubins(cubins);
}

namespace {

constexpr char kPackMagic[] = "CRCUBINS";
constexpr size_t kMagicBytes = sizeof(kPackMagic) - 1;

bool is_elf(const std::string& bin, size_t at = 0) { return bin.compare(at, 4, "\x7f" "ELF") == 0; }

}  // namespace

std::string pack_cubins(const std::vector<std::string>& cubins) {
  std::string s(kPackMagic, kMagicBytes);
  for (const std::string& c : cubins) {
    for (int b = 0; b < 8; ++b) s += char(uint64_t(c.size()) >> (8 * b) & 0xff);
    s += c;
  }
  return s;
}

std::vector<std::string> unpack_cubins(const std::string& bin) {
  if (is_elf(bin)) return {bin};
  if (bin.compare(0, kMagicBytes, kPackMagic) != 0) throw Error("is no CUBIN (no ELF header) and no pack of CUBINs");
  std::vector<std::string> cubins;
  for (size_t at = kMagicBytes; at < bin.size();) {
    if (bin.size() - at < 8) throw Error(cat("is a truncated pack of CUBINs (a size at byte ", at, ")"));
    uint64_t n = 0;
    for (int b = 0; b < 8; ++b) n |= uint64_t(static_cast<unsigned char>(bin[at + size_t(b)])) << (8 * b);
    at += 8;
    if (n > bin.size() - at || !is_elf(bin, at)) throw Error(cat("is a pack of CUBINs whose part at byte ", at, " is no CUBIN"));
    cubins.push_back(bin.substr(at, n));
    at += n;
  }
  if (cubins.empty()) throw Error("is a pack of no CUBINs");
  return cubins;
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
