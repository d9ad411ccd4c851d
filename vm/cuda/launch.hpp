// Kernel launches, generated and library ones alike. Every kernel launched here begins with
// cr::grid_wait() (vm/kernels/cuda/prelude.cuh), so on sm_90 it is launched with programmatic
// dependent launch: its blocks may start while the stream's previous kernel runs and wait there
// for its results, so the launch latency between two kernels overlaps the first one's work (also
// inside a CUDA graph, whose capture keeps the edge). CRESCENT_CUDA_PDL=0: each after the last.
#pragma once
#include <cstdint>

#include "vm/cuda/driver.hpp"

namespace cr::cuda {

// Whether launches on device `index` may overlap (sm_90 or later, a driver with cuLaunchKernelEx,
// CRESCENT_CUDA_PDL not 0).
bool overlapping_launches(int index);

// f over a 1-D grid on device `index`'s current stream. f must call cr::grid_wait() before it
// reads or writes memory (only cr::to_l2 prefetches may come first): it may overlap the previous
// kernel. `what` names it in errors.
void launch_kernel(CUfunction f, int index, int64_t grid, int block, size_t shared_bytes, void** args,
                   const char* what);

}  // namespace cr::cuda
