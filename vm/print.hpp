// tostring(x): PyTorch-like printing, summarised for big tensors.
#pragma once
#include <string>

#include "vm/tensor.hpp"

namespace cr {

// T.set_printoptions, one set for the process as in PyTorch (torch._tensor_str.PRINT_OPTS)
struct PrintOptions {
  int precision = 4;        // digits after the point
  int64_t threshold = 1000; // more elements than this: summarised
  int64_t edgeitems = 3;    // elements shown at each end of a summarised dim
  int linewidth = 80;
  int sci_mode = -1;        // -1: chosen from the values (PyTorch's None), 0: never, 1: always
};
PrintOptions print_options();
void set_print_options(const PrintOptions& o);

std::string format_tensor(const Tensor& t);

}  // namespace cr
