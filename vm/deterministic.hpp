// T.use_deterministic_algorithms (PyTorch's torch.use_deterministic_algorithms), for the whole
// process: while on, CUDA ops whose atomics let a float sum's order vary from run to run take an
// ordered path (scatter_add's family, vm/kernels/cuda/scatter.hpp), and the CUDA ops with no such
// path raise PyTorch's error naming the op (or warn once, warn_only). The CPU kernels are
// deterministic whatever the setting.
#pragma once
#include <atomic>
#include <string>

namespace cr {

enum class Determinism : int { Off = 0, On = 1, WarnOnly = 2 };
inline std::atomic<int> deterministic_algorithms{0};  // a Determinism

inline bool deterministic() { return deterministic_algorithms.load(std::memory_order_relaxed) != 0; }

// For a CUDA op with no deterministic path: PyTorch's error while the setting is on (raised from
// inside op `op`, which prefixes its name; with warn_only a warning on stderr, once per op),
// saying why (`why`: "float sums by atomics"); nothing while it is off.
void alert_not_deterministic(const std::string& op, const std::string& why);

}  // namespace cr
