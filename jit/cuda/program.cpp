#include "jit/cuda/program.hpp"

#include "vm/cuda/driver.hpp"
#include "vm/cuda/streams.hpp"

namespace cr::jit::cuda {

using cr::cuda::CUfunction;

Target target_of(int index) {
  Target t;
  t.arch = cr::cuda::device_arch(index);
  t.sm_count = cr::cuda::device_info(index).multiprocessors;
  return t;
}

Program::Program(Plan plan, CudaModule m, const std::string& key, const std::string& cubin, Device device)
    : PlanProgram(std::move(plan), device), module_(std::move(m)), loaded_(cr::cuda::load_module(key, cubin, device.index)) {
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
    if (b.check) check_ = std::make_shared<cr::cuda::DeviceCheck>(device.index, plan_.lg.sites);
}

Program::~Program() = default;

void* Program::check_word() const { return check_->word; }
void Program::defer_check() const { cr::cuda::defer_check(check_, cr::cuda::current_stream(device_.index)); }

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
  cr::cuda::launch_counts().kernels.fetch_add(1, std::memory_order_relaxed);
  CR_CU(cuLaunchKernel(static_cast<CUfunction>(fns_[k]), unsigned(grid), 1, 1, unsigned(kern.block), 1, 1,
                       unsigned(kern.shared_bytes), cr::cuda::current_stream(device_.index), args.data(), nullptr),
        kern.name);
}

}  // namespace cr::jit::cuda
