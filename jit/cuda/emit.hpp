// CUDA C generation: every kernel of a fusion Plan (jit/fusion/schedule.hpp) becomes one
// `extern "C" __global__` function of one CUDA C module per graph, compiled by NVRTC to a CUBIN
// (vm/cuda/nvrtc.hpp). The launch contract (jit/cuda/README.md):
//
//   kernel i of the module is plan.kernels[i]; its name is CudaKernel::name (= Kernel::name);
//   its arguments are one device pointer per kernel buffer slot, in slot order: argument s is
//   the storage (element 0 of the storage, not of the view: offsets are in the code) of plan
//   buffer params[s].buffer, of dtype params[s].dtype; sizes and strides are compile-time
//   constants (but see dynamic kernels below). Launch with gridDim = (grid, 1, 1), blockDim =
//   (block, 1, 1), shared_bytes of dynamic shared memory (all shared memory is static today: 0).
//   grid 0: nothing to launch.
//   Every kernel loops grid-stride, so any grid >= 1 computes the same values; block is fixed.
//   Kernels of a dynamic graph (Plan::templates) are emitted from their template, so one
//   source serves every instance with the same index width (and, for reductions, row-length
//   bucket): after the pointers come size_params `int P<j>` arguments (`int64_t` with 64-bit
//   indices), the instance's plan.params[i] in slot order, passed as int64_t values; the grid
//   of an instance is launch_grid(kernel, plan.kernels[i]).
//   A vectorised kernel (vector_width 4) needs every pointer aligned to 4 elements (16 bytes for
//   float32; cudaMalloc gives 256). Written buffers must not overlap any other argument.
#pragma once
#include <string>
#include <vector>

#include "jit/fusion/schedule.hpp"

namespace cr::jit::cuda {

// The device the code is generated for. The defaults are an H100 SXM.
struct Target {
  std::string arch = "sm_90";
  int sm_count = 132;
  int max_threads_per_sm = 2048;
};

// How a kernel maps onto threads.
enum class Form : uint8_t {
  Pointwise,     // one element per thread per step of a grid-stride loop
  ReduceThread,  // one row per thread (rows are short, or strided while rows are contiguous)
  ReduceWarp,    // one row per warp, folded with warp shuffles
  ReduceBlock,   // one row per block, warp shuffles then shared memory
  ReduceColumns, // strided rows, 32 a block: a row's lanes one per warp, folded in shared memory
};
const char* form_name(Form f);

struct Param {
  int32_t buffer = -1;  // plan buffer id
  DType dtype = DType::f32;
  bool read = false, written = false;
  int64_t words = 0;    // > 0: the run's values, passed by value (cr::words<N>), not a pointer
};

struct CudaKernel {
  std::string name;  // the function launched: an earlier kernel's where the code is the same
  Form form = Form::Pointwise;
  int vector_width = 1;     // pointwise: elements per thread per step (4: 16-byte vector access)
  bool vector_form = false; // the code has the vector form (a template: beside the scalar one)
  bool persistent = false;  // reductions: each thread's part of a row stays in registers
                            // across the passes of the row (else each pass re-reads it: looped)
  bool index32 = false;     // indices computed in 32 bits
  int64_t grid = 0, block = 0, shared_bytes = 0;  // grid: of the plan emitted (launch_grid)
  int64_t rows = 0, row_size = 0;  // reductions: independent rows, elements folded per row
  std::vector<Param> params;
  int size_params = 0;  // dynamic kernels: int64_t arguments P0.. after the pointers
  // How the grid follows from an instance's sizes: its work items (pointwise: groups of
  // vector_width elements; reductions: rows), items_per_block a block, at most max_grid blocks.
  int64_t items_per_block = 1, max_grid = 0;
  bool splittable = false;  // a block-per-row reduction of one pass that stores only per row:
                            // KernelConfig::split applies
  int64_t split = 1;        // blocks that share a row (KernelConfig::split)
  int64_t cluster = 1;      // reductions: blocks of a thread-block cluster that fold one row (sm_90)
  int part = 0;             // the part of the module (CudaModule::parts) that holds its function
};

// A kernel's launch shape where autotuning chooses it (jit/autotune.hpp); 0 everywhere: the
// heuristic's. Kernels of templates (dynamic graphs) keep the heuristic's.
struct KernelConfig {
  int64_t block = 0;           // pointwise: threads a block
  int vector_width = 0;        // pointwise: 1 keeps to the scalar form
  int64_t waves = 0;           // pointwise: waves of resident blocks (so, elements a thread)
  int64_t team = 0;            // reductions: threads that fold one row (1, 32, or 64 to 1024: a block)
  int64_t rows_per_block = 0;  // reductions of a thread or a warp a row
  int64_t split = 0;           // splittable reductions: blocks that share a row (each folds a
                               // slice; the row's last block folds their partials in slice order)
};
std::string config_name(const KernelConfig& c);  // "block 256 waves 8 vector 4", for logs and tests

// The grid for `instance`, a concrete kernel of the structure `c` was emitted for: 0 when
// there is nothing to do.
int64_t launch_grid(const CudaKernel& c, const Kernel& instance);

struct CudaModule {
  std::string source;  // one translation unit: prelude, op functions, kernels
  std::string arch;
  std::vector<CudaKernel> kernels;  // in plan.kernels order
  // A module of many functions is also cut into parts, each a translation unit of its own (the
  // prelude, the op functions, its share of the kernels) that NVRTC compiles on a thread of its
  // own; the CUBIN is then their pack (jit/cuda/backend.hpp). Empty: one part, `source`.
  std::vector<std::string> parts;
};

// Plans for CUDA code. Its kernels do not use Kernel::chunk (a template keeps it as a parameter):
// the plan is cut as for CPUs (threads, 512-element blocks): it does not depend on the device.
ScheduleTarget schedule_target(int threads);

// Emits CUDA C for every kernel of the plan, kernel i with configs[i] when given; kernels of the
// same code (but their names) share one function. Throws cr::Error for what it cannot emit yet.
CudaModule emit_plan(const Plan& plan, const Target& target = {}, const std::vector<KernelConfig>& configs = {});

// One module of kernel k of the plan in each of `configs`: its kernel j is k in configs[j], named
// `<name>_t<j>` (autotuning compiles a kernel's candidates with one NVRTC call).
CudaModule emit_candidates(const Plan& plan, size_t k, const Target& target, const std::vector<KernelConfig>& configs);

// The configurations autotuning tries for a kernel that emit_plan emitted with the heuristic
// (`c`), the heuristic's first: block size, waves and vector width of pointwise kernels; the team
// (one thread, a warp, or a block per row: the split of a row's reduction), rows per block and
// the split of a row across blocks of reductions.
std::vector<KernelConfig> candidates(const CudaKernel& c);

// CRESCENT_LOGS=output_code: the launch table, then the source.
std::string render(const CudaModule& m);

}  // namespace cr::jit::cuda
