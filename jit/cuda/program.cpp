#include "jit/cuda/program.hpp"

#include "jit/cuda/backend.hpp"

#include "vm/cuda/driver.hpp"
#include "vm/cuda/launch.hpp"
#include "vm/cuda/memory.hpp"
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
    : PlanProgram(std::move(plan), device), module_(std::move(m)) {
  const std::vector<std::string> parts = unpack_cubins(cubin);
  for (size_t p = 0; p < parts.size(); ++p)
    loaded_.push_back(cr::cuda::load_module(parts.size() == 1 ? key : cat(key, " part ", p), parts[p], device.index));
  cr::cuda::use_device(device.index);
  for (size_t i = 0; i < module_.kernels.size(); ++i) {
    const CudaKernel& k = module_.kernels[i];
    size_t given = plan_.params.empty() ? 0 : plan_.params[i].size();
    if (given != size_t(k.size_params))
      throw Error(cat(k.name, " takes ", k.size_params, " size parameters, the plan has ", given));
    if (size_t(k.part) >= loaded_.size())
      throw Error(cat(k.name, " is in part ", k.part, " of its module, the CUBIN has ", loaded_.size(), " parts"));
    CUfunction f = nullptr;
    CR_CU(cuModuleGetFunction(&f, loaded_[size_t(k.part)]->mod, k.name.c_str()), k.name);
    launches_.push_back(Launch{f, k.grid, k.block, k.shared_bytes});
  }
  current_.reset(new std::atomic<const Launch*>[launches_.size()]);
  for (size_t i = 0; i < launches_.size(); ++i) current_[i] = &launches_[i];
  for (const Buffer& b : plan_.buffers)
    if (b.check) check_ = std::make_shared<cr::cuda::DeviceCheck>(device.index, plan_.lg.sites);
}

Program::~Program() = default;

void* Program::check_word() const { return check_->word; }
void Program::defer_check() const { cr::cuda::defer_check(check_, cr::cuda::current_stream(device_.index)); }

SlotCopy::~SlotCopy() {
  if (device) cr::cuda::device_free(device, bytes, index);
}

LaunchCopies::~LaunchCopies() {
  if (ready >= 0) cr::cuda::event_destroy(ready);
}

void Program::install(size_t k, std::shared_ptr<cr::cuda::LoadedModule> mod, Launch l) {
  std::lock_guard<std::mutex> lock(mutex_);
  installed_.emplace_back(std::move(mod), std::make_unique<Launch>(l));
  current_[k] = installed_.back().second.get();
}

void Program::capture_inputs(std::function<void(std::vector<std::shared_ptr<LaunchCopies>>)> take) {
  capture_.arm(plan_.kernels.size(), std::move(take));
}

// Device copies on the launch's stream (ordered before the launch), host copies of by-value
// slots; none while the stream records a CUDA graph.
std::shared_ptr<LaunchCopies> Program::copies(size_t k, void** bufs) const {
  auto c = std::make_shared<LaunchCopies>();
  const int index = device_.index;
  int capturing = 0;
  CR_CU(cuStreamIsCapturing(cr::cuda::current_stream(index), &capturing), "autotuning's copies");
  if (capturing) return c;
  const CudaKernel& kern = module_.kernels[k];
  for (size_t i = 0; i < kern.params.size(); ++i) {
    SlotCopy s;
    s.bytes = slot_bytes(plan_.buffers[size_t(kern.params[i].buffer)]);
    s.index = index;
    if (kern.params[i].words) {
      const char* p = static_cast<const char*>(bufs[i]);
      s.host.assign(p, p + s.bytes);
    } else if (s.bytes) {
      s.device = cr::cuda::device_alloc(s.bytes, index);
      cr::cuda::copy_on_device(s.device, bufs[i], s.bytes, index);
    }
    c->slots.push_back(std::move(s));
  }
  c->ready = cr::cuda::event_create(index, false);
  cr::cuda::event_record(c->ready, int64_t(index) * cr::cuda::kSlots + cr::cuda::current_slot(index));
  return c;
}

// Arguments: the buffers' pointers, then a dynamic kernel's size parameters (the driver copies
// the values at the call). Its grid follows from this plan's concrete kernel.
void Program::launch(size_t k, void** bufs) const {
  if (capture_.on()) capture_.add(k, [&] { return copies(k, bufs); });
  const CudaKernel& kern = module_.kernels[k];
  const Launch& l = *current_[k];
  int64_t grid = kern.size_params ? launch_grid(kern, plan_.kernels[k]) : l.grid;
  if (grid <= 0) return;  // no work: an empty tensor
  std::vector<void*> args(kern.params.size());
  for (size_t i = 0; i < args.size(); ++i) args[i] = kern.params[i].words ? bufs[i] : &bufs[i];  // (run values: by value)
  if (kern.size_params)
    for (const int64_t& p : plan_.params[k]) args.push_back(const_cast<int64_t*>(&p));
  cr::cuda::use_device(device_.index);
  cr::cuda::launch_counts().kernels.fetch_add(1, std::memory_order_relaxed);
  // (every generated kernel begins with cr::grid_wait(): emit.cpp)
  cr::cuda::launch_kernel(static_cast<CUfunction>(l.fn), device_.index, grid, int(l.block), size_t(l.shared_bytes),
                          args.data(), kern.name.c_str());
}

}  // namespace cr::jit::cuda
