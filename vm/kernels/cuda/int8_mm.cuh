// Compiled after the prelude and the launcher's typedefs T (x, y, bias), S (scales) and A (the
// arithmetic: float, double for float64 x) (int8_mm.cpp).
//
// y {m, n} = x {m, k} @ (q * scale)^T (+ bias) for the `_int8_weight_mm` registry op
// (vm/ops/quant.cpp): q {n, kp} int8 (rows padded with zeros to kp, a multiple of 16 bytes),
// one scale per row. For m <= 4 (decoding) a GEMV / small GEMM that streams q once: a block of
// kWarps warps = (kWarps / ks) row warps x ks slices of k (ks from the launcher: enough blocks for
// short n), each warp kRows rows at a time, every lane kU x kRows independent 16-byte loads in
// flight, bytes turned into floats in registers, sums in A, the scale applied once per output.
// x is staged in shared memory (tiles of kt columns): once per block when one tile holds it, the
// block then walking row groups grid-stride. Larger m: q * scale dequantised into x's dtype
// (int8_dequant), then cuBLAS (the launcher).
#define kWarps 8

// The 4 signed bytes of word v (byte j = column j), exactly as floats: PRMT builds 2^23 + u
// (u = byte + 128) and one subtraction removes the offset: no int -> float conversions.
__forceinline__ void bytes_to_floats(unsigned v, float* f) {
  const unsigned u = v ^ 0x80808080u;
#pragma unroll
  for (int j = 0; j < 4; ++j) f[j] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540u | unsigned(j))) - 8388736.0f;
}

__forceinline__ unsigned word_of(const uint4& v, int p) { return p == 0 ? v.x : p == 1 ? v.y : p == 2 ? v.z : v.w; }

// Row mi, columns [k0, k0 + kt) of x into shared memory as A, zeros past m and k (the padded
// weight bytes are zeros, but 0 * NaN of uninitialised memory is not). Column kk of the tile sits
// at float4 (mi * 4 + p) * ct + c (c = kk / 16, p = kk % 16 / 4): a warp's lanes read 16
// consecutive chunks c without bank conflicts.
template <int MT>
__forceinline__ void stage_x(A* xs, const T* x, int m, long long k, long long k0, int kt, int ct) {
  for (int e = threadIdx.x; e < MT * kt; e += kWarps * 32) {
    const int mi = e / kt, kk = e % kt;
    const long long col = k0 + kk;
    const A v = mi < m && col < k ? A(x[mi * k + col]) : A(0);
    xs[((mi * 4 + (kk % 16) / 4) * ct + kk / 16) * 4 + kk % 4] = v;
  }
}

// acc[mi][r] += x row mi . the 16 weights of chunk c of row r (raw[r]): each 16-byte read of x
// from shared memory serves kRows rows.
template <int MT, int kRows>
__forceinline__ void accumulate(A (&acc)[MT][kRows], const uint4 (&raw)[kRows], const A* xs, int c, int ct) {
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    float w[kRows][4];
#pragma unroll
    for (int r = 0; r < kRows; ++r) bytes_to_floats(word_of(raw[r], p), w[r]);
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      const cr::vec<A, 4> a = cr::loadv<4>(xs + ((mi * 4 + p) * ct + c) * 4);
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
                                 long long chunks, int cn, int c0, int stride) {
#pragma unroll
  for (int u = 0; u < kU; ++u)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int c = c0 + u * stride;
      raw[u][r] = c < cn && row0 + r < n ? __ldg(q + (row0 + r) * chunks + c) : make_uint4(0, 0, 0, 0);
    }
}

// The k slice of this warp over one x tile: chunks first + i * stride, kU of them loaded (for
// every row) before any is used; `have`: raw already holds the first batch (loaded before x's
// staging, so that the two latencies overlap).
template <int MT, int kRows, int kU>
__forceinline__ void tile_sums(A (&acc)[MT][kRows], uint4 (&raw)[kU][kRows], bool& have, const uint4* q,
                               const A* xs, long long row0, long long n, long long chunks, int cn, int ct, int first,
                               int stride) {
  for (int c0 = first; c0 < cn; c0 += kU * stride) {
    if (!have) load_chunks<kRows, kU>(raw, q, row0, n, chunks, cn, c0, stride);
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

template <int MT, int kRows, int kU>
__forceinline__ void gemv(const T* x, const uint4* q, const S* scales, const T* bias, T* y, int m, long long n,
                          long long k, long long kp, int kt, int ks) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* xs = reinterpret_cast<A*>(smem_raw);
  A* part = xs + MT * kt;  // the slices' sums: [ks][kWarps / ks][MT][kRows]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wr = warp / ks, wk = warp % ks;
  const long long chunks = kp / 16, group = (long long)(kWarps / ks) * kRows;
  const int ct = kt / 16;
  const bool one_tile = kt >= kp;
  uint4 raw[kU][kRows];
  bool have = false;
  if (one_tile) {  // (the first row group's first loads go out before x's)
    const long long first_row = (long long)blockIdx.x * group + (long long)wr * kRows;
    load_chunks<kRows, kU>(raw, q, first_row, n, chunks, int(chunks), wk * 32 + lane, 32 * ks);
    have = true;
    stage_x<MT>(xs, x, m, k, 0, kt, ct);
    __syncthreads();
  }
  for (long long g0 = (long long)blockIdx.x * group; g0 < n; g0 += (long long)gridDim.x * group) {
    const long long row0 = g0 + (long long)wr * kRows;
    A acc[MT][kRows];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[mi][r] = A(0);
    for (long long k0 = 0; k0 < kp; k0 += kt) {
      if (!one_tile) {
        __syncthreads();  // (the previous tile is read)
        stage_x<MT>(xs, x, m, k, k0, kt, ct);
        __syncthreads();
      }
      const int cn = int((kp - k0) / 16 < ct ? (kp - k0) / 16 : ct);
      tile_sums<MT, kRows, kU>(acc, raw, have, q + k0 / 16, xs, row0, n, chunks, cn, ct, wk * 32 + lane, 32 * ks);
    }
    fold_slices<MT, kRows>(acc, part, ks, wr, wk, lane);
    if (wk != 0) continue;
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const long long row = row0 + r;
        if (lane == (mi * kRows + r) % 32 && mi < m && row < n)  // (every lane holds the sum: the stores spread)
          y[mi * n + row] = T(acc[mi][r] * A(scales[row]) + (bias ? A(bias[row]) : A(0)));
      }
  }
}

// int8_gemv_MT: m <= MT rows of x; kRows rows of q per warp, kU chunks per lane per load batch
// (as int8_mm.cpp's gemv_rows).
#define CR_GEMV(MT, ROWS, U)                                                                                         \
  extern "C" __global__ void __launch_bounds__(kWarps * 32) int8_gemv_##MT(                                          \
      const T* x, const uint4* q, const S* scales, const T* bias, T* y, int m, long long n, long long k, long long kp, \
      int kt, int ks) {                                                                                              \
    gemv<MT, ROWS, U>(x, q, scales, bias, y, m, n, k, kp, kt, ks);                                                   \
  }
CR_GEMV(1, 4, 2)
CR_GEMV(2, 4, 2)
CR_GEMV(4, 4, 1)

// w {n, k} in T = q * scale, a thread per element (grid-stride).
extern "C" __global__ void int8_dequant(const signed char* q, const S* scales, T* w, long long n, long long k,
                                        long long kp) {
  const long long total = n * k;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
    const long long row = e / k, col = e % k;
    w[e] = T(A(q[row * kp + col]) * A(scales[row]));
  }
}
