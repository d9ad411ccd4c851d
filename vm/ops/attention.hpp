// The attention op's mask rule (vm/ops/attention.cpp), shared by the op's checks, the graph
// rewrite that makes the op (vm/graph/patterns.cpp) and F.scaled_dot_product_attention's routing
// (through the api's attention_mask_fits).
#pragma once
#include <string>

#include "vm/tensor.hpp"

namespace cr {

// Whether a mask of dtype `mask`, on `mask_device`, with sizes `mask_sizes` is attention's mask
// for queries of dtype `q` on `q_device` and scores of shape `scores` {batch..., L, S}: bool (true:
// the key may be attended) or q's dtype (added to the scaled scores), on q's device, sizes that
// broadcast to the scores. Returns "" when it is, else what the op's error says.
std::string attention_mask_problem(DType mask, Device mask_device, const Shape& mask_sizes, DType q, Device q_device,
                                   const Shape& scores);

// The scores' shape {batch..., L, S} of q {batch..., L, E} and k {batch..., S, E}.
Shape attention_scores_shape(const Tensor& q, const Tensor& k);

// The mask as a view of the scores' shape {..., L, S}: broadcast dims get stride 0, no copy.
Tensor attention_mask_view(const Tensor& mask, const Tensor& q, const Tensor& k);

}  // namespace cr
