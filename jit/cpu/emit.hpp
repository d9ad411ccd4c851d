// CPU code generation through libgccjit: every kernel of a plan becomes one exported function of
// one libgccjit context (one shared object per graph):
//
//   void kN(void** bufs, void** fns, const int64_t* P, int64_t w0, int64_t w1)
//
// runs work items [w0, w1) (an outer index, or an outer index and a chunk of the innermost loop);
// `bufs` are the storages of the kernel's buffer slots, `fns` the block functions and block
// reductions it calls (jit/cpu/helpers.hpp), in the order of FnTable, and `P` the values of the
// size parameters of a template (Plan::params of the kernel; unused, may be null, for kernels
// specialised on their sizes). The code of kernel i is Plan::code(i): one shared object serves
// every instance of a dynamic graph with the same templates.
#pragma once
#include <string>
#include <vector>

#include "jit/cpu/fns.hpp"
#include "jit/cpu/helpers.hpp"
#include "jit/fusion/schedule.hpp"

namespace cr::jit::cpu {

using KernelFn = void (*)(void** bufs, void** fns, const int64_t* P, int64_t w0, int64_t w1);

// Emits the plan's kernels and compiles them into the shared object `so_path`. Throws Error with
// libgccjit's message when it fails. `c_dump` (optional): libgccjit's C-like dump of the code.
// How compile_plan shapes the code: elements per block of the inner loops (kBlock) and the bytes
// from which stores stream (0: stream_store_bytes()); autotuning tries others (jit/autotune.hpp).
struct CodeShape {
  int64_t block = kBlock;
  int64_t stream_from = 0;
  int64_t streams_from() const;  // stream_from, or stream_store_bytes()
};
void compile_plan(const Plan& plan, const FnTable& fns, const std::string& so_path, const std::string& c_dump_path,
                  CodeShape shape = {});

// Kernel k's code but its name and its buffers' numbers: kernels with equal ones (a model's
// repeated layers) compile to one function (compile_plan).
std::string anonymous_code(const Kernel& k, int64_t block);

// Plans for generated CPU code: `threads` workers, chunks of whole blocks (kBlock).
ScheduleTarget schedule_target(int threads);

// "gcc 12 libgccjit, -march=x86-64-v3 -O3": part of the kernel cache key.
std::string compiler_id();

}  // namespace cr::jit::cpu
