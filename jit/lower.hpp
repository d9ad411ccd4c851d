// Internal helpers of the lowering (jit/lower.cpp, jit/lower_reduce.cpp).
#pragma once
#include "jit/loop_ir.hpp"

namespace cr::jit {

// The dtypes loop values hold on `device`. float16 / bfloat16 are stored as 16-bit words and
// computed in float32 (compute_dtype), in CUDA graphs only: the CPU code generator has no 16-bit
// loads and stores, so there they run on the eager kernels.
bool loop_dtype(DType d, Device device);
// The dtype a value of dtype d is computed in: float32 for float16 / bfloat16, else d.
inline DType compute_dtype(DType d) { return d == DType::f16 || d == DType::bf16 ? DType::f32 : d; }

// Builds the loop values of one graph node inside a LoopGraph.
struct Lowerer {
  LoopGraph& lg;
  const graph::Graph& g;

  // value ids
  int32_t of(int32_t gv) const { return lg.of_graph[size_t(gv)]; }
  const LoopValue& val(int32_t lv) const { return lg.values[size_t(lv)]; }
  Device device() const { return g.values.front().meta.device; }  // the graph's
  int32_t add_value(LoopValue v);  // also appends a computed step

  // Expressions inside a body over `rank` variables.
  // Loads value lv broadcast (from the right) to a shape of `rank` dims over those variables.
  static int32_t load_broadcast(Body& b, const LoopValue& v, int32_t lv, const Shape& shape);
  // Loads value lv at variables `vars[d]` per dim (-1: index 0, a size-1 dim).
  static int32_t load_at(Body& b, const LoopValue& v, int32_t lv, const std::vector<int>& vars);
  static int32_t constant(Body& b, double x, DType d);
  // n as a float64 that a dynamic graph's templates read as a parameter (EOp::Count)
  static int32_t count(Body& b, int64_t n);
  // the value of `a` over the body's variables (an element's position as data), in dtype d
  static int32_t index(Body& b, Affine a, DType d);
  static int32_t cast(Body& b, int32_t e, DType d);
  static int32_t arith(Body& b, const char* op, int32_t x, int32_t y, DType d);
  // A registry op's block function applied to x (and y): null when it has none for dtype d.
  static int32_t call(Body& b, const char* op, int32_t x, int32_t y, DType d);

  // Lowers a reduction-like node (sum, mean, softmax, ...). Returns false with `why` when it
  // has no loop lowering (it then runs as an Extern).
  bool reduction(int32_t node, std::string* why);
};

}  // namespace cr::jit
