#include "vm/kernels/cuda/optim.hpp"

#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"

namespace cr::cuda {
namespace {

constexpr int kListTensors = 48, kListChunk = 4096, kBlock = 512;  // (as optim.cuh)

// One launch's parameters, laid out as optim.cuh's TensorLists (under the 4 KiB of kernel
// parameters every CUDA device takes).
struct TensorLists {
  void* p[kListTensors];
  const void* g[kListTensors];
  void* s[3][kListTensors];
  long long n[kListTensors];
  double a[kListTensors], b[kListTensors];
  int first_block[kListTensors + 1];
  int count;
};
static_assert(sizeof(TensorLists) + sizeof(UpdateScalars) <= 4096, "kernel parameters past 4 KiB");

}  // namespace

std::string optim_source(DType d) {
  return cat(prelude(), "\ntypedef ", cuda_type(d), " T;\ntypedef ", d == DType::f64 ? "double" : "float", " C;\n",
             cuda_source("optim.cuh"));
}

void fused_update(Context& ctx, Update kind, int device, DType d, const std::vector<UpdateSlot>& slots,
                  const UpdateScalars& o) {
  const char* fn = kind == Update::adam ? "fused_adam" : "fused_sgd";
  UpdateScalars scalars = o;
  for (size_t at = 0; at < slots.size();) {
    TensorLists l{};
    int blocks = 0;
    for (; at < slots.size() && l.count < kListTensors; ++at) {
      const UpdateSlot& s = slots[at];
      if (s.n == 0) continue;
      const int k = l.count++;
      l.p[k] = s.p, l.g[k] = s.g, l.n[k] = s.n, l.a[k] = s.a, l.b[k] = s.b;
      for (int j = 0; j < 3; ++j) l.s[j][k] = s.s[j];
      l.first_block[k] = blocks;
      blocks += int((s.n + kListChunk - 1) / kListChunk);
    }
    if (l.count == 0) continue;
    l.first_block[l.count] = blocks;
    void* args[] = {&l, &scalars};
    library_launch(ctx, device, cat("optim_", dtype_name(d)), [d] { return optim_source(d); }, fn, blocks, kBlock, args);
  }
}

}  // namespace cr::cuda
