// The fused attention backward (FlashAttention-2's, attention_bwd.cuh) for the
// `_attention_backward` registry op (vm/ops/attention_backward.cpp): q / k / v gradients from the
// forward's output and row logsumexp, p recomputed per tile, dq in a pass of its own (no atomics:
// deterministic). float16 / bfloat16 with head sizes 64 or 128 on tensor cores
// (attention_bwd_tc.cuh), the rest (float32 too) on the FMA pipes; float accumulators.
#pragma once
#include <cstdint>
#include <string>

#include "vm/registry.hpp"

namespace cr::cuda {

// Whether the kernels take dtype d with head sizes E (q, k) and Ev (v): 1 to 128 each.
bool attention_backward_takes(DType d, int64_t E, int64_t Ev);

// dq, dk, dv (contiguous, q's shapes and dtype) of attention(q, k, v, scale, causal, mask) from
// dout (out's shape), the forward's out and lse (float32 {..., L}, contiguous: natural log). mask
// is a view of the scores' shape as cuda::attention's. L and S at least 1. False (nothing ran)
// when the kernels do not take them (attention_backward_takes, a mask of more than two batch dims).
bool attention_backward(Context& ctx, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        double scale, bool causal, const Tensor& mask);

// Whether the tensor-core kernels take them (on sm_80 on): float16 / bfloat16, E == Ev, 64 or 128.
bool attention_backward_tc_takes(DType d, int64_t E, int64_t Ev);

// The module sources (tests compile them to CUBIN without a GPU): the FMA kernels' for dtype d and
// head sizes E / Ev, the tensor-core kernels' for 16-bit d and head size D.
std::string attention_backward_source(DType d, int E, int Ev);
std::string attention_backward_tc_source(DType d, int D);

}  // namespace cr::cuda
