#include "jit/cpu/builder.hpp"

#if CRESCENT_HAVE_GCCJIT
#include <limits>

#include "vm/error.hpp"

namespace cr::jit::cpu {

gcc_jit_function* new_kernel_function(const GccJit& J, gcc_jit_context* c, const Types& t, const std::string& name, gcc_jit_param* ps[5]) {
  ps[0] = J.context_new_param(c, nullptr, t.vpp, "bufs");
  ps[1] = J.context_new_param(c, nullptr, t.vpp, "fns");
  ps[2] = J.context_new_param(c, nullptr, t.params, "P");
  ps[3] = J.context_new_param(c, nullptr, t.i64, "w0");
  ps[4] = J.context_new_param(c, nullptr, t.i64, "w1");
  return J.context_new_function(c, nullptr, GCC_JIT_FUNCTION_EXPORTED, t.void_, name.c_str(), 5, ps, 0);
}

void emit_call_of(const GccJit& J, gcc_jit_context* c, const Types& t, const std::string& name, gcc_jit_function* code) {
  gcc_jit_param* ps[5];
  gcc_jit_function* f = new_kernel_function(J, c, t, name, ps);
  gcc_jit_rvalue* args[5];
  for (int i = 0; i < 5; ++i) args[i] = J.param_as_rvalue(ps[i]);
  gcc_jit_block* b = J.function_new_block(f, "entry");
  J.block_add_eval(b, nullptr, J.context_new_call(c, nullptr, code, 5, args));
  J.block_end_with_void_return(b, nullptr);
}

Types make_types(const GccJit& J, gcc_jit_context* c) {
  Types t;
  t.void_ = J.context_get_type(c, GCC_JIT_TYPE_VOID);
  t.vptr = J.context_get_type(c, GCC_JIT_TYPE_VOID_PTR);
  t.vpp = J.type_get_pointer(t.vptr);
  t.i64 = J.context_get_int_type(c, 8, 1);
  t.u64 = J.context_get_int_type(c, 8, 0);
  t.i32 = J.context_get_int_type(c, 4, 1);
  t.f32 = J.context_get_type(c, GCC_JIT_TYPE_FLOAT);
  t.f64 = J.context_get_type(c, GCC_JIT_TYPE_DOUBLE);
  t.bool_ = J.context_get_type(c, GCC_JIT_TYPE_BOOL);
  gcc_jit_type* bp[4] = {t.vptr, t.vptr, t.vptr, t.i64};
  t.block_fn = J.context_new_function_ptr_type(c, nullptr, t.void_, 4, bp, 0);
  gcc_jit_type* rp[3] = {t.vptr, t.i64, t.vptr};
  t.reduce_fn = J.context_new_function_ptr_type(c, nullptr, t.void_, 3, rp, 0);
  gcc_jit_type* sp[3] = {t.vptr, t.vptr, t.i64};
  t.stream_fn = J.context_new_function_ptr_type(c, nullptr, t.void_, 3, sp, 0);
  t.fence_fn = J.context_new_function_ptr_type(c, nullptr, t.void_, 0, nullptr, 0);
  t.params = J.type_get_pointer(J.type_get_const(t.i64));
  return t;
}

gcc_jit_type* FunctionBuilder::type(DType d) const {
  switch (d) {
    case DType::f32: return t_.f32;
    case DType::f64: return t_.f64;
    case DType::i32: return t_.i32;
    case DType::i64: return t_.i64;
    case DType::b8: return t_.bool_;
    default: throw Error(cat("no CPU code for dtype ", dtype_name(d)));
  }
}
gcc_jit_lvalue* FunctionBuilder::local(gcc_jit_type* ty, const std::string& name) {
  return J.function_new_local(fn_, nullptr, ty, cat(name, "_", ++counter_).c_str());
}
gcc_jit_rvalue* FunctionBuilder::assign(gcc_jit_rvalue* v, gcc_jit_type* ty, const char* name) {
  gcc_jit_lvalue* l = local(ty, name);
  J.block_add_assignment(cur_, nullptr, l, v);
  return J.lvalue_as_rvalue(l);
}
gcc_jit_rvalue* FunctionBuilder::constant(double x, DType d) {
  switch (d) {
    case DType::f32:
    case DType::f64: return J.context_new_rvalue_from_double(c_, type(d), x);
    case DType::b8: return J.context_new_rvalue_from_int(c_, t_.bool_, x != 0);
    default:  // integer limits arrive as doubles (2^63 is not an int64): clamp
      return J.context_new_rvalue_from_long(c_, type(d), x >= 9.2e18 ? std::numeric_limits<long>::max() : x <= -9.2e18 ? std::numeric_limits<long>::min() : long(x));
  }
}
gcc_jit_rvalue* FunctionBuilder::cast(gcc_jit_rvalue* v, DType from, DType to) {
  if (from == to) return v;
  if (to == DType::b8) return J.context_new_comparison(c_, nullptr, GCC_JIT_COMPARISON_NE, v, constant(0, from));
  if (from == DType::b8 && is_floating(to)) v = J.context_new_cast(c_, nullptr, v, t_.i32);  // no bool -> float cast
  return J.context_new_cast(c_, nullptr, v, type(to));
}
void FunctionBuilder::open_loop(gcc_jit_lvalue* var, gcc_jit_rvalue* lo, gcc_jit_rvalue* hi, int64_t step) {
  J.block_add_assignment(cur_, nullptr, var, lo);
  gcc_jit_block* cond = J.function_new_block(fn_, nullptr);
  gcc_jit_block* body = J.function_new_block(fn_, nullptr);
  gcc_jit_block* after = J.function_new_block(fn_, nullptr);
  J.block_end_with_jump(cur_, nullptr, cond);
  J.block_end_with_conditional(cond, nullptr, J.context_new_comparison(c_, nullptr, GCC_JIT_COMPARISON_LT, J.lvalue_as_rvalue(var), hi), body, after);
  loops_.push_back({var, cond, after, step});
  cur_ = body;
}
void FunctionBuilder::clamp_above(gcc_jit_lvalue* v, gcc_jit_rvalue* limit) {
  gcc_jit_block* clip = J.function_new_block(fn_, nullptr);
  gcc_jit_block* next = J.function_new_block(fn_, nullptr);
  J.block_end_with_conditional(cur_, nullptr, J.context_new_comparison(c_, nullptr, GCC_JIT_COMPARISON_GT, J.lvalue_as_rvalue(v), limit), clip, next);
  J.block_add_assignment(clip, nullptr, v, limit);
  J.block_end_with_jump(clip, nullptr, next);
  cur_ = next;
}
void FunctionBuilder::close_loop() {
  Loop l = loops_.back();
  loops_.pop_back();
  J.block_add_assignment_op(cur_, nullptr, l.var, GCC_JIT_BINARY_OP_PLUS, i64(l.step));
  J.block_end_with_jump(cur_, nullptr, l.cond);
  cur_ = l.after;
}

gcc_jit_rvalue* FunctionBuilder::select(gcc_jit_rvalue* c, gcc_jit_rvalue* a, gcc_jit_rvalue* b, DType d) {
  if (d == DType::b8)
    return bin(t_.bool_, GCC_JIT_BINARY_OP_LOGICAL_OR, bin(t_.bool_, GCC_JIT_BINARY_OP_LOGICAL_AND, c, a),
               bin(t_.bool_, GCC_JIT_BINARY_OP_LOGICAL_AND, J.context_new_unary_op(c_, nullptr, GCC_JIT_UNARY_OP_LOGICAL_NEGATE, t_.bool_, c), b));
  gcc_jit_type* it = d == DType::f32 || d == DType::i32 ? t_.i32 : t_.i64;
  bool fp = is_floating(d);
  if (fp) {
    a = J.context_new_bitcast(c_, nullptr, a, it);
    b = J.context_new_bitcast(c_, nullptr, b, it);
  }
  gcc_jit_rvalue* m = J.context_new_unary_op(c_, nullptr, GCC_JIT_UNARY_OP_MINUS, it, J.context_new_cast(c_, nullptr, c, it));
  gcc_jit_rvalue* r = bin(it, GCC_JIT_BINARY_OP_BITWISE_OR, bin(it, GCC_JIT_BINARY_OP_BITWISE_AND, a, m),
                          bin(it, GCC_JIT_BINARY_OP_BITWISE_AND, b, J.context_new_unary_op(c_, nullptr, GCC_JIT_UNARY_OP_BITWISE_NEGATE, it, m)));
  return fp ? J.context_new_bitcast(c_, nullptr, r, type(d)) : r;
}

}  // namespace cr::jit::cpu

#endif
