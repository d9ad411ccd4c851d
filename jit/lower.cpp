// Lowering: an optimised graph -> loop values (jit/loop_ir.hpp). Pointwise ops become an
// expression per element: the registry's scalar expression when it is plain arithmetic (emitted
// inline by the backends), else a call of the op's block function (the eager kernel's own
// arithmetic, vectorised over a block). Views become index maps over their root's storage.
// Each op's lowering comes from the table (Lowerings, built here from each lowering file's
// registrations): positional ops are in lower_ops.cpp, reductions in lower_reduce.cpp. An op
// without one is an Extern step run by the eager kernels inside the compiled graph, with the
// reason kept for the fusion log.
#include <cctype>
#include <cmath>
#include <cstring>
#include <string_view>

#include "jit/lower.hpp"
#include "vm/kernels/scalar_math.hpp"
#include "vm/ops/operands.hpp"

namespace cr::jit {

bool loop_dtype(DType d, Device device) { return compute_dtype(d) == d || !device.is_cpu(); }

bool Affine::operator==(const Affine& o) const {
  if (c != o.c) return false;
  for (size_t v = 0; v < std::max(k.size(), o.k.size()); ++v)
    if (coef(v) != o.coef(v)) return false;
  return true;
}

Affine substitute(const Affine& a, const std::vector<Affine>& vars) {
  Affine r;
  r.c = a.c;
  for (size_t v = 0; v < a.k.size(); ++v) {
    if (a.k[v] == 0) continue;
    const Affine& x = vars[v];
    r.c += a.k[v] * x.c;
    for (size_t w = 0; w < x.k.size(); ++w)
      if (x.k[w]) r.add(w, a.k[v] * x.k[w]);
  }
  return r;
}

// ---- expression building --------------------------------------------------------------------

int32_t Lowerer::add_value(LoopValue v) {
  lg.values.push_back(std::move(v));
  int32_t id = int32_t(lg.values.size() - 1);
  const LoopValue& added = lg.values.back();
  if (added.gv >= 0) lg.of_graph[size_t(added.gv)] = id;
  if (added.kind == LKind::Pointwise || added.kind == LKind::Reduction) lg.steps.push_back(LStep{false, -1, id});
  return id;
}

int32_t Lowerer::load_at(Body& b, const LoopValue& v, int32_t lv, const std::vector<int>& vars) {
  Expr e{EOp::Load, v.dtype};
  e.value = lv;
  for (size_t d = 0; d < v.sizes.size(); ++d) e.index.push_back(vars[d] < 0 ? Affine{} : Affine::var(size_t(vars[d])));
  return b.add(std::move(e));
}

int32_t Lowerer::load_broadcast(Body& b, const LoopValue& v, int32_t lv, const Shape& shape) {
  std::vector<int> vars(v.sizes.size(), -1);
  size_t lead = shape.size() - v.sizes.size();
  // a size-1 dim that broadcasts is read at index 0 (no variable); one that does not keeps its
  // variable, so that a dynamic graph's code is the same when a symbolic size is 1 this time
  for (size_t d = 0; d < v.sizes.size(); ++d)
    if (!(v.sizes[d] == 1 && shape[lead + d] != 1)) vars[d] = int(lead + d);
  return load_at(b, v, lv, vars);
}

int32_t Lowerer::constant(Body& b, double x, DType d) {
  Expr e{EOp::Const, d};
  e.num = d == DType::b8 ? double(x != 0) : x;
  return b.add(std::move(e));
}

int32_t Lowerer::count(Body& b, int64_t n) {
  Expr e{EOp::Count, DType::f64};
  e.count = n;
  return b.add(std::move(e));
}

int32_t Lowerer::index(Body& b, Affine a, DType d) {
  Expr e{EOp::Index, d};
  e.index = {std::move(a)};
  return b.add(std::move(e));
}

// x stored in a T, as the eager kernels store it (vm/dtype.hpp)
template <class T> double rounded(double x) {
  T v;
  store(v, x);
  return double(load(v));
}

int32_t Lowerer::cast(Body& b, int32_t e, DType d) {
  if (b.exprs[size_t(e)].dtype == d) return e;
  if (b.exprs[size_t(e)].op == EOp::Const) {  // casts of constants fold as the eager scalar would
    double x = b.exprs[size_t(e)].num;
    if (d == DType::b8) x = x != 0;
    else if (!is_floating(d)) x = double(int64_t(x));
    else if (d == DType::f32) x = double(float(x));
    else if (d == DType::f16) x = rounded<Half>(x);
    else if (d == DType::bf16) x = rounded<BFloat16>(x);
    return constant(b, x, d);
  }
  Expr c{EOp::Cast, d};
  c.a = e;
  return b.add(std::move(c));
}

int32_t Lowerer::arith(Body& b, const char* op, int32_t x, int32_t y, DType d) {
  Expr e{EOp::Arith, d};
  e.name = op;
  e.a = x;
  e.b = y;
  return b.add(std::move(e));
}

int32_t Lowerer::fma(Body& b, int32_t x, int32_t y, int32_t z, DType d) {
  if (!is_floating(d)) return arith(b, "+", arith(b, "*", x, y, d), z, d);
  Expr e{EOp::Arith, d};
  e.name = "fma";
  e.a = x;
  e.b = y;
  e.c = z;
  return b.add(std::move(e));
}

int32_t Lowerer::call(Body& b, const char* op, int32_t x, int32_t y, DType d) {
  if (!block_function(op, d)) return -1;  // (each backend resolves the call by name and dtype)
  const OpDef* def = Registry::get().find(op);
  Expr e{EOp::Call, def && (def->flags & kBoolResult) ? DType::b8 : d};
  e.name = op;
  e.a = x;
  e.b = y;
  return b.add(std::move(e));
}

namespace {

// ---- the registry's scalar expressions ------------------------------------------------------
// OpDef::expr is the C++ expression the eager kernel instantiates. When it is plain arithmetic
// over the operands a, b (and c for ternary ops: "a + b", "a * a", "decltype(a)(1) / a",
// "bool(a) && bool(b)", "c ? x : y", "a + b * c") or uses one of the scalar helpers below, it is
// parsed here and emitted inline; anything else is called as the op's block function. An
// optional operand that is absent (clamp's bounds) may only be a helper's optional argument,
// which the helper then leaves out.
//
// Helpers of vm/kernels/scalar_math.hpp with an inline form: each is the helper's own definition
// written with selects (NaN and -0 behave as in the helper; integer negation wraps, as the
// generated code is compiled with -fwrapv).
struct Inline {
  const char* name;
  int arity;
  int32_t (*build)(Body&, int32_t a, int32_t b, int32_t c, DType d);
  bool optional = false;  // the last argument may be an absent operand (-1): the helper is skipped
};
int32_t select_expr(Body& b, int32_t c, int32_t x, int32_t y, DType d) { return b.add(Expr{EOp::Select, d, Lowerer::cast(b, c, DType::b8), x, y}); }
int32_t negate(Body& b, int32_t a, DType d) { return Lowerer::arith(b, "-", a, -1, d); }
int32_t cmp(Body& b, const char* op, int32_t x, int32_t y) { return Lowerer::arith(b, op, x, y, DType::b8); }
int32_t any_nan(Body& b, int32_t x, int32_t y) {
  return Lowerer::arith(b, "||", cmp(b, "!=", x, x), cmp(b, "!=", y, y), DType::b8);
}
// sm::clamp_min_ (op "<") / clamp_max_ (op ">"): x beyond the bound gives the bound; NaN wins
int32_t clamp_bound(Body& b, int32_t x, int32_t bound, const char* op, DType d) {
  if (bound < 0) return x;  // the bound is absent
  int32_t r = select_expr(b, cmp(b, op, x, bound), bound, x, d);
  if (!is_floating(d)) return r;
  return select_expr(b, cmp(b, "!=", x, x), x, select_expr(b, cmp(b, "!=", bound, bound), bound, r, d), d);
}
const Inline kInline[] = {
    {"sm::neg_", 1, [](Body& b, int32_t a, int32_t, int32_t, DType d) { return negate(b, a, d); }},
    {"sm::abs_", 1, [](Body& b, int32_t a, int32_t, int32_t, DType d) {
       return select_expr(b, cmp(b, "<", a, Lowerer::constant(b, 0, d)), negate(b, a, d), a, d);
     }},
    {"sm::relu_", 1, [](Body& b, int32_t a, int32_t, int32_t, DType d) {  // NaN <= 0 is false: NaN stays
       int32_t zero = Lowerer::constant(b, 0, d);
       return select_expr(b, cmp(b, "<=", a, zero), zero, a, d);
     }},
    {"sm::maximum_", 2, [](Body& b, int32_t x, int32_t y, int32_t, DType d) {
       int32_t m = select_expr(b, cmp(b, ">", x, y), x, y, d);
       return is_floating(d) ? select_expr(b, any_nan(b, x, y), Lowerer::constant(b, std::nan(""), d), m, d) : m;
     }},
    {"sm::minimum_", 2, [](Body& b, int32_t x, int32_t y, int32_t, DType d) {
       int32_t m = select_expr(b, cmp(b, "<", x, y), x, y, d);
       return is_floating(d) ? select_expr(b, any_nan(b, x, y), Lowerer::constant(b, std::nan(""), d), m, d) : m;
     }},
    {"sm::clamp_min_", 2, [](Body& b, int32_t x, int32_t lo, int32_t, DType d) { return clamp_bound(b, x, lo, "<", d); }, true},
    {"sm::clamp_max_", 2, [](Body& b, int32_t x, int32_t hi, int32_t, DType d) { return clamp_bound(b, x, hi, ">", d); }, true},
    {"sm::fma_", 3, [](Body& b, int32_t x, int32_t y, int32_t z, DType d) { return Lowerer::fma(b, x, y, z, d); }},
    {"sm::lerp_", 3, [](Body& b, int32_t x, int32_t y, int32_t w, DType d) {  // |w| < 0.5 as -0.5 < w < 0.5 (NaN: false)
       int32_t diff = Lowerer::arith(b, "-", y, x, d);
       int32_t small = Lowerer::arith(b, "&&", cmp(b, "<", w, Lowerer::constant(b, 0.5, d)),
                                      cmp(b, ">", w, Lowerer::constant(b, -0.5, d)), DType::b8);
       int32_t near = Lowerer::fma(b, w, diff, x, d);
       int32_t far = Lowerer::fma(b, Lowerer::arith(b, "-", x, y, d), Lowerer::arith(b, "-", Lowerer::constant(b, 1, d), w, d), y, d);
       return select_expr(b, small, near, far, d);
     }},
};
struct ExprParser {
  const char* s;
  Body& body;
  int32_t a, b;
  DType compute;
  int32_t c = -1;  // ternary ops' third operand; -1 for an absent one (clamp's bounds)
  bool ok = true;

  void skip() {
    while (*s == ' ') ++s;
  }
  bool eat(const char* t) {
    skip();
    size_t n = std::strlen(t);
    if (std::strncmp(s, t, n) != 0) return false;
    s += n;
    return true;
  }
  // e, unless it is an absent operand (-1): that fails the parse (a stands in, never emitted)
  int32_t present(int32_t e) {
    if (e < 0) ok = false;
    return e < 0 ? a : e;
  }
  int32_t primary() {
    skip();
    for (const Inline& f : kInline) {
      size_t n = std::strlen(f.name);
      if (std::strncmp(s, f.name, n) != 0 || s[n] != '(') continue;
      s += n + 1;
      int32_t args[3] = {parse_ternary(), -1, -1};
      for (int i = 1; i < f.arity; ++i)
        if (!(eat(",") && (args[i] = parse_ternary(), true))) ok = false;
      if (!eat(")") || !ok) return ok = false, a;
      if (compute == DType::b8) return ok = false, a;  // (bool inputs: the block function)
      for (int i = 0; i < f.arity; ++i)
        if (args[i] < 0 && !(f.optional && i == f.arity - 1)) return ok = false, a;
      return f.build(body, args[0], args[1], args[2], compute);
    }
    if (eat("-")) return Lowerer::arith(body, "-", present(primary()), -1, compute);
    if (eat("decltype(a)(")) {
      char* end;
      double x = std::strtod(s, &end);
      s = end;
      if (!eat(")")) ok = false;
      return Lowerer::constant(body, x, compute);
    }
    if (eat("bool(")) {
      int32_t e = present(parse(0));
      if (!eat(")")) ok = false;
      return Lowerer::cast(body, e, DType::b8);
    }
    if (eat("(")) {
      int32_t e = parse(0);
      if (!eat(")")) ok = false;
      return e;
    }
    if (eat("!")) {
      int32_t e = Lowerer::cast(body, present(primary()), DType::b8);
      return Lowerer::arith(body, "!", e, -1, DType::b8);
    }
    if (*s == 'a' || *s == 'b' || *s == 'c') {  // (-1: an absent operand, only an optional argument)
      const char name = *s++;
      if (std::isalnum(static_cast<unsigned char>(*s)) || *s == '_' || *s == ':') ok = false;
      return name == 'a' ? a : name == 'b' ? b : c;
    }
    ok = false;
    return a;
  }
  static int prec(const std::string& op) {
    if (op == "||") return 1;
    if (op == "&&") return 2;
    if (op == "==" || op == "!=") return 3;
    if (op == "<" || op == "<=" || op == ">" || op == ">=") return 4;
    if (op == "+" || op == "-") return 5;
    return 6;  // * /
  }
  std::string peek_op() {
    skip();
    for (const char* op : {"||", "&&", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/"})
      if (std::strncmp(s, op, std::strlen(op)) == 0) return op;
    return "";
  }
  // c ? x : y (lowest precedence, right-associative)
  int32_t parse_ternary() {
    int32_t c = parse(0);
    if (!eat("?")) return c;
    int32_t x = parse_ternary();
    if (!eat(":")) return ok = false, c;
    int32_t y = parse_ternary();
    return select_expr(body, present(c), present(x), present(y), body.exprs[size_t(present(x))].dtype);
  }
  int32_t parse(int min_prec) {
    int32_t lhs = primary();
    for (std::string op = peek_op(); ok && !op.empty() && prec(op) > min_prec; op = peek_op()) {
      s += op.size();
      int32_t rhs = present(parse(prec(op)));
      lhs = present(lhs);
      bool logical = op == "&&" || op == "||";
      bool compare = prec(op) == 3 || prec(op) == 4;
      if (logical) {
        lhs = Lowerer::cast(body, lhs, DType::b8);
        rhs = Lowerer::cast(body, rhs, DType::b8);
      }
      lhs = Lowerer::arith(body, op.c_str(), lhs, rhs, logical || compare ? DType::b8 : body.exprs[size_t(lhs)].dtype);
    }
    return lhs;
  }
};

}  // namespace


// ---- graph nodes ----------------------------------------------------------------------------

int32_t NodeLowering::optional_operand(Body& b, int i, const Shape& shape, DType compute) {
  return size_t(i) < n.args.size() && n.args[size_t(i)].tag != kNone ? operand(b, i, shape, compute) : -1;
}

int32_t NodeLowering::operand(Body& b, int i, const Shape& shape, DType compute) {
  const graph::Arg& a = n.args[size_t(i)];
  if (a.tag == kNumber && a.varying >= 0 && !literal_numbers) {  // a number that varies (graph::Arg::varying)
    Expr e{EOp::Number, DType::f64};
    e.site = int32_t(L.lg.numbers.size());
    L.lg.numbers.push_back({index, int32_t(i)});
    int32_t x = b.add(std::move(e));
    // (rounded as eager rounds the scalar; integers through int64, so out of range wraps as eager's)
    if (!is_floating(compute) && compute != DType::b8) x = Lowerer::cast(b, x, DType::i64);
    return Lowerer::cast(b, x, compute);
  }
  if (a.tag != kTensor) return Lowerer::constant(b, a.num, compute);
  int32_t lv = L.of(a.value);
  return Lowerer::cast(b, Lowerer::load_broadcast(b, L.val(lv), lv, shape), compute);
}

bool NodeLowering::define(LoopValue v) {
  L.lg.of_graph[size_t(n.outs[0])] = L.add_value(std::move(v));
  return true;
}

LoopValue NodeLowering::pointwise_value() const {
  const graph::ValueMeta& m = out().meta;
  LoopValue v{LKind::Pointwise, n.outs[0], graph::concrete(m.sizes), m.dtype};
  v.graph_node = index;
  return v;
}

namespace {

// Operand i for the registry's result-type rule: a tensor value or a Lua number / boolean.
OperandType desc(const NodeLowering& nl, int i) {
  const graph::Arg& a = nl.n.args[size_t(i)];
  if (a.tag != kTensor) return {OperandClass::Scalar, scalar_dtype(a.num, a.tag == kBool)};
  const graph::ValueMeta& m = nl.meta_of(a);
  return {m.sizes.empty() ? OperandClass::ZeroDim : OperandClass::Dimensioned, m.dtype};
}

// x ^ e as eager computes it (sm::pow_form); -1 for a generic exponent
int32_t pow_scalar(Body& b, int32_t x, double e, DType d) {
  auto mul = [&](int32_t p, int32_t q) { return Lowerer::arith(b, "*", p, q, d); };
  auto inv = [&](int32_t p) { return Lowerer::arith(b, "/", Lowerer::constant(b, 1, d), p, d); };
  switch (sm::pow_form(e)) {
    case sm::PowForm::Identity: return x;
    case sm::PowForm::Square: return mul(x, x);
    case sm::PowForm::Cube: return mul(mul(x, x), x);
    case sm::PowForm::Sqrt: return Lowerer::call(b, "sqrt", x, -1, d);
    case sm::PowForm::Rsqrt: return Lowerer::call(b, "rsqrt", x, -1, d);
    case sm::PowForm::Reciprocal: return inv(x);
    case sm::PowForm::InvSquare: return inv(mul(x, x));
    case sm::PowForm::Generic: break;
  }
  return -1;
}

// The pointwise lowering's forms: the registry's scalar expression, and the ops with a second
// form chosen by an argument: pow by a number (multiplications for small integral exponents),
// gelu by approximate = "tanh".
enum Pointwise : int { kExpr, kPow, kGelu };

// The dtype a pointwise node computes in (its operands' result type; float32 for 16-bit ones).
DType pointwise_compute(const NodeLowering& nl, int nin) {
  const graph::ValueMeta& m = nl.out().meta;
  std::vector<OperandType> ops;
  for (int i = 0; i < nin && i < int(nl.n.args.size()); ++i) ops.push_back(desc(nl, i));
  DType compute = m.dtype;
  if (m.dtype == DType::b8) compute = nin == 1 ? ops[0].dtype : result_type(ops);
  if (nl.n.def().kind == OpKind::Unary && is_floating(m.dtype)) compute = m.dtype;
  return compute_dtype(compute);  // float16 / bfloat16: float32, rounded once when stored
}

// Unary, binary and ternary ops from their scalar expression (OpDef::expr): inline arithmetic,
// else a call of the op's block function.
bool pointwise(NodeLowering& nl, int form) {
  const graph::Node& n = nl.n;
  const OpDef& def = n.def();
  const graph::ValueMeta& m = nl.out().meta;
  const int nin = def.kind == OpKind::Unary ? 1 : def.kind == OpKind::Binary ? 2 : 3;
  for (int i = 0; i < nin && i < int(n.args.size()); ++i)
    if (n.args[size_t(i)].tag == kTensor && !loop_dtype(nl.meta_of(n.args[size_t(i)]).dtype, nl.L.device()))
      return nl.reject("a float16 / bfloat16 operand");
  if (!def.expr) return nl.reject("no scalar expression");
  const DType compute = pointwise_compute(nl, nin);
  if (!is_floating(compute) && (def.flags & kValueErrors))
    return nl.reject("its integer form checks the values (division by zero, negative powers)");
  LoopValue v = nl.pointwise_value();
  const Shape& shape = v.sizes;
  Body& b = v.body;
  nl.literal_numbers = (def.flags & kCodeNumbers) != 0;
  int32_t x = nl.operand(b, 0, shape, compute);
  int32_t root = -1;
  if (form == kPow && is_floating(compute) && n.args[1].tag == kNumber) root = pow_scalar(b, x, n.args[1].num, compute);
  if (root < 0) {
    int32_t y = nin >= 2 ? nl.optional_operand(b, 1, shape, compute) : -1;
    int32_t z = nin == 3 ? nl.optional_operand(b, 2, shape, compute) : -1;
    // a number after the operands scales the second one (add / sub alpha, addcmul's value); a
    // floating add / sub rounds once, as eager (ATen's fmadd(other, alpha, self))
    bool fused = false;
    if (const graph::Arg* s = n.args.size() > size_t(nin) ? &n.args[size_t(nin)] : nullptr;
        s && s->is_number() && (s->num != 1.0 || s->varying >= 0) && y >= 0) {
      int32_t scale = nl.operand(b, nin, shape, compute);
      if ((fused = is_floating(compute) && (def.flags & kAlphaFma)))
        root = Lowerer::fma(b, y, def.flags & kAlphaNegates ? negate(b, scale, compute) : scale, x, compute);
      else y = Lowerer::arith(b, "*", y, scale, compute);
    }
    ExprParser p{def.expr, b, x, y, compute, z};
    if (!fused) root = p.parse_ternary();
    p.skip();
    if (!fused && (!p.ok || *p.s)) {  // not inline arithmetic: a call
      if (compute == DType::b8 && std::string_view(def.name) != "logical_not") return nl.reject("bool inputs of a function");
      bool tanh = form == kGelu && n.args.size() > 1 && n.args[1].tag == kString && n.args[1].str == "tanh";
      if (nin == 3) return nl.reject("its scalar expression has no inline form");
      root = Lowerer::call(b, tanh ? "gelu_tanh" : def.name, x, y, compute);
      if (root < 0) return nl.reject(cat("no block function for ", dtype_name(compute)));
    }
    // bool arithmetic (add / mul of masks) computes in int and stores != 0, as eager does
    if (compute == DType::b8 && b.exprs[size_t(root)].dtype != DType::b8) root = Lowerer::cast(b, root, DType::b8);
  }
  b.root = Lowerer::cast(b, root, m.dtype);
  return nl.define(std::move(v));
}

// where(condition, x, y): a select in the result's dtype.
bool where(NodeLowering& nl, int) {
  for (int i = 0; i < 3 && i < int(nl.n.args.size()); ++i)
    if (nl.n.args[size_t(i)].tag == kTensor && !loop_dtype(nl.meta_of(nl.n.args[size_t(i)]).dtype, nl.L.device()))
      return nl.reject("a float16 / bfloat16 operand");
  LoopValue v = nl.pointwise_value();
  Body& b = v.body;
  const DType cd = compute_dtype(v.dtype);
  int32_t c = nl.operand(b, 0, v.sizes, DType::b8);
  int32_t root = b.add(Expr{EOp::Select, cd, c, nl.operand(b, 1, v.sizes, cd), nl.operand(b, 2, v.sizes, cd)});
  b.root = Lowerer::cast(b, root, v.dtype);
  return nl.define(std::move(v));
}

// float() / long() / to(dtype) / clone() / contiguous(): an element-wise copy with a cast.
bool convert(NodeLowering& nl, int) {
  const graph::Arg& a = nl.n.args[0];
  if (a.tag != kTensor) return nl.reject("no tensor");
  const graph::ValueMeta& m = nl.out().meta, &in = nl.meta_of(a);
  if (!(m.device == in.device)) return nl.reject("a device transfer");
  if (!loop_dtype(m.dtype, nl.L.device()) || !loop_dtype(in.dtype, nl.L.device())) return nl.reject("a float16 / bfloat16 conversion");
  LoopValue v = nl.pointwise_value();
  if (v.sizes != graph::concrete(in.sizes)) return nl.reject("a shape change");
  int32_t lv = nl.L.of(a.value);
  v.body.root = Lowerer::cast(v.body, Lowerer::load_broadcast(v.body, nl.L.val(lv), lv, v.sizes), m.dtype);
  return nl.define(std::move(v));
}

// A node of an op: the checks every lowering shares, then the op's lowering.
bool lower_node(NodeLowering& nl) {
  const graph::Node& n = nl.n;
  const OpDef& def = n.def();
  const Lowering& l = Lowerings::get().of(n.op);
  if (n.outs.empty()) return nl.reject("no output");
  for (int32_t o : n.outs)
    if (nl.L.g.values[size_t(o)].node != nl.index) return nl.reject("returns its argument");
  if (n.inplace()) return nl.reject("in-place (writes its argument)");
  if (n.random() && !l.draws) return nl.reject("random");
  if (!(nl.out().meta.device == nl.L.g.values.front().meta.device)) return nl.reject("on another device than the graph");
  if (!loop_dtype(nl.out().meta.dtype, nl.L.device())) return nl.reject("float16 / bfloat16 result");
  if (!l.fn) return nl.reject(cat("no loop lowering for ", def.name, " (", def.kind == OpKind::Linalg ? "a library call" : "not a loop op", ")"));
  return l.fn(nl, l.form);
}

}  // namespace

void register_node_lowerings(Lowerings& t) {
  t.add("where", where);
  t.add("pow", pointwise, kPow);
  t.add("gelu", pointwise, kGelu);
  // the other pointwise ops and the conversions, by their kind
  const std::vector<OpDef>& ops = Registry::get().ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpKind k = ops[i].kind;
    const bool elementwise = k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Ternary;
    if (!t.lowered(int(i)) && (elementwise || k == OpKind::Convert)) t.add(ops[i].name, elementwise ? pointwise : convert, kExpr);
  }
}

Lowerings::Lowerings() : table_(Registry::get().ops().size()) {
  register_position_lowerings(*this);
  register_reduction_lowerings(*this);
  register_node_lowerings(*this);  // (last: it lowers by kind the ops the others did not name)
  // the startup check (the table is built at VM start; tests/cpp/test_lowerings.cpp names them)
  std::string names;
  for (const std::string& n : undeclared()) names += " " + n;
  if (!names.empty()) throw Error(cat("internal: registry ops with neither a loop lowering nor kExtern:", names));
}

std::vector<std::string> Lowerings::undeclared() const {
  std::vector<std::string> names;
  const std::vector<OpDef>& ops = Registry::get().ops();
  for (size_t i = 0; i < ops.size(); ++i)
    if (!lowered(int(i)) && ops[i].kind != OpKind::View && !(ops[i].flags & (kReturnsSelf | kDataSize | kExtern)))
      names.push_back(ops[i].name);
  return names;
}

const Lowerings& Lowerings::get() {
  static const Lowerings table;
  return table;
}

void Lowerings::add(const char* op, LowerFn fn, int form, bool draws) {
  const int i = Registry::get().index_of(op);
  if (i < 0) throw Error(cat("the lowering table names ", op, ", which is no registry op"));
  if (table_[size_t(i)].fn) throw Error(cat("the lowering table lowers ", op, " twice"));
  if (Registry::get().ops()[size_t(i)].flags & kExtern) throw Error(cat("the lowering table lowers ", op, ", declared kExtern"));
  table_[size_t(i)] = Lowering{fn, form, draws};
}

LoopGraph lower(const graph::Graph& g) {
  LoopGraph lg;
  lg.g = &g;
  lg.of_graph.assign(g.values.size(), -1);
  Lowerer L{lg, g};
  auto buffer = [&](int32_t gv) {
    const graph::ValueMeta& m = g.values[size_t(gv)].meta;
    LoopValue v{LKind::Buffer, gv, graph::concrete(m.sizes), m.dtype};
    v.strides = m.strides;
    v.offset = m.offset;
    lg.of_graph[size_t(gv)] = L.add_value(std::move(v));
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    if (n.kind != graph::NodeKind::Op) {
      for (int32_t o : n.outs) buffer(o);
      continue;
    }
    if (n.def().kind == OpKind::View && !n.outs.empty() && g.values[size_t(n.outs[0])].node == int32_t(i) &&
        g.values[size_t(n.outs[0])].views >= 0) {  // (a reshape that had to copy is not a view)
      // a view: its layout over the storage of its root (graph metadata), no step
      int32_t gv = n.outs[0];
      const graph::ValueMeta& m = g.values[size_t(gv)].meta;
      LoopValue v{LKind::View, gv, graph::concrete(m.sizes), m.dtype};
      v.root = lg.of_graph[size_t(graph::storage_root(g, gv))];
      v.strides = m.strides;
      v.offset = m.offset;
      if (v.root >= 0 && lg.values[size_t(v.root)].kind == LKind::View) v.root = lg.values[size_t(v.root)].root;
      lg.of_graph[size_t(gv)] = L.add_value(std::move(v));
      continue;
    }
    NodeLowering nl{L, n, int32_t(i)};
    const size_t nvalues = lg.values.size(), nsteps = lg.steps.size();
    if (lower_node(nl)) continue;
    lg.values.resize(nvalues);  // (a lowering that failed half-way: undone)
    lg.steps.resize(nsteps);
    lg.notes.push_back(cat(n.def().name, n.where.empty() ? "" : cat(" (", n.where, ")"), ": extern: ", nl.why));
    lg.steps.push_back(LStep{true, int32_t(i), -1});
    for (int32_t o : n.outs)
      if (g.values[size_t(o)].node == int32_t(i)) buffer(o);
  }
  return lg;
}

}  // namespace cr::jit
