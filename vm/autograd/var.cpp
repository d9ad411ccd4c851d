#include "vm/autograd/var.hpp"

#include <unordered_map>

#include "vm/autograd/call.hpp"

namespace cr::autograd {

namespace {
thread_local Context* current = nullptr;
}

Context& current_context() {
  if (!current) fail("internal: a derivative rule ran outside the autograd engine");
  return *current;
}
ContextScope::ContextScope(Context& c) : prev(current) { current = &c; }
ContextScope::~ContextScope() { current = prev; }

const Tensor& Var::tensor() const {
  if (!t.defined()) fail("internal: a derivative rule expected a tensor, got a number");
  return t;
}

Arg::Arg(const Var& x) {
  if (x.is_num) {
    v.tag = kNumber;
    v.num = x.num;
  } else if (x.t.defined()) {
    v.tag = kTensor;
    v.ptr = x.t.get();
  }
}

Arg::Arg(const std::vector<Var>& ts) {
  for (const Var& x : ts) list.push_back(x.tensor().get());
  v.tag = kTensors;
}

int op_id(const char* name) {
  static thread_local std::unordered_map<const char*, int> ids;  // keyed by the literal's address
  auto it = ids.find(name);
  if (it != ids.end()) return it->second;
  int id = Registry::get().index_of(name);
  if (id < 0) fail(cat("internal: a derivative rule calls the unknown op '", name, "'"));
  return ids[name] = id;
}

std::vector<Tensor> call_op(const char* name, std::initializer_list<Arg> args) {
  cr_value vs[16];
  int n = 0;
  for (const Arg& a : args) {
    cr_value v = a.v;
    if (v.tag == kInts) {
      v.n = int32_t(a.ints.size());
      v.ptr = const_cast<int64_t*>(a.ints.data());
    } else if (v.tag == kTensors) {
      v.n = int32_t(a.list.size());
      v.ptr = const_cast<cr_tensor**>(a.list.data());
    } else if (v.tag == kString) {
      v.str = a.str.c_str();
    }
    vs[n++] = v;
  }
  std::vector<Tensor> outs;
  call(current_context(), op_id(name), vs, n, outs);
  return outs;
}

Var op(const char* name, std::initializer_list<Arg> args) { return call_op(name, args).at(0); }

// (two numbers combine in Lua's arithmetic, as a rule's constants do)
Var operator+(const Var& a, const Var& b) { return a.is_num && b.is_num ? Var(a.num + b.num) : op("add", {a, b}); }
Var operator-(const Var& a, const Var& b) { return a.is_num && b.is_num ? Var(a.num - b.num) : op("sub", {a, b}); }
Var operator*(const Var& a, const Var& b) { return a.is_num && b.is_num ? Var(a.num * b.num) : op("mul", {a, b}); }
Var operator/(const Var& a, const Var& b) { return a.is_num && b.is_num ? Var(a.num / b.num) : op("div", {a, b}); }
Var operator-(const Var& a) { return a.is_num ? Var(-a.num) : op("neg", {a}); }

Var sum(const Var& x, const std::vector<int>& dims, bool keepdim) {
  std::vector<int64_t> d1;
  for (int d : dims) d1.push_back(d + 1);
  return op("sum", {x, d1, keepdim});
}

// The gradient of a broadcast input: summed over the dims broadcasting added or stretched.
Var sum_to(const Var& x, const Shape& sizes) {
  const Shape xs = x.tensor().sizes();
  if (xs == sizes) return x;
  const int lead = int(xs.size()) - int(sizes.size());
  std::vector<int> dims;
  for (int d = 0; d < int(xs.size()); ++d)
    if (d < lead || (sizes[size_t(d - lead)] == 1 && xs[size_t(d)] != 1)) dims.push_back(d);
  Var r = dims.empty() ? x : sum(x, dims, true);
  return r.tensor().sizes() == sizes ? r : reshape(r, sizes);
}

Var expand(const Var& x, const Shape& sizes) { return op("expand", {x, sizes}); }
Var reshape(const Var& x, const Shape& sizes) { return op("reshape", {x, sizes}); }
Var unsqueeze(const Var& x, int dim) { return op("unsqueeze", {x, dim + 1}); }
Var zeros(const Shape& sizes, DType dtype, Device device) {
  return op("zeros", {sizes, dtype_name(dtype), device_name(device).c_str()});
}
Var zeros_like(const Var& x) { return op("zeros_like", {x}); }
Var to_dtype(const Var& x, DType dtype) {
  return x.tensor().dtype() == dtype ? x : op("to", {x, dtype_name(dtype)});
}
Var where(const Var& cond, const Var& a, const Var& b) { return op("where", {cond, a, b}); }

Var leading(const Var& x, const Shape& sizes) {
  Var r = x;
  for (size_t k = 0; k < sizes.size(); ++k)
    if (r.tensor().size(int(k)) != sizes[k]) r = op("narrow", {r, int64_t(k) + 1, int64_t(1), sizes[k]});
  return r;
}

Var widened(const Var& part, const Shape& sizes) {
  if (part.tensor().sizes() == sizes) return part;
  Var z = zeros(sizes, part.tensor().dtype(), part.tensor().device());
  call_op("copy_", {leading(z, part.tensor().sizes()), part});
  return z;
}

}  // namespace cr::autograd
