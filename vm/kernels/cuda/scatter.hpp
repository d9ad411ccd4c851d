// scatter_add on a CUDA device (scatter.cuh): index_add / scatter_add and the gradients of the
// gathers (embedding, index_select, gather) add into their target on the device, atomically.
#pragma once
#include <string>

#include "vm/registry.hpp"

namespace cr::cuda {

// out[c with c[d] := idx(c) - 1] += alpha * src[c] over idx's shape (idx and src: views of one
// shape, any strides; idx int64 with 1-based values; out on the same device, of src's dtype).
// An index outside 1..out.size(d) adds nothing and raises at the device's next synchronisation,
// as `op`'s error about `what` ("dim 1 of size 50").
void scatter_add(Context& ctx, const Tensor& out, int d, const Tensor& idx, const Tensor& src, double alpha,
                 const std::string& op, const std::string& what);

// out's elements at the offsets `keys` (int64 {n}, from out's first element; scatter.cuh's
// NO_KEY: skipped) += src (1-D contiguous, n elements), each element's adds in position order and
// written once: the ordered scatter_add's sum (T.use_deterministic_algorithms), for index_put.
void add_at_offsets(Context& ctx, const Tensor& out, const Tensor& keys, const Tensor& src, const std::string& op);

// scatter_reduce (vm/ops/scatter_reduce.cpp) into out, a copy of self (contiguous): each src
// element at idx's positions combined into out[c with c[d] := idx(c) - 1] by `reduce` (kReduce*,
// atomically: the order of a float sum varies as in PyTorch's CUDA kernel); without include_self
// the named positions start from the reduction's identity. Bad positions raise as scatter_add's.
constexpr int kReduceSum = 0, kReduceProd = 1, kReduceMean = 2, kReduceAmax = 3, kReduceAmin = 4;  // (scatter_reduce.cuh R_*)
void scatter_reduce(Context& ctx, const Tensor& out, int d, const Tensor& idx, const Tensor& src, int reduce,
                    bool include_self, const std::string& op, const std::string& what);

std::string scatter_source(DType d);         // (tests compile them to CUBIN without a GPU)
std::string scatter_reduce_source(DType d);

}  // namespace cr::cuda
