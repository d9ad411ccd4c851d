// The fused optimizer updates on a CUDA device (optim.cuh): every parameter of a list and its
// state in a few launches (up to kListTensors parameters each), as vm/ops/optim.cpp's CPU loop.
#pragma once
#include <string>
#include <vector>

#include "vm/registry.hpp"

namespace cr::cuda {

// One parameter: contiguous device arrays of n elements of the list's dtype, its state (unused
// slots null) and its scalars (Adam: -step size, sqrt of bias correction 2; SGD: fresh).
struct UpdateSlot {
  void* p;
  const void* g;
  void* s[3];
  int64_t n;
  double a, b;
};

// The options every parameter shares (optim.cuh Scalars).
struct UpdateScalars {
  double lr, wd, decay, beta1, beta2, keep1, keep2, eps;
  int flag_a, flag_b, flag_c;
};

enum class Update { adam, sgd };

void fused_update(Context& ctx, Update kind, int device, DType d, const std::vector<UpdateSlot>& slots,
                  const UpdateScalars& o);

std::string optim_source(DType d);  // (tests compile it to CUBIN without a GPU)

}  // namespace cr::cuda
