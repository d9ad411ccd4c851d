// tostring(x): PyTorch-like printing, summarised for big tensors.
#pragma once
#include <string>

#include "vm/tensor.hpp"

namespace cr {
std::string format_tensor(const Tensor& t);
}
