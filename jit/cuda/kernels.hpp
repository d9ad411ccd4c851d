// The kernel body writers (internal to jit/cuda): pointwise.cpp and reduce.cpp choose a launch
// configuration for a Kernel and write its body; emit.cpp adds the signature and the module.
#pragma once
#include "jit/cuda/emit.hpp"
#include "jit/cuda/exprs.hpp"

namespace cr::jit::cuda {

constexpr int kPointwiseBlock = 256;
constexpr int kPersistentItems = 16;  // a persistent row holds at most this many elements a thread

// Whether k is a template of a dynamic graph (its loop sizes are parameters, jit/loop_ir.hpp):
// its code may then depend on nothing but its structure and literals.
bool is_template(const Kernel& k);
// The product of sizes[first..last) (concrete kernels).
int64_t product(const Kernel& k, size_t first, size_t last);

struct KernelWriter {
  const Kernel& k;         // the code's kernel: the template of a dynamic kernel
  const Kernel& instance;  // the concrete kernel (the same as k when specialised): launch only
  const std::vector<int64_t>& params;  // a template's parameter values for the instance
  const Target& target;
  CudaKernel& out;
  Lines& lines;
  std::map<std::string, std::string>& functions;  // the module's op functions
  const KernelConfig& config;  // (0s: the heuristic's choices)
  const bool dynamic = is_template(k);

  // the index type of the generated code: the kernel's typedef (int or int64_t, set_index_type)
  const std::string idx = "idx_t";
  // Picks 32-bit indices (CudaKernel::index32) when every element count and address, plus one
  // grid-stride step, stays below 2^31. Needs the launch configuration. A template decides by its
  // instance: its 32-bit form (size parameters as int) is another source, for another key.
  void set_index_type();
  // Defines variables i<first> .. i<last-1> from `linear`, a row-major index over variables
  // first .. end-1 (the last fastest).
  void decompose(const std::string& linear, size_t first, size_t last, size_t end);
  // The grid rule: `per_block` work items a block, at most `waves` waves of resident blocks of
  // out.block threads (the kernels loop grid-stride beyond); sets out.grid for the instance.
  void set_grid(int64_t per_block, int64_t waves = 1);
  // C text of sizes[first..last): a literal ("4096") when specialised, else a product of the
  // size parameters ("(P0 * P1)", parenthesised when more than one).
  std::string product_text(size_t first, size_t last) const;
};

void write_pointwise(KernelWriter& w);
void write_reduction(KernelWriter& w);

}  // namespace cr::jit::cuda
