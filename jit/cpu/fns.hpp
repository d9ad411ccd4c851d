// The functions generated CPU code calls (block functions, block reductions, streaming stores),
// by index into a plan's table: the stage between the scheduled plan and emission
// (jit/cpu/emit.hpp), which needs their names only; a program needs their addresses.
#pragma once
#include <string>
#include <vector>

#include "jit/fusion/schedule.hpp"

namespace cr::jit::cpu {

// The table, each entry named by what it computes ("exp:float32", "sum:float32",
// "stream_block"): code generation needs the names only, the program `ptrs`, their addresses in
// this process (collect_fns with `resolve`).
struct FnTable {
  std::vector<std::string> names;
  std::vector<void*> ptrs;
  int index(const std::string& name) const;  // throws when the table lacks it
};

// The function table of a plan, without compiling (a cached shared object needs only this).
// Without `resolve` the names only: a compiler process runs before the registry exists.
void collect_fns(const Plan& plan, FnTable& fns, bool resolve = true);

// The names a kernel's code looks up: a call's block function is the op's over its operands'
// dtype (a predicate's result is bool); a block reduction's, its kind over its input dtype.
std::string call_name(const Kernel& k, const Expr& e);
std::string reduce_fn_name(const Accumulate& a);
inline constexpr const char* kStreamName = "stream_block";
inline constexpr const char* kFenceName = "stream_fence";

}  // namespace cr::jit::cpu
