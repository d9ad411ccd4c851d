// CUDA C text of a kernel's expressions (internal to jit/cuda): types, literals, the functions of
// registry ops that the expressions call, and `const T eN = ...;` definitions in nested scopes.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "jit/loop_ir.hpp"
#include "vm/kernels/cuda/prelude.hpp"

namespace cr::jit::cuda {

using cr::cuda::cuda_type;  // (the prelude's types, vm/kernels/cuda/prelude.hpp)

// Lines of C with indentation.
struct Lines {
  std::string text;
  int indent = 0;
  void add(const std::string& line);
  void open(const std::string& head);  // "head {", one level deeper
  void close();                        // "}"
};

// A C literal of x in dtype d (NaN and infinities through the prelude's cr::nan_ / cr::inf_).
std::string literal(double x, DType d);
// The accumulator dtype on CUDA: float32 sums and products stay float32 (tree reductions, as
// PyTorch's CUDA reductions), anything else as the loop IR says.
DType cuda_acc_dtype(const Accumulate& a);
const char* fold_name(ReduceKind k);  // "cr::Sum", ...

// Expression definitions of one kernel. Names: eN for expression N; a load's text comes from
// `load` (default: the slot's pointer at the Affine over variables i0, i1, ...).
class Exprs {
 public:
  // `functions` collects the device functions of the registry ops the expressions call
  // (name -> definition), shared by the kernels of a module.
  Exprs(const Kernel& k, Lines& out, std::map<std::string, std::string>& functions) : k_(k), out_(out), fns_(functions) {
    def_.assign(k.body.exprs.size(), 0);
  }
  // The name of expression i, defining it and its operands first where they are not yet.
  std::string ref(int32_t i);
  void open_scope() { scopes_.emplace_back(); }
  void close_scope();
  bool defined(int32_t i) const { return def_[size_t(i)] != 0; }

  std::function<std::string(const Expr&)> load;
  // Pair mode (pointwise vector groups): each expression is defined for lanes u and u + 1, as
  // eN_0 and eN_1, so that both lanes' roundings to 16 bits are one paired conversion (the
  // prelude's cr::cvt2). `lane` tells `load` which lane it reads; ref() returns "eN".
  bool pair = false;
  int lane = 0;
  // Optional: the value of expression i taken from elsewhere (a register cache), "" for none.
  std::function<std::string(int32_t)> reuse;
  // Optional: called after expression i is defined by computing it.
  std::function<void(int32_t)> computed;

 private:
  std::string name(int32_t i) const { return pair ? cat("e", i, lane ? "_1" : "_0") : cat("e", i); }
  void define_pair(int32_t i);
  std::string rhs(int32_t i);
  std::string call(const Expr& e);
  std::string arith(const Expr& e);

  const Kernel& k_;
  Lines& out_;
  std::map<std::string, std::string>& fns_;
  std::vector<char> def_;
  std::vector<std::vector<int32_t>> scopes_{1};
};

// The plain load text: p<slot>[<affine>], and a gather's position checked (cr::position).
std::string plain_load(const Kernel& k, const Expr& e);

}  // namespace cr::jit::cuda
