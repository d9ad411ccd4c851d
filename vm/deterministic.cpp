#include "vm/deterministic.hpp"

#include <cstdio>
#include <mutex>
#include <set>

#include "vm/error.hpp"

namespace cr {

void alert_not_deterministic(const std::string& op, const std::string& why) {
  const int mode = deterministic_algorithms.load(std::memory_order_relaxed);
  if (mode == int(Determinism::Off)) return;
  const std::string msg = cat("does not have a deterministic implementation on CUDA (", why, "), but you set "
                                  "'T.use_deterministic_algorithms(true)'. You can turn off determinism just for this "
                                  "operation, or you can use the 'warn_only = true' option, if that's acceptable for "
                                  "your application.");
  if (mode == int(Determinism::On)) fail(msg);
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (warned.insert(op).second) std::fprintf(stderr, "[crescent] warning: %s: %s\n", op.c_str(), msg.c_str());
}

}  // namespace cr
