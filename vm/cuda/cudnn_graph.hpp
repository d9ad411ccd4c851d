// Convolutions through cuDNN's backend ("graph") API, the one PyTorch reaches through the cuDNN
// frontend: a one-operation graph (forward, backward data or backward filter) over tensor
// descriptors with explicit strides, heuristics mode INSTANT (PyTorch's; then A, then FALLBACK),
// the first engine config whose execution plan finalizes within the workspace cap and runs
// (benchmark mode: the fastest of the first 10 timed once, as PyTorch's benchmark_limit), run with
// a variant pack. The plan is cached per pass, shape, strides, alignment, dtype, device and the
// TF32, benchmark and deterministic switches: later calls only execute it, under the plan's lock.
#pragma once
#include <cstdint>
#include <string>

#include "vm/cuda/cudnn.hpp"

namespace cr::cuda {

// The strides (in elements) of x, w and y, in the order of their dims {n, c, h, w},
// {k, c / groups, r, s}, {n, k, oh, ow}: any dense layout (NCHW, channels-last).
struct ConvStrides {
  int64_t x[4], w[4], y[4];
};
ConvStrides contiguous_strides(const ConvShape& s);  // NCHW contiguous operands

// Queues `pass` (as cudnn_conv; s.layout is not read: `st` describes the operands) on device
// `index`'s current stream, forward adding `bias` {k} when given (y then NCHW contiguous).
// Returns false, running nothing, when no engine config of cuDNN's heuristics gives a plan.
// `chosen` receives a line naming the engine the first time a key builds its plan, else "".
bool cudnn_graph_conv(int index, ConvPass pass, const ConvShape& s, const ConvStrides& st, void* x, void* w, void* y,
                      const void* bias = nullptr, std::string* chosen = nullptr);

}  // namespace cr::cuda
