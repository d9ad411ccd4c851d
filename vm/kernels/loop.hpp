// The pointwise iteration engine of the eager CPU kernels: out[i] = f(in0[i], in1[i], ...) over
// broadcast operands with arbitrary strides. Dims are coalesced so that contiguous operands run
// as one flat loop (which GCC vectorises), rows are split across the thread pool, and every dtype
// combination comes from the same template (dtype.hpp's load/store do the conversions).
#pragma once
#include <algorithm>
#include <array>
#include <tuple>
#include <utility>

#include "vm/tensor.hpp"
#include "vm/threads.hpp"

namespace cr {

constexpr int64_t kParallelGrain = 32768;  // elements per thread below which we stay serial

// N operands (0 = output) iterated over a common shape, strides in bytes.
template <int N> struct Loop {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];
  char* base[N];
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= sizes[d];
    return n;
  }
};

// Strides of `t` broadcast to `shape` (right-aligned; size-1 and missing dims get stride 0).
Shape broadcast_strides(const Tensor& t, const Shape& shape);
// Whether a tensor of shape `from` broadcasts to `to` without growing it.
bool broadcasts_to(const Shape& from, const Shape& to);
// NumPy broadcasting of two shapes; throws "shapes {..} and {..} cannot be broadcast".
Shape broadcast_shapes(const Shape& a, const Shape& b);

template <int N> Loop<N> make_loop(const Tensor& out, const std::array<const Tensor*, N - 1>& ins) {
  Loop<N> L;
  Shape shape = out.sizes();
  std::array<Shape, N> st;
  st[0] = out.strides();
  L.base[0] = out.data_bytes();
  for (int k = 1; k < N; ++k) {
    st[size_t(k)] = broadcast_strides(*ins[size_t(k - 1)], shape);
    L.base[k] = ins[size_t(k - 1)]->data_bytes();
  }
  // Drop size-1 dims and merge dims that are contiguous for every operand.
  int nd = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k)
      merge = L.strides[k][nd - 1] == st[size_t(k)][d] * shape[d];
    if (merge) {
      L.sizes[nd - 1] *= shape[d];
      for (int k = 0; k < N; ++k) L.strides[k][nd - 1] = st[size_t(k)][d];
    } else {
      L.sizes[nd] = shape[d];
      for (int k = 0; k < N; ++k) L.strides[k][nd] = st[size_t(k)][d];
      ++nd;
    }
  }
  if (nd == 0) {  // a single element
    L.sizes[0] = 1;
    for (int k = 0; k < N; ++k) L.strides[k][0] = 0;
    nd = 1;
  }
  L.ndim = nd;
  size_t isz[N];
  isz[0] = out.itemsize();
  for (int k = 1; k < N; ++k) isz[k] = ins[size_t(k - 1)]->itemsize();
  for (int k = 0; k < N; ++k)
    for (int d = 0; d < nd; ++d) L.strides[k][d] *= int64_t(isz[k]);
  return L;
}

// Calls row(ptrs, inner_strides, n) for every innermost row, in parallel over rows. Rows longer
// than the parallel grain are cut into pieces when there are fewer rows than threads: a
// contiguous tensor coalesces into ONE row and must still spread over the pool.
template <int N, class Row> void for_each_row(const Loop<N>& L, Row&& row) {
  const int inner = L.ndim - 1;
  const int64_t n = L.sizes[inner];
  int64_t rows = 1;
  for (int d = 0; d < inner; ++d) rows *= L.sizes[d];
  if (rows == 0 || n == 0) return;
  const int64_t threads = num_threads();
  const int64_t pieces = rows >= threads ? 1 : std::clamp<int64_t>(n / kParallelGrain, 1, 4 * threads);
  const int64_t piece = (n + pieces - 1) / pieces;
  int64_t grain = std::max<int64_t>(1, kParallelGrain / piece);
  parallel_for(rows * pieces, grain, [&](int64_t t0, int64_t t1) {
    int64_t s_inner[N];
    for (int k = 0; k < N; ++k) s_inner[k] = L.strides[k][inner];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t begin = (t % pieces) * piece, len = std::min(piece, n - begin);
      if (len <= 0) continue;
      char* p[N];
      for (int k = 0; k < N; ++k) p[k] = L.base[k] + begin * s_inner[k];
      int64_t idx = t / pieces;
      for (int d = inner - 1; d >= 0; --d) {
        int64_t i = idx % L.sizes[d];
        idx /= L.sizes[d];
        for (int k = 0; k < N; ++k) p[k] += i * L.strides[k][d];
      }
      row(p, s_inner, len);
    }
  });
}

namespace detail {
// a broadcast operand's value, repeated: uninitialised storage (no zeroing per row)
template <class T, int64_t K> struct Repeated {
  T v[K];
  Repeated() {}
};
template <class TO, class... TI, class F, size_t... I>
inline void map_flat(TO* __restrict o, const std::tuple<const TI*...>& in, int64_t n, F& f, std::index_sequence<I...>) {
  for (int64_t i = 0; i < n; ++i) store(o[i], f(load(std::get<I>(in)[i])...));
}
template <class TO, class... TI, class F, size_t... I>
inline void map_row(char** p, const int64_t* s, int64_t n, F& f, std::index_sequence<I...> seq) {
  TO* __restrict o = reinterpret_cast<TO*>(p[0]);
  if (s[0] == sizeof(TO) && ((s[I + 1] == sizeof(TI)) && ...)) {
    map_flat<TO, TI...>(o, std::tuple<const TI*...>{reinterpret_cast<const TI*>(p[I + 1])...}, n, f, seq);
    return;
  }
  // Operands broadcast along the row (x + 1, x - row_mean: stride 0) read a stack block of copies
  // of their value, so that the flat loop serves them too: the strided loop below is scalar
  // (4.6x a copy's time: bench/RESULTS.md H35).
  constexpr int64_t kRep = 256;
  if (s[0] == sizeof(TO) && ((s[I + 1] == sizeof(TI) || s[I + 1] == 0) && ...)) {
    std::tuple<Repeated<TI, kRep>...> rep;
    ((s[I + 1] == 0 ? std::fill_n(std::get<I>(rep).v, kRep, *reinterpret_cast<const TI*>(p[I + 1])) : nullptr), ...);
    for (int64_t c = 0; c < n; c += kRep) {
      std::tuple<const TI*...> in{(s[I + 1] == 0 ? std::get<I>(rep).v : reinterpret_cast<const TI*>(p[I + 1]) + c)...};
      map_flat<TO, TI...>(o + c, in, std::min(kRep, n - c), f, seq);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    store(*reinterpret_cast<TO*>(p[0] + i * s[0]), f(load(*reinterpret_cast<const TI*>(p[I + 1] + i * s[I + 1]))...));
}
}  // namespace detail

// out = f(ins...) elementwise; TO / TI... are the storage types (f gets compute types).
template <class TO, class... TI, class F> void map(const Tensor& out, const std::array<const Tensor*, sizeof...(TI)>& ins, F f) {
  if (out.numel() == 0) return;
  auto L = make_loop<sizeof...(TI) + 1>(out, ins);
  for_each_row(L, [&](char** p, const int64_t* s, int64_t n) {
    detail::map_row<TO, TI...>(p, s, n, f, std::index_sequence_for<TI...>{});
  });
}

// dst = src with broadcasting and dtype conversion (dst may be any strided view).
void copy_into(const Tensor& dst, const Tensor& src);
// src converted to dtype (src itself when it already has it).
Tensor cast(const Tensor& src, DType dtype);
// A contiguous tensor with src's values (src itself when already contiguous).
Tensor contiguous(const Tensor& src);
// 0-d tensor holding v.
Tensor scalar_tensor(double v, DType dtype);
void fill(const Tensor& dst, double v);

}  // namespace cr
