// Selection by values and PyTorch's advanced indexing: masked_select and nonzero (result sizes
// come from the values: kDataSize, a graph break in compiled functions), index (x[i1, i2, ...]
// with index tensors for the leading dims: aten::index) and index_put / index_put_.
// Index values are 1-based (API.md section 1) and range-checked before any element moves (on
// CUDA by the kernels, raising at the next synchronisation: vm/kernels/cuda/select.hpp); boolean
// masks in index lists are expanded by the Lua surface (stdlib/indexing.lua).
#include <algorithm>
#include <type_traits>

#include "vm/devices.hpp"
#include "vm/kernels/cuda/select.hpp"
#include "vm/kernels/wide.hpp"
#if CR_HAVE_AVX512_TWINS
#include <immintrin.h>
#endif
#include "vm/ops/indexing.hpp"

namespace cr {
namespace {

// t seen with sizes s (broadcast), as a contiguous tensor
Tensor expanded(const Tensor& t, const Shape& s) {
  return contiguous(Tensor::view_of(t, s, broadcast_strides(t, s), t.offset()));
}

// ---- compaction on the CPU: masked_select and nonzero ----------------------------------------
// Pieces of kPiece elements: one parallel pass counts each piece's selected elements, a second
// writes them at the piece's offset, a burst of kBurst at a time: the kept values packed
// (branch-free, or by AVX-512's compress) straight into the result, the piece's last bursts
// through a buffer in the cache (a packer stores whole vectors past its last kept record).
constexpr int64_t kPiece = 1 << 16, kBurst = 1024, kSlack = 16;  // (a packer's whole-vector stores)

// sel(i) (0 or 1) for the n elements: the per-piece offsets of the selection, and its size.
template <class Sel> std::vector<int64_t> piece_offsets(int64_t n, const Sel& sel) {
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  std::vector<int64_t> off(size_t(pieces) + 1, 0);
  parallel_for(pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int64_t k = 0;
      for (int64_t i = p * kPiece, e = std::min(n, i + kPiece); i < e;) {
        uint16_t c = 0;  // (16-bit lanes: the vectorised sum widens bytes once, not to 64 bits)
        for (const int64_t stop = std::min(e, i + 32768); i < stop; ++i) c = uint16_t(c + sel(i));
        k += c;
      }
      off[size_t(p) + 1] = k;
    }
  });
  for (size_t p = 1; p < off.size(); ++p) off[p] += off[p - 1];
  return off;
}

// Packers: of n elements, those whose keep byte is nonzero, in order, into buf (room for n +
// kSlack); they return how many. pack_values keeps x[i], pack_positions first + i.
template <class W> int64_t pack_values(const W* x, const uint8_t* keep, int64_t n, W* buf) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    buf[k] = x[i];
    k += keep[i] != 0;
  }
  return k;
}
int64_t pack_positions(int64_t first, const uint8_t* keep, int64_t n, int64_t* buf) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    buf[k] = first + i;
    k += keep[i] != 0;
  }
  return k;
}

#if CR_HAVE_AVX512_TWINS
// 16 (8) lanes a step: the keep bytes tested into a lane mask, the kept lanes compressed in a
// register and the whole vector stored (the memory form of compress is slow on AMD's cores).
CR_TARGET_AVX512 int64_t pack_values4_avx512(const uint32_t* x, const uint8_t* keep, int64_t n, uint32_t* buf) {
  int64_t k = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(keep + i));
    const __mmask16 m = _mm_test_epi8_mask(b, b);
    _mm512_storeu_si512(buf + k, _mm512_maskz_compress_epi32(m, _mm512_loadu_si512(x + i)));
    k += __builtin_popcount(m);
  }
  return k + pack_values(x + i, keep + i, n - i, buf + k);
}
CR_TARGET_AVX512 int64_t pack_values8_avx512(const uint64_t* x, const uint8_t* keep, int64_t n, uint64_t* buf) {
  int64_t k = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(keep + i));
    const __mmask8 m = __mmask8(_mm_test_epi8_mask(b, b));
    _mm512_storeu_si512(buf + k, _mm512_maskz_compress_epi64(m, _mm512_loadu_si512(x + i)));
    k += __builtin_popcount(m);
  }
  return k + pack_values(x + i, keep + i, n - i, buf + k);
}
CR_TARGET_AVX512 int64_t pack_positions_avx512(int64_t first, const uint8_t* keep, int64_t n, int64_t* buf) {
  int64_t k = 0, i = 0;
  const __m512i lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0), eight = _mm512_set1_epi64(8);
  for (; i + 64 <= n; i += 64) {  // (64 keep bytes tested at once, then 8 compresses)
    const __m512i b = _mm512_loadu_si512(keep + i);
    const uint64_t m = _mm512_test_epi8_mask(b, b);
    __m512i pos = _mm512_add_epi64(_mm512_set1_epi64(first + i), lanes);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __mmask8 mj = __mmask8(m >> (8 * j));
      _mm512_storeu_si512(buf + k, _mm512_maskz_compress_epi64(mj, pos));
      k += __builtin_popcount(mj);
      pos = _mm512_add_epi64(pos, eight);
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(keep + i));
    const __mmask8 m = __mmask8(_mm_test_epi8_mask(b, b));
    const __m512i pos = _mm512_add_epi64(_mm512_set1_epi64(first + i), lanes);
    _mm512_storeu_si512(buf + k, _mm512_maskz_compress_epi64(m, pos));
    k += __builtin_popcount(m);
  }
  return k + pack_positions(first + i, keep + i, n - i, buf + k);
}
#endif

template <class W> int64_t pack_values_best(const W* x, const uint8_t* keep, int64_t n, W* buf) {
#if CR_HAVE_AVX512_TWINS
  static const bool wide = use_avx512_loops();
  if constexpr (sizeof(W) == 4)
    if (wide)
      return pack_values4_avx512(reinterpret_cast<const uint32_t*>(x), keep, n, reinterpret_cast<uint32_t*>(buf));
  if constexpr (sizeof(W) == 8)
    if (wide)
      return pack_values8_avx512(reinterpret_cast<const uint64_t*>(x), keep, n, reinterpret_cast<uint64_t*>(buf));
#endif
  return pack_values(x, keep, n, buf);
}
int64_t pack_positions_best(int64_t first, const uint8_t* keep, int64_t n, int64_t* buf) {
#if CR_HAVE_AVX512_TWINS
  static const bool wide = use_avx512_loops();
  if (wide) return pack_positions_avx512(first, keep, n, buf);
#endif
  return pack_positions(first, keep, n, buf);
}

// Each piece's selection at out + off[piece]: keep(j, len, scratch) gives the keep bytes of
// elements j.. (in scratch or elsewhere), pack(j, len, bytes, buf) packs their kept records.
template <class W, class Keep, class Pack>
void compact(int64_t n, const std::vector<int64_t>& off, W* out, const Keep& keep, const Pack& pack) {
  parallel_for(int64_t(off.size()) - 1, 1, [&](int64_t p0, int64_t p1) {
    W buf[kBurst + kSlack];
    uint8_t scratch[kBurst];
    for (int64_t p = p0; p < p1; ++p) {
      W *o = out + off[size_t(p)], *end = out + off[size_t(p) + 1];
      for (int64_t i = p * kPiece, e = std::min(n, i + kPiece); i < e; i += kBurst) {
        const int64_t len = std::min(kBurst, e - i);
        // packed in place while the piece's room holds a burst and the packer's overshoot
        if (end - o >= len + kSlack) o += pack(i, len, keep(i, len, scratch), o);
        else o = std::copy(buf, buf + pack(i, len, keep(i, len, scratch), buf), o);
      }
    }
  });
}

// ---- masked_select(self, mask): the elements where the (broadcast) mask is true, in order ----

void run_masked_select(OpCall& c) {
  const Tensor x = c.tensor(0), m = c.tensor(1);
  check_device(x, m);
  if (m.dtype() != DType::b8) fail(cat("mask ", dtype_list_error("a bool tensor", m.dtype())));
  const Shape s = broadcast_shapes(x.sizes(), m.sizes());
  const Tensor xe = expanded(x, s), me = expanded(m, s);
  if (!x.device().is_cpu()) return c.outs.push_back(cuda::masked_select(c.ctx, xe, me));
  const uint8_t* mp = reinterpret_cast<const uint8_t*>(me.data<bool>());
  const int64_t n = shape_numel(s);
  auto sel = [mp](int64_t i) { return int64_t(mp[i]); };
  const std::vector<int64_t> off = piece_offsets(n, sel);
  Tensor out = Tensor::empty({off.back()}, x.dtype(), x.device());
  visit_width(x.itemsize(), [&](auto w) {
    using W = decltype(w);
    const W* xp = xe.data<W>();
    auto keep = [mp](int64_t i, int64_t, uint8_t*) { return mp + i; };
    auto pack = [xp](int64_t i, int64_t len, const uint8_t* k, W* buf) { return pack_values_best(xp + i, k, len, buf); };
    compact(n, off, out.data<W>(), keep, pack);
  });
  c.outs.push_back(out);
}

// ---- nonzero(self): {count, ndim} int64, the 1-based coordinates of the nonzero elements -----

void run_nonzero(OpCall& c) {
  const Tensor x = contiguous(c.tensor(0));
  if (!x.device().is_cpu()) return c.outs.push_back(cuda::nonzero(c.ctx, x));
  const int64_t n = x.numel();
  const int nd = x.dim();
  visit(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* p = x.data<T>();
    auto sel = [p](int64_t i) { return int64_t(load(p[i]) != decltype(load(p[i]))(0)); };  // NaN counts
    const std::vector<int64_t> off = piece_offsets(n, sel);
    const int64_t count = off.back();
    Tensor out = Tensor::empty({count, int64_t(nd)}, DType::i64, x.device());
    int64_t* op = out.data<int64_t>();
    auto keep = [&](int64_t i, int64_t len, uint8_t* scratch) {
      if constexpr (std::is_same_v<T, bool>) return reinterpret_cast<const uint8_t*>(p + i);
      for (int64_t j = 0; j < len; ++j) scratch[j] = uint8_t(sel(i + j));
      return static_cast<const uint8_t*>(scratch);
    };
    // (1-based coordinates in one dim; flat 0-based positions to turn into coordinates)
    const int64_t base = nd == 1 ? 1 : 0;
    auto pack = [base](int64_t i, int64_t len, const uint8_t* k, int64_t* buf) {
      return pack_positions_best(base + i, k, len, buf);
    };
    if (nd <= 1) {
      if (nd == 1) compact(n, off, op, keep, pack);
      return c.outs.push_back(out);
    }
    std::vector<int64_t> flat(static_cast<size_t>(count));  // (the selected elements' positions)
    compact(n, off, flat.data(), keep, pack);
    parallel_for(count, 1 << 14, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k)
        for (int64_t d = nd - 1, rem = flat[size_t(k)]; d >= 0; --d) {
          op[k * nd + d] = rem % x.size(int(d)) + 1;
          rem /= x.size(int(d));
        }
    });
    c.outs.push_back(out);
  });
}

// ---- index(self, indices) / index_put_(self, indices, values[, accumulate]) ------------------
// indices: k integer tensors for dims 1..k of self, broadcast together to B; the selection has
// shape B .. self.shape[k+1..] and element (p, r) is self[idx_1[p], ..., idx_k[p], r].

struct Advanced {
  Tensor self;
  Shape b, shape;             // the indices' broadcast shape; the selection's shape
  std::vector<int64_t> base;  // per position p of B: the element offset of self[idx(p), 1, ...]
  std::vector<int64_t> rest;  // per element r of self.shape[k+1..]: its offset
};

Shape index_shape(const Tensor& self, const std::vector<Tensor>& list) {
  if (list.empty()) fail("indices expected a list of at least one index tensor, got an empty list");
  if (int(list.size()) > self.dim())
    fail(cat("too many indices for a tensor of dimension ", self.dim(), " (got ", list.size(), ")"));
  Shape b = list[0].sizes();
  for (const Tensor& t : list) {
    if (self.device().is_cpu() || !t.device().is_cpu()) check_device(self, t);  // (CPU indices of a CUDA self: PyTorch's)
    if (!is_integral(t.dtype()))
      fail(cat("tensors used as indices must be int64 or int32 tensors, got ", t.describe(),
               t.dtype() == DType::b8 ? " (boolean masks go through x[mask], x:index or nonzero)" : ""));
    b = broadcast_shapes(b, t.sizes());
  }
  return b;
}

// Offsets of the elements of the dims from k on (row-major order).
std::vector<int64_t> rest_offsets(const Tensor& self, size_t k) {
  std::vector<int64_t> offs{0};
  for (int d = int(k); d < self.dim(); ++d) {
    std::vector<int64_t> next;
    next.reserve(offs.size() * size_t(self.size(d)));
    for (int64_t o : offs)
      for (int64_t i = 0; i < self.size(d); ++i) next.push_back(o + i * self.stride(d));
    offs.swap(next);
  }
  return offs;
}

Advanced prepare_advanced(const OpCall& c) {
  Advanced a;
  a.self = c.tensor(0);
  const std::vector<Tensor> list = c.tensors(1);
  a.b = index_shape(a.self, list);
  a.shape = a.b;
  for (int d = int(list.size()); d < a.self.dim(); ++d) a.shape.push_back(a.self.size(d));
  return a;
}

// Fills a.base and a.rest, checking every index against its dim's size.
void locate(Advanced& a, const OpCall& c) {
  const std::vector<Tensor> list = c.tensors(1);
  const int64_t n = shape_numel(a.b);
  a.base.assign(size_t(n), a.self.offset());
  for (size_t j = 0; j < list.size(); ++j) {
    const Tensor idx = expanded(contiguous(cast(list[j], DType::i64)), a.b);
    const int64_t size = a.self.size(int(j));
    check_range(idx, size, cat("dim ", j + 1, " of size ", size));
    const int64_t* p = idx.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) a.base[size_t(i)] += (p[i] - 1) * a.self.stride(int(j));
  }
  a.rest = rest_offsets(a.self, list.size());
}

// On a CUDA device: the index tensors as the rows of one {k, nb} int64 tensor there, and what
// each position is checked against (the CPU's check_range wording).
Tensor index_rows(const Advanced& a, const OpCall& c, std::vector<std::string>& whats) {
  const std::vector<Tensor> list = c.tensors(1);
  const int64_t n = shape_numel(a.b), k = int64_t(list.size());
  for (int64_t j = 0; j < k; ++j) {
    const int64_t size = a.self.size(int(j));
    if (size == 0 && n > 0) fail(cat("index is out of range for dim ", j + 1, " of size 0, which is empty (no index is valid)"));
    whats.push_back(cat("dim ", j + 1, " of size ", size));
  }
  // one int64 index of the selection's shape, dense on the device: read where it lies (a static
  // KV cache's write at a position held on the device runs one kernel, not two)
  if (k == 1 && list[0].dtype() == DType::i64 && list[0].device() == a.self.device() && list[0].sizes() == a.b &&
      list[0].is_contiguous())
    return Tensor::view_of(list[0], {1, n}, {n, 1}, list[0].offset());
  Tensor rows = Tensor::empty({k, n}, DType::i64, a.self.device());
  for (int64_t j = 0; j < k; ++j)  // (broadcast, as int64)
    copy_into(Tensor::view_of(rows, a.b, contiguous_strides(a.b), j * n), list[size_t(j)]);
  return rows;
}

std::vector<Meta> infer_index(OpCall& c) {
  Advanced a = prepare_advanced(c);
  return {{a.shape, a.self.dtype(), a.self.device()}};
}

void run_index(OpCall& c) {
  Advanced a = prepare_advanced(c);
  if (!a.self.device().is_cpu()) {
    std::vector<std::string> whats;
    const Tensor rows = index_rows(a, c, whats);
    return cuda::index_gather(c.ctx, c.outs[0], a.self, rows, c.def.name, whats);
  }
  locate(a, c);
  const Tensor& out = c.outs[0];
  visit_width(a.self.itemsize(), [&](auto w) {
    using W = decltype(w);
    const W* xp = static_cast<const W*>(a.self.storage()->data);
    W* op = out.data<W>();
    for (int64_t b : a.base)
      for (int64_t r : a.rest) *op++ = xp[b + r];
  });
}

// o += v in the dtype's arithmetic (integers wrap, bool is "or"), as index_add
template <class T> void accumulate(T& o, const T& v) {
  if constexpr (std::is_same_v<T, bool>) o = o || v;
  else if constexpr (std::is_integral_v<T>) o = wrapping_add(o, v);
  else store(o, load(o) + load(v));
}

// Writes values (broadcast to the selection's shape) into the selected elements of a.self.
void put(Advanced& a, const OpCall& c, Tensor values, bool acc) {
  const Tensor& self = a.self;
  if (values.dim() == 0 && values.device().is_cpu() && !self.device().is_cpu()) values = to_device(values, self.device());
  check_device(self, values);
  if (values.dtype() != self.dtype())
    fail(cat("values expected the destination's dtype ", dtype_name(self.dtype()), " (index_put requires the source and "
             "destination dtypes match), got ", values.describe()));
  if (!broadcasts_to(values.sizes(), a.shape))
    fail(cat("shape mismatch: value tensor of shape ", shape_str(values.sizes()),
             " cannot be broadcast to indexing result of shape ", shape_str(a.shape)));
  if (may_overlap(self, values)) {  // x[i] = x[j]: read every value before the first write
    Tensor copy = Tensor::empty(values.sizes(), values.dtype(), values.device());
    copy_into(copy, values);
    values = copy;
  }
  if (!self.device().is_cpu()) {  // (read through the broadcast view's strides: no copy of a permuted source)
    std::vector<std::string> whats;
    const Tensor rows = index_rows(a, c, whats);
    const Tensor view = Tensor::view_of(values, a.shape, broadcast_strides(values, a.shape), values.offset());
    return cuda::index_put(c.ctx, self, rows, view, acc, c.def.name, whats);
  }
  const Tensor v = expanded(values, a.shape);
  locate(a, c);
  visit(self.dtype(), [&](auto t) {
    using T = decltype(t);
    T* xp = reinterpret_cast<T*>(self.storage()->data);
    const T* vp = v.data<T>();
    for (int64_t b : a.base)
      for (int64_t r : a.rest) {
        if (acc) accumulate(xp[b + r], *vp);
        else xp[b + r] = *vp;
        ++vp;
      }
  });
}

void run_index_put_(OpCall& c) {
  writable(c, 0);  // rejects expanded views
  Advanced a = prepare_advanced(c);
  for (const Tensor& t : c.tensors(1))
    if (may_overlap(a.self, t)) fail("an index shares memory with the tensor written in place: clone() it first");
  put(a, c, c.tensor(2), c.boolean_or(3, false));
}

std::vector<Meta> infer_index_put(OpCall& c) {
  const Tensor self = c.tensor(0);
  return {{self.sizes(), self.dtype(), self.device()}};
}

void run_index_put(OpCall& c) {
  copy_into(c.outs[0], c.tensor(0));
  Advanced a = prepare_advanced(c);
  a.self = c.outs[0];
  put(a, c, c.tensor(2), c.boolean_or(3, false));
}

}  // namespace

void register_selection(Registry& r) {
  // (CUDA: vm/kernels/cuda/select.hpp)
  const int32_t dev = kDeviceAware;
  r.add(OpDef{"masked_select", "self:T, mask:T", OpKind::Index, kDataSize | dev, nullptr, run_masked_select});
  r.add(OpDef{"nonzero", "self:T", OpKind::Index, kDataSize | dev, nullptr, run_nonzero});
  r.add(OpDef{"index", "self:T, indices:TL", OpKind::Index, kValueErrors | kExtern | dev, infer_index, run_index});
  r.add(OpDef{"index_put", "self:T, indices:TL, values:T, accumulate:B?", OpKind::Index, kValueErrors | kExtern | dev,
              infer_index_put, run_index_put});
  r.add(OpDef{"index_put_", "self:T, indices:TL, values:T, accumulate:B?", OpKind::Index,
              kReturnsSelf | kNoFunction | kValueErrors | dev, nullptr, run_index_put_});
  register_scatter_reduce(r);
  register_bincount(r);
}

}  // namespace cr
