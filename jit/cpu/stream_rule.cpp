#include "jit/cpu/stream_rule.hpp"

#include <algorithm>

#include "jit/cpu/target.hpp"

namespace cr::jit::cpu {

// Streaming stores. A store that writes more than the cache can keep goes out with non-temporal
// stores: the kernel computes each block of it in a stack array and stream_block writes that, so
// the destination lines are not read into the cache before they are overwritten (a plain store's
// write-allocate doubles the memory traffic of the output). It streams when
//   - it writes at least the threshold in all (stream_store_bytes(), measured: stream_probe.hpp): an
//     output that stays in the cache is cheaper to write there, and its consumer finds it there;
//   - along unit-stride runs of at least 1 KiB (or the threshold, when that is smaller), so that
//     the streamed lines are whole;
//   - no load of the kernel reads its buffer: a block's streamed stores land after all its loads;
//   - the sizes are literals: a template's code serves sizes on both sides of the threshold;
//   - the kernel calls no block function in its inner loops (sin, exp, erf...): those kernels
//     are bound by the arithmetic, and the copy through the stack cost more than the saved
//     reads (15 % slower streamed: bench/RESULTS.md H35).
bool streamed(const Kernel& k, const Store& s, int64_t threshold) {
  if (std::any_of(k.sizes.begin(), k.sizes.end(), [](int64_t x) { return is_param(x); })) return false;
  for (size_t i = 0; i < k.body.exprs.size(); ++i)
    if (k.body.exprs[i].op == EOp::Call && (i >= k.inner.size() || k.inner[i])) return false;
  const size_t last = k.sizes.size() - 1;
  if (s.addr.coef(last) != 1 || size_t(k.n_outer) > last) return false;
  for (const Expr& e : k.body.exprs)
    if (e.op == EOp::Load && e.value == s.buffer) return false;
  const int64_t elem = int64_t(dtype_size(k.body.exprs[size_t(s.expr)].dtype));
  int64_t bytes = elem;
  for (size_t v = 0; v < k.sizes.size(); ++v)
    if (s.addr.coef(v) != 0) bytes *= k.sizes[v];
  return bytes >= threshold && k.sizes[last] * elem >= std::min<int64_t>(threshold, 1024);
}
bool any_streamed(const Kernel& k, int64_t from) {
  return std::any_of(k.stores.begin(), k.stores.end(), [&](const Store& s) { return streamed(k, s, from); });
}

}  // namespace cr::jit::cpu
