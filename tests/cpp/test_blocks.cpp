// The precompiled array functions of generated CPU kernels: every pointwise op's OpDef::block
// against the op run eagerly through the dispatcher (bit for bit, NaN == NaN, on random inputs
// with special values), and the reduction helpers of jit/cpu/helpers.hpp against double / exact
// references, the eager reductions and their own merge.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "jit/cpu/helpers.hpp"
#include "vm/kernels/vmath.hpp"
#include "vm/registry.hpp"

using namespace cr;

namespace {

constexpr int64_t kN = 1000;
const DType kDTypes[] = {DType::f32, DType::f64, DType::i32, DType::i64, DType::b8};

enum class Fill { Any, Divisor, Exponent };

// A 1-d tensor of n values of dtype d: fill(p, g) writes them through p (of the element type)
// from the generator g seeded with seed.
template <class F> Tensor filled(DType d, int64_t n, uint32_t seed, F fill) {
  Tensor t = Tensor::empty({n}, d);
  std::mt19937 g(seed);
  visit(d, [&](auto z) { fill(t.data<decltype(z)>(), g); });
  return t;
}

// n random values of dtype d. Floats: mostly in [-8, 8], one in eight a special value (NaN,
// +-inf, +-0, +-1, huge, subnormal, near exp's overflow). Integers: Any in +-1000 (int32) /
// +-100000 (int64), Divisor in [1, 50], Exponent in [-2, 12]. Bools: either.
Tensor random_tensor(DType d, int64_t n, uint32_t seed, Fill fill = Fill::Any) {
  return filled(d, n, seed, [&](auto* p, std::mt19937& g) {
    using T = std::remove_pointer_t<decltype(p)>;
    if constexpr (std::is_floating_point_v<T>) {
      using L = std::numeric_limits<T>;
      const T specials[] = {L::quiet_NaN(), L::infinity(), -L::infinity(), T(0), -T(0), T(1), T(-1), T(0.5),
                            T(-2.5), L::max() / T(4), -L::max() / T(4), L::denorm_min() * T(3), T(88.75), T(-104),
                            T(709.5), L::epsilon()};
      std::uniform_real_distribution<double> u(-8, 8);
      for (int64_t i = 0; i < n; ++i)
        p[i] = g() % 8 == 0 ? specials[g() % (sizeof specials / sizeof specials[0])] : T(u(g));
    } else if constexpr (std::is_same_v<T, bool>) {
      for (int64_t i = 0; i < n; ++i) p[i] = (g() & 1) != 0;
    } else if constexpr (std::is_integral_v<T>) {
      const int64_t range = sizeof(T) == 4 ? 1000 : 100000;
      std::uniform_int_distribution<int64_t> any(-range, range), div(1, 50), ex(-2, 12);
      for (int64_t i = 0; i < n; ++i) p[i] = T(fill == Fill::Divisor ? div(g) : fill == Fill::Exponent ? ex(g) : any(g));
    }
  });
}

Tensor eager(Context& ctx, const char* op, const std::vector<Tensor>& ins, const char* opt = nullptr) {
  std::vector<cr_value> args;
  for (const Tensor& t : ins) args.push_back(cr_value{kTensor, 0, 0, t.get(), nullptr});
  if (opt) args.push_back(cr_value{kString, 0, 0, nullptr, opt});
  int idx = Registry::get().index_of(op);
  REQUIRE(idx >= 0);
  std::vector<Tensor> outs = dispatch(ctx, idx, args.data(), int(args.size()));
  REQUIRE(outs.size() >= 1);
  return outs[0];
}

// Element i of two contiguous arrays of dtype d: the same bits, or both NaN.
bool same_element(DType d, const void* x, const void* y, int64_t i) {
  return visit(d, [&](auto z) {
    using T = decltype(z);
    const T* a = static_cast<const T*>(x);
    const T* b = static_cast<const T*>(y);
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a[i]) && std::isnan(b[i])) return true;
    return std::memcmp(&a[i], &b[i], sizeof(T)) == 0;
  });
}
std::string element_str(DType d, const void* x, int64_t i) {
  return visit(d, [&](auto z) -> std::string {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return "?";
    else return cat(static_cast<const T*>(x)[i]);
  });
}

// Runs fn on a[, b] (n elements) into out, and in place (the result written over a copy of a)
// when out has a's dtype; compares both with the eager result. Returns mismatches; *first says
// the first one.
int64_t compare_block(BlockFn fn, const Tensor& a, const Tensor* b, const Tensor& want, std::string* first) {
  const int64_t n = a.numel();
  const DType od = want.dtype();
  std::vector<char> out(size_t(n * int64_t(dtype_size(od))) + 64);
  fn(a.data<char>(), b ? b->data<char>() : nullptr, out.data(), n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (same_element(od, out.data(), want.data<char>(), i)) continue;
    if (bad++ == 0)
      *first = cat("element ", i, ": a = ", element_str(a.dtype(), a.data<char>(), i),
                   b ? cat(", b = ", element_str(b->dtype(), b->data<char>(), i)) : std::string(),
                   ", block = ", element_str(od, out.data(), i), ", eager = ", element_str(od, want.data<char>(), i));
  }
  if (od == a.dtype()) {  // out == a
    std::vector<char> buf(size_t(n * int64_t(dtype_size(od))) + 64);
    std::memcpy(buf.data(), a.data<char>(), size_t(n * int64_t(dtype_size(od))));
    fn(buf.data(), b ? b->data<char>() : nullptr, buf.data(), n);
    for (int64_t i = 0; i < n; ++i)
      if (!same_element(od, buf.data(), want.data<char>(), i) && bad++ == 0)
        *first = cat("in place, element ", i, ": block = ", element_str(od, buf.data(), i),
                     ", eager = ", element_str(od, want.data<char>(), i));
  }
  return bad;
}

bool is_pointwise(const OpDef& d) {
  return (d.kind == OpKind::Unary || d.kind == OpKind::Binary) && !(d.flags & kReturnsSelf);
}

}  // namespace

TEST_CASE("every unary and binary pointwise op has block functions", "[blocks]") {
  int n = 0;
  for (const OpDef& d : Registry::get().ops()) {
    if (!is_pointwise(d)) continue;
    INFO(d.name);
    REQUIRE(d.block != nullptr);
    CHECK(d.block(DType::f32) != nullptr);
    CHECK(d.block(DType::f64) != nullptr);
    CHECK(d.block(DType::f16) == nullptr);
    CHECK(d.block(DType::bf16) == nullptr);
    ++n;
  }
  CHECK(n == 29 + 1 + 20 + 2 + 2 + 7);  // CR_UNARY_OPS, gelu, CR_BINARY_OPS, gelu's two gradients, div's roundings, F's activations
  auto block = [](const char* op, DType d) { return Registry::get().find(op)->block(d); };
  CHECK(block("exp", DType::i32) == nullptr);    // Float: computes in float32 for integers
  CHECK(block("div", DType::i64) == nullptr);
  CHECK(block("neg", DType::b8) == nullptr);     // Same / Numeric: no bool
  CHECK(block("pow", DType::b8) == nullptr);
  CHECK(block("neg", DType::i32) != nullptr);
  CHECK(block("add", DType::b8) != nullptr);     // Arith
  CHECK(block("eq", DType::i64) != nullptr);     // Compare
  CHECK(block("isnan", DType::i32) != nullptr);  // Bool
  CHECK(block("logical_and", DType::f32) != nullptr);
  CHECK(Registry::get().find("add_")->block == nullptr);  // in-place forms have none
  CHECK(gelu_tanh_block(DType::f32) != nullptr);
  CHECK(gelu_tanh_block(DType::f64) != nullptr);
  CHECK(gelu_tanh_block(DType::i32) == nullptr);
  CHECK(gelu_tanh_block(DType::f16) == nullptr);
  CHECK(jit::BlockFn(gelu_tanh_block(DType::f32)) == gelu_tanh_block(DType::f32));
}

TEST_CASE("block functions are bit-identical to the eager ops", "[blocks]") {
  Context ctx;
  uint32_t seed = 1;
  int checked = 0;
  for (const OpDef& d : Registry::get().ops()) {
    if (!is_pointwise(d) || !d.block) continue;
    const bool binary = d.kind == OpKind::Binary;
    const std::string name = d.name;
    for (DType dt : kDTypes) {
      BlockFn fn = d.block(dt);
      if (!fn) continue;
      INFO(name << " " << dtype_name(dt));
      Fill fb = !is_integral(dt) ? Fill::Any
                : name == "fmod" || name == "remainder" || name == "_div_floor" || name == "_div_trunc"
                    ? Fill::Divisor  // (integer zero divisors: not checked by block functions)
                : name == "pow" ? Fill::Exponent
                                  : Fill::Any;
      Tensor a = random_tensor(dt, kN, seed++), b = random_tensor(dt, kN, seed++, fb);
      Tensor want = binary ? eager(ctx, d.name, {a, b}) : eager(ctx, d.name, {a});
      // the eager op computed in dt: its output has dt (or is a bool predicate)
      REQUIRE((want.dtype() == dt || want.dtype() == DType::b8));
      REQUIRE(want.numel() == kN);
      std::string first;
      int64_t bad = compare_block(fn, a, binary ? &b : nullptr, want, &first);
      INFO(first);
      CHECK(bad == 0);
      ++checked;
      if (name == "gelu") {
        BlockFn tanh_fn = gelu_tanh_block(dt);
        REQUIRE(tanh_fn != nullptr);
        Tensor want_tanh = eager(ctx, "gelu", {a}, "tanh");
        bad = compare_block(tanh_fn, a, nullptr, want_tanh, &first);
        INFO("tanh form: " << first);
        CHECK(bad == 0);
        ++checked;
      }
    }
  }
  CHECK(checked > 150);
}

TEST_CASE("block functions: short and offset arrays", "[blocks]") {
  Context ctx;
  for (const char* op : {"exp", "add", "lt", "sigmoid", "maximum"}) {
    const OpDef* d = Registry::get().find(op);
    const bool binary = d->kind == OpKind::Binary;
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor a = random_tensor(dt, kN, 7), b = random_tensor(dt, kN, 8);
      Tensor want = binary ? eager(ctx, op, {a, b}) : eager(ctx, op, {a});
      const size_t ie = dtype_size(dt), oe = dtype_size(want.dtype());
      for (int64_t off : {0, 1, 3, 13}) {
        for (int64_t n : {0, 1, 2, 7, 9, 31, 33, 512}) {
          INFO(op << " " << dtype_name(dt) << " offset " << off << " n " << n);
          std::vector<char> out(size_t(n) * oe + 1);
          d->block(dt)(a.data<char>() + size_t(off) * ie, binary ? b.data<char>() + size_t(off) * ie : nullptr,
                       out.data(), n);
          bool ok = true;
          for (int64_t i = 0; i < n; ++i)
            ok = ok && same_element(want.dtype(), out.data(), want.data<char>() + size_t(off) * oe, i);
          CHECK(ok);
        }
      }
    }
  }
}

// float tanh computes two forms per lane and keeps one (vmath.hpp tanh_float): the tanh block (the
// AVX-512 twin where the CPU has it) gives vmath::tanh's value for every 4099th float of [-12, 12], around
// the forms' switch at |x| = 1 and at the special values.
TEST_CASE("the float tanh block gives vmath::tanh's values", "[blocks]") {
  std::vector<float> xs;
  for (uint32_t b = 0; b <= std::bit_cast<uint32_t>(12.0f); b += 4099) {
    xs.push_back(std::bit_cast<float>(b));
    xs.push_back(-std::bit_cast<float>(b));
  }
  for (float v = 0.99f; v < 1.01f; v = std::nextafter(v, 2.0f)) xs.push_back(v);
  using L = std::numeric_limits<float>;
  for (float v : {L::quiet_NaN(), L::infinity(), -L::infinity(), L::max(), -0.0f, L::denorm_min(), 9.0f, 10.0f, 50.0f})
    xs.push_back(v);
  std::vector<float> y(xs.size());
  Registry::get().find("tanh")->block(DType::f32)(xs.data(), nullptr, y.data(), int64_t(xs.size()));
  float (*one)(float) = vmath::tanh<float>;
  size_t differ = 0;
  float first = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    float want = one(xs[i]);
    if (std::memcmp(&want, &y[i], sizeof want) != 0 && differ++ == 0) first = xs[i];
  }
  INFO(differ << " elements differ, the first at x = " << first);
  CHECK(differ == 0);
}

// ---- reductions ----------------------------------------------------------------------------------

namespace {

using jit::ReduceKind;
const ReduceKind kKinds[] = {ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod};

// An accumulator: 8 bytes of storage of its dtype.
struct Acc {
  alignas(8) unsigned char bytes[8] = {};
  DType dtype;
  Acc(ReduceKind k, DType in) : dtype(jit::reduce_acc_dtype(k, in)) { set(jit::reduce_init(k, in)); }
  void set(double v) {  // as generated code would convert reduce_init (int64: saturating)
    visit(dtype, [&](auto z) {
      using T = decltype(z);
      if constexpr (std::is_same_v<T, int64_t>)
        *reinterpret_cast<T*>(bytes) = v >= 0x1p63 ? INT64_MAX : v <= -0x1p63 ? INT64_MIN : int64_t(v);
      else if constexpr (!std::is_same_v<T, Half> && !std::is_same_v<T, BFloat16>) *reinterpret_cast<T*>(bytes) = T(v);
    });
  }
  double as_double() const {
    return visit(dtype, [&](auto z) -> double {
      using T = decltype(z);
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return 0;
      else return double(*reinterpret_cast<const T*>(bytes));
    });
  }
  int64_t as_int() const {
    return visit(dtype, [&](auto z) -> int64_t {
      using T = decltype(z);
      if constexpr (std::is_integral_v<T>) return int64_t(*reinterpret_cast<const T*>(bytes));
      else return 0;
    });
  }
};

// Folds x[begin, end) into acc in blocks of jit::kBlock, as a generated kernel does.
void fold(ReduceKind k, const Tensor& x, int64_t begin, int64_t end, Acc& acc) {
  jit::ReduceFn fn = jit::reduce_fn(k, x.dtype());
  REQUIRE(fn != nullptr);
  const size_t es = dtype_size(x.dtype());
  for (int64_t i = begin; i < end; i += jit::kBlock)
    fn(x.data<char>() + size_t(i) * es, std::min(jit::kBlock, end - i), acc.bytes);
}

// Reduction inputs: floats in [-1, 1] (sum, max, min) or [0.99, 1.01] (prod); integers in
// +-1e6 / +-1e12, or in {-3..3} \ {0} (prod: the product wraps, and is compared exactly).
Tensor reduce_input(ReduceKind k, DType d, int64_t n, uint32_t seed) {
  return filled(d, n, seed, [&](auto* p, std::mt19937& g) {
    using T = std::remove_pointer_t<decltype(p)>;
    if constexpr (std::is_floating_point_v<T>) {
      std::uniform_real_distribution<double> u(k == ReduceKind::Prod ? 0.99 : -1, k == ReduceKind::Prod ? 1.01 : 1);
      for (int64_t i = 0; i < n; ++i) p[i] = T(u(g));
    } else if constexpr (std::is_same_v<T, bool>) {
      for (int64_t i = 0; i < n; ++i) p[i] = k == ReduceKind::Prod ? g() % 4096 != 0 : (g() & 1) != 0;
    } else if constexpr (std::is_integral_v<T>) {
      const int64_t r = sizeof(T) == 4 ? 1000000 : 1000000000000;
      std::uniform_int_distribution<int64_t> any(-r, r), small(1, 3);
      for (int64_t i = 0; i < n; ++i) p[i] = T(k == ReduceKind::Prod ? small(g) * (g() & 1 ? 1 : -1) : any(g));
    }
  });
}

// Checks acc against the reference of kind over x[begin, end).
void check_result(ReduceKind k, const Tensor& x, int64_t begin, int64_t end, const Acc& acc) {
  const DType d = x.dtype();
  visit(d, [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return;
    else {
      const T* p = x.data<T>();
      if constexpr (std::is_floating_point_v<T>) {
        double ref = k == ReduceKind::Prod ? 1 : k == ReduceKind::Sum ? 0 : double(p[begin]), mag = 0;
        for (int64_t i = begin; i < end; ++i) {
          double v = double(p[i]);
          mag += std::fabs(v);
          if (k == ReduceKind::Sum) ref += v;
          else if (k == ReduceKind::Prod) ref *= v;
          else if (k == ReduceKind::Max) ref = std::max(ref, v);
          else ref = std::min(ref, v);
        }
        const double got = acc.as_double();
        const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
        if (k == ReduceKind::Sum) CHECK(std::fabs(got - ref) <= tol * mag);
        else if (k == ReduceKind::Prod) CHECK(got == Approx(ref).epsilon(1e-12));
        else CHECK(got == ref);  // max / min: exact
      } else {
        using U = uint64_t;  // sums and products wrap
        U ref = k == ReduceKind::Prod ? 1 : 0;
        int64_t ext = int64_t(p[begin]);
        for (int64_t i = begin; i < end; ++i) {
          int64_t v = int64_t(p[i]);
          if (k == ReduceKind::Sum) ref += U(v);
          else if (k == ReduceKind::Prod) ref *= U(v);
          else if (k == ReduceKind::Max) ext = std::max(ext, v);
          else ext = std::min(ext, v);
        }
        if (k == ReduceKind::Sum || k == ReduceKind::Prod) CHECK(acc.as_int() == int64_t(ref));
        else CHECK(acc.as_int() == ext);
      }
    }
  });
}

}  // namespace

TEST_CASE("reduction helpers: names, dtypes, initial values", "[blocks]") {
  using K = ReduceKind;
  CHECK(std::string(jit::reduce_name(K::Sum)) == "sum");
  CHECK(std::string(jit::reduce_name(K::Max)) == "max");
  CHECK(std::string(jit::reduce_name(K::Min)) == "min");
  CHECK(std::string(jit::reduce_name(K::Prod)) == "prod");
  CHECK(jit::reduce_acc_dtype(K::Sum, DType::f32) == DType::f64);
  CHECK(jit::reduce_acc_dtype(K::Sum, DType::f64) == DType::f64);
  CHECK(jit::reduce_acc_dtype(K::Sum, DType::i32) == DType::i64);
  CHECK(jit::reduce_acc_dtype(K::Sum, DType::b8) == DType::i64);
  CHECK(jit::reduce_acc_dtype(K::Prod, DType::f32) == DType::f64);
  CHECK(jit::reduce_acc_dtype(K::Prod, DType::i32) == DType::i64);
  for (DType d : kDTypes) {
    CHECK(jit::reduce_acc_dtype(K::Max, d) == d);
    CHECK(jit::reduce_acc_dtype(K::Min, d) == d);
    for (K k : kKinds) CHECK(jit::reduce_fn(k, d) != nullptr);
  }
  for (K k : kKinds) {
    CHECK(jit::reduce_fn(k, DType::f16) == nullptr);
    CHECK(jit::reduce_fn(k, DType::bf16) == nullptr);
  }
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(jit::reduce_init(K::Sum, DType::f32) == 0);
  CHECK(jit::reduce_init(K::Prod, DType::i64) == 1);
  CHECK(jit::reduce_init(K::Max, DType::f32) == -inf);
  CHECK(jit::reduce_init(K::Min, DType::f64) == inf);
  CHECK(jit::reduce_init(K::Max, DType::i32) == double(INT32_MIN));
  CHECK(jit::reduce_init(K::Min, DType::i32) == double(INT32_MAX));
  CHECK(jit::reduce_init(K::Max, DType::i64) == double(INT64_MIN));
  CHECK(jit::reduce_init(K::Min, DType::i64) == 0x1p63);  // double(INT64_MAX): convert saturating
  CHECK(jit::reduce_init(K::Max, DType::b8) == 0);
  CHECK(jit::reduce_init(K::Min, DType::b8) == 1);
}

TEST_CASE("reduction helpers against references, eager and merge", "[blocks]") {
  Context ctx;
  constexpr int64_t n = 5000, half = 2600;  // more than lanes::kBlock; the halves split a block
  uint32_t seed = 100;
  for (DType d : kDTypes) {
    for (ReduceKind k : kKinds) {
      INFO(jit::reduce_name(k) << " " << dtype_name(d));
      Tensor x = reduce_input(k, d, n, seed++);
      Acc whole(k, d);
      fold(k, x, 0, n, whole);
      check_result(k, x, 0, n, whole);

      // split at `half`, merged
      Acc lo(k, d), hi(k, d);
      fold(k, x, 0, half, lo);
      fold(k, x, half, n, hi);
      check_result(k, x, half, n, hi);
      jit::reduce_merge(k, lo.dtype, lo.bytes, hi.bytes);
      check_result(k, x, 0, n, lo);

      // one call over a contiguous run of up to lanes::kBlock elements folds as eager does
      Tensor y = reduce_input(k, d, kN, seed++);
      Acc one(k, d);
      jit::reduce_fn(k, d)(y.data<char>(), kN, one.bytes);
      const char* op = k == ReduceKind::Sum ? "sum" : k == ReduceKind::Prod ? "prod" : k == ReduceKind::Max ? "amax" : "amin";
      Tensor e = eager(ctx, op, {y});
      REQUIRE(e.numel() == 1);
      Acc got(k, d);
      got.dtype = e.dtype();  // the eager output dtype: the accumulator stored into it
      got.set(0);
      visit(e.dtype(), [&](auto z) {
        using T = decltype(z);
        if constexpr (!std::is_same_v<T, Half> && !std::is_same_v<T, BFloat16>) {
          if (one.dtype == DType::f64) store(*reinterpret_cast<T*>(got.bytes), *reinterpret_cast<const double*>(one.bytes));
          else if (one.dtype == DType::i64) store(*reinterpret_cast<T*>(got.bytes), one.as_int());
          else std::memcpy(got.bytes, one.bytes, dtype_size(one.dtype));
        }
      });
      CHECK(same_element(e.dtype(), got.bytes, e.data<char>(), 0));
    }
  }
}

TEST_CASE("reduction helpers: max / min propagate NaN, bool max / min are any / all", "[blocks]") {
  for (DType d : {DType::f32, DType::f64}) {
    for (ReduceKind k : {ReduceKind::Max, ReduceKind::Min}) {
      INFO(jit::reduce_name(k) << " " << dtype_name(d));
      Tensor x = reduce_input(k, d, 3000, 5);
      visit(d, [&](auto z) {
        using T = decltype(z);
        if constexpr (std::is_floating_point_v<T>) x.data<T>()[1777] = std::numeric_limits<T>::quiet_NaN();
      });
      Acc a(k, d);
      fold(k, x, 0, 3000, a);
      CHECK(std::isnan(a.as_double()));
      // a NaN in the first block stays NaN through a clean second block
      Acc b(k, d);
      fold(k, x, 1536, 2048, b);
      CHECK(std::isnan(b.as_double()));
      fold(k, x, 0, 512, b);
      CHECK(std::isnan(b.as_double()));
      // a NaN accumulator stays NaN
      Acc c(k, d);
      c.set(std::nan(""));
      fold(k, x, 0, 1024, c);
      CHECK(std::isnan(c.as_double()));
      // merge: NaN on either side wins
      Acc clean(k, d), dirty(k, d);
      fold(k, x, 0, 1024, clean);
      fold(k, x, 1024, 3000, dirty);
      REQUIRE(!std::isnan(clean.as_double()));
      Acc m1 = clean;
      jit::reduce_merge(k, m1.dtype, m1.bytes, dirty.bytes);
      CHECK(std::isnan(m1.as_double()));
      Acc m2 = dirty;
      jit::reduce_merge(k, m2.dtype, m2.bytes, clean.bytes);
      CHECK(std::isnan(m2.as_double()));
      // infinities are ordinary values
      Acc inf(k, d);
      Tensor y = reduce_input(k, d, 100, 6);
      visit(d, [&](auto z) {
        using T = decltype(z);
        if constexpr (std::is_floating_point_v<T>)
          y.data<T>()[42] = k == ReduceKind::Max ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity();
      });
      fold(k, y, 0, 100, inf);
      CHECK(std::isinf(inf.as_double()));
    }
  }
  Tensor t = Tensor::empty({600}, DType::b8);
  for (int64_t i = 0; i < 600; ++i) t.data<bool>()[i] = false;
  Acc any0(ReduceKind::Max, DType::b8), all0(ReduceKind::Min, DType::b8);
  fold(ReduceKind::Max, t, 0, 600, any0);
  fold(ReduceKind::Min, t, 0, 600, all0);
  CHECK(any0.as_int() == 0);
  CHECK(all0.as_int() == 0);
  for (int64_t i = 0; i < 600; ++i) t.data<bool>()[i] = true;
  Acc any1(ReduceKind::Max, DType::b8), all1(ReduceKind::Min, DType::b8), cnt(ReduceKind::Sum, DType::b8);
  fold(ReduceKind::Max, t, 0, 600, any1);
  fold(ReduceKind::Min, t, 0, 600, all1);
  fold(ReduceKind::Sum, t, 0, 600, cnt);
  CHECK(any1.as_int() == 1);
  CHECK(all1.as_int() == 1);
  CHECK(cnt.as_int() == 600);
  t.data<bool>()[599] = false;
  Acc all2(ReduceKind::Min, DType::b8), prod2(ReduceKind::Prod, DType::b8);
  fold(ReduceKind::Min, t, 0, 600, all2);
  fold(ReduceKind::Prod, t, 0, 600, prod2);
  CHECK(all2.as_int() == 0);
  CHECK(prod2.as_int() == 0);
}

// ---- softmax: its exp and log blocks and column folds ---------------------------------------------

TEST_CASE("extra block functions: gelu's tanh form, softmax's exp and log, by name", "[blocks]") {
  for (const char* name : {"gelu_tanh", "softmax_exp", "softmax_log"}) {
    INFO(name);
    const ExtraBlock* e = extra_block(name);
    REQUIRE(e != nullptr);
    CHECK(std::string(e->name) == name);
    CHECK(e->expr != nullptr);
    CHECK(e->block(DType::f32) != nullptr);
    CHECK(e->block(DType::f64) != nullptr);
    CHECK(e->block(DType::i32) == nullptr);
    CHECK(e->block(DType::f16) == nullptr);
  }
  CHECK(extra_block("exp") == nullptr);  // a registry op's block is the op's
  CHECK(extra_block("gelu_tanh")->block(DType::f32) == gelu_tanh_block(DType::f32));
}

// An element's exp must not depend on where it lies: eager softmax computes a column's exps across
// a tile of columns, compiled softmax along the column (vector lanes in one, a scalar tail in the
// other). The AVX-512 twin, where it runs, must give the AVX2 loop's bits too.
TEST_CASE("softmax's float32 exp: the same bits in vector lanes, tails, in place and in either loop", "[blocks]") {
  Tensor a = random_tensor(DType::f32, kN, 31);
  float* xw = a.data<float>();
  // and the edges: overflow, subnormal results, 0, inf, NaN, in vector lanes and tails alike
  const float edges[] = {88.72f, 88.73f, 89.0f, 1000.0f, -87.5f, -100.0f, -103.9f, -104.0f, -200.0f,
                         INFINITY, -INFINITY, NAN, -NAN};
  for (size_t i = 0; i < std::size(edges) && int64_t(7 * i + 5) < kN; ++i) xw[7 * i + 5] = edges[i];
  // whole vectors of subnormal results and of a mask's -inf (their own path in both loops)
  for (int64_t i = 200; i < 264 && i < kN; ++i) xw[i] = i < 232 ? -88.0f - float(i - 200) * 0.5f : -INFINITY;
  const float* x = xw;
  std::vector<float> want(kN), got(kN), avx2(kN);
  for (int64_t i = 0; i < kN; ++i) want[size_t(i)] = lanes::exp_poly(x[i]);  // scalar
  BlockFn fn = softmax_exp_block(DType::f32);
  for (int64_t off : {0, 1, 3}) {
    INFO("offset " << off);
    fn(x + off, nullptr, got.data(), kN - off);
    lanes::exp_block(x + off, avx2.data(), kN - off);
    CHECK(std::memcmp(got.data(), want.data() + off, size_t(kN - off) * sizeof(float)) == 0);
    CHECK(std::memcmp(avx2.data(), want.data() + off, size_t(kN - off) * sizeof(float)) == 0);
  }
  std::memcpy(got.data(), x, kN * sizeof(float));
  fn(got.data(), nullptr, got.data(), kN);
  CHECK(std::memcmp(got.data(), want.data(), kN * sizeof(float)) == 0);
}

TEST_CASE("reduce_supported (the loop IR's) is where the CPU has a block reduction", "[blocks]") {
  using K = ReduceKind;
  for (K k : {K::Sum, K::Max, K::Min, K::Prod, K::OrderedSum, K::OrderedMax})
    for (DType d : {DType::f32, DType::f64, DType::i32, DType::i64, DType::b8, DType::f16, DType::bf16}) {
      INFO(jit::reduce_name(k) << " " << dtype_name(d));
      CHECK(jit::reduce_supported(k, d) == (jit::reduce_fn(k, d) != nullptr));
    }
}

TEST_CASE("ordered folds: element after element in the input dtype, as eager softmax's columns", "[blocks]") {
  using K = ReduceKind;
  CHECK(std::string(jit::reduce_name(K::OrderedSum)) == "ordered_sum");
  CHECK(std::string(jit::reduce_name(K::OrderedMax)) == "ordered_max");
  for (K k : {K::OrderedSum, K::OrderedMax}) {
    CHECK(jit::reduce_acc_dtype(k, DType::f32) == DType::f32);
    CHECK(jit::reduce_acc_dtype(k, DType::f64) == DType::f64);
    for (DType d : {DType::i32, DType::i64, DType::b8, DType::f16}) CHECK(jit::reduce_fn(k, d) == nullptr);
  }
  CHECK(jit::reduce_init(K::OrderedSum, DType::f32) == 0);
  CHECK(jit::reduce_init(K::OrderedMax, DType::f64) == -std::numeric_limits<double>::infinity());
  for (DType d : {DType::f32, DType::f64}) {
    INFO(dtype_name(d));
    Tensor x = random_tensor(d, 1500, 77);  // with NaN, infinities and signed zeros
    visit(d, [&](auto z) {
      using T = decltype(z);
      if constexpr (std::is_floating_point_v<T>) {
        const T* p = x.data<T>();
        T sum = 0, max = -std::numeric_limits<T>::infinity();
        for (int64_t i = 0; i < 1500; ++i) {
          sum += p[i];
          max = lanes::max_step(max, p[i]);
        }
        for (K k : {K::OrderedSum, K::OrderedMax}) {
          Acc acc(k, d);
          fold(k, x, 0, 1500, acc);  // blocks of jit::kBlock
          T want = k == K::OrderedSum ? sum : max;
          INFO(jit::reduce_name(k));
          CHECK(same_element(d, acc.bytes, &want, 0));  // (which NaN an add returns is the compiler's choice)
        }
        // the last NaN wins, as in eager's columns; ties keep the first value
        const T nan1 = std::numeric_limits<T>::quiet_NaN(), nan2 = -nan1;
        T seq[] = {T(-1), T(-0.0), T(0), nan1, T(5), nan2, T(7)};
        Acc m(K::OrderedMax, d);
        jit::reduce_fn(K::OrderedMax, d)(seq, 3, m.bytes);
        CHECK(std::signbit(*reinterpret_cast<T*>(m.bytes)));  // -0 came first
        jit::reduce_fn(K::OrderedMax, d)(seq + 3, 4, m.bytes);
        CHECK(std::memcmp(m.bytes, &nan2, sizeof(T)) == 0);
      }
    });
  }
  Acc a(K::OrderedSum, DType::f32), b(K::OrderedSum, DType::f32);
  CHECK_THROWS_WITH(jit::reduce_merge(K::OrderedSum, DType::f32, a.bytes, b.bytes), Catch::Contains("never split"));
}

TEST_CASE("stream_block copies every byte at any alignment and length, and nothing past it", "[blocks]") {
  // the destination's 16-byte head and tail take plain stores, the middle streaming ones
  std::vector<unsigned char> src(600), dst(700);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  for (int64_t off : {0, 1, 5, 15, 16, 17, 63}) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(63), int64_t(64), int64_t(65),
                      int64_t(129), int64_t(511), int64_t(512), int64_t(600)}) {
      std::fill(dst.begin(), dst.end(), 0xEE);
      jit::stream_block(dst.data() + off, src.data(), n);
      jit::stream_fence();
      INFO("offset " << off << ", " << n << " bytes");
      REQUIRE(std::memcmp(dst.data() + off, src.data(), size_t(n)) == 0);
      for (int64_t i = 0; i < int64_t(dst.size()); ++i)
        if (i < off || i >= off + n) REQUIRE(dst[size_t(i)] == 0xEE);
    }
  }
}
