#include "vm/cuda/module.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "vm/error.hpp"

namespace cr::cuda {

LoadedModule::~LoadedModule() {
  if (!mod) return;
  try {
    use_device(device);
    driver()->cuModuleUnload(mod);
  } catch (const std::exception&) {  // the process is going down with its context
  }
}

// Loaded modules by device and CUBIN key, while a program holds them. Keys whose programs all
// died are dropped when the map has doubled since the last sweep (not per load: a sweep is a
// scan).
std::shared_ptr<LoadedModule> load_module(const std::string& key, const std::string& cubin, int device) {
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
  use_device(device);
  mod->device = device;
  CR_CU(cuModuleLoadData(&mod->mod, cubin.data()), "loading compiled kernels");
  slot = mod;
  return mod;
}

std::string device_arch(int index) {
  const DeviceInfo& d = device_info(index);
  return cat("sm_", d.sm_major, d.sm_minor);
}

}  // namespace cr::cuda
