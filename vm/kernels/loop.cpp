#include "vm/kernels/loop.hpp"

#include "vm/devices.hpp"

#include <algorithm>

namespace cr {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) fail(cat("shapes ", shape_str(a), " and ", shape_str(b), " cannot be broadcast"));
    r[i] = x == 1 ? y : x;
  }
  return r;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 0, off = to.size() - from.size(); i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[off + i]) return false;
  return true;
}

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape st(shape.size(), 0);
  int off = int(shape.size()) - t.dim();
  if (off < 0) fail(cat("cannot broadcast ", t.describe(), " to shape ", shape_str(shape)));
  for (int d = 0; d < t.dim(); ++d) {
    int64_t s = t.size(d);
    if (s == shape[size_t(d + off)]) st[size_t(d + off)] = s == 1 ? 0 : t.stride(d);
    else if (s != 1) fail(cat("cannot broadcast ", t.describe(), " to shape ", shape_str(shape)));
  }
  return st;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  if (!dst.device().is_cpu() || !src.device().is_cpu()) return copy_across(dst, src);
  visit(dst.dtype(), [&](auto o) {
    visit(src.dtype(), [&](auto i) {
      using TO = decltype(o);
      using TI = decltype(i);
      map<TO, TI>(dst, {&src}, [](auto v) { return v; });
    });
  });
}

Tensor cast(const Tensor& src, DType dtype) {
  if (src.dtype() == dtype) return src;
  Tensor out = Tensor::empty(src.sizes(), dtype, src.device());
  copy_into(out, src);
  return out;
}

Tensor contiguous(const Tensor& src) {
  if (src.is_contiguous()) return src;
  Tensor out = Tensor::empty(src.sizes(), src.dtype(), src.device());
  copy_into(out, src);
  return out;
}

// An integer-typed destination must be able to hold v (converting an out-of-range double to an
// integer is undefined behaviour in C++); PyTorch raises the same way.
static void check_fits(DType d, double v) {
  if (!is_integral(d)) return;
  double lo = d == DType::i32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = d == DType::i32 ? 2147483648.0 : 9223372036854775808.0;
  if (!(v >= lo && v < hi)) fail(cat("value ", v, " cannot be converted to ", dtype_name(d), " without overflow"));
}

void fill(const Tensor& dst, double v) {
  check_fits(dst.dtype(), v);
  if (!dst.device().is_cpu()) return fill_across(dst, v);
  visit(dst.dtype(), [&](auto o) {
    using TO = decltype(o);
    compute_t<TO> c = static_cast<compute_t<TO>>(v);
    map<TO>(dst, {}, [c]() { return c; });
  });
}

Tensor scalar_tensor(double v, DType dtype) {
  Tensor t = Tensor::empty({}, dtype);
  fill(t, v);
  return t;
}

}  // namespace cr
