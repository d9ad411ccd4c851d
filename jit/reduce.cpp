// The reductions of the loop IR (see reduce.hpp).
#include "jit/reduce.hpp"

#include <limits>

namespace cr::jit {
namespace {

template <class T> double limit(bool max) {
  using L = std::numeric_limits<T>;
  if constexpr (L::has_infinity) return max ? double(L::infinity()) : -double(L::infinity());
  else return max ? double(L::max()) : double(L::lowest());
}

}  // namespace

DType reduce_acc_dtype(ReduceKind kind, DType in) {
  switch (kind) {
    case ReduceKind::Sum:
    case ReduceKind::Prod: return is_floating(in) ? DType::f64 : DType::i64;
    case ReduceKind::Max:
    case ReduceKind::Min:
    case ReduceKind::OrderedSum:
    case ReduceKind::OrderedMax: break;
  }
  return in;
}

bool reduce_supported(ReduceKind kind, DType in) {
  if (in == DType::f16 || in == DType::bf16) return false;
  return is_floating(in) || (kind != ReduceKind::OrderedSum && kind != ReduceKind::OrderedMax);
}

// Note: double(INT64_MAX) is 2^63, which is out of int64's range: a caller converting the Min
// init of int64 to an integer must saturate (or use INT64_MAX itself); every other value is exact.
double reduce_init(ReduceKind kind, DType in) {
  switch (kind) {
    case ReduceKind::Sum:
    case ReduceKind::OrderedSum: return 0;
    case ReduceKind::Prod: return 1;
    case ReduceKind::Max:
    case ReduceKind::Min:
    case ReduceKind::OrderedMax: break;
  }
  const bool max = kind == ReduceKind::Min;  // the identity of min is the largest value
  switch (in) {
    case DType::f64: return limit<double>(max);
    case DType::i32: return limit<int32_t>(max);
    case DType::i64: return limit<int64_t>(max);
    case DType::b8: return max ? 1.0 : 0.0;
    default: return limit<float>(max);  // f32 (f16 / bf16: unsupported, also +-inf)
  }
}

const char* reduce_name(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::Sum: return "sum";
    case ReduceKind::Max: return "max";
    case ReduceKind::Min: return "min";
    case ReduceKind::Prod: return "prod";
    case ReduceKind::OrderedSum: return "ordered_sum";
    case ReduceKind::OrderedMax: return "ordered_max";
  }
  return "?";
}

}  // namespace cr::jit
