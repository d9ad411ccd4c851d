// The min-cut partitioner of compiled autograd (issue 35; PyTorch's
// min_cut_rematerialization_partition): of the forward values the derivative rules read, which
// the forward saves and which the backward recomputes from saved values and the inputs.
#pragma once
#include <cstdint>
#include <vector>

#include "vm/graph/graph.hpp"

namespace cr::graph {

struct Partition {
  std::vector<int32_t> saved;  // value ids the forward keeps (never graph inputs: those are kept anyway)
  int64_t saved_bytes = 0;
  int64_t required_bytes = 0;  // what saving every value a rule reads would keep
  int required_count = 0;
};

// `required`: by value id, read by a derivative rule. The cut is the cheapest set of values (in
// bytes; a view costs its storage's, an input's nothing) that separates the inputs and the ops
// never recomputed (matmuls, random, index / join ops, reductions to less than a quarter of
// their inputs) from the required values; what lies after it the backward recomputes.
Partition min_cut_partition(const Graph& g, const std::vector<char>& required);

}  // namespace cr::graph
