// _attention_backward(grad_out, query, key, value, out, lse, scale?, causal?, mask?) -> grad_query,
// grad_key, grad_value: attention's gradients (PyTorch's _scaled_dot_product_flash_attention_backward)
// from the forward's output and row logsumexp (_attention, vm/ops/attention.cpp), by the fused
// kernels of vm/kernels/cuda/attention_bwd.hpp. CUDA only: on the CPU, and for inputs the kernels
// do not take, attention's derivative (attention_grad.cpp) composes registry ops instead.
#include <cmath>
#include <limits>

#include "vm/kernels/cuda/attention_bwd.hpp"
#include "vm/devices.hpp"
#include "vm/ops/attention.hpp"
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

void expect_shape(const char* role, const Tensor& t, DType d, Device dev, const Shape& sizes) {
  if (t.dtype() != d || t.device() != dev || t.sizes() != sizes)
    fail(cat(role, " expected dtype ", dtype_name(d), " and shape ", shape_str(sizes), " on query's device, got ",
             t.describe()));
}

std::vector<Meta> infer_attention_backward(OpCall& c) {
  const Tensor q = c.tensor(1), k = c.tensor(2), v = c.tensor(3);
  if (q.device().is_cpu())
    fail("not implemented on the CPU (attention's derivative composes registry ops there), got query " + q.describe());
  if (!cuda::attention_backward_takes(q.dtype(), q.dim() < 2 ? 0 : q.size(q.dim() - 1), v.dim() < 2 ? 0 : v.size(v.dim() - 1)))
    fail(cat("query expected float32, float16 or bfloat16 with head sizes 1 to 128, got ", q.describe(), ", value ",
             v.describe()));
  const int r = q.dim();
  if (k.dim() != r || v.dim() != r || k.size(r - 1) != q.size(r - 1) || v.size(r - 2) != k.size(r - 2))
    fail(cat("key and value expected query's rank and attention's sizes, got ", q.describe(), ", ", k.describe(), ", ",
             v.describe()));
  Shape batch = q.sizes(), out = q.sizes();
  batch.pop_back();
  out.back() = v.size(r - 1);
  for (int d = 0; d < r - 2; ++d)
    if (k.size(d) != q.size(d) || v.size(d) != q.size(d)) fail("key and value expected query's batch dims");
  expect_shape("key", k, q.dtype(), q.device(), k.sizes());
  expect_shape("value", v, q.dtype(), q.device(), v.sizes());
  expect_shape("grad_out", c.tensor(0), q.dtype(), q.device(), out);
  expect_shape("out", c.tensor(4), q.dtype(), q.device(), out);
  expect_shape("lse", c.tensor(5), DType::f32, q.device(), batch);
  if (c.has(6) && !(std::isfinite(c.number(6)))) fail(cat("scale expected a finite number, got ", c.number(6)));
  if (c.has(8)) {
    const Tensor m = c.tensor(8);
    if (c.boolean_or(7, false)) fail("causal = true and a mask cannot be given together (PyTorch refuses both)");
    const std::string why =
        attention_mask_problem(m.dtype(), m.device(), m.sizes(), q.dtype(), q.device(), attention_scores_shape(q, k));
    if (!why.empty()) fail(cat(why, ", got ", m.describe()));
  }
  return {{q.sizes(), q.dtype(), q.device()}, {k.sizes(), q.dtype(), q.device()}, {v.sizes(), q.dtype(), q.device()}};
}

void run_attention_backward(OpCall& c) {
  const Tensor q = c.tensor(1), k = c.tensor(2), v = c.tensor(3);
  const int r = q.dim();
  if (q.size(r - 2) == 0 || k.size(r - 2) == 0) {  // no rows or no keys: out is constant zeros
    for (const Tensor& g : c.outs)
      if (g.numel() > 0) fill_across(g, 0);
    return;
  }
  const double scale = c.number_or(6, 1.0 / std::sqrt(double(q.size(r - 1))));
  const Tensor mask = c.has(8) ? attention_mask_view(c.tensor(8), q, k) : Tensor();
  if (!cuda::attention_backward(c.ctx, c.outs[0], c.outs[1], c.outs[2], c.tensor(0), q, k, v, c.tensor(4),
                                c.tensor(5), scale, c.boolean_or(7, false), mask))
    fail(cat("the fused kernels do not take a mask of more than two batch dims, got ", c.tensor(8).describe()));
}

}  // namespace

void register_attention_backward(Registry& r) {
  r.add(OpDef{"_attention_backward",
              "grad_out:T, query:T, key:T, value:T, out:T, lse:T, scale:N?, causal:B?, mask:T?", OpKind::Other,
              kNoMethod | kMultiOut | kDeviceAware | kExtern, infer_attention_backward, run_attention_backward});
}

}  // namespace cr
