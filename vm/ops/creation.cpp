// Creation ops: tensor, zeros, ones, empty, full, arange, linspace, eye, rand, randn, randint,
// *_like. Options: {dtype =, device =}.
#include <algorithm>
#include <cmath>

#include "vm/kernels/philox.hpp"
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

// Options are the last two schema slots: dtype, device.
DType opt_dtype(const OpCall& c, int i, DType dflt) {
  if (!c.has(i)) return dflt;
  return dtype_named(c.str(i));
}
Device opt_device(const OpCall& c, int i) { return c.has(i) ? parse_device(c.str(i)) : Device{}; }

// Sizes: non-negative, and a product that does not overflow (2^40 x 2^40 must not wrap to 0).
Shape checked_shape(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s)
    if (v < 0) fail(cat("sizes must be non-negative, got ", shape_str(s)));
  for (int64_t v : s)
    if (__builtin_mul_overflow(n, v, &n)) fail(cat("tensor of shape ", shape_str(s), " is too large"));
  return s;
}
Shape sizes_arg(const OpCall& c, int i) { return checked_shape(c.ints(i)); }

// zeros / ones / empty / rand / randn: "size:Is..., opts:{dtype:S, device:S}"
std::vector<Meta> infer_sized(OpCall& c) { return {{sizes_arg(c, 0), opt_dtype(c, 1, DType::f32), opt_device(c, 2)}}; }
// zeros / ones / empty / full (and *_like) only allocate and fill: on a CUDA device they run as
// they are (kDeviceAware; fill is a device memset there), random ones draw on the host.
void run_zeros(OpCall& c) { fill(c.outs[0], 0); }
void run_ones(OpCall& c) { fill(c.outs[0], 1); }
void run_empty(OpCall&) {}

// Fills out (contiguous) with the draws of counters offset.., advancing the generator by numel:
// fill(first counter, seed, buf, m) writes m draws, a block at a time.
template <class Fill> void run_random_blocks(OpCall& c, Fill fill) {
  const Tensor& out = c.outs[0];
  const uint64_t seed = c.ctx.gen.seed, base = c.ctx.gen.offset;
  c.ctx.gen.offset += uint64_t(out.numel());
  visit(out.dtype(), [&](auto t) {
    using T = decltype(t);
    T* p = out.data<T>();
    parallel_for(out.numel(), 4096, [&](int64_t b, int64_t e) {
      constexpr int64_t kBlock = 1024;
      double buf[kBlock];
      for (int64_t k = b; k < e; k += kBlock) {
        const int64_t m = std::min(kBlock, e - k);
        fill(base + uint64_t(k), seed, buf, m);
        for (int64_t i = 0; i < m; ++i) store(p[k + i], buf[i]);
      }
    });
  });
}
// the same with gen(counter, seed) for each draw
template <class G> void run_random(OpCall& c, G gen) {
  run_random_blocks(c, [gen](uint64_t first, uint64_t seed, double* o, int64_t m) {
    for (int64_t i = 0; i < m; ++i) o[i] = gen(first + uint64_t(i), seed);
  });
}
std::vector<Meta> infer_float_sized(OpCall& c) {
  std::vector<Meta> m = infer_sized(c);
  if (!is_floating(m[0].dtype)) fail(dtype_list_error("a floating dtype", m[0].dtype));
  return m;
}
void run_rand(OpCall& c) {
  const double top = largest_below_one(c.outs[0].dtype());  // (jit/lower_ops.cpp clamps the same)
  run_random(c, [top](uint64_t counter, uint64_t seed) { return std::min(philox_uniform(counter, seed), top); });
}
// (philox_normal's values: philox_normals vectorises the transform over a block)
void run_randn(OpCall& c) {
  run_random_blocks(c, [](uint64_t first, uint64_t seed, double* o, int64_t m) {
    philox_normals([first](int64_t i) { return first + uint64_t(i); }, [seed](int64_t) { return seed; }, o, m);
  });
}

// randint(lo, hi, sizes): uniform integers in [lo, hi)
std::vector<Meta> infer_randint(OpCall& c) {
  if (c.integer(1) <= c.integer(0)) fail(cat("expected low < high, got low = ", c.integer(0), ", high = ", c.integer(1)));
  DType d = opt_dtype(c, 3, DType::i64);
  if (d == DType::b8 && (c.integer(0) < 0 || c.integer(1) > 2))  // as torch: [low, high) within 0..1
    fail(cat("the range [", c.integer(0), ", ", c.integer(1), ") is out of bounds for bool (values 0 and 1)"));
  check_scalar_fits(double(c.integer(0)), d);
  check_scalar_fits(double(c.integer(1) - 1), d);
  return {{sizes_arg(c, 2), d, opt_device(c, 4)}};
}
void run_randint(OpCall& c) {
  int64_t lo = c.integer(0);
  uint64_t span = uint64_t(c.integer(1) - lo);
  run_random(c, [lo, span](uint64_t ctr, uint64_t seed) { return double(lo + int64_t(philox_u64(ctr, seed) % span)); });
}

// full(sizes, value): dtype from the value as PyTorch does (integer -> int64, bool -> bool)
std::vector<Meta> infer_full(OpCall& c) {
  Operand v = operand(c, 1);
  if (v.is_tensor()) fail("value expected a number, got a tensor");
  DType d = opt_dtype(c, 2, result_type({&v}));
  check_scalar_fits(v.num, d);
  return {{sizes_arg(c, 0), d, opt_device(c, 3)}};
}
void run_full(OpCall& c) { fill(c.outs[0], c.number(1)); }

// arange([start,] stop[, step]): end exclusive; int64 when every bound is an integer. As torch,
// an integer dtype truncates start, stop and step first (arange(-7.15, 9.25, 1.75, int32) is
// -7, -6, ..., 2) and counts int64 elements over those, other dtypes' over the given numbers
// (torch's RangeFactories: 16 elements for int64 here, 10 for int32).
struct Range { double start, stop, step; int64_t n; DType dtype; };
Range arange_range(const OpCall& c) {
  Range r{0, c.number(0), 1, 0, DType::f32};
  if (c.has(1)) { r.start = c.number(0); r.stop = c.number(1); }
  if (c.has(2)) r.step = c.number(2);
  const bool integral = scalar_is_integral(r.start) && scalar_is_integral(r.stop) && scalar_is_integral(r.step);
  r.dtype = opt_dtype(c, 3, integral ? DType::i64 : DType::f32);
  if (r.step == 0 || !std::isfinite(r.step)) fail(cat("step must be finite and non-zero, got ", r.step));
  if (!std::isfinite(r.start) || !std::isfinite(r.stop)) fail(cat("bounds must be finite, got ", r.start, " and ", r.stop));
  double n = std::ceil((r.stop - r.start) / r.step);
  if (!is_floating(r.dtype)) {
    if (std::trunc(r.step) == 0) fail(cat("step ", r.step, " is 0 as an integer of ", dtype_name(r.dtype)));
    r.start = std::trunc(r.start), r.stop = std::trunc(r.stop), r.step = std::trunc(r.step);
    if (r.dtype == DType::i64) n = std::ceil((r.stop - r.start) / r.step);
  }
  // as torch: the bounds' order, not the count (arange(1.25, 1) has no elements but is refused)
  if ((r.step > 0 && r.stop < r.start) || (r.step < 0 && r.stop > r.start))
    fail(cat("the range [", r.start, ", ", r.stop, ") is not in the direction of step ", r.step));
  // checked as a double: a tiny step over a wide range must not overflow the int64 count
  if (!(n < 9.0e15)) fail(cat("the range [", r.start, ", ", r.stop, ") with step ", r.step, " has too many elements"));
  r.n = int64_t(std::max(n, 0.0));
  return r;
}
std::vector<Meta> infer_arange(OpCall& c) {
  Range r = arange_range(c);
  if (is_integral(r.dtype) && r.n > 0) {
    check_scalar_fits(r.start, r.dtype);
    check_scalar_fits(r.start + double(r.n - 1) * r.step, r.dtype);
  }
  return {{{r.n}, r.dtype, opt_device(c, 4)}};
}
void run_arange(OpCall& c) {
  Range r = arange_range(c);
  visit(c.outs[0].dtype(), [&](auto t) {
    using T = decltype(t);
    T* p = c.outs[0].data<T>();
    for (int64_t i = 0; i < r.n; ++i) store(p[i], r.start + double(i) * r.step);
  });
}

// linspace(a, b, n): n points from a to b inclusive. (This file is compiled with
// -ffp-contract=off: start + i * step rounds twice, as the generated loops compute it.)
std::vector<Meta> infer_linspace(OpCall& c) {
  int64_t n = c.integer(2);
  if (n < 0) fail(cat("steps must be non-negative, got ", n));
  DType d = opt_dtype(c, 3, DType::f32);
  if (is_integral(d)) {
    check_scalar_fits(c.number(0), d);
    check_scalar_fits(c.number(1), d);
  }
  return {{checked_shape({n}), d, opt_device(c, 4)}};
}
void run_linspace(OpCall& c) {
  double a = c.number(0), b = c.number(1);
  int64_t n = c.integer(2);
  double step = n > 1 ? (b - a) / double(n - 1) : 0;
  visit(c.outs[0].dtype(), [&](auto t) {
    using T = decltype(t);
    T* p = c.outs[0].data<T>();
    // symmetric from both ends, as PyTorch does, so the last point is exactly b
    for (int64_t i = 0; i < n; ++i)
      store(p[i], n == 1 ? a : i < n / 2 ? a + step * double(i) : b - step * double(n - 1 - i));
  });
}

// eye(n[, m])
std::vector<Meta> infer_eye(OpCall& c) {
  int64_t n = c.integer(0), m = c.integer_or(1, n);
  if (n < 0 || m < 0) fail(cat("sizes must be non-negative, got ", n, " and ", m));
  return {{checked_shape({n, m}), opt_dtype(c, 2, DType::f32), opt_device(c, 3)}};
}
void run_eye(OpCall& c) {
  const Tensor& out = c.outs[0];
  fill(out, 0);
  visit(out.dtype(), [&](auto t) {
    using T = decltype(t);
    T* p = out.data<T>();
    for (int64_t i = 0; i < std::min(out.size(0), out.size(1)); ++i) store(p[i * out.size(1) + i], 1);
  });
}

// zeros_like / ones_like / empty_like / rand_like / randn_like: "self:T, opts:{dtype:S, device:S}"
std::vector<Meta> infer_like(OpCall& c) {
  Tensor x = c.tensor(0);
  return {{x.sizes(), opt_dtype(c, 1, x.dtype()), c.has(2) ? opt_device(c, 2) : x.device()}};
}

// tensor(data): data is a flat list of numbers with its shape (the Lua side flattens tables)
std::vector<Meta> infer_tensor(OpCall& c) {
  if (!c.has(0) || c.args[0].tag != kDoubles) fail("data expected a number or a nested table of numbers");
  Shape s = sizes_arg(c, 1);
  if (shape_numel(s) != c.args[0].n) fail(cat("data has ", c.args[0].n, " values but shape ", shape_str(s)));
  const double* v = static_cast<const double*>(c.args[0].ptr);
  // as torch.tensor: all booleans -> bool, all integers -> int64, else (and no data) float32
  bool integral = c.args[0].n > 0;
  for (int i = 0; i < c.args[0].n && integral; ++i) integral = scalar_is_integral(v[i]);
  DType d = c.args[0].num != 0 ? DType::b8 : integral ? DType::i64 : DType::f32;  // num: 1 = booleans
  if (c.args[0].str) d = dtype_named(c.args[0].str);  // (the dtypes of tensors in the data: stdlib/binding.lua)
  d = opt_dtype(c, 2, d);
  if (is_integral(d))
    for (int i = 0; i < c.args[0].n; ++i) check_scalar_fits(v[i], d);
  return {{s, d, opt_device(c, 3)}};
}
void run_tensor(OpCall& c) {
  const double* v = static_cast<const double*>(c.args[0].ptr);
  visit(c.outs[0].dtype(), [&](auto t) {
    using T = decltype(t);
    T* p = c.outs[0].data<T>();
    for (int i = 0; i < c.args[0].n; ++i) store(p[i], v[i]);
  });
}

constexpr const char* kOpts = "opts:{dtype:S, device:S}";
std::string with_opts(const char* args) { return cat(args, ", ", kOpts); }

}  // namespace

void register_creation(Registry& r) {
  // schemas live in static storage: the registry keeps const char*
  static const std::string sized = with_opts("size:Is..."), full = with_opts("size:Is, value:N"),
                           arange = with_opts("start:N, stop:N?, step:N?"), linspace = with_opts("start:N, end:N, steps:I"),
                           eye = with_opts("n:I, m:I?"), randint = with_opts("low:I, high:I, size:Is"),
                           like = with_opts("self:T"), tensor = with_opts("data:Data");  // the Lua side adds the shape as a hidden second argument
  const int fn = kNoMethod;
  const int fill = fn | kDeviceAware | kExtern;  // (filled by the eager kernels: no loop lowering)
  r.add(OpDef{"tensor", tensor.c_str(), OpKind::Creation, fn | kExtern, infer_tensor, run_tensor});
  r.add(OpDef{"zeros", sized.c_str(), OpKind::Creation, fill, infer_sized, run_zeros});
  r.add(OpDef{"ones", sized.c_str(), OpKind::Creation, fill, infer_sized, run_ones});
  r.add(OpDef{"empty", sized.c_str(), OpKind::Creation, fill, infer_sized, run_empty});
  r.add(OpDef{"full", full.c_str(), OpKind::Creation, fill, infer_full, run_full});
  r.add(OpDef{"arange", arange.c_str(), OpKind::Creation, fn, infer_arange, run_arange});
  r.add(OpDef{"linspace", linspace.c_str(), OpKind::Creation, fn, infer_linspace, run_linspace});
  r.add(OpDef{"eye", eye.c_str(), OpKind::Creation, fn, infer_eye, run_eye});
  r.add(OpDef{"rand", sized.c_str(), OpKind::Creation, fn | kRandom, infer_float_sized, run_rand});
  r.add(OpDef{"randn", sized.c_str(), OpKind::Creation, fn | kRandom, infer_float_sized, run_randn});
  r.add(OpDef{"randint", randint.c_str(), OpKind::Creation, fn | kRandom, infer_randint, run_randint});
  r.add(OpDef{"zeros_like", like.c_str(), OpKind::Creation, fill, infer_like, run_zeros});
  r.add(OpDef{"ones_like", like.c_str(), OpKind::Creation, fill, infer_like, run_ones});
  r.add(OpDef{"empty_like", like.c_str(), OpKind::Creation, fill, infer_like, run_empty});
}

}  // namespace cr
