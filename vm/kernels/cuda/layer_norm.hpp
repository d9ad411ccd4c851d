// layer_norm on a CUDA device (layer_norm.cuh), for the `_layer_norm` / `_layer_norm_backward`
// registry ops (vm/ops/norm.cpp): rows of n contiguous elements, mean / rstd one per row in the
// arithmetic dtype (float32, float64 for float64 inputs).
#pragma once
#include <string>

#include "vm/registry.hpp"

namespace cr::cuda {

// y = (x - mean) * rstd * w + b over {rows, n} (w, b undefined: absent); all contiguous, one device.
void layer_norm(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                const Tensor& w, const Tensor& b, int64_t rows, int64_t n, double eps);

// The gradients asked for (gx, gw, gb undefined: not asked) from grad_out go and the forward's
// x, mean, rstd, w. gw / gb sum over the rows in a fixed order (deterministic).
void layer_norm_backward(Context& ctx, const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& go,
                         const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& w, int64_t rows,
                         int64_t n);

std::string layer_norm_source(DType d);  // (tests compile it to CUBIN without a GPU)

}  // namespace cr::cuda
