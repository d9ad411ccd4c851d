// The reductions of the loop IR (jit/loop_ir.hpp): their kinds, accumulator dtypes and
// identities, which every backend folds with its own code (jit/cpu/helpers.hpp, jit/cuda).
#pragma once
#include <cstdint>

#include "vm/dtype.hpp"

namespace cr::jit {

// OrderedSum and OrderedMax (float32 / float64 only) fold element after element in the input
// dtype, as eager softmax folds a column (lanes::max_step); their partial results never merge.
enum class ReduceKind : uint8_t { Sum, Max, Min, Prod, OrderedSum, OrderedMax };
// The accumulator dtype of kind over `in`: sums of float32 accumulate in float64 across blocks,
// integer and bool sums in int64, max / min and the ordered folds in the input dtype.
DType reduce_acc_dtype(ReduceKind kind, DType in);
// Whether the backends fold kind over `in`: every kind over float32 / float64, the unordered ones
// over int32 / int64 / bool too; none over float16 / bfloat16 (they compute in float32).
bool reduce_supported(ReduceKind kind, DType in);
// The initial accumulator value (0, 1, -inf / lowest, +inf / max) as a double.
double reduce_init(ReduceKind kind, DType in);
const char* reduce_name(ReduceKind kind);

}  // namespace cr::jit
