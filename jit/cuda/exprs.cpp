// Expression text for CUDA kernels (see exprs.hpp). Plain arithmetic is written inline as the
// CPU backend emits it (bool arithmetic in int, compared != 0); a Call (a registry op the CPU
// runs as a block function) becomes a device function whose body is the op's registry
// expression, compiled against the prelude's vmath:: / sm:: / std:: device math.
#include "jit/cuda/exprs.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "vm/registry.hpp"

namespace cr::jit::cuda {

void Lines::add(const std::string& line) {
  text.append(size_t(2 * indent), ' ');
  text += line;
  text += '\n';
}
void Lines::open(const std::string& head) {
  add(head + " {");
  ++indent;
}
void Lines::close() {
  --indent;
  add("}");
}

std::string literal(double x, DType d) {
  if (d == DType::b8) return x != 0 ? "true" : "false";
  if (d == DType::f16 || d == DType::bf16) return cat(cuda_type(d), "(", literal(x, DType::f32), ")");
  if (is_floating(d)) {
    const char* t = cuda_type(d);
    if (std::isnan(x)) return cat("cr::nan_<", t, ">()");
    if (std::isinf(x)) return cat(x < 0 ? "-" : "", "cr::inf_<", t, ">()");
    char buf[48];
    std::snprintf(buf, sizeof buf, d == DType::f32 ? "%.9g" : "%.17g", x);
    std::string s = buf;
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return d == DType::f32 ? s + "f" : s;
  }
  // integers: limits arrive as doubles (2^63 is not an int64): clamp, as the CPU backend does
  if (d == DType::i32) return cat(int64_t(x));
  if (x >= 9.2e18) return "9223372036854775807LL";
  if (x <= -9.2e18) return "(-9223372036854775807LL - 1)";
  return cat(int64_t(x), "LL");
}

DType cuda_acc_dtype(const Accumulate& a) {
  bool fold = a.kind == ReduceKind::Sum || a.kind == ReduceKind::Prod;
  return fold && a.in == DType::f32 ? DType::f32 : a.acc;
}

// The ordered folds (softmax columns) are the plain ones here: a team folds in its own order.
const char* fold_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum:
    case ReduceKind::OrderedSum: return "cr::Sum";
    case ReduceKind::Prod: return "cr::Prod";
    case ReduceKind::Max:
    case ReduceKind::OrderedMax: return "cr::Max";
    case ReduceKind::Min: return "cr::Min";
  }
  return "?";
}

std::string plain_load(const Kernel& k, const Expr& e) {
  if (!e.gather()) return cat("p", e.value, "[", affine_str(e.index[0]), "]");
  return cat("p", e.value, "[", affine_str(e.index[0]), " + cr::position(e", e.a, ", ", int_str(e.limit), ", ", e.site, ", p", k.check,
             ") * ", int_str(e.stride), "]");
}

std::string Exprs::ref(int32_t i) {
  std::string id = cat("e", i);
  if (def_[size_t(i)]) return id;
  const Expr& e = k_.body.exprs[size_t(i)];
  const std::string value = !pair && reuse ? reuse(i) : "";
  const bool reused = !value.empty();
  if (!reused)
    for (int32_t o : {e.a, e.b, e.c})
      if (o >= 0) ref(o);
  if (pair) define_pair(i);
  else out_.add(cat("const ", cuda_type(e.dtype), " ", id, " = ", reused ? value : rhs(i), ";"));
  def_[size_t(i)] = 1;
  scopes_.back().push_back(i);
  if (computed && !reused && !pair) computed(i);
  return id;
}

// Both lanes of expression i (its operands defined): a rounding to 16 bits converts the two in
// one instruction.
void Exprs::define_pair(int32_t i) {
  const Expr& e = k_.body.exprs[size_t(i)];
  const char* t = cuda_type(e.dtype);
  bool half = e.dtype == DType::f16 || e.dtype == DType::bf16;
  if (e.op == EOp::Cast && half && k_.body.exprs[size_t(e.a)].dtype != e.dtype) {
    int bf16 = e.dtype == DType::bf16 ? 1 : 0;
    out_.add(cat("const uint32_t e", i, "_p = cr::cvt2<", bf16, ">(float(e", e.a, "_0), float(e", e.a, "_1));"));
    out_.add(cat("const ", t, " e", i, "_0 = ", t, "::of_bits(e", i, "_p), e", i, "_1 = ", t, "::of_bits(e", i,
                 "_p >> 16);"));
  } else {
    for (lane = 0; lane < 2; ++lane) out_.add(cat("const ", t, " ", name(i), " = ", rhs(i), ";"));
    lane = 0;
  }
}

void Exprs::close_scope() {
  for (int32_t i : scopes_.back()) def_[size_t(i)] = 0;
  scopes_.pop_back();
}

std::string Exprs::rhs(int32_t i) {
  const Expr& e = k_.body.exprs[size_t(i)];
  switch (e.op) {
    case EOp::Load: return load ? load(e) : plain_load(k_, e);
    case EOp::Const: return literal(e.num, e.dtype);
    case EOp::Index: return cat("(", cuda_type(e.dtype), ")(", affine_str(e.index[0]), ")");
    case EOp::Runtime: return cat("cr::run_word(p", k_.runtime, ", ", e.site, ")");
    case EOp::Number: return cat("__longlong_as_double(p", k_.numbers, ".v[", e.site, "])");
    case EOp::Count: return cat("double(", int_str(e.count), ")");
    case EOp::Cast: {
      DType from = k_.body.exprs[size_t(e.a)].dtype;
      if (e.dtype == DType::b8 && from != DType::b8) return cat("(", name(e.a), " != 0)");
      return cat("(", cuda_type(e.dtype), ")", name(e.a));
    }
    case EOp::Select: return cat(name(e.a), " ? ", name(e.b), " : ", name(e.c));
    case EOp::Reduced: return cat("(", cuda_type(e.dtype), ")acc", e.acc);
    case EOp::Arith: return arith(e);
    case EOp::Call: return call(e);
  }
  return "";
}

std::string Exprs::arith(const Expr& e) {
  std::string a = name(e.a);
  if (e.name == "!") return "!" + a;
  if (e.b < 0) return "-" + a;  // unary minus
  std::string b = name(e.b);
  if (e.name == "fma") return cat(e.dtype == DType::f32 ? "fmaf(" : "fma(", a, ", ", b, ", ", name(e.c), ")");
  if (e.name == "%u") return cat("(int64_t)((uint64_t)", a, " % (uint64_t)", b, ")");  // randint's bits % span
  bool compare = e.name == "==" || e.name == "!=" || e.name == "<" || e.name == "<=" || e.name == ">" || e.name == ">=";
  if (e.dtype == DType::b8 && !compare && e.name != "&&" && e.name != "||")  // bool arithmetic: in int, != 0
    return cat("((int)", a, " ", e.name, " (int)", b, ") != 0");
  return cat(a, " ", e.name, " ", b);
}

// A registry op as a device function of its compute dtype: `op_<name>_<type>(a, b)` returns the
// op's scalar expression (unary ops ignore b).
std::string Exprs::call(const Expr& e) {
  DType in = k_.body.exprs[size_t(e.a)].dtype;
  const char* expr = nullptr;
  if (const OpDef* def = Registry::get().find(e.name)) expr = def->expr;
  else if (const ExtraBlock* extra = extra_block(e.name)) expr = extra->expr;
  if (!expr) throw Error(cat("CUDA code generation: the op ", e.name, " has no scalar expression"));
  std::string fn = cat("op_", e.name, "_", cuda_type(in));
  if (!fns_.count(fn)) {
    const char* t = cuda_type(in);
    fns_[fn] = cat("__forceinline__ ", cuda_type(e.dtype), " ", fn, "(", t, " a, [[maybe_unused]] ", t, " b) { return ", expr, "; }");
  }
  std::string a = name(e.a);
  return cat(fn, "(", a, ", ", e.b >= 0 ? name(e.b) : a, ")");
}

}  // namespace cr::jit::cuda
