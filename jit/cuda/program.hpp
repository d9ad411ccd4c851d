// A compiled graph on a CUDA device (jit/program.hpp runs its steps): the CUBIN of its module
// loaded into the device's context, each kernel launched as the module's launch table says
// (jit/cuda/emit.hpp), on the default stream - ordered with the copies of vm/devices.
#pragma once
#include <memory>

#include "vm/cuda/checks.hpp"
#include "jit/cuda/emit.hpp"
#include "jit/program.hpp"
#include "vm/cuda/module.hpp"

namespace cr::jit::cuda {

// The code generator's view of device `index` (arch, SM count).
Target target_of(int index);

// Autotuning's copy of one kernel slot a launch got: on the device (`bytes` at `device`, freed
// with the copy), or, for the run's values passed by value, on the host.
struct SlotCopy {
  void* device = nullptr;
  size_t bytes = 0;
  int index = 0;
  std::vector<char> host;
  SlotCopy() = default;
  SlotCopy(SlotCopy&& o) noexcept : device(o.device), bytes(o.bytes), index(o.index), host(std::move(o.host)) { o.device = nullptr; }
  SlotCopy(const SlotCopy&) = delete;
  ~SlotCopy();
};
// The copies of one launch; `ready` is a (vm/cuda/streams.hpp) event recorded after them.
struct LaunchCopies {
  std::vector<SlotCopy> slots;
  int64_t ready = -1;
  LaunchCopies() = default;
  LaunchCopies(const LaunchCopies&) = delete;
  ~LaunchCopies();
};

// A kernel's launch: its function and shape (the module's, or autotuning's winner).
struct Launch {
  void* fn = nullptr;  // CUfunction
  int64_t grid = 0, block = 0, shared_bytes = 0;
};

class Program : public PlanProgram {
 public:
  // `key` names the CUBIN (jit/cuda/backend.hpp cubin_key): programs of one CUBIN on one device share
  // its loaded module (vm/cuda/module.hpp); a pack of CUBINs (CudaModule::parts) is a module a part.
  Program(Plan plan, CudaModule m, const std::string& key, const std::string& cubin, Device device);
  ~Program() override;
  const CudaModule& module() const { return module_; }
  int device_index() const { return device_.index; }
  // Later launches of kernel k run `l`, a function of `mod` (kept loaded).
  void install(size_t k, std::shared_ptr<cr::cuda::LoadedModule> mod, Launch l);
  // At the next run, each kernel's slots are copied on its stream as it is launched; once all
  // are, take(copies by kernel) is called (on the running thread: it should only hand them on).
  void capture_inputs(std::function<void(std::vector<std::shared_ptr<LaunchCopies>>)> take);

 private:
  std::shared_ptr<LaunchCopies> copies(size_t k, void** bufs) const;
  void launch(size_t k, void** bufs) const override;
  void* check_word() const override;
  void defer_check() const override;
  CudaModule module_;
  std::shared_ptr<cr::cuda::DeviceCheck> check_;  // (plans with gathers)
  std::vector<std::shared_ptr<cr::cuda::LoadedModule>> loaded_;  // by part (CudaModule::parts)
  std::vector<Launch> launches_;  // the module's
  std::unique_ptr<std::atomic<const Launch*>[]> current_;  // per kernel
  std::mutex mutex_;  // installed_
  std::vector<std::pair<std::shared_ptr<cr::cuda::LoadedModule>, std::unique_ptr<Launch>>> installed_;
  mutable LaunchCapture<std::shared_ptr<LaunchCopies>> capture_;
};

}  // namespace cr::jit::cuda
