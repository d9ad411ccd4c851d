#include "vm/ops/operands.hpp"

#include <cmath>

namespace cr {

Operand operand(const OpCall& c, int i) {
  Operand o;
  if (c.is_tensor(i)) o.t = c.tensor(i);
  else if (c.has(i) && c.args[i].tag == kBool) { o.num = c.args[i].num; o.is_bool = true; }
  else if (c.has(i) && c.args[i].tag == kNumber) o.num = c.args[i].num;
  else fail(cat("argument ", i + 1, " (", c.arg_name(i), ") expected a tensor or a number, got ",
                i < c.nargs ? value_kind(c.args[i]) : std::string("nothing")));
  return o;
}

namespace {
constexpr int kUndef = -1;
int promote_u(int a, int b) { return a == kUndef ? b : b == kUndef ? a : int(promote(DType(a), DType(b))); }
int combine_categories(int higher, int lower) {
  if (higher == kUndef) return lower;
  if (lower == kUndef) return higher;
  if (is_floating(DType(higher))) return higher;
  if (DType(higher) == DType::b8 || is_floating(DType(lower))) return promote_u(higher, lower);
  return higher;
}
}  // namespace

DType result_type(std::initializer_list<const Operand*> ops) {
  int dim = kUndef, zero = kUndef, wrapped = kUndef;
  for (const Operand* o : ops) {
    if (!o) continue;
    if (o->is_tensor()) {
      int& slot = o->t.dim() > 0 ? dim : zero;
      slot = promote_u(slot, int(o->t.dtype()));
    } else {
      DType d = o->is_bool ? DType::b8 : (o->num == std::floor(o->num) ? DType::i64 : DType::f32);
      wrapped = promote_u(wrapped, int(d));
    }
  }
  int r = combine_categories(dim, combine_categories(zero, wrapped));
  return r == kUndef ? DType::f32 : DType(r);
}

Shape broadcast_operands(std::initializer_list<const Operand*> ops, Device* device) {
  Shape s;
  bool first = true;
  for (const Operand* o : ops) {
    if (!o || !o->is_tensor()) continue;
    if (first) *device = o->t.device();
    else if (!(o->t.device() == *device))
      fail(cat("expected all tensors on one device, got ", device_name(*device), " and ", device_name(o->t.device())));
    s = first ? o->t.sizes() : broadcast_shapes(s, o->t.sizes());
    first = false;
  }
  return s;
}

Tensor materialize(const Operand& o, DType dtype) {
  if (o.is_tensor()) return cast(o.t, dtype);
  return scalar_tensor(o.num, dtype);
}

std::string dtype_list_error(const char* what, DType d) { return cat("expected ", what, ", got a ", dtype_name(d), " tensor"); }

}  // namespace cr
