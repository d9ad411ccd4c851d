// Convolution: im2col (F.unfold), col2im (F.fold) and conv2d, the ops conv1d / conv2d /
// conv_transpose2d and the pools of stdlib/functional_conv.lua are built on.
//   im2col(x {N, C, H, W}) -> cols {N, C*kh*kw, L}: row (c, i, j) holds x[c] read at the window
//     offset (i, j) of each of the L = Ho*Wo output positions (zero outside the padded input);
//   col2im is its adjoint: each column entry is added back where it was read from;
//   conv2d(x, w {Cout, Cin/groups, kh, kw}) = per sample and group, W_g {Cout/g, Cin/g*kh*kw} @
//     cols_g, on the BLAS core of vm/ops/linalg.cpp (bias written first, the product added to it).
// The unbatched forms ({C, H, W}, {C*kh*kw, L}) are accepted as PyTorch does. CUDA tensors run on
// host copies (the dispatcher's fallback for ops without CUDA kernels), conv2d through cuDNN
// (vm/ops/conv_cuda.cpp); without cuDNN F.conv2d and the pools give them a device path instead:
// a gather of the windows and cuBLAS (stdlib/functional_conv.lua).
#include <algorithm>
#include <cstring>

#include "vm/ops/conv.hpp"
#include "vm/ops/linalg.hpp"
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

// The window geometry of one 2-D sliding-block op.
struct Geo {
  int64_t kh = 1, kw = 1, dh = 1, dw = 1, ph = 0, pw = 0, sh = 1, sw = 1;
  int64_t H = 0, W = 0, Ho = 0, Wo = 0;
  int64_t kk() const { return kh * kw; }
  int64_t L() const { return Ho * Wo; }
};

// A 1- or 2-element integer list argument as (h, w); absent: dflt.
void pair(const OpCall& c, int i, int64_t dflt, int64_t min, int64_t* h, int64_t* w) {
  *h = *w = dflt;
  if (!c.has(i)) return;
  const std::vector<int64_t> v = c.ints(i);
  if (v.size() != 1 && v.size() != 2)
    fail(cat(c.arg_name(i), " expected one integer or a list of 2, got a list of ", v.size()));
  *h = v[0];
  *w = v.back();
  if (*h < min || *w < min)
    fail(cat(c.arg_name(i), " expected values >= ", min, ", got {", *h, ",", *w, "}"));
}

// Reads kernel_size, dilation, padding, stride from args k, k+1, k+2, k+3 (F.unfold's order).
Geo window(const OpCall& c, int k) {
  Geo g;
  if (!c.has(k)) fail(cat(c.arg_name(k), " expected an integer or a list of 2, got nothing"));
  pair(c, k, 1, 1, &g.kh, &g.kw);
  pair(c, k + 1, 1, 1, &g.dh, &g.dw);
  pair(c, k + 2, 0, 0, &g.ph, &g.pw);
  pair(c, k + 3, 1, 1, &g.sh, &g.sw);
  return g;
}

// (the products the kernels index with - kh * kw, Ho * Wo, H * W - must fit in int64)
void set_spatial(Geo& g, int64_t H, int64_t W) {
  g.H = H;
  g.W = W;
  g.Ho = conv_blocks(H, g.kh, g.dh, g.ph, g.sh, "height");
  g.Wo = conv_blocks(W, g.kw, g.dw, g.pw, g.sw, "width");
  int64_t p;
  if (__builtin_mul_overflow(g.kh, g.kw, &p)) fail(cat("kernel_size {", g.kh, ",", g.kw, "} is too large"));
  if (__builtin_mul_overflow(H, W, &p)) fail(cat("the spatial size {", H, ",", W, "} is too large"));
  if (__builtin_mul_overflow(g.Ho, g.Wo, &p))
    fail(cat("{", g.Ho, ",", g.Wo, "} sliding blocks (padding {", g.ph, ",", g.pw, "}, stride {", g.sh, ",", g.sw,
             "}) are too many"));
}

// t with a leading batch dim of 1 (the unbatched forms), a view.
Tensor batch_of_one(const Tensor& t) {
  Shape sizes = t.sizes(), strides = t.strides();
  sizes.insert(sizes.begin(), 1);
  strides.insert(strides.begin(), t.dim() ? t.size(0) * t.stride(0) : 1);
  return Tensor::view_of(t, sizes, strides, t.offset());
}

void check_floating(const Tensor& x, const char* role) {
  if (!is_floating(x.dtype())) fail(cat(role, " ", dtype_list_error("a floating tensor", x.dtype())));
}

// ---- kernels (contiguous operands, one sample) ----------------------------------------------

// cols rows [r0, r1) of one sample: row r = (c * kh + i) * kw + j.
template <class T> void im2col_rows(const T* x, const Geo& g, T* cols, int64_t r0, int64_t r1) {
  T zero;
  store(zero, 0.0);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t c = r / g.kk(), i = r / g.kw % g.kh, j = r % g.kw;
    const T* plane = x + c * g.H * g.W;
    T* row = cols + r * g.L();
    for (int64_t oh = 0; oh < g.Ho; ++oh) {
      const int64_t ih = oh * g.sh - g.ph + i * g.dh;
      T* out = row + oh * g.Wo;
      if (ih < 0 || ih >= g.H) {
        std::fill(out, out + g.Wo, zero);
        continue;
      }
      const T* in = plane + ih * g.W;
      for (int64_t ow = 0; ow < g.Wo; ++ow) {
        const int64_t iw = ow * g.sw - g.pw + j * g.dw;
        out[ow] = iw >= 0 && iw < g.W ? in[iw] : zero;
      }
    }
  }
}

// Channels [c0, c1) of one sample's x = col2im(cols), summed in the compute type.
template <class T> void col2im_channels(const T* cols, const Geo& g, T* x, int64_t c0, int64_t c1) {
  std::vector<compute_t<T>> acc(size_t(g.H * g.W));
  for (int64_t c = c0; c < c1; ++c) {
    std::fill(acc.begin(), acc.end(), compute_t<T>(0));
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = cols + ((c * g.kh + i) * g.kw + j) * g.L();
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          for (int64_t ow = 0; ow < g.Wo; ++ow) {
            const int64_t iw = ow * g.sw - g.pw + j * g.dw;
            if (iw >= 0 && iw < g.W) acc[size_t(ih * g.W + iw)] += load(row[oh * g.Wo + ow]);
          }
        }
      }
    T* plane = x + c * g.H * g.W;
    for (int64_t k = 0; k < g.H * g.W; ++k) store(plane[k], acc[size_t(k)]);
  }
}

// Runs fn(n, lo, hi) over the samples, with [lo, hi) the sample's rows split across the pool
// when samples are few, else whole samples side by side.
void per_sample(int64_t N, int64_t rows, int64_t row_work, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, row_work));
  if (N >= num_threads()) {
    parallel_for(N, std::max<int64_t>(1, grain / std::max<int64_t>(1, rows)), [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) fn(n, 0, rows);
    });
    return;
  }
  for (int64_t n = 0; n < N; ++n) parallel_for(rows, grain, [&](int64_t r0, int64_t r1) { fn(n, r0, r1); });
}

// Argument 0 of im2col / col2im: a tensor of `dims` dims or a batch of them (`shapes` names both),
// floating; an unbatched one comes as a batch of one
struct Input {
  Tensor t;
  bool batched;
};
Input batched_input(const OpCall& c, int dims, const char* shapes) {
  Tensor t = c.tensor(0);
  if (t.dim() != dims && t.dim() != dims + 1) fail(cat("input expected a ", shapes, " tensor, got ", t.describe()));
  check_floating(t, "input");
  return {t.dim() == dims ? batch_of_one(t) : t, t.dim() == dims + 1};
}

// ---- im2col(input, kernel_size, dilation, padding, stride) ---------------------------------------

struct Unfold {
  Tensor x;  // {N, C, H, W}
  Geo g;
  bool batched;
};

Unfold prepare_im2col(const OpCall& c) {
  const Input in = batched_input(c, 3, "3-D {C, H, W} or 4-D {N, C, H, W}");
  Unfold u{in.t, window(c, 1), in.batched};
  set_spatial(u.g, u.x.size(2), u.x.size(3));
  return u;
}

std::vector<Meta> infer_im2col(OpCall& c) {
  Unfold u = prepare_im2col(c);
  int64_t rows;
  if (__builtin_mul_overflow(u.x.size(1), u.g.kk(), &rows))
    fail(cat("kernel_size {", u.g.kh, ",", u.g.kw, "} over ", u.x.size(1), " channels is too large"));
  Shape s{rows, u.g.L()};
  if (u.batched) s.insert(s.begin(), u.x.size(0));
  return {{s, u.x.dtype(), u.x.device()}};
}

void run_im2col(OpCall& c) {
  Unfold u = prepare_im2col(c);
  const Tensor x = contiguous(u.x);
  const int64_t N = x.size(0), C = x.size(1), rows = C * u.g.kk(), L = u.g.L();
  visit_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* out = c.outs[0].data<T>();
    per_sample(N, rows, L, [&](int64_t n, int64_t r0, int64_t r1) {
      im2col_rows(xp + n * C * u.g.H * u.g.W, u.g, out + n * rows * L, r0, r1);
    });
  });
}

// ---- col2im(input, output_size, kernel_size, dilation, padding, stride) --------------------------

struct Fold {
  Tensor cols;  // {N, C*kk, L}
  Geo g;
  int64_t C;
  bool batched;
};

Fold prepare_col2im(const OpCall& c) {
  const Input in = batched_input(c, 2, "2-D {C*kh*kw, L} or 3-D {N, C*kh*kw, L}");
  Fold f{in.t, window(c, 2), 0, in.batched};
  const Tensor t = c.tensor(0);  // (as given, for the messages)
  const std::vector<int64_t> os = c.ints(1);
  if (os.size() != 1 && os.size() != 2) fail(cat("output_size expected one integer or a list of 2, got a list of ", os.size()));
  if (os[0] < 1 || os.back() < 1) fail(cat("output_size expected positive sizes, got {", os[0], ",", os.back(), "}"));
  set_spatial(f.g, os[0], os.back());
  const int64_t rows = f.cols.size(1);
  if (rows % f.g.kk() != 0)
    fail(cat("expected size of input's dim ", t.dim() - 1, " to be divisible by the product of kernel_size (", f.g.kk(), "), got ", t.describe()));
  f.C = rows / f.g.kk();
  if (f.cols.size(2) != f.g.L())
    fail(cat("expected input's last dim to be the ", f.g.L(), " sliding blocks of output_size {", f.g.H, ",", f.g.W,
             "} (", f.g.Ho, " x ", f.g.Wo, "), got ", t.describe()));
  return f;
}

std::vector<Meta> infer_col2im(OpCall& c) {
  Fold f = prepare_col2im(c);
  Shape s{f.C, f.g.H, f.g.W};
  if (f.batched) s.insert(s.begin(), f.cols.size(0));
  return {{s, f.cols.dtype(), f.cols.device()}};
}

void run_col2im(OpCall& c) {
  Fold f = prepare_col2im(c);
  const Tensor cols = contiguous(f.cols);
  const int64_t N = cols.size(0), plane = f.g.H * f.g.W;
  visit_floating(cols.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* cp = cols.data<T>();
    T* out = c.outs[0].data<T>();
    per_sample(N, f.C, f.g.kk() * f.g.L(), [&](int64_t n, int64_t c0, int64_t c1) {
      col2im_channels(cp + n * f.C * f.g.kk() * f.g.L(), f.g, out + n * f.C * plane, c0, c1);
    });
  });
}

// ---- conv2d(input, weight, bias, stride, padding, dilation, groups) -----------------------------

struct Conv {
  Tensor x, w, bias;  // x {N, Cin, H, W}
  Geo g;
  int64_t groups;
  bool batched;
};

Conv prepare_conv(const OpCall& c) {
  Tensor x = c.tensor(0), w = c.tensor(1);
  if (x.dim() != 3 && x.dim() != 4) fail(cat("input expected a 3-D {C, H, W} or 4-D {N, C, H, W} tensor, got ", x.describe()));
  if (w.dim() != 4) fail(cat("weight expected a 4-D tensor {out_channels, in_channels / groups, kh, kw}, got ", w.describe()));
  check_floating(x, "input");
  if (w.dtype() != x.dtype() || w.device() != x.device())
    fail(cat("weight expected the input's dtype and device (", x.describe(), " on ", device_name(x.device()), "), got ", w.describe(),
             " on ", device_name(w.device())));
  const ConvParams p = conv_params(c);
  Conv v{x.dim() == 3 ? batch_of_one(x) : x, w, Tensor(), Geo{}, p.groups, x.dim() == 4};
  const int64_t cout = w.size(0), cin = v.x.size(1);
  if (cout % v.groups != 0) fail(cat("out_channels (", cout, ") expected to be divisible by groups (", v.groups, ")"));
  if (w.size(1) * v.groups != cin)
    fail(cat("expected input ", x.describe(), " to have ", w.size(1) * v.groups, " channels (weight ", shape_str(w.sizes()),
             ", groups ", v.groups, "), got ", cin, " channels"));
  if (c.has(2)) {
    v.bias = c.tensor(2);
    if (v.bias.dim() != 1 || v.bias.size(0) != cout || v.bias.dtype() != x.dtype() || v.bias.device() != x.device())
      fail(cat("bias expected a 1-D tensor of ", cout, " elements of the input's dtype and device, got ", v.bias.describe()));
  }
  v.g.kh = w.size(2);
  v.g.kw = w.size(3);
  v.g.sh = p.sh, v.g.sw = p.sw, v.g.ph = p.ph, v.g.pw = p.pw, v.g.dh = p.dh, v.g.dw = p.dw;
  set_spatial(v.g, v.x.size(2), v.x.size(3));
  return v;
}

std::vector<Meta> infer_conv2d(OpCall& c) {
  Conv v = prepare_conv(c);
  Shape s{v.w.size(0), v.g.Ho, v.g.Wo};
  if (v.batched) s.insert(s.begin(), v.x.size(0));
  return {{s, v.x.dtype(), v.x.device()}};
}

// A contiguous 2-D view {rows, cols} of t's storage from element `at`.
Tensor matrix(const Tensor& t, int64_t rows, int64_t cols, int64_t at) {
  return Tensor::view_of(t, {rows, cols}, {cols, 1}, t.offset() + at);
}

// Sample n of the convolution: out[n] = bias + W_g @ cols_g for each group (cols undefined: a
// 1x1 kernel of stride 1 without padding reads x itself).
template <class T> void conv_sample(const Conv& v, const Tensor& x, const Tensor& w, const T* bias, const Tensor& out,
                                    Tensor& cols, int64_t n) {
  const Geo& g = v.g;
  const int64_t cin = x.size(1), cout = w.size(0), L = g.L(), G = v.groups;
  const int64_t cog = cout / G, kg = cin / G * g.kk();
  const bool direct = !cols.defined();
  const int64_t xoff = n * cin * g.H * g.W;
  if (!direct)
    parallel_for(cin * g.kk(), std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, L)), [&](int64_t r0, int64_t r1) {
      im2col_rows(x.data<T>() + xoff, g, cols.data<T>(), r0, r1);
    });
  T* o = out.data<T>() + n * cout * L;
  if (bias)
    for (int64_t co = 0; co < cout; ++co) std::fill(o + co * L, o + (co + 1) * L, bias[co]);
  for (int64_t gi = 0; gi < G; ++gi)
    matmul_into(matrix(out, cog, L, (n * cout + gi * cog) * L), matrix(w, cog, kg, gi * cog * kg),
                direct ? matrix(x, kg, L, xoff + gi * kg * L) : matrix(cols, kg, L, gi * kg * L), bias != nullptr);
}

void run_conv2d(OpCall& c) {
  Conv v = prepare_conv(c);
  const Geo& vg = v.g;
  if (!v.x.device().is_cpu())
    return conv2d_cuda(c, v.x, v.w, v.bias, {vg.sh, vg.sw, vg.ph, vg.pw, vg.dh, vg.dw, v.groups});
  const Tensor x = contiguous(v.x), w = contiguous(v.w), bias = v.bias.defined() ? contiguous(v.bias) : Tensor();
  const Tensor& out = c.outs[0];
  const Geo& g = v.g;
  const bool direct = g.kk() == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;  // cols = x itself
  auto buffer = [&] { return direct ? Tensor() : Tensor::empty({x.size(1) * g.kk(), g.L()}, x.dtype()); };
  const int64_t N = x.size(0), rows = x.size(1) * v.g.kk(), work = rows * v.g.L() * w.size(0) / v.groups;
  if (out.numel() == 0) return;
  visit_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* bp = bias.defined() ? bias.data<T>() : nullptr;
    // few samples or big ones: one at a time, each product split by the BLAS core; else whole
    // samples side by side (the products then run on one thread each)
    if (N < num_threads() || work >= int64_t(1) << 22) {
      Tensor cols = buffer();
      for (int64_t n = 0; n < N; ++n) conv_sample<T>(v, x, w, bp, out, cols, n);
      return;
    }
    parallel_for(N, std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(1, work)), [&](int64_t n0, int64_t n1) {
      Tensor cols = buffer();
      for (int64_t n = n0; n < n1; ++n) conv_sample<T>(v, x, w, bp, out, cols, n);
    });
  });
}

// ---- conv2d's gradients on the CPU (_conv2d_input_grad / _conv2d_weight_grad; CUDA: cuDNN) ----

// W_g^T (or a column block's transpose): the {cols, rows} transposed view of the row-major
// {rows, cols} matrix at element `at` of t.
Tensor transposed(const Tensor& t, int64_t rows, int64_t cols, int64_t at) {
  return Tensor::view_of(t, {cols, rows}, {1, cols}, t.offset() + at);
}

// dX[n] = col2im(W_g^T @ dY_g[n]) for each group.
template <class T> void input_grad_cpu(const Tensor& gy, const Tensor& w, const Tensor& dx, const Geo& g, int64_t G) {
  const int64_t N = dx.size(0), cin = dx.size(1), cout = w.size(0), cog = cout / G, kg = cin / G * g.kk(), L = g.L();
  Tensor cols = Tensor::empty({cin * g.kk(), L}, dx.dtype());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t gi = 0; gi < G; ++gi)
      matmul_into(matrix(cols, kg, L, gi * kg * L), transposed(w, cog, kg, gi * cog * kg),
                  matrix(gy, cog, L, (n * cout + gi * cog) * L), false);
    T* plane = dx.data<T>() + n * cin * g.H * g.W;
    parallel_for(cin, 1, [&](int64_t c0, int64_t c1) { col2im_channels(cols.data<T>(), g, plane, c0, c1); });
  }
}

// dW_g = the sum over samples of dY_g[n] @ im2col(X[n])_g^T.
template <class T> void weight_grad_cpu(const Tensor& gy, const Tensor& x, const Tensor& dw, const Geo& g, int64_t G) {
  const int64_t N = x.size(0), cin = x.size(1), cout = dw.size(0), cog = cout / G, kg = cin / G * g.kk(), L = g.L();
  Tensor cols = Tensor::empty({cin * g.kk(), L}, x.dtype());
  for (int64_t n = 0; n < N; ++n) {
    parallel_for(cin * g.kk(), std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, L)), [&](int64_t r0, int64_t r1) {
      im2col_rows(x.data<T>() + n * cin * g.H * g.W, g, cols.data<T>(), r0, r1);
    });
    for (int64_t gi = 0; gi < G; ++gi)
      matmul_into(matrix(dw, cog, kg, gi * cog * kg), matrix(gy, cog, L, (n * cout + gi * cog) * L),
                  transposed(cols, kg, L, gi * kg * L), n > 0);
  }
}

}  // namespace

void conv2d_grad_cpu(const Tensor& gyin, const Tensor& other, const Tensor& out, bool input_grad, const ConvParams& p) {
  const Tensor gy = contiguous(gyin), o = contiguous(other);
  const Tensor& w = input_grad ? o : out;
  const Tensor& x = input_grad ? out : o;
  Geo g{w.size(2), w.size(3), p.dh, p.dw, p.ph, p.pw, p.sh, p.sw};
  set_spatial(g, x.size(2), x.size(3));
  if (out.numel() == 0) return;
  if (gy.numel() == 0 || o.numel() == 0) return fill(out, 0);  // an empty sum
  visit_floating(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (input_grad) input_grad_cpu<T>(gy, w, out, g, p.groups);
    else weight_grad_cpu<T>(gy, x, out, g, p.groups);
  });
}

ConvParams conv_params(const OpCall& c) {
  ConvParams p;
  pair(c, 3, 1, 1, &p.sh, &p.sw);
  pair(c, 4, 0, 0, &p.ph, &p.pw);
  pair(c, 5, 1, 1, &p.dh, &p.dw);
  p.groups = c.integer_or(6, 1);
  if (p.groups < 1) fail(cat("groups expected a positive integer, got ", p.groups));
  return p;
}

int64_t conv_blocks(int64_t n, int64_t k, int64_t d, int64_t p, int64_t s, const char* what) {
  int64_t span, avail;
  if (__builtin_mul_overflow(d, k - 1, &span) || __builtin_add_overflow(span, 1, &span) ||
      __builtin_mul_overflow(p, 2, &avail) || __builtin_add_overflow(n, avail, &avail))
    fail(cat("the ", what, " (", n, "), kernel (", k, "), dilation (", d, ") and padding (", p, ") are too large"));
  if (avail < span)
    fail(cat("the padded input ", what, " (", n, " + 2 * ", p, ") is smaller than the dilated kernel (", span, ")"));
  return (avail - span) / s + 1;
}

void register_conv(Registry& r) {
  r.add(OpDef{"im2col", "input:T, kernel_size:Is, dilation:Is?, padding:Is?, stride:Is?", OpKind::Other, kNoMethod | kExtern,
              infer_im2col, run_im2col});
  r.add(OpDef{"col2im", "input:T, output_size:Is, kernel_size:Is, dilation:Is?, padding:Is?, stride:Is?", OpKind::Other,
              kNoMethod | kExtern, infer_col2im, run_col2im});
  // (CUDA: cuDNN, vm/ops/conv_cuda.cpp)
  r.add(OpDef{"conv2d", "input:T, weight:T, bias:T?, stride:Is?, padding:Is?, dilation:Is?, groups:I?", OpKind::Other,
              kNoMethod | kDeviceAware | kExtern, infer_conv2d, run_conv2d});
  r.set_cast({"conv2d"}, CastPolicy::Lower);  // autocast: PyTorch's conv2d is in the lower-precision list
  r.set_cast({"conv2d"}, CastPolicy::Lower, true);
  register_conv_cuda(r);
}

}  // namespace cr
