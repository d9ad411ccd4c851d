// Pointwise ops: unary, binary, ternary and their in-place forms. Each op is one line of an
// X-macro list (name, dtype rule, scalar expression); the eager kernel is the generic map() of
// loop.hpp instantiated for the dtypes the rule allows, and the expression text is kept in the
// registry for the code generators.
#include <cmath>
#include <cstring>

#include "vm/kernels/philox.hpp"
#include "vm/kernels/scalar_math.hpp"
#include "vm/kernels/wide.hpp"
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

// Float: integers compute in float32. Floating: floating only (gelu of int64 raises, as torch).
// Same: the dtype, no bool. Keep: bool too (sign). Power: bool computes in int64 (square). Bool:
// bool result. Arith: promoted, bool allowed. Numeric: promoted, no bool. Compare / Logical: bool.
enum class Rule { Float, Floating, Same, Keep, Power, Bool, Arith, Numeric, Compare, Logical };

#define CR_UNARY_OPS(X)                        \
  X(neg, Same, sm::neg_(a))                    \
  X(abs, Same, sm::abs_(a))                    \
  X(exp, Float, vmath::exp(a))                    \
  X(exp2, Float, vmath::exp2(a))                  \
  X(log, Float, vmath::log(a))                    \
  X(log2, Float, vmath::log2(a))                  \
  X(log1p, Float, vmath::log1p(a))                \
  X(expm1, Float, vmath::expm1(a))                \
  X(sqrt, Float, std::sqrt(a))                 \
  X(rsqrt, Float, sm::rsqrt_(a))               \
  X(sin, Float, vmath::sin(a))                    \
  X(cos, Float, vmath::cos(a))                    \
  X(tan, Float, vmath::tan(a))                    \
  X(tanh, Float, vmath::tanh(a))                  \
  X(sigmoid, Float, vmath::sigmoid(a))            \
  X(relu, Same, sm::relu_(a))                  \
  X(silu, Floating, sm::silu_(a))              \
  X(erf, Float, vmath::erf(a))                    \
  X(erfinv, Float, sm::erfinv_(a))             \
  X(floor, Same, sm::floor_(a))                \
  X(ceil, Same, sm::ceil_(a))                  \
  X(round, Same, sm::round_(a))                \
  X(trunc, Same, sm::trunc_(a))                \
  X(sign, Keep, sm::sign_(a))                  \
  X(reciprocal, Float, decltype(a)(1) / a)     \
  X(square, Power, a * a, sm::mul_(a, a))      \
  X(isnan, Bool, sm::isnan_(a))                \
  X(isinf, Bool, sm::isinf_(a))                \
  X(logical_not, Bool, !a)

#define CR_BINARY_OPS(X)                                 \
  X(add, Arith, a + b, sm::add_(a, b))                   \
  X(sub, Numeric, a - b, sm::sub_(a, b))                 \
  X(mul, Arith, a * b, sm::mul_(a, b))                   \
  X(div, Float, a / b)                                   \
  X(pow, Numeric, sm::pow_(a, b))                        \
  X(fmod, Numeric, sm::fmod_(a, b))                      \
  X(remainder, Numeric, sm::remainder_(a, b))            \
  X(maximum, Arith, sm::maximum_(a, b))                  \
  X(minimum, Arith, sm::minimum_(a, b))                  \
  X(atan2, Float, std::atan2(a, b))                      \
  X(hypot, Floating, sm::hypot_(a, b))                   \
  X(eq, Compare, a == b)                                 \
  X(ne, Compare, a != b)                                 \
  X(lt, Compare, a < b)                                  \
  X(le, Compare, a <= b)                                 \
  X(gt, Compare, a > b)                                  \
  X(ge, Compare, a >= b)                                 \
  X(logical_and, Logical, bool(a) && bool(b))            \
  X(logical_or, Logical, bool(a) || bool(b))             \
  X(logical_xor, Logical, bool(a) != bool(b))

// X(name, rule, expr[, eager]): the code generators parse `expr`; the eager kernels evaluate
// `eager` where given (integer + - * that wrap instead of overflowing: see sm::add_).
#define CR_FIRST(X, ...) X
#define CR_DEFINE_OP(NAME, RULE, EXPR, ...)                          \
  struct Op_##NAME {                                                 \
    static constexpr const char* name = #NAME;                       \
    static constexpr const char* expr = #EXPR;                       \
    static constexpr Rule rule = Rule::RULE;                         \
    template <class A, class B = A, class C = A> /* inlined: a call  \
       left in the loop (erf<double> is big) stops vectorisation */  \
    [[gnu::always_inline]] static auto f([[maybe_unused]] A a,       \
                  [[maybe_unused]] B b = B(),                        \
                  [[maybe_unused]] C c = C()) {                      \
      return CR_FIRST(__VA_ARGS__ __VA_OPT__(,) EXPR);               \
    }                                                                \
  };
CR_UNARY_OPS(CR_DEFINE_OP)
CR_BINARY_OPS(CR_DEFINE_OP)
CR_DEFINE_OP(gelu_tanh, Floating, sm::gelu_tanh_(a))
CR_DEFINE_OP(gelu_erf, Floating, sm::gelu_(a))
// gelu's gradient: grad_output (a) times the slope at the input (b), one kernel (gelu's rule)
CR_DEFINE_OP(_gelu_backward, Float, sm::gelu_backward_(a, b))
CR_DEFINE_OP(_gelu_tanh_backward, Float, sm::gelu_tanh_backward_(a, b))
CR_DEFINE_OP(leaky_relu, Floating, sm::leaky_relu_(a, b))
CR_DEFINE_OP(elu, Floating, sm::elu_(a, b))
CR_DEFINE_OP(softplus, Floating, sm::softplus_(a, b))
// div's {rounding_mode = "floor" | "trunc"} (crescent.surface's div): promoted dtype, as PyTorch
CR_DEFINE_OP(_div_floor, Numeric, sm::div_floor_(a, b))
CR_DEFINE_OP(_div_trunc, Numeric, sm::div_trunc_(a, b))
CR_DEFINE_OP(mish, Floating, sm::mish_(a))
CR_DEFINE_OP(logsigmoid, Floating, sm::logsigmoid_(a))
CR_DEFINE_OP(hardsigmoid, Floating, sm::hardsigmoid_(a))
CR_DEFINE_OP(hardswish, Floating, sm::hardswish_(a))

// The dtype an op computes in, from the promoted input dtype.
DType compute_dtype(Rule rule, DType in, const char* name) {
  switch (rule) {
    case Rule::Float: return to_floating(in);
    case Rule::Floating:
      if (!is_floating(in)) fail(dtype_list_error("a floating tensor", in));
      return in;
    case Rule::Power: return in == DType::b8 ? DType::i64 : in;
    case Rule::Same:
    case Rule::Numeric:
      if (in == DType::b8) fail(dtype_list_error("a numeric tensor (not bool)", in));
      return in;
    default: return in;
  }
  (void)name;
}

constexpr DType out_dtype(Rule rule, DType compute) {
  return rule == Rule::Bool || rule == Rule::Compare || rule == Rule::Logical ? DType::b8 : compute;
}

// Instantiates f<T> only for the compute dtypes the rule can produce.
template <Rule R, class F> void visit_rule(DType d, F&& f) {
  if constexpr (R == Rule::Float || R == Rule::Floating) visit_floating(d, f);
  else if constexpr (R == Rule::Same || R == Rule::Numeric || R == Rule::Power) visit_numeric(d, f);
  else visit(d, f);
}

template <class Op, class... Ts> void run_map(DType compute, const Tensor& out, const Ts&... ins) {
  visit_rule<Op::rule>(compute, [&](auto t) {
    using T = decltype(t);
    constexpr bool to_bool = Op::rule == Rule::Bool || Op::rule == Rule::Compare || Op::rule == Rule::Logical;
    using TO = std::conditional_t<to_bool, bool, T>;
    map<TO, std::conditional_t<true, T, Ts>...>(out, {&ins...},
                                                 [](auto... v) __attribute__((always_inline)) { return Op::f(v...); });
  });
}

// ---- unary -----------------------------------------------------------------------------------

template <class Op> std::vector<Meta> infer_unary(OpCall& c) {
  Tensor x = c.tensor(0);
  return {{x.sizes(), out_dtype(Op::rule, compute_dtype(Op::rule, x.dtype(), Op::name)), x.device()}};
}

// An op's loop over contiguous elements of T written in vm/kernels/vmath.hpp, declared beside
// the op: it gives each element Op::f's value, faster than Op::f in a loop (float sin's
// / cos's per-element choice between float and double forms does not vectorise; vmath::sin_block
// computes the float form for every element, then the rare far ones again). The block function
// (compiled code) and the eager kernel on contiguous data run it.
template <class Op, class T> struct VmLoop {
  static constexpr bool has = false;
};
template <> struct VmLoop<Op_sin, float> {
  static constexpr bool has = true;
  [[gnu::always_inline]] static void run(const float* x, float* y, int64_t n) { vmath::sin_block(x, y, n); }  // (inlined: the AVX-512 twin keeps its lanes)
};
template <> struct VmLoop<Op_cos, float> {
  static constexpr bool has = true;
  [[gnu::always_inline]] static void run(const float* x, float* y, int64_t n) { vmath::cos_block(x, y, n); }
};
// exp and sigmoid: the subnormal results (a causal mask's exp(-inf)) apart, see vmath::exp_block.
template <vmath::Real T> struct VmLoop<Op_exp, T> {
  static constexpr bool has = true;
  [[gnu::always_inline]] static void run(const T* x, T* y, int64_t n) { vmath::exp_block(x, y, n); }
};
template <vmath::Real T> struct VmLoop<Op_sigmoid, T> {
  static constexpr bool has = true;
  [[gnu::always_inline]] static void run(const T* x, T* y, int64_t n) { vmath::sigmoid_block(x, y, n); }
};

template <class Op, int Arity> BlockFn block_of(DType compute);

template <class Op> void run_unary(OpCall& c) {
  Tensor x = c.tensor(0);
  DType compute = compute_dtype(Op::rule, x.dtype(), Op::name);
  Tensor xc = cast(x, compute);
  const Tensor& out = c.outs[0];
  auto loop = [&](auto t) {
    using T = decltype(t);
    if constexpr (VmLoop<Op, T>::has) {
      if (compute != dtype_of<T>() || out.dtype() != compute) return false;
      if (!xc.is_contiguous() || !out.is_contiguous()) return false;
      BlockFn fn = block_of<Op, 1>(compute);
      const T* src = xc.data<T>();
      T* dst = out.data<T>();
      parallel_for(out.numel(), kParallelGrain, [&](int64_t a, int64_t b) { fn(src + a, nullptr, dst + a, b - a); });
      return true;
    }
    return false;
  };
  if (!loop(float()) && !loop(double())) run_map<Op>(compute, out, xc);
}

// gelu(x[, {approximate = "none" | "tanh"}])
void run_gelu(OpCall& c) {
  std::string mode = c.has(1) ? c.str(1) : "none";
  if (mode == "tanh") return run_unary<Op_gelu_tanh>(c);
  if (mode != "none") fail(cat("approximate expected \"none\" or \"tanh\", got \"", mode, "\""));
  run_unary<Op_gelu_erf>(c);
}

// ---- binary ----------------------------------------------------------------------------------

struct Binary {
  Operand a, b;
  DType compute;
  Shape shape;
  Device device;
};

bool is_bool_operand(const Operand& o) { return o.is_tensor() ? o.t.dtype() == DType::b8 : o.is_bool; }

// add / sub's {alpha = a}, as PyTorch checks it against the result dtype: a boolean only for a
// bool result, a fraction only for a floating one. (Checked where the metadata is inferred, so
// that recording, CUDA's cached kernels and eager all refuse it.)
void check_alpha(const cr_value& alpha, DType result) {
  if (alpha.tag == kBool && result != DType::b8)
    fail(cat("alpha expected a number (a boolean alpha needs a bool result; this one is ", dtype_name(result), "), got ",
             alpha.num != 0 ? "true" : "false"));
  if (alpha.tag == kNumber && !is_floating(result) && alpha.num != std::floor(alpha.num))
    fail(cat("alpha must be an integer for ", dtype_name(result), " inputs, got ", alpha.num));
  if (alpha.tag == kNumber) check_scalar_fits(alpha.num, result);
}

// Number operands of where / clamp / hardtanh must fit the dtype they compute in (PyTorch's
// checked conversion: an int32 clamp to 2^40 raises rather than wrapping to 0).
void check_numbers_fit(std::initializer_list<const Operand*> ops, DType dtype) {
  for (const Operand* o : ops)
    if (o && !o->is_tensor() && !o->is_bool) check_scalar_fits(o->num, dtype);
}

template <class Op>
constexpr bool kNumberParam = std::is_same_v<Op, Op_leaky_relu> || std::is_same_v<Op, Op_elu> || std::is_same_v<Op, Op_softplus>;

template <class Op> Binary prepare_binary(const OpCall& c) {
  Binary p{operand(c, 0), operand(c, 1), DType::f32, {}, {}};
  if (!p.a.is_tensor() && !p.b.is_tensor()) fail("expected at least one tensor operand, got two numbers");
  p.compute = compute_dtype(Op::rule, result_type({&p.a, &p.b}), Op::name);
  // (an activation's number parameter - a slope, alpha, beta - does not make an int64 x floating)
  if constexpr (kNumberParam<Op>) compute_dtype(Op::rule, p.a.t.dtype(), Op::name);
  p.shape = broadcast_operands({&p.a, &p.b}, &p.device);
  // as PyTorch: x - mask is almost always a bug (1 - mask means logical_not)
  if (std::is_same_v<Op, Op_sub> && (is_bool_operand(p.a) || is_bool_operand(p.b)))
    fail("subtraction with a bool operand is not supported: use logical_not() or logical_xor() on masks");
  if (c.has(2)) check_alpha(c.args[2], out_dtype(Op::rule, p.compute));
  // (an integer power's number exponent converts checked, as PyTorch's: 0 ^ 2^32 is not 0 ^ 0)
  if (std::is_same_v<Op, Op_pow> && is_integral(p.compute)) check_numbers_fit({&p.b}, p.compute);
  return p;
}

bool any_zero(const Tensor& t) {
  Tensor c = contiguous(t);
  bool z = false;
  visit_numeric(c.dtype(), [&](auto v) {
    using T = decltype(v);
    const T* p = c.data<T>();
    for (int64_t i = 0, n = c.numel(); i < n && !z; ++i) z = load(p[i]) == 0;
  });
  return z;
}

template <class Op> std::vector<Meta> infer_binary(OpCall& c) {
  Binary p = prepare_binary<Op>(c);
  return {{p.shape, out_dtype(Op::rule, p.compute), p.device}};
}

// pow(x, e) of a floating x by a number e of sm::pow_form: no pow() per element.
bool run_pow_scalar(const Binary& p, const Tensor& x, const Tensor& out) {
  if (!is_floating(p.compute) || p.b.is_tensor() || !p.a.is_tensor()) return false;
  sm::PowForm form = sm::pow_form(p.b.num);
  if (form == sm::PowForm::Generic) return false;
  visit_floating(p.compute, [&](auto t) {
    using T = decltype(t);
    auto run = [&](auto f) { map<T, T>(out, {&x}, f); };
    switch (form) {
      case sm::PowForm::Identity: run([](auto a) { return a; }); break;
      case sm::PowForm::Square: run([](auto a) { return a * a; }); break;
      case sm::PowForm::Cube: run([](auto a) { return a * a * a; }); break;
      case sm::PowForm::Sqrt: run([](auto a) { return std::sqrt(a); }); break;
      case sm::PowForm::Rsqrt: run([](auto a) { return sm::rsqrt_(a); }); break;
      case sm::PowForm::Reciprocal: run([](auto a) { return decltype(a)(1) / a; }); break;
      case sm::PowForm::InvSquare: run([](auto a) { return decltype(a)(1) / (a * a); }); break;
      case sm::PowForm::Generic: break;
    }
  });
  return true;
}

template <class Op> constexpr bool kDivides = std::is_same_v<Op, Op_fmod> || std::is_same_v<Op, Op_remainder> ||
                                             std::is_same_v<Op, Op__div_floor> || std::is_same_v<Op, Op__div_trunc>;
template <class Op> void run_binary(OpCall& c) {
  Binary p = prepare_binary<Op>(c);
  // add / sub take {alpha = a}: other is scaled first, in one rounding with the sum where the
  // dtype is floating (ATen's fmadd(other, alpha, self))
  if (c.has(2) && c.number(2) != 1.0) {
    if (is_floating(p.compute)) {
      Tensor a = materialize(p.a, p.compute), b = materialize(p.b, p.compute);
      const double alpha = c.def.flags & kAlphaNegates ? -c.number(2) : c.number(2);
      visit_floating(p.compute, [&](auto t) {
        using T = decltype(t);
        using C = compute_t<T>;
        map<T, T, T>(c.outs[0], {&a, &b}, [al = C(alpha)](auto x, auto y) { return sm::fma_(y, al, x); });
      });
      return;
    }
    if (p.b.is_tensor()) {
      Tensor scaled = Tensor::empty(p.b.t.sizes(), p.compute, p.device);
      run_map<Op_mul>(p.compute, scaled, cast(p.b.t, p.compute), scalar_tensor(c.number(2), p.compute));
      p.b.t = scaled;
    } else {
      p.b.num *= c.number(2);
    }
  }
  Tensor a = materialize(p.a, p.compute), b = materialize(p.b, p.compute);
  if (kDivides<Op> && is_integral(p.compute) && any_zero(b)) fail("integer division by zero");
  // as PyTorch: a negative integer scalar exponent of an integer tensor has no integer result
  if (std::is_same_v<Op, Op_pow> && is_integral(p.compute) && !p.b.is_tensor() && p.b.num < 0)
    fail(cat("integers to negative integer powers are not allowed, got exponent ", p.b.num));
  if (std::is_same_v<Op, Op_pow> && run_pow_scalar(p, a, c.outs[0])) return;
  run_map<Op>(p.compute, c.outs[0], a, b);
}

// ---- ternary: where, clamp, lerp, addcmul ----------------------------------------------------

struct Ternary {
  Operand a, b, c;
  DType compute;
  Shape shape;
  Device device;
};

// A ternary op's result: its prepare's broadcast shape and compute dtype.
template <Ternary (*Prepare)(const OpCall&)> std::vector<Meta> infer_ternary(OpCall& c) {
  Ternary p = Prepare(c);
  return {{p.shape, p.compute, p.device}};
}

Ternary prepare_where(const OpCall& c) {
  Tensor cond = c.tensor(0);
  if (cond.dtype() != DType::b8) fail(cat("condition ", dtype_list_error("a bool tensor", cond.dtype())));
  Ternary p{Operand{cond}, operand(c, 1), operand(c, 2), DType::f32, {}, {}};
  p.compute = result_type({&p.b, &p.c});
  check_numbers_fit({&p.b, &p.c}, p.compute);
  p.shape = broadcast_operands({&p.a, &p.b, &p.c}, &p.device);
  return p;
}
void run_where(OpCall& c) {
  Ternary p = prepare_where(c);
  Tensor b = materialize(p.b, p.compute), e = materialize(p.c, p.compute);
  visit(p.compute, [&](auto t) {
    using T = decltype(t);
    map<T, bool, T, T>(c.outs[0], {&p.a.t, &b, &e}, [](bool k, auto x, auto y) { return k ? x : y; });
  });
}

Ternary prepare_clamp(const OpCall& c) {
  Ternary p{Operand{c.tensor(0)}, {}, {}, DType::f32, {}, {}};
  if (!c.has(1) && !c.has(2)) fail("at least one of min and max must be given");
  if (c.has(1)) p.b = operand(c, 1);
  if (c.has(2)) p.c = operand(c, 2);
  p.compute = result_type({&p.a, c.has(1) ? &p.b : nullptr, c.has(2) ? &p.c : nullptr});
  if (p.compute == DType::b8) fail(dtype_list_error("a numeric tensor (not bool)", p.compute));
  check_numbers_fit({c.has(1) ? &p.b : nullptr, c.has(2) ? &p.c : nullptr}, p.compute);
  p.shape = broadcast_operands({&p.a, &p.b, &p.c}, &p.device);
  return p;
}
template <Ternary (*Prepare)(const OpCall&)> void run_clamp(OpCall& c) {  // (and hardtanh)
  Ternary p = Prepare(c);
  Tensor x = materialize(p.a, p.compute);
  auto at_least = [](auto v, auto l) { return sm::clamp_min_(v, l); };
  auto at_most = [](auto v, auto h) { return sm::clamp_max_(v, h); };
  visit_numeric(p.compute, [&](auto t) {
    using T = decltype(t);
    if (!c.has(2)) {
      Tensor lo = materialize(p.b, p.compute);
      map<T, T, T>(c.outs[0], {&x, &lo}, at_least);
    } else if (!c.has(1)) {
      Tensor hi = materialize(p.c, p.compute);
      map<T, T, T>(c.outs[0], {&x, &hi}, at_most);
    } else {
      Tensor lo = materialize(p.b, p.compute), hi = materialize(p.c, p.compute);
      map<T, T, T, T>(c.outs[0], {&x, &lo, &hi}, [=](auto v, auto l, auto h) { return at_most(at_least(v, l), h); });
    }
  });
}

// hardtanh(x, min_val, max_val): clamp in x's own dtype (an integer x truncates its bounds, as
// PyTorch's clamp into empty_like(x)); an op of its own for its gradient at the bounds
Ternary prepare_hardtanh(const OpCall& c) {
  Tensor x = c.tensor(0);
  if (x.dtype() == DType::b8) fail(dtype_list_error("a numeric tensor (not bool)", x.dtype()));
  if (c.number(1) > c.number(2)) fail(cat("min_val cannot be greater than max_val, got ", c.number(1), " > ", c.number(2)));
  check_scalar_fits(c.number(1), x.dtype());
  check_scalar_fits(c.number(2), x.dtype());
  return Ternary{Operand{x}, operand(c, 1), operand(c, 2), x.dtype(), x.sizes(), x.device()};
}

Ternary prepare_lerp(const OpCall& c) {
  Ternary p{Operand{c.tensor(0)}, Operand{c.tensor(1)}, operand(c, 2), DType::f32, {}, {}};
  p.compute = result_type({&p.a, &p.b, &p.c});
  // (a float weight does not make integer ends floating: PyTorch raises for them)
  const DType ends = result_type({&p.a, &p.b});
  if (!is_floating(p.compute) || !is_floating(ends)) fail(dtype_list_error("floating tensors", ends));
  p.shape = broadcast_operands({&p.a, &p.b, &p.c}, &p.device);
  return p;
}
void run_lerp(OpCall& c) {
  Ternary p = prepare_lerp(c);
  Tensor a = materialize(p.a, p.compute), b = materialize(p.b, p.compute);
  visit_floating(p.compute, [&](auto t) {
    using T = decltype(t);
    if (!p.c.is_tensor()) {  // a number weight in the compute type (float for 16-bit), as PyTorch's opmath
      const compute_t<T> w = compute_t<T>(p.c.num);
      return map<T, T, T>(c.outs[0], {&a, &b}, [w](auto x, auto y) { return sm::lerp_(x, y, w); });
    }
    Tensor w = materialize(p.c, p.compute);
    map<T, T, T, T>(c.outs[0], {&a, &b, &w}, [](auto x, auto y, auto z) { return sm::lerp_(x, y, z); });
  });
}

// addcmul(x, t1, t2[, value]) = x + value * t1 * t2
Ternary prepare_addcmul(const OpCall& c) {
  Ternary p{Operand{c.tensor(0)}, Operand{c.tensor(1)}, Operand{c.tensor(2)}, DType::f32, {}, {}};
  p.compute = result_type({&p.a, &p.b, &p.c});
  if (p.compute == DType::b8) fail(dtype_list_error("numeric tensors", p.compute));
  if (c.has(3) && !is_floating(p.compute)) {
    if (c.number(3) != std::floor(c.number(3))) fail(cat("value must be an integer for integer inputs, got ", c.number(3)));
    check_scalar_fits(c.number(3), p.compute);  // -inf passes the test above
  }
  p.shape = broadcast_operands({&p.a, &p.b, &p.c}, &p.device);
  return p;
}
void run_addcmul(OpCall& c) {
  Ternary p = prepare_addcmul(c);
  double value = c.number_or(3, 1.0);
  Tensor x = materialize(p.a, p.compute), a = materialize(p.b, p.compute), b = materialize(p.c, p.compute);
  visit_numeric(p.compute, [&](auto t) {
    using T = decltype(t);
    using C = compute_t<T>;
    C v = C(value);
    map<T, T, T, T>(c.outs[0], {&x, &a, &b}, [v](auto s, auto y, auto z) { return sm::fma_(sm::mul_(v, y), z, s); });
  });
}

// ---- block functions for generated kernels ---------------------------------------------------

// Whether `rule` computes in dtype d (the compute dtypes visit_rule instantiates for it).
bool computes_in(Rule rule, DType d) {
  switch (rule) {
    case Rule::Float:
    case Rule::Floating: return is_floating(d);
    case Rule::Same:
    case Rule::Power:
    case Rule::Numeric: return d != DType::b8;
    default: return true;
  }
}

// out[i] = Op::f(a[i][, b[i]]) over contiguous arrays of T: the loop of map_row's contiguous
// path (the same inlined Op::f, load and store, the same __restrict output), so it vectorises the
// same way and its results equal the eager kernel's (the AVX-512 twin's within rounding: the same
// operations, GCC may contract a * b + c into one fma differently).
// Integer fmod / remainder do not check for a zero divisor here (the eager binary op fails
// before running its loop; a % 0 is undefined): callers must not use them for integers unless
// the divisors are known to be non-zero.
template <class Op, int Arity, class T>
[[gnu::always_inline]] inline void block_body(const void* a, const void* b, void* out, int64_t n) {
  constexpr bool to_bool = Op::rule == Rule::Bool || Op::rule == Rule::Compare || Op::rule == Rule::Logical;
  using TO = std::conditional_t<to_bool, bool, T>;
  TO* __restrict o = static_cast<TO*>(out);
  const T* x = static_cast<const T*>(a);
  if constexpr (Arity == 1 && VmLoop<Op, T>::has) {
    (void)b;
    VmLoop<Op, T>::run(x, o, n);
  } else if constexpr (Arity == 1) {
    (void)b;
    for (int64_t i = 0; i < n; ++i) store(o[i], Op::f(load(x[i])));
  } else {
    const T* y = static_cast<const T*>(b);
    for (int64_t i = 0; i < n; ++i) store(o[i], Op::f(load(x[i]), load(y[i])));
  }
}
template <class Op, int Arity, class T> void block_loop(const void* a, const void* b, void* out, int64_t n) {
  block_body<Op, Arity, T>(a, b, out, n);
}
template <class Op, int Arity, class T>
CR_TARGET_AVX512 void block_loop_avx512(const void* a, const void* b, void* out, int64_t n) {
  block_body<Op, Arity, T>(a, b, out, n);
}

// The OpDef::block of Op: block_loop (or its AVX-512 twin) for the compute dtypes Op's rule allows, except float16 /
// bfloat16 (not needed by the code generators, and not instantiated).
template <class Op, int Arity> BlockFn block_of(DType compute) {
  if (!computes_in(Op::rule, compute)) return nullptr;
  BlockFn fn = nullptr;
  visit_rule<Op::rule>(compute, [&](auto t) {
    using T = decltype(t);
    if constexpr (!std::is_same_v<T, Half> && !std::is_same_v<T, BFloat16>)
      fn = use_avx512_loops() ? &block_loop_avx512<Op, Arity, T> : &block_loop<Op, Arity, T>;
  });
  return fn;
}

// ---- in-place forms --------------------------------------------------------------------------

// x:op_(...) runs op on the same arguments with x as the output when that is safe (see
// writes_directly), else out of place followed by a copy into x; either way the write goes
// through views to the base, and overlapping inputs read their old values.
// The kernel may write straight into self (one pass, no temporary) when the result has self's
// dtype, no two elements of self share memory (an expanded view), and every tensor argument is
// either self in self's exact layout (element i is read before element i is written) or lives
// in another storage. Anything else (x:add_(x:t()), a float result) goes through a temporary.
bool writes_directly(const OpCall& c, const Tensor& self, const Meta& m) {
  if (m.dtype != self.dtype()) return false;
  for (int d = 0; d < self.dim(); ++d)
    if (self.stride(d) == 0 && self.size(d) > 1) return false;
  for (int i = 0; i < c.nargs; ++i) {
    if (!c.is_tensor(i)) continue;
    Tensor t = c.tensor(i);
    if (t.storage() != self.storage()) continue;
    bool same = t.dtype() == self.dtype() && t.offset() == self.offset() && t.sizes() == self.sizes() &&
                t.strides() == self.strides();
    if (!same) return false;
  }
  return true;
}

// The result of x:op_(...) must have x's shape and a dtype x can hold.
void check_result_fits(const Tensor& self, const Shape& sizes, DType dtype) {
  if (sizes != self.sizes()) fail(cat("the result of shape ", shape_str(sizes), " cannot be written into ", self.describe()));
  if (category(dtype) > category(self.dtype()))
    fail(cat("the result type ", dtype_name(dtype), " cannot be written into ", self.describe()));
}

void run_inplace(OpCall& c) {
  Tensor self = writable(c, 0);
  std::string base = c.def.name;
  base.pop_back();
  if (!self.device().is_cpu()) {  // CUDA: the op's generated kernel (0-d CPU scalars allowed), then a device copy
    Tensor r = dispatch(c.ctx, Registry::get().index_of(base), c.args, c.nargs).at(0);
    check_result_fits(self, r.sizes(), r.dtype());
    copy_into(self, r);
    return;
  }
  const OpDef* def = Registry::get().find(base);
  OpCall inner{c.ctx, *def, c.args, c.nargs, {}, {}};
  inner.metas = def->infer(inner);
  const Meta& m = inner.metas[0];
  check_result_fits(self, m.sizes, m.dtype);
  if (writes_directly(c, self, m)) {
    inner.outs.push_back(self);
    def->run(inner);
    return;
  }
  inner.outs.push_back(Tensor::empty(m.sizes, m.dtype, m.device));
  def->run(inner);
  copy_into(self, inner.outs[0]);
}

template <class Op> constexpr int32_t kResultFlag = out_dtype(Op::rule, DType::f32) == DType::b8 ? kBoolResult : 0;
template <class Op> OpDef unary_def() {
  return OpDef{Op::name, "self:T", OpKind::Unary, kResultFlag<Op>, infer_unary<Op>, run_unary<Op>, Op::expr, block_of<Op, 1>};
}
const char* binary_schema(const std::string& name) {  // add / sub also take {alpha =}
  return name == "add" || name == "sub" ? "self:TN, other:TN, opts:{alpha:N}" : "self:TN, other:TN";
}
// Integer fmod / remainder fail on a zero divisor and integer pow on a negative exponent
// (run_binary): flagged, so that the code generators leave their integer forms to eager.
template <class Op> constexpr bool kIntegerValueErrors = kDivides<Op> || std::is_same_v<Op, Op_pow>;
// pow's scalar exponent picks its code (jit/lower.cpp pow_scalar)
template <class Op> constexpr int32_t kCodeFlag = std::is_same_v<Op, Op_pow> ? kCodeNumbers : 0;
template <class Op> constexpr int32_t kAlphaFlags =
    std::is_same_v<Op, Op_add> ? kAlphaFma : std::is_same_v<Op, Op_sub> ? kAlphaFma | kAlphaNegates : 0;

template <class Op> OpDef binary_def(const char* schema) {
  int32_t flags = kResultFlag<Op> | (kIntegerValueErrors<Op> ? kValueErrors : 0) | kCodeFlag<Op> | kAlphaFlags<Op>;
  return OpDef{Op::name, schema, OpKind::Binary, flags, infer_binary<Op>, run_binary<Op>, Op::expr, block_of<Op, 2>};
}

OpDef shown_as(OpDef d, const char* shown) {
  d.shown = shown;
  return d;
}

}  // namespace

BlockFn gelu_tanh_block(DType compute) { return block_of<Op_gelu_tanh, 1>(compute); }

// out[i] = draw(counter a[i], seed b[i]) as float64 (the int64 compute dtype only)
template <double (*Draw)(uint64_t, uint64_t)> void draw_block(const void* a, const void* b, void* out, int64_t n) {
  const auto* c = static_cast<const int64_t*>(a);
  const auto* s = static_cast<const int64_t*>(b);
  auto* o = static_cast<double*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = Draw(uint64_t(c[i]), uint64_t(s[i]));
}
void normal_block(const void* a, const void* b, void* out, int64_t n) {  // (philox_normal's, vectorised)
  const auto* c = static_cast<const int64_t*>(a);
  const auto* s = static_cast<const int64_t*>(b);
  philox_normals([c](int64_t i) { return uint64_t(c[i]); }, [s](int64_t i) { return uint64_t(s[i]); },
                 static_cast<double*>(out), n);
}
template <double (*Draw)(uint64_t, uint64_t)> BlockFn draw_of(DType compute) {
  return compute == DType::i64 ? draw_block<Draw> : nullptr;
}
BlockFn normal_of(DType compute) { return compute == DType::i64 ? normal_block : nullptr; }
// out[i] = the 64 random bits of counter a[i], seed b[i], as an int64 (randint)
void bits_block(const void* a, const void* b, void* out, int64_t n) {
  const auto* c = static_cast<const int64_t*>(a);
  const auto* s = static_cast<const int64_t*>(b);
  auto* o = static_cast<int64_t*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = int64_t(philox_u64(uint64_t(c[i]), uint64_t(s[i])));
}
BlockFn bits_of(DType compute) { return compute == DType::i64 ? bits_block : nullptr; }

const ExtraBlock* extra_block(const std::string& name) {
  static const ExtraBlock kExtra[] = {{"gelu_tanh", gelu_tanh_block, Op_gelu_tanh::expr},
                                      {"softmax_exp", softmax_exp_block, "vmath::exp(a)"},
                                      {"softmax_log", softmax_log_block, "vmath::log(a)"},
                                      {"philox_uniform", draw_of<philox_uniform>, "cr::philox_uniform(a, b)"},
                                      {"philox_normal", normal_of, "cr::philox_normal(a, b)"},
                                      {"philox_bits", bits_of, "(int64_t)cr::philox_u64(a, b)"}};
  for (const ExtraBlock& e : kExtra)
    if (name == e.name) return &e;
  return nullptr;
}

BlockFn block_function(const std::string& op, DType compute) {
  if (const OpDef* def = Registry::get().find(op)) return def->block ? def->block(compute) : nullptr;
  const ExtraBlock* extra = extra_block(op);
  return extra ? extra->block(compute) : nullptr;
}

void register_pointwise(Registry& r) {
#define CR_REG_UNARY(NAME, ...) r.add(unary_def<Op_##NAME>());
  CR_UNARY_OPS(CR_REG_UNARY)
  r.add(OpDef{"gelu", "self:T, opts:{approximate:S}", OpKind::Unary, 0, infer_unary<Op_gelu_erf>, run_gelu,
              Op_gelu_erf::expr, block_of<Op_gelu_erf, 1>});
#define CR_REG_BINARY(NAME, ...) r.add(binary_def<Op_##NAME>(binary_schema(#NAME)));
  CR_BINARY_OPS(CR_REG_BINARY)
  for (OpDef d : {binary_def<Op__gelu_backward>("grad_output:T, self:T"), binary_def<Op__gelu_tanh_backward>("grad_output:T, self:T"),
                  shown_as(binary_def<Op__div_floor>("self:TN, other:TN"), "div (rounding_mode = \"floor\")"),
                  shown_as(binary_def<Op__div_trunc>("self:TN, other:TN"), "div (rounding_mode = \"trunc\")")}) {
    d.flags |= kNoMethod;
    r.add(d);
  }
  // (F's activations; a number parameter is the second operand)
  for (OpDef d : {binary_def<Op_leaky_relu>("self:T, negative_slope:N"), binary_def<Op_elu>("self:T, alpha:N"),
                  binary_def<Op_softplus>("self:T, beta:N"), unary_def<Op_mish>(), unary_def<Op_logsigmoid>(),
                  unary_def<Op_hardsigmoid>(), unary_def<Op_hardswish>()}) {
    d.flags |= kNoMethod;
    r.add(d);
  }
  r.add(OpDef{"where", "condition:T, self:TN, other:TN", OpKind::Ternary, kNoMethod | kConditionArg,
              infer_ternary<prepare_where>, run_where});
  // (an absent clamp bound leaves its sm::clamp_* call out; addcmul's value scales b, as add's alpha)
  r.add(OpDef{"clamp", "self:T, min:TN?, max:TN?", OpKind::Ternary, 0, infer_ternary<prepare_clamp>,
              run_clamp<prepare_clamp>, "sm::clamp_max_(sm::clamp_min_(a, b), c)"});
  r.add(OpDef{"hardtanh", "self:T, min_val:N, max_val:N", OpKind::Ternary, kNoMethod, infer_ternary<prepare_hardtanh>,
              run_clamp<prepare_hardtanh>, "sm::clamp_max_(sm::clamp_min_(a, b), c)"});
  r.add(OpDef{"lerp", "self:T, end:T, weight:TN", OpKind::Ternary, 0, infer_ternary<prepare_lerp>, run_lerp,
              "sm::lerp_(a, b, c)"});
  r.add(OpDef{"addcmul", "self:T, tensor1:T, tensor2:T, value:N?", OpKind::Ternary, 0, infer_ternary<prepare_addcmul>,
              run_addcmul, "sm::fma_(b, c, a)"});
#define CR_INPLACE_NAME(NAME) #NAME "_",
  for (const char* n : {CR_INPLACE_OPS(CR_INPLACE_NAME)}) {
    std::string base(n, std::strlen(n) - 1);
    const OpDef* b = r.find(base);
    r.add(OpDef{n, b->schema, b->kind, kReturnsSelf | kNoFunction | kDeviceAware, nullptr, run_inplace});
  }
#undef CR_INPLACE_NAME
  // PyTorch's autocast lists: functions whose float16 / bfloat16 results lose too much run in
  // float32; ops combining tensors that must agree run in the widest of them.
  r.set_cast({"exp", "expm1", "log", "log2", "log1p", "reciprocal", "rsqrt", "tan", "pow"}, CastPolicy::Float32);
  r.set_cast({"addcmul", "atan2", "where"}, CastPolicy::Promote);
}

}  // namespace cr
