// Compiled after the prelude and the launcher's typedefs T (x, y, bias), S (scales) and A (the
// arithmetic: float, double for float64 x) (int8_mm.cpp).
//
// y {m, n} = x {m, k} @ (q * scale)^T (+ bias) for the `_int8_weight_mm` registry op
// (vm/ops/quant.cpp): q {n, kp} int8 (rows padded with zeros to kp, a multiple of 16 bytes),
// one scale per row. For m <= 16 (decoding) a GEMV / small GEMM that reads the weight once at
// full bandwidth: a warp per ROWS rows (1 for m <= 2: more warps in flight; 2 above: x's values
// read from shared memory serve both), 16-byte loads of q, x staged in shared memory (tiles of
// kt columns), sums in A, the scale applied once per output. Larger m: q * scale dequantised
// into x's dtype (int8_dequant), then cuBLAS (the launcher).
#define kWarps 4

// The 4 signed bytes of word v (byte j = column j), exactly as floats: PRMT builds 2^23 + u
// (u = byte + 128) and one subtraction removes the offset: no int -> float conversions.
__forceinline__ void bytes_to_floats(unsigned v, float* f) {
  const unsigned u = v ^ 0x80808080u;
#pragma unroll
  for (int j = 0; j < 4; ++j) f[j] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540u | unsigned(j))) - 8388736.0f;
}

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

template <int MT, int kRows>
__forceinline__ void gemv(const T* x, const uint4* q, const S* scales, const T* bias, T* y, int m, long long n,
                          long long k, long long kp, int kt) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* xs = reinterpret_cast<A*>(smem_raw);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long row0 = ((long long)blockIdx.x * kWarps + warp) * kRows;
  const long long chunks = kp / 16;  // 16-byte chunks of a weight row
  A acc[MT][kRows];
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[mi][r] = A(0);
  const int ct = kt / 16;
  for (long long k0 = 0; k0 < kp; k0 += kt) {
    __syncthreads();  // (the previous tile is read)
    stage_x<MT>(xs, x, m, k, k0, kt, ct);
    __syncthreads();
    const int cn = int((kp - k0) / 16 < ct ? (kp - k0) / 16 : ct);
#pragma unroll 4
    for (int c = lane; c < cn; c += 32) {
      float w[kRows][16];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint4 raw = row0 + r < n ? __ldg(q + (row0 + r) * chunks + k0 / 16 + c) : make_uint4(0, 0, 0, 0);
        bytes_to_floats(raw.x, w[r]);
        bytes_to_floats(raw.y, w[r] + 4);
        bytes_to_floats(raw.z, w[r] + 8);
        bytes_to_floats(raw.w, w[r] + 12);
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          const cr::vec<A, 4> a = cr::loadv<4>(xs + ((mi * 4 + p) * ct + c) * 4);
#pragma unroll
          for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int r = 0; r < kRows; ++r) acc[mi][r] += a.v[j] * A(w[r][p * 4 + j]);
        }
    }
  }
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const A s = cr::warp_reduce(acc[mi][r], cr::Sum{});
      const long long row = row0 + r;
      if (lane == (mi * kRows + r) % 32 && mi < m && row < n)  // (every lane holds the sum: the stores spread)
        y[mi * n + row] = T(s * A(scales[row]) + (bias ? A(bias[row]) : A(0)));
    }
}

#define CR_GEMV(MT, ROWS)                                                                                            \
  extern "C" __global__ void __launch_bounds__(kWarps * 32) int8_gemv_##MT(                                          \
      const T* x, const uint4* q, const S* scales, const T* bias, T* y, int m, long long n, long long k, long long kp, \
      int kt) {                                                                                                      \
    gemv<MT, ROWS>(x, q, scales, bias, y, m, n, k, kp, kt);                                                          \
  }
CR_GEMV(1, 1)
CR_GEMV(2, 1)
CR_GEMV(4, 2)
CR_GEMV(8, 2)
CR_GEMV(16, 2)

// w {n, k} in T = q * scale, a thread per element (grid-stride).
extern "C" __global__ void int8_dequant(const signed char* q, const S* scales, T* w, long long n, long long k,
                                        long long kp) {
  const long long total = n * k;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
    const long long row = e / k, col = e % k;
    w[e] = T(A(q[row * kp + col]) * A(scales[row]));
  }
}
