// The derivative rules of each op family (vm/ops/<family>_grad.cpp), registered after the ops.
#pragma once
#include "vm/registry.hpp"

namespace cr {
void register_pointwise_derivatives(Registry& r);
void register_reduction_derivatives(Registry& r);
void register_view_derivatives(Registry& r);
void register_linalg_derivatives(Registry& r);
void register_indexing_derivatives(Registry& r);
void register_selection_derivatives(Registry& r);
void register_attention_derivatives(Registry& r);
void register_norm_derivatives(Registry& r);
void register_loss_derivatives(Registry& r);
void register_conv_derivatives(Registry& r);
}  // namespace cr
