// Joining and splitting: T.cat, T.stack, split, chunk. cat and stack copy their inputs into one
// new tensor whose dtype is PyTorch's promotion over all inputs; split and chunk return views
// of the input (a Lua table of tensors, kListOut).
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

// A list output may not hold more tensors than this: a typo such as chunk(1e9) on an empty dim
// should fail clearly rather than exhaust memory one header at a time.
constexpr int64_t kMaxPieces = int64_t(1) << 20;

std::vector<Tensor> input_list(const OpCall& c, DType* dtype) {
  std::vector<Tensor> ts = c.tensors(0);
  if (ts.empty()) fail("expected a non-empty list of tensors, got an empty list");
  *dtype = ts[0].dtype();
  for (size_t i = 1; i < ts.size(); ++i) {
    if (!(ts[i].device() == ts[0].device()))
      fail(cat("expected all tensors on one device, got ", device_name(ts[0].device()), " (tensor 1) and ",
               device_name(ts[i].device()), " (tensor ", i + 1, ")"));
    *dtype = promote(*dtype, ts[i].dtype());
  }
  return ts;
}

// The part of `out` that starts at `pos` along dim d and has `sizes`.
Tensor region(const Tensor& out, const Shape& sizes, int d, int64_t pos) {
  return Tensor::view_of(out, sizes, out.strides(), out.offset() + pos * out.stride(d));
}

// PyTorch's legacy rule: a 1-d tensor of size 0 may be concatenated with anything (it used to
// stand for "no tensor"), so it is skipped when shapes are checked and copied.
bool skipped(const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

// T.cat(list[, dim]): the inputs joined along dim (default 1); other sizes must match. The
// result's metadata (the rule graph replay with symbolic sizes also follows, vm/graph/shapes.cpp).
std::vector<Meta> infer_cat(OpCall& c) {
  DType dtype;
  std::vector<Tensor> ts = input_list(c, &dtype);
  int ref = -1;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].dim() == 0)
      fail(cat("tensor ", i + 1, " is 0-d; zero-dimensional tensors cannot be concatenated (use T.stack)"));
    if (ref < 0 && !skipped(ts[i])) ref = int(i);
  }
  if (ref < 0) {  // only empty 1-d tensors: the result is one too
    if (c.has(1)) c.dim(1, 1);
    return {{{0}, dtype, ts[0].device()}};
  }
  const Tensor& r = ts[size_t(ref)];
  const int n = r.dim();
  const int d = c.has(1) ? c.dim(1, n) : 0;
  Shape sizes = r.sizes();
  sizes[size_t(d)] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (skipped(t)) continue;
    if (t.dim() != n)
      fail(cat("tensors must have the same number of dims: tensor ", ref + 1, " has shape ", shape_str(r.sizes()),
               ", tensor ", i + 1, " has shape ", shape_str(t.sizes())));
    for (int k = 0; k < n; ++k)
      if (k != d && t.size(k) != r.size(k))
        fail(cat("sizes of tensors must match except in dim ", d + 1, ": tensor ", ref + 1, " has shape ",
                 shape_str(r.sizes()), ", tensor ", i + 1, " has shape ", shape_str(t.sizes())));
    if (__builtin_add_overflow(sizes[size_t(d)], t.size(d), &sizes[size_t(d)])) fail("the result is too large");
  }
  return {{sizes, dtype, r.device()}};
}
void run_cat(OpCall& c) {
  std::vector<Tensor> ts = c.tensors(0);
  const Tensor& out = c.outs[0];  // (only empty 1-d inputs: an empty 1-d result, nothing to copy)
  const int d = c.has(1) ? c.dim(1, out.dim()) : 0;
  int64_t pos = 0;
  for (const Tensor& t : ts) {
    if (skipped(t) || t.numel() == 0) continue;
    copy_into(region(out, t.sizes(), d, pos), t);
    pos += t.size(d);
  }
}

// T.stack(list[, dim]): equal-shaped inputs joined along a new dim (1..ndim+1, default 1)
int stack_dim(const OpCall& c, int n) {
  const int64_t given = c.has(1) ? c.integer(1) : 1;
  if (given == 0 || given > n + 1 || given < -(n + 1))
    fail(cat("dim ", given, " is out of range for stacking ", n, "-d tensors (expected 1..", n + 1, " or -", n + 1, "..-1)"));
  return int(given > 0 ? given - 1 : given + n + 1);
}
std::vector<Meta> infer_stack(OpCall& c) {
  DType dtype;
  std::vector<Tensor> ts = input_list(c, &dtype);
  const Shape shape = ts[0].sizes();
  for (size_t i = 1; i < ts.size(); ++i)
    if (ts[i].sizes() != shape)
      fail(cat("expected tensors of equal shape, got ", shape_str(shape), " (tensor 1) and ", shape_str(ts[i].sizes()),
               " (tensor ", i + 1, ")"));
  Shape sizes = shape;
  sizes.insert(sizes.begin() + stack_dim(c, int(shape.size())), int64_t(ts.size()));
  return {{sizes, dtype, ts[0].device()}};
}
void run_stack(OpCall& c) {
  std::vector<Tensor> ts = c.tensors(0);
  const Tensor& out = c.outs[0];
  if (out.numel() == 0) return;
  const Shape shape = ts[0].sizes();
  const int d = stack_dim(c, int(shape.size()));
  Shape st = out.strides();
  const int64_t step = st[size_t(d)];
  st.erase(st.begin() + d);
  for (size_t i = 0; i < ts.size(); ++i)
    copy_into(Tensor::view_of(out, shape, st, out.offset() + int64_t(i) * step), ts[i]);
}

// Views of x: consecutive pieces of the given sizes along dim d.
void push_pieces(OpCall& c, const Tensor& x, int d, const std::vector<int64_t>& sizes) {
  if (int64_t(sizes.size()) > kMaxPieces)
    fail(cat("the result would hold ", sizes.size(), " tensors (at most ", kMaxPieces, ")"));
  Shape shape = x.sizes();
  int64_t pos = 0;
  for (int64_t s : sizes) {
    shape[size_t(d)] = s;
    c.outs.push_back(Tensor::view_of(x, shape, x.strides(), x.offset() + pos * x.stride(d)));
    pos += s;
  }
}

// Pieces of `each` elements (the last may be smaller); one empty piece for an empty dim.
std::vector<int64_t> equal_pieces(int64_t size, int64_t each) {
  int64_t count = size == 0 ? 1 : (size + each - 1) / each;
  if (count > kMaxPieces) fail(cat("the result would hold ", count, " tensors (at most ", kMaxPieces, ")"));
  std::vector<int64_t> r(size_t(count), each);
  r.back() = size - each * (count - 1);
  return r;
}

// x:split(size[, dim]): pieces of `size` elements, or of the sizes in a list (which must add
// up to the dim's size)
void run_split(OpCall& c) {
  Tensor x = c.tensor(0);
  if (x.dim() == 0) fail("expected a tensor with at least 1 dim, got a 0-d tensor");
  const int d = c.has(2) ? c.dim(2, x.dim()) : 0;
  const int64_t size = x.size(d);
  if (c.has(1) && c.args[1].tag == kNumber) {
    int64_t each = c.integer(1);
    if (each < 0) fail(cat("split size must be non-negative, got ", each));
    if (each == 0 && size > 0) fail(cat("split size 0 cannot split dim ", d + 1, " of size ", size));
    return push_pieces(c, x, d, equal_pieces(size, each));
  }
  std::vector<int64_t> sizes = c.ints(1);
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail(cat("split sizes must be non-negative, got ", shape_str(sizes)));
    if (__builtin_add_overflow(total, s, &total)) fail(cat("split sizes ", shape_str(sizes), " are too large"));
  }
  if (total != size)
    fail(cat("split sizes ", shape_str(sizes), " add up to ", total, " but dim ", d + 1, " has size ", size));
  push_pieces(c, x, d, sizes);
}

// x:chunk(n[, dim]): as PyTorch, pieces of ceil(size / n) elements, so there may be fewer than n;
// an empty dim gives n empty pieces
void run_chunk(OpCall& c) {
  Tensor x = c.tensor(0);
  if (x.dim() == 0) fail("expected a tensor with at least 1 dim, got a 0-d tensor");
  const int64_t chunks = c.integer(1);
  if (chunks <= 0) fail(cat("the number of chunks must be positive, got ", chunks));
  const int d = c.has(2) ? c.dim(2, x.dim()) : 0;
  const int64_t size = x.size(d);
  if (size == 0) {
    if (chunks > kMaxPieces) fail(cat("the result would hold ", chunks, " tensors (at most ", kMaxPieces, ")"));
    return push_pieces(c, x, d, std::vector<int64_t>(size_t(chunks), 0));
  }
  push_pieces(c, x, d, equal_pieces(size, (size + chunks - 1) / chunks));
}

}  // namespace

void register_joins(Registry& r) {
  const OpKind j = OpKind::Join;  // (no loop lowering: copies into or out of parts, Extern steps)
  r.add(OpDef{"cat", "tensors:TL, dim:D?", j, kNoMethod | kExtern, infer_cat, run_cat});
  r.add(OpDef{"stack", "tensors:TL, dim:D?", j, kNoMethod | kExtern, infer_stack, run_stack});
  r.set_cast({"cat", "stack"}, CastPolicy::Promote);  // autocast: the widest of the tensors
  r.set_cast({"cat", "stack"}, CastPolicy::Promote, true);
  r.add(OpDef{"split", "self:T, size:Is, dim:D?", j, kListOut | kExtern, nullptr, run_split});
  r.add(OpDef{"chunk", "self:T, chunks:I, dim:D?", j, kListOut | kExtern, nullptr, run_chunk});
}

}  // namespace cr
