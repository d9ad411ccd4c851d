// A stable LSD radix sort of one long line for the CPU sort (vm/ops/sorting.cpp): 8-bit digits of
// an unsigned key whose order is sort's, passes whose digit is the same for every value skipped.
// Each pass counts and moves contiguous pieces of the line in order, so the result (the stable
// order, unique) is the same on any number of threads.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "vm/alloc.hpp"
#include "vm/dtype.hpp"
#include "vm/threads.hpp"

namespace cr {

// The key of a value of compute type C: NaN above every number (one key for all NaN), -0 equal
// to +0, descending the complement (NaN first). decode inverts it but for zeros and NaN (exact()
// false: their sign and payload are read from the input).
template <class C> struct RadixKey {
  using U = std::conditional_t<sizeof(C) <= 4, uint32_t, uint64_t>;
  static constexpr U kTop = U(1) << (sizeof(U) * 8 - 1);
  bool descending;
  U encode(C v) const { return descending ? ~plain(v) : plain(v); }
  static U plain(C v) {
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(v)) return ~U(0);
      if (v == 0) v = 0;
      U b;
      std::memcpy(&b, &v, sizeof b);
      return b & kTop ? ~b : b | kTop;
    } else if constexpr (std::is_same_v<C, bool> || std::is_unsigned_v<C>) {
      return U(v);
    } else {
      return U(std::make_signed_t<U>(v)) ^ kTop;
    }
  }
  C decode(U k) const {
    if (descending) k = ~k;
    if constexpr (std::is_floating_point_v<C>) {
      const U b = k & kTop ? k ^ kTop : ~k;
      C v;
      std::memcpy(&v, &b, sizeof v);
      return v;
    } else if constexpr (std::is_same_v<C, bool>) {
      return k != 0;
    } else if constexpr (std::is_unsigned_v<C>) {
      return C(k);
    } else {
      return C(std::make_signed_t<U>(k ^ kTop));
    }
  }
  static bool exact(C v) {
    if constexpr (std::is_floating_point_v<C>) return v != 0 && !std::isnan(v);
    else return true;
  }
};

// The n 32-bit positions in the first (low) or second half of idx's bytes, widened in place to
// 1-based int64: serially, in the order that reads each position before its bytes are written.
inline void widen_positions(int64_t* idx, bool low, int64_t n) {
  char* b = reinterpret_cast<char*>(idx);
  auto widen = [&](int64_t i) {
    uint32_t q;
    std::memcpy(&q, b + (low ? 0 : 4 * n) + 4 * i, 4);
    const int64_t v = int64_t(q) + 1;
    std::memcpy(b + 8 * i, &v, 8);
  };
  if (low) for (int64_t i = n - 1; i >= 0; --i) widen(i);
  else for (int64_t i = 0; i < n; ++i) widen(i);
}

// Sorts the n values src[i * ss] stably in sort's order: the values to vals[i * vs], their 1-based
// positions to idx[i * is]. parts: pieces the passes run in over the pool (1: serially here).
// Lines of 2^32 or more elements are not taken (false).
template <class T> bool radix_sort_line(const T* src, int64_t ss, int64_t n, bool descending, T* vals, int64_t vs,
                                        int64_t* idx, int64_t is, int64_t parts) {
  using C = compute_t<T>;
  using K = RadixKey<C>;
  using U = typename K::U;
  if (n >= (int64_t(1) << 32)) return false;
  const K key{descending};
  // Contiguous results double as buffers (fewer fresh pages): the indices hold both position
  // arrays, the values the second key array when a value is as wide as its key.
  const bool keys_in_vals = vs == 1 && sizeof(T) == sizeof(U), pos_in_idx = is == 1;
  Scratch<U> ka{size_t(n)}, kb{keys_in_vals ? 1 : size_t(n)};
  Scratch<uint32_t> pab{pos_in_idx ? 1 : 2 * size_t(n)};
  uint32_t* pa = pos_in_idx ? reinterpret_cast<uint32_t*>(idx) : pab.p;
  uint32_t* pb = pa + n;
  auto lo = [&](int64_t p) { return n * p / parts; };
  auto each_part = [&](auto&& fn) {
    parallel_for(parts, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) fn(p, lo(p), lo(p + 1));
    });
  };
  std::vector<U> any(size_t(parts), 0), all(size_t(parts), ~U(0));  // bits set in some / every key
  each_part([&](int64_t p, int64_t i0, int64_t i1) {
    U o = 0, a = ~U(0);
    for (int64_t i = i0; i < i1; ++i) {
      const U k = key.encode(C(load(src[i * ss])));
      ka.p[i] = k, pa[i] = uint32_t(i), o |= k, a &= k;
    }
    any[size_t(p)] = o, all[size_t(p)] = a;
  });
  U some = 0, every = ~U(0);
  for (int64_t p = 0; p < parts; ++p) some |= any[size_t(p)], every &= all[size_t(p)];
  const U varies = some ^ every;  // the bits that differ between keys: a digit without any is one for all
  U *k0 = ka.p, *k1 = keys_in_vals ? reinterpret_cast<U*>(vals) : kb.p;
  uint32_t *q0 = pa, *q1 = pb;
  std::vector<int64_t> at(size_t(parts) * 256);  // a part's next slot of each digit
  for (int shift = 0; shift < int(sizeof(U) * 8); shift += 8) {
    if ((varies >> shift & 255) == 0) continue;
    std::fill(at.begin(), at.end(), 0);
    each_part([&](int64_t p, int64_t i0, int64_t i1) {
      int64_t* c = &at[size_t(p) * 256];
      for (int64_t i = i0; i < i1; ++i) ++c[k0[i] >> shift & 255];
    });
    int64_t run = 0;
    for (int d = 0; d < 256; ++d) {
      for (int64_t p = 0; p < parts; ++p) {
        const int64_t c = at[size_t(p * 256 + d)];
        at[size_t(p * 256 + d)] = run;
        run += c;
      }
    }
    each_part([&](int64_t p, int64_t i0, int64_t i1) {
      int64_t* o = &at[size_t(p) * 256];
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t j = o[k0[i] >> shift & 255]++;
        k1[j] = k0[i], q1[j] = q0[i];
      }
    });
    std::swap(k0, k1), std::swap(q0, q1);
  }
  each_part([&](int64_t, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const C v = key.decode(k0[i]);
      T out;
      store(out, K::exact(v) ? v : C(load(src[int64_t(q0[i]) * ss])));
      std::memcpy(&vals[i * vs], &out, sizeof(T));  // (over its own key when k0 is vals)
    }
  });
  if (pos_in_idx) return widen_positions(idx, q0 == pa, n), true;
  each_part([&](int64_t, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) idx[i * is] = int64_t(q0[i]) + 1;
  });
  return true;
}

}  // namespace cr
