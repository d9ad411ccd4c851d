// Attention through cuDNN's fused kernels (PyTorch's default on sm_90 with cuDNN 9.15 or later):
// the forward and backward graphs cuDNN's frontend builds for scaled_dot_product_attention
// (two matmuls around a softmax, the causal mask as index comparisons), built here through the
// backend API of vm/cuda/cudnn_backend.hpp, planned once per shape and layout, then executed.
#pragma once
#include <cstdint>
#include <string>

#include "vm/dtype.hpp"

namespace cr::cuda {

// One operand {b, h, s, d}: its address and strides in elements (d's stride 1).
struct SdpaOperand {
  void* p = nullptr;
  int64_t stride[4] = {};
};

// q {b, h, s_q, d}, k and v {b, h, s_kv, d}, out {b, h, s_q, d}; stats float32 {b, h, s_q}
// contiguous, the rows' logsumexp of their scaled (masked) scores (null: not wanted, forward only).
// The backward reads dout and writes dq, dk, dv (same shapes as q, k, v).
struct SdpaCall {
  DType dtype = DType::f16;
  int64_t b = 0, h = 0, s_q = 0, s_kv = 0, d = 0;
  double scale = 1;
  bool causal = false;  // query i sees keys 0..i
  SdpaOperand q, k, v, out, dout, dq, dk, dv;
  void* stats = nullptr;
};

// Whether device `index` may take cuDNN's attention for dtype d and head size e (== ev): float16
// or bfloat16, e a multiple of 8 up to 128, sm_90 or later, cuDNN 9.15 or later loaded,
// T.backends.cudnn.enabled and T.backends.cuda.enable_cudnn_sdp on.
bool cudnn_sdpa_takes(int index, DType d, int64_t e, int64_t ev);
// Whether device `index` and the cuDNN loaded can run it at all (the switches aside).
bool cudnn_sdpa_available(int index);

// Queues the forward / backward on device `index`'s current stream; false, running nothing, when
// cuDNN gives no plan for the call (then the caller's kernels run). With `log`, the first call
// of a shape logs the engine it took (or why none) under CRESCENT_LOGS=perf.
bool cudnn_sdpa_forward(int index, const SdpaCall& c, bool log = false);
bool cudnn_sdpa_backward(int index, const SdpaCall& c, bool log = false);

// Builds and finalizes the call's forward or backward graph without a device or handle (tests:
// cuDNN 9.8 and later validate a graph's tensors and operations without one); raises cuDNN's
// refusal. Needs cuDNN loaded (cudnn_version() > 0).
void cudnn_sdpa_check_graph(const SdpaCall& c, bool backward);

}  // namespace cr::cuda
