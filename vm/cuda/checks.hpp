// The CUDA side of vm/checks.hpp: a program's check word in device memory, and the words to read
// at their device's next synchronisation (copy_to_host, synchronize: vm/cuda/memory.cpp).
#pragma once
#include <memory>
#include <vector>

#include "vm/checks.hpp"

namespace cr::cuda {

struct DeviceCheck {
  void* word = nullptr;  // kCheckWords int64 on the device, zeroed
  int device = 0;
  void* stream = nullptr;  // the CUstream of the last launch that used it
  CheckSites sites;
  DeviceCheck(int device, CheckSites sites);
  ~DeviceCheck();
  DeviceCheck(const DeviceCheck&) = delete;
  DeviceCheck& operator=(const DeviceCheck&) = delete;
};

// After a launch on `stream` that uses c's word: read it when that stream or the whole device is
// next synchronised.
void defer_check(const std::shared_ptr<DeviceCheck>& c, void* stream);
// The words deferred on `captured` (a CUDA graph's capture: vm/cuda/graphs.hpp), now deferred on
// `stream` instead: the graph's replays defer them again.
std::vector<std::shared_ptr<DeviceCheck>> move_deferred(void* captured, void* stream);
// Reads the words deferred on device `index` by launches on `synced` (or on any stream, when
// `whole_device`), whose work is done: the caller synchronised. Clears them, and raises the first
// bad position found.
void check_deferred(int index, void* synced, bool whole_device);

}  // namespace cr::cuda
