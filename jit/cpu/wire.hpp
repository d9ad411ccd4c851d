// The kernels of a plan as bytes, for the compiler process (jit/compiler.cpp): every field of
// Kernel, Expr, Store and Accumulate, in a fixed order (no addresses: calls are named).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "jit/cpu/emit.hpp"

namespace cr::jit::cpu {

// The kernels plan.code(i).
std::string encode_kernels(const Plan& plan);
// Their copy; throws Error on bytes that are not a whole encoding.
std::vector<Kernel> decode_kernels(std::string_view bytes);

// Each kernel's rendering (Kernel::str), for checking that a decoded copy is the same code.
std::string kernels_text(const Plan& plan);

}  // namespace cr::jit::cpu
