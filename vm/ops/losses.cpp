// Fused cross_entropy with class indices (F.cross_entropy, stdlib/losses.lua, in eager mode):
//   _cross_entropy(input, target, weight?, ignore_index = -100, label_smoothing = 0,
//                  reduction = "mean", dtype = input's) -> loss, lse
//   _cross_entropy_backward(input, lse, target, a, b, k, weight?, pitch?) -> grad_input
// input {N, C, d...} (or {C}), target 1-based class indices of input's shape without the class
// dim (int64 / int32), weight {C}. lse is the logsumexp over the classes per position, kept for
// the backward in place of the log-probabilities: the gradient is one pass over the input,
//   grad = a * exp(input - lse) - b * one_hot(target) - k * weight
// with a, b, k per position (the rule, vm/ops/losses_grad.cpp, forms them from the reduction,
// the target's weights and label_smoothing). The forward is PyTorch's formula as registry ops
// on the input's device, never materialising the log-probabilities.
// dtype (float32 for a 16-bit input under autocast) is the dtype the loss is computed and
// returned in, as if the input were converted first (PyTorch's dtype= of log_softmax): lse, a, b,
// k and weight have it, while the input is read, and its gradient written, in its own dtype.
// pitch (a 2-d input {N, C}; a multiple of 16 bytes, at least C) makes the gradient {N, pitch}
// with zeros past C: its rows aligned for the products that read its first C columns.
//
//   _binary_cross_entropy(input, target) -> loss per element (F.binary_cross_entropy before its
//   weight and reduction): (target - 1) max(log(1 - input), -100) - target max(log(input), -100);
//   _binary_cross_entropy_backward(grad, input, target) -> grad (input - target) / max((1 - input)
//   input, 1e-12f): its input's gradient, as PyTorch's (finite at 0 and 1), and its derivatives
//   PyTorch's double backward (vm/ops/losses_grad.cpp has both rules).
#include <cmath>

#include "vm/autograd/grad_mode.hpp"
#include "vm/autograd/var.hpp"
#include "vm/kernels/cuda/cross_entropy.hpp"
#include "vm/ops/dense.hpp"
#include "vm/ops/losses.hpp"
#include "vm/ops/operands.hpp"

namespace cr {

int ce_class_dim(int ndim) { return ndim == 1 ? 0 : 1; }

Shape ce_positions(const Shape& x) {
  Shape p = x;
  p.erase(p.begin() + ce_class_dim(int(x.size())));
  return p;
}

autograd::Var ce_accumulated(const autograd::Var& v, DType dt) {
  return dt == DType::f16 || dt == DType::bf16 ? autograd::to_dtype(v, DType::f32) : v;
}

namespace {
using namespace autograd;

void check_like(const char* role, const Tensor& t, DType dt, const Tensor& x, const Shape& sizes) {
  if (t.dtype() != dt || t.device() != x.device() || t.sizes() != sizes)
    fail(cat(role, " expected dtype ", dtype_name(dt), ", input's device ", device_name(x.device()), " and shape ",
             shape_str(sizes), ", got ", t.describe()));
}

void check_target(const Tensor& t, const Tensor& x, const Shape& positions) {
  if ((t.dtype() != DType::i64 && t.dtype() != DType::i32) || t.device() != x.device() || t.sizes() != positions)
    fail(cat("target expected int64 class indices of shape ", shape_str(positions), " on input's device, got ",
             t.describe()));
}

Tensor check_input(const OpCall& c) {
  const Tensor x = c.tensor(0);
  if (!is_floating(x.dtype())) fail(cat("input ", dtype_list_error("a floating tensor", x.dtype())));
  if (x.dim() == 0) fail("input expected at least 1 dim (classes), got a 0-d tensor");
  return x;
}

// The loss's dtype (dtype=, the backward's lse): the input's or a wider floating one.
bool loss_dtype_ok(DType d, const Tensor& x) { return is_floating(d) && promote(d, x.dtype()) == d; }
[[noreturn]] void loss_dtype_error(const char* what, const Tensor& x, const std::string& got) {
  fail(cat(what, " expected the input's dtype (", dtype_name(x.dtype()), ") or a wider floating one, got ", got));
}

DType compute_dtype(const OpCall& c, const Tensor& x) {
  DType d = x.dtype();
  if (!c.has(6)) return d;
  if (!parse_dtype(c.str(6), &d) || !loss_dtype_ok(d, x))
    loss_dtype_error("dtype", x, cat("\"", c.str(6), "\""));
  return d;
}

std::vector<Meta> infer_cross_entropy(OpCall& c) {
  const Tensor x = check_input(c);
  const Shape pos = ce_positions(x.sizes());
  const DType dt = compute_dtype(c, x);
  check_target(c.tensor(1), x, pos);
  if (c.has(2)) check_like("weight", c.tensor(2), dt, x, {x.size(ce_class_dim(x.dim()))});
  const double ls = c.number_or(4, 0);
  if (!(ls >= 0 && ls <= 1)) fail(cat("label_smoothing expected a number in [0, 1], got ", ls));
  const std::string r = c.has(5) ? c.str(5) : "mean";
  if (r != "mean" && r != "sum" && r != "none") fail(cat("reduction expected \"mean\", \"sum\" or \"none\", got \"", r, "\""));
  return {{r == "none" ? pos : Shape{}, dt, x.device()}, {pos, dt, x.device()}};
}

// lse in dt: one fused pass over the rows on CUDA, else logsumexp of the input converted to
// the dtype it sums in (float32 for 16-bit: PyTorch's reductions accumulate so).
Var log_sum_exp(Context& ctx, const Tensor& x, int cd, DType dt) {
  if (!x.device().is_cpu() && x.dim() == 2 && x.is_contiguous()) {
    Tensor lse = Tensor::empty({x.size(0)}, dt, x.device());
    cuda::cross_entropy_lse(ctx, lse, x);
    return Var(lse);
  }
  return to_dtype(op("logsumexp", {ce_accumulated(to_dtype(x, dt), dt), cd + 1, false}), dt);
}

void run_cross_entropy(OpCall& c) {
  ContextScope scope(c.ctx);
  GradModeGuard off(false);
  const Tensor x = c.tensor(0);
  const DType dt = compute_dtype(c, x);
  const int cd = ce_class_dim(x.dim());
  const int64_t C = x.size(cd);
  const double ls = c.number_or(4, 0);
  Var lse = log_sum_exp(c.ctx, x, cd, dt);
  Var valid = op("ne", {c.tensor(1), c.number_or(3, -100)});
  Var idx = to_dtype(where(valid, c.tensor(1), 1.0), DType::i64);
  Var picked = to_dtype(op("squeeze", {op("gather", {x, cd + 1, unsqueeze(idx, cd)}), cd + 1}), dt) - lse;
  // sums of float16 / bfloat16 values accumulate in float32 (as PyTorch's reductions do)
  auto acc = [&](const Var& v) { return ce_accumulated(v, dt); };
  Var wt = to_dtype(valid, dt), wsum = double(C);
  if (c.has(2)) {
    const Tensor w = c.tensor(2);
    wt = where(valid, reshape(op("index_select", {w, 1, reshape(idx, {idx.tensor().numel()})}), idx.tensor().sizes()), 0.0);
    wsum = op("sum", {acc(w)});
  }
  Var loss = -(picked * wt);
  if (ls > 0) {  // the mean over the classes of -w_c log p_c, with the same weights
    Var wx = to_dtype(x, dt);
    if (c.has(2)) {
      Shape view(size_t(x.dim()), 1);
      view[size_t(cd)] = C;
      wx = wx * reshape(c.tensor(2), view);
    }
    Var smooth = op("sum", {acc(wx), cd + 1}) - acc(lse) * wsum;
    loss = acc(loss) * (1 - ls) - where(valid, smooth, 0.0) * (ls / double(C));
  }
  const std::string r = c.has(5) ? c.str(5) : "mean";
  if (r != "none") loss = r == "sum" ? op("sum", {acc(loss)}) : op("sum", {acc(loss)}) / op("sum", {acc(wt)});
  copy_into(c.outs[0], to_dtype(loss, dt).tensor());
  copy_into(c.outs[1], lse.tensor());
}

std::vector<Meta> infer_cross_entropy_backward(OpCall& c) {
  const Tensor x = check_input(c);
  const Shape pos = ce_positions(x.sizes());
  const DType dt = c.tensor(1).dtype();  // lse's: the forward's dtype=
  if (!loss_dtype_ok(dt, x)) loss_dtype_error("lse", x, c.tensor(1).describe());
  check_like("lse", c.tensor(1), dt, x, pos);
  check_target(c.tensor(2), x, pos);
  if (c.tensor(2).dtype() != DType::i64) fail(cat("target expected int64, got ", c.tensor(2).describe()));
  for (int i : {3, 4, 5}) check_like(c.arg_name(i), c.tensor(i), dt, x, pos);
  if (c.has(6)) check_like("weight", c.tensor(6), dt, x, {x.size(ce_class_dim(x.dim()))});
  if (!c.has(7)) return {{x.sizes(), x.dtype(), x.device()}};
  const int64_t pitch = c.integer(7), C = x.size(ce_class_dim(x.dim()));
  if (x.dim() != 2 || pitch < C || pitch * int64_t(x.itemsize()) % 16 != 0)
    fail(cat("pitch expected a 2-d input and a row length of at least its ", C,
             " classes, a multiple of 16 bytes, got ", pitch, " for ", x.describe()));
  return {{{x.size(0), pitch}, x.dtype(), x.device()}};
}

// (out's rows `pitch` classes apart, those past `classes` zero)
template <class T, class L, class C>
void grad_rows(const T* x, const L* lse, const int64_t* t, const L* a, const L* b, const L* k, const L* w, T* out,
               int64_t classes, int64_t inner, int64_t pitch, int64_t o0, int64_t o1) {
  for (int64_t o = o0; o < o1; ++o) {
    for (int64_t c = 0; c < classes; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t e = (o * classes + c) * inner + i, p = o * inner + i;
        C g = load(a[p]) * std::exp(load(x[e]) - load(lse[p])) - load(k[p]) * (w ? load(w[c]) : C(1));
        if (c == t[p] - 1) g -= load(b[p]);
        store(out[(o * pitch + c) * inner + i], g);
      }
    for (int64_t e = (o * pitch + classes) * inner; e < (o + 1) * pitch * inner; ++e) store(out[e], C(0));
  }
}

// grad_rows for rows of classes (inner 1) whose input is in the compute dtype: each row's exp
// through the softmax's block function (vectorised, registry.hpp softmax_exp_block), then the
// same terms.
template <class C>
void grad_rows_dense(BlockFn exp, const C* x, const C* lse, const int64_t* t, const C* a, const C* b, const C* k,
                     const C* w, C* out, int64_t classes, int64_t pitch, int64_t o0, int64_t o1) {
  for (int64_t o = o0; o < o1; ++o) {
    const C *xr = x + o * classes, l = lse[o], ao = a[o], ko = k[o];
    C* y = out + o * pitch;
    for (int64_t c = 0; c < classes; ++c) y[c] = xr[c] - l;
    exp(y, nullptr, y, classes);
    if (w) {
      for (int64_t c = 0; c < classes; ++c) y[c] = ao * y[c] - ko * w[c];
    } else {
      for (int64_t c = 0; c < classes; ++c) y[c] = ao * y[c] - ko;
    }
    if (t[o] >= 1 && t[o] <= classes) y[t[o] - 1] -= b[o];
    for (int64_t c = classes; c < pitch; ++c) y[c] = C(0);
  }
}

void run_cross_entropy_backward(OpCall& c) {
  Tensor in[7];
  for (int i = 0; i < 7; ++i) in[i] = c.has(i) ? dense(c.tensor(i)) : Tensor();
  const Tensor& x = in[0];
  const int cd = ce_class_dim(x.dim());
  const int64_t classes = x.size(cd), inner = cd == 0 ? 1 : x.numel() / std::max<int64_t>(1, x.size(0) * classes);
  const int64_t pitch = c.has(7) ? c.integer(7) : classes;
  if (!x.device().is_cpu())
    return cuda::cross_entropy_backward(c.ctx, c.outs[0], x, in[1], in[2], in[3], in[4], in[5], in[6], classes, inner,
                                        pitch);
  const int64_t outer = cd == 0 ? 1 : x.size(0);
  visit_floating(x.dtype(), [&](auto xtag) {
    visit_floating(in[1].dtype(), [&](auto ltag) {
      using T = decltype(xtag);
      using L = decltype(ltag);
      const L* w = in[6].defined() ? in[6].data<L>() : nullptr;
      const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, classes * inner));
      if constexpr (std::is_same_v<T, L> && std::is_same_v<L, compute_t<L>>) {
        const BlockFn exp = softmax_exp_block(x.dtype());
        if (inner == 1 && exp) {
          return parallel_for(outer, grain, [&](int64_t o0, int64_t o1) {
            grad_rows_dense<L>(exp, x.data<T>(), in[1].data<L>(), in[2].data<int64_t>(), in[3].data<L>(),
                               in[4].data<L>(), in[5].data<L>(), w, c.outs[0].data<T>(), classes, pitch, o0, o1);
          });
        }
      }
      parallel_for(outer, grain, [&](int64_t o0, int64_t o1) {
        grad_rows<T, L, compute_t<L>>(x.data<T>(), in[1].data<L>(), in[2].data<int64_t>(), in[3].data<L>(), in[4].data<L>(),
                                      in[5].data<L>(), w, c.outs[0].data<T>(), classes, inner, pitch, o0, o1);
      });
    });
  });
}

// (input, target) at `at` and any tensors after them: the input's shape and device
std::vector<Meta> infer_bce_like(const OpCall& c, int at) {
  const Tensor x = c.tensor(at);
  if (!is_floating(x.dtype())) fail(cat("input ", dtype_list_error("a floating tensor", x.dtype())));
  DType dt = x.dtype();
  for (int i = 0; i < 3 && c.has(i); ++i) {
    const Tensor t = c.tensor(i);
    if (t.sizes() != x.sizes() || t.device() != x.device())
      fail(cat(c.arg_name(i), " expected the input's shape ", shape_str(x.sizes()), " and device, got ", t.describe()));
    dt = promote(dt, t.dtype());
  }
  return {{x.sizes(), to_floating(dt), x.device()}};
}
std::vector<Meta> infer_binary_cross_entropy(OpCall& c) { return infer_bce_like(c, 0); }
std::vector<Meta> infer_binary_cross_entropy_backward(OpCall& c) { return infer_bce_like(c, 1); }

void run_binary_cross_entropy(OpCall& c) {
  ContextScope scope(c.ctx);
  GradModeGuard off(false);
  Var x = c.tensor(0), y = c.tensor(1);
  Var loss = (y - 1.0) * op("clamp", {op("log1p", {-x}), -100.0}) - y * op("clamp", {op("log", {x}), -100.0});
  copy_into(c.outs[0], to_dtype(loss, c.outs[0].dtype()).tensor());
}

void run_binary_cross_entropy_backward(OpCall& c) {
  ContextScope scope(c.ctx);
  GradModeGuard off(false);
  Var x = c.tensor(1);
  // (PyTorch's kernel's epsilon is a float: 1e-12 rounded to float32)
  Var grad = c.tensor(0) * (x - c.tensor(2)) / op("clamp", {(-x + 1.0) * x, double(1e-12f)});
  copy_into(c.outs[0], to_dtype(grad, c.outs[0].dtype()).tensor());
}

}  // namespace

void register_losses(Registry& r) {
  r.add(OpDef{"_cross_entropy", "input:T, target:T, weight:T?, ignore_index:N?, label_smoothing:N?, reduction:S?, dtype:S?",
              OpKind::Other, kNoMethod | kMultiOut | kDeviceAware | kValueErrors | kExtern, infer_cross_entropy, run_cross_entropy});
  r.add(OpDef{"_cross_entropy_backward", "input:T, lse:T, target:T, a:T, b:T, k:T, weight:T?, pitch:I?", OpKind::Other,
              kNoMethod | kDeviceAware | kExtern, infer_cross_entropy_backward, run_cross_entropy_backward});
  r.add(OpDef{"_binary_cross_entropy", "input:T, target:T", OpKind::Other, kNoMethod | kDeviceAware | kExtern,
              infer_binary_cross_entropy, run_binary_cross_entropy});
  r.add(OpDef{"_binary_cross_entropy_backward", "grad:T, input:T, target:T", OpKind::Other,
              kNoMethod | kDeviceAware | kExtern, infer_binary_cross_entropy_backward, run_binary_cross_entropy_backward});
  // autocast: log_softmax and nll_loss run in float32, here without a float32 copy of the scores
  r.set_cast({"_cross_entropy"}, CastPolicy::Float32Dtype);
  r.set_cast({"_cross_entropy"}, CastPolicy::Float32Dtype, true);  // (PyTorch's CPU list has it too)
}

}  // namespace cr
