#include "jit/cpu/fns.hpp"

#include "jit/cpu/helpers.hpp"
#include "jit/cpu/stream_rule.hpp"
#include "vm/registry.hpp"

namespace cr::jit::cpu {

int FnTable::index(const std::string& name) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return int(i);
  throw Error(cat("internal: ", name, " is not in the plan's function table"));
}

std::string call_name(const Kernel& k, const Expr& e) { return cat(e.name, ":", dtype_name(k.body.exprs[size_t(e.a)].dtype)); }
std::string reduce_fn_name(const Accumulate& a) { return cat(reduce_name(a.kind), ":", dtype_name(a.in)); }

namespace {

void add_fn(FnTable& fns, const std::string& name, void* p, bool resolve) {
  for (const std::string& n : fns.names)
    if (n == name) return;
  if (resolve && !p) throw Error(cat("internal: generated code calls ", name, ", which has no block function"));
  fns.names.push_back(name);
  if (resolve) fns.ptrs.push_back(p);
}

}  // namespace

void collect_fns(const Plan& plan, FnTable& fns, bool resolve) {
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const Kernel& k = plan.code(i);
    for (const Expr& e : k.body.exprs) {
      if (e.op != EOp::Call) continue;
      const DType in = k.body.exprs[size_t(e.a)].dtype;
      add_fn(fns, call_name(k, e), resolve ? reinterpret_cast<void*>(block_function(e.name, in)) : nullptr, resolve);
    }
    for (const Accumulate& a : k.accs)
      add_fn(fns, reduce_fn_name(a), resolve ? reinterpret_cast<void*>(reduce_fn(a.kind, a.in)) : nullptr, resolve);
    if (any_streamed(k, 1)) {  // (whatever the threshold: a tuning candidate may stream)
      add_fn(fns, kStreamName, reinterpret_cast<void*>(&stream_block), resolve);
      add_fn(fns, kFenceName, reinterpret_cast<void*>(&stream_fence), resolve);
    }
  }
}

}  // namespace cr::jit::cpu
