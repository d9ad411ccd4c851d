// The fused cross_entropy ops (losses.cpp) and what their derivative rule shares with them.
#pragma once
#include "vm/registry.hpp"

namespace cr {

void register_losses(Registry& r);  // _cross_entropy and its backward

int ce_class_dim(int ndim);             // 0-based: 0 for a 1-d input, else 1
Shape ce_positions(const Shape& input);  // input's sizes without the class dim

}  // namespace cr
