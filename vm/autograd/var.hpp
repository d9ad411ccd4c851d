// The expression helper derivative rules are written in: a Var is a tensor or a Lua number, and
// its operators and op() call registry ops through autograd::call - the path a Lua op call takes -
// so that a rule run with grad mode on (create_graph) records the nodes of a double backward.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

#include "vm/context.hpp"
#include "vm/registry.hpp"

namespace cr::autograd {

struct Var {
  Tensor t;
  double num = 0;
  bool is_num = false;
  Var() = default;
  Var(Tensor x) : t(std::move(x)) {}
  Var(double v) : num(v), is_num(true) {}
  bool defined() const { return is_num || t.defined(); }
  const Tensor& tensor() const;  // fails for a number
};

// One argument of a call made by a rule.
struct Arg {
  cr_value v{};
  std::vector<int64_t> ints;
  std::vector<cr_tensor*> list;
  std::string str;
  Arg(std::nullptr_t) {}
  Arg(const Var& x);
  Arg(const Tensor& x) : Arg(Var(x)) {}
  Arg(double x) { v.tag = kNumber; v.num = x; }
  Arg(int x) : Arg(double(x)) {}
  Arg(int64_t x) : Arg(double(x)) {}
  Arg(bool x) { v.tag = kBool; v.num = x; }
  Arg(const char* s) : str(s) { v.tag = kString; }
  Arg(const Shape& s) : ints(s.begin(), s.end()) { v.tag = kInts; }
  Arg(std::vector<int64_t> s) : ints(std::move(s)) { v.tag = kInts; }
  Arg(const std::vector<Var>& ts);
};

// Runs registry op `name` on args through autograd::call (the context is the engine's).
std::vector<Tensor> call_op(const char* name, std::initializer_list<Arg> args);
Var op(const char* name, std::initializer_list<Arg> args);

Var operator+(const Var& a, const Var& b);
Var operator-(const Var& a, const Var& b);
Var operator*(const Var& a, const Var& b);
Var operator/(const Var& a, const Var& b);
Var operator-(const Var& a);

// Reductions and shapes with 0-based dims (the registry's are 1-based, as Lua's).
Var sum(const Var& x, const std::vector<int>& dims, bool keepdim);
Var sum_to(const Var& x, const Shape& sizes);  // undoes broadcasting to sizes
Var expand(const Var& x, const Shape& sizes);
Var reshape(const Var& x, const Shape& sizes);
Var unsqueeze(const Var& x, int dim);
Var zeros(const Shape& sizes, DType dtype, Device device);
Var zeros_like(const Var& x);
Var to_dtype(const Var& x, DType dtype);
Var where(const Var& cond, const Var& a, const Var& b);
// The leading block of x with `sizes` (a view); `part` as the leading block of zeros of `sizes`
// (the gradient of a source larger than its index: the elements no index reached get zeros).
Var leading(const Var& x, const Shape& sizes);
Var widened(const Var& part, const Shape& sizes);

// The context rules run in (set by the engine while it runs).
Context& current_context();
struct ContextScope {
  Context* prev;
  explicit ContextScope(Context& c);
  ~ContextScope();
};

}  // namespace cr::autograd
