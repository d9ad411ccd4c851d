// The fused cross_entropy ops (losses.cpp) and what their derivative rule shares with them.
#pragma once
#include "vm/autograd/var.hpp"
#include "vm/registry.hpp"

namespace cr {

void register_losses(Registry& r);  // _cross_entropy and its backward

int ce_class_dim(int ndim);             // 0-based: 0 for a 1-d input, else 1
Shape ce_positions(const Shape& input);  // input's sizes without the class dim
// v in float32 when dt is float16 / bfloat16: their sums accumulate in float32 (as PyTorch's;
// CUDA has no 16-bit sum kernel yet)
autograd::Var ce_accumulated(const autograd::Var& v, DType dt);

}  // namespace cr
