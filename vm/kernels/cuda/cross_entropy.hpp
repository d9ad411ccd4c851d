// The fused gradient of cross_entropy on a CUDA device (cross_entropy.cuh), for the
// `_cross_entropy_backward` registry op (vm/ops/losses.cpp).
#pragma once
#include <string>

#include "vm/registry.hpp"

namespace cr::cuda {

// out {outer, C, inner} from x (the same shape), per position lse, t (int64, 1-based), a, b, k,
// and the class weights w (undefined: none); all contiguous on one device; out of x's dtype, lse,
// a, b, k and w of the loss's (x's or wider). pitch > C (inner 1): out is {outer, pitch}, its
// classes past C zero, with rows a multiple of 16 bytes long.
void cross_entropy_backward(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& lse, const Tensor& t,
                            const Tensor& a, const Tensor& b, const Tensor& k, const Tensor& w, int64_t classes,
                            int64_t inner, int64_t pitch);

// lse {rows} (x's dtype or wider) of the contiguous scores x {rows, classes}: each row's logsumexp.
void cross_entropy_lse(Context& ctx, const Tensor& lse, const Tensor& x);

std::string cross_entropy_source(DType d, DType l);  // (tests compile it to CUBIN without a GPU)

}  // namespace cr::cuda
