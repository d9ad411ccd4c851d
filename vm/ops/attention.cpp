// attention(q, k, v[, scale[, causal[, mask]]]): softmax(q k^T * scale + mask) v in one op, the
// fused form of F.scaled_dot_product_attention (stdlib/functional.lua) and of the pattern
// matmul -> scale -> softmax -> matmul in captured graphs (vm/graph/patterns.cpp).
// q {..., L, E}, k {..., S, E}, v {..., S, Ev}, the same batch dims; out {..., L, Ev} in q's dtype.
// scale defaults to 1 / sqrt(E); causal is PyTorch's is_causal (query i sees keys 1..i, aligned
// top-left). mask (not with causal, as PyTorch) broadcasts to {..., L, S}: bool (true: the key may
// be attended) or q's dtype (added to the scaled scores). A row that sees no key is NaN, as
// softmax; with no keys at all (S = 0) the result is zeros, as the composite's empty product.
//
// _attention (PyTorch's _scaled_dot_product_flash_attention) returns the rows' logsumexp too: the
// saved value of the fused backward (_attention_backward, vm/ops/attention_backward.cpp).
//
// The CPU kernel walks one query row at a time (scores, max, exponentials, weighted sum of v), in
// float32 for 16-bit inputs as PyTorch's math path does. On CUDA, inputs a fused kernel takes run
// there (vm/kernels/cuda/attention.hpp: float16 / bfloat16 on tensor cores, float32); other CUDA inputs
// run the composite op by op on the device (matmul, softmax, matmul); the graph rewrite only
// picks this op where the kernel takes it.
#include <cmath>
#include <limits>

#include "vm/ops/attention.hpp"

#include "vm/kernels/cuda/attention.hpp"
#include "vm/devices.hpp"
#include "vm/ops/operands.hpp"

namespace cr {

Shape attention_scores_shape(const Tensor& q, const Tensor& k) {
  Shape s = q.sizes();
  s.back() = k.size(k.dim() - 2);
  return s;
}

std::string attention_mask_problem(DType mask, Device mask_device, const Shape& mask_sizes, DType q, Device q_device,
                                   const Shape& scores) {
  if (mask != DType::b8 && mask != q) return cat("mask expected bool or query's dtype ", dtype_name(q));
  if (mask_device != q_device) return "mask expected query's device";
  bool fits = mask_sizes.size() <= scores.size();
  for (size_t d = 0; fits && d < mask_sizes.size(); ++d)
    fits = mask_sizes[d] == 1 || mask_sizes[d] == scores[scores.size() - mask_sizes.size() + d];
  return fits ? "" : cat("mask expected a shape that broadcasts to the scores' ", shape_str(scores));
}

Tensor attention_mask_view(const Tensor& mask, const Tensor& q, const Tensor& k) {
  const Shape sizes = attention_scores_shape(q, k);
  return Tensor::view_of(mask, sizes, broadcast_strides(mask, sizes), mask.offset());
}

namespace {

const char* kRoles[3] = {"query", "key", "value"};

std::vector<Meta> infer_attention(OpCall& c) {
  Tensor t[3] = {c.tensor(0), c.tensor(1), c.tensor(2)};
  for (int i = 0; i < 3; ++i) {
    if (t[i].dim() < 2) fail(cat(kRoles[i], " expected at least 2 dims {..., length, size}, got ", t[i].describe()));
    if (!is_floating(t[i].dtype())) fail(cat(kRoles[i], " ", dtype_list_error("a floating tensor", t[i].dtype())));
    if (t[i].dtype() != t[0].dtype() || t[i].device() != t[0].device())
      fail(cat("query, key and value expected one dtype and device, got ", t[0].describe(), ", ", t[1].describe(), ", ",
               t[2].describe()));
  }
  const int r = t[0].dim();
  auto batch_of = [](const Tensor& x) {
    Shape s = x.sizes();
    s.resize(s.size() - 2);
    return s;
  };
  const Shape batch = batch_of(t[0]);
  for (int i = 1; i < 3; ++i)
    if (t[i].dim() != r || batch_of(t[i]) != batch)
      fail(cat("key and value expected query's batch dims, got ", t[0].describe(), ", ", t[1].describe(), ", ",
               t[2].describe()));
  if (t[1].size(r - 1) != t[0].size(r - 1))
    fail(cat("key expected query's size ", t[0].size(r - 1), " in its last dim, got ", t[1].describe()));
  if (t[2].size(r - 2) != t[1].size(r - 2))
    fail(cat("value expected key's length ", t[1].size(r - 2), " in dim ", r - 1, ", got ", t[2].describe()));
  if (c.has(3)) {
    const double s = c.number(3);
    if (!std::isfinite(s)) fail(cat("scale expected a finite number, got ", s));
  }
  const bool causal = c.boolean_or(4, false);
  if (c.has(5)) {
    const Tensor m = c.tensor(5);
    if (causal) fail("causal = true and a mask cannot be given together (PyTorch refuses both)");
    const std::string why = attention_mask_problem(m.dtype(), m.device(), m.sizes(), t[0].dtype(), t[0].device(),
                                                   attention_scores_shape(t[0], t[1]));
    if (!why.empty()) fail(cat(why, ", got ", m.describe()));
  }
  Shape out = batch;
  out.push_back(t[0].size(r - 2));
  out.push_back(t[2].size(r - 1));
  return {{out, t[0].dtype(), t[0].device()}};
}

// _attention: attention's output and each row's logsumexp {..., L} of its scaled, masked scores
// (natural log; float64 for float64 inputs, else float32), which its backward reads.
std::vector<Meta> infer_attention_lse(OpCall& c) {
  std::vector<Meta> m = infer_attention(c);
  Shape rows = m[0].sizes;
  rows.pop_back();
  m.push_back({rows, m[0].dtype == DType::f64 ? DType::f64 : DType::f32, m[0].device});
  return m;
}

// A mask row as the CPU kernel reads it: element j at p[j * stride], bool or q's dtype T.
template <class T> struct MaskRow {
  const void* p = nullptr;  // null: no mask
  bool boolean = false;
  int64_t stride = 0;
  template <class C> C apply(C score, int64_t j) const {
    if (!p) return score;
    if (boolean) return static_cast<const bool*>(p)[j * stride] ? score : -std::numeric_limits<C>::infinity();
    return score + C(load(static_cast<const T*>(p)[j * stride]));
  }
};

// One query row: out[d] = sum_j softmax_j(scale * q.k_j + mask_j) v[j][d], keys j < visible.
template <class T, class C>
void attend_row(const T* q, const T* k, const T* v, T* out, int64_t E, int64_t Ev, int64_t visible, C scale,
                const MaskRow<T>& mask, std::vector<C>& p, std::vector<C>& acc, C* lse) {
  C m = -std::numeric_limits<C>::infinity();
  for (int64_t j = 0; j < visible; ++j) {
    C dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += load(q[e]) * load(k[j * E + e]);
    p[size_t(j)] = mask.apply(dot * scale, j);
    m = std::max(m, p[size_t(j)]);
  }
  std::fill(acc.begin(), acc.end(), C(0));
  C total = 0;
  for (int64_t j = 0; j < visible; ++j) {
    const C w = std::exp(p[size_t(j)] - m);
    total += w;
    for (int64_t d = 0; d < Ev; ++d) acc[size_t(d)] += w * load(v[j * Ev + d]);
  }
  for (int64_t d = 0; d < Ev; ++d) store(out[d], visible == 0 ? C(0) : acc[size_t(d)] / total);
  if (lse) *lse = m + std::log(total);
}


void attention_cpu(const Tensor& out, const Tensor& qin, const Tensor& kin, const Tensor& vin, double scale, bool causal,
                   const Tensor& mask_in, const Tensor& lse) {
  const Tensor q = contiguous(qin), k = contiguous(kin), v = contiguous(vin);
  const int r = q.dim();
  const int64_t L = q.size(r - 2), E = q.size(r - 1), S = k.size(r - 2), Ev = v.size(r - 1);
  int64_t rows = L;  // (E may be 0: every score 0)
  for (int d = 0; d < r - 2; ++d) rows *= q.size(d);
  if (rows == 0 || (out.numel() == 0 && !lse.defined())) return;
  const Tensor mask = mask_in.defined() ? attention_mask_view(mask_in, q, k) : Tensor();
  visit_floating(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T *qp = q.data<T>(), *kp = k.data<T>(), *vp = v.data<T>();
    T* op = out.data<T>();
    C* lp = lse.defined() ? lse.data<C>() : nullptr;
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, S * (E + Ev))), [&](int64_t r0, int64_t r1) {
      std::vector<C> p(static_cast<size_t>(S)), acc(static_cast<size_t>(Ev));
      MaskRow<T> mrow;
      if (mask.defined()) {
        mrow.boolean = mask.dtype() == DType::b8;
        mrow.stride = mask.stride(r - 1);
      }
      for (int64_t row = r0; row < r1; ++row) {
        const int64_t b = row / L, i = row % L;
        const int64_t visible = causal ? std::min(S, i + 1) : S;
        if (mask.defined()) {  // the mask's row (b, i): the batch index b taken apart dim by dim
          int64_t at = mask.offset() + i * mask.stride(r - 2), rest = b;
          for (int d = r - 3; d >= 0; rest /= q.size(d), --d) at += rest % q.size(d) * mask.stride(d);
          mrow.p = static_cast<const char*>(mask.storage()->data) + at * int64_t(mask.itemsize());
        }
        attend_row(qp + row * E, kp + b * S * E, vp + b * S * Ev, op + row * Ev, E, Ev, visible, C(scale), mrow, p, acc,
                   lp ? lp + row : nullptr);
      }
    });
  });
}

// On CUDA where the fused kernel does not take the inputs (float32 / float64, other head sizes):
// the composite F.scaled_dot_product_attention, op by op on the device (and lse, when defined,
// the scores' logsumexp).
void attention_composite(Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                         double scale, bool causal, const Tensor& mask, const Tensor& lse) {
  const int r = q.dim();
  if (out.numel() == 0 && (!lse.defined() || lse.numel() == 0)) return;
  if (k.size(r - 2) == 0) {  // no keys: the empty product's zeros, an empty sum's log
    if (lse.defined()) fill_across(lse, -std::numeric_limits<double>::infinity());
    return fill_across(out, 0);
  }
  Tensor kt = call(ctx, "transpose", {tensor_arg(k), number_arg(-2), number_arg(-1)});
  // (the scores scaled after the product, as the CPU kernel: with E = 0, 0 * inf is NaN in both)
  Tensor s = call(ctx, "mul", {tensor_arg(call(ctx, "matmul", {tensor_arg(q), tensor_arg(kt)})), number_arg(scale)});
  if (causal) {  // keys above the diagonal score -inf (the mask made on the device: triu of ones)
    Tensor ones = Tensor::empty({q.size(r - 2), k.size(r - 2)}, DType::b8, q.device());
    fill_across(ones, 1);
    Tensor mask = call(ctx, "triu", {tensor_arg(ones), number_arg(1)});
    s = call(ctx, "masked_fill", {tensor_arg(s), tensor_arg(mask), number_arg(-std::numeric_limits<double>::infinity())});
  } else if (mask.defined() && mask.dtype() == DType::b8) {  // false: the key is not attended
    s = call(ctx, "masked_fill", {tensor_arg(s), tensor_arg(call(ctx, "logical_not", {tensor_arg(mask)})),
                                  number_arg(-std::numeric_limits<double>::infinity())});
  } else if (mask.defined()) {
    s = call(ctx, "add", {tensor_arg(s), tensor_arg(mask)});
  }
  if (lse.defined()) copy_into(lse, call(ctx, "logsumexp", {tensor_arg(s), number_arg(-1)}));
  copy_into(out, call(ctx, "matmul", {tensor_arg(call(ctx, "softmax", {tensor_arg(s), number_arg(-1)})), tensor_arg(v)}));
}

void run_attention(OpCall& c) {
  const Tensor q = c.tensor(0), k = c.tensor(1), v = c.tensor(2);
  const double scale = c.number_or(3, 1.0 / std::sqrt(double(q.size(q.dim() - 1))));
  const bool causal = c.boolean_or(4, false);
  const Tensor mask = c.has(5) ? c.tensor(5) : Tensor();
  const Tensor lse = c.outs.size() > 1 ? c.outs[1] : Tensor();
  if (q.device().is_cpu()) return attention_cpu(c.outs[0], q, k, v, scale, causal, mask, lse);
  const Tensor mview = mask.defined() ? attention_mask_view(mask, q, k) : Tensor();
  if ((lse.defined() && lse.dtype() != DType::f32) || !cuda::attention(c.ctx, c.outs[0], q, k, v, scale, causal, mview, lse))
    attention_composite(c.ctx, c.outs[0], q, k, v, scale, causal, mask, lse);
}

// _attention_cache(self, indices, values, query, key, value[, scale, causal, mask]): index_put_(self,
// indices, values), then attention(query, key, value, ...), whose key and value may view self's
// storage (the graph rewrite of vm/graph/patterns.cpp makes it of a static KV cache's write and
// the attention that reads the cache). One CUDA kernel where it takes the call, else the two ops.
OpCall attention_part(OpCall& c) {
  OpCall a{c.ctx, c.def, c.args + 3, c.nargs - 3};
  a.outs = c.outs;
  return a;
}

std::vector<Meta> infer_attention_cache(OpCall& c) {
  OpCall a = attention_part(c);
  return infer_attention(a);
}

void run_attention_cache(OpCall& c) {
  OpCall a = attention_part(c);
  const Tensor self = c.tensor(0), q = a.tensor(0), k = a.tensor(1);
  const std::vector<Tensor> idx = c.tensors(1);
  if (!self.device().is_cpu() && idx.size() == 1 && q.device() == self.device()) {
    const double scale = a.number_or(3, 1.0 / std::sqrt(double(q.size(q.dim() - 1))));
    const Tensor mask = a.has(5) ? attention_mask_view(a.tensor(5), q, k) : Tensor();
    if (cuda::attention_cache(c.ctx, c.outs[0], q, k, a.tensor(2), scale, a.boolean_or(4, false), mask, self, idx[0],
                              c.tensor(2)))
      return;
  }
  dispatch(c.ctx, Registry::get().ids().index_put_, c.args, 3);
  run_attention(a);
}

}  // namespace

void register_attention_backward(Registry& r);  // (vm/ops/attention_backward.cpp)

void register_attention(Registry& r) {
  r.add(OpDef{"attention", "query:T, key:T, value:T, scale:N?, causal:B?, mask:T?", OpKind::Other, kNoMethod | kDeviceAware | kExtern,
              infer_attention, run_attention});
  r.add(OpDef{"_attention", "query:T, key:T, value:T, scale:N?, causal:B?, mask:T?", OpKind::Other,
              kNoMethod | kMultiOut | kDeviceAware | kExtern, infer_attention_lse, run_attention});
  OpDef cache{"_attention_cache", "self:T, indices:TL, values:T, query:T, key:T, value:T, scale:N?, causal:B?, mask:T?",
               OpKind::Other, kNoMethod | kDeviceAware | kExtern | kValueErrors, infer_attention_cache,
               run_attention_cache};
  cache.writes = 1;  // (self; no derivative: the fused form is for inference graphs)
  r.add(cache);
  r.set_cast({"attention", "_attention"}, CastPolicy::Lower);  // autocast: PyTorch's scaled_dot_product_attention
  r.set_cast({"attention", "_attention"}, CastPolicy::Lower, true);  // (on the CPU too since PyTorch 2.0)
  register_attention_backward(r);
}

}  // namespace cr
