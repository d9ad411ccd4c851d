// The kernels of a plan as bytes, for the compiler process (jit/compiler.cpp): every field of
// Kernel, Expr, Store and Accumulate, in a fixed order. A block function (Expr::fn, an address in
// this process) travels as its index in the plan's FnTable and comes back as a stand-in pointer,
// unique per index: code generation only looks the pointer up in the table (FnTable::index).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "jit/cpu/emit.hpp"

namespace cr::jit::cpu {

// The kernels plan.code(i), each Call's fn by its index in `fns` (collect_fns(plan, fns) first).
std::string encode_kernels(const Plan& plan, const FnTable& fns);
// Their copy; throws Error on bytes that are not a whole encoding.
std::vector<Kernel> decode_kernels(std::string_view bytes);

// Each kernel's rendering (Kernel::str), for checking that a decoded copy is the same code.
std::string kernels_text(const Plan& plan);

}  // namespace cr::jit::cpu
