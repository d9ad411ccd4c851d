// Autocast in the op-call path (autocast.hpp): PyTorch's cached_cast / promote_type without the
// cache of weight casts.
#include "vm/autograd/autocast.hpp"

#include "vm/autograd/call.hpp"

namespace cr::autograd {

namespace {

// The device type whose autocast applies to the call (the first tensor argument's), -1: none.
int call_device(const cr_value* args, int nargs) {
  for (int i = 0; i < nargs; ++i) {
    if (args[i].tag == kTensor) return static_cast<const cr_tensor*>(args[i].ptr)->_dev_type;
    if (args[i].tag == kTensors && args[i].n > 0) return static_cast<cr_tensor* const*>(args[i].ptr)[0]->_dev_type;
  }
  return -1;
}

thread_local int device = 1;  // the device type of the call being cast

// PyTorch's is_eligible: a floating tensor on the autocast device, not float64.
bool eligible(const cr_tensor* p) {
  Tensor t(const_cast<cr_tensor*>(p), true);
  return is_floating(t.dtype()) && t.dtype() != DType::f64 && t.device().type == device;
}

template <class F> void each_eligible(const cr_value* args, int nargs, F&& f) {
  for (int i = 0; i < nargs; ++i) {
    if (args[i].tag == kTensor) {
      if (eligible(static_cast<cr_tensor*>(args[i].ptr))) f(static_cast<cr_tensor*>(args[i].ptr));
    } else if (args[i].tag == kTensors) {
      for (int j = 0; j < args[i].n; ++j)
        if (eligible(static_cast<cr_tensor* const*>(args[i].ptr)[j])) f(static_cast<cr_tensor* const*>(args[i].ptr)[j]);
    }
  }
}

DType dtype_of(const cr_tensor* p) { return Tensor(const_cast<cr_tensor*>(p), true).dtype(); }

DType target(CastPolicy p, const cr_value* args, int nargs) {
  const DType low = autocast.dev[device].dtype;
  if (p == CastPolicy::Lower) return low;
  if (p == CastPolicy::Float32 || p == CastPolicy::Float32Dtype) return DType::f32;
  DType t = low;  // Promote: the widest eligible argument, from the lower precision up
  each_eligible(args, nargs, [&](const cr_tensor* x) { t = promote(t, dtype_of(x)); });
  return t;
}

int conversion_op(DType d) {
  switch (d) {
    case DType::f32: return op_id("float");
    case DType::f16: return op_id("half");
    case DType::bf16: return op_id("bfloat16");
    default: fail("autocast: internal: no conversion to this dtype");
  }
}

// x in dtype `to` (x itself when eligible with that dtype already, or not eligible), through the
// op-call path so that autograd and capture see the conversion.
cr_tensor* cast(Context& ctx, cr_tensor* x, DType to, std::vector<Tensor>& keep) {
  if (!eligible(x) || dtype_of(x) == to) return x;
  cr_value v{kTensor, 0, 0, x, nullptr};
  std::vector<Tensor> out;
  call_plain(ctx, conversion_op(to), &v, 1, out);
  keep.push_back(out.at(0));
  return keep.back().get();
}

// Float32Dtype: the op's `dtype` argument set to `to` where its first argument is eligible and
// narrower (a dtype the caller gave is kept: PyTorch's autocast leaves explicit dtypes alone).
void set_dtype_arg(const OpDef& def, std::vector<cr_value>& a, DType to) {
  if (a.empty() || a[0].tag != kTensor) return;
  const cr_tensor* x = static_cast<const cr_tensor*>(a[0].ptr);
  if (!eligible(x) || promote(dtype_of(x), to) != to || dtype_of(x) == to) return;
  const size_t slot = size_t(def.dtype_arg);  // (Registry::set_cast checked it is one)
  if (a.size() <= slot) a.resize(slot + 1, cr_value{kNone, 0, 0, nullptr, nullptr});
  if (a[slot].tag == kNone) a[slot] = cr_value{kString, 0, 0, nullptr, dtype_name(to)};
}

}  // namespace

void call_autocast(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>& outs) {
  const int type = call_device(args, nargs);
  if (type < 0 || type > 1 || !autocast.dev[type].enabled) return call_plain(ctx, op, args, nargs, outs);
  const OpDef& def = Registry::get().ops()[size_t(op)];
  const CastPolicy p = type == 0 ? def.cast_cpu : def.cast;
  if (p == CastPolicy::None) return call_plain(ctx, op, args, nargs, outs);
  device = type;
  const DType to = target(p, args, nargs);
  std::vector<cr_value> a(args, args + nargs);
  std::vector<Tensor> keep;                    // the casts, alive until the op has run
  std::vector<std::vector<cr_tensor*>> lists;  // cast copies of tensor lists
  lists.reserve(size_t(nargs));
  if (p == CastPolicy::Float32Dtype) set_dtype_arg(def, a, to);
  for (size_t i = p == CastPolicy::Float32Dtype ? 1 : 0; i < a.size(); ++i) {
    cr_value& v = a[i];
    if (v.tag == kTensor) {
      v.ptr = cast(ctx, static_cast<cr_tensor*>(v.ptr), to, keep);
    } else if (v.tag == kTensors) {
      auto* src = static_cast<cr_tensor* const*>(v.ptr);
      lists.emplace_back(src, src + v.n);
      for (cr_tensor*& x : lists.back()) x = cast(ctx, x, to, keep);
      v.ptr = lists.back().data();
    }
  }
  call_plain(ctx, op, a.data(), int(a.size()), outs);
}

}  // namespace cr::autograd
