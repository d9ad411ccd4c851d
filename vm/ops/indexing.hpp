// Helpers the indexing ops share (vm/ops/indexing.cpp, vm/ops/selection.cpp).
#pragma once
#include <string>

#include "vm/ops/operands.hpp"

namespace cr {

// The index argument i as a contiguous int64 tensor (the caller's tensor itself when it is one).
Tensor index_arg(const OpCall& c, int i);
void check_device(const Tensor& a, const Tensor& b);
// Every value of idx (contiguous int64) must be a 1-based position in 1..n.
void check_range(const Tensor& idx, int64_t n, const std::string& what);
// A rank >= 1 header over t: 0-d tensors act as 1-element vectors, as in PyTorch.
Tensor at_least_1d(const Tensor& t);
// Whether a and b reach a common byte of one storage (their extents intersect).
bool may_overlap(const Tensor& a, const Tensor& b);

void register_scatter_reduce(Registry& r);  // vm/ops/scatter_reduce.cpp, with the selections
void register_bincount(Registry& r);        // vm/ops/bincount.cpp, with the selections

// Unsigned word of the element size: elements are moved, never converted, so one instantiation
// per size serves every dtype.
template <class F> void visit_width(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    default: return f(uint64_t{});
  }
}

}  // namespace cr
