#include "vm/context.hpp"

#include <algorithm>
#include <chrono>

#include "vm/autograd/meta.hpp"
#include "vm/config.hpp"
#include "vm/hooks.hpp"

namespace cr {

Context::Context() : hook_owner(std::make_shared<autograd::HookOwner>()) {
  ffi.impl = this;
  logs = env_logs();
  hooks().start_capture(*this);
}

Context::~Context() {
  drop_unclaimed();
  hook_owner->caller = nullptr;  // (hooks that outlive the VM are skipped)
}

// A loop of 16 MB outputs spent a third of its time collecting a 1.2 MB heap: so the collector
// waits kGcTimeFactor x its last time, up to kGcHardFactor x the budget or kGcHardBytes, whichever
// is less (never below the budget).
constexpr double kGcTimeFactor = 8;
constexpr size_t kGcHardFactor = 16, kGcHardBytes = size_t(512) << 20;

double now_us() {
  using namespace std::chrono;
  return double(duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count()) / 1e3;
}

bool Context::host_garbage_due(size_t bytes, size_t budget) const {
  if (bytes <= budget) return false;
  const size_t hard = std::max(budget, std::min(kGcHardFactor * budget, kGcHardBytes));
  return bytes > hard || now_us() - gc_end_us >= kGcTimeFactor * gc_cost_us;
}

void Context::handing(cr_tensor* const* ts, size_t n) {
  drop_unclaimed();
  handed.assign(ts, ts + n);
}

void Context::drop_unclaimed() {
  for (size_t i = size_t(std::max(ffi.claimed, 0)); i < handed.size(); ++i) tensor_release(handed[i]);
  handed.clear();
  ffi.claimed = 0;
}

}  // namespace cr
