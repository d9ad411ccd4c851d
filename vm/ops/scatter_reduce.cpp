// scatter_reduce(self, dim, index, src, reduce[, {include_self = true}]): each src element
// combined into the element of a copy of self its index names along dim, by reduce = "sum",
// "prod", "mean", "amax" or "amin" (PyTorch's; a NaN wins amax / amin; the mean of integers
// rounds down). include_self = false: the positions the index names start from their first
// source value. Index values are 1-based and checked before anything is written (on CUDA by the
// kernels, raising at the next synchronisation: vm/kernels/cuda/scatter_reduce.cuh).
#include <cmath>

#include "vm/kernels/cuda/scatter.hpp"
#include "vm/ops/indexing.hpp"

namespace cr {
namespace {

enum class Reduce { Sum, Prod, Mean, Amax, Amin };

Reduce parse_reduce(const std::string& s) {
  if (s == "sum") return Reduce::Sum;
  if (s == "prod") return Reduce::Prod;
  if (s == "mean") return Reduce::Mean;
  if (s == "amax") return Reduce::Amax;
  if (s == "amin") return Reduce::Amin;
  fail(cat("reduce expected \"sum\", \"prod\", \"mean\", \"amax\" or \"amin\", got \"", s, "\""));
}

struct ScatterReduce {
  Tensor self, index, src;  // index: contiguous int64
  int d = 0;
  Reduce reduce = Reduce::Sum;
  bool include_self = true;
};

ScatterReduce prepare(const OpCall& c) {
  ScatterReduce s{c.tensor(0), index_arg(c, 2), c.tensor(3), 0, parse_reduce(c.str(4)), c.boolean_or(5, true)};
  check_device(s.self, c.tensor(2));
  check_device(s.self, s.src);
  s.d = c.dim(1, s.self.dim());
  if (s.self.dtype() == DType::b8) fail("self expected a numeric tensor, got a bool tensor");
  if (s.src.dtype() != s.self.dtype())
    fail(cat("src expected self's dtype ", dtype_name(s.self.dtype()), ", got ", s.src.describe()));
  const Tensor x = at_least_1d(s.self), idx = at_least_1d(s.index), src = at_least_1d(s.src);
  if (idx.dim() != x.dim() || src.dim() != x.dim())
    fail(cat("index and src expected as many dims as self ", shape_str(s.self.sizes()), ", got ", c.tensor(2).describe(),
             " and ", s.src.describe()));
  for (int k = 0; k < x.dim(); ++k)
    if (idx.size(k) > src.size(k) || (k != s.d && idx.size(k) > x.size(k)))
      fail(cat("index of shape ", shape_str(idx.sizes()), " expected to be no larger than src ", shape_str(src.sizes()),
               " and than self ", shape_str(x.sizes()), " apart from dim ", s.d + 1));
  return s;
}

template <class T> void combine(Reduce r, T& o, const T& v) {
  using C = compute_t<T>;
  const C a = load(o), b = load(v);
  C res = a;
  switch (r) {
    case Reduce::Sum:
    case Reduce::Mean:
      if constexpr (std::is_integral_v<C>) res = wrapping_add(a, b);
      else res = a + b;
      break;
    case Reduce::Prod:
      if constexpr (std::is_integral_v<C>) res = wrapping_mul(a, b);
      else res = a * b;
      break;
    case Reduce::Amax:
    case Reduce::Amin:
      if constexpr (std::is_floating_point_v<C>)
        if (std::isnan(a) || std::isnan(b)) { res = std::isnan(a) ? a : b; break; }
      res = (r == Reduce::Amax) == (b > a) ? b : a;
      break;
  }
  store(o, res);
}

template <class T> void reduce_into(const Tensor& out, const ScatterReduce& s) {
  const Tensor idx = at_least_1d(s.index), src = at_least_1d(s.src), o = at_least_1d(out);
  const int nd = idx.dim();
  const Shape isz = idx.sizes(), ss = src.strides(), os = o.strides();
  std::vector<int64_t> count(size_t(out.numel()), s.include_self ? 1 : 0);
  T* op = out.data<T>();
  const T* sp = src.data<T>();
  const int64_t* ip = idx.data<int64_t>();
  for (int64_t i = 0, n = idx.numel(); i < n; ++i) {
    int64_t rem = i, so = 0, oo = 0;
    for (int k = nd - 1; k >= 0; --k) {
      const int64_t ck = rem % isz[size_t(k)];
      rem /= isz[size_t(k)];
      so += ck * ss[size_t(k)];
      oo += (k == s.d ? ip[i] - 1 : ck) * os[size_t(k)];
    }
    int64_t& seen = count[size_t(oo)];
    if (seen == 0) op[oo] = sp[so];
    else combine(s.reduce, op[oo], sp[so]);
    ++seen;
  }
  if (s.reduce != Reduce::Mean) return;
  for (size_t e = 0; e < count.size(); ++e) {
    if (count[e] <= 1) continue;
    using C = compute_t<T>;
    const C a = load(op[e]), n = C(count[e]);
    if constexpr (std::is_integral_v<C>) store(op[e], C(a / n - ((a % n != 0) && ((a < 0) != (n < 0)))));
    else store(op[e], a / n);
  }
}

std::vector<Meta> infer_scatter_reduce(OpCall& c) {
  ScatterReduce s = prepare(c);
  return {{s.self.sizes(), s.self.dtype(), s.self.device()}};
}

void run_scatter_reduce(OpCall& c) {
  ScatterReduce s = prepare(c);
  const Tensor x = at_least_1d(s.self);
  const std::string what = cat("dim ", s.d + 1, " of size ", x.size(s.d));
  if (!x.device().is_cpu()) {  // (the kernels check the positions)
    static_assert(int(Reduce::Amin) == cuda::kReduceAmin && int(Reduce::Mean) == cuda::kReduceMean);
    copy_into(c.outs[0], s.self);
    return cuda::scatter_reduce(c.ctx, at_least_1d(c.outs[0]), s.d, at_least_1d(s.index), at_least_1d(s.src),
                                int(s.reduce), s.include_self, c.def.name, what);
  }
  check_range(s.index, x.size(s.d), what);
  copy_into(c.outs[0], s.self);
  visit_numeric(s.self.dtype(), [&](auto t) { reduce_into<decltype(t)>(c.outs[0], s); });
}

}  // namespace

void register_scatter_reduce(Registry& r) {
  r.add(OpDef{"scatter_reduce", "self:T, dim:D, index:T, src:T, reduce:S, opts:{include_self:B}", OpKind::Index,
              kValueErrors | kDeviceAware | kExtern, infer_scatter_reduce, run_scatter_reduce});
}

}  // namespace cr
