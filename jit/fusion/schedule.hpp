// The fusion scheduler (DESIGN.md: "which loop nodes become one kernel, in what order, with what
// buffers"). Input: a LoopGraph. Output: a Plan - kernels and external steps in execution order,
// the buffers they read and write, and when each temporary buffer can be released.
//
// Grouping is greedy in graph order: a computed value joins the kernel being built when its
// iteration space fits (the same shape; a reduction's input shape with the same reduced dims;
// a reduction's output shape, computed once per row) and every value it reads either comes
// from an earlier step or can be computed inside the kernel at the index it needs (views fold
// into indices; a reduction of this kernel is read at its own row). That covers vertical
// fusion (producer into consumer), horizontal fusion (siblings of the same shape), pointwise
// prologues of reductions and epilogues after them - softmax and layer_norm become one kernel
// with one loop per pass the math needs. An extern step (matmul, cat, ...) ends the kernel.
// A value is stored only when something outside its kernel needs it.
#pragma once
#include "jit/loop_ir.hpp"

namespace cr::jit {

constexpr int kMaxNodesPerKernel = 64;  // keeps one kernel's compile time bounded

struct Buffer {
  int32_t gv = -1;  // graph value whose tensor holds it (inputs, constants, extern outputs,
                    // stored values that have one); -1: a temporary, contiguous
  int32_t lv = -1;  // loop value
  bool computed = false;  // written by a kernel of the plan (allocated by the program)
  bool check = false;     // the plan's check word (vm/checks.hpp), provided by the program
  bool runtime = false;   // the run's values (EOp::Runtime: 2 per draw), provided by the program
  bool numbers = false;   // the run's operand numbers (EOp::Number: float64 bits), likewise
  Shape sizes, strides;   // layout over the storage (element units)
  int64_t offset = 0;
  DType dtype = DType::f32;
};

struct PlanStep {
  int32_t kernel = -1;  // a kernel, or
  int32_t node = -1;    // a graph node run by the eager kernels
  std::vector<int32_t> release;  // temporary buffers dead after this step
};

struct Plan {
  LoopGraph lg;
  std::vector<Kernel> kernels;
  std::vector<Buffer> buffers;
  std::vector<int32_t> buffer_of;  // loop value -> buffer (-1: computed inside kernels only)
  std::vector<PlanStep> steps;
  std::vector<std::string> log;  // CRESCENT_LOGS=fusion: what fused, what did not and why
  // Dynamic graphs (graph::Graph::dynamic): per kernel, its parametrized form, compiled and used
  // as the cache key, and its parameter values for this instance (jit/loop_ir.hpp). Empty for
  // graphs specialised on their sizes, whose kernels are compiled as they are.
  std::vector<Kernel> templates;
  std::vector<std::vector<int64_t>> params;
  // The kernel code generators emit: the template of kernel i when there is one.
  const Kernel& code(size_t i) const { return templates.empty() ? kernels[i] : templates[i]; }
};

// What the scheduler takes from the backend that runs the plan (cpu::schedule_target, ...).
struct ScheduleTarget {
  int threads = 1;    // workers sharing a kernel's work items
  int64_t block = 0;  // the innermost loop's unit of work: its chunks are multiples (0: no chunks)
};

// Throws cr::Error when the graph cannot be scheduled (the caller runs it eagerly).
Plan schedule(LoopGraph lg, const ScheduleTarget& target);

}  // namespace cr::jit
