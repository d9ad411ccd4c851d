// The reduction engine of the eager kernels: out[o] = finish(fold of the input over a set of
// reduced dims), for any dims, any input strides and any output layout.
//
// A reduction is described by a Fold (how values are accumulated) and a finish callback (how an
// accumulator becomes output values). The engine plans the loop nest once: dims are ordered by
// input stride and merged, so every reduction becomes one of two shapes:
//   inner  - the unit-stride dim is reduced: each output folds contiguous runs (Fold::run),
//   outer  - the unit-stride dim is kept: rows are folded into a tile of accumulators, one per
//            output column (Fold::cols), so "sum over dim 1 of {N, C}" reads memory in order.
// Work is split over output elements; when there are few outputs and a long reduced range, the
// range is cut into chunks whose partial accumulators are merged in order (Fold::merge). Chunk
// boundaries depend only on the sizes, so results do not depend on the thread count.
//
// A Fold provides:
//   using In  (input storage type), using Acc (accumulator), static constexpr bool ordered
//   Acc init() const
//   void run(Acc&, const In* x, int64_t n, int64_t idx) const    x[0..n) contiguous; idx = position
//                                                                 of x[0] in the reduced range
//   void cols(Acc* a, const In* x, int64_t m, int64_t idx) const  a[j] <- x[j], all at position idx
//   void merge(Acc& a, const Acc& b) const                        b covers positions after a's
// and may declare kBlockCols = true for the engine to walk evenly strided rows a block of columns
// at a time (cols_blocked), where that is faster than a row at a time.
// `ordered` folds (argmax) need positions in the logical row-major order of the reduced dims, so
// the engine keeps the dims in their given order for them.
#pragma once
#include <algorithm>
#include <memory>
#include <vector>

#include "vm/kernels/loop.hpp"

namespace cr {

struct ReducePlan {
  int nk = 0, nr = 0;                                             // kept / reduced dims, outermost first
  int64_t ksize[kMaxDims], kin[kMaxDims], kout[kMaxDims];         // kept: size, input / output stride
  int64_t rsize[kMaxDims], rin[kMaxDims];                         // reduced: size, input stride
  int64_t n_out = 1, n_red = 1;                                   // output elements, reduced per output
  bool inner = false;                                             // the unit-stride dim is reduced

  int64_t kept_in(int64_t o) const;   // input offset of output element o (row-major over kept dims)
  int64_t kept_out(int64_t o) const;  // output offset of output element o
  int64_t red_in(int64_t r) const;    // input offset of reduced position r
};

// Plans reducing `in` over the dims flagged in `reduce` into `out`, whose shape is the kept
// sizes with or without the size-1 reduced dims (keepdim). Returns false when no dim of `in` has
// unit stride (the caller retries on a contiguous copy). Strides are in elements.
bool plan_reduce(const Tensor& in, const Tensor& out, const std::vector<bool>& reduce, bool ordered, ReducePlan* p);

constexpr int64_t kReduceChunk = 65536;  // reduced elements per task when one output's range is split
constexpr int64_t kReduceTile = 256;     // output columns per task in the outer shape

namespace detail {

template <class Fold, class Finish>
void merge_parts(const ReducePlan& p, const typename Fold::Acc* part, int64_t chunks, const Fold& f,
                 const Finish& finish) {
  parallel_for(p.n_out, std::max<int64_t>(1, kParallelGrain / chunks), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      typename Fold::Acc a = part[size_t(o * chunks)];
      for (int64_t k = 1; k < chunks; ++k) f.merge(a, part[size_t(o * chunks + k)]);
      finish(a, p.kept_out(o));
    }
  });
}

template <class Fold, class Finish>
void reduce_inner(const ReducePlan& p, const typename Fold::In* x, const Fold& f, const Finish& finish) {
  using Acc = typename Fold::Acc;
  const int64_t n = p.rsize[p.nr - 1];  // the contiguous run
  const int64_t chunks = p.n_red >= 2 * kReduceChunk ? (p.n_red + kReduceChunk - 1) / kReduceChunk : 1;
  const int64_t per = (p.n_red + chunks - 1) / chunks;
  std::unique_ptr<Acc[]> part(new Acc[size_t(chunks > 1 ? p.n_out * chunks : 0)]);
  parallel_for(p.n_out * chunks, std::max<int64_t>(1, kParallelGrain / per), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / chunks, end = std::min(p.n_red, (t % chunks + 1) * per);
      const typename Fold::In* base = x + p.kept_in(o);
      Acc a = f.init();
      for (int64_t r = (t % chunks) * per; r < end;) {
        int64_t len = std::min(n - r % n, end - r);
        f.run(a, base + p.red_in(r), len, r);
        r += len;
      }
      if (chunks == 1) finish(a, p.kept_out(o));
      else part[size_t(t)] = a;
    }
  });
  if (chunks > 1) merge_parts(p, part.get(), chunks, f, finish);
}

template <class Fold> concept BlockCols = requires { Fold::kBlockCols; } && Fold::kBlockCols;

// Fold::cols over `rows` rows ld apart from position r0, for folds that declare kBlockCols: blocks
// of kCols accumulators stay local over all the rows (registers, where they fit) instead of a[]
// round-tripping each row; every column still folds its rows in order.
template <class Fold>
void cols_blocked(const Fold& f, typename Fold::Acc* a, const typename Fold::In* x, int64_t m, int64_t ld, int64_t r0,
                  int64_t rows) {
  constexpr int64_t kCols = 32;
  int64_t j0 = 0;
  for (; j0 + kCols <= m; j0 += kCols) {
    typename Fold::Acc blk[kCols];
    std::copy(a + j0, a + j0 + kCols, blk);
    for (int64_t r = 0; r < rows; ++r) f.cols(blk, x + r * ld + j0, kCols, r0 + r);
    std::copy(blk, blk + kCols, a + j0);
  }
  if (j0 < m)
    for (int64_t r = 0; r < rows; ++r) f.cols(a + j0, x + r * ld + j0, m - j0, r0 + r);
}

template <class Fold, class Finish>
void reduce_outer(const ReducePlan& p, const typename Fold::In* x, const Fold& f, const Finish& finish) {
  using Acc = typename Fold::Acc;
  const int64_t m = p.ksize[p.nk - 1], rows = p.n_out / m;  // contiguous output columns, their rows
  const int64_t tile = std::min(m, kReduceTile), tiles = (m + tile - 1) / tile;
  const int64_t chunks = rows * tiles < 16 && p.n_red * tile >= 2 * kReduceChunk
                             ? std::min(p.n_red, (p.n_red * tile + kReduceChunk - 1) / kReduceChunk)
                             : 1;
  const int64_t per = (p.n_red + chunks - 1) / chunks;
  const int64_t col_stride = p.kout[p.nk - 1];
  std::unique_ptr<Acc[]> part(new Acc[size_t(chunks > 1 ? p.n_out * chunks : 0)]);
  parallel_for(rows * tiles * chunks, std::max<int64_t>(1, kParallelGrain / (per * tile)), [&](int64_t t0, int64_t t1) {
    std::unique_ptr<Acc[]> acc(new Acc[size_t(tile)]);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t k = t % chunks, rt = t / chunks;
      const int64_t o0 = (rt / tiles) * m + (rt % tiles) * tile, mt = std::min(tile, m - (rt % tiles) * tile);
      const typename Fold::In* base = x + p.kept_in(o0);
      std::fill(acc.get(), acc.get() + mt, f.init());
      const int64_t r0 = k * per, end = std::min(p.n_red, (k + 1) * per);
      bool folded = false;
      if constexpr (BlockCols<Fold>)
        if (p.nr == 1) {  // (rows evenly strided: walked a block of columns at a time)
          cols_blocked(f, acc.get(), base + p.red_in(r0), mt, p.rin[0], r0, end - r0);
          folded = true;
        }
      if (!folded)
        for (int64_t r = r0; r < end; ++r) f.cols(acc.get(), base + p.red_in(r), mt, r);
      if (chunks == 1) {
        const int64_t out0 = p.kept_out(o0);
        for (int64_t j = 0; j < mt; ++j) finish(acc[size_t(j)], out0 + j * col_stride);
      } else {
        for (int64_t j = 0; j < mt; ++j) part[size_t((o0 + j) * chunks + k)] = acc[size_t(j)];
      }
    }
  });
  if (chunks > 1) merge_parts(p, part.get(), chunks, f, finish);
}

}  // namespace detail

// Reduces `in` (storage type Fold::In) over the flagged dims; finish(acc, out_offset) writes the
// result of each output element, out_offset being its element offset in `out`.
template <class Fold, class Finish>
void reduce(const Tensor& in, const Tensor& out, const std::vector<bool>& dims, const Fold& f, const Finish& finish) {
  ReducePlan p;
  Tensor src = in;
  if (!plan_reduce(src, out, dims, Fold::ordered, &p)) {
    src = contiguous(in);
    if (!plan_reduce(src, out, dims, Fold::ordered, &p)) fail("internal error: no unit-stride dim in a contiguous tensor");
  }
  if (p.n_out == 0) return;
  if (p.n_red == 0) {  // an empty reduction: every output is the fold's identity
    parallel_for(p.n_out, kParallelGrain, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) finish(f.init(), p.kept_out(o));
    });
    return;
  }
  const typename Fold::In* x = src.data<typename Fold::In>();
  if (p.inner) detail::reduce_inner(p, x, f, finish);
  else detail::reduce_outer(p, x, f, finish);
}

}  // namespace cr
