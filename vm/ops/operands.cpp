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

DType scalar_dtype(double v, bool is_bool) { return is_bool ? DType::b8 : scalar_is_integral(v) ? DType::i64 : DType::f32; }

DType result_type(const std::vector<OperandType>& ops) {
  int slot[3] = {kUndef, kUndef, kUndef};  // dimensioned, 0-d, scalars
  for (const OperandType& o : ops) slot[int(o.cls)] = promote_u(slot[int(o.cls)], int(o.dtype));
  int r = combine_categories(slot[0], combine_categories(slot[1], slot[2]));
  return r == kUndef ? DType::f32 : DType(r);
}

DType result_type(std::initializer_list<const Operand*> ops) {
  std::vector<OperandType> types;
  for (const Operand* o : ops) {
    if (!o) continue;
    if (o->is_tensor()) types.push_back({o->t.dim() > 0 ? OperandClass::Dimensioned : OperandClass::ZeroDim, o->t.dtype()});
    else types.push_back({OperandClass::Scalar, scalar_dtype(o->num, o->is_bool)});
  }
  return result_type(types);
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

// Lua has one number type: a number is an integer scalar (int64, like a Python int) when it is
// integral and fits int64; inf, nan and 1e300 are floats.
bool scalar_is_integral(double v) { return v == std::floor(v) && std::fabs(v) < 9.2233720368547758e18; }

Tensor materialize(const Operand& o, DType dtype) {
  if (o.is_tensor()) return cast(o.t, dtype);
  double v = o.num;
  if (is_integral(dtype)) {
    // truncate like PyTorch, and wrap an int64 into int32 (converting an out-of-range double
    // straight to an integer type would be undefined behaviour)
    if (!(std::fabs(v) < 9.2233720368547758e18))
      fail(cat("value ", v, " cannot be converted to ", dtype_name(dtype), " without overflow"));
    v = std::trunc(v);
    if (dtype == DType::i32) v = double(int32_t(uint32_t(uint64_t(int64_t(v)))));
  }
  return scalar_tensor(v, dtype);
}

bool scalar_fits(double v, DType dtype) {
  bool ok = true;
  switch (dtype) {
    case DType::i32: ok = v >= -2147483648.0 && v <= 2147483647.0; break;  // false for nan
    case DType::i64: ok = v >= -9.2233720368547758e18 && v < 9.2233720368547758e18; break;
    case DType::f16: ok = !std::isfinite(v) || std::fabs(v) <= 65504.0; break;
    case DType::f32: ok = !std::isfinite(v) || std::fabs(v) <= 3.4028234663852886e38; break;
    case DType::bf16: ok = !std::isfinite(v) || std::fabs(v) <= 3.3895313892515355e38; break;
    default: break;  // float64 holds every Lua number; bool takes any value (v != 0)
  }
  return ok;
}

void check_scalar_fits(double v, DType dtype) {
  if (!scalar_fits(v, dtype)) fail(cat("value ", v, " cannot be converted to ", dtype_name(dtype), " without overflow"));
}

std::string dtype_list_error(const char* what, DType d) {
  const char* name = dtype_name(d);
  return cat("expected ", what, ", got ", name[0] == 'i' ? "an " : "a ", name, " tensor");
}

Tensor writable(const OpCall& c, int i) {
  Tensor t = c.tensor(i);
  if (t.numel() == 0) return t;  // (no element to write twice, as torch)
  for (int d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1)
      fail(cat("cannot write into an expanded tensor (dim ", d + 1, " has stride 0): clone() it first"));
  return t;
}

Along along(const Tensor& x, int d) {
  Along a;
  for (int k = 0; k < x.dim(); ++k) {
    if (k < d) a.outer *= x.size(k);
    else if (k == d) a.n = x.size(k);
    else a.inner *= x.size(k);
  }
  return a;
}

cr_value tensor_arg(const Tensor& t) {
  cr_value a{};
  a.tag = kTensor;
  a.ptr = t.get();
  return a;
}
cr_value number_arg(double x) {
  cr_value a{};
  a.tag = kNumber;
  a.num = x;
  return a;
}
Tensor call(Context& ctx, const char* op, std::initializer_list<cr_value> args) {
  return dispatch(ctx, Registry::get().index_of(op), std::data(args), int(args.size())).at(0);
}

}  // namespace cr
