// One kernel of a plan as a libgccjit function (jit/cpu/emit.cpp); compile_plan (jit/cpu/compile.cpp)
// makes the context and calls it per distinct kernel.
#pragma once
#include "jit/cpu/builder.hpp"
#include "jit/cpu/emit.hpp"

#if CRESCENT_HAVE_GCCJIT
namespace cr::jit::cpu {

// The exported function of kernel k (named k.name), shaped as `shape`.
gcc_jit_function* emit_kernel(const GccJit& J, gcc_jit_context* c, const Types& t, const Kernel& k, const FnTable& fns,
                              CodeShape shape);

}  // namespace cr::jit::cpu
#endif
