// View ops: view, reshape, transpose, permute, t, unsqueeze, squeeze, expand, flatten, narrow,
// select, slice, as_strided. Each returns a new tensor header over the input's storage (new sizes, strides
// and offset), so writes through a view reach the base. reshape and flatten copy only when no
// strides can express the result (as PyTorch's reshape). Dims and indices are 1-based at the
// Lua boundary and converted here (c.dim() for dims, by hand for index values).
#include <algorithm>
#include <optional>

#include "vm/ops/operands.hpp"

namespace cr {
namespace {

void push_view(OpCall& c, const Tensor& x, const Shape& sizes, const Shape& strides, int64_t offset) {
  // checked here too because view_of takes a storage reference before it validates the shape
  if (sizes.size() > size_t(kMaxDims)) fail(cat("tensors have at most ", kMaxDims, " dimensions, got ", sizes.size()));
  c.outs.push_back(Tensor::view_of(x, sizes, strides, offset));
}
void push_same(OpCall& c, const Tensor& x) { push_view(c, x, x.sizes(), x.strides(), x.offset()); }

void require_dims(const Tensor& x) {
  if (x.dim() == 0) fail("expected a tensor with at least 1 dim, got a 0-d tensor");
}

// ---- view / reshape --------------------------------------------------------------------------

// The requested shape with its one -1 resolved against numel.
Shape infer_size(Shape s, int64_t numel) {
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (inferred >= 0) fail(cat("only one size may be -1, got shape ", shape_str(s)));
      inferred = int(i);
    } else if (s[i] < 0) {
      fail(cat("sizes must be non-negative (or -1 for one inferred size), got shape ", shape_str(s)));
    } else if (__builtin_mul_overflow(known, s[i], &known)) {
      fail(cat("shape ", shape_str(s), " has too many elements"));
    }
  }
  if (inferred >= 0) {
    if (known == 0)
      fail(cat("shape ", shape_str(s), " is ambiguous for a tensor of ", numel,
               " elements: the -1 could be any size next to a size 0"));
    if (numel % known != 0) fail(cat("shape ", shape_str(s), " is invalid for a tensor of ", numel, " elements"));
    s[size_t(inferred)] = numel / known;
  } else if (known != numel) {
    fail(cat("shape ", shape_str(s), " is invalid for a tensor of ", numel, " elements"));
  }
  return s;
}

// Strides that let `sizes` view memory laid out as (old_sizes, old_strides), or nothing when a
// new dim would have to span two non-contiguous runs. PyTorch's computeStride: walk the old dims
// from the innermost, grouping the ones that are contiguous with each other into chunks, and
// require every new dim to fall inside one chunk.
std::optional<Shape> view_strides(const Shape& old_sizes, const Shape& old_strides, const Shape& sizes) {
  const int nd = int(sizes.size());
  Shape st(sizes.size(), 1);
  if (old_sizes.empty()) return st;  // a 0-d tensor: any shape of one element
  if (shape_numel(old_sizes) == 0) {
    if (old_sizes == sizes) return old_strides;
    return contiguous_strides(sizes);  // no element is ever addressed
  }
  int view_d = nd - 1;
  int64_t chunk_stride = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int d = int(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[size_t(d)];
    bool chunk_ends = d == 0 || (old_sizes[size_t(d - 1)] != 1 && old_strides[size_t(d - 1)] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || sizes[size_t(view_d)] == 1)) {
      st[size_t(view_d)] = view_numel * chunk_stride;
      view_numel *= sizes[size_t(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = old_strides[size_t(d - 1)];
      tensor_numel = view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}

void run_view(OpCall& c) {
  Tensor x = c.tensor(0);
  Shape sizes = infer_size(c.ints(1), x.numel());
  std::optional<Shape> st = view_strides(x.sizes(), x.strides(), sizes);
  if (!st)
    fail(cat("view size ", shape_str(sizes), " is not compatible with input tensor's size ", shape_str(x.sizes()),
             " and stride ", shape_str(x.strides()),
             " (at least one dim spans across two contiguous subspaces); use reshape(...) instead"));
  push_view(c, x, sizes, *st, x.offset());
}

// A view with `sizes` when strides allow it, else a contiguous copy of x in that shape.
void push_reshaped(OpCall& c, const Tensor& x, const Shape& sizes) {
  if (std::optional<Shape> st = view_strides(x.sizes(), x.strides(), sizes)) {
    push_view(c, x, sizes, *st, x.offset());
    return;
  }
  // a captured value whose layout is being derived has no memory to copy (vm/graph/shapes.cpp),
  // unless a phantom trace asks for its copy's layout only
  if (!x.storage()->data && x.numel() > 0 && !phantom_dispatch()) fail("cannot derive the layout of a copying reshape");
  Tensor copy = phantom_dispatch() ? phantom_tensor(x.sizes(), x.dtype(), x.device()) : contiguous(x);
  push_view(c, copy, sizes, contiguous_strides(sizes), copy.offset());
}

void run_reshape(OpCall& c) {
  Tensor x = c.tensor(0);
  push_reshaped(c, x, infer_size(c.ints(1), x.numel()));
}

// flatten([start, end]): dims start..end (inclusive, default all) merged into one
void run_flatten(OpCall& c) {
  Tensor x = c.tensor(0);
  const int n = x.dim();
  int s = c.has(1) ? c.dim(1, n) : 0;
  int e = c.has(2) ? c.dim(2, n) : std::max(n - 1, 0);
  if (n == 0) {  // PyTorch: a 0-d tensor flattens to one element
    push_view(c, x, {1}, {1}, x.offset());
    return;
  }
  if (s > e) fail(cat("start dim ", s + 1, " comes after end dim ", e + 1, " (dims of a ", n, "-d tensor)"));
  if (s == e) return push_same(c, x);
  Shape old = x.sizes(), sizes(old.begin(), old.begin() + s);
  int64_t merged = 1;
  for (int d = s; d <= e; ++d) merged *= old[size_t(d)];
  sizes.push_back(merged);
  sizes.insert(sizes.end(), old.begin() + e + 1, old.end());
  push_reshaped(c, x, sizes);
}

// ---- dim rearrangements -----------------------------------------------------------------------

void run_transpose(OpCall& c) {
  Tensor x = c.tensor(0);
  const int n = x.dim();
  int a = c.dim(1, n), b = c.dim(2, n);
  Shape sizes = x.sizes(), st = x.strides();
  if (n > 0) {  // a 0-d tensor accepts dims 1 / -1 and stays as it is
    std::swap(sizes[size_t(a)], sizes[size_t(b)]);
    std::swap(st[size_t(a)], st[size_t(b)]);
  }
  push_view(c, x, sizes, st, x.offset());
}

void run_permute(OpCall& c) {
  Tensor x = c.tensor(0);
  const int n = x.dim();
  std::vector<int64_t> req = c.ints(1);
  if (int(req.size()) != n)
    fail(cat("dims ", shape_str(req), " are not a permutation of the ", n, " dims of a ", n, "-d tensor"));
  std::vector<int> perm = c.dims(1, n);  // range and duplicates checked
  Shape sizes, st;
  for (int d : perm) {
    sizes.push_back(x.size(d));
    st.push_back(x.stride(d));
  }
  push_view(c, x, sizes, st, x.offset());
}

// t(): transpose of a 2-d tensor; 0-d and 1-d tensors come back unchanged (as PyTorch)
void run_t(OpCall& c) {
  Tensor x = c.tensor(0);
  if (x.dim() > 2)
    fail(cat("expected a tensor with at most 2 dims, got a ", x.dim(), "-d tensor (use transpose or permute)"));
  if (x.dim() < 2) return push_same(c, x);
  push_view(c, x, {x.size(1), x.size(0)}, {x.stride(1), x.stride(0)}, x.offset());
}

// unsqueeze(d): a size-1 dim inserted so that it becomes dim d (1..ndim+1, -1 appends)
void run_unsqueeze(OpCall& c) {
  Tensor x = c.tensor(0);
  const int n = x.dim();
  const int64_t given = c.integer(1);
  if (given == 0 || given > n + 1 || given < -(n + 1))
    fail(cat("dim ", given, " is out of range for inserting a dim into a ", n, "-d tensor (expected 1..", n + 1, " or -",
             n + 1, "..-1)"));
  const int d = int(given > 0 ? given - 1 : given + n + 1);
  Shape sizes = x.sizes(), st = x.strides();
  int64_t stride = d < n ? sizes[size_t(d)] * st[size_t(d)] : 1;
  sizes.insert(sizes.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  push_view(c, x, sizes, st, x.offset());
}

// squeeze([d]): size-1 dims removed: all of them, or those listed that have size 1 (others stay)
void run_squeeze(OpCall& c) {
  Tensor x = c.tensor(0);
  const int n = x.dim();
  std::vector<int> dims = c.dims(1, n);  // no dim -> all dims
  if (n == 0) return push_same(c, x);
  std::vector<bool> drop(size_t(n), false);
  for (int d : dims) drop[size_t(d)] = x.size(d) == 1;
  Shape sizes, st;
  for (int d = 0; d < n; ++d) {
    if (drop[size_t(d)]) continue;
    sizes.push_back(x.size(d));
    st.push_back(x.stride(d));
  }
  push_view(c, x, sizes, st, x.offset());
}

// expand(sizes): size-1 dims repeated with stride 0 (no copy); -1 keeps a size; new leading
// dims may be added. Strides follow PyTorch's inferExpandGeometry.
void run_expand(OpCall& c) {
  Tensor x = c.tensor(0);
  std::vector<int64_t> req = c.ints(1);
  const int n = x.dim(), m = int(req.size());
  if (m < n)
    fail(cat("the number of sizes given (", m, ", ", shape_str(req), ") must be at least the number of dims of the tensor (",
             n, ", ", shape_str(x.sizes()), ")"));
  Shape sizes(static_cast<size_t>(m)), st(static_cast<size_t>(m));
  int64_t numel = 1;
  for (int i = m - 1; i >= 0; --i) {
    int d = i - (m - n);  // the tensor's dim aligned with i, or < 0 for a new leading dim
    int64_t size = d >= 0 ? x.size(d) : 1;
    int64_t stride = d >= 0 ? x.stride(d) : (i + 1 < m ? sizes[size_t(i + 1)] * st[size_t(i + 1)] : 0);
    int64_t target = req[size_t(i)];
    if (target == -1) {
      if (d < 0) fail(cat("size -1 is not allowed in a new leading dim (dim ", i + 1, " of ", shape_str(req), ")"));
      target = size;
    }
    if (target < 0) fail(cat("sizes must be non-negative (or -1 to keep a size), got ", shape_str(req)));
    if (target != size) {
      if (size != 1)
        fail(cat("the expanded size ", target, " must match the existing size ", size, " at non-singleton dim ", i + 1,
                 " (target sizes ", shape_str(req), ", tensor sizes ", shape_str(x.sizes()), ")"));
      stride = 0;
    }
    if (__builtin_mul_overflow(numel, target, &numel)) fail(cat("expanded shape ", shape_str(req), " has too many elements"));
    sizes[size_t(i)] = target;
    st[size_t(i)] = stride;
  }
  push_view(c, x, sizes, st, x.offset());
}

// ---- sub-ranges ---------------------------------------------------------------------------------

// narrow(d, start, len): elements start .. start+len-1 of dim d (start 1-based; negative counts
// from the end; start may be size+1 when len is 0)
void run_narrow(OpCall& c) {
  Tensor x = c.tensor(0);
  require_dims(x);
  int d = c.dim(1, x.dim());
  const int64_t size = x.size(d), given = c.integer(2), len = c.integer(3);
  int64_t start = given < 0 ? given + size + 1 : given;
  if (start < 1 || start > size + 1)
    fail(cat("start ", given, " is out of range for dim ", d + 1, " of size ", size, " (expected 1..", size, " or -", size,
             "..-1", given == 0 ? "; indices are 1-based" : "", ")"));
  if (len < 0) fail(cat("length must be non-negative, got ", len));
  if (start - 1 + len > size)
    fail(cat("start ", given, " + length ", len, " runs past the end of dim ", d + 1, " of size ", size));
  Shape sizes = x.sizes();
  sizes[size_t(d)] = len;
  push_view(c, x, sizes, x.strides(), x.offset() + (start - 1) * x.stride(d));
}

// select(d, i): slice i (1-based; negative from the end) of dim d, which is removed
void run_select(OpCall& c) {
  Tensor x = c.tensor(0);
  require_dims(x);
  int d = c.dim(1, x.dim());
  const int64_t size = x.size(d), given = c.integer(2);
  int64_t i = given < 0 ? given + size + 1 : given;
  if (i < 1 || i > size)
    fail(cat("index ", given, " is out of range for dim ", d + 1, " of size ", size,
             size ? cat(" (expected 1..", size, " or -", size, "..-1") : std::string(" (the dim is empty"),
             given == 0 ? "; indices are 1-based)" : ")"));
  Shape sizes = x.sizes(), st = x.strides();
  sizes.erase(sizes.begin() + d);
  st.erase(st.begin() + d);
  push_view(c, x, sizes, st, x.offset() + (i - 1) * x.stride(d));
}

// slice(d[, start[, stop[, step]]]): elements start, start+step, ... up to stop INCLUSIVE of dim d.
// Like Python slicing, but 1-based and inclusive: negative start/stop count from the end (-1 is
// the last element), both are then clamped to the dim (start to 1..size+1, stop to 0..size), and
// start > stop gives an empty result rather than an error. start defaults to 1, stop to the end,
// step (which must be positive) to 1.
void run_slice(OpCall& c) {
  Tensor x = c.tensor(0);
  require_dims(x);
  int d = c.dim(1, x.dim());
  const int64_t size = x.size(d);
  auto from_end = [size](int64_t v) { return v < 0 ? v + size + 1 : v; };
  int64_t start = std::clamp<int64_t>(c.has(2) ? from_end(c.integer(2)) : 1, 1, size + 1);
  int64_t stop = std::clamp<int64_t>(c.has(3) ? from_end(c.integer(3)) : size, 0, size);
  int64_t step = c.has(4) ? c.integer(4) : 1;
  if (step <= 0) fail(cat("step must be positive, got ", step));
  int64_t len = stop >= start ? (stop - start) / step + 1 : 0;
  Shape sizes = x.sizes(), st = x.strides();
  sizes[size_t(d)] = len;
  st[size_t(d)] *= step;
  push_view(c, x, sizes, st, x.offset() + (start - 1) * x.stride(d));
}

// as_strided(size, stride[, offset]): any layout over the input's storage (offset in elements
// from the storage's start, as PyTorch's storage_offset). The graph passes express chains of
// views as one as_strided of the base; users may call it too. Every element must lie inside the
// storage.
void run_as_strided(OpCall& c) {
  Tensor x = c.tensor(0);
  Shape sizes(c.ints(1)), strides(c.ints(2));
  int64_t offset = c.integer_or(3, x.offset());
  if (sizes.size() != strides.size())
    fail(cat("size ", shape_str(sizes), " and stride ", shape_str(strides), " have different lengths"));
  int64_t lo = offset, hi = offset;
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) fail(cat("sizes must be non-negative, got ", shape_str(sizes)));
    if (strides[i] < 0) fail(cat("strides must be non-negative, got ", shape_str(strides)));
    empty = empty || sizes[i] == 0;
    int64_t reach = 0;  // overflow checked: a wrapped sum could pass the bound check below
    if (sizes[i] > 0 && (__builtin_mul_overflow(sizes[i] - 1, strides[i], &reach) || __builtin_add_overflow(hi, reach, &hi)))
      fail(cat("size ", shape_str(sizes), ", stride ", shape_str(strides), " and offset ", offset,
               " reach beyond element 2^63"));
  }
  int64_t cap = int64_t(x.storage()->nbytes / x.itemsize());
  if (!empty && (lo < 0 || hi >= cap))
    fail(cat("size ", shape_str(sizes), ", stride ", shape_str(strides), " and offset ", offset,
             " reach element ", hi, " of a storage of ", cap, " elements"));
  push_view(c, x, sizes, strides, offset);
}

}  // namespace

void register_views(Registry& r) {
  const OpKind v = OpKind::View;
  r.add(OpDef{"view", "self:T, size:Is...", v, 0, nullptr, run_view});
  r.add(OpDef{"reshape", "self:T, shape:Is...", v, 0, nullptr, run_reshape});
  r.add(OpDef{"transpose", "self:T, dim0:D, dim1:D", v, 0, nullptr, run_transpose});
  r.add(OpDef{"permute", "self:T, dims:Is...", v, 0, nullptr, run_permute});
  r.add(OpDef{"t", "self:T", v, 0, nullptr, run_t});
  r.add(OpDef{"unsqueeze", "self:T, dim:D", v, 0, nullptr, run_unsqueeze});
  r.add(OpDef{"squeeze", "self:T, dim:Ds?", v, 0, nullptr, run_squeeze});
  r.add(OpDef{"expand", "self:T, size:Is...", v, 0, nullptr, run_expand});
  r.add(OpDef{"flatten", "self:T, start:D?, end:D?", v, 0, nullptr, run_flatten});
  r.add(OpDef{"narrow", "self:T, dim:D, start:I, length:I", v, 0, nullptr, run_narrow});
  r.add(OpDef{"as_strided", "self:T, size:Is, stride:Is, offset:I?", v, 0, nullptr, run_as_strided});
  r.add(OpDef{"select", "self:T, dim:D, index:I", v, 0, nullptr, run_select});
  // x:detach(): the same elements, outside autograd (no derivative, not a differentiable view)
  r.add(OpDef{"detach", "self:T", v, 0, nullptr, [](OpCall& c) { push_same(c, c.tensor(0)); }});
  r.add(OpDef{"slice", "self:T, dim:D, start:I?, stop:I?, step:I?", v, 0, nullptr, run_slice});
}

}  // namespace cr
