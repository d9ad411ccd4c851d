#include "vm/context.hpp"

#include <algorithm>

#include "vm/config.hpp"
#include "vm/hooks.hpp"

namespace cr {

Context::Context() {
  ffi.impl = this;
  logs = env_logs();
  hooks().start_capture(*this);
}

Context::~Context() { drop_unclaimed(); }

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
