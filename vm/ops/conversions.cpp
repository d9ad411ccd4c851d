// Conversions and copies: to, float/double/half/bfloat16/int/long/bool, cpu/cuda, contiguous,
// clone, and the in-place copy_, fill_, zero_.
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

// Each conversion's rule: the metadata of the copy it makes (contiguous, x's sizes), or false
// when it returns x itself. The op and graph replay with symbolic sizes (OpDef::conversion,
// vm/graph/shapes.cpp) both follow it.

// x:to(dtype | device | {dtype =, device =}): x itself when nothing changes.
bool convert_to(OpCall& c, Meta* m) {
  Tensor x = c.tensor(0);
  DType dtype = x.dtype();
  Device device = x.device();
  if (c.has(1)) {
    std::string s = c.str(1);
    const bool device_like = s.rfind("cpu", 0) == 0 || s.rfind("cuda", 0) == 0;
    if (device_like) device = parse_device(s);
    else if (!parse_dtype(s, &dtype))
      fail(cat("expected a dtype (float32, float64, float16, bfloat16, int32, int64, bool) or a device (\"cpu\", ",
               "\"cuda\", \"cuda:N\"), got \"", s, "\""));
  }
  if (c.has(2)) dtype = dtype_named(c.str(2));
  if (c.has(3)) device = parse_device(c.str(3));
  *m = Meta{x.sizes(), dtype, device};
  return !(dtype == x.dtype() && device == x.device());
}

// x:float(), x:long(), ...
template <DType D> bool convert_as(OpCall& c, Meta* m) {
  Tensor x = c.tensor(0);
  *m = Meta{x.sizes(), D, x.device()};
  return x.dtype() != D;
}

// x:cpu() / x:cuda(): x itself when it is there already, else a copy.
template <int8_t Type> bool convert_move(OpCall& c, Meta* m) {
  Tensor x = c.tensor(0);
  *m = Meta{x.sizes(), x.dtype(), Device{Type, 0}};
  return x.device().type != Type;
}

bool convert_contiguous(OpCall& c, Meta* m) {
  Tensor x = c.tensor(0);
  *m = Meta{x.sizes(), x.dtype(), x.device()};
  return !x.is_contiguous();
}

template <bool (*Rule)(OpCall&, Meta*)> void run_convert(OpCall& c) {
  Tensor x = c.tensor(0);
  Meta m;
  if (!Rule(c, &m)) return c.outs.push_back(x);
  Tensor out = Tensor::empty(m.sizes, m.dtype, m.device);
  copy_into(out, x);
  c.outs.push_back(out);
}
template <bool (*Rule)(OpCall&, Meta*)> OpDef conversion(const char* name, const char* schema, int32_t flags) {
  OpDef def{name, schema, OpKind::Convert, flags, nullptr, run_convert<Rule>};
  def.conversion = Rule;
  return def;
}

std::vector<Meta> infer_clone(OpCall& c) {
  Tensor x = c.tensor(0);
  return {{x.sizes(), x.dtype(), x.device()}};
}
void run_clone(OpCall& c) { copy_into(c.outs[0], c.tensor(0)); }

// x:copy_(src): src broadcast to x's shape, converted to x's dtype
void run_copy_(OpCall& c) {
  Tensor self = writable(c, 0);
  Operand src = operand(c, 1);
  if (!src.is_tensor()) check_scalar_fits(src.num, self.dtype());
  Tensor s = materialize(src, src.is_tensor() ? src.t.dtype() : self.dtype());
  broadcast_strides(s, self.sizes());  // throws with both shapes when src does not broadcast
  // x:copy_(x) (DDP's bucket view that is already the gradient) changes nothing: no copies
  const bool same = s.storage() == self.storage() && s.offset() == self.offset() && s.dtype() == self.dtype() &&
                    s.strides() == self.strides();
  if (same) return;
  if (s.storage() == self.storage()) {  // may overlap: read the source out first
    Tensor tmp = Tensor::empty(s.sizes(), s.dtype(), s.device());
    copy_into(tmp, s);
    s = tmp;
  }
  copy_into(self, s);
}

// (an expanded self is filled too, as PyTorch's: its aliased elements all take the one value)
void run_fill_(OpCall& c) {
  Tensor self = c.tensor(0);
  Operand v = operand(c, 1);
  if (v.is_tensor()) {
    if (v.t.numel() != 1) fail(cat("value expected a number or a 1-element tensor, got ", v.t.describe()));
    copy_into(self, v.t);
    return;
  }
  check_scalar_fits(v.num, self.dtype());
  fill(self, v.num);
}
void run_zero_(OpCall& c) { fill(c.tensor(0), 0); }

}  // namespace

void register_conversions(Registry& r) {
  const int m = kNoFunction;
  r.add(conversion<convert_to>("to", "self:T, target:S?, opts:{dtype:S, device:S}", m));
  r.add(conversion<convert_as<DType::f32>>("float", "self:T", m));
  r.add(conversion<convert_as<DType::f64>>("double", "self:T", m));
  r.add(conversion<convert_as<DType::f16>>("half", "self:T", m));
  r.add(conversion<convert_as<DType::bf16>>("bfloat16", "self:T", m));
  r.add(conversion<convert_as<DType::i32>>("int", "self:T", m));
  r.add(conversion<convert_as<DType::i64>>("long", "self:T", m));
  r.add(conversion<convert_as<DType::b8>>("bool", "self:T", m));
  r.add(conversion<convert_move<0>>("cpu", "self:T", m));
  r.add(conversion<convert_move<1>>("cuda", "self:T", m));
  r.add(conversion<convert_contiguous>("contiguous", "self:T", 0));
  r.add(OpDef{"clone", "self:T", OpKind::Convert, 0, infer_clone, run_clone});
  r.add(OpDef{"copy_", "self:T, src:TN", OpKind::Convert, kReturnsSelf | m, nullptr, run_copy_});
  r.add(OpDef{"fill_", "self:T, value:TN", OpKind::Convert, kReturnsSelf | m, nullptr, run_fill_});
  r.add(OpDef{"zero_", "self:T", OpKind::Convert, kReturnsSelf | m, nullptr, run_zero_});
}

}  // namespace cr
