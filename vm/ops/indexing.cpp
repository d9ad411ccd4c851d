// Indexing ops: index_select, gather, embedding, index_add / scatter_add (and their in-place
// forms), masked_fill (and masked_fill_).
// Index values are 1-based at the Lua surface; they are range-checked here, before any kernel
// runs, and converted to 0-based offsets inside the kernel. index_select and embedding are
// gathers with an index broadcast along the other dims, so all three share one kernel.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>

#include "vm/alloc.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/devices.hpp"
#include "vm/kernels/cuda/scatter.hpp"
#include "vm/kernels/stream.hpp"
#include "vm/ops/indexing.hpp"
#include "vm/ops/operands.hpp"

namespace cr {

// The index argument as a contiguous int64 tensor (the caller's tensor itself when it is one);
// in a phantom call (an infer rule's layouts, a lazy index) one without memory.
Tensor index_arg(const OpCall& c, int i) {
  Tensor idx = c.tensor(i);
  if (!is_integral(idx.dtype()))
    fail(cat(c.arg_name(i), " ", dtype_list_error("an int32 or int64 tensor", idx.dtype())));
  if (phantom_dispatch() && (idx.dtype() != DType::i64 || !idx.is_contiguous()))
    return phantom_tensor(idx.sizes(), DType::i64, idx.device());
  return contiguous(cast(idx, DType::i64));
}

void check_device(const Tensor& a, const Tensor& b) {
  if (!(a.device() == b.device()))
    fail(cat("expected all tensors on one device, got ", device_name(a.device()), " and ", device_name(b.device())));
}

// Every value of idx (contiguous int64) must be a 1-based position in 1..n.
// (A branch-free pass over the pool first; the serial loop only names the first bad value.)
void check_range(const Tensor& idx, int64_t n, const std::string& what) {
  const int64_t* p = idx.data<int64_t>();
  std::atomic<bool> bad{false};
  parallel_for(idx.numel(), 4 * kParallelGrain, [&](int64_t i0, int64_t i1) {
    bool in = true;
    for (int64_t i = i0; i < i1; ++i) in &= uint64_t(p[i]) - 1 < uint64_t(n);
    if (!in) bad = true;
  });
  if (!bad) return;
  for (int64_t i = 0, e = idx.numel(); i < e; ++i) {
    if (p[i] >= 1 && p[i] <= n) continue;
    if (n == 0) fail(cat("index ", p[i], " is out of range for ", what, ", which is empty (no index is valid)"));
    fail(cat("index ", p[i], " is out of range for ", what, " (expected 1..", n, ")"));
  }
}

// A rank >= 1 header over t: 0-d tensors act as 1-element vectors, as in PyTorch.
Tensor at_least_1d(const Tensor& t) { return t.dim() ? t : Tensor::view_of(t, {1}, {1}, t.offset()); }

// Whether a and b reach a common byte of one storage (their extents intersect).
bool may_overlap(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage() || a.numel() == 0 || b.numel() == 0) return false;
  auto extent = [](const Tensor& t) {
    int64_t lo = t.offset(), hi = t.offset();
    for (int k = 0; k < t.dim(); ++k) (t.stride(k) < 0 ? lo : hi) += (t.size(k) - 1) * t.stride(k);
    return std::pair<int64_t, int64_t>{lo * int64_t(t.itemsize()), (hi + 1) * int64_t(t.itemsize())};
  };
  const auto [alo, ahi] = extent(a);
  const auto [blo, bhi] = extent(b);
  return alo < bhi && blo < ahi;
}

namespace {

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

// ---- embedding(index, weight[, {padding_idx}]): rows of weight {n, d}; result index.shape..{d} -

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
  if (c.has(2)) {  // (only the backward reads it: the padding row gets no gradient)
    const int64_t p = c.integer(2), n = e.w.size(0);
    if (p == 0 || p > n || p < -n) fail(cat("padding_idx expected a row of the weight (1..", n, " or -", n, "..-1), got ", p));
  }
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

// ---- scatter-add: index_add(self, dim, index, source), scatter_add(self, dim, index, src) ---
// Both add elements of the source into a copy of self (or into self, in place) at the positions
// the index names along dim: out[c with c[d] := index(c) - 1] += alpha * src[c] over an iteration
// shape (index_add: source's, its 1-D index broadcast along the other dims; scatter_add: index's).
// Positions that differ off dim never collide: lines off dim run in parallel, and each line adds
// in index order, so the result does not depend on the threads (deterministic; a single long line
// is cut as scatter_one_line says). On CUDA a thread per position adds atomically
// (vm/kernels/cuda/scatter.cuh), in no fixed order, as PyTorch's.

struct Scatter {
  Tensor self, index;  // index: the values, contiguous int64
  int d = 0;
  double alpha = 1;
  Tensor idx, src;  // views of the iteration shape, rank >= 1
};

// o += alpha * s in the dtype's arithmetic (integers wrap, bool is "or").
template <class T> struct AddScaled {
  compute_t<T> alpha;
  void operator()(T& o, const T& s) const {
    if constexpr (std::is_same_v<T, bool>) o = o || (alpha && s);
    else if constexpr (std::is_integral_v<T>) o = wrapping_add(o, wrapping_mul(alpha, s));
    else store(o, load(o) + alpha * load(s));
  }
};

// One line of the iteration shape (its offsets ob / ib / sb), columns j0..j1-1, elements k0..k1-1
// added into out (element strides od along d, oj along j) in index order.
template <class T> struct Line {
  const T* sp;
  const int64_t* ip;
  T* op;
  int64_t id, sd, ij, sj, od, oj;  // strides: index / source / out along d and j
  AddScaled<T> add;
  // Elements k0..k1-1 of one column (source s, index i, target o) while their positions are
  // within 1..rows: false at the first that is not, nothing of it added (rows UINT64_MAX: the
  // positions were checked before). The dense loop has no stride multiplies.
  bool column(T* o, const T* s, const int64_t* i, int64_t k0, int64_t k1, uint64_t rows) const {
    if (id == 1 && sd == 1) {
      for (int64_t k = k0; k < k1; ++k) {
        const uint64_t r = uint64_t(i[k]) - 1;
        if (r >= rows) return false;
        add(o[int64_t(r) * od], s[k]);
      }
      return true;
    }
    for (int64_t k = k0; k < k1; ++k) {
      const uint64_t r = uint64_t(i[k * id]) - 1;
      if (r >= rows) return false;
      add(o[int64_t(r) * od], s[k * sd]);
    }
    return true;
  }
  void run(int64_t ob, int64_t ib, int64_t sb, int64_t k0, int64_t k1, int64_t j0, int64_t j1) const {
    if (j1 - j0 == 1) {  // one column (a 1-D line, bincount): no inner loop
      column(op + ob + j0 * oj, sp + sb + j0 * sj, ip + ib + j0 * ij, k0, k1, UINT64_MAX);
      return;
    }
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t* ik = ip + ib + k * id;
      const T* sk = sp + sb + k * sd;
      if (ij == 0) {  // one target row for the whole chunk (index_add, embedding)
        T* row = op + ob + (ik[0] - 1) * od;
        for (int64_t j = j0; j < j1; ++j) add(row[j * oj], sk[j * sj]);
        continue;
      }
      for (int64_t j = j0; j < j1; ++j) {
        add(op[ob + (ik[j * ij] - 1) * od + j * oj], sk[j * sj]);
      }
    }
  }
};

// A long single line into a small target (at most an eighth of the line: a histogram, bincount)
// over the pool: cut into pieces, each summed into a zeroed target of its own (in parallel), then
// the pieces added into out in order. Their number follows the line's length, never the threads,
// so the result is the same on any number of threads: the serial sum's up to float rounding,
// exact for integers and bool. (Larger targets go by buckets of rows: scatter_by_rows.) One
// column checks its positions as it adds (out is only written when all are in range).
template <class T>
void scatter_one_line(const Tensor& out, const Scatter& s, const Line<T>& line, int64_t K, int64_t J,
                      const std::string& what) {
  const int64_t rows = out.size(s.d), target = rows * J;
  if (J > 1) check_range(s.index, rows, what);
  const int64_t pieces = std::clamp<int64_t>(K * J / kParallelGrain, 2, 16);
  std::unique_ptr<T[]> sums(new T[size_t(pieces * target)]);
  std::atomic<bool> bad{false};
  parallel_for(pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      Line<T> part = line;
      part.op = sums.get() + p * target, part.od = J, part.oj = 1;
      std::memset(static_cast<void*>(part.op), 0, size_t(target) * sizeof(T));  // (zero bits: 0 in every dtype)
      if (J > 1) part.run(0, 0, 0, K * p / pieces, K * (p + 1) / pieces, 0, J);
      else if (!part.column(part.op, part.sp, part.ip, K * p / pieces, K * (p + 1) / pieces, uint64_t(rows)))
        bad = true;
    }
  });
  if (bad) check_range(s.index, rows, what);  // (raises, naming the first position out of range)
  const AddScaled<T> plus{compute_t<T>(1)};
  parallel_for(target, kParallelGrain, [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      T& o = line.op[e / J * line.od + e % J * line.oj];
      for (int64_t p = 0; p < pieces; ++p) plus(o, sums[size_t(p * target + e)]);
    }
  });
}

// A long 1-D line into a large target: each piece of the line appends its (row, value) pairs to a
// chain of 4 KiB blocks per 256 KiB of target rows (64-byte lines, streamed; false at a position
// out of range, nothing written), then each bucket, in cache, copies base's rows (null: none) and
// adds its chains in piece order: the serial loop's sums, bit for bit, on any number of threads.
template <class T> bool scatter_by_rows(const Line<T>& line, int64_t K, int64_t rows, const T* base) {
  struct Pair {
    uint32_t row;
    T v;
  };
  static_assert(64 % sizeof(Pair) == 0);
  constexpr int64_t kLine = 64 / sizeof(Pair), kBlock = 4096 / sizeof(Pair);
  struct Chain {
    std::vector<uint32_t> blocks;
    int64_t n = 0;
  };
  int shift = 10;
  while ((int64_t(sizeof(T)) << (shift + 1)) <= (int64_t(256) << 10)) ++shift;
  const int64_t buckets = ((rows - 1) >> shift) + 1, pieces = num_threads();
  std::vector<int64_t> first(size_t(pieces + 1), 0);  // each piece's blocks: its pairs' and a partial one a bucket
  for (int64_t p = 0; p < pieces; ++p)
    first[size_t(p + 1)] = first[size_t(p)] + (K * (p + 1) / pieces - K * p / pieces + kBlock - 1) / kBlock + buckets;
  Scratch<Pair> pool{size_t(first[size_t(pieces)] * kBlock)};  // (host_alloc: 64-byte aligned)
  std::vector<Chain> chains(size_t(pieces * buckets));
  std::atomic<bool> bad{false};
  parallel_for(pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      Scratch<Pair> stage{size_t(buckets * kLine)};
      std::vector<uint32_t> fill(size_t(buckets), 0);
      std::vector<Pair*> at(size_t(buckets), nullptr);  // the next free line of the bucket's last block
      Chain* chain = &chains[size_t(p * buckets)];
      int64_t next = first[size_t(p)];
      auto put = [&](int64_t b, int64_t n) {  // the staged line of bucket b (n pairs) to its chain
        if (chain[b].n % kBlock == 0) {  // (its last block is full: the piece's next one)
          chain[b].blocks.push_back(uint32_t(next));
          at[size_t(b)] = pool.p + next++ * kBlock;
        }
        stream_block(at[size_t(b)], stage.p + b * kLine, n * int64_t(sizeof(Pair)));
        at[size_t(b)] += n;
        chain[b].n += n;
      };
      const int64_t k0 = K * p / pieces, k1 = K * (p + 1) / pieces;
      const int64_t* ip = line.ip;
      const T* sp = line.sp;
      uint32_t* f = fill.data();
      for (int64_t k = k0; k < k1; ++k) {
        const uint64_t r = uint64_t(ip[k * line.id]) - 1;
        if (r >= uint64_t(rows)) {
          bad = true;
          break;
        }
        const int64_t b = int64_t(r >> shift);
        const uint32_t n = f[b];
        stage.p[b * kLine + n] = Pair{uint32_t(r), sp[k * line.sd]};
        f[b] = uint32_t((n + 1) % kLine);
        if (f[b] == 0) put(b, kLine);
      }
      for (int64_t b = 0; b < buckets; ++b)
        if (f[b]) put(b, f[b]);
      stream_fence();
    }
  });
  if (bad) return false;
  parallel_for(buckets, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b << shift;
      if (base) std::memcpy(line.op + r0, base + r0, size_t(std::min(rows - r0, int64_t(1) << shift)) * sizeof(T));
      for (int64_t p = 0; p < pieces; ++p) {
        const Chain& c = chains[size_t(p * buckets + b)];
        for (size_t i = 0; i < c.blocks.size(); ++i) {
          const Pair* q = pool.p + int64_t(c.blocks[i]) * kBlock;
          const int64_t n = std::min<int64_t>(kBlock, c.n - int64_t(i) * kBlock);
          for (int64_t j = 0; j < n; ++j) line.add(line.op[q[j].row * line.od], q[j].v);
        }
      }
    }
  });
  return true;
}

// The lines of the iteration shape: every dim but d and the inner dim j (the last, unless d is),
// whose range is cut into chunks when there are fewer lines than threads (an embedding's
// gradient: one line, the features cut into chunks); each adds in index order, so the result
// does not depend on the threads. A single long line of fewer than 64 columns into a small
// target (a 1-D index_add, bincount) is cut as scatter_one_line says, one into a large target
// goes by buckets of rows (scatter_by_rows). base: self, copied into a new out first (by the
// buckets, where out is that one line), or null (in place).
template <class T>
void scatter_lines(const Tensor& out, const Scatter& s, const std::string& what, const Tensor* base) {
  const int nd = s.idx.dim(), d = s.d, jd = d == nd - 1 ? -1 : nd - 1;
  const Shape sizes = s.idx.sizes(), os = out.strides(), is = s.idx.strides(), ss = s.src.strides();
  const int64_t K = sizes[size_t(d)], J = jd < 0 ? 1 : sizes[size_t(jd)];
  const int64_t lines = s.idx.numel() / std::max<int64_t>(K * J, 1);
  if (s.idx.numel() == 0) {
    if (base) copy_into(out, *base);
    return;
  }
  const auto at = [&](const Shape& st, int k) { return k < 0 ? int64_t(0) : st[size_t(k)]; };
  const Line<T> line{s.src.data<T>(), s.idx.data<int64_t>(), out.data<T>(), is[size_t(d)], ss[size_t(d)],
                     at(is, jd), at(ss, jd), os[size_t(d)], at(os, jd), AddScaled<T>{compute_t<T>(s.alpha)}};
  if (lines == 1 && J == 1 && K >= 2 * kParallelGrain && out.size(d) * 8 > K && out.size(d) < (int64_t(1) << 32)) {
    const bool by_bucket = base && out.numel() == out.size(d) && line.od == 1 && base->sizes() == out.sizes() &&
                           base->dtype() == out.dtype() && base->is_contiguous();
    if (base && !by_bucket) copy_into(out, *base);
    if (!scatter_by_rows(line, K, out.size(d), by_bucket ? base->data<T>() : nullptr))
      check_range(s.index, out.size(d), what);  // (raises, naming the first position out of range)
    return;
  }
  if (base) copy_into(out, *base);
  if (lines == 1 && J < 64 && K * J >= 2 * kParallelGrain && out.size(d) * J * 8 <= K * J)
    return scatter_one_line(out, s, line, K, J, what);
  check_range(s.index, out.size(d), what);
  const int64_t want = lines >= num_threads() ? 1 : (num_threads() + lines - 1) / lines;
  const int64_t chunks = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, J / 64)), chunk = (J + chunks - 1) / chunks;
  parallel_for(lines * chunks, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, K * chunk)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t ob = 0, ib = 0, sb = 0, rem = t / chunks;
      for (int k = nd - 1; k >= 0; --k) {
        if (k == d || k == jd) continue;
        const int64_t ck = rem % sizes[size_t(k)];
        rem /= sizes[size_t(k)];
        ob += ck * os[size_t(k)], ib += ck * is[size_t(k)], sb += ck * ss[size_t(k)];
      }
      const int64_t j0 = t % chunks * chunk;
      line.run(ob, ib, sb, 0, K, j0, std::min(J, j0 + chunk));
    }
  });
}

void check_scatter_dtypes(const OpCall& c, const Tensor& self, const Tensor& src, const char* src_name) {
  if (src.dtype() != self.dtype())
    fail(cat(src_name, " expected self's dtype ", dtype_name(self.dtype()), ", got ", src.describe()));
  if (c.has(4) && c.args[4].tag == kNumber && !is_floating(self.dtype()) && c.args[4].num != std::floor(c.args[4].num))
    fail(cat("alpha must be an integer for ", dtype_name(self.dtype()), " inputs, got ", c.args[4].num));
}

Scatter prepare_index_add(const OpCall& c) {
  const Tensor self = c.tensor(0), index = c.tensor(2), source = c.tensor(3);
  check_device(self, index);
  check_device(self, source);
  Scatter s{self, index_arg(c, 2), c.dim(1, self.dim()), c.number_or(4, 1.0)};
  if (index.dim() > 1) fail(cat("index expected a 0-d or 1-D tensor, got ", index.describe()));
  check_scatter_dtypes(c, self, source, "source");
  if (source.dim() != self.dim())
    fail(cat("source expected as many dims as self ", shape_str(self.sizes()), ", got ", source.describe()));
  const Tensor x = at_least_1d(self), src = at_least_1d(source);
  for (int k = 0; k < x.dim(); ++k)
    if (k != s.d && src.size(k) != x.size(k))
      fail(cat("source expected self's shape ", shape_str(self.sizes()), " apart from dim ", s.d + 1, ", got ",
               source.describe()));
  if (s.index.numel() != src.size(s.d))
    fail(cat("index has ", s.index.numel(), " elements but source has ", src.size(s.d), " along dim ", s.d + 1));
  Shape is(size_t(src.dim()), 0);  // the index runs along d only
  is[size_t(s.d)] = 1;
  s.idx = Tensor::view_of(s.index, src.sizes(), is, s.index.offset());
  s.src = src;
  return s;
}

Scatter prepare_scatter_add(const OpCall& c) {
  const Tensor self = c.tensor(0), index = c.tensor(2), source = c.tensor(3);
  check_device(self, index);
  check_device(self, source);
  Scatter s{self, index_arg(c, 2), c.dim(1, self.dim())};
  s.idx = at_least_1d(s.index);
  check_scatter_dtypes(c, self, source, "src");
  const Tensor x = at_least_1d(self), src = at_least_1d(source);
  if (index.dim() != self.dim() || source.dim() != self.dim())
    fail(cat("index and src expected as many dims as self ", shape_str(self.sizes()), ", got ", index.describe(), " and ",
             source.describe()));
  for (int k = 0; k < x.dim(); ++k)
    if (s.idx.size(k) > src.size(k) || (k != s.d && s.idx.size(k) > x.size(k)))
      fail(cat("index of shape ", shape_str(index.sizes()), " expected to be no larger than src ", shape_str(source.sizes()),
               " and than self ", shape_str(self.sizes()), " apart from dim ", s.d + 1));
  s.src = Tensor::view_of(src, s.idx.sizes(), src.strides(), src.offset());  // the part the index covers
  return s;
}

std::vector<Meta> infer_scatter(const Scatter& s) { return {{s.self.sizes(), s.self.dtype(), s.self.device()}}; }
std::vector<Meta> infer_index_add(OpCall& c) { return infer_scatter(prepare_index_add(c)); }
std::vector<Meta> infer_scatter_add(OpCall& c) { return infer_scatter(prepare_scatter_add(c)); }

// out = self + the scattered source: out is a new contiguous tensor, or self itself (in place).
void scatter_add_into(const OpCall& c, const Tensor& out, const Scatter& s, bool in_place) {
  const Tensor x = at_least_1d(s.self);
  const std::string what = cat("dim ", s.d + 1, " of size ", x.size(s.d));
  if (in_place && (may_overlap(out, s.src) || may_overlap(out, s.index)))
    fail("the source or index shares memory with the tensor written in place (PyTorch refuses it too): clone() it first");
  if (!out.device().is_cpu()) {  // (the kernel checks the positions)
    if (!in_place) copy_into(out, s.self);
    return cuda::scatter_add(c.ctx, at_least_1d(out), s.d, s.idx, s.src, s.alpha, c.def.name, what);
  }
  // (scatter_lines checks the positions, and copies self into a new out where it is best done)
  visit(out.dtype(), [&](auto t) { scatter_lines<decltype(t)>(at_least_1d(out), s, what, in_place ? nullptr : &x); });
}

void run_index_add(OpCall& c) { scatter_add_into(c, c.outs[0], prepare_index_add(c), false); }
void run_scatter_add(OpCall& c) { scatter_add_into(c, c.outs[0], prepare_scatter_add(c), false); }
void run_index_add_(OpCall& c) { scatter_add_into(c, writable(c, 0), prepare_index_add(c), true); }
void run_scatter_add_(OpCall& c) { scatter_add_into(c, writable(c, 0), prepare_scatter_add(c), true); }

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
  if (!v.is_tensor() && !v.is_bool) check_scalar_fits(v.num, m.x.dtype());
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
  // (generated kernels gather too: jit/lower_ops.cpp; on CUDA they check the positions on the device)
  r.add(OpDef{"index_select", "self:T, dim:D, index:T", OpKind::Index, kValueErrors, infer_index_select, run_index_select});
  r.add(OpDef{"gather", "self:T, dim:D, index:T", OpKind::Index, kValueErrors, infer_gather, run_gather});
  r.add(OpDef{"embedding", "input:T, weight:T, opts:{padding_idx:I, scale_grad_by_freq:B}", OpKind::Index, kNoMethod | kValueErrors, infer_embedding, run_embedding});
  // (no loop lowering: scatters run as extern steps in compiled graphs, on host copies on CUDA)
  const int32_t dev = kValueErrors | kDeviceAware | kExtern;  // (CUDA: scatter_add_into's kernel)
  r.add(OpDef{"index_add", "self:T, dim:D, index:T, source:T, opts:{alpha:N}", OpKind::Index, dev, infer_index_add,
              run_index_add});
  r.add(OpDef{"index_add_", "self:T, dim:D, index:T, source:T, opts:{alpha:N}", OpKind::Index,
              kReturnsSelf | kNoFunction | dev, nullptr, run_index_add_});
  r.add(OpDef{"scatter_add", "self:T, dim:D, index:T, src:T", OpKind::Index, dev, infer_scatter_add, run_scatter_add});
  r.add(OpDef{"scatter_add_", "self:T, dim:D, index:T, src:T", OpKind::Index, kReturnsSelf | kNoFunction | dev, nullptr,
              run_scatter_add_});
  r.set_cast({"scatter_add"}, CastPolicy::Promote);  // autocast: self and src agree
  r.add(OpDef{"masked_fill", "self:T, mask:T, value:TN", OpKind::Index, 0, infer_masked_fill, run_masked_fill});
  r.add(OpDef{"masked_fill_", "self:T, mask:T, value:TN", OpKind::Index, kReturnsSelf | kNoFunction | kDeviceAware,
              nullptr, run_masked_fill_});
}

}  // namespace cr
