// Compiled after the prelude and the launcher's typedefs T (x, y, bias, residual), W
// (w's elements: T, or signed char for int8 weights), S (int8 weights' scales) and A (the
// arithmetic: float, double for float64 x) (gemv.cpp).
//
// y {m, n} = act(x {m, k} @ (w * scale)^T + bias) + residual for m <= 4 (decoding; 16 for int8
// w): a GEMV / small GEMM that streams w once. w's rows are `pitch` 16-byte chunks apart, each
// holding kCols columns (Chunk<W>), the first kp / kCols chunks of a row read (int8 rows are padded
// with zeros to kp). A block of kWarps warps = (kWarps / ks) row warps x ks slices of k (ks from
// the launcher: enough blocks for short n), each warp kRows rows at a time, every lane kU x kRows
// independent 16-byte loads in flight, sums in A, the scale, bias, activation and residual
// applied once per output. x is staged in shared memory as A (tiles of kt columns): once per
// block when one tile holds it, the block then walking row groups grid-stride.
#define kWarps 8

// The 4 signed bytes of word v (byte j = column j), exactly as floats: PRMT builds 2^23 + u
// (u = byte + 128) and one subtraction removes the offset: no int -> float conversions.
__forceinline__ void bytes_to_floats(unsigned v, float* f) {
  const unsigned u = v ^ 0x80808080u;
#pragma unroll
  for (int j = 0; j < 4; ++j) f[j] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540u | unsigned(j))) - 8388736.0f;
}

__forceinline__ unsigned word_of(const uint4& v, int p) { return p == 0 ? v.x : p == 1 ? v.y : p == 2 ? v.z : v.w; }

// A 16-byte chunk of a row of w holds kCols columns; four(v, p, f) gives its columns 4p .. 4p + 3
// as floats (16-bit floats: two a word, the low half first).
template <class X> struct Chunk;
template <> struct Chunk<signed char> {
  static constexpr int kCols = 16;
  static __forceinline__ void four(const uint4& v, int p, float* f) { bytes_to_floats(word_of(v, p), f); }
};
template <> struct Chunk<float> {
  static constexpr int kCols = 4;
  static __forceinline__ void four(const uint4& v, int, float* f) {
    f[0] = __uint_as_float(v.x), f[1] = __uint_as_float(v.y), f[2] = __uint_as_float(v.z), f[3] = __uint_as_float(v.w);
  }
};
template <> struct Chunk<cr::bf16_t> {
  static constexpr int kCols = 8;
  static __forceinline__ void four(const uint4& v, int p, float* f) {
    const unsigned a = p == 0 ? v.x : v.z, b = p == 0 ? v.y : v.w;
    f[0] = __uint_as_float(a << 16), f[1] = __uint_as_float(a & 0xffff0000u);
    f[2] = __uint_as_float(b << 16), f[3] = __uint_as_float(b & 0xffff0000u);
  }
};
template <> struct Chunk<cr::half_t> {
  static constexpr int kCols = 8;
  static __forceinline__ void four(const uint4& v, int p, float* f) {
    const unsigned a = p == 0 ? v.x : v.z, b = p == 0 ? v.y : v.w;
    const unsigned short h[4] = {(unsigned short)(a & 0xffffu), (unsigned short)(a >> 16),
                                 (unsigned short)(b & 0xffffu), (unsigned short)(b >> 16)};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      cr::half_t x;
      x.bits = h[j];
      f[j] = float(x);
    }
  }
};

constexpr int kCols = Chunk<W>::kCols, kGroups = kCols / 4;  // (groups of 4 columns a chunk)

// Columns [k0, k0 + kt) of x's MT rows into shared memory as A, zeros past m and k (int8 rows'
// padding is zeros, but 0 * NaN of uninitialised memory is not), each thread's MT loads in flight
// at once. Column kk sits at float4 (mi * kGroups + g) * ct + c (c = kk / kCols, g = kk % kCols /
// 4): a warp's lanes read consecutive chunks c without bank conflicts.
template <int MT>
__forceinline__ void stage_x(A* xs, const T* x, long long ldx, int m, long long k, long long k0, int kt, int ct) {
  for (int kk = threadIdx.x; kk < kt; kk += kWarps * 32) {
    const long long col = k0 + kk;
    A v[MT];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) v[mi] = mi < m && col < k ? A(x[mi * ldx + col]) : A(0);
    A* at = xs + ((kk % kCols) / 4 * ct + kk / kCols) * 4 + kk % 4;
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) at[mi * kGroups * ct * 4] = v[mi];
  }
}

// acc[mi][r] += x row mi . the kCols weights of chunk c of row r (raw[r]): each 16-byte read of
// x from shared memory serves kRows rows. From 8 rows of x on, the column groups stay a loop
// (unrolled, the body outgrows the instruction cache).
template <int MT, int kRows>
__forceinline__ void accumulate(A (&acc)[MT][kRows], const uint4 (&raw)[kRows], const A* xs, int c, int ct) {
#pragma unroll(MT >= 8 ? 1 : kGroups)
  for (int g = 0; g < kGroups; ++g) {
    float w[kRows][4];
#pragma unroll
    for (int r = 0; r < kRows; ++r) Chunk<W>::four(raw[r], g, w[r]);
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      const cr::vec<A, 4> a = cr::loadv<4>(xs + ((mi * kGroups + g) * ct + c) * 4);
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[mi][r] += a.v[j] * A(w[r][j]);
    }
  }
}

// Chunks c0 + u * stride (u < kU) of rows row0 .. row0 + kRows (zeros past cn and n).
template <int kRows, int kU>
__forceinline__ void load_chunks(uint4 (&raw)[kU][kRows], const uint4* q, long long row0, long long n,
                                 long long pitch, int cn, int c0, int stride) {
#pragma unroll
  for (int u = 0; u < kU; ++u)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int c = c0 + u * stride;
      raw[u][r] = c < cn && row0 + r < n ? __ldg(q + (row0 + r) * pitch + c) : make_uint4(0, 0, 0, 0);
    }
}

// The k slice of this warp over one x tile: chunks first + i * stride, kU of them loaded (for
// every row) before any is used; `have`: raw already holds the first batch (loaded before x's
// staging, so that the two latencies overlap).
template <int MT, int kRows, int kU>
__forceinline__ void tile_sums(A (&acc)[MT][kRows], uint4 (&raw)[kU][kRows], bool& have, const uint4* q,
                               const A* xs, long long row0, long long n, long long pitch, int cn, int ct, int first,
                               int stride) {
  for (int c0 = first; c0 < cn; c0 += kU * stride) {
    if (!have) load_chunks<kRows, kU>(raw, q, row0, n, pitch, cn, c0, stride);
    have = false;
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (c0 + u * stride < cn) accumulate<MT, kRows>(acc, raw[u], xs, c0 + u * stride, ct);
  }
  have = false;
}

// Every lane of the group's row warps (slice 0) gets the full sums: the ks slices' warp sums
// added in slice order through shared memory `part`.
template <int MT, int kRows>
__forceinline__ void fold_slices(A (&acc)[MT][kRows], A* part, int ks, int wr, int wk, int lane) {
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[mi][r] = cr::warp_reduce(acc[mi][r], cr::Sum{});
  if (ks == 1) return;
  const int rw = kWarps / ks;
  if (lane == 0)
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int r = 0; r < kRows; ++r) part[((wk * rw + wr) * MT + mi) * kRows + r] = acc[mi][r];
  __syncthreads();
  if (wk == 0)
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        A s = A(0);
        for (int j = 0; j < ks; ++j) s += part[((j * rw + wr) * MT + mi) * kRows + r];
        acc[mi][r] = s;
      }
  __syncthreads();  // (part is reused by the next row group)
}

struct Out {
  const S* scales;  // per row of w, or null
  const T *bias, *res;  // {n} / {m, n} contiguous, or null
  T* y;
  int act;  // vm/cuda/blaslt.hpp Epilogue: 0 none, 1 relu, 2 gelu's tanh form
};

// Output (mi, col) from its sum: scale, bias, activation, residual, one rounding to T.
__forceinline__ void finish(const Out& o, int mi, long long n, long long col, A sum) {
  const long long at = mi * n + col;
  A v = sum * (o.scales ? A(o.scales[col]) : A(1)) + (o.bias ? A(o.bias[col]) : A(0));
  v = o.act == 1 ? sm::relu_(v) : o.act == 2 ? sm::gelu_tanh_(v) : v;
  o.y[at] = T(o.res ? v + A(o.res[at]) : v);
}

// CL > 1 (sm_90): a cluster of CL blocks shares each row group, block `rank` taking the rank-th
// CL-th of k's chunks (and staging only that part of x); the ranks' sums meet in rank 0's shared
// memory (one barrier a row group, two buffers) and are added there in rank order.
template <int MT, int kRows, int kU, int CL>
__forceinline__ void gemv(const T* x, long long ldx, const uint4* q, long long pitch, Out o, int m, long long n,
                          long long k, long long kp, int kt, int ks, int pre) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* xs = reinterpret_cast<A*>(smem_raw);
  A* part = xs + MT * kt;  // the slices' sums: [ks][kWarps / ks][MT][kRows]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wr = warp / ks, wk = warp % ks;
  const long long group = (long long)(kWarps / ks) * kRows, block = blockIdx.x / CL, blocks = gridDim.x / CL;
  unsigned rank = 0;
#if __CUDA_ARCH__ >= 900
  if constexpr (CL > 1) rank = cr::cluster_rank();
#endif
  // this block's chunks of every row: [c0, c0 + chunks)
  const long long all = kp / kCols, per = (all + CL - 1) / CL, c0 = rank * per < all ? rank * per : all;
  const long long chunks = all - c0 < per ? all - c0 : per, kb = c0 * kCols, kl = chunks * kCols;
  q += c0;
  for (int r = 0; r < kRows; ++r) {  // (the first row group's w)
    const long long row = block * group + (long long)wr * kRows + r;
    if (row < n)
      for (long long c = wk * 32 + lane; c < chunks; c += 32 * ks) cr::to_l2(q + row * pitch + c);
  }
  // the first row group's first loads go out before x's; before the wait when w is settled
  // (`pre`: no kernel in flight writes it)
  const int ct = kt / kCols;
  const bool one_tile = kt >= kl;
  uint4 raw[kU][kRows];
  bool have = false;
  auto first_loads = [&] {
    const long long first_row = block * group + (long long)wr * kRows;
    load_chunks<kRows, kU>(raw, q, first_row, n, pitch, int(chunks), wk * 32 + lane, 32 * ks);
    have = true;
  };
  if (one_tile && pre) first_loads();
  cr::grid_wait();
  if (one_tile) {
    if (!have) first_loads();
    stage_x<MT>(xs, x, ldx, m, k, kb, kt, ct);
    __syncthreads();
  }
  int parity = 0;
  for (long long g0 = block * group; g0 < n; g0 += blocks * group, parity ^= 1) {
    const long long row0 = g0 + (long long)wr * kRows;
    A acc[MT][kRows];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[mi][r] = A(0);
    for (long long k0 = 0; k0 < kl; k0 += kt) {
      if (!one_tile) {
        __syncthreads();  // (the previous tile is read)
        stage_x<MT>(xs, x, ldx, m, k, kb + k0, kt, ct);
        __syncthreads();
      }
      const int cn = int((kl - k0) / kCols < ct ? (kl - k0) / kCols : ct);
      tile_sums<MT, kRows, kU>(acc, raw, have, q + k0 / kCols, xs, row0, n, pitch, cn, ct, wk * 32 + lane, 32 * ks);
    }
    fold_slices<MT, kRows>(acc, part, ks, wr, wk, lane);
    // every lane holds every sum: lane o % 32 finishes output o = mi * kRows + r (one epilogue
    // a lane per 32 outputs, not one per output, which a branch per output would inline)
    constexpr int kOut = (MT * kRows + 31) / 32;
    A mine[kOut];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (lane == (mi * kRows + r) % 32) mine[(mi * kRows + r) / 32] = acc[mi][r];
#if __CUDA_ARCH__ >= 900
    if constexpr (CL > 1) {
      // (rank 0's: every rank's sums, [2][CL][kWarps][MT * kRows] after the slices' sums)
      A* ranks = part + (ks > 1 ? kWarps * MT * kRows : 0) + parity * CL * kWarps * MT * kRows;
      if (wk == 0)
#pragma unroll
        for (int j = 0; j < kOut; ++j)
          if (j * 32 + lane < MT * kRows)
            cr::cluster_store(&ranks[(rank * kWarps + wr) * MT * kRows + j * 32 + lane], 0u, mine[j]);
      cr::cluster_sync();
      if (rank != 0 || wk != 0) continue;
#pragma unroll
      for (int j = 0; j < kOut; ++j)
        if (j * 32 + lane < MT * kRows) {
          A v = A(0);
#pragma unroll
          for (int c = 0; c < CL; ++c) v += ranks[(c * kWarps + wr) * MT * kRows + j * 32 + lane];
          mine[j] = v;
        }
    }
#endif
    if (wk != 0) continue;
#pragma unroll
    for (int j = 0; j < kOut; ++j) {
      const int out = j * 32 + lane, mi = out / kRows;
      const long long row = row0 + out % kRows;
      if (out < MT * kRows && mi < m && row < n) finish(o, mi, n, row, mine[j]);
    }
  }
}

// gemv_MT: m <= MT rows of x; kRows rows of w per warp, kU chunks per lane per load batch
// (as gemv.cpp's kRows); gemv_MT_cCL: clusters of CL blocks splitting k (sm_90).
#define CR_GEMV(MT, ROWS, U, CL, NAME)                                                                               \
  extern "C" __global__ void __launch_bounds__(kWarps * 32) CR_CLUSTER(CL)                                           \
      NAME(const T* x, long long ldx, const uint4* q, long long pitch, Out o, int m, long long n, long long k,         \
           long long kp, int kt, int ks, int pre) {                                                                  \
    gemv<MT, ROWS, U, CL>(x, ldx, q, pitch, o, m, n, k, kp, kt, ks, pre);                                             \
  }
#define CR_CLUSTER(CL)
CR_GEMV(1, 4, kCols == 16 ? 2 : 4, 1, gemv_1)  // (a float row's chunk is 4 or 8 columns: more loads in flight)
CR_GEMV(2, 4, 2, 1, gemv_2)
CR_GEMV(4, 4, 1, 1, gemv_4)
#ifndef CR_DENSE_W  // (int8 weights take up to 16 rows: gemv.hpp kInt8GemvRows)
CR_GEMV(8, 4, 1, 1, gemv_8)
CR_GEMV(16, 4, 2, 1, gemv_16)  // (its long rows of k wait on the loads: two batches in flight)
#undef CR_CLUSTER
#if __CUDA_ARCH__ >= 900
#define CR_CLUSTER(CL) __cluster_dims__(CL, 1, 1)
CR_GEMV(8, 4, 1, 4, gemv_8_c4)
CR_GEMV(16, 4, 2, 4, gemv_16_c4)
#endif
#endif
#undef CR_CLUSTER

#ifdef CR_DENSE_W  // (float weights: the launcher defines it)
// w {k, n} (matmul's, GPT-2 Conv1D's): LC lanes a tile of LC 16-byte chunks of a row, 32 / LC rows
// a warp step; warps and a cluster's CL blocks split k; each block sums a CL-th of the tile's
// columns in rank order from the partials the others stored into its shared memory (one barrier).
template <int MT, int LC, int CL>
__forceinline__ void gemv_kn(const T* x, long long ldx, const uint4* w, long long pitch, Out o, int m, long long n,
                             long long k, int pre) {
  constexpr int R = 32 / LC, TW = LC * kCols, kU = 4;
  __shared__ A part[kWarps][MT * TW];  // the warps' sums
  // the block's sums (CL == 1), or the cluster's partials of this block's slice: [source rank][slice]
  __shared__ float tile[MT * TW];
  constexpr int slice = MT * TW / CL;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, lc = lane % LC, lr = lane / LC;
  const long long t = blockIdx.x / CL, chunk = t * LC + lc, chunks = n / kCols;
  int rank = 0;
#if __CUDA_ARCH__ >= 900
  if (CL > 1) rank = int(cr::cluster_rank());
#endif
  const long long per = (k + CL - 1) / CL, k0 = rank * per, k1 = k0 + per < k ? k0 + per : k;
  constexpr long long step = (long long)kWarps * R;
  const long long rs = k0 + warp * R + lr;
  // `pre` (w settled: no kernel in flight writes it): one-row products hold their first kPre
  // loads in registers before the wait, not only in L2 (more registers slowed larger products)
  constexpr int kPre = MT == 1 ? 4 : 1;
  uint4 held[kPre];
  long long rest = rs;
  if (MT == 1 && pre) {
#pragma unroll
    for (int p = 0; p < kPre; ++p) {
      const long long r = rs + p * step;
      held[p] = r < k1 && chunk < chunks ? __ldg(w + r * pitch + chunk) : make_uint4(0, 0, 0, 0);
    }
    rest = rs + kPre * step;
  }
  if (chunk < chunks)
    for (long long r = rest; r < k1; r += step) cr::to_l2(w + r * pitch + chunk);
  cr::grid_wait();
  A acc[MT][kCols];
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc[mi][j] = A(0);
  auto add_row = [&](const uint4& raw, long long r) {
    float f[kCols];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) Chunk<W>::four(raw, g, f + 4 * g);
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      const A xv = mi < m ? A(x[mi * ldx + r]) : A(0);
#pragma unroll
      for (int j = 0; j < kCols; ++j) acc[mi][j] += xv * A(f[j]);
    }
  };
  if (MT == 1 && pre)
#pragma unroll
    for (int p = 0; p < kPre; ++p)
      if (rs + p * step < k1) add_row(held[p], rs + p * step);
  for (long long r0 = rest; r0 < k1; r0 += step * kU) {
    uint4 raw[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const long long r = r0 + u * step;
      raw[u] = r < k1 && chunk < chunks ? __ldg(w + r * pitch + chunk) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const long long r = r0 + u * step;
      if (r >= k1) break;
      add_row(raw[u], r);
    }
  }
  // the warp's rows folded (xor butterflies over the lanes of a column), then the warps in order
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
#pragma unroll
      for (int s = LC; s < 32; s *= 2) acc[mi][j] += cr::shfl_xor(acc[mi][j], s);
      if (lr == 0) part[warp][mi * TW + lc * kCols + j] = acc[mi][j];
    }
  __syncthreads();
  for (int e = threadIdx.x; e < MT * TW; e += kWarps * 32) {
    A s = A(0);
#pragma unroll
    for (int v = 0; v < kWarps; ++v) s += part[v][e];
#if __CUDA_ARCH__ >= 900
    if constexpr (CL > 1) {
      cr::cluster_store(&tile[rank * slice + e % slice], unsigned(e / slice), float(s));
      continue;
    }
#endif
    tile[e] = float(s);
  }
  int e0 = 0, e1 = MT * TW;
#if __CUDA_ARCH__ >= 900
  if (CL > 1) {
    cr::cluster_sync();  // (then each block reads only its own shared memory, and may leave)
    e0 = rank * slice, e1 = e0 + slice;
  } else
#endif
    __syncthreads();
  for (int e = e0 + threadIdx.x; e < e1; e += kWarps * 32) {
    const int mi = e / TW;
    const long long col = t * TW + e % TW;
    if (mi >= m || col >= n) continue;
    A v = A(0);
    if constexpr (CL > 1) {
#pragma unroll
      for (int r = 0; r < CL; ++r) v += A(tile[r * slice + (e - e0)]);
    } else {
      v = A(tile[e]);
    }
    finish(o, mi, n, col, v);  // (o.scales: null for float weights)
  }
}

// gemv_kn_MT_LC_CL: m <= MT rows of x, LC lanes a row of w, clusters of CL blocks (sm_90).
#define CR_GEMV_KN(MT, LC, CL)                                                                                    \
  extern "C" __global__ void __launch_bounds__(kWarps * 32) CR_CLUSTER(CL) gemv_kn_##MT##_##LC##_##CL(           \
      const T* x, long long ldx, const uint4* w, long long pitch, Out o, int m, long long n, long long k, int pre) { \
    gemv_kn<MT, LC, CL>(x, ldx, w, pitch, o, m, n, k, pre);                                                       \
  }
#define CR_GEMV_KN_LC(MT, CL) CR_GEMV_KN(MT, 32, CL) CR_GEMV_KN(MT, 16, CL) CR_GEMV_KN(MT, 8, CL)
#define CR_CLUSTER(CL)
CR_GEMV_KN_LC(1, 1)
CR_GEMV_KN_LC(2, 1)
CR_GEMV_KN_LC(4, 1)
#undef CR_CLUSTER
#if __CUDA_ARCH__ >= 900
#define CR_CLUSTER(CL) __cluster_dims__(CL, 1, 1)
CR_GEMV_KN_LC(1, 8)
CR_GEMV_KN_LC(2, 8)
CR_GEMV_KN_LC(4, 8)
#endif
#endif
