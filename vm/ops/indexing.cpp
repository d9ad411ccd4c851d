// Indexing ops: index_select, gather, embedding, masked_fill (and masked_fill_).
// Index values are 1-based at the Lua surface; they are range-checked here, before any kernel
// runs, and converted to 0-based offsets inside the kernel. index_select and embedding are
// gathers with an index broadcast along the other dims, so all three share one kernel.
#include <cstring>

#include "vm/cuda/memory.hpp"
#include "vm/devices.hpp"
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

// The index argument as a contiguous int64 tensor (the caller's tensor itself when it is one).
Tensor index_arg(const OpCall& c, int i) {
  Tensor idx = c.tensor(i);
  if (!is_integral(idx.dtype()))
    fail(cat(c.arg_name(i), " ", dtype_list_error("an int32 or int64 tensor", idx.dtype())));
  return contiguous(cast(idx, DType::i64));
}

void check_device(const Tensor& a, const Tensor& b) {
  if (!(a.device() == b.device()))
    fail(cat("expected all tensors on one device, got ", device_name(a.device()), " and ", device_name(b.device())));
}

// Every value of idx (contiguous int64) must be a 1-based position in 1..n.
void check_range(const Tensor& idx, int64_t n, const std::string& what) {
  const int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0, e = idx.numel(); i < e; ++i) {
    if (p[i] >= 1 && p[i] <= n) continue;
    if (n == 0) fail(cat("index ", p[i], " is out of range for ", what, ", which is empty (no index is valid)"));
    fail(cat("index ", p[i], " is out of range for ", what, " (expected 1..", n, ")"));
  }
}

// A rank >= 1 header over t: 0-d tensors act as 1-element vectors, as in PyTorch.
Tensor at_least_1d(const Tensor& t) { return t.dim() ? t : Tensor::view_of(t, {1}, {1}, t.offset()); }

// Unsigned word of the element size: elements are moved, never converted, so one instantiation
// per size serves every dtype.
template <class F> void visit_width(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    default: return f(uint64_t{});
  }
}

// out[c] = x[c with c[d] := index[c] - 1] over out's coordinates c. out is contiguous, index is
// int64 with out's shape (stride 0 where it is broadcast), and its values are already checked.
void gather_into(const Tensor& out, const Tensor& x, int d, const Tensor& index) {
  const int nd = out.dim();
  const int64_t inner = out.size(nd - 1), rows = out.numel() / std::max<int64_t>(inner, 1);
  if (out.numel() == 0) return;
  const Shape xs = x.strides(), is = index.strides(), sizes = out.sizes();
  const bool last = d == nd - 1;
  const int64_t* ip = index.data<int64_t>();
  visit_width(x.itemsize(), [&](auto w) {
    using W = decltype(w);
    const W* xp = reinterpret_cast<const W*>(x.data_bytes());
    W* op = out.data<W>();
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t xo = 0, io = 0, rem = r;
        for (int k = nd - 2; k >= 0; --k) {
          int64_t ck = rem % sizes[size_t(k)];
          rem /= sizes[size_t(k)];
          if (k != d) xo += ck * xs[size_t(k)];
          io += ck * is[size_t(k)];
        }
        W* dst = op + r * inner;
        const int64_t xl = xs[size_t(nd - 1)], il = is[size_t(nd - 1)];
        if (!last && il == 0) {  // one source row (index_select, embedding): a straight copy
          const W* src = xp + xo + (ip[io] - 1) * xs[size_t(d)];
          if (xl == 1) std::memcpy(dst, src, size_t(inner) * sizeof(W));
          else for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * xl];
        } else if (last) {
          for (int64_t j = 0; j < inner; ++j) dst[j] = xp[xo + (ip[io + j * il] - 1) * xl];
        } else {
          for (int64_t j = 0; j < inner; ++j) dst[j] = xp[xo + j * xl + (ip[io + j * il] - 1) * xs[size_t(d)]];
        }
      }
    });
  });
}

// ---- index_select(x, dim, index) -----------------------------------------------------------

struct Select {
  Tensor x, idx;
  int d;
  Shape shape;  // of the result
};

Select prepare_index_select(const OpCall& c) {
  Select s{c.tensor(0), index_arg(c, 2), 0, {}};
  check_device(s.x, c.tensor(2));
  s.d = c.dim(1, s.x.dim());
  if (c.tensor(2).dim() > 1) fail(cat("index expected a 0-d or 1-D tensor, got ", c.tensor(2).describe()));
  s.shape = s.x.sizes();
  if (s.x.dim()) s.shape[size_t(s.d)] = s.idx.numel();
  else if (s.idx.numel() != 1) fail(cat("a 0-d input takes one index, got ", s.idx.numel()));
  return s;
}

std::vector<Meta> infer_index_select(OpCall& c) {
  Select s = prepare_index_select(c);
  return {{s.shape, s.x.dtype(), s.x.device()}};
}

void run_index_select(OpCall& c) {
  Select s = prepare_index_select(c);
  Tensor x = at_least_1d(s.x), out = at_least_1d(c.outs[0]);
  check_range(s.idx, x.size(s.d), cat("dim ", s.d + 1, " of size ", x.size(s.d)));
  Shape is(size_t(out.dim()), 0);  // the index runs along d only
  is[size_t(s.d)] = 1;
  gather_into(out, x, s.d, Tensor::view_of(s.idx, out.sizes(), is, s.idx.offset()));
}

// ---- gather(x, dim, index): out[i][j][k] = x[i][index[i][j][k]][k] (dim 2) -------------------

Select prepare_gather(const OpCall& c) {
  Select s{c.tensor(0), index_arg(c, 2), 0, {}};
  check_device(s.x, c.tensor(2));
  s.d = c.dim(1, s.x.dim());
  Tensor x = at_least_1d(s.x), idx = at_least_1d(s.idx);
  if (x.dim() != idx.dim())
    fail(cat("index expected as many dims as the input ", shape_str(s.x.sizes()), ", got ", shape_str(s.idx.sizes())));
  for (int k = 0; k < x.dim(); ++k)
    if (k != s.d && idx.size(k) > x.size(k))
      fail(cat("index of shape ", shape_str(s.idx.sizes()), " is larger than the input ", shape_str(s.x.sizes()),
               " in dim ", k + 1, " (only dim ", s.d + 1, " may differ)"));
  s.shape = s.idx.sizes();
  return s;
}

std::vector<Meta> infer_gather(OpCall& c) {
  Select s = prepare_gather(c);
  return {{s.shape, s.x.dtype(), s.x.device()}};
}

void run_gather(OpCall& c) {
  Select s = prepare_gather(c);
  Tensor x = at_least_1d(s.x);
  check_range(s.idx, x.size(s.d), cat("dim ", s.d + 1, " of size ", x.size(s.d)));
  gather_into(at_least_1d(c.outs[0]), x, s.d, at_least_1d(s.idx));
}

// ---- embedding(index, weight): rows of weight {n, d}; result index.shape..{d} ----------------

struct Embed {
  Tensor idx, w;
  Shape shape;
};

Embed prepare_embedding(const OpCall& c) {
  Embed e{index_arg(c, 0), c.tensor(1), {}};
  check_device(c.tensor(0), e.w);
  if (e.w.dim() != 2) fail(cat("weight expected a 2-D tensor {rows, features}, got ", e.w.describe()));
  e.shape = e.idx.sizes();
  e.shape.push_back(e.w.size(1));
  return e;
}

std::vector<Meta> infer_embedding(OpCall& c) {
  Embed e = prepare_embedding(c);
  return {{e.shape, e.w.dtype(), e.w.device()}};
}

void run_embedding(OpCall& c) {
  Embed e = prepare_embedding(c);
  check_range(e.idx, e.w.size(0), cat("a weight of ", e.w.size(0), " rows"));
  int64_t n = e.idx.numel();
  Tensor out = Tensor::view_of(c.outs[0], {n, e.w.size(1)}, contiguous_strides({n, e.w.size(1)}), 0);
  gather_into(out, e.w, 0, Tensor::view_of(e.idx, {n, e.w.size(1)}, {1, 0}, e.idx.offset()));
}

// ---- masked_fill(x, mask, value): value where mask is true -----------------------------------

struct Masked {
  Tensor x, mask, value;  // value: 0-d, of x's dtype
  Shape shape;
};

Masked prepare_masked_fill(const OpCall& c) {
  Masked m{c.tensor(0), c.tensor(1), {}, {}};
  check_device(m.x, m.mask);
  if (m.mask.dtype() != DType::b8) fail(cat("mask ", dtype_list_error("a bool tensor", m.mask.dtype())));
  Operand v = operand(c, 2);
  if (v.is_tensor() && v.t.dim() != 0) fail(cat("value expected a number or a 0-d tensor, got ", v.t.describe()));
  // a fresh 0-d tensor, so an in-place fill never reads a value it has already overwritten
  m.value = Tensor::empty({}, m.x.dtype(), m.x.device());
  copy_into(m.value, materialize(v, m.x.dtype()));
  m.shape = broadcast_shapes(m.x.sizes(), m.mask.sizes());
  return m;
}

void masked_fill_into(const Tensor& out, const Masked& m) {
  visit(m.x.dtype(), [&](auto t) {
    using T = decltype(t);
    map<T, T, bool, T>(out, {&m.x, &m.mask, &m.value}, [](auto a, bool k, auto v) { return k ? v : a; });
  });
}

std::vector<Meta> infer_masked_fill(OpCall& c) {
  Masked m = prepare_masked_fill(c);
  return {{m.shape, m.x.dtype(), m.x.device()}};
}

void run_masked_fill(OpCall& c) { masked_fill_into(c.outs[0], prepare_masked_fill(c)); }

// In place: every output element reads only its own input element, so self can be both.
void run_masked_fill_(OpCall& c) {
  writable(c, 0);  // rejects expanded views
  Masked m = prepare_masked_fill(c);
  if (m.shape != m.x.sizes())
    fail(cat("mask of shape ", shape_str(m.mask.sizes()), " does not broadcast to the shape ", shape_str(m.x.sizes()),
             " of the tensor filled in place"));
  if (!m.x.device().is_cpu()) {  // CUDA: masked_fill's generated kernel, then a device copy into x
    copy_into(m.x, dispatch(c.ctx, Registry::get().index_of("masked_fill"), c.args, c.nargs).at(0));
    return;
  }
  if (m.mask.storage() == m.x.storage()) {  // the mask may alias what is written: read it first
    Tensor copy = Tensor::empty(m.mask.sizes(), DType::b8, m.mask.device());
    copy_into(copy, m.mask);
    m.mask = copy;
  }
  masked_fill_into(m.x, m);
}

}  // namespace

void register_indexing(Registry& r) {
  // (generated kernels gather too: jit/lower.cpp; on CUDA they check the positions on the device)
  r.add(with_loop(OpDef{"index_select", "self:T, dim:D, index:T", OpKind::Index, kValueErrors, infer_index_select, run_index_select},
                  LoopForm::IndexSelect));
  r.add(with_loop(OpDef{"gather", "self:T, dim:D, index:T", OpKind::Index, kValueErrors, infer_gather, run_gather},
                  LoopForm::Gather));
  r.add(with_loop(OpDef{"embedding", "input:T, weight:T", OpKind::Index, kNoMethod | kValueErrors, infer_embedding, run_embedding},
                  LoopForm::Embedding));
  r.add(with_loop(OpDef{"masked_fill", "self:T, mask:T, value:TN", OpKind::Index, 0, infer_masked_fill, run_masked_fill},
                  LoopForm::MaskedFill));
  r.add(OpDef{"masked_fill_", "self:T, mask:T, value:TN", OpKind::Index, kReturnsSelf | kNoFunction | kDeviceAware,
              nullptr, run_masked_fill_});
}

}  // namespace cr
