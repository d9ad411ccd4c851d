// Lowering: an optimised graph -> loop values (jit/loop_ir.hpp). Pointwise ops become an
// expression per element: the registry's scalar expression when it is plain arithmetic (emitted
// inline by the backends), else a call of the op's block function (the eager kernel's own
// arithmetic, vectorised over a block). Views become index maps over their root's storage.
// Reductions and their decompositions are in lower_reduce.cpp. Anything else is an Extern step
// run by the eager kernels inside the compiled graph, with the reason kept for the fusion log.
#include <cctype>
#include <cmath>
#include <cstring>

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
    {"sm::lerp_", 3, [](Body& b, int32_t x, int32_t y, int32_t w, DType d) {  // |w| < 0.5 as -0.5 < w < 0.5 (NaN: false)
       int32_t diff = Lowerer::arith(b, "-", y, x, d);
       int32_t small = Lowerer::arith(b, "&&", cmp(b, "<", w, Lowerer::constant(b, 0.5, d)),
                                      cmp(b, ">", w, Lowerer::constant(b, -0.5, d)), DType::b8);
       int32_t near = Lowerer::arith(b, "+", x, Lowerer::arith(b, "*", w, diff, d), d);
       int32_t far = Lowerer::arith(b, "-", y, Lowerer::arith(b, "*", diff, Lowerer::arith(b, "-", Lowerer::constant(b, 1, d), w, d), d), d);
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

namespace {

struct NodeLowering {
  Lowerer& L;
  const graph::Node& n;
  int32_t index;
  std::string why;  // set when the node has no loop lowering
  // pow's exponent picks its code (sm::pow_form: x * x for 2...): a literal even where it varies
  // (an eager op's one-node graph marks every number: its program then serves that value only)
  bool literal_numbers = false;

  const graph::Value& out() const { return L.g.values[size_t(n.outs[0])]; }

  bool reject(std::string reason) {
    why = std::move(reason);
    return false;
  }

  // Operand i for the registry's result-type rule: a tensor value or a Lua number / boolean.
  OperandType desc(int i) const {
    const graph::Arg& a = n.args[size_t(i)];
    if (a.tag != kTensor) return {OperandClass::Scalar, scalar_dtype(a.num, a.tag == kBool)};
    const graph::ValueMeta& m = L.g.values[size_t(a.value)].meta;
    return {m.sizes.empty() ? OperandClass::ZeroDim : OperandClass::Dimensioned, m.dtype};
  }
  // operand i, or -1 when the op's optional argument i is absent (clamp's bounds)
  int32_t optional_operand(Body& b, int i, const Shape& shape, DType compute) {
    return size_t(i) < n.args.size() && n.args[size_t(i)].tag != kNone ? operand(b, i, shape, compute) : -1;
  }
  int32_t operand(Body& b, int i, const Shape& shape, DType compute) {
    const graph::Arg& a = n.args[size_t(i)];
    if (a.tag == kNumber && a.varying >= 0 && !literal_numbers) {  // a number that varies (graph::Arg::varying)
      Expr e{EOp::Number, DType::f64};
      e.site = int32_t(L.lg.numbers.size());
      L.lg.numbers.push_back({index, int32_t(i)});
      return Lowerer::cast(b, b.add(std::move(e)), compute);  // (rounded as eager rounds the scalar)
    }
    if (a.tag != kTensor) return Lowerer::constant(b, a.num, compute);
    int32_t lv = L.of(a.value);
    return Lowerer::cast(b, Lowerer::load_broadcast(b, L.val(lv), lv, shape), compute);
  }

  // x ^ e as eager computes it (sm::pow_form); -1 for a generic exponent
  static int32_t pow_scalar(Body& b, int32_t x, double e, DType d) {
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

  bool pointwise() {
    const OpDef& def = n.def();
    const graph::ValueMeta& m = out().meta;
    Shape shape = graph::concrete(m.sizes);
    std::string name = def.name;
    int nin = def.kind == OpKind::Unary ? 1 : def.kind == OpKind::Binary ? 2 : 3;
    for (int i = 0; i < nin && i < int(n.args.size()); ++i)
      if (n.args[size_t(i)].tag == kTensor && !loop_dtype(L.g.values[size_t(n.args[size_t(i)].value)].meta.dtype, L.device()))
        return reject("a float16 / bfloat16 operand");
    std::vector<OperandType> ops;
    for (int i = 0; i < nin && i < int(n.args.size()); ++i) ops.push_back(desc(i));
    DType compute = m.dtype;
    if (m.dtype == DType::b8) compute = nin == 1 ? ops[0].dtype : result_type(ops);
    if (def.kind == OpKind::Unary && is_floating(m.dtype)) compute = m.dtype;
    compute = compute_dtype(compute);  // float16 / bfloat16: float32, rounded once when stored

    LoopValue v{LKind::Pointwise, n.outs[0], shape, m.dtype};
    v.graph_node = index;
    Body& b = v.body;
    int32_t root = -1;
    if (def.loop == LoopForm::Where) {
      int32_t c = operand(b, 0, shape, DType::b8);
      const DType cd = compute_dtype(m.dtype);
      root = b.add(Expr{EOp::Select, cd, c, operand(b, 1, shape, cd), operand(b, 2, shape, cd)});
    } else if (def.expr) {
      if (!is_floating(compute) && (def.flags & kValueErrors))
        return reject("its integer form checks the values (division by zero, negative powers)");
      literal_numbers = def.loop == LoopForm::Pow;
      int32_t x = operand(b, 0, shape, compute);
      if (def.loop == LoopForm::Pow && is_floating(compute) && n.args[1].tag == kNumber)
        root = pow_scalar(b, x, n.args[1].num, compute);
      if (root >= 0) {
        b.root = Lowerer::cast(b, root, m.dtype);
        L.lg.of_graph[size_t(n.outs[0])] = L.add_value(std::move(v));
        return true;
      }
      int32_t y = nin >= 2 ? optional_operand(b, 1, shape, compute) : -1;
      int32_t z = nin == 3 ? optional_operand(b, 2, shape, compute) : -1;
      // a number after the operands scales the second one (add / sub alpha, addcmul's value)
      if (const graph::Arg* s = n.args.size() > size_t(nin) ? &n.args[size_t(nin)] : nullptr;
          s && s->is_number() && (s->num != 1.0 || s->varying >= 0) && y >= 0)
        y = Lowerer::arith(b, "*", y, operand(b, nin, shape, compute), compute);
      ExprParser p{def.expr, b, x, y, compute, z};
      root = p.parse_ternary();
      p.skip();
      bool is_call = !p.ok || *p.s;
      if (is_call) {
        if (compute == DType::b8 && name != "logical_not") return reject("bool inputs of a function");
        bool tanh = def.loop == LoopForm::Gelu && n.args.size() > 1 && n.args[1].tag == kString && n.args[1].str == "tanh";
        if (nin == 3) return reject("its scalar expression has no inline form");
        root = Lowerer::call(b, tanh ? "gelu_tanh" : def.name, x, y, compute);
        if (root < 0) return reject(cat("no block function for ", dtype_name(compute)));
      }
      // bool arithmetic (add / mul of masks) computes in int and stores != 0, as eager does
      if (compute == DType::b8 && b.exprs[size_t(root)].dtype != DType::b8) root = Lowerer::cast(b, root, DType::b8);
    } else {
      return reject("no scalar expression");
    }
    b.root = Lowerer::cast(b, root, m.dtype);
    L.lg.of_graph[size_t(n.outs[0])] = L.add_value(std::move(v));
    return true;
  }

  // masked_fill(x, mask, value) = where(mask, value, x), the value converted to x's dtype first as
  // eager does. A fractional value into an integer tensor stays eager (its conversion checks).
  bool masked_fill() {
    const graph::ValueMeta& m = out().meta;
    const graph::Arg& v = n.args[2];
    const bool float_value = v.tag == kTensor ? is_floating(L.g.values[size_t(v.value)].meta.dtype) : v.num != std::floor(v.num);
    if (!is_floating(m.dtype) && float_value) return reject("a float value into an integer tensor");
    if (m.dtype == DType::b8 && v.tag != kTensor && v.num != 0 && v.num != 1) return reject("a bool tensor filled with a number");
    Shape shape = graph::concrete(m.sizes);
    LoopValue lv{LKind::Pointwise, n.outs[0], shape, m.dtype};
    lv.graph_node = index;
    Body& b = lv.body;
    const DType cd = compute_dtype(m.dtype);
    int32_t value = Lowerer::cast(b, operand(b, 2, shape, m.dtype), cd);
    b.root = Lowerer::cast(b, b.add(Expr{EOp::Select, cd, operand(b, 1, shape, DType::b8), value, operand(b, 0, shape, cd)}), m.dtype);
    L.lg.of_graph[size_t(n.outs[0])] = L.add_value(std::move(lv));
    return true;
  }

  // tril / triu: x where the element's column minus its row is <= k (tril) or >= k (triu), else
  // 0, as eager zeroes the other triangle (vm/ops/linalg.cpp run_tri); the op checked ndim >= 2.
  bool triangle(bool lower) {
    const graph::ValueMeta& m = out().meta;
    if (n.args[0].tag != kTensor) return reject("no tensor");
    Shape shape = graph::concrete(m.sizes);
    const size_t row = shape.size() - 2, col = shape.size() - 1;
    const double k = n.args.size() > 1 && n.args[1].is_number() ? n.args[1].num : 0;
    LoopValue v{LKind::Pointwise, n.outs[0], shape, m.dtype};
    v.graph_node = index;
    Body& b = v.body;
    Affine diagonal = Affine::var(col);
    diagonal.add(row, -1);
    int32_t keep = Lowerer::arith(b, lower ? "<=" : ">=", Lowerer::index(b, diagonal, DType::i64),
                                  Lowerer::constant(b, k, DType::i64), DType::b8);
    const DType cd = compute_dtype(m.dtype);
    int32_t kept = b.add(Expr{EOp::Select, cd, keep, operand(b, 0, shape, cd), Lowerer::constant(b, 0, cd)});
    b.root = Lowerer::cast(b, kept, m.dtype);
    L.lg.of_graph[size_t(n.outs[0])] = L.add_value(std::move(v));
    return true;
  }

  // arange / linspace / eye: values of their position, computed as the eager kernels compute them
  // (vm/ops/creation.cpp: in float64, then stored in the dtype). The op checked the arguments.
  bool generator(LoopForm form) {
    const graph::ValueMeta& m = out().meta;
    if (m.dtype == DType::f16 || m.dtype == DType::bf16) return reject("a float16 / bfloat16 result");
    Shape shape = graph::concrete(m.sizes);
    LoopValue v{LKind::Pointwise, n.outs[0], shape, m.dtype};
    v.graph_node = index;
    Body& b = v.body;
    const DType f64 = DType::f64;
    auto num = [&](size_t i, double otherwise) { return i < n.args.size() && n.args[i].is_number() ? n.args[i].num : otherwise; };
    auto at = [&](size_t d) { return Lowerer::index(b, Affine::var(d), DType::i64); };
    auto c = [&](double x, DType d) { return Lowerer::constant(b, x, d); };
    int32_t root;
    if (form == LoopForm::Eye) {  // 1 on the diagonal
      root = Lowerer::cast(b, Lowerer::arith(b, "==", at(0), at(1), DType::b8), m.dtype);
    } else if (form == LoopForm::Arange) {  // start + i * step
      const bool bounds = n.args.size() > 1 && n.args[1].is_number();  // arange(start, stop[, step]) / arange(stop)
      double start = bounds ? num(0, 0) : 0, step = num(2, 1);
      if (!is_floating(m.dtype)) start = std::trunc(start), step = std::trunc(step);  // (as run_arange)
      root = Lowerer::arith(b, "+", c(start, f64), Lowerer::arith(b, "*", Lowerer::cast(b, at(0), f64), c(step, f64), f64), f64);
    } else {  // linspace: symmetric from both ends, so that the last point is exactly the end
      const double a = num(0, 0), e = num(1, 0);
      const int64_t steps = shape[0];
      const double step = steps > 1 ? (e - a) / double(steps - 1) : 0;
      if (steps == 1) {
        root = c(a, f64);
      } else {
        int32_t i = at(0);
        int32_t head = Lowerer::arith(b, "+", c(a, f64), Lowerer::arith(b, "*", c(step, f64), Lowerer::cast(b, i, f64), f64), f64);
        int32_t back = Lowerer::cast(b, Lowerer::arith(b, "-", c(double(steps - 1), DType::i64), i, DType::i64), f64);
        int32_t tail = Lowerer::arith(b, "-", c(e, f64), Lowerer::arith(b, "*", c(step, f64), back, f64), f64);
        root = b.add(Expr{EOp::Select, f64, Lowerer::arith(b, "<", i, c(double(steps / 2), DType::i64), DType::b8), head, tail});
      }
    }
    b.root = Lowerer::cast(b, root, m.dtype);
    L.lg.of_graph[size_t(n.outs[0])] = L.add_value(std::move(v));
    return true;
  }

  // index_select(x, dim, index) / gather(x, dim, index) / embedding(index, weight): x read at a
  // position along one dim that is data (a gather Load, jit/loop_ir.hpp), 1-based, checked by
  // the kernel against the dim's size. index_select's index runs along the result's dim d;
  // gather's has the result's shape; embedding's (any shape) picks rows of {n, D} weights.
  bool gather(LoopForm form) {
    const bool embed = form == LoopForm::Embedding;
    const graph::Arg &xa = n.args[embed ? 1 : 0], &ia = n.args[embed ? 0 : 2];
    if (xa.tag != kTensor || ia.tag != kTensor) return reject("no tensor");
    const graph::ValueMeta& xm = L.g.values[size_t(xa.value)].meta;
    const graph::ValueMeta& im = L.g.values[size_t(ia.value)].meta;
    if (xm.sizes.empty() || !is_integral(im.dtype)) return reject("a 0-d input or a non-integer index");
    if (!loop_dtype(xm.dtype, L.device())) return reject("a float16 / bfloat16 input");
    const Shape xs = graph::concrete(xm.sizes), is = graph::concrete(im.sizes);
    const int d = embed ? 0 : normalize_dim(int64_t(n.args[1].num), int(xs.size()));
    const graph::ValueMeta& m = out().meta;
    Shape shape = graph::concrete(m.sizes);
    int64_t numel = 1;
    for (int64_t sz : shape) numel *= sz;
    // no valid position and something to read: eager raises it before any kernel runs
    if (xs[size_t(d)] == 0 && numel > 0) return reject("an empty dim to gather from");
    LoopValue v{LKind::Pointwise, n.outs[0], shape, m.dtype};
    v.graph_node = index;
    Body& b = v.body;
    const size_t nd = shape.size();
    // the index's dims over the result's variables: index_select's runs along dim d; gather's
    // and embedding's are the result's leading dims
    std::vector<int> ivars(is.size(), -1);
    for (size_t k = 0; k < is.size(); ++k) ivars[k] = form == LoopForm::IndexSelect ? d : int(k);
    int32_t il = L.of(ia.value);
    int32_t at = Lowerer::cast(b, Lowerer::load_at(b, L.val(il), il, ivars), DType::i64);
    Expr e{EOp::Load, xm.dtype};
    e.value = L.of(xa.value);
    e.a = at;
    e.dim = d;
    e.limit = xs[size_t(d)];
    e.site = int32_t(L.lg.sites.size());
    for (size_t k = 0; k < xs.size(); ++k)
      e.index.push_back(int(k) == d ? Affine{} : Affine::var(embed ? nd - 1 : k));
    L.lg.sites.push_back({n.where, n.def().name, embed ? cat("a weight of ", xs[0], " rows") : cat("dim ", d + 1, " of size ", xs[size_t(d)])});
    b.root = Lowerer::cast(b, b.add(std::move(e)), m.dtype);
    L.lg.of_graph[size_t(n.outs[0])] = L.add_value(std::move(v));
    return true;
  }

  // rand / randn / randint(lo, hi): element i (row-major) is draw(offset + i, seed), as the eager
  // kernels draw it (vm/ops/creation.cpp run_random), with the seed and offset run values
  // (EOp::Runtime) that the program takes from the generator at each run. randint is lo +
  // bits % (hi - lo); eager goes through a double, so only ranges whose values are exact in one
  // lower (|lo| + span <= 2^53; the others draw on the eager kernels).
  bool random(LoopForm form) {
    const graph::ValueMeta& m = out().meta;
    const bool integers = form == LoopForm::Randint;
    if ((!integers && !is_floating(m.dtype)) || !loop_dtype(m.dtype, L.device())) return reject("not a float32 / float64 result");
    const double lo = integers ? n.args[0].num : 0, span = integers ? n.args[1].num - n.args[0].num : 0;
    if (integers && !(std::fabs(lo) + span <= 0x1p53)) return reject("a range beyond 2^53");
    Shape shape = graph::concrete(m.sizes);
    LoopValue v{LKind::Pointwise, n.outs[0], shape, m.dtype};
    v.graph_node = index;
    Body& b = v.body;
    const int32_t j = int32_t(L.lg.draws.size());
    int64_t numel = 1;
    for (int64_t s : shape) numel *= s;
    L.lg.draws.push_back(numel);
    Affine flat = contiguous_position(shape);
    auto word = [&](int32_t w) {
      Expr e{EOp::Runtime, DType::i64};
      e.site = w;
      return b.add(std::move(e));
    };
    int32_t counter = Lowerer::arith(b, "+", word(2 * j + 1), Lowerer::index(b, flat, DType::i64), DType::i64);
    const char* draw = form == LoopForm::Rand ? "philox_uniform" : form == LoopForm::Randn ? "philox_normal" : "philox_bits";
    int32_t x = Lowerer::call(b, draw, counter, word(2 * j), DType::i64);
    if (x < 0) return reject("no draw function");
    if (integers) {
      const DType i64 = DType::i64;
      x = Lowerer::arith(b, "+", Lowerer::constant(b, lo, i64), Lowerer::arith(b, "%u", x, Lowerer::constant(b, span, i64), i64), i64);
    } else {
      b.exprs[size_t(x)].dtype = DType::f64;  // (int64 counters in, float64 numbers out)
    }
    b.root = Lowerer::cast(b, x, m.dtype);
    L.lg.of_graph[size_t(n.outs[0])] = L.add_value(std::move(v));
    return true;
  }
  static Affine contiguous_position(const Shape& shape) {
    Affine a;
    int64_t stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      a.add(d, stride);
      stride *= shape[d];
    }
    return a;
  }

  // float() / long() / to(dtype) / clone() / contiguous(): an element-wise copy with a cast.
  bool convert() {
    if (n.inplace()) return reject("in-place");
    const graph::Arg& a = n.args[0];
    if (a.tag != kTensor) return reject("no tensor");
    const graph::ValueMeta& m = out().meta, &in = L.g.values[size_t(a.value)].meta;
    if (!(m.device == in.device)) return reject("a device transfer");
    if (!loop_dtype(m.dtype, L.device()) || !loop_dtype(in.dtype, L.device())) return reject("a float16 / bfloat16 conversion");
    Shape shape = graph::concrete(m.sizes);
    if (shape != graph::concrete(in.sizes)) return reject("a shape change");
    LoopValue v{LKind::Pointwise, n.outs[0], shape, m.dtype};
    v.graph_node = index;
    int32_t lv = L.of(a.value);
    v.body.root = Lowerer::cast(v.body, Lowerer::load_broadcast(v.body, L.val(lv), lv, shape), m.dtype);
    L.lg.of_graph[size_t(n.outs[0])] = L.add_value(std::move(v));
    return true;
  }

  bool lower() {
    const OpDef& def = n.def();
    if (n.outs.empty()) return reject("no output");
    for (int32_t o : n.outs)
      if (L.g.values[size_t(o)].node != index) return reject("returns its argument");
    if (n.inplace()) return reject("in-place (writes its argument)");
    if (n.random() && def.loop != LoopForm::Rand && def.loop != LoopForm::Randn && def.loop != LoopForm::Randint) return reject("random");
    if (!(out().meta.device == L.g.values.front().meta.device)) return reject("on another device than the graph");
    if (!loop_dtype(out().meta.dtype, L.device())) return reject("float16 / bfloat16 result");
    switch (def.loop) {  // a lowering of its own (OpDef::loop), else by the op's kind
      case LoopForm::MaskedFill: return masked_fill();
      case LoopForm::Tril:
      case LoopForm::Triu: return triangle(def.loop == LoopForm::Tril);
      case LoopForm::Arange:
      case LoopForm::Linspace:
      case LoopForm::Eye: return generator(def.loop);
      case LoopForm::IndexSelect:
      case LoopForm::Gather:
      case LoopForm::Embedding: return gather(def.loop);
      case LoopForm::Rand:
      case LoopForm::Randn:
      case LoopForm::Randint: return random(def.loop);
      case LoopForm::Sum:
      case LoopForm::Prod:
      case LoopForm::Mean:
      case LoopForm::Amax:
      case LoopForm::Amin:
      case LoopForm::Max:
      case LoopForm::Min:
      case LoopForm::Argmax:
      case LoopForm::Argmin:
      case LoopForm::Var:
      case LoopForm::Std:
      case LoopForm::Logsumexp:
      case LoopForm::Norm:
      case LoopForm::All:
      case LoopForm::Any:
      case LoopForm::Softmax:
      case LoopForm::LogSoftmax: return L.reduction(index, &why);  // (lower_reduce.cpp)
      case LoopForm::Where:  // (pointwise ops: pointwise() picks the form)
      case LoopForm::Pow:
      case LoopForm::Gelu:
      case LoopForm::Auto: break;
    }
    switch (def.kind) {
      case OpKind::Unary:
      case OpKind::Binary:
      case OpKind::Ternary: return pointwise();
      case OpKind::Convert: return convert();
      default: return reject(cat("no loop lowering for ", def.name, " (", def.kind == OpKind::Linalg ? "a library call" : "not a loop op", ")"));
    }
  }
};

}  // namespace

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
    if (nl.lower()) continue;
    lg.notes.push_back(cat(n.def().name, n.where.empty() ? "" : cat(" (", n.where, ")"), ": extern: ", nl.why));
    lg.steps.push_back(LStep{true, int32_t(i), -1});
    for (int32_t o : n.outs)
      if (g.values[size_t(o)].node == int32_t(i)) buffer(o);
  }
  return lg;
}

}  // namespace cr::jit
