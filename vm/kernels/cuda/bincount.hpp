// bincount on a CUDA device (bincount.cuh): the values' range and the counts of the small values
// in one pass, the larger values (when any) in a second; the range read back is the one
// synchronisation, as PyTorch's.
#pragma once
#include <cstdint>
#include <string>

#include "vm/registry.hpp"

namespace cr::cuda {

struct BincountResult {
  Tensor out;        // undefined when min < 0 (the caller raises) or the bins would pass the limit
  int64_t min = 0;   // the smallest value (0 for an empty x)
  int64_t max = -1;  // the largest (-1 for an empty x)
};

// The counts (weights undefined) or the weight sums (weights: contiguous, of dtype `out`) of the
// values of x (1-D contiguous int32 / int64) into max(minlength, max + 1) bins of dtype `out`
// (int64, float32 or float64), none past `limit` (out left undefined, the range still given).
// Float sums add by atomics: their order varies from run to run.
BincountResult bincount(Context& ctx, const Tensor& x, const Tensor& weights, int64_t minlength, DType out,
                        int64_t limit = INT64_MAX);

// unique's counting path: the distinct values of x (1-D contiguous int32 / int64, not empty) in
// increasing order and their counts (int64) when every value lies in [0, 4096) - one pass, a
// compaction, one read back - else both undefined; min and max always.
struct Distinct {
  Tensor values, counts;
  int64_t min = 0, max = -1;
};
Distinct distinct_small(Context& ctx, const Tensor& x);

// The smallest and the largest value of x (as bincount's), read back; x not empty.
void value_range(Context& ctx, const Tensor& x, int64_t* mn, int64_t* mx);

std::string bincount_source(DType x, DType out);  // (tests compile it to CUBIN without a GPU)

}  // namespace cr::cuda
