#include "jit/cuda/program.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "jit/cuda/driver.hpp"
#include "jit/cuda/streams.hpp"

namespace cr::jit::cuda {

using cr::cuda::CUfunction;
using cr::cuda::CUmodule;

struct LoadedModule {
  CUmodule mod = nullptr;
  int device = 0;
  ~LoadedModule() {
    if (!mod) return;
    try {
      cr::cuda::use_device(device);
      cr::cuda::driver()->cuModuleUnload(mod);
    } catch (const std::exception&) {  // the process is going down with its context
    }
  }
};

namespace {

// Loaded modules by device and CUBIN key, while a program holds them. Keys whose programs all
// died are dropped when the map has doubled since the last sweep (not per load: a sweep is a
// scan).
std::shared_ptr<LoadedModule> module_for(const std::string& key, const std::string& cubin, int device) {
  static std::mutex m;
  static std::map<std::pair<int, std::string>, std::weak_ptr<LoadedModule>> loaded;
  static size_t live = 0;  // the map's size after the last sweep
  std::lock_guard<std::mutex> g(m);
  if (loaded.size() >= std::max<size_t>(64, 2 * live)) {
    std::erase_if(loaded, [](const auto& e) { return e.second.expired(); });
    live = loaded.size();
  }
  std::weak_ptr<LoadedModule>& slot = loaded[{device, key}];
  if (std::shared_ptr<LoadedModule> have = slot.lock()) return have;
  auto mod = std::make_shared<LoadedModule>();
  cr::cuda::use_device(device);
  mod->device = device;
  CR_CU(cuModuleLoadData(&mod->mod, cubin.data()), "loading compiled kernels");
  slot = mod;
  return mod;
}

}  // namespace

Target target_of(int index) {
  const cr::cuda::DeviceInfo& d = cr::cuda::device_info(index);
  Target t;
  t.arch = cat("sm_", d.sm_major, d.sm_minor);
  t.sm_count = d.multiprocessors;
  return t;
}

Program::Program(Plan plan, CudaModule m, const std::string& key, const std::string& cubin, Device device)
    : PlanProgram(std::move(plan), device), module_(std::move(m)), loaded_(module_for(key, cubin, device.index)) {
  cr::cuda::use_device(device.index);
  for (size_t i = 0; i < module_.kernels.size(); ++i) {
    const CudaKernel& k = module_.kernels[i];
    size_t given = plan_.params.empty() ? 0 : plan_.params[i].size();
    if (given != size_t(k.size_params))
      throw Error(cat(k.name, " takes ", k.size_params, " size parameters, the plan has ", given));
    CUfunction f = nullptr;
    CR_CU(cuModuleGetFunction(&f, loaded_->mod, k.name.c_str()), k.name);
    fns_.push_back(f);
  }
  for (const Buffer& b : plan_.buffers)
    if (b.check) check_ = std::make_shared<DeviceCheck>(device.index, plan_.lg.sites);
}

Program::~Program() = default;

void* Program::check_word() const { return check_->word; }
void Program::defer_check() const { cuda::defer_check(check_, cr::cuda::current_stream(device_.index)); }

// Arguments: the buffers' pointers, then a dynamic kernel's size parameters (the driver copies
// the values at the call). Its grid follows from this plan's concrete kernel.
void Program::launch(size_t k, void** bufs) const {
  const CudaKernel& kern = module_.kernels[k];
  int64_t grid = kern.size_params ? launch_grid(kern, plan_.kernels[k]) : kern.grid;
  if (grid <= 0) return;  // no work: an empty tensor
  std::vector<void*> args(kern.params.size());
  for (size_t i = 0; i < args.size(); ++i) args[i] = kern.params[i].words ? bufs[i] : &bufs[i];  // (run values: by value)
  if (kern.size_params)
    for (const int64_t& p : plan_.params[k]) args.push_back(const_cast<int64_t*>(&p));
  cr::cuda::use_device(device_.index);
  CR_CU(cuLaunchKernel(static_cast<CUfunction>(fns_[k]), unsigned(grid), 1, 1, unsigned(kern.block), 1, 1,
                       unsigned(kern.shared_bytes), cr::cuda::current_stream(device_.index), args.data(), nullptr),
        kern.name);
}

}  // namespace cr::jit::cuda
