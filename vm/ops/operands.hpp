// Shared helpers of the op families: tensor-or-number operands, PyTorch's result-type rule
// with weak Lua scalars, and dtype-restricted visitors.
#pragma once
#include <initializer_list>

#include "vm/kernels/loop.hpp"
#include "vm/registry.hpp"

namespace cr {

// An argument that is a tensor or a Lua number / boolean ("weak" scalar).
struct Operand {
  Tensor t;  // undefined for scalars
  double num = 0;
  bool is_bool = false;
  bool is_tensor() const { return t.defined(); }
};
Operand operand(const OpCall& c, int i);

// PyTorch's result_type: dimensioned tensors > 0-d tensors > scalars, by category.
DType result_type(std::initializer_list<const Operand*> ops);
// The same rule from metadata only (the code generators): per operand its rank class and dtype
// (a Lua number: DType::b8 for a boolean, i64 for an integral number, else f32).
enum class OperandClass : uint8_t { Dimensioned, ZeroDim, Scalar };
struct OperandType {
  OperandClass cls;
  DType dtype;
};
DType result_type(const std::vector<OperandType>& ops);
// The dtype a Lua number or boolean counts as in result_type.
DType scalar_dtype(double v, bool is_bool);
// Broadcast shape of the tensor operands; checks they share a device.
Shape broadcast_operands(std::initializer_list<const Operand*> ops, Device* device);
// The operand as a tensor of dtype (scalars become 0-d tensors).
Tensor materialize(const Operand& o, DType dtype);
// True for a Lua number that counts as an integer scalar (integral and within int64).
bool scalar_is_integral(double v);
// fill_ / full: the value must be representable in dtype (PyTorch's "without overflow" check).
void check_scalar_fits(double v, DType dtype);
bool scalar_fits(double v, DType dtype);  // (the test of check_scalar_fits)

// visitors that instantiate only the dtypes an op accepts
template <class F> decltype(auto) visit_floating(DType d, F&& f) {
  switch (d) {
    case DType::f64: return f(double{});
    case DType::f16: return f(Half{});
    case DType::bf16: return f(BFloat16{});
    default: return f(float{});
  }
}
template <class F> decltype(auto) visit_numeric(DType d, F&& f) {  // all but bool
  switch (d) {
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    default: return visit_floating(d, f);
  }
}

// A tensor seen as {outer, n, inner} around dim d (the ops along one dim: scans, sorting).
struct Along {
  int64_t outer = 1, n = 1, inner = 1;
};
Along along(const Tensor& x, int d);

// The tensor an in-place op writes: rejects expanded views, where one memory slot is several
// elements (PyTorch raises too: the result would depend on the write order).
Tensor writable(const OpCall& c, int i);

std::string dtype_list_error(const char* what, DType d);  // "expected a floating tensor, got int32"

// An op called from another op's kernel (composites): its arguments, and the call (one output).
cr_value tensor_arg(const Tensor& t);
cr_value number_arg(double x);
Tensor call(Context& ctx, const char* op, std::initializer_list<cr_value> args);

}  // namespace cr
