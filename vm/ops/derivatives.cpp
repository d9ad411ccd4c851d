#include "vm/ops/derivatives.hpp"

namespace cr {

// Ops that make tensors from no differentiable input.
static void mark_not_differentiable(Registry& r) {
  for (const OpDef& d : r.ops())
    if (d.kind == OpKind::Creation) r.set_derivative(d.name, {.not_differentiable = true});
}

void register_derivatives(Registry& r) {
  mark_not_differentiable(r);
  register_pointwise_derivatives(r);
  register_reduction_derivatives(r);
  register_view_derivatives(r);
  register_linalg_derivatives(r);
  register_indexing_derivatives(r);
  register_selection_derivatives(r);
  register_attention_derivatives(r);
  register_norm_derivatives(r);
  register_loss_derivatives(r);
  register_conv_derivatives(r);
}

}  // namespace cr
