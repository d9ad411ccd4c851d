// The CUDA side of jit/checks.hpp: a program's check word in device memory, and the words to read
// at their device's next synchronisation (copy_to_host, synchronize: jit/cuda/memory.cpp).
#pragma once
#include <memory>

#include "jit/checks.hpp"

namespace cr::jit::cuda {

struct DeviceCheck {
  void* word = nullptr;  // kCheckWords int64 on the device, zeroed
  int device = 0;
  CheckSites sites;
  DeviceCheck(int device, CheckSites sites);
  ~DeviceCheck();
  DeviceCheck(const DeviceCheck&) = delete;
  DeviceCheck& operator=(const DeviceCheck&) = delete;
};

// After a launch that uses c's word: read it at the device's next synchronisation.
void defer_check(const std::shared_ptr<DeviceCheck>& c);
// Reads the words deferred on device `index` (its work is done: the caller synchronised), clears
// them, and raises the first bad position found.
void check_deferred(int index);

}  // namespace cr::jit::cuda
