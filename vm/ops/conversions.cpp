// Conversions and copies: to, float/double/half/bfloat16/int/long/bool, cpu/cuda, contiguous,
// clone, and the in-place copy_, fill_, zero_.
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

// x:to(dtype | device | {dtype =, device =}): returns x itself when nothing changes.
void run_to(OpCall& c) {
  Tensor x = c.tensor(0);
  DType dtype = x.dtype();
  Device device = x.device();
  if (c.has(1)) {
    std::string s = c.str(1);
    if (!parse_dtype(s, &dtype)) device = parse_device(s);
  }
  if (c.has(2) && !parse_dtype(c.str(2), &dtype)) fail(cat("unknown dtype \"", c.str(2), "\""));
  if (c.has(3)) device = parse_device(c.str(3));
  if (!(device == x.device())) {
    Tensor moved = Tensor::empty(x.sizes(), dtype, device);
    copy_into(moved, x);
    c.outs.push_back(moved);
    return;
  }
  c.outs.push_back(cast(x, dtype));
}

template <DType D> void run_as(OpCall& c) { c.outs.push_back(cast(c.tensor(0), D)); }

// x:cpu() / x:cuda(): x itself when it is there already, else a copy.
template <int8_t Type> void run_move(OpCall& c) {
  Tensor x = c.tensor(0);
  const Device d{Type, 0};
  if (x.device().type == Type) return c.outs.push_back(x);
  Tensor moved = Tensor::empty(x.sizes(), x.dtype(), d);
  copy_into(moved, x);
  c.outs.push_back(moved);
}

void run_contiguous(OpCall& c) { c.outs.push_back(contiguous(c.tensor(0))); }

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
  if (s.storage() == self.storage()) {  // may overlap: read the source out first
    Tensor tmp = Tensor::empty(s.sizes(), s.dtype(), s.device());
    copy_into(tmp, s);
    s = tmp;
  }
  copy_into(self, s);
}

void run_fill_(OpCall& c) {
  Tensor self = writable(c, 0);
  Operand v = operand(c, 1);
  if (v.is_tensor()) {
    if (v.t.numel() != 1) fail(cat("value expected a number or a 1-element tensor, got ", v.t.describe()));
    copy_into(self, v.t);
    return;
  }
  check_scalar_fits(v.num, self.dtype());
  fill(self, v.num);
}
void run_zero_(OpCall& c) { fill(writable(c, 0), 0); }

}  // namespace

void register_conversions(Registry& r) {
  const int m = kNoFunction;
  r.add(OpDef{"to", "self:T, target:S?, opts:{dtype:S, device:S}", OpKind::Convert, m, nullptr, run_to});
  r.add(OpDef{"float", "self:T", OpKind::Convert, m, nullptr, run_as<DType::f32>});
  r.add(OpDef{"double", "self:T", OpKind::Convert, m, nullptr, run_as<DType::f64>});
  r.add(OpDef{"half", "self:T", OpKind::Convert, m, nullptr, run_as<DType::f16>});
  r.add(OpDef{"bfloat16", "self:T", OpKind::Convert, m, nullptr, run_as<DType::bf16>});
  r.add(OpDef{"int", "self:T", OpKind::Convert, m, nullptr, run_as<DType::i32>});
  r.add(OpDef{"long", "self:T", OpKind::Convert, m, nullptr, run_as<DType::i64>});
  r.add(OpDef{"bool", "self:T", OpKind::Convert, m, nullptr, run_as<DType::b8>});
  r.add(OpDef{"cpu", "self:T", OpKind::Convert, m, nullptr, run_move<0>});
  r.add(OpDef{"cuda", "self:T", OpKind::Convert, m, nullptr, run_move<1>});
  r.add(OpDef{"contiguous", "self:T", OpKind::Convert, 0, nullptr, run_contiguous});
  r.add(OpDef{"clone", "self:T", OpKind::Convert, 0, infer_clone, run_clone});
  r.add(OpDef{"copy_", "self:T, src:TN", OpKind::Convert, kReturnsSelf | m, nullptr, run_copy_});
  r.add(OpDef{"fill_", "self:T, value:TN", OpKind::Convert, kReturnsSelf | m, nullptr, run_fill_});
  r.add(OpDef{"zero_", "self:T", OpKind::Convert, kReturnsSelf | m, nullptr, run_zero_});
}

}  // namespace cr
