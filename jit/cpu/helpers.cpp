// The reduction helpers of generated CPU kernels (see helpers.hpp). Each ReduceFn folds one block
// with the fold the eager reduction uses (vm/kernels/folds.hpp), so a block is folded exactly as
// eager folds a contiguous run of the same elements: float sums in float lanes (blocks of
// lanes::kBlock) added to a double, integer and bool sums in wrapping uint64, products in double / wrapping
// int64, max / min NaN-propagating; the ordered folds element after element, as eager softmax
// folds a column. The block pointwise functions are OpDef::block (vm/ops/pointwise.cpp).
#include "jit/cpu/helpers.hpp"

#include <type_traits>

#include "vm/error.hpp"
#include "vm/kernels/folds.hpp"

namespace cr::jit {
namespace {

template <class T> using SumFold = folds::Sum<T, folds::sum_lane_t<T>>;

// Plain functions (template instantiations): their addresses go into generated code's tables.
template <class T> void sum_block(const void* x, int64_t n, void* acc) {
  using Acc = typename SumFold<T>::Acc;
  if (n > 0) SumFold<T>{}.run(*static_cast<Acc*>(acc), static_cast<const T*>(x), n, 0);
}
template <class T> void prod_block(const void* x, int64_t n, void* acc) {
  using Acc = typename folds::Prod<T>::Acc;
  if (n > 0) folds::Prod<T>{}.run(*static_cast<Acc*>(acc), static_cast<const T*>(x), n, 0);
}
template <class T, bool Max> void extreme_block(const void* x, int64_t n, void* acc) {
  if (n > 0) folds::Extreme<T, Max>{}.run(*static_cast<T*>(acc), static_cast<const T*>(x), n, 0);
}

template <class T> void ordered_sum_block(const void* x, int64_t n, void* acc) {
  T a = *static_cast<T*>(acc);
  for (int64_t i = 0; i < n; ++i) a += static_cast<const T*>(x)[i];
  *static_cast<T*>(acc) = a;
}
template <class T> void ordered_max_block(const void* x, int64_t n, void* acc) {
  T m = *static_cast<T*>(acc);
  for (int64_t i = 0; i < n; ++i) m = lanes::max_step(m, static_cast<const T*>(x)[i]);
  *static_cast<T*>(acc) = m;
}

template <class T> ReduceFn fn_for(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::Sum: return &sum_block<T>;
    case ReduceKind::Prod: return &prod_block<T>;
    case ReduceKind::Max: return &extreme_block<T, true>;
    case ReduceKind::Min: return &extreme_block<T, false>;
    case ReduceKind::OrderedSum:
    case ReduceKind::OrderedMax:
      if constexpr (std::is_floating_point_v<T>) return kind == ReduceKind::OrderedSum ? &ordered_sum_block<T> : &ordered_max_block<T>;
      break;
  }
  return nullptr;
}

// Sum / prod accumulators wrap on integer overflow (unsigned arithmetic), as folds::Prod does.
template <class T> void combine(ReduceKind kind, T& a, T b) {
  using U = std::make_unsigned_t<int64_t>;
  switch (kind) {
    case ReduceKind::Sum:
      if constexpr (std::is_same_v<T, int64_t>) a = T(U(a) + U(b));
      else a += b;
      return;
    case ReduceKind::Prod:
      if constexpr (std::is_same_v<T, int64_t>) a = T(U(a) * U(b));
      else a *= b;
      return;
    case ReduceKind::Max:
    case ReduceKind::Min:
    case ReduceKind::OrderedSum:
    case ReduceKind::OrderedMax: break;
  }
}

}  // namespace

ReduceFn reduce_fn(ReduceKind kind, DType in) {
  switch (in) {
    case DType::f32: return fn_for<float>(kind);
    case DType::f64: return fn_for<double>(kind);
    case DType::i32: return fn_for<int32_t>(kind);
    case DType::i64: return fn_for<int64_t>(kind);
    case DType::b8: return fn_for<bool>(kind);
    case DType::f16:
    case DType::bf16: break;
  }
  return nullptr;
}

void reduce_merge(ReduceKind kind, DType acc, void* a, const void* b) {
  if (kind == ReduceKind::OrderedSum || kind == ReduceKind::OrderedMax) fail(cat("reduce_merge: ", reduce_name(kind), " is never split"));
  if (kind == ReduceKind::Sum || kind == ReduceKind::Prod) {
    if (acc == DType::f64) return combine(kind, *static_cast<double*>(a), *static_cast<const double*>(b));
    if (acc == DType::i64) return combine(kind, *static_cast<int64_t*>(a), *static_cast<const int64_t*>(b));
    fail(cat("reduce_merge: ", reduce_name(kind), " accumulates in float64 or int64, got ", dtype_name(acc)));
  }
  auto merge = [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      fail(cat("reduce_merge: unsupported accumulator dtype ", dtype_name(acc)));
    } else if (kind == ReduceKind::Max) {
      folds::Extreme<T, true>{}.merge(*static_cast<T*>(a), *static_cast<const T*>(b));
    } else {
      folds::Extreme<T, false>{}.merge(*static_cast<T*>(a), *static_cast<const T*>(b));
    }
  };
  visit(acc, merge);
}

}  // namespace cr::jit
