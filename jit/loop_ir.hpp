// Loop IR: what a captured graph becomes before code generation (DESIGN.md, "Lowering, fusion,
// code generation"). Two levels, each read top-down by the next stage:
//
//  1. LoopGraph (jit/lower.cpp): one LoopValue per graph value, plus the extra values that
//     decompositions create (softmax = amax, sub, exp, sum, div). A value is a Buffer (graph
//     input, folded constant, the output of an Extern op run by the eager kernels), a View of
//     another value (its layout is its graph metadata: strides and offset over the storage of
//     its root), a Pointwise value (an expression per element over its own index variables), or
//     a Reduction (an expression over the input's index variables, folded over some of them).
//     Expressions load other values at an index that is an affine function of the variables:
//     broadcasting, and views folded into indices, never copy.
//  2. Kernel (jit/fusion/schedule.cpp): a fused group of Pointwise / Reduction values over one
//     iteration space, with the loads resolved to buffer addresses, stores for the values other
//     steps need, and reductions folded into accumulators. Backends emit code from a Kernel.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "vm/checks.hpp"
#include "jit/reduce.hpp"
#include "vm/graph/graph.hpp"

namespace cr::jit {

// c + sum_v k[v] * var_v over the variables of a node or a kernel (missing coefficients are 0).
struct Affine {
  int64_t c = 0;
  std::vector<int64_t> k;
  int64_t coef(size_t v) const { return v < k.size() ? k[v] : 0; }
  void add(size_t v, int64_t x) {
    if (k.size() <= v) k.resize(v + 1);
    k[v] += x;
  }
  bool operator==(const Affine& o) const;
  static Affine var(size_t v) {
    Affine a;
    a.add(v, 1);
    return a;
  }
};
// a with every variable v replaced by vars[v].
Affine substitute(const Affine& a, const std::vector<Affine>& vars);
// C text of a over variables named i0, i1, ... ("i0 + 4*i1 + 2"): kernel printing and CUDA C.
std::string affine_str(const Affine& a);

// ---- expressions ----------------------------------------------------------------------------
// Arith: "+", "-", "*", "/", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "!" (unary), "%u" (int64
// operands taken as unsigned: randint's bits % span), "fma" (a * b + c rounded once, floating
// dtypes: where eager's sm::fma_ has one).
// Call: op `name` element-wise over its operands' dtype (the compute dtype; the result is bool
// for predicates), resolved by each backend: a block function of the op on CPUs
// (cr::block_function), its scalar expression in CUDA C.
// Select: a ? b : c. Reduced: the accumulator of reduction `acc` (kernels only).
// Count: a number of elements as a float64 (a reduction's count: mean's 1/n, var's n - 1), an
// integer of the kernel like its sizes, so that a dynamic graph's templates take it as a
// parameter instead of compiling per size.
// Index: the value of an affine function of the variables (index[0], as a load's address), in
// `dtype`: an element's position as data (tril / triu compare a row with a column). It moves with
// the variables as addresses do (fusion substitutes it, collapsing and reordering rewrite it).
// A gather is a Load whose position along one dim is data: operand `a`, an integer expression
// holding a 1-based position (index_select, gather, embedding). In a LoopGraph, `dim` names that
// dim (index[dim] is unused); in a Kernel the address is index[0] + (a - 1) * stride. A position
// outside 1..limit reads position 1 instead and is reported through the kernel's check word
// (vm/checks.hpp), naming LoopGraph::sites[site]. The source is always read from memory: a
// value of the same kernel cannot be computed at a position known only when it is loaded.
// Runtime: word `site` of the run's values, an int64 the program sets at each run (the seed and
// the counter offset of a random op: LoopGraph::draws), a parameter of the kernel, not code.
// Number: the float64 LoopGraph::numbers[site], an operand number that varies between calls
// (graph::Arg::varying >= 0), likewise set by the program at each run.
enum class EOp : uint8_t { Load, Const, Cast, Arith, Call, Select, Reduced, Count, Index, Runtime, Number };

struct Expr {
  EOp op = EOp::Const;
  DType dtype = DType::f32;
  int32_t a = -1, b = -1, c = -1;  // operands (ids in the same expression list)
  // Load in a LoopGraph: value + one Affine per dim of the value, over the node's variables.
  // Load in a Kernel: buffer + element offset over the kernel's variables (index[0]).
  // Index: index[0] over the node's (LoopGraph) or the kernel's variables.
  int32_t value = -1;
  std::vector<Affine> index;
  double num = 0;    // Const
  std::string name;  // Arith operator, Call function name ("exp"), for printing and hashing
  int32_t acc = -1;  // Reduced
  int64_t count = 0;  // Count (a parameter in templates: jit/loop_ir.hpp parametrize)
  int32_t dim = -1;                   // gather (Load with a >= 0): the dim (LoopGraph)
  int64_t stride = 0, limit = 0;      // gather: the dim's stride (Kernel) and size
  int32_t site = -1;                  // gather: LoopGraph::sites entry; Runtime: the word; Number: its index
  bool gather() const { return op == EOp::Load && a >= 0; }
};

// An expression DAG: operands come before their users; `root` is the value.
struct Body {
  std::vector<Expr> exprs;
  int32_t root = -1;
  int32_t add(Expr e) {
    exprs.push_back(std::move(e));
    return int32_t(exprs.size() - 1);
  }
};

// ---- the loop graph -------------------------------------------------------------------------

enum class LKind : uint8_t { Buffer, View, Pointwise, Reduction };

struct LoopValue {
  LKind kind = LKind::Buffer;
  int32_t gv = -1;        // graph value id (-1: made by a decomposition)
  Shape sizes;            // the value's shape
  DType dtype = DType::f32;
  // View: the value whose storage it uses (a Buffer or a computed value), and its layout over
  // that storage. Buffers of graph values use their own graph metadata.
  int32_t root = -1;
  Shape strides;
  int64_t offset = 0;
  // Pointwise: body over sizes.size() variables. Reduction: body over in_sizes variables,
  // folded over the variables flagged in `reduced`; out_vars[d] = the variable output dim d
  // stands for (-1 for a kept size-1 dim).
  Body body;
  Shape in_sizes;
  std::vector<char> reduced;
  std::vector<int> out_vars;
  ReduceKind reduce = ReduceKind::Sum;
  DType acc_dtype = DType::f64;  // Reduction: dtype folded (the body's), accumulator by kind
  int32_t graph_node = -1;       // the graph node that made it (for logs / errors)
};

// One step of a lowered graph, in execution order: a graph op node that runs on the eager
// kernels, or a computed loop value (scheduled into kernels by jit/fusion).
struct LStep {
  bool external = false;
  int32_t node = -1;   // external: graph node index
  int32_t value = -1;  // computed: loop value id
};

struct LoopGraph {
  const graph::Graph* g = nullptr;
  std::vector<LoopValue> values;
  std::vector<int32_t> of_graph;  // graph value id -> loop value id (-1: none yet)
  std::vector<LStep> steps;
  std::vector<std::string> notes;  // what ran as Extern and why (CRESCENT_LOGS=fusion)
  CheckSites sites;  // gathers, for the errors of their checks (vm/checks.hpp)
  // Random ops lowered (rand / randn), in graph order: how many numbers each draws. Draw j reads
  // its seed from run word 2j and its first counter from word 2j + 1; the program takes them from
  // the generator as eager would, in this order (jit/program.cpp).
  std::vector<int64_t> draws;
  // Operand numbers lowered as EOp::Number (those that vary, graph::Arg::varying), in site order:
  // the graph node and the argument that holds each.
  struct NumberArg {
    int32_t node, arg;
  };
  std::vector<NumberArg> numbers;
  std::string str() const;
};

// Lowers an optimised graph. Ops without a loop lowering (matmul, cat, random, in-place,
// float16, ...) become external steps.
LoopGraph lower(const graph::Graph& g);

// ---- kernels --------------------------------------------------------------------------------

struct Store {
  int32_t buffer = -1;  // kernel buffer slot
  Affine addr;          // element offset over the kernel's variables
  int32_t expr = -1;
};
struct Accumulate {
  ReduceKind kind = ReduceKind::Sum;
  DType in = DType::f32, acc = DType::f64;
  int32_t expr = -1;
};

// A fused kernel over variables 0..sizes.size(): the first n_outer are the outer (parallel)
// loops, the rest inner loops; without reductions the inner loops are simply the innermost dims.
// Stage d of an outer iteration first evaluates the outer-level stores of depth d, then runs the
// inner loops for the stores and accumulations of depth d (Kernel::depth of their expression).
struct Kernel {
  std::string name;
  Shape sizes;
  int n_outer = 0;
  Body body;                      // Load (buffer, offset), Const, Cast, Arith, Call, Select, Reduced
  std::vector<Store> stores;
  std::vector<Accumulate> accs;   // Reduced exprs name these
  std::vector<int32_t> buffers;   // kernel buffer slot -> program buffer id
  int32_t check = -1;             // the slot of the plan's check word (kernels with gathers)
  int32_t runtime = -1;           // the slot of the run's values (kernels with Runtime exprs)
  int32_t draws = 0;              // ... and the draws of LoopGraph::draws up to its last one
  int32_t numbers = -1;           // the slot of the run's numbers (kernels with Number exprs)
  std::vector<int32_t> values;    // loop values computed here (for logs)
  int64_t chunk = 0;              // > 0: the innermost loop is split into chunks of this size
                                  // for parallel work (pointwise kernels only)
  // derived by analyse(): per expr, whether it varies with inner variables, and its stage depth
  std::vector<char> inner;
  std::vector<int> depth;
  int max_depth = 0;
  void analyse();
  int64_t work_items() const;
  // readable C-like rendering (CRESCENT_LOGS=output_code, debug dir); `block` > 0: the backend's
  // block of the innermost loop, noted on it
  std::string str(int64_t block = 0) const;
};

// ---- size parameters (dynamic shapes) ---------------------------------------------------------
// A kernel of a graph with symbolic sizes is compiled once for all the shapes that give it the
// same structure. parametrize() replaces its integer fields - loop sizes, the chunk, and the
// coefficients and constants of load and store addresses other than -1, 0 and 1 - by parameters
// kParamBase + j, to be read at run time from params[j], and returns their values in slot order
// (a fixed traversal of the kernel, no sharing of slots between equal values). Two kernels whose
// parametrized renderings (Kernel::str prints slot j as P<j>) are equal are then the same code
// with different params: the rendering is the cache key, and the guard that the code fits.
// Coefficients stay literal when 0 or +-1 because the code generators rely on those (unit-stride
// and invariant loads); a loop size is always a parameter, so that size 1 needs no other code.
constexpr int64_t kParamBase = int64_t(1) << 60;
inline bool is_param(int64_t x) { return x >= kParamBase; }
inline size_t param_slot(int64_t x) { return size_t(x - kParamBase); }
std::vector<int64_t> parametrize(Kernel& k);
// The number of parameters of a parametrized kernel (slots 0 .. n-1, each used once).
size_t param_count(const Kernel& k);
std::string int_str(int64_t x);  // "12", or "P3" for a parameter

}  // namespace cr::jit
