// Internal helpers of the lowering (jit/lower.cpp, jit/lower_ops.cpp, jit/lower_reduce.cpp) and
// its table of lowerings by op.
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
  static int32_t fma(Body& b, int32_t x, int32_t y, int32_t z, DType d);  // x * y + z, rounded once
  // A registry op's block function applied to x (and y): null when it has none for dtype d.
  static int32_t call(Body& b, const char* op, int32_t x, int32_t y, DType d);

};

// ---- the lowering table ---------------------------------------------------------------------
// One lowering per registry op (Inductor's register_lowering): a handler per shape of lowering,
// with the op it serves as its operand (`form`), registered next to the handler by each
// lowering file. An op without one runs as an Extern step on the eager kernels.

// A graph op node being lowered. Its lowering adds its loop values, or returns false with `why`
// (it then runs as an Extern); a lowering that fails leaves no value behind.
struct NodeLowering {
  Lowerer& L;
  const graph::Node& n;
  int32_t index;     // the node's
  std::string why;   // set when the node has no loop lowering
  // pow's exponent picks its code (sm::pow_form: x * x for 2...): a literal even where it varies
  // (an eager op's one-node graph marks every number: its program then serves that value only)
  bool literal_numbers = false;

  const graph::Value& out() const { return L.g.values[size_t(n.outs[0])]; }
  const graph::ValueMeta& meta_of(const graph::Arg& a) const { return L.g.values[size_t(a.value)].meta; }
  bool reject(std::string reason) {
    why = std::move(reason);
    return false;
  }
  // Operand i broadcast to `shape` in dtype `compute`: a tensor's load, a number's constant (or
  // its run value when it varies, EOp::Number).
  int32_t operand(Body& b, int i, const Shape& shape, DType compute);
  // operand i, or -1 when the op's optional argument i is absent (clamp's bounds)
  int32_t optional_operand(Body& b, int i, const Shape& shape, DType compute);
  // v, whose body is built, as the node's output value
  bool define(LoopValue v);
  // a Pointwise value of the output's shape and dtype, its body to build
  LoopValue pointwise_value() const;
};

using LowerFn = bool (*)(NodeLowering&, int form);
struct Lowering {
  LowerFn fn = nullptr;
  int form = 0;        // the handler's operand: which op it lowers (ReduceKind::Sum, ...)
  bool draws = false;  // it lowers the op's random draws (other random ops run as Externs)
};
class Lowerings {
 public:
  static const Lowerings& get();  // built from the registrations below at the first lowering
  const Lowering& of(int op) const { return table_[size_t(op)]; }
  bool lowered(int op) const { return table_[size_t(op)].fn != nullptr; }
  // Throws when `op` is no registry op or is lowered twice: the table's check at its build.
  void add(const char* op, LowerFn fn, int form = 0, bool draws = false);
  // The registry ops with neither a lowering nor a declaration that they run as Externs (views,
  // in-place ops, data-dependent sizes, kExtern): each op must be one or the other.
  std::vector<std::string> undeclared() const;

 private:
  Lowerings();
  std::vector<Lowering> table_;  // by registry index
};
// The registrations, one per lowering file.
void register_node_lowerings(Lowerings& t);       // lower.cpp: pointwise forms, conversions
void register_position_lowerings(Lowerings& t);   // lower_ops.cpp: selections, generators, gathers, draws
void register_reduction_lowerings(Lowerings& t);  // lower_reduce.cpp

}  // namespace cr::jit
