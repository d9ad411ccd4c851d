// What vm/ops/conv.cpp shares with the CUDA side of conv2d (vm/ops/conv_cuda.cpp).
#pragma once
#include "vm/registry.hpp"

namespace cr {

// conv2d's stride, padding, dilation (args 3, 4, 5: an integer or a list of 2) and groups (arg 6).
struct ConvParams {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
};
ConvParams conv_params(const OpCall& c);
// Output positions along one dim; fails when the padded input is smaller than the window.
int64_t conv_blocks(int64_t n, int64_t k, int64_t d, int64_t p, int64_t s, const char* what);

// out {N, K, Ho, Wo} = conv2d(x {N, C, H, W}, w) (+ bias) for CUDA tensors: cuDNN when
// T.backends.cudnn takes it, else on host copies.
void conv2d_cuda(OpCall& c, const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p);

// The CPU kernels of _conv2d_input_grad (input_grad: out = dX from gy and other = w) and
// _conv2d_weight_grad (out = dW from gy and other = x); out contiguous.
void conv2d_grad_cpu(const Tensor& gy, const Tensor& other, const Tensor& out, bool input_grad, const ConvParams& p);

// _conv2d_input_grad / _conv2d_weight_grad: conv2d's gradients as ops (CUDA: cuDNN; their rules:
// vm/ops/conv_grad.cpp).
void register_conv_cuda(Registry& r);

}  // namespace cr
