// Fused attention on tensor cores: out = softmax(q k^T * scale) v for float16 / bfloat16, one
// kernel that never writes the {L, S} scores (flash attention's online softmax). A library
// kernel (jit/cuda/library.hpp): CUDA C written once, instantiated per dtype and head size.
#pragma once
#include <cstdint>
#include <string>

#include "vm/registry.hpp"

namespace cr::jit::cuda {

// Whether the kernel takes q / k / v of dtype d with head size E (q, k) and Ev (v) and this scale:
// float16 or bfloat16, E == Ev, E one of 16, 32, 64, 128, a positive scale.
bool attention_takes(DType d, int64_t E, int64_t Ev, double scale);

// out {..., L, Ev} (contiguous) = attention of q {..., L, E}, k {..., S, E}, v {..., S, Ev} on one
// CUDA device, query i seeing keys 0..i when causal. False (nothing ran) when the kernel does not
// take them (attention_takes).
bool attention(Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
               bool causal);

// The module source for dtype d and head size E (tests compile it to CUBIN without a GPU).
std::string attention_source(DType d, int E);

}  // namespace cr::jit::cuda
