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

class Program : public PlanProgram {
 public:
  // `key` names the CUBIN (jit/cuda/backend.hpp cubin_key): programs of one CUBIN on one device share
  // its loaded module (vm/cuda/module.hpp).
  Program(Plan plan, CudaModule m, const std::string& key, const std::string& cubin, Device device);
  ~Program() override;

 private:
  void launch(size_t k, void** bufs) const override;
  void* check_word() const override;
  void defer_check() const override;
  CudaModule module_;
  std::shared_ptr<cr::cuda::DeviceCheck> check_;  // (plans with gathers)
  std::shared_ptr<cr::cuda::LoadedModule> loaded_;
  std::vector<void*> fns_;  // CUfunction per kernel
};

}  // namespace cr::jit::cuda
