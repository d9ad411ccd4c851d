// CUBINs loaded into a device's context. One module per CUBIN key and device while a holder
// lives: programs of one CUBIN (a dynamic graph's instances, an eager op's sizes) share it, so a
// new instance loads nothing (a load waits for every stream). The last holder unloads it.
#pragma once
#include <memory>
#include <string>

#include "vm/cuda/driver.hpp"

namespace cr::cuda {

struct LoadedModule {
  CUmodule mod = nullptr;
  int device = 0;
  ~LoadedModule();
};

// The module of `cubin` (named `key`: one key, one CUBIN) on `device`, loaded unless a holder
// still has it.
std::shared_ptr<LoadedModule> load_module(const std::string& key, const std::string& cubin, int device);

// The architecture code for device `index` is compiled for ("sm_90").
std::string device_arch(int index);

}  // namespace cr::cuda
