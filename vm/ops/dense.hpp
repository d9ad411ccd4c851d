// A contiguous tensor with t's values on t's device (t itself when already contiguous, or
// undefined): for the fused kernels that walk rows of contiguous memory (norm.cpp, losses.cpp).
#pragma once
#include "vm/devices.hpp"
#include "vm/kernels/loop.hpp"

namespace cr {

inline Tensor dense(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  return t.device().is_cpu() ? contiguous(t) : to_device(t, t.device());
}

}  // namespace cr
