// The table of backends, by Device::type (jit/backend.hpp).
#include "jit/backend.hpp"

#include <cstring>

#include "jit/cpu/backend.hpp"
#include "jit/cuda/backend.hpp"
#include "vm/config.hpp"
#include "vm/env.hpp"

namespace cr::jit {

namespace {

const Backend* const kBackends[] = {&cpu::kBackend, &cuda::kBackend};

}  // namespace

const Backend& backend_for(Device d) {
  if (d.type < 0 || size_t(d.type) >= std::size(kBackends)) throw Error(cat("no code generator for device ", device_name(d)));
  return *kBackends[size_t(d.type)];
}

Injected injected_failure(bool isolated) {
  const char* v = env_setting(Setting::JitFail);
  if (!v || !*v || std::strcmp(v, "0") == 0) return Injected::None;
  if (isolated && std::strcmp(v, "crash") == 0) return Injected::Crash;
  if (isolated && std::strcmp(v, "hang") == 0) return Injected::Hang;
  throw Error("injected compile failure (CRESCENT_JIT_FAIL)");
}

bool cpu_backend_available(std::string* why) { return backend_for(Device{0, 0}).available(why); }
bool cuda_backend_available(std::string* why) { return backend_for(Device{1, 0}).available(why); }

}  // namespace cr::jit
