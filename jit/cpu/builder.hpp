// libgccjit building blocks of the CPU code generator (jit/cpu/emit.cpp writes kernels with
// them): the C types it uses, and a function being built - typed locals, constants, casts,
// branch-free selects, and counted loops whose body is the current block.
#pragma once
#include "jit/cpu/gccjit.hpp"

#if CRESCENT_HAVE_GCCJIT
#include <string>
#include <vector>

#include "vm/dtype.hpp"

namespace cr::jit::cpu {

struct Types {
  gcc_jit_type *void_, *vptr, *vpp, *i64, *u64, *i32, *f32, *f64, *bool_, *block_fn, *reduce_fn, *stream_fn, *fence_fn, *params;
};

// The types of one context (make_types: once per context, shared by its functions).
Types make_types(const GccJit& J, gcc_jit_context* c);

// The exported function `name` of a kernel's signature (KernelFn), its parameters in `ps`.
gcc_jit_function* new_kernel_function(const GccJit& J, gcc_jit_context* c, const Types& t, const std::string& name, gcc_jit_param* ps[5]);
// Kernel `name` as a call of `code`, the function of an earlier kernel of the same code.
void emit_call_of(const GccJit& J, gcc_jit_context* c, const Types& t, const std::string& name, gcc_jit_function* code);

class FunctionBuilder {
 protected:
  FunctionBuilder(const GccJit& J, gcc_jit_context* c, const Types& t) : J(J), c_(c), t_(t) {}

  gcc_jit_type* type(DType d) const;  // throws for dtypes without CPU code (float16 / bfloat16)
  gcc_jit_lvalue* local(gcc_jit_type* ty, const std::string& name);
  gcc_jit_rvalue* i64(int64_t x) { return J.context_new_rvalue_from_long(c_, t_.i64, long(x)); }
  gcc_jit_rvalue* bin(gcc_jit_type* ty, enum gcc_jit_binary_op op, gcc_jit_rvalue* a, gcc_jit_rvalue* b) {
    return J.context_new_binary_op(c_, nullptr, op, ty, a, b);
  }
  gcc_jit_rvalue* assign(gcc_jit_rvalue* v, gcc_jit_type* ty, const char* name);  // a local set to v, in cur_
  gcc_jit_rvalue* constant(double x, DType d);
  gcc_jit_rvalue* cast(gcc_jit_rvalue* v, DType from, DType to);
  // c ? a : b without a branch: a bit blend (vectorises; a branch here would not if-convert)
  gcc_jit_rvalue* select(gcc_jit_rvalue* c, gcc_jit_rvalue* a, gcc_jit_rvalue* b, DType d);
  gcc_jit_rvalue* vptr(gcc_jit_lvalue* l) { return J.context_new_cast(c_, nullptr, J.lvalue_get_address(l, nullptr), t_.vptr); }
  // for (var = lo; var < hi; var += step) { <body: cur_> ... close_loop() }
  void open_loop(gcc_jit_lvalue* var, gcc_jit_rvalue* lo, gcc_jit_rvalue* hi, int64_t step);
  void close_loop();
  void clamp_above(gcc_jit_lvalue* v, gcc_jit_rvalue* limit);  // if (v > limit) v = limit;

  struct Loop {
    gcc_jit_lvalue* var;
    gcc_jit_block *cond, *after;
    int64_t step;
  };
  const GccJit& J;
  gcc_jit_context* c_;
  const Types& t_;
  gcc_jit_function* fn_ = nullptr;
  gcc_jit_block* cur_ = nullptr;  // where the next statements go
  std::vector<Loop> loops_;
  int counter_ = 0;  // (unique local names)
};

}  // namespace cr::jit::cpu

#endif
