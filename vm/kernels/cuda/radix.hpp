// A stable LSD radix sort of lines on a CUDA device (radix.cuh): the whole sort of lines longer
// than a block's bitonic chunk (library.hpp order_lines), 8 bits a pass over keys that order as
// the CPU's comparison does.
#pragma once
#include <string>

#include "vm/registry.hpp"

namespace cr::cuda {

// The first k of every sorted line of x {outer, n, inner} (contiguous, n < 2^31) into values /
// indices {outer, k, inner} (1-based positions), in the CPU's order (vm/ops/sorting.cpp).
void radix_sort_lines(Context& ctx, const Tensor& x, int64_t outer, int64_t n, int64_t inner, int64_t k,
                      bool descending, const Tensor& values, const Tensor& indices);

std::string radix_source(DType d);  // (tests compile it to CUBIN without a GPU)

}  // namespace cr::cuda
