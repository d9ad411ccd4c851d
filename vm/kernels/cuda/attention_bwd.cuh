// The attention backward kernels (FlashAttention-2's), compiled after the prelude,
// attention_common.cuh and the launcher's T (q's dtype), E, EV, BR, BC (attention_bwd.cpp).
//
// q, k, v, out, dout, dq, dk, dv are contiguous {bh, rows, size}; lse {bh, L} is the forward's
// row logsumexp (natural log) of the scaled, masked scores, so p = exp(s * scale + mask - lse)
// is recomputed per tile and the {L, S} matrices never reach memory:
//   attention_bwd_dot   delta = rowsum(dout * out), a warp per row
//   attention_bwd_kv    a block per BC keys walks the query rows in tiles of BR:
//                       dv += p^T dout, dp = dout v^T, ds = p (dp - delta), dk += ds^T q * scale
//   attention_bwd_q     a block per BR query rows walks the keys: dq += ds k * scale
// dq in its own pass (not atomics): every sum runs in a fixed order, so the gradients are
// deterministic. Tiles live in shared memory as float (pitch + 1: the column reads of k and v
// hit distinct banks), the accumulators in registers.
#define NT 128
#define PE (E + 1)
#define PV (EV + 1)
#define PB (BC + 1)

// Rows [row0, row0 + ROWS) of a {rows, W} head as floats, pitch P; rows at or past `end` are 0.
template <int ROWS, int W, int P>
__device__ __forceinline__ void load_tile(float* dst, const T* src, int row0, int end) {
  for (int i = threadIdx.x; i < ROWS * W; i += NT) {
    const int r = i / W, c = i - r * W, row = row0 + r;
    dst[r * P + c] = row < end ? float(src[(long long)row * W + c]) : 0.f;
  }
}

// p and ds of the BR x BC tile of query rows row0.. and keys key0..: ps and dss (pitch PB).
// Scores of rows past L, keys past S, masked or above a causal diagonal give p = 0. Thread t
// takes rows RT (t / 8) + a (a < RT) and keys t % 8 + 8 c (c < CT): RT + CT reads from shared
// memory per RT x CT FMAs, the 8 keys of a warp's reads in distinct banks.
#define RT (BR / 16)
#define CT (BC / 8)
// acc[a][c] = the dot of rows r0 + a of `rows` and j0 + 8 c of `cols` (W elements, pitch P).
template <int W, int P>
__device__ __forceinline__ void tile_dots(float (&acc)[RT][CT], const float* rows, const float* cols, int r0, int j0) {
#pragma unroll 4
  for (int e = 0; e < W; ++e) {
    float rv[RT], cv[CT];
#pragma unroll
    for (int a = 0; a < RT; ++a) rv[a] = rows[(r0 + a) * P + e];
#pragma unroll
    for (int c = 0; c < CT; ++c) cv[c] = cols[(j0 + 8 * c) * P + e];
#pragma unroll
    for (int a = 0; a < RT; ++a)
#pragma unroll
      for (int c = 0; c < CT; ++c) acc[a][c] = fmaf(rv[a], cv[c], acc[a][c]);
  }
}

__device__ __forceinline__ void tile_grads(float* ps, float* dss, const float* qs, const float* ks, const float* dos,
                                           const float* vs, const float* lses, const float* deltas, int row0,
                                           int key0, int L, int S, float scale_log2, int causal, const void* mask,
                                           int mask_kind, long long msr, long long msc) {
  const int r0 = RT * (threadIdx.x >> 3), j0 = threadIdx.x & 7;
  float s[RT][CT] = {}, dp[RT][CT] = {};
  tile_dots<E, PE>(s, qs, ks, r0, j0);
  tile_dots<EV, PV>(dp, dos, vs, r0, j0);
#pragma unroll
  for (int a = 0; a < RT; ++a)
#pragma unroll
    for (int c = 0; c < CT; ++c) {
      const int r = r0 + a, j = j0 + 8 * c, row = row0 + r, key = key0 + j;
      float p = 0.f;
      if (row < L && key < S && !(causal && key > row)) {
        const float m = mask_kind ? mask_term<T>(mask, mask_kind, msr, msc, row, key, L, S) : 0.f;
        p = exp2f(fmaf(s[a][c], scale_log2, m) - lses[r]);
      }
      ps[r * PB + j] = p;
      dss[r * PB + j] = p * (dp[a][c] - deltas[r]);
    }
}

// The row's lse in log2 units and delta of rows row0.. into shared memory (rows past L: 0).
__device__ __forceinline__ void load_rows_stats(float* lses, float* deltas, const float* lse, const float* delta,
                                                int row0, int L) {
  for (int r = threadIdx.x; r < BR; r += NT) {
    const int row = row0 + r;
    lses[r] = row < L ? lse[row] * 1.4426950408889634f : 0.f;
    deltas[r] = row < L ? delta[row] : 0.f;
  }
}

// acc (element at = threadIdx.x + NT i of an X x Y product, row-major) += sum over t < K of
// a[x AX + t AT] b[t BT + y]: dv = p^T dout, dk = ds^T q, dq = ds k by their tiles' pitches.
// Where Y divides NT a thread's elements share y: one read of b per t for all of them.
template <int N, int X, int Y, int K, int AX, int AT, int BT>
__device__ __forceinline__ void accumulate(float (&acc)[N], const float* a, const float* b) {
  if constexpr (NT % Y == 0 && (X * Y) % NT == 0) {
    const int y = threadIdx.x % Y, x0 = threadIdx.x / Y;
#pragma unroll 2
    for (int t = 0; t < K; ++t) {
      const float bv = b[t * BT + y];
#pragma unroll
      for (int i = 0; i < N; ++i) acc[i] = fmaf(a[(x0 + i * (NT / Y)) * AX + t * AT], bv, acc[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int at = threadIdx.x + NT * i, x = at / Y, y = at - x * Y;
      if ((X * Y) % NT != 0 && at >= X * Y) break;
      float v = acc[i];
      for (int t = 0; t < K; ++t) v = fmaf(a[x * AX + t * AT], b[t * BT + y], v);
      acc[i] = v;
    }
  }
}

// Rows row0.. of an X x Y tile of accumulators (times f) into dst (rows of Y), rows before `end`.
template <int N, int X, int Y> __device__ __forceinline__ void store_tile(T* dst, const float (&acc)[N], int row0, int end, float f) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int at = threadIdx.x + NT * i;
    if (at < X * Y && row0 + at / Y < end) dst[(long long)row0 * Y + at] = T(acc[i] * f);
  }
}

extern "C" __global__ void __launch_bounds__(NT) attention_bwd_dot(const T* __restrict__ out, const T* __restrict__ dout,
                                                                 float* __restrict__ delta, long long rows) {
  const long long row = (long long)blockIdx.x * (NT / 32) + (threadIdx.x >> 5);
  if (row >= rows) return;
  float acc = 0.f;
  for (int d = threadIdx.x & 31; d < EV; d += 32) acc = fmaf(float(out[row * EV + d]), float(dout[row * EV + d]), acc);
  acc = cr::warp_reduce(acc, cr::Sum());
  if ((threadIdx.x & 31) == 0) delta[row] = acc;
}

struct Tiles {  // the shared-memory tiles of both kernels
  float qs[BR * PE], dos[BR * PV], ks[BC * PE], vs[BC * PV], ps[BR * PB], dss[BR * PB], lses[BR], deltas[BR];
};

extern "C" __global__ void __launch_bounds__(NT) attention_bwd_kv(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dk, T* __restrict__ dv, int L,
    int S, int heads, int key_blocks, float scale, int causal, const void* __restrict__ mask, int mask_kind,
    long long ms0, long long ms1, long long msr, long long msc) {
  extern __shared__ __align__(16) unsigned char bwd_smem[];
  Tiles& t = *reinterpret_cast<Tiles*>(bwd_smem);
  const long long bh = blockIdx.x / key_blocks;
  const int key0 = int(blockIdx.x - bh * key_blocks) * BC;
  q += bh * L * E, dout += bh * L * EV, lse += bh * L, delta += bh * L;
  k += bh * S * E, v += bh * S * EV, dk += bh * S * E, dv += bh * S * EV;
  mask = mask_of<T>(mask, mask_kind, bh, heads, ms0, ms1);
  const float scale_log2 = scale * 1.4426950408889634f;
  load_tile<BC, E, PE>(t.ks, k, key0, S);
  load_tile<BC, EV, PV>(t.vs, v, key0, S);
  constexpr int NK = (BC * E + NT - 1) / NT, NV = (BC * EV + NT - 1) / NT;
  float ak[NK] = {}, av[NV] = {};
  for (int row0 = causal ? key0 / BR * BR : 0; row0 < L; row0 += BR) {  // (causal: rows before key0 see none)
    __syncthreads();  // (the previous tile's products are done)
    load_tile<BR, E, PE>(t.qs, q, row0, L);
    load_tile<BR, EV, PV>(t.dos, dout, row0, L);
    load_rows_stats(t.lses, t.deltas, lse, delta, row0, L);
    __syncthreads();
    tile_grads(t.ps, t.dss, t.qs, t.ks, t.dos, t.vs, t.lses, t.deltas, row0, key0, L, S, scale_log2, causal, mask,
               mask_kind, msr, msc);
    __syncthreads();
    accumulate<NV, BC, EV, BR, 1, PB, PV>(av, t.ps, t.dos);
    accumulate<NK, BC, E, BR, 1, PB, PE>(ak, t.dss, t.qs);
  }
  store_tile<NV, BC, EV>(dv, av, key0, S, 1.f);
  store_tile<NK, BC, E>(dk, ak, key0, S, scale);
}

extern "C" __global__ void __launch_bounds__(NT) attention_bwd_q(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dq, int L, int S, int heads,
    int row_blocks, float scale, int causal, const void* __restrict__ mask, int mask_kind, long long ms0,
    long long ms1, long long msr, long long msc) {
  extern __shared__ __align__(16) unsigned char bwd_smem[];
  Tiles& t = *reinterpret_cast<Tiles*>(bwd_smem);
  const long long bh = blockIdx.x / row_blocks;
  const int row0 = int(blockIdx.x - bh * row_blocks) * BR;
  q += bh * L * E, dout += bh * L * EV, lse += bh * L, delta += bh * L, dq += bh * L * E;
  k += bh * S * E, v += bh * S * EV;
  mask = mask_of<T>(mask, mask_kind, bh, heads, ms0, ms1);
  const float scale_log2 = scale * 1.4426950408889634f;
  load_tile<BR, E, PE>(t.qs, q, row0, L);
  load_tile<BR, EV, PV>(t.dos, dout, row0, L);
  load_rows_stats(t.lses, t.deltas, lse, delta, row0, L);
  constexpr int NQ = (BR * E + NT - 1) / NT;
  float aq[NQ] = {};
  const int last_key = causal ? min(S, row0 + BR) : S;
  for (int key0 = 0; key0 < last_key; key0 += BC) {
    __syncthreads();
    load_tile<BC, E, PE>(t.ks, k, key0, S);
    load_tile<BC, EV, PV>(t.vs, v, key0, S);
    __syncthreads();
    tile_grads(t.ps, t.dss, t.qs, t.ks, t.dos, t.vs, t.lses, t.deltas, row0, key0, L, S, scale_log2, causal, mask,
               mask_kind, msr, msc);
    __syncthreads();
    accumulate<NQ, BR, E, BC, PB, 1, PE>(aq, t.dss, t.ks);
  }
  store_tile<NQ, BR, E>(dq, aq, row0, L, scale);
}
