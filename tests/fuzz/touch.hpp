// Reads every byte of a loaded tensor's storage, so that a tensor whose storage is shorter than
// its shape says (a reader bug) is reported by AddressSanitizer inside the fuzz target.
#pragma once
#include <cstddef>
#include <cstdint>

#include "vm/tensor.hpp"

inline void touch(const cr::Tensor& t) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(t.data_bytes());
  size_t n = size_t(t.numel()) * t.itemsize();
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < n; ++i) sink = sink ^ p[i];
}
