// cuDNN's convolutions, loaded at run time like cuBLAS: dlopen of $CRESCENT_CUDNN_LIB (the file,
// or a folder holding libcudnn.so.9), "libcudnn.so.9" on the loader path, then $CUDA_HOME/lib,
// lib64 and /usr/local/cuda's. PyTorch's pip wheels carry one (nvidia/cudnn/lib).
//
// The legacy convolution API cuDNN 9 keeps (cudnnConvolutionForward / BackwardData /
// BackwardFilter; the graph API's is vm/cuda/cudnn_graph.hpp), contiguous NCHW operands, the
// algorithm from cudnnGet*Algorithm_v7's heuristics (PyTorch's default, benchmark off) or timed
// by cudnnFind*AlgorithmEx (benchmark on), cached per shape, dtype, math and mode; a handle per
// device and stream slot on that stream; workspaces from the caching allocator (vm/cuda/memory.hpp).
#pragma once
#include <cstdint>
#include <string>

#include "vm/dtype.hpp"

namespace cr::cuda {

// Whether cuDNN loads and a driver is there (why not, when not).
bool cudnn_available(std::string* why = nullptr);
// cudnnGetVersion's code (91900 for 9.19.0) once the library loads (no driver needed); else 0.
int cudnn_version(std::string* why = nullptr);
std::string cudnn_version_name();  // "cuDNN 9.19.0" (what the logs say)

// The switches of T.backends.cudnn. enabled (CRESCENT_CUDNN=0: off at start): whether the conv
// ops of CUDA tensors take cuDNN. allow_tf32 (on, as PyTorch's torch.backends.cudnn.allow_tf32):
// float32 convolutions may use TF32 tensor cores. benchmark (off, as PyTorch's): a new shape
// times cuDNN's algorithms (cudnnFind*AlgorithmEx) instead of taking the heuristics' first.
// sdp (on, T.backends.cuda.enable_cudnn_sdp as PyTorch's): 16-bit attention may take cuDNN's
// fused kernels (vm/cuda/cudnn_sdpa.hpp) while `enabled` is on too.
enum class CudnnFlag { enabled = 0, allow_tf32 = 1, benchmark = 2, sdp = 3 };
bool cudnn_flag(CudnnFlag f);
bool set_cudnn_flag(CudnnFlag f, bool on);  // returns the previous value
// The API the convolutions take (CRESCENT_CUDNN_API at start, T.backends.cudnn.api later):
// graph, cuDNN's backend API (vm/cuda/cudnn_graph.hpp: its heuristics reach the implicit-GEMM
// engines PyTorch runs; the legacy API where no plan finalizes), or legacy (cudnnConvolution*).
enum class CudnnApi { graph = 0, legacy = 1 };
CudnnApi cudnn_api_setting();
CudnnApi set_cudnn_api_setting(CudnnApi a);  // returns the previous value

// enabled and available: the conv ops' choice
bool cudnn_usable();

// Creates the calling thread's current stream's handle now, when cuDNN is there and enabled (a
// CUDA graph capture must not create one: vm/cuda/graphs.hpp).
void cudnn_prepare(int index);

// One 2-D convolution, of sizes x {n, c, h, w}, w {k, c / groups, r, s}, y {n, k, oh, ow}.
struct ConvShape {
  DType dtype = DType::f32;
  int n = 0, c = 0, h = 0, w = 0, k = 0, r = 0, s = 0, oh = 0, ow = 0;
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1, groups = 1;
};
// forward: y = conv(x, w); backward_data: x = the gradient of the input from y (the gradient of
// the output) and w; backward_filter: w = the gradient of the weight from x and y.
enum class ConvPass { forward = 0, backward_data = 1, backward_filter = 2 };
// Queues `pass` on contiguous NCHW operands through the legacy API on device `index`'s current
// stream; it overwrites its output (y, x or w) and reads the two others; forward then adds `bias`
// {k} when given. `chosen` (when given) receives a line naming the algorithm the first time a
// shape picks one, else "".
void cudnn_conv(int index, ConvPass pass, const ConvShape& s, void* x, void* w, void* y, const void* bias = nullptr,
                std::string* chosen = nullptr);

}  // namespace cr::cuda
