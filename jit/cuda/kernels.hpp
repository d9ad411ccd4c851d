// The kernel body writers (internal to jit/cuda): pointwise.cpp and reduce.cpp choose a launch
// configuration for a Kernel and write its body; emit.cpp adds the signature and the module.
#pragma once
#include "jit/cuda/emit.hpp"
#include "jit/cuda/exprs.hpp"

namespace cr::jit::cuda {

constexpr int kPointwiseBlock = 256;
constexpr int kPersistentItems = 16;  // a persistent row holds at most this many elements a thread

struct KernelWriter {
  const Kernel& k;
  const Target& target;
  CudaKernel& out;
  Lines& lines;
  std::map<std::string, std::string>& functions;  // the module's op functions

  // the index type of the generated code: the kernel's typedef (int or int64_t, set_index_type)
  const std::string idx = "idx_t";
  // Picks 32-bit indices (CudaKernel::index32) when every element count and address, plus one
  // grid-stride step, stays below 2^31. Needs the launch configuration.
  void set_index_type();
  // Defines variables i<first> .. i<last-1> from `linear`, a row-major index over variables
  // first .. end-1 (the last fastest).
  void decompose(const std::string& linear, size_t first, size_t last, size_t end);
  // Blocks wanted to cover `items` with `per_block` items a block, capped to one wave of
  // resident blocks of out.block threads (the kernels loop grid-stride beyond it).
  int64_t grid_for(int64_t items, int64_t per_block, int64_t waves = 1) const;
  int64_t product(size_t first, size_t last) const;
};

void write_pointwise(KernelWriter& w);
void write_reduction(KernelWriter& w);

}  // namespace cr::jit::cuda
