// Reduction ops: sum mean prod amax amin max min argmax argmin var std logsumexp norm all any.
// Each parses (x[, dim[, keepdim]]) the same way (dim: a number or a list; none or an empty list
// reduces every dim), picks its output dtype by PyTorch's rules, and runs the reduction engine
// (vm/kernels/reduce.hpp) with one of the folds of vm/kernels/folds.hpp. The ops along one dim
// (cumsum, softmax, log_softmax) are in scans.cpp.
#include <algorithm>
#include <cmath>

#include "vm/kernels/folds.hpp"
#include "vm/kernels/reduce.hpp"
#include "vm/ops/operands.hpp"

namespace cr {

void register_scans(Registry& r);  // vm/ops/scans.cpp

namespace {

// A parsed reduction: which dims of x are reduced and the output it makes.
struct Spec {
  Tensor x;
  std::vector<bool> mask;  // per dim of x
  Shape shape;             // output sizes
  int64_t count = 1;       // elements reduced into each output
  bool all = false;        // no dim was given
};

Spec make_spec(const Tensor& x, const std::vector<int>& dims, bool keepdim, bool all) {
  Spec s{x, std::vector<bool>(size_t(x.dim()), false), {}, 1, all};
  for (int d : dims) s.mask[size_t(d)] = true;
  for (int d = 0; d < x.dim(); ++d) {
    if (s.mask[size_t(d)]) s.count *= x.size(d);
    if (!s.mask[size_t(d)]) s.shape.push_back(x.size(d));
    else if (keepdim) s.shape.push_back(1);
  }
  return s;
}

std::vector<int> every_dim(int ndim) {
  std::vector<int> r;
  for (int d = 0; d < ndim; ++d) r.push_back(d);
  return r;
}

// (x, dim:Ds?, keepdim:B?) - a 0-d tensor accepts dim 1 / -1 and reduces its one element.
Spec parse_dims(const OpCall& c) {
  Tensor x = c.tensor(0);
  bool keepdim = c.boolean_or(2, false);
  if (!c.has(1) || (c.args[1].tag == kInts && c.args[1].n == 0)) return make_spec(x, every_dim(x.dim()), keepdim, true);
  std::vector<int> dims = c.dims(1, x.dim());
  return make_spec(x, x.dim() == 0 ? std::vector<int>{} : dims, keepdim, false);
}

// (x, dim:D?, keepdim:B?) of max / min / argmax / argmin.
Spec parse_dim(const OpCall& c) {
  Tensor x = c.tensor(0);
  bool keepdim = c.boolean_or(2, false);
  if (!c.has(1)) return make_spec(x, every_dim(x.dim()), keepdim, true);
  int d = c.dim(1, x.dim());
  return make_spec(x, x.dim() == 0 ? std::vector<int>{} : std::vector<int>{d}, keepdim, false);
}

// max-like reductions have no identity: an empty reduced range is an error, as in PyTorch.
void require_nonempty(const Spec& s) {
  if (s.count != 0) return;
  if (s.all) fail(cat("cannot reduce ", s.x.describe(), " because it has no elements (pass a dim to reduce over a non-empty dim)"));
  for (int d = 0; d < s.x.dim(); ++d)
    if (s.mask[size_t(d)] && s.x.size(d) == 0)
      fail(cat("cannot reduce over dim ", d + 1, " of ", s.x.describe(), " because it has size 0"));
}

void require_floating(DType d, const char* hint = "") {
  if (!is_floating(d)) fail(cat(dtype_list_error("a floating tensor", d), hint));
}

// {dtype = "..."}: the input is converted to it before reducing, as PyTorch's dtype= argument.
bool dtype_option(const OpCall& c, int i, DType* d) {
  if (!c.has(i)) return false;
  *d = dtype_named(c.str(i));
  return true;
}

// ---- sum, prod, mean ---------------------------------------------------------------------------

// sum / prod: integers and bools accumulate and return int64; {dtype =} converts first.
DType sum_dtype(const OpCall& c, DType in) {
  DType d;
  if (dtype_option(c, 3, &d)) return d;
  return is_floating(in) ? in : DType::i64;
}
std::vector<Meta> infer_sum(OpCall& c) {
  Spec s = parse_dims(c);
  return {{s.shape, sum_dtype(c, s.x.dtype()), s.x.device()}};
}

template <class T> using SumOf = folds::Sum<T, folds::sum_lane_t<T>>;

// The input is converted to the output dtype first (int32 / bool -> int64, {dtype =}).
template <template <class> class F, bool Mean> void run_accumulate(OpCall& c) {
  Spec s = parse_dims(c);
  const Tensor& out = c.outs[0];
  Tensor x = cast(s.x, out.dtype());
  const double scale = 1.0 / double(s.count);  // mean of nothing: 0 * inf = nan, as PyTorch
  visit(x.dtype(), [&](auto t) {
    using T = decltype(t);
    T* o = out.data<T>();
    if constexpr (Mean) reduce(x, out, s.mask, F<T>{}, [o, scale](auto a, int64_t off) { store(o[off], double(a) * scale); });
    else reduce(x, out, s.mask, F<T>{}, [o](auto a, int64_t off) { store(o[off], a); });
  });
}
void run_sum(OpCall& c) { run_accumulate<SumOf, false>(c); }
void run_prod(OpCall& c) { run_accumulate<folds::Prod, false>(c); }

// mean needs a floating input (or {dtype =}): PyTorch refuses to infer a dtype for integers.
std::vector<Meta> infer_mean(OpCall& c) {
  Spec s = parse_dims(c);
  DType d = s.x.dtype();
  dtype_option(c, 3, &d);
  require_floating(d, " (convert with x:float() or pass {dtype = \"float32\"})");
  return {{s.shape, d, s.x.device()}};
}
void run_mean(OpCall& c) { run_accumulate<SumOf, true>(c); }

// ---- amax, amin, max, min, argmax, argmin -----------------------------------------------------

std::vector<Meta> infer_extreme(OpCall& c) {
  Spec s = parse_dims(c);
  require_nonempty(s);
  return {{s.shape, s.x.dtype(), s.x.device()}};
}
template <bool Max> void run_extreme(const Spec& s, const Tensor& out) {
  visit(s.x.dtype(), [&](auto t) {
    using T = decltype(t);
    T* o = out.data<T>();
    reduce(s.x, out, s.mask, folds::Extreme<T, Max>{}, [o](auto a, int64_t off) { store(o[off], a); });
  });
}
template <bool Max> void run_amax(OpCall& c) { run_extreme<Max>(parse_dims(c), c.outs[0]); }

// max(x) -> the largest value; max(x, dim[, keepdim]) -> values, 1-based indices
std::vector<Meta> infer_max(OpCall& c) {
  Spec s = parse_dim(c);
  require_nonempty(s);
  if (!c.has(1)) return {{s.shape, s.x.dtype(), s.x.device()}};
  return {{s.shape, s.x.dtype(), s.x.device()}, {s.shape, DType::i64, s.x.device()}};
}
template <bool Max> void run_max(OpCall& c) {
  Spec s = parse_dim(c);
  if (!c.has(1)) return run_extreme<Max>(s, c.outs[0]);
  int64_t* idx = c.outs[1].data<int64_t>();
  visit(s.x.dtype(), [&](auto t) {
    using T = decltype(t);
    T* o = c.outs[0].data<T>();
    reduce(s.x, c.outs[0], s.mask, folds::Arg<T, Max>{}, [o, idx](const auto& a, int64_t off) {
      store(o[off], a.v);
      idx[off] = a.i + 1;
    });
  });
}

// aminmax(x[, {dim =, keepdim =}]) -> the smallest and the largest values, in one pass
std::vector<Meta> infer_aminmax(OpCall& c) {
  Spec s = parse_dim(c);
  require_nonempty(s);
  return {{s.shape, s.x.dtype(), s.x.device()}, {s.shape, s.x.dtype(), s.x.device()}};
}
void run_aminmax(OpCall& c) {
  Spec s = parse_dim(c);
  visit(s.x.dtype(), [&](auto t) {
    using T = decltype(t);
    T *lo = c.outs[0].data<T>(), *hi = c.outs[1].data<T>();
    reduce(s.x, c.outs[0], s.mask, folds::Extremes<T>{}, [lo, hi](const auto& a, int64_t off) {
      store(lo[off], a.lo);
      store(hi[off], a.hi);
    });
  });
}

// argmax(x) is a position in the flattened tensor; argmax(x, dim) along dim. Both 1-based.
std::vector<Meta> infer_argmax(OpCall& c) {
  Spec s = parse_dim(c);
  require_nonempty(s);
  return {{s.shape, DType::i64, s.x.device()}};
}
template <bool Max> void run_argmax(OpCall& c) {
  Spec s = parse_dim(c);
  int64_t* idx = c.outs[0].data<int64_t>();
  visit(s.x.dtype(), [&](auto t) {
    using T = decltype(t);
    reduce(s.x, c.outs[0], s.mask, folds::Arg<T, Max>{}, [idx](const auto& a, int64_t off) { idx[off] = a.i + 1; });
  });
}

// ---- var, std, logsumexp, norm ------------------------------------------------------------------

// var / std: {correction = 1} (Bessel's correction; 0 gives the population variance)
// {correction = n} or {unbiased = b} (checked where the metadata is inferred: compiled code too).
// As torch 1.13, a boolean correction is refused: unbiased is the boolean form.
double correction_of(const OpCall& c) {
  if (c.has(3) && c.args[3].tag == kBool) fail("correction expected a number, got boolean (unbiased takes a boolean)");
  if (!c.has(4)) return c.number_or(3, 1.0);
  if (c.has(3)) fail("pass either correction or unbiased, not both");
  return c.boolean_or(4, true) ? 1.0 : 0.0;
}
std::vector<Meta> infer_var(OpCall& c) {
  Spec s = parse_dims(c);
  require_floating(s.x.dtype());
  correction_of(c);
  return {{s.shape, s.x.dtype(), s.x.device()}};
}
template <bool Sqrt> void run_var(OpCall& c) {
  Spec s = parse_dims(c);
  double correction = correction_of(c);
  double denom = std::max(0.0, double(s.count) - correction);
  visit_floating(s.x.dtype(), [&](auto t) {
    using T = decltype(t);
    T* o = c.outs[0].data<T>();
    reduce(s.x, c.outs[0], s.mask, folds::Var<T>{}, [o, denom](const folds::Moments& m, int64_t off) {
      double v = m.m2 / denom;
      store(o[off], Sqrt ? std::sqrt(v) : v);
    });
  });
}

// logsumexp promotes integer and bool inputs to float32 (PyTorch 2.x)
std::vector<Meta> infer_logsumexp(OpCall& c) {
  Spec s = parse_dims(c);
  return {{s.shape, to_floating(s.x.dtype()), s.x.device()}};
}
// Σ as a generated loop's Sum reduction folds a run: a block of lanes::kSoftmaxBlock (jit::kBlock)
// elements per call (eager's own sum folds blocks of lanes::kBlock).
template <class T> struct LoopBlockSum : SumOf<T> {
  void run(typename SumOf<T>::Acc& a, const T* x, int64_t n, int64_t r) const {
    for (int64_t i = 0; i < n; i += lanes::kSoftmaxBlock) SumOf<T>::run(a, x + i, std::min(lanes::kSoftmaxBlock, n - i), r + i);
  }
};

// float / double: folded as the compiled logsumexp (jit/lower_reduce.cpp) folds it, with the same
// functions, so that both give the same bits: m = max, shift = m (0 where m is infinite),
// s = Σ exp(x - shift) (the exp op's block, LoopBlockSum), log(s) + shift in float64.
// float16 / bfloat16 (not lowered) keep the one-pass (max, Σ) fold.
template <class T> void logsumexp_passes(const Spec& s, const Tensor& x, const Tensor& out) {
  static const BlockFn exp = Registry::get().find("exp")->block(dtype_of<T>());
  static const BlockFn log = Registry::get().find("log")->block(DType::f64);
  Shape kept = x.sizes();  // the shifts keep the reduced dims (size 1), so they broadcast over x
  for (int d = 0; d < x.dim(); ++d)
    if (s.mask[size_t(d)]) kept[size_t(d)] = 1;
  Tensor shift = Tensor::empty(kept, x.dtype(), x.device());
  T* sh = shift.data<T>();
  reduce(x, shift, s.mask, folds::Extreme<T, true>{}, [sh](auto a, int64_t off) { sh[off] = std::isinf(a) ? T(0) : T(a); });
  Tensor e = Tensor::empty(x.sizes(), x.dtype(), x.device());
  T* ep = e.data<T>();
  // trailing dims of a contiguous x (the mask sorted): a shift per row of s.count, each row's
  // exp while it is in the cache
  if (x.is_contiguous() && std::is_sorted(s.mask.begin(), s.mask.end()) && shift.numel() >= 2 * num_threads()) {
    const int64_t n = s.count;
    const T* xp = x.data<T>();
    parallel_for(shift.numel(), std::max<int64_t>(1, kParallelGrain / n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t j = 0; j < n; ++j) ep[r * n + j] = xp[r * n + j] - sh[r];
        exp(ep + r * n, nullptr, ep + r * n, n);
      }
    });
  } else {
    map<T, T, T>(e, {&x, &shift}, [](auto a, auto b) { return a - b; });
    parallel_for(e.numel(), kParallelGrain, [&](int64_t i0, int64_t i1) { exp(ep + i0, nullptr, ep + i0, i1 - i0); });
  }
  T* o = out.data<T>();
  reduce(e, out, s.mask, LoopBlockSum<T>{}, [o, sh](auto a, int64_t off) {
    double v = double(a), r;
    log(&v, nullptr, &r, 1);
    store(o[off], r + double(sh[off]));
  });
}

void run_logsumexp(OpCall& c) {
  Spec s = parse_dims(c);
  Tensor x = cast(s.x, c.outs[0].dtype());
  visit_floating(x.dtype(), [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (s.count > 0) return logsumexp_passes<T>(s, x, c.outs[0]);
    }
    T* o = c.outs[0].data<T>();
    reduce(x, c.outs[0], s.mask, folds::LogSumExp<T>{},
           [o](const auto& a, int64_t off) { store(o[off], folds::LogSumExp<T>::result(a)); });
  });
}

// norm: the vector p-norm over the reduced dims, {p = 2} by default (p = 0 counts non-zeros,
// p = math.huge / -math.huge are the largest / smallest absolute value).
struct AbsPow {
  double p;
  double operator()(double v) const { return std::pow(std::fabs(v), p); }
};
template <class Fn> struct Map {  // the transforms, as default-constructible fold members
  template <class V> double operator()(V v) const { return Fn::f(double(v)); }
};
struct SqF { static double f(double v) { return v * v; } };
struct AbsF { static double f(double v) { return std::fabs(v); } };
struct NonzeroF { static double f(double v) { return v != 0 ? 1.0 : 0.0; } };

std::vector<Meta> infer_norm(OpCall& c) {
  Spec s = parse_dims(c);
  require_floating(s.x.dtype());
  double p = c.number_or(3, 2.0);
  if (std::isnan(p)) fail("p expected a number, got nan");
  if (p == -INFINITY && s.count == 0) fail("cannot take the -inf norm of an empty reduction (the minimum of nothing)");
  return {{s.shape, s.x.dtype(), s.x.device()}};
}
template <class T, class Fold, class Post> void run_norm_fold(const Spec& s, const Tensor& out, Fold fold, Post post) {
  T* o = out.data<T>();
  reduce(s.x, out, s.mask, fold, [o, post](auto a, int64_t off) { store(o[off], post(double(a))); });
}
void run_norm(OpCall& c) {
  Spec s = parse_dims(c);
  double p = c.number_or(3, 2.0);
  const Tensor& out = c.outs[0];
  visit_floating(s.x.dtype(), [&](auto t) {
    using T = decltype(t);
    auto same = [](double a) { return a; };
    if (p == 2) run_norm_fold<T>(s, out, folds::Sum<T, double, Map<SqF>>{}, [](double a) { return std::sqrt(a); });
    else if (p == 1) run_norm_fold<T>(s, out, folds::Sum<T, double, Map<AbsF>>{}, same);
    else if (p == 0) run_norm_fold<T>(s, out, folds::Sum<T, double, Map<NonzeroF>>{}, same);
    else if (p == INFINITY)  // the max of nothing is 0 here: every |x| is >= 0
      run_norm_fold<T>(s, out, folds::Extreme<T, true, double, Map<AbsF>>{}, [](double a) { return a < 0 ? 0.0 : a; });
    else if (p == -INFINITY) run_norm_fold<T>(s, out, folds::Extreme<T, false, double, Map<AbsF>>{}, same);
    else run_norm_fold<T>(s, out, folds::Sum<T, double, AbsPow>{AbsPow{p}}, [p](double a) { return std::pow(a, 1.0 / p); });
  });
}

// ---- all, any ------------------------------------------------------------------------------------

std::vector<Meta> infer_truth(OpCall& c) {
  Spec s = parse_dims(c);
  return {{s.shape, DType::b8, s.x.device()}};
}
template <bool All> void run_truth(OpCall& c) {
  Spec s = parse_dims(c);
  bool* o = c.outs[0].data<bool>();
  visit(s.x.dtype(), [&](auto t) {
    using T = decltype(t);
    reduce(s.x, c.outs[0], s.mask, folds::Truth<T, All>{}, [o](uint8_t a, int64_t off) { o[off] = a != 0; });
  });
}

constexpr const char* kDimsSchema = "self:T, dim:Ds?, keepdim:B?";
constexpr const char* kDimSchema = "self:T, dim:D?, keepdim:B?";
constexpr const char* kDtypeSchema = "self:T, dim:Ds?, keepdim:B?, opts:{dtype:S}";

}  // namespace

void register_reductions(Registry& r) {
  const OpKind K = OpKind::Reduction;
  r.add(OpDef{"sum", kDtypeSchema, K, 0, infer_sum, run_sum});
  r.add(OpDef{"mean", kDtypeSchema, K, 0, infer_mean, run_mean});
  r.add(OpDef{"prod", kDtypeSchema, K, 0, infer_sum, run_prod});
  r.add(OpDef{"amax", kDimsSchema, K, 0, infer_extreme, run_amax<true>});
  r.add(OpDef{"amin", kDimsSchema, K, 0, infer_extreme, run_amax<false>});
  r.add(OpDef{"max", kDimSchema, K, kMultiOut, infer_max, run_max<true>});
  r.add(OpDef{"min", kDimSchema, K, kMultiOut, infer_max, run_max<false>});
  r.add(OpDef{"aminmax", "self:T, opts:{dim:D, keepdim:B}", K, kMultiOut, infer_aminmax, run_aminmax});
  r.add(OpDef{"argmax", kDimSchema, K, 0, infer_argmax, run_argmax<true>});
  r.add(OpDef{"argmin", kDimSchema, K, 0, infer_argmax, run_argmax<false>});
  r.add(OpDef{"var", "self:T, dim:Ds?, keepdim:B?, opts:{correction:N, unbiased:B}", K, 0, infer_var, run_var<false>});
  r.add(OpDef{"std", "self:T, dim:Ds?, keepdim:B?, opts:{correction:N, unbiased:B}", K, 0, infer_var, run_var<true>});
  r.add(OpDef{"logsumexp", kDimsSchema, K, 0, infer_logsumexp, run_logsumexp});
  r.add(OpDef{"norm", "self:T, dim:Ds?, keepdim:B?, opts:{p:P}", K, 0, infer_norm, run_norm});
  r.add(OpDef{"all", kDimsSchema, K, 0, infer_truth, run_truth<true>});
  r.add(OpDef{"any", kDimsSchema, K, 0, infer_truth, run_truth<false>});
  // PyTorch's autocast runs these in float32 (mean, var, amax ... keep their input's dtype)
  r.set_cast({"sum", "prod", "logsumexp", "norm"}, CastPolicy::Float32);
  r.set_cast({"prod"}, CastPolicy::Float32, true);  // PyTorch's CPU float32 list has prod alone of these
  register_scans(r);
}

}  // namespace cr
