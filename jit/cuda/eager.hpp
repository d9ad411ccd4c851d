// Eager ops on CUDA tensors as single-op kernels of the code generator (jit/cuda/eager.cpp).
#pragma once
#include <string>
#include <vector>

#include "vm/registry.hpp"

namespace cr::jit::cuda {

// Runs registry op `op` on CUDA tensors through a generated kernel; false (nothing ran) when the
// op has no loop lowering for these arguments - the caller then runs it on host copies.
bool run_op(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>* outs);
// dst = src (converted to dst's dtype, broadcast to its sizes) by a generated kernel, both on
// one CUDA device; false (nothing written) when that cannot be done so - the caller copies
// through the host.
bool copy_on_device(const Tensor& dst, const Tensor& src);
// Where compiled kernels are cached on disk: T.config.cache_dir once T.compile has passed it on,
// else CRESCENT_CACHE_DIR, else ~/.cache/crescent.
std::string compile_cache_dir(Context& ctx);
// Drops the compiled single-op programs (T.compiler.reset()).
void clear_eager_cache();

}  // namespace cr::jit::cuda
